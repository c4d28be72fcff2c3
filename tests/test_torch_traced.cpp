// The exporter's tracing: tests/torch/make_traced.py exported models with a forward of their own
// (tests/torch/traced_models.py): a timm-style ViT with a class token, learned positions and
// LayerScale; a BERT-style encoder with separate query, key and value and LayerNorm eps 1e-12; a
// nanoGPT-style causal language model with tied embeddings; nn.MultiheadAttention with a causal
// mask, a SwiGLU layer and GPT-J's parallel block; nn.TransformerEncoder called with a causal
// mask, whose head reads the last row; a llama-style model with RMSNorm written out, bias-free
// attention and SwiGLU; the PyTorch tutorial's language model (sequence-first, sinusoidal
// positions in a buffer, the embedding scaled by sqrt(D), the causal src_mask an input of its
// forward); torchvision's VisionTransformer as it is (a Conv2d patch embedding on an image); the
// Keyword Transformer KWT-1 as its paper gives it (98 MFCC frames of 40, D 64, 12 post-norm
// layers, 1 head); two exported with key_padding=True: BERT taking its attention_mask (and its
// tanh pooler), and a model giving PyTorch's key_padding_mask to nn.MultiheadAttention,
// masked_fill and nn.TransformerEncoder, each run with the example's key mask; a decoder's stack
// over an encoder's output, its cross-attention written out (the memory through its own norm) and
// nn.MultiheadAttention's, run with the example's memory; the llama family's rotary attention
// (pairs and grouped heads, llama2.c's; halves, one key/value head and biases, GPT-NeoX's), also
// decoded token by token against PyTorch's logits at each position. Each header is
// included as the exporter wrote it and run against PyTorch's output (tests/torch/round_trip.hpp),
// then quantized (calibrated on 32 inputs) and its argmax held to the float model's on 200
// others. For the models of float inputs, training's backward gives PyTorch's gradient of the
// input.
#include <doctest/doctest.h>

#include <algorithm>
#include <memory>

#include <stformer/quantized/quantize.hpp>
#include <stformer/stformer.hpp>

#include "bert.hpp"
#include "encoded.hpp"
#include "gpt.hpp"
#include "kwt.hpp"
#include "llama.hpp"
#include "mha.hpp"
#include "padded.hpp"
#include "pooled.hpp"
#include "pbert.hpp"
#include "rllama.hpp"
#include "rneox.hpp"
#include "seq2seq.hpp"
#include "torch/round_trip.hpp"
#include "tutorial.hpp"
#include "tvit.hpp"
#include "vit.hpp"

using namespace stformer;
using test::round_trip;

// The agreement asked of a model whose weights are random, not trained: its classes' logits lie
// close together, so that a few rows in a hundred may turn on int8's rounding. A trained model
// (the tutorial's, KWT on its keywords) is held to 98 %.
constexpr double kUntrained = 0.97;

