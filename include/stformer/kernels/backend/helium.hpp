// stformer kernels' backend: Helium, Armv8.1-M's vector extension with floating point
// (Cortex-M55), chosen when the compiler targets MVE with floats and -DSTFORMER_SIMD=0;
// -DSTFORMER_HELIUM=0 asks for the plain (or DSP) backend instead. Tensors keep the plain
// build's layout. vf is float32x4_t; the int8 products are VMLADAVA dot products (16 products
// per instruction) and requantization runs four channels at a time (VQRDMULH).
#pragma once

#include "common.hpp"

#include <arm_mve.h>

namespace stformer::inline STFORMER_ABI::kernels {

// ---- float ----
// fma is VFMA (one rounding); max is a comparison and a select, so that a NaN passes through as
// in the other backends (VMAXNM would drop it); vexp2 is the polynomial of the AVX2 backend,
// with the exponent written in two factors; the horizontal sums add lanes (0 + 1) + (2 + 3).
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
  generic::each_vector<n>(v, out, hsum);
}
template <size_t n>
inline void hmaxs(const vf* v, float* out) {
  generic::each_vector<n>(v, out, hmax);
}
inline void transpose_tile(const float* src, size_t lds, float* dst, size_t ldd) { generic::transpose_tile<W>(src, lds, dst, ldd); }
inline vf in_register(vf v) { return v; }

// ---- int8 ----
using generic::apply;
// Four int32 lanes. The products are dot_rows' (below), so dot, broadcast and load serve only
// int8.hpp's generic tile; requantization is apply's formula lane by lane: VQRDMULH is h exactly
// (it saturates only at a = q = INT32_MIN, and q ≥ 0), then the rounding shift right (VRSHL
// alone would round ties upward), its comparison a predicate.
struct qv {
  int32x4_t v;
  static constexpr size_t G = 1, lanes = 4;
  using qa = std::int8_t;
  using qb = std::int8_t;
  static constexpr std::int32_t a_offset = 0;
  static qv dot(qv acc, qv a, qv b) { return {vaddq_s32(acc.v, vmulq_s32(a.v, b.v))}; }
  static qv broadcast(const qa* a) { return {vdupq_n_s32(*a)}; }
  static qv load(const void* p) { return {vldrbq_s32(static_cast<const std::int8_t*>(p))}; }
  static qv apply(qv x, qv q, qv shift) {
    const int32x4_t zero = vdupq_n_s32(0), one = vdupq_n_s32(1);
    const int32x4_t left = vmaxq_s32(shift.v, zero), right = vmaxq_s32(vnegq_s32(shift.v), zero);
    const int32x4_t h = vqrdmulhq_s32(vshlq_s32(x.v, left), q.v);
    const int32x4_t mask = vsubq_s32(vshlq_s32(one, right), one);
    const int32x4_t threshold = vaddq_s32(vshrq_n_s32(mask, 1), vreinterpretq_s32_u32(vshrq_n_u32(vreinterpretq_u32_s32(h), 31)));
    const int32x4_t y = vshlq_s32(h, vnegq_s32(right));
    return {vaddq_m_n_s32(y, y, 1, vcmpgtq_s32(vandq_s32(h, mask), threshold))};
  }
  static qv clamp_add(qv x, std::int32_t zero, std::int32_t lo, std::int32_t hi) {
    return {vaddq_s32(vminq_s32(vmaxq_s32(x.v, vdupq_n_s32(lo - zero)), vdupq_n_s32(hi - zero)), vdupq_n_s32(zero))};
  }
  static qv load_acc(const std::int32_t* p) { return {vld1q_s32(p)}; }
  static void store(std::int32_t* p, qv x) { vst1q_s32(p, x.v); }
  static const char* name() { return "Helium (VMLADAVA, VQRDMULH)"; }
};
inline qv pinned(qv x) { return x; }
template <class Out>
inline void store_as(Out* y, qv x) {
  generic::store_as(y, x);
}
using generic::pack_words;
using generic::fused_rows;

inline constexpr Tuning tuning{.registers = 16, .nt_chains = 8, .nt_least_cols = 4, .nn_vectors = 4, .nn_rows = {4, 8, 4, 4, 4},
                               .nn_rows_short = 4, .nn_strips = false, .nt_panels = true, .panel_vectors = 2, .panel_k = 128,
                               .balance_tail = false, .nt_transposes = false, .stack_panels = 0, .q_panels = false,
                               .q_panel_vectors = 2, .q_tile_rows = 6, .q_block_k = 256};

namespace detail {

// VMLADAVA adds the 16 products of two vectors of 16 int8 to an int32 accumulator, so a dot
// product along K takes K/16 of them; a block of R rows × CN columns of C (R ≤ 4, CN ≤ 2) loads
// each vector once. A K that is not a multiple of 16 ends with predicated loads (zeros past K,
// nothing read there).
template <size_t R, size_t CN, size_t K>
inline void mve_block(const std::int8_t* A, size_t lda, const std::int8_t* B, size_t ldb, std::int32_t* C, size_t ldc,
                      const std::int32_t* bias) {
  std::int32_t s[R][CN];
  for (size_t r = 0; r < R; ++r)
    for (size_t c = 0; c < CN; ++c) s[r][c] = bias ? bias[c] : 0;
  for (size_t k = 0; k < K; k += 16) {
    int8x16_t a[R], b[CN];
    if (K % 16 == 0 || k + 16 <= K) {
      for (size_t r = 0; r < R; ++r) a[r] = vld1q_s8(A + r * lda + k);
      for (size_t c = 0; c < CN; ++c) b[c] = vld1q_s8(B + c * ldb + k);
    } else {
      const mve_pred16_t p = vctp8q(std::uint32_t(K - k));
      for (size_t r = 0; r < R; ++r) a[r] = vldrbq_z_s8(A + r * lda + k, p);
      for (size_t c = 0; c < CN; ++c) b[c] = vldrbq_z_s8(B + c * ldb + k, p);
    }
    for (size_t r = 0; r < R; ++r)
      for (size_t c = 0; c < CN; ++c) s[r][c] = vmladavaq_s8(s[r][c], a[r], b[c]);
  }
  for (size_t r = 0; r < R; ++r)
    for (size_t c = 0; c < CN; ++c) C[r * ldc + c] = s[r][c];
}

}  // namespace detail

// int8 rows of A: 4 rows × 2 columns of C at a time. (int16 rows take int8.hpp's loop.)
template <size_t M, size_t N, size_t K, class TA>
inline size_t dot_rows(const TA* A, size_t lda, const std::int8_t* B, size_t ldb, std::int32_t* C, size_t ldc, const std::int32_t* bias) {
  if constexpr (std::is_same_v<TA, std::int8_t>) {
    constexpr size_t RB = 4;  // rows of A at a time
    const auto rows = [&]<size_t R>(size_t i) {
      for (size_t j = 0; j + 2 <= N; j += 2)
        detail::mve_block<R, 2, K>(A + i * lda, lda, B + j * ldb, ldb, C + i * ldc + j, ldc, bias ? bias + j : nullptr);
      if constexpr (N % 2 != 0)
        detail::mve_block<R, 1, K>(A + i * lda, lda, B + (N - 1) * ldb, ldb, C + i * ldc + N - 1, ldc, bias ? bias + N - 1 : nullptr);
    };
    for (size_t i = 0; i + RB <= M; i += RB) rows.template operator()<RB>(i);
    if constexpr (M % RB != 0) rows.template operator()<M % RB>(M / RB * RB);
    return N;
  }
  return 0;
}

}  // namespace stformer::kernels
