// Every block's forward pass against the double-precision reference of reference.hpp, with
// and without masks, plus the symmetry properties SPEC.md asks for.
#include <doctest/doctest.h>

#include <algorithm>
#include <new>
#include <numeric>

#include <stformer/stformer.hpp>

#include "reference.hpp"
#include "util.hpp"
#include "set_reference.hpp"

using namespace stformer;
using test::fill;
using test::make;

namespace {

// y[b] = x[b] with rows permuted by perm.
template <size_t B, size_t N, size_t D>
Tensor<B, N, D> permute_rows(const Tensor<B, N, D>& x, const std::array<size_t, N>& perm) {
  Tensor<B, N, D> y;
  for (size_t b = 0; b < B; ++b)
    for (size_t i = 0; i < N; ++i)
      for (size_t c = 0; c < D; ++c) y(b, i, c) = x(b, perm[i], c);
  return y;
}

template <size_t N>
std::array<size_t, N> some_permutation(Rng& rng) {
  std::array<size_t, N> p;
  std::iota(p.begin(), p.end(), size_t{0});
  for (size_t i = N - 1; i > 0; --i) std::swap(p[i], p[rng.below(uint32_t(i + 1))]);
  return p;
}

template <class A, class B>
double max_diff(const A& a, const B& b) {
  double e = 0;
  for (size_t i = 0; i < a.size(); ++i) e = std::max(e, double(std::abs(a.data()[i] - b.data()[i])));
  return e;
}

}  // namespace

TEST_CASE("Linear over [B, N, In] and [B, In] rows") {
  Rng rng(1);
  Linear<5, 7> p;
  test::randomize(p, rng);
  Tensor<2, 3, 5> x;
  fill(x, rng);
  ActsOf<Linear<5, 7>, 2, 3> a;
  a.forward(p, x);
  for (size_t b = 0; b < 2; ++b) ref::check_close(a.out, b, ref::linear(ref::row(x, b), p));
  Tensor<4, 5> x2;
  fill(x2, rng);
  ActsOf<Linear<5, 7>, 4> a2;
  a2.forward(p, x2);
  ref::check_close(a2.out, 0, ref::linear(ref::row(x2, 0), p));
}

TEST_CASE("ScaleNorm and FeedForward") {
  Rng rng(2);
  ScaleNorm<17> sn;
  sn.g(0) = 2.5f;
  FeedForward<17, 40> ff;
  test::randomize(ff, rng);
  Tensor<2, 3, 17> x;
  fill(x, rng);
  ActsOf<ScaleNorm<17>, 2, 3> s;
  ActsOf<FeedForward<17, 40>, 2, 3> f;
  s.forward(sn, x);
  const auto& y = f.forward(ff, x);
  for (size_t b = 0; b < 2; ++b) {
    ref::check_close(s.out, b, ref::scalenorm(ref::row(x, b), 2.5));
    ref::check_close(y, b, ref::ffn(ref::row(x, b), ff));
  }
}

// A MultiHeadAttention<Dq, Dkv, D, H> with random parameters on random inputs, for each of causal
// or not × no mask or key lengths {Nk, mid, 0} (batch row 2: every key masked): the output of
// forward(p, xq, xkv, mask) [B, Nq, D] against the double-precision reference, and out = bo
// exactly on the all-masked row; more(causal, masked) checks what else the path exposes.
template <size_t Nq, size_t Nk, size_t Dq, size_t Dkv, size_t D, size_t H, class Forward, class More>
void check_mha_masks(Rng& rng, size_t mid, Forward forward, More more) {
  constexpr size_t B = 3;
  using MHA = MultiHeadAttention<Dq, Dkv, D, H>;
  auto p = make<MHA>();
  test::randomize(*p, rng);
  Tensor<B, Nq, Dq> xq;
  Tensor<B, Nk, Dkv> xkv;
  fill(xq, rng);
  fill(xkv, rng);
  const auto keys = test::lengths_mask<B, Nk>({Nk, mid, 0});
  for (bool causal : {false, true})
    for (const KeyMask<B, Nk>* km : {(const KeyMask<B, Nk>*)nullptr, &keys}) {
      CAPTURE(causal);
      CAPTURE(km != nullptr);
      const Tensor<B, Nq, D>& out = forward(*p, xq, xkv, Mask<B, Nk>{.causal = causal, .keys = km});
      for (size_t b = 0; b < B; ++b)
        ref::check_close(out, b, ref::mha(ref::row(xq, b), ref::row(xkv, b), *p, H, 1 / std::sqrt(double(D / H)), causal, test::mask_row(km, b)));
      if (km)
        for (size_t i = 0; i < Nq; ++i)
          for (size_t c = 0; c < D; ++c) CHECK(out(2, i, c) == p->wo.bias(c));
      more(causal, km != nullptr);
    }
}

