// RotaryAttention<D, H, KVH, L, Rot, Theta, Bi>: the llama family's causal self-attention of rows
// x [B, N, D] over themselves, as one step: rotary position embeddings on the queries and keys
// (RoPE, Su et al. 2021) and KVH ≤ H heads of keys and values, each read by a group of H/KVH
// query heads (grouped-query attention; KVH = 1: multi-query, KVH = H: multi-head):
//   q = x Wqᵀ [B, N, D],  k = x Wkᵀ, v = x Wvᵀ [B, N, Dk]     (Dh = D/H, Dk = KVH·Dh; + biases when Bi)
//   row n (position p = n, or a decoding step's) of each head of q and k turned, pair by pair,
//   by the angle p·ω_i, ω_i = Θ^(−2i/Dh), i < Dh/2:
//     a' = a·cos − b·sin,  b' = a·sin + b·cos
//   the pairs (a, b): Rotation::pairs (2i, 2i + 1), llama2.c's and Meta's llama; Rotation::halves
//   (i, i + Dh/2), GPT-NeoX's and Hugging Face's rotate_half
//   head h reads key/value head g = h / (H/KVH):
//     A_h = softmax_row(q_h k_gᵀ / √Dh, the causal mask and the pass's key mask),  o_h = A_h v_g
//   y = concat_h(o_h) Woᵀ
// backward (dO_h: the rows of dy Wo of head h; R(−p) turns back):
//   dv_g = Σ_{h of g} A_hᵀ dO_h,  dS_h = (A_h ⊙ (dO_h v_gᵀ − rowsum(A_h ⊙ dO_h v_gᵀ))) / √Dh
//   dq_h = dS_h k_g,  dk_g = Σ_{h of g} dS_hᵀ q_h,  then dq, dk ← R(−p) dq, R(−p) dk
//   dx = dq Wq + dk Wk + dv Wv
// Decoding (DecodeOf, stformer/compose/decode.hpp): the row at position t writes its turned key
// and its value into column t of its cache's kᵀ and vᵀ [B, Dk, Lk] (Dk floats a position each:
// the grouped heads' saving), and its queries read positions 0 .. t.
// The angles' cos and sin for positions 0 .. L − 1 are a table made before main (in double).
// Parameters (llama2.c's names): wq [D, D], wk [Dk, D], wv [Dk, D], wo [D, D] (.weight; .bias when Bi).
#pragma once

#include "../core/config.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>

#include "../kernels/matmul.hpp"
#include "../kernels/rowwise.hpp"
#include "linear.hpp"

namespace stformer::inline STFORMER_ABI {

// Which features of a head turn together (above).
enum class Rotation { pairs, halves };
inline std::string declared_value(Rotation r) { return r == Rotation::pairs ? "Rotation::pairs" : "Rotation::halves"; }
// RoPE's base Θ as a template argument: the float's bits (as Epsilon's).
enum class Theta : std::uint32_t {};
constexpr Theta theta(float value) { return Theta(std::bit_cast<std::uint32_t>(value)); }
inline std::string declared_value(Theta t) { return decl::wrapped("theta(", decl::shortest(std::bit_cast<float>(std::uint32_t(t))), ")"); }

// The angles of positions 0 .. L − 1: cos and sin of p·Θ^(−2i/Dh), [L, Dh/2] each, in double, rounded.
template <size_t L, size_t Dh, Theta T>
struct RotaryTable {
  Tensor<L, Dh / 2> cos, sin;
  RotaryTable() {
    const double base = double(std::bit_cast<float>(std::uint32_t(T)));
    for (size_t p = 0; p < L; ++p)
      for (size_t i = 0; i < Dh / 2; ++i) {
        const double angle = double(p) * std::pow(base, -double(2 * i) / double(Dh));
        cos(p, i) = float(std::cos(angle)), sin(p, i) = float(std::sin(angle));
      }
  }
};
template <size_t L, size_t Dh, Theta T>
inline const RotaryTable<L, Dh, T> rotary_table{};

template <size_t D, size_t H, size_t KVH, size_t L, Rotation Rot = Rotation::pairs, Theta Base = theta(10000.0f), Bias Bi = Bias::no>
struct RotaryAttention {
  static std::string declaration() { return declare("RotaryAttention", D, H, KVH, L, Rot, Base, Bi); }
  static_assert(D % H == 0 && H % KVH == 0, "RotaryAttention: H heads divide the width D, and KVH key/value heads divide H");
  static constexpr size_t width = D, heads = H, kv_heads = KVH, positions = L;
  static constexpr size_t Dh = D / H, Dk = KVH * Dh, group = H / KVH;
  static constexpr Rotation rotation = Rot;
  static constexpr float base = std::bit_cast<float>(std::uint32_t(Base));  // Θ
  static_assert(Dh % 2 == 0, "RotaryAttention: the heads' width is even (its features turn in pairs)");
  static constexpr float scale = inv_sqrt(Dh);
  using Proj = Linear<D, D, Init::xavier_normal, Bi>;
  using KVProj = Linear<D, Dk, Init::xavier_normal, Bi>;
  Proj wq;
  KVProj wk, wv;
  Proj wo;

