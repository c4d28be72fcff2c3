// Blocks a user declares from combinators, as docs/own-model.md writes them: GPT-J's parallel
// block, a bias-free SwiGLU feed-forward layer (LLaMA's), a LayerScale pre-norm block (timm's
// ViT with init_values; LayerNorm ε 1e-6). Their parameters take the names of the PyTorch
// modules of tests/torch/make_parity.py.
#pragma once

#include <stformer/stformer.hpp>

namespace user {
using namespace stformer;
template <size_t D, size_t H, size_t F>
using ParallelBlock = Residual<Sequential<Named<"ln_1", LayerNorm<D>>,
                                          Named<"", Parallel<Named<"attn", SelfAttention<D, H>>, Named<"mlp", FeedForward<D, F, act::GELU>>>>>>;
template <size_t D, size_t F>
using SwiGLU = Sequential<Named<"", Gated<Named<"", Sequential<Named<"w1", Linear<D, F, Init::kaiming_normal, Bias::no>>, SiLU<F>>>,
                                         Named<"w3", Linear<D, F, Init::kaiming_normal, Bias::no>>>>,
                          Named<"w2", Linear<F, D, Init::kaiming_normal, Bias::no>>>;
template <size_t D, size_t H, size_t F>
using LayerScaleBlock =
    Sequential<Named<"", Residual<Sequential<Named<"norm1", LayerNorm<D, epsilon(1e-6f)>>, Named<"attn", SelfAttention<D, H>>, Named<"ls1", LayerScale<D>>>>>,
               Named<"", Residual<Sequential<Named<"norm2", LayerNorm<D, epsilon(1e-6f)>>, Named<"mlp", FeedForward<D, F, act::GELU>>, Named<"ls2", LayerScale<D>>>>>>;
}  // namespace user

// SPEC's encoder block (pre-norm, ScaleNorm, separate projections, ReLU) declared as a chain of
// two residuals, under EncoderBlock's names (sn1, attn.wq, …, sn2, ffn.fc1, …).
namespace spec {
using namespace stformer;
template <size_t D, size_t H, size_t F>
using Encoder = Sequential<Named<"", Residual<Sequential<Named<"sn1", ScaleNorm<D>>, Named<"attn", SelfAttention<D, H, ScoreScale::head_width, Projections::separate>>>>>,
                           Named<"", Residual<Sequential<Named<"sn2", ScaleNorm<D>>, Named<"ffn", FeedForward<D, F>>>>>>;

// PyTorch's nn.TransformerEncoderLayer declared, under its names (norm1, self_attn.in_proj_weight,
// …, linear1, linear2, norm2): norm_first=True, and the default post-norm.
template <size_t D, size_t F, class Act>
using TorchFfn = FeedForward<D, F, Act, precision::float32, FfnNames::linear>;
template <size_t D, size_t H, size_t F, class Act>
using TorchPreNorm = Sequential<Named<"", Residual<Sequential<Named<"norm1", LayerNorm<D>>, Named<"self_attn", SelfAttention<D, H>>>>>,
                                Named<"", Residual<Sequential<Named<"norm2", LayerNorm<D>>, Named<"", TorchFfn<D, F, Act>>>>>>;
template <size_t D, size_t H, size_t F, class Act>
using TorchPostNorm = Sequential<Named<"", Residual<Named<"self_attn", SelfAttention<D, H>>>>, Named<"norm1", LayerNorm<D>>,
                                 Named<"", Residual<Named<"", TorchFfn<D, F, Act>>>>, Named<"norm2", LayerNorm<D>>>;
}  // namespace spec
