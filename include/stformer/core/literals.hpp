// stformer — tensors' values as C and C++ literals, host side (model_image_source,
// checkpoint_header): floats as exact hexadecimal literals, integers in decimal.
#pragma once

#include "config.hpp"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <ostream>
#include <stdexcept>
#include <string>

namespace stformer::inline STFORMER_ABI {

// n floats as exact hexadecimal literals ("0x1.8p-2f"), six to a line, each followed by a
// comma; throws for a value that is not finite (`what` names the tensor).
inline void write_float_literals(std::ostream& out, const float* v, size_t n, const std::string& what) {
  for (size_t i = 0; i < n; ++i) {
    if (!std::isfinite(v[i])) throw std::runtime_error(what + " holds a value that is not finite");
    char text[32];
    std::snprintf(text, sizeof text, "%af", double(v[i]));
    out << (i % 6 == 0 ? "\n    " : " ") << text << ",";
  }
}

// n integers as decimal literals, twelve to a line, each followed by a comma.
template <class E>
void write_integer_literals(std::ostream& out, const E* v, size_t n) {
  for (size_t i = 0; i < n; ++i) out << (i % 12 == 0 ? "\n    " : " ") << std::int64_t(v[i]) << ",";
}

}  // namespace stformer
