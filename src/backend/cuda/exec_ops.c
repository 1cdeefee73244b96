/* CUDA op table of the executor, generated from core/ops.def (a launcher or a declared gap per op),
 * and its launchers: each unpacks a node's tensors and params and calls the kernels' C launchers. */
#include "backend/cuda/exec_ops.h"
#include <string.h>
#include "backend/cuda/ar_fused.h"
#include "backend/cuda/ar_mp.h"
#include "backend/cuda/cuda_util.h"
#include "backend/cuda/gqa.h"
#include "backend/cuda/mla.h"
#include "backend/cuda/moe.h"
#include "backend/cuda/mlp_gemm.h"
#include "backend/cuda/moe_q.h"
#include "backend/node_args.h"
#include "core/kv_pages.h"
#include "core/options.h"
#include "passes/prezero.h"
#include <stdlib.h>

#define TT(id) (&c->g->tensors[(id)])
#define DATA(id) (c->data[(id)])

/* Row stride (elements) of a 1-D or 2-D tensor with unit column stride (backend/node_args.h). */
#define LD(id, var) int64_t var = 0; PZ_CHECK(pz_node_row_ld(c->g, n, (id), &var))
static pz_status need_src(const pz_node *n, int slot) { return pz_node_need_src(n, slot); }

/* ---------------------------------------------------------------- dense ops (dense_ops.h) */

static pz_status op_embedding(pz_cuda_ctx *c, const pz_node *n) {
  PZ_CHECK(need_src(n, 0)); PZ_CHECK(need_src(n, 1));
  const pz_tensor *W = TT(n->src[1]), *o = TT(n->dst[0]);
  if (o->dtype != PZ_F32) return pz_error(PZ_ERR_DTYPE, "%s: output must be f32", n->name);
  LD(n->dst[0], ldo);
  int64_t vpr = n->p.vocab.vocab_per_rank > 0 ? n->p.vocab.vocab_per_rank : W->ne[0];
  int64_t vocab = pz_node_vocab_size(c->g, n, vpr, c->tp);
  pz_embedding_params p = {.ids = DATA(n->src[0]), .W = DATA(n->src[1]), .out = DATA(n->dst[0]), .m = c->m,
                           .H = W->ne[1], .ld_out = ldo, .vocab_size = vocab, .vocab_per_rank = vpr, .rank = c->rank};
  return pz_cuda_embedding(&p, c->stream);
}

static pz_status op_rmsnorm(pz_cuda_ctx *c, const pz_node *n) {
  PZ_CHECK(need_src(n, 0)); PZ_CHECK(need_src(n, 1));
  const pz_tensor *x = TT(n->src[0]);
  LD(n->src[0], ldx);
  LD(n->dst[0], ldy);
  pz_rmsnorm_params p = {.x = DATA(n->src[0]), .x_dtype = x->dtype, .w = DATA(n->src[1]), .y = DATA(n->dst[0]),
                         .m = c->m, .n = x->ne[1], .ldx = ldx, .ldy = ldy, .eps = n->p.norm.eps};
  return pz_cuda_rmsnorm(&p, c->stream);
}

/* ---------------------------------------------------------------- GEMMs (gemm.h) */

static pz_status gemm_common(pz_cuda_ctx *c, const pz_node *n, bool zero_init) {
  PZ_CHECK(need_src(n, 0)); PZ_CHECK(need_src(n, 1));
  const pz_tensor *A = TT(n->src[0]), *W = TT(n->src[1]), *C = TT(n->dst[0]);
  if (A->dtype != PZ_BF16 || W->dtype != PZ_BF16 || (C->dtype != PZ_F32 && C->dtype != PZ_BF16))
    return pz_error(PZ_ERR_DTYPE, "%s: GEMM needs bf16 A and W, f32 or bf16 C", n->name);
  LD(n->src[0], lda);
  LD(n->src[1], ldw);
  LD(n->dst[0], ldc);
  pz_gemm_args a;
  memset(&a, 0, sizeof a);
  a.m = (int)c->m;
  a.n = (int)W->ne[0];
  a.k = (int)W->ne[1];
  a.A = DATA(n->src[0]);
  a.lda = lda;
  a.W = DATA(n->src[1]);
  a.ldw = ldw;
  a.C = DATA(n->dst[0]);
  a.ldc = ldc;
  a.c_dtype = C->dtype;
  a.bias = (n->n_src > 2 && n->src[2] >= 0) ? DATA(n->src[2]) : NULL;
  a.zero_init = zero_init;
  a.config.flavour = PZ_GEMM_AUTO;
  pz_status st = pz_cuda_gemm_any(c->gemm, &a, c->stream); /* the split-K family, or any shape it refuses */
  if (st != PZ_OK) pz_log_propagate(__FILE__, __LINE__, n->name, st);
  return st;
}

static pz_status op_gemm(pz_cuda_ctx *c, const pz_node *n) { return gemm_common(c, n, n->p.gemm.zero_init); }

