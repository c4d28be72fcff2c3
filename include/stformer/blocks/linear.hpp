// Linear<In, Out>: y = x Wᵀ + b over rows [L..., In] -> [L..., Out].
// Parameters: weight [Out, In], bias [Out] (PyTorch's layout). The Init kind is part of the
// type because it depends on the role: Xavier-normal for attention projections, input
// projections and heads; Kaiming-normal (fan-in, gain √2) in feed-forward layers.
#pragma once

#include "../kernels/matmul.hpp"
#include "../params.hpp"

namespace stformer {

template <size_t In, size_t Out, Init::Kind WeightInit = Init::xavier_normal>
struct Linear {
  Tensor<Out, In> weight;
  Tensor<Out> bias;

  template <class F, class... S>
  static void visit(const Path& at, F& f, S&... s) {
    f(at / "weight", Init{WeightInit}, s.weight...);
    f(at / "bias", Init{Init::zeros}, s.bias...);
  }

  template <size_t... L>
  struct Acts {
    static constexpr size_t rows = (L * ... * 1);
    Tensor<L..., Out> out;

    template <class X>
    const Tensor<L..., Out>& forward(const Linear& p, const X& x) {
      static_assert(std::is_same_v<X, Tensor<L..., In>>, "Linear: input rows x [..., In] and weight [Out, In] differ in In");
      kernels::matmul_nt<rows, Out, In>(x.data(), In, p.weight.data(), In, out.data(), Out, 1.0f, p.bias.data());
      return out;
    }
  };
};

}  // namespace stformer
