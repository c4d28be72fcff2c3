// DecodeOf (stformer/compose/decode.hpp): causal models stepped one position at a time, their
// attentions' keys and values cached, against the causal pass over the whole sequence: step t's
// output is row t of InferOf's output (causal: row t reads rows 0 .. t alone), within 1e-6 of the
// output's largest entry (3e-6 for the llama-shaped model, whose random weights give large
// scores; or 4 times the difference between the pass over T rows and the pass over their first
// T/2, where that is larger: the rounding of sums in another order), for a nanoGPT-shaped model (token and learned positions, pre-norm
// blocks), llama2.c's (rotary grouped-query attention), SPEC's encoder blocks over rows with
// sinusoidal positions, GPT-J's parallel blocks and a SwiGLU layer; a full cache refuses the next step; reset starts again with the same bits; a
// prompt in one pass (prefill), then steps, gives the same rows. The sampler (stformer/compose/generate.hpp)
// draws at the probabilities its rule gives; generate continues a prompt as the causal pass does.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <memory>

#include <stformer/compose/generate.hpp>
#include <stformer/stformer.hpp>

#include "causal_lm.hpp"
#include "user_blocks.hpp"
#include "util.hpp"

using namespace stformer;

namespace {

// nanoGPT's shape: token and learned position embeddings, pre-norm GELU blocks, a final norm, the head.
template <size_t V, size_t L, size_t D, size_t H>
struct Gpt : Sequential<Named<"wte", Embedding<V, D>>, Named<"wpe", PositionEmbedding<L, D>>,
                        Named<"h", Repeat<EncoderBlock<D, H, 4 * D, PreNorm<act::GELU>>, 2>>, Named<"ln_f", LayerNorm<D>>,
                        Named<"lm_head", Linear<D, V, Init::xavier_normal, Bias::no>>> {
  static constexpr bool causal = true;
};
// SPEC's encoder blocks (ScaleNorm, separate projections, ReLU) over rows of 3 with sinusoidal
// positions; a llama-style SwiGLU block after them; the last row's head.
struct SpecRows : Sequential<Linear<3, 16>, PositionalEncoding<12, 16>, Repeat<EncoderBlock<16, 4, 32>, 2>,
                             Named<"", Residual<Sequential<Named<"norm", RMSNorm<16>>, user::SwiGLU<16, 24>>>>, LastToken<16>,
                             Linear<16, 5>> {
  static constexpr bool causal = true;
};

using user::Llama;

// Largest |a − b| over the largest |b| (at least 1e-3), n entries.
double relative_rows(const float* a, const float* b, size_t n) {
  double err = 0, scale = 1e-3;
  for (size_t i = 0; i < n; ++i) {
    err = std::max(err, double(std::abs(a[i] - b[i])));
    scale = std::max(scale, double(std::abs(b[i])));
  }
  return err / scale;
}

// The model stepped through T positions of x (B sequences) against the causal pass over all of
// them: step t gives row t (for a model ending in LastToken, the last step gives the pass's output).
template <class M, size_t B, size_t T, class X>
void check_steps(const M& model, const X& x, double tolerance = 1e-6) {
  using Step = typename DecodeOf<M, B, T>::Input;
  constexpr size_t W = step::count<typename DecodeOf<M, B, T>::Output> / B;
  auto dec = std::make_unique<DecodeOf<M, B, T>>();
  auto full = std::make_unique<InferOf<M, B, T>>();
  const auto& all = full->forward(model, x);
  constexpr bool last_row = dims<std::remove_cvref_t<decltype(all)>>[1] == 1;
  double worst = 0;
  std::vector<float> first_pass;
  for (int round = 0; round < 2; ++round) {  // the second time after reset: the same bits
    dec->reset();
    for (size_t t = 0; t < T; ++t) {
      Step xt;
      constexpr size_t row = step::count<Step> / B;
      for (size_t b = 0; b < B; ++b) std::copy_n(x.data() + (b * T + t) * row, row, xt.data() + b * row);
      const auto* y = dec->step(model, xt);
      REQUIRE(y != nullptr);
      CHECK(dec->position() == t + 1);
      if (round == 1) {
        CHECK(std::equal(y->begin(), y->end(), first_pass.begin() + t * B * W));
        continue;
      }
      first_pass.insert(first_pass.end(), y->begin(), y->end());
      if (last_row && t + 1 < T) continue;  // a model ending in LastToken: the pass gives the last step's alone
      std::vector<float> want(B * W);
      for (size_t b = 0; b < B; ++b) std::copy_n(all.data() + (b * (last_row ? 1 : T) + (last_row ? 0 : t)) * W, W, want.data() + b * W);
      worst = std::max(worst, relative_rows(y->data(), want.data(), B * W));
    }
    CHECK(dec->step(model, Step{}) == nullptr);  // a full cache: refused, nothing run
    CHECK(dec->position() == T);
  }
  const double steps_worst = worst;
  // a prompt of P = T/2 positions in one pass, then steps: the same rows
  constexpr size_t P = T / 2;
  using Prompt = typename M::template Input<B, P>;
  Prompt prompt;
  constexpr size_t row = step::count<Prompt> / (B * P);
  for (size_t b = 0; b < B; ++b) std::copy_n(x.data() + b * T * row, P * row, prompt.data() + b * P * row);
  auto pass = std::make_unique<InferOf<M, B, P>>();
  CHECK(dec->prefill(model, prompt, *pass) == nullptr);  // the cache is not empty: refused
  dec->reset();
  const auto* first = dec->prefill(model, prompt, *pass);
  REQUIRE(first != nullptr);
  CHECK(dec->position() == P);
  if constexpr (!last_row)
    for (size_t b = 0; b < B; ++b) worst = std::max(worst, relative_rows(first->data() + b * P * W, all.data() + b * T * W, P * W));
  for (size_t t = P; t < T; ++t) {
    Step xt;
    for (size_t b = 0; b < B; ++b) std::copy_n(x.data() + (b * T + t) * row, row, xt.data() + b * row);
    const auto* y = dec->step(model, xt);
    REQUIRE(y != nullptr);
    if (last_row && t + 1 < T) continue;
    for (size_t b = 0; b < B; ++b)
      worst = std::max(worst, relative_rows(y->data() + b * W, all.data() + (b * (last_row ? 1 : T) + (last_row ? 0 : t)) * W, W));
  }
  // the yardstick: the causal pass over the first P rows against the pass over all T (the same
  // function of those rows, another order of sums)
  double itself = 0;
  if constexpr (!last_row)
    for (size_t b = 0; b < B; ++b) itself = std::max(itself, relative_rows(pass->forward(model, prompt).data() + b * P * W, all.data() + b * T * W, P * W));
  MESSAGE("DecodeOf against the causal pass over " << T << " positions of " << B << " sequences: largest difference " << worst
                                                   << " (relative; steps alone " << steps_worst << "; the pass over " << P
                                                   << " rows against the pass over " << T << ": " << itself << "); " << sizeof(DecodeOf<M, B, T>)
                                                   << " B, of which the cache " << DecodeOf<M, B, T>::cache_bytes
                                                   << " B, the plan of a step " << sizeof(InferOf<M, B, 1>) << " B");
  CHECK(worst <= std::max(tolerance, 4 * itself));
}

}  // namespace

