// The int8 kernels against naive integer loops: the product exact on awkward sizes (K across
// the kernel's blocks, columns past its panels, rows past its tiles, strides), the extremes of
// int8, and requantization exact against TFLite's formula as gemmlowp writes it. Built once
// per backend (meson: the configured one, plain C++, and AVX-512 VNNI or NEON sdot where the
// compiler targets them), so every backend is held to the same integers.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include <stformer/kernels/int8.hpp>
#include <stformer/core/rng.hpp>

namespace k = stformer::kernels;
using std::size_t;

namespace {

template <class T>
std::vector<T> random_ints(size_t n, stformer::Rng& rng) {
  constexpr std::int64_t span = std::int64_t(1) << (8 * sizeof(T));
  std::vector<T> v(n);
  for (auto& x : v) x = T(std::int64_t(rng.below(std::uint64_t(span))) - span / 2);
  return v;
}

// A [M, K] (TA) · B [N, K]ᵀ (TB): int8 · int8 (the backend's kernel), or int16 · int8 (a plain
// loop); with TB = int16, A · B [K, N] (qmatmul_nn).
template <size_t M, size_t N, size_t K, class TA = std::int8_t, class TB = std::int8_t>
void check_product(size_t pad, bool bias, bool extremes) {
  stformer::Rng rng(M * 1000003 + N * 1009 + K + pad + 7 * sizeof(TA) + 11 * sizeof(TB), 5);
  const size_t lda = K + pad, ldb = K + 2 * pad, ldc = N + pad;
  constexpr bool nn = sizeof(TB) == 2;  // B [K, N], ld ldbn ≥ N: qmatmul_nn
  const size_t ldbn = N + 2 * pad;
  auto A = random_ints<TA>(M * lda, rng);
  auto B = random_ints<TB>(nn ? K * ldbn : N * ldb, rng);
  if (extremes) {  // the largest products: −128 · −128 is not in symmetric weights, but −128 · 127 is
    for (auto& a : A) a = a < 0 ? std::numeric_limits<TA>::min() : std::numeric_limits<TA>::max();
    for (auto& b : B) b = b < 0 ? -std::numeric_limits<TB>::max() : std::numeric_limits<TB>::max();
  }
  std::vector<std::int32_t> bv(N);
  for (auto& x : bv) x = std::int32_t(rng.below(1 << 20)) - (1 << 19);
  std::vector<std::int32_t> C(M * ldc, 12345);
  if constexpr (nn) {
    k::qmatmul_nn<M, N, K>(A.data(), lda, B.data(), ldbn, C.data(), ldc, bias ? bv.data() : nullptr);
  } else {
    k::qmatmul_nt<M, N, K>(A.data(), lda, B.data(), ldb, C.data(), ldc, bias ? bv.data() : nullptr);
  }
  size_t wrong = 0;
  for (size_t i = 0; i < M; ++i)
    for (size_t j = 0; j < N; ++j) {
      std::int64_t s = bias ? bv[j] : 0;
      for (size_t kk = 0; kk < K; ++kk) s += std::int64_t(A[i * lda + kk]) * (nn ? B[kk * ldbn + j] : B[j * ldb + kk]);
      wrong += C[i * ldc + j] != s;
    }
  for (size_t i = 0; i < M; ++i)  // the padding between rows is left alone
    for (size_t j = N; j < ldc; ++j) wrong += C[i * ldc + j] != 12345;
  INFO("M=", M, " N=", N, " K=", K, " pad=", pad, " bias=", bias, " extremes=", extremes, " A, B bytes ", sizeof(TA), ", ", sizeof(TB),
       " backend: ", std::string(k::qv::name()));
  CHECK(wrong == 0);
}

// The reference: TFLite's MultiplyByQuantizedMultiplier as gemmlowp writes it
// (SaturatingRoundingDoublingHighMul, then RoundingDivideByPOT), with its branches.
std::int32_t srdhm(std::int32_t a, std::int32_t b) {
  if (a == b && a == INT32_MIN) return INT32_MAX;
  const std::int64_t ab = std::int64_t(a) * std::int64_t(b);
  const std::int64_t nudge = ab >= 0 ? (1 << 30) : 1 - (1 << 30);
  return std::int32_t((ab + nudge) / (std::int64_t(1) << 31));
}

std::int32_t rdbp(std::int32_t x, int e) {
  const std::int32_t mask = std::int32_t((std::int64_t(1) << e) - 1), remainder = x & mask;
  const std::int32_t threshold = (mask >> 1) + (x < 0 ? 1 : 0);
  return (x >> e) + (remainder > threshold ? 1 : 0);
}

std::int32_t reference(std::int32_t x, k::Multiplier m) {
  const int left = m.shift > 0 ? m.shift : 0, right = m.shift > 0 ? 0 : -m.shift;
  return rdbp(srdhm(x * (1 << left), m.q), right);
}

// ⌊√n⌋, bit by bit: the reference of divide_by_root.
std::uint32_t isqrt(std::uint64_t n) {
  std::uint64_t r = 0, bit = std::uint64_t(1) << 62;
  while (bit > n) bit >>= 2;
  for (; bit != 0; bit >>= 2) {
    if (n >= r + bit) {
      n -= r + bit;
      r = (r >> 1) + bit;
    } else {
      r >>= 1;
    }
  }
  return std::uint32_t(r);
}

}  // namespace

