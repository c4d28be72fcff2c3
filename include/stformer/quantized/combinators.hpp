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
//   QSeedQuery<Name, K, Query, Attention>
//                      y = Attention(q_q, x_q), q_q = Query(S) made once from the float
//                      block and stored in int8 at its own scale (the pointer head's query)
// sat: the int16 sum saturated. Which stream each part writes at, and its scale, calibration
// decides (stformer/quantized/quantize.hpp: quant::observe walks the combinators as their forward
// does). QGated's tensors, at the combinator's place: gate_scale, value_scale, out_scale F32 [1]
// (s_g, s_v, s_y) and requant (Requant<1>: M).
#pragma once

#include "../core/config.hpp"

#include <array>
#include <cstdint>
#include <string_view>
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

namespace step {
// Attend's key/value part in integers: a norm's rows int16 (Int16Part), or a chain (ISAB's
// MAB1(I, X) then a norm) in integers, its last step a norm whose rows QAttend sets int16.
template <class KV>
struct KeyValuePart
    : std::conditional_t<row_local<typename Info<KV>::Block>(), Int16Part<KV>, Int8Part<KV>> {};
}  // namespace step

namespace quant {
// The scale of int16 rows of a part that bounds its entries (ScaleNorm: |g|) at b/32767.
template <class Part>
float rows_scale(const Part& f) {
  static_assert(requires { quant::row_bound(f); },
                "Attend, SeedAttend in integers: their query and key/value rows come from parts that bound them (ScaleNorm: |g|), the int16 rows' scale");
  return quant::scale_for(quant::row_bound(f), 32767);
}
// A norm p made from the float norm f with int16 rows at rows_scale(f).
template <class P, class F>
void int16_rows(P& p, const F& f) {
  p = P::quantize(f, rows_scale(f));
}
}  // namespace quant

template <class Query, class KeyValue, class Attention, bool Ordered>
struct QAttend : step::Parts<typename step::Int16Part<Query>::type, typename step::KeyValuePart<KeyValue>::type, typename step::Int16Part<Attention>::type> {
  using Float = Attend<Query, KeyValue, Attention, Ordered>;
  using KV = typename QAttend::template BlockAt<1>;
  using A = typename QAttend::template BlockAt<2>;
  static constexpr bool ordered = Ordered, chain_kv = !step::row_local<typename Float::KV>();
  static constexpr size_t D = dims<typename Float::template Input<1, 1>>.back();
  template <size_t B, size_t N>
  using Input = TensorOf<std::int16_t, B, N, D>;
  template <size_t B, size_t N>
  using Rows = TensorOf<std::int16_t, B, N, D>;
  template <size_t B, size_t N>
  static constexpr size_t Nk = Float::template Nk<B, N>;
  template <size_t B, size_t N>
  using KVRows = TensorOf<std::int16_t, B, Nk<B, N>, D>;
  template <size_t B, size_t N>
  using Output = TensorOf<std::int16_t, B, N, dims<typename Float::template Output<1, 1>>.back()>;
  static constexpr bool in_place = false, adds_from_stream = true, same_scale = false;

