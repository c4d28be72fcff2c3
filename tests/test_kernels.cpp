// Every kernel against a naive scalar loop, on sizes that are and are not multiples of the
// SIMD width (W = 1, 8 or 16 floats depending on the build).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include <stformer/kernels/matmul.hpp>
#include <stformer/kernels/rowwise.hpp>
#include <stformer/core/rng.hpp>

namespace k = stformer::kernels;
using std::size_t;

namespace {

std::vector<float> random(size_t n, stformer::Rng& rng) {
  std::vector<float> v(n);
  for (auto& x : v) x = rng.normal();
  return v;
}

void check_near(const std::vector<float>& got, const std::vector<double>& want, double tol = 1e-5) {
  REQUIRE(got.size() == want.size());
  double err = 0, scale = 1;
  for (size_t i = 0; i < got.size(); ++i) {
    err = std::max(err, std::abs(double(got[i]) - want[i]));
    scale = std::max(scale, std::abs(want[i]));
  }
  CHECK(err <= tol * scale);
}

template <size_t M_, size_t N_, size_t K_>
struct Dims {
  static constexpr size_t M = M_, N = N_, K = K_;
};

}  // namespace

TEST_CASE_TEMPLATE("matmul_nt: C = alpha A Bᵀ + bias, with strides", S, Dims<1, 1, 1>, Dims<3, 5, 2>,
                   Dims<4, 4, 16>, Dims<7, 9, 17>, Dims<16, 33, 64>, Dims<50, 50, 16>, Dims<5, 130, 128>,
                   // K in blocks of 128 (AVX-512 and the other builds): two and a tail, exactly
                   // two, one and a tail of 1; in blocks of 512 (AVX2): the same
                   Dims<70, 37, 300>, Dims<9, 64, 256>, Dims<12, 20, 129>, Dims<40, 37, 1100>, Dims<9, 20, 1024>, Dims<10, 20, 513>,
                   // few rows (transposes): chunks of B's rows and a tail, K in chunks, M padded
                   Dims<32, 130, 128>, Dims<32, 70, 300>, Dims<24, 200, 100>, Dims<17, 64, 512>) {
  constexpr size_t M = S::M, N = S::N, K = S::K, lda = K + 3, ldb = K + 1, ldc = N + 2;
  stformer::Rng rng(M * 1000 + N * 10 + K);
  auto A = random(M * lda, rng), B = random(N * ldb, rng), bias = random(N, rng);
  std::vector<float> C(M * ldc, 7.0f);
  k::matmul_nt<M, N, K>(A.data(), lda, B.data(), ldb, C.data(), ldc, 0.5f, bias.data());
  std::vector<float> got;
  std::vector<double> want;
  for (size_t i = 0; i < M; ++i)
    for (size_t j = 0; j < ldc; ++j) {
      got.push_back(C[i * ldc + j]);
      if (j >= N) {  // padding between rows is untouched
        want.push_back(7.0);
        continue;
      }
      double s = 0;
      for (size_t kk = 0; kk < K; ++kk) s += double(A[i * lda + kk]) * B[j * ldb + kk];
      want.push_back(0.5 * s + bias[j]);
    }
  check_near(got, want);
  k::matmul_nt<M, N, K, true>(A.data(), lda, B.data(), ldb, C.data(), ldc, 0.5f, bias.data());  // ReLU fused
  got.assign(C.begin(), C.end());
  for (auto& w : want) w = std::max(w, 0.0);
  check_near(got, want);
}

// Of (the rows of the whole product) chooses matmul_nt's path, and each entry is the same chain
// of multiply-adds on every path: 32 rows transposed (transposes<32, ...> where W ≤ 16), the same
// rows in two tiles, and the same rows as part of a 40-row product (panels) give the same bits.
TEST_CASE("matmul_nt: tiles of rows and the few-rows path give the same bits as the panels") {
  constexpr size_t M = 32, N = 130, K = 200, T = 20;
  stformer::Rng rng(7);
  auto A = random(M * K, rng), B = random(N * K, rng), bias = random(N, rng);
  std::vector<float> whole(M * N), tiled(M * N), panels(M * N);
  k::matmul_nt<M, N, K, true>(A.data(), K, B.data(), K, whole.data(), N, 0.7f, bias.data());
  k::matmul_nt<T, N, K, true, M>(A.data(), K, B.data(), K, tiled.data(), N, 0.7f, bias.data());
  k::matmul_nt<M - T, N, K, true, M>(A.data() + T * K, K, B.data(), K, tiled.data() + T * N, N, 0.7f, bias.data());
  k::matmul_nt<M, N, K, true, 40>(A.data(), K, B.data(), K, panels.data(), N, 0.7f, bias.data());
  CHECK(std::memcmp(whole.data(), tiled.data(), M * N * sizeof(float)) == 0);
  CHECK(std::memcmp(whole.data(), panels.data(), M * N * sizeof(float)) == 0);
  size_t positive = 0;  // ReLU left a fair share of both signs
  for (float y : whole) positive += y > 0;
  CHECK(positive > M * N / 4);
  CHECK(positive < M * N * 3 / 4);
}

