// PMA<D, H, K, Norm>: PMA(X) = MAB(S, X), X [B, N, D] -> [B, K, D], with K learned seed
// vectors S [K, D] (Xavier-normal). Permutation-invariant. In integers (P = precision::int8)
// from an int16 stream to one of its own. Parameters: seeds, mab.* (in integers out_scale F32
// [1], seeds I16 [K, D]).
#pragma once

#include "../core/config.hpp"
#include "../core/precision.hpp"

#include <algorithm>

#include "mab.hpp"

namespace stformer::inline STFORMER_ABI {

template <size_t D, size_t H, size_t K, template <size_t, auto...> class Norm = ScaleNorm, class P = precision::float32>
struct PMA {
  using Float = PMA<D, H, K, Norm>;
  using Mab = MAB<D, H, Norm, P>;
  using Stream = typename P::Stream;
  TensorOf<Stream, K, D> seeds;                                                   // in integers at out_scale
  [[no_unique_address]] std::conditional_t<P::integer, Scale, Nothing> out_scale;  // the output's stream's
  Mab mab;

  template <class Fn, class... S>
  static constexpr void visit(const Path& at, Fn& f, S&... s) {
    f(at / "seeds", Init{P::integer ? Init::zeros : Init::xavier_normal}, s.seeds...);
    if constexpr (P::integer) f(at / "out_scale", Init{Init::zeros}, s.out_scale...);
    stformer::visit(at / "mab", f, s.mab...);
  }

  // Forward only: out [B, K, D] ← PMA(x) (the seeds, then MAB(S, X) in place on them).
  template <size_t B, size_t N, size_t T = P::tile_rows(B * K, B * N)>
  using Work = typename Mab::template Work<B, K, N, T>;

  template <size_t B, size_t N, size_t T>
  void forward_into(const TensorOf<Stream, B, N, D>& x, TensorOf<Stream, B, K, D>& out, Work<B, N, T>& w,
                    const KeyMask<B, N>* keys = nullptr) const {
    for (size_t b = 0; b < B; ++b) std::copy(seeds.begin(), seeds.end(), out.begin() + b * K * D);
    mab.forward_in_place(out, x, w, keys);
  }

  // A step of a Sequential (stformer/compose/sequential.hpp): the set [B, N, D] pooled to [B, K, D].
  template <size_t B, size_t N>
  using Input = TensorOf<Stream, B, N, D>;
  template <size_t B, size_t N>
  using Output = TensorOf<Stream, B, K, D>;
  template <size_t B, size_t N, size_t Room>
  using Scratch = Work<B, N>;
  template <size_t B, size_t N, size_t T, class Pool>
  void run(const Input<B, N>& x, Output<B, N>& y, Work<B, N, T>& w, const Mask<B, N>& mask, Pool&&) const {
    forward_into(x, y, w, mask.keys);
  }

  // In integers (P = precision::int8): the set's stream (any scale) into K rows on a stream of
  // their own at s_out, which starts at the seeds (its range: the seeds and the MAB's residual
  // values).
  static constexpr bool same_scale = false;
  struct Ranges {
    typename Mab::Ranges mab;
    float residual = 0;
    template <class A, class X, class Y>
    void observe(const Float& f, const A& acts, const X&, const Y&) {
      mab.observe(f.mab, acts.mab, acts.s);
      residual = mab.residual;
    }
  };
  void from_float(const Float& f, const Ranges& r, float, float s_out) {
    out_scale(0) = s_out;
    quant::quantize(f.seeds.data(), K * D, s_out, seeds.data());
    mab.from_float(f.mab, r.mab, s_out);
  }

  template <size_t B, size_t N>
  struct Infer {
    TensorOf<Stream, B, K, D> out;
    Work<B, N> w;

    template <class X>
    const TensorOf<Stream, B, K, D>& forward(const PMA& p, const X& x, const KeyMask<B, N>* keys = nullptr) {
      static_assert(typed_shape_is<Stream, X, B, N, D>, "PMA: input set X must be [B, N, D] (the pass's sizes, the block's width D)");
      p.forward_into(x, out, w, keys);
      return out;
    }
  };

  template <size_t B, size_t N>
  struct Acts {
    Tensor<B, K, D> s;  // S repeated over the batch
    ActsOf<MAB<D, H, Norm>, B, K, N> mab;
    using Dx = Tensor<B, N, D>;
    struct Workspace {
      Tensor<B, K, D> ds;
      WorkspaceOf<decltype(mab)> part;
    };

    // As a step of a chain: the pass's key mask (the causal flag is not read).
    template <class X>
    const Tensor<B, K, D>& forward(const PMA& p, const X& x, const Mask<B, N>& mask) {
      return forward(p, x, mask.keys);
    }
    template <class X>
    const Tensor<B, K, D>& forward(const PMA& p, const X& x, const KeyMask<B, N>* keys = nullptr) {
      static_assert(shape_is<X, B, N, D>, "PMA: input set X must be [B, N, D] (the pass's sizes, the block's width D)");
      for (size_t b = 0; b < B; ++b) std::copy(p.seeds.begin(), p.seeds.end(), s.begin() + b * K * D);
      return mab.forward(p.mab, s, x, keys);
    }

    // dS (summed over the batch) goes to the seeds; returns dX.
    const Tensor<B, N, D>& backward(const PMA& p, PMA& grad, const Tensor<B, K, D>& dout, Tensor<B, N, D>& dx, Workspace& ws) {
      mab.backward(p.mab, grad.mab, dout, {ws.ds, dx}, ws.part);
      for (size_t b = 0; b < B; ++b) kernels::add_to<K * D>(ws.ds.data() + b * K * D, grad.seeds.data());
      return dx;
    }
  };
};

// Its integer form (stformer/quantized/quantize.hpp): the same block at precision::int8.
template <size_t D, size_t H, size_t K, template <size_t, auto...> class Norm>
struct Int8Of<PMA<D, H, K, Norm>> {
  using type = PMA<D, H, K, Norm, precision::int8>;
};

}  // namespace stformer
