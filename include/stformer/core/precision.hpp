// A composite block's precision, its last template parameter: what its leaves are and what flows
// between them. The composite block written part by part, FeedForward, is written once over it
// (a declared block, EncoderBlock, DecoderBlock, MAB, SAB, ISAB, PMA, the pointer head, has its
// combinators' integer form); only the leaves (Linear, the norms, the attention cores, embeddings,
// positions, the class token, pooling) have an integer form of their own. A block at
// precision::int8 needs the leaves' forms: include <stformer/quantized/quantize.hpp> (else
// "Int8Of: this block has no integer form", naming the leaf).
//   precision::float32 (the default): the float leaves on float rows; training (Acts) and
//     forward-only passes.
//   precision::int8: each leaf's integer form (Int8Of, beside each quantized leaf), an int16
//     residual stream (Stream) and, inside a block, rows of int8 or, where a block asks for
//     16 bits, int16 (Row<16>); forward only, made from the float block by its from_float
//     (stformer/quantized/quantize.hpp).
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
// a composite block written part by part (FeedForward) is itself at precision::int8; a block of
// two inputs (WithMemory: DecoderBlock, MAB) has its own (stformer/quantized/memory.hpp). Besides the step's forward (int16 streams in and out; token ids in for
// an embedding, int32 logits out for the pointer's head), such a block has:
//   using Float;                           the float block it comes from
//   static constexpr bool same_scale;      its output at its input's scale (a residual stream)
//   struct Ranges { observe(f, acts, x, y) };  what calibration keeps of the float block's pass
//   void from_float(f, ranges, s_in, s_out);   its integers for streams at those scales
template <class Block>
struct Int8Of {
  static_assert(sizeof(Block) == 0, "Int8Of: this block has no integer form (quantize needs one for every step)");
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

namespace precision {

struct float32 {
  static constexpr bool integer = false;
  template <class Leaf, size_t Bits = 8>
  using Of = Leaf;
  template <size_t Bits>
  using Row = float;
  using Stream = float;
  // Rows per tile of a block whose queries' rows are `queries` and keys' `keys` (the float
  // attention's tile grows into its scores' room by itself), and the fewest in a plan.
  static constexpr size_t tile_rows(size_t queries, size_t) { return stformer::tile_rows(queries); }
  static constexpr size_t tile_least(size_t rows) { return stformer::tile_rows(rows); }
};

struct int8 {
  static constexpr bool integer = true;
  template <class Leaf, size_t Bits = 8>
  using Of = typename IntegerForm<Leaf, Bits>::type;
  template <size_t Bits>
  using Row = std::conditional_t<Bits == 8, std::int8_t, std::int16_t>;
  using Stream = std::int16_t;
  // The integer attention projects its keys T rows at a time too: tiles as large as the longer side.
  static constexpr size_t tile_rows(size_t queries, size_t keys) { return qtile_rows(queries > keys ? queries : keys); }
  static constexpr size_t tile_least(size_t rows) { return qtile_least(rows); }
};

}  // namespace precision

}  // namespace stformer
