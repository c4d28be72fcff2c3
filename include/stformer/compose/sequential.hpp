// Sequential<Steps...> — a model that is a chain of blocks, declared once:
//
//   using Model = Sequential<Linear<2, 32>, SAB<32, 4>, PMA<32, 4, 1>, Linear<32, 3>>;
//
// x [B, N, In] -> step 0 -> step 1 -> ... -> the last step's output. A step is a block, or
// Named<"name", Block> to choose its parameters' name (SPEC's names: Named<"proj", Linear<2, 64>>),
// or Repeat<Block, n>, n blocks one after the other, named .0, .1, ... (Named<"blocks",
// Repeat<EncoderBlock<...>, 2>> gives blocks.0.sn1.g ...). An unnamed step is named by its index,
// as PyTorch's nn.Sequential names its modules (0.weight, 1.mab.attn.wq.weight, ...); the name
// "" puts a step's parameters at the model's own level (SPEC's pointer model: query, sn_q.g).
//
// From the declaration follow:
//   - visit: every parameter, in declaration order, under those names (so initialisation,
//     optimisers, checkpoints, model images and param_table work as for any block);
//   - ActsOf<Model, B, N>: the steps' activations; forward runs them in order, backward in
//     reverse, returning the gradient of the input (nothing after an Embedding);
//   - InferOf<Model, B, N>: the forward-only pass over one arena, planned at compile time (below);
//   - get<i>() / get<"name">(): a step's parameters (a Repeat's are an std::array).
//
// Masks: forward(model, x, mask) takes a Mask<B, N> (causal, key padding) or a KeyMask pointer;
// each step is given it while the sequence is the input's (no step before it changed its
// length), the keys shifted past the rows a ClassToken put before the sequence (which every
// query sees), an empty mask after a pooling step.
//
// A block is a step when it has, besides its parameters and visit:
//   template <size_t B, size_t N> using Input = Tensor<B, N, In>;    (IdTensor for an Embedding)
//   template <size_t B, size_t N, size_t Room> using Scratch = ...;   (optional: its buffers)
// and either, in place (the output the input's shape, written over it),
//   static constexpr bool in_place = true;
//   forward_in_place(Input& h, Scratch& w, const Mask<B, N>& mask, Pool&& pool) const
// or, from its input into a buffer of another shape,
//   template <size_t B, size_t N> using Output = Tensor<B, N', Out>;
//   run(const Input& x, Output& y, Scratch& w, const Mask<B, N>& mask, Pool&& pool) const
// or, taking whatever the step before gives (a quantized model's float end, stformer/quantized/quantize.hpp),
//   template <class X> using OutputFrom = ...;   run(const X& x, OutputFrom<X>& y, w, mask, pool) const
// A run whose output may lie over its input (over_input = true: a quantized model's Dequantize,
// int16 in, float out) declares it; its y then shares bytes with x, x at y's start or at least
// sizeof(y) − sizeof(x) bytes past it, and the block reads each entry of x before it writes
// over it.
// (w is Nothing for a block without Scratch), and to train, a record Acts<B, N> whose
// forward(p, x, const Mask<B, N>&) keeps what its backward reads (step::Step and step::Record
// below: a block that does not meet them is a compile error naming it, never a fallback).
// Scratch<B, N, Room> is the block's work memory when Room bytes are free beside its input and
// output; a block may take more rows per tile there, never more than max(Room, its
// Scratch<B, N, 0>). A block that can run on several threads also takes, after the mask, the pool
// of Infer::forward; a block that runs on the calling thread ignores it.
//
// The plan of InferOf<Model, B, N>. Step i reads its input, writes its output and uses its
// scratch; these three are live together, and nothing else is: the model's input is the
// caller's, each output is read by the next step only. So the arena is one byte array of
//   S = max over the steps of  input + output + scratch   (input + scratch when in place;
//                                                          over its input: max(input, output) + scratch)
// in which the stream buffers alternate between its two ends (a step's output goes to the end
// its input does not hold; an in-place step keeps its input's end) and each scratch lies
// between them. sizeof(InferOf) = S, never more than the largest sum of two neighbouring
// steps' own InferOf. Every step runs the block's own forward-only code: the same bits as the
// block's Infer and Acts. plan() lists the layout, phase by phase (write_plan prints it).
// forward_steps<First, Last> runs part of the chain, from step First's input (input<First>()).
#pragma once

#include "../core/config.hpp"

#include <algorithm>
#include <array>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <tuple>
#include <new>
#include <string_view>
#include <type_traits>
#include <utility>

#include "../core/params.hpp"
#include "../core/declaration.hpp"
#include "../core/tensor.hpp"
#include "../kernels/rowwise.hpp"

