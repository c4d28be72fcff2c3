// Forward-only passes (Infer) of every block and model: the same outputs as the training
// activations' forward (Acts) bit for bit, and the double-precision reference, with causal,
// padding and all-masked rows; the models' sizes are their documented memory plans, and the
// SPEC configurations fit their targets. (MultiHeadAttention::Infer: test_blocks.cpp.)
#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>

#include <stformer/stformer.hpp>
#include <stformer/train/parallel.hpp>

#include "reference.hpp"
#include "written_feedforward.hpp"
#include "util.hpp"
#include "set_reference.hpp"
#include "user_blocks.hpp"

using namespace stformer;
using test::fill;
using test::make;
using test::same_bits;

namespace {

// Block p's output through Infer and through Acts from the same inputs.
template <class Block, size_t... Dims>
struct Both {
  std::unique_ptr<InferOf<Block, Dims...>> infer = make<InferOf<Block, Dims...>>();
  std::unique_ptr<ActsOf<Block, Dims...>> acts = make<ActsOf<Block, Dims...>>();

  template <class... Args>
  const auto& forward(const Block& p, const Args&... args) {
    const auto& y = infer->forward(p, args...);
    CHECK(same_bits(y, acts->forward(p, args...)));
    return y;
  }
};

}  // namespace

TEST_CASE("Infer = Acts bit for bit: Linear, ScaleNorm, Identity, FeedForward, PositionalEncoding, Embedding, PointerAttention") {
  Rng rng(11);
  constexpr size_t B = 2, N = 37;
  auto lin = make<Linear<17, 24>>();
  auto sn = make<ScaleNorm<17>>();
  auto ff = make<FeedForward<17, 40>>();
  auto ptr = make<PointerAttention<8, 17, 16>>();
  test::randomize(*lin, rng);
  test::randomize(*sn, rng);
  test::randomize(*ff, rng);
  test::randomize(*ptr, rng);
  Tensor<B, N, 17> x;
  Tensor<B, 3, 8> q;
  fill(x, rng);
  fill(q, rng);
  std::fill_n(x.data() + (N + 4) * 17, 17, 0.0f);  // a zero row: the norm's clamp
  for (size_t b = 0; b < B; ++b) {
    auto xb = ref::row(x, b);
    ref::check_close(Both<Linear<17, 24>, B, N>().forward(*lin, x), b, ref::linear(xb, *lin));
    ref::check_close(Both<ScaleNorm<17>, B, N>().forward(*sn, x), b, ref::scalenorm(xb, sn->g(0)));
    ref::check_close(Both<FeedForward<17, 40>, B, N>().forward(*ff, x), b, ref::ffn(xb, *ff));  // 37 rows: tiles of 16 + 5
    ref::check_close(Both<PositionalEncoding<40, 17>, B, N>().forward(PositionalEncoding<40, 17>{}, x), b, ref::positional(xb));
  }
  CHECK(same_bits(InferOf<Identity<17>, B, N>().forward(Identity<17>{}, x), x));
  const auto keys = test::lengths_mask<B, N>({20, 0});
  Both<PointerAttention<8, 17, 16>, B, 3, N> pb;
  for (const KeyMask<B, N>* km : {(const KeyMask<B, N>*)nullptr, &keys}) {
    const auto& logp = pb.forward(*ptr, q, x, km);
    for (size_t b = 0; b < B; ++b) ref::check_close(logp, b, ref::pointer(ref::row(q, b), ref::row(x, b), *ptr, test::mask_row(km, b)));
  }
  Embedding<11, 5> e;
  init_params(e, rng);
  IdTensor<B, 3> ids = {{0, 10, 4}, {4, 4, 7}};
  Both<Embedding<11, 5>, B, 3> eb;
  const auto& rows = eb.forward(e, ids);
  for (size_t c = 0; c < 5; ++c) CHECK(rows(0, 1, c) == e.weight(10, c));
  ids(1, 2) = 11;
  CHECK_THROWS_AS(eb.infer->forward(e, ids), std::invalid_argument);
}

