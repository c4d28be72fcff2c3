// QEncoderBlock<D, H, F>: EncoderBlock (pre-norm) in integers, in place on an int16 residual
// stream h at the model's residual scale s_h:
//   a = QScaleNorm sn1(h)  (int8)     h += QMultiHeadAttention(a, a)         (causal / key-padded)
//   a = QScaleNorm sn2(h)  (int8)     h += fc2(ReLU(fc1(a)))                 (QFeedForward)
// QFeedForward<D, F>: fc1 to int8 hidden rows at hidden_scale, zero point −128 (ReLU's outputs
// are ≥ 0: all 256 steps for them; the ReLU is the clamp at −128), fc2 (whose bias holds the
// zero point's 128·Σ W_q) into the residual. Why int16 for the stream: it carries every block's sum at one scale, and
// the pointer model's choice among 50 points turns on small differences of it (int8 there
// costs accuracy, the docs' table). Tensors: sn1.*, attn.*, sn2.*, ffn.fc1.*, ffn.fc2.*,
// ffn.hidden_scale (F32 [1]).
#pragma once

#include "../config.hpp"

#include <algorithm>
#include <cstdint>

#include "../blocks/encoder.hpp"
#include "attention.hpp"
#include "linear.hpp"
#include "scalenorm.hpp"

namespace stformer::inline STFORMER_ABI {

template <size_t D, size_t F>
struct QFeedForward {
  QLinear<D, F> fc1;
  QLinear<F, D> fc2;
  Scale hidden_scale;

  template <class Fn, class... S>
  static constexpr void visit(const Path& at, Fn& f, S&... s) {
    stformer::visit(at / "fc1", f, s.fc1...);
    stformer::visit(at / "fc2", f, s.fc2...);
    f(at / "hidden_scale", Init{Init::zeros}, s.hidden_scale...);
  }

  void set_multipliers(float s_in, float s_out) {
    fc1.set_multipliers(s_in, hidden_scale(0));
    fc2.set_multipliers(hidden_scale(0), s_out);
  }

  static QFeedForward quantize(const FeedForward<D, F>& f, float hidden_max, float s_in, float s_out) {
    QFeedForward q;
    q.hidden_scale(0) = quant::scale_for(hidden_max, 255);
    q.fc1 = QLinear<D, F>::quantize(f.fc1, s_in, q.hidden_scale(0));
    q.fc2 = QLinear<F, D>::quantize(f.fc2, q.hidden_scale(0), s_out, -128);
    return q;
  }

  // A step of a quantized Sequential (stformer/quantize.hpp): h ← FFN(h) in place on an int16
  // stream, its output a stream of its own at s_out; its scratch T rows of hid and acc.
  using Float = FeedForward<D, F>;
  static constexpr bool same_scale = false;
  struct Ranges {
    float hidden = 0;
    template <class A, class X, class Y>
    void observe(const Float&, const A& acts, const X&, const Y&) {
      hidden = std::max(hidden, quant::max_abs(acts.fc1.out));
    }
  };
  void from_float(const Float& f, const Ranges& r, float s_in, float s_out) { *this = quantize(f, r.hidden, s_in, s_out); }
  template <size_t B, size_t N>
  using Input = TensorOf<std::int16_t, B, N, D>;
  static constexpr bool in_place = true;
  template <size_t T>
  struct Work {
    TensorOf<std::int8_t, T, F> hid;
    TensorOf<std::int32_t, T, F> acc;
  };
  template <size_t B, size_t N, size_t Room>
  using Scratch = Work<rows_in_room(B * N, qtile_least(B * N), Room, F * 5)>;
  template <size_t B, size_t N, size_t T>
  void forward_in_place(Input<B, N>& h, Work<T>& w) const {
    for_tiles<B * N, T>([&]<size_t R>(size_t i) {  // a tile's rows are read whole before they are written
      fc1.template apply<R, true>(h.data() + i * D, w.acc.data(), w.hid.data());
      fc2.template add_to<R, true>(w.hid.data(), w.acc.data(), h.data() + i * D);
    });
  }

  // residual [Rows, D] += FFN(x [Rows, D]), T rows at a time: hid [T, F] (int8), acc [T, F].
  template <size_t Rows, size_t T>
  void add_to(const std::int8_t* x, std::int16_t* residual, std::int8_t* hid, std::int32_t* acc) const {
    for_tiles<Rows, T>([&]<size_t R>(size_t i) {
      fc1.template apply<R, true>(x + i * D, acc, hid);
      fc2.template add_to<R>(hid, acc, residual + i * D);
    });
  }
};

template <size_t D, size_t H, size_t F>
struct QEncoderBlock {
  using Float = EncoderBlock<D, H, F>;
  using Attention = QMultiHeadAttention<D, D, D, H>;
  QScaleNorm<D> sn1;
  Attention attn;
  QScaleNorm<D> sn2;
  QFeedForward<D, F> ffn;

