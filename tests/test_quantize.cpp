// quantize() of composed models (stformer/quantized/quantize.hpp): float rows, activation steps, a
// set model and a ViT-style classifier close to the float models (see test_quantized.cpp).
#include <doctest/doctest.h>

#include "quantized.hpp"

TEST_CASE("quantize: a model of float rows (QuantizeInput first), its outputs close to the float model's, unnamed steps by their index") {
  constexpr size_t B = 4, N = 10;
  using M = Sequential<Linear<3, 16>, EncoderBlock<16, 2, 32>, MeanPool<16>, Linear<16, 4>>;
  auto p = test::make<M>();
  Rng rng(74);
  init_params(*p, rng);
  test::randomize(*p, rng);
  // calibration with the padding the model will see: a mean over one row spans more than a
  // mean over ten
  const auto keys = test::lengths_mask<B, N>({10, 7, 3, 1});
  Calibration<M, B, N> cal(*p);
  Tensor<B, N, 3> x;
  for (int i = 0; i < 8; ++i) test::fill(x, rng), cal.observe(x, &keys);
  const auto q = cal.quantize();
  using Q = Quantized<M>;
  const auto names = test::param_names(*q);
  CHECK(names.front() == "input.scale");
  for (const char* n : {"0.coarse.weight", "1.attn.wq.weight", "2.requant.shift", "3.fine.bias", "output.scale"})
    CHECK_MESSAGE(std::find(names.begin(), names.end(), n) != names.end(), n);
  CHECK(InferOf<Q, B, N>::plan()[0].name == std::string_view("input"));
  // bad calibration: nothing observed, an input that is not finite, a model that gives NaN
  Calibration<M, B, N> empty(*p);
  CHECK_THROWS_WITH(empty.quantize(), "Calibration::quantize: no calibration batch observed");
  x(1, 2, 0) = std::nanf("");
  CHECK_THROWS_WITH(empty.observe(x), "Calibration::observe: the input holds a NaN or an infinity");
  x(1, 2, 0) = 0.5f;
  auto broken = std::make_unique<M>(*p);
  broken->get<0>().bias(3) = std::numeric_limits<float>::infinity();
  Calibration<M, B, N> bad(*broken);
  CHECK_THROWS_WITH(bad.observe(x), "Calibration::observe: a step's output is not finite (NaN or infinity): the model's parameters are");
  const double gap = rms_gap(*p, *q, x, Mask<B, N>{.keys = &keys}, rng);
  MESSAGE("float rows -> 4 outputs: int8 within " << 100 * gap << "% rms of the float model");
  CHECK(gap < 0.03);
}

TEST_CASE("quantize: activation steps (GELU (tanh), SiLU, ReLU, GELU) between linear layers and a LayerNorm, in int16 fixed point, close to the float model") {
  constexpr size_t B = 4, N = 5;
  using M = Sequential<Linear<4, 12>, GELUTanh<12>, SiLU<12>, LayerNorm<12>, ReLU<12>, GELU<12>, Linear<12, 2>>;
  auto p = test::make<M>();
  Rng rng(75);
  init_params(*p, rng);
  test::randomize(*p, rng);
  Calibration<M, B, N> cal(*p);
  Tensor<B, N, 4> x;
  for (int i = 0; i < 8; ++i) test::fill(x, rng), cal.observe(x);
  const auto q = cal.quantize();
  const auto names = test::param_names(*q);
  for (const char* n : {"1.table", "2.table", "4.table", "5.table"})
    CHECK_MESSAGE(std::find(names.begin(), names.end(), n) != names.end(), n);
  const auto keys = test::lengths_mask<B, N>({5, 5, 5, 5});
  const double gap = rms_gap(*p, *q, x, Mask<B, N>{.keys = &keys}, rng);
  MESSAGE("activation steps: int8 within " << 100 * gap << "% rms of the float model");
  CHECK(gap < 0.03);
}

TEST_CASE("quantize: a set model of SAB, ISAB, PMA, ScaleNorm and FeedForward steps and a head without bias, key-padded, close to the float model") {
  constexpr size_t B = 4, N = 12;
  using M = Sequential<Linear<2, 16>, SAB<16, 2>, ISAB<16, 2, 4>, PMA<16, 2, 2>, ScaleNorm<16>, FeedForward<16, 32>,
                       Linear<16, 3, Init::xavier_normal, Bias::no>>;
  auto p = test::make<M>();
  Rng rng(75);
  init_params(*p, rng);
  const auto keys = test::lengths_mask<B, N>({12, 9, 5, 2});
  Calibration<M, B, N> cal(*p);
  Tensor<B, N, 2> x;
  for (int i = 0; i < 8; ++i) test::fill(x, rng), cal.observe(x, &keys);
  const auto q = cal.quantize();
  using Q = Quantized<M>;
  const auto names = test::param_names(*q);
  for (const char* n : {"1.mab.attn.wq.weight", "2.inducing", "2.mab2.fc.bias", "3.seeds", "4.out_scale", "5.fc1.weight", "6.fine.weight"})
    CHECK_MESSAGE(std::find(names.begin(), names.end(), n) != names.end(), n);
  const double gap = rms_gap(*p, *q, x, Mask<B, N>{.keys = &keys}, rng);
  MESSAGE("set model -> 2 × 3 outputs: int8 within " << 100 * gap << "% rms of the float model; plans: float "
                                                     << sizeof(InferOf<M, 1, N>) << " B, int8 " << sizeof(InferOf<Q, 1, N>) << " B");
  CHECK(gap < 0.03);
}

