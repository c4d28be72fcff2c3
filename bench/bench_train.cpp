// The machine's FMA peak, training steps and the models' forward passes.
//
//   FmaPeak: independent chains acc = acc·a + b on the widest vectors the build targets
//     (16 floats with AVX-512, 8 with AVX2, 1 in the plain build); GFLOP/s = 2 · lanes · chains
//     · iterations / time. Two pipes × 4 cycles of latency need ≥ 8 chains: 16 chains with
//     AVX-512's 32 registers, 12 with 16 registers (16 would spill one: 81 against 133 GFLOP/s
//     with AVX2 on Zen 5, where 10 to 14 chains all give 133).
//     Every GFLOP/s figure of this binary can be read as a fraction of this one (per thread).
//   MaxValueStep<model>/threads/lanes: one training iteration of the max-value task (tasks/max_value.hpp, 500 sets ×
//     50 points: forward, loss, backward, optimiser) on that many threads and lanes. FLOP per set and block are counted for the
//     encoder blocks of the pointer model (bench/flops.hpp), × 3 for
//     forward + backward; `sets` is 500 per iteration.
//   LmStep/threads: one training step of SPEC's default language model (batch 32 windows of
//     32 tokens: forward, cross-entropy over 33,278 words, backward, clipping, AdamW) on random
//     token ids (the corpus does not change the work). FLOP: 3 × forward, forward = 32 ·
//     (2 blocks · (8·L·D² + 4·L²·D + 4·L·D·F) + PMA + 2·D·V); `tokens` counts the 32 predicted
//     tokens per step (PyTorch's examples count them the same way).
//   LmStepPhases/threads: the same step, phase by phase (see BM_LmStepPhases).
//   Forward passes, each model in two variants on the same parameters and the same seeded
//   random input, one thread: <InferOf, ...> is the forward-only pass (InferOf: one arena,
//   residual streams in place, projections in row tiles), <ActsOf, ...> training's forward
//   (ActsOf: every activation kept for backward); Acts time / Infer time compares their
//   speed (their memory is sizeof of each). GFLOP: bench/flops.hpp's model counts (the same
//   for both).
//     PointerForward<pass>: max_value::PointerNet = PointerModel<2, 16, 1, 64, 2> on one set
//       x [1, 50, 2] (randn + a shared randn offset, as the task draws them) to the
//       log-probabilities [1, 1, 50]; `sets` per second.
//     QPointerForward: the same with the model quantized to int8 (max_value::quantize:
//       Quantized<PointerNet>), float input to float output, integers between; kernels' backend
//       in the label.
//     SetForward<pass>: max_value::SetNet = SetTransformer<2, 64, 4, 16, 2> on the same kind
//       of set to the point [1, 1, 2]; `sets` per second.
//     QSetForward: the same with the model quantized (max_value::quantize), to the point.
//     LmForward<pass, B>: SPEC's language model on B windows of 32 random token ids [B, 32]
//       to the 33,278 logits [B, 1, 33,278], B = 1 (one window) and 32 (a training batch's
//       worth); `windows` per second.
//     LmForwardW8<B>: the same with int8 embedding and head (LanguageModelW8, weight-only).
//     LmForwardInteger<B>: the same with the whole model in integers (Quantized<LanguageModel>).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <thread>
#include <tuple>
#include <vector>

#include <stformer/kernels/vec.hpp>

#include "flops.hpp"
#include "language_model.hpp"
#include "max_value.hpp"
#include "written_models.hpp"

using namespace stformer;

