// stformer int8 kernels — the integer matrix product and the fixed-point requantization of the
// quantized forward pass, exact in integers, so that every backend computes the same numbers.
//
//   qmatmul_nt:  C[M,N] (int32) = A[M,K] (int8) · B[N,K]ᵀ (int8) + bias[N] (int32); also with
//                A in int16 (i16_rows8 on x86, i16_rows4 on aarch64 NEON, else a plain loop);
//                qmatmul_nn: int8 A · int16 B[K,N] (a plain loop)
//   requantize:  y = clamp(zero + MultiplyByQuantizedMultiplier(x, q[c], shift[c]), lo, hi), one
//                multiplier per output channel c (TFLite Micro's and CMSIS-NN's formula, below)
//   divide, divide_by_root, softmax_u8: the per-row integer arithmetic of the quantized
//                ScaleNorm and softmax (stformer/quantized/), scalar or plain loops, the same
//                on every core
//
// The product is written once over a small integer vector type, qv (below): a vector of int32
// accumulators, `lanes` wide, to which dot(acc, a, b) adds, for each lane l, the G products
// a[g]·b[l·G + g] of a group of G consecutive entries along K. A's group is broadcast to every
// lane (4 bytes: four int8, or two int16), B is packed in panels [K/G][NP][G] (NP = NV·lanes
// columns), so that, as in matmul_nt, a register tile of R rows × NV vectors needs no
// horizontal sums. Backends:
//   AVX-512 VNNI  G = 4, vpdpbusd (unsigned × signed bytes): A is offset by +128 to unsigned
//                 and 128·Σ_k B[n,k] subtracted at the end (exact);
//   AVX-512BW, AVX2  G = 2, vpmaddwd on int16 (A and B widened once, when packed);
//   NEON          G = 4, sdot with the dot-product extension; otherwise G = 1, vmlal on int16;
//   plain C++     G = 1, one lane: a dot product at a time, four products per two SMLADs on
//                 Armv7E-M (Cortex-M4, M7: STFORMER_ARM_DSP), 16 per VMLADAVA with Helium
//                 (Cortex-M55: STFORMER_HELIUM; its qv requantizes four channels at a time).
// Every partial sum is exact in int32 for K < 2^17 (|a·b| ≤ 128·127), so no order of summation
// changes a result.
#pragma once

#include "../config.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <climits>
#include <cstdint>
#include <cstring>
#include <type_traits>

#if STFORMER_SIMD && (defined(__AVX2__) || defined(__ARM_NEON))
#if defined(__AVX2__)
#include <immintrin.h>
#else
#include <arm_neon.h>
#endif
#elif STFORMER_HELIUM
#include <arm_mve.h>
#endif

// Armv7E-M's DSP instructions (Cortex-M4, M7) for the plain build's int8 products, unless
// -DSTFORMER_ARM_DSP=0 asks for the plain loop (the same integers either way).
#if !defined(STFORMER_ARM_DSP)
#if defined(__ARM_FEATURE_DSP) && !STFORMER_SIMD
#define STFORMER_ARM_DSP 1
#else
#define STFORMER_ARM_DSP 0
#endif
#endif
#if STFORMER_ARM_DSP
#include <arm_acle.h>
#endif

