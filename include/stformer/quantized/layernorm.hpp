// QLayerNorm<D, Centred>: LayerNorm<D> (Centred) and RMSNorm<D> on integer rows x_q (int16 or
// int8, x = s_x·x_q), with no floating point:
//   c_i = D·x_i − Σ_j x_j  (LayerNorm; RMSNorm: c_i = x_i)          exact in int32 (D ≤ 1024)
//   ss  = Σ_i c_i² + e,    e = D³·ε/s_x²  (RMSNorm: D·ε/s_x²)         exact in uint64
//   n_i = c_i·√D/√ss = (x_i − μ)/√(σ² + ε)                           the normalised row, in Q_k:
//   t_i = apply(c_i, 2^k·√D / √ss)                                    (kernels::divide_by_root: an
//                                                                     integer reciprocal square root)
//   y_i = clamp(apply(t_i·w_i, M) + b_i)                              w_i = round(weight_i / s_w)
//                                                                     (int16), M = s_w / (s_y·2^k),
//                                                                     b_i = round(bias_i / s_y)
// with |n_i| ≤ √D, so k (the largest with 2^k·√D·32767 < 2^31) keeps t_i·w_i in int32. A row of
// constant value gives y = b, as in float (ε: t = 0 when e rounds to 0 too). The error: t_i is
// within 2^−k + 2^−26·|n_i| of n_i, w_i within s_w/2 of weight_i, and y_i rounds once more
// (at most one output step beyond the rounding of y itself).
// Tensors: weight I16 [D] (w), weight_scale F32 [1] (s_w), bias I32 [D] (b; LayerNorm),
// eps I32 [2] (e's low and high 32 bits), out_scale F32 [1] (s_y), requant I32 [1] (M).
#pragma once

#include "../core/config.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "../blocks/layernorm.hpp"
#include "linear.hpp"

namespace stformer::inline STFORMER_ABI {

template <size_t D, bool Centred, Epsilon Eps = epsilon(Centred ? 1e-5f : 1.1920929e-7f)>
struct QLayerNorm : RowLocal<QLayerNorm<D, Centred, Eps>, D, std::int16_t> {
  static_assert(D <= 1024, "QLayerNorm: rows of at most 1024 (c_i = D·x_i − Σx in int32, Σc² in uint64)");
  // 2^k·√D·32767 < 2^31, i.e. 4^k·D ≤ 2^32
  static constexpr int k = [] {
    int q = 0;
    while ((std::uint64_t(1) << (2 * (q + 1))) * D <= (std::uint64_t(1) << 32)) ++q;
    return q;
  }();
  // 2^k·√D as a multiplier, made at compile time (kernels::quantize_multiplier's rounding): the
  // forward pass has no floating point
  static constexpr kernels::Multiplier root = [] {
    double r = D;
    for (int i = 0; i < 64; ++i) r = 0.5 * (r + double(D) / r);
    double m = r * double(std::int64_t(1) << k);
    int e = 0;
    while (m >= 1) m /= 2, ++e;
    while (m < 0.5) m *= 2, --e;
    std::int64_t q = std::int64_t(m * 2147483648.0 + 0.5);
    if (q == (std::int64_t(1) << 31)) q /= 2, ++e;
    return kernels::Multiplier{std::int32_t(q), e};
  }();
  using Float = RowNorm<D, Centred, Eps>;

  TensorOf<std::int16_t, D> weight;
  Scale weight_scale;
  [[no_unique_address]] std::conditional_t<Centred, TensorOf<std::int32_t, D>, Nothing> bias;
  TensorOf<std::int32_t, 2> eps;
  Scale out_scale;
  Requant<1> requant;

  template <class F, class... S>
  static constexpr void visit(const Path& at, F& f, S&... s) {
    f(at / "weight", Init{Init::zeros}, s.weight...);
    f(at / "weight_scale", Init{Init::zeros}, s.weight_scale...);
    if constexpr (Centred) f(at / "bias", Init{Init::zeros}, s.bias...);
    f(at / "eps", Init{Init::zeros}, s.eps...);
    f(at / "out_scale", Init{Init::zeros}, s.out_scale...);
    stformer::visit(at / "requant", f, s.requant...);
  }

