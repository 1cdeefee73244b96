/* Deterministic text and DOT dumps of a graph (used by `prezero graph` and the pass dumps). */
#include "core/ir.h"
#include <errno.h>
#include <stdlib.h>
#include <string.h>

static void shape(const pz_tensor *t, FILE *f) {
  fprintf(f, "[");
  for (int d = 0; d < t->ndim; d++) fprintf(f, d ? ",%lld" : "%lld", (long long)t->ne[d]);
  fprintf(f, "]%s", pz_dtype_name(t->dtype));
}

static void tensor_ref(const pz_graph *g, int id, FILE *f) {
  if (id < 0) { fprintf(f, "-"); return; }
  const pz_tensor *t = &g->tensors[id];
  fprintf(f, "%s", t->name);
  shape(t, f);
  if (t->view_of >= 0) {
    const pz_tensor *b = &g->tensors[t->view_of];
    int64_t rs = t->ndim == 2 ? t->stride[0] : 0;
    fprintf(f, "{view of %s cols %lld..%lld row_stride %lld}", b->name,
            (long long)(rs ? t->view_offset % rs : t->view_offset),
            (long long)((rs ? t->view_offset % rs : t->view_offset) + t->ne[t->ndim - 1]), (long long)rs);
  }
}

static void params(const pz_node *n, FILE *f) {
  switch (n->op) {
    case PZ_OP_GEMM: case PZ_OP_LM_HEAD:
      fprintf(f, " zero_init=%d", n->p.gemm.zero_init); break;
    case PZ_OP_MM_MAYBE_PREZERO:
      fprintf(f, " zero_init=prezero_active(m)?0:1 col_offset=%lld n_base=%lld",
              (long long)n->p.gemm.col_offset, (long long)n->p.gemm.n_base); break;
    case PZ_OP_AR_RMSNORM: fprintf(f, " eps=%g residual=%d", n->p.norm.eps, n->p.norm.has_residual); break;
    case PZ_OP_AR_RMSNORM_MAYBE_PREZERO:
      fprintf(f, " eps=%g residual=%d zero_fill(n_total=%lld n_base=%lld)", n->p.norm.eps,
              n->p.norm.has_residual, (long long)n->p.norm.n_total, (long long)n->p.norm.n_base); break;
    case PZ_OP_MLA_ATTN:
      fprintf(f, " heads=%d q_lora=%lld kv_lora_rank=%lld nope=%lld rope=%lld v=%lld", n->p.mla.n_heads,
              (long long)n->p.mla.q_lora_rank, (long long)n->p.mla.kv_lora_rank,
              (long long)n->p.mla.qk_nope_head_dim, (long long)n->p.mla.qk_rope_head_dim,
              (long long)n->p.mla.v_head_dim);
      /* The GEMMs inside the op, as k->n per rank. */
      if (n->p.mla.q_lora_rank > 0)
        fprintf(f, " q_b=%lld->%lld", (long long)n->p.mla.q_lora_rank,
                (long long)(n->p.mla.n_heads * (n->p.mla.qk_nope_head_dim + n->p.mla.qk_rope_head_dim)));
      fprintf(f, " o_proj=%lld->%lld", (long long)(n->p.mla.n_heads * n->p.mla.v_head_dim), (long long)n->p.mla.hidden);
      /* Prezero slots (only when the pass set them, so unrewritten graphs dump as before). */
      if (n->p.mla.prezero_n_total > 0) {
        fprintf(f, " prezero(n_total=%lld n_base=%lld", (long long)n->p.mla.prezero_n_total,
                (long long)n->p.mla.prezero_n_base);
        if (n->src[PZ_MLA_QB_PREZERO] >= 0) fprintf(f, " qb_prezero@%lld", (long long)n->p.mla.qb_col_offset);
        if (n->src[PZ_MLA_OPROJ_PREZERO] >= 0) fprintf(f, " oproj_prezero@%lld", (long long)n->p.mla.oproj_col_offset);
        fprintf(f, ")");
      }
      break;
    case PZ_OP_GQA_ATTN:
      fprintf(f, " heads=%d kv_heads=%d head_dim=%lld%s rope=%s o_proj=%lld->%lld", n->p.gqa.n_heads, n->p.gqa.n_kv_heads,
              (long long)n->p.gqa.head_dim, n->src[PZ_GQA_Q_NORM_W] >= 0 ? " qk_norm" : "",
              n->p.gqa.rope.type == PZ_ROPE_LLAMA3 ? "llama3" : n->p.gqa.rope.type == PZ_ROPE_YARN ? "yarn"
              : n->p.gqa.rope.type == PZ_ROPE_LONGROPE ? "longrope" : "default",
              (long long)(n->p.gqa.n_heads * n->p.gqa.head_dim), (long long)n->p.gqa.hidden);
      if (n->p.gqa.rotary_dim) fprintf(f, " rotary_dim=%lld", (long long)n->p.gqa.rotary_dim);
      if (n->p.gqa.window) fprintf(f, " window=%lld", (long long)n->p.gqa.window);
      if (n->p.gqa.prezero_n_total > 0) {
        fprintf(f, " prezero(n_total=%lld n_base=%lld", (long long)n->p.gqa.prezero_n_total, (long long)n->p.gqa.prezero_n_base);
        if (n->src[PZ_GQA_OPROJ_PREZERO] >= 0) fprintf(f, " oproj_prezero@%lld", (long long)n->p.gqa.oproj_col_offset);
        fprintf(f, ")");
      }
      break;
    case PZ_OP_SILU_MUL: fprintf(f, " inter=%lld", (long long)n->p.mlp.inter); break;
    case PZ_OP_MOE:
      fprintf(f, " experts=%d top_k=%d groups=%d/%d scoring=%s topk_method=%s inter=%lld shared_inter=%lld",
              n->p.moe.n_experts, n->p.moe.top_k, n->p.moe.topk_group, n->p.moe.n_group,
              n->p.moe.scoring == PZ_SCORE_SIGMOID ? "sigmoid" : n->p.moe.scoring == PZ_SCORE_TOPK_SOFTMAX ? "topk_softmax" : "softmax",
              n->p.moe.topk_method == PZ_TOPK_NOAUX_TC ? "noaux_tc"
              : n->p.moe.topk_method == PZ_TOPK_GROUP_LIMITED ? "group_limited_greedy" : "greedy",
              (long long)n->p.moe.inter, (long long)n->p.moe.shared_inter);
      if (n->p.moe.wquant == 1) fprintf(f, " experts_int4 group=%lld", (long long)n->p.moe.q_group);
      else if (n->p.moe.wquant == 2)
        fprintf(f, " experts_fp8 block=%lldx%lld", (long long)n->p.moe.q_block_rows, (long long)n->p.moe.q_block_cols);
      if (n->p.moe.prezero_n_total > 0 && n->n_src >= PZ_MOE_NSRC_Q && n->src[PZ_MOE_SH_GU_PREZERO] >= 0)
        fprintf(f, " prezero(n_total=%lld n_base=%lld sh_gu_prezero@%lld)", (long long)n->p.moe.prezero_n_total,
                (long long)n->p.moe.prezero_n_base, (long long)n->p.moe.sh_gu_col_offset);
      break;
    default: break;
  }
}

