// Runs fixed models on fixed inputs (seeded) and writes every output as raw floats, or
// compares them with a file written by another build: `backend_dump OUT` / `backend_dump
// --compare REF`. backends_agree.sh runs the scalar build then the SIMD build. The quantized
// models' outputs are integers, and must be the same integers on every backend.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <type_traits>
#include <utility>
#include <vector>

#include <stformer/stformer.hpp>

#include "user_blocks.hpp"

#if !STFORMER_SIMD && defined(XSIMD_VERSION_MAJOR)
#error "the plain C++ backend (simd=none) must not include xsimd"
#endif

using namespace stformer;

namespace {
std::vector<float> outputs;
std::vector<std::int32_t> integers;  // compared exactly

template <class T>
void keep(const T& t) {
  outputs.insert(outputs.end(), t.begin(), t.end());
}

template <class T>
void fill(T& t, Rng& rng) {
  for (auto& x : t) x = rng.normal();
}

// Model quantized from fixed ranges instead of calibration (which runs the float model, whose
// last bits differ between backends): every range of every step `range`, the input quantized at
// int16_scale(3), every step's streams at int16_scale(12) (the first step's input too: a
// mismatch that changes nothing in a comparison of backends). The same model on every backend.
template <class O>
void fill_ranges(O& o, float range);
template <class M>
void fill_members(M& m, float range) {
  if constexpr (requires { m.first; }) fill_ranges(m.first, range), fill_members(m.rest, range);
}
template <class O>
void fill_ranges(O& o, float range) {
  if constexpr (requires { o.blocks; }) {  // a Repeat's
    for (auto& block : o.blocks) fill_ranges(block, range);
  } else if constexpr (requires { o.body; }) {  // a Residual's
    fill_ranges(o.body, range);
  } else if constexpr (requires { o.steps; }) {  // a chain's
    fill_members(o.steps, range);
  } else if constexpr (requires { o.parts; }) {  // Parallel's, Gated's
    fill_members(o.parts, range);
    if constexpr (requires { o.gate; }) o.gate = o.value = o.out = 1;
  } else {
    if constexpr (!std::is_empty_v<decltype(o.ranges)>) {
      static_assert(sizeof o.ranges % sizeof(float) == 0, "the blocks' Ranges hold floats only");
      float* v = reinterpret_cast<float*>(&o.ranges);
      std::fill(v, v + sizeof o.ranges / sizeof(float), range);
    }
    o.in = o.out = 1;
  }
}
template <class Model>
std::unique_ptr<Quantized<Model>> quantize_fixed(const Model& f) {
  using Chain = quant::ChainOf<Model>;
  quant::Observed<Chain> observed;
  [&]<size_t... I>(std::index_sequence<I...>) { (fill_ranges(step::get<I>(observed.steps), 4.0f), ...); }(std::make_index_sequence<Chain::steps>{});
  quant::Streams streams;
  streams.see(0, 3), streams.see(1, 12), streams.current = 1;
  return quant::integer_model(f, observed, streams);
}
}  // namespace

