/* verify(): structural, dtype and shape checks of a decode graph, one explicit pass before
 * and after every transformation (ggml-style legality check). */
#include "core/ir.h"
#include <stdlib.h>
#include <string.h>

#define FAIL(n, ...) do { char m_[400]; snprintf(m_, sizeof m_, __VA_ARGS__); \
  return pz_error(PZ_ERR_VERIFY, "verify: node %d (%s, %s): %s", (n)->id, (n)->name, pz_op_name((n)->op), m_); } while (0)

static const pz_tensor *T(const pz_graph *g, int id) { return id >= 0 ? &g->tensors[id] : NULL; }

static pz_status need(const pz_graph *g, const pz_node *n, int slot, pz_dtype dt, int ndim,
                      const char *what) {
  const pz_tensor *t = T(g, n->src[slot]);
  if (!t) FAIL(n, "missing input %s", what);
  if (t->dtype != dt) FAIL(n, "%s (%s) is %s, expected %s", what, t->name, pz_dtype_name(t->dtype), pz_dtype_name(dt));
  if (t->ndim != ndim) FAIL(n, "%s (%s) has %d dims, expected %d", what, t->name, t->ndim, ndim);
  return PZ_OK;
}
#define NEED(slot, dt, nd, what) PZ_CHECK(need(g, n, slot, dt, nd, what))

/* A prezero slot s of node n (MLA, GQA, MOE): columns [col, col + s->ne[1]) of a donor buffer of rows
 * rows and n_total columns, n_base within [0, n_total]; *buf gets the buffer's id. */
static pz_status check_slot_cols(const pz_graph *g, const pz_node *n, const pz_tensor *s, int64_t col, int64_t n_total,
                                 int64_t n_base, int64_t rows, int *buf) {
  if (s->view_of < 0) FAIL(n, "prezero slot %s is not a view of a buffer", s->name);
  const pz_tensor *B = T(g, s->view_of);
  if (B->ndim != 2 || B->ne[1] != n_total || n_base < 0 || n_base > n_total)
    FAIL(n, "prezero_n_total %lld / n_base %lld do not match buffer %s", (long long)n_total, (long long)n_base, B->name);
  if (s->view_offset != B->view_offset + col || s->stride[0] != B->stride[0] || s->ne[0] != rows)
    FAIL(n, "prezero slot %s is not columns [%lld, %lld) of %s", s->name, (long long)col, (long long)(col + s->ne[1]),
         B->name);
  *buf = s->view_of;
  return PZ_OK;
}
#define EQ(a, b, what) do { if ((a) != (b)) FAIL(n, "%s: %lld != %lld", what, (long long)(a), (long long)(b)); } while (0)

static pz_status check_gemm(const pz_graph *g, const pz_node *n) {
  NEED(0, PZ_BF16, 2, "A");
  NEED(1, PZ_BF16, 2, "W");
  const pz_tensor *A = T(g, n->src[0]), *W = T(g, n->src[1]), *C = T(g, n->dst[0]);
  if (C->ndim != 2 || C->dtype != PZ_F32) FAIL(n, "C must be [m,n] f32");
  EQ(A->ne[1], W->ne[1], "A.k vs W.k");
  EQ(C->ne[0], A->ne[0], "C.m vs A.m");
  EQ(C->ne[1], W->ne[0], "C.n vs W.n");
  if (C->stride[1] != 1) FAIL(n, "C columns must be unit-stride");
  if (n->n_src > 2 && n->src[2] >= 0) {
    NEED(2, PZ_F32, 1, "bias");
    EQ(T(g, n->src[2])->ne[0], W->ne[0], "bias.n");
  }
  if (n->op == PZ_OP_MM_MAYBE_PREZERO) {
    if (n->p.gemm.prezero_buf < 0 || n->p.gemm.prezero_buf >= g->n_tensors) FAIL(n, "mm_maybe_prezero_ without a buffer");
    const pz_tensor *B = T(g, n->p.gemm.prezero_buf);
    if (B->ndim != 2 || B->dtype != PZ_F32) FAIL(n, "prezero buffer %s is not 2-D f32", B->name);
    if (pz_storage_of(g, n->dst[0]) != pz_storage_of(g, B->id)) FAIL(n, "C is not a slice of the prezero buffer");
    if (n->p.gemm.col_offset < 0 || n->p.gemm.col_offset + C->ne[1] > B->ne[1]) FAIL(n, "slice outside buffer");
    if (n->p.gemm.n_base < 0 || n->p.gemm.n_base > B->ne[1]) FAIL(n, "n_base not in [0, n_total]");
    /* C must be exactly columns [col_offset, col_offset + n) of the buffer's rows. */
    if (C->view_offset != B->view_offset + n->p.gemm.col_offset || C->stride[0] != B->stride[0] || C->ne[0] != B->ne[0])
      FAIL(n, "C is not columns [%lld, %lld) of %s", (long long)n->p.gemm.col_offset,
           (long long)(n->p.gemm.col_offset + C->ne[1]), B->name);
  }
  return PZ_OK;
}

