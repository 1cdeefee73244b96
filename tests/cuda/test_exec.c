/* CUDA executor (src/backend/cuda/exec.h) on a hand-built two-layer graph made of the ops that
 * have CUDA kernels (embedding, AR + RMSNorm, split-K GEMM, RMSNorm, lm_head, argmax):
 *  - device fill of every weight / KV cache of `tiny` (TP 1 and 2 shards) bit-identical to the
 *    CPU executor's fill;
 *  - CUDA vs the CPU backend at TP 1 (and TP 2 with two GPUs): logits within LOGIT_TOL, argmax
 *    equal wherever the CPU's top-2 gap exceeds 2*LOGIT_TOL;
 *  - CUDA-graph replay bit-identical to eager launches (deterministic GEMM flavour), and a
 *    padded batch (3 -> 4) bit-identical to the eager batch of 3 on the real rows;
 *  - prezero ON vs OFF bit-identical with split-K at 2 splits (docs/ARCHITECTURE.md §5), scratch poisoned,
 *    gate forced on / off / calibrated;
 *  - the donors' NCCL fallback (PREZERO_AR_ALGO=nccl) against the CPU, when NCCL loads;
 *  - errors: too many GPUs, memory that does not fit, an op without a CUDA kernel, bad batch. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "backend/cpu/cpu_backend.h"
#include "backend/cuda/exec.h"
#include "backend/cuda/exec_ops.h"
#include "backend/cuda/fill.h"
#include "backend/cuda/kv_pages_fill.h"
#include "backend/cuda/runtime.h"
#include "core/kv_pages.h"
#include "model/builder.h"
#include "model/config.h"
#include "passes/passes.h"
#include "pz_test.h"

enum { H = 512, I = 1024, V = 1024, M = 8, LAYERS = 2, STEPS = 4 };
#define LOGIT_TOL 0.02f /* logits have std ~0.6; GPU and CPU differ only in fp32 summation order
                           (and the bf16 roundings that order can flip) */

static int tensor(pz_graph *g, const char *name, pz_dtype dt, pz_tensor_kind k, int nd, const int64_t *ne, int shard_dim,
                  int tp, float scale, float offset) {
  int id = -1;
  CHECK_OK(pz_graph_add_tensor(g, name, dt, k, nd, ne, &id));
  pz_tensor *t = &g->tensors[id];
  t->shard_dim = shard_dim;
  if (shard_dim >= 0) t->full_ne[shard_dim] = ne[shard_dim] * tp;
  t->init_scale = scale;
  t->init_offset = offset;
  t->batched = (k == PZ_T_ACT || k == PZ_T_INPUT);
  return id;
}

static int node(pz_graph *g, pz_op op, const char *name, int layer, pz_role role, const int *src, int ns, const int *dst,
                int nd, const pz_op_params *p) {
  int id = -1;
  CHECK_OK(pz_graph_add_node(g, op, name, layer, role, src, ns, dst, nd, p, &id));
  return id;
}

/* tokens -> embedding -> per layer: AR+RMSNorm -> up GEMM (column-parallel) -> RMSNorm ->
 * down GEMM (row-parallel, partial) ; final AR+RMSNorm -> lm_head -> argmax. */
