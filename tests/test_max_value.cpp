// The max-value example (targets/max_value/max_value.hpp): a short training run falls in loss,
// and two runs from one seed agree to the bit, down to the checkpoint's bytes.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include <sys/wait.h>

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

// The program itself (its path in MAX_VALUE): predict on sets written here, against the same
// model run in-process; bad input exits non-zero with a message.
TEST_CASE("max_value predict: log_probs and y for sets read from safetensors; bad input is refused") {
  const char* exe = std::getenv("MAX_VALUE");
  REQUIRE_MESSAGE(exe != nullptr, "MAX_VALUE is not set (run through meson test)");
  auto dir = std::filesystem::temp_directory_path() / ("stformer_cli_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  auto sh = [&](const std::string& args) {
    std::string cmd = std::string(exe) + " " + args + " > " + (dir / "out.txt").string() + " 2>&1";
    int status = std::system(cmd.c_str());
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  };
  auto output = [&] { return bytes_of(dir / "out.txt"); };

  constexpr size_t count = 7;  // not a multiple of the batch
  Rng rng(11);
  Sets<Batch> sets;
  sets.draw(rng);
  safetensors::Writer w;
  w.add("x", safetensors::Dtype::F32, {count, N, 2}, std::as_bytes(std::span(sets.x.data(), count * N * 2)));
  w.write(dir / "in.safetensors");

  for (const char* kind : {"pointer", "set"}) {
    CAPTURE(kind);
    auto ckpt = (dir / (std::string(kind) + ".safetensors")).string();
    REQUIRE(sh(std::string("train --model ") + kind + " --iterations 3 --checkpoint " + ckpt) == 0);
    REQUIRE(sh("predict --checkpoint " + ckpt + " --input " + (dir / "in.safetensors").string() + " --output " +
               (dir / "pred.safetensors").string()) == 0);
    auto pred = safetensors::File::read(dir / "pred.safetensors");
    // the first `count` sets of the batch, computed here with the same checkpoint
    auto compare = [&](const char* tensor, const float* expected, size_t width) {
      const auto& v = pred.at(tensor);
      CHECK(v.shape == std::vector<size_t>{count, width});
      std::vector<float> got(count * width);
      std::memcpy(got.data(), v.bytes.data(), v.bytes.size());
      for (size_t i = 0; i < count * width; ++i) CHECK(got[i] == doctest::Approx(expected[i]).epsilon(1e-6));
    };
    if (std::string(kind) == "pointer") {
      auto run = std::make_unique<Run<PointerNet>>(0);
      load_params(ckpt, *run->model);
      compare("log_probs", run->acts->forward(*run->model, sets.x).data(), N);
    } else {
      auto run = std::make_unique<Run<SetNet>>(0);
      load_params(ckpt, *run->model);
      compare("y", run->acts->forward(*run->model, sets.x).data(), 2);
    }
  }
  // a parameters-only checkpoint (as exported from PyTorch) is accepted
  auto params_only = (dir / "params.safetensors").string();
  {
    auto m = std::make_unique<SetNet>();
    Rng r(1);
    init_params(*m, r);
    save_params(params_only, *m);
  }
  CHECK(sh("eval --sets 10 --checkpoint " + params_only) == 0);
  CHECK(output().find("nearest-point hits") != std::string::npos);

  // refused, with a message and a non-zero exit
  CHECK(sh("eval --checkpoint " + (dir / "missing.safetensors").string()) != 0);
  CHECK(output().find("missing.safetensors") != std::string::npos);
  CHECK(sh("train --model transformer") != 0);
  CHECK(sh("train --iterations 0") != 0);
  CHECK(sh("predict --checkpoint " + params_only + " --input " + params_only + " --output " + (dir / "p.safetensors").string()) != 0);
  CHECK(output().find("no tensor 'x'") != std::string::npos);
  std::filesystem::remove_all(dir);
}
