// stformer kernels' backend: aarch64 NEON (-Dsimd=neon): 4 floats a vector and 32 vector
// registers; int8 products by sdot with the dot-product extension (-march=armv8.2-a+dotprod or
// later), else by vmlal on int16.
#pragma once

#include "xsimd.hpp"

#include <arm_neon.h>

namespace stformer::inline STFORMER_ABI::kernels {

// ---- float ----
using by_xsimd::fma;
using by_xsimd::vexp2;
using by_xsimd::hsum;
using by_xsimd::hmax;
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
// 4 int32 lanes.
struct qv {
  int32x4_t v;
  static constexpr size_t lanes = 4;
  static constexpr std::int32_t a_offset = 0;
#if defined(__ARM_FEATURE_DOTPROD)
  static constexpr size_t G = 4;
  using qa = std::int8_t;
  using qb = std::int8_t;
  static qv dot(qv acc, qv a, qv b) { return {vdotq_s32(acc.v, vreinterpretq_s8_s32(a.v), vreinterpretq_s8_s32(b.v))}; }
  static qv broadcast(const qa* a) { std::int32_t x; std::memcpy(&x, a, 4); return {vdupq_n_s32(x)}; }
  static qv load(const void* p) { return {vreinterpretq_s32_s8(vld1q_s8(static_cast<const std::int8_t*>(p)))}; }
  static const char* name() { return "NEON (sdot)"; }
#else
  static constexpr size_t G = 1;
  using qa = std::int16_t;
  using qb = std::int16_t;
  // a holds the broadcast entry in its low half of every lane; b four int16 in its low 64 bits
  static qv dot(qv acc, qv a, qv b) { return {vmlal_s16(acc.v, vmovn_s32(a.v), vget_low_s16(vreinterpretq_s16_s32(b.v)))}; }
  static qv broadcast(const qa* a) { return {vdupq_n_s32(*a)}; }
  static qv load(const void* p) { return {vreinterpretq_s32_s16(vcombine_s16(vld1_s16(static_cast<const std::int16_t*>(p)), vdup_n_s16(0)))}; }
  static const char* name() { return "NEON (vmlal)"; }
#endif
  // apply(x, q, shift) lane by lane (the formula in int8.hpp): vqrdmulh is h exactly (it
  // saturates only at a = q = INT32_MIN, and q ≥ 0); then the rounding shift right (vrshl alone
  // would round ties upward).
  static qv apply(qv x, qv q, qv shift) {
    const int32x4_t zero = vdupq_n_s32(0), one = vdupq_n_s32(1);
    const int32x4_t left = vmaxq_s32(shift.v, zero), right = vmaxq_s32(vnegq_s32(shift.v), zero);
    const int32x4_t h = vqrdmulhq_s32(vshlq_s32(x.v, left), q.v);
    const int32x4_t mask = vsubq_s32(vshlq_s32(one, right), one);
    const int32x4_t threshold = vaddq_s32(vshrq_n_s32(mask, 1), vreinterpretq_s32_u32(vshrq_n_u32(vreinterpretq_u32_s32(h), 31)));
    const int32x4_t y = vshlq_s32(h, vnegq_s32(right));
    return {vsubq_s32(y, vreinterpretq_s32_u32(vcgtq_s32(vandq_s32(h, mask), threshold)))};
  }
  static qv clamp_add(qv x, std::int32_t zero, std::int32_t lo, std::int32_t hi) {
    return {vaddq_s32(vminq_s32(vmaxq_s32(x.v, vdupq_n_s32(lo - zero)), vdupq_n_s32(hi - zero)), vdupq_n_s32(zero))};
  }
  static qv load_acc(const std::int32_t* p) { return {vld1q_s32(p)}; }
  static void store(std::int32_t* p, qv x) { vst1q_s32(p, x.v); }
};
inline qv pinned(qv x) { return x; }
template <class Out>
inline void store_as(Out* y, qv x) {
  generic::store_as(y, x);
}
using generic::pack_words;
using generic::fused_rows;
using generic::lookup_words;

namespace detail {

// One int16 row a [K] against 4 int8 rows of B: c[r] = bias[r] + Σ_k a[k]·B[r, k]. B's rows
// widened (vmovl_s8), 8 products per two vmlal_s16 into int32, each row's 4 lanes summed at the
// end (vaddvq_s32); the last K % 8 entries one by one.
template <size_t K>
inline void i16_rows4(const std::int16_t* a, const std::int8_t* B, size_t ldb, std::int32_t* c, const std::int32_t* bias) {
  constexpr size_t K8 = K / 8 * 8;
  int32x4_t acc[4];
  for (auto& v : acc) v = vdupq_n_s32(0);
  for (size_t k = 0; k < K8; k += 8) {
    const int16x8_t x = vld1q_s16(a + k);
    for (size_t r = 0; r < 4; ++r) {
      const int16x8_t w = vmovl_s8(vld1_s8(B + r * ldb + k));
      acc[r] = vmlal_high_s16(vmlal_s16(acc[r], vget_low_s16(w), vget_low_s16(x)), w, x);
    }
  }
  for (size_t r = 0; r < 4; ++r) {
    std::int32_t s = vaddvq_s32(acc[r]);
    for (size_t k = K8; k < K; ++k) s += std::int32_t(a[k]) * std::int32_t(B[r * ldb + k]);
    c[r] = s + (bias ? bias[r] : 0);
  }
}

}  // namespace detail

// int16 rows of A (K ≥ 8): 4 rows of B at a time (int8 rows take int8.hpp's panels).
template <size_t M, size_t N, size_t K, class TA>
inline size_t dot_rows(const TA* A, size_t lda, const std::int8_t* B, size_t ldb, std::int32_t* C, size_t ldc, const std::int32_t* bias) {
  if constexpr (std::is_same_v<TA, std::int16_t> && K >= 8) {
    for (size_t i = 0; i < M; ++i)
      for (size_t j = 0; j + 4 <= N; j += 4) detail::i16_rows4<K>(A + i * lda, B + j * ldb, ldb, C + i * ldc + j, bias ? bias + j : nullptr);
    return N / 4 * 4;
  }
  return 0;
}

// 4 floats a vector, 32 registers: nt tiles of 8 chains (4 × 4 at least), nn tiles 4 vectors
// wide (8 rows of one), panels 2 vectors wide and 128 rows of K.
inline constexpr Tuning tuning{.registers = 32, .nt_chains = 8, .nt_least_cols = 4, .nn_vectors = 4, .nn_rows = {4, 8, 4, 4, 4},
                               .nn_rows_short = 4, .nn_strips = false, .nt_panels = true, .panel_vectors = 2, .panel_k = 128,
                               .balance_tail = false, .nt_transposes = false, .stack_panels = 65536, .q_panels = true,
                               .q_panel_vectors = 2, .q_tile_rows = 6, .q_block_k = 256};

}  // namespace stformer::kernels