static pz_status check_norm(const pz_graph *g, const pz_node *n) {
  const pz_tensor *y = T(g, n->dst[0]);
  if (n->op == PZ_OP_RMSNORM) {
    const pz_tensor *x = T(g, n->src[0]);
    if (!x || x->ndim != 2) FAIL(n, "x must be 2-D");
    NEED(1, PZ_BF16, 1, "weight");
    EQ(T(g, n->src[1])->ne[0], x->ne[1], "weight vs x.n");
    if (y->dtype != PZ_BF16) FAIL(n, "output must be bf16");
    return PZ_OK;
  }
  NEED(0, PZ_F32, 2, "partial");
  NEED(1, PZ_BF16, 1, "weight");
  const pz_tensor *p = T(g, n->src[0]);
  EQ(T(g, n->src[1])->ne[0], p->ne[1], "weight vs H");
  if (n->p.norm.has_residual) {
    NEED(2, PZ_F32, 2, "residual");
    if (n->n_dst < 2 || n->dst[1] != n->src[2]) FAIL(n, "residual must be updated in place (dst[1] == src[2])");
  }
  if (n->n_dst < 2 || T(g, n->dst[1])->dtype != PZ_F32) FAIL(n, "dst[1] must be the f32 residual");
  if (y->dtype != PZ_BF16 || y->ne[0] != p->ne[0] || y->ne[1] != p->ne[1]) FAIL(n, "x_norm must be bf16 [m,H]");
  if (n->op == PZ_OP_AR_RMSNORM_MAYBE_PREZERO) {
    if (n->p.norm.fill_buf < 0 || n->p.norm.fill_buf >= g->n_tensors) FAIL(n, "zero_fill buffer missing");
    const pz_tensor *B = T(g, n->p.norm.fill_buf);
    if (B->ndim != 2 || B->dtype != PZ_F32 || B->view_of >= 0) FAIL(n, "zero_fill buffer %s must be a 2-D f32 tensor owning storage", B->name);
    for (int s = 0; s < n->n_src; s++)
      if (n->src[s] >= 0 && pz_storage_of(g, n->src[s]) == B->id) FAIL(n, "zero_fill buffer aliases input %d", s);
    for (int d = 0; d < n->n_dst; d++)
      if (pz_storage_of(g, n->dst[d]) == B->id) FAIL(n, "zero_fill buffer aliases output %d", d);
    EQ(B->ne[1], n->p.norm.n_total, "n_total vs buffer width");
    if (n->p.norm.n_base < 0 || n->p.norm.n_base > n->p.norm.n_total) FAIL(n, "n_base not in [0, n_total]");
    EQ(B->ne[0], p->ne[0], "buffer rows vs m");
  }
  return PZ_OK;
}

