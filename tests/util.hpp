// Test helpers: random parameters (biases and g too, so that nothing is left at 0) and inputs.
#pragma once

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include <stformer/core/params.hpp>
#include <stformer/core/rng.hpp>

namespace test {

// Every parameter ~ N(0, s²) with s = 1/sqrt(fan-in-ish); g ~ 1 + |N(0,1)|.
template <class M>
void randomize(M& m, stformer::Rng& rng) {
  stformer::for_each_param(
      [&](const stformer::Path&, stformer::Init init, auto& t) {
        float s = t.shape().size() >= 2 ? 1.0f / std::sqrt(float(t.shape()[t.shape().size() - 1])) : 0.3f;
        for (auto& x : t) x = init.kind == stformer::Init::constant ? 1.0f + std::abs(rng.normal()) : s * rng.normal();
      },
      m);
}

template <class T>
void fill(T& t, stformer::Rng& rng, float scale = 1.0f) {
  for (auto& x : t) x = scale * rng.normal();
}

// True when the tests run under an instruction-set emulator (a cross build's exe_wrapper, e.g.
// qemu-aarch64: floating point some 300 times slower than native) or built with the sanitizers
// (some 30 times slower): tests/meson.build then sets STFORMER_SLOW, and the tests that train
// run shorter (the pointer model only, fewer iterations); the other builds run them whole.
inline bool slow() {
  const char* e = std::getenv("STFORMER_SLOW");
  return e != nullptr && *e != '\0';
}

// The dotted names of m's parameters, in visit order.
template <class M>
std::vector<std::string> param_names(const M& m) {
  std::vector<std::string> n;
  stformer::for_each_param([&](const stformer::Path& p, stformer::Init, const auto&) { n.emplace_back(p.name().view()); }, m);
  return n;
}

// m's parameters by their dotted names.
template <class M>
std::map<std::string, std::vector<float>> params_by_name(const M& m) {
  std::map<std::string, std::vector<float>> p;
  stformer::for_each_param([&](const stformer::Path& at, stformer::Init, const auto& t) { p[std::string(at.name().view())].assign(t.begin(), t.end()); }, m);
  return p;
}
// The entries of m's float parameter of that name (nullptr: none).
template <class M>
float* param_data(M& m, std::string_view name) {
  float* found = nullptr;
  stformer::for_each_param(
      [&](const stformer::Path& at, stformer::Init, auto& t) {
        if constexpr (std::is_same_v<std::remove_cvref_t<decltype(*t.data())>, float>)
          if (at.name().view() == name) found = t.data();
      },
      m);
  return found;
}
// to's parameters ← from's of the same names (the same sets of names and sizes, in any order).
template <class From, class To>
void copy_by_name(const From& from, To& to) {
  const auto p = params_by_name(from);
  stformer::for_each_param(
      [&](const stformer::Path& at, stformer::Init, auto& t) {
        const auto& v = p.at(std::string(at.name().view()));
        if (v.size() != t.size()) std::abort();
        std::copy(v.begin(), v.end(), t.begin());
      },
      to);
}

// Heap-allocated, so that tests can hold large blocks and activations.
template <class T>
std::unique_ptr<T> make() {
  return std::make_unique<T>();
}

// How many parameter tensors of a and b (same model type) differ in any bit.
template <class M>
size_t tensors_differing(const M& a, const M& b) {
  size_t n = 0;
  stformer::for_each_param([&](const stformer::Path&, stformer::Init, const auto& x, const auto& y) { n += !std::equal(x.begin(), x.end(), y.begin()); },
                           a, b);
  return n;
}

// a and b hold the same floats, bit for bit.
template <class A, class B>
bool same_bits(const A& a, const B& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(*a.data())) == 0;
}

// keys[b][j] = j < lengths[b].
template <size_t B, size_t N>
stformer::KeyMask<B, N> lengths_mask(std::initializer_list<size_t> lengths) {
  stformer::KeyMask<B, N> m;
  auto it = lengths.begin();
  for (size_t b = 0; b < B; ++b, ++it)
    for (size_t j = 0; j < N; ++j) m(b, j) = j < *it;
  return m;
}

// Row b of a key mask as the reference takes it (empty: no mask).
template <size_t B, size_t N>
std::vector<bool> mask_row(const stformer::KeyMask<B, N>* m, size_t b) {
  if (!m) return {};
  std::vector<bool> r(N);
  for (size_t j = 0; j < N; ++j) r[j] = (*m)(b, j);
  return r;
}

}  // namespace test
