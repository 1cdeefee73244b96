/* The general form of the pass (docs/ARCHITECTURE.md §4 "Beyond the seed") executed on the CPU backend:
 * a Llama/Qwen-style graph built by hand (separate q/k/v GEMMs of widths that are not
 * multiples of 32, a bias on q, a split-K count of 2, an o_proj-like GEMM into the next donor,
 * and a router-like GEMM after it). Prezero ON and OFF give bit-identical tensors, with NaN
 * poisoning, at batch sizes on both sides of the gate and with the gate forced on and off. */
#define _GNU_SOURCE 1 /* setenv */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "backend/cpu/cpu_backend.h"
#include "passes/passes.h"
#include "passes/prezero.h"
#include "pz_test.h"

enum { TP = 2, M = 8, H = 256, V = 64, E = 20 };

static int T(pz_graph *g, const char *name, pz_dtype dt, pz_tensor_kind k, int nd, int64_t a, int64_t b) {
  int id = -1;
  int64_t ne[2] = {a, b};
  CHECK_OK(pz_graph_add_tensor(g, name, dt, k, nd, ne, &id));
  if (k != PZ_T_WEIGHT) g->tensors[id].batched = true;
  return id;
}

static int outs[16], n_outs;

static pz_graph *build(void) {
  pz_graph_info info = {.tp = TP, .m = M, .n_layers = 1, .hidden = H, .vocab_size = V, .rms_eps = 1e-6f};
  snprintf(info.model_name, sizeof info.model_name, "llama-like");
  pz_graph *g;
  CHECK_OK(pz_graph_create(&info, &g));
  n_outs = 0;
  int ids = T(g, "input_ids", PZ_I32, PZ_T_INPUT, 1, M, 0);
  int pos = T(g, "positions", PZ_I32, PZ_T_INPUT, 1, M, 0);
  g->in_tokens = ids;
  g->in_pos = pos;
  int emb_w = T(g, "embed_tokens.weight", PZ_BF16, PZ_T_WEIGHT, 2, V / TP, H);
  int part = T(g, "embed_tokens.out", PZ_F32, PZ_T_ACT, 2, M, H);
  pz_op_params vp = {.vocab = {.vocab_size = V, .vocab_per_rank = V / TP}};
  CHECK_OK(pz_graph_add_node(g, PZ_OP_EMBEDDING, "embed_tokens", -1, PZ_ROLE_EMBED, (int[]){ids, emb_w}, 2, (int[]){part}, 1, &vp, NULL));
  int res = T(g, "residual", PZ_F32, PZ_T_STATE, 2, M, H);
  int w1 = T(g, "layers.0.input_layernorm.weight", PZ_BF16, PZ_T_WEIGHT, 1, H, 0);
  int xn = T(g, "layers.0.input_layernorm.out", PZ_BF16, PZ_T_ACT, 2, M, H);
  pz_op_params np = {.norm = {.eps = 1e-6f, .has_residual = false, .fill_buf = -1}};
  CHECK_OK(pz_graph_add_node(g, PZ_OP_AR_RMSNORM, "layers.0.input_layernorm", 0, PZ_ROLE_INPUT_LAYERNORM,
                             (int[]){part, w1, -1}, 3, (int[]){xn, res}, 2, &np, NULL));
  outs[n_outs++] = xn;
  const char *nm[3] = {"q_proj", "k_proj", "v_proj"};
  const int64_t w[3] = {100, 36, 60};
  int qkv[3];
  for (int i = 0; i < 3; i++) {
    char s[96];
    snprintf(s, sizeof s, "layers.0.self_attn.%s.weight", nm[i]);
    int W = T(g, s, PZ_BF16, PZ_T_WEIGHT, 2, w[i], H);
    int bias = -1;
    if (i == 0) bias = T(g, "layers.0.self_attn.q_proj.bias", PZ_F32, PZ_T_WEIGHT, 1, w[i], 0);
    snprintf(s, sizeof s, "layers.0.self_attn.%s.out", nm[i]);
    qkv[i] = T(g, s, PZ_F32, PZ_T_ACT, 2, M, w[i]);
    snprintf(s, sizeof s, "layers.0.self_attn.%s", nm[i]);
    pz_op_params gp = {.gemm = {.zero_init = true, .split_k = i == 1 ? 2 : 0, .prezero_buf = -1}};
    CHECK_OK(pz_graph_add_node(g, PZ_OP_GEMM, s, 0, PZ_ROLE_NONE, (int[]){xn, W, bias}, 3, (int[]){qkv[i]}, 1, &gp, NULL));
    outs[n_outs++] = qkv[i];
  }
  /* "attention": RMSNorm of v (bf16), then an o_proj-like GEMM back to H: the next donor's partial. */
  int vn_w = T(g, "layers.0.self_attn.v_norm.weight", PZ_BF16, PZ_T_WEIGHT, 1, 60, 0);
  int vn = T(g, "layers.0.self_attn.v_norm.out", PZ_BF16, PZ_T_ACT, 2, M, 60);
  CHECK_OK(pz_graph_add_node(g, PZ_OP_RMSNORM, "layers.0.self_attn.v_norm", 0, PZ_ROLE_NONE, (int[]){qkv[2], vn_w}, 2, (int[]){vn}, 1, &np, NULL));
  int qn_w = T(g, "layers.0.self_attn.q_norm.weight", PZ_BF16, PZ_T_WEIGHT, 1, 100, 0);
  int qn = T(g, "layers.0.self_attn.q_norm.out", PZ_BF16, PZ_T_ACT, 2, M, 100);
  CHECK_OK(pz_graph_add_node(g, PZ_OP_RMSNORM, "layers.0.self_attn.q_norm", 0, PZ_ROLE_NONE, (int[]){qkv[0], qn_w}, 2, (int[]){qn}, 1, &np, NULL));
  outs[n_outs++] = vn;
  outs[n_outs++] = qn;
  int ow = T(g, "layers.0.self_attn.o_proj.weight", PZ_BF16, PZ_T_WEIGHT, 2, H, 60);
  int attn = T(g, "layers.0.self_attn.o_proj.out", PZ_F32, PZ_T_ACT, 2, M, H);
  pz_op_params gp = {.gemm = {.zero_init = true, .prezero_buf = -1}};
  CHECK_OK(pz_graph_add_node(g, PZ_OP_GEMM, "layers.0.self_attn.o_proj", 0, PZ_ROLE_NONE, (int[]){vn, ow, -1}, 3, (int[]){attn}, 1, &gp, NULL));
  outs[n_outs++] = attn;
  int w2 = T(g, "layers.0.post_attention_layernorm.weight", PZ_BF16, PZ_T_WEIGHT, 1, H, 0);
  int xn2 = T(g, "layers.0.post_attention_layernorm.out", PZ_BF16, PZ_T_ACT, 2, M, H);
  np.norm.has_residual = true;
  CHECK_OK(pz_graph_add_node(g, PZ_OP_AR_RMSNORM, "layers.0.post_attention_layernorm", 0, PZ_ROLE_POST_ATTN_LAYERNORM,
                             (int[]){attn, w2, res}, 3, (int[]){xn2, res}, 2, &np, NULL));
  outs[n_outs++] = xn2;
  outs[n_outs++] = res;
  int rw = T(g, "layers.0.mlp.gate.weight", PZ_BF16, PZ_T_WEIGHT, 2, E, H);
  int lg = T(g, "layers.0.mlp.gate.out", PZ_F32, PZ_T_ACT, 2, M, E);
  CHECK_OK(pz_graph_add_node(g, PZ_OP_GEMM, "layers.0.mlp.gate", 0, PZ_ROLE_ROUTER_GATE, (int[]){xn2, rw, -1}, 3, (int[]){lg}, 1, &gp, NULL));
  outs[n_outs++] = lg;
  CHECK_OK(pz_graph_verify(g));
  return g;
}

