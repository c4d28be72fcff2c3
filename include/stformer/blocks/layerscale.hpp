// LayerScale<D> (Touvron et al. 2021, "Going deeper with Image Transformers"; timm's LayerScale)
// per row x of width D:
//   y = γ ⊙ x
//   backward: dγ += Σ_rows dy ⊙ x,  dx = dy ⊙ γ
// Parameter: gamma [D], every entry 1e-5 at initialisation (timm's init_values default), so a
// residual branch it ends starts close to the identity of the stream. (The name Scale is the
// quantization scale's.)
#pragma once

#include "../core/config.hpp"

#include "../core/params.hpp"

namespace stformer::inline STFORMER_ABI {

template <size_t D>
struct LayerScale : RowLocal<LayerScale<D>, D> {
  static std::string declaration() { return declare("LayerScale", D); }
  Tensor<D> gamma;

  template <class F, class... S>
  static constexpr void visit(const Path& at, F& f, S&... s) {
    f(at / "gamma", Init{Init::constant, 1e-5f}, s.gamma...);
  }

  // y = γ ⊙ x for Rows rows x [Rows, D] (y may be x): a row-local step (RowLocal).
  template <size_t Rows>
  void apply(const float* x, float* y) const {
    const float* g = gamma.data();
    for (size_t r = 0; r < Rows; ++r, x += D, y += D)
      for (size_t j = 0; j < D; ++j) y[j] = g[j] * x[j];
  }

  // Into a stream (a residual body's last step): h += γ ⊙ x.
  template <size_t B, size_t N, class Pool>
  void run_add(const Tensor<B, N, D>& x, Tensor<B, N, D>& h, Nothing, const Mask<B, N>&, Pool&&) const {
    const float* g = gamma.data();
    for (size_t r = 0; r < B * N; ++r)
      for (size_t j = 0; j < D; ++j) h.data()[r * D + j] += g[j] * x.data()[r * D + j];
  }

  // Rows of shape [L..., D].
  template <size_t... L>
  struct Acts {
    static constexpr size_t rows = (L * ... * 1);
    using Dx = Tensor<L..., D>;
    const Tensor<L..., D>* x = nullptr;  // the input of the last forward
    Tensor<L..., D> out;

    template <class X>
    const Tensor<L..., D>& forward(const LayerScale& p, const X& in) {
      static_assert(shape_is<X, L..., D>, "LayerScale: input rows x must be [..., D] (the pass's sizes, the scale's width D)");
      x = &in;
      p.template apply<rows>(in.data(), out.data());
      return out;
    }

    const Tensor<L..., D>& backward(const LayerScale& p, LayerScale& grad, const Tensor<L..., D>& dout, Tensor<L..., D>& dx) {
      const float *xs = x->data(), *dy = dout.data(), *g = p.gamma.data();
      float *dg = grad.gamma.data(), *d = dx.data();
      for (size_t r = 0; r < rows; ++r, xs += D, dy += D, d += D)
        for (size_t j = 0; j < D; ++j) dg[j] += dy[j] * xs[j], d[j] = dy[j] * g[j];
      return dx;
    }
  };
};

}  // namespace stformer
