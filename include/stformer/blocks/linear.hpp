// Linear<In, Out>: y = x Wᵀ + b over rows [L..., In] -> [L..., Out].
//   backward: dW += dyᵀ x, db += Σ_rows dy, dx = dy W
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
    const Tensor<L..., In>* x = nullptr;  // the input of the last forward
    Tensor<L..., Out> out;
    Tensor<L..., In> dx;

    // Relu: out = max(x Wᵀ + b, 0) in the same pass (FeedForward's first layer)
    template <bool Relu = false, class X>
    const Tensor<L..., Out>& forward(const Linear& p, const X& in) {
      static_assert(std::is_same_v<X, Tensor<L..., In>>, "Linear: input rows x [..., In] and weight [Out, In] differ in In");
      x = &in;
      kernels::matmul_nt<rows, Out, In, Relu>(in.data(), In, p.weight.data(), In, out.data(), Out, 1.0f, p.bias.data());
      return out;
    }

    const Tensor<L..., In>& backward(const Linear& p, Linear& grad, const Tensor<L..., Out>& dout) {
      kernels::matmul_tn<Out, In, rows>(dout.data(), Out, x->data(), In, grad.weight.data(), In);
      kernels::add_column_sums<rows, Out>(dout.data(), grad.bias.data());
      kernels::matmul_nn<rows, In, Out>(dout.data(), Out, p.weight.data(), In, dx.data(), In);
      return dx;
    }
  };
};

}  // namespace stformer
