// PositionalEncoding<L, D>: fixed sinusoids added to rows x [B, N, D], N <= L:
//   PE[p, 2i] = sin(p / 10000^(2i/D)),  PE[p, 2i+1] = cos(p / 10000^(2i/D)).
// No parameters. The table is computed once (in double), before main.
#pragma once

#include "../core/config.hpp"

#include <algorithm>
#include <cmath>

#include "../kernels/rowwise.hpp"
#include "../core/params.hpp"

namespace stformer::inline STFORMER_ABI {

template <size_t L, size_t D>
struct PositionalEncoding {
  static std::string declaration() { return declare("PositionalEncoding", L, D); }
  template <class F, class... S>
  static constexpr void visit(const Path&, F&, S&...) {}

  // The table, made once before main (a variable of static storage: no guarded local static, so
  // the object of a generated C API needs nothing from the C++ runtime).
  static const Tensor<L, D>& table();

  // x [B, N, D] += PE[0..N) in place (forward only; a step of a Sequential, stformer/compose/sequential.hpp)
  template <size_t B, size_t N>
  using Input = Tensor<B, N, D>;
  static constexpr bool in_place = true;
  static constexpr bool reads_mask = false;  // step::reads_mask: row by row, each row's output fixed by its place
  // A decoding step (mask.decoding): the rows at positions t, t + 1, … get PE[t], PE[t + 1], ….
  static constexpr bool decodes = true;
  static constexpr size_t positions = L;  // the positions a decoding pass may reach
  template <size_t B, size_t N, class Pool>
  void forward_in_place(Tensor<B, N, D>& x, Nothing, const Mask<B, N>& mask, Pool&&) const {
    static_assert(N <= L, "PositionalEncoding: sequence length N exceeds the table length L");
    const size_t t = mask.decoding ? mask.decoding->position : 0;
    STFORMER_CHECK(t + N <= L, "PositionalEncoding: a decoding step past the table's L positions");
    for (size_t b = 0; b < B; ++b) kernels::add_to<N * D>(table().data() + t * D, x.data() + b * N * D);
  }

  template <size_t B, size_t N>
  struct Infer {
    Tensor<B, N, D> out;

    template <class X>
    const Tensor<B, N, D>& forward(const PositionalEncoding& p, const X& x) {
      static_assert(shape_is<X, B, N, D>, "PositionalEncoding: input rows x must be [B, N, D] (the pass's sizes, the table's width D)");
      if (&x != &out) std::copy(x.begin(), x.end(), out.begin());
      p.forward_in_place(out, Nothing{}, Mask<B, N>{}, Serial{});
      return out;
    }
  };

  template <size_t B, size_t N>
  struct Acts {
    static_assert(N <= L, "PositionalEncoding: sequence length N exceeds the table length L");
    Tensor<B, N, D> out;

    template <class X>
    const Tensor<B, N, D>& forward(const PositionalEncoding&, const X& x) {
      static_assert(shape_is<X, B, N, D>, "PositionalEncoding: input rows x must be [B, N, D] (the pass's sizes, the table's width D)");
      const float* pe = table().data();
      for (size_t b = 0; b < B; ++b) kernels::add<N * D>(x.data() + b * N * D, pe, out.data() + b * N * D);
      return out;
    }

    using Dx = Tensor<B, N, D>;
    const Tensor<B, N, D>& backward(const PositionalEncoding&, PositionalEncoding&, const Tensor<B, N, D>& dout, Tensor<B, N, D>& dx) {
      if (&dx != &dout) dx = dout;
      return dx;
    }
  };
};

template <size_t L, size_t D>
Tensor<L, D> positional_encoding_table() {
  Tensor<L, D> t;
  for (size_t p = 0; p < L; ++p)
    for (size_t c = 0; c < D; ++c) {
      double angle = double(p) / std::pow(10000.0, double(c - c % 2) / double(D));
      t(p, c) = float(c % 2 == 0 ? std::sin(angle) : std::cos(angle));
    }
  return t;
}
template <size_t L, size_t D>
inline const Tensor<L, D> positional_encoding = positional_encoding_table<L, D>();

template <size_t L, size_t D>
const Tensor<L, D>& PositionalEncoding<L, D>::table() {
  return positional_encoding<L, D>;
}

}  // namespace stformer