TEST_CASE("EncoderBlock::Infer and DecoderBlock::Infer: causal, padding and all-masked rows") {
  Rng rng(12);
  constexpr size_t B = 3, N = 37, M = 21, D = 16, F = 40;
  auto enc = make<EncoderBlock<D, 2, F>>();
  auto dec = make<DecoderBlock<D, 4, F>>();
  test::randomize(*enc, rng);
  test::randomize(*dec, rng);
  Tensor<B, N, D> x;
  Tensor<B, M, D> m;
  fill(x, rng);
  fill(m, rng);
  const auto keys = test::lengths_mask<B, N>({37, 9, 0});
  Both<EncoderBlock<D, 2, F>, B, N> e;
  for (bool causal : {false, true})
    for (const KeyMask<B, N>* km : {(const KeyMask<B, N>*)nullptr, &keys}) {
      CAPTURE(causal);
      const auto& y = e.forward(*enc, x, Mask<B, N>{.causal = causal, .keys = km});
      for (size_t b = 0; b < B; ++b) ref::check_close(y, b, ref::encoder(ref::row(x, b), *enc, 2, causal, test::mask_row(km, b)));
    }
  // the output fed back as the input: the block runs in place
  Tensor<B, N, D> twice = e.acts->forward(*enc, e.acts->forward(*enc, x));
  const auto& y1 = e.infer->forward(*enc, x);
  CHECK(same_bits(e.infer->forward(*enc, y1), twice));

  const auto mkeys = test::lengths_mask<B, M>({3, 21, 0});
  Both<DecoderBlock<D, 4, F>, B, N, M> d;
  for (const KeyMask<B, M>* km : {(const KeyMask<B, M>*)nullptr, &mkeys}) {
    const auto& y = d.forward(*dec, x, m, km);
    for (size_t b = 0; b < B; ++b) ref::check_close(y, b, ref::decoder(ref::row(x, b), ref::row(m, b), *dec, 4, test::mask_row(km, b)));
  }
  // one query row against many memory rows: the cross-attention folds
  static_assert(MultiHeadAttention<D, D, D, 4>::folds<1, 40>);
  Tensor<B, 1, D> x1;
  Tensor<B, 40, D> m40;
  fill(x1, rng);
  fill(m40, rng);
  Both<DecoderBlock<D, 4, F>, B, 1, 40> d1;
  ref::check_close(d1.forward(*dec, x1, m40, nullptr), 1, ref::decoder(ref::row(x1, 1), ref::row(m40, 1), *dec, 4));
}

TEST_CASE_TEMPLATE("MAB, SAB, ISAB, PMA ::Infer with ScaleNorm and Identity norms", Tag, ScaleNorm<16>, Identity<16>) {
  Rng rng(13);
  constexpr size_t B = 2, N = 50, Nq = 20, D = 16, H = 4, M = 5, K = 2;
  auto run = [&]<template <size_t> class Norm>() {
    auto mab = make<MAB<D, H, Norm>>();
    auto sab = make<SAB<D, H, Norm>>();
    auto isab = make<ISAB<D, H, M, Norm>>();
    auto pma = make<PMA<D, H, K, Norm>>();
    test::randomize(*mab, rng);
    test::randomize(*sab, rng);
    test::randomize(*isab, rng);
    test::randomize(*pma, rng);
    static_assert(!MultiHeadAttention<D, D, D, H>::folds<Nq, N> && MultiHeadAttention<D, D, D, H>::folds<K, N>);
    Tensor<B, N, D> x;
    Tensor<B, Nq, D> q;
    fill(x, rng);
    fill(q, rng);
    const auto keys = test::lengths_mask<B, N>({50, 0});
    Both<MAB<D, H, Norm>, B, Nq, N> ma;
    Both<SAB<D, H, Norm>, B, N> sa;
    Both<ISAB<D, H, M, Norm>, B, N> ia;
    Both<PMA<D, H, K, Norm>, B, N> pa;
    for (const KeyMask<B, N>* km : {(const KeyMask<B, N>*)nullptr, &keys}) {
      const auto& ym = ma.forward(*mab, q, x, km);
      const auto& ys = sa.forward(*sab, x, km);
      const auto& yi = ia.forward(*isab, x, km);
      const auto& yp = pa.forward(*pma, x, km);
      for (size_t b = 0; b < B; ++b) {
        auto xb = ref::row(x, b);
        auto kb = test::mask_row(km, b);
        ref::check_close(ym, b, ref::mab(ref::row(q, b), xb, *mab, H, kb));
        ref::check_close(ys, b, ref::mab(xb, xb, written::mab_of(*sab), H, kb));
        ref::check_close(yi, b, ref::isab(xb, *isab, H, kb));
        ref::check_close(yp, b, ref::pma(xb, *pma, H, kb));
      }
    }
  };
  if constexpr (std::is_same_v<Tag, ScaleNorm<16>>)
    run.template operator()<ScaleNorm>();
  else
    run.template operator()<Identity>();
}

