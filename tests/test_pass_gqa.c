/* The prezero pass on GQA decode graphs (Llama / Qwen2 / Qwen3 / Qwen3-MoE / Mixtral layout):
 * hand-built graphs (odd widths, so the 32-column alignment shows; qkv bias; replicated kv heads;
 * dense SILU_MUL MLPs and MoE layers): per layer input_layernorm becomes the donor of qkv_proj's
 * slice and of the GQA_ATTN o_proj slot (beyond n_base), post_attention_layernorm of gate_up_proj
 * (dense) or the router gate (MoE), with every width computed here from the dimensions; the
 * legality check refusing unsafe consumers and o_proj slots; the per-batch plan with a consumer
 * question answered by the test (only some fire, the gate drops o_proj, nothing fires = the OFF
 * graph); the op table (passes/attn_slots.h). */
#define _GNU_SOURCE 1 /* open_memstream */
#include <stdlib.h>
#include <string.h>
#include "model/builder.h"
#include "model/config.h"
#include "passes/attn_slots.h"
#include "passes/passes.h"
#include "passes/prezero.h"
#include "pz_test.h"

static int64_t al32(int64_t c) { return (c + 31) / 32 * 32; }

/* Full-model dimensions (config.json names) and the rank's TP; moe_from: first MoE layer
 * (layers >= moe_from use a router + MOE, the others gate_up -> SILU_MUL -> down_proj). */
typedef struct {
  int64_t m, hidden, heads, kv_heads, head_dim, inter, experts, vocab;
  int layers, moe_from, tp;
  bool bias, qk_norm;
} gdims;

static int64_t rank_heads(const gdims *d) { return d->heads / d->tp; }
static int64_t rank_kvh(const gdims *d) { return d->kv_heads >= d->tp ? d->kv_heads / d->tp : 1; }
static int64_t qkv_width(const gdims *d) { return (rank_heads(d) + 2 * rank_kvh(d)) * d->head_dim; }

static int tensor(pz_graph *g, const char *name, pz_dtype dt, pz_tensor_kind k, int nd, int64_t a, int64_t b,
                  int64_t c, int64_t e) {
  int id = -1;
  int64_t ne[4] = {a, b, c, e};
  CHECK_OK(pz_graph_add_tensor(g, name, dt, k, nd, ne, &id));
  if (k == PZ_T_ACT || k == PZ_T_STATE || k == PZ_T_INPUT) g->tensors[id].batched = true;
  return id;
}

static int node(pz_graph *g, pz_op op, const char *name, int layer, pz_role role, const int *src, int ns,
                const int *dst, int nd, const pz_op_params *p) {
  int id = -1;
  CHECK_OK(pz_graph_add_node(g, op, name, layer, role, src, ns, dst, nd, p, &id));
  return id;
}

/* The GQA decode graph of one rank, as docs/ARCHITECTURE.md's GQA layer: input_layernorm ->
 * qkv_proj GEMM -> GQA_ATTN (o_proj inside) -> post_attention_layernorm -> MLP. */
