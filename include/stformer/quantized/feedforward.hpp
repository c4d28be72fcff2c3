// QFeedForward: the integer form of a chain Linear<D, F> → Activation<Act, F> → Linear<F, D>
// (FeedForward, blocks/feedforward.hpp, or any such chain) as one step, on an int16 stream (or
// int16 or int8 rows x, quantized/rows.hpp): fc1 to int8 hidden rows at hidden_scale, fc2
// (whose bias holds the hidden rows' zero point z: −z·Σ W_q) into the stream.
//   ReLU: fc1's outputs with z = −128 (ReLU's outputs are ≥ 0: all 256 steps for them; the ReLU
//     is the clamp at −128).
//   GELU, GELUTanh, SiLU: fc1's outputs a_q symmetric at s_a (from calibration), then a table of
//     the 256 values: hid = table[a_q] = round(Act(s_a·a_q) / s_g) + z, s_g = (max − min)/255 of
//     Act over the table, z its zero point. Exact for the int8 input: the one rounding is the
//     output's (half a step, s_g/2).
// In place on the stream, T rows at a time through int8 hidden rows [T, F] and their int32
// accumulators; into a stream (a residual's body: h += FFN(x), x only read, tile by tile: x may
// be h itself). Tensors: the layers' integer tensors under the chain's names, hidden_scale
// (F32 [1]: s_g, or ReLU's) and, but for ReLU, table (I8 [256]) and act_scale (s_a).
#pragma once

#include "../core/config.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "../blocks/feedforward.hpp"
#include "linear.hpp"

namespace stformer::inline STFORMER_ABI {

namespace quant {
// The sizes of a linear layer with a bias.
template <class S>
struct LinearOf {};
template <size_t In, size_t Out, Init::Kind K>
struct LinearOf<Linear<In, Out, K, Bias::yes>> {
  static constexpr size_t in = In, out = Out;
};
// A chain of a linear layer D → F, an activation on F and a linear layer F → D (blocks L1, Act, L2).
template <class L1, class Act, class L2>
inline constexpr bool feed_forward_blocks = false;
template <size_t D, size_t F, Init::Kind K1, Init::Kind K2, class Act>
  requires std::is_base_of_v<Activation<typename Act::Kind, F>, Act>
inline constexpr bool feed_forward_blocks<Linear<D, F, K1, Bias::yes>, Act, Linear<F, D, K2, Bias::yes>> = true;
template <class S1, class A, class S2>
concept feed_forward = feed_forward_blocks<typename step::Info<S1>::Block, typename step::Info<A>::Block, typename step::Info<S2>::Block>;
}  // namespace quant

template <class S1, class A, class S2>
struct QFeedForward {
  using Float = Sequential<S1, A, S2>;
  using Kind = typename step::Info<A>::Block::Kind;
  static constexpr size_t D = quant::LinearOf<typename step::Info<S1>::Block>::in, F = quant::LinearOf<typename step::Info<S1>::Block>::out;
  static constexpr bool relu = std::is_same_v<Kind, act::ReLU>;
  typename Int8Of<Linear<D, F>>::type fc1;
  typename Int8Of<Linear<F, D>>::type fc2;
  Scale hidden_scale;
  struct Table {
    TensorOf<std::int8_t, 256> values;
    Scale act_scale;
  };
  struct NoTable {};  // (not Nothing: two empty members of one type would take a byte each)
  [[no_unique_address]] std::conditional_t<relu, NoTable, Table> act;

  template <class Fn, class... S>
  static constexpr void visit(const Path& at, Fn& f, S&... s) {
    step::visit_part<S1>(at, 0, true, f, s.fc1...);
    step::visit_part<S2>(at, 2, true, f, s.fc2...);
    f(at / "hidden_scale", Init{Init::zeros}, s.hidden_scale...);
    if constexpr (!relu) {
      f(at / "table", Init{Init::zeros}, s.act.values...);
      f(at / "act_scale", Init{Init::zeros}, s.act.act_scale...);
    }
  }