static pz_graph *build(int tp, int prezero) {
  pz_graph_info info = {.tp = tp, .m = M, .n_layers = LAYERS, .hidden = H, .vocab_size = V, .rms_eps = 1e-6f};
  snprintf(info.model_name, sizeof info.model_name, "hand");
  pz_graph *g = NULL;
  CHECK_OK(pz_graph_create(&info, &g));
  if (!g) return NULL;
  char nm[PZ_NAME_LEN], nm2[PZ_NAME_LEN];
  int tok = tensor(g, "input_ids", PZ_I32, PZ_T_INPUT, 1, (int64_t[]){M}, -1, tp, 0, 0);
  g->in_tokens = tok;
  int emb_w = tensor(g, "embed_tokens.weight", PZ_BF16, PZ_T_WEIGHT, 2, (int64_t[]){V / tp, H}, 0, tp, 1.0f, 0);
  int part = tensor(g, "embed_tokens.out", PZ_F32, PZ_T_ACT, 2, (int64_t[]){M, H}, -1, tp, 0, 0);
  int res = tensor(g, "residual", PZ_F32, PZ_T_STATE, 2, (int64_t[]){M, H}, -1, tp, 0, 0);
  g->tensors[res].batched = true;
  pz_op_params vp = {.vocab = {.vocab_size = V, .vocab_per_rank = V / tp}};
  node(g, PZ_OP_EMBEDDING, "embed_tokens", -1, PZ_ROLE_EMBED, (int[]){tok, emb_w}, 2, (int[]){part}, 1, &vp);
  for (int L = 0; L < LAYERS; L++) {
    snprintf(nm, sizeof nm, "layers.%d.input_layernorm.weight", L);
    int ln = tensor(g, nm, PZ_BF16, PZ_T_WEIGHT, 1, (int64_t[]){H}, -1, tp, 0.05f, 1.0f);
    snprintf(nm, sizeof nm, "layers.%d.input_layernorm.out", L);
    int x = tensor(g, nm, PZ_BF16, PZ_T_ACT, 2, (int64_t[]){M, H}, -1, tp, 0, 0);
    pz_op_params np = {.norm = {.eps = 1e-6f, .has_residual = L > 0, .fill_buf = -1}};
    snprintf(nm, sizeof nm, "layers.%d.input_layernorm", L);
    node(g, PZ_OP_AR_RMSNORM, nm, L, PZ_ROLE_INPUT_LAYERNORM, (int[]){part, ln, L > 0 ? res : -1}, 3, (int[]){x, res}, 2, &np);
    snprintf(nm, sizeof nm, "layers.%d.mlp.up_proj.weight", L);
    int wu = tensor(g, nm, PZ_BF16, PZ_T_WEIGHT, 2, (int64_t[]){I / tp, H}, 0, tp, 1.0f / sqrtf((float)H), 0);
    snprintf(nm, sizeof nm, "layers.%d.mlp.up_proj.out", L);
    int u = tensor(g, nm, PZ_F32, PZ_T_ACT, 2, (int64_t[]){M, I / tp}, -1, tp, 0, 0);
    pz_op_params gp = {.gemm = {.zero_init = true, .split_k = 0, .prezero_buf = -1}};
    snprintf(nm, sizeof nm, "layers.%d.mlp.up_proj", L);
    node(g, PZ_OP_GEMM, nm, L, PZ_ROLE_QKV_A, (int[]){x, wu, -1}, 3, (int[]){u}, 1, &gp);
    snprintf(nm, sizeof nm, "layers.%d.mlp.up_norm.weight", L);
    int lu = tensor(g, nm, PZ_BF16, PZ_T_WEIGHT, 1, (int64_t[]){I / tp}, 0, tp, 0.05f, 1.0f);
    snprintf(nm, sizeof nm, "layers.%d.mlp.up_norm.out", L);
    int un = tensor(g, nm, PZ_BF16, PZ_T_ACT, 2, (int64_t[]){M, I / tp}, -1, tp, 0, 0);
    pz_op_params rp = {.norm = {.eps = 1e-6f, .fill_buf = -1}};
    snprintf(nm2, sizeof nm2, "layers.%d.mlp.up_norm", L);
    node(g, PZ_OP_RMSNORM, nm2, L, PZ_ROLE_NONE, (int[]){u, lu}, 2, (int[]){un}, 1, &rp);
    snprintf(nm, sizeof nm, "layers.%d.mlp.down_proj.weight", L);
    int wd = tensor(g, nm, PZ_BF16, PZ_T_WEIGHT, 2, (int64_t[]){H, I / tp}, 1, tp, 1.0f / sqrtf((float)I), 0);
    snprintf(nm, sizeof nm, "layers.%d.mlp.down_proj.out", L);
    part = tensor(g, nm, PZ_F32, PZ_T_ACT, 2, (int64_t[]){M, H}, -1, tp, 0, 0);
    snprintf(nm, sizeof nm, "layers.%d.mlp.down_proj", L);
    node(g, PZ_OP_GEMM, nm, L, PZ_ROLE_NONE, (int[]){un, wd, -1}, 3, (int[]){part}, 1, &gp);
  }
  int lnf = tensor(g, "norm.weight", PZ_BF16, PZ_T_WEIGHT, 1, (int64_t[]){H}, -1, tp, 0.05f, 1.0f);
  int xf = tensor(g, "norm.out", PZ_BF16, PZ_T_ACT, 2, (int64_t[]){M, H}, -1, tp, 0, 0);
  pz_op_params np = {.norm = {.eps = 1e-6f, .has_residual = true, .fill_buf = -1}};
  node(g, PZ_OP_AR_RMSNORM, "norm", -1, PZ_ROLE_FINAL_NORM, (int[]){part, lnf, res}, 3, (int[]){xf, res}, 2, &np);
  int wl = tensor(g, "lm_head.weight", PZ_BF16, PZ_T_WEIGHT, 2, (int64_t[]){V / tp, H}, 0, tp, 1.0f / sqrtf((float)H), 0);
  int logits = tensor(g, "lm_head.out", PZ_F32, PZ_T_ACT, 2, (int64_t[]){M, V / tp}, -1, tp, 0, 0);
  pz_op_params lp = {.gemm = {.zero_init = true, .prezero_buf = -1}};
  node(g, PZ_OP_LM_HEAD, "lm_head", -1, PZ_ROLE_LM_HEAD, (int[]){xf, wl, -1}, 3, (int[]){logits}, 1, &lp);
  int ids = tensor(g, "argmax.out", PZ_I32, PZ_T_ACT, 1, (int64_t[]){M}, -1, tp, 0, 0);
  node(g, PZ_OP_ARGMAX, "argmax", -1, PZ_ROLE_ARGMAX, (int[]){logits}, 1, (int[]){ids}, 1, &vp);
  g->out_logits = logits;
  g->out_tokens = ids;
  CHECK_OK(pz_graph_verify(g));
  pz_pass_opts po = PZ_PASS_OPTS_INIT;
  po.prezero = prezero;
  CHECK_OK(pz_run_passes(g, &po, NULL, NULL));
  return g;
}