/* LM_HEAD's params are vocab params (union): it always zeroes its output itself. */
static pz_status op_lm_head(pz_cuda_ctx *c, const pz_node *n) { return gemm_common(c, n, true); }

/* mm_maybe_prezero_: zero_init = false exactly when the donor zeroed this slice for this m
 * (pz_prezero_slice_zeroed, the rule every op of the donor's group shares). */
static pz_status op_mm_maybe_prezero(pz_cuda_ctx *c, const pz_node *n) {
  const pz_gemm_params *p = &n->p.gemm;
  if (p->prezero_buf < 0 || p->prezero_buf >= c->g->n_tensors)
    return pz_error(PZ_ERR_INVALID_ARG, "%s: prezero buffer missing", n->name);
  const pz_tensor *B = TT(p->prezero_buf), *C = TT(n->dst[0]);
  bool zeroed = pz_prezero_slice_zeroed(c->m, p->col_offset, C->ne[1], B->ne[1], p->n_base, c->g->info.hidden, c->tp,
                                        c->dev);
  return gemm_common(c, n, !zeroed);
}

/* ---------------------------------------------------------------- collectives (ar_fused.h) */

/* AR_RMSNORM and AR_RMSNORM_MAYBE_PREZERO on every rank through the communicator: one launch
 * per rank, all issued before anything waits (the kernels of the ranks meet on the device). */
static pz_status ar_common(pz_cuda_ctx *c, const pz_node *n, bool with_fill) {
  PZ_CHECK(need_src(n, 0)); PZ_CHECK(need_src(n, 1));
  if (n->n_dst < 2) return pz_error(PZ_ERR_INVALID_ARG, "%s: needs dst {x_norm, residual}", n->name);
  const pz_tensor *part = TT(n->src[0]);
  const pz_norm_params *p = &n->p.norm;
  LD(n->src[0], ldp);
  LD(n->dst[0], ldx);
  LD(n->dst[1], ldr);
  bool has_res = p->has_residual && n->n_src > 2 && n->src[2] >= 0;
  if (has_res) {
    LD(n->src[2], ldri);
    if (ldri != ldr) return pz_error(PZ_ERR_SHAPE, "%s: residual in/out strides differ", n->name);
  }
  const int64_t H = part->ne[1];
  pz_zero_fill fill = {0};
  bool fill_all = false;
  if (with_fill) {
    if (p->fill_buf < 0 || p->fill_buf >= c->g->n_tensors)
      return pz_error(PZ_ERR_INVALID_ARG, "%s: zero_fill buffer missing", n->name);
    const pz_tensor *B = TT(p->fill_buf);
    if (B->dtype != PZ_F32 || B->ndim != 2 || B->ne[1] != p->n_total || c->m > B->ne[0] || p->n_base < 0 ||
        p->n_base > p->n_total)
      return pz_error(PZ_ERR_SHAPE, "%s: zero_fill buffer %s does not match n_total=%lld n_base=%lld", n->name, B->name,
                      (long long)p->n_total, (long long)p->n_base);
    fill.n_total = p->n_total;
    fill.n_base = p->n_base;
    fill.row_stride = B->stride[0];
    fill.dtype = PZ_F32;
    /* The gate, evaluated for this m (at capture: the captured size), by the shared rule. */
    fill_all = pz_prezero_fill_cols(c->m, p->n_total, p->n_base, c->g->info.hidden, c->tp, c->dev) == p->n_total;
  }
  pz_ar_rmsnorm_args args[PZ_CUDA_MAX_TP];
  cudaStream_t streams[PZ_CUDA_MAX_TP];
  for (int r = c->lo; r < c->hi; r++) {
    void **d = c->rank_data[r];
    pz_ar_rmsnorm_args *a = &args[r];
    memset(a, 0, sizeof *a);
    a->partial = d[n->src[0]];
    a->ld_partial = ldp;
    a->residual_in = has_res ? d[n->src[2]] : NULL;
    a->residual_out = d[n->dst[1]];
    a->ld_res = ldr;
    a->weight = d[n->src[1]];
    a->x_norm = d[n->dst[0]];
    a->ld_x = ldx;
    a->eps = p->eps;
    a->m = c->m;
    a->H = H;
    if (with_fill) {
      a->fill = fill;
      a->fill.ptr = d[p->fill_buf];
      a->fill_all = fill_all;
    }
    streams[r] = c->ranks[r].stream;
  }
  pz_status st;
  if (c->nccl) {
    /* NCCL sums contiguous partials in place: a strided partial (a prezero slice) is copied to
     * the rank's contiguous scratch first. */
    for (int r = c->lo; r < c->hi; r++)
      if (ldp != H) {
        pz_cuda_rank *R = &c->ranks[r];
        PZ_CUDA_CHECK(cudaSetDevice(R->device));
        PZ_CUDA_CHECK(cudaMemcpy2DAsync(R->ar_tmp, (size_t)H * 4, args[r].partial, (size_t)ldp * 4, (size_t)H * 4,
                                        (size_t)c->m, cudaMemcpyDeviceToDevice, R->stream));
        args[r].partial = R->ar_tmp;
        args[r].ld_partial = H;
      }
    st = pz_ar_rmsnorm_nccl_launch_all(c->nccl, c->comm, args, streams);
  } else if (c->mp) {
    st = pz_ar_rmsnorm_launch_view(pz_ar_comm_view(c->mp), &args[c->lo], c->dev, streams[c->lo]);
  } else {
    st = pz_ar_rmsnorm_launch_all(c->comm, args, c->dev, streams);
  }
  if (st != PZ_OK) pz_log_propagate(__FILE__, __LINE__, n->name, st);
  return st;
}

