// The int8 kernels on the board's core (the DSP instructions on a Cortex-M4/M7, Helium on the
// M55: kernels/int8.hpp) against plain reference loops, run under qemu-system-arm -semihosting:
// qmatmul_nt on awkward sizes (int8 and int16 rows of A, K not a multiple of 4 or 16, odd rows
// and columns, strides that leave A's and B's rows unaligned, with and without bias, all-extreme
// values), and the requantization, one value (apply) and a block of channels (requantize,
// vectors with Helium), against TFLite's formula in 64 bits on random and edge inputs
// (accumulators past 2^30 take apply's other path), and both together (qlinear). Exit 0 when
// every integer is the same.
#include <algorithm>
#include <cstdint>

#include <stformer/kernels/int8.hpp>

#include "semihosting.hpp"

namespace {

std::uint32_t state = 12345;
std::uint32_t next() { return state = state * 1664525u + 1013904223u; }

alignas(4) std::int8_t A8[64 * 80], B[64 * 80];
alignas(4) std::int16_t A16[64 * 80];  // int16 rows of A: a stream read by a layer
template <class TA>
TA* rows_of() {
  if constexpr (sizeof(TA) == 1)
    return A8;
  else
    return A16;
}
template <class TA>
TA random_entry(bool extreme) {
  if constexpr (sizeof(TA) == 1)
    return extreme ? TA(-128) : TA(next() >> 24);
  else
    return extreme ? TA(-32768) : TA(next() >> 16);
}
std::int32_t C[64 * 64], bias[64];
size_t failures = 0, checked = 0;

template <size_t M, size_t N, size_t K, class TA = std::int8_t>
void product(size_t lda, size_t ldb, bool with_bias, bool extreme) {
  TA* A = rows_of<TA>();
  for (size_t i = 0; i < M * lda; ++i) A[i] = random_entry<TA>(extreme);
  for (size_t i = 0; i < N * ldb; ++i) B[i] = extreme ? std::int8_t(-128) : std::int8_t(next() >> 24);
  for (size_t j = 0; j < N; ++j) bias[j] = std::int32_t(next()) >> 8;
  stformer::kernels::qmatmul_nt<M, N, K>(A, lda, B, ldb, C, N, with_bias ? bias : nullptr);
  for (size_t i = 0; i < M; ++i)
    for (size_t j = 0; j < N; ++j) {
      std::int64_t s = with_bias ? bias[j] : 0;
      for (size_t k = 0; k < K; ++k) s += std::int64_t(A[i * lda + k]) * B[j * ldb + k];
      failures += C[i * N + j] != s, ++checked;
    }
}

// TFLite's MultiplyByQuantizedMultiplier in 64 bits (q ≥ 0).
std::int32_t reference(std::int32_t x, std::int32_t q, int shift) {
  const int left = shift > 0 ? shift : 0, right = shift > 0 ? 0 : -shift;
  const std::int64_t a = std::int32_t(std::uint32_t(x) << left);
  const std::int64_t h = (a * q + (std::int64_t(1) << 30)) >> 31;
  return std::int32_t((h + ((std::int64_t(1) << right) >> 1) - (h < 0 && right > 0)) >> right);
}

// qlinear (QLinear's product and requantization, fused on the DSP and Helium backends) against the
// reference loops: int8 or int16 outputs around a random zero point, multipliers with positive shifts too
// (accumulators past 2^30 after the left shift take the 64-bit path), a narrower clamp
// (the unfused path), one multiplier for every column (a batch matmul's), and in place.
template <size_t M, size_t N, size_t K, class Out, class TA = std::int8_t>
void linear(size_t lda, std::int32_t lo, std::int32_t hi, bool per_channel = true) {
  static std::int32_t q[N], shift[N], scratch[M * N];
  static Out y[M * N];
  TA* A = rows_of<TA>();
  for (size_t i = 0; i < M * lda; ++i) A[i] = random_entry<TA>(false);
  for (size_t i = 0; i < N * K; ++i) B[i] = std::int8_t(next() >> 24);
  for (size_t j = 0; j < N; ++j)
    bias[j] = std::int32_t(next()) >> 12, q[j] = std::int32_t((1u << 30) | (next() >> 2)), shift[j] = std::int32_t(next() % 40) - 31;
  const std::int32_t zero = std::int32_t(next() % 256) - 128;
  stformer::kernels::qlinear<M, N, K>(A, lda, B, K, bias, {q, shift, zero, lo, hi, per_channel}, y, scratch);
  for (size_t i = 0; i < M; ++i)
    for (size_t j = 0; j < N; ++j) {
      std::int32_t s = bias[j];
      for (size_t k = 0; k < K; ++k) s += std::int32_t(A[i * lda + k]) * B[j * K + k];
      const size_t c = per_channel ? j : 0;
      const std::int32_t want = std::clamp(reference(s, q[c], shift[c]), lo - zero, hi - zero) + zero;
      failures += y[i * N + j] != want, ++checked;
    }
}

// qlinear in place (Y = A, In = Out: an attention's queries), K not a multiple of 4 or 16.
template <size_t M, size_t K>
void linear_in_place() {
  static std::int32_t q[K], shift[K], scratch[M * K];
  static std::int8_t x[M * K], y[M * K];
  for (size_t i = 0; i < M * K; ++i) y[i] = x[i] = std::int8_t(next() >> 24);
  for (size_t i = 0; i < K * K; ++i) B[i] = std::int8_t(next() >> 24);
  for (size_t j = 0; j < K; ++j) bias[j] = std::int32_t(next()) >> 12, q[j] = std::int32_t((1u << 30) | (next() >> 2)), shift[j] = -std::int32_t(next() % 20);
  stformer::kernels::qlinear<M, K, K>(y, K, B, K, bias, {q, shift, 0, -128, 127}, y, scratch);
  for (size_t i = 0; i < M; ++i)
    for (size_t j = 0; j < K; ++j) {
      std::int32_t s = bias[j];
      for (size_t k = 0; k < K; ++k) s += std::int32_t(x[i * K + k]) * B[j * K + k];
      failures += y[i * K + j] != std::clamp<std::int32_t>(reference(s, q[j], shift[j]), -128, 127), ++checked;
    }
}

}  // namespace

