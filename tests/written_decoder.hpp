// The decoder written by hand, part by part, as the library had it before DecoderBlock and
// TransformerDecoder became declarations (stformer/blocks/decoder.hpp): the tests hold the
// declarations to its names, plans, records and bits.
// written::DecoderBlock<D, H, F, Form> (Transformer decoder layer), rows x [B, N, D], encoder memory
// m [B, M, D]; Form (blocks/form.hpp) its norms N1, N2, N3, its feed-forward activation and their
// placement:
//   pre-norm (SpecForm: ScaleNorm and ReLU; PreNorm<Act>: LayerNorm):
//     h1  = x  + SelfMHA(N1(x), N1(x))     causal
//     h2  = h1 + CrossMHA(N2(h1), m)       (optionally key-padded over m)
//     out = h2 + FFN(N3(h2))
//     backward: dh2 = dout + N3ᵀ FFNᵀ dout; dh1 = dh2 + N2ᵀ dxq(CrossMHAᵀ dh2);
//               dx = dh1 + N1ᵀ (dxq + dxkv of SelfMHAᵀ dh1); dm = dxkv of CrossMHAᵀ dh2
//   post-norm (PostNorm<Act>: PyTorch's nn.TransformerDecoderLayer with a causal tgt_mask):
//     h1 = N1(x + SelfMHA(x, x)),  h2 = N2(h1 + CrossMHA(h1, m)),  out = N3(h2 + FFN(h2))
//     backward: ds3 = N3ᵀ dout, dh2 = ds3 + FFNᵀ ds3; ds2 = N2ᵀ dh2, dh1 = ds2 + dxq(CrossMHAᵀ ds2);
//               ds1 = N1ᵀ dh1, dx = ds1 + dxq + dxkv of SelfMHAᵀ ds1; dm = dxkv of CrossMHAᵀ ds2
//   returns {dq = dx, dkv = dm}
// In integers as DecoderBlock<D, H, F, Form, precision::int8>: the same composition on an int16
// residual stream, the memory an int16 stream of its own (from_float); post-norm, the branches'
// int8 rows are the stream requantized (blocks/form.hpp: branch_scale [3], branch_requant).
// Parameters: sn1.g, self_attn.*, sn2.g, cross_attn.*, sn3.g, ffn.*; the LayerNorm forms
// PyTorch's (nn.TransformerDecoderLayer): norm1.*, self_attn.*, norm2.*, multihead_attn.* (each
// attention packed: in_proj_weight, in_proj_bias, out_proj.*), norm3.*, linear1.*, linear2.*.
#pragma once


#include <algorithm>
#include <array>
#include <type_traits>

#include "stformer/stformer.hpp"
#include "written_form.hpp"

namespace written {
using namespace stformer;

template <size_t D, size_t H, size_t F, class Fm = SpecForm, class P = precision::float32>
struct DecoderBlock {
  static_assert(requires { Fm::norm_first; }, "DecoderBlock<D, H, F, Form, P>: its fourth parameter is a Form (SpecForm, PostNorm<Act>, PreNorm<Act>)");
  template <class Leaf>
  using Of = typename P::template Of<Leaf>;
  using Float = DecoderBlock<D, H, F, Fm>;
  using Norm = typename Fm::template Norm<D>;
  using FloatAttention = typename Fm::template Attention<D, H>;
  using Attention = Of<FloatAttention>;
  using Ffn = Of<FeedForward<D, F, typename Fm::Act>>;
  using Stream = typename P::Stream;
  static constexpr bool pre = Fm::norm_first;
  static constexpr size_t width = D;
  Of<Norm> sn1;
  Attention self_attn;
  Of<Norm> sn2;
  Attention cross_attn;
  Of<Norm> sn3;
  Ffn ffn;
  [[no_unique_address]] typename FormParts<Fm>::template BranchScalesOf<P, 3> rows;  // post-norm in integers: the three branches'

