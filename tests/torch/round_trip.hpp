// The exporter's round trip, shared by test_torch_export and test_torch_traced: a header the
// exporter wrote is included, its file loaded by the names it wrote, and InferOf's output compared
// with PyTorch's (the example file's `output`) to 1e-5 relative to the output's largest entry;
// training's forward (ActsOf) gives the same bits. The files are in STFORMER_EXPORT_DIR.
#pragma once

#include <memory>
#include <string>

#include <stformer/io/checkpoint.hpp>
#include <stformer/stformer.hpp>

#include "compare.hpp"

namespace test {

inline std::string exported(const char* name) { return file_in("STFORMER_EXPORT_DIR", name); }

template <class M, size_t B, size_t N>
void round_trip(const char* name) {
  const std::string base = exported(name);
  auto model = std::make_unique<M>();
  load_params(base + ".safetensors", *model);
  const auto example = safetensors::File::read(base + ".example.safetensors");
  typename M::template Input<B, N> x;
  typename M::template Output<B, N> want;
  read(example, "input", x);
  read(example, "output", want);
  auto pass = std::make_unique<InferOf<M, B, N>>();
  const auto& y = pass->forward(*model, x);
  worst = 0;
  check_rel(name, y, want, 1e-5);
  MESSAGE(std::string(name) << ": InferOf against PyTorch, largest relative difference " << worst << "; arena " << sizeof(InferOf<M, B, N>) << " B");
  auto acts = std::make_unique<ActsOf<M, B, N>>();
  CHECK(acts->forward(*model, x) == y);
}

}  // namespace test
