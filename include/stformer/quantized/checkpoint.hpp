// Quantized checkpoints: a quantized model (stformer/quantized/) in a safetensors file, its
// integer tensors as I8 and I32 and its scales as F32, under the names its visit gives
// (`blocks.0.attn.wq.weight` I8, `...wq.weight_scale` F32, `...wq.requant.multiplier` I32, ...).
// save_params writes one like any model; load_quantized reads one strictly:
//   - every tensor present with its dtype and shape, and no other (load_params);
//   - every scale (`*scale`, F32) finite and above 0.
// A failed load throws std::runtime_error naming the file and the tensor, and leaves the model
// unchanged.
#pragma once

#include "../config.hpp"

#include <cmath>
#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include "../checkpoint.hpp"

namespace stformer::inline STFORMER_ABI {

template <class Q>
void load_quantized(const safetensors::File& f, Q& model) {
  auto loaded = std::make_unique<Q>();
  load_params(f, *loaded);
  std::string problem;
  for_each_param(
      [&](const Path& path, Init, const auto& t) {
        if constexpr (std::is_same_v<typename std::remove_cvref_t<decltype(t)>::value_type, float>)
          if (problem.empty() && path.name().view().ends_with("scale"))
            for (float s : t)
              if (!(std::isfinite(s) && s > 0)) {
                char value[32];
                std::snprintf(value, sizeof value, "%g", double(s));
                problem = "scale '" + std::string(path.name().view()) + "' is " + value + ": scales must be finite and above 0";
                break;
              }
      },
      std::as_const(*loaded));
  if (!problem.empty()) throw std::runtime_error("quantized checkpoint " + f.label() + ": " + problem);
  model = *loaded;
}

template <class Q>
void load_quantized(const std::filesystem::path& path, Q& model) {
  load_quantized(safetensors::File::read(path), model);
}

}  // namespace stformer
