// PointerModel<In, D, H, F, Blocks> — SPEC's `pointer` model of Example 1:
//   x [B, N, In] -> proj = Linear<In, D> -> blocks.0 .. blocks.{Blocks-1} = EncoderBlock<D, H, F>
//                -> sn_v = ScaleNorm<D>                                            (keys)
//   query [1, D] (learned, repeated over the batch) -> sn_q = ScaleNorm<D>        (query)
//   pointer = PointerAttention<D, D, D>(query, keys) -> log-probabilities [B, 1, N]
// Permutation-equivariant in the N points. Parameters: proj.*, blocks.i.*, sn_v.g, query,
// sn_q.g, pointer.*. A Sequential (stformer/compose/sequential.hpp): its InferOf<Model, B, N> is
// the residual stream h [B, N, D] (proj(x), then each block and sn_v in place) beside the blocks'
// work, then the head's q, k and logp in the same bytes.
#pragma once

#include "../core/config.hpp"

#include "../blocks/encoder.hpp"
#include "../blocks/linear.hpp"
#include "../blocks/pointer.hpp"
#include "../blocks/scalenorm.hpp"
#include "../compose/sequential.hpp"

namespace stformer::inline STFORMER_ABI {

template <size_t In, size_t D, size_t H, size_t F, size_t Blocks>
struct PointerModel : Sequential<Named<"proj", Linear<In, D>>, Named<"blocks", Repeat<EncoderBlock<D, H, F>, Blocks>>, Named<"sn_v", ScaleNorm<D>>,
                                 Named<"", PointerHead<D>>> {};

}  // namespace stformer
