// A program of another project that uses an installed (or subproject) stformer: it loads
// SPEC's pointer model from a checkpoint, runs it forward only on the sets of a `max_value
// sets` file, and checks every log-probability against a `max_value predict` file made by
// stformer's own build. Exit 0 when all agree.
//   consumer POINTER.safetensors SETS.safetensors EXPECTED.safetensors
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <memory>

#include <stformer/io/checkpoint.hpp>
#include <stformer/io/safetensors.hpp>
#include <stformer/stformer.hpp>

using Model = stformer::PointerModel<2, 16, 1, 64, 2>;  // SPEC's `pointer` configuration
constexpr size_t N = 50;

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: consumer POINTER.safetensors SETS.safetensors EXPECTED.safetensors\n");
    return 2;
  }
  try {
    auto model = std::make_unique<Model>();
    stformer::load_params(argv[1], *model);
    const auto sets = stformer::safetensors::File::read(argv[2]);
    const auto expected = stformer::safetensors::File::read(argv[3]);
    const auto* x = sets.find("x");
    const auto* want = expected.find("log_probs");
    if (!x || !want || x->shape.size() != 3 || x->shape[1] != N || x->shape[2] != 2 || want->shape != std::vector<size_t>{x->shape[0], N}) {
      std::fprintf(stderr, "consumer: expected x [S, 50, 2] and log_probs [S, 50]\n");
      return 1;
    }
    const size_t S = x->shape[0];
    auto infer = std::make_unique<stformer::InferOf<Model, 1, N>>();
    stformer::Tensor<1, N, 2> set;
    size_t bad = 0;
    double worst = 0;
    for (size_t s = 0; s < S; ++s) {
      std::memcpy(set.data(), x->bytes.data() + s * N * 2 * sizeof(float), N * 2 * sizeof(float));
      const auto& got = infer->forward(*model, set);
      for (size_t j = 0; j < N; ++j) {
        float w;
        std::memcpy(&w, want->bytes.data() + (s * N + j) * sizeof(float), sizeof w);
        const double d = std::abs(double(got(0, 0, j)) - w);
        worst = std::max(worst, d);
        bad += !(d <= 1e-5 + 1e-5 * std::abs(w));
      }
    }
    std::printf("%zu sets, %zu log-probabilities off, largest difference %.3g; model %zu B, workspace %zu B\n", S, bad, worst, sizeof *model,
                sizeof *infer);
    return bad == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "consumer: %s\n", e.what());
    return 1;
  }
}
