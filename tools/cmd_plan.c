/* prezero plan: the per-batch prezero plan of a model, as the CUDA executor makes it: for each
 * batch size, every donor's fill (columns, bytes, fill CTAs, predicted added µs) and every
 * consumer with the kernel it runs there and whether it fires. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "bench_common.h"
#include "cli.h"
#include "cli_args.h"
#include "core/gate.h"
#include "core/options.h"
#include "model/builder.h"
#include "model/config.h"
#include "passes/passes.h"
#include "passes/prezero.h"
#ifdef PZ_HAVE_CUDA
#include <cuda_runtime.h>
#include "backend/cuda/cuda_util.h"
#include "backend/cuda/exec.h"
#include "backend/cuda/gate_cuda.h"
#include "backend/cuda/gemm.h"
#include "backend/cuda/runtime.h"
#include "backend/cuda/tuner.h"
#endif

#define MAX_B 16

static void usage(FILE *f) {
  fprintf(f,
          "usage: prezero plan [options]\n"
          "  --config NAME|PATH  model preset (%s) or a config.json path (default kimi_k2)\n"
          "  --tp T              tensor-parallel degree (default 1)\n"
          "  --batch LIST        batch sizes m, ascending, 1..%d (default 1,2,4,8,16,32,64,128)\n"
          "  --layers N          first N layers (default: up to the first layer of each kind, dense and\n"
          "                      MoE, the model has; later layers repeat their shapes)\n"
          "  --help              this text\n"
          "For each batch size, prints what the CUDA executor's per-batch prezero plan does: each donor's\n"
          "fill (columns, bytes, fill CTAs, predicted added us) and each consumer GEMM with the kernel it\n"
          "runs at that m and whether it fires (its kernel zeroes its output, so prezero skips that).\n"
          "With a GPU the choices are that GPU's (tuner table or heuristic) and the gate is calibrated on\n"
          "it; without one they are those of an NVIDIA H200 (132 SMs, built-in table, H200 gate figures).\n",
          pz_config_preset_names(), PZ_MAX_BATCH);
}

static int fail(const char *what) {
  fprintf(stderr, "prezero plan: %s: %s; see 'prezero plan --help'\n", what, pz_last_error());
  return PZ_CLI_EXIT_ERROR;
}


#ifdef PZ_HAVE_CUDA
/* What an H200 reports (cudaMemGetInfo total) and holds free before the executor, when none is
 * visible: 139.8 GiB total, the CUDA context's ~0.5 GiB taken. */
#define H200_TOTAL_BYTES 150110011392LL
#define H200_CONTEXT_BYTES (512LL << 20)
#define PLAN_MARGIN ((int64_t)1 << 30) /* prezero compare's margin beside the reserve */

/* "# memory per GPU: ..." from the one memory plan (cuda/runtime.h) of the whole model at the
 * largest batch and context: the stored bytes (INT4 / FP8 experts at their packed size), one MoE
 * and one dense layer, and how many layers fit beside the reserve on this GPU (or a modelled H200),
 * weights once with prezero compare's per-batch graph sets. */
static int memory_line(const pz_model_config *mc, int tp, int m, int64_t ctx, bool gpu, const pz_runtime_opts *ro) {
  pz_build_opts bo = PZ_BUILD_OPTS_INIT;
  bo.tp = tp;
  bo.m = m;
  bo.layers = 0;
  bo.max_ctx = ctx;
  pz_graph *g = NULL;
  if (pz_build_decode_graph(mc, &bo, &g) != PZ_OK) return -1;
  const char *experts = "bf16";
  char eq[64];
  for (int i = 0; i < g->n_nodes; i++)
    if (g->nodes[i].op == PZ_OP_MOE) {
      const pz_moe_params *p = &g->nodes[i].p.moe;
      if (p->wquant == 1) snprintf(eq, sizeof eq, "int4 W4A16 group %lld", (long long)p->q_group), experts = eq;
      else if (p->wquant == 2)
        snprintf(eq, sizeof eq, "fp8 W8A16 block %lldx%lld", (long long)p->q_block_rows, (long long)p->q_block_cols), experts = eq;
      break;
    }
  pz_cuda_mem_plan mp;
  pz_status st;
  if (gpu) st = pz_cuda_plan_memory(g, true, tp, ro->cuda_reserve_mb, PLAN_MARGIN, &mp);
  else
    st = pz_cuda_plan_memory_budget(g, true, H200_TOTAL_BYTES - H200_CONTEXT_BYTES -
                                                 pz_cuda_reserve_for(H200_TOTAL_BYTES, ro->cuda_reserve_mb) - PLAN_MARGIN,
                                    &mp);
  pz_graph_free(g);
  if (st != PZ_OK) return -1;
  int64_t moe = 0, dense = 0;
  for (int L = 0; L < mp.n_layers; L++) {
    const int64_t b = mp.cum[L + 1] - mp.cum[L];
    if (pz_config_layer_is_moe(mc, L)) moe = b;
    else dense = b;
  }
  const double G = 1073741824.0;
  printf("# memory per GPU (batch %d, context %lld): %.2f GiB outside the layers, %.2f GiB per MoE layer (routed experts %s)",
         m, (long long)ctx, mp.cum[0] / G, moe / G, experts);
  if (dense) printf(", %.2f GiB per dense layer", dense / G);
  printf("; %d of %d layers fit in %.1f GiB (%s, minus the reserve and 1 GiB, as prezero compare plans)\n", mp.fit,
         mp.n_layers, mp.budget / G, gpu ? "GPU 0's free memory" : "the free memory of a modelled H200 of 139.8 GiB");
  pz_cuda_mem_plan_free(&mp);
  return 0;
}
#endif