static pz_status op_ar_rmsnorm(pz_cuda_ctx *c, const pz_node *n) { return ar_common(c, n, false); }
static pz_status op_ar_rmsnorm_maybe_prezero(pz_cuda_ctx *c, const pz_node *n) { return ar_common(c, n, true); }

/* ARGMAX: each rank's shard candidates (dense_ops.h), copied to pinned host memory; the host
 * combines them in rank order after the step (pz_cuda_exec_step), the rule of
 * pz_cuda_argmax_combine / pz_ref_argmax. At TP = 1 the kernel also writes the ids tensor. */
static pz_status op_argmax(pz_cuda_ctx *c, const pz_node *n) {
  PZ_CHECK(need_src(n, 0));
  const pz_tensor *L = TT(n->src[0]);
  if (L->dtype != PZ_F32) return pz_error(PZ_ERR_DTYPE, "%s: argmax needs f32 logits", n->name);
  LD(n->src[0], ld);
  int64_t vpr = L->ne[1];
  int64_t vocab = pz_node_vocab_size(c->g, n, vpr, c->tp);
  for (int r = c->lo; r < c->hi; r++) {
    pz_cuda_rank *R = &c->ranks[r];
    PZ_CUDA_CHECK(cudaSetDevice(R->device));
    pz_argmax_params p = {.logits = c->rank_data[r][n->src[0]], .cand = R->cand,
                          .ids = c->tp == 1 ? c->rank_data[r][n->dst[0]] : NULL, .m = c->m, .ld = ld,
                          .vocab_per_rank = vpr, .vocab_size = vocab, .rank = r};
    PZ_CHECK(pz_cuda_argmax_shard(&p, R->stream));
    PZ_CUDA_CHECK(cudaMemcpyAsync(R->cand_host, R->cand, sizeof(pz_argmax_cand) * (size_t)c->m,
                                  cudaMemcpyDeviceToHost, R->stream));
  }
  return PZ_OK;
}

/* ---------------------------------------------------------------- MLA (mla.h) */

static const void *opt_data(pz_cuda_ctx *c, const pz_node *n, int slot) {
  return (slot < n->n_src && n->src[slot] >= 0) ? DATA(n->src[slot]) : NULL;
}
static int64_t opt_ld(pz_cuda_ctx *c, const pz_node *n, int slot) { return pz_node_opt_ld(c->g, n, slot); }

/* The MLA op with its prezero slots, by the CPU op's rule (pz_cpu_op_MLA_ATTN): a set slot is
 * written with zero_init = false exactly when the donor zeroed it for this m. */
static pz_status op_mla(pz_cuda_ctx *c, const pz_node *n) {
  const pz_mla_params *p = &n->p.mla;
  if (n->n_src < PZ_MLA_NSRC) return pz_error(PZ_ERR_INVALID_ARG, "%s: expected %d src slots", n->name, PZ_MLA_NSRC);
  PZ_CHECK(need_src(n, PZ_MLA_KV_CACHE));
  pz_mla_cuda_ctx *mc = c->ranks[c->rank].op_ctx ? c->ranks[c->rank].op_ctx[n->id] : NULL;
  if (!mc) return pz_error(PZ_ERR_INTERNAL, "%s: MLA context missing on rank %d", n->name, c->rank);
  pz_mla_cuda_io io;
  memset(&io, 0, sizeof io);
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
  io.cache_seq_stride = TT(n->src[PZ_MLA_KV_CACHE])->stride[0];
  if (n->src[PZ_MLA_BLOCK_TABLE] >= 0) { /* paged cache (core/kv_pages.h) */
    const pz_tensor *bt = TT(n->src[PZ_MLA_BLOCK_TABLE]);
    PZ_CHECK(pz_kv_check_shapes(p, TT(n->src[PZ_MLA_KV_CACHE]), bt, c->m, n->name));
    io.block_table = DATA(n->src[PZ_MLA_BLOCK_TABLE]);
    io.ld_block_table = bt->stride[0];
    io.cache_seq_stride = 0;
  }
  io.pos = opt_data(c, n, PZ_MLA_POS);
  io.rows = c->ranks[c->rank].rows; /* padding rows of a captured size attend one position */
  bool qbz = false, oz = false;
  pz_mla_cuda_slots_zeroed(p, c->m, c->tp, c->dev, &qbz, &oz);
  if (n->src[PZ_MLA_QB_PREZERO] >= 0) {
    io.qb_slot = DATA(n->src[PZ_MLA_QB_PREZERO]);
    io.ld_qb_slot = opt_ld(c, n, PZ_MLA_QB_PREZERO);
    io.qb_slot_zeroed = qbz;
  }
  LD(n->dst[0], ldo);
  float *dst = DATA(n->dst[0]);
  float *oslot = n->src[PZ_MLA_OPROJ_PREZERO] >= 0 ? DATA(n->src[PZ_MLA_OPROJ_PREZERO]) : NULL;
  int64_t ld_slot = opt_ld(c, n, PZ_MLA_OPROJ_PREZERO);
  if (oslot) {
    io.out = oslot;
    io.ld_out = ld_slot;
    io.out_zeroed = oz;
  } else {
    io.out = dst;
    io.ld_out = ldo;
    io.out_zeroed = false;
  }
  pz_status st = pz_mla_cuda_decode(mc, (int)c->m, &io, c->stream);
  if (st != PZ_OK) { pz_log_propagate(__FILE__, __LINE__, n->name, st); return st; }
  if (oslot && (oslot != dst || ld_slot != ldo))
    PZ_CUDA_CHECK(cudaMemcpy2DAsync(dst, (size_t)ldo * 4, oslot, (size_t)ld_slot * 4, (size_t)p->hidden * 4, (size_t)c->m,
                                    cudaMemcpyDeviceToDevice, c->stream));
  return PZ_OK;
}

