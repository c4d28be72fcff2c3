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
#include "linear.hpp"
#include "scalenorm.hpp"

namespace stformer::inline STFORMER_ABI {

template <size_t Dq, size_t Dk, size_t Da>
struct PointerAttention {
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
// x [B, N, D] -> logp [B, 1, N]. A step of a Sequential (stformer/compose/sequential.hpp); its
// scratch holds the queries and the pointer's work. Parameters: query [1, D] (Xavier-normal),
// sn_q.g, pointer.*.
// In integers (P = precision::int8) from an int16 stream x: logits = QPointerAttention(q, x),
// int32 [B, 1, N], masked keys at INT32_MIN (their arg-max is the point predicted); q =
// ScaleNorm(query) is made once and stored in int8 at query_scale (no sn_q). The quantized model
// ends with its Finish, DequantizeLogits: the float model's log-probabilities. Parameters: query
// I8 [1, D], query_scale F32 [1], pointer.* (QPointerAttention's).
struct DequantizeLogits;
template <size_t D, class P = precision::float32>
struct PointerHead {
  using Float = PointerHead<D>;
  using Pointer = typename P::template Of<PointerAttention<D, D, D>>;
  using Logit = std::conditional_t<P::integer, std::int32_t, float>;
  using Finish = DequantizeLogits;  // the float end of the integer head (stformer/quantized/quantize.hpp)
  TensorOf<typename P::template Row<8>, 1, D> query;
  [[no_unique_address]] std::conditional_t<P::integer, Nothing, ScaleNorm<D>> sn_q;
  [[no_unique_address]] std::conditional_t<P::integer, Scale, Nothing> query_scale;
  Pointer pointer;

  template <class Fn, class... S>
  static constexpr void visit(const Path& at, Fn& f, S&... s) {
    f(at / "query", Init{P::integer ? Init::zeros : Init::xavier_normal}, s.query...);
    if constexpr (P::integer)
      f(at / "query_scale", Init{Init::zeros}, s.query_scale...);
    else
      stformer::visit(at / "sn_q", f, s.sn_q...);
    stformer::visit(at / "pointer", f, s.pointer...);
  }

  template <size_t B, size_t N>
  using Input = TensorOf<typename P::Stream, B, N, D>;
  template <size_t B, size_t N>
  using Output = TensorOf<Logit, B, 1, N>;
  template <size_t B, size_t N, size_t Room>
  struct Scratch {
    TensorOf<typename P::template Row<8>, B, 1, D> queries;  // q for every batch row
    typename Pointer::template Work<B, 1, N> pointer;
  };
  template <size_t B, size_t N, size_t Room, class Pool>
  void run(const Input<B, N>& x, Output<B, N>& logp, Scratch<B, N, Room>& w, const Mask<B, N>& mask, Pool&&) const {
    for (size_t b = 0; b < B; ++b) std::copy(query.begin(), query.end(), w.queries.begin() + b * D);
    if constexpr (!P::integer) sn_q.template apply<B>(w.queries.data(), w.queries.data());
    pointer.score(w.queries.data(), x.data(), logp.data(), w.pointer, mask.keys);
  }

  // In integers, made from the float head: the keys' stream at s_x in, the logits out at
  // output_scale().
  static constexpr bool same_scale = false;
  struct Ranges {
    typename Pointer::Ranges pointer;
    template <class A, class X, class Y>
    void observe(const Float& f, const A& acts, const X&, const Y&) {
      pointer.observe(f.pointer, acts.pointer);
    }
  };
  void from_float(const Float& f, const Ranges& r, float s_x, float) {
    typename ScaleNorm<D>::template Infer<1> q;  // sn_q(query), once
    query_scale(0) = quant::scale_for(quant::max_abs(q.forward(f.sn_q, f.query)));
    quant::quantize(q.out.data(), D, query_scale(0), query.data());
    pointer = Pointer::quantize(f.pointer, r.pointer, query_scale(0), s_x);
  }
  float output_scale() const { return float(pointer.logit_scale()); }

  template <size_t B, size_t N>
  struct Acts {
    Tensor<B, 1, D> q;  // the learned query repeated over the batch
    ActsOf<ScaleNorm<D>, B, 1> sn_q;
    ActsOf<PointerAttention<D, D, D>, B, 1, N> pointer;
    using Dx = Tensor<B, N, D>;
    struct Workspace {
      Tensor<B, 1, D> dq, dsq;  // dL/d(sn_q(q)), dL/dq
      WorkspaceOf<decltype(pointer)> part;
    };

    // As a step of a chain: the pass's key mask (the causal flag is not read).
    template <class X>
    const Tensor<B, 1, N>& forward(const PointerHead& p, const X& x, const Mask<B, N>& mask) {
      return forward(p, x, mask.keys);
    }
    template <class X>
    const Tensor<B, 1, N>& forward(const PointerHead& p, const X& x, const KeyMask<B, N>* keys = nullptr) {
      static_assert(shape_is<X, B, N, D>, "PointerHead: rows x must be [B, N, D] (the pass's sizes, the head's width D)");
      for (size_t b = 0; b < B; ++b) std::copy(p.query.begin(), p.query.end(), q.begin() + b * D);
      return pointer.forward(p.pointer, sn_q.forward(p.sn_q, q), x, keys);
    }

    // dquery += Σ_b (sn_qᵀ dq)[b]; returns dL/dx.
    const Tensor<B, N, D>& backward(const PointerHead& p, PointerHead& grad, const Tensor<B, 1, N>& dlogp, Tensor<B, N, D>& dx, Workspace& ws) {
      pointer.backward(p.pointer, grad.pointer, dlogp, {ws.dq, dx}, ws.part);
      const auto& dq = sn_q.backward(p.sn_q, grad.sn_q, ws.dq, ws.dsq);
      for (size_t b = 0; b < B; ++b) kernels::add_to<D>(dq.data() + b * D, grad.query.data());
      return dx;
    }
  };
};

// Its integer form (stformer/quantized/quantize.hpp): the same head at precision::int8.
template <size_t D>
struct Int8Of<PointerHead<D>> {
  using type = PointerHead<D, precision::int8>;
};

}  // namespace stformer
