// The exporter's round trip: tests/torch/make_export.py built models from PyTorch's own
// modules and exported each with python/stformer_export.py (a header declaring its type, its
// state_dict, an example input and PyTorch's eval-mode output). Here each header is included as
// it was written and run (tests/torch/round_trip.hpp). The trained
// classifier (trained by PyTorch at build time) is then quantized and its int8 accuracy held to
// within 1 point of the float model's.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <span>
#include <string>

#include <stformer/io/checkpoint.hpp>
#include <stformer/quantized/quantize.hpp>
#include <stformer/io/safetensors.hpp>
#include <stformer/stformer.hpp>

#include "classifier.hpp"
#include "decoder.hpp"
#include "decoder_layer.hpp"
#include "encoder.hpp"
#include "listed.hpp"
#include "tagger.hpp"
#include "tokens.hpp"
#include "trained.hpp"
#include "torch/round_trip.hpp"

using namespace stformer;

using test::exported, test::memory_round_trip, test::round_trip;

TEST_CASE("stformer_export round trip: nn.TransformerDecoder (2 post-norm GELU layers, a final norm) and a lone pre-norm nn.TransformerDecoderLayer, two inputs") {
  memory_round_trip<decoder, 2, 6, 9>("decoder");
  memory_round_trip<decoder_layer, 2, 6, 9>("decoder_layer");
}

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
  // Its file into the same layers post-norm (the same tensors, another function) is refused, naming both.
  using PostNormed = Sequential<Named<"layers", Repeat<EncoderBlock<16, 4, 48, PostNorm<act::GELU>>, 2>>>;
  auto other = std::make_unique<PostNormed>();
  const auto path = exported("encoder") + ".safetensors";
  const std::string both = "another model than this one:\n    the file's:  " + declaration<encoder>() + "\n    the model's: " + declaration<PostNormed>();
  CHECK_THROWS_WITH_AS(load_params(path, *other), doctest::Contains(both.c_str()), std::runtime_error);
}

TEST_CASE("stformer_export: the classifier trained by PyTorch predicts as PyTorch does, and quantized within 1 point of its accuracy") {
  constexpr size_t Tests = 500, Calibrations = 128, B = 8;
  auto model = std::make_unique<trained>();
  load_params(exported("trained.safetensors"), *model);
  const auto data = safetensors::File::read(exported("trained.data.safetensors"));
  auto test_x = std::make_unique<Tensor<Tests, 32, 8>>();
  auto calibration_x = std::make_unique<Tensor<Calibrations / B, B, 32, 8>>();
  auto logits = std::make_unique<Tensor<Tests, 5>>();
  TensorOf<std::int32_t, Tests> labels, predictions;
  test::read(data, "test", *test_x);
  test::read(data, "calibration", *calibration_x);
  test::read(data, "logits", *logits);
  test::read(data, "labels", labels);
  test::read(data, "predictions", predictions);

  auto calibration = std::make_unique<Calibration<trained, B, 32>>(*model);
  for (size_t i = 0; i < Calibrations / B; ++i) {
    Tensor<B, 32, 8> x;
    std::copy_n(calibration_x->data() + i * x.size(), x.size(), x.data());
    calibration->observe(x);
  }
  const auto q = calibration->quantize();
  auto fi = std::make_unique<InferOf<trained, 1, 32>>();
  auto qi = std::make_unique<InferOf<Quantized<trained>, 1, 32>>();
  size_t same = 0, right_f = 0, right_q = 0;
  double worst = 0, scale = 0;
  for (size_t t = 0; t < Tests; ++t) {
    Tensor<1, 32, 8> x;
    std::copy_n(test_x->data() + t * x.size(), x.size(), x.data());
    const auto argmax = [](const Tensor<1, 1, 5>& y) { return std::int32_t(std::max_element(y.begin(), y.end()) - y.begin()); };
    const Tensor<1, 1, 5> yf = fi->forward(*model, x);
    for (size_t c = 0; c < 5; ++c) worst = std::max(worst, double(std::abs(yf(0, 0, c) - (*logits)(t, c)))), scale = std::max(scale, double(std::abs((*logits)(t, c))));
    same += argmax(yf) == predictions(t);
    right_f += argmax(yf) == labels(t);
    right_q += argmax(qi->forward(*q, x)) == labels(t);
  }
  const double acc_f = double(right_f) / Tests, acc_q = double(right_q) / Tests;
  MESSAGE("trained classifier, " << Tests << " test sequences: stformer's float predictions equal PyTorch's for " << same << ", logits within "
                                 << worst / scale << " relative; accuracy float " << acc_f << ", int8 " << acc_q << "; plans: float "
                                 << sizeof(InferOf<trained, 1, 32>) << " B, int8 " << sizeof(InferOf<Quantized<trained>, 1, 32>) << " B");
  CHECK(same == Tests);
  CHECK(worst <= 1e-5 * scale);
  CHECK(acc_f > 0.9);
  CHECK(std::abs(acc_f - acc_q) <= 0.01);

  // For the firmware (targets/firmware/make-headers.sh): the integer model, and S test sequences
  // with the host's float logits, their quantized rows and the integer steps' int16 outputs.
  using Q = Quantized<trained>;
  constexpr size_t S = 8, Last = Q::steps - 1;  // the integer steps: 1 .. Last − 1
  save_params(exported("trained_int8.safetensors"), *q);
  TensorOf<std::int16_t, S, 32, 8> x_q;
  TensorOf<std::int16_t, S, 5> out_q;
  Tensor<S, 5> host_logits;
  for (size_t t = 0; t < S; ++t) {
    Tensor<1, 32, 8> x;
    std::copy_n(test_x->data() + t * x.size(), x.size(), x.data());
    const auto& xq = qi->forward_steps<0, 1>(*q, x);
    std::copy(xq.begin(), xq.end(), x_q.data() + t * xq.size());
    std::copy(xq.begin(), xq.end(), qi->input<1>().begin());
    const auto& yq = qi->forward_steps<1, Last>(*q);
    std::copy(yq.begin(), yq.end(), out_q.data() + t * 5);
    const auto& yf = fi->forward(*model, x);
    std::copy(yf.begin(), yf.end(), host_logits.data() + t * 5);
  }
  safetensors::Writer w;
  w.add("x", safetensors::Dtype::F32, {S, 32, 8}, std::as_bytes(std::span(test_x->data(), S * 32 * 8)));
  w.add("x_q", safetensors::Dtype::I16, {S, 32, 8}, std::as_bytes(std::span(x_q.data(), x_q.size())));
  w.add("out_q", safetensors::Dtype::I16, {S, 5}, std::as_bytes(std::span(out_q.data(), out_q.size())));
  w.add("logits", safetensors::Dtype::F32, {S, 5}, std::as_bytes(std::span(host_logits.data(), host_logits.size())));
  w.write(exported("trained_firmware.safetensors"));
}