/* ---------------------------------------------------------------- GQA (gqa.h) */

/* The GQA op with its o_proj slot, by the CPU op's rule: a set slot is written with zero_init =
 * false exactly when the donor zeroed it for this m. Its scratch is the rank's shared workspace. */
static pz_status op_gqa(pz_cuda_ctx *c, const pz_node *n) {
  const pz_gqa_params *p = &n->p.gqa;
  if (n->n_src < PZ_GQA_NSRC) return pz_error(PZ_ERR_INVALID_ARG, "%s: expected %d src slots", n->name, PZ_GQA_NSRC);
  PZ_CHECK(need_src(n, PZ_GQA_QKV)); PZ_CHECK(need_src(n, PZ_GQA_O_W)); PZ_CHECK(need_src(n, PZ_GQA_K_CACHE));
  PZ_CHECK(need_src(n, PZ_GQA_V_CACHE)); PZ_CHECK(need_src(n, PZ_GQA_POS));
  pz_gqa_cuda_ctx *gc = c->ranks[c->rank].op_ctx ? c->ranks[c->rank].op_ctx[n->id] : NULL;
  if (!gc) return pz_error(PZ_ERR_INTERNAL, "%s: GQA context missing on rank %d", n->name, c->rank);
  const pz_tensor *kc = TT(n->src[PZ_GQA_K_CACHE]), *vc = TT(n->src[PZ_GQA_V_CACHE]);
  if (kc->ndim != 4 || vc->ndim != 4 || kc->stride[3] != 1 || kc->stride[2] != p->head_dim ||
      memcmp(kc->stride, vc->stride, sizeof kc->stride) != 0)
    return pz_error(PZ_ERR_SHAPE, "%s: K/V caches must be [m, kvh, max_ctx, head_dim] with contiguous rows and equal strides",
                    n->name);
  const pz_cuda_rank *R = &c->ranks[c->rank];
  pz_gqa_cuda_io io;
  memset(&io, 0, sizeof io);
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
  io.rows = R->rows; /* padding rows of a captured size attend one position */
  io.workspace = R->ws;
  io.workspace_bytes = R->ws_bytes;
  LD(n->dst[0], ldo);
  float *dst = DATA(n->dst[0]);
  float *oslot = n->src[PZ_GQA_OPROJ_PREZERO] >= 0 ? DATA(n->src[PZ_GQA_OPROJ_PREZERO]) : NULL;
  int64_t ld_slot = opt_ld(c, n, PZ_GQA_OPROJ_PREZERO);
  if (oslot) {
    io.out = oslot;
    io.ld_out = ld_slot;
    io.out_zeroed = pz_gqa_cuda_oproj_zeroed(p, c->m, c->tp, c->dev);
  } else {
    io.out = dst;
    io.ld_out = ldo;
    io.out_zeroed = false;
  }
  pz_status st = pz_gqa_cuda_decode(gc, (int)c->m, &io, c->stream);
  if (st != PZ_OK) { pz_log_propagate(__FILE__, __LINE__, n->name, st); return st; }
  if (oslot && (oslot != dst || ld_slot != ldo))
    PZ_CUDA_CHECK(cudaMemcpy2DAsync(dst, (size_t)ldo * 4, oslot, (size_t)ld_slot * 4, (size_t)p->hidden * 4, (size_t)c->m,
                                    cudaMemcpyDeviceToDevice, c->stream));
  return PZ_OK;
}

