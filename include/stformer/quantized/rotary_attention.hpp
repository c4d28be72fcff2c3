// QRotaryAttention<D, H, KVH, L, Rot, Θ, Bi, In>: RotaryAttention (blocks/rotary_attention.hpp)
// in integers, its output added into an int16 stream (y = s_y·y_q):
//   a_q: int8 rows at s_a (In = int8: the norm before it writes them, quantized/rows.hpp;
//        In = int16: the stream requantized, BranchScales<1>)
//   q16 = clamp(apply(a_q Wqᵀ + b_q, M_c), int16)   at s_q/128 (wq's output scale), k16 at s_k/128
//   v_q = QLinear(a_q)                               int8 at s_v (wv)
//   each head's pair (a, b) at position p, c = C[p, i], s = S[p, i] (Q14: 16384 is 1):
//     a' = clamp(apply(a·c − b·s, T), int8),  b' = clamp(apply(a·s + b·c, T), int8)
//     T = (s_q/128) / (2^14·s_q) (q_turn; k_turn for the keys)        |a·c − b·s| < 2^31
//   head h, query i, key j ≤ i (causal, and the pass's key mask), kv head g = h / (H/KVH):
//     x_ij = q'_ih · k'_jg (int32);  e_ij, Σ_j e_ij by kernels::softmax_u8 (E: exponent)
//     o_ih = clamp(apply(Σ_j e_ij v_jg, V / Σ_j e_ij), int8)   the heads at s_o; V = s_v / s_o
//   h += QLinear(concat_h o_h)                                  wo, to the stream's scale
// C, S = round(16384·cos(p·Θ^(−2i/Dh))), round(16384·sin(…)): made by the compiler, in double
// (detail::cx below), one table per L, Dh and Θ, read-only data: no float at run time. q and k
// are calibrated after their turn, by the largest norm of a pair ‖(a, b)‖, which a turn keeps:
// a position calibration never reached cannot overflow them.
// Σ_j e_ij v_jg as QMultiHeadAttention takes it: the rows e − 128 (int8) times vᵀ, 128·Σ_j v_jg
// as the bias; a masked key has e = 0.
// Decoding (DecodeOf): the turned keys and the values cached in int8, a step's query over them
// by kernels::attend_cached_q8: the integers of the causal pass's row.
// Tensors: wq, wk, wv, wo (QLinear), q_scale, k_scale, v_scale, heads_scale (F32 [1]), q_turn,
// k_turn, exponent (E), values (V) (Requant<1>); a stream in: branch_scale, branch_requant,
// stream_scale.
#pragma once

#include "../core/config.hpp"

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "../blocks/rotary_attention.hpp"
#include "linear.hpp"
#include "rows.hpp"

