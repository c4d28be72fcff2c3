// stformer — safetensors reader and writer (format and choices: stformer/io/safetensors.hpp).
//
// File::parse rejects, with "safetensors <file>: <problem>": a file shorter than 8 bytes; a
// header length above 100,000,000 bytes (the reference implementation's limit) or beyond the
// end of the file; a header holding a NUL byte; a header that is not valid UTF-8 JSON, not an
// object, or has a duplicate key at any level (nlohmann would silently keep one; a second,
// SAX pass sees every key, in time linear in the header); an entry
// that is not an object, lacks dtype/shape/data_offsets, has another field, or has a field of
// the wrong JSON type; an unknown dtype; offsets with begin > end or end beyond the data; a
// byte size != product(shape) * dtype size; overlapping tensors, gaps and trailing bytes;
// "__metadata__" that is not an object of strings.
#include <stformer/io/safetensors.hpp>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <stdexcept>

#include <fcntl.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

namespace stformer::inline STFORMER_ABI::safetensors {

static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian; big-endian hosts are not supported");

namespace {

using nlohmann::json;

constexpr std::uint64_t max_header_bytes = 100'000'000;

// A name from a file as a message quotes it: at most 80 bytes (a file may hold a name of
// megabytes).
std::string short_name(const std::string& name) {
  if (name.size() <= 80) return name;
  return name.substr(0, 64) + "... (" + std::to_string(name.size()) + " bytes)";
}

// The first key that repeats in its object, at any level (a SAX pass: one set of keys per open
// object, O(n log n) in the header's keys).
struct DuplicateKeys : nlohmann::json_sax<json> {
  std::vector<std::set<std::string>> open;
  std::optional<std::string> duplicate;
  bool in_top_object = false;
  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override {
    open.emplace_back();
    return true;
  }
  bool key(string_t& k) override {
    if (!duplicate && !open.back().insert(k).second) duplicate = k, in_top_object = open.size() == 1;
    return !duplicate;
  }
  bool end_object() override {
    open.pop_back();
    return true;
  }
  bool start_array(std::size_t) override { return true; }
  bool end_array() override { return true; }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override { return false; }
};

struct DtypeInfo {
  Dtype dtype;
  std::string_view name;
  std::size_t size;
};
// In the order of enum Dtype.
constexpr DtypeInfo dtype_table[] = {
    {Dtype::BOOL, "BOOL", 1}, {Dtype::U8, "U8", 1},     {Dtype::I8, "I8", 1},     {Dtype::F8_E5M2, "F8_E5M2", 1},
    {Dtype::F8_E4M3, "F8_E4M3", 1}, {Dtype::U16, "U16", 2}, {Dtype::I16, "I16", 2}, {Dtype::F16, "F16", 2},
    {Dtype::BF16, "BF16", 2}, {Dtype::U32, "U32", 4},   {Dtype::I32, "I32", 4},   {Dtype::F32, "F32", 4},
    {Dtype::U64, "U64", 8},   {Dtype::I64, "I64", 8},   {Dtype::F64, "F64", 8},
};
constexpr bool table_in_enum_order() {
  for (std::size_t i = 0; i < std::size(dtype_table); ++i)
    if (std::size_t(dtype_table[i].dtype) != i) return false;
  return true;
}
static_assert(table_in_enum_order() && std::size(dtype_table) == std::size_t(Dtype::F64) + 1);

[[noreturn]] void fail(const std::string& label, const std::string& problem) {
  throw std::runtime_error("safetensors " + label + ": " + problem);
}

std::string errno_text(int err) { return std::strerror(err); }

// product(shape) * element, or nullopt on overflow.
std::optional<std::uint64_t> byte_size(std::span<const std::size_t> shape, std::size_t element) {
  std::uint64_t n = element;
  for (std::size_t d : shape)
    if (__builtin_mul_overflow(n, std::uint64_t(d), &n)) return std::nullopt;
  return n;
}

// Appends rather than "[" + std::to_string(...), which trips GCC 12's -Wrestrict (GCC bug 105329).
std::string offsets_string(std::uint64_t begin, std::uint64_t end) {
  std::string s = "[";
  s += std::to_string(begin);
  s += ", ";
  s += std::to_string(end);
  return s + "]";
}

}  // namespace

std::string_view dtype_name(Dtype d) { return dtype_table[std::size_t(d)].name; }
std::size_t dtype_size(Dtype d) { return dtype_table[std::size_t(d)].size; }
std::optional<Dtype> parse_dtype(std::string_view s) {
  for (const auto& e : dtype_table)
    if (e.name == s) return e.dtype;
  return std::nullopt;
}

std::string shape_string(std::span<const std::size_t> shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

const TensorView& examples_tensor(const File& file, std::string_view name, std::size_t size, bool ids) {
  const TensorView* t = file.find(name);
  const std::string what = file.label() + ": tensor " + std::string(name);
  if (t == nullptr) throw std::runtime_error(file.label() + " holds no tensor " + std::string(name));
  if (ids ? t->dtype != Dtype::I32 && t->dtype != Dtype::I64 : t->dtype != Dtype::F32)
    throw std::runtime_error(what + " is " + std::string(dtype_name(t->dtype)) + (ids ? ": the model reads token ids (I32 or I64)" : ": the model reads F32"));
  const std::size_t elements = t->bytes.size() / dtype_size(t->dtype);
  if (t->shape.empty() || t->shape[0] == 0 || size == 0 || elements != t->shape[0] * size)
    throw std::runtime_error(what + " " + shape_string(t->shape) + " is not examples of " + std::to_string(size) +
                             " values each (the model's input of one item), their count first");
  return *t;
}

std::vector<std::uint8_t> example_keys(const File& file, std::string_view name, std::size_t count, std::size_t rows) {
  const std::string keys = name == "input" ? std::string("keys") : std::string(name) + "_keys";
  const TensorView* t = file.find(keys);
  if (t == nullptr) return {};
  if ((t->dtype != Dtype::U8 && t->dtype != Dtype::BOOL) || t->shape.size() != 2 || t->shape[0] != count || t->shape[1] != rows)
    throw std::runtime_error(file.label() + ": tensor " + keys + " " + std::string(dtype_name(t->dtype)) + " " + shape_string(t->shape) +
                             " is not the key masks of " + std::string(name) + ": U8 [" + std::to_string(count) + ", " + std::to_string(rows) +
                             "], 1 for a row that exists");
  std::vector<std::uint8_t> v(t->bytes.size());
  std::memcpy(v.data(), t->bytes.data(), v.size());
  return v;
}

// ---- reading -------------------------------------------------------------------------------

File File::read(const std::filesystem::path& path) {
  const std::string label = path.string();
  // a folder, a device or a FIFO is not opened: a FIFO's open would wait, /dev/zero's read never end
  std::error_code ec;
  if (const auto st = std::filesystem::status(path, ec); std::filesystem::exists(st) && !std::filesystem::is_regular_file(st))
    fail(label, "not a regular file (a folder, a device or a pipe): not read");
  std::FILE* f = std::fopen(label.c_str(), "rb");
  if (f == nullptr) fail(label, "cannot open: " + errno_text(errno));
  // Read to EOF (the size is only a hint: +1 so that a file of unchanged size ends in one read).
  const auto hint = std::filesystem::file_size(path, ec);
  std::vector<std::byte> bytes(ec ? std::size_t(1) << 16 : std::size_t(hint) + 1);
  std::size_t n = 0;
  for (;;) {
    n += std::fread(bytes.data() + n, 1, bytes.size() - n, f);
    if (n < bytes.size()) break;
    bytes.resize(bytes.size() * 2);
  }
  const int err = errno;
  const bool error = std::ferror(f) != 0;
  std::fclose(f);
  if (error) fail(label, "cannot read: " + errno_text(err));
  bytes.resize(n);
  return parse(std::move(bytes), label);
}

File File::parse(std::vector<std::byte> bytes, std::string label) {
  File file;
  file.label_ = std::move(label);
  file.buffer_ = std::move(bytes);
  const std::string& lab = file.label_;
  const std::size_t size = file.buffer_.size();

  if (size < 8) fail(lab, "not a safetensors file: the file is " + std::to_string(size) + " bytes, shorter than the 8-byte header length");
  std::uint64_t header_bytes = 0;
  std::memcpy(&header_bytes, file.buffer_.data(), 8);
  if (header_bytes > max_header_bytes)
    fail(lab, "not a safetensors file: its first 8 bytes, read as the header length, give " + std::to_string(header_bytes) +
                  " bytes, which exceeds the limit of " + std::to_string(max_header_bytes) + " bytes");
  if (header_bytes > size - 8)
    fail(lab, "header length " + std::to_string(header_bytes) + " is larger than the rest of the file (" + std::to_string(size - 8) +
                  " bytes): truncated file?");

  if (header_bytes == 0 || char(file.buffer_[8]) != '{')
    fail(lab, "not a safetensors file: its header (after the 8-byte length) does not start with '{'");

  // nlohmann stops at a NUL as at the end of the text: a NUL would hide what follows it.
  const char* text = reinterpret_cast<const char*>(file.buffer_.data() + 8);
  if (const void* nul = std::memchr(text, 0, header_bytes))
    fail(lab, "the header holds a NUL byte (at byte " + std::to_string(8 + (static_cast<const char*>(nul) - text)) + " of the file)");
  json header;
  try {
    header = json::parse(text, text + header_bytes);
  } catch (const json::exception& e) {
    fail(lab, std::string("the header is not valid JSON: ") + e.what());
  }
  DuplicateKeys keys;
  json::sax_parse(text, text + header_bytes, &keys);
  if (keys.duplicate)
    fail(lab, keys.in_top_object ? "duplicate tensor name '" + short_name(*keys.duplicate) + "' in the header"
                                 : "duplicate key \"" + short_name(*keys.duplicate) + "\" in the header");
  if (!header.is_object()) fail(lab, "the header is not a JSON object");

  const std::byte* data = file.buffer_.data() + 8 + header_bytes;
  const std::uint64_t data_bytes = size - 8 - header_bytes;
  struct Range {
    std::uint64_t begin, end;
  };
  std::vector<Range> ranges;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) fail(lab, "\"__metadata__\" is not a JSON object");
      for (const auto& [key, value] : entry.items()) {
        if (!value.is_string()) fail(lab, "\"__metadata__\" value of \"" + short_name(key) + "\" is not a string");
        file.metadata_[key] = value.get<std::string>();
      }
      continue;
    }
    const std::string tensor = "tensor '" + short_name(name) + "': ";
    if (!entry.is_object()) fail(lab, tensor + "the entry is not a JSON object");
    for (const auto& [key, value] : entry.items())
      if (key != "dtype" && key != "shape" && key != "data_offsets") fail(lab, tensor + "unknown field \"" + short_name(key) + "\"");
    for (const char* key : {"dtype", "shape", "data_offsets"})
      if (!entry.contains(key)) fail(lab, tensor + "missing \"" + key + "\"");

