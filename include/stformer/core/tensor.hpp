// stformer — tensors, masks and run-time checks shared by every block.
//
// A tensor is an xt::xtensor_fixed<float, xshape<...>>: its shape is part of its type and its
// storage lives inside the object (no heap). With STFORMER_SIMD=1 the build also defines
// XTENSOR_USE_XSIMD, so the storage is aligned to the SIMD width; both come from the build's
// flags, never from a source file, so every translation unit agrees (config.hpp checks them).
#pragma once

#include "config.hpp"
#include "declaration.hpp"  // declares_causal

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <new>
#include <tuple>
#include <utility>
#include <type_traits>

#include <xtensor/xfixed.hpp>

#if defined(__SSE__)
#include <xmmintrin.h>
#endif

#if defined(__cpp_exceptions)
#include <stdexcept>
#else
#include <cstdlib>
#endif

// The types that report a shape mismatch in compile errors (see shape_is below). They hold
// no data, so they live outside the ABI namespace and the messages stay short.
namespace stformer {
template <std::size_t I>
struct Dimension {};
template <std::size_t N>
struct Expected {};
template <std::size_t N>
struct Got {};
template <class Dim, class E, class G>
struct ShapeMismatch;
template <std::size_t I, std::size_t E, std::size_t G>
struct ShapeMismatch<Dimension<I>, Expected<E>, Got<G>> {
  static_assert(E == G, "stformer: a tensor of the wrong shape (the dimension and both sizes: ShapeMismatch<Dimension<i>, Expected<e>, Got<g>> above)");
  static constexpr bool ok = E == G;
};
template <class E, class G>
struct RankMismatch;
template <std::size_t E, std::size_t G>
struct RankMismatch<Expected<E>, Got<G>> {
  static_assert(E == G, "stformer: a tensor with the wrong number of dimensions (both numbers: RankMismatch<Expected<e>, Got<g>> above)");
  static constexpr bool ok = E == G;
};
template <class GotDims, std::size_t... E>
struct DimsCheck;
template <std::size_t... G, std::size_t... E>
struct DimsCheck<std::index_sequence<G...>, E...> {
  static constexpr bool ok = [] {
    if constexpr (sizeof...(G) != sizeof...(E))
      return RankMismatch<Expected<sizeof...(E)>, Got<sizeof...(G)>>::ok;
    else
      return []<std::size_t... I>(std::index_sequence<I...>) {
        return (ShapeMismatch<Dimension<I>, Expected<E>, Got<G>>::ok && ...);
      }(std::make_index_sequence<sizeof...(E)>{});
  }();
};
}  // namespace stformer

