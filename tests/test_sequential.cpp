// Sequential: models composed from a declaration. The SPEC models (compositions) against the
// ones written by hand before (written_models.hpp) (the same names, layout, outputs and gradients, bit for bit, and
// a plan no larger); names by index and by choice; Repeat; MeanPool; a sequence classifier that
// is not SPEC's, checked by finite differences and trained; the derived plan's bound.
#include <doctest/doctest.h>

#include <cstdio>
#include <string>
#include <vector>

#include <stformer/stformer.hpp>

#include "reference.hpp"
#include "causal_lm.hpp"
#include "user_blocks.hpp"
#include "util.hpp"
#include "written_models.hpp"

using namespace stformer;
using test::fill;
using test::make;
using test::same_bits;

namespace {

// Byte offset of every parameter in m (the layout a model image relies on).
template <class M>
std::vector<std::ptrdiff_t> offsets(const M& m) {
  std::vector<std::ptrdiff_t> o;
  for_each_param([&](const Path&, Init, const auto& t) { o.push_back(reinterpret_cast<const char*>(t.data()) - reinterpret_cast<const char*>(&m)); }, m);
  return o;
}

// The composed model holds the hand-written one's parameters under the same names at the same
// offsets: copied byte for byte, it is the same model.
template <class Composed, class Written>
std::unique_ptr<Composed> same_model(const Written& w) {
  static_assert(sizeof(Composed) == sizeof(Written) && std::is_trivially_copyable_v<Composed> && std::is_standard_layout_v<Composed>);
  auto c = make<Composed>();
  CHECK(test::param_names(*c) == test::param_names(w));
  CHECK(offsets(*c) == offsets(w));
  std::memcpy(static_cast<void*>(c.get()), &w, sizeof w);
  return c;
}

// The composed model with the hand-written one's parameters under the same names, copied by
// name: where a declared block keeps them in another order (ISAB: MAB2's query norm first).
template <class Composed, class Written>
std::unique_ptr<Composed> same_parameters(const Written& w) {
  auto c = make<Composed>();
  auto names = test::param_names(*c), written_names = test::param_names(w);
  std::sort(names.begin(), names.end()), std::sort(written_names.begin(), written_names.end());
  CHECK(names == written_names);
  test::copy_by_name(w, *c);
  return c;
}

// max|a − b| / max|a| ≤ tol (tol 0: the same bits).
template <class A, class B>
bool close(const A& a, const B& b, float tol) {
  if (tol == 0) return same_bits(a, b);
  float err = 0, scale = 0;
  for (size_t i = 0; i < a.size(); ++i) err = std::max(err, std::abs(a[i] - b[i])), scale = std::max(scale, std::abs(a[i]));
  return err <= tol * scale;
}

// Forward-only outputs, training outputs, input gradients and parameter gradients of the
// hand-written model w and its composition c, bit for bit (dL/dy random, 0 where y is −∞); the
// gradients within tol of the largest entry where the composition sums in another order.
template <class W, class C, size_t... Dims, class X, class... Mask>
void check_same_passes(const W& w, const C& c, const X& x, Rng& rng, float tol, const Mask&... mask) {
  auto wi = make<InferOf<W, Dims...>>();
  auto ci = make<InferOf<C, Dims...>>();
  CHECK(same_bits(wi->forward(w, x, mask...), ci->forward(c, x, mask...)));
  auto wa = make<TrainingOf<W, Dims...>>();
  auto ca = make<TrainingOf<C, Dims...>>();
  const auto& y = wa->forward(w, x, mask...);
  CHECK(same_bits(y, ca->forward(c, x, mask...)));
  auto dy = make<std::remove_cvref_t<decltype(y)>>();
  fill(*dy, rng);
  for (size_t i = 0; i < dy->size(); ++i)
    if (std::isinf(y.data()[i])) dy->data()[i] = 0;
  auto wg = make<W>();
  auto cg = make<C>();
  zero_grad(*wg), zero_grad(*cg);
  if constexpr (std::is_void_v<decltype(wa->backward(w, *wg, *dy))>) {
    wa->backward(w, *wg, *dy);
    ca->backward(c, *cg, *dy);
  } else {
    const auto& wdx = wa->backward(w, *wg, *dy);
    CHECK(close(wdx, ca->backward(c, *cg, *dy), tol));
  }
  const auto want = test::params_by_name(*wg), got = test::params_by_name(*cg);
  for (const auto& [name, g] : want) {
    CAPTURE(name);
    CHECK(close(g, got.at(name), tol));
  }
}

// The largest sum of two neighbouring steps' own forward-only passes: the bound the derived
// plan must keep (Sequential's header).
template <class M, size_t B, size_t N, size_t... I>
constexpr size_t neighbours_bound(std::index_sequence<I...>) {
  constexpr size_t own[] = {sizeof(typename M::template OutputAt<B, N, I>) + sizeof(step::Scratch<typename M::template BlockAt<I>, B, N, 0>)...};
  size_t m = 0;
  for (size_t i = 0; i + 1 < sizeof...(I); ++i) m = std::max(m, own[i] + own[i + 1]);
  return sizeof...(I) == 1 ? own[0] : m;
}

}  // namespace

