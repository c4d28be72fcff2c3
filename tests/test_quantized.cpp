// The blocks in integers (stformer/quantized/, and the composite blocks at precision::int8)
// against the float blocks they come from, on the float block's own inputs dequantized (so that
// only the block's quantization is measured), with the documented bounds (docs/quantized.md,
// "How it computes"): QLinear and the attention's projections 1.5% rms of the output,
// QScaleNorm one output step, QMultiHeadAttention and the encoder and decoder blocks 3% rms, MAB
// 1% (what it adds 1.5%), the pointer's log-probabilities 0.05.
// QClassToken and QFirstToken against their formulas, entry by entry.
// Then the quantized models: the pointer and set models and the integer language model close
// to the float ones, classifiers read from a class token (key-padded: padded rows change none
// of the integers), quantize → save → load gives the same integers, bad quantized checkpoints
// are refused; the language model with int8 embedding and head (weight-only) within 1%.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include <stformer/c_api.hpp>
#include <stformer/quantized/checkpoint.hpp>
#include <stformer/quantized/weight_int8.hpp>
#include <stformer/quantize.hpp>
#include <stformer/stformer.hpp>

#include "util.hpp"

using namespace stformer;

namespace {

// ‖want − s·got‖ / ‖want‖ (got in integers, s its scale; z its zero point)
template <class W, class G>
double rel_rms(const W& want, const G& got, double s, double z = 0) {
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double d = want.data()[i] - s * (double(got.data()[i]) - z);
    num += d * d, den += double(want.data()[i]) * want.data()[i];
  }
  return std::sqrt(num / den);
}

template <class T, class X>
void quantize_to(const X& x, float s, T& q) {
  quant::quantize(x.data(), x.size(), s, q.data());
}
template <class X, class Q>
void dequantize(const Q& q, float s, X& x) {
  for (size_t i = 0; i < x.size(); ++i) x.data()[i] = s * float(q.data()[i]);
}
// q ← round(x / s), then x ← s·q: x holds the values its integers stand for (a block's own error
// measured apart from its input's rounding).
template <class X, class Q>
void round_through(X& x, float s, Q& q) {
  quantize_to(x, s, q);
  dequantize(q, s, x);
}

}  // namespace

TEST_CASE("QLinear: the float layer within 1.5% rms, as int8 rows, after ReLU (zero point −128), into an int16 stream") {
  Rng rng(31, 0);
  Linear<24, 40> f;
  test::randomize(f, rng);
  Tensor<30, 24> x;
  test::fill(x, rng);
  const float sx = quant::scale_for(quant::max_abs(x));
  TensorOf<std::int8_t, 30, 24> xq;
  round_through(x, sx, xq);  // the layer's own error only
  Tensor<30, 40> y;
  f.apply<30>(x.data(), y.data());
  TensorOf<std::int32_t, 30, 40> acc;

  const float sy = quant::scale_for(quant::max_abs(y));
  auto q = QLinear<24, 40>::quantize(f, sx, sy);
  TensorOf<std::int8_t, 30, 40> yq;
  q.apply<30>(xq.data(), acc.data(), yq.data());
  CHECK(rel_rms(y, yq, sy) < 0.015);

  Tensor<30, 40> relu = y;
  for (auto& v : relu) v = std::max(v, 0.0f);
  const float sr = quant::scale_for(quant::max_abs(relu), 255);
  auto qr = QLinear<24, 40>::quantize(f, sx, sr);
  qr.apply<30, true>(xq.data(), acc.data(), yq.data());
  CHECK(rel_rms(relu, yq, sr, -128) < 0.015);
  size_t at_zero = 0;
  for (size_t i = 0; i < relu.size(); ++i) at_zero += relu.data()[i] == 0 && yq.data()[i] == -128;
  CHECK(at_zero > 0);

  // into an int16 stream h at s_h: h + the layer, and the layer's inputs at zero point −128
  Tensor<30, 40> h0;
  test::fill(h0, rng, quant::max_abs(y));
  const float sh = quant::scale_for(quant::max_abs(h0) + quant::max_abs(y), 32767);
  auto qh = QLinear<24, 40>::quantize(f, sx, sh);
  TensorOf<std::int16_t, 30, 40> h;
  round_through(h0, sh, h);
  qh.add_to<30>(xq.data(), acc.data(), h.data());
  Tensor<30, 40> want = h0 + y;
  CHECK(rel_rms(want, h, sh) < 0.01);
  // an increment larger than the stream's range lands whole when the sum fits: only the sum saturates
  auto qbig = QLinear<24, 40>::quantize(f, sx, quant::scale_for(quant::max_abs(y), 20000));
  TensorOf<std::int16_t, 30, 40> hb;
  TensorOf<std::int32_t, 30, 40> inc;
  hb.fill(0);
  qbig.add_to<30>(xq.data(), acc.data(), hb.data());
  for (size_t i = 0; i < hb.size(); ++i) inc.data()[i] = hb.data()[i];
  for (size_t i = 0; i < hb.size(); ++i) hb.data()[i] = std::int16_t(inc.data()[i] > 0 ? -20000 : 20000);
  qbig.add_to<30>(xq.data(), acc.data(), hb.data());
  size_t exact = 0;
  for (size_t i = 0; i < hb.size(); ++i) exact += hb.data()[i] == inc.data()[i] + (inc.data()[i] > 0 ? -20000 : 20000);
  CHECK(exact == hb.size());

  TensorOf<std::int8_t, 30, 24> xu;  // x ≈ s·(x_u + 128): the same layer on rows at zero point −128
  Tensor<30, 24> xpos = x;
  for (auto& v : xpos) v = std::abs(v);
  const float su = quant::scale_for(quant::max_abs(xpos), 255);
  for (size_t i = 0; i < xpos.size(); ++i) xu.data()[i] = std::int8_t(quant::to_int(xpos.data()[i], su, 0, 255) - 128);
  for (size_t i = 0; i < xpos.size(); ++i) xpos.data()[i] = su * float(xu.data()[i] + 128);
  f.apply<30>(xpos.data(), y.data());
  const float sz = quant::scale_for(quant::max_abs(y));
  auto qz = QLinear<24, 40>::quantize(f, su, sz, -128);
  qz.apply<30>(xu.data(), acc.data(), yq.data());
  CHECK(rel_rms(y, yq, sz) < 0.015);
}

TEST_CASE("QFineLinear: its two int8 weight tensors hold W within 1/50 of QLinear's rounding error") {
  Rng rng(39, 0);
  Linear<32, 6> f;
  test::randomize(f, rng);
  f.bias.fill(0);
  const auto coarse = QLinear<32, 6>::quantize(f, 1.0f, 1.0f);
  const auto fine = QFineLinear<32, 6>::quantize(f, 1.0f, 1.0f);
  double e_coarse = 0, e_fine = 0;
  for (size_t c = 0; c < 6; ++c)
    for (size_t k = 0; k < 32; ++k) {
      const double w = f.weight(c, k), wc = double(coarse.weight_scale(c)) * coarse.weight(c, k);
      const double wf = double(fine.coarse.weight_scale(c)) * fine.coarse.weight(c, k) + double(fine.fine.weight_scale(c)) * fine.fine.weight(c, k);
      e_coarse += (w - wc) * (w - wc), e_fine += (w - wf) * (w - wf);
    }
  CHECK(std::sqrt(e_fine) < std::sqrt(e_coarse) / 50);
  // and its output: the float layer on int16 rows within 0.1% rms, where QLinear's is ~0.5%
  Tensor<20, 32> x;
  test::fill(x, rng, 3.0f);
  const float sx = quant::int16_scale(quant::max_abs(x));
  TensorOf<std::int16_t, 20, 32> xq;
  round_through(x, sx, xq);
  Tensor<20, 6> y;
  f.apply<20>(x.data(), y.data());
  const float sy = quant::int16_scale(quant::max_abs(y));
  const auto q = QFineLinear<32, 6>::quantize(f, sx, sy);
  TensorOf<std::int16_t, 20, 6> yq;
  TensorOf<std::int32_t, 20, 6> acc;
  q.add_to<20, true>(xq.data(), acc.data(), yq.data());
  CHECK(rel_rms(y, yq, sy) < 0.001);
}

TEST_CASE("QScaleNorm: g·x/‖x‖ within one output step, from int16 and int8 rows; zero rows give zeros") {
  Rng rng(32, 0);
  ScaleNorm<24> f;
  f.g(0) = 3.7f;
  TensorOf<std::int16_t, 12, 24> x16;
  TensorOf<std::int8_t, 12, 24> x8;
  for (size_t r = 0; r < 12; ++r) {
    const float spread = r == 0 ? 0.0f : std::ldexp(1.0f, int(r));  // row 0 all zeros; norms from 2 to 4096·√24
    for (size_t i = 0; i < 24; ++i) {
      x16(r, i) = std::int16_t(std::clamp(std::nearbyint(spread * rng.normal()), -32767.0f, 32767.0f));
      x8(r, i) = std::int8_t(std::clamp(std::nearbyint(std::min(spread, 30.0f) * rng.normal()), -127.0f, 127.0f));
    }
  }
  const float sy = quant::scale_for(3.7f);
  auto q = QScaleNorm<24>::quantize(f, sy);
  auto check = [&](const auto& xq) {
    Tensor<12, 24> x, y;
    dequantize(xq, 1.0f, x);
    f.apply<12>(x.data(), y.data());
    TensorOf<std::int8_t, 12, 24> yq;
    q.apply<12>(xq.data(), yq.data());
    double worst = 0;
    for (size_t i = 0; i < y.size(); ++i) worst = std::max(worst, std::abs(double(y.data()[i]) - sy * yq.data()[i]));
    CHECK(worst <= 0.51 * sy);  // rounded to nearest, from a multiplier within 2^−29
    for (size_t i = 0; i < 24; ++i) CHECK(yq(0, i) == 0);
  };
  check(x16);
  check(x8);
}

namespace {

// A float block's input rows: ScaleNorm-like (norm √D·0.8), quantized to int8 and back.
template <size_t B, size_t N, size_t D>
float int8_rows(Rng& rng, Tensor<B, N, D>& x, TensorOf<std::int8_t, B, N, D>& xq) {
  test::fill(x, rng, 0.8f);
  const float s = quant::scale_for(quant::max_abs(x));
  round_through(x, s, xq);
  return s;
}

}  // namespace

