// What the PyTorch parity tests (tests/test_torch_parity*.cpp, one program) share: the files
// tests/torch/make_parity.py wrote, a model's parameters against PyTorch's, and one case run
// whole (output, loss, gradients, 10 AdamW steps).
#pragma once

#include <cstdlib>
#include <cstring>
#include <string>

#include <stformer/io/checkpoint.hpp>
#include <stformer/io/safetensors.hpp>
#include <stformer/stformer.hpp>

#include "torch/compare.hpp"
#include "util.hpp"

using namespace stformer;
using test::check_rel;
using test::read;
using test::worst;

namespace {

std::string parity_file(const char* name) { return test::file_in("STFORMER_PARITY_DIR", name); }

// Every parameter tensor of got against want (same model type).
template <class M>
void check_params(const char* what, const M& got, const M& want, double tol) {
  for_each_param(
      [&](const Path& p, Init, const auto& g, const auto& w) {
        // The key bias (wk.bias, or the middle third of PyTorch's in_proj_bias): its gradient is
        // exactly 0 (softmax is shift-invariant); in float it is rounding noise, which Adam
        // normalises to steps of ±lr in both implementations alike. It changes no output, so
        // after the optimiser steps it is only checked for size, and its gradient against the
        // true value 0 instead of PyTorch's noise (both are sums of ±1e-8 roundings).
        const auto path = p.name();  // the view below points into it
        const auto name = path.view();
        const size_t n = g.size(), lo = name.ends_with("wk.bias") ? 0 : name.ends_with("in_proj_bias") ? n / 3 : n,
                     hi = lo == n ? n : name.ends_with("wk.bias") ? n : 2 * n / 3;
        auto rest = g;  // the other entries, checked as every tensor
        for (size_t i = lo; i < hi; ++i) {
          if (std::string_view(what) == "after 10 AdamW steps") {
            CHECK(std::abs(g.data()[i] - w.data()[i]) <= 0.25f);
          } else if (std::string_view(what) == "gradient") {
            CHECK_MESSAGE(std::abs(g.data()[i]) <= 1e-6f, p.name().c_str());
            CHECK_MESSAGE(std::abs(w.data()[i]) <= 1e-6f, p.name().c_str());
          }
          rest.data()[i] = w.data()[i];
        }
        check_rel(std::string(what) + " " + p.name().c_str(), rest, w, tol);
      },
      got, want);
}

// Loads the weights, checks output, loss, gradients, then 10 AdamW steps (lr 0.01, wd 0.01).
template <class M, class Acts, class Forward, class Loss>
void run_case(const char* file, Forward&& forward, Loss&& loss_of) {
  auto f = safetensors::File::read(parity_file(file));
  auto p = test::make<M>();
  auto g = test::make<M>();
  auto want = test::make<M>();
  auto a = test::make<Acts>();
  load_params(f, *p, "param.");
  load_params(f, *want, "grad.");

  worst = 0;
  const auto& out = forward(*a, *p);
  auto expected_out = std::make_unique<std::remove_cvref_t<decltype(out)>>();
  read(f, "output", *expected_out);
  check_rel("output", out, *expected_out, 1e-5);
  MESSAGE(std::string(file) << ": output relative difference " << worst);
  worst = 0;
  Tensor<1> expected_loss;
  read(f, "loss", expected_loss);
  zero_grad(*g);
  float loss = loss_of(*a, *p, *g);
  CHECK(loss == doctest::Approx(expected_loss(0)).epsilon(1e-5));
  check_params("gradient", *g, *want, 1e-4);
  MESSAGE(std::string(file) << ": gradients, largest relative difference " << worst);

  Tensor<10> step_losses;
  read(f, "step_losses", step_losses);
  auto p2 = test::make<M>();
  load_params(f, *p2, "param.");
  AdamW<M> opt(0.01f);
  for (size_t s = 0; s < 10; ++s) {
    forward(*a, *p2);
    zero_grad(*g);
    float l = loss_of(*a, *p2, *g);
    CHECK_MESSAGE(l == doctest::Approx(step_losses(s)).epsilon(1e-4), "step " << s);
    opt.step(*p2, *g, 0.01f);
  }
  load_params(f, *want, "final.");
  worst = 0;
  check_params("after 10 AdamW steps", *p2, *want, 1e-3);
  MESSAGE(std::string(file) << ": weights after 10 AdamW steps, largest relative difference " << worst);
}

// PyTorch's mse_loss: mean((out − y)²), and its gradient dy = 2(out − y)/n.
template <class T>
float mse(const T& out, const T& y, T& dy) {
  double l = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    const float d = out.data()[i] - y.data()[i];
    l += double(d) * d, dy.data()[i] = 2 * d / float(y.size());
  }
  return float(l / double(y.size()));
}

// A block of width 16 on rows [4, 12, 16] (causal, or key-padded by input.keys), loaded by the
// PyTorch module's names: output, loss, every gradient, 10 AdamW steps, and the forward-only
// pass in a Sequential's arena giving the training record's bits.

template <class M>
void block_case(const char* file, bool causal, bool padded) {
  using A = TrainingOf<M, 4, 12>;
  auto f = safetensors::File::read(parity_file(file));
  Tensor<4, 12, 16> x, y, dy;
  KeyMask<4, 12> keys;
  read(f, "input.x", x);
  read(f, "input.y", y);
  if (padded) read(f, "input.keys", keys);
  const Mask<4, 12> mask{.causal = causal, .keys = padded ? &keys : nullptr};
  const Tensor<4, 12, 16>* out = nullptr;
  run_case<M, A>(
      file, [&](A& a, const M& p) -> const auto& { return *(out = &a.forward(p, x, mask)); },
      [&](A& a, const M& p, M& g) {
        const float l = mse(*out, y, dy);
        a.backward(p, g, dy);
        return l;
      });
  using Model = Sequential<Named<"", M>>;
  auto p = test::make<Model>();
  load_params(f, *p, "param.");
  auto a = test::make<A>();
  auto inf = test::make<InferOf<Model, 4, 12>>();
  CHECK(inf->forward(*p, x, mask) == a->forward(p->template get<0>(), x, mask));
}

}  // namespace
