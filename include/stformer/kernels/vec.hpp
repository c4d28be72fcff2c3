// stformer kernels — the vector type every kernel is written in.
//
// STFORMER_SIMD=1: vf is xsimd::batch<float> for the architecture the build targets
// (-march from the meson option). STFORMER_SIMD=0: vf is a one-lane struct in plain C++ and
// xsimd is not included at all, so the same kernels compile for any target (Cortex-M ...);
// on a core with Helium, Armv8.1-M's vector extension with floating point (Cortex-M55,
// -mcpu=cortex-m55), vf is its four-float vector instead (STFORMER_HELIUM; -DSTFORMER_HELIUM=0
// keeps the one-lane struct).
// Kernels loop `for (; i + W <= n; i += W)` over vectors and finish with a scalar tail, so
// they accept any size, multiple of W or not. Loads and stores are unaligned-safe: tensors
// are aligned, but rows of odd widths inside them are not.
#pragma once

#include "../config.hpp"

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>

#if STFORMER_SIMD
#include <xsimd/xsimd.hpp>
#elif STFORMER_HELIUM
#include <arm_mve.h>
#endif

namespace stformer::inline STFORMER_ABI::kernels {

using std::size_t;

// 2^f for |f| ≤ 1/2 by Cephes' exp2f polynomial of degree 6, 1 + f·P(f) (relative error
// 1.7e-7): its coefficients, highest power first, for Horner's rule in vexp2 below.
inline constexpr float exp2_poly[7] = {1.535336188319500e-4f, 1.339887440266574e-3f, 9.618437357674640e-3f, 5.550332471162809e-2f,
                                       2.402264791363012e-1f, 6.931472028550421e-1f, 1.0f};

#if STFORMER_SIMD
using vf = xsimd::batch<float>;
inline constexpr size_t W = vf::size;
inline vf load(const float* p) { return vf::load_unaligned(p); }
inline void store(float* p, vf v) { v.store_unaligned(p); }
inline vf splat(float x) { return vf(x); }
// One rounding: xsimd 8.1 has no AVX-512 fma (its generic a * b + c is two roundings and two
// instructions under -ffp-contract=off), so AVX-512 builds call the instruction themselves.
#if defined(__AVX512F__)
inline vf fma(vf a, vf b, vf c) { return _mm512_fmadd_ps(a, b, c); }
#else
inline vf fma(vf a, vf b, vf c) { return xsimd::fma(a, b, c); }
#endif
inline vf vmax(vf a, vf b) { return xsimd::max(a, b); }
// 2^t = 2^n · 2^f: n = round(t), f = t − n (|f| ≤ 1/2), 2^f by exp2_poly, 2^n applied by
// vscalefps with AVX-512 (vreduceps gives f; ±∞ reduce to f = 0, so no clamp is needed) and
// otherwise as two factors written into the exponent bits (t clamped to ±200 first). Within 1
// ulp of 2^t (tested against double); −∞ and anything below the float range give 0, +∞ and
// anything above give +∞, NaN stays NaN. The softmax family takes its exponentials as
// e^{c(x−m)} = 2^{(x−m)·c·log₂e}, where t ≤ 0: vexp2<true> (t ≤ 0 or NaN) is the same but for
// results below 2^-126.5, which are 0 (subnormal, and flushed to 0 on the pool's threads anyway),
// so that the xsimd builds without AVX-512 write 2^n as one factor (t clamped to −127: 2^-127
// written as 0) and leave out the upper clamp: 13 operations instead of 19. (Helium and the
// plain build take the same path for both.)
template <bool AtMostZero = false>
inline vf vexp2(vf t) {
#if defined(__AVX512F__)
  const vf f = _mm512_reduce_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), n = t - f;
#else
  // max(c, t) and min(c, t) return their second operand when either is NaN: NaN passes through
  if constexpr (AtMostZero)
    t = xsimd::max(splat(-127.0f), t);
  else
    t = xsimd::min(splat(200.0f), xsimd::max(splat(-200.0f), t));
  const vf n = xsimd::nearbyint(t), f = t - n;
#endif
  vf p = splat(exp2_poly[0]);
  for (size_t i = 1; i < 7; ++i) p = fma(p, f, splat(exp2_poly[i]));
#if defined(__AVX512F__)
  return _mm512_scalef_ps(p, n);
#else
  const auto ni = xsimd::to_int(n);
  if constexpr (AtMostZero) return p * xsimd::bitwise_cast<vf>((ni + 127) << 23);  // n = −127: the bits of 0
  // 2^n = 2^h · 2^(n−h), h = n/2: both factors normal over the whole range (|n| ≤ 200)
  const auto hi = ni >> 1;
  return p * xsimd::bitwise_cast<vf>((hi + 127) << 23) * xsimd::bitwise_cast<vf>((ni - hi + 127) << 23);
#endif
}
// hsum on x86 adds halves (256, 128, 64, 32 bits), the order of reduce_group below, so that
// hsums of a group and hsum of one vector give the same bits.
inline float hsum(vf a) {
#if defined(__AVX__)
#if defined(__AVX512F__)
  const __m256 h = _mm256_add_ps(_mm512_castps512_ps256(a), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a), 1)));
