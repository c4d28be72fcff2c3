// libFuzzer entry for fuzz::corpus_input (inputs.hpp); see tests/fuzz/meson.build.
#include "inputs.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  fuzz::corpus_input(data, size);
  return 0;
}
