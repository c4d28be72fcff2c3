// QLinear<In, Out>: Linear<In, Out> in integers (post-training quantization, one scale per
// output channel c):
//   acc[r, c] = Σ_k x_q[r, k]·W_q[c, k] + b_q[c]                 int32, exact (kernels/int8.hpp)
//   y_q[r, c] = clamp(z + apply(acc[r, c], M_c), −128, 127)       int8 rows (z = −128 after ReLU,
//                                                                 0 otherwise)
//   h[r, c]   = clamp(h[r, c] + apply(acc[r, c], M_c), int16)     or into an int16 residual stream
//                                                                 (ReLU: apply(·) clamped at 0)
// for real values x ≈ s_x·x_q, W[c, :] ≈ s_w[c]·W_q[c, :] with W_q in [−127, 127] (symmetric),
// b_q[c] = round(b[c] / (s_x·s_w[c])), and M_c ≈ s_x·s_w[c] / s_y the fixed-point multiplier of
// the output's scale s_y. The input's and the output's scales belong to the blocks that own
// those activations, which make the bias and the multipliers for them (from_float).
// Tensors: weight I8 [Out, In], bias I32 [Out], weight_scale F32 [Out], requant.multiplier and
// requant.shift I32 [Out], in_scale and out_scale F32 [1] (s_x and s_y: M_c follows from them and
// weight_scale, and a load checks that it does).
//
// Also here, for every quantized block: Requant<C> (C fixed-point multipliers as two I32
// tensors) and host-side helpers of quantization (the basic ones, and Scale, in core/precision.hpp).
#pragma once

#include "../core/config.hpp"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "../blocks/linear.hpp"
#include "../kernels/int8.hpp"
#include "../core/params.hpp"
#include "../core/precision.hpp"

namespace stformer::inline STFORMER_ABI {

// C multipliers m_c ≈ q_c·2^(shift_c − 31) (kernels::Multiplier) as two tensors.
template <size_t C>
struct Requant {
  TensorOf<std::int32_t, C> multiplier, shift;

  template <class F, class... S>
  static constexpr void visit(const Path& at, F& f, S&... s) {
    f(at / "multiplier", Init{Init::zeros}, s.multiplier...);
    f(at / "shift", Init{Init::zeros}, s.shift...);
  }
  kernels::Multiplier operator[](size_t c) const { return {multiplier(c), int(shift(c))}; }
  std::int32_t apply(size_t c, std::int32_t x) const { return kernels::apply(x, (*this)[c]); }
  void set(size_t c, double m) {  // host side
    const kernels::Multiplier k = kernels::quantize_multiplier(m);
    multiplier(c) = k.q, shift(c) = k.shift;
  }
};

// b's multipliers from its stored scales (B::requants, core/precision.hpp; host side).
template <HasRequants B>
void set_requants(B& b) {
  B::requants(b, [](const char*, auto& r, const auto& m) {
    for (size_t c = 0; c < r.multiplier.size(); ++c) r.set(c, m(c));
  });
}

// ---- host-side quantization helpers (float and double; never called by a forward pass) ----
namespace quant {

// x_q = round(x / s) saturated to ±32767, in float: the quantization of a model's int16 input,
// the one float step before its integer forward pass (also on a target).
inline void quantize_input(const float* x, size_t n, float s, std::int16_t* y) {
  for (size_t i = 0; i < n; ++i) y[i] = std::int16_t(std::clamp(std::nearbyint(x[i] / s), -32767.0f, 32767.0f));
}
// max_c |b_c + Σ_k W[c, k]·x_k|: the largest output of a linear layer on one row x [In].
// (Lin: a Linear<In, Out>, or a LinearRef into packed projections.)
template <size_t In, size_t Out, class Lin>
float max_abs_linear(const Lin& f, const float* x) {
  const float *w = f.weight.data(), *b = f.bias.data();
  double m = 0;
  for (size_t c = 0; c < Out; ++c) {
    double y = b ? b[c] : 0.0;
    for (size_t k = 0; k < In; ++k) y += double(w[c * In + k]) * x[k];
    m = std::max(m, std::abs(y));
  }
  return float(m);
}
// A float tensor of X's shape (the float end of a quantized model's integer tensor X).
template <class X>
struct FloatOf {};
template <class E, size_t... S>
struct FloatOf<TensorOf<E, S...>> {
  using type = Tensor<S...>;
};
// W_q and s of a float matrix [rows, width], per row: s = max|W[r, :]|/127, W_q in [−127, 127].
template <size_t R, size_t W>
void quantize_rows(const float* w, TensorOf<std::int8_t, R, W>& q, Tensor<R>& scale) {
  for (size_t r = 0; r < R; ++r) {
    float m = 0;
    for (size_t k = 0; k < W; ++k) m = std::max(m, std::abs(w[r * W + k]));
    scale(r) = scale_for(m);
    for (size_t k = 0; k < W; ++k) q(r, k) = std::int8_t(to_int(w[r * W + k], scale(r), -127, 127));
  }
}
template <size_t R, size_t W>
void quantize_rows(const Tensor<R, W>& w, TensorOf<std::int8_t, R, W>& q, Tensor<R>& scale) {
  quantize_rows(w.data(), q, scale);
}

}  // namespace quant

template <size_t In, size_t Out>
struct QLinear {
  TensorOf<std::int8_t, Out, In> weight;
  TensorOf<std::int32_t, Out> bias;
  Tensor<Out> weight_scale;
  Requant<Out> requant;
  Scale in_scale, out_scale;

