/* The table-free GEMM heuristic (pz_gemm_heuristic, Hopper) against the committed H200 measurement,
 * bench/results/gemm_h200.json (`prezero bench gemm`: every prezero consumer of Kimi-K2,
 * DeepSeek-V3 and DeepSeek-V2-Lite at TP 1/2/4/8, m = 1..256, each flavour's best config and its
 * time, the heuristic's own pick and its time, all in one run). Host-only: no GPU is needed.
 *
 * For every row the heuristic's pick for a prezero consumer (zero_init = false) is looked up among
 * the configs that run timed (a flavour's best config, or the pick the heuristic of that run made)
 * and must be within 1.10 x the row's best ours (issue: within 10 % of the tuned choice). A pick
 * that run did not time fails too (measure it first: `bench gemm` times the heuristic's pick).
 * Known misses are listed in KNOWN below, each with its reason; a known row that starts to pass
 * is reported, so the list shrinks. Rows of the bf16 MLP GEMMs in the same file (since round 131) are
 * counted, not checked. PZ_GEMM_BENCH_JSON=path checks another run's file. */
#define _POSIX_C_SOURCE 200809L
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "backend/cuda/gemm.h"
#include "pz_test.h"

/* Rows over 1.10 in the 2026-12-03 13:30Z run (bench/results/gemm_h200.json, round 98: `bench gemm --no-tune` on an
 * empty cache, so "the best" is the best of the built-in H200 table's picks and the heuristic's, timed in one call;
 * programmatic dependent launch on; the heuristic with its stream-K rule for full-K grids past one wave; 2 k-blocks
 * per wgmma stage on splits of 2 or 4 k-blocks):
 * - Kimi-K2 TP 8 o_proj m 1 / 2 (7168 x 1024): atomic s2 wt 1 against wt 2, 1.15 / 1.11 (round 91's run, now
 *   gemm_h200_v13.json: 1.11 / 1.12; a 0.7-1 us difference at 6.4 us; the round-84 run had m 1 over and m 2 within).
 * Round 84's run (now gemm_h200_v12.json), whose best came from a table tuned in the same call, had 16 rows over
 * 1.10 before the stream-K rule (DeepSeek-V3 q_b m 128 / 256, o_proj m 16 / 64, V2-Lite q_proj m <= 4 and kv_a
 * m 256, Kimi-K2 router m 128 at TP 2-8, TP 8 q_b m 128); against the built-in table's picks those are within
 * 1.10 now (V3 q_b with the stream-K rule at 1.00-1.05 for m 16-256). */
static const int KNOWN[][3] = {{1, 7168, 1024}, {2, 7168, 1024}};

static double num(const cJSON *o, const char *k) {
  const cJSON *x = cJSON_GetObjectItem(o, k);
  return cJSON_IsNumber(x) ? x->valuedouble : -1;
}

static bool same_cfg(const cJSON *o, const char *flavour, const pz_gemm_config *c) {
  const double bn = num(o, "bn"); /* absent: 0, one tile of all m tokens */
  /* a flavour column's warps: on the wgmma kernel, wt 1 with warps 9 is the token split, another
   * kernel than the heuristic's plain one (the heuristic object carries no warps: its own pick) */
  const double warps = num(o, "warps");
  const bool split_o = warps == 9 && (int)num(o, "wt") == 1, split_c = c->warps == 9 && c->wt == 1;
  return o && !strcmp(flavour, pz_gemm_flavour_name(c->flavour)) && (int)num(o, "splits") == c->splits &&
         (int)num(o, "wt") == c->wt && (int)num(o, "wn") == c->wn && (bn < 0 ? 0 : (int)bn) == c->bn &&
         (warps < 0 || c->wn != 3 || split_o == split_c) && (warps < 0 || c->wn == 3 || (int)warps == c->warps);
}

