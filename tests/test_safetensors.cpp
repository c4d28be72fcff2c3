// safetensors files and checkpoints: bit-exact round trips, a file written by hand, every kind
// of corruption (rejected with a message naming the file and the problem, the model
// unchanged), SPEC's reserved optim./state. tensors, prefixes, atomic writes.
#include <doctest/doctest.h>

#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bit>
#include <cmath>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <vector>

#include <stformer/io/checkpoint.hpp>
#include <stformer/io/safetensors.hpp>
#include <stformer/stformer.hpp>
#include <stformer/train/training.hpp>

namespace fs = std::filesystem;
using namespace stformer;
using safetensors::Dtype;

namespace {

using Set = SetTransformer<2, 16, 2, 4, 2>;
using Pointer = PointerModel<2, 16, 1, 64, 2>;
using Bytes = std::vector<std::byte>;

// A fresh directory under the system's temporary directory, removed with everything in it.
struct TempDir {
  fs::path path;
  TempDir() {
    static int count = 0;
    path = fs::temp_directory_path() / ("stformer_test_safetensors." + std::to_string(::getpid()) + "." + std::to_string(count++));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  fs::path operator/(const std::string& name) const { return path / name; }
};

Bytes read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  REQUIRE(in.good());
  const std::vector<char> c((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  Bytes b(c.size());
  std::memcpy(b.data(), c.data(), c.size());
  return b;
}

void write_bytes(const fs::path& p, const Bytes& b) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(b.data()), std::streamsize(b.size()));
  REQUIRE(out.good());
}

// Little-endian encodings, written out byte by byte (independent of the code under test).
void put_le(Bytes& out, std::uint64_t v, int n) {
  for (int i = 0; i < n; ++i) out.push_back(std::byte((v >> (8 * i)) & 0xff));
}
void put_f32(Bytes& out, float x) { put_le(out, std::bit_cast<std::uint32_t>(x), 4); }
void put_f64(Bytes& out, double x) { put_le(out, std::bit_cast<std::uint64_t>(x), 8); }

// A file from its parts: the 8-byte length (the header's, unless given), the header, the data.
Bytes join(const std::string& header, const Bytes& data, std::optional<std::uint64_t> length = std::nullopt) {
  Bytes out;
  put_le(out, length.value_or(header.size()), 8);
  for (char c : header) out.push_back(std::byte(c));
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

struct Parts {
  std::string header;
  Bytes data;
};
Parts split(const Bytes& file) {
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | std::uint64_t(file[size_t(i)]);
  REQUIRE(8 + n <= file.size());
  const char* h = reinterpret_cast<const char*>(file.data() + 8);
  return {std::string(h, n), Bytes(file.begin() + std::ptrdiff_t(8 + n), file.end())};
}

// s with the first `from` replaced by `to` (which must be there).
std::string replaced(std::string s, const std::string& from, const std::string& to) {
  const auto at = s.find(from);
  REQUIRE_MESSAGE(at != std::string::npos, "not in the header: " << from);
  return s.replace(at, from.size(), to);
}

template <class M>
void init(M& model, std::uint64_t seed) {
  Rng rng(seed);
  init_params(model, rng);
}

// Every parameter bit-equal.
template <class M>
bool same_params(const M& a, const M& b) {
  bool same = true;
  for_each_param([&](const Path&, Init, const auto& x, const auto& y) { same = same && std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0; },
                 a, b);
  return same;
}

// The message of the std::runtime_error that f throws ("" when it throws none).
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

void check_words(const std::string& what, std::initializer_list<std::string> words) {
  INFO("message: " << what);
  CHECK_FALSE(what.empty());
  for (const auto& w : words) CHECK_MESSAGE(what.find(w) != std::string::npos, "the message lacks \"" << w << "\"");
}

// Loading `file` into a model M is rejected with a message holding the file's name and every
// one of `words`, and the model keeps its parameters.
template <class M = Set>
void check_rejected(const Bytes& file, std::initializer_list<std::string> words) {
  TempDir dir;
  const fs::path p = dir / "bad.safetensors";
  write_bytes(p, file);
  M model;
  init(model, 7);
  const M before = model;
  const std::string what = error_of([&] { load_params(p, model); });
  check_words(what, {"bad.safetensors"});
  check_words(what, words);
  CHECK(same_params(model, before));
}

// A checkpoint of model as add_params writes it, after edit(name, dtype, shape, bytes) of each
// tensor (an empty name drops it).
template <class M, class Edit>
Bytes checkpoint_with(const M& model, Edit edit) {
  safetensors::Writer w;
  for_each_param(
      [&](const Path& path, Init, const auto& t) {
        std::string name = path.name().c_str();
        Dtype dtype = Dtype::F32;
        std::vector<size_t> shape(t.shape().begin(), t.shape().end());
        const auto b = std::as_bytes(std::span(t.data(), t.size()));
        Bytes bytes(b.begin(), b.end());
        edit(name, dtype, shape, bytes);
        if (!name.empty()) w.add(name, dtype, shape, bytes);
      },
      model);
  return w.bytes();
}

template <class M>
void check_round_trip() {
  TempDir dir;
  const fs::path p = dir / "model.safetensors";
  M a, b;
  init(a, 1);
  init(b, 2);
  REQUIRE_FALSE(same_params(a, b));
  save_params(p, a, {{"model", "test"}, {"seed", "1"}});
  CHECK_FALSE(fs::exists(p.string() + ".tmp"));
  load_params(p, b);
  CHECK(same_params(a, b));

  // One F32 tensor per parameter, in visit order, with its shape; the metadata; the header
  // padded so that the data starts at a multiple of 8 bytes.
  const auto f = safetensors::File::read(p);
  std::vector<std::string> names;
  for_each_param(
      [&](const Path& path, Init, const auto& t) {
        names.push_back(path.name().c_str());
        const auto& v = f.at(path.name().c_str());
        CHECK(v.dtype == Dtype::F32);
        CHECK(v.shape == std::vector<size_t>(t.shape().begin(), t.shape().end()));
      },
      a);
  CHECK(f.names() == names);
  CHECK(f.metadata() == std::map<std::string, std::string>{{"model", "test"}, {"seed", "1"}, {"stformer.declaration", declaration<M>()}});
  CHECK(split(read_bytes(p)).header.size() % 8 == 0);
  CHECK(read_bytes(p).size() == 8 + split(read_bytes(p)).header.size() + 4 * param_count(a));
}

}  // namespace

TEST_CASE("safetensors: model round trips are bit-exact") {
  check_round_trip<Set>();
  check_round_trip<Pointer>();
}

TEST_CASE("safetensors: a file written by hand is read as written") {
  // b: F32 [2, 1] at [0, 8); w: F64 [2] at [8, 24); s: I64 scalar at [24, 32); e: U8 [0, 3], empty.
  const std::string header =
      R"({"w":{"dtype":"F64","shape":[2],"data_offsets":[8,24]},"__metadata__":{"format":"pt","note":"by hand"},)"
      R"("s":{"shape":[],"dtype":"I64","data_offsets":[24,32]},"e":{"dtype":"U8","shape":[0,3],"data_offsets":[32,32]},)"
      R"("b":{"dtype":"F32","shape":[2,1],"data_offsets":[0,8]}}   )";  // trailing padding
  Bytes data;
  put_f32(data, 1.5f);
  put_f32(data, -2.0f);
  put_f64(data, 0.25);
  put_f64(data, 3.0);
  put_le(data, std::uint64_t(-5), 8);
  TempDir dir;
  write_bytes(dir / "hand.safetensors", join(header, data));
  const auto f = safetensors::File::read(dir / "hand.safetensors");

  CHECK(f.names() == std::vector<std::string>{"b", "w", "s", "e"});  // in data order
  CHECK(f.metadata() == std::map<std::string, std::string>{{"format", "pt"}, {"note", "by hand"}});
  const auto& b = f.at("b");
  CHECK(b.dtype == Dtype::F32);
  CHECK(b.shape == std::vector<size_t>{2, 1});
  float fb[2];
  REQUIRE(b.bytes.size() == sizeof fb);
  std::memcpy(fb, b.bytes.data(), sizeof fb);
  CHECK(fb[0] == 1.5f);
  CHECK(fb[1] == -2.0f);
  const auto& w = f.at("w");
  CHECK(w.dtype == Dtype::F64);
  double dw[2];
  REQUIRE(w.bytes.size() == sizeof dw);
  std::memcpy(dw, w.bytes.data(), sizeof dw);
  CHECK(dw[0] == 0.25);
  CHECK(dw[1] == 3.0);
  const auto& s = f.at("s");
  CHECK(s.dtype == Dtype::I64);
  CHECK(s.shape.empty());
  std::int64_t is = 0;
  REQUIRE(s.bytes.size() == sizeof is);
  std::memcpy(&is, s.bytes.data(), sizeof is);
  CHECK(is == -5);
  CHECK(f.at("e").dtype == Dtype::U8);
  CHECK(f.at("e").bytes.empty());
  CHECK(f.find("nope") == nullptr);
  CHECK_THROWS_WITH_AS(f.at("nope"), doctest::Contains("no tensor 'nope'"), std::runtime_error);

  // A Linear<2, 3> checkpoint by hand: weight [3, 2] = 1..6, bias [3] = 7..9.
  Bytes lin_data;
  for (int i = 1; i <= 9; ++i) put_f32(lin_data, float(i));
  write_bytes(dir / "linear.safetensors",
              join(R"({"bias":{"dtype":"F32","shape":[3],"data_offsets":[24,36]},"weight":{"dtype":"F32","shape":[3,2],"data_offsets":[0,24]}})",
                   lin_data));
  Linear<2, 3> lin;
  load_params(dir / "linear.safetensors", lin);
  for (size_t i = 0; i < 3; ++i) {
    for (size_t j = 0; j < 2; ++j) CHECK(lin.weight(i, j) == float(1 + 2 * i + j));
    CHECK(lin.bias(i) == float(7 + i));
  }
}

TEST_CASE("safetensors: the writer's bytes") {
  safetensors::Writer w;
  Bytes x;
  put_f32(x, 1.5f);
  put_f32(x, -2.0f);
  w.add("x", Dtype::F32, {2}, x);
  w.add("s", Dtype::U8, {}, Bytes{std::byte(9)});
  w.set_metadata("k", "v");
  std::string header = R"({"__metadata__":{"k":"v"},"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"s":{"dtype":"U8","shape":[],"data_offsets":[8,9]}})";
  header.append((8 - header.size() % 8) % 8, ' ');
  Bytes data = x;
  data.push_back(std::byte(9));
  CHECK(w.bytes() == join(header, data));

  CHECK_THROWS_AS(w.add("x", Dtype::F32, {2}, x), std::invalid_argument);      // duplicate
  CHECK_THROWS_AS(w.add("y", Dtype::F32, {3}, x), std::invalid_argument);      // 8 bytes for 12
  CHECK_THROWS_AS(w.add("__metadata__", Dtype::U8, {0}, {}), std::invalid_argument);
}