static pz_graph *build_gqa(const gdims *d) {
  pz_graph_info info = {.tp = d->tp, .m = d->m, .n_layers = d->layers, .hidden = d->hidden,
                        .vocab_size = d->vocab, .rms_eps = 1e-5f};
  snprintf(info.model_name, sizeof info.model_name, "hand_gqa");
  pz_graph *g = NULL;
  CHECK_OK(pz_graph_create(&info, &g));
  char nm[PZ_NAME_LEN];
  const int64_t m = d->m, H = d->hidden, hd = d->head_dim, heads = rank_heads(d), kvh = rank_kvh(d);
  const int64_t nq = qkv_width(d), I = d->inter / d->tp;
  int ids = tensor(g, "input_ids", PZ_I32, PZ_T_INPUT, 1, m, 0, 0, 0);
  int pos = tensor(g, "positions", PZ_I32, PZ_T_INPUT, 1, m, 0, 0, 0);
  g->in_tokens = ids;
  g->in_pos = pos;
  int res = tensor(g, "residual", PZ_F32, PZ_T_STATE, 2, m, H, 0, 0);
  int emb_w = tensor(g, "embed_tokens.weight", PZ_BF16, PZ_T_WEIGHT, 2, d->vocab / d->tp, H, 0, 0);
  int part = tensor(g, "embed_tokens.out", PZ_F32, PZ_T_ACT, 2, m, H, 0, 0);
  pz_op_params vp = {.vocab = {.vocab_size = d->vocab, .vocab_per_rank = d->vocab / d->tp}};
  node(g, PZ_OP_EMBEDDING, "embed_tokens", -1, PZ_ROLE_EMBED, (int[]){ids, emb_w}, 2, (int[]){part}, 1, &vp);
  pz_op_params gp = {.gemm = {.zero_init = true, .split_k = 0, .prezero_buf = -1}};
  for (int L = 0; L < d->layers; L++) {
#define NM(fmt) (snprintf(nm, sizeof nm, "layers.%d." fmt, L), nm)
    pz_op_params np = {.norm = {.eps = 1e-5f, .has_residual = L > 0, .fill_buf = -1}};
    int w_in = tensor(g, NM("input_layernorm.weight"), PZ_BF16, PZ_T_WEIGHT, 1, H, 0, 0, 0);
    int xn = tensor(g, NM("input_layernorm.out"), PZ_BF16, PZ_T_ACT, 2, m, H, 0, 0);
    node(g, PZ_OP_AR_RMSNORM, NM("input_layernorm"), L, PZ_ROLE_INPUT_LAYERNORM, (int[]){part, w_in, L > 0 ? res : -1},
         3, (int[]){xn, res}, 2, &np);
    int wqkv = tensor(g, NM("self_attn.qkv_proj.weight"), PZ_BF16, PZ_T_WEIGHT, 2, nq, H, 0, 0);
    int bqkv = d->bias ? tensor(g, NM("self_attn.qkv_proj.bias"), PZ_F32, PZ_T_WEIGHT, 1, nq, 0, 0, 0) : -1;
    int qkv = tensor(g, NM("self_attn.qkv_proj.out"), PZ_F32, PZ_T_ACT, 2, m, nq, 0, 0);
    node(g, PZ_OP_GEMM, NM("self_attn.qkv_proj"), L, PZ_ROLE_QKV_PROJ, (int[]){xn, wqkv, bqkv}, 3, (int[]){qkv}, 1, &gp);
    int src[PZ_GQA_NSRC];
    for (int s = 0; s < PZ_GQA_NSRC; s++) src[s] = -1;
    src[PZ_GQA_QKV] = qkv;
    if (d->qk_norm) {
      src[PZ_GQA_Q_NORM_W] = tensor(g, NM("self_attn.q_norm.weight"), PZ_BF16, PZ_T_WEIGHT, 1, hd, 0, 0, 0);
      src[PZ_GQA_K_NORM_W] = tensor(g, NM("self_attn.k_norm.weight"), PZ_BF16, PZ_T_WEIGHT, 1, hd, 0, 0, 0);
    }
    src[PZ_GQA_O_W] = tensor(g, NM("self_attn.o_proj.weight"), PZ_BF16, PZ_T_WEIGHT, 2, H, heads * hd, 0, 0);
    src[PZ_GQA_K_CACHE] = tensor(g, NM("self_attn.k_cache"), PZ_BF16, PZ_T_STATE, 4, m, kvh, 16, hd);
    src[PZ_GQA_V_CACHE] = tensor(g, NM("self_attn.v_cache"), PZ_BF16, PZ_T_STATE, 4, m, kvh, 16, hd);
    src[PZ_GQA_POS] = pos;
    int attn = tensor(g, NM("self_attn.out"), PZ_F32, PZ_T_ACT, 2, m, H, 0, 0);
    pz_op_params ap = {.gqa = {.n_heads = (int)heads, .n_kv_heads = (int)kvh, .head_dim = hd, .hidden = H,
                               .max_ctx = 16, .eps = 1e-5f, .softmax_scale = 0.25f}};
    node(g, PZ_OP_GQA_ATTN, NM("self_attn"), L, PZ_ROLE_ATTN, src, PZ_GQA_NSRC, (int[]){attn}, 1, &ap);
    np.norm.has_residual = true;
    int w_post = tensor(g, NM("post_attention_layernorm.weight"), PZ_BF16, PZ_T_WEIGHT, 1, H, 0, 0, 0);
    int xn2 = tensor(g, NM("post_attention_layernorm.out"), PZ_BF16, PZ_T_ACT, 2, m, H, 0, 0);
    node(g, PZ_OP_AR_RMSNORM, NM("post_attention_layernorm"), L, PZ_ROLE_POST_ATTN_LAYERNORM, (int[]){attn, w_post, res},
         3, (int[]){xn2, res}, 2, &np);
    part = tensor(g, NM("mlp.out"), PZ_F32, PZ_T_ACT, 2, m, H, 0, 0);
    if (L < d->moe_from) {
      int wgu = tensor(g, NM("mlp.gate_up_proj.weight"), PZ_BF16, PZ_T_WEIGHT, 2, 2 * I, H, 0, 0);
      int gu = tensor(g, NM("mlp.gate_up_proj.out"), PZ_F32, PZ_T_ACT, 2, m, 2 * I, 0, 0);
      node(g, PZ_OP_GEMM, NM("mlp.gate_up_proj"), L, PZ_ROLE_GATE_UP, (int[]){xn2, wgu, -1}, 3, (int[]){gu}, 1, &gp);
      int act = tensor(g, NM("mlp.act_fn.out"), PZ_BF16, PZ_T_ACT, 2, m, I, 0, 0);
      pz_op_params sp = {.mlp = {.inter = I}};
      node(g, PZ_OP_SILU_MUL, NM("mlp.act_fn"), L, PZ_ROLE_MLP_ACT, (int[]){gu}, 1, (int[]){act}, 1, &sp);
      int wd = tensor(g, NM("mlp.down_proj.weight"), PZ_BF16, PZ_T_WEIGHT, 2, H, I, 0, 0);
      node(g, PZ_OP_GEMM, NM("mlp.down_proj"), L, PZ_ROLE_DOWN_PROJ, (int[]){act, wd, -1}, 3, (int[]){part}, 1, &gp);
    } else {
      int wr = tensor(g, NM("mlp.gate.weight"), PZ_BF16, PZ_T_WEIGHT, 2, d->experts, H, 0, 0);
      int lg = tensor(g, NM("mlp.gate.out"), PZ_F32, PZ_T_ACT, 2, m, d->experts, 0, 0);
      node(g, PZ_OP_GEMM, NM("mlp.gate"), L, PZ_ROLE_ROUTER_GATE, (int[]){xn2, wr, -1}, 3, (int[]){lg}, 1, &gp);
      int msrc[PZ_MOE_NSRC] = {
          xn2, lg, -1,
          tensor(g, NM("mlp.experts.gate_proj.weight"), PZ_BF16, PZ_T_WEIGHT, 3, d->experts, I, H, 0),
          tensor(g, NM("mlp.experts.up_proj.weight"), PZ_BF16, PZ_T_WEIGHT, 3, d->experts, I, H, 0),
          tensor(g, NM("mlp.experts.down_proj.weight"), PZ_BF16, PZ_T_WEIGHT, 3, d->experts, H, I, 0),
          -1, -1, -1};
      pz_op_params mp = {.moe = {.n_experts = (int)d->experts, .top_k = 2, .n_group = 1, .topk_group = 1,
                                 .scoring = PZ_SCORE_TOPK_SOFTMAX, .norm_topk_prob = true,
                                 .routed_scaling_factor = 1.f, .inter = I}};
      node(g, PZ_OP_MOE, NM("mlp"), L, PZ_ROLE_MOE, msrc, PZ_MOE_NSRC, (int[]){part}, 1, &mp);
    }
#undef NM
  }
  pz_op_params np = {.norm = {.eps = 1e-5f, .has_residual = true, .fill_buf = -1}};
  int wf = tensor(g, "norm.weight", PZ_BF16, PZ_T_WEIGHT, 1, H, 0, 0, 0);
  int xf = tensor(g, "norm.out", PZ_BF16, PZ_T_ACT, 2, m, H, 0, 0);
  node(g, PZ_OP_AR_RMSNORM, "norm", -1, PZ_ROLE_FINAL_NORM, (int[]){part, wf, res}, 3, (int[]){xf, res}, 2, &np);
  int wl = tensor(g, "lm_head.weight", PZ_BF16, PZ_T_WEIGHT, 2, d->vocab / d->tp, H, 0, 0);
  int lo = tensor(g, "lm_head.out", PZ_F32, PZ_T_ACT, 2, m, d->vocab / d->tp, 0, 0);
  pz_op_params lp = {.gemm = {.zero_init = true, .prezero_buf = -1}};
  node(g, PZ_OP_LM_HEAD, "lm_head", -1, PZ_ROLE_LM_HEAD, (int[]){xf, wl, -1}, 3, (int[]){lo}, 1, &lp);
  int tok = tensor(g, "argmax.out", PZ_I32, PZ_T_ACT, 1, m, 0, 0, 0);
  node(g, PZ_OP_ARGMAX, "argmax", -1, PZ_ROLE_ARGMAX, (int[]){lo}, 1, (int[]){tok}, 1, &vp);
  g->out_logits = lo;
  g->out_tokens = tok;
  CHECK_OK(pz_graph_verify(g));
  return g;
}

