// The blocks in integers (stformer/quantized/)
// against the float blocks they come from, on the float block's own inputs dequantized (so that
// only the block's quantization is measured), with the documented bounds (docs/quantized.md,
// "How it computes"): QLinear and the attention's projections 1.5% rms of the output,
// QScaleNorm one output step, QMultiHeadAttention and the encoder and decoder blocks 3% rms, MAB
// 1% (what it adds 1.5%), the pointer's log-probabilities 0.05.
// QClassToken, QFirstToken and QLastToken against their formulas, entry by entry.
// Then the quantized models: the pointer and set models and the integer language model close
// to the float ones, classifiers read from a class token (key-padded: padded rows change none
// of the integers), quantize → save → load gives the same integers, bad quantized checkpoints
// are refused; the language model with int8 embedding and head (weight-only) within 1%.
// (In five files, compiled apart: this one has the blocks; test_quantized_models.cpp SPEC's
// models, test_quantized_lm.cpp the language models, test_quantize_trained.cpp and
// test_quantize.cpp quantize() of other models.)
#include <doctest/doctest.h>

#include "quantized.hpp"

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
    using Q = Int8Of<F>::type;  // one step: QFeedForward
    static_assert(std::is_same_v<Q, QFeedForward<Named<"fc1", Linear<D, Fw, Init::kaiming_normal>>, Activation<Act, Fw>, Named<"fc2", Linear<Fw, D, Init::kaiming_normal>>>>);
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
    q->template apply_tiled<B * N, 8, true>(xq.data(), out.data(), w);
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

TEST_CASE("QActivation: GELU, GELU (tanh), SiLU and Tanh in int16 fixed point within the interpolation's bound at every input; ReLU exact") {
  activation_steps<act::GELU>(0.80);
  activation_steps<act::GELUTanh>(0.80);
  activation_steps<act::SiLU>(0.50);
  activation_steps<act::Tanh>(0.77);
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
  using M = Sequential<Named<"", EncoderBlock<D, H, Fw, Fm>>>;
  Rng rng(34, 0);
  auto f = test::make<M>();
  test::randomize(*f, rng);
  if constexpr (Fm::torch_names)  // the norms' weights and biases away from ones and zeros
    for_each_param(
        [&](const Path& at, Init, auto& t) {
          const std::string name(at.name().view());
          if (name.starts_with("norm"))
            for (auto& v : t) v = name.ends_with("weight") ? 0.5f + rng.uniform() : 0.3f * rng.normal();
        },
        *f);
  Calibration<M, B, N> cal(*f);
  Tensor<B, N, D> x;
  for (int i = 0; i < 4; ++i) test::fill(x, rng), cal.observe(x);
  const auto q = cal.quantize();
  const double gap = rms_gap(*f, *q, x, Mask<B, N>{}, rng);
  MESSAGE(std::string(Fm::torch_names ? Fm::norm_first ? "pre-norm LayerNorm, " : "post-norm LayerNorm, " : "SPEC's form, ") << std::string(act_name<typename Fm::Act>())
                                                                                                   << ": int8 within " << 100 * gap << "% rms");
  CHECK(gap < 0.03);
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

TEST_CASE("QClassToken, QFirstToken and QLastToken: the token rounded to the stream's scale and the rows copied, entry by entry") {
  constexpr size_t B = 2, N = 3, D = 5;
  static_assert(std::is_same_v<Int8Of<ClassToken<D>>::type, QClassToken<D>> && std::is_same_v<Int8Of<FirstToken<D>>::type, QFirstToken<D>> &&
                std::is_same_v<Int8Of<LastToken<D>>::type, QLastToken<D>>);
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
  TensorOf<std::int16_t, B, 1, D> last;
  QLastToken<D>{}.run<B, N>(x, last, Nothing{}, Mask<B, N>{}, Serial{});
  for (size_t b = 0; b < B; ++b)
    for (size_t c = 0; c < D; ++c) CHECK((first(b, 0, c) == x(b, 0, c) && last(b, 0, c) == x(b, N - 1, c)));
}
