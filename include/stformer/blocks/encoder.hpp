// EncoderBlock<D, H, F, Form>: the Transformer encoder layer on rows x [B, N, D], declared with
// the combinators (stformer/compose/): its norm N, its feed-forward activation and where the
// norms sit come from Form (blocks/form.hpp):
//   pre-norm (SpecForm: SPEC's, ScaleNorm and ReLU; PreNorm<Act>: LayerNorm; PyTorch's norm_first=True)
//     h   = x + MHA(N1(x), N1(x))        (the pass's mask: causal, key padding)
//     out = h + FFN(N2(h))
//   post-norm (PostNorm<Act>: Vaswani et al., PyTorch's nn.TransformerEncoderLayer by default)
//     h   = N1(x + MHA(x, x))
//     out = N2(h + FFN(h))
// as the chains
//   pre-norm:  Sequential<Residual<Sequential<N1, SelfAttention>>, Residual<Sequential<N2, FeedForward>>>
//   post-norm: Sequential<Residual<SelfAttention>, N1, Residual<FeedForward>, N2>
// so that its plan, records (kept and replayed), backward, int8 form and names are those of the
// combinators: in place on the residual stream, each residual's body adding into it.
// Parameters: SPEC's sn1.g, attn.wq, attn.wk, attn.wv, attn.wo, sn2.g, ffn.fc1.*, ffn.fc2.*; a
// LayerNorm or RMSNorm form PyTorch's: self_attn.in_proj_weight, self_attn.in_proj_bias,
// self_attn.out_proj.*, linear1.*, linear2.*, norm1.*, norm2.*.
#pragma once

#include "../core/config.hpp"

#include <type_traits>

#include "../compose/combinators.hpp"
#include "../compose/sequential.hpp"
#include "feedforward.hpp"
#include "form.hpp"
#include "self_attention.hpp"

namespace stformer::inline STFORMER_ABI {

namespace form {
template <class Fm, size_t D, size_t H, size_t F>
struct Encoder {
  static_assert(requires { Fm::norm_first; }, "EncoderBlock<D, H, F, Form>: its fourth parameter is a Form (SpecForm, PostNorm<Act>, PreNorm<Act>)");
  static constexpr bool torch = Fm::torch_names;
  using Norm = typename Fm::template Norm<D>;
  using N1 = std::conditional_t<torch, Named<"norm1", Norm>, Named<"sn1", Norm>>;
  using N2 = std::conditional_t<torch, Named<"norm2", Norm>, Named<"sn2", Norm>>;
  using Mha = std::conditional_t<torch, Named<"self_attn", SelfAttention<D, H>>,
                                 Named<"attn", SelfAttention<D, H, ScoreScale::head_width, Projections::separate>>>;
  // PyTorch's linear1 and linear2 sit at the layer's level: a step that adds no name
  using Ffn = std::conditional_t<torch, Named<"", FeedForward<D, F, typename Fm::Act, FfnNames::linear>>,
                                 Named<"ffn", FeedForward<D, F, typename Fm::Act>>>;
  using PreNormed = Sequential<Named<"", Residual<Sequential<N1, Mha>>>, Named<"", Residual<Sequential<N2, Ffn>>>>;
  using PostNormed = Sequential<Named<"", Residual<Mha>>, N1, Named<"", Residual<Ffn>>, N2>;
  using type = std::conditional_t<Fm::norm_first, PreNormed, PostNormed>;
};
}  // namespace form

template <size_t D, size_t H, size_t F, class Fm = SpecForm>
using EncoderBlock = typename form::Encoder<Fm, D, H, F>::type;

}  // namespace stformer