/* Layers 0..N-1 with N the smallest count that holds the first dense and the first MoE layer
 * (of the kinds the model has): first_k_dense_replace + 1 for the DeepSeek-V2 family, 1 for a
 * dense model or one whose layer 0 is MoE and all others too. */
static int default_layers(const pz_model_config *mc) {
  int64_t first[2] = {-1, -1}; /* dense, MoE */
  for (int64_t L = 0; L < mc->num_hidden_layers && (first[0] < 0 || first[1] < 0); L++) {
    const int k = pz_config_layer_is_moe(mc, L) ? 1 : 0;
    if (first[k] < 0) first[k] = L;
  }
  const int64_t last = first[0] > first[1] ? first[0] : first[1];
  return (int)(last + 1);
}

int pz_cmd_plan(int argc, char **argv) {
  const char *config = "kimi_k2";
  int bs[MAX_B] = {1, 2, 4, 8, 16, 32, 64, 128}, nb = 8, tp = 1, layers = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(stdout); return 0; }
    bool takes = !strcmp(a, "--config") || !strcmp(a, "--tp") || !strcmp(a, "--batch") || !strcmp(a, "--layers");
    if (!takes) { fprintf(stderr, "prezero plan: unknown option '%s'; see 'prezero plan --help'\n", a); return 2; }
    if (!v) { fprintf(stderr, "prezero plan: %s needs a value; see 'prezero plan --help'\n", a); return 2; }
    i++;
    int one[1];
    if (!strcmp(a, "--config")) {
      if (pz_cli_empty_model_flag("plan", a, v, pz_config_preset_names())) return PZ_CLI_EXIT_USAGE;
      config = v;
    }
    else if (!strcmp(a, "--batch")) {
      nb = pz_bench_parse_list(v, bs, MAX_B, 1, PZ_MAX_BATCH);
      bool asc = nb >= 1;
      for (int k = 1; k < nb; k++) asc = asc && bs[k] > bs[k - 1];
      if (!asc) {
        fprintf(stderr, "prezero plan: --batch '%s' is not an ascending list of 1..%d; e.g. --batch 1,8,64\n", v, PZ_MAX_BATCH);
        return 2;
      }
    } else if (pz_bench_parse_list(v, one, 1, 1, 100000) != 1) {
      fprintf(stderr, "prezero plan: %s needs a positive integer, got '%s'; see 'prezero plan --help'\n", a, v);
      return 2;
    } else if (!strcmp(a, "--tp")) tp = one[0];
    else layers = one[0];
  }
  pz_runtime_opts ro;
  char bad[300];
  if (pz_runtime_opts_from_env(&ro, bad, sizeof bad) != 0) {
    fprintf(stderr, "prezero plan: %s; fix or unset that variable\n", bad);
    return PZ_CLI_EXIT_USAGE;
  }
  if (pz_pass_check_disable(ro.disable_passes) != PZ_OK) { /* refused as run and graph refuse it */
    fprintf(stderr, "prezero plan: %s\n", pz_last_error());
    return PZ_CLI_EXIT_USAGE;
  }
  pz_model_config mc;
  if (pz_config_load(config, &mc) != PZ_OK) {
    fprintf(stderr, "prezero plan: %s; give --config a preset name or a config.json path\n", pz_last_error());
    return PZ_CLI_EXIT_ERROR;
  }
  if (layers > mc.num_hidden_layers) {
    fprintf(stderr, "prezero plan: --layers %d exceeds num_hidden_layers (%lld) of %s; use --layers 1..%lld\n", layers,
            (long long)mc.num_hidden_layers, mc.name, (long long)mc.num_hidden_layers);
    return PZ_CLI_EXIT_USAGE;
  }
  if (layers == 0) layers = default_layers(&mc);
  pz_build_opts bo = PZ_BUILD_OPTS_INIT;
  bo.tp = tp;
  bo.m = bs[nb - 1];
  bo.layers = layers;
  bo.max_ctx = mc.max_position_embeddings < 4096 ? mc.max_position_embeddings : 4096;
  pz_graph *g = NULL;
  pz_status bst = pz_build_decode_graph(&mc, &bo, &g);
  if (bst != PZ_OK) { /* e.g. a --tp that does not divide the heads: the command line is wrong */
    const char *msg = pz_last_error();
    fprintf(stderr, "prezero plan: %s%s\n", msg, strstr(msg, "; ") ? "" : "; see 'prezero plan --help'");
    return bst == PZ_ERR_INVALID_ARG ? PZ_CLI_EXIT_USAGE : PZ_CLI_EXIT_ERROR;
  }
  pz_device_desc dev;
  pz_device_desc_default(&dev);
  pz_prezero_batch b = {.tp = tp, .dev = &dev, .attn_slots = ro.attn_slots};
  int rc = 0;
