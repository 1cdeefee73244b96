/* Per-rank decode-graph builder for the DeepSeek-V2 family (MLA, docs/ARCHITECTURE.md §2) and the
 * GQA layouts (Llama 3, Qwen2, Qwen3, Qwen3-MoE, Mixtral, GLM-4.5: GQA attention with DeepSeek's MoE). Shapes only: no weight storage is
 * allocated here (the executor owns storage), so kimi_k2 builds instantly. */
#include "model/builder.h"
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

typedef struct {
  pz_graph *g;
  const pz_model_config *c;
  int tp;
  int64_t m;
  int block_table; /* the MLA layers' shared block table (-1 until the first MLA layer) */
} bld;

static void fmt(char *buf, const char *f, ...) __attribute__((format(printf, 2, 3)));
static void fmt(char *buf, const char *f, ...) {
  va_list ap;
  va_start(ap, f);
  vsnprintf(buf, PZ_NAME_LEN, f, ap);
  va_end(ap);
}

/* A weight with per-rank shape ne; shard_dim >= 0: full_ne[shard_dim] = ne[shard_dim] * tp. */
static pz_status weight(bld *b, const char *name, pz_dtype dt, int ndim, const int64_t *ne, int shard_dim,
                        float scale, float offset, int *id) {
  PZ_CHECK(pz_graph_add_tensor(b->g, name, dt, PZ_T_WEIGHT, ndim, ne, id));
  pz_tensor *t = &b->g->tensors[*id];
  t->shard_dim = shard_dim;
  if (shard_dim >= 0) t->full_ne[shard_dim] = ne[shard_dim] * b->tp;
  t->init_scale = scale;
  t->init_offset = offset;
  return PZ_OK;
}

static pz_status norm_weight(bld *b, const char *name, int64_t n, int *id) {
  return weight(b, name, PZ_BF16, 1, (int64_t[]){n}, -1, 0.05f, 1.0f, id);
}

/* A batched tensor [m, cols] (or [m] when cols == 0). */
static pz_status batched(bld *b, const char *name, pz_dtype dt, pz_tensor_kind k, int64_t cols, int *id) {
  if (cols > 0) PZ_CHECK(pz_graph_add_tensor(b->g, name, dt, k, 2, (int64_t[]){b->m, cols}, id));
  else PZ_CHECK(pz_graph_add_tensor(b->g, name, dt, k, 1, (int64_t[]){b->m}, id));
  b->g->tensors[*id].batched = true;
  return PZ_OK;
}

static float inv_sqrt(int64_t fan_in) { return 1.0f / sqrtf((float)fan_in); }

/* AR + residual + RMSNorm node; layer 0's input norm starts the residual from the embedding. */
static pz_status ar_norm(bld *b, const char *name, int layer, pz_role role, int partial, int residual,
                         bool has_residual, const char *wname, int *x_norm) {
  char tn[PZ_NAME_LEN];
  int w;
  PZ_CHECK(norm_weight(b, wname, b->c->hidden_size, &w));
  fmt(tn, "%s.out", name);
  PZ_CHECK(batched(b, tn, PZ_BF16, PZ_T_ACT, b->c->hidden_size, x_norm));
  pz_op_params p = {.norm = {.eps = b->c->rms_norm_eps, .has_residual = has_residual, .fill_buf = -1}};
  int src[3] = {partial, w, has_residual ? residual : -1};
  return pz_graph_add_node(b->g, PZ_OP_AR_RMSNORM, name, layer, role, src, 3, (int[]){*x_norm, residual}, 2, &p, NULL);
}

/* GEMM node C[m,n] = A[m,k] · W[n,k]^T with its own weight tensor. */
static pz_status gemm(bld *b, const char *node, int layer, pz_role role, int a, const char *wname, int64_t n,
                      int64_t k, int shard_dim, int64_t fan_in, int *c_out) {
  char tn[PZ_NAME_LEN];
  int w;
  PZ_CHECK(weight(b, wname, PZ_BF16, 2, (int64_t[]){n, k}, shard_dim, inv_sqrt(fan_in), 0.f, &w));
  fmt(tn, "%s.out", node);
  PZ_CHECK(batched(b, tn, PZ_F32, PZ_T_ACT, n, c_out));
  pz_op_params p = {.gemm = {.zero_init = true, .split_k = 0, .prezero_buf = -1}};
  return pz_graph_add_node(b->g, PZ_OP_GEMM, node, layer, role, (int[]){a, w, -1}, 3, (int[]){*c_out}, 1, &p, NULL);
}