static int count_op(const pz_graph *g, pz_op op) {
  int n = 0;
  for (int i = 0; i < g->n_nodes; i++) n += g->nodes[i].op == op;
  return n;
}

static void tokens_for(int step, int64_t m, int32_t *t) {
  for (int64_t i = 0; i < m; i++) t[i] = (int32_t)((i * 389 + step * 131 + 17) % V);
}

/* Runs STEPS steps of m rows; logits [STEPS][m][V] and ids [STEPS][m]. */
static void run_cuda(pz_cuda_exec *e, int64_t m, float *logits, int32_t *ids) {
  int32_t t[M], pos[M] = {0};
  for (int s = 0; s < STEPS; s++) {
    tokens_for(s, m, t);
    CHECK_OK(pz_cuda_exec_step(e, m, t, pos, ids + s * m));
    CHECK_OK(pz_cuda_exec_logits(e, m, logits + (size_t)s * m * V));
  }
}

static void run_cpu(pz_cpu_exec *e, int64_t m, float *logits, int32_t *ids) {
  int32_t t[M], pos[M] = {0};
  for (int s = 0; s < STEPS; s++) {
    tokens_for(s, m, t);
    CHECK_OK(pz_cpu_exec_step(e, m, t, pos, ids + s * m));
    CHECK_OK(pz_cpu_exec_logits(e, m, logits + (size_t)s * m * V));
  }
}

