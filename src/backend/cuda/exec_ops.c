/* CUDA op table of the executor: unpacks each node's tensors and params and calls the kernels'
 * C launchers on the rank's stream. Ops without a kernel in this build have no entry (gap). */
#include "backend/cuda/exec_ops.h"
#include <string.h>
#include "backend/cuda/ar_fused.h"
#include "backend/cuda/cuda_util.h"
#include "passes/prezero.h"

#define TT(id) (&c->g->tensors[(id)])
#define DATA(id) (c->data[(id)])

static pz_status need_src(const pz_node *n, int slot) {
  if (slot >= n->n_src || n->src[slot] < 0) return pz_error(PZ_ERR_INVALID_ARG, "%s: missing input %d", n->name, slot);
  return PZ_OK;
}

/* Row stride (elements) of a 1-D or 2-D tensor with unit column stride. */
static pz_status row_ld(const pz_cuda_ctx *c, const pz_node *n, int id, int64_t *ld) {
  const pz_tensor *t = TT(id);
  if (t->ndim == 1) { *ld = t->ne[0]; return PZ_OK; }
  if (t->stride[t->ndim - 1] != 1) return pz_error(PZ_ERR_SHAPE, "%s: tensor %s has non-unit column stride", n->name, t->name);
  *ld = t->stride[t->ndim - 2];
  return PZ_OK;
}
#define LD(id, var) int64_t var; PZ_CHECK(row_ld(c, n, (id), &var))

/* ---------------------------------------------------------------- dense ops (dense_ops.h) */

static pz_status op_embedding(pz_cuda_ctx *c, const pz_node *n) {
  PZ_CHECK(need_src(n, 0)); PZ_CHECK(need_src(n, 1));
  const pz_tensor *W = TT(n->src[1]), *o = TT(n->dst[0]);
  if (o->dtype != PZ_F32) return pz_error(PZ_ERR_DTYPE, "%s: output must be f32", n->name);
  LD(n->dst[0], ldo);
  int64_t vpr = n->p.vocab.vocab_per_rank > 0 ? n->p.vocab.vocab_per_rank : W->ne[0];
  int64_t vocab = n->p.vocab.vocab_size > 0 ? n->p.vocab.vocab_size
                  : c->g->info.vocab_size > 0 ? c->g->info.vocab_size : vpr * c->tp;
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
  pz_status st = pz_gemm_launch(c->gemm, &a, c->stream);
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
  for (int r = 0; r < c->tp; r++) {
    void **d = c->ranks[r].data;
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
  pz_status st = pz_ar_rmsnorm_launch_all(c->comm, args, c->dev, streams);
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
  int64_t vocab = n->p.vocab.vocab_size > 0 ? n->p.vocab.vocab_size
                  : c->g->info.vocab_size > 0 ? c->g->info.vocab_size : vpr * c->tp;
  for (int r = 0; r < c->tp; r++) {
    pz_cuda_rank *R = &c->ranks[r];
    PZ_CUDA_CHECK(cudaSetDevice(R->device));
    pz_argmax_params p = {.logits = R->data[n->src[0]], .cand = R->cand,
                          .ids = c->tp == 1 ? R->data[n->dst[0]] : NULL, .m = c->m, .ld = ld,
                          .vocab_per_rank = vpr, .vocab_size = vocab, .rank = r};
    PZ_CHECK(pz_cuda_argmax_shard(&p, R->stream));
    PZ_CUDA_CHECK(cudaMemcpyAsync(R->cand_host, R->cand, sizeof(pz_argmax_cand) * (size_t)c->m,
                                  cudaMemcpyDeviceToHost, R->stream));
  }
  return PZ_OK;
}

/* ---------------------------------------------------------------- table */

typedef struct { pz_cuda_op_fn fn; const char *gap; } op_entry;

static const op_entry table[PZ_OP_COUNT] = {
    [PZ_OP_EMBEDDING] = {op_embedding, ""},
    [PZ_OP_RMSNORM] = {op_rmsnorm, ""},
    [PZ_OP_AR_RMSNORM] = {op_ar_rmsnorm, ""},
    [PZ_OP_GEMM] = {op_gemm, ""},
    [PZ_OP_MLA_ATTN] = {NULL, "the CUDA MLA decode op (src/backend/cuda/mla*.h) is not in this build"},
    [PZ_OP_MOE] = {NULL, "the CUDA MoE op (src/backend/cuda/moe*.h) is not in this build"},
    [PZ_OP_DENSE_MLP] = {NULL, "the CUDA dense MLP (src/backend/cuda/moe*.h) is not in this build"},
    [PZ_OP_LM_HEAD] = {op_lm_head, ""},
    [PZ_OP_ARGMAX] = {op_argmax, ""},
    [PZ_OP_AR_RMSNORM_MAYBE_PREZERO] = {op_ar_rmsnorm_maybe_prezero, ""},
    [PZ_OP_MM_MAYBE_PREZERO] = {op_mm_maybe_prezero, ""},
};

pz_cuda_op_fn pz_cuda_op_launcher(pz_op op) { return (unsigned)op < PZ_OP_COUNT ? table[op].fn : NULL; }

const char *pz_cuda_op_gap(pz_op op) {
  if ((unsigned)op >= PZ_OP_COUNT) return "unknown op";
  return table[op].fn ? "" : table[op].gap ? table[op].gap : "no CUDA launcher";
}
