/* Op cases of the backend-ops harness (ggml test-backend-ops style), shared by test_backend_ops.c
 * (CPU op vs independent references) and cuda/test_backend_ops_cuda.c (CUDA op vs the CPU op). */
#ifndef PZ_TEST_BACKEND_OPS_CASES_H
#define PZ_TEST_BACKEND_OPS_CASES_H
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/fingerprint.h" /* pz_fnv1a64 */
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/ref_ops.h"
#include "core/ir.h"
#include "pz_test.h"

/* Every case is one small graph holding the op (a few nodes for the prezero ops), of BO_M rows;
 * its step runs c->m <= BO_M of them. The op's inputs are WEIGHT tensors filled by bo_value on
 * both backends (a load_weight hook), so both see the same bits; tokens and positions come in
 * through the step; KV caches get the executors' own seeded fill (identical by contract). */
enum { BO_M = 8, BO_MAX_IN = PZ_MLA_NSRC + 1, BO_MAX_OUT = 5 }; /* in: the MLA case's slots + its output */

/* Variant flags (bo_case.var). */
enum {
  BO_BF16 = 1,        /* RMSNORM: x is bf16 (else f32) */
  BO_STRIDED = 2,     /* RMSNORM, SILU_MUL: input and output are column slices of wider tensors; GEMM: C is columns [64, 64+n) of a buffer */
  BO_BIAS = 4,        /* GEMM: with a bias */
  BO_ACCUM = 8,       /* GEMM: zero_init = false onto a STATE C (zero before the step) */
  BO_REAL = 16,       /* GEMM, LM_HEAD, ARGMAX: real-valued inputs (else small integers, exact in any order) */
  BO_NAN = 32,        /* ARGMAX: logit [1, 2] of the last rank is NaN: it must win row 1 */
  BO_PADMAX = 64,     /* ARGMAX: the padding columns (ids >= vocab) hold the largest value: they must be skipped */
  BO_GATE_ON = 128,   /* prezero ops: PREZERO_FORCE_GATE=on */
  BO_GATE_OFF = 256,  /* prezero ops: PREZERO_FORCE_GATE=off (neither flag: the gate decides) */
};

/* One case: op, TP degree, rows stepped, dims a/b/c (meaning per op, see bo_label), variant,
 * and cuda_gap: NULL, or why the CUDA kernels cannot take this shape (the limit they document). */
typedef struct bo_case {
  pz_op op;
  int tp, m;
  int64_t a, b, c;
  int var;
  const char *cuda_gap;
} bo_case;

/* MLA shapes (bo_case.a of an MLA_ATTN case indexes this). */
typedef struct bo_mla_shape {
  const char *name;
  int heads;
  int64_t H, q_lora, kv_lora, nope, rope, v, max_ctx;
  float yarn_factor; /* 0: plain RoPE, else YaRN with mscale 0.707 */
} bo_mla_shape;
static const bo_mla_shape bo_mla_shapes[] = {
    {"q-LoRA kv96", 2, 128, 64, 96, 32, 32, 32, 16, 0.f},
    {"no-q-LoRA kv128 yarn", 2, 64, 0, 128, 32, 32, 32, 24, 40.f},
    {"odd q-LoRA kv20", 3, 24, 16, 20, 6, 4, 5, 9, 0.f},
};

/* MoE shapes (bo_case.a of a MOE case indexes this). */
typedef struct bo_moe_shape {
  const char *name;
  int64_t H;
  pz_moe_params p;
} bo_moe_shape;
static const bo_moe_shape bo_moe_shapes[] = {
    {"E8 top2 softmax greedy", 64, {8, 2, 1, 1, PZ_SCORE_SOFTMAX, PZ_TOPK_GREEDY, false, 1.0f, 32, 0, 0, 0, 0, 0, 0, 0, 0, 0}},
    {"E16 top4 sigmoid noaux_tc +shared", 64, {16, 4, 4, 2, PZ_SCORE_SIGMOID, PZ_TOPK_NOAUX_TC, true, 2.5f, 32, 64, 0, 0, 0, 0, 0, 0, 0, 0}},
    {"E6 top3 group_limited +shared", 48, {6, 3, 3, 2, PZ_SCORE_SOFTMAX, PZ_TOPK_GROUP_LIMITED, true, 1.0f, 16, 32, 0, 0, 0, 0, 0, 0, 0, 0}},
    {"odd E5 top2 H20", 20, {5, 2, 1, 1, PZ_SCORE_SOFTMAX, PZ_TOPK_GREEDY, false, 1.0f, 12, 12, 0, 0, 0, 0, 0, 0, 0, 0}},
};

/* GQA shapes (bo_case.a of a GQA_ATTN case indexes this). */
typedef struct bo_gqa_shape {
  const char *name;
  int heads, kvh;
  int64_t d, H, max_ctx;
  int qk_norm;
  pz_rope_type rope;
  int64_t window; /* sliding window in tokens (0: full attention) */
} bo_gqa_shape;
static const bo_gqa_shape bo_gqa_shapes[] = {
    {"ratio 2 d64", 4, 2, 64, 128, 40, 0, PZ_ROPE_DEFAULT, 0},
    {"ratio 4 d128 qk-norm llama3", 8, 2, 128, 256, 70, 1, PZ_ROPE_LLAMA3, 0},
    {"ratio 1 d64 qk-norm yarn", 2, 2, 64, 64, 16, 1, PZ_ROPE_YARN, 0},
    {"odd ratio 3 d24", 3, 1, 24, 40, 9, 0, PZ_ROPE_DEFAULT, 0},
    {"ratio 2 d32 qk-norm longrope", 4, 2, 32, 64, 40, 1, PZ_ROPE_LONGROPE, 0},
    {"ratio 2 d64 window 5", 4, 2, 64, 128, 40, 0, PZ_ROPE_DEFAULT, 5},
    {"ratio 4 d128 qk-norm window 33", 8, 2, 128, 256, 70, 1, PZ_ROPE_DEFAULT, 33},
};

#define BO_AR8 "H must be a multiple of 8 (ar_fused.h)"
#define BO_MOE16 "H and the intermediate sizes must be multiples of 16 (moe.h)"
/* Donor graphs: buffer of BO_NT columns, always-zeroed prefix BO_NB; consumer 0 writes columns
 * [0, 64), consumer 1 [BO_NB, BO_NB + 64); [64, BO_NB) and [BO_NB + 64, BO_NT) are only filled. */
enum { BO_NT = 256, BO_NB = 128, BO_NC = 64 };

