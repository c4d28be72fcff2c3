#!/bin/sh
# exported_c_api.sh [--firmware] DIR OUT_DIR COMPILER FLAGS... -- IO_SOURCE: the C API of models the
# exporter traced (DIR: where tests/torch/make_traced.py wrote them), made by stformer-c-api from
# the header and the checkpoint alone (the header names the type, the rows and the causal mask),
# built, and run on the example's sequences against PyTorch (exported_c_api.cpp). Also the link
# order: a --compile command that names the library before the program links.
# --firmware: their integer models and firmware instead (exported_firmware.sh).
set -eu
firmware=no
[ "$1" != --firmware ] || { firmware=yes; shift; }
dir=$1 out=$2
shift 2
cxx=""
while [ "$1" != "--" ]; do cxx="$cxx $1"; shift; done
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$out" && mkdir -p "$out"
# shellcheck disable=SC2086
$cxx -O1 -c "$2" -o "$out/io.o"
ar rcs "$out/libio.a" "$out/io.o"
if [ "$firmware" = yes ]; then
  . "$here/exported_firmware.sh"
  exit 0
fi
for name in tvit gpt pbert; do
  # the library first, as a user writes it: stformer-c-api repeats it after the program
  sh "$here/../../src/stformer-c-api" --header "$dir/$name.hpp" --checkpoint "$dir/$name.safetensors" --name "$name" --out "$out" \
    --compile "$cxx -O1 -pthread -L$out -lio"
  grep -q "define $(echo "$name" | tr a-z A-Z)_CAUSAL 1" "$out/$name.h" && causal=yes || causal=no
  grep -q "define $(echo "$name" | tr a-z A-Z)_KEYS 1" "$out/$name.h" && keys=yes || keys=no
  [ "$keys" = "$(grep -q -- '--keys' "$dir/$name.hpp" && echo yes || echo no)" ] || { echo "FAIL: $name: NAME_KEYS is not the header's"; exit 1; }
  echo "$name: C API written from the header alone (causal: $causal, key mask: $keys)"
  # shellcheck disable=SC2086
  $cxx -O1 -pthread -I"$dir" -I"$out" -DHEADER="\"$name.h\"" -DAPI="${name}_predict" -DAPI_KEYS="${name}_predict_keys" "$here/exported_c_api.cpp" "$out/$name.cpp" "$out/io.o" \
    -o "$out/$name"
  ${STFORMER_RUN:-} "$out/$name" "$dir/$name.example.safetensors"
done
