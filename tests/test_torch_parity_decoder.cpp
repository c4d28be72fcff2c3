// PyTorch parity of nn.TransformerDecoderLayer, nn.TransformerDecoder and nn.MultiheadAttention
// (see test_torch_parity.cpp).
#include <doctest/doctest.h>

#include "torch_parity.hpp"

namespace {

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

}  // namespace

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
