// Embedding<V, D>: row lookup, ids [B, N] (int32, each in [0, V)) -> [B, N, D].
// backward: dweight[id] += dout row, for every position. Parameter: weight [V, D], standard normal. An id outside [0, V) is an error
// (stformer::fail: std::invalid_argument, or the firmware's abort).
#pragma once

#include "../core/config.hpp"

#include <algorithm>

#include "../kernels/rowwise.hpp"
#include "../core/params.hpp"

namespace stformer::inline STFORMER_ABI {

template <size_t V, size_t D>
struct Embedding {
  static std::string declaration() { return declare("Embedding", V, D); }
  static constexpr size_t vocabulary = V;  // token ids in [0, V)
  static constexpr bool decodes = true;      // DecodeOf: each id's row alone
  Tensor<V, D> weight;

  template <class F, class... S>
  static constexpr void visit(const Path& at, F& f, S&... s) {
    f(at / "weight", Init{Init::normal}, s.weight...);
  }

  // out[r] = weight[ids[r]] for Rows ids
  template <size_t Rows>
  void apply(const std::int32_t* ids, float* out) const {
    for (size_t r = 0; r < Rows; ++r) {
      std::int32_t id = ids[r];
      STFORMER_CHECK(id >= 0 && size_t(id) < V, "Embedding: token id outside [0, V)");
      const float* row = weight.data() + size_t(id) * D;
      std::copy(row, row + D, out + r * D);
    }
  }

  // A step of a Sequential (stformer/compose/sequential.hpp): ids [B, N] -> rows [B, N, D].
  template <size_t B, size_t N>
  using Input = IdTensor<B, N>;
  template <size_t B, size_t N>
  using Output = Tensor<B, N, D>;
  template <size_t B, size_t N, class Pool>
  void run(const Input<B, N>& ids, Output<B, N>& y, Nothing, const Mask<B, N>&, Pool&&) const {
    apply<B * N>(ids.data(), y.data());
  }

  template <size_t B, size_t N>
  struct Infer {
    Tensor<B, N, D> out;

    const Tensor<B, N, D>& forward(const Embedding& p, const IdTensor<B, N>& ids) {
      p.template apply<B * N>(ids.data(), out.data());
      return out;
    }
  };

  template <size_t B, size_t N>
  struct Acts {
    using Dx = void;                      // ids have no gradient
    const IdTensor<B, N>* ids = nullptr;  // the input of the last forward
    Tensor<B, N, D> out;

    // As a step of a chain: row by row, the pass's mask not read.
    const Tensor<B, N, D>& forward(const Embedding& p, const IdTensor<B, N>& in, const Mask<B, N>& = {}) {
      ids = &in;
      p.template apply<B * N>(in.data(), out.data());
      return out;
    }

    void backward(const Embedding&, Embedding& grad, const Tensor<B, N, D>& dout) {
      for (size_t r = 0; r < B * N; ++r) kernels::add_to<D>(dout.data() + r * D, grad.weight.data() + size_t(ids->data()[r]) * D);
    }
  };
};

}  // namespace stformer