TEST_CASE("models: Infer = Acts bit for bit, with padded sets") {
  Rng rng(14);
  constexpr size_t B = 3, N = 50;
  using Pointer = PointerModel<2, 16, 1, 64, 2>;
  using Set = SetTransformer<2, 64, 4, 16, 2>;
  using LM = LanguageModel<300, 32, 64, 4, 256, 2>;
  auto pm = make<Pointer>();
  auto sm = make<Set>();
  auto lm = make<LM>();
  test::randomize(*pm, rng);
  test::randomize(*sm, rng);
  test::randomize(*lm, rng);
  Tensor<B, N, 2> x;
  fill(x, rng);
  const auto keys = test::lengths_mask<B, N>({50, 17, 1});
  Both<Pointer, B, N> p;
  Both<Set, B, N> s;
  for (const KeyMask<B, N>* km : {(const KeyMask<B, N>*)nullptr, &keys}) {
    p.forward(*pm, x, km);
    s.forward(*sm, x, km);
  }
  IdTensor<B, 32> ids;
  for (auto& id : ids) id = std::int32_t(rng.below(300));
  Both<LM, B> l;
  l.forward(*lm, ids);
  // one window at a time equals its row of the batch
  IdTensor<1, 32> one;
  std::copy_n(ids.data() + 32, 32, one.data());
  auto l1 = make<InferOf<LM, 1>>();
  const auto& z = l1->forward(*lm, one);
  CHECK(std::equal(z.begin(), z.end(), l.infer->forward(*lm, ids).begin() + 300));
}

namespace {
template <size_t... N>
constexpr size_t bytes = sizeof(Tensor<N...>);
// the folded attention's pointer to its keys, padded to the tensors' alignment
constexpr size_t pointer_bytes = std::max(sizeof(float*), alignof(Tensor<1>));
}  // namespace

// A block whose type declares causal = true runs with the causal mask wherever it stands: as a
// step of a chain, in the forward-only pass (its residual fused or whole) and in the record, the
// pass given no mask the same bits as the pass given the causal one, and not the unmasked bits.
template <size_t D, size_t H>
struct CausalBlock : EncoderBlock<D, H, 2 * D> {
  static constexpr bool causal = true;
};
TEST_CASE("a nested block that declares causal runs causal in every pass") {
  constexpr size_t D = 16, H = 2, B = 2, N = 8;
  using Causal = Sequential<Linear<4, D>, CausalBlock<D, H>, Linear<D, 3>>;
  using Open = Sequential<Linear<4, D>, EncoderBlock<D, H, 2 * D>, Linear<D, 3>>;
  static_assert(!declares_causal<Causal> && sizeof(Causal) == sizeof(Open));
  auto causal = make<Causal>();
  auto open = make<Open>();
  Rng rng(61);
  init_params(*causal, rng);
  std::memcpy(static_cast<void*>(open.get()), causal.get(), sizeof(Causal));
  Tensor<B, N, 4> x;
  fill(x, rng);
  const auto keys = test::lengths_mask<B, N>({N, N - 3});
  for (const KeyMask<B, N>* km : {(const KeyMask<B, N>*)nullptr, &keys}) {
    CAPTURE(km != nullptr);
    auto want = make<InferOf<Open, B, N>>();
    const auto& y = want->forward(*open, x, Mask<B, N>{.causal = true, .keys = km});
    auto unmasked = make<InferOf<Open, B, N>>();
    CHECK(!same_bits(y, unmasked->forward(*open, x, km)));
    auto infer = make<InferOf<Causal, B, N>>();
    CHECK(same_bits(y, infer->forward(*causal, x, km)));
    auto acts = make<ActsOf<Causal, B, N>>();
    CHECK(same_bits(y, acts->forward(*causal, x, km)));
  }
}

