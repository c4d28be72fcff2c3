// stformer int8 kernels — the integer matrix product and the fixed-point requantization of the
// quantized forward pass, exact in integers, so that every backend computes the same numbers.
//
//   qmatmul_nt:  C[M,N] (int32) = A[M,K] (int8) · B[N,K]ᵀ (int8) + bias[N] (int32)
//   requantize:  y = clamp(zero + MultiplyByQuantizedMultiplier(x, m, shift), lo, hi)
//                (TFLite Micro's and CMSIS-NN's formula, below)
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
//   plain C++     G = 1, one lane (the Cortex-M builds; the DSP and Helium kernels plug in here).
// Every partial sum is exact in int32 for K < 2^17 (|a·b| ≤ 128·127), so no order of summation
// changes a result.
#pragma once

#include "../config.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#if STFORMER_SIMD && (defined(__AVX2__) || defined(__ARM_NEON))
#if defined(__AVX2__)
#include <immintrin.h>
#else
#include <arm_neon.h>
#endif
#endif

namespace stformer::inline STFORMER_ABI::kernels {

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
  static qv zero() { return {_mm512_setzero_si512()}; }
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
  static qv zero() { return {_mm256_setzero_si256()}; }
  static qv broadcast(const qa* a) { std::int32_t x; std::memcpy(&x, a, 4); return {_mm256_set1_epi32(x)}; }
  static qv load(const void* p) { return {_mm256_loadu_si256(static_cast<const __m256i*>(p))}; }
  static qv load_acc(const std::int32_t* p) { return load(p); }
  static void store(std::int32_t* p, qv x) { _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), x.v); }
};
#elif STFORMER_SIMD && defined(__ARM_NEON)
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
  static qv zero() { return {vdupq_n_s32(0)}; }
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
  static qv zero() { return {0}; }
  static qv broadcast(const qa* a) { return {*a}; }
  static qv load(const void* p) { return {*static_cast<const qb*>(p)}; }
  static qv load_acc(const std::int32_t* p) { return {*p}; }
  static void store(std::int32_t* p, qv x) { *p = x.v; }
  static const char* name() { return "plain C++"; }
};
#endif

