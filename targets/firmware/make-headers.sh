#!/usr/bin/env bash
# make-headers.sh BUILD OUT [PLAIN]: the firmware's generated headers, from a native build folder
# BUILD (its max_value and checkpoint_header programs) and the generator src/stformer-c-api (as a
# user runs it: the models' types from tasks/max_value_models.hpp, copied to OUT),
# into the folder OUT:
#   weights.hpp   the SPEC pointer model trained with seed 0 (max_value train, about 3 s), as its
#                 constant image (stformer-c-api --image: read in place from flash)
#   sets.hpp      8 fresh test sets (max_value sets --seed 7)
#   expected.hpp  the host build's log-probabilities for them (max_value predict)
#   qweights.hpp  the same model quantized to int8 (max_value quantize), as its constant image
#   qexpected.hpp the int8 model's quantized inputs and int32 logits for the 8 sets (predict)
#   max_value.h, max_value.cpp  the float model's C API (stformer-c-api --rows 50)
#   sets.h, expected.h          the sets and the host's log-probabilities as C arrays (--c)
#   seqcls/   a model that is not SPEC's (tests/seq_classifier.hpp) and its integer model, their
#             C APIs as stformer-c-api writes them (seqcls.h, seqcls.cpp, seqcls_q.h,
#             seqcls_q.cpp) and the host's outputs (expected.h): BUILD's c_api_any test, which
#             makes them and checks them on the host (run here unless it ran since its
#             fixture was built)
#   torchcls/ the classifier PyTorch trained from its own layers (nn.TransformerEncoder, post-norm
#             GELU) and python/stformer_export.py exported: BUILD's torch_export test trains,
#             exports and quantizes it (tests/torch/make_export.py, tests/test_torch_export.cpp;
#             run here unless it ran since it was built);
#             here its float C API (torchcls.h, torchcls.cpp: stformer-c-api --rows 32), its
#             integer model's image (torchcls_q.hpp: --image) and the host's outputs for 8 test
#             sequences (torchcls_expected.hpp, torchcls_expected.h: x, logits, x_q, out_q)
# and, given a native build with the plain C++ kernels PLAIN (-Dsimd=none), the host's side of
# the firmware's generation (its generation_reference program; tasks/llama_models.hpp and
# tasks/byte_gpt.hpp copied to OUT):
#   qstories.hpp, stories_expected.hpp  llama2.c's model at stories260K's shape in int8 as its
#                 constant image, the tokens and logits' hashes of its greedy generation
#   gpt.hpp, gpt_q.hpp, gpt_expected.hpp  wikitext_lm's GPT over bytes in float and in int8
#                 (GPT_CHECKPOINTS="FLOAT INT8": a trained one's checkpoints; else seed 0), the same
#   qm0.hpp, m0_expected.hpp  the same llama form at a Cortex-M0's size in int8, the same
#   stories_c.h, stories_c.cpp, stories_expected.h  stories260K's int8 model's C API, its
#                 generation entries alone (--generate-only), and the tokens as C arrays
# and of its training runs (its train_reference program):
#   train_init.hpp              the initial parameters
#   train_expected.hpp          the batch, each step's loss and the parameters after the last
#                               step, the batch's 2 sets at once (the Cortex-M7's run)
#   train_expected_chunked.hpp  the same a set at a time (the STM32F405's)
# The generator compiles its host program with $CXX (default c++), the plain C++ kernels.
set -euo pipefail
build=$1 out=$2 plain=${3:-}
src=$(cd "$(dirname "$0")/../.." && pwd)
compile="${CXX:-c++} -std=c++20 -O0 -I$(printf %q "$src/include") -DSTFORMER_SIMD=0 -ffp-contract=off -pthread $(printf %q "$src/src/safetensors.cpp")"
generate() {  # generate HEADER NAME TYPE CHECKPOINT (--image | --rows N): into HEADER's folder
  sh "$src/src/stformer-c-api" --header "$1" --type "$3" --checkpoint "$4" --name "$2" --out "$(dirname "$1")" "${@:5}" --compile "$compile"
}
mkdir -p "$out"
cp "$src/tasks/max_value_models.hpp" "$out/"
"$build/targets/max_value/max_value" train --model pointer --seed 0 --report 100 --checkpoint "$out/pointer.safetensors"
"$build/targets/max_value/max_value" sets --seed 7 --sets 8 --output "$out/sets.safetensors"
"$build/targets/max_value/max_value" predict --checkpoint "$out/pointer.safetensors" --input "$out/sets.safetensors" \
  --output "$out/expected.safetensors"
