// PyTorch parity, as llm.c checks itself: tests/torch/make_parity.py runs SPEC's models in
// PyTorch (tests/torch/stformer_torch.py) and writes weights, inputs, outputs, loss, every
// parameter gradient, and the losses and weights after 10 AdamW steps. Here stformer loads the
// same weights by their SPEC names, repeats everything and compares: forward to 1e-5 and
// gradients to 1e-4 (relative to the tensor's largest entry), the 10 losses to 1e-4 and the
// weights after 10 steps to 1e-3. The directory comes from STFORMER_PARITY_DIR.
#include <doctest/doctest.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include <stformer/checkpoint.hpp>
#include <stformer/safetensors.hpp>
#include <stformer/stformer.hpp>

#include "torch/compare.hpp"
#include "user_blocks.hpp"
#include "util.hpp"

using namespace stformer;
using test::check_rel;
using test::read;
using test::worst;

namespace {

std::string parity_file(const char* name) { return test::file_in("STFORMER_PARITY_DIR", name); }

// Every parameter tensor of got against want (same model type).
template <class M>
void check_params(const char* what, const M& got, const M& want, double tol) {
  for_each_param(
      [&](const Path& p, Init, const auto& g, const auto& w) {
        // The key bias (wk.bias, or the middle third of PyTorch's in_proj_bias): its gradient is
        // exactly 0 (softmax is shift-invariant); in float it is rounding noise, which Adam
        // normalises to steps of ±lr in both implementations alike. It changes no output, so
        // after the optimiser steps it is only checked for size, and its gradient against the
        // true value 0 instead of PyTorch's noise (both are sums of ±1e-8 roundings).
        const auto path = p.name();  // the view below points into it
        const auto name = path.view();
        const size_t n = g.size(), lo = name.ends_with("wk.bias") ? 0 : name.ends_with("in_proj_bias") ? n / 3 : n,
                     hi = lo == n ? n : name.ends_with("wk.bias") ? n : 2 * n / 3;
        auto rest = g;  // the other entries, checked as every tensor
        for (size_t i = lo; i < hi; ++i) {
          if (std::string_view(what) == "after 10 AdamW steps") {
            CHECK(std::abs(g.data()[i] - w.data()[i]) <= 0.25f);
          } else if (std::string_view(what) == "gradient") {
            CHECK_MESSAGE(std::abs(g.data()[i]) <= 1e-6f, p.name().c_str());
            CHECK_MESSAGE(std::abs(w.data()[i]) <= 1e-6f, p.name().c_str());
          }
          rest.data()[i] = w.data()[i];
        }
        check_rel(std::string(what) + " " + p.name().c_str(), rest, w, tol);
      },
      got, want);
}

// Loads the weights, checks output, loss, gradients, then 10 AdamW steps (lr 0.01, wd 0.01).
template <class M, class Acts, class Forward, class Loss>
void run_case(const char* file, Forward&& forward, Loss&& loss_of) {
  auto f = safetensors::File::read(parity_file(file));
  auto p = test::make<M>();
  auto g = test::make<M>();
  auto want = test::make<M>();
  auto a = test::make<Acts>();
  load_params(f, *p, "param.");
  load_params(f, *want, "grad.");

  worst = 0;
  const auto& out = forward(*a, *p);
  auto expected_out = std::make_unique<std::remove_cvref_t<decltype(out)>>();
  read(f, "output", *expected_out);
  check_rel("output", out, *expected_out, 1e-5);
  MESSAGE(std::string(file) << ": output relative difference " << worst);
  worst = 0;
  Tensor<1> expected_loss;
  read(f, "loss", expected_loss);
  zero_grad(*g);
  float loss = loss_of(*a, *p, *g);
  CHECK(loss == doctest::Approx(expected_loss(0)).epsilon(1e-5));
  check_params("gradient", *g, *want, 1e-4);
  MESSAGE(std::string(file) << ": gradients, largest relative difference " << worst);

  Tensor<10> step_losses;
  read(f, "step_losses", step_losses);
  auto p2 = test::make<M>();
  load_params(f, *p2, "param.");
  AdamW<M> opt(0.01f);
  for (size_t s = 0; s < 10; ++s) {
    forward(*a, *p2);
    zero_grad(*g);
    float l = loss_of(*a, *p2, *g);
    CHECK_MESSAGE(l == doctest::Approx(step_losses(s)).epsilon(1e-4), "step " << s);
    opt.step(*p2, *g, 0.01f);
  }
  load_params(f, *want, "final.");
  worst = 0;
  check_params("after 10 AdamW steps", *p2, *want, 1e-3);
  MESSAGE(std::string(file) << ": weights after 10 AdamW steps, largest relative difference " << worst);
}

// PyTorch's mse_loss: mean((out − y)²), and its gradient dy = 2(out − y)/n.
template <class T>
float mse(const T& out, const T& y, T& dy) {
  double l = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    const float d = out.data()[i] - y.data()[i];
    l += double(d) * d, dy.data()[i] = 2 * d / float(y.size());
  }
  return float(l / double(y.size()));
}

}  // namespace

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
        float l = nll_loss(a.at<"">().pointer.logp, target, dlogp);
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

