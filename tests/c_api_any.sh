#!/bin/sh
# c_api_any.sh FIXTURE OUT_DIR COMPILER FLAGS... -- IO_SOURCE: the C API of a model that is not
# SPEC's, made as a user makes it: c_api_fixture writes the sequence classifier's checkpoint, its
# integer model's and the host's outputs of both, stformer-c-api (src/) writes seqcls.h and
# seqcls.cpp (float) and seqcls_q.h and seqcls_q.cpp (integers) from seq_classifier.hpp and the
# checkpoints, the sources are compiled as C++ (-fno-exceptions -fno-rtti) and c_api_main.c as C,
# linked by the C compiler with -lm alone, and run; then the integer model's image alone
# (--image, seqcls_image.hpp), read in place by c_api_image.cpp. The causal language model of
# causal_lm.hpp, whose type declares causal = true, is refused without --causal (the message
# names it) and written with it (causal_lm.h, causal_lm.cpp), into the same C program, as is its
# integer model's (causal_lm_q.h, causal_lm_q.cpp: generating through an int8 cache; and its
# generation entries alone, causal_gen.h, --generate-only), and its form with the head over the last row
# alone (CausalLast: causal_last.h, causal_last.cpp), which generates as it does.
set -eu
fixture=$1 out=$2
shift 2
cxx=""
while [ "$1" != "--" ]; do cxx="$cxx $1"; shift; done
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$out" && mkdir -p "$out"
# the I/O source compiled once, for every generator program below
# shellcheck disable=SC2086
$cxx -O1 -c "$2" -o "$out/io.o"
io="$out/io.o"
${STFORMER_RUN:-} "$fixture" "$out"
sh "$here/../src/stformer-c-api" --header "$here/seq_classifier.hpp" --type SeqClassifier --rows 8 --checkpoint "$out/seqcls.safetensors" \
  --name seqcls --out "$out" --compile "$cxx -O1 -pthread $io"
sh "$here/../src/stformer-c-api" --header "$here/seq_classifier.hpp" --type 'stformer::Quantized<SeqClassifier>' --rows 8 \
  --checkpoint "$out/seqcls_int8.safetensors" --name seqcls_q --out "$out" --compile "$cxx -O1 -pthread $io"
if sh "$here/../src/stformer-c-api" --header "$here/causal_lm.hpp" --type CausalLM --rows 8 --checkpoint "$out/causal_lm.safetensors" \
  --name causal_lm --out "$out" --compile "$cxx -O1 -pthread $io" 2>"$out/refused.txt"; then
  echo "FAIL: stformer-c-api wrote the C API of CausalLM (causal = true) without --causal"; exit 1
fi
grep -q "CausalLM declares causal = true.*give --causal" "$out/refused.txt" ||
  { echo "FAIL: the refusal does not name --causal:"; cat "$out/refused.txt"; exit 1; }
[ ! -e "$out/causal_lm.h" ] && [ ! -e "$out/causal_lm.cpp" ] || { echo "FAIL: the refused call wrote files"; exit 1; }
echo "refused as it should be: $(cat "$out/refused.txt")"
sh "$here/../src/stformer-c-api" --header "$here/causal_lm.hpp" --type CausalLM --rows 8 --causal --checkpoint "$out/causal_lm.safetensors" \
  --name causal_lm --out "$out" --compile "$cxx -O1 -pthread $io"
sh "$here/../src/stformer-c-api" --header "$here/causal_lm.hpp" --type 'stformer::Quantized<CausalLM>' --rows 8 --causal \
  --checkpoint "$out/causal_lm_int8.safetensors" --name causal_lm_q --out "$out" --compile "$cxx -O1 -pthread $io"
sh "$here/../src/stformer-c-api" --header "$here/causal_lm.hpp" --type CausalLast --rows 8 --causal --checkpoint "$out/causal_last.safetensors" \
  --name causal_last --out "$out" --compile "$cxx -O1 -pthread $io"
# the integer model's generation entries alone (--generate-only): no NAME_predict, no whole pass's workspace
sh "$here/../src/stformer-c-api" --header "$here/causal_lm.hpp" --type 'stformer::Quantized<CausalLM>' --rows 8 --causal --generate-only \
  --checkpoint "$out/causal_lm_int8.safetensors" --name causal_gen --out "$out" --compile "$cxx -O1 -pthread $io"
! grep -q "_predict" "$out/causal_gen.h" || { echo "FAIL: --generate-only wrote NAME_predict"; exit 1; }
for api in seqcls seqcls_q causal_lm causal_lm_q causal_last causal_gen; do
  # shellcheck disable=SC2086
  $cxx -O2 -fno-exceptions -fno-rtti -c -I"$here" -I"$out" "$out/$api.cpp" -o "$out/$api.o"
done
${CC:-cc} -std=c99 -Wall -Wextra -Werror -c -I"$out" "$here/c_api_main.c" -o "$out/main.o"
${CC:-cc} "$out/main.o" "$out/seqcls.o" "$out/seqcls_q.o" "$out/causal_lm.o" "$out/causal_lm_q.o" "$out/causal_last.o" "$out/causal_gen.o" -lm -o "$out/c_api_main"
${STFORMER_RUN:-} "$out/c_api_main"
# the integer model's image alone (--image), read in place by a C++ program
sh "$here/../src/stformer-c-api" --header "$here/seq_classifier.hpp" --type 'stformer::Quantized<SeqClassifier>' --image \
  --checkpoint "$out/seqcls_int8.safetensors" --name seqcls_image --out "$out" --compile "$cxx -O1 -pthread $io"
# shellcheck disable=SC2086
$cxx -O1 -I"$here" -I"$out" "$here/c_api_image.cpp" -o "$out/c_api_image"
${STFORMER_RUN:-} "$out/c_api_image"
