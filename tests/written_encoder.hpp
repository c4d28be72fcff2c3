// written::EncoderBlock<D, H, F, Form> (Transformer encoder layer), rows x [B, N, D]; Form (blocks/form.hpp)
// its norms N1, N2, its feed-forward activation and their placement:
//   pre-norm (SpecForm, SPEC's, ScaleNorm and ReLU; PreNorm<Act>, LayerNorm):
//     h   = x + MHA(N1(x), N1(x))        (optionally causal / key-padded)
//     out = h + FFN(N2(h))
//     backward: dh = dout + N2ᵀ FFNᵀ dout;  dx = dh + N1ᵀ (dxq + dxkv of MHAᵀ dh)
//   post-norm (PostNorm<Act>: Vaswani et al., PyTorch's nn.TransformerEncoderLayer by default):
//     h   = N1(x + MHA(x, x))
//     out = N2(h + FFN(h))
//     backward: ds2 = N2ᵀ dout, dh = ds2 + FFNᵀ ds2;  ds1 = N1ᵀ dh, dx = ds1 + dxq + dxkv of MHAᵀ ds1
// Training: Acts, the record of every part (KeptActs), or under Memory::replay one half's at a
// time, the attention's run again before its backward (ReplayedActs).
// Forward only: Infer, or forward_in_place on a residual stream the caller keeps (models).
// In integers as EncoderBlock<D, H, F, Form, precision::int8> (stformer/core/precision.hpp): the
// same composition on an int16 residual stream, int8 rows inside; why int16 for the stream: it
// carries every block's sum at one scale, and the pointer model's choice among 50 points turns
// on small differences of it (docs/quantized.md). Post-norm, the branches' int8 rows are the
// stream requantized (blocks/form.hpp: branch_scale [2], branch_requant: the attention's and the
// feed-forward layer's), and the norms write the stream in place.
// Parameters: sn1.g, attn.*, sn2.g, ffn.* (in integers the leaves' integer tensors); the
// LayerNorm forms PyTorch's: norm1.*, self_attn.* (packed: in_proj_weight, in_proj_bias,
// out_proj.*), norm2.*, linear1.*, linear2.*.
#pragma once

#include <algorithm>

#include "stformer/stformer.hpp"
#include "written_form.hpp"

// The encoder block written by hand, part by part, as the library had it before EncoderBlock
// became a declaration (stformer/blocks/encoder.hpp): the tests hold the declaration to its
// names, plans, records and bits.
namespace written {
using namespace stformer;

template <size_t D, size_t H, size_t F, class Fm = SpecForm, class P = precision::float32>
struct EncoderBlock {
  static_assert(requires { Fm::norm_first; }, "EncoderBlock<D, H, F, Form, P>: its fourth parameter is a Form (SpecForm, PostNorm<Act>, PreNorm<Act>)");
  template <class Leaf>
  using Of = typename P::template Of<Leaf>;
  using Float = EncoderBlock<D, H, F, Fm>;
  using Norm = typename Fm::template Norm<D>;
  using FloatAttention = typename Fm::template Attention<D, H>;
  static constexpr bool pre = Fm::norm_first;
  using Attention = Of<FloatAttention>;
  using Ffn = Of<FeedForward<D, F, typename Fm::Act>>;
  using Stream = typename P::Stream;
  Of<Norm> sn1;
  Attention attn;
  Of<Norm> sn2;
  Ffn ffn;
  [[no_unique_address]] typename FormParts<Fm>::template BranchScalesOf<P, 2> rows;  // post-norm in integers: the attention's and the FFN's

  template <class Fn, class... S>
  static constexpr void visit(const Path& at, Fn& f, S&... s) {
    stformer::visit(at / FormParts<Fm>::norm_name(1), f, s.sn1...);
    FormParts<Fm>::visit_attention(at, "attn", "self_attn", f, s.attn...);
    stformer::visit(at / FormParts<Fm>::norm_name(2), f, s.sn2...);
    FormParts<Fm>::visit_ffn(at, f, s.ffn...);
    FormParts<Fm>::visit_branch_scales(at, f, s.rows...);
  }

