// stformer — the parameter visitor.
//
// Every block lists its parameters exactly once, in a static member
//
//   template <class F, class... S> static constexpr void visit(const Path& at, F& f, S&... s);
//
// which calls f(path, init, tensor...) for each parameter tensor, with its place (path.name()
// is its dotted SPEC name, "blocks.0.attn.wq.weight") and its initialisation, and recurses into
// sub-blocks with stformer::visit(at / "attn", f, s.attn...). The pack s... holds one or more
// objects of the same block type visited in lock-step (parameters, gradients, optimiser
// moments ...), so initialisation, optimisers and checkpoints are all one visit over one list.
#pragma once

#include "config.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <string_view>

#include "declaration.hpp"
#include "rng.hpp"
#include "tensor.hpp"

namespace stformer::inline STFORMER_ABI {

// A dotted parameter name written out in a fixed buffer (no heap): what Path::name() gives.
class Name {
 public:
  static constexpr size_t capacity = 127;

  constexpr const char* c_str() const { return s_; }
  constexpr std::string_view view() const { return {s_, n_}; }
  constexpr bool operator==(std::string_view o) const { return view() == o; }

  constexpr void append(std::string_view part) {
    STFORMER_CHECK(n_ + part.size() <= capacity, "stformer::Path: parameter name longer than 127 characters");
    std::copy_n(part.data(), part.size(), s_ + n_);
    n_ += part.size();
    s_[n_] = '\0';
  }

 private:
  char s_[capacity + 1] = {};
  size_t n_ = 0;
};

// A parameter's place in the visit ("blocks" / 0 / "attn" / "wq" / "weight"): its last part and
// a pointer to its parent's Path, which lives in the caller's frame. A Path is a few words
// however long the name, so a deep visit's stack stays small on a microcontroller; it is valid
// during the call it is passed to. name() writes the dotted name ("blocks.0.attn.wq.weight").
class Path {
 public:
  constexpr Path() = default;

  constexpr Path operator/(std::string_view part) const { return Path(this, part, none); }
  constexpr Path operator/(size_t index) const { return Path(this, {}, index); }

  constexpr Name name() const {
    Name n;
    write(n);
    return n;
  }
  constexpr bool operator==(std::string_view o) const { return name() == o; }
  // The name's last part (empty for an index), and the Path this one was made from (its block's).
  constexpr std::string_view last() const { return part_; }
  constexpr const Path* parent() const { return parent_; }

 private:
  static constexpr size_t none = size_t(-1);
  constexpr Path(const Path* parent, std::string_view part, size_t index) : parent_(parent), part_(part), index_(index) {}

  constexpr void write(Name& n) const {
    if (!parent_) return;
    parent_->write(n);
    if (parent_->parent_) n.append(".");
    if (index_ == none) return n.append(part_);
    char digits[24];
    size_t k = 0, i = index_;
    do {
      digits[k++] = char('0' + i % 10);
      i /= 10;
    } while (i != 0);
    char text[24];
    for (size_t j = 0; j < k; ++j) text[j] = digits[k - 1 - j];
    n.append(std::string_view(text, k));
  }

