/* prezero bench moe: the CUDA MoE block (router top-k + routed + shared experts) on Kimi-K2
 * per-rank shapes at TP 1/2/4, uniform random routing, beside a streaming read of the bytes. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli.h"
#include "bench_common.h"

#define NSETS 4      /* logit sets rotated inside one graph: different experts each launch */

static void usage(FILE *f) {
  fprintf(f,
          "usage: prezero bench moe [--json FILE] [--md FILE] [--m 4,8,...] [--tp 1,2,4] [--reps N]\n"
          "  Times route + gather + gate/up + down + combine (pz_moe_launch) for Kimi-K2 per-rank\n"
          "  shapes in CUDA-graph replays: %d random logit sets (uniform routing) rotated inside\n"
          "  the graph; median of --reps (default 7) replays. Bandwidth counts the distinct chosen\n"
          "  routed experts' weight bytes (and, in its own column, + the shared expert's).\n",
          NSETS);
}

#ifdef PZ_HAVE_CUDA
#include <cuda_runtime.h>
#include <cjson/cJSON.h>
#include "backend/cuda/moe.h"
#include "bench/dev/dev_helpers.h" /* pz_moe_fill_bf16, pz_moe_stream_read */
#include "core/status.h"

/* Kimi-K2 (configs/kimi_k2.json): H 7168, 384 routed experts, top 8, moe_intermediate 2048,
 * 1 shared expert, sigmoid + noaux_tc, 1 group, norm_topk_prob, routed_scaling_factor 2.827. */
#define KIMI_H 7168
#define KIMI_E 384
#define KIMI_K 8
#define KIMI_I 2048

