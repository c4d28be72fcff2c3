// Blocks of two inputs, declared as a chain: rows x [B, N, D] and a memory m [B, M, Dm] (a
// decoder's encoder output, MAB's key set):
//
//   WithMemory<Causal, Parts...>   x ← Part_k(… Part_0(x)), each part a step of x in place (a
//                                  Residual, a norm: stformer/compose/sequential.hpp) or a part
//                                  that reads m too (reads_memory: CrossAttend, a WithMemory, a
//                                  Repeat of one)
//   CrossAttend<Query, KeyValue, Attention>
//                                  h ← h + Attention(Query(h), KeyValue(m))
//
// A step's plan and record know the pass's B and N, never M: so a part that reads the memory
// has a protocol of its own, a step's with M beside N:
//   Scratch<B, N, M, Room>, forward_in_place(h, m, w, mask, keys, pool),
//   Acts<B, N, M, Memory> with forward(p, x, m, mask, keys) and backward(p, grad, dy, {dx, dm}, ws)
// (dm written, not added to). Causal: the rows' mask is causal (a decoder's self-attention); the
// memory's key mask (keys) reaches every CrossAttend, the rows' causal flag never does.
#pragma once

#include "../core/config.hpp"

#include <algorithm>
#include <array>
#include <type_traits>
#include <utility>

#include "../kernels/rowwise.hpp"
#include "../blocks/scalenorm.hpp"
#include "combinators.hpp"
#include "sequential.hpp"

namespace stformer::inline STFORMER_ABI {

namespace step {
// Whether a part reads the memory of a WithMemory (a Repeat of such blocks does).
template <class Block>
struct ReadsMemory : std::bool_constant<requires { requires Block::reads_memory; }> {};
template <class Block, size_t Count>
struct ReadsMemory<Repeat<Block, Count>> : ReadsMemory<Block> {};
template <class Block>
constexpr bool reads_memory() {
  return ReadsMemory<Block>::value;
}

// A part of WithMemory: its scratch, its forward-only pass and its record, through the memory
// protocol (reads_memory) or the step protocol.
template <class Block, size_t B, size_t N, size_t M, size_t Room>
struct MemoryScratchOf {
  using type = Scratch<Block, B, N, Room>;
};
template <class Block, size_t B, size_t N, size_t M, size_t Room>
  requires(reads_memory<Block>() && requires { typename Block::template Scratch<B, N, M, Room>; })
struct MemoryScratchOf<Block, B, N, M, Room> {
  using type = typename Block::template Scratch<B, N, M, Room>;
};
template <class Block, size_t Count, size_t B, size_t N, size_t M, size_t Room>
  requires(reads_memory<Block>())
struct MemoryScratchOf<Repeat<Block, Count>, B, N, M, Room> : MemoryScratchOf<Block, B, N, M, Room> {};  // one for all blocks
template <class Block, size_t B, size_t N, size_t M, size_t Room>
using MemoryScratch = typename MemoryScratchOf<Block, B, N, M, Room>::type;

template <class T>
inline constexpr bool is_repeat = false;
template <class Block, size_t Count>
inline constexpr bool is_repeat<Repeat<Block, Count>> = true;
// The memory's rows a part reads.
template <class Block, size_t B, size_t M>
struct MemoryRowsOf {
  using type = typename Block::template MemoryRows<B, M>;
};
template <class Block, size_t Count, size_t B, size_t M>
struct MemoryRowsOf<Repeat<Block, Count>, B, M> : MemoryRowsOf<Block, B, M> {};

template <class Block, class H, class Mem, class W, size_t B, size_t N, size_t M, class Pool>
void run_with_memory(const Block& p, H& h, const Mem& m, W& w, const Mask<B, N>& mask, const KeyMask<B, M>* keys, Pool& pool) {
  if constexpr (!reads_memory<Block>()) {
    static_assert(in_place<Block>(), "WithMemory: a part that does not read the memory runs in place on the rows (a Residual, a norm)");
    run(p, h, h, w, mask, pool);
  } else if constexpr (is_repeat<Block>) {
    for (const auto& block : p) block.forward_in_place(h, m, w, mask, keys, pool);
  } else {
    p.forward_in_place(h, m, w, mask, keys, pool);
  }
}

// Decoding (stformer/compose/decode.hpp): a part's keys and values of the memory remembered once
// (remember), and a pass of rows from the cache's position that reads them, not m (decode_in_place).
template <class Block, class Mem, class W, size_t B, size_t M, class Pool>
void remember_with(const Block& p, const Mem& m, const KeyMask<B, M>* keys, W& w, Decoding& dec, Pool& pool) {
  if constexpr (is_repeat<Block>) {
    for (const auto& block : p) block.remember(m, keys, w, dec, pool);
  } else if constexpr (reads_memory<Block>()) {
    p.remember(m, keys, w, dec, pool);
  }
}
template <class Block, class H, class W, size_t B, size_t N, class Pool>
void decode_with_memory(const Block& p, H& h, W& w, const Mask<B, N>& mask, Pool& pool) {
  if constexpr (!reads_memory<Block>())
    run(p, h, h, w, mask, pool);
  else if constexpr (is_repeat<Block>)
    for (const auto& block : p) block.decode_in_place(h, w, mask, pool);
  else
    p.decode_in_place(h, w, mask, pool);
}

// A Repeat of blocks that read the memory: their records, the gradient of the memory summed.
// Memory::replay: one record, and the inputs of blocks 1 … Count − 1 (block 0's, the memory and
// the masks kept by pointer, as a record keeps its inputs); backward runs each block's forward
// again into it before its backward: the same bits.
template <class Block, size_t Count, size_t B, size_t N, size_t M, Memory Keep>
struct RepeatWithMemory {
  static constexpr bool replay = Keep == Memory::replay && Count > 1;
  using Record = typename Block::template Acts<B, N, M, Keep>;
  using Dx = typename Record::Dx;
  using Rows = std::remove_reference_t<decltype(std::declval<Dx>().dq)>;
  using MemoryRows = std::remove_reference_t<decltype(std::declval<Dx>().dkv)>;
  struct Replay {
    std::array<Rows, Count - 1> inputs;
    const Rows* x = nullptr;
    const MemoryRows* m = nullptr;
    Mask<B, N> mask;
    const KeyMask<B, M>* keys = nullptr;
  };
  struct NoReplay {};  // of this record's own type: no padding beside a part's empty member
  std::array<Record, replay ? 1 : Count> blocks;
  [[no_unique_address]] std::conditional_t<replay, Replay, NoReplay> kept;
  struct Workspace {
    std::array<Rows, std::min<size_t>(Count - 1, 2)> d;
    MemoryRows dm;
    WorkspaceOf<Record> block;
  };
  Record& record(size_t i) { return blocks[replay ? 0 : i]; }