namespace detail {

// R rows × NV vectors of C (int32, ld ldc) = add + (first ? 0 : C) + the product of one block of
// KG groups: a [R][KG·G] (A's rows, prepared: offset and widened), p the packed panel
// [KG][NV·lanes][G]; add [NV·lanes]: the bias (first block) minus the offset's correction. Only
// the first `cols` columns of C are read and written.
template <size_t R, size_t NV, size_t KG>
inline void q_tile(const qv::qa* a, const qv::qb* p, std::int32_t* C, size_t ldc, const std::int32_t* add, size_t cols, bool first) {
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
    for (size_t v = 0; v < NV; ++v) b[v] = qv::load(p + (k * NP + v * L) * G);
    for (size_t r = 0; r < R; ++r) {
      qv x = qv::broadcast(a + r * KG * G + k * G);
      for (size_t v = 0; v < NV; ++v) acc[r][v] = qv::dot(acc[r][v], x, b[v]);
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

// C[M,N] = A[M,K] · B[N,K]ᵀ + bias[N] (bias may be null), all integers: A, B int8 (row-major,
// ld lda, ldb), C int32 (ld ldc). SIMD builds pack B's columns in panels of NP and K in blocks
// of at most KC (on the stack) and prepare A's rows tile by tile; the plain build takes dot
// products. The result is exact on every backend.
template <size_t M, size_t N, size_t K>
inline void qmatmul_nt(const std::int8_t* A, size_t lda, const std::int8_t* B, size_t ldb, std::int32_t* C, size_t ldc,
                       const std::int32_t* bias = nullptr) {
  if constexpr (qv::lanes == 1) {
    for (size_t i = 0; i < M; ++i)
      for (size_t j = 0; j < N; ++j) {
        std::int32_t s = bias ? bias[j] : 0;
        for (size_t k = 0; k < K; ++k) s += std::int32_t(A[i * lda + k]) * std::int32_t(B[j * ldb + k]);
        C[i * ldc + j] = s;
      }
  } else {
    constexpr size_t L = qv::lanes, G = qv::G, NVmax = L >= 16 ? 4 : 2;
    constexpr size_t NV = (N + L - 1) / L < NVmax ? (N + L - 1) / L : NVmax, NP = NV * L, TR = L >= 16 ? 6 : 4;
    constexpr size_t KC = K < 256 ? K : 256, KGC = (KC + G - 1) / G;  // a block: KC entries of K in KGC groups
    alignas(64) qv::qb panel[KGC * NP * G];
    alignas(64) qv::qa rows[TR * KGC * G];
    alignas(64) std::int32_t add[NP];  // per block: the bias (first block) minus the offset's correction
    for (size_t j0 = 0; j0 < N; j0 += NP) {
      const size_t cols = N - j0 < NP ? N - j0 : NP;
      for (size_t k0 = 0; k0 < K; k0 += KC) {
        const size_t kn = K - k0 < KC ? K - k0 : KC, kg = (kn + G - 1) / G;
        // panel[(g·NP + j)·G + e] = B[j0 + j, k0 + g·G + e], 0 past column N or the block's end
        for (size_t g = 0; g < kg; ++g)
          for (size_t j = 0; j < NP; ++j)
            for (size_t e = 0; e < G; ++e) {
              const size_t k = g * G + e;
              panel[(g * NP + j) * G + e] = j < cols && k < kn ? qv::qb(B[(j0 + j) * ldb + k0 + k]) : qv::qb(0);
            }
        for (size_t j = 0; j < NP; ++j) {
          std::int32_t s = 0;
          if (qv::a_offset != 0 && j < cols)
            for (size_t k = 0; k < kn; ++k) s += B[(j0 + j) * ldb + k0 + k];
          add[j] = (k0 == 0 && bias && j < cols ? bias[j0 + j] : 0) - qv::a_offset * s;
        }
        auto tile = [&]<size_t R>(size_t i) {
          for (size_t r = 0; r < R; ++r)
            for (size_t k = 0; k < kg * G; ++k)
              rows[r * kg * G + k] = k < kn ? qv::qa(std::int32_t(A[(i + r) * lda + k0 + k]) + qv::a_offset) : qv::qa(qv::a_offset);
          if (kg == KGC)
            detail::q_tile<R, NV, KGC>(rows, panel, C + i * ldc + j0, ldc, add, cols, k0 == 0);
          else
            detail::q_tile<R, NV, (K % KC + G - 1) / G>(rows, panel, C + i * ldc + j0, ldc, add, cols, k0 == 0);
        };
        size_t i = 0;
        for (; i + TR <= M; i += TR) tile.template operator()<TR>(i);
        if constexpr (M % TR != 0) tile.template operator()<M % TR>(i);
      }
    }
  }
}

// ---- requantization (fixed point, as TFLite Micro and CMSIS-NN) ----
//
// A real multiplier m > 0 is held as an int32 mantissa q in [2^30, 2^31) and a shift s, with
// m ≈ q · 2^(s − 31). Applied to an int32 x (TFLite's MultiplyByQuantizedMultiplier):
//   a = x · 2^max(s, 0)                      (in int32: a multiplier ≥ 1 must not overflow it)
//   h = ⌊(a·q + 2^30) / 2^31⌋                 (2aq / 2^32 to nearest, ties toward +∞: TFLite's
//                                             SaturatingRoundingDoublingHighMul for q ≥ 0)
//   y = h / 2^max(−s, 0), to nearest, ties away from zero   (RoundingDivideByPOT)
// in int64 without branches, so that the loops below vectorize; every backend computes it
// the same way, and a core without a floating-point unit runs it as it is.
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

inline std::int32_t apply(std::int32_t x, std::int32_t q, int shift) {
  const int left = shift > 0 ? shift : 0, right = shift > 0 ? 0 : -shift;
  const std::int64_t a = std::int32_t(std::uint32_t(x) << left);
  const std::int64_t h = (a * q + (std::int64_t(1) << 30)) >> 31;
  return std::int32_t((h + ((std::int64_t(1) << right) >> 1) - (h < 0 && right > 0)) >> right);
}
inline std::int32_t apply(std::int32_t x, Multiplier m) { return apply(x, m.q, m.shift); }

// y[r, c] = clamp(zero + apply(x[r, c], m[c]), lo, hi) for rows × channels entries (per output
// channel multipliers; channels = 1 with one multiplier for a whole tensor).
template <class Out>
inline void requantize(const std::int32_t* x, size_t rows, size_t channels, const Multiplier* m, std::int32_t zero, std::int32_t lo,
                       std::int32_t hi, Out* y) {
  for (size_t r = 0; r < rows; ++r, x += channels, y += channels)
    for (size_t c = 0; c < channels; ++c) {
      const std::int32_t v = zero + apply(x[c], m[c].q, m[c].shift);
      y[c] = Out(v < lo ? lo : v > hi ? hi : v);
    }
}

}  // namespace stformer::kernels