TEST_CASE("Sequential: names by index as nn.Sequential, by choice, and Repeat's .0 .1") {
  using M = Sequential<Linear<2, 8>, SAB<8, 2>, Named<"blocks", Repeat<ScaleNorm<8>, 2>>, PMA<8, 2, 1>, Linear<8, 3>>;
  const auto n = test::param_names(M{});
  REQUIRE(n.size() == 2 + 13 + 2 + 14 + 2);
  CHECK(n[0] == "0.weight");
  CHECK(n[1] == "0.bias");
  CHECK(n[2] == "1.mab.nq.g");
  CHECK(n[4] == "1.mab.attn.wq.weight");
  CHECK(n[15] == "blocks.0.g");
  CHECK(n[16] == "blocks.1.g");
  CHECK(n[17] == "3.seeds");
  CHECK(n.back() == "4.bias");
  M m;
  CHECK(&m.get<"blocks">()[1].g == &m.get<2>()[1].g);
  static_assert(M::index_of<"blocks"> == 2);
}

namespace {
// A SPEC model of sets [B, N, 2] against its composition: the same passes bit for bit, with
// and without padding, and a plan no larger than the hand-written one, the target and the
// neighbours' bound.
template <class W, class C, size_t B, size_t N, bool SameLayout>
void check_set_model(Rng& rng, const KeyMask<B, N>& keys, size_t target, const char* what, float tol) {
  auto w = make<W>();
  test::randomize(*w, rng);
  std::unique_ptr<C> c;
  if constexpr (SameLayout)
    c = same_model<C>(*w);
  else
    c = same_parameters<C>(*w);
  Tensor<B, N, 2> x;
  fill(x, rng);
  check_same_passes<W, C, B, N>(*w, *c, x, rng, tol);
  check_same_passes<W, C, B, N>(*w, *c, x, rng, tol, &keys);
  MESSAGE(what << ", one set of 50: composed plan " << sizeof(InferOf<C, 1, N>) << " B, hand-written " << sizeof(InferOf<W, 1, N>) << " B");
  CHECK(sizeof(InferOf<C, 1, N>) <= sizeof(InferOf<W, 1, N>));
  CHECK(sizeof(InferOf<C, 1, N>) <= target);
  CHECK(sizeof(InferOf<C, 1, N>) <= neighbours_bound<C, 1, N>(std::make_index_sequence<C::steps>{}));
}
}  // namespace

