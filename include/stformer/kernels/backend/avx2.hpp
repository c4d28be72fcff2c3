// stformer kernels' backend: AVX2 with FMA (x86-64-v3): 8 floats a vector and 16 vector
// registers, to which the tiles are sized; int8 products by vpmaddwd on int16 pairs.
#pragma once

#include "x86.hpp"

namespace stformer::inline STFORMER_ABI::kernels {

// ---- float ----
using by_xsimd::fma;
using by_xsimd::vexp2;
using by_xsimd::hmax;
inline float hsum(vf a) { return x86::hsum8(a); }

// The 8 reductions of v[0 … 7] as one vector, lane i: op over v[i]'s lanes, by halves (hsum8's order).
template <class Op>
inline vf reduce_group(const vf* v, Op op) {
  __m256 a[4], b[2];
  for (int i = 0; i < 4; ++i) a[i] = op(_mm256_permute2f128_ps(v[2 * i], v[2 * i + 1], 0x20), _mm256_permute2f128_ps(v[2 * i], v[2 * i + 1], 0x31));
  for (int i = 0; i < 2; ++i) b[i] = op(_mm256_shuffle_ps(a[2 * i], a[2 * i + 1], 0x44), _mm256_shuffle_ps(a[2 * i], a[2 * i + 1], 0xee));
  const __m256 r = op(_mm256_shuffle_ps(b[0], b[1], 0x88), _mm256_shuffle_ps(b[0], b[1], 0xdd));  // lane i: v[(i % 4)·2 + i / 4]
  return _mm256_permutevar8x32_ps(r, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}
template <size_t n>
inline void hsums(const vf* v, float* out) {
  x86::hreduce<n>(v, out, [](const vf* g) { return reduce_group(g, [](vf a, vf b) { return a + b; }); }, hsum);
}
template <size_t n>
inline void hmaxs(const vf* v, float* out) {
  x86::hreduce<n>(v, out, [](const vf* g) { return reduce_group(g, [](vf a, vf b) { return vmax(a, b); }); }, hmax);
}

// dst[c·ldd + r] = src[r·lds + c] for r, c < 8: an 8 × 8 tile transposed in registers.
[[gnu::always_inline]] inline void transpose_tile(const float* src, size_t lds, float* dst, size_t ldd) {
  __m256 r[8], t[8];
  for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(src + i * lds);
  for (int i = 0; i < 8; i += 2) t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]), t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  for (int i = 0; i < 8; i += 4)  // r[i + c], 128-bit lane L: rows i..i+3 of column 4L + c
    r[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44), r[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xee),
    r[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44), r[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xee);
  for (int c = 0; c < 4; ++c) {
    _mm256_storeu_ps(dst + c * ldd, _mm256_permute2f128_ps(r[c], r[4 + c], 0x20));
    _mm256_storeu_ps(dst + (4 + c) * ldd, _mm256_permute2f128_ps(r[c], r[4 + c], 0x31));
  }
}

