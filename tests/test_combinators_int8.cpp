// The blocks a user declares from combinators (tests/user_blocks.hpp: GPT-J's parallel block, a
// bias-free SwiGLU feed-forward layer, a LayerScale pre-norm block) in integers with no code of
// their own: quantize makes each part's integer form (QSelfAttention, QLayerScale, QGated, the
// integer Residual and Parallel), the model within a stated rms of the float model, causal and
// key-padded; its tensors under the float model's names; within bounds, every requantization its
// scales'; saved and loaded, the same integers; its plan no larger than the float plan.
// Also the integer leaves against their formulas: QLayerScale and QGated entry by entry.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <string>

#include <stformer/quantized/quantize.hpp>
#include <stformer/quantized/bounds.hpp>
#include <stformer/quantized/checkpoint.hpp>
#include <stformer/stformer.hpp>

#include "quantized.hpp"
#include "user_blocks.hpp"

using namespace stformer;

namespace {

// A model of rows around Block: Linear in, the block twice, Linear out. Quantized from 8
// calibration batches under `mask`, then checked as the top of this file says.
template <class Block>
void user_block_int8(const char* what, const Mask<4, 8>& mask, std::initializer_list<const char*> names, double bound) {
  constexpr size_t B = 4, N = 8;
  using M = Sequential<Named<"proj", Linear<6, 16>>, Named<"blocks", Repeat<Block, 2>>, Named<"head", Linear<16, 3>>>;
  using Q = Quantized<M>;
  auto p = test::make<M>();
  Rng rng(81);
  init_params(*p, rng);
  test::randomize(*p, rng);
  Calibration<M, B, N> cal(*p);
  Tensor<B, N, 6> x;
  for (int i = 0; i < 8; ++i) test::fill(x, rng), cal.observe(x, mask);
  const auto q = cal.quantize();
  const auto have = test::param_names(*q);
  for (const char* n : names) CHECK_MESSAGE(std::find(have.begin(), have.end(), n) != have.end(), n);
  CHECK_FALSE(out_of_bounds(*q));
  CHECK_FALSE(requant_mismatch(*q));

  const double gap = rms_gap(*p, *q, x, mask, rng);
  MESSAGE(std::string(what) << ": int8 within " << 100 * gap << "% rms of the float model; plans: float " << sizeof(InferOf<M, B, N>) << " B, int8 "
               << sizeof(InferOf<Q, B, N>) << " B");
  CHECK(gap < bound);
  CHECK(sizeof(InferOf<Q, B, N>) <= sizeof(InferOf<M, B, N>));

  const auto path = std::filesystem::temp_directory_path() / "stformer_user_block_int8.safetensors";
  save_params(path, *q);
  auto back = test::make<Q>();
  load_quantized(path, *back);
  std::filesystem::remove(path);
  auto qi = test::make<InferOf<Q, B, N>>();
  test::fill(x, rng);
  const Tensor<B, N, 3> before = qi->forward(*q, x, mask);
  CHECK(test::same_bits(before, qi->forward(*back, x, mask)));
}

}  // namespace

TEST_CASE("quantize: GPT-J's parallel block, causal, from its declaration alone") {
  user_block_int8<user::ParallelBlock<16, 2, 32>>("parallel block, causal", Mask<4, 8>{.causal = true},
                                                  {"blocks.0.ln_1.weight", "blocks.0.attn.wq.weight", "blocks.0.attn.branch_requant.multiplier",
                                                   "blocks.1.mlp.fc1.weight", "head.fine.weight"},
                                                  0.04);
}

TEST_CASE("quantize: a bias-free SwiGLU feed-forward layer (QGated), from its declaration alone") {
  user_block_int8<user::SwiGLU<16, 24>>("SwiGLU", Mask<4, 8>{}, {"blocks.0.w1.weight", "blocks.0.1.table", "blocks.0.gate_scale", "blocks.0.requant.shift", "blocks.1.w2.weight"},
                                        0.04);
}

TEST_CASE("quantize: a LayerScale pre-norm block (ε 1e-6), key-padded, from its declaration alone") {
  static const auto keys = test::lengths_mask<4, 8>({8, 5, 2, 7});
  user_block_int8<user::LayerScaleBlock<16, 2, 32>>("LayerScale block, key-padded", Mask<4, 8>{.keys = &keys},
                                                    {"blocks.0.norm1.eps", "blocks.0.ls1.gamma", "blocks.0.ls1.requant.multiplier", "blocks.1.ls2.gamma_scale"},
                                                    0.04);
}

