#!/usr/bin/env bash
# The whole test suite, from a fresh Debian 12 machine: installs what is missing, then builds
# and runs `meson test` for the default kernel backend, x86-64-v3 (AVX2), with the Google
# Benchmark programs so that they keep compiling, and the tests that depend on the kernels
# (meson's suite 'backend': the kernels, blocks, models, training, int8, models from images and
# the backends' agreement) for the plain C++ backend (none, no xsimd) and, when this CPU has
# AVX-512, x86-64-v4. Warnings are errors. Then:
# - the suite again with AddressSanitizer and UndefinedBehaviorSanitizer (no report allowed),
#   all but the suite 'compile' (tests that run the compiler themselves, the same in every build)
#   and the tests of numbers only that tests/meson.build leaves out of sanitized builds;
# - the tests that run the thread pool (threads, max_value, language_model: the pool itself,
#   training on two lanes and two threads) with ThreadSanitizer, no report allowed;
# - the libFuzzer programs (clang) for 60 seconds each (tests/fuzz);
# - projects that use stformer as users add it: installed (pkg-config, CMake) and as a meson
#   subproject (tests/consumers), with the first backend's trained model;
# - the bare-metal firmware (targets/firmware/mps2), cross-built for Cortex-M7 and Cortex-M4 with
#   the first backend's trained model, run on QEMU's MPS2 boards against that build's predictions
#   (float, and int8 with the DSP and the plain kernels); the STM32F405 (netduinoplus2) with the
#   firmware written in C too; the Cortex-M55 with Helium (mps3-an547), float and int8, and
#   the plain kernels beside them; training on the Cortex-M7 (2 sets at a time) and on the
#   STM32F405 (1 set at a time, moments and stack in its CCM) against the plain C++ build's steps;
#   and the int8 model (targets/firmware/microbit) on a Cortex-M0 without an FPU (QEMU's
#   micro:bit): the host's integers exactly, and no soft-float routine in the image;
# - one image of the comparison with CMSIS-NN (bench/cmsis_nn: the Cortex-M4 at -O3), CMSIS-NN's
#   tree from CMSIS_NN_DIR or ../shared/peers/cmsis-nn/cmsis-nn beside the checkout (skipped, and
#   said, when neither exists);
# - ONNX Runtime 1.30 (its library from npm, its C header from ORT_INCLUDE_DIR or
#   ../shared/peers/onnxruntime/include) on the ONNX models the importer's test read, against
#   the graphs' outputs stformer gives;
# - the suite 'backend' cross-built for aarch64 with xsimd's NEON kernels (compiled in the background
#   from the start, at the lowest CPU priority), run under qemu-aarch64.
set -euo pipefail
cd "$(dirname "$0")/.."
# python3-torch: the PyTorch parity test; python3-torchvision: the exporter's tests (torchvision's
# VisionTransformer), python3-onnx: ONNX files; clang: the fuzzers; the Arm toolchains and QEMU:
# the firmware and aarch64; cmake and make: the projects that use stformer (tests/consumers); npm:
# ONNX Runtime's library (onnxruntime-node)
bash targets/install-deps.sh python3-torch python3-torchvision python3-onnx clang libclang-rt-14-dev gcc-arm-none-eabi libstdc++-arm-none-eabi-newlib \
  libnewlib-arm-none-eabi qemu-system-arm g++-aarch64-linux-gnu qemu-user cmake make
command -v npm >/dev/null || bash targets/install-deps.sh npm  # (a machine may have it from another package: nodejs's own)

# stage NAME: ends the stage under way, printing its time, and starts NAME ("" at the end).
stage_name="install (apt-get what is missing)" stage_start=0  # SECONDS counts from the start of this script
stage() {
  echo "--- $stage_name: $((SECONDS - stage_start)) s (total $SECONDS s)"
  stage_name=$1 stage_start=$SECONDS
  [ -z "$1" ] || echo "=== $1"
}

# setup DIR ARGS...: configures DIR (once; later runs reuse it).
setup() {
  local dir=$1
  shift
  [ -f "$dir/build.ninja" ] || meson setup "$dir" "$@"
}

