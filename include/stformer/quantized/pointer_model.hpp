// QPointerModel<In, D, H, F, Blocks>: PointerModel in integers, from its input's quantization
// to its logits:
//   x_q = round(x / input_scale)                   int16 [B, N, In]  (quantize_input; the input
//                                                  coordinates need more than int8's 255 steps)
//   h   = proj(x_q)                                int16 residual stream at residual_scale
//   h   = blocks.i(h)                              QEncoderBlock, in place
//   keys = sn_v(h)                                 int8
//   logits = pointer(query, keys)                  int32 [B, 1, N]
// The learned query and sn_q are both parameters, so sn_q(query) is computed once, when the
// model is quantized, and stored quantized: `query` I8 [1, D] at query_scale. log_probs
// dequantizes the logits into the float model's output (log-probabilities; a float
// log-softmax on the host), argmax reads the integers. Tensors: input_scale, residual_scale
// (F32 [1]), proj.*, blocks.i.*, sn_v.*, query, query_scale, pointer.* (the blocks' headers).
#pragma once

#include "../config.hpp"

#include <algorithm>
#include <array>
#include <cstdint>

#include "../kernels/rowwise.hpp"
#include "../models/pointer_model.hpp"
#include "encoder.hpp"
#include "linear.hpp"
#include "pointer.hpp"
#include "scalenorm.hpp"

namespace stformer::inline STFORMER_ABI {

template <size_t In, size_t D, size_t H, size_t F, size_t Blocks>
struct QPointerModel {
  using Float = PointerModel<In, D, H, F, Blocks>;
  using Block = QEncoderBlock<D, H, F>;
  Scale input_scale, residual_scale;
  QLinear<In, D> proj;
  std::array<Block, Blocks> blocks;
  QScaleNorm<D> sn_v;
  TensorOf<std::int8_t, 1, D> query;
  Scale query_scale;
  QPointerAttention<D, D, D> pointer;

  template <class Fn, class... S>
  static constexpr void visit(const Path& at, Fn& f, S&... s) {
    f(at / "input_scale", Init{Init::zeros}, s.input_scale...);
    f(at / "residual_scale", Init{Init::zeros}, s.residual_scale...);
    stformer::visit(at / "proj", f, s.proj...);
    stformer::visit(at / "blocks", f, s.blocks...);
    stformer::visit(at / "sn_v", f, s.sn_v...);
    f(at / "query", Init{Init::zeros}, s.query...);
    f(at / "query_scale", Init{Init::zeros}, s.query_scale...);
    stformer::visit(at / "pointer", f, s.pointer...);
  }

  // Post-training quantization: ranges (max |·|) of the float model's activations, observed
  // over calibration sets, then quantize. Symmetric scales: max/127 (int8), max/32767 (int16).
  struct Ranges {
    float input = 0, residual = 0, keys = 0, query = 0;
    std::array<typename Block::Ranges, Blocks> blocks;
    typename QPointerAttention<D, D, D>::Ranges pointer;

    // acts: the float model f's activations (Float::Acts) in a forward on the sets x.
    template <class A, class X>
    void observe(const Float& f, const A& acts, const X& x) {
      input = std::max(input, quant::max_abs(x));
      residual = std::max(residual, quant::max_abs(acts.template at<"proj">().out));
      for (size_t i = 0; i < Blocks; ++i) {
        blocks[i].observe(f.template get<"blocks">()[i], acts.template at<"blocks">().blocks[i]);
        residual = std::max(residual, blocks[i].residual);
      }
      keys = std::max(keys, quant::max_abs(acts.template at<"sn_v">().out));
      query = std::max(query, quant::max_abs(acts.template at<"">().sn_q.out));
      pointer.observe(f.template get<"">().pointer, acts.template at<"">().pointer);
    }
  };

  void set_multipliers() {
    proj.set_multipliers(input_scale(0), residual_scale(0));
    for (auto& b : blocks) b.set_multipliers(residual_scale(0));
    sn_v.set_multipliers();
    pointer.set_multipliers(query_scale(0), sn_v.out_scale(0));
  }

