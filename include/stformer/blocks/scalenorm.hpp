// ScaleNorm<D> (Nguyen & Salazar 2019): y = g · x / max(‖x‖₂, 1e-5) per row of width D.
// Parameter: g [1], initialised to sqrt(D). Identity<D> is the no-op norm (no parameters),
// the Norm that MAB uses for the un-normalised blocks of the Set Transformer paper.
//   backward: dx = g·r·(dy − x (x·dy) r²), r = 1/max(‖x‖, 1e-5) (dx = g·r·dy where clamped);
//             dg += Σ_rows (x·dy)·r
#pragma once

#include "../core/config.hpp"

#include <algorithm>

#include "../kernels/rowwise.hpp"
#include "../core/params.hpp"

namespace stformer::inline STFORMER_ABI {

template <size_t D>
struct ScaleNorm : RowLocal<ScaleNorm<D>, D> {
  static std::string declaration() { return declare("ScaleNorm", D); }
  Tensor<1> g;

  template <class F, class... S>
  static constexpr void visit(const Path& at, F& f, S&... s) {
    f(at / "g", Init{Init::constant, 1.0f / inv_sqrt(D)}, s.g...);
  }

  // y = g · x / max(‖x‖, 1e-5) on Rows rows of width D (y may be x): a row-local step (RowLocal)
  template <size_t Rows>
  void apply(const float* x, float* y) const {
    kernels::scalenorm_rows<Rows, D>(x, y, g(0), nullptr);
  }

  // Rows of shape [L..., D].
  template <size_t... L>
  struct Acts {
    static constexpr size_t rows = (L * ... * 1);
    using Dx = Tensor<L..., D>;
    const Tensor<L..., D>* x = nullptr;  // the input of the last forward
    Tensor<L..., D> out;
    Tensor<rows> rnorm;  // 1 / max(‖x‖, eps) of each row

    template <class X>
    const Tensor<L..., D>& forward(const ScaleNorm& p, const X& in) {
      static_assert(shape_is<X, L..., D>, "ScaleNorm: input rows x must be [..., D] (the pass's sizes, the norm's width D)");
      x = &in;
      kernels::scalenorm_rows<rows, D>(in.data(), out.data(), p.g(0), rnorm.data());
      return out;
    }

    const Tensor<L..., D>& backward(const ScaleNorm& p, ScaleNorm& grad, const Tensor<L..., D>& dout, Tensor<L..., D>& dx) {
      kernels::scalenorm_backward_rows<rows, D>(x->data(), dout.data(), p.g(0), rnorm.data(), dx.data(), grad.g(0));
      return dx;
    }
  };
};

template <size_t D>
struct Identity {
  static std::string declaration() { return declare("Identity", D); }
  template <class F, class... S>
  static constexpr void visit(const Path&, F&, S&...) {}

  // y = x (a copy unless y is x)
  template <size_t Rows>
  void apply(const float* x, float* y) const {
    if (x != y) std::copy_n(x, Rows * D, y);
  }

  // A step of a Sequential (a declared block's un-normalised part): in place, nothing done.
  template <size_t B, size_t N>
  using Input = Tensor<B, N, D>;
  static constexpr bool in_place = true;
  static constexpr bool row_local = true;  // step::row_local
  template <size_t B, size_t N, class Pool>
  void forward_in_place(Tensor<B, N, D>&, Nothing, const Mask<B, N>&, Pool&&) const {}

  // Acts and Infer keep nothing: forward returns its input.
  template <size_t... L>
  struct Acts {
    template <class X>
    const X& forward(const Identity&, const X& x) {
      static_assert(shape_is<X, L..., D>, "Identity: input rows x must be [..., D] (the pass's sizes, the norm's width D)");
      return x;
    }
    using Dx = Tensor<L..., D>;
    const Tensor<L..., D>& backward(const Identity&, Identity&, const Tensor<L..., D>& dout, Tensor<L..., D>& dx) {
      if (&dx != &dout) dx = dout;
      return dx;
    }
  };
  template <size_t... L>
  using Infer = Acts<L...>;
};

}  // namespace stformer
