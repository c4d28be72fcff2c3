/* The generated C APIs of a model that is not SPEC's (seq_classifier.hpp) and of its integer
   model, and of a causal language model (causal_lm.hpp), from C: the outputs bit for bit as the
   host's (expected.h), the masks, the integer model's integer entry, the language model's
   generation through its cache (its steps' logits, greedy and drawn tokens), float and in
   integers (its int8 cache: the steps' logits its integer pass's rows exactly), and the bad-input
   statuses; the same model in llama2.c's inference form (CausalLast: logits of the last row
   alone), whose steps and tokens are the language model's. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "causal_last.h"
#include "causal_lm.h"
#include "causal_gen.h"
#include "causal_lm_q.h"
#include "expected.h"
#include "seqcls.h"
#include "seqcls_q.h"

static int failures = 0;
static void check(int ok, const char* what) {
  if (!ok) {
    printf("FAIL: %s\n", what);
    ++failures;
  }
}

int main(void) {
  float out[SEQCLS_OUTPUT_SIZE];
  int32_t bad[SEQCLS_INPUT_SIZE];
  check(SEQCLS_OUTPUT_SIZE == 3 && SEQCLS_INPUT_SIZE == 8 && SEQCLS_VOCABULARY == 11, "the sizes");
  check(seqcls_predict(input_a, out) == SEQCLS_OK && memcmp(out, expected_a, sizeof out) == 0, "input a as the host");
  check(seqcls_predict(input_b, out) == SEQCLS_OK && memcmp(out, expected_b, sizeof out) == 0, "input b as the host");
  check(seqcls_predict_keys(input_a, keys, out) == SEQCLS_OK && memcmp(out, expected_a_keys, sizeof out) == 0, "input a, 5 rows, as the host");
  check(seqcls_predict(NULL, out) == SEQCLS_BAD_INPUT && seqcls_predict(input_a, NULL) == SEQCLS_BAD_INPUT, "null pointers refused");
  check(seqcls_predict_keys(input_a, NULL, out) == SEQCLS_BAD_INPUT, "a null mask refused");
  memcpy(bad, input_a, sizeof bad);
  bad[3] = SEQCLS_VOCABULARY;
  out[0] = 42.0f;
  check(seqcls_predict(bad, out) == SEQCLS_BAD_INPUT && out[0] == 42.0f, "a token id past the vocabulary refused, nothing written");
  bad[3] = -1;
  check(seqcls_predict(bad, out) == SEQCLS_BAD_INPUT, "a negative token id refused");
  check(SEQCLS_Q_OUTPUT_SIZE == 3 && SEQCLS_Q_INPUT_SIZE == 8 && SEQCLS_Q_VOCABULARY == 11, "the integer model's sizes");
  check(seqcls_q_predict(input_a, out) == SEQCLS_Q_OK && memcmp(out, expected_q_a, sizeof out) == 0, "input a in integers as the host");
  check(seqcls_q_predict_keys(input_a, keys, out) == SEQCLS_Q_OK && memcmp(out, expected_q_a_keys, sizeof out) == 0,
        "input a in integers, 5 rows, as the host");
  check(seqcls_q_predict(bad, out) == SEQCLS_Q_BAD_INPUT && seqcls_q_predict(NULL, out) == SEQCLS_Q_BAD_INPUT, "the integer model refuses them too");
  /* the integer steps alone: the same outputs before their dequantization (out_q · OUTPUT_SCALE) */
  int16_t out_q[SEQCLS_Q_OUTPUT_SIZE];
  int same = seqcls_q_predict_int8(input_a, keys, out_q) == SEQCLS_Q_OK;
  for (int i = 0; i < SEQCLS_Q_OUTPUT_SIZE; ++i) same = same && SEQCLS_Q_OUTPUT_SCALE * (float)out_q[i] == expected_q_a_keys[i];
  check(same, "input a, 5 rows, in integers only: out_q times the output's scale is the host's output");
  check(seqcls_q_predict_int8(bad, NULL, out_q) == SEQCLS_Q_BAD_INPUT && seqcls_q_predict_int8(NULL, NULL, out_q) == SEQCLS_Q_BAD_INPUT &&
            seqcls_q_predict_int8(input_a, NULL, NULL) == SEQCLS_Q_BAD_INPUT,
        "the integer entry refuses a bad token id and null pointers");
  /* the causal language model: the causal mask in every call, the keys on top of it */
  float logits[CAUSAL_LM_OUTPUT_SIZE];
  check(CAUSAL_LM_CAUSAL == 1 && SEQCLS_CAUSAL == 0 && SEQCLS_Q_CAUSAL == 0, "which APIs are causal");
  check(CAUSAL_LM_OUTPUT_SIZE == 88 && CAUSAL_LM_INPUT_SIZE == 8 && CAUSAL_LM_VOCABULARY == 11, "the language model's sizes");
  check(memcmp(expected_lm_a, unmasked_lm_a, sizeof logits) != 0 && memcmp(expected_lm_a, expected_lm_a_keys, sizeof logits) != 0,
        "the masks change the language model's logits");
  check(causal_lm_predict(input_a, logits) == CAUSAL_LM_OK && memcmp(logits, expected_lm_a, sizeof logits) == 0,
        "the language model on input a, causal, as the host");
  check(causal_lm_predict(input_b, logits) == CAUSAL_LM_OK && memcmp(logits, expected_lm_b, sizeof logits) == 0,
        "the language model on input b, causal, as the host");
  check(causal_lm_predict_keys(input_a, keys, logits) == CAUSAL_LM_OK && memcmp(logits, expected_lm_a_keys, sizeof logits) == 0,
        "the language model on input a, causal, 5 rows, as the host");
  check(CAUSAL_LM_Q_CAUSAL == 1 && memcmp(expected_lm_q_a, unmasked_lm_q_a, sizeof logits) != 0, "the integer language model is causal");
  check(causal_lm_q_predict(input_a, logits) == CAUSAL_LM_Q_OK && memcmp(logits, expected_lm_q_a, sizeof logits) == 0,
        "the integer language model on input a, causal, as the host");
  check(causal_lm_q_predict_keys(input_a, keys, logits) == CAUSAL_LM_Q_OK && memcmp(logits, expected_lm_q_a_keys, sizeof logits) == 0,
        "the integer language model on input a, causal, 5 rows, as the host");
  int16_t logits_q[CAUSAL_LM_Q_OUTPUT_SIZE];
  same = causal_lm_q_predict_int8(input_a, NULL, logits_q) == CAUSAL_LM_Q_OK;
  for (int i = 0; i < CAUSAL_LM_Q_OUTPUT_SIZE; ++i) same = same && CAUSAL_LM_Q_OUTPUT_SCALE * (float)logits_q[i] == expected_lm_q_a[i];
  check(same, "the integer language model on input a in integers only, causal: out_q times the output's scale is the host's output");
  /* generation through the cache of CAUSAL_LM_ROWS positions: the host's logits and tokens */
  float next[CAUSAL_LM_VOCABULARY];
  int32_t tokens[5];
  check(causal_lm_reset() == CAUSAL_LM_OK, "reset");
  same = 1;
  for (int t = 0; t < CAUSAL_LM_ROWS; ++t)
    same = same && causal_lm_step(input_a[t], next) == CAUSAL_LM_OK && memcmp(next, expected_steps_a + t * CAUSAL_LM_VOCABULARY, sizeof next) == 0;
  check(same, "input a stepped token by token through the cache: the host's logits at every step");
  check(causal_lm_step(input_a[0], next) == CAUSAL_LM_FULL, "a step past the cache refused");
  check(causal_lm_reset() == CAUSAL_LM_OK && causal_lm_step(CAUSAL_LM_VOCABULARY, next) == CAUSAL_LM_BAD_INPUT &&
            causal_lm_step(1, NULL) == CAUSAL_LM_BAD_INPUT,
        "a token id past the vocabulary, a null pointer refused");
  check(causal_lm_generate(input_a, 3, 5, 0.0f, 0, tokens) == CAUSAL_LM_OK && memcmp(tokens, expected_greedy, sizeof tokens) == 0,
        "5 tokens after 3, greedy, as the host");
  check(causal_lm_generate(input_a, 3, 5, 0.8f, 42, tokens) == CAUSAL_LM_OK && memcmp(tokens, expected_drawn, sizeof tokens) == 0,
        "5 tokens after 3 drawn at temperature 0.8, seed 42, as the host");
  check(causal_lm_generate(input_a, 3, 7, 0.0f, 0, tokens) == CAUSAL_LM_FULL && causal_lm_generate(input_a, 9, 0, 0.0f, 0, tokens) == CAUSAL_LM_FULL,
        "more positions than the cache holds refused");
  /* the integer model through its int8 cache: each step's logits the integer pass's row bit for bit */
  check(causal_lm_q_reset() == CAUSAL_LM_Q_OK, "the integer model: reset");
  same = 1;
  for (int t = 0; t < CAUSAL_LM_Q_ROWS; ++t)
    same = same && causal_lm_q_step(input_a[t], next) == CAUSAL_LM_Q_OK && memcmp(next, expected_lm_q_a + t * CAUSAL_LM_Q_VOCABULARY, sizeof next) == 0;
  check(same && causal_lm_q_step(input_a[0], next) == CAUSAL_LM_Q_FULL,
        "the integer model stepped token by token through its int8 cache: its causal pass's rows bit for bit, then full");
  check(causal_lm_q_generate(input_a, 3, 5, 0.0f, 0, tokens) == CAUSAL_LM_Q_OK && memcmp(tokens, expected_q_greedy, sizeof tokens) == 0 &&
            causal_lm_q_generate(input_a, 3, 5, 0.8f, 42, tokens) == CAUSAL_LM_Q_OK && memcmp(tokens, expected_q_drawn, sizeof tokens) == 0,
        "the integer model: 5 tokens after 3, greedy and drawn, as the host");
  /* its generation entries alone (--generate-only): the same steps and tokens, in less RAM */
  same = causal_gen_reset() == CAUSAL_GEN_OK;
  for (int t = 0; t < CAUSAL_GEN_ROWS; ++t)
    same = same && causal_gen_step(input_a[t], next) == CAUSAL_GEN_OK && memcmp(next, expected_lm_q_a + t * CAUSAL_GEN_VOCABULARY, sizeof next) == 0;
  check(same && causal_gen_step(input_a[0], next) == CAUSAL_GEN_FULL &&
            causal_gen_generate(input_a, 3, 5, 0.0f, 0, tokens) == CAUSAL_GEN_OK && memcmp(tokens, expected_q_greedy, sizeof tokens) == 0,
        "the integer model's generation entries alone: the same steps and tokens");
  check(causal_gen_workspace_bytes < causal_lm_q_workspace_bytes, "the generation entries alone: less static RAM than with NAME_predict");
  printf("causal_gen (--generate-only): %u B of workspace, against %u B with NAME_predict\n", (unsigned)causal_gen_workspace_bytes,
         (unsigned)causal_lm_q_workspace_bytes);
  check(causal_lm_generate(input_a, 0, 5, 0.0f, 0, tokens) == CAUSAL_LM_BAD_INPUT && causal_lm_generate(input_a, 3, 5, -1.0f, 0, tokens) == CAUSAL_LM_BAD_INPUT &&
            causal_lm_generate(bad, 8, 1, 0.0f, 0, tokens) == CAUSAL_LM_BAD_INPUT,
        "an empty prompt, a negative temperature, a token id out of range refused");
  /* CausalLast: [1, 1, V], the last row of the language model's pass (a head over one row: its
     sums in another order, within 1e-5); its steps the language model's bit for bit */
  float last[CAUSAL_LAST_OUTPUT_SIZE], largest = 0.0f, error = 0.0f;
  const float* last_row = expected_lm_a + (CAUSAL_LM_ROWS - 1) * CAUSAL_LM_VOCABULARY;
  check(CAUSAL_LAST_OUTPUT_SIZE == CAUSAL_LM_VOCABULARY && causal_last_predict(input_a, last) == CAUSAL_LAST_OK, "CausalLast: one row of logits");
  for (int i = 0; i < CAUSAL_LAST_OUTPUT_SIZE; ++i) largest = fmaxf(largest, fabsf(last_row[i])), error = fmaxf(error, fabsf(last[i] - last_row[i]));
  check(error <= 1e-5f * largest, "CausalLast on input a: the last row of the language model's output");
  same = causal_last_reset() == CAUSAL_LAST_OK;
  for (int t = 0; t < CAUSAL_LAST_ROWS; ++t)
    same = same && causal_last_step(input_a[t], next) == CAUSAL_LAST_OK && memcmp(next, expected_steps_a + t * CAUSAL_LM_VOCABULARY, sizeof next) == 0;
  check(same && causal_last_step(input_a[0], next) == CAUSAL_LAST_FULL, "CausalLast stepped through its cache: the language model's logits, then full");
  check(causal_last_generate(input_a, 3, 5, 0.0f, 0, tokens) == CAUSAL_LAST_OK && memcmp(tokens, expected_greedy, sizeof tokens) == 0 &&
            causal_last_generate(input_a, 3, 5, 0.8f, 42, tokens) == CAUSAL_LAST_OK && memcmp(tokens, expected_drawn, sizeof tokens) == 0,
        "CausalLast generates the language model's tokens, greedy and drawn");
  printf("causal_lm: %u B of parameters, %u B of workspace (with the cache of %d positions)\n", (unsigned)causal_lm_parameter_bytes,
         (unsigned)causal_lm_workspace_bytes, CAUSAL_LM_ROWS);
  printf("seqcls_q (integers): %u B of parameters, %u B of workspace\n", (unsigned)seqcls_q_parameter_bytes, (unsigned)seqcls_q_workspace_bytes);
  printf("seqcls: %u B of parameters, %u B of workspace; %s\n", (unsigned)seqcls_parameter_bytes, (unsigned)seqcls_workspace_bytes,
         failures ? "FAILED" : "outputs as the host's, bad inputs refused");
  return failures != 0;
}
