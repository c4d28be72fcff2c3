// A model of your own, trained, saved, loaded and evaluated: a set classifier that counts the
// clusters in a set of 2-D points (1, 2 or 3), built from stformer's blocks:
//   x [B, N, 2] -> proj = Linear<2, D> -> sab = SAB<D, H> -> pool = PMA<D, H, 1> -> head = Linear<D, 3>
// trained with cross-entropy and Adam (each batch of 64 sets in chunks of 16 over two lanes, on
// two threads), saved as a safetensors checkpoint, loaded into a fresh model and evaluated
// forward only on fresh sets. docs/own-model.md walks through it.
//
//   set_classifier [--steps S] [--checkpoint PATH]   (defaults: 400 steps, set_classifier.safetensors)
//
// Exit 0 when the loaded model predicts exactly as the trained one and its accuracy on fresh
// sets is at least 0.6 (chance: 1/3); 1 otherwise.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <array>
#include <memory>
#include <string>

#include <stformer/io/checkpoint.hpp>
#include <stformer/stformer.hpp>
#include <stformer/train/parallel.hpp>

using namespace stformer;

// The model, declared once: its parameters' names (proj.weight, sab.mab.attn.wq.weight, ...),
// its training activations (forward and backward) and its forward-only pass with its memory
// plan all follow from this line (stformer/compose/sequential.hpp).
template <size_t D, size_t H, size_t Classes>
using SetClassifier = Sequential<Named<"proj", Linear<2, D>>, Named<"sab", SAB<D, H>>, Named<"pool", PMA<D, H, 1>>, Named<"head", Linear<D, Classes>>>;

constexpr size_t N = 20, B = 64, Classes = 3, Chunk = 16, Lanes = 2;
using Model = SetClassifier<32, 4, Classes>;

// What one lane needs for a chunk of the batch: its own gradient and loss (chunked_gradient
// sums them), activations, and the chunk's sets and output gradient.
struct Lane {
  Model grad;
  double loss;
  ActsOf<Model, Chunk, N> acts;
  Tensor<Chunk, N, 2> x;
  IdTensor<Chunk> k;
  Tensor<Chunk, 1, Classes> dlogits;
};

// A batch of sets: each has k = 1, 2 or 3 clusters (the class k − 1) with centres uniform in
// [−4, 4]², points around a centre chosen at random, standard deviation 0.3.
void make_sets(Rng& rng, Tensor<B, N, 2>& x, IdTensor<B>& k) {
  for (size_t b = 0; b < B; ++b) {
    const size_t clusters = 1 + rng.below(3);
    float centre[3][2];
    for (auto& c : centre) c[0] = 8 * rng.uniform() - 4, c[1] = 8 * rng.uniform() - 4;
    for (size_t i = 0; i < N; ++i) {
      const size_t c = i < clusters ? i : rng.below(uint32_t(clusters));  // every cluster has a point
      x(b, i, 0) = centre[c][0] + 0.3f * rng.normal();
      x(b, i, 1) = centre[c][1] + 0.3f * rng.normal();
    }
    k(b) = std::int32_t(clusters - 1);
  }
}

int main(int argc, char** argv) {
  long steps = 400;
  std::string path = "set_classifier.safetensors";
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--steps") == 0) steps = std::stol(argv[i + 1]);
    else if (std::strcmp(argv[i], "--checkpoint") == 0) path = argv[i + 1];
  }
  if (argc % 2 == 0 || steps < 1) {
    std::fprintf(stderr, "usage: set_classifier [--steps S] [--checkpoint PATH]\n");
    return 2;
  }

  // Large objects on the heap, allocated once: the model, the optimiser's state (two more
  // models) and two lanes, each with a gradient and the activations of a chunk of 16 sets.
  auto model = std::make_unique<Model>();
  auto opt = std::make_unique<Adam<Model>>();
  auto lanes = std::make_unique<std::array<Lane, Lanes>>();
  ThreadPool pool(2);  // any number of threads gives the same bits (the arithmetic depends on Lanes)
  Rng rng(1);
  init_params(*model, rng);  // SPEC's initialisation for every block (xavier, kaiming, g = sqrt(D) ...)
  Tensor<B, N, 2> x;
  IdTensor<B> k;
  Schedule lr{Schedule::warmup_cosine, 3e-3f, steps, steps / 10};
  for (long s = 0; s < steps; ++s) {
    make_sets(rng, x, k);
    // chunk c of the batch in a lane: forward, the loss over the whole batch's B rows, backward
    const double loss = chunked_gradient(*lanes, B / Chunk, pool, [&](Lane& lane, size_t c) {
      std::copy_n(x.data() + c * Chunk * N * 2, Chunk * N * 2, lane.x.data());
      std::copy_n(k.data() + c * Chunk, Chunk, lane.k.data());
      const float chunk_loss = cross_entropy(lane.acts.forward(*model, lane.x), lane.k, lane.dlogits, B);
      lane.acts.backward(*model, lane.grad, lane.dlogits);
      return chunk_loss;
    });
    Model& grad = (*lanes)[0].grad;  // the batch's gradient
    clip_grad_norm(grad, 1.0f);
    opt->step(*model, grad, lr(s));
    if ((s + 1) % 100 == 0 || s + 1 == steps) std::printf("step %4ld  loss %.4f\n", s + 1, loss);
  }

  save_params(path, *model);  // one F32 tensor per parameter, under the visit's names
  auto loaded = std::make_unique<Model>();
  load_params(path, *loaded);  // checks every name and shape first

  // Fresh sets, forward only, through the trained and the loaded model.
  auto a = std::make_unique<InferOf<Model, B, N>>(), b = std::make_unique<InferOf<Model, B, N>>();
  Rng fresh(2);
  double acc = 0;
  bool same = true;
  constexpr int batches = 16;
  for (int i = 0; i < batches; ++i) {
    make_sets(fresh, x, k);
    const auto& y = a->forward(*loaded, x);
    same = same && std::memcmp(y.data(), b->forward(*model, x).data(), sizeof y) == 0;
    acc += accuracy(y, k) / batches;
  }
  std::printf("accuracy on %d fresh sets: %.3f (chance 0.333); loaded model %s the trained one; model %zu B, workspace %zu B\n",
              batches * int(B), acc, same ? "predicts as" : "DIFFERS FROM", sizeof(Model), sizeof(InferOf<Model, B, N>));
  return same && acc >= 0.6 ? 0 : 1;
}
