// A model's declaration: the text of its type, written into every checkpoint (save_params,
// stformer/io/checkpoint.hpp; python/stformer_export.py) and compared when one is loaded, so that
// a file of another model whose tensors have the same names and shapes (a pre-norm encoder's
// into a post-norm one) is refused instead of computing another function.
//
// Each leaf and combinator states its own part, next to its definition:
//   static std::string declaration() { return declare("Linear", In, Out, HasBias); }
// giving one canonical form, the same from every compiler and from the exporter:
//   - the template's name without namespaces, then its arguments between < >, separated by ","
//     with no spaces, every argument written (defaults too);
//   - a number in decimal, a bool true/false, an enumerator Enum::name, a string "in quotes",
//     a block its own declaration, an ε epsilon(x) with x the shortest %g that reads back as the
//     same float;
//   - what does not change the function is left out (a Linear's initialisation, a Named<"", B>
//     around B);
//   - a composite block is the declaration of what it is made of: EncoderBlock<16, 4, 32,
//     PreNorm<>> is declared as the Sequential of Named, Residual, LayerNorm, ... it stands for,
//     and a model derived from a chain (struct M : Sequential<...> {}) as that chain;
//   - a block that declares itself causal (static constexpr bool causal = true, a causal
//     WithMemory too) is written Causal<its declaration>;
//   - a block with no declaration() (one of the user's) is written as the compiler spells its
//     type: the same from one compiler, not across compilers or from the exporter.
// Example: Sequential<Named<"norm",LayerNorm<32,epsilon(1e-12)>>,Named<"fc",Linear<32,3,Bias::yes>>>
#pragma once

#include "config.hpp"

#include <algorithm>
#include <concepts>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <type_traits>

namespace stformer::inline STFORMER_ABI {

// A block that states its declaration (every leaf and combinator of the library does).
template <class T>
concept Declared = requires {
  { T::declaration() } -> std::convertible_to<std::string>;
};

// A block as an argument of declare.
template <class T>
struct DeclaredBlock {};

// Whether Model's type declares that it runs with the causal mask, as a causal language model
// does (row i of its output reads rows 0 .. i of its input alone):
//   struct CausalLM : Sequential<...> { static constexpr bool causal = true; };
// Passes take their masks as arguments all the same; the declaration is what a model's C API
// (stformer/codegen/c_api_source.hpp), its integer model (Quantized, stformer/quantized/quantize.hpp)
// and its checkpoint's declaration (Causal<...>) keep.
template <class Model>
inline constexpr bool declares_causal = requires { requires Model::causal; };

namespace decl {
template <std::integral I>
std::string text(I v) {
  if constexpr (std::is_same_v<I, bool>) return v ? "true" : "false";
  else return std::to_string(v);
}
// (appended piece by piece: g++ 12 at -O3 warns of a false overlap in "\"" + std::string + "\"")
inline std::string wrapped(std::string_view open, std::string_view inner, std::string_view close) {
  std::string out;
  out.reserve(open.size() + inner.size() + close.size());
  out.append(open).append(inner).append(close);
  return out;
}
inline std::string text(std::string_view quoted) { return wrapped("\"", quoted, "\""); }
// A type as the compiler spells it in __PRETTY_FUNCTION__ (g++: "[with T = X; ...]", clang: "[T = X]").
template <class T>
std::string compiler_name() {
  const std::string_view f = __PRETTY_FUNCTION__;
  const size_t at = f.find("T = ") + 4;
  return std::string(f.substr(at, std::min(f.find(';', at), f.rfind(']')) - at));
}
template <class T>
std::string text(DeclaredBlock<T>) {
  std::string own;
  if constexpr (Declared<T>) own = T::declaration();
  else own = compiler_name<T>();  // a block of the user's with no declaration of its own
  if constexpr (declares_causal<T>) return wrapped("Causal<", own, ">");
  else return own;
}
// The shortest %g that strtof reads back as v: 1e-05, 1e-12, 1.1920929e-07.
inline std::string shortest(float v) {
  char buf[32];
  for (int digits = 1; digits <= 9; ++digits) {
    std::snprintf(buf, sizeof buf, "%.*g", digits, double(v));
    if (std::strtof(buf, nullptr) == v) break;
  }
  return buf;
}
}  // namespace decl

// "Name<a,b,...>": each argument a number, bool, string_view (quoted), DeclaredBlock<T>{}, or an
// enumerator with a declared_value(e) found beside its enum.
template <class... A>
std::string declare(std::string_view name, const A&... args) {
  std::string out(name);
  out += '<';
  bool first = true;
  auto add = [&](const auto& a) {
    if (!first) out += ',';
    first = false;
    if constexpr (std::is_enum_v<std::remove_cvref_t<decltype(a)>>) out += declared_value(a);
    else out += decl::text(a);
  };
  (add(args), ...);
  return out + '>';
}

template <class T>
std::string declaration() {
  return decl::text(DeclaredBlock<T>{});
}

}  // namespace stformer
