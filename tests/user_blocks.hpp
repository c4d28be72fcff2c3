// Blocks a user declares from combinators, as docs/own-model.md writes them: GPT-J's parallel
// block, a bias-free SwiGLU feed-forward layer (LLaMA's), a LayerScale pre-norm block (timm's
// ViT with init_values; LayerNorm ε 1e-6); and llama2.c's model of 2 layers. Their parameters take the names of the PyTorch
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
// llama2.c's model (2 layers): token embeddings, pre-norm blocks of RMSNorm, rotary grouped-query
// attention and a SwiGLU feed-forward layer, a final RMSNorm, the output layer.
template <size_t V, size_t D, size_t H, size_t KVH, size_t F, size_t L>
using LlamaBlock = Sequential<Named<"", Residual<Sequential<Named<"attention_norm", RMSNorm<D, epsilon(1e-5f)>>,
                                                            Named<"attention", RotaryAttention<D, H, KVH, L>>>>>,
                              Named<"", Residual<Sequential<Named<"ffn_norm", RMSNorm<D, epsilon(1e-5f)>>, Named<"feed_forward", SwiGLU<D, F>>>>>>;
template <size_t V, size_t D, size_t H, size_t KVH, size_t F, size_t L>
struct Llama : Sequential<Named<"tok_embeddings", Embedding<V, D>>, Named<"layers", Repeat<LlamaBlock<V, D, H, KVH, F, L>, 2>>,
                          Named<"norm", RMSNorm<D, epsilon(1e-5f)>>, Named<"output", Linear<D, V, Init::xavier_normal, Bias::no>>> {
  static constexpr bool causal = true;
};
}  // namespace user