/* Runs 3 steps at batch m and copies rows [0, m) of every checked tensor of rank r (packed). */
static float *run(const pz_graph *g, int64_t m, size_t *n_out) {
  pz_cpu_exec_opts eo = PZ_CPU_EXEC_OPTS_INIT;
  eo.poison = 1;
  eo.seed = 5;
  pz_device_desc_default(&eo.dev);
  eo.dev.num_sms = 4;     /* small device, original gate (m + m < 4 for n_total = H = 256): */
  eo.dev.ctas_per_sm = 0; /* the fill is free at m = 1, not at m = 8 */
  pz_cpu_exec *e = NULL;
  CHECK_OK(pz_cpu_exec_create(g, &eo, &e));
  if (!e) return NULL;
  int32_t tok[M], pos[M];
  for (int64_t i = 0; i < M; i++) { tok[i] = (int32_t)((i * 13 + 5) % V); pos[i] = 0; }
  size_t cap = 0;
  for (int k = 0; k < n_outs; k++) cap += (size_t)(m * g->tensors[outs[k]].ne[1]) * TP * 3;
  float *out = calloc(cap, sizeof(float));
  size_t n = 0;
  for (int s = 0; s < 3; s++) {
    CHECK_OK(pz_cpu_exec_step(e, m, tok, pos, NULL));
    for (int r = 0; r < TP; r++)
      for (int k = 0; k < n_outs; k++) {
        const pz_tensor *t = &g->tensors[outs[k]];
        const char *base = pz_cpu_exec_data(e, r, outs[k]);
        size_t es = pz_dtype_size(t->dtype);
        for (int64_t i = 0; i < m; i++) {
          /* Raw bytes (bf16 pairs packed into floats): compared bit for bit. */
          memcpy((char *)(out + n), base + (size_t)(i * t->stride[0]) * es, (size_t)t->ne[1] * es);
          n += ((size_t)t->ne[1] * es + 3) / 4;
        }
      }
    for (int64_t i = 0; i < m; i++) tok[i] = (tok[i] + 7) % V;
  }
  pz_cpu_exec_free(e);
  *n_out = n;
  return out;
}

