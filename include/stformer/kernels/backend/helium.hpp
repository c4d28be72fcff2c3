// stformer kernels' backend: Helium, Armv8.1-M's vector extension with floating point
// (Cortex-M55), chosen when the compiler targets MVE with floats and -DSTFORMER_SIMD=0;
// -DSTFORMER_HELIUM=0 asks for the plain (or DSP) backend instead. Tensors keep the plain
// build's layout. vf is float32x4_t; the int8 products are VMLADAVA dot products (16 products
// per instruction, in tiles of 4 rows written in asm), and requantization runs on four lanes at
// a time (VQRDMULH), fused into the product's store where a layer asks for both.
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
// Four int32 lanes. The products are dot_rows' and fused_rows' (below), so dot, broadcast and load serve only
// int8.hpp's generic tile; requantization is apply's formula lane by lane: VQRDMULH is h exactly
// (it saturates only at a = q = INT32_MIN, and q ≥ 0), then the rounding shift right (VRSHL
// alone would round ties upward), its comparison a predicate.
struct qv {
  int32x4_t v;
  static constexpr size_t G = 1, lanes = 4;
  using qa = std::int8_t;
  using qb = std::int8_t;
  static constexpr std::int32_t a_offset = 0;
  [[gnu::always_inline]] static qv dot(qv acc, qv a, qv b) { return {vaddq_s32(acc.v, vmulq_s32(a.v, b.v))}; }
  [[gnu::always_inline]] static qv broadcast(const qa* a) { return {vdupq_n_s32(*a)}; }
  [[gnu::always_inline]] static qv load(const void* p) { return {vldrbq_s32(static_cast<const std::int8_t*>(p))}; }
  [[gnu::always_inline]] static qv apply(qv x, qv q, qv shift) {
    const int32x4_t zero = vdupq_n_s32(0), one = vdupq_n_s32(1);
    const int32x4_t left = vmaxq_s32(shift.v, zero), right = vmaxq_s32(vnegq_s32(shift.v), zero);
    const int32x4_t h = vqrdmulhq_s32(vshlq_s32(x.v, left), q.v);
    const int32x4_t mask = vsubq_s32(vshlq_s32(one, right), one);
    const int32x4_t threshold = vaddq_s32(vshrq_n_s32(mask, 1), vreinterpretq_s32_u32(vshrq_n_u32(vreinterpretq_u32_s32(h), 31)));
    const int32x4_t y = vshlq_s32(h, vnegq_s32(right));
    return {vaddq_m_n_s32(y, y, 1, vcmpgtq_s32(vandq_s32(h, mask), threshold))};
  }
  [[gnu::always_inline]] static qv clamp_add(qv x, std::int32_t zero, std::int32_t lo, std::int32_t hi) {
    return {vaddq_s32(vminq_s32(vmaxq_s32(x.v, vdupq_n_s32(lo - zero)), vdupq_n_s32(hi - zero)), vdupq_n_s32(zero))};
  }
  [[gnu::always_inline]] static qv load_acc(const std::int32_t* p) { return {vld1q_s32(p)}; }
  [[gnu::always_inline]] static void store(std::int32_t* p, qv x) { vst1q_s32(p, x.v); }
  [[gnu::always_inline]] static const char* name() { return "Helium (VMLADAVA, VQRDMULH)"; }
};
[[gnu::always_inline]] inline qv pinned(qv x) { return x; }
// y[0 … 3] = x's lanes as Out, each already within Out's range: narrowing stores for int8 and int16.
template <class Out>
[[gnu::always_inline]] inline void store_as(Out* y, qv x) {
  if constexpr (sizeof(Out) == 1)
    vstrbq_s32(reinterpret_cast<std::int8_t*>(y), x.v);
  else if constexpr (sizeof(Out) == 2)
    vstrhq_s32(reinterpret_cast<std::int16_t*>(y), x.v);
  else
    qv::store(reinterpret_cast<std::int32_t*>(y), x);
}
using generic::pack_words;
using generic::lookup_words;

