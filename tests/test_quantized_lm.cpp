// The language models in integers, and with int8 embedding and head (see test_quantized.cpp).
#include <doctest/doctest.h>

#include "quantized.hpp"

TEST_CASE("Quantized language model: integers from the ids to the logits, within 0.1 of the float model's log-probabilities; saved and loaded, the same logits") {
  constexpr size_t V = 300, L = 12, D = 32, H = 4, F = 64, Blocks = 2, B = 4;
  using FloatLm = LanguageModel<V, L, D, H, F, Blocks>;
  using QLm = Quantized<FloatLm>;
  Rng rng(40, 0);
  auto f = std::make_unique<FloatLm>();
  init_params(*f, rng);
  IdTensor<B, L> ids;
  for (auto& id : ids) id = std::int32_t(rng.below(V));
  auto acts = std::make_unique<ActsOf<FloatLm, B>>();
  const Tensor<B, 1, V> want = acts->forward(*f, ids);
  Calibration<FloatLm, B, L> calibration(*f);
  calibration.observe(ids);
  const auto q = calibration.quantize();
  auto qi = std::make_unique<InferOf<QLm, B, L>>();
  const Tensor<B, 1, V> got = qi->forward(*q, ids);
  Tensor<B, 1, V> lw = want, lg = got;
  double worst = 0;
  for (size_t b = 0; b < B; ++b) {
    kernels::log_softmax_row<V>(lw.data() + b * V), kernels::log_softmax_row<V>(lg.data() + b * V);
    for (size_t v = 0; v < V; ++v) worst = std::max(worst, double(std::abs(lw(b, 0, v) - lg(b, 0, v))));
  }
  MESSAGE("language model: largest log-probability difference from float " << worst << ", logits' relative rms " << rel_rms(want, got, 1.0)
                                                                         << "; plans, a window: float " << sizeof(InferOf<FloatLm, 1, L>)
                                                                         << " B, int8 " << sizeof(InferOf<QLm, 1, L>) << " B");
  CHECK(worst < 0.1);
  CHECK(rel_rms(want, got, 1.0) < 0.03);
  // from the ids, integers only: every step but the last (Dequantize)
  auto hi = std::make_unique<InferOf<QLm, B, L>>();
  const TensorOf<std::int16_t, B, 1, V> logits = hi->template forward_steps<0, QLm::steps - 1>(*q, ids);
  CHECK(rel_rms(want, logits, q->template get<QLm::steps - 1>().scale(0)) < 0.03);

  const auto path = std::filesystem::temp_directory_path() / "stformer_test_quantized_lm.safetensors";
  save_params(path, *q);
  auto loaded = std::make_unique<QLm>();
  load_quantized(path, *loaded);
  auto li = std::make_unique<InferOf<QLm, B, L>>();
  const auto& again = li->forward(*loaded, ids);
  CHECK(std::equal(again.begin(), again.end(), got.begin()));
  std::filesystem::remove(path);
}

