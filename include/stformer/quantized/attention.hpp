// QMultiHeadAttention<Dq, Dkv, D, H, S, Row>: MultiHeadAttention in integers, rows of Row (int8,
// or int16 where int8 costs accuracy: the set model's MABs) in, its output added into an int16
// residual stream (the blocks keep one; forward_add):
//   q_q, k_q, v_q = QLinear(xq_q), QLinear(xkv_q), QLinear(xkv_q)      at s_q, s_k, s_v: q int8,
//                                                                       k and v Row
//   head h, query i, key j:  x_ij = q_q,ih · k_q,jh                      int32 (scale s_q·s_k)
//     e_ij = round(255 · 2^(−u_ij / 256)),  u_ij = round((max_j x_ij − x_ij)·E)
//       E ≈ s_q·s_k·s·log2(e)·256: e_ij/255 is e^(s·(score_ij − max)), the softmax's
//       numerator, in 8 bits (kernels::softmax_u8)
//     o_ih = clamp(apply(Σ_j e_ij v_q,jh, V / Σ_j e_ij), Row)         heads at s_o; V ≈ s_v / s_o
//   residual += QLinear(concat_h o_h)                                    wo, to the residual's scale
// Σ_j e_ij v_q,jh is a product of the rows e − 128 (int8) and v_h, with 128·Σ_j v_q,jh as its
// bias: int8 · int8 (qmatmul_nt, the backend's kernel) or, with int16 rows, int8 · int16
// (qmatmul_nn, a plain loop), as is q·k. Int16 scales keep 2× headroom (quant::int16_scale).
// Masks as in float: a masked key gets e = 0, and a query that sees no key o = 0.
// Tensors: wq, wk, wv, wo (QLinear), q_scale, k_scale, v_scale, heads_scale (F32 [1]),
// exponent (E) and values (V) (Requant<1>).
#pragma once

#include "../core/config.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "../blocks/attention.hpp"
#include "../core/precision.hpp"
#include "linear.hpp"

namespace stformer::inline STFORMER_ABI {

template <size_t Dq, size_t Dkv, size_t D, size_t H, ScoreScale S = ScoreScale::head_width, class Row = std::int8_t,
          Projections Pr = Projections::separate>
struct QMultiHeadAttention {
  static_assert(std::is_same_v<Row, std::int8_t> || std::is_same_v<Row, std::int16_t>, "QMultiHeadAttention: int8 or int16 rows");
  using Float = MultiHeadAttention<Dq, Dkv, D, H, S, Pr>;
  static constexpr size_t Dh = D / H;
  static constexpr bool wide = std::is_same_v<Row, std::int16_t>;
  static constexpr int row_levels = wide ? 32767 : 127;
  static float row_scale(float max_abs) { return wide ? quant::int16_scale(max_abs) : quant::scale_for(max_abs); }

  QLinear<Dq, D> wq;
  QLinear<Dkv, D> wk, wv;
  QLinear<D, D> wo;
  Scale q_scale, k_scale, v_scale, heads_scale;
  Requant<1> exponent, values;

  template <class F, class... P>
  static constexpr void visit(const Path& at, F& f, P&... p) {
    stformer::visit(at / "wq", f, p.wq...);
    stformer::visit(at / "wk", f, p.wk...);
    stformer::visit(at / "wv", f, p.wv...);
    stformer::visit(at / "wo", f, p.wo...);
    f(at / "q_scale", Init{Init::zeros}, p.q_scale...);
    f(at / "k_scale", Init{Init::zeros}, p.k_scale...);
    f(at / "v_scale", Init{Init::zeros}, p.v_scale...);
    f(at / "heads_scale", Init{Init::zeros}, p.heads_scale...);
    stformer::visit(at / "exponent", f, p.exponent...);
    stformer::visit(at / "values", f, p.values...);
  }