inline constexpr Tuning tuning{.registers = 16, .nt_chains = 8, .nt_least_cols = 4, .nn_vectors = 4, .nn_rows = {4, 8, 4, 4, 4},
                               .nn_rows_short = 4, .nn_strips = false, .nt_panels = true, .panel_vectors = 2, .panel_k = 128,
                               .balance_tail = false, .nt_transposes = false, .stack_panels = 0, .q_panels = false,
                               .q_panel_vectors = 2, .q_tile_rows = 6, .q_block_k = 256};

namespace detail {

// VMLADAVA adds the 16 products of two vectors of 16 int8 to an int32 accumulator, which must be
// an even register: GCC cannot be asked for that in C, so a tile of 4 rows × 1 column of C is one
// asm loop (as CMSIS-NN's own): per 16 entries of K, B's vector and the 4 rows' vectors loaded
// with post-increment and 4 VMLADAVAs, in a tail-predicated low-overhead loop (WLSTP/LETP: the
// last, partial vector's lanes past K are not loaded and add nothing). The 4 sums stay in
// even registers ("Te") at every optimisation level.
[[gnu::always_inline]] inline int32x4_t mve_dot4(const std::int8_t* a0, size_t lda, const std::int8_t* b, size_t K) {
  const std::int8_t *a1 = a0 + lda, *a2 = a1 + lda, *a3 = a2 + lda;
  std::int32_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  asm volatile(
      "   wlstp.8      lr, %[cnt], 1f\n"
      "2: vldrb.8      q0, [%[b]], #16\n"
      "   vldrb.8      q1, [%[a0]], #16\n"
      "   vmladava.s8  %[s0], q0, q1\n"
      "   vldrb.8      q2, [%[a1]], #16\n"
      "   vmladava.s8  %[s1], q0, q2\n"
      "   vldrb.8      q3, [%[a2]], #16\n"
      "   vmladava.s8  %[s2], q0, q3\n"
      "   vldrb.8      q4, [%[a3]], #16\n"
      "   vmladava.s8  %[s3], q0, q4\n"
      "   letp         lr, 2b\n"
      "1:\n"
      : [b] "+r"(b), [a0] "+r"(a0), [a1] "+r"(a1), [a2] "+r"(a2), [a3] "+r"(a3), [s0] "+Te"(s0), [s1] "+Te"(s1), [s2] "+Te"(s2), [s3] "+Te"(s3)
      : [cnt] "r"(K)
      : "q0", "q1", "q2", "q3", "q4", "memory", "r14");
  return vsetq_lane_s32(s3, vsetq_lane_s32(s2, vsetq_lane_s32(s1, vdupq_n_s32(s0), 1), 2), 3);
}
// One row: Σ_k a[k]·b[k].
[[gnu::always_inline]] inline std::int32_t mve_dot1(const std::int8_t* a, const std::int8_t* b, size_t K) {
  std::int32_t s = 0;
  asm volatile(
      "   wlstp.8      lr, %[cnt], 1f\n"
      "2: vldrb.8      q0, [%[b]], #16\n"
      "   vldrb.8      q1, [%[a]], #16\n"
      "   vmladava.s8  %[s], q0, q1\n"
      "   letp         lr, 2b\n"
      "1:\n"
      : [b] "+r"(b), [a] "+r"(a), [s] "+Te"(s)
      : [cnt] "r"(K)
      : "q0", "q1", "memory", "r14");
  return s;
}

// C = A·Bᵀ + bias over M rows of A (4 at a time, then one by one) and all N rows of B, each
// column handed over as it leaves the registers: four(i, j, v), v the 4 sums of rows i … i + 3
// in column j (bias added), and one(i, j, s) for a row of the last M % 4.
template <size_t M, size_t N, size_t K, class Four, class One>
[[gnu::always_inline]] inline void mve_rows(const std::int8_t* A, size_t lda, const std::int8_t* B, size_t ldb, const std::int32_t* bias, Four&& four, One&& one) {
  size_t i = 0;
  for (; i + 4 <= M; i += 4)
    for (size_t j = 0; j < N; ++j) four(i, j, vaddq_n_s32(mve_dot4(A + i * lda, lda, B + j * ldb, K), bias ? bias[j] : 0));
  for (; i < M; ++i)
    for (size_t j = 0; j < N; ++j) one(i, j, mve_dot1(A + i * lda, B + j * ldb, K) + (bias ? bias[j] : 0));
}

// Lane r: r·ld, the offsets of 4 rows' entries in one column.
inline uint32x4_t row_offsets(size_t ld) { return vmulq_n_u32(vidupq_n_u32(0, 1), std::uint32_t(ld)); }

}  // namespace detail

