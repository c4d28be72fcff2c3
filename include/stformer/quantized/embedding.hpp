#pragma once

#include "../core/config.hpp"

#include <cstdint>

#include "../blocks/embedding.hpp"
#include "linear.hpp"
#include "weight_int8.hpp"

namespace stformer::inline STFORMER_ABI {

// QEmbedding<V, D>: Embedding into an int16 stream at scale s_h: Int8Embedding's table (int8
// rows W_q, one scale s_v per row, weight_int8.hpp) and each row's multiplier M_v = s_v / s_h:
//   h[r, :] = clamp(apply(W_q[ids[r], :], M_ids[r]), int16)
// Tensors: weight I8 [V, D], weight_scale F32 [V], requant.multiplier and requant.shift I32 [V],
// out_scale F32 [1] (s_h).
template <size_t V, size_t D>
struct QEmbedding {
  static constexpr size_t vocabulary = V;  // token ids in [0, V)
  Int8Embedding<V, D> table;  // visited at the block's own level: weight, weight_scale
  Requant<V> requant;
  Scale out_scale;  // s_h

  template <class Fn, class... S>
  static constexpr void visit(const Path& at, Fn& f, S&... s) {
    stformer::visit(at, f, s.table...);
    stformer::visit(at / "requant", f, s.requant...);
    f(at / "out_scale", Init{Init::zeros}, s.out_scale...);
  }

  // M_v = s_v / s_h
  template <class B, class F>
  static void requants(B& b, F&& f) {
    f("requant", b.requant, [&](size_t v) { return double(b.table.weight_scale(v)) / b.out_scale(0); });
  }
  void set_multipliers(float s_h) {
    out_scale(0) = s_h;
    set_requants(*this);
  }

  // The table f into the stream at s_h, in place (the table is too large to return on the stack).
  void from_float(const Embedding<V, D>& f, float s_h) {
    Int8Embedding<V, D>::quantize(f, table);
    set_multipliers(s_h);
  }

  // A step of a quantized Sequential (stformer/quantized/quantize.hpp): ids [B, N] -> the stream [B, N, D].
  using Float = Embedding<V, D>;
  static constexpr bool same_scale = false;
  static constexpr bool decodes = true;  // DecodeOf: each id's row alone
  using Ranges = NoRanges;
  void from_float(const Float& f, const Ranges&, float, float s_out) { from_float(f, s_out); }
  template <size_t B, size_t N>
  using Input = IdTensor<B, N>;
  template <size_t B, size_t N>
  using Output = TensorOf<std::int16_t, B, N, D>;
  template <size_t B, size_t N, class Pool>
  void run(const Input<B, N>& ids, Output<B, N>& y, Nothing, const Mask<B, N>&, Pool&&) const {
    apply<B * N>(ids.data(), y.data());
  }

  // h [Rows, D] = the rows of ids.
  template <size_t Rows>
  void apply(const std::int32_t* ids, std::int16_t* h) const {
    std::int32_t wide[D];
    for (size_t r = 0; r < Rows; ++r) {
      const std::int8_t* w = table.row(ids[r]);
      for (size_t k = 0; k < D; ++k) wide[k] = w[k];
      kernels::requantize(wide, D, requant[size_t(ids[r])], 0, INT16_MIN, INT16_MAX, h + r * D);
    }
  }
};

template <size_t V, size_t D>
struct Int8Of<Embedding<V, D>> {
  using type = QEmbedding<V, D>;
};

}  // namespace stformer
