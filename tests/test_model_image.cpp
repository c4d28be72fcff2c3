// Models read in place from constant images (stformer/codegen/model_image.hpp): image_fixture wrote
// the images of three randomly initialised models with stformer::model_image_source; here the same
// models are rebuilt from their seeds and compared with the images parameter by parameter, bit
// for bit, and through Infer. The images are constexpr objects, so they sit in read-only data.
#include <doctest/doctest.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include <stformer/codegen/model_image.hpp>
#include <stformer/codegen/model_image_source.hpp>

#include "image_models.hpp"
#include "lm_image.hpp"
#include "pointer_image.hpp"
#include "set_image.hpp"

using namespace stformer;

namespace {

template <class Model>
std::unique_ptr<Model> rebuilt(uint64_t seed) {
  auto m = test::make<Model>();
  Rng rng(seed);
  test::randomize(*m, rng);
  return m;
}

// The image's model: laid out as the image says, every parameter equal to the model rebuilt
// from `seed` bit for bit and read from inside the image object, and the same Infer outputs
// for `inputs`.
template <size_t... Dims, class Model, class Image, size_t P, class... Inputs>
void check_image(const Model& m, const Image& image, const size_t (&offsets)[P], uint64_t seed, const Inputs&... inputs) {
  CHECK(image_matches(m, offsets));
  auto want = rebuilt<Model>(seed);
  CHECK(test::tensors_differing(m, *want) == 0);
  const auto* lo = reinterpret_cast<const unsigned char*>(&image);
  for_each_param(
      [&](const Path& path, Init, const auto& t) {
        const auto* p = reinterpret_cast<const unsigned char*>(t.data());
        INFO(path.name().c_str());
        CHECK((p >= lo && p + t.size() * sizeof(float) <= lo + sizeof image));
      },
      m);
  auto a = test::make<InferOf<Model, Dims...>>();
  auto b = test::make<InferOf<Model, Dims...>>();
  CHECK(test::same_bits(a->forward(m, inputs...), b->forward(*want, inputs...)));
}

}  // namespace

TEST_CASE("model images: the parameters in place, bit for bit, and the same Infer outputs") {
  static_assert(std::is_same_v<pointer_image::Model, image_models::Pointer>);
  static_assert(sizeof(pointer_image::Image) == sizeof(image_models::Pointer));
  Rng rng(9);
  Tensor<2, 50, 2> x;
  test::fill(x, rng);
  const auto keys = test::lengths_mask<2, 50>({50, 31});
  SUBCASE("pointer, a padded set") { check_image<2, 50>(pointer_image::model(), pointer_image::image, pointer_image::offsets, 1, x, &keys); }
  SUBCASE("set") { check_image<2, 50>(set_image::model(), set_image::image, set_image::offsets, 2, x); }
  SUBCASE("language model (its positional encoding holds no bytes)") {
    IdTensor<2, 8> ids;
    for (size_t i = 0; i < ids.size(); ++i) ids.data()[i] = int32_t((7 * i + 3) % 50);
    check_image<2>(lm_image::model(), lm_image::image, lm_image::offsets, 3, ids);
  }
}

TEST_CASE("model images: a layout that is not the model's is refused") {
  const auto& m = pointer_image::model();
  size_t wrong[std::size(pointer_image::offsets)];
  std::copy(std::begin(pointer_image::offsets), std::end(pointer_image::offsets), wrong);
  CHECK(image_matches(m, wrong));
  std::swap(wrong[3], wrong[5]);  // two parameters of the same shape, swapped
  CHECK_FALSE(image_matches(m, wrong));
  size_t fewer[std::size(pointer_image::offsets) - 1];
  std::copy_n(std::begin(pointer_image::offsets), std::size(fewer), fewer);
  CHECK_FALSE(image_matches(m, fewer));
}

namespace {
// A "model" that holds a byte besides its parameters: it has no image.
struct NotOnlyParams {
  Tensor<4> w;
  int steps = 0;
  template <class F, class... S>
  static constexpr void visit(const Path& at, F& f, S&... s) {
    f(at / "w", Init{Init::zeros}, s.w...);
  }
};
}  // namespace

TEST_CASE("model_image_source: refuses models that hold more than their parameters, and values that are not finite") {
  NotOnlyParams odd;
  odd.w.fill(1.0f);
  CHECK_THROWS_WITH_AS(model_image_source(odd, "NotOnlyParams", "ns"), doctest::Contains("holds more than its parameters"), std::runtime_error);
  auto p = test::make<image_models::Pointer>();
  p->get<"blocks">()[0].get<0>().body.get<"attn">().wk.weight(2, 3) = std::numeric_limits<float>::quiet_NaN();
  CHECK_THROWS_WITH_AS(model_image_source(*p, "P", "ns"), doctest::Contains("blocks.0.attn.wk.weight holds a value that is not finite"),
                       std::runtime_error);
  const std::string text = model_image_source(*rebuilt<image_models::Pointer>(1), "image_models::Pointer", "w");
  CHECK(text.find("using Model = image_models::Pointer;") != std::string::npos);
  CHECK(text.find("// blocks.1.ffn.fc2.bias") != std::string::npos);
}
