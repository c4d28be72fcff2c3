// checkpoint_header IN.safetensors OUT.hpp [--namespace NS] [--model pointer|set]: a
// safetensors checkpoint to a C++ header for programs without a file system.
//
// Without --model: each F32 tensor of any safetensors file becomes a constexpr float array,
// written as exact hexadecimal literals, and `NS::tensors` a table of stformer::ConstTensor
// entries named as in the file, for stformer::load_params (stformer/param_table.hpp), which
// copies them into a model; I8, I16 and I32 tensors become integer arrays in the tables
// `NS::int8_tensors`, `NS::int16_tensors`, `NS::int32_tensors`. Optimiser state and run state
// (`optim.`, `state.`) are left out.
//
// With --model pointer or set (max_value's two models, SPEC Example 1): the checkpoint is
// loaded into that model and written as its constant image (stformer/model_image.hpp):
// `NS::model()` is the model itself, read in place from read-only memory, nothing copied. A
// quantized checkpoint (max_value quantize) gives the image of the int8 model,
// stformer::Quantized<PointerModel<2, 16, 1, 64, 2>> or Quantized<SetTransformer<...>>, after
// load_quantized's checks.
// Another model type gets its image from stformer::model_image_source in a program of its own.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <set>
#include <sstream>
#include <vector>

#include <CLI/CLI.hpp>

#include "../checks.hpp"
#include "../max_value/max_value.hpp"

#include <stformer/model_image_source.hpp>
#include <stformer/safetensors.hpp>

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
    stformer::detail::write_integer_literals(out, elements<std::int8_t>(a.t).data(), a.n);
  else if (a.k == 2)
    stformer::detail::write_integer_literals(out, elements<std::int16_t>(a.t).data(), a.n);
  else
    stformer::detail::write_integer_literals(out, elements<std::int32_t>(a.t).data(), a.n);
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
      << "#include <cstdint>\n\n#include <stformer/param_table.hpp>\n\nnamespace " << ns << " {\n\n";
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

// The type names written into an image header, spelled as max_value's.
static_assert(std::is_same_v<max_value::PointerNet, stformer::PointerModel<2, 16, 1, 64, 2>>);
static_assert(std::is_same_v<max_value::SetNet, stformer::SetTransformer<2, 64, 4, 16, 2>>);
static_assert(std::is_same_v<max_value::QPointerNet, stformer::Quantized<stformer::PointerModel<2, 16, 1, 64, 2>>>);
static_assert(std::is_same_v<max_value::QSetNet, stformer::Quantized<stformer::SetTransformer<2, 64, 4, 16, 2>>>);

// The checkpoint in `file` loaded into a Model (every parameter present with its shape).
template <class Model>
std::unique_ptr<Model> load(const stformer::safetensors::File& file) {
  auto model = std::make_unique<Model>();
  if constexpr (stformer::quant::is_quantized<Model>)
    stformer::load_quantized(file, *model);  // its scales and multipliers checked too
  else
    stformer::load_params(file, *model);
  return model;
}

template <class Model>
std::string image(const stformer::safetensors::File& file, const std::string& type, const std::string& ns, const std::string& source) {
  return stformer::model_image_source(*load<Model>(file), type, ns, source);
}

// ---- C ----