namespace {

// The integer model of exported model `name`: calibrated on its 32 calibration inputs, then run on
// its 200 test inputs beside the float model; returns the fraction of rows whose argmax agree.
template <class M, size_t N>
double int8_agreement(const char* name) {
  const std::string base = test::exported(name);
  auto model = std::make_unique<M>();
  load_params(base + ".safetensors", *model);
  const auto inputs = safetensors::File::read(base + ".inputs.safetensors");
  using X = typename M::template Input<1, N>;
  using Y = typename M::template Output<1, N>;
  constexpr size_t Calibrations = 32, Tests = 200, Rows = dims<Y>[1], Width = dims<Y>[2];
  using E = typename X::value_type;
  constexpr size_t Size = step::count<X>;
  auto calibration_x = std::make_unique<TensorOf<E, Calibrations * Size>>();
  auto test_x = std::make_unique<TensorOf<E, Tests * Size>>();
  test::read(inputs, "calibration", *calibration_x);
  test::read(inputs, "test", *test_x);
  const auto nth = [](const auto& all, size_t i) {
    X x;
    std::copy_n(all.data() + i * Size, Size, x.data());
    return x;
  };
  auto calibration = std::make_unique<Calibration<M, 1, N>>(*model);
  for (size_t i = 0; i < Calibrations; ++i) calibration->observe(nth(*calibration_x, i));
  const auto q = calibration->quantize();
  auto fi = std::make_unique<InferOf<M, 1, N>>();
  auto qi = std::make_unique<InferOf<Quantized<M>, 1, N>>();
  size_t same = 0;
  for (size_t i = 0; i < Tests; ++i) {
    const X x = nth(*test_x, i);
    const Y yf = fi->forward(*model, x);
    const Y& yq = qi->forward(*q, x);
    for (size_t r = 0; r < Rows; ++r) {
      const auto row = [&](const Y& y) { return std::max_element(y.data() + r * Width, y.data() + (r + 1) * Width) - (y.data() + r * Width); };
      same += row(yf) == row(yq);
    }
  }
  const double agreement = double(same) / (Tests * Rows);
  CHECK(sizeof(InferOf<Quantized<M>, 1, N>) <= sizeof(InferOf<M, 1, N>));  // an integer plan is never the larger
  MESSAGE(std::string(name) << ": int8 argmax equal to float's on " << agreement * 100 << " % of " << Tests * Rows << " rows; plans float "
               << sizeof(InferOf<M, 1, N>) << " B, int8 " << sizeof(InferOf<Quantized<M>, 1, N>) << " B");
  return agreement;
}

// Training through the exported model: ActsOf's backward for PyTorch's random gradient of the
// example's output (NAME.grads.safetensors) gives PyTorch's gradient of the input, to 1e-4
// relative to its largest entry.
template <class M, size_t B, size_t N>
void input_gradient(const char* name) {
  const std::string base = test::exported(name);
  auto model = std::make_unique<M>(), grad = std::make_unique<M>();
  load_params(base + ".safetensors", *model);
  const auto example = safetensors::File::read(base + ".example.safetensors");
  const auto grads = safetensors::File::read(base + ".grads.safetensors");
  auto x = std::make_unique<typename M::template Input<B, N>>();
  auto dx = std::make_unique<typename M::template Input<B, N>>();
  auto dy = std::make_unique<typename M::template Output<B, N>>();
  test::read(example, "input", *x);
  test::read(grads, "grad_output", *dy);
  test::read(grads, "grad_input", *dx);
  auto acts = std::make_unique<ActsOf<M, B, N>>();
  acts->forward(*model, *x);
  test::worst = 0;
  test::check_rel(std::string(name) + " dL/dx", acts->backward(*model, *grad, *dy), *dx, 1e-4);
  MESSAGE(std::string(name) << ": ActsOf's input gradient against PyTorch's, largest relative difference " << test::worst);
}

// The decoding pass of an exported causal model (DecodeOf): the example's tokens stepped one by
// one, each step's logits against PyTorch's at that position (NAME.rows.safetensors: the model's
// logits at every position), within 1e-5 relative.
template <class M, size_t B, size_t N, size_t V>
void decoding_steps(const char* name) {
  const std::string base = test::exported(name);
  const auto model = test::load_exported<M>(base);
  const auto example = safetensors::File::read(base + ".example.safetensors");
  auto ids = std::make_unique<IdTensor<B, N>>();
  auto want = std::make_unique<Tensor<B, N, V>>();
  test::read(example, "input", *ids);
  test::read(safetensors::File::read(base + ".rows.safetensors"), "logits", *want);
  auto dec = std::make_unique<DecodeOf<M, B, N>>();
  test::worst = 0;
  double worst = 0;
  for (size_t t = 0; t < N; ++t) {
    IdTensor<B, 1> step;
    Tensor<B, 1, V> row;
    for (size_t b = 0; b < B; ++b) step(b, 0) = (*ids)(b, t), std::copy_n(want->data() + (b * N + t) * V, V, row.data() + b * V);
    const auto* y = dec->step(*model, step);
    REQUIRE(y != nullptr);
    test::check_rel(std::string(name) + " step " + std::to_string(t), *y, row, 1e-5);
    worst = std::max(worst, test::worst);
  }
  MESSAGE(std::string(name) << ": DecodeOf's " << N << " steps against PyTorch's logits at each position, largest relative difference " << worst
               << "; " << sizeof(DecodeOf<M, B, N>) << " B (cache " << DecodeOf<M, B, N>::cache_bytes << " B)");
}

}  // namespace

