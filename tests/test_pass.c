/* The prezero pass on hand-built graphs: rewrite structure (Kimi-K2 TP=4 shapes, dense
 * layers, no q LoRA, Llama-style q/k/v), the legality check refusing unsafe consumers,
 * byte-identical dumps when nothing matches, and the pass manager (switches, dumps, stats). */
#define _GNU_SOURCE 1 /* open_memstream, setenv, mkdtemp */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "core/options.h"
#include "passes/passes.h"
#include "passes/prezero.h"
#include "pz_test.h"

typedef struct {
  int64_t m, H, q_lora, kv_lora, nope, rope, v, experts, inter, vocab;
  int heads, layers, first_dense, tp;
} dims;

static int tensor(pz_graph *g, const char *name, pz_dtype dt, pz_tensor_kind k, int nd, int64_t a,
                  int64_t b, int64_t c) {
  int id = -1;
  int64_t ne[3] = {a, b, c};
  CHECK_OK(pz_graph_add_tensor(g, name, dt, k, nd, ne, &id));
  if (k == PZ_T_ACT || k == PZ_T_STATE || k == PZ_T_INPUT) g->tensors[id].batched = true;
  return id;
}

static int node(pz_graph *g, pz_op op, const char *name, int layer, pz_role role, const int *src,
                int ns, const int *dst, int nd, const pz_op_params *p) {
  int id = -1;
  CHECK_OK(pz_graph_add_node(g, op, name, layer, role, src, ns, dst, nd, p, &id));
  return id;
}