static pz_status check_mla(const pz_graph *g, const pz_node *n) {
  const pz_mla_params *a = &n->p.mla;
  int64_t qh = a->qk_nope_head_dim + a->qk_rope_head_dim;
  int64_t kvw = a->kv_lora_rank + a->qk_rope_head_dim;
  if (n->n_src != PZ_MLA_NSRC) FAIL(n, "expected %d src slots", PZ_MLA_NSRC);
  if (a->q_lora_rank > 0) {
    NEED(PZ_MLA_QKV_A, PZ_F32, 2, "qkv_a");
    EQ(T(g, n->src[PZ_MLA_QKV_A])->ne[1], a->q_lora_rank + kvw, "qkv_a width");
    NEED(PZ_MLA_QA_NORM_W, PZ_BF16, 1, "q_a_layernorm");
    NEED(PZ_MLA_QB_W, PZ_BF16, 2, "q_b_proj");
    EQ(T(g, n->src[PZ_MLA_QB_W])->ne[0], a->n_heads * qh, "q_b n");
    EQ(T(g, n->src[PZ_MLA_QB_W])->ne[1], a->q_lora_rank, "q_b k");
  } else {
    NEED(PZ_MLA_Q, PZ_F32, 2, "q");
    EQ(T(g, n->src[PZ_MLA_Q])->ne[1], a->n_heads * qh, "q width");
    NEED(PZ_MLA_KV_A, PZ_F32, 2, "kv_a");
    EQ(T(g, n->src[PZ_MLA_KV_A])->ne[1], kvw, "kv_a width");
    if (n->src[PZ_MLA_QB_PREZERO] >= 0) FAIL(n, "qb_prezero slot set without q LoRA");
  }
  NEED(PZ_MLA_KVA_NORM_W, PZ_BF16, 1, "kv_a_layernorm");
  NEED(PZ_MLA_W_UK, PZ_BF16, 3, "W_UK");
  NEED(PZ_MLA_W_UV, PZ_BF16, 3, "W_UV");
  NEED(PZ_MLA_O_W, PZ_BF16, 2, "o_proj");
  EQ(T(g, n->src[PZ_MLA_O_W])->ne[0], a->hidden, "o_proj n");
  EQ(T(g, n->src[PZ_MLA_O_W])->ne[1], a->n_heads * a->v_head_dim, "o_proj k");
  NEED(PZ_MLA_KV_CACHE, PZ_BF16, 3, "kv cache");
  EQ(T(g, n->src[PZ_MLA_KV_CACHE])->ne[2], kvw, "kv cache width");
  NEED(PZ_MLA_POS, PZ_I32, 1, "positions");
  if (n->src[PZ_MLA_BLOCK_TABLE] >= 0) { /* paged cache (core/ir.h PZ_MLA_BLOCK_TABLE) */
    NEED(PZ_MLA_BLOCK_TABLE, PZ_I32, 2, "block table");
    const pz_tensor *bt = T(g, n->src[PZ_MLA_BLOCK_TABLE]);
    EQ(T(g, n->src[PZ_MLA_KV_CACHE])->ne[1], PZ_KV_BLOCK, "kv page rows");
    if (bt->ne[1] < (a->max_ctx + PZ_KV_BLOCK - 1) / PZ_KV_BLOCK) FAIL(n, "block table %s has fewer than ceil(max_ctx / %d) columns", bt->name, PZ_KV_BLOCK);
    if (bt->ne[0] < T(g, n->dst[0])->ne[0]) FAIL(n, "block table %s has fewer rows than the batch", bt->name);
  }
  if (n->src[PZ_MLA_QB_PREZERO] >= 0) {
    NEED(PZ_MLA_QB_PREZERO, PZ_F32, 2, "qb_prezero");
    EQ(T(g, n->src[PZ_MLA_QB_PREZERO])->ne[1], a->n_heads * qh, "qb_prezero width");
  }
  if (n->src[PZ_MLA_OPROJ_PREZERO] >= 0) {
    NEED(PZ_MLA_OPROJ_PREZERO, PZ_F32, 2, "oproj_prezero");
    EQ(T(g, n->src[PZ_MLA_OPROJ_PREZERO])->ne[1], a->hidden, "oproj_prezero width");
  }
  const pz_tensor *o = T(g, n->dst[0]);
  if (o->dtype != PZ_F32 || o->ndim != 2 || o->ne[1] != a->hidden) FAIL(n, "output must be f32 [m,H]");
  /* Prezero slots: columns of one donor buffer [m, prezero_n_total] at the recorded offsets;
   * the o_proj slot is the op's output itself (the partial is written there, no copy). */
  const int slots[2] = {PZ_MLA_QB_PREZERO, PZ_MLA_OPROJ_PREZERO};
  const int64_t offs[2] = {a->qb_col_offset, a->oproj_col_offset};
  int base = -1;
  for (int k = 0; k < 2; k++) {
    const pz_tensor *s = T(g, n->src[slots[k]]);
    if (!s) continue;
    if (base >= 0 && s->view_of >= 0 && base != s->view_of) FAIL(n, "prezero slots are in different buffers");
    PZ_CHECK(check_slot_cols(g, n, s, offs[k], a->prezero_n_total, a->prezero_n_base, o->ne[0], &base));
  }
  if (n->src[PZ_MLA_OPROJ_PREZERO] >= 0) {
    const pz_tensor *s = T(g, n->src[PZ_MLA_OPROJ_PREZERO]);
    if (pz_storage_of(g, o->id) != pz_storage_of(g, s->id) || o->view_offset != s->view_offset || o->stride[0] != s->stride[0])
      FAIL(n, "oproj_prezero slot %s must be the op's output %s", s->name, o->name);
  }
  return PZ_OK;
}

