// EncoderBlock<D, H, F> (pre-norm Transformer encoder layer), rows x [B, N, D]:
//   h   = x + MHA(SN1(x), SN1(x))        (optionally causal / key-padded)
//   out = h + FFN(SN2(h))
//   backward: dh = dout + SN2ᵀ FFNᵀ dout;  dx = dh + SN1ᵀ (dxq + dxkv of MHAᵀ dh)
// Forward only: Infer, or forward_in_place on a residual stream the caller keeps (models).
// Parameters: sn1.g, attn.*, sn2.g, ffn.*.
#pragma once

#include "../config.hpp"

#include <algorithm>

#include "attention.hpp"
#include "feedforward.hpp"
#include "scalenorm.hpp"

namespace stformer::inline STFORMER_ABI {

template <size_t D, size_t H, size_t F>
struct EncoderBlock {
  ScaleNorm<D> sn1;
  MultiHeadAttention<D, D, D, H> attn;
  ScaleNorm<D> sn2;
  FeedForward<D, F> ffn;

  template <class Fn, class... S>
  static constexpr void visit(const Path& at, Fn& f, S&... s) {
    stformer::visit(at / "sn1", f, s.sn1...);
    stformer::visit(at / "attn", f, s.attn...);
    stformer::visit(at / "sn2", f, s.sn2...);
    stformer::visit(at / "ffn", f, s.ffn...);
  }

  // Forward only, in place on the residual stream: h ← EncoderBlock(h), rows in tiles in the
  // projections and the feed-forward layer. Work: a [B, N, D] (SN1(h), which becomes the
  // attention's output in place, then SN2(h) and the feed-forward output), and over one arena
  // the attention's keys, values and tile, then the hidden rows [Tf, F], Tf ≥ T as many as the
  // attention's buffers leave room for. The same bits as Acts.
  template <size_t B, size_t N, size_t T = tile_rows(B * N)>
  struct Work {
    using Attention = MultiHeadAttention<D, D, D, H>;
    using AttentionWork = typename Attention::template Work<B, N, N, T>;
    static constexpr size_t Tf = rows_in_room(B * N, T, sizeof(AttentionWork), F * sizeof(float));
    Tensor<B, N, D> a;
    Phases<AttentionWork, Tensor<Tf, F>> phase;
  };

  template <size_t B, size_t N, size_t T>
  void forward_in_place(Tensor<B, N, D>& h, Work<B, N, T>& w, Mask<B, N> mask = {}) const {
    using Wk = Work<B, N, T>;
    auto& attention = w.phase.template start<typename Wk::AttentionWork>();
    sn1.template apply<B * N>(h.data(), w.a.data());
    attn.template prepare<B, N, N, T>(w.a.data(), attention);
    attn.template forward_add<B, N, N, T>(w.a.data(), h.data(), attention, mask);
    sn2.template apply<B * N>(h.data(), w.a.data());
    ffn.template apply_tiled<B * N, Wk::Tf, true>(w.a.data(), h.data(), w.phase.template start<Tensor<Wk::Tf, F>>().data());
  }

  // A step of a Sequential (stformer/sequential.hpp): forward_in_place, Work its scratch, with
  // as many rows per tile as Room holds (the same bits for any tile).
  template <size_t B, size_t N>
  using Input = Tensor<B, N, D>;
  static constexpr bool in_place = true;
  template <size_t B, size_t N, size_t Room>
  using Scratch = typename TiledIn<Work, B, N, Room>::type;
  template <size_t B, size_t N>
  struct Infer {
    Tensor<B, N, D> out;
    Work<B, N> w;

    template <class X>
    const Tensor<B, N, D>& forward(const EncoderBlock& p, const X& x, Mask<B, N> mask = {}) {
      static_assert(shape_is<X, B, N, D>, "EncoderBlock: input rows x must be [B, N, D] (the pass's sizes, the block's width D)");
      if (&x != &out) std::copy(x.begin(), x.end(), out.begin());
      p.forward_in_place(out, w, mask);
      return out;
    }
  };

  template <size_t B, size_t N>
  struct Acts {
    ActsOf<ScaleNorm<D>, B, N> sn1;
    ActsOf<MultiHeadAttention<D, D, D, H>, B, N, N> attn;
    Tensor<B, N, D> h;
    ActsOf<ScaleNorm<D>, B, N> sn2;
    ActsOf<FeedForward<D, F>, B, N> ffn;
    Tensor<B, N, D> out;
    Tensor<B, N, D> dh, dn1, dx;

    template <class X>
    const Tensor<B, N, D>& forward(const EncoderBlock& p, const X& x, Mask<B, N> mask = {}) {
      static_assert(shape_is<X, B, N, D>, "EncoderBlock: input rows x must be [B, N, D] (the pass's sizes, the block's width D)");
      const auto& n1 = sn1.forward(p.sn1, x);
      kernels::add<B * N * D>(x.data(), attn.forward(p.attn, n1, n1, mask).data(), h.data());
      kernels::add<B * N * D>(h.data(), ffn.forward(p.ffn, sn2.forward(p.sn2, h)).data(), out.data());
      return out;
    }

    const Tensor<B, N, D>& backward(const EncoderBlock& p, EncoderBlock& grad, const Tensor<B, N, D>& dout) {
      kernels::add<B * N * D>(dout.data(), sn2.backward(p.sn2, grad.sn2, ffn.backward(p.ffn, grad.ffn, dout)).data(), dh.data());
      const auto da = attn.backward(p.attn, grad.attn, dh);
      kernels::add<B * N * D>(da.dq.data(), da.dkv.data(), dn1.data());
      kernels::add<B * N * D>(dh.data(), sn1.backward(p.sn1, grad.sn1, dn1).data(), dx.data());
      return dx;
    }
  };
};

}  // namespace stformer