#ifdef PZ_HAVE_CUDA
  pz_gemm_ctx *ctx = NULL;
  pz_status st;
  const bool gpu = pz_cuda_device_count() > 0;
  if (gpu) {
    st = PZ_CUDA_STATUS(cudaSetDevice(0));
    if (st == PZ_OK) st = pz_gemm_ctx_create(&ctx);
    if (st == PZ_OK) st = pz_gate_calibrate_cuda(0, ro.gate_calibrate, &dev);
  } else {
    st = pz_gemm_ctx_create_model("NVIDIA H200", 132, true, &ctx);
  }
  if (st != PZ_OK) { /* before anything is printed: the one error line is all the output */
    pz_gemm_ctx_destroy(ctx);
    pz_graph_free(g);
    return fail("the GEMM handle");
  }
  pz_device_desc_apply_opts(&dev, &ro);
  if (gpu)
    printf("# device: %s (%d SMs), tuner table: %s\n", pz_gemm_ctx_device_name(ctx), pz_gemm_ctx_sm_count(ctx),
           pz_gemm_ctx_table(ctx)->source);
  else
    printf("# device: none visible; modelled as NVIDIA H200 (132 SMs, Hopper), tuner table: %s, gate: H200 figures\n",
           pz_gemm_ctx_table(ctx)->source);
  b.fires = pz_cuda_gemm_fires; /* the executor's own question (exec.h) */
  b.user = ctx;
  if (!ro.plan_per_batch) {
    b.fires = NULL; /* PREZERO_PLAN_PER_BATCH=0: the executor runs the static rewrite at every size */
    printf("# PREZERO_PLAN_PER_BATCH=0: the static rewrite (every legal consumer gets a slice; the gate decides o_proj's fill at run time)\n");
  }
  if (!ro.gemm_tuner) printf("# PREZERO_GEMM_TUNER=0: the table is not consulted; the heuristic chooses\n");
#else
  pz_device_desc_apply_opts(&dev, &ro);
  printf("# built without CUDA: kernel choices unknown, every legal consumer counted as firing\n");
#endif
  printf("# %s, TP %d, layers 0..%d of %lld\n", mc.name, tp, layers - 1, (long long)mc.num_hidden_layers);
#ifdef PZ_HAVE_CUDA
  if (memory_line(&mc, tp, bs[nb - 1], (int64_t)bo.max_ctx, gpu, &ro) != 0) {
    pz_gemm_ctx_destroy(ctx);
    pz_graph_free(g);
    return fail("the memory plan");
  }
#endif
  if (pz_pass_disabled_in(ro.disable_passes, "prezero")) {
    printf("# the prezero pass is disabled (PREZERO_DISABLE_PASSES): nothing is rewritten, every batch size runs the OFF graph\n");
#ifdef PZ_HAVE_CUDA
    pz_gemm_ctx_destroy(ctx);
#endif
    pz_graph_free(g);
    return 0;
  }
  for (int i = 0; i < nb && rc == 0; i++) {
    pz_graph *gv = NULL;
    pz_prezero_report rep;
    b.m = bs[i];
    if (pz_graph_clone(g, &gv) != PZ_OK || pz_pass_prezero_batch(gv, &b, NULL, NULL, &rep) != PZ_OK) {
      rc = fail("the prezero pass");
      pz_graph_free(gv);
      break;
    }
    printf("\n## batch %d\n", bs[i]);
    if (pz_prezero_report_print(&rep, g, tp, &dev, stdout) != PZ_OK) rc = fail("printing the plan");
    pz_prezero_report_free(&rep);
    pz_graph_free(gv);
  }
#ifdef PZ_HAVE_CUDA
  pz_gemm_ctx_destroy(ctx);
#endif
  pz_graph_free(g);
  return rc;
}
