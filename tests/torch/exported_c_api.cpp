// The C API of an exported model against PyTorch: NAME_predict (API, the C function) run on each
// sequence of the example file the exporter wrote (EXAMPLE: `input`, as PyTorch's tensor, and
// PyTorch's `output`), every output within 1e-5 of PyTorch's, relative to its largest entry. A
// model exported with a key mask (the file's `keys`: 1 for a row that exists) is run by
// NAME_predict_keys (API_KEYS) with it, and the rows that exist are compared.
// Built by tests/torch/exported_c_api.sh with -DHEADER="NAME.h" -DAPI=NAME_predict -DAPI_KEYS=NAME_predict_keys.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <cstring>
#include <vector>

#include <stformer/io/safetensors.hpp>

#include HEADER

namespace {

template <class In>
int run(int (*predict)(const In*, float*), int (*predict_keys)(const In*, const std::uint8_t*, float*), const char* example) {
  const auto file = stformer::safetensors::File::read(example);
  const auto* keys = file.find("keys");
  const auto& input = file.at("input");
  const auto& output = file.at("output");
  const size_t batch = input.shape[0];
  const size_t in_size = input.bytes.size() / sizeof(In) / batch, out_size = output.bytes.size() / sizeof(float) / batch;
  std::vector<In> in(in_size * batch);
  std::vector<float> want(out_size * batch), got(out_size);
  std::memcpy(in.data(), input.bytes.data(), input.bytes.size());
  std::memcpy(want.data(), output.bytes.data(), output.bytes.size());
  double worst = 0;
  for (size_t b = 0; b < batch; ++b) {
    // the output's rows the input's (B, N, W), after K class tokens' (B, K + N, W): a padded row's output is not compared
    const size_t rows = keys ? keys->shape[1] : 0, width = keys && output.shape.size() == 3 && output.shape[1] >= rows ? output.shape[2] : 0;
    const size_t tokens = width ? output.shape[1] - rows : 0;
    const auto* key = keys ? reinterpret_cast<const std::uint8_t*>(keys->bytes.data()) + b * rows : nullptr;
    if (int status = key ? predict_keys(in.data() + b * in_size, key, got.data()) : predict(in.data() + b * in_size, got.data()); status != 0) {
      std::printf("FAIL: %s: status %d on sequence %zu\n", example, status, b);
      return 1;
    }
    double scale = 1e-3, err = 0;
    for (size_t i = 0; i < out_size; ++i) {
      if (width && i / width >= tokens && !key[i / width - tokens]) continue;
      scale = std::max(scale, double(std::abs(want[b * out_size + i])));
      err = std::max(err, double(std::abs(got[i] - want[b * out_size + i])));
    }
    worst = std::max(worst, err / scale);
  }
  std::printf("%s: the C API on %zu sequences, largest difference from PyTorch %.3g (relative)\n", example, batch, worst);
  return worst <= 1e-5 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  return run(API, API_KEYS, argv[1]);
}