  // Forward only, in place on the residual stream: h ← EncoderBlock(h), rows in tiles in the
  // projections and the feed-forward layer. Work: a [B, N, D] (N1(h), which becomes the
  // attention's output in place, then N2(h); post-norm: h itself; in integers int8 rows), and over one arena the
  // attention's keys, values and tile, then the feed-forward layer's tile of Tf ≥ T rows, as
  // many as the attention's buffers leave room for (in integers Tf = T: one tile size for every
  // product, fewer kernels in a firmware image). The same bits as Acts (in float).
  template <size_t B, size_t N, size_t T = P::tile_rows(B * N, B * N)>
  struct Work {
    using AttentionWork = typename Attention::template Work<B, N, N, T>;
    static constexpr size_t Tf = P::integer ? T : rows_in_room(B * N, T, sizeof(AttentionWork), Ffn::tile_row_bytes);
    using FfnTile = typename Ffn::template Tile<Tf>;
    TensorOf<typename P::template Row<8>, B, N, D> a;
    Phases<AttentionWork, FfnTile> phase;
  };

  // pool: the threads to run on (Serial, or a ThreadPool; in integers the calling thread): the
  // products and the attention in parts of rows, the same bits for any pool.
  template <size_t B, size_t N, size_t T, class Pool = Serial>
  void forward_in_place(TensorOf<Stream, B, N, D>& h, Work<B, N, T>& w, Mask<B, N> mask = {}, Pool&& pool = Pool{}) const {
    using Wk = Work<B, N, T>;
    auto& attention = w.phase.template start<typename Wk::AttentionWork>();
    FormParts<Fm>::template branch_input<B * N, D>(sn1, h.data(), w.a.data(), rows, 0);
    attn.template prepare<B, N, N, T>(w.a.data(), attention, pool);
    attn.template forward_add<B, N, N, T>(w.a.data(), h.data(), attention, mask, pool);
    FormParts<Fm>::template branch_output<B * N>(sn1, h.data());
    FormParts<Fm>::template branch_input<B * N, D>(sn2, h.data(), w.a.data(), rows, 1);
    ffn.template add_tiled<B * N, Wk::Tf>(w.a.data(), h.data(), w.phase.template start<typename Wk::FfnTile>(), pool);
    FormParts<Fm>::template branch_output<B * N>(sn2, h.data());
  }

  // A step of a Sequential (stformer/compose/sequential.hpp): forward_in_place, Work its scratch,
  // with as many rows per tile as Room holds (the same bits for any tile).
  template <size_t B, size_t N>
  using Input = TensorOf<Stream, B, N, D>;
  static constexpr bool in_place = true;
  template <size_t B, size_t N, size_t Room>
  using Scratch = typename TiledIn<Work, B, N, Room, P::tile_least(B * N)>::type;
  template <size_t B, size_t N>
  struct Infer {
    TensorOf<Stream, B, N, D> out;
    Work<B, N> w;

    template <class X, class Pool = Serial>
    const TensorOf<Stream, B, N, D>& forward(const EncoderBlock& p, const X& x, Mask<B, N> mask = {}, Pool&& pool = Pool{}) {
      static_assert(typed_shape_is<Stream, X, B, N, D>, "EncoderBlock: input rows x must be [B, N, D] (the pass's sizes, the block's width D)");
      if (&x != &out) std::copy(x.begin(), x.end(), out.begin());
      p.forward_in_place(out, w, mask, pool);
      return out;
    }
  };

  // In integers (P = precision::int8), made from the float block: on the residual stream at
  // scale s_h (same_scale: in place), pre-norm the norms' int8 outputs scaled from their
  // calibration ranges; post-norm the norms' outputs on the stream, at s_h, and the branches'
  // int8 rows the stream requantized at the ranges of the block's input and of N1(h); the
  // attention and the feed-forward layer from their ranges, each into the stream.
  static constexpr bool same_scale = true;
  struct Ranges {
    float input = 0, sn1 = 0, sn2 = 0, residual = 0;  // residual: the stream's values inside (h and out; post-norm N1(h) too)
    typename Attention::Ranges attn;
    typename Ffn::Ranges ffn;
    template <class A, class X, class Y>
    void observe(const Float& f, const A& acts, const X& x, const Y& y) {
      input = std::max(input, quant::max_abs(x));
      sn1 = std::max(sn1, quant::max_abs(acts.sn1.out)), sn2 = std::max(sn2, quant::max_abs(acts.sn2.out));
      residual = std::max({residual, quant::max_abs(acts.h), quant::max_abs(acts.out)});
      if constexpr (!pre) residual = std::max({residual, sn1, sn2});
      attn.observe(f.attn, acts.attn);
      ffn.observe(f.ffn, acts.ffn, x, y);
    }
  };
  void from_float(const Float& f, const Ranges& r, float s_h, float) {
    sn1.from_float(f.sn1, {}, s_h, pre ? quant::scale_for(r.sn1) : s_h);
    sn2.from_float(f.sn2, {}, s_h, pre ? quant::scale_for(r.sn2) : s_h);
    float s_a1 = sn1.out_scale(0), s_a2 = sn2.out_scale(0);  // the branches' input rows
    if constexpr (!pre) {
      rows.set(0, s_a1 = quant::scale_for(r.input), s_h);  // the block's input
      rows.set(1, s_a2 = quant::scale_for(r.sn1), s_h);    // N1(h)
    }
    attn = Attention::quantize(f.attn, r.attn, s_a1, s_a1, s_h);
    ffn.from_float(f.ffn, r.ffn, s_a2, s_h);
  }