    const json& jdtype = entry["dtype"];
    if (!jdtype.is_string()) fail(lab, tensor + "\"dtype\" is not a string");
    const auto dtype = parse_dtype(jdtype.get<std::string>());
    if (!dtype) fail(lab, tensor + "unknown dtype \"" + short_name(jdtype.get<std::string>()) + "\"");

    const json& jshape = entry["shape"];
    const auto all_unsigned = [](const json& a) {
      return std::all_of(a.begin(), a.end(), [](const json& x) { return x.is_number_unsigned(); });
    };
    if (!jshape.is_array() || !all_unsigned(jshape)) fail(lab, tensor + "\"shape\" is not an array of non-negative integers");
    std::vector<std::size_t> shape;
    for (const auto& d : jshape) shape.push_back(d.get<std::size_t>());

    const json& joffsets = entry["data_offsets"];
    if (!joffsets.is_array() || joffsets.size() != 2 || !all_unsigned(joffsets))
      fail(lab, tensor + "\"data_offsets\" is not an array of two non-negative integers");
    const std::uint64_t begin = joffsets[0].get<std::uint64_t>(), end = joffsets[1].get<std::uint64_t>();
    if (begin > end) fail(lab, tensor + "data_offsets " + offsets_string(begin, end) + " begin after end");
    if (end > data_bytes)
      fail(lab, tensor + "data_offsets " + offsets_string(begin, end) + " out of range: the data is " + std::to_string(data_bytes) +
                    " bytes (truncated file?)");
    const auto need = byte_size(shape, dtype_size(*dtype));
    if (!need || *need != end - begin)
      fail(lab, tensor + "data_offsets " + offsets_string(begin, end) + " hold " + std::to_string(end - begin) + " bytes, shape " +
                    shape_string(shape) + " of " + std::string(dtype_name(*dtype)) + " needs " +
                    (need ? std::to_string(*need) : std::string("more than 2^64")));
    file.tensors_.push_back({name, *dtype, std::move(shape), {data + begin, std::size_t(end - begin)}});
    ranges.push_back({begin, end});
  }

  // The tensors, in offset order, must tile the data buffer.
  std::vector<std::size_t> order(ranges.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return ranges[a].begin != ranges[b].begin ? ranges[a].begin < ranges[b].begin : ranges[a].end < ranges[b].end;
  });
  std::uint64_t covered = 0;
  for (std::size_t k = 0; k < order.size(); ++k) {
    const Range& r = ranges[order[k]];
    const std::string& name = file.tensors_[order[k]].name;
    if (r.begin < covered) {
      const std::size_t p = order[k - 1];
      fail(lab, "tensors '" + short_name(file.tensors_[p].name) + "' " + offsets_string(ranges[p].begin, ranges[p].end) + " and '" + short_name(name) + "' " +
                    offsets_string(r.begin, r.end) + " overlap");
    }
    if (r.begin > covered)
      fail(lab, "gap: data bytes [" + std::to_string(covered) + ", " + std::to_string(r.begin) + ") before tensor '" + short_name(name) +
                    "' belong to no tensor");
    covered = r.end;
  }
  if (covered != data_bytes)
    fail(lab, std::to_string(data_bytes - covered) + " trailing data bytes after the last tensor (the data is " + std::to_string(data_bytes) +
                  " bytes, the tensors cover " + std::to_string(covered) + ")");

  std::vector<TensorView> sorted;
  sorted.reserve(order.size());
  for (std::size_t i : order) sorted.push_back(std::move(file.tensors_[i]));
  file.tensors_ = std::move(sorted);
  for (std::size_t i = 0; i < file.tensors_.size(); ++i) file.index_.emplace(file.tensors_[i].name, i);
  return file;
}