/* The cases: every op at several shapes (odd ones where the CPU allows), TP 1 and 2. */
static const bo_case bo_cases[] = {
    /* EMBEDDING: a = H, b = vocab (vocab_per_rank = ceil(vocab / tp), the last rank padded) */
    {PZ_OP_EMBEDDING, 1, 1, 64, 128, 0, 0, NULL},
    {PZ_OP_EMBEDDING, 1, 5, 40, 67, 0, 0, NULL},
    {PZ_OP_EMBEDDING, 2, 4, 64, 129, 0, 0, NULL},
    {PZ_OP_EMBEDDING, 2, 7, 24, 50, 0, 0, NULL},
    /* RMSNORM: a = n */
    {PZ_OP_RMSNORM, 1, 1, 64, 0, 0, 0, NULL},
    {PZ_OP_RMSNORM, 1, 3, 37, 0, 0, BO_BF16, NULL},
    {PZ_OP_RMSNORM, 1, 4, 1500, 0, 0, BO_BF16, NULL},
    {PZ_OP_RMSNORM, 1, 6, 64, 0, 0, BO_STRIDED, NULL},
    {PZ_OP_RMSNORM, 2, 5, 96, 0, 0, BO_STRIDED, NULL},
    {PZ_OP_RMSNORM, 2, 8, 40, 0, 0, BO_BF16 | BO_STRIDED, NULL},
    /* AR_RMSNORM: a = H; two nodes: without residual, then with it (in place) */
    {PZ_OP_AR_RMSNORM, 1, 1, 64, 0, 0, 0, NULL},
    {PZ_OP_AR_RMSNORM, 1, 3, 37, 0, 0, 0, BO_AR8},
    {PZ_OP_AR_RMSNORM, 1, 6, 512, 0, 0, 0, NULL},
    {PZ_OP_AR_RMSNORM, 2, 4, 512, 0, 0, 0, NULL},
    {PZ_OP_AR_RMSNORM, 2, 5, 40, 0, 0, 0, NULL},
    {PZ_OP_AR_RMSNORM, 2, 8, 64, 0, 0, 0, NULL},
    /* GEMM: a = n, b = k, c = split_k (0: backend's choice) */
    {PZ_OP_GEMM, 1, 1, 64, 64, 0, 0, NULL},
    {PZ_OP_GEMM, 1, 3, 37, 100, 3, BO_BIAS, NULL}, /* CUDA: pz_cuda_gemm_any's plain kernel (not multiples of 64) */
    {PZ_OP_GEMM, 1, 5, 128, 192, 2, BO_BIAS | BO_STRIDED, NULL},
    {PZ_OP_GEMM, 1, 2, 64, 128, 2, BO_ACCUM | BO_BIAS, NULL},
    {PZ_OP_GEMM, 1, 6, 64, 512, 0, BO_REAL, NULL},
    {PZ_OP_GEMM, 2, 4, 64, 1024, 2, 0, NULL},
    {PZ_OP_GEMM, 2, 7, 192, 256, 0, BO_REAL | BO_STRIDED, NULL},
    {PZ_OP_GEMM, 2, 3, 64, 2304, 0, BO_BIAS | BO_REAL, NULL},
    /* MLA_ATTN: a = bo_mla_shapes index */
    {PZ_OP_MLA_ATTN, 1, 1, 0, 0, 0, 0, NULL},
    {PZ_OP_MLA_ATTN, 1, 3, 2, 0, 0, 0, "kv_lora_rank must be 96, 128, 256 or 512, the GEMM dims multiples of 64 (mla.h)"},
    {PZ_OP_MLA_ATTN, 1, 4, 1, 0, 0, 0, NULL},
    {PZ_OP_MLA_ATTN, 2, 3, 0, 0, 0, 0, NULL},
    {PZ_OP_MLA_ATTN, 2, 5, 1, 0, 0, 0, NULL},
    /* MOE: a = bo_moe_shapes index */
    {PZ_OP_MOE, 1, 3, 0, 0, 0, 0, NULL},
    {PZ_OP_MOE, 1, 5, 1, 0, 0, 0, NULL},
    {PZ_OP_MOE, 1, 2, 3, 0, 0, 0, BO_MOE16},
    {PZ_OP_MOE, 1, 6, 2, 0, 0, 0, NULL},
    {PZ_OP_MOE, 2, 4, 1, 0, 0, 0, NULL},
    {PZ_OP_MOE, 2, 7, 2, 0, 0, 0, NULL},
    /* DENSE_MLP: a = H, b = intermediate size per rank */
    {PZ_OP_DENSE_MLP, 1, 1, 64, 128, 0, 0, NULL},
    {PZ_OP_DENSE_MLP, 1, 3, 20, 24, 0, 0, BO_MOE16},
    {PZ_OP_DENSE_MLP, 1, 5, 48, 80, 0, 0, NULL},
    {PZ_OP_DENSE_MLP, 2, 4, 64, 96, 0, 0, NULL},
    {PZ_OP_DENSE_MLP, 2, 8, 128, 64, 0, 0, NULL},
    /* GQA_ATTN: a = bo_gqa_shapes index */
    {PZ_OP_GQA_ATTN, 1, 1, 0, 0, 0, 0, NULL},
    {PZ_OP_GQA_ATTN, 1, 4, 1, 0, 0, 0, NULL},
    {PZ_OP_GQA_ATTN, 1, 3, 3, 0, 0, 0, "head_dim must be 16, 32, 64, 96 or 128 (gqa.h)"},
    {PZ_OP_GQA_ATTN, 1, 6, 2, 0, 0, 0, NULL},
    {PZ_OP_GQA_ATTN, 2, 5, 0, 0, 0, 0, NULL},
    {PZ_OP_GQA_ATTN, 2, 3, 1, 0, 0, 0, NULL},
    {PZ_OP_GQA_ATTN, 1, 5, 4, 0, 0, 0, NULL},
    {PZ_OP_GQA_ATTN, 2, 4, 4, 0, 0, 0, NULL},
    {PZ_OP_GQA_ATTN, 1, 8, 5, 0, 0, 0, NULL},
    {PZ_OP_GQA_ATTN, 2, 6, 6, 0, 0, 0, NULL},
    /* SILU_MUL: a = inter (gu [m, 2a] f32 -> act [m, a] bf16) */
    {PZ_OP_SILU_MUL, 1, 1, 64, 0, 0, 0, NULL},
    {PZ_OP_SILU_MUL, 1, 5, 37, 0, 0, 0, NULL},
    {PZ_OP_SILU_MUL, 1, 8, 1000, 0, 0, BO_STRIDED, NULL},
    {PZ_OP_SILU_MUL, 2, 4, 96, 0, 0, 0, NULL},
    {PZ_OP_SILU_MUL, 2, 3, 21, 0, 0, BO_STRIDED, NULL},
    /* LM_HEAD: a = H, b = vocab (vocab_per_rank = ceil(vocab / tp)) */
    {PZ_OP_LM_HEAD, 1, 2, 64, 128, 0, 0, NULL},
    {PZ_OP_LM_HEAD, 1, 3, 40, 50, 0, 0, NULL},
    {PZ_OP_LM_HEAD, 1, 5, 128, 192, 0, BO_REAL, NULL},
    {PZ_OP_LM_HEAD, 2, 4, 128, 256, 0, BO_REAL, NULL},
    {PZ_OP_LM_HEAD, 2, 6, 64, 250, 0, 0, NULL},
    /* ARGMAX: a = vocab */
    {PZ_OP_ARGMAX, 1, 3, 100, 0, 0, 0, NULL},
    {PZ_OP_ARGMAX, 1, 4, 97, 0, 0, BO_NAN, NULL},
    {PZ_OP_ARGMAX, 2, 5, 131, 0, 0, BO_PADMAX, NULL},
    {PZ_OP_ARGMAX, 2, 8, 256, 0, 0, BO_REAL, NULL},
    {PZ_OP_ARGMAX, 2, 2, 64, 0, 0, BO_NAN, NULL},
    /* AR_RMSNORM_MAYBE_PREZERO: a = H, b = consumers' k (AR_RMSNORM, donor, 2 consumers) */
    {PZ_OP_AR_RMSNORM_MAYBE_PREZERO, 1, 1, 64, 64, 0, BO_GATE_ON, NULL},
    {PZ_OP_AR_RMSNORM_MAYBE_PREZERO, 1, 3, 37, 64, 0, BO_GATE_OFF, BO_AR8},
    {PZ_OP_AR_RMSNORM_MAYBE_PREZERO, 1, 4, 128, 64, 0, BO_GATE_OFF, NULL},
    {PZ_OP_AR_RMSNORM_MAYBE_PREZERO, 2, 4, 64, 128, 0, BO_GATE_ON, NULL},
    {PZ_OP_AR_RMSNORM_MAYBE_PREZERO, 2, 5, 512, 64, 0, BO_GATE_OFF, NULL},
    {PZ_OP_AR_RMSNORM_MAYBE_PREZERO, 2, 8, 64, 64, 0, 0, NULL},
    /* MM_MAYBE_PREZERO: the same graphs, checked at the consumers */
    {PZ_OP_MM_MAYBE_PREZERO, 1, 2, 64, 64, 0, BO_GATE_ON, NULL},
    {PZ_OP_MM_MAYBE_PREZERO, 1, 3, 40, 100, 0, BO_GATE_OFF, NULL},
    {PZ_OP_MM_MAYBE_PREZERO, 1, 5, 64, 64, 0, BO_GATE_OFF, NULL},
    {PZ_OP_MM_MAYBE_PREZERO, 1, 6, 64, 128, 0, 0, NULL},
    {PZ_OP_MM_MAYBE_PREZERO, 2, 4, 64, 64, 0, BO_GATE_OFF, NULL},
    {PZ_OP_MM_MAYBE_PREZERO, 2, 7, 128, 192, 0, BO_GATE_ON, NULL},
};
#define BO_N_CASES ((int)(sizeof bo_cases / sizeof bo_cases[0]))