// The set model's ISAB, a declaration, keeps MAB2's query norm before MAB1 and sums dx in another
// order (tests/test_declared.cpp): its parameters copied by name, its gradients within 1e-6.
TEST_CASE("Sequential: SPEC's pointer and set models are the hand-written ones, bit for bit (the set model's gradients within 1e-6), in plans no larger") {
  Rng rng(31);
  check_set_model<written::PointerModel<2, 16, 1, 64, 2>, PointerModel<2, 16, 1, 64, 2>, 3, 50, true>(rng, test::lengths_mask<3, 50>({50, 17, 1}), 16000,
                                                                                               "pointer model", 0.0f);
  check_set_model<written::SetTransformer<2, 64, 4, 16, 2>, SetTransformer<2, 64, 4, 16, 2>, 2, 50, false>(rng, test::lengths_mask<2, 50>({50, 9}), 59680,
                                                                                                     "set model", 1e-6f);
}

TEST_CASE("Sequential: the language model is the hand-written one, bit for bit; SPEC's plan no larger") {
  Rng rng(33);
  constexpr size_t B = 2, L = 32, V = 300;
  using W = written::LanguageModel<V, L, 64, 4, 256, 2>;
  using C = LanguageModel<V, L, 64, 4, 256, 2>;
  auto w = make<W>();
  test::randomize(*w, rng);
  auto c = same_model<C>(*w);
  IdTensor<B, L> ids;
  for (auto& id : ids) id = std::int32_t(rng.below(V));
  auto wi = make<InferOf<W, B>>();
  auto ci = make<InferOf<C, B, L>>();
  CHECK(same_bits(wi->forward(*w, ids), ci->forward(*c, ids)));
  auto wa = make<TrainingOf<W, B>>();
  auto ca = make<TrainingOf<C, B, L>>();
  CHECK(same_bits(wa->forward(*w, ids), ca->forward(*c, ids)));
  Tensor<B, 1, V> dy;
  fill(dy, rng);
  auto wg = make<W>();
  auto cg = make<C>();
  zero_grad(*wg), zero_grad(*cg);
  wa->backward(*w, *wg, dy);
  ca->backward(*c, *cg, dy);
  auto cg_as_w = make<W>();
  std::memcpy(static_cast<void*>(cg_as_w.get()), cg.get(), sizeof(W));
  CHECK(test::tensors_differing(*wg, *cg_as_w) == 0);
  // SPEC's configuration, one window
  using Spec = LanguageModel<33278, 32, 128, 4, 512, 2>;
  MESSAGE("language model, one window: composed plan " << sizeof(InferOf<Spec, 1, 32>) << " B, hand-written "
                                                        << sizeof(InferOf<written::LanguageModel<33278, 32, 128, 4, 512, 2>, 1>) << " B");
  CHECK(sizeof(InferOf<Spec, 1, 32>) <= sizeof(InferOf<written::LanguageModel<33278, 32, 128, 4, 512, 2>, 1>));
  CHECK(sizeof(InferOf<Spec, 1, 32>) <= 150016);
}

namespace {
// A model that is not SPEC's: ids -> embedding + positions -> 2 encoder blocks -> mean over the
// tokens that exist -> 2 classes.
template <size_t V, size_t L, size_t D, size_t H, size_t F>
using SeqClassifier = Sequential<Named<"embedding", Embedding<V, D>>, PositionalEncoding<L, D>, Named<"blocks", Repeat<EncoderBlock<D, H, F>, 2>>,
                                 MeanPool<D>, Named<"head", Linear<D, 2>>>;
}  // namespace

