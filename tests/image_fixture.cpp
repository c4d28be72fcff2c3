// image_fixture OUT_DIR: writes the constant images (stformer/codegen/model_image.hpp) of three
// models with random parameters from fixed seeds, for test_model_image.cpp, which rebuilds the same
// models and compares: pointer_image.hpp (SPEC `pointer`, seed 1), set_image.hpp (SPEC `set`,
// seed 2), lm_image.hpp (a small LanguageModel, seed 3).
#include <cstdio>
#include <fstream>
#include <string>

#include <stformer/codegen/model_image_source.hpp>
#include <stformer/stformer.hpp>

#include "image_models.hpp"

namespace {

template <class Model>
void write(const std::string& dir, const char* file, const char* type, const char* ns, uint64_t seed) {
  auto model = test::make<Model>();
  stformer::Rng rng(seed);
  test::randomize(*model, rng);
  std::ofstream(dir + "/" + file) << stformer::model_image_source(*model, type, ns, "image_fixture");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: image_fixture OUT_DIR\n");
    return 2;
  }
  write<image_models::Pointer>(argv[1], "pointer_image.hpp", "image_models::Pointer", "pointer_image", 1);
  write<image_models::Set>(argv[1], "set_image.hpp", "image_models::Set", "set_image", 2);
  write<image_models::Lm>(argv[1], "lm_image.hpp", "image_models::Lm", "lm_image", 3);
}
