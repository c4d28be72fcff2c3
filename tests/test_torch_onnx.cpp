// ONNX in: tests/torch/make_onnx.py wrote models to ONNX with torch.onnx.export (opset 13:
// LayerNorm and GELU written out in arithmetic; opset 17: LayerNormalization) and imported them
// (python/stformer_onnx.py); each header is included as written and run against the graph's
// output, which make_onnx.py held to PyTorch's model (tests/torch/round_trip.hpp).
#include <doctest/doctest.h>

#include <stformer/stformer.hpp>

#include "onnx_bert13.hpp"
#include "onnx_gpt17.hpp"
#include "onnx_llama17.hpp"
#include "onnx_tutorial13.hpp"
#include "onnx_tvit17.hpp"
#include "onnx_vit13.hpp"
#include "torch/round_trip.hpp"

using namespace stformer;
using test::round_trip;

TEST_CASE("ONNX in: a timm-style ViT at opset 13 (LayerNorm written out; the class token and positions folded to constants); "
          "torchvision's VisionTransformer at opset 17 (a Conv patch embedding, nn.MultiheadAttention's arithmetic)") {
  round_trip<onnx_vit13, 1, 9>("onnx_vit13");
  round_trip<onnx_tvit17, 1, 96>("onnx_tvit17");
}

TEST_CASE("ONNX in: a BERT-style encoder at opset 13 (Gather of the embeddings, Einsum, Erf GELU written out)") {
  round_trip<onnx_bert13, 1, 16>("onnx_bert13");
  CHECK_FALSE(declares_causal<onnx_bert13>);
}

TEST_CASE("ONNX in: causal models, found causal: nanoGPT-style at opset 17 (Where of a causal buffer, tanh GELU written out), "
          "llama-style at 17 (RMSNorm written out), the tutorial's at 13 (sequence-first, its causal mask the graph's second input)") {
  round_trip<onnx_gpt17, 1, 16>("onnx_gpt17");
  round_trip<onnx_llama17, 1, 12>("onnx_llama17");
  round_trip<onnx_tutorial13, 1, 12>("onnx_tutorial13");
  CHECK((declares_causal<onnx_gpt17> && declares_causal<onnx_llama17> && declares_causal<onnx_tutorial13>));
}
