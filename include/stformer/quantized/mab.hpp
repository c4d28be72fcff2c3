// QMAB<D, H>: MAB (pre-norm, ScaleNorm) in integers, in place on the query set's int16 residual
// stream h [B, Nq, D] at scale s_h, its keys and values from an int16 stream y [B, Nk, D] at any
// scale (ScaleNorm cancels it; y may be h itself, as in SAB):
//   a = QScaleNorm nkv(y)  (int16)  k, v of a (int8)                 (QMultiHeadAttention::prepare)
//   a = QScaleNorm nq(h)   (int16)  h += QMultiHeadAttention(a, k, v)            (key-padded over y)
//   a = QScaleNorm nff(h)  (int16)  h += ReLU(fc(a))   (the ReLU: fc's requantization into h
//                                                        clamped at 0, QLinear::add_to)
// Weights, q, k and v are int8; the norms' outputs and the attention's heads int16 (the
// attention's Row). Why: the set model regresses a point, and every int8 rounding of them moves
// it (the keys' norm most, its outliers set the scale); int16 there halves the int8 model's
// distance from the float one (docs/quantized.md). Their products are plain int16 × int8 loops.
// Tensors: nq.*, nkv.*, attn.*, nff.*, fc.* (the blocks' headers).
#pragma once

#include "../config.hpp"

#include <algorithm>
#include <cstdint>

#include "../blocks/mab.hpp"
#include "attention.hpp"
#include "linear.hpp"
#include "scalenorm.hpp"

namespace stformer::inline STFORMER_ABI {

template <size_t D, size_t H>
struct QMAB {
  using Float = MAB<D, H>;
  using Row = std::int16_t;
  using Attention = QMultiHeadAttention<D, D, D, H, ScoreScale::head_width, Row>;
  QScaleNorm<D> nq, nkv;
  Attention attn;
  QScaleNorm<D> nff;
  QLinear<D, D> fc;

  template <class Fn, class... S>
  static constexpr void visit(const Path& at, Fn& f, S&... s) {
    stformer::visit(at / "nq", f, s.nq...);
    stformer::visit(at / "nkv", f, s.nkv...);
    stformer::visit(at / "attn", f, s.attn...);
    stformer::visit(at / "nff", f, s.nff...);
    stformer::visit(at / "fc", f, s.fc...);
  }

  // Ranges of the float block f's activations (Float::Acts) over calibration data; residual: of
  // the query set's stream, its input xq, h and out. (The norms' outputs need none: see quantize.)
  struct Ranges {
    float residual = 0;
    typename Attention::Ranges attn;
    template <class A, class X>
    void observe(const Float& f, const A& acts, const X& xq) {
      residual = std::max({residual, quant::max_abs(xq), quant::max_abs(acts.h), quant::max_abs(acts.out)});
      attn.observe(f.attn, acts.attn);
    }
  };

  void set_multipliers(float s_h) {
    nq.set_multipliers(), nkv.set_multipliers(), nff.set_multipliers();
    attn.set_multipliers(nq.out_scale(0), nkv.out_scale(0), s_h);
    fc.set_multipliers(nff.out_scale(0), s_h);
  }

  // The block f on a query stream at scale s_h (host side).
  static QMAB quantize(const Float& f, const Ranges& r, float s_h) {
    QMAB q;
    // |g·x/‖x‖|'s entries are at most |g|: int16 outputs at |g|/32767 never saturate
    q.nq = QScaleNorm<D>::quantize(f.nq, quant::scale_for(std::abs(f.nq.g(0)), 32767));
    q.nkv = QScaleNorm<D>::quantize(f.nkv, quant::scale_for(std::abs(f.nkv.g(0)), 32767));
    q.nff = QScaleNorm<D>::quantize(f.nff, quant::scale_for(std::abs(f.nff.g(0)), 32767));
    q.attn = Attention::quantize(f.attn, r.attn, q.nq.out_scale(0), q.nkv.out_scale(0), s_h);
    q.fc = QLinear<D, D>::quantize(f.fc, q.nff.out_scale(0), s_h);
    return q;
  }

  // Forward only: a (int16: Nkv(y) until k and v are made, then Nq(h), then the heads, then
  // Nff(h)) and the attention's buffers, whose int32 tile also takes fc's accumulators; T rows
  // at a time.
  template <size_t B, size_t Nq, size_t Nk, size_t T = qtile_rows(B * (Nq > Nk ? Nq : Nk))>
  struct Work {
    TensorOf<Row, B, (Nq > Nk ? Nq : Nk), D> a;
    typename Attention::template Work<B, Nq, Nk, T> attention;
  };

  template <size_t B, size_t Nq, size_t Nk, size_t T>
  void forward_in_place(TensorOf<std::int16_t, B, Nq, D>& h, const TensorOf<std::int16_t, B, Nk, D>& y, Work<B, Nq, Nk, T>& w,
                        const KeyMask<B, Nk>* keys = nullptr) const {
    nkv.template apply<B * Nk>(y.data(), w.a.data());
    attn.template prepare<B, Nq, Nk, T>(w.a.data(), w.attention);
    nq.template apply<B * Nq>(h.data(), w.a.data());
    attn.template forward_add<B, Nq, Nk, T>(w.a.data(), h.data(), w.attention, Mask<B, Nk>{.keys = keys});
    nff.template apply<B * Nq>(h.data(), w.a.data());
    for_tiles<B * Nq, T>([&]<size_t R>(size_t i) { fc.template add_to<R, false, true>(w.a.data() + i * D, w.attention.tile.data(), h.data() + i * D); });
  }
};

}  // namespace stformer