  template <class F, class... S>
  static constexpr void visit(const Path& at, F& f, S&... s) {
    f(at / "weight", Init{Init::zeros}, s.weight...);
    f(at / "bias", Init{Init::zeros}, s.bias...);
    f(at / "weight_scale", Init{Init::zeros}, s.weight_scale...);
    stformer::visit(at / "requant", f, s.requant...);
    f(at / "in_scale", Init{Init::zeros}, s.in_scale...);
    f(at / "out_scale", Init{Init::zeros}, s.out_scale...);
  }

  // M_c = s_in·s_w[c] / s_out
  template <class B, class F>
  static void requants(B& b, F&& f) {
    f("requant", b.requant, [&](size_t c) { return double(b.in_scale(0)) * b.weight_scale(c) / b.out_scale(0); });
  }
  // M_c for inputs at s_in and outputs at s_out (host side).
  void set_multipliers(float s_in, float s_out) {
    in_scale(0) = s_in, out_scale(0) = s_out;
    set_requants(*this);
  }

  // The layer f for inputs at scale s_in and outputs at scale s_out (host side); inputs with
  // zero point z_in (x = s_in·(x_q − z_in)) have −z_in·Σ_k W_q[c, k] in the bias.
  // (from_float fills this layer in place: for a layer too large to return on the stack.)
  // (f: a Linear<In, Out>, or a LinearRef into packed projections.)
  template <class Lin>
  static QLinear quantize(const Lin& f, float s_in, float s_out, std::int32_t z_in = 0) {
    QLinear q;
    q.from_float(f, s_in, s_out, z_in);
    return q;
  }
  template <class Lin>
  void from_float(const Lin& f, float s_in, float s_out, std::int32_t z_in = 0) {
    quant::quantize_rows<Out, In>(f.weight.data(), weight, weight_scale);
    const float* b = f.bias.data();
    for (size_t c = 0; c < Out; ++c) {
      std::int32_t w_sum = 0;
      for (size_t k = 0; k < In; ++k) w_sum += weight(c, k);
      bias(c) = quant::to_int(b ? b[c] : 0.0f, double(s_in) * weight_scale(c), INT32_MIN / 2, INT32_MAX / 2) - z_in * w_sum;
    }
    set_multipliers(s_in, s_out);
  }