  template <class X>
  const Rows& forward(const Repeat<Block, Count>& p, const X& x, const MemoryRows& m, const Mask<B, N>& mask, const KeyMask<B, M>* keys) {
    if constexpr (replay) kept.x = &x, kept.m = &m, kept.mask = mask, kept.keys = keys;
    const Rows* h = &x;
    for (size_t i = 0; i < Count; ++i) {
      h = &record(i).forward(p[i], *h, m, mask, keys);
      if constexpr (replay)
        if (i + 1 < Count) h = &(kept.inputs[i] = *h);
    }
    return *h;
  }
  // dm: Σ_i the memory's gradient of block i, the last block's first.
  template <class D>
  Dx backward(const Repeat<Block, Count>& p, Repeat<Block, Count>& grad, const D& dout, Dx dx, Workspace& ws) {
    const D* d = &dout;
    kernels::fill<step::count<MemoryRows>>(dx.dkv.data(), 0.0f);
    for (size_t i = Count; i-- > 0;) {
      if constexpr (replay)
        if (i + 1 < Count) record(i).forward(p[i], i == 0 ? *kept.x : kept.inputs[i - 1], *kept.m, kept.mask, kept.keys);
      D& next = i == 0 ? dx.dq : ws.d[(Count - 1 - i) % 2];
      record(i).backward(p[i], grad[i], *d, {next, ws.dm}, ws.block);
      kernels::add_to<step::count<MemoryRows>>(ws.dm.data(), dx.dkv.data());
      d = &next;
    }
    return dx;
  }
};
template <class Block, size_t B, size_t N, size_t M, Memory Mem>
struct MemoryActsOf {
  using type = typename ActsWith<Block, B, N, Mem>::type;
};
template <class Block, size_t B, size_t N, size_t M, Memory Mem>
  requires(reads_memory<Block>())
struct MemoryActsOf<Block, B, N, M, Mem> {
  using type = typename Block::template Acts<B, N, M, Mem>;
};
template <class Block, size_t Count, size_t B, size_t N, size_t M, Memory Mem>
  requires(reads_memory<Block>())
struct MemoryActsOf<Repeat<Block, Count>, B, N, M, Mem> {
  using type = RepeatWithMemory<Block, Count, B, N, M, Mem>;
};
template <class Block, size_t B, size_t N, size_t M, Memory Mem = Memory::keep>
using MemoryActs = typename MemoryActsOf<Block, B, N, M, Mem>::type;
}  // namespace step

// CrossAttend<Query, KeyValue, Attention>: h ← h + Attention(Query(h), KeyValue(m)), rows h
// [B, N, D] over the memory m [B, M, Dm]; Query and KeyValue row-local parts (a norm, Identity),
// the attention a MultiHeadAttention of two inputs. A decoder's cross-attention sublayer, MAB's
// attention half. The memory's key mask reaches the attention.
//   forward only: KeyValue(m) (Identity: m itself) projected to the keys and values, Query(h)
//     into q, the heads added into h; scratch: KeyValue(m), q and the attention's work.
//   backward: dq, dkv = Attentionᵀ dy;  dh = dy + Queryᵀ dq;  dm = KeyValueᵀ dkv
template <class Query, class KeyValue, class Attention>
struct CrossAttend : step::Parts<Query, KeyValue, Attention> {
  static std::string declaration() { return declare("CrossAttend", DeclaredBlock<Query>{}, DeclaredBlock<KeyValue>{}, DeclaredBlock<Attention>{}); }
  static constexpr bool reads_memory = true;
  using Q = typename CrossAttend::template BlockAt<0>;
  using KV = typename CrossAttend::template BlockAt<1>;
  using A = typename CrossAttend::template BlockAt<2>;
  static_assert(step::row_local<Q>() && step::row_local<KV>(), "CrossAttend: the query and key/value parts are row-local (norms, Identity)");
  const A& attention() const { return this->template get<2>(); }
  A& attention() { return this->template get<2>(); }
  static constexpr bool kv_itself = std::is_empty_v<KV>;  // Identity: the attention reads m