/* A DeepSeek-V2-family decode graph built by hand (the layout of docs/ARCHITECTURE.md §2). */
static pz_graph *build(const dims *d) {
  pz_graph_info info = {.tp = d->tp, .m = d->m, .n_layers = d->layers, .hidden = d->H,
                        .vocab_size = d->vocab, .rms_eps = 1e-6f};
  snprintf(info.model_name, sizeof info.model_name, "hand");
  pz_graph *g = NULL;
  CHECK_OK(pz_graph_create(&info, &g));
  char nm[PZ_NAME_LEN];
  int64_t m = d->m, H = d->H, qh = d->nope + d->rope, kvw = d->kv_lora + d->rope;
  int ids = tensor(g, "input_ids", PZ_I32, PZ_T_INPUT, 1, m, 0, 0);
  int pos = tensor(g, "positions", PZ_I32, PZ_T_INPUT, 1, m, 0, 0);
  g->in_tokens = ids;
  g->in_pos = pos;
  int res = tensor(g, "residual", PZ_F32, PZ_T_STATE, 2, m, H, 0);
  int emb_w = tensor(g, "embed_tokens.weight", PZ_BF16, PZ_T_WEIGHT, 2, d->vocab / d->tp, H, 0);
  int part = tensor(g, "embed_tokens.out", PZ_F32, PZ_T_ACT, 2, m, H, 0);
  pz_op_params vp = {.vocab = {.vocab_size = d->vocab, .vocab_per_rank = d->vocab / d->tp}};
  node(g, PZ_OP_EMBEDDING, "embed_tokens", -1, PZ_ROLE_EMBED, (int[]){ids, emb_w}, 2, (int[]){part}, 1, &vp);
  for (int L = 0; L < d->layers; L++) {
#define NM(fmt) (snprintf(nm, sizeof nm, "layers.%d." fmt, L), nm)
    pz_op_params np = {.norm = {.eps = 1e-6f, .has_residual = L > 0, .fill_buf = -1}};
    int w_in = tensor(g, NM("input_layernorm.weight"), PZ_BF16, PZ_T_WEIGHT, 1, H, 0, 0);
    int xn = tensor(g, NM("input_layernorm.out"), PZ_BF16, PZ_T_ACT, 2, m, H, 0);
    node(g, PZ_OP_AR_RMSNORM, NM("input_layernorm"), L, PZ_ROLE_INPUT_LAYERNORM,
         (int[]){part, w_in, L > 0 ? res : -1}, 3, (int[]){xn, res}, 2, &np);
    pz_op_params gp = {.gemm = {.zero_init = true, .split_k = 0, .prezero_buf = -1}};
    int src[PZ_MLA_NSRC];
    for (int s = 0; s < PZ_MLA_NSRC; s++) src[s] = -1;
    if (d->q_lora) {
      int w = tensor(g, NM("self_attn.qkv_a.weight"), PZ_BF16, PZ_T_WEIGHT, 2, d->q_lora + kvw, H, 0);
      int o = tensor(g, NM("self_attn.qkv_a.out"), PZ_F32, PZ_T_ACT, 2, m, d->q_lora + kvw, 0);
      node(g, PZ_OP_GEMM, NM("self_attn.qkv_a"), L, PZ_ROLE_QKV_A, (int[]){xn, w, -1}, 3, (int[]){o}, 1, &gp);
      src[PZ_MLA_QKV_A] = o;
      src[PZ_MLA_QA_NORM_W] = tensor(g, NM("self_attn.q_a_layernorm.weight"), PZ_BF16, PZ_T_WEIGHT, 1, d->q_lora, 0, 0);
      src[PZ_MLA_QB_W] = tensor(g, NM("self_attn.q_b_proj.weight"), PZ_BF16, PZ_T_WEIGHT, 2, d->heads * qh, d->q_lora, 0);
    } else {
      int wq = tensor(g, NM("self_attn.q_proj.weight"), PZ_BF16, PZ_T_WEIGHT, 2, d->heads * qh, H, 0);
      int oq = tensor(g, NM("self_attn.q_proj.out"), PZ_F32, PZ_T_ACT, 2, m, d->heads * qh, 0);
      node(g, PZ_OP_GEMM, NM("self_attn.q_proj"), L, PZ_ROLE_Q_PROJ, (int[]){xn, wq, -1}, 3, (int[]){oq}, 1, &gp);
      int wk = tensor(g, NM("self_attn.kv_a_proj_with_mqa.weight"), PZ_BF16, PZ_T_WEIGHT, 2, kvw, H, 0);
      int ok = tensor(g, NM("self_attn.kv_a_proj_with_mqa.out"), PZ_F32, PZ_T_ACT, 2, m, kvw, 0);
      node(g, PZ_OP_GEMM, NM("self_attn.kv_a_proj_with_mqa"), L, PZ_ROLE_KV_A, (int[]){xn, wk, -1}, 3, (int[]){ok}, 1, &gp);
      src[PZ_MLA_Q] = oq;
      src[PZ_MLA_KV_A] = ok;
    }
    src[PZ_MLA_KVA_NORM_W] = tensor(g, NM("self_attn.kv_a_layernorm.weight"), PZ_BF16, PZ_T_WEIGHT, 1, d->kv_lora, 0, 0);
    src[PZ_MLA_W_UK] = tensor(g, NM("self_attn.w_uk"), PZ_BF16, PZ_T_WEIGHT, 3, d->heads, d->nope, d->kv_lora);
    src[PZ_MLA_W_UV] = tensor(g, NM("self_attn.w_uv"), PZ_BF16, PZ_T_WEIGHT, 3, d->heads, d->v, d->kv_lora);
    src[PZ_MLA_O_W] = tensor(g, NM("self_attn.o_proj.weight"), PZ_BF16, PZ_T_WEIGHT, 2, H, d->heads * d->v, 0);
    src[PZ_MLA_KV_CACHE] = tensor(g, NM("self_attn.kv_cache"), PZ_BF16, PZ_T_STATE, 3, m, 16, kvw);
    src[PZ_MLA_POS] = pos;
    int attn = tensor(g, NM("self_attn.out"), PZ_F32, PZ_T_ACT, 2, m, H, 0);
    pz_op_params ap = {.mla = {.n_heads = d->heads, .hidden = H, .q_lora_rank = d->q_lora,
                               .kv_lora_rank = d->kv_lora, .qk_nope_head_dim = d->nope,
                               .qk_rope_head_dim = d->rope, .v_head_dim = d->v, .max_ctx = 16,
                               .eps = 1e-6f, .softmax_scale = 0.1f}};
    node(g, PZ_OP_MLA_ATTN, NM("self_attn"), L, PZ_ROLE_ATTN, src, PZ_MLA_NSRC, (int[]){attn}, 1, &ap);
    np.norm.has_residual = true;
    int w_post = tensor(g, NM("post_attention_layernorm.weight"), PZ_BF16, PZ_T_WEIGHT, 1, H, 0, 0);
    int xn2 = tensor(g, NM("post_attention_layernorm.out"), PZ_BF16, PZ_T_ACT, 2, m, H, 0);
    node(g, PZ_OP_AR_RMSNORM, NM("post_attention_layernorm"), L, PZ_ROLE_POST_ATTN_LAYERNORM,
         (int[]){attn, w_post, res}, 3, (int[]){xn2, res}, 2, &np);
    part = tensor(g, NM("mlp.out"), PZ_F32, PZ_T_ACT, 2, m, H, 0);
    if (L < d->first_dense) {
      int wg = tensor(g, NM("mlp.gate_proj.weight"), PZ_BF16, PZ_T_WEIGHT, 2, d->inter, H, 0);
      int wu = tensor(g, NM("mlp.up_proj.weight"), PZ_BF16, PZ_T_WEIGHT, 2, d->inter, H, 0);
      int wd = tensor(g, NM("mlp.down_proj.weight"), PZ_BF16, PZ_T_WEIGHT, 2, H, d->inter, 0);
      pz_op_params mp = {.mlp = {.inter = d->inter}};
      node(g, PZ_OP_DENSE_MLP, NM("mlp"), L, PZ_ROLE_DENSE_MLP, (int[]){xn2, wg, wu, wd}, 4, (int[]){part}, 1, &mp);
    } else {
      int wr = tensor(g, NM("mlp.gate.weight"), PZ_BF16, PZ_T_WEIGHT, 2, d->experts, H, 0);
      int lg = tensor(g, NM("mlp.gate.out"), PZ_F32, PZ_T_ACT, 2, m, d->experts, 0);
      node(g, PZ_OP_GEMM, NM("mlp.gate"), L, PZ_ROLE_ROUTER_GATE, (int[]){xn2, wr, -1}, 3, (int[]){lg}, 1, &gp);
      int msrc[PZ_MOE_NSRC] = {xn2, lg, -1,
                               tensor(g, NM("mlp.experts.gate_proj"), PZ_BF16, PZ_T_WEIGHT, 3, d->experts, d->inter, H),
                               tensor(g, NM("mlp.experts.up_proj"), PZ_BF16, PZ_T_WEIGHT, 3, d->experts, d->inter, H),
                               tensor(g, NM("mlp.experts.down_proj"), PZ_BF16, PZ_T_WEIGHT, 3, d->experts, H, d->inter),
                               -1, -1, -1};
      pz_op_params mp = {.moe = {.n_experts = (int)d->experts, .top_k = 2, .n_group = 1, .topk_group = 1,
                                 .routed_scaling_factor = 1.f, .inter = d->inter}};
      node(g, PZ_OP_MOE, NM("mlp"), L, PZ_ROLE_MOE, msrc, PZ_MOE_NSRC, (int[]){part}, 1, &mp);
    }
#undef NM
  }
  pz_op_params np = {.norm = {.eps = 1e-6f, .has_residual = true, .fill_buf = -1}};
  int wf = tensor(g, "norm.weight", PZ_BF16, PZ_T_WEIGHT, 1, H, 0, 0);
  int xf = tensor(g, "norm.out", PZ_BF16, PZ_T_ACT, 2, m, H, 0);
  node(g, PZ_OP_AR_RMSNORM, "norm", -1, PZ_ROLE_FINAL_NORM, (int[]){part, wf, res}, 3, (int[]){xf, res}, 2, &np);
  int wl = tensor(g, "lm_head.weight", PZ_BF16, PZ_T_WEIGHT, 2, d->vocab / d->tp, H, 0);
  int lo = tensor(g, "lm_head.out", PZ_F32, PZ_T_ACT, 2, m, d->vocab / d->tp, 0);
  pz_op_params lp = {.gemm = {.zero_init = true, .prezero_buf = -1}};
  node(g, PZ_OP_LM_HEAD, "lm_head", -1, PZ_ROLE_LM_HEAD, (int[]){xf, wl, -1}, 3, (int[]){lo}, 1, &lp);
  int tok = tensor(g, "argmax.out", PZ_I32, PZ_T_ACT, 1, m, 0, 0);
  node(g, PZ_OP_ARGMAX, "argmax", -1, PZ_ROLE_ARGMAX, (int[]){lo}, 1, (int[]){tok}, 1, &vp);
  g->out_logits = lo;
  g->out_tokens = tok;
  CHECK_OK(pz_graph_verify(g));
  return g;
}

