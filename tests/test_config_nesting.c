/* JSON nested deeper than cJSON reads (CJSON_NESTING_LIMIT, 1000 levels) is valid JSON: the message
 * says how deep, not "malformed or truncated"; 999 levels inside the config object parse, and a real
 * syntax error after deep (but allowed) nesting is still called malformed. */
#include "model/config.h"
#include "pz_test.h"
#include <stdlib.h>
#include <string.h>

#define LLAMA_BASE                                                                                                     \
  "\"model_type\": \"llama\", \"hidden_size\": 256, \"num_hidden_layers\": 2, \"num_attention_heads\": 8, "            \
  "\"intermediate_size\": 512, \"vocab_size\": 1024, \"max_position_embeddings\": 8192"

/* {"extra": [[...]]  (levels of [ ]) , LLAMA_BASE} with `mid` between the innermost brackets. */
static char *nested(int levels, const char *mid) {
  size_t cap = 2 * (size_t)levels + 1024, o = 0;
  char *j = malloc(cap);
  if (!j) return NULL;
  o += (size_t)snprintf(j, cap, "{\"extra\": ");
  for (int i = 0; i < levels; i++) j[o++] = '[';
  o += (size_t)snprintf(j + o, cap - o, "%s", mid);
  for (int i = 0; i < levels; i++) j[o++] = ']';
  snprintf(j + o, cap - o, ", " LLAMA_BASE "}");
  return j;
}

int main(void) {
  pz_model_config c;
  char *j = nested(999, "\"[{\""); /* brackets inside a string do not count */
  CHECK_OK(pz_config_parse(j, strlen(j), "deep.json", &c));
  free(j);
  j = nested(100000, "");
  CHECK_ST(pz_config_parse(j, strlen(j), "deep.json", &c), PZ_ERR_CONFIG);
  CHECK(!strcmp(pz_last_error(), "config deep.json: arrays and objects nested deeper than 1000 levels at byte 1009 "
                                 "(line 1), more than prezero reads; a config.json nests a few levels"));
  free(j);
  j = nested(999, "1 2");
  CHECK_ST(pz_config_parse(j, strlen(j), "deep.json", &c), PZ_ERR_CONFIG);
  CHECK(strstr(pz_last_error(), "config deep.json: malformed or truncated JSON at byte ") == pz_last_error());
  free(j);
  TEST_DONE();
}
