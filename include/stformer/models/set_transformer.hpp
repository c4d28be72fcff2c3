// SetTransformer<In, D, H, M, Out> — SPEC's `set` model of Example 1 (Lee et al. 2019):
//   x [B, N, In] -> proj = Linear<In, D> -> isab = ISAB<D, H, M> -> pool = PMA<D, H, 1>
//                -> head = Linear<D, Out> -> y [B, 1, Out]
// Permutation-invariant in the N set elements. Parameters: proj.*, isab.*, pool.*, head.*.
#pragma once

#include "../blocks/isab.hpp"
#include "../blocks/linear.hpp"
#include "../blocks/pma.hpp"

namespace stformer {

template <size_t In, size_t D, size_t H, size_t M, size_t Out, template <size_t> class Norm = ScaleNorm>
struct SetTransformer {
  Linear<In, D> proj;
  ISAB<D, H, M, Norm> isab;
  PMA<D, H, 1, Norm> pool;
  Linear<D, Out> head;

  template <class F, class... S>
  static void visit(const Path& at, F& f, S&... s) {
    stformer::visit(at / "proj", f, s.proj...);
    stformer::visit(at / "isab", f, s.isab...);
    stformer::visit(at / "pool", f, s.pool...);
    stformer::visit(at / "head", f, s.head...);
  }

  template <size_t B, size_t N>
  struct Acts {
    ActsOf<Linear<In, D>, B, N> proj;
    ActsOf<ISAB<D, H, M, Norm>, B, N> isab;
    ActsOf<PMA<D, H, 1, Norm>, B, N> pool;
    ActsOf<Linear<D, Out>, B, 1> head;

    template <class X>
    const Tensor<B, 1, Out>& forward(const SetTransformer& p, const X& x, const KeyMask<B, N>* keys = nullptr) {
      static_assert(std::is_same_v<X, Tensor<B, N, In>>, "SetTransformer: input set x [B, N, In] and the model's input width In differ");
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
