// written::SAB<D, H, Norm, P>: SAB(X) = MAB(X, X), X [B, N, D]. Permutation-equivariant. In integers
// (P = precision::int8) in place on the set's int16 stream: the MAB reads its keys and values
// from the stream before it writes it. Parameters: mab.*.
#pragma once

#include <algorithm>

#include "stformer/stformer.hpp"
#include "util.hpp"

// The SAB written by hand, as the library had it before SAB became a declaration
// (stformer/blocks/sab.hpp): the tests hold the declaration to its names, plan and bits.
namespace written {
using namespace stformer;


template <size_t D, size_t H, template <size_t, auto...> class Norm = ScaleNorm, class P = precision::float32>
struct SAB {
  using Float = SAB<D, H, Norm>;
  using Mab = MAB<D, H, Norm, P>;
  using Stream = typename P::Stream;
  Mab mab;

  template <class Fn, class... S>
  static constexpr void visit(const Path& at, Fn& f, S&... s) {
    stformer::visit(at / "mab", f, s.mab...);
  }

  // Forward only: x ← SAB(x) in place (MAB's).
  template <size_t B, size_t N, size_t T = P::tile_rows(B * N, B * N)>
  using Work = typename Mab::template Work<B, N, N, T>;

  template <size_t B, size_t N, size_t T>
  void forward_in_place(TensorOf<Stream, B, N, D>& x, Work<B, N, T>& w, const KeyMask<B, N>* keys = nullptr) const {
    mab.forward_in_place(x, x, w, keys);
  }
  // As a step: the pass's key mask (a set has no order: the causal flag is not read).
  template <size_t B, size_t N, size_t T, class Pool>
  void forward_in_place(TensorOf<Stream, B, N, D>& x, Work<B, N, T>& w, const Mask<B, N>& mask, Pool&&) const {
    forward_in_place(x, w, mask.keys);
  }

  // A step of a Sequential (stformer/compose/sequential.hpp): forward_in_place, Work its scratch.
  template <size_t B, size_t N>
  using Input = TensorOf<Stream, B, N, D>;
  static constexpr bool in_place = true;
  template <size_t B, size_t N, size_t Room>
  using Scratch = Work<B, N>;

  template <size_t B, size_t N>
  struct Infer {
    TensorOf<Stream, B, N, D> out;
    Work<B, N> w;

    template <class X>
    const TensorOf<Stream, B, N, D>& forward(const SAB& p, const X& x, const KeyMask<B, N>* keys = nullptr) {
      static_assert(typed_shape_is<Stream, X, B, N, D>, "SAB: input set X must be [B, N, D] (the pass's sizes, the block's width D)");
      if (&x != &out) std::copy(x.begin(), x.end(), out.begin());
      p.forward_in_place(out, w, keys);
      return out;
    }
  };

  // In integers (P = precision::int8): the MAB's, in place on the set's stream at its scale.
  static constexpr bool same_scale = true;
  struct Ranges {
    typename Mab::Ranges mab;
    float residual = 0;
    template <class A, class X, class Y>
    void observe(const Float& f, const A& acts, const X& x, const Y&) {
      mab.observe(f.mab, acts.mab, x);
      residual = mab.residual;
    }
  };
  void from_float(const Float& f, const Ranges& r, float s_h, float) { mab.from_float(f.mab, r.mab, s_h); }

  template <size_t B, size_t N>
  struct Acts {
    ActsOf<MAB<D, H, Norm>, B, N, N> mab;
    using Dx = Tensor<B, N, D>;
    struct Workspace {
      Tensor<B, N, D> dkv;
      WorkspaceOf<decltype(mab)> part;
    };

    // As a step of a chain: the pass's key mask (the causal flag is not read).
    template <class X>
    const Tensor<B, N, D>& forward(const SAB& p, const X& x, const Mask<B, N>& mask) {
      return forward(p, x, mask.keys);
    }
    template <class X>
    const Tensor<B, N, D>& forward(const SAB& p, const X& x, const KeyMask<B, N>* keys = nullptr) {
      static_assert(shape_is<X, B, N, D>, "SAB: input set X must be [B, N, D] (the pass's sizes, the block's width D)");
      return mab.forward(p.mab, x, x, keys);
    }

    // dX = dX(query side) + dX(key side)
    const Tensor<B, N, D>& backward(const SAB& p, SAB& grad, const Tensor<B, N, D>& dout, Tensor<B, N, D>& dx, Workspace& ws) {
      mab.backward(p.mab, grad.mab, dout, {dx, ws.dkv}, ws.part);
      kernels::add<B * N * D>(dx.data(), ws.dkv.data(), dx.data());
      return dx;
    }
  };
};

// The MAB of a declared SAB (stformer/blocks/sab.hpp), its parameters copied by name: what the
// references (tests/reference.hpp: ref::mab) read.
template <size_t D, size_t H, template <size_t, auto...> class Norm>
MAB<D, H, Norm> mab_of(const stformer::SAB<D, H, Norm>& declared) {
  auto w = test::make<SAB<D, H, Norm>>();
  test::copy_by_name(declared, *w);
  return w->mab;
}

}  // namespace written

// Its integer form (stformer/quantized/quantize.hpp): the same block at precision::int8.
template <size_t D, size_t H, template <size_t, auto...> class Norm>
struct stformer::Int8Of<written::SAB<D, H, Norm>> {
  using type = written::SAB<D, H, Norm, precision::int8>;
};
