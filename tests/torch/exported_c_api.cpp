// The C API of an exported model against PyTorch: NAME_predict (API, the C function) run on each
// sequence of the example file the exporter wrote (EXAMPLE: `input`, as PyTorch's tensor, and
// PyTorch's `output`), every output within 1e-5 of PyTorch's, relative to its largest entry.
// Built by tests/torch/exported_c_api.sh with -DHEADER="NAME.h" -DAPI=NAME_predict.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

#include <stformer/io/safetensors.hpp>

#include HEADER

namespace {

template <class In>
int run(int (*predict)(const In*, float*), const char* example) {
  const auto file = stformer::safetensors::File::read(example);
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
    if (int status = predict(in.data() + b * in_size, got.data()); status != 0) {
      std::printf("FAIL: %s: status %d on sequence %zu\n", example, status, b);
      return 1;
    }
    double scale = 1e-3, err = 0;
    for (size_t i = 0; i < out_size; ++i) {
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
  return run(API, argv[1]);
}
