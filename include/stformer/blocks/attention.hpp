// MultiHeadAttention<Dq, Dkv, D, H>: queries xq [B, Nq, Dq], keys/values xkv [B, Nk, Dkv].
//
//   q = xq Wqᵀ + bq,  k = xkv Wkᵀ + bk,  v = xkv Wvᵀ + bv                  [B, N, D]
//   head h (features [h·Dh, (h+1)·Dh), Dh = D/H):
//     A_h = softmax_row(s · q_h k_hᵀ, masked keys removed)                  [B, H, Nq, Nk]
//     o_h = A_h v_h
//   out = concat_h(o_h) Woᵀ + bo                                           [B, Nq, D]
// backward, per head, from dO_h (the gradient of concat_h(o_h)):
//   dv_h = A_hᵀ dO_h,  dA_h = dO_h v_hᵀ,  dS_h = s · A_h ⊙ (dA_h − rowsum(dA_h ⊙ A_h)),
//   dq_h = dS_h k_h,   dk_h = dS_hᵀ q_h;  then the projections' backward. dL/dxq is in dxq(),
//   dL/dxkv in dxkv (for self-attention the caller adds the two).
//
// Few queries against many keys (PMA's seeds): Acts is FoldedActs, which moves the key and value
// projections to the queries' side. With Wk_h, Wv_h the head's rows [Dh, Dkv] of Wk, Wv:
//   q_h k_hᵀ = (q_h Wk_h) xkvᵀ + (q_h·bk_h)·1ᵀ     (a constant per row: softmax removes it, dbk = 0)
//   A_h v_h  = (A_h xkv) Wv_hᵀ + rowsum(A_h)·bv_h  (rowsum 1, or 0 on an all-masked row)
// so no [Nk, D] projection is made. It is chosen when its FLOP count, 4·Nq·D·Dkv + 4·H·Nq·Nk·Dkv,
// is below the projections' 4·Nk·Dkv·D + 4·Nq·Nk·D (`folds`); the result is the same up to
// float rounding, and the activations hold A (attn), heads and o as in FullActs.
//
// Score scale s: ScoreScale::head_width gives 1/sqrt(Dh) (the default), ScoreScale::model_width
// gives 1/sqrt(D) (the seed project's choice). A masked key gets weight exactly 0; a query
// whose keys are all masked gets o_h = 0, so its output row is bo. Parameters: wq, wk, wv, wo
// (Xavier-normal weights, zero biases).
#pragma once

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "../kernels/matmul.hpp"
#include "../kernels/rowwise.hpp"
#include "linear.hpp"

namespace stformer {

enum class ScoreScale { head_width, model_width };

template <size_t Dq, size_t Dkv, size_t D, size_t H, ScoreScale S = ScoreScale::head_width>
struct MultiHeadAttention {
  static_assert(D % H == 0, "MultiHeadAttention: model width D must be divisible by the number of heads H");
  static constexpr size_t Dh = D / H;
  static constexpr float score_scale = S == ScoreScale::head_width ? inv_sqrt(Dh) : inv_sqrt(D);

  Linear<Dq, D> wq;
  Linear<Dkv, D> wk, wv;
  Linear<D, D> wo;

  template <class F, class... P>
  static void visit(const Path& at, F& f, P&... p) {
    stformer::visit(at / "wq", f, p.wq...);
    stformer::visit(at / "wk", f, p.wk...);
    stformer::visit(at / "wv", f, p.wv...);
    stformer::visit(at / "wo", f, p.wo...);
  }

  template <size_t B, size_t Nq, size_t Nk, class XQ, class XKV>
  static constexpr void check_inputs() {
    static_assert(std::is_same_v<XQ, Tensor<B, Nq, Dq>>, "MultiHeadAttention: queries xq [B, Nq, Dq] do not match the block's query width Dq");
    static_assert(std::is_same_v<XKV, Tensor<B, Nk, Dkv>>, "MultiHeadAttention: keys/values xkv [B, Nk, Dkv] do not match the block's key width Dkv");
  }

