// MultiHeadAttention<Dq, Dkv, D, H>: queries xq [B, Nq, Dq], keys/values xkv [B, Nk, Dkv].
//
//   q = xq Wqᵀ + bq,  k = xkv Wkᵀ + bk,  v = xkv Wvᵀ + bv                  [B, N, D]
//   head h (features [h·Dh, (h+1)·Dh), Dh = D/H):
//     A_h = softmax_row(s · q_h k_hᵀ, masked keys removed)                  [B, H, Nq, Nk]
//     o_h = A_h v_h
//   out = concat_h(o_h) Woᵀ + bo                                           [B, Nq, D]
// backward, per head, from dO_h (the gradient of concat_h(o_h)):
//   dv_h = A_hᵀ dO_h,  dA_h = dO_h v_hᵀ,  dS_h = s · A_h ⊙ (dA_h − rowsum(dA_h ⊙ A_h)),
//   dq_h = dS_h k_h,   dk_h = dS_hᵀ q_h;  then the projections' backward, which returns
//   {dL/dxq, dL/dxkv} (for self-attention the caller adds the two).
//
// Few queries against many keys (PMA's seeds): Acts is FoldedActs, which moves the key and value
// projections to the queries' side. With Wk_h, Wv_h the head's rows [Dh, Dkv] of Wk, Wv:
//   q_h k_hᵀ = (q_h Wk_h) xkvᵀ + (q_h·bk_h)·1ᵀ     (a constant per row: softmax removes it, dbk = 0)
//   A_h v_h  = (A_h xkv) Wv_hᵀ + rowsum(A_h)·bv_h  (rowsum 1, or 0 on an all-masked row)
// so no [Nk, D] projection is made. It is chosen when its FLOP count, 4·Nq·D·Dkv + 4·H·Nq·Nk·Dkv,
// is below the projections' 4·Nk·Dkv·D + 4·Nq·Nk·D (`folds`); the result is the same up to
// float rounding, and the activations hold A (attn), heads and o as in FullActs.
//
// Forward only: Infer<B, Nq, Nk>, and for the blocks that keep a residual stream Work, prepare
// and forward_add (below): the same kernels in the same order, so the same bits as Acts.
//
// Score scale s: ScoreScale::head_width gives 1/sqrt(Dh) (the default), ScoreScale::model_width
// gives 1/sqrt(D) (the seed project's choice). A masked key gets weight exactly 0; a query
// whose keys are all masked gets o_h = 0, so its output row is bo. Parameters: wq, wk, wv, wo
// (Xavier-normal weights, zero biases); with Projections::packed PyTorch's nn.MultiheadAttention's
// names: in_proj_weight [3D, D] (Wq, Wk, Wv's rows in that order), in_proj_bias [3D],
// out_proj.weight, out_proj.bias (Dq = Dkv = D).
#pragma once

#include "../core/config.hpp"

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "../kernels/matmul.hpp"
#include "../kernels/rowwise.hpp"
#include "linear.hpp"

namespace stformer::inline STFORMER_ABI {

enum class ScoreScale { head_width, model_width };
inline std::string declared_value(ScoreScale s) { return s == ScoreScale::head_width ? "ScoreScale::head_width" : "ScoreScale::model_width"; }

// Where an attention's projections are: four linear layers wq, wk, wv, wo (separate), or
// PyTorch's nn.MultiheadAttention's in_proj_weight [3D, D] and in_proj_bias [3D] (Wq, Wk, Wv
// packed) and out_proj (packed). Either way q_proj(), k_proj(), v_proj() give the three as
// linear layers (Linear, or LinearRef into the packed rows) and wo is the output's.
enum class Projections { separate, packed };
inline std::string declared_value(Projections p) { return p == Projections::separate ? "Projections::separate" : "Projections::packed"; }
template <size_t Dq, size_t Dkv, size_t D, Projections Pr>
struct AttentionProjections {
  Linear<Dq, D> wq;
  Linear<Dkv, D> wk, wv;
  Linear<D, D> wo;

  template <class F, class... P>
  static constexpr void visit(const Path& at, F& f, P&... p) {
    stformer::visit(at / "wq", f, p.wq...);
    stformer::visit(at / "wk", f, p.wk...);
    stformer::visit(at / "wv", f, p.wv...);
    stformer::visit(at / "wo", f, p.wo...);
  }
  const Linear<Dq, D>& q_proj() const { return wq; }
  const Linear<Dkv, D>& k_proj() const { return wk; }
  const Linear<Dkv, D>& v_proj() const { return wv; }
  Linear<Dq, D>& q_proj() { return wq; }
  Linear<Dkv, D>& k_proj() { return wk; }
  Linear<Dkv, D>& v_proj() { return wv; }
};
template <size_t Dq, size_t Dkv, size_t D>
struct AttentionProjections<Dq, Dkv, D, Projections::packed> {
  static_assert(Dq == D && Dkv == D, "MultiHeadAttention: PyTorch packs the projections (in_proj_weight) only when kdim = vdim = embed_dim");
  Tensor<3 * D, D> in_proj_weight;
  Tensor<3 * D> in_proj_bias;
  Linear<D, D> wo;