TEST_CASE("DecodeOf: a nanoGPT-shaped model stepped token by token gives the causal pass's rows") {
  Rng rng(61);
  auto model = test::make<Gpt<40, 16, 32, 4>>();
  test::randomize(*model, rng);
  IdTensor<2, 16> ids;
  for (auto& i : ids) i = std::int32_t(rng.below(40));
  check_steps<Gpt<40, 16, 32, 4>, 2, 16>(*model, ids);
  // the memory is known at compile time: the caches (2 blocks' k and v [B, 16, 32]), a row of
  // scores and the plan of one step
  using Dec = DecodeOf<Gpt<40, 16, 32, 4>, 2, 16>;
  static_assert(Dec::cache_bytes == sizeof(float) * 2 * 2 * 2 * 16 * 32);
  static_assert(sizeof(Dec) >= Dec::cache_bytes + 5 * 16 + sizeof(InferOf<Gpt<40, 16, 32, 4>, 2, 1>));
  static_assert(sizeof(Dec) <= Dec::cache_bytes + 5 * 16 + sizeof(InferOf<Gpt<40, 16, 32, 4>, 2, 1>) + 192);
}

TEST_CASE("DecodeOf: llama2.c's model (rotary grouped-query attention, RMSNorm, SwiGLU), its cache KVH/H of the heads'") {
  using M = Llama<48, 32, 8, 2, 64, 24>;
  Rng rng(64);
  auto model = test::make<M>();
  test::randomize(*model, rng);
  IdTensor<2, 24> ids;
  for (auto& i : ids) i = std::int32_t(rng.below(48));
  // (within 3e-6: its scores, of random weights, reach tens, and a score's rounding moves its
  // weight e^s by |s| units in the last place; 2.1e-6 on x86-64, 1.6e-6 on aarch64)
  check_steps<M, 2, 24>(*model, ids, 3e-6);
  // 2 layers, 2 sequences, 2 key/value heads of 4: kᵀ and vᵀ of 32 columns (24 positions rounded up to 16s)
  static_assert(DecodeOf<M, 2, 24>::cache_bytes == sizeof(float) * 2 * 2 * 8 * (32 + 32));
}

