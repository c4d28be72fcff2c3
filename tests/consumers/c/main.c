/* A C program using max_value's pointer model through its C API (max_value.h): it predicts
   the sets of sets.h, checks every log-probability against the host build's (expected.h, from
   `max_value predict`), and checks that a NaN or an infinity in a set is refused with nothing
   written. Exit 0 when all hold. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "expected.h"
#include "max_value.h"
#include "sets.h"

enum { N = MAX_VALUE_ROWS, S = SETS_X_SIZE / MAX_VALUE_INPUT_SIZE };

int main(void) {
  float in[MAX_VALUE_INPUT_SIZE], out[MAX_VALUE_OUTPUT_SIZE];
  int off = 0;
  double worst = 0;
  if (S == 0 || SETS_X_SIZE != S * MAX_VALUE_INPUT_SIZE || EXPECTED_LOG_PROBS_SIZE != S * N) {
    fprintf(stderr, "predict: sets.h x [S, 50, 2] and expected.h log_probs [S, 50] differ\n");
    return 1;
  }
  for (int s = 0; s < S; ++s) {
    const int status = max_value_predict(sets_x + s * MAX_VALUE_INPUT_SIZE, out);
    if (status != MAX_VALUE_OK) {
      fprintf(stderr, "predict: set %d: status %d\n", s, status);
      return 1;
    }
    for (int i = 0; i < N; ++i) {
      const double want = expected_log_probs[s * N + i], d = fabs(out[i] - want);
      worst = d > worst ? d : worst;
      off += !(d <= 1e-5 + 1e-5 * fabs(want));
    }
  }
  /* a NaN, then an infinity, in a copy of the first set: refused, out left as it was */
  int refused = 0;
  for (int k = 0; k < 2; ++k) {
    memcpy(in, sets_x, sizeof in);
    in[37] = k == 0 ? NAN : -INFINITY;
    for (int i = 0; i < N; ++i) out[i] = 42.0f;
    const int status = max_value_predict(in, out);
    int untouched = 1;
    for (int i = 0; i < N; ++i) untouched = untouched && out[i] == 42.0f;
    refused += status == MAX_VALUE_BAD_INPUT && untouched;
  }
  printf("%d sets, %d log-probabilities off, largest difference %.3g; %d of 2 bad inputs refused; "
         "parameters %lu B, workspace %lu B\n",
         S, off, worst, refused, (unsigned long)max_value_parameter_bytes, (unsigned long)max_value_workspace_bytes);
  return off == 0 && refused == 2 ? 0 : 1;
}
