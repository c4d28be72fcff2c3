// LanguageModel<V, L, D, H, F, Blocks> — SPEC's Example 2: the next token after a window of L.
//   ids [B, L] -> embedding = Embedding<V, D> (not scaled) + PositionalEncoding<L, D>
//              -> blocks.0 .. blocks.{Blocks-1} = EncoderBlock<D, H, F> (no mask)
//              -> pool = PMA<D, H, 1> -> head = Linear<D, V> -> logits [B, 1, V]
// Default configuration (SPEC): V = 33,278, L = 32, D = 128, H = 4, F = 512, 2 blocks:
// 9,030,661 parameters (36 MB): allocate it once (new / static storage), not on the stack.
// A Sequential (stformer/compose/sequential.hpp) whose passes take windows of L by default:
// InferOf<Model, B> and ActsOf<Model, B>. Its InferOf is h [B, L, D] beside the blocks' work
// (all 32 rows of a window in one tile), then the pooled rows and PMA's work, then the pooled
// rows and the logits [B, 1, V] in the same bytes.
#pragma once

#include "../core/config.hpp"

#include "../blocks/embedding.hpp"
#include "../blocks/encoder.hpp"
#include "../blocks/linear.hpp"
#include "../blocks/pma.hpp"
#include "../blocks/positional.hpp"
#include "../compose/sequential.hpp"

namespace stformer::inline STFORMER_ABI {

// Embed and Head: the float Embedding and Linear, or other steps of the same shapes (the
// weight-only int8 ones of stformer/quantized/weight_int8.hpp: LanguageModelW8, forward only).
template <size_t V, size_t L, size_t D, size_t H, size_t F, size_t Blocks, class Embed = Embedding<V, D>, class Head = Linear<D, V>>
using LanguageModelChain = Sequential<Named<"embedding", Embed>, Named<"pe", PositionalEncoding<L, D>>,
                                      Named<"blocks", Repeat<EncoderBlock<D, H, F>, Blocks>>, Named<"pool", PMA<D, H, 1>>, Named<"head", Head>>;

template <size_t V, size_t L, size_t D, size_t H, size_t F, size_t Blocks, class Embed = Embedding<V, D>, class Head = Linear<D, V>>
struct LanguageModel : LanguageModelChain<V, L, D, H, F, Blocks, Embed, Head> {
  template <size_t B, size_t N = L>
  using Infer = typename LanguageModelChain<V, L, D, H, F, Blocks, Embed, Head>::template Infer<B, N>;
  template <size_t B, size_t N = L, Memory M = Memory::keep>
  using Acts = typename LanguageModelChain<V, L, D, H, F, Blocks, Embed, Head>::template Acts<B, N, M>;
};

}  // namespace stformer
