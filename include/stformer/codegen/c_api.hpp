// stformer/codegen/c_api.hpp — what the C API sources written by stformer::c_api_source
// (stformer/codegen/c_api_source.hpp, the generator stformer-c-api) are built on: the status codes,
// the input checks and the one-time check of the model's image.
// Include it first, before any other header, as those sources do.
//
// Why first: a C program links the object built from such a source with the C compiler and
// its math library alone (-lm), nothing from libstdc++. xtensor's headers include <iostream>
// for their error messages, and libstdc++'s <iostream> gives every source file a static
// std::ios_base::Init, which needs libstdc++ at link time and builds the standard streams at
// start-up. Included first, this header sets <iostream>'s include guard and only declares the
// three streams those messages name: they are never constructed, and a forward pass prints
// nothing. (With another standard library the guard is left alone.)
#pragma once

#include <ostream>

#if defined(__GLIBCXX__) && !defined(_GLIBCXX_IOSTREAM)
#define _GLIBCXX_IOSTREAM 1
namespace std {
extern ostream cout;
extern ostream cerr;
extern ostream clog;
}  // namespace std
#endif

#include "../core/config.hpp"

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "model_image.hpp"
#include "../quantized/bounds.hpp"

namespace stformer::inline STFORMER_ABI::c_api {

// What every generated function returns (NAME_OK, NAME_BAD_INPUT, NAME_BAD_IMAGE in its header).
enum : int {
  ok = 0,
  bad_input = 1,  // a null pointer, a NaN or an infinity, a token id out of range: nothing written
  bad_image = 2,  // the image's layout is not the model's, or its integers are out of bounds (image_ok): nothing written
  full = 3,       // generation: the cache cannot hold what is asked (NAME_step, NAME_generate): nothing stepped
};

// Whether the n floats at v are all finite.
inline bool finite(const float* v, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (!std::isfinite(v[i])) return false;
  return true;
}

// Whether the n token ids at v are all in [0, rows).
inline bool ids_in_range(const std::int32_t* v, size_t n, size_t rows) {
  for (size_t i = 0; i < n; ++i)
    if (v[i] < 0 || size_t(v[i]) >= rows) return false;
  return true;
}

// image_matches(m, offsets) and, for an integer model (Integers), its integers and scales
// within the bounds its kernels are exact in (out_of_bounds, quantized/bounds.hpp), computed on
// the first call and remembered (a plain static int: no guard variable, so nothing from the C++
// runtime; two threads racing on the first call both compute the same answer).
template <bool Integers, class Model, size_t P>
bool image_ok(const Model& m, const size_t (&offsets)[P]) {
  static int state = 0;  // 0 not checked yet, 1 the model's layout and bounds, 2 not
  if (state == 0) state = image_matches(m, offsets) && !(Integers && out_of_bounds(m)) ? 1 : 2;
  return state == 1;
}

}  // namespace stformer::inline STFORMER_ABI::c_api