TEST_CASE("MultiHeadAttention: cross attention, causal, key padding, all-masked rows") {
  Rng rng(3);
  constexpr size_t B = 3, Nq = 5, Nk = 7, Dq = 12, Dkv = 20, D = 16, H = 4;
  auto a = make<ActsOf<MultiHeadAttention<Dq, Dkv, D, H>, B, Nq, Nk>>();
  check_mha_masks<Nq, Nk, Dq, Dkv, D, H>(
      rng, 3, [&](const auto& p, const auto& xq, const auto& xkv, auto mask) -> const auto& { return a->forward(p, xq, xkv, mask); },
      [&](bool causal, bool masked) {
        if (masked)  // all-masked query rows and padded keys: zero weights
          for (size_t h = 0; h < H; ++h)
            for (size_t i = 0; i < Nq; ++i)
              for (size_t j = 0; j < Nk; ++j) {
                CHECK(a->attn(2, h, i, j) == 0.0f);
                if (j >= 3) CHECK(a->attn(1, h, i, j) == 0.0f);
              }
        if (causal)
          for (size_t i = 0; i < Nq; ++i)
            for (size_t j = i + 1; j < Nk; ++j) CHECK(a->attn(0, 1, i, j) == 0.0f);
      });

  SUBCASE("score scale 1/sqrt(D), the seed project's choice") {
    using MHA2 = MultiHeadAttention<Dq, Dkv, D, H, ScoreScale::model_width>;
    MHA2 p2;
    test::randomize(p2, rng);
    Tensor<B, Nq, Dq> xq;
    Tensor<B, Nk, Dkv> xkv;
    fill(xq, rng);
    fill(xkv, rng);
    auto a2 = make<ActsOf<MHA2, B, Nq, Nk>>();
    a2->forward(p2, xq, xkv);
    for (size_t b = 0; b < B; ++b) ref::check_close(a2->o.out, b, ref::mha(ref::row(xq, b), ref::row(xkv, b), p2, H, 1 / std::sqrt(16.0)));
  }
}

TEST_CASE("MultiHeadAttention: few queries, key and value projections folded into the queries' side") {
  Rng rng(31);
  constexpr size_t B = 3, Nq = 2, Nk = 30, Dq = 12, Dkv = 20, D = 16, H = 2;
  using MHA = MultiHeadAttention<Dq, Dkv, D, H>;
  static_assert(MHA::folds<Nq, Nk> && MHA::folds<1, 50> && !MHA::folds<20, 5>);
  static_assert(std::is_same_v<ActsOf<MHA, B, Nq, Nk>, MHA::FoldedActs<B, Nq, Nk>>);
  static_assert(!MultiHeadAttention<64, 64, 64, 4>::folds<16, 50> && MultiHeadAttention<64, 64, 64, 4>::folds<1, 50>);  // ISAB's MAB1, PMA
  auto a = make<ActsOf<MHA, B, Nq, Nk>>();
  check_mha_masks<Nq, Nk, Dq, Dkv, D, H>(
      rng, 17, [&](const auto& p, const auto& xq, const auto& xkv, auto mask) -> const auto& { return a->forward(p, xq, xkv, mask); },
      [&](bool causal, bool masked) {
        for (size_t i = 0; i < Nq; ++i)
          for (size_t j = 0; j < Nk; ++j) {
            if (masked) CHECK(a->attn(2, 1, i, j) == 0.0f);
            if (masked && j >= 17) CHECK(a->attn(1, 1, i, j) == 0.0f);
            if (causal && j > i) CHECK(a->attn(0, 1, i, j) == 0.0f);
          }
      });
}

