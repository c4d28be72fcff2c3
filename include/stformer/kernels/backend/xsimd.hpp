// stformer kernels' backends — the float vector of the xsimd backends (avx2.hpp, avx512.hpp,
// neon.hpp): xsimd::batch<float> for the instruction set the build targets (-march), and the
// operations they share. Each backend takes fma, vexp2, hsum and hmax from `by_xsimd` below or
// writes its own.
#pragma once

#include "common.hpp"

#include <xsimd/xsimd.hpp>

namespace stformer::inline STFORMER_ABI::kernels {

using vf = xsimd::batch<float>;
inline constexpr size_t W = vf::size;
inline vf load(const float* p) { return vf::load_unaligned(p); }
inline void store(float* p, vf v) { v.store_unaligned(p); }
inline vf splat(float x) { return vf(x); }
inline vf vmax(vf a, vf b) { return xsimd::max(a, b); }

namespace by_xsimd {

inline vf fma(vf a, vf b, vf c) { return xsimd::fma(a, b, c); }

// 2^t = 2^n · 2^f: n = round(t), f = t − n (|f| ≤ 1/2), 2^f by exp2_poly, and 2^n as two factors
// written into the exponent bits (t clamped to ±200 first). Within 1 ulp of 2^t (tested against
// double); −∞ and anything below the float range give 0, +∞ and anything above give +∞, NaN
// stays NaN. The softmax family takes its exponentials as e^{c(x−m)} = 2^{(x−m)·c·log₂e}, where
// t ≤ 0: vexp2<true> (t ≤ 0 or NaN) is the same but for results below 2^-126.5, which are 0
// (subnormal, and flushed to 0 on the pool's threads anyway), so that it writes 2^n as one factor
// (t clamped to −127: 2^-127 written as 0) and leaves out the upper clamp: 13 operations instead
// of 19.
template <bool AtMostZero = false>
inline vf vexp2(vf t) {
  // max(c, t) and min(c, t) return their second operand when either is NaN: NaN passes through
  if constexpr (AtMostZero)
    t = xsimd::max(splat(-127.0f), t);
  else
    t = xsimd::min(splat(200.0f), xsimd::max(splat(-200.0f), t));
  const vf n = xsimd::nearbyint(t), f = t - n;
  vf p = splat(exp2_poly[0]);
  for (size_t i = 1; i < 7; ++i) p = kernels::by_xsimd::fma(p, f, splat(exp2_poly[i]));
  const auto ni = xsimd::to_int(n);
  if constexpr (AtMostZero) return p * xsimd::bitwise_cast<vf>((ni + 127) << 23);  // n = −127: the bits of 0
  // 2^n = 2^h · 2^(n−h), h = n/2: both factors normal over the whole range (|n| ≤ 200)
  const auto hi = ni >> 1;
  return p * xsimd::bitwise_cast<vf>((hi + 127) << 23) * xsimd::bitwise_cast<vf>((ni - hi + 127) << 23);
}

inline float hsum(vf a) { return xsimd::hadd(a); }
inline float hmax(vf a) {
  alignas(vf::arch_type::alignment()) float t[W];
  a.store_aligned(t);
  float m = t[0];
  for (size_t i = 1; i < W; ++i) m = t[i] > m ? t[i] : m;
  return m;
}

}  // namespace by_xsimd

}  // namespace stformer::kernels
