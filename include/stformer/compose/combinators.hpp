// Combinators: blocks made of other blocks, declared as a model is
// (stformer/compose/sequential.hpp), with no forward, backward or plan of their own to write:
//
//   Residual<Body>              y = x + Body(x)
//   Parallel<Branches...>       y = Σᵢ Branchᵢ(x), every branch reading the same x
//   Gated<Gate, Value>          y = Gate(x) ⊙ Value(x) (GLU, SwiGLU)
//   Attend<Query, KeyValue, Attention, Ordered>
//                               y = Attention(Query(x), KeyValue(x)): an attention (a block of two
//                               inputs, MultiHeadAttention) of x's rows over themselves, each input
//                               through a row-local part of its own (the Set Transformer's SAB:
//                               MAB(X, X), its norms nq and nkv); Ordered = false: rows of a set,
//                               the pass's causal flag not read (declares_unordered)
//
// A part is a block, or Named<"name", Block>, or a chain Sequential<...> of several. A
// combinator adds no name level of its own: Residual's body is named as if it stood in the
// combinator's place; the branches of Parallel and Gated are indexed 0, 1, … as a chain's steps
// are, unless Named. So GPT-J's block (one norm, attention and feed-forward side by side on it):
//
//   template <size_t D, size_t H, size_t F>
//   using ParallelBlock = Residual<Sequential<Named<"ln_1", LayerNorm<D>>,
//                                             Parallel<Named<"attn", SelfAttention<D, H>>, Named<"mlp", FeedForward<D, F, act::GELU>>>>>;
//
// Each is a step of a Sequential: a forward-only pass in the chain's arena (Scratch, run or
// forward_in_place) and a training record (Acts, with its backward into the caller's dx and a
// workspace used only during the call). The masks a pass is given reach every part.
//   Residual: in place. A body that is a chain ending in a step that adds into a stream
//     (step::Adds: run_add) runs the steps before it in the chain's plan of them and the last
//     into the stream; a body that is one such step reading the stream itself
//     (step::adds_from_stream) runs into the stream; any other body into its scratch
//     t = Body(x) [B, N, D], then h += t.
//     backward: dx = dy + Bodyᵀ dy
//     A body of row-local steps (a norm and a feed-forward layer declared as a chain) runs in
//     tiles of rows instead, each tile's output added into the stream, where that takes less.
//   Parallel: from x into y; its scratch one branch's output and the branches' scratches, one
//     at a time; y = ((Branch₀(x) + Branch₁(x)) + …) in branch order.
//     backward: dx = Σᵢ Branchᵢᵀ dy
//   Gated: from x into y; its scratch Gate(x) and the parts' scratches, one at a time.
//     backward: dg = dy ⊙ Value(x), dv = dy ⊙ Gate(x);  dx = Gateᵀ dg + Valueᵀ dv
//   Attend: into a stream (run_add, reading x whole before it writes: a residual's body alone,
//     x the stream itself) or into y zeroed; its scratch a [B, N, D]: KeyValue(x) until the keys
//     and values are projected, then Query(x), the heads in place; and the attention's work. The
//     pass's mask reaches the attention (causal unless Ordered = false, key padding).
//     backward: dq, dkv = Attentionᵀ dy;  dx = Queryᵀ dq + KeyValueᵀ dkv
#pragma once

#include "../core/config.hpp"

#include <algorithm>
#include <climits>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "../kernels/rowwise.hpp"
#include "sequential.hpp"