template <class Act>
const char* act_name() {
  if constexpr (std::is_same_v<Act, act::ReLU>) return "ReLU";
  if constexpr (std::is_same_v<Act, act::GELU>) return "GELU";
  if constexpr (std::is_same_v<Act, act::GELUTanh>) return "GELU (tanh)";
  if constexpr (std::is_same_v<Act, act::SiLU>) return "SiLU";
}

// y_q within `steps` output steps of the float norm f of x_q's values (s_x·x_q), row by row.
template <class Norm, size_t R, size_t D, class X>
double norm_steps(const Norm& f, const X& xq, float sx, float sy) {
  Tensor<R, D> x, y;
  dequantize(xq, sx, x);
  f.template apply<R>(x.data(), y.data());
  const auto q = QLayerNorm<D, std::is_same_v<Norm, LayerNorm<D>>>::quantize(f, sx, sy);
  TensorOf<std::int8_t, R, D> yq;
  q.template apply<R>(xq.data(), yq.data());
  double worst = 0;
  for (size_t i = 0; i < y.size(); ++i) worst = std::max(worst, std::abs(double(y.data()[i]) - sy * yq.data()[i]) / sy);
  return worst;
}

TEST_CASE("QLayerNorm: LayerNorm and RMSNorm in integers within one output step, from int16 and int8 rows; a constant row gives the bias") {
  Rng rng(35, 0);
  constexpr size_t R = 12, D = 48;
  LayerNorm<D> ln;
  RMSNorm<D> rms;
  for (size_t i = 0; i < D; ++i) ln.weight(i) = rng.normal(), ln.bias(i) = 0.5f * rng.normal(), rms.weight(i) = rng.normal();
  TensorOf<std::int16_t, R, D> x16;
  TensorOf<std::int8_t, R, D> x8;
  for (size_t r = 0; r < R; ++r) {
    const float spread = std::ldexp(1.0f, int(r)), mean = r % 3 == 0 ? 0.0f : spread * rng.normal();  // spreads from 1 to 2048, shifted rows
    for (size_t i = 0; i < D; ++i) {
      x16(r, i) = std::int16_t(std::clamp(std::nearbyint(mean + spread * rng.normal()), -32767.0f, 32767.0f));
      x8(r, i) = std::int8_t(std::clamp(std::nearbyint(std::min(spread, 30.0f) * rng.normal()), -127.0f, 127.0f));
    }
  }
  for (size_t i = 0; i < D; ++i) x16(0, i) = 1234, x8(0, i) = -7;  // row 0 constant
  // outputs |y| up to about |w|·√D + |b|
  const float sy_ln = quant::scale_for(4.5f * quant::max_abs(ln.weight) + quant::max_abs(ln.bias));
  const float sy_rms = quant::scale_for(4.5f * quant::max_abs(rms.weight));
  for (float sx : {1e-3f, 0.02f}) {
    INFO("input scale " << sx);
    CHECK(norm_steps<LayerNorm<D>, R, D>(ln, x16, sx, sy_ln) <= 1.0);
    CHECK(norm_steps<LayerNorm<D>, R, D>(ln, x8, sx, sy_ln) <= 1.0);
    CHECK(norm_steps<RMSNorm<D>, R, D>(rms, x16, sx, sy_rms) <= 1.0);
    CHECK(norm_steps<RMSNorm<D>, R, D>(rms, x8, sx, sy_rms) <= 1.0);
  }
  // the constant row: y = bias, rounded
  const auto q = QLayerNorm<D, true>::quantize(ln, 0.02f, sy_ln);
  TensorOf<std::int16_t, 1, D> y;
  q.apply<1>(x16.data(), y.data());
  for (size_t i = 0; i < D; ++i) CHECK(y(0, i) == q.bias(i));
}

TEST_CASE("FeedForward in integers with GELU, GELU (tanh) and SiLU tables: the float layer within 3% rms") {
  constexpr size_t B = 2, N = 16, D = 24, Fw = 64;
  auto check = [&]<class Act>(Act) {
    using F = FeedForward<D, Fw, Act>;
    using Q = FeedForward<D, Fw, Act, precision::int8>;
    Rng rng(36, 0);
    auto f = std::make_unique<F>();
    test::randomize(*f, rng);
    Tensor<B, N, D> x;
    TensorOf<std::int8_t, B, N, D> xq;
    const float sx = int8_rows(rng, x, xq);
    auto acts = std::make_unique<ActsOf<F, B, N>>();
    const auto& want = acts->forward(*f, x);
    typename Q::Ranges r;
    r.observe(*f, *acts, x, want);
    const float so = quant::int16_scale(quant::max_abs(want));
    auto q = std::make_unique<Q>();
    q->from_float(*f, r, sx, so);
    TensorOf<std::int16_t, B, N, D> out;
    out.fill(0);
    typename Q::template Tile<8> w;
    q->template add_tiled<B * N, 8>(xq.data(), out.data(), w);
    const double gap = rel_rms(want, out, so);
    MESSAGE(std::string(act_name<Act>()) << ": int8 within " << 100 * gap << "% rms");
    CHECK(gap < 0.03);
    // the table is the activation on the 256 inputs, at the hidden scale and zero point
    const float s_a = q->act.act_scale(0), s_g = q->hidden_scale(0);
    const double z = double(q->act.values(128));  // Act(0) = 0
    for (int a = -128; a < 128; ++a) CHECK(std::abs(s_g * (q->act.values(size_t(a + 128)) - z) - Act::f(s_a * a)) <= 0.51 * s_g + 1e-6);
  };
  check(act::GELU{});
  check(act::GELUTanh{});
  check(act::SiLU{});
}

// The int16 fixed-point activation against Act at every int16 input: max|x| = 8 on a stream's
// scale (int16_scale), the output's scale from Act's range over it.
template <class Act>
void activation_steps(double curvature) {
  const float sx = quant::int16_scale(8.0f);
  double top = 0;
  for (int x = -32768; x < 32768; ++x) top = std::max(top, std::abs(double(Act::f(sx * float(x)))));
  const float sy = quant::int16_scale(float(top));
  const auto q = QActivation<Act, 1>::quantize(sx, sy);
  double worst = 0;
  for (int x = -32768; x < 32768; ++x) {
    const std::int16_t xq = std::int16_t(x);
    std::int16_t yq;
    q.template apply<1>(&xq, &yq);
    worst = std::max(worst, std::abs(double(Act::f(sx * float(x))) / sy - yq));
  }
  const double h = 256.0 * sx, bound = h * h / 8 * curvature / sy + 1;
  MESSAGE(std::string(act_name<Act>()) << " in int16 fixed point, |x| <= 8: within " << worst << " output steps (bound " << bound << ")");
  CHECK(worst <= bound);
  CHECK(worst >= 0.5);  // the interpolation is not exact (but for ReLU)
}

TEST_CASE("QActivation: GELU, GELU (tanh) and SiLU in int16 fixed point within the interpolation's bound at every input; ReLU exact") {
  activation_steps<act::GELU>(0.80);
  activation_steps<act::GELUTanh>(0.80);
  activation_steps<act::SiLU>(0.50);
  const float sx = quant::int16_scale(8.0f);
  const auto relu = QActivation<act::ReLU, 1>::quantize(sx, sx);
  for (int x = -32768; x < 32768; ++x) {
    const std::int16_t xq = std::int16_t(x);
    std::int16_t yq;
    relu.apply<1>(&xq, &yq);
    REQUIRE(yq == std::max(x, 0));
  }
}

TEST_CASE("QMultiHeadAttention: the float block within 3% rms, causal and key-padded; a query that sees no key adds bo alone") {
  constexpr size_t B = 2, N = 20, D = 24, H = 3;
  using F = MultiHeadAttention<D, D, D, H>;
  using Q = QMultiHeadAttention<D, D, D, H>;
  Rng rng(33, 0);
  auto f = std::make_unique<F>();
  test::randomize(*f, rng);
  Tensor<B, N, D> x;
  TensorOf<std::int8_t, B, N, D> xq;
  const float sx = int8_rows(rng, x, xq);
  const KeyMask<B, N> keys = key_mask_from_lengths<B, N>({13, 0});  // batch row 1 sees no key
  for (Mask<B, N> mask : {Mask<B, N>{}, Mask<B, N>{.causal = true}, Mask<B, N>{.keys = &keys}}) {
    auto acts = std::make_unique<ActsOf<F, B, N, N>>();
    const auto& want = acts->forward(*f, x, x, mask);
    typename Q::Ranges r;
    r.observe(*f, *acts);
    const float so = quant::scale_for(quant::max_abs(want), 32767);
    auto q = std::make_unique<Q>(Q::quantize(*f, r, sx, sx, so));
    auto w = std::make_unique<typename Q::template Work<B, N, N, 16>>();
    TensorOf<std::int8_t, B, N, D> a = xq;
    TensorOf<std::int16_t, B, N, D> out;
    out.fill(0);
    q->prepare<B, N, N, 16>(xq.data(), *w);
    q->forward_add<B, N, N, 16>(a.data(), out.data(), *w, mask);
    INFO("causal ", mask.causal, " keys ", mask.keys != nullptr);
    CHECK(rel_rms(want, out, so) < 0.03);
    if (mask.keys)
      for (size_t i = 0; i < N; ++i)
        for (size_t c = 0; c < D; ++c)  // bo rounded at s_heads·s_w[c], then to the output's step
          CHECK(std::abs(so * out(1, i, c) - f->wo.bias(c)) <= 0.51 * (so + q->heads_scale(0) * q->wo.weight_scale(c)));
  }
}