int main(int argc, char** argv) {
#if defined(__AVX512VNNI__) && defined(__GNUC__)
  if (!__builtin_cpu_supports("avx512vnni")) {
    std::puts("skipped: this CPU has no AVX-512 VNNI");
    return 77;
  }
#endif
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s OUT | --compare REF\n", argv[0]);
    return 2;
  }
  Rng rng(2024);
  constexpr size_t B = 3, N = 50;
  static Tensor<B, N, 2> pts;
  fill(pts, rng);
  KeyMask<B, N> keys = key_mask_from_lengths<B, N>({50, 17, 1});

  static SetTransformer<2, 64, 4, 16, 2> set;
  static ActsOf<SetTransformer<2, 64, 4, 16, 2>, B, N> set_acts;
  init_params(set, rng);
  keep(set_acts.forward(set, pts));
  keep(set_acts.forward(set, pts, &keys));

  static PointerModel<2, 16, 1, 64, 2> ptr;
  static ActsOf<PointerModel<2, 16, 1, 64, 2>, B, N> ptr_acts;
  init_params(ptr, rng);
  keep(ptr_acts.forward(ptr, pts));

  // The two models in integers (quantize_fixed), with a query of fixed integers: their integer
  // steps' outputs (the pointer's keys stream and logits, the set model's point y_q).
  const KeyMask<B, N>* masks[] = {nullptr, &keys};
  static auto qptr = quantize_fixed(ptr);
  using QPointer = std::remove_cvref_t<decltype(*qptr)>;
  auto& head = qptr->template get<QPointer::steps - 2>();
  for (size_t i = 0; i < 16; ++i) head.get<0>().rows(0, i) = std::int8_t(int(rng.below(255)) - 127);
  static InferOf<QPointer, B, N> qptr_infer;
  for (const KeyMask<B, N>* k : masks) {
    const Mask<B, N> mask{.keys = k};
    const auto& h = qptr_infer.forward_steps<0, QPointer::steps - 2>(*qptr, pts, mask);
    integers.insert(integers.end(), h.begin(), h.end());
    const auto& logits = qptr_infer.forward_steps<0, QPointer::steps - 1>(*qptr, pts, mask);
    integers.insert(integers.end(), logits.begin(), logits.end());
  }
  static auto qset = quantize_fixed(set);
  using QSet = std::remove_cvref_t<decltype(*qset)>;
  static InferOf<QSet, B, N> qset_infer;
  for (const KeyMask<B, N>* k : masks) {
    const auto& y = qset_infer.forward_steps<0, QSet::steps - 1>(*qset, pts, Mask<B, N>{.keys = k});
    integers.insert(integers.end(), y.begin(), y.end());
  }

  // Blocks declared from combinators (tests/user_blocks.hpp), in integers: the stream before
  // the float end, causal and key-padded.
  using UserModel = Sequential<Linear<2, 16>, user::ParallelBlock<16, 2, 32>, user::SwiGLU<16, 24>, user::LayerScaleBlock<16, 2, 32>, Linear<16, 3>>;
  static UserModel user_model;
  init_params(user_model, rng);
  for_each_param([&](const Path& at, Init, auto& t) { if (at.name().view().ends_with("gamma")) std::fill(t.begin(), t.end(), 0.7f); }, user_model);
  static auto quser = quantize_fixed(user_model);
  using QUser = std::remove_cvref_t<decltype(*quser)>;
  static InferOf<QUser, B, N> quser_infer;
  for (const Mask<B, N> mask : {Mask<B, N>{.causal = true}, Mask<B, N>{.keys = &keys}}) {
    const auto& y = quser_infer.forward_steps<0, QUser::steps - 1>(*quser, pts, mask);
    integers.insert(integers.end(), y.begin(), y.end());
  }

  static Tensor<B, 33, 40> x;
  static Tensor<B, 9, 40> m;
  fill(x, rng);
  fill(m, rng);
  static DecoderBlock<40, 5, 72> dec;
  static ActsOf<DecoderBlock<40, 5, 72>, B, 33, 9> dec_acts;
  init_params(dec, rng);
  keep(dec_acts.forward(dec, x, m));
  static EncoderBlock<40, 4, 100> enc;
  static ActsOf<EncoderBlock<40, 4, 100>, B, 33> enc_acts;
  init_params(enc, rng);
  keep(enc_acts.forward(enc, x, Mask<B, 33>{.causal = true}));

  if (std::strcmp(argv[1], "--compare") != 0) {
    FILE* f = std::fopen(argv[1], "wb");
    if (!f || std::fwrite(outputs.data(), sizeof(float), outputs.size(), f) != outputs.size() ||
        std::fwrite(integers.data(), sizeof(std::int32_t), integers.size(), f) != integers.size() || std::fclose(f) != 0) {
      std::perror(argv[1]);
      return 1;
    }
    std::printf("wrote %zu outputs and %zu integers (SIMD backend: %d)\n", outputs.size(), integers.size(), STFORMER_SIMD);
    return 0;
  }
  std::vector<float> want(outputs.size());
  std::vector<std::int32_t> want_integers(integers.size() + 1);
  FILE* f = argc > 2 ? std::fopen(argv[2], "rb") : nullptr;
  size_t n = f ? std::fread(want.data(), sizeof(float), want.size(), f) : 0;
  const size_t ni = f ? std::fread(want_integers.data(), sizeof(std::int32_t), want_integers.size(), f) : 0;
  if (n != outputs.size() || ni != integers.size()) {
    std::fprintf(stderr, "reference holds %zu outputs and %zu integers, this build computes %zu and %zu\n", n, ni, outputs.size(), integers.size());
    return 1;
  }
  for (size_t i = 0; i < ni; ++i)
    if (integers[i] != want_integers[i]) {
      std::fprintf(stderr, "integer %zu of the quantized model: %d here, %d in the reference (%s)\n", i, int(integers[i]), int(want_integers[i]),
                   kernels::qv::name());
      return 1;
    }
  double worst = 0;
  for (size_t i = 0; i < n; ++i) {
    double tol = 1e-5 * (1 + std::abs(want[i]));
    double err = std::abs(double(outputs[i]) - want[i]);
    if (!(err <= tol) && !(std::isinf(want[i]) && outputs[i] == want[i])) {
      std::fprintf(stderr, "output %zu: %.9g here, %.9g in the reference\n", i, outputs[i], want[i]);
      return 1;
    }
    if (std::isfinite(err)) worst = std::max(worst, err / (1 + std::abs(want[i])));
  }
  std::printf("%zu outputs agree, largest relative difference %.3g; %zu integers the same (%s)\n", n, worst, ni, kernels::qv::name());
  return 0;
}