namespace stformer::inline STFORMER_ABI {

namespace step {

// The number of entries of a fixed tensor type.
template <class T>
inline constexpr size_t count = [] {
  size_t n = 1;
  for (size_t d : dims<T>) n *= d;
  return n;
}();

// Room minus what a combinator keeps beside its parts' scratch, at least 0.
constexpr size_t room_after(size_t room, size_t used) { return room > used ? room - used : 0; }

// y ← y + a, N entries: float, or int16 streams at one scale, the sum saturated (an integer
// combinator's, stformer/quantized/combinators.hpp).
template <size_t N, class T>
void add_to(const T* a, T* y) {
  if constexpr (std::is_same_v<T, float>)
    kernels::add_to<N>(a, y);
  else
    for (size_t j = 0; j < N; ++j) y[j] = T(std::clamp<std::int32_t>(std::int32_t(y[j]) + a[j], INT16_MIN, INT16_MAX));
}

// y ← y ⊙ a, n entries.
template <size_t N>
void multiply_into(const float* a, float* y) {
  for (size_t j = 0; j < N; ++j) y[j] *= a[j];
}
// y ← a ⊙ b, n entries.
template <size_t N>
void multiply(const float* a, const float* b, float* y) {
  for (size_t j = 0; j < N; ++j) y[j] = a[j] * b[j];
}

// A step that adds its output into a stream the caller keeps (a residual body's last step):
//   h ← h + Block(x):  p.run_add(x, h, w, mask, pool)
// the values of y = Block(x) added entry by entry (int16 streams: the sum saturated once). x, an
// output of the steps before it in the caller's arena, may be overwritten. w: the block's
// Scratch.
// A step whose run_add may be given the stream itself as x: it reads x whole, or tile by tile
// before it writes those rows, and never writes x (Block::adds_from_stream = true: the integer
// attention and feed-forward layer on an int16 stream). A residual whose body is such a step
// alone runs it into the stream: no copy of the stream, no output beside it.
template <class Block>
constexpr bool adds_from_stream() {
  if constexpr (requires { Block::adds_from_stream; })
    return Block::adds_from_stream;
  else
    return false;
}

template <class Block, class In, class Out, size_t B, size_t N>
concept Adds = requires(const Block& p, In& x, Out& h, Scratch<Block, B, N, 0>& w, const Mask<B, N>& mask, Serial& pool) {
  p.run_add(x, h, w, mask, pool);
};

}  // namespace step

template <class Body>
struct Residual {
  using Block = typename step::Info<Body>::Block;
  Block body;

  template <class F, class... S>
  static constexpr void visit(const Path& at, F& f, S&... s) {
    step::visit_part<Body>(at, 0, false, f, s.body...);
  }

  template <size_t B, size_t N>
  using Input = typename Block::template Input<B, N>;
  static constexpr bool in_place = true;

  // Fused: the body is a chain of two steps or more whose last step adds into a stream
  // (step::Adds): the steps before it run in the chain's own plan of them (its Infer of
  // steps − 1 steps), the last adds into h, and Body(h) is never whole beside the stream.
  // Otherwise the body runs into t [B, N, D], then h += t. The same values either way (in
  // integers, fused, the sum is saturated once).
  template <size_t B, size_t N>
  static constexpr bool fused = [] {
    if constexpr (requires { Block::steps; }) {
      if constexpr (Block::steps >= 2)
        return step::Adds<typename Block::template BlockAt<Block::steps - 1>, typename Block::template InputAt<B, N, Block::steps - 1>, Input<B, N>, B, N>;
    } else if constexpr (step::adds_from_stream<Block>()) {
      return step::Adds<Block, Input<B, N>, Input<B, N>, B, N>;
    }
    return false;
  }();
  template <size_t B, size_t N>
  static constexpr bool chain = requires { Block::steps; };
  template <size_t B, size_t N, size_t Room>
  struct Whole {
    Input<B, N> t;  // Body(x)
    [[no_unique_address]] step::Scratch<Block, B, N, step::room_after(Room, sizeof(Input<B, N>))> w;
  };
  template <size_t B, size_t N, size_t Room>
  struct Fused {
    static constexpr size_t last = Block::steps - 1;
    typename Block::template Infer<B, N, last> before;  // steps 0 … last − 1
    [[no_unique_address]] step::Scratch<typename Block::template BlockAt<last>, B, N, step::room_after(Room, sizeof(before))> w;
  };
  // Tiled: not fused, the body a chain of row-local steps that runs in tiles of rows in the room
  // (Sequential::Tiles): each tile's output added into the stream's rows, no t.
  template <size_t B, size_t N, size_t Room>
  static constexpr bool tiled = [] {
    if constexpr (!fused<B, N> && chain<B, N>)
      return requires { step::Scratch<Block, B, N, Room>::row_tiles; };
    else
      return false;
  }();
  template <size_t B, size_t N, size_t Room = 0>
  using Scratch = std::conditional_t<
      tiled<B, N, Room>, step::Scratch<Block, B, N, Room>,
      std::conditional_t<!fused<B, N>, Whole<B, N, Room>, std::conditional_t<chain<B, N>, Fused<B, N, Room>, step::Scratch<Block, B, N, Room>>>>;