namespace stformer::inline STFORMER_ABI::kernels {

// ---- requantization (fixed point, as TFLite Micro and CMSIS-NN) ----
//
// A real multiplier m > 0 is held as an int32 mantissa q in [2^30, 2^31) and a shift s, with
// m ≈ q · 2^(s − 31). Applied to an int32 x (TFLite's MultiplyByQuantizedMultiplier):
//   a = x · 2^max(s, 0)                      (in int32: a multiplier ≥ 1 must not overflow it)
//   h = ⌊(a·q + 2^30) / 2^31⌋                 (2aq / 2^32 to nearest, ties toward +∞: TFLite's
//                                             SaturatingRoundingDoublingHighMul for q ≥ 0)
//   y = h / 2^max(−s, 0), to nearest, ties away from zero   (RoundingDivideByPOT)
// apply below computes it in int64 without branches, qv::apply lane by lane on vectors (each
// backend's own instructions, the same integers), and a core without a floating-point unit
// runs it as it is.
struct Multiplier {
  std::int32_t q = 0;
  int shift = 0;
};

// The multiplier nearest to m (host side, when a model is quantized): m = f·2^e with f in
// [0.5, 1), q = round(f·2^31), shift = e. Multipliers below 2^−32 (no int32 survives them) and
// m ≤ 0 give q = 0.
inline Multiplier quantize_multiplier(double m) {
  if (!(m > 0)) return {};
  int e = 0;
  std::int64_t q = std::llround(std::frexp(m, &e) * 2147483648.0);
  if (q == (std::int64_t(1) << 31)) q /= 2, ++e;
  if (e < -31) return {};
  return {std::int32_t(q), e};
}

// h fits in int32 (|a·q| < 2^62, q ≥ 0), so the rounding shift is done in 32 bits, as gemmlowp's
// RoundingDivideByPOT: ⌊h / 2^right⌋ plus one when the remainder is above half of 2^right (half
// or above for a negative h). A 32-bit core then needs one widening multiply and no 64-bit shift.
// On Armv7E-M, SMMULR(2a, q) = ⌊(2a·q + 2^31) / 2^32⌋ is h in one instruction when 2a fits in
// int32 (|a| < 2^30, as accumulators are); the 64-bit product serves the rest.
inline std::int32_t apply(std::int32_t x, std::int32_t q, int shift) {
  const int left = shift > 0 ? shift : 0, right = shift > 0 ? 0 : -shift;
  const std::int32_t a = std::int32_t(std::uint32_t(x) << left);
  std::int32_t h;
#if STFORMER_ARM_DSP
  if (std::uint32_t(a) + (1u << 30) < (1u << 31))
    asm("smmulr %0, %1, %2" : "=r"(h) : "r"(2 * a), "r"(q));
  else
#endif
    h = std::int32_t((std::int64_t(a) * q + (std::int64_t(1) << 30)) >> 31);
  const std::int32_t mask = std::int32_t((std::uint32_t(1) << right) - 1), threshold = (mask >> 1) + (h < 0);
  return (h >> right) + ((h & mask) > threshold);
}
inline std::int32_t apply(std::int32_t x, Multiplier m) { return apply(x, m.q, m.shift); }

// ---- the integer arithmetic of ScaleNorm and softmax (scalar, the same on every core) ----

// m / d for an integer d > 0, as a Multiplier: with d' = d·2^l in [2^30, 2^31) (the top 31
// bits of a wider d), q' = ⌊q·2^31 / d'⌋ in (2^30, 2^32), halved into [2^30, 2^31) when it is not; shift
// s' = s + l − 31 (+1 when halved). Per-row multipliers: 1/‖x‖ (ScaleNorm), 1/Σe (softmax).
// A result below 2^−32 (|x·m| < 1/2 for every int32 x) is {0, 0}.
inline Multiplier divide(Multiplier m, std::uint64_t d) {
  if (m.q == 0 || d == 0) return {};
  const int l = std::countl_zero(d) - 33;  // d·2^l in [2^30, 2^31); a wider d keeps its top 31 bits
  d = l >= 0 ? d << l : d >> -l;
  std::uint64_t q = (std::uint64_t(std::uint32_t(m.q)) << 31) / d;
  int shift = m.shift + l - 31;
  if (q >= (std::uint64_t(1) << 31)) q >>= 1, ++shift;
  if (shift < -31) return {};
  return {std::int32_t(q), shift};
}

// m / √ss for ss > 0 (ScaleNorm's g/‖x‖ on integer rows), without a division: ss·4^t = n in
// [2^60, 2^62), m' = n/2^60 in [1, 4) from n's top 32 bits, y ≈ 2^31/√m' from a table of 48
// bins and three Newton steps y ← y·(3 − m'·y²)/2 (in Q31, 64-bit integers), then
// m/√ss = q·2^(s−31) · 2^(t−30) · y/2^31. Within 2^−26 of the real quotient.
inline Multiplier divide_by_root(Multiplier m, std::uint64_t ss) {
  static constexpr std::uint32_t seed[48] = {
      2114695713, 2053387115, 1997119227, 1945237133, 1897199172, 1852552937, 1810917218, 1771968208, 1735428857, 1701060526,
      1668656406, 1638036256, 1609042172, 1581535151, 1555392273, 1530504391, 1506774204, 1484114654, 1462447584, 1441702596,
      1421816090, 1402730445, 1384393311, 1366757007, 1349778000, 1333416450, 1317635818, 1302402522, 1287685637, 1273456629,
      1259689126, 1246358707, 1233442724, 1220920139, 1208771378, 1196978204, 1185523604, 1174391680, 1163567563, 1153037323,
      1142787899, 1132807028, 1123083182, 1113605518, 1104363818, 1095348453, 1086550331, 1077960865};  // 2^31/√m' mid-bin
  if (ss == 0 || m.q == 0) return {};
  const int t = (std::countl_zero(ss) - 2) >> 1;  // ss·4^t in [2^60, 2^62) (t = −1: ss ≥ 2^62)
  ss = t >= 0 ? ss << 2 * t : ss >> 2;
  const std::uint64_t mm = ss >> 30;  // m' in Q30, [2^30, 2^32)
  std::uint64_t y = seed[(mm >> 26) - 16];
  for (int i = 0; i < 3; ++i) {
    const std::uint64_t y2 = (y * y) >> 31, my2 = (mm * y2) >> 30;  // y², m'·y² in Q31
    y = (y * ((std::uint64_t(3) << 31) - my2)) >> 32;
  }
  std::uint64_t q = (std::uint64_t(std::uint32_t(m.q)) * y) >> 31;
  int shift = m.shift + t - 30;
  if (q >= (std::uint64_t(1) << 31)) q >>= 1, ++shift;  // q·y/2^31 is in [2^29, 2^31]
  if (q < (std::uint64_t(1) << 30)) q <<= 1, --shift;
  if (shift < -31) return {};
  return {std::int32_t(q), shift};
}

// 2^(−u/2^16) in Q15 (32768 = 1), for u ≥ 0 in Q16 (at compile time: softmax_u8's table, below).
// u = 2^16·n + 2^12·i + r: 2^−n by a shift, 2^(−i/16)
// from a table (Q30), and 2^(−r/2^16) = e^(−z), z = r·ln2/2^16 < 0.044, as 1 − z + z²/2 − z³/6
// in Q30 (error below z⁴/24 < 2^−22). Rounded to nearest; 0 from n = 16 on.
namespace detail {
inline constexpr std::int64_t pow2_16ths[16] = {1073741824, 1028218693, 984625594, 942880699, 902905651, 864625413, 827968132, 792865000,
                                                759250125,  727060411,  696235434, 666717336, 638450708, 611382493, 585461881, 560640218};
}  // namespace detail
constexpr std::int32_t exp2_neg(std::int32_t u) {
  const auto& pow2 = detail::pow2_16ths;  // 2^(−i/16) in Q30
  constexpr std::int64_t one = std::int64_t(1) << 30, ln2 = 744261118;  // 1 and ln 2 in Q30
  const int n = u >> 16;
  if (n >= 16) return 0;
  const std::int64_t z = (std::int64_t(u & 0xFFF) * ln2) >> 16;
  const std::int64_t z2 = (z * z) >> 30, z3 = (z2 * z) >> 30;
  const std::int64_t p = one - z + (z2 >> 1) - z3 / 6;
  const int shift = 45 + n;  // Q60 -> Q15, then 2^−n
  return std::int32_t((pow2[(u >> 12) & 15] * p + (std::int64_t(1) << (shift - 1))) >> shift);
}

#if STFORMER_SIMD && defined(__AVX512BW__)
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
  // apply(x, q, shift) lane by lane (the formula above): the 64-bit products of the even and
  // the odd lanes, h from bits 31…62 of each, then the rounding shift right.
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
#elif STFORMER_SIMD && defined(__AVX2__)
struct qv {
  __m256i v;
  static constexpr size_t G = 2, lanes = 8;
  using qa = std::int16_t;
  using qb = std::int16_t;
  static constexpr std::int32_t a_offset = 0;
  static qv dot(qv acc, qv a, qv b) { return {_mm256_add_epi32(acc.v, _mm256_madd_epi16(a.v, b.v))}; }
  static const char* name() { return "AVX2 (vpmaddwd)"; }
  static qv apply(qv x, qv q, qv shift) {  // as AVX-512's
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
  static qv clamp_add(qv x, std::int32_t zero, std::int32_t lo, std::int32_t hi) {
    return {_mm256_add_epi32(_mm256_min_epi32(_mm256_max_epi32(x.v, _mm256_set1_epi32(lo - zero)), _mm256_set1_epi32(hi - zero)), _mm256_set1_epi32(zero))};
  }
  static qv broadcast(const qa* a) { std::int32_t x; std::memcpy(&x, a, 4); return {_mm256_set1_epi32(x)}; }
  static qv load(const void* p) { return {_mm256_loadu_si256(static_cast<const __m256i*>(p))}; }
  static qv load_acc(const std::int32_t* p) { return load(p); }
  static void store(std::int32_t* p, qv x) { _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), x.v); }
};
#elif (STFORMER_SIMD && defined(__ARM_NEON)) || STFORMER_HELIUM
// NEON, and Helium (Cortex-M55), whose vector intrinsics mostly share NEON's names. With Helium
// the products are dot_products' below (VMLADAVA sums 16 products at once), so its dot,
// broadcast and load serve only q_tile's generic form; requantization is the same.
struct qv {
  int32x4_t v;
  static constexpr size_t lanes = 4;
  static constexpr std::int32_t a_offset = 0;
#if STFORMER_HELIUM
  static constexpr size_t G = 1;
  using qa = std::int8_t;
  using qb = std::int8_t;
  static qv dot(qv acc, qv a, qv b) { return {vaddq_s32(acc.v, vmulq_s32(a.v, b.v))}; }
  static qv broadcast(const qa* a) { return {vdupq_n_s32(*a)}; }
  static qv load(const void* p) { return {vldrbq_s32(static_cast<const std::int8_t*>(p))}; }
  static const char* name() { return "Helium"; }
#elif defined(__ARM_FEATURE_DOTPROD)
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
  // vqrdmulh is h exactly (it saturates only at a = q = INT32_MIN, and q ≥ 0); then the
  // rounding shift right as on x86 (vrshl alone would round ties upward).
  static qv apply(qv x, qv q, qv shift) {
    const int32x4_t zero = vdupq_n_s32(0), one = vdupq_n_s32(1);
    const int32x4_t left = vmaxq_s32(shift.v, zero), right = vmaxq_s32(vnegq_s32(shift.v), zero);
    const int32x4_t h = vqrdmulhq_s32(vshlq_s32(x.v, left), q.v);
    const int32x4_t mask = vsubq_s32(vshlq_s32(one, right), one);
    const int32x4_t threshold = vaddq_s32(vshrq_n_s32(mask, 1), vreinterpretq_s32_u32(vshrq_n_u32(vreinterpretq_u32_s32(h), 31)));
    const int32x4_t y = vshlq_s32(h, vnegq_s32(right));
#if STFORMER_HELIUM
    return {vaddq_m_n_s32(y, y, 1, vcmpgtq_s32(vandq_s32(h, mask), threshold))};  // comparisons give predicates
#else
    return {vsubq_s32(y, vreinterpretq_s32_u32(vcgtq_s32(vandq_s32(h, mask), threshold)))};
#endif
  }
  static qv clamp_add(qv x, std::int32_t zero, std::int32_t lo, std::int32_t hi) {
    return {vaddq_s32(vminq_s32(vmaxq_s32(x.v, vdupq_n_s32(lo - zero)), vdupq_n_s32(hi - zero)), vdupq_n_s32(zero))};
  }
  static qv load_acc(const std::int32_t* p) { return {vld1q_s32(p)}; }
  static void store(std::int32_t* p, qv x) { vst1q_s32(p, x.v); }
};
#else
struct qv {
  std::int32_t v;
  static constexpr size_t G = 1, lanes = 1;
  using qa = std::int8_t;
  using qb = std::int8_t;
  static constexpr std::int32_t a_offset = 0;
  static qv dot(qv acc, qv a, qv b) { return {acc.v + a.v * b.v}; }
  static qv apply(qv x, qv q, qv shift) { return {kernels::apply(x.v, q.v, shift.v)}; }
  static qv clamp_add(qv x, std::int32_t zero, std::int32_t lo, std::int32_t hi) { return {std::clamp(x.v, lo - zero, hi - zero) + zero}; }
  static qv broadcast(const qa* a) { return {*a}; }
  static qv load(const void* p) { return {*static_cast<const qb*>(p)}; }
  static qv load_acc(const std::int32_t* p) { return {*p}; }
  static void store(std::int32_t* p, qv x) { *p = x.v; }
  static const char* name() { return "plain C++"; }
};
#endif

