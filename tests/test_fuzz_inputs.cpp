// The fuzz targets' seeds and every input that once failed (tests/fuzz/{seeds,regressions}),
// replayed through the same checks as the fuzzers (tests/fuzz/inputs.hpp) in every build.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include "fuzz/inputs.hpp"

namespace {
template <class F>
void replay(const char* target, F&& input) {
  const auto root = std::filesystem::path(STFORMER_SOURCE_DIR) / "tests" / "fuzz";
  size_t n = 0;
  for (const char* kind : {"seeds", "regressions"})
    for (const auto& e : std::filesystem::directory_iterator(root / kind / target)) {
      std::ifstream f(e.path(), std::ios::binary);
      const std::string bytes{std::istreambuf_iterator<char>(f), {}};
      CAPTURE(e.path().string());
      CHECK_NOTHROW(input(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size()));
      ++n;
    }
  MESSAGE(target << ": " << n << " inputs replayed");
  CHECK(n >= 4);
}
}  // namespace

TEST_CASE("fuzz inputs: safetensors") { replay("safetensors", fuzz::safetensors_input); }
TEST_CASE("fuzz inputs: corpus") { replay("corpus", fuzz::corpus_input); }