static const pz_node *find_node(const pz_graph *g, const char *name) {
  for (int i = 0; i < g->n_nodes; i++)
    if (strcmp(g->nodes[i].name, name) == 0) return &g->nodes[i];
  return NULL;
}

static const pz_node *layer_node(const pz_graph *g, int L, const char *suffix) {
  char nm[PZ_NAME_LEN];
  snprintf(nm, sizeof nm, "layers.%d.%s", L, suffix);
  return find_node(g, nm);
}

static char *dump(const pz_graph *g, size_t *len) {
  char *buf = NULL;
  FILE *f = open_memstream(&buf, len);
  CHECK_OK(pz_graph_dump_text(g, f));
  CHECK_OK(pz_graph_dump_dot(g, f));
  fclose(f);
  return buf;
}

static bool same_graph(const pz_graph *a, const pz_graph *b) {
  return a->n_nodes == b->n_nodes && a->n_tensors == b->n_tensors &&
         memcmp(a->nodes, b->nodes, sizeof(pz_node) * (size_t)a->n_nodes) == 0 &&
         memcmp(a->tensors, b->tensors, sizeof(pz_tensor) * (size_t)a->n_tensors) == 0;
}

static int n_op(const pz_graph *g, pz_op op) {
  int k = 0;
  for (int i = 0; i < g->n_nodes; i++) k += g->nodes[i].op == op;
  return k;
}

/* Tensor t is columns [c0, c0 + w) of the [rows, cols] buffer `buf`. */
static void check_view(const pz_graph *g, int t, int buf, int64_t c0, int64_t w) {
  const pz_tensor *x = &g->tensors[t], *b = &g->tensors[buf];
  CHECK(x->view_of == buf && x->view_offset == c0 && x->ne[1] == w && x->ne[0] == b->ne[0]);
  CHECK(x->stride[0] == b->ne[1] && x->stride[1] == 1);
}

/* Checks the rewrite of every layer of a GQA graph g (the pass ran with its slots on) against
 * widths computed from the dimensions: heads / kv heads per rank (kv heads replicated when
 * TP > kv heads), 32-column alignment of every slice and of n_total. */