namespace stformer::inline STFORMER_ABI {

// A string as a template argument: Named<"proj", ...>.
template <size_t L>
struct FixedString {
  char s[L] = {};
  constexpr FixedString(const char (&v)[L]) { std::copy_n(v, L, s); }
  constexpr std::string_view view() const { return {s, L - 1}; }
};

template <FixedString Name, class Block>
struct Named {
  // Named<"", Block> adds no name: declared as Block is
  static std::string declaration() { return Name.view().empty() ? stformer::declaration<Block>() : declare("Named", Name.view(), DeclaredBlock<Block>{}); }
};
// A step named by the index `Index` whatever its place: a derived model's steps keep the names
// of the model they come from (quantize's steps, stformer/quantized/quantize.hpp).
template <size_t Index, class Block>
struct Indexed {};

// The sizes of a fixed tensor type, [B, N, W] for a stream: dims<T>[k].
template <class T>
struct DimsOf;
template <class E, size_t... S>
struct DimsOf<xt::xtensor_fixed<E, xt::xshape<S...>, xt::layout_type::row_major, false>> {
  static constexpr std::array<size_t, sizeof...(S)> value{S...};
};
template <class T>
inline constexpr auto dims = DimsOf<T>::value;

template <class... S>
struct Sequential;

namespace step {

// A step's block and name.
template <class S>
struct Info {
  using Block = S;
  static constexpr bool named = false;
  static constexpr std::string_view name{};
};
template <FixedString Name, class B>
struct Info<Named<Name, B>> {
  using Block = B;
  static constexpr bool named = true;
  static constexpr std::string_view name = Name.view();
};
template <size_t Index, class B>
struct Info<Indexed<Index, B>> : Info<B> {
  static constexpr size_t index = Index;
};

template <class Block>
constexpr bool in_place() {
  if constexpr (requires { Block::in_place; })
    return Block::in_place;
  else
    return false;
}
// A step each of whose output rows is a function of the same input row alone (a linear layer,
// a norm, an activation, LayerScale, a feed-forward layer; a chain or combinator of such): it
// declares row_local = true, and a chain of such steps may run in tiles of rows (Sequential).
template <class Block>
constexpr bool row_local() {
  if constexpr (requires { Block::row_local; })
    return Block::row_local;
  else
    return false;
}
// Whether a step's record reads the pass's mask: not a row-local block's, nor one that declares
// reads_mask = false (a position table, a class token: each row's output is fixed by its place).
template <class Block>
constexpr bool reads_mask() {
  if constexpr (requires { Block::reads_mask; })
    return Block::reads_mask;
  else
    return !row_local<Block>();
}
// A step whose output may be written over its input (see the top of this file).
template <class Block>
constexpr bool over_input() {
  if constexpr (requires { Block::over_input; })
    return Block::over_input;
  else
    return false;
}

// Rows a step puts before its input's (ClassToken's token: `prepends`), the rest its input.
template <class Block>
constexpr size_t prepends() {
  if constexpr (requires { Block::prepends; })
    return Block::prepends;
  else
    return 0;
}

template <class Block, size_t B, size_t N, size_t Room>
struct ScratchOf {
  using type = Nothing;
};
template <class Block, size_t B, size_t N, size_t Room>
  requires requires { typename Block::template Scratch<B, N, Room>; }
struct ScratchOf<Block, B, N, Room> {
  using type = typename Block::template Scratch<B, N, Room>;
};
template <class Block, size_t B, size_t N, size_t Room>
using Scratch = typename ScratchOf<Block, B, N, Room>::type;

// The bytes a buffer takes in the arena (an empty scratch: none), rounded up to `align`.
template <class T>
constexpr size_t bytes(size_t align) {
  return std::is_empty_v<T> ? 0 : (sizeof(T) + align - 1) / align * align;
}

// A step's output type: the input's for an in-place block.
template <class Block, size_t B, size_t N>
struct OutputOf {
  using type = typename Block::template Input<B, N>;
};
template <class Block, size_t B, size_t N>
  requires requires { typename Block::template Output<B, N>; }
struct OutputOf<Block, B, N> {
  using type = typename Block::template Output<B, N>;
};
template <class Block, size_t B, size_t N>
using Output = typename OutputOf<Block, B, N>::type;

// A step's input and output types in a chain, given the output Prev of the step before (void
// for the first): Input<B, Len> and Output<B, Len>; or, for a block that takes whatever the step
// before gives (it declares `template <class X> using OutputFrom = ...`: the float end of a
// quantized model, stformer/quantized/quantize.hpp), Prev and OutputFrom<Prev>.
template <class Block, size_t B, size_t Len, class Prev>
struct Shapes {
  using In = typename Block::template Input<B, Len>;
  using Out = Output<Block, B, Len>;
};
template <class Block, size_t B, size_t Len, class Prev>
  requires requires { typename Block::template OutputFrom<Prev>; }
struct Shapes<Block, B, Len, Prev> {
  using In = Prev;
  using Out = typename Block::template OutputFrom<Prev>;
};

// y ← y + a, N entries: float, or int16 streams at one scale, the sum saturated (an integer
// combinator's, stformer/quantized/combinators.hpp).
template <size_t N, class T>
void add_to(const T* a, T* y) {
  if constexpr (std::is_same_v<T, float>)
    kernels::add_to<N>(a, y);
  else
    for (size_t j = 0; j < N; ++j) y[j] = T(std::clamp<std::int32_t>(std::int32_t(y[j]) + a[j], INT16_MIN, INT16_MAX));
}

// A row-local leaf called on rows by pointer, p.apply<Rows>(x, y): a linear layer, a norm, an
// activation, LayerScale (y may be x when it is in place).
template <class Block>
concept RowCall = row_local<Block>() && requires(const Block& p, const typename Block::template Input<1, 1>::value_type* x,
                                                 typename Output<Block, 1, 1>::value_type* y) { p.template apply<1>(x, y); };
// A block's row-local leaves, in order, through the chains inside it (RowLeaves<Sequential>,
// below): ok when every one is a RowCall; of(p): references to them.
template <class Block>
struct RowLeaves {
  static constexpr bool ok = RowCall<Block>;
  using type = std::tuple<const Block&>;
  static type of(const Block& p) { return type(p); }
};

// The tiles of a chain of row-local leaves (Leaves: a tuple of references to them) over Rows
// rows, T at a time: leaf k reads the output of leaf k − 1 (leaf 0 x's rows) and writes one of
// two tile buffers, in turn (an in-place leaf over its input, unless that is x), so that of each
// output only [T, width] rows exist (a feed-forward layer's hidden [T, F]); the last leaf writes
// y's rows (Into), or a buffer then added into y's rows (a residual's stream: y may be x, each
// tile's rows read whole before they are written). Each linear layer's weight is packed once for
// all the tiles (Linear::with_panels), a linear layer followed by ReLU applies it in its own
// pass, and the kernels follow the whole layer's rows (Of): the same bits as the whole rows at
// once, for any T and any pool (the rows in S parts, part s through its own T/S rows of the tile).
template <class Leaves, size_t Rows, size_t T, bool Into>
struct RowTiles {
  static constexpr bool row_tiles = true;
  static constexpr size_t K = std::tuple_size_v<Leaves>;
  template <size_t k>
  using L = std::remove_cvref_t<std::tuple_element_t<k, Leaves>>;
  template <size_t k>
  using In = typename L<k>::template Input<1, 1>::value_type;
  template <size_t k>
  using Out = typename Output<L<k>, 1, 1>::value_type;
  template <size_t k>
  static constexpr size_t width = dims<Output<L<k>, 1, 1>>.back();
  static constexpr size_t in_width = dims<typename L<0>::template Input<1, 1>>.back();
  // leaf k applies ReLU after it (Linear::apply<Rows, true>), and leaf k + 1 is skipped
  template <size_t k>
  static constexpr bool relu_next = [] {
    if constexpr (k + 1 < K && requires { typename L<k>::Panels; })
      return requires { requires L<k + 1>::relu; };
    return false;
  }();
  // leaf k is applied by the linear layer before it
  template <size_t k>
  static constexpr bool skipped = [] {
    if constexpr (k > 0)
      return relu_next<k - 1>;
    return false;
  }();
  // y may be x (in place): the leaves' first call does not write y
  static constexpr bool x_apart = K > 1 + relu_next<0>;
  // where leaf k writes: buffer 0 or 1, or y (2); its input: x (3) for leaf 0
  static constexpr std::array<int, K + 1> at = [] {
    std::array<int, K + 1> a{};
    a[0] = 3;
    [&]<size_t... k>(std::index_sequence<k...>) {
      ((a[k + 1] = Into && k + 1 == K ? 2 : in_place<L<k>>() && a[k] != 3 ? a[k] : a[k] == 0 ? 1 : 0), ...);
    }(std::make_index_sequence<K>{});
    return a;
  }();
  // the bytes of a row of buffer j: the widest output it holds
  static constexpr std::array<size_t, 2> row_bytes = [] {
    std::array<size_t, 2> r{};
    [&]<size_t... k>(std::index_sequence<k...>) {
      ((at[k + 1] < 2 ? r[size_t(at[k + 1])] = std::max(r[size_t(at[k + 1])], width<k> * sizeof(Out<k>)) : 0), ...);
    }(std::make_index_sequence<K>{});
    return r;
  }();
  template <size_t Bytes>
  struct alignas(alignof(Tensor<1>)) Buffer {
    unsigned char bytes[Bytes];
  };
  template <size_t Bytes>
  using BufferOf = std::conditional_t<Bytes == 0, Nothing, Buffer<Bytes>>;
  [[no_unique_address]] BufferOf<T * row_bytes[0]> b0;
  [[no_unique_address]] BufferOf<T * row_bytes[1]> b1;

  // y's rows ← (or +=) the leaves of x's, on the threads of pool.
  template <class Pool>
  void run(const Leaves& leaves, const In<0>* x, Out<K - 1>* y, Pool& pool) {
    with_parts(pool, [&]<size_t S>() {
      if constexpr (S == 1 || T < S)
        run_part<Rows, T>(leaves, x, y, 0);
      else
        for_parts<Rows, S>(pool, [&]<size_t R>(size_t r0, size_t s) { run_part<R, T / S>(leaves, x + r0 * in_width, y + r0 * width<K - 1>, s * (T / S)); });
    });
  }