static pz_cuda_exec *make(const pz_graph *g, int graphs, int poison) {
  pz_cuda_exec_opts o = PZ_CUDA_EXEC_OPTS_INIT;
  o.seed = 99;
  o.graphs = graphs;
  o.poison = poison;
  o.n_capture = 4;
  o.capture[0] = 1; o.capture[1] = 2; o.capture[2] = 4; o.capture[3] = 8;
  pz_device_desc_default(&o.dev); /* fixed gate description: runs are comparable */
  pz_cuda_exec *e = NULL;
  CHECK_OK(pz_cuda_exec_create(g, &o, &e));
  return e;
}

/* ---------------------------------------------------------------- fill */

static void test_fill(int tp) {
  pz_model_config mc;
  CHECK_OK(pz_config_load("tiny", &mc));
  pz_build_opts bo = {.tp = tp, .m = 2, .max_ctx = 16, .layers = 2};
  pz_graph *g = NULL;
  CHECK_OK(pz_build_decode_graph(&mc, &bo, &g));
  if (!g) return;
  pz_cpu_exec_opts co = PZ_CPU_EXEC_OPTS_INIT;
  co.seed = 4242;
  co.threads = 2;
  pz_cpu_exec *ce = NULL;
  CHECK_OK(pz_cpu_exec_create(g, &co, &ce));
  int checked = 0, bad = 0;
  for (int r = 0; r < tp && ce; r++)
    for (int t = 0; t < g->n_tensors; t++) {
      const pz_tensor *x = &g->tensors[t];
      if (x->view_of >= 0 || !pz_fill_wanted(x)) continue;
      size_t bytes = (size_t)pz_tensor_numel(x) * pz_dtype_size(x->dtype);
      void *d = NULL, *h = malloc(bytes);
      CHECK(cudaMalloc(&d, bytes) == cudaSuccess && h);
      const pz_node *pn = pz_kv_paged_node(g, t);
      if (pn) { /* a paged MLA cache: the executor's fill through the identity block table (kv_pages_fill.h) */
        const pz_tensor *bt = &g->tensors[pn->src[PZ_MLA_BLOCK_TABLE]];
        int32_t *dt = NULL;
        CHECK(cudaMalloc((void **)&dt, sizeof(int32_t) * (size_t)pz_tensor_span(bt)) == cudaSuccess);
        CHECK_OK(pz_kv_pages_fill_launch(d, x->ne[0], dt, bt->ne[0], bt->stride[0], pn->p.mla.max_ctx, x->ne[2],
                                         pz_fill_name_key(co.seed, x->name), x->init_scale != 0.0f ? x->init_scale : 1.0f,
                                         true, 0));
        CHECK(cudaDeviceSynchronize() == cudaSuccess);
        cudaFree(dt);
      } else {
        CHECK_OK(pz_fill_tensor_launch(x, r, tp, co.seed, d, 0));
      }
      CHECK(cudaMemcpy(h, d, bytes, cudaMemcpyDeviceToHost) == cudaSuccess);
      if (memcmp(h, pz_cpu_exec_data(ce, r, t), bytes) != 0) {
        if (bad++ < 5) fprintf(stderr, "fill of %s (rank %d of %d) differs from the CPU executor's\n", x->name, r, tp);
      }
      checked++;
      cudaFree(d);
      free(h);
    }
  CHECK(bad == 0);
  CHECK(checked > 20 * tp); /* every weight and KV cache of two tiny layers, on every rank */
  printf("fill: %d tensors bit-identical to the CPU fill at TP %d\n", checked, tp);
  pz_cpu_exec_free(ce);
  pz_graph_free(g);
}

/* ---------------------------------------------------------------- CUDA vs CPU */

