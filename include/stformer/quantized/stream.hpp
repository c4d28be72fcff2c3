// The two ends of a quantized model (stformer/quantize.hpp): its one float step in and its one
// float step out, around integer steps on int16 streams.
//   QuantizeInput<W>: x [B, N, W] (float) -> x_q = clamp(round(x / scale), ±32767)   (int16)
//   Dequantize<W>:    y_q [B, N, W] (int16) -> y = scale · y_q                        (float)
// So a quantized model takes and gives what its float model does. Tensors: scale F32 [1].
#pragma once

#include "../config.hpp"

#include <cstdint>

#include "linear.hpp"

namespace stformer::inline STFORMER_ABI {

template <size_t W>
struct QuantizeInput {
  Scale scale;

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

  template <class F, class... S>
  static constexpr void visit(const Path& at, F& f, S&... s) {
    f(at / "scale", Init{Init::zeros}, s.scale...);
  }

  template <size_t B, size_t N>
  using Input = TensorOf<std::int16_t, B, N, W>;
  template <size_t B, size_t N>
  using Output = Tensor<B, N, W>;
  template <size_t B, size_t N, class Pool>
  void run(const Input<B, N>& x, Output<B, N>& y, Nothing, const Mask<B, N>&, Pool&&) const {
    for (size_t i = 0; i < B * N * W; ++i) y.data()[i] = scale(0) * float(x.data()[i]);
  }
};

}  // namespace stformer