TEST_CASE("checkpoint: SPEC's optim./state. tensors, prefixes, unexpected tensors") {
  TempDir dir;
  Set a, a2, b;
  init(a, 1);
  init(a2, 3);
  init(b, 2);

  // The model with optimiser and RNG state next to it loads (they are not unexpected).
  safetensors::Writer w;
  add_params(w, a);
  add_params(w, a2, "optim.exp_avg.");
  Bytes step;
  put_le(step, 42, 8);
  w.add("optim.step", Dtype::I64, {}, step);
  w.add("state.rng", Dtype::U8, {16}, Bytes(16, std::byte(1)));
  w.write(dir / "run.safetensors");
  const auto f = safetensors::File::read(dir / "run.safetensors");
  load_params(f, b);
  CHECK(same_params(a, b));
  load_params(f, b, "optim.exp_avg.");  // a model-shaped structure under a prefix
  CHECK(same_params(a2, b));
  CHECK(f.at("optim.step").shape.empty());

  // Under a prefix inside optim., the other optim. tensors are not the model's: ignored; but an
  // extra tensor under the prefix is unexpected.
  safetensors::Writer w2;
  add_params(w2, a, "optim.exp_avg.");
  w2.add("optim.exp_avg.extra", Dtype::F32, {1}, Bytes(4));
  w2.add("optim.exp_avg_sq.proj.bias", Dtype::F32, {1}, Bytes(4));
  w2.write(dir / "prefix.safetensors");
  const auto f2 = safetensors::File::read(dir / "prefix.safetensors");
  init(b, 2);
  const Set before = b;
  check_words(error_of([&] { load_params(f2, b, "optim.exp_avg."); }), {"prefix.safetensors", "1 unexpected tensor", "'optim.exp_avg.extra'"});
  CHECK(same_params(b, before));
  load_params(f2, b, "optim.exp_avg.", Unexpected::ignore);
  CHECK(same_params(a, b));

  // Two models under prefixes: each loads by its prefix; without one, nothing matches.
  safetensors::Writer w3;
  add_params(w3, a, "ema.");
  add_params(w3, a2, "model.");
  w3.write(dir / "two.safetensors");
  const auto f3 = safetensors::File::read(dir / "two.safetensors");
  load_params(f3, b, "ema.");
  CHECK(same_params(a, b));
  load_params(f3, b, "model.");
  CHECK(same_params(a2, b));
  check_words(error_of([&] { load_params(f3, b); }), {"two.safetensors", "tensor 'proj.weight' is missing"});
  CHECK(same_params(a2, b));
}