  // The ranges (max |·|) of the float block f's activations over calibration data. A folded
  // attention (few queries: Float::folds) never forms k and v: they are projected here.
  struct Ranges {
    float q = 0, k = 0, v = 0, heads = 0;
    template <class A>
    void observe(const Float& f, const A& acts) {
      q = std::max(q, quant::max_abs(acts.q.out)), heads = std::max(heads, quant::max_abs(acts.heads));
      if constexpr (requires { acts.k.out; }) {
        k = std::max(k, quant::max_abs(acts.k.out)), v = std::max(v, quant::max_abs(acts.v.out));
      } else {
        const auto& x = *acts.xkv;
        for (size_t r = 0; r < x.size() / Dkv; ++r)
          k = std::max(k, quant::max_abs_linear<Dkv, D>(f.k_proj(), x.data() + r * Dkv)),
          v = std::max(v, quant::max_abs_linear<Dkv, D>(f.v_proj(), x.data() + r * Dkv));
      }
    }
  };

  // Inputs at scales s_xq, s_xkv, the output at s_out (host side).
  void set_multipliers(float s_xq, float s_xkv, float s_out) {
    wq.set_multipliers(s_xq, q_scale(0));
    wk.set_multipliers(s_xkv, k_scale(0));
    wv.set_multipliers(s_xkv, v_scale(0));
    wo.set_multipliers(heads_scale(0), s_out);
    set_requants(*this);
  }
  // E = min(s_q·s_k·s·log2(e)·256, 8192), V = s_v / s_o (the projections' own: QLinear's)
  template <class B, class F>
  static void requants(B& b, F&& f) {
    // a score unit past 2^13/256 = 32 octaves already gives e = 0: a larger E changes nothing
    f("exponent", b.exponent,
      [&](size_t) { return std::min(double(b.q_scale(0)) * b.k_scale(0) * Float::score_scale * 1.4426950408889634 * 256.0, 8192.0); });
    f("values", b.values, [&](size_t) { return double(b.v_scale(0)) / b.heads_scale(0); });
  }

  static QMultiHeadAttention quantize(const Float& f, const Ranges& r, float s_xq, float s_xkv, float s_out) {
    QMultiHeadAttention q;
    q.q_scale(0) = quant::scale_for(r.q), q.k_scale(0) = row_scale(r.k);
    q.v_scale(0) = row_scale(r.v), q.heads_scale(0) = row_scale(r.heads);
    q.wq = QLinear<Dq, D>::quantize(f.q_proj(), s_xq, q.q_scale(0));
    q.wk = QLinear<Dkv, D>::quantize(f.k_proj(), s_xkv, q.k_scale(0));
    q.wv = QLinear<Dkv, D>::quantize(f.v_proj(), s_xkv, q.v_scale(0));
    q.wo = QLinear<D, D>::quantize(f.wo, q.heads_scale(0), s_out);
    q.set_multipliers(s_xq, s_xkv, s_out);
    return q;
  }

  // The buffers besides the queries' rows: the keys and values, 128·Σ_j v of each column vsum
  // [B, D], and a tile of int32: the scores of T queries of one head [T, Nk] and their A·V
  // [T, Dh], or T rows of a projection [T, D]; p [T, Nk]: the scores' e − 128 (int8). With int8
  // rows k [B, Nk, D] and every head's v_hᵀ in v [B, D, Nk], for int8 products (qmatmul_nt);
  // with int16 rows kᵀ in k [B, D, Nk] and v [B, Nk, D], for plain loops along their rows
  // (qmatmul_nn), and q [B, Nq, D] (int8: the heads take the rows' place).
  template <size_t Nq, size_t Nk>
  static constexpr bool folds = false;  // the float attention's folding of few queries: none here
  template <size_t B, size_t Nq, size_t Nk, size_t T>
  struct Work {
    static_assert(!wide || Nk <= 256, "QMultiHeadAttention: with int16 rows, at most 256 keys (A·V's int32 sums)");
    static constexpr size_t rows = T;  // rows per tile of the projections
    [[no_unique_address]] std::conditional_t<wide, TensorOf<std::int8_t, B, Nq, D>, Nothing> q;
    TensorOf<Row, B, wide ? D : Nk, wide ? Nk : D> k;
    TensorOf<Row, B, wide ? Nk : D, wide ? D : Nk> v;
    TensorOf<std::int32_t, B, D> vsum;
    TensorOf<std::int32_t, (T * (Nk + Dh) > T * D ? T * (Nk + Dh) : T * D)> tile;
    TensorOf<std::int8_t, T, Nk> p;
  };

