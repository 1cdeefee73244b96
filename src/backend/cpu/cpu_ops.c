/* CPU kernels of the decode ops (all of ops.def except the two *_MAYBE_PREZERO ops, which live
 * in prezero_ops.c): unpack tensors and params from the node, call the ref_ops.h functions. */
#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/ref_ops.h"
#include "backend/node_args.h"
#include "core/kv_pages.h"
#include "passes/prezero.h"
#include <stdlib.h>
#include <string.h>

#define TT(id) (&c->g->tensors[(id)])
#define DATA(id) (c->data[(id)])

/* Row stride of a 1-D or 2-D tensor whose columns must be unit-stride (backend/node_args.h). */
#define LD(id, var) int64_t var = 0; PZ_CHECK(pz_node_row_ld(c->g, n, (id), &var))
static pz_status need_src(const pz_node *n, int slot) { return pz_node_need_src(n, slot); }

pz_status pz_cpu_op_EMBEDDING(pz_cpu_ctx *c, const pz_node *n) {
  PZ_CHECK(need_src(n, 0)); PZ_CHECK(need_src(n, 1));
  const pz_tensor *W = TT(n->src[1]), *o = TT(n->dst[0]);
  int64_t H = W->ne[1];
  int64_t vpr = n->p.vocab.vocab_per_rank > 0 ? n->p.vocab.vocab_per_rank : W->ne[0];
  int64_t vocab = pz_node_vocab_size(c->g, n, vpr, c->tp);
  if (o->dtype != PZ_F32 || o->ne[1] != H) return pz_error(PZ_ERR_SHAPE, "%s: output must be f32 [m,%lld]", n->name, (long long)H);
  LD(n->dst[0], ldo);
  return pz_ref_embedding(c->m, DATA(n->src[0]), DATA(n->src[1]), H, vocab, vpr, c->rank, DATA(n->dst[0]), ldo);
}

pz_status pz_cpu_op_RMSNORM(pz_cpu_ctx *c, const pz_node *n) {
  PZ_CHECK(need_src(n, 0)); PZ_CHECK(need_src(n, 1));
  const pz_tensor *x = TT(n->src[0]);
  if (x->dtype != PZ_F32 && x->dtype != PZ_BF16) return pz_error(PZ_ERR_DTYPE, "%s: x must be f32 or bf16", n->name);
  LD(n->src[0], ldx);
  LD(n->dst[0], ldy);
  pz_ref_rmsnorm(c->m, x->ne[1], DATA(n->src[0]), x->dtype, ldx, DATA(n->src[1]), n->p.norm.eps,
                 DATA(n->dst[0]), ldy);
  return PZ_OK;
}

pz_status pz_cpu_op_AR_RMSNORM(pz_cpu_ctx *c, const pz_node *n) {
  PZ_CHECK(need_src(n, 0)); PZ_CHECK(need_src(n, 1));
  if (n->n_dst < 2) return pz_error(PZ_ERR_INVALID_ARG, "%s: needs dst {x_norm, residual}", n->name);
  const pz_tensor *part = TT(n->src[0]);
  int64_t H = part->ne[1];
  LD(n->src[0], ldp);
  LD(n->dst[0], ldx);
  LD(n->dst[1], ldr);
  bool has_res = n->p.norm.has_residual && n->n_src > 2 && n->src[2] >= 0;
  if (has_res) {
    LD(n->src[2], ldri);
    if (ldri != ldr) return pz_error(PZ_ERR_SHAPE, "%s: residual in/out strides differ", n->name);
  }
  const float *parts[64];
  if (c->tp > 64) return pz_error(PZ_ERR_UNSUPPORTED, "%s: tp %d > 64", n->name, c->tp);
  for (int r = 0; r < c->tp; r++) parts[r] = c->rank_data[r][n->src[0]];
  for (int r = 0; r < c->tp; r++) {
    void **d = c->rank_data[r];
    pz_ref_ar_rmsnorm(c->tp, parts, ldp, has_res ? d[n->src[2]] : NULL, d[n->dst[1]], ldr,
                      d[n->src[1]], n->p.norm.eps, c->m, H, d[n->dst[0]], ldx);
  }
  return PZ_OK;
}

