// Blocks of two inputs declared with WithMemory and CrossAttend (stformer/compose/memory.hpp):
// DecoderBlock in each form, TransformerDecoder and MAB held to the blocks written by hand
// (tests/written_decoder.hpp, tests/written_mab.hpp): the same names, the same bits forward
// (Infer and Acts), the same bits of dx, dm and every gradient, plans and records no larger;
// replayed (ReplayActsOf), the same bits in less memory;
// in integers (QCrossAttend, MemoryCalibration) within a stated error of the float block, the
// integer plans no larger than the hand-written ones.
#include <doctest/doctest.h>

#include <algorithm>
#include <memory>
#include <utility>

#include <stformer/compose/memory.hpp>
#include <stformer/stformer.hpp>

#include "util.hpp"
#include "written_decoder.hpp"
#include "written_set.hpp"

using namespace stformer;
using test::fill;
using test::make;
using test::same_bits;

namespace {
// The two-input blocks by hand and declared, side by side: the same names, forward bits (Infer,
// Acts), dx, dm and gradients, with and without key padding over the memory; plans and records
// no larger.
template <class Hand, class Declared, size_t B, size_t N, size_t M, size_t D>
void check_two_inputs(Rng& rng) {
  auto hand = make<Hand>();
  auto declared = make<Declared>();
  init_params(*hand, rng);
  test::randomize(*hand, rng);
  auto names = test::param_names(*hand), declared_names = test::param_names(*declared);
  std::sort(names.begin(), names.end()), std::sort(declared_names.begin(), declared_names.end());
  REQUIRE(names == declared_names);
  test::copy_by_name(*hand, *declared);
  Tensor<B, N, D> x, dy;
  Tensor<B, M, D> m;
  fill(x, rng), fill(dy, rng), fill(m, rng);
  const KeyMask<B, M> keys = test::lengths_mask<B, M>({M, 4});
  for (const KeyMask<B, M>* k : {static_cast<const KeyMask<B, M>*>(nullptr), &keys}) {
    auto hi = make<InferOf<Hand, B, N, M>>();
    auto di = make<InferOf<Declared, B, N, M>>();
    const Tensor<B, N, D> y = hi->forward(*hand, x, m, k);
    CHECK(same_bits(y, di->forward(*declared, x, m, k)));
    auto ha = make<ActsOf<Hand, B, N, M>>();
    auto da = make<ActsOf<Declared, B, N, M>>();
    CHECK(same_bits(y, ha->forward(*hand, x, m, k)));
    CHECK(same_bits(y, da->forward(*declared, x, m, k)));
    auto hg = make<Hand>();
    auto dg = make<Declared>();
    zero_grad(*hg), zero_grad(*dg);
    Tensor<B, N, D> hdx, ddx;
    Tensor<B, M, D> hdm, ddm;
    auto hws = make<WorkspaceOf<ActsOf<Hand, B, N, M>>>();
    auto dws = make<WorkspaceOf<ActsOf<Declared, B, N, M>>>();
    ha->backward(*hand, *hg, dy, {hdx, hdm}, *hws);
    da->backward(*declared, *dg, dy, {ddx, ddm}, *dws);
    CHECK(same_bits(hdx, ddx));
    CHECK(same_bits(hdm, ddm));
    CHECK(test::params_by_name(*hg) == test::params_by_name(*dg));
    // replayed (Memory::replay): one part's record at a time, each run again before its backward
    auto dr = make<ReplayActsOf<Declared, B, N, M>>();
    CHECK(same_bits(y, dr->forward(*declared, x, m, k)));
    auto rg = make<Declared>();
    zero_grad(*rg);
    Tensor<B, N, D> rdx;
    Tensor<B, M, D> rdm;
    auto rws = make<WorkspaceOf<ReplayActsOf<Declared, B, N, M>>>();
    dr->backward(*declared, *rg, dy, {rdx, rdm}, *rws);
    CHECK(same_bits(rdx, ddx));
    CHECK(same_bits(rdm, ddm));
    CHECK(test::params_by_name(*rg) == test::params_by_name(*dg));
  }
  constexpr size_t kept = sizeof(ActsOf<Declared, B, N, M>) + sizeof(WorkspaceOf<ActsOf<Declared, B, N, M>>);
  constexpr size_t replayed = sizeof(ReplayActsOf<Declared, B, N, M>) + sizeof(WorkspaceOf<ReplayActsOf<Declared, B, N, M>>);
  MESSAGE("training memory (record and workspace): kept " << kept << " B, replayed " << replayed << " B");
  CHECK(replayed < kept);
  CHECK(sizeof(InferOf<Declared, B, N, M>) <= sizeof(InferOf<Hand, B, N, M>));
  CHECK(sizeof(ActsOf<Declared, B, N, M>) <= sizeof(ActsOf<Hand, B, N, M>));
  MESSAGE("plans: by hand " << sizeof(InferOf<Hand, B, N, M>) << " B, declared " << sizeof(InferOf<Declared, B, N, M>) << " B; records: by hand "
                            << sizeof(ActsOf<Hand, B, N, M>) << " B, declared " << sizeof(ActsOf<Declared, B, N, M>) << " B");
}
}  // namespace