  // The scratch of T rows: the hidden rows [T, F] and the products' int32 accumulators.
  template <size_t T>
  struct Tile {
    TensorOf<std::int8_t, T, F> hid;
    TensorOf<std::int32_t, T, F> acc;
  };
  static constexpr size_t tile_row_bytes = F * 5;

  // FFN on Rows rows of x, T rows at a time: hid [T, F] = Act(x_t W1ᵀ + b1), then y_t ← hid W2ᵀ
  // + b2 (y may be x: a tile's rows are read whole before they are written), or y_t += it when
  // Add (the stream's sum saturated).
  template <size_t Rows, size_t T, bool Add = false, class X>
  void apply_tiled(const X* x, std::int16_t* y, Tile<T>& w) const {
    for_tiles<Rows, T>([&]<size_t R>(size_t i) {
      fc1.template apply<R, relu>(x + i * D, w.acc.data(), w.hid.data());
      if constexpr (!relu)
        for (size_t j = 0; j < R * F; ++j) w.hid.data()[j] = act.values(size_t(w.hid.data()[j] + 128));
      fc2.template add_to<R, !Add>(w.hid.data(), w.acc.data(), y + i * D);
    });
  }

  // A step of a quantized Sequential, in place on the stream [B, N, D] (its output a stream of
  // its own), its scratch a tile of as many rows as Room holds; or into a stream.
  template <size_t B, size_t N>
  using Input = TensorOf<std::int16_t, B, N, D>;
  static constexpr bool in_place = true, row_local = true, adds_from_stream = true;
  template <size_t B, size_t N, size_t Room>
  using Scratch = Tile<rows_in_room(B * N, qtile_least(B * N), Room, tile_row_bytes)>;
  template <size_t B, size_t N, size_t T, class Pool>
  void forward_in_place(Input<B, N>& h, Tile<T>& w, const Mask<B, N>&, Pool&&) const {
    apply_tiled<B * N, T>(h.data(), h.data(), w);
  }
  template <size_t B, size_t N, size_t T, class X, class Pool>
  void run_add(const X& x, Input<B, N>& h, Tile<T>& w, const Mask<B, N>&, Pool&&) const {
    apply_tiled<B * N, T, true>(x.data(), h.data(), w);
  }

  // Made from the float chain: the hidden rows' scale from their calibration range (ReLU's
  // outputs, or the activation's inputs: fc1's record's output), the input's and the output's
  // from the streams'.
  static constexpr bool same_scale = false;
  struct Ranges {
    float hidden = 0;
    template <class Acts, class X, class Y>
    void observe(const Float&, const Acts& acts, const X&, const Y&) {
      hidden = std::max(hidden, quant::max_abs(acts.template at<0>().out));
    }
  };
  void from_float(const Float& f, const Ranges& r, float s_in, float s_out) {
    const auto &f1 = f.template get<0>(), &f2 = f.template get<2>();
    if constexpr (relu) {
      hidden_scale(0) = quant::scale_for(r.hidden, 255);
      fc1.from_float(f1, s_in, hidden_scale(0));
      fc2.from_float(f2, hidden_scale(0), s_out, -128);
    } else {
      const float s_a = act.act_scale(0) = quant::scale_for(r.hidden);
      fc1.from_float(f1, s_in, s_a);
      double lo = 0, hi = 0, value[256];
      for (int a = -128; a < 128; ++a) {
        value[a + 128] = Kind::f(s_a * float(a));
        lo = std::min(lo, value[a + 128]), hi = std::max(hi, value[a + 128]);
      }
      hidden_scale(0) = float(hi > lo ? (hi - lo) / 255 : 1.0);
      const std::int32_t z = -128 - std::int32_t(std::nearbyint(lo / hidden_scale(0)));
      for (size_t i = 0; i < 256; ++i) act.values(i) = std::int8_t(std::clamp<std::int32_t>(quant::to_int(value[i], hidden_scale(0), -32768, 32767) + z, -128, 127));
      fc2.from_float(f2, hidden_scale(0), s_out, z);
    }
  }
};

template <class S1, class A, class S2>
  requires quant::feed_forward<S1, A, S2>
struct Int8Of<Sequential<S1, A, S2>> {
  using type = QFeedForward<S1, A, S2>;
};

}  // namespace stformer