  template <size_t B, size_t N>
  struct KeptActs {
    ActsOf<Norm, B, N> sn1;
    ActsOf<FloatAttention, B, N, N> attn;
    Tensor<B, N, D> h;  // post-norm: s1 = x + MHA(x, x) here, h = N1(s1) in sn1
    ActsOf<Norm, B, N> sn2;
    ActsOf<FeedForward<D, F, typename Fm::Act>, B, N> ffn;
    Tensor<B, N, D> out;  // post-norm: s2 = h + FFN(h) here, out = N2(s2) in sn2
    using Dx = Tensor<B, N, D>;
    struct Workspace {
      Tensor<B, N, D> dh, a;  // pre-norm dh and a gradient between the parts; post-norm two such
      Phases<WorkspaceOf<decltype(attn)>, WorkspaceOf<decltype(ffn)>> part;
    };

    template <class X>
    const Tensor<B, N, D>& forward(const EncoderBlock& p, const X& x, Mask<B, N> mask = {}) {
      static_assert(shape_is<X, B, N, D>, "EncoderBlock: input rows x must be [B, N, D] (the pass's sizes, the block's width D)");
      if constexpr (pre) {
        const auto& n1 = sn1.forward(p.sn1, x);
        kernels::add<B * N * D>(x.data(), attn.forward(p.attn, n1, n1, mask).data(), h.data());
        kernels::add<B * N * D>(h.data(), ffn.forward(p.ffn, sn2.forward(p.sn2, h)).data(), out.data());
        return out;
      } else {
        kernels::add<B * N * D>(x.data(), attn.forward(p.attn, x, x, mask).data(), h.data());
        const auto& hn = sn1.forward(p.sn1, h);
        kernels::add<B * N * D>(hn.data(), ffn.forward(p.ffn, hn).data(), out.data());
        return sn2.forward(p.sn2, out);
      }
    }

    // The parts' gradients pass through ws.a and dx (post-norm also ws.dh); the sums are those
    // of the formulas at the top, in their order.
    const Tensor<B, N, D>& backward(const EncoderBlock& p, EncoderBlock& grad, const Tensor<B, N, D>& dout, Tensor<B, N, D>& dx, Workspace& ws) {
      auto& [dh, a, part] = ws;
      if constexpr (pre) {
        ffn.backward(p.ffn, grad.ffn, dout, a, part.template start<WorkspaceOf<decltype(ffn)>>());
        kernels::add<B * N * D>(dout.data(), sn2.backward(p.sn2, grad.sn2, a, dx).data(), dh.data());
        const auto da = attn.backward(p.attn, grad.attn, dh, {a, dx}, part.template start<WorkspaceOf<decltype(attn)>>());
        kernels::add<B * N * D>(da.dq.data(), da.dkv.data(), a.data());  // dn1
        kernels::add<B * N * D>(dh.data(), sn1.backward(p.sn1, grad.sn1, a, dx).data(), dx.data());
      } else {
        const auto& ds2 = sn2.backward(p.sn2, grad.sn2, dout, a);
        kernels::add<B * N * D>(ds2.data(), ffn.backward(p.ffn, grad.ffn, ds2, dh, part.template start<WorkspaceOf<decltype(ffn)>>()).data(), dx.data());
        const auto& ds1 = sn1.backward(p.sn1, grad.sn1, dx, a);  // dx holds dh
        const auto da = attn.backward(p.attn, grad.attn, ds1, {dh, dx}, part.template start<WorkspaceOf<decltype(attn)>>());
        kernels::add<B * N * D>(da.dq.data(), da.dkv.data(), dh.data());  // dn1
        kernels::add<B * N * D>(ds1.data(), dh.data(), dx.data());
      }
      return dx;
    }
  };

