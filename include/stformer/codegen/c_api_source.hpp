// stformer — the C API of any model, as source text (host side).
//
//   const auto api = stformer::c_api_source<Model, N>(model, {.type = "SeqClassifier",
//       .include = "seq_classifier.hpp", .name = "seqcls", .source = "seqcls.safetensors"});
//
// gives api.header, a C header NAME.h, and api.source, a C++ source NAME.cpp that includes the
// header declaring the model's type, holds the model's constant image (model_image_source), a
// static forward-only workspace InferOf<Model, 1, N>, and the functions:
//   int NAME_predict(const IN* in, float* out);                       in [N × width], out [OUTPUT_SIZE]
//   int NAME_predict_keys(const IN* in, const uint8_t* keys, float* out);  keys[N]: row j exists if keys[j] != 0
//   int NAME_predict_int8(const IN_Q* in_q, const uint8_t* keys, OUT_Q* out_q);  an integer model's:
//       its integer steps alone (no float arithmetic), the input quantized at NAME_INPUT_SCALE
//       (int16, nearbyintf(x / scale) clamped to ±32767; token ids as they are), the output at
//       NAME_OUTPUT_SCALE (int16, or int32 logits)
// A causal model of token ids whose blocks decode (decode::decodes<Model>: a language model,
// float or its integer model, its logits [1, 1, V] at each row or at the last alone) also gets
// generation through a key/value cache of N positions (DecodeOf<Model, 1, N>,
// stformer/compose/decode.hpp; an integer model's in int8) in static RAM:
//   int NAME_reset(void);                              an empty cache
//   int NAME_step(int32_t token, float* logits);       the next token's logits [V] after every token stepped so far
//   int NAME_generate(const int32_t* prompt, size_t n, size_t new_tokens, float temperature,
//                     uint64_t seed, int32_t* out);   from an empty cache: out[new_tokens] (Sampler, stformer/compose/generate.hpp)
// NAME_FULL when the cache cannot hold what is asked (nothing stepped). With .generate_only these
// three alone (and the sizes): no NAME_predict and no static workspace of a whole pass of N rows,
// so that a cache of many positions fits a small RAM.
// Every entry runs the pass with Mask<1, N>{.causal = names.causal, .keys = the keys or nullptr}.
// A causal C API (.causal = true, NAME_CAUSAL 1 in the header) applies the causal mask in every
// call (query i sees rows j <= i) and has no entry without it; a model whose type declares it
// (declares_causal<Model>) is refused without .causal = true, so its C API cannot run it unmasked.
// IN is float for rows, int32_t for token ids (a model that starts with an Embedding). Model may
// be a float model or its integer one, Quantized<M> (stformer/quantized/quantize.hpp): the
// functions are the same, the header says which. They
// return NAME_OK, NAME_BAD_INPUT (a null pointer, a NaN or an infinity, a token id outside the
// embedding's rows: nothing written) or NAME_BAD_IMAGE (the image is not laid out as the model,
// or an integer model's integers are out of bounds, quantized/bounds.hpp: checked once). The
// object built from NAME.cpp links into a C program with -lm alone; the calls share one
// workspace (not reentrant). `stformer-c-api` (src/stformer-c-api) runs this
// on a checkpoint in one command.
#pragma once

#include "../core/config.hpp"

#include <cctype>
#include <cstdint>
#include <cstdio>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>

#include "model_image_source.hpp"
#include "../compose/decode.hpp"
#include "../quantized/quantize.hpp"
#include "../compose/sequential.hpp"