static pz_status gemm_common(pz_cpu_ctx *c, const pz_node *n, bool zero_init, int split_k) {
  PZ_CHECK(need_src(n, 0)); PZ_CHECK(need_src(n, 1));
  const pz_tensor *A = TT(n->src[0]), *W = TT(n->src[1]), *C = TT(n->dst[0]);
  if (A->dtype != PZ_BF16 || W->dtype != PZ_BF16 || C->dtype != PZ_F32)
    return pz_error(PZ_ERR_DTYPE, "%s: GEMM needs bf16 A, W and f32 C", n->name);
  LD(n->src[0], lda);
  LD(n->src[1], ldw);
  LD(n->dst[0], ldc);
  const float *bias = (n->n_src > 2 && n->src[2] >= 0) ? DATA(n->src[2]) : NULL;
  pz_ref_gemm(c->m, W->ne[0], W->ne[1], DATA(n->src[0]), lda, DATA(n->src[1]), ldw, bias,
              DATA(n->dst[0]), ldc, split_k, zero_init);
  return PZ_OK;
}

pz_status pz_cpu_op_GEMM(pz_cpu_ctx *c, const pz_node *n) {
  return gemm_common(c, n, n->p.gemm.zero_init, n->p.gemm.split_k);
}

pz_status pz_cpu_op_LM_HEAD(pz_cpu_ctx *c, const pz_node *n) {
  /* LM_HEAD's params may be vocab params (union), so it always zeroes its output itself. */
  return gemm_common(c, n, true, 0);
}

pz_status pz_cpu_op_ARGMAX(pz_cpu_ctx *c, const pz_node *n) {
  PZ_CHECK(need_src(n, 0));
  const pz_tensor *L = TT(n->src[0]);
  if (L->dtype != PZ_F32 || TT(n->dst[0])->dtype != PZ_I32)
    return pz_error(PZ_ERR_DTYPE, "%s: argmax needs f32 logits and i32 ids", n->name);
  LD(n->src[0], ld);
  int64_t vpr = L->ne[1];
  int64_t vocab = pz_node_vocab_size(c->g, n, vpr, c->tp);
  const float *logits[64];
  if (c->tp > 64) return pz_error(PZ_ERR_UNSUPPORTED, "%s: tp %d > 64", n->name, c->tp);
  for (int r = 0; r < c->tp; r++) logits[r] = c->rank_data[r][n->src[0]];
  pz_ref_argmax(c->tp, logits, ld, c->m, vpr, vocab, c->rank_data[0][n->dst[0]]);
  for (int r = 1; r < c->tp; r++)
    memcpy(c->rank_data[r][n->dst[0]], c->rank_data[0][n->dst[0]], sizeof(int32_t) * (size_t)c->m);
  return PZ_OK;
}

static const void *opt_data(pz_cpu_ctx *c, const pz_node *n, int slot) {
  return (slot < n->n_src && n->src[slot] >= 0) ? DATA(n->src[slot]) : NULL;
}
static int64_t opt_ld(pz_cpu_ctx *c, const pz_node *n, int slot) { return pz_node_opt_ld(c->g, n, slot); }

/* Where an attention op's o_proj writes (the MLA and GQA ops' one rule): into the pre-zeroed
 * o_proj slot `slot` when the node has one, accumulating when the donor zeroed it this step
 * (pz_prezero_slice_zeroed with the donor's n_total / n_base), else zeroing it itself; without a
 * slot, into the node's output dst [m, hidden] f32 (row stride ldo), zeroed by the GEMM. */
typedef struct oproj_target {
  float *out, *slot;
  int64_t ld_out, ld_slot;
  bool zero_init;
} oproj_target;

static oproj_target oproj_target_of(pz_cpu_ctx *c, const pz_node *n, int slot, float *dst, int64_t ldo,
                                    int64_t col_offset, int64_t hidden, int64_t n_total, int64_t n_base) {
  oproj_target t = {.out = dst, .slot = NULL, .ld_out = ldo, .ld_slot = 0, .zero_init = true};
  if (opt_data(c, n, slot)) {
    t.slot = t.out = DATA(n->src[slot]);
    t.ld_slot = t.ld_out = opt_ld(c, n, slot);
    t.zero_init = !pz_prezero_slice_zeroed(c->m, col_offset, hidden, n_total, n_base, c->g->info.hidden, c->tp,
                                           &c->opts->dev);
  }
  return t;
}

