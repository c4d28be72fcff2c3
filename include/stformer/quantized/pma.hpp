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
    template <class A>
    void observe(const Float& f, const A& acts) { mab.observe(f.mab, acts.mab, acts.s); }
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

  template <size_t B, size_t N, size_t T>
  void forward_into(const TensorOf<std::int16_t, B, N, D>& x, TensorOf<std::int16_t, B, K, D>& out, Work<B, N, T>& w,
                    const KeyMask<B, N>* keys = nullptr) const {
    for (size_t b = 0; b < B; ++b) std::copy(seeds.begin(), seeds.end(), out.begin() + b * K * D);
    mab.forward_in_place(out, x, w, keys);
  }
};

}  // namespace stformer
