// Gradient checks: every block's backward pass against central finite differences.
//
// For a block with output y and a fixed random c, L = Σ c ⊙ y, so backward(c) must give dL/dθ
// for every parameter θ and dL/dx for every input. The finite differences are taken on the
// double-precision reference of reference.hpp (an independent forward written from SPEC):
// each float entry is moved by ±h and the exact float step is used, so the difference
// quotient is accurate to ~1e-8 and the check is limited only by the float backward.
#include <doctest/doctest.h>

#include <string>

#include <stformer/stformer.hpp>

#include "reference.hpp"
#include "user_blocks.hpp"
#include "util.hpp"
#include "set_reference.hpp"

using namespace stformer;
using test::fill;
using test::make;

namespace {

// Σ_b Σ c[b] ⊙ ref(b), skipping −∞ outputs (masked pointer logits, whose c is irrelevant).
template <class C, class Ref>
double project(const C& c, size_t batch, Ref&& ref) {
  double s = 0;
  for (size_t b = 0; b < batch; ++b) {
    ref::Mat y = ref(b);
    ref::Mat cb = ref::row(c, b);
    for (size_t i = 0; i < y.v.size(); ++i)
      if (!std::isinf(y.v[i])) s += cb.v[i] * y.v[i];
  }
  return s;
}

// analytic[i] against (L(v + h) − L(v − h)) / (2h) for every entry of values.
// The step is small (1e-5 relative) because the reference is exact to ~1e-15: the quotient is
// then accurate to ~1e-9, and a step rarely crosses a ReLU kink. Errors are measured against
// the largest gradient of the tensor (at least 1e-2: exact zeros, such as the key bias's
// gradient under softmax's shift invariance, come out of float arithmetic as ~1e-7).
template <class Loss>
void check_fd(const std::string& what, float* values, const float* analytic, size_t n, Loss&& loss, double tol = 2e-4, float step = 1e-5f) {
  std::vector<double> fd(n);
  double scale = 1e-2;
  for (size_t i = 0; i < n; ++i) {
    float old = values[i];
    float h = step * std::max(1.0f, std::abs(old));
    values[i] = old + h;
    double up = loss(), hp = double(values[i]) - old;
    values[i] = old - h;
    double down = loss(), hm = double(old) - values[i];
    values[i] = old;
    fd[i] = (up - down) / (hp + hm);
    scale = std::max(scale, std::abs(fd[i]));
  }
  double worst = 0;
  size_t at = 0;
  for (size_t i = 0; i < n; ++i)
    if (std::abs(analytic[i] - fd[i]) > worst) worst = std::abs(analytic[i] - fd[i]), at = i;
  INFO(what << ": largest error " << worst << " at entry " << at << " (analytic " << analytic[at] << ", finite difference "
            << fd[at] << "), gradient scale " << scale);
  CHECK(worst <= tol * scale);
}

// Every parameter of p against the gradients accumulated in g.
template <class P, class Loss>
void check_params(P& p, const P& g, Loss&& loss, double tol = 2e-4) {
  for_each_param([&](const Path& path, Init, auto& value, const auto& grad) { check_fd(path.name().c_str(), value.data(), grad.data(), value.size(), loss, tol); },
                 p, g);
}

template <class P>
std::unique_ptr<P> random_block(Rng& rng) {
  auto p = make<P>();
  test::randomize(*p, rng);
  return p;
}

template <class P>
std::unique_ptr<P> zero_grads() {
  auto g = make<P>();
  zero_grad(*g);
  return g;
}

}  // namespace

