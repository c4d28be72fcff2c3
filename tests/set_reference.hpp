// The references (tests/reference.hpp: ref::isab, ref::pma) of the declared ISAB and PMA: the
// hand-written blocks' (tests/written_set.hpp), their parameters copied by name.
#pragma once

#include <vector>

#include "reference.hpp"
#include "written_set.hpp"

namespace ref {
template <size_t D, size_t H, size_t M, template <size_t, auto...> class Norm>
Mat isab(const Mat& x, const stformer::ISAB<D, H, M, Norm>& p, size_t heads, const std::vector<bool>& keys = {}) {
  return isab(x, *written::hand_of<written::ISAB<D, H, M, Norm>>(p), heads, keys);
}
template <size_t D, size_t H, size_t K, template <size_t, auto...> class Norm>
Mat pma(const Mat& x, const stformer::PMA<D, H, K, Norm>& p, size_t heads, const std::vector<bool>& keys = {}) {
  return pma(x, *written::hand_of<written::PMA<D, H, K, Norm>>(p), heads, keys);
}
}  // namespace ref
