/* compare.json of `prezero compare`: writing it, and reading a saved one back for --render
 * (compare_out.h). */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cjson/cJSON.h>
#include "compare_out.h"

/* A number written with 17 significant digits, so reading it back gives the same double and
 * --render reproduces the report byte for byte (cJSON's own printer may keep 15 digits). */
static cJSON *num17(double v) {
  char b[40];
  if (v != v || v > 1e308 || v < -1e308) return cJSON_CreateNull();
  snprintf(b, sizeof b, "%.17g", v);
  return cJSON_CreateRaw(b);
}
static void add_num(cJSON *o, const char *k, double v) { cJSON_AddItemToObject(o, k, num17(v)); }
static cJSON *pair_arr(const double *v, int n) {
  cJSON *a = cJSON_CreateArray();
  for (int i = 0; a && i < n; i++) cJSON_AddItemToArray(a, num17(v[i]));
  return a;
}

cJSON *pz_cmpout_to_json(const pz_cmp_result *r) {
  cJSON *j = cJSON_CreateObject();
  cJSON_AddStringToObject(j, "model", r->model);
  cJSON_AddStringToObject(j, "device", r->device);
  add_num(j, "tp", r->tp);
  add_num(j, "layers", r->layers);
  add_num(j, "layers_total", r->layers_total);
  add_num(j, "dense_total", r->dense_total);
  add_num(j, "moe_total", r->moe_total);
  cJSON_AddStringToObject(j, "experts", r->experts);
  add_num(j, "moe_layer_bytes", r->moe_layer_bytes);
  add_num(j, "fixed_bytes", r->fixed_bytes);
  add_num(j, "budget_bytes", r->budget_bytes);
  if (r->baselines) {
    cJSON *bl = cJSON_AddArrayToObject(j, "baselines");
    for (int b = 1; b < PZ_CMP_N_BASE; b++)
      if (r->baselines & (1u << b)) cJSON_AddItemToArray(bl, cJSON_CreateString(pz_cmp_base_name(b)));
  }
  cJSON_AddBoolToObject(j, "layers_auto", r->layers_auto);
  add_num(j, "isl", r->isl);
  if (r->isl_max > r->isl) add_num(j, "isl_max", r->isl_max);
  add_num(j, "osl", r->osl);
  add_num(j, "rounds", r->rounds);
  add_num(j, "seed", (double)r->seed);
  cJSON_AddStringToObject(j, "determinism", r->determinism);
  cJSON_AddStringToObject(j, "notes", r->notes);
  cJSON_AddStringToObject(j, "command", r->command);
  cJSON_AddStringToObject(j, "date", r->date);
  cJSON_AddStringToObject(j, "units", "tput: output tokens/s per GPU; tpot: ms; e2e: s per request (osl decode "
                                      "steps, no prefill); components: µs per layer (CUPTI, rank 0)");
  cJSON *pts = cJSON_AddArrayToObject(j, "points");
  for (int i = 0; i < r->n_points; i++) {
    const pz_cmp_point *p = &r->points[i];
    cJSON *o = cJSON_CreateObject();
    add_num(o, "conc", p->conc);
    add_num(o, "batch", p->batch);
    {
      double sv, sr, sa; /* derived (the report's "share of the step" table); not read back */
      pz_cmpout_step_share(r, p, &sv, &sr, &sa);
      add_num(o, "saving_per_layer_us", sv);
      add_num(o, "share_of_step_run", sr);
      add_num(o, "share_of_step_all_layers", sa);
    }
    add_num(o, "tput_on", p->tput_on);
    add_num(o, "tput_off", p->tput_off);
    add_num(o, "tpot_on_ms", p->tpot_on_ms);
    add_num(o, "tpot_off_ms", p->tpot_off_ms);
    add_num(o, "e2e_on_s", p->e2e_on_s);
    add_num(o, "e2e_off_s", p->e2e_off_s);
    cJSON_AddItemToObject(o, "tpot_on_rounds_ms", pair_arr(p->tpot_on_rounds_ms, p->rounds));
    cJSON_AddItemToObject(o, "tpot_off_rounds_ms", pair_arr(p->tpot_off_rounds_ms, p->rounds));
    cJSON_AddBoolToObject(o, "profiled", p->profiled);
    cJSON *comp = cJSON_AddObjectToObject(o, "components_us_per_layer");
    for (int c = 0; c < PZ_CMP_N_COMP; c++) {
      cJSON *x = cJSON_AddObjectToObject(comp, pz_cmp_comp_name((pz_cmp_comp)c));
      add_num(x, "on", p->comp_on_us[c]);
      add_num(x, "off", p->comp_off_us[c]);
      if (c <= PZ_CMP_LAST_CONSUMER)
        cJSON_AddStringToObject(x, "fired", p->fired[c] == PZ_CMP_FIRED ? "yes" : p->fired[c] == PZ_CMP_NOT_FIRED ? "n/f" : "n/a");
      cJSON_AddBoolToObject(x, "kernels_changed", p->kernels_changed[c]);
    }
    cJSON_AddItemToObject(o, "dense_layer_us", pair_arr(p->dense_layer_us, 2));
    cJSON_AddItemToObject(o, "moe_layer_us", pair_arr(p->moe_layer_us, 2));
    add_num(o, "n_dense_run", p->n_dense_run);
    add_num(o, "n_moe_run", p->n_moe_run);
    if (r->baselines) {
      cJSON *bj = cJSON_AddObjectToObject(o, "baselines_us_per_layer");
      for (int b = 0; b < PZ_CMP_N_BASE; b++) {
        if (b != PZ_CMP_BASE_TUNED && !(r->baselines & (1u << b))) continue;
        cJSON *x = cJSON_AddObjectToObject(bj, pz_cmp_base_name(b));
        for (int c = 0; c < PZ_CMP_N_COMP; c++) add_num(x, pz_cmp_comp_name((pz_cmp_comp)c), p->base_us[b][c]);
      }
    }
    cJSON_AddBoolToObject(o, "tokens_identical", p->tokens_identical);
    add_num(o, "first_token_mismatch", (double)p->first_token_mismatch);
    cJSON_AddBoolToObject(o, "logits_identical", p->logits_identical);
    add_num(o, "logits_max_abs_diff", p->logits_max_abs_diff);
    add_num(o, "logits_off_spread", p->logits_off_spread);
    cJSON_AddItemToArray(pts, o);
  }
  return j;
}