/* How an output is compared between backends (cuda/test_backend_ops.c states each bound). */
typedef enum bo_tol { BO_TOL_EXACT, BO_TOL_ULP, BO_TOL_REL, BO_TOL_MLA } bo_tol;
typedef struct bo_out {
  int id;          /* tensor compared: rows [0, m) of a 2-D one (every column of its row stride
                      span when it is a buffer with views), all of a 3-D one (KV cache) */
  bo_tol tol;
  double rel;      /* BO_TOL_REL: |d| <= rel * max|ref row| + 1e-6 */
} bo_out;

/* A built case: the graph, its inputs (op-specific order, see each builder) and outputs. */
typedef struct bo_graph {
  const bo_case *c;
  pz_graph *g;
  int in[BO_MAX_IN];
  int n_out;
  bo_out out[BO_MAX_OUT];
  int32_t tokens[BO_M], pos[BO_M];
} bo_graph;

static inline int64_t bo_vpr(int64_t vocab, int tp) { return (vocab + tp - 1) / tp; }

/* Dims of a case as text ("tp=2 m=4 H=64 vocab=129 ..."), into buf[len]. */
static inline const char *bo_label(const bo_case *c, char *buf, size_t len) {
  int k = snprintf(buf, len, "tp=%d m=%d ", c->tp, c->m);
  char *p = buf + k;
  size_t l = len - (size_t)k;
  const int64_t a = c->a, b = c->b;
  switch (c->op) {
    case PZ_OP_EMBEDDING: case PZ_OP_LM_HEAD: snprintf(p, l, "H=%lld vocab=%lld", (long long)a, (long long)b); break;
    case PZ_OP_RMSNORM: snprintf(p, l, "n=%lld %s%s", (long long)a, c->var & BO_BF16 ? "bf16" : "f32", c->var & BO_STRIDED ? " strided" : ""); break;
    case PZ_OP_AR_RMSNORM: snprintf(p, l, "H=%lld", (long long)a); break;
    case PZ_OP_GEMM: snprintf(p, l, "n=%lld k=%lld split=%lld%s%s%s%s", (long long)a, (long long)b, (long long)c->c,
                              c->var & BO_BIAS ? " bias" : "", c->var & BO_ACCUM ? " accumulate" : "",
                              c->var & BO_STRIDED ? " C-slice" : "", c->var & BO_REAL ? " real" : " int"); break;
    case PZ_OP_MLA_ATTN: snprintf(p, l, "%s", bo_mla_shapes[a].name); break;
    case PZ_OP_GQA_ATTN: snprintf(p, l, "%s (H %lld)", bo_gqa_shapes[a].name, (long long)bo_gqa_shapes[a].H); break;
    case PZ_OP_SILU_MUL: snprintf(p, l, "inter=%lld%s", (long long)a, c->var & BO_STRIDED ? " strided" : ""); break;
    case PZ_OP_MOE: snprintf(p, l, "H=%lld %s", (long long)bo_moe_shapes[a].H, bo_moe_shapes[a].name); break;
    case PZ_OP_DENSE_MLP: snprintf(p, l, "H=%lld inter=%lld", (long long)a, (long long)b); break;
    case PZ_OP_ARGMAX: snprintf(p, l, "vocab=%lld%s%s", (long long)a, c->var & BO_NAN ? " NaN" : "",
                                c->var & BO_PADMAX ? " padding-max" : c->var & BO_REAL ? " real" : " ties"); break;
    default: snprintf(p, l, "H=%lld k=%lld gate=%s", (long long)a, (long long)b,
                      c->var & BO_GATE_ON ? "on" : c->var & BO_GATE_OFF ? "off" : "calibrated");
  }
  return buf;
}

/* ---------------------------------------------------------------- input values */

static inline uint64_t bo_mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/* Element idx (flat, from element 0) of WEIGHT tensor t on `rank`: a hash of (name, rank, idx).
 * init_scale >= 1: the integers [-S, S] (S = init_scale) + init_offset; else init_offset +
 * init_scale * u, u in [-1, 1) on a 2^-23 grid. ARGMAX specials per bo_case.var. */