  // k, v of xkv [B, Nk, Dkv] (Row, or an int16 stream: a decoder's memory) into w, T rows at a
  // time (the one to transpose through `rows`).
  // (pool: the float form's; in integers the pass runs on the calling thread.)
  template <size_t B, size_t Nq, size_t Nk, size_t T, class X, class Pool = Serial>
  void prepare(const X* xkv, Work<B, Nq, Nk, T>& w, Pool&& = Pool{}) const {
    for_tiles<B * Nk, T>([&]<size_t R>(size_t i) {
      // rows i … i + R − 1 of the projection f into t [B, D, Nk], through the stack Rs rows at a
      // time: 8, or 4 where the integer tiles may be smaller (STFORMER_QTILE_ROWS: a
      // microcontroller's, whose stack is small)
      constexpr size_t Rs = STFORMER_QTILE_ROWS < 8 ? 4 : 8;
      const auto transposed = [&](const QLinear<Dkv, D>& f, Row* t) {
        for_tiles<R, Rs>([&]<size_t RS>(size_t is) {
          Row rows[RS * D];
          f.template apply<RS>(xkv + (i + is) * Dkv, w.tile.data(), rows);
          for (size_t r = 0; r < RS; ++r) {
            const size_t b = (i + is + r) / Nk, j = (i + is + r) % Nk;
            for (size_t c = 0; c < D; ++c) t[(b * D + c) * Nk + j] = rows[r * D + c];
          }
        });
      };
      if constexpr (wide) {
        transposed(wk, w.k.data());
        wv.template apply<R>(xkv + i * Dkv, w.tile.data(), w.v.data() + i * D);
      } else {
        wk.template apply<R>(xkv + i * Dkv, w.tile.data(), w.k.data() + i * D);
        transposed(wv, w.v.data());
      }
    });
    for (size_t b = 0; b < B; ++b)
      for (size_t c = 0; c < D; ++c) {
        std::int32_t sum = 0;
        for (size_t j = 0; j < Nk; ++j) sum += wide ? w.v(b, j, c) : w.v(b, c, j);
        w.vsum(b, c) = 128 * sum;
      }
  }

  // heads [B, Nq, D] ← concat_h(o_h) of q [B, Nq, D], the projected queries (int8; q = heads
  // when Row is int8: in place, a head's columns once its scores are taken).
  template <size_t B, size_t Nq, size_t Nk, size_t T>
  void attend(const std::int8_t* q, Row* heads, Work<B, Nq, Nk, T>& w, const Mask<B, Nk>& mask) const {
    std::int32_t *s = w.tile.data(), *o = w.tile.data() + T * Nk;
    for (size_t b = 0; b < B; ++b)
      for (size_t h = 0; h < H; ++h)
        for_tiles<Nq, T>([&]<size_t R>(size_t i0) {
          const size_t at = (b * Nq + i0) * D + h * Dh;
          if constexpr (wide)
            kernels::qmatmul_nn<R, Nk, Dh>(q + at, D, w.k.data() + (b * D + h * Dh) * Nk, Nk, s, Nk);
          else
            kernels::qmatmul_nt<R, Nk, Dh>(q + at, D, w.k.data() + b * Nk * D + h * Dh, D, s, Nk);
          for (size_t r = 0; r < R; ++r) {
            std::int32_t* x = s + r * Nk;
            if (mask.causal || mask.keys)
              for (size_t j = 0; j < Nk; ++j)
                if (!mask.sees(b, i0 + r, j)) x[j] = INT32_MIN;
            x[0] = kernels::softmax_u8<Nk>(x, exponent[0], w.p.data() + r * Nk);  // row r's scores are done with: keep Σ e
          }
          const std::int32_t* vsum = w.vsum.data() + b * D + h * Dh;
          if constexpr (wide)
            kernels::qmatmul_nn<R, Dh, Nk>(w.p.data(), Nk, w.v.data() + b * Nk * D + h * Dh, D, o, Dh, vsum);
          else
            kernels::qmatmul_nt<R, Dh, Nk>(w.p.data(), Nk, w.v.data() + (b * D + h * Dh) * Nk, Nk, o, Dh, vsum);
          for (size_t r = 0; r < R; ++r) {
            kernels::requantize(o + r * Dh, Dh, kernels::divide(values[0], std::uint32_t(s[r * Nk])), 0, -row_levels - 1, row_levels,
                                heads + at + r * D);
          }
        });
  }