 private:
  // Rs rows in tiles of Ts, from row t0 of the buffers.
  template <size_t Rs, size_t Ts, class P = std::tuple<>>
  void run_part(const Leaves& leaves, const In<0>* x, Out<K - 1>* y, size_t t0, const P& panels = {}) {
    constexpr size_t k = std::tuple_size_v<P>;
    if constexpr (k < K) {
      if constexpr (requires { typename L<k>::Panels; })
        std::get<k>(leaves).template with_panels<Rs, Ts, Rows>([&](const auto* q) { run_part<Rs, Ts>(leaves, x, y, t0, std::tuple_cat(panels, std::tuple(q))); });
      else
        run_part<Rs, Ts>(leaves, x, y, t0, std::tuple_cat(panels, std::tuple<const Nothing*>(nullptr)));
    } else {
      for_tiles<Rs, Ts>([&]<size_t R>(size_t i) {
        [&]<size_t... j>(std::index_sequence<j...>) { (leaf<j, R>(leaves, panels, x + i * in_width, y + i * width<K - 1>, t0), ...); }(std::make_index_sequence<K>{});
      });
    }
  }
  template <int where, class E>
  E* buffer(E* y, size_t t0) {
    if constexpr (where == 2)
      return y;
    else if constexpr (where == 0)
      return reinterpret_cast<E*>(b0.bytes + t0 * row_bytes[0]);
    else
      return reinterpret_cast<E*>(b1.bytes + t0 * row_bytes[1]);
  }
  template <size_t k, size_t R, class P>
  void leaf(const Leaves& leaves, const P& panels, const In<0>* x, Out<K - 1>* y, size_t t0) {
    if constexpr (!skipped<k>) {
      constexpr size_t last = k + relu_next<k>;   // the leaf whose output this call writes
      const In<k>* src = [&] {
        if constexpr (k == 0)
          return x;
        else
          return buffer<at[k]>(static_cast<const In<k>*>(nullptr), t0);
      }();
      Out<k>* dst = [&] {
        if constexpr (last + 1 == K)
          return buffer<at[K]>(y, t0);
        else
          return buffer<at[last + 1]>(static_cast<Out<k>*>(nullptr), t0);
      }();
      if constexpr (requires { typename L<k>::Panels; })
        std::get<k>(leaves).template apply<R, relu_next<k>, Rows>(src, dst, std::get<k>(panels));
      else
        std::get<k>(leaves).template apply<R>(src, dst);
      if constexpr (last + 1 == K && !Into) add_to<R * width<k>>(dst, y);
    }
  }
};

// The step protocol: what a chain (and a combinator) asks of each of its blocks, given its
// input In, its output Out, its scratch W (Nothing when it has none) and the pass's mask. In
// place (Block::in_place, Out = In) it overwrites its input; otherwise it reads x and writes y:
//
//   h ← Block(h):  p.forward_in_place(h, w, mask, pool)
//   y ← Block(x):  p.run(x, y, w, mask, pool)
//
// Every step takes the scratch, the mask (Mask<B, N>: causal, key padding; a block that does not
// read it leaves the parameter unnamed) and the pool of the pass (Serial, or a ThreadPool: a
// block that runs on the calling thread ignores it). A training record (ActsOf<Block, B, N>)
// takes the mask too: acts.forward(p, x, mask), but for a block that does not read it
// (step::reads_mask: a row-local block, whose rows map one by one, or one that declares
// reads_mask = false), whose record is acts.forward(p, x). A block that does
// not meet this is a compile error at the static_asserts below, whose instantiation names the
// block.
template <class Block, class In, class Out, class W, size_t B, size_t N>
concept Step = (in_place<Block>() && requires(const Block& p, In& h, W& w, const Mask<B, N>& mask, Serial& pool) {
                 p.forward_in_place(h, w, mask, pool);
               }) || (!in_place<Block>() && requires(const Block& p, const In& x, Out& y, W& w, const Mask<B, N>& mask, Serial& pool) {
                 p.run(x, y, w, mask, pool);
               });
template <class A, class Block, class X, size_t B, size_t N>
concept Record = (!reads_mask<Block>() && requires(A& acts, const Block& p, const X& x) { acts.forward(p, x); }) ||
                 (reads_mask<Block>() && requires(A& acts, const Block& p, const X& x, const Mask<B, N>& mask) { acts.forward(p, x, mask); });

template <class>
inline constexpr bool always_false = false;

// y ← x, unless x is y.
template <class X, class Y>
void copy_to(const X& x, Y& y) {
  if (static_cast<const void*>(&x) != static_cast<const void*>(&y)) std::copy(x.begin(), x.end(), y.begin());
}

// The mask a block runs with: the pass's, made causal whatever the pass says when the block's
// type declares causal = true (stformer/core/declaration.hpp: declares_causal), its keys alone when
// it declares ordered = false (declares_unordered: a set block), at every depth.
template <class Block, size_t B, size_t N>
constexpr Mask<B, N> mask_for(Mask<B, N> mask) {
  if constexpr (declares_causal<Block>) mask.causal = true;
  if constexpr (declares_unordered<Block>) mask.causal = false;
  return mask;
}

// y ← the block of x: run, or forward_in_place on y (x copied into y first unless y is x).
template <class Block, class X, class Y, class W, size_t B, size_t N, class Pool = Serial>
void run(const Block& p, const X& x, Y& y, W& w, const Mask<B, N>& mask, Pool&& pool = Pool{}) {
  if constexpr (!Step<Block, X, Y, W, B, N> && in_place<Block>()) {
    static_assert(always_false<Block>,
                  "a step (the block in the instantiation above) does not meet the step protocol: in place, it needs forward_in_place(h, scratch, const Mask<B, N>&, pool)");
  } else if constexpr (!Step<Block, X, Y, W, B, N>) {
    static_assert(always_false<Block>, "a step (the block in the instantiation above) does not meet the step protocol: it needs run(x, y, scratch, const Mask<B, N>&, pool)");
  } else if constexpr (in_place<Block>()) {
    copy_to(x, y);
    p.forward_in_place(y, w, mask_for<Block>(mask), pool);
  } else {
    p.run(x, y, w, mask_for<Block>(mask), pool);
  }
}

// acts.forward(p, x, mask): a step's training record, given the pass's mask (a block's that does
// not read it: acts.forward(p, x)).
template <class A, class P, class X, size_t B, size_t N>
decltype(auto) forward(A& acts, const P& p, const X& x, const Mask<B, N>& mask) {
  static_assert(Record<A, P, X, B, N>, "a step's training record (the block in the instantiation above) does not meet the step protocol: it needs "
                                       "forward(p, x, const Mask<B, N>&), or forward(p, x) when the block does not read the mask (step::reads_mask)");
  if constexpr (!reads_mask<P>())
    return acts.forward(p, x);
  else
    return acts.forward(p, x, mask_for<P>(mask));
}

// A step's record, with the Memory M where its Acts takes one (Repeat); of a chain its Record,
// whose workspace is the caller's.
template <class Block, size_t B, size_t N, Memory M>
constexpr auto acts_with() {
  if constexpr (requires { typename Block::template Record<B, N, M>; })
    return std::type_identity<typename Block::template Record<B, N, M>>{};
  else if constexpr (requires { typename Block::template Acts<B, N, M>; })
    return std::type_identity<typename Block::template Acts<B, N, M>>{};
  else
    return std::type_identity<ActsOf<Block, B, N>>{};
}
template <class Block, size_t B, size_t N, Memory M>
struct ActsWith {
  using type = typename decltype(acts_with<Block, B, N, M>())::type;
};
// A step's record lies over its input (Block::RecordOverInput<B, N>: an activation whose
// derivative is read from its output, ReLU) when that input is the output `out` of the record Prev before
// it, which Prev's backward does not read (Prev::output_unread: a Linear's): the record holds
// nothing, its backward is given that output.
template <class Block, class Prev, size_t B, size_t N>
concept RecordOverInput = requires(Prev& prev) {
  typename Block::template RecordOverInput<B, N>;
  prev.out;
  requires Prev::output_unread;
};

// A part's record with its workspace: a record that replays holds one part's at a time.
template <class A>
struct WithWork {
  A acts;
  [[no_unique_address]] WorkspaceOf<A> ws;
};

// Storage in declaration order (a standard-layout struct of its members, no padding between
// blocks of tensors): the model's object representation is its parameters in visit order.
template <class... T>
struct Members {};
template <class T0, class... T>
struct Members<T0, T...> {
  [[no_unique_address]] T0 first;
  [[no_unique_address]] Members<T...> rest;
};
template <size_t I, class M>
constexpr auto& get(M& m) {
  if constexpr (I == 0)
    return m.first;
  else
    return step::get<I - 1>(m.rest);
}

template <size_t I, class... T>
using Nth = std::tuple_element_t<I, std::tuple<T...>>;

// Visits part S (a block, Named<"name", Block> or Indexed<i, Block>) of a chain or combinator
// at `at`: under its name ("" for none), else under its index i when `indexed` (a chain's
// steps, Parallel's branches), else at `at` itself (Residual's body).
template <class S, class F, class... M>
constexpr void visit_part(const Path& at, size_t i, bool indexed, F& f, M&... m) {
  using I = Info<S>;
  if constexpr (requires { I::index; })
    stformer::visit(at / I::index, f, m...);
  else if constexpr (I::named && I::name.empty())
    stformer::visit(at, f, m...);
  else if constexpr (I::named)
    stformer::visit(at / I::name, f, m...);
  else if (indexed)
    stformer::visit(at / i, f, m...);
  else
    stformer::visit(at, f, m...);
}

// The parts of a chain (its steps) or of Parallel and Gated (their branches), each a block,
// Named<"name", Block> or Indexed<i, Block>: stored in declaration order, got by index or name,
// visited under their names, else their indices (visit_part).
template <class... S>
struct Parts {
  static constexpr size_t count = sizeof...(S);
  template <size_t I>
  using BlockAt = typename Info<Nth<I, S...>>::Block;
  Members<typename Info<S>::Block...> members;

  template <size_t I>
  constexpr auto& get() {
    return step::get<I>(members);
  }
  template <size_t I>
  constexpr const auto& get() const {
    return step::get<I>(members);
  }
  // The index of the part named Name (a compile error if there is none).
  template <FixedString Name>
  static constexpr size_t index_of = [] {
    size_t i = 0, found = count;
    ((Info<S>::name == Name.view() && found == count ? found = i : 0, ++i), ...);
    return found;
  }();
  template <FixedString Name>
  constexpr auto& get() {
    static_assert(index_of<Name> < count, "get<\"name\">: no part of that name");
    return get<index_of<Name>>();
  }
  template <FixedString Name>
  constexpr const auto& get() const {
    static_assert(index_of<Name> < count, "get<\"name\">: no part of that name");
    return get<index_of<Name>>();
  }

  template <class F, class... M>
  static constexpr void visit(const Path& at, F& f, M&... m) {
    [&]<size_t... I>(std::index_sequence<I...>) { (visit_one<I>(at, f, m...), ...); }(std::make_index_sequence<count>{});
  }

 private:
  template <size_t I, class F, class... M>
  static constexpr void visit_one(const Path& at, F& f, M&... m) {
    visit_part<Nth<I, S...>>(at, I, true, f, m.template get<I>()...);
  }
};

// The chain a model is: a Sequential, or a model derived from one (struct GPT : Sequential<…>
// { static constexpr bool causal = true; }); chain_model: whether it is either.
template <class... S>
Sequential<S...> chain_of(const Sequential<S...>*);
template <class Model>
using ChainOf = decltype(step::chain_of(static_cast<const Model*>(nullptr)));
template <class Model>
concept chain_model = requires { step::chain_of(static_cast<const Model*>(nullptr)); };

}  // namespace step

// Repeat<Block, n>: n blocks of the same type one after the other (an encoder's blocks), each
// with its own parameters, visited as .0, .1, ... In place when the block is; otherwise the
// outputs alternate between y and a buffer of the scratch, so that the last lands in y.
template <class Block, size_t Count>
struct Repeat : std::array<Block, Count> {
  static_assert(Count > 0, "Repeat: at least one block");
  static std::string declaration() { return declare("Repeat", DeclaredBlock<Block>{}, Count); }

  template <class F, class... S>
  static constexpr void visit(const Path& at, F& f, S&... s) {
    for (size_t i = 0; i < Count; ++i) stformer::visit(at / i, f, s[i]...);
  }

  template <size_t B, size_t N>
  using Input = typename Block::template Input<B, N>;
  template <size_t B, size_t N>
  using Output = step::Output<Block, B, N>;
  static constexpr bool in_place = step::in_place<Block>();

