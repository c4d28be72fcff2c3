/* llama2.c's model at stories260K's shape in int8 generating on the STM32F405 from C, through
   the generation entries alone of its C API (stories_c.h, stories_c.cpp: stformer-c-api --rows
   256 --causal --generate-only, from the checkpoint of the C++ generation firmware's run): the
   model's image in flash, its key/value cache of 256 positions and one step's plan in the
   firmware's static RAM. From token 1, greedily, the 255 tokens the cache holds, each the
   host's (stories_expected.h: the tokens generation_reference stepped); then one step more
   fills the cache and the next is refused (STORIES_C_FULL), as is a token id out of range. */
#include <stdint.h>
#include <string.h>

#include "board.h"
#include "stories_c.h"
#include "stories_expected.h"

enum { P = STORIES_C_ROWS, V = STORIES_C_VOCABULARY };
_Static_assert(STORIES_EXPECTED_TOKENS_SIZE == P, "stories_expected.h holds another run's tokens");

static int32_t generated[P - 1];
static float logits[V];

int firmware_run(void) {
  const int32_t first = stories_expected_tokens[0];
  const int status = stories_c_generate(&first, 1, P - 1, 0.0f, 0, generated);
  uint32_t same = 0;
  for (int t = 0; t < P - 1; ++t) same += generated[t] == stories_expected_tokens[t + 1];
  put("stories260K's shape in int8 through its C API: "), put_number(same), put(" of "), put_number(P - 1),
      put(" generated tokens the host's; the first");
  for (int t = 0; t < 12; ++t) put(" "), put_number((uint32_t)generated[t]);
  put("\n");
  /* the generation used P - 1 positions: one step more fills the cache, the next is refused */
  const int last = stories_c_step(generated[P - 2], logits) == STORIES_C_OK;
  const int full = stories_c_step(generated[P - 2], logits) == STORIES_C_FULL;
  const int bad = stories_c_reset() == STORIES_C_OK && stories_c_step(V, logits) == STORIES_C_BAD_INPUT;
  put(last && full ? "the cache's last position stepped, then a step refused (STORIES_C_FULL)\n" : "the full cache NOT refused as it should be\n");
  put(bad ? "a token id out of range: refused\n" : "a token id out of range: NOT refused\n");
  put("model in flash: "), put_number(stories_c_parameter_bytes), put(" B; static RAM of the calls (cache, a step's plan, sampler): "),
      put_number(stories_c_workspace_bytes), put(" B\n");
  return status == STORIES_C_OK && same == P - 1 && last && full && bad;
}
