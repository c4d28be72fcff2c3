// Training on the device (../train.hpp): the Cortex-M7 image (MPS2 AN500) takes the same AdamW
// steps of SPEC's pointer model as the host's plain C++ build (train_reference), from the same
// initial parameters on the same sets, with the plain C++ kernels, everything in static RAM.
// It prints each step's loss beside the host's and the instructions it took, then compares
// every parameter with the host's after the last step. Exit status 0 when every loss and every
// parameter is the host's, bit for bit.
#include <cstdint>
#include <cstring>

#include <stformer/param_table.hpp>

#include "../train.hpp"
#include "instructions.hpp"
#include "train_expected.hpp"
#include "train_init.hpp"

namespace {

using namespace firmware_train;
constexpr const auto& x = stformer::table_entry(train_expected::tensors, "x");                 // [B, N, 2]
constexpr const auto& target = stformer::table_entry(train_expected::int32_tensors, "target");  // [B]
constexpr const auto& loss = stformer::table_entry(train_expected::tensors, "loss");           // [Steps]
static_assert(x.size == B * N * 2 && target.size == B && loss.size == Steps, "train_expected.hpp was made for another run");

State state;

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }

}  // namespace

extern "C" int firmware_main() {
  using semihosting::write;
  stformer::load_params(train_init::tensors, state.model);
  std::memcpy(state.x.data(), x.data, sizeof(float) * x.size);
  state.label();
  bool ok = std::equal(target.data, target.data + B, state.target.data());
  instructions::Spans spans;
  for (size_t i = 0; i < Steps; ++i) {
    const float l = spans.count([&] { return state.step(); });
    const bool same = same_bits(l, loss.data[i]);
    ok = ok && same;
    write("step "), write(i + 1), write(": loss "), write(l, 6), write(same ? " (host: the same bits)\n" : " (host: DIFFERENT)\n");
  }
  size_t params = 0, differ = 0;
  stformer::for_each_param(
      [&](const stformer::Path& path, stformer::Init, const auto& t) {
        if (const auto* e = stformer::find_entry(train_expected::tensors, path.name().view()); e && e->size == t.size())
          for (size_t k = 0; k < t.size(); ++k) differ += !same_bits(t.data()[k], e->data[k]), ++params;
      },
      state.model);
  ok = ok && params == stformer::param_count(state.model) && differ == 0;
  write("after "), write(Steps), write(" AdamW steps: "), write(params - differ), write(" of "), write(stformer::param_count(state.model)),
      write(" parameters the host's, bit for bit\n");
  spans.report("training step");
  write("static RAM: model "), write(sizeof state.model), write(" B, gradients "), write(sizeof state.grad), write(" B, AdamW moments "),
      write(sizeof state.opt), write(" B, activations "), write(sizeof state.acts), write(" B; all "), write(sizeof state), write(" B\n");
  return ok && semihosting::report_stack() ? 0 : 1;
}
