// stformer's int8 kernels against CMSIS-NN's on a bare-metal Cortex-M: instructions per call of
// the same operations at the same shapes, and whether their outputs agree. Built and run by
// run.sh (one image per board and optimisation level, under qemu-system-arm -icount shift=8):
//   bash bench/cmsis_nn/run.sh CMSIS_NN_DIR OUT_DIR
//
// Counting: SysTick as the firmware counts it (targets/firmware/mps2/instructions.hpp: under
// -icount shift=8 each instruction is 2^8 ns of virtual time). An operation is a function with
// no arguments, called `reps` times through a function pointer; the same loop around an empty
// function is subtracted and the rest divided by `reps`, so a count is the operation's own
// instructions, its argument set-up included. Each call is also counted alone, for the least
// and the most (they differ by SysTick's wrap interrupt, which a span includes).
//
// Operations (random int8 data, about normal with standard deviation 37; zero points all 0):
//   fc         y[M,N] = requant_c(x[M,K]·W[N,K]ᵀ + b[N]), one multiplier per output channel c.
//              CMSIS-NN's two routes: arm_fully_connected_per_channel_s8 (TFLite Micro's FC,
//              one input row at a time) and arm_convolve_1x1_s8_fast (the same product as a 1×1
//              convolution, i.e. its GEMM arm_nn_mat_mult_nt_t_s8). stformer: QLinear's
//              kernel, stformer_fully_connected below.
//   scores_s32 S[50,50] = q[50,16]·k[50,16]ᵀ in int32 (an attention head's scores).
//              CMSIS-NN: arm_nn_mat_mult_nt_t_s8_s32, which adds into its output, so the memset
//              that zeroes it is counted. stformer: qmatmul_nt without bias.
//   scores_s8  the same product requantized to int8 with one multiplier (TFLite's BATCH_MATMUL).
//              CMSIS-NN: arm_batch_matmul_s8. stformer: qlinear with one multiplier
//              (per_channel false).
//   softmax    50 rows of 50 on the same real scores x = (8/127)·x_q. CMSIS-NN: arm_softmax_s8
//              (TFLite's int8 softmax, outputs at scale 1/256, zero point −128). stformer:
//              softmax_u8 per row (numerators e − 128, e = 255·2^(−u/256), returns Σe) and the
//              row's 1/Σe multiplier (kernels::divide), which its attention folds into A·V.
//
// Checks: fc and both scores are compared bit for bit with CMSIS-NN and with a plain reference
// (64-bit sums, TFLite's MultiplyByQuantizedMultiplier). The two softmaxes are different
// arithmetic, so each is held to a float softmax of the same real scores instead, within
// SOFTMAX_TOLERANCE. Any failure prints OUTPUTS|MISMATCH and ends the run with a failure status.
//
// Output lines (read by table.py):
//   RESULT|op|shape|impl|instructions per call|least single call|most single call
//   MATCH|op|shape|what|differing outputs|outputs|largest difference
//   ERROR|op|shape|what|max abs error|mean abs error|tolerance
//   OUTPUTS|match  or  OUTPUTS|MISMATCH
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include <stformer/kernels/int8.hpp>

#include "arm_nnfunctions.h"

#include "instructions.hpp"
#include "semihosting.hpp"

// CMSIS-NN's int8·int8 → int32 product, declared here rather than through
// arm_nnsupportfunctions.h, whose macros (MAX, MIN, CLAMP, ...) would leak into this file.
extern "C" arm_cmsis_nn_status arm_nn_mat_mult_nt_t_s8_s32(const int8_t* lhs, const int8_t* rhs, int32_t* dst, const int32_t lhs_rows,
                                                           const int32_t rhs_rows, const int32_t rhs_cols, const int32_t lhs_offset,
                                                           const int32_t dst_idx_offset);

