// QFeedForward<D, F>: FeedForward in integers, in place on an int16 stream h or added into one:
// fc1 to int8 hidden rows at hidden_scale, zero point −128 (ReLU's outputs are ≥ 0: all 256
// steps for them; the ReLU is the clamp at −128), fc2 (whose bias holds the zero point's
// 128·Σ W_q) into the stream. Tensors: fc1.*, fc2.*, hidden_scale (F32 [1]).
#pragma once

#include "../config.hpp"

#include <algorithm>
#include <cstdint>

#include "../blocks/feedforward.hpp"
#include "../precision.hpp"
#include "linear.hpp"

namespace stformer::inline STFORMER_ABI {

template <size_t D, size_t F>
struct QFeedForward {
  QLinear<D, F> fc1;
  QLinear<F, D> fc2;
  Scale hidden_scale;

  template <class Fn, class... S>
  static constexpr void visit(const Path& at, Fn& f, S&... s) {
    stformer::visit(at / "fc1", f, s.fc1...);
    stformer::visit(at / "fc2", f, s.fc2...);
    f(at / "hidden_scale", Init{Init::zeros}, s.hidden_scale...);
  }

  static QFeedForward quantize(const FeedForward<D, F>& f, float hidden_max, float s_in, float s_out) {
    QFeedForward q;
    q.hidden_scale(0) = quant::scale_for(hidden_max, 255);
    q.fc1 = QLinear<D, F>::quantize(f.fc1, s_in, q.hidden_scale(0));
    q.fc2 = QLinear<F, D>::quantize(f.fc2, q.hidden_scale(0), s_out, -128);
    return q;
  }

  // A step of a quantized Sequential (stformer/quantize.hpp): h ← FFN(h) in place on an int16
  // stream, its output a stream of its own at s_out; its scratch T rows of hid and acc.
  using Float = FeedForward<D, F>;
  static constexpr bool same_scale = false;
  struct Ranges {
    float hidden = 0;
    template <class A, class X, class Y>
    void observe(const Float&, const A& acts, const X&, const Y&) {
      hidden = std::max(hidden, quant::max_abs(acts.fc1.out));
    }
  };
  void from_float(const Float& f, const Ranges& r, float s_in, float s_out) { *this = quantize(f, r.hidden, s_in, s_out); }
  template <size_t B, size_t N>
  using Input = TensorOf<std::int16_t, B, N, D>;
  static constexpr bool in_place = true;
  template <size_t T>
  struct Tile {
    TensorOf<std::int8_t, T, F> hid;
    TensorOf<std::int32_t, T, F> acc;
  };
  static constexpr size_t tile_row_bytes = F * 5;
  template <size_t B, size_t N, size_t Room>
  using Scratch = Tile<rows_in_room(B * N, qtile_least(B * N), Room, tile_row_bytes)>;
  template <size_t B, size_t N, size_t T>
  void forward_in_place(Input<B, N>& h, Tile<T>& w) const {
    for_tiles<B * N, T>([&]<size_t R>(size_t i) {  // a tile's rows are read whole before they are written
      fc1.template apply<R, true>(h.data() + i * D, w.acc.data(), w.hid.data());
      fc2.template add_to<R, true>(w.hid.data(), w.acc.data(), h.data() + i * D);
    });
  }

  // In a composite block: residual [Rows, D] += FFN(x [Rows, D]), T rows at a time.
  template <size_t Rows, size_t T>
  void add_tiled(const std::int8_t* x, std::int16_t* residual, Tile<T>& w) const {
    for_tiles<Rows, T>([&]<size_t R>(size_t i) {
      fc1.template apply<R, true>(x + i * D, w.acc.data(), w.hid.data());
      fc2.template add_to<R>(w.hid.data(), w.acc.data(), residual + i * D);
    });
  }
};

template <size_t D, size_t F>
struct Int8Of<FeedForward<D, F>> {
  using type = QFeedForward<D, F>;
};

}  // namespace stformer