static int find_node(const pz_graph *g, const char *name) {
  for (int i = 0; i < g->n_nodes; i++)
    if (strcmp(g->nodes[i].name, name) == 0) return i;
  return -1;
}

static char *dump(const pz_graph *g, size_t *len) {
  char *buf = NULL;
  FILE *f = open_memstream(&buf, len);
  CHECK_OK(pz_graph_dump_text(g, f));
  CHECK_OK(pz_graph_dump_dot(g, f));
  fclose(f);
  return buf;
}

/* Column range [c0, c0+w) of tensor t inside buffer `buf` (t must be a view of it). */
static void check_slice(const pz_graph *g, int t, int buf, int64_t c0, int64_t w) {
  const pz_tensor *x = &g->tensors[t], *b = &g->tensors[buf];
  CHECK(x->view_of == buf);
  CHECK(x->view_offset == c0);
  CHECK(x->ne[1] == w);
  CHECK(x->stride[0] == b->ne[1] && x->stride[1] == 1);
}

static int n_op(const pz_graph *g, pz_op op) {
  int k = 0;
  for (int i = 0; i < g->n_nodes; i++) k += g->nodes[i].op == op;
  return k;
}

/* Kimi-K2 at TP=4 (docs/ARCHITECTURE.md §2): qkv_a 7168->2112, q_b 1536->3072, o_proj 2048->7168,
 * gate 7168->384; layer 0 dense. */