namespace {

namespace k = stformer::kernels;
using semihosting::write;
using Fn = void (*)();

// ---- stformer's side ----

// y[M,N] (int8) = requant_c(x[M,K]·W[N,K]ᵀ + b[N]), as QLinear<K, N>::apply<M> computes it
// (quantized/linear.hpp): kernels::qlinear, per-channel, symmetric (zero point 0), clamped to
// int8; requantized in the product's registers where the backend fuses them (DSP), else the
// int32 products into acc[M,N] and a second pass. Every fc count and check goes through here.
template <size_t M, size_t N, size_t K>
void stformer_fully_connected(const std::int8_t* x, const std::int8_t* w, const std::int32_t* b, const std::int32_t* q,
                              const std::int32_t* shift, std::int32_t* acc, std::int8_t* y) {
  k::qlinear<M, N, K>(x, K, w, K, b, {q, shift, 0, -128, 127}, y, acc);
}

// ---- counting ----

[[gnu::noinline]] void empty() { asm volatile("" ::: "memory"); }

[[gnu::noinline]] std::uint64_t loop(Fn f, unsigned reps) {
  const std::uint64_t t0 = instructions::ticks();
  for (unsigned i = 0; i < reps; ++i) f();
  return instructions::of(instructions::ticks() - t0);
}

[[gnu::noinline]] std::uint64_t single(Fn f) {
  const std::uint64_t t0 = instructions::ticks();
  f();
  return instructions::of(instructions::ticks() - t0);
}

void write_signed(std::int64_t v) {
  if (v < 0) write("-"), v = -v;
  write(std::uint64_t(v));
}

// f's instructions per call, to a tenth: (reps calls − reps empty calls) / reps.
void measure(const char* op, const char* shape, const char* impl, Fn f, unsigned reps) {
  f();  // fills the outputs for the checks (QEMU has no cache to warm)
  const std::uint64_t net = loop(f, reps) - loop(empty, reps);
  const std::uint64_t tenths = (net * 10 + reps / 2) / reps;
  const std::int64_t e = std::int64_t(single(empty));
  std::int64_t least = INT64_MAX, most = INT64_MIN;
  for (unsigned i = 0; i < reps; ++i) {
    const std::int64_t n = std::int64_t(single(f)) - e;
    least = std::min(least, n), most = std::max(most, n);
  }
  write("RESULT|"), write(op), write("|"), write(shape), write("|"), write(impl), write("|");
  write(tenths / 10), write("."), write(tenths % 10), write("|");
  write_signed(least), write("|"), write_signed(most), write("\n");
}

// ---- checks ----

bool mismatch = false;

// How many of n outputs differ from want (bit for bit), and by how much at most.
template <class T>
void compare(const char* op, const char* shape, const char* what, const T* got, const T* want, size_t n) {
  size_t differ = 0;
  std::int64_t worst = 0;
  for (size_t i = 0; i < n; ++i)
    if (got[i] != want[i]) ++differ, worst = std::max(worst, std::abs(std::int64_t(got[i]) - std::int64_t(want[i])));
  mismatch = mismatch || differ != 0;
  write("MATCH|"), write(op), write("|"), write(shape), write("|"), write(what), write("|");
  write(differ), write("|"), write(n), write("|"), write_signed(worst), write("\n");
}

// ---- data ----

std::uint32_t state = 12345;
std::uint32_t next() { return state = state * 1664525u + 1013904223u; }
// about normal int8: a sum of four uniforms on [−32, 31] (standard deviation about 37)
std::int8_t gauss8() {
  std::int32_t s = 0;
  for (int i = 0; i < 4; ++i) s += std::int32_t(next() >> 26) - 32;
  return std::int8_t(s);
}
float uniform01() { return float(next() >> 8) / 16777216.0f; }

constexpr size_t MAXD = 128;
alignas(16) std::int8_t X[MAXD * MAXD], W[MAXD * MAXD];
alignas(16) std::int32_t bias[MAXD], mult[MAXD], shifts[MAXD], kernel_sum[MAXD];
alignas(16) std::int32_t acc[MAXD * MAXD];
alignas(16) std::int8_t out_fc[MAXD * MAXD], out_gemm[MAXD * MAXD], out_s[MAXD * MAXD], want[MAXD * MAXD];

// The plain reference: TFLite's MultiplyByQuantizedMultiplier in 64 bits, then int8's clamp.
std::int8_t reference(std::int64_t sum, std::int32_t q, int shift) {
  const int left = shift > 0 ? shift : 0, right = shift > 0 ? 0 : -shift;
  const std::int64_t a = std::int32_t(std::uint32_t(std::int32_t(sum)) << left);
  const std::int64_t h = (a * q + (std::int64_t(1) << 30)) >> 31;
  const std::int64_t y = (h + ((std::int64_t(1) << right) >> 1) - (h < 0 && right > 0)) >> right;
  return std::int8_t(std::clamp<std::int64_t>(y, -128, 127));
}

// ---- fc: y[M,N] = requant_c(x[M,K]·W[N,K]ᵀ + b) ----
// Each weight row has one entry ±127 (symmetric per-row quantization maps its largest weight
// there), the bias is about the size of the sums, and each channel's multiplier spreads the
// outputs over about ±40 steps, so that few saturate.
template <size_t M, size_t N, size_t K>
struct Fc {
  static void setup() {
    for (size_t i = 0; i < M * K; ++i) X[i] = gauss8();
    for (size_t c = 0; c < N; ++c) {
      std::int8_t* w = W + c * K;
      for (size_t i = 0; i < K; ++i) w[i] = gauss8();
      w[next() % K] = (next() & 1) ? 127 : -127;
      double ss = 0;
      for (size_t i = 0; i < K; ++i) ss += double(w[i]) * w[i];
      const double sd = 37.0 * std::sqrt(ss);  // of the sums x·w
      bias[c] = std::int32_t((uniform01() - 0.5f) * sd);
      const k::Multiplier m = k::quantize_multiplier(40.0 / sd * (0.75 + 0.5 * uniform01()));
      mult[c] = m.q, shifts[c] = m.shift;
    }
    // CMSIS-NN's Helium FC reads per-channel kernel sums (ctx.buf) that TFLite Micro makes once,
    // when the model is prepared: made here, outside the counts
    arm_vector_sum_s8(kernel_sum, K, N, W, 0, 0, bias);
  }