static inline float bo_value(const bo_graph *bg, const pz_tensor *t, int rank, int64_t idx) {
  uint64_t h = pz_fnv1a64(PZ_FNV1A64_OFFSET, t->name, strlen(t->name));
  h = bo_mix(bo_mix(h ^ (uint64_t)(rank + 1) * 0x632be59bd9b4e019ull) + (uint64_t)idx);
  const bo_case *c = bg->c;
  if (c->op == PZ_OP_ARGMAX && t->id == bg->in[0]) {
    int64_t ld = t->ne[1], j = idx % ld;
    if ((c->var & BO_NAN) && rank == c->tp - 1 && idx == ld + 2) return NAN;
    if ((c->var & BO_PADMAX) && rank * ld + j >= c->a) return 1e6f;
  }
  if (t->init_scale >= 1.0f) {
    int64_t S = (int64_t)t->init_scale;
    return (float)((int64_t)(h % (uint64_t)(2 * S + 1)) - S) + t->init_offset;
  }
  return t->init_offset + t->init_scale * ((float)(h >> 40) * (1.0f / 8388608.0f) - 1.0f);
}

/* Stores v as element i of dst in t's dtype. */
static inline void bo_store(const pz_tensor *t, void *dst, int64_t i, float v) {
  if (t->dtype == PZ_BF16) ((pz_bf16 *)dst)[i] = pz_f32_to_bf16(v);
  else if (t->dtype == PZ_I32) ((int32_t *)dst)[i] = (int32_t)v;
  else ((float *)dst)[i] = v;
}

/* load_weight hook of the CPU executor (user = the bo_graph). */
static inline pz_status bo_load_cpu(void *user, const pz_tensor *t, int rank, void *dst) {
  int64_t n = pz_tensor_span(t);
  for (int64_t i = 0; i < n; i++) bo_store(t, dst, i, bo_value(user, t, rank, i));
  return PZ_OK;
}

/* Element (i, j) of 2-D tensor t at base (its element 0) as f32; of a 1-D one: element i + j. */
static inline float bo_get(const pz_tensor *t, const void *base, int64_t i, int64_t j) {
  int64_t o = t->ndim == 1 ? (i + j) * t->stride[0] : i * t->stride[0] + j * t->stride[1];
  if (t->dtype == PZ_BF16) return pz_bf16_to_f32(((const pz_bf16 *)base)[o]);
  if (t->dtype == PZ_I32) return (float)((const int32_t *)base)[o];
  return ((const float *)base)[o];
}

/* ---------------------------------------------------------------- graph building */

/* Adds a tensor; scale/offset are the bo_value fill of a WEIGHT. ACT and INPUT are batched. */
static inline int bo_t(bo_graph *bg, const char *name, pz_dtype dt, pz_tensor_kind k, int nd, int64_t a, int64_t b,
                       int64_t c, float scale, float offset) {
  int id = -1;
  int64_t ne[3] = {a, b, c};
  CHECK_OK(pz_graph_add_tensor(bg->g, name, dt, k, nd, ne, &id));
  if (id < 0) return -1;
  pz_tensor *t = &bg->g->tensors[id];
  t->init_scale = scale;
  t->init_offset = offset;
  t->batched = (k == PZ_T_ACT || k == PZ_T_INPUT);
  return id;
}
static inline void bo_node(bo_graph *bg, pz_op op, const char *name, const int *src, int ns, const int *dst, int nd,
                           const pz_op_params *p) {
  CHECK_OK(pz_graph_add_node(bg->g, op, name, 0, PZ_ROLE_NONE, src, ns, dst, nd, p, NULL));
}
static inline void bo_out_add(bo_graph *bg, int id, bo_tol tol, double rel) {
  if (bg->n_out < BO_MAX_OUT) bg->out[bg->n_out++] = (bo_out){id, tol, rel};
}
/* A bf16 norm weight 1 + U(-0.05, 0.05). */
static inline int bo_normw(bo_graph *bg, const char *name, int64_t n) {
  return bo_t(bg, name, PZ_BF16, PZ_T_WEIGHT, 1, n, 0, 0, 0.05f, 1.0f);
}

static void bo_build_embedding(bo_graph *bg) {
  const bo_case *c = bg->c;
  const int64_t H = c->a, V = c->b, vpr = bo_vpr(V, c->tp);
  int tok = bo_t(bg, "tokens", PZ_I32, PZ_T_INPUT, 1, BO_M, 0, 0, 0, 0);
  bg->g->in_tokens = tok;
  int W = bo_t(bg, "embed.weight", PZ_BF16, PZ_T_WEIGHT, 2, vpr, H, 0, 1.0f, 0);
  int out = bo_t(bg, "embed.out", PZ_F32, PZ_T_ACT, 2, BO_M, H, 0, 0, 0);
  pz_op_params p = {.vocab = {.vocab_size = V, .vocab_per_rank = vpr}};
  bo_node(bg, PZ_OP_EMBEDDING, "embed", (int[]){tok, W}, 2, (int[]){out}, 1, &p);
  bg->in[0] = tok; bg->in[1] = W;
  bo_out_add(bg, out, BO_TOL_EXACT, 0);
  /* the last id, id 0, both sides of the shard boundary, then a spread */
  for (int i = 0; i < BO_M; i++) bg->tokens[i] = (int32_t)((i * 37 + 11) % V);
  bg->tokens[0] = (int32_t)(V - 1);
  bg->tokens[1] = 0;
  bg->tokens[2] = (int32_t)(vpr - 1);
  bg->tokens[3] = (int32_t)(vpr < V ? vpr : V - 2);
}

static void bo_build_rmsnorm(bo_graph *bg) {
  const bo_case *c = bg->c;
  const int64_t n = c->a;
  const pz_dtype dt = c->var & BO_BF16 ? PZ_BF16 : PZ_F32;
  int x, y;
  if (c->var & BO_STRIDED) {
    int xb = bo_t(bg, "x.base", dt, PZ_T_WEIGHT, 2, BO_M, n + 16, 0, 1.0f, 0);
    x = bo_t(bg, "x", dt, PZ_T_WEIGHT, 2, BO_M, n, 0, 0, 0);
    CHECK_OK(pz_graph_make_col_view(bg->g, x, xb, 8));
    int yb = bo_t(bg, "y.base", PZ_BF16, PZ_T_ACT, 2, BO_M, n + 32, 0, 0, 0);
    CHECK_OK(pz_graph_add_col_slice(bg->g, "y", yb, 16, n, &y));
  } else {
    x = bo_t(bg, "x", dt, PZ_T_WEIGHT, 2, BO_M, n, 0, 1.0f, 0);
    y = bo_t(bg, "y", PZ_BF16, PZ_T_ACT, 2, BO_M, n, 0, 0, 0);
  }
  int w = bo_normw(bg, "norm.weight", n);
  pz_op_params p = {.norm = {.eps = 1e-6f, .fill_buf = -1}};
  bo_node(bg, PZ_OP_RMSNORM, "norm", (int[]){x, w}, 2, (int[]){y}, 1, &p);
  bg->in[0] = x; bg->in[1] = w;
  bo_out_add(bg, y, BO_TOL_ULP, 0);
}

