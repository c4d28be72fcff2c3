// What the tests of the blocks and models in integers share (tests/test_quantized*.cpp and
// tests/test_quantize*.cpp, one program: `quantized`): a quantized block's output against its
// float block's, and SPEC's pointer and set models as initialised, calibrated and quantized.
#pragma once

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include <stformer/codegen/c_api.hpp>
#include <stformer/quantized/checkpoint.hpp>
#include <stformer/quantized/weight_int8.hpp>
#include <stformer/quantized/quantize.hpp>
#include <stformer/stformer.hpp>

#include "util.hpp"

using namespace stformer;

namespace {

// ‖want − s·got‖ / ‖want‖ (got in integers, s its scale; z its zero point)
template <class W, class G>
double rel_rms(const W& want, const G& got, double s, double z = 0) {
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double d = want.data()[i] - s * (double(got.data()[i]) - z);
    num += d * d, den += double(want.data()[i]) * want.data()[i];
  }
  return std::sqrt(num / den);
}

template <class T, class X>
void quantize_to(const X& x, float s, T& q) {
  quant::quantize(x.data(), x.size(), s, q.data());
}
template <class X, class Q>
void dequantize(const Q& q, float s, X& x) {
  for (size_t i = 0; i < x.size(); ++i) x.data()[i] = s * float(q.data()[i]);
}
// q ← round(x / s), then x ← s·q: x holds the values its integers stand for (a block's own error
// measured apart from its input's rounding).
template <class X, class Q>
void round_through(X& x, float s, Q& q) {
  quantize_to(x, s, q);
  dequantize(q, s, x);
}


// The rms of the quantized model's outputs less the float model's, relative to the float
// model's, over 4 batches of random rows x under `mask`.
template <class M, class Q, size_t B, size_t N, size_t W>
double rms_gap(const M& p, const Q& q, Tensor<B, N, W>& x, const Mask<B, N>& mask, Rng& rng) {
  auto fi = test::make<InferOf<M, B, N>>();
  auto qi = test::make<InferOf<Q, B, N>>();
  double err = 0, norm = 0;
  for (int i = 0; i < 4; ++i) {
    test::fill(x, rng);
    const auto& yf = fi->forward(p, x, mask);
    const auto& yq = qi->forward(q, x, mask);
    for (size_t k = 0; k < yf.size(); ++k) err += std::pow(yf.data()[k] - yq.data()[k], 2), norm += std::pow(yf.data()[k], 2);
  }
  return std::sqrt(err / norm);
}
}  // namespace

namespace {

// A float block's input rows: ScaleNorm-like (norm √D·0.8), quantized to int8 and back.
template <size_t B, size_t N, size_t D>
float int8_rows(Rng& rng, Tensor<B, N, D>& x, TensorOf<std::int8_t, B, N, D>& xq) {
  test::fill(x, rng, 0.8f);
  const float s = quant::scale_for(quant::max_abs(x));
  round_through(x, s, xq);
  return s;
}

}  // namespace

template <class Act>
const char* act_name() {
  if constexpr (std::is_same_v<Act, act::ReLU>) return "ReLU";
  if constexpr (std::is_same_v<Act, act::GELU>) return "GELU";
  if constexpr (std::is_same_v<Act, act::GELUTanh>) return "GELU (tanh)";
  if constexpr (std::is_same_v<Act, act::SiLU>) return "SiLU";
  if constexpr (std::is_same_v<Act, act::Tanh>) return "Tanh";
}

namespace {

constexpr size_t Sets = 4, Points = 50;
using FloatPointer = PointerModel<2, 16, 1, 64, 2>;
using QPointer = Quantized<FloatPointer>;

// SPEC's pointer model as initialised (seed 36), calibrated on 4 sets and quantized.
struct PointerFixture {
  std::unique_ptr<FloatPointer> f = std::make_unique<FloatPointer>();
  std::unique_ptr<QPointer> q;
  Tensor<Sets, Points, 2> x;

  PointerFixture() {
    Rng rng(36, 0);
    init_params(*f, rng);
    test::fill(x, rng, 1.5f);
    Calibration<FloatPointer, Sets, Points> calibration(*f);
    calibration.observe(x);
    q = calibration.quantize();
  }
};

}  // namespace

namespace {
// A set model as initialised (seed 38), 3 sets of 40 points, once whole and once key-padded,
// calibrated on both.
struct SetFixture {
  static constexpr size_t B = 3, N = 40;
  using FloatSet = SetTransformer<2, 32, 4, 8, 2>;
  using QSet = Quantized<FloatSet>;
  std::unique_ptr<FloatSet> f = std::make_unique<FloatSet>();
  Tensor<B, N, 2> x;
  KeyMask<B, N> keys = key_mask_from_lengths<B, N>({N, 25, 9});
  std::unique_ptr<ActsOf<FloatSet, B, N>> acts = std::make_unique<ActsOf<FloatSet, B, N>>();
  std::unique_ptr<QSet> q;
  std::unique_ptr<Calibration<FloatSet, B, N>> calibration;
  std::array<const KeyMask<B, N>*, 2> masks{nullptr, &keys};

  SetFixture() {
    Rng rng(38, 0);
    init_params(*f, rng);
    test::fill(x, rng, 1.5f);
    calibration = std::make_unique<Calibration<FloatSet, B, N>>(*f);
    for (const KeyMask<B, N>* mask : masks) calibration->observe(x, mask);
    q = calibration->quantize();
  }
};
}  // namespace
