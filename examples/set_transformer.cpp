// A Set Transformer (SPEC's `set` model) run forward only on one set of 50 points.
#include <cstdio>

#include <stformer/stformer.hpp>
using namespace stformer;

using Model = SetTransformer<2, 64, 4, 16, 2>;  // In, D, H, M, Out
static Model model;                              // the parameters
static InferOf<Model, 1, 50> infer;              // everything one forward pass needs

int main() {
  Rng rng(0);
  init_params(model, rng);  // SPEC's initialisation from one seeded generator
  Tensor<1, 50, 2> x;
  for (auto& v : x) v = rng.normal();
  const Tensor<1, 1, 2>& y = infer.forward(model, x);  // valid until the next call
  std::printf("y = (%f, %f); model %zu B, workspace %zu B\n", y(0, 0, 0), y(0, 0, 1), sizeof model, sizeof infer);
}
