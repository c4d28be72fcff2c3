// The fuzzed entry points (issue 8), shared by the libFuzzer programs (fuzz_*.cpp, built with
// clang by -Dfuzz=true) and by the doctest suite, which replays the seeds and every input
// that once failed (tests/fuzz/{seeds,regressions}/<target>/) in every build.
//
// An input may be refused with std::runtime_error (a message naming the problem); anything
// else that escapes (another exception, a crash, a sanitizer report) is a finding, and so is a
// broken invariant, thrown as std::logic_error:
//   safetensors: every accepted tensor lies inside the file, with its shape's byte size, in
//     offset order without overlap; writing the accepted tensors and metadata back gives a file
//     that parses to the same; loading a model from the file is all or nothing, for float models
//     (load_params) and for quantized ones (load_quantized): max_value's pointer model, in float
//     and int8, whose checkpoints and their corrupted variants (tests/corrupt.py) are seeds.
//   corpus: every token id names a word of the vocabulary, words hold no whitespace, and the
//     vocabulary survives serialize/deserialize; Vocabulary::deserialize either refuses the
//     input or gives back a vocabulary that serializes to it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <stformer/io/checkpoint.hpp>
#include <stformer/io/corpus.hpp>
#include <stformer/quantized/checkpoint.hpp>
#include <stformer/io/safetensors.hpp>
#include <stformer/stformer.hpp>

#include "max_value_models.hpp"  // the models of max_value's checkpoints

namespace fuzz {

inline void require(bool ok, const char* what) {
  if (!ok) throw std::logic_error(std::string("fuzz invariant broken: ") + what);
}

// Loads `file` into a model of type M with load(file, model) from a model that is not M's
// default: a refusal (std::runtime_error) must leave every byte of it as it was.
template <class M, class Load>
void all_or_nothing(const stformer::safetensors::File& file, Load&& load) {
  using namespace stformer;
  static const auto before = [] {
    auto m = std::make_unique<M>();
    std::uint8_t k = 1;  // bytes that a partial load would visibly overwrite
    for_each_param([&](const Path&, Init, auto& t) {
      auto* b = reinterpret_cast<std::uint8_t*>(t.data());
      for (std::size_t i = 0; i < t.size() * sizeof(*t.data()); ++i) b[i] = k += 29;
    }, *m);
    return m;
  }();
  static auto model = std::make_unique<M>();
  *model = *before;
  try {
    load(file, *model);
  } catch (const std::runtime_error&) {
    bool same = true;
    for_each_param([&](const Path&, Init, const auto& a, const auto& b) {
      same = same && std::memcmp(a.data(), b.data(), a.size() * sizeof(*a.data())) == 0;
    }, std::as_const(*model), std::as_const(*before));
    require(same, "a failed load changes nothing");
  }
}

inline void safetensors_input(const std::uint8_t* data, std::size_t size) {
  using namespace stformer;
  const auto* first = reinterpret_cast<const std::byte*>(data);
  std::vector<std::byte> bytes(first, first + size);
  std::optional<safetensors::File> file;
  try {
    file = safetensors::File::parse(bytes, "input");
  } catch (const std::runtime_error&) {
    return;
  }
  const std::byte* begin = file->tensors().empty() ? nullptr : file->tensors()[0].bytes.data();
  std::size_t end = 0;
  safetensors::Writer w;
  for (const auto& [key, value] : file->metadata()) w.set_metadata(key, value);
  for (const auto& t : file->tensors()) {
    std::size_t n = safetensors::dtype_size(t.dtype);
    for (std::size_t d : t.shape) n *= d;
    require(n == t.bytes.size(), "byte size = product(shape) * dtype size");
    const std::size_t offset = std::size_t(t.bytes.data() - begin);
    require(offset == end && offset + n <= size, "tensors tile the data in offset order");
    end = offset + n;
    require(file->find(t.name) == &t, "find() returns each tensor");
    w.add(t.name, t.dtype, t.shape, t.bytes);
  }
  const safetensors::File again = safetensors::File::parse(w.bytes(), "written back");
  require(again.metadata() == file->metadata() && again.tensors().size() == file->tensors().size(), "written back: same tensors");
  for (std::size_t i = 0; i < again.tensors().size(); ++i) {
    const auto &a = again.tensors()[i], &b = file->tensors()[i];
    require(a.name == b.name && a.dtype == b.dtype && a.shape == b.shape && a.bytes.size() == b.bytes.size() &&
                (a.bytes.empty() || std::memcmp(a.bytes.data(), b.bytes.data(), a.bytes.size()) == 0),
            "written back: same names, dtypes, shapes and bytes");
  }
  // All or nothing: a failed load leaves the model as it was. Float models with load_params,
  // the int8 one with load_quantized (which also checks the values of its integer tensors).
  all_or_nothing<SetTransformer<2, 16, 2, 4, 2>>(*file, [](const auto& f, auto& m) { load_params(f, m); });
  all_or_nothing<max_value::PointerNet>(*file, [](const auto& f, auto& m) { load_params(f, m); });
  all_or_nothing<Quantized<max_value::PointerNet>>(*file, [](const auto& f, auto& m) { load_quantized(f, m); });
}

inline void corpus_input(const std::uint8_t* data, std::size_t size) {
  using namespace stformer;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  Vocabulary vocab;
  std::vector<std::int32_t> ids;
  tokenize(text, vocab, ids);
  for (std::int32_t id : ids) require(id >= 0 && std::size_t(id) < vocab.size(), "ids name words of the vocabulary");
  for (std::size_t i = 0; i < vocab.size(); ++i) {
    const std::string& word = vocab.word(std::int32_t(i));
    require(!word.empty() && word.find_first_of(" \t\n\r\v\f") == std::string::npos, "words are non-empty and hold no whitespace");
    require(vocab.find(word) == std::int32_t(i), "find(word(i)) == i");
  }
  require(Vocabulary::deserialize(vocab.serialize()).serialize() == vocab.serialize(), "the vocabulary survives serialize/deserialize");
  try {
    const Vocabulary v = Vocabulary::deserialize(text);
    const std::string back = v.serialize();
    require(back == text || back == std::string(text) + "\n", "deserialize gives back what it read");
  } catch (const std::runtime_error&) {
  }
}

}  // namespace fuzz