static pz_status attention(bld *b, int L, int x_norm, int pos, int64_t max_ctx, int *out) {
  const pz_model_config *c = b->c;
  char nn[PZ_NAME_LEN], wn[PZ_NAME_LEN];
  const int64_t H = c->hidden_size, heads = c->num_attention_heads / b->tp;
  const int64_t qh = c->qk_nope_head_dim + c->qk_rope_head_dim;
  const int64_t kvw = c->kv_lora_rank + c->qk_rope_head_dim;
  int src[PZ_MLA_NSRC];
  for (int i = 0; i < PZ_MLA_NSRC; i++) src[i] = -1;

  if (c->q_lora_rank > 0) {
    /* q_a_proj and kv_a_proj_with_mqa fused into one replicated GEMM (as vLLM's fused_qkv_a_proj). */
    fmt(nn, "layers.%d.%s", L, pz_role_suffix(PZ_ROLE_QKV_A));
    fmt(wn, "layers.%d.self_attn.fused_qkv_a_proj.weight", L);
    PZ_CHECK(gemm(b, nn, L, PZ_ROLE_QKV_A, x_norm, wn, c->q_lora_rank + kvw, H, -1, H, &src[PZ_MLA_QKV_A]));
    fmt(wn, "layers.%d.self_attn.q_a_layernorm.weight", L);
    PZ_CHECK(norm_weight(b, wn, c->q_lora_rank, &src[PZ_MLA_QA_NORM_W]));
    fmt(wn, "layers.%d.self_attn.q_b_proj.weight", L);
    PZ_CHECK(weight(b, wn, PZ_BF16, 2, (int64_t[]){heads * qh, c->q_lora_rank}, 0, inv_sqrt(c->q_lora_rank), 0.f,
                    &src[PZ_MLA_QB_W]));
  } else {
    fmt(nn, "layers.%d.%s", L, pz_role_suffix(PZ_ROLE_Q_PROJ));
    fmt(wn, "layers.%d.self_attn.q_proj.weight", L);
    PZ_CHECK(gemm(b, nn, L, PZ_ROLE_Q_PROJ, x_norm, wn, heads * qh, H, 0, H, &src[PZ_MLA_Q]));
    fmt(nn, "layers.%d.%s", L, pz_role_suffix(PZ_ROLE_KV_A));
    fmt(wn, "layers.%d.self_attn.kv_a_proj_with_mqa.weight", L);
    PZ_CHECK(gemm(b, nn, L, PZ_ROLE_KV_A, x_norm, wn, kvw, H, -1, H, &src[PZ_MLA_KV_A]));
  }
  fmt(wn, "layers.%d.self_attn.kv_a_layernorm.weight", L);
  PZ_CHECK(norm_weight(b, wn, c->kv_lora_rank, &src[PZ_MLA_KVA_NORM_W]));
  /* kv_b_proj [heads*(nope+v), kv_lora] split per head into W_UK and W_UV (absorbed MLA). */
  fmt(wn, "layers.%d.self_attn.kv_b_proj.w_uk", L);
  PZ_CHECK(weight(b, wn, PZ_BF16, 3, (int64_t[]){heads, c->qk_nope_head_dim, c->kv_lora_rank}, 0,
                  inv_sqrt(c->kv_lora_rank), 0.f, &src[PZ_MLA_W_UK]));
  fmt(wn, "layers.%d.self_attn.kv_b_proj.w_uv", L);
  PZ_CHECK(weight(b, wn, PZ_BF16, 3, (int64_t[]){heads, c->v_head_dim, c->kv_lora_rank}, 0,
                  inv_sqrt(c->kv_lora_rank), 0.f, &src[PZ_MLA_W_UV]));
  fmt(wn, "layers.%d.self_attn.o_proj.weight", L);
  PZ_CHECK(weight(b, wn, PZ_BF16, 2, (int64_t[]){H, heads * c->v_head_dim}, 1,
                  inv_sqrt(c->num_attention_heads * c->v_head_dim), 0.f, &src[PZ_MLA_O_W]));
  /* Compressed KV cache: [kv_c (kv_lora, normed) | k_pe (rope, rotated)] per token, replicated,
   * in pages of PZ_KV_BLOCK tokens (core/kv_pages.h): m * max_blocks pages, so the identity table
   * the executors start from gives every sequence its max_ctx tokens. One block table for all
   * layers (a page index names the same page of every layer's pool). */
  const int64_t max_blocks = (max_ctx + PZ_KV_BLOCK - 1) / PZ_KV_BLOCK;
  if (b->block_table < 0) {
    PZ_CHECK(pz_graph_add_tensor(b->g, "block_table", PZ_I32, PZ_T_STATE, 2, (int64_t[]){b->m, max_blocks}, &b->block_table));
    b->g->tensors[b->block_table].batched = true;
  }
  src[PZ_MLA_BLOCK_TABLE] = b->block_table;
  fmt(wn, "layers.%d.self_attn.kv_cache", L);
  PZ_CHECK(pz_graph_add_tensor(b->g, wn, PZ_BF16, PZ_T_STATE, 3, (int64_t[]){b->m * max_blocks, PZ_KV_BLOCK, kvw},
                               &src[PZ_MLA_KV_CACHE]));
  b->g->tensors[src[PZ_MLA_KV_CACHE]].init_scale = 1.0f;
  src[PZ_MLA_POS] = pos;

  pz_op_params p = {.mla = {.n_heads = (int)heads, .hidden = H, .q_lora_rank = c->q_lora_rank,
                            .kv_lora_rank = c->kv_lora_rank, .qk_nope_head_dim = c->qk_nope_head_dim,
                            .qk_rope_head_dim = c->qk_rope_head_dim, .v_head_dim = c->v_head_dim,
                            .max_ctx = max_ctx, .eps = c->rms_norm_eps, .rope = c->rope}};
  /* DeepSeek-V2 modeling: softmax_scale = qk_head_dim^-0.5 * yarn_get_mscale(factor, mscale_all_dim)^2
   * when rope_scaling sets a non-zero mscale_all_dim. */
  float scale = 1.0f / sqrtf((float)qh);
  if (c->rope.factor > 1.f && c->rope.mscale_all_dim != 0.f) {
    float ms = pz_yarn_get_mscale(c->rope.factor, c->rope.mscale_all_dim);
    scale *= ms * ms;
  }
  p.mla.softmax_scale = scale;
  fmt(nn, "layers.%d.self_attn", L);
  char tn[PZ_NAME_LEN];
  fmt(tn, "%s.out", nn);
  PZ_CHECK(batched(b, tn, PZ_F32, PZ_T_ACT, H, out));
  return pz_graph_add_node(b->g, PZ_OP_MLA_ATTN, nn, L, PZ_ROLE_ATTN, src, PZ_MLA_NSRC, (int[]){*out}, 1, &p, NULL);
}