  template <class F, class... P>
  static constexpr void visit(const Path& at, F& f, P&... p) {
    f(at / "in_proj_weight", Init{Init::xavier_normal}, p.in_proj_weight...);
    f(at / "in_proj_bias", Init{Init::zeros}, p.in_proj_bias...);
    stformer::visit(at / "out_proj", f, p.wo...);
  }
  LinearRef<D, D> q_proj() const { return {in_proj_weight.data(), in_proj_bias.data()}; }
  LinearRef<D, D> k_proj() const { return {in_proj_weight.data() + D * D, in_proj_bias.data() + D}; }
  LinearRef<D, D> v_proj() const { return {in_proj_weight.data() + 2 * D * D, in_proj_bias.data() + 2 * D}; }
  LinearRef<D, D, float> q_proj() { return {in_proj_weight.data(), in_proj_bias.data()}; }
  LinearRef<D, D, float> k_proj() { return {in_proj_weight.data() + D * D, in_proj_bias.data() + D}; }
  LinearRef<D, D, float> v_proj() { return {in_proj_weight.data() + 2 * D * D, in_proj_bias.data() + 2 * D}; }
};

template <size_t Dq, size_t Dkv, size_t D, size_t H, ScoreScale S = ScoreScale::head_width, Projections Pr = Projections::separate>
struct MultiHeadAttention : AttentionProjections<Dq, Dkv, D, Pr> {
  static std::string declaration() { return declare("MultiHeadAttention", Dq, Dkv, D, H, S, Pr); }  // SelfAttention's too
  static_assert(D % H == 0, "MultiHeadAttention: model width D must be divisible by the number of heads H");
  static constexpr size_t Dh = D / H;
  static constexpr float score_scale = S == ScoreScale::head_width ? inv_sqrt(Dh) : inv_sqrt(D);
  using Base = AttentionProjections<Dq, Dkv, D, Pr>;
  using Base::visit, Base::q_proj, Base::k_proj, Base::v_proj, Base::wo;

  template <size_t B, size_t Nq, size_t Nk, class XQ, class XKV>
  static constexpr void check_inputs() {
    static_assert(shape_is<XQ, B, Nq, Dq>, "MultiHeadAttention: queries xq must be [B, Nq, Dq] (the pass's sizes, the block's query width Dq)");
    static_assert(shape_is<XKV, B, Nk, Dkv>, "MultiHeadAttention: keys/values xkv must be [B, Nk, Dkv] (the pass's sizes, the block's key width Dkv)");
  }

  // s[i·ld + j] ← −∞ where query i0 + i does not see key j0 + j (i < R, j < C), for batch row b.
  // The one place where masks meet scores.
  template <size_t R, size_t C, size_t B, size_t Nk>
  static void mask_scores(float* s, size_t ld, size_t b, size_t i0, size_t j0, const Mask<B, Nk>& mask) {
    if (mask.causal || mask.keys)
      for (size_t i = 0; i < R; ++i)
        for (size_t j = 0; j < C; ++j)
          if (!mask.sees(b, i0 + i, j0 + j)) s[i * ld + j] = kernels::neg_inf;
  }

  // A_h ← softmax_row(s · (q_h k_hᵀ with the keys query i does not see at −∞)), for the R rows
  // of raw scores q_h k_hᵀ at a, queries i0 … i0 + R − 1 of batch row b.
  template <size_t R, size_t B, size_t Nk>
  static void masked_softmax(float* a, size_t b, size_t i0, const Mask<B, Nk>& mask) {
    mask_scores<R, Nk>(a, Nk, b, i0, 0, mask);
    kernels::softmax_rows<R, Nk>(a, score_scale);
  }

  // Query rows per block in the forward passes: a block's scores ([16, Nk]: 16 KB at Nk = 256)
  // stay in the L1 cache from q_h k_hᵀ through the softmax to A_h v_h.
  static constexpr size_t query_block = 16;

  // One block of R queries i0 … of head h, batch row b: a [R, Nk] = A_h rows (q_h k_hᵀ, masked
  // softmax), o_h rows = A_h v_h. qh, oh: the block's first row of head h (ld D; oh may be qh:
  // the scores are taken before o_h is written); kth: k_hᵀ [Dh, Nk]; vh: v_h (ld D).
  template <size_t R, size_t B, size_t Nk>
  static void attend_block(const float* qh, const float* kth, const float* vh, float* a, float* oh, size_t b, size_t i0,
                           const Mask<B, Nk>& mask) {
    kernels::matmul_nn<R, Nk, Dh>(qh, D, kth, Nk, a, Nk);
    masked_softmax<R>(a, b, i0, mask);
    kernels::matmul_nn<R, Dh, Nk>(a, Nk, vh, D, oh, D);
  }