static void test_kimi_tp4(void) {
  dims d = {.m = 128, .H = 7168, .q_lora = 1536, .kv_lora = 512, .nope = 128, .rope = 64, .v = 128,
            .experts = 384, .inter = 512, .vocab = 4096, .heads = 16, .layers = 3, .first_dense = 1, .tp = 4};
  pz_graph *g = build(&d);
  int nodes0 = g->n_nodes;
  pz_pass_stats st;
  CHECK_OK(pz_pass_prezero(g, NULL, &st));
  CHECK_OK(pz_graph_verify(g));
  CHECK(g->n_nodes == nodes0); /* a rewrite, never new nodes */
  CHECK(st.matched == 5);      /* 3 input_layernorm + 2 post_attention (MoE layers) */
  CHECK(st.rewritten == 5 + 3 + 2 + 3); /* donors + qkv_a + gates + MLA nodes */
  CHECK(n_op(g, PZ_OP_AR_RMSNORM_MAYBE_PREZERO) == 5);
  CHECK(n_op(g, PZ_OP_MM_MAYBE_PREZERO) == 5);
  CHECK(n_op(g, PZ_OP_AR_RMSNORM) == 2); /* layer 0 post-attention (dense) and the final norm */
  for (int L = 0; L < 3; L++) {
    char nm[96];
    snprintf(nm, sizeof nm, "layers.%d.input_layernorm", L);
    const pz_node *D = &g->nodes[find_node(g, nm)];
    CHECK(D->op == PZ_OP_AR_RMSNORM_MAYBE_PREZERO);
    CHECK(D->p.norm.n_total == 2112 + 3072 + 7168);
    CHECK(D->p.norm.n_base == 2112 + 3072);
    int buf = D->p.norm.fill_buf;
    CHECK(g->tensors[buf].kind == PZ_T_BUFFER && g->tensors[buf].ne[0] == 128 && g->tensors[buf].ne[1] == 12352);
    snprintf(nm, sizeof nm, "layers.%d.input_layernorm.prezero_buf", L);
    CHECK(strcmp(g->tensors[buf].name, nm) == 0);
    snprintf(nm, sizeof nm, "layers.%d.self_attn.qkv_a", L);
    const pz_node *Q = &g->nodes[find_node(g, nm)];
    CHECK(Q->op == PZ_OP_MM_MAYBE_PREZERO);
    CHECK(Q->p.gemm.prezero_buf == buf && Q->p.gemm.col_offset == 0 && Q->p.gemm.n_base == 5184);
    check_slice(g, Q->dst[0], buf, 0, 2112);
    snprintf(nm, sizeof nm, "layers.%d.self_attn", L);
    const pz_node *A = &g->nodes[find_node(g, nm)];
    CHECK(A->op == PZ_OP_MLA_ATTN);
    check_slice(g, A->src[PZ_MLA_QB_PREZERO], buf, 2112, 3072);
    check_slice(g, A->src[PZ_MLA_OPROJ_PREZERO], buf, 5184, 7168);
    check_slice(g, A->dst[0], buf, 5184, 7168); /* the partial is the o_proj slot: no copy */
    CHECK(A->p.mla.prezero_n_total == 12352 && A->p.mla.prezero_n_base == 5184);
    CHECK(A->p.mla.qb_col_offset == 2112 && A->p.mla.oproj_col_offset == 5184);
    snprintf(nm, sizeof nm, "layers.%d.post_attention_layernorm", L);
    const pz_node *P = &g->nodes[find_node(g, nm)];
    CHECK(P->src[0] == A->dst[0]); /* its reader keeps the same tensor */
    snprintf(nm, sizeof nm, "layers.%d.mlp.gate", L);
    int gi = find_node(g, nm);
    if (L == 0) {
      CHECK(P->op == PZ_OP_AR_RMSNORM && P->p.norm.fill_buf == -1);
      CHECK(gi < 0);
    } else {
      CHECK(P->op == PZ_OP_AR_RMSNORM_MAYBE_PREZERO);
      CHECK(P->p.norm.n_total == 384 && P->p.norm.n_base == 384);
      const pz_node *G = &g->nodes[gi];
      CHECK(G->op == PZ_OP_MM_MAYBE_PREZERO && G->p.gemm.prezero_buf == P->p.norm.fill_buf);
      CHECK(G->p.gemm.col_offset == 0 && G->p.gemm.n_base == 384);
      check_slice(g, G->dst[0], P->p.norm.fill_buf, 0, 384);
      CHECK(P->p.norm.fill_buf != buf);
    }
  }
  CHECK(g->nodes[find_node(g, "norm")].op == PZ_OP_AR_RMSNORM);
  CHECK(g->nodes[find_node(g, "lm_head")].op == PZ_OP_LM_HEAD);
  /* A second run finds nothing left to rewrite. */
  size_t l1, l2;
  char *a = dump(g, &l1);
  CHECK_OK(pz_pass_prezero(g, NULL, &st));
  CHECK(st.matched == 0 && st.rewritten == 0);
  char *b = dump(g, &l2);
  CHECK(l1 == l2 && memcmp(a, b, l1) == 0);
  free(a);
  free(b);
  pz_graph_free(g);
}

/* No q LoRA (V2-Lite layout): q_proj and kv_a both consume input_layernorm's x_norm. They get
 * slices of one buffer, the q_b slot does not exist, o_proj still gets its slot. */
