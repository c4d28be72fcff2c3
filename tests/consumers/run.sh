#!/usr/bin/env bash
# run.sh BUILD DATA: stformer used by three other projects, as users add it (README, "Adding it
# to a project"). BUILD is a configured native build of stformer; DATA holds pointer.safetensors,
# sets.safetensors and expected.safetensors, qpointer.safetensors and qexpected.safetensors (its
# int8 version and predictions; targets/firmware/make-headers.sh writes them all).
#  1. `meson install` of BUILD into a staging folder: headers, stformer_io, checkpoint_header,
#     stformer-c-api, stformer.pc / stformer-io.pc and the CMake package; the installed
#     stformer-c-api writes the model's image from its header and a checkpoint; the installed
#     stformer-firmware runs its integer model on QEMU; the installed stformer-import reads an
#     ONNX file written here.
#  2. a Makefile with pkg-config, 3. a CMake project with find_package(stformer), both against
#     that install (the Makefile also against BUILD itself, through its uninstalled .pc files),
#     4. a meson project with stformer as a subproject (only the library built). 3 and 4 build in
#     the background beside the others, their output printed when they end.
# Each builds tests/consumers/main.cpp, which loads the checkpoint and checks its predictions.
#  5. C programs (tests/consumers/c) using the pointer and the set model, float and int8,
#     through the C API that the installed stformer-c-api writes (tasks/max_value_models.hpp's types),
#     linked by the C compiler without libstdc++. The set model is trained here for 3
#     iterations (BUILD's max_value), quantized and predicted on the host to compare with.
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "$1" && pwd) data=$(cd "$2" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
args=("$data/pointer.safetensors" "$data/sets.safetensors" "$data/expected.safetensors")
option() { meson introspect "$build" --buildoptions | /usr/bin/python3 -c "import json, sys; print(next(o['value'] for o in json.load(sys.stdin) if o['name'] == '$1'))"; }
# project DIR: a copy of consumer DIR with main.cpp beside its build file
project() { cp -r "$src/tests/consumers/$1" "$tmp/$1" && cp "$src/tests/consumers/main.cpp" "$tmp/$1/"; }

echo "== meson install (staged in $tmp/stage)"
meson install -C "$build" --destdir "$tmp/stage" --no-rebuild --quiet
prefix=$(option prefix) libdir=$(option libdir)
root=$tmp/stage$prefix
for f in include/stformer/stformer.hpp include/stformer/io/checkpoint.hpp include/stformer/io/safetensors.hpp bin/checkpoint_header bin/stformer-c-api \
  bin/stformer-quantize bin/stformer-firmware bin/stformer-tools.sh share/stformer/firmware/model/main.cpp \
  bin/stformer-import share/stformer/python/stformer_onnx.py share/stformer/python/stformer_trace.py \
  "$libdir/libstformer_io.a" "$libdir/pkgconfig/stformer.pc" "$libdir/pkgconfig/stformer-io.pc" \
  "$libdir/cmake/stformer/stformerConfig.cmake" "$libdir/cmake/stformer/stformerConfigVersion.cmake"; do
  [ -e "$root/$f" ] || { echo "FAIL: not installed: $prefix/$f"; exit 1; }
done
echo "ok   installed: headers, libstformer_io.a, checkpoint_header, stformer-c-api, stformer-quantize, stformer-firmware, stformer-import, stformer.pc, stformer-io.pc, CMake package"
# generate NAME TYPE CHECKPOINT ARGS...: the installed generator, as a user runs it (pkg-config)
models=$src/tasks/max_value_models.hpp
generate() {
  PKG_CONFIG_PATH="$root/$libdir/pkgconfig" PKG_CONFIG_SYSROOT_DIR="$tmp/stage" sh "$root/bin/stformer-c-api" --header "$models" --type "$2" \
    --checkpoint "$3" --name "$1" "${@:4}" >/dev/null
}
generate weights max_value::PointerNet "${args[0]}" --image --out "$tmp"
grep -q "using Model = max_value::PointerNet;" "$tmp/weights.hpp"
echo "ok   the installed stformer-c-api writes the model's image"
# the installed stformer-firmware (its sources from share/stformer): the pointer model's integer
# model (DATA/qpointer.safetensors) on QEMU's Cortex-M4, the host's integers
if command -v arm-none-eabi-g++ >/dev/null && command -v qemu-system-arm >/dev/null; then
  PKG_CONFIG_PATH="$root/$libdir/pkgconfig" PKG_CONFIG_SYSROOT_DIR="$tmp/stage" sh "$root/bin/stformer-firmware" --header "$models" \
    --type max_value::PointerNet --rows 50 --checkpoint "$data/qpointer.safetensors" --int8 --name pointer --inputs "${args[1]}" --tensor x \
    --count 2 --board m4 --out "$tmp" >"$tmp/firmware.log" || { cat "$tmp/firmware.log"; exit 1; }
  echo "ok   the installed stformer-firmware: the pointer model in int8 on QEMU's Cortex-M4, the host's outputs"
fi

# the installed stformer-import (its Python from share/stformer): a small model written to ONNX here
if /usr/bin/python3 -c 'import torch, onnx' 2>/dev/null; then
  /usr/bin/python3 - "$tmp/small.onnx" <<'PY'
import sys, torch, torch.nn as nn
model = nn.Sequential(nn.Linear(6, 16), nn.LayerNorm(16), nn.GELU(), nn.Linear(16, 3)).eval()
torch.onnx.export(model, torch.randn(1, 5, 6), sys.argv[1], opset_version=17, input_names=["input"], output_names=["output"])
PY
  sh "$root/bin/stformer-import" "$tmp/small.onnx" small "$tmp/imported" >"$tmp/import.log" 2>&1 || { cat "$tmp/import.log"; exit 1; }
  grep -q "stformer::GELU<16>" "$tmp/imported/small.hpp" && [ -f "$tmp/imported/small.safetensors" ]
  echo "ok   the installed stformer-import: an ONNX file as a header and checkpoint"
fi

# CMake and the meson subproject build in the background beside the rest (each its own log,
# printed when it ends)
cmake_project() {
  project cmake
  cmake -S "$tmp/cmake" -B "$tmp/cmake/build" -DCMAKE_PREFIX_PATH="$root" -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$tmp/cmake/build" >/dev/null
  "$tmp/cmake/build/consumer" "${args[@]}"
}
meson_project() {
  project meson
  mkdir -p "$tmp/meson/subprojects/stformer"
  (cd "$src" && git ls-files -co --exclude-standard | grep -v '^build' | tar cf - -T -) | tar xf - -C "$tmp/meson/subprojects/stformer"
  meson setup "$tmp/meson/build" "$tmp/meson" >/dev/null
  if ninja -C "$tmp/meson/build" -t targets all | grep -q "max_value\|stformer_tests\|bench_stformer"; then
    echo "FAIL: the subproject builds more than the library"; exit 1
  fi
  ninja -C "$tmp/meson/build" >/dev/null
  "$tmp/meson/build/consumer" "${args[@]}"
}
declare -A pid
for part in cmake meson; do
  "${part}_project" >"$tmp/$part.log" 2>&1 &
  pid[$part]=$!
done

echo "== a Makefile with pkg-config"
project make
PKG_CONFIG_PATH="$root/$libdir/pkgconfig" PKG_CONFIG_SYSROOT_DIR="$tmp/stage" make -s -C "$tmp/make"
"$tmp/make/consumer" "${args[@]}"
echo "== the same Makefile against the build tree, not installed (meson-uninstalled/*.pc)"
rm -f "$tmp/make/consumer"
PKG_CONFIG_PATH="$build/meson-uninstalled" make -s -C "$tmp/make"
"$tmp/make/consumer" "${args[@]}"

echo "== C programs, through the models' C API"
mkdir "$tmp/c" && cp "$src"/tests/consumers/c/* "$models" "$tmp/c/"
generate max_value max_value::PointerNet "${args[0]}" --rows 50 --out "$tmp/c"
"$root/bin/checkpoint_header" --c "${args[1]}" "$tmp/c/sets.h"
"$root/bin/checkpoint_header" --c "${args[2]}" "$tmp/c/expected.h"
generate qmax 'stformer::Quantized<max_value::PointerNet>' "$data/qpointer.safetensors" --rows 50 --out "$tmp/c"
"$root/bin/checkpoint_header" --c "$data/qexpected.safetensors" "$tmp/c/qexpected.h"
mv=$build/targets/max_value/max_value
"$mv" train --model set --iterations 3 --checkpoint "$tmp/set.safetensors" >/dev/null
"$mv" quantize --checkpoint "$tmp/set.safetensors" --output "$tmp/qset.safetensors" --sets 100 >/dev/null
for m in set qset; do
  "$mv" predict --checkpoint "$tmp/$m.safetensors" --input "${args[1]}" --output "$tmp/${m}y.safetensors" >/dev/null
  type=max_value::SetNet
  [ "$m" = qset ] && type='stformer::Quantized<max_value::SetNet>'
  generate "$m" "$type" "$tmp/$m.safetensors" --rows 50 --out "$tmp/c"
  "$root/bin/checkpoint_header" --c "$tmp/${m}y.safetensors" "$tmp/c/${m}y.h"
done
PKG_CONFIG_PATH="$root/$libdir/pkgconfig" PKG_CONFIG_SYSROOT_DIR="$tmp/stage" make -s -j2 -C "$tmp/c"
for p in predict predict_int8 predict_set; do
  if ldd "$tmp/c/$p" | grep -q "libstdc++"; then echo "FAIL: the C program $p links libstdc++"; exit 1; fi
  "$tmp/c/$p"
done
for part in cmake meson; do
  status=0
  wait "${pid[$part]}" || status=$?
  case $part in cmake) echo "== CMake, find_package(stformer)" ;; meson) echo "== meson, stformer as a subproject" ;; esac
  cat "$tmp/$part.log"
  [ $status = 0 ] || { echo "FAIL: the $part project, exit status $status"; exit 1; }
done
echo "consumers passed: make + pkg-config, CMake, meson subproject, C through the C API"