TEST_CASE("Sequential: a sequence classifier, forward against the reference, gradients against finite differences") {
  Rng rng(34);
  constexpr size_t B = 2, L = 5, V = 11, D = 8, H = 2, F = 12;
  using M = SeqClassifier<V, L, D, H, F>;
  auto p = make<M>();
  test::randomize(*p, rng);
  IdTensor<B, L> ids = {{3, 1, 4, 1, 5}, {9, 2, 6, 5, 3}};
  const auto keys = test::lengths_mask<B, L>({5, 3});
  const auto reference = [&](size_t b) {
    ref::Mat h(L, D);
    for (size_t i = 0; i < L; ++i)
      for (size_t j = 0; j < D; ++j) h(i, j) = p->get<"embedding">().weight(size_t(ids(b, i)), j);
    h = ref::positional(h);
    const auto row = test::mask_row(&keys, b);
    for (const auto& blk : p->get<"blocks">()) h = ref::encoder(h, blk, H, false, row);
    ref::Mat mean(1, D);
    double n = 0;
    for (size_t i = 0; i < L; ++i)
      if (row[i]) {
        n += 1;
        for (size_t j = 0; j < D; ++j) mean(0, j) += h(i, j);
      }
    for (size_t j = 0; j < D; ++j) mean(0, j) /= n;
    return ref::linear(mean, p->get<"head">());
  };
  auto infer = make<InferOf<M, B, L>>();
  auto acts = make<TrainingOf<M, B, L>>();
  const auto& y = infer->forward(*p, ids, &keys);
  CHECK(same_bits(y, acts->forward(*p, ids, &keys)));
  for (size_t b = 0; b < B; ++b) ref::check_close(y, b, reference(b));

  Tensor<B, 1, 2> c;
  fill(c, rng);
  auto g = make<M>();
  zero_grad(*g);
  acts->backward(*p, *g, c);
  const auto loss = [&] {
    double s = 0;
    for (size_t b = 0; b < B; ++b) {
      const auto yb = reference(b);
      for (size_t k = 0; k < 2; ++k) s += c(b, 0, k) * yb(0, k);
    }
    return s;
  };
  for_each_param(
      [&](const Path& path, Init, auto& value, const auto& grad) {
        double worst = 0, scale = 1e-2;
        for (size_t i = 0; i < value.size(); ++i) {
          const float old = value.data()[i], h = 1e-3f * std::max(1.0f, std::abs(old));
          value.data()[i] = old + h;
          const double up = loss();
          value.data()[i] = old - h;
          const double down = loss();
          value.data()[i] = old;
          const double fd = (up - down) / (2.0 * double(h));
          scale = std::max(scale, std::abs(fd));
          worst = std::max(worst, std::abs(fd - grad.data()[i]));
        }
        INFO(path.name().c_str() << ": largest error " << worst << " against a gradient scale " << scale);
        CHECK(worst <= 1e-3 * scale);
      },
      *p, *g);
  // the gradient of a padded token's embedding row is 0: token 5 appears only at position 3 of
  // row 1, which is padded (and at position 4 of row 0)
  CHECK(sizeof(InferOf<M, 1, L>) <= neighbours_bound<M, 1, L>(std::make_index_sequence<M::steps>{}));
}

