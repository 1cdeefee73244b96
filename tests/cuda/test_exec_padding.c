/* Padding rows of a captured batch size (exec.c step_once, docs/ARCHITECTURE.md: a batch of m rows
 * runs the graph of the next captured size M; rows m..M-1 attend one KV position and route to no
 * expert unless PREZERO_PAD_ATTN=0), through the CUDA executor on `tiny` (MLA + MoE) and `tiny_llama` (GQA, dense),
 * 2 layers, TP 1, every GEMM forced to full K (deterministic), contexts 40..75 and unequal:
 *  - batch 5 in the graph of 8 (padded) against the eager executor at batch 5 (no padding): logits
 *    within LOGIT_REL of each row's rms (the MLA split count and chunk follow the batch, so the
 *    attention sums in another order), greedy ids equal where the top-2 gap is clear;
 *  - padding rows at one position against PREZERO_PAD_ATTN=0 (their whole context), same graph of 8:
 *    the real rows within LOGIT_REL (MLA: the balanced schedule's chunk follows the padding rows'
 *    lengths), and bit-identical for GQA, whose split of a row depends on that row alone;
 *  - the padding rule does not leak into a full batch: batch 8 bit-identical with and without it.
 * Skipped (77) without a GPU. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "backend/cuda/exec.h"
#include "backend/cuda/runtime.h"
#include "core/options.h"
#include "model/builder.h"
#include "model/config.h"
#include "pz_test.h"

#define LOGIT_REL 1.5e-2 /* test_gqa_exec's CUDA bound, relative to each row's rms */
enum { M = 8, STEPS = 3, CTX = 128 };

static pz_cuda_exec *make(const pz_graph *g, int graphs, int pad_attn, pz_runtime_opts *ro) {
  static const int sizes[] = {8};
  pz_runtime_opts_default(ro);
  snprintf(ro->gemm_force, sizeof ro->gemm_force, "fullk");
  ro->pad_attn = pad_attn;
  pz_cuda_exec_opts xo = PZ_CUDA_EXEC_OPTS_INIT;
  xo.seed = 7;
  xo.graphs = graphs;
  xo.prezero = 0;
  xo.n_capture = 1;
  memcpy(xo.capture, sizes, sizeof sizes);
  pz_device_desc_default(&xo.dev);
  xo.runtime = ro;
  pz_cuda_exec *x = NULL;
  CHECK_OK(pz_cuda_exec_create(g, &xo, &x));
  return x;
}

/* STEPS teacher-forced steps of m rows; row i at position 40 + 5 i + step (unequal contexts). */
static void run(pz_cuda_exec *x, int m, int64_t vocab, float *logits, int32_t *ids) {
  int32_t t[M], pos[M];
  for (int i = 0; i < m; i++) t[i] = (int32_t)((i * 389 + 17) % vocab);
  for (int s = 0; s < STEPS && x; s++) {
    for (int i = 0; i < m; i++) pos[i] = 40 + 5 * i + s;
    CHECK_OK(pz_cuda_exec_step(x, m, t, pos, ids + s * m));
    CHECK_OK(pz_cuda_exec_logits(x, m, logits + (size_t)s * m * vocab));
    for (int i = 0; i < m; i++) t[i] = (int32_t)((t[i] * 31 + s + 1) % vocab); /* teacher-forced */
  }
}

/* Worst |a - b| / rms(a) over the rows; ids equal where a's top-2 gap exceeds twice the bound. */
static double compare(const float *a, const float *b, const int32_t *ia, const int32_t *ib, int rows, int64_t vocab,
                      int *clear, int *ids_equal) {
  double worst = 0;
  *clear = *ids_equal = 0;
  for (int r = 0; r < rows; r++) {
    const float *x = a + (size_t)r * vocab, *y = b + (size_t)r * vocab;
    double ss = 0, d = 0;
    float b1 = -INFINITY, b2 = -INFINITY;
    for (int64_t j = 0; j < vocab; j++) {
      ss += (double)x[j] * x[j];
      double e = fabs((double)x[j] - y[j]);
      if (!(e <= d)) d = e; /* NaN propagates */
      if (x[j] > b1) { b2 = b1; b1 = x[j]; }
      else if (x[j] > b2) b2 = x[j];
    }
    const double rms = sqrt(ss / (double)vocab), rel = rms > 0 ? d / rms : d;
    if (!(rel <= worst)) worst = rel;
    if ((b1 - b2) > 2 * LOGIT_REL * rms) { (*clear)++; *ids_equal += ia[r] == ib[r]; }
  }
  return worst;
}

