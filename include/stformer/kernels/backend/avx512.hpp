// stformer kernels' backend: AVX-512 (x86-64-v4: F, BW, DQ, VL): 16 floats a vector and 32
// vector registers; int8 products by vpdpbusd with VNNI (4 products a lane), else by vpmaddwd.
#pragma once

#include "x86.hpp"

namespace stformer::inline STFORMER_ABI::kernels {

// ---- float ----
// One rounding: xsimd 8.1 has no AVX-512 fma (its generic a * b + c is two roundings and two
// instructions under -ffp-contract=off), so this backend calls the instruction itself.
inline vf fma(vf a, vf b, vf c) { return _mm512_fmadd_ps(a, b, c); }

// 2^t as by_xsimd::vexp2 (xsimd.hpp), but f = t − round(t) by vreduceps and 2^n applied by
// vscalefps (±∞ reduce to f = 0, so no clamp is needed); the same for both forms.
template <bool AtMostZero = false>
inline vf vexp2(vf t) {
  const vf f = _mm512_reduce_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), n = t - f;
  vf p = splat(exp2_poly[0]);
  for (size_t i = 1; i < 7; ++i) p = fma(p, f, splat(exp2_poly[i]));
  return _mm512_scalef_ps(p, n);
}
// by halves, as reduce_group below
inline float hsum(vf a) {
  return x86::hsum8(_mm256_add_ps(_mm512_castps512_ps256(a), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a), 1))));
}
inline float hmax(vf a) { return _mm512_reduce_max_ps(a); }

// The 16 reductions of v[0 … 15] as one vector, lane i: op over v[i]'s lanes, by halves (hsum's order).
template <class Op>
inline vf reduce_group(const vf* v, Op op) {
  __m512 a[8], b[4], c[2];
  for (int i = 0; i < 8; ++i) a[i] = op(_mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0x44), _mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0xee));
  for (int i = 0; i < 4; ++i) b[i] = op(_mm512_shuffle_f32x4(a[2 * i], a[2 * i + 1], 0x88), _mm512_shuffle_f32x4(a[2 * i], a[2 * i + 1], 0xdd));
  for (int i = 0; i < 2; ++i) c[i] = op(_mm512_shuffle_ps(b[2 * i], b[2 * i + 1], 0x44), _mm512_shuffle_ps(b[2 * i], b[2 * i + 1], 0xee));
  const __m512 r = op(_mm512_shuffle_ps(c[0], c[1], 0x88), _mm512_shuffle_ps(c[0], c[1], 0xdd));  // lane i: v[(i % 4)·4 + i / 4]
  return _mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15), r);
}
template <size_t n>
inline void hsums(const vf* v, float* out) {
  x86::hreduce<n>(v, out, [](const vf* g) { return reduce_group(g, [](vf a, vf b) { return a + b; }); }, hsum);
}
template <size_t n>
inline void hmaxs(const vf* v, float* out) {
  x86::hreduce<n>(v, out, [](const vf* g) { return reduce_group(g, [](vf a, vf b) { return vmax(a, b); }); }, hmax);
}

// dst[c·ldd + r] = src[r·lds + c] for r, c < 16: a 16 × 16 tile transposed in registers.
[[gnu::always_inline]] inline void transpose_tile(const float* src, size_t lds, float* dst, size_t ldd) {
  __m512 r[16], t[16];
  for (int i = 0; i < 16; ++i) r[i] = _mm512_loadu_ps(src + i * lds);
  for (int i = 0; i < 16; i += 2) t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]), t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
  auto lo = [](__m512 a, __m512 b) { return _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(a), _mm512_castps_pd(b))); };
  auto hi = [](__m512 a, __m512 b) { return _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(a), _mm512_castps_pd(b))); };
  for (int i = 0; i < 16; i += 4)  // r[i + c], 128-bit lane L: rows i..i+3 of column 4L + c
    r[i] = lo(t[i], t[i + 2]), r[i + 1] = hi(t[i], t[i + 2]), r[i + 2] = lo(t[i + 1], t[i + 3]), r[i + 3] = hi(t[i + 1], t[i + 3]);
  for (int c = 0; c < 4; ++c) {
    __m512 u0 = _mm512_shuffle_f32x4(r[c], r[4 + c], 0x88), u1 = _mm512_shuffle_f32x4(r[c], r[4 + c], 0xdd);
    __m512 u2 = _mm512_shuffle_f32x4(r[8 + c], r[12 + c], 0x88), u3 = _mm512_shuffle_f32x4(r[8 + c], r[12 + c], 0xdd);
    _mm512_storeu_ps(dst + c * ldd, _mm512_shuffle_f32x4(u0, u2, 0x88));
    _mm512_storeu_ps(dst + (4 + c) * ldd, _mm512_shuffle_f32x4(u1, u3, 0x88));
    _mm512_storeu_ps(dst + (8 + c) * ldd, _mm512_shuffle_f32x4(u0, u2, 0xdd));
    _mm512_storeu_ps(dst + (12 + c) * ldd, _mm512_shuffle_f32x4(u1, u3, 0xdd));
  }
}

