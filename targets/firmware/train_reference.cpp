// train_reference SETS.safetensors OUT: the host's side of the firmware's training run
// (train.hpp). SPEC's pointer model initialised as `max_value train --seed 0` does, then
// train.hpp's steps on the first B sets of SETS (a `max_value sets` file). Writes
//   OUT/train_init.safetensors      the initial parameters (the firmware starts from them)
//   OUT/train_expected.safetensors  the batch x and its targets, each step's loss (F32
//                                   [Steps]) and the parameters after the last step
// Built with the plain C++ kernels (-Dsimd=none), it is what the Cortex-M7 must reproduce bit
// for bit. Exit codes: 0 written; 1 a problem with the input; 2 a bad command line.
#include <cstdio>
#include <exception>
#include <filesystem>
#include <memory>

#include <stformer/checkpoint.hpp>
#include <stformer/rng.hpp>
#include <stformer/safetensors.hpp>

#include "train.hpp"

int main(int argc, char** argv) {
  using namespace firmware_train;
  if (argc != 3) {
    std::fprintf(stderr, "usage: train_reference SETS.safetensors OUT\n");
    return 2;
  }
  try {
    const std::filesystem::path out(argv[2]);
    auto s = std::make_unique<State>();
    stformer::Rng init(0, 0);
    stformer::init_params(s->model, init);
    stformer::save_params(out / "train_init.safetensors", s->model);
    const auto sets = stformer::safetensors::File::read(argv[1]);
    const auto* x = sets.find("x");
    if (!x || x->dtype != stformer::safetensors::Dtype::F32 || x->shape.size() != 3 || x->shape[0] < B || x->shape[1] != N || x->shape[2] != 2)
      throw std::runtime_error(std::string(argv[1]) + ": expected x F32 [S >= 2, 50, 2]");
    std::memcpy(s->x.data(), x->bytes.data(), s->x.size() * sizeof(float));
    s->label();
    float loss[Steps];
    for (size_t i = 0; i < Steps; ++i) loss[i] = s->step();
    stformer::safetensors::Writer w;
    stformer::add_params(w, s->model);
    w.add("x", stformer::safetensors::Dtype::F32, {B, N, 2}, std::as_bytes(std::span(s->x.data(), s->x.size())));
    w.add("target", stformer::safetensors::Dtype::I32, {B}, std::as_bytes(std::span(s->target.data(), s->target.size())));
    w.add("loss", stformer::safetensors::Dtype::F32, {Steps}, std::as_bytes(std::span(loss, Steps)));
    w.write(out / "train_expected.safetensors");
    for (size_t i = 0; i < Steps; ++i) std::printf("step %zu: loss %.6f\n", i + 1, double(loss[i]));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train_reference: %s\n", e.what());
    return 1;
  }
  return 0;
}