  // residual [B, Nq, D] (int16) += MHA(x, keys of w); x (Dq = D) is overwritten: by the heads
  // (and first by q, with int8 rows). The projections T rows at a time.
  template <size_t B, size_t Nq, size_t Nk, size_t T, class Pool = Serial>
  void forward_add(Row* x, std::int16_t* residual, Work<B, Nq, Nk, T>& w, const Mask<B, Nk>& mask, Pool&& = Pool{}) const {
    static_assert(Dq == D, "QMultiHeadAttention::forward_add: the queries' rows become the heads in place (Dq = D)");
    std::int8_t* q;
    if constexpr (wide)
      q = w.q.data();
    else
      q = x;
    for_tiles<B * Nq, T>([&]<size_t R>(size_t i) { wq.template apply<R>(x + i * D, w.tile.data(), q + i * D); });
    attend<B, Nq, Nk, T>(q, x, w, mask);
    for_tiles<B * Nq, T>([&]<size_t R>(size_t i) { wo.template add_to<R>(x + i * D, w.tile.data(), residual + i * D); });
  }

  // Decoding (DecodeOf, stformer/compose/decode.hpp; self-attention in int8 rows): its part of the
  // cache, the keys and values in int8, transposed: kᵀ and vᵀ [B, D, Decoding::keys(L)].
  static constexpr size_t cache_bytes(size_t batch, size_t length) { return Decoding::bytes<std::int8_t>(batch, D, length); }
  // A prompt's pass (N rows a sequence from position 0, prepared into w): k [B, N, D] and
  // vᵀ [B, D, N] into the cache.
  template <size_t B, size_t N, size_t T>
  static void store(const Work<B, N, N, T>& w, Decoding& dec) {
    static_assert(!wide, "QMultiHeadAttention::store: int8 rows");
    const auto kv = dec.take<std::int8_t>(B, D, N);
    for (size_t b = 0; b < B; ++b) kv.put_prompt(b, w.k.data() + b * N * D, w.v.data() + b * D * N, N);
  }
  // A decoding step: x [B, D] (int8 rows), one row per sequence at position t = dec.position; its
  // key and value into column t of the cache, its queries over columns 0 .. t
  // (kernels::attend_cached_q8), residual [B, D] += wo of the heads. The integers of row t of
  // the causal pass over rows 0 .. t (forward_add). x becomes the queries, then the heads. tile:
  // T rows of a projection (int32 [T, D]).
  template <size_t B, size_t T>
  void decode(std::int8_t* x, std::int16_t* residual, std::int32_t* tile, Decoding& dec) const {
    static_assert(Dq == D && Dkv == D && !wide, "QMultiHeadAttention::decode: self-attention over int8 rows");
    const size_t t = dec.position;
    const auto kv = dec.take<std::int8_t>(B, D, 1);
    std::int8_t row[D];
    for (size_t b = 0; b < B; ++b) {
      wk.template apply<1>(x + b * D, tile, row);
      kv.put_key(b, t, row);
      wv.template apply<1>(x + b * D, tile, row);
      kv.put_value(b, t, row);
    }
    for_tiles<B, T>([&]<size_t R>(size_t i) { wq.template apply<R>(x + i * D, tile, x + i * D); });
    for (size_t b = 0; b < B; ++b)
      for (size_t h = 0; h < H; ++h)
        kernels::attend_cached_q8<Dh>(x + b * D + h * Dh, kv.keys(b, h * Dh), kv.values(b, h * Dh), kv.columns, t + 1, exponent[0], values[0],
                                      dec.score_row<std::int32_t>(), dec.numerators(), x + b * D + h * Dh);
    for_tiles<B, T>([&]<size_t R>(size_t i) { wo.template add_to<R>(x + i * D, tile, residual + i * D); });
  }
  // A cross-attention's memory for decoding (MultiHeadAttention::remember's integers): the rows
  // of xkv [B, M, Dkv] (int8 rows, or the memory's int16 stream) that the key mask keeps, their
  // keys and values in int8 into its part of dec's memory, kᵀ and vᵀ [B, D, Decoding::keys(M)].
  static constexpr size_t memory_bytes(size_t batch, size_t rows) { return Decoding::memory_bytes<std::int8_t>(batch, D, rows); }
  template <size_t B, size_t M, class X>
  void remember(const X* xkv, const KeyMask<B, M>* keys, std::int32_t* tile, Decoding& dec) const {
    static_assert(!wide, "QMultiHeadAttention::remember: int8 keys and values");
    const auto kv = dec.take_memory<std::int8_t>(B, D, M);
    std::int8_t row[D];
    kv.keep_rows(keys, [&](size_t b, size_t j, size_t n) {
      wk.template apply<1>(xkv + (b * M + j) * Dkv, tile, row);
      kv.put_key(b, n, row);
      wv.template apply<1>(xkv + (b * M + j) * Dkv, tile, row);
      kv.put_value(b, n, row);
    });
  }
  // N query rows a sequence, x [B, N, D] (int8), against the memory remembered: residual
  // [B, N, D] += wo of the heads, the integers of forward_add's (a masked key's e = 0 there: left
  // out here; a sequence whose keys are all masked gets heads 0, as there). x becomes q, then the heads.
  template <size_t B, size_t N, size_t M, size_t T>
  void decode_memory(std::int8_t* x, std::int16_t* residual, std::int32_t* tile, Decoding& dec) const {
    static_assert(Dq == D && !wide, "QMultiHeadAttention::decode_memory: int8 query rows of the attention's width");
    const auto kv = dec.take_memory<std::int8_t>(B, D, M);
    for_tiles<B * N, T>([&]<size_t R>(size_t i) { wq.template apply<R>(x + i * D, tile, x + i * D); });
    for (size_t b = 0; b < B; ++b)
      for (size_t i = 0; i < N; ++i)
        for (size_t h = 0; h < H; ++h) {
          std::int8_t* qh = x + (b * N + i) * D + h * Dh;
          if (kv.count[b] == 0)
            std::fill_n(qh, Dh, std::int8_t(0));
          else
            kernels::attend_cached_q8<Dh>(qh, kv.keys(b, h * Dh), kv.values(b, h * Dh), kv.columns, kv.count[b], exponent[0], values[0],
                                          dec.score_row<std::int32_t>(), dec.numerators(), qh);
        }
    for_tiles<B * N, T>([&]<size_t R>(size_t i) { wo.template add_to<R>(x + i * D, tile, residual + i * D); });
  }
};

// In a composite block at precision::int8: int8 rows, or int16 where the block asks for 16 bits.
template <size_t Dq, size_t Dkv, size_t D, size_t H, ScoreScale S, Projections Pr, size_t Bits>
struct IntegerForm<MultiHeadAttention<Dq, Dkv, D, H, S, Pr>, Bits> {
  using type = QMultiHeadAttention<Dq, Dkv, D, H, S, std::conditional_t<Bits == 8, std::int8_t, std::int16_t>, Pr>;
};

}  // namespace stformer
