// Generation in integers on a microcontroller: llama2.c's model at its stories260K shape
// (tasks/llama_models.hpp: dim 64, 5 layers, 8 heads, 4 key/value heads, hidden 172, vocabulary
// 512) quantized to int8, a constant image in flash (stformer-c-api --image on the host's
// quantized checkpoint, qstories.hpp), stepped through its key/value cache of 256 positions in
// static RAM (DecodeOf<Quantized<Stories260K>, 1, 256>: the cache in int8, the plan of one
// step), greedily from token 1 (BOS) to the last position. Each step's logits are checked
// against the host's (stories_expected.hpp, stories_reference: the hash of their bytes, the token
// chosen), and each step's instructions counted (QEMU -icount shift=8): the least and most, the
// mean, and the steps at positions 16 and 255. The weights are random (seed 0): the instructions
// and the memory are the shape's; the trained checkpoint's text is not the point here.
#include <type_traits>

#include <stformer/codegen/model_image.hpp>
#include <stformer/compose/decode.hpp>
#include <stformer/io/param_table.hpp>
#include <stformer/quantized/quantize.hpp>

#include "instructions.hpp"
#include "qstories.hpp"
#include "stories.hpp"
#include "stories_expected.hpp"

namespace {

using Q = stformer::Quantized<stories::Stories260K>;
static_assert(std::is_same_v<qstories::Model, Q>, "qstories.hpp holds another model");
constexpr size_t P = stories::positions, V = 512;
constexpr const auto& tokens = stformer::table_entry(stories_expected::int32_tensors, "tokens");       // [P]
constexpr const auto& hashes = stformer::table_entry(stories_expected::int32_tensors, "logits_hash");  // [P]
static_assert(tokens.size == P && hashes.size == P, "stories_expected.hpp: tokens and logits_hash of another length");

stformer::DecodeOf<Q, 1, P> decoder;  // the int8 cache of P positions and one step's plan

}  // namespace

extern "C" int firmware_main() {
  using semihosting::write;
  const Q& model = qstories::model();  // in flash
  if (!stformer::image_matches(model, qstories::offsets)) {
    write("qstories.hpp: the image's layout is not the model's\n");
    return 1;
  }
  instructions::Spans spans;  // counted under qemu-system-arm -icount shift=8
  std::uint64_t total = 0, at16 = 0, at_last = 0;
  size_t same = 0;
  Q::Input<1, 1> one;
  one(0, 0) = tokens.data[0];
  for (size_t t = 0; t < P; ++t) {
    const std::uint64_t t0 = instructions::ticks();
    const auto* y = spans.count([&] { return decoder.step(model, one); });
    const std::uint64_t n = instructions::of(instructions::ticks() - t0);
    total += n, at16 = t == 16 ? n : at16, at_last = t == P - 1 ? n : at_last;
    if (y == nullptr) return write("the cache refused a step before it was full\n"), 1;
    const std::int32_t next = std::int32_t(stories::greedy(y->data(), V));
    same += std::int32_t(stories::fnv1a(y->data(), V)) == hashes.data[t] && (t + 1 == P || next == tokens.data[t + 1]);
    one(0, 0) = next;
    if (t < 12) write("step "), write(std::uint64_t(t)), write(": token "), write(std::uint64_t(next)), write("\n");
  }
  const bool full = decoder.step(model, one) == nullptr;
  write("steps whose logits are the host's bit for bit: "), write(same), write(" of "), write(std::uint64_t(P)), write("\n");
  write(full ? "a step past the cache: refused\n" : "a step past the cache: NOT refused\n");
  spans.report("token (a step)");
  write("instructions per token, mean over "), write(std::uint64_t(P)), write(" positions: "), write(total / P);
  write("; at position 16: "), write(at16), write("; at position "), write(std::uint64_t(P - 1)), write(": "), write(at_last), write("\n");
  write("int8 model in flash: "), write(sizeof model), write(" B; static RAM: decoding state "), write(sizeof decoder),
      write(" B (int8 cache "), write(decltype(decoder)::cache_bytes), write(" B)\n");
  const bool stack_ok = semihosting::report_stack();
  return same == P && full && stack_ok ? 0 : 1;
}