TEST_CASE("gradients: Linear, ScaleNorm (and a clamped row), FeedForward") {
  Rng rng(11);
  constexpr size_t B = 2, N = 3;
  auto lin = random_block<Linear<5, 7>>(rng);
  auto glin = zero_grads<Linear<5, 7>>();
  Tensor<B, N, 5> x;
  Tensor<B, N, 7> c;
  fill(x, rng);
  fill(c, rng);
  TrainingOf<Linear<5, 7>, B, N> a;
  a.forward(*lin, x);
  a.backward(*lin, *glin, c);
  auto loss = [&] { return project(c, B, [&](size_t b) { return ref::linear(ref::row(x, b), *lin); }); };
  check_params(*lin, *glin, loss);
  check_fd("x", x.data(), a.dx.data(), x.size(), loss);

  // without a bias (nn.Linear(5, 7, bias=False)): weight alone
  using NoBiasLinear = Linear<5, 7, Init::xavier_normal, Bias::no>;
  static_assert(sizeof(NoBiasLinear) == sizeof(Tensor<7, 5>));
  auto nb = random_block<NoBiasLinear>(rng);
  auto gnb = zero_grads<NoBiasLinear>();
  TrainingOf<NoBiasLinear, B, N> na;
  na.forward(*nb, x);
  na.backward(*nb, *gnb, c);
  auto nloss = [&] { return project(c, B, [&](size_t b) { return ref::linear(ref::row(x, b), *nb); }); };
  check_params(*nb, *gnb, nloss);
  check_fd("x", x.data(), na.dx.data(), x.size(), nloss);

  ScaleNorm<6> sn, gsn;
  sn.g(0) = 1.7f;
  zero_grad(gsn);
  Tensor<B, N, 6> xs, cs;
  fill(xs, rng);
  fill(cs, rng);
  TrainingOf<ScaleNorm<6>, B, N> sa;
  for (size_t j = 0; j < 6; ++j) xs(1, 2, j) = 1e-8f;  // norm below eps: y = g·x/eps, dx = g·dy/eps
  sa.forward(sn, xs);
  sa.backward(sn, gsn, cs);
  for (size_t j = 0; j < 6; ++j) CHECK(sa.dx(1, 2, j) == doctest::Approx(1.7 * 1e5 * cs(1, 2, j)).epsilon(1e-5));
  fill(xs, rng);
  zero_grad(gsn);
  sa.forward(sn, xs);
  sa.backward(sn, gsn, cs);
  auto sloss = [&] { return project(cs, B, [&](size_t b) { return ref::scalenorm(ref::row(xs, b), sn.g(0)); }); };
  check_params(sn, gsn, sloss);
  check_fd("x", xs.data(), sa.dx.data(), xs.size(), sloss);

  auto ff = random_block<FeedForward<6, 10>>(rng);
  auto gff = zero_grads<FeedForward<6, 10>>();
  TrainingOf<FeedForward<6, 10>, B, N> fa;
  fa.forward(*ff, xs);
  const auto& fdx = fa.backward(*ff, *gff, cs);
  auto floss = [&] { return project(cs, B, [&](size_t b) { return ref::ffn(ref::row(xs, b), *ff); }); };
  check_params(*ff, *gff, floss);
  check_fd("x", xs.data(), fdx.data(), xs.size(), floss);
}

namespace {

// A norm's weight and bias away from their initial ones and zeros, so that each gradient counts.
template <class Norm>
void check_rownorm(Rng& rng) {
  constexpr size_t B = 2, N = 3, D = 7;
  auto p = random_block<Norm>(rng);
  auto g = zero_grads<Norm>();
  Tensor<B, N, D> x, c;
  fill(x, rng);
  fill(c, rng);
  TrainingOf<Norm, B, N> a;
  a.forward(*p, x);
  a.backward(*p, *g, c);
  auto loss = [&] { return project(c, B, [&](size_t b) { return ref::norm(ref::row(x, b), *p); }); };
  check_params(*p, *g, loss);
  check_fd("x", x.data(), a.dx.data(), x.size(), loss);
  // a row of constant value (LayerNorm: x − μ = 0 exactly, y = b) or of zeros (RMSNorm: y = 0)
  const float v = requires { p->bias(0); } ? 2.5f : 0.0f;
  for (size_t j = 0; j < D; ++j) x(1, 2, j) = v;
  zero_grad(*g);
  ref::check_close(a.forward(*p, x), 1, ref::norm(ref::row(x, 1), *p));
  a.backward(*p, *g, c);
  for (size_t j = 0; j < D; ++j) CHECK(std::isfinite(a.dx(1, 2, j)));
  check_params(*p, *g, loss);
}

template <class Step>
void check_activation(Rng& rng, const char* kind) {
  constexpr size_t B = 2, N = 3, D = 9;
  Step s;
  Tensor<B, N, D> x, c;
  fill(x, rng, 3.0f);
  fill(c, rng);
  TrainingOf<Step, B, N> a;
  for (size_t b = 0; b < B; ++b) ref::check_close(a.forward(s, x), b, ref::activation(ref::row(x, b), kind));
  a.backward(s, s, c);
  auto loss = [&] { return project(c, B, [&](size_t b) { return ref::activation(ref::row(x, b), kind); }); };
  INFO(kind);
  check_fd("x", x.data(), a.dx.data(), x.size(), loss);
}

}  // namespace