TEST_CASE("Sequential: the sequence classifier learns (Adam, a few hundred steps), and its plan is smaller than its blocks'") {
  // class = whether token 1 occurs among the first 8 of a sequence of 16 (the rest padding)
  constexpr size_t B = 16, L = 16, V = 8, D = 32, H = 4, F = 64;
  using M = SeqClassifier<V, L, D, H, F>;
  auto p = make<M>();
  Rng rng(35);
  init_params(*p, rng);
  auto opt = make<Adam<M>>();
  auto g = make<M>();
  auto acts = make<TrainingOf<M, B, L>>();
  IdTensor<B, L> ids;
  IdTensor<B> label;
  KeyMask<B, L> keys;
  Tensor<B, 1, 2> dlogits;
  const auto batch = [&](Rng& r) {
    for (size_t b = 0; b < B; ++b) {
      const size_t n = 8;
      bool has = false;
      for (size_t i = 0; i < L; ++i) {
        ids(b, i) = i < n ? std::int32_t(2 + r.below(V - 2)) : 0;
        keys(b, i) = i < n;
      }
      if (r.below(2) == 1) ids(b, r.below(n)) = 1, has = true;
      label(b) = has ? 1 : 0;
    }
  };
  const int steps = test::slow() ? 60 : 300;
  double first = 0, last = 0;
  for (int s = 0; s < steps; ++s) {
    batch(rng);
    zero_grad(*g);
    const double loss = cross_entropy(acts->forward(*p, ids, &keys), label, dlogits, B);
    acts->backward(*p, *g, dlogits);
    opt->step(*p, *g, 1e-3f);
    if (s < 10) first += loss / 10;
    if (s >= steps - 10) last += loss / 10;
  }
  INFO("loss over the first 10 steps " << first << ", the last 10 " << last);
  CHECK(last < 0.5 * first);
  if (!test::slow()) {
    auto infer = make<InferOf<M, B, L>>();
    Rng fresh(36);
    double acc = 0;
    for (int i = 0; i < 8; ++i) {
      batch(fresh);
      acc += accuracy(infer->forward(*p, ids, &keys), label) / 8;
    }
    CHECK(acc >= 0.9);
  }
  // the plan of one sequence against each block keeping its own buffers
  constexpr size_t own = sizeof(InferOf<Embedding<V, D>, 1, L>) + sizeof(InferOf<PositionalEncoding<L, D>, 1, L>) +
                         2 * sizeof(InferOf<EncoderBlock<D, H, F>, 1, L>) + sizeof(InferOf<MeanPool<D>, 1, L>) + sizeof(InferOf<Linear<D, 2>, 1, 1>);
  MESSAGE("sequence classifier, one sequence of 16: plan " << sizeof(InferOf<M, 1, L>) << " B, blocks' own passes " << own << " B");
  CHECK(sizeof(InferOf<M, 1, L>) < own / 2);
}

// Training through ReplayActsOf (blocks and encoder blocks' attention replayed) and through
// ActsOf: the same outputs, input gradients and parameter gradients, bit for bit, over two
// steps; X: the model's input, made by make_input(rng).
template <class M, size_t B, size_t N, class X, class... Mask>
void check_replay(Rng& rng, const X& x, const Mask&... mask) {
  auto p = make<M>();
  init_params(*p, rng);
  auto kept = make<ActsOf<M, B, N>>();
  auto replayed = make<ReplayActsOf<M, B, N>>();
  static_assert(sizeof(ReplayActsOf<M, B, N>) < sizeof(ActsOf<M, B, N>));
  auto gk = make<M>(), gr = make<M>();
  zero_grad(*gk), zero_grad(*gr);
  for (int step = 0; step < 2; ++step) {
    const auto& y = kept->forward(*p, x, mask...);
    CHECK(same_bits(y, replayed->forward(*p, x, mask...)));
    auto dy = make<std::remove_cvref_t<decltype(y)>>();
    fill(*dy, rng);
    for (size_t i = 0; i < dy->size(); ++i)
      if (std::isinf(y.data()[i])) dy->data()[i] = 0;
    if constexpr (std::is_void_v<decltype(kept->backward(*p, *gk, *dy))>) {
      kept->backward(*p, *gk, *dy);
      replayed->backward(*p, *gr, *dy);
    } else {
      CHECK(same_bits(kept->backward(*p, *gk, *dy), replayed->backward(*p, *gr, *dy)));
    }
    CHECK(test::tensors_differing(*gk, *gr) == 0);
  }
}

