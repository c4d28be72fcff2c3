// Training checkpoints: k steps, save, load into fresh objects, k steps gives bit-identical
// parameters to 2k steps in one run (data drawn from the checkpointed generator), for AdamW
// and for SGD with momentum; a bad training checkpoint changes nothing.
#include <doctest/doctest.h>

#include <cstring>
#include <filesystem>

#include <unistd.h>

#include <stformer/io/checkpoint.hpp>
#include <stformer/stformer.hpp>
#include <stformer/train/training.hpp>

#include "util.hpp"

using namespace stformer;

namespace {

using Model = SetTransformer<2, 16, 2, 4, 2>;
constexpr size_t B = 8, N = 10;

// One step on sets drawn from state.rng: the largest-norm point, Euclidean loss.
template <class Optimizer>
void train(Model& p, Optimizer& opt, TrainingState& state, int steps) {
  auto g = test::make<Model>();
  auto a = test::make<TrainingOf<Model, B, N>>();
  Tensor<B, N, 2> x;
  Tensor<B, 1, 2> y, dy;
  Schedule schedule{Schedule::warmup_cosine, 0.01f, 40, 5};
  for (int s = 0; s < steps; ++s, ++state.step) {
    for (size_t b = 0; b < B; ++b) {
      float best = -1;
      for (size_t i = 0; i < N; ++i) {
        x(b, i, 0) = state.rng.normal(), x(b, i, 1) = state.rng.normal();
        float n = x(b, i, 0) * x(b, i, 0) + x(b, i, 1) * x(b, i, 1);
        if (n > best) best = n, y(b, 0, 0) = x(b, i, 0), y(b, 0, 1) = x(b, i, 1);
      }
    }
    euclidean_loss(a->forward(p, x), y, dy);
    zero_grad(*g);
    a->backward(p, *g, dy);
    clip_grad_norm(*g, 1.0f);
    opt.step(p, *g, schedule(state.step));
  }
}

bool bit_identical(const Model& a, const Model& b) {
  bool same = true;
  for_each_param([&](const Path&, Init, const auto& x, const auto& y) { same = same && std::memcmp(x.data(), y.data(), x.size() * 4) == 0; },
                 a, b);
  return same;
}

template <class Optimizer, class... Args>
void check_resume(Args... args) {
  auto dir = std::filesystem::temp_directory_path() / ("stformer_resume_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  auto path = dir / "run.safetensors";
  Rng init(3);

  auto straight = test::make<Model>();
  init_params(*straight, init);
  auto first = std::make_unique<Model>(*straight);
  auto opt1 = std::make_unique<Optimizer>(args...);
  TrainingState s1{0, Rng(99)};
  train(*straight, *opt1, s1, 20);

  auto opt2 = std::make_unique<Optimizer>(args...);
  TrainingState s2{0, Rng(99)};
  train(*first, *opt2, s2, 10);
  save_checkpoint(path, *first, *opt2, s2, {{"model", "set"}});

  auto resumed = test::make<Model>();
  auto opt3 = std::make_unique<Optimizer>(args...);
  TrainingState s3;
  load_checkpoint(path, *resumed, *opt3, s3);
  CHECK(s3.step == 10);
  CHECK(opt3->steps == 10);
  train(*resumed, *opt3, s3, 10);
  CHECK(bit_identical(*resumed, *straight));
  CHECK(!bit_identical(*first, *straight));  // the first half alone is not the answer

  // A checkpoint holding only the model is not a training checkpoint: nothing changes.
  save_params(dir / "model.safetensors", *first);
  auto before = std::make_unique<Model>(*resumed);
  TrainingState s4{7, Rng(1)};
  CHECK_THROWS_WITH_AS(load_checkpoint(dir / "model.safetensors", *resumed, *opt3, s4), doctest::Contains("is missing"), std::runtime_error);
  CHECK(bit_identical(*resumed, *before));
  CHECK(s4.step == 7);
  // ... but loads as a model.
  load_params(dir / "model.safetensors", *resumed);
  CHECK(bit_identical(*resumed, *first));
  std::filesystem::remove_all(dir);
}

}  // namespace

TEST_CASE("training checkpoints resume bit-identically: AdamW") { check_resume<AdamW<Model>>(0.01f); }

TEST_CASE("training checkpoints resume bit-identically: SGD with Nesterov momentum") {
  check_resume<SGD<Model>>(SGDOptions{.momentum = 0.9f, .weight_decay = 1e-4f, .nesterov = true});
}

TEST_CASE("a training checkpoint of another configuration is rejected by name") {
  auto dir = std::filesystem::temp_directory_path() / ("stformer_other_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  using Other = SetTransformer<2, 16, 2, 8, 2>;  // 8 inducing points instead of 4
  auto other = test::make<Other>();
  Rng rng(1);
  init_params(*other, rng);
  AdamW<Other> opt_other;
  save_checkpoint(dir / "other.safetensors", *other, opt_other, TrainingState{});
  auto m = test::make<Model>();
  init_params(*m, rng);
  auto before = std::make_unique<Model>(*m);
  auto opt = std::make_unique<AdamW<Model>>();
  TrainingState s;
  CHECK_THROWS_WITH_AS(load_checkpoint(dir / "other.safetensors", *m, *opt, s),
                       doctest::Contains("tensor 'isab.inducing' has shape [8, 16], the model expects [4, 16]"), std::runtime_error);
  CHECK(bit_identical(*m, *before));
  std::filesystem::remove_all(dir);
}

// stformer/train/training.hpp: a non-finite loss or gradient is reported with the step, the tensor
// and the element; a finite gradient whose norm overflows is reported as such.
TEST_CASE("check_finite names the step, the tensor and the element") {
  auto g = test::make<Model>();
  zero_grad(*g);
  CHECK_NOTHROW(check_finite(3, 0.5, grad_norm(*g), *g));
  CHECK_FALSE(first_nonfinite(*g));
  CHECK_THROWS_WITH_AS(check_finite(3, double(INFINITY), 0.0f, *g), "step 3: the loss is not finite (inf)", NonFiniteError);
  test::param_data(*g, "isab.mab1.attn.wk.weight")[37] = NAN;
  g->get<"head">().bias.data()[1] = INFINITY;  // later in visit order: the first one is named
  const NonFinite bad = first_nonfinite(*g);
  CHECK(bad.name == "isab.mab1.attn.wk.weight");
  CHECK(bad.index == 37);
  CHECK_THROWS_WITH_AS(check_finite(12, 0.5, grad_norm(*g), *g),
                       "step 12: the gradient of 'isab.mab1.attn.wk.weight' is not finite (element 37 is nan)", NonFiniteError);
  zero_grad(*g);
  g->get<"proj">().weight.data()[0] = 3e38f;
  g->get<"proj">().weight.data()[1] = 3e38f;
  CHECK(std::isinf(grad_norm(*g)));
  CHECK_THROWS_WITH_AS(check_finite(1, 0.5, grad_norm(*g), *g), "step 1: the gradient's norm overflows a float (every element is finite)",
                       NonFiniteError);
}