  template <size_t B, size_t N>
  using Input = typename Q::template Input<B, N>;
  template <size_t B, size_t M>
  using MemoryRows = typename KV::template Input<B, M>;
  template <size_t B, size_t N>
  using Rows = step::Output<Q, B, N>;
  template <size_t B, size_t M>
  using KVRows = step::Output<KV, B, M>;

  // KeyValue(m) (none for Identity) and then Query(h) in one buffer, unless the attention folds
  // (it reads KeyValue(m) as it attends: kept beside).
  template <size_t B, size_t N, size_t M, size_t Room = 0>
  struct Scratch {
    static constexpr size_t T = tile_rows(B * N);
    static constexpr bool folded = A::template folds<N, M>;
    static constexpr bool apart = folded && !kv_itself;
    [[no_unique_address]] std::conditional_t<apart, KVRows<B, M>, Nothing> kv;
    std::conditional_t<apart || kv_itself, Phases<Rows<B, N>>, Phases<KVRows<B, M>, Rows<B, N>>> a;
    typename A::template Work<B, N, M, T> w;
  };
  template <size_t B, size_t N, size_t M, size_t Room, class Pool = Serial>
  void forward_in_place(Input<B, N>& h, const MemoryRows<B, M>& m, Scratch<B, N, M, Room>& w, const Mask<B, N>&, const KeyMask<B, M>* keys,
                        Pool&& pool = Pool{}) const {
    using S = Scratch<B, N, M, Room>;
    const typename KVRows<B, M>::value_type* kv = m.data();
    if constexpr (!kv_itself) {
      auto& rows = [&]() -> KVRows<B, M>& {
        if constexpr (S::apart)
          return w.kv;
        else
          return w.a.template start<KVRows<B, M>>();
      }();
      this->template get<1>().template apply<B * M>(m.data(), rows.data());
      kv = rows.data();
    }
    attention().template prepare<B, N, M, S::T>(kv, w.w, pool);
    auto& q = w.a.template start<Rows<B, N>>();
    this->template get<0>().template apply<B * N>(h.data(), q.data());
    attention().template forward_add<B, N, M, S::T>(q.data(), h.data(), w.w, Mask<B, M>{.keys = keys}, pool);
  }