  template <size_t B, size_t N, class W, class Pool = Serial>
  void forward_in_place(Input<B, N>& h, W& w, const Mask<B, N>& pass, Pool&& pool = Pool{}) const {
    static_assert(std::is_same_v<Input<B, N>, step::Output<Block, B, N>>, "Residual<Body>: the body's output must have its input's shape");
    const Mask<B, N> mask = step::mask_for<Block>(pass);
    if constexpr (requires { W::row_tiles; }) {
      constexpr size_t row = dims<Input<B, N>>.back();
      body.for_tiles(h, w, pool, [&](size_t r0, const auto& out) {
        step::add_to<step::count<std::remove_cvref_t<decltype(out)>>>(out.data(), h.data() + r0 * row);
      });
    } else if constexpr (fused<B, N> && !chain<B, N>) {
      body.run_add(h, h, w, mask, pool);
    } else if constexpr (fused<B, N>) {
      constexpr size_t last = W::last;
      // the steps before the last write their outputs in w.before, which the last may overwrite
      auto& x = const_cast<typename Block::template InputAt<B, N, last>&>(w.before.template forward_steps<0, last>(body, h, mask, pool));
      body.template get<last>().run_add(x, h, w.w, mask, pool);
    } else {
      step::run(body, h, w.t, w.w, mask, pool);
      step::add_to<step::count<Input<B, N>>>(w.t.data(), h.data());
    }
  }

  template <size_t B, size_t N, Memory M = Memory::keep>
  struct Acts {
    using Record = typename step::ActsWith<Block, B, N, M>::type;
    using Dx = Input<B, N>;
    Record body;
    Input<B, N> out;
    struct Workspace {
      [[no_unique_address]] WorkspaceOf<Record> body;
    };

    template <class X>
    const Input<B, N>& forward(const Residual& p, const X& x, const Mask<B, N>& mask = {}) {
      const auto& y = step::forward(body, p.body, x, mask);
      kernels::add<step::count<Dx>>(x.data(), y.data(), out.data());
      return out;
    }
    const Dx& backward(const Residual& p, Residual& grad, const Input<B, N>& dout, Dx& dx, Workspace& ws) {
      step::copy_to(backward_with(body, p.body, grad.body, dout, dx, ws.body), dx);
      kernels::add_to<step::count<Dx>>(dout.data(), dx.data());
      return dx;
    }
  };
};

// What Parallel and Gated share: parts indexed 0, 1, … (or Named), each reading x.
template <class... Parts>
struct Branches : step::Parts<Parts...> {
  using step::Parts<Parts...>::count, step::Parts<Parts...>::get;
  template <size_t I>
  using BlockAt = typename step::Parts<Parts...>::template BlockAt<I>;

  template <size_t B, size_t N>
  using Input = typename BlockAt<0>::template Input<B, N>;
  template <size_t B, size_t N>
  using Output = step::Output<BlockAt<0>, B, N>;
  static constexpr bool row_local = []<size_t... I>(std::index_sequence<I...>) {
    return (step::row_local<BlockAt<I>>() && ...);
  }(std::make_index_sequence<count>{});
  template <size_t B, size_t N>
  static constexpr bool same_shapes = [] {
    return []<size_t... I>(std::index_sequence<I...>) {
      return ((std::is_same_v<typename BlockAt<I>::template Input<B, N>, Input<B, N>> &&
               std::is_same_v<step::Output<BlockAt<I>, B, N>, Output<B, N>>) &&
              ...);
    }(std::make_index_sequence<count>{});
  }();

  // The parts' scratches (Room each) and training records, one type per part.
  template <size_t B, size_t N, size_t Room, class I = std::make_index_sequence<count>>
  struct PartsOf;
  template <size_t B, size_t N, size_t Room, size_t... I>
  struct PartsOf<B, N, Room, std::index_sequence<I...>> {
    using Scratches = Phases<step::Scratch<BlockAt<I>, B, N, Room>...>;
    template <Memory M>
    using Records = step::Members<typename step::ActsWith<BlockAt<I>, B, N, M>::type...>;
    template <Memory M>
    using Workspaces = Phases<WorkspaceOf<typename step::ActsWith<BlockAt<I>, B, N, M>::type>...>;
  };