/* ---------------------------------------------------------------- GQA layouts */

/* kv heads on this rank: num_key_value_heads / TP, or 1 when TP is a multiple of it (replicated). */
static int64_t gqa_kv_heads(const pz_model_config *c, int tp) {
  return c->num_key_value_heads >= tp ? c->num_key_value_heads / tp : 1;
}

/* Cuts weight (or cache) t's shard dim into parts (core/ir.h pz_tensor.n_parts): part_ne per rank,
 * part_full of the full tensor; full_ne of that dim becomes their sum. */
static void set_parts(pz_tensor *t, int n, const int64_t *part_ne, const int64_t *part_full) {
  int64_t full = 0;
  t->n_parts = n > 1 ? n : 0;
  for (int p = 0; p < n; p++) {
    if (n > 1) {
      t->part_ne[p] = part_ne[p];
      t->part_full[p] = part_full[p];
    }
    full += part_full[p];
  }
  t->full_ne[t->shard_dim] = full;
}

/* GEMM node C[m,n] = A · W^T (+ bias) over an existing weight w (and f32 bias, or -1). */
static pz_status gemm_with(bld *b, const char *node, int layer, pz_role role, int a, int w, int bias, int *c_out) {
  char tn[PZ_NAME_LEN];
  fmt(tn, "%s.out", node);
  PZ_CHECK(batched(b, tn, PZ_F32, PZ_T_ACT, b->g->tensors[w].ne[0], c_out));
  pz_op_params p = {.gemm = {.zero_init = true, .split_k = 0, .prezero_buf = -1}};
  return pz_graph_add_node(b->g, PZ_OP_GEMM, node, layer, role, (int[]){a, w, bias}, 3, (int[]){*c_out}, 1, &p, NULL);
}

/* qkv_proj GEMM (q | k | v rows of this rank, bias when attention_bias) -> GQA_ATTN (q/k norm when
 * qk_norm, RoPE, KV append, attention over the layer's window when it slides, o_proj) -> partial [m, H] f32. */