TEST_CASE("quantize: a ViT-style classifier of rows (ClassToken, learned positions, encoder blocks, a final LayerNorm, FirstToken), key-padded, within 3% rms of the float model; saved and loaded, the same integers") {
  constexpr size_t B = 4, N = 8, In = 6, D = 16, C = 3;
  using M = Sequential<Linear<In, D>, ClassToken<D>, PositionEmbedding<N + 1, D>, Named<"blocks", Repeat<EncoderBlock<D, 2, 32>, 2>>,
                       Named<"norm", LayerNorm<D>>, FirstToken<D>, Named<"head", Linear<D, C>>>;
  using Q = Quantized<M>;
  static_assert(std::is_same_v<Q::BlockAt<2>, QClassToken<D>> && std::is_same_v<Q::BlockAt<6>, QFirstToken<D>>,
                "input, 0 (QFineLinear), the class token, the positions, blocks, norm, the first row, head, output");
  auto p = test::make<M>();
  Rng rng(78);
  init_params(*p, rng);
  test::randomize(*p, rng);  // the class token too (ClassToken starts at zeros)
  const auto keys = test::lengths_mask<B, N>({8, 6, 3, 1});
  Calibration<M, B, N> cal(*p);
  Tensor<B, N, In> x;
  for (int i = 0; i < 8; ++i) test::fill(x, rng), cal.observe(x, &keys);
  const auto q = cal.quantize();
  const auto names = test::param_names(*q);
  for (const char* n : {"input.scale", "0.fine.weight", "1.cls_token", "2.table", "blocks.1.attn.wq.weight", "norm.weight", "head.fine.weight", "output.scale"})
    CHECK_MESSAGE(std::find(names.begin(), names.end(), n) != names.end(), n);
  const double gap = rms_gap(*p, *q, x, Mask<B, N>{.keys = &keys}, rng);
  MESSAGE("ViT-style classifier -> " << C << " logits, key-padded: int8 within " << 100 * gap << "% rms of the float model; plans: float "
                                     << sizeof(InferOf<M, 1, N>) << " B, int8 " << sizeof(InferOf<Q, 1, N>) << " B");
  CHECK(gap < 0.03);

  // The keys shifted past the class token: batch row 2 computes what its 3 rows alone do, the
  // same integers whatever its padded rows hold; without the mask they count.
  auto qi = test::make<InferOf<Q, B, N>>();
  test::fill(x, rng);
  const Tensor<B, 1, C> y = qi->forward(*q, x, &keys);
  for (size_t n = 3; n < N; ++n)
    for (size_t k = 0; k < In; ++k) x(2, n, k) = 5.0f * rng.normal();
  const Tensor<B, 1, C> repadded = qi->forward(*q, x, &keys);
  Tensor<1, 3, In> alone;
  for (size_t n = 0; n < 3; ++n)
    for (size_t k = 0; k < In; ++k) alone(0, n, k) = x(2, n, k);
  auto short_qi = test::make<InferOf<Q, 1, 3>>();
  const auto& want = short_qi->forward(*q, alone);
  const Tensor<B, 1, C> unmasked = qi->forward(*q, x);
  double moved = 0;
  for (size_t c = 0; c < C; ++c) {
    CHECK(repadded(2, 0, c) == y(2, 0, c));
    CHECK(want(0, 0, c) == y(2, 0, c));
    moved += std::abs(unmasked(2, 0, c) - y(2, 0, c));
  }
  CHECK(moved > 1e-3);

  // saved and loaded: the token in int16, the same outputs
  const auto path = std::filesystem::temp_directory_path() / "stformer_quantized_vit.safetensors";
  save_params(path, *q);
  const auto file = safetensors::File::read(path);
  CHECK(file.at("1.cls_token").dtype == safetensors::Dtype::I16);
  CHECK(file.at("1.cls_token").shape == std::vector<size_t>{1, 1, D});
  auto back = test::make<Q>();
  load_quantized(file, *back);
  std::filesystem::remove(path);
  const Tensor<B, 1, C> before = qi->forward(*q, x, &keys);
  CHECK(test::same_bits(before, qi->forward(*back, x, &keys)));
}