// stformer/core/declaration.hpp: a file says what it is.
namespace {
struct Causal8 : Sequential<Named<"attn", SelfAttention<8, 2>>> {
  static constexpr bool causal = true;
};
// Whether two models hold the same tensors under the same names (whatever their visit order).
template <class A, class B>
bool same_tensors(const A& a, const B& b) {
  safetensors::Writer wa, wb;
  add_params(wa, a);
  add_params(wb, b);
  const TempDir dir;
  wa.write(dir / "a.safetensors");
  wb.write(dir / "b.safetensors");
  const auto fa = safetensors::File::read(dir / "a.safetensors"), fb = safetensors::File::read(dir / "b.safetensors");
  for (const auto& v : fa.tensors())
    if (fb.find(v.name) == nullptr || !std::ranges::equal(fb.at(v.name).bytes, v.bytes)) return false;
  return fa.tensors().size() == fb.tensors().size();
}
}  // namespace

TEST_CASE("checkpoint: a file of another model with the same tensors is refused, naming both declarations") {
  // The canonical form, written out: no namespaces or spaces, every argument, ε the shortest %g.
  CHECK(declaration<Sequential<Named<"norm", LayerNorm<8, epsilon(1e-12f)>>, Named<"fc", Linear<8, 3, Init::zeros, Bias::no>>, GELU<3>>>() ==
        R"(Sequential<Named<"norm",LayerNorm<8,epsilon(1e-12)>>,Named<"fc",Linear<8,3,Bias::no>>,GELU<3>>)");
  // What computes the same is declared the same: an alias, a derived struct, the initialisation.
  CHECK(declaration<Activation<act::GELU, 3>>() == declaration<GELU<3>>());
  CHECK(declaration<SelfAttention<8, 2>>() == declaration<MultiHeadAttention<8, 8, 8, 2, ScoreScale::head_width, Projections::packed>>());
  CHECK(declaration<Linear<8, 3>>() == declaration<Linear<8, 3, Init::kaiming_normal>>());
  CHECK(declaration<Sequential<Named<"", ReLU<8>>, Named<"fc", Linear<8, 3>>>>() == declaration<Sequential<ReLU<8>, Named<"fc", Linear<8, 3>>>>());
  CHECK(declaration<Causal8>() == "Causal<" + declaration<Sequential<Named<"attn", SelfAttention<8, 2>>>>() + ">");
  CHECK(declaration<RMSNorm<8>>() == "RMSNorm<8,epsilon(1.1920929e-07)>");

  // A pre-norm block's file into a post-norm block: the same tensors, another function.
  using Pre = EncoderBlock<16, 2, 32, PreNorm<>>;
  using Post = EncoderBlock<16, 2, 32, PostNorm<>>;
  TempDir dir;
  auto pre = std::make_unique<Pre>();
  auto post = std::make_unique<Post>();
  init(*pre, 1);
  init(*post, 2);
  save_params(dir / "pre.safetensors", *pre);
  const Post before = *post;
  const std::string what = error_of([&] { load_params(dir / "pre.safetensors", *post); });
  check_words(what, {"pre.safetensors", "another model", "the file's:  " + declaration<Pre>(), "the model's: " + declaration<Post>()});
  CHECK(same_params(*post, before));
  // and the training checkpoint's load too; a part of a file (a prefix, Unexpected::ignore) is
  // loaded by its tensors alone, and so is a file without a declaration.
  AdamW<Post> opt;
  TrainingState state;
  save_checkpoint(dir / "run.safetensors", *pre, AdamW<Pre>{}, state);
  check_words(error_of([&] { load_checkpoint(dir / "run.safetensors", *post, opt, state); }), {"another model", declaration<Pre>()});
  load_params(safetensors::File::read(dir / "pre.safetensors"), *post, "", Unexpected::ignore);
  CHECK(same_tensors(*post, *pre));
  init(*post, 2);
  safetensors::Writer w;
  add_params(w, *pre);
  w.write(dir / "bare.safetensors");
  load_params(dir / "bare.safetensors", *post);
  CHECK(same_tensors(*post, *pre));
  // Its own file loads.
  init(*post, 2);
  save_params(dir / "post.safetensors", before);
  load_params(dir / "post.safetensors", *post);
  CHECK(same_params(*post, before));
}