// The memory plans documented in the models' headers and in docs/reference.md, buffer by buffer (a
// tile holds [16, Nk] scores or [T, D] rows of a projection, whichever is larger, T = 16 rows
// unless the arena leaves room for more; each buffer rounded up to the tensors' alignment).
TEST_CASE("memory plans: sizeof(Infer) is the documented plan, and the SPEC configurations fit their targets") {
  constexpr size_t N = 50, L = 32;
  constexpr auto tile = [](size_t floats) { return (floats * sizeof(float) + alignof(Tensor<1>) - 1) / alignof(Tensor<1>) * alignof(Tensor<1>); };
  // PointerModel<2, 16, 1, 64, 2>, one set: h | max(blocks: a, max(kᵀ, v, tile | hidden), pointer: query, q, k, logp)
  {
    constexpr size_t D = 16, F = 64;
    // the tile's 16 × 50 scores hold all 50 rows of a projection; 2 tiles of 25 hidden rows
    static_assert(MultiHeadAttention<D, D, D, 1>::Work<1, N, N, 16>::rows == N);
    constexpr size_t blocks = bytes<N, D> + std::max(bytes<D, N> + bytes<N, D> + tile(16 * N), bytes<25, F>);
    constexpr size_t pointer = bytes<1, D> + bytes<1, D> + bytes<N, D> + bytes<1, N>;
    using P = InferOf<PointerModel<2, 16, 1, 64, 2>, 1, N>;
    CHECK(sizeof(P) == bytes<N, D> + std::max(blocks, pointer));
    CHECK(sizeof(P) <= 16 * 1024);
  }
  // SetTransformer<2, 64, 4, 16, 2>, one set: the largest of x + isab (Hm, max(MAB1, MAB2)),
  // x + pooled + pool, pooled + y
  {
    constexpr size_t D = 64, H = 4, M = 16;
    constexpr size_t mab1 = bytes<N, D> + bytes<D, N> + bytes<N, D> + tile(16 * D);  // queries I (16) against X (50)
    constexpr size_t mab2 = bytes<N, D> + bytes<D, M> + bytes<M, D> + tile(N * D);   // queries X against Hm (16): all 50 rows fit
    static_assert(ISAB<D, H, M>::BlockAt<0>::Block::Scratch<1, N>::T == N);
    constexpr size_t pool = bytes<1, D> + bytes<N, D> + pointer_bytes + 2 * bytes<H, D> + bytes<H, N> + tile(D);
    using S = InferOf<SetTransformer<2, 64, 4, 16, 2>, 1, N>;
    CHECK(sizeof(S) == std::max({bytes<N, D> + bytes<M, D> + std::max(mab1, mab2), bytes<N, D> + bytes<1, D> + pool, bytes<1, D> + bytes<1, 2>}));
    CHECK(sizeof(S) <= 64 * 1024);
  }
  // LanguageModel, SPEC configuration, one window: the largest of h + blocks, h + pooled + pool,
  // pooled + logits
  {
    constexpr size_t V = 33278, D = 128, H = 4, F = 512;
    // the logits leave room for the 32 rows of a window in one tile
    constexpr size_t blocks = bytes<L, D> + std::max(bytes<D, L> + bytes<L, D> + tile(L * D), bytes<L, F>);
    constexpr size_t pool = bytes<1, D> + bytes<L, D> + pointer_bytes + 2 * bytes<H, D> + bytes<H, L> + tile(D);
    using LMI = InferOf<LanguageModel<V, L, D, H, F, 2>, 1>;
    CHECK(sizeof(LMI) == std::max({bytes<L, D> + blocks, bytes<L, D> + bytes<1, D> + pool, bytes<1, D> + bytes<1, V>}));
    CHECK(sizeof(LMI) <= 200 * 1024);
  }
}


