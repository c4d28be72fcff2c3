// SetTransformer<In, D, H, M, Out> — SPEC's `set` model of Example 1 (Lee et al. 2019):
//   x [B, N, In] -> proj = Linear<In, D> -> isab = ISAB<D, H, M> -> pool = PMA<D, H, 1>
//                -> head = Linear<D, Out> -> y [B, 1, Out]
// Permutation-invariant in the N set elements. Parameters: proj.*, isab.*, pool.*, head.*.
#pragma once

#include "../config.hpp"

#include "../blocks/isab.hpp"
#include "../blocks/linear.hpp"
#include "../blocks/pma.hpp"

namespace stformer::inline STFORMER_ABI {

template <size_t In, size_t D, size_t H, size_t M, size_t Out, template <size_t> class Norm = ScaleNorm>
struct SetTransformer {
  Linear<In, D> proj;
  ISAB<D, H, M, Norm> isab;
  PMA<D, H, 1, Norm> pool;
  Linear<D, Out> head;

  template <class F, class... S>
  static constexpr void visit(const Path& at, F& f, S&... s) {
    stformer::visit(at / "proj", f, s.proj...);
    stformer::visit(at / "isab", f, s.isab...);
    stformer::visit(at / "pool", f, s.pool...);
    stformer::visit(at / "head", f, s.head...);
  }

  // Forward only. Memory plan, sizeof(Infer<B, N>): x [B, N, D] (proj(x), then ISAB in place),
  // the pooled row [B, 1, D] and the output y [B, 1, Out] beside one arena of two phases,
  //   isab: ISAB::Work<B, N>: Hm [B, M, D]; MAB1's work (a [B, N, D], kᵀ [B, D, N], v [B, N, D],
  //         tile), then MAB2's (a [B, N, D], kᵀ [B, D, M], v [B, M, D], tile) in its place
  //   pool: PMA::Work<B, N>: a [B, 1, D], Nkv(x) [B, N, D] (folded attention: no kᵀ, v), qk, ax
  //         [H, D], A [H, N], tile
  // The same bits as Acts.
  template <size_t B, size_t N>
  struct Infer {
    using IsabWork = typename ISAB<D, H, M, Norm>::template Work<B, N>;
    using PoolWork = typename PMA<D, H, 1, Norm>::template Work<B, N>;
    Tensor<B, N, D> x;
    Tensor<B, 1, D> pooled;
    Tensor<B, 1, Out> y;
    Phases<IsabWork, PoolWork> phase;

    template <class X>
    const Tensor<B, 1, Out>& forward(const SetTransformer& p, const X& in, const KeyMask<B, N>* keys = nullptr) {
      static_assert(shape_is<X, B, N, In>, "SetTransformer: input set x must be [B, N, In] (the pass's sizes, the model's input width In)");
      p.proj.template apply<B * N>(in.data(), x.data());
      p.isab.forward_in_place(x, phase.template start<IsabWork>(), keys);
      p.pool.forward_into(x, pooled, phase.template start<PoolWork>(), keys);
      p.head.template apply<B>(pooled.data(), y.data());
      return y;
    }
  };

  template <size_t B, size_t N>
  struct Acts {
    ActsOf<Linear<In, D>, B, N> proj;
    ActsOf<ISAB<D, H, M, Norm>, B, N> isab;
    ActsOf<PMA<D, H, 1, Norm>, B, N> pool;
    ActsOf<Linear<D, Out>, B, 1> head;

    template <class X>
    const Tensor<B, 1, Out>& forward(const SetTransformer& p, const X& x, const KeyMask<B, N>* keys = nullptr) {
      static_assert(shape_is<X, B, N, In>, "SetTransformer: input set x must be [B, N, In] (the pass's sizes, the model's input width In)");
      const auto& e = isab.forward(p.isab, proj.forward(p.proj, x), keys);
      return head.forward(p.head, pool.forward(p.pool, e, keys));
    }

    // Accumulates parameter gradients into grad; returns dL/dx.
    const Tensor<B, N, In>& backward(const SetTransformer& p, SetTransformer& grad, const Tensor<B, 1, Out>& dy) {
      const auto& de = pool.backward(p.pool, grad.pool, head.backward(p.head, grad.head, dy));
      return proj.backward(p.proj, grad.proj, isab.backward(p.isab, grad.isab, de));
    }
  };
};

}  // namespace stformer
