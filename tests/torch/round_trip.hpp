// The exporter's round trip, shared by test_torch_export and test_torch_traced: a header the
// exporter wrote is included, its file loaded by the names it wrote, and InferOf's output compared
// with PyTorch's (the example file's `output`) to 1e-5 relative to the output's largest entry;
// training's forward (ActsOf) gives the same bits. A model exported with a key mask (the example's
// `keys`, 1 for a row that exists) is run with it, and only the rows that exist are compared when
// the output has the input's rows (PyTorch may write anything in the others). A model over a
// memory (a decoder) reads the example's `memory` [B, M, D] beside its rows. The files are in
// STFORMER_EXPORT_DIR.
#pragma once

#include <memory>
#include <string>

#include <stformer/io/checkpoint.hpp>
#include <stformer/stformer.hpp>

#include "compare.hpp"

namespace test {

inline std::string exported(const char* name) { return file_in("STFORMER_EXPORT_DIR", name); }

// The exported model NAME.safetensors, whose declaration (python/stformer_declaration.py) is the
// one C++ states for M.
template <class M>
std::unique_ptr<M> load_exported(const std::string& base) {
  auto model = std::make_unique<M>();
  CHECK(safetensors::File::read(base + ".safetensors").metadata().at(declaration_key) == declaration<M>());
  load_params(base + ".safetensors", *model);
  return model;
}

template <class M, size_t B, size_t N>
void round_trip(const char* name) {
  const std::string base = exported(name);
  const auto model = load_exported<M>(base);
  const auto example = safetensors::File::read(base + ".example.safetensors");
  typename M::template Input<B, N> x;
  typename M::template Output<B, N> want;
  read(example, "input", x);
  read(example, "output", want);
  KeyMask<B, N> keys;
  const bool padded = example.find("keys") != nullptr;
  if (padded) read(example, "keys", keys);
  const Mask<B, N> mask{.causal = declares_causal<M>, .keys = padded ? &keys : nullptr};
  auto pass = std::make_unique<InferOf<M, B, N>>();
  auto y = pass->forward(*model, x, mask);
  constexpr size_t rows = dims<decltype(y)>[1], width = dims<decltype(y)>[2];
  if (padded && rows >= N)  // a padded row's output as PyTorch's: not compared (rows − N class tokens before them exist)
    for (size_t b = 0; b < B; ++b)
      for (size_t j = rows - N; j < rows; ++j)
        if (!keys(b, j - (rows - N))) std::copy_n(want.data() + (b * rows + j) * width, width, y.data() + (b * rows + j) * width);
  worst = 0;
  check_rel(name, y, want, 1e-5);
  MESSAGE(std::string(name) << ": InferOf against PyTorch" << std::string(padded ? " (with the key mask)" : "") << ", largest relative difference "
                            << worst << "; arena " << sizeof(InferOf<M, B, N>) << " B");
  auto acts = std::make_unique<ActsOf<M, B, N>>();
  CHECK(acts->forward(*model, x, mask) == pass->forward(*model, x, mask));
}

// A model over a memory: rows x [B, N, D] and the memory m [B, Mem, D] (the example's `memory`).
template <class M, size_t B, size_t N, size_t Mem>
void memory_round_trip(const char* name) {
  const std::string base = exported(name);
  const auto model = load_exported<M>(base);
  const auto example = safetensors::File::read(base + ".example.safetensors");
  typename M::template Input<B, N> x, want;
  typename M::template MemoryRows<B, Mem> m;
  read(example, "input", x);
  read(example, "memory", m);
  read(example, "output", want);
  auto pass = std::make_unique<InferOf<M, B, N, Mem>>();
  const auto& y = pass->forward(*model, x, m);
  worst = 0;
  check_rel(name, y, want, 1e-5);
  MESSAGE(std::string(name) << ": InferOf against PyTorch, largest relative difference " << worst << "; arena " << sizeof(InferOf<M, B, N, Mem>) << " B");
  auto acts = std::make_unique<ActsOf<M, B, N, Mem>>();
  CHECK(acts->forward(*model, x, m) == y);
}

}  // namespace test