std::string upper(std::string s) {
  for (char& c : s) c = char(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

std::string float_literal(double v) {
  char text[40];
  std::snprintf(text, sizeof text, "%af", double(float(v)));
  return text;
}

// Without --model, --c: each tensor as a C array `static const float NAME_x[n]` (int8_t,
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

// --c --model: max_value's model as C functions prefixed `name`: a C header and a C++ source
// (the model's image, the forward pass's static workspace and the functions), one set of 50
// points of 2 coordinates per call.
struct CApi {
  std::string header, source;
};

template <class Model>
CApi c_api(const stformer::safetensors::File& file, const std::string& type, const std::string& name, const std::string& file_name,
           const std::string& source) {
  constexpr bool pointer = std::is_same_v<Model, max_value::PointerNet> || std::is_same_v<Model, max_value::QPointerNet>;
  constexpr bool int8 = stformer::quant::is_quantized<Model>;
  constexpr size_t N = 50, In = 2, Out = pointer ? N : 2;
  const auto model = load<Model>(file);
  const std::string M = upper(name), what = std::string("max_value's ") + (pointer ? "pointer" : "set") + " model";
  std::ostringstream h, c;
  h << "/* " << file_name << ".h: generated by checkpoint_header from " << source << ": do not edit.\n"
    << "   " << what << " (" << type << "), " << (int8 ? "int8" : "float32") << ", forward only, one set of\n"
    << "   " << N << " points per call. Build " << file_name << ".cpp with a C++20 compiler and stformer's flags; the\n"
    << "   C side links its object with the C math library (-lm) and nothing else. Not reentrant:\n"
    << "   the calls share one static workspace. */\n"
    << "#ifndef " << M << "_H\n#define " << M << "_H\n\n#include <stdint.h>\n\n#ifdef __cplusplus\nextern \"C\" {\n#endif\n\n"
    << "#define " << M << "_SET_SIZE " << N << "     /* points in a set */\n"
    << "#define " << M << "_POINT_SIZE " << In << "    /* coordinates of a point */\n"
    << "#define " << M << "_INPUT_SIZE " << N * In << "  /* the input: a set [" << N << "][" << In << "], point by point */\n"
    << "#define " << M << "_OUTPUT_SIZE " << Out << "   /* the output: "
    << (pointer ? "each point's log-probability of being the largest" : "the point predicted (the set's largest)") << " */\n";
  if constexpr (int8) {
    const float out_scale = model->template get<Model::steps - 1>().scale(0);  // of its float end
    h << "#define " << M << "_INPUT_SCALE " << float_literal(model->template get<0>().scale(0)) << "  /* " << name
      << "_predict_int8's input: round(x / scale), saturated to int16 */\n"
      << "#define " << M << "_OUTPUT_SCALE " << float_literal(out_scale) << "  /* the real value of a unit of " << name
      << "_predict_int8's output */\n";
  }
  h << "\n#define " << M << "_OK 0\n"
    << "#define " << M << "_BAD_INPUT 1  /* a NaN or an infinity in the input: nothing written */\n"
    << "#define " << M << "_BAD_IMAGE 2  /* the model's image is not laid out as the model (checked on the first\n"
    << "                                call): nothing written */\n\n"
    << "/* Bytes of the model's constant image (flash on a microcontroller) and of the static RAM the\n"
    << "   calls use, as the compiler of " << file_name << ".cpp lays them out. */\n"
    << "extern const uint32_t " << name << "_parameter_bytes;\n"
    << "extern const uint32_t " << name << "_workspace_bytes;\n\n"
    << "/* out[" << M << "_OUTPUT_SIZE] of in[" << M << "_INPUT_SIZE]" << (int8 ? " (quantized, run in integers, dequantized)" : "")
    << ". */\n"
    << "int " << name << "_predict(const float* in, float* out);\n";
  if constexpr (int8)
    h << "\n/* Integers only: out_q[" << M << "_OUTPUT_SIZE] of the quantized set in_q[" << M << "_INPUT_SIZE]: "
      << (pointer ? "the int32 logits (the\n   largest is the point predicted; the log-softmax of out_q * " + M + "_OUTPUT_SCALE is " + name +
                        "_predict's output)"
                  : "the point predicted, in\n   units of " + M + "_OUTPUT_SCALE")
      << ". */\n"
      << "int " << name << "_predict_int8(const int16_t* in_q, " << (pointer ? "int32_t" : "int16_t") << "* out_q);\n";
  h << "\n#ifdef __cplusplus\n}\n#endif\n\n#endif\n";

  std::string image_text = stformer::model_image_source(*model, type, name + "_image", source);
  image_text.erase(image_text.find("#pragma once\n"), 13);
  c << "// " << file_name << ".cpp: generated by checkpoint_header from " << source << ": do not edit.\n"
    << "// The C functions of " << file_name << ".h: " << what << ", " << (int8 ? "int8" : "float32") << ".\n"
    << "#include <stformer/c_api.hpp>  // first: the object then needs nothing from libstdc++\n\n#include <algorithm>\n\n"
    << "#include \"" << file_name << ".h\"\n\n"
    << image_text << "\n"
    << "namespace {\n\nusing Model = " << name << "_image::Model;\nconstexpr std::size_t N = " << N << ", In = " << In << ", Out = " << Out
    << ";\n"
    << "stformer::InferOf<Model, 1, N> infer;  // the forward pass's workspace\n"
    << "stformer::Tensor<1, N, In> x;           // the float input\n"
    << "\nconst Model* checked_model() {\n"
    << "  const Model& model = " << name << "_image::model();\n"
    << "  return stformer::c_api::image_ok(model, " << name << "_image::offsets) ? &model : nullptr;\n}\n\n}  // namespace\n\n"
    << "extern \"C\" {\n\n"
    << "const std::uint32_t " << name << "_parameter_bytes = sizeof(Model);\n"
    << "const std::uint32_t " << name << "_workspace_bytes = sizeof infer + sizeof x;\n\n"
    << "int " << name << "_predict(const float* in, float* out) {\n"
    << "  const Model* model = checked_model();\n"
    << "  if (!model) return stformer::c_api::bad_image;\n"
    << "  if (!stformer::c_api::finite(in, N * In)) return stformer::c_api::bad_input;\n"
    << "  std::copy_n(in, N * In, x.data());\n";
  c << "  std::copy_n(infer.forward(*model, x).data(), Out, out);\n";
  c << "  return stformer::c_api::ok;\n}\n";
  if constexpr (int8)
    c << "\nint " << name << "_predict_int8(const std::int16_t* in_q, " << (pointer ? "std::int32_t" : "std::int16_t") << "* out_q) {\n"
      << "  const Model* model = checked_model();\n"
      << "  if (!model) return stformer::c_api::bad_image;\n"
      << "  std::copy_n(in_q, N * In, infer.input<1>().data());  // the integer steps alone, between the float ends\n"
      << "  std::copy_n(infer.forward_steps<1, Model::steps - 1>(*model).data(), Out, out_q);\n"
      << "  return stformer::c_api::ok;\n}\n";
  c << "\n}  // extern \"C\"\n";
  return {h.str(), c.str()};
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
  CLI::App app{"checkpoint_header: a safetensors checkpoint to a C++ header: a model's constant image read in place (--model, "
               "stformer/model_image.hpp) or constexpr arrays (stformer/param_table.hpp); with --c, to C: plain arrays, or "
               "the model's C functions (a C header and the C++ source behind it)"};
  app.footer("Exit codes: 0 written; 1 a problem with the input (the message says which); 2 a bad command line.");
  std::string in, out, ns = "weights";
  app.add_option("input", in, "safetensors file")->required()->check(CLI::ExistingFile);
  app.add_option("output", out, "header to write (with --c --model: NAME.h, and NAME.cpp beside it)")->required()->check(OutputPath);
  app.add_option("--namespace", ns,
                 "namespace of the arrays and of `tensors` (or of the image); with --c, the prefix of the C names (default: "
                 "the output's file name without .h)")
      ->capture_default_str();
  std::string model;
  app.add_option("--model", model, "write the checkpoint as the image of this max_value model (stformer/model_image.hpp)")
      ->check(CLI::IsMember({"pointer", "set"}));
  bool c = false;
  app.add_flag("--c", c, "write C: the tensors as C arrays, or with --model the model's C API (NAME_predict ...)");
  CLI11_PARSE(app, argc, argv);
  try {
    const std::filesystem::path out_path(out);
    if (c && app.count("--namespace") == 0) ns = out_path.stem().string();
    if (c && out_path.extension() != ".h") throw std::runtime_error("with --c the output is a C header: " + out + " does not end in .h");
    if (!is_identifier(ns))
      throw std::runtime_error((c && app.count("--namespace") == 0 ? "the output's file name " + ns + " is not a C" : "--namespace " + ns + " is not a C++") +
                               " identifier of its own (a keyword, reserved, std or stformer)");
    auto file = stformer::safetensors::File::read(in);
    const std::string source = std::filesystem::path(in).filename().string();
    if (auto it = file.metadata().find("model"); !model.empty() && it != file.metadata().end() && it->second != model)
      throw std::runtime_error("checkpoint " + in + " holds the " + it->second + " model (its metadata), not --model " + model);
    const bool int8 = !model.empty() && max_value::int8_checkpoint(file);
    const char* type = model == "pointer" ? int8 ? "stformer::Quantized<stformer::PointerModel<2, 16, 1, 64, 2>>" : "stformer::PointerModel<2, 16, 1, 64, 2>"
                       : int8             ? "stformer::Quantized<stformer::SetTransformer<2, 64, 4, 16, 2>>"
                                          : "stformer::SetTransformer<2, 64, 4, 16, 2>";
    if (c && !model.empty()) {
      const std::string stem = out_path.stem().string();
      const CApi api = model == "pointer" ? int8 ? c_api<max_value::QPointerNet>(file, type, ns, stem, source)
                                                 : c_api<max_value::PointerNet>(file, type, ns, stem, source)
                       : int8             ? c_api<max_value::QSetNet>(file, type, ns, stem, source)
                                          : c_api<max_value::SetNet>(file, type, ns, stem, source);
      write_file(std::filesystem::path(out_path).replace_extension(".cpp").string(), api.source);
      write_file(out, api.header);
      return 0;
    }
    write_file(out, c                      ? c_arrays(file, ns, source)
                    : model.empty()        ? header(file, ns, source)
                    : model == "pointer"   ? int8 ? image<max_value::QPointerNet>(file, type, ns, source) : image<max_value::PointerNet>(file, type, ns, source)
                    : int8                 ? image<max_value::QSetNet>(file, type, ns, source)
                                           : image<max_value::SetNet>(file, type, ns, source));
  } catch (const std::exception& e) {
    std::cerr << "checkpoint_header: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
