// Forward-pass benchmarks: MultiHeadAttention (self-attention) and EncoderBlock (F = 4·D).
//
// FLOP counts (multiply-add = 2 FLOP; softmax, norms, biases and residuals not counted):
//   MultiHeadAttention, B sequences of N tokens, width D:  B · (8·N·D² + 4·N²·D)
//     (q, k, v, o projections 4 · 2·N·D²; scores q·kᵀ 2·N²·D; A·v 2·N²·D)
//   EncoderBlock adds the feed-forward layers:              B · 4·N·D·F
// Counters (printed per second): GFLOP, and tokens (B·N per iteration).
//
// EncoderBlockInfer / EncoderBlockInferInt8<B, N, D, H>: forward only, in place, on floats and on
// the block's integer form (int16 residual stream); the same FLOP count.
// MultiHeadAttentionThreads, EncoderBlockThreads<B, N, D, H>/T: MultiHeadAttention::Infer and
// EncoderBlock::Infer on a ThreadPool of T threads (T = 1: the calling thread alone, as the
// cases above), the same bits for any T.
//
// Products of one layer, float against int8, C[M,N] = A[M,K]·B[N,K]ᵀ + bias, FLOP 2·M·N·K:
//   Matmul<M, N, K>:  kernels::matmul_nt on floats (weights packed per call, as the layers do)
//   QMatmul<M, N, K>: kernels::qmatmul_nt on int8 to int32, then requantize to int8 (per-column
//     multipliers): what a quantized Linear costs. The shapes are the pointer model's layers
//     (50 points: projections 16 → 16, feed-forward 16 → 64 → 16) and the language model's
//     (32 tokens, 128 → 128, 128 → 512, 512 → 128).
//   QTilePeak: qmatmul_nt's register tile (6 rows × its panel, 128 entries of K) on operands
//     that stay in L1: the int8 products' ceiling on this core, to set beside BM_FmaPeak.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include <stformer/kernels/int8.hpp>
#include <stformer/quantized/quantize.hpp>
#include <stformer/stformer.hpp>
#include <stformer/train/parallel.hpp>

#include "flops.hpp"
#include "written_encoder.hpp"
#include "written_set.hpp"

using namespace stformer;