#else
  const __m256 h = a;
#endif
  __m128 q = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
  q = _mm_add_ps(q, _mm_movehl_ps(q, q));
  return _mm_cvtss_f32(_mm_add_ss(q, _mm_shuffle_ps(q, q, 1)));
#else
  return xsimd::hadd(a);
#endif
}
inline float hmax(vf a) {
#if defined(__AVX512F__)
  return _mm512_reduce_max_ps(a);
#else
  alignas(vf::arch_type::alignment()) float t[W];
  a.store_aligned(t);
  float m = t[0];
  for (size_t i = 1; i < W; ++i) m = t[i] > m ? t[i] : m;
  return m;
#endif
}
// hsums: out[i] = hsum(v[i]), hmaxs: out[i] = hmax(v[i]), for i < n. On x86, whole groups of W
// vectors in one transposing reduction, reduce_group (each step combines halves of two vectors:
// 45 operations for 16 vectors of 16 instead of 8 per vector; a remainder of at least W/4 is
// padded to a group); otherwise one vector at a time.
#if defined(__AVX__)
template <class Op>
inline vf reduce_group(const vf* v, Op op) {
#if defined(__AVX512F__)
  __m512 a[8], b[4], c[2];
  for (int i = 0; i < 8; ++i) a[i] = op(_mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0x44), _mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0xee));
  for (int i = 0; i < 4; ++i) b[i] = op(_mm512_shuffle_f32x4(a[2 * i], a[2 * i + 1], 0x88), _mm512_shuffle_f32x4(a[2 * i], a[2 * i + 1], 0xdd));
  for (int i = 0; i < 2; ++i) c[i] = op(_mm512_shuffle_ps(b[2 * i], b[2 * i + 1], 0x44), _mm512_shuffle_ps(b[2 * i], b[2 * i + 1], 0xee));
  const __m512 r = op(_mm512_shuffle_ps(c[0], c[1], 0x88), _mm512_shuffle_ps(c[0], c[1], 0xdd));  // lane i: v[(i % 4)·4 + i / 4]
  return _mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15), r);