  template <class Fn, class... S>
  static constexpr void visit(const Path& at, Fn& f, S&... s) {
    stformer::visit(at / FormParts<Fm>::norm_name(1), f, s.sn1...);
    stformer::visit(at / "self_attn", f, s.self_attn...);
    stformer::visit(at / FormParts<Fm>::norm_name(2), f, s.sn2...);
    FormParts<Fm>::visit_attention(at, "cross_attn", "multihead_attn", f, s.cross_attn...);
    stformer::visit(at / FormParts<Fm>::norm_name(3), f, s.sn3...);
    FormParts<Fm>::visit_ffn(at, f, s.ffn...);
    FormParts<Fm>::visit_branch_scales(at, f, s.rows...);
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

  // pool: as EncoderBlock's (the same bits for any pool).
  template <size_t B, size_t N, size_t M, size_t T, class Pool = Serial>
  void forward_in_place(TensorOf<Stream, B, N, D>& x, const TensorOf<Stream, B, M, D>& m, Work<B, N, M, T>& w,
                        const KeyMask<B, M>* memory_mask = nullptr, Pool&& pool = Pool{}) const {
    using Wk = Work<B, N, M, T>;
    auto& self = w.phase.template start<typename Wk::SelfWork>();
    FormParts<Fm>::template branch_input<B * N, D>(sn1, x.data(), w.a.data(), rows, 0);
    self_attn.template prepare<B, N, N, T>(w.a.data(), self, pool);
    self_attn.template forward_add<B, N, N, T>(w.a.data(), x.data(), self, Mask<B, N>{.causal = true}, pool);
    FormParts<Fm>::template branch_output<B * N>(sn1, x.data());
    auto& cross = w.phase.template start<typename Wk::CrossWork>();
    cross_attn.template prepare<B, N, M, T>(m.data(), cross, pool);
    FormParts<Fm>::template branch_input<B * N, D>(sn2, x.data(), w.a.data(), rows, 1);
    cross_attn.template forward_add<B, N, M, T>(w.a.data(), x.data(), cross, Mask<B, M>{.keys = memory_mask}, pool);
    FormParts<Fm>::template branch_output<B * N>(sn2, x.data());
    FormParts<Fm>::template branch_input<B * N, D>(sn3, x.data(), w.a.data(), rows, 2);
    ffn.template add_tiled<B * N, Wk::Tf>(w.a.data(), x.data(), w.phase.template start<typename Wk::FfnTile>(), pool);
    FormParts<Fm>::template branch_output<B * N>(sn3, x.data());
  }

  template <size_t B, size_t N, size_t M>
  struct Infer {
    TensorOf<Stream, B, N, D> out;
    Work<B, N, M> w;

    template <class X, class Mem, class Pool = Serial>
    const TensorOf<Stream, B, N, D>& forward(const DecoderBlock& p, const X& x, const Mem& m, const KeyMask<B, M>* memory_mask = nullptr,
                                             Pool&& pool = Pool{}) {
      static_assert(typed_shape_is<Stream, X, B, N, D>, "DecoderBlock: input rows x must be [B, N, D] (the pass's sizes, the block's width D)");
      static_assert(typed_shape_is<Stream, Mem, B, M, D>, "DecoderBlock: encoder memory m must be [B, M, D] (the pass's sizes, the block's width D)");
      if (&x != &out) std::copy(x.begin(), x.end(), out.begin());
      p.forward_in_place(out, m, w, memory_mask, pool);
      return out;
    }
  };

  // In integers (P = precision::int8), made from the float block: on the residual stream at
  // scale s_h, the memory an int16 stream at s_m (the cross-attention's keys and values are
  // projected from it directly), the norms' int8 outputs scaled from their calibration ranges,
  // the attentions and the feed-forward layer from theirs, each into the stream.
  struct Ranges {
    float input = 0, sn1 = 0, sn2 = 0, sn3 = 0, residual = 0;  // residual: the stream's values (x, h1, h2, out; post-norm the norms' too)
    typename Attention::Ranges self_attn, cross_attn;
    typename Ffn::Ranges ffn;
    template <class A, class X, class Y>
    void observe(const Float& f, const A& acts, const X& x, const Y& y) {
      input = std::max(input, quant::max_abs(x));
      sn1 = std::max(sn1, quant::max_abs(acts.sn1.out)), sn2 = std::max(sn2, quant::max_abs(acts.sn2.out));
      sn3 = std::max(sn3, quant::max_abs(acts.sn3.out));
      residual = std::max({residual, input, quant::max_abs(acts.h1), quant::max_abs(acts.h2), quant::max_abs(acts.out)});
      if constexpr (!pre) residual = std::max({residual, sn1, sn2, sn3});
      self_attn.observe(f.self_attn, acts.self_attn);
      cross_attn.observe(f.cross_attn, acts.cross_attn);
      ffn.observe(f.ffn, acts.ffn, x, y);
    }
  };
  void from_float(const Float& f, const Ranges& r, float s_h, float s_m) {
    sn1.from_float(f.sn1, {}, s_h, pre ? quant::scale_for(r.sn1) : s_h);
    sn2.from_float(f.sn2, {}, s_h, pre ? quant::scale_for(r.sn2) : s_h);
    sn3.from_float(f.sn3, {}, s_h, pre ? quant::scale_for(r.sn3) : s_h);
    float s_a[3] = {sn1.out_scale(0), sn2.out_scale(0), sn3.out_scale(0)};  // the branches' input rows
    if constexpr (!pre) {
      const float range[3] = {r.input, r.sn1, r.sn2};  // x, N1(·), N2(·)
      for (size_t i = 0; i < 3; ++i) rows.set(i, s_a[i] = quant::scale_for(range[i]), s_h);
    }
    self_attn = Attention::quantize(f.self_attn, r.self_attn, s_a[0], s_a[0], s_h);
    cross_attn = Attention::quantize(f.cross_attn, r.cross_attn, s_a[1], s_m, s_h);
    ffn.from_float(f.ffn, r.ffn, s_a[2], s_h);
  }

  template <size_t B, size_t N, size_t M>
  struct Acts {
    ActsOf<Norm, B, N> sn1;
    ActsOf<FloatAttention, B, N, N> self_attn;
    Tensor<B, N, D> h1;  // post-norm: each of h1, h2, out the sum before its norm
    ActsOf<Norm, B, N> sn2;
    ActsOf<FloatAttention, B, N, M> cross_attn;
    Tensor<B, N, D> h2;
    ActsOf<Norm, B, N> sn3;
    ActsOf<FeedForward<D, F, typename Fm::Act>, B, N> ffn;
    Tensor<B, N, D> out;
    using Dx = InputGrads<Tensor<B, N, D>, Tensor<B, M, D>>;  // into the rows x and the memory m
    struct Workspace {
      Tensor<B, N, D> dh, a, b;  // dh2 then dh1, and two gradients between the parts
      Phases<WorkspaceOf<decltype(self_attn)>, WorkspaceOf<decltype(cross_attn)>, WorkspaceOf<decltype(ffn)>> part;
    };

    template <class X, class Mem>
    const Tensor<B, N, D>& forward(const DecoderBlock& p, const X& x, const Mem& m, const KeyMask<B, M>* memory_mask = nullptr) {
      static_assert(shape_is<X, B, N, D>, "DecoderBlock: input rows x must be [B, N, D] (the pass's sizes, the block's width D)");
      static_assert(shape_is<Mem, B, M, D>, "DecoderBlock: encoder memory m must be [B, M, D] (the pass's sizes, the block's width D)");
      const Mask<B, N> causal{.causal = true};
      const Mask<B, M> memory{.keys = memory_mask};
      if constexpr (pre) {
        const auto& n1 = sn1.forward(p.sn1, x);
        kernels::add<B * N * D>(x.data(), self_attn.forward(p.self_attn, n1, n1, causal).data(), h1.data());
        const auto& n2 = sn2.forward(p.sn2, h1);
        kernels::add<B * N * D>(h1.data(), cross_attn.forward(p.cross_attn, n2, m, memory).data(), h2.data());
        kernels::add<B * N * D>(h2.data(), ffn.forward(p.ffn, sn3.forward(p.sn3, h2)).data(), out.data());
        return out;
      } else {
        kernels::add<B * N * D>(x.data(), self_attn.forward(p.self_attn, x, x, causal).data(), h1.data());
        const auto& n1 = sn1.forward(p.sn1, h1);
        kernels::add<B * N * D>(n1.data(), cross_attn.forward(p.cross_attn, n1, m, memory).data(), h2.data());
        const auto& n2 = sn2.forward(p.sn2, h2);
        kernels::add<B * N * D>(n2.data(), ffn.forward(p.ffn, n2).data(), out.data());
        return sn3.forward(p.sn3, out);
      }
    }

    // The memory's gradient goes straight to dx.dkv; the rows' pass through ws (dh: dh2, then
    // dh1; post-norm the sums before the norms), the sums in the formulas' order.
    Dx backward(const DecoderBlock& p, DecoderBlock& grad, const Tensor<B, N, D>& dout, Dx dx, Workspace& ws) {
      auto& [dh, a, b, part] = ws;
      if constexpr (pre) {
        ffn.backward(p.ffn, grad.ffn, dout, a, part.template start<WorkspaceOf<decltype(ffn)>>());
        kernels::add<B * N * D>(dout.data(), sn3.backward(p.sn3, grad.sn3, a, b).data(), dh.data());  // dh2
        cross_attn.backward(p.cross_attn, grad.cross_attn, dh, {a, dx.dkv}, part.template start<WorkspaceOf<decltype(cross_attn)>>());
        kernels::add<B * N * D>(dh.data(), sn2.backward(p.sn2, grad.sn2, a, b).data(), dh.data());  // dh1
        self_attn.backward(p.self_attn, grad.self_attn, dh, {a, b}, part.template start<WorkspaceOf<decltype(self_attn)>>());
        kernels::add<B * N * D>(a.data(), b.data(), a.data());  // dn1
        kernels::add<B * N * D>(dh.data(), sn1.backward(p.sn1, grad.sn1, a, b).data(), dx.dq.data());
      } else {
        const auto& ds3 = sn3.backward(p.sn3, grad.sn3, dout, a);
        kernels::add<B * N * D>(ds3.data(), ffn.backward(p.ffn, grad.ffn, ds3, b, part.template start<WorkspaceOf<decltype(ffn)>>()).data(), dh.data());
        const auto& ds2 = sn2.backward(p.sn2, grad.sn2, dh, a);
        cross_attn.backward(p.cross_attn, grad.cross_attn, ds2, {b, dx.dkv}, part.template start<WorkspaceOf<decltype(cross_attn)>>());
        kernels::add<B * N * D>(ds2.data(), b.data(), dh.data());  // dh1
        const auto& ds1 = sn1.backward(p.sn1, grad.sn1, dh, a);
        self_attn.backward(p.self_attn, grad.self_attn, ds1, {b, dh}, part.template start<WorkspaceOf<decltype(self_attn)>>());
        kernels::add<B * N * D>(b.data(), dh.data(), b.data());  // dn1
        kernels::add<B * N * D>(ds1.data(), b.data(), dx.dq.data());
      }
      return dx;
    }
  };
};

// TransformerDecoder<Layer, L, FinalNorm> (PyTorch's nn.TransformerDecoder(layer, L, norm)): L
// decoder layers of one type, each with its own parameters, over the same memory m [B, M, D],
// then the final norm (FinalNorm = void: none, PyTorch's norm=None):
//   h_0 = x,  h_{i+1} = Layer_i(h_i, m)  (causal; the memory optionally key-padded),  out = FinalNorm(h_L)
//   backward: dh_L = FinalNormᵀ dout,  dh_i = dx of Layer_iᵀ dh_{i+1},  dm = Σ_i dm of Layer_iᵀ
//   returns {dq = dh_0, dkv = dm}
// Parameters: layers.0.*, …, layers.{L−1}.*, norm.* (PyTorch's names). Forward only: Infer, the
// layers in place on one stream with one Work between them, then the norm in place.
namespace detail {
template <class Norm, size_t B, size_t N>
struct NormActs {
  using type = ActsOf<Norm, B, N>;
};
template <size_t B, size_t N>
struct NormActs<Nothing, B, N> {
  using type = Nothing;
};
}  // namespace detail

template <class Layer, size_t L, class FinalNorm = void>
struct TransformerDecoder {
  static_assert(L > 0, "TransformerDecoder: at least one layer");
  static constexpr size_t D = Layer::width;
  static constexpr bool has_norm = !std::is_void_v<FinalNorm>;
  using Norm = std::conditional_t<has_norm, FinalNorm, Nothing>;
  std::array<Layer, L> layers;
  [[no_unique_address]] Norm norm;

