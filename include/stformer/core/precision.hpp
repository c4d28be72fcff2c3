// What a block's integer form is (Int8Of) and the host-side helpers its quantization uses. Only
// the leaves (Linear, the norms, the attention cores, embeddings, positions, the class token,
// pooling, a feed-forward layer as one step) have an integer form of their own; a declared block
// (EncoderBlock, DecoderBlock, MAB, SAB, ISAB, PMA, the pointer head) has its combinators'
// (stformer/quantized/combinators.hpp). The forms need <stformer/quantized/quantize.hpp> (else
// "Int8Of: this block has no integer form", naming the leaf).
#pragma once

#include "config.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "tensor.hpp"

namespace stformer::inline STFORMER_ABI {

// Int8Of<Block>::type: the integer form of a float block, the step quantize
// (stformer/quantized/quantize.hpp) puts in its place. Each quantized leaf's header gives its own;
// a block of two inputs (WithMemory: DecoderBlock, MAB) has its own (stformer/quantized/memory.hpp).
// Besides the step's forward (int16 streams in and out; token ids in for an embedding, int32
// logits out for the pointer's head), such a block has:
//   using Float;                           the float block it comes from
//   static constexpr bool same_scale;      its output at its input's scale (a residual stream)
//   struct Ranges { observe(f, acts, x, y) };  what calibration keeps of the float block's pass
//   void from_float(f, ranges, s_in, s_out);   its integers for streams at those scales
template <class Block>
struct Int8Of {
  static_assert(sizeof(Block) == 0, "Int8Of: this block has no integer form (quantize needs one for every step)");
};
// Ranges of a step with nothing to observe: its integers follow from its weights and its
// streams' scales.
struct NoRanges {
  template <class... A>
  void observe(const A&...) {}
};
// C multipliers (stformer/quantized/linear.hpp), which a composite block may hold in integers.
template <size_t C>
struct Requant;
// Every Requant of a quantized block is a function of scales the block stores beside it, written
// once per block as
//   template <class B, class F> static void requants(B& b, F&& f)
// calling f(name, b.requant, m) for each Requant (name: its part of the path, m(c): the real
// multiplier of channel c, in double, from b's stored scales alone). Quantization sets the
// multipliers through it (set_requants, quantized/linear.hpp), and a load recomputes them through
// it (requant_mismatch, quantized/bounds.hpp): the two cannot disagree on the formula.
template <class B>
concept HasRequants = requires(B& b) { std::remove_const_t<B>::requants(b, [](const char*, auto&, const auto&) {}); };
// A leaf's integer form with rows of Bits (8 or 16) where the leaf has a choice (attention).
template <class Leaf, size_t Bits>
struct IntegerForm : Int8Of<Leaf> {};

// A scale tensor: F32 [1], s > 0 (named `<activation>_scale`).
using Scale = Tensor<1>;

// Rows per tile of the quantized forward passes by default: up to STFORMER_QTILE_ROWS (64), so
// that a small model's layers take their rows at once (each call of the int8 product packs its
// weights). Fewer take less memory: a microcontroller's choice (stformer/core/config.hpp).
constexpr size_t qtile_rows(size_t rows) { return rows < STFORMER_QTILE_ROWS ? rows : STFORMER_QTILE_ROWS; }
// The fewest rows per tile of a quantized step's scratch in a plan: tile_rows, or fewer when
// STFORMER_QTILE_ROWS says so.
constexpr size_t qtile_least(size_t rows) { return std::min(tile_rows(rows), qtile_rows(rows)); }

// ---- host-side quantization helpers, for the blocks' from_float (never called by a forward pass) ----
namespace quant {

// The symmetric scale that maps max|x| to 127 (int8) or 32767 (int16); 1 for a tensor of zeros.
inline float scale_for(float max_abs, int levels = 127) { return max_abs > 0 ? max_abs / float(levels) : 1.0f; }

template <class T>
float max_abs(const T& t) {
  float m = 0;
  for (float v : t) m = std::max(m, std::abs(v));
  return m;
}

// round(x / s) clamped into [lo, hi].
inline std::int32_t to_int(double x, double s, std::int32_t lo, std::int32_t hi) {
  return std::int32_t(std::clamp(std::nearbyint(x / s), double(lo), double(hi)));
}

// x_q = round(x / s) in T's range (int8: [−128, 127]), element by element.
template <class T>
void quantize(const float* x, size_t n, float s, T* y) {
  for (size_t i = 0; i < n; ++i) y[i] = T(to_int(x[i], s, std::numeric_limits<T>::min(), std::numeric_limits<T>::max()));
}

// The scale of an int16 activation from its calibration range: max|x| at 32767/2, so that values
// up to twice what calibration saw still fit (int16 has bits to spare, int8 has not).
inline float int16_scale(float max_abs) { return scale_for(2 * max_abs, 32767); }

}  // namespace quant

}  // namespace stformer