TEST_CASE_TEMPLATE("EncoderBlock in integers: the float block within 3% rms on an int16 residual stream, in SPEC's form and PyTorch's", Fm,
                   SpecForm, PostNorm<act::GELU>, PreNorm<act::ReLU>, PostNorm<act::SiLU>) {
  constexpr size_t B = 2, N = 30, D = 32, H = 4, Fw = 48;
  using F = EncoderBlock<D, H, Fw, Fm>;
  using Q = EncoderBlock<D, H, Fw, Fm, precision::int8>;
  Rng rng(34, 0);
  auto f = std::make_unique<F>();
  test::randomize(*f, rng);
  if constexpr (Fm::torch_names)  // the norms' weights and biases away from ones and zeros
    for (auto* n : {&f->sn1, &f->sn2})
      for (size_t i = 0; i < D; ++i) n->weight(i) = 0.5f + rng.uniform(), n->bias(i) = 0.3f * rng.normal();
  Tensor<B, N, D> x;
  test::fill(x, rng, 2.0f);
  auto acts = std::make_unique<ActsOf<F, B, N>>();
  const auto& want0 = acts->forward(*f, x);
  typename Q::Ranges r;
  r.observe(*f, *acts, x, want0);
  const float sh = quant::scale_for(std::max(r.residual, quant::max_abs(x)), 32767);
  TensorOf<std::int16_t, B, N, D> h;
  round_through(x, sh, h);
  const Tensor<B, N, D> want = acts->forward(*f, x);
  CHECK(rel_rms(want, want0, 1.0) < 1e-3);  // the int16 stream's own rounding is small
  auto q = std::make_unique<Q>();
  q->from_float(*f, r, sh, sh);
  auto w = std::make_unique<typename Q::template Work<B, N>>();
  q->forward_in_place(h, *w);
  const double gap = rel_rms(want, h, sh);
  MESSAGE(std::string(Fm::torch_names ? Fm::norm_first ? "pre-norm LayerNorm, " : "post-norm LayerNorm, " : "SPEC's form, ") << std::string(act_name<typename Fm::Act>())
                                                                                                   << ": int8 within " << 100 * gap << "% rms");
  CHECK(gap < 0.03);
}

TEST_CASE_TEMPLATE("DecoderBlock in integers: the float block within 3% rms (post-norm 5%) on an int16 residual stream, the memory an int16 stream, key-padded, in SPEC's form and PyTorch's", Fm,
                   SpecForm, PostNorm<act::GELU>, PreNorm<act::ReLU>) {
  constexpr size_t B = 2, N = 20, M = 12, D = 32, H = 4, Fw = 48;
  using F = DecoderBlock<D, H, Fw, Fm>;
  using Q = DecoderBlock<D, H, Fw, Fm, precision::int8>;
  Rng rng(36, 0);
  auto f = std::make_unique<F>();
  test::randomize(*f, rng);
  if constexpr (Fm::torch_names)  // the norms' weights and biases away from ones and zeros
    for (auto* n : {&f->sn1, &f->sn2, &f->sn3})
      for (size_t i = 0; i < D; ++i) n->weight(i) = 0.5f + rng.uniform(), n->bias(i) = 0.3f * rng.normal();
  Tensor<B, N, D> x;
  Tensor<B, M, D> m;
  test::fill(x, rng, 2.0f);
  test::fill(m, rng, 3.0f);
  const KeyMask<B, M> keys = key_mask_from_lengths<B, M>({M, 5});
  for (const KeyMask<B, M>* mask : {static_cast<const KeyMask<B, M>*>(nullptr), &keys}) {
    auto acts = std::make_unique<ActsOf<F, B, N, M>>();
    const Tensor<B, N, D> y0 = acts->forward(*f, x, m, mask);
    typename Q::Ranges r;
    r.observe(*f, *acts, x, y0);
    const float sh = quant::int16_scale(r.residual), sm = quant::int16_scale(quant::max_abs(m));
    TensorOf<std::int16_t, B, N, D> h;
    TensorOf<std::int16_t, B, M, D> mq;
    Tensor<B, N, D> xd = x;
    Tensor<B, M, D> md = m;
    round_through(xd, sh, h);
    round_through(md, sm, mq);
    const Tensor<B, N, D> want = acts->forward(*f, xd, md, mask);  // on the streams' own values
    auto q = std::make_unique<Q>();
    q->from_float(*f, r, sh, sm);
    auto w = std::make_unique<typename Q::template Work<B, N, M>>();
    q->forward_in_place(h, mq, *w, mask);
    INFO("key-padded ", mask != nullptr);
    const double gap = rel_rms(want, h, sh);
    MESSAGE(std::string(Fm::torch_names ? Fm::norm_first ? "pre-norm LayerNorm" : "post-norm LayerNorm" : "SPEC's form")
            << std::string(mask ? ", key-padded" : "") << ": int8 within " << 100 * gap << "% rms");
    // post-norm: each of the three branches reads the stream requantized to int8, and each norm
    // rescales the error it passes on
    CHECK(gap < (Fm::norm_first ? 0.03 : 0.05));
    // the same through Infer, and with other tiles: the same integers
    auto infer = std::make_unique<typename Q::template Infer<B, N, M>>();
    TensorOf<std::int16_t, B, N, D> h2;
    quantize_to(x, sh, h2);
    CHECK(infer->forward(*q, h2, mq, mask) == h);
    auto w1 = std::make_unique<typename Q::template Work<B, N, M, 1>>();
    q->forward_in_place(h2, mq, *w1, mask);
    CHECK(h2 == h);
  }
}

TEST_CASE("MAB in integers: the float block within 1% rms on int16 streams, what it adds within 1.5%, key-padded, and as SAB (keys from its own stream)") {
  constexpr size_t B = 2, Nq = 12, Nk = 30, D = 32, H = 4;
  using F = MAB<D, H>;
  using Q = MAB<D, H, ScaleNorm, precision::int8>;
  Rng rng(37, 0);
  auto f = std::make_unique<F>();
  test::randomize(*f, rng);
  Tensor<B, Nq, D> x;
  Tensor<B, Nk, D> y;
  test::fill(x, rng, 2.0f);
  test::fill(y, rng, 3.0f);
  const KeyMask<B, Nk> keys = key_mask_from_lengths<B, Nk>({Nk, 17});
  for (const KeyMask<B, Nk>* mask : {static_cast<const KeyMask<B, Nk>*>(nullptr), &keys}) {
    auto acts = std::make_unique<ActsOf<F, B, Nq, Nk>>();
    acts->forward(*f, x, y, mask);
    typename Q::Ranges r;
    r.observe(*f, *acts, x);
    const float sh = quant::scale_for(r.residual, 32767), sy = quant::scale_for(quant::max_abs(y), 32767);
    TensorOf<std::int16_t, B, Nq, D> h;
    TensorOf<std::int16_t, B, Nk, D> yq;
    Tensor<B, Nq, D> xd = x;
    Tensor<B, Nk, D> yd = y;
    round_through(xd, sh, h);
    round_through(yd, sy, yq);
    const Tensor<B, Nq, D> want = acts->forward(*f, xd, yd, mask);  // on the streams' own values
    auto q = std::make_unique<Q>();
    q->from_float(*f, r, sh);
    auto w = std::make_unique<typename Q::template Work<B, Nq, Nk>>();
    const TensorOf<std::int16_t, B, Nq, D> h0 = h;
    q->forward_in_place(h, yq, *w, mask);
    INFO("key-padded ", mask != nullptr);
    CHECK(rel_rms(want, h, sh) < 0.01);
    // what the block adds to the stream, alone
    Tensor<B, Nq, D> added = want - xd;
    TensorOf<std::int32_t, B, Nq, D> got;
    for (size_t i = 0; i < got.size(); ++i) got.data()[i] = h.data()[i] - h0.data()[i];
    CHECK(rel_rms(added, got, sh) < 0.015);
  }
  SUBCASE("SAB") {
    auto acts = std::make_unique<ActsOf<F, B, Nk, Nk>>();
    acts->forward(*f, y, y);
    typename Q::Ranges r;
    r.observe(*f, *acts, y);
    const float sh = quant::scale_for(r.residual, 32767);
    TensorOf<std::int16_t, B, Nk, D> h;
    Tensor<B, Nk, D> yd = y;
    round_through(yd, sh, h);
    const Tensor<B, Nk, D> want = acts->forward(*f, yd, yd);
    auto q = std::make_unique<Q>();
    q->from_float(*f, r, sh);
    auto w = std::make_unique<typename Q::template Work<B, Nk, Nk>>();
    q->forward_in_place(h, h, *w);
    CHECK(rel_rms(want, h, sh) < 0.01);
  }
}

TEST_CASE("QPointerAttention: log-probabilities within 0.05 of the float block's, masked keys at −∞") {
  constexpr size_t B = 2, Nk = 40, D = 16;
  using F = PointerAttention<D, D, D>;
  using Q = QPointerAttention<D, D, D>;
  Rng rng(35, 0);
  F f;
  test::randomize(f, rng);
  Tensor<B, 1, D> xq;
  Tensor<B, Nk, D> xk;
  TensorOf<std::int8_t, B, 1, D> qq;
  TensorOf<std::int8_t, B, Nk, D> kq;
  const float sq = int8_rows(rng, xq, qq), sk = int8_rows(rng, xk, kq);
  const KeyMask<B, Nk> keys = key_mask_from_lengths<B, Nk>({40, 11});
  auto acts = std::make_unique<ActsOf<F, B, 1, Nk>>();
  const auto& want = acts->forward(f, xq, xk, &keys);
  typename Q::Ranges r;
  r.observe(f, *acts);
  auto q = Q::quantize(f, r, sq, sk);
  auto infer = std::make_unique<typename Q::template Infer<B, 1, Nk>>();
  const auto& logits = infer->forward(q, qq.data(), kq.data(), &keys);
  double worst = 0;
  for (size_t b = 0; b < B; ++b) {
    Tensor<Nk> lp;
    for (size_t j = 0; j < Nk; ++j) lp(j) = logits(b, 0, j) == INT32_MIN ? kernels::neg_inf : float(logits(b, 0, j) * q.logit_scale());
    kernels::log_softmax_row<Nk>(lp.data());
    for (size_t j = 0; j < Nk; ++j) {
      if (!keys(b, j)) {
        CHECK(std::isinf(lp(j)));
        continue;
      }
      worst = std::max(worst, double(std::abs(lp(j) - want(b, 0, j))));
    }
  }
  CHECK(worst < 0.05);
}

namespace {

constexpr size_t Sets = 4, Points = 50;
using FloatPointer = PointerModel<2, 16, 1, 64, 2>;
using QPointer = Quantized<FloatPointer>;

// SPEC's pointer model as initialised (seed 36), calibrated on 4 sets and quantized.
struct PointerFixture {
  std::unique_ptr<FloatPointer> f = std::make_unique<FloatPointer>();
  std::unique_ptr<QPointer> q;
  Tensor<Sets, Points, 2> x;