  template <class Fn, class... S>
  static constexpr void visit(const Path& at, Fn& f, S&... s) {
    for (size_t i = 0; i < L; ++i) stformer::visit(at / "layers" / i, f, s.layers[i]...);
    if constexpr (has_norm) stformer::visit(at / "norm", f, s.norm...);
  }

  template <size_t B, size_t N, size_t M>
  struct Infer {
    Tensor<B, N, D> out;
    typename Layer::template Work<B, N, M> w;

    template <class X, class Mem>
    const Tensor<B, N, D>& forward(const TransformerDecoder& p, const X& x, const Mem& m, const KeyMask<B, M>* memory_mask = nullptr) {
      static_assert(shape_is<X, B, N, D>, "TransformerDecoder: input rows x must be [B, N, D] (the pass's sizes, the layers' width D)");
      static_assert(shape_is<Mem, B, M, D>, "TransformerDecoder: encoder memory m must be [B, M, D] (the pass's sizes, the layers' width D)");
      if (&x != &out) std::copy(x.begin(), x.end(), out.begin());
      for (const auto& layer : p.layers) layer.forward_in_place(out, m, w, memory_mask);
      if constexpr (has_norm) p.norm.template apply<B * N>(out.data(), out.data());
      return out;
    }
  };

  template <size_t B, size_t N, size_t M>
  struct Acts {
    std::array<ActsOf<Layer, B, N, M>, L> layers;
    [[no_unique_address]] typename detail::NormActs<Norm, B, N>::type norm;
    using Dx = InputGrads<Tensor<B, N, D>, Tensor<B, M, D>>;
    struct Workspace {
      std::array<Tensor<B, N, D>, 2> d;  // the gradients between the layers, in turn
      Tensor<B, M, D> dm;                // one layer's gradient of the memory
      WorkspaceOf<ActsOf<Layer, B, N, M>> layer;
    };