int main(void) {
  char path[700];
  const char *env = getenv("PZ_GEMM_BENCH_JSON");
  if (env) snprintf(path, sizeof path, "%s", env);
  else PZ_TEST_PATH(path, "../../bench/results/gemm_h200.json");
  char *txt = pz_test_slurp(path, NULL);
  cJSON *root = txt ? cJSON_Parse(txt) : NULL;
  free(txt);
  if (!root) {
    fprintf(stderr, "cannot read the bench file %s\n", path);
    return 1;
  }
  const int sms = (int)num(root, "sm_count");
  CHECK(sms == 132);
  int rows = 0, within = 0, known = 0, other = 0, other_over = 0;
  double worst = 0;
  for (const cJSON *r = cJSON_GetObjectItem(root, "rows")->child; r; r = r->next) {
    const int m = (int)num(r, "m"), n = (int)num(r, "n"), k = (int)num(r, "k");
    const double best = num(r, "best_ours_us");
    if (n % 64 || k % 64 || best <= 0) continue;
    /* The consumers only; the bf16 MLP GEMMs (sh_gu, sh_down, mlp_gu, mlp_down) that the bench also
     * times are counted apart: the built-in table covers them on the H200, the heuristic elsewhere. */
    const cJSON *gj = cJSON_GetObjectItem(r, "gemm");
    static const char *const consumers[] = {"qkv_a", "q_b", "o_proj", "gate", "q_proj", "kv_a"};
    bool consumer = false;
    for (size_t i = 0; i < sizeof consumers / sizeof consumers[0]; i++)
      consumer |= cJSON_IsString(gj) && !strcmp(gj->valuestring, consumers[i]);
    if (!consumer) {
      const cJSON *h = cJSON_GetObjectItem(r, "heuristic");
      other++;
      other_over += num(h, "over_best") > 1.10;
      continue;
    }
    rows++;
    pz_gemm_config c = pz_gemm_heuristic(sms, m, n, k, false, true);
    double us = -1;
    const cJSON *fl = cJSON_GetObjectItem(r, "flavours");
    for (const cJSON *f = fl ? fl->child : NULL; f && us < 0; f = f->next)
      if (same_cfg(f, f->string, &c)) us = num(f, "us");
    const cJSON *h = cJSON_GetObjectItem(r, "heuristic");
    const cJSON *hf = cJSON_GetObjectItem(h, "flavour");
    if (us < 0 && h && cJSON_IsString(hf) && same_cfg(h, hf->valuestring, &c)) us = num(h, "us");
    bool is_known = false;
    for (size_t i = 0; i < sizeof KNOWN / sizeof KNOWN[0]; i++)
      is_known |= KNOWN[i][0] == m && KNOWN[i][1] == n && KNOWN[i][2] == k;
    const char *label = cJSON_GetObjectItem(r, "model")->valuestring;
    if (us < 0) {
      fprintf(stderr, "%s tp%d %s m=%d n=%d k=%d: the heuristic's pick (%s s%d wt%d wn%d) was not timed in this run\n",
              label, (int)num(r, "tp"), cJSON_GetObjectItem(r, "gemm")->valuestring, m, n, k,
              pz_gemm_flavour_name(c.flavour), c.splits, c.wt, c.wn);
      pz_test_failures++;
      continue;
    }
    const double ratio = us / best;
    if (ratio <= 1.10) {
      within++;
      if (is_known) printf("known miss m=%d n=%d k=%d now within 1.10 (%.3f): drop it from KNOWN\n", m, n, k, ratio);
      if (ratio > worst) worst = ratio;
    } else if (is_known) {
      known++;
    } else {
      fprintf(stderr, "%s tp%d %s m=%d n=%d k=%d: heuristic %s s%d wt%d %.2f us = %.3f x the best %.2f\n", label,
              (int)num(r, "tp"), cJSON_GetObjectItem(r, "gemm")->valuestring, m, n, k, pz_gemm_flavour_name(c.flavour),
              c.splits, c.wt, us, ratio, best);
      pz_test_failures++;
    }
  }
  CHECK(rows >= 400);
  printf("heuristic vs %s: %d of %d rows within 1.10 x the best (worst %.3f), %d known misses; not checked: %d MLP rows, "
         "%d of them over 1.10\n", path, within, rows, worst, known, other, other_over);
  cJSON_Delete(root);
  TEST_DONE();
}
