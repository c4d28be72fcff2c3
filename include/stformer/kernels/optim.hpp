// stformer kernels — fused optimiser updates, one pass over a parameter tensor (PyTorch 1.13's
// single-tensor formulas; scalars precomputed in double by the caller).
//
//   sgd_update:  d = g + wd·p;  buf = d (first step) or momentum·buf + (1 − dampening)·d;
//                d = d + momentum·buf (Nesterov) or buf;  p −= lr·d      (momentum = 0: no buf)
// Both read the gradient as scale·g (scale: gradient clipping's factor, 1 without clipping).
//   sum_squares: Σ g² over n floats, in float vectors over blocks of 1,024, blocks summed in double
//   adam_update: p ·= decay (AdamW: 1 − lr·wd, else 1);  g += l2·p (Adam's weight decay);
//                m = β1·m + (1 − β1)·g;  v = β2·v + (1 − β2)·g²;
//                p −= step_size · m / (sqrt(v) / sqrt(bc2) + eps)
#pragma once

#include "../core/config.hpp"

#include <cmath>

#include "vec.hpp"

namespace stformer::inline STFORMER_ABI::kernels {

struct AdamCoefficients {
  float decay, l2, beta1, beta2, step_size, inv_sqrt_bc2, eps, scale = 1;
};

inline double sum_squares(const float* g, size_t n) {
  constexpr size_t block = 1024;
  double total = 0;
  for (size_t b = 0; b < n; b += block) {
    const size_t e = n - b < block ? n : b + block, full = b + (e - b) / (4 * W) * (4 * W);
    vf acc[4] = {splat(0.0f), splat(0.0f), splat(0.0f), splat(0.0f)};
    size_t j = b;
    for (; j < full; j += 4 * W)
      for (size_t a = 0; a < 4; ++a) {
        vf x = load(g + j + a * W);
        acc[a] = fma(x, x, acc[a]);
      }
    float s = hsum((acc[0] + acc[1]) + (acc[2] + acc[3]));
    for (; j < e; ++j) s += g[j] * g[j];
    total += s;
  }
  return total;
}

inline void adam_update(float* p, const float* g, float* m, float* v, size_t N, const AdamCoefficients& c) {
  const vf decay = splat(c.decay), l2 = splat(c.l2), b1 = splat(c.beta1), b2 = splat(c.beta2), nb1 = splat(1 - c.beta1),
           nb2 = splat(1 - c.beta2), sc = splat(c.scale);
#if STFORMER_SIMD
  const vf step = splat(c.step_size), isb = splat(c.inv_sqrt_bc2), eps = splat(c.eps);
#endif
  const size_t full = N / W * W;
  for (size_t j = 0; j < full; j += W) {
    vf pj = load(p + j) * decay, gj = fma(l2, load(p + j), load(g + j) * sc);
    vf mj = fma(b1, load(m + j), nb1 * gj);
    vf vj = fma(b2, load(v + j), nb2 * gj * gj);
    store(m + j, mj);
    store(v + j, vj);
#if STFORMER_SIMD
    store(p + j, pj - step * mj / (xsimd::sqrt(vj) * isb + eps));
#else
    // lane by lane: the plain one-lane vf, or Helium's, which has no vector division or root
    float pt[W], mt[W], vt[W];
    store(pt, pj), store(mt, mj), store(vt, vj);
    for (size_t l = 0; l < W; ++l) p[j + l] = pt[l] - c.step_size * mt[l] / (std::sqrt(vt[l]) * c.inv_sqrt_bc2 + c.eps);
#endif
  }
  for (size_t j = full; j < N; ++j) {
    float gj = g[j] * c.scale + c.l2 * p[j];
    m[j] = c.beta1 * m[j] + (1 - c.beta1) * gj;
    v[j] = c.beta2 * v[j] + (1 - c.beta2) * gj * gj;
    p[j] = p[j] * c.decay - c.step_size * m[j] / (std::sqrt(v[j]) * c.inv_sqrt_bc2 + c.eps);
  }
}

inline void sgd_update(float* p, const float* g, float* buf, size_t N, float lr, float momentum, float dampening, float wd, bool nesterov,
                       bool first, float scale = 1) {
  for (size_t j = 0; j < N; ++j) {
    float d = g[j] * scale + wd * p[j];
    if (momentum != 0.0f) {
      buf[j] = first ? d : momentum * buf[j] + (1 - dampening) * d;
      d = nesterov ? d + momentum * buf[j] : buf[j];
    }
    p[j] -= lr * d;
  }
}

}  // namespace stformer::kernels
