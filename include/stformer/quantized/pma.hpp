// QPMA<D, H, K>: PMA in integers, x [B, N, D] (an int16 stream at any scale) -> out [B, K, D]
// (int16 at out_scale): out = the seeds S, then QMAB mab(out, x) in place on them.
// Tensors: seeds I16 [K, D] (S at out_scale), out_scale F32 [1], mab.*.
#pragma once

#include "../config.hpp"

#include <algorithm>
#include <cstdint>

#include "../blocks/pma.hpp"
#include "mab.hpp"

namespace stformer::inline STFORMER_ABI {

template <size_t D, size_t H, size_t K>
struct QPMA {
  using Float = PMA<D, H, K>;
  using Mab = QMAB<D, H>;
  TensorOf<std::int16_t, K, D> seeds;
  Scale out_scale;
  Mab mab;

  template <class Fn, class... S>
  static constexpr void visit(const Path& at, Fn& f, S&... s) {
    f(at / "seeds", Init{Init::zeros}, s.seeds...);
    f(at / "out_scale", Init{Init::zeros}, s.out_scale...);
    stformer::visit(at / "mab", f, s.mab...);
  }

  struct Ranges {
    typename Mab::Ranges mab;
    float residual = 0;  // the output's stream: the seeds, then the MAB's residual values
    template <class A>
    void observe(const Float& f, const A& acts) {
      mab.observe(f.mab, acts.mab, acts.s);
      residual = mab.residual;
    }
    template <class A, class X, class Y>
    void observe(const Float& f, const A& acts, const X&, const Y&) {
      observe(f, acts);
    }
  };

  void set_multipliers() { mab.set_multipliers(out_scale(0)); }

  static QPMA quantize(const Float& f, const Ranges& r) {
    QPMA q;
    q.out_scale(0) = quant::int16_scale(r.mab.residual);
    quant::quantize(f.seeds.data(), K * D, q.out_scale(0), q.seeds.data());
    q.mab = Mab::quantize(f.mab, r.mab, q.out_scale(0));
    return q;
  }

  template <size_t B, size_t N, size_t T = qtile_rows(B * (N > K ? N : K))>
  using Work = typename Mab::template Work<B, K, N, T>;

  // A step of a quantized Sequential (stformer/quantize.hpp): the set's stream [B, N, D] (any
  // scale) -> K rows [B, K, D] at s_out.
  static constexpr bool same_scale = false;
  void from_float(const Float& f, const Ranges& r, float, float s_out) {
    out_scale(0) = s_out;
    quant::quantize(f.seeds.data(), K * D, s_out, seeds.data());
    mab = Mab::quantize(f.mab, r.mab, s_out);
  }
  template <size_t B, size_t N>
  using Input = TensorOf<std::int16_t, B, N, D>;
  template <size_t B, size_t N>
  using Output = TensorOf<std::int16_t, B, K, D>;
  template <size_t B, size_t N, size_t Room>
  using Scratch = Work<B, N>;
  template <size_t B, size_t N, size_t T>
  void run(const Input<B, N>& x, Output<B, N>& y, Work<B, N, T>& w, const Mask<B, N>& mask) const {
    forward_into(x, y, w, mask.keys);
  }

  template <size_t B, size_t N, size_t T>
  void forward_into(const TensorOf<std::int16_t, B, N, D>& x, TensorOf<std::int16_t, B, K, D>& out, Work<B, N, T>& w,
                    const KeyMask<B, N>* keys = nullptr) const {
    for (size_t b = 0; b < B; ++b) std::copy(seeds.begin(), seeds.end(), out.begin() + b * K * D);
    mab.forward_in_place(out, x, w, keys);
  }
};

template <size_t D, size_t H, size_t K>
struct Int8Of<PMA<D, H, K>> {
  using type = QPMA<D, H, K>;
};

}  // namespace stformer