  // Memory::replay (an encoder block's record that replays its attention, blocks/encoder.hpp):
  // forward takes the workspace, whose dheads holds the output and dk each head's k_hᵀ (backward
  // writes them later); backward writes dS_h over A_h a row at a time (the row's dA in ds), then
  // takes dq and dk from every head's dS_h, dq where dO was. The record lacks o's output and kᵀ,
  // the workspace dq and all but one row of dS; the bits are the same (matmul_nt's entries are
  // the same for a row as for the whole product, and each gradient is the same sum).
  template <size_t B, size_t Nq, size_t Nk, Memory M = Memory::keep>
  struct FullActs {
    static constexpr bool replay = M == Memory::replay;
    ActsOf<Linear<Dq, D>, B, Nq> q;
    ActsOf<Linear<Dkv, D>, B, Nk> k, v;
    Tensor<B, H, Nq, Nk> attn;  // A_h (replay: dS_h after backward)
    Tensor<B, Nq, D> heads;     // concat_h(o_h)
    [[no_unique_address]] std::conditional_t<replay, Nothing, ActsOf<Linear<D, D>, B, Nq>> o;
    [[no_unique_address]] std::conditional_t<replay, Nothing, Tensor<Dh, Nk>> kt;  // one head's k_hᵀ (forward)
    using Dx = InputGrads<Tensor<B, Nq, Dq>, Tensor<B, Nk, Dkv>>;
    struct Workspace {
      Phases<Tensor<B, Nq, D>, Tensor<B, Nk, Dkv>> dheads;  // dO, then the values' dxkv (replay: the output, dO, dq, dxkv)
      [[no_unique_address]] std::conditional_t<replay, Nothing, Tensor<B, Nq, D>> dq;
      Tensor<B, Nk, D> dk, dv;
      Tensor<replay ? 1 : Nq, Nk> ds;  // one head's dA, then dS (replay: one row's)
    };

    template <class XQ, class XKV>
    const Tensor<B, Nq, D>& forward(const MultiHeadAttention& p, const XQ& xq, const XKV& xkv, Mask<B, Nk> mask = {})
      requires(!replay)
    {
      attend_all(p, xq, xkv, mask, kt.data());
      return o.forward(p.wo, heads);
    }
    template <class XQ, class XKV>
    const Tensor<B, Nq, D>& forward(const MultiHeadAttention& p, const XQ& xq, const XKV& xkv, Mask<B, Nk> mask, Workspace& w)
      requires replay
    {
      attend_all(p, xq, xkv, mask, w.dk.data());
      auto& y = w.dheads.template start<Tensor<B, Nq, D>>();
      p.wo.template apply<B * Nq>(heads.data(), y.data());
      return y;
    }

    // q, k, v, A_h and concat_h(o_h), each head's k_hᵀ at kth in turn.
    template <class XQ, class XKV>
    void attend_all(const MultiHeadAttention& p, const XQ& xq, const XKV& xkv, const Mask<B, Nk>& mask, float* kth) {
      check_inputs<B, Nq, Nk, XQ, XKV>();
      q.forward(p.q_proj(), xq);
      k.forward(p.k_proj(), xkv);
      v.forward(p.v_proj(), xkv);
      for (size_t b = 0; b < B; ++b)
        for (size_t h = 0; h < H; ++h) {
          const size_t qo = b * Nq * D + h * Dh;
          kernels::transpose<Dh>(k.out.data() + b * Nk * D + h * Dh, D, Nk, kth, Nk);
          for_tiles<Nq, query_block>([&]<size_t R>(size_t i0) {
            attend_block<R>(q.out.data() + qo + i0 * D, kth, v.out.data() + b * Nk * D + h * Dh,
                            attn.data() + ((b * H + h) * Nq + i0) * Nk, heads.data() + qo + i0 * D, b, i0, mask);
          });
        }
    }

    Dx backward(const MultiHeadAttention& p, MultiHeadAttention& grad, const Tensor<B, Nq, D>& dout, Dx dx, Workspace& w) {
      auto& [dheads_or_dxv, dq_kept, dk, dv, ds] = w;
      auto& dheads = dheads_or_dxv.template start<Tensor<B, Nq, D>>();
      if constexpr (replay)
        p.wo.template backward_rows<B * Nq>(heads.data(), dout.data(), grad.wo, dheads.data());
      else
        o.backward(p.wo, grad.wo, dout, dheads);
      // dq_h = dS_h k_h, dk_h = dS_hᵀ q_h for head h of batch row b, dS_h at s
      auto dq_dk = [&](const float* s, float* dq, size_t b, size_t h) {
        const size_t qo = b * Nq * D + h * Dh, ko = b * Nk * D + h * Dh;
        kernels::matmul_nn<Nq, Dh, Nk>(s, Nk, k.out.data() + ko, D, dq + qo, D);
        kernels::matmul_tn<Nk, Dh, Nq, false>(s, Nk, q.out.data() + qo, D, w.dk.data() + ko, D);
      };
      for (size_t b = 0; b < B; ++b)
        for (size_t h = 0; h < H; ++h) {
          const size_t qo = b * Nq * D + h * Dh, ko = b * Nk * D + h * Dh;
          float* a = attn.data() + (b * H + h) * Nq * Nk;
          const float* doh = dheads.data() + qo;
          kernels::matmul_tn<Nk, Dh, Nq, false>(a, Nk, doh, D, dv.data() + ko, D);
          if constexpr (replay) {
            for (size_t i = 0; i < Nq; ++i) {
              kernels::matmul_nt<1, Nk, Dh, false, Nq>(doh + i * D, D, v.out.data() + ko, D, ds.data(), Nk);
              kernels::softmax_backward_row<Nk>(a + i * Nk, ds.data(), score_scale);
              std::copy_n(ds.data(), Nk, a + i * Nk);
            }
          } else {
            kernels::matmul_nt<Nq, Nk, Dh>(doh, D, v.out.data() + ko, D, ds.data(), Nk);
            for (size_t i = 0; i < Nq; ++i) kernels::softmax_backward_row<Nk>(a + i * Nk, ds.data() + i * Nk, score_scale);
            dq_dk(ds.data(), dq_kept.data(), b, h);
          }
        }
      if constexpr (replay) {  // dq where dO was, then dxkv
        auto& dq = dheads_or_dxv.template start<Tensor<B, Nq, D>>();
        for (size_t b = 0; b < B; ++b)
          for (size_t h = 0; h < H; ++h) dq_dk(attn.data() + (b * H + h) * Nq * Nk, dq.data(), b, h);
        q.backward(p.q_proj(), grad.q_proj(), dq, dx.dq);
      }
      k.backward(p.k_proj(), grad.k_proj(), dk, dx.dkv);
      kernels::add_to<B * Nk * Dkv>(v.backward(p.v_proj(), grad.v_proj(), dv, dheads_or_dxv.template start<Tensor<B, Nk, Dkv>>()).data(), dx.dkv.data());
      if constexpr (!replay) q.backward(p.q_proj(), grad.q_proj(), dq_kept, dx.dq);
      return dx;
    }
  };