  template <class Fn, class... S>
  static constexpr void visit(const Path& at, Fn& f, S&... s) {
    stformer::visit(at / "sn1", f, s.sn1...);
    stformer::visit(at / "attn", f, s.attn...);
    stformer::visit(at / "sn2", f, s.sn2...);
    stformer::visit(at / "ffn", f, s.ffn...);
  }

  // Ranges of the float block f's activations; residual: of its residual stream (h and out).
  struct Ranges {
    float sn1 = 0, sn2 = 0, hidden = 0, residual = 0;
    typename Attention::Ranges attn;
    template <class A>
    void observe(const Float& f, const A& acts) {
      sn1 = std::max(sn1, quant::max_abs(acts.sn1.out)), sn2 = std::max(sn2, quant::max_abs(acts.sn2.out));
      hidden = std::max(hidden, quant::max_abs(acts.ffn.fc1.out));
      residual = std::max({residual, quant::max_abs(acts.h), quant::max_abs(acts.out)});
      attn.observe(f.attn, acts.attn);
    }
    template <class A, class X, class Y>
    void observe(const Float& f, const A& acts, const X&, const Y&) {
      observe(f, acts);
    }
  };

  void set_multipliers(float s_h) {
    sn1.set_multipliers(), sn2.set_multipliers();
    attn.set_multipliers(sn1.out_scale(0), sn1.out_scale(0), s_h);
    ffn.set_multipliers(sn2.out_scale(0), s_h);
  }

  static QEncoderBlock quantize(const Float& f, const Ranges& r, float s_h) {
    QEncoderBlock q;
    q.sn1 = QScaleNorm<D>::quantize(f.sn1, quant::scale_for(r.sn1));
    q.sn2 = QScaleNorm<D>::quantize(f.sn2, quant::scale_for(r.sn2));
    q.attn = Attention::quantize(f.attn, r.attn, q.sn1.out_scale(0), q.sn1.out_scale(0), s_h);
    q.ffn = QFeedForward<D, F>::quantize(f.ffn, r.hidden, q.sn2.out_scale(0), s_h);
    return q;
  }

  // Forward only: a [B, N, D] (int8: SN1(h), then q and the heads, then SN2(h)), and over one
  // arena the attention's buffers, then the feed-forward layer's hidden rows and accumulators,
  // T rows at a time.
  template <size_t B, size_t N, size_t T = qtile_rows(B * N)>
  struct Work {
    using AttentionWork = typename Attention::template Work<B, N, N, T>;
    using FfnWork = typename QFeedForward<D, F>::template Work<T>;
    TensorOf<std::int8_t, B, N, D> a;
    Phases<AttentionWork, FfnWork> phase;
  };

  // A step of a quantized Sequential (stformer/quantize.hpp): forward_in_place on the int16
  // stream, at its scale; Work its scratch, with as many rows per tile as Room holds.
  static constexpr bool same_scale = true;
  void from_float(const Float& f, const Ranges& r, float s_h, float) { *this = quantize(f, r, s_h); }
  template <size_t B, size_t N>
  using Input = TensorOf<std::int16_t, B, N, D>;
  static constexpr bool in_place = true;
  template <size_t B, size_t N, size_t Room>
  using Scratch = typename TiledIn<Work, B, N, Room, qtile_least(B * N)>::type;

  template <size_t B, size_t N, size_t T>
  void forward_in_place(TensorOf<std::int16_t, B, N, D>& h, Work<B, N, T>& w, Mask<B, N> mask = {}) const {
    using Wk = Work<B, N, T>;
    auto& attention = w.phase.template start<typename Wk::AttentionWork>();
    sn1.template apply<B * N>(h.data(), w.a.data());
    attn.template prepare<B, N, N, T>(w.a.data(), attention);
    attn.template forward_add<B, N, N, T>(w.a.data(), h.data(), attention, mask);
    sn2.template apply<B * N>(h.data(), w.a.data());
    auto& f = w.phase.template start<typename Wk::FfnWork>();
    ffn.template add_to<B * N, T>(w.a.data(), h.data(), f.hid.data(), f.acc.data());
  }
};

template <size_t D, size_t F>
struct Int8Of<FeedForward<D, F>> {
  using type = QFeedForward<D, F>;
};
template <size_t D, size_t H, size_t F>
struct Int8Of<EncoderBlock<D, H, F>> {
  using type = QEncoderBlock<D, H, F>;
};

}  // namespace stformer