  // A_h ← softmax_row(s · (q_h k_hᵀ with the keys query i does not see at −∞)), for the R rows
  // of raw scores q_h k_hᵀ at a, queries i0 … i0 + R − 1 of batch row b.
  template <size_t R, size_t B, size_t Nk>
  static void masked_softmax(float* a, size_t b, size_t i0, const Mask<B, Nk>& mask) {
    if (mask.causal || mask.keys)
      for (size_t i = 0; i < R; ++i)
        for (size_t j = 0; j < Nk; ++j)
          if (!mask.sees(b, i0 + i, j)) a[i * Nk + j] = kernels::neg_inf;
    kernels::softmax_rows<R, Nk>(a, score_scale);
  }

  // Query rows per block in the forward passes: a block's scores ([16, Nk]: 16 KB at Nk = 256)
  // stay in the L1 cache from q_h k_hᵀ through the softmax to A_h v_h.
  static constexpr size_t query_block = 16;

  template <size_t B, size_t Nq, size_t Nk>
  struct FullActs {
    ActsOf<Linear<Dq, D>, B, Nq> q;
    ActsOf<Linear<Dkv, D>, B, Nk> k, v;
    Tensor<B, H, Nq, Nk> attn;  // A_h
    Tensor<B, Nq, D> heads;     // concat_h(o_h)
    ActsOf<Linear<D, D>, B, Nq> o;
    Tensor<B, Nq, D> dq;
    Tensor<B, Nk, D> dk, dv;
    Tensor<Nq, Nk> ds;  // one head's dA, then dS
    Tensor<Dh, Nk> kt;  // one head's k_hᵀ
    Tensor<B, Nk, Dkv> dxkv;
    const Tensor<B, Nq, Dq>& dxq() const { return q.dx; }

    template <class XQ, class XKV>
    const Tensor<B, Nq, D>& forward(const MultiHeadAttention& p, const XQ& xq, const XKV& xkv, Mask<B, Nk> mask = {}) {
      check_inputs<B, Nq, Nk, XQ, XKV>();
      q.forward(p.wq, xq);
      k.forward(p.wk, xkv);
      v.forward(p.wv, xkv);
      for (size_t b = 0; b < B; ++b)
        for (size_t h = 0; h < H; ++h) {
          const float* qh = q.out.data() + b * Nq * D + h * Dh;
          const float* vh = v.out.data() + b * Nk * D + h * Dh;
          float* a = attn.data() + (b * H + h) * Nq * Nk;
          float* oh = heads.data() + b * Nq * D + h * Dh;
          kernels::transpose<Dh>(k.out.data() + b * Nk * D + h * Dh, D, Nk, kt.data(), Nk);
          auto rows = [&]<size_t R>(size_t i0) {  // queries i0 … i0 + R − 1
            kernels::matmul_nn<R, Nk, Dh>(qh + i0 * D, D, kt.data(), Nk, a + i0 * Nk, Nk);
            masked_softmax<R>(a + i0 * Nk, b, i0, mask);
            kernels::matmul_nn<R, Dh, Nk>(a + i0 * Nk, Nk, vh, D, oh + i0 * D, D);
          };
          size_t i0 = 0;
          for (; i0 + query_block <= Nq; i0 += query_block) rows.template operator()<query_block>(i0);
          if constexpr (Nq % query_block != 0) rows.template operator()<Nq % query_block>(i0);
        }
      return o.forward(p.wo, heads);
    }

    void backward(const MultiHeadAttention& p, MultiHeadAttention& grad, const Tensor<B, Nq, D>& dout) {
      const auto& dheads = o.backward(p.wo, grad.wo, dout);
      for (size_t b = 0; b < B; ++b)
        for (size_t h = 0; h < H; ++h) {
          size_t qo = b * Nq * D + h * Dh, ko = b * Nk * D + h * Dh;
          const float* a = attn.data() + (b * H + h) * Nq * Nk;
          const float* doh = dheads.data() + qo;
          kernels::matmul_tn<Nk, Dh, Nq, false>(a, Nk, doh, D, dv.data() + ko, D);
          kernels::matmul_nt<Nq, Nk, Dh>(doh, D, v.out.data() + ko, D, ds.data(), Nk);
          for (size_t i = 0; i < Nq; ++i) kernels::softmax_backward_row<Nk>(a + i * Nk, ds.data() + i * Nk, score_scale);
          kernels::matmul_nn<Nq, Dh, Nk>(ds.data(), Nk, k.out.data() + ko, D, dq.data() + qo, D);
          kernels::matmul_tn<Nk, Dh, Nq, false>(ds.data(), Nk, q.out.data() + qo, D, dk.data() + ko, D);
        }
      q.backward(p.wq, grad.wq, dq);
      kernels::add<B * Nk * Dkv>(k.backward(p.wk, grad.wk, dk).data(), v.backward(p.wv, grad.wv, dv).data(), dxkv.data());
    }
  };

