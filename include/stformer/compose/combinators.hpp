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
//   SeedAttend<"seeds", K, Query, KeyValue, Attention>
//                               y = S + Attention(Query(S), KeyValue(x)), S K learned rows (the
//                               Set Transformer's PMA and ISAB's MAB1, their attention half)
//   SeedQuery<"query", K, Query, Attention>
//                               y = Attention(Query(S), x), the attention's own output (SPEC's
//                               pointer head: log-probabilities over x's rows)
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
  static std::string declaration() { return declare("Residual", DeclaredBlock<Body>{}); }
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
  // (step::RowTiles, or Sequential::Tiles): each tile's output added into the stream's rows, no t.
  template <size_t B, size_t N, size_t Room>
  static constexpr bool tiled = [] {
    if constexpr (!fused<B, N> && chain<B, N>)
      return requires { step::Scratch<Block, B, N, Room>::row_tiles; };
    else
      return false;
  }();
  template <size_t B, size_t N, size_t Room>
  static consteval auto scratch_for() {
    if constexpr (tiled<B, N, Room>) {
      if constexpr (Block::leaf_rows)
        return std::type_identity<typename Block::template RowScratch<B, N, Room, false>>{};
      else
        return std::type_identity<step::Scratch<Block, B, N, Room>>{};
    } else if constexpr (!fused<B, N>)
      return std::type_identity<Whole<B, N, Room>>{};
    else if constexpr (chain<B, N>)
      return std::type_identity<Fused<B, N, Room>>{};
    else
      return std::type_identity<step::Scratch<Block, B, N, Room>>{};
  }
  template <size_t B, size_t N, size_t Room = 0>
  using Scratch = typename decltype(scratch_for<B, N, Room>())::type;

  template <size_t B, size_t N, class W, class Pool = Serial>
  void forward_in_place(Input<B, N>& h, W& w, const Mask<B, N>& pass, Pool&& pool = Pool{}) const {
    static_assert(std::is_same_v<Input<B, N>, step::Output<Block, B, N>>, "Residual<Body>: the body's output must have its input's shape");
    const Mask<B, N> mask = step::mask_for<Block>(pass);
    if constexpr (requires { W::row_tiles; }) {
      if constexpr (Block::leaf_rows) {
        w.run(body.row_leaves(), h.data(), h.data(), pool);
      } else {
        constexpr size_t row = dims<Input<B, N>>.back();
        body.for_tiles(h, w, pool, [&](size_t r0, const auto& out) {
          step::add_to<step::count<std::remove_cvref_t<decltype(out)>>>(out.data(), h.data() + r0 * row);
        });
      }
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
  static std::string declaration() { return declare("Parallel", DeclaredBlock<Br>{}...); }
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
  static std::string declaration() { return declare("Gated", DeclaredBlock<Gate>{}, DeclaredBlock<Value>{}); }
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

namespace step {
// The scratch of an attention over the rows a KeyValue part makes of x (Attend, QAttend): a
// holds KeyValue(x) until the keys and values are projected (unless OwnKV: the rows kept in kv,
// for a folded attention, which reads them as it attends, or a chain's rows of its own), then
// Query(x); w the attention's work. A KeyValue with scratch of its own (a chain) runs in the
// phase before a and w.
template <class Rows, class KVRows, class KVScratch, class Work, bool OwnKV>
struct AttendScratch {
  struct Heads {
    std::conditional_t<OwnKV, Phases<Rows>, Phases<Rows, KVRows>> a;
    Work w;
  };
  [[no_unique_address]] std::conditional_t<OwnKV, KVRows, Nothing> kv;
  std::conditional_t<std::is_empty_v<KVScratch>, Phases<Heads>, Phases<KVScratch, Heads>> phase;
  // run(rows, scratch) writes KeyValue(x) into rows; then the heads' phase is on.
  template <class Run>
  KVRows& key_rows(Run&& run) {
    if constexpr (std::is_empty_v<KVScratch>) {
      auto& h = phase.template start<Heads>();
      KVRows& rows = [&]() -> KVRows& {
        if constexpr (OwnKV)
          return kv;
        else
          return h.a.template start<KVRows>();
      }();
      Nothing none;
      run(rows, none);
      return rows;
    } else {
      run(kv, phase.template start<KVScratch>());
      phase.template start<Heads>();
      return kv;
    }
  }
  Heads& heads() { return phase.template current<Heads>(); }
};
}  // namespace step

template <class Query, class KeyValue, class Attention, bool Ordered = true>
struct Attend : step::Parts<Query, KeyValue, Attention> {
  static std::string declaration() {
    return declare("Attend", DeclaredBlock<Query>{}, DeclaredBlock<KeyValue>{}, DeclaredBlock<Attention>{}, Ordered);
  }
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
  using Rows = step::Output<Q, B, N>;  // the queries' rows
  template <size_t B, size_t N>
  using KVRows = step::Output<KV, B, N>;  // the keys' and values' rows, Nk of them
  template <size_t B, size_t N>
  static constexpr size_t Nk = dims<KVRows<B, N>>[1];
  template <size_t B, size_t N>
  using Output = std::remove_cvref_t<decltype(std::declval<typename A::template Infer<B, N, Nk<B, N>>&>().out)>;
  static constexpr bool in_place = false, adds_from_stream = true;

  // The attention's mask: the pass's when KeyValue keeps x's rows (row-local: a norm), none over
  // rows of its own (ISAB's MAB2 over the inducing points' MAB1(I, X)).
  template <size_t B, size_t N>
  static Mask<B, Nk<B, N>> keys(const Mask<B, N>& mask) {
    if constexpr (step::row_local<KV>())
      return mask;
    else
      return {};
  }

  // step::AttendScratch, its rows' tile: with a KeyValue without scratch (a norm), as many rows
  // as tile_rows; with a KeyValue with scratch (ISAB's MAB1(I, X) then a norm), as many as fit
  // in that scratch's room (its phase is over), and the caller's beside KeyValue(x).
  template <size_t B, size_t N>
  struct AttendOf {
    static constexpr size_t K = Nk<B, N>;
    using KVScratch = step::Scratch<KV, B, N, 0>;
    static constexpr bool own_kv = A::template folds<N, K> || !std::is_empty_v<KVScratch>;
    template <size_t T>
    using With = step::AttendScratch<Rows<B, N>, KVRows<B, N>, KVScratch, typename A::template Work<B, N, K, T>, own_kv>;
    template <size_t T>
    using Heads = typename With<T>::Heads;
  };
  template <size_t B, size_t N, size_t Room>
  static constexpr size_t attend_tile = [] {
    using O = AttendOf<B, N>;
    if constexpr (std::is_empty_v<typename O::KVScratch>)
      return tile_rows(B * N);
    else
      return largest_fitting<O::template Heads, std::max(step::room_after(Room, sizeof(KVRows<B, N>)), sizeof(typename O::KVScratch)), tile_rows(B * N), B * N>();
  }();
  template <size_t B, size_t N, size_t Room = 0>
  struct Scratch : AttendOf<B, N>::template With<attend_tile<B, N, Room>> {
    static constexpr size_t T = attend_tile<B, N, Room>;
    static_assert(std::is_same_v<typename KV::template Input<B, N>, Input<B, N>>, "Attend<Query, KeyValue, Attention>: the query and key/value parts must take the same input");
    static_assert(std::is_empty_v<step::Scratch<Q, B, N, 0>>, "Attend<Query, KeyValue, Attention>: the query part is a step without scratch (a norm, Identity)");
  };

  // h ← h + Attention(Query(x), KeyValue(x)); x (which may be h) is read whole before h is written.
  template <size_t B, size_t N, size_t Room, class Pool = Serial>
  void run_add(const Input<B, N>& x, Output<B, N>& h, Scratch<B, N, Room>& w, const Mask<B, N>& mask, Pool&& pool = Pool{}) const {
    constexpr size_t K = Nk<B, N>, T = Scratch<B, N, Room>::T;
    auto& kv = w.key_rows([&](auto& rows, auto& scratch) { step::run(this->template get<1>(), x, rows, scratch, mask, pool); });
    auto& heads = w.heads();
    attention().template prepare<B, N, K, T>(kv.data(), heads.w, pool);
    auto& q = heads.a.template start<Rows<B, N>>();
    Nothing none;
    step::run(this->template get<0>(), x, q, none, mask, pool);
    attention().template forward_add<B, N, K, T>(q.data(), h.data(), heads.w, keys(mask), pool);
  }
  template <size_t B, size_t N, size_t Room, class Pool = Serial>
  void run(const Input<B, N>& x, Output<B, N>& y, Scratch<B, N, Room>& w, const Mask<B, N>& mask, Pool&& pool = Pool{}) const {
    std::fill(y.begin(), y.end(), typename Output<B, N>::value_type{});
    run_add(x, y, w, mask, pool);
  }

  // Memory::replay: the attention's record that keeps less, whose forward writes its workspace:
  // kept beside it (as SelfAttention's; a folded attention keeps all). dkv is written over the
  // record's concat_h(o_h), which the attention's backward reads first (W_o's gradient) and
  // never again, when they are of one shape.
  template <size_t B, size_t N, Memory M = Memory::keep>
  struct Acts {
    static constexpr size_t K = Nk<B, N>;
    static constexpr bool replay = M == Memory::replay && !A::template folds<N, K>;
    using QRecord = typename step::ActsWith<Q, B, N, M>::type;
    using KVRecord = typename step::ActsWith<KV, B, N, M>::type;
    using Record = typename A::template Acts<B, N, K, M>;
    using Dx = Input<B, N>;
    static constexpr bool dkv_over_heads = std::is_same_v<KVRows<B, N>, Rows<B, N>>;
    QRecord q;
    KVRecord kv;
    Record attn;
    [[no_unique_address]] std::conditional_t<replay, WorkspaceOf<Record>, Nothing> kept;
    // d: the key/value part's input gradient, where dq was when they are of one type
    static constexpr bool d_over_dq = std::is_same_v<Rows<B, N>, Dx>;
    struct Workspace {
      Rows<B, N> dq;
      [[no_unique_address]] std::conditional_t<dkv_over_heads, Nothing, KVRows<B, N>> dkv;
      [[no_unique_address]] std::conditional_t<d_over_dq, Nothing, Dx> d;
      // the attention's workspace (kept, replaying), then the parts'
      Phases<std::conditional_t<replay, Nothing, WorkspaceOf<Record>>, WorkspaceOf<QRecord>, WorkspaceOf<KVRecord>> part;
    };

    template <class X>
    const Output<B, N>& forward(const Attend& p, const X& x, const Mask<B, N>& mask = {}) {
      const auto& xq = step::forward(q, p.template get<0>(), x, mask);
      const auto& xkv = step::forward(kv, p.template get<1>(), x, mask);
      if constexpr (replay)
        return attn.forward(p.attention(), xq, xkv, keys(mask), kept);
      else
        return attn.forward(p.attention(), xq, xkv, keys(mask));
    }
    const Dx& backward(const Attend& p, Attend& grad, const Output<B, N>& dout, Dx& dx, Workspace& ws) {
      KVRows<B, N>* dkv;
      if constexpr (dkv_over_heads)
        dkv = &attn.heads;
      else
        dkv = &ws.dkv;
      if constexpr (replay)
        attn.backward(p.attention(), grad.attention(), dout, {ws.dq, *dkv}, kept);
      else
        attn.backward(p.attention(), grad.attention(), dout, {ws.dq, *dkv}, ws.part.template start<WorkspaceOf<Record>>());
      step::copy_to(backward_with(q, p.template get<0>(), grad.template get<0>(), ws.dq, dx, ws.part.template start<WorkspaceOf<QRecord>>()), dx);
      Dx* into;
      if constexpr (d_over_dq)
        into = &ws.dq;
      else
        into = &ws.d;
      const auto& d = backward_with(kv, p.template get<1>(), grad.template get<1>(), *dkv, *into, ws.part.template start<WorkspaceOf<KVRecord>>());
      kernels::add_to<step::count<Dx>>(d.data(), dx.data());
      return dx;
    }
  };
};

// y [batch, K, D] ← the rows S [K, D] in every batch row
template <class Rows, class T>
void repeat_rows(const Rows& rows, T* y, size_t batch) {
  for (size_t b = 0; b < batch; ++b) std::copy(rows.begin(), rows.end(), y + b * rows.size());
}

// SeedAttend<"seeds", K, Query, KeyValue, Attention>: y = S + Attention(Query(S), KeyValue(x)),
// x [B, N, D] -> y [B, K, D], S K learned rows [K, D] (Xavier-normal, a parameter named Name)
// over every batch row: the Set Transformer's pooling by attention (PMA(X) = MAB(S, X) is this,
// then its feed-forward residual; ISAB's MAB1(I, X) too). A set block: the attention reads the
// pass's key mask over x, never its causal flag (ordered = false).
//   forward only: y ← S; KeyValue(x) into a buffer, the keys and values projected (a few seeds
//     fold: the attention reads KeyValue(x) itself, kept beside); Query(y) into a, the heads
//     added into y.
//   backward: dq, dkv = Attentionᵀ dy;  dS = Σ_b (dy + Queryᵀ dq);  dx = KeyValueᵀ dkv
// K rows [K, D] of T, a parameter named Name: SeedAttend's seeds (float, Xavier-normal; int16 in
// integers), stored as its first part so that the block is its parameters in visit order.
template <FixedString Name, size_t K, size_t D, class T = float>
struct Seeds {
  TensorOf<T, K, D> rows;
  template <class F, class... S>
  static constexpr void visit(const Path& at, F& f, S&... s) {
    f(at / Name.view(), Init{std::is_same_v<T, float> ? Init::xavier_normal : Init::zeros}, s.rows...);
  }
};

template <FixedString Name, size_t K, class Query, class KeyValue, class Attention>
struct SeedAttend
    : step::Parts<Named<"", Seeds<Name, K, dims<typename step::Info<Query>::Block::template Input<1, 1>>.back()>>, Query, KeyValue, Attention> {
  static std::string declaration() {
    return declare("SeedAttend", Name.view(), K, DeclaredBlock<Query>{}, DeclaredBlock<KeyValue>{}, DeclaredBlock<Attention>{});
  }
  using Base = typename SeedAttend::Parts;
  static constexpr bool ordered = false;
  using Q = typename Base::template BlockAt<1>;
  using KV = typename Base::template BlockAt<2>;
  using A = typename Base::template BlockAt<3>;
  const A& attention() const { return this->template get<3>(); }
  A& attention() { return this->template get<3>(); }
  const auto& seeds() const { return this->template get<0>().rows; }
  auto& seeds() { return this->template get<0>().rows; }

  template <size_t B, size_t N>
  using Input = typename KV::template Input<B, N>;
  template <size_t B, size_t N>
  using Output = typename Q::template Input<B, K>;  // the seeds' rows, then the output
  template <size_t B>
  using Rows = step::Output<Q, B, K>;  // the queries' rows
  template <size_t B, size_t N>
  using KVRows = step::Output<KV, B, N>;
  static constexpr size_t D = dims<Output<1, 1>>[2];

  template <size_t B, size_t N, size_t Room = 0>
  struct Scratch {
    static_assert(std::is_empty_v<step::Scratch<Q, B, K, 0>> && std::is_empty_v<step::Scratch<KV, B, N, 0>>,
                  "SeedAttend: the query and key/value parts are steps without scratch (norms, Identity)");
    static constexpr bool folded = A::template folds<K, N>;
    static constexpr size_t T = tile_rows(B * K);
    // the queries' rows; unless the attention folds, KeyValue(x) before them
    std::conditional_t<folded, Phases<Rows<B>>, Phases<Rows<B>, KVRows<B, N>>> a;
    [[no_unique_address]] std::conditional_t<folded, KVRows<B, N>, Nothing> kv;
    typename A::template Work<B, K, N, T> w;
  };

  template <size_t B, size_t N, size_t Room, class Pool = Serial>
  void run(const Input<B, N>& x, Output<B, N>& y, Scratch<B, N, Room>& w, const Mask<B, N>& mask, Pool&& pool = Pool{}) const {
    using S = Scratch<B, N, Room>;
    Nothing none;
    repeat_rows(seeds(), y.data(), B);
    KVRows<B, N>* kv;
    if constexpr (S::folded)
      kv = &w.kv;
    else
      kv = &w.a.template start<KVRows<B, N>>();
    step::run(this->template get<2>(), x, *kv, none, mask, pool);
    attention().template prepare<B, K, N, S::T>(kv->data(), w.w, pool);
    auto& q = w.a.template start<Rows<B>>();
    step::run(this->template get<1>(), y, q, none, Mask<B, K>{}, pool);
    attention().template forward_add<B, K, N, S::T>(q.data(), y.data(), w.w, Mask<B, N>{.keys = mask.keys}, pool);
  }

  // Memory::replay as Attend's, unless the attention folds (its record has no replayed form).
  template <size_t B, size_t N, Memory M = Memory::keep>
  struct Acts {
    static constexpr bool replay = M == Memory::replay && !A::template folds<K, N>;
    using QRecord = typename step::ActsWith<Q, B, K, M>::type;
    using KVRecord = typename step::ActsWith<KV, B, N, M>::type;
    using Record = typename A::template Acts<B, K, N, M>;
    using Dx = Input<B, N>;
    Output<B, N> s;  // S over the batch
    QRecord q;
    KVRecord kv;
    Record attn;
    [[no_unique_address]] std::conditional_t<replay, WorkspaceOf<Record>, Nothing> kept;
    Output<B, N> out;
    struct Workspace {
      Output<B, N> ds;
      KVRows<B, N> dkv;
      // the attention's workspace (kept, replaying), then the parts'
      Phases<std::conditional_t<replay, Nothing, WorkspaceOf<Record>>, WorkspaceOf<QRecord>, WorkspaceOf<KVRecord>> part;
    };

    template <class X>
    const Output<B, N>& forward(const SeedAttend& p, const X& x, const Mask<B, N>& mask = {}) {
      repeat_rows(p.seeds(), s.data(), B);
      const auto& xq = step::forward(q, p.template get<1>(), s, Mask<B, K>{});
      const auto& xkv = step::forward(kv, p.template get<2>(), x, mask);
      const Mask<B, N> keys{.keys = mask.keys};
      if constexpr (replay)
        kernels::add<B * K * D>(s.data(), attn.forward(p.attention(), xq, xkv, keys, kept).data(), out.data());
      else
        kernels::add<B * K * D>(s.data(), attn.forward(p.attention(), xq, xkv, keys).data(), out.data());
      return out;
    }
    // dq is written over the record's concat_h(o_h), as Attend's dkv.
    const Dx& backward(const SeedAttend& p, SeedAttend& grad, const Output<B, N>& dout, Dx& dx, Workspace& ws) {
      Rows<B>& dq = attn.heads;
      if constexpr (replay)
        attn.backward(p.attention(), grad.attention(), dout, {dq, ws.dkv}, kept);
      else
        attn.backward(p.attention(), grad.attention(), dout, {dq, ws.dkv}, ws.part.template start<WorkspaceOf<Record>>());
      const auto& dqs = backward_with(q, p.template get<1>(), grad.template get<1>(), dq, ws.ds, ws.part.template start<WorkspaceOf<QRecord>>());
      kernels::add<B * K * D>(dout.data(), dqs.data(), ws.ds.data());
      for (size_t b = 0; b < B; ++b) kernels::add_to<K * D>(ws.ds.data() + b * K * D, grad.seeds().data());
      step::copy_to(backward_with(kv, p.template get<2>(), grad.template get<2>(), ws.dkv, dx, ws.part.template start<WorkspaceOf<KVRecord>>()), dx);
      return dx;
    }
  };
};

// SeedQuery<"query", K, Query, Attention>: y = Attention(Query(S), x), x [B, N, Dk] -> the
// attention's output for K query rows (PointerAttention: log-probabilities [B, K, N]), S K
// learned rows [K, Dq] (Xavier-normal, a parameter named Name) over every batch row, Query a
// row-local part (a norm): SPEC's pointer head (blocks/pointer.hpp). The attention reads the
// pass's key mask over x, never its causal flag (ordered = false).
//   forward only: q ← Query(S) over the batch, then y ← Attention(q, x); scratch q and the
//     attention's work.
//   backward: dq, dx = Attentionᵀ dy;  dS = Σ_b Queryᵀ dq
template <FixedString Name, size_t K, class Query, class Attention>
struct SeedQuery
    : step::Parts<Named<"", Seeds<Name, K, dims<typename step::Info<Query>::Block::template Input<1, 1>>.back()>>, Query, Attention> {
  static std::string declaration() { return declare("SeedQuery", Name.view(), K, DeclaredBlock<Query>{}, DeclaredBlock<Attention>{}); }
  using Base = typename SeedQuery::Parts;
  static constexpr bool ordered = false;
  using Q = typename Base::template BlockAt<1>;
  using A = typename Base::template BlockAt<2>;
  static_assert(step::row_local<Q>(), "SeedQuery: the query part is row-local (a norm, Identity)");
  static constexpr size_t D = dims<typename Q::template Input<1, 1>>.back();
  const A& attention() const { return this->template get<2>(); }
  A& attention() { return this->template get<2>(); }
  const auto& seeds() const { return this->template get<0>().rows; }
  auto& seeds() { return this->template get<0>().rows; }

  template <size_t B, size_t N>
  using Input = Tensor<B, N, A::key_width>;
  template <size_t B, size_t N>
  using Output = typename A::template Output<B, K, N>;
  template <size_t B>
  using Rows = Tensor<B, K, D>;  // S over the batch, then Query(S)

  template <size_t B, size_t N, size_t Room = 0>
  struct Scratch {
    Rows<B> q;
    typename A::template Work<B, K, N> w;
  };
  template <size_t B, size_t N, size_t Room, class Pool = Serial>
  void run(const Input<B, N>& x, Output<B, N>& y, Scratch<B, N, Room>& w, const Mask<B, N>& mask, Pool&& = Pool{}) const {
    repeat_rows(seeds(), w.q.data(), B);
    this->template get<1>().template apply<B * K>(w.q.data(), w.q.data());
    attention().score(w.q.data(), x.data(), y.data(), w.w, mask.keys);
  }

  template <size_t B, size_t N, Memory M = Memory::keep>
  struct Acts {
    using QRecord = typename step::ActsWith<Q, B, K, M>::type;
    using Record = ActsOf<A, B, K, N>;
    using Dx = Input<B, N>;
    Rows<B> s;  // S over the batch
    QRecord q;
    Record attn;
    struct Workspace {
      Rows<B> dq, ds;  // dL/dQuery(S), dL/dS
      Phases<WorkspaceOf<Record>, WorkspaceOf<QRecord>> part;
    };

    template <class X>
    const Output<B, N>& forward(const SeedQuery& p, const X& x, const Mask<B, N>& mask = {}) {
      repeat_rows(p.seeds(), s.data(), B);
      return attn.forward(p.attention(), step::forward(q, p.template get<1>(), s, Mask<B, K>{}), x, mask.keys);
    }
    const Dx& backward(const SeedQuery& p, SeedQuery& grad, const Output<B, N>& dout, Dx& dx, Workspace& ws) {
      attn.backward(p.attention(), grad.attention(), dout, {ws.dq, dx}, ws.part.template start<WorkspaceOf<Record>>());
      const auto& ds = backward_with(q, p.template get<1>(), grad.template get<1>(), ws.dq, ws.ds, ws.part.template start<WorkspaceOf<QRecord>>());
      for (size_t b = 0; b < B; ++b) kernels::add_to<K * D>(ds.data() + b * K * D, grad.seeds().data());
      return dx;
    }
  };
};

}  // namespace stformer
