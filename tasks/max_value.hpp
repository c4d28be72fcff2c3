// The max-value task of SPEC Example 1: sets of N = 50 points x = randn(50, 2) + randn(1, 2);
// the target is the point with the largest Euclidean norm. Two models, as the two versions
// of the reference project: `pointer` (PointerModel, NLL of the target's index, AdamW 0.01,
// cosine over 300 iterations, one batch of 500 training sets) and `set` (SetTransformer
// regressing the point, mean Euclidean distance, Adam 1e-3, 500 fresh sets per iteration,
// 2,000 iterations). Everything is drawn from one seeded generator per purpose.
#pragma once

#include <algorithm>
#include <array>
#include <chrono>
#include <csignal>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include <stformer/io/checkpoint.hpp>
#include <stformer/train/training.hpp>
#include <stformer/stformer.hpp>
#include <stformer/train/parallel.hpp>
#include <stformer/quantized/quantize.hpp>
#include <stformer/quantized/checkpoint.hpp>

#include "max_value_models.hpp"

namespace max_value {

using namespace stformer;

constexpr size_t N = 50, Batch = 500;
using QPointerNet = Quantized<PointerNet>;  // the models in integers (quantize below)
using QSetNet = Quantized<SetNet>;

// B sets with, for each, the index and the coordinates of its largest-norm point.
template <size_t B>
struct Sets {
  Tensor<B, N, 2> x;
  IdTensor<B> target;
  Tensor<B, 1, 2> point;

  void draw(Rng& rng) {
    for (size_t b = 0; b < B; ++b) {
      float sx = rng.normal(), sy = rng.normal();
      for (size_t i = 0; i < N; ++i) x(b, i, 0) = rng.normal() + sx, x(b, i, 1) = rng.normal() + sy;
      label(b);
    }
  }
  void label(size_t b) {
    float best = -1;
    for (size_t i = 0; i < N; ++i) {
      float n = x(b, i, 0) * x(b, i, 0) + x(b, i, 1) * x(b, i, 1);
      if (n > best) best = n, target(b) = std::int32_t(i);
    }
    point(b, 0, 0) = x(b, size_t(target(b)), 0);
    point(b, 0, 1) = x(b, size_t(target(b)), 1);
  }
};

// Index of the point of set b nearest to (px, py).
template <size_t B>
size_t nearest(const Sets<B>& s, size_t b, float px, float py) {
  size_t arg = 0;
  float best = INFINITY;
  for (size_t i = 0; i < N; ++i) {
    float dx = s.x(b, i, 0) - px, dy = s.x(b, i, 1) - py, d = dx * dx + dy * dy;
    if (d < best) best = d, arg = i;
  }
  return arg;
}

// What a model predicts for set b: the chosen index and the predicted point.
struct Prediction {
  size_t index;
  float px, py;
};

// The two models behind one interface: output, loss and gradient, prediction, SPEC defaults.
template <class Net>
struct Task;

template <>
struct Task<PointerNet> {
  static constexpr const char* name = "pointer";
  static constexpr int iterations = 300;
  static constexpr float lr = 0.01f;
  static constexpr bool fresh = false;  // SPEC: one batch of 500 training sets
  using Optimizer = AdamW<PointerNet>;
  static std::unique_ptr<Optimizer> optimizer() { return std::make_unique<Optimizer>(0.01f); }
  static constexpr Schedule::Kind schedule = Schedule::cosine;  // SPEC: cosine annealing over the run

  template <size_t B>
  using Out = Tensor<B, 1, N>;  // log-probabilities over the points
  template <size_t B>
  static float loss(const Out<B>& logp, const Sets<B>& s, Out<B>& d, size_t of) { return nll_loss(logp, s.target, d, of); }
  template <size_t B>
  static Prediction predict(const Out<B>& logp, const Sets<B>& s, size_t b) {
    const size_t arg = argmax(logp.data() + b * N, N);
    return {arg, s.x(b, arg, 0), s.x(b, arg, 1)};
  }
};

template <>
struct Task<SetNet> {
  static constexpr const char* name = "set";
  static constexpr int iterations = 2000;
  static constexpr float lr = 1e-3f;
  static constexpr bool fresh = true;  // SPEC: 500 fresh sets drawn every iteration
  using Optimizer = Adam<SetNet>;
  static std::unique_ptr<Optimizer> optimizer() { return std::make_unique<Optimizer>(); }
  static constexpr Schedule::Kind schedule = Schedule::constant;

  template <size_t B>
  using Out = Tensor<B, 1, 2>;  // the predicted point
  template <size_t B>
  static float loss(const Out<B>& y, const Sets<B>& s, Out<B>& d, size_t of) { return euclidean_loss(y, s.point, d, of); }
  template <size_t B>
  static Prediction predict(const Out<B>& y, const Sets<B>& s, size_t b) {
    float px = y(b, 0, 0), py = y(b, 0, 1);
    return {nearest(s, b, px, py), px, py};
  }
};

// accuracy: share of sets whose predicted index is the target (for `set`: the point nearest
// to the prediction, i.e. the nearest-point hit rate); distance: mean distance from the
// predicted point to the true one.
struct Metrics {
  double accuracy = 0, distance = 0;
  size_t sets = 0;