/* One slice of a prezero buffer, for the summary: the consumer writing columns [col, col+w). */
typedef struct { int64_t col, w; const char *tensor, *how, *node; } pz_slice_row;

static int slice_cmp(const void *a, const void *b) {
  const pz_slice_row *x = a, *y = b;
  return x->col < y->col ? -1 : x->col > y->col;
}

/* After a prezero rewrite: one block per donor buffer with n_total, n_base and its slices
 * (offset, width, consumer). Prints nothing for a graph without a zero_fill donor, so an
 * unrewritten graph's dump is unchanged. */
static void prezero_summary(const pz_graph *g, FILE *f) {
  bool any = false;
  for (int i = 0; i < g->n_nodes; i++) {
    const pz_node *d = &g->nodes[i];
    if (d->op != PZ_OP_AR_RMSNORM_MAYBE_PREZERO || d->p.norm.fill_buf < 0) continue;
    if (!any) fprintf(f, "# prezero buffers: the donor zeroes columns [0, n_base) of rows 0..m-1 every step, and "
                         "[n_base, n_total) too when prezero_active(m); consumers beyond n_base zero their own slice otherwise\n");
    any = true;
    int buf = d->p.norm.fill_buf;
    const pz_tensor *B = &g->tensors[buf];
    fprintf(f, "#   %s [%lld,%lld]f32 n_total=%lld n_base=%lld, filled by %s\n", B->name, (long long)B->ne[0],
            (long long)B->ne[1], (long long)d->p.norm.n_total, (long long)d->p.norm.n_base, d->name);
    pz_slice_row rows[32];
    int nr = 0;
    for (int j = 0; j < g->n_nodes && nr < 30; j++) {
      const pz_node *n = &g->nodes[j];
      if (n->op == PZ_OP_MM_MAYBE_PREZERO && pz_storage_of(g, n->p.gemm.prezero_buf) == buf)
        rows[nr++] = (pz_slice_row){n->p.gemm.col_offset, g->tensors[n->dst[0]].ne[1], g->tensors[n->dst[0]].name,
                                    "mm_maybe_prezero_", n->name};
      if (n->op == PZ_OP_MLA_ATTN) {
        if (n->src[PZ_MLA_QB_PREZERO] >= 0 && pz_storage_of(g, n->src[PZ_MLA_QB_PREZERO]) == buf)
          rows[nr++] = (pz_slice_row){n->p.mla.qb_col_offset, g->tensors[n->src[PZ_MLA_QB_PREZERO]].ne[1],
                                      g->tensors[n->src[PZ_MLA_QB_PREZERO]].name, "qb_prezero slot (q_b GEMM) of", n->name};
        if (n->src[PZ_MLA_OPROJ_PREZERO] >= 0 && pz_storage_of(g, n->src[PZ_MLA_OPROJ_PREZERO]) == buf)
          rows[nr++] = (pz_slice_row){n->p.mla.oproj_col_offset, g->tensors[n->src[PZ_MLA_OPROJ_PREZERO]].ne[1],
                                      g->tensors[n->src[PZ_MLA_OPROJ_PREZERO]].name, "oproj_prezero slot (o_proj GEMM) of", n->name};
      }
      if (n->op == PZ_OP_GQA_ATTN && n->src[PZ_GQA_OPROJ_PREZERO] >= 0 &&
          pz_storage_of(g, n->src[PZ_GQA_OPROJ_PREZERO]) == buf)
        rows[nr++] = (pz_slice_row){n->p.gqa.oproj_col_offset, g->tensors[n->src[PZ_GQA_OPROJ_PREZERO]].ne[1],
                                    g->tensors[n->src[PZ_GQA_OPROJ_PREZERO]].name, "oproj_prezero slot (o_proj GEMM) of", n->name};
      if (n->op == PZ_OP_MOE && n->n_src >= PZ_MOE_NSRC_Q && n->src[PZ_MOE_SH_GU_PREZERO] >= 0 &&
          pz_storage_of(g, n->src[PZ_MOE_SH_GU_PREZERO]) == buf)
        rows[nr++] = (pz_slice_row){n->p.moe.sh_gu_col_offset, g->tensors[n->src[PZ_MOE_SH_GU_PREZERO]].ne[1],
                                    g->tensors[n->src[PZ_MOE_SH_GU_PREZERO]].name,
                                    "sh_gu_prezero slot (shared experts' gate | up GEMM) of", n->name};
    }
    qsort(rows, (size_t)nr, sizeof rows[0], slice_cmp);
    for (int k = 0; k < nr; k++)
      fprintf(f, "#     cols [%lld, %lld) width %lld: %s, %s %s%s\n", (long long)rows[k].col,
              (long long)(rows[k].col + rows[k].w), (long long)rows[k].w, rows[k].tensor, rows[k].how, rows[k].node,
              rows[k].col + rows[k].w > d->p.norm.n_base ? " (beyond n_base)" : "");
  }
}

