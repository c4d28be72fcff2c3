// Training on the device (../train.hpp): the image takes the same AdamW steps of SPEC's pointer
// model as the host's plain C++ build (train_reference), from the same initial parameters on
// the same sets, with the plain C++ kernels, everything in static RAM. TRAIN_CHUNK sets go
// through forward and backward at a time: 2 (the whole batch) on the Cortex-M7 (MPS2 AN500),
// against train_expected.hpp; 1 on the STM32F405 (netduinoplus2, netduinoplus2-train.ld: the
// AdamW moments and the stack in its core-coupled memory), against
// train_expected_chunked.hpp. It prints each step's loss beside the host's and the
// instructions it took, then compares every parameter with the host's after the last step,
// and prints each buffer's size and address. Exit status 0 when every loss and every parameter
// is the host's, bit for bit.
#include <cstdint>
#include <cstring>

#include <stformer/io/param_table.hpp>

#include "../train.hpp"
#include "instructions.hpp"
#include "train_init.hpp"
#ifndef TRAIN_CHUNK
#define TRAIN_CHUNK 2
#endif
#if TRAIN_CHUNK == 1
#include "train_expected_chunked.hpp"
namespace expected = train_expected_chunked;
#else
#include "train_expected.hpp"
namespace expected = train_expected;
#endif

namespace {

using namespace firmware_train;
constexpr size_t C = TRAIN_CHUNK;
static_assert(C == 1 || C == B, "TRAIN_CHUNK: the host's runs are of 1 set or the whole batch at a time");
constexpr const auto& x = stformer::table_entry(expected::tensors, "x");                 // [B, N, 2]
constexpr const auto& target = stformer::table_entry(expected::int32_tensors, "target");  // [B]
constexpr const auto& loss = stformer::table_entry(expected::tensors, "loss");           // [Steps]
static_assert(x.size == B * N * 2 && target.size == B && loss.size == Steps, "the expected run's header was made for another run");

State<C> state;
// The moments, in the core-coupled memory where the linker script places section .bss.ccm
// there (netduinoplus2-train.ld), else with the rest of .bss; zeroed by their constructor.
[[gnu::section(".bss.ccm")]] Optimiser opt{weight_decay};

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }

void write_hex(std::uintptr_t v) {
  char text[11] = "0x00000000";
  for (int i = 9; i >= 2; --i, v >>= 4) text[i] = "0123456789abcdef"[v & 15];
  semihosting::write(text);
}
void write_buffer(const char* name, const void* p, size_t bytes) {
  semihosting::write(name), semihosting::write(" "), semihosting::write(bytes), semihosting::write(" B at ");
  write_hex(reinterpret_cast<std::uintptr_t>(p)), semihosting::write("\n");
}

}  // namespace

extern "C" int firmware_main() {
  using semihosting::write;
  stformer::load_params(train_init::tensors, state.model);
  bool ok = true;
  for (size_t b = 0; b < B; ++b) ok = ok && label(x.data + b * N * 2) == target.data[b];
  instructions::Spans spans;
  for (size_t i = 0; i < Steps; ++i) {
    const float l = spans.count([&] { return state.step(opt, x.data); });
    const bool same = same_bits(l, loss.data[i]);
    ok = ok && same;
    write("step "), write(i + 1), write(": loss "), write(l, 6), write(same ? " (host: the same bits)\n" : " (host: DIFFERENT)\n");
  }
  size_t params = 0, differ = 0;
  stformer::for_each_param(
      [&](const stformer::Path& path, stformer::Init, const auto& t) {
        if (const auto* e = stformer::find_entry(expected::tensors, path.name().view()); e && e->size == t.size())
          for (size_t k = 0; k < t.size(); ++k) differ += !same_bits(t.data()[k], e->data[k]), ++params;
      },
      state.model);
  ok = ok && params == stformer::param_count(state.model) && differ == 0;
  write("after "), write(Steps), write(" AdamW steps on "), write(B), write(" sets, "), write(C), write(" at a time: "), write(params - differ),
      write(" of "), write(stformer::param_count(state.model)), write(" parameters the host's, bit for bit\n");
  spans.report("training step");
  write("static RAM:\n");
  write_buffer("  model", &state.model, sizeof state.model);
  write_buffer("  gradients", &state.grad, sizeof state.grad);
  write_buffer("  training record, workspace and input gradients (ReplayActsOf)", &state.acts, sizeof state.acts);
  write_buffer("  chunk (sets, targets, dL/dlogp)", &state.x, sizeof state.x + sizeof state.target + sizeof state.dlogp);
  write_buffer("  AdamW moments", &opt, sizeof opt);
  write("  all "), write(sizeof state + sizeof opt), write(" B\n");
  return ok && semihosting::report_stack() ? 0 : 1;
}