static pz_status gqa_attention(bld *b, int L, int x_norm, int pos, int64_t max_ctx, int *out) {
  const pz_model_config *c = b->c;
  char nn[PZ_NAME_LEN], wn[PZ_NAME_LEN];
  const int64_t H = c->hidden_size, d = c->head_dim, heads = c->num_attention_heads / b->tp;
  const int64_t nkv = c->num_key_value_heads, kvh = gqa_kv_heads(c, b->tp);
  const int64_t pne[3] = {heads * d, kvh * d, kvh * d}, pfull[3] = {c->num_attention_heads * d, nkv * d, nkv * d};
  const int64_t n = (heads + 2 * kvh) * d;
  int src[PZ_GQA_NSRC];
  for (int i = 0; i < PZ_GQA_NSRC; i++) src[i] = -1;
  int w, bias = -1;
  fmt(wn, "layers.%d.self_attn.qkv_proj.weight", L);
  PZ_CHECK(weight(b, wn, PZ_BF16, 2, (int64_t[]){n, H}, 0, inv_sqrt(H), 0.f, &w));
  set_parts(&b->g->tensors[w], 3, pne, pfull);
  if (c->attention_bias) { /* nn.Linear's default init: U(-1/sqrt(fan_in), 1/sqrt(fan_in)) */
    fmt(wn, "layers.%d.self_attn.qkv_proj.bias", L);
    PZ_CHECK(weight(b, wn, PZ_F32, 1, (int64_t[]){n}, 0, inv_sqrt(H), 0.f, &bias));
    set_parts(&b->g->tensors[bias], 3, pne, pfull);
  }
  fmt(nn, "layers.%d.%s", L, pz_role_suffix(PZ_ROLE_QKV_PROJ));
  PZ_CHECK(gemm_with(b, nn, L, PZ_ROLE_QKV_PROJ, x_norm, w, bias, &src[PZ_GQA_QKV]));
  if (c->qk_norm) {
    fmt(wn, "layers.%d.self_attn.q_norm.weight", L);
    PZ_CHECK(norm_weight(b, wn, d, &src[PZ_GQA_Q_NORM_W]));
    fmt(wn, "layers.%d.self_attn.k_norm.weight", L);
    PZ_CHECK(norm_weight(b, wn, d, &src[PZ_GQA_K_NORM_W]));
  }
  fmt(wn, "layers.%d.self_attn.o_proj.weight", L);
  PZ_CHECK(weight(b, wn, PZ_BF16, 2, (int64_t[]){H, heads * d}, 1, inv_sqrt(c->num_attention_heads * d), 0.f,
                  &src[PZ_GQA_O_W]));
  /* KV caches [m, kvh, max_ctx, d], sharded by kv head like the k / v rows (replicated slices when
   * TP > num_key_value_heads), so the seeded fill gives every TP degree the same full cache. */
  static const char *const cache[2] = {"k_cache", "v_cache"};
  for (int k = 0; k < 2; k++) {
    int *id = &src[k ? PZ_GQA_V_CACHE : PZ_GQA_K_CACHE];
    fmt(wn, "layers.%d.self_attn.%s", L, cache[k]);
    PZ_CHECK(pz_graph_add_tensor(b->g, wn, PZ_BF16, PZ_T_STATE, 4, (int64_t[]){b->m, kvh, max_ctx, d}, id));
    pz_tensor *t = &b->g->tensors[*id];
    t->batched = true;
    t->init_scale = 1.0f;
    t->shard_dim = 1;
    t->full_ne[1] = nkv;
  }
  src[PZ_GQA_POS] = pos;
  const int64_t win = pz_config_layer_window(c, L); /* 0 where the window covers the whole cache: no effect */
  pz_op_params p = {.gqa = {.n_heads = (int)heads, .n_kv_heads = (int)kvh, .head_dim = d, .hidden = H, .max_ctx = max_ctx,
                            .window = win < max_ctx ? win : 0,
                            .eps = c->rms_norm_eps, .softmax_scale = (float)(1.0 / sqrt((double)d)), .rope = c->rope,
                            .rotary_dim = c->rotary_dim > 0 && c->rotary_dim < d ? c->rotary_dim : 0}};
  fmt(nn, "layers.%d.self_attn", L);
  char tn[PZ_NAME_LEN];
  fmt(tn, "%s.out", nn);
  PZ_CHECK(batched(b, tn, PZ_F32, PZ_T_ACT, H, out));
  return pz_graph_add_node(b->g, PZ_OP_GQA_ATTN, nn, L, PZ_ROLE_ATTN, src, PZ_GQA_NSRC, (int[]){*out}, 1, &p, NULL);
}

/* Dense GQA MLP (LlamaMLP): gate_up_proj GEMM (this rank's gate rows, then its up rows) -> SILU_MUL
 * -> down_proj GEMM (row-parallel) -> partial [m, H] f32. */
static pz_status gqa_mlp(bld *b, int L, int x_norm, int *out) {
  const pz_model_config *c = b->c;
  char nn[PZ_NAME_LEN], wn[PZ_NAME_LEN], tn[PZ_NAME_LEN];
  const int64_t H = c->hidden_size, I = c->intermediate_size / b->tp;
  int wgu, wd, gu, act;
  fmt(wn, "layers.%d.mlp.gate_up_proj.weight", L);
  PZ_CHECK(weight(b, wn, PZ_BF16, 2, (int64_t[]){2 * I, H}, 0, inv_sqrt(H), 0.f, &wgu));
  set_parts(&b->g->tensors[wgu], 2, (int64_t[]){I, I}, (int64_t[]){c->intermediate_size, c->intermediate_size});
  fmt(nn, "layers.%d.%s", L, pz_role_suffix(PZ_ROLE_GATE_UP));
  PZ_CHECK(gemm_with(b, nn, L, PZ_ROLE_GATE_UP, x_norm, wgu, -1, &gu));
  fmt(nn, "layers.%d.%s", L, pz_role_suffix(PZ_ROLE_MLP_ACT));
  fmt(tn, "%s.out", nn);
  PZ_CHECK(batched(b, tn, PZ_BF16, PZ_T_ACT, I, &act));
  pz_op_params p = {.mlp = {.inter = I}};
  PZ_CHECK(pz_graph_add_node(b->g, PZ_OP_SILU_MUL, nn, L, PZ_ROLE_MLP_ACT, (int[]){gu}, 1, (int[]){act}, 1, &p, NULL));
  fmt(wn, "layers.%d.mlp.down_proj.weight", L);
  PZ_CHECK(weight(b, wn, PZ_BF16, 2, (int64_t[]){H, I}, 1, inv_sqrt(c->intermediate_size), 0.f, &wd));
  fmt(nn, "layers.%d.%s", L, pz_role_suffix(PZ_ROLE_DOWN_PROJ));
  return gemm_with(b, nn, L, PZ_ROLE_DOWN_PROJ, act, wd, -1, out);
}