  template <class F, class... S>
  static constexpr void visit(const Path& at, F& f, S&... s) {
    stformer::visit(at / "wq", f, s.wq...);
    stformer::visit(at / "wk", f, s.wk...);
    stformer::visit(at / "wv", f, s.wv...);
    stformer::visit(at / "wo", f, s.wo...);
  }

  // rows [n, ld] at positions p0, p0 + 1, …: each head's pairs turned by +angle (Back: −angle)
  // (heads: the row's heads of Dh features from its start). The four products of a pair are
  // rounded and stored before they are added (the empty asm takes the stored products as its
  // operands: a compiler that saw a pair's two results together would fuse them as a complex
  // product, whatever -ffp-contract says), so that every build and every call gives the same bits.
  template <bool Back = false>
  static void rotate(float* rows, size_t n, size_t ld, size_t heads, size_t p0) {
    const auto& table = rotary_table<L, Dh, Base>;
    STFORMER_CHECK(p0 + n <= L, "RotaryAttention: a position past the L its table has");
    constexpr size_t half = Dh / 2, step = Rot == Rotation::pairs ? 2 : 1, other = Rot == Rotation::pairs ? 1 : half;
    float ac[half], bs[half], as[half], bc[half];
    for (size_t r = 0; r < n; ++r) {
      const float *c = table.cos.data() + (p0 + r) * half, *s = table.sin.data() + (p0 + r) * half;
      for (size_t h = 0; h < heads; ++h) {
        float* x = rows + r * ld + h * Dh;
        for (size_t i = 0; i < half; ++i) {
          const float a = x[i * step], b = x[i * step + other], sn = Back ? -s[i] : s[i];
          ac[i] = a * c[i], bs[i] = b * sn, as[i] = a * sn, bc[i] = b * c[i];
        }
        asm volatile("" : "+m"(ac), "+m"(bs), "+m"(as), "+m"(bc));
        for (size_t i = 0; i < half; ++i) x[i * step] = ac[i] - bs[i], x[i * step + other] = as[i] + bc[i];
      }
    }
  }

  // q ← concat_h(o_h) in place for the N queries of each sequence (q [B, N, D], rows from
  // position 0), against k, v [B, N, Dk]; mask: the causal mask always, and the pass's keys;
  // a [R ≤ 16, N] of scores per block of queries (attn, when not null: every A_h kept,
  // [B, H, N, N]).
  template <size_t B, size_t N>
  static void attend(float* q, const float* k, const float* v, float* a, const Mask<B, N>& mask, float* attn = nullptr) {
    for (size_t b = 0; b < B; ++b)
      for (size_t h = 0; h < H; ++h) {
        const size_t g = h / group;
        const float *kg = k + b * N * Dk + g * Dh, *vg = v + b * N * Dk + g * Dh;
        for_tiles<N, 16>([&]<size_t R>(size_t i0) {
          float* qh = q + (b * N + i0) * D + h * Dh;
          float* s = attn ? attn + ((b * H + h) * N + i0) * N : a;
          kernels::matmul_nt<R, N, Dh>(qh, D, kg, Dk, s, N);
          for (size_t i = 0; i < R; ++i)
            for (size_t j = 0; j < N; ++j)
              if (j > i0 + i || (mask.keys && !(*mask.keys)(b, j))) s[i * N + j] = kernels::neg_inf;
          kernels::softmax_rows<R, N>(s, scale);
          kernels::matmul_nn<R, Dh, N>(s, N, vg, Dk, qh, D);
        });
      }
  }