static void test_vs_cpu(int tp) {
  pz_graph *g = build(tp, 0);
  if (!g) return;
  pz_cpu_exec_opts co = PZ_CPU_EXEC_OPTS_INIT;
  co.seed = 99;
  co.threads = 2;
  pz_cpu_exec *ce = NULL;
  CHECK_OK(pz_cpu_exec_create(g, &co, &ce));
  pz_cuda_exec *ge = make(g, 1, 1);
  size_t nl = (size_t)STEPS * M * V;
  float *lc = malloc(nl * 4), *lg = malloc(nl * 4);
  int32_t ic[STEPS * M], ig[STEPS * M];
  if (ce && ge && lc && lg) {
    run_cpu(ce, M, lc, ic);
    run_cuda(ge, M, lg, ig);
    double maxd = 0;
    int checked = 0;
    for (size_t i = 0; i < nl; i++) {
      double d = fabs((double)lc[i] - lg[i]);
      if (!(d <= maxd)) maxd = d; /* NaN propagates */
    }
    CHECK(maxd <= LOGIT_TOL);
    for (int r = 0; r < STEPS * M; r++) {
      const float *row = lc + (size_t)r * V;
      float b1 = -INFINITY, b2 = -INFINITY;
      for (int j = 0; j < V; j++) {
        if (row[j] > b1) { b2 = b1; b1 = row[j]; }
        else if (row[j] > b2) b2 = row[j];
      }
      if (b1 - b2 > 2 * LOGIT_TOL) { CHECK(ic[r] == ig[r]); checked++; }
    }
    CHECK(checked >= STEPS * M / 2);
    printf("CUDA vs CPU, TP %d: max |logit diff| %.3g (tol %g), argmax equal on %d of %d rows with a clear top-2 gap\n", tp,
           maxd, (double)LOGIT_TOL, checked, STEPS * M);
  }
  free(lc);
  free(lg);
  pz_cuda_exec_free(ge);
  pz_cpu_exec_free(ce);
  pz_graph_free(g);
}

/* ---------------------------------------------------------------- bit-identity */

static void test_graph_vs_eager(int tp) {
  setenv("PREZERO_GEMM_FORCE", "serial", 1); /* deterministic split-K (docs/ARCHITECTURE.md §5) */
  pz_graph *g = build(tp, 1);
  if (!g) return;
  pz_cuda_exec *eg = make(g, 1, 1), *ee = make(g, 0, 1);
  size_t nl = (size_t)STEPS * M * V;
  float *a = malloc(nl * 4), *b = malloc(nl * 4);
  int32_t ia[STEPS * M], ib[STEPS * M];
  if (eg && ee && a && b) {
    CHECK(pz_cuda_exec_graphs(eg) && !pz_cuda_exec_graphs(ee));
    for (int64_t m = 1; m <= M; m++) {
      run_cuda(eg, m, a, ia);
      run_cuda(ee, m, b, ib);
      /* m = 3, 5, 6, 7 run padded to the next captured size in the graph executor. */
      CHECK(memcmp(a, b, sizeof(float) * (size_t)STEPS * m * V) == 0);
      CHECK(memcmp(ia, ib, sizeof(int32_t) * (size_t)STEPS * m) == 0);
    }
    CHECK(pz_cuda_exec_padded_m(eg, 3) == 4 && pz_cuda_exec_padded_m(eg, 5) == 8 && pz_cuda_exec_padded_m(ee, 3) == 3);
    printf("graph replay vs eager, TP %d: bit-identical for m = 1..%d (padded sizes included)\n", tp, M);
  }
  free(a);
  free(b);
  pz_cuda_exec_free(eg);
  pz_cuda_exec_free(ee);
  pz_graph_free(g);
  unsetenv("PREZERO_GEMM_FORCE");
}