static double num(const cJSON *o, const char *k, double dflt) {
  const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, k);
  return cJSON_IsNumber(x) ? x->valuedouble : dflt;
}
static bool boolean(const cJSON *o, const char *k) { return cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, k)); }
static void str(const cJSON *o, const char *k, char *dst, size_t cap) {
  const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, k);
  snprintf(dst, cap, "%s", cJSON_IsString(x) ? x->valuestring : "");
}

/* Reads a compare.json; returns a one-line reason on failure (NULL when fine). */
const char *pz_cmpout_from_json(const char *text, pz_cmp_result *r) {
  memset(r, 0, sizeof *r);
  cJSON *j = cJSON_Parse(text);
  if (!j || !cJSON_IsObject(j)) { cJSON_Delete(j); return "is not a JSON object"; }
  const cJSON *pts = cJSON_GetObjectItemCaseSensitive(j, "points");
  if (!cJSON_IsArray(pts) || !cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(j, "tp"))) {
    cJSON_Delete(j);
    return "has no 'tp' number or 'points' array (not a compare.json)";
  }
  str(j, "model", r->model, sizeof r->model);
  str(j, "device", r->device, sizeof r->device);
  str(j, "determinism", r->determinism, sizeof r->determinism);
  str(j, "notes", r->notes, sizeof r->notes);
  str(j, "command", r->command, sizeof r->command);
  str(j, "date", r->date, sizeof r->date);
  r->tp = (int)num(j, "tp", 1);
  r->layers = (int)num(j, "layers", 0);
  r->layers_total = (int)num(j, "layers_total", 0);
  r->dense_total = (int)num(j, "dense_total", 0);
  r->moe_total = (int)num(j, "moe_total", 0);
  str(j, "experts", r->experts, sizeof r->experts);
  r->moe_layer_bytes = num(j, "moe_layer_bytes", 0);
  r->fixed_bytes = num(j, "fixed_bytes", 0);
  r->budget_bytes = num(j, "budget_bytes", 0);
  {
    const cJSON *bl = cJSON_GetObjectItemCaseSensitive(j, "baselines"), *x;
    cJSON_ArrayForEach(x, bl)
      for (int b = 1; b < PZ_CMP_N_BASE; b++)
        if (cJSON_IsString(x) && !strcmp(x->valuestring, pz_cmp_base_name(b))) r->baselines |= 1u << b;
  }
  r->layers_auto = boolean(j, "layers_auto");
  r->isl = (int)num(j, "isl", 0);
  r->isl_max = (int)num(j, "isl_max", 0);
  r->osl = (int)num(j, "osl", 0);
  r->rounds = (int)num(j, "rounds", 1);
  r->seed = (uint64_t)num(j, "seed", 0);
  const cJSON *o;
  cJSON_ArrayForEach(o, pts) {
    if (r->n_points == PZ_CMP_MAX_CONC) break;
    pz_cmp_point *p = &r->points[r->n_points++];
    p->conc = (int)num(o, "conc", 0);
    p->batch = (int)num(o, "batch", p->conc);
    if (p->conc < 1) { cJSON_Delete(j); return "has a point without a positive 'conc'"; }
    p->tput_on = num(o, "tput_on", 0);
    p->tput_off = num(o, "tput_off", 0);
    p->tpot_on_ms = num(o, "tpot_on_ms", 0);
    p->tpot_off_ms = num(o, "tpot_off_ms", 0);
    p->e2e_on_s = num(o, "e2e_on_s", 0);
    p->e2e_off_s = num(o, "e2e_off_s", 0);
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(o, "tpot_off_rounds_ms"), *b = cJSON_GetObjectItemCaseSensitive(o, "tpot_on_rounds_ms");
    p->rounds = 0;
    for (int i = 0; i < PZ_CMP_MAX_ROUNDS && i < cJSON_GetArraySize(a); i++) {
      p->tpot_off_rounds_ms[i] = cJSON_GetArrayItem(a, i)->valuedouble;
      const cJSON *bi = cJSON_GetArrayItem(b, i);
      p->tpot_on_rounds_ms[i] = bi ? bi->valuedouble : 0;
      p->rounds = i + 1;
    }
    p->profiled = boolean(o, "profiled");
    const cJSON *comp = cJSON_GetObjectItemCaseSensitive(o, "components_us_per_layer");
    for (int c = 0; c < PZ_CMP_N_COMP; c++) {
      const cJSON *x = cJSON_GetObjectItemCaseSensitive(comp, pz_cmp_comp_name((pz_cmp_comp)c));
      p->comp_on_us[c] = num(x, "on", -1);
      p->comp_off_us[c] = num(x, "off", -1);
      p->kernels_changed[c] = boolean(x, "kernels_changed");
      char fired[8];
      str(x, "fired", fired, sizeof fired);
      p->fired[c] = !strcmp(fired, "yes") ? PZ_CMP_FIRED : !strcmp(fired, "n/f") ? PZ_CMP_NOT_FIRED : PZ_CMP_NA;
    }
    {
      const cJSON *bj = cJSON_GetObjectItemCaseSensitive(o, "baselines_us_per_layer");
      for (int b = 0; b < PZ_CMP_N_BASE; b++) {
        const cJSON *x = cJSON_GetObjectItemCaseSensitive(bj, pz_cmp_base_name(b));
        for (int c = 0; c < PZ_CMP_N_COMP; c++) p->base_us[b][c] = num(x, pz_cmp_comp_name((pz_cmp_comp)c), -1);
      }
    }
    {
      const cJSON *d = cJSON_GetObjectItemCaseSensitive(o, "dense_layer_us"), *mo = cJSON_GetObjectItemCaseSensitive(o, "moe_layer_us");
      for (int k = 0; k < 2; k++) {
        const cJSON *x = cJSON_GetArrayItem(d, k), *y = cJSON_GetArrayItem(mo, k);
        p->dense_layer_us[k] = cJSON_IsNumber(x) ? x->valuedouble : -1;
        p->moe_layer_us[k] = cJSON_IsNumber(y) ? y->valuedouble : -1;
      }
      p->n_dense_run = (int)num(o, "n_dense_run", 0);
      p->n_moe_run = (int)num(o, "n_moe_run", 0);
    }
    p->tokens_identical = boolean(o, "tokens_identical");
    p->first_token_mismatch = (int64_t)num(o, "first_token_mismatch", -1);
    p->logits_identical = boolean(o, "logits_identical");
    p->logits_max_abs_diff = num(o, "logits_max_abs_diff", 0);
    p->logits_off_spread = num(o, "logits_off_spread", -1);
  }
  cJSON_Delete(j);
  return NULL;
}
