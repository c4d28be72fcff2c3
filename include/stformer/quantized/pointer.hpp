// QPointerAttention<Dq, Dk, Da>: PointerAttention's scores in integers, int8 rows in (the keys'
// rows int8 or int16):
//   q_q = QLinear(xq_q) at q_scale,  k_q = QLinear(xk_q) at k_scale          (int8)
//   logits[b, i, j] = q_q,i · k_q,j                                           (int32)
// at the real scale q_scale·k_scale / √Da (logit_scale), masked keys at INT32_MIN. The
// log-softmax is left to the model's float end (DequantizeLogits, below): its arg-max is the
// logits'. Tensors: wq, wk (QLinear), q_scale, k_scale (F32 [1]).
#pragma once

#include "../core/config.hpp"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>

#include "../blocks/pointer.hpp"
#include "../compose/sequential.hpp"
#include "combinators.hpp"
#include "../kernels/rowwise.hpp"
#include "linear.hpp"

namespace stformer::inline STFORMER_ABI {

struct DequantizeLogits;
template <size_t Dq, size_t Dk, size_t Da>
struct QPointerAttention {
  using Float = PointerAttention<Dq, Dk, Da>;
  using Finish = DequantizeLogits;  // the float end of a model ending in the logits
  template <size_t B, size_t Nq, size_t Nk>
  using Output = TensorOf<std::int32_t, B, Nq, Nk>;
  QLinear<Dq, Da> wq;
  QLinear<Dk, Da> wk;
  Scale q_scale, k_scale;

  template <class F, class... S>
  static constexpr void visit(const Path& at, F& f, S&... s) {
    stformer::visit(at / "wq", f, s.wq...);
    stformer::visit(at / "wk", f, s.wk...);
    f(at / "q_scale", Init{Init::zeros}, s.q_scale...);
    f(at / "k_scale", Init{Init::zeros}, s.k_scale...);
  }

  struct Ranges {
    float q = 0, k = 0;
    template <class A>
    void observe(const Float&, const A& acts) {
      q = std::max(q, quant::max_abs(acts.q.out)), k = std::max(k, quant::max_abs(acts.k.out));
    }
  };

  static QPointerAttention quantize(const Float& f, const Ranges& r, float s_xq, float s_xk) {
    QPointerAttention q;
    q.q_scale(0) = quant::scale_for(r.q), q.k_scale(0) = quant::scale_for(r.k);
    q.wq = QLinear<Dq, Da>::quantize(f.wq, s_xq, q.q_scale(0));
    q.wk = QLinear<Dk, Da>::quantize(f.wk, s_xk, q.k_scale(0));
    return q;
  }

  // The real value of one unit of the logits (host side).
  double logit_scale() const { return double(q_scale(0)) * k_scale(0) / std::sqrt(double(Da)); }

  // Forward only: logits [B, Nq, Nk] (int32) of the queries' rows xq [B, Nq, Dq] (int8) and the
  // keys' rows xk [B, Nk, Dk]. Work: q [B, Nq, Da] (int8), and T rows at a time the
  // projections' accumulators and the keys k [T, Da] (int8), each tile of keys scored as soon
  // as it is projected, so that the keys are never all held at once.
  template <size_t B, size_t Nq, size_t Nk, size_t T = qtile_rows(B * Nk)>
  struct Work {
    TensorOf<std::int8_t, B, Nq, Da> q;
    TensorOf<std::int8_t, T, Da> k;
    TensorOf<std::int32_t, T, Da> acc;
  };

  template <size_t B, size_t Nq, size_t Nk, size_t T, class XK>
  void score(const std::int8_t* xq, const XK* xk, std::int32_t* logits, Work<B, Nq, Nk, T>& w, const KeyMask<B, Nk>* keys = nullptr) const {
    for_tiles<B * Nq, T>([&]<size_t R>(size_t i) { wq.template apply<R>(xq + i * Dq, w.acc.data(), w.q.data() + i * Da); });
    for (size_t b = 0; b < B; ++b) {
      std::int32_t* l = logits + b * Nq * Nk;
      for_tiles<Nk, T>([&]<size_t R>(size_t j) {
        wk.template apply<R>(xk + (b * Nk + j) * Dk, w.acc.data(), w.k.data());
        kernels::qmatmul_nt<Nq, R, Da>(w.q.data() + b * Nq * Da, Da, w.k.data(), Da, l + j, Nk);
      });
      if (keys)
        for (size_t i = 0; i < Nq; ++i)
          for (size_t j = 0; j < Nk; ++j)
            if (!(*keys)(b, j)) l[i * Nk + j] = INT32_MIN;
    }
  }

  template <size_t B, size_t Nq, size_t Nk>
  struct Infer {
    TensorOf<std::int32_t, B, Nq, Nk> logits;
    Work<B, Nq, Nk> w;

    template <class XK>
    const TensorOf<std::int32_t, B, Nq, Nk>& forward(const QPointerAttention& p, const std::int8_t* xq, const XK* xk,
                                                      const KeyMask<B, Nk>* keys = nullptr) {
      p.score(xq, xk, logits.data(), w, keys);
      return logits;
    }
  };
};

template <size_t Dq, size_t Dk, size_t Da>
struct Int8Of<PointerAttention<Dq, Dk, Da>> {
  using type = QPointerAttention<Dq, Dk, Da>;
};

// DequantizeLogits: the pointer's logits [B, 1, N] (int32, at `scale`) to the float model's
// output, logp = log_softmax(scale · logits) row by row, masked keys (INT32_MIN) at −∞. It takes
// whatever the step before gives (OutputFrom: the logits' shape, in float). Tensors: scale F32 [1].
struct DequantizeLogits {
  Scale scale;

  template <class F, class... S>
  static constexpr void visit(const Path& at, F& f, S&... s) {
    f(at / "scale", Init{Init::zeros}, s.scale...);
  }

  template <class X>
  using OutputFrom = typename quant::FloatOf<X>::type;
  template <class X, size_t B, size_t N, class Pool>
  void run(const X& logits, OutputFrom<X>& logp, Nothing, const Mask<B, N>&, Pool&&) const {
    static_assert(std::is_same_v<typename X::value_type, std::int32_t>, "DequantizeLogits: int32 logits in");
    constexpr size_t W = dims<X>.back();
    for (size_t i = 0; i < logits.size(); ++i) logp.data()[i] = logits.data()[i] == INT32_MIN ? kernels::neg_inf : float(logits.data()[i]) * scale(0);
    for (size_t r = 0; r < logits.size() / W; ++r) kernels::log_softmax_row<W>(logp.data() + r * W);
  }
};

}  // namespace stformer
