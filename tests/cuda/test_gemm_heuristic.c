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
 * is reported, so the list shrinks. PZ_GEMM_BENCH_JSON=path checks another run's file. */
#define _POSIX_C_SOURCE 200809L
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "backend/cuda/gemm.h"
#include "pz_test.h"

/* Rows over 1.10 in the 2026-12-03 06:09Z run (bench/results/gemm_h200.json, round 84: programmatic dependent
 * launch on, after a fresh `prezero tune` in the same call; the heuristic was fitted before PDL, to the round-64
 * run now in gemm_h200_v10.json, where only the first shape below missed, by 1.100-1.102):
 * - DeepSeek-V2-Lite kv_a m 256 (576 x 2048), TP 1-8: s4 against the tuner's s7, 1.14;
 * - DeepSeek-V3 q_b m 128 / 256 (24576 x 1536): full K wt 2 against stream-K (132 CTAs, wt 2), 1.15 / 1.16: 192
 *   tiles are 1.45 waves. A stream-K rule for full-K grids past one wave would also flip m 16 / 64, whose
 *   stream-K configs this run did not time: it waits for a GPU round that times them;
 * - DeepSeek-V3 o_proj m 16 / 64 (7168 x 16384): s7 wt 2 against s2 wt 2 / stream-K, 1.13 / 1.12;
 * - DeepSeek-V2-Lite q_proj m 1 / 2 / 4 (3072 x 2048): s5 wt 1 against stream-K, 1.11;
 * - Kimi-K2 router gate m 128 (384 x 7168) at TP 2 / 4 / 8: s16 against s20, 1.10-1.15, but the identical shape
 *   and config on the TP 1 row is within 1.10 in the same run (timing spread of ~0.6 us at 6 us);
 * - Kimi-K2 TP 8 q_b m 128 (1536 x 1536): s4 against s5, 1.14; TP 8 o_proj m 1 (7168 x 1024): wt 1 against
 *   wt 2, 1.12.
 * (Kimi-K2 router gate m 64, known in the round-64 run as timing spread, is within 1.10 on every row now.) */
static const int KNOWN[][3] = {{256, 576, 2048}, {128, 24576, 1536}, {256, 24576, 1536}, {16, 7168, 16384},
                               {64, 7168, 16384}, {1, 3072, 2048},   {2, 3072, 2048},    {4, 3072, 2048},
                               {128, 384, 7168},  {128, 1536, 1536}, {1, 7168, 1024}};

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
  int rows = 0, within = 0, known = 0;
  double worst = 0;
  for (const cJSON *r = cJSON_GetObjectItem(root, "rows")->child; r; r = r->next) {
    const int m = (int)num(r, "m"), n = (int)num(r, "n"), k = (int)num(r, "k");
    const double best = num(r, "best_ours_us");
    if (n % 64 || k % 64 || best <= 0) continue;
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
  printf("heuristic vs %s: %d of %d rows within 1.10 x the best (worst %.3f), %d known misses\n", path, within, rows,
         worst, known);
  cJSON_Delete(root);
  TEST_DONE();
}