/* ar0: AR_RMSNORM without residual (p0, w0 -> x0, R); ar1: with it (p1, w1, R -> x1, R). */
static void bo_build_ar(bo_graph *bg) {
  const int64_t H = bg->c->a;
  int p0 = bo_t(bg, "partial0", PZ_F32, PZ_T_WEIGHT, 2, BO_M, H, 0, 1.0f, 0);
  int p1 = bo_t(bg, "partial1", PZ_F32, PZ_T_WEIGHT, 2, BO_M, H, 0, 1.0f, 0);
  int w0 = bo_normw(bg, "ar0.weight", H), w1 = bo_normw(bg, "ar1.weight", H);
  int x0 = bo_t(bg, "ar0.out", PZ_BF16, PZ_T_ACT, 2, BO_M, H, 0, 0, 0);
  int x1 = bo_t(bg, "ar1.out", PZ_BF16, PZ_T_ACT, 2, BO_M, H, 0, 0, 0);
  int R = bo_t(bg, "residual", PZ_F32, PZ_T_ACT, 2, BO_M, H, 0, 0, 0);
  pz_op_params p = {.norm = {.eps = 1e-6f, .has_residual = false, .fill_buf = -1}};
  bo_node(bg, PZ_OP_AR_RMSNORM, "ar0", (int[]){p0, w0, -1}, 3, (int[]){x0, R}, 2, &p);
  p.norm.has_residual = true;
  bo_node(bg, PZ_OP_AR_RMSNORM, "ar1", (int[]){p1, w1, R}, 3, (int[]){x1, R}, 2, &p);
  memcpy(bg->in, (int[]){p0, w0, p1, w1, x0, x1, R}, 7 * sizeof(int));
  bo_out_add(bg, x0, BO_TOL_ULP, 0);
  bo_out_add(bg, x1, BO_TOL_ULP, 0);
  bo_out_add(bg, R, BO_TOL_EXACT, 0);
}

/* GEMM (and LM_HEAD): in = {A, W, bias or -1, C, C's buffer or -1}. */
static void bo_build_gemm(bo_graph *bg) {
  const bo_case *c = bg->c;
  const bool lm = c->op == PZ_OP_LM_HEAD, real = c->var & BO_REAL;
  const int64_t n = lm ? bo_vpr(c->b, c->tp) : c->a, k = lm ? c->a : c->b;
  int A = bo_t(bg, "A", PZ_BF16, PZ_T_WEIGHT, 2, BO_M, k, 0, real ? 1.0f : 2.0f, 0);
  int W = bo_t(bg, "W", PZ_BF16, PZ_T_WEIGHT, 2, n, k, 0, real ? 1.0f : 2.0f, 0);
  int bias = c->var & BO_BIAS ? bo_t(bg, "bias", PZ_F32, PZ_T_WEIGHT, 1, n, 0, 0, real ? 1.0f : 3.0f, 0) : -1;
  int C, buf = -1;
  if (c->var & BO_STRIDED) {
    buf = bo_t(bg, "C.buffer", PZ_F32, PZ_T_ACT, 2, BO_M, n + 128, 0, 0, 0);
    CHECK_OK(pz_graph_add_col_slice(bg->g, "C", buf, 64, n, &C));
  } else {
    C = bo_t(bg, "C", PZ_F32, c->var & BO_ACCUM ? PZ_T_STATE : PZ_T_ACT, 2, BO_M, n, 0, 0, 0);
  }
  pz_op_params p = {.gemm = {.zero_init = !(c->var & BO_ACCUM), .split_k = (int)c->c, .prezero_buf = -1}};
  bo_node(bg, lm ? PZ_OP_LM_HEAD : PZ_OP_GEMM, lm ? "lm_head" : "gemm", (int[]){A, W, bias}, 3, (int[]){C}, 1, &p);
  memcpy(bg->in, (int[]){A, W, bias, C, buf}, 5 * sizeof(int));
  bo_out_add(bg, buf >= 0 ? buf : C, real ? BO_TOL_REL : BO_TOL_EXACT, 1e-5);
}

static void bo_build_argmax(bo_graph *bg) {
  const bo_case *c = bg->c;
  const int64_t V = c->a, vpr = bo_vpr(V, c->tp);
  int L = bo_t(bg, "logits", PZ_F32, PZ_T_WEIGHT, 2, BO_M, vpr, 0, c->var & BO_REAL ? 1.0f : 2.0f, 0);
  int ids = bo_t(bg, "ids", PZ_I32, PZ_T_ACT, 1, BO_M, 0, 0, 0, 0);
  pz_op_params p = {.vocab = {.vocab_size = V, .vocab_per_rank = vpr}};
  bo_node(bg, PZ_OP_ARGMAX, "argmax", (int[]){L}, 1, (int[]){ids}, 1, &p);
  bg->g->out_tokens = ids;
  bg->in[0] = L; bg->in[1] = ids;
}

/* MLA_ATTN: in = the node's PZ_MLA_NSRC source slots; the output is in[PZ_MLA_NSRC]. */
static void bo_build_mla(bo_graph *bg) {
  const bo_mla_shape *s = &bo_mla_shapes[bg->c->a];
  const int64_t qh = s->nope + s->rope, kvw = s->kv_lora + s->rope;
  int src[PZ_MLA_NSRC];
  for (int i = 0; i < PZ_MLA_NSRC; i++) src[i] = -1;
  if (s->q_lora > 0) {
    src[PZ_MLA_QKV_A] = bo_t(bg, "qkv_a", PZ_F32, PZ_T_WEIGHT, 2, BO_M, s->q_lora + kvw, 0, 1.0f, 0);
    src[PZ_MLA_QA_NORM_W] = bo_normw(bg, "q_a_layernorm.weight", s->q_lora);
    src[PZ_MLA_QB_W] = bo_t(bg, "q_b_proj.weight", PZ_BF16, PZ_T_WEIGHT, 2, s->heads * qh, s->q_lora, 0,
                            1.0f / sqrtf((float)s->q_lora), 0);
  } else {
    src[PZ_MLA_Q] = bo_t(bg, "q", PZ_F32, PZ_T_WEIGHT, 2, BO_M, s->heads * qh, 0, 1.0f, 0);
    src[PZ_MLA_KV_A] = bo_t(bg, "kv_a", PZ_F32, PZ_T_WEIGHT, 2, BO_M, kvw, 0, 1.0f, 0);
  }
  const float wl = 1.0f / sqrtf((float)s->kv_lora);
  src[PZ_MLA_KVA_NORM_W] = bo_normw(bg, "kv_a_layernorm.weight", s->kv_lora);
  src[PZ_MLA_W_UK] = bo_t(bg, "w_uk", PZ_BF16, PZ_T_WEIGHT, 3, s->heads, s->nope, s->kv_lora, wl, 0);
  src[PZ_MLA_W_UV] = bo_t(bg, "w_uv", PZ_BF16, PZ_T_WEIGHT, 3, s->heads, s->v, s->kv_lora, wl, 0);
  src[PZ_MLA_O_W] = bo_t(bg, "o_proj.weight", PZ_BF16, PZ_T_WEIGHT, 2, s->H, s->heads * s->v, 0,
                         1.0f / sqrtf((float)(s->heads * s->v)), 0);
  src[PZ_MLA_KV_CACHE] = bo_t(bg, "attn.kv_cache", PZ_BF16, PZ_T_STATE, 3, BO_M, s->max_ctx, kvw, 1.0f, 0);
  src[PZ_MLA_POS] = bo_t(bg, "positions", PZ_I32, PZ_T_INPUT, 1, BO_M, 0, 0, 0, 0);
  bg->g->in_pos = src[PZ_MLA_POS];
  int out = bo_t(bg, "attn.out", PZ_F32, PZ_T_ACT, 2, BO_M, s->H, 0, 0, 0);
  pz_op_params p = {.mla = {.n_heads = s->heads, .hidden = s->H, .q_lora_rank = s->q_lora, .kv_lora_rank = s->kv_lora,
                            .qk_nope_head_dim = s->nope, .qk_rope_head_dim = s->rope, .v_head_dim = s->v,
                            .max_ctx = s->max_ctx, .eps = 1e-6f, .rope = {.theta = 10000.f, .factor = 1.f}}};
  if (s->yarn_factor > 0) {
    p.mla.rope = (pz_rope_params){.theta = 10000.f, .factor = s->yarn_factor, .original_max_position_embeddings = 4096,
                                  .beta_fast = 32.f, .beta_slow = 1.f, .mscale = 0.707f, .mscale_all_dim = 0.707f};
  }
  p.mla.softmax_scale = pz_ref_mla_softmax_scale(s->nope, s->rope, &p.mla.rope);
  bo_node(bg, PZ_OP_MLA_ATTN, "attn", src, PZ_MLA_NSRC, (int[]){out}, 1, &p);
  memcpy(bg->in, src, sizeof src);
  bg->in[PZ_MLA_NSRC] = out;
  /* the last cache slot, slot 0, then a spread */
  for (int i = 0; i < BO_M; i++) bg->pos[i] = (int32_t)((i * 7 + 2) % s->max_ctx);
  bg->pos[0] = (int32_t)(s->max_ctx - 1);
  bg->pos[1] = 0;
  bo_out_add(bg, out, BO_TOL_MLA, 0);
  bo_out_add(bg, src[PZ_MLA_KV_CACHE], BO_TOL_ULP, 0);
}

