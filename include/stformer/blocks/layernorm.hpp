// LayerNorm<D> (Ba et al. 2016; PyTorch's nn.LayerNorm(D)) and RMSNorm<D> (Zhang & Sennrich 2019;
// PyTorch's nn.RMSNorm(D)) per row x of width D:
//   LayerNorm: y = w ⊙ (x − μ) / √(σ² + ε) + b,  μ = mean x, σ² = mean (x − μ)² (biased)
//   RMSNorm:   y = w ⊙ x / √(mean x² + ε)
// ε is the template parameter Eps, written epsilon(value): by default PyTorch's, 1e-5 for
// LayerNorm and float's epsilon 1.1920929e-7 for RMSNorm; LayerNorm<D, epsilon(1e-6f)> is
// torchvision's and timm's ViT, LayerNorm<D, epsilon(1e-12f)> BERT's. (A float as a template
// argument is C++20, but not yet clang's: the value travels as its bits.)
// A row of constant value gives y = b (LayerNorm); a row of zeros y = 0 (RMSNorm): ε keeps both
// finite.
//   backward (x̂ the normalised row, rstd = 1/√(·), g = dy ⊙ w):
//     LayerNorm: dx = rstd·(g − mean g − x̂·mean(g ⊙ x̂)),  dw += Σ_rows dy ⊙ x̂,  db += Σ_rows dy
//     RMSNorm:   dx = rstd·(g − x̂·mean(g ⊙ x̂)),          dw += Σ_rows dy ⊙ x̂
// Parameters (PyTorch's names and initial values): weight [D] (ones), bias [D] (zeros; LayerNorm).
#pragma once

#include "../core/config.hpp"

#include <bit>
#include <cstdint>
#include <type_traits>

#include "../kernels/rowwise.hpp"
#include "../core/params.hpp"

namespace stformer::inline STFORMER_ABI {

// A norm's ε as a template argument: the float's bits.
enum class Epsilon : std::uint32_t {};
constexpr Epsilon epsilon(float value) { return Epsilon(std::bit_cast<std::uint32_t>(value)); }
inline std::string declared_value(Epsilon e) { return decl::wrapped("epsilon(", decl::shortest(std::bit_cast<float>(std::uint32_t(e))), ")"); }

template <size_t D, bool Centred, Epsilon Eps = epsilon(Centred ? 1e-5f : 1.1920929e-7f)>
struct RowNorm : RowLocal<RowNorm<D, Centred, Eps>, D> {
  static std::string declaration() { return declare(Centred ? "LayerNorm" : "RMSNorm", D, Eps); }
  static constexpr float eps = std::bit_cast<float>(std::uint32_t(Eps));
  Tensor<D> weight;
  [[no_unique_address]] std::conditional_t<Centred, Tensor<D>, Nothing> bias;

  template <class F, class... S>
  static constexpr void visit(const Path& at, F& f, S&... s) {
    f(at / "weight", Init{Init::constant, 1.0f}, s.weight...);
    if constexpr (Centred) f(at / "bias", Init{Init::zeros}, s.bias...);
  }

  // y = the norm of Rows rows x [Rows, D] (y may be x): a row-local step (RowLocal); mean and rstd
  // of each row kept when not null.
  template <size_t Rows>
  void apply(const float* x, float* y, float* mean = nullptr, float* rstd = nullptr) const {
    if constexpr (Centred)
      kernels::layernorm_rows<Rows, D>(x, y, weight.data(), bias.data(), eps, mean, rstd);
    else
      kernels::rmsnorm_rows<Rows, D>(x, y, weight.data(), eps, rstd);
  }

  // Rows of shape [L..., D].
  template <size_t... L>
  struct Acts {
    static constexpr size_t rows = (L * ... * 1);
    using Dx = Tensor<L..., D>;
    const Tensor<L..., D>* x = nullptr;  // the input of the last forward
    Tensor<L..., D> out;
    [[no_unique_address]] std::conditional_t<Centred, Tensor<rows>, Nothing> mean;
    Tensor<rows> rstd;

    template <class X>
    const Tensor<L..., D>& forward(const RowNorm& p, const X& in) {
      static_assert(shape_is<X, L..., D>, "LayerNorm, RMSNorm: input rows x must be [..., D] (the pass's sizes, the norm's width D)");
      x = &in;
      p.template apply<rows>(in.data(), out.data(), mean_data(), rstd.data());
      return out;
    }

    const Tensor<L..., D>& backward(const RowNorm& p, RowNorm& grad, const Tensor<L..., D>& dout, Tensor<L..., D>& dx) {
      kernels::norm_backward_rows<rows, D>(x->data(), dout.data(), p.weight.data(), mean_data(), rstd.data(), dx.data(),
                                           grad.weight.data(), bias_data(grad));
      return dx;
    }

   private:
    float* mean_data() {
      if constexpr (Centred) return mean.data();
      else return nullptr;
    }
    static float* bias_data(RowNorm& grad) {
      if constexpr (Centred) return grad.bias.data();
      else return nullptr;
    }
  };
};

template <size_t D, Epsilon Eps = epsilon(1e-5f)>
struct LayerNorm : RowNorm<D, true, Eps> {};
template <size_t D, Epsilon Eps = epsilon(1.1920929e-7f)>
struct RMSNorm : RowNorm<D, false, Eps> {};

}  // namespace stformer