static void check_layers(const pz_graph *g, int64_t m, int64_t H, int64_t heads, int64_t kvh, int64_t hd,
                         int64_t gate_up_n, int64_t experts, int layers, const bool *moe, int *donors, int *rewritten) {
  const int64_t nq = (heads + 2 * kvh) * hd, n_base = al32(nq), n_total = n_base + al32(H);
  for (int L = 0; L < layers; L++) {
    const pz_node *D = layer_node(g, L, "input_layernorm"), *Q = layer_node(g, L, "self_attn.qkv_proj");
    const pz_node *A = layer_node(g, L, "self_attn"), *P = layer_node(g, L, "post_attention_layernorm");
    CHECK(D && Q && A && P);
    if (!D || !Q || !A || !P) return;
    CHECK(D->op == PZ_OP_AR_RMSNORM_MAYBE_PREZERO && D->p.norm.n_base == n_base && D->p.norm.n_total == n_total);
    int buf = D->p.norm.fill_buf;
    CHECK(buf >= 0 && g->tensors[buf].kind == PZ_T_BUFFER && g->tensors[buf].view_of == -1 &&
          g->tensors[buf].dtype == PZ_F32 && g->tensors[buf].ne[0] == m && g->tensors[buf].ne[1] == n_total);
    char nm[PZ_NAME_LEN];
    snprintf(nm, sizeof nm, "layers.%d.input_layernorm.prezero_buf", L);
    CHECK(strcmp(g->tensors[buf].name, nm) == 0);
    CHECK(Q->op == PZ_OP_MM_MAYBE_PREZERO && Q->p.gemm.prezero_buf == buf && Q->p.gemm.col_offset == 0 &&
          Q->p.gemm.n_base == n_base);
    check_view(g, Q->dst[0], buf, 0, nq);
    CHECK(A->op == PZ_OP_GQA_ATTN && A->src[PZ_GQA_QKV] == Q->dst[0]);
    int slot = A->src[PZ_GQA_OPROJ_PREZERO];
    CHECK(slot >= 0);
    if (slot >= 0) {
      check_view(g, slot, buf, n_base, H);
      snprintf(nm, sizeof nm, "layers.%d.self_attn.o_proj.prezero", L);
      CHECK(strcmp(g->tensors[slot].name, nm) == 0);
    }
    check_view(g, A->dst[0], buf, n_base, H); /* the partial is the o_proj slot: no copy */
    CHECK(A->p.gqa.prezero_n_total == n_total && A->p.gqa.prezero_n_base == n_base &&
          A->p.gqa.oproj_col_offset == n_base);
    CHECK(A->p.gqa.oproj_col_offset >= A->p.gqa.prezero_n_base); /* beyond n_base: gated */
    CHECK(P->src[0] == A->dst[0]);
    *donors += 2;
    *rewritten += 3 + 2; /* donor, qkv_proj, attention; donor, gate_up or router gate */
    CHECK(P->op == PZ_OP_AR_RMSNORM_MAYBE_PREZERO && P->p.norm.fill_buf != buf);
    int pbuf = P->p.norm.fill_buf;
    if (moe[L]) {
      const pz_node *G = layer_node(g, L, "mlp.gate"), *E = layer_node(g, L, "mlp");
      CHECK(G && E && E->op == PZ_OP_MOE && !layer_node(g, L, "mlp.gate_up_proj"));
      if (!G || !E) continue;
      CHECK(P->p.norm.n_total == al32(experts) && P->p.norm.n_base == al32(experts));
      CHECK(G->op == PZ_OP_MM_MAYBE_PREZERO && G->p.gemm.prezero_buf == pbuf && G->p.gemm.col_offset == 0 &&
            G->p.gemm.n_base == al32(experts));
      check_view(g, G->dst[0], pbuf, 0, experts);
      CHECK(E->src[PZ_MOE_LOGITS] == G->dst[0]);
    } else {
      const pz_node *GU = layer_node(g, L, "mlp.gate_up_proj"), *S = layer_node(g, L, "mlp.act_fn");
      const pz_node *DN = layer_node(g, L, "mlp.down_proj");
      CHECK(GU && S && DN && !layer_node(g, L, "mlp.gate"));
      if (!GU || !S || !DN) continue;
      CHECK(P->p.norm.n_total == al32(gate_up_n) && P->p.norm.n_base == al32(gate_up_n));
      CHECK(GU->op == PZ_OP_MM_MAYBE_PREZERO && GU->p.gemm.prezero_buf == pbuf && GU->p.gemm.col_offset == 0);
      check_view(g, GU->dst[0], pbuf, 0, gate_up_n);
      CHECK(S->op == PZ_OP_SILU_MUL && S->src[0] == GU->dst[0]);
      /* down_proj reads the activation, not a donor's x_norm: it stays a plain GEMM */
      CHECK(DN->op == PZ_OP_GEMM && DN->p.gemm.zero_init && g->tensors[DN->dst[0]].view_of == -1);
    }
  }
}

/* One hand-built graph: the rewrite, then a second run that finds nothing left. */
static void test_hand(const gdims *d) {
  pz_graph *g = build_gqa(d);
  int nodes0 = g->n_nodes;
  pz_pass_stats st;
  char *log = NULL;
  size_t loglen = 0;
  FILE *lf = open_memstream(&log, &loglen);
  CHECK_OK(pz_pass_prezero(g, lf, &st));
  fclose(lf);
  CHECK_OK(pz_graph_verify(g));
  CHECK(g->n_nodes == nodes0);
  bool moe[16];
  for (int L = 0; L < d->layers; L++) moe[L] = L >= d->moe_from;
  int donors = 0, rewritten = 0;
  check_layers(g, d->m, d->hidden, rank_heads(d), rank_kvh(d), d->head_dim, 2 * d->inter / d->tp, d->experts,
               d->layers, moe, &donors, &rewritten);
  CHECK(st.matched == donors && st.rewritten == rewritten);
  CHECK(n_op(g, PZ_OP_AR_RMSNORM_MAYBE_PREZERO) == 2 * d->layers && n_op(g, PZ_OP_MM_MAYBE_PREZERO) == 2 * d->layers);
  CHECK(find_node(g, "norm")->op == PZ_OP_AR_RMSNORM && find_node(g, "lm_head")->op == PZ_OP_LM_HEAD);
  CHECK(log && strstr(log, "o_proj") && strstr(log, "(beyond n_base)") && strstr(log, "layers.0.self_attn.qkv_proj"));
  free(log);
  size_t l1, l2;
  char *a = dump(g, &l1);
  CHECK_OK(pz_pass_prezero(g, NULL, &st));
  CHECK(st.matched == 0 && st.rewritten == 0);
  char *b = dump(g, &l2);
  CHECK(l1 == l2 && memcmp(a, b, l1) == 0);
  free(a);
  free(b);
  pz_graph_free(g);

  /* PREZERO_ATTN_SLOTS=0: qkv_proj and the MLP consumer only; the o_proj slot stays unset. */
  g = build_gqa(d);
  pz_prezero_batch no_slots = {.m = 0, .attn_slots = 0};
  CHECK_OK(pz_pass_prezero_batch(g, &no_slots, NULL, &st, NULL));
  CHECK_OK(pz_graph_verify(g));
  CHECK(st.matched == 2 * d->layers && st.rewritten == 4 * d->layers);
  const pz_node *A = layer_node(g, 0, "self_attn"), *D = layer_node(g, 0, "input_layernorm");
  CHECK(A->src[PZ_GQA_OPROJ_PREZERO] == -1 && A->p.gqa.prezero_n_total == 0 && g->tensors[A->dst[0]].view_of == -1);
  CHECK(D->p.norm.n_total == al32(qkv_width(d)) && D->p.norm.n_base == D->p.norm.n_total);
  pz_graph_free(g);
}

/* The op table: a GQA node links through its qkv input and has one output slot (o_proj); an MLA
 * node has q_b only with q LoRA. Slot src indices are writes of the op, not reads. */
