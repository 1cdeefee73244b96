/* CPU executor on a hand-built one-layer graph (embedding, AR+RMSNorm, qkv_a, MLA, router,
 * MoE, dense MLP, lm_head, argmax): TP=1/2/4 agree, thread counts and poisoning are
 * bit-identical, weight sharding maps to the same full tensor, bad inputs are refused. */
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/ref_ops.h"
#include "passes/prezero.h"
#include <stdlib.h>
#include "core/options.h"
#include "pz_test.h"
#include <stddef.h>
#include <string.h>

enum { M = 3, H = 64, VOCAB = 96, HEADS = 4, QL = 32, KVL = 32, NOPE = 16, ROPE = 8, VD = 16,
       CTX = 16, E = 8, TOPK = 2, MI = 32, SI = 32, DI = 64 };

static int tensor(pz_graph *g, const char *name, pz_dtype dt, pz_tensor_kind k, int nd,
                  const int64_t *ne, int shard_dim, int tp, float scale, float offset) {
  int id;
  CHECK_OK(pz_graph_add_tensor(g, name, dt, k, nd, ne, &id));
  pz_tensor *t = &g->tensors[id];
  t->shard_dim = shard_dim;
  if (shard_dim >= 0) t->full_ne[shard_dim] = ne[shard_dim] * tp;
  t->init_scale = scale;
  t->init_offset = offset;
  t->batched = (k == PZ_T_ACT || k == PZ_T_INPUT);
  return id;
}
#define W2(name, a, b, sd, sc, off) tensor(g, name, PZ_BF16, PZ_T_WEIGHT, 2, (int64_t[]){a, b}, sd, tp, sc, off)
#define ACT(name, dt, b) tensor(g, name, dt, PZ_T_ACT, 2, (int64_t[]){M, b}, -1, tp, 0, 0)

