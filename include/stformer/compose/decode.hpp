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
// Sequential, Named, Repeat, Residual, Parallel and Gated; a decoder over a memory (WithMemory
// with causal rows, its CrossAttend parts: below). Anything else (a pooling step, a class token,
// an attention over a set) is a compile error naming it.
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
#include "memory.hpp"
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
  static constexpr size_t memory_bytes(size_t batch, size_t rows) {  // a cross-attention's keys and values of its memory
    if constexpr (step::reads_memory<Block>() && requires { Block::memory_bytes(batch, rows); })
      return Block::memory_bytes(batch, rows);
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
  static constexpr size_t memory_bytes(size_t batch, size_t rows) { return (size_t(0) + ... + Info<Blocks, Strict>::memory_bytes(batch, rows)); }
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
  static constexpr size_t memory_bytes(size_t batch, size_t rows) { return Count * Info<Block, Strict>::memory_bytes(batch, rows); }
};
template <class Body, bool Strict>
struct Info<Residual<Body>, Strict> : Info<typename step::Info<Body>::Block, Strict> {};
template <class... Br, bool Strict>
struct Info<Parallel<Br...>, Strict> : All<Strict, typename step::Info<Br>::Block...> {};
template <class Gate, class Value, bool Strict>
struct Info<Gated<Gate, Value>, Strict> : All<Strict, typename step::Info<Gate>::Block, typename step::Info<Value>::Block> {};
// A block over a memory decodes when it is causal (its rows' mask) and its parts decode.
template <bool Causal, class... Parts, bool Strict>
struct Info<WithMemory<Causal, Parts...>, Strict> : All<Strict, typename step::Info<Parts>::Block...> {
  static_assert(Causal || !Strict, "DecodeOf: a WithMemory whose rows are not causal (WithMemory<false, …>: MAB's) does not decode");
  static constexpr bool ok = Causal && All<Strict, typename step::Info<Parts>::Block...>::ok;
};

// Whether DecodeOf<Model, ...> compiles: a causal chain whose every block decodes.
template <class Model>
constexpr bool decodes() {
  if constexpr (declares_causal<Model> && step::chain_model<Model>)
    return Info<step::ChainOf<Model>, false>::ok;
  else
    return false;
}

}  // namespace decode

template <class Model, size_t B, size_t MaxLen, size_t M = 0>
struct DecodeOf {
  static_assert(M == 0, "DecodeOf<Model, B, MaxLen, M>: M is the rows of a memory, and this model reads none");
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
  // A step through the chain's steps 0 .. Last − 1 alone, their output (the steps after Last −
  // 1 row-local: every attention has stepped). A quantized model's integers before its float
  // end: step_through<Quantized<M>::steps − 1> gives its integer logits, and a core without a
  // floating-point unit generates with no float at all (argmax on them: the logits' order).
  template <size_t Last, class Pool = Serial>
  const auto* step_through(const Model& p, const Input& x, Pool&& pool = Pool{}) {
    using Y = std::remove_cvref_t<decltype(pass.template forward_steps<0, Last>(p, x))>;
    if (t == MaxLen) return static_cast<const Y*>(nullptr);
    return &run<1, Last>(p, x, pass, pool);
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
  // the cache; then t is N positions on. Last: the steps run, 0 for all of them.
  template <size_t N, size_t Last = 0, class X, class Pass, class Pool>
  const auto& run(const Model& p, const X& x, Pass& n_rows, Pool& pool) {
    Decoding d{.position = t, .length = MaxLen, .cache = cache, .scores = scores};
    const Mask<B, N> mask{.causal = true, .decoding = &d};
    const auto& y = [&]() -> const auto& {
      if constexpr (Last == 0)
        return n_rows.forward(p, x, mask, pool);
      else
        return n_rows.template forward_steps<0, Last>(p, x, mask, pool);
    }();
    STFORMER_CHECK(d.taken == cache_bytes, "DecodeOf: the model's attentions took another cache than decode::Info counts");
    t += N;
    return y;
  }

  alignas(64) std::byte cache[cache_bytes ? cache_bytes : 1];
  alignas(64) std::byte scores[Decoding::score_bytes(MaxLen)];  // (padded to whole vectors: kernels::softmax_row)
  InferOf<Model, B, 1> pass;
  size_t t = 0;
};

// A decoder over a memory (WithMemory<true, …>: DecoderBlock, TransformerDecoder; the memory m
// [B, M, Dm], an encoder's output, with its key mask):
//
//   DecodeOf<Decoder, 1, 64, M> dec;
//   dec.start(decoder, memory, &keys);       // every cross-attention's keys and values of m, once
//   const auto* y = dec.step(decoder, x);    // [1, 1, D]: the pass's row at the next position
//
// start projects each cross-attention's keys and values of the memory into the object (the
// rows the key mask keeps, MultiHeadAttention::remember), and empties the cache; steps and a
// prompt's pass read those, never m again, so the memory need not outlive start. Step t's
// output is row t of WithMemory's pass over the rows 0 .. t and m (Infer<B, t + 1, M>), up to
// float rounding. sizeof = the caches + the memory's keys and values (memory_bytes: 8 bytes a
// row and feature of each cross-attention) + one step's plan (Infer<B, 1, M>) + a row of scores.
template <class Model, size_t B, size_t MaxLen, size_t M>
  requires(step::reads_memory<Model>())
struct DecodeOf<Model, B, MaxLen, M> {
  static_assert(declares_causal<Model>, "DecodeOf: a block over a memory decodes when its rows are causal (WithMemory<true, …>: a decoder)");
  static_assert(M >= 1, "DecodeOf<Model, B, MaxLen, M>: a model over a memory decodes with its memory's rows M");
  using Info = decode::Info<Model>;
  static constexpr size_t length = MaxLen, memory_rows = M;
  static constexpr size_t cache_bytes = Info::bytes(B, MaxLen), memory_bytes = Info::memory_bytes(B, M);
  using Input = typename Model::template Input<B, 1>;
  using Output = Input;
  using Memory = typename Model::template MemoryRows<B, M>;