TEST_CASE("safetensors: corrupt files are rejected, naming the problem, and the model is unchanged") {
  Set a;
  init(a, 1);
  const Bytes good = checkpoint_with(a, [](auto&...) {});
  const Parts parts = split(good);
  const std::string& header = parts.header;
  const Bytes& data = parts.data;
  const size_t n = header.size(), d = data.size();
  REQUIRE(header.find(R"("proj.bias":{"dtype":"F32","shape":[16],"data_offsets":[128,192]})") != std::string::npos);

  SUBCASE("truncated") {
    for (size_t cut : {size_t(0), size_t(4), size_t(7)}) check_rejected(Bytes(good.begin(), good.begin() + std::ptrdiff_t(cut)), {"shorter than the 8-byte header length"});
    for (size_t cut : {size_t(8), 8 + n / 2, 8 + n - 1})
      check_rejected(Bytes(good.begin(), good.begin() + std::ptrdiff_t(cut)), {"header length", "larger than the rest of the file", "truncated"});
    for (size_t cut : {8 + n, 8 + n + d / 2, good.size() - 4, good.size() - 1})
      check_rejected(Bytes(good.begin(), good.begin() + std::ptrdiff_t(cut)), {"out of range", "truncated"});
  }
  SUBCASE("absurd header length") {
    check_rejected(join(header, data, std::uint64_t(1) << 40), {"not a safetensors file: its first 8 bytes, read as the header length, give 1099511627776 bytes, which exceeds the limit of 100000000 bytes"});
    check_rejected(join(header, data, ~std::uint64_t(0)), {"exceeds the limit"});
    check_rejected(join(header, data, n + d + 1), {"larger than the rest of the file"});
    check_rejected(join(header, data, 0), {"not a safetensors file"});
  }
  SUBCASE("invalid JSON") {
    check_rejected(join(replaced(header, "{", "["), data), {"not a safetensors file", "does not start with '{'"});
    check_rejected(join(replaced(header, "{", " "), data), {"not a safetensors file", "does not start with '{'"});
    check_rejected(join(header.substr(0, n / 2), data), {"not valid JSON"});
    check_rejected(join(replaced(header, "proj.bias", "proj.b\xff"), data), {"not valid JSON"});  // not UTF-8
    check_rejected(join("[]", {}), {"not a safetensors file", "does not start with '{'"});
    check_rejected(join(header + std::string(1, '\0'), data), {"the header holds a NUL byte (at byte " + std::to_string(8 + n) + " of the file)"});
  }
  SUBCASE("malformed entries") {
    const std::string bias = R"("proj.bias":{"dtype":"F32","shape":[16],"data_offsets":[128,192]})";
    const auto with_bias = [&](const std::string& entry) { return join(replaced(header, bias, entry), data); };
    check_rejected(with_bias(R"("proj.bias":[])"), {"tensor 'proj.bias'", "not a JSON object"});
    check_rejected(with_bias(R"("proj.bias":{"shape":[16],"data_offsets":[128,192]})"), {"tensor 'proj.bias'", R"(missing "dtype")"});
    check_rejected(with_bias(R"("proj.bias":{"dtype":"F32","data_offsets":[128,192]})"), {"tensor 'proj.bias'", R"(missing "shape")"});
    check_rejected(with_bias(R"("proj.bias":{"dtype":"F32","shape":[16]})"), {"tensor 'proj.bias'", R"(missing "data_offsets")"});
    check_rejected(with_bias(R"("proj.bias":{"dtype":"F32","shape":[16],"data_offsets":[128,192],"x":1})"), {"tensor 'proj.bias'", R"(unknown field "x")"});
    check_rejected(with_bias(R"("proj.bias":{"dtype":4,"shape":[16],"data_offsets":[128,192]})"), {"tensor 'proj.bias'", R"("dtype" is not a string)"});
    check_rejected(with_bias(R"("proj.bias":{"dtype":"F33","shape":[16],"data_offsets":[128,192]})"), {"tensor 'proj.bias'", R"(unknown dtype "F33")"});
    check_rejected(with_bias(R"("proj.bias":{"dtype":"F32","shape":"16","data_offsets":[128,192]})"), {"tensor 'proj.bias'", R"("shape" is not an array)"});
    check_rejected(with_bias(R"("proj.bias":{"dtype":"F32","shape":[16,-1],"data_offsets":[128,192]})"), {"tensor 'proj.bias'", "non-negative integers"});
    check_rejected(with_bias(R"("proj.bias":{"dtype":"F32","shape":[16.0],"data_offsets":[128,192]})"), {"tensor 'proj.bias'", "non-negative integers"});
    check_rejected(with_bias(R"("proj.bias":{"dtype":"F32","shape":[16],"data_offsets":[128]})"), {"tensor 'proj.bias'", R"("data_offsets" is not an array of two)"});
    check_rejected(with_bias(R"("proj.bias":{"dtype":"F32","shape":[16],"data_offsets":[192,128]})"), {"tensor 'proj.bias'", "[192, 128] begin after end"});
    check_rejected(with_bias(R"("proj.bias":{"dtype":"F32","shape":[15],"data_offsets":[128,192]})"),
                   {"tensor 'proj.bias'", "hold 64 bytes, shape [15] of F32 needs 60"});
    check_rejected(with_bias(R"("proj.bias":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[128,192]})"), {"needs more than 2^64"});
    check_rejected(join(replaced(header, "{", R"({"__metadata__":{"n":1},)"), data), {R"("__metadata__" value of "n" is not a string)"});
    check_rejected(join(replaced(header, "{", R"({"__metadata__":[],)"), data), {R"("__metadata__" is not a JSON object)"});
  }
  SUBCASE("duplicate names and keys") {
    check_rejected(join(replaced(header, "{", R"({"proj.bias":{"dtype":"F32","shape":[16],"data_offsets":[128,192]},)"), data),
                   {"duplicate tensor name 'proj.bias'"});
    check_rejected(join(replaced(header, R"("dtype":"F32",)", R"("dtype":"F32","dtype":"F32",)"), data), {R"(duplicate key "dtype")"});
    // a name of a megabyte is quoted by its first 64 bytes and its length
    const std::string huge(1 << 20, 'w');
    check_rejected(join(replaced(header, "{", "{\"" + huge + R"(":{"dtype":"F32","shape":[16],"data_offsets":[128,192]},")" + huge + R"(":[],)"), data),
                   {"duplicate tensor name '" + huge.substr(0, 64) + "... (1048576 bytes)' in the header"});
  }
  SUBCASE("a header of 100,000 entries: read or refused in time linear in it") {
    std::string big = "{";
    for (size_t i = 0; i < 100000; ++i)
      big += "\"t" + std::to_string(i) + R"(":{"dtype":"U8","shape":[1],"data_offsets":[)" + std::to_string(i) + "," + std::to_string(i + 1) + "]},";
    const auto start = std::chrono::steady_clock::now();
    CHECK(safetensors::File::parse(join(big.substr(0, big.size() - 1) + "}", Bytes(100000)), "big.safetensors").tensors().size() == 100000);
    check_rejected(join(big + R"("t99999":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})", Bytes(100000)), {"duplicate tensor name 't99999'"});
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    MESSAGE("two headers of 100,000 entries parsed in " << seconds << " s");
    CHECK(seconds < 20);  // (quadratic: minutes; generous for the sanitizers' builds)
  }
  SUBCASE("offsets: out of range, overlapping, gaps, trailing bytes") {
    const std::string last = "[" + std::to_string(d - 8) + "," + std::to_string(d) + "]";
    check_rejected(join(replaced(header, last, "[" + std::to_string(d - 8) + "," + std::to_string(d + 4) + "]"), data),
                   {"tensor 'head.bias'", "out of range: the data is " + std::to_string(d) + " bytes"});
    check_rejected(join(replaced(header, last, "[" + std::to_string(d) + "," + std::to_string(d + 8) + "]"), data), {"tensor 'head.bias'", "out of range"});
    check_rejected(join(replaced(header, "[128,192]", "[64,128]"), data), {"tensors 'proj.weight' [0, 128] and 'proj.bias' [64, 128] overlap"});
    Bytes more = data;
    more.resize(d + 4);
    check_rejected(join(header, more), {"4 trailing data bytes after the last tensor"});
    check_rejected(join(R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"b":{"dtype":"U8","shape":[1],"data_offsets":[2,3]}})", Bytes(3)),
                   {"gap: data bytes [1, 2) before tensor 'b'"});
    check_rejected(join(R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}})", Bytes(2)), {"gap: data bytes [0, 1) before tensor 'a'"});
  }
  SUBCASE("a valid file that is not this model's") {
    check_rejected(checkpoint_with(a,
                                   [](std::string& name, Dtype& dtype, std::vector<size_t>&, Bytes& bytes) {
                                     if (name != "proj.bias") return;
                                     Bytes wide;
                                     for (size_t i = 0; i < bytes.size(); i += 4) {
                                       float x;
                                       std::memcpy(&x, &bytes[i], 4);
                                       put_f64(wide, x);
                                     }
                                     dtype = Dtype::F64;
                                     bytes = wide;
                                   }),
                   {"tensor 'proj.bias' has dtype F64, the model expects F32"});
    check_rejected(checkpoint_with(a, [](std::string& name, Dtype& dtype, auto&...) { dtype = name == "isab.mab1.nq.g" ? Dtype::I32 : dtype; }),
                   {"tensor 'isab.mab1.nq.g' has dtype I32, the model expects F32"});
    check_rejected(checkpoint_with(a, [](std::string& name, Dtype&, std::vector<size_t>& shape, Bytes&) {
                     if (name == "proj.weight") shape = {2, 16};
                   }),
                   {"tensor 'proj.weight' has shape [2, 16], the model expects [16, 2]"});
    check_rejected(checkpoint_with(a, [](std::string& name, auto&...) { name = name == "head.bias" ? "" : name; }), {"tensor 'head.bias' is missing"});
    // a NaN and an infinity: both tensors named, with the entry
    check_rejected(checkpoint_with(a,
                                   [](std::string& name, Dtype&, std::vector<size_t>&, Bytes& bytes) {
                                     const float bad = name == "proj.bias" ? std::nanf("") : name == "head.weight" ? -INFINITY : 0.0f;
                                     if (bad == 0.0f) return;
                                     std::memcpy(&bytes[4 * 3], &bad, 4);
                                   }),
                   {"2 problems", "tensor 'proj.bias' holds a value that is not finite (NaN or infinity) at entry 3",
                    "tensor 'head.weight' holds a value that is not finite (NaN or infinity) at entry 3"});
    safetensors::Writer w;
    add_params(w, a);
    w.add("extra.weight", Dtype::F32, {1}, Bytes(4));
    check_rejected(w.bytes(), {"1 unexpected tensor that the model does not have: 'extra.weight'"});

    // Checkpoints of other configurations: another input width, one encoder block more.
    SetTransformer<3, 16, 2, 4, 2> wider;
    init(wider, 1);
    check_rejected(checkpoint_with(wider, [](auto&...) {}), {"tensor 'proj.weight' has shape [16, 3], the model expects [16, 2]"});
    PointerModel<2, 16, 1, 64, 3> deeper;
    init(deeper, 1);
    check_rejected<Pointer>(checkpoint_with(deeper, [](auto&...) {}), {"unexpected tensors that the model does not have: 'blocks.2."});
  }
}

