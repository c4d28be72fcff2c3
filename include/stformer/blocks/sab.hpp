// SAB<D, H, Norm>: SAB(X) = MAB(X, X) (Lee et al. 2019), X [B, N, D], permutation-equivariant,
// declared with the combinators (stformer/compose/): MAB's pre-norm form over the set itself,
//   h   = X + MHA(Nq(X), Nkv(X))      (the pass's mask: key padding)
//   out = h + ReLU(Nff(h) Wfcᵀ + bfc)
// as  Residual<Attend<nq, nkv, attn>> then MabFeedForward (Residual<Sequential<nff, fc, ReLU>>),
// under "mab"; its plan, records, backward, int8 form (QAttend: int16 rows) and names are the
// combinators'.
// Norm = ScaleNorm (default) or Identity (the paper's un-normalised block, no g entries; no
// integer form). A set has no order: the attention reads the pass's key mask, never its causal
// flag (Attend<…, Ordered = false>).
// Parameters: mab.nq.g, mab.nkv.g, mab.attn.wq, …, mab.attn.wo, mab.nff.g, mab.fc.weight [D, D]
// (Kaiming-normal), mab.fc.bias.
#pragma once

#include "../core/config.hpp"

#include "../compose/combinators.hpp"
#include "../compose/sequential.hpp"
#include "activation.hpp"
#include "attention.hpp"
#include "linear.hpp"
#include "scalenorm.hpp"

namespace stformer::inline STFORMER_ABI {

// MAB's second half, h + ReLU(Nff(h) Wfcᵀ + bfc): nff.g, fc.weight [D, D] (Kaiming-normal), fc.bias.
template <size_t D, template <size_t, auto...> class Norm = ScaleNorm>
using MabFeedForward = Residual<Sequential<Named<"nff", Norm<D>>, Named<"fc", Linear<D, D, Init::kaiming_normal>>, ReLU<D>>>;

template <size_t D, size_t H, template <size_t, auto...> class Norm = ScaleNorm>
using SAB = Sequential<Named<"mab", Sequential<Named<"", Residual<Attend<Named<"nq", Norm<D>>, Named<"nkv", Norm<D>>, Named<"attn", MultiHeadAttention<D, D, D, H>>, false>>>,
                                              Named<"", MabFeedForward<D, Norm>>>>>;

}  // namespace stformer
