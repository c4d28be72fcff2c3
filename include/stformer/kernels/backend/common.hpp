// stformer kernels' backends — what every backend file starts from: the tuning table's fields,
// the exponential's polynomial, and the generic forms of the integer hooks that a backend
// without an instruction of its own takes by a using-declaration.
//
// A backend (one file beside this one, chosen by core/config.hpp's STFORMER_BACKEND) defines, in
// stformer::kernels:
//   float   vf (a vector of W floats), W, load, store, splat, fma (one rounding), vmax (NaN
//           passes through), vexp2<AtMostZero>, hsum, hmax, hsums<n>, hmaxs<n>, transpose_tile,
//           in_register (kernels/vec.hpp says what each computes);
//   int8    apply (requantization's multiply on one int32), qv (a vector of int32 accumulators:
//           G, lanes, qa, qb, a_offset, dot, apply, clamp_add, broadcast, load, load_acc, store,
//           name), pinned, store_as, dot_rows, fused_rows, pack_words, lookup_words (kernels/int8.hpp);
//   tuning  its Tuning (below).
// The kernels (vec.hpp, matmul.hpp, int8.hpp, rowwise.hpp, optim.hpp) are written once against
// these names. Every backend computes the same integers, and each float kernel the same chain
// of operations, so results do not depend on the tuning.
#pragma once

#include "../../core/config.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <utility>