namespace stformer::inline STFORMER_ABI {

using std::size_t;

// Not sharable (xtensor's Sharable = false): a tensor is its values and nothing else, trivially
// copyable, so its sizeof is its data (rounded to the alignment) and a model can be read in
// place from a constant image of the same layout in read-only memory (stformer/codegen/model_image.hpp).
template <size_t... N>
using Tensor = xt::xtensor_fixed<float, xt::xshape<N...>, xt::layout_type::row_major, false>;

// The same with elements of type T: IdTensor (token ids), and the integer tensors of the
// quantized blocks (int8 weights and activations, int16 residual streams, int32 accumulators).
template <class T, size_t... N>
using TensorOf = xt::xtensor_fixed<T, xt::xshape<N...>, xt::layout_type::row_major, false>;

// Token ids (Embedding input).
template <size_t... N>
using IdTensor = TensorOf<std::int32_t, N...>;

// Compile-time shape checks: shape_is<X, E...> is true when X is Tensor<E...>. When it is not,
// the compiler's first error names the first dimension that differs and both sizes, as the
// type ShapeMismatch<Dimension<i>, Expected<e>, Got<g>> (i counted from 0), or
// RankMismatch<Expected<r>, Got<s>>; the block's own static_assert follows with the roles.
template <class T, class X, size_t... E>
struct ShapeCheck {  // not a fixed tensor of T at all
  static constexpr bool ok = false;
};
template <class T, size_t... G, size_t... E>
struct ShapeCheck<T, xt::xtensor_fixed<T, xt::xshape<G...>, xt::layout_type::row_major, false>, E...>
    : DimsCheck<std::index_sequence<G...>, E...> {};
template <class X, size_t... E>
inline constexpr bool shape_is = ShapeCheck<float, X, E...>::ok;
// The same for a tensor of T (a block's stream in integers: int16).
template <class T, class X, size_t... E>
inline constexpr bool typed_shape_is = ShapeCheck<T, X, E...>::ok;
// The same for token ids: X is IdTensor<E...>.
template <class X, size_t... E>
inline constexpr bool ids_shape_is = ShapeCheck<std::int32_t, X, E...>::ok;

// Key-padding mask: keys[b][j] == true when key j of batch row b exists.
template <size_t B, size_t Nk>
using KeyMask = xt::xtensor_fixed<bool, xt::xshape<B, Nk>, xt::layout_type::row_major, false>;

// Error on bad run-time input (a token id out of range, a name too long ...): an exception of
// type std::invalid_argument where exceptions exist; std::abort in -fno-exceptions builds
// (firmware), where such input should be ruled out before it reaches the model.
[[noreturn]] inline void fail(const char* what) {
#if defined(__cpp_exceptions)
  throw std::invalid_argument(what);
#else
  (void)what;
  std::abort();
#endif
}

#define STFORMER_CHECK(cond, what) \
  do {                              \
    if (!(cond)) ::stformer::fail(what); \
  } while (0)

// A decoding pass (DecodeOf, stformer/compose/decode.hpp): its rows are at positions position,
// position + 1, …, and the keys and values of the rows before them are in `cache`, where each
// attention takes its part in the order the pass meets it (take: the same order every step), of
// its own type (float; int8 in integers). scores: one query's scores over up to `length` keys
// (float, or int32 followed by their int8 numerators: score_bytes).
struct Decoding {
  size_t position = 0;           // the first row's position: rows 0 .. position − 1 are cached
  size_t length = 0;             // the positions the caches hold
  std::byte* cache = nullptr;    // every attention's keys and values, one after the other
  size_t taken = 0;              // bytes of cache handed out in this pass
  std::byte* scores = nullptr;   // [score_bytes(length)] (and of any memory's rows), aligned as a float
  std::byte* memory = nullptr;   // every cross-attention's keys and values of its memory, projected once
  size_t memory_taken = 0;       // bytes of memory handed out in this pass

  // The columns of a cache held transposed, [features, keys]: the positions rounded up to whole
  // vectors of any backend (a step's scores are taken a vector of keys at a time).
  static constexpr size_t keys(size_t length) { return (length + 15) / 16 * 16; }
  // The bytes of one attention's part for `batch` sequences of keys and values `width` wide, of T.
  template <class T>
  static constexpr size_t bytes(size_t batch, size_t width, size_t length) {
    return (2 * batch * width * keys(length) * sizeof(T) + 63) / 64 * 64;
  }
  // One query's scores: float [keys], or int32 [keys] and int8 [keys].
  static constexpr size_t score_bytes(size_t length) { return keys(length) * (sizeof(float) + 1); }