// ---- int8 ----
using generic::apply;
using generic::fused_rows;
// 16 int32 lanes. With VNNI: groups of 4 int8 along K, vpdpbusd (unsigned × signed bytes): A is
// offset by +128 to unsigned and 128·Σ_k B[n,k] subtracted at the end (exact). Without: groups of
// two int16, vpmaddwd (A and B widened once, when packed).
struct qv {
  __m512i v;
#if defined(__AVX512VNNI__)
  static constexpr size_t G = 4, lanes = 16;
  using qa = std::uint8_t;
  using qb = std::int8_t;
  static constexpr std::int32_t a_offset = 128;
  static qv dot(qv acc, qv a, qv b) { return {_mm512_dpbusd_epi32(acc.v, a.v, b.v)}; }
  static const char* name() { return "AVX-512 VNNI (vpdpbusd)"; }
#else
  static constexpr size_t G = 2, lanes = 16;
  using qa = std::int16_t;
  using qb = std::int16_t;
  static constexpr std::int32_t a_offset = 0;
  static qv dot(qv acc, qv a, qv b) { return {_mm512_add_epi32(acc.v, _mm512_madd_epi16(a.v, b.v))}; }
  static const char* name() { return "AVX-512BW (vpmaddwd)"; }
#endif
  // apply(x, q, shift) lane by lane (the formula in int8.hpp): the 64-bit products of the even
  // and the odd lanes, h from bits 31…62 of each, then the rounding shift right.
  static qv apply(qv x, qv q, qv shift) {
    const __m512i zero = _mm512_setzero_si512(), one = _mm512_set1_epi32(1), nudge = _mm512_set1_epi64(std::int64_t(1) << 30);
    const __m512i left = _mm512_max_epi32(shift.v, zero), right = _mm512_max_epi32(_mm512_sub_epi32(zero, shift.v), zero);
    const __m512i a = _mm512_sllv_epi32(x.v, left);
    const __m512i even = _mm512_srli_epi64(_mm512_add_epi64(_mm512_mul_epi32(a, q.v), nudge), 31);
    const __m512i odd = _mm512_srli_epi64(_mm512_add_epi64(_mm512_mul_epi32(_mm512_srli_epi64(a, 32), _mm512_srli_epi64(q.v, 32)), nudge), 31);
    const __m512i h = _mm512_mask_blend_epi32(0xAAAA, even, _mm512_slli_epi64(odd, 32));
    const __m512i mask = _mm512_sub_epi32(_mm512_sllv_epi32(one, right), one);
    const __m512i threshold = _mm512_add_epi32(_mm512_srai_epi32(mask, 1), _mm512_srli_epi32(h, 31));
    const __m512i y = _mm512_srav_epi32(h, right);
    return {_mm512_mask_add_epi32(y, _mm512_cmpgt_epi32_mask(_mm512_and_si512(h, mask), threshold), y, one)};
  }
  // min(max(x, lo − zero), hi − zero) + zero: min(max(x + zero, lo), hi) where x + zero fits in
  // int32, and no overflow where it would not
  static qv clamp_add(qv x, std::int32_t zero, std::int32_t lo, std::int32_t hi) {
    return {_mm512_add_epi32(_mm512_min_epi32(_mm512_max_epi32(x.v, _mm512_set1_epi32(lo - zero)), _mm512_set1_epi32(hi - zero)), _mm512_set1_epi32(zero))};
  }
  static qv broadcast(const qa* a) { std::int32_t x; std::memcpy(&x, a, 4); return {_mm512_set1_epi32(x)}; }
  static qv load(const void* p) { return {_mm512_loadu_si512(p)}; }
  static qv load_acc(const std::int32_t* p) { return {_mm512_loadu_si512(p)}; }
  static void store(std::int32_t* p, qv x) { _mm512_storeu_si512(p, x.v); }
};
// t[i] = table[f[i]] (f[i] in [0, 255]) 32 at a time without gathers: the table's 256 words in
// 8 registers, vpermi2w on index bits 0 … 5 from each pair, blends on bits 6 and 7.
template <size_t n>
inline void lookup_words(const std::uint16_t* table, const std::int32_t* f, std::int32_t* t) {
  __m512i q[8];
  for (int i = 0; i < 8; ++i) q[i] = _mm512_loadu_si512(table + 32 * i);
  const __m512i words = _mm512_set_epi16(62, 60, 58, 56, 54, 52, 50, 48, 46, 44, 42, 40, 38, 36, 34, 32, 30, 28, 26, 24, 22, 20, 18, 16, 14, 12,
                                         10, 8, 6, 4, 2, 0);  // the low words of two vectors of int32
  const __m512i bit6 = _mm512_set1_epi16(64), bit7 = _mm512_set1_epi16(128);
  auto thirty_two = [&](const std::int32_t* from, std::int32_t* to) {
    const __m512i idx = _mm512_permutex2var_epi16(_mm512_loadu_si512(from), words, _mm512_loadu_si512(from + 16));
    const __m512i r0 = _mm512_permutex2var_epi16(q[0], idx, q[1]), r1 = _mm512_permutex2var_epi16(q[2], idx, q[3]);
    const __m512i r2 = _mm512_permutex2var_epi16(q[4], idx, q[5]), r3 = _mm512_permutex2var_epi16(q[6], idx, q[7]);
    const __mmask32 b6 = _mm512_test_epi16_mask(idx, bit6);
    const __m512i r = _mm512_mask_blend_epi16(_mm512_test_epi16_mask(idx, bit7), _mm512_mask_blend_epi16(b6, r0, r1), _mm512_mask_blend_epi16(b6, r2, r3));
    _mm512_storeu_si512(to, _mm512_cvtepu16_epi32(_mm512_castsi512_si256(r)));
    _mm512_storeu_si512(to + 16, _mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(r, 1)));
  };
  for (size_t i = 0; i + 32 <= n; i += 32) thirty_two(f + i, t + i);
  if constexpr (n % 32 != 0) {  // the last n % 32 through a padded row
    alignas(64) std::int32_t in[32] = {}, out[32];
    std::copy_n(f + n / 32 * 32, n % 32, in);
    thirty_two(in, out);
    std::copy_n(out, n % 32, t + n / 32 * 32);
  }
}