  static QPointerModel quantize(const Float& f, const Ranges& r) {
    QPointerModel q;
    q.input_scale(0) = quant::scale_for(r.input, 32767);
    q.residual_scale(0) = quant::scale_for(r.residual, 32767);
    q.proj = QLinear<In, D>::quantize(f.template get<"proj">(), q.input_scale(0), q.residual_scale(0));
    for (size_t i = 0; i < Blocks; ++i) q.blocks[i] = Block::quantize(f.template get<"blocks">()[i], r.blocks[i], q.residual_scale(0));
    q.sn_v = QScaleNorm<D>::quantize(f.template get<"sn_v">(), quant::scale_for(r.keys));
    typename ScaleNorm<D>::template Infer<1> sn_q;  // sn_q(query), once
    q.query_scale(0) = quant::scale_for(quant::max_abs(sn_q.forward(f.template get<"">().sn_q, f.template get<"">().query)));
    quant::quantize(sn_q.out.data(), D, q.query_scale(0), q.query.data());
    q.pointer = QPointerAttention<D, D, D>::quantize(f.template get<"">().pointer, r.pointer, q.query_scale(0), q.sn_v.out_scale(0));
    q.set_multipliers();
    return q;
  }

  // Forward only: the input x_q, the residual stream h [B, N, D] (int16), one block's work (its
  // a [B, N, D] then holds the keys), the queries and the pointer's pass.
  template <size_t B, size_t N, size_t T = qtile_rows(B * N)>
  struct Infer {
    using BlockWork = typename Block::template Work<B, N, T>;
    TensorOf<std::int16_t, B, N, In> x;
    TensorOf<std::int16_t, B, N, D> h;
    BlockWork w;
    TensorOf<std::int8_t, B, 1, D> queries;
    typename QPointerAttention<D, D, D>::template Infer<B, 1, N, T> pointer;

    // x_q = round(x / input_scale), saturated: the input's quantization (float).
    template <class X>
    void quantize_input(const QPointerModel& p, const X& in) {
      static_assert(shape_is<X, B, N, In>, "QPointerModel: input set x must be [B, N, In] (the pass's sizes, the model's input width In)");
      quant::quantize_input(in.data(), B * N * In, p.input_scale(0), x.data());
    }

    // logits [B, 1, N] of the quantized input x (set it, or quantize_input): integers only.
    const TensorOf<std::int32_t, B, 1, N>& forward(const QPointerModel& p, const KeyMask<B, N>* keys = nullptr) {
      static_assert(D <= F, "QPointerModel: proj takes the blocks' feed-forward accumulators [T, F] for its [T, D]");
      auto& acc = w.phase.template start<typename BlockWork::FfnWork>().acc;  // proj's accumulators, before the blocks' phases
      for_tiles<B * N, T>([&]<size_t R>(size_t i) { p.proj.template add_to<R, true>(x.data() + i * In, acc.data(), h.data() + i * D); });
      for (size_t i = 0; i < Blocks; ++i) p.blocks[i].forward_in_place(h, w, Mask<B, N>{.keys = keys});
      p.sn_v.template apply<B * N>(h.data(), w.a.data());
      for (size_t b = 0; b < B; ++b) std::copy(p.query.begin(), p.query.end(), queries.begin() + b * D);
      return pointer.forward(p.pointer, queries.data(), w.a.data(), keys);
    }

    // The same from float sets x [B, N, In].
    template <class X>
    const TensorOf<std::int32_t, B, 1, N>& forward(const QPointerModel& p, const X& in, const KeyMask<B, N>* keys = nullptr) {
      quantize_input(p, in);
      return forward(p, keys);
    }

    // logp [B, 1, N] = log_softmax(logits · logit_scale), masked keys at −∞: the float model's
    // output from the last forward (the output's dequantization, float).
    void log_probs(const QPointerModel& p, Tensor<B, 1, N>& logp) const {
      const float s = float(p.pointer.logit_scale());
      for (size_t i = 0; i < B * N; ++i) {
        const std::int32_t v = pointer.logits.data()[i];
        logp.data()[i] = v == INT32_MIN ? kernels::neg_inf : float(v) * s;
      }
      for (size_t b = 0; b < B; ++b) kernels::log_softmax_row<N>(logp.data() + b * N);
    }
  };
};

}  // namespace stformer