TEST_CASE_TEMPLATE("matmul_nn: C = A B, with strides", S, Dims<1, 1, 1>, Dims<3, 5, 2>, Dims<4, 16, 16>,
                   Dims<7, 9, 17>, Dims<16, 33, 64>, Dims<50, 16, 50>, Dims<5, 130, 3>, Dims<500, 2, 64>, Dims<20, 3, 7>) {
  constexpr size_t M = S::M, N = S::N, K = S::K, lda = K + 2, ldb = N + 5, ldc = N + 1;
  stformer::Rng rng(M * 1000 + N * 10 + K + 1);
  auto A = random(M * lda, rng), B = random(K * ldb, rng);
  std::vector<float> C(M * ldc, 7.0f);
  k::matmul_nn<M, N, K>(A.data(), lda, B.data(), ldb, C.data(), ldc);
  std::vector<float> got;
  std::vector<double> want;
  for (size_t i = 0; i < M; ++i)
    for (size_t j = 0; j < ldc; ++j) {
      got.push_back(C[i * ldc + j]);
      double s = 0;
      for (size_t kk = 0; kk < K; ++kk) s += double(A[i * lda + kk]) * B[kk * ldb + j];
      want.push_back(j >= N ? 7.0 : s);
    }
  check_near(got, want);
}

template <size_t N_>
struct Len {
  static constexpr size_t N = N_;
};

TEST_CASE_TEMPLATE("softmax_row and log_softmax_row, with masked (-inf) entries", S, Len<1>, Len<5>, Len<8>,
                   Len<17>, Len<50>, Len<64>) {
  constexpr size_t N = S::N;
  stformer::Rng rng(N);
  for (int masked_every : {0, 3, 1}) {  // none, some, all masked
    auto s = random(N, rng);
    for (auto& x : s) x *= 10;  // large logits: the max must be subtracted
    s[0] += 80;
    if (masked_every)
      for (size_t j = 0; j < N; j += masked_every) s[j] = k::neg_inf;
    std::vector<float> p = s, lp = s;
    k::softmax_row<N>(p.data());
    k::log_softmax_row<N>(lp.data());
    double m = -INFINITY, z = 0;
    for (float x : s) m = std::max(m, double(x));
    for (float x : s) z += std::exp(x - m);
    std::vector<double> want_p(N), want_lp(N);
    for (size_t j = 0; j < N; ++j) {
      bool all_masked = m == -INFINITY;
      want_p[j] = all_masked ? 0.0 : std::exp(s[j] - m) / z;
      want_lp[j] = all_masked ? -INFINITY : s[j] - m - std::log(z);
      if (s[j] == k::neg_inf) {
        CHECK(p[j] == 0.0f);  // exactly zero, never NaN
        CHECK(lp[j] == k::neg_inf);
        want_lp[j] = 0, lp[j] = 0;
      }
      CHECK(!std::isnan(p[j]));
    }
    check_near(p, want_p);
    check_near(lp, want_lp);
    std::vector<float> ps = s;  // softmax(c·s), c = 0.25
    k::softmax_row<N>(ps.data(), 0.25f);
    double zs = 0;
    for (float x : s) zs += std::exp(0.25 * (x - m));
    for (size_t j = 0; j < N; ++j) want_p[j] = m == -INFINITY ? 0.0 : std::exp(0.25 * (s[j] - m)) / zs;
    check_near(ps, want_p);
  }
}

