// The form of a Transformer encoder or decoder block (EncoderBlock: blocks/encoder.hpp declares
// each form with the combinators; DecoderBlock): its norm, its
// feed-forward layer's activation and where the norms sit, each residual branch as
//   pre-norm:   x = x + Branch(N(x))          (SPEC's blocks with ScaleNorm; PyTorch's norm_first=True)
//   post-norm:  x = N(x + Branch(x))          (Vaswani et al. 2017; PyTorch's default)
//   SpecForm            ScaleNorm, ReLU, pre-norm, SPEC's names (sn1, attn.wq, ffn.fc1, ...)
//   PostNorm<Act>       LayerNorm, Act (act::ReLU by default), post-norm
//   PreNorm<Act>        LayerNorm, Act, pre-norm
//   Form<Norm, Act, norm_first>  any other (Norm: ScaleNorm, LayerNorm, RMSNorm)
// A form with another norm than ScaleNorm has PyTorch's names (torch_names) and its attention
// PyTorch's packed projections: nn.TransformerEncoderLayer's self_attn.in_proj_weight, ...,
// linear1, linear2, norm1, norm2 (the decoder layer's multihead_attn and norm3 too).
// In integers a branch's input rows are int8: pre-norm the norm's output; post-norm, with no
// norm before the branch, the int16 stream requantized, a_q = apply(h_q, s_h / s_a), at the
// branch's scale s_a from calibration (BranchScales: branch_scale [C], branch_requant).
#pragma once

#include "../core/config.hpp"
#include "../core/precision.hpp"

#include <algorithm>
#include <string_view>
#include <type_traits>

#include "activation.hpp"
#include "attention.hpp"
#include "layernorm.hpp"
#include "scalenorm.hpp"

namespace stformer::inline STFORMER_ABI {

// The scales of C branches' input rows in a post-norm block in integers (see above), and the
// stream's s_h (stream_scale F32 [1]).
template <size_t C>
struct BranchScales {
  Tensor<C> branch_scale;
  Requant<C> branch_requant;
  Scale stream_scale;

  template <class F, class... S>
  static constexpr void visit(const Path& at, F& f, S&... s) {
    f(at / "branch_scale", Init{Init::zeros}, s.branch_scale...);
    stformer::visit(at / "branch_requant", f, s.branch_requant...);
    f(at / "stream_scale", Init{Init::zeros}, s.stream_scale...);
  }
  // M_i = s_h / s_a[i]
  template <class B, class F>
  static void requants(B& b, F&& f) {
    f("branch_requant", b.branch_requant, [&](size_t i) { return double(b.stream_scale(0)) / b.branch_scale(i); });
  }
  // branch i's scale s_a for a stream at s_h (host side)
  void set(size_t i, float s_a, float s_h) {
    branch_scale(i) = s_a, stream_scale(0) = s_h;
    requants(*this, [&](const char*, auto& r, const auto& m) { r.set(i, m(i)); });
  }
};

template <template <size_t, auto...> class NormT = ScaleNorm, class ActT = act::ReLU, bool NormFirst = true>
struct Form {
  template <size_t D>
  using Norm = NormT<D>;
  using Act = ActT;
  static constexpr bool norm_first = NormFirst;
  static constexpr bool torch_names = !std::is_same_v<NormT<1>, ScaleNorm<1>>;
  template <size_t D, size_t H>
  using Attention = MultiHeadAttention<D, D, D, H, ScoreScale::head_width, torch_names ? Projections::packed : Projections::separate>;
  // The i-th norm's name (1-based): SPEC's sn1, sn2, sn3, or PyTorch's norm1, norm2, norm3.
  static constexpr std::string_view norm_name(size_t i) {
    constexpr std::string_view sn[] = {"sn1", "sn2", "sn3"}, norm[] = {"norm1", "norm2", "norm3"};
    return torch_names ? norm[i - 1] : sn[i - 1];
  }
  // A block's self-attention and feed-forward layer under their names: attn (PyTorch's
  // self_attn) and ffn.fc1, ffn.fc2 (PyTorch's linear1, linear2, at the layer's level; in
  // integers, whose layer has more tensors than the two, ffn.*).
  template <class Fn, class... A>
  static constexpr void visit_attention(const Path& at, std::string_view ours, std::string_view torch, Fn& f, A&... a) {
    stformer::visit(at / (torch_names ? torch : ours), f, a...);
  }
  template <class Fn, class S0, class... S>
  static constexpr void visit_ffn(const Path& at, Fn& f, S0& ffn0, S&... ffn) {
    if constexpr (torch_names && std::is_same_v<decltype(S0::hidden_scale), Nothing>) {
      stformer::visit(at / "linear1", f, ffn0.fc1, ffn.fc1...);
      stformer::visit(at / "linear2", f, ffn0.fc2, ffn.fc2...);
    } else {
      stformer::visit(at / "ffn", f, ffn0, ffn...);
    }
  }
  // A block's branch scales at precision P (C branches): none but post-norm in integers.
  template <class P, size_t C>
  using BranchScalesOf = std::conditional_t<P::integer && !NormFirst, BranchScales<C>, Nothing>;
  template <class Fn, class S0, class... S>
  static constexpr void visit_branch_scales(const Path& at, Fn& f, S0& s0, S&... s) {
    if constexpr (!std::is_same_v<std::remove_const_t<S0>, Nothing>) stformer::visit(at, f, s0, s...);
  }

  // Residual branch i's input a [Rows, D]: N(h) (pre-norm) or h itself (post-norm; in integers
  // requantized by `scales`).
  template <size_t Rows, size_t D, class Norm, class X, class A, class Scales>
  static void branch_input(const Norm& norm, const X* h, A* a, const Scales& scales, size_t i) {
    if constexpr (NormFirst)
      norm.template apply<Rows>(h, a);
    else if constexpr (std::is_same_v<Scales, Nothing>)
      std::copy_n(h, Rows * D, a);
    else
      for (size_t k = 0; k < Rows * D; ++k) a[k] = A(std::clamp<std::int32_t>(scales.branch_requant.apply(i, h[k]), -128, 127));
  }
  // Once the branch has added into h: h ← N(h) (post-norm; nothing pre-norm).
  template <size_t Rows, class Norm, class X>
  static void branch_output(const Norm& norm, X* h) {
    if constexpr (!NormFirst) norm.template apply<Rows>(h, h);
  }
};

using SpecForm = Form<>;
template <class Act = act::ReLU>
using PostNorm = Form<LayerNorm, Act, false>;
template <class Act = act::ReLU>
using PreNorm = Form<LayerNorm, Act, true>;

}  // namespace stformer
