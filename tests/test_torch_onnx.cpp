// ONNX in: tests/torch/make_onnx.py wrote six models to ONNX with torch.onnx.export and imported
// them (python/stformer_onnx.py), each declaration computed in PyTorch and held to the graph's
// output there, and the graph's output to PyTorch's model. Here the headers of three run against
// it (tests/torch/round_trip.hpp): torchvision's VisionTransformer at opset 17 (a Conv patch
// embedding, nn.MultiheadAttention's own arithmetic, LayerNormalization), the llama-style model
// at 17 (RMSNorm written out) and the tutorial's language model at 13 (sequence-first, its causal
// mask the graph's second input, LayerNorm written out). The others' leaves are the traced
// models' (test_torch_traced); ONNX Runtime runs all five of one input (tests/torch/onnx_ort.sh).
#include <doctest/doctest.h>

#include <stformer/stformer.hpp>

#include "onnx_llama17.hpp"
#include "onnx_tutorial13.hpp"
#include "onnx_tvit17.hpp"
#include "torch/round_trip.hpp"

using namespace stformer;
using test::round_trip;

TEST_CASE("ONNX in: torchvision's VisionTransformer at opset 17 (a Conv patch embedding, nn.MultiheadAttention's arithmetic)") {
  round_trip<onnx_tvit17, 1, 96>("onnx_tvit17");
  CHECK_FALSE(declares_causal<onnx_tvit17>);
}

TEST_CASE("ONNX in: causal models, found causal: llama-style at opset 17 (RMSNorm written out), the tutorial's at 13 "
          "(sequence-first, its causal mask the graph's second input)") {
  round_trip<onnx_llama17, 1, 12>("onnx_llama17");
  round_trip<onnx_tutorial13, 1, 12>("onnx_tutorial13");
  CHECK((declares_causal<onnx_llama17> && declares_causal<onnx_tutorial13>));
}
