/* The checkpoint loader's internals (src/model/checkpoint*.c only): the checkpoint object, its per-tensor
 * plans and the helpers more than one of those files uses. checkpoint.c opens and indexes the shards,
 * checkpoint_plan.c resolves each graph weight to checkpoint tensors (checkpoint_quant.c its quantised ones: INT4
 * pack-quantized, FP8 block scales; checkpoint_gptq.c GPTQ's), checkpoint_fill.c copies and converts the planned
 * weights. */
#ifndef PZ_MODEL_CHECKPOINT_IMPL_H
#define PZ_MODEL_CHECKPOINT_IMPL_H
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include "model/checkpoint.h"
#include "model/safetensors.h"

/* How a graph weight's full (unsharded) rows come from checkpoint tensors. */
typedef enum {
  PLAN_NONE = 0, PLAN_PLAIN, PLAN_CONCAT_ROWS, PLAN_EXPERTS, PLAN_EXPERTS_FUSED, PLAN_KVB_UK, PLAN_KVB_UV,
  PLAN_QKV,      /* GQA qkv_proj weight / bias: this rank's q rows | k rows | v rows of 3 sources (phi3:
                    3 row ranges of the checkpoint's fused qkv_proj) */
  PLAN_GATE_UP   /* GQA dense gate_up_proj: this rank's gate rows | up rows of 2 sources (phi3: the 2
                    halves of the checkpoint's fused gate_up_proj) */
} plan_kind;

/* A 2-D view of one checkpoint tensor (1-D: one row), or of rows [row0, row0 + rows) of a 2-D one
 * (a part of a fused tensor: Phi-3's qkv_proj / gate_up_proj). */
typedef struct src {
  const pz_st_tensor *w;
  int64_t row0;                /* first row of the view in w (0 but for a part of a fused tensor) */
  const float *scale;          /* F8_E4M3: f32 [ceil(rows/bm), scols], owned (aligned copy) */
  int64_t rows, cols, scols;
  const pz_st_tensor *qscale;  /* INT4 weight_packed read as values (dequantised at load): its
                                  weight_scale bf16 [rows, cols/group]; rows/cols are the values' */
  int64_t group;
  int64_t rep;                 /* > 0: an INT4 weight_scale gathered into the graph's 32-column groups: graph group c
                                  of row r reads stored element r * srow + (c / rep) * sgrp (a coarser group, or one
                                  per row, repeated: checkpoint_quant.c; GPTQ's transposed scales: checkpoint_gptq.c) */
  int64_t srow, sgrp;
  bool raw;                    /* copied as stored (packed INT4 words, e4m3 bytes into u8) */
  bool gptq;                   /* w is GPTQ's qweight stored transposed ([in/8, out]: row r of the view is column
                                  r + row0 of w), as packed words or (qscale set) values (checkpoint_gptq.c) */
} src;

typedef struct plan {
  plan_kind kind;
  int n_src;
  src *s;                      /* n_src sources */
  int64_t split;               /* CONCAT_ROWS: rows of source 0; KVB: nope + v (rows per head);
                                  EXPERTS_FUSED: rows per expert in the source */
  int64_t nope;                /* KVB: qk_nope_head_dim; EXPERTS_FUSED: first row of this
                                  projection inside an expert's rows */
  /* PLAN_QKV: rows per rank of q (heads*d) and of k / v (kvh*d), and how many ranks share one
   * kv head (1 when the kv heads are sharded; TP / num_key_value_heads when replicated): rank r's
   * q rows start at r*q_rows, its k / v rows at (r / kv_ranks) * kv_rows. PLAN_GATE_UP: q_rows =
   * intermediate rows per rank (I / TP). */
  int64_t q_rows, kv_rows, kv_ranks;
} plan;

struct pz_checkpoint {
  char *dir;
  pz_st_file **files;
  int n_files;
  struct pz_ck_file_id { dev_t dev; ino_t ino; } *file_ids; /* files[i]'s device and inode (one file under two
                                                              names in an index is opened once) */
  const pz_st_tensor **table;  /* every tensor of every shard, sorted by name */
  int n;
  int64_t bm, bn;              /* FP8 block size */
  int int4_group;              /* INT4 quantization_config's group as stored (pz_quant_config.stored_group, 0:
                                  per channel); 32 when the config has no INT4 scheme */
  int quant_kind;              /* the config's pz_wquant (set by pz_checkpoint_plan) */
  bool gptq;                   /* GPTQ INT4 (pz_quant_config.gptq): X.qweight / X.scales feed X's graph tensors */
  int gptq_zero;               /* its qzeros nibble of the zero point 8: 7 ("gptq") or 8 ("gptq_v2") */
  bool fp8_ct;                 /* compressed-tensors FP8: a weight's block scales are "X.weight_scale", which the
                                  graph's "X.weight_scale_inv" tensors and dequantised FP8 weights read */
  char prefix[32];             /* "" or "language_model." (Kimi-K2.5): put before every Hugging Face name */
  bool lm_inner;               /* names "model.X" stored as "model.language_model.X" (transformers' newer
                                * multimodal layout); lm_head.weight stays where it is */
  bool tie_word_embeddings;
  plan *plans;                 /* by graph tensor id */
  int n_plans, tp;
  /* progress */
  int64_t total_bytes, done_bytes;
  double t0, last_print;
  int progress;                /* -1 unknown, 0 off, 1 on */
  bool tty, printed;
};

