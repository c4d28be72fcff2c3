// MAB written by hand, part by part, as the library had it before it became a declaration
// (stformer/blocks/mab.hpp): the hand-written set blocks (tests/written_set.hpp) are built on it,
// and the tests hold the declaration to its names, plans, records and bits.
// written::MAB<D, H, Norm> — multi-head attention block of the Set Transformer (Lee et al. 2019) in
// pre-norm form, queries X [B, Nq, D], keys/values Y [B, Nk, D]:
//   h   = X + MHA(Nq(X), Nkv(Y))              (optionally key-padded over Y)
//   out = h + ReLU(Nff(h) Wfcᵀ + bfc)
//   backward: dh = dout + Nffᵀ fcᵀ (dout ⊙ [relu > 0]); dX = dh + Nqᵀ dxq(MHAᵀ dh);
//             dY = Nkvᵀ dxkv(MHAᵀ dh); returns {dq = dX, dkv = dY}
// Norm = ScaleNorm (default) or Identity (the paper's un-normalised block, no g entries).
// In integers as MAB<D, H, ScaleNorm, precision::int8>: the same composition on int16 streams,
// int16 rows inside (from_float).
// Parameters: nq.g, nkv.g, attn.*, nff.g, fc.weight [D, D] (Kaiming-normal), fc.bias.
#pragma once


#include <algorithm>
#include <iterator>

#include "stformer/stformer.hpp"
#include "written_feedforward.hpp"

namespace written {
using namespace stformer;

template <size_t D, size_t H, template <size_t, auto...> class Norm = ScaleNorm, class P = precision::float32>
struct MAB {
  template <class Leaf, size_t Bits = 8>
  using Of = typename P::template Of<Leaf, Bits>;
  using Float = MAB<D, H, Norm>;
  using Row = typename P::template Row<16>;
  using Attention = Of<MultiHeadAttention<D, D, D, H>, 16>;
  using Stream = typename P::Stream;
  Of<Norm<D>> nq, nkv;
  Attention attn;
  Of<Norm<D>> nff;
  Of<Linear<D, D, Init::kaiming_normal>> fc;

  template <class Fn, class... S>
  static constexpr void visit(const Path& at, Fn& f, S&... s) {
    stformer::visit(at / "nq", f, s.nq...);
    stformer::visit(at / "nkv", f, s.nkv...);
    stformer::visit(at / "attn", f, s.attn...);
    stformer::visit(at / "nff", f, s.nff...);
    stformer::visit(at / "fc", f, s.fc...);
  }

  // Forward only, in place on the query set's residual stream: x ← MAB(x, y), rows T at a time
  // in the projections. Work: a, which holds Nkv(Y) until the keys and values are projected
  // (full attention), then Nq(X), the attention's output in place, Nff(h) and ReLU(fc) (in
  // integers int16 rows); y1 = Nkv(Y) when the attention folds (float: its keys stay); the
  // attention's Work, whose tile also takes fc's rows. The same bits as Acts (in float).
  template <size_t B, size_t Nq, size_t Nk, size_t T = P::tile_rows(B * Nq, B * Nk)>
  struct Work {
    static constexpr bool folded = Attention::template folds<Nq, Nk>;
    TensorOf<Row, B, folded || Nq >= Nk ? Nq : Nk, D> a;
    [[no_unique_address]] std::conditional_t<folded, Tensor<B, Nk, D>, Nothing> y1;
    typename Attention::template Work<B, Nq, Nk, T> attn;
  };

  template <size_t B, size_t Nq, size_t Nk, size_t T>
  void forward_in_place(TensorOf<Stream, B, Nq, D>& x, const TensorOf<Stream, B, Nk, D>& y, Work<B, Nq, Nk, T>& w,
                        const KeyMask<B, Nk>* keys = nullptr) const {
    Row* kv;
    if constexpr (Work<B, Nq, Nk, T>::folded)
      kv = w.y1.data();
    else
      kv = w.a.data();
    nkv.template apply<B * Nk>(y.data(), kv);
    attn.template prepare<B, Nq, Nk, T>(kv, w.attn);
    nq.template apply<B * Nq>(x.data(), w.a.data());
    attn.template forward_add<B, Nq, Nk, T>(w.a.data(), x.data(), w.attn, Mask<B, Nk>{.keys = keys});
    nff.template apply<B * Nq>(x.data(), w.a.data());
    fc.template apply_tiled<B * Nq, decltype(w.attn)::rows, true, true>(w.a.data(), x.data(), std::data(w.attn.tile));
  }

  template <size_t B, size_t Nq, size_t Nk>
  struct Infer {
    TensorOf<Stream, B, Nq, D> out;
    Work<B, Nq, Nk> w;

