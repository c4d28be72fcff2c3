// ScaleNorm<D> (Nguyen & Salazar 2019): y = g · x / max(‖x‖₂, 1e-5) per row of width D.
// Parameter: g [1], initialised to sqrt(D). Identity<D> is the no-op norm (no parameters),
// the Norm that MAB uses for the un-normalised blocks of the Set Transformer paper.
#pragma once

#include "../kernels/rowwise.hpp"
#include "../params.hpp"

namespace stformer {

template <size_t D>
struct ScaleNorm {
  Tensor<1> g;

  template <class F, class... S>
  static void visit(const Path& at, F& f, S&... s) {
    f(at / "g", Init{Init::constant, 1.0f / inv_sqrt(D)}, s.g...);
  }

  // Rows of shape [L..., D].
  template <size_t... L>
  struct Acts {
    static constexpr size_t rows = (L * ... * 1);
    Tensor<L..., D> out;
    Tensor<rows> scale;  // g / max(‖x‖, eps) of each row

    template <class X>
    const Tensor<L..., D>& forward(const ScaleNorm& p, const X& x) {
      static_assert(std::is_same_v<X, Tensor<L..., D>>, "ScaleNorm: input rows x [..., D] and the norm's width D differ");
      kernels::scalenorm_rows<rows, D>(x.data(), out.data(), p.g(0), scale.data());
      return out;
    }
  };
};

template <size_t D>
struct Identity {
  template <class F, class... S>
  static void visit(const Path&, F&, S&...) {}

  template <size_t... L>
  struct Acts {
    template <class X>
    const X& forward(const Identity&, const X& x) {
      static_assert(std::is_same_v<X, Tensor<L..., D>>, "Identity: input rows x [..., D] and the norm's width D differ");
      return x;
    }
  };
};

}  // namespace stformer
