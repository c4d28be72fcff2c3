// The pieces of a ViT- or BERT-style classifier around its encoder, each a step of a Sequential:
//   PositionEmbedding<L, D>  learned positions: y[b, n] = x[b, n] + weight[n], n < N ≤ L
//                            backward: dweight[n] += Σ_b dy[b, n], dx = dy
//                            Parameter: weight [L, D] (nn.Embedding(L, D)'s name; N(0, 1))
//   ClassToken<D>            a learned token before the rows, [B, N, D] -> [B, N + 1, D]:
//                            y[b, 0] = cls_token, y[b, 1 + n] = x[b, n]
//                            backward: dcls_token += Σ_b dy[b, 0], dx[b, n] = dy[b, 1 + n]
//                            Parameter: cls_token [1, 1, D] (ViT's name; zeros)
//   FirstToken<D>            the first row (the class token's output), [B, N, D] -> [B, 1, D]
//   LastToken<D>             the last row (x[:, -1]: a causal model's at its last token)
//                            backward: dx[b, r] = dy[b] (r = 0, or N − 1), the other rows 0
// In a Sequential the steps after ClassToken see the caller's key-padding mask shifted past the
// token, which every query sees (prepends: the rows it puts before its input's).
#pragma once

#include "../core/config.hpp"

#include <algorithm>

#include "../kernels/rowwise.hpp"
#include "../core/params.hpp"

namespace stformer::inline STFORMER_ABI {

template <size_t L, size_t D>
struct PositionEmbedding {
  static std::string declaration() { return declare("PositionEmbedding", L, D); }
  Tensor<L, D> weight;

  template <class F, class... S>
  static constexpr void visit(const Path& at, F& f, S&... s) {
    f(at / "weight", Init{Init::normal}, s.weight...);
  }

  template <size_t B, size_t N>
  using Input = Tensor<B, N, D>;
  static constexpr bool in_place = true;
  static constexpr bool reads_mask = false;  // step::reads_mask: row by row, each row's output fixed by its place
  // A decoding step (mask.decoding): the rows at positions t, t + 1, … get weight[t], weight[t + 1], ….
  static constexpr bool decodes = true;
  static constexpr size_t positions = L;  // the positions a decoding pass may reach
  template <size_t B, size_t N, class Pool>
  void forward_in_place(Tensor<B, N, D>& x, Nothing, const Mask<B, N>& mask, Pool&&) const {
    static_assert(N <= L, "PositionEmbedding: the sequence is longer than the L positions it has");
    const size_t t = mask.decoding ? mask.decoding->position : 0;
    STFORMER_CHECK(t + N <= L, "PositionEmbedding: a decoding step past the L positions it has");
    for (size_t b = 0; b < B; ++b) kernels::add_to<N * D>(weight.data() + t * D, x.data() + b * N * D);
  }

  template <size_t B, size_t N>
  struct Infer {
    Tensor<B, N, D> out;
    template <class X>
    const Tensor<B, N, D>& forward(const PositionEmbedding& p, const X& x) {
      static_assert(shape_is<X, B, N, D>, "PositionEmbedding: input rows x must be [B, N, D] (the pass's sizes, the block's width D)");
      out = x;
      p.forward_in_place(out, Nothing{}, Mask<B, N>{}, Serial{});
      return out;
    }
  };
  template <size_t B, size_t N>
  struct Acts : Infer<B, N> {
    using Dx = Tensor<B, N, D>;
    const Tensor<B, N, D>& backward(const PositionEmbedding&, PositionEmbedding& grad, const Tensor<B, N, D>& dout, Tensor<B, N, D>& dx) {
      for (size_t b = 0; b < B; ++b) kernels::add_to<N * D>(dout.data() + b * N * D, grad.weight.data());
      if (&dx != &dout) dx = dout;
      return dx;
    }
  };
};

template <size_t D>
struct ClassToken {
  static std::string declaration() { return declare("ClassToken", D); }
  static constexpr bool reads_mask = false;  // step::reads_mask: each output row fixed by its place
  Tensor<1, 1, D> cls_token;
  static constexpr size_t prepends = 1;

