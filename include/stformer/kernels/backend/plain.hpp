// stformer kernels' backend: plain C++, one lane (scalar.hpp), for any core (Cortex-M0, a host
// built with -Dsimd=none). The integer products are dot products along K (kernels/int8.hpp's loop).
#pragma once

#include "scalar.hpp"

namespace stformer::inline STFORMER_ABI::kernels {

using generic::apply;
struct plain_lane {
  [[gnu::always_inline]] static std::int32_t apply(std::int32_t x, std::int32_t q, int shift) { return generic::apply(x, q, shift); }
  static constexpr const char* name = "plain C++";
};
using qv = one_lane_qv<plain_lane>;
using generic::dot_rows;
using generic::pack_words;
using generic::fused_rows;
using generic::lookup_words;
inline constexpr Tuning tuning = one_lane_tuning;

}  // namespace stformer::kernels
