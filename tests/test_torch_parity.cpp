// PyTorch parity, as llm.c checks itself: tests/torch/make_parity.py runs SPEC's models in
// PyTorch (tests/torch/stformer_torch.py) and writes weights, inputs, outputs, loss, every
// parameter gradient, and the losses and weights after 10 AdamW steps. Here stformer loads the
// same weights by their SPEC names, repeats everything and compares: forward to 1e-5 and
// gradients to 1e-4 (relative to the tensor's largest entry), the 10 losses to 1e-4 and the
// weights after 10 steps to 1e-3. The directory comes from STFORMER_PARITY_DIR.
// (In three files, compiled apart: this one has SPEC's models, the layers in nn.Sequential and
// a file refused; test_torch_parity_blocks.cpp the encoder layers and a user's blocks;
// test_torch_parity_decoder.cpp the decoder and nn.MultiheadAttention.)
#include <doctest/doctest.h>

#include "torch_parity.hpp"

TEST_CASE("PyTorch parity: pointer model (encoder blocks, key padding, NLL)") {
  using M = PointerModel<2, 16, 2, 32, 2>;
  using A = TrainingOf<M, 4, 12>;
  auto f = safetensors::File::read(parity_file("pointer.safetensors"));
  Tensor<4, 12, 2> x;
  KeyMask<4, 12> keys;
  IdTensor<4> target;
  read(f, "input.x", x);
  read(f, "input.keys", keys);
  read(f, "input.target", target);
  Tensor<4, 1, 12> dlogp;
  run_case<M, A>(
      "pointer.safetensors", [&](A& a, const M& p) -> const auto& { return a.forward(p, x, &keys); },
      [&](A& a, const M& p, M& g) {
        float l = nll_loss(a.at<"">().attn.logp, target, dlogp);
        a.backward(p, g, dlogp);
        return l;
      });
}

TEST_CASE("PyTorch parity: Set Transformer (ISAB + PMA, Euclidean distance)") {
  using M = SetTransformer<2, 16, 4, 4, 2>;
  using A = TrainingOf<M, 4, 12>;
  auto f = safetensors::File::read(parity_file("set.safetensors"));
  Tensor<4, 12, 2> x;
  Tensor<4, 1, 2> y, dy;
  read(f, "input.x", x);
  read(f, "input.y", y);
  run_case<M, A>(
      "set.safetensors", [&](A& a, const M& p) -> const auto& { return a.forward(p, x); },
      [&](A& a, const M& p, M& g) {
        float l = euclidean_loss(a.at<"head">().out, y, dy);
        a.backward(p, g, dy);
        return l;
      });
}

TEST_CASE("PyTorch parity: language model (embedding, positions, encoder blocks, PMA, cross-entropy)") {
  using M = LanguageModel<50, 8, 16, 2, 32, 2>;
  using A = TrainingOf<M, 4>;
  auto f = safetensors::File::read(parity_file("lm.safetensors"));
  IdTensor<4, 8> ids;
  IdTensor<4> target;
  read(f, "input.ids", ids);
  read(f, "input.target", target);
  Tensor<4, 1, 50> dlogits;
  run_case<M, A>(
      "lm.safetensors", [&](A& a, const M& p) -> const auto& { return a.forward(p, ids); },
      [&](A& a, const M& p, M& g) {
        float l = cross_entropy(a.at<"head">().out, target, dlogits);
        a.backward(p, g, dlogits);
        return l;
      });
}

TEST_CASE("PyTorch parity: PyTorch's LayerNorm, GELU (erf and tanh), SiLU, Linear (with and without bias) in nn.Sequential; RMSNorm; a GELU feed-forward layer") {
  using M = Sequential<LayerNorm<6>, Linear<6, 24>, GELU<24>, Linear<24, 24, Init::xavier_normal, Bias::no>, SiLU<24>, RMSNorm<24>, GELUTanh<24>,
                       FeedForward<24, 48, act::GELU>, LayerNorm<24>, Linear<24, 3>>;
  using A = TrainingOf<M, 4, 12>;
  auto f = safetensors::File::read(parity_file("layers.safetensors"));
  Tensor<4, 12, 6> x;
  Tensor<4, 12, 3> y, dy;
  read(f, "input.x", x);
  read(f, "input.y", y);
  const Tensor<4, 12, 3>* out = nullptr;
  run_case<M, A>(
      "layers.safetensors", [&](A& a, const M& p) -> const auto& { return *(out = &a.forward(p, x)); },
      [&](A& a, const M& p, M& g) {
        const float l = mse(*out, y, dy);
        a.backward(p, g, dy);
        return l;
      });
}

TEST_CASE("A PyTorch encoder layer's file into SPEC's block: refused with every mismatch listed") {
  auto f = safetensors::File::read(parity_file("encoder_post_relu.safetensors"));
  auto spec = test::make<EncoderBlock<16, 2, 32>>();
  std::string error;
  try {
    load_params(f, *spec, "param.");
  } catch (const std::runtime_error& e) {
    error = e.what();
  }
  INFO(error);
  // each of SPEC's 14 tensors missing (sn1.g, attn.wq.*, ..., ffn.fc2.*), and PyTorch's 12 unexpected
  CHECK(error.find("15 problems:") != std::string::npos);
  for (const char* name : {"'param.sn1.g' is missing", "'param.attn.wq.weight' is missing", "'param.sn2.g' is missing", "'param.ffn.fc2.bias' is missing",
                           "12 unexpected tensors that the model does not have:", "'param.norm1.weight'", "'param.self_attn.in_proj_weight'",
                           "'param.linear2.bias'"})
    CHECK(error.find(name) != std::string::npos);
  // a LayerNorm's weight [16] where the form's RMSNorm has no bias: the one extra tensor named
  auto rms = test::make<EncoderBlock<16, 2, 32, Form<RMSNorm, act::ReLU, false>>>();
  error.clear();
  try {
    load_params(f, *rms, "param.");
  } catch (const std::runtime_error& e) {
    error = e.what();
  }
  CHECK(error.find("2 unexpected tensors that the model does not have: 'param.norm1.bias', 'param.norm2.bias'") != std::string::npos);
}
