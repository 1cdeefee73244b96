/* The CUDA executor's per-batch prezero plan (exec.h, opts.prezero on the OFF graph) on `tiny`
 * (2 layers, captured sizes 1, 2, 4, 8), OFF and ON graph sets of one executor:
 *  - every GEMM forced to full K (no kernel zeroes): at every size the plan fires nothing, the
 *    ON set runs the OFF graph itself (same nodes and tensors) and the logits are bit-identical;
 *  - split-K forced at 2 splits with in-kernel zero (every consumer fires, docs/ARCHITECTURE.md §5: 0+a+b =
 *    0+b+a): the ON graph has the rewritten ops, scratch is poisoned before each step, and the
 *    logits are bit-identical to OFF at every size;
 *  - the plan's fired list agrees with the GEMM handle's own choice at every size (defaults);
 *  - an executor given a rewritten graph cannot be switched (PZ_ERR_INVALID_ARG). */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <string.h>
#include "backend/cuda/exec.h"
#include "backend/cuda/gemm.h"
#include "backend/cuda/runtime.h"
#include "model/builder.h"
#include "model/config.h"
#include "passes/passes.h"
#include "passes/prezero.h"
#include "pz_test.h"

enum { M = 8, STEPS = 3 };
static const int sizes[] = {1, 2, 4, 8};
static int64_t vocab;

static pz_graph *off_graph(void) {
  pz_model_config mc;
  CHECK_OK(pz_config_load("tiny", &mc));
  vocab = mc.vocab_size;
  pz_build_opts bo = PZ_BUILD_OPTS_INIT;
  bo.tp = 1;
  bo.m = M;
  bo.max_ctx = 64;
  bo.layers = 2;
  pz_graph *g = NULL;
  CHECK_OK(pz_build_decode_graph(&mc, &bo, &g));
  return g;
}

static pz_cuda_exec *make(const pz_graph *g, int prezero, int poison) {
  pz_cuda_exec_opts o = PZ_CUDA_EXEC_OPTS_INIT;
  o.seed = 5;
  o.graphs = 1;
  o.prezero = prezero;
  o.poison = poison;
  o.n_capture = 4;
  memcpy(o.capture, sizes, sizeof sizes);
  pz_device_desc_default(&o.dev);
  pz_cuda_exec *e = NULL;
  CHECK_OK(pz_cuda_exec_create(g, &o, &e));
  return e;
}

/* STEPS steps of m rows on the current set; last logits into out[m * vocab]. */
static void steps(pz_cuda_exec *e, int m, float *out) {
  int32_t t[M], pos[M], next[M];
  for (int s = 0; s < STEPS; s++) {
    for (int i = 0; i < m; i++) {
      t[i] = (int32_t)((i * 389 + s * 131 + 17) % vocab);
      pos[i] = 10 + s;
    }
    CHECK_OK(pz_cuda_exec_step(e, m, t, pos, next));
  }
  CHECK_OK(pz_cuda_exec_logits(e, m, out));
}

static int count_prezero_ops(const pz_graph *g) {
  int n = 0;
  for (int i = 0; i < g->n_nodes; i++)
    n += g->nodes[i].op == PZ_OP_MM_MAYBE_PREZERO || g->nodes[i].op == PZ_OP_AR_RMSNORM_MAYBE_PREZERO;
  return n;
}

