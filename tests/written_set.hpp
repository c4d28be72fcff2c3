// The Set Transformer's blocks written by hand over MAB, as the library had them before they
// became declarations (stformer/blocks/sab.hpp, isab.hpp, pma.hpp): the tests hold the
// declarations to their names, plans and bits.
// written::SAB<D, H, Norm, P>: SAB(X) = MAB(X, X), X [B, N, D]. Permutation-equivariant. In integers
// (P = precision::int8) in place on the set's int16 stream: the MAB reads its keys and values
// from the stream before it writes it. Parameters: mab.*.
#pragma once

#include <algorithm>
#include <memory>

#include "stformer/stformer.hpp"
#include "util.hpp"
#include "written_mab.hpp"

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

// ISAB<D, H, M, Norm>: Hm = MAB1(I, X), ISAB(X) = MAB2(X, Hm), X [B, N, D], with M learned
// inducing points I [M, D] (Xavier-normal). Cost O(N·M) instead of O(N²); permutation-
// equivariant. A key-padding mask over X applies to MAB1 (X is its key side).
// backward: MAB2ᵀ gives dX (query side) and dHm; MAB1ᵀ dHm gives dI (summed over the batch)
// and dX (key side). In integers (P = precision::int8) in place on the set's int16 stream.
// Parameters: inducing, mab1.*, mab2.* (in integers also hm_scale F32 [1], inducing I16 [M, D]).
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


// PMA<D, H, K, Norm>: PMA(X) = MAB(S, X), X [B, N, D] -> [B, K, D], with K learned seed
// vectors S [K, D] (Xavier-normal). Permutation-invariant. In integers (P = precision::int8)
// from an int16 stream to one of its own. Parameters: seeds, mab.* (in integers out_scale F32
// [1], seeds I16 [K, D]).
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

// The hand-written block Hand with a declared block's parameters, copied by name: what the
// references (tests/reference.hpp: ref::mab, ref::isab, ref::pma) read.
template <class Hand, class Declared>
std::unique_ptr<Hand> hand_of(const Declared& declared) {
  auto w = test::make<Hand>();
  test::copy_by_name(declared, *w);
  return w;
}
// The MAB of a declared SAB (stformer/blocks/sab.hpp).
template <size_t D, size_t H, template <size_t, auto...> class Norm>
MAB<D, H, Norm> mab_of(const stformer::SAB<D, H, Norm>& declared) {
  return hand_of<SAB<D, H, Norm>>(declared)->mab;
}

}  // namespace written


// Its integer form (stformer/quantized/quantize.hpp): the same block at precision::int8.
template <size_t D, size_t H, template <size_t, auto...> class Norm>
struct stformer::Int8Of<written::SAB<D, H, Norm>> {
  using type = written::SAB<D, H, Norm, written::precision::int8>;
};

// Its integer form (stformer/quantized/quantize.hpp): the same block at precision::int8.
template <size_t D, size_t H, size_t M, template <size_t, auto...> class Norm>
struct stformer::Int8Of<written::ISAB<D, H, M, Norm>> {
  using type = written::ISAB<D, H, M, Norm, written::precision::int8>;
};

// Its integer form (stformer/quantized/quantize.hpp): the same block at precision::int8.
template <size_t D, size_t H, size_t K, template <size_t, auto...> class Norm>
struct stformer::Int8Of<written::PMA<D, H, K, Norm>> {
  using type = written::PMA<D, H, K, Norm, written::precision::int8>;
};