/* SILU_MUL: gu [m, 2I] f32 (gate | up) -> act [m, I] bf16 (dense_ops.h). */
static pz_status op_silu_mul(pz_cuda_ctx *c, const pz_node *n) {
  PZ_CHECK(need_src(n, 0));
  const pz_tensor *gu = TT(n->src[0]), *act = TT(n->dst[0]);
  if (gu->dtype != PZ_F32 || act->dtype != PZ_BF16) return pz_error(PZ_ERR_DTYPE, "%s: needs f32 gu and bf16 act", n->name);
  const int64_t inter = n->p.mlp.inter > 0 ? n->p.mlp.inter : act->ne[1];
  if (gu->ne[1] != 2 * inter || act->ne[1] != inter)
    return pz_error(PZ_ERR_SHAPE, "%s: gu has %lld columns and act %lld, want %lld and %lld", n->name, (long long)gu->ne[1],
                    (long long)act->ne[1], (long long)(2 * inter), (long long)inter);
  LD(n->src[0], ldg);
  LD(n->dst[0], lda);
  pz_silu_mul_params sp = {.gu = DATA(n->src[0]), .act = DATA(n->dst[0]), .m = c->m, .inter = inter, .ld_gu = ldg,
                           .ld_act = lda};
  pz_status st = pz_cuda_silu_mul(&sp, c->stream);
  if (st != PZ_OK) pz_log_propagate(__FILE__, __LINE__, n->name, st);
  return st;
}

/* ---------------------------------------------------------------- MoE, dense MLP (moe.h) */

/* Quantised routed experts (moe_q.h): the launcher routes into the workspace's tail, then runs the
 * W4A16 (INT4) or W8A16 (FP8) experts, with the shared experts on the rank's side stream when it
 * has one (PREZERO_MOE_FORK). */
static pz_status op_moe_q(pz_cuda_ctx *c, const pz_node *n) {
  if (n->n_src < PZ_MOE_NSRC_Q) return pz_error(PZ_ERR_INVALID_ARG, "%s: quantised experts without scales", n->name);
  PZ_CHECK(need_src(n, PZ_MOE_S_GATE)); PZ_CHECK(need_src(n, PZ_MOE_S_UP)); PZ_CHECK(need_src(n, PZ_MOE_S_DOWN));
  const pz_tensor *x = TT(n->src[PZ_MOE_X]);
  LD(n->src[PZ_MOE_X], ldx);
  LD(n->src[PZ_MOE_LOGITS], ldl);
  LD(n->dst[0], ldo);
  const pz_cuda_rank *R = &c->ranks[c->rank];
  const pz_moe_params *p = &n->p.moe;
  const size_t rb = pz_moe_route_bytes((int)c->m, p), half = rb / 2;
  if (R->ws_bytes < rb) return pz_error(PZ_ERR_INTERNAL, "%s: MoE workspace smaller than the routing", n->name);
  char *route = (char *)R->ws + (R->ws_bytes - rb) / 256 * 256;
  int32_t *ids = (int32_t *)route;
  float *wts = (float *)(route + half);
  const pz_runtime_opts *ro = pz_gemm_ctx_opts(c->gemm);
  pz_moe_q_args a;
  memset(&a, 0, sizeof a);
  a.m = (int)c->m;
  a.H = x->ne[1];
  a.p = *p;
  a.x = DATA(n->src[PZ_MOE_X]);
  a.ldx = ldx;
  a.ids = ids;
  a.weights = wts;
  a.w_gate = DATA(n->src[PZ_MOE_W_GATE]);
  a.w_up = DATA(n->src[PZ_MOE_W_UP]);
  a.w_down = DATA(n->src[PZ_MOE_W_DOWN]);
  a.s_gate = DATA(n->src[PZ_MOE_S_GATE]);
  a.s_up = DATA(n->src[PZ_MOE_S_UP]);
  a.s_down = DATA(n->src[PZ_MOE_S_DOWN]);
  a.sh_gate = opt_data(c, n, PZ_MOE_SH_GATE);
  a.sh_up = opt_data(c, n, PZ_MOE_SH_UP);
  a.sh_down = opt_data(c, n, PZ_MOE_SH_DOWN);
  a.out = DATA(n->dst[0]);
  a.ld_out = ldo;
  a.workspace = R->ws;
  a.workspace_bytes = (size_t)(route - (char *)R->ws);
  a.l2pf = ro && ro->moe_l2pf == 1; /* PREZERO_MOE_L2PF=1: L2 prefetch */
  a.w4_tiled = p->wquant == 1 && pz_cuda_w4_node_tiled(R, n); /* rearranged at load (w4_tiled.c) */
  a.w4_wk_fixed = ro && ro->moe_w4_wk == 0; /* PREZERO_MOE_W4_WK=0: the fixed K splits */
  a.w4_waves_off = ro && ro->moe_w4_waves == 0; /* PREZERO_MOE_W4_WAVES=0: gate/up's split by the fill rule */
  a.direct_off = ro && ro->moe_direct == 0;   /* PREZERO_MOE_DIRECT=0: the shared-memory reduction */
  a.items_dynamic = ro && ro->moe_dynamic == 1; /* PREZERO_MOE_DYNAMIC=1: items claimed from a counter */
  a.tail_off = !(ro && ro->moe_tail == 1);      /* PREZERO_MOE_TAIL=1: the last wave's items split (opt-in) */
  a.w4_up_ctas = ro && ro->moe_w4_up_regs == 0 ? 4 : 0; /* PREZERO_MOE_W4_UP_REGS=0: gate/up at 4 CTAs per SM */
  a.logits = DATA(n->src[PZ_MOE_LOGITS]);
  a.ld_logits = ldl;
  a.bias = opt_data(c, n, PZ_MOE_BIAS);
  a.rows = R->rows; /* padding rows route to no expert */
  a.route_serial_topk = ro && ro->moe_route_topk == 0; /* PREZERO_MOE_ROUTE_TOPK=0: the former top-k */
  a.route_keys_off = ro && ro->moe_route_keys == 0;    /* PREZERO_MOE_ROUTE_KEYS=0: the former comparison */
  a.side = R->moe_side; /* NULL under PREZERO_MOE_FORK=0 (pz_cuda_ops_prepare) */
  a.ev_fork = R->moe_ev_fork;
  a.ev_join = R->moe_ev_join;
  a.fork_join = ro && ro->moe_fork > 0 ? ro->moe_fork : 0; /* PREZERO_MOE_FORK=1 / 2; unset: by batch */
  a.gemm = c->gemm; /* the shared experts through the GEMMs by batch (PREZERO_MLP_GEMM, mlp_gemm.h) */
  if (n->src[PZ_MOE_SH_GU_PREZERO] >= 0) { /* the prezero slot of the shared experts' gate | up GEMM */
    a.sh_gu = DATA(n->src[PZ_MOE_SH_GU_PREZERO]);
    a.ld_sh_gu = opt_ld(c, n, PZ_MOE_SH_GU_PREZERO);
    a.sh_gu_zeroed = pz_prezero_slice_zeroed(c->m, p->sh_gu_col_offset, 2 * p->shared_inter, p->prezero_n_total,
                                             p->prezero_n_base, c->g->info.hidden, c->tp, c->dev);
  }
  pz_status st = p->wquant == 1 ? pz_moe_w4a16_launch(&a, c->stream) : pz_moe_w8a16_launch(&a, c->stream);
  if (st != PZ_OK) pz_log_propagate(__FILE__, __LINE__, n->name, st);
  return st;
}