namespace {

void BM_FmaPeak(benchmark::State& state) {
  using namespace kernels;
  // 12 chains where the ISA has 16 vector registers (AVX2, and SSE in the plain build): 16
  // accumulators and the two operands would not fit, and the spilled chain halves the rate.
  constexpr int C = W >= 16 ? 16 : 12;
  constexpr long iterations = 1 << 14;
  vf acc[C];
  for (int c = 0; c < C; ++c) acc[c] = splat(1e-3f * float(c));
  vf a = splat(0.999999f), b = splat(1e-7f);
  for (auto _ : state) {
    for (long i = 0; i < iterations; ++i) {
#pragma GCC unroll 32
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
  auto run = std::make_unique<Run<Net>>(0, size_t(state.range(0)), size_t(state.range(1)));
  Rng rng(0, 1);
  run->sets->draw(rng);
  for (auto _ : state) benchmark::DoNotOptimize(run->step(1e-4f));
  if constexpr (std::is_same_v<Net, PointerNet>)  // two EncoderBlock<16, 1, 64> over 50 points
    state.counters["GFLOP"] = benchmark::Counter(3 * 2 * encoder_flops(Batch, N, 16, 64) * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["sets"] = benchmark::Counter(double(Batch), benchmark::Counter::kIsIterationInvariantRate);
}

constexpr size_t V = 33278, L = 32, D = 128, H = 4, F = 512, Blocks = 2, LmBatch = 32;
using LmRun = lm::Run<V, L, D, H, F, Blocks, LmBatch>;

constexpr double lm_forward_flops(double B) { return language_model_flops(B, V, L, D, F, Blocks); }

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

// Where a language-model step's time goes, on `threads` threads: the step's phases, each timed
// on its own (ms per step, medians over the iterations), with how far each can be split:
//   lanes: forward, loss and backward of the lanes (as many threads as lanes: 2),
//   head: the head's forward and backward (each in 8 parts of the vocabulary: up to 8 threads),
//   sum: the lanes' gradients summed (split over the pool; the embedding rows serial),
//   norm: the gradient's norm (serial), opt: AdamW over 9.0M parameters (split over the pool,
//   bound by memory: it reads and writes 4 floats per parameter).
// lanes = gradient() − head − sum, gradient() timed as a whole.
void BM_LmStepPhases(benchmark::State& state) {
  using Clock = std::chrono::steady_clock;
  auto run = std::make_unique<LmRun>(0, size_t(state.range(0)));
  auto ids = random_stream(1 << 16);
  std::vector<double> t[5];  // gradient, head, sum, norm, opt
  const auto ms = [](Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double, std::milli>(b - a).count(); };
  for (auto _ : state) {
    const auto t0 = Clock::now();
    run->gradient(ids);
    const auto t1 = Clock::now();
    run->pool.run(LmRun::HeadParts, [&](size_t part) { run->head_forward(part); });  // again: the same logits
    run->pool.run(LmRun::HeadParts, [&](size_t part) { run->head_backward(part); });
    const auto t2 = Clock::now();
    run->sum_lanes();  // again: the same work (the lanes' embedding rows now add zeros)
    const auto t3 = Clock::now();
    const float norm = run->norm();
    const auto t4 = Clock::now();
    run->adamw->step(*run->model, run->grad(), 1e-4f, run->pool, clip_scale(norm, 1.0f));
    const auto t5 = Clock::now();
    state.SetIterationTime(ms(t0, t1) * 1e-3 + ms(t3, t5) * 1e-3);
    for (auto [i, a, b] : {std::tuple{0, t0, t1}, {1, t1, t2}, {2, t2, t3}, {3, t3, t4}, {4, t4, t5}}) t[i].push_back(ms(a, b));
  }
  const auto median = [](std::vector<double> v) {
    std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
    return v[v.size() / 2];
  };
  const double gradient = median(t[0]), head = median(t[1]), sum = median(t[2]);
  state.counters["lanes_ms"] = gradient - head - sum;
  state.counters["head_ms"] = head;
  state.counters["sum_ms"] = sum;
  state.counters["norm_ms"] = median(t[3]);
  state.counters["opt_ms"] = median(t[4]);
}

// One forward pass of Model through Pass (its InferOf or ActsOf) per iteration, on x (items
// sets or windows); the parameters from one seeded generator. Model and workspace are
// allocated before the loop.
template <class Model, class Pass, class X>
void run_forward(benchmark::State& state, const X& x, double flops, const char* counter, double items) {
  auto model = std::make_unique<Model>();
  auto pass = std::make_unique<Pass>();
  Rng rng(1);
  init_params(*model, rng);
  for (auto _ : state) {
    benchmark::DoNotOptimize(pass->forward(*model, x).data());
    benchmark::ClobberMemory();
  }
  state.counters["GFLOP"] = benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters[counter] = benchmark::Counter(items, benchmark::Counter::kIsIterationInvariantRate);
}

// One set of N = 50 points, drawn as max_value draws its training sets.
std::unique_ptr<max_value::Sets<1>> one_set() {
  auto s = std::make_unique<max_value::Sets<1>>();
  Rng rng(3, 1);
  s->draw(rng);
  return s;
}

template <template <class, size_t...> class Pass>
void BM_PointerForward(benchmark::State& state) {
  using namespace max_value;
  auto set = one_set();
  run_forward<PointerNet, Pass<PointerNet, 1, N>>(state, set->x, pointer_model_flops(1, N, 2, 16, 64, 2), "sets", 1);
}

// A set through max_value's model Net quantized (max_value::quantize: calibrated on the
// training sets of seed 0), from the float input to the float output (integers between);
// flops: the float model's.
template <class Net>
void run_quantized_forward(benchmark::State& state, double flops) {
  using namespace max_value;
  auto set = one_set();
  auto model = std::make_unique<Net>();
  Rng rng(1);
  init_params(*model, rng);
  auto q = quantize(*model, 0);
  auto pass = std::make_unique<InferOf<Quantized<Net>, 1, N>>();
  for (auto _ : state) {
    benchmark::DoNotOptimize(pass->forward(*q, set->x).data());
    benchmark::ClobberMemory();
  }
  state.counters["GFLOP"] = benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["sets"] = benchmark::Counter(1, benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(kernels::qv::name());
}

// The pointer model in int8: the input's quantization, the integer pass, the log-softmax of the logits.
void BM_QPointerForward(benchmark::State& state) {
  run_quantized_forward<max_value::PointerNet>(state, pointer_model_flops(1, max_value::N, 2, 16, 64, 2));
}

template <template <class, size_t...> class Pass>
void BM_SetForward(benchmark::State& state) {
  using namespace max_value;
  auto set = one_set();
  run_forward<SetNet, Pass<SetNet, 1, N>>(state, set->x, set_transformer_flops(1, N, 2, 64, 16, 2), "sets", 1);
}

// The set model in int8: the input's quantization, the integer pass, the point dequantized.
void BM_QSetForward(benchmark::State& state) {
  run_quantized_forward<max_value::SetNet>(state, set_transformer_flops(1, max_value::N, 2, 64, 16, 2));
}

template <template <class, size_t...> class Pass, size_t B>
void BM_LmForward(benchmark::State& state) {
  using Model = LanguageModel<V, L, D, H, F, Blocks>;
  auto windows = std::make_unique<IdTensor<B, L>>();
  auto ids = random_stream(B * L);
  std::copy(ids.begin(), ids.end(), windows->begin());
  run_forward<Model, Pass<Model, B>>(state, *windows, lm_forward_flops(B), "windows", B);
}

// BM_LmForwardThreads<B>/T: BM_LmForward<InferOf, B> on a ThreadPool of T threads (the same bits
// for any T).
template <size_t B>
void BM_LmForwardThreads(benchmark::State& state) {
  using Model = LanguageModel<V, L, D, H, F, Blocks>;
  auto windows = std::make_unique<IdTensor<B, L>>();
  auto ids = random_stream(B * L);
  std::copy(ids.begin(), ids.end(), windows->begin());
  auto model = std::make_unique<Model>();
  auto pass = std::make_unique<InferOf<Model, B>>();
  Rng rng(1);
  init_params(*model, rng);
  ThreadPool pool(size_t(state.range(0)));
  for (auto _ : state) {
    benchmark::DoNotOptimize(pass->forward(*model, *windows, Mask<B, L>{}, pool).data());
    benchmark::ClobberMemory();
  }
  state.counters["GFLOP"] = benchmark::Counter(lm_forward_flops(B) * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["windows"] = benchmark::Counter(double(B), benchmark::Counter::kIsIterationInvariantRate);
}

// SPEC's models as written by hand before they were Sequentials (tests/written_models.hpp),
// forward only, beside BM_PointerForward<InferOf>, BM_SetForward<InferOf> and
// BM_LmForward<InferOf, 1>: the derived plans' speed against the hand-written ones' (the same
// bits: tests/test_sequential.cpp).
void BM_WrittenPointerForward(benchmark::State& state) {
  using Net = written::PointerModel<2, 16, 1, 64, 2>;
  auto set = one_set();
  run_forward<Net, InferOf<Net, 1, max_value::N>>(state, set->x, pointer_model_flops(1, max_value::N, 2, 16, 64, 2), "sets", 1);
}
void BM_WrittenSetForward(benchmark::State& state) {
  using Net = written::SetTransformer<2, 64, 4, 16, 2>;
  auto set = one_set();
  run_forward<Net, InferOf<Net, 1, max_value::N>>(state, set->x, set_transformer_flops(1, max_value::N, 2, 64, 16, 2), "sets", 1);
}
void BM_WrittenLmForward(benchmark::State& state) {
  using Model = written::LanguageModel<V, L, D, H, F, Blocks>;
  auto windows = std::make_unique<IdTensor<1, L>>();
  auto ids = random_stream(L);
  std::copy(ids.begin(), ids.end(), windows->begin());
  run_forward<Model, InferOf<Model, 1>>(state, *windows, lm_forward_flops(1), "windows", 1);
}

// B random windows through a quantized copy of the language model, quantize(float model), from
// the ids to its logits; the float model is dropped first, so that only the copy is in memory.
template <size_t B, class Quantize>
void run_lm_quantized(benchmark::State& state, Quantize quantize) {
  using Model = LanguageModel<V, L, D, H, F, Blocks>;
  auto windows = std::make_unique<IdTensor<B, L>>();
  auto ids = random_stream(B * L);
  std::copy(ids.begin(), ids.end(), windows->begin());
  auto model = std::make_unique<Model>();
  Rng rng(1);
  init_params(*model, rng);
  auto q = quantize(*model);
  model.reset();
  auto pass = std::make_unique<InferOf<typename decltype(q)::element_type, B, L>>();
  for (auto _ : state) {
    benchmark::DoNotOptimize(pass->forward(*q, *windows).data());
    benchmark::ClobberMemory();
  }
  state.counters["GFLOP"] = benchmark::Counter(lm_forward_flops(B) * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["windows"] = benchmark::Counter(double(B), benchmark::Counter::kIsIterationInvariantRate);
}

// With int8 embedding and head (weight-only, LanguageModelW8: quantize_weights).
template <size_t B>
void BM_LmForwardW8(benchmark::State& state) {
  run_lm_quantized<B>(state, [](const auto& model) {
    auto model8 = std::make_unique<LanguageModelW8<V, L, D, H, F, Blocks>>();
    quantize_weights(model, *model8);
    return model8;
  });
}

// The whole model in integers (Quantized<LanguageModel>, calibrated on 64 random windows): the
// ids to the logits (int16, dequantized).
template <size_t B>
void BM_LmForwardInteger(benchmark::State& state) {
  run_lm_quantized<B>(state, [](const auto& model) { return lm::quantize_integer(model, random_stream(64 * L), 64); });
  state.SetLabel(kernels::qv::name());
}

}  // namespace

BENCHMARK(BM_FmaPeak);
// Training steps on 1, 2 and all of this machine's threads; the max-value steps on their default
// 2 lanes, and on 8 (what 8 cores would need) or as many as the threads.
void step_threads(benchmark::internal::Benchmark* b, bool lanes) {
  const long cores = std::max(1L, long(std::thread::hardware_concurrency()));
  if (lanes) {
    b->ArgNames({"threads", "lanes"});
    for (long t : {1L, 2L}) b->Args({t, 2});
    for (long t : {1L, 2L}) b->Args({t, std::max(8L, cores)});
    if (cores > 2) b->Args({cores, std::max(8L, cores)});
  } else {
    b->ArgName("threads")->Arg(1)->Arg(2);
    if (cores > 2) b->Arg(cores);
  }
  b->Unit(benchmark::kMillisecond);
}
BENCHMARK(BM_MaxValueStep<max_value::PointerNet>)->Apply([](auto* b) { step_threads(b, true); })->UseRealTime();
BENCHMARK(BM_MaxValueStep<max_value::SetNet>)->Apply([](auto* b) { step_threads(b, true); })->UseRealTime();
BENCHMARK(BM_LmStep)->Apply([](auto* b) { step_threads(b, false); })->UseRealTime();
BENCHMARK(BM_LmStepPhases)->Apply([](auto* b) { step_threads(b, false); })->UseManualTime();
BENCHMARK(BM_PointerForward<InferOf>)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_PointerForward<ActsOf>)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_QPointerForward)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_SetForward<InferOf>)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_WrittenPointerForward)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_WrittenSetForward)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_WrittenLmForward)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_SetForward<ActsOf>)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_QSetForward)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_LmForward<InferOf, 1>)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_LmForward<ActsOf, 1>)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_LmForward<InferOf, 32>)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_LmForwardThreads<1>)->Arg(1)->Arg(2)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_LmForwardThreads<32>)->Arg(1)->Arg(2)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_LmForwardW8<1>)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_LmForwardW8<32>)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_LmForwardInteger<1>)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_LmForwardInteger<32>)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_LmForward<ActsOf, 32>)->Unit(benchmark::kMicrosecond);
BENCHMARK_MAIN();
