// Optimisers with PyTorch's update rules (torch.optim, 1.13), schedules and gradient clipping.
//
// The optimiser state is held in objects of the model's own type (momentum buffer; Adam's
// first and second moments), visited in lock-step with the parameters and the gradients:
// one fused pass over each parameter tensor per step, no allocation. For large models make
// the optimiser itself once on the heap (std::make_unique<AdamW<Model>>()).
//
//   SGD:   momentum, dampening, Nesterov, weight decay as L2 added to the gradient.
//   Adam:  weight decay as L2 added to the gradient.            AdamW: decoupled decay,
//          p ·= 1 − lr·wd before the Adam step, applied to every parameter (SPEC).
#pragma once

#include "../core/config.hpp"

#include <cmath>
#include <cstdint>
#include <numbers>

#include "../kernels/optim.hpp"
#include "../core/params.hpp"

namespace stformer::inline STFORMER_ABI {

struct SGDOptions {
  float momentum = 0, dampening = 0, weight_decay = 0;
  bool nesterov = false;
};

template <class M>
struct SGD {
  SGDOptions options;
  M momentum_buffer;
  std::int64_t steps = 0;

  explicit SGD(SGDOptions o = {}) : options(o) { zero_grad(momentum_buffer); }

  // f(name, buffer) for each state buffer (checkpoints); Self is SGD or const SGD.
  template <class Self, class F>
  static void visit_buffers(Self& self, F&& f) {
    f("momentum_buffer", self.momentum_buffer);
  }

  // One step with the gradients grad_scale · grads (grad_scale: clip_scale's factor); the pass
  // may be split over a thread pool (the result does not depend on it).
  template <class Pool = Serial>
  void step(M& params, const M& grads, float lr, Pool&& pool = Pool{}, float grad_scale = 1) {
    const auto& o = options;
    bool first = steps++ == 0;
    for_each_param_part(
        pool, pool.size(),
        [&](size_t, size_t, size_t n, float* p, const float* g, float* buf) {
          kernels::sgd_update(p, g, buf, n, lr, o.momentum, o.dampening, o.weight_decay, o.nesterov, first, grad_scale);
        },
        params, grads, momentum_buffer);
  }
};

struct AdamOptions {
  float beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f, weight_decay = 0;
  bool decoupled = false;  // true: AdamW
};

namespace detail {
// bᵗ by repeated squaring, in double: the same bits on every C library (pow's last bit
// differs between glibc's and newlib's for a core without double-precision FPU).
inline double power(double b, std::int64_t t) {
  double r = 1;
  for (; t > 0; t >>= 1, b *= b)
    if (t & 1) r *= b;
  return r;
}
}  // namespace detail

template <class M>
struct Adam {
  AdamOptions options;
  M exp_avg, exp_avg_sq;
  std::int64_t steps = 0;

  explicit Adam(AdamOptions o = {}) : options(o) {
    zero_grad(exp_avg);
    zero_grad(exp_avg_sq);
  }

  // f(name, buffer) for each state buffer (checkpoints); Self is Adam or const Adam.
  template <class Self, class F>
  static void visit_buffers(Self& self, F&& f) {
    f("exp_avg", self.exp_avg);
    f("exp_avg_sq", self.exp_avg_sq);
  }