  // The forward-only scratch of Parallel and Gated: t, one part's output beside y (a branch
  // after the first; the gate), and the parts' scratches, one at a time, in the room left.
  template <size_t B, size_t N, size_t Room = 0>
  struct Scratch {
    static_assert(same_shapes<B, N>, "Parallel, Gated: every part must take the first part's input and give its output's shape");
    static constexpr size_t room = step::room_after(Room, sizeof(Output<B, N>));
    Output<B, N> t;
    typename PartsOf<B, N, room>::Scratches w;
  };

  // y ← part I of x, in the scratch's phase of it.
  template <size_t I, size_t B, size_t N, size_t Room, class X, class Y, class Pool>
  void run_part(const X& x, Y& y, Scratch<B, N, Room>& w, const Mask<B, N>& mask, Pool& pool) const {
    using S = step::Scratch<BlockAt<I>, B, N, Scratch<B, N, Room>::room>;
    step::run(this->template get<I>(), x, y, w.w.template start<S>(), mask, pool);
  }
  // Gated's pass, float or integer: y ← Value(x), t ← Gate(x), then y ← gate(t, y) entry by entry.
  template <size_t B, size_t N, size_t Room, class Pool, class Gate>
  void run_gated(const Input<B, N>& x, Output<B, N>& y, Scratch<B, N, Room>& w, const Mask<B, N>& mask, Pool& pool, Gate&& gate) const {
    run_part<1>(x, y, w, mask, pool);
    run_part<0>(x, w.t, w, mask, pool);
    gate(w.t.data(), y.data());
  }
  // dx ← part I's input gradient for dy, in the workspace's phase of it.
  template <size_t I, class R, class D, class Dx, class W>
  void backward_part(R& record, const D& dy, Branches& grad, Dx& dx, W& ws) const {
    step::copy_to(backward_with(record, this->template get<I>(), grad.template get<I>(), dy, dx, ws.template start<WorkspaceOf<R>>()), dx);
  }
};

template <class... Br>
struct Parallel : Branches<Br...> {
  using Base = Branches<Br...>;
  static_assert(sizeof...(Br) > 0, "Parallel: at least one branch");
  template <size_t B, size_t N>
  using Input = typename Base::template Input<B, N>;
  template <size_t B, size_t N>
  using Output = typename Base::template Output<B, N>;

  template <size_t B, size_t N, size_t Room = 0>
  using Scratch = typename Base::template Scratch<B, N, Room>;  // t: branch i's output, i > 0

  template <size_t B, size_t N, size_t Room, class Pool = Serial>
  void run(const Input<B, N>& x, Output<B, N>& y, Scratch<B, N, Room>& w, const Mask<B, N>& mask, Pool&& pool = Pool{}) const {
    [&]<size_t... I>(std::index_sequence<I...>) {
      (
          [&] {
            if constexpr (I == 0) {
              this->template run_part<0>(x, y, w, mask, pool);
            } else {
              this->template run_part<I>(x, w.t, w, mask, pool);
              step::add_to<step::count<Output<B, N>>>(w.t.data(), y.data());
            }
          }(),
          ...);
    }(std::make_index_sequence<Base::count>{});
  }

  template <size_t B, size_t N, Memory M = Memory::keep>
  struct Acts {
    static_assert(Base::template same_shapes<B, N>, "Parallel: every branch must take the first's input and give its output's shape");
    using Parts = typename Base::template PartsOf<B, N, 0>;
    using Dx = Input<B, N>;
    typename Parts::template Records<M> records;
    Output<B, N> out;
    struct Workspace {
      Dx d;  // branch i's input gradient, i > 0
      typename Parts::template Workspaces<M> part;
    };

    template <class X>
    const Output<B, N>& forward(const Parallel& p, const X& x, const Mask<B, N>& mask = {}) {
      [&]<size_t... I>(std::index_sequence<I...>) {
        (
            [&] {
              const auto& y = step::forward(step::get<I>(records), p.template get<I>(), x, mask);
              if constexpr (I == 0)
                std::copy(y.begin(), y.end(), out.begin());
              else
                kernels::add_to<step::count<Output<B, N>>>(y.data(), out.data());
            }(),
            ...);
      }(std::make_index_sequence<Base::count>{});
      return out;
    }
    const Dx& backward(const Parallel& p, Parallel& grad, const Output<B, N>& dout, Dx& dx, Workspace& ws) {
      [&]<size_t... I>(std::index_sequence<I...>) {
        (
            [&] {
              if constexpr (I == 0) {
                p.template backward_part<0>(step::get<0>(records), dout, grad, dx, ws.part);
              } else {
                p.template backward_part<I>(step::get<I>(records), dout, grad, ws.d, ws.part);
                kernels::add_to<step::count<Dx>>(ws.d.data(), dx.data());
              }
            }(),
            ...);
      }(std::make_index_sequence<Base::count>{});
      return dx;
    }
  };
};

template <class Gate, class Value>
struct Gated : Branches<Gate, Value> {
  using Base = Branches<Gate, Value>;
  template <size_t B, size_t N>
  using Input = typename Base::template Input<B, N>;
  template <size_t B, size_t N>
  using Output = typename Base::template Output<B, N>;

