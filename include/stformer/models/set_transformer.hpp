// SetTransformer<In, D, H, M, Out> — SPEC's `set` model of Example 1 (Lee et al. 2019):
//   x [B, N, In] -> proj = Linear<In, D> -> isab = ISAB<D, H, M> -> pool = PMA<D, H, 1>
//                -> head = Linear<D, Out> -> y [B, 1, Out]
// Permutation-invariant in the N set elements. Parameters: proj.*, isab.*, pool.*, head.*.
// A Sequential (stformer/compose/sequential.hpp): its InferOf<Model, B, N> is x [B, N, D] (proj(x),
// then ISAB in place) beside ISAB's work, then the pooled row and PMA's work, then the output.
#pragma once

#include "../core/config.hpp"

#include "../blocks/isab.hpp"
#include "../blocks/linear.hpp"
#include "../blocks/pma.hpp"
#include "../compose/sequential.hpp"

namespace stformer::inline STFORMER_ABI {

template <size_t In, size_t D, size_t H, size_t M, size_t Out, template <size_t, auto...> class Norm = ScaleNorm>
struct SetTransformer : Sequential<Named<"proj", Linear<In, D>>, Named<"isab", ISAB<D, H, M, Norm>>, Named<"pool", PMA<D, H, 1, Norm>>,
                                   Named<"head", Linear<D, Out>>> {};

}  // namespace stformer