// A block of width 16 on rows [4, 12, 16] (causal, or key-padded by input.keys), loaded by the
// PyTorch module's names: output, loss, every gradient, 10 AdamW steps, and the forward-only
// pass in a Sequential's arena giving the training record's bits.

template <class M>
void block_case(const char* file, bool causal, bool padded) {
  using A = TrainingOf<M, 4, 12>;
  auto f = safetensors::File::read(parity_file(file));
  Tensor<4, 12, 16> x, y, dy;
  KeyMask<4, 12> keys;
  read(f, "input.x", x);
  read(f, "input.y", y);
  if (padded) read(f, "input.keys", keys);
  const Mask<4, 12> mask{.causal = causal, .keys = padded ? &keys : nullptr};
  const Tensor<4, 12, 16>* out = nullptr;
  run_case<M, A>(
      file, [&](A& a, const M& p) -> const auto& { return *(out = &a.forward(p, x, mask)); },
      [&](A& a, const M& p, M& g) {
        const float l = mse(*out, y, dy);
        a.backward(p, g, dy);
        return l;
      });
  using Model = Sequential<Named<"", M>>;
  auto p = test::make<Model>();
  load_params(f, *p, "param.");
  auto a = test::make<A>();
  auto inf = test::make<InferOf<Model, 4, 12>>();
  CHECK(inf->forward(*p, x, mask) == a->forward(p->template get<0>(), x, mask));
}

// nn.TransformerEncoderLayer(16, 2, 32, dropout=0, batch_first=True) in its four forms, loaded by
// PyTorch's names (self_attn.in_proj_weight, linear1.weight, norm1.bias, ...).
TEST_CASE("PyTorch parity: nn.TransformerEncoderLayer, post-norm and norm_first, ReLU and GELU, key-padded (and causal)") {
  block_case<EncoderBlock<16, 2, 32, PostNorm<>>>("encoder_post_relu.safetensors", false, true);
  block_case<EncoderBlock<16, 2, 32, PostNorm<act::GELU>>>("encoder_post_gelu.safetensors", true, true);
  block_case<EncoderBlock<16, 2, 32, PreNorm<>>>("encoder_pre_relu.safetensors", false, true);
  block_case<EncoderBlock<16, 2, 32, PreNorm<act::GELU>>>("encoder_pre_gelu.safetensors", false, true);
}

// A decoder of width 16 (nn.TransformerDecoderLayer(16, 2, 32, dropout=0, batch_first=True), or
// nn.TransformerDecoder of them) with a causal tgt_mask and a key-padded memory [4, 10, 16],
// loaded by PyTorch's names; with memory_grad the loss's gradient with respect to the memory too.
template <class M>
void decoder_case(const char* file, bool memory_grad = false) {
  using A = TrainingOf<M, 4, 12, 10>;
  auto f = safetensors::File::read(parity_file(file));
  Tensor<4, 12, 16> x, y, dy;
  Tensor<4, 10, 16> m;
  KeyMask<4, 10> keys;
  read(f, "input.x", x);
  read(f, "input.y", y);
  read(f, "input.m", m);
  read(f, "input.keys", keys);
  const Tensor<4, 12, 16>* out = nullptr;
  run_case<M, A>(
      file, [&](A& a, const M& p) -> const auto& { return *(out = &a.forward(p, x, m, &keys)); },
      [&](A& a, const M& p, M& g) {
        const float l = mse(*out, y, dy);
        a.backward(p, g, dy);
        return l;
      });
  auto p = test::make<M>(), g = test::make<M>();
  load_params(f, *p, "param.");
  auto a = test::make<A>();
  auto inf = test::make<InferOf<M, 4, 12, 10>>();
  CHECK(inf->forward(*p, x, m, &keys) == a->forward(*p, x, m, &keys));  // Infer: the same bits as Acts
  if (memory_grad) {
    Tensor<4, 10, 16> dm;
    read(f, "grad_input.m", dm);
    mse(a->forward(*p, x, m, &keys), y, dy);
    worst = 0;
    check_rel("the memory's gradient", a->backward(*p, *g, dy).dkv, dm, 1e-4);
    MESSAGE(std::string(file) << ": the memory's gradient, relative difference " << worst);
  }
}

