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
# first CASE TEXT: the first line that says what went wrong ("In instantiation of" or
# "error:", after the chain of includes) holds TEXT
first() {
  out=$(eval "$cmd -fsyntax-only -DCASE=$1 '$file'" 2>&1 | grep -m1 -E "In instantiation of|error:")
  if echo "$out" | grep -qF "$2"; then echo "case $1: first lines name \"$2\""
  else echo "case $1: the first lines do not hold \"$2\":"; echo "$out"; status=1; fi
}
# flags ARGS TEXT: compiling the control with ARGS added (-UCASE: without -DSTFORMER_SIMD) fails with TEXT
flags() {
  if [ "$1" = "-UCASE" ]; then c=$(echo "$cmd" | sed "s/'-DSTFORMER_SIMD=0'//"); else c="$cmd $1"; fi
  out=$(eval "$c -fsyntax-only -DCASE=0 '$file'" 2>&1 | grep -m1 "error")
  if echo "$out" | grep -qF -- "$2"; then echo "flags $1: first error \"$2\""
  else echo "flags $1: expected \"$2\" first, got:"; echo "$out"; status=1; fi
}
check 0 ""
# the library also compiles as firmware does: no exceptions, no RTTI, warnings as errors
out=$(eval "$cmd -fsyntax-only -fno-exceptions -fno-rtti -Wall -Wextra -Werror -DCASE=0 '$file'" 2>&1) ||
  { echo "does not compile with -fno-exceptions -fno-rtti:"; echo "$out" | head -20; status=1; }
check 1 "Sequential: the model's input x is not the first step's Input<B, N>"
check 2 "Linear: input rows x must be [L..., In] (L... of Acts<L...>, In of the weight [Out, In])"
check 3 "MultiHeadAttention: keys/values xkv must be [B, Nk, Dkv]"
check 4 "MultiHeadAttention: model width D must be divisible by the number of heads H"
check 5 "WithMemory: the memory m must be [B, M, Dm]"
check 6 "Sequential: the model's input x is not the first step's Input<B, N>"
check 7 "Sequential: the model's input x is not the first step's Input<B, N>"
# the first line of the errors names the dimension that differs and both sizes
first 1 "ShapeMismatch<stformer::Dimension<2>, stformer::Expected<32>, stformer::Got<64> >"
first 2 "ShapeMismatch<stformer::Dimension<2>, stformer::Expected<2>, stformer::Got<3> >"
first 8 "ShapeMismatch<stformer::Dimension<1>, stformer::Expected<50>, stformer::Got<40> >"
first 9 "RankMismatch<stformer::Expected<1>, stformer::Got<2> >"
check 9 "cross_entropy: targets must be IdTensor<R>, one class per row of logits [..., C]"
check 10 "Sequential: a step's input is not the previous step's output"
first 10 "ShapeMismatch<stformer::Dimension<2>, stformer::Expected<32>, stformer::Got<16> >"
check 11 "Sequential: the model's input x is not the first step's Input<B, N>"
first 11 "ShapeMismatch<stformer::Dimension<2>, stformer::Expected<2>, stformer::Got<3> >"
check 12 "does not meet the step protocol: in place, it needs forward_in_place(h, scratch, const Mask<B, N>&, pool)"
first 12 "WrongMask<16>"
check 13 "does not meet the step protocol: in place, it needs forward_in_place(h, scratch, const Mask<B, N>&, pool)"
first 13 "NoMask<16>"
check 14 "a step's training record (the block in the instantiation above) does not meet the step protocol: it needs forward(p, x, const Mask<B, N>&)"
check 15 "DecodeOf: the model must declare itself causal"
check 16 "DecodeOf: a step (the block in the instantiation above) does not decode"
first 16 "MeanPool<16>"
check 17 "DecodeOf: a block over a memory decodes when its rows are causal"
check 18 "DecodeOf<Model, B, MaxLen, M>: a model over a memory decodes with its memory's rows M"
# the configuration: C++20 and the macros every translation unit must share
flags "-std=c++17" "stformer needs C++20: compile with -std=c++20"
flags "-UCASE" "STFORMER_SIMD is not defined. Compile every file that includes stformer with the same flags, from \`pkg-config --cflags stformer\`"
flags "-USTFORMER_SIMD -DSTFORMER_SIMD=1" "STFORMER_SIMD=1 needs -DXTENSOR_USE_XSIMD too"
exit $status
