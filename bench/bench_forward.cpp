// Forward-pass benchmarks: MultiHeadAttention (self-attention) and EncoderBlock (F = 4·D).
//
// FLOP counts (multiply-add = 2 FLOP; softmax, norms, biases and residuals not counted):
//   MultiHeadAttention, B sequences of N tokens, width D:  B · (8·N·D² + 4·N²·D)
//     (q, k, v, o projections 4 · 2·N·D²; scores q·kᵀ 2·N²·D; A·v 2·N²·D)
//   EncoderBlock adds the feed-forward layers:              B · 4·N·D·F
// Counters (printed per second): GFLOP, and tokens (B·N per iteration).
#include <benchmark/benchmark.h>

#include <memory>

#include <stformer/stformer.hpp>

#include "flops.hpp"

using namespace stformer;

namespace {

template <class Block, class Acts, size_t B, size_t N, size_t D>
void run(benchmark::State& state, double flops) {
  auto p = std::make_unique<Block>();
  auto a = std::make_unique<Acts>();
  auto x = std::make_unique<Tensor<B, N, D>>();
  Rng rng(1);
  init_params(*p, rng);
  for (auto& v : *x) v = rng.normal();
  for (auto _ : state) {
    if constexpr (requires { a->forward(*p, *x, *x); })
      benchmark::DoNotOptimize(a->forward(*p, *x, *x).data());
    else
      benchmark::DoNotOptimize(a->forward(*p, *x).data());
    benchmark::ClobberMemory();
  }
  state.counters["GFLOP"] = benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["tokens"] = benchmark::Counter(double(B * N), benchmark::Counter::kIsIterationInvariantRate);
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

}  // namespace

// Template arguments: batch B, tokens N, width D, heads H.
BENCHMARK(BM_MultiHeadAttention<1, 16, 64, 4>);
BENCHMARK(BM_MultiHeadAttention<1, 64, 64, 4>);
BENCHMARK(BM_MultiHeadAttention<1, 128, 128, 8>);
BENCHMARK(BM_MultiHeadAttention<1, 256, 128, 8>);
BENCHMARK(BM_MultiHeadAttention<32, 64, 64, 4>);
BENCHMARK(BM_MultiHeadAttentionInfer<1, 16, 64, 4>);
BENCHMARK(BM_MultiHeadAttentionInfer<1, 64, 64, 4>);
BENCHMARK(BM_MultiHeadAttentionInfer<1, 128, 128, 8>);
BENCHMARK(BM_MultiHeadAttentionInfer<1, 256, 128, 8>);
BENCHMARK(BM_EncoderBlock<1, 16, 64, 4>);
BENCHMARK(BM_EncoderBlock<1, 64, 64, 4>);
BENCHMARK(BM_EncoderBlock<1, 128, 128, 8>);
BENCHMARK(BM_EncoderBlock<1, 256, 128, 8>);
BENCHMARK(BM_EncoderBlock<32, 64, 64, 4>);