  // step::AttendScratch (compose/combinators.hpp) on int16 rows: a chain's rows in kv, its
  // scratch under a and the work; the integer attention's tile.
  template <size_t B, size_t N>
  static constexpr size_t tile = qtile_rows(std::max(B * N, B * Nk<B, N>));
  template <size_t B, size_t N, size_t Room = 0>
  struct Scratch : step::AttendScratch<Rows<B, N>, KVRows<B, N>, std::conditional_t<chain_kv, step::Scratch<KV, B, N, 0>, Nothing>,
                                       typename A::template Work<B, N, Nk<B, N>, tile<B, N>>, chain_kv> {};
  template <size_t B, size_t N, size_t Room, class Pool = Serial>
  void run_add(const Input<B, N>& x, Output<B, N>& h, Scratch<B, N, Room>& w, const Mask<B, N>& mask, Pool&& pool = Pool{}) const {
    constexpr size_t K = Nk<B, N>, T = tile<B, N>;
    auto& kv = w.key_rows([&](auto& rows, auto& scratch) {
      if constexpr (chain_kv)
        step::run(this->template get<1>(), x, rows, scratch, mask, pool);
      else
        this->template get<1>().template apply<B * N>(x.data(), rows.data());
    });
    auto& heads = w.heads();
    this->template get<2>().template prepare<B, N, K, T>(kv.data(), heads.w, pool);
    auto& q = heads.a.template start<Rows<B, N>>();
    this->template get<0>().template apply<B * N>(x.data(), q.data());
    this->template get<2>().template forward_add<B, N, K, T>(q.data(), h.data(), heads.w, Float::keys(mask), pool);
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
  // A chain's steps but its last are made first (quant::from_float of Attend: from their own
  // calibrated streams); its last, a norm, writes int16 rows, as a norm part does.
  void from_float(const Float& f, const Ranges& r, float, float s_out) {
    auto &q = this->template get<0>(), &kv = this->template get<1>();
    quant::int16_rows(q, f.template get<0>());
    float s_kv;
    if constexpr (chain_kv) {
      constexpr size_t last = KV::steps - 1;
      quant::int16_rows(kv.template get<last>(), f.template get<1>().template get<last>());
      s_kv = kv.template get<last>().out_scale(0);
    } else {
      quant::int16_rows(kv, f.template get<1>());
      s_kv = kv.out_scale(0);
    }
    this->template get<2>() = A::quantize(f.attention(), r.attn, q.out_scale(0), s_kv, s_out);
  }
};
template <class Query, class KeyValue, class Attention, bool Ordered>
struct Int8Of<Attend<Query, KeyValue, Attention, Ordered>> {
  using type = QAttend<Query, KeyValue, Attention, Ordered>;
};

// SeedAttend in integers: y_q = S_q + MHA(Nq(S_q), Nkv(x_q)) on a stream of its own at s_out,
// which starts at the seeds (int16 at s_out; its range covers them: Ranges::residual); the
// parts' rows int16 and the attention on them as QAttend's. Tensors: the seeds (I16 [K, D]),
// the parts'.
template <FixedString Name, size_t K, class Query, class KeyValue, class Attention>
struct QSeedAttend : step::Parts<Named<"", Seeds<Name, K, SeedAttend<Name, K, Query, KeyValue, Attention>::D, std::int16_t>>,  // at the output's scale
                                 typename step::Int16Part<Query>::type, typename step::Int16Part<KeyValue>::type,
                                 typename step::Int16Part<Attention>::type> {
  using Float = SeedAttend<Name, K, Query, KeyValue, Attention>;
  using A = typename QSeedAttend::template BlockAt<3>;
  static constexpr bool ordered = false, same_scale = false;
  static constexpr size_t D = Float::D;
  template <size_t B, size_t N>
  using Input = TensorOf<std::int16_t, B, N, D>;
  template <size_t B, size_t N>
  using Output = TensorOf<std::int16_t, B, K, D>;

  template <size_t B, size_t N, size_t Room = 0>
  struct Scratch {
    static constexpr size_t T = qtile_rows(std::max(B * K, B * N));
    Phases<TensorOf<std::int16_t, B, K, D>, Input<B, N>> a;  // Nkv(x), then Nq(S)
    typename A::template Work<B, K, N, T> w;
  };
  template <size_t B, size_t N, size_t Room, class Pool = Serial>
  void run(const Input<B, N>& x, Output<B, N>& y, Scratch<B, N, Room>& w, const Mask<B, N>& mask, Pool&& pool = Pool{}) const {
    constexpr size_t T = Scratch<B, N, Room>::T;
    repeat_rows(this->template get<0>().rows, y.data(), B);
    auto& kv = w.a.template start<Input<B, N>>();
    this->template get<2>().template apply<B * N>(x.data(), kv.data());
    this->template get<3>().template prepare<B, K, N, T>(kv.data(), w.w, pool);
    auto& q = w.a.template start<TensorOf<std::int16_t, B, K, D>>();
    this->template get<1>().template apply<B * K>(y.data(), q.data());
    this->template get<3>().template forward_add<B, K, N, T>(q.data(), y.data(), w.w, Mask<B, N>{.keys = mask.keys}, pool);
  }

  struct Ranges {
    typename A::Ranges attn;
    float residual = 0;  // the seeds, on the output's stream
    template <class Acts, class X, class Y>
    void observe(const Float& f, const Acts& acts, const X&, const Y&) {
      attn.observe(f.attention(), acts.attn);
      residual = std::max(residual, quant::max_abs(f.seeds()));
    }
  };
  void from_float(const Float& f, const Ranges& r, float, float s_out) {
    auto &q = this->template get<1>(), &kv = this->template get<2>();
    quant::int16_rows(q, f.template get<1>());
    quant::int16_rows(kv, f.template get<2>());
    quant::quantize(f.seeds().data(), K * D, s_out, this->template get<0>().rows.data());
    this->template get<3>() = A::quantize(f.attention(), r.attn, q.out_scale(0), kv.out_scale(0), s_out);
  }
};
template <FixedString Name, size_t K, class Query, class KeyValue, class Attention>
struct Int8Of<SeedAttend<Name, K, Query, KeyValue, Attention>> {
  using type = QSeedAttend<Name, K, Query, KeyValue, Attention>;
};

// SeedQuery in integers: Query(S) does not depend on x, so it is made once from the float block
// and stored as int8 rows at their own scale; then y = Attention(q_q, x_q) (QPointerAttention:
// int32 logits, the model's float end the attention's Finish). Tensors: Name (I8 [K, D]),
// Name_scale (F32 [1]), the attention's.
template <FixedString Name, size_t K, size_t D>
struct QuerySeeds {
  TensorOf<std::int8_t, K, D> rows;
  Scale scale;
  static constexpr auto scale_name = [] {
    constexpr std::string_view n = Name.view(), suffix = "_scale";
    std::array<char, n.size() + suffix.size()> s{};
    std::copy(suffix.begin(), suffix.end(), std::copy(n.begin(), n.end(), s.begin()));
    return s;
  }();
  template <class F, class... S>
  static constexpr void visit(const Path& at, F& f, S&... s) {
    f(at / Name.view(), Init{Init::zeros}, s.rows...);
    f(at / std::string_view(scale_name.data(), scale_name.size()), Init{Init::zeros}, s.scale...);
  }
};

template <FixedString Name, size_t K, class Query, class Attention>
struct QSeedQuery : step::Parts<Named<"", QuerySeeds<Name, K, SeedQuery<Name, K, Query, Attention>::D>>, typename step::Int8Part<Attention>::type> {
  using Float = SeedQuery<Name, K, Query, Attention>;
  using A = typename QSeedQuery::template BlockAt<1>;
  using Finish = typename A::Finish;
  static constexpr bool ordered = false, same_scale = false;
  static constexpr size_t D = Float::D;
  const A& attention() const { return this->template get<1>(); }
  const auto& seeds() const { return this->template get<0>(); }

