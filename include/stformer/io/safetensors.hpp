// stformer — reading and writing safetensors files (https://github.com/huggingface/safetensors).
//
// Format: an 8-byte little-endian u64 N, then N bytes of JSON header, then the data buffer.
// The header is an object mapping each tensor name to
//   {"dtype": "F32", "shape": [16, 2], "data_offsets": [begin, end]}
// (byte offsets into the data buffer, end exclusive; row-major, little-endian), plus an
// optional "__metadata__": {string: string}. The tensors must cover the data buffer exactly:
// no overlaps, gaps or trailing bytes.
//
// Reading is strict: File::read rejects every malformed file with a std::runtime_error naming
// the file and the problem (see safetensors.cpp for the list), including duplicate JSON keys and
// entry fields other than dtype, shape and data_offsets. Writing is atomic: Writer::write
// writes `path + ".tmp"`, flushes and fsyncs it, then renames it over `path`.
//
// This header and src/safetensors.cpp do not depend on the model library; nlohmann-json is used
// only inside safetensors.cpp. Little-endian hosts only (checked at compile time).
#pragma once

#include "../core/config.hpp"

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace stformer::inline STFORMER_ABI::safetensors {

// The dtypes of the format with whole-byte elements (F8_*: 8-bit floats).
enum class Dtype : std::uint8_t { BOOL, U8, I8, F8_E5M2, F8_E4M3, U16, I16, F16, BF16, U32, I32, F32, U64, I64, F64 };

std::string_view dtype_name(Dtype d);                   // "F32"
std::size_t dtype_size(Dtype d);                        // bytes per element
std::optional<Dtype> parse_dtype(std::string_view s);  // nullopt when unknown

// "[16, 2]"; "[]" for a scalar.
std::string shape_string(std::span<const std::size_t> shape);

// One tensor of a File; bytes points into the File's buffer (not necessarily aligned).
struct TensorView {
  std::string name;
  Dtype dtype;
  std::vector<std::size_t> shape;
  std::span<const std::byte> bytes;
};

// A whole safetensors file in memory, validated. Move-only (the views point into the buffer).
class File {
 public:
  // Reads and validates the file at path; throws std::runtime_error("safetensors <path>: ...").
  static File read(const std::filesystem::path& path);
  // Validates the bytes of a file; label names it in error messages.
  static File parse(std::vector<std::byte> bytes, std::string label);

  File(File&&) = default;
  File& operator=(File&&) = default;
  File(const File&) = delete;
  File& operator=(const File&) = delete;

  const std::string& label() const { return label_; }  // the path, or parse's label
  std::span<const TensorView> tensors() const { return tensors_; }  // in data-offset order
  std::vector<std::string> names() const;                             // in data-offset order
  const TensorView* find(std::string_view name) const;                // nullptr when absent
  const TensorView& at(std::string_view name) const;                  // throws when absent
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  File() = default;
  std::string label_;
  std::vector<std::byte> buffer_;
  std::vector<TensorView> tensors_;
  std::map<std::string, std::size_t, std::less<>> index_;  // name -> position in tensors_
  std::map<std::string, std::string> metadata_;
};

// Collects tensors (copying their bytes) and metadata, then writes them in one file.
class Writer {
 public:
  // Throws std::invalid_argument for an empty, duplicate or reserved ("__metadata__") name, or
  // when bytes.size() != product(shape) * dtype_size(dtype).
  void add(std::string name, Dtype dtype, std::vector<std::size_t> shape, std::span<const std::byte> bytes);
  void set_metadata(std::string key, std::string value) { metadata_[std::move(key)] = std::move(value); }

  // The file's bytes: tensors in the order they were added, "__metadata__" first in the
  // header (omitted when empty), the header padded with spaces to a multiple of 8 bytes.
  std::vector<std::byte> bytes() const;
  // Atomic write (see top); throws std::runtime_error naming the path and errno's text, and
  // leaves neither the temporary file nor a changed `path` behind.
  void write(const std::filesystem::path& path) const;

 private:
  struct Entry {
    std::string name;
    Dtype dtype;
    std::vector<std::size_t> shape;
    std::vector<std::byte> bytes;
  };
  std::vector<Entry> entries_;
  std::set<std::string, std::less<>> names_;
  std::map<std::string, std::string> metadata_;
};

// A model's example inputs held in one tensor of a file (calibration inputs, a firmware's test
// inputs): shape (count, ...) with count ≥ 1 and `size` values in each example (one item's input,
// laid out as PyTorch's), F32 for a float input, token ids as I32 or I64 for ids. Returns the
// tensor; throws std::runtime_error naming the file, the tensor and what it should be.
const TensorView& examples_tensor(const File& file, std::string_view name, std::size_t size, bool ids);

// The examples' key masks, when the file holds them (a model exported with a key mask): tensor
// "keys" beside "input" (the exporter's example file), "NAME_keys" beside any other NAME; shape
// (count, rows), U8 or BOOL, nonzero for a row that exists. Empty when there is no such tensor;
// throws std::runtime_error for one of another shape or dtype.
std::vector<std::uint8_t> example_keys(const File& file, std::string_view name, std::size_t count, std::size_t rows);

// Its values, example after example: floats (T = float), or token ids as T (an integer type).
template <class T>
std::vector<T> examples(const File& file, std::string_view name, std::size_t size) {
  constexpr bool ids = !std::is_floating_point_v<T>;
  static_assert(ids || std::is_same_v<T, float>, "examples: float or an integer type");
  const TensorView& t = examples_tensor(file, name, size, ids);
  const std::size_t bytes = dtype_size(t.dtype);
  std::vector<T> v(t.bytes.size() / bytes);
  for (std::size_t k = 0; k < v.size(); ++k) {
    if constexpr (ids) {
      std::int64_t id = 0;
      std::memcpy(&id, t.bytes.data() + k * bytes, bytes);  // little-endian: an int32 in the low bytes
      v[k] = T(bytes == 4 ? std::int64_t(std::int32_t(id)) : id);
    } else {
      std::memcpy(&v[k], t.bytes.data() + k * bytes, bytes);
    }
  }
  return v;
}

}  // namespace stformer::safetensors