namespace stformer::inline STFORMER_ABI {

namespace detail::cx {

// Double-precision log, exp, sin and cos for constant evaluation (std's are not constexpr in
// C++20), within a few units in the last place: enough for tables rounded to 14 bits.
constexpr double ln2 = 0.6931471805599453094;
// ln x, x > 0: x = m·2^k, m in [1, 2); ln m = 2·atanh((m − 1)/(m + 1)) by its series
constexpr double log(double x) {
  int k = 0;
  while (x >= 2.0) x /= 2.0, ++k;
  while (x < 1.0) x *= 2.0, --k;
  const double z = (x - 1.0) / (x + 1.0), z2 = z * z;
  double term = z, sum = 0.0;
  for (int n = 1; n < 60; n += 2) sum += term / n, term *= z2;
  return 2.0 * sum + k * ln2;
}
// e^y: y = n·ln 2 + r, |r| ≤ ln 2 / 2, Taylor's series of e^r
constexpr double exp(double y) {
  const double nf = y / ln2;
  const long n = long(nf < 0 ? nf - 0.5 : nf + 0.5);
  const double r = y - double(n) * ln2;
  double term = 1.0, sum = 1.0;
  for (int i = 1; i < 30; ++i) term *= r / i, sum += term;
  for (long i = 0; i < n; ++i) sum *= 2.0;
  for (long i = 0; i > n; --i) sum /= 2.0;
  return sum;
}
// sin and cos of a ≥ 0: a = k·π/2 + r (π/2 in two parts, fdlibm's, so that k·π/2's first part is
// exact), |r| ≤ π/4, Taylor's series of r, the quadrant k mod 4
constexpr double pio2_hi = 1.57079632673412561417e+00, pio2_lo = 6.07710050650619224932e-11;
struct SinCos {
  double sin, cos;
};
constexpr SinCos sincos(double a) {
  const long k = long(a / (pio2_hi + pio2_lo) + 0.5);
  const double r = (a - double(k) * pio2_hi) - double(k) * pio2_lo, r2 = r * r;
  double s = r, c = 1.0, ts = r, tc = 1.0;
  for (int i = 1; i < 14; ++i) {
    ts *= -r2 / double((2 * i) * (2 * i + 1)), tc *= -r2 / double((2 * i - 1) * (2 * i));
    s += ts, c += tc;
  }
  switch (k % 4) {
    case 0: return {s, c};
    case 1: return {c, -s};
    case 2: return {-s, -c};
    default: return {-c, s};
  }
}
// round(16384·v), half away from zero
constexpr std::int16_t q14(double v) { return std::int16_t(v >= 0 ? long(v * 16384.0 + 0.5) : -long(-v * 16384.0 + 0.5)); }

}  // namespace detail::cx

// The turns of positions 0 .. L − 1 in Q14: C and S [L, Dh/2].
template <size_t L, size_t Dh, Theta T>
struct QRotaryTable {
  std::int16_t cos[L][Dh / 2], sin[L][Dh / 2];
};
template <size_t L, size_t Dh, Theta T>
inline constexpr QRotaryTable<L, Dh, T> q_rotary_table = [] {
  QRotaryTable<L, Dh, T> t{};
  const double ln_base = detail::cx::log(double(std::bit_cast<float>(std::uint32_t(T))));
  for (size_t i = 0; i < Dh / 2; ++i) {
    const double w = detail::cx::exp(-double(2 * i) / double(Dh) * ln_base);
    for (size_t p = 0; p < L; ++p) {
      const auto sc = detail::cx::sincos(double(p) * w);
      t.cos[p][i] = detail::cx::q14(sc.cos), t.sin[p][i] = detail::cx::q14(sc.sin);
    }
  }
  return t;
}();

template <size_t D, size_t H, size_t KVH, size_t L, Rotation Rot = Rotation::pairs, Theta Base = theta(10000.0f), Bias Bi = Bias::no,
          class In = std::int16_t>
struct QRotaryAttention {
  static_assert(std::is_same_v<In, std::int16_t> || std::is_same_v<In, std::int8_t>, "QRotaryAttention: an int16 stream or int8 rows in");
  using Float = RotaryAttention<D, H, KVH, L, Rot, Base, Bi>;
  static constexpr size_t Dh = Float::Dh, Dk = Float::Dk, group = Float::group, half = Dh / 2;
  static constexpr bool rows_in = std::is_same_v<In, std::int8_t>;

  QLinear<D, D> wq;
  QLinear<D, Dk> wk, wv;
  QLinear<D, D> wo;
  Scale q_scale, k_scale, v_scale, heads_scale;
  Requant<1> q_turn, k_turn, exponent, values;
  [[no_unique_address]] std::conditional_t<rows_in, Nothing, BranchScales<1>> rows;

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
    stformer::visit(at / "q_turn", f, p.q_turn...);
    stformer::visit(at / "k_turn", f, p.k_turn...);
    stformer::visit(at / "exponent", f, p.exponent...);
    stformer::visit(at / "values", f, p.values...);
    if constexpr (!rows_in) stformer::visit(at, f, p.rows...);
  }
  // T = s_in / (2^14·s_out) of each turn (s_in: the projection's output scale), E = min(s_q·s_k·
  // s·log2(e)·256, 8192) (QMultiHeadAttention's), V = s_v / s_o
  template <class B, class F>
  static void requants(B& b, F&& f) {
    f("q_turn", b.q_turn, [&](size_t) { return double(b.wq.out_scale(0)) / (16384.0 * b.q_scale(0)); });
    f("k_turn", b.k_turn, [&](size_t) { return double(b.wk.out_scale(0)) / (16384.0 * b.k_scale(0)); });
    f("exponent", b.exponent,
      [&](size_t) { return std::min(double(b.q_scale(0)) * b.k_scale(0) * Float::scale * 1.4426950408889634 * 256.0, 8192.0); });
    f("values", b.values, [&](size_t) { return double(b.v_scale(0)) / b.heads_scale(0); });
  }