TEST_CASE("DecodeOf: SPEC's encoder blocks over rows with sinusoidal positions, a SwiGLU block, GPT-J's parallel blocks") {
  Rng rng(62);
  auto spec = test::make<SpecRows>();
  test::randomize(*spec, rng);
  Tensor<1, 12, 3> rows;
  test::fill(rows, rng);
  check_steps<SpecRows, 1, 12>(*spec, rows);
  auto gptj = test::make<CausalLM>();
  test::randomize(*gptj, rng);
  IdTensor<3, 8> ids;
  for (auto& i : ids) i = std::int32_t(rng.below(11));
  check_steps<CausalLM, 3, 8>(*gptj, ids);
}

namespace {
// A decoder over a memory stepped through T rows of x against WithMemory's pass over all of them
// and m (with the memory's key mask): step t gives row t, within 1e-6 of the output's largest
// entry or 4 times the difference between the pass over T rows and the pass over their first T/2
// (as check_steps); the memory's keys and values are taken at start alone (m is overwritten
// after it); a prompt's pass, then steps, gives the same rows.
template <class Dec, size_t B, size_t T, size_t M>
void check_memory_steps(const Dec& model, const typename Dec::template Input<B, T>& x, typename Dec::template MemoryRows<B, M> m,
                        const KeyMask<B, M>* keys, double tolerance = 1e-6) {
  using D = DecodeOf<Dec, B, T, M>;
  constexpr size_t W = step::count<typename D::Output> / B;
  auto full = std::make_unique<typename Dec::template Infer<B, T, M>>();
  const auto all = full->forward(model, x, m, keys);  // a copy: the pass below reuses it
  constexpr size_t P = T / 2;
  typename Dec::template Input<B, P> prompt;
  for (size_t b = 0; b < B; ++b) std::copy_n(x.data() + b * T * W, P * W, prompt.data() + b * P * W);
  auto pass = std::make_unique<typename Dec::template Infer<B, P, M>>();
  // the yardstick: the pass over the first P rows against the pass over all T (the same function
  // of those rows, another order of sums)
  double itself = 0;
  {
    const auto& part = pass->forward(model, prompt, m, keys);
    for (size_t b = 0; b < B; ++b) itself = std::max(itself, relative_rows(part.data() + b * P * W, all.data() + b * T * W, P * W));
  }
  auto dec = std::make_unique<D>();
  typename D::Input xt;
  CHECK_THROWS_AS(dec->step(model, xt), std::invalid_argument);  // no memory yet: refused
  dec->start(model, m, keys);
  std::fill(m.begin(), m.end(), std::nanf(""));  // read at start alone
  auto row_of = [&](size_t t) {
    for (size_t b = 0; b < B; ++b) std::copy_n(x.data() + (b * T + t) * W, W, xt.data() + b * W);
    return xt;
  };
  auto want = [&](size_t t) {
    std::vector<float> w(B * W);
    for (size_t b = 0; b < B; ++b) std::copy_n(all.data() + (b * T + t) * W, W, w.data() + b * W);
    return w;
  };
  double worst = 0;
  std::vector<float> first_pass;
  for (int round = 0; round < 2; ++round) {  // again after reset, over the same memory: the same bits
    dec->reset();
    for (size_t t = 0; t < T; ++t) {
      const auto* y = dec->step(model, row_of(t));
      REQUIRE(y != nullptr);
      if (round == 1) {
        CHECK(std::equal(y->begin(), y->end(), first_pass.begin() + t * B * W));
        continue;
      }
      first_pass.insert(first_pass.end(), y->begin(), y->end());
      worst = std::max(worst, relative_rows(y->data(), want(t).data(), B * W));
    }
    CHECK(dec->step(model, xt) == nullptr);  // a full cache
  }
  CHECK(dec->prefill(model, prompt, *pass) == nullptr);  // not empty
  dec->reset();
  const auto* first = dec->prefill(model, prompt, *pass);
  REQUIRE(first != nullptr);
  for (size_t b = 0; b < B; ++b) worst = std::max(worst, relative_rows(first->data() + b * P * W, all.data() + b * T * W, P * W));
  for (size_t t = P; t < T; ++t) {
    const auto* y = dec->step(model, row_of(t));
    REQUIRE(y != nullptr);
    worst = std::max(worst, relative_rows(y->data(), want(t).data(), B * W));
  }
  MESSAGE("DecodeOf over a memory of " << M << " rows against WithMemory's pass over " << T << " rows: largest difference " << worst
                                       << " (the pass over " << P << " rows against the pass over " << T << ": " << itself << "); " << sizeof(D)
                                       << " B, of which the cache " << D::cache_bytes << " B and the memory's keys and values " << D::memory_bytes << " B");
  CHECK(worst <= std::max(tolerance, 4 * itself));
}
}  // namespace