static void test_describe(void) {
  gdims d = {.m = 4, .hidden = 96, .heads = 6, .kv_heads = 2, .head_dim = 16, .inter = 64, .experts = 4,
             .vocab = 64, .layers = 1, .moe_from = 1, .tp = 2};
  pz_graph *g = build_gqa(&d);
  const pz_node *A = layer_node(g, 0, "self_attn");
  pz_attn_desc ad;
  CHECK(pz_attn_describe(A, &ad));
  CHECK(ad.n_links == 1 && ad.link[0] == PZ_GQA_QKV && ad.n_slots == 1);
  CHECK(ad.slot[0].kind == PZ_PREZERO_SLOT_OPROJ && ad.slot[0].src == PZ_GQA_OPROJ_PREZERO && ad.slot[0].output &&
        ad.slot[0].link == -1 && ad.slot[0].n == 96 && ad.slot[0].k == 3 * 16 && strcmp(ad.slot[0].name, "o_proj") == 0);
  CHECK(pz_attn_is_slot(PZ_OP_GQA_ATTN, PZ_GQA_OPROJ_PREZERO) && !pz_attn_is_slot(PZ_OP_GQA_ATTN, PZ_GQA_QKV));
  CHECK(!pz_attn_is_slot(PZ_OP_GEMM, PZ_GQA_OPROJ_PREZERO) && !pz_attn_describe(layer_node(g, 0, "self_attn.qkv_proj"), &ad));
  pz_node *W = &g->nodes[A->id];
  CHECK(pz_attn_set_slot_col(W, PZ_PREZERO_SLOT_OPROJ, 64) && W->p.gqa.oproj_col_offset == 64);
  CHECK(!pz_attn_set_slot_col(W, PZ_PREZERO_SLOT_QB, 0)); /* GQA has no q_b slot */
  CHECK(pz_attn_set_fill(W, 160, 64) && W->p.gqa.prezero_n_total == 160 && W->p.gqa.prezero_n_base == 64);
  CHECK(!pz_attn_set_fill(&g->nodes[0], 1, 1));
  pz_node wrong = *A;
  wrong.n_src = PZ_GQA_NSRC - 1; /* not the op's source count */
  CHECK(!pz_attn_describe(&wrong, &ad));
  pz_graph_free(g);

  pz_node mla = {.op = PZ_OP_MLA_ATTN, .n_src = PZ_MLA_NSRC};
  mla.p.mla = (pz_mla_params){.n_heads = 4, .hidden = 256, .q_lora_rank = 64, .kv_lora_rank = 32,
                              .qk_nope_head_dim = 16, .qk_rope_head_dim = 8, .v_head_dim = 12};
  CHECK(pz_attn_describe(&mla, &ad) && ad.n_links == 3 && ad.n_slots == 2);
  CHECK(ad.slot[0].kind == PZ_PREZERO_SLOT_QB && !ad.slot[0].output && ad.slot[0].link == PZ_MLA_QKV_A &&
        ad.slot[0].src == PZ_MLA_QB_PREZERO && ad.slot[0].n == 4 * 24 && ad.slot[0].k == 64);
  CHECK(ad.slot[1].kind == PZ_PREZERO_SLOT_OPROJ && ad.slot[1].output && ad.slot[1].n == 256 && ad.slot[1].k == 48);
  mla.p.mla.q_lora_rank = 0;
  CHECK(pz_attn_describe(&mla, &ad) && ad.n_slots == 1 && ad.slot[0].kind == PZ_PREZERO_SLOT_OPROJ);
}

/* Legality on a GQA layer: an unsafe qkv_proj output leaves the donor and the attention op
 * untouched (the op is linked only through it); an unsafe attention output leaves only the
 * o_proj slot unset. The log names the reason. */
