/* A C program using the int8 pointer model through its C API (qmax.h, from `stformer-c-api
   --type 'stformer::Quantized<max_value::PointerNet>'` on a `max_value quantize` checkpoint):
   for the sets of sets.h, the integer
   entry point must give the host build's int32 logits exactly (qexpected.h, from `max_value
   predict`: the quantized sets x_q and the logits), and the float one log-probabilities with
   the same arg-max. Exit 0 when all hold. */
#include <math.h>
#include <stddef.h>
#include <stdio.h>

#include "qexpected.h"
#include "qmax.h"
#include "sets.h"

enum { N = QMAX_ROWS, S = SETS_X_SIZE / QMAX_INPUT_SIZE };

int main(void) {
  int32_t logits[QMAX_ROWS];
  float logp[QMAX_OUTPUT_SIZE];
  int exact = 0, same_point = 0;
  if (S == 0 || QEXPECTED_X_Q_SIZE != S * QMAX_INPUT_SIZE || QEXPECTED_LOGITS_SIZE != S * N) {
    fprintf(stderr, "predict_int8: sets.h and qexpected.h hold different sets\n");
    return 1;
  }
  for (int s = 0; s < S; ++s) {
    if (qmax_predict_int8(qexpected_x_q + s * QMAX_INPUT_SIZE, NULL, logits) != QMAX_OK ||
        qmax_predict(sets_x + s * QMAX_INPUT_SIZE, logp) != QMAX_OK) {
      fprintf(stderr, "predict_int8: set %d refused\n", s);
      return 1;
    }
    int same = 1, best = 0, best_logp = 0;
    for (int i = 0; i < N; ++i) {
      same = same && logits[i] == qexpected_logits[s * N + i];
      if (logits[i] > logits[best]) best = i;
      if (logp[i] > logp[best_logp]) best_logp = i;
    }
    exact += same;
    same_point += best == best_logp;
  }
  printf("%d sets: the host's int32 logits exactly in %d, the same point from the float entry in %d; "
         "parameters %lu B, workspace %lu B\n",
         S, exact, same_point, (unsigned long)qmax_parameter_bytes, (unsigned long)qmax_workspace_bytes);
  return exact == S && same_point == S ? 0 : 1;
}
