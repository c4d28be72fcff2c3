// The feed-forward layer written by hand, at a precision P (float32, or int8 on int16 streams),
// as the library had it before FeedForward was a declaration (blocks/feedforward.hpp): the
// reference the declared layer and its integer form (QFeedForward) are held to, and the layer
// the hand-written blocks (written_encoder.hpp, written_decoder.hpp) are built of.
//   y = Act(x W1ᵀ + b1) W2ᵀ + b2, in tiles of rows through hid [T, F]; in integers fc1 to int8
//   hidden rows (ReLU's zero point −128, or a table of the activation), fc2 into the stream.
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "stformer/stformer.hpp"

namespace written {
using namespace stformer;

// A hand-written block's precision: what its leaves are and what flows between them.
namespace precision {
struct float32 {
  static constexpr bool integer = false;
  template <class Leaf, size_t Bits = 8>
  using Of = Leaf;
  template <size_t Bits>
  using Row = float;
  using Stream = float;
  static constexpr size_t tile_rows(size_t queries, size_t) { return stformer::tile_rows(queries); }
  static constexpr size_t tile_least(size_t rows) { return stformer::tile_rows(rows); }
};
struct int8 {
  static constexpr bool integer = true;
  template <class Leaf, size_t Bits = 8>
  using Of = typename IntegerForm<Leaf, Bits>::type;
  template <size_t Bits>
  using Row = std::conditional_t<Bits == 8, std::int8_t, std::int16_t>;
  using Stream = std::int16_t;
  static constexpr size_t tile_rows(size_t queries, size_t keys) { return qtile_rows(queries > keys ? queries : keys); }
  static constexpr size_t tile_least(size_t rows) { return qtile_least(rows); }
};
}  // namespace precision



template <size_t D, size_t F, class Act = act::ReLU, class P = precision::float32, FfnNames Nm = FfnNames::fc>
struct FeedForward {
  static constexpr bool relu = std::is_same_v<Act, act::ReLU>;
  using Float = FeedForward<D, F, Act, precision::float32, Nm>;
  using Stream = typename P::Stream;
  typename P::template Of<Linear<D, F, Init::kaiming_normal>> fc1;
  typename P::template Of<Linear<F, D, Init::kaiming_normal>> fc2;
  [[no_unique_address]] std::conditional_t<P::integer, Scale, Nothing> hidden_scale;
  static constexpr bool tabled = P::integer && !relu;  // the activation by a table
  struct Table {
    TensorOf<std::int8_t, 256> values;
    Scale act_scale;
  };
  struct NoTable {};  // (not Nothing: two empty members of one type would take a byte each)
  [[no_unique_address]] std::conditional_t<tabled, Table, NoTable> act;

  template <class Fn, class... S>
  static constexpr void visit(const Path& at, Fn& f, S&... s) {
    stformer::visit(at / (Nm == FfnNames::fc ? "fc1" : "linear1"), f, s.fc1...);
    stformer::visit(at / (Nm == FfnNames::fc ? "fc2" : "linear2"), f, s.fc2...);
    if constexpr (P::integer) f(at / "hidden_scale", Init{Init::zeros}, s.hidden_scale...);
    if constexpr (tabled) {
      f(at / "table", Init{Init::zeros}, s.act.values...);
      f(at / "act_scale", Init{Init::zeros}, s.act.act_scale...);
    }
  }

  // The scratch of T rows: the hidden rows [T, F] (in integers int8, and the products' int32
  // accumulators); tile_row_bytes a row of it.
  template <size_t T>
  struct Tile {
    TensorOf<typename P::template Row<8>, T, F> hid;
    [[no_unique_address]] std::conditional_t<P::integer, TensorOf<std::int32_t, T, F>, Nothing> acc;
  };
  static constexpr size_t tile_row_bytes = P::integer ? F * 5 : F * sizeof(float);