/* Whether layer L's routed experts are stored quantised (model/config.h pz_quant_applies on the
 * Hugging Face module names of expert 0, with the text model's prefix of a text_config-wrapped
 * config as its patterns spell it, pz_quant_text_prefix; Mixtral's block_sparse_moe.experts.0.{w1,w3,w2}):
 * all three projections alike, else an error. */
static pz_status experts_quant(bld *b, int L, pz_wquant *kind) {
  const pz_model_config *c = b->c;
  static const char *const proj[] = {"gate_proj", "up_proj", "down_proj"}, *const mixtral[] = {"w1", "w3", "w2"};
  const bool mx = !strcmp(c->model_type, "mixtral");
  const char *pre = c->text_config ? pz_quant_text_prefix(&c->quant) : "model.";
  int n = 0;
  for (int i = 0; i < 3; i++) {
    char m[PZ_NAME_LEN + 32];
    if (mx) snprintf(m, sizeof m, "%slayers.%d.block_sparse_moe.experts.0.%s", pre, L, mixtral[i]);
    else snprintf(m, sizeof m, "%slayers.%d.mlp.experts.0.%s", pre, L, proj[i]);
    n += pz_quant_applies(&c->quant, m);
  }
  if (n != 0 && n != 3)
    return pz_error(PZ_ERR_CONFIG, "quantization_config of %s quantises %d of the 3 routed-expert projections of layer %d; "
                    "prezero needs gate, up and down alike", c->name, n, L);
  *kind = n ? c->quant.kind : PZ_WQ_NONE;
  return PZ_OK;
}

/* The routed experts' weight tensors (and scales when quantised, docs in core/ir.h): bf16
 * [E, I, H] / [E, H, I]; INT4 i32 words [E, I, H/8] / [E, H, I/8] + bf16 scales per 32 columns;
 * FP8 u8 of the bf16 shapes + f32 block scales (bf16 instead when TP > 1 and the shard of
 * moe_intermediate_size is not a whole number of blocks). Sets p's wquant fields. Quantised tensors keep the
 * bf16 twin's init_scale (the synthetic quantiser, model/quant_synth.h, starts from those values). */
static pz_status routed_experts(bld *b, int L, int *src, pz_moe_params *p) {
  const pz_model_config *c = b->c;
  char wn[PZ_NAME_LEN];
  const int64_t H = c->hidden_size, E = c->n_routed_experts, I = c->moe_intermediate_size / b->tp;
  pz_wquant q = PZ_WQ_NONE;
  PZ_CHECK(experts_quant(b, L, &q));
  p->wquant = (int)q;
  static const char *const proj[] = {"gate_proj", "up_proj", "down_proj"};
  const int slot[] = {PZ_MOE_W_GATE, PZ_MOE_W_UP, PZ_MOE_W_DOWN}, sslot[] = {PZ_MOE_S_GATE, PZ_MOE_S_UP, PZ_MOE_S_DOWN};
  bool dn_whole = false; /* FP8: one scale column block spans down's whole unsplit row */
  if (q == PZ_WQ_INT4) {
    const int64_t g = c->quant.group_size;
    if (H % g || I % g)
      return pz_error(PZ_ERR_INVALID_ARG, "INT4 experts of %s need hidden_size (%lld) and moe_intermediate_size / TP (%lld) "
                      "to be multiples of the group size %lld; use a TP that keeps them so", c->name, (long long)H,
                      (long long)I, (long long)g);
    p->q_group = g;
  }
  if (q == PZ_WQ_FP8) {
    p->q_block_rows = c->quant.block_rows;
    p->q_block_cols = c->quant.block_cols;
    /* A TP shard that cuts a scale block keeps the loader's bf16 dequantisation (checkpoint.h): gate / up are split
       by rows (I per rank, blocks of q_block_rows), down by columns (I per rank, blocks of q_block_cols). A column
       block that spans down's whole unsplit row (per-channel scales: 1 x PZ_FP8_CHANNEL_COLS) is not cut: every
       rank keeps the same scales, replicated below. */
    dn_whole = p->q_block_cols >= c->moe_intermediate_size;
    if (b->tp > 1 && (I % p->q_block_rows || (I % p->q_block_cols && !dn_whole))) {
      q = PZ_WQ_NONE;
      p->wquant = 0;
      p->q_block_rows = p->q_block_cols = 0;
    }
  }
  for (int i = 0; i < 3; i++) {
    const bool down = i == 2;
    const int64_t rows = down ? H : I, cols = down ? I : H; /* per rank */
    const int sd = down ? 2 : 1;
    const float sc = down ? inv_sqrt(c->moe_intermediate_size) : inv_sqrt(H);
    if (q == PZ_WQ_NONE) {
      fmt(wn, "layers.%d.mlp.experts.%s.weight", L, proj[i]);
      PZ_CHECK(weight(b, wn, PZ_BF16, 3, (int64_t[]){E, rows, cols}, sd, sc, 0.f, &src[slot[i]]));
    } else if (q == PZ_WQ_INT4) {
      fmt(wn, "layers.%d.mlp.experts.%s.weight_packed", L, proj[i]);
      PZ_CHECK(weight(b, wn, PZ_I32, 3, (int64_t[]){E, rows, cols / 8}, sd, sc, 0.f, &src[slot[i]]));
      fmt(wn, "layers.%d.mlp.experts.%s.weight_scale", L, proj[i]);
      PZ_CHECK(weight(b, wn, PZ_BF16, 3, (int64_t[]){E, rows, cols / p->q_group}, sd, sc, 0.f, &src[sslot[i]]));
    } else {
      const int64_t bm = p->q_block_rows, bn = p->q_block_cols;
      fmt(wn, "layers.%d.mlp.experts.%s.weight", L, proj[i]);
      PZ_CHECK(weight(b, wn, PZ_U8, 3, (int64_t[]){E, rows, cols}, sd, sc, 0.f, &src[slot[i]]));
      fmt(wn, "layers.%d.mlp.experts.%s.weight_scale_inv", L, proj[i]);
      /* down's scales when one column block spans its whole unsplit row: [E, H / bm, 1] on every rank */
      const int ssd = down && dn_whole ? -1 : sd;
      PZ_CHECK(weight(b, wn, PZ_F32, 3, (int64_t[]){E, (rows + bm - 1) / bm, (cols + bn - 1) / bn}, ssd, sc, 0.f,
                      &src[sslot[i]]));
    }
  }
  return PZ_OK;
}

