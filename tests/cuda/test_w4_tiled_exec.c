/* The CUDA executor's tiled INT4 experts (w4_tiled.h, pz_cuda_tile_w4_experts) on the tiny preset
 * with synthetic INT4 routed experts (`--quant int4`), TP 1:
 *  - with the default options every INT4 expert array (words and scales of gate, up and down of
 *    each MoE layer) is tiled, and pz_cuda_exec_read gives it back bit-identical to the CPU
 *    executor's weights (the synthetic source, model/quant_synth.h, whose bits the device fill
 *    gives), read whole and as prefixes of odd lengths;
 *  - with moe_w4_tiled = 0 nothing is tiled and the read-back is the same;
 *  - a decode step with and without tiling gives logits within the W4A16 kernels' rounding of each
 *    other (their group sums run in different k-slot orders: moe_q.h), and both within the bound of
 *    test_moe_w4a16's engine case of the CPU's;
 *  - prezero ON (the executor's per-batch plans) against OFF with the shared experts forced through
 *    the GEMMs (PREZERO_MLP_GEMM=1) at atomic split-K of 2 splits: every MoE layer's shared gate | up
 *    slot fires (the plan says so, and the ON graph has the slot), and the logits of two steps are
 *    bit-identical (0 + a + b == a + b), eagerly and from CUDA graphs; the same with FP8 block experts.
 * Exits 77 (skipped) without a GPU. */
#define _POSIX_C_SOURCE 200809L
#include <cuda_runtime.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "backend/cpu/cpu_backend.h"
#include "backend/cuda/exec.h"
#include "passes/prezero.h"
#include "core/options.h"
#include "model/builder.h"
#include "model/config.h"
#include "model/quant_synth.h"
#include "pz_test.h"

#define M 2

static int is_q_expert(const pz_graph *g, int t) {
  for (int i = 0; i < g->n_nodes; i++) {
    const pz_node *n = &g->nodes[i];
    if (n->op != PZ_OP_MOE || n->p.moe.wquant != 1 || n->n_src < PZ_MOE_NSRC_Q) continue;
    const int s[6] = {PZ_MOE_W_GATE, PZ_MOE_W_UP, PZ_MOE_W_DOWN, PZ_MOE_S_GATE, PZ_MOE_S_UP, PZ_MOE_S_DOWN};
    for (int j = 0; j < 6; j++)
      if (n->src[s[j]] == t) return j < 3 ? 1 : 2;
  }
  return 0;
}

/* One CUDA executor (tiled or not) against the CPU executor ce: marks, read-back, one step's logits into lg. */
static void run(const pz_graph *g, pz_cpu_exec *ce, int tiled, float *lg, int64_t vocab) {
  pz_runtime_opts ro;
  pz_runtime_opts_default(&ro);
  ro.moe_w4_tiled = tiled;
  pz_cuda_exec_opts o = PZ_CUDA_EXEC_OPTS_INIT;
  o.seed = 4242;
  o.graphs = 0;
  o.runtime = &ro;
  pz_cuda_exec *ge = NULL;
  CHECK_OK(pz_cuda_exec_create(g, &o, &ge));
  if (!ge) return;
  int arrays = 0, marked = 0, bad = 0;
  for (int t = 0; t < g->n_tensors; t++) {
    const int kind = is_q_expert(g, t);
    if (!kind) continue;
    arrays++;
    const int mk = pz_cuda_exec_w4_tiled(ge, 0, t);
    marked += mk != 0;
    CHECK(mk == (tiled ? kind : 0));
    const pz_tensor *x = &g->tensors[t];
    const size_t bytes = (size_t)pz_tensor_numel(x) * pz_dtype_size(x->dtype);
    unsigned char *h = malloc(bytes);
    const size_t cuts[] = {bytes, 37, bytes / 2 + 3, 1};
    for (size_t c = 0; c < sizeof cuts / sizeof cuts[0] && h; c++) {
      memset(h, 0xa5, bytes);
      CHECK_OK(pz_cuda_exec_read(ge, 0, t, h, cuts[c]));
      if (memcmp(h, pz_cpu_exec_data(ce, 0, t), cuts[c]) != 0 && bad++ < 4)
        fprintf(stderr, "%s: the first %zu bytes read back differ from the CPU fill (tiled %d)\n", x->name, cuts[c], tiled);
      for (size_t i = cuts[c]; i < bytes; i++)
        if (h[i] != 0xa5) { bad++; fprintf(stderr, "%s: a %zu-byte read wrote past its end\n", x->name, cuts[c]); break; }
    }
    free(h);
  }
  CHECK(bad == 0);
  CHECK(arrays >= 6 && marked == (tiled ? arrays : 0));
  printf("tiled %d: %d INT4 expert arrays, %d tiled, read back bit-identical to the CPU fill (whole and prefixes)\n",
         tiled, arrays, marked);
  int32_t tok[M] = {3, 11}, pos[M] = {0, 0}, next[M];
  CHECK_OK(pz_cuda_exec_step(ge, M, tok, pos, next));
  CHECK_OK(pz_cuda_exec_logits(ge, M, lg));
  (void)vocab;
  pz_cuda_exec_free(ge);
}