# The aarch64 stage's programs (the suite 'backend', as its meson test would build them) compile
# from here on in the background at the lowest CPU priority: the stages before it leave a core
# idle in their single-threaded parts (the firmware's scripts and boards, the last tests of a
# suite), which this build takes; otherwise it yields the CPU to them. The stage waits for it,
# builds what is left and runs the tests; a failure here is left to its meson test to report.
setup build-test-aarch64 --cross-file targets/cross/aarch64-linux-gnu.ini -Dsimd=neon -Dbench=disabled -Dwerror=true
mapfile -t aarch64_targets < <(python3 - build-test-aarch64 <<'EOF'
import json, os, sys
info = os.path.join(sys.argv[1], 'meson-info')
files = {t['id']: t['filename'] for t in json.load(open(os.path.join(info, 'intro-targets.json')))}
tests = json.load(open(os.path.join(info, 'intro-tests.json')))
for d in sorted({d for t in tests if any(s.endswith(':backend') for s in t['suite']) for d in t['depends']}):
    for f in files[d]:
        print(os.path.relpath(f, os.path.abspath(sys.argv[1])))
EOF
)
aarch64_build=
if [ ${#aarch64_targets[@]} -gt 0 ]; then
  nice -n 19 ninja -C build-test-aarch64 -j"$(nproc)" "${aarch64_targets[@]}" </dev/null >build-test-aarch64/background-build.log 2>&1 &
  aarch64_build=$!
  trap 'kill "$aarch64_build" 2>/dev/null || true' EXIT  # when a stage fails before the last
fi

backends=(x86-64-v3 none)
grep -q avx512f /proc/cpuinfo && backends+=(x86-64-v4)
for simd in "${backends[@]}"; do
  dir=build-test-$simd
  if [ "$simd" = x86-64-v3 ]; then bench=auto suite=() what="the whole suite"
  else bench=disabled suite=(--suite backend) what="the suite 'backend'"; fi
  stage "backend $simd ($dir): $what"
  options=(-Dsimd="$simd" -Dwerror=true -Dbench=$bench -Dbench_compile_only=true)  # the benchmarks compiled, not run
  if [ -f "$dir/build.ninja" ]; then meson configure "$dir" "${options[@]}"; else meson setup "$dir" "${options[@]}"; fi
  [ $bench = disabled ] || ninja -C "$dir"  # all targets; meson test alone builds what its tests need
  meson test -C "$dir" "${suite[@]}" --print-errorlogs
done
ninja -C build-test-none targets/firmware/train_reference targets/firmware/generation_reference  # the firmware's references, below
echo "all backends passed: ${backends[*]}"

stage "sanitizers: address, undefined (build-test-sanitize)"
# UBSan's pointer-overflow and alignment checks and ASan's use-after-scope are left out: they take
# a quarter and a third of this build's compile time, and the fuzzers (below) run the file
# readers, where unaligned reads could occur, with every check.
setup build-test-sanitize -Db_sanitize=address,undefined \
  -Dcpp_args="['-fno-sanitize=pointer-overflow,alignment', '-fno-sanitize-address-use-after-scope']" \
  -Doptimization=1 -Dsimd=x86-64-v3 -Dbench=disabled -Dwerror=true
ASAN_OPTIONS=detect_leaks=1:strict_string_checks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
  meson test -C build-test-sanitize --no-suite compile --print-errorlogs --timeout-multiplier 3
echo "sanitizers passed"

stage "ThreadSanitizer: the tests that run the thread pool (build-test-tsan)"
setup build-test-tsan -Db_sanitize=thread -Doptimization=1 -Dsimd=x86-64-v3 -Dbench=disabled -Dwerror=true
ninja -C build-test-tsan tests/test_threads tests/test_max_value tests/test_lm targets/max_value/max_value
TSAN_OPTIONS=halt_on_error=1 meson test -C build-test-tsan --no-rebuild --print-errorlogs --timeout-multiplier 3 threads max_value language_model
echo "ThreadSanitizer passed"

stage "fuzzers, 60 s each (build-test-fuzz)"
[ -f build-test-fuzz/build.ninja ] || CXX=clang++ meson setup build-test-fuzz -Dfuzz=true -Db_sanitize=address,undefined -Dsimd=none
ninja -C build-test-fuzz
FUZZ_SECONDS=60 meson test -C build-test-fuzz --suite fuzz --print-errorlogs
echo "fuzzers passed"

stage "firmware headers (build-firmware-headers)"
bash targets/firmware/make-headers.sh "build-test-${backends[0]}" build-firmware-headers build-test-none
stage "other projects using stformer: make + pkg-config, CMake, meson subproject (tests/consumers)"
bash tests/consumers/run.sh "build-test-${backends[0]}" build-firmware-headers
for cpu in m7 m4; do
  dir=build-test-cortex-$cpu
  stage "firmware, Cortex-${cpu^^} ($dir)"
  setup "$dir" --cross-file "targets/cross/cortex-$cpu.ini" -Dsimd=none -Dwerror=true -Dfirmware="$PWD/build-firmware-headers"
  ninja -C "$dir"
  meson test -C "$dir" --print-errorlogs
done
stage "firmware, STM32F405 on QEMU's netduinoplus2 (build-test-netduinoplus2)"
setup build-test-netduinoplus2 --cross-file targets/cross/netduinoplus2.ini -Dsimd=none -Dwerror=true -Dfirmware="$PWD/build-firmware-headers"
ninja -C build-test-netduinoplus2
meson test -C build-test-netduinoplus2 --print-errorlogs
stage "firmware, Cortex-M55 with Helium on QEMU's mps3-an547 (build-test-cortex-m55)"
setup build-test-cortex-m55 --cross-file targets/cross/cortex-m55.ini -Dsimd=none -Dwerror=true -Dfirmware="$PWD/build-firmware-headers"
ninja -C build-test-cortex-m55
meson test -C build-test-cortex-m55 --print-errorlogs
stage "int8 firmware, Cortex-M0 without FPU, on QEMU's micro:bit (build-test-cortex-m0)"
setup build-test-cortex-m0 --cross-file targets/cross/cortex-m0.ini -Dsimd=none -Dwerror=true -Dfirmware="$PWD/build-firmware-headers"
ninja -C build-test-cortex-m0
meson test -C build-test-cortex-m0 --print-errorlogs
echo "firmware passed on Cortex-M7 (and training), Cortex-M4, the STM32F405 (and in C, and training) and the Cortex-M55 (Helium), the int8 firmware on all and on Cortex-M0"

# One image of the comparison with CMSIS-NN (bench/cmsis_nn, docs/benchmarks.md): the
# Cortex-M4 at -O3, whose stack runs deepest. run.sh fails when the image faults, an output
# differs or a count is missing. CMSIS-NN is a peer's tree, not part of this repository:
# CMSIS_NN_DIR, by default beside the checkout in ../shared/peers/cmsis-nn (its cmsis-nn/).
cmsis_peer=$(cd .. && pwd)/shared/peers/cmsis-nn
stage "CMSIS-NN comparison, Cortex-M4 -O3 on QEMU's mps2-an386 (build-test-cmsis-nn)"
if [ -n "${CMSIS_NN_DIR:-}" ] || [ -d "$cmsis_peer" ]; then
  OPT=-O3 BOARDS=m4 bash bench/cmsis_nn/run.sh "${CMSIS_NN_DIR:-$cmsis_peer/cmsis-nn}" build-test-cmsis-nn
  echo "CMSIS-NN comparison passed"
else
  echo "CMSIS-NN comparison skipped: no $cmsis_peer (set CMSIS_NN_DIR to a CMSIS-NN tree to run it)"
fi

# ONNX Runtime 1.30 on the ONNX files the first backend's torch_onnx imported: each output within
# 1e-5 of the graph's, which stformer's headers give (tests/torch/onnx_ort.sh). ORT's C header from
# ORT_INCLUDE_DIR or ../shared/peers/onnxruntime/include beside the checkout, its library from npm
# (skipped, and said, without the header, npm or the models).
ort_peer=$(cd .. && pwd)/shared/peers/onnxruntime/include
stage "ONNX Runtime on the imported ONNX models (build-test-ort)"
if { [ -n "${ORT_INCLUDE_DIR:-}" ] || [ -f "$ort_peer/onnxruntime_c_api.h" ]; } && command -v npm >/dev/null &&
  ls "build-test-${backends[0]}"/tests/onnx_*.onnx >/dev/null 2>&1; then
  bash tests/torch/onnx_ort.sh "${ORT_INCLUDE_DIR:-$ort_peer}" "build-test-${backends[0]}/tests" build-test-ort
else
  echo "ONNX Runtime comparison skipped: no $ort_peer (set ORT_INCLUDE_DIR), npm or imported models"
fi

stage "aarch64, NEON kernels, under qemu-aarch64 (build-test-aarch64)"
[ -z "$aarch64_build" ] || wait "$aarch64_build" || echo "(the background build failed: meson test builds again and reports)"
meson test -C build-test-aarch64 --suite backend --print-errorlogs --timeout-multiplier 3
echo "aarch64 passed"
stage ""