#define BENCH_CHECK(call)                                                              \
  do {                                                                                 \
    pz_status s_ = (call);                                                             \
    if (s_ != PZ_OK) {                                                                 \
      fprintf(stderr, "prezero bench moe: %s failed: %s\n", #call, pz_last_error());  \
      goto fail;                                                                       \
    }                                                                                  \
  } while (0)
#define BENCH_CUDA(call) PZ_BENCH_CUDA("bench moe", call, goto fail)

int pz_cmd_bench_moe(int argc, char **argv) {
  const char *json_path = NULL, *md_path = NULL;
  int ms[16] = {4, 8, 16, 32, 64, 128}, nm = 6, tps[8] = {1, 2, 4}, ntp = 3, reps = 7;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(stdout); return 0; }
    if (!v) { fprintf(stderr, "prezero bench moe: %s needs a value; see --help\n", a); return 2; }
    if (!strcmp(a, "--json")) json_path = v;
    else if (!strcmp(a, "--md")) md_path = v;
    else if (!strcmp(a, "--reps")) reps = atoi(v);
    else if (!strcmp(a, "--m")) {
      if ((nm = pz_bench_parse_list(v, ms, 16, 1, PZ_MOE_MAX_M)) <= 0) { fprintf(stderr, "prezero bench moe: --m wants a list like 4,16,128 (1..%d)\n", PZ_MOE_MAX_M); return 2; }
    } else if (!strcmp(a, "--tp")) {
      if ((ntp = pz_bench_parse_list(v, tps, 8, 1, 16)) <= 0) { fprintf(stderr, "prezero bench moe: --tp wants a list like 1,2,4\n"); return 2; }
      for (int t = 0; t < ntp; t++)
        if (KIMI_I % tps[t] || (KIMI_I / tps[t]) % 16) { fprintf(stderr, "prezero bench moe: TP %d does not divide 2048 into multiples of 16\n", tps[t]); return 2; }
    } else { fprintf(stderr, "prezero bench moe: unknown option '%s'; see --help\n", a); return 2; }
    i++;
  }
  if (reps < 3) reps = 3;
  if (pz_bench_need_gpus("bench moe", "this benchmark", 1, 0)) return 1;
  int rc = 1, min_tp = 1 << 30, max_m = 1;
  for (int t = 0; t < ntp; t++) min_tp = tps[t] < min_tp ? tps[t] : min_tp;
  for (int i = 0; i < nm; i++) max_m = ms[i] > max_m ? ms[i] : max_m;
  const int64_t H = KIMI_H, E = KIMI_E, Imax = KIMI_I / min_tp;
  struct cudaDeviceProp prop;
  PZ_BENCH_CUDA("bench moe", cudaGetDeviceProperties(&prop, 0), return 1);
  size_t fr = 0, tot = 0;
  PZ_BENCH_CUDA("bench moe", cudaMemGetInfo(&fr, &tot), return 1);
  const size_t mat = (size_t)E * Imax * H * 2, need = 3 * mat + ((size_t)2 << 30);
  pz_bf16 *wg = NULL, *wu = NULL, *wd = NULL, *sg = NULL, *su = NULL, *sd = NULL, *x = NULL;
  float *logits = NULL, *out = NULL;
  void *ws = NULL;
  unsigned *sink = NULL;
  cudaStream_t s = NULL;
  cJSON *root = cJSON_CreateObject(), *rows = NULL;
  FILE *md = NULL;
  if (fr < need) {
    fprintf(stderr, "prezero bench moe: %zu MB free, TP %d needs %zu MB; use a larger --tp\n", fr >> 20, min_tp, need >> 20);
    goto fail;
  }
  BENCH_CUDA(cudaStreamCreate(&s));
  BENCH_CUDA(cudaMalloc((void **)&wg, mat));
  BENCH_CUDA(cudaMalloc((void **)&wu, mat));
  BENCH_CUDA(cudaMalloc((void **)&wd, mat));
  BENCH_CUDA(cudaMalloc((void **)&sg, (size_t)Imax * H * 2));
  BENCH_CUDA(cudaMalloc((void **)&su, (size_t)Imax * H * 2));
  BENCH_CUDA(cudaMalloc((void **)&sd, (size_t)Imax * H * 2));
  BENCH_CUDA(cudaMalloc((void **)&x, (size_t)max_m * H * 2));
  BENCH_CUDA(cudaMalloc((void **)&logits, sizeof(float) * NSETS * max_m * E));
  BENCH_CUDA(cudaMalloc((void **)&out, sizeof(float) * max_m * H));
  BENCH_CUDA(cudaMalloc((void **)&sink, sizeof(unsigned)));
  {
    const float sc = 0.02f;
    BENCH_CHECK(pz_moe_fill_bf16(wg, (int64_t)(mat / 2), 1, sc, s));
    BENCH_CHECK(pz_moe_fill_bf16(wu, (int64_t)(mat / 2), 2, sc, s));
    BENCH_CHECK(pz_moe_fill_bf16(wd, (int64_t)(mat / 2), 3, sc, s));
    BENCH_CHECK(pz_moe_fill_bf16(sg, Imax * H, 4, sc, s));
    BENCH_CHECK(pz_moe_fill_bf16(su, Imax * H, 5, sc, s));
    BENCH_CHECK(pz_moe_fill_bf16(sd, Imax * H, 6, sc, s));
    BENCH_CHECK(pz_moe_fill_bf16(x, max_m * H, 7, 1.0f, s));
    float *hl = malloc(sizeof(float) * NSETS * max_m * E);
    uint64_t r = 88172645463325252ull;
    for (int64_t i = 0; i < NSETS * max_m * E; i++) {
      r ^= r << 13; r ^= r >> 7; r ^= r << 17;
      hl[i] = (float)((double)(r >> 11) / 9007199254740992.0 * 8.0 - 4.0);
    }
    pz_status copied = PZ_CUDA_STATUS(cudaMemcpy(logits, hl, sizeof(float) * NSETS * max_m * E, cudaMemcpyHostToDevice));
    free(hl);
    BENCH_CHECK(copied); /* the message names the cudaMemcpy */
  }
  {
    pz_moe_params p0;
    memset(&p0, 0, sizeof p0);
    p0.n_experts = (int)E; p0.top_k = KIMI_K; p0.n_group = 1; p0.topk_group = 1;
    p0.inter = Imax; p0.shared_inter = Imax;
    size_t wsb = pz_moe_workspace_bytes(max_m, H, &p0) + pz_moe_route_bytes(max_m, &p0);
    BENCH_CUDA(cudaMalloc(&ws, wsb));
  }
  BENCH_CUDA(cudaStreamSynchronize(s));

  printf("device: %s, %d SMs; Kimi-K2 MoE per rank (H %d, %d experts, top %d, 1 shared); "
         "%d logit sets per graph\n", prop.name, prop.multiProcessorCount, KIMI_H, KIMI_E, KIMI_K, NSETS);
  cJSON_AddStringToObject(root, "device", prop.name);
  {
    char cmd[512];
    pz_bench_command_line(cmd, sizeof cmd, "prezero bench moe", argc - 1, argv + 1);
    pz_bench_json_add_command_date(root, cmd);
  }
  cJSON_AddStringToObject(root, "method",
                          "CUDA graph of 2x4 pz_moe_launch (route+gather+gate/up+down+combine) cycling 4 random "
                          "logit sets; median per-launch time over reps replays after a warm-up; routed bytes = "
                          "distinct chosen experts x 3 x inter x H x 2 (averaged over the sets)");
  rows = cJSON_AddArrayToObject(root, "rows");
  md = md_path ? fopen(md_path, "w") : NULL;
  if (md) {
    fprintf(md, "| TP | m | experts read | routed MB | µs | routed TB/s | %% of 4.8 TB/s | +shared TB/s | read µs (same bytes) | µs / read |\n");
    pz_bench_md_rule(md, 10, 0);
  }
  printf("%3s %4s %8s %10s %9s %8s %7s %9s %9s %7s\n", "TP", "m", "experts", "routed MB", "us", "TB/s", "%HBM",
         "+sh TB/s", "read us", "/read");
  for (int ti = 0; ti < ntp; ti++) {
    const int tp = tps[ti];
    const int64_t I = KIMI_I / tp;
    pz_moe_params p;
    memset(&p, 0, sizeof p);
    p.n_experts = (int)E; p.top_k = KIMI_K; p.n_group = 1; p.topk_group = 1;
    p.scoring = PZ_SCORE_SIGMOID; p.topk_method = PZ_TOPK_NOAUX_TC; p.norm_topk_prob = true;
    p.routed_scaling_factor = 2.827f; p.inter = I; p.shared_inter = I;
    for (int mi = 0; mi < nm; mi++) {
      const int m = ms[mi];
      pz_moe_args a;
      memset(&a, 0, sizeof a);
      a.m = m; a.H = H; a.p = p; a.x = x; a.ldx = H;
      a.w_gate = wg; a.w_up = wu; a.w_down = wd; a.sh_gate = sg; a.sh_up = su; a.sh_down = sd;
      a.out = out; a.ld_out = H; a.workspace = ws;
      a.workspace_bytes = pz_moe_workspace_bytes(m, H, &p) + pz_moe_route_bytes(m, &p);
      /* distinct experts per logit set (the routing is deterministic) */
      double distinct = 0;
      int32_t *ids = (int32_t *)((char *)ws + pz_moe_workspace_bytes(m, H, &p));
      int32_t *h_ids = malloc(sizeof(int32_t) * m * KIMI_K);
      for (int ls = 0; ls < NSETS; ls++) {
        BENCH_CHECK(pz_moe_launch(&a, logits + (size_t)ls * max_m * E, E, NULL, NULL, NULL, s));
        BENCH_CUDA(cudaStreamSynchronize(s));
        BENCH_CUDA(cudaMemcpy(h_ids, ids, sizeof(int32_t) * m * KIMI_K, cudaMemcpyDeviceToHost));
        unsigned char seen[KIMI_E] = {0};
        for (int q = 0; q < m * KIMI_K; q++)
          if (h_ids[q] >= 0 && h_ids[q] < KIMI_E && !seen[h_ids[q]]) { seen[h_ids[q]] = 1; distinct += 1; }
      }
      free(h_ids);
      distinct /= NSETS;
      const double ebytes = 3.0 * I * H * 2, routed = distinct * ebytes, with_sh = routed + ebytes;
      cudaGraph_t g = NULL, gr = NULL;
      cudaGraphExec_t ge = NULL, ger = NULL;
      BENCH_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
      for (int r = 0; r < 2 * NSETS; r++) BENCH_CHECK(pz_moe_launch(&a, logits + (size_t)(r % NSETS) * max_m * E, E, NULL, NULL, NULL, s));
      BENCH_CUDA(cudaStreamEndCapture(s, &g));
      BENCH_CUDA(cudaGraphInstantiate(&ge, g, 0));
      double us = 0;
      BENCH_CHECK(pz_bench_graph_us(ge, s, 2 * NSETS, reps, &us));
      /* yardstick: one contiguous read of the same routed bytes, rotated over the pool */
      int64_t rb = (int64_t)routed < (int64_t)mat ? (int64_t)routed : (int64_t)mat;
      rb &= ~(int64_t)4095;
      const int nread = 8;
      double rus = 0;
      if (rb >= 4096) {
        BENCH_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
        for (int r = 0; r < nread; r++) {
          const char *base = r % 3 == 0 ? (const char *)wg : r % 3 == 1 ? (const char *)wu : (const char *)wd;
          int64_t off = (int64_t)((r / 3) * rb) % (int64_t)(mat - rb + 1);
          off &= ~(int64_t)4095;
          BENCH_CHECK(pz_moe_stream_read(base + off, rb, sink, s));
        }
        BENCH_CUDA(cudaStreamEndCapture(s, &gr));
        BENCH_CUDA(cudaGraphInstantiate(&ger, gr, 0));
        BENCH_CHECK(pz_bench_graph_us(ger, s, nread, reps, &rus));
        rus = rus * routed / (double)rb; /* scaled when capped at one matrix */
        PZ_CUDA_IGNORE(cudaGraphExecDestroy(ger)); /* a destroy: nothing to report */
        PZ_CUDA_IGNORE(cudaGraphDestroy(gr));
      }
      PZ_CUDA_IGNORE(cudaGraphExecDestroy(ge));
      PZ_CUDA_IGNORE(cudaGraphDestroy(g));
      BENCH_CUDA(cudaGetLastError());
      const double tbps = routed / (us * 1e-6) / 1e12, tbps_sh = with_sh / (us * 1e-6) / 1e12;
      printf("%3d %4d %8.1f %10.1f %9.1f %8.2f %6.1f%% %9.2f %9.1f %7.2f\n", tp, m, distinct, routed / 1e6, us, tbps,
             100.0 * tbps / PZ_BENCH_HBM_TBPS, tbps_sh, rus, rus > 0 ? us / rus : 0.0);
      fflush(stdout);
      if (md)
        fprintf(md, "| %d | %d | %.1f | %.1f | %.1f | %.2f | %.1f%% | %.2f | %.1f | %.2f |\n", tp, m, distinct, routed / 1e6,
                us, tbps, 100.0 * tbps / PZ_BENCH_HBM_TBPS, tbps_sh, rus, rus > 0 ? us / rus : 0.0);
      cJSON *row = cJSON_CreateObject();
      cJSON_AddNumberToObject(row, "tp", tp);
      cJSON_AddNumberToObject(row, "m", m);
      cJSON_AddNumberToObject(row, "inter", (double)I);
      cJSON_AddNumberToObject(row, "experts_read", distinct);
      cJSON_AddNumberToObject(row, "routed_bytes", routed);
      cJSON_AddNumberToObject(row, "us", us);
      cJSON_AddNumberToObject(row, "routed_tbps", tbps);
      cJSON_AddNumberToObject(row, "hbm_share", tbps / PZ_BENCH_HBM_TBPS);
      cJSON_AddNumberToObject(row, "with_shared_tbps", tbps_sh);
      cJSON_AddNumberToObject(row, "read_us_same_bytes", rus);
      cJSON_AddItemToArray(rows, row);
    }
  }
  rc = 0;
fail:
  if (json_path && rows) pz_bench_write_json(root, json_path, 0);
  if (md) fclose(md);
  cJSON_Delete(root);
  /* Cleanup: failures ignored on purpose (the exit code is already decided). */
  PZ_CUDA_IGNORE(cudaFree(wg)); PZ_CUDA_IGNORE(cudaFree(wu)); PZ_CUDA_IGNORE(cudaFree(wd));
  PZ_CUDA_IGNORE(cudaFree(sg)); PZ_CUDA_IGNORE(cudaFree(su)); PZ_CUDA_IGNORE(cudaFree(sd)); PZ_CUDA_IGNORE(cudaFree(x));
  PZ_CUDA_IGNORE(cudaFree(logits)); PZ_CUDA_IGNORE(cudaFree(out)); PZ_CUDA_IGNORE(cudaFree(ws));
  PZ_CUDA_IGNORE(cudaFree(sink));
  if (s) PZ_CUDA_IGNORE(cudaStreamDestroy(s));
  return rc;
}
#else
int pz_cmd_bench_moe(int argc, char **argv) {
  return pz_bench_no_cuda("bench moe", argc, argv, usage);
}
#endif