static void test_no_q_lora(void) {
  dims d = {.m = 8, .H = 2048, .q_lora = 0, .kv_lora = 512, .nope = 128, .rope = 64, .v = 128,
            .experts = 64, .inter = 128, .vocab = 1024, .heads = 8, .layers = 2, .first_dense = 1, .tp = 2};
  pz_graph *g = build(&d);
  pz_pass_stats st;
  CHECK_OK(pz_pass_prezero(g, NULL, &st));
  CHECK_OK(pz_graph_verify(g));
  CHECK(st.matched == 3);
  for (int L = 0; L < 2; L++) {
    char nm[96];
    snprintf(nm, sizeof nm, "layers.%d.input_layernorm", L);
    const pz_node *D = &g->nodes[find_node(g, nm)];
    int buf = D->p.norm.fill_buf;
    CHECK(D->op == PZ_OP_AR_RMSNORM_MAYBE_PREZERO);
    CHECK(D->p.norm.n_base == 8 * 192 + 576 && D->p.norm.n_total == 8 * 192 + 576 + 2048);
    snprintf(nm, sizeof nm, "layers.%d.self_attn.q_proj", L);
    const pz_node *q = &g->nodes[find_node(g, nm)];
    snprintf(nm, sizeof nm, "layers.%d.self_attn.kv_a_proj_with_mqa", L);
    const pz_node *kv = &g->nodes[find_node(g, nm)];
    CHECK(q->op == PZ_OP_MM_MAYBE_PREZERO && kv->op == PZ_OP_MM_MAYBE_PREZERO);
    check_slice(g, q->dst[0], buf, 0, 1536);
    check_slice(g, kv->dst[0], buf, 1536, 576);
    CHECK(kv->p.gemm.col_offset == 1536);
    snprintf(nm, sizeof nm, "layers.%d.self_attn", L);
    const pz_node *A = &g->nodes[find_node(g, nm)];
    CHECK(A->src[PZ_MLA_QB_PREZERO] == -1);
    check_slice(g, A->src[PZ_MLA_OPROJ_PREZERO], buf, 2112, 2048);
    CHECK(A->p.mla.prezero_n_base == 2112 && A->p.mla.prezero_n_total == 4160);
  }
  pz_graph_free(g);

  /* With the attention slots switched off only the graph GEMMs are rewritten. */
  g = build(&d);
  pz_prezero_batch no_slots = {.m = 0, .attn_slots = 0}; /* PREZERO_ATTN_SLOTS=0 */
  CHECK_OK(pz_pass_prezero_batch(g, &no_slots, NULL, &st, NULL));
  CHECK_OK(pz_graph_verify(g));
  const pz_node *A = &g->nodes[find_node(g, "layers.1.self_attn")];
  CHECK(A->src[PZ_MLA_OPROJ_PREZERO] == -1 && A->p.mla.prezero_n_total == 0);
  CHECK(g->tensors[A->dst[0]].view_of == -1);
  const pz_node *D = &g->nodes[find_node(g, "layers.1.input_layernorm")];
  CHECK(D->p.norm.n_base == 2112 && D->p.norm.n_total == 2112);
  pz_graph_free(g);
}

/* Llama/Qwen-style: one donor feeding separate q, k, v GEMMs read by plain ops. No MLA and no
 * model-specific code: the pass finds them by dataflow. */
static void test_llama_style(const int64_t widths[3], const int64_t want_col[3], int64_t want_total) {
  pz_graph_info info = {.tp = 2, .m = 4, .n_layers = 1, .hidden = 256};
  pz_graph *g;
  CHECK_OK(pz_graph_create(&info, &g));
  int part = tensor(g, "partial", PZ_F32, PZ_T_STATE, 2, 4, 256, 0);
  int res = tensor(g, "residual", PZ_F32, PZ_T_STATE, 2, 4, 256, 0);
  int w = tensor(g, "ln.weight", PZ_BF16, PZ_T_WEIGHT, 1, 256, 0, 0);
  int xn = tensor(g, "ln.out", PZ_BF16, PZ_T_ACT, 2, 4, 256, 0);
  pz_op_params np = {.norm = {.eps = 1e-6f, .has_residual = true, .fill_buf = -1}};
  node(g, PZ_OP_AR_RMSNORM, "layers.0.input_layernorm", 0, PZ_ROLE_INPUT_LAYERNORM, (int[]){part, w, res}, 3, (int[]){xn, res}, 2, &np);
  const char *names[3] = {"q_proj", "k_proj", "v_proj"};
  int outs[3];
  pz_op_params gp = {.gemm = {.zero_init = true, .prezero_buf = -1}};
  for (int i = 0; i < 3; i++) {
    char nm[64];
    snprintf(nm, sizeof nm, "layers.0.self_attn.%s.weight", names[i]);
    int W = tensor(g, nm, PZ_BF16, PZ_T_WEIGHT, 2, widths[i], 256, 0);
    snprintf(nm, sizeof nm, "layers.0.self_attn.%s.out", names[i]);
    outs[i] = tensor(g, nm, PZ_F32, PZ_T_ACT, 2, 4, widths[i], 0);
    snprintf(nm, sizeof nm, "layers.0.self_attn.%s", names[i]);
    node(g, PZ_OP_GEMM, nm, 0, PZ_ROLE_NONE, (int[]){xn, W, -1}, 3, (int[]){outs[i]}, 1, &gp);
  }
  for (int i = 0; i < 3; i++) {
    char nm[64];
    snprintf(nm, sizeof nm, "norm%d.weight", i);
    int nw = tensor(g, nm, PZ_BF16, PZ_T_WEIGHT, 1, widths[i], 0, 0);
    snprintf(nm, sizeof nm, "norm%d.out", i);
    int y = tensor(g, nm, PZ_BF16, PZ_T_ACT, 2, 4, widths[i], 0);
    snprintf(nm, sizeof nm, "norm%d", i);
    node(g, PZ_OP_RMSNORM, nm, 0, PZ_ROLE_NONE, (int[]){outs[i], nw}, 2, (int[]){y}, 1, &np);
  }
  CHECK_OK(pz_graph_verify(g));
  pz_pass_stats st;
  CHECK_OK(pz_pass_prezero(g, NULL, &st));
  CHECK_OK(pz_graph_verify(g));
  CHECK(st.matched == 1 && st.rewritten == 4);
  const pz_node *D = &g->nodes[0];
  CHECK(D->p.norm.n_total == want_total && D->p.norm.n_base == want_total);
  for (int i = 0; i < 3; i++) check_slice(g, outs[i], D->p.norm.fill_buf, want_col[i], widths[i]);
  pz_graph_free(g);
}

