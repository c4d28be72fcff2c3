// The combinators (stformer/compose/combinators.hpp) and a chain inside a block, in integers: each
// part its integer form (Int8Of) under its name, on int16 streams.
//   Sequential<S...>   a chain of the steps' integer forms, a norm before a step that reads
//                      int8 rows writing them (quantized/rows.hpp)
//   Residual<Body>     h ← sat(h + Body(h)): the body's last step writes at the stream's scale
//   Parallel<Br...>    y = sat(Σᵢ Branchᵢ(x)): every branch writes at y's scale
//   QGated<Gate, Value>  y_q = clamp(apply(g_q·v_q, M), int16),  M = s_g·s_v / s_y
//                      (g and v on streams of their own; their int16 product exact in int32)
//   QAttend<Query, KeyValue, Attention, Ordered>
//                      h_q = sat(h_q + MHA(Nq(x_q), Nkv(x_q))): the parts' rows int16 at
//                      s_r = b/32767, b the bound of their entries (ScaleNorm: |g|, an entry of
//                      g·x/‖x‖ is at most |g|), the attention on int16 rows (QMultiHeadAttention),
//                      its output at the stream's scale. Why int16 rows: a set model regresses a
//                      point, and every int8 rounding of them moves it (docs/quantized.md).
// sat: the int16 sum saturated. Which stream each part writes at, and its scale, calibration
// decides (stformer/quantized/quantize.hpp: quant::observe walks the combinators as their forward
// does). QGated's tensors, at the combinator's place: gate_scale, value_scale, out_scale F32 [1]
// (s_g, s_v, s_y) and requant (Requant<1>: M).
#pragma once

#include "../core/config.hpp"

#include <cstdint>
#include <tuple>
#include <utility>

#include "../compose/combinators.hpp"
#include "attention.hpp"
#include "linear.hpp"
#include "rows.hpp"

namespace stformer::inline STFORMER_ABI {

namespace step {
// Part S of a chain or combinator (a block, Named or Indexed) with the block Q in its place, under
// the same name.
template <class S, class Q>
struct Renamed {
  using type = Q;
};
template <FixedString Name, class B, class Q>
struct Renamed<Named<Name, B>, Q> {
  using type = Named<Name, Q>;
};
template <size_t Index, class B, class Q>
struct Renamed<Indexed<Index, B>, Q> {
  using type = Indexed<Index, Q>;
};
// A part in integers, under the same name; with int16 rows (IntegerForm<Block, 16>: QAttend's parts).
template <class S>
struct Int8Part : Renamed<S, typename Int8Of<typename Info<S>::Block>::type> {};
template <class S>
struct Int16Part : Renamed<S, typename IntegerForm<typename Info<S>::Block, 16>::type> {};
}  // namespace step

// A chain: each step's integer form, a norm and a reader of its rows paired (quantized/rows.hpp).
template <class... S>
struct Int8Of<Sequential<S...>> {
  using Qs = std::tuple<typename Int8Of<typename step::Info<S>::Block>::type...>;
  template <class I = std::index_sequence_for<S...>>
  struct Chain;
  template <size_t... I>
  struct Chain<std::index_sequence<I...>> {
    using type = Sequential<typename step::Renamed<S, typename step::Paired<I, Qs>::type>::type...>;
  };
  using type = typename Chain<>::type;
};
template <class Body>
struct Int8Of<Residual<Body>> {
  using type = Residual<typename step::Int8Part<Body>::type>;
};
template <class... Br>
struct Int8Of<Parallel<Br...>> {
  using type = Parallel<typename step::Int8Part<Br>::type...>;
};

template <class Gate, class Value>
struct QGated {
  using Base = Branches<Gate, Value>;
  Base parts;  // at the combinator's level, as Gated's
  Scale gate_scale, value_scale, out_scale;
  Requant<1> requant;

  template <class F, class... S>
  static constexpr void visit(const Path& at, F& f, S&... s) {
    Base::visit(at, f, s.parts...);
    f(at / "gate_scale", Init{Init::zeros}, s.gate_scale...);
    f(at / "value_scale", Init{Init::zeros}, s.value_scale...);
    f(at / "out_scale", Init{Init::zeros}, s.out_scale...);
    stformer::visit(at / "requant", f, s.requant...);
  }
  template <size_t I>
  constexpr auto& get() {
    return parts.template get<I>();
  }
  template <size_t I>
  constexpr const auto& get() const {
    return parts.template get<I>();
  }
  // M = s_g·s_v / s_y
  template <class B, class F>
  static void requants(B& b, F&& f) {
    f("requant", b.requant, [&](size_t) { return double(b.gate_scale(0)) * b.value_scale(0) / b.out_scale(0); });
  }
  // The product's scales: the gate's and the value's streams, and the output's (host side).
  void set_scales(float s_g, float s_v, float s_y) {
    gate_scale(0) = s_g, value_scale(0) = s_v, out_scale(0) = s_y;
    set_requants(*this);
  }

