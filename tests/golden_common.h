/* The golden files of tests/data/golden (written by tools/make_golden.py): prompts, expected
 * greedy tokens and last-step logits, loaded for test_golden (CPU) and test_golden_cuda, and the
 * CPU engine decode that the CPU golden tests compare with them (prezero: -1 = PREZERO_ENABLE, 0, 1). */
#ifndef PZ_GOLDEN_COMMON_H
#define PZ_GOLDEN_COMMON_H
#include <cjson/cJSON.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "prezero.h"
#include "pz_test.h"

#define MAXP 8
#define MAXS 64
#define MAXV 4096

typedef struct golden {
  char dir[1024];
  int n, steps, len[MAXP];
  int32_t prompt[MAXP][MAXS], tokens[MAXP][MAXS];
  int64_t vocab;
  double atol;
  float logits[MAXP * MAXV];
} golden;


static int int_array(const cJSON *a, int32_t *out, int cap) {
  int n = 0;
  for (const cJSON *x = a ? a->child : NULL; x && n < cap; x = x->next) out[n++] = (int32_t)x->valuedouble;
  return n;
}

/* expected.json + logits.f32 of one golden folder (format: tests/data/golden/README.md);
 * 0 (with a message) when unreadable. */
static int load_golden(const char *dir, golden *g) {
  memset(g, 0, sizeof *g);
  snprintf(g->dir, sizeof g->dir, "%s", dir);
  char p[1200];
  snprintf(p, sizeof p, "%s/expected.json", dir);
  char *txt = pz_test_slurp(p, NULL);
  cJSON *root = txt ? cJSON_Parse(txt) : NULL;
  free(txt);
  if (!root) { fprintf(stderr, "cannot read %s\n", p); return 0; }
  const cJSON *pr = cJSON_GetObjectItem(root, "prompts"), *tk = cJSON_GetObjectItem(root, "tokens");
  g->steps = cJSON_GetObjectItem(root, "steps")->valueint;
  g->vocab = (int64_t)cJSON_GetObjectItem(root, "vocab_size")->valuedouble;
  g->atol = cJSON_GetObjectItem(root, "logits_atol")->valuedouble;
  for (const cJSON *x = pr->child; x && g->n < MAXP; x = x->next, g->n++) g->len[g->n] = int_array(x, g->prompt[g->n], MAXS);
  int i = 0;
  for (const cJSON *x = tk->child; x && i < MAXP; x = x->next, i++) CHECK(int_array(x, g->tokens[i], MAXS) == g->steps);
  cJSON_Delete(root);
  size_t len = 0;
  snprintf(p, sizeof p, "%s/logits.f32", dir);
  unsigned char *raw = (unsigned char *)pz_test_slurp(p, &len);
  if (!raw || g->vocab > MAXV || len != (size_t)(g->n * g->vocab * 4)) {
    fprintf(stderr, "bad %s\n", p);
    free(raw);
    return 0;
  }
  for (int64_t k = 0; k < g->n * g->vocab; k++) {
    uint32_t u = raw[4 * k] | (uint32_t)raw[4 * k + 1] << 8 | (uint32_t)raw[4 * k + 2] << 16 | (uint32_t)raw[4 * k + 3] << 24;
    memcpy(&g->logits[k], &u, 4);
  }
  free(raw);
  return 1;
}
/* Decodes prompts [p0, p0+n) of g with the engine on the CPU (TP tp, prezero on or off) side by
 * side, each from position 0, one token per step, then greedy: tokens[i][k] = the k-th generated
 * token of prompt p0+i, logits[i*vocab ..] = the logits of the step that made its last token. */
static inline pz_status golden_run_cpu(const char *model_dir, const golden *g, int p0, int n, int tp, int prezero, int32_t tokens[][MAXS],
                     float *logits) {
  int max_len = 0;
  for (int i = 0; i < n; i++) max_len = g->len[p0 + i] > max_len ? g->len[p0 + i] : max_len;
  pz_engine_config ec = PZ_ENGINE_CONFIG_INIT;
  ec.model_dir = model_dir;
  ec.tp = tp;
  ec.max_batch = n;
  ec.context = 0;
  ec.max_steps = max_len - 1 + g->steps;
  ec.prezero = prezero;
  ec.device = PZ_DEVICE_CPU;
  pz_engine *e = NULL;
  pz_status st = pz_engine_create(&ec, &e);
  if (st != PZ_OK) return st;
  int32_t in[MAXP], nx[MAXP];
  static float lg[MAXP * MAXV];
  for (int i = 0; i < n; i++) in[i] = g->prompt[p0 + i][0];
  for (int t = 0; t < max_len - 1 + g->steps && st == PZ_OK; t++) {
    st = pz_engine_step(e, n, in, nx);
    int got = 0;
    for (int i = 0; i < n && st == PZ_OK; i++) {
      int k = t + 1 - g->len[p0 + i];
      if (k < 0) { in[i] = g->prompt[p0 + i][t + 1]; continue; }
      if (k < g->steps) tokens[i][k] = nx[i];
      if (k == g->steps - 1) {
        if (!got) st = pz_engine_logits(e, n, lg);
        got = 1;
        memcpy(logits + i * g->vocab, lg + i * g->vocab, sizeof(float) * (size_t)g->vocab);
      }
      in[i] = nx[i];
    }
  }
  pz_engine_destroy(e);
  return st;
}

static inline double golden_max_diff(const float *a, const float *b, int64_t n) {
  double m = 0;
  for (int64_t i = 0; i < n; i++) m = fmax(m, fabs((double)a[i] - (double)b[i]));
  return m;
}

#endif