  // FFN on Rows rows of x, T rows at a time: hid [T, F] = Act(x_t W1ᵀ + b1), then y_t ← hid W2ᵀ
  // + b2, in place (y = x: a tile's rows are read whole before they are written), or y_t += it
  // when Add (a residual connection; in float x_t holds it, overwritten; in integers the
  // stream's sum saturates). The same bits as the whole rows at once (in float small weights are
  // packed once for all the tiles: Linear::with_panels).
  template <size_t Rows, size_t T, bool Add = false, class X>
  void apply_tiled(X* x, Stream* y, Tile<T>& w) const {
    if constexpr (P::integer) {
      for_tiles<Rows, T>([&]<size_t R>(size_t i) {
        fc1.template apply<R, relu>(x + i * D, w.acc.data(), w.hid.data());
        if constexpr (tabled)
          for (size_t j = 0; j < R * F; ++j) w.hid.data()[j] = act.values(size_t(w.hid.data()[j] + 128));
        fc2.template add_to<R, !Add>(w.hid.data(), w.acc.data(), y + i * D);
      });
    } else {
      float_tiled<Rows, T, Add>(x, y, w.hid.data());
    }
  }
  // The float layer's tiles through hid [T, F]; Of: as Linear::apply's (these Rows rows one part
  // of a layer of Of rows).
  template <size_t Rows, size_t T, bool Add, size_t Of = Rows>
  void float_tiled(float* x, float* y, float* hid) const {
    fc1.template with_panels<Rows, T, Of>([&](const auto* panels1) {
      fc2.template with_panels<Rows, T, Of>([&](const auto* panels2) {
        for_tiles<Rows, T>([&]<size_t R>(size_t i) {
          fc1.template apply<R, relu, Of>(x + i * D, hid, panels1);
          if constexpr (!relu) act::apply<Act, R * F>(hid);
          fc2.template apply<R, false, Of>(hid, x + i * D, panels2);
          if constexpr (Add) kernels::add_to<R * D>(x + i * D, y + i * D);
        });
      });
    });
  }

  // In a composite block: residual [Rows, D] += FFN(x [Rows, D]) T rows at a time (x int8 rows
  // in integers; overwritten in float).
  template <size_t Rows, size_t T, class X>
  void add_tiled(X* x, Stream* residual, Tile<T>& w) const {
    apply_tiled<Rows, T, true>(x, residual, w);
  }
  // The same on the threads of pool (float; in integers on one): the rows in S parts
  // (stformer/core/tensor.hpp: for_parts), part s through its own T/S rows of the tile.
  template <size_t Rows, size_t T, class X, class Pool>
  void add_tiled(X* x, Stream* residual, Tile<T>& w, Pool& pool) const {
    with_parts(pool, [&]<size_t S>() {
      if constexpr (P::integer || S == 1 || T < S)
        apply_tiled<Rows, T, true>(x, residual, w);
      else
        for_parts<Rows, S>(pool, [&]<size_t R>(size_t r0, size_t s) {
          float_tiled<R, T / S, true, Rows>(x + r0 * D, residual + r0 * D, w.hid.data() + s * (T / S) * F);
        });
    });
  }

  // A step of a Sequential (stformer/compose/sequential.hpp), in place on rows [B, N, D] (in
  // integers its output a stream of its own); its scratch a tile of as many rows as Room holds.
  template <size_t B, size_t N>
  using Input = TensorOf<Stream, B, N, D>;
  static constexpr bool in_place = true;
  static constexpr bool row_local = true;  // step::row_local
  template <size_t B, size_t N, size_t Room>
  using Scratch = Tile<rows_in_room(B * N, P::tile_least(B * N), Room, tile_row_bytes)>;
  template <size_t B, size_t N, size_t T, class Pool>
  void forward_in_place(Input<B, N>& h, Tile<T>& w, const Mask<B, N>&, Pool&&) const {
    apply_tiled<B * N, T>(h.data(), h.data(), w);
  }

  // Into a stream (a residual body's last step): h += FFN(x), x overwritten in float; the
  // same tile as in place. In integers x is only read, tile by tile: x may be h itself.
  static constexpr bool adds_from_stream = P::integer;
  template <size_t B, size_t N, size_t T, class Pool>
  void run_add(Input<B, N>& x, Input<B, N>& h, Tile<T>& w, const Mask<B, N>&, Pool&& pool) const {
    add_tiled<B * N, T>(x.data(), h.data(), w, pool);
  }

