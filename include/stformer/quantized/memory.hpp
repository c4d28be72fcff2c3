// CrossAttend in integers (stformer/compose/memory.hpp), a decoder's cross-attention: on the
// rows' int16 stream h at s_h over the memory's int16 stream m at s_m,
//   a_q = Query(h) as int8 rows at s_a (a norm writing them, or, Identity, the stream
//         requantized: apply(h_q, s_h/s_a)), s_a from the calibrated max|Query(h)|
//   h_q = sat(h_q + QMultiHeadAttention(a_q, m_q))   the keys and values projected from m_q
// the same composition as the hand-written DecoderBlock<…, precision::int8>'s; with a norm as
// KeyValue (MAB) both parts' rows int16 at |g|/32767 and the attention on them, as QAttend's.
// Tensors: the norm's (or branch_scale, stream_scale, branch_requant), the attention's.
#pragma once

#include "../core/config.hpp"

#include <algorithm>
#include <array>
#include <memory>
#include <cstdint>
#include <type_traits>

#include "../compose/memory.hpp"
#include "attention.hpp"
#include "combinators.hpp"
#include "quantize.hpp"
#include "rows.hpp"

namespace stformer::inline STFORMER_ABI {

template <class Query, class KeyValue, class Attention>
struct QCrossAttend {
  using Float = CrossAttend<Query, KeyValue, Attention>;
  static constexpr bool reads_memory = true, same_scale = true;
  using FQ = typename Float::Q;
  // wide: a norm as KeyValue (MAB): both parts' rows int16 at |g|/32767 and the attention on
  // them, as QAttend's; else (a decoder) the query's rows int8 and the memory's stream itself
  static constexpr bool wide = !Float::kv_itself;
  static constexpr bool query_itself = !wide && std::is_empty_v<FQ>;  // Identity: the stream requantized
  static constexpr size_t D = dims<typename Float::template Input<1, 1>>.back();
  using QueryPart = typename std::conditional_t<wide, IntegerForm<FQ, 16>,
                                                std::conditional_t<query_itself, std::type_identity<BranchScales<1>>, Int8Of<FQ>>>::type;
  using KVPart = typename std::conditional_t<wide, IntegerForm<typename Float::KV, 16>, std::type_identity<Nothing>>::type;
  using A = typename IntegerForm<typename Float::A, wide ? 16 : 8>::type;
  using Row = std::conditional_t<wide, std::int16_t, std::int8_t>;
  QueryPart query;
  [[no_unique_address]] KVPart kv;
  A attn;

  template <class F, class... S>
  static constexpr void visit(const Path& at, F& f, S&... s) {
    step::visit_part<Query>(at, 0, true, f, s.query...);
    if constexpr (wide) step::visit_part<KeyValue>(at, 1, true, f, s.kv...);
    step::visit_part<Attention>(at, 2, true, f, s.attn...);
  }

  template <size_t B, size_t N>
  using Input = TensorOf<std::int16_t, B, N, D>;
  template <size_t B, size_t M>
  using MemoryRows = TensorOf<std::int16_t, B, M, dims<typename Float::template MemoryRows<1, 1>>.back()>;

  template <size_t B, size_t N, size_t M, size_t Room = 0>
  struct Scratch {
    static constexpr size_t T = qtile_rows(std::max(B * N, B * M));
    // KeyValue(m) until the keys and values are projected (wide), then the query's rows
    std::conditional_t<wide, Phases<TensorOf<std::int16_t, B, M, D>, TensorOf<Row, B, N, D>>, Phases<TensorOf<Row, B, N, D>>> a;
    typename A::template Work<B, N, M, T> w;
  };
  template <size_t B, size_t N, size_t M, size_t Room, class Pool = Serial>
  void forward_in_place(Input<B, N>& h, const MemoryRows<B, M>& m, Scratch<B, N, M, Room>& w, const Mask<B, N>&, const KeyMask<B, M>* keys,
                        Pool&& pool = Pool{}) const {
    constexpr size_t T = Scratch<B, N, M, Room>::T;
    if constexpr (wide) {
      auto& rows = w.a.template start<TensorOf<std::int16_t, B, M, D>>();
      kv.template apply<B * M>(m.data(), rows.data());
      attn.template prepare<B, N, M, T>(rows.data(), w.w, pool);
    } else {
      attn.template prepare<B, N, M, T>(m.data(), w.w, pool);
    }
    auto& a = w.a.template start<TensorOf<Row, B, N, D>>();
    if constexpr (query_itself)
      query.requantize(0, h.data(), a.data(), B * N * D);
    else
      query.template apply<B * N>(h.data(), a.data());
    attn.template forward_add<B, N, M, T>(a.data(), h.data(), w.w, Mask<B, M>{.keys = keys}, pool);
  }

