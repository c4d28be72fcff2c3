// The max-value example (targets/max_value/max_value.hpp): a short training run falls in loss,
// and two runs from one seed agree to the bit, down to the checkpoint's bytes.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include <unistd.h>

#include "max_value.hpp"

using namespace max_value;

namespace {
std::string bytes_of(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), {}};
}

template <class Net>
void check_reproducible(int iterations) {
  auto dir = std::filesystem::temp_directory_path() / ("stformer_mv_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::vector<float> losses[2];
  Metrics metrics[2];
  for (int r = 0; r < 2; ++r) {
    Run<Net> run(5);
    TrainOptions o;
    o.iterations = iterations;
    o.report_every = 1;
    run.train(o, [&](int, float loss, double, double) { losses[r].push_back(loss); });
    Rng rng(5, 2);
    metrics[r] = run.evaluate(rng, 500);
    save_checkpoint(dir / ("run" + std::to_string(r) + ".safetensors"), *run.model, *run.opt, run.state, {{"model", Task<Net>::name}});
  }
  CHECK(losses[0] == losses[1]);
  CHECK(metrics[0].accuracy == metrics[1].accuracy);
  CHECK(metrics[0].distance == metrics[1].distance);
  CHECK(bytes_of(dir / "run0.safetensors") == bytes_of(dir / "run1.safetensors"));
  CHECK(losses[0].back() < 0.6f * losses[0].front());
  MESSAGE(std::string(Task<Net>::name) << ": loss " << losses[0].front() << " -> " << losses[0].back() << " in " << iterations
                          << " iterations; accuracy " << metrics[0].accuracy << ", distance " << metrics[0].distance);
  std::filesystem::remove_all(dir);
}
}  // namespace

TEST_CASE("max_value pointer: the loss falls and two runs agree bit for bit") { check_reproducible<PointerNet>(40); }

TEST_CASE("max_value set: the loss falls and two runs agree bit for bit") { check_reproducible<SetNet>(40); }