TEST_CASE("A head whose phase dominates the pass: its accumulators in tiles of columns, Dequantize over its input; the same integers, a plan below the float one") {
  // The PyTorch tutorial's language model in small (post-norm ReLU layers, a head of 300 words):
  // the int16 logits [8, 300] and their floats are the pass's largest phase, so the head takes
  // 8 rows and 128 of its columns at a time, and the float end writes over the int16 logits.
  constexpr size_t V = 300, L = 8, D = 32, B = 1;
  using M = Sequential<Named<"encoder", Embedding<V, D>>, PositionalEncoding<L, D>, Named<"layers", Repeat<EncoderBlock<D, 2, 64, PostNorm<>>, 2>>,
                       Named<"decoder", Linear<D, V>>>;
  using Q = Quantized<M>;
  using Plan = InferOf<Q, B, L>;
  static_assert(std::is_same_v<typename Plan::Layout::template ScratchAt<3>, TensorOf<std::int32_t, 8, 128>>, "the head's tile: 8 rows, 128 columns");
  constexpr PlanRow out = Plan::plan()[4];
  static_assert(out.over_input && out.out_offset == sizeof(Plan) - sizeof(Tensor<B, L, V>) && out.in_offset == sizeof(Plan) - sizeof(TensorOf<std::int16_t, B, L, V>),
                "Dequantize at the arena's end, its int16 input in the second half of its float output");
  static_assert(sizeof(Plan) == sizeof(Tensor<B, L, V>) && sizeof(Plan) < sizeof(InferOf<M, B, L>));
  Rng rng(41, 0);
  auto f = std::make_unique<M>();
  init_params(*f, rng);
  IdTensor<B, L> ids;
  Calibration<M, B, L> calibration(*f);
  for (int i = 0; i < 4; ++i) {
    for (auto& id : ids) id = std::int32_t(rng.below(V));
    calibration.observe(ids, Mask<B, L>{.causal = true});
  }
  const auto q = calibration.quantize();
  auto pass = std::make_unique<Plan>();
  for (auto& id : ids) id = std::int32_t(rng.below(V));
  const Mask<B, L> causal{.causal = true};
  // the head's input, and its logits from the whole tile (QLinear::add_to, all 300 columns)
  const TensorOf<std::int16_t, B, L, D> h = pass->template forward_steps<0, 3>(*q, ids, causal);
  TensorOf<std::int32_t, B * L, V> acc;
  TensorOf<std::int16_t, B, L, V> want;
  q->template get<3>().template add_to<B * L, true>(h.data(), acc.data(), want.data());
  const TensorOf<std::int16_t, B, L, V> logits = pass->template forward_steps<0, 4>(*q, ids, causal);
  CHECK(std::equal(logits.begin(), logits.end(), want.begin()));
  size_t saturated = 0;
  for (const std::int16_t v : want) saturated += v == INT16_MIN || v == INT16_MAX;
  CHECK(saturated < want.size() / 100);  // the logits span the stream's range, not its ends
  const auto& y = pass->forward(*q, ids, causal);
  const float s = q->template get<4>().scale(0);
  for (size_t i = 0; i < y.size(); ++i) CHECK_MESSAGE(y.data()[i] == s * float(want.data()[i]), i);
  // Dequantize with its input at its output's start (the arena's other end in a longer chain):
  // the same floats
  struct alignas(64) Bytes {
    unsigned char b[sizeof(Tensor<B, L, V>)];
  };
  auto bytes = std::make_unique<Bytes>();
  const auto* x = ::new (bytes->b) TensorOf<std::int16_t, B, L, V>(want);
  auto* z = ::new (bytes->b) Tensor<B, L, V>;
  q->template get<4>().run(*x, *z, Nothing{}, causal, Serial{});
  for (size_t i = 0; i < z->size(); ++i) CHECK_MESSAGE(z->data()[i] == s * float(want.data()[i]), i);
}

TEST_CASE("LanguageModelW8: int8 embedding and head within 1% of the float model's logits; saved and loaded, the same outputs") {
  constexpr size_t V = 300, L = 8, D = 32, H = 4, F = 64;
  using M = LanguageModel<V, L, D, H, F, 2>;
  using M8 = LanguageModelW8<V, L, D, H, F, 2>;
  Rng rng(37, 0);
  auto f = std::make_unique<M>();
  init_params(*f, rng);
  auto q = std::make_unique<M8>();
  quantize_weights(*f, *q);
  IdTensor<3, L> ids;
  for (auto& id : ids) id = std::int32_t(rng.below(V));
  auto fi = std::make_unique<InferOf<M, 3>>();
  auto qi = std::make_unique<InferOf<M8, 3>>();
  const auto& want = fi->forward(*f, ids);
  const Tensor<3, 1, V> got = qi->forward(*q, ids);
  CHECK(rel_rms(want, got, 1.0) < 0.01);
  double worst = 0;
  for (size_t i = 0; i < want.size(); ++i) worst = std::max(worst, double(std::abs(want.data()[i] - got.data()[i])));
  CHECK(worst < 0.05 * quant::max_abs(want));

  const auto path = std::filesystem::temp_directory_path() / "stformer_test_lm8.safetensors";
  save_params(path, *q);
  auto loaded = std::make_unique<M8>();
  load_quantized(path, *loaded);
  auto li = std::make_unique<InferOf<M8, 3>>();
  const auto& again = li->forward(*loaded, ids);
  CHECK(std::equal(again.begin(), again.end(), got.begin()));
  auto into_float = std::make_unique<M>();  // the int8 file is not a float model
  std::string error;
  try {
    load_params(safetensors::File::read(path), *into_float);
  } catch (const std::runtime_error& e) {
    error = e.what();
  }
  CHECK(error.find("tensor 'embedding.weight' has dtype I8, the model expects F32") != std::string::npos);
  std::filesystem::remove(path);

  IdTensor<3, L> bad = ids;
  bad(1, 2) = std::int32_t(V);
  CHECK_THROWS_AS(qi->forward(*q, bad), std::invalid_argument);

  // one window (Int8Linear's one-row path: the pooled row rounded to int16) against the same
  // window in a batch (float panels): the same logits within 1e-4 of the largest
  IdTensor<1, L> one;
  std::copy_n(ids.data() + L, L, one.data());
  auto q1 = std::make_unique<InferOf<M8, 1>>();
  const auto& single = q1->forward(*q, one);
  double far = 0;
  for (size_t v = 0; v < V; ++v) far = std::max(far, double(std::abs(single(0, 0, v) - got(1, 0, v))));
  CHECK(far < 1e-4 * quant::max_abs(got));
  MESSAGE("one window against the batch's: largest difference " << far / quant::max_abs(got) << " of the largest logit");
}