TEST_CASE("qmatmul_nt is exact against the integer loop on every size") {
  MESSAGE("int8 backend: ", std::string(k::qv::name()), ", groups of ", k::qv::G, ", ", k::qv::lanes, " lanes");
  for (bool bias : {false, true})
    for (size_t pad : {0, 3}) {
      check_product<1, 1, 1>(pad, bias, false);
      check_product<3, 5, 7>(pad, bias, false);
      check_product<7, 17, 33>(pad, bias, false);
      check_product<50, 16, 16>(pad, bias, false);
      check_product<25, 64, 16>(pad, bias, false);
      check_product<25, 16, 64>(pad, bias, false);
      check_product<13, 70, 257>(pad, bias, false);  // K over one block (256) by one
      check_product<9, 33, 600>(pad, bias, false);
      check_product<1, 130, 2>(pad, bias, false);
      check_product<64, 24, 40>(pad, bias, false);    // one chunk of A (66 rows: 11 tiles of 6), ending in a part of a tile
      check_product<70, 24, 40>(pad, bias, false);    // rows over one chunk
      check_product<140, 40, 300>(pad, bias, false);  // two chunks and a part, K over one block
    }
  check_product<11, 37, 1000>(1, true, true);  // sums near ±128·127·1000
}

TEST_CASE("qmatmul_nt with int16 rows (A), qmatmul_nn with int16 B: exact against the integer loop, up to their bounds on K") {
  for (bool bias : {false, true}) {
    check_product<3, 5, 7, std::int16_t>(2, bias, false);
    check_product<25, 64, 16, std::int16_t>(0, bias, false);
    check_product<3, 37, 45, std::int16_t>(2, bias, false);  // x86: 8 rows of B at a time, then 5; 2 vectors of K, then 13
    check_product<3, 5, 7, std::int8_t, std::int16_t>(2, bias, false);
    check_product<16, 16, 50, std::int8_t, std::int16_t>(1, bias, false);
    check_product<1, 50, 16, std::int8_t, std::int16_t>(3, bias, false);
  }
  check_product<4, 6, 516, std::int16_t>(1, false, true);               // sums near ±32768·127·516
  check_product<2, 19, 516, std::int16_t>(1, false, true);              // the same through the vector path
  check_product<4, 6, 511, std::int8_t, std::int16_t>(1, false, true);  // near ±128·32767·511
}