  // Row i of A_h (any head): all 0 exactly when query i sees no key, else it sums to 1.
  template <size_t Nk>
  static bool sees_a_key(const float* a_row) { return kernels::row_max<Nk>(a_row) > 0; }

  // The folded attention of batch row b, R = H·Nq: qk [R, Dkv] = [q_h Wk_h]_h, a [R, Nk] = A,
  // ax [R, Dkv] = A x, then o_h = ax_h Wv_hᵀ + bv_h into heads (ld D; heads may be q, which is
  // read first), 0 on the rows of queries that see no key. q: [Nq, D], x: [Nk, Dkv].
  template <size_t B, size_t Nq, size_t Nk>
  void fold(const float* q, const float* x, float* qk, float* a, float* ax, float* heads, size_t b, const Mask<B, Nk>& mask) const {
    constexpr size_t R = H * Nq;
    for (size_t h = 0; h < H; ++h)
      kernels::matmul_nn<Nq, Dkv, Dh>(q + h * Dh, D, k_proj().weight.data() + h * Dh * Dkv, Dkv, qk + h * Nq * Dkv, Dkv);
    kernels::matmul_nt<R, Nk, Dkv>(qk, Dkv, x, Dkv, a, Nk);
    for (size_t h = 0; h < H; ++h) masked_softmax<Nq>(a + h * Nq * Nk, b, 0, mask);
    kernels::matmul_nn<R, Dkv, Nk>(a, Nk, x, Dkv, ax, Dkv);
    for (size_t h = 0; h < H; ++h)
      kernels::matmul_nt<Nq, Dh, Dkv>(ax + h * Nq * Dkv, Dkv, v_proj().weight.data() + h * Dh * Dkv, Dkv, heads + h * Dh, D, 1.0f, v_proj().bias.data() + h * Dh);
    for (size_t i = 0; i < Nq; ++i)
      if (!sees_a_key<Nk>(a + i * Nk)) std::fill_n(heads + i * D, D, 0.0f);
  }

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
    using Dx = InputGrads<Tensor<B, Nq, Dq>, Tensor<B, Nk, Dkv>>;
    struct Workspace {
      Tensor<B, Nq, D> dheads, dq;
      Tensor<H, Nq, Dkv> dax, dqk;  // one batch row's
      Tensor<H, Nq, Nk> ds;         // one batch row's dA, then dS
    };

    template <class XQ, class XKV>
    const Tensor<B, Nq, D>& forward(const MultiHeadAttention& p, const XQ& xq, const XKV& x_kv, Mask<B, Nk> mask = {}) {
      check_inputs<B, Nq, Nk, XQ, XKV>();
      xkv = &x_kv;
      q.forward(p.q_proj(), xq);
      for (size_t b = 0; b < B; ++b)
        p.template fold<B, Nq, Nk>(q.out.data() + b * Nq * D, x_kv.data() + b * Nk * Dkv, qk.data() + b * R * Dkv, attn.data() + b * R * Nk,
                                   ax.data() + b * R * Dkv, heads.data() + b * Nq * D, b, mask);
      return o.forward(p.wo, heads);
    }

