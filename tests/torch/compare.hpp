// What the PyTorch tests (test_torch_parity, test_torch_export) share: tensors read from the
// files PyTorch wrote, and differences relative to the tensor's largest entry.
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>

#include <stformer/io/safetensors.hpp>

namespace test {
using namespace stformer;

// DIR/name, DIR from the environment variable `env` (set by meson test).
inline std::string file_in(const char* env, const char* name) {
  const char* dir = std::getenv(env);
  REQUIRE_MESSAGE(dir != nullptr, env << " is not set (run through meson test)");
  return std::string(dir) + "/" + name;
}

// Copies tensor `name` (F32 or I32, or U8 for masks) into t, checking element count and dtype.
template <class T>
inline void read(const safetensors::File& f, const std::string& name, T& t) {
  const auto& v = f.at(name);
  using E = std::remove_cvref_t<decltype(*t.data())>;
  size_t n = 1;
  for (size_t d : v.shape) n *= d;
  REQUIRE_MESSAGE(n == t.size(), name << " has " << n << " elements, expected " << t.size());
  if constexpr (std::is_same_v<E, bool>) {
    REQUIRE(v.dtype == safetensors::Dtype::U8);
    for (size_t i = 0; i < n; ++i) t.data()[i] = v.bytes[i] != std::byte{0};
  } else {
    REQUIRE(v.bytes.size() == n * sizeof(E));
    REQUIRE(v.dtype == (std::is_same_v<E, float> ? safetensors::Dtype::F32 : safetensors::Dtype::I32));
    std::memcpy(t.data(), v.bytes.data(), v.bytes.size());
  }
}

inline double worst = 0;  // largest err / scale of the current check group, reported by MESSAGE

template <class A, class B>
inline void check_rel(const std::string& what, const A& got, const B& want, double tol) {
  double scale = 1e-3, err = 0;  // floor: exact zeros (the key bias's gradient) are ~1e-8 noise in float
  size_t infinite = 0, mismatched = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    float w = want.data()[i], g = got.data()[i];
    if (std::isinf(w)) {  // masked log-probabilities: −∞ on both sides
      ++infinite;
      mismatched += g != w;
      continue;
    }
    scale = std::max(scale, double(std::abs(w)));
    err = std::isnan(g) ? INFINITY : std::max(err, double(std::abs(g - w)));
  }
  CHECK_MESSAGE(mismatched == 0, what << ": " << mismatched << " of " << infinite << " infinite entries differ");
  worst = std::max(worst, err / scale);
  INFO(what << ": largest difference " << err << ", largest entry " << scale);
  CHECK(err <= tol * scale);
}

}  // namespace test