  template <class F, class... S>
  static constexpr void visit(const Path& at, F& f, S&... s) {
    f(at / "cls_token", Init{Init::zeros}, s.cls_token...);
  }

  template <size_t B, size_t N>
  using Input = Tensor<B, N, D>;
  template <size_t B, size_t N>
  using Output = Tensor<B, N + 1, D>;
  template <size_t B, size_t N, class Pool>
  void run(const Input<B, N>& x, Output<B, N>& y, Nothing, const Mask<B, N>&, Pool&&) const {
    for (size_t b = 0; b < B; ++b) {
      std::copy_n(cls_token.data(), D, y.data() + b * (N + 1) * D);
      std::copy_n(x.data() + b * N * D, N * D, y.data() + (b * (N + 1) + 1) * D);
    }
  }

  template <size_t B, size_t N>
  struct Infer {
    Tensor<B, N + 1, D> out;
    template <class X>
    const Tensor<B, N + 1, D>& forward(const ClassToken& p, const X& x) {
      static_assert(shape_is<X, B, N, D>, "ClassToken: input rows x must be [B, N, D] (the pass's sizes, the block's width D)");
      p.run(x, out, Nothing{}, Mask<B, N>{}, Serial{});
      return out;
    }
  };
  template <size_t B, size_t N>
  struct Acts : Infer<B, N> {
    using Dx = Tensor<B, N, D>;
    const Tensor<B, N, D>& backward(const ClassToken&, ClassToken& grad, const Tensor<B, N + 1, D>& dout, Tensor<B, N, D>& dx) {
      for (size_t b = 0; b < B; ++b) {
        kernels::add_to<D>(dout.data() + b * (N + 1) * D, grad.cls_token.data());
        std::copy_n(dout.data() + (b * (N + 1) + 1) * D, N * D, dx.data() + b * N * D);
      }
      return dx;
    }
  };
};

// FirstToken<D> (Last false) and LastToken<D> (Last true): row r of each item.
template <size_t D, bool Last>
struct TokenRow {
  static std::string declaration() { return declare(Last ? "LastToken" : "FirstToken", D); }
  template <size_t N>
  static constexpr size_t r = Last ? N - 1 : 0;
  static constexpr bool reads_mask = false;  // step::reads_mask: each output row fixed by its place
  static constexpr bool decodes = Last;       // DecodeOf: the last row of one is that row
  template <class F, class... S>
  static constexpr void visit(const Path&, F&, S&...) {}

  template <size_t B, size_t N>
  using Input = Tensor<B, N, D>;
  template <size_t B, size_t N>
  using Output = Tensor<B, 1, D>;
  template <size_t B, size_t N, class Pool>
  void run(const Input<B, N>& x, Output<B, N>& y, Nothing, const Mask<B, N>&, Pool&&) const {
    for (size_t b = 0; b < B; ++b) std::copy_n(x.data() + (b * N + r<N>) * D, D, y.data() + b * D);
  }

  template <size_t B, size_t N>
  struct Infer {
    Tensor<B, 1, D> out;
    template <class X>
    const Tensor<B, 1, D>& forward(const TokenRow& p, const X& x) {
      static_assert(shape_is<X, B, N, D>, "FirstToken, LastToken: input rows x must be [B, N, D] (the pass's sizes, the block's width D)");
      p.run(x, out, Nothing{}, Mask<B, N>{}, Serial{});
      return out;
    }
  };
  template <size_t B, size_t N>
  struct Acts : Infer<B, N> {
    using Dx = Tensor<B, N, D>;
    const Tensor<B, N, D>& backward(const TokenRow&, TokenRow&, const Tensor<B, 1, D>& dout, Tensor<B, N, D>& dx) {
      std::fill(dx.begin(), dx.end(), 0.0f);
      for (size_t b = 0; b < B; ++b) std::copy_n(dout.data() + b * D, D, dx.data() + (b * N + r<N>) * D);
      return dx;
    }
  };
};
template <size_t D>
struct FirstToken : TokenRow<D, false> {};
template <size_t D>
struct LastToken : TokenRow<D, true> {};

}  // namespace stformer
