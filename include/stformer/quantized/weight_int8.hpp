// Weight-only int8 for the large layers on the host: int8 weights with one scale per row,
// float activations. The language model's 33,278-word embedding and head hold nearly all of its
// 36 MB; in int8 a window's forward pass reads 4× fewer bytes of them.
//
//   Int8Embedding<V, D>: out[r] = s[id]·W_q[id]          (a row lookup, dequantized)
//   Int8Linear<In, Out>: y = x (s ⊙ W_q)ᵀ + b            (rows of W_q dequantized into a float
//                                                         panel, C rows at a time, then the float
//                                                         product: kernels::matmul_nt; one row of
//                                                         x: x rounded to int16, then integer dot
//                                                         products on the int8 rows)
// with W[r, :] ≈ s[r]·W_q[r, :], W_q in [−127, 127] (symmetric, per row). Drop-in for
// Embedding and Linear in a forward-only pass (apply has their signature): LanguageModel's
// Embed and Head parameters (LanguageModelW8 below). Tensors: weight I8 [rows, width],
// weight_scale F32 [rows], bias F32 [Out] (Int8Linear).
#pragma once

#include "../core/config.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "../blocks/embedding.hpp"
#include "../blocks/linear.hpp"
#include "../kernels/int8.hpp"
#include "../kernels/matmul.hpp"
#include "../kernels/vec.hpp"
#include "../models/language_model.hpp"
#include "linear.hpp"

namespace stformer::inline STFORMER_ABI {

template <size_t V, size_t D>
struct Int8Embedding {
  static constexpr size_t vocabulary = V;  // token ids in [0, V)
  TensorOf<std::int8_t, V, D> weight;
  Tensor<V> weight_scale;

  template <class F, class... S>
  static constexpr void visit(const Path& at, F& f, S&... s) {
    f(at / "weight", Init{Init::zeros}, s.weight...);
    f(at / "weight_scale", Init{Init::zeros}, s.weight_scale...);
  }

  static void quantize(const Embedding<V, D>& f, Int8Embedding& q) { quant::quantize_rows(f.weight, q.weight, q.weight_scale); }

  // W_q[id] (an id outside [0, V) fails, as Embedding's)
  const std::int8_t* row(std::int32_t id) const {
    STFORMER_CHECK(id >= 0 && size_t(id) < V, "Int8Embedding: token id outside [0, V)");
    return weight.data() + size_t(id) * D;
  }

  // A step of a Sequential in Embedding's place (forward only).
  template <size_t B, size_t N>
  using Input = IdTensor<B, N>;
  template <size_t B, size_t N>
  using Output = Tensor<B, N, D>;
  template <size_t B, size_t N, class Pool>
  void run(const Input<B, N>& ids, Output<B, N>& y, Nothing, const Mask<B, N>&, Pool&&) const {
    apply<B * N>(ids.data(), y.data());
  }

  // out[r] = s[ids[r]]·W_q[ids[r]] for Rows ids
  template <size_t Rows>
  void apply(const std::int32_t* ids, float* out) const {
    for (size_t r = 0; r < Rows; ++r) {
      const std::int8_t* w = row(ids[r]);
      const float s = weight_scale(size_t(ids[r]));
      for (size_t k = 0; k < D; ++k) out[r * D + k] = s * float(w[k]);
    }
  }
};

template <size_t In, size_t Out>
struct Int8Linear {
  TensorOf<std::int8_t, Out, In> weight;
  Tensor<Out> weight_scale;
  Tensor<Out> bias;

  template <class F, class... S>
  static constexpr void visit(const Path& at, F& f, S&... s) {
    f(at / "weight", Init{Init::zeros}, s.weight...);
    f(at / "weight_scale", Init{Init::zeros}, s.weight_scale...);
    f(at / "bias", Init{Init::zeros}, s.bias...);
  }

  // A step of a Sequential in Linear's place (forward only).
  template <size_t B, size_t N>
  using Input = Tensor<B, N, In>;
  template <size_t B, size_t N>
  using Output = Tensor<B, N, Out>;
  template <size_t B, size_t N, class Pool>
  void run(const Input<B, N>& x, Output<B, N>& y, Nothing, const Mask<B, N>&, Pool&&) const {
    apply<B * N>(x.data(), y.data());
  }