namespace detail {

// C[i, j] = bias[j] + Σ_k A[i, k]·B[j, k], one dot product at a time: the plain build's product,
// and int16 rows' everywhere.
#if STFORMER_ARM_DSP
// On Armv7E-M: SXTB16 spreads bytes 0 and 2 of a word of four int8 (along K) into two int16
// halves, and the word rotated by 8 its bytes 1 and 3; SMLAD adds the products of two such
// halves' pairs to an int32. So four products take two SMLADs. A's rows are spread once, into
// `spread` ([R][K/4][2] words), then each pair of B's rows (a Cortex-M reads unaligned words)
// is spread as it is read and meets all R rows: per four products of a row and a column,
// 2 SMLADs, plus 2 SXTB16 and a load shared by the R rows.
inline std::int32_t dsp_word(const std::int8_t* p) {
  std::int32_t w;
  std::memcpy(&w, p, 4);
  return w;
}
inline std::int32_t dsp_odd(std::int32_t w) { return __sxtb16(std::int32_t((std::uint32_t(w) >> 8) | (std::uint32_t(w) << 24))); }

template <size_t R, size_t CN, size_t K>
inline void dsp_block(const std::int32_t* spread, const std::int8_t* A, size_t lda, const std::int8_t* B, size_t ldb, std::int32_t* C,
                      size_t ldc, const std::int32_t* bias) {
  constexpr size_t KW = K / 4;
  std::int32_t s[R][CN];
  for (size_t r = 0; r < R; ++r)
    for (size_t c = 0; c < CN; ++c) s[r][c] = bias ? bias[c] : 0;
  for (size_t k = 0; k < KW; ++k) {
    std::int32_t be[CN], bo[CN];
    for (size_t c = 0; c < CN; ++c) {
      const std::int32_t w = dsp_word(B + c * ldb + 4 * k);
      be[c] = __sxtb16(w), bo[c] = dsp_odd(w);
    }
    for (size_t r = 0; r < R; ++r)
      for (size_t c = 0; c < CN; ++c) s[r][c] = __smlad(spread[(r * KW + k) * 2], be[c], __smlad(spread[(r * KW + k) * 2 + 1], bo[c], s[r][c]));
  }
  for (size_t k = KW * 4; k < K; ++k)
    for (size_t r = 0; r < R; ++r)
      for (size_t c = 0; c < CN; ++c) s[r][c] += std::int32_t(A[r * lda + k]) * std::int32_t(B[c * ldb + k]);
  for (size_t r = 0; r < R; ++r)
    for (size_t c = 0; c < CN; ++c) C[r * ldc + c] = s[r][c];
}

// R rows of A (from A) against all N rows of B, two columns at a time.
template <size_t R, size_t N, size_t K>
inline void dsp_rows(const std::int8_t* A, size_t lda, const std::int8_t* B, size_t ldb, std::int32_t* C, size_t ldc, const std::int32_t* bias) {
  constexpr size_t KW = K / 4;
  std::int32_t spread[R * KW * 2 + 1];
  for (size_t r = 0; r < R; ++r)
    for (size_t k = 0; k < KW; ++k) {
      const std::int32_t w = dsp_word(A + r * lda + 4 * k);
      spread[(r * KW + k) * 2] = __sxtb16(w), spread[(r * KW + k) * 2 + 1] = dsp_odd(w);
    }
  for (size_t j = 0; j + 2 <= N; j += 2) dsp_block<R, 2, K>(spread, A, lda, B + j * ldb, ldb, C + j, ldc, bias ? bias + j : nullptr);
  if constexpr (N % 2 != 0) dsp_block<R, 1, K>(spread, A, lda, B + (N - 1) * ldb, ldb, C + N - 1, ldc, bias ? bias + N - 1 : nullptr);
}
#endif

#if STFORMER_HELIUM
// Helium: VMLADAVA adds the 16 products of two vectors of 16 int8 to an int32 accumulator, so
// a dot product along K takes K/16 of them; a block of R rows × CN columns of C (R ≤ 4,
// CN ≤ 2) loads each vector once. A K that is not a multiple of 16 ends with predicated loads
// (zeros past K, nothing read there).
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
#endif

#if STFORMER_SIMD && defined(__AVX2__)
// The 8 sums of the 8 int32 lanes of a[0..7], as one vector: hsum(a[r]) in lane r.
inline __m256i hsums8(const __m256i* a) {
  const __m256i s01 = _mm256_hadd_epi32(a[0], a[1]), s23 = _mm256_hadd_epi32(a[2], a[3]);
  const __m256i s45 = _mm256_hadd_epi32(a[4], a[5]), s67 = _mm256_hadd_epi32(a[6], a[7]);
  const __m256i s0123 = _mm256_hadd_epi32(s01, s23), s4567 = _mm256_hadd_epi32(s45, s67);  // [lo halves | hi halves]
  return _mm256_add_epi32(_mm256_permute2x128_si256(s0123, s4567, 0x20), _mm256_permute2x128_si256(s0123, s4567, 0x31));
}

// One int16 row a [K] against 8 int8 rows of B: c[r] = bias[r] + Σ_k a[k]·B[r, k]. B's rows are
// widened to int16 as they are read (vpmovsxbw), 16 products per vpmaddwd (vpdpwssd with
// AVX-512 VNNI) into int32 pairs, the 8 accumulators summed at the end (hsums8); the last K % 16
// entries one by one. Exact, as the plain loop (|pair| ≤ 2·128·32768 < 2^31). B's rows are
// asked for 16 KB ahead: one row through a large weight (a language model's head) is bound by
// reading it, as matmul_nt's nt_tile.
template <size_t K>
inline void i16_rows8(const std::int16_t* a, const std::int8_t* B, size_t ldb, std::int32_t* c, const std::int32_t* bias) {
  constexpr size_t K16 = K / 16 * 16;
  __m256i acc[8];
  for (auto& v : acc) v = _mm256_setzero_si256();
  for (size_t k = 0; k < K16; k += 16) {
    const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + k));
    for (size_t r = 0; r < 8; ++r) {
      if (k % 64 == 0) __builtin_prefetch(reinterpret_cast<const void*>(reinterpret_cast<std::uintptr_t>(B + r * ldb + k) + 16384));
      const __m256i w = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(B + r * ldb + k)));
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
      acc[r] = _mm256_dpwssd_epi32(acc[r], w, x);
