// The two ends of a quantized model (stformer/quantized/quantize.hpp): its one float step in and
// its one float step out, around integer steps on int16 streams.
//   QuantizeInput<W>: x [B, N, W] (float) -> x_q = clamp(round(x / scale), ±32767)   (int16)
//   Dequantize<W>:    y_q [B, N, W] (int16) -> y = scale · y_q                        (float)
// So a quantized model takes and gives what its float model does. Tensors: scale F32 [1].
#pragma once

#include "../core/config.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "linear.hpp"

namespace stformer::inline STFORMER_ABI {

template <size_t W>
struct QuantizeInput {
  Scale scale;
  static constexpr bool decodes = true;  // DecodeOf: each row alone

  template <class F, class... S>
  static constexpr void visit(const Path& at, F& f, S&... s) {
    f(at / "scale", Init{Init::zeros}, s.scale...);
  }

  template <size_t B, size_t N>
  using Input = Tensor<B, N, W>;
  template <size_t B, size_t N>
  using Output = TensorOf<std::int16_t, B, N, W>;
  template <size_t B, size_t N, class Pool>
  void run(const Input<B, N>& x, Output<B, N>& y, Nothing, const Mask<B, N>&, Pool&&) const {
    quant::quantize_input(x.data(), B * N * W, scale(0), y.data());
  }
};

template <size_t W>
struct Dequantize {
  Scale scale;
  static constexpr bool decodes = true;

  template <class F, class... S>
  static constexpr void visit(const Path& at, F& f, S&... s) {
    f(at / "scale", Init{Init::zeros}, s.scale...);
  }

  template <size_t B, size_t N>
  using Input = TensorOf<std::int16_t, B, N, W>;
  template <size_t B, size_t N>
  using Output = Tensor<B, N, W>;
  // In a chain, y is written over x (Sequential's plan: the pass's last phase takes the float
  // output's bytes, not those and the int16 input's). The n entries go in chunks of K: a chunk's
  // inputs are copied out before its outputs are written (memcpy: bytes, whatever the type that
  // last wrote them). From the back when x starts no later than y: the unread inputs [0, i) end
  // at x + 2i ≤ y + 4i, where the chunk's outputs begin. From the front when x starts at least
  // 2n bytes past y (or y ends before x): the chunk's outputs end at y + 4(i + K) ≤ x + 2(i + K),
  // where the unread inputs begin.
  static constexpr bool over_input = true;
  template <size_t B, size_t N, class Pool>
  void run(const Input<B, N>& x, Output<B, N>& y, Nothing, const Mask<B, N>&, Pool&&) const {
    constexpr size_t n = B * N * W, K = 64;
    const float s = scale(0);
    const auto chunk = [&](size_t i) {
      const size_t k = std::min(K, n - i);
      std::int16_t in[K];
      float out[K];
      std::memcpy(in, x.data() + i, k * sizeof(std::int16_t));
      for (size_t j = 0; j < k; ++j) out[j] = s * float(in[j]);
      std::memcpy(y.data() + i, out, k * sizeof(float));
    };
    if (reinterpret_cast<std::uintptr_t>(x.data()) <= reinterpret_cast<std::uintptr_t>(y.data()))
      for (size_t i = (n - 1) / K * K;; i -= K) {
        chunk(i);
        if (i == 0) break;
      }
    else
      for (size_t i = 0; i < n; i += K) chunk(i);
  }
};

}  // namespace stformer
