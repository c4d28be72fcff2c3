// LanguageModel<V, L, D, H, F, Blocks> — SPEC's Example 2: the next token after a window of L.
//   ids [B, L] -> embedding = Embedding<V, D> (not scaled) + PositionalEncoding<L, D>
//              -> blocks.0 .. blocks.{Blocks-1} = EncoderBlock<D, H, F> (no mask)
//              -> pool = PMA<D, H, 1> -> head = Linear<D, V> -> logits [B, 1, V]
// Default configuration (SPEC): V = 33,278, L = 32, D = 128, H = 4, F = 512, 2 blocks:
// 9,030,661 parameters (36 MB): allocate it once (new / static storage), not on the stack.
#pragma once

#include "../config.hpp"

#include <array>

#include "../blocks/embedding.hpp"
#include "../blocks/encoder.hpp"
#include "../blocks/linear.hpp"
#include "../blocks/pma.hpp"
#include "../blocks/positional.hpp"

namespace stformer::inline STFORMER_ABI {

// Embed and Head: the float Embedding and Linear, or any layers with their apply (the
// weight-only int8 ones of stformer/quantized/weight_int8.hpp: LanguageModelW8, forward only).
template <size_t V, size_t L, size_t D, size_t H, size_t F, size_t Blocks, class Embed = Embedding<V, D>, class Head = Linear<D, V>>
struct LanguageModel {
  Embed embedding;
  [[no_unique_address]] PositionalEncoding<L, D> pe;  // no parameters and no bytes: the model is its parameters
  std::array<EncoderBlock<D, H, F>, Blocks> blocks;
  PMA<D, H, 1> pool;
  Head head;

  template <class Fn, class... S>
  static constexpr void visit(const Path& at, Fn& f, S&... s) {
    stformer::visit(at / "embedding", f, s.embedding...);
    stformer::visit(at / "blocks", f, s.blocks...);
    stformer::visit(at / "pool", f, s.pool...);
    stformer::visit(at / "head", f, s.head...);
  }

  // Forward only. Memory plan, sizeof(Infer<B>): the residual stream h [B, L, D] (embedding +
  // PE, then each block in place) and the pooled row [B, 1, D] beside one arena of three phases,
  //   blocks: EncoderBlock::Work<B, L, T>: a [B, L, D]; the attention's kᵀ [B, D, L], v [B, L, D]
  //           and tile [T, D], then the hidden rows [T, F] in their place
  //   pool:   PMA::Work<B, L>: a [B, 1, D], SN(h) [B, L, D] (folded attention), qk, ax, A, tile
  //   head:   the logits [B, 1, V], the output
  // T: as many rows (of B·L) as the logits leave room for, so that the blocks' phase is never
  // the largest (one window: all 32 rows in one tile). The same bits as Acts.
  template <size_t B, size_t T = rows_in_room(B * L, tile_rows(B * L), sizeof(Tensor<B, 1, V>), F * sizeof(float))>
  struct Infer {
    using BlockWork = typename EncoderBlock<D, H, F>::template Work<B, L, T>;
    using PoolWork = typename PMA<D, H, 1>::template Work<B, L>;
    Tensor<B, L, D> h;
    Tensor<B, 1, D> pooled;
    Phases<BlockWork, PoolWork, Tensor<B, 1, V>> phase;

    const Tensor<B, 1, V>& forward(const LanguageModel& p, const IdTensor<B, L>& ids) {
      p.embedding.template apply<B * L>(ids.data(), h.data());
      p.pe.forward_in_place(h);
      auto& w = phase.template start<BlockWork>();
      for (size_t i = 0; i < Blocks; ++i) p.blocks[i].forward_in_place(h, w);
      p.pool.forward_into(h, pooled, phase.template start<PoolWork>());
      auto& logits = phase.template start<Tensor<B, 1, V>>();
      p.head.template apply<B>(pooled.data(), logits.data());
      return logits;
    }
  };

  template <size_t B>
  struct Acts {
    ActsOf<Embedding<V, D>, B, L> embedding;
    ActsOf<PositionalEncoding<L, D>, B, L> pe;
    std::array<ActsOf<EncoderBlock<D, H, F>, B, L>, Blocks> blocks;
    ActsOf<PMA<D, H, 1>, B, L> pool;
    ActsOf<Linear<D, V>, B, 1> head;

    const Tensor<B, 1, V>& forward(const LanguageModel& p, const IdTensor<B, L>& ids) { return head.forward(p.head, forward_pooled(p, ids)); }

    // Accumulates parameter gradients into grad.
    void backward(const LanguageModel& p, LanguageModel& grad, const Tensor<B, 1, V>& dlogits) {
      backward_pooled(p, grad, head.backward(p.head, grad.head, dlogits));
    }

    // The forward up to the head's input, the pooled rows [B, 1, D] (pooled() after it), and the
    // backward from dL/d(pooled) down (pool, blocks, embedding): for a caller that computes the
    // head's logits into head.out and its gradients itself.
    const Tensor<B, 1, D>& forward_pooled(const LanguageModel& p, const IdTensor<B, L>& ids) {
      const Tensor<B, L, D>* h = &pe.forward(p.pe, embedding.forward(p.embedding, ids));
      for (size_t i = 0; i < Blocks; ++i) h = &blocks[i].forward(p.blocks[i], *h);
      head.x = &pool.forward(p.pool, *h);
      return *head.x;
    }
    const Tensor<B, 1, D>& pooled() const { return *head.x; }
    void backward_pooled(const LanguageModel& p, LanguageModel& grad, const Tensor<B, 1, D>& dpooled) {
      const Tensor<B, L, D>* dh = &pool.backward(p.pool, grad.pool, dpooled);
      for (size_t i = Blocks; i-- > 0;) dh = &blocks[i].backward(p.blocks[i], grad.blocks[i], *dh);
      embedding.backward(p.embedding, grad.embedding, *dh);
    }
  };
};

}  // namespace stformer
