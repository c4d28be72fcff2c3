// MeanPool<D>: the mean of the rows that exist, x [B, N, D] -> [B, 1, D]:
//   y[b] = (1/n_b) Σ_{j: key j of row b exists} x[b, j]   (n_b keys; y[b] = 0 when n_b = 0)
//   backward: dx[b, j] = dy[b] / n_b where key j exists, else 0.
// The keys are the key-padding mask's (all N without one). No parameters.
#pragma once

#include "../core/config.hpp"

#include <algorithm>

#include "../kernels/rowwise.hpp"
#include "../core/params.hpp"

namespace stformer::inline STFORMER_ABI {

template <size_t D>
struct MeanPool {
  static std::string declaration() { return declare("MeanPool", D); }
  template <class F, class... S>
  static constexpr void visit(const Path&, F&, S&...) {}

  // y[b] for Rows = N rows of x (ld D); returns 1/n_b (0 when no row exists).
  template <size_t B, size_t N>
  static float pool(const float* x, float* y, size_t b, const KeyMask<B, N>* keys) {
    std::fill_n(y, D, 0.0f);
    size_t n = 0;
    for (size_t j = 0; j < N; ++j)
      if (!keys || (*keys)(b, j)) kernels::add_to<D>(x + j * D, y), ++n;
    const float inv = n > 0 ? 1.0f / float(n) : 0.0f;
    kernels::scale<D>(y, inv);
    return inv;
  }

  // A step of a Sequential (stformer/compose/sequential.hpp).
  template <size_t B, size_t N>
  using Input = Tensor<B, N, D>;
  template <size_t B, size_t N>
  using Output = Tensor<B, 1, D>;
  template <size_t B, size_t N, class Pool>
  void run(const Input<B, N>& x, Output<B, N>& y, Nothing, const Mask<B, N>& mask, Pool&&) const {
    for (size_t b = 0; b < B; ++b) pool<B, N>(x.data() + b * N * D, y.data() + b * D, b, mask.keys);
  }

  template <size_t B, size_t N>
  struct Infer {
    Tensor<B, 1, D> out;

    template <class X>
    const Tensor<B, 1, D>& forward(const MeanPool& p, const X& x, const KeyMask<B, N>* keys = nullptr) {
      static_assert(shape_is<X, B, N, D>, "MeanPool: input rows x must be [B, N, D] (the pass's sizes, the pool's width D)");
      p.run(x, out, Nothing{}, Mask<B, N>{.keys = keys}, Serial{});
      return out;
    }
  };

  template <size_t B, size_t N>
  struct Acts {
    using Dx = Tensor<B, N, D>;
    Tensor<B, 1, D> out;
    KeyMask<B, N> seen;  // the rows pooled
    Tensor<B> inv;       // 1/n_b

    // As a step of a chain: the pass's key mask (the causal flag is not read).
    template <class X>
    const Tensor<B, 1, D>& forward(const MeanPool& p, const X& x, const Mask<B, N>& mask) {
      return forward(p, x, mask.keys);
    }
    template <class X>
    const Tensor<B, 1, D>& forward(const MeanPool&, const X& x, const KeyMask<B, N>* keys = nullptr) {
      static_assert(shape_is<X, B, N, D>, "MeanPool: input rows x must be [B, N, D] (the pass's sizes, the pool's width D)");
      for (size_t b = 0; b < B; ++b) {
        inv(b) = pool<B, N>(x.data() + b * N * D, out.data() + b * D, b, keys);
        for (size_t j = 0; j < N; ++j) seen(b, j) = !keys || (*keys)(b, j);
      }
      return out;
    }

    const Tensor<B, N, D>& backward(const MeanPool&, MeanPool&, const Tensor<B, 1, D>& dout, Tensor<B, N, D>& dx) {
      for (size_t b = 0; b < B; ++b)
        for (size_t j = 0; j < N; ++j) {
          float* d = dx.data() + (b * N + j) * D;
          if (seen(b, j))
            for (size_t c = 0; c < D; ++c) d[c] = dout(b, 0, c) * inv(b);
          else
            std::fill_n(d, D, 0.0f);
        }
      return dx;
    }
  };
};

}  // namespace stformer
