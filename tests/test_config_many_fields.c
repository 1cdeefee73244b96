/* A config.json of very many fields (a 64 MiB file holds millions): the duplicate-key check is not
 * quadratic (200000 fields, which a pairwise scan takes minutes over, parse well inside a second
 * on the CPU machine; the bound here is loose), and the message still names the first field, in
 * file order, that appears again. */
#include "model/config.h"
#include "pz_test.h"
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define LLAMA_BASE                                                                                                     \
  "\"model_type\": \"llama\", \"hidden_size\": 256, \"num_hidden_layers\": 2, \"num_attention_heads\": 8, "            \
  "\"intermediate_size\": 512, \"vocab_size\": 1024, \"max_position_embeddings\": 8192"

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* {LLAMA_BASE, "extra_000000": 0, ... n fields} then tail (e.g. a repeated key) and "}". */
static char *many(int n, const char *tail) {
  size_t cap = (size_t)n * 24 + 4096, o = 0;
  char *j = malloc(cap);
  if (!j) return NULL;
  o += (size_t)snprintf(j + o, cap - o, "{" LLAMA_BASE);
  for (int i = 0; i < n; i++) o += (size_t)snprintf(j + o, cap - o, ", \"extra_%06d\": %d", i, i);
  snprintf(j + o, cap - o, "%s}", tail);
  return j;
}

int main(void) {
  pz_model_config c;
  char *j = many(200000, "");
  CHECK(j != NULL);
  if (!j) TEST_DONE();
  double t0 = now_s();
  CHECK_OK(pz_config_parse(j, strlen(j), "many.json", &c));
  double dt = now_s() - t0;
  CHECK(dt < 10.0 * pz_test_timeout_scale());
  printf("200000 fields parsed in %.3f s\n", dt);
  free(j);
  /* Two keys repeated: the message names the one whose first occurrence comes first. */
  j = many(50000, ", \"extra_049999\": 1, \"extra_000007\": 2");
  CHECK_ST(pz_config_parse(j, strlen(j), "many.json", &c), PZ_ERR_CONFIG);
  CHECK(!strcmp(pz_last_error(), "config many.json: field \"extra_000007\" appears twice"));
  free(j);
  /* A repeated key at the start and at the end of the object. */
  static const char two[] = "{\"hidden_size\": 1, " LLAMA_BASE "}";
  CHECK_ST(pz_config_parse(two, strlen(two), "two.json", &c), PZ_ERR_CONFIG);
  CHECK(!strcmp(pz_last_error(), "config two.json: field \"hidden_size\" appears twice"));
  /* Three of one name, nested in rope_scaling. */
  static const char rs[] = "{" LLAMA_BASE ", \"rope_scaling\": {\"rope_type\": \"default\", \"factor\": 1, "
                           "\"rope_type\": \"default\", \"rope_type\": \"llama3\"}}";
  CHECK_ST(pz_config_parse(rs, strlen(rs), "rs.json", &c), PZ_ERR_CONFIG);
  CHECK(!strcmp(pz_last_error(), "config rs.json: field \"rope_scaling.rope_type\" appears twice"));
  TEST_DONE();
}
