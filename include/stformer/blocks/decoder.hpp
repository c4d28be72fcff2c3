// DecoderBlock<D, H, F, Form>: the Transformer decoder layer on rows x [B, N, D] over an encoder
// memory m [B, M, D], declared with the combinators (stformer/compose/memory.hpp); its norms, its
// feed-forward activation and where the norms sit come from Form (blocks/form.hpp):
//   pre-norm (SpecForm: ScaleNorm and ReLU; PreNorm<Act>: LayerNorm):
//     h1  = x  + SelfMHA(N1(x), N1(x))     causal
//     h2  = h1 + CrossMHA(N2(h1), m)       (the memory optionally key-padded)
//     out = h2 + FFN(N3(h2))
//   post-norm (PostNorm<Act>: PyTorch's nn.TransformerDecoderLayer with a causal tgt_mask):
//     h1 = N1(x + SelfMHA(x, x)),  h2 = N2(h1 + CrossMHA(h1, m)),  out = N3(h2 + FFN(h2))
// as the chains over the rows, the cross-attention's part reading m:
//   pre-norm:  WithMemory<causal, Residual<Sequential<N1, SelfAttention>>, CrossAttend<N2, Identity, MHA>,
//                         Residual<Sequential<N3, FeedForward>>>
//   post-norm: WithMemory<causal, Residual<SelfAttention>, N1, CrossAttend<Identity, Identity, MHA>, N2,
//                         Residual<FeedForward>, N3>
// so that its plan, records, backward (into x and m), int8 form and names are the combinators'.
// Parameters: sn1.g, self_attn.*, sn2.g, cross_attn.*, sn3.g, ffn.*; the LayerNorm forms
// PyTorch's (nn.TransformerDecoderLayer): norm1.*, self_attn.*, norm2.*, multihead_attn.* (each
// attention packed: in_proj_weight, in_proj_bias, out_proj.*), norm3.*, linear1.*, linear2.*.
//
// TransformerDecoder<Layer, L, FinalNorm> (PyTorch's nn.TransformerDecoder(layer, L, norm)): L
// decoder layers of one type, each with its own parameters, over the same memory, then the final
// norm (FinalNorm = void: none, PyTorch's norm=None):
//   h_0 = x,  h_{i+1} = Layer_i(h_i, m),  out = FinalNorm(h_L);  dm = Σ_i dm of Layer_i
// Parameters: layers.0.*, …, layers.{L−1}.*, norm.* (PyTorch's names).
#pragma once

#include "../core/config.hpp"

#include <type_traits>

#include "../compose/combinators.hpp"
#include "../compose/memory.hpp"
#include "../compose/sequential.hpp"
#include "feedforward.hpp"
#include "form.hpp"
#include "self_attention.hpp"

namespace stformer::inline STFORMER_ABI {

namespace form {
template <class Fm, size_t D, size_t H, size_t F>
struct Decoder {
  static_assert(requires { Fm::norm_first; }, "DecoderBlock<D, H, F, Form>: its fourth parameter is a Form (SpecForm, PostNorm<Act>, PreNorm<Act>)");
  static constexpr bool torch = Fm::torch_names;
  template <FixedString Spec, FixedString Torch>
  using N = std::conditional_t<torch, Named<Torch, typename Fm::template Norm<D>>, Named<Spec, typename Fm::template Norm<D>>>;
  using Self = Named<"self_attn", SelfAttention<D, H, ScoreScale::head_width, torch ? Projections::packed : Projections::separate>>;
  using Cross = std::conditional_t<torch, Named<"multihead_attn", typename Fm::template Attention<D, H>>, Named<"cross_attn", typename Fm::template Attention<D, H>>>;
  // PyTorch's linear1 and linear2 sit at the layer's level: a step that adds no name
  using Ffn = std::conditional_t<torch, Named<"", FeedForward<D, F, typename Fm::Act, FfnNames::linear>>,
                                 Named<"ffn", FeedForward<D, F, typename Fm::Act>>>;
  using PreNormed = WithMemory<true, Named<"", Residual<Sequential<N<"sn1", "norm1">, Self>>>, Named<"", CrossAttend<N<"sn2", "norm2">, Identity<D>, Cross>>,
                               Named<"", Residual<Sequential<N<"sn3", "norm3">, Ffn>>>>;
  using PostNormed = WithMemory<true, Named<"", Residual<Self>>, N<"sn1", "norm1">, Named<"", CrossAttend<Identity<D>, Identity<D>, Cross>>,
                                N<"sn2", "norm2">, Named<"", Residual<Ffn>>, N<"sn3", "norm3">>;
  using type = std::conditional_t<Fm::norm_first, PreNormed, PostNormed>;
};
template <class Layer, size_t L, class FinalNorm>
struct Stack {
  using type = WithMemory<true, Named<"layers", Repeat<Layer, L>>, Named<"norm", FinalNorm>>;
};
template <class Layer, size_t L>
struct Stack<Layer, L, void> {
  using type = WithMemory<true, Named<"layers", Repeat<Layer, L>>>;
};
}  // namespace form

template <size_t D, size_t H, size_t F, class Fm = SpecForm>
using DecoderBlock = typename form::Decoder<Fm, D, H, F>::type;

template <class Layer, size_t L, class FinalNorm = void>
using TransformerDecoder = typename form::Stack<Layer, L, FinalNorm>::type;

}  // namespace stformer