// MultiHeadAttention::Infer on the shapes of the three paths: full (scores in blocks of 16
// queries, the same bits as FullActs), folded (as FoldedActs) and beyond 256 keys (tiles of keys
// with an online softmax: the reference's values, not Acts' bits).
template <size_t Nq, size_t Nk, size_t Dq, size_t Dkv, size_t D, size_t H>
void check_mha_infer(Rng& rng, size_t mid) {
  using MHA = MultiHeadAttention<Dq, Dkv, D, H>;
  auto inf = make<InferOf<MHA, 3, Nq, Nk>>();
  auto acts = make<ActsOf<MHA, 3, Nq, Nk>>();
  check_mha_masks<Nq, Nk, Dq, Dkv, D, H>(
      rng, mid,
      [&](const auto& p, const auto& xq, const auto& xkv, auto mask) -> const auto& {
        const auto& y = inf->forward(p, xq, xkv, mask);
        if constexpr (Nk <= MHA::max_key_tile) CHECK(test::same_bits(y, acts->forward(p, xq, xkv, mask)));
        return y;
      },
      [](bool, bool) {});
}

TEST_CASE("MultiHeadAttention::Infer: full, folded and online paths against the reference and Acts") {
  Rng rng(4);
  check_mha_infer<5, 7, 12, 20, 16, 4>(rng, 3);
  check_mha_infer<40, 150, 12, 20, 16, 2>(rng, 70);
  static_assert(MultiHeadAttention<12, 20, 16, 2>::folds<2, 30>);
  check_mha_infer<2, 30, 12, 20, 16, 2>(rng, 17);
  check_mha_infer<40, 300, 12, 20, 16, 2>(rng, 270);  // two tiles of keys, the second shorter
  // Beyond 256 keys nothing of size Nq × Nk: per query and key, q, out, kᵀ and v (4·D floats).
  using S = MultiHeadAttention<64, 64, 64, 4>;
  constexpr size_t s1 = sizeof(S::Infer<1, 512, 512>), s2 = sizeof(S::Infer<1, 1024, 1024>), s4 = sizeof(S::Infer<1, 2048, 2048>);
  CHECK(s2 - s1 == 512 * 4 * 64 * sizeof(float));
  CHECK(s4 - s2 == 1024 * 4 * 64 * sizeof(float));
}

TEST_CASE("EncoderBlock and DecoderBlock") {
  Rng rng(4);
  constexpr size_t B = 2, N = 9, M = 6, D = 16, H = 2, F = 40;
  auto enc = make<EncoderBlock<D, H, F>>();
  auto dec = make<DecoderBlock<D, 4, F>>();
  test::randomize(*enc, rng);
  test::randomize(*dec, rng);
  Tensor<B, N, D> x;
  Tensor<B, M, D> m;
  fill(x, rng);
  fill(m, rng);
  const auto keys = test::lengths_mask<B, N>({9, 4});
  auto ea = make<ActsOf<EncoderBlock<D, H, F>, B, N>>();
  for (bool causal : {false, true})
    for (const KeyMask<B, N>* km : {(const KeyMask<B, N>*)nullptr, &keys}) {
      const auto& y = ea->forward(*enc, x, Mask<B, N>{.causal = causal, .keys = km});
      for (size_t b = 0; b < B; ++b) ref::check_close(y, b, ref::encoder(ref::row(x, b), *enc, H, causal, test::mask_row(km, b)));
    }
  const auto mkeys = test::lengths_mask<B, M>({2, 6});
  auto da = make<ActsOf<DecoderBlock<D, 4, F>, B, N, M>>();
  for (const KeyMask<B, M>* km : {(const KeyMask<B, M>*)nullptr, &mkeys}) {
    const auto& y = da->forward(*dec, x, m, km);
    for (size_t b = 0; b < B; ++b) ref::check_close(y, b, ref::decoder(ref::row(x, b), ref::row(m, b), *dec, 4, test::mask_row(km, b)));
  }
}