  // One attention's part of the cache: its keys and its values transposed, kᵀ and vᵀ
  // [B, width, keys(length)] (a column a position), so that a step reads both a vector of
  // positions at a time whatever the head's width.
  template <class T>
  struct Part {
    T *kt, *vt;
    size_t columns, width;
    T* keys(size_t b, size_t c) const { return kt + (b * width + c) * columns; }    // feature c of sequence b's keys
    T* values(size_t b, size_t c) const { return vt + (b * width + c) * columns; }  // feature c of its values
    void put_key(size_t b, size_t t, const T* k) const {  // the key at position t
      for (size_t c = 0; c < width; ++c) keys(b, c)[t] = k[c];
    }
    void put_value(size_t b, size_t t, const T* v) const {
      for (size_t c = 0; c < width; ++c) values(b, c)[t] = v[c];
    }
    // A prompt's n positions of sequence b from position 0: its keys as rows k [n, width], its
    // values transposed vᵀ [width, n] (an integer attention's pass holds them so).
    void put_prompt(size_t b, const T* k, const T* vt, size_t n) const {
      for (size_t j = 0; j < n; ++j) put_key(b, j, k + j * width);
      for (size_t c = 0; c < width; ++c) std::copy_n(vt + c * n, n, values(b, c));
    }
  };
  // The part of `batch` sequences, `width` features and `length` positions at `at`: kᵀ, then vᵀ.
  template <class T>
  static Part<T> part_at(std::byte* at, size_t batch, size_t width, size_t length) {
    T* kt = reinterpret_cast<T*>(at);
    return {kt, kt + batch * width * keys(length), keys(length), width};
  }
  // The next attention's part, which this pass writes at `rows` positions from `position` (a
  // prompt's pass: from position 0).
  template <class T>
  Part<T> take(size_t batch, size_t width, size_t rows) {
    STFORMER_CHECK((rows == 1 || position == 0) && position + rows <= length,
                   "Decoding: a step past the cache, or a prompt into a cache that is not empty");
    const Part<T> part = part_at<T>(cache + taken, batch, width, length);
    taken += bytes<T>(batch, width, length);
    return part;
  }
  // A cross-attention's part of the memory (a decoder's encoder output, kept for every step):
  // the keys and values of the memory's rows that its key mask keeps, kᵀ and vᵀ
  // [B, width, keys(rows)], the kept rows first in their order, count[b] of them.
  template <class T>
  struct MemoryPart : Part<T> {
    std::uint32_t* count;
    // Each row j of sequence b that the key mask keeps (every row without one) into the next
    // column n, the kept rows first in their order: put(b, j, n); count[b] = the rows kept. (A
    // masked key gets weight 0 in the pass: left out, it is not summed at all.)
    template <size_t B, size_t M, class Put>
    void keep_rows(const KeyMask<B, M>* keys, Put&& put) const {
      for (size_t b = 0; b < B; ++b) {
        std::uint32_t n = 0;
        for (size_t j = 0; j < M; ++j)
          if (keys == nullptr || (*keys)(b, j)) put(b, j, n++);
        count[b] = n;
      }
    }
  };
  template <class T>
  static constexpr size_t memory_bytes(size_t batch, size_t width, size_t rows) {
    return bytes<T>(batch, width, rows) + (batch * sizeof(std::uint32_t) + 63) / 64 * 64;
  }
  // The next cross-attention's part of the memory, of `rows` rows (the same order every pass).
  template <class T>
  MemoryPart<T> take_memory(size_t batch, size_t width, size_t rows) {
    STFORMER_CHECK(memory != nullptr, "Decoding: a pass over a memory that was not remembered (DecodeOf::start)");
    const MemoryPart<T> part{part_at<T>(memory + memory_taken, batch, width, rows),
                             reinterpret_cast<std::uint32_t*>(memory + memory_taken + bytes<T>(batch, width, rows))};
    memory_taken += memory_bytes<T>(batch, width, rows);
    return part;
  }
  template <class T>
  T* score_row() const {  // float or int32 [keys(length)]
    return reinterpret_cast<T*>(scores);
  }
  std::int8_t* numerators() const {  // int8 [keys(length)], after the int32 scores
    return reinterpret_cast<std::int8_t*>(scores + keys(length) * sizeof(float));
  }
};

// Masks of one attention call. causal: query i sees keys j <= i (counted from the first row
// also when Nq != Nk). keys: optional key-padding mask. A masked key gets weight exactly 0; a
// query whose keys are all masked gets a zero attention output. decoding: the pass is a
// decoding step (the rows are at its positions, the keys before them in its cache).
template <size_t B, size_t Nk>
struct Mask {
  bool causal = false;
  const KeyMask<B, Nk>* keys = nullptr;
  Decoding* decoding = nullptr;

  // A decoding step: one row per sequence, given a Decoding (with more rows, a prompt's pass).
  bool decoding_step() const { return Nk == 1 && decoding != nullptr; }

  bool sees(size_t b, size_t i, size_t j) const {
    return (!causal || j <= i) && (keys == nullptr || (*keys)(b, j));
  }
};

// Whether a block declares that its rows have no order (a set's: static constexpr bool ordered =
// false), so that it never reads the causal flag of the pass it runs in.
template <class Block>
inline constexpr bool declares_unordered = requires { requires !Block::ordered; };

// Mask from valid lengths: keys[b][j] = j < length[b].
template <size_t B, size_t Nk>
KeyMask<B, Nk> key_mask_from_lengths(const size_t (&length)[B]) {
  KeyMask<B, Nk> m;
  for (size_t b = 0; b < B; ++b)
    for (size_t j = 0; j < Nk; ++j) m(b, j) = j < length[b];
  return m;
}

}  // namespace stformer

