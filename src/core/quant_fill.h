/* The synthetic quantised weights of model/quant_synth.h, element by element, as functions usable
 * on the host and the device (PZ_FILL_HD, core/fill_rule.h): the CUDA executor fills quantised
 * expert tensors on the GPU with them (backend/cuda/fill.cu, pz_fill_quant_launch) instead of
 * quantising tens of GB on the host. pz_qfill_rows_host is their host twin, the same loop the
 * kernel runs; tests/test_quant_fill.c checks it bit for bit against pz_quant_synth_fill_rows
 * (whose quantiser, pz_int4_quantize_row / pz_fp8_e4m3_from_f32, is checked against the
 * compressed-tensors package and torch), so the device fill gives the host quantiser's bits.
 *
 * The rules (the same as quant_synth.h):
 *   twin value   v(i) = bf16(pz_fill_value(key(seed, "X.weight"), i, init_scale, init_offset)) as f32,
 *                i the full flat index of the bf16 twin "X.weight" (INT4: the packed tensor's shape
 *                with 8x the columns; FP8: the e4m3 tensor's own shape and name)
 *   INT4 group   s = bf16(max|v| / 7.5) (0 -> bf16(2^-23)); q = clamp(rint(bf16(v / s)), -8, 7),
 *                word = sum (q + 8) << 4k over the 8 consecutive elements k of a word
 *   FP8 byte     e4m3(v / (init_scale / 448)) rounded to nearest even, saturated to +-448, NaN 0x7f;
 *                "X.weight_scale_inv" = init_scale / 448 (its own init_scale) everywhere.
 * Divisions are IEEE f32 (__fdiv_rn on the device); rint rounds half to even. */
#ifndef PZ_CORE_QUANT_FILL_H
#define PZ_CORE_QUANT_FILL_H
#include <math.h>
#include <stdint.h>
#include "core/fill_rule.h"
#include "core/ir.h"

enum { PZ_QFILL_NONE = 0, PZ_QFILL_INT4_PACKED, PZ_QFILL_INT4_SCALE, PZ_QFILL_FP8_BYTES, PZ_QFILL_FP8_SCALE };

/* Geometry of one quantised tensor's fill (plain data: passed to the kernel by value). */
typedef struct pz_qfill {
  int kind;                                      /* PZ_QFILL_* */
  int ndim, shard_dim;                           /* of the value tensor (the bf16 twin / the e4m3 tensor) */
  int64_t ne[PZ_MAX_DIMS], full_ne[PZ_MAX_DIMS]; /* its local and full shapes */
  int64_t rows, cols;                            /* local rows, and the value tensor's columns */
  int64_t group;                                 /* INT4: columns per scale */
  int64_t out_cols;                              /* columns of the filled tensor itself */
  uint64_t key;                                  /* pz_fill_name_key(seed, value tensor's name) */
  float scale, offset;                           /* value tensor's init_scale, init_offset */
  float fp8_s;                                   /* FP8: init_scale / 448 (bytes: the byte tensor's, scales: their own) */
} pz_qfill;

/* Bit helpers the host and device fills share: the f32 of bits u; a / b rounded to nearest (the
 * device's __fdiv_rn, IEEE division on the host); v rounded to bf16 as pz_fill_bf16_bits rounds it. */
PZ_FILL_HD static inline float pz_qfill_f32(uint32_t u) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(u);
#else
  float v;
  memcpy(&v, &u, 4);
  return v;
#endif
}
PZ_FILL_HD static inline float pz_qfill_div(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}
PZ_FILL_HD static inline float pz_qfill_bf16_round(float v) { return pz_qfill_f32((uint32_t)pz_fill_bf16_bits(v) << 16); }

/* The twin's value at full index i. */
PZ_FILL_HD static inline float pz_qfill_value(const pz_qfill *q, int64_t i) {
  return pz_qfill_bf16_round(pz_fill_value(q->key, (uint64_t)i, q->scale, q->offset));
}

