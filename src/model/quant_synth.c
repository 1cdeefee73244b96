/* Synthetic quantised weights (quant_synth.h). */
#include "model/quant_synth.h"
#include <stdlib.h>
#include <string.h>
#include "core/fill_rule.h"
#include "core/quant.h"

bool pz_graph_has_quant_weights(const pz_graph *g) {
  for (int i = 0; g && i < g->n_tensors; i++)
    if (g->tensors[i].kind == PZ_T_WEIGHT && (g->tensors[i].dtype == PZ_I32 || g->tensors[i].dtype == PZ_U8)) return true;
  return false;
}


/* The bf16 twin's values of local row r (cols elements, shape tw) as f32. */
static void twin_row(const pz_tensor *tw, uint64_t key, int rank, int64_t r, float *out) {
  const int64_t cols = tw->ne[tw->ndim - 1];
  const int64_t base = pz_fill_row_base(tw->ndim, tw->ne, tw->full_ne, tw->shard_dim, rank, r);
  for (int64_t j = 0; j < cols; j++)
    out[j] = pz_bf16_to_f32(pz_fill_bf16_bits(pz_fill_value(key, (uint64_t)(base + j), tw->init_scale, tw->init_offset)));
}

pz_status pz_quant_synth_fill_rows(const pz_quant_synth *q, const pz_graph *g, const pz_tensor *t, int rank,
                                   int64_t row0, int64_t n_rows, void *dst) {
  if (!q || !g || !t || !dst) return pz_error(PZ_ERR_INVALID_ARG, "synthetic weights: NULL argument");
  if (t->kind != PZ_T_WEIGHT) return pz_error(PZ_ERR_INVALID_ARG, "synthetic weights: %s is not a weight", t->name);
  const int last = t->ndim - 1;
  const int64_t w = t->ne[last], rows = pz_tensor_numel(t) / (w ? w : 1);
  if (row0 < 0 || n_rows < 0 || row0 + n_rows > rows)
    return pz_error(PZ_ERR_INVALID_ARG, "synthetic weights: rows %lld..%lld of %s are outside 0..%lld", (long long)row0,
                    (long long)(row0 + n_rows), t->name, (long long)rows);
  char base[PZ_NAME_LEN], twin[PZ_NAME_LEN + 8];
  snprintf(base, sizeof base, "%s", t->name);
  const bool packed = t->dtype == PZ_I32 && pz_name_ends_with(base, ".weight_packed");
  const bool iscale = t->dtype == PZ_BF16 && pz_name_ends_with(base, ".weight_scale");
  const bool f8 = t->dtype == PZ_U8 && pz_name_ends_with(base, ".weight");
  const bool f8scale = t->dtype == PZ_F32 && pz_name_ends_with(base, ".weight_scale_inv");
  if (packed || iscale) {
    *strrchr(base, '.') = 0; /* X */
    char pn[PZ_NAME_LEN + 16], sn[PZ_NAME_LEN + 16];
    snprintf(pn, sizeof pn, "%s.weight_packed", base);
    snprintf(sn, sizeof sn, "%s.weight_scale", base);
    const pz_tensor *tp = pz_graph_find_tensor(g, pn), *ts = pz_graph_find_tensor(g, sn);
    if (!tp || !ts || tp->ndim != ts->ndim || ts->ne[last] < 1 || (tp->ne[last] * 8) % ts->ne[last])
      return pz_error(PZ_ERR_INVALID_ARG, "synthetic weights: %s needs both %s and %s with matching shapes", t->name, pn, sn);
    const int64_t cols = tp->ne[last] * 8, group = cols / ts->ne[last];
    pz_tensor tw = *tp; /* the bf16 twin: same rows, cols = 8 * words */
    tw.ne[last] = cols;
    tw.full_ne[last] = tp->full_ne[last] * 8;
    snprintf(twin, sizeof twin, "%s.weight", base);
    const uint64_t key = pz_fill_name_key(q->seed, twin);
    float *v = malloc(sizeof(float) * (size_t)cols);
    int32_t *pk = malloc(sizeof(int32_t) * (size_t)(cols / 8));
    pz_bf16 *sc = malloc(sizeof(pz_bf16) * (size_t)(cols / group));
    if (!v || !pk || !sc) { free(v); free(pk); free(sc); return pz_error(PZ_ERR_OOM, "synthetic weights: out of memory"); }
    for (int64_t i = 0; i < n_rows; i++) {
      twin_row(&tw, key, rank, row0 + i, v);
      pz_int4_quantize_row(v, cols, group, pk, sc);
      if (packed) memcpy((int32_t *)dst + i * w, pk, sizeof(int32_t) * (size_t)w);
      else memcpy((pz_bf16 *)dst + i * w, sc, sizeof(pz_bf16) * (size_t)w);
    }
    free(v); free(pk); free(sc);
    return PZ_OK;
  }
  if (f8 || f8scale) {
    const float s = t->init_scale / 448.0f;
    if (f8scale) {
      for (int64_t i = 0; i < n_rows * w; i++) ((float *)dst)[i] = s;
      return PZ_OK;
    }
    const uint64_t key = pz_fill_name_key(q->seed, t->name);
    float *v = malloc(sizeof(float) * (size_t)(w ? w : 1));
    if (!v) return pz_error(PZ_ERR_OOM, "synthetic weights: out of memory");
    for (int64_t i = 0; i < n_rows; i++) {
      twin_row(t, key, rank, row0 + i, v);
      for (int64_t j = 0; j < w; j++) ((uint8_t *)dst)[i * w + j] = pz_fp8_e4m3_from_f32(v[j] / s);
    }
    free(v);
    return PZ_OK;
  }
  /* Plain tensors: the executors' fill rule (cpu_exec.c fill_rows, fill.cu), bit for bit: a row's first
   * element at its full index by pz_fill_index, which maps the parts of a stacked tensor (GQA qkv_proj
   * q | k | v, the dense gate_up_proj gate | up) and replicated kv-head slices (pz_fill_row_base knows
   * neither); along the last dim +1 per element, or mapped per element when the last dim itself is cut
   * into parts or replicated. One index computation per row otherwise (tens of GB are filled this way). */
  const uint64_t key = pz_fill_name_key(q->seed, t->name);
  const int tp = g->info.tp > 0 ? g->info.tp : 1;
  const int sd = t->shard_dim;
  const bool per_elem = pz_fill_last_dim_mapped(t->ndim, t->ne, t->full_ne, sd, tp, t->n_parts);
  for (int64_t i = 0; i < n_rows; i++) {
    const int64_t base = pz_fill_index(t->ndim, t->ne, t->full_ne, sd, rank, tp, t->n_parts, t->part_ne, t->part_full,
                                       row0 + i, 0);
    for (int64_t j = 0; j < w; j++) {
      const int64_t full = per_elem ? pz_fill_index(t->ndim, t->ne, t->full_ne, sd, rank, tp, t->n_parts, t->part_ne,
                                                    t->part_full, row0 + i, j)
                                    : base + j;
      const float v = pz_fill_value(key, (uint64_t)full, t->init_scale, t->init_offset);
      if (t->dtype == PZ_BF16) ((pz_bf16 *)dst)[i * w + j] = pz_fill_bf16_bits(v);
      else if (t->dtype == PZ_F32) ((float *)dst)[i * w + j] = v;
      else if (t->dtype == PZ_I32) ((int32_t *)dst)[i * w + j] = pz_fill_i32(v);
      else return pz_error(PZ_ERR_INVALID_ARG, "synthetic weights: %s has dtype %s and no quantised name", t->name,
                           pz_dtype_name(t->dtype));
    }
  }
  return PZ_OK;
}

pz_status pz_quant_synth_fill_rows_hook(void *user, const pz_tensor *t, int rank, int64_t row0, int64_t n_rows, void *dst) {
  const pz_quant_synth_ctx *c = user;
  if (!c) return pz_error(PZ_ERR_INVALID_ARG, "synthetic weights: NULL context");
  return pz_quant_synth_fill_rows(&c->q, c->g, t, rank, row0, n_rows, dst);
}

pz_status pz_quant_synth_fill(void *user, const pz_tensor *t, int rank, void *dst) {
  if (!t) return pz_error(PZ_ERR_INVALID_ARG, "synthetic weights: NULL tensor");
  const int64_t w = t->ne[t->ndim - 1];
  return pz_quant_synth_fill_rows_hook(user, t, rank, 0, pz_tensor_numel(t) / (w ? w : 1), dst);
}