TEST_CASE("Sequential: replayed blocks give the kept records' bits; SPEC's pointer model trains 2 sets in under 260,000 B") {
  Rng rng(41);
  {
    constexpr size_t B = 3, N = 50;
    Tensor<B, N, 2> x;
    fill(x, rng);
    const auto keys = test::lengths_mask<B, N>({50, 17, 1});
    check_replay<PointerModel<2, 16, 1, 64, 2>, B, N>(rng, x, &keys);
  }
  {
    constexpr size_t B = 2, L = 16, V = 50;  // three blocks: two replayed, the gradients between them in both buffers
    using LM = LanguageModel<V, L, 16, 2, 32, 3>;
    IdTensor<B, L> ids;
    for (auto& id : ids) id = std::int32_t(rng.below(V));
    check_replay<LM, B, L>(rng, ids, Mask<B, L>{.causal = true});
  }
  {
    // post-norm GELU (PyTorch's layer) and LayerNorm pre-norm blocks, two heads, a key mask; a
    // block alone replays its attention half too
    constexpr size_t B = 2, N = 12;
    Tensor<B, N, 3> x;
    fill(x, rng);
    const auto keys = test::lengths_mask<B, N>({12, 5});
    check_replay<Sequential<Linear<3, 16>, Repeat<EncoderBlock<16, 2, 32, PostNorm<act::GELU>>, 2>, Linear<16, 2>>, B, N>(rng, x, &keys);
    check_replay<Sequential<Linear<3, 16>, Repeat<EncoderBlock<16, 2, 32, PreNorm<act::GELU>>, 3>, Linear<16, 2>>, B, N>(rng, x, &keys);
    check_replay<Sequential<Linear<3, 16>, EncoderBlock<16, 4, 32>, Linear<16, 2>>, B, N>(rng, x, &keys);
    // blocks declared from combinators (tests/user_blocks.hpp), repeated: causal, and key-padded
    check_replay<Sequential<Linear<3, 16>, Repeat<user::ParallelBlock<16, 2, 32>, 3>, Linear<16, 2>>, B, N>(rng, x, Mask<B, N>{.causal = true});
    check_replay<Sequential<Linear<3, 16>, Repeat<user::LayerScaleBlock<16, 2, 32>, 2>, Named<"ffn", user::SwiGLU<16, 32>>, Linear<16, 2>>, B, N>(rng, x, &keys);
  }
  static_assert(sizeof(ReplayActsOf<PointerModel<2, 16, 1, 64, 2>, 2, 50>) <= 260000);
}

TEST_CASE("Sequential: Repeat of a block that is not in place alternates its buffers; the plan's rows; write_plan") {
  Rng rng(37);
  constexpr size_t B = 2, N = 3;
  using M = Sequential<Linear<4, 6>, Repeat<Linear<6, 6>, 3>, Repeat<Linear<6, 6>, 2>, ScaleNorm<6>>;
  auto p = make<M>();
  test::randomize(*p, rng);
  Tensor<B, N, 4> x;
  fill(x, rng);
  // the same chain step by step through each block's own Infer
  InferOf<Linear<4, 6>, B, N> l0;
  std::array<InferOf<Linear<6, 6>, B, N>, 5> l;
  InferOf<ScaleNorm<6>, B, N> sn;
  const Tensor<B, N, 6>* h = &l0.forward(p->get<0>(), x);
  for (size_t i = 0; i < 3; ++i) h = &l[i].forward(p->get<1>()[i], *h);
  for (size_t i = 0; i < 2; ++i) h = &l[3 + i].forward(p->get<2>()[i], *h);
  auto infer = make<InferOf<M, B, N>>();
  CHECK(same_bits(infer->forward(*p, x), sn.forward(p->get<3>(), *h)));
  auto acts = make<TrainingOf<M, B, N>>();
  CHECK(same_bits(acts->forward(*p, x), infer->forward(*p, x)));

  constexpr auto& plan = InferOf<M, B, N>::plan();
  constexpr size_t row = sizeof(Tensor<B, N, 6>);
  CHECK(plan[0].in_offset == PlanRow::external);
  CHECK(plan[0].out_offset == 0);
  CHECK(plan[1].scratch_bytes == row);  // the other buffer of a Repeat of 3
  CHECK(plan[3].in_place);
  CHECK(plan[3].out_offset == plan[3].in_offset);
  for (const auto& r : plan) {
    CHECK(r.scratch_offset + r.scratch_bytes <= sizeof(InferOf<M, B, N>));
    CHECK(r.out_offset + r.out_bytes <= sizeof(InferOf<M, B, N>));
  }
  char text[2048] = {};
  std::FILE* f = fmemopen(text, sizeof text - 1, "w");
  write_plan<InferOf<M, B, N>>(f);
  std::fclose(f);
  const std::string s = text;
  CHECK(s.find("caller's") != std::string::npos);
  CHECK(s.find("in place") != std::string::npos);
  CHECK(s.find("arena (sizeof InferOf): " + std::to_string(sizeof(InferOf<M, B, N>)) + " B") != std::string::npos);
}

