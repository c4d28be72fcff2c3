// DecodeOf of a quantized model (stformer/compose/decode.hpp over Quantized<Model>): the
// integer model stepped one position at a time, its attentions' keys and values cached in
// int8, against its own causal pass over the whole sequence. In integers the two are the same
// integers (kernels::attend_cached_q8: the keys past a row get e = 0 in the pass, and the
// numerators' sum is exact), so every step's logits equal the pass's row bit for bit: tolerance
// 0. A llama2.c-shaped model (rotary grouped-query attention, RMSNorm, SwiGLU; its last row's
// head, llama2.c's inference form) and a nanoGPT-shaped one (learned positions, LayerNorm),
// stepped and prefilled, and through the steps before the float end (step_through: the integer
// logits); the cache's bytes at compile time; a full cache refuses a step. Decoders
// over a memory in integers (DecoderBlock's forms, TransformerDecoder): the memory's int8 keys
// and values taken once at start, each step the int16 row of the integer block's pass, key-padded.
#include <doctest/doctest.h>

#include <cstring>
#include <memory>

#include <stformer/compose/decode.hpp>
#include <stformer/quantized/memory.hpp>
#include <stformer/quantized/rotary_attention.hpp>

#include "quantized.hpp"
#include "user_blocks.hpp"

namespace {

// llama2.c's inference form: the last row's logits.
template <size_t V, size_t D, size_t H, size_t KVH, size_t F, size_t L>
struct LlamaLast : Sequential<Named<"tok_embeddings", Embedding<V, D>>, Named<"layers", Repeat<user::LlamaBlock<V, D, H, KVH, F, L>, 2>>,
                              Named<"norm", RMSNorm<D, epsilon(1e-5f)>>, LastToken<D>,
                              Named<"output", Linear<D, V, Init::xavier_normal, Bias::no>>> {
  static constexpr bool causal = true;
};

// nanoGPT's shape: token and learned position embeddings, pre-norm GELU blocks, a final norm, the head.
template <size_t V, size_t L, size_t D, size_t H>
struct Gpt : Sequential<Named<"wte", Embedding<V, D>>, Named<"wpe", PositionEmbedding<L, D>>,
                        Named<"h", Repeat<EncoderBlock<D, H, 4 * D, PreNorm<act::GELU>>, 2>>, Named<"ln_f", LayerNorm<D>>,
                        Named<"lm_head", Linear<D, V, Init::xavier_normal, Bias::no>>> {
  static constexpr bool causal = true;
};

// The quantized model of float model M, calibrated on random ids of B sequences of N.
template <class M, size_t B, size_t N, size_t V>
std::unique_ptr<Quantized<M>> quantized(const M& f, Rng& rng) {
  auto calibration = std::make_unique<Calibration<M, B, N>>(f);
  IdTensor<B, N> ids;
  for (int i = 0; i < 3; ++i) {
    for (auto& id : ids) id = std::int32_t(rng.below(V));
    calibration->observe(ids, Mask<B, N>{.causal = true});
  }
  return calibration->quantize();
}

// The quantized model Q stepped through the N ids of each of B sequences, then prefilled with
// their first P and stepped on, against its causal pass: step t's logits are row t of the pass
// (of the pass over rows 0 .. t, for a model ending in LastToken), entry for entry.
template <class Q, size_t B, size_t N, size_t P, size_t V>
void check_steps(const Q& q, const IdTensor<B, N>& ids) {
  constexpr bool last_row = dims<typename Q::template Output<B, N>>[1] == 1;
  using Dec = DecodeOf<Q, B, N>;
  auto dec = std::make_unique<Dec>();
  auto pass = std::make_unique<InferOf<Q, B, N>>();
  const Mask<B, N> causal{.causal = true};
  // row t of the causal pass (the pass over the first t + 1 rows, for the last row's logits)
  std::vector<float> rows(N * B * V);
  if constexpr (last_row) {
    [&]<size_t... T>(std::index_sequence<T...>) {
      (
          [&] {
            IdTensor<B, T + 1> head;
            for (size_t b = 0; b < B; ++b)
              for (size_t j = 0; j <= T; ++j) head(b, j) = ids(b, j);
            auto p = std::make_unique<InferOf<Q, B, T + 1>>();
            const auto& y = p->forward(q, head, Mask<B, T + 1>{.causal = true});
            std::copy_n(y.data(), B * V, rows.data() + T * B * V);
          }(),
          ...);
    }(std::make_index_sequence<N>{});
  } else {
    const auto& y = pass->forward(q, ids, causal);
    for (size_t t = 0; t < N; ++t)
      for (size_t b = 0; b < B; ++b) std::copy_n(y.data() + (b * N + t) * V, V, rows.data() + (t * B + b) * V);
  }
  IdTensor<B, 1> x;
  size_t differ = 0;
  for (size_t t = 0; t < N; ++t) {
    for (size_t b = 0; b < B; ++b) x(b, 0) = ids(b, t);
    const auto* y = dec->step(q, x);
    REQUIRE(y != nullptr);
    differ += std::memcmp(y->data(), rows.data() + t * B * V, B * V * sizeof(float)) != 0;
  }
  CHECK(differ == 0);
  CHECK(dec->step(q, x) == nullptr);  // a full cache: refused, nothing run
  CHECK(dec->position() == N);
  // the first P ids in one pass, then steps
  dec->reset();
  IdTensor<B, P> prompt;
  for (size_t b = 0; b < B; ++b)
    for (size_t j = 0; j < P; ++j) prompt(b, j) = ids(b, j);
  auto prompt_pass = std::make_unique<InferOf<Q, B, P>>();
  const auto* y0 = dec->prefill(q, prompt, *prompt_pass);
  REQUIRE(y0 != nullptr);
  for (size_t b = 0; b < B; ++b) {  // the prompt's last row
    const float* last = y0->data() + (last_row ? b * V : (b * P + P - 1) * V);
    CHECK(std::memcmp(last, rows.data() + ((P - 1) * B + b) * V, V * sizeof(float)) == 0);
  }
  size_t differ_after = 0;
  for (size_t t = P; t < N; ++t) {
    for (size_t b = 0; b < B; ++b) x(b, 0) = ids(b, t);
    const auto* y = dec->step(q, x);
    REQUIRE(y != nullptr);
    differ_after += std::memcmp(y->data(), rows.data() + t * B * V, B * V * sizeof(float)) != 0;
  }
  CHECK(differ_after == 0);
  // the integer logits before the float end (step_through: what a core without an FPU runs):
  // the causal pass's steps 0 .. steps − 2, row for row
  if constexpr (!last_row) {
    constexpr size_t Last = Q::steps - 1;
    const auto& z = pass->template forward_steps<0, Last>(q, ids, causal);
    constexpr size_t W = step::count<std::remove_cvref_t<decltype(z)>> / (B * N);
    auto through = std::make_unique<Dec>();
    size_t differ_through = 0;
    for (size_t t = 0; t < N; ++t) {
      for (size_t b = 0; b < B; ++b) x(b, 0) = ids(b, t);
      const auto* y = through->template step_through<Last>(q, x);
      REQUIRE(y != nullptr);
      for (size_t b = 0; b < B; ++b) differ_through += !std::equal(y->data() + b * W, y->data() + (b + 1) * W, z.data() + (b * N + t) * W);
    }
    CHECK(differ_through == 0);
    CHECK(through->template step_through<Last>(q, x) == nullptr);
  }
  MESSAGE("DecodeOf<Quantized<Model>, " << B << ", " << N << ">: " << N << " steps and a prompt of " << P
                                        << " then steps, every step's logits the causal pass's bit for bit; " << sizeof(Dec)
                                        << " B, of which the int8 cache " << Dec::cache_bytes << " B");
}

// Float model M of vocabulary V initialised from seed, quantized, then checked on random ids of
// B sequences of N (a prompt of P).
template <class M, size_t B, size_t N, size_t P, size_t V>
void check_model(std::uint64_t seed) {
  Rng rng(seed, 0);
  auto f = std::make_unique<M>();
  init_params(*f, rng);
  const auto q = quantized<M, B, N, V>(*f, rng);
  IdTensor<B, N> ids;
  for (auto& id : ids) id = std::int32_t(rng.below(V));
  check_steps<Quantized<M>, B, N, P, V>(*q, ids);
}

}  // namespace