  // An empty cache over the memory m (keys: its key mask, or none): its keys and values projected.
  template <class Pool = Serial>
  void start(const Model& p, const Memory& m, const KeyMask<B, M>* keys = nullptr, Pool&& pool = Pool{}) {
    Decoding d = decoding();
    pass.remember(p, m, keys, d, pool);
    STFORMER_CHECK(d.memory_taken == memory_bytes, "DecodeOf: the model's cross-attentions took another memory than decode::Info counts");
    t = 0, started = true;
  }
  // The output at the next position for x [B, 1, D]; null when the cache is full.
  template <class Pool = Serial>
  const Output* step(const Model& p, const Input& x, Pool&& pool = Pool{}) {
    if (t == MaxLen) return nullptr;
    return &run<1>(p, x, pass, pool);
  }
  // A prompt x [B, P, D] in one pass after start (pass: the caller's Infer<B, P, M>); null when
  // the cache is not empty.
  template <size_t P, class Pool = Serial>
  auto prefill(const Model& p, const typename Model::template Input<B, P>& x, typename Model::template Infer<B, P, M>& pass, Pool&& pool = Pool{})
      -> const typename Model::template Input<B, P>* {
    static_assert(P <= MaxLen, "DecodeOf::prefill: a prompt longer than the cache");
    if (t != 0) return nullptr;
    return &run<P>(p, x, pass, pool);
  }
  // An empty cache over the same memory.
  void reset() { t = 0; }
  size_t position() const { return t; }

 private:
  Decoding decoding() { return {.position = t, .length = MaxLen, .cache = cache, .scores = scores, .memory = memory}; }
  template <size_t N, class X, class Pass, class Pool>
  const auto& run(const Model& p, const X& x, Pass& n_rows, Pool& pool) {
    STFORMER_CHECK(started, "DecodeOf: start(model, memory) before the first step");
    Decoding d = decoding();
    const auto& y = n_rows.decode(p, x, d, pool);
    STFORMER_CHECK(d.taken == cache_bytes && d.memory_taken == memory_bytes, "DecodeOf: the model's attentions took another cache than decode::Info counts");
    t += N;
    return y;
  }

  alignas(64) std::byte cache[cache_bytes ? cache_bytes : 1];
  alignas(64) std::byte memory[memory_bytes ? memory_bytes : 1];
  alignas(64) std::byte scores[Decoding::score_bytes(std::max(MaxLen, M))];
  typename Model::template Infer<B, 1, M> pass;
  size_t t = 0;
  bool started = false;
};

}  // namespace stformer