    template <class X, class Y>
    const TensorOf<Stream, B, Nq, D>& forward(const MAB& p, const X& x, const Y& y, const KeyMask<B, Nk>* keys = nullptr) {
      static_assert(typed_shape_is<Stream, X, B, Nq, D>, "MAB: query set X must be [B, Nq, D] (the pass's sizes, the block's width D)");
      static_assert(typed_shape_is<Stream, Y, B, Nk, D>, "MAB: key set Y must be [B, Nk, D] (the pass's sizes, the block's width D)");
      if (&x != &out) std::copy(x.begin(), x.end(), out.begin());
      p.forward_in_place(out, y, w, keys);
      return out;
    }
  };

  // In integers (P = precision::int8), made from the float block for a query stream at scale
  // s_h: the norms' int16 outputs at |g|/32767 (an entry of g·x/‖x‖ is at most |g|: they never
  // saturate), the attention (int16 rows) and fc from the attention's ranges, into the stream.
  // Why int16 rows: the set model regresses a point, and every int8 rounding of them moves it
  // (the keys' norm most, its outliers set the scale); int16 there halves the int8 model's
  // distance from the float one (docs/quantized.md).
  struct Ranges {
    float residual = 0;  // the query set's stream: its input xq, h and out
    typename Attention::Ranges attn;
    template <class A, class X>
    void observe(const Float& f, const A& acts, const X& xq) {
      residual = std::max({residual, quant::max_abs(xq), quant::max_abs(acts.h), quant::max_abs(acts.out)});
      attn.observe(f.attn, acts.attn);
    }
  };
  void from_float(const Float& f, const Ranges& r, float s_h) {
    nq = Of<Norm<D>>::quantize(f.nq, quant::scale_for(std::abs(f.nq.g(0)), 32767));
    nkv = Of<Norm<D>>::quantize(f.nkv, quant::scale_for(std::abs(f.nkv.g(0)), 32767));
    nff = Of<Norm<D>>::quantize(f.nff, quant::scale_for(std::abs(f.nff.g(0)), 32767));
    attn = Attention::quantize(f.attn, r.attn, nq.out_scale(0), nkv.out_scale(0), s_h);
    fc.from_float(f.fc, nff.out_scale(0), s_h);
  }

  template <size_t B, size_t Nq, size_t Nk>
  struct Acts {
    ActsOf<Norm<D>, B, Nq> nq;
    ActsOf<Norm<D>, B, Nk> nkv;
    ActsOf<MultiHeadAttention<D, D, D, H>, B, Nq, Nk> attn;
    Tensor<B, Nq, D> h;
    ActsOf<Norm<D>, B, Nq> nff;
    ActsOf<Linear<D, D, Init::kaiming_normal>, B, Nq> fc;  // fc.out holds ReLU(Nff(h) Wfcᵀ + bfc)
    Tensor<B, Nq, D> out;
    using Dx = InputGrads<Tensor<B, Nq, D>, Tensor<B, Nk, D>>;  // into the query set X and the key set Y
    struct Workspace {
      Tensor<B, Nq, D> dfc, dh, a;
      Tensor<B, Nk, D> dkv;
      WorkspaceOf<decltype(attn)> part;
    };

    template <class X, class Y>
    const Tensor<B, Nq, D>& forward(const MAB& p, const X& x, const Y& y, const KeyMask<B, Nk>* keys = nullptr) {
      static_assert(shape_is<X, B, Nq, D>, "MAB: query set X must be [B, Nq, D] (the pass's sizes, the block's width D)");
      static_assert(shape_is<Y, B, Nk, D>, "MAB: key set Y must be [B, Nk, D] (the pass's sizes, the block's width D)");
      const auto& a = attn.forward(p.attn, nq.forward(p.nq, x), nkv.forward(p.nkv, y), Mask<B, Nk>{.keys = keys});
      kernels::add<B * Nq * D>(x.data(), a.data(), h.data());
      kernels::add<B * Nq * D>(h.data(), fc.template forward<true>(p.fc, nff.forward(p.nff, h)).data(), out.data());
      return out;
    }

    Dx backward(const MAB& p, MAB& grad, const Tensor<B, Nq, D>& dout, Dx dx, Workspace& ws) {
      auto& [dfc, dh, a, dkv, attn_ws] = ws;
      dfc = dout;
      kernels::relu_backward<B * Nq * D>(fc.out.data(), dfc.data());
      kernels::add<B * Nq * D>(dout.data(), nff.backward(p.nff, grad.nff, fc.backward(p.fc, grad.fc, dfc, a), dfc).data(), dh.data());
      attn.backward(p.attn, grad.attn, dh, {a, dkv}, attn_ws);
      kernels::add<B * Nq * D>(dh.data(), nq.backward(p.nq, grad.nq, a, dfc).data(), dx.dq.data());
      nkv.backward(p.nkv, grad.nkv, dkv, dx.dkv);
      return dx;
    }
  };
};

}  // namespace written
