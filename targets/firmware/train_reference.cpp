// train_reference SETS.safetensors OUT: the host's side of the firmware's training runs
// (train.hpp). SPEC's pointer model initialised as `max_value train --seed 0` does, then
// train.hpp's steps on the first B sets of SETS (a `max_value sets` file), in one chunk of B
// sets (the Cortex-M7's run) and in chunks of 1 (the STM32F405's). Writes
//   OUT/train_init.safetensors             the initial parameters (the firmware starts from them)
//   OUT/train_expected.safetensors         the batch x and its targets, each step's loss (F32
//                                          [Steps]) and the parameters after the last step
//   OUT/train_expected_chunked.safetensors the same, in chunks of 1 set
// Built with the plain C++ kernels (-Dsimd=none), it is what the firmware must reproduce bit
// for bit. Exit codes: 0 written; 1 a problem with the input; 2 a bad command line.
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <memory>
#include <vector>

#include <stformer/io/checkpoint.hpp>
#include <stformer/core/rng.hpp>
#include <stformer/io/safetensors.hpp>

#include "train.hpp"

namespace {

using namespace firmware_train;

// Steps steps from `init` on the sets x [B, N, 2] in chunks of C, written to `out`.
template <size_t C>
void run(const Net& init, const float* x, const std::filesystem::path& out) {
  auto s = std::make_unique<State<C>>();
  auto opt = std::make_unique<Optimiser>(weight_decay);
  s->model = init;
  stformer::IdTensor<B> target;
  for (size_t b = 0; b < B; ++b) target(b) = label(x + b * N * 2);
  float loss[Steps];
  for (size_t i = 0; i < Steps; ++i) loss[i] = s->step(*opt, x);
  stformer::safetensors::Writer w;
  stformer::add_params(w, s->model);
  w.add("x", stformer::safetensors::Dtype::F32, {B, N, 2}, std::as_bytes(std::span(x, B * N * 2)));
  w.add("target", stformer::safetensors::Dtype::I32, {B}, std::as_bytes(std::span(target.data(), target.size())));
  w.add("loss", stformer::safetensors::Dtype::F32, {Steps}, std::as_bytes(std::span(loss, Steps)));
  w.write(out);
  for (size_t i = 0; i < Steps; ++i) std::printf("%zu set(s) per chunk, step %zu: loss %.6f\n", C, i + 1, double(loss[i]));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: train_reference SETS.safetensors OUT\n");
    return 2;
  }
  try {
    const std::filesystem::path out(argv[2]);
    auto init = std::make_unique<Net>();
    stformer::Rng rng(0, 0);
    stformer::init_params(*init, rng);
    stformer::save_params(out / "train_init.safetensors", *init);
    const auto sets = stformer::safetensors::File::read(argv[1]);
    const auto* x = sets.find("x");
    if (!x || x->dtype != stformer::safetensors::Dtype::F32 || x->shape.size() != 3 || x->shape[0] < B || x->shape[1] != N || x->shape[2] != 2)
      throw std::runtime_error(std::string(argv[1]) + ": expected x F32 [S >= 2, 50, 2]");
    std::vector<float> batch(B * N * 2);
    std::memcpy(batch.data(), x->bytes.data(), batch.size() * sizeof(float));
    run<B>(*init, batch.data(), out / "train_expected.safetensors");
    run<1>(*init, batch.data(), out / "train_expected_chunked.safetensors");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train_reference: %s\n", e.what());
    return 1;
  }
  return 0;
}
