// The max-value example (tasks/max_value.hpp): a short training run falls in loss;
// runs from one seed with 3 lanes on 1 to 5 threads agree to the bit, down to the checkpoint's
// bytes; the chunked gradient, on 2 and on 3 lanes, equals the whole batch's.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include <sys/wait.h>

#include <unistd.h>

#include "max_value.hpp"
#include "util.hpp"

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
  // 3 lanes on 1 to 5 threads (more than the lanes, and than this machine's cores); slow builds: 1 and 3
  const std::vector<size_t> threads = test::slow() ? std::vector<size_t>{1, 3} : std::vector<size_t>{1, 2, 3, 4, 5};
  const size_t runs = threads.size();
  std::vector<float> losses[5];
  Metrics metrics[5];
  for (size_t r = 0; r < runs; ++r) {
    Run<Net> run(5, threads[r], 3);
    TrainOptions o;
    o.iterations = iterations;
    o.report_every = 1;
    run.train(o, [&](int, float loss, double, double) { losses[r].push_back(loss); });
    Rng rng(5, 2);
    metrics[r] = run.evaluate(rng, 500);
    save_checkpoint(dir / ("run" + std::to_string(r) + ".safetensors"), *run.model, *run.opt, run.state, {{"model", Task<Net>::name}});
  }
  for (size_t r = 1; r < runs; ++r) {
    CHECK_MESSAGE(losses[0] == losses[r], threads[r] << " threads");
    CHECK_MESSAGE(metrics[0].accuracy == metrics[r].accuracy, threads[r] << " threads");
    CHECK_MESSAGE(metrics[0].distance == metrics[r].distance, threads[r] << " threads");
    CHECK_MESSAGE(bytes_of(dir / "run0.safetensors") == bytes_of(dir / ("run" + std::to_string(r) + ".safetensors")), threads[r] << " threads");
  }
  if (!test::slow()) CHECK(losses[0].back() < 0.6f * losses[0].front());
  MESSAGE(std::string(Task<Net>::name) << ": loss " << losses[0].front() << " -> " << losses[0].back() << " in " << iterations
                          << " iterations; accuracy " << metrics[0].accuracy << ", distance " << metrics[0].distance);
  std::filesystem::remove_all(dir);
}
}  // namespace

// In slow builds (test::slow(): an emulator or the sanitizers): two iterations of the pointer
// model, no set model.
TEST_CASE("max_value pointer: the loss falls and runs on 1 to 5 threads agree bit for bit") {
  check_reproducible<PointerNet>(test::slow() ? 2 : 40);
}

TEST_CASE("max_value set: the loss falls and runs on 1 to 5 threads agree bit for bit" * doctest::skip(test::slow())) {
  check_reproducible<SetNet>(40);
}

// SPEC's recipes, checked against the learning rates written out here: `pointer` anneals from
// 0.01 with a cosine over the run (0.01, 0.0075, 0.0025 for 3 iterations) on one batch drawn
// once; `set` keeps 1e-3 and draws fresh sets every iteration.
template <class Net>
void check_recipe(const std::array<float, 3>& lrs, bool fresh) {
  auto run = std::make_unique<Run<Net>>(7), manual = std::make_unique<Run<Net>>(7);
  TrainOptions o;
  o.iterations = 3;
  run->train(o, [](int, float, double, double) {});
  if (!fresh) manual->sets->draw(manual->state.rng);
  for (float lr : lrs) {
    if (fresh) manual->sets->draw(manual->state.rng);
    manual->step(lr);
  }
  CHECK(test::tensors_differing(*run->model, *manual->model) == 0);
}

TEST_CASE("max_value: the default runs follow SPEC's learning rates and training sets") {
  check_recipe<PointerNet>({0.01f, 0.0075f, 0.0025f}, false);
  if (!test::slow()) check_recipe<SetNet>({1e-3f, 1e-3f, 1e-3f}, true);
}

// Run's gradient (250 chunks of 2 over `lanes` lanes, loss divided by the batch) against one
// forward and backward over the whole batch of 500.
template <class Net>
void check_chunked_gradient(size_t lanes) {
  using T = Task<Net>;
  auto run = std::make_unique<Run<Net>>(3, 2, lanes);
  Rng rng(3, 1);
  run->sets->draw(rng);
  float loss = run->gradient();
  auto acts = std::make_unique<ActsOf<Net, Batch, N>>();
  auto grad = std::make_unique<Net>();
  auto dout = std::make_unique<typename T::template Out<Batch>>();
  zero_grad(*grad);
  float whole = T::loss(acts->forward(*run->model, run->sets->x), *run->sets, *dout, Batch);
  acts->backward(*run->model, *grad, *dout);
  CHECK(loss == doctest::Approx(whole).epsilon(1e-5));
  // Scale: each tensor's largest gradient, but at least 1e-3 of the model's largest (the key
  // biases' true gradient is 0, softmax being shift-invariant: theirs is float noise).
  float global = 0;
  for_each_param([&](const Path&, Init, const auto& b) { for (float v : b) global = std::max(global, std::abs(v)); }, *grad);
  double worst = 0;
  for_each_param(
      [&](const Path& name, Init, const auto& a, const auto& b) {
        float scale = 1e-3f * global;
        for (size_t i = 0; i < b.size(); ++i) scale = std::max(scale, std::abs(b.data()[i]));
        for (size_t i = 0; i < b.size(); ++i) {
          double err = std::abs(a.data()[i] - b.data()[i]) / scale;
          worst = std::max(worst, err);
          if (err > 1e-4) FAIL_CHECK(std::string(name.name().view()) << "[" << i << "]: chunked " << a.data()[i] << ", whole batch " << b.data()[i]);
        }
      },
      run->grad(), *grad);
  MESSAGE(std::string(T::name) << ", " << lanes << " lanes: largest difference, relative to each tensor's largest gradient (at least 1e-3 of the model's): " << worst);
}