TEST_CASE("gradients: LayerNorm and RMSNorm (and rows of constant value), the activations, FeedForward with each") {
  Rng rng(12);
  check_rownorm<LayerNorm<7>>(rng);
  check_rownorm<RMSNorm<7>>(rng);
  check_activation<ReLU<9>>(rng, "relu");
  check_activation<GELU<9>>(rng, "gelu");
  check_activation<GELUTanh<9>>(rng, "gelu_tanh");
  check_activation<SiLU<9>>(rng, "silu");
  check_activation<Tanh<9>>(rng, "tanh");
  constexpr size_t B = 2, N = 3;
  Tensor<B, N, 6> x, c;
  fill(x, rng);
  fill(c, rng);
  auto each = [&]<class Act>(const char* kind) {
    using FF = FeedForward<6, 10, Act>;
    auto ff = random_block<FF>(rng);
    auto gff = zero_grads<FF>();
    TrainingOf<FF, B, N> fa;
    for (size_t b = 0; b < B; ++b) ref::check_close(fa.forward(*ff, x), b, ref::ffn(ref::row(x, b), *ff, kind));
    const auto& dx = fa.backward(*ff, *gff, c);
    auto loss = [&] { return project(c, B, [&](size_t b) { return ref::ffn(ref::row(x, b), *ff, kind); }); };
    INFO(kind);
    check_params(*ff, *gff, loss);
    check_fd("x", x.data(), dx.data(), x.size(), loss);
    // Infer: the same bits as Acts
    InferOf<FF, B, N> inf;
    CHECK(inf.forward(*ff, x) == fa.forward(*ff, x));
  };
  each.template operator()<act::GELU>("gelu");
  each.template operator()<act::GELUTanh>("gelu_tanh");
  each.template operator()<act::SiLU>("silu");
}

template <size_t B_, size_t Nq_, size_t Nk_, size_t Dq_, size_t Dkv_, size_t D_, size_t H_>
struct MhaShape {
  static constexpr size_t B = B_, Nq = Nq_, Nk = Nk_, Dq = Dq_, Dkv = Dkv_, D = D_, H = H_;
};

TEST_CASE_TEMPLATE("gradients: MultiHeadAttention, unmasked, causal, padded, all-masked rows", S, MhaShape<2, 3, 5, 6, 4, 8, 2>,
                   MhaShape<3, 4, 4, 8, 8, 8, 1>, MhaShape<1, 6, 3, 5, 7, 12, 3>, MhaShape<3, 1, 9, 6, 5, 8, 2>, MhaShape<3, 2, 10, 6, 5, 8, 2>) {
  Rng rng(12);
  using MHA = MultiHeadAttention<S::Dq, S::Dkv, S::D, S::H>;
  constexpr size_t B = S::B, Nq = S::Nq, Nk = S::Nk;
  static_assert(MHA::template folds<Nq, Nk> == (Nq < 4), "the first and the last two shapes take the folded path (FoldedActs)");
  auto p = random_block<MHA>(rng);
  Tensor<B, Nq, S::Dq> xq;
  Tensor<B, Nk, S::Dkv> xkv;
  Tensor<B, Nq, S::D> c;
  fill(xq, rng);
  fill(xkv, rng);
  fill(c, rng);
  KeyMask<B, Nk> keys;
  for (size_t b = 0; b < B; ++b)
    for (size_t j = 0; j < Nk; ++j) keys(b, j) = b == 0 ? j != 1 : (b == 1 ? false : j < 2);  // a hole; all masked; a prefix
  auto a = make<TrainingOf<MHA, B, Nq, Nk>>();
  for (bool causal : {false, true})
    for (const KeyMask<B, Nk>* km : {(const KeyMask<B, Nk>*)nullptr, (const KeyMask<B, Nk>*)&keys}) {
      CAPTURE(causal);
      CAPTURE(km != nullptr);
      auto g = zero_grads<MHA>();
      a->forward(*p, xq, xkv, Mask<B, Nk>{.causal = causal, .keys = km});
      const auto d = a->backward(*p, *g, c);
      auto loss = [&] {
        return project(c, B, [&](size_t b) {
          return ref::mha(ref::row(xq, b), ref::row(xkv, b), *p, S::H, 1 / std::sqrt(double(S::D / S::H)), causal, test::mask_row(km, b));
        });
      };
      check_params(*p, *g, loss);
      check_fd("xq", xq.data(), d.dq.data(), xq.size(), loss);
      check_fd("xkv", xkv.data(), d.dkv.data(), xkv.size(), loss);
    }
}

