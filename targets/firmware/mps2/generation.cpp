// Generation on a microcontroller: a causal model stepped token by token through its key/value
// cache in static RAM (DecodeOf<Model, 1, P>: the cache and the plan of one step), its weights
// a constant image in flash (stformer-c-api --image), each step's logits checked against the
// host's (generation_reference: the hash of their bytes, and the token chosen), each step's
// instructions counted (QEMU -icount shift=8): the least and most, the mean, and the steps at
// positions 16 and P − 1. One run per image, chosen when it is built:
//   -DRUN_STORIES  llama2.c's model at stories260K's shape in int8 (tasks/llama_models.hpp:
//                  dim 64, 5 layers, 8 heads, 4 key/value heads, hidden 172, vocabulary 512),
//                  greedily from token 1 through an int8 cache of 256 positions
//   -DRUN_GPT      wikitext_lm's GPT over bytes (tasks/byte_gpt.hpp) in float, continuing
//                  "The game" greedily through a cache of 64 positions
//   -DRUN_GPT_Q    the same GPT in int8, through a cache of 128 positions
//   -DRUN_M0       the llama form at a Cortex-M0's size in int8 (StoriesM0: dim 32, 2 layers,
//                  vocabulary 128) through a cache of 64 positions, its integer logits alone
//                  (DecodeOf::step_through, before the float end): no float in the image
// The float run computes the host's plain build's bits: the same float operations in the same
// order (-ffp-contract=off), and libm.cpp's erff, expf, … on both.
#include <type_traits>

#include <stformer/codegen/model_image.hpp>
#include <stformer/compose/decode.hpp>
#include <stformer/io/param_table.hpp>
#include <stformer/quantized/quantize.hpp>

#include "generation.hpp"
#include "instructions.hpp"

#if defined(RUN_STORIES)
#include "qstories.hpp"
#include "stories_expected.hpp"
namespace run {
using Model = stformer::Quantized<stories::Stories260K>;
namespace image = qstories;
namespace expected = stories_expected;
constexpr size_t P = generation::stories_positions, V = 512;
constexpr size_t prompt = 1;  // token 1 (BOS)
constexpr const char *tokens_name = "tokens", *hash_name = "logits_hash", *what = "llama2.c's model at stories260K's shape in int8";
constexpr size_t through = Model::steps;  // all its steps: float logits
}  // namespace run
#elif defined(RUN_M0)
#include "m0_expected.hpp"
#include "qm0.hpp"
namespace run {
using Model = stformer::Quantized<stories::StoriesM0>;
namespace image = qm0;
namespace expected = m0_expected;
constexpr size_t P = generation::m0_positions, V = 128;
constexpr size_t prompt = 1;
constexpr const char *tokens_name = "tokens", *hash_name = "logits_hash", *what = "the llama form at a Cortex-M0's size in int8, integer logits";
constexpr size_t through = Model::steps - 1;  // its integer logits (int16): not the float end
}  // namespace run
#elif defined(RUN_GPT) || defined(RUN_GPT_Q)
#include "gpt_expected.hpp"
#if defined(RUN_GPT)
#include "gpt.hpp"
namespace run {
using Model = lm::WikiGpt;
namespace image = gpt;
constexpr size_t P = generation::gpt_float_positions;
constexpr const char *tokens_name = "float_tokens", *hash_name = "float_hash", *what = "the GPT over bytes in float";
}  // namespace run
#else
#include "gpt_q.hpp"
namespace run {
using Model = stformer::Quantized<lm::WikiGpt>;
namespace image = gpt_q;
constexpr size_t P = generation::gpt_int8_positions;
constexpr const char *tokens_name = "int8_tokens", *hash_name = "int8_hash", *what = "the GPT over bytes in int8";
}  // namespace run
#endif
namespace run {
namespace expected = gpt_expected;
constexpr size_t V = 256, prompt = sizeof generation::gpt_prompt - 1;
constexpr size_t through = Model::steps;
}  // namespace run
#else
#error "generation.cpp: build it with -DRUN_STORIES, -DRUN_GPT, -DRUN_GPT_Q or -DRUN_M0"
#endif