TEST_CASE_TEMPLATE("softmax_rows: as softmax_row on each row", S, Len<5>, Len<16>, Len<50>, Len<64>) {
  constexpr size_t N = S::N, R = 20;  // a group of 16 rows and 4 (hmaxs, hsums)
  stformer::Rng rng(N + 7);
  auto s = random(R * N, rng);
  for (size_t j = 0; j < N; j += 3) s[N + j] = k::neg_inf;  // row 1 partly masked, row 2 all masked
  for (size_t j = 0; j < N; ++j) s[2 * N + j] = k::neg_inf;
  std::vector<float> rows = s, one = s;
  k::softmax_rows<R, N>(rows.data(), 0.3f);
  for (size_t r = 0; r < R; ++r) k::softmax_row<N>(one.data() + r * N, 0.3f);
  CHECK(rows == one);
}

TEST_CASE("exp_shifted: e^{c(x − m)} within (1 + 2|t| ln 2)·2^-23 relative, t = c(x − m)·log2 e") {
  constexpr size_t N = 203;  // vectors and a tail
  stformer::Rng rng(12);
  for (float c : {1.0f, 0.3f, 0.125f}) {
    std::vector<float> s(N);
    for (auto& x : s) x = 40.0f * rng.normal();
    float m = *std::max_element(s.begin(), s.end());
    std::vector<float> e = s;
    double sum = k::exp_shifted<N>(e.data(), m, c), want_sum = 0;
    for (size_t j = 0; j < N; ++j) {
      double t = double(c) * (double(s[j]) - m) / std::log(2.0), want = std::exp2(t);
      want_sum += want;
      if (t < -120) continue;  // subnormal results: relative error is not the measure
      CHECK(std::abs(e[j] - want) / want <= (1 + 2 * std::abs(t) * std::log(2.0)) * std::ldexp(1.0, -23));
    }
    CHECK(std::abs(sum - want_sum) / want_sum < 1e-6);
  }
}

TEST_CASE("vexp2: within 1 ulp of 2^t over the float range, subnormal results included; -inf, +inf, NaN") {
  std::vector<float> t;
  for (double u = -149.5; u < 128.2; u += 0.00731) t.push_back(float(u));
  for (float u : {0.0f, -0.0f, 1e-30f, -1e-30f, 0.5f, -0.5f, 1.5f, -1.5f, 127.99f}) t.push_back(u);
  while (t.size() % k::W) t.push_back(1.0f);
  double worst = 0;  // in units in the last place of the float nearest 2^t (2^-149 below the normal range)
  for (size_t i = 0; i < t.size(); i += k::W) {
    float e[k::W];
    k::store(e, k::vexp2(k::load(t.data() + i)));
    for (size_t l = 0; l < k::W; ++l) {
      double want = std::exp2(double(t[i + l]));
      if (want >= std::ldexp(1.0, 128)) {
        CHECK(e[l] == INFINITY);
        continue;
      }
      double ulp = std::ldexp(1.0, std::max(std::ilogb(want), -126) - 23);
      worst = std::max(worst, std::abs(e[l] - want) / ulp);
    }
  }
  CHECK(worst <= 1.0);
  const float special[5] = {-INFINITY, -200.0f, -1e30f, INFINITY, NAN};
  for (size_t i = 0; i < 5; ++i) {
    float in[k::W], out[k::W];
    std::fill_n(in, k::W, special[i]);
    k::store(out, k::vexp2(k::load(in)));
    if (i < 3) CHECK(out[0] == 0.0f);
    if (i == 3) CHECK(out[0] == INFINITY);
    if (i == 4) CHECK(std::isnan(out[0]));
  }
}

TEST_CASE("vexp2<true> (t <= 0, the softmax's): within 1 ulp of 2^t down to 2^-126.5, 0 below; -inf, NaN") {
  std::vector<float> t;
  for (double u = -160.0; u <= 0.0; u += 0.00317) t.push_back(float(u));
  for (float u : {0.0f, -0.0f, -1e-30f, -0.5f, -1.5f, -126.49f, -126.51f, -127.0f, -1e30f, -INFINITY, NAN}) t.push_back(u);
  while (t.size() % k::W) t.push_back(-1.0f);
  double worst = 0;
  for (size_t i = 0; i < t.size(); i += k::W) {
    float e[k::W];
    k::store(e, k::vexp2<true>(k::load(t.data() + i)));
    for (size_t l = 0; l < k::W; ++l) {
      const float x = t[i + l];
      if (std::isnan(x)) {
        CHECK(std::isnan(e[l]));
        continue;
      }
      double want = std::exp2(double(x));
      if (x < -126.5f) {  // 0 here, or the subnormal 2^t where vexp2<true> is vexp2 (AVX-512, plain)
        CHECK((e[l] == 0.0f || std::abs(e[l] - want) <= std::ldexp(1.0, -149)));
        continue;
      }
      double ulp = std::ldexp(1.0, std::max(std::ilogb(want), -126) - 23);
      worst = std::max(worst, std::abs(e[l] - want) / ulp);
    }
  }
  CHECK(worst <= 1.0);
}

