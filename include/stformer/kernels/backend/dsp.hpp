// stformer kernels' backend: Armv7E-M's DSP instructions (Cortex-M4, M7), chosen when the
// compiler targets them (__ARM_FEATURE_DSP) with -DSTFORMER_SIMD=0; -DSTFORMER_ARM_DSP=0 asks for
// the plain backend instead (the same integers). Floats take one lane (scalar.hpp); the int8
// product takes four products per two SMLADs, and requantization's multiply one SMMULR.
#pragma once

#include "scalar.hpp"

#include <arm_acle.h>

namespace stformer::inline STFORMER_ABI::kernels {

// apply's doubling high multiply: SMMULR(2a, q) = ⌊(2a·q + 2^31) / 2^32⌋ is h in one instruction
// when 2a fits in int32 (|a| < 2^30, as accumulators are); the 64-bit product serves the rest.
[[gnu::always_inline]] inline std::int32_t apply(std::int32_t x, std::int32_t q, int shift) {
  const std::int32_t a = generic::shift_left(x, shift);
  std::int32_t h;
  if (std::uint32_t(a) + (1u << 30) < (1u << 31))
    asm("smmulr %0, %1, %2" : "=r"(h) : "r"(2 * a), "r"(q));
  else
    h = generic::high_mul(a, q);
  return generic::divide_by_pot(h, shift);
}
struct dsp_lane {
  [[gnu::always_inline]] static std::int32_t apply(std::int32_t x, std::int32_t q, int shift) { return kernels::apply(x, q, shift); }
  static constexpr const char* name = "Armv7E-M DSP (SMLAD, SMMULR)";
};
using qv = one_lane_qv<dsp_lane>;
using generic::pack_words;
using generic::lookup_words;
inline constexpr Tuning tuning = one_lane_tuning;

namespace detail {

// SXTB16 spreads bytes 0 and 2 of a word of four int8 (along K) into two int16 halves, and with
// ROR #8 its bytes 1 and 3; SMLAD adds the products of two such halves' pairs to an int32. So
// four products take two SMLADs. A's R rows are spread once, into `spread` ([K/4][R][2] words:
// the 2R words one step of K reads are consecutive), then each row of B (a Cortex-M reads
// unaligned words) is spread as it is read and meets all R rows: per four products of a row and
// a column, 2 SMLADs, plus 2 SXTB16 and a load shared by the R rows. A tile of 4 rows × 1 column
// keeps its 4 sums, B's two halves, the pointers and the loop's end in the core's 14 registers
// (4 × 2 would need 8 sums and 4 halves: spilled).
inline std::int32_t dsp_word(const std::int8_t* p) {
  std::int32_t w;
  std::memcpy(&w, p, 4);
  return w;
}
inline std::int32_t dsp_odd(std::int32_t w) {
  std::int32_t o;
  asm("sxtb16 %0, %1, ror #8" : "=r"(o) : "r"(w));
  return o;
}

// int16 rows of A (a stream read by a layer) take the same form: each four entries a0..a3 as the
// words (a0, a2) and (a1, a3), which meet B's SXTB16 halves (b0, b2) and (b1, b3) alike; their
// sums stay exact in int32 for K ≤ 516 (qmatmul_nt's bound).
template <size_t R, size_t K, class TA>
inline void dsp_spread(const TA* A, size_t lda, std::int32_t* spread) {
  for (size_t k = 0; k < K / 4; ++k)
    for (size_t r = 0; r < R; ++r) {
      if constexpr (std::is_same_v<TA, std::int8_t>) {
        const std::int32_t w = dsp_word(A + r * lda + 4 * k);
        spread[(k * R + r) * 2] = __sxtb16(w), spread[(k * R + r) * 2 + 1] = dsp_odd(w);
      } else {
        const TA* a = A + r * lda + 4 * k;
        const auto pair = [](std::int32_t lo, std::int32_t hi) { return std::int32_t(std::uint32_t(std::uint16_t(lo)) | (std::uint32_t(hi) << 16)); };
        spread[(k * R + r) * 2] = pair(a[0], a[2]), spread[(k * R + r) * 2 + 1] = pair(a[1], a[3]);
      }
    }
}

// s += the four products of a spread word pair at p (then p += 2 words) and B's halves be, bo:
// LDRD and two SMLADs in one asm statement, so that GCC's scheduler cannot hoist every row's
// loads ahead of the sums (8 live words with 4 rows: spilled, at -O2 as at -O3).
[[gnu::always_inline]] inline void dsp_pair(std::int32_t& s, const std::int32_t*& p, std::int32_t be, std::int32_t bo) {
  std::int32_t x, y;
  asm("ldrd %1, %2, [%0], #8\n\tsmlad %3, %1, %5, %3\n\tsmlad %3, %2, %6, %3"
      : "+r"(p), "=&r"(x), "=&r"(y), "+r"(s)
      : "m"(*reinterpret_cast<const std::int32_t(*)[2]>(p)), "r"(be), "r"(bo));
}

// s[r] += Σ_k A[r, k]·b[k] for the R spread rows of A and one row b of B (K entries).
template <size_t R, size_t K, class TA>
[[gnu::always_inline]] inline void dsp_column(const std::int32_t* spread, const TA* A, size_t lda, const std::int8_t* b, std::int32_t (&s)[R]) {
  constexpr size_t KW = K / 4;
  for (size_t k = 0; k < KW; ++k) {
    const std::int32_t w = dsp_word(b + 4 * k), be = __sxtb16(w), bo = dsp_odd(w);
    unrolled<R>([&](auto r) __attribute__((always_inline)) { dsp_pair(s[r], spread, be, bo); });
  }
  for (size_t k = KW * 4; k < K; ++k)
    unrolled<R>([&](auto r) __attribute__((always_inline)) { s[r] += std::int32_t(A[r * lda + k]) * std::int32_t(b[k]); });
}

// R rows of A against all N rows of B, a column of C at a time: out(j, s) receives column j's R
// sums (bias[j] + the products).
template <size_t R, size_t N, size_t K, class TA, class Out>
inline void dsp_rows(const TA* A, size_t lda, const std::int8_t* B, size_t ldb, const std::int32_t* bias, Out&& out) {
  std::int32_t spread[K / 4 * R * 2 + 1];
  dsp_spread<R, K>(A, lda, spread);
  for (size_t j = 0; j < N; ++j) {
    std::int32_t s[R];
    const std::int32_t b0 = bias ? bias[j] : 0;
    unrolled<R>([&](auto r) __attribute__((always_inline)) { s[r] = b0; });
    dsp_column<R, K>(spread, A, lda, B + j * ldb, s);
    out(j, s);
  }
}

// rows(i, R) for the row blocks of M: 4 rows at a time, then the rest.
template <size_t M, class Rows>
[[gnu::always_inline]] inline void dsp_blocks(Rows&& rows) {
  constexpr size_t RB = 4;
  for (size_t i = 0; i + RB <= M; i += RB) rows.template operator()<RB>(i);
  if constexpr (M % RB != 0) rows.template operator()<M % RB>(M / RB * RB);
}

// One column's requantization with its constants computed once: y = apply(x) as the formula
// (backend/common.hpp), h from SMULL's 64-bit product (no branch), the rounding shift with the
// column's mask; the caller adds the zero point with QADD and clamps with SSAT (the same as
// clamping first, without overflow).
struct DspColumn {
  std::int32_t q, left, right, mask, half;
  DspColumn(std::int32_t q_, std::int32_t shift)
      : q(q_), left(shift > 0 ? shift : 0), right(shift > 0 ? 0 : -shift), mask(std::int32_t((std::uint32_t(1) << right) - 1)), half(mask >> 1) {}
  [[gnu::always_inline]] std::int32_t operator()(std::int32_t x) const {
    const std::int32_t h = generic::high_mul(std::int32_t(std::uint32_t(x) << left), q);
    return (h >> right) + ((h & mask) > half + std::int32_t(std::uint32_t(h) >> 31));
  }
};

}  // namespace detail

// int8 or int16 rows of A: 4 rows at a time against every row of B.
template <size_t M, size_t N, size_t K, class TA>
inline size_t dot_rows(const TA* A, size_t lda, const std::int8_t* B, size_t ldb, std::int32_t* C, size_t ldc, const std::int32_t* bias) {
  if constexpr (std::is_same_v<TA, std::int8_t> || std::is_same_v<TA, std::int16_t>) {
    detail::dsp_blocks<M>([&]<size_t R>(size_t i) {
      detail::dsp_rows<R, N, K>(A + i * lda, lda, B, ldb, bias, [&](size_t j, const std::int32_t(&s)[R]) __attribute__((always_inline)) {
        unrolled<R>([&](auto r) __attribute__((always_inline)) { C[(i + r) * ldc + j] = s[r]; });
      });
    });
    return N;
  }
  return 0;
}

// The same product, requantized as each column leaves the registers (int8 or int16 outputs at
// their type's full range; anything else takes the product and int8.hpp's requantize).
template <size_t M, size_t N, size_t K, class TA, class Out>
inline bool fused_rows(const TA* A, size_t lda, const std::int8_t* B, size_t ldb, const std::int32_t* bias, const Requantization& rq, Out* Y) {
  if constexpr ((std::is_same_v<TA, std::int8_t> || std::is_same_v<TA, std::int16_t>) &&
                (std::is_same_v<Out, std::int8_t> || std::is_same_v<Out, std::int16_t>)) {
    if (rq.lo != std::numeric_limits<Out>::min() || rq.hi != std::numeric_limits<Out>::max()) return false;
    // copies, not references: the epilogue's constants stay in registers
    const std::int32_t *q = rq.q, *shifts = rq.shift, zero = rq.zero;
    const size_t step = rq.per_channel ? 1 : 0;
    detail::dsp_blocks<M>([=]<size_t R>(size_t i) {
      detail::dsp_rows<R, N, K>(A + i * lda, lda, B, ldb, bias, [=](size_t j, const std::int32_t(&s)[R]) __attribute__((always_inline)) {
        const detail::DspColumn col(q[j * step], shifts[j * step]);
        unrolled<R>([&](auto r) __attribute__((always_inline)) {
          const std::int32_t y = __qadd(col(s[r]), zero);
          Y[(i + r) * N + j] = Out(sizeof(Out) == 1 ? __ssat(y, 8) : __ssat(y, 16));
        });
      });
    });
    return true;
  }
  return false;
}

}  // namespace stformer::kernels
