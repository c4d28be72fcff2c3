// The parts of a Form (stformer/blocks/form.hpp) that the hand-written encoder and decoder
// blocks (tests/written_encoder.hpp, tests/written_decoder.hpp) read, as the library had them
// before those blocks became declarations: a norm's name, the attention's and feed-forward
// layer's names, the post-norm branch scales in integers and each residual branch's input and
// output.
#pragma once

#include <algorithm>
#include <string_view>
#include <type_traits>

#include "stformer/stformer.hpp"
#include "written_feedforward.hpp"

namespace written {
using namespace stformer;

template <class Fm>
struct FormParts {
  static constexpr bool torch_names = Fm::torch_names, norm_first = Fm::norm_first;
  // The i-th norm's name (1-based): SPEC's sn1, sn2, sn3, or PyTorch's norm1, norm2, norm3.
  static constexpr std::string_view norm_name(size_t i) {
    constexpr std::string_view sn[] = {"sn1", "sn2", "sn3"}, norm[] = {"norm1", "norm2", "norm3"};
    return torch_names ? norm[i - 1] : sn[i - 1];
  }
  template <class Fn, class... A>
  static constexpr void visit_attention(const Path& at, std::string_view ours, std::string_view torch, Fn& f, A&... a) {
    stformer::visit(at / (torch_names ? torch : ours), f, a...);
  }
  // PyTorch's linear1, linear2 at the layer's level (float); SPEC's ffn.fc1, ffn.fc2, and in
  // integers ffn.*.
  template <class Fn, class S0, class... S>
  static constexpr void visit_ffn(const Path& at, Fn& f, S0& ffn0, S&... ffn) {
    if constexpr (torch_names && std::is_same_v<decltype(S0::hidden_scale), Nothing>) {
      stformer::visit(at / "linear1", f, ffn0.fc1, ffn.fc1...);
      stformer::visit(at / "linear2", f, ffn0.fc2, ffn.fc2...);
    } else {
      stformer::visit(at / "ffn", f, ffn0, ffn...);
    }
  }
  // A block's branch scales at precision P (C branches): none but post-norm in integers.
  template <class P, size_t C>
  using BranchScalesOf = std::conditional_t<P::integer && !norm_first, BranchScales<C>, Nothing>;
  template <class Fn, class S0, class... S>
  static constexpr void visit_branch_scales(const Path& at, Fn& f, S0& s0, S&... s) {
    if constexpr (!std::is_same_v<std::remove_const_t<S0>, Nothing>) stformer::visit(at, f, s0, s...);
  }
  // Residual branch i's input a [Rows, D]: N(h) (pre-norm) or h itself (post-norm; in integers
  // requantized by `scales`).
  template <size_t Rows, size_t D, class Norm, class X, class A, class Scales>
  static void branch_input(const Norm& norm, const X* h, A* a, const Scales& scales, size_t i) {
    if constexpr (norm_first)
      norm.template apply<Rows>(h, a);
    else if constexpr (std::is_same_v<Scales, Nothing>)
      std::copy_n(h, Rows * D, a);
    else
      for (size_t k = 0; k < Rows * D; ++k) a[k] = A(std::clamp<std::int32_t>(scales.branch_requant.apply(i, h[k]), -128, 127));
  }
  // Once the branch has added into h: h ← N(h) (post-norm; nothing pre-norm).
  template <size_t Rows, class Norm, class X>
  static void branch_output(const Norm& norm, X* h) {
    if constexpr (!norm_first) norm.template apply<Rows>(h, h);
  }
};

}  // namespace written
