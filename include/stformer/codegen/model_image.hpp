// stformer — a model read in place from a constant image of its parameters (weights in flash).
//
// A model is a standard-layout, trivially copyable struct of tensors (stformer/core/tensor.hpp):
// its object representation is its parameters in declaration order (= visit order), each
// padded to the tensor alignment, and nothing else. An image is a struct of float arrays laid
// out the same way, written by `stformer-c-api --image` or stformer::model_image_source
// (<stformer/codegen/model_image_source.hpp>, host side) as a constexpr object:
//
//   struct Image {
//     alignas(stformer::Tensor<16, 2>) float p0[sizeof(stformer::Tensor<16, 2>) / sizeof(float)] ;
//     ...
//   };
//   alignas(Model) inline constexpr Image image = {{0x1.2p-3f, ...}, ...};
//   inline constexpr std::size_t offsets[] = {offsetof(Image, p0), ...};
//
// The target's compiler lays it out with the target's tensor alignment, so the same header
// serves every build. The image stays in read-only memory (flash on a microcontroller) and
// model_image returns it as `const Model&`, which every Infer takes: no parameter is copied
// to RAM. (A constexpr object of the model type itself is out of reach: xtensor 0.24's fixed
// tensors have no constexpr constructor or element access.)
//
// The image is used through the model's type the way TFLite Micro uses its flatbuffer in
// flash; what makes it sound is checked: the model's traits and size at compile time, and
// every parameter's offset by image_matches (call it once at start-up).
#pragma once

#include "../core/config.hpp"

#include <cstddef>
#include <new>
#include <type_traits>

#include "../core/params.hpp"

namespace stformer::inline STFORMER_ABI {

template <class Model, class Image>
const Model& model_image(const Image& image) {
  static_assert(std::is_trivially_copyable_v<Model> && std::is_standard_layout_v<Model>,
                "model_image: the model is not a plain struct of tensors");
  static_assert(std::is_trivially_copyable_v<Image> && std::is_standard_layout_v<Image>, "model_image: the image is not a struct of arrays");
  static_assert(sizeof(Image) == sizeof(Model), "model_image: the image was made for another model type (its size differs)");
  static_assert(alignof(Image) >= alignof(Model), "model_image: the image is less aligned than the model");
  return *std::launder(reinterpret_cast<const Model*>(&image));
}

// Whether parameter i of m (visit order) starts offsets[i] bytes into m, for every i, and m
// has exactly P parameters: the image's layout is the model's.
template <class Model, size_t P>
bool image_matches(const Model& m, const size_t (&offsets)[P]) {
  size_t i = 0;
  bool same = true;
  const auto* base = reinterpret_cast<const unsigned char*>(&m);
  for_each_param(
      [&](const Path&, Init, const auto& t) {
        same = same && i < P && reinterpret_cast<const unsigned char*>(t.data()) - base == std::ptrdiff_t(offsets[i]);
        ++i;
      },
      m);
  return same && i == P;
}

}  // namespace stformer