TEST_CASE("gradients: EncoderBlock and DecoderBlock (with the gradient into the memory)") {
  Rng rng(13);
  constexpr size_t B = 2, N = 4, M = 3, D = 8;
  auto enc = random_block<EncoderBlock<D, 2, 12>>(rng);
  auto dec = random_block<DecoderBlock<D, 2, 12>>(rng);
  Tensor<B, N, D> x, c;
  Tensor<B, M, D> m;
  fill(x, rng);
  fill(c, rng);
  fill(m, rng);
  auto keys = test::lengths_mask<B, N>({4, 2});
  auto ea = make<TrainingOf<EncoderBlock<D, 2, 12>, B, N>>();
  for (bool causal : {false, true}) {
    CAPTURE(causal);
    auto g = zero_grads<EncoderBlock<D, 2, 12>>();
    ea->forward(*enc, x, Mask<B, N>{.causal = causal, .keys = &keys});
    const auto& dx = ea->backward(*enc, *g, c);
    auto loss = [&] { return project(c, B, [&](size_t b) { return ref::encoder(ref::row(x, b), *enc, 2, causal, test::mask_row(&keys, b)); }); };
    check_params(*enc, *g, loss);
    check_fd("x", x.data(), dx.data(), x.size(), loss);
  }
  auto mkeys = test::lengths_mask<B, M>({1, 3});
  auto da = make<TrainingOf<DecoderBlock<D, 2, 12>, B, N, M>>();
  auto g = zero_grads<DecoderBlock<D, 2, 12>>();
  da->forward(*dec, x, m, &mkeys);
  const auto d = da->backward(*dec, *g, c);
  auto loss = [&] { return project(c, B, [&](size_t b) { return ref::decoder(ref::row(x, b), ref::row(m, b), *dec, 2, test::mask_row(&mkeys, b)); }); };
  check_params(*dec, *g, loss);
  check_fd("x", x.data(), d.dq.data(), x.size(), loss);
  check_fd("m", m.data(), d.dkv.data(), m.size(), loss);
}