  // Memory::replay (ReplayActsOf): the block's input (by pointer), its mask, h and out (and
  // post-norm the norms' records), and over one storage one half at a time, each with its
  // workspace: the attention's (pre-norm with N1's), or the feed-forward layer's (pre-norm with
  // N2's). forward ends in the feed-forward half; backward takes it, then runs the attention
  // half's forward again and takes that: KeptActs's operations in their order, so its bits.
  template <size_t B, size_t N>
  struct ReplayedActs {
    template <class A>
    struct Half {
      [[no_unique_address]] std::conditional_t<pre, ActsOf<Norm, B, N>, Nothing> sn;
      A acts;
      WorkspaceOf<A> ws;
    };
    using AttentionHalf = Half<typename FloatAttention::template Acts<B, N, N, Memory::replay>>;
    using FfnHalf = Half<ActsOf<FeedForward<D, F, typename Fm::Act>, B, N>>;
    const Tensor<B, N, D>* x = nullptr;
    Mask<B, N> mask;
    [[no_unique_address]] std::conditional_t<pre, Nothing, ActsOf<Norm, B, N>> sn1, sn2;
    Tensor<B, N, D> h, out;  // as KeptActs's
    Phases<AttentionHalf, FfnHalf> half;
    using Dx = Tensor<B, N, D>;
    struct Workspace {
      Tensor<B, N, D> dh, a;  // as KeptActs's
    };

    template <class X>
    const Tensor<B, N, D>& forward(const EncoderBlock& p, const X& in, Mask<B, N> m = {}) {
      static_assert(shape_is<X, B, N, D>, "EncoderBlock: input rows x must be [B, N, D] (the pass's sizes, the block's width D)");
      x = &in, mask = m;
      attention(p);
      auto& f = half.template start<FfnHalf>();
      if constexpr (pre) {
        kernels::add<B * N * D>(h.data(), f.acts.forward(p.ffn, f.sn.forward(p.sn2, h)).data(), out.data());
        return out;
      } else {
        const auto& hn = sn1.forward(p.sn1, h);
        kernels::add<B * N * D>(hn.data(), f.acts.forward(p.ffn, hn).data(), out.data());
        return sn2.forward(p.sn2, out);
      }
    }

    // The attention half's forward: h = x + MHA(N1(x), N1(x)) (post-norm s1 = x + MHA(x, x)).
    AttentionHalf& attention(const EncoderBlock& p) {
      auto& a = half.template start<AttentionHalf>();
      const Tensor<B, N, D>* in = x;
      if constexpr (pre) in = &a.sn.forward(p.sn1, *x);
      kernels::add<B * N * D>(x->data(), a.acts.forward(p.attn, *in, *in, mask, a.ws).data(), h.data());
      return a;
    }

    const Tensor<B, N, D>& backward(const EncoderBlock& p, EncoderBlock& grad, const Tensor<B, N, D>& dout, Tensor<B, N, D>& dx, Workspace& ws) {
      auto& f = half.template current<FfnHalf>();
      if constexpr (pre) {
        f.acts.backward(p.ffn, grad.ffn, dout, ws.a, f.ws);
        kernels::add<B * N * D>(dout.data(), f.sn.backward(p.sn2, grad.sn2, ws.a, dx).data(), ws.dh.data());
        auto& a = attention(p);
        const auto da = a.acts.backward(p.attn, grad.attn, ws.dh, {ws.a, dx}, a.ws);
        kernels::add<B * N * D>(da.dq.data(), da.dkv.data(), ws.a.data());  // dn1
        kernels::add<B * N * D>(ws.dh.data(), a.sn.backward(p.sn1, grad.sn1, ws.a, dx).data(), dx.data());
      } else {
        const auto& ds2 = sn2.backward(p.sn2, grad.sn2, dout, ws.a);
        kernels::add<B * N * D>(ds2.data(), f.acts.backward(p.ffn, grad.ffn, ds2, ws.dh, f.ws).data(), dx.data());
        const auto& ds1 = sn1.backward(p.sn1, grad.sn1, dx, ws.a);  // dx holds dh
        auto& a = attention(p);
        const auto da = a.acts.backward(p.attn, grad.attn, ds1, {ws.dh, dx}, a.ws);
        kernels::add<B * N * D>(da.dq.data(), da.dkv.data(), ws.dh.data());  // dn1
        kernels::add<B * N * D>(ds1.data(), ws.dh.data(), dx.data());
      }
      return dx;
    }
  };

  // The training record: KeptActs, or under Memory::replay ReplayedActs.
  template <size_t B, size_t N, Memory M = Memory::keep>
  using Acts = std::conditional_t<M == Memory::replay, ReplayedActs<B, N>, KeptActs<B, N>>;
};

}  // namespace written

// Its integer form (stformer/quantized/quantize.hpp): the same block at precision::int8.
template <size_t D, size_t H, size_t F, class Fm>
struct stformer::Int8Of<written::EncoderBlock<D, H, F, Fm>> {
  using type = written::EncoderBlock<D, H, F, Fm, written::precision::int8>;
};
