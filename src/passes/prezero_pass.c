/* The prezero pass (DESIGN.md §4): donor-driven and decided by dataflow. A donor (fused
 * AR + residual + RMSNorm) zero-fills the outputs of the split-K GEMMs its x_norm feeds, and
 * the slices the MLA attention op's q_b / o_proj GEMMs write, so those run with zero_init=false. */
#include "passes/prezero.h"
#include <stdlib.h>
#include <string.h>

#define MAX_SLICES 8
/* Every slice starts at a multiple of this many columns, and n_total is rounded up to it:
 * 32 f32 = 128 bytes, so slices and buffer rows start on a cache line (the CUDA fill and the
 * GEMM epilogues use 16-byte stores; different GEMMs' atomics never share a line). The gap
 * columns are zeroed with the rest and read by no one. The presets' widths are multiples of 64
 * already, so their layout has no gaps. */
#define COL_ALIGN 32
static int64_t align_col(int64_t c) { return (c + COL_ALIGN - 1) / COL_ALIGN * COL_ALIGN; }

typedef enum { SL_GEMM = 0, SL_QB, SL_OPROJ } slice_kind;
static const char *const slice_kind_name[] = {"gemm", "q_b", "o_proj"};

typedef struct {
  slice_kind kind;
  int node;         /* GEMM node (SL_GEMM) or the MLA node (SL_QB, SL_OPROJ) */
  int tensor;       /* SL_GEMM / SL_OPROJ: the existing output tensor that becomes a view */
  int64_t col, width;
} slice;

typedef struct {
  int donor;
  int attn;         /* MLA node that gets slots, -1 if none */
  int n;
  slice s[MAX_SLICES];
  int64_t n_base, n_total, rows;
} plan;

/* ---- run-time contract shared by the ops ---------------------------------------------- */

int64_t pz_prezero_fill_cols(int64_t m, int64_t n_total, int64_t n_base, int64_t H, int tp,
                             const pz_device_desc *dev) {
  return pz_prezero_active(m, n_total, PZ_F32, H, tp, dev) ? n_total : n_base;
}

bool pz_prezero_slice_zeroed(int64_t m, int64_t col_offset, int64_t n, int64_t n_total,
                             int64_t n_base, int64_t H, int tp, const pz_device_desc *dev) {
  if (col_offset < 0 || n <= 0) return false;
  if (col_offset + n <= n_base) return true;
  return col_offset + n <= n_total && pz_prezero_active(m, n_total, PZ_F32, H, tp, dev);
}

/* ---- dataflow queries ----------------------------------------------------------------- */

/* Does node n read / write storage sid? A donor's zero_fill and the MLA slots count as writes
 * (the fill writes the buffer; the op writes its q_b / o_proj results into the slots). */
static bool node_reads(const pz_graph *g, const pz_node *n, int sid) {
  for (int s = 0; s < n->n_src; s++) {
    if (n->src[s] < 0) continue;
    if (n->op == PZ_OP_MLA_ATTN && (s == PZ_MLA_QB_PREZERO || s == PZ_MLA_OPROJ_PREZERO)) continue;
    if (pz_storage_of(g, n->src[s]) == sid) return true;
  }
  if (n->op == PZ_OP_MM_MAYBE_PREZERO && pz_storage_of(g, n->dst[0]) == sid) return true; /* accumulates */
  return false;
}

static bool node_writes(const pz_graph *g, const pz_node *n, int sid) {
  for (int d = 0; d < n->n_dst; d++)
    if (n->dst[d] >= 0 && pz_storage_of(g, n->dst[d]) == sid) return true;
  if (n->op == PZ_OP_AR_RMSNORM_MAYBE_PREZERO && n->p.norm.fill_buf >= 0 &&
      pz_storage_of(g, n->p.norm.fill_buf) == sid)
    return true;
  if (n->op == PZ_OP_MLA_ATTN)
    for (int s = PZ_MLA_QB_PREZERO; s <= PZ_MLA_OPROJ_PREZERO; s++)
      if (n->src[s] >= 0 && pz_storage_of(g, n->src[s]) == sid) return true;
  return false;
}

/* The one explicit legality check (ggml style). Tensor t, written by node `writer`, may become
 * a column view of a buffer that donor node `donor` zero-fills when:
 *   1. t is a 2-D f32 activation [rows, n] that owns contiguous storage, with rows = the
 *      donor's m, and no other tensor is a view of it (the whole storage is t);
 *   2. t is none of the graph's well-known inputs/outputs;
 *   3. over the whole graph, `writer` is the only node that writes t's storage, it writes it
 *      in exactly one output slot and does not read it;
 *   4. every reader of t comes after `writer`, and writer comes after the donor.
 * 3 and 4 together mean no node between the donor and the writer reads or writes t, so the
 * zeros the donor leaves are what the writer finds, and t's life ends within the step. */