namespace {

// pass.forward per iteration, on pool's threads when given one (Infer passes).
template <class Block, class Pass, size_t B, size_t N, size_t D, class... Pool>
void run(benchmark::State& state, double flops, Pool&... pool) {
  auto p = std::make_unique<Block>();
  auto a = std::make_unique<Pass>();
  auto x = std::make_unique<Tensor<B, N, D>>();
  Rng rng(1);
  init_params(*p, rng);
  for (auto& v : *x) v = rng.normal();
  const auto masked = [&](auto&&... in) -> decltype(auto) {
    if constexpr (sizeof...(Pool) == 0)
      return a->forward(*p, in...);
    else
      return a->forward(*p, in..., Mask<B, N>{}, pool...);
  };
  for (auto _ : state) {
    if constexpr (requires { a->forward(*p, *x, *x); })
      benchmark::DoNotOptimize(masked(*x, *x).data());
    else
      benchmark::DoNotOptimize(masked(*x).data());
    benchmark::ClobberMemory();
  }
  state.counters["GFLOP"] = benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["tokens"] = benchmark::Counter(double(B * N), benchmark::Counter::kIsIterationInvariantRate);
}

template <size_t M, size_t N, size_t K>
void BM_Matmul(benchmark::State& state) {
  Rng rng(1);
  std::vector<float> a(M * K), b(N * K), bias(N), c(M * N);
  for (auto* v : {&a, &b, &bias})
    for (auto& x : *v) x = rng.normal();
  for (auto _ : state) {
    kernels::matmul_nt<M, N, K>(a.data(), K, b.data(), K, c.data(), N, 1.0f, bias.data());
    benchmark::DoNotOptimize(c.data());
    benchmark::ClobberMemory();
  }
  state.counters["GFLOP"] = benchmark::Counter(2e-9 * M * N * K, benchmark::Counter::kIsIterationInvariantRate);
}

template <size_t M, size_t N, size_t K>
void BM_QMatmul(benchmark::State& state) {
  Rng rng(1);
  std::vector<std::int8_t> a(M * K), b(N * K), y(M * N);
  std::vector<std::int32_t> bias(N), c(M * N);
  std::vector<std::int32_t> q(N), shift(N);
  for (auto* v : {&a, &b})
    for (auto& x : *v) x = std::int8_t(int(rng.below(255)) - 127);
  for (size_t j = 0; j < N; ++j) {
    const kernels::Multiplier m = kernels::quantize_multiplier(1e-3 * (1 + rng.uniform()));
    bias[j] = std::int32_t(rng.below(2001)) - 1000, q[j] = m.q, shift[j] = m.shift;
  }
  for (auto _ : state) {
    kernels::qmatmul_nt<M, N, K>(a.data(), K, b.data(), K, c.data(), N, bias.data());
    kernels::requantize(c.data(), M, N, q.data(), shift.data(), 0, -128, 127, y.data());
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  state.counters["GFLOP"] = benchmark::Counter(2e-9 * M * N * K, benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(kernels::qv::name());
}

void BM_QTilePeak(benchmark::State& state) {
  using kernels::qv;
  constexpr size_t R = kernels::tuning.q_tile_rows, NV = kernels::tuning.q_panel_vectors, KG = 64, NP = NV * qv::lanes, G = qv::G;
  alignas(64) static qv::qa a[R * KG * G];
  alignas(64) static qv::qb p[KG * NP * G];
  alignas(64) static std::int32_t c[R * NP], add[NP];
  std::fill_n(a, R * KG * G, qv::qa(3)), std::fill_n(p, KG * NP * G, qv::qb(5));
  for (auto _ : state) {
    kernels::detail::q_tile<R, NV, KG>(a, p, c, NP, add, NP, true);
    benchmark::DoNotOptimize(c);
    benchmark::ClobberMemory();
  }
  state.counters["GFLOP"] = benchmark::Counter(2e-9 * R * NP * KG * G, benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(qv::name());
}

template <size_t B, size_t N, size_t D, size_t H>
void BM_MultiHeadAttention(benchmark::State& state) {
  using Block = MultiHeadAttention<D, D, D, H>;
  run<Block, ActsOf<Block, B, N, N>, B, N, D>(state, mha_flops(B, N, D));
}

// The inference path: tiles of 16 queries × 256 keys with an online softmax (no N × N matrix).
template <size_t B, size_t N, size_t D, size_t H>
void BM_MultiHeadAttentionInfer(benchmark::State& state) {
  using Block = MultiHeadAttention<D, D, D, H>;
  run<Block, typename Block::template Infer<B, N, N>, B, N, D>(state, mha_flops(B, N, D));
}

template <size_t B, size_t N, size_t D, size_t H>
void BM_EncoderBlock(benchmark::State& state) {
  using Block = EncoderBlock<D, H, 4 * D>;
  run<Block, ActsOf<Block, B, N>, B, N, D>(state, encoder_flops(B, N, D, 4 * D));
}

// Forward only, in place on a residual stream (the step protocol's forward_in_place, with its
// scratch step::Scratch), F = 4·D: EncoderBlock on floats, in SPEC's form or another (Fm:
// blocks/form.hpp, PostNorm<Act>: PyTorch's nn.TransformerEncoderLayer).
template <class Block, class Stream, size_t B, size_t N>
void run_in_place(benchmark::State& state, const Block& p, const Stream& h0, double flops) {
  auto h = std::make_unique<Stream>();
  auto w = std::make_unique<step::Scratch<Block, B, N, 0>>();
  for (auto _ : state) {
    *h = h0;
    p.forward_in_place(*h, *w, Mask<B, N>{}, Serial{});
    benchmark::DoNotOptimize(h->data());
    benchmark::ClobberMemory();
  }
  state.counters["GFLOP"] = benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}
// Blk: EncoderBlock, or written::EncoderBlock (tests/written_encoder.hpp), the same block written
// part by part, as the declaration's reference: both as steps, in the same room.
template <size_t B, size_t N, size_t D, size_t H, class Fm = SpecForm, template <size_t, size_t, size_t, class> class Blk = EncoderBlock>
void BM_EncoderBlockInfer(benchmark::State& state) {
  using Block = Blk<D, H, 4 * D, Fm>;
  auto p = std::make_unique<Block>();
  auto x = std::make_unique<Tensor<B, N, D>>();
  Rng rng(1);
  init_params(*p, rng);
  for (auto& v : *x) v = rng.normal();
  run_in_place<Block, Tensor<B, N, D>, B, N>(state, *p, *x, encoder_flops(B, N, D, 4 * D));
}

template <size_t B, size_t N, size_t D, size_t H>
void BM_MultiHeadAttentionThreads(benchmark::State& state) {
  using Block = MultiHeadAttention<D, D, D, H>;
  ThreadPool pool(size_t(state.range(0)));
  run<Block, InferOf<Block, B, N, N>, B, N, D>(state, mha_flops(B, N, D), pool);
}
template <size_t B, size_t N, size_t D, size_t H, class Fm = SpecForm>
void BM_EncoderBlockThreads(benchmark::State& state) {
  using Block = EncoderBlock<D, H, 4 * D, Fm>;
  ThreadPool pool(size_t(state.range(0)));
  run<Block, InferOf<Block, B, N>, B, N, D>(state, encoder_flops(B, N, D, 4 * D), pool);
}

// A block's integer form as a step, in place on the int16 stream: the block quantized from 4
// batches of calibration (Calibration), the stream the input at the quantized model's input scale.
template <class Block, size_t B, size_t N, size_t D>
void run_int8(benchmark::State& state, double flops) {
  using M = Sequential<Named<"", Block>>;
  auto p = std::make_unique<M>();
  auto x = std::make_unique<Tensor<B, N, D>>();
  Rng rng(1);
  init_params(*p, rng);
  Calibration<M, B, N> cal(*p);
  for (int i = 0; i < 4; ++i) {
    for (auto& v : *x) v = rng.normal();
    cal.observe(*x);
  }
  const auto q = cal.quantize();
  const auto& block = q->template get<1>();  // after the input's QuantizeInput
  auto h0 = std::make_unique<TensorOf<std::int16_t, B, N, D>>();
  quant::quantize_input(x->data(), x->size(), q->template get<0>().scale(0), h0->data());
  run_in_place<std::remove_cvref_t<decltype(block)>, TensorOf<std::int16_t, B, N, D>, B, N>(state, block, *h0, flops);
  state.SetLabel(kernels::qv::name());
}
template <size_t B, size_t N, size_t D, size_t H, template <size_t, size_t, size_t, class> class Blk = EncoderBlock>
void BM_EncoderBlockInferInt8(benchmark::State& state) {
  run_int8<Blk<D, H, 4 * D, SpecForm>, B, N, D>(state, encoder_flops(B, N, D, 4 * D));
}

// SAB (a declaration), or written::SAB (tests/written_set.hpp), the block written by hand that
// the declaration replaced: float and int8, as steps in the same room.
template <size_t B, size_t N, size_t D, size_t H, template <size_t, size_t, template <size_t, auto...> class> class Blk = SAB>
void BM_SABInfer(benchmark::State& state) {
  using Block = Blk<D, H, ScaleNorm>;
  auto p = std::make_unique<Block>();
  auto x = std::make_unique<Tensor<B, N, D>>();
  Rng rng(1);
  init_params(*p, rng);
  for (auto& v : *x) v = rng.normal();
  run_in_place<Block, Tensor<B, N, D>, B, N>(state, *p, *x, sab_flops(B, N, D));
}
template <size_t B, size_t N, size_t D, size_t H, template <size_t, size_t, template <size_t, auto...> class> class Blk = SAB>
void BM_SABInferInt8(benchmark::State& state) {
  run_int8<Blk<D, H, ScaleNorm>, B, N, D>(state, sab_flops(B, N, D));
}

}  // namespace

// Template arguments: batch B, tokens N, width D, heads H.
BENCHMARK(BM_EncoderBlockInfer<1, 50, 16, 1>);
BENCHMARK(BM_EncoderBlockInferInt8<1, 50, 16, 1>);
BENCHMARK(BM_EncoderBlockInfer<1, 64, 64, 4>);
BENCHMARK(BM_EncoderBlockInferInt8<1, 64, 64, 4>);
BENCHMARK(BM_EncoderBlockInfer<1, 128, 128, 8>);
BENCHMARK(BM_EncoderBlockInferInt8<1, 128, 128, 8>);
BENCHMARK(BM_EncoderBlockInfer<1, 16, 64, 4>);
BENCHMARK(BM_EncoderBlockInfer<1, 256, 128, 8>);
BENCHMARK(BM_EncoderBlockInfer<1, 16, 64, 4, PostNorm<>>);
BENCHMARK(BM_EncoderBlockInfer<1, 64, 64, 4, PostNorm<>>);
BENCHMARK(BM_EncoderBlockInfer<1, 128, 128, 8, PostNorm<>>);
BENCHMARK(BM_EncoderBlockInfer<1, 256, 128, 8, PostNorm<>>);
BENCHMARK(BM_EncoderBlockInfer<1, 64, 64, 4, PostNorm<act::GELU>>);
BENCHMARK(BM_EncoderBlockInfer<1, 50, 16, 1, SpecForm, written::EncoderBlock>);
BENCHMARK(BM_EncoderBlockInferInt8<1, 50, 16, 1, written::EncoderBlock>);
BENCHMARK(BM_EncoderBlockInfer<1, 64, 64, 4, SpecForm, written::EncoderBlock>);
BENCHMARK(BM_EncoderBlockInferInt8<1, 64, 64, 4, written::EncoderBlock>);
BENCHMARK(BM_EncoderBlockInfer<1, 128, 128, 8, SpecForm, written::EncoderBlock>);
BENCHMARK(BM_EncoderBlockInferInt8<1, 128, 128, 8, written::EncoderBlock>);
BENCHMARK(BM_EncoderBlockInfer<1, 128, 128, 8, PostNorm<>, written::EncoderBlock>);
BENCHMARK(BM_EncoderBlockInfer<1, 128, 128, 8, PostNorm<act::GELU>>);
BENCHMARK(BM_SABInfer<1, 50, 64, 4>);
BENCHMARK(BM_SABInfer<1, 50, 64, 4, written::SAB>);
BENCHMARK(BM_SABInferInt8<1, 50, 64, 4>);
BENCHMARK(BM_SABInferInt8<1, 50, 64, 4, written::SAB>);
BENCHMARK(BM_MultiHeadAttention<1, 16, 64, 4>);
BENCHMARK(BM_MultiHeadAttention<1, 64, 64, 4>);
BENCHMARK(BM_MultiHeadAttention<1, 128, 128, 8>);
BENCHMARK(BM_MultiHeadAttention<1, 256, 128, 8>);
BENCHMARK(BM_MultiHeadAttention<32, 64, 64, 4>);
BENCHMARK(BM_MultiHeadAttentionInfer<1, 16, 64, 4>);
BENCHMARK(BM_MultiHeadAttentionInfer<1, 64, 64, 4>);
BENCHMARK(BM_MultiHeadAttentionInfer<1, 128, 128, 8>);
BENCHMARK(BM_MultiHeadAttentionInfer<1, 256, 128, 8>);
BENCHMARK(BM_MultiHeadAttentionThreads<1, 128, 128, 8>)->Arg(1)->Arg(2);
BENCHMARK(BM_MultiHeadAttentionThreads<1, 256, 128, 8>)->Arg(1)->Arg(2);
BENCHMARK(BM_EncoderBlockThreads<1, 128, 128, 8>)->Arg(1)->Arg(2);
BENCHMARK(BM_EncoderBlockThreads<1, 256, 128, 8>)->Arg(1)->Arg(2);
BENCHMARK(BM_EncoderBlockThreads<1, 256, 128, 8, PostNorm<>>)->Arg(1)->Arg(2);
BENCHMARK(BM_QTilePeak);
BENCHMARK(BM_Matmul<50, 16, 16>);
BENCHMARK(BM_QMatmul<50, 16, 16>);
BENCHMARK(BM_Matmul<50, 64, 16>);
BENCHMARK(BM_QMatmul<50, 64, 16>);
BENCHMARK(BM_Matmul<50, 16, 64>);
BENCHMARK(BM_QMatmul<50, 16, 64>);
BENCHMARK(BM_Matmul<32, 128, 128>);
BENCHMARK(BM_QMatmul<32, 128, 128>);
BENCHMARK(BM_Matmul<32, 512, 128>);
BENCHMARK(BM_QMatmul<32, 512, 128>);
BENCHMARK(BM_Matmul<32, 128, 512>);
BENCHMARK(BM_QMatmul<32, 128, 512>);
BENCHMARK(BM_Matmul<256, 128, 128>);
BENCHMARK(BM_Matmul<256, 512, 128>);
BENCHMARK(BM_Matmul<256, 128, 512>);
BENCHMARK(BM_EncoderBlock<1, 16, 64, 4>);
BENCHMARK(BM_EncoderBlock<1, 64, 64, 4>);
BENCHMARK(BM_EncoderBlock<1, 128, 128, 8>);
BENCHMARK(BM_EncoderBlock<1, 256, 128, 8>);
BENCHMARK(BM_EncoderBlock<32, 64, 64, 4>);


