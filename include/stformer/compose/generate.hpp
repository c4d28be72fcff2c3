// Generating text with a causal language model: the next token drawn from its logits, and a
// prompt continued token by token through DecodeOf's cache (stformer/compose/decode.hpp).
//
//   Sampler<V> sampler({.temperature = 0.8f, .top_k = 40, .top_p = 0.95f}, seed);
//   DecodeOf<GPT, 1, 256> dec;
//   size_t n = generate(model, dec, sampler, prompt, 100, out, stop);   // n ≤ 100 tokens in out
//
// Sampling (the next token from logits l [V]):
//   temperature 0: greedy, the id of the largest logit (the smallest such id on a tie);
//   else weights w_i = e^{(l_i − max l)/T} over the candidates: the top_k largest logits
//   (top_k = 0: all; ties to the smaller id), then with top_p < 1 the fewest of them, largest
//   first, whose weights reach top_p of their sum (the nucleus); then one uniform draw u of the
//   generator (24 bits) picks the first candidate, in that order, whose cumulative weight exceeds
//   u · their sum.
// The weights come from + and × in double alone (exp_nonpositive, no libm), so the same logits
// and seed draw the same tokens on every platform; the logits are the same bits on every thread
// count, so a model draws the same tokens on every one.
#pragma once

#include "../core/config.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>

#include "decode.hpp"
#include "../core/rng.hpp"

namespace stformer::inline STFORMER_ABI {

struct Sampling {
  float temperature = 0.0f;  // 0: greedy
  size_t top_k = 0;          // candidates: the top_k largest logits (0: all)
  float top_p = 1.0f;        // the nucleus: the fewest candidates whose weights reach top_p of the sum (1: all)
};

// e^x for x ≤ 0, from + and × in double (and the exact nearbyint, ldexp): x = k·ln 2 + r,
// |r| ≤ ln 2 / 2, e^r by its Taylor series to r¹², within 2⁻⁵² of it; 0 below −745.
inline double exp_nonpositive(double x) {
  if (x < -745.0) return 0.0;
  const double k = std::nearbyint(x * 1.4426950408889634);
  const double r = (x - k * 0.693147180369123816490) - k * 1.90821492927058770002e-10;  // ln 2 in two parts
  double p = 1.0;
  for (int i = 12; i >= 1; --i) p = 1.0 + p * r / i;
  return std::ldexp(p, int(k));
}

// The next token from logits [V]: Sampling's rule, its draws from one generator. The buffers
// (the candidates' ids and weights) are its own: 12·V bytes, known at compile time.
template <size_t V>
struct Sampler {
  Sampling how;
  Rng rng;
  constexpr Sampler(Sampling s = {}, std::uint64_t seed = 0) : how(s), rng(seed) {}

  // The token, or −1 when a logit is NaN or infinite (nothing drawn).
  std::int32_t next(const float* logits) {
    for (size_t i = 0; i < V; ++i)
      if (!std::isfinite(logits[i])) return -1;
    std::int32_t best = 0;
    for (size_t i = 1; i < V; ++i)
      if (logits[i] > logits[best]) best = std::int32_t(i);
    if (how.temperature <= 0.0f) return best;
    // the candidates, largest logit first (the smaller id first on a tie) when they are cut
    size_t n = V;
    for (size_t i = 0; i < V; ++i) ids[i] = std::int32_t(i);
    const auto before = [&](std::int32_t a, std::int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
    const bool nucleus = how.top_p < 1.0f;
    if (how.top_k > 0 && how.top_k < V) {
      n = how.top_k;
      std::partial_sort(ids, ids + n, ids + V, before);
    } else if (nucleus) {
      std::sort(ids, ids + V, before);
    }
    const double t = how.temperature, top = logits[best];
    double sum = 0;
    for (size_t i = 0; i < n; ++i) sum += (weights[i] = exp_nonpositive((double(logits[ids[i]]) - top) / t));
    if (nucleus) {  // the fewest, largest first, whose weights reach top_p of the sum
      double kept = 0;
      size_t m = 0;
      while (m < n && kept < double(how.top_p) * sum) kept += weights[m++];
      n = std::max<size_t>(m, 1), sum = kept;
    }
    const double u = double(rng.uniform()) * sum;
    double c = 0;
    for (size_t i = 0; i < n; ++i)
      if ((c += weights[i]) > u) return ids[i];
    return ids[n - 1];  // u·sum rounded up to the sum
  }

 private:
  std::int32_t ids[V];
  double weights[V];
};

// From an empty cache: the prompt's tokens stepped one by one, then up to new_tokens tokens
// drawn by the sampler into out, each stepped in turn, until one of stop is drawn (it is written)
// or the cache is full. Returns the tokens written; 0 when the prompt is empty, does not fit the
// cache, or a token or logit is out of range. The model: one sequence of token ids in, the
// logits [1, 1, V] of the next token out.
template <class Model, size_t MaxLen, size_t V>
size_t generate(const Model& p, DecodeOf<Model, 1, MaxLen>& dec, Sampler<V>& sampler, std::span<const std::int32_t> prompt,
                size_t new_tokens, std::int32_t* out, std::span<const std::int32_t> stop = {}) {
  using Input = typename DecodeOf<Model, 1, MaxLen>::Input;
  static_assert(std::is_same_v<typename Input::value_type, std::int32_t>, "generate: a model of token ids");
  static_assert(step::count<typename DecodeOf<Model, 1, MaxLen>::Output> == V, "generate: the model's logits are the sampler's V");
  dec.reset();
  if (prompt.empty() || prompt.size() > MaxLen) return 0;
  const float* logits = nullptr;
  Input x;
  for (const std::int32_t token : prompt) {
    if (token < 0 || size_t(token) >= V) return 0;
    x(0, 0) = token;
    logits = dec.step(p, x)->data();
  }
  size_t made = 0;
  while (made < new_tokens) {
    const std::int32_t token = sampler.next(logits);
    if (token < 0) return made;
    out[made++] = token;
    if (std::find(stop.begin(), stop.end(), token) != stop.end() || made == new_tokens) break;
    x(0, 0) = token;
    const auto* y = dec.step(p, x);
    if (y == nullptr) break;  // the cache is full
    logits = y->data();
  }
  return made;
}

}  // namespace stformer
