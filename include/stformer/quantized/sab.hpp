// QSAB<D, H>: SAB in integers, in place on the set's int16 stream h [B, N, D] at scale s_h:
// h = QMAB mab(h, h), the keys and values from the stream itself (QMAB reads them before it
// writes h). Tensors: mab.* (QMAB's).
#pragma once

#include "../config.hpp"

#include <cstdint>

#include "../blocks/sab.hpp"
#include "mab.hpp"

namespace stformer::inline STFORMER_ABI {

template <size_t D, size_t H>
struct QSAB {
  using Float = SAB<D, H>;
  using Mab = QMAB<D, H>;
  Mab mab;

  template <class Fn, class... S>
  static constexpr void visit(const Path& at, Fn& f, S&... s) {
    stformer::visit(at / "mab", f, s.mab...);
  }

  struct Ranges {
    typename Mab::Ranges mab;
    float residual = 0;
    template <class A, class X, class Y>
    void observe(const Float& f, const A& acts, const X& x, const Y&) {
      mab.observe(f.mab, acts.mab, x);
      residual = mab.residual;
    }
  };

  void set_multipliers(float s_h) { mab.set_multipliers(s_h); }

  template <size_t B, size_t N, size_t T = qtile_rows(B * N)>
  using Work = typename Mab::template Work<B, N, N, T>;

  template <size_t B, size_t N, size_t T>
  void forward_in_place(TensorOf<std::int16_t, B, N, D>& h, Work<B, N, T>& w, const KeyMask<B, N>* keys = nullptr) const {
    mab.forward_in_place(h, h, w, keys);
  }

  // A step of a quantized Sequential (stformer/quantize.hpp): in place, at the stream's scale.
  static constexpr bool same_scale = true;
  void from_float(const Float& f, const Ranges& r, float s_h, float) { mab = Mab::quantize(f.mab, r.mab, s_h); }
  template <size_t B, size_t N>
  using Input = TensorOf<std::int16_t, B, N, D>;
  static constexpr bool in_place = true;
  template <size_t B, size_t N, size_t Room>
  using Scratch = Work<B, N>;
};
template <size_t D, size_t H>
struct Int8Of<SAB<D, H>> {
  using type = QSAB<D, H>;
};

}  // namespace stformer
