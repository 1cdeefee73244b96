/* Element-wise synthetic quantised weights and their host twin (quant_fill.h). */
#include "core/quant_fill.h"
#include <stdio.h>
#include <string.h>


static void geometry(pz_qfill *q, const pz_tensor *v) {
  q->ndim = v->ndim;
  q->shard_dim = v->shard_dim;
  for (int d = 0; d < v->ndim; d++) { q->ne[d] = v->ne[d]; q->full_ne[d] = v->full_ne[d]; }
  q->cols = v->ne[v->ndim - 1];
  q->rows = q->cols ? pz_tensor_numel(v) / q->cols : 0;
  q->scale = v->init_scale;
  q->offset = v->init_offset;
}

pz_status pz_qfill_plan(const pz_graph *g, const pz_tensor *t, uint64_t seed, pz_qfill *out) {
  if (!g || !t || !out) return pz_error(PZ_ERR_INVALID_ARG, "quantised fill: NULL argument");
  memset(out, 0, sizeof *out);
  if (t->kind != PZ_T_WEIGHT) return PZ_OK;
  if (t->ndim < 1 || t->ndim > PZ_MAX_DIMS) return pz_error(PZ_ERR_INVALID_ARG, "quantised fill: %s has %d dims", t->name, t->ndim);
  const int last = t->ndim - 1;
  char base[PZ_NAME_LEN + 16], pn[PZ_NAME_LEN + 32], sn[PZ_NAME_LEN + 32];
  snprintf(base, sizeof base, "%s", t->name);
  const int packed = t->dtype == PZ_I32 && pz_name_ends_with(base, ".weight_packed");
  const int iscale = t->dtype == PZ_BF16 && pz_name_ends_with(base, ".weight_scale");
  if (packed || iscale) {
    *strrchr(base, '.') = 0; /* X */
    snprintf(pn, sizeof pn, "%s.weight_packed", base);
    snprintf(sn, sizeof sn, "%s.weight_scale", base);
    const pz_tensor *tp = pz_graph_find_tensor(g, pn), *ts = pz_graph_find_tensor(g, sn);
    if (iscale && (!tp || tp->dtype != PZ_I32)) return PZ_OK; /* a plain bf16 tensor of that name */
    if (!tp || !ts || tp->ndim != ts->ndim || ts->ne[last] < 1 || (tp->ne[last] * 8) % ts->ne[last] ||
        (tp->ne[last] * 8 / ts->ne[last]) % 8)
      return pz_error(PZ_ERR_INVALID_ARG, "quantised fill: %s needs both %s and %s with matching shapes", t->name, pn, sn);
    pz_tensor tw = *tp; /* the bf16 twin "X.weight": same rows, 8x the columns */
    tw.ne[last] = tp->ne[last] * 8;
    tw.full_ne[last] = tp->full_ne[last] * 8;
    geometry(out, &tw);
    out->kind = packed ? PZ_QFILL_INT4_PACKED : PZ_QFILL_INT4_SCALE;
    out->group = out->cols / ts->ne[last];
    out->out_cols = t->ne[last];
    snprintf(sn, sizeof sn, "%s.weight", base);
    out->key = pz_fill_name_key(seed, sn);
    return PZ_OK;
  }
  const int f8 = t->dtype == PZ_U8 && pz_name_ends_with(base, ".weight");
  const int f8scale = t->dtype == PZ_F32 && pz_name_ends_with(base, ".weight_scale_inv");
  if (f8 || f8scale) {
    geometry(out, t);
    out->kind = f8 ? PZ_QFILL_FP8_BYTES : PZ_QFILL_FP8_SCALE;
    out->out_cols = t->ne[last];
    out->fp8_s = t->init_scale / 448.0f;
    out->key = pz_fill_name_key(seed, t->name);
  }
  return PZ_OK;
}

pz_status pz_qfill_rows_host(const pz_qfill *q, int rank, int64_t row0, int64_t n_rows, void *dst) {
  if (!q || !dst || q->kind == PZ_QFILL_NONE) return pz_error(PZ_ERR_INVALID_ARG, "quantised fill: nothing to fill");
  if (row0 < 0 || n_rows < 0 || row0 + n_rows > q->rows)
    return pz_error(PZ_ERR_INVALID_ARG, "quantised fill: rows %lld..%lld outside 0..%lld", (long long)row0,
                    (long long)(row0 + n_rows), (long long)q->rows);
  for (int64_t i = 0; i < n_rows; i++) {
    const int64_t r = row0 + i;
    if (q->kind == PZ_QFILL_INT4_PACKED || q->kind == PZ_QFILL_INT4_SCALE) {
      for (int64_t gi = 0; gi < q->cols / q->group; gi++) {
        const int64_t b = pz_qfill_index(q, rank, r, gi * q->group);
        const uint16_t sb = pz_qfill_int4_scale(q, b);
        if (q->kind == PZ_QFILL_INT4_SCALE) {
          ((uint16_t *)dst)[i * q->out_cols + gi] = sb;
          continue;
        }
        const float s = pz_qfill_f32((uint32_t)sb << 16);
        for (int64_t k = 0; k < q->group / 8; k++)
          ((int32_t *)dst)[i * q->out_cols + gi * (q->group / 8) + k] = pz_qfill_int4_word(q, b + 8 * k, s);
      }
    } else if (q->kind == PZ_QFILL_FP8_BYTES) {
      for (int64_t j = 0; j < q->cols; j++)
        ((uint8_t *)dst)[i * q->out_cols + j] = pz_qfill_e4m3(pz_qfill_div(pz_qfill_value(q, pz_qfill_index(q, rank, r, j)), q->fp8_s));
    } else {
      for (int64_t j = 0; j < q->cols; j++) ((float *)dst)[i * q->out_cols + j] = q->fp8_s;
    }
  }
  return PZ_OK;
}
