// Plain double-precision reference implementations written straight from SPEC.md, one batch
// row at a time, with none of the library's kernels. The tests compare the blocks to these.
#pragma once

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include <doctest/doctest.h>

namespace ref {

using std::size_t;

struct Mat {
  size_t r = 0, c = 0;
  std::vector<double> v;
  Mat() = default;
  Mat(size_t rows, size_t cols, double fill = 0) : r(rows), c(cols), v(rows * cols, fill) {}
  double& operator()(size_t i, size_t j) { return v[i * c + j]; }
  double operator()(size_t i, size_t j) const { return v[i * c + j]; }
};

// Batch row b of a [B, N, D] tensor (or the whole of a 2-D [N, D] one).
template <class T>
Mat row(const T& t, size_t b) {
  const auto& s = t.shape();
  size_t n = s.size() == 3 ? s[1] : s[0], d = s[s.size() - 1];
  Mat m(n, d);
  for (size_t i = 0; i < n * d; ++i) m.v[i] = t.data()[b * n * d + i];
  return m;
}

inline Mat add(const Mat& a, const Mat& b) {
  Mat y = a;
  for (size_t i = 0; i < y.v.size(); ++i) y.v[i] += b.v[i];
  return y;
}
inline Mat relu(Mat x) {
  for (auto& e : x.v) e = e > 0 ? e : 0;
  return x;
}
// y = x Wᵀ + b, weight [Out, In] as stored by stformer::Linear.
template <class L>
Mat linear(const Mat& x, const L& p) {
  size_t out = p.weight.shape()[0];
  Mat y(x.r, out);
  for (size_t i = 0; i < x.r; ++i)
    for (size_t o = 0; o < out; ++o) {
      double s = p.bias(o);
      for (size_t k = 0; k < x.c; ++k) s += x(i, k) * double(p.weight(o, k));
      y(i, o) = s;
    }
  return y;
}
// y = g x / max(|x|, 1e-5)
inline Mat scalenorm(const Mat& x, double g) {
  Mat y = x;
  for (size_t i = 0; i < x.r; ++i) {
    double n = 0;
    for (size_t j = 0; j < x.c; ++j) n += x(i, j) * x(i, j);
    n = std::max(std::sqrt(n), 1e-5);
    for (size_t j = 0; j < x.c; ++j) y(i, j) = g * x(i, j) / n;
  }
  return y;
}
// LayerNorm: w (x − μ)/√(σ² + 1e-5) + b, σ² biased; RMSNorm: w x/√(mean x² + ε) (no bias)
template <class N>
Mat rownorm(const Mat& x, const N& p, bool centred, double eps) {
  Mat y = x;
  for (size_t i = 0; i < x.r; ++i) {
    double mu = 0, var = 0;
    if (centred) {
      for (size_t j = 0; j < x.c; ++j) mu += x(i, j);
      mu /= double(x.c);
    }
    for (size_t j = 0; j < x.c; ++j) var += (x(i, j) - mu) * (x(i, j) - mu);
    const double rs = 1.0 / std::sqrt(var / double(x.c) + eps);
    for (size_t j = 0; j < x.c; ++j) y(i, j) = (x(i, j) - mu) * rs * double(p.weight(j));
    if constexpr (requires { p.bias(0); })
      for (size_t j = 0; j < x.c; ++j) y(i, j) += p.bias(j);
  }
  return y;
}
template <class N>
Mat norm(const Mat& x, const N& p) {
  if constexpr (requires { p.g; })
    return scalenorm(x, p.g(0));
  else if constexpr (requires { p.bias(0); })
    return rownorm(x, p, true, 1e-5);
  else if constexpr (requires { p.weight; })
    return rownorm(x, p, false, double(1.1920929e-7f));
  else
    return x;
}
// The activations of blocks/activation.hpp in double, by their definitions.
inline double activation(double x, const char* kind) {
  const std::string k = kind;
  if (k == "relu") return x > 0 ? x : 0;
  if (k == "gelu") return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
  if (k == "gelu_tanh") return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
  if (k == "silu") return x / (1 + std::exp(-x));
  if (k == "tanh") return std::tanh(x);
  throw std::invalid_argument(k);
}
inline Mat activation(Mat x, const char* kind) {
  for (auto& e : x.v) e = activation(e, kind);
  return x;
}
// softmax over the keys j with sees(j); unseen get 0, all unseen -> zero row.
template <class Sees>
std::vector<double> softmax(const std::vector<double>& s, Sees sees) {
  double m = -std::numeric_limits<double>::infinity();
  for (size_t j = 0; j < s.size(); ++j)
    if (sees(j)) m = std::max(m, s[j]);
  std::vector<double> a(s.size(), 0.0);
  if (m == -std::numeric_limits<double>::infinity()) return a;
  double z = 0;
  for (size_t j = 0; j < s.size(); ++j)
    if (sees(j)) z += (a[j] = std::exp(s[j] - m));
  for (auto& e : a) e /= z;
  return a;
}
// Multi-head attention of one batch row. keys: key-padding mask row (empty = all keys exist).
template <class P>
Mat mha(const Mat& xq, const Mat& xkv, const P& p, size_t H, double scale, bool causal = false,
        const std::vector<bool>& keys = {}) {
  Mat q = linear(xq, p.wq), k = linear(xkv, p.wk), v = linear(xkv, p.wv);
  size_t D = q.c, Dh = D / H;
  Mat o(xq.r, D);
  for (size_t h = 0; h < H; ++h)
    for (size_t i = 0; i < q.r; ++i) {
      std::vector<double> s(k.r);
      for (size_t j = 0; j < k.r; ++j) {
        double d = 0;
        for (size_t c = h * Dh; c < (h + 1) * Dh; ++c) d += q(i, c) * k(j, c);
        s[j] = scale * d;
      }
      auto a = softmax(s, [&](size_t j) { return (!causal || j <= i) && (keys.empty() || keys[j]); });
      for (size_t c = h * Dh; c < (h + 1) * Dh; ++c) {
        double acc = 0;
        for (size_t j = 0; j < k.r; ++j) acc += a[j] * v(j, c);
        o(i, c) = acc;
      }
    }
  return linear(o, p.wo);
}
// The llama family's attention of one sequence (RotaryAttention): q, k, v projected; each head's
// pairs of q and k, (2i, 2i + 1) or with halves (i, i + Dh/2), turned by (p0 + row)·Θ^(−2i/Dh);
// head h reads key/value head h / (H/KVH); causal, and the key mask.
template <class P>
Mat rotary_attention(const Mat& x, const P& p, size_t H, size_t KVH, double theta, bool halves, const std::vector<bool>& keys = {},
                     size_t p0 = 0) {
  Mat q = linear(x, p.wq), k = linear(x, p.wk), v = linear(x, p.wv);
  const size_t D = q.c, Dh = D / H, group = H / KVH;
  const auto turn = [&](Mat& m, size_t heads) {
    for (size_t r = 0; r < m.r; ++r)
      for (size_t h = 0; h < heads; ++h)
        for (size_t i = 0; i < Dh / 2; ++i) {
          const double angle = double(p0 + r) * std::pow(theta, -double(2 * i) / double(Dh)), c = std::cos(angle), s = std::sin(angle);
          const size_t a = h * Dh + (halves ? i : 2 * i), b = h * Dh + (halves ? i + Dh / 2 : 2 * i + 1);
          const double xa = m(r, a), xb = m(r, b);
          m(r, a) = xa * c - xb * s, m(r, b) = xa * s + xb * c;
        }
  };
  turn(q, H);
  turn(k, KVH);
  Mat o(x.r, D);
  for (size_t h = 0; h < H; ++h)
    for (size_t i = 0; i < q.r; ++i) {
      const size_t g = h / group;
      std::vector<double> s(k.r);
      for (size_t j = 0; j < k.r; ++j) {
        double d = 0;
        for (size_t c = 0; c < Dh; ++c) d += q(i, h * Dh + c) * k(j, g * Dh + c);
        s[j] = d / std::sqrt(double(Dh));
      }
      auto a = softmax(s, [&](size_t j) { return j <= i && (keys.empty() || keys[j]); });
      for (size_t c = 0; c < Dh; ++c) {
        double acc = 0;
        for (size_t j = 0; j < k.r; ++j) acc += a[j] * v(j, g * Dh + c);
        o(i, h * Dh + c) = acc;
      }
    }
  return linear(o, p.wo);
}
// a feed-forward layer: the chain's first and last steps (FeedForward), or a hand-written one's fc1 and fc2
template <class P>
Mat ffn(const Mat& x, const P& p, const char* act = "relu") {
  if constexpr (requires { p.fc1; })
    return linear(activation(linear(x, p.fc1), act), p.fc2);
  else
    return linear(activation(linear(x, p.template get<0>()), act), p.template get<2>());
}
template <class P>
Mat encoder(const Mat& x, const P& p, size_t H, bool causal = false, const std::vector<bool>& keys = {}) {
  // SPEC's EncoderBlock: two residuals, sn1 and attn in the first, sn2 and ffn in the second
  const auto& first = p.template get<0>().body;
  const auto& second = p.template get<1>().body;
  Mat n1 = norm(x, first.template get<"sn1">());
  Mat h = add(x, mha(n1, n1, first.template get<"attn">(), H, 1.0 / std::sqrt(double(n1.c / H)), causal, keys));
  return add(h, ffn(norm(h, second.template get<"sn2">()), second.template get<"ffn">()));
}
template <class P>
Mat decoder(const Mat& x, const Mat& m, const P& p, size_t H, const std::vector<bool>& keys = {}) {
  // SPEC's DecoderBlock: a residual of sn1 and self_attn (causal), the cross-attention part of
  // sn2 and cross_attn over m, a residual of sn3 and ffn
  const auto& first = p.template get<0>().body;
  const auto& cross = p.template get<1>();
  const auto& third = p.template get<2>().body;
  double s = 1.0 / std::sqrt(double(x.c / H));
  Mat n1 = norm(x, first.template get<"sn1">());
  Mat h1 = add(x, mha(n1, n1, first.template get<"self_attn">(), H, s, true));
  Mat h2 = add(h1, mha(norm(h1, cross.template get<"sn2">()), m, cross.template get<"cross_attn">(), H, s, false, keys));
  return add(h2, ffn(norm(h2, third.template get<"sn3">()), third.template get<"ffn">()));
}
template <class Nq, class Nkv, class A, class Nff, class Fc>
Mat mab(const Mat& x, const Mat& y, const Nq& nq, const Nkv& nkv, const A& attn, const Nff& nff, const Fc& fc, size_t H, const std::vector<bool>& keys) {
  double s = 1.0 / std::sqrt(double(x.c / H));
  Mat h = add(x, mha(norm(x, nq), norm(y, nkv), attn, H, s, false, keys));
  return add(h, relu(linear(norm(h, nff), fc)));
}
// MAB written by hand (tests/written_mab.hpp) or declared (stformer/blocks/mab.hpp: the part
// CrossAttend<nq, nkv, attn>, then the residual of nff, fc and ReLU)
template <class P>
Mat mab(const Mat& x, const Mat& y, const P& p, size_t H, const std::vector<bool>& keys = {}) {
  if constexpr (requires { p.nq; }) {
    return mab(x, y, p.nq, p.nkv, p.attn, p.nff, p.fc, H, keys);
  } else {
    const auto& a = p.template get<0>();
    const auto& f = p.template get<1>().body;
    return mab(x, y, a.template get<"nq">(), a.template get<"nkv">(), a.template get<"attn">(), f.template get<"nff">(), f.template get<"fc">(), H, keys);
  }
}
template <class P>
Mat isab(const Mat& x, const P& p, size_t H, const std::vector<bool>& keys = {}) {
  return mab(x, mab(row(p.inducing, 0), x, p.mab1, H, keys), p.mab2, H);
}
template <class P>
Mat pma(const Mat& x, const P& p, size_t H, const std::vector<bool>& keys = {}) {
  return mab(row(p.seeds, 0), x, p.mab, H, keys);
}
template <class P>
Mat pointer(const Mat& xq, const Mat& xk, const P& p, const std::vector<bool>& keys = {}) {
  Mat q = linear(xq, p.wq), k = linear(xk, p.wk);
  Mat out(q.r, k.r);
  for (size_t i = 0; i < q.r; ++i) {
    std::vector<double> s(k.r);
    double m = -std::numeric_limits<double>::infinity();
    for (size_t j = 0; j < k.r; ++j) {
      double d = 0;
      for (size_t c = 0; c < q.c; ++c) d += q(i, c) * k(j, c);
      s[j] = d / std::sqrt(double(q.c));
      if (keys.empty() || keys[j]) m = std::max(m, s[j]);
    }
    double z = 0;
    for (size_t j = 0; j < k.r; ++j)
      if (keys.empty() || keys[j]) z += std::exp(s[j] - m);
    for (size_t j = 0; j < k.r; ++j)
      out(i, j) = (keys.empty() || keys[j]) ? s[j] - m - std::log(z) : -std::numeric_limits<double>::infinity();
  }
  return out;
}
inline Mat positional(const Mat& x) {
  Mat y = x;
  for (size_t p = 0; p < x.r; ++p)
    for (size_t i = 0; 2 * i < x.c; ++i) {
      double a = double(p) / std::pow(10000.0, 2.0 * double(i) / double(x.c));
      y(p, 2 * i) += std::sin(a);
      if (2 * i + 1 < x.c) y(p, 2 * i + 1) += std::cos(a);
    }
  return y;
}

// Largest |got − want| must stay within tol · (1 + max |want|).
template <class T>
void check_close(const T& got, size_t b, const Mat& want, double tol = 2e-5) {
  Mat g = row(got, b);
  REQUIRE(g.r == want.r);
  REQUIRE(g.c == want.c);
  double scale = 1, err = 0;
  for (size_t i = 0; i < want.v.size(); ++i) {
    if (std::isinf(want.v[i])) {
      CHECK(g.v[i] == want.v[i]);
      continue;
    }
    scale = std::max(scale, 1 + std::abs(want.v[i]));
    err = std::max(err, std::abs(g.v[i] - want.v[i]));
  }
  CHECK(err <= tol * scale);
}

}  // namespace ref
