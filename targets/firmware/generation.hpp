// What the firmware's generation (mps2/generation.cpp) and its host reference
// (generation_reference.cpp) share: the cache's positions, the greedy choice and the hash of a
// step's logits.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace generation {

// The positions of each run: llama2.c's stories260K shape in int8 (stories), the byte GPT in
// float (a cache the STM32F405's 128 KB of RAM holds) and in int8 (its whole context),
// StoriesM0 (the Cortex-M0's) in int8.
constexpr std::size_t stories_positions = 256, gpt_float_positions = 64, gpt_int8_positions = 128, m0_positions = 64;

// The prompt the byte GPT continues.
constexpr char gpt_prompt[] = "The game";

// The largest logit's id (the smallest id on a tie); float logits, or a quantized model's integers.
template <class T>
std::size_t greedy(const T* logits, std::size_t n) {
  std::size_t best = 0;
  for (std::size_t i = 1; i < n; ++i)
    if (logits[i] > logits[best]) best = i;
  return best;
}

// FNV-1a (32 bits) of the bytes of n logits (float, or a quantized model's integers): two runs'
// the same bits or not.
template <class T>
std::uint32_t fnv1a(const T* x, std::size_t n) {
  std::uint32_t h = 2166136261u;
  for (std::size_t i = 0; i < n; ++i) {
    unsigned char b[sizeof(T)];
    std::memcpy(b, x + i, sizeof(T));
    for (unsigned char c : b) h = (h ^ c) * 16777619u;
  }
  return h;
}

}  // namespace generation