TEST_CASE("traced: a timm-style ViT (patches, class token, positions, packed qkv attention, LayerScale, ε 1e-6, the token's head)") {
  round_trip<vit, 2, 9>("vit");
  input_gradient<vit, 2, 9>("vit");
  CHECK(int8_agreement<vit, 9>("vit") >= kUntrained);
}
TEST_CASE("traced: a BERT-style encoder (word and position embeddings, separate q/k/v, einsum, post-norm ε 1e-12, the first token's classifier)") {
  round_trip<bert, 2, 16>("bert");
  CHECK(int8_agreement<bert, 16>("bert") >= kUntrained);
}
TEST_CASE("traced: a nanoGPT-style causal language model (tied embeddings, masked_fill with a causal buffer), declared causal") {
  static_assert(declares_causal<gpt>);
  round_trip<gpt, 2, 16>("gpt");
  CHECK(int8_agreement<gpt, 16>("gpt") >= kUntrained);
}
TEST_CASE("traced: nn.MultiheadAttention with a causal attn_mask, a SwiGLU layer (Gated) and GPT-J's parallel block, declared causal") {
  static_assert(declares_causal<mha>);
  round_trip<mha, 2, 10>("mha");
  input_gradient<mha, 2, 10>("mha");
  CHECK(int8_agreement<mha, 10>("mha") >= kUntrained);
}
TEST_CASE("traced: nn.TransformerEncoder called with a causal mask, declared causal") {
  static_assert(declares_causal<encoded>);
  round_trip<encoded, 2, 8>("encoded");
  input_gradient<encoded, 2, 8>("encoded");
  CHECK(int8_agreement<encoded, 8>("encoded") >= kUntrained);
}
TEST_CASE("traced: a llama-style causal model (RMSNorm written out, eps 1e-6; bias-free q/k/v/o with an additive causal buffer; SwiGLU)") {
  static_assert(declares_causal<llama>);
  round_trip<llama, 2, 12>("llama");
  CHECK(int8_agreement<llama, 12>("llama") >= kUntrained);
}
TEST_CASE("traced: the PyTorch tutorial's language model (sequence-first ids, the embedding times sqrt(D), sinusoidal positions, src_mask), declared causal") {
  static_assert(declares_causal<tutorial>);
  round_trip<tutorial, 2, 12>("tutorial");
  CHECK(int8_agreement<tutorial, 12>("tutorial") >= 0.98);
}
TEST_CASE("traced: torchvision's VisionTransformer as it is (image 3 x 32 x 32, patches of 8, 4 layers, 4 heads, D 64, 10 classes)") {
  round_trip<tvit, 2, 96>("tvit");
  input_gradient<tvit, 2, 96>("tvit");
  CHECK(int8_agreement<tvit, 96>("tvit") >= kUntrained);
}
TEST_CASE("traced: the Keyword Transformer KWT-1 (98 frames of 40 MFCC, D 64, 12 post-norm layers of 1 head, MLP 256, 12 classes; 607,308 parameters)") {
  round_trip<kwt, 2, 98>("kwt");
  input_gradient<kwt, 2, 98>("kwt");
  CHECK(int8_agreement<kwt, 98>("kwt") >= 0.98);
}

TEST_CASE("traced: key padding declared at export: BERT's attention_mask made an additive mask; PyTorch's key_padding_mask to "
          "nn.MultiheadAttention, to masked_fill and to nn.TransformerEncoder after a class token, the mask extended by its row") {
  round_trip<pbert, 2, 16>("pbert");
  round_trip<padded, 2, 10>("padded");
}
TEST_CASE("traced: key padding declared at export: the mean of the rows that exist, (x * m).sum(1) / m.sum(1), as MeanPool") {
  round_trip<pooled, 2, 10>("pooled");
}

TEST_CASE("traced: over a memory: a decoder's stack with cross-attention written out (q and a packed kv Linear, einsum, the memory "
          "through its own LayerNorm) and nn.MultiheadAttention reading the memory, declared WithMemory<true, ...>") {
  test::memory_round_trip<seq2seq, 2, 8, 5>("seq2seq");
}

TEST_CASE("traced: the llama family's attention: rotary positions on pairs with grouped-query attention (llama2.c's), on halves "
          "with one key/value head and biases, Θ 500000 (GPT-NeoX's); the last position's logits; decoded token by token") {
  static_assert(declares_causal<rllama> && declares_causal<rneox>);
  round_trip<rllama, 2, 16>("rllama");
  round_trip<rneox, 2, 16>("rneox");
  decoding_steps<rllama, 2, 16, 64>("rllama");
  decoding_steps<rneox, 2, 16, 64>("rneox");
}