/* GQA_ATTN (core/ir.h PZ_GQA_*): every shape follows from (heads, kv heads, head_dim, H, max_ctx). */
static pz_status check_gqa(const pz_graph *g, const pz_node *n) {
  const pz_gqa_params *a = &n->p.gqa;
  const int64_t heads = a->n_heads, kvh = a->n_kv_heads, d = a->head_dim;
  if (n->n_src != PZ_GQA_NSRC) FAIL(n, "expected %d src slots", PZ_GQA_NSRC);
  if (heads < 1 || kvh < 1 || heads % kvh) FAIL(n, "heads %lld must be a positive multiple of kv heads %lld", (long long)heads,
                                                 (long long)kvh);
  if (d < 2 || d % 2) FAIL(n, "head_dim %lld must be even and >= 2", (long long)d);
  if (a->rotary_dim && (a->rotary_dim < 2 || a->rotary_dim % 2 || a->rotary_dim > d))
    FAIL(n, "rotary_dim %lld must be 0 (head_dim) or even in 2..head_dim (%lld)", (long long)a->rotary_dim, (long long)d);
  if (a->max_ctx < 1 || a->hidden < 1) FAIL(n, "max_ctx %lld and hidden %lld must be positive", (long long)a->max_ctx,
                                            (long long)a->hidden);
  if (a->window < 0) FAIL(n, "window %lld must be >= 0 (0: full attention)", (long long)a->window);
  NEED(PZ_GQA_QKV, PZ_F32, 2, "qkv");
  const pz_tensor *qkv = T(g, n->src[PZ_GQA_QKV]);
  EQ(qkv->ne[1], (heads + 2 * kvh) * d, "qkv width");
  if (qkv->stride[1] != 1) FAIL(n, "qkv columns must be unit-stride");
  if ((n->src[PZ_GQA_Q_NORM_W] >= 0) != (n->src[PZ_GQA_K_NORM_W] >= 0)) FAIL(n, "q_norm and k_norm go together");
  if (n->src[PZ_GQA_Q_NORM_W] >= 0) {
    NEED(PZ_GQA_Q_NORM_W, PZ_BF16, 1, "q_norm");
    EQ(T(g, n->src[PZ_GQA_Q_NORM_W])->ne[0], d, "q_norm width");
    NEED(PZ_GQA_K_NORM_W, PZ_BF16, 1, "k_norm");
    EQ(T(g, n->src[PZ_GQA_K_NORM_W])->ne[0], d, "k_norm width");
  }
  NEED(PZ_GQA_O_W, PZ_BF16, 2, "o_proj");
  EQ(T(g, n->src[PZ_GQA_O_W])->ne[0], a->hidden, "o_proj n");
  EQ(T(g, n->src[PZ_GQA_O_W])->ne[1], heads * d, "o_proj k");
  const int cs[2] = {PZ_GQA_K_CACHE, PZ_GQA_V_CACHE};
  for (int k = 0; k < 2; k++) {
    NEED(cs[k], PZ_BF16, 4, k ? "v cache" : "k cache");
    const pz_tensor *c = T(g, n->src[cs[k]]);
    if (c->ne[0] != qkv->ne[0] || c->ne[1] != kvh || c->ne[2] < a->max_ctx || c->ne[3] != d)
      FAIL(n, "%s (%s) is [%lld, %lld, %lld, %lld], expected [%lld, %lld, >= %lld, %lld]", k ? "v cache" : "k cache", c->name,
           (long long)c->ne[0], (long long)c->ne[1], (long long)c->ne[2], (long long)c->ne[3], (long long)qkv->ne[0],
           (long long)kvh, (long long)a->max_ctx, (long long)d);
  }
  NEED(PZ_GQA_POS, PZ_I32, 1, "positions");
  const pz_tensor *o = T(g, n->dst[0]);
  if (o->dtype != PZ_F32 || o->ndim != 2 || o->ne[1] != a->hidden || o->ne[0] != qkv->ne[0])
    FAIL(n, "output must be f32 [m,H]");
  /* The o_proj slot (as MLA's): columns [oproj_col_offset, + H) of one donor buffer, and the
   * op's output itself. */
  if (n->src[PZ_GQA_OPROJ_PREZERO] >= 0) {
    NEED(PZ_GQA_OPROJ_PREZERO, PZ_F32, 2, "oproj_prezero");
    const pz_tensor *s = T(g, n->src[PZ_GQA_OPROJ_PREZERO]);
    EQ(s->ne[1], a->hidden, "oproj_prezero width");
    int buf = -1;
    PZ_CHECK(check_slot_cols(g, n, s, a->oproj_col_offset, a->prezero_n_total, a->prezero_n_base, o->ne[0], &buf));
    if (pz_storage_of(g, o->id) != pz_storage_of(g, s->id) || o->view_offset != s->view_offset || o->stride[0] != s->stride[0])
      FAIL(n, "oproj_prezero slot %s must be the op's output %s", s->name, o->name);
  }
  return PZ_OK;
}

