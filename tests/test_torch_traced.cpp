// The exporter's tracing: tests/torch/make_traced.py exported models with a forward of their own
// (tests/torch/traced_models.py: a timm-style ViT with a class token, learned positions and
// LayerScale; a BERT-style encoder with separate query, key and value and LayerNorm ε 1e-12; a
// nanoGPT-style causal language model with tied embeddings; nn.MultiheadAttention with a causal
// mask, a SwiGLU layer and GPT-J's parallel block; nn.TransformerEncoder called with a causal
// mask). Each header is included as the exporter wrote it and run against PyTorch's output
// (tests/torch/round_trip.hpp).
#include <doctest/doctest.h>

#include <stformer/stformer.hpp>

#include "bert.hpp"
#include "encoded.hpp"
#include "gpt.hpp"
#include "mha.hpp"
#include "torch/round_trip.hpp"
#include "vit.hpp"

using namespace stformer;
using test::round_trip;

TEST_CASE("traced: a timm-style ViT (patches, class token, positions, packed qkv attention, LayerScale, ε 1e-6, the token's head)") {
  round_trip<vit, 2, 9>("vit");
}
TEST_CASE("traced: a BERT-style encoder (word and position embeddings, separate q/k/v, post-norm ε 1e-12, the first token's classifier)") {
  round_trip<bert, 2, 16>("bert");
}
TEST_CASE("traced: a nanoGPT-style causal language model (tied embeddings, masked_fill with a causal buffer), declared causal") {
  static_assert(declares_causal<gpt>);
  round_trip<gpt, 2, 16>("gpt");
}
TEST_CASE("traced: nn.MultiheadAttention with a causal attn_mask, a SwiGLU layer (Gated) and GPT-J's parallel block, declared causal") {
  static_assert(declares_causal<mha>);
  round_trip<mha, 2, 10>("mha");
}
TEST_CASE("traced: nn.TransformerEncoder called with a causal mask, declared causal") {
  static_assert(declares_causal<encoded>);
  round_trip<encoded, 2, 8>("encoded");
}