TEST_CASE("Sequential: the key-padding mask follows the rows past a ClassToken; a padded row computes what its unpadded rows do") {
  using M = Sequential<Linear<3, 16>, ClassToken<16>, EncoderBlock<16, 2, 32, PostNorm<>>, FirstToken<16>, Linear<16, 2>>;
  auto p = make<M>();
  Rng rng(81);
  init_params(*p, rng);
  for (auto& v : p->get<1>().cls_token) v = rng.normal();
  Tensor<2, 6, 3> x;
  fill(x, rng);
  const auto keys = test::lengths_mask<2, 6>({6, 3});
  auto inf = make<InferOf<M, 2, 6>>();
  auto acts = make<TrainingOf<M, 2, 6>>();
  const auto& y = inf->forward(*p, x, &keys);
  CHECK(same_bits(y, acts->forward(*p, x, &keys)));
  // batch row 1 alone, its 3 real rows only: the same output (the class token sees rows 1…3 only)
  Tensor<1, 3, 3> short_x;
  for (size_t n = 0; n < 3; ++n)
    for (size_t d = 0; d < 3; ++d) short_x(0, n, d) = x(1, n, d);
  auto short_inf = make<InferOf<M, 1, 3>>();
  const auto& want = short_inf->forward(*p, short_x);
  for (size_t j = 0; j < 2; ++j) CHECK(y(1, 0, j) == doctest::Approx(want(0, 0, j)).epsilon(1e-5));
  // without the mask the padded rows count: another output
  auto unmasked = make<InferOf<M, 2, 6>>();
  const auto& other = unmasked->forward(*p, x);
  CHECK(std::abs(other(1, 0, 0) - want(0, 0, 0)) + std::abs(other(1, 0, 1) - want(0, 0, 1)) > 1e-3f);
}

// A model whose type declares causal = true (tests/causal_lm.hpp) runs with the causal mask
// whatever mask its passes are given: the same bits as its chain given Mask{.causal = true},
// and not those of the chain unmasked.
TEST_CASE("Sequential: a model that declares causal runs causal, forward-only and training") {
  using Chain = CausalLM::Sequential;
  constexpr size_t B = 2, L = 8;
  auto lm = make<CausalLM>();
  Rng rng(5);
  init_params(*lm, rng);
  const Chain& chain = *lm;  // the same parameters, as the chain that declares nothing
  IdTensor<B, L> ids;
  for (auto& id : ids) id = std::int32_t(rng.below(11));
  const KeyMask<B, L> keys = test::lengths_mask<B, L>({8, 5});
  auto a = make<InferOf<CausalLM, B, L>>(), b = make<InferOf<Chain, B, L>>();
  const auto causal = b->forward(chain, ids, Mask<B, L>{.causal = true});  // a copy: b runs again below
  CHECK(same_bits(a->forward(*lm, ids), causal));
  CHECK(same_bits(a->forward(*lm, ids, Mask<B, L>{}), causal));
  CHECK_FALSE(same_bits(b->forward(chain, ids), causal));
  CHECK(same_bits(a->forward(*lm, ids, &keys), b->forward(chain, ids, Mask<B, L>{.causal = true, .keys = &keys})));
  auto ta = make<ActsOf<CausalLM, B, L>>(), tb = make<ActsOf<Chain, B, L>>();
  CHECK(same_bits(ta->forward(*lm, ids), causal));
  CHECK(same_bits(ta->forward(*lm, ids, &keys), tb->forward(chain, ids, Mask<B, L>{.causal = true, .keys = &keys})));
}