  // Decoding (DecodeOf, as CrossAttend's): the memory's int8 keys and values once, then passes
  // of rows that read them. A decoder's form alone (int8 rows: MAB's do not decode).
  static constexpr bool decodes = !wide;
  static constexpr size_t memory_bytes(size_t batch, size_t rows) { return A::memory_bytes(batch, rows); }
  template <size_t B, size_t N, size_t M, size_t Room, class Pool = Serial>
  void remember(const MemoryRows<B, M>& m, const KeyMask<B, M>* keys, Scratch<B, N, M, Room>& w, Decoding& dec, Pool&& = Pool{}) const {
    attn.template remember<B, M>(m.data(), keys, w.w.tile.data(), dec);
  }
  template <size_t B, size_t N, size_t M, size_t Room, class Pool = Serial>
  void decode_in_place(Input<B, N>& h, Scratch<B, N, M, Room>& w, const Mask<B, N>& mask, Pool&& = Pool{}) const {
    auto& a = w.a.template start<TensorOf<Row, B, N, D>>();
    if constexpr (query_itself)
      query.requantize(0, h.data(), a.data(), B * N * D);
    else
      query.template apply<B * N>(h.data(), a.data());
    attn.template decode_memory<B, N, M, Scratch<B, N, M, Room>::T>(a.data(), h.data(), w.w.tile.data(), *mask.decoding);
  }

