// ISAB<D, H, M, Norm>: Hm = MAB1(I, X), ISAB(X) = MAB2(X, Hm) (Lee et al. 2019), X [B, N, D],
// with M learned inducing points I [M, D] (Xavier-normal). Cost O(N·M) instead of O(N²);
// permutation-equivariant. Declared with the combinators (stformer/compose/):
//   Hm  = PMA's form over I: I + MHA(Nq1(I), Nkv1(X)), then MAB1's feed-forward residual
//   h   = X + MHA(Nq2(X), Nkv2(Hm))
//   out = h + ReLU(Nff2(h) Wfcᵀ + bfc)
// as Residual<Attend<nq2, Sequential<SeedAttend<"inducing", M, …>, mab1's feed-forward, nkv2>,
// attn2>> then MAB2's feed-forward residual: the attention's key/value part a chain from X to
// the rows Nkv2(Hm) [B, M, D]. A key-padding mask over X applies to MAB1 (X is its key side);
// MAB2's attention over Hm has none. Its plan, records, backward, int8 form (QAttend over the
// chain's integer steps, Hm a stream of its own) and names are the combinators'. Norm =
// ScaleNorm (default) or Identity (no integer form).
// Parameters: inducing [M, D], mab1.*, mab2.* (as MAB's); in integers inducing I16 [M, D] at
// Hm's stream's scale.
#pragma once

#include "../core/config.hpp"

#include "../compose/combinators.hpp"
#include "../compose/sequential.hpp"
#include "sab.hpp"

namespace stformer::inline STFORMER_ABI {

template <size_t D, size_t H, size_t M, template <size_t, auto...> class Norm = ScaleNorm>
using ISAB =
    Sequential<Named<"", Residual<Attend<Named<"mab2.nq", Norm<D>>,
                                         Named<"", Sequential<Named<"", SeedAttend<"inducing", M, Named<"mab1.nq", Norm<D>>, Named<"mab1.nkv", Norm<D>>,
                                                                                   Named<"mab1.attn", MultiHeadAttention<D, D, D, H>>>>,
                                                              Named<"mab1", MabFeedForward<D, Norm>>, Named<"mab2.nkv", Norm<D>>>>,
                                         Named<"mab2.attn", MultiHeadAttention<D, D, D, H>>, false>>>,
               Named<"mab2", MabFeedForward<D, Norm>>>;

}  // namespace stformer
