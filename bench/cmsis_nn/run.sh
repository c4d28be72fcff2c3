#!/usr/bin/env bash
# stformer's int8 kernels against CMSIS-NN's, in instructions, on QEMU's Cortex-M boards:
#   bash bench/cmsis_nn/run.sh CMSIS_NN_DIR OUT_DIR
# CMSIS_NN_DIR: a CMSIS-NN tree (github.com/ARM-software/CMSIS-NN: Include/, Source/), used as it
# is; stformer is the checkout this script lives in (its include/, and the board start-up files
# and sections.ld of targets/firmware/mps2/, linked through mps2-stack.ld or mps3-stack.ld here,
# which give the images a larger stack). For each board and optimisation level it builds one bare-metal
# image (bench.cpp with CMSIS-NN's sources, the same flags for both libraries), runs it under
# qemu-system-arm -icount shift=8, and writes
#   OUT_DIR/<board><level>/  log.txt (the image's output), bench.dis, bench.map, size.txt
#   OUT_DIR/versions.txt     the two libraries' commits, the compiler, QEMU, the flags
#   OUT_DIR/table.md         stformer / CMSIS-NN instructions per operation, board and level
# Environment: OPT (default "-O2 -Os -O3"), BOARDS (default "m4 m7 m55": mps2-an386 Cortex-M4,
# mps2-an500 Cortex-M7, mps3-an547 Cortex-M55 with Helium).
# Exit status: 0 when every image ran and every output matched; 1 when an image failed or an
# output did not match (table.md is still written); 2 for a bad command line or a missing tool.
# Needs Debian 12's gcc-arm-none-eabi (12.2), libnewlib-arm-none-eabi,
# libstdc++-arm-none-eabi-newlib, qemu-system-arm (7.2) and python3.
set -euo pipefail

usage="usage: bash bench/cmsis_nn/run.sh CMSIS_NN_DIR OUT_DIR  (env: OPT=\"-O2 -Os -O3\", BOARDS=\"m4 m7 m55\")"
if [ $# -ne 2 ]; then
  echo "$usage" >&2
  exit 2
fi
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
MPS2=$ROOT/targets/firmware/mps2
OPT=${OPT:--O2 -Os -O3}
BOARDS=${BOARDS:-m4 m7 m55}

# The CMSIS-NN sources the benchmark calls, and those they call.
CMSIS_SOURCES="
FullyConnectedFunctions/arm_fully_connected_per_channel_s8.c
FullyConnectedFunctions/arm_vector_sum_s8.c
FullyConnectedFunctions/arm_batch_matmul_s8.c
ConvolutionFunctions/arm_convolve_1x1_s8_fast.c
NNSupportFunctions/arm_nn_vec_mat_mult_t_per_ch_s8.c
NNSupportFunctions/arm_nn_vec_mat_mult_t_s8.c
NNSupportFunctions/arm_nn_mat_mult_nt_t_s8.c
NNSupportFunctions/arm_nn_mat_mult_nt_t_s8_s32.c
SoftmaxFunctions/arm_softmax_s8.c
SoftmaxFunctions/arm_nn_softmax_common_s8.c
"

if [ ! -d "$1" ]; then
  echo "run.sh: CMSIS_NN_DIR $1: no such folder (give the top of a CMSIS-NN tree, with Include/ and Source/)" >&2
  exit 2
fi
CMSIS=$(cd "$1" && pwd)
if [ ! -f "$CMSIS/Include/arm_nnfunctions.h" ]; then
  echo "run.sh: CMSIS_NN_DIR $CMSIS: no Include/arm_nnfunctions.h: not the top of a CMSIS-NN tree" >&2
  exit 2
fi
for src in $CMSIS_SOURCES; do
  if [ ! -f "$CMSIS/Source/$src" ]; then
    echo "run.sh: CMSIS_NN_DIR $CMSIS: no Source/$src (a CMSIS-NN too old for this comparison, which needs arm_batch_matmul_s8 and arm_vector_sum_s8's bias argument)" >&2
    exit 2
  fi
done
for tool in arm-none-eabi-gcc arm-none-eabi-g++ arm-none-eabi-objdump arm-none-eabi-size qemu-system-arm python3; do
  command -v "$tool" > /dev/null || { echo "run.sh: $tool not found (Debian 12: gcc-arm-none-eabi, libnewlib-arm-none-eabi, libstdc++-arm-none-eabi-newlib, qemu-system-arm, python3)" >&2; exit 2; }
done
levels=()
for level in $OPT; do
  case $level in
    -O0 | -O1 | -O2 | -O3 | -Os | -Oz | -Og | -Ofast) levels+=("$level") ;;
    *) echo "run.sh: OPT: $level is not an optimisation level (-O2, -Os, -O3, ...)" >&2; exit 2 ;;
  esac
done
for board in $BOARDS; do
  case $board in
    m4 | m7 | m55) ;;
    *) echo "run.sh: BOARDS: unknown board $board (m4, m7, m55)" >&2; exit 2 ;;
  esac
done

