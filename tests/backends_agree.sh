#!/bin/sh
# backends_agree.sh SCALAR_DUMP SIMD_DUMP: the plain C++ and the SIMD builds agree.
set -e
ref=$(mktemp)
trap 'rm -f "$ref"' EXIT
# STFORMER_RUN: the cross build's wrapper (qemu-aarch64 ...), empty on the build machine
$STFORMER_RUN "$1" "$ref"
$STFORMER_RUN "$2" --compare "$ref"