static void test_legality(void) {
  gdims d = {.m = 4, .hidden = 64, .heads = 4, .kv_heads = 2, .head_dim = 16, .inter = 48, .experts = 4,
             .vocab = 64, .layers = 1, .moe_from = 0, .tp = 1};
  static const char *const why[8] = {
      "consumer layers.0.self_attn.qkv_proj left alone: split_k=1",
      "consumer layers.0.self_attn.qkv_proj left alone: zero_init=false",
      "consumer layers.0.self_attn.qkv_proj left alone: another tensor is a view of the output",
      "consumer layers.0.self_attn.qkv_proj left alone: output is not an activation",
      "o_proj slot of layers.0.self_attn left unset: another tensor is a view of the output",
      "o_proj slot of layers.0.self_attn left unset: output is a graph input/output",
      "o_proj slot of layers.0.self_attn left unset: another node writes the output",
      "o_proj slot of layers.0.self_attn left unset: output width"};
  for (int variant = 0; variant < 8; variant++) {
    pz_graph *g = build_gqa(&d);
    pz_node *Q = &g->nodes[layer_node(g, 0, "self_attn.qkv_proj")->id];
    pz_node *A = &g->nodes[layer_node(g, 0, "self_attn")->id];
    const int qkv = Q->dst[0], out = A->dst[0], qid = Q->id, aid = A->id;
    int v;
    if (variant == 0) Q->p.gemm.split_k = 1;
    if (variant == 1) Q->p.gemm.zero_init = false;
    if (variant == 2) CHECK_OK(pz_graph_add_col_slice(g, "qkv.part", qkv, 0, 16, &v));
    if (variant == 3) g->tensors[qkv].kind = PZ_T_STATE; /* lives across steps */
    if (variant == 4) CHECK_OK(pz_graph_add_col_slice(g, "attn.part", out, 0, 32, &v));
    if (variant == 5) g->out_logits = out;
    if (variant == 6) { /* a later node writes the attention output again */
      const pz_node *F = find_node(g, "norm");
      int f_src[2] = {F->dst[0], F->src[1]};
      pz_op_params np = {.norm = {.eps = 1e-5f, .fill_buf = -1}};
      node(g, PZ_OP_RMSNORM, "other", -1, PZ_ROLE_NONE, f_src, 2, (int[]){out}, 1, &np);
    }
    if (variant == 7) g->nodes[aid].p.gqa.hidden = 32; /* params disagree with the output width */
    pz_graph *copy = NULL;
    CHECK_OK(pz_graph_clone(g, &copy));
    char *log = NULL;
    size_t loglen = 0;
    FILE *lf = open_memstream(&log, &loglen);
    pz_pass_stats st = {.matched = -1};
    CHECK_OK(pz_pass_prezero(g, lf, &st));
    fclose(lf);
    CHECK(log && strstr(log, why[variant]) != NULL);
    if (!log || !strstr(log, why[variant]))
      fprintf(stderr, "legality variant %d: log lacks '%s':\n%s\n", variant, why[variant], log ? log : "");
    const pz_node *D = layer_node(g, 0, "input_layernorm");
    A = &g->nodes[aid];
    CHECK(A->src[PZ_GQA_OPROJ_PREZERO] == -1 && A->p.gqa.prezero_n_total == 0 && A->p.gqa.prezero_n_base == 0);
    CHECK(g->tensors[out].view_of == copy->tensors[out].view_of); /* the partial keeps its storage */
    CHECK(st.matched == 2 - (variant < 4)); /* post_attention_layernorm (router gate) in every variant */
    if (variant < 4) {
      CHECK(memcmp(D, &copy->nodes[D->id], sizeof *D) == 0 && memcmp(A, &copy->nodes[aid], sizeof *A) == 0);
      CHECK(memcmp(&g->nodes[qid], &copy->nodes[qid], sizeof(pz_node)) == 0);
      CHECK(memcmp(&g->tensors[qkv], &copy->tensors[qkv], sizeof(pz_tensor)) == 0);
    } else {
      CHECK(D->op == PZ_OP_AR_RMSNORM_MAYBE_PREZERO && g->nodes[qid].op == PZ_OP_MM_MAYBE_PREZERO);
      CHECK(D->p.norm.n_total == al32(qkv_width(&d)) && D->p.norm.n_base == D->p.norm.n_total);
      check_view(g, qkv, D->p.norm.fill_buf, 0, qkv_width(&d));
    }
    free(log);
    pz_graph_free(copy);
    pz_graph_free(g);
  }
}

/* verify() refuses a broken GQA rewrite: an o_proj slot at a column other than the recorded one,
 * fill figures that do not match the buffer, a slot that is not the op's output, a donor that
 * lost its fill. */
static void test_verify_rewrites(void) {
  gdims d = {.m = 4, .hidden = 72, .heads = 6, .kv_heads = 2, .head_dim = 24, .inter = 80, .experts = 6,
             .vocab = 64, .layers = 1, .moe_from = 1, .tp = 2};
  for (int variant = 0; variant < 4; variant++) {
    pz_graph *g = build_gqa(&d);
    CHECK_OK(pz_pass_prezero(g, NULL, NULL));
    CHECK_OK(pz_graph_verify(g));
    pz_node *A = &g->nodes[layer_node(g, 0, "self_attn")->id];
    pz_node *D = &g->nodes[layer_node(g, 0, "input_layernorm")->id];
    if (variant == 0) A->p.gqa.oproj_col_offset += 32;
    if (variant == 1) A->p.gqa.prezero_n_total += 32;
    if (variant == 2) A->src[PZ_GQA_OPROJ_PREZERO] = layer_node(g, 0, "post_attention_layernorm")->p.norm.fill_buf;
    if (variant == 3) D->op = PZ_OP_AR_RMSNORM;
    CHECK_ST(pz_graph_verify(g), PZ_ERR_VERIFY);
    pz_graph_free(g);
  }
}

/* ---- the per-batch plan: the consumer question answered by the test's rule ---------------- */

enum { F_QKV = 1, F_OPROJ = 2, F_MLP = 4, F_ALL = 7 };
typedef struct {
  int mask, calls, bad;
  int64_t H, k_oproj;
} rule;

/* Fires by a bit per consumer; counts queries whose shape is not the consumer's. */
static bool fires_rule(void *user, const pz_graph *g, const pz_prezero_query *q, char *why, size_t len) {
  rule *r = user;
  const pz_node *n = &g->nodes[q->node];
  r->calls++;
  int bit;
  if (q->kind == PZ_PREZERO_SLOT_OPROJ) {
    bit = F_OPROJ;
    r->bad += n->op != PZ_OP_GQA_ATTN || q->n != r->H || q->k != r->k_oproj;
  } else {
    const pz_tensor *W = &g->tensors[n->src[1]];
    bit = strstr(n->name, "qkv_proj") ? F_QKV : F_MLP;
    r->bad += q->kind != PZ_PREZERO_SLOT_GEMM || n->op != PZ_OP_GEMM || q->n != W->ne[0] || q->k != W->ne[1];
  }
  bool f = (r->mask & bit) != 0;
  snprintf(why, len, "%s", f ? "rule: split-K" : "rule: not split-K");
  return f;
}

static void plan_run(const pz_graph *off, rule *r, int64_t m, const pz_device_desc *dev, pz_graph **out,
                     pz_prezero_report *rep) {
  CHECK_OK(pz_graph_clone(off, out));
  r->calls = 0;
  pz_prezero_batch b = {.m = m, .fires = fires_rule, .user = r, .tp = off->info.tp, .dev = dev, .attn_slots = 1};
  CHECK_OK(pz_pass_prezero_batch(*out, &b, NULL, NULL, rep));
  CHECK_OK(pz_graph_verify(*out));
  CHECK(r->bad == 0);
}