// y[0 … 15] = x's lanes as Out (int8, int16 or int32), each already within Out's range.
template <class Out>
inline void store_as(Out* y, qv x) {
  if constexpr (sizeof(Out) == 4)
    qv::store(reinterpret_cast<std::int32_t*>(y), x);
  else if constexpr (sizeof(Out) == 2)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y), _mm512_cvtepi32_epi16(x.v));
  else
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y), _mm512_cvtepi32_epi8(x.v));
}

// 16 floats a vector, 32 registers: nt tiles of 16 chains (4 × 4, 2 × 8, 1 × 16), nn tiles 4
// vectors wide in 6 rows (24 accumulators, as the panels: 3% faster than 4 rows on a 64 × 64 × 64
// product) at any K (the attention's 16-wide heads, q_h k_hᵀ with K = 16, included), panels 4
// vectors wide and 128 rows of K (32 KB), 2–32 rows transposed.
inline constexpr Tuning tuning{.registers = 32, .nt_chains = 16, .nt_least_cols = 4, .nt_one_row_cols = 1, .nn_vectors = 4, .nn_rows = {4, 16, 8, 5, 6},
                               .nn_rows_short = 0, .nn_strips = false, .nt_panels = true, .panel_vectors = 4, .panel_k = 128,
                               .balance_tail = false, .nt_transposes = true, .stack_panels = 65536, .q_panels = true,
                               .q_panel_vectors = 4, .q_tile_rows = 6, .q_block_k = 256, .q_lookup_words = true};

}  // namespace stformer::kernels