static pz_status op_moe(pz_cuda_ctx *c, const pz_node *n) {
  if (n->n_src < PZ_MOE_SH_GATE) return pz_error(PZ_ERR_INVALID_ARG, "%s: too few inputs", n->name);
  PZ_CHECK(need_src(n, PZ_MOE_X)); PZ_CHECK(need_src(n, PZ_MOE_LOGITS));
  PZ_CHECK(need_src(n, PZ_MOE_W_GATE)); PZ_CHECK(need_src(n, PZ_MOE_W_UP)); PZ_CHECK(need_src(n, PZ_MOE_W_DOWN));
  if (n->p.moe.wquant == 1 || n->p.moe.wquant == 2) return op_moe_q(c, n);
  if (n->p.moe.wquant)
    return pz_error(PZ_ERR_UNSUPPORTED, "%s: routed experts with wquant %d have no CUDA kernel", n->name, n->p.moe.wquant);
  const pz_tensor *x = TT(n->src[PZ_MOE_X]);
  LD(n->src[PZ_MOE_X], ldx);
  LD(n->src[PZ_MOE_LOGITS], ldl);
  LD(n->dst[0], ldo);
  const pz_cuda_rank *R = &c->ranks[c->rank];
  pz_moe_args a;
  memset(&a, 0, sizeof a);
  a.m = (int)c->m;
  a.rows = R->rows; /* padding rows route to no expert */
  a.H = x->ne[1];
  a.p = n->p.moe;
  a.x = DATA(n->src[PZ_MOE_X]);
  a.ldx = ldx;
  a.w_gate = DATA(n->src[PZ_MOE_W_GATE]);
  a.w_up = DATA(n->src[PZ_MOE_W_UP]);
  a.w_down = DATA(n->src[PZ_MOE_W_DOWN]);
  a.sh_gate = opt_data(c, n, PZ_MOE_SH_GATE);
  a.sh_up = opt_data(c, n, PZ_MOE_SH_UP);
  a.sh_down = opt_data(c, n, PZ_MOE_SH_DOWN);
  a.out = DATA(n->dst[0]);
  a.ld_out = ldo;
  a.workspace = R->ws;
  a.workspace_bytes = R->ws_bytes;
  {
    const pz_runtime_opts *ro = pz_gemm_ctx_opts(c->gemm); /* PREZERO_MOE_PERSISTENT=0: one CTA per item */
    a.no_persistent = ro && ro->moe_persistent == 0;
    a.route_serial_topk = ro && ro->moe_route_topk == 0; /* PREZERO_MOE_ROUTE_TOPK=0: the former top-k */
    a.route_keys_off = ro && ro->moe_route_keys == 0;    /* PREZERO_MOE_ROUTE_KEYS=0: the former comparison */
  }
  pz_status st = pz_moe_launch(&a, DATA(n->src[PZ_MOE_LOGITS]), ldl, opt_data(c, n, PZ_MOE_BIAS), NULL, NULL, c->stream);
  if (st != PZ_OK) pz_log_propagate(__FILE__, __LINE__, n->name, st);
  return st;
}