// Every damaged copy of a valid checkpoint: cut at every length, and every bit of the length
// and of the header flipped in turn. Each is refused with a message that names the file, and
// the model keeps its parameters.
TEST_CASE("safetensors: every truncation and every header bit flip is refused, the model unchanged") {
  Set a, model, before;
  init(a, 1);
  init(before, 7);
  const Bytes good = checkpoint_with(a, [](auto&...) {});
  const size_t header_end = 8 + split(good).header.size();
  size_t tried = 0, refused = 0;
  std::string first_problem;
  const auto check = [&](const Bytes& bad, const std::string& what) {
    ++tried;
    model = before;
    std::string message;
    try {
      load_params(safetensors::File::parse(bad, "bad.safetensors"), model);
    } catch (const std::runtime_error& e) {
      message = e.what();
    }
    const bool ok = message.find("bad.safetensors: ") != std::string::npos && same_params(model, before);
    refused += ok;
    if (!ok && first_problem.empty()) first_problem = what + (message.empty() ? ": loaded" : ": " + message);
  };
  for (size_t cut = 0; cut < good.size(); ++cut) check(Bytes(good.begin(), good.begin() + std::ptrdiff_t(cut)), "cut at " + std::to_string(cut));
  for (size_t i = 0; i < header_end; ++i)
    for (int bit = 0; bit < 8; ++bit) {
      Bytes bad = good;
      bad[i] ^= std::byte(1 << bit);
      check(bad, "byte " + std::to_string(i) + " bit " + std::to_string(bit));
    }
  INFO("first damaged copy not refused: " << first_problem);
  CHECK(refused == tried);
  MESSAGE(tried << " damaged copies (" << good.size() << " cuts, " << 8 * header_end << " bit flips), " << refused << " refused");
}

