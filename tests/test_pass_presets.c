/* The prezero pass on the model builder's graphs of every preset: per layer, which donors and
 * consumers are rewritten, the buffer widths (n_total, n_base) computed from the config by hand,
 * slot offsets (MLA q_b / o_proj, a quantised MoE's shared gate | up), and verify() on the result;
 * graphs with the pass off are byte-identical. */
#define _GNU_SOURCE 1 /* open_memstream, setenv, mkdtemp */
#include <stdlib.h>
#include <string.h>
#include "model/builder.h"
#include "passes/passes.h"
#include "passes/prezero.h"
#include "pz_test.h"

static int find_node(const pz_graph *g, const char *name) {
  for (int i = 0; i < g->n_nodes; i++)
    if (strcmp(g->nodes[i].name, name) == 0) return i;
  return -1;
}

static const pz_node *layer_node(const pz_graph *g, int L, pz_role role, pz_op op) {
  for (int i = 0; i < g->n_nodes; i++)
    if (g->nodes[i].layer == L && g->nodes[i].role == role && g->nodes[i].op == op) return &g->nodes[i];
  return NULL;
}

static char *dump(const pz_graph *g, size_t *len) {
  char *buf = NULL;
  FILE *f = open_memstream(&buf, len);
  CHECK_OK(pz_graph_dump_text(g, f));
  CHECK_OK(pz_graph_dump_dot(g, f));
  fclose(f);
  return buf;
}

static void check_view(const pz_graph *g, int t, int buf, int64_t col, int64_t width) {
  const pz_tensor *x = &g->tensors[t];
  CHECK(x->view_of == buf && x->view_offset == col && x->ne[1] == width &&
        x->stride[0] == g->tensors[buf].ne[1]);
}

/* Builds `preset` at tp with `layers` layers, runs the passes ON, and checks every layer
 * against widths derived from the config here (not read back from the pass). */
