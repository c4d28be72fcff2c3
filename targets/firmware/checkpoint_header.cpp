// checkpoint_header IN.safetensors OUT.hpp [--namespace NS] [--c]: a safetensors file's tensors
// as arrays, for programs without a file system (test data, a model's parameters to copy).
//
// Each F32 tensor becomes a constexpr float array, written as exact hexadecimal literals, and
// `NS::tensors` a table of stformer::ConstTensor entries named as in the file, for
// stformer::load_params (stformer/io/param_table.hpp), which copies them into a model; I8, I16 and
// I32 tensors become integer arrays in the tables `NS::int8_tensors`, `NS::int16_tensors`,
// `NS::int32_tensors`. Optimiser state and run state (`optim.`, `state.`) are left out. With
// --c, C arrays instead. A model's constant image, read in place, and its C API come from the
// generator, stformer-c-api, which takes the header that declares the model's type.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>
#include <sstream>
#include <vector>

#include <CLI/CLI.hpp>

#include "../checks.hpp"
#include <stformer/core/literals.hpp>
#include <stformer/io/safetensors.hpp>

namespace {

// A name that can open a namespace: an identifier that is not a C++ keyword nor reserved
// (a double underscore, or an underscore and a capital letter, at its start).
bool is_identifier(const std::string& s) {
  static const std::set<std::string, std::less<>> keywords = {
      "alignas", "alignof", "and", "and_eq", "asm", "auto", "bitand", "bitor", "bool", "break", "case", "catch", "char", "char8_t",
      "char16_t", "char32_t", "class", "compl", "concept", "const", "consteval", "constexpr", "constinit", "const_cast", "continue",
      "co_await", "co_return", "co_yield", "decltype", "default", "delete", "do", "double", "dynamic_cast", "else", "enum", "explicit",
      "export", "extern", "false", "float", "for", "friend", "goto", "if", "inline", "int", "long", "mutable", "namespace", "new",
      "noexcept", "not", "not_eq", "nullptr", "operator", "or", "or_eq", "private", "protected", "public", "register",
      "reinterpret_cast", "requires", "return", "short", "signed", "sizeof", "static", "static_assert", "static_cast", "struct",
      "switch", "template", "this", "thread_local", "throw", "true", "try", "typedef", "typeid", "typename", "union", "unsigned",
      "using", "virtual", "void", "volatile", "wchar_t", "while", "xor", "xor_eq", "std", "stformer"};
  if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0])) || keywords.count(s) != 0) return false;
  if (s.starts_with("__") || (s.size() > 1 && s[0] == '_' && std::isupper(static_cast<unsigned char>(s[1])))) return false;
  for (char c : s)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') return false;
  return true;
}

// A tensor's elements of type E from its bytes (little-endian, as the host).
template <class E>
std::vector<E> elements(const stformer::safetensors::TensorView& t) {
  std::vector<E> v(t.bytes.size() / sizeof(E));
  std::memcpy(v.data(), t.bytes.data(), v.size() * sizeof(E));
  return v;
}

// A tensor a header holds as an array: its dtype's index k in {F32, I8, I16, I32} and its
// element count n.
struct Array {
  const stformer::safetensors::TensorView& t;
  int k;
  size_t n;
};

// The tensors of `file` a header holds, in file order: all but the optimiser and run state
// (`optim.`, `state.`). Throws for a dtype with no array type, an empty tensor, or none at all.
std::vector<Array> arrays(const stformer::safetensors::File& file) {
  using stformer::safetensors::Dtype;
  std::vector<Array> a;
  for (const auto& t : file.tensors()) {
    if (t.name.starts_with("optim.") || t.name.starts_with("state.")) continue;
    const int k = t.dtype == Dtype::F32 ? 0 : t.dtype == Dtype::I8 ? 1 : t.dtype == Dtype::I16 ? 2 : t.dtype == Dtype::I32 ? 3 : -1;
    if (k < 0)
      throw std::runtime_error("tensor " + t.name + " is " + std::string(dtype_name(t.dtype)) + " (F32, I8, I16 and I32 tensors become arrays)");
    const size_t n = t.bytes.size() / stformer::safetensors::dtype_size(t.dtype);
    if (n == 0) throw std::runtime_error("tensor " + t.name + " is empty");
    a.push_back({t, k, n});
  }
  if (a.empty()) throw std::runtime_error("no tensors to write");
  return a;
}

// The array's elements as literals: exact hexadecimal floats, decimal integers.
void write_elements(std::ostream& out, const Array& a) {
  if (a.k == 0)
    stformer::write_float_literals(out, elements<float>(a.t).data(), a.n, "tensor " + a.t.name);
  else if (a.k == 1)
    stformer::write_integer_literals(out, elements<std::int8_t>(a.t).data(), a.n);
  else if (a.k == 2)
    stformer::write_integer_literals(out, elements<std::int16_t>(a.t).data(), a.n);
  else
    stformer::write_integer_literals(out, elements<std::int32_t>(a.t).data(), a.n);
}