#else
      acc[r] = _mm256_add_epi32(acc[r], _mm256_madd_epi16(w, x));
#endif
    }
  }
  alignas(32) std::int32_t s[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(s), hsums8(acc));
  for (size_t r = 0; r < 8; ++r) {
    for (size_t k = K16; k < K; ++k) s[r] += std::int32_t(a[k]) * std::int32_t(B[r * ldb + k]);
    c[r] = s[r] + (bias ? bias[r] : 0);
  }
}
#endif

#if STFORMER_SIMD && defined(__ARM_NEON) && defined(__aarch64__)
// The same on NEON, 4 rows of B at a time: B's rows widened (vmovl_s8), 8 products per two
// vmlal_s16 into int32, each row's 4 lanes summed at the end (vaddvq_s32).
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
#endif

template <size_t M, size_t N, size_t K, class TA>
inline void dot_products(const TA* A, size_t lda, const std::int8_t* B, size_t ldb, std::int32_t* C, size_t ldc, const std::int32_t* bias) {
  size_t j0 = 0;  // B's rows [0, j0) done by a vector path, the rest by the loop at the end
#if STFORMER_SIMD && defined(__AVX2__)
  if constexpr (std::is_same_v<TA, std::int16_t> && K >= 16) {  // int16 rows: 8 rows of B at a time
    j0 = N / 8 * 8;
    for (size_t i = 0; i < M; ++i)
      for (size_t j = 0; j < j0; j += 8) i16_rows8<K>(A + i * lda, B + j * ldb, ldb, C + i * ldc + j, bias ? bias + j : nullptr);
  }
#elif STFORMER_SIMD && defined(__ARM_NEON) && defined(__aarch64__)
  if constexpr (std::is_same_v<TA, std::int16_t> && K >= 8) {  // int16 rows: 4 rows of B at a time
    j0 = N / 4 * 4;
    for (size_t i = 0; i < M; ++i)
      for (size_t j = 0; j < j0; j += 4) i16_rows4<K>(A + i * lda, B + j * ldb, ldb, C + i * ldc + j, bias ? bias + j : nullptr);
  }
#endif
#if STFORMER_HELIUM
  if constexpr (std::is_same_v<TA, std::int8_t>) {
    constexpr size_t RB = 4;  // rows of A at a time
    const auto rows = [&]<size_t R>(size_t i) {
      for (size_t j = 0; j + 2 <= N; j += 2) mve_block<R, 2, K>(A + i * lda, lda, B + j * ldb, ldb, C + i * ldc + j, ldc, bias ? bias + j : nullptr);
      if constexpr (N % 2 != 0)
        mve_block<R, 1, K>(A + i * lda, lda, B + (N - 1) * ldb, ldb, C + i * ldc + N - 1, ldc, bias ? bias + N - 1 : nullptr);
    };
    for (size_t i = 0; i + RB <= M; i += RB) rows.template operator()<RB>(i);
    if constexpr (M % RB != 0) rows.template operator()<M % RB>(M / RB * RB);
    return;
  }
#elif STFORMER_ARM_DSP
  if constexpr (std::is_same_v<TA, std::int8_t>) {
    constexpr size_t RB = 4;  // rows of A at a time
    for (size_t i = 0; i + RB <= M; i += RB) dsp_rows<RB, N, K>(A + i * lda, lda, B, ldb, C + i * ldc, ldc, bias);
    if constexpr (M % RB != 0) dsp_rows<M % RB, N, K>(A + M / RB * RB * lda, lda, B, ldb, C + M / RB * RB * ldc, ldc, bias);
    return;
  }
#endif
  for (size_t i = 0; i < M; ++i)
    for (size_t j = j0; j < N; ++j) {
      std::int32_t s = bias ? bias[j] : 0;
      for (size_t k = 0; k < K; ++k) s += std::int32_t(A[i * lda + k]) * std::int32_t(B[j * ldb + k]);
      C[i * ldc + j] = s;
    }
}