static pz_status moe(bld *b, int L, int x_norm, int *out) {
  const pz_model_config *c = b->c;
  char nn[PZ_NAME_LEN], wn[PZ_NAME_LEN];
  const int64_t H = c->hidden_size, E = c->n_routed_experts, I = c->moe_intermediate_size / b->tp;
  const int64_t SI = c->n_shared_experts * c->moe_intermediate_size / b->tp;
  int src[PZ_MOE_NSRC_Q];
  for (int i = 0; i < PZ_MOE_NSRC_Q; i++) src[i] = -1;
  src[PZ_MOE_X] = x_norm;
  pz_moe_params p_q = {0};
  fmt(nn, "layers.%d.%s", L, pz_role_suffix(PZ_ROLE_ROUTER_GATE));
  fmt(wn, "layers.%d.mlp.gate.weight", L);
  PZ_CHECK(gemm(b, nn, L, PZ_ROLE_ROUTER_GATE, x_norm, wn, E, H, -1, H, &src[PZ_MOE_LOGITS]));
  if (c->topk_method == PZ_TOPK_NOAUX_TC) {
    fmt(wn, "layers.%d.mlp.gate.e_score_correction_bias", L);
    PZ_CHECK(weight(b, wn, PZ_F32, 1, (int64_t[]){E}, -1, 0.05f, 0.f, &src[PZ_MOE_BIAS]));
  }
  PZ_CHECK(routed_experts(b, L, src, &p_q));
  if (SI > 0) {
    fmt(wn, "layers.%d.mlp.shared_experts.gate_proj.weight", L);
    PZ_CHECK(weight(b, wn, PZ_BF16, 2, (int64_t[]){SI, H}, 0, inv_sqrt(H), 0.f, &src[PZ_MOE_SH_GATE]));
    fmt(wn, "layers.%d.mlp.shared_experts.up_proj.weight", L);
    PZ_CHECK(weight(b, wn, PZ_BF16, 2, (int64_t[]){SI, H}, 0, inv_sqrt(H), 0.f, &src[PZ_MOE_SH_UP]));
    fmt(wn, "layers.%d.mlp.shared_experts.down_proj.weight", L);
    PZ_CHECK(weight(b, wn, PZ_BF16, 2, (int64_t[]){H, SI}, 1, inv_sqrt(SI * b->tp), 0.f, &src[PZ_MOE_SH_DOWN]));
  }
  pz_op_params p = {.moe = {.n_experts = (int)E, .top_k = (int)c->num_experts_per_tok, .n_group = (int)c->n_group,
                            .topk_group = (int)c->topk_group, .scoring = c->scoring_func,
                            .topk_method = c->topk_method, .norm_topk_prob = c->norm_topk_prob,
                            .routed_scaling_factor = c->routed_scaling_factor, .inter = I, .shared_inter = SI,
                            .wquant = p_q.wquant, .q_group = p_q.q_group, .q_block_rows = p_q.q_block_rows,
                            .q_block_cols = p_q.q_block_cols, .hidden = H}};
  fmt(nn, "layers.%d.mlp", L);
  char tn[PZ_NAME_LEN];
  fmt(tn, "%s.out", nn);
  PZ_CHECK(batched(b, tn, PZ_F32, PZ_T_ACT, H, out));
  return pz_graph_add_node(b->g, PZ_OP_MOE, nn, L, PZ_ROLE_MOE, src, p_q.wquant ? PZ_MOE_NSRC_Q : PZ_MOE_NSRC,
                           (int[]){*out}, 1, &p, NULL);
}

