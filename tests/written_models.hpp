// SPEC's three models as they were written by hand before they became Sequentials: their own
// visit, Infer (with its memory plan) and Acts. The reference that the composed models in
// include/stformer/models/ keep the same names, layout and bits as (tests/test_sequential.cpp).
#pragma once

#include <algorithm>
#include <array>

#include <stformer/stformer.hpp>

#include "written_encoder.hpp"
#include "written_set.hpp"

namespace written {
using namespace stformer;

template <size_t In, size_t D, size_t H, size_t F, size_t Blocks>
struct PointerModel {
  Linear<In, D> proj;
  std::array<EncoderBlock<D, H, F>, Blocks> blocks;
  ScaleNorm<D> sn_v;
  Tensor<1, D> query;
  ScaleNorm<D> sn_q;
  PointerAttention<D, D, D> pointer;

  template <class Fn, class... S>
  static constexpr void visit(const Path& at, Fn& f, S&... s) {
    stformer::visit(at / "proj", f, s.proj...);
    stformer::visit(at / "blocks", f, s.blocks...);
    stformer::visit(at / "sn_v", f, s.sn_v...);
    f(at / "query", Init{Init::xavier_normal}, s.query...);
    stformer::visit(at / "sn_q", f, s.sn_q...);
    stformer::visit(at / "pointer", f, s.pointer...);
  }

  // Forward only. Memory plan, sizeof(Infer<B, N>): the residual stream h [B, N, D] (proj(x),
  // then each block in place, then sn_v in place: the keys) beside one arena of two phases,
  //   blocks:  EncoderBlock::Work<B, N>: a [B, N, D]; the attention's kᵀ [B, D, N], v [B, N, D]
  //            and tile [16, N] (or [T, D]), then the hidden rows [T, F] in their place
  //   pointer: query [B, 1, D] (sn_q of the learned query), PointerAttention::Infer<B, 1, N>:
  //            q [B, 1, D], k [B, N, D] and the output logp [B, 1, N]
  // The same bits as Acts.
  template <size_t B, size_t N, size_t T = tile_rows(B * N)>
  struct Infer {
    using BlockWork = typename EncoderBlock<D, H, F>::template Work<B, N, T>;
    struct Pointer {
      Tensor<B, 1, D> query;
      InferOf<PointerAttention<D, D, D>, B, 1, N> pointer;
    };
    Tensor<B, N, D> h;
    Phases<BlockWork, Pointer> phase;

    template <class X>
    const Tensor<B, 1, N>& forward(const PointerModel& p, const X& x, const KeyMask<B, N>* keys = nullptr) {
      static_assert(shape_is<X, B, N, In>, "PointerModel: input set x must be [B, N, In] (the pass's sizes, the model's input width In)");
      p.proj.template apply<B * N>(x.data(), h.data());
      auto& w = phase.template start<BlockWork>();
      for (size_t i = 0; i < Blocks; ++i) p.blocks[i].forward_in_place(h, w, Mask<B, N>{.keys = keys});
      p.sn_v.template apply<B * N>(h.data(), h.data());
      auto& head = phase.template start<Pointer>();
      for (size_t b = 0; b < B; ++b) std::copy(p.query.begin(), p.query.end(), head.query.begin() + b * D);
      p.sn_q.template apply<B>(head.query.data(), head.query.data());
      return head.pointer.forward(p.pointer, head.query, h, keys);
    }
  };

  template <size_t B, size_t N>
  struct Acts {
    static constexpr bool whole = true;  // its own workspace (its blocks' TrainingOf)
    TrainingOf<Linear<In, D>, B, N> proj;
    std::array<TrainingOf<EncoderBlock<D, H, F>, B, N>, Blocks> blocks;
    TrainingOf<ScaleNorm<D>, B, N> sn_v;
    Tensor<B, 1, D> query;  // the learned query repeated over the batch
    TrainingOf<ScaleNorm<D>, B, 1> sn_q;
    TrainingOf<PointerAttention<D, D, D>, B, 1, N> pointer;

    template <class X>
    const Tensor<B, 1, N>& forward(const PointerModel& p, const X& x, const KeyMask<B, N>* keys = nullptr) {
      static_assert(shape_is<X, B, N, In>, "PointerModel: input set x must be [B, N, In] (the pass's sizes, the model's input width In)");
      const Tensor<B, N, D>* h = &proj.forward(p.proj, x);
      for (size_t i = 0; i < Blocks; ++i) h = &blocks[i].forward(p.blocks[i], *h, Mask<B, N>{.keys = keys});
      for (size_t b = 0; b < B; ++b) std::copy(p.query.begin(), p.query.end(), query.begin() + b * D);
      return pointer.forward(p.pointer, sn_q.forward(p.sn_q, query), sn_v.forward(p.sn_v, *h), keys);
    }

