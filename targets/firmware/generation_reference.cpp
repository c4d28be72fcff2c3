// generation_reference OUT [GPT.safetensors GPT_INT8.safetensors]: the host's side of the
// firmware's generation (mps2/generation.cpp). Built with the plain C++ kernels
// (-Dsimd=none) and libm.cpp's elementary functions, so that the Cortex-M cores compute its
// floats bit for bit (its integers are the same on every backend):
//   stories  llama2.c's model at stories260K's shape (tasks/llama_models.hpp) initialised with
//            seed 0 (random weights: its trained checkpoint is not part of this repository),
//            calibrated on 4 × 64 random token ids, quantized, generating greedily from token 1
//            (BOS) through its int8 cache of 256 positions
//   gpt      wikitext_lm's GPT over bytes (tasks/byte_gpt.hpp): the checkpoints given (wikitext_lm
//            train --model gpt, and its quantize), else initialised with seed 0 and quantized on
//            64 windows of random printable bytes; continuing "The game" greedily, in float
//            through a cache of 64 positions and in int8 through one of 128
//   m0       the same form at a Cortex-M0's size (StoriesM0), seed 0, in int8 through a cache
//            of 64 positions, its integer logits alone (DecodeOf::step_through: no float end)
// Writes to OUT
//   qstories.safetensors, gpt.safetensors, gpt_q.safetensors, qm0.safetensors   the models
//            (their images for flash: stformer-c-api --image)
//   stories_expected.safetensors, gpt_expected.safetensors, m0_expected.safetensors   for each
//            run, tokens I32 [P]: the token stepped at each position (the prompt's, then each
//            the argmax of the logits before it, the smallest id on a tie), and logits_hash I32
//            [P]: FNV-1a of the bytes of each step's logits (generation.hpp); the GPT's as
//            float_… and int8_…
// Exit codes: 0 written; 1 a problem reading or writing; 2 a bad command line.
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <stformer/compose/decode.hpp>
#include <stformer/core/rng.hpp>
#include <stformer/io/checkpoint.hpp>
#include <stformer/io/safetensors.hpp>
#include <stformer/quantized/checkpoint.hpp>
#include <stformer/quantized/quantize.hpp>

#include "byte_gpt.hpp"
#include "generation.hpp"
#include "llama_models.hpp"

using namespace stformer;

