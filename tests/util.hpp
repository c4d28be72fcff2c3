// Test helpers: random parameters (biases and g too, so that nothing is left at 0) and inputs.
#pragma once

#include <memory>

#include <stformer/params.hpp>
#include <stformer/rng.hpp>

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

// Heap-allocated, so that tests can hold large blocks and activations.
template <class T>
std::unique_ptr<T> make() {
  return std::make_unique<T>();
}

}  // namespace test