// Run::infer (forward only, chunk by chunk over the lanes) on 1 lane and thread, and on 3 lanes
// and 3 threads: the same bits, and those of the training activations' forward on the same
// chunks.
template <class Net>
void check_infer() {
  using Out = typename Task<Net>::template Out<Batch>;
  constexpr size_t Chunk = Run<Net>::Chunk;
  auto one = std::make_unique<Run<Net>>(4, 1, 1), two = std::make_unique<Run<Net>>(4, 3, 3);
  Rng rng(4, 2);
  one->sets->draw(rng);
  *two->sets = *one->sets;
  auto y1 = std::make_unique<Out>(one->infer());
  CHECK(test::same_bits(*y1, two->infer()));
  auto acts = std::make_unique<ActsOf<Net, Chunk, N>>();
  Tensor<Chunk, N, 2> x;
  size_t differing = 0;
  for (size_t c = 0; c < Batch / Chunk; ++c) {
    std::copy_n(one->sets->x.data() + c * Chunk * N * 2, Chunk * N * 2, x.data());
    const auto& y = acts->forward(*one->model, x);
    differing += !std::equal(y.begin(), y.end(), y1->begin() + c * y.size());
  }
  CHECK(differing == 0);
}

TEST_CASE("max_value: evaluation runs forward only (Infer), the same on 1 and 3 threads and as the training forward") {
  check_infer<PointerNet>();
  check_infer<SetNet>();
}

TEST_CASE("max_value: the chunked gradient equals the whole batch's") {
  check_chunked_gradient<PointerNet>(2);
  check_chunked_gradient<PointerNet>(3);
  if (!test::slow()) check_chunked_gradient<SetNet>(3);
}

// The program itself (its path in MAX_VALUE): predict on sets written here, against the same
// model run in-process, bit for bit (bad input: tests/programs.sh).
TEST_CASE("max_value predict: log_probs and y for sets read from safetensors") {
  const char* exe = std::getenv("MAX_VALUE");
  REQUIRE_MESSAGE(exe != nullptr, "MAX_VALUE is not set (run through meson test)");
  auto dir = std::filesystem::temp_directory_path() / ("stformer_cli_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  auto sh = [&](const std::string& args) {
    const char* wrapper = std::getenv("STFORMER_RUN");  // the cross build's exe wrapper (qemu-aarch64 ...)
    std::string cmd = std::string(wrapper ? wrapper : "") + " " + exe + " " + args + " > " + (dir / "out.txt").string() + " 2>&1";
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
    if (test::slow() && std::string(kind) == "set") continue;
    CAPTURE(kind);
    auto ckpt = (dir / (std::string(kind) + ".safetensors")).string();
    REQUIRE(sh(std::string("train --model ") + kind + " --iterations 3 --checkpoint " + ckpt) == 0);
    REQUIRE(sh("predict --checkpoint " + ckpt + " --input " + (dir / "in.safetensors").string() + " --output " +
               (dir / "pred.safetensors").string()) == 0);
    auto pred = safetensors::File::read(dir / "pred.safetensors");
    // the first `count` sets, run here through Run::infer with the same checkpoint: the same
    // chunks as the program, so the same bits (Run's chunks against one forward over the whole
    // batch: the chunked-gradient test above)
    auto compare = [&]<class Net>(const char* tensor, size_t width) {
      auto run = std::make_unique<Run<Net>>(1);
      load_params(ckpt, *run->model);
      run->sets->x.fill(0.0f);
      std::copy_n(sets.x.data(), count * N * 2, run->sets->x.data());
      const float* expected = run->infer().data();
      const auto& v = pred.at(tensor);
      CHECK(v.shape == std::vector<size_t>{count, width});
      std::vector<float> got(count * width);
      std::memcpy(got.data(), v.bytes.data(), v.bytes.size());
      for (size_t i = 0; i < count * width; ++i) CHECK(got[i] == expected[i]);
    };
    if (std::string(kind) == "pointer")
      compare.template operator()<PointerNet>("log_probs", N);
    else
      compare.template operator()<SetNet>("y", 2);
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

  std::filesystem::remove_all(dir);
}
