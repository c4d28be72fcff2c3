// stformer kernels — row-wise and element-wise operations.
//
//   softmax_row:     s ← softmax(c·s) = exp(c·(s − max s)) / Σ exp(c·(s − max s)), c > 0 (1 by
//                    default); entries equal to −∞ are masked and get exactly 0; a row that is
//                    all −∞ becomes all 0 (never NaN). softmax_rows: the same on R rows.
//   softmax_step:    one tile of keys of the online softmax (running max and sum per row).
//   log_softmax_row: s ← s − max s − log Σ exp(s − max s); an all −∞ row stays −∞.
//   scalenorm_rows:  y[r] = g · x[r] · rnorm[r], rnorm[r] = 1 / max(‖x[r]‖₂, 1e-5).
//   layernorm_rows:  y[r] = w ⊙ (x[r] − μ[r])·rstd[r] + b, μ[r] = mean x[r],
//                    rstd[r] = 1/√(mean (x[r] − μ[r])² + ε) (the variance biased, as PyTorch's;
//                    two passes: no cancellation in E[x²] − μ²). rmsnorm_rows: y[r] = w ⊙ x[r]·
//                    rstd[r], rstd[r] = 1/√(mean x[r]² + ε).
//   relu, add:       y = max(x, 0), y = a + b; add_to: y += a.
// Backward (d = dL/d(output) in, dL/d(input) out, where in place):
//   softmax_backward_row:     d ← scale · a ⊙ (d − Σ_j a_j d_j)         (a: the softmax output)
//   log_softmax_backward_row: d ← d − exp(logp) Σ_j d_j; masked (−∞) entries get 0
//   scalenorm_backward_rows:  dx = g·rnorm·(dy − x·(x·dy)·rnorm²) (dx = g·rnorm·dy where the
//                             norm was clamped); dg += Σ_r (x·dy)·rnorm
//   norm_backward_rows:       LayerNorm: x̂ = (x − μ)·rstd, g = dy ⊙ w, dx = rstd·(g − mean g − x̂·mean(g ⊙ x̂));
//                             dw += Σ_r dy ⊙ x̂, db += Σ_r dy; RMSNorm: x̂ = x·rstd,
//                             dx = rstd·(g − x̂·mean(g ⊙ x̂)), dw += Σ_r dy ⊙ x̂
//   relu_backward:            d ← d ⊙ [y > 0]
#pragma once

#include "../core/config.hpp"

#include <limits>

#include "vec.hpp"

