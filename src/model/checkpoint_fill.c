/* Checkpoint weight fill (checkpoint.h pz_checkpoint_fill / pz_checkpoint_fill_rows): each planned graph
 * weight's rows read from its sources, converted to the graph's dtype (BF16, F16, F32, FP8 and INT4
 * dequantised), scanned for non-finite scales, and the load progress bar. */
#include "model/checkpoint.h"
#include "model/checkpoint_impl.h"
#include "core/options.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "core/pool.h"
#include "core/dtype.h"
#include "core/fp8.h"
#include "core/quant.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* IEEE-754 binary16 bits -> the f32 of the same value (exact: every f16 is an f32). */
float pz_ck_f16_to_f32(uint16_t h) {
  const uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu;
  uint32_t m = h & 0x3ffu, u;
  if (e == 0x1f) u = sign | 0x7f800000u | (m << 13);   /* inf, NaN (payload kept) */
  else if (e) u = sign | ((e + 112u) << 23) | (m << 13); /* normal: exponent bias 15 -> 127 */
  else if (!m) u = sign;                                 /* +-0 */
  else {                                                 /* subnormal m * 2^-24: normalise */
    int sh = 0;
    while (!(m & 0x400u)) { m <<= 1; sh++; }
    u = sign | ((uint32_t)(113 - sh) << 23) | ((m & 0x3ffu) << 13);
  }
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

/* Element k of an INT4 scale tensor as bf16: BF16 as stored, F16 / F32 rounded to nearest even (as F16 / F32
 * weights are read; checkpoint_quant.c admits only these three). */
static pz_bf16 scale_bf16_at(const pz_st_tensor *t, int64_t k) {
  if (t->dtype == PZ_ST_F32) {
    float f;
    memcpy(&f, (const char *)t->data + 4 * k, 4);
    return pz_f32_to_bf16(f);
  }
  uint16_t h;
  memcpy(&h, (const char *)t->data + 2 * k, 2);
  return t->dtype == PZ_ST_F16 ? pz_f32_to_bf16(pz_ck_f16_to_f32(h)) : h;
}

/* Columns [c0, c0+n) of row r of s (row s->row0 + r of its tensor), converted to dst's dtype (bf16: round
 * to nearest even). */
static void read_row(const pz_checkpoint *ck, const src *s, int64_t r, int64_t c0, int64_t n, pz_dtype dt, void *dst,
                     float *tmp) {
  const pz_st_tensor *w = s->w;
  r += s->row0;
  if (s->gptq) { /* GPTQ's qweight, stored transposed: row r is column r of w (checkpoint_gptq.c) */
    const int64_t out = w->shape[1];
    if (s->raw) { /* packed words: word c of row r is qweight[c, r] (the same nibbles) */
      for (int64_t j = 0; j < n; j++) memcpy((char *)dst + 4 * j, (const char *)w->data + 4 * ((c0 + j) * out + r), 4);
      return;
    }
    /* values: (u - 8) x scale, the scale rounded to bf16 first (as the packed experts' are); each word and
     * scale read once */
    int32_t word = 0;
    float sc = 0.0f;
    for (int64_t j = 0; j < n; j++) {
      const int64_t c = c0 + j;
      if (j == 0 || c % 8 == 0) memcpy(&word, (const char *)w->data + 4 * ((c / 8) * out + r), 4);
      if (j == 0 || c % s->group == 0) sc = pz_bf16_to_f32(scale_bf16_at(s->qscale, (c / s->group) * out + r));
      const float v = (float)pz_int4_get(word, (int)(c % 8)) * sc;
      if (dt == PZ_BF16) ((pz_bf16 *)dst)[j] = pz_f32_to_bf16(v);
      else ((float *)dst)[j] = v;
    }
    return;
  }
  if (s->raw) { /* packed INT4 words or e4m3 bytes, as stored */
    const size_t e = pz_st_dtype_size(w->dtype);
    memcpy(dst, (const char *)w->data + (size_t)(r * s->cols + c0) * e, e * (size_t)n);
    return;
  }
  if (s->rep > 0) { /* INT4 scales gathered into 32-column groups (checkpoint_impl.h src.rep) */
    for (int64_t j = 0; j < n; j++) {
      const pz_bf16 h = scale_bf16_at(w, r * s->srow + ((c0 + j) / s->rep) * s->sgrp);
      if (dt == PZ_BF16) ((pz_bf16 *)dst)[j] = h;
      else ((float *)dst)[j] = pz_bf16_to_f32(h);
    }
    return;
  }
  if (s->qscale) { /* INT4 values: row r's words and scales copied aligned, then q * scale (core/quant.h) */
    const int64_t words = s->cols / 8, groups = s->cols / s->group;
    void *buf = malloc(4 * (size_t)words + 2 * (size_t)groups + sizeof(float) * (size_t)(n ? n : 1));
    if (!buf) { memset(dst, 0, pz_dtype_size(dt) * (size_t)n); return; } /* cannot happen at row sizes */
    int32_t *pw = buf;
    float *vals = (float *)(pw + words);
    pz_bf16 *sc = (pz_bf16 *)(vals + n);
    memcpy(pw, (const char *)w->data + (size_t)(r * words) * 4, 4 * (size_t)words);
    for (int64_t k = 0; k < groups; k++) sc[k] = scale_bf16_at(s->qscale, r * groups + k);
    pz_int4_dequant_row(pw, sc, s->group, c0, n, vals);
    if (dt == PZ_BF16) for (int64_t j = 0; j < n; j++) ((pz_bf16 *)dst)[j] = pz_f32_to_bf16(vals[j]);
    else memcpy(dst, vals, sizeof(float) * (size_t)n);
    free(buf);
    return;
  }
  /* safetensors does not align tensors: a row that is not aligned to its element size is
   * first copied into tmp (4n bytes), so no misaligned load is ever made. */
  const size_t esz = pz_st_dtype_size(w->dtype);
  const char *row = (const char *)w->data + (size_t)(r * s->cols + c0) * esz;
  if (w->dtype != PZ_ST_F8_E4M3 && (uintptr_t)row % esz) {
    memcpy(tmp, row, esz * (size_t)n);
    row = (const char *)tmp;
  }
  if (w->dtype == PZ_ST_BF16) {
    const pz_bf16 *p = (const pz_bf16 *)row;
    if (dt == PZ_BF16) memcpy(dst, p, sizeof(pz_bf16) * (size_t)n);
    else for (int64_t j = 0; j < n; j++) ((float *)dst)[j] = pz_bf16_to_f32(p[j]);
    return;
  }
  if (w->dtype == PZ_ST_F16) { /* exact to f32, then bf16 rounds to nearest even as for F32 files */
    const uint16_t *p = (const uint16_t *)row;
    if (dt == PZ_BF16) for (int64_t j = 0; j < n; j++) ((pz_bf16 *)dst)[j] = pz_f32_to_bf16(pz_ck_f16_to_f32(p[j]));
    else for (int64_t j = 0; j < n; j++) ((float *)dst)[j] = pz_ck_f16_to_f32(p[j]);
    return;
  }
  const float *f;
  if (w->dtype == PZ_ST_F32) {
    f = (const float *)row;
  } else { /* F8_E4M3, checked in get_src */
    pz_fp8_dequant_row(w->data, s->cols, s->scale, s->scols, ck->bm, ck->bn, r, c0, n, tmp);
    f = tmp;
  }
  if (dt == PZ_BF16) for (int64_t j = 0; j < n; j++) ((pz_bf16 *)dst)[j] = pz_f32_to_bf16(f[j]);
  else memcpy(dst, f, sizeof(float) * (size_t)n);
}

static void progress(pz_checkpoint *ck, int64_t add) {
  if (ck->progress < 0) {
    ck->progress = pz_runtime_progress() != 0; /* PREZERO_PROGRESS=0 silences it */
    ck->tty = isatty(2);
    ck->t0 = now_s();
    ck->last_print = 0;
  }
  ck->done_bytes += add;
  if (!ck->progress || ck->total_bytes <= 0) return;
  double t = now_s(), el = t - ck->t0;
  bool done = ck->done_bytes >= ck->total_bytes;
  if (el < 1.0) return; /* loads shorter than a second print nothing, on a terminal too */
  if (!done && t - ck->last_print < (ck->tty ? 0.1 : 5.0)) return;
  ck->last_print = t;
  double frac = (double)ck->done_bytes / (double)ck->total_bytes;
  if (ck->tty) {
    char bar[31];
    int fill = (int)(frac * 30);
    for (int i = 0; i < 30; i++) bar[i] = i < fill ? '#' : '.';
    bar[30] = 0;
    fprintf(stderr, "\rloading weights [%s] %3d%% %.2f/%.2f GiB %.1f s", bar, (int)(frac * 100),
            (double)ck->done_bytes / (1 << 30), (double)ck->total_bytes / (1 << 30), el);
    ck->printed = !done;
    if (done) fputc('\n', stderr);
  } else {
    fprintf(stderr, "loading weights: %3d%% %.2f/%.2f GiB %.1f s\n", (int)(frac * 100),
            (double)ck->done_bytes / (1 << 30), (double)ck->total_bytes / (1 << 30), el);
  }
  fflush(stderr);
}

typedef struct fill_job {
  const pz_checkpoint *ck;
  const plan *p;
  const pz_tensor *t;
  int rank;
  int64_t row0;                /* local row of dst's first row */
  void *dst;
  int oom;                     /* set (to 1 only) by a worker whose scratch allocation failed */
  int scan;                    /* 0, or the finite check of the rows written: 1 bf16, 2 f32 (pz_checkpoint_fill_rows) */
  int64_t bad;                 /* the first non-finite element of dst (lowest index), or -1 */
} fill_job;

/* The f32 bits of element k of a scanned dst (scan 1: bf16, 2: f32). */
static uint32_t elem_bits(const void *dst, int scan, int64_t k) {
  uint32_t u;
  if (scan == 1) u = (uint32_t)((const uint16_t *)dst)[k] << 16;
  else memcpy(&u, (const char *)dst + 4 * k, 4);
  return u;
}

/* The finite check of dst's rows [lo, hi) of a job with scan set, done by the worker that has just
 * written them: the lowest non-finite element goes into j->bad (an atomic minimum across workers). */
static void scan_rows(fill_job *j, int64_t lo, int64_t hi) {
  const int64_t w = j->t->ne[j->t->ndim - 1];
  for (int64_t k = lo * w; k < hi * w; k++) {
    if ((elem_bits(j->dst, j->scan, k) & 0x7f800000u) != 0x7f800000u) continue;
    int64_t cur = __atomic_load_n(&j->bad, __ATOMIC_RELAXED);
    while ((cur < 0 || k < cur) &&
           !__atomic_compare_exchange_n(&j->bad, &cur, k, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
    }
    return;
  }
}

/* Element (2-D: row) lr of a PLAN_QKV / PLAN_GATE_UP tensor on `rank`: its source, the source's
 * row (element) and how many of the following local ones continue it contiguously (*left). */
static const src *stacked_at(const plan *p, int rank, int64_t lr, int64_t *sr, int64_t *left) {
  if (p->kind == PLAN_GATE_UP) {
    const int k = lr >= p->q_rows;
    *sr = (int64_t)rank * p->q_rows + lr - k * p->q_rows;
    *left = p->q_rows - (lr - k * p->q_rows);
    return &p->s[k];
  }
  if (lr < p->q_rows) {
    *sr = (int64_t)rank * p->q_rows + lr;
    *left = p->q_rows - lr;
    return &p->s[0];
  }
  lr -= p->q_rows;
  const int k = lr >= p->kv_rows; /* 0: k rows, 1: v rows */
  *sr = (int64_t)(rank / p->kv_ranks) * p->kv_rows + lr - k * p->kv_rows;
  *left = p->kv_rows - (lr - k * p->kv_rows);
  return &p->s[1 + k];
}

/* fill_rows for PLAN_QKV / PLAN_GATE_UP: a 2-D weight row by row, a 1-D bias in its q / k / v runs. */
static void fill_stacked(const fill_job *j, int64_t lo, int64_t hi, float *tmp) {
  const pz_tensor *t = j->t;
  const int64_t w = t->ne[t->ndim - 1];
  const size_t esz = pz_dtype_size(t->dtype);
  int64_t sr, left;
  if (t->ndim == 1) {
    for (int64_t e = 0; lo < hi && e < w; e += left) {
      const src *s = stacked_at(j->p, j->rank, e, &sr, &left);
      if (left > w - e) left = w - e;
      read_row(j->ck, s, 0, sr, left, t->dtype, (char *)j->dst + (size_t)e * esz, tmp);
    }
    return;
  }
  for (int64_t i = lo; i < hi; i++) {
    const src *s = stacked_at(j->p, j->rank, j->row0 + i, &sr, &left);
    read_row(j->ck, s, sr, 0, w, t->dtype, (char *)j->dst + (size_t)(i * w) * esz, tmp);
  }
}

/* Local rows row0 + [lo, hi) of one fill into dst rows [lo, hi) (a pz_par_for range: each row
 * is written by one thread). */
static void fill_rows(void *va, int64_t lo, int64_t hi) {
  fill_job *j = va;
  const pz_tensor *t = j->t;
  const plan *p = j->p;
  const int last = t->ndim - 1;
  const int64_t w = t->ne[last], c0 = t->shard_dim == last ? (int64_t)j->rank * w : 0;
  const size_t esz = pz_dtype_size(t->dtype);
  float *tmp = malloc(sizeof(float) * (size_t)(w ? w : 1));
  if (!tmp) { __atomic_store_n(&j->oom, 1, __ATOMIC_RELAXED); return; }
  if (p->kind == PLAN_QKV || p->kind == PLAN_GATE_UP) {
    fill_stacked(j, lo, hi, tmp);
    free(tmp);
    if (j->scan) scan_rows(j, lo, hi);
    return;
  }
  for (int64_t i = lo; i < hi; i++) {
    const int64_t row = j->row0 + i;
    /* Full coordinates of this local row (all dims but the last), and its flat full row. */
    int64_t co[PZ_MAX_DIMS] = {0}, rem = row, frow = 0, mult = 1;
    for (int d = last - 1; d >= 0; d--) {
      co[d] = rem % t->ne[d] + (d == t->shard_dim ? (int64_t)j->rank * t->ne[d] : 0);
      rem /= t->ne[d];
      frow += co[d] * mult;
      mult *= t->full_ne[d];
    }
    const src *s = &p->s[0];
    int64_t sr = frow;
    switch (p->kind) {
      case PLAN_CONCAT_ROWS:
        if (frow >= p->split) { s = &p->s[1]; sr = frow - p->split; }
        break;
      case PLAN_EXPERTS: s = &p->s[co[0]]; sr = co[1]; break;
      case PLAN_KVB_UK: sr = co[0] * p->split + co[1]; break;
      case PLAN_KVB_UV: sr = co[0] * p->split + p->nope + co[1]; break;
      case PLAN_EXPERTS_FUSED: sr = co[0] * p->split + p->nope + co[1]; break;
      default: break;
    }
    read_row(j->ck, s, sr, c0, w, t->dtype, (char *)j->dst + (size_t)(i * w) * esz, tmp);
  }
  free(tmp);
  if (j->scan) scan_rows(j, lo, hi);
}

pz_status pz_checkpoint_fill_rows(void *user, const pz_tensor *t, int rank, int64_t row0, int64_t n_rows, void *dst) {
  pz_checkpoint *ck = user;
  if (!ck || !t || !dst) return pz_error(PZ_ERR_INVALID_ARG, "pz_checkpoint_fill: NULL argument");
  if (t->id < 0 || t->id >= ck->n_plans || ck->plans[t->id].kind == PLAN_NONE)
    return pz_error(PZ_ERR_INVALID_ARG, "pz_checkpoint_fill: tensor %s was not planned (call pz_checkpoint_plan)", t->name);
  if (rank < 0 || rank >= ck->tp)
    return pz_error(PZ_ERR_INVALID_ARG, "pz_checkpoint_fill: rank %d is out of range 0..%d", rank, ck->tp - 1);
  const int64_t w = t->ne[t->ndim - 1];
  const int64_t rows = pz_tensor_numel(t) / (w ? w : 1);
  if (row0 < 0 || n_rows < 0 || row0 + n_rows > rows)
    return pz_error(PZ_ERR_INVALID_ARG, "pz_checkpoint_fill: rows %lld..%lld of %s are outside 0..%lld", (long long)row0,
                    (long long)(row0 + n_rows), t->name, (long long)rows);
  fill_job j = {.ck = ck, .p = &ck->plans[t->id], .t = t, .rank = rank, .row0 = row0, .dst = dst, .bad = -1};
  /* Quantised experts' scales (INT4 weight_scale bf16, FP8 weight_scale_inv f32), kept as stored, and weights
   * dequantised here from INT4: a NaN or infinite scale would make weights non-finite and the tokens garbage;
   * refused here, at load (the dequantised FP8 weights' block scales are checked when planned). Each worker
   * checks the rows it has just written: 1/16 of the packed bytes, and the (shared experts') dequantised weights. */
  bool deq = false;
  for (int i = 0; i < j.p->n_src; i++) deq |= j.p->s[i].qscale != NULL;
  if ((deq || pz_name_ends_with(t->name, ".weight_scale")) && t->dtype == PZ_BF16) j.scan = 1;
  if ((deq || pz_name_ends_with(t->name, ".weight_scale_inv")) && t->dtype == PZ_F32) j.scan = 2;
  /* Rows in parallel when the caller has bound a CPU pool (the CPU executor does), else serial. */
  pz_par_for(n_rows, 1 + 16384 / (w ? w : 1), fill_rows, &j);
  if (j.oom) return pz_error(PZ_ERR_OOM, "checkpoint: out of memory filling %s", t->name);
  if (j.bad >= 0) {
    const uint32_t u = elem_bits(dst, j.scan, j.bad);
    float v;
    memcpy(&v, &u, 4);
    return pz_error(PZ_ERR_IO, "checkpoint %s: %s%s (rank %d, element %lld of rows %lld..) is %g, from a non-finite "
                    "INT4 / FP8 scale; the file is corrupt: re-download or re-quantize it", ck->dir,
                    deq ? "the dequantised " : "a scale of ", t->name, rank, (long long)j.bad, (long long)row0, (double)v);
  }
  progress(ck, n_rows * w * (int64_t)pz_dtype_size(t->dtype));
  return PZ_OK;
}

pz_status pz_checkpoint_fill(void *user, const pz_tensor *t, int rank, void *dst) {
  if (!t) return pz_error(PZ_ERR_INVALID_ARG, "pz_checkpoint_fill: NULL argument");
  const int64_t w = t->ne[t->ndim - 1];
  return pz_checkpoint_fill_rows(user, t, rank, 0, pz_tensor_numel(t) / (w ? w : 1), dst);
}