    Dx backward(const MultiHeadAttention& p, MultiHeadAttention& grad, const Tensor<B, Nq, D>& dout, Dx dx, Workspace& w) {
      auto& [dheads, dq, dax, dqk, ds] = w;
      o.backward(p.wo, grad.wo, dout, dheads);
      for (size_t b = 0; b < B; ++b) {
        const float* x = xkv->data() + b * Nk * Dkv;
        const float* a = attn.data() + b * R * Nk;
        for (size_t h = 0; h < H; ++h) {
          const float* doh = dheads.data() + b * Nq * D + h * Dh;
          kernels::matmul_nn<Nq, Dkv, Dh>(doh, D, p.v_proj().weight.data() + h * Dh * Dkv, Dkv, dax.data() + h * Nq * Dkv, Dkv);
          kernels::matmul_tn<Dh, Dkv, Nq>(doh, D, ax.data() + (b * R + h * Nq) * Dkv, Dkv, grad.v_proj().weight.data() + h * Dh * Dkv, Dkv);
        }
        for (size_t i = 0; i < Nq; ++i)
          if (sees_a_key<Nk>(a + i * Nk)) kernels::add_to<D>(dheads.data() + (b * Nq + i) * D, grad.v_proj().bias.data());
        kernels::matmul_nt<R, Nk, Dkv>(dax.data(), Dkv, x, Dkv, ds.data(), Nk);
        for (size_t r = 0; r < R; ++r) kernels::softmax_backward_row<Nk>(a + r * Nk, ds.data() + r * Nk, score_scale);
        float* dxb = dx.dkv.data() + b * Nk * Dkv;
        kernels::matmul_tn<Nk, Dkv, R, false>(a, Nk, dax.data(), Dkv, dxb, Dkv);
        kernels::matmul_tn<Nk, Dkv, R, true>(ds.data(), Nk, qk.data() + b * R * Dkv, Dkv, dxb, Dkv);
        kernels::matmul_nn<R, Dkv, Nk>(ds.data(), Nk, x, Dkv, dqk.data(), Dkv);
        for (size_t h = 0; h < H; ++h) {
          const float* dqkh = dqk.data() + h * Nq * Dkv;
          kernels::matmul_nt<Nq, Dh, Dkv>(dqkh, Dkv, p.k_proj().weight.data() + h * Dh * Dkv, Dkv, dq.data() + b * Nq * D + h * Dh, D);
          kernels::matmul_tn<Dh, Dkv, Nq>(q.out.data() + b * Nq * D + h * Dh, D, dqkh, Dkv, grad.k_proj().weight.data() + h * Dh * Dkv, Dkv);
        }
      }
      q.backward(p.q_proj(), grad.q_proj(), dq, dx.dq);
      return dx;
    }
  };

  template <size_t Nq, size_t Nk>
  static constexpr bool folds = Nq * D * Dkv + H * Nq * Nk * Dkv < Nk * Dkv * D + Nq * Nk * D;

  template <size_t B, size_t Nq, size_t Nk, Memory M = Memory::keep>
  using Acts = std::conditional_t<folds<Nq, Nk>, FoldedActs<B, Nq, Nk>, FullActs<B, Nq, Nk, M>>;

  // Forward only. The buffers of an attention besides its queries' rows (which the caller keeps,
  // and which become the output in place): Work<B, Nq, Nk, T>, with T the rows per tile of the
  // in-place projections (0 when there are none).
  // - FullWork: kᵀ of every head, kt [B, D, Nk] (rows h·Dh … (h+1)·Dh − 1 of a batch row's are
  //   k_hᵀ), v [B, Nk, D], and one tile: a block of scores [query_block, Nk] through the softmax
  //   (attend_block, as FullActs: the same bits), or T rows of a projection. Beyond
  //   max_key_tile keys the scores go in tiles of [query_block, 256] with an online softmax: per
  //   query row a running max m and sum l, and for each tile of keys (kernels::softmax_step)
  //     m' = max(m, max_j x_j),  l ← l·e^{s(m−m')} + Σ_j e^{s(x_j−m')},  o ← o·e^{s(m−m')} + Σ_j e^{s(x_j−m')} v_j
  //   then o/l (0 when every key is masked): nothing of size Nq × Nk, the same result up to
  //   float rounding.
  // - FoldedWork (few queries, folds): the caller's xkv, and qk, ax [H·Nq, Dkv], A [H·Nq, Nk]
  //   of one batch row (fold, as FoldedActs: the same bits).
  static constexpr size_t max_key_tile = 256;

  template <size_t B, size_t Nq, size_t Nk, size_t T>
  struct FullWork {
    static constexpr size_t QB = Nq < query_block ? Nq : query_block, KT = Nk < max_key_tile ? Nk : max_key_tile;
    static constexpr size_t online = KT < Nk ? QB * (Dh + 2) : 0;  // the online softmax's o [QB, Dh], m, l [QB]
    static constexpr size_t floats = std::max(QB * KT + online, T * D);
    static constexpr size_t rows = std::min(B * Nq, floats / D);  // rows per tile of the projections (at least T)
    Tensor<B, D, Nk> kt;
    Tensor<B, Nk, D> v;
    alignas(Tensor<1>) float tile[floats];
  };
  template <size_t B, size_t Nq, size_t Nk, size_t T>
  struct FoldedWork {
    const float* xkv;  // [B, Nk, Dkv], set by prepare
    Tensor<H * Nq, Dkv> qk, ax;
    Tensor<H * Nq, Nk> a;
    static constexpr size_t rows = T;  // rows per tile of the projections
    alignas(Tensor<1>) float tile[T * D > 0 ? T * D : 1];
  };
  template <size_t B, size_t Nq, size_t Nk, size_t T>
  using Work = std::conditional_t<folds<Nq, Nk>, FoldedWork<B, Nq, Nk, T>, FullWork<B, Nq, Nk, T>>;