  // The norm f on inputs at scale s_in, outputs at s_out (host side).
  static QLayerNorm quantize(const Float& f, float s_in, float s_out) {
    QLayerNorm q;
    q.weight_scale(0) = quant::scale_for(quant::max_abs(f.weight), 32767);
    for (size_t i = 0; i < D; ++i) {
      q.weight(i) = std::int16_t(quant::to_int(f.weight(i), q.weight_scale(0), -32767, 32767));
      if constexpr (Centred) q.bias(i) = quant::to_int(f.bias(i), s_out, INT32_MIN / 2, INT32_MAX / 2);
    }
    const double e = std::min(double(Centred ? D * D * D : D) * Float::eps / (double(s_in) * s_in), 0x1p62);
    const auto e64 = std::uint64_t(std::llround(e));
    q.eps(0) = std::int32_t(std::uint32_t(e64)), q.eps(1) = std::int32_t(std::uint32_t(e64 >> 32));
    q.out_scale(0) = s_out;
    set_requants(q);
    return q;
  }
  // M = s_w / (s_y·2^k)
  template <class B, class F>
  static void requants(B& b, F&& f) {
    f("requant", b.requant, [&](size_t) { return double(b.weight_scale(0)) / (double(b.out_scale(0)) * std::ldexp(1.0, k)); });
  }

  // y [Rows, D] (int8 or int16) = the norm of x [Rows, D] (int16 or int8); y may be x (a row is
  // read whole before it is written).
  template <size_t Rows, class X, class Y>
  void apply(const X* x, Y* y) const {
    static_assert(sizeof(X) <= 2, "QLayerNorm: int8 or int16 rows");
    const std::uint64_t e = std::uint64_t(std::uint32_t(eps(0))) | (std::uint64_t(std::uint32_t(eps(1))) << 32);
    constexpr std::int32_t lo = std::numeric_limits<Y>::min(), hi = std::numeric_limits<Y>::max();
    std::int32_t c[D];
    for (size_t r = 0; r < Rows; ++r, x += D, y += D) {
      std::int32_t sum = 0;
      if constexpr (Centred)
        for (size_t i = 0; i < D; ++i) sum += x[i];
      std::uint64_t ss = e;
      for (size_t i = 0; i < D; ++i) {
        c[i] = std::int32_t(Centred ? D : 1) * x[i] - sum;
        ss += std::uint64_t(std::int64_t(c[i]) * c[i]);
      }
      const kernels::Multiplier m = kernels::divide_by_root(root, ss);
      for (size_t i = 0; i < D; ++i) {
        const std::int32_t t = kernels::apply(c[i], m);
        std::int32_t v = kernels::apply(t * weight(i), requant[0]);
        if constexpr (Centred) v = kernels::clamp_i32(v, lo - bias(i), hi - bias(i)) + bias(i);  // |b| ≤ 2^30 (bounds.hpp): no overflow
        y[i] = Y(kernels::clamp_i32(v, lo, hi));
      }
    }
  }

  // A step of a quantized Sequential (stformer/quantized/quantize.hpp): in place on an int16
  // stream (RowLocal), its output a stream of its own at s_out (an encoder's final norm).
  static constexpr bool same_scale = false;
  using Ranges = NoRanges;
  void from_float(const Float& f, const Ranges&, float s_in, float s_out) { *this = quantize(f, s_in, s_out); }
};

template <size_t D, Epsilon Eps>
struct Int8Of<LayerNorm<D, Eps>> {
  using type = QLayerNorm<D, true, Eps>;
};
template <size_t D, Epsilon Eps>
struct Int8Of<RMSNorm<D, Eps>> {
  using type = QLayerNorm<D, false, Eps>;
};

}  // namespace stformer