/* Two decode steps of M tokens through a per-batch executor (prezero 0 or 1) into lg [2, M, vocab]. */
static void steps(const pz_graph *g, int prezero, int graphs, float *lg, int64_t vocab, int *fired) {
  pz_runtime_opts ro;
  CHECK(pz_runtime_opts_from_env(&ro, NULL, 0) == 0);
  pz_cuda_exec_opts o = PZ_CUDA_EXEC_OPTS_INIT;
  o.seed = 4242;
  o.graphs = graphs;
  o.prezero = prezero;
  o.runtime = &ro;
  pz_cuda_exec *ge = NULL;
  CHECK_OK(pz_cuda_exec_create(g, &o, &ge));
  if (!ge) return;
  if (fired) {
    pz_prezero_report rep;
    const pz_graph *gm = NULL;
    *fired = 0;
    CHECK_OK(pz_cuda_exec_plan(ge, M, &rep, &gm));
    for (int i = 0; i < rep.n_donors; i++)
      for (int k = 0; k < rep.d[i].n; k++)
        if (rep.d[i].c[k].kind == PZ_PREZERO_SLOT_SHARED_GU && rep.d[i].c[k].fires) {
          (*fired)++;
          const pz_node *n = gm ? &gm->nodes[rep.d[i].c[k].node] : NULL;
          CHECK(n && n->op == PZ_OP_MOE && n->src[PZ_MOE_SH_GU_PREZERO] >= 0);
        }
    pz_prezero_report_free(&rep);
  }
  int32_t tok[M] = {3, 11}, pos[M] = {0, 0}, next[M];
  for (int s = 0; s < 2; s++) {
    CHECK_OK(pz_cuda_exec_step(ge, M, tok, pos, next));
    CHECK_OK(pz_cuda_exec_logits(ge, M, lg + (size_t)s * M * vocab));
    for (int i = 0; i < M; i++) {
      tok[i] = next[i];
      pos[i]++;
    }
  }
  pz_cuda_exec_free(ge);
}

static void test_prezero_shared_gu(const pz_graph *g, int64_t vocab) {
  setenv("PREZERO_GEMM_FORCE", "atomic", 1);
  setenv("PREZERO_GEMM_SPLITS", "2", 1);
  setenv("PREZERO_MLP_GEMM", "1", 1);
  const size_t n = (size_t)2 * M * vocab;
  float *a = calloc(n, sizeof(float)), *b = calloc(n, sizeof(float));
  for (int graphs = 0; graphs <= 1 && a && b; graphs++) {
    int fired = -1;
    memset(a, 0, n * 4);
    memset(b, 0xff, n * 4);
    steps(g, 0, graphs, a, vocab, NULL);
    steps(g, 1, graphs, b, vocab, &fired);
    CHECK(fired == 1); /* the one MoE layer of the two */
    CHECK(memcmp(a, b, n * 4) == 0);
    printf("prezero ON vs OFF, shared gate | up slot fired in %d MoE layer(s), graphs %d: logits %s\n", fired, graphs,
           memcmp(a, b, n * 4) ? "DIFFER" : "bit-identical");
  }
  free(a);
  free(b);
  unsetenv("PREZERO_GEMM_FORCE");
  unsetenv("PREZERO_GEMM_SPLITS");
  unsetenv("PREZERO_MLP_GEMM");
}

int main(void) {
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
    printf("no CUDA GPU: skipped\n");
    return 77;
  }
  pz_model_config mc;
  CHECK_OK(pz_config_load("tiny", &mc));
  pz_quant_config_synthetic(PZ_WQ_INT4, &mc.quant);
  pz_build_opts bo = {.tp = 1, .m = M, .max_ctx = 16, .layers = 2};
  pz_graph *g = NULL;
  CHECK_OK(pz_build_decode_graph(&mc, &bo, &g));
  if (!g) TEST_DONE();
  /* The CPU executor takes quantised weights only from a source: the synthetic one, whose bits the
   * CUDA executor's device fill gives (model/quant_synth.h, core/quant_fill.h). */
  pz_quant_synth_ctx synth = {.q = {.seed = 4242}, .g = g};
  pz_cpu_exec_opts co = PZ_CPU_EXEC_OPTS_INIT;
  co.seed = 4242;
  co.threads = 2;
  co.load_weight = pz_quant_synth_fill;
  co.load_user = &synth;
  pz_cpu_exec *ce = NULL;
  CHECK_OK(pz_cpu_exec_create(g, &co, &ce));
  const int64_t vocab = mc.vocab_size;
  float *a = calloc((size_t)(M * vocab), sizeof(float)), *b = calloc((size_t)(M * vocab), sizeof(float));
  if (ce && a && b) {
    run(g, ce, 1, a, vocab);
    run(g, ce, 0, b, vocab);
    double mx = 0, md = 0;
    for (int64_t i = 0; i < M * vocab; i++) {
      mx = fmax(mx, fabs(b[i]));
      md = fmax(md, fabs((double)a[i] - b[i]));
    }
    printf("logits tiled vs stored layout: max |diff| %.3e (max |logit| %.3f)\n", md, mx);
    CHECK(mx > 0 && md <= 1e-2 * mx);
  }
  test_prezero_shared_gu(g, vocab);
  { /* the same with FP8 block experts (the W8A16 launcher shares the shared experts' path, moe_q_common.cuh) */
    pz_model_config m8;
    CHECK_OK(pz_config_load("tiny", &m8));
    pz_quant_config_synthetic(PZ_WQ_FP8, &m8.quant);
    pz_graph *g8 = NULL;
    CHECK_OK(pz_build_decode_graph(&m8, &bo, &g8));
    if (g8) {
      int fp8 = 0;
      for (int i = 0; i < g8->n_nodes; i++) fp8 += g8->nodes[i].op == PZ_OP_MOE && g8->nodes[i].p.moe.wquant == 2;
      CHECK(fp8 == 1);
      test_prezero_shared_gu(g8, vocab);
      pz_graph_free(g8);
    }
  }
  free(a);
  free(b);
  pz_cpu_exec_free(ce);
  pz_graph_free(g);
  TEST_DONE();
}
