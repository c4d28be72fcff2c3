// FeedForward<D, F, Act, Names>: y = Act(x W1ᵀ + b1) W2ᵀ + b2, rows [L..., D] -> [L..., D], the
// chain Linear<D, F> → Activation<Act, F> → Linear<F, D> (Kaiming-normal weights); Act one of
// act::ReLU (the default), act::GELU, act::GELUTanh, act::SiLU (blocks/activation.hpp). As any
// chain of row-local leaves it runs in tiles of rows, in place: its hidden [N, F] never exists
// whole in a forward pass (step::RowTiles). Its integer form is one step (QFeedForward,
// stformer/quantized/feedforward.hpp): int8 hidden rows, the activation a table of 256.
// Parameters: fc1.*, fc2.* (SPEC's, timm's Mlp); FfnNames::linear: linear1.*, linear2.*
// (PyTorch's nn.TransformerEncoderLayer, at the layer's level under Named<"", …>).
#pragma once

#include "../core/config.hpp"

#include <type_traits>

#include "../compose/sequential.hpp"
#include "activation.hpp"
#include "linear.hpp"

namespace stformer::inline STFORMER_ABI {

enum class FfnNames { fc, linear };

template <size_t D, size_t F, class Act = act::ReLU, FfnNames Nm = FfnNames::fc>
using FeedForward = std::conditional_t<Nm == FfnNames::fc,
                                       Sequential<Named<"fc1", Linear<D, F, Init::kaiming_normal>>, Activation<Act, F>, Named<"fc2", Linear<F, D, Init::kaiming_normal>>>,
                                       Sequential<Named<"linear1", Linear<D, F, Init::kaiming_normal>>, Activation<Act, F>, Named<"linear2", Linear<F, D, Init::kaiming_normal>>>>;

}  // namespace stformer