  static void cmsis_fc() {
    static cmsis_nn_context ctx = {kernel_sum, int32_t(sizeof kernel_sum)};
    static const cmsis_nn_fc_params fc = {0, 0, 0, {-128, 127}};
    static const cmsis_nn_per_channel_quant_params quant = {mult, shifts};
    static const cmsis_nn_dims in = {M, 1, 1, K}, filter = {K, 1, 1, N}, b = {N, 1, 1, 1}, out = {M, 1, 1, N};
    arm_fully_connected_per_channel_s8(&ctx, &fc, &quant, &in, X, &filter, W, &b, bias, &out, out_fc);
  }

  static void cmsis_gemm() {
    static cmsis_nn_context ctx = {nullptr, 0};
    static const cmsis_nn_conv_params conv = {0, 0, {1, 1}, {0, 0}, {1, 1}, {-128, 127}};
    static const cmsis_nn_per_channel_quant_params quant = {mult, shifts};
    static const cmsis_nn_dims in = {1, 1, M, K}, filter = {N, 1, 1, K}, b = {1, 1, 1, N}, out = {1, 1, M, N};
    arm_convolve_1x1_s8_fast(&ctx, &conv, &quant, &in, X, &filter, W, &b, bias, &out, out_gemm);
  }

  static void stformer() { stformer_fully_connected<M, N, K>(X, W, bias, mult, shifts, acc, out_s); }