/* After the op: copies the slot's rows to dst when the slot is not dst itself. */
static void oproj_copy_back(const pz_cpu_ctx *c, const oproj_target *t, float *dst, int64_t ldo, int64_t hidden) {
  if (t->slot && (t->slot != dst || t->ld_slot != ldo))
    for (int64_t i = 0; i < c->m; i++) memcpy(dst + i * ldo, t->slot + i * t->ld_slot, sizeof(float) * (size_t)hidden);
}

pz_status pz_cpu_op_MLA_ATTN(pz_cpu_ctx *c, const pz_node *n) {
  const pz_mla_params *p = &n->p.mla;
  if (n->n_src < PZ_MLA_NSRC) return pz_error(PZ_ERR_INVALID_ARG, "%s: expected %d src slots", n->name, PZ_MLA_NSRC);
  PZ_CHECK(need_src(n, PZ_MLA_KV_CACHE));
  const pz_tensor *cache = TT(n->src[PZ_MLA_KV_CACHE]);
  pz_ref_mla_io io = {0};
  if (n->src[PZ_MLA_BLOCK_TABLE] >= 0) { /* paged (core/kv_pages.h) */
    const pz_tensor *bt = TT(n->src[PZ_MLA_BLOCK_TABLE]);
    PZ_CHECK(pz_kv_check_shapes(p, cache, bt, c->m, n->name));
    io.block_table = DATA(n->src[PZ_MLA_BLOCK_TABLE]);
    io.ld_block_table = bt->stride[0];
    io.n_pages = cache->ne[0];
  } else if (cache->ndim != 3 || cache->stride[2] != 1 || cache->stride[1] != cache->ne[2] ||
             cache->ne[2] != p->kv_lora_rank + p->qk_rope_head_dim || cache->ne[1] < p->max_ctx) {
    return pz_error(PZ_ERR_SHAPE, "%s: kv cache %s must be [m, >= max_ctx, kv_lora + rope] with contiguous rows",
                    n->name, cache->name);
  }
  io.qkv_a = opt_data(c, n, PZ_MLA_QKV_A); io.ld_qkv_a = opt_ld(c, n, PZ_MLA_QKV_A);
  io.q = opt_data(c, n, PZ_MLA_Q);         io.ld_q = opt_ld(c, n, PZ_MLA_Q);
  io.kv_a = opt_data(c, n, PZ_MLA_KV_A);   io.ld_kv_a = opt_ld(c, n, PZ_MLA_KV_A);
  io.qa_norm_w = opt_data(c, n, PZ_MLA_QA_NORM_W);
  io.qb_w = opt_data(c, n, PZ_MLA_QB_W);
  io.kva_norm_w = opt_data(c, n, PZ_MLA_KVA_NORM_W);
  io.w_uk = opt_data(c, n, PZ_MLA_W_UK);
  io.w_uv = opt_data(c, n, PZ_MLA_W_UV);
  io.o_w = opt_data(c, n, PZ_MLA_O_W);
  io.kv_cache = DATA(n->src[PZ_MLA_KV_CACHE]);
  io.cache_seq_stride = cache->stride[0];
  io.pos = opt_data(c, n, PZ_MLA_POS);
  /* Slots (docs/ARCHITECTURE.md §3): a slot's GEMM accumulates into it (zero_init = false) when the donor
   * zeroed its columns this step, by the same rule the donor uses (pz_prezero_slice_zeroed:
   * inside the always-zeroed prefix [0, n_base), or the gate holds for n_total); otherwise it
   * zeroes them itself. Unset slots: internal scratch / the node's output, zero_init = true. */
  const int64_t qh = p->qk_nope_head_dim + p->qk_rope_head_dim;
  if (n->src[PZ_MLA_QB_PREZERO] >= 0) {
    io.qb_out = DATA(n->src[PZ_MLA_QB_PREZERO]);
    io.ld_qb_out = opt_ld(c, n, PZ_MLA_QB_PREZERO);
    io.qb_zero_init = !pz_prezero_slice_zeroed(c->m, p->qb_col_offset, p->n_heads * qh, p->prezero_n_total,
                                               p->prezero_n_base, c->g->info.hidden, c->tp, &c->opts->dev);
  }
  LD(n->dst[0], ldo);
  float *dst = DATA(n->dst[0]);
  const oproj_target ot = oproj_target_of(c, n, PZ_MLA_OPROJ_PREZERO, dst, ldo, p->oproj_col_offset, p->hidden,
                                          p->prezero_n_total, p->prezero_n_base);
  io.out = ot.out;
  io.ld_out = ot.ld_out;
  io.out_zero_init = ot.zero_init;
  PZ_CHECK(pz_ref_mla_decode(c->m, p, &io));
  oproj_copy_back(c, &ot, dst, ldo, p->hidden);
  return PZ_OK;
}

