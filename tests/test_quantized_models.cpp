// SPEC's pointer and set models in integers: quantize → save → load gives the same outputs, bad
// quantized checkpoints refused, the bounds and requantizations checked, close to the float
// models (see test_quantized.cpp).
#include <doctest/doctest.h>

#include "quantized.hpp"

namespace {

// The model's tensors into a file, with one changed by edit(name, dtype, bytes) (or dropped
// when it returns false).
template <class Edit>
std::filesystem::path write_edited(const QPointer& q, const std::string& file, Edit edit) {
  safetensors::Writer w;
  for_each_param(
      [&](const Path& path, Init, const auto& t) {
        std::string name(path.name().view());
        auto dtype = detail::dtype_of<std::remove_cvref_t<decltype(t)>>();
        const auto* p = reinterpret_cast<const std::byte*>(t.data());
        std::vector<std::byte> bytes(p, p + t.size() * sizeof(*t.data()));
        std::vector<size_t> shape(t.shape().begin(), t.shape().end());
        if (edit(name, dtype, bytes)) w.add(name, dtype, shape, bytes);
      },
      q);
  const auto path = std::filesystem::temp_directory_path() / file;
  w.write(path);
  return path;
}

std::string load_error(const std::filesystem::path& path) {
  auto q = std::make_unique<QPointer>();
  try {
    load_quantized(path, *q);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("Quantized pointer model: quantize → save → load gives the same outputs") {
  PointerFixture m;
  auto qi = std::make_unique<InferOf<QPointer, Sets, Points>>();
  const Tensor<Sets, 1, Points> logp = qi->forward(*m.q, m.x);
  const auto path = std::filesystem::temp_directory_path() / "stformer_test_quantized.safetensors";
  save_params(path, *m.q);
  auto loaded = std::make_unique<QPointer>();
  load_quantized(path, *loaded);
  auto li = std::make_unique<InferOf<QPointer, Sets, Points>>();
  const auto& again = li->forward(*loaded, m.x);
  CHECK(std::equal(again.begin(), again.end(), logp.begin()));
  std::filesystem::remove(path);
}

TEST_CASE("Quantized set model: within 2% of the float model's output, key-padded too; quantize → save → load gives the same outputs") {
  SetFixture m;
  constexpr size_t B = SetFixture::B, N = SetFixture::N;
  using QSet = SetFixture::QSet;
  const auto& [f, x, keys, acts, q] = std::tie(m.f, m.x, m.keys, m.acts, m.q);
  auto qi = std::make_unique<InferOf<QSet, B, N>>();
  for (const KeyMask<B, N>* mask : m.masks) {
    const Tensor<B, 1, 2> want = acts->forward(*f, x, mask);
    const auto& got = qi->forward(*q, x, mask);
    INFO("key-padded ", mask != nullptr);
    CHECK(rel_rms(want, got, 1.0) < 0.02);
  }
  const Tensor<B, 1, 2> y = qi->forward(*q, x, &keys);
  const auto path = std::filesystem::temp_directory_path() / "stformer_test_quantized_set.safetensors";
  save_params(path, *q);
  auto loaded = std::make_unique<QSet>();
  load_quantized(path, *loaded);
  auto li = std::make_unique<InferOf<QSet, B, N>>();
  const auto& again = li->forward(*loaded, x, &keys);
  CHECK(std::equal(again.begin(), again.end(), y.begin()));
  std::filesystem::remove(path);
}

TEST_CASE("load_quantized refuses a missing scale, a wrong dtype, a NaN, and integers and scales out of their bounds, naming the tensor and entry") {
  PointerFixture m;
  const auto set_float = [](std::vector<std::byte>& b, float v) { std::memcpy(b.data(), &v, sizeof v); };
  // entry i of an I32 (or I8) tensor set to v
  const auto set = [](std::vector<std::byte>& b, size_t i, auto v) { std::memcpy(b.data() + i * sizeof v, &v, sizeof v); };
  const auto edit_one = [](const char* tensor, auto change) {
    return [=](const std::string& n, safetensors::Dtype&, std::vector<std::byte>& b) {
      if (n == tensor) change(b);
      return true;
    };
  };
  struct Case {
    const char* file;
    std::string want;
    std::function<bool(const std::string&, safetensors::Dtype&, std::vector<std::byte>&)> edit;
  };
  const Case cases[] = {
      {"q_missing.safetensors", "tensor 'sn_v.out_scale' is missing",
       [](const std::string& n, auto&, auto&) { return n != "sn_v.out_scale"; }},
      {"q_dtype.safetensors", "tensor 'proj.coarse.weight' has dtype U8, the model expects I8",
       [](const std::string& n, auto& d, auto&) {
         if (n == "proj.coarse.weight") d = safetensors::Dtype::U8;
         return true;
       }},
      {"q_zero.safetensors", "tensor 'input.scale' entry 0 is 0, out of bounds: a scale is in [2^-64, 2^64]",
       edit_one("input.scale", [&](auto& b) { set_float(b, 0.0f); })},
      {"q_negative.safetensors", "tensor 'blocks.1.attn.v_scale' entry 0 is -0.5, out of bounds: a scale",
       edit_one("blocks.1.attn.v_scale", [&](auto& b) { set_float(b, -0.5f); })},
      {"q_huge_scale.safetensors", "tensor 'blocks.0.attn.wq.weight_scale' entry 3 is 1.000000015e+30, out of bounds: a scale",
       edit_one("blocks.0.attn.wq.weight_scale", [&](auto& b) { set(b, 3, 1e30f); })},
      {"q_denormal_scale.safetensors", "tensor 'blocks.0.attn.wq.weight_scale' entry 0 is 9.99966",
       edit_one("blocks.0.attn.wq.weight_scale", [&](auto& b) { set(b, 0, 1e-41f); })},
      {"q_bias.safetensors", "tensor 'blocks.0.attn.wq.bias' entry 2 is 2147483647, out of bounds: a bias b_c is within |b_c| + x·Σ_k|W_ck| < 2^31",
       edit_one("blocks.0.attn.wq.bias", [&](auto& b) { set(b, 2, std::int32_t(INT32_MAX)); })},
      {"q_bias_min.safetensors", "tensor 'proj.fine.bias' entry 0 is -2147483648, out of bounds: a bias",
       edit_one("proj.fine.bias", [&](auto& b) { set(b, 0, std::int32_t(INT32_MIN)); })},
      {"q_weight.safetensors", "tensor 'blocks.1.attn.wo.weight' entry 5 is -128, out of bounds: an int8 weight is in [-127, 127]",
       edit_one("blocks.1.attn.wo.weight", [&](auto& b) { set(b, 5, std::int8_t(-128)); })},
      {"q_multiplier.safetensors", "tensor 'blocks.0.attn.wk.requant.multiplier' entry 1 is 5, out of bounds: a multiplier is 0 or in [2^30, 2^31)",
       edit_one("blocks.0.attn.wk.requant.multiplier", [&](auto& b) { set(b, 1, std::int32_t(5)); })},
      {"q_negative_multiplier.safetensors", "tensor 'blocks.0.attn.exponent.multiplier' entry 0 is -1073741824, out of bounds: a multiplier",
       edit_one("blocks.0.attn.exponent.multiplier", [&](auto& b) { set(b, 0, std::int32_t(-(1 << 30))); })},
      {"q_shift.safetensors", "tensor 'blocks.0.attn.wv.requant.shift' entry 0 is 40, out of bounds: a shift is in [-31, 30]",
       edit_one("blocks.0.attn.wv.requant.shift", [&](auto& b) { set(b, 0, std::int32_t(40)); })},
      {"q_shift_right.safetensors", "tensor 'blocks.0.attn.values.shift' entry 0 is -40, out of bounds: a shift is in [-31, 30]",
       edit_one("blocks.0.attn.values.shift", [&](auto& b) { set(b, 0, std::int32_t(-40)); })},
      // inside the bounds, but not the multipliers the stored scales give (requant_mismatch)
      {"q_multiplier_0.safetensors", "tensor 'blocks.0.attn.wk.requant.multiplier' entry 1 is 0, not ",
       edit_one("blocks.0.attn.wk.requant.multiplier", [&](auto& b) { set(b, 1, std::int32_t(0)); })},
      {"q_multiplier_max.safetensors", "tensor 'blocks.1.ffn.fc2.requant.multiplier' entry 0 is 2147483647, not ",
       edit_one("blocks.1.ffn.fc2.requant.multiplier", [&](auto& b) { set(b, 0, std::int32_t(INT32_MAX)); })},
      {"q_shift_31.safetensors", "tensor 'blocks.0.sn1.requant.shift' entry 0 is -31, not ",
       edit_one("blocks.0.sn1.requant.shift", [&](auto& b) { set(b, 0, std::int32_t(-31)); })},
      {"q_exponent_step.safetensors", "tensor 'blocks.1.attn.exponent.multiplier' entry 0 is ",
       edit_one("blocks.1.attn.exponent.multiplier", [&](auto& b) {
         std::int32_t v;
         std::memcpy(&v, b.data(), sizeof v);
         set(b, 0, std::int32_t(v == INT32_MAX ? v - 1 : v + 1));
       })},
      {"q_old_file.safetensors", "tensor 'proj.coarse.in_scale' is missing",
       [](const std::string& n, auto&, auto&) { return !n.ends_with(".in_scale") && !n.ends_with(".out_scale"); }},
      {"q_nan.safetensors", "tensor 'blocks.0.attn.wq.weight_scale' holds a value that is not finite",
       [&](const std::string& n, auto&, auto& b) {
         if (n == "blocks.0.attn.wq.weight_scale") set_float(b, std::nanf(""));
         return true;
       }},
  };
  for (const auto& c : cases) {
    const auto path = write_edited(*m.q, c.file, c.edit);
    const std::string error = load_error(path);
    INFO(c.file, ": ", error);
    CHECK(error.find(c.want) != std::string::npos);
    CHECK(error.find(path.string()) != std::string::npos);
    std::filesystem::remove(path);
  }
  const auto good = write_edited(*m.q, "q_good.safetensors", [](auto&, auto&, auto&) { return true; });
  CHECK(load_error(good).empty());
  std::filesystem::remove(good);
}

TEST_CASE("out_of_bounds: quantized models are within bounds; each bound broken is found, by tensor and entry, and the C API's image check refuses it") {
  using M = Sequential<Linear<4, 12>, GELUTanh<12>, LayerNorm<12>, Linear<12, 2>>;
  auto p = test::make<M>();
  Rng rng(76);
  init_params(*p, rng);
  test::randomize(*p, rng);
  Calibration<M, 2, 3> cal(*p);
  Tensor<2, 3, 4> x;
  test::fill(x, rng), cal.observe(x);
  const auto q = cal.quantize();
  REQUIRE_FALSE(out_of_bounds(*q));
  CHECK_FALSE(out_of_bounds(*PointerFixture().q));
  struct Case {
    const char* tensor;
    size_t entry;
    std::int32_t value;
    const char* bound;
  };
  const Case cases[] = {
      {"1.table", 7, 65537, "an activation's knot is in [-65536, 65536]"},
      {"2.weight", 3, -32768, "an int16 weight is in [-32767, 32767]"},
      {"2.bias", 11, (1 << 30) + 1, "a norm's bias is in [-2^30, 2^30]"},
      {"2.eps", 0, -1, "eps (64 bits) is in [0, 2^62]"},  // the high word: e = −2^32 + low
      {"0.coarse.bias", 1, INT32_MAX - 100, "a bias b_c"},
      {"3.fine.requant.shift", 0, -32, "a shift is in [-31, 30]"},
  };
  for (const auto& c : cases) {
    auto bad = std::make_unique<std::remove_cvref_t<decltype(*q)>>(*q);
    for_each_param(
        [&](const Path& path, Init, auto& t) {
          if (!(path == c.tensor)) return;
          if (std::string_view(c.tensor).ends_with("eps")) t.data()[1] = c.value;
          else t.data()[c.entry] = decltype(t.data()[0] + 0)(c.value);
        },
        *bad);
    const OutOfBounds found = out_of_bounds(*bad);
    INFO(std::string(c.tensor));
    REQUIRE(found);
    CHECK(found.tensor == c.tensor);
    CHECK(found.entry == (std::string_view(c.tensor).ends_with("eps") ? 1 : c.entry));
    CHECK(std::string_view(found.bound).starts_with(c.bound));
  }
  // the C API's image check (once per model type): a QLinear whose layout matches, in bounds
  // and with a multiplier out of bounds
  const auto image_ok = []<size_t Out>(const Linear<4, Out>& f, std::int32_t multiplier) {
    const QLinear<4, Out> ql = QLinear<4, Out>::quantize(f, 0.01f, 0.02f);
    auto image = ql;
    image.requant.multiplier(0) = multiplier;
    const auto offset = [&](const auto& t) { return size_t(reinterpret_cast<const char*>(t.data()) - reinterpret_cast<const char*>(&image)); };
    const size_t offsets[] = {offset(image.weight),           offset(image.bias),          offset(image.weight_scale),
                              offset(image.requant.multiplier), offset(image.requant.shift), offset(image.in_scale),
                              offset(image.out_scale)};
    REQUIRE(image_matches(image, offsets));
    return c_api::image_ok<true>(image, offsets);
  };
  Linear<4, 2> f2;
  Linear<4, 3> f3;
  init_params(f2, rng), init_params(f3, rng);
  CHECK(image_ok(f2, QLinear<4, 2>::quantize(f2, 0.01f, 0.02f).requant.multiplier(0)));
  CHECK_FALSE(image_ok(f3, 7));
}

TEST_CASE("requant_mismatch: every requantization is its block's stored scales'; each multiplier or shift changed within its bounds is found by tensor and entry") {
  // an embedding, positions, a post-norm encoder block (LayerNorm, branch_requant, attention's
  // exponent and values), SPEC's block (ScaleNorm), a mean pool and a two-part head (QFineLinear)
  using M = Sequential<Named<"embedding", Embedding<20, 8>>, PositionalEncoding<6, 8>, EncoderBlock<8, 2, 16, PostNorm<act::GELU>>,
                       EncoderBlock<8, 2, 16>, MeanPool<8>, Named<"head", Linear<8, 3>>>;
  auto f = test::make<M>();
  Rng rng(59);
  init_params(*f, rng);
  test::randomize(*f, rng);
  Calibration<M, 3, 6> cal(*f);
  IdTensor<3, 6> ids;
  for (auto& id : ids) id = std::int32_t(rng.below(20));
  cal.observe(ids);
  const auto q = cal.quantize();
  REQUIRE_FALSE(out_of_bounds(*q));
  REQUIRE_FALSE(requant_mismatch(*q));
  REQUIRE_FALSE(requant_mismatch(*PointerFixture().q));
  std::vector<std::string> names;
  for_each_param(
      [&](const Path& path, Init, const auto& t) {
        const Name n = path.name();
        if constexpr (std::is_same_v<typename std::remove_cvref_t<decltype(t)>::value_type, std::int32_t>)
          if (n.view().ends_with(".multiplier") || n.view().ends_with(".shift")) names.emplace_back(n.view());
      },
      *q);
  for (const char* want : {"embedding.requant.multiplier", "2.norm1.requant.multiplier", "2.self_attn.branch_requant.shift", "2.self_attn.exponent.multiplier",
                           "2.self_attn.values.multiplier", "3.sn1.requant.shift", "3.attn.wq.requant.multiplier", "4.requant.multiplier",
                           "head.fine.requant.shift"})
    CHECK_MESSAGE(std::find(names.begin(), names.end(), want) != names.end(), want);
  size_t changed = 0;
  for (const std::string& name : names) {
    const bool shift = name.ends_with(".shift");
    for (int variant = 0; variant < 3; ++variant) {
      auto bad = std::make_unique<std::remove_cvref_t<decltype(*q)>>(*q);
      std::int32_t was = 0, now = 0;
      size_t entry = 0;
      for_each_param(
          [&](const Path& path, Init, auto& t) {
            if (!(path == name)) return;
            entry = t.size() - 1;  // the last channel
            was = t.data()[entry];
            // multiplier: 0, 2^31 − 1, one step; shift: −31, one step, 30
            const std::int32_t step = was == INT32_MAX ? was - 1 : was + 1;
            const std::int32_t to[] = {shift ? -31 : 0, shift ? step : INT32_MAX, shift ? 30 : step};
            now = to[variant];
            t.data()[entry] = now;
          },
          *bad);
      if (now == was) continue;
      const RequantMismatch found = requant_mismatch(*bad);
      INFO(name, " entry ", entry, ": ", was, " -> ", now);
      REQUIRE(found);
      CHECK(found.tensor == name);
      CHECK(found.entry == entry);
      CHECK(found.stored == now);
      CHECK(found.expected == was);
      ++changed;
    }
  }
  CHECK(changed >= 2 * names.size());
}

TEST_CASE("quantize: SPEC's pointer and set models close to the float models, in plans no larger than the float models'") {
  {
    PointerFixture m;
    using G = QPointer;
    static_assert(std::is_same_v<G::BlockAt<1>, QFineLinear<2, 16>> && std::is_same_v<G::BlockAt<4>, Int8Of<PointerHead<16>>::type> &&
                      std::is_same_v<G::BlockAt<5>, DequantizeLogits>,
                  "input, proj (the first linear layer: QFineLinear), blocks, sn_v, the pointer's head (int32 logits), their log-softmax");
    auto fi = std::make_unique<InferOf<FloatPointer, Sets, Points>>();
    auto gi = std::make_unique<InferOf<G, Sets, Points>>();
    const Tensor<Sets, 1, Points> want = fi->forward(*m.f, m.x);
    const auto& got = gi->forward(*m.q, m.x);
    double worst = 0;
    for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, double(std::abs(std::exp(got.data()[i]) - std::exp(want.data()[i]))));
    MESSAGE("pointer: largest probability difference from float " << worst << "; plans, a set of 50: float " << sizeof(InferOf<FloatPointer, 1, Points>)
                                                                  << " B, int8 " << sizeof(InferOf<G, 1, Points>) << " B");
    CHECK(worst < 0.004);
    // The integer steps alone (forward_steps, as a core without an FPU runs them): the quantized
    // input, then the logits; their log-softmax by hand is the whole pass's output.
    auto hi = std::make_unique<InferOf<G, Sets, Points>>();
    const TensorOf<std::int16_t, Sets, Points, 2> xq = hi->template forward_steps<0, 1>(*m.q, m.x);
    hi->template input<1>() = xq;
    const TensorOf<std::int32_t, Sets, 1, Points> logits = hi->template forward_steps<1, G::steps - 1>(*m.q);
    const double unit = m.q->template get<G::steps - 2>().attention().logit_scale();
    for (size_t b = 0; b < Sets; ++b) {
      double z = 0;
      for (size_t j = 0; j < Points; ++j) z += std::exp(unit * logits(b, 0, j));
      for (size_t j = 0; j < Points; ++j) CHECK(std::abs(unit * logits(b, 0, j) - std::log(z) - got(b, 0, j)) < 1e-4);
      CHECK(argmax(&logits(b, 0, 0), Points) == argmax(&got(b, 0, 0), Points));
    }
    CHECK(sizeof(InferOf<G, 1, Points>) <= sizeof(InferOf<FloatPointer, 1, Points>));
  }
  {
    SetFixture m;
    constexpr size_t B = SetFixture::B, N = SetFixture::N;
    using G = SetFixture::QSet;
    auto gi = std::make_unique<InferOf<G, B, N>>();
    for (const KeyMask<B, N>* mask : m.masks) {
      const Tensor<B, 1, 2> want = m.acts->forward(*m.f, m.x, mask);
      const auto& got = gi->forward(*m.q, m.x, mask);
      MESSAGE(std::string(mask ? "set, key-padded" : "set") << ": relative rms from float " << rel_rms(want, got, 1.0));
      CHECK(rel_rms(want, got, 1.0) < 0.015);
    }
    using FloatSet = SetFixture::FloatSet;
    MESSAGE("set plans, a set of 50: float " << sizeof(InferOf<FloatSet, 1, 50>) << " B, int8 " << sizeof(InferOf<G, 1, 50>) << " B");
    CHECK(sizeof(InferOf<G, 1, 50>) <= sizeof(InferOf<FloatSet, 1, 50>));
  }
}
