// stformer — a model's parameters from a table of named constant arrays (ConstTensor), for
// programs without a file system.
//
// `checkpoint_header` (targets/firmware/) turns any safetensors checkpoint into a C++ header
// of constexpr arrays (they stay in flash) and a table of ConstTensor entries, one per F32
// tensor, named as in the checkpoint (I8, I16 and I32 tensors: tables of ConstTensorOf of
// their type). load_params copies them into a model through its
// parameter visitor, so it serves every model. No heap, no exceptions needed.
#pragma once

#include "config.hpp"

#include <algorithm>
#include <cstdint>
#include <string_view>

#include "params.hpp"

namespace stformer::inline STFORMER_ABI {

template <class E>
struct ConstTensorOf {
  const char* name;  // the parameter's dotted SPEC name
  const E* data;
  size_t size;       // number of elements
};
using ConstTensor = ConstTensorOf<float>;  // F32 tensors; a file's I8, I16, I32 ones: ConstTensorOf<std::int8_t> ...

// Copies each of the model's parameters (of element type E) from the table entry of the same
// name. A missing entry or a size that differs fails (stformer::fail); entries the model lacks
// are ignored.
template <class Model, class E, size_t T>
void load_params(const ConstTensorOf<E> (&table)[T], Model& model) {
  for_each_param(
      [&](const Path& path, Init, auto& t) {
        const ConstTensorOf<E>* e = std::find_if(table, table + T, [&](const ConstTensorOf<E>& c) { return path == c.name; });
        STFORMER_CHECK(e != table + T, "load_params: a parameter of the model is not in the table");
        STFORMER_CHECK(e->size == t.size(), "load_params: a table entry's size differs from the parameter's");
        std::copy(e->data, e->data + e->size, t.data());
      },
      model);
}

}  // namespace stformer
