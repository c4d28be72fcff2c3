// QActivation<Act, D>: an activation step (ReLU<D>, GELU<D>, GELUTanh<D>, SiLU<D>, Tanh<D>) on an
// int16 stream, x = s_x·x_q in, y = s_y·y_q out, in fixed point: Act at 257 knots spread over the
// input's int16 range, and linear interpolation between two knots:
//   u = x_q + 32768 (0 … 65535),  i = u >> 8,  f = u & 255          (256 segments of 256 steps)
//   y_q = clamp(t_i + ((t_{i+1} − t_i)·f + 128) >> 8)                 (int32; |t_{i+1} − t_i|·f < 2^25)
//   t_i = round(Act(s_x·(256·i − 32768)) / s_y)                      (int32, host side: from_float)
// The error, in output steps: the interpolation's, at most h²/8 · max|Act''| / s_y with
// h = 256·s_x the knots' spacing (|Act''| ≤ 0.80 for GELU and GELU (tanh), 0.50 for SiLU, 0.77
// for Tanh: 4/(3√3); ReLU is exact: 0 is a knot), plus the knots' and the output's rounding (one
// step). On streams of calibrated scales (quant::int16_scale) around max|x| = 8, measured at
// every int16 input (test_quantized): within 1.9 output steps for GELU and GELU (tanh), 1.8 for
// SiLU (bounds 2.6 and 2.0), within 24.9 for Tanh (bound 25.6: its output's range, ±1, is an
// eighth of its input's, so its steps are finer), a step being 1/16384 of the output's
// calibrated range. Inside a FeedForward the int8 forms of these
// activations are its 256-entry table instead (blocks/feedforward.hpp).
// Tensors: table I32 [257] (t).
#pragma once

#include "../core/config.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "../blocks/activation.hpp"
#include "linear.hpp"

namespace stformer::inline STFORMER_ABI {

template <class Kind, size_t D>
struct QActivation : RowLocal<QActivation<Kind, D>, D, std::int16_t> {
  using Float = Activation<Kind, D>;
  TensorOf<std::int32_t, 257> table;

  template <class F, class... S>
  static constexpr void visit(const Path& at, F& f, S&... s) {
    f(at / "table", Init{Init::zeros}, s.table...);
  }

  // The knots of Act for inputs at scale s_in, outputs at s_out (host side).
  static QActivation quantize(float s_in, float s_out) {
    QActivation q;
    for (size_t i = 0; i <= 256; ++i) {
      const double x = double(s_in) * (double(i) * 256.0 - 32768.0);
      q.table(i) = std::int32_t(std::clamp<double>(std::nearbyint(Kind::f(float(x)) / double(s_out)), -65536, 65536));
    }
    return q;
  }

  // y [Rows, D] = Act of x [Rows, D] (int16 both); y may be x.
  template <size_t Rows>
  void apply(const std::int16_t* x, std::int16_t* y) const {
    for (size_t j = 0; j < Rows * D; ++j) {
      const std::int32_t u = std::int32_t(x[j]) + 32768, i = u >> 8, f = u & 255;
      const std::int32_t t0 = table(size_t(i)), t1 = table(size_t(i) + 1);
      y[j] = std::int16_t(kernels::clamp_i32(t0 + (((t1 - t0) * f + 128) >> 8), -32768, 32767));
    }
  }

  // A step of a quantized Sequential (stformer/quantized/quantize.hpp): in place on an int16
  // stream (RowLocal), its output a stream of its own at s_out.
  static constexpr bool same_scale = false;
  using Ranges = NoRanges;
  void from_float(const Float&, const Ranges&, float s_in, float s_out) { *this = quantize(s_in, s_out); }
};

// ReLU<D>, GELU<D>, GELUTanh<D>, SiLU<D>, Tanh<D>: each an Activation<Kind, D>.
template <template <size_t> class Step, size_t D>
  requires std::is_base_of_v<Activation<typename Step<D>::Kind, D>, Step<D>>
struct Int8Of<Step<D>> {
  using type = QActivation<typename Step<D>::Kind, D>;
};

}  // namespace stformer