TEST_CASE_TEMPLATE("gradients: MAB, SAB, ISAB (inducing points), PMA (seeds)", Tag, ScaleNorm<8>, Identity<8>) {
  Rng rng(14);
  constexpr size_t B = 2, N = 5, Nq = 3, D = 8, H = 2;
  auto run = [&]<template <size_t> class Norm>() {
    auto mab = random_block<MAB<D, H, Norm>>(rng);
    auto sab = random_block<SAB<D, H, Norm>>(rng);
    auto isab = random_block<ISAB<D, H, 3, Norm>>(rng);
    auto pma = random_block<PMA<D, H, 2, Norm>>(rng);
    Tensor<B, N, D> x, cx;
    Tensor<B, Nq, D> q, cq;
    Tensor<B, 2, D> cp;
    fill(x, rng);
    fill(q, rng);
    fill(cx, rng);
    fill(cq, rng);
    fill(cp, rng);
    auto keys = test::lengths_mask<B, N>({5, 3});
    {
      auto g = zero_grads<MAB<D, H, Norm>>();
      auto a = make<TrainingOf<MAB<D, H, Norm>, B, Nq, N>>();
      a->forward(*mab, q, x, &keys);
      const auto d = a->backward(*mab, *g, cq);
      auto loss = [&] { return project(cq, B, [&](size_t b) { return ref::mab(ref::row(q, b), ref::row(x, b), *mab, H, test::mask_row(&keys, b)); }); };
      check_params(*mab, *g, loss);
      check_fd("X", q.data(), d.dq.data(), q.size(), loss);
      check_fd("Y", x.data(), d.dkv.data(), x.size(), loss);
    }
    {
      auto g = zero_grads<SAB<D, H, Norm>>();
      auto a = make<TrainingOf<SAB<D, H, Norm>, B, N>>();
      a->forward(*sab, x, &keys);
      const auto& dx = a->backward(*sab, *g, cx);
      auto loss = [&] {
        const auto mab = written::mab_of(*sab);  // the parameters as the check sets them
        return project(cx, B, [&](size_t b) { return ref::mab(ref::row(x, b), ref::row(x, b), mab, H, test::mask_row(&keys, b)); });
      };
      check_params(*sab, *g, loss);
      check_fd("X", x.data(), dx.data(), x.size(), loss);
    }
    {
      auto g = zero_grads<ISAB<D, H, 3, Norm>>();
      auto a = make<TrainingOf<ISAB<D, H, 3, Norm>, B, N>>();
      a->forward(*isab, x, &keys);
      const auto& dx = a->backward(*isab, *g, cx);
      auto loss = [&] { return project(cx, B, [&](size_t b) { return ref::isab(ref::row(x, b), *isab, H, test::mask_row(&keys, b)); }); };
      check_params(*isab, *g, loss);
      check_fd("X", x.data(), dx.data(), x.size(), loss);
    }
    {
      auto g = zero_grads<PMA<D, H, 2, Norm>>();
      auto a = make<TrainingOf<PMA<D, H, 2, Norm>, B, N>>();
      a->forward(*pma, x, &keys);
      const auto& dx = a->backward(*pma, *g, cp);
      auto loss = [&] { return project(cp, B, [&](size_t b) { return ref::pma(ref::row(x, b), *pma, H, test::mask_row(&keys, b)); }); };
      check_params(*pma, *g, loss);
      check_fd("X", x.data(), dx.data(), x.size(), loss);
    }
  };
  if constexpr (std::is_same_v<Tag, ScaleNorm<8>>)
    run.template operator()<ScaleNorm>();
  else
    run.template operator()<Identity>();
}

TEST_CASE("gradients: PointerAttention (masked), Embedding rows, PositionalEncoding") {
  Rng rng(15);
  constexpr size_t B = 2, Nq = 2, Nk = 6;
  auto p = random_block<PointerAttention<5, 7, 8>>(rng);
  auto g = zero_grads<PointerAttention<5, 7, 8>>();
  Tensor<B, Nq, 5> q;
  Tensor<B, Nk, 7> k;
  Tensor<B, Nq, Nk> c;
  fill(q, rng);
  fill(k, rng);
  fill(c, rng);
  auto keys = test::lengths_mask<B, Nk>({6, 4});
  TrainingOf<PointerAttention<5, 7, 8>, B, Nq, Nk> a;
  a.forward(*p, q, k, &keys);
  const auto d = a.backward(*p, *g, c);
  auto loss = [&] { return project(c, B, [&](size_t b) { return ref::pointer(ref::row(q, b), ref::row(k, b), *p, test::mask_row(&keys, b)); }); };
  check_params(*p, *g, loss);
  check_fd("q", q.data(), d.dq.data(), q.size(), loss);
  check_fd("k", k.data(), d.dkv.data(), k.size(), loss);

  Embedding<7, 4> e, ge;
  init_params(e, rng);
  zero_grad(ge);
  IdTensor<B, 3> ids = {{1, 5, 1}, {0, 1, 6}};
  Tensor<B, 3, 4> ce;
  fill(ce, rng);
  TrainingOf<Embedding<7, 4>, B, 3> ea;
  TrainingOf<PositionalEncoding<5, 4>, B, 3> pa;
  PositionalEncoding<5, 4> pe;
  pa.forward(pe, ea.forward(e, ids));
  ea.backward(e, ge, pa.backward(pe, pe, ce));
  auto eloss = [&] {
    return project(ce, B, [&](size_t b) {
      ref::Mat x(3, 4);
      for (size_t i = 0; i < 3; ++i)
        for (size_t j = 0; j < 4; ++j) x(i, j) = e.weight(size_t(ids(b, i)), j);
      return ref::positional(x);
    });
  };
  check_params(e, ge, eloss);
  CHECK(ge.weight(1, 2) == doctest::Approx(ce(0, 0, 2) + ce(0, 2, 2) + ce(1, 1, 2)));  // row 1 used three times
  CHECK(ge.weight(3, 0) == 0.0f);                                                      // row 3 unused
}

