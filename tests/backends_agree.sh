#!/bin/sh
# backends_agree.sh SCALAR_DUMP SIMD_DUMP: the plain C++ and the SIMD builds agree.
set -e
ref=$(mktemp)
trap 'rm -f "$ref"' EXIT
"$1" "$ref"
"$2" --compare "$ref"