  // In integers, made from the float layer: the hidden rows' scale from their calibration range
  // (ReLU's outputs, or the activation's inputs), the input's and the output's from the streams'.
  static constexpr bool same_scale = false;
  struct Ranges {
    float hidden = 0;
    template <class A, class X, class Y>
    void observe(const Float&, const A& acts, const X&, const Y&) {
      hidden = std::max(hidden, quant::max_abs(acts.fc1.out));
    }
  };
  void from_float(const Float& f, const Ranges& r, float s_in, float s_out) {
    if constexpr (relu) {
      hidden_scale(0) = quant::scale_for(r.hidden, 255);
      fc1.from_float(f.fc1, s_in, hidden_scale(0));
      fc2.from_float(f.fc2, hidden_scale(0), s_out, -128);
    } else {
      const float s_a = act.act_scale(0) = quant::scale_for(r.hidden);
      fc1.from_float(f.fc1, s_in, s_a);
      double lo = 0, hi = 0, value[256];
      for (int a = -128; a < 128; ++a) {
        value[a + 128] = Act::f(s_a * float(a));
        lo = std::min(lo, value[a + 128]), hi = std::max(hi, value[a + 128]);
      }
      hidden_scale(0) = float(hi > lo ? (hi - lo) / 255 : 1.0);
      const std::int32_t z = -128 - std::int32_t(std::nearbyint(lo / hidden_scale(0)));
      for (size_t i = 0; i < 256; ++i) act.values(i) = std::int8_t(std::clamp<std::int32_t>(quant::to_int(value[i], hidden_scale(0), -32768, 32767) + z, -128, 127));
      fc2.from_float(f.fc2, hidden_scale(0), s_out, z);
    }
  }

  template <size_t... L>
  struct Acts {
    static constexpr size_t rows = (L * ... * 1);
    ActsOf<Linear<D, F, Init::kaiming_normal>, L...> fc1;  // fc1.out: ReLU(x W1ᵀ + b1), or x W1ᵀ + b1
    [[no_unique_address]] std::conditional_t<relu, Nothing, Tensor<L..., F>> hid;  // Act(fc1.out)
    ActsOf<Linear<F, D, Init::kaiming_normal>, L...> fc2;
    using Dx = Tensor<L..., D>;
    using Workspace = Tensor<L..., F>;  // the gradient of the hidden rows

    template <class X>
    const Tensor<L..., D>& forward(const FeedForward& p, const X& x) {
      static_assert(shape_is<X, L..., D>, "FeedForward: input rows x must be [..., D] (the pass's sizes, the layer's width D)");
      if constexpr (relu) {
        return fc2.forward(p.fc2, fc1.template forward<true>(p.fc1, x));
      } else {
        hid = fc1.forward(p.fc1, x);
        act::apply<Act, rows * F>(hid.data());
        return fc2.forward(p.fc2, hid);
      }
    }

    const Tensor<L..., D>& backward(const FeedForward& p, FeedForward& grad, const Tensor<L..., D>& dout, Tensor<L..., D>& dx, Workspace& dhid) {
      fc2.backward(p.fc2, grad.fc2, dout, dhid);
      if constexpr (relu)
        kernels::relu_backward<rows * F>(fc1.out.data(), dhid.data());
      else
        act::backward<Act, rows * F>(fc1.out.data(), dhid.data());
      return fc1.backward(p.fc1, grad.fc1, dhid, dx);
    }
  };

  template <size_t... L>
  struct Infer {
    static constexpr size_t rows = (L * ... * 1), T = P::tile_least(rows);
    TensorOf<Stream, L..., D> out;
    Tile<T> w;

    template <class X>
    const TensorOf<Stream, L..., D>& forward(const FeedForward& p, const X& x) {
      static_assert(typed_shape_is<Stream, X, L..., D>, "FeedForward: input rows x must be [..., D] (the pass's sizes, the layer's width D)");
      std::copy(x.begin(), x.end(), out.begin());
      p.template apply_tiled<rows, T>(out.data(), out.data(), w);
      return out;
    }
  };
};


}  // namespace written

// Its integer form (stformer/quantized/quantize.hpp): the same layer at precision::int8.
template <size_t D, size_t F, class Act, stformer::FfnNames Nm>
struct stformer::Int8Of<written::FeedForward<D, F, Act, written::precision::float32, Nm>> {
  using type = written::FeedForward<D, F, Act, written::precision::int8, Nm>;
};
