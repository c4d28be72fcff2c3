// QMeanPool<D>: MeanPool<D> on int16 streams, x [B, N, D] at s_in -> y [B, 1, D] at s_out:
//   y[b, c] = clamp(apply(Σ_j x[b, j, c], M / n_b), int16)     M ≈ s_in / s_out
// over the n_b keys of row b that exist (all N without a key-padding mask; y[b] = 0 when none
// does); the sum is exact in int32 (N < 65536), M / n_b an integer division of the multiplier
// (kernels::divide), once per row. Tensors: requant (Requant<1>: M), in_scale and out_scale F32 [1].
#pragma once

#include "../core/config.hpp"

#include <algorithm>
#include <cstdint>

#include "../blocks/meanpool.hpp"
#include "linear.hpp"

namespace stformer::inline STFORMER_ABI {

template <size_t D>
struct QMeanPool {
  Requant<1> requant;
  Scale in_scale, out_scale;

  template <class F, class... S>
  static constexpr void visit(const Path& at, F& f, S&... s) {
    stformer::visit(at / "requant", f, s.requant...);
    f(at / "in_scale", Init{Init::zeros}, s.in_scale...);
    f(at / "out_scale", Init{Init::zeros}, s.out_scale...);
  }
  // M = s_in / s_out
  template <class B, class F>
  static void requants(B& b, F&& f) {
    f("requant", b.requant, [&](size_t) { return double(b.in_scale(0)) / b.out_scale(0); });
  }

  using Float = MeanPool<D>;
  static constexpr bool same_scale = false;
  using Ranges = NoRanges;
  void from_float(const Float&, const Ranges&, float s_in, float s_out) {
    in_scale(0) = s_in, out_scale(0) = s_out;
    set_requants(*this);
  }

  template <size_t B, size_t N>
  using Input = TensorOf<std::int16_t, B, N, D>;
  template <size_t B, size_t N>
  using Output = TensorOf<std::int16_t, B, 1, D>;
  template <size_t B, size_t N, class Pool>
  void run(const Input<B, N>& x, Output<B, N>& y, Nothing, const Mask<B, N>& mask, Pool&&) const {
    static_assert(N < 65536, "QMeanPool: at most 65535 rows (int32 sums)");
    for (size_t b = 0; b < B; ++b) {
      std::int32_t sum[D] = {};
      std::uint32_t n = 0;
      for (size_t j = 0; j < N; ++j)
        if (!mask.keys || (*mask.keys)(b, j)) {
          const std::int16_t* row = x.data() + (b * N + j) * D;
          for (size_t c = 0; c < D; ++c) sum[c] += row[c];
          ++n;
        }
      kernels::requantize(sum, D, kernels::divide(requant[0], n), 0, INT16_MIN, INT16_MAX, y.data() + b * D);
    }
  }
};
template <size_t D>
struct Int8Of<MeanPool<D>> {
  using type = QMeanPool<D>;
};

}  // namespace stformer