// x held in a register: q_tile's vectors of B are loaded once, not folded by GCC into each row's
// instruction (kernels::in_register in vec.hpp), and its accumulators stay where they are
// instead of being copied between registers every step. No result changes.
inline qv pinned(qv x) {
#if STFORMER_SIMD && defined(__AVX2__)
  asm("" : "+v"(x.v));
#endif
  return x;
}

// R rows × NV vectors of C (int32, ld ldc) = add + (first ? 0 : C) + the product of one block of
// KG groups: a [R][KG·G] (A's rows, prepared: offset and widened), p the packed panel
// [KG][NV·lanes][G]; add [NV·lanes]: the bias (first block) minus the offset's correction. Only
// the first `cols` columns of C are read and written. Not inlined: inside qmatmul_nt's loops GCC
// kept the accumulators in memory, a store per product.
template <size_t R, size_t NV, size_t KG>
[[gnu::noinline]] inline void q_tile(const qv::qa* a, const qv::qb* p, std::int32_t* C, size_t ldc, const std::int32_t* add, size_t cols, bool first) {
  constexpr size_t L = qv::lanes, G = qv::G, NP = NV * L;
  qv acc[R][NV];
  for (size_t r = 0; r < R; ++r)
    for (size_t v = 0; v < NV; ++v) {
      if (first) {
        acc[r][v] = qv::load_acc(add + v * L);
      } else {
        std::int32_t row[L];
        const std::int32_t* c = C + r * ldc + v * L;
        for (size_t l = 0; l < L; ++l) row[l] = (v * L + l < cols ? c[l] : 0) + add[v * L + l];
        acc[r][v] = qv::load_acc(row);
      }
    }
  for (size_t k = 0; k < KG; ++k) {
    qv b[NV];
    for (size_t v = 0; v < NV; ++v) b[v] = pinned(qv::load(p + (k * NP + v * L) * G));
    for (size_t r = 0; r < R; ++r) {
      qv x = qv::broadcast(a + r * KG * G + k * G);
      for (size_t v = 0; v < NV; ++v) acc[r][v] = pinned(qv::dot(acc[r][v], x, b[v]));
    }
  }
  for (size_t r = 0; r < R; ++r)
    for (size_t v = 0; v < NV; ++v) {
      std::int32_t* c = C + r * ldc + v * L;
      if (cols >= (v + 1) * L) {
        qv::store(c, acc[r][v]);
      } else {
        std::int32_t row[L];
        qv::store(row, acc[r][v]);
        for (size_t l = 0; l < L && v * L + l < cols; ++l) c[l] = row[l];
      }
    }
}

}  // namespace detail

