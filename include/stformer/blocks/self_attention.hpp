// SelfAttention<D, H, S, Pr>: multi-head attention of rows x [B, N, D] over themselves as a step
// of one input (q = k = v = x: PyTorch's self_attn(x, x, x)), with the pass's mask (causal, key
// padding):
//   y = MHA(x, x)                     (blocks/attention.hpp: the heads, the scores, the softmax)
//   backward: dx = dxq + dxkv         (the gradient through the queries and through the keys
//                                      and values, summed)
// Parameters: those of MultiHeadAttention<D, D, D, H, S, Pr>; by default PyTorch's packed
// nn.MultiheadAttention: in_proj_weight [3D, D], in_proj_bias [3D], out_proj.weight, out_proj.bias
// (Projections::separate: wq, wk, wv, wo).
#pragma once

#include "../core/config.hpp"

#include "attention.hpp"

namespace stformer::inline STFORMER_ABI {

template <size_t D, size_t H, ScoreScale S = ScoreScale::head_width, Projections Pr = Projections::packed>
struct SelfAttention : MultiHeadAttention<D, D, D, H, S, Pr> {
  using Attention = MultiHeadAttention<D, D, D, H, S, Pr>;

  template <size_t B, size_t N>
  using Input = Tensor<B, N, D>;

  // Forward only, in place: h ← MHA(h, h). The keys and values are projected first, then h
  // becomes the queries, the heads and the output, T rows at a time through the tile of Work
  // (Linear::apply_tiled, in place: a tile's rows are read whole before they are written); the
  // same operations as Attention's Infer. Into a stream instead (a residual body's last step,
  // run_add): h += MHA(x, x), x overwritten by the queries and the heads
  // (MultiHeadAttention's forward_add). Scratch for both: the keys, values and tile.
  static constexpr bool in_place = true;
  template <size_t B, size_t N, size_t Room = 0>
  struct Scratch {
    static constexpr size_t T = tile_rows(B * N);
    typename Attention::template Work<B, N, N, T> w;
  };
  // A decoding step (mask.decoding: one row per sequence, N = 1): Attention::decode, the row's
  // keys and values into the cache, its queries over them and the rows' before it. A prompt's
  // pass (mask.decoding, N > 1, from position 0): the causal pass, its keys and values stored.
  static constexpr bool decodes = true;
  template <size_t B, size_t N, size_t Room, class Pool = Serial>
  void forward_in_place(Input<B, N>& h, Scratch<B, N, Room>& w, const Mask<B, N>& mask, Pool&& pool = Pool{}) const {
    constexpr size_t T = Scratch<B, N, Room>::T, R = Attention::template Work<B, N, N, T>::rows;
    if (mask.decoding_step()) return this->template decode<B, R>(h.data(), nullptr, w.w.tile, *mask.decoding, pool);
    this->template prepare<B, N, N, T>(h.data(), w.w, pool);
    if (N > 1 && mask.decoding) this->template store<B, N, T>(w.w, *mask.decoding);
    this->q_proj().template apply_tiled<B * N, R>(h.data(), h.data(), w.w.tile, pool);
    this->template attend<B, N, N, T>(h.data(), w.w, mask, pool);
    this->wo.template apply_tiled<B * N, R>(h.data(), h.data(), w.w.tile, pool);
  }
  template <size_t B, size_t N, size_t Room, class Pool = Serial>
  void run_add(Input<B, N>& x, Input<B, N>& h, Scratch<B, N, Room>& w, const Mask<B, N>& mask, Pool&& pool = Pool{}) const {
    constexpr size_t T = Scratch<B, N, Room>::T;
    if (mask.decoding_step())
      return this->template decode<B, Attention::template Work<B, N, N, T>::rows>(x.data(), h.data(), w.w.tile, *mask.decoding, pool);
    this->template prepare<B, N, N, T>(x.data(), w.w, pool);
    if (N > 1 && mask.decoding) this->template store<B, N, T>(w.w, *mask.decoding);
    this->template forward_add<B, N, N, T>(x.data(), h.data(), w.w, mask, pool);
  }

  // Memory::replay (as a step of a chain that replays its steps): the attention's record that
  // keeps less (blocks/attention.hpp), whose forward writes its workspace: kept beside it.
  // dx = dq + dkv, the gradients through the queries and through the keys and values: dkv is
  // written over the record's concat_h(o_h), which backward reads first (for W_o's gradient)
  // and never again.
  template <size_t B, size_t N, Memory M = Memory::keep>
  struct Acts {
    static constexpr bool replay = M == Memory::replay;
    using Record = typename Attention::template Acts<B, N, N, M>;
    using Dx = Tensor<B, N, D>;
    Record attn;
    [[no_unique_address]] std::conditional_t<replay, WorkspaceOf<Record>, Nothing> kept;
    struct Workspace {
      [[no_unique_address]] std::conditional_t<replay, Nothing, WorkspaceOf<Record>> attn;
    };

    template <class X>
    const Tensor<B, N, D>& forward(const SelfAttention& p, const X& x, const Mask<B, N>& mask = {}) {
      if constexpr (replay)
        return attn.forward(p, x, x, mask, kept);
      else
        return attn.forward(p, x, x, mask);
    }
    const Dx& backward(const SelfAttention& p, SelfAttention& grad, const Tensor<B, N, D>& dout, Dx& dx, Workspace& ws) {
      Tensor<B, N, D>& dkv = attn.heads;
      if constexpr (replay)
        attn.backward(p, grad, dout, {dx, dkv}, kept);
      else
        attn.backward(p, grad, dout, {dx, dkv}, ws.attn);
      kernels::add_to<B * N * D>(dkv.data(), dx.data());
      return dx;
    }
  };
};

}  // namespace stformer