namespace stformer::inline STFORMER_ABI {

// The convention of every block's Acts (its training record): forward(params, inputs...,
// masks) returns its output and keeps what backward reads; backward(params, grad, dout, dx
// [, ws]) accumulates the parameter gradients into grad, writes the gradient of its input into
// dx and returns it. dx is the caller's: a tensor, or for a block of two inputs (queries and
// keys/values; a decoder's rows and memory) InputGrads {dq, dkv}, two tensors the caller
// chooses. ws, the block's Workspace when it has one (WorkspaceOf), holds what backward writes
// besides dx; it is used only during the call, so one workspace serves every block of a model
// in turn. A record is read by one backward after its forward.
template <class Q, class KV>
struct InputGrads {
  Q& dq;
  KV& dkv;
};

// Activations of Block for the given batch/sequence sizes: ActsOf<Linear<2, 16>, B, N>.
template <class Block, size_t... Dims>
using ActsOf = typename Block::template Acts<Dims...>;

// The forward-only workspace of Block (no backward buffers, no remembered inputs):
// InferOf<PointerModel<2, 16, 1, 64, 2>, 1, 50>. Its sizeof is all the memory the pass needs
// besides the parameters and the stack.
template <class Block, size_t... Dims>
using InferOf = typename Block::template Infer<Dims...>;

// f.template operator()<R>(i) for the tiles of T rows of Rows, i = 0, T, 2T, ... (R = T; the
// last tile shorter when T does not divide Rows): the one tile loop of the forward passes.
template <size_t Rows, size_t T, class F>
void for_tiles(F&& f) {
  size_t i = 0;
  for (; i + T <= Rows; i += T) f.template operator()<T>(i);
  if constexpr (Rows % T != 0) f.template operator()<Rows % T>(i);
}

// While it lives, the calling thread flushes subnormal floats to zero (inputs and results).
class FlushDenormals {
 public:
  FlushDenormals(const FlushDenormals&) = delete;
  FlushDenormals& operator=(const FlushDenormals&) = delete;
#if defined(__SSE__)
  FlushDenormals() : saved_(_mm_getcsr()) { _mm_setcsr(saved_ | 0x8040); }  // FTZ (bit 15), DAZ (bit 6)
  ~FlushDenormals() { _mm_setcsr(saved_); }

 private:
  unsigned saved_;
#elif defined(__aarch64__)
  FlushDenormals() : saved_(__builtin_aarch64_get_fpcr64()) { __builtin_aarch64_set_fpcr64(saved_ | (1ull << 24)); }  // FZ
  ~FlushDenormals() { __builtin_aarch64_set_fpcr64(saved_); }

