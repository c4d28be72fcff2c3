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
inline vf vexp(vf a) { return xsimd::exp(a); }
inline float hsum(vf a) { return xsimd::hadd(a); }
inline float hmax(vf a) {
  alignas(vf::arch_type::alignment()) float t[W];
  a.store_aligned(t);
  float m = t[0];
  for (size_t i = 1; i < W; ++i) m = t[i] > m ? t[i] : m;
  return m;
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
#endif

// a·b + c in two roundings, a multiply and an add. The broadcast tiles (nn_tile, nt_tile) use it:
// on this Zen 5 the two go to separate pipes at the same FLOP rate as FMAs, and a chain's
// latency is the add's 2 cycles instead of the FMA's 4, which measured faster for their narrow
// tiles (and kept GCC from spilling accumulators); the packed panels use fma.
inline vf madd(vf a, vf b, vf c) { return a * b + c; }

}  // namespace stformer::kernels