TEST_CASE("PyTorch parity: nn.TransformerDecoderLayer, post-norm GELU and norm_first ReLU, causal, the memory key-padded") {
  decoder_case<DecoderBlock<16, 2, 32, PostNorm<act::GELU>>>("decoder_post_gelu.safetensors");
  decoder_case<DecoderBlock<16, 2, 32, PreNorm<>>>("decoder_pre_relu.safetensors");
}

TEST_CASE("PyTorch parity: nn.TransformerDecoder of two post-norm GELU layers and a final LayerNorm, and the memory's gradient") {
  decoder_case<TransformerDecoder<DecoderBlock<16, 2, 32, PostNorm<act::GELU>>, 2, LayerNorm<16>>>("decoder_stack.safetensors", true);
}

// nn.MultiheadAttention(16, 2) as the test's module holds it: attn.in_proj_weight, ...
using PackedAttention = MultiHeadAttention<16, 16, 16, 2, ScoreScale::head_width, Projections::packed>;
struct InAttn {
  PackedAttention attn;
  template <class F, class... S>
  static constexpr void visit(const Path& at, F& f, S&... s) {
    stformer::visit(at / "attn", f, s.attn...);
  }
};

TEST_CASE("PyTorch parity: nn.MultiheadAttention (packed projections) against a key-padded memory") {
  using MHA = PackedAttention;
  using M = InAttn;
  struct Acts {
    TrainingOf<MHA, 4, 12, 10> a;
  };
  auto f = safetensors::File::read(parity_file("mha.safetensors"));
  Tensor<4, 12, 16> x, y, dy;
  Tensor<4, 10, 16> m;
  KeyMask<4, 10> keys;
  read(f, "input.x", x);
  read(f, "input.y", y);
  read(f, "input.m", m);
  read(f, "input.keys", keys);
  const Tensor<4, 12, 16>* out = nullptr;
  run_case<M, Acts>(
      "mha.safetensors", [&](Acts& a, const M& p) -> const auto& { return *(out = &a.a.forward(p.attn, x, m, Mask<4, 10>{.keys = &keys})); },
      [&](Acts& a, const M& p, M& g) {
        const float l = mse(*out, y, dy);
        a.a.backward(p.attn, g.attn, dy);
        return l;
      });
}

TEST_CASE("PyTorch parity: nn.TransformerEncoder of two post-norm GELU layers and a final LayerNorm, as a Sequential") {
  using M = Sequential<Named<"layers", Repeat<EncoderBlock<16, 2, 32, PostNorm<act::GELU>>, 2>>, Named<"norm", LayerNorm<16>>>;
  using A = TrainingOf<M, 4, 12>;
  auto f = safetensors::File::read(parity_file("encoder_stack.safetensors"));
  Tensor<4, 12, 16> x, y, dy;
  KeyMask<4, 12> keys;
  read(f, "input.x", x);
  read(f, "input.y", y);
  read(f, "input.keys", keys);
  const Tensor<4, 12, 16>* out = nullptr;
  run_case<M, A>(
      "encoder_stack.safetensors", [&](A& a, const M& p) -> const auto& { return *(out = &a.forward(p, x, &keys)); },
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

// Blocks a user declares from combinators (tests/user_blocks.hpp) against PyTorch modules written
// for the test: GPT-J's parallel block (causal), a bias-free SwiGLU feed-forward layer, a
// LayerScale pre-norm block with LayerNorm ε 1e-6 (key-padded).
TEST_CASE("PyTorch parity: a user's blocks from combinators (GPT-J's parallel block, SwiGLU, LayerScale pre-norm)") {
  block_case<user::ParallelBlock<16, 2, 32>>("user_parallel.safetensors", true, false);
  block_case<user::SwiGLU<16, 32>>("user_swiglu.safetensors", false, false);
  block_case<user::LayerScaleBlock<16, 2, 32>>("user_layerscale.safetensors", false, true);
}