std::string header(const stformer::safetensors::File& file, const std::string& ns, const std::string& source) {
  struct Table {
    const char* element;  // the C++ element type
    const char* name;     // of the table
    std::ostringstream entries;
    size_t count = 0;
  };
  Table tables[4] = {{"float", "tensors", {}}, {"std::int8_t", "int8_tensors", {}}, {"std::int16_t", "int16_tensors", {}},
                     {"std::int32_t", "int32_tensors", {}}};
  std::ostringstream out;
  size_t count = 0, bytes = 0;
  out << "// Generated by checkpoint_header from " << source << ": do not edit.\n#pragma once\n\n"
      << "#include <cstdint>\n\n#include <stformer/io/param_table.hpp>\n\nnamespace " << ns << " {\n\n";
  for (const Array& a : arrays(file)) {
    const auto& t = a.t;
    out << "// " << t.name << " " << std::string(dtype_name(t.dtype)) << " " << stformer::safetensors::shape_string(t.shape) << "\n"
        << "alignas(16) inline constexpr " << tables[a.k].element << " t" << count << "[" << a.n << "] = {";
    write_elements(out, a);
    out << "\n};\n";
    tables[a.k].entries << "    {\"" << t.name << "\", t" << count << ", " << a.n << "},\n";
    ++tables[a.k].count, ++count, bytes += t.bytes.size();
  }
  out << "\n// " << count << " tensors, " << bytes << " bytes\n";
  for (const auto& table : tables)
    if (table.count > 0)
      out << "inline constexpr stformer::ConstTensorOf<" << table.element << "> " << table.name << "[" << table.count << "] = {\n"
          << table.entries.str() << "};\n";
  out << "\n}  // namespace " << ns << "\n";
  return out.str();
}

// ---- C ----

std::string upper(std::string s) {
  for (char& c : s) c = char(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

// --c: each tensor as a C array `static const float NAME_x[n]` (int8_t,
// int16_t, int32_t for I8, I16, I32), NAME_x its name with the prefix and `_` for every
// character that C does not allow in a name, and NAME_X_SIZE its element count.
std::string c_arrays(const stformer::safetensors::File& file, const std::string& prefix, const std::string& source) {
  static const char* const element[4] = {"float", "int8_t", "int16_t", "int32_t"};
  std::ostringstream out;
  const std::string guard = upper(prefix) + "_H";
  out << "/* Generated by checkpoint_header from " << source << ": do not edit. */\n#ifndef " << guard << "\n#define " << guard
      << "\n\n#include <stdint.h>\n\n";
  for (const Array& a : arrays(file)) {
    const auto& t = a.t;
    std::string name = prefix + "_" + t.name;
    for (char& c : name)
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') c = '_';
    out << "/* " << t.name << " " << std::string(dtype_name(t.dtype)) << " " << stformer::safetensors::shape_string(t.shape) << " */\n#define "
        << upper(name) << "_SIZE " << a.n << "\nstatic const " << element[a.k] << " " << name << "[" << a.n << "] = {";
    write_elements(out, a);
    out << "\n};\n";
  }
  out << "\n#endif\n";
  return out.str();
}

// Writes text to path whole, then renames: no half-written file.
void write_file(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary);
    f << text;
    if (!f.flush()) throw std::runtime_error("cannot write " + tmp);
  }
  std::filesystem::rename(tmp, path);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"checkpoint_header: a safetensors file's tensors as constexpr arrays in a C++ header (stformer/io/param_table.hpp), "
               "or with --c as C arrays. A model's image and C API: stformer-c-api"};
  app.footer("Exit codes: 0 written; 1 a problem with the input (the message says which); 2 a bad command line.");
  std::string in, out, ns = "weights";
  app.add_option("input", in, "safetensors file")->required()->check(InputFile);
  app.add_option("output", out, "header to write")->required()->check(OutputPath);
  app.add_option("--namespace", ns,
                 "namespace of the arrays and of `tensors`; with --c, the prefix of the C names (default: the output's file name "
                 "without .h)")
      ->capture_default_str();
  bool c = false;
  app.add_flag("--c", c, "write C: the tensors as C arrays");
  if (const auto code = parse(app, argc, argv, "checkpoint_header")) return *code;
  // the names the command line gives: bad ones are command-line errors (exit 2)
  const std::filesystem::path out_path(out);
  if (c && app.count("--namespace") == 0) ns = out_path.stem().string();
  std::string problem;
  if (c && out_path.extension() != ".h") problem = "with --c the output is a C header: " + out + " does not end in .h";
  else if (!is_identifier(ns))
    problem = (c && app.count("--namespace") == 0 ? "the output's file name " + ns + " is not a C" : "--namespace " + ns + " is not a C++") +
              " identifier of its own (a keyword, reserved, std or stformer)";
  if (!problem.empty()) {
    std::cerr << "checkpoint_header: " << problem << "\n";
    return 2;
  }
  try {
    const auto file = stformer::safetensors::File::read(in);
    const std::string source = std::filesystem::path(in).filename().string();
    write_file(out, c ? c_arrays(file, ns, source) : header(file, ns, source));
  } catch (const std::exception& e) {
    std::cerr << "checkpoint_header: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