/* SILU_MUL: gu f32 [m, 2I] (gate | up) -> act bf16 [m, I], I = p.mlp.inter. */
static pz_status check_silu_mul(const pz_graph *g, const pz_node *n) {
  NEED(0, PZ_F32, 2, "gate_up");
  const pz_tensor *gu = T(g, n->src[0]), *y = T(g, n->dst[0]);
  const int64_t I = n->p.mlp.inter;
  if (I < 1) FAIL(n, "inter %lld must be positive", (long long)I);
  EQ(gu->ne[1], 2 * I, "gate_up width");
  if (y->dtype != PZ_BF16 || y->ndim != 2 || y->ne[0] != gu->ne[0] || y->ne[1] != I) FAIL(n, "output must be bf16 [m, inter]");
  if (gu->stride[1] != 1 || y->stride[1] != 1) FAIL(n, "columns must be unit-stride");
  return PZ_OK;
}

/* A tensor fused from parts along its shard dim (core/ir.h pz_tensor.n_parts): 2..PZ_MAX_PARTS
 * positive parts that add up to ne / full_ne of that dim, none larger than its full extent. */
static pz_status check_parts(const pz_tensor *t) {
  if (t->n_parts == 0) return PZ_OK;
  if (t->n_parts < 2 || t->n_parts > PZ_MAX_PARTS || t->shard_dim < 0 || t->shard_dim >= t->ndim)
    return pz_error(PZ_ERR_VERIFY, "verify: tensor %s has %d parts along dim %d (2..%d along its shard dim)", t->name,
                    t->n_parts, t->shard_dim, PZ_MAX_PARTS);
  int64_t sn = 0, sf = 0;
  for (int p = 0; p < t->n_parts; p++) {
    if (t->part_ne[p] < 1 || t->part_full[p] < t->part_ne[p])
      return pz_error(PZ_ERR_VERIFY, "verify: tensor %s part %d is %lld of %lld", t->name, p, (long long)t->part_ne[p],
                      (long long)t->part_full[p]);
    sn += t->part_ne[p];
    sf += t->part_full[p];
  }
  if (sn != t->ne[t->shard_dim] || sf != t->full_ne[t->shard_dim])
    return pz_error(PZ_ERR_VERIFY, "verify: tensor %s parts add up to %lld of %lld (full %lld of %lld)", t->name,
                    (long long)sn, (long long)t->ne[t->shard_dim], (long long)sf, (long long)t->full_ne[t->shard_dim]);
  return PZ_OK;
}