  // acc [Rows, Out] = x_q Wᵀ + b_q for Rows rows x [Rows, In] (int8, or int16 for a model's input)
  template <size_t Rows, class X>
  void accumulate(const X* x, std::int32_t* acc) const {
    kernels::qmatmul_nt<Rows, Out, In>(x, In, weight.data(), In, acc, Out, bias.data());
  }

  // y [Rows, Out] (int8, or int16) = the layer on x; acc: [Rows, Out] of scratch. Relu: max(·, 0)
  // with the outputs' zero point at their type's minimum (int8: y_q = y/s_y − 128, 256 steps
  // from 0 to the range's top).
  template <size_t Rows, bool Relu = false, class X, class Y>
  void apply(const X* x, std::int32_t* acc, Y* y) const {
    static_assert(std::is_same_v<Y, std::int8_t> || std::is_same_v<Y, std::int16_t>, "QLinear::apply: int8 or int16 outputs");
    constexpr std::int32_t lo = std::numeric_limits<Y>::min(), hi = std::numeric_limits<Y>::max();
    kernels::qlinear<Rows, Out, In>(x, In, weight.data(), In, bias.data(), {requant.multiplier.data(), requant.shift.data(), Relu ? lo : 0, lo, hi},
                                    y, acc);
  }

  // h [Rows, Out] (int16) += the layer on x, or its ReLU when Relu, or h = the layer when Set
  // (the first layer of a residual stream), saturating; acc: [Rows, Out] of scratch.
  template <size_t Rows, bool Set = false, bool Relu = false, class X>
  void add_to(const X* x, std::int32_t* acc, std::int16_t* h) const {
    accumulate<Rows>(x, acc);
    // the increment may exceed the stream's range when the sum does not (a large step from the
    // range's far side): only the sum is saturated
    kernels::requantize(acc, Rows, Out, requant.multiplier.data(), requant.shift.data(), 0, Relu ? 0 : 2 * INT16_MIN, 2 * INT16_MAX + 1, acc);
    for (size_t i = 0; i < Rows * Out; ++i) h[i] = std::int16_t(kernels::clamp_i32(acc[i] + (Set ? 0 : h[i]), INT16_MIN, INT16_MAX));
  }

  // residual [Rows, Out] (int16) += the layer on x [Rows, In] (or its ReLU), T rows at a time
  // through tile [T, Out]: Linear::apply_tiled's integer form (Add only).
  template <size_t Rows, size_t T, bool Relu = false, bool Add = false, class X>
  void apply_tiled(const X* x, std::int16_t* residual, std::int32_t* tile) const {
    static_assert(Add, "QLinear::apply_tiled: into a residual stream only");
    for_tiles<Rows, T>([&]<size_t R>(size_t i) { add_to<R, false, Relu>(x + i * In, tile, residual + i * Out); });
  }

