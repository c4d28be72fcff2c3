// The image stformer-c-api --image writes (c_api_any.sh): the integer sequence classifier read in
// place from seqcls_image.hpp, its layout checked, its outputs the host's bit for bit (expected.h).
#include <cstdio>
#include <cstring>

#include "expected.h"
#include "seqcls_image.hpp"

int main() {
  const auto& model = seqcls_image::model();
  if (!stformer::image_matches(model, seqcls_image::offsets)) {
    std::puts("FAIL: the image's layout is not the model's");
    return 1;
  }
  static stformer::InferOf<seqcls_image::Model, 1, 8> pass;
  stformer::IdTensor<1, 8> ids;
  std::memcpy(ids.data(), input_a, sizeof input_a);
  const auto& y = pass.forward(model, ids);
  const bool same = std::memcmp(y.data(), expected_q_a, sizeof expected_q_a) == 0;
  std::printf("seqcls_image (integers, read in place): %s\n", same ? "the host's outputs" : "FAIL: outputs differ from the host's");
  return same ? 0 : 1;
}