/* Legality: each unsafe consumer is left alone, and then the whole graph is unchanged. */
static void test_legality(void) {
  for (int variant = 0; variant < 6; variant++) {
    pz_graph_info info = {.tp = 1, .m = 4, .n_layers = 1, .hidden = 128};
    pz_graph *g;
    CHECK_OK(pz_graph_create(&info, &g));
    int part = tensor(g, "partial", PZ_F32, PZ_T_STATE, 2, 4, 128, 0);
    int res = tensor(g, "residual", PZ_F32, PZ_T_STATE, 2, 4, 128, 0);
    int w = tensor(g, "ln.weight", PZ_BF16, PZ_T_WEIGHT, 1, 128, 0, 0);
    int xn = tensor(g, "ln.out", PZ_BF16, PZ_T_ACT, 2, 4, 128, 0);
    int W = tensor(g, "mm.weight", PZ_BF16, PZ_T_WEIGHT, 2, 64, 128, 0);
    int big = tensor(g, "big", PZ_F32, PZ_T_ACT, 2, 4, 128, 0);
    int C = variant == 3 ? -1 : tensor(g, "mm.out", PZ_F32, variant == 5 ? PZ_T_STATE : PZ_T_ACT, 2, 4, 64, 0);
    if (variant == 3) CHECK_OK(pz_graph_add_col_slice(g, "mm.out", big, 32, 64, &C)); /* already a view */
    pz_op_params np = {.norm = {.eps = 1e-6f, .has_residual = true, .fill_buf = -1}};
    node(g, PZ_OP_AR_RMSNORM, "donor", 0, PZ_ROLE_INPUT_LAYERNORM, (int[]){part, w, res}, 3, (int[]){xn, res}, 2, &np);
    pz_op_params gp = {.gemm = {.zero_init = variant != 1, .split_k = variant == 2 ? 1 : 0, .prezero_buf = -1}};
    if (variant == 0) { /* another node writes the output between the donor and the GEMM */
      int W2 = tensor(g, "other.weight", PZ_BF16, PZ_T_WEIGHT, 2, 64, 128, 0);
      node(g, PZ_OP_GEMM, "other", 0, PZ_ROLE_NONE, (int[]){xn, W2, -1}, 3, (int[]){C}, 1, &gp);
      pz_op_params acc = gp;
      acc.gemm.zero_init = false;
      node(g, PZ_OP_GEMM, "mm", 0, PZ_ROLE_NONE, (int[]){xn, W, -1}, 3, (int[]){C}, 1, &acc);
    } else if (variant == 4) { /* a view of the output is read elsewhere */
      int v;
      node(g, PZ_OP_GEMM, "mm", 0, PZ_ROLE_NONE, (int[]){xn, W, -1}, 3, (int[]){C}, 1, &gp);
      CHECK_OK(pz_graph_add_col_slice(g, "mm.out.part", C, 0, 32, &v));
      int nw = tensor(g, "n.weight", PZ_BF16, PZ_T_WEIGHT, 1, 32, 0, 0);
      int y = tensor(g, "n.out", PZ_BF16, PZ_T_ACT, 2, 4, 32, 0);
      node(g, PZ_OP_RMSNORM, "n", 0, PZ_ROLE_NONE, (int[]){v, nw}, 2, (int[]){y}, 1, &np);
    } else {
      node(g, PZ_OP_GEMM, "mm", 0, PZ_ROLE_NONE, (int[]){xn, W, -1}, 3, (int[]){C}, 1, &gp);
    }
    CHECK_OK(pz_graph_verify(g));
    size_t l1, l2;
    char *a = dump(g, &l1);
    int nt = g->n_tensors;
    pz_graph *copy = NULL;
    CHECK_OK(pz_graph_clone(g, &copy));
    pz_pass_stats st = {.matched = -1};
    CHECK_OK(pz_pass_prezero(g, NULL, &st));
    CHECK(st.matched == 0 && st.rewritten == 0);
    CHECK(g->n_tensors == nt && g->n_nodes == copy->n_nodes);
    /* Bit for bit: every tensor and node record is untouched. */
    CHECK(memcmp(g->tensors, copy->tensors, sizeof(pz_tensor) * (size_t)nt) == 0);
    CHECK(memcmp(g->nodes, copy->nodes, sizeof(pz_node) * (size_t)g->n_nodes) == 0);
    pz_graph_free(copy);
    char *b = dump(g, &l2);
    CHECK(l1 == l2 && memcmp(a, b, l1) == 0);
    if (l1 != l2 || memcmp(a, b, l1)) fprintf(stderr, "legality variant %d rewrote the graph\n", variant);
    free(a);
    free(b);
    pz_graph_free(g);
  }
}

