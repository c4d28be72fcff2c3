// stformer — model checkpoints: the parameter visitor (stformer/params.hpp) over safetensors.
//
// SPEC "Checkpoints": one F32 tensor per parameter, named by its dotted path (here optionally
// after a prefix, e.g. "ema."), with the parameter's shape, row-major as the model holds it.
// The namespaces "optim." and "state." are reserved for optimiser and RNG state.
//
// load_params is all-or-nothing: it first checks every parameter (present, F32, same shape) and
// throws the first problem as std::runtime_error, e.g.
//   checkpoint x.safetensors: tensor 'blocks.0.attn.wq.weight' has shape [16, 8], the model expects [16, 16]
// and only then copies, so a failed load leaves the model unchanged.
//
// Unexpected tensors are an error by default (Unexpected::reject): a tensor whose name starts
// with the prefix but is not a parameter of the model means the file was written for another
// configuration (more blocks, other sub-blocks), which would otherwise load silently.
// Unexpected::ignore accepts them (a file holding several models, loading a sub-model).
// Tensors outside the prefix are never looked at, and when the prefix is not itself inside
// "optim." or "state." (e.g. the empty prefix), tensors in those reserved namespaces are not
// unexpected either: they are the optimiser/RNG state saved next to the model.
#pragma once

#include <bit>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <stformer/params.hpp>

#include "safetensors.hpp"

namespace stformer {

static_assert(std::endian::native == std::endian::little, "checkpoints copy little-endian floats as they are");

enum class Unexpected { reject, ignore };

namespace detail {
template <class T>
std::vector<size_t> shape_of(const T& t) {
  const auto& s = t.shape();
  return {s.begin(), s.end()};
}
inline bool reserved_name(std::string_view name) { return name.starts_with("optim.") || name.starts_with("state."); }
}  // namespace detail

// Adds every parameter of model to w as F32, named prefix + dotted path, in visit order.
template <class M>
void add_params(safetensors::Writer& w, const M& model, std::string_view prefix = "") {
  for_each_param(
      [&](const Path& path, Init, const auto& t) {
        w.add(std::string(prefix) + path.c_str(), safetensors::Dtype::F32, detail::shape_of(t), std::as_bytes(std::span(t.data(), t.size())));
      },
      model);
}

// Loads every parameter of model from f (see top for the checks and the unexpected tensors).
template <class M>
void load_params(const safetensors::File& f, M& model, std::string_view prefix = "", Unexpected unexpected = Unexpected::reject) {
  std::set<std::string, std::less<>> expected;
  std::string problem;
  for_each_param(
      [&](const Path& path, Init, const auto& t) {
        std::string name = std::string(prefix) + path.c_str();
        const safetensors::TensorView* v = f.find(name);
        const std::vector<size_t> shape = detail::shape_of(t);
        if (!problem.empty()) {  // keep the first
        } else if (v == nullptr) {
          problem = "tensor '" + name + "' is missing";
        } else if (v->dtype != safetensors::Dtype::F32) {
          problem = "tensor '" + name + "' has dtype " + std::string(dtype_name(v->dtype)) + ", the model expects F32";
        } else if (v->shape != shape) {
          problem = "tensor '" + name + "' has shape " + safetensors::shape_string(v->shape) + ", the model expects " +
                    safetensors::shape_string(shape);
        }
        expected.insert(std::move(name));
      },
      std::as_const(model));
  if (problem.empty() && unexpected == Unexpected::reject) {
    std::vector<std::string_view> extra;
    for (const auto& v : f.tensors())
      if (v.name.starts_with(prefix) && !expected.contains(v.name) && !(detail::reserved_name(v.name) && !detail::reserved_name(prefix)))
        extra.push_back(v.name);
    if (!extra.empty()) {
      problem = std::to_string(extra.size()) + " unexpected tensor" + (extra.size() == 1 ? "" : "s") + " that the model does not have:";
      for (size_t i = 0; i < extra.size() && i < 10; ++i) problem += (i ? ", '" : " '") + std::string(extra[i]) + "'";
      if (extra.size() > 10) problem += " ...";
    }
  }
  if (!problem.empty()) throw std::runtime_error("checkpoint " + f.label() + ": " + problem);
  for_each_param(
      [&](const Path& path, Init, auto& t) {
        const auto bytes = f.at(std::string(prefix) + path.c_str()).bytes;
        std::memcpy(t.data(), bytes.data(), bytes.size());
      },
      model);
}

// The model alone in a file at path (atomic write), with optional "__metadata__" strings.
template <class M>
void save_params(const std::filesystem::path& path, const M& model, const std::map<std::string, std::string>& metadata = {}) {
  safetensors::Writer w;
  for (const auto& [key, value] : metadata) w.set_metadata(key, value);
  add_params(w, model);
  w.write(path);
}

// Reads the file at path and loads the model from it (strict, no prefix).
template <class M>
void load_params(const std::filesystem::path& path, M& model) {
  load_params(safetensors::File::read(path), model);
}

}  // namespace stformer