  // The ranges over calibration data: the input's max|x|, q's and k's largest pair norm after
  // their turn (the float record keeps them turned), v's and the heads' max|·|.
  static constexpr bool same_scale = false;
  struct Ranges {
    float input = 0, q = 0, k = 0, v = 0, heads = 0;
    template <class A, class X, class Y>
    void observe(const Float&, const A& acts, const X& x, const Y&) {
      input = std::max(input, quant::max_abs(x));
      q = std::max(q, largest_pair(acts.q.data(), acts.q.size())), k = std::max(k, largest_pair(acts.k.data(), acts.k.size()));
      v = std::max(v, quant::max_abs(acts.v)), heads = std::max(heads, quant::max_abs(acts.heads));
    }
  };
  // max ‖(a, b)‖ over the pairs of rows of heads (n floats, whole heads of Dh)
  static float largest_pair(const float* x, size_t n) {
    constexpr size_t step = Rot == Rotation::pairs ? 2 : 1, other = Rot == Rotation::pairs ? 1 : half;
    float m = 0;
    for (size_t h0 = 0; h0 < n; h0 += Dh)
      for (size_t i = 0; i < half; ++i) {
        const float a = x[h0 + i * step], b = x[h0 + i * step + other];
        m = std::max(m, std::sqrt(a * a + b * b));
      }
    return m;
  }
  template <class R>  // either form's Ranges
  void from_float(const Float& f, const R& r, float s_in, float s_out) {
    const float s_a = quant::scale_for(r.input);
    q_scale(0) = quant::scale_for(r.q), k_scale(0) = quant::scale_for(r.k);
    v_scale(0) = quant::scale_for(r.v), heads_scale(0) = quant::scale_for(r.heads);
    wq.from_float(f.wq, s_a, q_scale(0) / 128), wk.from_float(f.wk, s_a, k_scale(0) / 128);  // q16, k16: before their turn
    wv.from_float(f.wv, s_a, v_scale(0)), wo.from_float(f.wo, heads_scale(0), s_out);
    set_requants(*this);
    if constexpr (!rows_in) rows.set(0, s_a, s_in);
  }

  // A step of a quantized Sequential, as QSelfAttention: a stream in, in place (h ← the
  // attention of h); rows in, run (y ← the attention of x); or into a stream, run_add
  // (h = sat(h + the attention of x)). Scratch: the int8 rows a (a stream in), the turned keys
  // k [B, N, Dk], vᵀ [B, Dk, N], 128·Σ_j v vsum [B, Dk], and a tile of int32: T queries' scores
  // [T, N] and their A·V [T, Dh], or T rows of a projection [T, D]; p [T, N]: e − 128.
  static constexpr bool in_place = !rows_in, adds_from_stream = !rows_in;
  template <size_t B, size_t N>
  using Input = TensorOf<In, B, N, D>;
  template <size_t B, size_t N>
  using Output = TensorOf<std::int16_t, B, N, D>;
  template <size_t B, size_t N, size_t Tile>
  struct Work {
    static_assert(N <= L, "QRotaryAttention: more rows than the positions of its table (L)");
    static constexpr size_t T = Tile;
    [[no_unique_address]] std::conditional_t<rows_in, Nothing, TensorOf<std::int8_t, B, N, D>> a;
    TensorOf<std::int8_t, B, N, Dk> k;
    TensorOf<std::int8_t, B, Dk, N> v;
    TensorOf<std::int32_t, B, Dk> vsum;
    TensorOf<std::int32_t, (T * (N + Dh) > T * D ? T * (N + Dh) : T * D)> tile;
    TensorOf<std::int8_t, T, N> p;
  };
  template <size_t B, size_t N, size_t Room = 0>
  using Scratch = typename TiledIn<Work, B, N, Room, qtile_least(B * N)>::type;
  template <size_t B, size_t N, size_t T, class Pool = Serial>
    requires(!rows_in)
  void forward_in_place(Input<B, N>& h, Work<B, N, T>& w, const Mask<B, N>& mask, Pool&& = Pool{}) const {
    std::int8_t* a = rows_of(h, w);
    std::fill(h.begin(), h.end(), std::int16_t(0));
    add<B, N>(a, h.data(), w, mask);
  }
  template <size_t B, size_t N, size_t T, class Pool = Serial>
    requires rows_in
  void run(const Input<B, N>& x, Output<B, N>& y, Work<B, N, T>& w, const Mask<B, N>& mask, Pool&& = Pool{}) const {
    std::fill(y.begin(), y.end(), std::int16_t(0));
    add<B, N>(rows_of(x, w), y.data(), w, mask);
  }
  template <size_t B, size_t N, size_t T, class Pool = Serial>
  void run_add(const Input<B, N>& x, Output<B, N>& h, Work<B, N, T>& w, const Mask<B, N>& mask, Pool&& = Pool{}) const {
    add<B, N>(rows_of(x, w), h.data(), w, mask);
  }
  // The int8 rows of x, which the attention overwrites with its queries and heads: w.a ← the
  // stream x requantized, or x itself (the norm's rows before it in a chain, read by it alone).
  template <size_t B, size_t N, class W>
  std::int8_t* rows_of(const Input<B, N>& x, W& w) const {
    if constexpr (rows_in) {
      return const_cast<std::int8_t*>(x.data());
    } else {
      rows.requantize(0, x.data(), w.a.data(), B * N * D);
      return w.a.data();
    }
  }

