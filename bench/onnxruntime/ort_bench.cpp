// ONNX Runtime's side of bench/onnxruntime: runs the models exported from the PyTorch twin
// (export.py) through ORT's C API, compares one output with PyTorch's and times the forward pass.
//
//   ort_bench MANIFEST THREADS REPETITIONS MIN_SECONDS [CASE ...]
//
// MANIFEST: one case a line, tab-separated:
//   name  model.onnx  input-type(f32|i64)  input-shape(d0,d1,...)  input.bin  output-shape  expected.bin
// (the .bin files are the raw little-endian tensors, PyTorch's input and PyTorch's output on it),
// and for a graph of a second input "mask", three fields more:
//   mask-type(f32|i64|b8)  mask-shape  mask.bin
// CASE: run only the cases of these names (all when none is given).
// Prints the library's version and the API version used (VERSION  1.30.0  12), then for each
// case one line to stdout, tab-separated:
//   RESULT  name  max|ORT - PyTorch|  max|PyTorch|  seconds of each repetition (comma-separated)
// A repetition runs the pass until MIN_SECONDS have passed and gives the mean time of a pass, as
// compare_torch.py does for PyTorch. Exits 1 on any ONNX Runtime error, 2 on a bad command line.
//
// The session is ORT at its best on THREADS threads: every graph optimisation, sequential
// execution, intra-op pool of THREADS (1: the calling thread alone), inter-op 1, subnormals
// flushed to zero (as stformer's thread pool and compare_torch.py's PyTorch do), the input and
// the output tensors allocated once and reused by every run.
#include <onnxruntime_c_api.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace {

const OrtApi* ort = nullptr;

void check(OrtStatus* status, const char* what) {
  if (status != nullptr) {
    std::fprintf(stderr, "ort_bench: %s: %s\n", what, ort->GetErrorMessage(status));
    ort->ReleaseStatus(status);
    std::exit(1);
  }
}

[[noreturn]] void fail(const std::string& message) {
  std::fprintf(stderr, "ort_bench: %s\n", message.c_str());
  std::exit(2);
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> parts;
  std::string part;
  std::istringstream in(s);
  while (std::getline(in, part, sep)) parts.push_back(part);
  return parts;
}

std::vector<int64_t> shape_of(const std::string& s) {
  std::vector<int64_t> shape;
  for (const auto& d : split(s, ',')) shape.push_back(std::stoll(d));
  return shape;
}

size_t count_of(const std::vector<int64_t>& shape) {
  size_t n = 1;
  for (auto d : shape) n *= static_cast<size_t>(d);
  return n;
}

std::vector<char> read_file(const std::string& path, size_t bytes) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail("cannot open " + path);
  std::vector<char> data(bytes);
  f.read(data.data(), static_cast<std::streamsize>(bytes));
  if (static_cast<size_t>(f.gcount()) != bytes || f.peek() != EOF)
    fail(path + ": not " + std::to_string(bytes) + " bytes");
  return data;
}

struct Case {
  std::string name, model, type, input, expected, mask_type, mask;
  std::vector<int64_t> in_shape, out_shape, mask_shape;
};