  // A step of a Sequential, in place: h ← the attention of h. Its scratch: k, v and a tile of
  // scores or of the projections' rows.
  template <size_t B, size_t N>
  using Input = Tensor<B, N, D>;
  static constexpr bool in_place = true;
  static constexpr bool decodes = true;  // DecodeOf
  // its part of a decoding pass's cache: the keys and values transposed, kᵀ and vᵀ [B, Dk, Lk] (Lk = Decoding::keys(L)), float
  static constexpr size_t cache_bytes(size_t batch, size_t length) { return Decoding::bytes<float>(batch, Dk, length); }
  template <size_t B, size_t N, size_t Room = 0>
  struct Scratch {
    static constexpr size_t T = tile_rows(B * N), QB = N < 16 ? N : 16;
    Tensor<B, N, Dk> k, v;
    alignas(Tensor<1>) float tile[std::max(QB * N, T * D)];
  };
  template <size_t B, size_t N, size_t Room, class Pool = Serial>
  void forward_in_place(Input<B, N>& h, Scratch<B, N, Room>& w, const Mask<B, N>& mask, Pool&& pool = Pool{}) const {
    constexpr size_t T = Scratch<B, N, Room>::T;
    if (mask.decoding_step()) return decode<B, T>(h.data(), w.tile, *mask.decoding, pool);
    wk.template apply_rows<B * N>(h.data(), w.k.data(), pool);
    wv.template apply_rows<B * N>(h.data(), w.v.data(), pool);
    for (size_t b = 0; b < B; ++b) rotate(w.k.data() + b * N * Dk, N, Dk, KVH, 0);
    if (mask.decoding) store<B, N>(w.k.data(), w.v.data(), *mask.decoding);
    wq.template apply_tiled<B * N, T>(h.data(), h.data(), w.tile, pool);
    for (size_t b = 0; b < B; ++b) rotate(h.data() + b * N * D, N, D, H, 0);
    attend<B, N>(h.data(), w.k.data(), w.v.data(), w.tile, mask);
    wo.template apply_tiled<B * N, T>(h.data(), h.data(), w.tile, pool);
  }

  // A prompt's pass (N rows from position 0): its turned keys and values into the cache.
  template <size_t B, size_t N>
  static void store(const float* k, const float* v, Decoding& dec) {
    const auto kv = dec.take<float>(B, Dk, N);
    for (size_t b = 0; b < B; ++b)
      for (size_t j = 0; j < N; ++j) kv.put_key(b, j, k + (b * N + j) * Dk), kv.put_value(b, j, v + (b * N + j) * Dk);
  }

  // A decoding step: x [B, D], one row per sequence at position t, its key (turned) and value into
  // column t of the cache's kᵀ and vᵀ, then o_h = Σ_{j ≤ t} softmax_j(q_h·k[j]_g /
  // √Dh) v[j]_g (kernels::attend_cached); y over x.
  template <size_t B, size_t T, class Pool>
  void decode(float* x, float* tile, Decoding& dec, Pool& pool) const {
    const size_t t = dec.position;
    const auto kv = dec.take<float>(B, Dk, 1);
    for (size_t b = 0; b < B; ++b) {
      wk.template apply<1>(x + b * D, tile);
      rotate(tile, 1, Dk, KVH, t);
      kv.put_key(b, t, tile);
      wv.template apply<1>(x + b * D, tile);
      kv.put_value(b, t, tile);
    }
    wq.template apply_tiled<B, T>(x, x, tile, pool);
    for (size_t b = 0; b < B; ++b) {
      rotate(x + b * D, 1, D, H, t);
      for (size_t h = 0; h < H; ++h) {
        float* qh = x + b * D + h * Dh;  // q_h, then o_h
        const size_t g = h / group;
        kernels::attend_cached<Dh>(qh, kv.keys(b, g * Dh), kv.values(b, g * Dh), kv.columns, t + 1, scale, dec.score_row<float>(), qh);
      }
    }
    wo.template apply_tiled<B, T>(x, x, tile, pool);
  }

  // Forward only, on its own: the same steps into out.
  template <size_t B, size_t N>
  struct Infer {
    Tensor<B, N, D> out;
    Scratch<B, N> w;
    template <class X>
    const Tensor<B, N, D>& forward(const RotaryAttention& p, const X& x, const Mask<B, N>& mask = {}) {
      static_assert(shape_is<X, B, N, D>, "RotaryAttention: input rows x must be [B, N, D] (the pass's sizes, the block's width D)");
      out = x;
      p.forward_in_place(out, w, mask, Serial{});
      return out;
    }
  };