TEST_CASE_TEMPLATE("MAB, SAB, ISAB, PMA with ScaleNorm and Identity norms", Tag, ScaleNorm<16>, Identity<16>) {
  Rng rng(5);
  constexpr size_t B = 2, N = 11, Nq = 3, D = 16, H = 4, M = 5, K = 2;
  constexpr bool normed = std::is_same_v<Tag, ScaleNorm<16>>;
  auto run = [&]<template <size_t> class Norm>() {
    auto mab = make<MAB<D, H, Norm>>();
    auto sab = make<SAB<D, H, Norm>>();
    auto isab = make<ISAB<D, H, M, Norm>>();
    auto pma = make<PMA<D, H, K, Norm>>();
    test::randomize(*mab, rng);
    test::randomize(*sab, rng);
    test::randomize(*isab, rng);
    test::randomize(*pma, rng);
    Tensor<B, N, D> x;
    Tensor<B, Nq, D> q;
    fill(x, rng);
    fill(q, rng);
    const auto keys = test::lengths_mask<B, N>({11, 6});
    auto ma = make<ActsOf<MAB<D, H, Norm>, B, Nq, N>>();
    auto sa = make<ActsOf<SAB<D, H, Norm>, B, N>>();
    auto ia = make<ActsOf<ISAB<D, H, M, Norm>, B, N>>();
    auto pa = make<ActsOf<PMA<D, H, K, Norm>, B, N>>();
    for (const KeyMask<B, N>* km : {(const KeyMask<B, N>*)nullptr, &keys}) {
      const auto& ym = ma->forward(*mab, q, x, km);
      const auto& ys = sa->forward(*sab, x, km);
      const auto& yi = ia->forward(*isab, x, km);
      const auto& yp = pa->forward(*pma, x, km);
      for (size_t b = 0; b < B; ++b) {
        auto xb = ref::row(x, b);
        auto kb = test::mask_row(km, b);
        ref::check_close(ym, b, ref::mab(ref::row(q, b), xb, *mab, H, kb));
        ref::check_close(ys, b, ref::mab(xb, xb, written::mab_of(*sab), H, kb));
        ref::check_close(yi, b, ref::isab(xb, *isab, H, kb));
        ref::check_close(yp, b, ref::pma(xb, *pma, H, kb));
      }
    }
    size_t gs = 0;
    for_each_param([&](const Path& path, Init, const auto&) { gs += path.name().view().ends_with(".g"); }, *mab);
    CHECK(gs == (normed ? 3u : 0u));
  };
  if constexpr (normed)
    run.template operator()<ScaleNorm>();
  else
    run.template operator()<Identity>();
}