pz_status pz_cpu_op_MOE(pz_cpu_ctx *c, const pz_node *n) {
  const pz_moe_params *p = &n->p.moe;
  if (n->n_src < PZ_MOE_SH_GATE) return pz_error(PZ_ERR_INVALID_ARG, "%s: too few inputs", n->name);
  PZ_CHECK(need_src(n, PZ_MOE_X)); PZ_CHECK(need_src(n, PZ_MOE_LOGITS));
  PZ_CHECK(need_src(n, PZ_MOE_W_GATE)); PZ_CHECK(need_src(n, PZ_MOE_W_UP)); PZ_CHECK(need_src(n, PZ_MOE_W_DOWN));
  const pz_tensor *x = TT(n->src[PZ_MOE_X]);
  LD(n->src[PZ_MOE_X], ldx);
  LD(n->src[PZ_MOE_LOGITS], ldl);
  LD(n->dst[0], ldo);
  if (p->wquant) { /* INT4 / FP8 routed experts (core/ir.h PZ_MOE_S_*) */
    if (n->n_src < PZ_MOE_NSRC_Q) return pz_error(PZ_ERR_INVALID_ARG, "%s: quantised experts without scales", n->name);
    PZ_CHECK(need_src(n, PZ_MOE_S_GATE)); PZ_CHECK(need_src(n, PZ_MOE_S_UP)); PZ_CHECK(need_src(n, PZ_MOE_S_DOWN));
    pz_ref_qexperts q = {.wquant = p->wquant, .group = p->q_group, .block_rows = p->q_block_rows,
                         .block_cols = p->q_block_cols, .w_gate = DATA(n->src[PZ_MOE_W_GATE]),
                         .w_up = DATA(n->src[PZ_MOE_W_UP]), .w_down = DATA(n->src[PZ_MOE_W_DOWN]),
                         .s_gate = DATA(n->src[PZ_MOE_S_GATE]), .s_up = DATA(n->src[PZ_MOE_S_UP]),
                         .s_down = DATA(n->src[PZ_MOE_S_DOWN])};
    return pz_ref_moe_q(c->m, x->ne[1], DATA(n->src[PZ_MOE_X]), ldx, DATA(n->src[PZ_MOE_LOGITS]), ldl,
                        opt_data(c, n, PZ_MOE_BIAS), p, &q, opt_data(c, n, PZ_MOE_SH_GATE), opt_data(c, n, PZ_MOE_SH_UP),
                        opt_data(c, n, PZ_MOE_SH_DOWN), DATA(n->dst[0]), ldo, NULL, NULL);
  }
  return pz_ref_moe(c->m, x->ne[1], DATA(n->src[PZ_MOE_X]), ldx, DATA(n->src[PZ_MOE_LOGITS]), ldl,
                    opt_data(c, n, PZ_MOE_BIAS), p, DATA(n->src[PZ_MOE_W_GATE]), DATA(n->src[PZ_MOE_W_UP]),
                    DATA(n->src[PZ_MOE_W_DOWN]), opt_data(c, n, PZ_MOE_SH_GATE),
                    opt_data(c, n, PZ_MOE_SH_UP), opt_data(c, n, PZ_MOE_SH_DOWN), DATA(n->dst[0]), ldo,
                    NULL, NULL);
}

pz_status pz_cpu_op_DENSE_MLP(pz_cpu_ctx *c, const pz_node *n) {
  for (int s = 0; s < 4; s++) PZ_CHECK(need_src(n, s));
  const pz_tensor *x = TT(n->src[0]), *wg = TT(n->src[1]);
  int64_t inter = wg->ne[0];
  LD(n->src[0], ldx);
  LD(n->dst[0], ldo);
  return pz_ref_mlp(c->m, x->ne[1], inter, DATA(n->src[0]), ldx, DATA(n->src[1]), DATA(n->src[2]),
                    DATA(n->src[3]), DATA(n->dst[0]), ldo, true);
}