  // From the float part: the query rows' range (Query(h), or h itself) and the attention's.
  struct Ranges {
    float query = 0;
    typename A::Ranges attn;
    template <class Acts, class X>
    void observe(const Float& f, const Acts& acts, const X& x) {
      if constexpr (query_itself)
        query = std::max(query, quant::max_abs(x));
      else
        query = std::max(query, quant::max_abs(acts.q.out));
      attn.observe(f.attention(), acts.attn);
    }
  };
  void from_float(const Float& f, const Ranges& r, float s_h, float s_m) {
    if constexpr (wide) {
      quant::int16_rows(query, f.template get<0>());
      quant::int16_rows(kv, f.template get<1>());
      attn = A::quantize(f.attention(), r.attn, query.out_scale(0), kv.out_scale(0), s_h);
    } else {
      const float s_a = quant::scale_for(r.query);
      if constexpr (query_itself)
        query.set(0, s_a, s_h);
      else
        query.from_float(f.template get<0>(), {}, s_h, s_a);
      attn = A::quantize(f.attention(), r.attn, s_a, s_m, s_h);
    }
  }
};
template <class Query, class KeyValue, class Attention>
struct Int8Of<CrossAttend<Query, KeyValue, Attention>> {
  using type = QCrossAttend<Query, KeyValue, Attention>;
};

// WithMemory in integers: its parts' integer forms under their names, on the rows' int16 stream
// and the memory's; a Repeat of memory blocks, block by block.
template <bool Causal, class... Parts>
struct Int8Of<WithMemory<Causal, Parts...>> {
  using type = WithMemory<Causal, typename step::Int8Part<Parts>::type...>;
};
template <class Block, size_t Count>
  requires(step::reads_memory<Block>())
struct Int8Of<Repeat<Block, Count>> {
  using type = Repeat<typename Int8Of<Block>::type, Count>;
};

namespace quant {
// Calibration of a block of two inputs: the rows' streams as a chain's (each part that does not
// read the memory observed as a step), the memory a stream of its own (o.memory), each
// CrossAttend on the rows' stream (it adds into it).
template <class Q, class KV, class A>
struct Observed<CrossAttend<Q, KV, A>> {
  typename QCrossAttend<Q, KV, A>::Ranges ranges;
  size_t in = 0;
};
template <bool C, class... P>
struct Observed<WithMemory<C, P...>> {
  step::Members<Observed<typename step::Info<P>::Block>...> parts;
};
template <class Blk, size_t Count>
  requires(step::reads_memory<Blk>())
struct Observed<Repeat<Blk, Count>> {
  std::array<Observed<Blk>, Count> blocks;
};

template <class Q, class KV, class A, class R, class X, class Mem, size_t B, size_t N, size_t M>
const auto& observe_memory(const CrossAttend<Q, KV, A>& f, R& acts, const X& x, const Mem& m, const Mask<B, N>& mask, const KeyMask<B, M>* keys,
                           Observed<CrossAttend<Q, KV, A>>& o, Streams& s) {
  o.in = s.current;
  const auto& y = acts.forward(f, x, m, mask, keys);
  o.ranges.observe(f, acts, x);
  s.see(s.current, max_abs(y));
  return y;
}
template <class Blk, size_t Count, class R, class X, class Mem, size_t B, size_t N, size_t M>
  requires(step::reads_memory<Blk>())
const auto& observe_memory(const Repeat<Blk, Count>& f, R& acts, const X& x, const Mem& m, const Mask<B, N>& mask, const KeyMask<B, M>* keys,
                           Observed<Repeat<Blk, Count>>& o, Streams& s) {
  const X* h = &x;
  for (size_t i = 0; i < Count; ++i) h = &observe_memory(f[i], acts.blocks[i], *h, m, mask, keys, o.blocks[i], s);
  return *h;
}
template <bool C, class... P, class R, class X, class Mem, size_t B, size_t N, size_t M>
const auto& observe_memory(const WithMemory<C, P...>& f, R& acts, const X& x, const Mem& m, const Mask<B, N>& pass, const KeyMask<B, M>* keys,
                           Observed<WithMemory<C, P...>>& o, Streams& s) {
  Mask<B, N> mask = pass;
  if constexpr (C) mask.causal = true;
  const X* h = &x;
  [&]<size_t... I>(std::index_sequence<I...>) {
    (
        [&] {
          using Part = typename WithMemory<C, P...>::template BlockAt<I>;
          if constexpr (step::reads_memory<Part>())
            h = &observe_memory(f.template get<I>(), step::get<I>(acts.records), *h, m, mask, keys, step::get<I>(o.parts), s);
          else
            h = &observe(f.template get<I>(), step::get<I>(acts.records), *h, mask, step::get<I>(o.parts), s);
        }(),
        ...);
  }(std::index_sequence_for<P...>{});
  return *h;
}

// The integer block from what calibration kept: each part from its float part, its ranges and
// its streams' scales; s_m the memory's.
template <class Qb, class Q, class KV, class A>
void from_float_memory(Qb& q, const CrossAttend<Q, KV, A>& f, const Observed<CrossAttend<Q, KV, A>>& o, const Streams& s, float s_m) {
  q.from_float(f, o.ranges, s.scale(o.in), s_m);
}
template <class Qb, class Blk, size_t Count>
  requires(step::reads_memory<Blk>())
void from_float_memory(Qb& q, const Repeat<Blk, Count>& f, const Observed<Repeat<Blk, Count>>& o, const Streams& s, float s_m) {
  for (size_t i = 0; i < Count; ++i) from_float_memory(q[i], f[i], o.blocks[i], s, s_m);
}
template <class Qb, bool C, class... P>
void from_float_memory(Qb& q, const WithMemory<C, P...>& f, const Observed<WithMemory<C, P...>>& o, const Streams& s, float s_m) {
  [&]<size_t... I>(std::index_sequence<I...>) {
    (
        [&] {
          if constexpr (step::reads_memory<typename WithMemory<C, P...>::template BlockAt<I>>())
            from_float_memory(q.template get<I>(), f.template get<I>(), step::get<I>(o.parts), s, s_m);
          else
            from_float(q.template get<I>(), f.template get<I>(), step::get<I>(o.parts), s);
        }(),
        ...);
  }(std::index_sequence_for<P...>{});
}
}  // namespace quant

// Post-training quantization of a block of two inputs (rows x [B, N, ·], memory m [B, M, ·]):
// observe runs the float block; quantize makes the integer block, which runs on int16 streams:
// x at x_scale(), m at memory_scale(), its output at out_scale(). Host side.
template <class Block, size_t B, size_t N, size_t M>
class MemoryCalibration {
 public:
  using Q = typename Int8Of<Block>::type;
  explicit MemoryCalibration(const Block& block) : block_(block), acts_(std::make_unique<ActsOf<Block, B, N, M>>()) {}

  template <class X, class Mem>
  void observe(const X& x, const Mem& m, const KeyMask<B, M>* keys = nullptr) {
    streams_.current = 0, streams_.next = 2;  // 0: the rows' input, 1: the memory
    streams_.see(0, quant::max_abs(x));
    streams_.see(1, quant::max_abs(m));
    quant::observe_memory(block_, *acts_, x, m, Mask<B, N>{}, keys, observed_, streams_);
    out_ = streams_.current;
    ++batches_;
  }
  std::unique_ptr<Q> quantize() const {
    STFORMER_CHECK(batches_ > 0, "MemoryCalibration::quantize: no calibration batch observed");
    auto q = std::make_unique<Q>();
    quant::from_float_memory(*q, block_, observed_, streams_, memory_scale());
    return q;
  }
  float x_scale() const { return streams_.scale(0); }
  float memory_scale() const { return streams_.scale(1); }
  float out_scale() const { return streams_.scale(out_); }

 private:
  const Block& block_;
  std::unique_ptr<ActsOf<Block, B, N, M>> acts_;
  quant::Observed<Block> observed_;
  quant::Streams streams_;
  size_t out_ = 0, batches_ = 0;
};

}  // namespace stformer
