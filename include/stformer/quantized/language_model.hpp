// QLanguageModel<V, L, D, H, F, Blocks>: LanguageModel in integers, from the token ids to the
// logits:
//   h      = embedding(ids) + pe                 int16 stream [B, L, D] at residual_scale
//            (QEmbedding: each int8 row rescaled into the stream by its own multiplier; pe: the
//            positional encoding stored in int16 at the same scale, added saturating)
//   h      = blocks.i(h)                         QEncoderBlock, in place (no mask, as the float model)
//   pooled = pool(h)                             QPMA: int16 [B, 1, D] at pool.out_scale
//   p8     = apply(pooled, to_head)              int8 at head_input_scale
//   logits = head(p8)                            int16 [B, 1, V] at logit_scale (QLinear)
// output() dequantizes the logits (logits · logit_scale, float on the host); the arg-max reads
// the integers. Tensors: residual_scale, head_input_scale, logit_scale (F32 [1]),
// embedding.* (QEmbedding), pe I16 [L, D], blocks.i.*, pool.*, to_head (Requant<1>), head.*.
#pragma once

#include "../config.hpp"

#include <algorithm>
#include <array>
#include <cstdint>

#include "../blocks/embedding.hpp"
#include "../models/language_model.hpp"
#include "encoder.hpp"
#include "linear.hpp"
#include "pma.hpp"
#include "embedding.hpp"
#include "weight_int8.hpp"

namespace stformer::inline STFORMER_ABI {

template <size_t V, size_t L, size_t D, size_t H, size_t F, size_t Blocks>
struct QLanguageModel {
  using Float = LanguageModel<V, L, D, H, F, Blocks>;
  using Block = QEncoderBlock<D, H, F>;
  Scale residual_scale, head_input_scale, logit_scale;
  QEmbedding<V, D> embedding;
  TensorOf<std::int16_t, L, D> pe;
  std::array<Block, Blocks> blocks;
  QPMA<D, H, 1> pool;
  Requant<1> to_head;
  QLinear<D, V> head;

  template <class Fn, class... S>
  static constexpr void visit(const Path& at, Fn& f, S&... s) {
    f(at / "residual_scale", Init{Init::zeros}, s.residual_scale...);
    f(at / "head_input_scale", Init{Init::zeros}, s.head_input_scale...);
    f(at / "logit_scale", Init{Init::zeros}, s.logit_scale...);
    stformer::visit(at / "embedding", f, s.embedding...);
    f(at / "pe", Init{Init::zeros}, s.pe...);
    stformer::visit(at / "blocks", f, s.blocks...);
    stformer::visit(at / "pool", f, s.pool...);
    stformer::visit(at / "to_head", f, s.to_head...);
    stformer::visit(at / "head", f, s.head...);
  }

  // Post-training quantization: ranges (max |·|) of the float model's activations over
  // calibration windows, then quantize.
  struct Ranges {
    float residual = 0, head_input = 0, logits = 0;
    std::array<typename Block::Ranges, Blocks> blocks;
    typename QPMA<D, H, 1>::Ranges pool;

    // acts: the float model f's activations (Float::Acts) in a forward on some windows.
    template <class A>
    void observe(const Float& f, const A& acts) {
      residual = std::max(residual, quant::max_abs(acts.template at<"pe">().out));
      for (size_t i = 0; i < Blocks; ++i) {
        blocks[i].observe(f.template get<"blocks">()[i], acts.template at<"blocks">().blocks[i]);
        residual = std::max(residual, blocks[i].residual);
      }
      pool.observe(f.template get<"pool">(), acts.template at<"pool">());
      head_input = std::max(head_input, quant::max_abs(acts.template at<"pool">().mab.out));
      logits = std::max(logits, quant::max_abs(acts.template at<"head">().out));
    }
  };

  void set_multipliers() {
    embedding.set_multipliers(residual_scale(0));
    for (auto& b : blocks) b.set_multipliers(residual_scale(0));
    pool.set_multipliers();
    to_head.set(0, double(pool.out_scale(0)) / head_input_scale(0));
    head.set_multipliers(head_input_scale(0), logit_scale(0));
  }

  // q ← the model f quantized (q allocated by the caller: the model is 9 MB in SPEC's
  // configuration, too large to return on the stack).
  static void quantize(const Float& f, const Ranges& r, QLanguageModel& q) {
    q.residual_scale(0) = quant::int16_scale(r.residual);
    q.head_input_scale(0) = quant::scale_for(r.head_input);
    q.logit_scale(0) = quant::int16_scale(r.logits);
    q.embedding.from_float(f.template get<"embedding">(), q.residual_scale(0));
    const auto& table = PositionalEncoding<L, D>::table();
    quant::quantize(table.data(), L * D, q.residual_scale(0), q.pe.data());
    for (size_t i = 0; i < Blocks; ++i) q.blocks[i] = Block::quantize(f.template get<"blocks">()[i], r.blocks[i], q.residual_scale(0));
    q.pool = QPMA<D, H, 1>::quantize(f.template get<"pool">(), r.pool);
    q.head.from_float(f.template get<"head">(), q.head_input_scale(0), q.logit_scale(0));
    q.set_multipliers();
  }

  // Forward only: the stream h [B, L, D], the pooled row [B, 1, D] (int16, then int8), the
  // logits [B, 1, V] (int16), and one arena of three phases: a block's work, the pool's, the
  // head's accumulators [B, V].
  template <size_t B, size_t T = qtile_rows(B * L)>
  struct Infer {
    using BlockWork = typename Block::template Work<B, L, T>;
    using PoolWork = typename QPMA<D, H, 1>::template Work<B, L, T>;
    TensorOf<std::int16_t, B, L, D> h;
    TensorOf<std::int16_t, B, 1, D> pooled;
    TensorOf<std::int8_t, B, 1, D> p8;
    TensorOf<std::int16_t, B, 1, V> logits;
    Phases<BlockWork, PoolWork, TensorOf<std::int32_t, B, V>> phase;

    const TensorOf<std::int16_t, B, 1, V>& forward(const QLanguageModel& p, const IdTensor<B, L>& ids) {
      p.embedding.template apply<B * L>(ids.data(), h.data());
      for (size_t b = 0; b < B; ++b)
        for (size_t i = 0; i < L * D; ++i) {
          std::int16_t& x = h.data()[b * L * D + i];
          x = std::int16_t(std::clamp<std::int32_t>(x + p.pe.data()[i], INT16_MIN, INT16_MAX));
        }
      auto& w = phase.template start<BlockWork>();
      for (size_t i = 0; i < Blocks; ++i) p.blocks[i].forward_in_place(h, w);
      p.pool.forward_into(h, pooled, phase.template start<PoolWork>());
      auto& acc = phase.template start<TensorOf<std::int32_t, B, V>>();
      std::copy(pooled.begin(), pooled.end(), acc.begin());  // widened for requantize
      kernels::requantize(acc.data(), B * D, p.to_head[0], 0, -128, 127, p8.data());
      p.head.template add_to<B, true>(p8.data(), acc.data(), logits.data());
      return logits;
    }

    // logits · logit_scale: the float model's output from the last forward (the output's
    // dequantization, float).
    void output(const QLanguageModel& p, Tensor<B, 1, V>& out) const {
      for (size_t i = 0; i < B * V; ++i) out.data()[i] = float(logits.data()[i]) * p.logit_scale(0);
    }
  };
};

}  // namespace stformer