namespace stformer::inline STFORMER_ABI::kernels {

using std::size_t;

// A backend's tile shapes and block sizes. None changes a result: each entry of a product is
// the same chain of multiply-adds along K whatever the tile.
struct Tuning {
  // float products (matmul.hpp)
  size_t registers;      // vector registers: a panel tile takes a spread row only when its accumulators, B's vectors and A's broadcast fit
  size_t nt_chains;      // matmul_nt's dot-product tiles (few rows): fma chains per tile, TR rows × TC rows of B
  size_t nt_least_cols;  // ... and at least this many rows of B per tile
  size_t nt_one_row_cols = 0;  // matmul_nt of one row (a decoding step's products): rows of B per tile (0: as above)
  size_t nn_vectors;     // vectors per nn tile (matmul_nn, matmul_tn, the transposed nt)
  size_t nn_rows[5];     // rows per nn tile, by the tile's width in vectors (0: a product narrower than one vector)
  size_t nn_rows_short;  // rows per nn tile when K < 32 (0: as nn_rows)
  bool nn_strips;        // wide nn products (N ≥ 128, M ≥ 24, K ≥ 64) on contiguous strips of B
  bool nt_panels;        // matmul_nt of 8 rows or more on packed panels of Bᵀ (else dot products along K)
  size_t panel_vectors;  // a panel's width in vectors, at most
  size_t panel_k;        // a panel's rows of K (a block, on the stack)
  bool balance_tail;     // a last panel tile of 1–3 rows is split with the whole tile before it
  bool nt_transposes;    // 2W to 32 rows as Cᵀ = B·Aᵀ on the nn tiles
  size_t stack_panels;   // bytes of a Linear's weight packed once on the stack for a tiled pass (0: each tile packs)
  // int8 products (int8.hpp)
  bool q_panels;           // qmatmul_nt on packed panels of B in qv's groups (else the backend's dot_rows)
  size_t q_panel_vectors;  // a panel's width in qv vectors, at most
  size_t q_tile_rows;      // rows of A per register tile
  size_t q_block_k;        // entries of K per block
  bool q_lookup_words = false;  // softmax_u8's table as 16-bit words in registers (lookup_words), else loads or gathers
};

// 2^f for |f| ≤ 1/2 by Cephes' exp2f polynomial of degree 6, 1 + f·P(f) (relative error
// 1.7e-7): its coefficients, highest power first, for Horner's rule in vexp2.
inline constexpr float exp2_poly[7] = {1.535336188319500e-4f, 1.339887440266574e-3f, 9.618437357674640e-3f, 5.550332471162809e-2f,
                                       2.402264791363012e-1f, 6.931472028550421e-1f, 1.0f};

// f(integral_constant<0>), …, f(integral_constant<N − 1>), written out at compile time: a
// register tile's loops over rows and columns, unrolled at every optimisation level, so that
// its accumulators are scalars GCC keeps in registers (-O2 and -Os do not unroll small loops,
// and an accumulator array indexed in a loop lives on the stack).
template <size_t N, class F>
[[gnu::always_inline]] inline void unrolled(F&& f) {
  [&]<size_t... i>(std::index_sequence<i...>) __attribute__((always_inline)) { (f(std::integral_constant<size_t, i>{}), ...); }(std::make_index_sequence<N>{});
}

// A product's requantization (kernels/int8.hpp's requantize): y = clamp(zero + apply(x, q[c],
// shift[c]), lo, hi), one multiplier per output column c, or q[0], shift[0] for every column
// when !per_channel (a batch matmul's one scale).
struct Requantization {
  const std::int32_t* q;
  const std::int32_t* shift;
  std::int32_t zero, lo, hi;
  bool per_channel = true;
  size_t at(size_t c) const { return per_channel ? c : 0; }
};

// Columns of B done by the backend's part of pack_words (kernels/int8.hpp): columns [0, cols)
// for groups [0, groups); the generic loop packs the rest.
struct PackedPart {
  size_t cols = 0, groups = 0;
};

// min(max(x, lo), hi) by value (std::clamp returns a reference, and at -Os GCC calls it).
[[gnu::always_inline]] constexpr std::int32_t clamp_i32(std::int32_t x, std::int32_t lo, std::int32_t hi) { return x < lo ? lo : hi < x ? hi : x; }

// One entry requantized, clamp(zero + apply(x, q, shift), lo, hi), clamped before zero is added
// (no sum overflows): the scalar tails of the requantizations and of the fused tiles. Defined in
// kernels/vec.hpp, after the backend's apply.
template <class Out>
Out requantize_entry(std::int32_t x, std::int32_t q, int shift, std::int32_t zero, std::int32_t lo, std::int32_t hi);

namespace generic {

// The float vector's horizontal reductions one vector at a time (out[i] = one(v[i])), a tile
// transposed entry by entry, and no pinning: for backends without a grouped form (NEON, Helium).
template <size_t n, class V, class One>
inline void each_vector(const V* v, float* out, One one) {
  for (size_t i = 0; i < n; ++i) out[i] = one(v[i]);
}
template <size_t W>
inline void transpose_tile(const float* src, size_t lds, float* dst, size_t ldd) {
  for (size_t r = 0; r < W; ++r)
    for (size_t c = 0; c < W; ++c) dst[c * ldd + r] = src[r * lds + c];
}

// Requantization's fixed-point multiply, apply(x, q, shift) (the formula in kernels/int8.hpp) in
// its three steps: a = x·2^max(s, 0) in int32; h = ⌊(a·q + 2^30) / 2^31⌋ (here by a 64-bit
// product); h / 2^max(−s, 0) to nearest, ties away from zero. h fits in int32 (|a·q| < 2^62,
// q ≥ 0), so the rounding shift is done in 32 bits, as gemmlowp's RoundingDivideByPOT: ⌊h / 2^r⌋
// plus one when the remainder is above half of 2^r (half or above for a negative h). A 32-bit
// core then needs one widening multiply and no 64-bit shift.
[[gnu::always_inline]] inline std::int32_t shift_left(std::int32_t x, int shift) { return std::int32_t(std::uint32_t(x) << (shift > 0 ? shift : 0)); }
[[gnu::always_inline]] inline std::int32_t high_mul(std::int32_t a, std::int32_t q) { return std::int32_t((std::int64_t(a) * q + (std::int64_t(1) << 30)) >> 31); }
[[gnu::always_inline]] inline std::int32_t divide_by_pot(std::int32_t h, int shift) {
  const int right = shift > 0 ? 0 : -shift;
  const std::int32_t mask = std::int32_t((std::uint32_t(1) << right) - 1), threshold = (mask >> 1) + (h < 0);
  return (h >> right) + ((h & mask) > threshold);
}
[[gnu::always_inline]] inline std::int32_t apply(std::int32_t x, std::int32_t q, int shift) { return divide_by_pot(high_mul(shift_left(x, shift), q), shift); }

// No columns of C by a dot-product path of the backend's own: int8.hpp's loop takes them all.
template <size_t M, size_t N, size_t K, class TA>
inline size_t dot_rows(const TA*, size_t, const std::int8_t*, size_t, std::int32_t*, size_t, const std::int32_t*) {
  return 0;
}

// No product requantized in its registers: int8.hpp's qlinear takes the product, then requantize.
template <size_t M, size_t N, size_t K, class TA, class Out>
inline bool fused_rows(const TA*, size_t, const std::int8_t*, size_t, const std::int32_t*, const Requantization&, Out*) {
  return false;
}

// No part of a panel packed by the backend's own instructions.
template <size_t NP, class QB>
inline PackedPart pack_words(const std::int8_t*, size_t, size_t, size_t, QB*) {
  return {};
}

// t[i] = table[f[i]] for i < n and f[i] in [0, 255]: for the backends whose tuning says
// q_lookup_words (softmax_u8's 2^(−f/256) in 16-bit words); elsewhere a loop, not called.
template <size_t n>
inline void lookup_words(const std::uint16_t* table, const std::int32_t* f, std::int32_t* t) {
  for (size_t i = 0; i < n; ++i) t[i] = table[f[i]];
}

// y[0 … lanes − 1] = x's lanes as Out, each already within Out's range, through an int32 row.
template <class QV, class Out>
inline void store_as(Out* y, QV x) {
  std::int32_t v[QV::lanes];
  QV::store(v, x);
  for (size_t l = 0; l < QV::lanes; ++l) y[l] = Out(v[l]);
}

}  // namespace generic

}  // namespace stformer::kernels
