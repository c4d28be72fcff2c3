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
//   attend_cached_q8: one query over a decoding pass's int8 cache, the causal pass's integers
//
// The product is written once over a small integer vector type, qv, from the build's backend
// (kernels/backend/, chosen by core/config.hpp): a vector of int32 accumulators, `lanes` wide, to
// which dot(acc, a, b) adds, for each lane l, the G products a[g]·b[l·G + g] of a group of G
// consecutive entries along K. A's group is broadcast to every lane (4 bytes: four int8, or two
// int16), B is packed in panels [K/G][NP][G] (NP = NV·lanes columns), so that, as in matmul_nt,
// a register tile of R rows × NV vectors needs no horizontal sums. The backends:
//   avx512   G = 4, vpdpbusd (unsigned × signed bytes) with VNNI: A is offset by +128 to
//            unsigned and 128·Σ_k B[n,k] subtracted at the end (exact); else G = 2, vpmaddwd
//   avx2     G = 2, vpmaddwd on int16 (A and B widened once, when packed)
//   neon     G = 4, sdot with the dot-product extension; otherwise G = 1, vmlal on int16
//   dsp      dot products along K, four products per two SMLADs (dot_rows)
//   helium   dot products along K, 16 per VMLADAVA (dot_rows); its qv requantizes four
//            channels at a time
//   plain    one lane: a dot product at a time
// Each backend may take rows itself (dot_rows: int16 rows on x86, NEON and the Cortex-M DSP, every
// int8 row on the Cortex-M backends) and pack part of a panel (pack_words); this file's loops do the rest.
// Every partial sum is exact in int32 for K < 2^17 (|a·b| ≤ 128·127), so no order of summation
// changes a result.
#pragma once

#include "vec.hpp"

#include <algorithm>
#include <bit>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace stformer::inline STFORMER_ABI::kernels {

// ---- requantization (fixed point, as TFLite Micro and CMSIS-NN) ----
//
// A real multiplier m > 0 is held as an int32 mantissa q in [2^30, 2^31) and a shift s, with
// m ≈ q · 2^(s − 31). Applied to an int32 x (TFLite's MultiplyByQuantizedMultiplier):
//   a = x · 2^max(s, 0)                      (in int32: a multiplier ≥ 1 must not overflow it)
//   h = ⌊(a·q + 2^30) / 2^31⌋                 (2aq / 2^32 to nearest, ties toward +∞: TFLite's
//                                             SaturatingRoundingDoublingHighMul for q ≥ 0)
//   y = h / 2^max(−s, 0), to nearest, ties away from zero   (RoundingDivideByPOT)
// The backend's apply(x, q, shift) computes it on one int32 without branches (backend/common.hpp),
// qv::apply lane by lane on vectors (each backend's own instructions, the same integers), and a
// core without a floating-point unit runs it as it is.
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

