// The form of a Transformer encoder or decoder block (EncoderBlock, blocks/encoder.hpp, and
// DecoderBlock, blocks/decoder.hpp, declare each form with the combinators): its norm, its
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
#pragma once

#include "../core/config.hpp"

#include <type_traits>

#include "activation.hpp"
#include "attention.hpp"
#include "layernorm.hpp"
#include "scalenorm.hpp"

namespace stformer::inline STFORMER_ABI {

template <template <size_t, auto...> class NormT = ScaleNorm, class ActT = act::ReLU, bool NormFirst = true>
struct Form {
  template <size_t D>
  using Norm = NormT<D>;
  using Act = ActT;
  static constexpr bool norm_first = NormFirst;
  static constexpr bool torch_names = !std::is_same_v<NormT<1>, ScaleNorm<1>>;
  template <size_t D, size_t H>
  using Attention = MultiHeadAttention<D, D, D, H, ScoreScale::head_width, torch_names ? Projections::packed : Projections::separate>;
};

using SpecForm = Form<>;
template <class Act = act::ReLU>
using PostNorm = Form<LayerNorm, Act, false>;
template <class Act = act::ReLU>
using PreNorm = Form<LayerNorm, Act, true>;

}  // namespace stformer