TEST_CASE("gradients: the SPEC models (pointer, set, language model)") {
  Rng rng(16);
  constexpr size_t B = 2, N = 6;
  Tensor<B, N, 2> x;
  fill(x, rng);
  {
    using P = PointerModel<2, 8, 2, 12, 2>;
    auto p = random_block<P>(rng);
    auto g = zero_grads<P>();
    auto a = make<TrainingOf<P, B, N>>();
    Tensor<B, 1, N> c;
    fill(c, rng);
    a->forward(*p, x);
    const auto& dx = a->backward(*p, *g, c);
    auto loss = [&] {
      return project(c, B, [&](size_t b) {
        auto h = ref::linear(ref::row(x, b), p->get<"proj">());
        for (const auto& blk : p->get<"blocks">()) h = ref::encoder(h, blk, 2);
        const auto& head = p->get<"">();
        return ref::pointer(ref::norm(ref::row(head.seeds(), 0), head.get<"sn_q">()), ref::norm(h, p->get<"sn_v">()), head.get<"pointer">());
      });
    };
    check_params(*p, *g, loss);
    check_fd("x", x.data(), dx.data(), x.size(), loss);
  }
  {
    using S = SetTransformer<2, 8, 2, 3, 2>;
    auto p = random_block<S>(rng);
    auto g = zero_grads<S>();
    auto a = make<TrainingOf<S, B, N>>();
    Tensor<B, 1, 2> c;
    fill(c, rng);
    a->forward(*p, x);
    const auto& dx = a->backward(*p, *g, c);
    auto loss = [&] {
      return project(c, B, [&](size_t b) {
        return ref::linear(ref::pma(ref::isab(ref::linear(ref::row(x, b), p->get<"proj">()), p->get<"isab">(), 2), p->get<"pool">(), 2), p->get<"head">());
      });
    };
    check_params(*p, *g, loss);
    check_fd("x", x.data(), dx.data(), x.size(), loss);
  }
  {
    using LM = LanguageModel<11, 5, 8, 2, 12, 2>;
    auto p = random_block<LM>(rng);
    auto g = zero_grads<LM>();
    auto a = make<TrainingOf<LM, B>>();
    IdTensor<B, 5> ids = {{3, 1, 4, 1, 5}, {9, 2, 6, 5, 3}};
    Tensor<B, 1, 11> c;
    fill(c, rng);
    a->forward(*p, ids);
    a->backward(*p, *g, c);
    auto loss = [&] {
      return project(c, B, [&](size_t b) {
        ref::Mat h(5, 8);
        for (size_t i = 0; i < 5; ++i)
          for (size_t j = 0; j < 8; ++j) h(i, j) = p->get<"embedding">().weight(size_t(ids(b, i)), j);
        h = ref::positional(h);
        for (const auto& blk : p->get<"blocks">()) h = ref::encoder(h, blk, 2);
        return ref::linear(ref::pma(h, p->get<"pool">(), 2), p->get<"head">());
      });
    };
    check_params(*p, *g, loss);
  }
}