namespace detail {

// C[i, j] = bias[j] + Σ_k A[i, k]·B[j, k]: the backend's dot_rows takes the columns it can, then
// one dot product at a time (the plain backend's product, and int16 rows' where no backend takes them).
template <size_t M, size_t N, size_t K, class TA>
inline void dot_products(const TA* A, size_t lda, const std::int8_t* B, size_t ldb, std::int32_t* C, size_t ldc, const std::int32_t* bias) {
  const size_t j0 = dot_rows<M, N, K>(A, lda, B, ldb, C, ldc, bias);  // B's rows [0, j0), for every row of A
  for (size_t i = 0; i < M; ++i)
    for (size_t j = j0; j < N; ++j) {
      std::int32_t s = bias ? bias[j] : 0;
      for (size_t k = 0; k < K; ++k) s += std::int32_t(A[i * lda + k]) * std::int32_t(B[j * ldb + k]);
      C[i * ldc + j] = s;
    }
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
// row of B. The backend's pack_words may pack a part first (x86: 8 columns × 8 groups at a time).
template <size_t NP>
inline void pack_panel(const std::int8_t* B, size_t ldb, size_t cols, size_t kn, size_t kg, const std::int32_t* bias, qv::qb* panel,
                       std::int32_t* add) {
  constexpr size_t G = qv::G;
  const PackedPart done = pack_words<NP>(B, ldb, cols, kn, panel);
  const size_t j = done.cols, g8 = done.groups;
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
// ld lda, ldb), C int32 (ld ldc). Backends with panels (tuning.q_panels: x86, NEON) take up to
// MC rows of A at a time and K in blocks of at most KC: each block of those rows is prepared once
// (offset and widened), then B's columns are packed in panels of NP (pack_panel) that meet every
// tile of TR rows. All on the stack. The others take dot products (dot_products). The result is
// exact on every backend.
template <size_t M, size_t N, size_t K>
inline void qmatmul_nt(const std::int8_t* A, size_t lda, const std::int8_t* B, size_t ldb, std::int32_t* C, size_t ldc,
                       const std::int32_t* bias = nullptr) {
  if constexpr (!tuning.q_panels) {
    detail::dot_products<M, N, K>(A, lda, B, ldb, C, ldc, bias);
  } else {
    constexpr size_t L = qv::lanes, G = qv::G, NVmax = tuning.q_panel_vectors;
    constexpr size_t NV = (N + L - 1) / L < NVmax ? (N + L - 1) / L : NVmax, NP = NV * L, TR = tuning.q_tile_rows;
    constexpr size_t KC = K < tuning.q_block_k ? K : tuning.q_block_k, KGC = (KC + G - 1) / G;  // a block: KC entries of K in KGC groups
    constexpr size_t MC = TR * ((64 + TR - 1) / TR), RA = M < MC ? M : MC;  // rows of A at a time: 64 in one chunk
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

// 2^(−f/256) in Q15 for f = 0 … 255 (exp2_neg, at compile time): 32-bit entries (1 KB), so
// that the loops that read it vectorize with gathers, and as 16-bit words (32768 = 1) for the
// backends that look them up in registers (tuning.q_lookup_words).
inline constexpr auto exp2_q15 = [] {
  struct {
    std::uint32_t v[256];
  } t{};
  for (int f = 0; f < 256; ++f) t.v[f] = std::uint32_t(exp2_neg(f << 8));
  return t;
}();
inline constexpr auto exp2_q15_words = [] {
  struct {
    std::uint16_t v[256];
  } t{};
  for (int f = 0; f < 256; ++f) t.v[f] = std::uint16_t(exp2_q15.v[f]);
  return t;
}();

namespace detail {
// u_j and e_j of softmax_u8 for a row whose largest score is mx (> INT32_MIN).
struct Octaves {
  std::int32_t e15;  // E = e15 · 2^(shift − 15), e15 in [2^14, 2^15)
  int a, k;          // d·e15 < 2^31, and 2^16 steps still reach 16 octaves
  std::uint32_t umx;
  Octaves(std::int32_t mx, Multiplier exponent) : e15(exponent.q >> 16), umx(std::uint32_t(mx)) {
    const int K = 15 - std::min(exponent.shift, 14);  // ≥ 1
    a = K > 17 ? K - 17 : 0, k = K - a;
  }
  std::int32_t operator()(std::int32_t xj) const {  // u_j
    const std::int32_t d = std::int32_t(std::min<std::uint32_t>((umx - std::uint32_t(xj)) >> a, 65535));
    return std::min<std::int32_t>((d * e15 + (1 << (k - 1))) >> k, 16 * 256);
  }
  static std::int32_t numerator(std::int32_t t, std::int32_t u) {  // e_j from u_j and the table's entry t for u_j mod 256
    const std::int32_t n = u >> 8;
    return (t * 255 + (1 << (14 + n))) >> (15 + n);
  }
};
// The row's largest score, then numerators(octaves) writes p and returns Σ_j e_j; every key
// masked: p all −128, 0.
template <class Numerators>
[[gnu::always_inline]] inline std::int32_t softmax_u8(const std::int32_t* x, size_t n, Multiplier exponent, std::int8_t* p,
                                                      Numerators&& numerators) {
  std::int32_t mx = INT32_MIN;
  for (size_t j = 0; j < n; ++j) mx = std::max(mx, x[j]);
  if (mx == INT32_MIN) {
    std::fill_n(p, n, std::int8_t(-128));
    return 0;
  }
  return numerators(Octaves(mx, exponent));
}
}  // namespace detail

// The softmax's numerators in 8 bits for the C scores x of one query row (int32, masked keys
// at INT32_MIN): e_j = 255 · 2^(−u_j/256) with u_j ≈ (max − x_j)·E in 1/256 octaves, E the
// exponent's multiplier (the scores' scale times log2(e)·256, at most 2^13), from the table
// above (2^(−f/256), f = u_j mod 256, in Q15) and a shift by ⌊u_j/256⌋, rounded: within 0.85
// of a step (u to 1/256 octave, then e to the nearest integer); 0 from 16 octaves on. All in
// int32 so that the loop vectorizes: E's top 15 bits e15 and u_j = ⌊(d_j·e15 + ½·2^k) / 2^k⌋ on
// d_j = min((max − x_j) / 2^a, 2^16 − 1), a and k from E's shift (a > 0 only where a unit of
// the scores is below a quarter of a step, and then costs less than a quarter of a step).
// Written as p_j = e_j − 128 (int8: A·V is then a product of int8 rows, the 128 added back
// through its bias); masked keys get e_j = 0 (a difference past 2^16 steps). Returns Σ_j e_j, 0
// when every key is masked.
// (n known at run time: a decoding step's keys. The table's entries by loads; e_j the same
// integers as softmax_u8<C>'s, which follows.)
inline std::int32_t softmax_u8(const std::int32_t* x, size_t n, Multiplier exponent, std::int8_t* p) {
  return detail::softmax_u8(x, n, exponent, p, [&](const detail::Octaves& octaves) {
    std::int32_t sum = 0;
    for (size_t j = 0; j < n; ++j) {
      const std::int32_t u = octaves(x[j]), e = detail::Octaves::numerator(std::int32_t(exp2_q15.v[u & 255]), u);
      p[j] = std::int8_t(e - 128);
      sum += e;
    }
    return sum;
  });
}

template <size_t C>
inline std::int32_t softmax_u8(const std::int32_t* x, Multiplier exponent, std::int8_t* p) {
  if constexpr (!tuning.q_lookup_words) {  // one loop: the table's entries by loads, or gathers where it vectorizes
    return softmax_u8(x, C, exponent, p);
  } else {  // S keys at a time: u_j, then the table's entries (lookup_words), then e_j
    return detail::softmax_u8(x, C, exponent, p, [&](const detail::Octaves& octaves) {
      // the sum of these keys' e_j; the output pointer and the sum in locals, as int8 stores may
      // alias anything the lambda reaches by reference (and the loop would not vectorize)
      auto keys = [&]<size_t S>(size_t j0) {
        std::int32_t u[S], t[S], s = 0;
        for (size_t j = 0; j < S; ++j) u[j] = octaves(x[j0 + j]), t[j] = u[j] & 255;
        lookup_words<S>(exp2_q15_words.v, t, t);
        std::int8_t* const out = p + j0;
        for (size_t j = 0; j < S; ++j) {
          const std::int32_t e = detail::Octaves::numerator(t[j], u[j]);
          out[j] = std::int8_t(e - 128);
          s += e;
        }
        return s;
      };
      std::int32_t sum = 0;
      constexpr size_t S = 64;
      for (size_t j0 = 0; j0 + S <= C; j0 += S) sum += keys.template operator()<S>(j0);
      if constexpr (C % S != 0) sum += keys.template operator()<C % S>(C / S * S);
      return sum;
    });
  }
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
    for (size_t c = whole; c < channels; ++c) y[c] = requantize_entry<Out>(x[c], q[c], shift[c], zero, lo, hi);
  }
}

// The same for n entries under one multiplier m (a row's: ScaleNorm's g/‖x‖, softmax's V/Σe).
template <class Out>
inline void requantize(const std::int32_t* x, size_t n, Multiplier m, std::int32_t zero, std::int32_t lo, std::int32_t hi, Out* y) {
  constexpr size_t L = qv::lanes;
  std::int32_t q[L], shift[L];
  std::fill_n(q, L, m.q), std::fill_n(shift, L, std::int32_t(m.shift));
  const qv qq = qv::load_acc(q), ss = qv::load_acc(shift);
  const size_t whole = n / L * L;  // entries in whole vectors
  for (size_t c = 0; c < whole; c += L) store_as(y + c, qv::clamp_add(qv::apply(qv::load_acc(x + c), qq, ss), zero, lo, hi));
  for (size_t c = whole; c < n; ++c) y[c] = requantize_entry<Out>(x[c], m.q, m.shift, zero, lo, hi);
}

// One query over n cached int8 keys and values (a decoding step's head in integers), both held
// transposed (kt, vt [Dh, ld]: position j in column j):
//   x_j = Σ_c q_c kᵀ[c, j] (int32),  e_j, Σ_j e_j by softmax_u8 (x: int32 [n], p: int8 [n])
//   o_c = clamp(apply(Σ_j e_j vᵀ[c, j], V / Σ_j e_j), int8)
// The integers of the causal pass's row n − 1 (QMultiHeadAttention::attend): there the keys
// past it get e = 0, and Σ_j (e_j − 128) v_j + 128·Σ_j v_j is Σ_j e_j v_j. o [Dh] is written
// after q is read (o may be q).
template <size_t Dh>
inline void attend_cached_q8(const std::int8_t* q, const std::int8_t* kt, const std::int8_t* vt, size_t ld, size_t n, Multiplier exponent,
                             Multiplier values, std::int32_t* x, std::int8_t* p, std::int8_t* o) {
  // a key at a time, its Dh features' products in one sum (q in registers); F features of the
  // values at a time (F sums in registers: a Cortex-M's 13 hold 4 and the loop's pointers)
  std::int32_t qc[Dh];
  for (size_t c = 0; c < Dh; ++c) qc[c] = q[c];
  for (size_t j = 0; j < n; ++j) {
    std::int32_t s = 0;
    for (size_t c = 0; c < Dh; ++c) s += qc[c] * std::int32_t(kt[c * ld + j]);
    x[j] = s;
  }
  const std::int32_t sum = softmax_u8(x, n, exponent, p);
  constexpr size_t F = Dh % 4 == 0 ? 4 : Dh % 2 == 0 ? 2 : 1;
  std::int32_t acc[Dh];
  for (size_t c0 = 0; c0 < Dh; c0 += F) {
    std::int32_t a[F] = {};
    for (size_t j = 0; j < n; ++j) {
      const std::int32_t e = std::int32_t(p[j]) + 128;
      for (size_t u = 0; u < F; ++u) a[u] += e * std::int32_t(vt[(c0 + u) * ld + j]);
    }
    for (size_t u = 0; u < F; ++u) acc[c0 + u] = a[u];
  }
  requantize(acc, Dh, divide(values, std::uint32_t(sum)), 0, -128, 127, o);
}

// Y[M,N] = clamp(zero + apply(A·Bᵀ + bias, q[c], shift[c]), lo, hi) for each output column c,
// or one multiplier for all (rq.per_channel false: a batch matmul's): QLinear's layer.
// Backends that requantize in the product's registers (fused_rows: DSP, Helium) write Y
// directly; the others take the product into the scratch C [M, N] (int32), then requantize it.
// The same integers either way. Y may be A (a layer in place, In = Out: an attention's
// queries); then the product is taken first, as the fused tiles read A while they write Y.
template <size_t M, size_t N, size_t K, class TA, class Out>
inline void qlinear(const TA* A, size_t lda, const std::int8_t* B, size_t ldb, const std::int32_t* bias, const Requantization& rq, Out* Y,
                    std::int32_t* C) {
  if (static_cast<const void*>(Y) != static_cast<const void*>(A) && fused_rows<M, N, K>(A, lda, B, ldb, bias, rq, Y)) return;
  qmatmul_nt<M, N, K>(A, lda, B, ldb, C, N, bias);
  if (rq.per_channel)
    requantize(C, M, N, rq.q, rq.shift, rq.zero, rq.lo, rq.hi, Y);
  else
    requantize(C, M * N, Multiplier{rq.q[0], int(rq.shift[0])}, rq.zero, rq.lo, rq.hi, Y);
}

}  // namespace stformer::kernels