static bool consumer_output_legal(const pz_graph *g, int donor, int writer, int t, int64_t rows,
                                  const char **why) {
  const pz_tensor *x = &g->tensors[t];
  if (x->ndim != 2 || x->dtype != PZ_F32) { *why = "output is not 2-D f32"; return false; }
  if (x->kind != PZ_T_ACT) { *why = "output is not an activation"; return false; }
  if (x->view_of >= 0 || !pz_tensor_contiguous(x)) { *why = "output does not own contiguous storage"; return false; }
  if (x->ne[0] != rows) { *why = "output rows differ from the donor's m"; return false; }
  if (t == g->in_tokens || t == g->in_pos || t == g->out_tokens || t == g->out_logits) {
    *why = "output is a graph input/output"; return false;
  }
  for (int i = 0; i < g->n_tensors; i++)
    if (i != t && pz_storage_of(g, i) == t) { *why = "another tensor is a view of the output"; return false; }
  if (writer <= donor) { *why = "writer precedes the donor"; return false; }
  int slots = 0;
  for (int d = 0; d < g->nodes[writer].n_dst; d++) slots += g->nodes[writer].dst[d] == t;
  if (slots != 1) { *why = "writer does not write the output in exactly one slot"; return false; }
  for (int i = 0; i < g->n_nodes; i++) {
    const pz_node *n = &g->nodes[i];
    if (i == writer) {
      if (node_reads(g, n, t)) { *why = "writer also reads its output"; return false; }
      continue;
    }
    if (node_writes(g, n, t)) { *why = "another node writes the output"; return false; }
    if (i < writer && node_reads(g, n, t)) { *why = "the output is read before it is written"; return false; }
  }
  return true;
}

/* A GEMM node that reads the donor's x_norm as A and zeroes its own C (the split-K baseline). */
static bool gemm_consumer(const pz_graph *g, int donor, int j, const char **why) {
  const pz_node *D = &g->nodes[donor], *n = &g->nodes[j];
  *why = "not a GEMM";
  if (n->op != PZ_OP_GEMM || n->n_src < 2 || n->src[0] != D->dst[0]) return false;
  if (!n->p.gemm.zero_init) { *why = "zero_init=false: C accumulates onto earlier contents"; return false; }
  if (n->p.gemm.split_k == 1) { *why = "split_k=1: not a split-K GEMM"; return false; }
  return consumer_output_legal(g, donor, j, n->dst[0], g->tensors[D->dst[0]].ne[0], why);
}

static int64_t mla_qb_width(const pz_mla_params *a) {
  return (int64_t)a->n_heads * (a->qk_nope_head_dim + a->qk_rope_head_dim);
}

/* Finds the donor's consumers and the attention slots; returns false when nothing matches. */
static bool make_plan(const pz_graph *g, int donor, bool attn_slots, FILE *log, plan *p) {
  const pz_node *D = &g->nodes[donor];
  memset(p, 0, sizeof *p);
  p->donor = donor;
  p->attn = -1;
  int xn = D->dst[0];
  int xs = pz_storage_of(g, xn);
  p->rows = g->tensors[xn].ne[0];
  int64_t col = 0;
  for (int j = donor + 1; j < g->n_nodes && p->n < MAX_SLICES - 2; j++) {
    const char *why = NULL;
    if (gemm_consumer(g, donor, j, &why)) {
      int64_t w = g->tensors[g->nodes[j].dst[0]].ne[1];
      col = align_col(col);
      p->s[p->n++] = (slice){SL_GEMM, j, g->nodes[j].dst[0], col, w};
      col += w;
    } else if (log && g->nodes[j].op == PZ_OP_GEMM && g->nodes[j].src[0] == xn) {
      fprintf(log, "  prezero: %s: consumer %s left alone: %s\n", D->name, g->nodes[j].name, why);
    }
    if (node_writes(g, &g->nodes[j], xs)) break; /* x_norm overwritten: later readers see other data */
  }
  if (p->n == 0) return false;
  int n_gemm = p->n;
  /* Op-specific piece: an MLA node that reads one of these outputs gets the q_b / o_proj slots. */
  for (int j = donor + 1; attn_slots && j < g->n_nodes && p->attn < 0; j++) {
    const pz_node *A = &g->nodes[j];
    if (A->op != PZ_OP_MLA_ATTN || A->n_src != PZ_MLA_NSRC) continue;
    if (A->src[PZ_MLA_QB_PREZERO] >= 0 || A->src[PZ_MLA_OPROJ_PREZERO] >= 0) continue;
    bool feeds_qkv_a = false, feeds = false;
    for (int k = 0; k < n_gemm; k++) {
      int t = p->s[k].tensor;
      if (A->src[PZ_MLA_QKV_A] == t) feeds = feeds_qkv_a = true;
      if (A->src[PZ_MLA_Q] == t || A->src[PZ_MLA_KV_A] == t) feeds = true;
    }
    if (!feeds) continue;
    p->attn = j;
    if (feeds_qkv_a && A->p.mla.q_lora_rank > 0) {
      int64_t w = mla_qb_width(&A->p.mla);
      col = align_col(col);
      p->s[p->n++] = (slice){SL_QB, j, -1, col, w};
      col += w;
    }
    col = align_col(col);
    p->n_base = col;
    const char *why = NULL;
    if (consumer_output_legal(g, donor, j, A->dst[0], p->rows, &why) && g->tensors[A->dst[0]].ne[1] == A->p.mla.hidden) {
      p->s[p->n++] = (slice){SL_OPROJ, j, A->dst[0], col, A->p.mla.hidden};
      col += A->p.mla.hidden;
    } else if (log) {
      fprintf(log, "  prezero: %s: o_proj slot of %s left unset: %s\n", D->name, A->name, why ? why : "output width");
    }
  }
  col = align_col(col);
  if (p->attn < 0) p->n_base = col;
  p->n_total = col;
  return true;
}