  // The folded form (see the top of this file). Per batch row, the heads' query rows stacked:
  //   qk = [q_h Wk_h]_h [H·Nq, Dkv],  A = softmax(s · qk xkvᵀ) [H·Nq, Nk],  ax = A xkv [H·Nq, Dkv],
  //   o_h = ax_h Wv_hᵀ + bv_h, or 0 where query i sees no key (its row of A is 0)
  // backward, from dO_h:
  //   dax_h = dO_h Wv_h,  dWv_h += dO_hᵀ ax_h,  dbv += Σ dO over the rows that see a key,  dA = dax xkvᵀ,
  //   dS = s · A ⊙ (dA − rowsum(dA ⊙ A)),  dxkv = Aᵀ dax + dSᵀ qk,  dqk = dS xkv,
  //   dq_h = dqk_h Wk_hᵀ,  dWk_h += q_hᵀ dqk_h  (dbk = 0)
  template <size_t B, size_t Nq, size_t Nk>
  struct FoldedActs {
    static constexpr size_t R = H * Nq;
    const Tensor<B, Nk, Dkv>* xkv = nullptr;  // the keys/values of the last forward
    ActsOf<Linear<Dq, D>, B, Nq> q;
    Tensor<B, H, Nq, Dkv> qk, ax;
    Tensor<B, H, Nq, Nk> attn;  // A_h
    Tensor<B, Nq, D> heads;     // concat_h(o_h)
    ActsOf<Linear<D, D>, B, Nq> o;
    Tensor<B, Nq, D> dq;
    Tensor<H, Nq, Dkv> dax, dqk;  // one batch row's
    Tensor<H, Nq, Nk> ds;         // one batch row's dA, then dS
    Tensor<B, Nk, Dkv> dxkv;
    const Tensor<B, Nq, Dq>& dxq() const { return q.dx; }

    // Row i of A_h (any head): all 0 exactly when query i sees no key, else it sums to 1.
    static bool sees_a_key(const float* a_row) { return kernels::row_max<Nk>(a_row) > 0; }

    template <class XQ, class XKV>
    const Tensor<B, Nq, D>& forward(const MultiHeadAttention& p, const XQ& xq, const XKV& x_kv, Mask<B, Nk> mask = {}) {
      check_inputs<B, Nq, Nk, XQ, XKV>();
      xkv = &x_kv;
      q.forward(p.wq, xq);
      for (size_t b = 0; b < B; ++b) {
        const float* x = x_kv.data() + b * Nk * Dkv;
        float* qkb = qk.data() + b * R * Dkv;
        float* axb = ax.data() + b * R * Dkv;
        float* a = attn.data() + b * R * Nk;
        for (size_t h = 0; h < H; ++h)
          kernels::matmul_nn<Nq, Dkv, Dh>(q.out.data() + b * Nq * D + h * Dh, D, p.wk.weight.data() + h * Dh * Dkv, Dkv, qkb + h * Nq * Dkv, Dkv);
        kernels::matmul_nt<R, Nk, Dkv>(qkb, Dkv, x, Dkv, a, Nk);
        for (size_t h = 0; h < H; ++h) masked_softmax<Nq>(a + h * Nq * Nk, b, 0, mask);
        kernels::matmul_nn<R, Dkv, Nk>(a, Nk, x, Dkv, axb, Dkv);
        for (size_t h = 0; h < H; ++h)
          kernels::matmul_nt<Nq, Dh, Dkv>(axb + h * Nq * Dkv, Dkv, p.wv.weight.data() + h * Dh * Dkv, Dkv, heads.data() + b * Nq * D + h * Dh, D,
                                          1.0f, p.wv.bias.data() + h * Dh);
        for (size_t i = 0; i < Nq; ++i)
          if (!sees_a_key(a + i * Nk)) std::fill_n(heads.data() + (b * Nq + i) * D, D, 0.0f);
      }
      return o.forward(p.wo, heads);
    }

