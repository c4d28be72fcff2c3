#!/bin/sh
# compile_fail.sh COMPILER ARGS... -- FILE: compiles FILE with -DCASE=0 (must succeed) and with
# each CASE below (must fail with the given static_assert message).
cmd=""
while [ "$1" != "--" ]; do cmd="$cmd '$1'"; shift; done
shift
file=$1
status=0
check() {  # case, expected message
  out=$(eval "$cmd -fsyntax-only -DCASE=$1 '$file'" 2>&1)
  if [ "$1" = 0 ]; then
    if [ -n "$out" ]; then echo "control case does not compile:"; echo "$out" | head -20; status=1; fi
    return
  fi
  if echo "$out" | grep -qF "$2"; then echo "case $1: rejected with \"$2\""
  else echo "case $1: expected \"$2\", got:"; echo "$out" | grep -m3 "error"; status=1; fi
}
check 0 ""
# the library also compiles as firmware does: no exceptions, no RTTI, warnings as errors
out=$(eval "$cmd -fsyntax-only -fno-exceptions -fno-rtti -Wall -Wextra -Werror -DCASE=0 '$file'" 2>&1) ||
  { echo "does not compile with -fno-exceptions -fno-rtti:"; echo "$out" | head -20; status=1; }
check 1 "PMA: input set X [B, N, D] and the block's width D differ"
check 2 "Linear: input rows x [..., In] do not match Acts<L...> and the weight [Out, In]"
check 3 "MultiHeadAttention: keys/values xkv [B, Nk, Dkv] do not match the block's key width Dkv"
check 4 "MultiHeadAttention: model width D must be divisible by the number of heads H"
check 5 "DecoderBlock: encoder memory m [B, M, D] and the block's width D differ"
check 6 "EncoderBlock: input rows x [B, N, D] and the block's width D differ"
check 7 "PointerModel: input set x [B, N, In] and the model's input width In differ"
exit $status