/* Routed experts by storage (core/ir.h, PZ_MOE_S_*): bf16, INT4 words + bf16 group scales, or
 * e4m3 bytes + f32 block scales; every shape follows from (E, inter, H) and the group / block. */
static pz_status check_moe_experts(const pz_graph *g, const pz_node *n) {
  const pz_moe_params *q = &n->p.moe;
  const int64_t E = q->n_experts, I = q->inter, H = T(g, n->src[PZ_MOE_X])->ne[1];
  const int slot[3] = {PZ_MOE_W_GATE, PZ_MOE_W_UP, PZ_MOE_W_DOWN}, sslot[3] = {PZ_MOE_S_GATE, PZ_MOE_S_UP, PZ_MOE_S_DOWN};
  static const char *const what[3] = {"experts gate", "experts up", "experts down"};
  static const char *const swhat[3] = {"experts gate scale", "experts up scale", "experts down scale"};
  if (q->wquant < 0 || q->wquant > 2) FAIL(n, "wquant %d is not 0 (bf16), 1 (int4) or 2 (fp8)", q->wquant);
  if (q->wquant && n->n_src < PZ_MOE_NSRC_Q) FAIL(n, "quantised experts need %d sources, got %d", PZ_MOE_NSRC_Q, n->n_src);
  if (q->wquant == 1 && (q->q_group < 8 || q->q_group % 8 || H % q->q_group || I % q->q_group))
    FAIL(n, "INT4 group %lld must be a multiple of 8 dividing H %lld and inter %lld", (long long)q->q_group, (long long)H,
         (long long)I);
  if (q->wquant == 2 && (q->q_block_rows < 1 || q->q_block_cols < 1)) FAIL(n, "FP8 block size must be positive");
  for (int i = 0; i < 3; i++) {
    const int64_t rows = i == 2 ? H : I, cols = i == 2 ? I : H;
    const pz_dtype wd = q->wquant == 1 ? PZ_I32 : q->wquant == 2 ? PZ_U8 : PZ_BF16;
    NEED(slot[i], wd, 3, what[i]);
    const pz_tensor *w = T(g, n->src[slot[i]]);
    const int64_t wc = q->wquant == 1 ? cols / 8 : cols;
    if (w->ne[0] != E || w->ne[1] != rows || w->ne[2] != wc)
      FAIL(n, "%s (%s) is [%lld, %lld, %lld], expected [%lld, %lld, %lld]", what[i], w->name, (long long)w->ne[0],
           (long long)w->ne[1], (long long)w->ne[2], (long long)E, (long long)rows, (long long)wc);
    if (!q->wquant) continue;
    NEED(sslot[i], q->wquant == 1 ? PZ_BF16 : PZ_F32, 3, swhat[i]);
    const pz_tensor *s = T(g, n->src[sslot[i]]);
    const int64_t sr = q->wquant == 1 ? rows : (rows + q->q_block_rows - 1) / q->q_block_rows;
    const int64_t sc = q->wquant == 1 ? cols / q->q_group : (cols + q->q_block_cols - 1) / q->q_block_cols;
    if (s->ne[0] != E || s->ne[1] != sr || s->ne[2] != sc)
      FAIL(n, "%s (%s) is [%lld, %lld, %lld], expected [%lld, %lld, %lld]", swhat[i], s->name, (long long)s->ne[0],
           (long long)s->ne[1], (long long)s->ne[2], (long long)E, (long long)sr, (long long)sc);
  }
  return PZ_OK;
}