/* Frees every plan (and the FP8 scale copies its sources own); ck->plans is NULL and n_plans 0 after. */
void pz_ck_free_plans(pz_checkpoint *ck);

/* IEEE-754 binary16 bits -> the f32 of the same value (exact: every f16 is an f32). */
float pz_ck_f16_to_f32(uint16_t h);

/* checkpoint_plan.c: the tensor `name` (a Hugging Face name without the checkpoint's prefix; full[cap] gets
 * the name as stored, for messages), or NULL; and "[a, b, ...]" of a shape into buf[cap]. */
const pz_st_tensor *pz_ck_find(const pz_checkpoint *ck, const char *name, char *full, size_t cap);
void pz_ck_shape_str(char *buf, size_t cap, int nd, const int64_t *ne);

/* checkpoint_quant.c: quantised sources. */
/* Whether an INT4 weight_scale's dtype is read (BF16, or F16 / F32 rounded to bf16 when filled), and the
 * PZ_ERR_DTYPE naming tensor `full` when not; whether packed words' dtype is read (I32, or U32: the same bits). */
bool pz_ck_int4_scale_dtype_ok(const pz_st_tensor *sc);
pz_status pz_ck_int4_scale_dtype_err(const pz_checkpoint *ck, const char *full, const pz_st_tensor *sc);
bool pz_ck_int4_words_dtype_ok(const pz_st_tensor *w);
/* "X.weight_shape" (shn) present, an I64 or I32 [2] holding [rows, cols]; else PZ_ERR_SHAPE saying what it is. */
pz_status pz_ck_check_weight_shape(const pz_checkpoint *ck, const char *shn, int64_t rows, int64_t cols);
/* A graph weight "X.weight" [want] (2-D) read as values from pack-quantized "X.weight_packed" / "X.weight_scale" /
 * "X.weight_shape" (dequantised at fill). Errors: PZ_ERR_SHAPE, PZ_ERR_NOT_FOUND (no scales), PZ_ERR_DTYPE. */
pz_status pz_ck_int4_values(pz_checkpoint *ck, const char *name, const char *for_t, int nd, const int64_t *want, src *s);
/* An INT4 expert's weight_scale w (BF16 / F16 / F32; `full` its stored name) as the graph's [want0, want1]
 * (32-column groups): stored [rows, in / group] (group ck->int4_group, 32 included) or [rows, 1] per channel, each
 * scale repeated (s->rep). Errors: PZ_ERR_SHAPE naming the group the config gives. */
pz_status pz_ck_int4_coarse_scale(pz_checkpoint *ck, const char *full, const pz_st_tensor *w, const int64_t *want,
                                  src *s);
/* The block scales of the FP8 e4m3 weight s->w named `name` (`full` as stored; s->rows / s->cols set), dequantised
 * to bf16 at fill: "<name>_scale_inv" ("<name>_scale" when ck->fp8_ct; F32, BF16 or F16, [ceil(rows / bm),
 * ceil(cols / bn)]) copied into s->scale as f32. Errors: PZ_ERR_DTYPE (missing, dtype or shape), PZ_ERR_IO (a non-finite or huge scale),
 * PZ_ERR_OOM. */
pz_status pz_ck_fp8_block_scales(pz_checkpoint *ck, const char *name, const char *full, src *s);

/* checkpoint_gptq.c: the GPTQ source of graph weight `name` [want0, want1] (2-D): what 0 "X.weight" as values
 * (bf16 / f32 graph weights), 1 "X.weight_packed" as compressed-tensors words [out, in/8], 2 "X.weight_scale" as
 * bf16 scales per 32 columns [out, in/32]; from X.qweight / X.scales, with X.qzeros and X.g_idx checked.
 * Errors: PZ_ERR_NOT_FOUND, PZ_ERR_SHAPE, PZ_ERR_DTYPE, PZ_ERR_UNSUPPORTED (asymmetric zero points, act order). */
pz_status pz_ck_gptq_source(pz_checkpoint *ck, const char *name, const char *for_t, int nd, const int64_t *want, int what,
                            src *s);
#endif
