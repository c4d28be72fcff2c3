// stories_reference OUT: the host's side of the firmware's generation (mps2/stories.cpp).
// llama2.c's model at stories260K's shape (tasks/llama_models.hpp) initialised with seed 0 (random
// weights: its trained checkpoint is not part of this repository), calibrated on 4 × 64 random
// token ids and quantized; then generation from token 1 (BOS) through the integer model's cache
// (DecodeOf<Quantized<Stories260K>, 1, Positions>), greedy, for every position of the cache.
// Writes
//   OUT/qstories.safetensors          the int8 model (its image for flash: stformer-c-api --image)
//   OUT/stories_expected.safetensors  tokens I32 [Positions]: the token stepped at each position
//                                     (1, then each the argmax of the logits before it, the
//                                     smallest id on a tie); logits_hash I32 [Positions]: FNV-1a
//                                     of the bytes of each step's logits (float [512])
// The integers are the same on every backend, so any build's program writes the same files.
// Exit codes: 0 written; 1 a problem writing; 2 a bad command line.
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <memory>

#include <stformer/compose/decode.hpp>
#include <stformer/core/rng.hpp>
#include <stformer/io/checkpoint.hpp>
#include <stformer/io/safetensors.hpp>
#include <stformer/quantized/quantize.hpp>

#include "llama_models.hpp"
#include "stories.hpp"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: stories_reference OUT\n");
    return 2;
  }
  using namespace stformer;
  using stories::Stories260K;
  try {
    const std::filesystem::path out(argv[1]);
    constexpr size_t B = 4, N = 64, V = 512;
    auto model = std::make_unique<Stories260K>();
    Rng rng(0, 0);
    init_params(*model, rng);
    auto calibration = std::make_unique<Calibration<Stories260K, B, N>>(*model);
    IdTensor<B, N> ids;
    for (int i = 0; i < 4; ++i) {
      for (auto& id : ids) id = std::int32_t(rng.below(V));
      calibration->observe(ids, Mask<B, N>{.causal = true});
    }
    const auto q = calibration->quantize();
    save_params(out / "qstories.safetensors", *q);

    using Q = Quantized<Stories260K>;
    constexpr size_t P = stories::positions;
    auto dec = std::make_unique<DecodeOf<Q, 1, P>>();
    std::int32_t tokens[P], hashes[P];
    IdTensor<1, 1> one;
    one(0, 0) = 1;
    for (size_t t = 0; t < P; ++t) {
      tokens[t] = one(0, 0);
      const auto& y = *dec->step(*q, one);
      hashes[t] = std::int32_t(stories::fnv1a(y.data(), V));
      one(0, 0) = std::int32_t(stories::greedy(y.data(), V));
    }
    safetensors::Writer w;
    w.add("tokens", safetensors::Dtype::I32, {P}, std::as_bytes(std::span(tokens, P)));
    w.add("logits_hash", safetensors::Dtype::I32, {P}, std::as_bytes(std::span(hashes, P)));
    w.write(out / "stories_expected.safetensors");
    std::printf("stories_reference: %zu tokens generated from token 1 by the int8 model, first", P);
    for (size_t t = 0; t < 16; ++t) std::printf(" %d", int(tokens[t]));
    std::printf(" ...; written to %s\n", out.c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "stories_reference: %s\n", e.what());
    return 1;
  }
}