  template <size_t B, size_t N>
  using Input = typename Base::template Input<B, N>;
  template <size_t B, size_t N>
  using Output = typename Base::template Output<B, N>;
  template <size_t B, size_t N, size_t Room = 0>
  using Scratch = typename Base::template Scratch<B, N, Room>;  // t: Gate(x)
  static constexpr bool row_local = Base::row_local;

  template <size_t B, size_t N, size_t Room, class Pool = Serial>
  void run(const Input<B, N>& x, Output<B, N>& y, Scratch<B, N, Room>& w, const Mask<B, N>& mask, Pool&& pool = Pool{}) const {
    parts.run_gated(x, y, w, mask, pool, [&](const std::int16_t* g, std::int16_t* v) {
      for (size_t j = 0; j < step::count<Output<B, N>>; ++j)
        v[j] = std::int16_t(kernels::clamp_i32(requant.apply(0, std::int32_t(g[j]) * v[j]), INT16_MIN, INT16_MAX));
    });
  }
};
template <class Gate, class Value>
struct Int8Of<Gated<Gate, Value>> {
  using type = QGated<typename step::Int8Part<Gate>::type, typename step::Int8Part<Value>::type>;
};

template <class Query, class KeyValue, class Attention, bool Ordered>
struct QAttend : step::Parts<typename step::Int16Part<Query>::type, typename step::Int16Part<KeyValue>::type, typename step::Int16Part<Attention>::type> {
  using Float = Attend<Query, KeyValue, Attention, Ordered>;
  using A = typename QAttend::template BlockAt<2>;
  static constexpr bool ordered = Ordered;
  template <size_t B, size_t N>
  using Input = TensorOf<std::int16_t, B, N, dims<typename Float::template Input<1, 1>>.back()>;
  template <size_t B, size_t N>
  using Rows = TensorOf<std::int16_t, B, N, dims<typename Float::template Rows<1, 1>>.back()>;
  template <size_t B, size_t N>
  using Output = TensorOf<std::int16_t, B, N, dims<typename Float::template Output<1, 1>>.back()>;
  static constexpr bool in_place = false, adds_from_stream = true, same_scale = false;

  template <size_t B, size_t N, size_t Room = 0>
  struct Scratch {
    static constexpr size_t T = precision::int8::tile_rows(B * N, B * N);
    Rows<B, N> a;  // Nkv(x) until the keys and values are projected, then Nq(x), the heads in place
    typename A::template Work<B, N, N, T> w;
  };
  template <size_t B, size_t N, size_t Room, class Pool = Serial>
  void run_add(const Input<B, N>& x, Output<B, N>& h, Scratch<B, N, Room>& w, const Mask<B, N>& mask, Pool&& pool = Pool{}) const {
    constexpr size_t T = Scratch<B, N, Room>::T;
    this->template get<1>().template apply<B * N>(x.data(), w.a.data());
    this->template get<2>().template prepare<B, N, N, T>(w.a.data(), w.w, pool);
    this->template get<0>().template apply<B * N>(x.data(), w.a.data());
    this->template get<2>().template forward_add<B, N, N, T>(w.a.data(), h.data(), w.w, mask, pool);
  }
  template <size_t B, size_t N, size_t Room, class Pool = Serial>
  void run(const Input<B, N>& x, Output<B, N>& y, Scratch<B, N, Room>& w, const Mask<B, N>& mask, Pool&& pool = Pool{}) const {
    std::fill(y.begin(), y.end(), std::int16_t(0));
    run_add(x, y, w, mask, pool);
  }

  struct Ranges {
    typename A::Ranges attn;
    template <class Acts, class X, class Y>
    void observe(const Float& f, const Acts& acts, const X&, const Y&) {
      attn.observe(f.attention(), acts.attn);
    }
  };
  template <class Part>
  static float rows_scale(const Part& f) {
    static_assert(requires { quant::row_bound(f); },
                  "Attend in integers: its query and key/value parts must bound their rows (ScaleNorm: |g|), the int16 rows' scale");
    return quant::scale_for(quant::row_bound(f), 32767);
  }
  void from_float(const Float& f, const Ranges& r, float, float s_out) {
    auto &q = this->template get<0>(), &kv = this->template get<1>();
    q = std::remove_cvref_t<decltype(q)>::quantize(f.template get<0>(), rows_scale(f.template get<0>()));
    kv = std::remove_cvref_t<decltype(kv)>::quantize(f.template get<1>(), rows_scale(f.template get<1>()));
    this->template get<2>() = A::quantize(f.attention(), r.attn, q.out_scale(0), kv.out_scale(0), s_out);
  }
};
template <class Query, class KeyValue, class Attention, bool Ordered>
struct Int8Of<Attend<Query, KeyValue, Attention, Ordered>> {
  using type = QAttend<Query, KeyValue, Attention, Ordered>;
};

}  // namespace stformer
