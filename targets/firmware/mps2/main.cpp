// The max-value pointer model (SPEC Example 1) in bare-metal firmware for the MPS2 AN500
// (Cortex-M7; also AN386, Cortex-M4, the STM32F405 of netduinoplus2.ld and the MPS3 AN547,
// Cortex-M55 with Helium, of mps3.ld), run under qemu-system-arm -semihosting.
//
// The model is a constant image in flash, read in place (stformer/codegen/model_image.hpp; made by
// `stformer-c-api --image` from a checkpoint): no parameter is copied to RAM. The
// test sets and the host build's predictions for them are constexpr arrays in flash, made by
// checkpoint_header from a `max_value sets` file and a `max_value predict` file. For each set
// the firmware prints the predicted index and its log-probability, checks them against the
// host's (same arg-max, every log-probability within 1e-4 + 1e-4·|host|), and exits with
// status 0 when all agree. The forward-only workspace (Infer) is static (its size known at
// compile time), there is no heap, and it prints its memory use.
#include <cmath>
#include <type_traits>

#include <stformer/codegen/model_image.hpp>
#include <stformer/models/pointer_model.hpp>
#include <stformer/io/param_table.hpp>
#include <stformer/train/loss.hpp>

#include "expected.hpp"
#include "instructions.hpp"
#include "sets.hpp"
#include "weights.hpp"

namespace {

constexpr size_t N = 50;
using PointerNet = stformer::PointerModel<2, 16, 1, 64, 2>;  // SPEC's `pointer` configuration
using Infer = stformer::InferOf<PointerNet, 1, N>;            // one set at a time, forward only
static_assert(std::is_same_v<weights::Model, PointerNet>, "weights.hpp holds another model");

constexpr const stformer::ConstTensor& x = stformer::table_entry(sets::tensors, "x");                   // [S, N, 2]
constexpr const stformer::ConstTensor& want = stformer::table_entry(expected::tensors, "log_probs");  // [S, N]
constexpr size_t S = x.size / (N * 2);
static_assert(S > 0 && x.size == S * N * 2 && want.size == S * N, "sets.x [S, 50, 2] and expected.log_probs [S, 50] differ");

Infer infer;
stformer::Tensor<1, N, 2> set;

}  // namespace

// Called by reset_handler (startup.cpp); the exit status goes out through semihosting.
extern "C" int firmware_main() {
  using semihosting::write;
  const PointerNet& model = weights::model();  // in flash
  if (!stformer::image_matches(model, weights::offsets)) {
    write("weights.hpp: the image's layout is not the model's\n");
    return 1;
  }
  instructions::Spans spans;  // counted under qemu-system-arm -icount shift=8
  size_t agree = 0;
  for (size_t s = 0; s < S; ++s) {
    std::copy(x.data + s * N * 2, x.data + (s + 1) * N * 2, set.data());
    const float* got = spans.count([&]() -> const auto& { return infer.forward(model, set); }).data();
    const float* host = want.data + s * N;
    const size_t point = stformer::argmax(got, N);
    bool same = point == stformer::argmax(host, N);
    for (size_t i = 0; i < N; ++i) same = same && std::fabs(got[i] - host[i]) <= 1e-4f + 1e-4f * std::fabs(host[i]);
    agree += same;
    write("set "), write(s), write(": point "), write(std::uint64_t(point)), write(", log-probability ");
    write(got[point], 6), write(same ? " (host: the same)\n" : " (host: DIFFERENT)\n");
  }
  write("agree with the host build: "), write(agree), write(" of "), write(S), write(" sets\n");
  spans.report("inference");
  write("model in flash: "), write(sizeof model), write(" B; static RAM: forward-only workspace "), write(sizeof infer), write(" B\n");
  const bool stack_ok = semihosting::report_stack();
  return agree == S && stack_ok ? 0 : 1;
}
