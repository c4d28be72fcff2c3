// Any model's firmware, as src/stformer-firmware builds it: the model through the C API that
// stformer-c-api wrote (NAME.h, NAME.cpp: its constant image in flash, a static workspace), and
// STFORMER_FIRMWARE_CHECK, the header stformer-firmware wrote with the examples' inputs and the host's
// outputs for them (check_x, check_y; an integer model's quantized inputs and integer outputs
// check_x_q, check_y_q). For each example the board computes the output and compares it with the
// host's:
//   an integer model: NAME_predict_int8's integers, the host's exactly (and, on a core with an
//     FPU, NAME_predict's floats too, the host's exactly: one rounding each way);
//   a float model: NAME_predict's floats, each within 1e-4 of the largest |host output| (the
//     core's elementary functions are not the host's), the same argmax per output row.
// It prints each example's argmax (of its last output row), the instructions per inference
// (QEMU -icount shift=8), the model's flash as the C API reports it, and the stack's high-water
// mark (the image's static RAM is arm-none-eabi-size's: NAME_workspace_bytes counts the float
// entry's input too, which an image that calls only NAME_predict_int8 drops); exit status 0 when
// every example agrees and the stack held. No heap.
#include <cstdint>

#include "instructions.hpp"
#include STFORMER_FIRMWARE_CHECK

namespace {

using semihosting::write;

template <class T>
std::uint64_t argmax_of_last_row(const T* y) {
  const T* row = y + (CHECK_OUT_ROWS - 1) * CHECK_OUT_WIDTH;
  std::uint64_t best = 0;
  for (std::uint64_t k = 1; k < CHECK_OUT_WIDTH; ++k)
    if (row[k] > row[best]) best = k;
  return best;
}

#if CHECK_INT8
check_y_q_t y_q[CHECK_OUT_SIZE];
#endif
#if !CHECK_INT8 || defined(__ARM_FP)
float y[CHECK_OUT_SIZE];
#endif

// Example s through the C API: with its key mask, where the examples have them.
#if CHECK_KEYS
#define CHECK_KEYS_OF(s) (check_keys + (s) * CHECK_ROWS)
int predict(std::uint64_t s, float* out) { return CHECK_PREDICT_KEYS(check_x + s * CHECK_IN_SIZE, CHECK_KEYS_OF(s), out); }
#else
#define CHECK_KEYS_OF(s) nullptr
int predict(std::uint64_t s, float* out) { return CHECK_PREDICT(check_x + s * CHECK_IN_SIZE, out); }
#endif

}  // namespace

extern "C" int firmware_main() {
  instructions::Spans spans;
  std::uint64_t agree = 0;
  for (std::uint64_t s = 0; s < CHECK_EXAMPLES; ++s) {
    bool same = true;
    write("example "), write(s), write(": ");
#if CHECK_INT8
    const int status = spans.count([&] { return CHECK_PREDICT_INT8(check_x_q + s * CHECK_IN_SIZE, CHECK_KEYS_OF(s), y_q); });
    const check_y_q_t* host_q = check_y_q + s * CHECK_OUT_SIZE;
    for (std::uint64_t k = 0; k < CHECK_OUT_SIZE; ++k) same = same && y_q[k] == host_q[k];
    write("argmax "), write(argmax_of_last_row(y_q)), write(status != 0 ? ", status not OK" : same ? ", the host's integers exactly" : ", integers DIFFER from the host's");
    same = same && status == 0;
#if defined(__ARM_FP)
    const bool floats = predict(s, y) == 0 && [&] {
      const float* host = check_y + s * CHECK_OUT_SIZE;
      for (std::uint64_t k = 0; k < CHECK_OUT_SIZE; ++k)
        if (y[k] != host[k]) return false;
      return true;
    }();
    write(floats ? "; its float outputs the host's exactly" : "; its float outputs DIFFER from the host's");
    same = same && floats;
#endif
#else
    const int status = spans.count([&] { return predict(s, y); });
    const float* host = check_y + s * CHECK_OUT_SIZE;
    float largest = 0, worst = 0;
    for (std::uint64_t k = 0; k < CHECK_OUT_SIZE; ++k) {
      const float a = host[k] < 0 ? -host[k] : host[k], d = y[k] > host[k] ? y[k] - host[k] : host[k] - y[k];
      largest = a > largest ? a : largest, worst = d > worst ? d : worst;
    }
    for (std::uint64_t r = 0; r < CHECK_OUT_ROWS; ++r) {  // each row's argmax the host's
      std::uint64_t a = 0, b = 0;
      for (std::uint64_t k = 1; k < CHECK_OUT_WIDTH; ++k) {
        a = y[r * CHECK_OUT_WIDTH + k] > y[r * CHECK_OUT_WIDTH + a] ? k : a;
        b = host[r * CHECK_OUT_WIDTH + k] > host[r * CHECK_OUT_WIDTH + b] ? k : b;
      }
      same = same && a == b;
    }
    same = same && status == 0 && worst <= 1e-4f * largest;
    write("argmax "), write(argmax_of_last_row(y)), write(status != 0 ? ", status not OK" : same ? ", the host's" : ", DIFFERENT from the host's"),
        write(" (largest difference "), write(worst, 7), write(" of outputs up to "), write(largest, 4), write(")");
#endif
    write("\n");
    agree += same;
  }
  write("agree with the host: "), write(agree), write(" of "), write(std::uint64_t(CHECK_EXAMPLES)), write(" examples\n");
  spans.report("inference");
  write("model "), write(std::uint64_t(CHECK_PARAMETER_BYTES)), write(" B in flash\n");
  const bool stack_ok = semihosting::report_stack();
  return agree == CHECK_EXAMPLES && stack_ok ? 0 : 1;
}
