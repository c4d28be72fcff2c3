// Quantized checkpoints: a quantized model (stformer/quantized/) in a safetensors file, its
// integer tensors as I8 and I32 and its scales as F32, under the names its visit gives
// (`blocks.0.attn.wq.weight` I8, `...wq.weight_scale` F32, `...wq.requant.multiplier` I32, ...).
// save_params writes one like any model; load_quantized reads one strictly:
//   - every tensor present with its dtype and shape, and no other (load_params);
//   - every integer and scale within the bounds its kernels are exact in (quantized/bounds.hpp);
//   - every requantization's multiplier and shift the ones its block's stored scales give
//     (requant_mismatch, quantized/bounds.hpp).
// A failed load throws std::runtime_error naming the file and the tensor, and leaves the model
// unchanged.
#pragma once

#include "../core/config.hpp"

#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>

#include "../io/checkpoint.hpp"
#include "bounds.hpp"

namespace stformer::inline STFORMER_ABI {

template <class Q>
void load_quantized(const safetensors::File& f, Q& model) {
  auto loaded = std::make_unique<Q>();
  load_params(f, *loaded);
  if (const OutOfBounds bad = out_of_bounds(std::as_const(*loaded))) {
    char value[32];
    std::snprintf(value, sizeof value, "%.10g", bad.value());  // an int32 whole, a float to its 9 digits
    throw std::runtime_error("quantized checkpoint " + f.label() + ": tensor '" + bad.tensor.c_str() + "' entry " + std::to_string(bad.entry) +
                             " is " + value + ", out of bounds: " + bad.bound);
  }
  if (const RequantMismatch bad = requant_mismatch(std::as_const(*loaded)))
    throw std::runtime_error("quantized checkpoint " + f.label() + ": tensor '" + bad.tensor.c_str() + "' entry " + std::to_string(bad.entry) +
                             " is " + std::to_string(bad.stored) + ", not " + std::to_string(bad.expected) +
                             ", the requantization its block's stored scales give");
  model = *loaded;
}

template <class Q>
void load_quantized(const std::filesystem::path& path, Q& model) {
  load_quantized(safetensors::File::read(path), model);
}

}  // namespace stformer
