// exp2f, expf, logf and erff for the firmware's training runs and float generation and their
// host references (train.hpp, gpt_reference.cpp): linked into both, they take the place of the
// C library's, so that the host and every core compute the same bits. The C libraries differ: glibc and newlib on a core with a
// double-precision FPU evaluate these in double arithmetic, newlib on a core with a
// single-precision FPU (the STM32F405's Cortex-M4) with other, float algorithms, whose last
// bits differ now and then. Here only float additions, multiplications and divisions, each
// rounded to nearest (IEEE 754, no fused multiply-add: -ffp-contract=off), in a fixed order:
// the same result on every machine, within 2 ulp of the exact one.
//   exp2f(x) = 2^k · p(r),  x = k + r, k the integer nearest x, |r| ≤ 1/2,
//   expf(x)  = 2^k · q(r),  r = x − k·ln2 (ln2 as a high and a low part), k nearest x / ln2,
//              p, q: Taylor polynomials of e^{r ln2} and e^r to degree 7 (Horner's rule)
//   logf(x)  = e·ln2 + log m,  x = m·2^e, m in [√½, √2],  log m = 2s + 2s³/3 + … + 2s⁹/9,
//              s = (m − 1)/(m + 1)
//   erff(x)  odd; |x| < 1: 2/√π · Σ_{n ≤ 10} (−1)ⁿ x^(2n+1) / (n!(2n + 1)) (Horner's rule in x²);
//              1 ≤ |x| < 4: 1 − (a1·t + … + a5·t⁵)·e^(−x²), t = 1/(1 + 0.3275911·|x|) (Abramowitz
//              and Stegun 7.1.26); 1 from 4 on (erf(4) = 1 − 1.5e-8): within 2e-7 of erf
// Not declared by <cmath> here: the C library's headers disagree on their exception
// specifications, and only the symbols matter.
#include <cstdint>
#include <cstring>
#include <limits>

namespace {

constexpr float inf = std::numeric_limits<float>::infinity();
constexpr float shifter = 12582912.0f;  // 1.5 · 2^23: x + shifter − shifter rounds |x| < 2^22 to an integer

float from_bits(std::uint32_t b) {
  float f;
  std::memcpy(&f, &b, sizeof f);
  return f;
}
std::uint32_t bits_of(float f) {
  std::uint32_t b;
  std::memcpy(&b, &f, sizeof b);
  return b;
}

// p · 2^k for p in [½, 2] and an integer k in [−152, 130]: exact, but for one rounding where the
// result is subnormal (the last multiplication).
float scale(float p, int k) {
  if (k > 127) return p * from_bits(254u << 23) * from_bits(std::uint32_t(k - 127 + 127) << 23);
  if (k < -126) return p * from_bits(std::uint32_t(k + 126 + 127) << 23) * from_bits(1u << 23);
  return p * from_bits(std::uint32_t(k + 127) << 23);
}

// Σ_{n ≤ 7} c^n rⁿ / n!, Horner's rule, with c = ln 2 (exp2) or 1 (exp).
template <int Which>
float taylor(float r) {
  constexpr float c[2][8] = {{1.0f, 0.693147180559945f, 0.240226506959101f, 0.0555041086648216f, 0.00961812910762848f, 0.00133335581464284f,
                              0.000154035303933816f, 1.52527338040598e-05f},
                             {1.0f, 1.0f, 0.5f, 0.166666666666667f, 0.0416666666666667f, 0.00833333333333333f, 0.00138888888888889f,
                              0.000198412698412698f}};
  float p = c[Which][7];
  for (int n = 6; n >= 0; --n) p = p * r + c[Which][n];
  return p;
}

}  // namespace

extern "C" float exp2f(float x) {
  if (x != x) return x;
  if (x >= 128.0f) return inf;
  if (x < -150.0f) return 0.0f;
  const float k = (x + shifter) - shifter;
  return scale(taylor<0>(x - k), int(k));
}

extern "C" float expf(float x) {
  if (x != x) return x;
  if (x > 88.8f) return inf;
  if (x < -104.0f) return 0.0f;
  constexpr float log2e = 1.44269504088896f, ln2_hi = 0.693145751953125f, ln2_lo = 1.42860682030941723e-06f;  // ln2_hi: 16 bits, k·ln2_hi exact
  const float k = (x * log2e + shifter) - shifter;
  const float r = (x - k * ln2_hi) - k * ln2_lo;
  return scale(taylor<1>(r), int(k));
}

extern "C" float logf(float x) {
  if (x != x) return x;
  if (x < 0.0f) return std::numeric_limits<float>::quiet_NaN();
  if (x == 0.0f) return -inf;
  if (x == inf) return x;
  int e = 0;
  if (x < from_bits(1u << 23)) x *= 8388608.0f, e = -23;  // subnormal: · 2^23
  const std::uint32_t b = bits_of(x);
  e += int((b >> 23) & 0xFF) - 127;
  float m = from_bits((b & 0x7FFFFFu) | (127u << 23));  // [1, 2)
  if (m > 1.41421356f) m *= 0.5f, ++e;
  const float f = m - 1.0f, s = f / (m + 1.0f), z = s * s;
  const float series = z * (0.666666666666667f + z * (0.4f + z * (0.285714285714286f + z * 0.222222222222222f)));
  constexpr float ln2_hi = 0.693145751953125f, ln2_lo = 1.42860682030941723e-06f;
  const float fe = float(e);
  return fe * ln2_hi + ((2.0f * s + s * series) + fe * ln2_lo);
}

extern "C" float erff(float x) {
  if (x != x) return x;
  const float a = x < 0.0f ? -x : x;
  float y;
  if (a < 1.0f) {
    // 2/√π · (−1)ⁿ / (n!(2n + 1)), n = 0 … 10
    constexpr float c[11] = {1.12837916709551f, -0.376126389031838f, 0.112837916709551f, -0.0268661706451313f,
                             0.00522397762544219f, -0.000854832702345085f, 0.000120553329817897f, -1.49256503584063e-05f,
                             1.64621143658892e-06f, -1.63658446912349e-07f, 1.48071928158792e-08f};
    const float z = a * a;
    float p = c[10];
    for (int n = 9; n >= 0; --n) p = p * z + c[n];
    y = a * p;
  } else if (a < 4.0f) {
    const float t = 1.0f / (1.0f + 0.3275911f * a);
    const float poly = t * (0.254829592f + t * (-0.284496736f + t * (1.421413741f + t * (-1.453152027f + t * 1.061405429f))));
    y = 1.0f - poly * expf(-(a * a));
  } else {
    y = 1.0f;
  }
  return x < 0.0f ? -y : y;
}
