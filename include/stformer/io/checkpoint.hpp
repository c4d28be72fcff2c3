// stformer — model checkpoints: the parameter visitor (stformer/core/params.hpp) over safetensors.
//
// SPEC "Checkpoints": one F32 tensor per parameter (a quantized model's integer tensors: I8,
// I16, I32; stformer/quantized/), named by its dotted path (here optionally
// after a prefix, e.g. "ema."), with the parameter's shape, row-major as the model holds it.
// The namespaces "optim." and "state." are reserved for optimiser and RNG state.
//
// load_params is all-or-nothing: it first checks every parameter (present, F32, same shape,
// every float finite: a NaN or an infinity in a weight only gives garbage later) and
// throws every problem in one std::runtime_error, e.g.
//   checkpoint x.safetensors: tensor 'blocks.0.attn.wq.weight' has shape [16, 8], the model expects [16, 16]
// or, for a file written for another block (a LayerNorm's norm1.weight where a ScaleNorm's
// sn1.g is expected), each on a line of its own:
//   checkpoint x.safetensors: 3 problems:
//     tensor 'sn1.g' is missing
//     ...
//     2 unexpected tensors that the model does not have: 'norm1.weight', 'norm1.bias'
// and only then copies, so a failed load leaves the model unchanged.
//
// A file says what it is: save_params and save_checkpoint write the model's declaration
// (stformer/core/declaration.hpp) as the metadata "stformer.declaration", and so does
// python/stformer_export.py. Loading a file whose declaration differs from the model's is
// refused with both, even when every tensor matches (a pre-norm block's file into a post-norm
// block computes another function with the same tensors):
//   checkpoint x.safetensors: it holds another model than this one:
//     the file's:  Sequential<Named<"",Residual<Sequential<Named<"norm1",LayerNorm<...
//     the model's: Sequential<Named<"",Residual<Named<"self_attn",MultiHeadAttention<...
// A file with no declaration (written by other tools) is loaded by its tensors alone; a load
// under a prefix or with Unexpected::ignore (a part of a file) does not compare declarations.
//
// Unexpected tensors are an error by default (Unexpected::reject): a tensor whose name starts
// with the prefix but is not a parameter of the model means the file was written for another
// configuration (more blocks, other sub-blocks), which would otherwise load silently.
// Unexpected::ignore accepts them (a file holding several models, loading a sub-model).
// Tensors outside the prefix are never looked at, and when the prefix is not itself inside
// "optim." or "state." (e.g. the empty prefix), tensors in those reserved namespaces are not
// unexpected either: they are the optimiser/RNG state saved next to the model.
#pragma once

#include "../core/config.hpp"

#include <bit>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <stformer/core/params.hpp>
#include <stformer/core/rng.hpp>

#include "safetensors.hpp"

