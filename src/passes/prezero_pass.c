/* The prezero pass (docs/ARCHITECTURE.md §4): donor-driven and decided by dataflow. A donor (fused
 * AR + residual + RMSNorm) zero-fills the outputs of the split-K GEMMs its x_norm feeds, and
 * the slices an attention op's inner GEMMs write (its slots, described per op in attn_slots.c:
 * MLA q_b / o_proj, GQA o_proj), so those run with zero_init=false. Nothing here names a model,
 * a layout or a role. */
#include "passes/prezero.h"
#include <stdlib.h>
#include <string.h>
#include "passes/attn_slots.h"

#define MAX_SLICES 8
/* Every slice starts at a multiple of this many columns, and n_total is rounded up to it:
 * 32 f32 = 128 bytes, so slices and buffer rows start on a cache line (the CUDA fill and the
 * GEMM epilogues use 16-byte stores; different GEMMs' atomics never share a line). The gap
 * columns are zeroed with the rest and read by no one. The presets' widths are multiples of 64
 * already, so their layout has no gaps. */
#define COL_ALIGN 32
static int64_t align_col(int64_t c) { return (c + COL_ALIGN - 1) / COL_ALIGN * COL_ALIGN; }

typedef struct {
  pz_prezero_slot kind; /* a graph GEMM, or one of an attention op's slots */
  const char *name;     /* "gemm", or the slot's name (attn_slots.h) */
  int node;             /* GEMM node, or the attention node */
  int tensor;           /* GEMM / output slot: the existing output tensor that becomes a view; else -1 */
  int src;              /* slot: its index into the attention node's src; else -1 */
  bool output;          /* slot: the op's output dst[0] */
  int64_t col, width;
} slice;

typedef struct {
  int donor;
  int attn;         /* attention node that gets slots, -1 if none */
  int n;
  slice s[MAX_SLICES];
  int64_t n_base, n_total, rows;
  pz_prezero_donor_plan rep; /* every candidate consumer, fired or not (the plan view) */
} plan;

/* ---- the per-batch question: does this consumer's kernel at m skip a zeroing? ---------- */

static void rep_add(plan *p, int node, pz_prezero_slot kind, int64_t n, int64_t k, int64_t col, bool fires,
                    const char *why) {
  pz_prezero_donor_plan *r = &p->rep;
  if (r->n >= PZ_PREZERO_MAX_CONSUMERS) return;
  pz_prezero_consumer *c = &r->c[r->n++];
  memset(c, 0, sizeof *c);
  c->node = node;
  c->kind = kind;
  c->n = n;
  c->k = k;
  c->col = fires ? col : -1;
  c->fires = fires;
  snprintf(c->why, sizeof c->why, "%s", why ? why : "");
}

/* Asks b's callback (no callback: every candidate fires, the static rewrite). */
static bool ask_fires(const pz_prezero_batch *b, const pz_graph *g, int node, pz_prezero_slot kind, int64_t n,
                      int64_t k, char *why, size_t why_len) {
  why[0] = 0;
  if (!b || !b->fires) return true;
  pz_prezero_query q = {.node = node, .kind = kind, .m = b->m, .n = n, .k = k};
  return b->fires(b->user, g, &q, why, why_len);
}

/* A gated inner slot's fill (attn_slots.h) at b's batch: the donor's whole fill of `cols` columns is
 * free (pz_prezero_active), and besides, the donor's CTAs and the fill's fit one per SM, so that no
 * fill CTA shares an SM with a donor CTA (the donor is on the step's critical path; Kimi-K2.5's shared
 * gate | up slot at m 64 took 70 fill CTAs beside 64 donor CTAs on 132 SMs and cost ~0.75 us of donor
 * time for the 0.4-0.6 us of zeroing it saved, bench/results/moe_sh_gu_slot/). Forced on: true. */
static bool gated_fill_free(const pz_prezero_batch *b, int64_t cols, int64_t H) {
  const pz_device_desc *dev = b->dev;
  if (!pz_prezero_active(b->m, cols, PZ_F32, H, b->tp, dev)) return false;
  if (dev->force_gate == 1 || dev->ctas_per_sm <= 0) return true;
  pz_ar_plan ap;
  if (!pz_ar_plan_for_dev(b->m, H, b->tp, dev, &ap)) return false;
  return ap.donor_ctas + pz_ar_plan_fill_ctas(dev, &ap, b->m * cols * 4) <= dev->num_sms;
}

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

/* Does node n read / write storage sid? A donor's zero_fill and an attention op's slots count
 * as writes (the fill writes the buffer; the op writes its inner GEMMs' results into the slots). */