/* bf16 bits of the scale of the INT4 group whose first element has full index base. */
PZ_FILL_HD static inline uint16_t pz_qfill_int4_scale(const pz_qfill *q, int64_t base) {
  float amax = 0.0f;
  for (int64_t j = 0; j < q->group; j++) amax = fmaxf(amax, fabsf(pz_qfill_value(q, base + j)));
  uint16_t sb = pz_fill_bf16_bits(pz_qfill_div(amax, 7.5f));
  if (pz_qfill_f32((uint32_t)sb << 16) == 0.0f) sb = pz_fill_bf16_bits(1.1920928955078125e-7f); /* float32 eps */
  return sb;
}

/* The packed word of the 8 elements from full index base, with the group's scale s (f32). */
PZ_FILL_HD static inline int32_t pz_qfill_int4_word(const pz_qfill *q, int64_t base, float s) {
  uint32_t word = 0;
  for (int k = 0; k < 8; k++) {
    float v = rintf(pz_qfill_bf16_round(pz_qfill_div(pz_qfill_value(q, base + k), s)));
    v = v < -8.0f ? -8.0f : v > 7.0f ? 7.0f : v;
    word |= (uint32_t)((int)v + 8) << (4 * k);
  }
  return (int32_t)word;
}

/* Nearest e4m3 byte to v, ties to the even code, saturating to +-448 (0x7e / 0xfe), NaN -> 0x7f:
 * the arithmetic form of pz_fp8_e4m3_from_f32 (core/quant.h). */
PZ_FILL_HD static inline uint8_t pz_qfill_e4m3(float v) {
  const uint32_t u = pz_fill_f32_bits(v), au = u & 0x7fffffffu;
  if (au > 0x7f800000u) return 0x7f;
  const uint8_t sign = (uint8_t)((u >> 24) & 0x80u);
  const float a = pz_qfill_f32(au);
  if (a >= 448.0f) return sign | 0x7e;
  const int e = (int)(au >> 23) - 127;
  int code;
  if (e < -6) { /* subnormal e4m3: multiples of 2^-9 (a * 2^9 < 8 is exact) */
    code = (int)rintf(a * 512.0f);
  } else { /* 8 + mantissa steps of 2^(e-3); m = 16 carries into the next exponent's code */
    const float m = rintf(a * pz_qfill_f32((uint32_t)(3 - e + 127) << 23));
    code = ((e + 7) << 3) + (int)m - 8;
  }
  return sign | (uint8_t)code;
}

/* Full flat index of local element (row, col) of the value tensor. */
PZ_FILL_HD static inline int64_t pz_qfill_index(const pz_qfill *q, int rank, int64_t row, int64_t col) {
  return pz_fill_row_base(q->ndim, q->ne, q->full_ne, q->shard_dim, rank, row) + col;
}

#ifdef __cplusplus
extern "C" {
#endif
/* Which fill tensor t of graph g gets (PZ_QFILL_NONE: not a quantised synthetic tensor; its fill
 * is the plain rule), and its geometry for seed: "X.weight_packed" (i32) with its "X.weight_scale"
 * sibling (bf16) and the scale itself (when "X.weight_packed" exists), "X.weight" (u8, FP8) and
 * "X.weight_scale_inv" (f32). Errors: PZ_ERR_INVALID_ARG (NULL, a packed tensor without a
 * matching scale sibling, ndim outside 1..PZ_MAX_DIMS). */
pz_status pz_qfill_plan(const pz_graph *g, const pz_tensor *t, uint64_t seed, pz_qfill *out);

/* Host twin of the device fill: local rows [row0, row0 + n_rows) of the tensor q describes, on
 * `rank`, into dst (t's dtype, rows of q->out_cols). Errors: PZ_ERR_INVALID_ARG. */
pz_status pz_qfill_rows_host(const pz_qfill *q, int rank, int64_t row0, int64_t n_rows, void *dst);
#ifdef __cplusplus
}
#endif
#endif