    template <class X, class Mem>
    const Tensor<B, N, D>& forward(const TransformerDecoder& p, const X& x, const Mem& m, const KeyMask<B, M>* memory_mask = nullptr) {
      static_assert(shape_is<X, B, N, D>, "TransformerDecoder: input rows x must be [B, N, D] (the pass's sizes, the layers' width D)");
      const Tensor<B, N, D>* h = &layers[0].forward(p.layers[0], x, m, memory_mask);
      for (size_t i = 1; i < L; ++i) h = &layers[i].forward(p.layers[i], *h, m, memory_mask);
      if constexpr (has_norm) h = &norm.forward(p.norm, *h);
      return *h;
    }

    // dx.dkv: the layers' gradients of the memory summed, the last layer's first.
    Dx backward(const TransformerDecoder& p, TransformerDecoder& grad, const Tensor<B, N, D>& dout, Dx dx, Workspace& ws) {
      const Tensor<B, N, D>* d = &dout;
      if constexpr (has_norm) d = &norm.backward(p.norm, grad.norm, dout, ws.d[0]);
      kernels::fill<B * M * D>(dx.dkv.data(), 0.0f);
      for (size_t i = L; i-- > 0;) {
        Tensor<B, N, D>& next = i == 0 ? dx.dq : d == &ws.d[0] ? ws.d[1] : ws.d[0];
        layers[i].backward(p.layers[i], grad.layers[i], *d, {next, ws.dm}, ws.layer);
        kernels::add_to<B * M * D>(ws.dm.data(), dx.dkv.data());
        d = &next;
      }
      return dx;
    }
  };
};

}  // namespace written
