// PointerModel<In, D, H, F, Blocks> — SPEC's `pointer` model of Example 1:
//   x [B, N, In] -> proj = Linear<In, D> -> blocks.0 .. blocks.{Blocks-1} = EncoderBlock<D, H, F>
//                -> sn_v = ScaleNorm<D>                                            (keys)
//   query [1, D] (learned, repeated over the batch) -> sn_q = ScaleNorm<D>        (query)
//   pointer = PointerAttention<D, D, D>(query, keys) -> log-probabilities [B, 1, N]
// Permutation-equivariant in the N points. Parameters: proj.*, blocks.i.*, sn_v.g, query,
// sn_q.g, pointer.*.
#pragma once

#include "../config.hpp"

#include <algorithm>
#include <array>

#include "../blocks/encoder.hpp"
#include "../blocks/linear.hpp"
#include "../blocks/pointer.hpp"
#include "../blocks/scalenorm.hpp"

namespace stformer::inline STFORMER_ABI {

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
    ActsOf<Linear<In, D>, B, N> proj;
    std::array<ActsOf<EncoderBlock<D, H, F>, B, N>, Blocks> blocks;
    ActsOf<ScaleNorm<D>, B, N> sn_v;
    Tensor<B, 1, D> query;  // the learned query repeated over the batch
    ActsOf<ScaleNorm<D>, B, 1> sn_q;
    ActsOf<PointerAttention<D, D, D>, B, 1, N> pointer;

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

}  // namespace stformer