// A chain of row-local steps runs in tiles of rows: FeedForward, declared as Linear, the
// activation and Linear, after a norm in a residual (pre-norm), alone in a residual (post-norm)
// and as a step of its own, beside the feed-forward layer written by hand
// (written_feedforward.hpp: its hidden in tiles of its own): the same names and bits,
// forward-only (on one thread and on two) and trained, kept and replayed; plans and records no
// larger, and no [B·N, F] hidden in the plan.
template <class Act, template <class> class Shape>
void feed_forward_declared() {
  constexpr size_t D = 16, F = 64, B = 2, N = 50;
  using Hand = Shape<written::FeedForward<D, F, Act>>;
  using Declared = Shape<FeedForward<D, F, Act>>;
  static_assert(FeedForward<D, F, Act>::leaf_rows && FeedForward<D, F, Act>::in_place);
  auto hand = make<Hand>();
  auto declared = make<Declared>();
  Rng rng(71);
  init_params(*hand, rng);
  test::randomize(*hand, rng);
  REQUIRE(test::param_names(*hand) == test::param_names(*declared));
  test::copy_by_name(*hand, *declared);
  Tensor<B, N, 3> x;
  Tensor<B, N, 2> dy;
  fill(x, rng), fill(dy, rng);
  auto hi = make<InferOf<Hand, B, N>>();
  auto di = make<InferOf<Declared, B, N>>();
  const auto& y = hi->forward(*hand, x);
  CHECK(same_bits(y, di->forward(*declared, x)));
  ThreadPool two(2);
  CHECK(same_bits(y, di->forward(*declared, x, Mask<B, N>{}, two)));
  auto ha = make<ActsOf<Hand, B, N>>();
  auto da = make<ActsOf<Declared, B, N>>();
  CHECK(same_bits(y, ha->forward(*hand, x)));
  CHECK(same_bits(y, da->forward(*declared, x)));
  auto hg = make<Hand>();
  auto dg = make<Declared>();
  zero_grad(*hg), zero_grad(*dg);
  const Tensor<B, N, 3> dx = ha->backward(*hand, *hg, dy);
  CHECK(same_bits(dx, da->backward(*declared, *dg, dy)));
  CHECK(test::params_by_name(*hg) == test::params_by_name(*dg));
  auto dr = make<ReplayActsOf<Declared, B, N>>();
  CHECK(same_bits(y, dr->forward(*declared, x)));
  auto rg = make<Declared>();
  zero_grad(*rg);
  CHECK(same_bits(dx, dr->backward(*declared, *rg, dy)));
  CHECK(test::params_by_name(*rg) == test::params_by_name(*dg));
  MESSAGE("plans: declared " << sizeof(InferOf<Declared, B, N>) << " B, by hand " << sizeof(InferOf<Hand, B, N>) << " B, the hidden alone "
                             << sizeof(Tensor<B, N, F>) << " B; records " << sizeof(ActsOf<Declared, B, N>) << " B, by hand " << sizeof(ActsOf<Hand, B, N>) << " B");
  CHECK(sizeof(InferOf<Declared, B, N>) <= sizeof(InferOf<Hand, B, N>));
  CHECK(sizeof(InferOf<Declared, B, N>) < sizeof(Tensor<B, N, F>));
  CHECK(sizeof(ActsOf<Declared, B, N>) <= sizeof(ActsOf<Hand, B, N>));
}
template <class Ffn>
using PreNormed = Sequential<Named<"proj", Linear<3, 16>>, Named<"", Residual<Sequential<Named<"ln", LayerNorm<16>>, Named<"ffn", Ffn>>>>, Named<"head", Linear<16, 2>>>;
template <class Ffn>
using PostNormed = Sequential<Named<"proj", Linear<3, 16>>, Named<"", Residual<Named<"ffn", Ffn>>>, Named<"ln", LayerNorm<16>>, Named<"head", Linear<16, 2>>>;
template <class Ffn>
using Alone = Sequential<Named<"proj", Linear<3, 16>>, Named<"ffn", Ffn>, Named<"head", Linear<16, 2>>>;
TEST_CASE_TEMPLATE("FeedForward is a chain of row-local steps in tiles of rows: the hand-written layer's bits, plans and records", Act, act::ReLU, act::GELU) {
  SUBCASE("pre-norm") { feed_forward_declared<Act, PreNormed>(); }
  SUBCASE("post-norm") { feed_forward_declared<Act, PostNormed>(); }
  SUBCASE("a step of its own") { feed_forward_declared<Act, Alone>(); }
}