  // The training record: the input (by pointer, as a chain keeps it), q and k turned, v, every
  // A_h and concat_h(o_h); backward as at the top.
  template <size_t B, size_t N, Memory M = Memory::keep>
  struct Acts {
    using Dx = Tensor<B, N, D>;
    const Tensor<B, N, D>* x = nullptr;
    Tensor<B, N, D> q, heads, out;
    Tensor<B, N, Dk> k, v;
    Tensor<B, H, N, N> attn;
    struct Workspace {
      Tensor<B, N, D> dheads, dq, part;
      Tensor<B, N, Dk> dk, dv;
      Tensor<N, N> ds;
    };

    template <class X>
    const Tensor<B, N, D>& forward(const RotaryAttention& p, const X& in, const Mask<B, N>& mask = {}) {
      static_assert(shape_is<X, B, N, D>, "RotaryAttention: input rows x must be [B, N, D] (the pass's sizes, the block's width D)");
      x = &in;
      p.wq.template apply<B * N>(in.data(), q.data());
      p.wk.template apply<B * N>(in.data(), k.data());
      p.wv.template apply<B * N>(in.data(), v.data());
      for (size_t b = 0; b < B; ++b) rotate(q.data() + b * N * D, N, D, H, 0), rotate(k.data() + b * N * Dk, N, Dk, KVH, 0);
      heads = q;
      attend<B, N>(heads.data(), k.data(), v.data(), nullptr, mask, attn.data());
      p.wo.template apply<B * N>(heads.data(), out.data());
      return out;
    }

    const Dx& backward(const RotaryAttention& p, RotaryAttention& grad, const Tensor<B, N, D>& dout, Dx& dx, Workspace& ws) {
      p.wo.template backward_rows<B * N>(heads.data(), dout.data(), grad.wo, ws.dheads.data());
      for (size_t b = 0; b < B; ++b)
        for (size_t h = 0; h < H; ++h) {
          const size_t g = h / group, qo = b * N * D + h * Dh, ko = b * N * Dk + g * Dh;
          const float* a = attn.data() + (b * H + h) * N * N;
          const float* doh = ws.dheads.data() + qo;
          const auto by_group = [&](auto&& first, auto&& more) { h % group == 0 ? first() : more(); };
          by_group([&] { kernels::matmul_tn<N, Dh, N, false>(a, N, doh, D, ws.dv.data() + ko, Dk); },
                   [&] { kernels::matmul_tn<N, Dh, N, true>(a, N, doh, D, ws.dv.data() + ko, Dk); });
          kernels::matmul_nt<N, N, Dh>(doh, D, v.data() + ko, Dk, ws.ds.data(), N);
          for (size_t i = 0; i < N; ++i) kernels::softmax_backward_row<N>(a + i * N, ws.ds.data() + i * N, scale);
          kernels::matmul_nn<N, Dh, N>(ws.ds.data(), N, k.data() + ko, Dk, ws.dq.data() + qo, D);
          by_group([&] { kernels::matmul_tn<N, Dh, N, false>(ws.ds.data(), N, q.data() + qo, D, ws.dk.data() + ko, Dk); },
                   [&] { kernels::matmul_tn<N, Dh, N, true>(ws.ds.data(), N, q.data() + qo, D, ws.dk.data() + ko, Dk); });
        }
      for (size_t b = 0; b < B; ++b)
        rotate<true>(ws.dq.data() + b * N * D, N, D, H, 0), rotate<true>(ws.dk.data() + b * N * Dk, N, Dk, KVH, 0);
      p.wq.template backward_rows<B * N>(x->data(), ws.dq.data(), grad.wq, dx.data());
      p.wk.template backward_rows<B * N>(x->data(), ws.dk.data(), grad.wk, ws.part.data());
      kernels::add_to<B * N * D>(ws.part.data(), dx.data());
      p.wv.template backward_rows<B * N>(x->data(), ws.dv.data(), grad.wv, ws.part.data());
      kernels::add_to<B * N * D>(ws.part.data(), dx.data());
      return dx;
    }
  };
};

}  // namespace stformer
