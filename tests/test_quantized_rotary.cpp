// The llama family's attention in integers (stformer/quantized/rotary_attention.hpp): the Q14
// table of turns the compiler makes against std::cos and std::sin, and QRotaryAttention against
// the float RotaryAttention on its own inputs rounded to int8 (only the block's quantization
// measured), with int8 rows in (after a norm) and an int16 stream in, grouped, multi-query and
// multi-head, pairs and halves, causal with and without a key mask; a llama2.c-shaped model
// quantized whole (Quantized<Model>) against the float model.
#include <doctest/doctest.h>

#include <stformer/quantized/rotary_attention.hpp>

#include "quantized.hpp"
#include "user_blocks.hpp"

namespace {

template <size_t L, size_t Dh, Theta T>
double table_error() {
  const auto& t = q_rotary_table<L, Dh, T>;
  const double base = double(std::bit_cast<float>(std::uint32_t(T)));
  double worst = 0;
  for (size_t p = 0; p < L; ++p)
    for (size_t i = 0; i < Dh / 2; ++i) {
      const double angle = double(p) * std::pow(base, -double(2 * i) / double(Dh));
      worst = std::max({worst, std::abs(t.cos[p][i] - 16384.0 * std::cos(angle)), std::abs(t.sin[p][i] - 16384.0 * std::sin(angle))});
    }
  return worst;
}

// The block of F in integers on x [B, N, D] (float rows and their int8 xq at sx) under `mask`
// (causal always): the relative rms of its output against the float block's, rows in and a
// stream in (the larger).
template <class F, size_t B, size_t N, size_t D>
double rotary_error(const F& f, const Tensor<B, N, D>& x, const TensorOf<std::int8_t, B, N, D>& xq, const Mask<B, N>& mask) {
  using Stream = typename Int8Of<F>::type;  // an int16 stream in
  using Rows = typename RowsReader<Stream>::type;  // int8 rows in
  auto acts = std::make_unique<typename F::template Acts<B, N>>();
  const auto& want = acts->forward(f, x, mask);
  typename Rows::Ranges r;
  r.observe(f, *acts, x, want);
  const float so = quant::scale_for(quant::max_abs(want), 32767);
  double worst = 0;
  {
    auto q = std::make_unique<Rows>();
    q->from_float(f, r, 0.0f, so);
    auto w = std::make_unique<typename Rows::template Work<B, N, 16>>();
    TensorOf<std::int8_t, B, N, D> a = xq;  // (the rows become the queries, then the heads, in place)
    TensorOf<std::int16_t, B, N, D> out;
    q->run(a, out, *w, mask);
    worst = std::max(worst, rel_rms(want, out, so));
  }
  {
    const float sx = quant::int16_scale(quant::max_abs(x));
    auto q = std::make_unique<Stream>();
    q->from_float(f, r, sx, so);
    auto w = std::make_unique<typename Stream::template Work<B, N, 16>>();
    TensorOf<std::int16_t, B, N, D> h;
    quantize_to(x, sx, h);
    q->forward_in_place(h, *w, mask);
    worst = std::max(worst, rel_rms(want, h, so));
  }
  return worst;
}

template <class F>
void check_rotary(std::uint64_t seed) {
  constexpr size_t B = 2, N = 20, D = F::width;
  Rng rng(seed, 0);
  auto f = std::make_unique<F>();
  test::randomize(*f, rng);
  Tensor<B, N, D> x;
  TensorOf<std::int8_t, B, N, D> xq;
  int8_rows(rng, x, xq);
  const KeyMask<B, N> keys = key_mask_from_lengths<B, N>({13, 20});
  for (const Mask<B, N>& mask : {Mask<B, N>{.causal = true}, Mask<B, N>{.causal = true, .keys = &keys}}) {
    const double e = rotary_error(*f, x, xq, mask);
    const std::string what = F::declaration() + (mask.keys ? ", causal, key mask" : ", causal");
    INFO(what);
    MESSAGE(what << ": " << e);
    CHECK(e < 0.03);
  }
}

}  // namespace

TEST_CASE("q_rotary_table: the compiler's Q14 turns within 0.5 of 16384·cos and 16384·sin (rounded to nearest)") {
  CHECK(table_error<64, 8, theta(10000.0f)>() <= 0.5 + 1e-6);
  CHECK(table_error<512, 8, theta(10000.0f)>() <= 0.5 + 1e-6);
  CHECK(table_error<100, 16, theta(500.0f)>() <= 0.5 + 1e-6);
  CHECK(table_error<32, 48, theta(500000.0f)>() <= 0.5 + 1e-6);
  static_assert(q_rotary_table<4, 8, theta(10000.0f)>.cos[0][0] == 16384 && q_rotary_table<4, 8, theta(10000.0f)>.sin[0][3] == 0);
}

TEST_CASE("QRotaryAttention: the float block within 3% rms, rows and a stream in; grouped, multi-query, multi-head; pairs and halves") {
  check_rotary<RotaryAttention<24, 6, 2, 20>>(61);
  check_rotary<RotaryAttention<16, 4, 1, 20, Rotation::halves, theta(500.0f), Bias::yes>>(62);
  check_rotary<RotaryAttention<16, 4, 4, 24>>(63);
}

TEST_CASE("Quantized<Model> of a llama2.c-shaped model: the logits within 5% rms of the float model's, the same argmax at 95% of positions") {
  constexpr size_t V = 48, B = 4, N = 24;
  using M = user::Llama<V, 32, 8, 2, 64, N>;  // llama2.c's shape, 2 layers
  using Q = Quantized<M>;
  Rng rng(64, 0);
  auto f = std::make_unique<M>();
  init_params(*f, rng);
  const Mask<B, N> causal{.causal = true};
  IdTensor<B, N> ids;
  auto calibration = std::make_unique<Calibration<M, B, N>>(*f);
  for (int i = 0; i < 4; ++i) {
    for (auto& id : ids) id = std::int32_t(rng.below(V));
    calibration->observe(ids, causal);
  }
  const auto q = calibration->quantize();
  auto fi = std::make_unique<InferOf<M, B, N>>();
  auto qi = std::make_unique<InferOf<Q, B, N>>();
  size_t same = 0, rows = 0;
  double err = 0, norm = 0;
  for (int round = 0; round < 4; ++round) {
    for (auto& id : ids) id = std::int32_t(rng.below(V));
    const auto& yf = fi->forward(*f, ids, causal);
    const auto& yq = qi->forward(*q, ids, causal);
    for (size_t r = 0; r < B * N; ++r, ++rows) {
      const float *a = yf.data() + r * V, *b = yq.data() + r * V;
      same += std::max_element(a, a + V) - a == std::max_element(b, b + V) - b;
      for (size_t c = 0; c < V; ++c) err += std::pow(double(a[c]) - b[c], 2), norm += std::pow(double(a[c]), 2);
    }
  }
  const double rms = std::sqrt(err / norm), agree = double(same) / double(rows);
  MESSAGE("llama2.c-shaped model in integers: logits within " << rms << " rms, argmax agreement " << agree);
  CHECK(rms < 0.05);
  CHECK(agree >= 0.95);
}