/* Pass manager: flag, PREZERO_DISABLE_PASSES, dumps, stats, log; nothing-to-match graphs are
 * byte-identical after the passes. */
static void test_manager(void) {
  dims d = {.m = 4, .H = 256, .q_lora = 64, .kv_lora = 32, .nope = 16, .rope = 16, .v = 16,
            .experts = 8, .inter = 32, .vocab = 256, .heads = 2, .layers = 2, .first_dense = 1, .tp = 2};
  pz_pass_stats st[PZ_MAX_PASSES];
  int ns = -1;
  unsetenv("PREZERO_ENABLE");
  unsetenv("PREZERO_DISABLE_PASSES");
  unsetenv("PREZERO_DUMP_GRAPH");

  /* Off by default: graph untouched. */
  pz_graph *g = build(&d);
  size_t l1, l2;
  char *a = dump(g, &l1);
  pz_pass_opts o = PZ_PASS_OPTS_INIT;
  CHECK(pz_prezero_flag(&o) == 0);
  CHECK_OK(pz_run_passes(g, &o, st, &ns));
  CHECK(ns == 1 && !st[0].ran && strcmp(st[0].name, "prezero") == 0);
  char *b = dump(g, &l2);
  CHECK(l1 == l2 && memcmp(a, b, l1) == 0);
  free(b);

  /* The passes read no environment: PREZERO_ENABLE alone changes nothing here ... */
  setenv("PREZERO_ENABLE", "1", 1);
  CHECK(pz_prezero_flag(&o) == 0);
  /* ... the options reader turns it into the flag (pz_pass_opts_apply); disable = prezero
   * switches it off again. */
  {
    pz_runtime_opts ro;
    setenv("PREZERO_DISABLE_PASSES", "foo, prezero", 1);
    CHECK(pz_runtime_opts_from_env(&ro, NULL, 0) == 0);
    pz_pass_opts_apply(&o, &ro);
    CHECK(pz_prezero_flag(&o) == 1);
    CHECK(o.disable && pz_pass_disabled_in(o.disable, "prezero") && !pz_pass_disabled_in(o.disable, "prez") &&
          !pz_pass_disabled_in(o.disable, "foo2") && pz_pass_disabled_in("all", "prezero") &&
          !pz_pass_disabled_in(NULL, "prezero"));
    /* a name that is no pass is refused, naming it (not silently ignored) */
    CHECK_ST(pz_run_passes(g, &o, st, &ns), PZ_ERR_INVALID_ARG);
    CHECK(strstr(pz_last_error(), "'foo'") && strstr(pz_last_error(), "prezero"));
    o.disable = " prezero ,all";
    CHECK_OK(pz_run_passes(g, &o, st, &ns));
    CHECK(!st[0].ran);
    b = dump(g, &l2);
    CHECK(l1 == l2 && memcmp(a, b, l1) == 0);
    free(b);
    unsetenv("PREZERO_DISABLE_PASSES");
    o = (pz_pass_opts)PZ_PASS_OPTS_INIT;
    o.prezero = 0; /* an explicit flag wins over the environment */
    pz_pass_opts_apply(&o, &ro);
    CHECK(pz_prezero_flag(&o) == 0);
    o = (pz_pass_opts)PZ_PASS_OPTS_INIT; /* o must not keep pointers into ro */
  }
  unsetenv("PREZERO_ENABLE");

  /* On, with dumps and a log. */
  char dir[] = "/tmp/pz_test_pass_XXXXXX";
  CHECK(mkdtemp(dir) != NULL);
  char sub[128];
  snprintf(sub, sizeof sub, "%s/dumps", dir);
  char *logbuf = NULL;
  size_t loglen = 0;
  FILE *log = open_memstream(&logbuf, &loglen);
  o.prezero = 1;
  o.dump_dir = sub;
  o.log = log;
  CHECK_OK(pz_run_passes(g, &o, st, &ns));
  fclose(log);
  CHECK(ns == 1 && st[0].ran && st[0].matched == 3 && st[0].rewritten == 3 + 2 + 1 + 2);
  CHECK(strstr(logbuf, "pass prezero    matched=3 rewritten=8") != NULL);
  CHECK(strstr(logbuf, "layers.1.input_layernorm.prezero_buf") != NULL);
  char path[256];
  size_t n;
  snprintf(path, sizeof path, "%s/01-prezero.before.txt", sub);
  char *before = pz_test_slurp(path, &n);
  CHECK(before && n < l1 && strncmp(before, a, n) == 0 && strncmp(a + n, "digraph", 7) == 0); /* = old text dump */
  snprintf(path, sizeof path, "%s/01-prezero.after.txt", sub);
  char *after = pz_test_slurp(path, &n);
  CHECK(after && strstr(after, "ar_rmsnorm_maybe_prezero_") && strstr(after, "zero_fill(n_total=") &&
        strstr(after, "mm_maybe_prezero_"));
  snprintf(path, sizeof path, "%s/01-prezero.after.dot", sub);
  char *dot = pz_test_slurp(path, &n);
  CHECK(dot && strstr(dot, "digraph") && strstr(dot, "lightgreen"));
  snprintf(path, sizeof path, "%s/01-prezero.before.dot", sub);
  char *bdot = pz_test_slurp(path, &n);
  CHECK(bdot && !strstr(bdot, "lightgreen"));
  free(before); free(after); free(dot); free(bdot); free(logbuf);
  const char *files[] = {"before.txt", "before.dot", "after.txt", "after.dot"};
  for (int i = 0; i < 4; i++) {
    snprintf(path, sizeof path, "%s/01-prezero.%s", sub, files[i]);
    unlink(path);
  }
  rmdir(sub);
  rmdir(dir);
  free(a);
  pz_graph_free(g);

  /* PREZERO_DUMP_GRAPH through the options reader; an unwritable dump dir is an I/O error. */
  g = build(&d);
  char dir2[] = "/tmp/pz_test_pass_env_XXXXXX";
  CHECK(mkdtemp(dir2) != NULL);
  setenv("PREZERO_DUMP_GRAPH", dir2, 1);
  static pz_runtime_opts ro2;
  CHECK(pz_runtime_opts_from_env(&ro2, NULL, 0) == 0);
  o = (pz_pass_opts)PZ_PASS_OPTS_INIT;
  o.prezero = 1;
  pz_pass_opts_apply(&o, &ro2);
  CHECK_OK(pz_run_passes(g, &o, NULL, NULL));
  for (int i = 0; i < 4; i++) {
    snprintf(path, sizeof path, "%s/01-prezero.%s", dir2, files[i]);
    struct stat sb;
    CHECK(stat(path, &sb) == 0 && sb.st_size > 0);
    unlink(path);
  }
  rmdir(dir2);
  pz_graph_free(g);
  g = build(&d);
  o.dump_dir = "/proc/version/not_a_dir";
  CHECK_ST(pz_run_passes(g, &o, NULL, NULL), PZ_ERR_IO);
  unsetenv("PREZERO_DUMP_GRAPH");
  pz_graph_free(g);

  /* A pass that breaks the graph is caught by verify() and named. */
  g = build(&d);
  g->tensors[g->nodes[2].dst[0]].ne[1] += 1; /* qkv_a's C no longer matches W */
  o = (pz_pass_opts)PZ_PASS_OPTS_INIT;
  o.prezero = 1;
  CHECK_ST(pz_run_passes(g, &o, NULL, NULL), PZ_ERR_VERIFY);
  CHECK(strstr(pz_last_error(), "before the passes") != NULL);
  pz_graph_free(g);
}