#else
  __m256 a[4], b[2];
  for (int i = 0; i < 4; ++i) a[i] = op(_mm256_permute2f128_ps(v[2 * i], v[2 * i + 1], 0x20), _mm256_permute2f128_ps(v[2 * i], v[2 * i + 1], 0x31));
  for (int i = 0; i < 2; ++i) b[i] = op(_mm256_shuffle_ps(a[2 * i], a[2 * i + 1], 0x44), _mm256_shuffle_ps(a[2 * i], a[2 * i + 1], 0xee));
  const __m256 r = op(_mm256_shuffle_ps(b[0], b[1], 0x88), _mm256_shuffle_ps(b[0], b[1], 0xdd));  // lane i: v[(i % 4)·2 + i / 4]
  return _mm256_permutevar8x32_ps(r, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
#endif
}
template <size_t n, class Op>
inline void hreduce(const vf* v, float* out, Op op, float (*one)(vf)) {
  size_t i = 0;
  for (; i + W <= n; i += W) store(out + i, reduce_group(v + i, op));
  if constexpr (n % W >= W / 4) {
    vf pad[W];
    for (size_t k = 0; k < W; ++k) pad[k] = v[i + (k < n % W ? k : 0)];
    float r[W];
    store(r, reduce_group(pad, op));
    for (size_t k = 0; k < n % W; ++k) out[i + k] = r[k];
  } else {
    for (; i < n; ++i) out[i] = one(v[i]);
  }
}
template <size_t n>
inline void hsums(const vf* v, float* out) {
  hreduce<n>(v, out, [](vf a, vf b) { return a + b; }, hsum);
}
template <size_t n>
inline void hmaxs(const vf* v, float* out) {
  hreduce<n>(v, out, [](vf a, vf b) { return vmax(a, b); }, hmax);
}
#else
template <size_t n>
inline void hsums(const vf* v, float* out) {
  for (size_t i = 0; i < n; ++i) out[i] = hsum(v[i]);
}
template <size_t n>
inline void hmaxs(const vf* v, float* out) {
  for (size_t i = 0; i < n; ++i) out[i] = hmax(v[i]);
}
#endif
// dst[c·ldd + r] = src[r·lds + c] for r, c < W: one W × W tile transposed in registers
// (AVX-512 and AVX2 shuffles; element by element for other widths).
[[gnu::always_inline]] inline void transpose_tile(const float* src, size_t lds, float* dst, size_t ldd) {
#if defined(__AVX512F__)
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
  return;
#elif defined(__AVX__)
  if constexpr (W == 8) {
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
    return;
  }
#endif
  for (size_t r = 0; r < W; ++r)
    for (size_t c = 0; c < W; ++c) dst[c * ldd + r] = src[r * lds + c];
}
#elif STFORMER_HELIUM
// Helium: float32x4_t. fma is VFMA (one rounding); max is a comparison and a select, so that a
// NaN passes through as in the other backends (VMAXNM would drop it); vexp2 is the polynomial
// of the AVX2 path above, with the exponent written in two factors; the horizontal sums add
// lanes (0 + 1) + (2 + 3).
struct vf {
  float32x4_t v;
  vf() = default;
  vf(float32x4_t x) : v(x) {}
  friend vf operator+(vf a, vf b) { return vaddq_f32(a.v, b.v); }
  friend vf operator-(vf a, vf b) { return vsubq_f32(a.v, b.v); }
  friend vf operator*(vf a, vf b) { return vmulq_f32(a.v, b.v); }
  vf& operator+=(vf b) { v = vaddq_f32(v, b.v); return *this; }
  vf& operator*=(vf b) { v = vmulq_f32(v, b.v); return *this; }
};
inline constexpr size_t W = 4;
inline vf load(const float* p) { return vld1q_f32(p); }
inline void store(float* p, vf v) { vst1q_f32(p, v.v); }
inline vf splat(float x) { return vdupq_n_f32(x); }
inline vf fma(vf a, vf b, vf c) { return vfmaq_f32(c.v, a.v, b.v); }
inline vf vmax(vf a, vf b) { return vpselq_f32(b.v, a.v, vcmpgtq_f32(b.v, a.v)); }
template <bool AtMostZero = false>
inline vf vexp2(vf t) {
  t = vpselq_f32(vdupq_n_f32(-200.0f), t.v, vcmpgtq_f32(vdupq_n_f32(-200.0f), t.v));  // NaN passes through
  t = vpselq_f32(vdupq_n_f32(200.0f), t.v, vcmpltq_f32(vdupq_n_f32(200.0f), t.v));
  const vf n = vrndnq_f32(t.v), f = t - n;
  vf p = splat(exp2_poly[0]);
  for (size_t i = 1; i < 7; ++i) p = fma(p, f, splat(exp2_poly[i]));
  const int32x4_t ni = vcvtq_s32_f32(n.v), hi = vshrq_n_s32(ni, 1);
  const vf f1 = vreinterpretq_f32_s32(vshlq_n_s32(vaddq_n_s32(hi, 127), 23));
  const vf f2 = vreinterpretq_f32_s32(vshlq_n_s32(vaddq_n_s32(vsubq_s32(ni, hi), 127), 23));
  return p * f1 * f2;
}
inline float hsum(vf a) { return (vgetq_lane_f32(a.v, 0) + vgetq_lane_f32(a.v, 1)) + (vgetq_lane_f32(a.v, 2) + vgetq_lane_f32(a.v, 3)); }
inline float hmax(vf a) {
  float m = vgetq_lane_f32(a.v, 0);
  for (float x : {vgetq_lane_f32(a.v, 1), vgetq_lane_f32(a.v, 2), vgetq_lane_f32(a.v, 3)}) m = x > m ? x : m;
  return m;
}
template <size_t n>
inline void hsums(const vf* v, float* out) {
  for (size_t i = 0; i < n; ++i) out[i] = hsum(v[i]);
}
template <size_t n>
inline void hmaxs(const vf* v, float* out) {
  for (size_t i = 0; i < n; ++i) out[i] = hmax(v[i]);
}
inline void transpose_tile(const float* src, size_t lds, float* dst, size_t ldd) {
  for (size_t r = 0; r < W; ++r)
    for (size_t c = 0; c < W; ++c) dst[c * ldd + r] = src[r * lds + c];
}
#else
struct vf {
  float x;
  friend vf operator+(vf a, vf b) { return {a.x + b.x}; }
  friend vf operator-(vf a, vf b) { return {a.x - b.x}; }
  friend vf operator*(vf a, vf b) { return {a.x * b.x}; }
  vf& operator+=(vf b) { x += b.x; return *this; }
  vf& operator*=(vf b) { x *= b.x; return *this; }
};
inline constexpr size_t W = 1;
inline vf load(const float* p) { return {*p}; }
inline void store(float* p, vf v) { *p = v.x; }
inline vf splat(float x) { return {x}; }
inline vf fma(vf a, vf b, vf c) { return {a.x * b.x + c.x}; }
inline vf vmax(vf a, vf b) { return {a.x > b.x ? a.x : b.x}; }
template <bool AtMostZero = false>
inline vf vexp2(vf a) { return {std::exp2(a.x)}; }
inline float hsum(vf a) { return a.x; }
inline float hmax(vf a) { return a.x; }
template <size_t n>
inline void hsums(const vf* v, float* out) {
  for (size_t i = 0; i < n; ++i) out[i] = v[i].x;
}
template <size_t n>
inline void hmaxs(const vf* v, float* out) {
  hsums<n>(v, out);
}
inline void transpose_tile(const float* src, size_t, float* dst, size_t) { *dst = *src; }
#endif

// v, kept in a register. A register tile loads each vector of B once and multiplies it into
// several rows' accumulators; on x86, GCC may instead fold that load into each of those FMAs as a
// memory operand, loading it again for every row (a 4 × 2 tile: 12 loads for 8 FMAs instead of
// 6), more than the load ports of an AVX2 core such as Zen 3 sustain beside two FMAs a cycle. The
// empty asm makes v a value in a register, so it is loaded once. It changes no result.
inline vf in_register(vf v) {
#if STFORMER_SIMD && defined(__AVX__)
  asm("" : "+v"(v.data));
#endif
  return v;
}

}  // namespace stformer::kernels
