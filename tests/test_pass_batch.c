/* The per-batch prezero plan (pz_pass_prezero_batch) on the Kimi-K2 decode graph (builder,
 * TP 1 and 4, one dense and one MoE layer), with the consumer question answered by rules of the
 * test instead of a GPU:
 *  - nothing fires (a forced "not split-K"): the graph is byte-identical to the OFF graph and
 *    the report lists every candidate as n/f;
 *  - only some consumers fire: exactly those become MM_MAYBE_PREZERO / get an MLA slot, the rest
 *    stay as in OFF, and each donor's buffer is exactly the union of the fired slices (each on a
 *    32-column boundary, no overlap, gaps < 32 columns, nothing beyond);
 *  - the gate forced off drops the o_proj slot and says why;
 *  - no question (static plan) equals pz_pass_prezero; bad arguments are refused;
 *  - Kimi-K2.5 (INT4 experts): the MoE op's shared gate | up slot, fired or not on its own. */
#define _GNU_SOURCE 1
#include <stdlib.h>
#include <string.h>
#include "model/builder.h"
#include "model/config.h"
#include "passes/prezero.h"
#include "pz_test.h"

static pz_graph *off_graph_of(const char *preset, int tp) {
  pz_model_config mc;
  CHECK_OK(pz_config_load(preset, &mc));
  pz_build_opts bo = PZ_BUILD_OPTS_INIT;
  bo.tp = tp;
  bo.m = 16;
  bo.max_ctx = 64;
  bo.layers = 2;
  pz_graph *g = NULL;
  CHECK_OK(pz_build_decode_graph(&mc, &bo, &g));
  return g;
}
static pz_graph *off_graph(int tp) { return off_graph_of("kimi_k2", tp); }

/* The rule under test: a bit per consumer kind and role. */
enum { F_QKV = 1, F_QB = 2, F_OPROJ = 4, F_GATE = 8, F_ALL = 15, F_SHGU = 16 };
static int g_calls;
static bool fires_mask(void *user, const pz_graph *g, const pz_prezero_query *q, char *why, size_t len) {
  int mask = *(int *)user;
  g_calls++;
  int bit = q->kind == PZ_PREZERO_SLOT_QB ? F_QB : q->kind == PZ_PREZERO_SLOT_OPROJ ? F_OPROJ
            : q->kind == PZ_PREZERO_SLOT_SHARED_GU ? F_SHGU
            : g->nodes[q->node].role == PZ_ROLE_ROUTER_GATE ? F_GATE : F_QKV;
  bool f = (mask & bit) != 0;
  snprintf(why, len, "%s", f ? "test: split-K" : "test: not split-K");
  return f;
}

static bool same_graph(const pz_graph *a, const pz_graph *b) {
  return a->n_nodes == b->n_nodes && a->n_tensors == b->n_tensors &&
         memcmp(a->nodes, b->nodes, sizeof(pz_node) * (size_t)a->n_nodes) == 0 &&
         memcmp(a->tensors, b->tensors, sizeof(pz_tensor) * (size_t)a->n_tensors) == 0;
}

static int count_op(const pz_graph *g, pz_op op) {
  int n = 0;
  for (int i = 0; i < g->n_nodes; i++) n += g->nodes[i].op == op;
  return n;
}

/* Each donor's fired slices tile its buffer: sorted, 32-column aligned, no overlap, every gap
 * (and the tail) shorter than 32 columns, n_total a multiple of 32. */
static void check_tiling(const pz_prezero_report *r) {
  for (int i = 0; i < r->n_donors; i++) {
    const pz_prezero_donor_plan *d = &r->d[i];
    int64_t end = 0;
    int nf = 0;
    for (int k = 0; k < d->n; k++) {
      const pz_prezero_consumer *c = &d->c[k];
      if (!c->fires) { CHECK(c->col == -1); continue; }
      nf++;
      CHECK(c->col % 32 == 0);
      CHECK(c->col >= end);          /* no overlap, in column order */
      CHECK(c->col - end < 32);      /* only the alignment gap */
      end = c->col + c->n;
    }
    CHECK(d->n_total % 32 == 0);
    CHECK(d->n_total >= end && d->n_total - end < 32);
    if (nf == 0) CHECK(d->n_total == 0);
  }
}

