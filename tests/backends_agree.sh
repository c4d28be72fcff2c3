#!/bin/sh
# backends_agree.sh SCALAR_DUMP SIMD_DUMP...: the plain C++ build and each SIMD build agree (a
# build for instructions this CPU lacks exits with 77 and is skipped).
set -e
ref=$(mktemp)
trap 'rm -f "$ref"' EXIT
# STFORMER_RUN: the cross build's wrapper (qemu-aarch64 ...), empty on the build machine
$STFORMER_RUN "$1" "$ref"
shift
for dump in "$@"; do
  status=0
  $STFORMER_RUN "$dump" --compare "$ref" || status=$?
  if [ "$status" = 77 ]; then
    echo "skipped $dump: this CPU lacks its instructions"
  elif [ "$status" != 0 ]; then
    exit "$status"
  fi
done
