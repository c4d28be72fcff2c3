// stformer demo: a Set Transformer (SPEC's `set` model: Linear -> ISAB -> PMA -> Linear) and
// an encoder block, run forward only (Infer) on a built-in input, with their outputs, the time
// of one forward pass and the bytes that the model and its workspace occupy (compile-time
// sizes; a training pass's activations for comparison).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string_view>
#include <vector>

#include <stformer/stformer.hpp>

using namespace stformer;

namespace {

// Median time of one call of f, in microseconds.
template <class F>
double median_us(F&& f, int repeats = 201) {
  std::vector<double> t(repeats);
  for (auto& x : t) {
    auto t0 = std::chrono::steady_clock::now();
    f();
    x = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
  }
  std::nth_element(t.begin(), t.begin() + repeats / 2, t.end());
  return t[repeats / 2];
}

constexpr const char* backend = STFORMER_SIMD ? "xsimd" : "plain C++";

// Model and workspace live in static storage: nothing on the heap, sizes known at link time.
constexpr size_t N = 50, D = 64, H = 4, M = 16;
using Set = SetTransformer<2, D, H, M, 2>;
Set set;
InferOf<Set, 1, N> set_infer;
Tensor<1, N, 2> points;

using Encoder = EncoderBlock<D, H, 4 * D>;
constexpr size_t T = 16;
Encoder encoder;
InferOf<Encoder, 1, T> encoder_infer;
Tensor<1, T, D> tokens;

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && (std::string_view(argv[1]) == "--help" || std::string_view(argv[1]) == "-h")) {
    std::printf("usage: %s\nRuns SPEC's set model and an encoder block forward only on built-in inputs (untrained weights from\n"
                "seed 0) and prints their outputs, times and memory. Exit codes: 0 done; 2 a bad command line.\n", argv[0]);
    return 0;
  }
  if (argc > 1) {
    std::fprintf(stderr, "%s: takes no arguments (got '%s'); it runs the built-in example (--help says more)\n", argv[0], argv[1]);
    return 2;
  }
  Rng rng(0);
  init_params(set, rng);
  init_params(encoder, rng);

  // Built-in input: 50 points x = randn(50, 2) + randn(1, 2) (SPEC Example 1), seed 0.
  float shift[2] = {rng.normal(), rng.normal()};
  for (size_t i = 0; i < N; ++i)
    for (size_t c = 0; c < 2; ++c) points(0, i, c) = rng.normal() + shift[c];
  for (auto& x : tokens) x = rng.normal();

  std::printf("stformer demo (%s kernels, untrained weights from seed 0)\n\n", backend);

  const auto& y = set_infer.forward(set, points);
  std::printf("Set Transformer  Linear<2,%zu> -> ISAB<%zu,%zu,%zu> -> PMA<%zu,%zu,1> -> Linear<%zu,2>\n", D, D, H, M, D, H, D);
  std::printf("  input   %zu points in 2-D, first (%.4f, %.4f)\n", N, points(0, 0, 0), points(0, 0, 1));
  std::printf("  output  y = (%.6f, %.6f)\n", y(0, 0, 0), y(0, 0, 1));
  std::printf("  forward %.1f us (median of 201)\n", median_us([] { set_infer.forward(set, points); }));
  std::printf("  model   %zu parameters, %zu bytes; workspace %zu bytes (training activations: %zu)\n\n", param_count(set), sizeof(Set),
              sizeof(set_infer), sizeof(ActsOf<Set, 1, N>));

  const auto& e = encoder_infer.forward(encoder, tokens, Mask<1, T>{.causal = true});
  std::printf("EncoderBlock<%zu,%zu,%zu>, %zu tokens, causal\n", D, H, 4 * D, T);
  std::printf("  output  row 0: %.6f %.6f %.6f ...  row %zu: %.6f %.6f %.6f ...\n", e(0, 0, 0), e(0, 0, 1), e(0, 0, 2), T - 1,
              e(0, T - 1, 0), e(0, T - 1, 1), e(0, T - 1, 2));
  std::printf("  forward %.1f us (median of 201)\n",
              median_us([] { encoder_infer.forward(encoder, tokens, Mask<1, T>{.causal = true}); }));
  std::printf("  model   %zu parameters, %zu bytes; workspace %zu bytes (training activations: %zu)\n", param_count(encoder), sizeof(Encoder),
              sizeof(encoder_infer), sizeof(ActsOf<Encoder, 1, T>));
  return 0;
}
