// SPEC Example 2: a language model that predicts the token after a window of L tokens.
// A sample is the window ids[t−L, t) and its next token ids[t], for every position t ≥ L of a
// token stream; training visits the training stream's samples in an order shuffled from the
// seed, batch by batch (a new permutation per pass). Perplexity on a split is
// exp(mean NLL) over every position t ≥ L of its stream.
#pragma once

#include <algorithm>
#include <cmath>
#include <memory>
#include <numeric>
#include <vector>

#include <stformer/checkpoint.hpp>
#include <stformer/stformer.hpp>

namespace lm {

using namespace stformer;

struct TrainOptions {
  float lr = 1e-3f;
  std::int64_t steps = 1000;   // the schedule's length
  std::int64_t warmup = 500;   // linear warm-up steps (SPEC)
  float clip = 1.0f;           // global-norm clipping (SPEC)
  bool sgd = false;            // the seed's recipe: SGD, momentum 0.9, Nesterov, weight decay 1e-4
};

template <size_t V, size_t L, size_t D, size_t H, size_t F, size_t Blocks, size_t B>
struct Run {
  using Model = LanguageModel<V, L, D, H, F, Blocks>;
  std::unique_ptr<Model> model = std::make_unique<Model>(), grad = std::make_unique<Model>();
  std::unique_ptr<ActsOf<Model, B>> acts = std::make_unique<ActsOf<Model, B>>();
  std::unique_ptr<AdamW<Model>> adamw = std::make_unique<AdamW<Model>>(0.01f);
  std::unique_ptr<SGD<Model>> sgd = std::make_unique<SGD<Model>>(SGDOptions{.momentum = 0.9f, .weight_decay = 1e-4f, .nesterov = true});
  std::unique_ptr<Tensor<B, 1, V>> dlogits = std::make_unique<Tensor<B, 1, V>>();
  IdTensor<B, L> window;
  IdTensor<B> next;
  TrainingState state;
  std::vector<std::uint32_t> order;  // shuffled sample positions of the current pass
  size_t cursor = 0;

  explicit Run(std::uint64_t seed) : state{0, Rng(seed, 1)} {
    Rng init(seed, 0);
    init_params(*model, init);
  }

  // Fills window/next with samples at positions ids[t] (t ≥ L).
  void gather(const std::vector<std::int32_t>& ids, const std::uint32_t* positions, size_t count) {
    for (size_t b = 0; b < B; ++b) {
      size_t t = positions[b < count ? b : count - 1];
      for (size_t i = 0; i < L; ++i) window(b, i) = ids[t - L + i];
      next(b) = ids[t];
    }
  }

  // One optimiser step on the next batch of shuffled training samples; returns the loss.
  float step(const std::vector<std::int32_t>& train, const TrainOptions& o) {
    STFORMER_CHECK(train.size() > L + B, "lm: the training stream is shorter than one batch of windows");
    if (order.empty() || cursor + B > order.size()) {  // a new pass: shuffle every position t >= L
      order.resize(train.size() - L);
      std::iota(order.begin(), order.end(), std::uint32_t(L));
      for (size_t i = order.size() - 1; i > 0; --i) std::swap(order[i], order[state.rng.below(std::uint32_t(i + 1))]);
      cursor = 0;
    }
    gather(train, order.data() + cursor, B);
    cursor += B;
    float loss = cross_entropy(acts->forward(*model, window), next, *dlogits);
    STFORMER_CHECK(std::isfinite(loss), "lm: the loss is not finite");
    zero_grad(*grad);
    acts->backward(*model, *grad, *dlogits);
    if (o.clip > 0) clip_grad_norm(*grad, o.clip);
    Schedule schedule{Schedule::warmup_cosine, o.lr, o.steps, o.warmup};
    if (o.sgd)
      sgd->step(*model, *grad, schedule(state.step));
    else
      adamw->step(*model, *grad, schedule(state.step));
    ++state.step;
    return loss;
  }

  // Mean NLL over positions [first, last) of ids (each t ≥ L), in batches; exp of it is the
  // perplexity. The last batch repeats its last sample, which is not counted.
  double mean_nll(const std::vector<std::int32_t>& ids, size_t first = L, size_t last = 0) {
    if (last == 0 || last > ids.size()) last = ids.size();
    first = std::max(first, L);
    double sum = 0;
    std::uint32_t positions[B];
    for (size_t t0 = first; t0 < last; t0 += B) {
      size_t count = std::min(B, last - t0);
      for (size_t b = 0; b < B; ++b) positions[b] = std::uint32_t(t0 + std::min(b, count - 1));
      gather(ids, positions, count);
      const auto& logits = acts->forward(*model, window);
      for (size_t b = 0; b < count; ++b) {
        const float* z = logits.data() + b * V;
        float m = kernels::row_max<V>(z);
        double e = 0;
        for (size_t v = 0; v < V; ++v) e += std::exp(double(z[v]) - m);
        sum += std::log(e) + m - z[next(b)];
      }
    }
    return sum / double(last - first);
  }
};

}  // namespace lm