namespace stformer::inline STFORMER_ABI {

static_assert(std::endian::native == std::endian::little, "checkpoints copy little-endian floats as they are");

enum class Unexpected { reject, ignore };

namespace detail {
template <class T>
std::vector<size_t> shape_of(const T& t) {
  const auto& s = t.shape();
  return {s.begin(), s.end()};
}
inline bool reserved_name(std::string_view name) { return name.starts_with("optim.") || name.starts_with("state."); }
// The index of an F32 tensor's first NaN or infinity (all exponent bits set), or all_finite
// (every entry finite, or not F32).
inline constexpr size_t all_finite = size_t(-1);
inline size_t first_non_finite(const safetensors::TensorView& v) {
  if (v.dtype != safetensors::Dtype::F32) return all_finite;
  for (size_t i = 0; i * 4 < v.bytes.size(); ++i) {
    std::uint32_t bits;
    std::memcpy(&bits, v.bytes.data() + 4 * i, 4);
    if ((bits & 0x7f800000u) == 0x7f800000u) return i;
  }
  return all_finite;
}

// The file's dtype of a tensor of T elements: F32 for the float models, I8, I16 and I32 for
// the integer tensors of quantized ones (stformer/quantized/).
template <class T>
constexpr safetensors::Dtype dtype_of() {
  using E = typename T::value_type;
  if constexpr (std::is_same_v<E, float>) return safetensors::Dtype::F32;
  else if constexpr (std::is_same_v<E, std::int8_t>) return safetensors::Dtype::I8;
  else if constexpr (std::is_same_v<E, std::int16_t>) return safetensors::Dtype::I16;
  else if constexpr (std::is_same_v<E, std::int32_t>) return safetensors::Dtype::I32;
  else static_assert(sizeof(E) == 0, "checkpoint: a parameter tensor of an element type with no safetensors dtype here");
}
}  // namespace detail

// Adds every parameter of model to w (F32; a quantized model's integer tensors as I8, I16,
// I32), named prefix + dotted path, in visit order.
template <class M>
void add_params(safetensors::Writer& w, const M& model, std::string_view prefix = "") {
  for_each_param(
      [&](const Path& path, Init, const auto& t) {
        w.add(std::string(prefix) + path.name().c_str(), detail::dtype_of<std::remove_cvref_t<decltype(t)>>(), detail::shape_of(t),
              std::as_bytes(std::span(t.data(), t.size())));
      },
      model);
}

// The metadata key of the model's declaration.
inline constexpr const char* declaration_key = "stformer.declaration";

namespace detail {
template <class M>
void declare_model(safetensors::Writer& w) {
  w.set_metadata(declaration_key, declaration<M>());
}
}  // namespace detail

// Throws every problem that would stop load_params (see top; at most 50 listed); changes nothing.
template <class M>
void check_params(const safetensors::File& f, const M& model, std::string_view prefix = "", Unexpected unexpected = Unexpected::reject) {
  std::set<std::string, std::less<>> expected;
  std::vector<std::string> problems;
  if (const auto held = f.metadata().find(declaration_key);
      prefix.empty() && unexpected == Unexpected::reject && held != f.metadata().end())
    if (const std::string own = declaration<M>(); held->second != own)
      problems.push_back("it holds another model than this one:\n    the file's:  " + held->second + "\n    the model's: " + own);
  for_each_param(
      [&](const Path& path, Init, const auto& t) {
        std::string name = std::string(prefix) + path.name().c_str();
        const safetensors::TensorView* v = f.find(name);
        const std::vector<size_t> shape = detail::shape_of(t);
        if (v == nullptr) {
          problems.push_back("tensor '" + name + "' is missing");
        } else if (constexpr auto dtype = detail::dtype_of<std::remove_cvref_t<decltype(t)>>(); v->dtype != dtype) {
          problems.push_back("tensor '" + name + "' has dtype " + std::string(dtype_name(v->dtype)) + ", the model expects " +
                             std::string(dtype_name(dtype)));
        } else if (v->shape != shape) {
          problems.push_back("tensor '" + name + "' has shape " + safetensors::shape_string(v->shape) + ", the model expects " +
                             safetensors::shape_string(shape));
        } else if (const size_t bad = detail::first_non_finite(*v); bad != detail::all_finite) {
          problems.push_back("tensor '" + name + "' holds a value that is not finite (NaN or infinity) at entry " + std::to_string(bad));
        }
        expected.insert(std::move(name));
      },
      model);
  constexpr size_t most = 50;
  if (unexpected == Unexpected::reject) {
    std::vector<std::string_view> extra;
    for (const auto& v : f.tensors())
      if (v.name.starts_with(prefix) && !expected.contains(v.name) && !(detail::reserved_name(v.name) && !detail::reserved_name(prefix)))
        extra.push_back(v.name);
    if (!extra.empty()) {
      std::string p = std::to_string(extra.size()) + " unexpected tensor" + (extra.size() == 1 ? "" : "s") + " that the model does not have:";
      for (size_t i = 0; i < extra.size() && i < most; ++i) p += (i ? ", '" : " '") + std::string(extra[i]) + "'";
      if (extra.size() > most) p += " ...";
      problems.push_back(std::move(p));
    }
  }
  if (problems.size() == 1) throw std::runtime_error("checkpoint " + f.label() + ": " + problems[0]);
  if (!problems.empty()) {
    std::string all = "checkpoint " + f.label() + ": " + std::to_string(problems.size()) + " problems:";
    for (size_t i = 0; i < problems.size() && i < most; ++i) all += "\n  " + problems[i];
    if (problems.size() > most) all += "\n  ... and " + std::to_string(problems.size() - most) + " more";
    throw std::runtime_error(all);
  }
}

// Copies every parameter of model from f, after check_params: all or nothing.
template <class M>
void load_params(const safetensors::File& f, M& model, std::string_view prefix = "", Unexpected unexpected = Unexpected::reject) {
  check_params(f, std::as_const(model), prefix, unexpected);
  for_each_param(
      [&](const Path& path, Init, auto& t) {
        const auto bytes = f.at(std::string(prefix) + path.name().c_str()).bytes;
        std::memcpy(t.data(), bytes.data(), bytes.size());
      },
      model);
}

// The model alone in a file at path (atomic write), with optional "__metadata__" strings.
template <class M>
void save_params(const std::filesystem::path& path, const M& model, const std::map<std::string, std::string>& metadata = {}) {
  safetensors::Writer w;
  for (const auto& [key, value] : metadata) w.set_metadata(key, value);
  detail::declare_model<M>(w);
  add_params(w, model);
  w.write(path);
}

// Reads the file at path and loads the model from it (strict, no prefix).
template <class M>
void load_params(const std::filesystem::path& path, M& model) {
  load_params(safetensors::File::read(path), model);
}

// Training checkpoints: the model (SPEC names), the optimiser's buffers under
// "optim.<buffer>.<parameter name>" (exp_avg, exp_avg_sq / momentum_buffer), the optimiser's
// step count "optim.steps" (I64 scalar), the training step "state.step" (I64 scalar) and the
// generator "state.rng" (U64 [2]: state, increment). Saving then loading restores a run
// exactly: the next steps are bit-identical to a run that never stopped.
struct TrainingState {
  std::int64_t step = 0;
  Rng rng;
};

namespace detail {
template <class T>
void add_scalar(safetensors::Writer& w, std::string name, safetensors::Dtype dtype, std::vector<size_t> shape, const T* values) {
  size_t n = 1;
  for (size_t d : shape) n *= d;
  w.add(std::move(name), dtype, std::move(shape), std::as_bytes(std::span(values, n)));
}
template <class T>
void check_scalar(const safetensors::File& f, const std::string& name, safetensors::Dtype dtype, size_t count) {
  const auto* v = f.find(name);
  if (v == nullptr) throw std::runtime_error("checkpoint " + f.label() + ": tensor '" + name + "' is missing (not a training checkpoint?)");
  if (v->dtype != dtype || v->bytes.size() != count * sizeof(T))
    throw std::runtime_error("checkpoint " + f.label() + ": tensor '" + name + "' should be " + std::string(dtype_name(dtype)) + " with " +
                             std::to_string(count) + " element(s)");
}
}  // namespace detail

// Adds model, optimiser buffers and state to w (the layout above); a program can add more
// (a vocabulary under "state.") before writing.
template <class M, class Optimizer>
void add_checkpoint(safetensors::Writer& w, const M& model, const Optimizer& opt, const TrainingState& state) {
  detail::declare_model<M>(w);
  add_params(w, model);
  Optimizer::visit_buffers(opt, [&](const char* buffer, const M& b) { add_params(w, b, std::string("optim.") + buffer + "."); });
  detail::add_scalar(w, "optim.steps", safetensors::Dtype::I64, {}, &opt.steps);
  detail::add_scalar(w, "state.step", safetensors::Dtype::I64, {}, &state.step);
  const std::uint64_t rng[2] = {state.rng.state(), state.rng.increment()};
  detail::add_scalar(w, "state.rng", safetensors::Dtype::U64, {2}, rng);
}

template <class M, class Optimizer>
void save_checkpoint(const std::filesystem::path& path, const M& model, const Optimizer& opt, const TrainingState& state,
                     const std::map<std::string, std::string>& metadata = {}) {
  safetensors::Writer w;
  for (const auto& [key, value] : metadata) w.set_metadata(key, value);
  add_checkpoint(w, model, opt, state);
  w.write(path);
}

// Loads model, optimiser and state from a training checkpoint; checks everything first, so a
// file that fails leaves all three unchanged. A file holding only the model is rejected here
// (use load_params for it).
template <class M, class Optimizer>
void load_checkpoint(const safetensors::File& f, M& model, Optimizer& opt, TrainingState& state) {
  check_params(f, std::as_const(model));
  Optimizer::visit_buffers(std::as_const(opt), [&](const char* buffer, const M& b) {
    check_params(f, b, std::string("optim.") + buffer + ".");
  });
  detail::check_scalar<std::int64_t>(f, "optim.steps", safetensors::Dtype::I64, 1);
  detail::check_scalar<std::int64_t>(f, "state.step", safetensors::Dtype::I64, 1);
  detail::check_scalar<std::uint64_t>(f, "state.rng", safetensors::Dtype::U64, 2);
  load_params(f, model);
  Optimizer::visit_buffers(opt, [&](const char* buffer, M& b) { load_params(f, b, std::string("optim.") + buffer + "."); });
  std::memcpy(&opt.steps, f.at("optim.steps").bytes.data(), sizeof opt.steps);
  std::memcpy(&state.step, f.at("state.step").bytes.data(), sizeof state.step);
  std::uint64_t rng[2];
  std::memcpy(rng, f.at("state.rng").bytes.data(), sizeof rng);
  state.rng.restore(rng[0], rng[1]);
}

template <class M, class Optimizer>
void load_checkpoint(const std::filesystem::path& path, M& model, Optimizer& opt, TrainingState& state) {
  load_checkpoint(safetensors::File::read(path), model, opt, state);
}

}  // namespace stformer