  // The keys and values of xkv [B, Nk, Dkv] into w. FullWork: k and v projected (v holds k while
  // it is transposed into kt); FoldedWork: xkv itself, which must outlive the attention.
  // On the threads of pool (stformer/core/tensor.hpp: with_parts): the projections in parts of
  // rows, the transposes by batch row and head. The same bits for any pool.
  template <size_t B, size_t Nq, size_t Nk, size_t T, class Pool = Serial>
  void prepare(const float* xkv, Work<B, Nq, Nk, T>& w, Pool&& pool = Pool{}) const {
    if constexpr (folds<Nq, Nk>) {
      w.xkv = xkv;
    } else {
      k_proj().template apply_rows<B * Nk>(xkv, w.v.data(), pool);
      with_parts(pool, [&]<size_t Parts>() {
        if constexpr (Parts == 1)  // whole rows: W × W register tiles even where Dh < W
          for (size_t b = 0; b < B; ++b) kernels::transpose<D>(w.v.data() + b * Nk * D, D, Nk, w.kt.data() + b * D * Nk, Nk);
        else
          pool.run(B * H, [&](size_t i) {
            const size_t b = i / H, h = i % H;
            kernels::transpose<Dh>(w.v.data() + b * Nk * D + h * Dh, D, Nk, w.kt.data() + (b * D + h * Dh) * Nk, Nk);
          });
      });
      v_proj().template apply_rows<B * Nk>(xkv, w.v.data(), pool);
    }
  }

  // Whether a block of query rows may be split into parts of fewer rows with the same bits. What
  // depends on the row count R: the products' path (kernels::narrow<R, N>: R ≥ W and N < W), so
  // none of the block's products may be narrow (then none of the parts' are); softmax_rows and
  // softmax_step treat every row alike whatever R.
  template <size_t Nk, size_t Block, size_t KeyTile>
  static constexpr bool splits_rows = !kernels::narrow<Block, Nk> && !kernels::narrow<Block, Dh> && !kernels::narrow<Block, KeyTile> &&
                                      !kernels::narrow<Block, Nk % KeyTile == 0 ? KeyTile : Nk % KeyTile>;

  // q [B, Nq, D], the projected queries, ← concat_h(o_h) in place, against the keys of w. On the
  // threads of pool: every block of query rows in S parts, part s on thread s with its own rows
  // of the tile: scores from row s·Qb, and with the online softmax its o, m, l from s·Qb·(Dh + 2)
  // past the scores (S = 1 for the folded form). Qb = ⌈QB/S⌉ and a part has at most Qb rows; the
  // slices fit the tile because QB = 16 is a multiple of S = 2 or 4 when Nq ≥ 16, and below that
  // there is one block, of QB rows. The same bits for any pool.
  template <size_t B, size_t Nq, size_t Nk, size_t T, class Pool = Serial>
  void attend(float* q, Work<B, Nq, Nk, T>& w, const Mask<B, Nk>& mask, Pool&& pool = Pool{}) const {
    if constexpr (folds<Nq, Nk>) {
      for (size_t b = 0; b < B; ++b)
        fold<B, Nq, Nk>(q + b * Nq * D, w.xkv + b * Nk * Dkv, w.qk.data(), w.a.data(), w.ax.data(), q + b * Nq * D, b, mask);
    } else {
      using Wk = FullWork<B, Nq, Nk, T>;
      with_parts(pool, [&]<size_t Parts>() {
        constexpr size_t S1 = splits_rows<Nk, Wk::QB, Wk::KT> ? Parts : 1, Qb = part_rows<Wk::QB, S1>;
        pool.run(S1, [&](size_t s) {
          float* scores = w.tile + s * Qb * Wk::KT;
          for (size_t b = 0; b < B; ++b)
            for (size_t h = 0; h < H; ++h)
              for_tiles<Nq, query_block>([&]<size_t R>(size_t i0) {
                nth_part<R, part_rows<R, S1>>(s, [&]<size_t Rs>(size_t r0) {
                  const size_t i = i0 + r0;
                  float* qh = q + (b * Nq + i) * D + h * Dh;
                  const float* kth = w.kt.data() + (b * D + h * Dh) * Nk;
                  const float* vh = w.v.data() + b * Nk * D + h * Dh;
                  if constexpr (Wk::online == 0)
                    attend_block<Rs>(qh, kth, vh, scores, qh, b, i, mask);
                  else
                    online_block<Rs, Wk::KT>(qh, kth, vh, scores, w.tile + Wk::QB * Wk::KT + s * Qb * (Dh + 2), b, i, mask);
                });
              });
        });
      });
    }
  }

