// Training on the device: the runs of the Cortex-M firmware (mps2/train.cpp) and of their host
// reference (train_reference.cpp), one code for all. SPEC's pointer model, from initial
// parameters made on the host, takes Steps AdamW steps (PyTorch's rule, weight decay 0.01,
// constant lr 0.01) on one batch of B sets, as max_value trains it: forward and backward
// through the training record, the nll loss of each set's largest-norm point. The batch goes
// through in chunks of C sets (B / C of them) whose gradients add up in grad before the step:
// C = B on the Cortex-M7, C = 1 on the STM32F405, whose RAM holds one set's record. The record
// replays the encoder blocks (ReplayActsOf: one block's record, one half of it at a time, and
// the second block's input), which gives the same bits as keeping them all.
// State holds what a chunk's forward and backward touch: the model, its gradients, the training
// record with its workspace, the chunk; the optimiser's moments (AdamW) are apart, so that a
// firmware image can place them in another memory. Their sizes are known at compile time.
#pragma once

#include <algorithm>
#include <cstdint>

#include <stformer/models/pointer_model.hpp>
#include <stformer/train/loss.hpp>
#include <stformer/train/optim.hpp>

namespace firmware_train {

constexpr size_t B = 2, N = 50, Steps = 5;
constexpr float lr = 0.01f, weight_decay = 0.01f;
using Net = stformer::PointerModel<2, 16, 1, 64, 2>;  // SPEC's `pointer` configuration
using Optimiser = stformer::AdamW<Net>;

// The index of the largest-norm point of a set [N, 2] (max_value's label).
inline std::int32_t label(const float* set) {
  std::int32_t target = 0;
  float best = -1;
  for (size_t i = 0; i < N; ++i) {
    const float n = set[2 * i] * set[2 * i] + set[2 * i + 1] * set[2 * i + 1];
    if (n > best) best = n, target = std::int32_t(i);
  }
  return target;
}

template <size_t C>
struct State {
  static_assert(B % C == 0, "firmware_train::State: the batch must be whole chunks");
  Net model, grad;
  stformer::ReplayActsOf<Net, C, N> acts;
  stformer::Tensor<C, N, 2> x;       // a chunk's sets
  stformer::IdTensor<C> target;      // each set's largest-norm point
  stformer::Tensor<C, 1, N> dlogp;   // dL/d log-probabilities

  // x ← the chunk's sets from sets [C, N, 2], target their labels.
  void load(const float* sets) {
    std::copy_n(sets, C * N * 2, x.data());
    for (size_t b = 0; b < C; ++b) target(b) = label(sets + b * N * 2);
  }

  // One step on the batch's sets [B, N, 2], chunk by chunk (each chunk's loss and gradient
  // divided by B: they add up to the batch's mean); returns the batch's loss before it.
  float step(Optimiser& opt, const float* sets) {
    stformer::zero_grad(grad);
    float loss = 0;
    for (size_t c = 0; c < B; c += C) {
      load(sets + c * N * 2);
      loss += stformer::nll_loss(acts.forward(model, x), target, dlogp, B);
      acts.backward(model, grad, dlogp);
    }
    opt.step(model, grad, lr);
    return loss;
  }
};

}  // namespace firmware_train
