// PMA<D, H, K, Norm>: PMA(X) = MAB(S, X) (Lee et al. 2019), X [B, N, D] -> [B, K, D], with K
// learned seed vectors S [K, D] (Xavier-normal); permutation-invariant. Declared with the
// combinators (stformer/compose/): MAB's pre-norm form with the seeds as its queries,
//   h   = S + MHA(Nq(S), Nkv(X))      (the pass's mask: key padding over X)
//   out = h + ReLU(Nff(h) Wfcᵀ + bfc)
// as SeedAttend<"seeds", K, nq, nkv, attn> then MAB's feed-forward residual (MabFeedForward);
// its plan, records, backward, int8 form (QSeedAttend: the seeds int16 on a stream of their
// own, the parts' rows int16) and names are the combinators'. Norm = ScaleNorm (default) or
// Identity (no integer form). A set has no order: the causal flag of a pass is not read.
// Parameters: seeds [K, D], mab.nq.g, mab.nkv.g, mab.attn.*, mab.nff.g, mab.fc.* (in integers
// seeds I16 [K, D] at the output stream's scale).
#pragma once

#include "../core/config.hpp"

#include "../compose/combinators.hpp"
#include "../compose/sequential.hpp"
#include "sab.hpp"

namespace stformer::inline STFORMER_ABI {

template <size_t D, size_t H, size_t K, template <size_t, auto...> class Norm = ScaleNorm>
using PMA = Sequential<Named<"", SeedAttend<"seeds", K, Named<"mab.nq", Norm<D>>, Named<"mab.nkv", Norm<D>>, Named<"mab.attn", MultiHeadAttention<D, D, D, H>>>>,
                       Named<"mab", MabFeedForward<D, Norm>>>;

}  // namespace stformer
