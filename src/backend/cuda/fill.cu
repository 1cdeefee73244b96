/* Device fill of weights / KV caches from (seed, tensor name, full index): the fill rule of
 * core/fill_rule.h, which the CPU executor (src/backend/cpu/cpu_exec.c) also uses, so the bits match. */
extern "C" {
#include "core/status.h" /* C headers without C++ guards */
#include "core/ir.h"
}
#include "backend/cuda/fill.h"
#include "core/fill_rule.h"
#include "core/fill_shard.h"
#include "core/quant_fill.h"
#include <string.h>
#include "backend/cuda/cuda_util.h"

static int ends_with(const char *s, const char *suf) {
  size_t a = strlen(s), b = strlen(suf);
  return a >= b && strcmp(s + a - b, suf) == 0;
}

/* GQA caches ("layers.L.self_attn.k_cache" / "v_cache"), sharded by kv head. */
static int gqa_cache(const pz_tensor *t) {
  return t->kind == PZ_T_STATE && (ends_with(t->name, ".k_cache") || ends_with(t->name, ".v_cache"));
}

extern "C" int pz_fill_wanted(const pz_tensor *t) {
  return t->kind == PZ_T_WEIGHT || (t->kind == PZ_T_STATE && ends_with(t->name, "kv_cache")) || gqa_cache(t);
}

struct FillArgs {
  int ndim, shard_dim, rank, tp, n_parts;
  int per_elem;     /* the last dim is the shard dim with parts or a replicated slice */
  int64_t ne[PZ_MAX_DIMS], full_ne[PZ_MAX_DIMS];
  int64_t part_ne[PZ_MAX_PARTS], part_full[PZ_MAX_PARTS];
  int64_t numel;
  uint64_t key;
  float scale, offset;
  int dtype;
  void *dst;
};

/* Full flat index of element (row, col) of the shard (rows = all dims but the last): pz_fill_index,
 * the CPU executor's mapping (shard dim, parts, replicated slices). */
__device__ static inline int64_t full_index(const FillArgs &a, int64_t row, int64_t col) {
  return pz_fill_index(a.ndim, a.ne, a.full_ne, a.shard_dim, a.rank, a.tp, a.n_parts, a.part_ne, a.part_full, row, col);
}


#define PZ_FILL_RUN 8 /* consecutive elements per thread */

/* Each thread fills runs of PZ_FILL_RUN consecutive elements (one 16-byte store for bf16, two for
 * f32/i32 when the run is whole; the storage is 256-byte aligned, runs start at multiples of 8). */
__global__ void pz_fill_kernel(FillArgs a) {
  const int64_t w = a.ne[a.ndim - 1];
  const int64_t stride = (int64_t)gridDim.x * blockDim.x * PZ_FILL_RUN;
  for (int64_t idx = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) * PZ_FILL_RUN; idx < a.numel; idx += stride) {
    int64_t row = idx / w, j = idx - row * w;
    int64_t base = full_index(a, row, 0);
    uint32_t bits[PZ_FILL_RUN];
    int cnt = 0;
    for (int e = 0; e < PZ_FILL_RUN && idx + e < a.numel; e++, cnt++) {
      if (j == w) { row++; j = 0; base = full_index(a, row, 0); }
      const int64_t full = a.per_elem ? full_index(a, row, j) : base + j;
      bits[e] = pz_fill_bits(a.key, (uint64_t)full, a.scale, a.offset, a.dtype);
      j++;
    }
    if (cnt == PZ_FILL_RUN && a.dtype == PZ_BF16) {
      uint4 q = make_uint4(bits[0] | bits[1] << 16, bits[2] | bits[3] << 16, bits[4] | bits[5] << 16, bits[6] | bits[7] << 16);
      *(uint4 *)((uint16_t *)a.dst + idx) = q;
    } else if (cnt == PZ_FILL_RUN) {
      uint4 *o = (uint4 *)((uint32_t *)a.dst + idx);
      o[0] = make_uint4(bits[0], bits[1], bits[2], bits[3]);
      o[1] = make_uint4(bits[4], bits[5], bits[6], bits[7]);
    } else {
      for (int e = 0; e < cnt; e++) {
        if (a.dtype == PZ_BF16) ((uint16_t *)a.dst)[idx + e] = (uint16_t)bits[e];
        else ((uint32_t *)a.dst)[idx + e] = bits[e];
      }
    }
  }
}