static void one_model(const char *model, bool gqa) {
  pz_model_config mc;
  CHECK_OK(pz_config_load(model, &mc));
  const int64_t vocab = mc.vocab_size;
  pz_build_opts bo = PZ_BUILD_OPTS_INIT;
  bo.tp = 1;
  bo.m = M;
  bo.max_ctx = CTX;
  bo.layers = 2;
  pz_graph *g = NULL;
  CHECK_OK(pz_build_decode_graph(&mc, &bo, &g));
  if (!g) return;
  pz_runtime_opts ra, rb, rc;
  pz_cuda_exec *pad = make(g, 1, -1, &ra), *eager = make(g, 0, -1, &rb), *full = make(g, 1, 0, &rc);
  const size_t nl = (size_t)STEPS * M * (size_t)vocab;
  float *la = malloc(nl * 4), *lb = malloc(nl * 4), *lc = malloc(nl * 4);
  int32_t ia[STEPS * M], ib[STEPS * M], ic[STEPS * M];
  if (pad && eager && full && la && lb && lc) {
    CHECK(pz_cuda_exec_graphs(pad) && !pz_cuda_exec_graphs(eager) && pz_cuda_exec_padded_m(pad, 5) == M);
    const int m = 5;
    run(pad, m, vocab, la, ia);
    run(eager, m, vocab, lb, ib);
    run(full, m, vocab, lc, ic);
    int clear, eq;
    double d_eager = compare(lb, la, ib, ia, STEPS * m, vocab, &clear, &eq);
    CHECK(d_eager <= LOGIT_REL && eq == clear && clear >= STEPS * m / 4);
    printf("%-10s batch 5 in the graph of 8 vs eager batch 5: worst |logit diff| %.2e of the row rms (bound %g), "
           "ids equal on %d/%d clear rows\n", model, d_eager, LOGIT_REL, eq, clear);
    double d_full = compare(lc, la, ic, ia, STEPS * m, vocab, &clear, &eq);
    const bool same = !memcmp(la, lc, sizeof(float) * (size_t)STEPS * m * (size_t)vocab);
    CHECK(d_full <= LOGIT_REL && eq == clear);
    if (gqa) CHECK(same);
    printf("%-10s padding rows at one position vs PREZERO_PAD_ATTN=0: real rows %s (worst %.2e of the row rms)\n", model,
           same ? "bit-identical" : "within the bound", d_full);
    /* a full batch has no padding: the rule changes nothing */
    run(pad, M, vocab, la, ia);
    run(full, M, vocab, lc, ic);
    const bool same8 = !memcmp(la, lc, sizeof(float) * (size_t)STEPS * M * (size_t)vocab) &&
                       !memcmp(ia, ic, sizeof(int32_t) * (size_t)STEPS * M);
    CHECK(same8);
    printf("%-10s batch 8 (no padding) with and without the rule: %s\n", model, same8 ? "bit-identical" : "DIFFERS");
  }
  free(la);
  free(lb);
  free(lc);
  pz_cuda_exec_free(pad);
  pz_cuda_exec_free(eager);
  pz_cuda_exec_free(full);
  pz_graph_free(g);
}

int main(void) {
  if (pz_cuda_device_count() < 1) {
    printf("no GPU: skipped\n");
    return 77;
  }
  one_model("tiny", false);
  one_model("tiny_llama", true);
  TEST_DONE();
}
