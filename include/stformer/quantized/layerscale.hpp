// QLayerScale<D>: LayerScale<D> (y = γ ⊙ x) on int16 streams, x = s_x·x_q in, y = s_y·y_q out,
// one multiplier per feature c:
//   γ_q[c] = round(γ_c / s_c) = ±127 (0 for γ_c = 0),  s_c = |γ_c| / 127        (γ exact up to M_c)
//   y_q[r, c] = clamp(apply(x_q[r, c]·γ_q[c], M_c), int16),  M_c = s_x·s_c / s_y
// so the only roundings are M_c's (31 bits) and the output's. γ's sign lives in γ_q: the
// multipliers stay positive.
// Tensors: gamma I8 [D] (γ_q), gamma_scale F32 [D] (s_c), requant (Requant<D>: M_c), in_scale and
// out_scale F32 [1] (s_x, s_y: a load checks M_c against them).
#pragma once

#include "../core/config.hpp"

#include <cmath>
#include <cstdint>

#include "../blocks/layerscale.hpp"
#include "linear.hpp"

namespace stformer::inline STFORMER_ABI {

template <size_t D>
struct QLayerScale : RowLocal<QLayerScale<D>, D, std::int16_t> {
  using Float = LayerScale<D>;
  TensorOf<std::int8_t, D> gamma;
  Tensor<D> gamma_scale;
  Requant<D> requant;
  Scale in_scale, out_scale;

  template <class F, class... S>
  static constexpr void visit(const Path& at, F& f, S&... s) {
    f(at / "gamma", Init{Init::zeros}, s.gamma...);
    f(at / "gamma_scale", Init{Init::zeros}, s.gamma_scale...);
    stformer::visit(at / "requant", f, s.requant...);
    f(at / "in_scale", Init{Init::zeros}, s.in_scale...);
    f(at / "out_scale", Init{Init::zeros}, s.out_scale...);
  }
  // M_c = s_x·s_c / s_y
  template <class B, class F>
  static void requants(B& b, F&& f) {
    f("requant", b.requant, [&](size_t c) { return double(b.in_scale(0)) * b.gamma_scale(c) / b.out_scale(0); });
  }

  // y [Rows, D] = γ ⊙ x [Rows, D] (int16 both; y may be x).
  template <size_t Rows>
  void apply(const std::int16_t* x, std::int16_t* y) const {
    for (size_t r = 0; r < Rows; ++r, x += D, y += D)
      for (size_t c = 0; c < D; ++c) y[c] = std::int16_t(kernels::clamp_i32(requant.apply(c, std::int32_t(x[c]) * gamma(c)), INT16_MIN, INT16_MAX));
  }

  // A step of a quantized Sequential (stformer/quantized/quantize.hpp): in place on an int16
  // stream, its output a stream of its own (a residual body's last step: the residual stream's).
  static constexpr bool same_scale = false;
  using Ranges = NoRanges;
  void from_float(const Float& f, const Ranges&, float s_in, float s_out) {
    for (size_t c = 0; c < D; ++c) {
      gamma_scale(c) = quant::scale_for(std::abs(f.gamma(c)));
      gamma(c) = std::int8_t(quant::to_int(f.gamma(c), gamma_scale(c), -127, 127));
    }
    in_scale(0) = s_in, out_scale(0) = s_out;
    set_requants(*this);
  }
  // Into a stream (a residual body's last step): h = clamp(h + apply(x_q·γ_q, M_c), int16).
  template <size_t B, size_t N, class Pool>
  void run_add(const TensorOf<std::int16_t, B, N, D>& x, TensorOf<std::int16_t, B, N, D>& h, Nothing, const Mask<B, N>&, Pool&&) const {
    for (size_t r = 0; r < B * N; ++r)
      for (size_t c = 0; c < D; ++c) {
        std::int16_t& y = h.data()[r * D + c];
        y = std::int16_t(kernels::clamp_i32(y + requant.apply(c, std::int32_t(x.data()[r * D + c]) * gamma(c)), INT16_MIN, INT16_MAX));
      }
  }
};
template <size_t D>
struct Int8Of<LayerScale<D>> {
  using type = QLayerScale<D>;
};

}  // namespace stformer