  // Decoding (DecodeOf): KeyValue(m) projected once into the cache's memory (the key mask's rows
  // alone: MultiHeadAttention::remember), then each pass h ← h + Attention(Query(h), memory)
  // from it (decode_memory), m no longer read. Its cache holds the memory's keys and values alone.
  static constexpr bool decodes = true;
  static constexpr size_t memory_bytes(size_t batch, size_t rows) { return A::memory_bytes(batch, rows); }
  template <size_t B, size_t N, size_t M, size_t Room, class Pool = Serial>
  void remember(const MemoryRows<B, M>& m, const KeyMask<B, M>* keys, Scratch<B, N, M, Room>& w, Decoding& dec, Pool&& = Pool{}) const {
    const typename KVRows<B, M>::value_type* kv = m.data();
    if constexpr (!kv_itself) {
      auto& rows = [&]() -> KVRows<B, M>& {
        if constexpr (Scratch<B, N, M, Room>::apart)
          return w.kv;
        else
          return w.a.template start<KVRows<B, M>>();
      }();
      this->template get<1>().template apply<B * M>(m.data(), rows.data());
      kv = rows.data();
    }
    attention().template remember<B, M>(kv, keys, w.w.tile, dec);
  }
  template <size_t B, size_t N, size_t M, size_t Room, class Pool = Serial>
  void decode_in_place(Input<B, N>& h, Scratch<B, N, M, Room>& w, const Mask<B, N>& mask, Pool&& pool = Pool{}) const {
    using Work = typename A::template Work<B, N, M, Scratch<B, N, M, Room>::T>;
    auto& q = w.a.template start<Rows<B, N>>();
    this->template get<0>().template apply<B * N>(h.data(), q.data());
    attention().template decode_memory<B, N, M, Work::rows>(q.data(), h.data(), w.w.tile, *mask.decoding, pool);
  }

  // Memory::replay: the attention's record that keeps less, whose forward writes its workspace,
  // kept beside it (as Attend's).
  template <size_t B, size_t N, size_t M, Memory Keep = Memory::keep>
  struct Acts {
    static constexpr bool replay = Keep == Memory::replay && !A::template folds<N, M>;
    using QRecord = typename step::ActsWith<Q, B, N, Keep>::type;
    using KVRecord = typename step::ActsWith<KV, B, M, Keep>::type;
    using Record = typename A::template Acts<B, N, M, Keep>;
    using Dx = InputGrads<Input<B, N>, MemoryRows<B, M>>;
    [[no_unique_address]] QRecord q;
    [[no_unique_address]] KVRecord kv;
    Record attn;
    struct NoReplay {};  // of this record's own type: no padding beside a part's empty member
    [[no_unique_address]] std::conditional_t<replay, WorkspaceOf<Record>, NoReplay> kept;
    Input<B, N> out;
    struct Workspace {
      Rows<B, N> dq;
      KVRows<B, M> dkv;
      Phases<std::conditional_t<replay, Nothing, WorkspaceOf<Record>>, WorkspaceOf<QRecord>, WorkspaceOf<KVRecord>> part;
    };

