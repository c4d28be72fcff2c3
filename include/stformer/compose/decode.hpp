// DecodeOf<Model, B, MaxLen>: a causal model run the way it is used to generate, one position at
// a time, each step attending to the keys and values of the positions before it, kept in a
// cache:
//
//   DecodeOf<GPT, 1, 256> dec;              // the cache of 256 positions and the plan of one step
//   const auto* logits = dec.step(model, token);   // [1, 1, V]: the next token's logits
//   ...
//   dec.reset();                            // an empty cache
//   dec.prefill(model, prompt, prompt_pass);       // or a prompt of P tokens in one pass
//
// Step t runs the model's pass over one row per sequence (InferOf<Model, B, 1>: its plan, its
// kernels) given a Decoding (stformer/core/tensor.hpp): each attention projects the row's keys
// and values into its part of the cache at row t, and its queries attend to rows 0 .. t of it
// (MultiHeadAttention::decode); positions add the table's row t. So step t's output is the last
// row of the causal pass over rows 0 .. t, up to float rounding (the attention's sums in another
// order): O(1) projections per step where the pass over the prefix takes O(t).
//
// What may decode (decode::Info, at compile time): a model that declares itself causal
// (declares_causal), whose blocks are row-local (each output row a function of its input row:
// linear layers, norms, activations, feed-forward layers, LayerScale), or say how they decode
// (decodes = true: SelfAttention, RotaryAttention, Embedding, PositionEmbedding,
// PositionalEncoding, LastToken, and their integer forms, whose cache is int8: Quantized<Model>
// decodes as Model does, each step the integers of its causal pass's row), joined by
// Sequential, Named, Repeat, Residual, Parallel and Gated. Anything else (a pooling
// step, a class token, an attention over a memory or a set) is a compile error naming it.
//
// Memory, all of it in the object, known at compile time:
//   sizeof(DecodeOf) = the caches (each attention's keys and values, transposed: kᵀ and vᵀ
//                      [B, D, MaxLen rounded up to 16], float, or int8 in integers; cache_bytes)
//                    + one step's plan (sizeof(InferOf<Model, B, 1>)) + a row of scores
//                      (Decoding::score_bytes: 5 bytes a position)
// A step past MaxLen positions is refused: step returns null and changes nothing.
#pragma once

#include "../core/config.hpp"

#include <cstdint>
#include <type_traits>

#include "combinators.hpp"
#include "sequential.hpp"

namespace stformer::inline STFORMER_ABI {

namespace decode {

// A block of a decoding pass: whether it decodes (ok; Strict: a block that does not is a
// static_assert naming it), the bytes of the cache it takes for a batch of sequences and a
// length (its cache_bytes), and the positions it may reach (its table's, for positions).
template <class Block, bool Strict = true>
struct Info {
  static constexpr bool ok = [] {
    if constexpr (requires { Block::decodes; })
      return Block::decodes;
    else
      return step::row_local<Block>();
  }();
  static_assert(ok || !Strict, "DecodeOf: a step (the block in the instantiation above) does not decode: it is neither row-local (each "
                               "output row a function of its input row) nor a block that says how it runs one position at a time "
                               "(decodes = true)");
  static constexpr size_t bytes(size_t batch, size_t length) {
    if constexpr (requires { Block::cache_bytes(batch, length); })
      return Block::cache_bytes(batch, length);
    else
      return 0;
  }
  static constexpr size_t positions = [] {
    if constexpr (requires { Block::positions; })
      return Block::positions;
    else
      return SIZE_MAX;
  }();
};
// Several blocks: all decode, their caches side by side, the fewest positions.
template <bool Strict, class... Blocks>
struct All {
  static constexpr bool ok = (Info<Blocks, Strict>::ok && ...);
  static constexpr size_t bytes(size_t batch, size_t length) { return (size_t(0) + ... + Info<Blocks, Strict>::bytes(batch, length)); }
  static constexpr size_t positions = std::min({SIZE_MAX, Info<Blocks, Strict>::positions...});
};
template <FixedString Name, class Block, bool Strict>
struct Info<Named<Name, Block>, Strict> : Info<Block, Strict> {};
template <size_t Index, class Block, bool Strict>
struct Info<Indexed<Index, Block>, Strict> : Info<Block, Strict> {};
template <class... S, bool Strict>
struct Info<Sequential<S...>, Strict> : All<Strict, typename step::Info<S>::Block...> {};
template <class Block, size_t Count, bool Strict>
struct Info<Repeat<Block, Count>, Strict> : Info<Block, Strict> {
  static constexpr size_t bytes(size_t batch, size_t length) { return Count * Info<Block, Strict>::bytes(batch, length); }
};
template <class Body, bool Strict>
struct Info<Residual<Body>, Strict> : Info<typename step::Info<Body>::Block, Strict> {};
template <class... Br, bool Strict>
struct Info<Parallel<Br...>, Strict> : All<Strict, typename step::Info<Br>::Block...> {};
template <class Gate, class Value, bool Strict>
struct Info<Gated<Gate, Value>, Strict> : All<Strict, typename step::Info<Gate>::Block, typename step::Info<Value>::Block> {};

// Whether DecodeOf<Model, ...> compiles: a causal chain whose every block decodes.
template <class Model>
constexpr bool decodes() {
  if constexpr (declares_causal<Model> && step::chain_model<Model>)
    return Info<step::ChainOf<Model>, false>::ok;
  else
    return false;
}

}  // namespace decode

template <class Model, size_t B, size_t MaxLen>
struct DecodeOf {
  static_assert(declares_causal<Model>,
                "DecodeOf: the model must declare itself causal (static constexpr bool causal = true): decoding runs its causal pass one "
                "position at a time, and a model whose rows read later rows cannot be run so");
  using Info = decode::Info<step::ChainOf<Model>>;
  static_assert(MaxLen >= 1 && MaxLen <= Info::positions, "DecodeOf: MaxLen exceeds the positions the model's position table has");
  static constexpr size_t length = MaxLen;
  static constexpr size_t cache_bytes = Info::bytes(B, MaxLen);  // every attention's keys and values
  using Input = typename Model::template Input<B, 1>;
  using Output = typename Model::template Output<B, 1>;