static void test_batch(void) {
  /* layer 0 dense, layer 1 MoE; odd widths: qkv (3+2)*24 = 120, H = 72, gate_up 80, experts 6 */
  gdims d = {.m = 16, .hidden = 72, .heads = 6, .kv_heads = 2, .head_dim = 24, .inter = 80, .experts = 6,
             .vocab = 64, .layers = 2, .moe_from = 1, .tp = 2, .bias = true};
  const int64_t nq = qkv_width(&d), H = d.hidden;
  pz_graph *off = build_gqa(&d), *g = NULL;
  pz_device_desc dev;
  pz_device_desc_default(&dev);
  rule r = {.H = H, .k_oproj = rank_heads(&d) * d.head_dim};
  pz_prezero_report rep;

  /* nothing fires: the OFF graph, byte for byte; every candidate listed as n/f */
  r.mask = 0;
  plan_run(off, &r, 4, &dev, &g, &rep);
  CHECK(same_graph(g, off) && pz_prezero_report_fired(&rep) == 0);
  CHECK(rep.n_donors == 4 && r.calls == 2 + 1 + 2 + 1); /* per layer: qkv_proj, o_proj; gate_up / router */
  CHECK(rep.d[0].n == 2 && rep.d[0].c[1].kind == PZ_PREZERO_SLOT_OPROJ && rep.d[0].c[1].col == -1 &&
        rep.d[0].c[1].n == H && rep.d[0].c[1].k == r.k_oproj && rep.d[0].n_total == 0);
  pz_prezero_report_free(&rep);
  pz_graph_free(g);

  /* only o_proj fires: linked through the unfired qkv_proj, the slot starts the buffer */
  r.mask = F_OPROJ;
  plan_run(off, &r, 4, &dev, &g, &rep);
  CHECK(n_op(g, PZ_OP_MM_MAYBE_PREZERO) == 0 && n_op(g, PZ_OP_AR_RMSNORM_MAYBE_PREZERO) == 2);
  for (int L = 0; L < 2; L++) {
    const pz_node *A = layer_node(g, L, "self_attn"), *D = layer_node(g, L, "input_layernorm");
    CHECK(A->src[PZ_GQA_OPROJ_PREZERO] >= 0 && A->p.gqa.oproj_col_offset == 0 && A->p.gqa.prezero_n_base == 0 &&
          A->p.gqa.prezero_n_total == al32(H));
    CHECK(D->p.norm.n_base == 0 && D->p.norm.n_total == al32(H));
    check_view(g, A->dst[0], D->p.norm.fill_buf, 0, H);
    CHECK(layer_node(g, L, "self_attn.qkv_proj")->op == PZ_OP_GEMM);
  }
  pz_prezero_report_free(&rep);
  pz_graph_free(g);

  /* qkv_proj and the MLP consumers fire, o_proj does not */
  r.mask = F_QKV | F_MLP;
  plan_run(off, &r, 4, &dev, &g, &rep);
  CHECK(n_op(g, PZ_OP_MM_MAYBE_PREZERO) == 4);
  CHECK(rep.d[0].n_total == al32(nq) && rep.d[0].n_base == al32(nq) && !rep.d[0].c[1].fires);
  CHECK(rep.d[1].n_total == al32(2 * d.inter / d.tp) && rep.d[3].n_total == al32(d.experts));
  CHECK(layer_node(g, 0, "self_attn")->src[PZ_GQA_OPROJ_PREZERO] == -1);
  pz_prezero_report_free(&rep);
  pz_graph_free(g);

  /* everything fires with the gate free at m = 1: [qkv | o_proj], the static rewrite */
  r.mask = F_ALL;
  plan_run(off, &r, 1, &dev, &g, &rep);
  CHECK(rep.d[0].n_base == al32(nq) && rep.d[0].n_total == al32(nq) + al32(H) && rep.d[0].c[1].col == al32(nq));
  pz_graph *st_g = NULL;
  CHECK_OK(pz_graph_clone(off, &st_g));
  CHECK_OK(pz_pass_prezero(st_g, NULL, NULL));
  CHECK(same_graph(g, st_g));
  pz_graph_free(st_g);
  pz_prezero_report_free(&rep);
  pz_graph_free(g);

  /* gate forced off: the o_proj slot is left out, with the reason; the plan view shows it */
  pz_device_desc dev_off = dev;
  dev_off.force_gate = 2; /* PREZERO_FORCE_GATE=off */
  plan_run(off, &r, 4, &dev_off, &g, &rep);
  CHECK(!rep.d[0].c[1].fires && strstr(rep.d[0].c[1].why, "gate") != NULL && rep.d[0].n_total == rep.d[0].n_base);
  CHECK(layer_node(g, 1, "self_attn")->src[PZ_GQA_OPROJ_PREZERO] == -1);
  char *txt = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&txt, &len);
  CHECK_OK(pz_prezero_report_print(&rep, off, d.tp, &dev_off, f));
  fclose(f);
  char want[160];
  snprintf(want, sizeof want, "n/f   o_proj %-32s n=%-6lld k=%-6lld cols -", "layers.0.self_attn", (long long)H,
           (long long)r.k_oproj);
  CHECK(txt && strstr(txt, want) && strstr(txt, "fires gemm   layers.1.mlp.gate ") && strstr(txt, "total at m=4: 4 of 6"));
  if (!txt || !strstr(txt, want)) fprintf(stderr, "plan view lacks '%s':\n%s", want, txt ? txt : "");
  free(txt);
  pz_prezero_report_free(&rep);
  pz_graph_free(g);
  pz_graph_free(off);
}

/* ---- the builder's graphs of every GQA preset ---------------------------------------------- */

/* Whether TP t is legal for config c by the layout's rules (common to the GQA layouts): t divides
 * num_attention_heads, intermediate_size, moe_intermediate_size and vocab_size, and either
 * divides num_key_value_heads or is a multiple of it (kv heads replicated). */
static bool tp_legal(const pz_model_config *c, int t) {
  if (c->num_attention_heads % t || c->intermediate_size % t || c->moe_intermediate_size % t || c->vocab_size % t)
    return false;
  return c->num_key_value_heads % t == 0 || t % c->num_key_value_heads == 0;
}