// ---- int8 ----
using generic::apply;
using generic::fused_rows;
using generic::lookup_words;
// 8 int32 lanes; groups of two int16 along K (vpmaddwd: A and B widened once, when packed).
struct qv {
  __m256i v;
  static constexpr size_t G = 2, lanes = 8;
  using qa = std::int16_t;
  using qb = std::int16_t;
  static constexpr std::int32_t a_offset = 0;
  static qv dot(qv acc, qv a, qv b) { return {_mm256_add_epi32(acc.v, _mm256_madd_epi16(a.v, b.v))}; }
  static const char* name() { return "AVX2 (vpmaddwd)"; }
  // apply(x, q, shift) lane by lane (the formula in int8.hpp): the 64-bit products of the even
  // and the odd lanes, h from bits 31…62 of each, then the rounding shift right.
  static qv apply(qv x, qv q, qv shift) {
    const __m256i zero = _mm256_setzero_si256(), one = _mm256_set1_epi32(1), nudge = _mm256_set1_epi64x(std::int64_t(1) << 30);
    const __m256i left = _mm256_max_epi32(shift.v, zero), right = _mm256_max_epi32(_mm256_sub_epi32(zero, shift.v), zero);
    const __m256i a = _mm256_sllv_epi32(x.v, left);
    const __m256i even = _mm256_srli_epi64(_mm256_add_epi64(_mm256_mul_epi32(a, q.v), nudge), 31);
    const __m256i odd = _mm256_srli_epi64(_mm256_add_epi64(_mm256_mul_epi32(_mm256_srli_epi64(a, 32), _mm256_srli_epi64(q.v, 32)), nudge), 31);
    const __m256i h = _mm256_blend_epi32(even, _mm256_slli_epi64(odd, 32), 0xAA);
    const __m256i mask = _mm256_sub_epi32(_mm256_sllv_epi32(one, right), one);
    const __m256i threshold = _mm256_add_epi32(_mm256_srai_epi32(mask, 1), _mm256_srli_epi32(h, 31));
    const __m256i y = _mm256_srav_epi32(h, right);
    return {_mm256_sub_epi32(y, _mm256_cmpgt_epi32(_mm256_and_si256(h, mask), threshold))};
  }
  // min(max(x, lo − zero), hi − zero) + zero: min(max(x + zero, lo), hi) where x + zero fits in
  // int32, and no overflow where it would not
  static qv clamp_add(qv x, std::int32_t zero, std::int32_t lo, std::int32_t hi) {
    return {_mm256_add_epi32(_mm256_min_epi32(_mm256_max_epi32(x.v, _mm256_set1_epi32(lo - zero)), _mm256_set1_epi32(hi - zero)), _mm256_set1_epi32(zero))};
  }
  static qv broadcast(const qa* a) { std::int32_t x; std::memcpy(&x, a, 4); return {_mm256_set1_epi32(x)}; }
  static qv load(const void* p) { return {_mm256_loadu_si256(static_cast<const __m256i*>(p))}; }
  static qv load_acc(const std::int32_t* p) { return load(p); }
  static void store(std::int32_t* p, qv x) { _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), x.v); }
};
// y[0 … 7] = x's lanes as Out (int8, int16 or int32), each already within Out's range.
template <class Out>
inline void store_as(Out* y, qv x) {
  if constexpr (sizeof(Out) == 4) {
    qv::store(reinterpret_cast<std::int32_t*>(y), x);
  } else {
    const __m256i w = _mm256_packs_epi32(x.v, x.v);  // int16: lanes 0-3 twice, then 4-7 twice
    if constexpr (sizeof(Out) == 1) {
      const __m256i b = _mm256_packs_epi16(w, w);
      _mm_storel_epi64(reinterpret_cast<__m128i*>(y), _mm_unpacklo_epi32(_mm256_castsi256_si128(b), _mm256_extracti128_si256(b, 1)));
    } else {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(y), _mm_unpacklo_epi64(_mm256_castsi256_si128(w), _mm256_extracti128_si256(w, 1)));
    }
  }
}

// 8 floats a vector, 16 registers: nt tiles of 8 chains (4 × 2, 2 × 4, 1 × 8), nn tiles 2 vectors
// wide (6 rows of 2: 12 accumulators, 2 of B, 1 broadcast; 8 rows of one), panels of K up to 512
// (512 rows of 16 floats, 32 KB: the L1 cache), wide nn products on strips, 2–32 rows transposed.
inline constexpr Tuning tuning{.registers = 16, .nt_chains = 8, .nt_least_cols = 1, .nt_one_row_cols = 1, .nn_vectors = 2, .nn_rows = {4, 8, 6, 6, 6},
                               .nn_rows_short = 4, .nn_strips = true, .nt_panels = true, .panel_vectors = 2, .panel_k = 512,
                               .balance_tail = true, .nt_transposes = true, .stack_panels = 65536, .q_panels = true,
                               .q_panel_vectors = 2, .q_tile_rows = 6, .q_block_k = 256};

}  // namespace stformer::kernels
