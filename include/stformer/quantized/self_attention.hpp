// QSelfAttention<D, H, S, Pr>: SelfAttention<D, H, S, Pr> on int16 streams (x = s_x·x_q in,
// y = s_y·y_q out):
//   a_q = clamp(apply(x_q, M), int8),  M = s_x / s_a       the stream as int8 rows at s_a, the
//                                                          calibrated max|x| at 127
//   y_q = QMultiHeadAttention(a_q, a_q) added into zeros    (quantized/attention.hpp)
// Masks as in float (causal, key padding).
// Tensors: QMultiHeadAttention's (wq, wk, wv, wo, q_scale, …), and the rows' requantization
// (BranchScales<1>: branch_scale = s_a, stream_scale = s_x, branch_requant = M).
#pragma once

#include "../core/config.hpp"

#include <algorithm>
#include <cstdint>

#include "../blocks/form.hpp"
#include "../blocks/self_attention.hpp"
#include "attention.hpp"

namespace stformer::inline STFORMER_ABI {

template <size_t D, size_t H, ScoreScale S, Projections Pr>
struct QSelfAttention {
  using Attention = QMultiHeadAttention<D, D, D, H, S, std::int8_t, Pr>;
  using Float = SelfAttention<D, H, S, Pr>;
  // Both at the block's own level (wq, …, branch_scale): its tensors those of one block.
  Attention attn;
  BranchScales<1> rows;

  template <class F, class... P>
  static constexpr void visit(const Path& at, F& f, P&... p) {
    stformer::visit(at, f, p.attn...);
    stformer::visit(at, f, p.rows...);
  }

  static constexpr bool same_scale = false;
  struct Ranges {
    float input = 0;
    typename Attention::Ranges attn;
    template <class A, class X, class Y>
    void observe(const Float& f, const A& acts, const X& x, const Y&) {
      input = std::max(input, quant::max_abs(x));
      attn.observe(f, acts.attn);
    }
  };
  void from_float(const Float& f, const Ranges& r, float s_in, float s_out) {
    const float s_a = quant::scale_for(r.input);
    attn = Attention::quantize(f, r.attn, s_a, s_a, s_out);
    rows.set(0, s_a, s_in);
  }

  // A step of a quantized Sequential, in place on the stream: h ← MHA(a_q, a_q) (h zeroed, then
  // the attention added into it), or into a stream (a residual body's last step, run_add):
  // h = sat(h + MHA(a_q, a_q)). Scratch: the int8 rows a_q and the attention's keys, values and
  // tile of T rows.
  static constexpr bool in_place = true;
  template <size_t B, size_t N>
  using Input = TensorOf<std::int16_t, B, N, D>;
  template <size_t B, size_t N, size_t Room = 0>
  struct Scratch {
    static constexpr size_t T = precision::int8::tile_rows(B * N, B * N);
    TensorOf<std::int8_t, B, N, D> a;
    typename Attention::template Work<B, N, N, T> w;
  };
  template <size_t B, size_t N, size_t Room, class Pool = Serial>
  void forward_in_place(Input<B, N>& h, Scratch<B, N, Room>& w, const Mask<B, N>& mask, Pool&& pool = Pool{}) const {
    rows_of(h, w);
    std::fill(h.begin(), h.end(), std::int16_t(0));
    add(h, w, mask, pool);
  }
  template <size_t B, size_t N, size_t Room, class Pool = Serial>
  void run_add(const Input<B, N>& x, Input<B, N>& h, Scratch<B, N, Room>& w, const Mask<B, N>& mask, Pool&& pool = Pool{}) const {
    rows_of(x, w);
    add(h, w, mask, pool);
  }

 private:
  // w.a ← the stream x requantized to int8 rows
  template <size_t B, size_t N, class W>
  void rows_of(const Input<B, N>& x, W& w) const {
    for (size_t k = 0; k < B * N * D; ++k)
      w.a.data()[k] = std::int8_t(kernels::clamp_i32(rows.branch_requant.apply(0, x.data()[k]), -128, 127));
  }
  // h ← sat(h + MHA(w.a, w.a))
  template <size_t B, size_t N, class W, class Pool>
  void add(Input<B, N>& h, W& w, const Mask<B, N>& mask, Pool& pool) const {
    attn.template prepare<B, N, N, W::T>(w.a.data(), w.w, pool);
    attn.template forward_add<B, N, N, W::T>(w.a.data(), h.data(), w.w, mask, pool);
  }
};
template <size_t D, size_t H, ScoreScale S, Projections Pr>
struct Int8Of<SelfAttention<D, H, S, Pr>> {
  using type = QSelfAttention<D, H, S, Pr>;
};

}  // namespace stformer