  template <size_t B>
  void add(const Prediction& p, const Sets<B>& s, size_t b) {
    accuracy += p.index == size_t(s.target(b));
    distance += std::hypot(p.px - s.point(b, 0, 0), p.py - s.point(b, 0, 1));
    ++sets;
  }
  Metrics& mean() {
    accuracy /= double(sets), distance /= double(sets);
    return *this;
  }
};

struct TrainOptions {
  std::uint64_t seed = 0;
  int iterations = 0;  // 0: SPEC's
  float lr = 0;        // 0: SPEC's
  int fresh = -1;      // -1: SPEC's; 1: draw new training sets every iteration
  int schedule = -1;   // -1: SPEC's; else a Schedule::Kind (constant or cosine to 0 over the run)
  int report_every = 25;
  int save_every = 0;  // > 0: call train's `save` every that many iterations
  bool quiet = false;
  size_t threads = 1;  // any number: the results are the same
  size_t lanes = 2;    // Run's lanes (1 to Run::Chunks): part of the run, stored in its checkpoint
};

// o with SPEC's value for every option left at "SPEC's" (0 or -1).
template <class Net>
TrainOptions with_defaults(TrainOptions o) {
  using T = Task<Net>;
  if (o.iterations <= 0) o.iterations = T::iterations;
  if (!(o.lr > 0)) o.lr = T::lr;
  if (o.fresh < 0) o.fresh = T::fresh;
  if (o.schedule < 0) o.schedule = T::schedule;
  return o;
}

// Model, optimiser and the batch, allocated once; training and evaluation allocate nothing
// per iteration. A batch of 500 sets runs as 250 chunks of 2 over `lanes` lanes (2 unless
// chosen; see stformer/train/parallel.hpp): each lane keeps one chunk's activations (1.1 MB for
// the set model, about a Zen 5 core's L2, instead of the whole batch's 290 MB) and its own
// gradient, and does forward, loss and backward chunk by chunk; the lanes' gradients are summed
// in lane order. The work depends on the number of lanes and not on the number of threads, so
// the results are bit-identical whatever `threads` is; threads beyond the lanes would wait, so
// the pool has min(threads, lanes).
template <class Net>
struct Run {
  using T = Task<Net>;
  static constexpr size_t Chunk = 2, Chunks = Batch / Chunk;
  static_assert(Batch % Chunk == 0);

  static constexpr bool pointer = std::is_same_v<Net, PointerNet>;
  using Quantized = stformer::Quantized<Net>;
  struct Lane {
    Net grad;
    ActsOf<Net, Chunk, N> acts;    // training
    InferOf<Net, Chunk, N> infer;  // evaluation and prediction (forward only: the same outputs)
    InferOf<Quantized, Chunk, N> qinfer;  // the same with `quantized`
    Sets<Chunk> sets;
    typename T::template Out<Chunk> dout;
    double loss;
  };

  std::unique_ptr<Net> model = std::make_unique<Net>();
  std::unique_ptr<Quantized> quantized;  // set: infer() runs this int8 model instead
  std::vector<Lane> lanes;
  std::unique_ptr<typename T::Optimizer> opt = T::optimizer();
  std::unique_ptr<Sets<Batch>> sets = std::make_unique<Sets<Batch>>();
  std::unique_ptr<typename T::template Out<Batch>> out = std::make_unique<typename T::template Out<Batch>>();
  TrainingState state;
  std::uint64_t seed;
  ThreadPool pool;

  // Throws std::invalid_argument unless 1 ≤ lanes ≤ Chunks.
  explicit Run(std::uint64_t seed, size_t threads = 1, size_t lane_count = 2)
      : lanes(checked_lanes(lane_count)), state{0, Rng(seed, 1)}, seed(seed), pool(std::min(threads, lane_count)) {
    Rng init(seed, 0);
    init_params(*model, init);
  }

  static size_t checked_lanes(size_t n) {
    if (n < 1 || n > Chunks)
      throw std::invalid_argument("max_value: " + std::to_string(n) + " lanes; a batch has " + std::to_string(Chunks) +
                                  " chunks, so 1 to " + std::to_string(Chunks) + " lanes");
    return n;
  }

  // Chunk c of *sets into lane l's own sets.
  void take_chunk(Lane& lane, size_t c) {
    const size_t first = c * Chunk;
    std::copy_n(sets->x.data() + first * N * 2, Chunk * N * 2, lane.sets.x.data());
    std::copy_n(sets->target.data() + first, Chunk, lane.sets.target.data());
    std::copy_n(sets->point.data() + first * 2, Chunk * 2, lane.sets.point.data());
  }