  template <size_t B, size_t N, size_t Room = 0>
  struct Scratch {
    static_assert(std::is_same_v<Input<B, N>, Output<B, N>>, "Repeat: the block's output must have its input's shape");
    [[no_unique_address]] std::conditional_t<in_place || Count == 1, Nothing, Output<B, N>> other;
    [[no_unique_address]] step::Scratch<Block, B, N, (Room > sizeof(other) ? Room - sizeof(other) : 0)> w;
  };

  template <size_t B, size_t N, size_t Room, class Pool = Serial>
  void forward_in_place(Input<B, N>& h, Scratch<B, N, Room>& w, const Mask<B, N>& mask, Pool&& pool = Pool{}) const {
    for (size_t i = 0; i < Count; ++i) step::run((*this)[i], h, h, w.w, mask, pool);
  }
  template <size_t B, size_t N, size_t Room, class Pool = Serial>
  void run(const Input<B, N>& x, Output<B, N>& y, Scratch<B, N, Room>& w, const Mask<B, N>& mask, Pool&& pool = Pool{}) const {
    const Output<B, N>* in = &x;
    for (size_t i = 0; i < Count; ++i) {
      Output<B, N>* out = &y;
      if constexpr (Count > 1)
        if ((Count - 1 - i) % 2 != 0) out = &w.other;
      step::run((*this)[i], *in, *out, w.w, mask, pool);
      in = out;
    }
  }

  // Memory::replay: one record, and the inputs of blocks 1 ... Count - 1 (block 0's is the
  // caller's, kept by pointer, as a record keeps its input).
  template <size_t B, size_t N, Memory M = Memory::keep>
  struct Acts {
    static constexpr bool replay = M == Memory::replay && Count > 1;
    using Record = typename step::ActsWith<Block, B, N, M>::type;
    std::array<Record, replay ? 1 : Count> blocks;
    [[no_unique_address]] std::conditional_t<replay, std::array<Input<B, N>, Count - 1>, Nothing> inputs;
    [[no_unique_address]] std::conditional_t<replay, Mask<B, N>, Nothing> mask;
    [[no_unique_address]] std::conditional_t<replay, const Input<B, N>*, Nothing> x{};  // block 0's input
    using Dx = Input<B, N>;
    struct Workspace {
      std::array<Output<B, N>, std::min<size_t>(Count - 1, 2)> d;  // the gradients between the blocks, in turn
      WorkspaceOf<Record> block;
    };

    Record& record(size_t i) { return blocks[replay ? 0 : i]; }

    const Output<B, N>& forward(const Repeat& p, const Input<B, N>& in, const Mask<B, N>& m = {}) {
      const Output<B, N>* h = &in;
      if constexpr (replay) x = &in, mask = m;
      for (size_t i = 0; i < Count; ++i) {
        h = &step::forward(record(i), p[i], *h, m);
        if constexpr (replay)
          if (i + 1 < Count) h = &(inputs[i] = *h);
      }
      return *h;
    }
    const Input<B, N>& backward(const Repeat& p, Repeat& grad, const Output<B, N>& dout, Input<B, N>& dx, Workspace& ws) {
      const Output<B, N>* d = &dout;
      for (size_t i = Count; i-- > 0;) {
        if constexpr (replay)
          if (i + 1 < Count) step::forward(record(i), p[i], i == 0 ? *x : inputs[i - 1], mask);
        d = &backward_with(record(i), p[i], grad[i], *d, i == 0 ? dx : ws.d[(Count - 1 - i) % 2], ws.block);
      }
      return *d;
    }
  };
};

// One phase of a plan: a step, where its input, output and scratch lie in the arena (byte
// offsets; the input of step 0 is the caller's), and their sizes.
struct PlanRow {
  std::string_view name;  // the step's name; empty: named by its index
  size_t index;
  std::array<size_t, 3> in_shape, out_shape;
  size_t in_bytes, out_bytes, scratch_bytes;
  size_t in_offset, out_offset, scratch_offset;  // in_offset: external for the caller's input
  size_t live_bytes;                             // the arena's bytes the phase takes
  bool in_place, over_input;                     // over_input: the output shares the input's bytes
  static constexpr size_t external = size_t(-1);
};

template <class... S>
struct Sequential : step::Parts<S...> {
  static_assert(sizeof...(S) > 0, "Sequential: at least one step");
  static std::string declaration() { return declare("Sequential", DeclaredBlock<S>{}...); }
  static constexpr size_t steps = sizeof...(S);
  template <size_t I>
  using BlockAt = typename step::Parts<S...>::template BlockAt<I>;
  template <FixedString Name>
  static constexpr size_t index_of = step::Parts<S...>::template index_of<Name>;
  using step::Parts<S...>::get;

  // The shapes of a pass over inputs of batch B and length N: step I's input length, input and
  // output types.
  template <size_t B, size_t N, size_t I>
  static consteval auto shapes() {
    if constexpr (I == 0) {
      return std::type_identity<step::Shapes<BlockAt<0>, B, N, void>>{};
    } else {
      using Prev = typename decltype(shapes<B, N, I - 1>())::type::Out;
      return std::type_identity<step::Shapes<BlockAt<I>, B, dims<Prev>[1], Prev>>{};
    }
  }
  template <size_t B, size_t N, size_t I>
  static consteval size_t length() {
    if constexpr (I == 0)
      return N;
    else
      return dims<typename decltype(shapes<B, N, I - 1>())::type::Out>[1];
  }
  template <size_t B, size_t N, size_t I>
  using InputAt = typename decltype(shapes<B, N, I>())::type::In;
  template <size_t B, size_t N, size_t I>
  using OutputAt = typename decltype(shapes<B, N, I>())::type::Out;
  template <size_t B, size_t N>
  using Input = InputAt<B, N, 0>;
  template <size_t B, size_t N>
  using Output = OutputAt<B, N, steps - 1>;

  // The mask step I is given: the caller's while every step before it kept the length; after
  // steps that only put rows before the sequence (ClassToken), the caller's keys shifted past
  // them, the rows put before seen by every query (Shifted, filled by the pass); an empty mask
  // once a step changed the sequence otherwise (a pooling step).
  static constexpr size_t untracked = size_t(-1);
  template <size_t B, size_t N, size_t I>
  static constexpr size_t shift_at = [] {
    size_t shift = 0;
    [&]<size_t... J>(std::index_sequence<J...>) {
      ((shift = shift == untracked || length<B, N, J + 1>() != length<B, N, J>() + step::prepends<BlockAt<J>>() ? untracked
                                                                                                          : shift + step::prepends<BlockAt<J>>()),
       ...);
    }(std::make_index_sequence<I>{});
    return shift;
  }();
  // The one shift a pass keeps the keys for: the last step's that has one (steps between two
  // ClassTokens see no mask).
  template <size_t B, size_t N>
  static constexpr size_t kept_shift = [] {
    size_t k = 0;
    [&]<size_t... I>(std::index_sequence<I...>) { ((k = shift_at<B, N, I> != untracked ? shift_at<B, N, I> : k), ...); }(std::make_index_sequence<steps>{});
    return k;
  }();
  // None: an empty type of this chain's own, which takes no room beside the empty members of
  // the chains inside it (two empty members of one type would need two addresses).
  struct NoShift {};
  template <size_t B, size_t N>
  using Shifted = std::conditional_t<kept_shift<B, N> == 0, NoShift, KeyMask<B, N + kept_shift<B, N>>>;
  template <size_t B, size_t N>
  static void shift_keys(const Mask<B, N>& mask, Shifted<B, N>& shifted) {
    constexpr size_t K = kept_shift<B, N>;
    if constexpr (K > 0)
      if (mask.keys)
        for (size_t b = 0; b < B; ++b)
          for (size_t j = 0; j < N + K; ++j) shifted(b, j) = j < K || (*mask.keys)(b, j - K);
  }
  template <size_t B, size_t N, size_t I>
  static Mask<B, length<B, N, I>()> mask_at(const Mask<B, N>& mask, const Shifted<B, N>& shifted) {
    constexpr size_t K = shift_at<B, N, I>;
    if constexpr (K == 0)
      return mask;
    else if constexpr (K == kept_shift<B, N>)
      return {.causal = mask.causal, .keys = mask.keys ? &shifted : nullptr, .decoding = mask.decoding};
    else
      return {.decoding = mask.decoding};
  }

  // Got is Want (fixed tensors): when not, the first error names the dimension and both sizes
  // (ShapeMismatch<Dimension<d>, Expected<e>, Got<g>>).
  template <class Want, class Got>
  static consteval bool same_shape() {
    constexpr auto w = dims<Want>;
    return [&]<size_t... d>(std::index_sequence<d...>) {
      return ShapeCheck<std::remove_cvref_t<decltype(*std::declval<Want>().data())>, Got, w[d]...>::ok;
    }(std::make_index_sequence<w.size()>{});
  }
  // Step I's input is step I − 1's output: a mismatch names the step's block, the dimension and
  // both sizes.
  template <size_t B, size_t N, size_t I>
  static consteval bool fits() {
    if constexpr (I == 0) {
      return true;
    } else {
      constexpr bool ok = same_shape<InputAt<B, N, I>, OutputAt<B, N, I - 1>>();
      static_assert(ok, "Sequential: a step's input is not the previous step's output (the step's block, dimension and sizes above)");
      return ok;
    }
  }
  template <size_t B, size_t N>
  static constexpr bool chain_fits = []<size_t... I>(std::index_sequence<I...>) {
    return (fits<B, N, I>() && ...);
  }(std::make_index_sequence<steps>{});
  // The model's input x is the first step's.
  template <size_t B, size_t N, class X>
  static constexpr void check_input() {
    static_assert(same_shape<Input<B, N>, X>(), "Sequential: the model's input x is not the first step's Input<B, N> (the dimension and sizes above)");
  }