  // h [B, N, D] += the attention of the int8 rows a [B, N, D] (rows from position 0), which
  // become its queries, then its heads.
  template <size_t B, size_t N, size_t T>
  void add(std::int8_t* a, std::int16_t* h, Work<B, N, T>& w, const Mask<B, N>& mask) const {
    if (mask.decoding_step()) return decode<B, T>(a, h, w.tile.data(), *mask.decoding);
    std::int32_t* tile = w.tile.data();
    for_tiles<B * N, T>([&]<size_t R>(size_t i) {
      // keys: turned into rows of w.k; values: into w.v's columns, through the stack Rs rows at a
      // time (as QMultiHeadAttention::prepare)
      project16<R>(wk, a + i * D, tile);
      turn<R, Dk>(tile, i, N, 0, k_turn[0], w.k.data() + i * Dk);
      constexpr size_t Rs = STFORMER_QTILE_ROWS < 8 ? 4 : 8;
      for_tiles<R, Rs>([&]<size_t RS>(size_t is) {
        std::int8_t v[RS * Dk];
        wv.template apply<RS>(a + (i + is) * D, tile, v);
        for (size_t r = 0; r < RS; ++r) {
          const size_t b = (i + is + r) / N, j = (i + is + r) % N;
          for (size_t c = 0; c < Dk; ++c) w.v(b, c, j) = v[r * Dk + c];
        }
      });
    });
    for (size_t b = 0; b < B; ++b)
      for (size_t c = 0; c < Dk; ++c) {
        std::int32_t sum = 0;
        for (size_t j = 0; j < N; ++j) sum += w.v(b, c, j);
        w.vsum(b, c) = 128 * sum;
      }
    if (mask.decoding) store<B, N>(w.k.data(), w.v.data(), *mask.decoding);
    // queries over a, in place (a tile's rows are read whole before they are written)
    for_tiles<B * N, T>([&]<size_t R>(size_t i) {
      project16<R>(wq, a + i * D, tile);
      turn<R, D>(tile, i, N, 0, q_turn[0], a + i * D);
    });
    attend<B, N, T>(a, w, mask);
    for_tiles<B * N, T>([&]<size_t R>(size_t i) { wo.template add_to<R>(a + i * D, tile, h + i * D); });
  }

  // Decoding (DecodeOf, stformer/compose/decode.hpp): its part of the cache, the turned keys and
  // the values in int8, transposed: kᵀ and vᵀ [B, Dk, Decoding::keys(L)].
  static constexpr bool decodes = true;
  static constexpr size_t positions = L;  // the rows of its table
  static constexpr size_t cache_bytes(size_t batch, size_t length) { return Decoding::bytes<std::int8_t>(batch, Dk, length); }
  // A prompt's pass (N rows from position 0): its turned keys k [B, N, Dk] and vᵀ [B, Dk, N] into
  // the cache.
  template <size_t B, size_t N>
  static void store(const std::int8_t* k, const std::int8_t* vt, Decoding& dec) {
    const auto kv = dec.take<std::int8_t>(B, Dk, N);
    for (size_t b = 0; b < B; ++b) kv.put_prompt(b, k + b * N * Dk, vt + b * Dk * N, N);
  }
  // A decoding step: a [B, D], one row per sequence at position t = dec.position; its turned key
  // and its value into column t of the cache, its turned queries over columns 0 .. t
  // (kernels::attend_cached_q8), h [B, D] += wo of the heads. The integers of row t of the
  // causal pass over rows 0 .. t. tile: a row of a projection (int32 [D]).
  template <size_t B, size_t T>
  void decode(std::int8_t* a, std::int16_t* h, std::int32_t* tile, Decoding& dec) const {
    const size_t t = dec.position;
    const auto kv = dec.take<std::int8_t>(B, Dk, 1);
    std::int8_t row[Dk];
    for (size_t b = 0; b < B; ++b) {
      std::int8_t* x = a + b * D;
      project16<1>(wk, x, tile);
      turn<1, Dk>(tile, 0, 1, t, k_turn[0], row);
      kv.put_key(b, t, row);
      wv.template apply<1>(x, tile, row);
      kv.put_value(b, t, row);
      project16<1>(wq, x, tile);
      turn<1, D>(tile, 0, 1, t, q_turn[0], x);
      for (size_t hd = 0; hd < H; ++hd) {
        const size_t g = hd / group;
        kernels::attend_cached_q8<Dh>(x + hd * Dh, kv.keys(b, g * Dh), kv.values(b, g * Dh), kv.columns, t + 1, exponent[0], values[0],
                                      dec.score_row<std::int32_t>(), dec.numerators(), x + hd * Dh);
      }
    }
    for_tiles<B, T>([&]<size_t R>(size_t i) { wo.template add_to<R>(a + i * D, tile, h + i * D); });
  }

