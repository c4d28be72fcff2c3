#!/usr/bin/env bash
# The whole test suite, from a fresh Debian 12 machine: installs what is missing, then builds
# and runs `meson test` for each kernel backend: x86-64-v3 (the default, AVX2), none (plain
# C++, no xsimd) and, when this CPU has AVX-512, x86-64-v4. Warnings are errors. The
# Google Benchmark programs are built too, so that they keep compiling. Then the bare-metal
# firmware (targets/firmware/mps2) is cross-built for Cortex-M7 and Cortex-M4 with the first
# backend's trained model, and run on QEMU's MPS2 boards against that build's predictions.
set -euo pipefail
cd "$(dirname "$0")/.."
# python3-torch: the PyTorch parity test; the Arm toolchain and QEMU: the firmware
bash targets/install-deps.sh python3-torch gcc-arm-none-eabi libstdc++-arm-none-eabi-newlib libnewlib-arm-none-eabi qemu-system-arm
backends=(x86-64-v3 none)
grep -q avx512f /proc/cpuinfo && backends+=(x86-64-v4)
for simd in "${backends[@]}"; do
  dir=build-test-$simd
  echo "=== backend $simd ($dir)"
  if [ -f "$dir/build.ninja" ]; then
    meson configure "$dir" -Dsimd="$simd" -Dwerror=true
  else
    meson setup "$dir" -Dsimd="$simd" -Dwerror=true
  fi
  ninja -C "$dir"
  meson test -C "$dir" --print-errorlogs
done
echo "all backends passed: ${backends[*]}"

bash targets/firmware/make-headers.sh "build-test-${backends[0]}" build-firmware-headers
for cpu in m7 m4; do
  dir=build-test-cortex-$cpu
  echo "=== firmware, Cortex-${cpu^^} ($dir)"
  [ -f "$dir/build.ninja" ] || meson setup "$dir" --cross-file "targets/cross/cortex-$cpu.ini" -Dsimd=none -Dwerror=true \
    -Dfirmware="$PWD/build-firmware-headers"
  ninja -C "$dir"
  meson test -C "$dir" --print-errorlogs
done
echo "firmware passed on Cortex-M7 and Cortex-M4"