static pz_status apply_plan(pz_graph *g, const plan *p, FILE *log, int *rewritten) {
  char name[PZ_NAME_LEN + 32];
  int buf;
  snprintf(name, sizeof name, "%s.prezero_buf", g->nodes[p->donor].name);
  int64_t ne[2] = {p->rows, p->n_total};
  PZ_CHECK(pz_graph_add_tensor(g, name, PZ_F32, PZ_T_BUFFER, 2, ne, &buf));
  g->tensors[buf].batched = g->tensors[g->nodes[p->donor].dst[0]].batched;
  if (log) {
    const pz_node *D = &g->nodes[p->donor];
    fprintf(log, "  prezero: %s (layer %d, %s donor): buffer %s [%lld, n_total=%lld] n_base=%lld\n", D->name,
            D->layer, D->role == PZ_ROLE_NONE ? "unnamed" : pz_role_suffix(D->role), name, (long long)p->rows,
            (long long)p->n_total, (long long)p->n_base);
  }
  for (int k = 0; k < p->n; k++) {
    const slice *s = &p->s[k];
    pz_node *n = &g->nodes[s->node];
    if (s->kind == SL_GEMM) {
      PZ_CHECK(pz_graph_make_col_view(g, s->tensor, buf, s->col));
      n->op = PZ_OP_MM_MAYBE_PREZERO;
      n->p.gemm.prezero_buf = buf;
      n->p.gemm.n_base = p->n_base;
      n->p.gemm.col_offset = s->col;
      (*rewritten)++;
    } else {
      int sl;
      snprintf(name, sizeof name, "%s.%s.prezero", n->name, s->kind == SL_QB ? "q_b" : "o_proj");
      PZ_CHECK(pz_graph_add_col_slice(g, name, buf, s->col, s->width, &sl));
      n = &g->nodes[s->node];
      if (s->kind == SL_QB) {
        n->src[PZ_MLA_QB_PREZERO] = sl;
        n->p.mla.qb_col_offset = s->col;
      } else {
        /* The op's output is the slot itself: the readers of the partial keep their tensor id. */
        PZ_CHECK(pz_graph_make_col_view(g, s->tensor, buf, s->col));
        n->src[PZ_MLA_OPROJ_PREZERO] = sl;
        n->p.mla.oproj_col_offset = s->col;
      }
    }
    if (log)
      fprintf(log, "  prezero:   %-6s %-40s cols [%lld, %lld) width %lld%s\n", slice_kind_name[s->kind],
              g->nodes[s->node].name, (long long)s->col, (long long)(s->col + s->width),
              (long long)s->width, s->col + s->width <= p->n_base ? "" : " (beyond n_base)");
  }
  if (p->attn >= 0) {
    pz_node *A = &g->nodes[p->attn];
    A->p.mla.prezero_n_total = p->n_total;
    A->p.mla.prezero_n_base = p->n_base;
    (*rewritten)++;
  }
  pz_node *D = &g->nodes[p->donor];
  D->op = PZ_OP_AR_RMSNORM_MAYBE_PREZERO;
  D->p.norm.fill_buf = buf;
  D->p.norm.n_total = p->n_total;
  D->p.norm.n_base = p->n_base;
  (*rewritten)++;
  return PZ_OK;
}

pz_status pz_pass_prezero(pz_graph *g, FILE *log, pz_pass_stats *st) {
  const char *e = getenv("PREZERO_ATTN_SLOTS");
  bool attn_slots = !(e && e[0] == '0');
  int matched = 0, rewritten = 0;
  for (int i = 0; i < g->n_nodes; i++) {
    if (g->nodes[i].op != PZ_OP_AR_RMSNORM) continue;
    const pz_tensor *xn = &g->tensors[g->nodes[i].dst[0]];
    if (xn->ndim != 2) continue;
    plan p;
    if (!make_plan(g, i, attn_slots, log, &p)) continue;
    matched++;
    PZ_CHECK(apply_plan(g, &p, log, &rewritten));
  }
  if (st) {
    st->matched = matched;
    st->rewritten = rewritten;
  }
  return PZ_OK;
}