TEST_CASE_TEMPLATE("WithMemory: a decoder block declared has DecoderBlock's names, plan, record and bits, forward and backward", Fm, SpecForm, PostNorm<>,
                   PreNorm<act::GELU>) {
  constexpr size_t D = 16, H = 4, F = 32;
  Rng rng(11);
  check_two_inputs<written::DecoderBlock<D, H, F, Fm>, DecoderBlock<D, H, F, Fm>, 2, 7, 9, D>(rng);
}

TEST_CASE("WithMemory: TransformerDecoder (PyTorch's two post-norm GELU layers and a final norm; three SPEC layers, no norm) and MAB (ScaleNorm, Identity) as by hand") {
  constexpr size_t D = 16, H = 2, F = 32;
  Rng rng(12);
  using Layer = DecoderBlock<D, H, F, PostNorm<act::GELU>>;
  check_two_inputs<written::TransformerDecoder<written::DecoderBlock<D, H, F, PostNorm<act::GELU>>, 2, LayerNorm<D>>, TransformerDecoder<Layer, 2, LayerNorm<D>>, 2, 6,
                   9, D>(rng);
  check_two_inputs<written::TransformerDecoder<written::DecoderBlock<D, H, F>, 3>, TransformerDecoder<DecoderBlock<D, H, F>, 3>, 2, 6, 9, D>(rng);
  check_two_inputs<written::MAB<D, H>, MAB<D, H>, 2, 5, 11, D>(rng);
  check_two_inputs<written::MAB<D, H>, MAB<D, H>, 2, 20, 3, D>(rng);  // few keys: the attention folds
  check_two_inputs<written::MAB<D, H, Identity>, MAB<D, H, Identity>, 2, 5, 11, D>(rng);
}

#include <stformer/quantized/memory.hpp>

#include "quantized.hpp"

TEST_CASE_TEMPLATE("CrossAttend in integers: a decoder's cross-attention within 3% rms of the float part, pre-norm and post-norm, key-padded", Query, Named<"sn2", ScaleNorm<32>>,
                   Identity<32>) {
  constexpr size_t B = 2, N = 20, M = 12, D = 32, H = 4;
  using F = CrossAttend<Query, Identity<D>, Named<"cross_attn", MultiHeadAttention<D, D, D, H>>>;
  using Q = Int8Of<F>::type;
  Rng rng(37, 0);
  auto f = make<F>();
  init_params(*f, rng);
  test::randomize(*f, rng);
  Tensor<B, N, D> x;
  Tensor<B, M, D> m;
  fill(x, rng, 2.0f), fill(m, rng, 3.0f);
  const KeyMask<B, M> keys = test::lengths_mask<B, M>({M, 5});
  for (const KeyMask<B, M>* k : {static_cast<const KeyMask<B, M>*>(nullptr), &keys}) {
    auto acts = make<ActsOf<F, B, N, M>>();
    const Tensor<B, N, D> y0 = acts->forward(*f, x, m, Mask<B, N>{}, k);
    typename Q::Ranges r;
    r.observe(*f, *acts, x);
    const float sh = quant::int16_scale(std::max(quant::max_abs(x), quant::max_abs(y0))), sm = quant::int16_scale(quant::max_abs(m));
    TensorOf<std::int16_t, B, N, D> h;
    TensorOf<std::int16_t, B, M, D> mq;
    Tensor<B, N, D> xd = x;
    Tensor<B, M, D> md = m;
    round_through(xd, sh, h);
    round_through(md, sm, mq);
    const Tensor<B, N, D> want = acts->forward(*f, xd, md, Mask<B, N>{}, k);
    auto q = make<Q>();
    q->from_float(*f, r, sh, sm);
    auto w = make<typename Q::template Scratch<B, N, M>>();
    q->forward_in_place(h, mq, *w, Mask<B, N>{}, k);
    const double gap = rel_rms(want, h, sh);
    MESSAGE(std::string(Q::query_itself ? "post-norm" : "pre-norm") << std::string(k ? ", key-padded" : "") << ": int8 within " << 100 * gap << "% rms");
    CHECK(gap < 0.03);
  }
}