TEST_CASE("DecodeOf: decoders over a memory (SPEC's and PyTorch's decoder layers, TransformerDecoder), the memory's keys and values projected once") {
  constexpr size_t D = 16, H = 4, F = 32, B = 2, T = 10, M = 7;
  Rng rng(65);
  KeyMask<B, M> keys;
  for (size_t j = 0; j < M; ++j) keys(0, j) = j < 5, keys(1, j) = j % 3 != 1;  // padding, and holes
  Tensor<B, T, D> x;
  Tensor<B, M, D> m;
  test::fill(x, rng);
  test::fill(m, rng);
  {
    using Spec = DecoderBlock<D, H, F>;
    auto block = test::make<Spec>();
    test::randomize(*block, rng);
    check_memory_steps<Spec, B, T, M>(*block, x, m, &keys);
    check_memory_steps<Spec, B, T, M>(*block, x, m, nullptr);
    // the memory's keys and values: k and v of each of the M rows (a vector of 16 columns), and the counts
    static_assert(DecodeOf<Spec, B, T, M>::memory_bytes == 2 * B * D * 16 * sizeof(float) + 64);
  }
  {
    using Torch = TransformerDecoder<DecoderBlock<D, H, F, PostNorm<act::GELU>>, 2, LayerNorm<D>>;
    auto stack = test::make<Torch>();
    test::randomize(*stack, rng);
    // (within 2e-6: two post-norm layers and a final norm, each LayerNorm dividing the rounding
    // of the sums before it by the rows' spread; 1.2e-6 with AVX-512's 16-lane sums, 6.2e-7 with AVX2)
    check_memory_steps<Torch, B, T, M>(*stack, x, m, &keys, 2e-6);
    // a sequence whose memory is all masked: its cross-attentions add their output bias alone, as in the pass
    KeyMask<B, M> none = keys;
    for (size_t j = 0; j < M; ++j) none(1, j) = false;
    check_memory_steps<Torch, B, T, M>(*stack, x, m, &none, 2e-6);
    static_assert(DecodeOf<Torch, B, T, M>::memory_bytes == 2 * (2 * B * D * 16 * sizeof(float) + 64));
    static_assert(DecodeOf<Torch, B, T, M>::cache_bytes == 2 * 2 * B * D * 16 * sizeof(float));
  }
}