TEST_CASE("requantization is the formula, exactly") {
  stformer::Rng rng(11, 3);
  const std::int32_t edges[] = {0, 1, -1, 2, -2, 3, -3, INT32_MAX, INT32_MIN, INT32_MIN + 1, 1 << 30, -(1 << 30), 12345678, -12345678};
  size_t wrong = 0, n = 0;
  for (int shift = -31; shift <= 0; ++shift)
    for (std::int32_t q : {std::int32_t(1) << 30, (std::int32_t(1) << 30) + 1, INT32_MAX, 1518500250, 0}) {
      for (std::int32_t x : edges) wrong += k::apply(x, {q, shift}) != reference(x, {q, shift}), ++n;
      for (int t = 0; t < 200; ++t) {
        const std::int32_t x = std::int32_t(rng.next_u32());
        wrong += k::apply(x, {q, shift}) != reference(x, {q, shift}), ++n;
      }
    }
  for (int shift = 1; shift <= 8; ++shift)  // multipliers ≥ 1: x · 2^shift must fit in int32
    for (int t = 0; t < 500; ++t) {
      const std::int32_t x = std::int32_t(rng.next_u32()) >> (shift + 1), q = std::int32_t((1u << 30) + rng.below(1u << 30));
      wrong += k::apply(x, {q, shift}) != reference(x, {q, shift}), ++n;
    }
  INFO(wrong, " of ", n, " differ");
  CHECK(wrong == 0);
}

TEST_CASE("a real multiplier as mantissa and shift: x·m rounded, within one") {
  stformer::Rng rng(12, 3);
  for (double m : {1e-9, 3.3e-6, 0.000123, 0.0078125, 0.3, 0.5, 0.7071, 0.99999999, 1.0, 1.5, 3.75, 100.0}) {
    const k::Multiplier q = k::quantize_multiplier(m);
    INFO("m=", m, " q=", q.q, " shift=", q.shift);
    CHECK(q.q >= (1 << 30));
    CHECK(std::abs(std::ldexp(double(q.q), q.shift - 31) / m - 1) < 1e-9);
    for (int t = 0; t < 1000; ++t) {
      const std::int32_t x = std::int32_t(rng.next_u32()) / (m >= 1 ? std::int32_t(4 * m) + 1 : 1);
      CHECK(std::abs(double(k::apply(x, q)) - std::round(double(x) * m)) <= 1.0);
    }
  }
  CHECK(k::quantize_multiplier(0.0).q == 0);
}

TEST_CASE("requantize: the formula on vectors of channels, the zero point added, clamped") {
  stformer::Rng rng(13, 3);
  constexpr size_t rows = 5, channels = 37;  // whole vectors of channels and a tail
  std::vector<std::int32_t> q(channels), shift(channels), x(rows * channels);
  for (size_t c = 0; c < channels; ++c) {
    const auto m = k::quantize_multiplier(c % 5 == 0 ? 1.0 + 7 * rng.uniform() : std::ldexp(0.5 + 0.5 * rng.uniform(), -int(rng.below(32))));
    q[c] = m.q, shift[c] = m.shift;
  }
  for (size_t i = 0; i < x.size(); ++i) {  // edges of int32 where the shift leaves room, else random
    const size_t c = i % channels;
    const std::int32_t v = i % 7 == 0 ? INT32_MAX : i % 7 == 1 ? INT32_MIN : std::int32_t(rng.next_u32());
    x[i] = shift[c] > 0 ? v >> (shift[c] + 1) : v;
  }
  std::vector<std::int32_t> wide(x.size());
  std::vector<std::int8_t> narrow(x.size());
  std::vector<std::int16_t> half_wide(x.size());
  k::requantize(x.data(), rows, channels, q.data(), shift.data(), 0, INT32_MIN, INT32_MAX, wide.data());
  k::requantize(x.data(), rows, channels, q.data(), shift.data(), -3, -128, 127, narrow.data());
  k::requantize(x.data(), rows, channels, q.data(), shift.data(), 5, -32768, 32767, half_wide.data());
  size_t wrong = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const std::int32_t want = reference(x[i], {q[i % channels], shift[i % channels]});
    wrong += wide[i] != want;
    wrong += int(narrow[i]) != std::clamp(want - 3, -128, 127);
    wrong += int(half_wide[i]) != std::clamp(std::int64_t(want) + 5, std::int64_t(-32768), std::int64_t(32767));
  }
  INFO(wrong, " of ", 3 * x.size(), " differ; backend ", std::string(k::qv::name()));
  CHECK(wrong == 0);

  const std::int32_t y[] = {-1000000, -300, -1, 0, 1, 300, 1000000, 255};
  const k::Multiplier half = k::quantize_multiplier(0.5);
  const std::int32_t hq[8] = {half.q, half.q, half.q, half.q, half.q, half.q, half.q, half.q}, hs[8] = {};
  std::int8_t out[8];
  k::requantize(y, 1, 8, hq, hs, 3, -128, 127, out);
  const int want[] = {-128, -128, 3, 3, 4, 127, 127, 127};  // -150 + 3 clamps
  for (int i = 0; i < 8; ++i) CHECK(int(out[i]) == want[i]);
}