TEST_CASE("QLayerScale and QGated: y_q = clamp(apply(x_q·γ_q, M_c)) and clamp(apply(g_q·v_q, M)), entry by entry") {
  constexpr size_t D = 5;
  LayerScale<D> f;
  for (size_t c = 0; c < D; ++c) f.gamma(c) = (c % 2 ? -0.3f : 0.7f) * float(c);  // γ_0 = 0
  QLayerScale<D> q;
  q.from_float(f, {}, 0.01f, 0.02f);
  TensorOf<std::int16_t, 1, 3, D> h;
  for (size_t k = 0; k < h.size(); ++k) h.data()[k] = std::int16_t(int(k * 2371) % 65536 - 32768);
  const auto x = h;
  q.forward_in_place(h, Nothing{}, Mask<1, 3>{}, Serial{});
  for (size_t r = 0; r < 3; ++r)
    for (size_t c = 0; c < D; ++c) {
      const double want = std::clamp(std::nearbyint(0.01 * f.gamma(c) * x(0, r, c) / 0.02), -32768.0, 32767.0);
      CHECK_MESSAGE(std::abs(h(0, r, c) - want) <= 1, "row " << r << ", feature " << c);
    }

  // y = Gate(x) ⊙ Value(x) with both parts the identity at scales s_g = s_v = s_x: y_q ≈ x_q²·s_x²/s_y
  using G = Int8Of<Gated<LayerScale<D>, LayerScale<D>>>::type;
  G g;
  LayerScale<D> one;
  std::fill(one.gamma.begin(), one.gamma.end(), 1.0f);
  g.get<0>().from_float(one, {}, 0.01f, 0.01f), g.get<1>().from_float(one, {}, 0.01f, 0.01f);
  g.set_scales(0.01f, 0.01f, 0.5f);
  TensorOf<std::int16_t, 1, 3, D> y;
  step::Scratch<G, 1, 3, 0> w;
  g.run(x, y, w, Mask<1, 3>{}, Serial{});
  for (size_t k = 0; k < y.size(); ++k) {
    const double want = std::clamp(std::nearbyint(0.01 * 0.01 * double(x.data()[k]) * x.data()[k] / 0.5), -32768.0, 32767.0);
    CHECK_MESSAGE(std::abs(y.data()[k] - want) <= 1, "entry " << k);
  }
}

// A block derived from a chain that declares causal = true, as a step of a quantized model: its
// chain's integer form, causal in calibration and in every pass, so the integers of the same
// block calibrated and run with the causal mask, whatever mask the pass is given.
namespace {
struct CausalEncoder : EncoderBlock<16, 2, 32> {
  static constexpr bool causal = true;
};
}  // namespace
TEST_CASE("quantize: a block derived from a chain that declares causal, in integers") {
  constexpr size_t D = 16, B = 2, N = 8;
  using Causal = Sequential<Named<"proj", Linear<4, D>>, Named<"block", CausalEncoder>, Named<"head", Linear<D, 3>>>;
  using Open = Sequential<Named<"proj", Linear<4, D>>, Named<"block", EncoderBlock<16, 2, 32>>, Named<"head", Linear<D, 3>>>;
  static_assert(!declares_causal<Causal> && declares_causal<Int8Of<CausalEncoder>::type>);
  auto causal = test::make<Causal>();
  auto open = test::make<Open>();
  Rng rng(97);
  init_params(*causal, rng);
  test::randomize(*causal, rng);
  test::copy_by_name(*causal, *open);
  const auto keys = test::lengths_mask<B, N>({N, N - 3});
  const Mask<B, N> causal_mask{.causal = true, .keys = &keys};
  Calibration<Causal, B, N> cc(*causal);
  Calibration<Open, B, N> co(*open);
  Tensor<B, N, 4> x;
  for (int i = 0; i < 6; ++i) test::fill(x, rng), cc.observe(x, &keys), co.observe(x, causal_mask);
  const auto qc = cc.quantize();
  const auto qo = co.quantize();
  CHECK(test::param_names(*qc) == test::param_names(*qo));
  auto ci = test::make<InferOf<Quantized<Causal>, B, N>>();
  auto oi = test::make<InferOf<Quantized<Open>, B, N>>();
  auto unmasked = test::make<InferOf<Quantized<Open>, B, N>>();
  for (int i = 0; i < 3; ++i) {
    test::fill(x, rng);
    const auto& y = ci->forward(*qc, x, &keys);
    CHECK(test::same_bits(y, oi->forward(*qo, x, causal_mask)));
    CHECK_FALSE(test::same_bits(y, unmasked->forward(*qo, x, &keys)));
  }
}