TEST_CASE("Sampler: greedy, temperature, top-k and top-p draws at their probabilities, from + and × alone") {
  for (double x = -700; x <= 0; x += 0.37) CHECK(std::abs(exp_nonpositive(x) - std::exp(x)) <= 4e-16 * std::exp(x));
  CHECK(exp_nonpositive(-800) == 0.0);
  // logits whose softmax is 0.5, 0.3, 0.15, 0.05 (and a sixth never drawn)
  const double p[4] = {0.5, 0.3, 0.15, 0.05};
  float logits[5];
  for (size_t i = 0; i < 4; ++i) logits[i] = float(std::log(p[i]));
  logits[4] = -1e30f;
  const auto frequencies = [&](Sampling how, std::uint64_t seed) {
    Sampler<5> s(how, seed);
    std::vector<double> f(5, 0.0);
    constexpr int draws = 40000;
    for (int i = 0; i < draws; ++i) {
      const std::int32_t t = s.next(logits);
      REQUIRE((t >= 0 && t < 5));
      f[size_t(t)] += 1.0 / draws;
    }
    return f;
  };
  const auto near = [](const std::vector<double>& f, std::initializer_list<double> want) {
    size_t i = 0;
    for (double w : want) CHECK(std::abs(f[i++] - w) < 0.01);
  };
  near(frequencies({.temperature = 1.0f}, 1), {0.5, 0.3, 0.15, 0.05, 0});
  near(frequencies({.temperature = 1.0f, .top_k = 2}, 2), {0.625, 0.375, 0, 0, 0});                 // the two largest, renormalized
  near(frequencies({.temperature = 1.0f, .top_p = 0.75f}, 3), {0.625, 0.375, 0, 0, 0});             // 0.5 < 0.75 ≤ 0.5 + 0.3
  near(frequencies({.temperature = 1.0f, .top_p = 0.85f}, 4), {0.5 / 0.95, 0.3 / 0.95, 0.15 / 0.95, 0, 0});
  // T = 0.5 squares the probabilities: 0.25, 0.09, 0.0225, 0.0025 over their sum
  const double sq = 0.25 + 0.09 + 0.0225 + 0.0025;
  near(frequencies({.temperature = 0.5f}, 5), {0.25 / sq, 0.09 / sq, 0.0225 / sq, 0.0025 / sq, 0});
  // greedy: the largest logit, the smaller id on a tie; the same seed, the same draws
  Sampler<5> greedy;
  CHECK(greedy.next(logits) == 0);
  logits[2] = logits[0];
  CHECK(greedy.next(logits) == 0);
  logits[3] = logits[0] + 1;
  CHECK(greedy.next(logits) == 3);
  Sampler<5> a({.temperature = 1.0f}, 9), b({.temperature = 1.0f}, 9);
  for (int i = 0; i < 100; ++i) CHECK(a.next(logits) == b.next(logits));
  logits[1] = std::nanf("");
  CHECK(a.next(logits) == -1);
}

TEST_CASE("generate: a prompt continued through the cache draws the tokens the causal pass gives, up to a stop token") {
  using M = Gpt<40, 16, 32, 4>;
  Rng rng(63);
  auto model = test::make<M>();
  test::randomize(*model, rng);
  auto dec = std::make_unique<DecodeOf<M, 1, 16>>();
  const std::int32_t prompt[3] = {5, 17, 2};
  std::int32_t out[16] = {};
  Sampler<40> greedy;
  REQUIRE(generate(*model, *dec, greedy, prompt, 13, out) == 13);
  // greedy: each token the argmax of the causal pass's row before it, over the whole sequence
  IdTensor<1, 16> seq;
  std::copy_n(prompt, 3, seq.data());
  std::copy_n(out, 13, seq.data() + 3);
  auto full = std::make_unique<InferOf<M, 1, 16>>();
  const auto& y = full->forward(*model, seq);
  for (size_t t = 2; t + 1 < 16; ++t) CHECK(std::max_element(y.data() + t * 40, y.data() + (t + 1) * 40) - (y.data() + t * 40) == seq(0, t + 1));
  // the cache holds 16 positions: 3 of the prompt and 13 drawn (the last is not stepped)
  CHECK(generate(*model, *dec, greedy, prompt, 14, out) == 14);
  CHECK(dec->position() == 16);
  // sampled, with a stop token: it ends there, written; the same seed, the same tokens
  std::int32_t first[16], second[16];
  Sampler<40> s1({.temperature = 1.0f, .top_k = 10}, 5), s2({.temperature = 1.0f, .top_k = 10}, 5);
  const size_t n1 = generate(*model, *dec, s1, prompt, 13, first);
  CHECK(generate(*model, *dec, s2, prompt, 13, second) == n1);
  CHECK(std::equal(first, first + n1, second));
  const std::int32_t stop[1] = {first[4]};
  Sampler<40> s3({.temperature = 1.0f, .top_k = 10}, 5);
  const size_t n2 = generate(*model, *dec, s3, prompt, 13, second, stop);
  CHECK(n2 <= 5);
  CHECK(second[n2 - 1] == first[4]);
  CHECK(generate(*model, *dec, greedy, std::span<const std::int32_t>{}, 5, out) == 0);  // no prompt
}