/* The end of a dump: what is still in f's buffer is written out first, so that a failing write
 * (a full disk, a closed pipe) is a status now rather than lost at the caller's fclose. */
static pz_status dump_end(FILE *f, const char *what) {
  const int err = fflush(f) != 0 ? errno : 0;
  if (err) return pz_error(PZ_ERR_IO, "%s: write failed (%s)", what, strerror(err));
  return ferror(f) ? pz_error(PZ_ERR_IO, "%s: write failed", what) : PZ_OK;
}

pz_status pz_graph_dump_text(const pz_graph *g, FILE *f) {
  fprintf(f, "# decode graph %s: tp=%d m=%lld layers=%d nodes=%d tensors=%d (rank 0)\n",
          g->info.model_name, g->info.tp, (long long)g->info.m, g->info.n_layers, g->n_nodes, g->n_tensors);
  for (int i = 0; i < g->n_nodes; i++) {
    const pz_node *n = &g->nodes[i];
    fprintf(f, "%4d %-40s %-26s", n->id, n->name, pz_op_name(n->op));
    params(n, f);
    fprintf(f, "\n       in: ");
    for (int s = 0; s < n->n_src; s++) {
      if (s) fprintf(f, ", ");
      tensor_ref(g, n->src[s], f);
    }
    fprintf(f, "\n      out: ");
    for (int d = 0; d < n->n_dst; d++) {
      if (d) fprintf(f, ", ");
      tensor_ref(g, n->dst[d], f);
    }
    if (n->op == PZ_OP_AR_RMSNORM_MAYBE_PREZERO) {
      fprintf(f, "\n     fill: ");
      tensor_ref(g, n->p.norm.fill_buf, f);
    }
    fprintf(f, "\n");
  }
  prezero_summary(g, f);
  return dump_end(f, "graph dump");
}