static pz_graph *build(int tp) {
  pz_graph_info info = {.tp = tp, .m = M, .n_layers = 1, .hidden = H, .vocab_size = VOCAB, .rms_eps = 1e-6f};
  pz_graph *g;
  CHECK_OK(pz_graph_create(&info, &g));
  int hp = HEADS / tp, qh = NOPE + ROPE;
  int tok = tensor(g, "tokens", PZ_I32, PZ_T_INPUT, 1, (int64_t[]){M}, -1, tp, 0, 0);
  int pos = tensor(g, "pos", PZ_I32, PZ_T_INPUT, 1, (int64_t[]){M}, -1, tp, 0, 0);
  g->in_tokens = tok;
  g->in_pos = pos;
  int emb_w = W2("embed_tokens.weight", VOCAB / tp, H, 0, 1.0f, 0);
  int emb = ACT("embed", PZ_F32, H);
  int resid = tensor(g, "residual", PZ_F32, PZ_T_STATE, 2, (int64_t[]){M, H}, -1, tp, 0, 0);
  int ln0 = tensor(g, "layers.0.input_layernorm.weight", PZ_BF16, PZ_T_WEIGHT, 1, (int64_t[]){H}, -1, tp, 0.1f, 1.0f);
  int x0 = ACT("x0", PZ_BF16, H);
  int qkv_w = W2("layers.0.self_attn.qkv_a.weight", QL + KVL + ROPE, H, -1, 0.15f, 0);
  int qkv = ACT("qkv_a", PZ_F32, QL + KVL + ROPE);
  int qan = tensor(g, "q_a_layernorm.weight", PZ_BF16, PZ_T_WEIGHT, 1, (int64_t[]){QL}, -1, tp, 0.1f, 1.0f);
  int qb = W2("q_b_proj.weight", hp * qh, QL, 0, 0.2f, 0);
  int kvan = tensor(g, "kv_a_layernorm.weight", PZ_BF16, PZ_T_WEIGHT, 1, (int64_t[]){KVL}, -1, tp, 0.1f, 1.0f);
  int wuk = tensor(g, "w_uk", PZ_BF16, PZ_T_WEIGHT, 3, (int64_t[]){hp, NOPE, KVL}, 0, tp, 0.2f, 0);
  int wuv = tensor(g, "w_uv", PZ_BF16, PZ_T_WEIGHT, 3, (int64_t[]){hp, VD, KVL}, 0, tp, 0.2f, 0);
  int ow = W2("o_proj.weight", H, hp * VD, 1, 0.15f, 0);
  int cache = tensor(g, "layers.0.self_attn.kv_cache", PZ_BF16, PZ_T_STATE, 3, (int64_t[]){M, CTX, KVL + ROPE}, -1, tp, 1.0f, 0);
  g->tensors[cache].batched = true;
  int attn = ACT("attn_out", PZ_F32, H);
  int ln1 = tensor(g, "layers.0.post_attention_layernorm.weight", PZ_BF16, PZ_T_WEIGHT, 1, (int64_t[]){H}, -1, tp, 0.1f, 1.0f);
  int x1 = ACT("x1", PZ_BF16, H);
  int rw = W2("mlp.gate.weight", E, H, -1, 0.3f, 0);
  int rl = ACT("router_logits", PZ_F32, E);
  int rb = tensor(g, "e_score_correction_bias", PZ_F32, PZ_T_WEIGHT, 1, (int64_t[]){E}, -1, tp, 0.05f, 0);
  int eg = tensor(g, "experts.gate", PZ_BF16, PZ_T_WEIGHT, 3, (int64_t[]){E, MI / tp, H}, 1, tp, 0.2f, 0);
  int eu = tensor(g, "experts.up", PZ_BF16, PZ_T_WEIGHT, 3, (int64_t[]){E, MI / tp, H}, 1, tp, 0.2f, 0);
  int ed = tensor(g, "experts.down", PZ_BF16, PZ_T_WEIGHT, 3, (int64_t[]){E, H, MI / tp}, 2, tp, 0.2f, 0);
  int sg = W2("shared.gate", SI / tp, H, 0, 0.2f, 0);
  int su = W2("shared.up", SI / tp, H, 0, 0.2f, 0);
  int sd = W2("shared.down", H, SI / tp, 1, 0.2f, 0);
  int moe = ACT("moe_out", PZ_F32, H);
  int ln2 = tensor(g, "ln2.weight", PZ_BF16, PZ_T_WEIGHT, 1, (int64_t[]){H}, -1, tp, 0.1f, 1.0f);
  int x2 = ACT("x2", PZ_BF16, H);
  int dg = W2("dense.gate", DI / tp, H, 0, 0.2f, 0);
  int du = W2("dense.up", DI / tp, H, 0, 0.2f, 0);
  int dd = W2("dense.down", H, DI / tp, 1, 0.2f, 0);
  int mlp = ACT("mlp_out", PZ_F32, H);
  int lnf = tensor(g, "norm.weight", PZ_BF16, PZ_T_WEIGHT, 1, (int64_t[]){H}, -1, tp, 0.1f, 1.0f);
  int x3 = ACT("x3", PZ_BF16, H);
  int lm = W2("lm_head.weight", VOCAB / tp, H, 0, 0.3f, 0);
  int logits = ACT("logits", PZ_F32, VOCAB / tp);
  int next = tensor(g, "next_tokens", PZ_I32, PZ_T_ACT, 1, (int64_t[]){M}, -1, tp, 0, 0);
  g->out_logits = logits;
  g->out_tokens = next;

  pz_op_params vp = {.vocab = {.vocab_size = VOCAB, .vocab_per_rank = VOCAB / tp}};
  pz_op_params n0 = {.norm = {.eps = 1e-6f, .has_residual = false, .fill_buf = -1}};
  pz_op_params n1 = {.norm = {.eps = 1e-6f, .has_residual = true, .fill_buf = -1}};
  pz_op_params gp = {.gemm = {.zero_init = true, .split_k = 2}};
  CHECK_OK(pz_graph_add_node(g, PZ_OP_EMBEDDING, "embed_tokens", -1, PZ_ROLE_EMBED, (int[]){tok, emb_w}, 2, (int[]){emb}, 1, &vp, NULL));
  CHECK_OK(pz_graph_add_node(g, PZ_OP_AR_RMSNORM, "layers.0.input_layernorm", 0, PZ_ROLE_INPUT_LAYERNORM, (int[]){emb, ln0, -1}, 3, (int[]){x0, resid}, 2, &n0, NULL));
  CHECK_OK(pz_graph_add_node(g, PZ_OP_GEMM, "layers.0.self_attn.qkv_a", 0, PZ_ROLE_QKV_A, (int[]){x0, qkv_w, -1}, 3, (int[]){qkv}, 1, &gp, NULL));
  pz_op_params ap = {.mla = {.n_heads = hp, .hidden = H, .q_lora_rank = QL, .kv_lora_rank = KVL,
                             .qk_nope_head_dim = NOPE, .qk_rope_head_dim = ROPE, .v_head_dim = VD,
                             .max_ctx = CTX, .eps = 1e-6f,
                             .rope = {.theta = 10000.f, .factor = 40.f, .original_max_position_embeddings = 4096,
                                      .beta_fast = 32.f, .beta_slow = 1.f, .mscale = 1.f, .mscale_all_dim = 1.f}}};
  ap.mla.softmax_scale = pz_ref_mla_softmax_scale(NOPE, ROPE, &ap.mla.rope);
  int asrc[PZ_MLA_NSRC];
  for (int i = 0; i < PZ_MLA_NSRC; i++) asrc[i] = -1;
  asrc[PZ_MLA_QKV_A] = qkv; asrc[PZ_MLA_QA_NORM_W] = qan; asrc[PZ_MLA_QB_W] = qb; asrc[PZ_MLA_KVA_NORM_W] = kvan;
  asrc[PZ_MLA_W_UK] = wuk; asrc[PZ_MLA_W_UV] = wuv; asrc[PZ_MLA_O_W] = ow; asrc[PZ_MLA_KV_CACHE] = cache; asrc[PZ_MLA_POS] = pos;
  CHECK_OK(pz_graph_add_node(g, PZ_OP_MLA_ATTN, "layers.0.self_attn", 0, PZ_ROLE_ATTN, asrc, PZ_MLA_NSRC, (int[]){attn}, 1, &ap, NULL));
  CHECK_OK(pz_graph_add_node(g, PZ_OP_AR_RMSNORM, "layers.0.post_attention_layernorm", 0, PZ_ROLE_POST_ATTN_LAYERNORM, (int[]){attn, ln1, resid}, 3, (int[]){x1, resid}, 2, &n1, NULL));
  CHECK_OK(pz_graph_add_node(g, PZ_OP_GEMM, "layers.0.mlp.gate", 0, PZ_ROLE_ROUTER_GATE, (int[]){x1, rw, -1}, 3, (int[]){rl}, 1, &gp, NULL));
  pz_op_params mp = {.moe = {.n_experts = E, .top_k = TOPK, .n_group = 4, .topk_group = 2, .scoring = PZ_SCORE_SIGMOID,
                             .topk_method = PZ_TOPK_NOAUX_TC, .norm_topk_prob = true, .routed_scaling_factor = 2.5f,
                             .inter = MI / tp, .shared_inter = SI / tp}};
  CHECK_OK(pz_graph_add_node(g, PZ_OP_MOE, "layers.0.mlp", 0, PZ_ROLE_MOE, (int[]){x1, rl, rb, eg, eu, ed, sg, su, sd}, PZ_MOE_NSRC, (int[]){moe}, 1, &mp, NULL));
  CHECK_OK(pz_graph_add_node(g, PZ_OP_AR_RMSNORM, "ln2", 0, PZ_ROLE_NONE, (int[]){moe, ln2, resid}, 3, (int[]){x2, resid}, 2, &n1, NULL));
  pz_op_params dp = {.mlp = {.inter = DI / tp}};
  CHECK_OK(pz_graph_add_node(g, PZ_OP_DENSE_MLP, "dense_mlp", 0, PZ_ROLE_DENSE_MLP, (int[]){x2, dg, du, dd}, 4, (int[]){mlp}, 1, &dp, NULL));
  CHECK_OK(pz_graph_add_node(g, PZ_OP_AR_RMSNORM, "norm", -1, PZ_ROLE_FINAL_NORM, (int[]){mlp, lnf, resid}, 3, (int[]){x3, resid}, 2, &n1, NULL));
  CHECK_OK(pz_graph_add_node(g, PZ_OP_LM_HEAD, "lm_head", -1, PZ_ROLE_LM_HEAD, (int[]){x3, lm, -1}, 3, (int[]){logits}, 1, &vp, NULL));
  CHECK_OK(pz_graph_add_node(g, PZ_OP_ARGMAX, "argmax", -1, PZ_ROLE_ARGMAX, (int[]){logits}, 1, (int[]){next}, 1, &vp, NULL));
  CHECK_OK(pz_graph_verify(g));
  return g;
}