    template <class X, class Mem>
    const Input<B, N>& forward(const CrossAttend& p, const X& x, const Mem& m, const Mask<B, N>&, const KeyMask<B, M>* keys) {
      const auto& xq = step::forward(q, p.template get<0>(), x, Mask<B, N>{});
      const auto& xkv = step::forward(kv, p.template get<1>(), m, Mask<B, M>{});
      const Mask<B, M> mask{.keys = keys};
      if constexpr (replay)
        kernels::add<step::count<Input<B, N>>>(x.data(), attn.forward(p.attention(), xq, xkv, mask, kept).data(), out.data());
      else
        kernels::add<step::count<Input<B, N>>>(x.data(), attn.forward(p.attention(), xq, xkv, mask).data(), out.data());
      return out;
    }
    Dx backward(const CrossAttend& p, CrossAttend& grad, const Input<B, N>& dout, Dx dx, Workspace& ws) {
      if constexpr (replay)
        attn.backward(p.attention(), grad.attention(), dout, {ws.dq, ws.dkv}, kept);
      else
        attn.backward(p.attention(), grad.attention(), dout, {ws.dq, ws.dkv}, ws.part.template start<WorkspaceOf<Record>>());
      step::copy_to(backward_with(q, p.template get<0>(), grad.template get<0>(), ws.dq, dx.dq, ws.part.template start<WorkspaceOf<QRecord>>()), dx.dq);
      kernels::add_to<step::count<Input<B, N>>>(dout.data(), dx.dq.data());
      step::copy_to(backward_with(kv, p.template get<1>(), grad.template get<1>(), ws.dkv, dx.dkv, ws.part.template start<WorkspaceOf<KVRecord>>()), dx.dkv);
      return dx;
    }
  };
};

template <bool Causal, class... Parts>
struct WithMemory : step::Parts<Parts...> {
  static std::string declaration() { return declare("WithMemory", DeclaredBlock<Parts>{}...); }
  static constexpr bool reads_memory = true, causal = Causal;
  static constexpr size_t count = sizeof...(Parts);
  template <size_t I>
  using BlockAt = typename step::Parts<Parts...>::template BlockAt<I>;
  template <size_t B, size_t N>
  using Input = typename BlockAt<0>::template Input<B, N>;
  static constexpr size_t first_reader = [] {
    size_t k = 0, found = count;
    ((step::reads_memory<typename step::Info<Parts>::Block>() && found == count ? found = k : 0, ++k), ...);
    return found;
  }();
  static_assert(first_reader < count, "WithMemory: no part reads the memory");
  template <size_t B, size_t M>
  using MemoryRows = typename step::MemoryRowsOf<BlockAt<first_reader>, B, M>::type;
  template <class Mem, size_t B, size_t M>
  static constexpr void check_memory() {
    static_assert(std::is_same_v<Mem, MemoryRows<B, M>>, "WithMemory: the memory m must be [B, M, Dm] (the pass's sizes, the width its first reader takes)");
  }

  // The parts' scratches over one another, each in the room of the largest.
  template <size_t B, size_t N, size_t M, size_t Room>
  static constexpr size_t room = std::max({Room, sizeof(step::MemoryScratch<typename step::Info<Parts>::Block, B, N, M, Room>)...});
  template <size_t B, size_t N, size_t M, size_t Room = 0>
  struct Scratch {
    Phases<step::MemoryScratch<typename step::Info<Parts>::Block, B, N, M, room<B, N, M, Room>>...> w;
  };
  template <size_t B, size_t N, size_t M, size_t Room, class Pool = Serial>
  void forward_in_place(Input<B, N>& h, const MemoryRows<B, M>& m, Scratch<B, N, M, Room>& w, const Mask<B, N>& pass, const KeyMask<B, M>* keys,
                        Pool&& pool = Pool{}) const {
    Mask<B, N> mask = pass;
    if constexpr (Causal) mask.causal = true;
    [&]<size_t... I>(std::index_sequence<I...>) {
      (step::run_with_memory(this->template get<I>(), h, m, w.w.template start<step::MemoryScratch<BlockAt<I>, B, N, M, room<B, N, M, Room>>>(), mask, keys,
                             pool),
       ...);
    }(std::make_index_sequence<count>{});
  }

