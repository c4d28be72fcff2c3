// DecoderBlock<D, H, F> (pre-norm Transformer decoder layer), rows x [B, N, D], encoder
// memory m [B, M, D]:
//   h1  = x  + SelfMHA(SN1(x), SN1(x))     causal
//   h2  = h1 + CrossMHA(SN2(h1), m)        (optionally key-padded over m)
//   out = h2 + FFN(SN3(h2))
//   backward: dh2 = dout + SN3ᵀ FFNᵀ dout; dh1 = dh2 + SN2ᵀ dxq(CrossMHAᵀ dh2);
//             dx = dh1 + SN1ᵀ (dxq + dxkv of SelfMHAᵀ dh1); dm = dxkv of CrossMHAᵀ dh2;
//             returns {dq = dx, dkv = dm}
// In integers as DecoderBlock<D, H, F, precision::int8>: the same composition on an int16
// residual stream, the memory an int16 stream of its own (from_float).
// Parameters: sn1.g, self_attn.*, sn2.g, cross_attn.*, sn3.g, ffn.*.
#pragma once

#include "../config.hpp"
#include "../precision.hpp"

#include <algorithm>

#include "attention.hpp"
#include "feedforward.hpp"
#include "scalenorm.hpp"

namespace stformer::inline STFORMER_ABI {

template <size_t D, size_t H, size_t F, class P = precision::float32>
struct DecoderBlock {
  template <class Leaf>
  using Of = typename P::template Of<Leaf>;
  using Float = DecoderBlock<D, H, F>;
  using Attention = Of<MultiHeadAttention<D, D, D, H>>;
  using Ffn = Of<FeedForward<D, F>>;
  using Stream = typename P::Stream;
  Of<ScaleNorm<D>> sn1;
  Attention self_attn;
  Of<ScaleNorm<D>> sn2;
  Attention cross_attn;
  Of<ScaleNorm<D>> sn3;
  Ffn ffn;

  template <class Fn, class... S>
  static constexpr void visit(const Path& at, Fn& f, S&... s) {
    stformer::visit(at / "sn1", f, s.sn1...);
    stformer::visit(at / "self_attn", f, s.self_attn...);
    stformer::visit(at / "sn2", f, s.sn2...);
    stformer::visit(at / "cross_attn", f, s.cross_attn...);
    stformer::visit(at / "sn3", f, s.sn3...);
    stformer::visit(at / "ffn", f, s.ffn...);
  }

  // Forward only, in place on the residual stream: x ← DecoderBlock(x, m), rows T at a time in
  // the projections and the feed-forward layer. Work: a [B, N, D] (each sublayer's normalised
  // input, which becomes its output in place; in integers int8 rows) and over one arena the
  // self-attention's keys and values, then the cross-attention's (projected from m, or m itself
  // when it folds), then the feed-forward layer's tile of Tf ≥ T rows, as many as the
  // attentions' buffers leave room for (in integers Tf = T: one tile size for every product,
  // fewer kernels in a firmware image). The same bits as Acts (in float).
  template <size_t B, size_t N, size_t M, size_t T = P::tile_rows(B * N, B * M)>
  struct Work {
    using SelfWork = typename Attention::template Work<B, N, N, T>;
    using CrossWork = typename Attention::template Work<B, N, M, T>;
    static constexpr size_t Tf = P::integer ? T : rows_in_room(B * N, T, std::max(sizeof(SelfWork), sizeof(CrossWork)), Ffn::tile_row_bytes);
    using FfnTile = typename Ffn::template Tile<Tf>;
    TensorOf<typename P::template Row<8>, B, N, D> a;
    Phases<SelfWork, CrossWork, FfnTile> phase;
  };

  template <size_t B, size_t N, size_t M, size_t T>
  void forward_in_place(TensorOf<Stream, B, N, D>& x, const TensorOf<Stream, B, M, D>& m, Work<B, N, M, T>& w,
                        const KeyMask<B, M>* memory_mask = nullptr) const {
    using Wk = Work<B, N, M, T>;
    auto& self = w.phase.template start<typename Wk::SelfWork>();
    sn1.template apply<B * N>(x.data(), w.a.data());
    self_attn.template prepare<B, N, N, T>(w.a.data(), self);
    self_attn.template forward_add<B, N, N, T>(w.a.data(), x.data(), self, Mask<B, N>{.causal = true});
    auto& cross = w.phase.template start<typename Wk::CrossWork>();
    cross_attn.template prepare<B, N, M, T>(m.data(), cross);
    sn2.template apply<B * N>(x.data(), w.a.data());
    cross_attn.template forward_add<B, N, M, T>(w.a.data(), x.data(), cross, Mask<B, M>{.keys = memory_mask});
    sn3.template apply<B * N>(x.data(), w.a.data());
    ffn.template add_tiled<B * N, Wk::Tf>(w.a.data(), x.data(), w.phase.template start<typename Wk::FfnTile>());
  }

  template <size_t B, size_t N, size_t M>
  struct Infer {
    TensorOf<Stream, B, N, D> out;
    Work<B, N, M> w;