static void check_preset(const char *preset, int tp, int layers, int64_t m) {
  pz_model_config c;
  CHECK_OK(pz_config_load(preset, &c));
  pz_build_opts bo = PZ_BUILD_OPTS_INIT;
  bo.tp = tp;
  bo.m = m;
  bo.layers = layers;
  bo.max_ctx = 64;
  pz_graph *g = NULL, *off = NULL;
  CHECK_OK(pz_build_decode_graph(&c, &bo, &g));
  if (!g) return;
  CHECK_OK(pz_graph_clone(g, &off));
  size_t l0, l1;
  char *d0 = dump(g, &l0);
  pz_pass_opts o = PZ_PASS_OPTS_INIT;
  o.prezero = 0;
  pz_pass_stats st[PZ_MAX_PASSES];
  int ns = 0;
  CHECK_OK(pz_run_passes(off, &o, st, &ns));
  char *d1 = dump(off, &l1);
  CHECK(l0 == l1 && memcmp(d0, d1, l0) == 0); /* off: bit for bit the builder's graph */
  free(d0);
  free(d1);
  pz_graph_free(off);

  o.prezero = 1;
  CHECK_OK(pz_run_passes(g, &o, st, &ns));
  CHECK(ns >= 1 && st[0].ran);
  int64_t H = c.hidden_size, heads = c.num_attention_heads / tp;
  int64_t qh = c.qk_nope_head_dim + c.qk_rope_head_dim, kvw = c.kv_lora_rank + c.qk_rope_head_dim;
  int want_donors = 0, want_rewritten = 0;
  for (int L = 0; L < layers; L++) {
    bool moe = pz_config_layer_is_moe(&c, L);
    const pz_node *D = layer_node(g, L, PZ_ROLE_INPUT_LAYERNORM, PZ_OP_AR_RMSNORM_MAYBE_PREZERO);
    const pz_node *A = layer_node(g, L, PZ_ROLE_ATTN, PZ_OP_MLA_ATTN);
    CHECK(D != NULL && A != NULL);
    if (!D || !A) continue;
    int buf = D->p.norm.fill_buf;
    int64_t n_qkv = c.q_lora_rank > 0 ? c.q_lora_rank + kvw : heads * qh + kvw;
    int64_t n_qb = c.q_lora_rank > 0 ? heads * qh : 0;
    CHECK(D->p.norm.n_base == n_qkv + n_qb);
    CHECK(D->p.norm.n_total == n_qkv + n_qb + H);
    CHECK(g->tensors[buf].ne[0] == m && g->tensors[buf].ne[1] == D->p.norm.n_total);
    want_donors++;
    want_rewritten += 2; /* donor + MLA */
    if (c.q_lora_rank > 0) {
      const pz_node *Q = layer_node(g, L, PZ_ROLE_QKV_A, PZ_OP_MM_MAYBE_PREZERO);
      CHECK(Q && Q->p.gemm.col_offset == 0 && Q->p.gemm.n_base == n_qkv + n_qb);
      if (Q) check_view(g, Q->dst[0], buf, 0, n_qkv);
      check_view(g, A->src[PZ_MLA_QB_PREZERO], buf, n_qkv, n_qb);
      want_rewritten += 1;
    } else {
      const pz_node *Q = layer_node(g, L, PZ_ROLE_Q_PROJ, PZ_OP_MM_MAYBE_PREZERO);
      const pz_node *K = layer_node(g, L, PZ_ROLE_KV_A, PZ_OP_MM_MAYBE_PREZERO);
      CHECK(Q && K);
      if (Q) check_view(g, Q->dst[0], buf, 0, heads * qh);
      if (K) check_view(g, K->dst[0], buf, heads * qh, kvw);
      CHECK(A->src[PZ_MLA_QB_PREZERO] == -1);
      want_rewritten += 2;
    }
    check_view(g, A->src[PZ_MLA_OPROJ_PREZERO], buf, n_qkv + n_qb, H);
    check_view(g, A->dst[0], buf, n_qkv + n_qb, H);
    CHECK(A->p.mla.prezero_n_total == n_qkv + n_qb + H && A->p.mla.prezero_n_base == n_qkv + n_qb);
    if (moe) {
      const pz_node *P = layer_node(g, L, PZ_ROLE_POST_ATTN_LAYERNORM, PZ_OP_AR_RMSNORM_MAYBE_PREZERO);
      const pz_node *G = layer_node(g, L, PZ_ROLE_ROUTER_GATE, PZ_OP_MM_MAYBE_PREZERO);
      const pz_node *M = layer_node(g, L, PZ_ROLE_MOE, PZ_OP_MOE);
      CHECK(P && G && M);
      /* quantised experts with shared experts: their gate | up GEMM [2 x shared_inter, H] gets the slot after
         the router's columns (rounded up to 32), from n_base on */
      const bool shgu = M && M->p.moe.wquant != 0 && c.n_shared_experts > 0;
      const int64_t E = c.n_routed_experts, ecol = shgu ? (E + 31) / 32 * 32 : E;
      const int64_t sw = shgu ? 2 * c.n_shared_experts * c.moe_intermediate_size / tp : 0;
      if (P && G && M) {
        /* the gated slot lies beyond n_base: the router's columns are always zeroed, the slot when the gate holds */
        CHECK(P->p.norm.n_total == (shgu ? (ecol + sw + 31) / 32 * 32 : E) && P->p.norm.n_base == (shgu ? ecol : E));
        check_view(g, G->dst[0], P->p.norm.fill_buf, 0, E);
        if (shgu) {
          check_view(g, M->src[PZ_MOE_SH_GU_PREZERO], P->p.norm.fill_buf, ecol, sw);
          CHECK(M->p.moe.sh_gu_col_offset == ecol && M->p.moe.prezero_n_total == P->p.norm.n_total &&
                M->p.moe.prezero_n_base == P->p.norm.n_base && M->p.moe.hidden == H);
        } else {
          CHECK(M->n_src < PZ_MOE_NSRC_Q || M->src[PZ_MOE_SH_GU_PREZERO] == -1);
          CHECK(M->p.moe.prezero_n_total == 0);
        }
      }
      want_donors++;
      want_rewritten += shgu ? 3 : 2; /* donor + router GEMM (+ the MoE op with its slot) */
    } else {
      CHECK(layer_node(g, L, PZ_ROLE_POST_ATTN_LAYERNORM, PZ_OP_AR_RMSNORM) != NULL);
    }
  }
  CHECK(st[0].matched == want_donors && st[0].rewritten == want_rewritten);
  if (st[0].matched != want_donors || st[0].rewritten != want_rewritten)
    fprintf(stderr, "%s tp=%d: matched %d (want %d), rewritten %d (want %d)\n", preset, tp, st[0].matched,
            want_donors, st[0].rewritten, want_rewritten);
  CHECK(g->nodes[find_node(g, "norm")].op == PZ_OP_AR_RMSNORM);
  pz_graph_free(g);
}

int main(void) {
  unsetenv("PREZERO_ENABLE");
  unsetenv("PREZERO_DISABLE_PASSES");
  unsetenv("PREZERO_DUMP_GRAPH");
  unsetenv("PREZERO_ATTN_SLOTS");
  /* Kimi-K2 TP=4: qkv_a 2112 | q_b 3072 | o_proj 7168 and gate 384 per MoE layer; layer 0 dense. */
  check_preset("kimi_k2", 4, 3, 128);
  {
    pz_model_config c;
    CHECK_OK(pz_config_load("kimi_k2", &c));
    CHECK(c.first_k_dense_replace == 1);
  }
  check_preset("kimi_k2", 1, 2, 4);
  check_preset("deepseek_v3", 4, 5, 8);   /* first 3 layers dense */
  check_preset("deepseek_v3", 8, 4, 1);
  check_preset("deepseek_v2_lite", 1, 3, 16); /* no q LoRA: q_proj + kv_a, no q_b slot */
  check_preset("deepseek_v2_lite", 2, 2, 3);
  /* Kimi-K2.5 (INT4 routed experts, one shared expert of 2048): router 384 | shared gate | up 4096 (TP 1) /
     2048 (TP 2) */
  check_preset("kimi_k25", 1, 2, 16);
  check_preset("kimi_k25", 2, 3, 4);
  check_preset("tiny", 1, 4, 4);
  check_preset("tiny", 2, 4, 64);
  check_preset("tiny", 4, 4, 128);
  TEST_DONE();
}