// The panel of B's columns j0 … j0 + cols − 1 (cols ≤ NP) and entries k0 … k0 + kn − 1 for
// q_tile: panel[(g·NP + j)·G + e] = B[j0 + j, k0 + g·G + e] (as qv::qb), 0 past column cols or
// entry kn, kg = ⌈kn / G⌉ groups; add[j] = bias[j0 + j] (when given) − a_offset · Σ_k of that
// row of B. Where a group is one 32-bit word (G entries of qb: every x86 form), 8 columns × 8
// groups at a time are an 8 × 8 transpose of words in AVX2 registers.
template <size_t NP>
inline void pack_panel(const std::int8_t* B, size_t ldb, size_t cols, size_t kn, size_t kg, const std::int32_t* bias, qv::qb* panel,
                       std::int32_t* add) {
  constexpr size_t G = qv::G;
  size_t j = 0, g8 = 0;
#if STFORMER_SIMD && defined(__AVX2__)
  if constexpr (G * sizeof(qv::qb) == 4 && NP % 8 == 0) {
    g8 = kn / (8 * G) * 8;  // groups done 8 at a time
    for (; j + 8 <= cols; j += 8)
      for (size_t g = 0; g < g8; g += 8) {
        __m256i r[8], t[8], u[8];
        for (size_t c = 0; c < 8; ++c) {  // column j + c's 8 groups as 8 words
          const std::int8_t* b = B + (j + c) * ldb + g * G;
          if constexpr (sizeof(qv::qb) == 2)
            r[c] = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b)));
          else
            r[c] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b));
        }
        for (size_t c = 0; c < 8; c += 2) t[c] = _mm256_unpacklo_epi32(r[c], r[c + 1]), t[c + 1] = _mm256_unpackhi_epi32(r[c], r[c + 1]);
        for (size_t c = 0; c < 8; c += 4)
          for (size_t h = 0; h < 2; ++h)
            u[c + h] = _mm256_unpacklo_epi64(t[c + h], t[c + h + 2]), u[c + h + 2] = _mm256_unpackhi_epi64(t[c + h], t[c + h + 2]);
        // u[0 … 3]: groups (0, 4), (2, 6), (1, 5), (3, 7) of columns 0 … 3 (low and high halves); u[4 … 7] of columns 4 … 7
        constexpr int order[4] = {0, 2, 1, 3};
        for (size_t q = 0; q < 4; ++q) {
          const __m256i lo = _mm256_permute2x128_si256(u[order[q]], u[4 + order[q]], 0x20);
          const __m256i hi = _mm256_permute2x128_si256(u[order[q]], u[4 + order[q]], 0x31);
          _mm256_storeu_si256(reinterpret_cast<__m256i*>(panel + ((g + q) * NP + j) * G), lo);
          _mm256_storeu_si256(reinterpret_cast<__m256i*>(panel + ((g + q + 4) * NP + j) * G), hi);
        }
      }
  }
#endif
  for (size_t c = 0; c < NP; ++c) {  // the rest: groups g8 … of columns done above, every group of the others
    qv::qb* out = panel + c * G;
    const std::int8_t* b = B + c * ldb;
    const size_t from = c < j ? g8 * G : 0;
    if (c < cols) {
      for (size_t k = from; k < kg * G; ++k) out[k / G * NP * G + k % G] = k < kn ? qv::qb(b[k]) : qv::qb(0);
    } else {
      for (size_t k = 0; k < kg * G; ++k) out[k / G * NP * G + k % G] = qv::qb(0);
    }
    std::int32_t s = 0;
    if constexpr (qv::a_offset != 0)
      if (c < cols)
        for (size_t k = 0; k < kn; ++k) s += b[k];
    add[c] = (bias && c < cols ? bias[c] : 0) - qv::a_offset * s;
  }
}