 private:
  unsigned long long saved_;
#else
  FlushDenormals() = default;  // other targets: the floating-point mode is left as it is
#endif
};

// Forward-only passes on several threads: a pool (Serial, stformer/core/params.hpp, or ThreadPool,
// stformer/train/parallel.hpp) runs a stage's rows in S contiguous parts, S = 1, 2 or 4 (the
// most its threads allow; threads beyond the fourth wait), part s on thread s.
// with_parts(pool, f) calls f.template operator()<S>(), subnormals flushed to zero on the
// calling thread for any pool but Serial, as the pool's threads flush them in every task: so a
// stage is flushed or not whatever S is, and any number of threads gives the same bits.
template <class Pool, class F>
decltype(auto) with_parts(const Pool& pool, F&& f) {
  if constexpr (requires { Pool::one_thread; }) {  // Serial: one part, nothing else instantiated
    return f.template operator()<1>();
  } else {
    FlushDenormals flush;
    if (pool.size() >= 4)
      return f.template operator()<4>();
    else if (pool.size() >= 2)
      return f.template operator()<2>();
    else
      return f.template operator()<1>();
  }
}
// Rows per part when Rows rows are cut in S parts: ceil(Rows/S).
template <size_t Rows, size_t S>
inline constexpr size_t part_rows = (Rows + S - 1) / S;
// Part s of Rows rows cut in parts of Q, ⌈Rows/Q⌉ parts (the last the rest):
// f.template operator()<R>(r0) with its rows r0 … r0 + R − 1; nothing when s is past the last.
template <size_t Rows, size_t Q>
inline constexpr size_t parts_of = (Rows + Q - 1) / Q;
template <size_t Rows, size_t Q, class F>
void nth_part(size_t s, F&& f) {
  constexpr size_t parts = parts_of<Rows, Q>;
  if (s + 1 < parts)
    f.template operator()<Q>(s * Q);
  else if (s + 1 == parts)
    f.template operator()<Rows - (parts - 1) * Q>(s * Q);
}
// Rows in parts of part_rows<Rows, S> (fewer parts when the rows are few):
// f.template operator()<R>(r0, s) for part s, rows r0 … r0 + R − 1, on pool's task s.
template <size_t Rows, size_t S, class Pool, class F>
void for_parts(Pool& pool, F&& f) {
  constexpr size_t Q = part_rows<Rows, S>;
  pool.run(parts_of<Rows, Q>, [&](size_t s) { nth_part<Rows, Q>(s, [&]<size_t R>(size_t r0) { f.template operator()<R>(r0, s); }); });
}

// Rows per tile of the in-place projections and feed-forward layers of forward-only passes
// (their tile buffers are T rows wide), by default.
constexpr size_t tile_rows(size_t rows) { return rows < 16 ? rows : 16; }

// Rows per tile for a buffer of row_bytes a row (none: all the rows) that may take `room` bytes: at least T, at most
// `rows`, then evened out over the tiles it takes (50 rows in room for 37: 2 tiles of 25). A
// phase's tile grows into what the arena's largest phase leaves free: fewer, larger tiles cost
// no memory and run faster (each tile repacks the layer's weights).
constexpr size_t rows_in_room(size_t rows, size_t T, size_t room, size_t row_bytes) {
  size_t t = row_bytes == 0 ? rows : room / row_bytes;  // no buffer (one step, into y): every row at once
  t = t < T ? T : t > rows ? rows : t;
  const size_t tiles = (rows + t - 1) / t;
  return (rows + tiles - 1) / tiles;
}

// The largest T in [Lo, Hi] with sizeof(W<T>) <= Room, or Lo when none fits (sizeof(W<T>) grows
// with T): the rows per tile of a block's work in the room an arena leaves it.
template <template <size_t> class W, size_t Room, size_t Lo, size_t Hi>
consteval size_t largest_fitting() {
  if constexpr (Lo >= Hi) {
    return Lo;
  } else {
    constexpr size_t Mid = (Lo + Hi + 1) / 2;
    if constexpr (sizeof(W<Mid>) <= Room)
      return largest_fitting<W, Room, Mid, Hi>();
    else
      return largest_fitting<W, Room, Lo, Mid - 1>();
  }
}

// Work<B, N, T> with the most rows per tile T (from Lo, tile_rows(B·N) by default, up to B·N)
// that fit in Room bytes: a block's scratch as a step of a Sequential, in the room its arena
// leaves.
template <template <size_t, size_t, size_t> class Work, size_t B, size_t N, size_t Room, size_t Lo = tile_rows(B * N)>
struct TiledIn {
  template <size_t T>
  using W = Work<B, N, T>;
  using type = W<largest_fitting<W, Room, Lo, B * N>()>;
};

// A member that takes no room ([[no_unique_address]]), where a buffer is needed only in one
// configuration.
struct Nothing {};

// A row-local leaf of width D (the base of Self): Self::apply<Rows>(x, y) maps each row [D] on
// its own (y may be x). As a step of a chain (stformer/compose/sequential.hpp) it runs in place
// on rows [B, N, D] of T; its forward-only pass Infer<L...> writes out = apply(x); its record
// (Self::Acts) is given no mask (step::row_local).
template <class Self, size_t D, class T = float>
struct RowLocal {
  template <size_t B, size_t N>
  using Input = TensorOf<T, B, N, D>;
  static constexpr bool in_place = true, row_local = true;
  template <size_t B, size_t N, class Pool>
  void forward_in_place(Input<B, N>& h, Nothing, const Mask<B, N>&, Pool&&) const {
    static_cast<const Self&>(*this).template apply<B * N>(h.data(), h.data());
  }

  template <size_t... L>
  struct Infer {
    TensorOf<T, L..., D> out;
    template <class X>
    const TensorOf<T, L..., D>& forward(const Self& p, const X& x) {
      static_assert(typed_shape_is<T, X, L..., D>, "a row-local step (the block above): input rows x must be [..., D] (the pass's sizes, the step's width D)");
      p.template apply<(L * ... * 1)>(x.data(), out.data());
      return out;
    }
  };
};

// Phases<P...>: storage for the buffers of one phase of a forward pass at a time, as large as
// the largest phase. start<Q>() begins phase Q in it (default-initialised: no work at run
// time) and ends the one before, whose contents are then gone; what outlives a phase lives
// outside. This is how a model's Infer lays the buffers of its layers over one arena.
template <class... P>
class Phases {
 public:
  template <size_t i>
  using Phase = std::tuple_element_t<i, std::tuple<P...>>;

