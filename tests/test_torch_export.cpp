// The exporter's round trip: tests/torch/make_export.py built five models from PyTorch's own
// modules and exported each with python/stformer_export.py (a header declaring its type, its
// state_dict, an example input and PyTorch's eval-mode output). Here each header is included as
// it was written, its file loaded by PyTorch's names, and InferOf's output compared with
// PyTorch's to 1e-5 relative (to the output's largest entry); training's forward (ActsOf) gives
// the same bits. The files are in STFORMER_EXPORT_DIR, where the build wrote them.
#include <doctest/doctest.h>

#include <cstdlib>
#include <memory>
#include <string>

#include <stformer/checkpoint.hpp>
#include <stformer/safetensors.hpp>
#include <stformer/stformer.hpp>

#include "classifier.hpp"
#include "encoder.hpp"
#include "listed.hpp"
#include "tagger.hpp"
#include "tokens.hpp"
#include "torch/compare.hpp"

using namespace stformer;

namespace {

template <class M, size_t B, size_t N>
void round_trip(const char* name) {
  const char* dir = std::getenv("STFORMER_EXPORT_DIR");
  REQUIRE_MESSAGE(dir != nullptr, "STFORMER_EXPORT_DIR is not set (run through meson test)");
  const std::string base = std::string(dir) + "/" + name;
  auto model = std::make_unique<M>();
  load_params(base + ".safetensors", *model);
  const auto example = safetensors::File::read(base + ".example.safetensors");
  typename M::template Input<B, N> x;
  typename M::template Output<B, N> want;
  test::read(example, "input", x);
  test::read(example, "output", want);
  auto pass = std::make_unique<InferOf<M, B, N>>();
  const auto& y = pass->forward(*model, x);
  test::worst = 0;
  test::check_rel(name, y, want, 1e-5);
  MESSAGE(std::string(name) << ": InferOf against PyTorch, largest relative difference " << test::worst << "; arena " << sizeof(InferOf<M, B, N>) << " B");
  auto acts = std::make_unique<ActsOf<M, B, N>>();
  CHECK(acts->forward(*model, x) == y);
}

}  // namespace

TEST_CASE("stformer_export round trip: the classifier (Linear, PositionEmbedding, nn.TransformerEncoder of 2 post-norm GELU layers, MeanPool, Linear)") {
  round_trip<classifier, 1, 32>("classifier");
}
TEST_CASE("stformer_export round trip: ClassToken, a pre-norm layer in a nested Sequential with Dropout, a SiLU encoder with its final norm, FirstToken, a head without bias") {
  round_trip<tagger, 2, 7>("tagger");
}
TEST_CASE("stformer_export round trip: token ids through nn.Embedding, PositionEmbedding, an encoder layer, LayerNorm and the logits") {
  round_trip<tokens, 3, 12>("tokens");
}
TEST_CASE("stformer_export round trip: an nn.ModuleList of Linear, GELU (tanh), SiLU, Identity, LayerNorm, ReLU, GELU") {
  round_trip<listed, 2, 5>("listed");
}
TEST_CASE("stformer_export round trip: nn.TransformerEncoder itself (2 pre-norm GELU layers), names layers.0...") {
  round_trip<encoder, 2, 5>("encoder");
}