static pz_status check_moe(const pz_graph *g, const pz_node *n) {
  const pz_moe_params *q = &n->p.moe;
  NEED(PZ_MOE_X, PZ_BF16, 2, "x");
  NEED(PZ_MOE_LOGITS, PZ_F32, 2, "router logits");
  EQ(T(g, n->src[PZ_MOE_LOGITS])->ne[1], q->n_experts, "logits width");
  PZ_CHECK(check_moe_experts(g, n));
  if (q->top_k < 1 || q->top_k > q->n_experts) FAIL(n, "top_k %d not in 1..%d", q->top_k, q->n_experts);
  if (q->n_group < 1 || q->n_experts % q->n_group || q->topk_group < 1 || q->topk_group > q->n_group)
    FAIL(n, "bad n_group %d / topk_group %d", q->n_group, q->topk_group);
  if (q->topk_method == PZ_TOPK_NOAUX_TC && n->src[PZ_MOE_BIAS] < 0) FAIL(n, "noaux_tc needs e_score_correction_bias");
  const int64_t H = T(g, n->src[PZ_MOE_X])->ne[1];
  if (q->hidden != 0 && q->hidden != H) FAIL(n, "hidden %lld differs from x's width %lld", (long long)q->hidden, (long long)H);
  /* The shared experts' gate | up slot: columns [sh_gu_col_offset, + 2 shared_inter) of one donor buffer, at or
     beyond its n_base (the pass puts this gated slot there: zeroed by the donor when the gate holds);
     quantised MoE only (its shared experts run as GEMMs) */
  if (n->n_src >= PZ_MOE_NSRC_Q && n->src[PZ_MOE_SH_GU_PREZERO] >= 0) {
    if (!q->wquant || q->shared_inter <= 0) FAIL(n, "sh_gu_prezero slot set without quantised experts and shared experts");
    NEED(PZ_MOE_SH_GU_PREZERO, PZ_F32, 2, "sh_gu_prezero");
    const pz_tensor *s = T(g, n->src[PZ_MOE_SH_GU_PREZERO]), *o = T(g, n->dst[0]);
    EQ(s->ne[1], 2 * q->shared_inter, "sh_gu_prezero width");
    int buf = -1;
    PZ_CHECK(check_slot_cols(g, n, s, q->sh_gu_col_offset, q->prezero_n_total, q->prezero_n_base, o->ne[0], &buf));
    if (q->sh_gu_col_offset < q->prezero_n_base || q->sh_gu_col_offset + s->ne[1] > q->prezero_n_total)
      FAIL(n, "prezero slot %s is not columns [%lld, %lld) within [n_base %lld, n_total %lld)", s->name,
           (long long)q->sh_gu_col_offset, (long long)(q->sh_gu_col_offset + s->ne[1]), (long long)q->prezero_n_base,
           (long long)q->prezero_n_total);
  }
  return PZ_OK;
}

