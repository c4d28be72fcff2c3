// MAB<D, H, Norm>: the Set Transformer's multi-head attention block (Lee et al. 2019) in pre-norm
// form, queries X [B, Nq, D] over keys/values Y [B, Nk, D], declared with the combinators
// (stformer/compose/memory.hpp; Y is the memory):
//   h   = X + MHA(Nq(X), Nkv(Y))              (the key mask: key padding over Y)
//   out = h + ReLU(Nff(h) Wfcᵀ + bfc)
// as WithMemory<unordered, CrossAttend<nq, nkv, attn>, MabFeedForward>: its plan, records,
// backward (into X and Y), int8 form (int16 rows: QCrossAttend) and names are the combinators'.
// Norm = ScaleNorm (default) or Identity (the paper's un-normalised block, no g entries). A set
// has no order: no causal mask.
// Parameters: nq.g, nkv.g, attn.*, nff.g, fc.weight [D, D] (Kaiming-normal), fc.bias.
#pragma once

#include "../core/config.hpp"

#include "../compose/memory.hpp"
#include "sab.hpp"

namespace stformer::inline STFORMER_ABI {

template <size_t D, size_t H, template <size_t, auto...> class Norm = ScaleNorm>
using MAB = WithMemory<false, Named<"", CrossAttend<Named<"nq", Norm<D>>, Named<"nkv", Norm<D>>, Named<"attn", MultiHeadAttention<D, D, D, H>>>>,
                       Named<"", MabFeedForward<D, Norm>>>;

}  // namespace stformer
