// ClassToken<D>, FirstToken<D> and LastToken<D> (blocks/tokens.hpp) on int16 streams. They keep
// their input's scale s (same_scale): their output rows are their input's, and the class token's
// row is calibrated with them (the stream's max|·| is taken over ClassToken's whole output).
//   QClassToken<D>:  x [B, N, D] -> y [B, N + 1, D]
//                    y[b, 0] = cls_q, y[b, 1 + n] = x[b, n]
//                    cls_q = clamp(round(cls_token / s), ±32767), made once from the float token
//                    Tensors: cls_token I16 [1, 1, D]. prepends = 1: in a Sequential the steps
//                    after it see the key-padding mask shifted past the token, as in float.
//   QFirstToken<D>:  x [B, N, D] -> y [B, 1, D],  y[b, 0] = x[b, 0] (the class token's output)
//   QLastToken<D>:   y[b, 0] = x[b, N − 1]. No tensors.
#pragma once

#include "../core/config.hpp"

#include <algorithm>
#include <cstdint>

#include "../blocks/tokens.hpp"
#include "linear.hpp"

namespace stformer::inline STFORMER_ABI {

template <size_t D>
struct QClassToken {
  TensorOf<std::int16_t, 1, 1, D> cls_token;
  static constexpr size_t prepends = 1;

  template <class F, class... S>
  static constexpr void visit(const Path& at, F& f, S&... s) {
    f(at / "cls_token", Init{Init::zeros}, s.cls_token...);
  }

  using Float = ClassToken<D>;
  static constexpr bool same_scale = true;
  using Ranges = NoRanges;
  void from_float(const Float& f, const Ranges&, float s, float) { quant::quantize_input(f.cls_token.data(), D, s, cls_token.data()); }

  template <size_t B, size_t N>
  using Input = TensorOf<std::int16_t, B, N, D>;
  template <size_t B, size_t N>
  using Output = TensorOf<std::int16_t, B, N + 1, D>;
  template <size_t B, size_t N, class Pool>
  void run(const Input<B, N>& x, Output<B, N>& y, Nothing, const Mask<B, N>&, Pool&&) const {
    for (size_t b = 0; b < B; ++b) {
      std::copy_n(cls_token.data(), D, y.data() + b * (N + 1) * D);
      std::copy_n(x.data() + b * N * D, N * D, y.data() + (b * (N + 1) + 1) * D);
    }
  }
};
template <size_t D>
struct Int8Of<ClassToken<D>> {
  using type = QClassToken<D>;
};

// QFirstToken<D>, QLastToken<D>: the row copied, on the int16 stream.
template <class F, size_t D, bool Last>
struct QTokenRow {
  template <class V, class... S>
  static constexpr void visit(const Path&, V&, S&...) {}

  using Float = F;
  static constexpr bool same_scale = true;
  static constexpr bool decodes = Last;  // DecodeOf: the last row of one is that row
  using Ranges = NoRanges;
  void from_float(const Float&, const Ranges&, float, float) {}

  template <size_t B, size_t N>
  using Input = TensorOf<std::int16_t, B, N, D>;
  template <size_t B, size_t N>
  using Output = TensorOf<std::int16_t, B, 1, D>;
  template <size_t B, size_t N, class Pool>
  void run(const Input<B, N>& x, Output<B, N>& y, Nothing, const Mask<B, N>&, Pool&&) const {
    for (size_t b = 0; b < B; ++b) std::copy_n(x.data() + (b * N + F::template r<N>) * D, D, y.data() + b * D);
  }
};
template <size_t D>
using QFirstToken = QTokenRow<FirstToken<D>, D, false>;
template <size_t D>
using QLastToken = QTokenRow<LastToken<D>, D, true>;
template <size_t D>
struct Int8Of<FirstToken<D>> {
  using type = QFirstToken<D>;
};
template <size_t D>
struct Int8Of<LastToken<D>> {
  using type = QLastToken<D>;
};

}  // namespace stformer