  template <size_t B, size_t N, size_t Room = 0>
  using Scratch = typename Base::template Scratch<B, N, Room>;  // t: Gate(x)

  template <size_t B, size_t N, size_t Room, class Pool = Serial>
  void run(const Input<B, N>& x, Output<B, N>& y, Scratch<B, N, Room>& w, const Mask<B, N>& mask, Pool&& pool = Pool{}) const {
    this->run_gated(x, y, w, mask, pool, [](const auto* g, auto* v) { step::multiply_into<step::count<Output<B, N>>>(g, v); });
  }

  template <size_t B, size_t N, Memory M = Memory::keep>
  struct Acts {
    static_assert(Base::template same_shapes<B, N>, "Gated<Gate, Value>: the gate and the value must take the same input and give the same shape");
    using Parts = typename Base::template PartsOf<B, N, 0>;
    using Dx = Input<B, N>;
    static constexpr size_t n = step::count<Output<B, N>>;
    typename Parts::template Records<M> records;
    const Output<B, N>*g = nullptr, *v = nullptr;  // Gate(x), Value(x) in the parts' records
    Output<B, N> out;
    struct Workspace {
      Output<B, N> dg, dv;
      Dx d;  // the value's input gradient
      typename Parts::template Workspaces<M> part;
    };

    template <class X>
    const Output<B, N>& forward(const Gated& p, const X& x, const Mask<B, N>& mask = {}) {
      g = &step::forward(step::get<0>(records), p.template get<0>(), x, mask);
      v = &step::forward(step::get<1>(records), p.template get<1>(), x, mask);
      step::multiply<n>(g->data(), v->data(), out.data());
      return out;
    }
    const Dx& backward(const Gated& p, Gated& grad, const Output<B, N>& dout, Dx& dx, Workspace& ws) {
      step::multiply<n>(dout.data(), v->data(), ws.dg.data());
      step::multiply<n>(dout.data(), g->data(), ws.dv.data());
      p.template backward_part<0>(step::get<0>(records), ws.dg, grad, dx, ws.part);
      p.template backward_part<1>(step::get<1>(records), ws.dv, grad, ws.d, ws.part);
      kernels::add_to<step::count<Dx>>(ws.d.data(), dx.data());
      return dx;
    }
  };
};

template <class Query, class KeyValue, class Attention, bool Ordered = true>
struct Attend : step::Parts<Query, KeyValue, Attention> {
  using Base = step::Parts<Query, KeyValue, Attention>;
  static constexpr bool ordered = Ordered;
  using Q = typename Base::template BlockAt<0>;
  using KV = typename Base::template BlockAt<1>;
  using A = typename Base::template BlockAt<2>;
  const A& attention() const { return this->template get<2>(); }
  A& attention() { return this->template get<2>(); }

  template <size_t B, size_t N>
  using Input = typename Q::template Input<B, N>;
  template <size_t B, size_t N>
  using Rows = step::Output<Q, B, N>;  // the queries' rows, and the keys' and values'
  template <size_t B, size_t N>
  using Output = std::remove_cvref_t<decltype(std::declval<typename A::template Infer<B, N, N>&>().out)>;
  static constexpr bool in_place = false, adds_from_stream = true;