  template <size_t B, size_t N>
  using Input = TensorOf<std::int16_t, B, N, Float::A::key_width>;
  template <size_t B, size_t N>
  using Output = typename A::template Output<B, K, N>;
  template <size_t B, size_t N, size_t Room = 0>
  struct Scratch {
    TensorOf<std::int8_t, B, K, D> q;
    typename A::template Work<B, K, N> w;
  };
  template <size_t B, size_t N, size_t Room, class Pool = Serial>
  void run(const Input<B, N>& x, Output<B, N>& y, Scratch<B, N, Room>& w, const Mask<B, N>& mask, Pool&& = Pool{}) const {
    repeat_rows(seeds().rows, w.q.data(), B);
    attention().score(w.q.data(), x.data(), y.data(), w.w, mask.keys);
  }

  struct Ranges {
    typename A::Ranges attn;
    template <class Acts, class X, class Y>
    void observe(const Float& f, const Acts& acts, const X&, const Y&) {
      attn.observe(f.attention(), acts.attn);
    }
  };
  // q = Query(S) once, at the scale of its own largest entry.
  void from_float(const Float& f, const Ranges& r, float s_x, float) {
    auto& s = this->template get<0>();
    typename Float::Q::template Infer<K> q;
    s.scale(0) = quant::scale_for(quant::max_abs(q.forward(f.template get<1>(), f.seeds())));
    quant::quantize(q.out.data(), K * D, s.scale(0), s.rows.data());
    this->template get<1>() = A::quantize(f.attention(), r.attn, s.scale(0), s_x);
  }
  float output_scale() const { return float(attention().logit_scale()); }
};
template <FixedString Name, size_t K, class Query, class Attention>
struct Int8Of<SeedQuery<Name, K, Query, Attention>> {
  using type = QSeedQuery<Name, K, Query, Attention>;
};

}  // namespace stformer