  // A step of a quantized Sequential: y = the layer on x, int16 streams at s_in and s_out; its
  // scratch the int32 accumulators of a tile of T rows and C of the Out columns, [T, C]. The
  // tile may take max(Room, B·N·(In + Out)) bytes: a quarter of the float layer's input and
  // output (4·B·N·(In + Out) bytes), so that the step's phase (2·B·N·(In + Out) bytes of int16
  // streams and the tile) stays below the float step's. All Out columns when T₀ rows of them
  // fit, T₀ = qtile_rows(B·N), and then as many rows as Room holds, up to B·N; else T₀ rows and
  // the columns that fit, a multiple of 16 (a language model's head: 33,278 columns of one row).
  // The sums are exact, so every tile gives the same integers.
  using Float = Linear<In, Out>;
  static constexpr bool same_scale = false;
  static constexpr bool row_local = true;  // step::row_local
  using Ranges = NoRanges;
  template <Init::Kind K, Bias Bi>
  void from_float(const Linear<In, Out, K, Bi>& f, const Ranges&, float s_in, float s_out) {
    from_float(f, s_in, s_out);
  }
  template <size_t B, size_t N>
  using Input = TensorOf<std::int16_t, B, N, In>;
  template <size_t B, size_t N>
  using Output = TensorOf<std::int16_t, B, N, Out>;
  static constexpr size_t tile_budget(size_t rows, size_t room) { return std::max(room, rows * (In + Out)); }
  static constexpr size_t tile_rows(size_t rows, size_t room) {
    const size_t t0 = qtile_rows(rows);
    return t0 * Out * sizeof(std::int32_t) <= tile_budget(rows, room) ? rows_in_room(rows, t0, room, Out * sizeof(std::int32_t)) : t0;
  }
  static constexpr size_t tile_columns(size_t rows, size_t room) {
    const size_t t0 = qtile_rows(rows);
    if (t0 * Out * sizeof(std::int32_t) <= tile_budget(rows, room)) return Out;
    const size_t c = tile_budget(rows, room) / (t0 * sizeof(std::int32_t));
    return c >= 16 ? c / 16 * 16 : std::max<size_t>(c, 1);
  }
  template <size_t B, size_t N, size_t Room>
  using Scratch = TensorOf<std::int32_t, tile_rows(B * N, Room), tile_columns(B * N, Room)>;
  template <size_t B, size_t N, size_t T, size_t C, class Pool>
  void run(const Input<B, N>& x, Output<B, N>& y, TensorOf<std::int32_t, T, C>& acc, const Mask<B, N>&, Pool&&) const {
    run_tiles<B * N, T, C>(*this, x.data(), y.data(), acc.data());
  }
  // y [Rows, Out] = layer on x [Rows, In], T rows and C columns at a time (layer: this, or a
  // QFineLinear, with add_to<R, true> and columns<R, K>).
  template <size_t Rows, size_t T, size_t C, class Layer>
  static void run_tiles(const Layer& layer, const std::int16_t* x, std::int16_t* y, std::int32_t* acc) {
    if constexpr (C == Out)
      for_tiles<Rows, T>([&]<size_t R>(size_t i) { layer.template add_to<R, true>(x + i * In, acc, y + i * Out); });
    else
      for_tiles<Rows, T>([&]<size_t R>(size_t i) {
        for_tiles<Out, C>([&]<size_t K>(size_t c) { layer.template columns<R, K>(x + i * In, c, acc, y + i * Out); });
      });
  }

  // y[r, c0 + j] = clamp(apply(acc[r, j], M_{c0+j}), int16) for the K columns from c0 of Rows
  // rows (y's rows Out apart; acc [Rows, K]): add_to<Rows, true>'s integers, a part at a time;
  // not Set: y[r, c0 + j] = clamp(y[r, c0 + j] + apply(acc[r, j], M_{c0+j}), int16), add_to<Rows>'s.
  template <size_t Rows, size_t K, bool Set = true>
  void columns(const std::int16_t* x, size_t c0, std::int32_t* acc, std::int16_t* y) const {
    kernels::qmatmul_nt<Rows, K, In>(x, In, weight.data() + c0 * In, In, acc, K, bias.data() + c0);
    for (size_t r = 0; r < Rows; ++r) {
      std::int16_t* h = y + r * Out + c0;
      if constexpr (Set) {
        kernels::requantize(acc + r * K, 1, K, requant.multiplier.data() + c0, requant.shift.data() + c0, 0, INT16_MIN, INT16_MAX, h);
      } else {
        std::int32_t* a = acc + r * K;
        kernels::requantize(a, 1, K, requant.multiplier.data() + c0, requant.shift.data() + c0, 0, 2 * INT16_MIN, 2 * INT16_MAX + 1, a);
        for (size_t j = 0; j < K; ++j) h[j] = std::int16_t(kernels::clamp_i32(a[j] + h[j], INT16_MIN, INT16_MAX));
      }
    }
  }
};
template <size_t In, size_t Out, Init::Kind K, Bias Bi>
struct Int8Of<Linear<In, Out, K, Bi>> {
  using type = QLinear<In, Out>;
};

// QFineLinear<In, Out>: a linear layer into an int16 stream whose weights come as two int8
// tensors, W ≈ s_w·W_q + s_r·R_q per output channel: `coarse` is the QLinear of W, `fine` the
// QLinear (no bias) of its rounding error W − s_w·W_q, so about 7 more bits of weight for twice
// the int8 weights and a second product:
//   h[r, c] = clamp(h[r, c] + apply(acc[r, c], M_c) + apply(acc_r[r, c], M_r,c), int16)
// For a model's first and last layers where int8 weights alone cost accuracy (the set model's:
// its output, a point, is a sum of terms that cancel, and each weight's rounding moves it).
// Tensors: coarse.*, fine.* (QLinear's).
template <size_t In, size_t Out>
struct QFineLinear {
  QLinear<In, Out> coarse, fine;