    void backward(const MultiHeadAttention& p, MultiHeadAttention& grad, const Tensor<B, Nq, D>& dout) {
      const auto& dheads = o.backward(p.wo, grad.wo, dout);
      for (size_t b = 0; b < B; ++b) {
        const float* x = xkv->data() + b * Nk * Dkv;
        const float* a = attn.data() + b * R * Nk;
        for (size_t h = 0; h < H; ++h) {
          const float* doh = dheads.data() + b * Nq * D + h * Dh;
          kernels::matmul_nn<Nq, Dkv, Dh>(doh, D, p.wv.weight.data() + h * Dh * Dkv, Dkv, dax.data() + h * Nq * Dkv, Dkv);
          kernels::matmul_tn<Dh, Dkv, Nq>(doh, D, ax.data() + (b * R + h * Nq) * Dkv, Dkv, grad.wv.weight.data() + h * Dh * Dkv, Dkv);
        }
        for (size_t i = 0; i < Nq; ++i)
          if (sees_a_key(a + i * Nk)) kernels::add_to<D>(dheads.data() + (b * Nq + i) * D, grad.wv.bias.data());
        kernels::matmul_nt<R, Nk, Dkv>(dax.data(), Dkv, x, Dkv, ds.data(), Nk);
        for (size_t r = 0; r < R; ++r) kernels::softmax_backward_row<Nk>(a + r * Nk, ds.data() + r * Nk, score_scale);
        float* dx = dxkv.data() + b * Nk * Dkv;
        kernels::matmul_tn<Nk, Dkv, R, false>(a, Nk, dax.data(), Dkv, dx, Dkv);
        kernels::matmul_tn<Nk, Dkv, R, true>(ds.data(), Nk, qk.data() + b * R * Dkv, Dkv, dx, Dkv);
        kernels::matmul_nn<R, Dkv, Nk>(ds.data(), Nk, x, Dkv, dqk.data(), Dkv);
        for (size_t h = 0; h < H; ++h) {
          const float* dqkh = dqk.data() + h * Nq * Dkv;
          kernels::matmul_nt<Nq, Dh, Dkv>(dqkh, Dkv, p.wk.weight.data() + h * Dh * Dkv, Dkv, dq.data() + b * Nq * D + h * Dh, D);
          kernels::matmul_tn<Dh, Dkv, Nq>(q.out.data() + b * Nq * D + h * Dh, D, dqkh, Dkv, grad.wk.weight.data() + h * Dh * Dkv, Dkv);
        }
      }
      q.backward(p.wq, grad.wq, dq);
    }
  };

  template <size_t Nq, size_t Nk>
  static constexpr bool folds = Nq * D * Dkv + H * Nq * Nk * Dkv < Nk * Dkv * D + Nq * Nk * D;

  template <size_t B, size_t Nq, size_t Nk>
  using Acts = std::conditional_t<folds<Nq, Nk>, FoldedActs<B, Nq, Nk>, FullActs<B, Nq, Nk>>;

  // Forward only, for inference: each head's scores are taken in tiles of Tq queries × Tk keys
  // with an online softmax. Per query row, a running max m and sum l (of raw scores x_j, s > 0):
  //   m' = max(m, max_j x_j),  l ← l·e^{s(m−m')} + Σ_j e^{s(x_j−m')},  o ← o·e^{s(m−m')} + Σ_j e^{s(x_j−m')} v_j
  // (kernels::softmax_step on a tile's rows) and o/l at the end (0 when every key is masked, as
  // Acts). Nothing of size Nq × Nk is kept: the workspace, sizeof(Infer), is q, k, v, heads,
  // out, one head's k_hᵀ and one [Tq, Tk] tile (16 KB by default, in the L1 cache), a
  // compile-time constant linear in Nq and Nk.
  // Same result as Acts::forward up to float rounding.
  template <size_t B, size_t Nq, size_t Nk, size_t Tq = query_block, size_t Tk = 256>
  struct Infer {
    Tensor<B, Nq, D> q, heads, out;
    Tensor<B, Nk, D> k, v;
    Tensor<Dh, Nk> kt;             // one head's k_hᵀ
    alignas(64) float s[Tq * Tk];  // one tile of scores, then of e^{s(x−m')}
    float m[Tq], l[Tq];