namespace stformer::inline STFORMER_ABI {

struct CApiNames {
  std::string_view type;     // the model's type as the included header names it
  std::string_view include;  // the header that declares it
  std::string_view name;     // the prefix of the C names (an identifier)
  std::string_view source;   // where the parameters came from (a comment)
  bool causal = false;       // every call applies the causal mask (required when declares_causal<Model>)
  bool keys = false;         // the model was exported with a key mask (NAME_KEYS 1): NAME_predict_keys is its entry
  bool generate_only = false;  // a causal language model's generation entries alone: no NAME_predict, no whole pass's workspace
};

struct CApiSource {
  std::string header, source;
};

template <class Model, size_t N>
CApiSource c_api_source(const Model& model, const CApiNames& names) {
  using In = typename Model::template Input<1, N>;
  using Out = typename Model::template Output<1, N>;
  using E = typename In::value_type;
  constexpr bool ids = std::is_same_v<E, std::int32_t>;
  static_assert(ids || std::is_same_v<E, float>, "c_api_source: the model's input is neither rows of floats nor token ids");
  const std::string name(names.name);
  if (name.empty() || std::isdigit(static_cast<unsigned char>(name[0])))
    throw std::runtime_error("c_api_source: the name '" + name + "' is not a C identifier");
  for (char c : name)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') throw std::runtime_error("c_api_source: the name '" + name + "' is not a C identifier");
  if (declares_causal<Model> && !names.causal)
    throw std::runtime_error("c_api_source: " + std::string(names.type) +
                             " declares causal = true, and its C API was asked for without the causal mask: "
                             "give --causal (stformer-c-api) or .causal = true (CApiNames)");
  std::string M = name;
  for (char& c : M) c = char(std::toupper(static_cast<unsigned char>(c)));
  constexpr auto elements = [](const auto& d) {
    size_t n = 1;
    for (size_t k : d) n *= k;
    return n;
  };
  constexpr size_t in_size = elements(dims<In>), out_size = elements(dims<Out>), width = in_size / N;
  const std::string in_c = ids ? "int32_t" : "float", in_cpp = ids ? "std::int32_t" : "float";
  std::ostringstream h, c;
  constexpr bool integers = quant::is_quantized<Model>;
  // the last integer step's output (a quantized model's): int16, or the pointer's int32 logits
  using QOut = typename decltype([] {
    if constexpr (integers)
      return std::type_identity<typename Model::template OutputAt<1, N, Model::steps - 2>::value_type>{};
    else
      return std::type_identity<float>{};
  }())::type;
  constexpr bool last_logits = integers && sizeof(QOut) == 4;
  // generation through a cache: a causal language model, float or integer (token ids in, the
  // next token's logits out at each row, or at the last alone: a LastToken before the head, as
  // llama2.c's)
  constexpr bool generates = [] {
    if constexpr (ids && decode::decodes<Model>())
      return (dims<Out>[1] == N || dims<Out>[1] == 1) && dims<Out>[2] == Model::template BlockAt<0>::vocabulary;
    else
      return false;
  }();
  const bool whole = !names.generate_only;  // NAME_predict and its workspace
  if (names.generate_only && !generates)
    throw std::runtime_error("c_api_source: " + std::string(names.type) +
                             ": --generate-only (CApiNames::generate_only) is for a causal language model of token ids whose blocks decode");
  const auto float_literal = [](float v) {
    char text[40];
    std::snprintf(text, sizeof text, "%af", double(v));
    return std::string(text);
  };
  h << "/* " << name << ".h: generated by stformer::c_api_source from " << names.source << ": do not edit.\n"
    << "   " << names.type << " (" << names.include << "), "
    << (integers ? "in integers (int8 weights, int16 streams; float only to quantize its input and\n   read its output)"
                 : "float32")
    << (whole ? ", forward only, " + std::to_string(N) + " rows per call.\n"
              : ", generation only, through a cache of " + std::to_string(N) + " positions.\n")
    << "   Build " << name << ".cpp with a C++20 compiler and stformer's flags; the C side links its object\n"
    << "   with the C math library (-lm) and nothing else. Not reentrant: the calls share one static\n"
    << "   workspace. */\n"
    << "#ifndef " << M << "_H\n#define " << M << "_H\n\n#include <stddef.h>\n#include <stdint.h>\n\n#ifdef __cplusplus\nextern \"C\" {\n#endif\n\n"
    << "#define " << M << "_ROWS " << N << "          /* rows (tokens, points) of an input */\n"
    << "#define " << M << "_CAUSAL " << (names.causal ? "1" : "0")
    << (names.causal ? "        /* every call applies the causal mask: output row i reads input rows 0 .. i */\n"
                     : "        /* no causal mask: every row reads every row present */\n");
  if (names.keys)
    h << "#define " << M << "_KEYS 1          /* exported with a key mask: " << name << "_predict_keys takes it (" << name
      << "_predict: every row exists) */\n";
  if constexpr (ids)
    h << "#define " << M << "_INPUT_SIZE " << in_size << "    /* the input: " << N << " token ids, each in [0, " << M << "_VOCABULARY) */\n"
      << "#define " << M << "_VOCABULARY " << Model::template BlockAt<0>::vocabulary << "\n";
  else
    h << "#define " << M << "_INPUT_SIZE " << in_size << "    /* the input: " << N << " rows of " << width << ", row by row */\n";
  h << "#define " << M << "_OUTPUT_SIZE " << out_size << "   /* the output, [" << dims<Out>[1] << "][" << dims<Out>[2] << "] */\n\n"
    << "#define " << M << "_OK 0\n"
    << "#define " << M << "_BAD_INPUT 1  /* a null pointer, " << (ids ? "a token id out of range" : "a NaN or an infinity")
    << " in the input: nothing written */\n"
    << "#define " << M << "_BAD_IMAGE 2  /* the model's image is not laid out as the model"
    << (integers ? ", or its integers are outside\n                                the bounds its kernels are exact in" : "")
    << " (checked on the first\n                                call): nothing written */\n\n"
    << "/* Bytes of the model's constant image (flash on a microcontroller) and of the static RAM the\n"
    << "   calls use, as the compiler of " << name << ".cpp lays them out. */\n"
    << "extern const uint32_t " << name << "_parameter_bytes;\n"
    << "extern const uint32_t " << name << "_workspace_bytes;\n";
  if (whole)
    h << "\n/* out[" << M << "_OUTPUT_SIZE] of in[" << M << "_INPUT_SIZE], every row present" << (names.causal ? ", causal" : "") << ". */\n"
      << "int " << name << "_predict(const " << in_c << "* in, float* out);\n\n"
      << "/* The same with a key-padding mask" << (names.causal ? " as well" : "") << ": row j exists when keys[j] != 0 (keys[" << M << "_ROWS]). */\n"
      << "int " << name << "_predict_keys(const " << in_c << "* in, const uint8_t* keys, float* out);\n";
  if constexpr (integers) {
    if (whole) {
      const std::string qin_c = ids ? "int32_t" : "int16_t", qout_c = sizeof(QOut) == 4 ? "int32_t" : "int16_t";
      if constexpr (!ids)
        h << "\n#define " << M << "_INPUT_SCALE " << float_literal(model.template get<0>().scale(0)) << "  /* " << name
          << "_predict_int8's input: nearbyintf(x / scale) (ties to even), clamped to ±32767 */";
      h << "\n#define " << M << "_OUTPUT_SCALE " << float_literal(model.template get<Model::steps - 1>().scale(0)) << "  /* the real value of a unit of "
        << name << "_predict_int8's output */\n\n"
        << "/* Integers only (no float arithmetic: for a core without an FPU): out_q[" << M << "_OUTPUT_SIZE] ("
        << (last_logits ? "the logits, whose log-softmax at " + M + "_OUTPUT_SCALE is " + name + "_predict's output"
                        : name + "_predict's output in units of " + M + "_OUTPUT_SCALE")
        << ")\n   of " << (ids ? "the token ids in" : "the quantized input in_q") << "[" << M << "_INPUT_SIZE]; keys as " << name
        << "_predict_keys's, or NULL for every row. */\n"
        << "int " << name << "_predict_int8(const " << qin_c << "* in_q, const uint8_t* keys, " << qout_c << "* out_q);\n";
    }
  }
  if constexpr (generates)
    h << "\n#define " << M << "_FULL 3       /* " << name << "_step, " << name << "_generate: the cache cannot hold it (" << name
      << "_reset empties it): nothing stepped */\n\n"
      << "/* Generation, a token at a time, through a cache of the keys and values of " << M << "_ROWS positions\n"
      << "   (static RAM): " << name << "_reset empties it; " << name << "_step steps one token and writes the logits\n"
      << "   of the next, logits[" << M << "_VOCABULARY]; " << name << "_generate empties it, steps the n >= 1 tokens of\n"
      << "   the prompt and writes new_tokens tokens to out, each drawn from the logits after the one before\n"
      << "   (temperature 0: the largest, the smallest id on a tie; else from softmax(logits / temperature)\n"
      << "   by a generator seeded with seed: the same tokens for the same seed on every platform), and\n"
      << "   needs n + new_tokens - 1 <= " << M << "_ROWS. */\n"
      << "int " << name << "_reset(void);\n"
      << "int " << name << "_step(int32_t token, float* logits);\n"
      << "int " << name << "_generate(const int32_t* prompt, size_t n, size_t new_tokens, float temperature, uint64_t seed, int32_t* out);\n";
  h << "\n#ifdef __cplusplus\n}\n#endif\n\n#endif\n";

  std::string image_text = model_image_source(model, names.type, name + "_image", names.source);
  image_text.erase(image_text.find("#pragma once\n"), 13);
  c << "// " << name << ".cpp: generated by stformer::c_api_source from " << names.source << ": do not edit.\n"
    << "// The C functions of " << name << ".h.\n"
    << "#include <stformer/codegen/c_api.hpp>  // first: the object then needs nothing from libstdc++\n\n#include <algorithm>\n\n"
    << (integers ? "#include <stformer/quantized/quantize.hpp>\n" : "") << (generates ? "#include <stformer/compose/generate.hpp>\n" : "")
    << "#include \"" << names.include << "\"\n#include \"" << name << ".h\"\n\n"
    << image_text << "\n"
    << "namespace {\n\nusing Model = " << name << "_image::Model;\nconstexpr std::size_t N = " << N << ";\n";
  if (whole)
    c << "stformer::InferOf<Model, 1, N> infer;  // the forward pass's workspace\n"
      << "Model::Input<1, N> x;                  // the input\n"
      << "stformer::KeyMask<1, N> key_mask;       // the rows that exist\n"
      << "constexpr bool causal = " << (names.causal ? "true" : "false") << ";  // " << name << ".h's " << M << "_CAUSAL\n\n";
  if constexpr (generates)
    c << "stformer::DecodeOf<Model, 1, N> decoder;  // the key/value cache of N positions and one step's plan\n"
      << "stformer::Sampler<" << dims<Out>[2] << "> sampler;      // the generator's draws and its buffers\n\n";
  if (whole) {
    c << "// The masks of every call: causal or not, as the API was written; the rows that exist (keys) or all.\n"
      << "stformer::Mask<1, N> mask(const std::uint8_t* keys) { return {.causal = causal, .keys = keys != nullptr ? &key_mask : nullptr}; }\n\n"
      << "// What every entry checks first (the image, the pointers" << (ids ? ", the ids" : "") << ") and the key mask: 0 to go on.\n"
      << "int start(const " << (ids ? "std::int32_t" : "void") << "* in, const std::uint8_t* keys, const void* out) {\n"
      << "  if (!stformer::c_api::image_ok<" << (integers ? "true" : "false") << ">(" << name << "_image::model(), " << name
      << "_image::offsets)) return stformer::c_api::bad_image;\n"
      << "  if (in == nullptr || out == nullptr) return stformer::c_api::bad_input;\n";
    if constexpr (ids)
      c << "  if (!stformer::c_api::ids_in_range(in, x.size(), " << Model::template BlockAt<0>::vocabulary << ")) return stformer::c_api::bad_input;\n";
    c << "  if (keys != nullptr)\n    for (std::size_t j = 0; j < N; ++j) key_mask(0, j) = keys[j] != 0;\n"
      << "  return stformer::c_api::ok;\n}\n\n"
      << "// The passes in frames of their own, apart from the checks' (the stack holds one or the other).\n"
      << "[[gnu::noinline]] void run(const " << in_cpp << "* in, const std::uint8_t* keys, float* out) {\n"
      << "  std::copy_n(in, x.size(), x.data());\n"
      << "  const auto& y = infer.forward(" << name << "_image::model(), x, mask(keys));\n"
      << "  std::copy_n(y.data(), y.size(), out);\n}\n\n"
      << "[[gnu::noinline]] int predict(const " << in_cpp << "* in, const std::uint8_t* keys, float* out) {  // one copy for both entries\n"
      << "  if (const int status = start(in, keys, out)) return status;\n";
    if constexpr (!ids) c << "  if (!stformer::c_api::finite(in, x.size())) return stformer::c_api::bad_input;\n";
    c << "  run(in, keys, out);\n"
      << "  return stformer::c_api::ok;\n}\n";
    if constexpr (integers) {
      const std::string qin = ids ? "std::int32_t" : "std::int16_t", qout = sizeof(QOut) == 4 ? "std::int32_t" : "std::int16_t";
      c << "\n// The integer steps alone: " << (ids ? "0" : "1") << " .. steps − 2 (the steps between the float ends).\n"
        << "[[gnu::noinline]] void run_int8(const " << qin << "* in_q, const std::uint8_t* keys, " << qout << "* out_q) {\n"
        << "  const Model& model = " << name << "_image::model();\n";
      if constexpr (ids)
        c << "  std::copy_n(in_q, x.size(), x.data());\n"
          << "  const auto& y = infer.forward_steps<0, Model::steps - 1>(model, x, mask(keys));\n";
      else
        c << "  auto& x_q = infer.input<1>();\n  std::copy_n(in_q, x_q.size(), x_q.data());\n"
          << "  const auto& y = infer.forward_steps<1, Model::steps - 1>(model, mask(keys));\n";
      c << "  std::copy_n(y.data(), y.size(), out_q);\n}\n";
    }
  }
  c << "\n}  // namespace\n\n"
    << "extern \"C\" {\n\n"
    << "const std::uint32_t " << name << "_parameter_bytes = sizeof(Model);\n"
    << "const std::uint32_t " << name << "_workspace_bytes = "
    << (whole ? std::string("sizeof infer + sizeof x + sizeof key_mask") + (generates ? " + sizeof decoder + sizeof sampler" : "")
              : std::string("sizeof decoder + sizeof sampler"))
    << ";\n";
  if (whole) {
    c << "\nint " << name << "_predict(const " << in_cpp << "* in, float* out) { return predict(in, nullptr, out); }\n\n"
      << "int " << name << "_predict_keys(const " << in_cpp << "* in, const std::uint8_t* keys, float* out) {\n"
      << "  if (keys == nullptr) return stformer::c_api::bad_input;\n"
      << "  return predict(in, keys, out);\n}\n";
    if constexpr (integers) {
      static_assert(elements(dims<typename Model::template OutputAt<1, N, Model::steps - 2>>) == out_size,
                    "c_api_source: the last integer step's output is the model's, element for element");
      const std::string qin = ids ? "std::int32_t" : "std::int16_t", qout = sizeof(QOut) == 4 ? "std::int32_t" : "std::int16_t";
      c << "\nint " << name << "_predict_int8(const " << qin << "* in_q, const std::uint8_t* keys, " << qout << "* out_q) {\n"
        << "  if (const int status = start(in_q, keys, out_q)) return status;\n"
        << "  run_int8(in_q, keys, out_q);\n  return stformer::c_api::ok;\n}\n";
    }
  }
  if constexpr (generates) {
    constexpr size_t V = dims<Out>[2];
    c << "\nint " << name << "_reset(void) {\n  decoder.reset();\n  return stformer::c_api::ok;\n}\n\n"
      << "int " << name << "_step(std::int32_t token, float* logits) {\n"
      << "  if (!stformer::c_api::image_ok<" << (integers ? "true" : "false") << ">(" << name << "_image::model(), " << name
      << "_image::offsets)) return stformer::c_api::bad_image;\n"
      << "  if (logits == nullptr || token < 0 || token >= " << V << ") return stformer::c_api::bad_input;\n"
      << "  if (decoder.position() == N) return stformer::c_api::full;\n"
      << "  decltype(decoder)::Input one;\n  one(0, 0) = token;\n"
      << "  const auto* y = decoder.step(" << name << "_image::model(), one);\n"
      << "  std::copy_n(y->data(), y->size(), logits);\n  return stformer::c_api::ok;\n}\n\n"
      << "int " << name << "_generate(const std::int32_t* prompt, std::size_t n, std::size_t new_tokens, float temperature, std::uint64_t seed, "
         "std::int32_t* out) {\n"
      << "  if (!stformer::c_api::image_ok<" << (integers ? "true" : "false") << ">(" << name << "_image::model(), " << name
      << "_image::offsets)) return stformer::c_api::bad_image;\n"
      << "  if (prompt == nullptr || out == nullptr || n == 0 || !(temperature >= 0.0f) || !stformer::c_api::finite(&temperature, 1) ||\n"
      << "      !stformer::c_api::ids_in_range(prompt, n, " << V << "))\n    return stformer::c_api::bad_input;\n"
      << "  if (n > N || (new_tokens > 0 && new_tokens - 1 > N - n)) return stformer::c_api::full;\n"
      << "  sampler = stformer::Sampler<" << V << ">({.temperature = temperature}, seed);\n"
      << "  const std::size_t made = stformer::generate(" << name << "_image::model(), decoder, sampler, {prompt, n}, new_tokens, out);\n"
      << "  return made == new_tokens ? stformer::c_api::ok : stformer::c_api::bad_input;  // (a logit NaN or infinite)\n}\n";
  }
  c << "\n}  // extern \"C\"\n";
  return {h.str(), c.str()};
}

}  // namespace stformer