  // Decoding (stformer/compose/decode.hpp): every part's keys and values of the memory into the
  // cache's memory, once; then passes of N rows from the cache's position (mask.decoding), the
  // rows' mask causal as the block's, that read them and not m.
  template <size_t B, size_t N, size_t M, size_t Room, class Pool = Serial>
  void remember(const MemoryRows<B, M>& m, const KeyMask<B, M>* keys, Scratch<B, N, M, Room>& w, Decoding& dec, Pool&& pool = Pool{}) const {
    [&]<size_t... I>(std::index_sequence<I...>) {
      (step::remember_with(this->template get<I>(), m, keys, w.w.template start<step::MemoryScratch<BlockAt<I>, B, N, M, room<B, N, M, Room>>>(), dec,
                           pool),
       ...);
    }(std::make_index_sequence<count>{});
  }
  template <size_t B, size_t N, size_t M, size_t Room, class Pool = Serial>
  void decode_in_place(Input<B, N>& h, Scratch<B, N, M, Room>& w, const Mask<B, N>& pass, Pool&& pool = Pool{}) const {
    Mask<B, N> mask = pass;
    if constexpr (Causal) mask.causal = true;
    [&]<size_t... I>(std::index_sequence<I...>) {
      (step::decode_with_memory(this->template get<I>(), h, w.w.template start<step::MemoryScratch<BlockAt<I>, B, N, M, room<B, N, M, Room>>>(), mask,
                                   pool),
       ...);
    }(std::make_index_sequence<count>{});
  }

  template <size_t B, size_t N, size_t M>
  struct Infer {
    Input<B, N> out;
    Scratch<B, N, M> w;
    // Decoding (DecodeOf over a memory): remember m's keys and values, then N rows a pass.
    template <class Mem, class Pool = Serial>
    void remember(const WithMemory& p, const Mem& m, const KeyMask<B, M>* keys, Decoding& dec, Pool&& pool = Pool{}) {
      check_memory<Mem, B, M>();
      p.remember(m, keys, w, dec, pool);
    }
    template <class X, class Pool = Serial>
    const Input<B, N>& decode(const WithMemory& p, const X& x, Decoding& dec, Pool&& pool = Pool{}) {
      static_assert(std::is_same_v<X, Input<B, N>>, "WithMemory: the rows x must be [B, N, D] (the pass's sizes, the block's width)");
      if (&x != &out) std::copy(x.begin(), x.end(), out.begin());
      p.decode_in_place(out, w, Mask<B, N>{.causal = true, .decoding = &dec}, pool);
      return out;
    }
    template <class X, class Mem, class Pool = Serial>
    const Input<B, N>& forward(const WithMemory& p, const X& x, const Mem& m, const KeyMask<B, M>* keys = nullptr, Pool&& pool = Pool{}) {
      static_assert(std::is_same_v<X, Input<B, N>>, "WithMemory: the rows x must be [B, N, D] (the pass's sizes, the block's width)");
      check_memory<Mem, B, M>();
      if (&x != &out) std::copy(x.begin(), x.end(), out.begin());
      p.forward_in_place(out, m, w, Mask<B, N>{}, keys, pool);
      return out;
    }
  };

  // The training record, Mem what it keeps. Memory::replay (two parts or more): one part's record
  // at a time, with its workspace, and the inputs of parts 1 … count − 1 (part 0's, the memory
  // and the masks kept by pointer); backward runs each part's forward again into it just before
  // its backward (the last part's is still there): the same bits, in the memory of the largest
  // part's record; each part's own record replays too (a Repeat's blocks, a Residual's chain).
  template <size_t B, size_t N, size_t M, Memory Keep = Memory::keep>
  struct Acts {
    static constexpr bool replays = Keep == Memory::replay && count > 1;
    using Dx = InputGrads<Input<B, N>, MemoryRows<B, M>>;
    template <size_t I>
    using PartActs = step::MemoryActs<BlockAt<I>, B, N, M, Keep>;
    template <class I>
    struct RecordsFor;
    template <size_t... I>
    struct RecordsFor<std::index_sequence<I...>> {
      using type = std::conditional_t<replays, Phases<step::WithWork<PartActs<I>>...>, step::Members<PartActs<I>...>>;
      using Work = std::conditional_t<replays, Nothing, Phases<WorkspaceOf<PartActs<I>>...>>;
    };
    using PartRecords = RecordsFor<std::make_index_sequence<count>>;
    typename PartRecords::type records;
    struct Replay {
      std::array<Input<B, N>, count - 1> inputs;  // parts 1 … count − 1's
      const Input<B, N>* x = nullptr;
      const MemoryRows<B, M>* m = nullptr;
      Mask<B, N> mask;
      const KeyMask<B, M>* keys = nullptr;
    };
    struct NoReplay {};  // of this record's own type: no padding beside a part's empty member
    [[no_unique_address]] std::conditional_t<replays, Replay, NoReplay> kept;
    struct Workspace {
      std::array<Input<B, N>, 2> d;  // the rows' gradients between the parts, in turn
      MemoryRows<B, M> dm;           // one part's gradient of the memory
      [[no_unique_address]] typename PartRecords::Work part;
    };

