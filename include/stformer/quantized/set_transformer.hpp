// QSetTransformer<In, D, H, M, Out>: SetTransformer in integers, from its input's quantization
// to its output's:
//   x_q = round(x / input_scale)                int16 [B, N, In]  (quantize_input)
//   h   = proj(x_q)                             int16 stream [B, N, D] at x_scale
//   h   = isab(h)                               QISAB, in place (its Hm: a stream of its own)
//   p   = pool(h)                               QPMA: int16 [B, 1, D] at pool.out_scale
//   y_q = head(p)                               int16 [B, 1, Out] at output_scale
// proj and head are QFineLinear (two int8 weight tensors each: the point is a sum of terms that
// cancel, and one int8 rounding of the head's weights moves it). output() dequantizes y_q into
// the float model's output (y = y_q · output_scale). Why int16 streams: as in the pointer model
// (quantized/encoder.hpp), every block's sum is carried at one scale, and the regressed point
// needs more than int8's 255 steps.
// Tensors: input_scale, x_scale, output_scale (F32 [1]), proj.*, isab.*, pool.*, head.*.
#pragma once

#include "../config.hpp"

#include <algorithm>
#include <cstdint>

#include "../models/set_transformer.hpp"
#include "isab.hpp"
#include "linear.hpp"
#include "pma.hpp"

namespace stformer::inline STFORMER_ABI {

template <size_t In, size_t D, size_t H, size_t M, size_t Out>
struct QSetTransformer {
  using Float = SetTransformer<In, D, H, M, Out>;
  Scale input_scale, x_scale, output_scale;
  QFineLinear<In, D> proj;
  QISAB<D, H, M> isab;
  QPMA<D, H, 1> pool;
  QFineLinear<D, Out> head;

  template <class F, class... S>
  static constexpr void visit(const Path& at, F& f, S&... s) {
    f(at / "input_scale", Init{Init::zeros}, s.input_scale...);
    f(at / "x_scale", Init{Init::zeros}, s.x_scale...);
    f(at / "output_scale", Init{Init::zeros}, s.output_scale...);
    stformer::visit(at / "proj", f, s.proj...);
    stformer::visit(at / "isab", f, s.isab...);
    stformer::visit(at / "pool", f, s.pool...);
    stformer::visit(at / "head", f, s.head...);
  }

  // Post-training quantization: ranges (max |·|) of the float model's activations over
  // calibration sets, then quantize. The stream x_scale covers proj's output and the ISAB's
  // sums on it (isab.mab2.residual).
  struct Ranges {
    float input = 0, output = 0;
    typename QISAB<D, H, M>::Ranges isab;
    typename QPMA<D, H, 1>::Ranges pool;

    // acts: the float model f's activations (Float::Acts) in a forward on the sets x.
    template <class A, class X>
    void observe(const Float& f, const A& acts, const X& x) {
      input = std::max(input, quant::max_abs(x));
      isab.observe(f.template get<"isab">(), acts.template at<"isab">(), acts.template at<"proj">().out);
      pool.observe(f.template get<"pool">(), acts.template at<"pool">());
      output = std::max(output, quant::max_abs(acts.template at<"head">().out));
    }
  };

  void set_multipliers() {
    proj.set_multipliers(input_scale(0), x_scale(0));
    isab.set_multipliers(x_scale(0));
    pool.set_multipliers();
    head.set_multipliers(pool.out_scale(0), output_scale(0));
  }

  static QSetTransformer quantize(const Float& f, const Ranges& r) {
    QSetTransformer q;
    q.input_scale(0) = quant::int16_scale(r.input);
    q.x_scale(0) = quant::int16_scale(r.isab.mab2.residual);
    q.output_scale(0) = quant::int16_scale(r.output);
    q.proj = QFineLinear<In, D>::quantize(f.template get<"proj">(), q.input_scale(0), q.x_scale(0));
    q.isab = QISAB<D, H, M>::quantize(f.template get<"isab">(), r.isab, q.x_scale(0));
    q.pool = QPMA<D, H, 1>::quantize(f.template get<"pool">(), r.pool);
    q.head = QFineLinear<D, Out>::quantize(f.template get<"head">(), q.pool.out_scale(0), q.output_scale(0));
    return q;
  }

  // Forward only: the input x_q, the stream h [B, N, D], the pooled row [B, 1, D] and the
  // output y_q [B, 1, Out] (int16), the accumulators of proj and head [T, D], and one arena of
  // two phases: the ISAB's work (Hm, mab1's, then mab2's), then the pool's.
  template <size_t B, size_t N, size_t T = qtile_rows(B * (N > M ? N : M))>
  struct Infer {
    using IsabWork = typename QISAB<D, H, M>::template Work<B, N, T>;
    using PoolWork = typename QPMA<D, H, 1>::template Work<B, N, T>;
    TensorOf<std::int16_t, B, N, In> x;
    TensorOf<std::int16_t, B, N, D> h;
    TensorOf<std::int16_t, B, 1, D> pooled;
    TensorOf<std::int16_t, B, 1, Out> y;
    TensorOf<std::int32_t, T, (D > Out ? D : Out)> acc;
    Phases<IsabWork, PoolWork> phase;

    template <class X>
    void quantize_input(const QSetTransformer& p, const X& in) {
      static_assert(shape_is<X, B, N, In>, "QSetTransformer: input set x must be [B, N, In] (the pass's sizes, the model's input width In)");
      quant::quantize_input(in.data(), B * N * In, p.input_scale(0), x.data());
    }

    // y_q [B, 1, Out] of the quantized input x (set it, or quantize_input): integers only.
    const TensorOf<std::int16_t, B, 1, Out>& forward(const QSetTransformer& p, const KeyMask<B, N>* keys = nullptr) {
      for_tiles<B * N, T>([&]<size_t R>(size_t i) { p.proj.template add_to<R, true>(x.data() + i * In, acc.data(), h.data() + i * D); });
      p.isab.forward_in_place(h, phase.template start<IsabWork>(), keys);
      p.pool.forward_into(h, pooled, phase.template start<PoolWork>(), keys);
      for_tiles<B, T>([&]<size_t R>(size_t i) { p.head.template add_to<R, true>(pooled.data() + i * D, acc.data(), y.data() + i * Out); });
      return y;
    }

    // The same from float sets x [B, N, In].
    template <class X>
    const TensorOf<std::int16_t, B, 1, Out>& forward(const QSetTransformer& p, const X& in, const KeyMask<B, N>* keys = nullptr) {
      quantize_input(p, in);
      return forward(p, keys);
    }

    // y = y_q · output_scale: the float model's output from the last forward (the output's
    // dequantization, float).
    void output(const QSetTransformer& p, Tensor<B, 1, Out>& out) const {
      for (size_t i = 0; i < B * Out; ++i) out.data()[i] = float(y.data()[i]) * p.output_scale(0);
    }
  };
};

}  // namespace stformer
