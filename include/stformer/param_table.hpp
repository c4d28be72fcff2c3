// stformer — a model's parameters from a table of named constant arrays (ConstTensor), for
// programs without a file system.
//
// `checkpoint_header` (targets/firmware/) turns any safetensors checkpoint into a C++ header
// of constexpr float arrays (they stay in flash) and a table of ConstTensor entries, one per
// tensor, named as in the checkpoint. load_params copies them into a model through its
// parameter visitor, so it serves every model. No heap, no exceptions needed.
#pragma once

#include "config.hpp"

#include <algorithm>
#include <string_view>

#include "params.hpp"

namespace stformer::inline STFORMER_ABI {

struct ConstTensor {
  const char* name;  // the parameter's dotted SPEC name
  const float* data;
  size_t size;       // number of floats
};

// Copies each of the model's parameters from the table entry of the same name. A missing
// entry or a size that differs fails (stformer::fail); entries the model lacks are ignored.
template <class Model, size_t T>
void load_params(const ConstTensor (&table)[T], Model& model) {
  for_each_param(
      [&](const Path& path, Init, auto& t) {
        const ConstTensor* e = std::find_if(table, table + T, [&](const ConstTensor& c) { return path == c.name; });
        STFORMER_CHECK(e != table + T, "load_params: a parameter of the model is not in the table");
        STFORMER_CHECK(e->size == t.size(), "load_params: a table entry's size differs from the parameter's");
        std::copy(e->data, e->data + e->size, t.data());
      },
      model);
}

}  // namespace stformer