  template <class Q>
  Q& start() {
    static_assert((std::is_same_v<Q, P> || ...), "Phases::start: not one of this arena's phases");
    return *::new (static_cast<void*>(storage())) Q;
  }
  // The phase begun last, which must be Q.
  template <class Q>
  Q& current() {
    static_assert((std::is_same_v<Q, P> || ...), "Phases::current: not one of this arena's phases");
    return *std::launder(reinterpret_cast<Q*>(storage()));
  }

 private:
  alignas(P...) unsigned char bytes_[std::max({sizeof(P)...})];
  // The bytes, their origin hidden from the optimiser (an empty asm, no instruction): phases of
  // arenas nested in one another's phases lie over the same bytes, where GCC's object-size
  // checks would take one phase's buffer for another's (-Wstringop-overflow).
  unsigned char* storage() {
    unsigned char* p = bytes_;
#if defined(__GNUC__)
    asm("" : "+r"(p));
#endif
    return p;
  }
};

// What a model's training record keeps: keep, every block's record; replay, of the blocks of a
// Repeat, and of the steps of a chain inside a model, only their inputs and one record at a
// time, each forward run again into it just before its backward, and of an encoder block one
// half's record at a time, its attention run again (the same operations in the same order: the
// same bits, for more forward work).
enum class Memory { keep, replay };

// The workspace of a block's record A: A::Workspace, or Nothing (a leaf: a linear layer, a norm).
template <class A>
struct WorkspaceFor {
  using type = Nothing;
};
template <class A>
  requires requires { typename A::Workspace; }
struct WorkspaceFor<A> {
  using type = typename A::Workspace;
};
template <class A>
using WorkspaceOf = typename WorkspaceFor<A>::type;

// acts.backward(p, grad, dout, dx, ws), without ws when the record has no workspace.
template <class A, class P, class D, class Dx, class W>
decltype(auto) backward_with(A& acts, const P& p, P& grad, const D& dout, Dx&& dx, W& ws) {
  if constexpr (std::is_same_v<W, Nothing>)
    return acts.backward(p, grad, dout, dx);
  else
    return acts.backward(p, grad, dout, dx, ws);
}

// Storage for a record's input gradient (its Dx: a tensor dx, InputGrads<Q, KV> as dq and
// dkv, or void: an Embedding's ids have none); ref() is what backward takes.
template <class Dx>
struct GradStorage {
  Dx dx;
  Dx& ref() { return dx; }
};
template <class Q, class KV>
struct GradStorage<InputGrads<Q, KV>> {
  Q dq;
  KV dkv;
  InputGrads<Q, KV> ref() { return {dq, dkv}; }
};
template <>
struct GradStorage<void> {};

// A block's whole training memory: its record A (ActsOf), its workspace and its input's
// gradient, with backward(p, grad, dout) -> the input's gradient. TrainingOf<Block, Dims...>
// trains one block alone; a model's ActsOf (Sequential, stformer/compose/sequential.hpp) is already
// whole, and is its own TrainingOf.
template <class A>
struct Training : A, GradStorage<typename A::Dx> {
  [[no_unique_address]] WorkspaceOf<A> ws;
  template <class P, class D>
  decltype(auto) backward(const P& p, P& grad, const D& dout) {
    if constexpr (std::is_void_v<typename A::Dx>)
      return A::backward(p, grad, dout);
    else
      return backward_with(static_cast<A&>(*this), p, grad, dout, this->ref(), ws);
  }
};
template <class A>
struct TrainingFor {
  using type = Training<A>;
};
template <class A>
  requires requires { A::whole; }
struct TrainingFor<A> {
  using type = A;
};
template <class Block, size_t... Dims>
using TrainingOf = typename TrainingFor<ActsOf<Block, Dims...>>::type;

// 1/sqrt(n) at compile time (Newton's iteration in double).
constexpr float inv_sqrt(size_t n) {
  double x = double(n), r = x > 1 ? x / 2 : 1;
  for (int i = 0; i < 64; ++i) r = 0.5 * (r + x / r);
  return float(1.0 / r);
}

}  // namespace stformer
