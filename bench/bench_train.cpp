// The machine's FMA peak, training steps and language-model inference.
//
//   FmaPeak: 16 independent chains acc = acc·a + b on the widest vectors the build targets
//     (16 floats with AVX-512, 8 with AVX2, 1 in the plain build); GFLOP/s = 2 · lanes · chains
//     · iterations / time. Two pipes × 4 cycles of latency need ≥ 8 chains; 16 hide it.
//     Every GFLOP/s figure of this binary can be read as a fraction of this one (per thread).
//   MaxValueStep<model>/threads: one training iteration of targets/max_value (500 sets × 50
//     points: forward, loss, backward, optimiser). FLOP per set and block are counted for the
//     encoder blocks of the pointer model (bench/flops.hpp), × 3 for
//     forward + backward; `sets` is 500 per iteration.
//   LmStep/threads: one training step of SPEC's default language model (batch 32 windows of
//     32 tokens: forward, cross-entropy over 33,278 words, backward, clipping, AdamW) on random
//     token ids (the corpus does not change the work). FLOP: 3 × forward, forward = 32 ·
//     (2 blocks · (8·L·D² + 4·L²·D + 4·L·D·F) + PMA + 2·D·V); `tokens` counts the 32 predicted
//     tokens per step (PyTorch's examples count them the same way).
//   LmInference: one window of 32 tokens, batch 1, to the 33,278 logits.
#include <benchmark/benchmark.h>

#include <memory>
#include <vector>

#include <stformer/kernels/vec.hpp>

#include "flops.hpp"
#include "lm.hpp"
#include "max_value.hpp"

using namespace stformer;

namespace {

void BM_FmaPeak(benchmark::State& state) {
  using namespace kernels;
  constexpr int C = 16;
  constexpr long iterations = 1 << 14;
  vf acc[C];
  for (int c = 0; c < C; ++c) acc[c] = splat(1e-3f * float(c));
  vf a = splat(0.999999f), b = splat(1e-7f);
  for (auto _ : state) {
    for (long i = 0; i < iterations; ++i) {
#pragma GCC unroll 16
      for (int c = 0; c < C; ++c) acc[c] = fma(acc[c], a, b);
    }
    benchmark::DoNotOptimize(acc);
  }
  state.counters["GFLOP"] = benchmark::Counter(2e-9 * double(W) * C * iterations, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["lanes"] = double(W);
}

template <class Net>
void BM_MaxValueStep(benchmark::State& state) {
  using namespace max_value;
  auto run = std::make_unique<Run<Net>>(0, size_t(state.range(0)));
  Rng rng(0, 1);
  run->sets->draw(rng);
  for (auto _ : state) benchmark::DoNotOptimize(run->step(1e-4f));
  if constexpr (std::is_same_v<Net, PointerNet>)  // two EncoderBlock<16, 1, 64> over 50 points
    state.counters["GFLOP"] = benchmark::Counter(3 * 2 * encoder_flops(Batch, N, 16, 64) * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["sets"] = benchmark::Counter(double(Batch), benchmark::Counter::kIsIterationInvariantRate);
}

constexpr size_t V = 33278, L = 32, D = 128, H = 4, F = 512, Blocks = 2, LmBatch = 32;
using LmRun = lm::Run<V, L, D, H, F, Blocks, LmBatch>;

constexpr double lm_forward_flops(double B) {
  // blocks; PMA: one query row (q, o projections 2·2·D², k, v over L rows 2·2·L·D², scores and
  // mixing 4·L·D, fc 2·D²); head 2·D·V
  return encoder_flops(B, L, D, F) * Blocks + B * (6 * D * D + 4 * L * D * D + 4 * L * D) + B * 2.0 * D * V;
}

std::vector<std::int32_t> random_stream(size_t n) {
  std::vector<std::int32_t> ids(n);
  Rng rng(7);
  for (auto& t : ids) t = std::int32_t(rng.below(std::uint32_t(V)));
  return ids;
}

void BM_LmStep(benchmark::State& state) {
  auto run = std::make_unique<LmRun>(0, size_t(state.range(0)));
  auto ids = random_stream(1 << 16);
  lm::TrainOptions o;
  o.steps = 1 << 30;
  for (auto _ : state) benchmark::DoNotOptimize(run->step(ids, o));
  state.counters["GFLOP"] = benchmark::Counter(3 * lm_forward_flops(LmBatch) * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["tokens"] = benchmark::Counter(double(LmBatch), benchmark::Counter::kIsIterationInvariantRate);
}

void BM_LmInference(benchmark::State& state) {
  using Model = LanguageModel<V, L, D, H, F, Blocks>;
  auto model = std::make_unique<Model>();
  auto acts = std::make_unique<ActsOf<Model, 1>>();
  Rng rng(1);
  init_params(*model, rng);
  IdTensor<1, L> window;
  auto ids = random_stream(L);
  std::copy(ids.begin(), ids.end(), window.begin());
  for (auto _ : state) benchmark::DoNotOptimize(acts->forward(*model, window).data());
  state.counters["GFLOP"] = benchmark::Counter(lm_forward_flops(1) * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["windows"] = benchmark::Counter(1, benchmark::Counter::kIsIterationInvariantRate);
}

}  // namespace

BENCHMARK(BM_FmaPeak);
BENCHMARK(BM_MaxValueStep<max_value::PointerNet>)->ArgName("threads")->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_MaxValueStep<max_value::SetNet>)->ArgName("threads")->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_LmStep)->ArgName("threads")->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_LmInference)->Unit(benchmark::kMicrosecond);
BENCHMARK_MAIN();