static pz_status op_dense_mlp(pz_cuda_ctx *c, const pz_node *n) {
  for (int s = 0; s < 4; s++) PZ_CHECK(need_src(n, s));
  const pz_tensor *x = TT(n->src[0]), *wg = TT(n->src[1]);
  LD(n->src[0], ldx);
  LD(n->dst[0], ldo);
  const pz_cuda_rank *R = &c->ranks[c->rank];
  pz_status st = pz_cuda_mlp(c->gemm, PZ_MLP_DENSE, (int)c->m, x->ne[1], wg->ne[0], DATA(n->src[0]), ldx, DATA(n->src[1]),
                             DATA(n->src[2]), DATA(n->src[3]), DATA(n->dst[0]), ldo, R->ws, R->ws_bytes, c->stream);
  if (st != PZ_OK) pz_log_propagate(__FILE__, __LINE__, n->name, st);
  return st;
}

pz_status pz_cuda_ops_prepare(const pz_graph *g, pz_cuda_rank *R) {
  const int m = (int)g->info.m;
  R->op_ctx = calloc((size_t)(g->n_nodes ? g->n_nodes : 1), sizeof(void *));
  if (!R->op_ctx) return pz_error(PZ_ERR_OOM, "CUDA executor: host allocation");
  size_t ws = 0;
  bool fork = false; /* a quantised MoE node with shared experts: its side stream (moe_q.h) */
  for (int i = 0; i < g->n_nodes; i++) {
    const pz_node *n = &g->nodes[i];
    if (n->op == PZ_OP_MOE && (n->p.moe.wquant == 1 || n->p.moe.wquant == 2) && n->p.moe.shared_inter > 0) fork = true;
    if (n->op == PZ_OP_MLA_ATTN) {
      pz_mla_cuda_ctx *mc = NULL;
      pz_status st = pz_mla_cuda_create(&n->p.mla, m, R->gemm, &mc);
      if (st != PZ_OK) { pz_log_propagate(__FILE__, __LINE__, n->name, st); return st; }
      R->op_ctx[i] = mc;
    } else if (n->op == PZ_OP_GQA_ATTN) {
      pz_gqa_cuda_ctx *gc = NULL;
      pz_status st = pz_gqa_cuda_create(&n->p.gqa, m, R->gemm, &gc);
      if (st != PZ_OK) { pz_log_propagate(__FILE__, __LINE__, n->name, st); return st; }
      R->op_ctx[i] = gc;
      size_t b = pz_gqa_cuda_workspace_bytes(gc); /* q hi/lo, o, split partials: shared by the GQA nodes */
      if (b > ws) ws = b;
    } else if (n->op == PZ_OP_MOE) {
      int64_t H = g->tensors[n->src[PZ_MOE_X]].ne[1];
      size_t b = pz_moe_workspace_bytes(m, H, &n->p.moe) + pz_moe_route_bytes(m, &n->p.moe);
      if (n->p.moe.wquant == 1) /* W4A16: its experts' workspace, then the routing (op_moe_q) */
        b = pz_moe_w4a16_workspace_bytes(m, H, &n->p.moe) + pz_moe_route_bytes(m, &n->p.moe) + 256;
      else if (n->p.moe.wquant == 2) /* W8A16: the same */
        b = pz_moe_w8a16_workspace_bytes(m, H, &n->p.moe) + pz_moe_route_bytes(m, &n->p.moe) + 256;
      if (b > ws) ws = b;
    } else if (n->op == PZ_OP_DENSE_MLP) {
      size_t b = pz_cuda_mlp_workspace_bytes(m, g->tensors[n->src[1]].ne[0]); /* either path (mlp_gemm.h) */
      if (b > ws) ws = b;
    }
  }
  if (ws > 0) {
    void *p = NULL; /* stored once allocated, so a failed call leaves R->ws NULL */
    PZ_CUDA_CHECK_MSG(cudaMalloc(&p, ws), "CUDA executor: MoE/MLP/GQA workspace of %zu bytes on GPU %d", ws, R->device);
    R->ws = p;
    R->ws_bytes = ws;
  }
  const pz_runtime_opts *ro = pz_gemm_ctx_opts(R->gemm);
  if (fork && !(ro && ro->moe_fork == 0)) { /* each stored once created, so a failure leaves NULLs to release */
    cudaStream_t s = NULL;
    cudaEvent_t e0 = NULL, e1 = NULL;
    PZ_CUDA_CHECK_MSG(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "CUDA executor: MoE side stream on GPU %d",
                      R->device);
    R->moe_side = s;
    PZ_CUDA_CHECK_MSG(cudaEventCreateWithFlags(&e0, cudaEventDisableTiming), "CUDA executor: MoE fork event");
    R->moe_ev_fork = e0;
    PZ_CUDA_CHECK_MSG(cudaEventCreateWithFlags(&e1, cudaEventDisableTiming), "CUDA executor: MoE join event");
    R->moe_ev_join = e1;
  }
  return PZ_OK;
}