TEST_CASE_TEMPLATE("WithMemory in integers: a declared decoder block calibrated (MemoryCalibration) within 3% rms of the float block (post-norm 5%), key-padded", Fm, SpecForm,
                   PostNorm<act::GELU>, PreNorm<act::ReLU>) {
  constexpr size_t B = 2, N = 20, M = 12, D = 32, H = 4, Fw = 48;
  using F = DecoderBlock<D, H, Fw, Fm>;
  using Q = typename Int8Of<F>::type;
  Rng rng(36, 0);
  auto f = make<F>();
  init_params(*f, rng);
  test::randomize(*f, rng);
  if constexpr (Fm::torch_names)  // the norms' weights and biases away from ones and zeros, as test_quantized's hand-written block's
    for_each_param(
        [&](const Path& at, Init, auto& t) {
          const auto name = at.name();
          if (name.view().starts_with("norm") && name.view().ends_with("weight"))
            for (auto& v : t) v = 0.5f + rng.uniform();
          else if (name.view().starts_with("norm") && name.view().ends_with("bias"))
            for (auto& v : t) v = 0.3f * rng.normal();
        },
        *f);
  Tensor<B, N, D> x;
  Tensor<B, M, D> m;
  fill(x, rng, 2.0f), fill(m, rng, 3.0f);
  const KeyMask<B, M> keys = test::lengths_mask<B, M>({M, 5});
  auto cal = std::make_unique<MemoryCalibration<F, B, N, M>>(*f);
  cal->observe(x, m), cal->observe(x, m, &keys);
  auto q = cal->quantize();
  for (const KeyMask<B, M>* k : {static_cast<const KeyMask<B, M>*>(nullptr), &keys}) {
    TensorOf<std::int16_t, B, N, D> h;
    TensorOf<std::int16_t, B, M, D> mq;
    Tensor<B, N, D> xd = x;
    Tensor<B, M, D> md = m;
    round_through(xd, cal->x_scale(), h);
    round_through(md, cal->memory_scale(), mq);
    auto fi = make<InferOf<F, B, N, M>>();
    const Tensor<B, N, D> want = fi->forward(*f, xd, md, k);
    auto qi = make<InferOf<Q, B, N, M>>();
    const auto& got = qi->forward(*q, h, mq, k);
    const double gap = rel_rms(want, got, cal->out_scale());
    using Hand = typename written::DecoderBlock<D, H, Fw, Fm, written::precision::int8>::template Infer<B, N, M>;
    MESSAGE(std::string(Fm::torch_names ? Fm::norm_first ? "pre-norm LayerNorm" : "post-norm LayerNorm" : "SPEC's form")
            << std::string(k ? ", key-padded" : "") << ": int8 within " << 100 * gap << "% rms; plans float " << sizeof(InferOf<F, B, N, M>) << " B, int8 "
            << sizeof(InferOf<Q, B, N, M>) << " B (by hand " << sizeof(Hand) << " B)");
    CHECK(gap < (Fm::norm_first ? 0.03 : 0.05));
    CHECK(sizeof(InferOf<Q, B, N, M>) <= sizeof(Hand));
  }
}

TEST_CASE("WithMemory in integers: MAB declared, calibrated, within 1% rms of the float block on int16 streams, key-padded") {
  constexpr size_t B = 2, Nq = 8, Nk = 20, D = 32, H = 4;
  using F = MAB<D, H>;
  using Q = typename Int8Of<F>::type;
  Rng rng(38, 0);
  auto f = make<F>();
  init_params(*f, rng);
  test::randomize(*f, rng);
  Tensor<B, Nq, D> x;
  Tensor<B, Nk, D> y;
  fill(x, rng, 2.0f), fill(y, rng, 2.0f);
  const KeyMask<B, Nk> keys = test::lengths_mask<B, Nk>({Nk, 7});
  auto cal = std::make_unique<MemoryCalibration<F, B, Nq, Nk>>(*f);
  cal->observe(x, y), cal->observe(x, y, &keys);
  auto q = cal->quantize();
  for (const KeyMask<B, Nk>* k : {static_cast<const KeyMask<B, Nk>*>(nullptr), &keys}) {
    TensorOf<std::int16_t, B, Nq, D> h;
    TensorOf<std::int16_t, B, Nk, D> yq;
    Tensor<B, Nq, D> xd = x;
    Tensor<B, Nk, D> yd = y;
    round_through(xd, cal->x_scale(), h);
    round_through(yd, cal->memory_scale(), yq);
    auto fi = make<InferOf<F, B, Nq, Nk>>();
    const Tensor<B, Nq, D> want = fi->forward(*f, xd, yd, k);
    auto qi = make<InferOf<Q, B, Nq, Nk>>();
    const double gap = rel_rms(want, qi->forward(*q, h, yq, k), cal->out_scale());
    MESSAGE(std::string(k ? "key-padded: " : "") << "MAB int8 within " << 100 * gap << "% rms; plans float " << sizeof(InferOf<F, B, Nq, Nk>) << " B, int8 "
                                                 << sizeof(InferOf<Q, B, Nq, Nk>) << " B (by hand " << sizeof(written::MAB<D, H, ScaleNorm, written::precision::int8>::Infer<B, Nq, Nk>) << " B)");
    CHECK(gap < 0.01);
    CHECK(sizeof(InferOf<Q, B, Nq, Nk>) <= sizeof(written::MAB<D, H, ScaleNorm, written::precision::int8>::Infer<B, Nq, Nk>));
  }
}
