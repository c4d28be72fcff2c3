// stformer — the library's one random generator: PCG32 (O'Neill 2014, XSH-RR output), with
// normal deviates by the Box–Muller transform (one deviate per pair of uniforms, so the
// state is the generator's 128 bits and nothing else). Same seed => same numbers on every
// platform and build.
#pragma once

#include "config.hpp"

#include <cmath>
#include <cstdint>

namespace stformer::inline STFORMER_ABI {

class Rng {
 public:
  constexpr Rng() { reseed(0); }
  constexpr explicit Rng(std::uint64_t seed, std::uint64_t stream = 54) { reseed(seed, stream); }

  constexpr void reseed(std::uint64_t seed, std::uint64_t stream = 54) {
    state_ = 0;
    inc_ = (stream << 1u) | 1u;
    next_u32();
    state_ += seed;
    next_u32();
  }

  constexpr std::uint32_t next_u32() {
    std::uint64_t old = state_;
    state_ = old * 6364136223846793005ULL + inc_;
    auto xorshifted = static_cast<std::uint32_t>(((old >> 18u) ^ old) >> 27u);
    auto rot = static_cast<std::uint32_t>(old >> 59u);
    return (xorshifted >> rot) | (xorshifted << ((32u - rot) & 31u));
  }

  // Uniform in [0, 1) with 24 random bits.
  float uniform() { return static_cast<float>(next_u32() >> 8) * 0x1p-24f; }

  // Uniform integer in [0, n), unbiased (Lemire's rejection).
  std::uint32_t below(std::uint32_t n) {
    std::uint64_t m = std::uint64_t(next_u32()) * n;
    auto low = static_cast<std::uint32_t>(m);
    if (low < n) {
      std::uint32_t t = (0u - n) % n;
      while (low < t) {
        m = std::uint64_t(next_u32()) * n;
        low = static_cast<std::uint32_t>(m);
      }
    }
    return static_cast<std::uint32_t>(m >> 32);
  }

  // Standard normal deviate (Box–Muller, computed in double).
  float normal() {
    double u1 = (double(next_u32() >> 8) + 1.0) * 0x1p-24;  // (0, 1]
    double u2 = double(next_u32() >> 8) * 0x1p-24;          // [0, 1)
    return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
  }

  // The whole state, for checkpoints.
  std::uint64_t state() const { return state_; }
  std::uint64_t increment() const { return inc_; }
  void restore(std::uint64_t state, std::uint64_t increment) {
    state_ = state;
    inc_ = increment;
  }

 private:
  std::uint64_t state_ = 0, inc_ = 0;
};

}  // namespace stformer
