// PyTorch parity of nn.TransformerEncoderLayer, nn.TransformerEncoder and a user's blocks from
// combinators (see test_torch_parity.cpp).
#include <doctest/doctest.h>

#include "torch_parity.hpp"
#include "user_blocks.hpp"

// nn.TransformerEncoderLayer(16, 2, 32, dropout=0, batch_first=True) in its four forms, loaded by
// PyTorch's names (self_attn.in_proj_weight, linear1.weight, norm1.bias, ...).
TEST_CASE("PyTorch parity: nn.TransformerEncoderLayer, post-norm and norm_first, ReLU and GELU, key-padded (and causal)") {
  block_case<EncoderBlock<16, 2, 32, PostNorm<>>>("encoder_post_relu.safetensors", false, true);
  block_case<EncoderBlock<16, 2, 32, PostNorm<act::GELU>>>("encoder_post_gelu.safetensors", true, true);
  block_case<EncoderBlock<16, 2, 32, PreNorm<>>>("encoder_pre_relu.safetensors", false, true);
  block_case<EncoderBlock<16, 2, 32, PreNorm<act::GELU>>>("encoder_pre_gelu.safetensors", false, true);
}

TEST_CASE("PyTorch parity: nn.TransformerEncoder of two post-norm GELU layers and a final LayerNorm, as a Sequential") {
  using M = Sequential<Named<"layers", Repeat<EncoderBlock<16, 2, 32, PostNorm<act::GELU>>, 2>>, Named<"norm", LayerNorm<16>>>;
  using A = TrainingOf<M, 4, 12>;
  auto f = safetensors::File::read(parity_file("encoder_stack.safetensors"));
  Tensor<4, 12, 16> x, y, dy;
  KeyMask<4, 12> keys;
  read(f, "input.x", x);
  read(f, "input.y", y);
  read(f, "input.keys", keys);
  const Tensor<4, 12, 16>* out = nullptr;
  run_case<M, A>(
      "encoder_stack.safetensors", [&](A& a, const M& p) -> const auto& { return *(out = &a.forward(p, x, &keys)); },
      [&](A& a, const M& p, M& g) {
        const float l = mse(*out, y, dy);
        a.backward(p, g, dy);
        return l;
      });
}

// Blocks a user declares from combinators (tests/user_blocks.hpp) against PyTorch modules written
// for the test: GPT-J's parallel block (causal), a bias-free SwiGLU feed-forward layer, a
// LayerScale pre-norm block with LayerNorm ε 1e-6 (key-padded).
TEST_CASE("PyTorch parity: a user's blocks from combinators (GPT-J's parallel block, SwiGLU, LayerScale pre-norm)") {
  block_case<user::ParallelBlock<16, 2, 32>>("user_parallel.safetensors", true, false);
  block_case<user::SwiGLU<16, 32>>("user_swiglu.safetensors", false, false);
  block_case<user::LayerScaleBlock<16, 2, 32>>("user_layerscale.safetensors", false, true);
}
