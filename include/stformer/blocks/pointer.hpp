// PointerAttention<Dq, Dk, Da> (Vinyals et al. 2015): log-probabilities over keys,
//   logp = log_softmax((q Wqᵀ + bq)(k Wkᵀ + bk)ᵀ / sqrt(Da))     q [B, Nq, Dq], k [B, Nk, Dk]
// -> [B, Nq, Nk]. A masked key gets log-probability −∞ (probability exactly 0); a row whose
// keys are all masked is all −∞.
//   backward: dS = (dlogp − exp(logp) Σ dlogp) / sqrt(Da);  dq = dS k,  dk = dSᵀ q; then the
//   projections' backward, which returns {dq = dL/dq, dkv = dL/dk}. Parameters: wq.*, wk.*
//   (Xavier-normal, zero bias).
#pragma once

#include "../core/config.hpp"
#include "../core/precision.hpp"

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "../kernels/matmul.hpp"
#include "../kernels/rowwise.hpp"
#include "../compose/combinators.hpp"
#include "linear.hpp"
#include "scalenorm.hpp"

namespace stformer::inline STFORMER_ABI {

template <size_t Dq, size_t Dk, size_t Da>
struct PointerAttention {
  static std::string declaration() { return declare("PointerAttention", Dq, Dk, Da); }
  static constexpr size_t key_width = Dk;
  template <size_t B, size_t Nq, size_t Nk>
  using Output = Tensor<B, Nq, Nk>;
  Linear<Dq, Da> wq;
  Linear<Dk, Da> wk;

  template <class F, class... S>
  static constexpr void visit(const Path& at, F& f, S&... s) {
    stformer::visit(at / "wq", f, s.wq...);
    stformer::visit(at / "wk", f, s.wk...);
  }

  template <size_t B, size_t Nq, size_t Nk, class XQ, class XK>
  static constexpr void check_inputs() {
    static_assert(shape_is<XQ, B, Nq, Dq>, "PointerAttention: queries q must be [B, Nq, Dq] (the pass's sizes, the block's query width Dq)");
    static_assert(shape_is<XK, B, Nk, Dk>, "PointerAttention: keys k must be [B, Nk, Dk] (the pass's sizes, the block's key width Dk)");
  }

  // logp[b] ← log_softmax(s · q[b] k[b]ᵀ, masked keys at −∞) from the projected q [B, Nq, Da]
  // and k [B, Nk, Da]: the one scoring step of Acts and Infer.
  template <size_t B, size_t Nq, size_t Nk>
  static void score_projected(const float* q, const float* k, float* logp, const KeyMask<B, Nk>* keys) {
    for (size_t b = 0; b < B; ++b) {
      float* l = logp + b * Nq * Nk;
      kernels::matmul_nt<Nq, Nk, Da>(q + b * Nq * Da, Da, k + b * Nk * Da, Da, l, Nk, inv_sqrt(Da));
      for (size_t i = 0; i < Nq; ++i) {
        if (keys)
          for (size_t j = 0; j < Nk; ++j)
            if (!(*keys)(b, j)) l[i * Nk + j] = kernels::neg_inf;
        kernels::log_softmax_row<Nk>(l + i * Nk);
      }
    }
  }

  // Forward only: logp [B, Nq, Nk] of the queries' rows xq [B, Nq, Dq] and the keys' xk
  // [B, Nk, Dk] (the same bits as Acts); Work: q, k projected (QPointerAttention's interface: T
  // is its tile).
  template <size_t B, size_t Nq, size_t Nk, size_t T = 0>
  struct Work {
    Tensor<B, Nq, Da> q;
    Tensor<B, Nk, Da> k;
  };
  template <size_t B, size_t Nq, size_t Nk, size_t T>
  void score(const float* xq, const float* xk, float* logp, Work<B, Nq, Nk, T>& w, const KeyMask<B, Nk>* keys = nullptr) const {
    wq.template apply<B * Nq>(xq, w.q.data());
    wk.template apply<B * Nk>(xk, w.k.data());
    score_projected<B, Nq, Nk>(w.q.data(), w.k.data(), logp, keys);
  }