// qlinear's Y = clamp(zero + apply(A·Bᵀ + bias, M_c), lo, hi) against the formula on the integer
// loop's sums, per channel or one multiplier, and in place (Y = A).
template <size_t M, size_t N, size_t K, class Out>
void check_qlinear(bool per_channel, bool in_place) {
  stformer::Rng rng(M * 7919 + N * 31 + K + per_channel + 2 * in_place + sizeof(Out), 9);
  auto A = random_ints<std::int8_t>(M * K, rng), B = random_ints<std::int8_t>(N * K, rng);
  for (auto& b : B) b = std::max<std::int8_t>(b, -127);  // symmetric weights
  std::vector<std::int32_t> bias(N), q(N), shift(N);
  for (size_t c = 0; c < N; ++c) {  // outputs from a few steps to past the clamp
    bias[c] = std::int32_t(rng.below(1 << 16)) - (1 << 15);
    const auto m = k::quantize_multiplier(std::ldexp(0.5 + 0.5 * rng.uniform(), -int(10 + rng.below(6))));
    q[c] = m.q, shift[c] = m.shift;
  }
  const std::int32_t zero = -3, lo = std::numeric_limits<Out>::min(), hi = std::numeric_limits<Out>::max();
  const k::Requantization rq{q.data(), shift.data(), zero, lo, hi, per_channel};
  std::vector<Out> Y(M * N);
  std::vector<std::int32_t> C(M * N);
  if constexpr (std::is_same_v<Out, std::int8_t> && N == K) {
    if (in_place) {
      std::copy(A.begin(), A.end(), Y.begin());
      k::qlinear<M, N, K>(Y.data(), K, B.data(), K, bias.data(), rq, Y.data(), C.data());
    }
  }
  if (!in_place) k::qlinear<M, N, K>(A.data(), K, B.data(), K, bias.data(), rq, Y.data(), C.data());
  size_t wrong = 0;
  for (size_t i = 0; i < M; ++i)
    for (size_t j = 0; j < N; ++j) {
      std::int64_t s = bias[j];
      for (size_t kk = 0; kk < K; ++kk) s += std::int64_t(A[i * K + kk]) * B[j * K + kk];
      const size_t c = per_channel ? j : 0;
      wrong += Y[i * N + j] != std::clamp(reference(std::int32_t(s), {q[c], shift[c]}) + zero, lo, hi);
    }
  INFO("M=", M, " N=", N, " K=", K, " per channel ", per_channel, " in place ", in_place, " out bytes ", sizeof(Out), "; backend ",
       std::string(k::qv::name()));
  CHECK(wrong == 0);
}

TEST_CASE("qlinear: the product requantized per channel or with one multiplier, and in place") {
  for (bool per_channel : {true, false}) {
    check_qlinear<50, 16, 16, std::int8_t>(per_channel, false);
    check_qlinear<13, 37, 300, std::int8_t>(per_channel, false);  // a part of a vector of columns, K over one block
    check_qlinear<70, 70, 40, std::int16_t>(per_channel, false);  // rows over one chunk of A
    check_qlinear<64, 64, 64, std::int8_t>(per_channel, true);    // in place
  }
}