OUT=$(realpath -m "$2")
case "$OUT" in
  "$ROOT" | "$ROOT"/include* | "$ROOT"/targets* | "$HERE" | "$CMSIS" | "$CMSIS"/*) echo "run.sh: OUT_DIR $OUT: give a folder of its own" >&2; exit 2 ;;
esac
mkdir -p "$OUT"
# only what this script writes is replaced
rm -f "$OUT/table.md" "$OUT/versions.txt"

commit() {  # the tree's commit: git's when it is a checkout's top, else a COMMIT file there (a tree copied out of git)
  if [ "$(git -C "$1" rev-parse --show-toplevel 2> /dev/null)" = "$1" ]; then
    git -C "$1" rev-parse --short HEAD
  elif [ -f "$1/COMMIT" ]; then
    echo "$(head -1 "$1/COMMIT") (its COMMIT file)"
  else
    echo "unknown (not a git checkout)"
  fi
}
{
  echo "stformer: $(git -C "$ROOT" rev-parse --short HEAD 2> /dev/null || echo unknown)$(git -C "$ROOT" status --porcelain -- include 2> /dev/null | grep -q . && echo ' with uncommitted changes in include/' || true)"
  echo "CMSIS-NN: $(commit "$CMSIS")"
  arm-none-eabi-gcc --version | head -1
  qemu-system-arm --version | head -1
  echo "OPT=${levels[*]} BOARDS=$BOARDS"
} > "$OUT/versions.txt"

failed=()
for board in $BOARDS; do
  case $board in
    m4) ARCH="-mcpu=cortex-m4 -mfpu=fpv4-sp-d16 -mfloat-abi=hard" MACHINE=mps2-an386 LD=mps2-stack.ld HZ=25000000 NAME="mps2-an386 (Cortex-M4)" ;;
    m7) ARCH="-mcpu=cortex-m7 -mfpu=fpv5-d16 -mfloat-abi=hard" MACHINE=mps2-an500 LD=mps2-stack.ld HZ=25000000 NAME="mps2-an500 (Cortex-M7)" ;;
    m55) ARCH="-mcpu=cortex-m55 -mfloat-abi=hard" MACHINE=mps3-an547 LD=mps3-stack.ld HZ=32000000 NAME="mps3-an547 (Cortex-M55)" ;;
  esac
  for level in "${levels[@]}"; do
    B="$OUT/$board$level"
    rm -rf "$B"
    mkdir -p "$B/obj"
    echo "== $board $level: $NAME" >&2
    # the same code generation for both libraries; CMSIS-NN picks its DSP (M4, M7) or Helium
    # (M55) paths from __ARM_FEATURE_DSP / __ARM_FEATURE_MVE, stformer its backend likewise
    COMMON="$ARCH -mthumb $level -ffunction-sections -fdata-sections -ffp-contract=off"
    objs=()
    for src in $CMSIS_SOURCES; do
      o="$B/obj/$(basename "$src" .c).o"
      nice -n 10 arm-none-eabi-gcc $COMMON -std=gnu11 -I"$CMSIS/Include" -c "$CMSIS/Source/$src" -o "$o"
      objs+=("$o")
    done
    # shellcheck disable=SC2206  # COMMON is a list of flags, split on purpose
    CXXFLAGS=($COMMON -std=c++20 -fno-exceptions -fno-rtti -DSTFORMER_SIMD=0 -DBOARD_HZ=$HZ "-DBOARD_NAME=\"$NAME\"")
    nice -n 10 arm-none-eabi-g++ "${CXXFLAGS[@]}" -I"$ROOT/include" -I"$CMSIS/Include" -I"$MPS2" -c "$HERE/bench.cpp" -o "$B/obj/bench.o"
    nice -n 10 arm-none-eabi-g++ "${CXXFLAGS[@]}" -I"$MPS2" -c "$MPS2/startup.cpp" -o "$B/obj/startup.o"
    # the board's memory map with a larger stack (mps2-stack.ld, mps3-stack.ld), and the
    # firmware's sections.ld from targets/firmware/mps2/; --fatal-warnings: ld only warns of a
    # region sections.ld names that the script does not declare (STACK), and puts it at 0,
    # where the stack's painting and pushes overwrite the code
    nice -n 10 arm-none-eabi-g++ $ARCH -mthumb --specs=nosys.specs -nostartfiles -Wl,--gc-sections -Wl,--fatal-warnings -L"$MPS2" -T"$HERE/$LD" \
      -Wl,-Map="$B/bench.map" "$B/obj/startup.o" "$B/obj/bench.o" "${objs[@]}" -lm -o "$B/bench.elf"
    # (-m armv8.1-m.main: binutils 2.40 shows Helium instructions as coprocessor ones without it)
    DISARCH=""
    [ "$board" = m55 ] && DISARCH="-m armv8.1-m.main"
    arm-none-eabi-objdump -d --no-show-raw-insn $DISARCH "$B/bench.elf" > "$B/bench.dis"
    arm-none-eabi-size "$B/bench.elf" > "$B/size.txt"
    rm -rf "$B/obj"
    if ! timeout 1200 nice -n 10 qemu-system-arm -machine $MACHINE -nographic -monitor none -semihosting -icount shift=8 \
      -kernel "$B/bench.elf" > "$B/log.txt" 2>&1; then
      grep -v '^RESULT|' "$B/log.txt" | grep -v '^MATCH|.*|0|[0-9]*|0$' >&2 || true
      echo "$board $level: the image failed (a mismatch, a stack overflow or a fault; $B/log.txt)" >&2
      failed+=("$board$level")
    fi
  done
done

status=0
python3 "$HERE/table.py" "$OUT" "$BOARDS" "${levels[*]}" > "$OUT/table.md" || status=1
cat "$OUT/table.md"
if [ ${#failed[@]} -gt 0 ] || [ $status -ne 0 ]; then
  echo "run.sh: FAILED${failed:+ (images: ${failed[*]})}: see table.md's checks and the logs" >&2
  exit 1
fi