    // Accumulates parameter gradients into grad; returns dL/dx.
    const Tensor<B, N, In>& backward(const PointerModel& p, PointerModel& grad, const Tensor<B, 1, N>& dlogp) {
      const auto dp = pointer.backward(p.pointer, grad.pointer, dlogp);
      const auto& dq = sn_q.backward(p.sn_q, grad.sn_q, dp.dq);
      for (size_t b = 0; b < B; ++b) kernels::add_to<D>(dq.data() + b * D, grad.query.data());
      const Tensor<B, N, D>* dh = &sn_v.backward(p.sn_v, grad.sn_v, dp.dkv);
      for (size_t i = Blocks; i-- > 0;) dh = &blocks[i].backward(p.blocks[i], grad.blocks[i], *dh);
      return proj.backward(p.proj, grad.proj, *dh);
    }
  };
};

template <size_t In, size_t D, size_t H, size_t M, size_t Out, template <size_t> class Norm = ScaleNorm>
struct SetTransformer {
  Linear<In, D> proj;
  ISAB<D, H, M, Norm> isab;
  PMA<D, H, 1, Norm> pool;
  Linear<D, Out> head;

  template <class F, class... S>
  static constexpr void visit(const Path& at, F& f, S&... s) {
    stformer::visit(at / "proj", f, s.proj...);
    stformer::visit(at / "isab", f, s.isab...);
    stformer::visit(at / "pool", f, s.pool...);
    stformer::visit(at / "head", f, s.head...);
  }

  // Forward only. Memory plan, sizeof(Infer<B, N>): x [B, N, D] (proj(x), then ISAB in place),
  // the pooled row [B, 1, D] and the output y [B, 1, Out] beside one arena of two phases,
  //   isab: ISAB::Work<B, N>: Hm [B, M, D]; MAB1's work (a [B, N, D], kᵀ [B, D, N], v [B, N, D],
  //         tile), then MAB2's (a [B, N, D], kᵀ [B, D, M], v [B, M, D], tile) in its place
  //   pool: PMA::Work<B, N>: a [B, 1, D], Nkv(x) [B, N, D] (folded attention: no kᵀ, v), qk, ax
  //         [H, D], A [H, N], tile
  // The same bits as Acts.
  template <size_t B, size_t N>
  struct Infer {
    using IsabWork = typename ISAB<D, H, M, Norm>::template Work<B, N>;
    using PoolWork = typename PMA<D, H, 1, Norm>::template Work<B, N>;
    Tensor<B, N, D> x;
    Tensor<B, 1, D> pooled;
    Tensor<B, 1, Out> y;
    Phases<IsabWork, PoolWork> phase;

    template <class X>
    const Tensor<B, 1, Out>& forward(const SetTransformer& p, const X& in, const KeyMask<B, N>* keys = nullptr) {
      static_assert(shape_is<X, B, N, In>, "SetTransformer: input set x must be [B, N, In] (the pass's sizes, the model's input width In)");
      p.proj.template apply<B * N>(in.data(), x.data());
      p.isab.forward_in_place(x, phase.template start<IsabWork>(), keys);
      p.pool.forward_into(x, pooled, phase.template start<PoolWork>(), keys);
      p.head.template apply<B>(pooled.data(), y.data());
      return y;
    }
  };

  template <size_t B, size_t N>
  struct Acts {
    static constexpr bool whole = true;  // its own workspace (its blocks' TrainingOf)
    TrainingOf<Linear<In, D>, B, N> proj;
    TrainingOf<ISAB<D, H, M, Norm>, B, N> isab;
    TrainingOf<PMA<D, H, 1, Norm>, B, N> pool;
    TrainingOf<Linear<D, Out>, B, 1> head;

    template <class X>
    const Tensor<B, 1, Out>& forward(const SetTransformer& p, const X& x, const KeyMask<B, N>* keys = nullptr) {
      static_assert(shape_is<X, B, N, In>, "SetTransformer: input set x must be [B, N, In] (the pass's sizes, the model's input width In)");
      const auto& e = isab.forward(p.isab, proj.forward(p.proj, x), keys);
      return head.forward(p.head, pool.forward(p.pool, e, keys));
    }

    // Accumulates parameter gradients into grad; returns dL/dx.
    const Tensor<B, N, In>& backward(const SetTransformer& p, SetTransformer& grad, const Tensor<B, 1, Out>& dy) {
      const auto& de = pool.backward(p.pool, grad.pool, head.backward(p.head, grad.head, dy));
      return proj.backward(p.proj, grad.proj, isab.backward(p.isab, grad.isab, de));
    }
  };
};

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
      p.pe.forward_in_place(h, Nothing{}, Mask<B, L>{}, Serial{});
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
    static constexpr bool whole = true;  // its own workspace (its blocks' TrainingOf)
    TrainingOf<Embedding<V, D>, B, L> embedding;
    TrainingOf<PositionalEncoding<L, D>, B, L> pe;
    std::array<TrainingOf<EncoderBlock<D, H, F>, B, L>, Blocks> blocks;
    TrainingOf<PMA<D, H, 1>, B, L> pool;
    TrainingOf<Linear<D, V>, B, 1> head;

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

}  // namespace written