size_t element_size(const std::string& type) { return type == "i64" ? sizeof(int64_t) : type == "f32" ? sizeof(float) : 1; }
ONNXTensorElementDataType element_type(const std::string& type) {
  return type == "i64" ? ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64 : type == "f32" ? ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT : ONNX_TENSOR_ELEMENT_DATA_TYPE_BOOL;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 5) fail("usage: ort_bench MANIFEST THREADS REPETITIONS MIN_SECONDS [CASE ...]");
  const int threads = std::atoi(argv[2]);
  const int repetitions = std::atoi(argv[3]);
  const double min_seconds = std::atof(argv[4]);
  if (threads < 1 || repetitions < 1 || !(min_seconds > 0)) fail("THREADS, REPETITIONS and MIN_SECONDS must be positive");
  const std::set<std::string> only(argv + 5, argv + argc);

  std::vector<Case> cases;
  std::ifstream manifest(argv[1]);
  if (!manifest) fail(std::string("cannot open the manifest ") + argv[1]);
  for (std::string line; std::getline(manifest, line);) {
    if (line.empty()) continue;
    auto f = split(line, '\t');
    if (f.size() != 7 && f.size() != 10) fail("manifest line without 7 or 10 fields: " + line);
    if (!only.empty() && !only.count(f[0])) continue;
    if (f[2] != "f32" && f[2] != "i64") fail("manifest: input type " + f[2] + " (f32 or i64)");
    if (f.size() == 10 && f[7] != "f32" && f[7] != "i64" && f[7] != "b8") fail("manifest: mask type " + f[7] + " (f32, i64 or b8)");
    if (f.size() == 7)
      cases.push_back({f[0], f[1], f[2], f[4], f[6], "", "", shape_of(f[3]), shape_of(f[5]), {}});
    else
      cases.push_back({f[0], f[1], f[2], f[4], f[6], f[7], f[9], shape_of(f[3]), shape_of(f[5]), shape_of(f[8])});
  }
  if (cases.empty()) fail("no case selected");

  // The header may be older than the library: the library serves every older API version.
  ort = OrtGetApiBase()->GetApi(ORT_API_VERSION);
  if (ort == nullptr) fail("this libonnxruntime does not serve API version " + std::to_string(ORT_API_VERSION));
  std::printf("VERSION\t%s\t%d\n", OrtGetApiBase()->GetVersionString(), ORT_API_VERSION);

  OrtEnv* env;
  check(ort->CreateEnv(ORT_LOGGING_LEVEL_WARNING, "ort_bench", &env), "CreateEnv");
  OrtMemoryInfo* cpu;
  check(ort->CreateCpuMemoryInfo(OrtArenaAllocator, OrtMemTypeDefault, &cpu), "CreateCpuMemoryInfo");

  for (const auto& c : cases) {
    OrtSessionOptions* options;
    check(ort->CreateSessionOptions(&options), "CreateSessionOptions");
    check(ort->SetIntraOpNumThreads(options, threads), "SetIntraOpNumThreads");
    check(ort->SetInterOpNumThreads(options, 1), "SetInterOpNumThreads");
    check(ort->SetSessionExecutionMode(options, ORT_SEQUENTIAL), "SetSessionExecutionMode");
    check(ort->SetSessionGraphOptimizationLevel(options, ORT_ENABLE_ALL), "SetSessionGraphOptimizationLevel");
    check(ort->AddSessionConfigEntry(options, "session.set_denormal_as_zero", "1"), "AddSessionConfigEntry");
    OrtSession* session;
    check(ort->CreateSession(env, c.model.c_str(), options, &session), ("CreateSession " + c.model).c_str());

    const bool ids = c.type == "i64";
    const size_t in_count = count_of(c.in_shape), out_count = count_of(c.out_shape);
    std::vector<char> input = read_file(c.input, in_count * (ids ? sizeof(int64_t) : sizeof(float)));
    std::vector<char> expected_bytes = read_file(c.expected, out_count * sizeof(float));
    const auto* expected = reinterpret_cast<const float*>(expected_bytes.data());
    std::vector<float> output(out_count);

    OrtValue* in[2] = {nullptr, nullptr};
    OrtValue* out = nullptr;
    check(ort->CreateTensorWithDataAsOrtValue(cpu, input.data(), input.size(), c.in_shape.data(), c.in_shape.size(),
                                              ids ? ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64 : ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT, &in[0]),
          "CreateTensorWithDataAsOrtValue (input)");
    const size_t inputs = c.mask.empty() ? 1 : 2;
    std::vector<char> mask;
    if (inputs == 2) {
      mask = read_file(c.mask, count_of(c.mask_shape) * element_size(c.mask_type));
      check(ort->CreateTensorWithDataAsOrtValue(cpu, mask.data(), mask.size(), c.mask_shape.data(), c.mask_shape.size(), element_type(c.mask_type),
                                                &in[1]),
            "CreateTensorWithDataAsOrtValue (mask)");
    }
    check(ort->CreateTensorWithDataAsOrtValue(cpu, output.data(), out_count * sizeof(float), c.out_shape.data(), c.out_shape.size(),
                                              ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT, &out),
          "CreateTensorWithDataAsOrtValue (output)");
    const char* in_names[] = {"x", "mask"};
    const char* out_names[] = {"y"};
    auto run = [&] { check(ort->Run(session, nullptr, in_names, in, inputs, out_names, 1, &out), ("Run " + c.name).c_str()); };

    run();  // the first pass: the outputs against PyTorch's
    double err = 0, ref = 0;
    for (size_t i = 0; i < out_count; ++i) {
      const double d = std::fabs(static_cast<double>(output[i]) - expected[i]);
      err = std::isnan(d) ? INFINITY : std::max(err, d);
      ref = std::max(ref, std::fabs(static_cast<double>(expected[i])));
    }
    for (int i = 0; i < 3; ++i) run();
    std::vector<double> seconds;
    using clock = std::chrono::steady_clock;
    for (int r = 0; r < repetitions; ++r) {
      long n = 0;
      double elapsed = 0;
      const auto start = clock::now();
      while (elapsed < min_seconds) {
        run();
        ++n;
        elapsed = std::chrono::duration<double>(clock::now() - start).count();
      }
      seconds.push_back(elapsed / static_cast<double>(n));
    }
    std::printf("RESULT\t%s\t%.9g\t%.9g\t", c.name.c_str(), err, ref);
    for (size_t i = 0; i < seconds.size(); ++i) std::printf("%s%.9g", i ? "," : "", seconds[i]);
    std::printf("\n");
    std::fflush(stdout);

    ort->ReleaseValue(out);
    for (OrtValue* v : in)
      if (v != nullptr) ort->ReleaseValue(v);
    ort->ReleaseSession(session);
    ort->ReleaseSessionOptions(options);
  }
  ort->ReleaseMemoryInfo(cpu);
  ort->ReleaseEnv(env);
  return 0;
}