/* ON vs OFF at every size; want_fired: 0 none, 1 every candidate. */
static void on_off(const pz_graph *off, int want_fired, int poison) {
  pz_cuda_exec *e = make(off, 1, poison);
  if (!e) return;
  CHECK(pz_cuda_exec_per_batch(e));
  float *a = malloc(sizeof(float) * M * (size_t)vocab), *b = malloc(sizeof(float) * M * (size_t)vocab);
  for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
    const int m = sizes[i];
    pz_prezero_report rep;
    const pz_graph *gm = NULL;
    CHECK_OK(pz_cuda_exec_plan(e, m, &rep, &gm));
    int fired = pz_prezero_report_fired(&rep), cand = 0;
    for (int d = 0; d < rep.n_donors; d++) cand += rep.d[d].n;
    CHECK(cand > 0);
    if (want_fired == 0) {
      CHECK(fired == 0);
      CHECK(gm && gm->n_nodes == off->n_nodes && gm->n_tensors == off->n_tensors && count_prezero_ops(gm) == 0);
      CHECK(gm && memcmp(gm->nodes, off->nodes, sizeof(pz_node) * (size_t)off->n_nodes) == 0);
    } else {
      CHECK(fired == cand);
      CHECK(gm && count_prezero_ops(gm) > 0);
    }
    pz_prezero_report_free(&rep);
    CHECK_OK(pz_cuda_exec_set_prezero(e, 0));
    steps(e, m, a);
    CHECK_OK(pz_cuda_exec_set_prezero(e, 1));
    steps(e, m, b);
    bool same = memcmp(a, b, sizeof(float) * (size_t)m * (size_t)vocab) == 0;
    CHECK(same);
    if (!same) fprintf(stderr, "  m=%d: ON logits differ from OFF (want_fired %d)\n", m, want_fired);
  }
  free(a);
  free(b);
  pz_cuda_exec_free(e);
}

/* With the default choices, the plan fires exactly the consumers whose zero_init = false GEMM
 * is split-K by the handle's own resolution. */
static void plan_matches_choice(const pz_graph *off) {
  pz_cuda_exec *e = make(off, 1, 0);
  pz_gemm_ctx *ctx = NULL;
  CHECK_OK(pz_gemm_ctx_create(&ctx));
  if (!e || !ctx) { pz_cuda_exec_free(e); pz_gemm_ctx_destroy(ctx); return; }
  for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
    pz_prezero_report rep;
    CHECK_OK(pz_cuda_exec_plan(e, sizes[i], &rep, NULL));
    for (int d = 0; d < rep.n_donors; d++)
      for (int k = 0; k < rep.d[d].n; k++) {
        const pz_prezero_consumer *c = &rep.d[d].c[k];
        pz_gemm_config cfg;
        bool split = false;
        CHECK_OK(pz_gemm_choose(ctx, sizes[i], (int)c->n, (int)c->k, false, &cfg, &split));
        bool gate_dropped = c->kind == PZ_PREZERO_SLOT_OPROJ && strstr(c->why, "gate") != NULL;
        CHECK(c->fires == (split && !gate_dropped));
      }
    pz_prezero_report_free(&rep);
  }
  pz_gemm_ctx_destroy(ctx);
  pz_cuda_exec_free(e);
}

static void static_cannot_switch(const pz_graph *off) {
  pz_graph *g = NULL;
  CHECK_OK(pz_graph_clone(off, &g));
  pz_pass_opts po = PZ_PASS_OPTS_INIT;
  po.prezero = 1;
  CHECK_OK(pz_run_passes(g, &po, NULL, NULL));
  pz_cuda_exec *e = make(g, 1, 0);
  if (e) {
    CHECK(!pz_cuda_exec_per_batch(e));
    CHECK_ST(pz_cuda_exec_set_prezero(e, 0), PZ_ERR_INVALID_ARG);
    CHECK_OK(pz_cuda_exec_set_prezero(e, 1));
  }
  pz_cuda_exec_free(e);
  pz_graph_free(g);
}

int main(void) {
  if (pz_cuda_device_count() < 1) {
    printf("no GPU: skipped\n");
    return 77;
  }
  pz_graph *off = off_graph();
  if (!off) TEST_DONE();
  setenv("PREZERO_GEMM_FORCE", "fullk", 1);
  on_off(off, 0, 0);
  setenv("PREZERO_GEMM_FORCE", "zero", 1);
  setenv("PREZERO_GEMM_SPLITS", "2", 1);
  setenv("PREZERO_FORCE_GATE", "on", 1);
  on_off(off, 1, 1);
  unsetenv("PREZERO_GEMM_FORCE");
  unsetenv("PREZERO_GEMM_SPLITS");
  unsetenv("PREZERO_FORCE_GATE");
  plan_matches_choice(off);
  static_cannot_switch(off);
  pz_graph_free(off);
  TEST_DONE();
}