  template <class Model>
  static constexpr bool is_chain = std::is_base_of_v<Sequential, Model>;

  // The training record of a pass, M what it keeps (Memory::replay: blocks replayed,
  // ReplayActsOf): Record, the steps' records, whose backward takes its Workspace (a chain as a
  // step of another, whose workspace is the caller's, live only during its backward); Acts, a
  // model's, which holds its Workspace too.
  // Replays (Memory::replay, as a step of another, two steps or more): one step's record at a
  // time, and the inputs of steps 1 … steps − 1 (step 0's is the caller's, kept by pointer);
  // backward runs each step's forward again into it just before its backward (the last step's
  // is still there): the same operations on the same inputs, the same bits, in the memory of
  // the largest step's record and workspace, which it holds with the record.
  // Step I's record in a pass keeping M; Over: a record may lie over its input (step::RecordOverInput;
  // not in a record that replays, which holds one step's record at a time).
  template <size_t B, size_t N, Memory M, bool Over, size_t I>
  static consteval auto record_at() {
    using Own = typename step::ActsWith<BlockAt<I>, B, length<B, N, I>(), M>::type;
    if constexpr (I == 0 || !Over)
      return std::type_identity<Own>{};
    else if constexpr (step::RecordOverInput<BlockAt<I>, typename decltype(record_at<B, N, M, Over, I - 1>())::type, B, length<B, N, I>()>)
      return std::type_identity<typename BlockAt<I>::template RecordOverInput<B, length<B, N, I>()>>{};
    else
      return std::type_identity<Own>{};
  }
  template <size_t B, size_t N, Memory M, bool Replays>
  struct RecordAs {
    static_assert(chain_fits<B, N>);
    template <size_t I>
    using StepActs = typename decltype(record_at<B, N, M, !Replays, I>())::type;
    template <class I>
    struct ActsFor;
    template <size_t... I>
    struct ActsFor<std::index_sequence<I...>> {
      using type = std::conditional_t<Replays, Phases<step::WithWork<StepActs<I>>...>, step::Members<StepActs<I>...>>;
    };
    template <class I>
    struct InputsFor;
    template <size_t... I>
    struct InputsFor<std::index_sequence<I...>> {
      using type = step::Members<InputAt<B, N, I + 1>...>;
    };
    typename ActsFor<std::make_index_sequence<steps>>::type acts;
    struct Replay {
      typename InputsFor<std::make_index_sequence<steps - 1>>::type inputs;  // steps 1 … steps − 1's
      const Input<B, N>* x = nullptr;                                         // step 0's
      Mask<B, N> mask;
    };
    struct NoReplay {};  // of this record's own type (as NoShift)
    [[no_unique_address]] std::conditional_t<Replays, Replay, NoReplay> replay;
    [[no_unique_address]] Shifted<B, N> shifted;  // the keys after a ClassToken (mask_at)
    // backward's memory: the steps' workspaces, one at a time (replaying: none, each with its
    // record), and the gradients between steps (each step's Dx) in G buffers in turn: as a step
    // of another, whose first step writes the caller's dx, min(steps − 1, 2); a model's,
    // min(steps, 2).
    template <size_t I>
    using StepDx = std::conditional_t<std::is_void_v<typename StepActs<I>::Dx>, Nothing, typename StepActs<I>::Dx>;
    template <class I>
    struct BackFor;
    template <size_t... I>
    struct BackFor<std::index_sequence<I...>> {
      using Workspace = std::conditional_t<Replays || (std::is_empty_v<WorkspaceOf<StepActs<I>>> && ...), Nothing, Phases<WorkspaceOf<StepActs<I>>...>>;
    };
    using Back = BackFor<std::make_index_sequence<steps>>;
    // The gradients of steps From … steps − 1's inputs (a step of another: from 1, the first
    // writes the caller's dx).
    template <size_t From, class I = std::make_index_sequence<steps - From>>
    struct GradsFrom {
      using type = Nothing;
    };
    template <size_t From, size_t I0, size_t... I>
    struct GradsFrom<From, std::index_sequence<I0, I...>> {
      using type = Phases<StepDx<From + I0>, StepDx<From + I>...>;
    };
    template <size_t G, size_t From = 0>
    struct WorkspaceWith {
      [[no_unique_address]] typename Back::Workspace ws;
      std::array<typename GradsFrom<From>::type, G> grads;
    };
    // A step whose record's backward may write dx over dout (backward_in_place: an activation):
    // given one of the buffers, it stays in it. The buffers the gradients of steps From … steps − 1
    // take: the last step's in one, then another for each step before it that is not in place.
    template <size_t I>
    static constexpr bool back_in_place = requires { requires StepActs<I>::backward_in_place; };
    template <size_t From>
    static constexpr size_t grads_from = [] {
      if constexpr (From >= steps) {
        return size_t(0);
      } else {
        size_t others = 0;
        [&]<size_t... I>(std::index_sequence<I...>) { ((others += !back_in_place<From + I>), ...); }(std::make_index_sequence<steps - 1 - From>{});
        return std::min<size_t>(1 + others, 2);
      }
    }();
    using Workspace = WorkspaceWith<grads_from<1>, 1>;

    // Step I's activations, or those of the step named Name (a record that replays holds one
    // step's at a time).
    template <size_t I>
    auto& at() {
      static_assert(!Replays, "Sequential::Record::at: a record that replays its steps holds one at a time");
      return step::get<I>(acts);
    }
    template <size_t I>
    const auto& at() const {
      static_assert(!Replays, "Sequential::Record::at: a record that replays its steps holds one at a time");
      return step::get<I>(acts);
    }
    template <FixedString Name>
    auto& at() {
      return at<index_of<Name>>();
    }
    template <FixedString Name>
    const auto& at() const {
      return at<index_of<Name>>();
    }

    template <class Model, class X>
      requires is_chain<Model>
    const Output<B, N>& forward(const Model& p, const X& x, const Mask<B, N>& mask = {}) {
      check_input<B, N, X>();
      return forward_to<steps - 1>(p, x, mask);
    }
    template <class Model, class X>
      requires is_chain<Model>
    const Output<B, N>& forward(const Model& p, const X& x, const KeyMask<B, N>* keys) {
      return forward(p, x, Mask<B, N>{.keys = keys});
    }

    // Accumulates the parameters' gradients into grad; dL/dx into the caller's dx.
    using Dx = typename StepActs<0>::Dx;
    template <class D>
      requires(!std::is_void_v<Dx>)
    const D& backward(const Sequential& p, Sequential& grad, const Output<B, N>& dout, D& dx, Workspace& work) {
      return backward_to<0>(p, grad, dout, work, &dx);
    }

    // The forward up to step Last's output, and the backward from dL/d(step I's output) down to
    // the model's input: for training code that runs the last steps itself (the language
    // model's head, on several threads).
    template <size_t Last, size_t I = 0, class Model, class X>
      requires is_chain<Model>
    const OutputAt<B, N, Last>& forward_to(const Model& p, const X& x, const Mask<B, N>& caller = {}) {
      const Mask<B, N> mask = step::mask_for<Model>(caller);
      if constexpr (I == 0) shift_keys(mask, shifted);
      if constexpr (Replays && I == 0) {
        static_assert(std::is_same_v<X, Input<B, N>>, "Sequential::Record: a record that replays its steps takes the first step's Input<B, N>");
        replay.x = &x, replay.mask = mask;
      }
      const auto& y = step::forward(record<I>(true), p.template get<I>(), x, mask_at<B, N, I>(mask, shifted));
      if constexpr (I == Last) {
        return y;
      } else if constexpr (Replays) {  // the next step's record takes y's place: its input is kept
        auto& next = step::get<I>(replay.inputs);
        step::copy_to(y, next);
        return forward_to<Last, I + 1>(p, next, mask);
      } else {
        return forward_to<Last, I + 1>(p, y, mask);
      }
    }
    // final: where step To writes its input gradient (nullptr: a buffer of the workspace).
    template <size_t To, size_t I = steps - 1, size_t G, size_t From, class Final = Nothing>
    decltype(auto) backward_to(const Sequential& p, Sequential& grad, const OutputAt<B, N, I>& dout, WorkspaceWith<G, From>& work, Final* final = nullptr) {
      if constexpr (Replays && I + 1 < steps)
        step::forward(record<I>(true), p.template get<I>(), input<I>(), mask_at<B, N, I>(replay.mask, shifted));
      auto& w = workspace<I>(work);
      if constexpr (std::is_void_v<typename StepActs<I>::Dx>) {
        static_assert(I == To, "Sequential: backward past a step whose input has no gradient (an Embedding's ids)");
        return record<I>().backward(p.template get<I>(), grad.template get<I>(), dout);
      } else if constexpr (I == To && !std::is_same_v<Final, Nothing>) {
        step::copy_to(backward_step<I>(p, grad, dout, *final, w), *final);
        return static_cast<const Final&>(*final);
      } else {
        auto& grads = work.grads;
        const auto in = [&](size_t g) { return g < G && static_cast<const void*>(&dout) == static_cast<const void*>(&grads[g]); };
        auto& dx = [&]() -> StepDx<I>& {
          if constexpr (back_in_place<I> && std::is_same_v<StepDx<I>, OutputAt<B, N, I>>)
            if (in(0) || in(1)) return const_cast<StepDx<I>&>(dout);
          return grads[G > 1 && in(0) ? 1 : 0].template start<StepDx<I>>();
        }();
        const auto& d = backward_step<I>(p, grad, dout, dx, w);
        if constexpr (I == To) {
          return d;
        } else if constexpr (Replays) {  // the step before replays over this one's record: d in dx
          step::copy_to(d, dx);
          return backward_to<To, I - 1>(p, grad, dx, work, final);
        } else {
          return backward_to<To, I - 1>(p, grad, d, work, final);
        }
      }
    }