int main(void) {
  unsetenv("PREZERO_FORCE_GATE");
  pz_graph *off = build(), *on = build();
  pz_pass_opts o = PZ_PASS_OPTS_INIT;
  o.prezero = 1;
  pz_pass_stats st[PZ_MAX_PASSES];
  int ns = 0;
  CHECK_OK(pz_run_passes(on, &o, st, &ns));
  /* input donor: q|k|v (3 GEMMs), post donor: the router-like gate; o_proj reads v_norm, not x_norm. */
  CHECK(st[0].matched == 2 && st[0].rewritten == 2 + 3 + 1);
  const pz_node *D = &on->nodes[1];
  CHECK(D->op == PZ_OP_AR_RMSNORM_MAYBE_PREZERO && D->p.norm.n_total == 256 && D->p.norm.n_base == 256);
  pz_device_desc dev;
  pz_device_desc_default(&dev);
  dev.num_sms = 4;
  dev.ctas_per_sm = 0;
  CHECK(pz_is_prezero_free(1, 256, PZ_F32, H, TP, &dev));
  CHECK(!pz_is_prezero_free(M, 256, PZ_F32, H, TP, &dev));
  const char *force[3] = {NULL, "on", "off"};
  const int64_t ms[2] = {1, M};
  for (int mi = 0; mi < 2; mi++) {
    unsetenv("PREZERO_FORCE_GATE");
    size_t n0 = 0, n1 = 0;
    float *a = run(off, ms[mi], &n0);
    for (int f = 0; f < 3; f++) {
      if (force[f]) setenv("PREZERO_FORCE_GATE", force[f], 1);
      else unsetenv("PREZERO_FORCE_GATE");
      float *b = run(on, ms[mi], &n1);
      CHECK(a && b && n0 == n1 && memcmp(a, b, n0 * sizeof(float)) == 0);
      int nan = 0;
      for (size_t i = 0; b && i < n1; i++) nan += isnan(b[i]);
      CHECK(nan == 0);
      if (!(a && b && n0 == n1 && memcmp(a, b, n0 * sizeof(float)) == 0))
        fprintf(stderr, "m=%lld fill gate %s: ON differs from OFF\n", (long long)ms[mi], force[f] ? force[f] : "free");
      free(b);
    }
    free(a);
  }
  unsetenv("PREZERO_FORCE_GATE");
  pz_graph_free(off);
  pz_graph_free(on);
  TEST_DONE();
}
