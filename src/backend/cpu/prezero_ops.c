/* CPU kernels of the prezero rewrite ops (docs/ARCHITECTURE.md §3): the donor with its zero_fill and the
 * GEMM that skips its zeroing when its slice was pre-zeroed. The gate is evaluated here, per
 * step's m, through the shared contract in passes/prezero.h. */
#include <string.h>
#include "backend/cpu/cpu_ops.h"
#include "passes/prezero.h"

/* ar_rmsnorm_maybe_prezero_: exactly AR_RMSNORM (same node fields), then zero rows 0..m-1 of
 * every rank's [M, n_total] f32 buffer (collective: called once for all ranks): all n_total columns when prezero_active(m, n_total, f32,
 * H, tp) holds, else only the n_base prefix (pz_prezero_fill_cols). Rows >= m are left alone. */
pz_status pz_cpu_op_AR_RMSNORM_MAYBE_PREZERO(pz_cpu_ctx *c, const pz_node *n) {
  const pz_graph *g = c->g;
  const pz_norm_params *p = &n->p.norm;
  if (p->fill_buf < 0 || p->fill_buf >= g->n_tensors)
    return pz_error(PZ_ERR_INVALID_ARG, "%s: zero_fill buffer missing", n->name);
  const pz_tensor *B = &g->tensors[p->fill_buf];
  if (B->dtype != PZ_F32 || B->ndim != 2 || B->ne[1] != p->n_total || c->m > B->ne[0] ||
      p->n_base < 0 || p->n_base > p->n_total)
    return pz_error(PZ_ERR_SHAPE, "%s: zero_fill buffer %s does not match n_total=%lld n_base=%lld",
                    n->name, B->name, (long long)p->n_total, (long long)p->n_base);
  /* The donor's own work, bit for bit what the unrewritten node computes. */
  pz_node donor = *n;
  donor.op = PZ_OP_AR_RMSNORM;
  PZ_CHECK(pz_cpu_op_AR_RMSNORM(c, &donor));
  int64_t cols = pz_prezero_fill_cols(c->m, p->n_total, p->n_base, g->info.hidden, c->tp, &c->opts->dev);
  /* A collective op: the executor calls it once per step for all ranks (rank_data[r]). */
  for (int r = 0; r < c->tp; r++) {
    float *buf = (float *)(c->rank_data ? c->rank_data[r][p->fill_buf] : c->data[p->fill_buf]);
    for (int64_t i = 0; i < c->m && cols > 0; i++) memset(buf + i * B->stride[0], 0, (size_t)cols * sizeof(float));
    if (!c->rank_data) break;
  }
  return PZ_OK;
}

/* mm_maybe_prezero_: the GEMM of the same node, run with zero_init = false when its slice
 * [col_offset, col_offset + n) of the donor's buffer is zero on entry this step (inside the
 * always-zeroed n_base prefix, or the gate holds for n_total), else with zero_init = true so
 * it zeroes its own slice. With zeros on entry both flavours are bit-identical
 * (pz_ref_gemm contract), so ON and OFF give the same C. */
pz_status pz_cpu_op_MM_MAYBE_PREZERO(pz_cpu_ctx *c, const pz_node *n) {
  const pz_graph *g = c->g;
  const pz_gemm_params *p = &n->p.gemm;
  if (p->prezero_buf < 0 || p->prezero_buf >= g->n_tensors)
    return pz_error(PZ_ERR_INVALID_ARG, "%s: prezero buffer missing", n->name);
  const pz_tensor *B = &g->tensors[p->prezero_buf], *C = &g->tensors[n->dst[0]];
  bool zeroed = pz_prezero_slice_zeroed(c->m, p->col_offset, C->ne[1], B->ne[1], p->n_base,
                                        g->info.hidden, c->tp, &c->opts->dev);
  pz_node gemm = *n;
  gemm.op = PZ_OP_GEMM;
  gemm.p.gemm.zero_init = !zeroed;
  return pz_cpu_op_GEMM(c, &gemm);
}