namespace stformer::inline STFORMER_ABI::kernels {

inline constexpr float scalenorm_eps = 1e-5f;
inline constexpr float neg_inf = -std::numeric_limits<float>::infinity();

// The lanes' maxima over the whole vectors of a row of N (−∞ if there are none). On x86 in four
// independent chains (one chain waits a max's latency per vector); elsewhere in one.
template <size_t N>
inline vf max_lanes(const float* s) {
  constexpr size_t full = N / W * W, C = W >= 8 ? 4 : 1;
  vf m[C];
  for (size_t u = 0; u < C; ++u) m[u] = splat(neg_inf);
  size_t j = 0;
  for (; j + C * W <= full; j += C * W)
    for (size_t u = 0; u < C; ++u) m[u] = vmax(m[u], load(s + j + u * W));
  for (size_t u = 0; u + 1 < C; ++u)
    if (j + u * W < full) m[u] = vmax(m[u], load(s + j + u * W));
  if constexpr (C == 4) m[0] = vmax(vmax(m[0], m[1]), vmax(m[2], m[3]));
  return m[0];
}

template <size_t N>
inline float row_max(const float* s) {
  constexpr size_t full = N / W * W;
  float m = neg_inf;
  if constexpr (full != 0) m = hmax(max_lanes<N>(s));
  for (size_t j = full; j < N; ++j) m = s[j] > m ? s[j] : m;
  return m;
}

inline constexpr float log2e = 1.44269504088896341f;

// s[j] ← 2^{(s[j] − m)·k} over the whole vectors of a row of N (j < N / W · W); returns their
// sum with its lanes not yet added (the caller reduces it, alone or with other rows').
template <size_t N>
inline vf exp2_shifted_vectors(float* s, float m, float k) {
  const vf mv = splat(m), kv = splat(k);
  vf acc = splat(0.0f);
  for (size_t j = 0; j < N / W * W; j += W) {
    vf e = vexp2<true>((load(s + j) - mv) * kv);
    store(s + j, e);
    acc += e;
  }
  return acc;
}

// s[j] ← exp(c · (s[j] − m)) = 2^{(s[j] − m)·c·log₂e}; returns the sum.
template <size_t N>
inline float exp_shifted(float* s, float m, float c = 1.0f) {
  const float k = c * log2e;
  float sum = hsum(exp2_shifted_vectors<N>(s, m, k));
  for (size_t j = N / W * W; j < N; ++j) sum += (s[j] = std::exp2((s[j] - m) * k));
  return sum;
}

// y[j] = a, in whole vectors (a wider load of what narrower stores wrote would wait for them)
template <size_t N>
inline void fill(float* y, float a) {
  const vf av = splat(a);
  constexpr size_t full = N / W * W;
  for (size_t j = 0; j < full; j += W) store(y + j, av);
  for (size_t j = full; j < N; ++j) y[j] = a;
}

template <size_t N>
inline void scale(float* s, float a) {
  vf av = splat(a);
  constexpr size_t full = N / W * W;
  size_t j = 0;
  for (; j < full; j += W) store(s + j, load(s + j) * av);
  for (j = full; j < N; ++j) s[j] *= a;
}

// One step of the online softmax on R rows of N scores s (one tile of keys), given each row's
// maximum m and sum l over the keys before it (m = −∞ and l = 0 before the first):
//   m' = max(m, max_j s_j),  s_j ← e^{c(s_j − m')},  corr = e^{c(m − m')},  l ← l·corr + Σ_j s_j,  m ← m'
// corr rescales whatever was summed against the old maximum (0 on a row's first keys, 1 when the
// maximum stays). A row with m' = −∞ (every key so far masked) gets s = 0 and corr = 1, and
// keeps l = 0. Each pass goes over all rows before the next (the maxima, the exponentials, the
// sums): the rows are independent, so short rows overlap, and their horizontal maxima and sums
// are taken together (hmaxs, hsums). e^{c(x−m')} = 2^t with t = (x − m')·(c·log₂e), which
// carries four roundings (the difference, the product, log₂e and c·log₂e), each relative to t:
// an entry's relative error is within (1 + 2·|t|·ln 2)·2⁻²³ (tested), so the largest entries
// (t near 0) are the most exact. c > 0.
template <size_t R, size_t N>
inline void softmax_step(float* s, float c, float* m, float* l, float* corr) {
  constexpr size_t full = N / W * W;
  const float k = c * log2e;
  vf part[R];
  float m1[R], sum[R];
  for (size_t r = 0; r < R; ++r) part[r] = max_lanes<N>(s + r * N);
  hmaxs<R>(part, m1);
  for (size_t r = 0; r < R; ++r) {
    for (size_t j = full; j < N; ++j) m1[r] = s[r * N + j] > m1[r] ? s[r * N + j] : m1[r];
    m1[r] = m[r] > m1[r] ? m[r] : m1[r];
    corr[r] = (m[r] - m1[r]) * k;
  }
  // every row's corr by the same vexp2, the rows padded to whole vectors (2⁰ past them), so that a
  // row's bits do not depend on R (forward-only passes split blocks of queries between threads)
  constexpr size_t RP = (R + W - 1) / W * W;
  alignas(64) float t[RP] = {};
  std::copy_n(corr, R, t);
  for (size_t i = 0; i < RP; i += W) store(t + i, vexp2<true>(load(t + i)));
  std::copy_n(t, R, corr);
  for (size_t r = 0; r < R; ++r) {
    if (m1[r] == neg_inf) {
      fill<N>(s + r * N, 0.0f);
      part[r] = splat(0.0f), corr[r] = 1.0f;
    } else {
      part[r] = exp2_shifted_vectors<N>(s + r * N, m1[r], k);
    }
  }
  hsums<R>(part, sum);
  for (size_t r = 0; r < R; ++r) {
    if (m1[r] != neg_inf)
      for (size_t j = full; j < N; ++j) sum[r] += (s[r * N + j] = std::exp2((s[r * N + j] - m1[r]) * k));
    l[r] = l[r] * corr[r] + sum[r];
    m[r] = m1[r];
  }
}

// softmax(c · s) on R rows of N, c > 0: one softmax_step, then each row times 1/l (a row whose
// entries are all −∞ is all 0).
template <size_t R, size_t N>
inline void softmax_rows(float* s, float c = 1.0f) {
  float m[R], l[R], corr[R];
  for (size_t r = 0; r < R; ++r) m[r] = neg_inf, l[r] = 0.0f;
  softmax_step<R, N>(s, c, m, l, corr);
  for (size_t r = 0; r < R; ++r)
    if (m[r] != neg_inf) scale<N>(s + r * N, 1.0f / l[r]);
}

template <size_t N>
inline void softmax_row(float* s, float c = 1.0f) {
  softmax_rows<1, N>(s, c);
}

// softmax(c · s) on one row of n entries, n known at run time (a decoding step's keys, 1 ≤ n),
// c > 0: softmax_rows' operations on the whole vectors of a row, the row padded with −∞ to a
// whole vector (s has room for ⌈n/W⌉·W entries): an entry's bits are those of the same entry
// of a row of the full pass whose vectors cover it.
inline void softmax_row(float* s, size_t n, float c) {
  const size_t whole = (n + W - 1) / W * W;
  std::fill(s + n, s + whole, neg_inf);
  vf mv = splat(neg_inf);
  for (size_t j = 0; j < whole; j += W) mv = vmax(mv, load(s + j));
  const float m = hmax(mv);
  if (m == neg_inf) {
    std::fill_n(s, n, 0.0f);
    return;
  }
  const float k = c * log2e;
  const vf mm = splat(m), kv = splat(k);
  vf acc = splat(0.0f);
  for (size_t j = 0; j < whole; j += W) {
    const vf e = vexp2<true>((load(s + j) - mm) * kv);
    store(s + j, e);
    acc += e;
  }
  const vf inv = splat(1.0f / hsum(acc));
  for (size_t j = 0; j < whole; j += W) store(s + j, load(s + j) * inv);
}

template <size_t N>
inline void log_softmax_row(float* s) {
  float m = row_max<N>(s);
  if (m == neg_inf) return;
  vf acc = splat(0.0f), mv = splat(m), kv = splat(log2e);
  constexpr size_t full = N / W * W;
  size_t j = 0;
  for (; j < full; j += W) acc += vexp2<true>((load(s + j) - mv) * kv);
  float sum = hsum(acc);
  for (j = full; j < N; ++j) sum += std::exp2((s[j] - m) * log2e);
  float lse = m + std::log(sum);
  for (j = 0; j < N; ++j) s[j] -= lse;
}

template <size_t N>
inline float dot(const float* a, const float* b) {
  vf acc = splat(0.0f);
  constexpr size_t full = N / W * W;
  size_t j = 0;
  for (; j < full; j += W) acc = fma(load(a + j), load(b + j), acc);
  float s = hsum(acc);
  for (j = full; j < N; ++j) s += a[j] * b[j];
  return s;
}

template <size_t N>
inline void axpy(float a, const float* x, float* y) {  // y += a·x
  constexpr size_t full = N / W * W;
  vf av = splat(a);
  for (size_t j = 0; j < full; j += W) store(y + j, fma(av, load(x + j), load(y + j)));
  for (size_t j = full; j < N; ++j) y[j] += a * x[j];
}

// One query over n cached keys and values (a decoding step's head), both held transposed (kt, vt
// [Dh, ld]: position j in column j, columns up to ⌈n/W⌉·W readable): s_j = q · k_j, each entry
// one chain of multiply-adds along Dh as the forward pass's products take it; a = softmax(scale ·
// s) (softmax_row); o_c = Σ_j a_j vᵀ[c, j], a vector of positions at a time. o [Dh] is written
// after q is read (o may be q). s: room for ⌈n/W⌉·W entries.
template <size_t Dh>
inline void attend_cached(const float* q, const float* kt, const float* vt, size_t ld, size_t n, float scale, float* s, float* o) {
  const size_t whole = (n + W - 1) / W * W;
  size_t j = 0;
  for (; j + 4 * W <= whole; j += 4 * W) {
    vf acc[4] = {splat(0.0f), splat(0.0f), splat(0.0f), splat(0.0f)};
    for (size_t c = 0; c < Dh; ++c) {
      const vf qc = splat(q[c]);
      for (size_t u = 0; u < 4; ++u) acc[u] = fma(qc, load(kt + c * ld + j + u * W), acc[u]);
    }
    for (size_t u = 0; u < 4; ++u) store(s + j + u * W, acc[u]);
  }
  for (; j < whole; j += W) {
    vf acc = splat(0.0f);
    for (size_t c = 0; c < Dh; ++c) acc = fma(splat(q[c]), load(kt + c * ld + j), acc);
    store(s + j, acc);
  }
  softmax_row(s, n, scale);
  // F features at a time (the most of 8, 4, 2, 1 that divides Dh): F chains of multiply-adds
  // sharing each vector of a
  constexpr size_t F = Dh % 8 == 0 ? 8 : Dh % 4 == 0 ? 4 : Dh % 2 == 0 ? 2 : 1;
  const size_t full = n / W * W;
  for (size_t c = 0; c < Dh; c += F) {
    vf acc[F];
    for (size_t u = 0; u < F; ++u) acc[u] = splat(0.0f);
    for (j = 0; j < full; j += W) {
      const vf a = load(s + j);
      for (size_t u = 0; u < F; ++u) acc[u] = fma(a, load(vt + (c + u) * ld + j), acc[u]);
    }
    for (size_t u = 0; u < F; ++u) {
      float sum = hsum(acc[u]);
      for (j = full; j < n; ++j) sum += s[j] * vt[(c + u) * ld + j];
      o[c + u] = sum;
    }
  }
}

// (rnorm may be nullptr: a forward-only pass keeps no norms; y may be x: in place)
template <size_t Rows, size_t D>
inline void scalenorm_rows(const float* x, float* y, float g, float* rnorm) {
  for (size_t r = 0; r < Rows; ++r, x += D, y += D) {
    float norm = std::sqrt(dot<D>(x, x));
    const float rn = 1.0f / (norm > scalenorm_eps ? norm : scalenorm_eps);
    if (rnorm) rnorm[r] = rn;
    float a = g * rn;
    vf av = splat(a);
    constexpr size_t full = D / W * W;
    for (size_t j = 0; j < full; j += W) store(y + j, load(x + j) * av);
    for (size_t j = full; j < D; ++j) y[j] = x[j] * a;
  }
}

template <size_t N>
inline float sum(const float* a) {
  vf acc = splat(0.0f);
  constexpr size_t full = N / W * W;
  for (size_t j = 0; j < full; j += W) acc = acc + load(a + j);
  float s = hsum(acc);
  for (size_t j = full; j < N; ++j) s += a[j];
  return s;
}

// y = (x − μ)·rstd ⊙ w + b on one row (b may be null: no bias)
template <size_t D>
inline void normalize_row(const float* x, float* y, float mu, float rs, const float* w, const float* b) {
  constexpr size_t full = D / W * W;
  const vf mv = splat(mu), rv = splat(rs);
  for (size_t j = 0; j < full; j += W) {
    vf v = (load(x + j) - mv) * rv * load(w + j);
    store(y + j, b ? v + load(b + j) : v);
  }
  for (size_t j = full; j < D; ++j) y[j] = (x[j] - mu) * rs * w[j] + (b ? b[j] : 0.0f);
}

// (mean and rstd may be nullptr: a forward-only pass keeps neither; y may be x: in place)
template <size_t Rows, size_t D>
inline void layernorm_rows(const float* x, float* y, const float* w, const float* b, float eps, float* mean, float* rstd) {
  constexpr size_t full = D / W * W;
  for (size_t r = 0; r < Rows; ++r, x += D, y += D) {
    const float mu = sum<D>(x) / float(D);
    const vf mv = splat(mu);
    vf acc = splat(0.0f);
    for (size_t j = 0; j < full; j += W) {
      vf d = load(x + j) - mv;
      acc = fma(d, d, acc);
    }
    float var = hsum(acc);
    for (size_t j = full; j < D; ++j) var += (x[j] - mu) * (x[j] - mu);
    const float rs = 1.0f / std::sqrt(var / float(D) + eps);
    if (mean) mean[r] = mu;
    if (rstd) rstd[r] = rs;
    normalize_row<D>(x, y, mu, rs, w, b);
  }
}

template <size_t Rows, size_t D>
inline void rmsnorm_rows(const float* x, float* y, const float* w, float eps, float* rstd) {
  for (size_t r = 0; r < Rows; ++r, x += D, y += D) {
    const float rs = 1.0f / std::sqrt(dot<D>(x, x) / float(D) + eps);
    if (rstd) rstd[r] = rs;
    normalize_row<D>(x, y, 0.0f, rs, w, nullptr);
  }
}

template <size_t N>
inline void relu(float* x) {
  vf z = splat(0.0f);
  constexpr size_t full = N / W * W;
  size_t j = 0;
  for (; j < full; j += W) store(x + j, vmax(load(x + j), z));
  for (j = full; j < N; ++j) x[j] = x[j] > 0.0f ? x[j] : 0.0f;
}

template <size_t N>
inline void add(const float* a, const float* b, float* y) {
  constexpr size_t full = N / W * W;
  size_t j = 0;
  for (; j < full; j += W) store(y + j, load(a + j) + load(b + j));
  for (j = full; j < N; ++j) y[j] = a[j] + b[j];
}

template <size_t N>
inline void add_to(const float* a, float* y) {
  constexpr size_t full = N / W * W;
  for (size_t j = 0; j < full; j += W) store(y + j, load(y + j) + load(a + j));
  for (size_t j = full; j < N; ++j) y[j] += a[j];
}

template <size_t N>
inline void softmax_backward_row(const float* a, float* d, float scale) {
  float s = dot<N>(a, d);
  constexpr size_t full = N / W * W;
  const vf sv = splat(s), cv = splat(scale);
  for (size_t j = 0; j < full; j += W) store(d + j, cv * load(a + j) * (load(d + j) - sv));
  for (size_t j = full; j < N; ++j) d[j] = scale * a[j] * (d[j] - s);
}

template <size_t N>
inline void log_softmax_backward_row(const float* logp, float* d) {
  float s = 0;
  for (size_t j = 0; j < N; ++j) s += logp[j] == neg_inf ? 0.0f : d[j];
  for (size_t j = 0; j < N; ++j) d[j] = logp[j] == neg_inf ? 0.0f : d[j] - std::exp(logp[j]) * s;
}

template <size_t Rows, size_t D>
inline void scalenorm_backward_rows(const float* x, const float* dy, float g, const float* rnorm, float* dx, float& dg) {
  for (size_t r = 0; r < Rows; ++r, x += D, dy += D, dx += D) {
    float xdy = dot<D>(x, dy), rn = rnorm[r];
    bool clamped = std::sqrt(dot<D>(x, x)) <= scalenorm_eps;
    dg += xdy * rn;
    for (size_t j = 0; j < D; ++j) dx[j] = g * rn * dy[j];
    if (!clamped) axpy<D>(-g * xdy * rn * rn * rn, x, dx);
  }
}

// (mean null: RMSNorm's, x̂ = x·rstd and no mean g; db null: no bias)
template <size_t Rows, size_t D>
inline void norm_backward_rows(const float* x, const float* dy, const float* w, const float* mean, const float* rstd, float* dx,
                               float* dw, float* db) {
  for (size_t r = 0; r < Rows; ++r, x += D, dy += D, dx += D) {
    const float mu = mean ? mean[r] : 0.0f, rs = rstd[r];
    float g_sum = 0, gx_sum = 0;
    for (size_t j = 0; j < D; ++j) {
      const float xh = (x[j] - mu) * rs, g = dy[j] * w[j];
      g_sum += g, gx_sum += g * xh;
      dw[j] += dy[j] * xh;
      if (db) db[j] += dy[j];
    }
    const float g_mean = mean ? g_sum / float(D) : 0.0f, gx_mean = gx_sum / float(D);
    for (size_t j = 0; j < D; ++j) dx[j] = rs * (dy[j] * w[j] - g_mean - (x[j] - mu) * rs * gx_mean);
  }
}

template <size_t N>
inline void relu_backward(const float* y, float* d) {
  for (size_t j = 0; j < N; ++j) d[j] = y[j] > 0.0f ? d[j] : 0.0f;
}

}  // namespace stformer::kernels
