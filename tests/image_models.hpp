// The models whose images image_fixture writes and test_model_image.cpp reads.
#pragma once

#include <stformer/stformer.hpp>

#include "util.hpp"

namespace image_models {
using Pointer = stformer::PointerModel<2, 16, 1, 64, 2>;
using Set = stformer::SetTransformer<2, 64, 4, 16, 2>;
using Lm = stformer::LanguageModel<50, 8, 16, 2, 32, 2>;  // V, L, D, H, F, blocks
}  // namespace image_models