TEST_CASE("integer square root, exactly") {
  stformer::Rng rng(14, 3);
  for (std::uint64_t n : {std::uint64_t(0), std::uint64_t(1), std::uint64_t(2), std::uint64_t(3), std::uint64_t(4), std::uint64_t(99),
                          (std::uint64_t(1) << 62) - 1, std::uint64_t(1) << 62, ~std::uint64_t(0)}) {
    const std::uint64_t r = isqrt(n);
    CHECK((r * r <= n && n - r * r < 2 * r + 1));  // r² ≤ n < (r + 1)²
  }
  for (int t = 0; t < 20000; ++t) {
    const std::uint64_t n = (std::uint64_t(rng.next_u32()) << 32 | rng.next_u32()) >> rng.below(64);
    const std::uint64_t r = isqrt(n);
    REQUIRE((r * r <= n && n - r * r < 2 * r + 1));
  }
}

TEST_CASE("m / d and m / √ss as multipliers: within 2^−29 and 2^−26 of the real quotients, 0 below 2^−32") {
  stformer::Rng rng(15, 3);
  for (int t = 0; t < 20000; ++t) {
    const k::Multiplier m = k::quantize_multiplier(std::ldexp(0.5 + 0.5 * rng.uniform(), int(rng.below(40)) - 20));
    const double real_m = std::ldexp(double(m.q), m.shift - 31);
    const std::uint64_t d = 1 + ((std::uint64_t(rng.next_u32()) << 30) >> rng.below(62));
    const k::Multiplier q = k::divide(m, d);
    INFO("m=", real_m, " d=", d);
    if (real_m / double(d) < std::ldexp(1.0, -32)) {  // no int32 survives it: {0, 0}
      REQUIRE(q.q == 0);
    } else {
      REQUIRE(q.q >= (1 << 30));
      REQUIRE(std::abs(std::ldexp(double(q.q), q.shift - 31) / (real_m / double(d)) - 1) < std::ldexp(1.0, -29));
    }
    const std::uint64_t ss = t < 64 ? ~std::uint64_t(0) >> t : (std::uint64_t(rng.next_u32()) << 32 | rng.next_u32()) >> rng.below(64);
    if (ss == 0) continue;
    const k::Multiplier r = k::divide_by_root(m, ss);
    // the real quotient from the exact integer root: m / √ss with √ss = isqrt(ss·4^e)/2^e
    int e = 0;
    while (e < 31 && (ss >> 62) == 0 && (ss << 2 * e) >> 62 == 0) ++e;
    const double root = std::ldexp(double(isqrt(ss << 2 * e)), -e);
    const double want = real_m / root;
    INFO("ss=", ss);
    if (want < std::ldexp(1.0, -32)) {
      REQUIRE(r.q == 0);
      continue;
    }
    REQUIRE(r.q >= (1 << 30));
    REQUIRE(std::abs(std::ldexp(double(r.q), r.shift - 31) / want - 1) < std::ldexp(1.0, -26));
  }
  CHECK(k::divide({1 << 30, 0}, 0).q == 0);
  CHECK(k::divide_by_root({1 << 30, 0}, 0).q == 0);
}

TEST_CASE("the integer exponential: 2^(−u/2^16) in Q15, rounded, 0 from 2^−16 on") {
  for (std::int32_t u = 0; u < (17 << 16); u += 7) {
    const double want = 32768.0 * std::exp2(-double(u) / 65536.0);
    const std::int32_t got = k::exp2_neg(u);
    if (u >= (16 << 16)) {
      REQUIRE(got == 0);
    } else {
      INFO("u=", u, " got ", got, " want ", want);
      REQUIRE(std::abs(got - want) <= 0.51);  // rounded to nearest, from within 2^−22 (0.008 steps)
    }
  }
  CHECK(k::exp2_neg(0) == 32768);
  CHECK(k::exp2_neg(1 << 16) == 16384);
}