TEST_CASE("DecodeOf<Quantized<Model>>: llama2.c's model in integers, stepped, gives its causal pass's logits bit for bit") {
  using M = user::Llama<48, 32, 8, 2, 64, 32>;
  check_model<M, 2, 20, 7, 48>(71);
  // 2 layers, 2 sequences, 2 key/value heads of 4 in int8: kᵀ and vᵀ of 32 columns (20 positions rounded up to 16s)
  static_assert(DecodeOf<Quantized<M>, 2, 20>::cache_bytes == 2 * 2 * 2 * 8 * 32);
}

TEST_CASE("DecodeOf<Quantized<Model>>: llama2.c's inference form (the last row's head) in integers, one sequence") {
  check_model<LlamaLast<40, 16, 4, 1, 40, 16>, 1, 12, 5, 40>(72);
}

TEST_CASE("DecodeOf<Quantized<Model>>: a nanoGPT-shaped model in integers (learned positions, LayerNorm, GELU), stepped and prefilled") {
  using M = Gpt<40, 16, 32, 4>;
  check_model<M, 2, 16, 9, 40>(73);
  static_assert(DecodeOf<Quantized<M>, 2, 16>::cache_bytes == 2 * 2 * 2 * 32 * 16);  // 2 blocks' kᵀ and vᵀ [2, 32, 16], int8
}