  template <class F, class... S>
  static constexpr void visit(const Path& at, F& f, S&... s) {
    stformer::visit(at / "coarse", f, s.coarse...);
    stformer::visit(at / "fine", f, s.fine...);
  }

  template <Init::Kind K, Bias Bi>
  static QFineLinear quantize(const Linear<In, Out, K, Bi>& f, float s_in, float s_out) {
    QFineLinear q;
    q.coarse = QLinear<In, Out>::quantize(f, s_in, s_out);
    Linear<In, Out, K> rest;
    for (size_t c = 0; c < Out; ++c) {
      rest.bias(c) = 0;
      for (size_t k = 0; k < In; ++k) rest.weight(c, k) = f.weight(c, k) - q.coarse.weight_scale(c) * float(q.coarse.weight(c, k));
    }
    q.fine = QLinear<In, Out>::quantize(rest, s_in, s_out);
    return q;
  }

  // h [Rows, Out] (int16) += the layer on x, or h = the layer when Set; acc: [Rows, Out] of scratch.
  template <size_t Rows, bool Set = false, class X>
  void add_to(const X* x, std::int32_t* acc, std::int16_t* h) const {
    coarse.template add_to<Rows, Set>(x, acc, h);
    fine.template add_to<Rows>(x, acc, h);
  }

  // A step of a quantized Sequential (stformer/quantized/quantize.hpp), as QLinear's: quantize
  // gives a model's first and last linear layers this form.
  static constexpr bool same_scale = false;
  static constexpr bool row_local = true;  // step::row_local
  using Ranges = NoRanges;
  template <Init::Kind K, Bias Bi>
  void from_float(const Linear<In, Out, K, Bi>& f, const Ranges&, float s_in, float s_out) {
    *this = quantize(f, s_in, s_out);
  }
  template <size_t B, size_t N>
  using Input = TensorOf<std::int16_t, B, N, In>;
  template <size_t B, size_t N>
  using Output = TensorOf<std::int16_t, B, N, Out>;
  // Its scratch tiled as QLinear's (a quarter of the float layer's input and output at least),
  // the coarse and fine products of a tile of columns one after the other: the same integers.
  template <size_t B, size_t N, size_t Room>
  using Scratch = typename QLinear<In, Out>::template Scratch<B, N, Room>;
  template <size_t B, size_t N, size_t T, size_t C, class Pool>
  void run(const Input<B, N>& x, Output<B, N>& y, TensorOf<std::int32_t, T, C>& acc, const Mask<B, N>&, Pool&&) const {
    QLinear<In, Out>::template run_tiles<B * N, T, C>(*this, x.data(), y.data(), acc.data());
  }
  // y's K columns from c0 = the coarse product's, then the fine one's added (QLinear::columns).
  template <size_t Rows, size_t K>
  void columns(const std::int16_t* x, size_t c0, std::int32_t* acc, std::int16_t* y) const {
    coarse.template columns<Rows, K>(x, c0, acc, y);
    fine.template columns<Rows, K, false>(x, c0, acc, y);
  }
};

}  // namespace stformer