// C[M,N] = A[M,K] · B[N,K]ᵀ + bias[N] (bias may be null), all integers: A, B int8 (row-major,
// ld lda, ldb), C int32 (ld ldc). SIMD builds take up to MC rows of A at a time and K in blocks
// of at most KC: each block of those rows is prepared once (offset and widened), then B's
// columns are packed in panels of NP (pack_panel) that meet every tile of TR rows. All on the
// stack. The plain build takes dot products. The result is exact on every backend.
template <size_t M, size_t N, size_t K>
inline void qmatmul_nt(const std::int8_t* A, size_t lda, const std::int8_t* B, size_t ldb, std::int32_t* C, size_t ldc,
                       const std::int32_t* bias = nullptr) {
  if constexpr (qv::lanes == 1 || STFORMER_HELIUM) {
    detail::dot_products<M, N, K>(A, lda, B, ldb, C, ldc, bias);
  } else {
    constexpr size_t L = qv::lanes, G = qv::G, NVmax = L >= 16 ? 4 : 2;
    constexpr size_t NV = (N + L - 1) / L < NVmax ? (N + L - 1) / L : NVmax, NP = NV * L, TR = 6;
    constexpr size_t KC = K < 256 ? K : 256, KGC = (KC + G - 1) / G;  // a block: KC entries of K in KGC groups
    constexpr size_t MC = TR * (64 / TR), RA = M < MC ? M : MC;         // rows of A at a time
    alignas(64) qv::qb panel[KGC * NP * G];
    alignas(64) qv::qa rows[RA * KGC * G];
    alignas(64) std::int32_t add[NP];  // per block: the bias (first block) minus the offset's correction
    for (size_t i0 = 0; i0 < M; i0 += MC) {
      const size_t mr = M - i0 < MC ? M - i0 : MC;
      for (size_t k0 = 0; k0 < K; k0 += KC) {
        const size_t kn = K - k0 < KC ? K - k0 : KC, kg = (kn + G - 1) / G;
        for (size_t r = 0; r < mr; ++r) {
          const std::int8_t* a = A + (i0 + r) * lda + k0;
          qv::qa* to = rows + r * kg * G;
          for (size_t k = 0; k < kn; ++k) to[k] = qv::qa(std::int32_t(a[k]) + qv::a_offset);
          for (size_t k = kn; k < kg * G; ++k) to[k] = qv::qa(qv::a_offset);
        }
        for (size_t j0 = 0; j0 < N; j0 += NP) {
          const size_t cols = N - j0 < NP ? N - j0 : NP;
          pack_panel<NP>(B + j0 * ldb + k0, ldb, cols, kn, kg, k0 == 0 && bias ? bias + j0 : nullptr, panel, add);
          auto tile = [&]<size_t R>(size_t i) {
            std::int32_t* c = C + (i0 + i) * ldc + j0;
            if (kg == KGC)
              detail::q_tile<R, NV, KGC>(rows + i * kg * G, panel, c, ldc, add, cols, k0 == 0);
            else
              detail::q_tile<R, NV, (K % KC + G - 1) / G>(rows + i * kg * G, panel, c, ldc, add, cols, k0 == 0);
          };
          size_t i = 0;
          for (; i + TR <= mr; i += TR) tile.template operator()<TR>(i);
          if constexpr (M % TR != 0)  // only the last chunk of rows ends in a part of a tile (MC is a multiple of TR)
            if (i < mr) tile.template operator()<M % TR>(i);
        }
      }
    }
  }
}

// 2^(−f/256) in Q15 for f = 0 … 255 (exp2_neg, at compile time; 32-bit entries, 1 KB, so that
// the loops that read it vectorize with gathers).
inline constexpr auto exp2_q15 = [] {
  struct {
    std::uint32_t v[256];
  } t{};
  for (int f = 0; f < 256; ++f) t.v[f] = std::uint32_t(exp2_neg(f << 8));
  return t;
}();

// The softmax's numerators in 8 bits for the C scores x of one query row (int32, masked keys
// at INT32_MIN): e_j = 255 · 2^(−u_j/256) with u_j ≈ (max − x_j)·E in 1/256 octaves, E the
// exponent's multiplier (the scores' scale times log2(e)·256, at most 2^13), from the table
// above (2^(−f/256), f = u_j mod 256, in Q15) and a shift by ⌊u_j/256⌋, rounded: within 0.85
// of a step (u to 1/256 octave, then e to the nearest integer); 0 from 16 octaves on. All in
// int32 so that the loop vectorizes: E's top 15 bits e15 and u_j = ⌊(d_j·e15 + ½·2^k) / 2^k⌋ on
// d_j = min((max − x_j) / 2^a, 2^16 − 1), a and k from E's shift (a > 0 only where a unit of
// the scores is below a quarter of a step, and then costs less than a quarter of a step). Written as p_j = e_j − 128 (int8: A·V is then a product
// of int8 rows, the 128 added back through its bias); masked keys get e_j = 0 (a difference
// past 2^16 steps). Returns Σ_j e_j, 0 when every key is masked.
template <size_t C>
inline std::int32_t softmax_u8(const std::int32_t* x, Multiplier exponent, std::int8_t* p) {
  std::int32_t mx = INT32_MIN;
  for (size_t j = 0; j < C; ++j) mx = std::max(mx, x[j]);
  if (mx == INT32_MIN) {
    std::fill_n(p, C, std::int8_t(-128));
    return 0;
  }
  const std::int32_t e15 = exponent.q >> 16;             // E = e15 · 2^(shift − 15), e15 in [2^14, 2^15)
  const int K = 15 - std::min(exponent.shift, 14);       // ≥ 1
  const int a = K > 17 ? K - 17 : 0, k = K - a;          // d·e15 < 2^31, and 2^16 steps still reach 16 octaves
  const std::uint32_t umx = std::uint32_t(mx);
  std::int32_t sum = 0;
  for (size_t j = 0; j < C; ++j) {
    const std::int32_t d = std::int32_t(std::min<std::uint32_t>((umx - std::uint32_t(x[j])) >> a, 65535));
    const std::int32_t u = std::min<std::int32_t>((d * e15 + (1 << (k - 1))) >> k, 16 * 256);
    const std::int32_t n = u >> 8;
    const std::int32_t e = (std::int32_t(exp2_q15.v[u & 255]) * 255 + (1 << (14 + n))) >> (15 + n);
    p[j] = std::int8_t(e - 128);
    sum += e;
  }
  return sum;
}

