// ISAB<D, H, M, Norm>: Hm = MAB1(I, X), ISAB(X) = MAB2(X, Hm), X [B, N, D], with M learned
// inducing points I [M, D] (Xavier-normal). Cost O(N·M) instead of O(N²); permutation-
// equivariant. A key-padding mask over X applies to MAB1 (X is its key side).
// backward: MAB2ᵀ gives dX (query side) and dHm; MAB1ᵀ dHm gives dI (summed over the batch)
// and dX (key side). In integers (P = precision::int8) in place on the set's int16 stream.
// Parameters: inducing, mab1.*, mab2.* (in integers also hm_scale F32 [1], inducing I16 [M, D]).
#pragma once

#include "../core/config.hpp"
#include "../core/precision.hpp"

#include <algorithm>

#include "mab.hpp"

namespace stformer::inline STFORMER_ABI {

template <size_t D, size_t H, size_t M, template <size_t, auto...> class Norm = ScaleNorm, class P = precision::float32>
struct ISAB {
  using Float = ISAB<D, H, M, Norm>;
  using Mab = MAB<D, H, Norm, P>;
  using Stream = typename P::Stream;
  TensorOf<Stream, M, D> inducing;                              // in integers at hm_scale
  [[no_unique_address]] std::conditional_t<P::integer, Scale, Nothing> hm_scale;  // Hm's stream's
  Mab mab1, mab2;

  template <class Fn, class... S>
  static constexpr void visit(const Path& at, Fn& f, S&... s) {
    f(at / "inducing", Init{P::integer ? Init::zeros : Init::xavier_normal}, s.inducing...);
    if constexpr (P::integer) f(at / "hm_scale", Init{Init::zeros}, s.hm_scale...);
    stformer::visit(at / "mab1", f, s.mab1...);
    stformer::visit(at / "mab2", f, s.mab2...);
  }

  // Forward only: x ← ISAB(x) in place. Work: Hm [B, M, D] (I, then MAB1(I, X) in place), and
  // over one arena MAB1's work, then MAB2's, whose projection tile takes T2 ≥ T rows, as many as
  // MAB1's buffers leave room for (float; the integer tile stays T).
  template <size_t B, size_t N, size_t T = P::tile_rows(B * N, B * M)>
  struct Work {
    using Work1 = typename Mab::template Work<B, M, N, T>;
    using Tile1Row = typename Mab::template Work<B, N, M, 1>;  // MAB2's buffers with a one-row tile
    static constexpr size_t T2 =
        P::integer ? T
                   : rows_in_room(B * N, T, sizeof(Work1) - std::min(sizeof(Work1), sizeof(Tile1Row) - sizeof(Tile1Row::attn.tile)),
                                  D * sizeof(float));
    using Work2 = typename Mab::template Work<B, N, M, T2>;
    TensorOf<Stream, B, M, D> hm;
    Phases<Work1, Work2> phase;
  };