/* verify() rejects broken rewrites: a GEMM accumulating into a buffer no donor filled, a slot
 * at the wrong column, an o_proj slot that is not the op's output. */
static void test_verify_rewrites(void) {
  dims d = {.m = 4, .H = 256, .q_lora = 64, .kv_lora = 32, .nope = 16, .rope = 16, .v = 16,
            .experts = 8, .inter = 32, .vocab = 256, .heads = 2, .layers = 2, .first_dense = 1, .tp = 2};
  for (int variant = 0; variant < 4; variant++) {
    pz_graph *g = build(&d);
    CHECK_OK(pz_pass_prezero(g, NULL, NULL));
    CHECK_OK(pz_graph_verify(g));
    pz_node *D = &g->nodes[find_node(g, "layers.1.input_layernorm")];
    pz_node *A = &g->nodes[find_node(g, "layers.1.self_attn")];
    pz_node *Q = &g->nodes[find_node(g, "layers.1.self_attn.qkv_a")];
    if (variant == 0) D->op = PZ_OP_AR_RMSNORM;             /* donor lost its fill */
    if (variant == 1) A->p.mla.qb_col_offset += 1;           /* slot offset disagrees with the view */
    if (variant == 2) A->src[PZ_MLA_OPROJ_PREZERO] = A->src[PZ_MLA_QB_PREZERO] >= 0 ? Q->dst[0] : -1;
    if (variant == 3) Q->p.gemm.col_offset = 4;              /* C is not at col_offset */
    CHECK_ST(pz_graph_verify(g), PZ_ERR_VERIFY);
    pz_graph_free(g);
  }
}

int main(void) {
  test_verify_rewrites();
  test_kimi_tp4();
  test_no_q_lora();
  /* Widths that are multiples of 32 pack densely; others start on the next 32-column line. */
  test_llama_style((int64_t[]){128, 64, 64}, (int64_t[]){0, 128, 192}, 256);
  test_llama_style((int64_t[]){100, 36, 60}, (int64_t[]){0, 128, 192}, 256);
  test_llama_style((int64_t[]){8, 8, 200}, (int64_t[]){0, 32, 64}, 288);
  test_legality();
  test_manager();
  TEST_DONE();
}
