/* The max-value pointer model in firmware written in C, for QEMU's netduinoplus2 (STM32F405,
   Cortex-M4F), run under qemu-system-arm -semihosting. The model comes through its C API:
   max_value.h and max_value.cpp, written by `stformer-c-api --rows 50` (the model's image in
   flash, the forward pass's static workspace, max_value_predict). The C++
   source is compiled with the C++ compiler; this file and the link use the C compiler, with
   no C++ runtime. The test sets and the host build's log-probabilities are C arrays (sets.h,
   expected.h: checkpoint_header --c, every tensor as a C array). Then a model that is not SPEC's, a sequence classifier
   (tests/seq_classifier.hpp) and its integer model, through the C APIs stformer-c-api wrote
   (seqcls.h, seqcls_q.h; the host's outputs in seqcls/expected.h). Exit status 0 when every
   set's arg-max is the host's and every log-probability is within 1e-4 + 1e-4·|host| of it, a
   NaN is refused, the classifier's outputs are as close to the host's, its integer model's the
   host's bit for bit, and a token id out of range is refused. Last, a classifier PyTorch trained
   from its own layers (nn.TransformerEncoder, post-norm GELU) and python/stformer_export.py
   exported, through its float C API (torchcls.h; the host's logits for 8 test sequences in
   torchcls_expected.h): each sequence's class the host's, its logits as close. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "board.h"
#include "expected.h"
#include "max_value.h"
#include "seqcls.h"
#include "seqcls/expected.h"
#include "seqcls_q.h"
#include "sets.h"
#include "torchcls.h"
#include "torchcls_expected.h"

/* ---- the checks ---- */

enum { N = MAX_VALUE_ROWS, S = SETS_X_SIZE / MAX_VALUE_INPUT_SIZE };

static int argmax(const float* v) {
  int best = 0;
  for (int i = 1; i < N; ++i)
    if (v[i] > v[best]) best = i;
  return best;
}

static float in[MAX_VALUE_INPUT_SIZE], out[MAX_VALUE_OUTPUT_SIZE];

static int run(void) {
  int agree = 0;
  for (int s = 0; s < S; ++s) {
    const float* host = expected_log_probs + s * N;
    const int status = max_value_predict(sets_x + s * MAX_VALUE_INPUT_SIZE, out);
    int same = status == MAX_VALUE_OK && argmax(out) == argmax(host);
    for (int i = 0; i < N; ++i) same = same && fabsf(out[i] - host[i]) <= 1e-4f + 1e-4f * fabsf(host[i]);
    agree += same;
    put("set "), put_number((uint32_t)s), put(": point "), put_number((uint32_t)argmax(out)), put(same ? " (host: the same)\n" : " (host: DIFFERENT)\n");
  }
  memcpy(in, sets_x, sizeof in);
  in[37] = NAN;
  const int refused = max_value_predict(in, out) == MAX_VALUE_BAD_INPUT;
  put("agree with the host build: "), put_number((uint32_t)agree), put(" of "), put_number(S), put(" sets\n");
  put(refused ? "a NaN in a set: refused (MAX_VALUE_BAD_INPUT)\n" : "a NaN in a set: NOT refused\n");
  put("model in flash: "), put_number(max_value_parameter_bytes), put(" B; static RAM of the calls: "), put_number(max_value_workspace_bytes),
      put(" B\n");
  return agree == S && refused;
}

/* out within 1e-4 + 1e-4·|host| of host, n values */
static int close_to(const float* out, const float* host, int n) {
  int same = 1;
  for (int i = 0; i < n; ++i) same = same && fabsf(out[i] - host[i]) <= 1e-4f + 1e-4f * fabsf(host[i]);
  return same;
}

static int run_seqcls(void) {
  float y[SEQCLS_OUTPUT_SIZE];
  int32_t bad[SEQCLS_INPUT_SIZE];
  int ok = seqcls_predict(input_a, y) == SEQCLS_OK && close_to(y, expected_a, SEQCLS_OUTPUT_SIZE);
  ok = ok && seqcls_predict(input_b, y) == SEQCLS_OK && close_to(y, expected_b, SEQCLS_OUTPUT_SIZE);
  ok = ok && seqcls_predict_keys(input_a, keys, y) == SEQCLS_OK && close_to(y, expected_a_keys, SEQCLS_OUTPUT_SIZE);
  put(ok ? "sequence classifier (float): as the host\n" : "sequence classifier (float): DIFFERENT from the host\n");
  int qok = seqcls_q_predict(input_a, y) == SEQCLS_Q_OK && memcmp(y, expected_q_a, sizeof y) == 0;
  qok = qok && seqcls_q_predict_keys(input_a, keys, y) == SEQCLS_Q_OK && memcmp(y, expected_q_a_keys, sizeof y) == 0;
  put(qok ? "sequence classifier (integers): the host's bits\n" : "sequence classifier (integers): NOT the host's bits\n");
  memcpy(bad, input_a, sizeof bad);
  bad[2] = SEQCLS_VOCABULARY;
  const int refused = seqcls_predict(bad, y) == SEQCLS_BAD_INPUT && seqcls_q_predict(bad, y) == SEQCLS_Q_BAD_INPUT;
  put(refused ? "a token id out of range: refused\n" : "a token id out of range: NOT refused\n");
  put("classifier in flash: "), put_number(seqcls_parameter_bytes), put(" B float, "), put_number(seqcls_q_parameter_bytes),
      put(" B integers; static RAM: "), put_number(seqcls_workspace_bytes), put(" B, "), put_number(seqcls_q_workspace_bytes), put(" B\n");
  return ok && qok && refused;
}

static int run_torchcls(void) {
  enum { T = TORCHCLS_EXPECTED_X_SIZE / TORCHCLS_INPUT_SIZE, C = TORCHCLS_OUTPUT_SIZE };
  float y[C];
  int agree = 0;
  for (int t = 0; t < T; ++t) {
    const float* host = torchcls_expected_logits + t * C;
    int best = 0, host_best = 0;
    const int status = torchcls_predict(torchcls_expected_x + t * TORCHCLS_INPUT_SIZE, y);
    for (int c = 1; c < C; ++c) best = y[c] > y[best] ? c : best, host_best = host[c] > host[host_best] ? c : host_best;
    const int same = status == TORCHCLS_OK && best == host_best && close_to(y, host, C);
    agree += same;
    put("PyTorch's classifier, sequence "), put_number((uint32_t)t), put(": class "), put_number((uint32_t)best),
        put(same ? " (host: the same)\n" : " (host: DIFFERENT)\n");
  }
  put("PyTorch's classifier agrees with the host build: "), put_number((uint32_t)agree), put(" of "), put_number(T), put(" sequences\n");
  put("PyTorch's classifier in flash: "), put_number(torchcls_parameter_bytes), put(" B; static RAM of the calls: "), put_number(torchcls_workspace_bytes),
      put(" B\n");
  return agree == T;
}

int firmware_run(void) {
  const int pointer = run();
  const int seqcls = run_seqcls();
  return run_torchcls() && seqcls && pointer;
}