  template <size_t B, size_t N, size_t T>
  void forward_in_place(TensorOf<Stream, B, N, D>& x, Work<B, N, T>& w, const KeyMask<B, N>* keys = nullptr) const {
    using Wk = Work<B, N, T>;
    for (size_t b = 0; b < B; ++b) std::copy(inducing.begin(), inducing.end(), w.hm.begin() + b * M * D);
    mab1.forward_in_place(w.hm, x, w.phase.template start<typename Wk::Work1>(), keys);
    mab2.forward_in_place(x, w.hm, w.phase.template start<typename Wk::Work2>());
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

  // In integers (P = precision::int8): in place on the set's stream at its scale s_x; Hm a
  // stream of its own at hm_scale, from the inducing points and mab1's residual values (mab2's
  // cover the block's input x, so they also bound the stream x comes from).
  static constexpr bool same_scale = true;
  struct Ranges {
    typename Mab::Ranges mab1, mab2;
    float residual = 0;  // the set's stream: mab2's
    template <class A, class X, class Y>
    void observe(const Float& f, const A& acts, const X& x, const Y&) {
      mab1.observe(f.mab1, acts.mab1, acts.i);
      mab2.observe(f.mab2, acts.mab2, x);
      residual = mab2.residual;
    }
  };
  void from_float(const Float& f, const Ranges& r, float s_x, float) {
    hm_scale(0) = quant::int16_scale(r.mab1.residual);
    quant::quantize(f.inducing.data(), M * D, hm_scale(0), inducing.data());
    mab1.from_float(f.mab1, r.mab1, hm_scale(0));
    mab2.from_float(f.mab2, r.mab2, s_x);
  }

  template <size_t B, size_t N>
  struct Infer {
    TensorOf<Stream, B, N, D> out;
    Work<B, N> w;

    template <class X>
    const TensorOf<Stream, B, N, D>& forward(const ISAB& p, const X& x, const KeyMask<B, N>* keys = nullptr) {
      static_assert(typed_shape_is<Stream, X, B, N, D>, "ISAB: input set X must be [B, N, D] (the pass's sizes, the block's width D)");
      if (&x != &out) std::copy(x.begin(), x.end(), out.begin());
      p.forward_in_place(out, w, keys);
      return out;
    }
  };

  template <size_t B, size_t N>
  struct Acts {
    Tensor<B, M, D> i;  // I repeated over the batch
    ActsOf<MAB<D, H, Norm>, B, M, N> mab1;
    ActsOf<MAB<D, H, Norm>, B, N, M> mab2;
    using Dx = Tensor<B, N, D>;
    struct Workspace {
      Tensor<B, M, D> dh, di;  // dL/dH (H = MAB1(I, X)), dL/dI
      Tensor<B, N, D> dxk;     // dL/dX through MAB1's keys
      Phases<WorkspaceOf<decltype(mab1)>, WorkspaceOf<decltype(mab2)>> mab;
    };

    // As a step of a chain: the pass's key mask (the causal flag is not read).
    template <class X>
    const Tensor<B, N, D>& forward(const ISAB& p, const X& x, const Mask<B, N>& mask) {
      return forward(p, x, mask.keys);
    }
    template <class X>
    const Tensor<B, N, D>& forward(const ISAB& p, const X& x, const KeyMask<B, N>* keys = nullptr) {
      static_assert(shape_is<X, B, N, D>, "ISAB: input set X must be [B, N, D] (the pass's sizes, the block's width D)");
      for (size_t b = 0; b < B; ++b) std::copy(p.inducing.begin(), p.inducing.end(), i.begin() + b * M * D);
      return mab2.forward(p.mab2, x, mab1.forward(p.mab1, i, x, keys));
    }

    const Tensor<B, N, D>& backward(const ISAB& p, ISAB& grad, const Tensor<B, N, D>& dout, Tensor<B, N, D>& dx, Workspace& ws) {
      mab2.backward(p.mab2, grad.mab2, dout, {dx, ws.dh}, ws.mab.template start<WorkspaceOf<decltype(mab2)>>());
      mab1.backward(p.mab1, grad.mab1, ws.dh, {ws.di, ws.dxk}, ws.mab.template start<WorkspaceOf<decltype(mab1)>>());
      for (size_t b = 0; b < B; ++b) kernels::add_to<M * D>(ws.di.data() + b * M * D, grad.inducing.data());
      kernels::add<B * N * D>(dx.data(), ws.dxk.data(), dx.data());
      return dx;
    }
  };
};

// Its integer form (stformer/quantized/quantize.hpp): the same block at precision::int8.
template <size_t D, size_t H, size_t M, template <size_t, auto...> class Norm>
struct Int8Of<ISAB<D, H, M, Norm>> {
  using type = ISAB<D, H, M, Norm, precision::int8>;
};

}  // namespace stformer
