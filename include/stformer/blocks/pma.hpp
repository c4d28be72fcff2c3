// PMA<D, H, K, Norm>: PMA(X) = MAB(S, X), X [B, N, D] -> [B, K, D], with K learned seed
// vectors S [K, D] (Xavier-normal). Permutation-invariant. Parameters: seeds, mab.*.
#pragma once

#include "../config.hpp"

#include <algorithm>

#include "mab.hpp"

namespace stformer::inline STFORMER_ABI {

template <size_t D, size_t H, size_t K, template <size_t> class Norm = ScaleNorm>
struct PMA {
  Tensor<K, D> seeds;
  MAB<D, H, Norm> mab;

  template <class Fn, class... S>
  static constexpr void visit(const Path& at, Fn& f, S&... s) {
    f(at / "seeds", Init{Init::xavier_normal}, s.seeds...);
    stformer::visit(at / "mab", f, s.mab...);
  }

  // Forward only: out [B, K, D] ← PMA(x) (the seeds, then MAB(S, X) in place on them).
  template <size_t B, size_t N, size_t T = tile_rows(B * K)>
  using Work = typename MAB<D, H, Norm>::template Work<B, K, N, T>;

  template <size_t B, size_t N, size_t T>
  void forward_into(const Tensor<B, N, D>& x, Tensor<B, K, D>& out, Work<B, N, T>& w, const KeyMask<B, N>* keys = nullptr) const {
    for (size_t b = 0; b < B; ++b) std::copy(seeds.begin(), seeds.end(), out.begin() + b * K * D);
    mab.forward_in_place(out, x, w, keys);
  }

  // A step of a Sequential (stformer/sequential.hpp): the set [B, N, D] pooled to [B, K, D].
  template <size_t B, size_t N>
  using Input = Tensor<B, N, D>;
  template <size_t B, size_t N>
  using Output = Tensor<B, K, D>;
  template <size_t B, size_t N, size_t Room>
  using Scratch = Work<B, N>;
  template <size_t B, size_t N, size_t T>
  void run(const Input<B, N>& x, Output<B, N>& y, Work<B, N, T>& w, const Mask<B, N>& mask) const {
    forward_into(x, y, w, mask.keys);
  }

  template <size_t B, size_t N>
  struct Infer {
    Tensor<B, K, D> out;
    Work<B, N> w;

    template <class X>
    const Tensor<B, K, D>& forward(const PMA& p, const X& x, const KeyMask<B, N>* keys = nullptr) {
      static_assert(shape_is<X, B, N, D>, "PMA: input set X must be [B, N, D] (the pass's sizes, the block's width D)");
      p.forward_into(x, out, w, keys);
      return out;
    }
  };

  template <size_t B, size_t N>
  struct Acts {
    Tensor<B, K, D> s;  // S repeated over the batch
    ActsOf<MAB<D, H, Norm>, B, K, N> mab;

    template <class X>
    const Tensor<B, K, D>& forward(const PMA& p, const X& x, const KeyMask<B, N>* keys = nullptr) {
      static_assert(shape_is<X, B, N, D>, "PMA: input set X must be [B, N, D] (the pass's sizes, the block's width D)");
      for (size_t b = 0; b < B; ++b) std::copy(p.seeds.begin(), p.seeds.end(), s.begin() + b * K * D);
      return mab.forward(p.mab, s, x, keys);
    }

    // dS (summed over the batch) goes to the seeds; returns dX.
    const Tensor<B, N, D>& backward(const PMA& p, PMA& grad, const Tensor<B, K, D>& dout) {
      const auto d = mab.backward(p.mab, grad.mab, dout);
      for (size_t b = 0; b < B; ++b) kernels::add_to<K * D>(d.dq.data() + b * K * D, grad.seeds.data());
      return d.dkv;
    }
  };
};

}  // namespace stformer
