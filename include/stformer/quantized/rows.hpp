// Int8 rows between two steps of a chain in integers: a norm followed by a step that reads int8
// rows (the attention, a feed-forward layer) passes them on directly,
//   a_q = N(x_q) as int8 at s_a = max|N(x)| / 127   (calibration's range of the norm's output)
// and the reader takes a_q as its input at s_a, where otherwise the norm would write an int16
// stream of its own and the reader requantize it to int8 (two roundings, and the stream's bytes).
// So a pre-norm residual branch, Residual<Sequential<Norm, SelfAttention>>, in integers is
// what a hand-written pre-norm block does: the norm's int8 rows straight into the attention.
//   RowsWriter<Q>::type   a norm's form that writes int8 rows (NormRows)
//   RowsReader<Q>::type   a step's form that reads them (QSelfAttention<…, int8_t>, FeedForwardRows)
//   Paired<I, Qs>         part I of a chain whose parts' integer forms are the tuple Qs: the
//                         writer's form before a reader, the reader's form after a writer
#pragma once

#include "../core/config.hpp"

#include <cstdint>
#include <tuple>
#include <type_traits>

#include "../compose/sequential.hpp"
#include "feedforward.hpp"
#include "layernorm.hpp"
#include "scalenorm.hpp"

namespace stformer::inline STFORMER_ABI {

// The scales of C branches' input rows in a post-norm block in integers (a_q = apply(h_q, s_h / s_a):
// a post-norm branch's input, the int16 stream requantized at the branch's scale s_a), and the
// stream's s_h (stream_scale F32 [1]).
template <size_t C>
struct BranchScales {
  Tensor<C> branch_scale;
  Requant<C> branch_requant;
  Scale stream_scale;

  template <class F, class... S>
  static constexpr void visit(const Path& at, F& f, S&... s) {
    f(at / "branch_scale", Init{Init::zeros}, s.branch_scale...);
    stformer::visit(at / "branch_requant", f, s.branch_requant...);
    f(at / "stream_scale", Init{Init::zeros}, s.stream_scale...);
  }
  // M_i = s_h / s_a[i]
  template <class B, class F>
  static void requants(B& b, F&& f) {
    f("branch_requant", b.branch_requant, [&](size_t i) { return double(b.stream_scale(0)) / b.branch_scale(i); });
  }
  // a [n] ← branch i's int8 rows of the int16 stream h [n]: sat(apply(h_q, s_h / s_a))
  void requantize(size_t i, const std::int16_t* h, std::int8_t* a, size_t n) const {
    for (size_t k = 0; k < n; ++k) a[k] = std::int8_t(kernels::clamp_i32(branch_requant.apply(i, h[k]), -128, 127));
  }
  // branch i's scale s_a for a stream at s_h (host side)
  void set(size_t i, float s_a, float s_h) {
    branch_scale(i) = s_a, stream_scale(0) = s_h;
    requants(*this, [&](const char*, auto& r, const auto& m) { r.set(i, m(i)); });
  }
};


template <class Q>
struct RowsWriter {};
template <class Q>
struct RowsReader {};

// An integer norm (QScaleNorm, QLayerNorm) writing int8 rows at s_a from its input stream.
template <class Norm>
struct NormRows : Norm {
  template <size_t B, size_t N>
  using Output = TensorOf<std::int8_t, B, N, dims<typename Norm::template Input<1, 1>>.back()>;
  static constexpr bool in_place = false;
  static constexpr bool row_local = true;  // step::row_local
  template <size_t B, size_t N, class Pool>
  void run(const typename Norm::template Input<B, N>& x, Output<B, N>& y, Nothing, const Mask<B, N>&, Pool&&) const {
    this->template apply<B * N>(x.data(), y.data());
  }
};
template <size_t D>
struct RowsWriter<QScaleNorm<D>> {
  using type = NormRows<QScaleNorm<D>>;
};
template <size_t D, bool Centred, Epsilon Eps>
struct RowsWriter<QLayerNorm<D, Centred, Eps>> {
  using type = NormRows<QLayerNorm<D, Centred, Eps>>;
};

// A feed-forward layer in integers (QFeedForward) from int8 rows x at s_a into an int16 stream:
// y = FFN(x), or h += FFN(x) (a residual body's last step); its tile as in place.
template <class Q>
struct FeedForwardRows : Q {
  template <size_t B, size_t N>
  using Input = TensorOf<std::int8_t, B, N, Q::D>;
  template <size_t B, size_t N>
  using Output = TensorOf<std::int16_t, B, N, Q::D>;
  static constexpr bool in_place = false, adds_from_stream = false;
  template <size_t B, size_t N, size_t T, class Pool>
  void run(const Input<B, N>& x, Output<B, N>& y, typename Q::template Tile<T>& w, const Mask<B, N>&, Pool&&) const {
    this->template apply_tiled<B * N, T>(x.data(), y.data(), w);
  }
  template <size_t B, size_t N, size_t T, class Pool>
  void run_add(const Input<B, N>& x, Output<B, N>& h, typename Q::template Tile<T>& w, const Mask<B, N>&, Pool&&) const {
    this->template apply_tiled<B * N, T, true>(x.data(), h.data(), w);
  }
};
template <class S1, class A, class S2>
struct RowsReader<QFeedForward<S1, A, S2>> {
  using type = FeedForwardRows<QFeedForward<S1, A, S2>>;
};

namespace step {

template <class Q>
concept writes_rows = requires { typename RowsWriter<Q>::type; };
template <class Q>
concept reads_rows = requires { typename RowsReader<Q>::type; };

template <size_t I, class Qs>
struct Paired {
  static constexpr size_t n = std::tuple_size_v<Qs>;
  template <size_t J>
  static auto at() {
    if constexpr (J < n)
      return std::type_identity<std::tuple_element_t<J, Qs>>{};
    else
      return std::type_identity<void>{};
  }
  using Self = std::tuple_element_t<I, Qs>;
  using Next = typename decltype(at<I + 1>())::type;
  using Prev = typename decltype(at<I - 1>())::type;  // I − 1 wraps past n for I = 0: void
  static auto pick() {
    if constexpr (writes_rows<Self> && reads_rows<Next>)
      return std::type_identity<typename RowsWriter<Self>::type>{};
    else if constexpr (writes_rows<Prev> && reads_rows<Self>)
      return std::type_identity<typename RowsReader<Self>::type>{};
    else
      return std::type_identity<Self>{};
  }
  using type = typename decltype(pick())::type;
};

}  // namespace step

}  // namespace stformer