static pz_status dense_mlp(bld *b, int L, int x_norm, int *out) {
  const pz_model_config *c = b->c;
  char nn[PZ_NAME_LEN], wn[PZ_NAME_LEN];
  const int64_t H = c->hidden_size, I = c->intermediate_size / b->tp;
  int wg, wu, wd;
  fmt(wn, "layers.%d.mlp.gate_proj.weight", L);
  PZ_CHECK(weight(b, wn, PZ_BF16, 2, (int64_t[]){I, H}, 0, inv_sqrt(H), 0.f, &wg));
  fmt(wn, "layers.%d.mlp.up_proj.weight", L);
  PZ_CHECK(weight(b, wn, PZ_BF16, 2, (int64_t[]){I, H}, 0, inv_sqrt(H), 0.f, &wu));
  fmt(wn, "layers.%d.mlp.down_proj.weight", L);
  PZ_CHECK(weight(b, wn, PZ_BF16, 2, (int64_t[]){H, I}, 1, inv_sqrt(c->intermediate_size), 0.f, &wd));
  fmt(nn, "layers.%d.mlp", L);
  char tn[PZ_NAME_LEN];
  fmt(tn, "%s.out", nn);
  PZ_CHECK(batched(b, tn, PZ_F32, PZ_T_ACT, H, out));
  pz_op_params p = {.mlp = {.inter = I}};
  return pz_graph_add_node(b->g, PZ_OP_DENSE_MLP, nn, L, PZ_ROLE_DENSE_MLP, (int[]){x_norm, wg, wu, wd}, 4,
                           (int[]){*out}, 1, &p, NULL);
}

static pz_status check_opts(const pz_model_config *c, const pz_build_opts *o) {
  if (o->tp < 1 || o->tp > 64) return pz_error(PZ_ERR_INVALID_ARG, "TP degree %d is out of range 1..64; use --tp 1..64", o->tp);
  struct { const char *field; int64_t v; } div[] = {
      {"num_attention_heads", c->num_attention_heads},
      {"intermediate_size", c->intermediate_size},
      {"moe_intermediate_size", c->moe_intermediate_size},
      {"vocab_size", c->vocab_size},
  };
  for (size_t i = 0; i < sizeof div / sizeof div[0]; i++)
    if (div[i].v % o->tp)
      return pz_error(PZ_ERR_INVALID_ARG, "TP degree %d does not divide %s (%lld) of model %s; use a TP that divides it",
                      o->tp, div[i].field, (long long)div[i].v, c->name);
  if (c->attn == PZ_ATTN_GQA) {
    const int64_t nh = c->num_attention_heads, nkv = c->num_key_value_heads;
    if (nkv < 1 || nh % nkv || c->head_dim < 2 || c->head_dim % 2)
      return pz_error(PZ_ERR_INVALID_ARG, "model %s: num_key_value_heads (%lld) must divide num_attention_heads (%lld) and "
                      "head_dim (%lld) must be even", c->name, (long long)nkv, (long long)nh, (long long)c->head_dim);
    if (nkv % o->tp && !(o->tp > nkv && o->tp % nkv == 0))
      return pz_error(PZ_ERR_INVALID_ARG, "TP degree %d neither divides num_key_value_heads (%lld) of model %s nor is a "
                      "multiple of it; use a TP that divides it or a multiple of it", o->tp, (long long)nkv, c->name);
  }
  if (o->m < 1 || o->m > PZ_MAX_BATCH)
    return pz_error(PZ_ERR_INVALID_ARG, "batch %lld is out of range 1..%d", (long long)o->m, PZ_MAX_BATCH);
  if (o->max_ctx < 1 || o->max_ctx > c->max_position_embeddings)
    return pz_error(PZ_ERR_INVALID_ARG, "KV-cache capacity %lld tokens is out of range 1..max_position_embeddings (%lld)",
                    (long long)o->max_ctx, (long long)c->max_position_embeddings);
  if (o->layers < 0 || o->layers > c->num_hidden_layers)
    return pz_error(PZ_ERR_INVALID_ARG, "layers %d is out of range 0..num_hidden_layers (%lld) (0 = all)", o->layers,
                    (long long)c->num_hidden_layers);
  return PZ_OK;
}

