// Activations, element by element: the kinds a FeedForward takes (act::ReLU, ...) and, as steps
// of a Sequential without parameters, ReLU<D>, GELU<D>, GELUTanh<D>, SiLU<D>, Tanh<D>
// (Activation<Kind, D>):
//   act::ReLU      y = max(x, 0)                                     nn.ReLU()
//   act::GELU      y = x·Φ(x) = ½x·(1 + erf(x/√2))                   nn.GELU()
//   act::GELUTanh  y = ½x·(1 + tanh(u)), u = √(2/π)·(x + 0.044715x³) nn.GELU(approximate='tanh')
//   act::SiLU      y = x·σ(x) = x / (1 + e^(−x))                     nn.SiLU()
//   act::Tanh      y = tanh(x)                                       nn.Tanh() (BERT's pooler)
//   backward, from the input x: dx = dy·f'(x),
//     GELU f' = Φ(x) + x·φ(x);  GELUTanh f' = ½(1 + t) + ½x(1 − t²)·√(2/π)(1 + 3·0.044715x²),
//     t = tanh(u);  SiLU f' = σ(x)·(1 + x(1 − σ(x)));  ReLU f' = [x > 0] = [y > 0];
//     Tanh f' = 1 − y²
// In a chain after a step whose record keeps its output unread by its backward (a Linear), its
// record is RecordOverInput: x read there, and for ReLU and Tanh, whose derivatives are also
// functions of their outputs (Kind::df_from_output(y)), y written over x, no tensor of its own.
#pragma once

#include "../core/config.hpp"

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "../kernels/rowwise.hpp"
#include "../core/params.hpp"

namespace stformer::inline STFORMER_ABI {

namespace act {

struct ReLU {
  static constexpr const char* name = "ReLU";
  static float f(float x) { return x > 0.0f ? x : 0.0f; }
  static float df(float x) { return x > 0.0f ? 1.0f : 0.0f; }
  static float df_from_output(float y) { return y > 0.0f ? 1.0f : 0.0f; }  // [y > 0] = [x > 0]
};
struct GELU {
  static constexpr const char* name = "GELU";
  static float f(float x) { return 0.5f * x * (1.0f + std::erf(x * 0.70710678118654752f)); }
  static float df(float x) {
    const float cdf = 0.5f * (1.0f + std::erf(x * 0.70710678118654752f));
    return cdf + x * 0.39894228040143268f * std::exp(-0.5f * x * x);
  }
};
struct GELUTanh {
  static constexpr const char* name = "GELUTanh";
  static constexpr float k = 0.79788456080286536f, c = 0.044715f;  // √(2/π)
  static float f(float x) { return 0.5f * x * (1.0f + std::tanh(k * (x + c * x * x * x))); }
  static float df(float x) {
    const float t = std::tanh(k * (x + c * x * x * x));
    return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * k * (1.0f + 3.0f * c * x * x);
  }
};
struct SiLU {
  static constexpr const char* name = "SiLU";
  static float f(float x) { return x / (1.0f + std::exp(-x)); }
  static float df(float x) {
    const float s = 1.0f / (1.0f + std::exp(-x));
    return s * (1.0f + x * (1.0f - s));
  }
};

struct Tanh {
  static constexpr const char* name = "Tanh";
  static float f(float x) { return std::tanh(x); }
  static float df(float x) { return df_from_output(std::tanh(x)); }
  static float df_from_output(float y) { return 1.0f - y * y; }
};

// x ← f(x) on N entries: ReLU by the vector kernel; with xsimd the others by its vector erf, tanh
// and exp (within a few ulp of the scalar functions), else entry by entry.
template <class Act, size_t N>
inline void apply(float* x) {
  if constexpr (std::is_same_v<Act, ReLU>) {
    kernels::relu<N>(x);
  } else {
    size_t full = 0;
#if STFORMER_SIMD
    using kernels::vf, kernels::W, kernels::splat;
    full = N / W * W;
    for (size_t i = 0; i < full; i += W) {
      const vf v = kernels::load(x + i);
      vf y;
      if constexpr (std::is_same_v<Act, GELU>)
        y = splat(0.5f) * v * (splat(1.0f) + xsimd::erf(v * splat(0.70710678118654752f)));
      else if constexpr (std::is_same_v<Act, GELUTanh>)
        y = splat(0.5f) * v * (splat(1.0f) + xsimd::tanh(splat(GELUTanh::k) * (v + splat(GELUTanh::c) * v * v * v)));
      else if constexpr (std::is_same_v<Act, Tanh>)
        y = xsimd::tanh(v);
      else
        y = v / (splat(1.0f) + xsimd::exp(-v));
      kernels::store(x + i, y);
    }
#endif
    for (size_t i = full; i < N; ++i) x[i] = Act::f(x[i]);
  }
}
// d ← d ⊙ f'(x)
template <class Act, size_t N>
inline void backward(const float* x, float* d) {
  for (size_t i = 0; i < N; ++i) d[i] *= Act::df(x[i]);
}
// d ← d ⊙ f'(x) read from y = f(x) (ReLU by the vector kernel)
template <class Act, size_t N>
inline void backward_from_output(const float* y, float* d) {
  if constexpr (std::is_same_v<Act, ReLU>)
    kernels::relu_backward<N>(y, d);
  else
    for (size_t i = 0; i < N; ++i) d[i] *= Act::df_from_output(y[i]);
}

}  // namespace act

template <class K, size_t D>
struct Activation : RowLocal<Activation<K, D>, D> {
  using Kind = K;
  static std::string declaration() { return declare(K::name, D); }  // Activation<act::GELU, D> is GELU<D>
  static constexpr bool relu = std::is_same_v<K, act::ReLU>;  // a linear layer before it may apply it (step::RowTiles)
  template <class F, class... S>
  static constexpr void visit(const Path&, F&, S&...) {}