static void test_prezero_on_off(int tp) {
  /* Split-K with atomics at 2 splits: 0 + a + b == 0 + b + a, so OFF is deterministic and ON
   * must match it bit for bit (docs/ARCHITECTURE.md §5). */
  setenv("PREZERO_GEMM_FORCE", "atomic", 1);
  setenv("PREZERO_GEMM_SPLITS", "2", 1);
  pz_graph *off = build(tp, 0), *on = build(tp, 1);
  if (!off || !on) return;
  CHECK(count_op(off, PZ_OP_MM_MAYBE_PREZERO) == 0);
  CHECK(count_op(on, PZ_OP_MM_MAYBE_PREZERO) == LAYERS);          /* each layer's up_proj */
  CHECK(count_op(on, PZ_OP_AR_RMSNORM_MAYBE_PREZERO) == LAYERS);  /* each input_layernorm */
  size_t nl = (size_t)STEPS * M * V;
  float *a = malloc(nl * 4), *b = malloc(nl * 4);
  int32_t ia[STEPS * M], ib[STEPS * M];
  static const char *const gates[] = {"on", "off", NULL};
  for (int k = 0; k < 3 && a && b; k++) {
    if (gates[k]) setenv("PREZERO_FORCE_GATE", gates[k], 1);
    else unsetenv("PREZERO_FORCE_GATE");
    for (int graphs = 0; graphs <= 1; graphs++) {
      pz_cuda_exec *e0 = make(off, graphs, 1), *e1 = make(on, graphs, 1);
      if (!e0 || !e1) { pz_cuda_exec_free(e0); pz_cuda_exec_free(e1); continue; }
      for (int64_t m = 1; m <= M; m += 3) {
        run_cuda(e0, m, a, ia);
        run_cuda(e1, m, b, ib);
        CHECK(memcmp(a, b, sizeof(float) * (size_t)STEPS * m * V) == 0);
        CHECK(memcmp(ia, ib, sizeof(int32_t) * (size_t)STEPS * m) == 0);
      }
      pz_cuda_exec_free(e0);
      pz_cuda_exec_free(e1);
    }
  }
  unsetenv("PREZERO_FORCE_GATE");
  printf("prezero ON vs OFF, TP %d: bit-identical (2 splits, scratch poisoned, fill gate on/off/calibrated, eager and graphs)\n", tp);
  free(a);
  free(b);
  pz_graph_free(off);
  pz_graph_free(on);
  unsetenv("PREZERO_GEMM_FORCE");
  unsetenv("PREZERO_GEMM_SPLITS");
}

/* The donors' NCCL fallback (PREZERO_AR_ALGO=nccl): the same step within the same tolerance of the
 * CPU; skipped (with a message) when no NCCL library can be loaded. */
static void test_nccl(int tp) {
  setenv("PREZERO_AR_ALGO", "nccl", 1);
  pz_graph *g = build(tp, 1);
  pz_cuda_exec_opts o = PZ_CUDA_EXEC_OPTS_INIT;
  pz_device_desc_default(&o.dev);
  pz_cuda_exec *e = NULL;
  pz_status st = g ? pz_cuda_exec_create(g, &o, &e) : PZ_ERR_INTERNAL;
  pz_cuda_exec_free(e);
  pz_graph_free(g);
  if (st == PZ_ERR_UNSUPPORTED) {
    printf("NCCL fallback, TP %d: skipped (%s)\n", tp, pz_last_error());
  } else {
    CHECK(st == PZ_OK);
    printf("NCCL fallback (PREZERO_AR_ALGO=nccl): ");
    test_vs_cpu(tp);
  }
  unsetenv("PREZERO_AR_ALGO");
}

/* ---------------------------------------------------------------- errors */