  template <size_t B, size_t Nq, size_t Nk>
  struct Infer {
    Tensor<B, Nq, Nk> logp;
    Work<B, Nq, Nk> w;

    template <class XQ, class XK>
    const Tensor<B, Nq, Nk>& forward(const PointerAttention& p, const XQ& xq, const XK& xk, const KeyMask<B, Nk>* keys = nullptr) {
      check_inputs<B, Nq, Nk, XQ, XK>();
      p.score(xq.data(), xk.data(), logp.data(), w, keys);
      return logp;
    }
  };

  template <size_t B, size_t Nq, size_t Nk>
  struct Acts {
    ActsOf<Linear<Dq, Da>, B, Nq> q;
    ActsOf<Linear<Dk, Da>, B, Nk> k;
    Tensor<B, Nq, Nk> logp;
    using Dx = InputGrads<Tensor<B, Nq, Dq>, Tensor<B, Nk, Dk>>;
    struct Workspace {
      Tensor<B, Nq, Nk> ds;
      Tensor<B, Nq, Da> dq;
      Tensor<B, Nk, Da> dk;
    };

    template <class XQ, class XK>
    const Tensor<B, Nq, Nk>& forward(const PointerAttention& p, const XQ& xq, const XK& xk, const KeyMask<B, Nk>* keys = nullptr) {
      check_inputs<B, Nq, Nk, XQ, XK>();
      q.forward(p.wq, xq);
      k.forward(p.wk, xk);
      score_projected<B, Nq, Nk>(q.out.data(), k.out.data(), logp.data(), keys);
      return logp;
    }

    Dx backward(const PointerAttention& p, PointerAttention& grad, const Tensor<B, Nq, Nk>& dlogp, Dx dx, Workspace& ws) {
      auto& [ds, dq, dk] = ws;
      ds = dlogp;
      for (size_t b = 0; b < B; ++b) {
        float* d = ds.data() + b * Nq * Nk;
        for (size_t i = 0; i < Nq; ++i) {
          kernels::log_softmax_backward_row<Nk>(logp.data() + b * Nq * Nk + i * Nk, d + i * Nk);
          kernels::scale<Nk>(d + i * Nk, inv_sqrt(Da));
        }
        kernels::matmul_nn<Nq, Da, Nk>(d, Nk, k.out.data() + b * Nk * Da, Da, dq.data() + b * Nq * Da, Da);
        kernels::matmul_tn<Nk, Da, Nq, false>(d, Nk, q.out.data() + b * Nq * Da, Da, dk.data() + b * Nk * Da, Da);
      }
      q.backward(p.wq, grad.wq, dq, dx.dq);
      k.backward(p.wk, grad.wk, dk, dx.dkv);
      return dx;
    }
  };
};

// PointerHead<D>: the head of SPEC's pointer model, a learned query pointing at the rows,
//   q = ScaleNorm(query) [1, D] for every batch row,  logp = PointerAttention<D, D, D>(q, x)
// x [B, N, D] -> logp [B, 1, N], declared with the combinators (stformer/compose/): SeedQuery,
// its plan, record, backward, names and int8 form (QSeedQuery: q = ScaleNorm(query) made once
// and stored in int8 at query_scale, logits = QPointerAttention(q, x) int32 [B, 1, N], masked
// keys at INT32_MIN; the quantized model ends with DequantizeLogits, the float model's
// log-probabilities). The pass's key mask reaches the pointer; its causal flag is not read.
// Parameters: query [1, D] (Xavier-normal), sn_q.g, pointer.*; in integers query I8 [1, D],
// query_scale F32 [1], pointer.* (QPointerAttention's).
template <size_t D>
using PointerHead = SeedQuery<"query", 1, Named<"sn_q", ScaleNorm<D>>, Named<"pointer", PointerAttention<D, D, D>>>;

}  // namespace stformer