TEST_CASE("safetensors: cannot open or read; a folder, a device or a pipe is not read") {
  TempDir dir;
  check_words(error_of([&] { (void)safetensors::File::read(dir / "absent.safetensors"); }), {"absent.safetensors", "cannot open", "No such file or directory"});
  check_words(error_of([&] { (void)safetensors::File::read(dir.path); }), {dir.path.string(), "not a regular file", "not read"});
  check_words(error_of([&] { (void)safetensors::File::read("/dev/zero"); }), {"/dev/zero", "not a regular file"});
  const fs::path fifo = dir / "fifo";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  check_words(error_of([&] { (void)safetensors::File::read(fifo); }), {"fifo", "not a regular file"});  // an open would wait for a writer
}

TEST_CASE("safetensors: writes are atomic") {
  TempDir dir;
  Set a, c;
  init(a, 1);
  init(c, 5);
  const fs::path p = dir / "model.safetensors";
  const fs::path tmp = p.string() + ".tmp";
  save_params(p, a);
  const Bytes v1 = read_bytes(p);

  // Into a directory that does not exist: an error naming the path and the reason.
  const fs::path nowhere = dir / "no_such_dir" / "model.safetensors";
  check_words(error_of([&] { save_params(nowhere, c); }), {nowhere.string(), "cannot create", "No such file or directory"});
  CHECK_FALSE(fs::exists(dir / "no_such_dir"));

  // A write that fails half-way (the file size limit, EFBIG) leaves the previous file intact
  // and no temporary file.
  {
    rlimit old{};
    REQUIRE(::getrlimit(RLIMIT_FSIZE, &old) == 0);
    const auto old_handler = ::signal(SIGXFSZ, SIG_IGN);
    rlimit small = old;
    small.rlim_cur = 4096;
    REQUIRE(v1.size() > small.rlim_cur);
    REQUIRE(::setrlimit(RLIMIT_FSIZE, &small) == 0);
    const std::string what = error_of([&] { save_params(p, c); });
    ::setrlimit(RLIMIT_FSIZE, &old);
    ::signal(SIGXFSZ, old_handler);
    check_words(what, {p.string(), "cannot write", "File too large"});
  }
  CHECK(read_bytes(p) == v1);
  CHECK_FALSE(fs::exists(tmp));

  // A rename that fails (the target is a directory): the directory stays, no temporary file.
  const fs::path isdir = dir / "isdir.safetensors";
  fs::create_directories(isdir / "inside");
  check_words(error_of([&] { save_params(isdir, c); }), {"renaming", "Is a directory"});
  CHECK(fs::is_directory(isdir / "inside"));
  CHECK_FALSE(fs::exists(isdir.string() + ".tmp"));

  // A successful write replaces the file.
  save_params(p, c);
  CHECK_FALSE(fs::exists(tmp));
  Set b{};
  load_params(p, b);
  CHECK(same_params(b, c));
}
