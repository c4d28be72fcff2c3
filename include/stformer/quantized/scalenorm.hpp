// QScaleNorm<D>: ScaleNorm<D> on integer rows, y = g·x / ‖x‖, with no floating point:
//   y_q[i] = clamp(apply(x_q[i], M / ‖x_q‖), −128, 127)      M ≈ g / s_y (the output's scale)
// The input's scale cancels (x/‖x‖ = x_q/‖x_q‖), so rows come at any scale: int16 residual
// streams or int8 rows. M/‖x_q‖ is an integer reciprocal square root per row
// (kernels::divide_by_root: a table and three Newton steps, no division). A row of zeros gives
// zeros, as in float; a nonzero row whose real norm is below ScaleNorm's 1e-5 (only when its
// scale is) is normalised all the same.
// Tensors: g F32 [1] (the float block's), out_scale F32 [1] (s_y), requant I32 [1] (M).
#pragma once

#include "../core/config.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "../blocks/scalenorm.hpp"
#include "linear.hpp"

namespace stformer::inline STFORMER_ABI {

template <size_t D>
struct QScaleNorm : RowLocal<QScaleNorm<D>, D, std::int16_t> {
  Tensor<1> g;
  Scale out_scale;
  Requant<1> requant;

  template <class F, class... S>
  static constexpr void visit(const Path& at, F& f, S&... s) {
    f(at / "g", Init{Init::zeros}, s.g...);
    f(at / "out_scale", Init{Init::zeros}, s.out_scale...);
    stformer::visit(at / "requant", f, s.requant...);
  }

  // M = g / s_out
  template <class B, class F>
  static void requants(B& b, F&& f) {
    f("requant", b.requant, [&](size_t) { return double(b.g(0)) / b.out_scale(0); });
  }
  void set_multipliers() { set_requants(*this); }

  // The norm f with outputs at scale s_out (host side).
  static QScaleNorm quantize(const ScaleNorm<D>& f, float s_out) {
    QScaleNorm q;
    q.g(0) = f.g(0);
    q.out_scale(0) = s_out;
    q.set_multipliers();
    return q;
  }

  // A step of a quantized Sequential (stformer/quantized/quantize.hpp): in place on an int16
  // stream, row by row (RowLocal: a row is read whole before it is written), its output a
  // stream of its own at s_out.
  using Float = ScaleNorm<D>;
  static constexpr bool same_scale = false;
  using Ranges = NoRanges;
  void from_float(const Float& f, const Ranges&, float, float s_out) { *this = quantize(f, s_out); }

  // y [Rows, D] (int8, or int16) = the norm of x [Rows, D] (int16 or int8)
  // x_i is taken as x_i·2^up (up = 31 − its bits) with the shift lowered to match: the high
  // multiply then keeps 31 bits of x_i·M/‖x‖ where x_i alone (a few bits: ScaleNorm's inputs
  // need not be large) would round it off early.
  template <size_t Rows, class X, class Y>
  void apply(const X* x, Y* y) const {
    static_assert(sizeof(X) <= 2, "QScaleNorm: int8 or int16 rows");
    constexpr int up = 31 - 8 * int(sizeof(X));
    std::int32_t wide[D];
    for (size_t r = 0; r < Rows; ++r, x += D, y += D) {
      std::uint64_t ss = 0;
      for (size_t i = 0; i < D; ++i) ss += std::uint64_t(std::int64_t(x[i]) * x[i]);
      const kernels::Multiplier m = kernels::divide_by_root(requant[0], ss);
      for (size_t i = 0; i < D; ++i) wide[i] = std::int32_t(std::uint32_t(std::int32_t(x[i])) << up);
      // a shift below −31 leaves |x_i·2^up·q·2^(shift − 31)| < 2^31·2^31·2^−63: every output is 0
      const kernels::Multiplier wide_m = m.shift - up < -31 ? kernels::Multiplier{} : kernels::Multiplier{m.q, m.shift - up};
      kernels::requantize(wide, D, wide_m, 0, std::numeric_limits<Y>::min(), std::numeric_limits<Y>::max(), y);
    }
  }
};

// The bound of ScaleNorm's entries: |g| (g·x/‖x‖ has no entry larger), the scale of its rows
// where a block writes them as int16 (QAttend).
namespace quant {
template <size_t D>
float row_bound(const ScaleNorm<D>& f) {
  return std::abs(f.g(0));
}
}  // namespace quant

template <size_t D>
struct Int8Of<ScaleNorm<D>> {
  using type = QScaleNorm<D>;
};

}  // namespace stformer