TEST_CASE("PointerAttention, PositionalEncoding, Embedding") {
  Rng rng(6);
  constexpr size_t B = 2, Nq = 3, Nk = 10;
  PointerAttention<8, 12, 16> p;
  test::randomize(p, rng);
  Tensor<B, Nq, 8> q;
  Tensor<B, Nk, 12> k;
  fill(q, rng);
  fill(k, rng);
  const auto keys = test::lengths_mask<B, Nk>({10, 4});
  ActsOf<PointerAttention<8, 12, 16>, B, Nq, Nk> a;
  for (const KeyMask<B, Nk>* km : {(const KeyMask<B, Nk>*)nullptr, &keys}) {
    a.forward(p, q, k, km);
    for (size_t b = 0; b < B; ++b) ref::check_close(a.logp, b, ref::pointer(ref::row(q, b), ref::row(k, b), p, test::mask_row(km, b)));
  }

  PositionalEncoding<10, 6> pe;
  Tensor<B, 7, 6> x;
  fill(x, rng);
  ActsOf<PositionalEncoding<10, 6>, B, 7> pa;
  pa.forward(pe, x);
  for (size_t b = 0; b < B; ++b) ref::check_close(pa.out, b, ref::positional(ref::row(x, b)));

  Embedding<11, 5> e;
  init_params(e, rng);
  IdTensor<B, 3> ids = {{0, 10, 4}, {4, 4, 7}};
  ActsOf<Embedding<11, 5>, B, 3> ea;
  ea.forward(e, ids);
  for (size_t b = 0; b < B; ++b)
    for (size_t i = 0; i < 3; ++i)
      for (size_t c = 0; c < 5; ++c) CHECK(ea.out(b, i, c) == e.weight(size_t(ids(b, i)), c));
  ids(1, 2) = 11;
  CHECK_THROWS_AS(ea.forward(e, ids), std::invalid_argument);
  ids(1, 2) = -1;
  CHECK_THROWS_AS(ea.forward(e, ids), std::invalid_argument);
}

TEST_CASE("SPEC models: pointer and set, against the composed references") {
  Rng rng(7);
  constexpr size_t B = 3, N = 50;
  using Pointer = PointerModel<2, 16, 1, 64, 2>;
  using Set = SetTransformer<2, 64, 4, 16, 2>;
  auto pm = make<Pointer>();
  auto sm = make<Set>();
  test::randomize(*pm, rng);
  test::randomize(*sm, rng);
  Tensor<B, N, 2> x;
  fill(x, rng);
  auto pa = make<ActsOf<Pointer, B, N>>();
  auto sa = make<ActsOf<Set, B, N>>();
  pa->forward(*pm, x);
  sa->forward(*sm, x);
  for (size_t b = 0; b < B; ++b) {
    auto h = ref::linear(ref::row(x, b), pm->get<"proj">());
    for (const auto& blk : pm->get<"blocks">()) h = ref::encoder(h, blk, 1);
    auto keys = ref::norm(h, pm->get<"sn_v">());
    const auto& head = pm->get<"">();
    auto query = ref::norm(ref::row(head.seeds(), 0), head.get<"sn_q">());
    ref::check_close(pa->at<"">().attn.logp, b, ref::pointer(query, keys, head.get<"pointer">()), 5e-5);

    auto e = ref::isab(ref::linear(ref::row(x, b), sm->get<"proj">()), sm->get<"isab">(), 4);
    ref::check_close(sa->at<"head">().out, b, ref::linear(ref::pma(e, sm->get<"pool">(), 4), sm->get<"head">()), 5e-5);
  }
}

