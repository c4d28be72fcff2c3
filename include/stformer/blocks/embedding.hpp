// Embedding<V, D>: row lookup, ids [B, N] (int32, each in [0, V)) -> [B, N, D].
// Parameter: weight [V, D], standard normal. An id outside [0, V) is an error
// (stformer::fail: std::invalid_argument, or the firmware's abort).
#pragma once

#include <algorithm>

#include "../params.hpp"

namespace stformer {

template <size_t V, size_t D>
struct Embedding {
  Tensor<V, D> weight;

  template <class F, class... S>
  static void visit(const Path& at, F& f, S&... s) {
    f(at / "weight", Init{Init::normal}, s.weight...);
  }

  template <size_t B, size_t N>
  struct Acts {
    Tensor<B, N, D> out;

    const Tensor<B, N, D>& forward(const Embedding& p, const IdTensor<B, N>& ids) {
      for (size_t r = 0; r < B * N; ++r) {
        std::int32_t id = ids.data()[r];
        STFORMER_CHECK(id >= 0 && size_t(id) < V, "Embedding: token id outside [0, V)");
        const float* row = p.weight.data() + size_t(id) * D;
        std::copy(row, row + D, out.data() + r * D);
      }
      return out;
    }
  };
};

}  // namespace stformer