/* Builds `preset` at tp (first `layers` layers, batch m): an illegal TP must be refused by the
 * builder; a legal one gives, with the passes off, the builder's graph byte for byte and, with
 * them on, the rewrite check_layers expects from the config's numbers (verify() included). */
static void check_preset(const char *preset, int tp, int layers, int64_t m) {
  pz_model_config c;
  CHECK_OK(pz_config_load(preset, &c));
  CHECK(c.attn == PZ_ATTN_GQA);
  pz_build_opts bo = PZ_BUILD_OPTS_INIT;
  bo.tp = tp;
  bo.m = m;
  bo.layers = layers;
  bo.max_ctx = 64;
  pz_graph *g = NULL, *off = NULL;
  pz_status st = pz_build_decode_graph(&c, &bo, &g);
  if (!tp_legal(&c, tp)) {
    CHECK(st == PZ_ERR_INVALID_ARG && g == NULL);
    if (st != PZ_ERR_INVALID_ARG) fprintf(stderr, "%s tp=%d: an illegal TP was not refused\n", preset, tp);
    pz_graph_free(g);
    return;
  }
  CHECK_OK(st);
  if (!g) return;
  CHECK_OK(pz_graph_verify(g));
  CHECK_OK(pz_graph_clone(g, &off));
  size_t l0, l1;
  char *d0 = dump(g, &l0);
  pz_pass_opts o = PZ_PASS_OPTS_INIT;
  o.prezero = 0;
  pz_pass_stats ps[PZ_MAX_PASSES];
  int ns = 0;
  CHECK_OK(pz_run_passes(off, &o, ps, &ns));
  char *d1 = dump(off, &l1);
  CHECK(l0 == l1 && memcmp(d0, d1, l0) == 0);
  free(d0);
  free(d1);
  pz_graph_free(off);
  o.prezero = 1;
  CHECK_OK(pz_run_passes(g, &o, ps, &ns)); /* verify() before and after */
  CHECK(ns >= 1 && ps[0].ran);
  const int64_t heads = c.num_attention_heads / tp;
  const int64_t kvh = c.num_key_value_heads >= tp ? c.num_key_value_heads / tp : 1;
  bool moe[256];
  for (int L = 0; L < layers; L++) moe[L] = pz_config_layer_is_moe(&c, L);
  int donors = 0, rewritten = 0;
  check_layers(g, m, c.hidden_size, heads, kvh, c.head_dim, 2 * c.intermediate_size / tp, c.n_routed_experts, layers,
               moe, &donors, &rewritten);
  CHECK(ps[0].matched == donors && ps[0].rewritten == rewritten);
  if (ps[0].matched != donors || ps[0].rewritten != rewritten)
    fprintf(stderr, "%s tp=%d: matched %d (want %d), rewritten %d (want %d)\n", preset, tp, ps[0].matched, donors,
            ps[0].rewritten, rewritten);
  for (int L = 0; L < layers; L++) { /* qkv bias (Qwen2) and q/k norm (Qwen3) as the config says */
    const pz_node *Q = layer_node(g, L, "self_attn.qkv_proj"), *A = layer_node(g, L, "self_attn");
    if (!Q || !A) continue;
    CHECK((Q->src[2] >= 0) == c.attention_bias && (A->src[PZ_GQA_Q_NORM_W] >= 0) == c.qk_norm);
  }
  CHECK(find_node(g, "norm")->op == PZ_OP_AR_RMSNORM);
  pz_graph_free(g);
}

static void test_presets(void) {
  static const char *const presets[] = {"tiny_llama", "tiny_qwen3_moe", "llama3_1_8b", "llama3_1_70b", "qwen2_5_72b",
                                        "qwen3_32b", "qwen3_30b_a3b", "qwen3_235b_a22b", "mixtral_8x7b"};
  int built = 0, refused = 0;
  for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++) {
    pz_model_config c;
    CHECK_OK(pz_config_load(presets[i], &c));
    int layers = c.num_hidden_layers < 3 ? (int)c.num_hidden_layers : 3;
    for (int tp = 1; tp <= 8; tp *= 2) {
      check_preset(presets[i], tp, layers, tp == 4 ? 128 : 4);
      if (tp_legal(&c, tp)) built++;
      else refused++;
    }
  }
  CHECK(built > 0 && refused > 0); /* both sides of the TP rule were exercised */
  printf("GQA presets: %d (preset, TP) pairs rewritten and checked, %d refused by the builder\n", built, refused);
}

int main(void) {
  test_describe();
  /* Llama-3.1-8B-like at TP 2 (widths multiples of 32): qkv (16+2*4)*128 = 3072. */
  test_hand(&(gdims){.m = 8, .hidden = 4096, .heads = 32, .kv_heads = 8, .head_dim = 128, .inter = 14336,
                     .vocab = 1024, .layers = 2, .moe_from = 2, .tp = 2});
  /* Odd widths: qkv (3+2*1)*24 = 120 -> slot at 128, H = 72 -> n_total 128 + 96; gate_up 2*40 = 80
   * -> 96; Qwen2-style bias and Qwen3-style q/k norm. */
  test_hand(&(gdims){.m = 4, .hidden = 72, .heads = 6, .kv_heads = 2, .head_dim = 24, .inter = 80, .experts = 6,
                     .vocab = 64, .layers = 3, .moe_from = 2, .tp = 2, .bias = true, .qk_norm = true});
  /* kv heads replicated: TP 8 over 4 kv heads gives 1 kv head per rank; all layers MoE. */
  test_hand(&(gdims){.m = 16, .hidden = 256, .heads = 16, .kv_heads = 4, .head_dim = 32, .inter = 128, .experts = 10,
                     .vocab = 128, .layers = 2, .moe_from = 0, .tp = 8, .qk_norm = true});
  test_legality();
  test_verify_rewrites();
  test_batch();
  test_presets();
  TEST_DONE();
}