/* GQA_ATTN: in = the node's PZ_GQA_NSRC source slots; the output is in[PZ_GQA_NSRC]. The caches
 * [BO_M, kvh, max_ctx, d] are the executors' seeded fill (".k_cache" / ".v_cache"). */
static void bo_build_gqa(bo_graph *bg) {
  const bo_gqa_shape *s = &bo_gqa_shapes[bg->c->a];
  const int64_t d = s->d, hd = s->heads * d;
  int src[PZ_GQA_NSRC];
  for (int i = 0; i < PZ_GQA_NSRC; i++) src[i] = -1;
  src[PZ_GQA_QKV] = bo_t(bg, "qkv", PZ_F32, PZ_T_WEIGHT, 2, BO_M, (s->heads + 2 * s->kvh) * d, 0, 1.0f, 0);
  if (s->qk_norm) {
    src[PZ_GQA_Q_NORM_W] = bo_normw(bg, "q_norm.weight", d);
    src[PZ_GQA_K_NORM_W] = bo_normw(bg, "k_norm.weight", d);
  }
  src[PZ_GQA_O_W] = bo_t(bg, "o_proj.weight", PZ_BF16, PZ_T_WEIGHT, 2, s->H, hd, 0, 1.0f / sqrtf((float)hd), 0);
  const char *cn[2] = {"attn.k_cache", "attn.v_cache"};
  for (int k = 0; k < 2; k++) {
    int id = -1;
    const int64_t ne[4] = {BO_M, s->kvh, s->max_ctx, d};
    CHECK_OK(pz_graph_add_tensor(bg->g, cn[k], PZ_BF16, PZ_T_STATE, 4, ne, &id));
    if (id >= 0) {
      bg->g->tensors[id].batched = false;
      bg->g->tensors[id].init_scale = 1.0f;
    }
    src[k ? PZ_GQA_V_CACHE : PZ_GQA_K_CACHE] = id;
  }
  src[PZ_GQA_POS] = bo_t(bg, "positions", PZ_I32, PZ_T_INPUT, 1, BO_M, 0, 0, 0, 0);
  bg->g->in_pos = src[PZ_GQA_POS];
  int out = bo_t(bg, "attn.out", PZ_F32, PZ_T_ACT, 2, BO_M, s->H, 0, 0, 0);
  pz_op_params p = {.gqa = {.n_heads = s->heads, .n_kv_heads = s->kvh, .head_dim = d, .hidden = s->H,
                            .max_ctx = s->max_ctx, .eps = 1e-6f, .softmax_scale = 1.0f / sqrtf((float)d),
                            .rope = {.theta = 10000.f, .factor = 1.f}, .window = s->window}};
  if (s->rope == PZ_ROPE_LLAMA3)
    p.gqa.rope = (pz_rope_params){.theta = 500000.f, .factor = 8.f, .original_max_position_embeddings = 64,
                                  .type = PZ_ROPE_LLAMA3, .low_freq_factor = 1.f, .high_freq_factor = 4.f};
  else if (s->rope == PZ_ROPE_YARN)
    p.gqa.rope = (pz_rope_params){.theta = 10000.f, .factor = 4.f, .original_max_position_embeddings = 16,
                                  .beta_fast = 32.f, .beta_slow = 1.f, .mscale = 1.f, .mscale_all_dim = 0.f,
                                  .type = PZ_ROPE_YARN};
  else if (s->rope == PZ_ROPE_LONGROPE) { /* long factors from position max_ctx / 2 on: rows on both sides */
    p.gqa.rope = (pz_rope_params){.theta = 10000.f, .factor = 8.f, .original_max_position_embeddings = s->max_ctx / 2,
                                  .type = PZ_ROPE_LONGROPE, .n_factors = (int32_t)(d / 2), .attention_factor = 1.25f};
    for (int64_t j = 0; j < d / 2; j++) {
      p.gqa.rope.short_factor[j] = 1.0f + 0.125f * (float)j;
      p.gqa.rope.long_factor[j] = 2.0f + 1.5f * (float)j;
    }
  }
  bo_node(bg, PZ_OP_GQA_ATTN, "attn", src, PZ_GQA_NSRC, (int[]){out}, 1, &p);
  memcpy(bg->in, src, sizeof src);
  bg->in[PZ_GQA_NSRC] = out;
  /* the last cache slot, slot 0, then a spread */
  for (int i = 0; i < BO_M; i++) bg->pos[i] = (int32_t)((i * 7 + 2) % s->max_ctx);
  bg->pos[0] = (int32_t)(s->max_ctx - 1);
  bg->pos[1] = 0;
  bo_out_add(bg, out, BO_TOL_REL, 4e-3);
  bo_out_add(bg, src[PZ_GQA_K_CACHE], BO_TOL_ULP, 0);
  bo_out_add(bg, src[PZ_GQA_V_CACHE], BO_TOL_EXACT, 0);
}