generate "$out/max_value_models.hpp" weights max_value::PointerNet "$out/pointer.safetensors" --image
"$build/targets/max_value/max_value" quantize --checkpoint "$out/pointer.safetensors" --output "$out/qpointer.safetensors"
"$build/targets/max_value/max_value" predict --checkpoint "$out/qpointer.safetensors" --input "$out/sets.safetensors" \
  --output "$out/qexpected.safetensors"
generate "$out/max_value_models.hpp" qweights 'stformer::Quantized<max_value::PointerNet>' "$out/qpointer.safetensors" --image
for name in sets:sets expected:expected qexpected:qexpected; do
  "$build/targets/firmware/checkpoint_header" --namespace "${name%%:*}" "$out/${name#*:}.safetensors" "$out/${name%%:*}.hpp"
done
generate "$out/max_value_models.hpp" max_value max_value::PointerNet "$out/pointer.safetensors" --rows 50
for name in sets expected; do
  "$build/targets/firmware/checkpoint_header" --c "$out/$name.safetensors" "$out/$name.h"
done
# ran_since OUTPUT PROGRAM: OUTPUT was written after PROGRAM was built (the build's suite ran
# the test that writes it, as tests/run.sh does just before): no need to run it again.
ran_since() { [ -e "$1" ] && [ "$1" -nt "$2" ]; }
ran_since "$build/tests/c_api_any/c_api_image" "$build/tests/c_api_fixture" || meson test -C "$build" --no-rebuild --quiet c_api_any
mkdir -p "$out/seqcls"
cp "$build/tests/c_api_any/"{seqcls.h,seqcls.cpp,seqcls_q.h,seqcls_q.cpp,expected.h} "$out/seqcls/"
ran_since "$build/tests/trained_firmware.safetensors" "$build/tests/test_torch_export" || meson test -C "$build" --no-rebuild --quiet torch_export
mkdir -p "$out/torchcls"
cp "$build/tests/trained.hpp" "$out/torchcls/"
generate "$out/torchcls/trained.hpp" torchcls trained "$build/tests/trained.safetensors" --rows 32
generate "$out/torchcls/trained.hpp" torchcls_q 'stformer::Quantized<trained>' "$build/tests/trained_int8.safetensors" --image
"$build/targets/firmware/checkpoint_header" --namespace torchcls_expected "$build/tests/trained_firmware.safetensors" "$out/torchcls/torchcls_expected.hpp"
"$build/targets/firmware/checkpoint_header" --c --namespace torchcls_expected "$build/tests/trained_firmware.safetensors" "$out/torchcls/torchcls_expected.h"
if [ -n "$plain" ]; then
  # the generation firmware's models and tokens (generation_reference; GPT_CHECKPOINTS: the
  # float and int8 checkpoints of a trained byte GPT, else its seed-0 initialisation)
  cp "$src/tasks/llama_models.hpp" "$src/tasks/byte_gpt.hpp" "$out/"
  "$plain/targets/firmware/generation_reference" "$out" ${GPT_CHECKPOINTS:-}
  generate "$out/llama_models.hpp" qstories 'stformer::Quantized<stories::Stories260K>' "$out/qstories.safetensors" --image
  generate "$out/byte_gpt.hpp" gpt lm::WikiGpt "$out/gpt.safetensors" --image
  generate "$out/byte_gpt.hpp" gpt_q 'stformer::Quantized<lm::WikiGpt>' "$out/gpt_q.safetensors" --image
  generate "$out/llama_models.hpp" qm0 'stformer::Quantized<stories::StoriesM0>' "$out/qm0.safetensors" --image
  for name in stories_expected gpt_expected m0_expected; do
    "$build/targets/firmware/checkpoint_header" --namespace "$name" "$out/$name.safetensors" "$out/$name.hpp"
  done
  # the same int8 model through its C API's generation entries alone (the C firmware's), and its tokens as C arrays
  generate "$out/llama_models.hpp" stories_c 'stformer::Quantized<stories::Stories260K>' "$out/qstories.safetensors" --rows 256 --causal --generate-only
  "$build/targets/firmware/checkpoint_header" --c --namespace stories_expected "$out/stories_expected.safetensors" "$out/stories_expected.h"
  "$plain/targets/firmware/train_reference" "$out/sets.safetensors" "$out"
  for name in train_init train_expected train_expected_chunked; do
    "$build/targets/firmware/checkpoint_header" --namespace "$name" "$out/$name.safetensors" "$out/$name.hpp"
  done
fi
echo "headers in $out"