   private:
    // Step I's backward; a record over its input (step::RecordOverInput) is given that input, the
    // output of step I − 1's record.
    template <size_t I, class D, class Dx, class W>
    decltype(auto) backward_step(const Sequential& p, Sequential& grad, const D& dout, Dx& dx, W& w) {
      if constexpr (requires { StepActs<I>::records_over_input; })
        return record<I>().backward(p.template get<I>(), grad.template get<I>(), dout, dx, step::get<I - 1>(acts).out);
      else
        return backward_with(record<I>(), p.template get<I>(), grad.template get<I>(), dout, dx, w);
    }
    // Step I's record; begin: the phase of its forward (a record that replays starts it anew).
    template <size_t I>
    StepActs<I>& record(bool begin = false) {
      if constexpr (Replays)
        return (begin ? acts.template start<step::WithWork<StepActs<I>>>() : acts.template current<step::WithWork<StepActs<I>>>()).acts;
      else
        return step::get<I>(acts);
    }
    template <size_t I, class W>
    WorkspaceOf<StepActs<I>>& workspace(W& work) {
      if constexpr (Replays) {
        return acts.template current<step::WithWork<StepActs<I>>>().ws;
      } else if constexpr (std::is_same_v<typename Back::Workspace, Nothing>) {
        static constinit WorkspaceOf<StepActs<I>> none{};  // every step's is empty
        return none;
      } else {
        return work.ws.template start<WorkspaceOf<StepActs<I>>>();
      }
    }
    template <size_t I>
    const InputAt<B, N, I>& input() const {
      if constexpr (I == 0)
        return *replay.x;
      else
        return step::get<I - 1>(replay.inputs);
    }
  };
  // A chain as a step of another: its record replays (Memory::replay, two steps or more) where
  // that takes less memory, record and workspace, than keeping every step's (not a feed-forward
  // layer's, whose steps' inputs are its records).
  template <size_t B, size_t N, Memory M>
  static constexpr bool replays = [] {
    if constexpr (M == Memory::replay && steps > 1) {
      using R = RecordAs<B, N, M, true>;
      using K = RecordAs<B, N, M, false>;
      return sizeof(R) + sizeof(typename R::Workspace) < sizeof(K) + sizeof(typename K::Workspace);
    }
    return false;
  }();
  template <size_t B, size_t N, Memory M = Memory::keep>
  using Record = RecordAs<B, N, M, replays<B, N, M>>;
  template <size_t B, size_t N, Memory M = Memory::keep>
  struct Acts : RecordAs<B, N, M, false> {
    using Base = RecordAs<B, N, M, false>;
    static constexpr bool whole = true;  // its own workspace
    typename Base::template WorkspaceWith<Base::template grads_from<0>> work;
    using Base::backward, Base::backward_to;

    // Accumulates the parameters' gradients into grad; returns dL/dx (nothing when the first
    // step has no input gradient: an Embedding).
    decltype(auto) backward(const Sequential& p, Sequential& grad, const Output<B, N>& dout) { return backward_to<0>(p, grad, dout); }
    template <size_t To, size_t I = steps - 1>
    decltype(auto) backward_to(const Sequential& p, Sequential& grad, const OutputAt<B, N, I>& dout) {
      return Base::template backward_to<To, I>(p, grad, dout, work);
    }
  };

  // Steps: the steps it plans and runs, the first Steps of the chain (all by default; fewer for
  // a combinator that runs the last one itself, into its own output: Residual).
  template <size_t B, size_t N, size_t Steps = steps>
  struct Infer {
    static_assert(Steps > 0 && Steps <= steps, "Sequential::Infer: the first Steps steps of the chain, at least one");
    // The layout (see the top of this file), in bytes. End 0: the arena's start, 1: its end,
    // 2: the caller's input.
    struct Layout {
      static constexpr size_t align = [] {
        size_t a = alignof(Tensor<1>);
        [&]<size_t... I>(std::index_sequence<I...>) {
          ((a = std::max({a, alignof(OutputAt<B, N, I>), alignof(step::Scratch<BlockAt<I>, B, length<B, N, I>(), 0>)})), ...);
        }(std::make_index_sequence<Steps>{});
        return a;
      }();
      template <size_t I>
      static constexpr bool in_place = I > 0 && step::in_place<BlockAt<I>>() && std::is_same_v<InputAt<B, N, I>, OutputAt<B, N, I>>;
      template <size_t I>
      static constexpr bool over_input = I > 0 && !in_place<I> && step::over_input<BlockAt<I>>();
      template <size_t I>
      static constexpr size_t in_bytes = I == 0 ? 0 : step::bytes<InputAt<B, N, I>>(align);
      // the bytes the output adds to the input's: over its input, the difference of their sizes
      // rounded up, so that the input (at the arena's end) lies that far past the output's start
      template <size_t I>
      static constexpr size_t out_bytes = [] {
        if constexpr (in_place<I>) {
          return size_t(0);
        } else if constexpr (over_input<I>) {
          static_assert(sizeof(OutputAt<B, N, I>) >= sizeof(InputAt<B, N, I>), "Sequential: a step over its input needs an output no smaller than it");
          return (sizeof(OutputAt<B, N, I>) - sizeof(InputAt<B, N, I>) + align - 1) / align * align;
        } else {
          return step::bytes<OutputAt<B, N, I>>(align);
        }
      }();
      // input and output (in place: the input alone), without and with the scratch at Room = 0
      static constexpr std::array<size_t, Steps> streams = []<size_t... I>(std::index_sequence<I...>) {
        return std::array<size_t, Steps>{(in_bytes<I> + out_bytes<I>)...};
      }(std::make_index_sequence<Steps>{});
      static constexpr size_t first_size = []<size_t... I>(std::index_sequence<I...>) {
        return std::max({size_t(1), (streams[I] + step::bytes<step::Scratch<BlockAt<I>, B, length<B, N, I>(), 0>>(align))...});
      }(std::make_index_sequence<Steps>{});
      // each step's scratch, given the room the arena leaves it
      template <size_t I>
      using ScratchAt = step::Scratch<BlockAt<I>, B, length<B, N, I>(), first_size - streams[I]>;
      static constexpr size_t size = []<size_t... I>(std::index_sequence<I...>) {
        return std::max({first_size, (streams[I] + step::bytes<ScratchAt<I>>(align))...});
      }(std::make_index_sequence<Steps>{});

      template <class T>
      static constexpr std::array<size_t, 3> shape3() {
        std::array<size_t, 3> s{1, 1, 1};
        constexpr auto d = dims<T>;
        for (size_t k = 0; k < d.size() && k < 3; ++k) s[k] = d[k];
        if constexpr (d.size() == 2) s[2] = 0;  // ids [B, N]
        return s;
      }
      template <size_t I>
      static constexpr PlanRow row(size_t& end) {
        PlanRow r{};
        r.name = step::Info<step::Nth<I, S...>>::name;
        if constexpr (requires { step::Info<step::Nth<I, S...>>::index; })
          r.index = step::Info<step::Nth<I, S...>>::index;
        else
          r.index = I;
        r.in_shape = shape3<InputAt<B, N, I>>();
        r.out_shape = shape3<OutputAt<B, N, I>>();
        r.in_bytes = in_bytes<I>;
        r.out_bytes = step::bytes<OutputAt<B, N, I>>(align);
        r.scratch_bytes = step::bytes<ScratchAt<I>>(align);
        r.in_place = in_place<I>;
        r.over_input = over_input<I>;
        const auto at = [](size_t e, size_t bytes) { return e == 0 ? 0 : size - bytes; };
        const size_t in_end = end, out_end = in_place<I> || over_input<I> ? end : end == 0 ? 1 : 0;
        r.in_offset = in_end == 2 ? PlanRow::external : at(in_end, r.in_bytes);
        // over its input: both at the arena's start, or the output out_bytes<I> before the input
        r.out_offset = over_input<I> ? at(out_end, r.in_bytes + out_bytes<I>) : at(out_end, r.out_bytes);
        // the scratch after whichever buffers hold the arena's start, if any
        r.scratch_offset = in_end == 0 ? r.in_bytes + (over_input<I> ? out_bytes<I> : 0) : out_end == 0 ? r.out_bytes : 0;
        r.live_bytes = streams[I] + r.scratch_bytes;
        end = out_end;
        return r;
      }