  // One step with the gradients grad_scale · grads (grad_scale: clip_scale's factor); the pass
  // may be split over a thread pool (the result does not depend on it).
  template <class Pool = Serial>
  void step(M& params, const M& grads, float lr, Pool&& pool = Pool{}, float grad_scale = 1) {
    const auto& o = options;
    ++steps;
    double bc1 = 1 - detail::power(o.beta1, steps), bc2 = 1 - detail::power(o.beta2, steps);
    kernels::AdamCoefficients c{o.decoupled ? float(1 - double(lr) * o.weight_decay) : 1.0f,
                                o.decoupled ? 0.0f : o.weight_decay,
                                o.beta1,
                                o.beta2,
                                float(double(lr) / bc1),
                                float(1 / std::sqrt(bc2)),
                                o.eps,
                                grad_scale};
    for_each_param_part(
        pool, pool.size(),
        [&](size_t, size_t, size_t n, float* p, const float* g, float* m, float* v) { kernels::adam_update(p, g, m, v, n, c); },
        params, grads, exp_avg, exp_avg_sq);
  }
};

// AdamW with PyTorch's default weight decay 0.01.
template <class M>
struct AdamW : Adam<M> {
  explicit AdamW(float weight_decay = 0.01f, float beta1 = 0.9f, float beta2 = 0.999f, float eps = 1e-8f)
      : Adam<M>(AdamOptions{beta1, beta2, eps, weight_decay, true}) {}
};

// Learning rate at step t (0-based, stepped once per iteration):
//   constant:      base
//   cosine:        eta_min + (base − eta_min)(1 + cos(π t / total)) / 2         (CosineAnnealingLR)
//   warmup_cosine: base · t / warmup for t < warmup (from 0), then
//                  base (1 + cos(π (t − warmup) / (total − warmup))) / 2 down to 0 at t = total
struct Schedule {
  enum Kind { constant, cosine, warmup_cosine } kind = constant;
  float base = 1e-3f;
  std::int64_t total = 1, warmup = 0;
  float eta_min = 0;

  float operator()(std::int64_t t) const {
    constexpr double pi = std::numbers::pi;
    switch (kind) {
      case constant: return base;
      case cosine: return float(eta_min + (double(base) - eta_min) * (1 + std::cos(pi * double(std::min(t, total)) / double(total))) / 2);
      case warmup_cosine:
        if (t < warmup) return float(double(base) * double(t) / double(warmup));
        return float(double(base) * (1 + std::cos(pi * double(std::min(t, total) - warmup) / double(std::max<std::int64_t>(total - warmup, 1)))) / 2);
    }
    return base;
  }
};

// Gradient clipping (torch.nn.utils.clip_grad_norm_): with the global L2 norm of all
// gradients, every gradient is scaled by clip_scale = max_norm / (norm + 1e-6) when that is
// below 1 (rounded to float). grad_norm's sum of squares runs in `parts` (≤ 64) parts on pool,
// added in part order in double: the norm depends on `parts`, not on the number of threads.
// clip_grad_norm scales the gradients in place and returns the norm; passing clip_scale to an
// optimiser's step instead saves that pass over the gradients, with the same result.
// grad_sum_squares is the sum of squares itself (in double), for a caller that adds parts of it.
template <class M, class Pool = Serial>
double grad_sum_squares(const M& grads, Pool&& pool = Pool{}, size_t parts = 1) {
  STFORMER_CHECK(parts >= 1 && parts <= 64, "grad_norm: parts must be in [1, 64]");
  double partial[64] = {};
  for_each_param_part(
      pool, parts, [&](size_t i, size_t, size_t n, const float* g) { partial[i] += kernels::sum_squares(g, n); }, grads);
  double sum = 0;
  for (size_t i = 0; i < parts; ++i) sum += partial[i];
  return sum;
}

template <class M, class Pool = Serial>
float grad_norm(const M& grads, Pool&& pool = Pool{}, size_t parts = 1) {
  return float(std::sqrt(grad_sum_squares(grads, pool, parts)));
}

inline float clip_scale(float norm, float max_norm) {
  double coef = double(max_norm) / (double(norm) + 1e-6);
  return coef < 1 ? float(coef) : 1.0f;
}

template <class M, class Pool = Serial>
float clip_grad_norm(M& grads, float max_norm, Pool&& pool = Pool{}, size_t parts = 1) {
  float norm = grad_norm(grads, pool, parts), scale = clip_scale(norm, max_norm);
  if (scale < 1)
    for_each_param_part(
        pool, pool.size(),
        [&](size_t, size_t, size_t n, float* g) {
          for (size_t j = 0; j < n; ++j) g[j] *= scale;
        },
        grads);
  return norm;
}

}  // namespace stformer