/* A release cannot fail: the frees' results are ignored on purpose. */
void pz_cuda_ops_release(const pz_graph *g, pz_cuda_rank *R) {
  PZ_CUDA_IGNORE(cudaFree(R->ar_tmp));
  R->ar_tmp = NULL;
  if (R->op_ctx && g)
    for (int i = 0; i < g->n_nodes; i++) {
      if (R->op_ctx[i] && g->nodes[i].op == PZ_OP_MLA_ATTN) pz_mla_cuda_destroy(R->op_ctx[i]);
      else if (R->op_ctx[i] && g->nodes[i].op == PZ_OP_GQA_ATTN) pz_gqa_cuda_destroy(R->op_ctx[i]);
    }
  free(R->op_ctx);
  R->op_ctx = NULL;
  PZ_CUDA_IGNORE(cudaFree(R->ws));
  R->ws = NULL;
  R->ws_bytes = 0;
  if (R->moe_ev_join) PZ_CUDA_IGNORE(cudaEventDestroy(R->moe_ev_join));
  if (R->moe_ev_fork) PZ_CUDA_IGNORE(cudaEventDestroy(R->moe_ev_fork));
  if (R->moe_side) PZ_CUDA_IGNORE(cudaStreamDestroy(R->moe_side));
  R->moe_side = NULL;
  R->moe_ev_fork = R->moe_ev_join = NULL;
}

/* ---------------------------------------------------------------- table (from core/ops.def) */

/* Every op of core/ops.def must say here, by a macro PZ_CUDA_OP_<E>, what this backend has for it:
 *   PZ_CUDA_LAUNCHER(fn): the launcher above;
 *   PZ_CUDA_GAP("why"):   no kernel in this build; the executor refuses any graph holding the op
 *                         with PZ_ERR_UNSUPPORTED and this reason (a non-empty string literal,
 *                         checked at compile time).
 * The table expands PZ_CUDA_OP_##e for every PZ_OP of ops.def, so an op added there without a
 * line here does not compile (undeclared PZ_CUDA_OP_<E>): no op can be missing silently. */
#define PZ_CUDA_LAUNCHER(fn) {fn, ""}
#define PZ_CUDA_GAP(why) {NULL, "" why + 0 * sizeof(char[sizeof(why) > 1 ? 1 : -1])}

#define PZ_CUDA_OP_EMBEDDING PZ_CUDA_LAUNCHER(op_embedding)
#define PZ_CUDA_OP_RMSNORM PZ_CUDA_LAUNCHER(op_rmsnorm)
#define PZ_CUDA_OP_AR_RMSNORM PZ_CUDA_LAUNCHER(op_ar_rmsnorm)
#define PZ_CUDA_OP_GEMM PZ_CUDA_LAUNCHER(op_gemm)
#define PZ_CUDA_OP_MLA_ATTN PZ_CUDA_LAUNCHER(op_mla)
#define PZ_CUDA_OP_MOE PZ_CUDA_LAUNCHER(op_moe)
#define PZ_CUDA_OP_DENSE_MLP PZ_CUDA_LAUNCHER(op_dense_mlp)
#define PZ_CUDA_OP_LM_HEAD PZ_CUDA_LAUNCHER(op_lm_head)
#define PZ_CUDA_OP_ARGMAX PZ_CUDA_LAUNCHER(op_argmax)
#define PZ_CUDA_OP_AR_RMSNORM_MAYBE_PREZERO PZ_CUDA_LAUNCHER(op_ar_rmsnorm_maybe_prezero)
#define PZ_CUDA_OP_MM_MAYBE_PREZERO PZ_CUDA_LAUNCHER(op_mm_maybe_prezero)
#define PZ_CUDA_OP_GQA_ATTN PZ_CUDA_LAUNCHER(op_gqa)
#define PZ_CUDA_OP_SILU_MUL PZ_CUDA_LAUNCHER(op_silu_mul)

typedef struct { pz_cuda_op_fn fn; const char *gap; } op_entry;

static const op_entry table[] = {
#define PZ_OP(e, name, coll) [PZ_OP_##e] = PZ_CUDA_OP_##e,
#include "core/ops.def"
#undef PZ_OP
};
_Static_assert(sizeof table / sizeof table[0] == PZ_OP_COUNT, "one CUDA entry (launcher or gap) per op of ops.def");

pz_cuda_op_fn pz_cuda_op_launcher(pz_op op) { return (unsigned)op < PZ_OP_COUNT ? table[op].fn : NULL; }

const char *pz_cuda_op_gap(pz_op op) {
  if ((unsigned)op >= PZ_OP_COUNT) return "unknown op";
  return table[op].fn ? "" : table[op].gap;
}