      static constexpr std::array<PlanRow, Steps> rows = [] {
        std::array<PlanRow, Steps> r{};
        size_t end = 2;  // where the current stream lies
        [&]<size_t... I>(std::index_sequence<I...>) { ((r[I] = row<I>(end)), ...); }(std::make_index_sequence<Steps>{});
        return r;
      }();
    };
    static_assert(chain_fits<B, N>);

    alignas(Layout::align) unsigned char arena[Layout::size];
    [[no_unique_address]] Shifted<B, N> shifted;  // the keys after a ClassToken (mask_at)

    static constexpr const std::array<PlanRow, Steps>& plan() { return Layout::rows; }

    // pool: the threads to run on (Serial, or a ThreadPool, stformer/train/parallel.hpp). The
    // steps that take one (Linear: its outputs in parts; the encoder and decoder blocks and
    // Repeat: their products and attention in parts of rows) run on its threads, the others on
    // the calling thread; the same bits for any pool, in the same arena.
    template <class Model, class X, class Pool = Serial>
      requires is_chain<Model>
    const OutputAt<B, N, Steps - 1>& forward(const Model& p, const X& x, const Mask<B, N>& mask = {}, Pool&& pool = Pool{}) {
      return forward_steps<0, Steps>(p, x, mask, pool);
    }
    template <class Model, class X, class Pool = Serial>
      requires is_chain<Model>
    const OutputAt<B, N, Steps - 1>& forward(const Model& p, const X& x, const KeyMask<B, N>* keys, Pool&& pool = Pool{}) {
      return forward(p, x, Mask<B, N>{.keys = keys}, pool);
    }

    // Part of the pass: steps First .. Last − 1, from step First's input in the arena (First > 0:
    // written by the caller through input<First>(), or left there by the steps before it in an
    // earlier call), or from the caller's x (First = 0). A quantized model's integer steps alone,
    // between its float ends (stformer/quantized/quantize.hpp): a core without an FPU runs them on
    // inputs quantized elsewhere. input<First>() is for writing: it begins a new tensor there,
    // whose values are the caller's to set (a step's output is read through what forward_steps returns).
    template <size_t First>
    InputAt<B, N, First>& input() {
      static_assert(First > 0 && First < Steps, "Sequential::Infer::input: the first step's input is the caller's");
      return *::new (arena + Layout::rows[First].in_offset) InputAt<B, N, First>;
    }
    template <size_t First, size_t Last = Steps, class Model, class Pool = Serial>
      requires is_chain<Model>
    const OutputAt<B, N, Last - 1>& forward_steps(const Model& p, const Mask<B, N>& mask = {}, Pool&& pool = Pool{}) {
      static_assert(First > 0 && First < Last && Last <= Steps, "Sequential::Infer::forward_steps: steps First .. Last − 1 of the chain, First > 0");
      return run_steps<First, Last>(p, std::launder(reinterpret_cast<const InputAt<B, N, First>*>(arena + Layout::rows[First].in_offset)),
                                    step::mask_for<Model>(mask), pool);
    }
    template <size_t First, size_t Last = Steps, class Model, class X, class Pool = Serial>
      requires(First == 0 && is_chain<Model>)
    const OutputAt<B, N, Last - 1>& forward_steps(const Model& p, const X& x, const Mask<B, N>& mask = {}, Pool&& pool = Pool{}) {
      static_assert(Last > 0 && Last <= Steps, "Sequential::Infer::forward_steps: steps 0 .. Last − 1 of the chain");
      check_input<B, N, X>();
      return run_steps<0, Last>(p, &x, step::mask_for<Model>(mask), pool);
    }

   private:
    // Steps First .. Last − 1 from the input at `in`, each from the output of the one before.
    template <size_t First, size_t Last, class Pool>
    const OutputAt<B, N, Last - 1>& run_steps(const Sequential& p, const void* in, const Mask<B, N>& mask, Pool& pool) {
      shift_keys(mask, shifted);
      [&]<size_t... I>(std::index_sequence<I...>) { (run_step<First + I>(p, in, mask, pool), ...); }(std::make_index_sequence<Last - First>{});
      return *static_cast<const OutputAt<B, N, Last - 1>*>(in);
    }
    template <size_t I, class Pool>
    void run_step(const Sequential& p, const void*& in, const Mask<B, N>& mask, Pool& pool) {
      using Out = OutputAt<B, N, I>;
      using W = typename Layout::template ScratchAt<I>;
      constexpr PlanRow r = Layout::rows[I];
      const auto& x = *static_cast<const InputAt<B, N, I>*>(in);
      Out* y = Layout::template in_place<I> ? std::launder(reinterpret_cast<Out*>(arena + r.out_offset)) : ::new (arena + r.out_offset) Out;
      if constexpr (std::is_empty_v<W>) {  // no scratch: nothing in the arena (its offset may be the arena's end)
        W none;
        step::run(p.template get<I>(), x, *y, none, mask_at<B, N, I>(mask, shifted), pool);
      } else {
        step::run(p.template get<I>(), x, *y, *::new (arena + r.scratch_offset) W, mask_at<B, N, I>(mask, shifted), pool);
      }
      in = y;
    }
  };