  // Loss and gradient on *sets: the lanes' gradients summed, in lane order, into grad().
  // Returns the batch's mean loss.
  float gradient() {
    return float(chunked_gradient(lanes, Chunks, pool, [this](Lane& lane, size_t c) {
      take_chunk(lane, c);
      const float loss = T::loss(lane.acts.forward(*model, lane.sets.x), lane.sets, lane.dout, Batch);
      lane.acts.backward(*model, lane.grad, lane.dout);
      return loss;
    }));
  }
  Net& grad() { return lanes[0].grad; }

  // One optimiser step on *sets; returns the loss before it. A non-finite loss or gradient
  // throws NonFiniteError (stformer/train/training.hpp) before the step, naming it.
  float step(float lr) {
    float loss = gradient();
    check_finite(state.step + 1, loss, grad_norm(grad()), grad());
    opt->step(*model, grad(), lr);
    return loss;
  }

  // The model's outputs for *sets, into *out: forward-only passes (Infer), chunk by chunk over
  // the lanes, bit for bit the outputs of the training activations' forward; with `quantized`
  // (unless float_model), the int8 model's, dequantized (log-probabilities, or the point).
  const typename T::template Out<Batch>& infer(bool float_model = false) {
    pool.run(lanes.size(), [this, float_model](size_t l) {
      Lane& lane = lanes[l];
      for (size_t c = l; c < Chunks; c += lanes.size()) {
        take_chunk(lane, c);
        const auto& y = quantized && !float_model ? lane.qinfer.forward(*quantized, lane.sets.x)  // integers between the input's
                                                  : lane.infer.forward(*model, lane.sets.x);     // quantization and the output's
        std::copy(y.begin(), y.end(), out->begin() + c * y.size());
      }
    });
    return *out;
  }

  // Trains from state.step (0, or where a checkpoint stopped) to the last iteration; calls
  // report(iteration, loss, iterations per second, seconds left) every report_every iterations
  // and at the end, and save() every save_every iterations. Stops early, after a whole
  // iteration, when *stop becomes non-zero (stformer::stop_signal()). Returns the last loss.
  // Without fresh sets, the one training batch is drawn first from Rng(seed, 1), also on
  // resuming, so a resumed run goes on exactly as if it had never stopped.
  float train(const TrainOptions& o, const std::function<void(int, float, double, double)>& report,
              const std::function<void()>& save = {}, const volatile std::sig_atomic_t* stop = nullptr) {
    const TrainOptions r = with_defaults<Net>(o);
    const int iterations = r.iterations;
    const bool fresh = r.fresh == 1;
    Schedule schedule{Schedule::Kind(r.schedule), r.lr, iterations};
    if (!fresh) {
      Rng first(seed, 1);
      sets->draw(first);
      if (state.step == 0) state.rng = first;
    }
    float loss = 0;
    const std::int64_t start_step = state.step;
    auto start = std::chrono::steady_clock::now();
    while (state.step < iterations && !(stop && *stop)) {
      if (fresh) sets->draw(state.rng);
      loss = step(schedule(state.step));
      const int done = int(++state.step);
      if (done % o.report_every == 0 || done == iterations) {
        double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        double rate = double(state.step - start_step) / seconds;
        report(done, loss, rate, (iterations - done) / rate);
      }
      if (save && o.save_every > 0 && done % o.save_every == 0 && done < iterations) save();
    }
    return loss;
  }

  // Metrics on `count` fresh sets from rng (in batches of 500).
  Metrics evaluate(Rng& rng, size_t count) {
    Metrics m;
    for (size_t done = 0; done < count; done += Batch) {
      sets->draw(rng);
      infer();
      for (size_t b = 0; b < Batch && done + b < count; ++b) m.add(T::predict(*out, *sets, b), *sets, b);
    }
    return m.mean();
  }
};

// Whether a checkpoint holds an int8 model (max_value quantize's): an I8 proj.coarse.weight
// (Quantized<Net>: the first linear layer, two int8 tensors).
inline bool int8_checkpoint(const safetensors::File& f) {
  const auto* proj = f.find("proj.coarse.weight");
  return proj != nullptr && proj->dtype == safetensors::Dtype::I8;
}

// Post-training quantization (stformer/quantized/quantize.hpp): calibrated on the 500 training sets
// of `seed` (the first batch train draws), 25 at a time.
template <class Net>
std::unique_ptr<Quantized<Net>> quantize(const Net& f, std::uint64_t seed) {
  constexpr size_t C = 25;
  auto sets = std::make_unique<Sets<Batch>>();
  Rng first(seed, 1);
  sets->draw(first);
  Calibration<Net, C, N> calibration(f);
  auto x = std::make_unique<Tensor<C, N, 2>>();
  for (size_t c = 0; c < Batch; c += C) {
    std::copy_n(sets->x.data() + c * N * 2, C * N * 2, x->data());
    calibration.observe(*x);
  }
  return calibration.quantize();
}

}  // namespace max_value