  // y = f(x) on Rows rows [Rows, D] (y may be x): a row-local step (RowLocal).
  template <size_t Rows>
  void apply(const float* x, float* y) const {
    if (x != y) std::copy_n(x, Rows * D, y);
    act::apply<Kind, Rows * D>(y);
  }

  // backward_in_place: dx may be dout (a chain's gradients in one buffer)
  template <size_t... L>
  struct Acts {
    using Dx = Tensor<L..., D>;
    static constexpr bool backward_in_place = true;
    const Tensor<L..., D>* x = nullptr;  // the input of the last forward
    Tensor<L..., D> out;

    template <class X>
    const Tensor<L..., D>& forward(const Activation& p, const X& in) {
      static_assert(shape_is<X, L..., D>, "activation: input rows x must be [..., D] (the pass's sizes, the step's width D)");
      x = &in;
      p.template apply<(L * ... * 1)>(in.data(), out.data());
      return out;
    }
    const Tensor<L..., D>& backward(const Activation&, Activation&, const Tensor<L..., D>& dout, Tensor<L..., D>& dx) {
      if (&dx != &dout) dx = dout;
      act::backward<Kind, (L * ... * 1) * D>(x->data(), dx.data());
      return dx;
    }
  };

  // The record beside its input, the previous step's record's output (an object of that
  // record's own that nothing else reads: step::RecordOverInput), which backward is given again:
  // for a kind whose derivative is read from its output (ReLU) y is written over it and the
  // record holds nothing; for another it holds y, and x is read there.
  template <size_t... L>
  struct RecordOverInput {
    using Dx = Tensor<L..., D>;
    static constexpr bool records_over_input = true, backward_in_place = true;
    static constexpr bool over = requires(float y) { Kind::df_from_output(y); };
    [[no_unique_address]] std::conditional_t<over, Nothing, Tensor<L..., D>> out;

    const Tensor<L..., D>& forward(const Activation& p, const Tensor<L..., D>& x) {
      auto& y = [&]() -> Tensor<L..., D>& {
        if constexpr (over)
          return const_cast<Tensor<L..., D>&>(x);
        else
          return out;
      }();
      p.template apply<(L * ... * 1)>(x.data(), y.data());
      return y;
    }
    const Tensor<L..., D>& backward(const Activation&, Activation&, const Tensor<L..., D>& dout, Tensor<L..., D>& dx, const Tensor<L..., D>& in) {
      if (&dx != &dout) dx = dout;
      if constexpr (over)
        act::backward_from_output<Kind, (L * ... * 1) * D>(in.data(), dx.data());
      else
        act::backward<Kind, (L * ... * 1) * D>(in.data(), dx.data());
      return dx;
    }
  };
};

template <size_t D>
struct ReLU : Activation<act::ReLU, D> {};
template <size_t D>
struct GELU : Activation<act::GELU, D> {};
template <size_t D>
struct GELUTanh : Activation<act::GELUTanh, D> {};
template <size_t D>
struct SiLU : Activation<act::SiLU, D> {};
template <size_t D>
struct Tanh : Activation<act::Tanh, D> {};

}  // namespace stformer