/* SILU_MUL: in = {gu, act, gu's base or -1, act's base or -1}. */
static void bo_build_silu(bo_graph *bg) {
  const int64_t I = bg->c->a;
  int gu, act, gb = -1, ab = -1;
  if (bg->c->var & BO_STRIDED) {
    gb = bo_t(bg, "gate_up.base", PZ_F32, PZ_T_WEIGHT, 2, BO_M, 2 * I + 12, 0, 6.0f / 7.0f, 0); /* reals */
    gu = bo_t(bg, "gate_up", PZ_F32, PZ_T_WEIGHT, 2, BO_M, 2 * I, 0, 0, 0);
    CHECK_OK(pz_graph_make_col_view(bg->g, gu, gb, 4));
    ab = bo_t(bg, "act.base", PZ_BF16, PZ_T_ACT, 2, BO_M, I + 24, 0, 0, 0);
    CHECK_OK(pz_graph_add_col_slice(bg->g, "act", ab, 8, I, &act));
  } else {
    gu = bo_t(bg, "gate_up", PZ_F32, PZ_T_WEIGHT, 2, BO_M, 2 * I, 0, 12.0f, 0); /* integers in [-12, 12] */
    act = bo_t(bg, "act", PZ_BF16, PZ_T_ACT, 2, BO_M, I, 0, 0, 0);
  }
  pz_op_params p = {.mlp = {.inter = I}};
  bo_node(bg, PZ_OP_SILU_MUL, "act_fn", (int[]){gu}, 1, (int[]){act}, 1, &p);
  memcpy(bg->in, (int[]){gu, act, gb, ab}, 4 * sizeof(int));
  bo_out_add(bg, ab >= 0 ? ab : act, BO_TOL_EXACT, 0);
}

/* MOE: in = the node's PZ_MOE_NSRC source slots; the output is in[PZ_MOE_NSRC]. */
static void bo_build_moe(bo_graph *bg) {
  const bo_moe_shape *s = &bo_moe_shapes[bg->c->a];
  const pz_moe_params *q = &s->p;
  const int64_t H = s->H, I = q->inter, S = q->shared_inter, E = q->n_experts;
  int src[PZ_MOE_NSRC];
  src[PZ_MOE_X] = bo_t(bg, "x", PZ_BF16, PZ_T_WEIGHT, 2, BO_M, H, 0, 1.0f, 0);
  src[PZ_MOE_LOGITS] = bo_t(bg, "router_logits", PZ_F32, PZ_T_WEIGHT, 2, BO_M, E, 0, 0.9f, 0);
  src[PZ_MOE_BIAS] = q->topk_method == PZ_TOPK_NOAUX_TC ? bo_t(bg, "bias", PZ_F32, PZ_T_WEIGHT, 1, E, 0, 0, 0.5f, 0) : -1;
  const float sh = 1.0f / sqrtf((float)H), si = 1.0f / sqrtf((float)I);
  src[PZ_MOE_W_GATE] = bo_t(bg, "experts.gate", PZ_BF16, PZ_T_WEIGHT, 3, E, I, H, sh, 0);
  src[PZ_MOE_W_UP] = bo_t(bg, "experts.up", PZ_BF16, PZ_T_WEIGHT, 3, E, I, H, sh, 0);
  src[PZ_MOE_W_DOWN] = bo_t(bg, "experts.down", PZ_BF16, PZ_T_WEIGHT, 3, E, H, I, si, 0);
  for (int k = PZ_MOE_SH_GATE; k <= PZ_MOE_SH_DOWN; k++) src[k] = -1;
  if (S > 0) {
    src[PZ_MOE_SH_GATE] = bo_t(bg, "shared.gate", PZ_BF16, PZ_T_WEIGHT, 2, S, H, 0, sh, 0);
    src[PZ_MOE_SH_UP] = bo_t(bg, "shared.up", PZ_BF16, PZ_T_WEIGHT, 2, S, H, 0, sh, 0);
    src[PZ_MOE_SH_DOWN] = bo_t(bg, "shared.down", PZ_BF16, PZ_T_WEIGHT, 2, H, S, 0, 1.0f / sqrtf((float)S), 0);
  }
  int out = bo_t(bg, "moe.out", PZ_F32, PZ_T_ACT, 2, BO_M, H, 0, 0, 0);
  pz_op_params p = {.moe = *q};
  bo_node(bg, PZ_OP_MOE, "moe", src, PZ_MOE_NSRC, (int[]){out}, 1, &p);
  memcpy(bg->in, src, sizeof src);
  bg->in[PZ_MOE_NSRC] = out;
  bo_out_add(bg, out, BO_TOL_REL, 2e-3);
}

/* DENSE_MLP: in = {x, W_gate, W_up, W_down, out}. */
static void bo_build_mlp(bo_graph *bg) {
  const int64_t H = bg->c->a, I = bg->c->b;
  int x = bo_t(bg, "x", PZ_BF16, PZ_T_WEIGHT, 2, BO_M, H, 0, 1.0f, 0);
  int wg = bo_t(bg, "mlp.gate", PZ_BF16, PZ_T_WEIGHT, 2, I, H, 0, 1.0f / sqrtf((float)H), 0);
  int wu = bo_t(bg, "mlp.up", PZ_BF16, PZ_T_WEIGHT, 2, I, H, 0, 1.0f / sqrtf((float)H), 0);
  int wd = bo_t(bg, "mlp.down", PZ_BF16, PZ_T_WEIGHT, 2, H, I, 0, 1.0f / sqrtf((float)I), 0);
  int out = bo_t(bg, "mlp.out", PZ_F32, PZ_T_ACT, 2, BO_M, H, 0, 0, 0);
  pz_op_params p = {.mlp = {.inter = I}};
  bo_node(bg, PZ_OP_DENSE_MLP, "mlp", (int[]){x, wg, wu, wd}, 4, (int[]){out}, 1, &p);
  memcpy(bg->in, (int[]){x, wg, wu, wd, out}, 5 * sizeof(int));
  bo_out_add(bg, out, BO_TOL_REL, 2e-3);
}

/* Donor graph: ar0 = AR_RMSNORM(p0, w0 -> x0, R); donor = AR_RMSNORM_MAYBE_PREZERO(p1, w1, R ->
 * x1, R; fills buf [M, BO_NT], n_base BO_NB); consumers mm0, mm1 = MM_MAYBE_PREZERO(A, W0/W1 ->
 * columns [0, 64) / [BO_NB, BO_NB + 64) of buf). The consumers read their own integer A so
 * their results do not depend on the donor's rounding. in = {p0, w0, p1, w1, x0, x1, R, buf,
 * A, W0, W1, C0, C1}. */