pz_status pz_graph_dump_dot(const pz_graph *g, FILE *f) {
  fprintf(f, "digraph decode {\n  rankdir=TB; node [shape=box, fontname=monospace];\n");
  for (int i = 0; i < g->n_nodes; i++) {
    const pz_node *n = &g->nodes[i];
    const char *color = (n->op == PZ_OP_AR_RMSNORM_MAYBE_PREZERO || n->op == PZ_OP_MM_MAYBE_PREZERO) ? "lightgreen"
                        : (n->op == PZ_OP_MLA_ATTN && n->p.mla.prezero_n_total > 0) ? "palegreen"
                        : (n->op == PZ_OP_GQA_ATTN && n->p.gqa.prezero_n_total > 0) ? "palegreen" : "white";
    fprintf(f, "  n%d [label=\"%s\\n%s\", style=filled, fillcolor=%s];\n", i, n->name, pz_op_name(n->op), color);
  }
  /* Edge from the last writer of a tensor's storage to each reader. A prezero consumer (a
   * mm_maybe_prezero_ or an attention op's slot) gets a dashed "zero_fill" edge from its donor instead,
   * labelled with its columns: the donor, not the last writer of the buffer, prepared them. */
  for (int i = 0; i < g->n_nodes; i++) {
    const pz_node *n = &g->nodes[i];
    int pz_src[2] = {-1, -1};
    int64_t pz_col[2] = {0, 0};
    if (n->op == PZ_OP_MM_MAYBE_PREZERO) { pz_src[0] = n->dst[0]; pz_col[0] = n->p.gemm.col_offset; }
    if (n->op == PZ_OP_MLA_ATTN) {
      pz_src[0] = n->src[PZ_MLA_QB_PREZERO]; pz_col[0] = n->p.mla.qb_col_offset;
      pz_src[1] = n->src[PZ_MLA_OPROJ_PREZERO]; pz_col[1] = n->p.mla.oproj_col_offset;
    }
    if (n->op == PZ_OP_GQA_ATTN) { pz_src[0] = n->src[PZ_GQA_OPROJ_PREZERO]; pz_col[0] = n->p.gqa.oproj_col_offset; }
    if (n->op == PZ_OP_MOE && n->n_src >= PZ_MOE_NSRC_Q) {
      pz_src[0] = n->src[PZ_MOE_SH_GU_PREZERO];
      pz_col[0] = n->p.moe.sh_gu_col_offset;
    }
    for (int k = 0; k < 2; k++) {
      if (pz_src[k] < 0) continue;
      int sid = pz_storage_of(g, pz_src[k]);
      for (int j = i - 1; j >= 0; j--) {
        const pz_node *w = &g->nodes[j];
        if (w->op != PZ_OP_AR_RMSNORM_MAYBE_PREZERO || pz_storage_of(g, w->p.norm.fill_buf) != sid) continue;
        fprintf(f, "  n%d -> n%d [label=\"zero_fill cols %lld..%lld\", style=dashed, color=darkgreen];\n", j, i,
                (long long)pz_col[k], (long long)(pz_col[k] + g->tensors[pz_src[k]].ne[1]));
        break;
      }
    }
    for (int s = 0; s < n->n_src; s++) {
      int id = n->src[s];
      if (id < 0 || (g->tensors[id].kind != PZ_T_ACT && g->tensors[id].kind != PZ_T_BUFFER)) continue;
      if (n->op == PZ_OP_MLA_ATTN && (s == PZ_MLA_QB_PREZERO || s == PZ_MLA_OPROJ_PREZERO)) continue;
      if (n->op == PZ_OP_GQA_ATTN && s == PZ_GQA_OPROJ_PREZERO) continue;
      if (n->op == PZ_OP_MOE && s == PZ_MOE_SH_GU_PREZERO) continue;
      int sid = pz_storage_of(g, id);
      for (int j = i - 1; j >= 0; j--) {
        const pz_node *w = &g->nodes[j];
        int hit = 0;
        for (int d = 0; d < w->n_dst; d++) hit |= pz_storage_of(g, w->dst[d]) == sid;
        if (w->op == PZ_OP_AR_RMSNORM_MAYBE_PREZERO && pz_storage_of(g, w->p.norm.fill_buf) == sid) hit = 2;
        if (hit) {
          fprintf(f, "  n%d -> n%d [label=\"%s\"%s];\n", j, i, g->tensors[id].name, hit == 2 ? ", style=dashed" : "");
          break;
        }
      }
    }
  }
  fprintf(f, "}\n");
  return dump_end(f, "graph dot");
}