TEST_CASE("softmax_u8: 255·2^(−Δ) over the row's maximum within 0.85 of a step, as e − 128; masked keys 0, all masked 0") {
  const k::Multiplier unit = k::quantize_multiplier(256.0);  // u = the difference in 1/256 octaves
  const std::int32_t x[7] = {10, 9, INT32_MIN, 7, 10, -2000000000, 2};
  std::int8_t p[7];
  const std::int32_t sum = k::softmax_u8<7>(x, unit, p);
  const int want[7] = {255, 128, 0, 32, 255, 0, 1};  // 255·2^−Δ: 255, 127.5, masked, 31.9, 255, 0, 0.996
  int total = 0;
  for (int j = 0; j < 7; ++j) {
    CHECK(int(p[j]) + 128 == want[j]);
    total += want[j];
  }
  CHECK(sum == total);
  for (std::int32_t d = 0; d < (10 << 16); d += 37) {  // every difference, in 1/65536 octaves
    const std::int32_t row[2] = {0, -d};
    std::int8_t e[2];
    k::softmax_u8<2>(row, k::quantize_multiplier(1.0 / 256), e);
    INFO("difference ", d);
    REQUIRE(std::abs(int(e[1]) + 128 - 255 * std::exp2(-double(d) / 65536)) < 0.85);
  }
  // rows of every length class (whole and partial vectors of the table's look-ups) against the
  // formula entry by entry, with exp2_neg for the table
  auto check_row = [&]<size_t C>(double scale) {
    stformer::Rng rng(C, 17);
    std::int32_t row[C];
    for (auto& v : row) v = std::int32_t(rng.below(1 << 20)) - (1 << 19);
    if (C > 3) row[3] = INT32_MIN;  // masked
    const k::Multiplier E = k::quantize_multiplier(scale);
    std::int8_t out[C];
    const std::int32_t got = k::softmax_u8<C>(row, E, out);
    const std::int32_t mx = *std::max_element(row, row + C), e15 = E.q >> 16, K = 15 - std::min(E.shift, 14);
    const std::int32_t a = K > 17 ? K - 17 : 0, kk = K - a;
    std::int32_t total = 0;
    size_t wrong = 0;
    for (size_t j = 0; j < C; ++j) {
      const std::int64_t d = std::min<std::int64_t>((std::int64_t(mx) - row[j]) >> a, 65535);
      const std::int32_t u = std::int32_t(std::min<std::int64_t>((d * e15 + (std::int64_t(1) << (kk - 1))) >> kk, 16 * 256)), n = u >> 8;
      const std::int32_t e = (k::exp2_neg((u & 255) << 8) * 255 + (1 << (14 + n))) >> (15 + n);
      wrong += int(out[j]) + 128 != e;
      total += e;
    }
    INFO("C = ", C, " scale ", scale);
    CHECK(wrong == 0);
    CHECK(got == total);
  };
  for (double scale : {0.01, 0.3, 40.0}) {
    check_row.template operator()<17>(scale);
    check_row.template operator()<50>(scale);
    check_row.template operator()<64>(scale);
    check_row.template operator()<100>(scale);
    check_row.template operator()<300>(scale);
  }
  const std::int32_t masked[3] = {INT32_MIN, INT32_MIN, INT32_MIN};
  std::int8_t pm[3];
  CHECK(k::softmax_u8<3>(masked, unit, pm) == 0);
  CHECK((pm[0] == -128 && pm[1] == -128 && pm[2] == -128));
}

// A variant built for instructions this CPU lacks (AVX-512 VNNI) is skipped (77), not failed.
int main(int argc, char** argv) {
#if defined(__AVX512VNNI__) && defined(__GNUC__)
  if (!__builtin_cpu_supports("avx512vnni")) {
    std::puts("skipped: this CPU has no AVX-512 VNNI");
    return 77;
  }
#endif
  return doctest::Context(argc, argv).run();
}