pz_status pz_cpu_op_GQA_ATTN(pz_cpu_ctx *c, const pz_node *n) {
  const pz_gqa_params *p = &n->p.gqa;
  if (n->n_src < PZ_GQA_NSRC) return pz_error(PZ_ERR_INVALID_ARG, "%s: expected %d src slots", n->name, PZ_GQA_NSRC);
  PZ_CHECK(need_src(n, PZ_GQA_QKV)); PZ_CHECK(need_src(n, PZ_GQA_O_W)); PZ_CHECK(need_src(n, PZ_GQA_POS));
  PZ_CHECK(need_src(n, PZ_GQA_K_CACHE)); PZ_CHECK(need_src(n, PZ_GQA_V_CACHE));
  const pz_tensor *kc = TT(n->src[PZ_GQA_K_CACHE]), *vc = TT(n->src[PZ_GQA_V_CACHE]);
  for (int k = 0; k < 2; k++) {
    const pz_tensor *t = k ? vc : kc;
    if (t->ndim != 4 || t->dtype != PZ_BF16 || t->ne[0] < c->m || t->ne[1] != p->n_kv_heads || t->ne[2] < p->max_ctx ||
        t->ne[3] != p->head_dim || t->stride[3] != 1 || t->stride[2] != p->head_dim || t->stride[1] < t->ne[2] * p->head_dim)
      return pz_error(PZ_ERR_SHAPE, "%s: cache %s must be bf16 [m, %d, >= %lld, %lld] with contiguous rows", n->name, t->name,
                      p->n_kv_heads, (long long)p->max_ctx, (long long)p->head_dim);
  }
  if (kc->stride[0] != vc->stride[0] || kc->stride[1] != vc->stride[1])
    return pz_error(PZ_ERR_SHAPE, "%s: k and v caches have different strides", n->name);
  pz_ref_gqa_io io = {0};
  io.qkv = DATA(n->src[PZ_GQA_QKV]);
  io.ld_qkv = opt_ld(c, n, PZ_GQA_QKV);
  io.q_norm_w = opt_data(c, n, PZ_GQA_Q_NORM_W);
  io.k_norm_w = opt_data(c, n, PZ_GQA_K_NORM_W);
  io.o_w = DATA(n->src[PZ_GQA_O_W]);
  io.k_cache = DATA(n->src[PZ_GQA_K_CACHE]);
  io.v_cache = DATA(n->src[PZ_GQA_V_CACHE]);
  io.cache_seq_stride = kc->stride[0];
  io.cache_head_stride = kc->stride[1];
  io.pos = DATA(n->src[PZ_GQA_POS]);
  /* The o_proj slot by the attention ops' one rule (oproj_target_of). */
  LD(n->dst[0], ldo);
  float *dst = DATA(n->dst[0]);
  const oproj_target ot = oproj_target_of(c, n, PZ_GQA_OPROJ_PREZERO, dst, ldo, p->oproj_col_offset, p->hidden,
                                          p->prezero_n_total, p->prezero_n_base);
  io.out = ot.out;
  io.ld_out = ot.ld_out;
  io.out_zero_init = ot.zero_init;
  PZ_CHECK(pz_ref_gqa_attention(c->m, p, &io));
  oproj_copy_back(c, &ot, dst, ldo, p->hidden);
  return PZ_OK;
}

pz_status pz_cpu_op_SILU_MUL(pz_cpu_ctx *c, const pz_node *n) {
  PZ_CHECK(need_src(n, 0));
  const pz_tensor *gu = TT(n->src[0]), *act = TT(n->dst[0]);
  const int64_t inter = act->ne[1];
  if (gu->dtype != PZ_F32 || act->dtype != PZ_BF16)
    return pz_error(PZ_ERR_DTYPE, "%s: silu_mul needs f32 gate|up and a bf16 output", n->name);
  if (gu->ndim != 2 || act->ndim != 2 || gu->ne[1] != 2 * inter)
    return pz_error(PZ_ERR_SHAPE, "%s: gate|up must be [m, 2*%lld] for an output [m, %lld]", n->name, (long long)inter,
                    (long long)inter);
  LD(n->src[0], ldg);
  LD(n->dst[0], lda);
  pz_ref_silu_mul(c->m, inter, DATA(n->src[0]), ldg, DATA(n->dst[0]), lda);
  return PZ_OK;
}