  // R queries i0 … of one head against Nk keys in tiles of C, online softmax (see above):
  // s [R, C] one tile's scores; acc: o [R, Dh], m [R], l [R]. qh ← o/l at the end.
  template <size_t R, size_t C, size_t B, size_t Nk>
  static void online_block(float* qh, const float* kth, const float* vh, float* s, float* acc, size_t b, size_t i0, const Mask<B, Nk>& mask) {
    float *o = acc, *m = acc + R * Dh, *l = m + R;
    for (size_t r = 0; r < R; ++r) {
      m[r] = kernels::neg_inf, l[r] = 0;
      kernels::fill<Dh>(o + r * Dh, 0.0f);
    }
    auto keys = [&]<size_t Cn>(size_t j0) {
      kernels::matmul_nn<R, Cn, Dh>(qh, D, kth + j0, Nk, s, Cn);
      mask_scores<R, Cn>(s, Cn, b, i0, j0, mask);
      float corr[R];
      kernels::softmax_step<R, Cn>(s, score_scale, m, l, corr);
      for (size_t r = 0; r < R; ++r)
        if (corr[r] != 1.0f) kernels::scale<Dh>(o + r * Dh, corr[r]);
      kernels::matmul_nn<R, Dh, Cn, true>(s, Cn, vh + j0 * D, D, o, Dh);
    };
    const auto seen = [&](size_t j0) { return !(mask.causal && j0 > i0 + R - 1); };  // causal: tiles past the last query are skipped
    size_t j0 = 0;
    for (; j0 + C <= Nk && seen(j0); j0 += C) keys.template operator()<C>(j0);
    if constexpr (Nk % C != 0)
      if (j0 + C > Nk && seen(j0)) keys.template operator()<Nk % C>(j0);
    for (size_t r = 0; r < R; ++r) {
      const float inv = l[r] > 0 ? 1 / l[r] : 0.0f;
      for (size_t j = 0; j < Dh; ++j) qh[r * D + j] = o[r * Dh + j] * inv;
    }
  }

  // residual [B, Nq, D] += MHA(x, keys of w) (Dq = D; x is overwritten: q, then the heads),
  // the projections Work::rows rows at a time through w.tile. For the blocks that keep a
  // residual stream (encoder, decoder, MAB): the same bits as adding MHA's output afterwards.
  template <size_t B, size_t Nq, size_t Nk, size_t T, class Pool = Serial>
  void forward_add(float* x, float* residual, Work<B, Nq, Nk, T>& w, const Mask<B, Nk>& mask, Pool&& pool = Pool{}) const {
    using Wk = Work<B, Nq, Nk, T>;
    q_proj().template apply_tiled<B * Nq, Wk::rows>(x, x, w.tile, pool);
    attend<B, Nq, Nk, T>(x, w, mask, pool);
    wo.template apply_tiled<B * Nq, Wk::rows, false, true>(x, residual, w.tile, pool);
  }

  // A decoding step (stformer/compose/decode.hpp; self-attention, Dq = Dkv = D): one row per
  // sequence, x [B, D], at position t = dec.position, reads itself and the rows before it, whose
  // keys and values are in its part of the cache: kᵀ and vᵀ [B, D, Lk] (transposed, Lk =
  // Decoding::keys(L) columns, L = dec.length):
  //   k[b, t] = x_b Wkᵀ + bk,  v[b, t] = x_b Wvᵀ + bv,  q_b = x_b Wqᵀ + bq
  //   o_{b,h} = Σ_{j ≤ t} softmax_j(s · q_{b,h}·k[b, j, h]) v[b, j, h]   (kernels::attend_cached)
  //   y_b = concat_h(o_{b,h}) Woᵀ + bo
  // the causal pass's last row, up to float rounding (the projections' sums in another order).
  // x becomes the queries, then the heads; y is written over x, or added into residual [B, D]
  // when it is not null. tile: T rows of the projections (Work::rows), then a key (then a value).
  template <size_t B, size_t T, class Pool = Serial>
  void decode(float* x, float* residual, float* tile, Decoding& dec, Pool&& pool = Pool{}) const {
    static_assert(Dq == D && Dkv == D, "MultiHeadAttention::decode: self-attention (Dq = Dkv = D)");
    const size_t t = dec.position;
    const auto kv = dec.take<float>(B, D, 1);
    for (size_t b = 0; b < B; ++b) {
      k_proj().template apply<1>(x + b * D, tile);
      kv.put_key(b, t, tile);
      v_proj().template apply<1>(x + b * D, tile);
      kv.put_value(b, t, tile);
    }
    q_proj().template apply_tiled<B, T>(x, x, tile, pool);
    for (size_t b = 0; b < B; ++b)
      for (size_t h = 0; h < H; ++h) {
        float* qh = x + b * D + h * Dh;  // q_{b,h}, then o_{b,h}
        kernels::attend_cached<Dh>(qh, kv.keys(b, h * Dh), kv.values(b, h * Dh), kv.columns, t + 1, score_scale, dec.score_row<float>(),
                                   qh);
      }
    if (residual)
      wo.template apply_tiled<B, T, false, true>(x, residual, tile, pool);
    else
      wo.template apply_tiled<B, T>(x, x, tile, pool);
  }
  // A decoding pass's prompt (N rows per sequence from position 0, their keys and values just
  // projected into w by prepare): k and v into rows 0 .. N − 1 of its part of the cache.
  template <size_t B, size_t N, size_t T>
  static void store(const Work<B, N, N, T>& w, Decoding& dec) {
    static_assert(!folds<N, N>, "MultiHeadAttention::store: self-attention's keys, projected (FullWork)");
    const auto kv = dec.take<float>(B, D, N);
    for (size_t b = 0; b < B; ++b) {
      for (size_t c = 0; c < D; ++c) std::copy_n(w.kt.data() + (b * D + c) * N, N, kv.keys(b, c));
      for (size_t j = 0; j < N; ++j) kv.put_value(b, j, w.v.data() + (b * N + j) * D);
    }
  }
  // The bytes of its part of a decoding pass's cache (Decoding::Part): kᵀ and vᵀ [B, D, Lk], float.
  static constexpr size_t cache_bytes(size_t batch, size_t length) { return Decoding::bytes<float>(batch, D, length); }