TEST_CASE("gradients: PositionEmbedding, ClassToken, FirstToken, LastToken; a ViT-style classifier of them and PyTorch's layers") {
  Rng rng(13);
  constexpr size_t B = 2, N = 3, D = 5;
  Tensor<B, N, D> x;
  fill(x, rng);
  {
    auto p = random_block<PositionEmbedding<4, D>>(rng);
    auto g = zero_grads<PositionEmbedding<4, D>>();
    Tensor<B, N, D> c;
    fill(c, rng);
    TrainingOf<PositionEmbedding<4, D>, B, N> a;
    a.forward(*p, x);
    const auto& dx = a.backward(*p, *g, c);
    auto loss = [&] {  // Σ c ⊙ (x + weight[n])
      double s = 0;
      for (size_t b = 0; b < B; ++b)
        for (size_t n = 0; n < N; ++n)
          for (size_t j = 0; j < D; ++j) s += double(c(b, n, j)) * (double(x(b, n, j)) + p->weight(n, j));
      return s;
    };
    check_params(*p, *g, loss);
    check_fd("x", x.data(), dx.data(), x.size(), loss);
  }
  {
    auto p = random_block<ClassToken<D>>(rng);
    auto g = zero_grads<ClassToken<D>>();
    Tensor<B, N + 1, D> c;
    fill(c, rng);
    TrainingOf<ClassToken<D>, B, N> a;
    const auto& y = a.forward(*p, x);
    for (size_t j = 0; j < D; ++j) CHECK((y(1, 0, j) == p->cls_token(0, 0, j) && y(1, 3, j) == x(1, 2, j)));
    const auto& dx = a.backward(*p, *g, c);
    auto loss = [&] {  // Σ_b c[b, 0]·cls_token + Σ c[b, 1 + n]·x[b, n]
      double s = 0;
      for (size_t b = 0; b < B; ++b)
        for (size_t j = 0; j < D; ++j) {
          s += double(c(b, 0, j)) * p->cls_token(0, 0, j);
          for (size_t n = 0; n < N; ++n) s += double(c(b, 1 + n, j)) * x(b, n, j);
        }
      return s;
    };
    check_params(*p, *g, loss);
    check_fd("x", x.data(), dx.data(), x.size(), loss);
  }
  const auto token_row = [&]<class Step>(size_t r) {  // FirstToken (r = 0), LastToken (r = N − 1)
    Step p;
    Tensor<B, 1, D> c;
    fill(c, rng);
    TrainingOf<Step, B, N> a;
    const auto& y = a.forward(p, x);
    for (size_t b = 0; b < B; ++b)
      for (size_t j = 0; j < D; ++j) CHECK(y(b, 0, j) == x(b, r, j));
    const auto& dx = a.backward(p, p, c);
    auto loss = [&] {
      double s = 0;
      for (size_t b = 0; b < B; ++b)
        for (size_t j = 0; j < D; ++j) s += double(c(b, 0, j)) * x(b, r, j);
      return s;
    };
    check_fd("x", x.data(), dx.data(), x.size(), loss);
  };
  token_row.template operator()<FirstToken<D>>(0);
  token_row.template operator()<LastToken<D>>(N - 1);
  // composed: PyTorch's names by index, the forward-only pass the same bits as training's
  using M = Sequential<Linear<D, 8>, ClassToken<8>, PositionEmbedding<4, 8>, Repeat<EncoderBlock<8, 2, 16, PostNorm<act::GELU>>, 2>,
                       FirstToken<8>, Linear<8, 8, Init::xavier_normal, Bias::no>, Named<"head", Linear<8, 2>>>;
  auto m = random_block<M>(rng);
  const auto names = test::param_names(*m);
  for (const char* n : {"1.cls_token", "2.weight", "3.0.self_attn.in_proj_weight", "3.1.linear2.bias", "3.1.norm2.weight", "5.weight", "head.weight"})
    CHECK_MESSAGE(std::find(names.begin(), names.end(), n) != names.end(), n);
  CHECK(std::find(names.begin(), names.end(), "5.bias") == names.end());  // Bias::no: no bias tensor
  TrainingOf<M, B, N> a;
  InferOf<M, B, N> inf;
  const Tensor<B, 1, 2> want = a.forward(*m, x);
  CHECK(inf.forward(*m, x) == want);
  Tensor<B, 1, 2> c;
  fill(c, rng);
  auto g = zero_grads<M>();
  const auto& dx = a.backward(*m, *g, c);
  auto loss = [&] {  // the float model itself (steps of 1e-2: above its rounding): a coarser check of the chain
    const auto& y = inf.forward(*m, x);
    double s = 0;
    for (size_t i = 0; i < y.size(); ++i) s += double(c.data()[i]) * y.data()[i];
    return s;
  };
  check_fd("x", x.data(), dx.data(), x.size(), loss, 2e-3, 1e-2f);
}