static void run(const pz_graph *off, int mask, int64_t m, const pz_device_desc *dev, pz_graph **out,
                pz_prezero_report *rep) {
  CHECK_OK(pz_graph_clone(off, out));
  pz_prezero_batch b = {.m = m, .fires = fires_mask, .user = &mask, .tp = off->info.tp, .dev = dev, .attn_slots = 1};
  CHECK_OK(pz_pass_prezero_batch(*out, &b, NULL, NULL, rep));
  CHECK_OK(pz_graph_verify(*out));
  check_tiling(rep);
}

static const pz_node *find_role(const pz_graph *g, int layer, pz_role role) {
  for (int i = 0; i < g->n_nodes; i++)
    if (g->nodes[i].layer == layer && g->nodes[i].role == role) return &g->nodes[i];
  return NULL;
}

static void test_tp(int tp) {
  pz_device_desc dev;
  pz_device_desc_default(&dev);
  pz_graph *off = off_graph(tp);
  if (!off) return;
  pz_graph *g = NULL;
  pz_prezero_report rep;

  /* nothing fires: the OFF graph, byte for byte */
  g_calls = 0;
  run(off, 0, 8, &dev, &g, &rep);
  CHECK(same_graph(g, off));
  CHECK(pz_prezero_report_fired(&rep) == 0);
  CHECK(rep.n_donors == 3); /* layer 0 input, layer 1 input, layer 1 post-attention (gate) */
  CHECK(g_calls == 3 + 3 + 1); /* qkv_a, q_b, o_proj per input donor; the router gate */
  pz_prezero_report_free(&rep);
  pz_graph_free(g);

  /* only qkv_a fires */
  run(off, F_QKV, 8, &dev, &g, &rep);
  CHECK(count_op(g, PZ_OP_MM_MAYBE_PREZERO) == 2);
  CHECK(count_op(g, PZ_OP_AR_RMSNORM_MAYBE_PREZERO) == 2);
  const pz_node *qa = find_role(g, 0, PZ_ROLE_QKV_A), *gate = find_role(g, 1, PZ_ROLE_ROUTER_GATE);
  CHECK(qa && qa->op == PZ_OP_MM_MAYBE_PREZERO && qa->p.gemm.col_offset == 0);
  CHECK(gate && gate->op == PZ_OP_GEMM);
  for (int i = 0; i < g->n_nodes; i++)
    if (g->nodes[i].op == PZ_OP_MLA_ATTN)
      CHECK(g->nodes[i].src[PZ_MLA_QB_PREZERO] < 0 && g->nodes[i].src[PZ_MLA_OPROJ_PREZERO] < 0);
  CHECK(rep.d[0].n_total == 2112 && rep.d[0].n_base == 2112);
  pz_prezero_report_free(&rep);
  pz_graph_free(g);

  /* only o_proj fires: the MLA node is linked through the unfired qkv_a */
  run(off, F_OPROJ, 8, &dev, &g, &rep);
  CHECK(count_op(g, PZ_OP_MM_MAYBE_PREZERO) == 0);
  CHECK(count_op(g, PZ_OP_AR_RMSNORM_MAYBE_PREZERO) == 2);
  int slots = 0;
  for (int i = 0; i < g->n_nodes; i++)
    if (g->nodes[i].op == PZ_OP_MLA_ATTN) {
      const pz_node *A = &g->nodes[i];
      CHECK(A->src[PZ_MLA_QB_PREZERO] < 0 && A->src[PZ_MLA_OPROJ_PREZERO] >= 0);
      CHECK(A->p.mla.oproj_col_offset == 0 && A->p.mla.prezero_n_base == 0 && A->p.mla.prezero_n_total == 7168);
      slots++;
    }
  CHECK(slots == 2);
  pz_prezero_report_free(&rep);
  pz_graph_free(g);

  /* q_b and the gate fire: q_b's slice starts the buffer */
  run(off, F_QB | F_GATE, 8, &dev, &g, &rep);
  CHECK(count_op(g, PZ_OP_MM_MAYBE_PREZERO) == 1); /* the router gate */
  int64_t qbw = 64 / tp * 192;
  CHECK(rep.d[0].n_total == (qbw + 31) / 32 * 32 && rep.d[0].c[1].kind == PZ_PREZERO_SLOT_QB && rep.d[0].c[1].col == 0);
  CHECK(rep.d[2].n_total == 384 && rep.d[2].c[0].fires);
  pz_prezero_report_free(&rep);
  pz_graph_free(g);

  /* everything fires, gate free at m = 8: [qkv_a | q_b | o_proj] */
  run(off, F_ALL, 8, &dev, &g, &rep);
  CHECK(rep.d[0].n_base == 2112 + (qbw + 31) / 32 * 32 && rep.d[0].n_total == rep.d[0].n_base + 7168);
  pz_prezero_report_free(&rep);
  pz_graph_free(g);

  /* gate forced off: the o_proj slot is left out, with the reason */
  pz_device_desc dev_off = dev;
  dev_off.force_gate = 2; /* PREZERO_FORCE_GATE=off */
  run(off, F_ALL, 8, &dev_off, &g, &rep);
  CHECK(!rep.d[0].c[2].fires && strstr(rep.d[0].c[2].why, "gate") != NULL);
  CHECK(rep.d[0].n_total == rep.d[0].n_base);
  for (int i = 0; i < g->n_nodes; i++)
    if (g->nodes[i].op == PZ_OP_MLA_ATTN) CHECK(g->nodes[i].src[PZ_MLA_OPROJ_PREZERO] < 0);
  /* the plan view prints every donor and consumer */
  char *txt = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&txt, &len);
  CHECK_OK(pz_prezero_report_print(&rep, off, tp, &dev_off, f));
  fclose(f);
  CHECK(txt && strstr(txt, "n/f   o_proj") && strstr(txt, "fires gemm") && strstr(txt, "total at m=8: 5 of 7"));
  free(txt);
  pz_prezero_report_free(&rep);
  pz_graph_free(g);

  /* static plan (no question) = pz_pass_prezero */
  pz_graph *a = NULL, *b2 = NULL;
  CHECK_OK(pz_graph_clone(off, &a));
  CHECK_OK(pz_graph_clone(off, &b2));
  CHECK_OK(pz_pass_prezero(a, NULL, NULL));
  CHECK_OK(pz_pass_prezero_batch(b2, NULL, NULL, NULL, NULL));
  CHECK(same_graph(a, b2));
  CHECK(!same_graph(a, off));
  /* a per-batch plan needs m, tp and a device description */
  pz_prezero_batch bad = {.m = 0, .fires = fires_mask, .tp = tp, .dev = &dev};
  CHECK_ST(pz_pass_prezero_batch(b2, &bad, NULL, NULL, NULL), PZ_ERR_INVALID_ARG);
  bad.m = 4;
  bad.dev = NULL;
  CHECK_ST(pz_pass_prezero_batch(b2, &bad, NULL, NULL, NULL), PZ_ERR_INVALID_ARG);
  pz_graph_free(a);
  pz_graph_free(b2);
  pz_graph_free(off);
}