  // A cross-attention's memory for decoding (a decoder's, stformer/compose/memory.hpp), once
  // before the steps: the rows of xkv [B, M, Dkv] that the key mask keeps (all without one),
  // projected into its part of dec's memory (Decoding::MemoryPart), j' counting the kept rows:
  //   k[b, j'] = xkv[b, j] Wkᵀ + bk,  v[b, j'] = xkv[b, j] Wvᵀ + bv,  count[b] = the kept rows
  // (Decoding::MemoryPart::keep_rows). row: [D].
  template <size_t B, size_t M>
  void remember(const float* xkv, const KeyMask<B, M>* keys, float* row, Decoding& dec) const {
    const auto kv = dec.take_memory<float>(B, D, M);
    kv.keep_rows(keys, [&](size_t b, size_t j, size_t n) {
      k_proj().template apply<1>(xkv + (b * M + j) * Dkv, row);
      kv.put_key(b, n, row);
      v_proj().template apply<1>(xkv + (b * M + j) * Dkv, row);
      kv.put_value(b, n, row);
    });
  }
  // N query rows per sequence, x [B, N, Dq] (Dq = D), against the memory remembered: residual
  // [B, N, D] += MHA(x, memory), x overwritten (q, then the heads); o_{b,h} = 0 for a sequence
  // whose keys are all masked, as in the pass. tile: T rows of the projections (Work::rows).
  //   o_{b,i,h} = Σ_{j' < count[b]} softmax_j'(s · q_{b,i,h}·k[b, j', h]) v[b, j', h]
  template <size_t B, size_t N, size_t M, size_t T, class Pool = Serial>
  void decode_memory(float* x, float* residual, float* tile, Decoding& dec, Pool&& pool = Pool{}) const {
    static_assert(Dq == D, "MultiHeadAttention::decode_memory: the queries' width is the attention's (Dq = D)");
    const auto kv = dec.take_memory<float>(B, D, M);
    q_proj().template apply_tiled<B * N, T>(x, x, tile, pool);
    for (size_t b = 0; b < B; ++b)
      for (size_t i = 0; i < N; ++i)
        for (size_t h = 0; h < H; ++h) {
          float* qh = x + (b * N + i) * D + h * Dh;  // q_{b,i,h}, then o_{b,i,h}
          if (kv.count[b] == 0)
            kernels::fill<Dh>(qh, 0.0f);
          else
            kernels::attend_cached<Dh>(qh, kv.keys(b, h * Dh), kv.values(b, h * Dh), kv.columns, kv.count[b], score_scale,
                                       dec.score_row<float>(), qh);
        }
    wo.template apply_tiled<B * N, T, false, true>(x, residual, tile, pool);
  }
  // The bytes of its part of a decoding pass's memory (Decoding::MemoryPart), float.
  static constexpr size_t memory_bytes(size_t batch, size_t rows) { return Decoding::memory_bytes<float>(batch, D, rows); }

  // The whole block forward only: q (then the heads), the keys of Work, out. The same bits as
  // Acts::forward up to max_key_tile keys; beyond, the same up to float rounding.
  template <size_t B, size_t Nq, size_t Nk>
  struct Infer {
    Tensor<B, Nq, D> q;  // the projected queries, then concat_h(o_h)
    Work<B, Nq, Nk, 0> w;
    Tensor<B, Nq, D> out;

    // pool: the threads to run on (Serial, or a ThreadPool: the same bits).
    template <class XQ, class XKV, class Pool = Serial>
    const Tensor<B, Nq, D>& forward(const MultiHeadAttention& p, const XQ& xq, const XKV& xkv, Mask<B, Nk> mask = {}, Pool&& pool = Pool{}) {
      check_inputs<B, Nq, Nk, XQ, XKV>();
      p.q_proj().template apply_rows<B * Nq>(xq.data(), q.data(), pool);
      p.template prepare<B, Nq, Nk, 0>(xkv.data(), w, pool);
      p.template attend<B, Nq, Nk, 0>(q.data(), w, mask, pool);
      p.wo.template apply_rows<B * Nq>(q.data(), out.data(), pool);
      return out;
    }
  };
};

}  // namespace stformer
