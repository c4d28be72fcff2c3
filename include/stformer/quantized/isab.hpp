// QISAB<D, H, M>: ISAB in integers, in place on the set's int16 stream x [B, N, D] (at the
// model's scale s_x):  Hm = QMAB mab1(I, x)  (a stream of its own at hm_scale, starting at the
// inducing points),  x = QMAB mab2(x, Hm). A key-padding mask over x applies to mab1.
// Tensors: inducing I16 [M, D] (I at hm_scale), hm_scale F32 [1], mab1.*, mab2.*.
#pragma once

#include "../config.hpp"

#include <algorithm>
#include <cstdint>

#include "../blocks/isab.hpp"
#include "mab.hpp"

namespace stformer::inline STFORMER_ABI {

template <size_t D, size_t H, size_t M>
struct QISAB {
  using Float = ISAB<D, H, M>;
  using Mab = QMAB<D, H>;
  TensorOf<std::int16_t, M, D> inducing;
  Scale hm_scale;
  Mab mab1, mab2;

  template <class Fn, class... S>
  static constexpr void visit(const Path& at, Fn& f, S&... s) {
    f(at / "inducing", Init{Init::zeros}, s.inducing...);
    f(at / "hm_scale", Init{Init::zeros}, s.hm_scale...);
    stformer::visit(at / "mab1", f, s.mab1...);
    stformer::visit(at / "mab2", f, s.mab2...);
  }

  // mab2.residual covers the block's input x, so it also bounds the stream x comes from.
  struct Ranges {
    typename Mab::Ranges mab1, mab2;
    float residual = 0;  // the set's stream: mab2's
    template <class A, class X>
    void observe(const Float& f, const A& acts, const X& x) {
      mab1.observe(f.mab1, acts.mab1, acts.i);
      mab2.observe(f.mab2, acts.mab2, x);
      residual = mab2.residual;
    }
    template <class A, class X, class Y>
    void observe(const Float& f, const A& acts, const X& x, const Y&) {
      observe(f, acts, x);
    }
  };

  void set_multipliers(float s_x) {
    mab1.set_multipliers(hm_scale(0));
    mab2.set_multipliers(s_x);
  }

  static QISAB quantize(const Float& f, const Ranges& r, float s_x) {
    QISAB q;
    q.hm_scale(0) = quant::int16_scale(r.mab1.residual);
    quant::quantize(f.inducing.data(), M * D, q.hm_scale(0), q.inducing.data());
    q.mab1 = Mab::quantize(f.mab1, r.mab1, q.hm_scale(0));
    q.mab2 = Mab::quantize(f.mab2, r.mab2, s_x);
    return q;
  }

  // Forward only: Hm [B, M, D] (int16), and over one arena mab1's work, then mab2's.
  template <size_t B, size_t N, size_t T = qtile_rows(B * (N > M ? N : M))>
  struct Work {
    using Work1 = typename Mab::template Work<B, M, N, T>;
    using Work2 = typename Mab::template Work<B, N, M, T>;
    TensorOf<std::int16_t, B, M, D> hm;
    Phases<Work1, Work2> phase;
  };

  // A step of a quantized Sequential (stformer/quantize.hpp): in place on the set's stream, at
  // its scale.
  static constexpr bool same_scale = true;
  void from_float(const Float& f, const Ranges& r, float s_x, float) { *this = quantize(f, r, s_x); }
  template <size_t B, size_t N>
  using Input = TensorOf<std::int16_t, B, N, D>;
  static constexpr bool in_place = true;
  template <size_t B, size_t N, size_t Room>
  using Scratch = Work<B, N>;

  template <size_t B, size_t N, size_t T>
  void forward_in_place(TensorOf<std::int16_t, B, N, D>& x, Work<B, N, T>& w, const KeyMask<B, N>* keys = nullptr) const {
    using Wk = Work<B, N, T>;
    for (size_t b = 0; b < B; ++b) std::copy(inducing.begin(), inducing.end(), w.hm.begin() + b * M * D);
    mab1.forward_in_place(w.hm, x, w.phase.template start<typename Wk::Work1>(), keys);
    mab2.forward_in_place(x, w.hm, w.phase.template start<typename Wk::Work2>());
  }
};

template <size_t D, size_t H, size_t M>
struct Int8Of<ISAB<D, H, M>> {
  using type = QISAB<D, H, M>;
};

}  // namespace stformer