  const Path* parent_ = nullptr;  // none for the model itself
  std::string_view part_;
  size_t index_ = none;
};

// How a parameter is initialised (SPEC.md, "Initialisation").
struct Init {
  enum Kind { zeros, constant, normal, xavier_normal, kaiming_normal } kind;
  float value = 0;  // constant: the value
};

// Recurse into a sub-block (or a std::array of them, named .0, .1, ...). Not inlined: each
// block's visit keeps its children's Paths in a frame of its own, so a visit's stack grows
// with the model's depth, not with its number of parameters. A visitor with a member
// block(at, first, rest...) is also shown each block before its parameters (a check that needs
// a block's tensors together: quantized/bounds.hpp's requant_mismatch).
template <class F, class T, class... S>
[[gnu::noinline]] constexpr void visit(const Path& at, F& f, T& first, S&... rest) {
  using Block = std::remove_const_t<T>;
  if constexpr (requires { f.block(at, first, rest...); }) f.block(at, first, rest...);
  Block::visit(at, f, first, rest...);
}
template <class F, class T, size_t N, class... S>
constexpr void visit(const Path& at, F& f, std::array<T, N>& first, S&... rest) {
  for (size_t i = 0; i < N; ++i) visit(at / i, f, first[i], rest[i]...);
}
template <class F, class T, size_t N, class... S>
constexpr void visit(const Path& at, F& f, const std::array<T, N>& first, S&... rest) {
  for (size_t i = 0; i < N; ++i) visit(at / i, f, first[i], rest[i]...);
}

// f(path, init, tensor...) for every parameter tensor of model(s) m..., in declaration order.
template <class F, class M, class... Ms>
constexpr void for_each_param(F&& f, M& m, Ms&... ms) {
  visit(Path{}, f, m, ms...);
}

// Fills every parameter as its Init says, drawing from rng in visit order.
// 2-D fans as PyTorch: fan_in = shape[1], fan_out = shape[0].
template <class M>
void init_params(M& model, Rng& rng) {
  for_each_param(
      [&rng](const Path&, Init init, auto& t) {
        const auto& shape = t.shape();
        float fan_out = shape.size() >= 2 ? float(shape[0]) : float(t.size());
        float fan_in = shape.size() >= 2 ? float(t.size() / shape[0]) : float(t.size());
        float std = 0;
        switch (init.kind) {
          case Init::zeros: t.fill(0.0f); return;
          case Init::constant: t.fill(init.value); return;
          case Init::normal: std = 1.0f; break;
          case Init::xavier_normal: std = std::sqrt(2.0f / (fan_in + fan_out)); break;
          case Init::kaiming_normal: std = std::sqrt(2.0f / fan_in); break;
        }
        for (auto& x : t) x = std * rng.normal();
      },
      model);
}

// Number of scalar parameters.
template <class M>
size_t param_count(const M& model) {
  size_t n = 0;
  for_each_param([&n](const Path&, Init, const auto& t) { n += t.size(); }, model);
  return n;
}

// The name of the first tensor (visit order) of m holding a NaN or an infinity, the flat
// index and the value; an empty name when every value is finite. Training loops call it once
// a loss or a gradient norm is not finite, to say where.
struct NonFinite {
  Name name;
  size_t index = 0;
  float value = 0;
  explicit operator bool() const { return !name.view().empty(); }
};
template <class M>
NonFinite first_nonfinite(const M& m) {
  NonFinite found;
  for_each_param(
      [&](const Path& path, Init, const auto& t) {
        if (found) return;
        for (size_t i = 0; i < t.size(); ++i)
          if (!std::isfinite(t.data()[i])) {
            found = {path.name(), i, t.data()[i]};
            return;
          }
      },
      m);
  return found;
}

}  // namespace stformer

namespace stformer::inline STFORMER_ABI {

// Runs f(i) for i in [0, n) in order, on the calling thread: the default pool of the passes
// below (stformer/train/parallel.hpp's ThreadPool is the other).
struct Serial {
  static constexpr bool one_thread = true;
  size_t size() const { return 1; }
  template <class F>
  void run(size_t n, F&& f) const {
    for (size_t i = 0; i < n; ++i) f(i);
  }
};

// Elementwise pass over every parameter tensor of m... in lock-step, cut into `parts` parts run
// on pool: f(part, offset, count, data...) with data... the tensors' float pointers (+offset).
// Cuts fall on multiples of 16 floats, so kernels with a vector body and a scalar tail treat
// every element the same way however many parts there are.
template <class Pool, class F, class M, class... Ms>
void for_each_param_part(Pool&& pool, size_t parts, F&& f, M& m, Ms&... ms) {
  pool.run(parts, [&](size_t i) {
    for_each_param(
        [&](const Path&, Init, auto& t, auto&... ts) {
          size_t n = t.size(), blocks = (n + 15) / 16;
          size_t b = std::min(n, blocks * i / parts * 16), e = std::min(n, blocks * (i + 1) / parts * 16);
          if (b < e) f(i, b, e - b, t.data() + b, ts.data() + b...);
        },
        m, ms...);
  });
}

// Sets every parameter (of a gradient structure) to 0.
template <class M>
void zero_grad(M& grad) {
  for_each_param([](const Path&, Init, auto& t) { t.fill(0.0f); }, grad);
}

}  // namespace stformer