static void test_errors(int ngpu) {
  pz_graph *g = build(1, 0);
  if (!g) return;
  pz_cuda_exec_opts o = PZ_CUDA_EXEC_OPTS_INIT;
  pz_device_desc_default(&o.dev);
  pz_cuda_exec *e = NULL;
  o.reserve_bytes = (int64_t)1 << 50; /* nothing fits */
  CHECK_ST(pz_cuda_exec_create(g, &o, &e), PZ_ERR_OOM);
  CHECK(e == NULL && strstr(pz_last_error(), "GiB"));
  o.reserve_bytes = 0;
  int tp_big = 2;
  while (tp_big <= ngpu) tp_big *= 2; /* the smallest power of two above the GPU count */
  if (tp_big <= PZ_CUDA_MAX_TP) {
    pz_graph *g2 = build(tp_big, 0);
    if (g2) {
      CHECK_ST(pz_cuda_exec_create(g2, &o, &e), PZ_ERR_NO_DEVICE);
      CHECK(e == NULL && strstr(pz_last_error(), "GPUs"));
      pz_graph_free(g2);
    }
  }
  /* A graph with an op that has no CUDA kernel in this build is refused at creation, naming
   * the op (no fallback); with every kernel present, `tiny` must be accepted. */
  {
    pz_model_config mc;
    CHECK_OK(pz_config_load("tiny", &mc));
    pz_build_opts bo = {.tp = 1, .m = 2, .max_ctx = 16, .layers = 2};
    pz_graph *gt = NULL;
    CHECK_OK(pz_build_decode_graph(&mc, &bo, &gt));
    const char *missing = NULL;
    for (int i = 0; gt && i < gt->n_nodes && !missing; i++)
      if (!pz_cuda_op_launcher(gt->nodes[i].op)) missing = pz_op_name(gt->nodes[i].op);
    if (gt) {
      pz_status st = pz_cuda_exec_create(gt, &o, &e);
      if (missing) {
        CHECK(st == PZ_ERR_UNSUPPORTED && e == NULL && strstr(pz_last_error(), missing));
        printf("gap reported for tiny: %s\n", pz_last_error());
      } else {
        CHECK(st == PZ_OK && e != NULL);
      }
      pz_cuda_exec_free(e);
      e = NULL;
      pz_graph_free(gt);
    }
  }
  e = make(g, 1, 0);
  if (e) {
    int32_t t[M + 1] = {0}, pos[M + 1] = {0}, nx[M + 1];
    CHECK_ST(pz_cuda_exec_step(e, 0, t, pos, nx), PZ_ERR_INVALID_ARG);
    CHECK_ST(pz_cuda_exec_step(e, M + 1, t, pos, nx), PZ_ERR_INVALID_ARG);
    CHECK_ST(pz_cuda_exec_logits(e, 1, (float[V]){0}), PZ_ERR_INVALID_ARG); /* no step yet */
    int sz[8];
    int n = pz_cuda_exec_capture_sizes(e, sz, 8);
    CHECK(n == 4 && sz[0] == 1 && sz[3] == M);
    pz_cuda_exec_free(e);
  }
  /* The memory plan splits by layer name. */
  int64_t fixed = 0, lb[LAYERS];
  CHECK_OK(pz_cuda_bytes_by_layer(g, &fixed, lb, LAYERS));
  int64_t w_layer = ((int64_t)I * H * 2 * 2 + H * 2 + I * 2) , act_layer = (int64_t)M * (H * 2 + I * 4 + I * 2 + H * 4);
  CHECK(lb[0] == lb[1] && lb[0] >= w_layer + act_layer && lb[0] <= w_layer + act_layer + 8 * 256);
  CHECK(pz_cuda_fit_layers(fixed, lb, LAYERS, fixed + lb[0]) == 1);
  CHECK(pz_cuda_fit_layers(fixed, lb, LAYERS, fixed - 1) == 0);
  CHECK(pz_cuda_fit_layers(fixed, lb, LAYERS, fixed + 2 * lb[0]) == 2);
  pz_graph_free(g);
}

int main(void) {
  int ngpu = pz_cuda_device_count();
  if (ngpu == 0) {
    fprintf(stderr, "no CUDA GPU: skipping the CUDA executor tests\n");
    return 77;
  }
  test_fill(1);
  test_fill(2);
  test_errors(ngpu);
  test_vs_cpu(1);
  test_graph_vs_eager(1);
  test_prezero_on_off(1);
  test_nccl(1);
  if (ngpu >= 2) {
    test_vs_cpu(2);
    test_graph_vs_eager(2);
    test_prezero_on_off(2);
    test_nccl(2);
  } else {
    printf("only one GPU: TP 2 cases skipped\n");
  }
  TEST_DONE();
}
