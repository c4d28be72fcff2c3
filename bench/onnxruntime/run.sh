#!/usr/bin/env bash
# stformer against ONNX Runtime on this machine's CPU, forward-only cases, one table:
#   bash bench/onnxruntime/run.sh ORT_INCLUDE_DIR OUT_DIR [compare_ort.py options: --rounds N --repetitions N --only SUBSTRING --tolerance T]
# ORT_INCLUDE_DIR: a folder with ONNX Runtime's C API header, onnxruntime_c_api.h (used as it is;
# ort_bench asks the library for that header's API version, which every later library serves).
# OUT_DIR: a folder outside this checkout for everything the script makes:
#   OUT_DIR/npm/          onnxruntime-node from npm (npm install --ignore-scripts), whose package
#                         holds ONNX Runtime's shared library (bin/napi-v6/linux/x64 or linux/arm64);
#                         installed when missing
#   OUT_DIR/ort_bench     ort_bench.cpp built against ORT_INCLUDE_DIR and that library (rpath)
#   OUT_DIR/stformer-build/  a meson build (-Dsimd=native -Dbench=enabled) for bench_stformer,
#                         unless STFORMER_BUILD names one
#   OUT_DIR/models/       the models exported from PyTorch (ONNX), their inputs and PyTorch's outputs
#   OUT_DIR/table.md      the table printed at the end
# Environment: ORT_VERSION (onnxruntime-node's version, default 1.30.0); ORT_LIB (a
# libonnxruntime.so.1 to use instead of npm's); STFORMER_BUILD (an existing meson build of this
# checkout with the benchmarks enabled); JOBS (ninja's -j for the stformer build).
# Exit status: 0 when every case ran and ORT's outputs matched PyTorch's; 1 when an output did
# not match or a step failed; 2 for a bad command line or a missing tool.
# Needs g++, npm (unless ORT_LIB is given), Debian's python3-torch (/usr/bin/python3), and, to
# build bench_stformer, meson, ninja and stformer's build dependencies.
set -euo pipefail

usage="usage: bash bench/onnxruntime/run.sh ORT_INCLUDE_DIR OUT_DIR [--rounds N] [--repetitions N] [--only SUBSTRING] [--tolerance T]"
if [ $# -lt 2 ]; then
  echo "$usage" >&2
  exit 2
fi
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
ORT_VERSION=${ORT_VERSION:-1.30.0}

if [ ! -f "$1/onnxruntime_c_api.h" ]; then
  echo "run.sh: ORT_INCLUDE_DIR $1: no onnxruntime_c_api.h there (give the folder of ONNX Runtime's C API header)" >&2
  exit 2
fi
INC=$(cd "$1" && pwd)
OUT=$(realpath -m "$2")
case "$OUT/" in
  "$ROOT"/*) echo "run.sh: OUT_DIR $OUT: inside this checkout; give a folder outside it (ONNX Runtime is not copied into the repository)" >&2; exit 2 ;;
esac
shift 2

for tool in g++ /usr/bin/python3; do
  command -v "$tool" > /dev/null || { echo "run.sh: $tool not found (Debian 12: g++, python3-torch)" >&2; exit 2; }
done
/usr/bin/python3 -c 'import torch' 2> /dev/null || { echo "run.sh: /usr/bin/python3 cannot import torch (Debian 12: apt-get install python3-torch)" >&2; exit 2; }
mkdir -p "$OUT"

# ONNX Runtime's shared library: ORT_LIB, or npm's (ort_lib.sh)
. "$HERE/ort_lib.sh"
ort_lib "$OUT" "$ORT_VERSION"

# ONNX Runtime's side
g++ -std=c++17 -O2 -Wall -Wextra -I"$INC" "$HERE/ort_bench.cpp" -o "$OUT/ort_bench" "$LIB" -Wl,-rpath,"$(dirname "$LIB")"

# stformer's side
if [ -n "${STFORMER_BUILD:-}" ]; then
  BUILD=$(realpath "$STFORMER_BUILD")
else
  BUILD=$OUT/stformer-build
  for tool in meson ninja; do
    command -v "$tool" > /dev/null || { echo "run.sh: $tool not found (Debian 12: meson ninja-build; or give a build in STFORMER_BUILD)" >&2; exit 2; }
  done
  [ -f "$BUILD/build.ninja" ] || (cd "$ROOT" && meson setup "$BUILD" -Dsimd=native -Dbench=enabled >&2)
fi
ninja -C "$BUILD" ${JOBS:+-j "$JOBS"} bench/bench_stformer >&2

status=0
/usr/bin/python3 "$HERE/compare_ort.py" --stformer-build "$BUILD" --ort-bench "$OUT/ort_bench" --out "$OUT" "$@" > "$OUT/table.md" || status=$?
cat "$OUT/table.md"
if [ $status -ne 0 ]; then
  echo "run.sh: FAILED (status $status): see the messages above" >&2
  exit 1
fi