    template <class X, class Mem>
    const TensorOf<Stream, B, N, D>& forward(const DecoderBlock& p, const X& x, const Mem& m, const KeyMask<B, M>* memory_mask = nullptr) {
      static_assert(typed_shape_is<Stream, X, B, N, D>, "DecoderBlock: input rows x must be [B, N, D] (the pass's sizes, the block's width D)");
      static_assert(typed_shape_is<Stream, Mem, B, M, D>, "DecoderBlock: encoder memory m must be [B, M, D] (the pass's sizes, the block's width D)");
      if (&x != &out) std::copy(x.begin(), x.end(), out.begin());
      p.forward_in_place(out, m, w, memory_mask);
      return out;
    }
  };

  // In integers (P = precision::int8), made from the float block: on the residual stream at
  // scale s_h, the memory an int16 stream at s_m (the cross-attention's keys and values are
  // projected from it directly), the norms' int8 outputs scaled from their calibration ranges,
  // the attentions and the feed-forward layer from theirs, each into the stream.
  struct Ranges {
    float sn1 = 0, sn2 = 0, sn3 = 0, residual = 0;  // residual: the stream's values (x, h1, h2, out)
    typename Attention::Ranges self_attn, cross_attn;
    typename Ffn::Ranges ffn;
    template <class A, class X, class Y>
    void observe(const Float& f, const A& acts, const X& x, const Y& y) {
      sn1 = std::max(sn1, quant::max_abs(acts.sn1.out)), sn2 = std::max(sn2, quant::max_abs(acts.sn2.out));
      sn3 = std::max(sn3, quant::max_abs(acts.sn3.out));
      residual = std::max({residual, quant::max_abs(x), quant::max_abs(acts.h1), quant::max_abs(acts.h2), quant::max_abs(acts.out)});
      self_attn.observe(f.self_attn, acts.self_attn);
      cross_attn.observe(f.cross_attn, acts.cross_attn);
      ffn.observe(f.ffn, acts.ffn, x, y);
    }
  };
  void from_float(const Float& f, const Ranges& r, float s_h, float s_m) {
    sn1 = Of<ScaleNorm<D>>::quantize(f.sn1, quant::scale_for(r.sn1));
    sn2 = Of<ScaleNorm<D>>::quantize(f.sn2, quant::scale_for(r.sn2));
    sn3 = Of<ScaleNorm<D>>::quantize(f.sn3, quant::scale_for(r.sn3));
    self_attn = Attention::quantize(f.self_attn, r.self_attn, sn1.out_scale(0), sn1.out_scale(0), s_h);
    cross_attn = Attention::quantize(f.cross_attn, r.cross_attn, sn2.out_scale(0), s_m, s_h);
    ffn.from_float(f.ffn, r.ffn, sn3.out_scale(0), s_h);
  }

  template <size_t B, size_t N, size_t M>
  struct Acts {
    ActsOf<ScaleNorm<D>, B, N> sn1;
    ActsOf<MultiHeadAttention<D, D, D, H>, B, N, N> self_attn;
    Tensor<B, N, D> h1;
    ActsOf<ScaleNorm<D>, B, N> sn2;
    ActsOf<MultiHeadAttention<D, D, D, H>, B, N, M> cross_attn;
    Tensor<B, N, D> h2;
    ActsOf<ScaleNorm<D>, B, N> sn3;
    ActsOf<FeedForward<D, F>, B, N> ffn;
    Tensor<B, N, D> out;
    Tensor<B, N, D> dh2, dh1, dn1, dx;

    template <class X, class Mem>
    const Tensor<B, N, D>& forward(const DecoderBlock& p, const X& x, const Mem& m, const KeyMask<B, M>* memory_mask = nullptr) {
      static_assert(shape_is<X, B, N, D>, "DecoderBlock: input rows x must be [B, N, D] (the pass's sizes, the block's width D)");
      static_assert(shape_is<Mem, B, M, D>, "DecoderBlock: encoder memory m must be [B, M, D] (the pass's sizes, the block's width D)");
      const auto& n1 = sn1.forward(p.sn1, x);
      kernels::add<B * N * D>(x.data(), self_attn.forward(p.self_attn, n1, n1, Mask<B, N>{.causal = true}).data(), h1.data());
      const auto& n2 = sn2.forward(p.sn2, h1);
      kernels::add<B * N * D>(h1.data(), cross_attn.forward(p.cross_attn, n2, m, Mask<B, M>{.keys = memory_mask}).data(), h2.data());
      kernels::add<B * N * D>(h2.data(), ffn.forward(p.ffn, sn3.forward(p.sn3, h2)).data(), out.data());
      return out;
    }

    InputGrads<Tensor<B, N, D>, Tensor<B, M, D>> backward(const DecoderBlock& p, DecoderBlock& grad, const Tensor<B, N, D>& dout) {
      kernels::add<B * N * D>(dout.data(), sn3.backward(p.sn3, grad.sn3, ffn.backward(p.ffn, grad.ffn, dout)).data(), dh2.data());
      const auto dc = cross_attn.backward(p.cross_attn, grad.cross_attn, dh2);
      kernels::add<B * N * D>(dh2.data(), sn2.backward(p.sn2, grad.sn2, dc.dq).data(), dh1.data());
      const auto ds = self_attn.backward(p.self_attn, grad.self_attn, dh1);
      kernels::add<B * N * D>(ds.dq.data(), ds.dkv.data(), dn1.data());
      kernels::add<B * N * D>(dh1.data(), sn1.backward(p.sn1, grad.sn1, dn1).data(), dx.data());
      return {dx, dc.dkv};
    }
  };
};

}  // namespace stformer