static void bo_build_prezero(bo_graph *bg) {
  const int64_t K = bg->c->b;
  bo_build_ar(bg); /* ar0, then the donor turned from ar1 below; in[0..6] */
  pz_node *d = &bg->g->nodes[1];
  d->op = PZ_OP_AR_RMSNORM_MAYBE_PREZERO;
  snprintf(d->name, sizeof d->name, "donor");
  int buf = bo_t(bg, "donor.prezero_buf", PZ_F32, PZ_T_BUFFER, 2, BO_M, BO_NT, 0, 0, 0);
  d->p.norm.fill_buf = buf;
  d->p.norm.n_total = BO_NT;
  d->p.norm.n_base = BO_NB;
  int A = bo_t(bg, "mm.A", PZ_BF16, PZ_T_WEIGHT, 2, BO_M, K, 0, 2.0f, 0);
  int W0 = bo_t(bg, "mm0.W", PZ_BF16, PZ_T_WEIGHT, 2, BO_NC, K, 0, 2.0f, 0);
  int W1 = bo_t(bg, "mm1.W", PZ_BF16, PZ_T_WEIGHT, 2, BO_NC, K, 0, 2.0f, 0);
  int C0 = -1, C1 = -1;
  CHECK_OK(pz_graph_add_col_slice(bg->g, "mm0.out", buf, 0, BO_NC, &C0));
  CHECK_OK(pz_graph_add_col_slice(bg->g, "mm1.out", buf, BO_NB, BO_NC, &C1));
  pz_op_params gp = {.gemm = {.zero_init = true, .prezero_buf = buf, .n_base = BO_NB, .col_offset = 0}};
  bo_node(bg, PZ_OP_MM_MAYBE_PREZERO, "mm0", (int[]){A, W0, -1}, 3, (int[]){C0}, 1, &gp);
  gp.gemm.col_offset = BO_NB;
  bo_node(bg, PZ_OP_MM_MAYBE_PREZERO, "mm1", (int[]){A, W1, -1}, 3, (int[]){C1}, 1, &gp);
  memcpy(bg->in + 7, (int[]){buf, A, W0, W1, C0, C1}, 6 * sizeof(int));
  if (bg->c->op == PZ_OP_MM_MAYBE_PREZERO) bg->n_out = 0; /* the consumers' slices only (in buf) */
  bo_out_add(bg, buf, BO_TOL_EXACT, 0);
}

/* ---------------------------------------------------------------- the op table of the harness */

/* Per op of core/ops.def: BO_BUILDER(fn) builds its case graphs, or BO_GAP("why") declares that
 * the harness does not cover it. Generated from ops.def: an op without a BO_OP_<E> line here
 * does not compile. Both tests also fail at run time for an op with neither cases nor a gap. */
typedef void (*bo_build_fn)(bo_graph *bg);
typedef struct bo_entry { bo_build_fn build; const char *gap; } bo_entry;
#define BO_BUILDER(fn) {fn, ""}
#define BO_GAP(why) {NULL, "" why}
#define BO_OP_EMBEDDING BO_BUILDER(bo_build_embedding)
#define BO_OP_RMSNORM BO_BUILDER(bo_build_rmsnorm)
#define BO_OP_AR_RMSNORM BO_BUILDER(bo_build_ar)
#define BO_OP_GEMM BO_BUILDER(bo_build_gemm)
#define BO_OP_MLA_ATTN BO_BUILDER(bo_build_mla)
#define BO_OP_MOE BO_BUILDER(bo_build_moe)
#define BO_OP_DENSE_MLP BO_BUILDER(bo_build_mlp)
#define BO_OP_LM_HEAD BO_BUILDER(bo_build_gemm)
#define BO_OP_ARGMAX BO_BUILDER(bo_build_argmax)
#define BO_OP_AR_RMSNORM_MAYBE_PREZERO BO_BUILDER(bo_build_prezero)
#define BO_OP_MM_MAYBE_PREZERO BO_BUILDER(bo_build_prezero)
#define BO_OP_GQA_ATTN BO_BUILDER(bo_build_gqa)
#define BO_OP_SILU_MUL BO_BUILDER(bo_build_silu)
static const bo_entry bo_entries[] = {
#define PZ_OP(e, name, coll) [PZ_OP_##e] = BO_OP_##e,
#include "core/ops.def"
#undef PZ_OP
};
_Static_assert(sizeof bo_entries / sizeof bo_entries[0] == PZ_OP_COUNT, "one harness entry per op of ops.def");

/* Builds case c (graph info: tp, BO_M rows, hidden = H where the op has one, vocab) and verifies
 * it; bg->g is NULL when the op has no builder or the graph failed to build (a CHECK counted). */
static inline void bo_build(const bo_case *c, bo_graph *bg) {
  memset(bg, 0, sizeof *bg);
  bg->c = c;
  for (int i = 0; i < BO_MAX_IN; i++) bg->in[i] = -1;
  for (int i = 0; i < BO_M; i++) { bg->tokens[i] = i; bg->pos[i] = 0; }
  const bo_entry *e = &bo_entries[c->op];
  if (!e->build) return;
  pz_graph_info info = {.tp = c->tp, .m = BO_M, .n_layers = 1, .rms_eps = 1e-6f};
  info.hidden = c->op == PZ_OP_MLA_ATTN ? bo_mla_shapes[c->a].H : c->op == PZ_OP_MOE ? bo_moe_shapes[c->a].H
                : c->op == PZ_OP_GQA_ATTN ? bo_gqa_shapes[c->a].H : c->a;
  info.vocab_size = c->op == PZ_OP_ARGMAX ? c->a : c->op == PZ_OP_EMBEDDING || c->op == PZ_OP_LM_HEAD ? c->b : 0;
  snprintf(info.model_name, sizeof info.model_name, "backend_ops");
  CHECK_OK(pz_graph_create(&info, &bg->g));
  if (!bg->g) return;
  e->build(bg);
  pz_status st = pz_graph_verify(bg->g);
  if (st != PZ_OK) {
    fprintf(stderr, "case graph of %s does not verify: %s\n", pz_op_name(c->op), pz_last_error());
    pz_test_failures++;
    pz_graph_free(bg->g);
    bg->g = NULL;
  }
}

/* The gate override of case c in a device description (PREZERO_FORCE_GATE=on / off / unset),
 * given to the executor when it is made (options are read once, at creation). */
static inline void bo_gate(const bo_case *c, pz_device_desc *d) {
  d->force_gate = (c->var & BO_GATE_ON) ? 1 : (c->var & BO_GATE_OFF) ? 2 : 0;
}

/* The CPU executor of bg (inputs by bo_load_cpu, scratch poisoned with NaN before each step, 2
 * threads, the default gate description); NULL on failure (a CHECK counted). */
static inline pz_cpu_exec *bo_cpu_create(bo_graph *bg) {
  pz_cpu_exec_opts o = PZ_CPU_EXEC_OPTS_INIT;
  o.seed = 77;
  o.threads = 2;
  o.poison = 1;
  pz_device_desc_default(&o.dev);
  bo_gate(bg->c, &o.dev);
  o.load_weight = bo_load_cpu;
  o.load_user = bg;
  pz_cpu_exec *e = NULL;
  CHECK_OK(pz_cpu_exec_create(bg->g, &o, &e));
  return e;
}

/* One step of c->m rows on the CPU executor; next (ARGMAX graphs) may be NULL. */
static inline pz_status bo_cpu_step(bo_graph *bg, pz_cpu_exec *e, int32_t *next) {
  return pz_cpu_exec_step(e, bg->c->m, bg->tokens, bg->pos, bg->g->out_tokens >= 0 ? next : NULL);
}
#endif