    template <class X, class Mem>
    const Input<B, N>& forward(const WithMemory& p, const X& x, const Mem& m, const KeyMask<B, M>* keys = nullptr) {
      return forward(p, x, m, Mask<B, N>{}, keys);
    }
    template <class X, class Mem>
    const Input<B, N>& forward(const WithMemory& p, const X& x, const Mem& m, const Mask<B, N>& pass, const KeyMask<B, M>* keys) {
      check_memory<Mem, B, M>();
      Mask<B, N> mask = pass;
      if constexpr (Causal) mask.causal = true;
      if constexpr (replays) {
        static_assert(std::is_same_v<X, Input<B, N>>, "WithMemory: a record that replays its parts takes the rows x as Input<B, N>");
        kept.x = &x, kept.m = &m, kept.mask = mask, kept.keys = keys;
      }
      return forward_from<0>(p, x, m, mask, keys);
    }
    // dx.dkv: the parts' gradients of the memory summed, the last part's first.
    Dx backward(const WithMemory& p, WithMemory& grad, const Input<B, N>& dout, Dx dx, Workspace& ws) {
      kernels::fill<step::count<MemoryRows<B, M>>>(dx.dkv.data(), 0.0f);
      backward_from<count - 1>(p, grad, dout, dx, ws);
      return dx;
    }

   private:
    template <size_t I, class X>
    const Input<B, N>& forward_part(const WithMemory& p, const X& x, const MemoryRows<B, M>& m, const Mask<B, N>& mask, const KeyMask<B, M>* keys) {
      if constexpr (step::reads_memory<BlockAt<I>>())
        return record<I>(true).forward(p.template get<I>(), x, m, mask, keys);
      else
        return step::forward(record<I>(true), p.template get<I>(), x, mask);
    }
    template <size_t I, class X>
    const Input<B, N>& forward_from(const WithMemory& p, const X& x, const MemoryRows<B, M>& m, const Mask<B, N>& mask, const KeyMask<B, M>* keys) {
      const Input<B, N>& h = forward_part<I>(p, x, m, mask, keys);
      if constexpr (I + 1 == count)
        return h;
      else if constexpr (replays)  // the next part's record takes h's place: its input is kept
        return forward_from<I + 1>(p, kept.inputs[I] = h, m, mask, keys);
      else
        return forward_from<I + 1>(p, h, m, mask, keys);
    }
    template <size_t I>
    void backward_from(const WithMemory& p, WithMemory& grad, const Input<B, N>& d, Dx dx, Workspace& ws) {
      if constexpr (replays && I + 1 < count) forward_part<I>(p, I == 0 ? *kept.x : kept.inputs[I - 1], *kept.m, kept.mask, kept.keys);
      Input<B, N>& next = I == 0 ? dx.dq : ws.d[(count - 1 - I) % 2];
      auto& w = workspace<I>(ws);
      if constexpr (step::reads_memory<BlockAt<I>>()) {
        record<I>().backward(p.template get<I>(), grad.template get<I>(), d, {next, ws.dm}, w);
        kernels::add_to<step::count<MemoryRows<B, M>>>(ws.dm.data(), dx.dkv.data());
      } else {
        step::copy_to(backward_with(record<I>(), p.template get<I>(), grad.template get<I>(), d, next, w), next);
      }
      if constexpr (I > 0) backward_from<I - 1>(p, grad, next, dx, ws);
    }
    template <size_t I>
    PartActs<I>& record(bool begin = false) {
      if constexpr (replays)
        return (begin ? records.template start<step::WithWork<PartActs<I>>>() : records.template current<step::WithWork<PartActs<I>>>()).acts;
      else
        return step::get<I>(records);
    }
    template <size_t I>
    WorkspaceOf<PartActs<I>>& workspace(Workspace& ws) {
      if constexpr (replays)
        return records.template current<step::WithWork<PartActs<I>>>().ws;
      else
        return ws.part.template start<WorkspaceOf<PartActs<I>>>();
    }
  };
};

}  // namespace stformer
