// stformer kernels — the vector type every kernel is written in, from the build's backend
// (core/config.hpp's STFORMER_BACKEND: one file in backend/, which also holds the integer vector of
// int8.hpp and the tuning table of matmul.hpp):
//   vf                 W floats: xsimd::batch<float> (AVX2: 8, AVX-512: 16, NEON: 4), Helium's
//                      float32x4_t (4), or one float (the plain and DSP backends); +, −, ·
//   load, store        W floats at any address (tensors are aligned, but rows of odd widths
//                      inside them are not)
//   splat(x)           x in every lane
//   fma(a, b, c)       a·b + c with one rounding
//   vmax(a, b)         the larger, NaN passing through
//   vexp2<AtMostZero>  2^t within 1 ulp; −∞ and anything below the float range give 0, +∞ and
//                      anything above give +∞, NaN stays NaN. <true> is for t ≤ 0 or NaN (the
//                      softmax family's e^{c(x−m)} = 2^{(x−m)·c·log₂e}) and may give 0 below 2^-126.5.
//   hsum, hmax         the sum (by halves on x86) and the largest of one vector's lanes
//   hsums<n>, hmaxs<n> out[i] = hsum(v[i]), hmax(v[i]) for i < n, the same bits as one at a time
//   transpose_tile     dst[c·ldd + r] = src[r·lds + c] for r, c < W
//   in_register(v)     v, kept in a register (it changes no result; see x86.hpp)
// Kernels loop `for (; i + W <= n; i += W)` over vectors and finish with a scalar tail, so they
// accept any size, multiple of W or not.
#pragma once

#include "../core/config.hpp"

#include STFORMER_BACKEND_FILE

namespace stformer::inline STFORMER_ABI::kernels {

template <class Out>
[[gnu::always_inline]] inline Out requantize_entry(std::int32_t x, std::int32_t q, int shift, std::int32_t zero, std::int32_t lo, std::int32_t hi) {
  return Out(clamp_i32(apply(x, q, shift), lo - zero, hi - zero) + zero);
}

}  // namespace stformer::kernels