enum { STEPS = 4 };
typedef struct { float logits[STEPS][M * VOCAB]; int32_t tok[STEPS][M]; } run_out;

static void run_g(pz_graph *g, int threads, int poison, run_out *o);
static void run(int tp, int threads, int poison, run_out *o) {
  pz_graph *g = build(tp);
  run_g(g, threads, poison, o);
  pz_graph_free(g);
}
static void run_g(pz_graph *g, int threads, int poison, run_out *o) {
  pz_cpu_exec_opts opts = PZ_CPU_EXEC_OPTS_INIT;
  opts.threads = threads;
  opts.poison = poison;
  pz_cpu_exec *e = NULL;
  CHECK_OK(pz_cpu_exec_create(g, &opts, &e));
  if (!e) return;
  int32_t tok[M] = {5, 17, 90}, pos[M] = {3, 0, 7};
  for (int s = 0; s < STEPS; s++) {
    CHECK_OK(pz_cpu_exec_step(e, M, tok, pos, o->tok[s]));
    CHECK_OK(pz_cpu_exec_logits(e, M, o->logits[s]));
    for (int i = 0; i < M; i++) { tok[i] = o->tok[s][i]; pos[i]++; }
  }
  pz_cpu_exec_free(e);
}

static run_out r1, r1b, r1t2, r1p, r2, r4, ron, roff;

