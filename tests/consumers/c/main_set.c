/* A C program using the set model, float32 and int8, through its C API (set.h and qset.h, from
   stformer-c-api): for the sets of sets.h each must predict the point that
   `max_value predict` gave on the host (sety.h: y; qsety.h: y and the int8 model's y_q, exactly).
   Exit 0 when all hold. */
#include <math.h>
#include <stddef.h>
#include <stdio.h>

#include "qset.h"
#include "qsety.h"
#include "set.h"
#include "sets.h"
#include "sety.h"

enum { S = SETS_X_SIZE / SET_INPUT_SIZE, Out = SET_OUTPUT_SIZE };

int main(void) {
  float y[SET_OUTPUT_SIZE], qy[QSET_OUTPUT_SIZE];
  int16_t y_q[QSET_OUTPUT_SIZE];
  int same = 0, same_q = 0;
  double worst = 0;
  if (S == 0 || SETY_Y_SIZE != S * Out || QSETY_Y_Q_SIZE != S * Out || QSETY_Y_SIZE != S * Out) {
    fprintf(stderr, "predict_set: sets.h, sety.h and qsety.h hold different sets\n");
    return 1;
  }
  for (int s = 0; s < S; ++s) {
    if (set_predict(sets_x + s * SET_INPUT_SIZE, y) != SET_OK || qset_predict(sets_x + s * QSET_INPUT_SIZE, qy) != QSET_OK ||
        qset_predict_int8(qsety_x_q + s * QSET_INPUT_SIZE, NULL, y_q) != QSET_OK) {
      fprintf(stderr, "predict_set: set %d refused\n", s);
      return 1;
    }
    int ok = 1, ok_q = 1;
    for (int i = 0; i < Out; ++i) {
      const double d = fabs(y[i] - sety_y[s * Out + i]);
      worst = d > worst ? d : worst;
      ok = ok && d <= 1e-5 + 1e-5 * fabs(sety_y[s * Out + i]);
      ok_q = ok_q && y_q[i] == qsety_y_q[s * Out + i] && qy[i] == qsety_y[s * Out + i];
    }
    same += ok, same_q += ok_q;
  }
  printf("%d sets: float32 the host's y in %d (largest difference %.3g), int8 the host's y_q and y exactly in %d; "
         "parameters %lu B and %lu B\n",
         S, same, worst, same_q, (unsigned long)set_parameter_bytes, (unsigned long)qset_parameter_bytes);
  return same == S && same_q == S ? 0 : 1;
}