  static void run(const char* shape, unsigned reps) {
    setup();
    measure("fc", shape, "cmsis_fc_per_channel", cmsis_fc, reps);
    measure("fc", shape, "cmsis_conv1x1_fast", cmsis_gemm, reps);
    measure("fc", shape, "stformer", stformer, reps);
    for (size_t i = 0; i < M; ++i)
      for (size_t c = 0; c < N; ++c) {
        std::int64_t s = bias[c];
        for (size_t j = 0; j < K; ++j) s += std::int64_t(X[i * K + j]) * W[c * K + j];
        want[i * N + c] = reference(s, mult[c], shifts[c]);
      }
    compare("fc", shape, "stformer vs arm_fully_connected_per_channel_s8", out_s, out_fc, M * N);
    compare("fc", shape, "stformer vs arm_convolve_1x1_s8_fast", out_s, out_gemm, M * N);
    compare("fc", shape, "stformer vs reference", out_s, want, M * N);
    compare("fc", shape, "arm_fully_connected_per_channel_s8 vs reference", out_fc, want, M * N);
    compare("fc", shape, "arm_convolve_1x1_s8_fast vs reference", out_gemm, want, M * N);
  }
};

// ---- scores: S[Nq,Nq] = q[Nq,Dh]·k[Nq,Dh]ᵀ, in int32 and requantized to int8 ----
constexpr size_t Nq = 50, Dh = 16;
alignas(16) std::int32_t S_cmsis[Nq * Nq], S_stformer[Nq * Nq], S_want[Nq * Nq], bmm_buf[Nq];
k::Multiplier bmm_m;

void scores_cmsis_s32() {
  std::memset(S_cmsis, 0, sizeof S_cmsis);
  arm_nn_mat_mult_nt_t_s8_s32(X, W, S_cmsis, Nq, Dh, Nq, 0, 1);
}
void scores_stformer_s32() { k::qmatmul_nt<Nq, Nq, Dh>(X, Dh, W, Dh, S_stformer, Nq); }
void scores_cmsis_s8() {
  static cmsis_nn_context ctx = {bmm_buf, int32_t(sizeof bmm_buf)};
  static const cmsis_nn_bmm_params params = {false, true, {0, 0, 0, {-128, 127}}};
  static cmsis_nn_per_tensor_quant_params quant;
  quant = {bmm_m.q, bmm_m.shift};
  static const cmsis_nn_dims lhs = {1, 1, Nq, Dh}, rhs = {1, 1, Nq, Dh}, out = {1, 1, Nq, Nq};
  arm_batch_matmul_s8(&ctx, &params, &quant, &lhs, X, &rhs, W, &out, out_fc);
}
void scores_stformer_s8() {
  const std::int32_t q = bmm_m.q, shift = bmm_m.shift;
  k::qlinear<Nq, Nq, Dh>(X, Dh, W, Dh, nullptr, {&q, &shift, 0, -128, 127, false}, out_s, acc);
}

void scores_run(unsigned reps) {
  const char* shape = "50x50x16";
  for (size_t i = 0; i < Nq * Dh; ++i) X[i] = gauss8(), W[i] = gauss8();
  bmm_m = k::quantize_multiplier(40.0 / (37.0 * 37.0 * 4.0));  // the sums' spread (37²·√16) onto about ±40
  measure("scores_s32", shape, "cmsis_mat_mult_nt_t_s8_s32", scores_cmsis_s32, reps);
  measure("scores_s32", shape, "stformer", scores_stformer_s32, reps);
  measure("scores_s8", shape, "cmsis_batch_matmul_s8", scores_cmsis_s8, reps);
  measure("scores_s8", shape, "stformer", scores_stformer_s8, reps);
  for (size_t i = 0; i < Nq; ++i)
    for (size_t j = 0; j < Nq; ++j) {
      std::int64_t s = 0;
      for (size_t d = 0; d < Dh; ++d) s += std::int64_t(X[i * Dh + d]) * W[j * Dh + d];
      S_want[i * Nq + j] = std::int32_t(s);
      want[i * Nq + j] = reference(s, bmm_m.q, bmm_m.shift);
    }
  compare("scores_s32", shape, "stformer vs arm_nn_mat_mult_nt_t_s8_s32", S_stformer, S_cmsis, Nq * Nq);
  compare("scores_s32", shape, "stformer vs reference", S_stformer, S_want, Nq * Nq);
  compare("scores_s8", shape, "stformer vs arm_batch_matmul_s8", out_s, out_fc, Nq * Nq);
  compare("scores_s8", shape, "stformer vs reference", out_s, want, Nq * Nq);
  compare("scores_s8", shape, "arm_batch_matmul_s8 vs reference", out_fc, want, Nq * Nq);
}

// ---- softmax over Nq rows of Nq, the real scores x = s_in·x_q ----
// CMSIS-NN's parameters are TFLite's: PreprocessSoftmaxScaling(β = 1, s_in, 5 integer bits) and
// diff_min = −CalculateInputRadius(5, shift). stformer's exponent multiplier is the scores'
// scale times log2(e)·256 (QMultiHeadAttention's), its probabilities e/Σe.
constexpr double s_in = 8.0 / 127.0;  // |x| up to 8, as scores after 1/√Dh
// Either side may be this far from the float softmax: 4 steps of CMSIS-NN's output (1/256),
// above both sides' rounding, far below any error in the arithmetic.
constexpr float SOFTMAX_TOLERANCE = 4.0f / 256.0f;
alignas(16) std::int8_t Sx[Nq * Nq];
alignas(16) std::int32_t Sx32[Nq * Nq], sums[Nq];
k::Multiplier exponent, per_row[Nq];
const k::Multiplier values = k::quantize_multiplier(0.9);  // A·V's multiplier before 1/Σe (any will do)
std::int32_t sm_mult, sm_shift, sm_diff_min;

void softmax_cmsis() { arm_softmax_s8(Sx, Nq, Nq, sm_mult, sm_shift, sm_diff_min, out_fc); }
void softmax_stformer() {
  for (size_t r = 0; r < Nq; ++r) {
    sums[r] = k::softmax_u8<Nq>(Sx32 + r * Nq, exponent, out_s + r * Nq);
    per_row[r] = k::divide(values, std::uint32_t(sums[r]));
  }
}

void softmax_error(const char* what, float worst, float total) {
  const bool ok = worst <= SOFTMAX_TOLERANCE;
  mismatch = mismatch || !ok;
  write("ERROR|softmax|50x50|"), write(what), write("|"), write(worst, 5), write("|"), write(total / float(Nq * Nq), 5);
  write("|"), write(SOFTMAX_TOLERANCE, 5), write("\n");
}

void softmax_run(unsigned reps) {
  for (size_t i = 0; i < Nq * Nq; ++i) Sx[i] = gauss8(), Sx32[i] = Sx[i];
  const double real = std::min(s_in * double(1 << (31 - 5)), double(INT32_MAX));
  const k::Multiplier m = k::quantize_multiplier(real);  // ≥ 1 here, so shift ≥ 0 (QuantizeMultiplierGreaterThanOne)
  sm_mult = m.q, sm_shift = m.shift;
  const double radius = double((1 << 5) - 1) * double(std::int64_t(1) << (31 - 5)) / double(std::int64_t(1) << sm_shift);
  sm_diff_min = -std::int32_t(std::floor(radius));
  exponent = k::quantize_multiplier(std::min(s_in * 1.4426950408889634 * 256.0, 8192.0));

  measure("softmax", "50x50", "cmsis_softmax_s8", softmax_cmsis, reps);
  measure("softmax", "50x50", "stformer", softmax_stformer, reps);
  float worst_c = 0, worst_s = 0, total_c = 0, total_s = 0;
  for (size_t r = 0; r < Nq; ++r) {
    const std::int8_t* x = Sx + r * Nq;
    const std::int8_t mx = *std::max_element(x, x + Nq);
    float p[Nq], z = 0;
    for (size_t j = 0; j < Nq; ++j) z += p[j] = std::exp(float(s_in) * float(x[j] - mx));
    // the row's 1/Σe as stformer hands it on (per_row = values/Σe), read back as a real number
    const double inv = std::ldexp(double(per_row[r].q), per_row[r].shift - 31) / std::ldexp(double(values.q), values.shift - 31);
    for (size_t j = 0; j < Nq; ++j) {
      const float got_c = float(int(out_fc[r * Nq + j]) + 128) / 256.0f;
      const float got_s = float(double(int(out_s[r * Nq + j]) + 128) * inv);
      const float dc = std::abs(got_c - p[j] / z), ds = std::abs(got_s - p[j] / z);
      worst_c = std::max(worst_c, dc), worst_s = std::max(worst_s, ds), total_c += dc, total_s += ds;
    }
  }
  softmax_error("arm_softmax_s8 vs float softmax", worst_c, total_c);
  softmax_error("stformer (e/sum e) vs float softmax", worst_s, total_s);
}

}  // namespace

extern "C" int firmware_main() {
  instructions::start();
  if (!instructions::check()) {
    write("QEMU does not run with -icount shift=8: no counts\n");
    return 1;
  }
  write("BOARD|"), write(BOARD_NAME), write("\n");
  write("KERNELS|stformer: ");
  write(STFORMER_BACKEND_FILE);
#if defined(ARM_MATH_MVEI)
  write("; CMSIS-NN: ARM_MATH_MVEI\n");
#elif defined(ARM_MATH_DSP)
  write("; CMSIS-NN: ARM_MATH_DSP\n");
#else
  write("; CMSIS-NN: plain C\n");
#endif
  write("EMPTY|16 empty calls: "), write(loop(empty, 16)), write(" instructions\n");
  Fc<50, 16, 16>::run("50x16x16", 16);
  Fc<50, 64, 16>::run("50x64x16", 16);
  Fc<50, 16, 64>::run("50x16x64", 16);
  Fc<128, 128, 128>::run("128x128x128", 4);
  scores_run(16);
  softmax_run(16);
  write(mismatch ? "OUTPUTS|MISMATCH\n" : "OUTPUTS|match\n");
  return semihosting::report_stack() && !mismatch ? 0 : 1;
}
