// Example 2, generating: a causal GPT of the combinators over WikiText-2's text as bytes (V =
// 256, its own small vocabulary: the form a microcontroller holds), every position predicting
// the byte after it from the bytes up to it. Learned positions, pre-norm GELU blocks, a final
// LayerNorm, the head at every row: nanoGPT's shape. wikitext_lm's `--model gpt` (WikiGpt) and
// the firmware's generation (targets/firmware/mps2/generation.cpp) use it; only the model, so that
// bare-metal code includes it.
#pragma once

#include <stformer/stformer.hpp>

namespace lm {

using namespace stformer;

template <size_t L, size_t D, size_t H, size_t Blocks>
struct ByteGpt : Sequential<Named<"wte", Embedding<256, D>>, Named<"wpe", PositionEmbedding<L, D>>,
                            Named<"h", Repeat<EncoderBlock<D, H, 4 * D, PreNorm<act::GELU>>, Blocks>>, Named<"ln_f", LayerNorm<D>>,
                            Named<"lm_head", Linear<D, 256, Init::xavier_normal, Bias::no>>> {
  static constexpr bool causal = true;
};

// wikitext_lm's: 128 bytes of context, width 64, 4 heads, 3 blocks (191,040 parameters: 764 KB
// in float, a quarter in int8, within an STM32F405's 1 MB of flash).
using WikiGpt = ByteGpt<128, 64, 4, 3>;

}  // namespace lm
