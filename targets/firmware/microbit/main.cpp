// The max-value pointer model quantized to int8 (max_value quantize) in bare-metal firmware for
// a Cortex-M0 without a floating-point unit, QEMU's BBC micro:bit (nRF51822: 16 KB of RAM), run
// under qemu-system-arm -semihosting.
//
// The int8 model is a constant image in flash (stformer-c-api --image on the quantized
// checkpoint). The test sets come already quantized (x_q, I16, as the host's
// `max_value predict` wrote them with the same checkpoint) together with the host's int32 logits:
// the firmware runs the model's integer steps on each set (forward_steps: all but its float
// ends, the input's quantization and the log-softmax) and checks that they compute the same
// integers, and prints each set's chosen point. No float and no double anywhere in the image:
// no_soft_float.sh checks its symbols. The workspace is static, its plan the model's
// InferOf; there is no heap. Also built for the Cortex-M4/M7 boards (../mps2/meson.build).
#include <type_traits>

#include <stformer/codegen/model_image.hpp>
#include <stformer/io/param_table.hpp>
#include <stformer/models/pointer_model.hpp>
#include <stformer/quantized/quantize.hpp>
#include <stformer/train/loss.hpp>

#include "instructions.hpp"
#include "qexpected.hpp"
#include "qweights.hpp"

namespace {

constexpr size_t N = 50;
using QPointerNet = stformer::Quantized<stformer::PointerModel<2, 16, 1, 64, 2>>;  // SPEC's `pointer` configuration in int8
using Infer = stformer::InferOf<QPointerNet, 1, N>;                                 // one set at a time
constexpr size_t Logits = QPointerNet::steps - 1;  // the steps before: the integer ones, from step 1
static_assert(std::is_same_v<qweights::Model, QPointerNet>, "qweights.hpp holds another model");

constexpr const auto& x_q = stformer::table_entry(qexpected::int16_tensors, "x_q");       // [S, N, 2]
constexpr const auto& want = stformer::table_entry(qexpected::int32_tensors, "logits");  // [S, N]
constexpr size_t S = x_q.size / (N * 2);
static_assert(S > 0 && x_q.size == S * N * 2 && want.size == S * N, "qexpected.x_q [S, 50, 2] and qexpected.logits [S, 50] differ");

Infer infer;

}  // namespace

// Called by reset_handler (startup.cpp); the exit status goes out through semihosting.
extern "C" int firmware_main() {
  using semihosting::write;
  const QPointerNet& model = qweights::model();  // in flash
  if (!stformer::image_matches(model, qweights::offsets)) {
    write("qweights.hpp: the image's layout is not the model's\n");
    return 1;
  }
  instructions::Spans spans;  // counted under qemu-system-arm -icount shift=8
  size_t agree = 0;
  for (size_t s = 0; s < S; ++s) {
    std::copy(x_q.data + s * N * 2, x_q.data + (s + 1) * N * 2, infer.input<1>().data());
    const std::int32_t* got = spans.count([&]() -> const auto& { return infer.forward_steps<1, Logits>(model); }).data();
    const std::int32_t* host = want.data + s * N;
    const bool same = std::equal(got, got + N, host);
    agree += same;
    const size_t point = stformer::argmax(got, N);
    write("set "), write(s), write(": point "), write(std::uint64_t(point)), write(same ? ", the host's 50 logits exactly\n" : ", logits DIFFER from the host's\n");
  }
  write("agree with the host build: "), write(agree), write(" of "), write(S), write(" sets\n");
  spans.report("inference");
  write("int8 model in flash: "), write(sizeof model), write(" B; static RAM: forward-only workspace "), write(sizeof infer), write(" B\n");
  const bool stack_ok = semihosting::report_stack();
  return agree == S && stack_ok ? 0 : 1;
}