  // Rows over themselves never fold (blocks/attention.hpp: folds needs H·Dkv < D): the keys and
  // values are projected, and a holds the rows of each input in turn.
  template <size_t B, size_t N, size_t Room = 0>
  struct Scratch {
    static_assert(std::is_same_v<typename KV::template Input<B, N>, Input<B, N>> && std::is_same_v<step::Output<KV, B, N>, Rows<B, N>>,
                  "Attend<Query, KeyValue, Attention>: the query and key/value parts must take the same input and give the same rows");
    static_assert(std::is_empty_v<step::Scratch<Q, B, N, 0>> && std::is_empty_v<step::Scratch<KV, B, N, 0>>,
                  "Attend<Query, KeyValue, Attention>: the query and key/value parts are steps without scratch (norms, Identity)");
    static_assert(!A::template folds<N, N>, "Attend: an attention of rows over themselves does not fold");
    static constexpr size_t T = tile_rows(B * N);
    Rows<B, N> a;
    typename A::template Work<B, N, N, T> w;
  };

  // h ← h + Attention(Query(x), KeyValue(x)); x (which may be h) is read whole before h is written.
  template <size_t B, size_t N, size_t Room, class Pool = Serial>
  void run_add(const Input<B, N>& x, Output<B, N>& h, Scratch<B, N, Room>& w, const Mask<B, N>& mask, Pool&& pool = Pool{}) const {
    constexpr size_t T = Scratch<B, N, Room>::T;
    Nothing none;
    step::run(this->template get<1>(), x, w.a, none, mask, pool);
    attention().template prepare<B, N, N, T>(w.a.data(), w.w, pool);
    step::run(this->template get<0>(), x, w.a, none, mask, pool);
    attention().template forward_add<B, N, N, T>(w.a.data(), h.data(), w.w, mask, pool);
  }
  template <size_t B, size_t N, size_t Room, class Pool = Serial>
  void run(const Input<B, N>& x, Output<B, N>& y, Scratch<B, N, Room>& w, const Mask<B, N>& mask, Pool&& pool = Pool{}) const {
    std::fill(y.begin(), y.end(), typename Output<B, N>::value_type{});
    run_add(x, y, w, mask, pool);
  }

  // Memory::replay: the attention's record that keeps less, whose forward writes its workspace:
  // kept beside it (as SelfAttention's). dkv is written over the record's concat_h(o_h), which
  // the attention's backward reads first (W_o's gradient) and never again.
  template <size_t B, size_t N, Memory M = Memory::keep>
  struct Acts {
    static constexpr bool replay = M == Memory::replay;
    using QRecord = typename step::ActsWith<Q, B, N, M>::type;
    using KVRecord = typename step::ActsWith<KV, B, N, M>::type;
    using Record = typename A::template Acts<B, N, N, M>;
    using Dx = Input<B, N>;
    QRecord q;
    KVRecord kv;
    Record attn;
    [[no_unique_address]] std::conditional_t<replay, WorkspaceOf<Record>, Nothing> kept;
    struct Workspace {
      Rows<B, N> dq;
      Dx d;  // the key/value part's input gradient
      [[no_unique_address]] std::conditional_t<replay, Nothing, WorkspaceOf<Record>> attn;
      Phases<WorkspaceOf<QRecord>, WorkspaceOf<KVRecord>> part;
    };

    template <class X>
    const Output<B, N>& forward(const Attend& p, const X& x, const Mask<B, N>& mask = {}) {
      const auto& xq = step::forward(q, p.template get<0>(), x, mask);
      const auto& xkv = step::forward(kv, p.template get<1>(), x, mask);
      if constexpr (replay)
        return attn.forward(p.attention(), xq, xkv, mask, kept);
      else
        return attn.forward(p.attention(), xq, xkv, mask);
    }
    const Dx& backward(const Attend& p, Attend& grad, const Output<B, N>& dout, Dx& dx, Workspace& ws) {
      Rows<B, N>& dkv = attn.heads;
      if constexpr (replay)
        attn.backward(p.attention(), grad.attention(), dout, {ws.dq, dkv}, kept);
      else
        attn.backward(p.attention(), grad.attention(), dout, {ws.dq, dkv}, ws.attn);
      step::copy_to(backward_with(q, p.template get<0>(), grad.template get<0>(), ws.dq, dx, ws.part.template start<WorkspaceOf<QRecord>>()), dx);
      const auto& d = backward_with(kv, p.template get<1>(), grad.template get<1>(), dkv, ws.d, ws.part.template start<WorkspaceOf<KVRecord>>());
      kernels::add_to<step::count<Dx>>(d.data(), dx.data());
      return dx;
    }
  };
};

}  // namespace stformer