  // acc [R, Out] = clamp(apply(x Wᵀ + b, M_c), int16), in int32
  template <size_t R, size_t Out>
  static void project16(const QLinear<D, Out>& f, const std::int8_t* x, std::int32_t* acc) {
    f.template accumulate<R>(x, acc);
    kernels::requantize(acc, R, Out, f.requant.multiplier.data(), f.requant.shift.data(), 0, INT16_MIN, INT16_MAX, acc);
  }
  // y [R, W] (int8) ← acc's rows turned (W/Dh heads a row); row r is row r0 + r of a pass of n
  // rows a sequence from position p0: at position p0 + (r0 + r) mod n
  template <size_t R, size_t W>
  static void turn(const std::int32_t* acc, size_t r0, size_t n, size_t p0, kernels::Multiplier m, std::int8_t* y) {
    constexpr size_t step = Rot == Rotation::pairs ? 2 : 1, other = Rot == Rotation::pairs ? 1 : half;
    const auto& t = q_rotary_table<L, Dh, Base>;
    for (size_t r = 0; r < R; ++r) {
      const size_t p = p0 + (r0 + r) % n;
      for (size_t hd = 0; hd < W / Dh; ++hd) {
        const std::int32_t* x = acc + r * W + hd * Dh;
        std::int8_t* o = y + r * W + hd * Dh;
        for (size_t i = 0; i < half; ++i) {
          const std::int32_t a = x[i * step], b = x[i * step + other], c = t.cos[p][i], s = t.sin[p][i];
          o[i * step] = std::int8_t(kernels::clamp_i32(kernels::apply(a * c - b * s, m), -128, 127));
          o[i * step + other] = std::int8_t(kernels::clamp_i32(kernels::apply(a * s + b * c, m), -128, 127));
        }
      }
    }
  }
  // a [B, N, D]: the turned queries, then concat_h(o_h) (a head's columns once its scores are taken)
  template <size_t B, size_t N, size_t T>
  void attend(std::int8_t* a, Work<B, N, T>& w, const Mask<B, N>& mask) const {
    std::int32_t *s = w.tile.data(), *o = w.tile.data() + T * N;
    for (size_t b = 0; b < B; ++b)
      for (size_t hd = 0; hd < H; ++hd) {
        const size_t g = hd / group;
        for_tiles<N, T>([&]<size_t R>(size_t i0) {
          const size_t at = (b * N + i0) * D + hd * Dh;
          kernels::qmatmul_nt<R, N, Dh>(a + at, D, w.k.data() + b * N * Dk + g * Dh, Dk, s, N);
          for (size_t r = 0; r < R; ++r) {
            std::int32_t* x = s + r * N;
            for (size_t j = 0; j < N; ++j)
              if (j > i0 + r || (mask.keys && !(*mask.keys)(b, j))) x[j] = INT32_MIN;
            x[0] = kernels::softmax_u8<N>(x, exponent[0], w.p.data() + r * N);  // row r's scores are done with: keep Σ e
          }
          kernels::qmatmul_nt<R, Dh, N>(w.p.data(), N, w.v.data() + (b * Dk + g * Dh) * N, N, o, Dh, w.vsum.data() + b * Dk + g * Dh);
          for (size_t r = 0; r < R; ++r)
            kernels::requantize(o + r * Dh, Dh, kernels::divide(values[0], std::uint32_t(s[r * N])), 0, -128, 127, a + at + r * D);
        });
      }
  }
};

template <size_t D, size_t H, size_t KVH, size_t L, Rotation Rot, Theta Base, Bias Bi>
struct Int8Of<RotaryAttention<D, H, KVH, L, Rot, Base, Bi>> {
  using type = QRotaryAttention<D, H, KVH, L, Rot, Base, Bi>;
};
template <size_t D, size_t H, size_t KVH, size_t L, Rotation Rot, Theta Base, Bias Bi>
struct RowsReader<QRotaryAttention<D, H, KVH, L, Rot, Base, Bi>> {
  using type = QRotaryAttention<D, H, KVH, L, Rot, Base, Bi, std::int8_t>;
};

}  // namespace stformer
