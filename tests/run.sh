#!/usr/bin/env bash
# The whole test suite, from a fresh Debian 12 machine: installs what is missing, then builds
# and runs `meson test` for each kernel backend: x86-64-v3 (the default, AVX2), none (plain
# C++, no xsimd) and, when this CPU has AVX-512, x86-64-v4. Warnings are errors. The
# Google Benchmark programs are built too, so that they keep compiling.
set -euo pipefail
cd "$(dirname "$0")/.."
bash targets/install-deps.sh python3-torch   # python3-torch: the PyTorch parity test
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
