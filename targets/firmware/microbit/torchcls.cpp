// A model trained in PyTorch from PyTorch's own layers, in integers on a Cortex-M0 without a
// floating-point unit (QEMU's BBC micro:bit, 16 KB of RAM), run under qemu-system-arm
// -semihosting: the classifier of tests/torch/make_export.py (nn.Linear, learned positions, an
// nn.TransformerEncoder of 2 post-norm GELU layers, D 32, 4 heads, F 64, a mean over the 32
// rows, nn.Linear to 5 classes), exported by python/stformer_export.py, quantized on the host
// (tests/test_torch_export.cpp) and made a constant image in flash (stformer-c-api --image:
// torchcls_q.hpp). For each of 8 test sequences the host gives the quantized rows x_q and the
// int16 outputs of the integer steps; the firmware runs those steps (forward_steps: all but the
// float ends) and checks that it computes the same integers, and prints each sequence's class.
// No float, no double (no_soft_float.sh), no heap; the workspace is the model's InferOf.
#include <algorithm>

#include <stformer/codegen/model_image.hpp>
#include <stformer/io/param_table.hpp>
#include <stformer/quantized/quantize.hpp>

#include "torchcls_expected.hpp"
#include "instructions.hpp"
#include "torchcls_q.hpp"

namespace {

constexpr size_t N = 32, In = 8, Classes = 5;
using Q = torchcls_q::Model;
using Infer = stformer::InferOf<Q, 1, N>;  // one sequence at a time
constexpr size_t Last = Q::steps - 1;       // the integer steps: 1 .. Last − 1

constexpr const auto& x_q = stformer::table_entry(torchcls_expected::int16_tensors, "x_q");      // [S, N, In]
constexpr const auto& want = stformer::table_entry(torchcls_expected::int16_tensors, "out_q");  // [S, Classes]
constexpr size_t S = x_q.size / (N * In);
static_assert(S > 0 && x_q.size == S * N * In && want.size == S * Classes, "expected.x_q [S, 32, 8] and expected.out_q [S, 5] differ");

Infer infer;

}  // namespace

extern "C" int firmware_main() {
  using semihosting::write;
  const Q& model = torchcls_q::model();  // in flash
  if (!stformer::image_matches(model, torchcls_q::offsets)) {
    write("torchcls_q.hpp: the image's layout is not the model's\n");
    return 1;
  }
  instructions::Spans spans;  // counted under qemu-system-arm -icount shift=8
  size_t agree = 0;
  for (size_t s = 0; s < S; ++s) {
    std::copy(x_q.data + s * N * In, x_q.data + (s + 1) * N * In, infer.input<1>().data());
    const std::int16_t* got = spans.count([&]() -> const auto& { return infer.forward_steps<1, Last>(model); }).data();
    const std::int16_t* host = want.data + s * Classes;
    const bool same = std::equal(got, got + Classes, host);
    agree += same;
    write("sequence "), write(s), write(": class "), write(std::uint64_t(std::max_element(got, got + Classes) - got)),
        write(same ? ", the host's integers exactly\n" : ", integers DIFFER from the host's\n");
  }
  write("agree with the host build: "), write(agree), write(" of "), write(S), write(" sequences\n");
  spans.report("inference");
  write("PyTorch's classifier in int8: "), write(sizeof model), write(" B in flash; static RAM: forward-only workspace "), write(sizeof infer),
      write(" B\n");
  const bool stack_ok = semihosting::report_stack();
  return agree == S && stack_ok ? 0 : 1;
}