extern "C" pz_status pz_fill_tensor_launch(const pz_tensor *t, int rank, int tp, uint64_t seed, void *dst, cudaStream_t s) {
  if (!t || !dst) return pz_error(PZ_ERR_INVALID_ARG, "fill: NULL tensor or destination");
  if ((uintptr_t)dst & 15) return pz_error(PZ_ERR_INVALID_ARG, "fill: %s: destination must be 16-byte aligned", t->name);
  if (!pz_fill_wanted(t)) return pz_error(PZ_ERR_INVALID_ARG, "fill: %s is neither a weight nor a KV cache", t->name);
  if (t->ndim < 1 || t->ndim > PZ_MAX_DIMS) return pz_error(PZ_ERR_SHAPE, "fill: %s has %d dims", t->name, t->ndim);
  if (!pz_tensor_contiguous(t)) return pz_error(PZ_ERR_SHAPE, "fill: %s must be contiguous", t->name);
  FillArgs a;
  memset(&a, 0, sizeof a);
  a.ndim = t->ndim;
  a.numel = pz_tensor_numel(t);
  a.key = pz_fill_name_key(seed, t->name);
  a.dtype = (int)t->dtype;
  a.dst = dst;
  for (int d = 0; d < t->ndim; d++) a.ne[d] = t->ne[d];
  a.tp = tp > 0 ? tp : 1;
  if (t->kind == PZ_T_WEIGHT || gqa_cache(t)) {
    /* weights, and the GQA caches (sharded by kv head): the shard's own mapping, parts included */
    PZ_CHECK(pz_fill_check_shard(t, rank, a.tp));
    for (int d = 0; d < t->ndim; d++) a.full_ne[d] = t->full_ne[d];
    a.shard_dim = t->shard_dim;
    a.rank = rank;
    a.n_parts = t->n_parts;
    for (int p = 0; p < PZ_MAX_PARTS; p++) { a.part_ne[p] = t->part_ne[p]; a.part_full[p] = t->part_full[p]; }
    a.per_elem = pz_fill_last_dim_mapped(t->ndim, t->ne, t->full_ne, t->shard_dim, a.tp, t->n_parts);
    a.scale = t->kind == PZ_T_WEIGHT ? t->init_scale : t->init_scale != 0.0f ? t->init_scale : 1.0f;
    a.offset = t->kind == PZ_T_WEIGHT ? t->init_offset : 0.0f;
  } else { /* MLA KV cache: replicated over ranks, unsharded mapping */
    for (int d = 0; d < t->ndim; d++) a.full_ne[d] = t->ne[d];
    a.shard_dim = -1;
    a.rank = 0;
    a.scale = t->init_scale != 0.0f ? t->init_scale : 1.0f;
    a.offset = 0.0f;
  }
  if (a.numel == 0) return PZ_OK;
  int64_t runs = (a.numel + PZ_FILL_RUN - 1) / PZ_FILL_RUN;
  int64_t blocks = (runs + 255) / 256;
  if (blocks > 65536) blocks = 65536;
  pz_fill_kernel<<<(unsigned)blocks, 256, 0, s>>>(a);
  PZ_CUDA_CHECK(cudaGetLastError());
  return PZ_OK;
}

/* ---------------------------------------------------------------- quantised synthetic weights */

/* One thread per (row, group) for INT4 (words or the scale), per element for FP8: the functions of
 * core/quant_fill.h, the loop of pz_qfill_rows_host. */
__global__ void pz_qfill_kernel(pz_qfill q, int rank, void *dst) {
  const int64_t per_row = q.kind == PZ_QFILL_INT4_PACKED || q.kind == PZ_QFILL_INT4_SCALE ? q.cols / q.group : q.cols;
  const int64_t n = q.rows * per_row;
  for (int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; idx < n; idx += (int64_t)gridDim.x * blockDim.x) {
    const int64_t r = idx / per_row, c = idx - r * per_row;
    if (q.kind == PZ_QFILL_INT4_PACKED || q.kind == PZ_QFILL_INT4_SCALE) {
      const int64_t b = pz_qfill_index(&q, rank, r, c * q.group);
      const uint16_t sb = pz_qfill_int4_scale(&q, b);
      if (q.kind == PZ_QFILL_INT4_SCALE) {
        ((uint16_t *)dst)[r * q.out_cols + c] = sb;
        continue;
      }
      const float s = pz_qfill_f32((uint32_t)sb << 16);
      for (int64_t k = 0; k < q.group / 8; k++)
        ((int32_t *)dst)[r * q.out_cols + c * (q.group / 8) + k] = pz_qfill_int4_word(&q, b + 8 * k, s);
    } else if (q.kind == PZ_QFILL_FP8_BYTES) {
      ((uint8_t *)dst)[r * q.out_cols + c] = pz_qfill_e4m3(pz_qfill_div(pz_qfill_value(&q, pz_qfill_index(&q, rank, r, c)), q.fp8_s));
    } else {
      ((float *)dst)[r * q.out_cols + c] = q.fp8_s;
    }
  }
}

extern "C" pz_status pz_fill_quant_launch(const pz_qfill *q, int rank, void *dst, cudaStream_t s) {
  if (!q || !dst || q->kind == PZ_QFILL_NONE) return pz_error(PZ_ERR_INVALID_ARG, "quantised fill: nothing to fill");
  if ((q->kind == PZ_QFILL_INT4_PACKED || q->kind == PZ_QFILL_INT4_SCALE) && (q->group < 8 || q->group % 8 || q->cols % q->group))
    return pz_error(PZ_ERR_SHAPE, "quantised fill: group %lld does not split %lld columns", (long long)q->group,
                    (long long)q->cols);
  const int64_t per_row = q->kind == PZ_QFILL_INT4_PACKED || q->kind == PZ_QFILL_INT4_SCALE ? q->cols / q->group : q->cols;
  const int64_t n = q->rows * per_row;
  if (n == 0) return PZ_OK;
  int64_t blocks = (n + 255) / 256;
  if (blocks > 65536) blocks = 65536;
  pz_qfill_kernel<<<(unsigned)blocks, 256, 0, s>>>(*q, rank, dst);
  PZ_CUDA_CHECK(cudaGetLastError());
  return PZ_OK;
}