TEST_CASE_TEMPLATE("scalenorm_rows, relu, add", S, Len<1>, Len<2>, Len<16>, Len<17>, Len<64>, Len<130>) {
  constexpr size_t D = S::N, R = 5;
  stformer::Rng rng(D + 100);
  auto x = random(R * D, rng);
  for (size_t j = 0; j < D; ++j) x[2 * D + j] = 1e-7f;  // a row with norm below eps
  std::vector<float> y(R * D), scale(R);
  k::scalenorm_rows<R, D>(x.data(), y.data(), 3.0f, scale.data());  // scale = 1 / max(norm, eps)
  std::vector<double> want(R * D), want_scale(R);
  for (size_t r = 0; r < R; ++r) {
    double n = 0;
    for (size_t j = 0; j < D; ++j) n += double(x[r * D + j]) * x[r * D + j];
    want_scale[r] = 1.0 / std::max(std::sqrt(n), 1e-5);
    for (size_t j = 0; j < D; ++j) want[r * D + j] = 3.0 * x[r * D + j] * want_scale[r];
  }
  check_near(y, want);
  check_near(scale, want_scale);

  auto a = random(D, rng), b = random(D, rng);
  std::vector<float> sum(D), r = a;
  k::add<D>(a.data(), b.data(), sum.data());
  k::relu<D>(r.data());
  for (size_t j = 0; j < D; ++j) {
    CHECK(sum[j] == a[j] + b[j]);
    CHECK(r[j] == (a[j] > 0 ? a[j] : 0.0f));
  }
}

TEST_CASE_TEMPLATE("matmul_tn (C += Aᵀ B), matmul_nn accumulating, add_column_sums", S, Dims<1, 1, 1>, Dims<3, 5, 2>,
                   Dims<16, 17, 9>, Dims<7, 33, 50>, Dims<64, 16, 4>, Dims<64, 2, 500>, Dims<40, 3, 9>) {
  constexpr size_t M = S::M, N = S::N, K = S::K, lda = M + 1, ldb = N + 3, ldc = N + 2;
  stformer::Rng rng(M * 7 + N * 5 + K);
  auto A = random(K * lda, rng), B = random(K * ldb, rng), C0 = random(M * ldc, rng);
  auto C = C0, C2 = C0;
  k::matmul_tn<M, N, K>(A.data(), lda, B.data(), ldb, C.data(), ldc);
  std::vector<double> want(M * ldc);
  for (size_t i = 0; i < M; ++i)
    for (size_t j = 0; j < ldc; ++j) {
      double s = C0[i * ldc + j];
      if (j < N)
        for (size_t kk = 0; kk < K; ++kk) s += double(A[kk * lda + i]) * B[kk * ldb + j];
      want[i * ldc + j] = s;
    }
  check_near(C, want);
  // the same product through matmul_nn with an explicit transpose, accumulating
  std::vector<float> At(M * K);
  for (size_t i = 0; i < M; ++i)
    for (size_t kk = 0; kk < K; ++kk) At[i * K + kk] = A[kk * lda + i];
  k::matmul_nn<M, N, K, true>(At.data(), K, B.data(), ldb, C2.data(), ldc);
  check_near(C2, want);

  std::vector<float> sums(N, 1.0f), rows = random(K * N, rng);
  k::add_column_sums<K, N>(rows.data(), sums.data());
  std::vector<double> want_sums(N, 1.0);
  for (size_t r = 0; r < K; ++r)
    for (size_t j = 0; j < N; ++j) want_sums[j] += rows[r * N + j];
  check_near(sums, want_sums);
}