  // A chain as a step of another (a block declared as a chain, the body of a Residual, a branch
  // of Parallel). In place when every step is (a chain of residual blocks): the steps run on h
  // one after the other, each in its scratch in the room given, one at a time. When only the
  // first step is not (Then): it runs into the caller's y, the others in place on y. Otherwise
  // its Infer is its scratch, its output copied into the caller's y; or, for a chain of row-local
  // steps (step::row_local), Tiles: T rows of x at a time copied into the tile's input and run
  // through the chain's Infer<1, T>, their output copied into y, so that no step's output over
  // all B·N rows (a feed-forward layer's hidden [B·N, F]) exists. T: the most rows the room
  // holds, at least tile_rows(B·N), then evened out over the tiles; tiles only where they take
  // less than Infer<B, N>. The same bits for any T.
  // A chain of row-local leaves, one at least not in place (step::RowLeaves: linear layers,
  // norms, activations, through the chains inside it: a feed-forward layer, and the norm before
  // it), runs in step::RowTiles, in place when its output is its input's shape.
  static constexpr bool all_in_place = (step::in_place<typename step::Info<S>::Block>() && ...);
  static constexpr bool row_local = !all_in_place && (step::row_local<typename step::Info<S>::Block>() && ...);
  using Leaves = typename step::RowLeaves<Sequential>::type;
  static constexpr bool leaf_rows = step::RowLeaves<Sequential>::ok && !all_in_place;
  template <size_t B, size_t N, size_t Room, bool Into>
  static consteval auto row_scratch() {
    using One = step::RowTiles<Leaves, B * N, 1, Into>;
    constexpr size_t T = rows_in_room(B * N, tile_rows(B * N), Room, One::row_bytes[0] + One::row_bytes[1]);
    return std::type_identity<step::RowTiles<Leaves, B * N, T, Into>>{};
  }
  template <size_t B, size_t N, size_t Room, bool Into = true>
  using RowScratch = typename decltype(row_scratch<B, N, Room, Into>())::type;
  static constexpr bool in_place = [] {
    if constexpr (leaf_rows)
      return std::is_same_v<Input<1, 1>, Output<1, 1>> && step::RowTiles<Leaves, 1, 1, true>::x_apart;
    return all_in_place;
  }();
  Leaves row_leaves() const { return step::RowLeaves<Sequential>::of(*this); }
  // In place, the steps' scratches lie over one another: each step may take the room of the
  // largest (a feed-forward layer's tile as many rows as the attention's buffers before it hold).
  template <size_t B, size_t N, size_t Room>
  static constexpr size_t in_place_room = std::max({Room, sizeof(step::Scratch<typename step::Info<S>::Block, B, N, Room>)...});
  template <size_t B, size_t N, size_t Room>
  struct InPlace {
    Phases<step::Scratch<typename step::Info<S>::Block, B, N, in_place_room<B, N, Room>>...> w;
  };
  template <size_t B, size_t N, size_t T>
  struct Tiles {
    static constexpr bool row_tiles = true;
    // ⌈B·N / T⌉ tiles whose rows differ by one at most (the first `more` take least + 1): no short
    // last tile, which would take a product of fewer than 8 rows (kernels/matmul.hpp: another
    // path, other bits) where the whole pass does not
    static constexpr size_t rows = B * N, count = (rows + T - 1) / T, least = rows / count, more = rows % count;
    template <size_t R>
    struct Tile {
      Input<1, R> x;
      Infer<1, R> pass;
    };
    Phases<Tile<more == 0 ? least : least + 1>, Tile<least>> tile;
  };
  // A chain whose first step changes the shape and whose other steps are in place on its output
  // (PMA: SeedAttend, then a residual): step 0 runs into the caller's y, the others in place on
  // it, their scratches one at a time, each in the room of step 0's: no buffer of the chain's own.
  template <size_t B, size_t N>
  static constexpr bool then_in_place = [] {
    if constexpr (in_place || row_local || steps < 2 || step::prepends<BlockAt<0>>() != 0)
      return false;
    else
      return []<size_t... I>(std::index_sequence<I...>) {
        return ((step::in_place<BlockAt<I + 1>>() && std::is_same_v<InputAt<B, N, I + 1>, OutputAt<B, N, 0>>) && ...);
      }(std::make_index_sequence<steps - 1>{});
  }();
  template <size_t B, size_t N, size_t Room>
  struct Then {
    static constexpr size_t K = length<B, N, 1>();
    using First = step::Scratch<BlockAt<0>, B, N, Room>;
    static constexpr size_t room = std::max(Room, sizeof(First));
    template <size_t I>
    using Later = step::Scratch<BlockAt<I>, B, K, room>;
    template <class I>
    struct PhasesFor;
    template <size_t... I>
    struct PhasesFor<std::index_sequence<I...>> {
      using type = Phases<First, Later<I + 1>...>;
    };
    typename PhasesFor<std::make_index_sequence<steps - 1>>::type w;
  };
  template <size_t B, size_t N, size_t Room>
  static consteval auto whole_or_tiles() {
    if constexpr (then_in_place<B, N>) {
      return std::type_identity<Then<B, N, Room>>{};
    } else if constexpr (!row_local || tile_rows(B * N) >= B * N) {
      return std::type_identity<Infer<B, N>>{};
    } else {
      constexpr size_t least = tile_rows(B * N), room = std::max(Room, sizeof(Tiles<B, N, least>));
      if constexpr (sizeof(Infer<B, N>) <= room)
        return std::type_identity<Infer<B, N>>{};
      else
        return std::type_identity<Tiles<B, N, largest_fitting<TilesOf<B, N>::template W, room, least, B * N>()>>{};
    }
  }
  template <size_t B, size_t N>
  struct TilesOf {
    template <size_t T>
    using W = Tiles<B, N, T>;
  };
  template <size_t B, size_t N, size_t Room>
  static consteval auto scratch_for() {
    if constexpr (leaf_rows)
      return row_scratch<B, N, Room, true>();
    else if constexpr (all_in_place)
      return std::type_identity<InPlace<B, N, Room>>{};
    else
      return whole_or_tiles<B, N, Room>();
  }
  template <size_t B, size_t N, size_t Room = 0>
  using Scratch = typename decltype(scratch_for<B, N, Room>())::type;
  template <size_t B, size_t N, class L, size_t R, size_t T, bool I, class Pool = Serial>
  void forward_in_place(Input<B, N>& h, step::RowTiles<L, R, T, I>& w, const Mask<B, N>&, Pool&& pool = Pool{}) const {
    w.run(row_leaves(), h.data(), h.data(), pool);
  }
  template <size_t B, size_t N, class L, size_t R, size_t T, bool I, class Pool = Serial>
  void run(const Input<B, N>& x, Output<B, N>& y, step::RowTiles<L, R, T, I>& w, const Mask<B, N>&, Pool&& pool = Pool{}) const {
    w.run(row_leaves(), x.data(), y.data(), pool);
  }
  template <size_t B, size_t N, size_t Room, class Pool = Serial>
  void forward_in_place(Input<B, N>& h, InPlace<B, N, Room>& w, const Mask<B, N>& mask, Pool&& pool = Pool{}) const {
    [&]<size_t... I>(std::index_sequence<I...>) {
      static_assert((std::is_same_v<InputAt<B, N, I>, Input<B, N>> && ...), "Sequential: an in-place chain's steps must all take its input's shape");
      (step::run(this->template get<I>(), h, h, w.w.template start<step::Scratch<BlockAt<I>, B, N, in_place_room<B, N, Room>>>(), mask, pool), ...);
    }(std::make_index_sequence<steps>{});
  }
  template <size_t B, size_t N, class Pool = Serial>
  void run(const Input<B, N>& x, Output<B, N>& y, Infer<B, N>& w, const Mask<B, N>& mask, Pool&& pool = Pool{}) const {
    const auto& out = w.forward(*this, x, mask, pool);
    std::copy(out.begin(), out.end(), y.begin());
  }
  template <size_t B, size_t N, size_t Room, class Pool = Serial>
  void run(const Input<B, N>& x, Output<B, N>& y, Then<B, N, Room>& w, const Mask<B, N>& mask, Pool&& pool = Pool{}) const {
    using W = Then<B, N, Room>;
    step::run(this->template get<0>(), x, y, w.w.template start<typename W::First>(), mask, pool);
    Mask<B, W::K> later{};  // the pass's while the length is kept, else none (mask_at)
    if constexpr (W::K == N) later = mask;
    [&]<size_t... I>(std::index_sequence<I...>) {
      (step::run(this->template get<I + 1>(), y, y, w.w.template start<typename W::template Later<I + 1>>(), later, pool), ...);
    }(std::make_index_sequence<steps - 1>{});
  }
  template <size_t B, size_t N, size_t T, class Pool = Serial>
  void run(const Input<B, N>& x, Output<B, N>& y, Tiles<B, N, T>& w, const Mask<B, N>&, Pool&& pool = Pool{}) const {
    constexpr size_t out_row = dims<Output<B, N>>.back();
    for_tiles(x, w, pool, [&](size_t r0, const auto& out) { std::copy(out.begin(), out.end(), y.data() + r0 * out_row); });
  }
  // f(r0, out) for each tile of rows r0 … r0 + R − 1 of x: out, their output [1, R, ·]. x's rows
  // of a tile are copied before the tile runs, so f may write them (a residual's stream).
  template <size_t B, size_t N, size_t T, class Pool, class F>
  void for_tiles(const Input<B, N>& x, Tiles<B, N, T>& w, Pool& pool, F&& f) const {
    using W = Tiles<B, N, T>;
    constexpr size_t in_row = dims<Input<B, N>>.back();
    size_t r0 = 0;
    const auto tile = [&]<size_t R>() {
      auto& t = w.tile.template start<typename W::template Tile<R>>();
      std::copy_n(x.data() + r0 * in_row, R * in_row, t.x.data());
      f(r0, t.pass.forward(*this, t.x, Mask<1, R>{}, pool));
      r0 += R;
    };
    for (size_t i = 0; i < W::count; ++i) {
      if constexpr (W::more > 0)
        if (i < W::more) {
          tile.template operator()<W::least + 1>();
          continue;
        }
      tile.template operator()<W::least>();
    }
  }
};

// A chain's row-local leaves: its steps', in order.
template <class... S>
struct step::RowLeaves<Sequential<S...>> {
  static constexpr bool ok = (RowLeaves<typename Info<S>::Block>::ok && ...);
  using type = decltype(std::tuple_cat(std::declval<typename RowLeaves<typename Info<S>::Block>::type>()...));
  static type of(const Sequential<S...>& p) {
    return [&]<size_t... I>(std::index_sequence<I...>) {
      return std::tuple_cat(RowLeaves<typename Info<S>::Block>::of(p.template get<I>())...);
    }(std::index_sequence_for<S...>{});
  }
};

// A model's training record that replays its blocks (Memory::replay): of a Repeat's blocks one
// record instead of all of theirs, and of an encoder block one half's at a time, for one more
// forward of all but the last block and one more of each block's attention. A block's record
// keeps its mask, which points to the caller's KeyMask: keep that alive until backward. A block
// of two inputs (stformer/compose/memory.hpp): ReplayActsOf<Block, B, N, M>.
template <class Model, size_t B, size_t N, size_t... M>
using ReplayActsOf = typename Model::template Acts<B, N, M..., Memory::replay>;

// The plan of an Infer of a Sequential, one line per phase: the step, the shapes of its input
// and output, and the bytes of its input (the caller's for the first step), output and scratch
// and of all three, which are live together; in-place steps write over their input. The arena,
// sizeof(InferOf), is the largest of the live bytes.
template <class InferT>
void write_plan(std::FILE* out) {
  const auto shape = [](const std::array<size_t, 3>& s, char* buf, size_t n) {
    if (s[2] == 0)
      std::snprintf(buf, n, "[%zu, %zu]", s[0], s[1]);
    else
      std::snprintf(buf, n, "[%zu, %zu, %zu]", s[0], s[1], s[2]);
  };
  std::fprintf(out, "%-10s %-16s %-16s %10s %10s %10s %10s\n", "step", "input", "output", "input B", "output B", "scratch B", "live B");
  for (const PlanRow& r : InferT::plan()) {
    char name[32], in[48], o[48], in_bytes[24];
    if (r.name.empty())
      std::snprintf(name, sizeof name, "%zu", r.index);
    else
      std::snprintf(name, sizeof name, "%.*s", int(r.name.size()), r.name.data());
    shape(r.in_shape, in, sizeof in);
    shape(r.out_shape, o, sizeof o);
    const bool external = r.in_offset == PlanRow::external;
    if (external)
      std::snprintf(in_bytes, sizeof in_bytes, "caller's");
    else
      std::snprintf(in_bytes, sizeof in_bytes, "%zu", r.in_bytes);
    std::fprintf(out, "%-10s %-16s %-16s %10s %10zu %10zu %10zu%s\n", name, in, o, in_bytes, r.out_bytes, r.scratch_bytes, r.live_bytes,
                 r.in_place ? "  in place" : r.over_input ? "  over input" : "");
  }
  std::fprintf(out, "arena (sizeof InferOf): %zu B\n", sizeof(InferT));
}

}  // namespace stformer