    template <class XQ, class XKV>
    const Tensor<B, Nq, D>& forward(const MultiHeadAttention& p, const XQ& xq, const XKV& xkv, Mask<B, Nk> mask = {}) {
      check_inputs<B, Nq, Nk, XQ, XKV>();
      kernels::matmul_nt<B * Nq, D, Dq>(xq.data(), Dq, p.wq.weight.data(), Dq, q.data(), D, 1.0f, p.wq.bias.data());
      kernels::matmul_nt<B * Nk, D, Dkv>(xkv.data(), Dkv, p.wk.weight.data(), Dkv, k.data(), D, 1.0f, p.wk.bias.data());
      kernels::matmul_nt<B * Nk, D, Dkv>(xkv.data(), Dkv, p.wv.weight.data(), Dkv, v.data(), D, 1.0f, p.wv.bias.data());
      for (size_t b = 0; b < B; ++b)
        for (size_t h = 0; h < H; ++h) {
          kernels::transpose<Dh>(k.data() + b * Nk * D + h * Dh, D, Nk, kt.data(), Nk);
          size_t i0 = 0;
          for (; i0 + Tq <= Nq; i0 += Tq) query_tile<Tq>(b, h, i0, mask);
          if constexpr (Nq % Tq != 0) query_tile<Nq % Tq>(b, h, i0, mask);
        }
      kernels::matmul_nt<B * Nq, D, D>(heads.data(), D, p.wo.weight.data(), D, out.data(), D, 1.0f, p.wo.bias.data());
      return out;
    }

   private:
    template <size_t R>
    void query_tile(size_t b, size_t h, size_t i0, const Mask<B, Nk>& mask) {
      const float* qh = q.data() + (b * Nq + i0) * D + h * Dh;
      float* oh = heads.data() + (b * Nq + i0) * D + h * Dh;
      for (size_t r = 0; r < R; ++r) {
        m[r] = kernels::neg_inf, l[r] = 0;
        kernels::fill<Dh>(oh + r * D, 0.0f);
      }
      size_t j0 = 0;
      for (; j0 + Tk <= Nk && !(mask.causal && j0 > i0 + R - 1); j0 += Tk) key_tile<R, Tk>(b, h, i0, j0, qh, oh, mask);
      if constexpr (Nk % Tk != 0)
        if (!(mask.causal && j0 > i0 + R - 1)) key_tile<R, Nk % Tk>(b, h, i0, j0, qh, oh, mask);
      for (size_t r = 0; r < R; ++r) kernels::scale<Dh>(oh + r * D, l[r] > 0 ? 1 / l[r] : 0.0f);
    }

    template <size_t R, size_t C>
    void key_tile(size_t b, size_t h, size_t i0, size_t j0, const float* qh, float* oh, const Mask<B, Nk>& mask) {
      kernels::matmul_nn<R, C, Dh>(qh, D, kt.data() + j0, Nk, s, C);
      if (mask.causal || mask.keys)
        for (size_t r = 0; r < R; ++r)
          for (size_t j = 0; j < C; ++j)
            if (!mask.sees(b, i0 + r, j0 + j)) s[r * C + j] = kernels::neg_inf;
      float corr[R];
      kernels::softmax_step<R, C>(s, score_scale, m, l, corr);
      for (size_t r = 0; r < R; ++r)
        if (corr[r] != 1.0f) kernels::scale<Dh>(oh + r * D, corr[r]);
      kernels::matmul_nn<R, Dh, C, true>(s, C, v.data() + (b * Nk + j0) * D + h * Dh, D, oh, D);
    }
  };
};

}  // namespace stformer
