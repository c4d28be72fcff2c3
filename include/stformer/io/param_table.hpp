// stformer — a model's parameters from a table of named constant arrays (ConstTensor), for
// programs without a file system.
//
// `checkpoint_header` (targets/firmware/) turns any safetensors checkpoint into a C++ header
// of constexpr arrays (they stay in flash) and a table of ConstTensor entries, one per F32
// tensor, named as in the checkpoint (I8, I16 and I32 tensors: tables of ConstTensorOf of
// their type). load_params copies them into a model through its
// parameter visitor, so it serves every model. No heap, no exceptions needed.
#pragma once

#include "../core/config.hpp"

#include <algorithm>
#include <cstdint>
#include <string_view>

#include "../core/params.hpp"

namespace stformer::inline STFORMER_ABI {

template <class E>
struct ConstTensorOf {
  const char* name;  // the parameter's dotted SPEC name
  const E* data;
  size_t size;       // number of elements
};
using ConstTensor = ConstTensorOf<float>;  // F32 tensors; a file's I8, I16, I32 ones: ConstTensorOf<std::int8_t> ...

// The entry of `table` named `name`, or null.
template <class E, size_t T>
constexpr const ConstTensorOf<E>* find_entry(const ConstTensorOf<E> (&table)[T], std::string_view name) {
  for (const auto& e : table)
    if (name == e.name) return &e;
  return nullptr;
}

// The same where the entry must exist, for constants: `constexpr const auto& x =
// table_entry(sets::tensors, "x");` does not compile when the table has no "x" (it reaches
// no_such_tensor, which is not constexpr and has no definition).
void no_such_tensor();
template <class E, size_t T>
constexpr const ConstTensorOf<E>& table_entry(const ConstTensorOf<E> (&table)[T], std::string_view name) {
  if (const auto* e = find_entry(table, name)) return *e;
  no_such_tensor();
  return table[0];
}

// Copies each of the model's parameters (of element type E) from the table entry of the same
// name. A missing entry or a size that differs fails (stformer::fail); entries the model lacks
// are ignored.
template <class Model, class E, size_t T>
void load_params(const ConstTensorOf<E> (&table)[T], Model& model) {
  for_each_param(
      [&](const Path& path, Init, auto& t) {
        const ConstTensorOf<E>* e = find_entry(table, path.name().view());
        STFORMER_CHECK(e != nullptr, "load_params: a parameter of the model is not in the table");
        STFORMER_CHECK(e->size == t.size(), "load_params: a table entry's size differs from the parameter's");
        std::copy(e->data, e->data + e->size, t.data());
      },
      model);
}

}  // namespace stformer
