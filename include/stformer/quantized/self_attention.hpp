// QSelfAttention<D, H, S, Pr, In>: SelfAttention<D, H, S, Pr> in integers, its output an int16
// stream (y = s_y·y_q):
//   In = int16 (a stream x = s_x·x_q in, in place):
//     a_q = clamp(apply(x_q, M), int8),  M = s_x / s_a   the stream as int8 rows at s_a, the
//                                                        calibrated max|x| at 127
//   In = int8 (rows a_q at s_a in: the norm before it in a chain writes them, quantized/rows.hpp)
//   y_q = QMultiHeadAttention(a_q, a_q) added into zeros    (quantized/attention.hpp)
// Masks as in float (causal, key padding).
// Tensors: QMultiHeadAttention's (wq, wk, wv, wo, q_scale, …), and for a stream in the rows'
// requantization (BranchScales<1>: branch_scale = s_a, stream_scale = s_x, branch_requant = M).
#pragma once

#include "../core/config.hpp"

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "../blocks/self_attention.hpp"
#include "attention.hpp"
#include "rows.hpp"

namespace stformer::inline STFORMER_ABI {

template <size_t D, size_t H, ScoreScale S, Projections Pr, class In = std::int16_t>
struct QSelfAttention {
  static_assert(std::is_same_v<In, std::int16_t> || std::is_same_v<In, std::int8_t>, "QSelfAttention: an int16 stream or int8 rows in");
  static constexpr bool rows_in = std::is_same_v<In, std::int8_t>;
  using Attention = QMultiHeadAttention<D, D, D, H, S, std::int8_t, Pr>;
  using Float = SelfAttention<D, H, S, Pr>;
  // Both at the block's own level (wq, …, branch_scale): its tensors those of one block.
  Attention attn;
  [[no_unique_address]] std::conditional_t<rows_in, Nothing, BranchScales<1>> rows;

  template <class F, class... P>
  static constexpr void visit(const Path& at, F& f, P&... p) {
    stformer::visit(at, f, p.attn...);
    if constexpr (!rows_in) stformer::visit(at, f, p.rows...);
  }

  // s_a from max|x|, the attention's input (a stream's values, or the norm's before it)
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
  template <class R>  // either form's Ranges (calibration keeps the stream form's)
  void from_float(const Float& f, const R& r, float s_in, float s_out) {
    const float s_a = quant::scale_for(r.input);
    attn = Attention::quantize(f, r.attn, s_a, s_a, s_out);
    if constexpr (!rows_in) rows.set(0, s_a, s_in);
  }

  // A step of a quantized Sequential. A stream in: in place, h ← MHA(a_q, a_q) (h zeroed, then
  // the attention added into it); rows in: run, y ← MHA(x, x). Or into a stream (a residual
  // body's last step, run_add): h = sat(h + MHA(a_q, a_q)). Scratch: the int8 rows a_q (a stream
  // in) and the attention's keys, values and tile of T rows, as many as Room holds.
  static constexpr bool in_place = !rows_in, adds_from_stream = !rows_in;
  // Decoding (DecodeOf): a step's keys and values into its part of the cache (int8), its queries
  // over the positions so far (QMultiHeadAttention::decode); a prompt's pass stores its keys.
  static constexpr bool decodes = true;
  static constexpr size_t cache_bytes(size_t batch, size_t length) { return Attention::cache_bytes(batch, length); }
  template <size_t B, size_t N>
  using Input = TensorOf<In, B, N, D>;
  template <size_t B, size_t N>
  using Output = TensorOf<std::int16_t, B, N, D>;
  template <size_t B, size_t N, size_t Tile>
  struct Work {
    static constexpr size_t T = Tile;
    [[no_unique_address]] std::conditional_t<rows_in, Nothing, TensorOf<std::int8_t, B, N, D>> a;
    typename Attention::template Work<B, N, N, T> w;
  };
  template <size_t B, size_t N, size_t Room = 0>
  using Scratch = typename TiledIn<Work, B, N, Room, qtile_least(B * N)>::type;
  template <size_t B, size_t N, size_t T, class Pool = Serial>
    requires(!rows_in)
  void forward_in_place(Input<B, N>& h, Work<B, N, T>& w, const Mask<B, N>& mask, Pool&& pool = Pool{}) const {
    std::int8_t* a = rows_of(h, w);
    std::fill(h.begin(), h.end(), std::int16_t(0));
    add(a, h, w, mask, pool);
  }
  template <size_t B, size_t N, size_t T, class Pool = Serial>
    requires rows_in
  void run(const Input<B, N>& x, Output<B, N>& y, Work<B, N, T>& w, const Mask<B, N>& mask, Pool&& pool = Pool{}) const {
    std::fill(y.begin(), y.end(), std::int16_t(0));
    add(rows_of(x, w), y, w, mask, pool);
  }
  template <size_t B, size_t N, size_t T, class Pool = Serial>
  void run_add(const Input<B, N>& x, Output<B, N>& h, Work<B, N, T>& w, const Mask<B, N>& mask, Pool&& pool = Pool{}) const {
    add(rows_of(x, w), h, w, mask, pool);
  }

 private:
  // The int8 rows of x, which the attention overwrites with its queries and heads: w.a ← the
  // stream x requantized, or x itself: the rows of the norm before it in the chain, in the
  // chain's arena, read by this step alone (this form follows a norm only: quantized/rows.hpp).
  template <size_t B, size_t N, class W>
  std::int8_t* rows_of(const Input<B, N>& x, W& w) const {
    if constexpr (rows_in) {
      return const_cast<std::int8_t*>(x.data());
    } else {
      rows.requantize(0, x.data(), w.a.data(), B * N * D);
      return w.a.data();
    }
  }
  // h ← sat(h + MHA(a, a))
  template <size_t B, size_t N, class W, class Pool>
  void add(std::int8_t* a, Output<B, N>& h, W& w, const Mask<B, N>& mask, Pool& pool) const {
    if (mask.decoding_step()) return attn.template decode<B, W::T>(a, h.data(), w.w.tile.data(), *mask.decoding);
    attn.template prepare<B, N, N, W::T>(a, w.w, pool);
    if (mask.decoding) attn.template store<B, N, W::T>(w.w, *mask.decoding);
    attn.template forward_add<B, N, N, W::T>(a, h.data(), w.w, mask, pool);
  }
};
template <size_t D, size_t H, ScoreScale S, Projections Pr>
struct Int8Of<SelfAttention<D, H, S, Pr>> {
  using type = QSelfAttention<D, H, S, Pr>;
};
template <size_t D, size_t H, ScoreScale S, Projections Pr>
struct RowsReader<QSelfAttention<D, H, S, Pr>> {
  using type = QSelfAttention<D, H, S, Pr, std::int8_t>;
};

}  // namespace stformer