namespace {

// Model m stepped through P positions from the prompt's ids: each step's token and logits' hash;
// the logits of its steps 0 .. Last − 1 (all of them by default).
template <size_t P, class M, size_t Last = M::steps>
void steps(const M& m, const std::vector<std::int32_t>& prompt, size_t V, std::int32_t* tokens, std::int32_t* hashes) {
  auto dec = std::make_unique<DecodeOf<M, 1, P>>();
  IdTensor<1, 1> one;
  one(0, 0) = prompt[0];
  for (size_t t = 0; t < P; ++t) {
    tokens[t] = one(0, 0);
    const auto& y = *dec->template step_through<Last>(m, one);
    hashes[t] = std::int32_t(generation::fnv1a(y.data(), V));
    one(0, 0) = t + 1 < prompt.size() ? prompt[t + 1] : std::int32_t(generation::greedy(y.data(), V));
  }
}

void add(safetensors::Writer& w, const std::string& name, const std::int32_t* v, size_t n) {
  w.add(name, safetensors::Dtype::I32, {n}, std::as_bytes(std::span(v, n)));
}

// The model of type M calibrated on `windows`, quantized.
template <class M, size_t C, size_t N>
std::unique_ptr<Quantized<M>> calibrated(const M& m, const std::vector<IdTensor<C, N>>& windows) {
  auto calibration = std::make_unique<Calibration<M, C, N>>(m);
  for (const auto& ids : windows) calibration->observe(ids, Mask<C, N>{.causal = true});
  return calibration->quantize();
}

// A llama-form model M initialised with seed 0, calibrated on 4 × 64 random ids, quantized
// (OUT/<image>.safetensors), stepped greedily from token 1 through P positions
// (OUT/<name>_expected.safetensors); integers: its integer logits, before the float end.
template <class M, size_t P, size_t V, bool integers>
void llama_run(const std::filesystem::path& out, const char* name, const char* image) {
  auto model = std::make_unique<M>();
  Rng rng(0, 0);
  init_params(*model, rng);
  std::vector<IdTensor<4, 64>> windows(4);
  for (auto& ids : windows)
    for (auto& id : ids) id = std::int32_t(rng.below(V));
  const auto q = calibrated(*model, windows);
  save_params(out / (std::string(image) + ".safetensors"), *q);
  std::vector<std::int32_t> tokens(P), hashes(P);
  using Q = Quantized<M>;
  steps<P, Q, integers ? Q::steps - 1 : Q::steps>(*q, {1}, V, tokens.data(), hashes.data());
  safetensors::Writer w;
  add(w, "tokens", tokens.data(), P), add(w, "logits_hash", hashes.data(), P);
  w.write(out / (std::string(name) + "_expected.safetensors"));
  std::printf("%s: %zu tokens from token 1 by the int8 model%s, first", name, P, integers ? "'s integer logits" : "");
  for (size_t t = 0; t < 12; ++t) std::printf(" %d", int(tokens[t]));
  std::printf(" ...\n");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2 && argc != 4) {
    std::fprintf(stderr, "usage: generation_reference OUT [GPT.safetensors GPT_INT8.safetensors]\n");
    return 2;
  }
  try {
    const std::filesystem::path out(argv[1]);
    llama_run<stories::Stories260K, generation::stories_positions, 512, false>(out, "stories", "qstories");
    llama_run<stories::StoriesM0, generation::m0_positions, 128, true>(out, "m0", "qm0");
    {  // gpt
      using lm::WikiGpt;
      constexpr size_t PF = generation::gpt_float_positions, PQ = generation::gpt_int8_positions, V = 256;
      auto model = std::make_unique<WikiGpt>();
      auto q = std::make_unique<Quantized<WikiGpt>>();
      if (argc == 4) {
        load_params(safetensors::File::read(argv[2]), *model, "", Unexpected::ignore);  // (a training checkpoint's optimiser beside it)
        load_quantized(safetensors::File::read(argv[3]), *q);
      } else {
        Rng rng(0, 0);
        init_params(*model, rng);
        std::vector<IdTensor<16, 128>> windows(4);
        for (auto& ids : windows)
          for (auto& id : ids) id = std::int32_t(32 + rng.below(95));
        q = calibrated(*model, windows);
      }
      save_params(out / "gpt.safetensors", *model);
      save_params(out / "gpt_q.safetensors", *q);
      const std::string text = generation::gpt_prompt;
      const std::vector<std::int32_t> prompt(text.begin(), text.end());
      std::vector<std::int32_t> ft(PF), fh(PF), qt(PQ), qh(PQ);
      steps<PF>(*model, prompt, V, ft.data(), fh.data());
      steps<PQ>(*q, prompt, V, qt.data(), qh.data());
      safetensors::Writer w;
      add(w, "float_tokens", ft.data(), PF), add(w, "float_hash", fh.data(), PF);
      add(w, "int8_tokens", qt.data(), PQ), add(w, "int8_hash", qh.data(), PQ);
      w.write(out / "gpt_expected.safetensors");
      const auto said = [](const std::vector<std::int32_t>& t) {
        std::string s;
        for (std::int32_t c : t) s += c >= 32 && c < 127 ? char(c) : c == '\n' ? '|' : '?';
        return s;
      };
      std::printf("gpt (%s): float \"%s\"\n     int8 \"%s\"\n", argc == 4 ? argv[2] : "seed 0", said(ft).c_str(), said(qt).c_str());
    }
    std::printf("written to %s\n", out.c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "generation_reference: %s\n", e.what());
    return 1;
  }
}
