// The form of a Transformer encoder or decoder block (EncoderBlock, DecoderBlock): its norm, its
// feed-forward layer's activation and where the norms sit, each residual branch as
//   pre-norm:   x = x + Branch(N(x))          (SPEC's blocks with ScaleNorm; PyTorch's norm_first=True)
//   post-norm:  x = N(x + Branch(x))          (Vaswani et al. 2017; PyTorch's default)
//   SpecForm            ScaleNorm, ReLU, pre-norm; the norms named sn1, sn2, ...
//   PostNorm<Act>       LayerNorm, Act (act::ReLU by default), post-norm; norms norm1, norm2, ...
//   PreNorm<Act>        LayerNorm, Act, pre-norm
//   Form<Norm, Act, norm_first>  any other (Norm: ScaleNorm, LayerNorm, RMSNorm)
#pragma once

#include "../config.hpp"

#include <algorithm>
#include <string_view>
#include <type_traits>

#include "activation.hpp"
#include "layernorm.hpp"
#include "scalenorm.hpp"

namespace stformer::inline STFORMER_ABI {

template <template <size_t> class NormT = ScaleNorm, class ActT = act::ReLU, bool NormFirst = true>
struct Form {
  template <size_t D>
  using Norm = NormT<D>;
  using Act = ActT;
  static constexpr bool norm_first = NormFirst;
  // The i-th norm's name (1-based): SPEC's sn1, sn2, sn3 for ScaleNorm, PyTorch's norm1, ... else.
  static constexpr std::string_view norm_name(size_t i) {
    constexpr bool scale = std::is_same_v<NormT<1>, ScaleNorm<1>>;
    constexpr std::string_view sn[] = {"sn1", "sn2", "sn3"}, norm[] = {"norm1", "norm2", "norm3"};
    return scale ? sn[i - 1] : norm[i - 1];
  }
  // A residual branch's input a [Rows, D]: N(h) (pre-norm) or h itself (post-norm).
  template <size_t Rows, size_t D, class Norm, class X, class A>
  static void branch_input(const Norm& norm, const X* h, A* a) {
    if constexpr (NormFirst)
      norm.template apply<Rows>(h, a);
    else
      std::copy_n(h, Rows * D, a);
  }
  // Once the branch has added into h: h ← N(h) (post-norm; nothing pre-norm).
  template <size_t Rows, class Norm, class X>
  static void branch_output(const Norm& norm, X* h) {
    if constexpr (!NormFirst) norm.template apply<Rows>(h, h);
  }
};

using SpecForm = Form<>;
template <class Act = act::ReLU>
using PostNorm = Form<LayerNorm, Act, false>;
template <class Act = act::ReLU>
using PreNorm = Form<LayerNorm, Act, true>;

}  // namespace stformer
