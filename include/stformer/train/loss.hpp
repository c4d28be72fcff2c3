// Losses, and arg-max and accuracy for classifiers. Each loss returns the mean loss over its rows and writes dL/d(input) into grad (same
// shape as the input). Rows are all axes but the last; targets are one int32 per row.
//
//   mse_loss:        L = mean over elements (p − t)²;            dp = 2(p − t)/n
//   euclidean_loss:  L = mean over rows ‖p_r − t_r‖₂;            dp_r = (p_r − t_r)/(R ‖p_r − t_r‖),
//                                                                0 where the distance is 0
//   nll_loss:        L = −mean_r logp[r, t_r];                    dlogp[r, t_r] = −1/R
//   cross_entropy:   L = mean_r (logsumexp z_r − z_r[t_r]);       dz_r = (softmax z_r − onehot t_r)/R
//                    fused and stable: row maximum subtracted, one exp per logit (V = 33,278 ok)
// A target outside [0, C) is an error (stformer::fail). The row losses take an optional
// divisor `of` in place of R: a batch computed in chunks passes the whole batch's row count,
// so that the chunks' losses and gradients add up to the batch's.
#pragma once

#include "../core/config.hpp"

#include <cmath>
#include <type_traits>

#include "../kernels/rowwise.hpp"
#include "../core/tensor.hpp"

namespace stformer::inline STFORMER_ABI {

namespace detail {
template <size_t... S>
constexpr size_t last_dim() {
  constexpr size_t d[] = {S...};
  return d[sizeof...(S) - 1];
}
}  // namespace detail

// e = exp(z − max z) over a row of C logits (stable); returns Σ e, summed in double (C may be
// 33,278), and the maximum in m. Then −log softmax(z)[t] = log(Σ e) + m − z[t].
template <size_t C>
double exp_shifted_sum(const float* z, float* e, float& m) {
  m = kernels::row_max<C>(z);
  for (size_t c = 0; c < C; ++c) e[c] = z[c];
  kernels::exp_shifted<C>(e, m);
  double total = 0;
  for (size_t c = 0; c < C; ++c) total += e[c];
  return total;
}

template <size_t... S>
float mse_loss(const Tensor<S...>& pred, const Tensor<S...>& target, Tensor<S...>& grad) {
  constexpr size_t n = (S * ...);
  double sum = 0;
  for (size_t i = 0; i < n; ++i) {
    float d = pred.data()[i] - target.data()[i];
    sum += double(d) * d;
    grad.data()[i] = 2.0f * d / float(n);
  }
  return float(sum / double(n));
}

template <size_t... S>
float euclidean_loss(const Tensor<S...>& pred, const Tensor<S...>& target, Tensor<S...>& grad, size_t of = 0) {
  constexpr size_t C = detail::last_dim<S...>(), R = (S * ...) / C;
  const double n = double(of ? of : R);
  double sum = 0;
  for (size_t r = 0; r < R; ++r) {
    const float *p = pred.data() + r * C, *t = target.data() + r * C;
    float* g = grad.data() + r * C;
    double d2 = 0;
    for (size_t c = 0; c < C; ++c) d2 += double(p[c] - t[c]) * (p[c] - t[c]);
    double d = std::sqrt(d2);
    sum += d;
    for (size_t c = 0; c < C; ++c) g[c] = d > 0 ? float((p[c] - t[c]) / (n * d)) : 0.0f;
  }
  return float(sum / n);
}

template <size_t... S, class Target>
float nll_loss(const Tensor<S...>& logp, const Target& target, Tensor<S...>& grad, size_t of = 0) {
  constexpr size_t C = detail::last_dim<S...>(), R = (S * ...) / C;
  static_assert(ids_shape_is<Target, R>, "nll_loss: targets must be IdTensor<R>, one class per row of log-probabilities [..., C]");
  const double n = double(of ? of : R);
  grad.fill(0.0f);
  double sum = 0;
  for (size_t r = 0; r < R; ++r) {
    std::int32_t t = target(r);
    STFORMER_CHECK(t >= 0 && size_t(t) < C, "nll_loss: target outside [0, C)");
    sum -= logp.data()[r * C + size_t(t)];
    grad.data()[r * C + size_t(t)] = float(-1.0 / n);
  }
  return float(sum / n);
}

template <size_t... S, class Target>
float cross_entropy(const Tensor<S...>& logits, const Target& target, Tensor<S...>& grad, size_t of = 0) {
  constexpr size_t C = detail::last_dim<S...>(), R = (S * ...) / C;
  static_assert(ids_shape_is<Target, R>, "cross_entropy: targets must be IdTensor<R>, one class per row of logits [..., C]");
  const double n = double(of ? of : R);
  double sum = 0;
  for (size_t r = 0; r < R; ++r) {
    std::int32_t t = target(r);
    STFORMER_CHECK(t >= 0 && size_t(t) < C, "cross_entropy: target outside [0, C)");
    const float* z = logits.data() + r * C;
    float* g = grad.data() + r * C;
    float m;
    double total = exp_shifted_sum<C>(z, g, m);  // g = exp(z − m)
    sum += std::log(total) + m - z[t];
    kernels::scale<C>(g, float(1.0 / (total * n)));
    g[t] -= float(1.0 / n);
  }
  return float(sum / n);
}

// The index of the largest of v[0..n) (the first of equal ones; a NaN is never the largest),
// floats or integers (a quantized model's logits).
template <class T>
size_t argmax(const T* v, size_t n) {
  size_t best = 0;
  for (size_t i = 1; i < n; ++i)
    if constexpr (std::is_floating_point_v<T>) {
      if (v[i] > v[best] || (std::isnan(v[best]) && !std::isnan(v[i]))) best = i;
    } else if (v[i] > v[best]) {
      best = i;
    }
  return best;
}

// The share of rows of scores [..., C] (logits, log-probabilities or probabilities) whose
// arg-max is the row's target, targets as for cross_entropy.
template <size_t... S, class Target>
double accuracy(const Tensor<S...>& scores, const Target& target) {
  constexpr size_t C = detail::last_dim<S...>(), R = (S * ...) / C;
  static_assert(ids_shape_is<Target, R>, "accuracy: targets must be IdTensor<R>, one class per row of scores [..., C]");
  size_t right = 0;
  for (size_t r = 0; r < R; ++r) right += argmax(scores.data() + r * C, C) == size_t(target(r));
  return double(right) / double(R);
}

}  // namespace stformer