/* Kimi-K2.5 (INT4 routed experts, one shared expert of 2048 per TP): the MoE op's shared gate | up slot
   [m, 2 x 2048 / tp] in the router's donor buffer, fired or not on its own (its link is the router GEMM,
   a candidate whether it fires or not); the query it asks is (m, n = 2 x shared_inter, k = H). */
static void test_shared_gu(int tp) {
  pz_device_desc dev;
  pz_device_desc_default(&dev);
  pz_graph *off = off_graph_of("kimi_k25", tp);
  if (!off) return;
  const int64_t sw = 2 * 2048 / tp;
  static const int masks[4] = {F_ALL | F_SHGU, F_ALL, F_SHGU, 0};
  for (int k = 0; k < 4; k++) {
    pz_graph *g = NULL;
    pz_prezero_report rep;
    run(off, masks[k], 16, &dev, &g, &rep);
    const pz_node *M = find_role(g, 1, PZ_ROLE_MOE), *P = find_role(g, 1, PZ_ROLE_POST_ATTN_LAYERNORM);
    CHECK(M && P && M->op == PZ_OP_MOE && M->n_src == PZ_MOE_NSRC_Q && M->p.moe.wquant == 1);
    if (!M || !P) continue;
    const bool gate = masks[k] & F_GATE, shgu = masks[k] & F_SHGU;
    const int64_t col = gate ? 384 : 0; /* after the router's 384 columns, or alone at 0 */
    /* the plan lists the slot with its query, fired or not */
    int found = 0;
    for (int i = 0; i < rep.n_donors; i++)
      for (int c = 0; c < rep.d[i].n; c++)
        if (rep.d[i].c[c].kind == PZ_PREZERO_SLOT_SHARED_GU) {
          found++;
          CHECK(rep.d[i].c[c].node == M->id && rep.d[i].c[c].n == sw && rep.d[i].c[c].k == 7168);
          CHECK(rep.d[i].c[c].fires == shgu && rep.d[i].c[c].col == (shgu ? col : -1));
        }
    CHECK(found == 1);
    if (shgu) {
      /* verify refuses a slot whose recorded column or n_base disagrees with its view */
      pz_node *Mw = &g->nodes[M->id];
      Mw->p.moe.sh_gu_col_offset += 32;
      CHECK(pz_graph_verify(g) == PZ_ERR_VERIFY && strstr(pz_last_error(), "is not columns"));
      Mw->p.moe.sh_gu_col_offset -= 32;
      const int64_t nb = Mw->p.moe.prezero_n_base;
      Mw->p.moe.prezero_n_base = nb + 32; /* the slot would start below n_base */
      CHECK(pz_graph_verify(g) == PZ_ERR_VERIFY && strstr(pz_last_error(), "within [n_base"));
      Mw->p.moe.prezero_n_base = nb;
      CHECK_OK(pz_graph_verify(g));
      const pz_tensor *s = &g->tensors[M->src[PZ_MOE_SH_GU_PREZERO]];
      CHECK(P->op == PZ_OP_AR_RMSNORM_MAYBE_PREZERO && s->view_of == P->p.norm.fill_buf && s->view_offset == col &&
            s->ne[1] == sw && M->p.moe.sh_gu_col_offset == col);
      /* the gated slot starts at n_base: the router's columns (if it fired) below, always zeroed */
      CHECK(P->p.norm.n_total == col + sw && P->p.norm.n_base == col &&
            M->p.moe.prezero_n_total == P->p.norm.n_total && M->p.moe.prezero_n_base == P->p.norm.n_base);
    } else {
      CHECK(M->src[PZ_MOE_SH_GU_PREZERO] == -1 && M->p.moe.prezero_n_total == 0);
      CHECK(gate ? P->op == PZ_OP_AR_RMSNORM_MAYBE_PREZERO && P->p.norm.n_total == 384 : P->op == PZ_OP_AR_RMSNORM);
    }
    pz_prezero_report_free(&rep);
    pz_graph_free(g);
  }
  /* the slot is gated: with the fill gate forced off it does not fire though its GEMM would, and says why
     (the router's columns, an ungated GEMM consumer, still do) */
  {
    pz_device_desc dev_off = dev;
    dev_off.force_gate = 2;
    pz_graph *g = NULL;
    pz_prezero_report rep;
    run(off, F_ALL | F_SHGU, 16, &dev_off, &g, &rep);
    const pz_node *M = find_role(g, 1, PZ_ROLE_MOE), *P = find_role(g, 1, PZ_ROLE_POST_ATTN_LAYERNORM);
    CHECK(M && P && M->src[PZ_MOE_SH_GU_PREZERO] == -1 && P->op == PZ_OP_AR_RMSNORM_MAYBE_PREZERO &&
          P->p.norm.n_total == 384);
    int gated = 0;
    for (int i = 0; i < rep.n_donors; i++)
      for (int c = 0; c < rep.d[i].n; c++)
        gated += rep.d[i].c[c].kind == PZ_PREZERO_SLOT_SHARED_GU && !rep.d[i].c[c].fires &&
                 strstr(rep.d[i].c[c].why, "gate: fill of") != NULL;
    CHECK(gated == 1);
    pz_prezero_report_free(&rep);
    pz_graph_free(g);
  }
  /* attn_slots = 0 leaves every slotted op alone, the MoE's too */
  pz_graph *g = NULL;
  CHECK_OK(pz_graph_clone(off, &g));
  int all = F_ALL | F_SHGU;
  pz_prezero_batch b = {.m = 16, .fires = fires_mask, .user = &all, .tp = tp, .dev = &dev, .attn_slots = 0};
  CHECK_OK(pz_pass_prezero_batch(g, &b, NULL, NULL, NULL));
  const pz_node *M = find_role(g, 1, PZ_ROLE_MOE);
  CHECK(M && M->src[PZ_MOE_SH_GU_PREZERO] == -1);
  pz_graph_free(g);
  pz_graph_free(off);
}

int main(void) {
  test_shared_gu(1);
  test_shared_gu(2);
  test_tp(1);
  test_tp(4);
  TEST_DONE();
}
