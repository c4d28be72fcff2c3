// SAB<D, H, Norm>: SAB(X) = MAB(X, X), X [B, N, D]. Permutation-equivariant. Parameters: mab.*.
#pragma once

#include "../config.hpp"

#include "mab.hpp"

namespace stformer::inline STFORMER_ABI {

template <size_t D, size_t H, template <size_t> class Norm = ScaleNorm>
struct SAB {
  MAB<D, H, Norm> mab;

  template <class Fn, class... S>
  static constexpr void visit(const Path& at, Fn& f, S&... s) {
    stformer::visit(at / "mab", f, s.mab...);
  }

  // Forward only: x ← SAB(x) in place (MAB's).
  template <size_t B, size_t N, size_t T = tile_rows(B * N)>
  using Work = typename MAB<D, H, Norm>::template Work<B, N, N, T>;

  template <size_t B, size_t N, size_t T>
  void forward_in_place(Tensor<B, N, D>& x, Work<B, N, T>& w, const KeyMask<B, N>* keys = nullptr) const {
    mab.forward_in_place(x, x, w, keys);
  }

  // A step of a Sequential (stformer/sequential.hpp): forward_in_place, Work its scratch.
  template <size_t B, size_t N>
  using Input = Tensor<B, N, D>;
  static constexpr bool in_place = true;
  template <size_t B, size_t N, size_t Room>
  using Scratch = Work<B, N>;

  template <size_t B, size_t N>
  struct Infer {
    Tensor<B, N, D> out;
    Work<B, N> w;

    template <class X>
    const Tensor<B, N, D>& forward(const SAB& p, const X& x, const KeyMask<B, N>* keys = nullptr) {
      static_assert(shape_is<X, B, N, D>, "SAB: input set X must be [B, N, D] (the pass's sizes, the block's width D)");
      if (&x != &out) std::copy(x.begin(), x.end(), out.begin());
      p.forward_in_place(out, w, keys);
      return out;
    }
  };

  template <size_t B, size_t N>
  struct Acts {
    ActsOf<MAB<D, H, Norm>, B, N, N> mab;
    Tensor<B, N, D> dx;

    template <class X>
    const Tensor<B, N, D>& forward(const SAB& p, const X& x, const KeyMask<B, N>* keys = nullptr) {
      static_assert(shape_is<X, B, N, D>, "SAB: input set X must be [B, N, D] (the pass's sizes, the block's width D)");
      return mab.forward(p.mab, x, x, keys);
    }

    // dX = dX(query side) + dX(key side)
    const Tensor<B, N, D>& backward(const SAB& p, SAB& grad, const Tensor<B, N, D>& dout) {
      const auto d = mab.backward(p.mab, grad.mab, dout);
      kernels::add<B * N * D>(d.dq.data(), d.dkv.data(), dx.data());
      return dx;
    }
  };
};

}  // namespace stformer