std::vector<std::string> File::names() const {
  std::vector<std::string> names;
  for (const auto& t : tensors_) names.push_back(t.name);
  return names;
}

const TensorView* File::find(std::string_view name) const {
  const auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

const TensorView& File::at(std::string_view name) const {
  const TensorView* t = find(name);
  if (t == nullptr) fail(label_, "no tensor '" + std::string(name) + "'");
  return *t;
}

// ---- writing -------------------------------------------------------------------------------

void Writer::add(std::string name, Dtype dtype, std::vector<std::size_t> shape, std::span<const std::byte> bytes) {
  const std::string what = "safetensors::Writer: tensor '" + name + "': ";
  if (name.empty() || name == "__metadata__") throw std::invalid_argument(what + "reserved or empty name");
  if (names_.contains(name)) throw std::invalid_argument(what + "duplicate name");
  const auto need = byte_size(shape, dtype_size(dtype));
  if (!need || *need != bytes.size())
    throw std::invalid_argument(what + std::to_string(bytes.size()) + " bytes, shape " + shape_string(shape) + " of " +
                                std::string(dtype_name(dtype)) + " needs " + (need ? std::to_string(*need) : "more than 2^64"));
  names_.insert(name);
  entries_.push_back({std::move(name), dtype, std::move(shape), {bytes.begin(), bytes.end()}});
}

namespace {

// The 8-byte length and the header, padded with spaces to a multiple of 8 bytes.
std::string header_of(const auto& entries, const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json h = nlohmann::ordered_json::object();
  if (!metadata.empty()) h["__metadata__"] = metadata;
  std::uint64_t offset = 0;
  for (const auto& e : entries) {
    h[e.name] = {{"dtype", std::string(dtype_name(e.dtype))}, {"shape", e.shape}, {"data_offsets", {offset, offset + e.bytes.size()}}};
    offset += e.bytes.size();
  }
  std::string text;
  try {
    text = h.dump();
  } catch (const nlohmann::ordered_json::exception& e) {  // a name that is not valid UTF-8
    throw std::invalid_argument(std::string("safetensors::Writer: cannot encode the header: ") + e.what());
  }
  text.append((8 - text.size() % 8) % 8, ' ');
  const std::uint64_t n = text.size();
  char length[8];
  std::memcpy(length, &n, 8);
  return std::string(length, 8) + text;
}

}  // namespace

std::vector<std::byte> Writer::bytes() const {
  const std::string head = header_of(entries_, metadata_);
  std::vector<std::byte> out(reinterpret_cast<const std::byte*>(head.data()), reinterpret_cast<const std::byte*>(head.data() + head.size()));
  for (const auto& e : entries_) out.insert(out.end(), e.bytes.begin(), e.bytes.end());
  return out;
}

void Writer::write(const std::filesystem::path& path) const {
  const std::string target = path.string(), tmp = target + ".tmp";
  const std::string head = header_of(entries_, metadata_);
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (f == nullptr) fail(target, "cannot write: cannot create " + tmp + ": " + errno_text(errno));
  const auto failed = [&](const std::string& step) {
    const int err = errno;
    if (f != nullptr) std::fclose(f);
    std::remove(tmp.c_str());
    fail(target, "cannot write: " + step + ": " + errno_text(err));
  };
  if (std::fwrite(head.data(), 1, head.size(), f) != head.size()) failed("writing " + tmp);
  for (const auto& e : entries_)
    if (std::fwrite(e.bytes.data(), 1, e.bytes.size(), f) != e.bytes.size()) failed("writing " + tmp);
  if (std::fflush(f) != 0) failed("writing " + tmp);
  if (::fsync(::fileno(f)) != 0) failed("fsync " + tmp);
  const int closed = std::fclose(f);
  f = nullptr;
  if (closed != 0) failed("closing " + tmp);
  if (std::rename(tmp.c_str(), target.c_str()) != 0) failed("renaming " + tmp + " to " + target);
  // Make the rename itself durable (best effort: the new file is in place either way).
  const std::filesystem::path dir = path.has_parent_path() ? path.parent_path() : std::filesystem::path(".");
  if (const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY); fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

}  // namespace stformer::safetensors