int main(void) {
  run(1, 1, 0, &r1);
  run(1, 1, 0, &r1b);
  run(1, 2, 0, &r1t2);
  run(1, 2, 1, &r1p);
  run(2, 2, 1, &r2);
  run(4, 2, 0, &r4);
  CHECK(memcmp(&r1, &r1b, sizeof r1) == 0);   /* two runs bit-identical */
  CHECK(memcmp(&r1, &r1t2, sizeof r1) == 0);  /* thread count does not matter */
  CHECK(memcmp(&r1, &r1p, sizeof r1) == 0);   /* poisoned scratch is never read */
  double maxabs = 0, d2 = 0, d4 = 0;
  for (int s = 0; s < STEPS; s++)
    for (int i = 0; i < M * VOCAB; i++) {
      double a = fabs(r1.logits[s][i]);
      CHECK(isfinite(r1.logits[s][i]));
      if (a > maxabs) maxabs = a;
      d2 = fmax(d2, fabs(r1.logits[s][i] - r2.logits[s][i]));
      d4 = fmax(d4, fabs(r1.logits[s][i] - r4.logits[s][i]));
    }
  printf("max |logit| %.4f, TP2 max diff %.3g, TP4 max diff %.3g\n", maxabs, d2, d4);
  CHECK(maxabs > 0.1);
  /* tolerance: a few bf16 ulps of the largest logit (TP changes fp32 summation order, which can
   * flip a bf16 rounding of x_norm) */
  CHECK(d2 <= 0.03 * maxabs);
  CHECK(d4 <= 0.03 * maxabs);
  CHECK(memcmp(r1.tok, r2.tok, sizeof r1.tok) == 0);
  CHECK(memcmp(r1.tok, r4.tok, sizeof r1.tok) == 0);
  /* tokens are the argmax of the gathered logits (lowest id on ties) */
  for (int s = 0; s < STEPS; s++)
    for (int i = 0; i < M; i++) {
      int best = 0;
      for (int v = 1; v < VOCAB; v++) if (r1.logits[s][i * VOCAB + v] > r1.logits[s][i * VOCAB + best]) best = v;
      CHECK(r1.tok[s][i] == best);
    }

  /* The prezero rewrite of this graph (qkv_a + router consumers, q_b / o_proj slots in the MLA
   * op) gives bit-identical results with the gate forced on and off (poisoned buffers). */
  for (int tp = 1; tp <= 2; tp++) {
    pz_graph *gp = build(tp);
    pz_pass_stats ps = {0};
    CHECK_OK(pz_pass_prezero(gp, NULL, &ps));
    CHECK(ps.matched == 2);
    int slots = 0;
    for (int i = 0; i < gp->n_nodes; i++)
      if (gp->nodes[i].op == PZ_OP_MLA_ATTN)
        slots = (gp->nodes[i].src[PZ_MLA_QB_PREZERO] >= 0) + (gp->nodes[i].src[PZ_MLA_OPROJ_PREZERO] >= 0);
    CHECK(slots == 2);
    CHECK_OK(pz_graph_verify(gp));
    setenv("PREZERO_FORCE_GATE", "on", 1);
    run_g(gp, 2, 1, &ron);
    setenv("PREZERO_FORCE_GATE", "off", 1);
    run_g(gp, 2, 1, &roff);
    unsetenv("PREZERO_FORCE_GATE");
    CHECK(memcmp(&ron, &roff, sizeof ron) == 0);
    CHECK(memcmp(&ron, tp == 1 ? &r1 : &r2, sizeof ron) == 0);
    pz_graph_free(gp);
  }

  /* weight sharding: rank 1 of TP=2 holds rows [48, 96) of the full embedding and columns
   * [8, 16) of the (row-parallel) o_proj; its KV cache equals TP=1's */
  pz_graph *g1 = build(1), *g2 = build(2);
  pz_cpu_exec_opts opts = PZ_CPU_EXEC_OPTS_INIT;
  opts.threads = 2;
  pz_cpu_exec *e1, *e2;
  CHECK_OK(pz_cpu_exec_create(g1, &opts, &e1));
  CHECK_OK(pz_cpu_exec_create(g2, &opts, &e2));
  int emb = 2, ow = -1, cache = -1;
  for (int t = 0; t < g1->n_tensors; t++) {
    if (!strcmp(g1->tensors[t].name, "o_proj.weight")) ow = t;
    if (!strcmp(g1->tensors[t].name, "layers.0.self_attn.kv_cache")) cache = t;
  }
  const pz_bf16 *E1 = pz_cpu_exec_data(e1, 0, emb), *E2 = pz_cpu_exec_data(e2, 1, emb);
  CHECK(memcmp(E1 + 48 * H, E2, sizeof(pz_bf16) * 48 * H) == 0);
  const pz_bf16 *O1 = pz_cpu_exec_data(e1, 0, ow), *O2 = pz_cpu_exec_data(e2, 1, ow);
  int ok = 1;
  for (int r = 0; r < H; r++)
    for (int c = 0; c < HEADS / 2 * VD; c++) ok &= O1[r * HEADS * VD + HEADS / 2 * VD + c] == O2[r * HEADS / 2 * VD + c];
  CHECK(ok);
  CHECK(memcmp(pz_cpu_exec_data(e1, 0, cache), pz_cpu_exec_data(e2, 1, cache), sizeof(pz_bf16) * M * CTX * (KVL + ROPE)) == 0);
  CHECK(pz_cpu_exec_data(e2, 2, emb) == NULL);
  /* the step appends the new token's KV at pos and leaves pos+1 alone */
  static pz_bf16 before[M * CTX * (KVL + ROPE)];
  memcpy(before, pz_cpu_exec_data(e1, 0, cache), sizeof before);
  int32_t tok[M] = {1, 2, 3}, pos[M] = {2, 2, 2}, nx[M];
  CHECK_OK(pz_cpu_exec_step(e1, 2, tok, pos, nx)); /* m = 2 < max batch 3 */
  const pz_bf16 *after = pz_cpu_exec_data(e1, 0, cache);
  int kvw = KVL + ROPE;
  CHECK(memcmp(before + 2 * kvw, after + 2 * kvw, sizeof(pz_bf16) * kvw) != 0);
  CHECK(memcmp(before + 3 * kvw, after + 3 * kvw, sizeof(pz_bf16) * kvw) == 0);
  CHECK(memcmp(before + 2 * CTX * kvw, after + 2 * CTX * kvw, sizeof(pz_bf16) * CTX * kvw) == 0); /* row 2 not run */
  /* bad input */
  CHECK_ST(pz_cpu_exec_step(e1, 0, tok, pos, nx), PZ_ERR_INVALID_ARG);
  CHECK_ST(pz_cpu_exec_step(e1, M + 1, tok, pos, nx), PZ_ERR_INVALID_ARG);
  int32_t badtok[M] = {1, VOCAB, 3};
  CHECK_ST(pz_cpu_exec_step(e1, M, badtok, pos, nx), PZ_ERR_INVALID_ARG);
  int32_t badpos[M] = {0, CTX, 1};
  CHECK_ST(pz_cpu_exec_step(e1, M, tok, badpos, nx), PZ_ERR_INVALID_ARG);
  float lg[M * VOCAB];
  CHECK_ST(pz_cpu_exec_logits(e2, M, lg), PZ_ERR_INVALID_ARG); /* no step yet */
  pz_cpu_exec_free(e1);
  pz_cpu_exec_free(e2);
  pz_graph_free(g1);
  pz_graph_free(g2);
  /* Thread count: a request (--threads) beats the option (PREZERO_CPU_THREADS); the option
   * applies when the request is 0; the cap holds either way. */
  CHECK(pz_cpu_threads_for(2, 1) == 2);
  CHECK(pz_cpu_threads_for(0, 1) == 1);
  CHECK(pz_cpu_threads_for(0, 3) == 3);
  CHECK(pz_cpu_threads_for(5000, 3) == PZ_CPU_MAX_THREADS);
  CHECK(pz_cpu_threads_for(0, 0) >= 1 && pz_cpu_threads_for(0, 0) <= 64);
  /* the environment is read into the option once, by the options reader; junk is refused */
  {
    pz_runtime_opts ro;
    char bad[200];
    setenv("PREZERO_CPU_THREADS", "3", 1);
    CHECK(pz_runtime_opts_from_env(&ro, bad, sizeof bad) == 0 && ro.cpu_threads == 3);
    setenv("PREZERO_CPU_THREADS", "0", 1); /* 0 is the default, as --threads 0 */
    CHECK(pz_runtime_opts_from_env(&ro, bad, sizeof bad) == 0 && ro.cpu_threads == 0);
    setenv("PREZERO_CPU_THREADS", "1025", 1);
    CHECK(pz_runtime_opts_from_env(&ro, bad, sizeof bad) == -1 && strstr(bad, "PREZERO_CPU_THREADS=1025"));
    setenv("PREZERO_CPU_THREADS", "junk", 1);
    CHECK(pz_runtime_opts_from_env(&ro, bad, sizeof bad) == -1 && strstr(bad, "PREZERO_CPU_THREADS=junk"));
    unsetenv("PREZERO_CPU_THREADS");
    /* 0/1 switches take 0 or 1 only; a bad forced flavour or tile is refused by the reader */
    static const char *const badv[][2] = {{"PREZERO_CUDA_GRAPH", "x"}, {"PREZERO_GEMM_BUILTIN", "no"},
                                          {"PREZERO_ENABLE", "yes"}, {"PREZERO_GEMM_FORCE", "bogus"},
                                          {"PREZERO_GEMM_WT", "3"}, {"PREZERO_MLA_ATTN", "5"},
                                          {"PREZERO_MLA_BALANCE", "2"}, {"PREZERO_GATE_CALIBRATE", "off"},
                                          {"PREZERO_PAD_ATTN", "2"}, {"PREZERO_GEMM_BN", "48"},
                                          {"PREZERO_GEMM_BN", "8"}, {"PREZERO_GEMM_BN", "512"},
                                          {"PREZERO_MLA_WAVES", "0"}, {"PREZERO_MLA_WAVES", "3"},
                                          {"PREZERO_GEMM_WN", "2"}, {"PREZERO_MOE_W4_WK", "2"},
                                          {"PREZERO_MOE_DIRECT", "on"}, {"PREZERO_MLA_LAZY", "2"},
                                          {"PREZERO_PDL", "yes"}, {"PREZERO_PDL", "2"},
                                          {"PREZERO_MOE_ROUTE_TOPK", "serial"}, {"PREZERO_MOE_FORK", "3"},
                                          {"PREZERO_MOE_FORK", "on"}, {"PREZERO_MLA_COMBINE", "4"},
                                          {"PREZERO_MLA_PROJ", "tc"}, {"PREZERO_MOE_W4_UP_REGS", "3"},
                                          {"PREZERO_MLP_GEMM", "2"}, {"PREZERO_MLP_GEMM", "gemm"},
                                          {"PREZERO_MLP_ONE_GU", "2"}, {"PREZERO_MOE_W4_WAVES", "2"},
                                          {"PREZERO_MOE_ROUTE_KEYS", "keys"}, {"PREZERO_MOE_DYNAMIC", "2"},
                                          {"PREZERO_CPU_THREADS", " 8"}, {"PREZERO_CPU_THREADS", "+8"},
                                          {"PREZERO_GEMM_SPLITS", "2 "},
                                          {"PREZERO_CUDA_GRAPH_SIZES", "yes"},
                                          {"PREZERO_CUDA_GRAPH_SIZES", "0,-1"}, {"PREZERO_CUDA_GRAPH_SIZES", "1,,2"},
                                          {"PREZERO_CUDA_GRAPH_SIZES", "4,"}, {"PREZERO_CUDA_GRAPH_SIZES", "1 2"},
                                          {"PREZERO_CUDA_GRAPH_SIZES", " 8"}, {"PREZERO_CUDA_GRAPH_SIZES", "1, 2"},
                                          {"PREZERO_CUDA_GRAPH_SIZES", "+8"},
                                          {"PREZERO_CUDA_GRAPH_SIZES", "1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17"}};
    for (size_t i = 0; i < sizeof badv / sizeof badv[0]; i++) {
      setenv(badv[i][0], badv[i][1], 1);
      CHECK(pz_runtime_opts_from_env(&ro, bad, sizeof bad) == -1 && strstr(bad, badv[i][0]));
      unsetenv(badv[i][0]);
    }
    setenv("PREZERO_CUDA_GRAPH_SIZES", "1,16,128", 1); /* a good list is kept as written */
    CHECK(pz_runtime_opts_from_env(&ro, bad, sizeof bad) == 0 && !strcmp(ro.cuda_graph_sizes, "1,16,128"));
    setenv("PREZERO_CUDA_GRAPH_SIZES", "1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,65536", 1); /* 16 sizes: the most */
    CHECK(pz_runtime_opts_from_env(&ro, bad, sizeof bad) == 0 && ro.cuda_graph_sizes[0] == '1');
    unsetenv("PREZERO_CUDA_GRAPH_SIZES");
    setenv("PREZERO_GEMM_BN", "64", 1);
    CHECK(pz_runtime_opts_from_env(&ro, bad, sizeof bad) == 0 && ro.gemm_bn == 64);
    unsetenv("PREZERO_GEMM_BN");
    CHECK(pz_runtime_opts_from_env(&ro, bad, sizeof bad) == 0 && ro.mla_waves == -1);
    setenv("PREZERO_MLA_WAVES", "1", 1);
    CHECK(pz_runtime_opts_from_env(&ro, bad, sizeof bad) == 0 && ro.mla_waves == 1);
    unsetenv("PREZERO_MLA_WAVES");
    setenv("PREZERO_GEMM_BUILTIN", "0", 1);
    CHECK(pz_runtime_opts_from_env(&ro, bad, sizeof bad) == 0 && ro.gemm_builtin == 0);
    unsetenv("PREZERO_GEMM_BUILTIN");
    CHECK(pz_runtime_opts_from_env(&ro, bad, sizeof bad) == 0 && ro.moe_dynamic == -1); /* opt-in: unset is off */
    { /* a struct a caller filled in: the environment reader's ranges (pz_runtime_opts_check, in
         pz_runtime_opts_take); each bad field is named with its variable; the defaults and anything the
         environment reader produced pass */
      pz_runtime_opts co;
      pz_runtime_opts_default(&co);
      CHECK(pz_runtime_opts_check(&co, bad, sizeof bad) == 0 && bad[0] == 0);
      setenv("PREZERO_GEMM_WT", "4", 1);
      setenv("PREZERO_CPU_THREADS", "1024", 1);
      setenv("PREZERO_CUDA_GRAPH_SIZES", "1,16,128", 1);
      CHECK(pz_runtime_opts_from_env(&co, bad, sizeof bad) == 0 && pz_runtime_opts_check(&co, bad, sizeof bad) == 0);
      unsetenv("PREZERO_GEMM_WT");
      unsetenv("PREZERO_CPU_THREADS");
      unsetenv("PREZERO_CUDA_GRAPH_SIZES");
      static const struct { int what; const char *needle; } cb[] = {
          {0, "pz_runtime_opts.cpu_threads (PREZERO_CPU_THREADS)=-4: use 0..1024, or -1 for the default"},
          {1, "pz_runtime_opts.prezero (PREZERO_ENABLE)=7: use 0..1, or -1 for the default"},
          {2, "pz_runtime_opts.gemm_wt (PREZERO_GEMM_WT)=3: use 1, 2 or 4"},
          {3, "pz_runtime_opts.ar_algo (PREZERO_AR_ALGO)=ring: use fused (default) or nccl"},
          {4, "pz_runtime_opts.gemm_force (PREZERO_GEMM_FORCE)=bogus"},
          {5, "pz_runtime_opts.cuda_graph_sizes (PREZERO_CUDA_GRAPH_SIZES)=1,,2: use a comma-separated list"},
          {6, "pz_runtime_opts.dump_graph=...: it has no terminating NUL"},
          {7, "pz_runtime_opts.ar_timeout_us (PREZERO_AR_TIMEOUT_US)=-5"},
          {8, "pz_runtime_opts.force_gate (PREZERO_FORCE_GATE)=2: use -1"}};
      for (size_t i = 0; i < sizeof cb / sizeof cb[0]; i++) {
        pz_runtime_opts_default(&co);
        switch (cb[i].what) {
          case 0: co.cpu_threads = -4; break;
          case 1: co.prezero = 7; break;
          case 2: co.gemm_wt = 3; break;
          case 3: snprintf(co.ar_algo, sizeof co.ar_algo, "ring"); break;
          case 4: snprintf(co.gemm_force, sizeof co.gemm_force, "bogus"); break;
          case 5: snprintf(co.cuda_graph_sizes, sizeof co.cuda_graph_sizes, "1,,2"); break;
          case 6: memset(co.dump_graph, 'a', sizeof co.dump_graph); break;
          case 7: co.ar_timeout_us = -5; break;
          default: co.force_gate = 2; break;
        }
        const int rc = pz_runtime_opts_check(&co, bad, sizeof bad);
        if (rc != -1 || !strstr(bad, cb[i].needle)) {
          fprintf(stderr, "pz_runtime_opts_check case %d: rc %d, \"%s\", want \"%s\"\n", cb[i].what, rc, bad, cb[i].needle);
          pz_test_failures++;
        }
        pz_runtime_opts out;
        if (pz_runtime_opts_take(&out, &co, "engine", NULL) != PZ_ERR_INVALID_ARG || !strstr(pz_last_error(), cb[i].needle)) {
          fprintf(stderr, "pz_runtime_opts_take case %d: not refused (%s)\n", cb[i].what, pz_last_error());
          pz_test_failures++;
        }
      }
      CHECK(pz_runtime_opts_check(NULL, bad, sizeof bad) == -1);
    }
    { /* a path longer than its option holds is refused, not cut (a cut path names another file) */
      static char longp[1200];
      memset(longp, 'a', sizeof longp - 1);
      longp[0] = '/';
      static const char *const pv[] = {"PREZERO_CACHE_DIR", "PREZERO_DUMP_GRAPH", "PREZERO_NCCL_LIB"};
      for (int i = 0; i < 3; i++) {
        setenv(pv[i], longp, 1);
        CHECK(pz_runtime_opts_from_env(&ro, bad, sizeof bad) == -1 && strstr(bad, pv[i]) &&
              strstr(bad, "1199 bytes, longer than the"));
        unsetenv(pv[i]);
      }
    }
    setenv("PREZERO_MOE_DYNAMIC", "1", 1);
    CHECK(pz_runtime_opts_from_env(&ro, bad, sizeof bad) == 0 && ro.moe_dynamic == 1);
    unsetenv("PREZERO_MOE_DYNAMIC");
    CHECK(pz_runtime_opts_from_env(&ro, bad, sizeof bad) == 0 && ro.moe_tail == -1); /* opt-in: unset is off */
    setenv("PREZERO_MOE_TAIL", "1", 1);
    CHECK(pz_runtime_opts_from_env(&ro, bad, sizeof bad) == 0 && ro.moe_tail == 1);
    unsetenv("PREZERO_MOE_TAIL");
    /* switches that are on by default: unset reads -1, 0 is read */
    static const struct { const char *var; size_t off; } sw[] = {
        {"PREZERO_MLA_BALANCE", offsetof(pz_runtime_opts, mla_balance)},
        {"PREZERO_GATE_CALIBRATE", offsetof(pz_runtime_opts, gate_calibrate)},
        {"PREZERO_PAD_ATTN", offsetof(pz_runtime_opts, pad_attn)},
        {"PREZERO_GEMM_BN", offsetof(pz_runtime_opts, gemm_bn)},
        {"PREZERO_MOE_DIRECT", offsetof(pz_runtime_opts, moe_direct)},
        {"PREZERO_MLA_LAZY", offsetof(pz_runtime_opts, mla_lazy)},
        {"PREZERO_PDL", offsetof(pz_runtime_opts, pdl)},
        {"PREZERO_MOE_ROUTE_TOPK", offsetof(pz_runtime_opts, moe_route_topk)},
        {"PREZERO_MOE_FORK", offsetof(pz_runtime_opts, moe_fork)},
        {"PREZERO_MLA_COMBINE", offsetof(pz_runtime_opts, mla_combine)},
        {"PREZERO_MLA_PROJ", offsetof(pz_runtime_opts, mla_proj)},
        {"PREZERO_MOE_W4_UP_REGS", offsetof(pz_runtime_opts, moe_w4_up_regs)},
        {"PREZERO_MLP_GEMM", offsetof(pz_runtime_opts, mlp_gemm)},
        {"PREZERO_MLP_ONE_GU", offsetof(pz_runtime_opts, mlp_one_gu)},
        {"PREZERO_MOE_W4_WAVES", offsetof(pz_runtime_opts, moe_w4_waves)},
        {"PREZERO_MOE_ROUTE_KEYS", offsetof(pz_runtime_opts, moe_route_keys)}};
    for (size_t i = 0; i < sizeof sw / sizeof sw[0]; i++) {
      const int *field = (const int *)((const char *)&ro + sw[i].off);
      CHECK(pz_runtime_opts_from_env(&ro, bad, sizeof bad) == 0 && *field == -1);
      setenv(sw[i].var, "0", 1);
      CHECK(pz_runtime_opts_from_env(&ro, bad, sizeof bad) == 0 && *field == 0);
      unsetenv(sw[i].var);
    }
    setenv("PREZERO_MOE_FORK", "2", 1); /* the one three-way switch: 2 joins before the combine */
    CHECK(pz_runtime_opts_from_env(&ro, bad, sizeof bad) == 0 && ro.moe_fork == 2);
    unsetenv("PREZERO_MOE_FORK");
  }
  TEST_DONE();
}