// The same with A in int16 (a model's int16 input, a set model's int16 rows, Int8Linear's one
// row): dot_products (8 rows of B at a time on x86, 4 on aarch64 NEON, else a plain loop), exact
// while K·2^15·127 < 2^31 (K ≤ 516).
template <size_t M, size_t N, size_t K>
inline void qmatmul_nt(const std::int16_t* A, size_t lda, const std::int8_t* B, size_t ldb, std::int32_t* C, size_t ldc,
                       const std::int32_t* bias = nullptr) {
  static_assert(K <= 516, "qmatmul_nt: int16 rows are for layers of at most 516 inputs (int32 sums)");
  detail::dot_products<M, N, K>(A, lda, B, ldb, C, ldc, bias);
}

// C[M,N] (int32) = A[M,K] (int8) · B[K,N] (int16, K rows of N) + bias[N]: a plain loop along
// B's rows, so that it vectorises over N (the products of int16 keys and values in an attention
// with int16 rows); exact while K·128·32767 < 2^31 (K ≤ 511).
template <size_t M, size_t N, size_t K>
inline void qmatmul_nn(const std::int8_t* A, size_t lda, const std::int16_t* B, size_t ldb, std::int32_t* C, size_t ldc,
                       const std::int32_t* bias = nullptr) {
  static_assert(K <= 511, "qmatmul_nn: int16 rows of B are for products of at most 511 terms (int32 sums)");
  for (size_t i = 0; i < M; ++i) {
    std::int32_t* c = C + i * ldc;
    for (size_t j = 0; j < N; ++j) c[j] = bias ? bias[j] : 0;
    for (size_t k = 0; k < K; ++k) {
      const std::int32_t a = A[i * lda + k];
      const std::int16_t* b = B + k * ldb;
      for (size_t j = 0; j < N; ++j) c[j] += a * std::int32_t(b[j]);
    }
  }
}

// y[0 … lanes − 1] = x's lanes as Out (int8, int16 or int32), each already within Out's range.
template <class Out>
inline void store_as(Out* y, qv x) {
  if constexpr (sizeof(Out) == 4) {
    qv::store(reinterpret_cast<std::int32_t*>(y), x);
#if STFORMER_SIMD && defined(__AVX512BW__)
  } else if constexpr (sizeof(Out) == 1) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y), _mm512_cvtepi32_epi8(x.v));
  } else if constexpr (sizeof(Out) == 2) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y), _mm512_cvtepi32_epi16(x.v));
#elif STFORMER_SIMD && defined(__AVX2__)
  } else if constexpr (sizeof(Out) <= 2) {
    const __m256i w = _mm256_packs_epi32(x.v, x.v);  // int16: lanes 0-3 twice, then 4-7 twice
    if constexpr (sizeof(Out) == 1) {
      const __m256i b = _mm256_packs_epi16(w, w);
      _mm_storel_epi64(reinterpret_cast<__m128i*>(y), _mm_unpacklo_epi32(_mm256_castsi256_si128(b), _mm256_extracti128_si256(b, 1)));
    } else {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(y), _mm_unpacklo_epi64(_mm256_castsi256_si128(w), _mm256_extracti128_si256(w, 1)));
    }
#endif
  } else {
    std::int32_t v[qv::lanes];
    qv::store(v, x);
    for (size_t l = 0; l < qv::lanes; ++l) y[l] = Out(v[l]);
  }
}

// y[r, c] = clamp(zero + apply(x[r, c], q[c], shift[c]), lo, hi) for rows × channels entries,
// with one multiplier per channel (an output column of a product; Multiplier's fields as two
// arrays, so that a vector of channels loads at once). The same integers on every backend;
// clamped before zero is added (qv::clamp_add), so no sum overflows.
template <class Out>
inline void requantize(const std::int32_t* x, size_t rows, size_t channels, const std::int32_t* q, const std::int32_t* shift,
                       std::int32_t zero, std::int32_t lo, std::int32_t hi, Out* y) {
  constexpr size_t L = qv::lanes;
  const size_t whole = channels / L * L;  // channels in whole vectors
  for (size_t r = 0; r < rows; ++r, x += channels, y += channels) {
    for (size_t c = 0; c < whole; c += L)
      store_as(y + c, qv::clamp_add(qv::apply(qv::load_acc(x + c), qv::load_acc(q + c), qv::load_acc(shift + c)), zero, lo, hi));
    for (size_t c = whole; c < channels; ++c) y[c] = Out(std::clamp(apply(x[c], q[c], shift[c]), lo - zero, hi - zero) + zero);
  }
}

// The same for n entries under one multiplier m (a row's: ScaleNorm's g/‖x‖, softmax's V/Σe).
template <class Out>
inline void requantize(const std::int32_t* x, size_t n, Multiplier m, std::int32_t zero, std::int32_t lo, std::int32_t hi, Out* y) {
  constexpr size_t L = qv::lanes;
  std::int32_t q[L], shift[L];
  std::fill_n(q, L, m.q), std::fill_n(shift, L, std::int32_t(m.shift));
  for (size_t c = 0; c < n; c += L) requantize(x + c, 1, std::min(L, n - c), q, shift, zero, lo, hi, y + c);
}

}  // namespace stformer::kernels