extern "C" int firmware_main() {
  using semihosting::write;
  product<1, 1, 1>(1, 1, true, false);
  product<1, 2, 3>(3, 5, false, false);
  product<3, 5, 7>(9, 7, true, false);
  product<4, 50, 16>(16, 16, true, false);
  product<5, 3, 64>(67, 65, true, false);
  product<2, 17, 13>(13, 14, false, false);
  product<7, 9, 4>(5, 6, true, false);
  product<50, 50, 16>(17, 19, true, false);
  product<6, 64, 19>(21, 19, false, false);
  product<9, 11, 64>(64, 64, false, true);
  product<1, 13, 64, std::int16_t>(64, 64, true, false);
  product<5, 9, 37, std::int16_t>(39, 41, true, false);
  product<4, 7, 172, std::int16_t>(172, 172, false, true);
  for (int round = 0; round < 4; ++round) {
    linear<9, 13, 37, std::int8_t>(39, -128, 127);
    linear<4, 16, 64, std::int8_t>(64, -128, 127);
    linear<6, 7, 16, std::int16_t>(17, INT16_MIN, INT16_MAX);
    linear<1, 50, 64, std::int8_t, std::int16_t>(64, -128, 127);
    linear<5, 9, 172, std::int16_t, std::int16_t>(172, INT16_MIN, INT16_MAX);
    linear<5, 8, 12, std::int8_t>(12, -100, 90);
    linear<7, 50, 16, std::int8_t>(16, -128, 127, false);
    linear_in_place<5, 18>();
  }
  const size_t products = checked, product_failures = failures;
  const std::int32_t edges[] = {0, 1, -1, (1 << 30) - 1, 1 << 30, -(1 << 30), -(1 << 30) - 1, INT32_MAX, INT32_MIN, 12345, -12345};
  for (std::int32_t x : edges)
    for (int shift = -31; shift <= 8; ++shift)
      for (std::int32_t q : {std::int32_t(1) << 30, std::int32_t(INT32_MAX), std::int32_t(1518500250)})
        failures += stformer::kernels::apply(x, q, shift) != reference(x, q, shift), ++checked;
  for (int i = 0; i < 20000; ++i) {
    const std::int32_t x = std::int32_t(next()) >> (next() % 32), q = std::int32_t((1u << 30) | (next() >> 2));
    const int shift = int(next() % 40) - 31;
    failures += stformer::kernels::apply(x, q, shift) != reference(x, q, shift), ++checked;
  }
  // requantize: 16 rows of 37 channels (a vector tail), int8 out around a zero point
  static std::int32_t acc[16 * 37], mult[37], shifts[37];
  static std::int8_t out[16 * 37];
  for (int round = 0; round < 20; ++round) {
    for (auto& a : acc) a = std::int32_t(next()) >> (next() % 32);
    for (size_t c = 0; c < 37; ++c) mult[c] = std::int32_t((1u << 30) | (next() >> 2)), shifts[c] = std::int32_t(next() % 40) - 31;
    stformer::kernels::requantize(acc, 16, 37, mult, shifts, -3, -128, 127, out);
    for (size_t i = 0; i < 16 * 37; ++i) {
      const std::int32_t want = std::clamp<std::int32_t>(-3 + reference(acc[i], mult[i % 37], shifts[i % 37]), -128, 127);
      failures += out[i] != want, ++checked;
    }
  }
  write("int8 kernels (");
  write(stformer::kernels::qv::name());
  write("): "), write(products), write(" products, "), write(product_failures), write(" differ; "), write(checked - products),
      write(" requantizations, "), write(failures - product_failures), write(" differ\n");
  return failures == 0 ? 0 : 1;
}