static bool node_reads(const pz_graph *g, const pz_node *n, int sid) {
  for (int s = 0; s < n->n_src; s++) {
    if (n->src[s] < 0) continue;
    if (pz_attn_is_slot(n->op, s)) continue;
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
  for (int s = 0; s < n->n_src; s++)
    if (n->src[s] >= 0 && pz_attn_is_slot(n->op, s) && pz_storage_of(g, n->src[s]) == sid) return true;
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

/* Is src index `link` of attention node A the output of one of the donor's candidates? */
static bool linked_through(const pz_node *A, int link, const int *cand, int n_cand) {
  for (int k = 0; k < n_cand; k++)
    if (A->src[link] == cand[k]) return true;
  return false;
}

/* The attention op after the donor that reads a candidate's output (through one of its links,
 * attn_slots.h) gets its slots: the inner-GEMM slots first, each when its link is fed (and it
 * fires), then the output slot at n_base (when the output passes the legality check, fires and,
 * in a per-batch plan, the gate holds). *colp is the next free column, updated; p->attn and
 * p->n_base are set when some slot got a slice. */
static void attn_plan(const pz_graph *g, int donor, const int *cand, int n_cand, const pz_prezero_batch *b, FILE *log,
                      plan *p, int64_t *colp) {
  const pz_node *D = &g->nodes[donor];
  char why[PZ_PREZERO_WHY_LEN];
  int64_t col = *colp;
  for (int j = donor + 1; j < g->n_nodes; j++) {
    const pz_node *A = &g->nodes[j];
    pz_attn_desc ad;
    if (!pz_attn_describe(A, &ad)) continue;
    bool set = false; /* slots already threaded (a second run of the pass) */
    for (int s = 0; s < A->n_src; s++) set = set || (A->src[s] >= 0 && pz_attn_is_slot(A->op, s));
    if (set) continue;
    bool feeds = false;
    for (int l = 0; l < ad.n_links; l++) feeds = feeds || linked_through(A, ad.link[l], cand, n_cand);
    if (!feeds) continue;
    int n_slices_before = p->n;
    int64_t n_base = -1;
    for (int k = 0; k < ad.n_slots; k++) {
      const pz_attn_slot *sl = &ad.slot[k];
      if (sl->link >= 0 && !linked_through(A, sl->link, cand, n_cand)) continue;
      if (!sl->output) {
        bool f = ask_fires(b, g, j, sl->kind, sl->n, sl->k, why, sizeof why);
        /* a gated inner slot: only where the donor's whole fill with it is free at m (attn_slots.h) */
        const int64_t fill_cols = align_col(align_col(col) + sl->n);
        if (f && sl->gated && b && b->m > 0 && b->dev && !gated_fill_free(b, fill_cols, g->info.hidden)) {
          f = false;
          snprintf(why, sizeof why, "gate: fill of %lld cols not free beside the donor at m=%lld", (long long)fill_cols,
                   (long long)b->m);
        }
        if (f) {
          col = align_col(col);
          /* a gated slot lies beyond n_base, so that the run-time gate decides its fill where no per-batch
             plan asked (the static rewrite) and agrees with the plan where one did */
          if (sl->gated && n_base < 0) n_base = col;
          p->s[p->n++] = (slice){sl->kind, sl->name, j, -1, sl->src, false, col, sl->n};
        }
        rep_add(p, j, sl->kind, sl->n, sl->k, col, f, why);
        if (f) col += sl->n;
        continue;
      }
      col = align_col(col);
      if (n_base < 0) n_base = col;
      const char *ill = NULL;
      if (consumer_output_legal(g, donor, j, A->dst[0], p->rows, &ill) && g->tensors[A->dst[0]].ne[1] == sl->n) {
        bool f = ask_fires(b, g, j, sl->kind, sl->n, sl->k, why, sizeof why);
        /* A per-batch plan also asks the gate now: an output slot (beyond n_base) is filled only
         * when the whole fill is free, so a plan for m leaves it out when it is not. */
        if (f && b && b->m > 0 &&
            !pz_prezero_active(b->m, align_col(col + sl->n), PZ_F32, g->info.hidden, b->tp, b->dev)) {
          f = false;
          snprintf(why, sizeof why, "gate: fill of %lld columns is not free at m=%lld",
                   (long long)align_col(col + sl->n), (long long)b->m);
        }
        if (f) p->s[p->n++] = (slice){sl->kind, sl->name, j, A->dst[0], sl->src, true, col, sl->n};
        rep_add(p, j, sl->kind, sl->n, sl->k, col, f, why);
        if (f) col += sl->n;
      } else if (log) {
        fprintf(log, "  prezero: %s: %s slot of %s left unset: %s\n", D->name, sl->name, A->name,
                ill ? ill : "output width");
      }
    }
    if (n_base < 0) n_base = col = align_col(col);
    if (p->n > n_slices_before) {
      p->attn = j;
      p->n_base = n_base;
    }
    break;
  }
  *colp = col;
}

/* Finds the donor's consumers and the attention slots; returns false when nothing fires.
 * A candidate is a consumer that passes the legality check; it gets a slice only when it fires
 * at b's batch size (b NULL or without a callback: always). The attention node is linked through
 * any candidate's output, fired or not, so its slots can fire on their own. */
static bool make_plan(const pz_graph *g, int donor, bool attn_slots, const pz_prezero_batch *b, FILE *log, plan *p) {
  const pz_node *D = &g->nodes[donor];
  memset(p, 0, sizeof *p);
  p->donor = donor;
  p->attn = -1;
  p->rep.donor = donor;
  int xn = D->dst[0];
  int xs = pz_storage_of(g, xn);
  p->rows = g->tensors[xn].ne[0];
  int cand[MAX_SLICES], n_cand = 0;
  char why[PZ_PREZERO_WHY_LEN];
  int64_t col = 0;
  for (int j = donor + 1; j < g->n_nodes && n_cand < MAX_SLICES - PZ_ATTN_MAX_SLOTS; j++) {
    const char *ill = NULL;
    if (gemm_consumer(g, donor, j, &ill)) {
      const pz_tensor *W = &g->tensors[g->nodes[j].src[1]];
      int64_t w = g->tensors[g->nodes[j].dst[0]].ne[1];
      cand[n_cand++] = g->nodes[j].dst[0];
      bool f = ask_fires(b, g, j, PZ_PREZERO_SLOT_GEMM, W->ne[0], W->ne[1], why, sizeof why);
      if (f) {
        col = align_col(col);
        p->s[p->n++] = (slice){PZ_PREZERO_SLOT_GEMM, "gemm", j, g->nodes[j].dst[0], -1, false, col, w};
      }
      rep_add(p, j, PZ_PREZERO_SLOT_GEMM, W->ne[0], W->ne[1], col, f, why);
      if (f) col += w;
    } else if (log && g->nodes[j].op == PZ_OP_GEMM && g->nodes[j].src[0] == xn) {
      fprintf(log, "  prezero: %s: consumer %s left alone: %s\n", D->name, g->nodes[j].name, ill);
    }
    if (node_writes(g, &g->nodes[j], xs)) break; /* x_norm overwritten: later readers see other data */
  }
  if (n_cand == 0) return false;
  if (attn_slots) attn_plan(g, donor, cand, n_cand, b, log, p, &col);
  col = align_col(col);
  if (p->attn < 0) p->n_base = col;
  p->n_total = col;
  p->rep.n_total = p->n_total;
  p->rep.n_base = p->n_base;
  return p->n > 0;
}

/* The names apply_plan gives new tensors: the donor's buffer "<donor>.prezero_buf" and an attention slot's
 * slice "<node>.<slot>.prezero". A graph built elsewhere (the public graph API) may already hold one: two
 * tensors of one name would fail the verifier after the pass said PZ_OK. */
static pz_status check_names(const pz_graph *g, const plan *p) {
  char name[PZ_NAME_LEN + 64];
  snprintf(name, sizeof name, "%s.prezero_buf", g->nodes[p->donor].name);
  if (pz_graph_find_tensor(g, name))
    return pz_error(PZ_ERR_INVALID_ARG, "prezero pass: the graph already has a tensor named \"%s\", the name the "
                    "pass gives donor %s's buffer; rename that tensor (the graph is left as it was)", name,
                    g->nodes[p->donor].name);
  for (int i = 0; i < p->n; i++) {
    const slice *sl = &p->s[i];
    if (sl->kind == PZ_PREZERO_SLOT_GEMM) continue; /* its output tensor becomes a view: no new name */
    snprintf(name, sizeof name, "%s.%s.prezero", g->nodes[sl->node].name, sl->name);
    if (pz_graph_find_tensor(g, name))
      return pz_error(PZ_ERR_INVALID_ARG, "prezero pass: the graph already has a tensor named \"%s\", the name the "
                      "pass gives a slot of %s; rename that tensor (the graph is left as it was)", name,
                      g->nodes[sl->node].name);
  }
  return PZ_OK;
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
    if (s->kind == PZ_PREZERO_SLOT_GEMM) {
      PZ_CHECK(pz_graph_make_col_view(g, s->tensor, buf, s->col));
      n->op = PZ_OP_MM_MAYBE_PREZERO;
      n->p.gemm.prezero_buf = buf;
      n->p.gemm.n_base = p->n_base;
      n->p.gemm.col_offset = s->col;
      (*rewritten)++;
    } else {
      int sl;
      snprintf(name, sizeof name, "%s.%s.prezero", n->name, s->name);
      PZ_CHECK(pz_graph_add_col_slice(g, name, buf, s->col, s->width, &sl));
      n = &g->nodes[s->node];
      /* An output slot is the op's output itself: the readers of the partial keep their tensor id. */
      if (s->output) PZ_CHECK(pz_graph_make_col_view(g, s->tensor, buf, s->col));
      n->src[s->src] = sl;
      if (!pz_attn_set_slot_col(n, s->kind, s->col))
        return pz_error(PZ_ERR_SHAPE, "prezero pass: %s has no %s slot", n->name, s->name);
    }
    if (log)
      fprintf(log, "  prezero:   %-6s %-40s cols [%lld, %lld) width %lld%s\n", s->name,
              g->nodes[s->node].name, (long long)s->col, (long long)(s->col + s->width),
              (long long)s->width, s->col + s->width <= p->n_base ? "" : " (beyond n_base)");
  }
  if (p->attn >= 0) {
    if (!pz_attn_set_fill(&g->nodes[p->attn], p->n_total, p->n_base))
      return pz_error(PZ_ERR_SHAPE, "prezero pass: %s has no prezero fields", g->nodes[p->attn].name);
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

pz_status pz_pass_prezero_batch(pz_graph *g, const pz_prezero_batch *b, FILE *log, pz_pass_stats *st,
                                pz_prezero_report *rep) {
  if (!g) return pz_error(PZ_ERR_INVALID_ARG, "prezero pass: no graph");
  if (b && b->fires && (b->m < 1 || !b->dev || b->tp < 1))
    return pz_error(PZ_ERR_INVALID_ARG, "prezero pass: a per-batch plan needs m >= 1, tp >= 1 and a device description");
  bool attn_slots = !b || b->attn_slots != 0;
  int matched = 0, rewritten = 0;
  if (rep) {
    memset(rep, 0, sizeof *rep);
    rep->m = b ? b->m : 0;
  }
  /* Every name the rewrite may create is checked before any donor is rewritten, so that a clash leaves the
   * graph as it was: the names of the plan without a batch (every consumer; a per-batch plan takes a subset
   * of them, and this asks its resolver nothing). */
  for (int i = 0; i < g->n_nodes; i++) {
    if (g->nodes[i].op != PZ_OP_AR_RMSNORM || g->tensors[g->nodes[i].dst[0]].ndim != 2) continue;
    plan p;
    if (make_plan(g, i, attn_slots, NULL, NULL, &p)) PZ_CHECK(check_names(g, &p));
  }
  for (int i = 0; i < g->n_nodes; i++) {
    if (g->nodes[i].op != PZ_OP_AR_RMSNORM) continue;
    const pz_tensor *xn = &g->tensors[g->nodes[i].dst[0]];
    if (xn->ndim != 2) continue;
    plan p;
    bool any = make_plan(g, i, attn_slots, b, log, &p);
    if (rep && p.rep.n > 0) {
      if (rep->n_donors == rep->cap) {
        int cap = rep->cap ? 2 * rep->cap : 16;
        pz_prezero_donor_plan *d = realloc(rep->d, sizeof *d * (size_t)cap);
        if (!d) return pz_error(PZ_ERR_OOM, "prezero pass: plan report");
        rep->d = d;
        rep->cap = cap;
      }
      rep->d[rep->n_donors++] = p.rep;
    }
    if (!any) continue;
    matched++;
    PZ_CHECK(apply_plan(g, &p, log, &rewritten));
  }
  if (st) {
    st->matched = matched;
    st->rewritten = rewritten;
  }
  return PZ_OK;
}

pz_status pz_pass_prezero(pz_graph *g, FILE *log, pz_pass_stats *st) {
  return pz_pass_prezero_batch(g, NULL, log, st, NULL);
}

void pz_prezero_report_free(pz_prezero_report *r) {
  if (!r) return;
  free(r->d);
  memset(r, 0, sizeof *r);
}

bool pz_prezero_report_same(const pz_prezero_report *a, const pz_prezero_report *b) {
  if (a->n_donors != b->n_donors) return false;
  for (int i = 0; i < a->n_donors; i++) {
    const pz_prezero_donor_plan *x = &a->d[i], *y = &b->d[i];
    if (x->donor != y->donor || x->n_total != y->n_total || x->n_base != y->n_base || x->n != y->n) return false;
    for (int k = 0; k < x->n; k++)
      if (x->c[k].node != y->c[k].node || x->c[k].kind != y->c[k].kind || x->c[k].fires != y->c[k].fires ||
          x->c[k].col != y->c[k].col)
        return false;
  }
  return true;
}

int pz_prezero_report_fired(const pz_prezero_report *r) {
  int n = 0;
  for (int i = 0; r && i < r->n_donors; i++)
    for (int k = 0; k < r->d[i].n; k++) n += r->d[i].c[k].fires;
  return n;
}

/* ---- the plan view ---------------------------------------------------------------------- */

static const char *slot_name(pz_prezero_slot k) {
  return k == PZ_PREZERO_SLOT_QB ? "q_b" : k == PZ_PREZERO_SLOT_OPROJ ? "o_proj" : k == PZ_PREZERO_SLOT_SHARED_GU ? "sh_gu" : "gemm";
}

pz_status pz_prezero_report_print(const pz_prezero_report *r, const pz_graph *g, int tp, const pz_device_desc *dev,
                                  FILE *f) {
  if (!r || !g || !dev || !f) return pz_error(PZ_ERR_INVALID_ARG, "prezero plan print: NULL argument");
  const int64_t H = g->info.hidden, m = r->m > 0 ? r->m : g->info.m;
  int cand = 0, fired = 0;
  int64_t bytes_all = 0;
  double us_all = 0;
  for (int i = 0; i < r->n_donors; i++) {
    const pz_prezero_donor_plan *d = &r->d[i];
    if (d->donor < 0 || d->donor >= g->n_nodes) return pz_error(PZ_ERR_INVALID_ARG, "prezero plan print: donor %d not in the graph", d->donor);
    const pz_node *D = &g->nodes[d->donor];
    int nf = 0;
    for (int k = 0; k < d->n; k++) nf += d->c[k].fires;
    cand += d->n;
    fired += nf;
    fprintf(f, "donor %s (layer %d, node %d): %d of %d consumers fire\n", D->name, D->layer, d->donor, nf, d->n);
    if (nf > 0) {
      int64_t cols = pz_prezero_fill_cols(m, d->n_total, d->n_base, H, tp, dev);
      int64_t bytes = m * cols * 4;
      pz_ar_plan ap;
      int64_t ctas = pz_ar_plan_for_dev(m, H, tp, dev, &ap) ? pz_ar_plan_fill_ctas(dev, &ap, bytes) : 0;
      double us = dev->fill_penalty_bytes_per_us > 0 ? bytes / dev->fill_penalty_bytes_per_us : 0;
      bytes_all += bytes;
      us_all += us;
      fprintf(f, "  fill: columns [0, %lld) of [%lld, %lld] f32 (n_base %lld) = %lld bytes, %lld fill CTAs beside %lld donor CTAs, "
              "predicted +%.2f us (bytes / %.3g B/us fill penalty)\n",
              (long long)cols, (long long)m, (long long)d->n_total, (long long)d->n_base, (long long)bytes, (long long)ctas,
              (long long)ap.donor_ctas, us, dev->fill_penalty_bytes_per_us);
    } else {
      fprintf(f, "  fill: none (this donor runs as in the OFF graph)\n");
    }
    for (int k = 0; k < d->n; k++) {
      const pz_prezero_consumer *c = &d->c[k];
      const pz_node *n = &g->nodes[c->node];
      char cols[48] = "-";
      if (c->fires) snprintf(cols, sizeof cols, "[%lld, %lld)", (long long)c->col, (long long)(c->col + c->n));
      fprintf(f, "  %-5s %-6s %-32s n=%-6lld k=%-6lld cols %-16s %s\n", c->fires ? "fires" : "n/f", slot_name(c->kind),
              n->name, (long long)c->n, (long long)c->k, cols, c->why);
    }
  }
  fprintf(f, "total at m=%lld: %d of %d consumers fire; donors fill %lld bytes, predicted +%.2f us in all%s\n",
          (long long)m, fired, cand, (long long)bytes_all, us_all,
          fired == 0 ? "; nothing fires, so the ON graph is the OFF graph" : "");
  return PZ_OK;
}