  // The next position's output for x, one row (or token id) per sequence [B, 1, ...]: the last
  // row of the causal pass over every row stepped since the cache was empty; null when the
  // cache holds MaxLen positions already (nothing is run). pool: the threads (the same bits).
  template <class Pool = Serial>
  const Output* step(const Model& p, const Input& x, Pool&& pool = Pool{}) {
    if (t == MaxLen) return nullptr;
    return &run<1>(p, x, pass, pool);
  }
  // A prompt x [B, P, ...] in one pass, into an empty cache: the causal pass over it, which
  // stores its keys and values at positions 0 .. P − 1, then steps go on from position P. pass:
  // the caller's InferOf<Model, B, P> (the prompt's plan, kept apart: this object stays the cache
  // and one step's). Returns the pass's output (its last row the next position's); null when
  // the cache is not empty (nothing is run).
  template <size_t P, class Pool = Serial>
  auto prefill(const Model& p, const typename Model::template Input<B, P>& x, InferOf<Model, B, P>& pass, Pool&& pool = Pool{})
      -> decltype(&pass.forward(p, x)) {
    static_assert(P <= MaxLen, "DecodeOf::prefill: a prompt longer than the cache");
    if (t != 0) return nullptr;
    return &run<P>(p, x, pass, pool);
  }
  // An empty cache: the next step is position 0.
  void reset() { t = 0; }
  // The positions stepped since the cache was empty.
  size_t position() const { return t; }

 private:
  // The causal pass of N rows per sequence from position t (a step's, N = 1; a prompt's), with
  // the cache; then t is N positions on.
  template <size_t N, class X, class Pass, class Pool>
  const auto& run(const Model& p, const X& x, Pass& n_rows, Pool& pool) {
    Decoding d{.position = t, .length = MaxLen, .cache = cache, .scores = scores};
    const auto& y = n_rows.forward(p, x, Mask<B, N>{.causal = true, .decoding = &d}, pool);
    STFORMER_CHECK(d.taken == cache_bytes, "DecodeOf: the model's attentions took another cache than decode::Info counts");
    t += N;
    return y;
  }

  alignas(64) std::byte cache[cache_bytes ? cache_bytes : 1];
  alignas(64) std::byte scores[Decoding::score_bytes(MaxLen)];  // (padded to whole vectors: kernels::softmax_row)
  InferOf<Model, B, 1> pass;
  size_t t = 0;
};

}  // namespace stformer
