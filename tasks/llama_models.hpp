// llama2.c's model (its model.py: RMSNorm, rotary grouped-query attention, SwiGLU, bias-free
// layers) as a declaration, at the shape of its stories260K checkpoint: dim 64, 5 layers, 8
// heads, 4 key/value heads, hidden 172, vocabulary 512, 512 positions. Its logits at every row
// (llama2.c's training form); the firmware's generation (targets/firmware/mps2/generation.cpp)
// steps it in integers, Quantized<stories::Stories260K>; StoriesM0, below, on a Cortex-M0.
#pragma once

#include <stformer/blocks/rotary_attention.hpp>
#include <stformer/stformer.hpp>

namespace stories {

using namespace stformer;

template <size_t D, size_t F>
using FeedForward = Sequential<Named<"", Gated<Named<"", Sequential<Named<"w1", Linear<D, F, Init::xavier_normal, Bias::no>>, SiLU<F>>>,
                                               Named<"w3", Linear<D, F, Init::xavier_normal, Bias::no>>>>,
                               Named<"w2", Linear<F, D, Init::xavier_normal, Bias::no>>>;
template <size_t D, size_t H, size_t KVH, size_t F, size_t L>
using Block = Sequential<Named<"", Residual<Sequential<Named<"attention_norm", RMSNorm<D, epsilon(1e-5f)>>,
                                                       Named<"attention", RotaryAttention<D, H, KVH, L>>>>>,
                         Named<"", Residual<Sequential<Named<"ffn_norm", RMSNorm<D, epsilon(1e-5f)>>, Named<"feed_forward", FeedForward<D, F>>>>>>;

struct Stories260K : Sequential<Named<"tok_embeddings", Embedding<512, 64>>, Named<"layers", Repeat<Block<64, 8, 4, 172, 512>, 5>>,
                                Named<"norm", RMSNorm<64, epsilon(1e-5f)>>, Named<"output", Linear<64, 512, Init::xavier_normal, Bias::no>>> {
  static constexpr bool causal = true;
};

// The same form at a Cortex-M0's size (the micro:bit's 16 KB of RAM): dim 32, 2 layers, 4 heads,
// 2 key/value heads, hidden 96, vocabulary 128, 64 positions; the firmware steps it in integers
// alone (its integer logits, before the float end).
struct StoriesM0 : Sequential<Named<"tok_embeddings", Embedding<128, 32>>, Named<"layers", Repeat<Block<32, 4, 2, 96, 64>, 2>>,
                              Named<"norm", RMSNorm<32, epsilon(1e-5f)>>, Named<"output", Linear<32, 128, Init::xavier_normal, Bias::no>>> {
  static constexpr bool causal = true;
};

}  // namespace stories