static pz_status build(bld *b, const pz_build_opts *o) {
  const pz_model_config *c = b->c;
  pz_graph *g = b->g;
  const int64_t H = c->hidden_size, V = c->vocab_size / b->tp;
  const int n_layers = g->info.n_layers;
  char nn[PZ_NAME_LEN], wn[PZ_NAME_LEN];

  PZ_CHECK(batched(b, "input_ids", PZ_I32, PZ_T_INPUT, 0, &g->in_tokens));
  PZ_CHECK(batched(b, "positions", PZ_I32, PZ_T_INPUT, 0, &g->in_pos));
  int residual, emb_w, partial;
  PZ_CHECK(batched(b, "residual", PZ_F32, PZ_T_STATE, H, &residual));

  /* Vocab-parallel embedding: rank r holds rows [r*V, (r+1)*V); other ids give 0 (partial). */
  PZ_CHECK(weight(b, "embed_tokens.weight", PZ_BF16, 2, (int64_t[]){V, H}, 0, 1.0f, 0.f, &emb_w));
  PZ_CHECK(batched(b, "embed_tokens.out", PZ_F32, PZ_T_ACT, H, &partial));
  pz_op_params vp = {.vocab = {.vocab_size = c->vocab_size, .vocab_per_rank = V}};
  PZ_CHECK(pz_graph_add_node(g, PZ_OP_EMBEDDING, "embed_tokens", -1, PZ_ROLE_EMBED, (int[]){g->in_tokens, emb_w}, 2,
                             (int[]){partial}, 1, &vp, NULL));

  for (int L = 0; L < n_layers; L++) {
    int xn, attn_out, mlp_out;
    fmt(nn, "layers.%d.input_layernorm", L);
    fmt(wn, "layers.%d.input_layernorm.weight", L);
    PZ_CHECK(ar_norm(b, nn, L, PZ_ROLE_INPUT_LAYERNORM, partial, residual, L > 0, wn, &xn));
    if (c->attn == PZ_ATTN_GQA) PZ_CHECK(gqa_attention(b, L, xn, g->in_pos, o->max_ctx, &attn_out));
    else PZ_CHECK(attention(b, L, xn, g->in_pos, o->max_ctx, &attn_out));
    fmt(nn, "layers.%d.post_attention_layernorm", L);
    fmt(wn, "layers.%d.post_attention_layernorm.weight", L);
    PZ_CHECK(ar_norm(b, nn, L, PZ_ROLE_POST_ATTN_LAYERNORM, attn_out, residual, true, wn, &xn));
    if (pz_config_layer_is_moe(c, L)) PZ_CHECK(moe(b, L, xn, &mlp_out));
    else if (c->attn == PZ_ATTN_GQA) PZ_CHECK(gqa_mlp(b, L, xn, &mlp_out));
    else PZ_CHECK(dense_mlp(b, L, xn, &mlp_out));
    partial = mlp_out;
  }
  int xn, lm_w;
  PZ_CHECK(ar_norm(b, "norm", -1, PZ_ROLE_FINAL_NORM, partial, residual, n_layers > 0, "norm.weight", &xn));
  if (c->tie_word_embeddings) lm_w = emb_w; /* lm_head shares embed_tokens.weight (same [V, H] shard) */
  else PZ_CHECK(weight(b, "lm_head.weight", PZ_BF16, 2, (int64_t[]){V, H}, 0, inv_sqrt(H), 0.f, &lm_w));
  PZ_CHECK(batched(b, "lm_head.out", PZ_F32, PZ_T_ACT, V, &g->out_logits));
  pz_op_params lp = {.gemm = {.zero_init = true, .split_k = 0, .prezero_buf = -1}};
  PZ_CHECK(pz_graph_add_node(g, PZ_OP_LM_HEAD, "lm_head", -1, PZ_ROLE_LM_HEAD, (int[]){xn, lm_w, -1}, 3,
                             (int[]){g->out_logits}, 1, &lp, NULL));
  PZ_CHECK(batched(b, "argmax.out", PZ_I32, PZ_T_ACT, 0, &g->out_tokens));
  PZ_CHECK(pz_graph_add_node(g, PZ_OP_ARGMAX, "argmax", -1, PZ_ROLE_ARGMAX, (int[]){g->out_logits}, 1,
                             (int[]){g->out_tokens}, 1, &vp, NULL));
  return pz_graph_verify(g);
}

pz_status pz_build_decode_graph(const pz_model_config *c, const pz_build_opts *o, pz_graph **out) {
  if (!c || !o || !out) return pz_error(PZ_ERR_INVALID_ARG, "pz_build_decode_graph: NULL argument");
  *out = NULL;
  PZ_CHECK(check_opts(c, o));
  pz_graph_info info = {.tp = o->tp, .m = o->m,
                        .n_layers = o->layers > 0 ? o->layers : (int)c->num_hidden_layers,
                        .hidden = c->hidden_size, .vocab_size = c->vocab_size, .rms_eps = c->rms_norm_eps};
  snprintf(info.model_name, sizeof info.model_name, "%s", c->name);
  pz_graph *g;
  PZ_CHECK(pz_graph_create(&info, &g));
  bld b = {g, c, o->tp, o->m, -1};
  pz_status st = build(&b, o);
  if (st != PZ_OK) { pz_graph_free(g); return st; }
  *out = g;
  return PZ_OK;
}