TEST_CASE("Symmetries: SAB, ISAB, encoder equivariant; PMA and the set model invariant") {
  Rng rng(8);
  constexpr size_t B = 2, N = 13, D = 32, H = 4;
  auto perm = some_permutation<N>(rng);
  Tensor<B, N, D> x;
  fill(x, rng);
  auto xp = permute_rows(x, perm);

  auto sab = make<SAB<D, H>>();
  auto isab = make<ISAB<D, H, 4>>();
  auto enc = make<EncoderBlock<D, H, 64>>();
  auto pma = make<PMA<D, H, 2>>();
  auto set = make<SetTransformer<D, D, H, 4, 3>>();
  init_params(*sab, rng);
  init_params(*isab, rng);
  init_params(*enc, rng);
  init_params(*pma, rng);
  init_params(*set, rng);
  auto check_equivariant = [&](auto& block, auto& a1, auto& a2) {
    const auto& y = a1.forward(block, x);
    const auto& yp = a2.forward(block, xp);
    CHECK(max_diff(permute_rows(y, perm), yp) < 1e-5);
  };
  {
    auto a1 = make<ActsOf<SAB<D, H>, B, N>>(), a2 = make<ActsOf<SAB<D, H>, B, N>>();
    check_equivariant(*sab, *a1, *a2);
  }
  {
    auto a1 = make<ActsOf<ISAB<D, H, 4>, B, N>>(), a2 = make<ActsOf<ISAB<D, H, 4>, B, N>>();
    check_equivariant(*isab, *a1, *a2);
  }
  {
    auto a1 = make<ActsOf<EncoderBlock<D, H, 64>, B, N>>(), a2 = make<ActsOf<EncoderBlock<D, H, 64>, B, N>>();
    check_equivariant(*enc, *a1, *a2);
  }
  {
    auto a1 = make<ActsOf<PMA<D, H, 2>, B, N>>(), a2 = make<ActsOf<PMA<D, H, 2>, B, N>>();
    CHECK(max_diff(a1->forward(*pma, x), a2->forward(*pma, xp)) < 1e-5);
    auto s1 = make<ActsOf<SetTransformer<D, D, H, 4, 3>, B, N>>(), s2 = make<ActsOf<SetTransformer<D, D, H, 4, 3>, B, N>>();
    CHECK(max_diff(s1->forward(*set, x), s2->forward(*set, xp)) < 1e-5);
    // and a permutation is not the identity on the outputs that are not invariant
    auto a3 = make<ActsOf<SAB<D, H>, B, N>>();
    Tensor<B, N, D> y = a3->forward(*sab, x);
    CHECK(max_diff(y, a3->forward(*sab, xp)) > 1e-3);
  }
}

namespace {

// Patchify<C, H, W, P> of B images whose pixels are their indices, into a buffer of its own and
// over the image's own bytes (where a chain's plan puts it: over_input), each against
// y[b, h·(W/P) + w, (c·P + i)·P + j] = x[b, c, h·P + i, w·P + j].
template <size_t C, size_t H, size_t W, size_t P, class T>
void check_patchify() {
  constexpr size_t B = 2, N = C * H;
  using Leaf = Patchify<C, H, W, P, T>;
  using X = typename Leaf::template Input<B, N>;
  using Y = typename Leaf::template Output<B, N>;
  static_assert(sizeof(X) == sizeof(Y));
  auto x = make<X>();
  auto y = make<Y>();
  for (size_t k = 0; k < x->size(); ++k) x->data()[k] = T(k);
  const Leaf leaf;
  leaf.run(*x, *y, Nothing{}, Mask<B, N>{}, Serial{});
  size_t wrong = 0;
  for (size_t b = 0; b < B; ++b)
    for (size_t h = 0; h < H / P; ++h)
      for (size_t w = 0; w < W / P; ++w)
        for (size_t c = 0; c < C; ++c)
          for (size_t i = 0; i < P; ++i)
            for (size_t j = 0; j < P; ++j) wrong += (*y)(b, h * (W / P) + w, (c * P + i) * P + j) != (*x)(b, c * H + h * P + i, w * P + j);
  CHECK(wrong == 0);
  auto same_bytes = make<X>();
  *same_bytes = *x;
  Y& over = *std::launder(reinterpret_cast<Y*>(same_bytes.get()));
  leaf.run(*same_bytes, over, Nothing{}, Mask<B, N>{}, Serial{});
  CHECK(std::equal(y->data(), y->data() + y->size(), over.data()));
}

}  // namespace

TEST_CASE("Patchify: an image's patches, into a buffer of their own and over the image") {
  check_patchify<3, 32, 32, 8, float>();
  check_patchify<3, 32, 32, 8, std::int16_t>();  // its integer form
  check_patchify<2, 6, 4, 2, float>();           // H ≠ W
  check_patchify<1, 4, 6, 2, std::int16_t>();
  check_patchify<3, 8, 8, 1, float>();           // P = 1: the channels of each pixel together
}
