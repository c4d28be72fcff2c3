// stformer kernels — the vector type every kernel is written in.
//
// STFORMER_SIMD=1: vf is xsimd::batch<float> for the architecture the build targets
// (-march from the meson option). STFORMER_SIMD=0: vf is a one-lane struct in plain C++ and
// xsimd is not included at all, so the same kernels compile for any target (Cortex-M ...).
// Kernels loop `for (; i + W <= n; i += W)` over vectors and finish with a scalar tail, so
// they accept any size, multiple of W or not. Loads and stores are unaligned-safe: tensors
// are aligned, but rows of odd widths inside them are not.
#pragma once

#include <cmath>
#include <cstddef>
#include <limits>

#if STFORMER_SIMD
#include <xsimd/xsimd.hpp>
#endif

namespace stformer::kernels {

using std::size_t;

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
// e^x = 2^n · e^r: n = round(x·log2 e), r = x − n·ln 2 (ln 2 in two parts, |r| ≤ ln2/2), e^r =
// 1 + r + r²·q(r) with Cephes' degree-5 q, evaluated by Estrin's scheme (a short dependency
// chain: a softmax row is many independent exps), 2^n applied by vscalefps with AVX-512 and
// otherwise as two factors written into the exponent bits. Within 2 ulp of e^x (tested against double); −∞
// and anything below the float range give 0, +∞ and anything above give +∞, NaN stays NaN.
// xsimd's exp does the same reduction with a Horner chain of separate multiplies and adds
// (this build contracts nothing itself): twice the instructions and latency.
inline vf vexp(vf x) {
#if defined(__AVX512F__)
  // max(c, x) and min(c, x) return their second operand when either is NaN: NaN passes through
  x = _mm512_min_ps(splat(89.0f), _mm512_max_ps(splat(-110.0f), x));
  const vf n = _mm512_roundscale_ps(x * splat(1.44269504088896341f), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
#else
  const vf n = xsimd::nearbyint(x * splat(1.44269504088896341f));
#endif
  vf r = fma(n, splat(-0.693359375f), x);
  r = fma(n, splat(2.12194440e-4f), r);
  const vf r2 = r * r, r4 = r2 * r2;
  const vf q01 = fma(splat(1.6666665459e-1f), r, splat(5.0000001201e-1f));
  const vf q23 = fma(splat(8.3334519073e-3f), r, splat(4.1665795894e-2f));
  const vf q45 = fma(splat(1.9875691500e-4f), r, splat(1.3981999507e-3f));
  const vf p = fma(fma(q45, r4, fma(q23, r2, q01)), r2, r + splat(1.0f));
#if defined(__AVX512F__)
  return _mm512_scalef_ps(p, n);
#else
  // 2^n = 2^h · 2^(n−h), h = n/2: both factors normal over the whole range (n up to 128)
  const auto ni = xsimd::to_int(n), hi = ni >> 1;
  const vf e = p * xsimd::bitwise_cast<vf>((hi + 127) << 23) * xsimd::bitwise_cast<vf>((ni - hi + 127) << 23);
  return xsimd::select(x < splat(-104.0f), splat(0.0f),
                       xsimd::select(x > splat(88.7228394f), splat(std::numeric_limits<float>::infinity()), e));
#endif
}
inline float hsum(vf a) { return xsimd::hadd(a); }
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
// out[i] = hsum(v[i]) for i < n; whole groups of vectors in one transposing reduction (haddp).
// xsimd 8.1's AVX-512 haddp returns its sums in a permuted order, so with AVX-512 each vector
// is first folded to 256 bits and the AVX one reduces groups of 8.
template <size_t n>
inline void hsums(const vf* v, float* out) {
  size_t i = 0;
#if defined(__AVX512F__)
  using v8 = xsimd::batch<float, xsimd::avx2>;
  for (; i + 8 <= n; i += 8) {
    v8 folded[8];
    for (size_t k = 0; k < 8; ++k) {
      __m512 x = v[i + k];
      folded[k] = v8(_mm256_add_ps(_mm512_castps512_ps256(x), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1))));
    }
    xsimd::haddp(folded).store_unaligned(out + i);
  }
#else
  for (; i < n / W * W; i += W) xsimd::haddp(v + i).store_unaligned(out + i);
#endif
  for (; i < n; ++i) out[i] = hsum(v[i]);
}
// dst[c·ldd + r] = src[r·lds + c] for r, c < W: one W × W tile transposed in registers
// (AVX-512 and AVX2 shuffles; element by element for other widths).
inline void transpose_tile(const float* src, size_t lds, float* dst, size_t ldd) {
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
inline vf vexp(vf a) { return {std::exp(a.x)}; }
inline float hsum(vf a) { return a.x; }
inline float hmax(vf a) { return a.x; }
template <size_t n>
inline void hsums(const vf* v, float* out) {
  for (size_t i = 0; i < n; ++i) out[i] = v[i].x;
}
inline void transpose_tile(const float* src, size_t, float* dst, size_t) { *dst = *src; }
#endif

}  // namespace stformer::kernels