  PointerFixture() {
    Rng rng(36, 0);
    init_params(*f, rng);
    test::fill(x, rng, 1.5f);
    Calibration<FloatPointer, Sets, Points> calibration(*f);
    calibration.observe(x);
    q = calibration.quantize();
  }
};

// The model's tensors into a file, with one changed by edit(name, dtype, bytes) (or dropped
// when it returns false).
template <class Edit>
std::filesystem::path write_edited(const QPointer& q, const std::string& file, Edit edit) {
  safetensors::Writer w;
  for_each_param(
      [&](const Path& path, Init, const auto& t) {
        std::string name(path.name().view());
        auto dtype = detail::dtype_of<std::remove_cvref_t<decltype(t)>>();
        const auto* p = reinterpret_cast<const std::byte*>(t.data());
        std::vector<std::byte> bytes(p, p + t.size() * sizeof(*t.data()));
        std::vector<size_t> shape(t.shape().begin(), t.shape().end());
        if (edit(name, dtype, bytes)) w.add(name, dtype, shape, bytes);
      },
      q);
  const auto path = std::filesystem::temp_directory_path() / file;
  w.write(path);
  return path;
}

std::string load_error(const std::filesystem::path& path) {
  auto q = std::make_unique<QPointer>();
  try {
    load_quantized(path, *q);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("Quantized pointer model: quantize → save → load gives the same outputs") {
  PointerFixture m;
  auto qi = std::make_unique<InferOf<QPointer, Sets, Points>>();
  const Tensor<Sets, 1, Points> logp = qi->forward(*m.q, m.x);
  const auto path = std::filesystem::temp_directory_path() / "stformer_test_quantized.safetensors";
  save_params(path, *m.q);
  auto loaded = std::make_unique<QPointer>();
  load_quantized(path, *loaded);
  auto li = std::make_unique<InferOf<QPointer, Sets, Points>>();
  const auto& again = li->forward(*loaded, m.x);
  CHECK(std::equal(again.begin(), again.end(), logp.begin()));
  std::filesystem::remove(path);
}

namespace {
// A set model as initialised (seed 38), 3 sets of 40 points, once whole and once key-padded,
// calibrated on both.
struct SetFixture {
  static constexpr size_t B = 3, N = 40;
  using FloatSet = SetTransformer<2, 32, 4, 8, 2>;
  using QSet = Quantized<FloatSet>;
  std::unique_ptr<FloatSet> f = std::make_unique<FloatSet>();
  Tensor<B, N, 2> x;
  KeyMask<B, N> keys = key_mask_from_lengths<B, N>({N, 25, 9});
  std::unique_ptr<ActsOf<FloatSet, B, N>> acts = std::make_unique<ActsOf<FloatSet, B, N>>();
  std::unique_ptr<QSet> q;
  std::unique_ptr<Calibration<FloatSet, B, N>> calibration;
  std::array<const KeyMask<B, N>*, 2> masks{nullptr, &keys};

  SetFixture() {
    Rng rng(38, 0);
    init_params(*f, rng);
    test::fill(x, rng, 1.5f);
    calibration = std::make_unique<Calibration<FloatSet, B, N>>(*f);
    for (const KeyMask<B, N>* mask : masks) calibration->observe(x, mask);
    q = calibration->quantize();
  }
};
}  // namespace

TEST_CASE("Quantized set model: within 2% of the float model's output, key-padded too; quantize → save → load gives the same outputs") {
  SetFixture m;
  constexpr size_t B = SetFixture::B, N = SetFixture::N;
  using QSet = SetFixture::QSet;
  const auto& [f, x, keys, acts, q] = std::tie(m.f, m.x, m.keys, m.acts, m.q);
  auto qi = std::make_unique<InferOf<QSet, B, N>>();
  for (const KeyMask<B, N>* mask : m.masks) {
    const Tensor<B, 1, 2> want = acts->forward(*f, x, mask);
    const auto& got = qi->forward(*q, x, mask);
    INFO("key-padded ", mask != nullptr);
    CHECK(rel_rms(want, got, 1.0) < 0.02);
  }
  const Tensor<B, 1, 2> y = qi->forward(*q, x, &keys);
  const auto path = std::filesystem::temp_directory_path() / "stformer_test_quantized_set.safetensors";
  save_params(path, *q);
  auto loaded = std::make_unique<QSet>();
  load_quantized(path, *loaded);
  auto li = std::make_unique<InferOf<QSet, B, N>>();
  const auto& again = li->forward(*loaded, x, &keys);
  CHECK(std::equal(again.begin(), again.end(), y.begin()));
  std::filesystem::remove(path);
}

TEST_CASE("load_quantized refuses a missing scale, a wrong dtype, a NaN, and integers and scales out of their bounds, naming the tensor and entry") {
  PointerFixture m;
  const auto set_float = [](std::vector<std::byte>& b, float v) { std::memcpy(b.data(), &v, sizeof v); };
  // entry i of an I32 (or I8) tensor set to v
  const auto set = [](std::vector<std::byte>& b, size_t i, auto v) { std::memcpy(b.data() + i * sizeof v, &v, sizeof v); };
  const auto edit_one = [](const char* tensor, auto change) {
    return [=](const std::string& n, safetensors::Dtype&, std::vector<std::byte>& b) {
      if (n == tensor) change(b);
      return true;
    };
  };
  struct Case {
    const char* file;
    std::string want;
    std::function<bool(const std::string&, safetensors::Dtype&, std::vector<std::byte>&)> edit;
  };
  const Case cases[] = {
      {"q_missing.safetensors", "tensor 'sn_v.out_scale' is missing",
       [](const std::string& n, auto&, auto&) { return n != "sn_v.out_scale"; }},
      {"q_dtype.safetensors", "tensor 'proj.coarse.weight' has dtype U8, the model expects I8",
       [](const std::string& n, auto& d, auto&) {
         if (n == "proj.coarse.weight") d = safetensors::Dtype::U8;
         return true;
       }},
      {"q_zero.safetensors", "tensor 'input.scale' entry 0 is 0, out of bounds: a scale is in [2^-64, 2^64]",
       edit_one("input.scale", [&](auto& b) { set_float(b, 0.0f); })},
      {"q_negative.safetensors", "tensor 'blocks.1.attn.v_scale' entry 0 is -0.5, out of bounds: a scale",
       edit_one("blocks.1.attn.v_scale", [&](auto& b) { set_float(b, -0.5f); })},
      {"q_huge_scale.safetensors", "tensor 'blocks.0.attn.wq.weight_scale' entry 3 is 1.000000015e+30, out of bounds: a scale",
       edit_one("blocks.0.attn.wq.weight_scale", [&](auto& b) { set(b, 3, 1e30f); })},
      {"q_denormal_scale.safetensors", "tensor 'blocks.0.attn.wq.weight_scale' entry 0 is 9.99966",
       edit_one("blocks.0.attn.wq.weight_scale", [&](auto& b) { set(b, 0, 1e-41f); })},
      {"q_bias.safetensors", "tensor 'blocks.0.attn.wq.bias' entry 2 is 2147483647, out of bounds: a bias b_c is within |b_c| + x·Σ_k|W_ck| < 2^31",
       edit_one("blocks.0.attn.wq.bias", [&](auto& b) { set(b, 2, std::int32_t(INT32_MAX)); })},
      {"q_bias_min.safetensors", "tensor 'proj.fine.bias' entry 0 is -2147483648, out of bounds: a bias",
       edit_one("proj.fine.bias", [&](auto& b) { set(b, 0, std::int32_t(INT32_MIN)); })},
      {"q_weight.safetensors", "tensor 'blocks.1.attn.wo.weight' entry 5 is -128, out of bounds: an int8 weight is in [-127, 127]",
       edit_one("blocks.1.attn.wo.weight", [&](auto& b) { set(b, 5, std::int8_t(-128)); })},
      {"q_multiplier.safetensors", "tensor 'blocks.0.attn.wk.requant.multiplier' entry 1 is 5, out of bounds: a multiplier is 0 or in [2^30, 2^31)",
       edit_one("blocks.0.attn.wk.requant.multiplier", [&](auto& b) { set(b, 1, std::int32_t(5)); })},
      {"q_negative_multiplier.safetensors", "tensor 'blocks.0.attn.exponent.multiplier' entry 0 is -1073741824, out of bounds: a multiplier",
       edit_one("blocks.0.attn.exponent.multiplier", [&](auto& b) { set(b, 0, std::int32_t(-(1 << 30))); })},
      {"q_shift.safetensors", "tensor 'blocks.0.attn.wv.requant.shift' entry 0 is 40, out of bounds: a shift is in [-31, 30]",
       edit_one("blocks.0.attn.wv.requant.shift", [&](auto& b) { set(b, 0, std::int32_t(40)); })},
      {"q_shift_right.safetensors", "tensor 'blocks.0.attn.values.shift' entry 0 is -40, out of bounds: a shift is in [-31, 30]",
       edit_one("blocks.0.attn.values.shift", [&](auto& b) { set(b, 0, std::int32_t(-40)); })},
      // inside the bounds, but not the multipliers the stored scales give (requant_mismatch)
      {"q_multiplier_0.safetensors", "tensor 'blocks.0.attn.wk.requant.multiplier' entry 1 is 0, not ",
       edit_one("blocks.0.attn.wk.requant.multiplier", [&](auto& b) { set(b, 1, std::int32_t(0)); })},
      {"q_multiplier_max.safetensors", "tensor 'blocks.1.ffn.fc2.requant.multiplier' entry 0 is 2147483647, not ",
       edit_one("blocks.1.ffn.fc2.requant.multiplier", [&](auto& b) { set(b, 0, std::int32_t(INT32_MAX)); })},
      {"q_shift_31.safetensors", "tensor 'blocks.0.sn1.requant.shift' entry 0 is -31, not ",
       edit_one("blocks.0.sn1.requant.shift", [&](auto& b) { set(b, 0, std::int32_t(-31)); })},
      {"q_exponent_step.safetensors", "tensor 'blocks.1.attn.exponent.multiplier' entry 0 is ",
       edit_one("blocks.1.attn.exponent.multiplier", [&](auto& b) {
         std::int32_t v;
         std::memcpy(&v, b.data(), sizeof v);
         set(b, 0, std::int32_t(v == INT32_MAX ? v - 1 : v + 1));
       })},
      {"q_old_file.safetensors", "tensor 'proj.coarse.in_scale' is missing",
       [](const std::string& n, auto&, auto&) { return !n.ends_with(".in_scale") && !n.ends_with(".out_scale"); }},
      {"q_nan.safetensors", "tensor 'blocks.0.attn.wq.weight_scale' holds a value that is not finite",
       [&](const std::string& n, auto&, auto& b) {
         if (n == "blocks.0.attn.wq.weight_scale") set_float(b, std::nanf(""));
         return true;
       }},
  };
  for (const auto& c : cases) {
    const auto path = write_edited(*m.q, c.file, c.edit);
    const std::string error = load_error(path);
    INFO(c.file, ": ", error);
    CHECK(error.find(c.want) != std::string::npos);
    CHECK(error.find(path.string()) != std::string::npos);
    std::filesystem::remove(path);
  }
  const auto good = write_edited(*m.q, "q_good.safetensors", [](auto&, auto&, auto&) { return true; });
  CHECK(load_error(good).empty());
  std::filesystem::remove(good);
}

TEST_CASE("Quantized language model: integers from the ids to the logits, within 0.1 of the float model's log-probabilities; saved and loaded, the same logits") {
  constexpr size_t V = 300, L = 12, D = 32, H = 4, F = 64, Blocks = 2, B = 4;
  using FloatLm = LanguageModel<V, L, D, H, F, Blocks>;
  using QLm = Quantized<FloatLm>;
  Rng rng(40, 0);
  auto f = std::make_unique<FloatLm>();
  init_params(*f, rng);
  IdTensor<B, L> ids;
  for (auto& id : ids) id = std::int32_t(rng.below(V));
  auto acts = std::make_unique<ActsOf<FloatLm, B>>();
  const Tensor<B, 1, V> want = acts->forward(*f, ids);
  Calibration<FloatLm, B, L> calibration(*f);
  calibration.observe(ids);
  const auto q = calibration.quantize();
  auto qi = std::make_unique<InferOf<QLm, B, L>>();
  const Tensor<B, 1, V> got = qi->forward(*q, ids);
  Tensor<B, 1, V> lw = want, lg = got;
  double worst = 0;
  for (size_t b = 0; b < B; ++b) {
    kernels::log_softmax_row<V>(lw.data() + b * V), kernels::log_softmax_row<V>(lg.data() + b * V);
    for (size_t v = 0; v < V; ++v) worst = std::max(worst, double(std::abs(lw(b, 0, v) - lg(b, 0, v))));
  }
  MESSAGE("language model: largest log-probability difference from float " << worst << ", logits' relative rms " << rel_rms(want, got, 1.0)
                                                                         << "; plans, a window: float " << sizeof(InferOf<FloatLm, 1, L>)
                                                                         << " B, int8 " << sizeof(InferOf<QLm, 1, L>) << " B");
  CHECK(worst < 0.1);
  CHECK(rel_rms(want, got, 1.0) < 0.03);
  // from the ids, integers only: every step but the last (Dequantize)
  auto hi = std::make_unique<InferOf<QLm, B, L>>();
  const TensorOf<std::int16_t, B, 1, V> logits = hi->template forward_steps<0, QLm::steps - 1>(*q, ids);
  CHECK(rel_rms(want, logits, q->template get<QLm::steps - 1>().scale(0)) < 0.03);

  const auto path = std::filesystem::temp_directory_path() / "stformer_test_quantized_lm.safetensors";
  save_params(path, *q);
  auto loaded = std::make_unique<QLm>();
  load_quantized(path, *loaded);
  auto li = std::make_unique<InferOf<QLm, B, L>>();
  const auto& again = li->forward(*loaded, ids);
  CHECK(std::equal(again.begin(), again.end(), got.begin()));
  std::filesystem::remove(path);
}

TEST_CASE("A head whose phase dominates the pass: its accumulators in tiles of columns, Dequantize over its input; the same integers, a plan below the float one") {
  // The PyTorch tutorial's language model in small (post-norm ReLU layers, a head of 300 words):
  // the int16 logits [8, 300] and their floats are the pass's largest phase, so the head takes
  // 8 rows and 128 of its columns at a time, and the float end writes over the int16 logits.
  constexpr size_t V = 300, L = 8, D = 32, B = 1;
  using M = Sequential<Named<"encoder", Embedding<V, D>>, PositionalEncoding<L, D>, Named<"layers", Repeat<EncoderBlock<D, 2, 64, PostNorm<>>, 2>>,
                       Named<"decoder", Linear<D, V>>>;
  using Q = Quantized<M>;
  using Plan = InferOf<Q, B, L>;
  static_assert(std::is_same_v<typename Plan::Layout::template ScratchAt<3>, TensorOf<std::int32_t, 8, 128>>, "the head's tile: 8 rows, 128 columns");
  constexpr PlanRow out = Plan::plan()[4];
  static_assert(out.over_input && out.out_offset == sizeof(Plan) - sizeof(Tensor<B, L, V>) && out.in_offset == sizeof(Plan) - sizeof(TensorOf<std::int16_t, B, L, V>),
                "Dequantize at the arena's end, its int16 input in the second half of its float output");
  static_assert(sizeof(Plan) == sizeof(Tensor<B, L, V>) && sizeof(Plan) < sizeof(InferOf<M, B, L>));
  Rng rng(41, 0);
  auto f = std::make_unique<M>();
  init_params(*f, rng);
  IdTensor<B, L> ids;
  Calibration<M, B, L> calibration(*f);
  for (int i = 0; i < 4; ++i) {
    for (auto& id : ids) id = std::int32_t(rng.below(V));
    calibration.observe(ids, Mask<B, L>{.causal = true});
  }
  const auto q = calibration.quantize();
  auto pass = std::make_unique<Plan>();
  for (auto& id : ids) id = std::int32_t(rng.below(V));
  const Mask<B, L> causal{.causal = true};
  // the head's input, and its logits from the whole tile (QLinear::add_to, all 300 columns)
  const TensorOf<std::int16_t, B, L, D> h = pass->template forward_steps<0, 3>(*q, ids, causal);
  TensorOf<std::int32_t, B * L, V> acc;
  TensorOf<std::int16_t, B, L, V> want;
  q->template get<3>().template add_to<B * L, true>(h.data(), acc.data(), want.data());
  const TensorOf<std::int16_t, B, L, V> logits = pass->template forward_steps<0, 4>(*q, ids, causal);
  CHECK(std::equal(logits.begin(), logits.end(), want.begin()));
  size_t saturated = 0;
  for (const std::int16_t v : want) saturated += v == INT16_MIN || v == INT16_MAX;
  CHECK(saturated < want.size() / 100);  // the logits span the stream's range, not its ends
  const auto& y = pass->forward(*q, ids, causal);
  const float s = q->template get<4>().scale(0);
  for (size_t i = 0; i < y.size(); ++i) CHECK_MESSAGE(y.data()[i] == s * float(want.data()[i]), i);
  // Dequantize with its input at its output's start (the arena's other end in a longer chain):
  // the same floats
  struct alignas(64) Bytes {
    unsigned char b[sizeof(Tensor<B, L, V>)];
  };
  auto bytes = std::make_unique<Bytes>();
  const auto* x = ::new (bytes->b) TensorOf<std::int16_t, B, L, V>(want);
  auto* z = ::new (bytes->b) Tensor<B, L, V>;
  q->template get<4>().run(*x, *z, Nothing{}, causal, Serial{});
  for (size_t i = 0; i < z->size(); ++i) CHECK_MESSAGE(z->data()[i] == s * float(want.data()[i]), i);
}

TEST_CASE("LanguageModelW8: int8 embedding and head within 1% of the float model's logits; saved and loaded, the same outputs") {
  constexpr size_t V = 300, L = 8, D = 32, H = 4, F = 64;
  using M = LanguageModel<V, L, D, H, F, 2>;
  using M8 = LanguageModelW8<V, L, D, H, F, 2>;
  Rng rng(37, 0);
  auto f = std::make_unique<M>();
  init_params(*f, rng);
  auto q = std::make_unique<M8>();
  quantize_weights(*f, *q);
  IdTensor<3, L> ids;
  for (auto& id : ids) id = std::int32_t(rng.below(V));
  auto fi = std::make_unique<InferOf<M, 3>>();
  auto qi = std::make_unique<InferOf<M8, 3>>();
  const auto& want = fi->forward(*f, ids);
  const Tensor<3, 1, V> got = qi->forward(*q, ids);
  CHECK(rel_rms(want, got, 1.0) < 0.01);
  double worst = 0;
  for (size_t i = 0; i < want.size(); ++i) worst = std::max(worst, double(std::abs(want.data()[i] - got.data()[i])));
  CHECK(worst < 0.05 * quant::max_abs(want));

  const auto path = std::filesystem::temp_directory_path() / "stformer_test_lm8.safetensors";
  save_params(path, *q);
  auto loaded = std::make_unique<M8>();
  load_quantized(path, *loaded);
  auto li = std::make_unique<InferOf<M8, 3>>();
  const auto& again = li->forward(*loaded, ids);
  CHECK(std::equal(again.begin(), again.end(), got.begin()));
  auto into_float = std::make_unique<M>();  // the int8 file is not a float model
  std::string error;
  try {
    load_params(safetensors::File::read(path), *into_float);
  } catch (const std::runtime_error& e) {
    error = e.what();
  }
  CHECK(error.find("tensor 'embedding.weight' has dtype I8, the model expects F32") != std::string::npos);
  std::filesystem::remove(path);

  IdTensor<3, L> bad = ids;
  bad(1, 2) = std::int32_t(V);
  CHECK_THROWS_AS(qi->forward(*q, bad), std::invalid_argument);

  // one window (Int8Linear's one-row path: the pooled row rounded to int16) against the same
  // window in a batch (float panels): the same logits within 1e-4 of the largest
  IdTensor<1, L> one;
  std::copy_n(ids.data() + L, L, one.data());
  auto q1 = std::make_unique<InferOf<M8, 1>>();
  const auto& single = q1->forward(*q, one);
  double far = 0;
  for (size_t v = 0; v < V; ++v) far = std::max(far, double(std::abs(single(0, 0, v) - got(1, 0, v))));
  CHECK(far < 1e-4 * quant::max_abs(got));
  MESSAGE("one window against the batch's: largest difference " << far / quant::max_abs(got) << " of the largest logit");
}

// Int8Linear's one-row path against its float panels, at widths that are not multiples of the
// vector width (37 inputs) and of its 8-row groups (23 and 300 outputs): every output within the
// bound of rounding x to int16, s[n]·Σ_k |W_q[n, k]|·s_x/2 (s_x = max|x| / 32767), plus float
// rounding; a zero row gives the bias, a row with a NaN or ∞ gives NaN.
template <size_t In, size_t Out>
void check_one_row(Rng& rng) {
  Linear<In, Out> f;
  test::randomize(f, rng);
  auto q = std::make_unique<Int8Linear<In, Out>>();
  Int8Linear<In, Out>::quantize(f, *q);
  Tensor<2, In> x;
  test::fill(x, rng);
  Tensor<2, Out> panel, row;
  q->template apply<2>(x.data(), panel.data());
  q->template apply<1>(x.data() + In, row.data());
  float m = 0;
  for (size_t k = 0; k < In; ++k) m = std::max(m, std::abs(x(1, k)));
  const double sx = m / 32767.0;
  size_t outside = 0;
  double worst = 0;
  for (size_t n = 0; n < Out; ++n) {
    double w1 = 0, wx = 0;
    for (size_t k = 0; k < In; ++k) w1 += std::abs(q->weight(n, k)), wx += std::abs(q->weight(n, k) * x(1, k));
    const double bound = q->weight_scale(n) * (w1 * sx / 2 + 1e-6 * wx) + 1e-6 * std::abs(q->bias(n));
    const double err = std::abs(double(row(0, n)) - double(panel(1, n)));
    outside += !(err <= bound);
    worst = std::max(worst, err / bound);
  }
  CHECK(outside == 0);
  MESSAGE("Int8Linear<" << In << ", " << Out << "> one row: largest difference " << worst << " of its bound");
  Tensor<1, In> zero;
  zero.fill(0.0f);
  q->template apply<1>(zero.data(), row.data());
  CHECK(std::equal(row.begin(), row.begin() + Out, q->bias.begin()));
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    zero(0, In / 2) = bad;
    q->template apply<1>(zero.data(), row.data());
    CHECK(std::all_of(row.begin(), row.begin() + Out, [](float v) { return std::isnan(v); }));
  }
}

TEST_CASE("Int8Linear: one row (x rounded to int16, integer dot products) against the float panels, within the rounding's bound") {
  Rng rng(38, 0);
  check_one_row<37, 23>(rng);
  check_one_row<128, 300>(rng);
}

// ---- quantize: any composed model (stformer/quantize.hpp) ----

namespace {
// A model that is not SPEC's: ids -> embedding + positions -> 2 encoder blocks -> mean over the
// tokens that exist -> 2 classes; its task: whether token 1 occurs among the first n tokens
// (the rest padding).
constexpr size_t kV = 8, kL = 16, kD = 32;
using Classifier = Sequential<Named<"embedding", Embedding<kV, kD>>, PositionalEncoding<kL, kD>,
                              Named<"blocks", Repeat<EncoderBlock<kD, 4, 64>, 2>>, MeanPool<kD>, Named<"head", Linear<kD, 2>>>;

template <size_t B>
struct ClassifierBatch {
  IdTensor<B, kL> ids;
  IdTensor<B> label;
  KeyMask<B, kL> keys;
  void draw(Rng& r) {
    for (size_t b = 0; b < B; ++b) {
      const size_t n = 4 + r.below(kL - 3);
      for (size_t i = 0; i < kL; ++i) {
        ids(b, i) = i < n ? std::int32_t(2 + r.below(kV - 2)) : 0;
        keys(b, i) = i < n;
      }
      const bool has = r.below(2) == 1;
      if (has) ids(b, r.below(n)) = 1;
      label(b) = has ? 1 : 0;
    }
  }
};

// The rms of the quantized model's outputs less the float model's, relative to the float
// model's, over 4 batches of random rows x (key-padded).
template <class M, class Q, size_t B, size_t N, size_t W>
double rms_gap(const M& p, const Q& q, Tensor<B, N, W>& x, const KeyMask<B, N>& keys, Rng& rng) {
  auto fi = test::make<InferOf<M, B, N>>();
  auto qi = test::make<InferOf<Q, B, N>>();
  double err = 0, norm = 0;
  for (int i = 0; i < 4; ++i) {
    test::fill(x, rng);
    const auto& yf = fi->forward(p, x, &keys);
    const auto& yq = qi->forward(q, x, &keys);
    for (size_t k = 0; k < yf.size(); ++k) err += std::pow(yf.data()[k] - yq.data()[k], 2), norm += std::pow(yf.data()[k], 2);
  }
  return std::sqrt(err / norm);
}
}  // namespace

// Trains Classifier (a model of ids [B, kL] -> 2 logits), quantizes it, and checks the integer
// model: accuracy within 1 point, every logit within logit_bound of the float model's, the float
// model's names (`names`), saved and loaded the same.
template <class Classifier>
void trained_classifier(const char* what, std::initializer_list<const char*> names_wanted, double logit_bound = 0.25) {
  constexpr size_t B = 16;
  auto p = test::make<Classifier>();
  Rng rng(71);
  init_params(*p, rng);
  {
    auto opt = test::make<Adam<Classifier>>();
    auto g = test::make<Classifier>();
    auto acts = test::make<ActsOf<Classifier, B, kL>>();
    ClassifierBatch<B> batch;
    Tensor<B, 1, 2> dlogits;
    for (int s = 0; s < (test::slow() ? 40 : 400); ++s) {
      batch.draw(rng);
      zero_grad(*g);
      cross_entropy(acts->forward(*p, batch.ids, &batch.keys), batch.label, dlogits, B);
      acts->backward(*p, *g, dlogits);
      opt->step(*p, *g, 1e-3f);
    }
  }
  Calibration<Classifier, B, kL> cal(*p);
  Rng calib(72);
  for (int i = 0; i < 8; ++i) {
    ClassifierBatch<B> batch;
    batch.draw(calib);
    cal.observe(batch.ids, &batch.keys);
  }
  const auto q = cal.quantize();
  using Q = Quantized<Classifier>;
  static_assert(std::is_same_v<typename Q::template Input<B, kL>, IdTensor<B, kL>> && std::is_same_v<typename Q::template Output<B, kL>, Tensor<B, 1, 2>>,
                "the quantized model takes and gives what the float one does");
  // the float model's names, the integer tensors of each step, and the output's scale
  const auto names = test::param_names(*q);
  for (const char* n : names_wanted)
    CHECK_MESSAGE(std::find(names.begin(), names.end(), n) != names.end(), n);

  auto fi = test::make<InferOf<Classifier, B, kL>>();
  auto qi = test::make<InferOf<Q, B, kL>>();
  Rng fresh(73);
  double acc_f = 0, acc_q = 0, worst = 0;
  const int batches = 32;
  for (int i = 0; i < batches; ++i) {
    ClassifierBatch<B> batch;
    batch.draw(fresh);
    const auto& yf = fi->forward(*p, batch.ids, &batch.keys);
    const auto& yq = qi->forward(*q, batch.ids, &batch.keys);
    acc_f += accuracy(yf, batch.label) / batches, acc_q += accuracy(yq, batch.label) / batches;
    for (size_t k = 0; k < yf.size(); ++k) worst = std::max(worst, double(std::abs(yf.data()[k] - yq.data()[k])));
  }
  MESSAGE(std::string(what) << ", " << batches * B << " sequences: float accuracy " << acc_f << ", int8 " << acc_q << "; largest logit difference "
                                  << worst << "; plans: float " << sizeof(InferOf<Classifier, 1, kL>) << " B, int8 " << sizeof(InferOf<Q, 1, kL>)
                                  << " B");
  if (!test::slow()) CHECK(acc_f >= 0.9);
  CHECK(std::abs(acc_f - acc_q) <= 0.01);
  CHECK(worst < logit_bound);
  CHECK(sizeof(InferOf<Q, 1, kL>) < sizeof(InferOf<Classifier, 1, kL>));

  // saved and loaded, the same integers
  const auto path = std::filesystem::temp_directory_path() / "stformer_quantized_classifier.safetensors";
  save_params(path, *q);
  auto back = test::make<Q>();
  load_quantized(path, *back);
  std::filesystem::remove(path);
  ClassifierBatch<B> batch;
  batch.draw(fresh);
  const Tensor<B, 1, 2> before = qi->forward(*q, batch.ids, &batch.keys);
  CHECK(test::same_bits(before, qi->forward(*back, batch.ids, &batch.keys)));
}

TEST_CASE("quantize: a sequence classifier of the library's blocks, trained, in integers within 1 point of its float accuracy") {
  trained_classifier<Classifier>("sequence classifier (SPEC's blocks)", {"embedding.weight", "1.table", "blocks.0.sn1.g", "blocks.1.ffn.fc2.weight",
                                                                        "3.requant.multiplier", "head.coarse.weight", "head.fine.weight", "output.scale"});
}

TEST_CASE("quantize: a BERT-style classifier (ids, a class token read back by FirstToken, pre-norm GELU layers, a final LayerNorm), trained, key-padded, in integers within 1 point") {
  using TokenClassifier = Sequential<Named<"embedding", Embedding<kV, kD>>, Named<"cls", ClassToken<kD>>, PositionEmbedding<kL + 1, kD>,
                                     Named<"layers", Repeat<EncoderBlock<kD, 4, 64, PreNorm<act::GELU>>, 2>>, Named<"norm", LayerNorm<kD>>,
                                     FirstToken<kD>, Named<"head", Linear<kD, 2>>>;
  trained_classifier<TokenClassifier>("sequence classifier (class token, pre-norm layers)",
                                      {"embedding.weight", "cls.cls_token", "2.table", "layers.1.self_attn.wq.weight", "layers.1.ffn.table",
                                       "norm.eps", "head.fine.weight", "output.scale"},
                                      // pre-norm GELU layers and a final LayerNorm quantize with a larger logit error than
                                      // the other classifiers (0.09 trained with AVX2 kernels, 0.52 with NEON's, whose
                                      // float training ends elsewhere), at the same accuracy
                                      0.75);
}

TEST_CASE("quantize: the classifier of PyTorch's layers (learned positions, post-norm LayerNorm and GELU, a final LayerNorm), trained, in integers within 1 point") {
  using TorchClassifier = Sequential<Named<"embedding", Embedding<kV, kD>>, PositionEmbedding<kL, kD>,
                                     Named<"layers", Repeat<EncoderBlock<kD, 4, 64, PostNorm<act::GELU>>, 2>>, Named<"norm", LayerNorm<kD>>,
                                     MeanPool<kD>, Named<"head", Linear<kD, 2>>>;
  trained_classifier<TorchClassifier>("sequence classifier (PyTorch's layers)",
                                      {"embedding.weight", "1.table", "layers.0.norm1.weight", "layers.0.self_attn.wq.weight", "layers.1.ffn.table",
                                       "norm.eps", "head.fine.weight", "output.scale"});
}

TEST_CASE("quantize: a model of float rows (QuantizeInput first), its outputs close to the float model's, unnamed steps by their index") {
  constexpr size_t B = 4, N = 10;
  using M = Sequential<Linear<3, 16>, EncoderBlock<16, 2, 32>, MeanPool<16>, Linear<16, 4>>;
  auto p = test::make<M>();
  Rng rng(74);
  init_params(*p, rng);
  test::randomize(*p, rng);
  // calibration with the padding the model will see: a mean over one row spans more than a
  // mean over ten
  const auto keys = test::lengths_mask<B, N>({10, 7, 3, 1});
  Calibration<M, B, N> cal(*p);
  Tensor<B, N, 3> x;
  for (int i = 0; i < 8; ++i) test::fill(x, rng), cal.observe(x, &keys);
  const auto q = cal.quantize();
  using Q = Quantized<M>;
  const auto names = test::param_names(*q);
  CHECK(names.front() == "input.scale");
  for (const char* n : {"0.coarse.weight", "1.attn.wq.weight", "2.requant.shift", "3.fine.bias", "output.scale"})
    CHECK_MESSAGE(std::find(names.begin(), names.end(), n) != names.end(), n);
  CHECK(InferOf<Q, B, N>::plan()[0].name == std::string_view("input"));
  // bad calibration: nothing observed, an input that is not finite, a model that gives NaN
  Calibration<M, B, N> empty(*p);
  CHECK_THROWS_WITH(empty.quantize(), "Calibration::quantize: no calibration batch observed");
  x(1, 2, 0) = std::nanf("");
  CHECK_THROWS_WITH(empty.observe(x), "Calibration::observe: the input holds a NaN or an infinity");
  x(1, 2, 0) = 0.5f;
  auto broken = std::make_unique<M>(*p);
  broken->get<0>().bias(3) = std::numeric_limits<float>::infinity();
  Calibration<M, B, N> bad(*broken);
  CHECK_THROWS_WITH(bad.observe(x), "Calibration::observe: a step's output is not finite (NaN or infinity): the model's parameters are");
  const double gap = rms_gap(*p, *q, x, keys, rng);
  MESSAGE("float rows -> 4 outputs: int8 within " << 100 * gap << "% rms of the float model");
  CHECK(gap < 0.03);
}

TEST_CASE("quantize: activation steps (GELU (tanh), SiLU, ReLU, GELU) between linear layers and a LayerNorm, in int16 fixed point, close to the float model") {
  constexpr size_t B = 4, N = 5;
  using M = Sequential<Linear<4, 12>, GELUTanh<12>, SiLU<12>, LayerNorm<12>, ReLU<12>, GELU<12>, Linear<12, 2>>;
  auto p = test::make<M>();
  Rng rng(75);
  init_params(*p, rng);
  test::randomize(*p, rng);
  Calibration<M, B, N> cal(*p);
  Tensor<B, N, 4> x;
  for (int i = 0; i < 8; ++i) test::fill(x, rng), cal.observe(x);
  const auto q = cal.quantize();
  const auto names = test::param_names(*q);
  for (const char* n : {"1.table", "2.table", "4.table", "5.table"})
    CHECK_MESSAGE(std::find(names.begin(), names.end(), n) != names.end(), n);
  const auto keys = test::lengths_mask<B, N>({5, 5, 5, 5});
  const double gap = rms_gap(*p, *q, x, keys, rng);
  MESSAGE("activation steps: int8 within " << 100 * gap << "% rms of the float model");
  CHECK(gap < 0.03);
}

TEST_CASE("out_of_bounds: quantized models are within bounds; each bound broken is found, by tensor and entry, and the C API's image check refuses it") {
  using M = Sequential<Linear<4, 12>, GELUTanh<12>, LayerNorm<12>, Linear<12, 2>>;
  auto p = test::make<M>();
  Rng rng(76);
  init_params(*p, rng);
  test::randomize(*p, rng);
  Calibration<M, 2, 3> cal(*p);
  Tensor<2, 3, 4> x;
  test::fill(x, rng), cal.observe(x);
  const auto q = cal.quantize();
  REQUIRE_FALSE(out_of_bounds(*q));
  CHECK_FALSE(out_of_bounds(*PointerFixture().q));
  struct Case {
    const char* tensor;
    size_t entry;
    std::int32_t value;
    const char* bound;
  };
  const Case cases[] = {
      {"1.table", 7, 65537, "an activation's knot is in [-65536, 65536]"},
      {"2.weight", 3, -32768, "an int16 weight is in [-32767, 32767]"},
      {"2.bias", 11, (1 << 30) + 1, "a norm's bias is in [-2^30, 2^30]"},
      {"2.eps", 0, -1, "eps (64 bits) is in [0, 2^62]"},  // the high word: e = −2^32 + low
      {"0.coarse.bias", 1, INT32_MAX - 100, "a bias b_c"},
      {"3.fine.requant.shift", 0, -32, "a shift is in [-31, 30]"},
  };
  for (const auto& c : cases) {
    auto bad = std::make_unique<std::remove_cvref_t<decltype(*q)>>(*q);
    for_each_param(
        [&](const Path& path, Init, auto& t) {
          if (!(path == c.tensor)) return;
          if (std::string_view(c.tensor).ends_with("eps")) t.data()[1] = c.value;
          else t.data()[c.entry] = decltype(t.data()[0] + 0)(c.value);
        },
        *bad);
    const OutOfBounds found = out_of_bounds(*bad);
    INFO(std::string(c.tensor));
    REQUIRE(found);
    CHECK(found.tensor == c.tensor);
    CHECK(found.entry == (std::string_view(c.tensor).ends_with("eps") ? 1 : c.entry));
    CHECK(std::string_view(found.bound).starts_with(c.bound));
  }
  // the C API's image check (once per model type): a QLinear whose layout matches, in bounds
  // and with a multiplier out of bounds
  const auto image_ok = []<size_t Out>(const Linear<4, Out>& f, std::int32_t multiplier) {
    const QLinear<4, Out> ql = QLinear<4, Out>::quantize(f, 0.01f, 0.02f);
    auto image = ql;
    image.requant.multiplier(0) = multiplier;
    const auto offset = [&](const auto& t) { return size_t(reinterpret_cast<const char*>(t.data()) - reinterpret_cast<const char*>(&image)); };
    const size_t offsets[] = {offset(image.weight),           offset(image.bias),          offset(image.weight_scale),
                              offset(image.requant.multiplier), offset(image.requant.shift), offset(image.in_scale),
                              offset(image.out_scale)};
    REQUIRE(image_matches(image, offsets));
    return c_api::image_ok<true>(image, offsets);
  };
  Linear<4, 2> f2;
  Linear<4, 3> f3;
  init_params(f2, rng), init_params(f3, rng);
  CHECK(image_ok(f2, QLinear<4, 2>::quantize(f2, 0.01f, 0.02f).requant.multiplier(0)));
  CHECK_FALSE(image_ok(f3, 7));
}

TEST_CASE("requant_mismatch: every requantization is its block's stored scales'; each multiplier or shift changed within its bounds is found by tensor and entry") {
  // an embedding, positions, a post-norm encoder block (LayerNorm, branch_requant, attention's
  // exponent and values), SPEC's block (ScaleNorm), a mean pool and a two-part head (QFineLinear)
  using M = Sequential<Named<"embedding", Embedding<20, 8>>, PositionalEncoding<6, 8>, EncoderBlock<8, 2, 16, PostNorm<act::GELU>>,
                       EncoderBlock<8, 2, 16>, MeanPool<8>, Named<"head", Linear<8, 3>>>;
  auto f = test::make<M>();
  Rng rng(59);
  init_params(*f, rng);
  test::randomize(*f, rng);
  Calibration<M, 3, 6> cal(*f);
  IdTensor<3, 6> ids;
  for (auto& id : ids) id = std::int32_t(rng.below(20));
  cal.observe(ids);
  const auto q = cal.quantize();
  REQUIRE_FALSE(out_of_bounds(*q));
  REQUIRE_FALSE(requant_mismatch(*q));
  REQUIRE_FALSE(requant_mismatch(*PointerFixture().q));
  std::vector<std::string> names;
  for_each_param(
      [&](const Path& path, Init, const auto& t) {
        const Name n = path.name();
        if constexpr (std::is_same_v<typename std::remove_cvref_t<decltype(t)>::value_type, std::int32_t>)
          if (n.view().ends_with(".multiplier") || n.view().ends_with(".shift")) names.emplace_back(n.view());
      },
      *q);
  for (const char* want : {"embedding.requant.multiplier", "2.norm1.requant.multiplier", "2.branch_requant.shift", "2.self_attn.exponent.multiplier",
                           "2.self_attn.values.multiplier", "3.sn1.requant.shift", "3.attn.wq.requant.multiplier", "4.requant.multiplier",
                           "head.fine.requant.shift"})
    CHECK_MESSAGE(std::find(names.begin(), names.end(), want) != names.end(), want);
  size_t changed = 0;
  for (const std::string& name : names) {
    const bool shift = name.ends_with(".shift");
    for (int variant = 0; variant < 3; ++variant) {
      auto bad = std::make_unique<std::remove_cvref_t<decltype(*q)>>(*q);
      std::int32_t was = 0, now = 0;
      size_t entry = 0;
      for_each_param(
          [&](const Path& path, Init, auto& t) {
            if (!(path == name)) return;
            entry = t.size() - 1;  // the last channel
            was = t.data()[entry];
            // multiplier: 0, 2^31 − 1, one step; shift: −31, one step, 30
            const std::int32_t step = was == INT32_MAX ? was - 1 : was + 1;
            const std::int32_t to[] = {shift ? -31 : 0, shift ? step : INT32_MAX, shift ? 30 : step};
            now = to[variant];
            t.data()[entry] = now;
          },
          *bad);
      if (now == was) continue;
      const RequantMismatch found = requant_mismatch(*bad);
      INFO(name, " entry ", entry, ": ", was, " -> ", now);
      REQUIRE(found);
      CHECK(found.tensor == name);
      CHECK(found.entry == entry);
      CHECK(found.stored == now);
      CHECK(found.expected == was);
      ++changed;
    }
  }
  CHECK(changed >= 2 * names.size());
}

TEST_CASE("quantize: a set model of SAB, ISAB, PMA, ScaleNorm and FeedForward steps and a head without bias, key-padded, close to the float model") {
  constexpr size_t B = 4, N = 12;
  using M = Sequential<Linear<2, 16>, SAB<16, 2>, ISAB<16, 2, 4>, PMA<16, 2, 2>, ScaleNorm<16>, FeedForward<16, 32>,
                       Linear<16, 3, Init::xavier_normal, Bias::no>>;
  auto p = test::make<M>();
  Rng rng(75);
  init_params(*p, rng);
  const auto keys = test::lengths_mask<B, N>({12, 9, 5, 2});
  Calibration<M, B, N> cal(*p);
  Tensor<B, N, 2> x;
  for (int i = 0; i < 8; ++i) test::fill(x, rng), cal.observe(x, &keys);
  const auto q = cal.quantize();
  using Q = Quantized<M>;
  const auto names = test::param_names(*q);
  for (const char* n : {"1.mab.attn.wq.weight", "2.inducing", "2.mab2.fc.bias", "3.seeds", "4.out_scale", "5.fc1.weight", "6.fine.weight"})
    CHECK_MESSAGE(std::find(names.begin(), names.end(), n) != names.end(), n);
  const double gap = rms_gap(*p, *q, x, keys, rng);
  MESSAGE("set model -> 2 × 3 outputs: int8 within " << 100 * gap << "% rms of the float model; plans: float "
                                                     << sizeof(InferOf<M, 1, N>) << " B, int8 " << sizeof(InferOf<Q, 1, N>) << " B");
  CHECK(gap < 0.03);
}

TEST_CASE("quantize: SPEC's pointer and set models close to the float models, in plans no larger than the float models'") {
  {
    PointerFixture m;
    using G = QPointer;
    static_assert(std::is_same_v<G::BlockAt<1>, QFineLinear<2, 16>> && std::is_same_v<G::BlockAt<4>, PointerHead<16, precision::int8>> &&
                      std::is_same_v<G::BlockAt<5>, DequantizeLogits>,
                  "input, proj (the first linear layer: QFineLinear), blocks, sn_v, the pointer's head (int32 logits), their log-softmax");
    auto fi = std::make_unique<InferOf<FloatPointer, Sets, Points>>();
    auto gi = std::make_unique<InferOf<G, Sets, Points>>();
    const Tensor<Sets, 1, Points> want = fi->forward(*m.f, m.x);
    const auto& got = gi->forward(*m.q, m.x);
    double worst = 0;
    for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, double(std::abs(std::exp(got.data()[i]) - std::exp(want.data()[i]))));
    MESSAGE("pointer: largest probability difference from float " << worst << "; plans, a set of 50: float " << sizeof(InferOf<FloatPointer, 1, Points>)
                                                                  << " B, int8 " << sizeof(InferOf<G, 1, Points>) << " B");
    CHECK(worst < 0.004);
    // The integer steps alone (forward_steps, as a core without an FPU runs them): the quantized
    // input, then the logits; their log-softmax by hand is the whole pass's output.
    auto hi = std::make_unique<InferOf<G, Sets, Points>>();
    const TensorOf<std::int16_t, Sets, Points, 2> xq = hi->template forward_steps<0, 1>(*m.q, m.x);
    hi->template input<1>() = xq;
    const TensorOf<std::int32_t, Sets, 1, Points> logits = hi->template forward_steps<1, G::steps - 1>(*m.q);
    const double unit = m.q->template get<G::steps - 2>().pointer.logit_scale();
    for (size_t b = 0; b < Sets; ++b) {
      double z = 0;
      for (size_t j = 0; j < Points; ++j) z += std::exp(unit * logits(b, 0, j));
      for (size_t j = 0; j < Points; ++j) CHECK(std::abs(unit * logits(b, 0, j) - std::log(z) - got(b, 0, j)) < 1e-4);
      CHECK(argmax(&logits(b, 0, 0), Points) == argmax(&got(b, 0, 0), Points));
    }
    CHECK(sizeof(InferOf<G, 1, Points>) <= sizeof(InferOf<FloatPointer, 1, Points>));
  }
  {
    SetFixture m;
    constexpr size_t B = SetFixture::B, N = SetFixture::N;
    using G = SetFixture::QSet;
    auto gi = std::make_unique<InferOf<G, B, N>>();
    for (const KeyMask<B, N>* mask : m.masks) {
      const Tensor<B, 1, 2> want = m.acts->forward(*m.f, m.x, mask);
      const auto& got = gi->forward(*m.q, m.x, mask);
      MESSAGE(std::string(mask ? "set, key-padded" : "set") << ": relative rms from float " << rel_rms(want, got, 1.0));
      CHECK(rel_rms(want, got, 1.0) < 0.015);
    }
    using FloatSet = SetFixture::FloatSet;
    MESSAGE("set plans, a set of 50: float " << sizeof(InferOf<FloatSet, 1, 50>) << " B, int8 " << sizeof(InferOf<G, 1, 50>) << " B");
    CHECK(sizeof(InferOf<G, 1, 50>) <= sizeof(InferOf<FloatSet, 1, 50>));
  }
}

TEST_CASE("QClassToken and QFirstToken: the token rounded to the stream's scale and the rows copied, entry by entry") {
  constexpr size_t B = 2, N = 3, D = 5;
  static_assert(std::is_same_v<Int8Of<ClassToken<D>>::type, QClassToken<D>> && std::is_same_v<Int8Of<FirstToken<D>>::type, QFirstToken<D>>);
  // s = 2^−10: token / s is exact, so these are round(token / s) clamped to ±32767 by hand
  const float s = 1.0f / 1024;
  ClassToken<D> f;
  const float token[D] = {0.3f, -1.25f, 0.002f, 40.0f, -40.0f};
  const std::int16_t want[D] = {307, -1280, 2, 32767, -32767};  // 307.2, −1280, 2.048, 40960, −40960
  std::copy_n(token, D, f.cls_token.data());
  QClassToken<D> q;
  q.from_float(f, {}, s, s);
  for (size_t c = 0; c < D; ++c) CHECK(q.cls_token(0, 0, c) == want[c]);

  Rng rng(79);
  TensorOf<std::int16_t, B, N, D> x;
  for (auto& v : x) v = std::int16_t(std::int32_t(rng.below(65535)) - 32767);
  TensorOf<std::int16_t, B, N + 1, D> y;
  q.run<B, N>(x, y, Nothing{}, Mask<B, N>{}, Serial{});
  for (size_t b = 0; b < B; ++b)
    for (size_t c = 0; c < D; ++c) {
      CHECK(y(b, 0, c) == want[c]);
      for (size_t n = 0; n < N; ++n) CHECK(y(b, 1 + n, c) == x(b, n, c));
    }
  TensorOf<std::int16_t, B, 1, D> first;
  QFirstToken<D>{}.run<B, N>(x, first, Nothing{}, Mask<B, N>{}, Serial{});
  for (size_t b = 0; b < B; ++b)
    for (size_t c = 0; c < D; ++c) CHECK(first(b, 0, c) == x(b, 0, c));
}

TEST_CASE("quantize: a ViT-style classifier of rows (ClassToken, learned positions, encoder blocks, a final LayerNorm, FirstToken), key-padded, within 3% rms of the float model; saved and loaded, the same integers") {
  constexpr size_t B = 4, N = 8, In = 6, D = 16, C = 3;
  using M = Sequential<Linear<In, D>, ClassToken<D>, PositionEmbedding<N + 1, D>, Named<"blocks", Repeat<EncoderBlock<D, 2, 32>, 2>>,
                       Named<"norm", LayerNorm<D>>, FirstToken<D>, Named<"head", Linear<D, C>>>;
  using Q = Quantized<M>;
  static_assert(std::is_same_v<Q::BlockAt<2>, QClassToken<D>> && std::is_same_v<Q::BlockAt<6>, QFirstToken<D>>,
                "input, 0 (QFineLinear), the class token, the positions, blocks, norm, the first row, head, output");
  auto p = test::make<M>();
  Rng rng(78);
  init_params(*p, rng);
  test::randomize(*p, rng);  // the class token too (ClassToken starts at zeros)
  const auto keys = test::lengths_mask<B, N>({8, 6, 3, 1});
  Calibration<M, B, N> cal(*p);
  Tensor<B, N, In> x;
  for (int i = 0; i < 8; ++i) test::fill(x, rng), cal.observe(x, &keys);
  const auto q = cal.quantize();
  const auto names = test::param_names(*q);
  for (const char* n : {"input.scale", "0.fine.weight", "1.cls_token", "2.table", "blocks.1.attn.wq.weight", "norm.weight", "head.fine.weight", "output.scale"})
    CHECK_MESSAGE(std::find(names.begin(), names.end(), n) != names.end(), n);
  const double gap = rms_gap(*p, *q, x, keys, rng);
  MESSAGE("ViT-style classifier -> " << C << " logits, key-padded: int8 within " << 100 * gap << "% rms of the float model; plans: float "
                                     << sizeof(InferOf<M, 1, N>) << " B, int8 " << sizeof(InferOf<Q, 1, N>) << " B");
  CHECK(gap < 0.03);

  // The keys shifted past the class token: batch row 2 computes what its 3 rows alone do, the
  // same integers whatever its padded rows hold; without the mask they count.
  auto qi = test::make<InferOf<Q, B, N>>();
  test::fill(x, rng);
  const Tensor<B, 1, C> y = qi->forward(*q, x, &keys);
  for (size_t n = 3; n < N; ++n)
    for (size_t k = 0; k < In; ++k) x(2, n, k) = 5.0f * rng.normal();
  const Tensor<B, 1, C> repadded = qi->forward(*q, x, &keys);
  Tensor<1, 3, In> alone;
  for (size_t n = 0; n < 3; ++n)
    for (size_t k = 0; k < In; ++k) alone(0, n, k) = x(2, n, k);
  auto short_qi = test::make<InferOf<Q, 1, 3>>();
  const auto& want = short_qi->forward(*q, alone);
  const Tensor<B, 1, C> unmasked = qi->forward(*q, x);
  double moved = 0;
  for (size_t c = 0; c < C; ++c) {
    CHECK(repadded(2, 0, c) == y(2, 0, c));
    CHECK(want(0, 0, c) == y(2, 0, c));
    moved += std::abs(unmasked(2, 0, c) - y(2, 0, c));
  }
  CHECK(moved > 1e-3);

  // saved and loaded: the token in int16, the same outputs
  const auto path = std::filesystem::temp_directory_path() / "stformer_quantized_vit.safetensors";
  save_params(path, *q);
  const auto file = safetensors::File::read(path);
  CHECK(file.at("1.cls_token").dtype == safetensors::Dtype::I16);
  CHECK(file.at("1.cls_token").shape == std::vector<size_t>{1, 1, D});
  auto back = test::make<Q>();
  load_quantized(file, *back);
  std::filesystem::remove(path);
  const Tensor<B, 1, C> before = qi->forward(*q, x, &keys);
  CHECK(test::same_bits(before, qi->forward(*back, x, &keys)));
}