// int8 rows of A: 4 rows × 1 column of C at a time, stored by a scatter. (int16 rows take
// int8.hpp's loop.)
template <size_t M, size_t N, size_t K, class TA>
inline size_t dot_rows(const TA* A, size_t lda, const std::int8_t* B, size_t ldb, std::int32_t* C, size_t ldc, const std::int32_t* bias) {
  if constexpr (std::is_same_v<TA, std::int8_t>) {
    const uint32x4_t rows = detail::row_offsets(ldc);
    detail::mve_rows<M, N, K>(
        A, lda, B, ldb, bias, [&](size_t i, size_t j, int32x4_t v) __attribute__((always_inline)) { vstrwq_scatter_shifted_offset_s32(C + i * ldc + j, rows, v); },
        [&](size_t i, size_t j, std::int32_t s) __attribute__((always_inline)) { C[i * ldc + j] = s; });
    return N;
  }
  return 0;
}

// The same product, requantized as each column of 4 rows leaves the registers and stored by a
// narrowing scatter. One multiplier for the 4 lanes, so its constants are scalars: a = x·2^left
// (VSHL), h = VQRDMULH(a, q) (exact: q ≥ 0), and for right > 0 the rounding shift as
// VRSHL(h − [h < 0], −right) (VRSHL rounds half up without overflow; the −1 makes negative ties
// round down, away from zero: apply's formula); then the clamp and the zero point.
template <size_t M, size_t N, size_t K, class TA, class Out>
inline bool fused_rows(const TA* A, size_t lda, const std::int8_t* B, size_t ldb, const std::int32_t* bias, const Requantization& rq, Out* Y) {
  if constexpr (std::is_same_v<TA, std::int8_t> && (sizeof(Out) == 1 || sizeof(Out) == 2)) {
    // copies, not references: the epilogue's constants stay in registers at -Os too
    const uint32x4_t rows = detail::row_offsets(N);
    const int32x4_t lo = vdupq_n_s32(rq.lo - rq.zero), hi = vdupq_n_s32(rq.hi - rq.zero);
    const std::int32_t *q = rq.q, *shifts = rq.shift, zero = rq.zero;
    const size_t step = rq.per_channel ? 1 : 0;
    detail::mve_rows<M, N, K>(
        A, lda, B, ldb, bias,
        [=](size_t i, size_t j, int32x4_t v) __attribute__((always_inline)) {
          const std::int32_t shift = shifts[j * step];
          int32x4_t h = vqrdmulhq_n_s32(vshlq_r_s32(v, shift > 0 ? shift : 0), q[j * step]);
          if (shift < 0) h = vrshlq_n_s32(vqaddq_s32(h, vshrq_n_s32(h, 31)), shift);
          const int32x4_t y = vaddq_n_s32(vminq_s32(vmaxq_s32(h, lo), hi), zero);
          if constexpr (sizeof(Out) == 1)
            vstrbq_scatter_offset_s32(reinterpret_cast<std::int8_t*>(Y + i * N + j), rows, y);
          else
            vstrhq_scatter_shifted_offset_s32(reinterpret_cast<std::int16_t*>(Y + i * N + j), rows, y);
        },
        [&](size_t i, size_t j, std::int32_t s) __attribute__((always_inline)) {
          Y[i * N + j] = requantize_entry<Out>(s, rq.q[rq.at(j)], rq.shift[rq.at(j)], rq.zero, rq.lo, rq.hi);
        });
    return true;
  }
  return false;
}

}  // namespace stformer::kernels
