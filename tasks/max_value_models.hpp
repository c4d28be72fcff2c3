// The max-value task's two models (SPEC Example 1), in a header of their own: the types that
// stformer-c-api is given (--header max_value_models.hpp --type max_value::PointerNet) to write
// their images and C APIs, and that the firmware and the C programs built from those include.
#pragma once

#include <stformer/stformer.hpp>

namespace max_value {

using PointerNet = stformer::PointerModel<2, 16, 1, 64, 2>;  // `pointer`
using SetNet = stformer::SetTransformer<2, 64, 4, 16, 2>;    // `set`

}  // namespace max_value