pz_status pz_graph_verify(const pz_graph *g) {
  /* written[t]: storage id has been produced (or is a weight/input/state). */
  char *ready = calloc((size_t)g->n_tensors + 1, 1);
  if (!ready) return pz_error(PZ_ERR_OOM, "verify: allocation");
  pz_status st = PZ_OK;
  for (int i = 0; i < g->n_tensors; i++) {
    const pz_tensor *t = &g->tensors[i];
    if (t->view_of >= g->n_tensors || t->view_of == i) {
      st = pz_error(PZ_ERR_VERIFY, "verify: tensor %s has a bad view_of", t->name);
      goto done;
    }
    if (t->view_of >= 0) {
      const pz_tensor *b = &g->tensors[pz_storage_of(g, i)];
      if (t->view_offset + pz_tensor_span(t) > pz_tensor_span(b) || b->dtype != t->dtype) {
        st = pz_error(PZ_ERR_VERIFY, "verify: view %s exceeds its base %s", t->name, b->name);
        goto done;
      }
    }
    if ((st = check_parts(t)) != PZ_OK) goto done;
    if (t->kind != PZ_T_ACT && t->kind != PZ_T_BUFFER) ready[i] = 1;
  }
  for (int i = 0; i < g->n_nodes && st == PZ_OK; i++) {
    const pz_node *n = &g->nodes[i];
    if (n->id != i) { st = pz_error(PZ_ERR_VERIFY, "verify: node %d has id %d", i, n->id); break; }
    for (int s = 0; s < n->n_src; s++) {
      int id = n->src[s];
      if (id < 0) continue;
      int sid = pz_storage_of(g, id);
      /* A buffer filled by a donor counts as produced by it; a view of produced storage is ready. */
      if (!ready[id] && !ready[sid]) {
        st = pz_error(PZ_ERR_VERIFY, "verify: node %d (%s) reads %s before any node writes it", i, n->name, g->tensors[id].name);
        goto done;
      }
    }
    for (int d = 0; d < n->n_dst; d++)
      if (g->tensors[n->dst[d]].kind == PZ_T_WEIGHT) {
        st = pz_error(PZ_ERR_VERIFY, "verify: node %d (%s) writes weight %s", i, n->name, g->tensors[n->dst[d]].name);
        goto done;
      }
    /* mm_maybe_prezero_ accumulates into its slice: a donor must have filled the buffer before. */
    if (n->op == PZ_OP_MM_MAYBE_PREZERO && n->p.gemm.prezero_buf >= 0 && n->p.gemm.prezero_buf < g->n_tensors &&
        !ready[pz_storage_of(g, n->p.gemm.prezero_buf)]) {
      st = pz_error(PZ_ERR_VERIFY, "verify: node %d (%s) accumulates into %s before any donor fills it", i, n->name,
                    g->tensors[n->p.gemm.prezero_buf].name);
      break;
    }
    switch (n->op) {
      case PZ_OP_GEMM: case PZ_OP_MM_MAYBE_PREZERO: case PZ_OP_LM_HEAD: st = check_gemm(g, n); break;
      case PZ_OP_RMSNORM: case PZ_OP_AR_RMSNORM: case PZ_OP_AR_RMSNORM_MAYBE_PREZERO: st = check_norm(g, n); break;
      case PZ_OP_MLA_ATTN: st = check_mla(g, n); break;
      case PZ_OP_MOE: st = check_moe(g, n); break;
      case PZ_OP_GQA_ATTN: st = check_gqa(g, n); break;
      case PZ_OP_SILU_MUL: st = check_silu_mul(g, n); break;
      case PZ_OP_EMBEDDING: case PZ_OP_DENSE_MLP: case PZ_OP_ARGMAX: break;
      default: st = pz_error(PZ_ERR_VERIFY, "verify: node %d has unknown op %d", i, (int)n->op);
    }
    if (st != PZ_OK) break;
    for (int d = 0; d < n->n_dst; d++) {
      ready[n->dst[d]] = 1;
      ready[pz_storage_of(g, n->dst[d])] = 1;
    }
    if (n->op == PZ_OP_AR_RMSNORM_MAYBE_PREZERO) ready[pz_storage_of(g, n->p.norm.fill_buf)] = 1;
  }
done:
  free(ready);
  return st;
}
