// Training on the device: the run of the Cortex-M7 firmware (mps2/train.cpp) and of its host
// reference (train_reference.cpp), one code for both. SPEC's pointer model, from initial
// parameters made on the host, takes Steps AdamW steps (PyTorch's rule, weight decay 0.01,
// constant lr 0.01) on one batch of B sets, as max_value trains it: forward and backward
// through the training record, the nll loss of each set's largest-norm point. The record
// replays the encoder blocks (ReplayActsOf: one block's record, and the second block's input),
// which gives the same bits as keeping both.
// State holds everything a step touches: the model, its gradients, the optimiser's two
// moments, the training record with its workspace, the batch; its size is known at compile time.
#pragma once

#include <stformer/models/pointer_model.hpp>
#include <stformer/train/loss.hpp>
#include <stformer/train/optim.hpp>

namespace firmware_train {

constexpr size_t B = 2, N = 50, Steps = 5;
constexpr float lr = 0.01f;
using Net = stformer::PointerModel<2, 16, 1, 64, 2>;  // SPEC's `pointer` configuration

struct State {
  Net model, grad;
  stformer::AdamW<Net> opt{0.01f};
  stformer::ReplayActsOf<Net, B, N> acts;
  stformer::Tensor<B, N, 2> x;       // the batch's sets
  stformer::IdTensor<B> target;      // each set's largest-norm point
  stformer::Tensor<B, 1, N> dlogp;   // dL/d log-probabilities

  // target(b) = the index of set b's largest-norm point (max_value's label).
  void label() {
    for (size_t b = 0; b < B; ++b) {
      float best = -1;
      for (size_t i = 0; i < N; ++i) {
        const float n = x(b, i, 0) * x(b, i, 0) + x(b, i, 1) * x(b, i, 1);
        if (n > best) best = n, target(b) = std::int32_t(i);
      }
    }
  }

  // One step; returns the batch's mean loss before it.
  float step() {
    stformer::zero_grad(grad);
    const float loss = stformer::nll_loss(acts.forward(model, x), target, dlogp);
    acts.backward(model, grad, dlogp);
    opt.step(model, grad, lr);
    return loss;
  }
};

}  // namespace firmware_train
