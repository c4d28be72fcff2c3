#!/bin/sh
# abi_guard.sh COMPILER INCLUDE_DIR: objects built with different stformer configurations do
# not link together (the ABI tag, stformer/core/config.hpp), and with the same one they do.
# tests/abi/model.cpp defines a model; tests/abi/main.cpp uses it.
cxx=$1 inc=$2 dir=$(dirname "$0")/abi tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
plain="-DSTFORMER_SIMD=0"
avx2="-DSTFORMER_SIMD=1 -DXTENSOR_USE_XSIMD -march=x86-64-v3"
status=0
build() {  # NAME FLAGS-OF-MODEL FLAGS-OF-MAIN
  $cxx -std=c++20 -O1 -I"$inc" $2 -c "$dir/model.cpp" -o "$tmp/model.o" &&
    $cxx -std=c++20 -O1 -I"$inc" $3 -c "$dir/main.cpp" -o "$tmp/main.o" &&
    $cxx "$tmp/model.o" "$tmp/main.o" -o "$tmp/$1" -pthread 2>"$tmp/link.err"
}
if build same "$plain" "$plain" && "$tmp/same" >/dev/null; then echo "ok   the same configuration links and runs"
else echo "FAIL: the same configuration does not link or run"; cat "$tmp/link.err"; status=1; fi
if build mixed "$avx2" "$plain"; then echo "FAIL: objects of two configurations linked"; status=1
elif grep -q "undefined reference to .*abi_scalar_plain" "$tmp/link.err"; then
  echo "ok   AVX2 and plain objects do not link: $(grep -m1 -o "undefined reference to [^(]*" "$tmp/link.err")"
else echo "FAIL: the mixed link failed for another reason:"; cat "$tmp/link.err"; status=1; fi
exit $status