// Wide B over many rows (AVX2 copies B's strips of 16 columns before the tiles run over them):
// the whole product has the bits of the same product taken 16 columns at a time, and is near
// the double-precision one; K over one chunk of 256, strides past the row ends.
TEST_CASE_TEMPLATE("matmul_nn and matmul_tn with B 128 or more wide: the bits of B's columns taken 16 at a time", S,
                   Dims<30, 144, 300>, Dims<26, 128, 64>) {
  constexpr size_t M = S::M, N = S::N, K = S::K, lda = K + 3, ldat = M + 1, ldb = N + 5, ldc = N + 2;
  stformer::Rng rng(M + N + K);
  auto A = random(M * lda, rng), At = random(K * ldat, rng), B = random(K * ldb, rng), C0 = random(M * ldc, rng);
  auto nn = C0, tn = C0, nn16 = C0, tn16 = C0;
  k::matmul_nn<M, N, K>(A.data(), lda, B.data(), ldb, nn.data(), ldc);
  k::matmul_tn<M, N, K>(At.data(), ldat, B.data(), ldb, tn.data(), ldc);
  for (size_t j = 0; j < N; j += 16) {
    k::matmul_nn<M, 16, K>(A.data(), lda, B.data() + j, ldb, nn16.data() + j, ldc);
    k::matmul_tn<M, 16, K>(At.data(), ldat, B.data() + j, ldb, tn16.data() + j, ldc);
  }
  CHECK(std::memcmp(nn.data(), nn16.data(), nn.size() * sizeof(float)) == 0);
  CHECK(std::memcmp(tn.data(), tn16.data(), tn.size() * sizeof(float)) == 0);
  std::vector<double> want_nn(M * ldc), want_tn(M * ldc);
  for (size_t i = 0; i < M; ++i)
    for (size_t j = 0; j < ldc; ++j) {
      double a = j < N ? 0.0 : C0[i * ldc + j], t = C0[i * ldc + j];
      if (j < N)
        for (size_t kk = 0; kk < K; ++kk) a += double(A[i * lda + kk]) * B[kk * ldb + j], t += double(At[kk * ldat + i]) * B[kk * ldb + j];
      want_nn[i * ldc + j] = a, want_tn[i * ldc + j] = t;
    }
  check_near(nn, want_nn);
  check_near(tn, want_tn);
}

template <size_t n>
void check_hsums_hmaxs() {
  using namespace stformer::kernels;
  alignas(64) float x[n * W];
  stformer::Rng rng(n);
  for (size_t i = 0; i < n * W; ++i) x[i] = float((i * 7919) % 1000);  // integers: every order of addition is exact
  vf v[n];
  for (size_t i = 0; i < n; ++i) v[i] = load(x + i * W);
  float sums[n], maxs[n];
  hsums<n>(v, sums);
  hmaxs<n>(v, maxs);
  for (size_t i = 0; i < n; ++i) {
    float s = 0, m = x[i * W];
    for (size_t j = 0; j < W; ++j) s += x[i * W + j], m = std::max(m, x[i * W + j]);
    CHECK(sums[i] == s);
    CHECK(maxs[i] == m);
  }
  for (size_t i = 0; i < n * W; ++i) x[i] = rng.normal();  // rounding: the same order as hsum, bit for bit
  for (size_t i = 0; i < n; ++i) v[i] = load(x + i * W);
  hsums<n>(v, sums);
  for (size_t i = 0; i < n; ++i) CHECK(sums[i] == hsum(v[i]));
}

TEST_CASE("hsums, hmaxs: each vector's sum and max, in order, for whole groups and a remainder") {
  check_hsums_hmaxs<37>();  // two groups of 16 and 5 (AVX-512: padded to a group)
  check_hsums_hmaxs<35>();  // and 3 (one vector at a time)
}

TEST_CASE("fma rounds once in the SIMD builds (the kernels' FMA chains are real FMAs)") {
  using namespace stformer::kernels;
  // a·a = 1 + 2^-11 + 2^-24 exactly; rounded to float it is 1 + 2^-11, so a separate multiply and
  // add give 0 where a fused multiply-add gives 2^-24.
  const float a = 1.0f + std::ldexp(1.0f, -12), c = -(1.0f + std::ldexp(1.0f, -11));
  alignas(64) float out[W];
  store(out, fma(splat(a), splat(a), splat(c)));
  const float want = W > 1 ? std::ldexp(1.0f, -24) : 0.0f;  // the one-lane build is plain C++: a * b + c
  for (size_t i = 0; i < W; ++i) CHECK(out[i] == want);
}
