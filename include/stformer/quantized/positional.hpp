// QPositionalEncoding<L, D, Fl>: PositionalEncoding<L, D> (or Fl = PositionEmbedding<L, D>, the
// learned positions) on an int16 stream at scale s, in place:
// h[b, p] = clamp(h[b, p] + table[p], int16), table = round(PE / s) made once from the float
// table (PositionEmbedding's weight) at the stream's scale. Tensors: table I16 [L, D].
#pragma once

#include "../core/config.hpp"

#include <algorithm>
#include <cstdint>

#include "../blocks/positional.hpp"
#include "../blocks/tokens.hpp"
#include "linear.hpp"

namespace stformer::inline STFORMER_ABI {

template <size_t L, size_t D, class Fl = PositionalEncoding<L, D>>
struct QPositionalEncoding {
  TensorOf<std::int16_t, L, D> table;

  template <class F, class... S>
  static constexpr void visit(const Path& at, F& f, S&... s) {
    f(at / "table", Init{Init::zeros}, s.table...);
  }

  using Float = Fl;
  static constexpr bool same_scale = true;
  using Ranges = NoRanges;
  void from_float(const Float& f, const Ranges&, float s, float) {
    if constexpr (requires { f.weight; })
      quant::quantize_input(f.weight.data(), L * D, s, table.data());
    else
      quant::quantize_input(f.table().data(), L * D, s, table.data());
  }

  template <size_t B, size_t N>
  using Input = TensorOf<std::int16_t, B, N, D>;
  static constexpr bool in_place = true;
  // A decoding step (mask.decoding): the rows at positions t, t + 1, … get table[t], table[t + 1], ….
  static constexpr bool decodes = true;
  static constexpr size_t positions = L;
  template <size_t B, size_t N, class Pool>
  void forward_in_place(Input<B, N>& h, Nothing, const Mask<B, N>& mask, Pool&&) const {
    static_assert(N <= L, "QPositionalEncoding: sequence length N exceeds the table length L");
    const size_t t = mask.decoding ? mask.decoding->position : 0;
    STFORMER_CHECK(t + N <= L, "QPositionalEncoding: a decoding step past the table's L positions");
    const std::int16_t* row = table.data() + t * D;
    for (size_t b = 0; b < B; ++b)
      for (size_t i = 0; i < N * D; ++i) {
        std::int16_t& v = h.data()[b * N * D + i];
        v = std::int16_t(kernels::clamp_i32(std::int32_t(v) + row[i], INT16_MIN, INT16_MAX));
      }
  }
};
template <size_t L, size_t D>
struct Int8Of<PositionalEncoding<L, D>> {
  using type = QPositionalEncoding<L, D>;
};
template <size_t L, size_t D>
struct Int8Of<PositionEmbedding<L, D>> {
  using type = QPositionalEncoding<L, D, PositionEmbedding<L, D>>;
};

}  // namespace stformer