// The blocks a user declares from combinators (tests/user_blocks.hpp: GPT-J's parallel block,
// SwiGLU, a LayerScale pre-norm block), masked: every parameter's gradient and the input's
// against central differences of their own float forward pass, L = Σ c ⊙ y summed in double.
// reference.hpp has no double forward of them, so the differences carry the float forward's
// rounding (about 1e-7 of each output, 1e-3 of the step's quotient): the step is 1e-3 and the
// bound 1e-2 of each tensor's largest gradient. PyTorch's gradients check them to 4e-7
// (test_torch_parity).
template <class M, size_t B, size_t N>
void combinator_fd(const char* what, const Mask<B, N>& mask) {
  Rng rng(17);
  auto p = random_block<M>(rng);
  Tensor<B, N, 16> x, c;
  fill(x, rng), fill(c, rng);
  auto train = make<TrainingOf<M, B, N>>();
  auto g = zero_grads<M>();
  train->forward(*p, x, mask);
  const Tensor<B, N, 16> dx = train->backward(*p, *g, c);
  auto pass = make<TrainingOf<M, B, N>>();
  const auto loss = [&] {
    const auto& y = pass->forward(*p, x, mask);
    double l = 0;
    for (size_t i = 0; i < y.size(); ++i) l += double(c.data()[i]) * y.data()[i];
    return l;
  };
  check_fd(std::string(what) + ": dL/dx", x.data(), dx.data(), x.size(), loss, 1e-2, 1e-3f);
  for_each_param(
      [&](const Path& path, Init, auto& value, const auto& grad) {
        check_fd(std::string(what) + ": " + path.name().c_str(), value.data(), grad.data(), value.size(), loss, 1e-2, 1e-3f);
      },
      *p, *g);
}

TEST_CASE("gradients: blocks from combinators (Residual, Parallel, Gated, SelfAttention, LayerScale), causal and key-padded") {
  constexpr size_t B = 2, N = 6;
  const KeyMask<B, N> keys = test::lengths_mask<B, N>({6, 4});
  combinator_fd<user::ParallelBlock<16, 2, 32>>("GPT-J's parallel block", Mask<B, N>{.causal = true});
  combinator_fd<user::SwiGLU<16, 32>>("SwiGLU", Mask<B, N>{});
  combinator_fd<user::LayerScaleBlock<16, 2, 32>>("LayerScale pre-norm block", Mask<B, N>{.keys = &keys});
}

TEST_CASE_TEMPLATE("RotaryAttention: the double reference, Infer = Acts bit for bit, gradients; grouped, multi-query and multi-head; "
                   "both rotations; causal and key-padded",
                   RA, RotaryAttention<16, 4, 2, 32>, RotaryAttention<12, 3, 1, 16, Rotation::halves, theta(500.0f), Bias::yes>,
                   RotaryAttention<8, 2, 2, 8, Rotation::pairs, theta(10000.0f), Bias::yes>) {
  Rng rng(64);
  constexpr size_t B = 2, N = 7, D = RA::width, H = RA::heads, KVH = RA::kv_heads;
  const bool halves = RA::rotation == Rotation::halves;
  const double base = RA::base;
  auto p = random_block<RA>(rng);
  Tensor<B, N, D> x, c;
  fill(x, rng);
  fill(c, rng);
  const KeyMask<B, N> keys = test::lengths_mask<B, N>({7, 4});
  auto a = make<TrainingOf<RA, B, N>>();
  auto infer = make<InferOf<RA, B, N>>();
  for (const KeyMask<B, N>* km : {(const KeyMask<B, N>*)nullptr, &keys}) {
    CAPTURE(km != nullptr);
    const Mask<B, N> mask{.causal = true, .keys = km};
    const auto& y = a->forward(*p, x, mask);
    for (size_t b = 0; b < B; ++b) ref::check_close(y, b, ref::rotary_attention(ref::row(x, b), *p, H, KVH, base, halves, test::mask_row(km, b)));
    CHECK(test::same_bits(infer->forward(*p, x, mask), y));
    auto g = zero_grads<RA>();
    const auto d = a->backward(*p, *g, c);
    auto loss = [&] {
      return project(c, B, [&](size_t b) { return ref::rotary_attention(ref::row(x, b), *p, H, KVH, base, halves, test::mask_row(km, b)); });
    };
    check_params(*p, *g, loss);
    check_fd("x", x.data(), d.data(), x.size(), loss);
  }
}
