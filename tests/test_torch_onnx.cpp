// ONNX in: tests/torch/make_onnx.py wrote models in the styles of timm's ViT, BERT and nanoGPT to
// ONNX with torch.onnx.export (opset 13: LayerNorm and GELU written out in arithmetic; opset 17:
// LayerNormalization) and imported them (python/stformer_onnx.py); each header is included as
// written and run against the graph's output, which make_onnx.py held to PyTorch's model
// (tests/torch/round_trip.hpp).
#include <doctest/doctest.h>

#include <stformer/stformer.hpp>

#include "onnx_bert13.hpp"
#include "onnx_gpt17.hpp"
#include "onnx_vit13.hpp"
#include "onnx_vit17.hpp"
#include "torch/round_trip.hpp"

using namespace stformer;
using test::round_trip;

TEST_CASE("ONNX in: a timm-style ViT at opsets 13 and 17 (LayerNorm written out, LayerNormalization; the class token and positions folded to constants)") {
  round_trip<onnx_vit13, 1, 9>("onnx_vit13");
  round_trip<onnx_vit17, 1, 9>("onnx_vit17");
}

TEST_CASE("ONNX in: a BERT-style encoder at opset 13 (Gather of the embeddings, Einsum, Erf GELU written out), a nanoGPT-style causal model at opset 17 (Where of a causal buffer, tanh GELU written out), found causal") {
  round_trip<onnx_bert13, 1, 16>("onnx_bert13");
  round_trip<onnx_gpt17, 1, 16>("onnx_gpt17");
  CHECK(declares_causal<onnx_gpt17>);
  CHECK_FALSE(declares_causal<onnx_bert13>);
}