  template <Init::Kind K, Bias Bi>
  static void quantize(const Linear<In, Out, K, Bi>& f, Int8Linear& q) {
    quant::quantize_rows(f.weight, q.weight, q.weight_scale);
    for (size_t c = 0; c < Out; ++c) q.bias(c) = f.bias(c);
  }

  // Output rows dequantized per panel: C·In floats (16 KB at In = 128) on the stack.
  static constexpr size_t C = 32;

  // y [Rows, Out] = x [Rows, In] (s ⊙ W_q)ᵀ + b. One row (a window's head), In ≤ 516: x is
  // rounded to int16 at one scale, s_x = max|x| / 32767, and y[n] = (s[n]·s_x)·(x_q · W_q[n]) +
  // b[n], the dot products exact in int32 (kernels::qmatmul_nt with int16 rows: 16 products per
  // instruction on x86), NB rows at a time. Rounding x moves y[n] by at most
  // s[n]·Σ_k |W_q[n, k]|·s_x/2. A row holding a NaN or an infinity gives NaN everywhere.
  template <size_t Rows>
  void apply(const float* x, float* y) const {
    if constexpr (Rows == 1 && In <= 516) {
      float m = 0;
      for (size_t k = 0; k < In; ++k) {
        const float a = std::abs(x[k]);
        if (!(a <= std::numeric_limits<float>::max())) {  // NaN or ∞
          std::fill_n(y, Out, std::numeric_limits<float>::quiet_NaN());
          return;
        }
        m = std::max(m, a);
      }
      if (m == 0) {
        std::copy_n(bias.data(), Out, y);
        return;
      }
      alignas(64) std::int16_t xq[In];
      const float sx = quant::scale_for(m, 32767);
      quant::quantize_input(x, In, sx, xq);
      constexpr size_t NB = 256;
      alignas(64) std::int32_t acc[NB];
      const auto block = [&]<size_t N>(size_t n0) {
        kernels::qmatmul_nt<1, N, In>(xq, In, weight.data() + n0 * In, In, acc, N);
        for (size_t n = 0; n < N; ++n) y[n0 + n] = (weight_scale(n0 + n) * sx) * float(acc[n]) + bias(n0 + n);
      };
      size_t n0 = 0;
      for (; n0 + NB <= Out; n0 += NB) block.template operator()<NB>(n0);
      if constexpr (Out % NB != 0) block.template operator()<Out % NB>(n0);
      return;
    }
    alignas(64) float panel[C * In];
    const auto block = [&]<size_t N>(size_t n0) {
      for (size_t n = 0; n < N; ++n) {
        const std::int8_t* row = weight.data() + (n0 + n) * In;
        const float s = weight_scale(n0 + n);
        for (size_t k = 0; k < In; ++k) panel[n * In + k] = s * float(row[k]);
      }
      kernels::matmul_nt<Rows, N, In>(x, In, panel, In, y + n0, Out, 1.0f, bias.data() + n0);
    };
    size_t n0 = 0;
    for (; n0 + C <= Out; n0 += C) block.template operator()<C>(n0);
    if constexpr (Out % C != 0) block.template operator()<Out % C>(n0);
  }
};

// SPEC's language model with an int8 embedding and head (weight-only), the blocks and the pool
// in float: the same names as LanguageModel's checkpoints, embedding.weight and head.weight I8
// with their weight_scale beside them.
template <size_t V, size_t L, size_t D, size_t H, size_t F, size_t Blocks>
using LanguageModelW8 = LanguageModel<V, L, D, H, F, Blocks, Int8Embedding<V, D>, Int8Linear<D, V>>;

// The weight-only int8 model of a float one (host side).
template <size_t V, size_t L, size_t D, size_t H, size_t F, size_t Blocks>
void quantize_weights(const LanguageModel<V, L, D, H, F, Blocks>& f, LanguageModelW8<V, L, D, H, F, Blocks>& q) {
  Int8Embedding<V, D>::quantize(f.template get<"embedding">(), q.template get<"embedding">());
  q.template get<"blocks">() = f.template get<"blocks">();
  q.template get<"pool">() = f.template get<"pool">();
  Int8Linear<D, V>::quantize(f.template get<"head">(), q.template get<"head">());
}

}  // namespace stformer