namespace {

using run::Model, run::P, run::V;
static_assert(std::is_same_v<run::image::Model, Model>, "the image holds another model");
constexpr const auto& tokens = stformer::table_entry(run::expected::int32_tensors, run::tokens_name);  // [P]
constexpr const auto& hashes = stformer::table_entry(run::expected::int32_tensors, run::hash_name);   // [P]
static_assert(tokens.size == P && hashes.size == P, "the host's tokens and hashes are of another length");

stformer::DecodeOf<Model, 1, P> decoder;  // the cache of P positions and one step's plan
std::int32_t generated[P];               // the token stepped after each step

}  // namespace

extern "C" int firmware_main() {
  using semihosting::write;
  const Model& model = run::image::model();  // in flash
  if (!stformer::image_matches(model, run::image::offsets)) {
    write("the image's layout is not the model's\n");
    return 1;
  }
  write(run::what), write(": "), write(std::uint64_t(P)), write(" positions\n");
  instructions::Spans spans;  // counted under qemu-system-arm -icount shift=8
  std::uint64_t total = 0, at16 = 0, at_last = 0;
  size_t same = 0;
  typename Model::template Input<1, 1> one;
  one(0, 0) = tokens.data[0];
  for (size_t t = 0; t < P; ++t) {
    const std::uint64_t t0 = instructions::ticks();
    const auto* y = spans.count([&] { return decoder.step_through<run::through>(model, one); });
    const std::uint64_t n = instructions::of(instructions::ticks() - t0);
    total += n, at16 = t == 16 ? n : at16, at_last = t == P - 1 ? n : at_last;
    if (y == nullptr) return write("the cache refused a step before it was full\n"), 1;
    // the next token: the prompt's, then this step's argmax, which must be the host's
    const std::int32_t mine = std::int32_t(generation::greedy(y->data(), V));
    same += std::int32_t(generation::fnv1a(y->data(), V)) == hashes.data[t] && (t + 1 == P || t + 1 < run::prompt || mine == tokens.data[t + 1]);
    one(0, 0) = t + 1 < run::prompt ? tokens.data[t + 1] : mine;
    generated[t] = one(0, 0);
  }
  write("steps whose logits are the host's bit for bit: "), write(same), write(" of "), write(std::uint64_t(P)), write("\n");
  const bool full = decoder.step_through<run::through>(model, one) == nullptr;
  write(full ? "a step past the cache: refused\n" : "a step past the cache: NOT refused\n");
  if constexpr (V == 256) {  // bytes: the text (a newline as |, other unprintable bytes as ?)
    static char text[P + 1];
    text[0] = char(tokens.data[0]);
    for (size_t t = 0; t + 1 < P; ++t) {
      const std::int32_t c = generated[t];
      text[t + 1] = c == '\n' ? '|' : c >= 32 && c < 127 ? char(c) : '?';
    }
    write("the text: \""), write(text), write("\"\n");
  } else {
    write("the first tokens:");
    for (size_t t = 0; t < 16; ++t) write(" "), write(std::uint64_t(t == 0 ? tokens.data[0] : generated[t - 1]));
    write("\n");
  }
  spans.report("token (a step)");
  write("instructions per token, mean over "), write(std::uint64_t(P)), write(" positions: "), write(total / P);
  write("; at position 16: "), write(at16), write("; at position "), write(std::uint64_t(P - 1)), write(": "), write(at_last), write("\n");
  write("model in flash: "), write(sizeof model), write(" B; static RAM: decoding state "), write(sizeof decoder), write(" B (cache "),
      write(decltype(decoder)::cache_bytes), write(" B)\n");
  const bool stack_ok = semihosting::report_stack();
  return same == P && full && stack_ok ? 0 : 1;
}