namespace {
// Float decoder F calibrated (MemoryCalibration) and made integer; its rows and memory as int16
// streams; stepped from start over the memory against the integer block's pass over all N rows.
template <class F, size_t B, size_t N, size_t M, size_t P>
void check_memory_decoder(std::uint64_t seed) {
  using Q = typename Int8Of<F>::type;
  using Dec = DecodeOf<Q, B, N, M>;
  constexpr size_t D = step::count<typename Dec::Input> / B;
  Rng rng(seed, 0);
  auto f = std::make_unique<F>();
  init_params(*f, rng);
  test::randomize(*f, rng);
  Tensor<B, N, D> x;
  Tensor<B, M, D> m;
  test::fill(x, rng, 2.0f), test::fill(m, rng, 3.0f);
  const KeyMask<B, M> keys = test::lengths_mask<B, M>({M, 5});
  auto cal = std::make_unique<MemoryCalibration<F, B, N, M>>(*f);
  cal->observe(x, m), cal->observe(x, m, &keys);
  const auto q = cal->quantize();
  TensorOf<std::int16_t, B, N, D> h;
  TensorOf<std::int16_t, B, M, D> mq;
  round_through(x, cal->x_scale(), h);
  round_through(m, cal->memory_scale(), mq);
  auto pass = std::make_unique<typename Q::template Infer<B, N, M>>();
  const TensorOf<std::int16_t, B, N, D> all = pass->forward(*q, h, mq, &keys);
  auto dec = std::make_unique<Dec>();
  dec->start(*q, mq, &keys);
  typename Dec::Input xt;
  const auto row_of = [&](size_t t) -> const typename Dec::Input& {
    for (size_t b = 0; b < B; ++b) std::copy_n(h.data() + (b * N + t) * D, D, xt.data() + b * D);
    return xt;
  };
  const auto same = [&](const std::int16_t* y, size_t t) {
    for (size_t b = 0; b < B; ++b)
      if (!std::equal(y + b * D, y + (b + 1) * D, all.data() + (b * N + t) * D)) return false;
    return true;
  };
  size_t differ = 0;
  for (size_t t = 0; t < N; ++t) {
    const auto* y = dec->step(*q, row_of(t));
    REQUIRE(y != nullptr);
    differ += !same(y->data(), t);
  }
  CHECK(differ == 0);
  CHECK(dec->step(*q, xt) == nullptr);  // a full cache
  dec->reset();
  typename Q::template Input<B, P> prompt;
  for (size_t b = 0; b < B; ++b) std::copy_n(h.data() + b * N * D, P * D, prompt.data() + b * P * D);
  auto prompt_pass = std::make_unique<typename Q::template Infer<B, P, M>>();
  const auto* y0 = dec->prefill(*q, prompt, *prompt_pass);
  REQUIRE(y0 != nullptr);
  for (size_t b = 0; b < B; ++b) CHECK(std::equal(y0->data() + b * P * D, y0->data() + (b + 1) * P * D, all.data() + b * N * D));
  size_t differ_after = 0;
  for (size_t t = P; t < N; ++t) differ_after += !same(dec->step(*q, row_of(t))->data(), t);
  CHECK(differ_after == 0);
  MESSAGE("DecodeOf of an integer decoder over " << M << " memory rows (one sequence's padded to 5): " << N
                                                 << " steps and a prompt then steps, every row the integer pass's; " << sizeof(Dec)
                                                 << " B, of which the int8 cache " << Dec::cache_bytes << " B and the memory's int8 keys and values "
                                                 << Dec::memory_bytes << " B");
}
}  // namespace

TEST_CASE_TEMPLATE("DecodeOf of a decoder over a memory in integers: each step the integer block's row, the memory's keys and values taken once", Fm,
                   SpecForm, PostNorm<act::GELU>, PreNorm<act::ReLU>) {
  check_memory_decoder<DecoderBlock<32, 4, 48, Fm>, 2, 12, 9, 5>(74);
  check_memory_decoder<TransformerDecoder<DecoderBlock<32, 4, 48, Fm>, 2, LayerNorm<32>>, 2, 12, 9, 5>(75);
}
