/* prezero bench ar: the fused AR + residual + RMSNorm donor vs NCCL + RMSNorm + memset, with
 * and without the Kimi-K2 zero_fill, and the gate's answer; CUDA-graph replay medians. */
#define _POSIX_C_SOURCE 200809L
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli.h"
#include "cli_args.h"
#include "bench_common.h"
#include "core/options.h"

static void usage(FILE *f) {
  fprintf(f, "usage: prezero bench ar [--tp 1|2|..] [--json FILE] [--md FILE] [--iters N] [--reps N] [--sweep]\n"
             "       prezero bench ar --procs N [--one-gpu] [--json FILE] [--md FILE] [--iters N] [--reps N]\n"
             "  --procs: one process per TP rank through the public multi-process API (rank r on GPU r %% GPUs,\n"
             "  or all on GPU 0 with --one-gpu: time-sliced, the protocol's cost); defaults --iters 10 --reps 7.\n"
             "       prezero bench ar --rank R --world W --id-file F [--timeout-s S] [--one-gpu] [...]\n"
             "  the same with each rank started by its own command: rank 0 writes the unique id to F, the others\n"
             "  wait for it (default 120 s); rank 0 prints the report.\n"
             "  CUDA-graph replay of N launches per graph (default 50), median of --reps replays (15);\n"
             "  --sweep also times the fused kernel at 1, 2, 4, 8 CTAs per row (PREZERO_AR_CTAS_PER_ROW)\n"
             "  and, at TP >= 2, with both exchange protocols (PREZERO_AR_PROTO=ll|flag).\n");
}

#ifndef PZ_HAVE_CUDA
int pz_cmd_bench_ar(int argc, char **argv) {
  return pz_bench_no_cuda("bench ar", argc, argv, usage);
}
#else
#include <cjson/cJSON.h>
#include <cuda_runtime.h>
#include "backend/cuda/ar_fused.h"
#include "backend/cuda/ar_nccl.h"
#include "backend/cuda/comm.h"
#include "backend/cuda/gate_cuda.h"
#include "core/gate.h"
#include "core/status.h"

#define MAXR PZ_AR_MAX_TP
static const int64_t k_ms[] = {1, 4, 8, 16, 32, 64, 128};
static const int64_t k_hs[] = {7168, 5120, 2048};
#define NM 7
#define NH 3

typedef struct bench {
  int tp, iters, reps, sweep;
  pz_comm *comm;
  pz_nccl *nccl;
  pz_device_desc dev;
  cudaStream_t st[MAXR];
  cudaEvent_t e0[MAXR], e1[MAXR];
  float *part[MAXR], *partn[MAXR], *res[MAXR]; /* partn: the NCCL path's own partials (summed in place) */
  pz_bf16 *w[MAXR], *x[MAXR];
  float *fill[MAXR];
  int64_t n_total, n_base;
} bench;

#define BCU(call) PZ_BENCH_CUDA("bench ar", call, return -1)

static pz_ar_rmsnorm_args args_for(bench *b, int r, int64_t m, int64_t H, int with_fill) {
  pz_ar_rmsnorm_args a;
  memset(&a, 0, sizeof a);
  a.partial = b->part[r]; a.ld_partial = H;
  a.residual_in = b->res[r]; a.residual_out = b->res[r]; a.ld_res = H;
  a.weight = b->w[r]; a.x_norm = b->x[r]; a.ld_x = H;
  a.eps = 1e-6f; a.m = m; a.H = H;
  if (with_fill) {
    pz_zero_fill f = {b->fill[r], b->n_total, b->n_base, b->n_total, PZ_F32};
    a.fill = f;
    a.fill_all = with_fill == 2 ? pz_prezero_active(m, b->n_total, PZ_F32, H, b->tp, &b->dev) : 1;
  }
  return a;
}

/* kind 0: fused, 1: fused + full fill, 2: NCCL + RMSNorm + memset (full fill).
 * Captures `iters` launches per rank into one graph each, replays `reps` times, returns the
 * median µs per launch (slowest rank), or -1 on error (message printed). */
static double time_kind(bench *b, int kind, int64_t m, int64_t H, int *eager) {
  cudaGraph_t g[MAXR];
  cudaGraphExec_t ge[MAXR];
  pz_ar_rmsnorm_args a[MAXR];
  for (int r = 0; r < b->tp; r++) {
    a[r] = args_for(b, r, m, H, kind >= 1);
    if (kind == 2) a[r].partial = b->partn[r];
  }
  *eager = 0;
  pz_status s = PZ_OK;
  for (int r = 0; r < b->tp; r++) {
    BCU(cudaSetDevice(pz_comm_device(b->comm, r)));
    BCU(cudaStreamBeginCapture(b->st[r], cudaStreamCaptureModeRelaxed));
  }
  for (int i = 0; i < b->iters && s == PZ_OK; i++)
    s = kind == 2 ? pz_ar_rmsnorm_nccl_launch_all(b->nccl, b->comm, a, b->st)
                  : pz_ar_rmsnorm_launch_all(b->comm, a, &b->dev, b->st);
  /* Every rank's capture is ended; a failed one (NCCL refuses capture here) is an answer, not
   * an error: the eager path below times it instead. */
  int cap_ok = 1;
  for (int r = 0; r < b->tp; r++) {
    BCU(cudaSetDevice(pz_comm_device(b->comm, r)));
    if (!PZ_CUDA_PROBE(cudaStreamEndCapture(b->st[r], &g[r]))) cap_ok = 0;
  }
  (void)cudaGetLastError(); /* what the failed launches under capture left */
  if (s != PZ_OK && kind != 2) {
    fprintf(stderr, "prezero bench ar: launch failed: %s\n", pz_last_error());
    return -1;
  }
  if (!cap_ok || s != PZ_OK) {
    /* NCCL could not be captured here: time eager launches instead (marked in the output). */
    *eager = 1;
    double t[64];
    int reps = b->reps < 64 ? b->reps : 64;
    for (int k = 0; k <= reps; k++) {
      for (int r = 0; r < b->tp; r++) { BCU(cudaSetDevice(pz_comm_device(b->comm, r))); BCU(cudaEventRecord(b->e0[r], b->st[r])); }
      for (int i = 0; i < b->iters; i++)
        if (pz_ar_rmsnorm_nccl_launch_all(b->nccl, b->comm, a, b->st) != PZ_OK) {
          fprintf(stderr, "prezero bench ar: NCCL path failed: %s\n", pz_last_error());
          return -1;
        }
      float worst = 0;
      for (int r = 0; r < b->tp; r++) {
        BCU(cudaSetDevice(pz_comm_device(b->comm, r)));
        BCU(cudaEventRecord(b->e1[r], b->st[r]));
        BCU(cudaEventSynchronize(b->e1[r]));
        float ms;
        BCU(cudaEventElapsedTime(&ms, b->e0[r], b->e1[r]));
        if (ms > worst) worst = ms;
      }
      if (k > 0) t[k - 1] = worst;
    }
    return pz_median(t, reps) * 1000.0 / b->iters;
  }
  for (int r = 0; r < b->tp; r++) {
    BCU(cudaSetDevice(pz_comm_device(b->comm, r)));
    BCU(cudaGraphInstantiate(&ge[r], g[r], 0));
    BCU(cudaGraphDestroy(g[r]));
  }
  double t[256];
  int reps = b->reps < 256 ? b->reps : 256;
  for (int k = 0; k <= reps; k++) { /* k = 0: warm-up */
    for (int r = 0; r < b->tp; r++) {
      BCU(cudaSetDevice(pz_comm_device(b->comm, r)));
      BCU(cudaEventRecord(b->e0[r], b->st[r]));
      BCU(cudaGraphLaunch(ge[r], b->st[r]));
      BCU(cudaEventRecord(b->e1[r], b->st[r]));
    }
    float worst = 0;
    for (int r = 0; r < b->tp; r++) {
      BCU(cudaSetDevice(pz_comm_device(b->comm, r)));
      BCU(cudaEventSynchronize(b->e1[r]));
      float ms;
      BCU(cudaEventElapsedTime(&ms, b->e0[r], b->e1[r]));
      if (ms > worst) worst = ms;
    }
    if (k > 0) t[k - 1] = worst;
  }
  for (int r = 0; r < b->tp; r++) { /* a destroy: nothing to report */
    PZ_CUDA_IGNORE(cudaSetDevice(pz_comm_device(b->comm, r)));
    PZ_CUDA_IGNORE(cudaGraphExecDestroy(ge[r]));
  }
  if (pz_comm_check(b->comm) != PZ_OK) {
    fprintf(stderr, "prezero bench ar: %s\n", pz_last_error());
    return -1;
  }
  return pz_median(t, reps) * 1000.0 / b->iters;
}

static int setup(bench *b) {
  char what[32];
  snprintf(what, sizeof what, "--tp %d", b->tp);
  if (pz_bench_need_gpus("bench ar", what, b->tp, 1)) return -1;
  pz_comm_config cc = PZ_COMM_CONFIG_INIT;
  cc.tp = b->tp;
  for (int r = 0; r < b->tp; r++) cc.devices[r] = r;
  cc.max_m = 128;
  cc.max_H = 7168;
  cc.timeout_us = 5000000; /* a hang becomes an error after 5 s */
  if (pz_comm_create(&cc, &b->comm) != PZ_OK) {
    fprintf(stderr, "prezero bench ar: %s\n", pz_last_error());
    return -1;
  }
  if (pz_gate_calibrate_cuda(0, 1, &b->dev) != PZ_OK) {
    fprintf(stderr, "prezero bench ar: fill-gate calibration: %s\n", pz_last_error());
    return -1;
  }
  pz_runtime_opts ro;
  char bad[300];
  if (pz_runtime_opts_from_env(&ro, bad, sizeof bad) != 0) {
    fprintf(stderr, "prezero bench ar: %s\n", bad);
    return -1;
  }
  pz_device_desc_apply_opts(&b->dev, &ro); /* PREZERO_AR_PROTO / _CLUSTER / _CTAS_PER_ROW, PREZERO_FORCE_GATE */
  if (pz_nccl_create(b->comm, ro.nccl_lib, &b->nccl) != PZ_OK) {
    fprintf(stderr, "prezero bench ar: NCCL baseline unavailable: %s\n", pz_last_error());
    b->nccl = NULL;
  }
  b->n_base = 2112 + 64 / b->tp * 192;
  b->n_total = b->n_base + 7168;
  size_t n = 128 * 7168;
  float *h = malloc(n * 4);
  pz_bf16 *hw = malloc(7168 * 2);
  uint64_t s = 12345;
  for (size_t i = 0; i < n; i++) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    h[i] = (float)((s >> 40) & 0xffff) / 65536.0f - 0.5f;
  }
  for (int j = 0; j < 7168; j++) hw[j] = pz_f32_to_bf16(1.0f + (float)(j % 7) / 8.0f);
  for (int r = 0; r < b->tp; r++) {
    BCU(cudaSetDevice(pz_comm_device(b->comm, r)));
    BCU(cudaStreamCreateWithFlags(&b->st[r], cudaStreamNonBlocking));
    BCU(cudaEventCreate(&b->e0[r]));
    BCU(cudaEventCreate(&b->e1[r]));
    BCU(cudaMalloc((void **)&b->part[r], n * 4));
    BCU(cudaMalloc((void **)&b->res[r], n * 4));
    BCU(cudaMalloc((void **)&b->partn[r], n * 4));
    BCU(cudaMemset(b->partn[r], 0, n * 4)); /* zeros stay zeros under repeated in-place sums */
    BCU(cudaMalloc((void **)&b->w[r], 7168 * 2));
    BCU(cudaMalloc((void **)&b->x[r], n * 2));
    BCU(cudaMalloc((void **)&b->fill[r], (size_t)128 * b->n_total * 4));
    BCU(cudaMemcpy(b->part[r], h, n * 4, cudaMemcpyHostToDevice));
    BCU(cudaMemcpy(b->res[r], h, n * 4, cudaMemcpyHostToDevice));
    BCU(cudaMemcpy(b->w[r], hw, 7168 * 2, cudaMemcpyHostToDevice));
  }
  free(h);
  free(hw);
  return 0;
}

int pz_bench_ar_procs(int argc, char **argv); /* bench_ar_mp.c */

int pz_cmd_bench_ar(int argc, char **argv) {
  for (int i = 1; i < argc; i++)
    if (!strcmp(argv[i], "--procs") || !strcmp(argv[i], "--rank") || !strcmp(argv[i], "--id-file") ||
        !strcmp(argv[i], "--world") || !strcmp(argv[i], "--timeout-s"))
      return pz_bench_ar_procs(argc, argv);
  bench b;
  memset(&b, 0, sizeof b);
  b.tp = 1; b.iters = 50; b.reps = 15;
  const char *json = NULL, *md = NULL;
  /* Numbers as every other subcommand reads them (pz_cli_parse_int): "2x", "", overflow refused
   * (atoi read "2x" as 2 and 99999999999999999999 as -1); the ranges of the --procs form. */
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(stdout); return 0; }
    if (!strcmp(a, "--sweep")) { b.sweep = 1; continue; }
    if (!strcmp(a, "--one-gpu")) {
      fprintf(stderr, "prezero bench ar: --one-gpu places the ranks of one process per rank; add --procs N (or "
                      "--rank/--world/--id-file), or drop --one-gpu\n");
      return 2;
    }
    const bool takes = !strcmp(a, "--tp") || !strcmp(a, "--json") || !strcmp(a, "--md") || !strcmp(a, "--iters") ||
                       !strcmp(a, "--reps");
    if (!takes) { fprintf(stderr, "prezero bench ar: unknown option '%s'; see --help\n", a); return 2; }
    if (!v) { fprintf(stderr, "prezero bench ar: %s needs a value; see 'prezero bench ar --help'\n", a); return 2; }
    i++;
    long long x = 0;
    if (!strcmp(a, "--json")) json = v;
    else if (!strcmp(a, "--md")) md = v;
    else if (!strcmp(a, "--tp")) {
      if (pz_cli_parse_int("bench ar", a, v, 1, MAXR, &x)) return 2;
      b.tp = (int)x;
    } else if (!strcmp(a, "--iters")) {
      if (pz_cli_parse_int("bench ar", a, v, 1, 1000, &x)) return 2;
      b.iters = (int)x;
    } else {
      if (pz_cli_parse_int("bench ar", a, v, 1, 64, &x)) return 2;
      b.reps = (int)x;
    }
  }
  setenv("NCCL_NVLS_ENABLE", "0", 1);
  if (setup(&b) != 0) return 1;

  char cmd[1024];
  pz_bench_command_line(cmd, sizeof cmd, "prezero bench ar", argc - 1, argv + 1);
  struct cudaDeviceProp prop;
  PZ_BENCH_CUDA("bench ar", cudaGetDeviceProperties(&prop, 0), return 1);
  cJSON *root = cJSON_CreateObject();
  pz_bench_json_add_command_date(root, cmd);
  cJSON_AddStringToObject(root, "device", prop.name);
  cJSON_AddNumberToObject(root, "tp", b.tp);
  cJSON_AddNumberToObject(root, "iters_per_graph", b.iters);
  cJSON_AddNumberToObject(root, "replays", b.reps);
  cJSON_AddStringToObject(root, "cache", "hot: one partial/residual set per rank, as after the GEMM that wrote it");
  cJSON_AddNumberToObject(root, "n_total", (double)b.n_total);
  cJSON_AddNumberToObject(root, "n_base", (double)b.n_base);
  cJSON *gate = cJSON_AddObjectToObject(root, "gate_calibration");
  cJSON_AddNumberToObject(gate, "num_sms", b.dev.num_sms);
  cJSON_AddNumberToObject(gate, "ctas_per_sm", b.dev.ctas_per_sm);
  cJSON_AddNumberToObject(gate, "fill_bytes_per_us_cta", b.dev.fill_bytes_per_us_cta);
  cJSON_AddNumberToObject(gate, "donor_t0_us", b.dev.donor_t0_us);
  cJSON_AddNumberToObject(gate, "donor_bytes_per_us", b.dev.donor_bytes_per_us);
  cJSON_AddNumberToObject(gate, "fill_penalty_bytes_per_us", b.dev.fill_penalty_bytes_per_us);
  cJSON_AddNumberToObject(gate, "max_added_us", b.dev.max_added_us);
  cJSON *rows = cJSON_AddArrayToObject(root, "rows");

  FILE *mdf = md ? fopen(md, "w") : NULL;
  if (md && !mdf) { fprintf(stderr, "prezero bench ar: cannot write %s\n", md); return 1; }
  FILE *outs[2] = {stdout, mdf};
  for (int o = 0; o < 2; o++) {
    FILE *f = outs[o];
    if (!f) continue;
    fprintf(f, "# prezero bench ar, %s, TP=%d\n\n", prop.name, b.tp);
    fprintf(f, "Command: `%s` (NCCL_NVLS_ENABLE=0). CUDA-graph replay of %d launches, median of %d replays, "
               "slowest rank; hot L2 (partial/residual as just written by the GEMM). Kimi-K2 fill: n_total = %lld f32 "
               "columns (qkv_a 2112 + q_b %d + o_proj 7168), n_base = %lld.\n"
               "Fill-gate calibration: %d SMs x %d CTAs/SM, fill %.0f B/us per CTA, donor >= %.2f us + m*H*14 B / %.0f B/us, "
               "fill penalty %.0f B/us (free only when the fill adds <= %.2f us).\n\n",
            cmd, b.iters, b.reps, (long long)b.n_total, 64 / b.tp * 192, (long long)b.n_base, b.dev.num_sms,
            b.dev.ctas_per_sm, b.dev.fill_bytes_per_us_cta, b.dev.donor_t0_us, b.dev.donor_bytes_per_us,
            b.dev.fill_penalty_bytes_per_us, b.dev.max_added_us);
    fprintf(f, "| H | m | plan | donor CTAs | fill CTAs | fused µs | NCCL+RMSNorm+memset µs | fused+fill µs | fill adds µs | fill free |%s\n",
            !b.sweep ? "" : b.tp > 1 ? " LL K=1 | LL K=2 | LL K=4 | LL K=8 | flag K=1 | flag K=2 | flag K=4 | flag K=8 |" : " K=1 | K=2 | K=4 | K=8 |");
    pz_bench_md_rule(f, 10 + (!b.sweep ? 0 : b.tp > 1 ? 8 : 4), 0);
  }
  int rc = 0;
  for (int hi = 0; hi < NH && rc == 0; hi++)
    for (int mi = 0; mi < NM && rc == 0; mi++) {
      int64_t H = k_hs[hi], m = k_ms[mi];
      int eager = 0, eager_n = 0;
      double fused = time_kind(&b, 0, m, H, &eager);
      double filled = time_kind(&b, 1, m, H, &eager);
      double nccl = b.nccl ? time_kind(&b, 2, m, H, &eager_n) : -1;
      if (fused < 0 || filled < 0) { rc = 1; break; }
      double sw[8] = {-1, -1, -1, -1, -1, -1, -1, -1};
      if (b.sweep) {
        const char *ks[4] = {"1", "2", "4", "8"};
        for (int k = 0; k < 8; k++) {
          if (b.tp == 1 && k >= 4) break; /* no exchange at TP=1 */
          const pz_device_desc keep = b.dev;
          b.dev.ar_proto = k < 4 ? 1 : 2;            /* LL, then flag */
          b.dev.ar_ctas_per_row = atoi(ks[k % 4]);
          pz_ar_plan sp;
          pz_ar_plan_for_dev(m, H, b.tp, &b.dev, &sp);
          if (sp.donor_ctas <= (int64_t)b.dev.num_sms * b.dev.ctas_per_sm) sw[k] = time_kind(&b, 0, m, H, &eager);
          b.dev = keep;
        }
      }
      pz_ar_plan p;
      pz_ar_plan_for_dev(m, H, b.tp, &b.dev, &p);
      int64_t fill_ctas = pz_ar_plan_fill_ctas(&b.dev, &p, m * b.n_total * 4);
      int free_ = pz_is_prezero_free(m, b.n_total, PZ_F32, H, b.tp, &b.dev);
      cJSON *row = cJSON_CreateObject();
      cJSON_AddNumberToObject(row, "H", (double)H);
      cJSON_AddNumberToObject(row, "m", (double)m);
      cJSON_AddNumberToObject(row, "ctas_per_row", p.ctas_per_row);
      cJSON_AddStringToObject(row, "proto", b.tp == 1 ? "local" : p.proto == PZ_AR_PROTO_LL ? "ll" : "flag");
      cJSON_AddNumberToObject(row, "donor_ctas", (double)p.donor_ctas);
      cJSON_AddNumberToObject(row, "fill_ctas", (double)fill_ctas);
      cJSON_AddNumberToObject(row, "fused_us", fused);
      cJSON_AddNumberToObject(row, "nccl_rmsnorm_memset_us", nccl);
      cJSON_AddBoolToObject(row, "nccl_eager", eager_n);
      cJSON_AddNumberToObject(row, "fused_fill_us", filled);
      cJSON_AddNumberToObject(row, "fill_added_us", filled - fused);
      cJSON_AddBoolToObject(row, "gate_free", free_);
      cJSON_AddNumberToObject(row, "gate_fill_est_us", pz_ar_fill_us(&b.dev, p.donor_ctas, m * b.n_total * 4));
      cJSON_AddNumberToObject(row, "gate_donor_est_us", pz_ar_donor_us(&b.dev, m, H));
      if (b.sweep) {
        cJSON *s = cJSON_AddObjectToObject(row, "fused_us_by_proto_ctas_per_row");
        const char *names[8] = {"ll_1", "ll_2", "ll_4", "ll_8", "flag_1", "flag_2", "flag_4", "flag_8"};
        for (int k = 0; k < 8; k++) cJSON_AddNumberToObject(s, names[k], sw[k]);
      }
      cJSON_AddItemToArray(rows, row);
      for (int o = 0; o < 2; o++) {
        FILE *f = outs[o];
        if (!f) continue;
        char nb[32];
        if (nccl < 0) snprintf(nb, sizeof nb, "n/a");
        else snprintf(nb, sizeof nb, "%.2f%s", nccl, eager_n ? " (eager)" : "");
        fprintf(f, "| %lld | %lld | %s K=%d | %lld | %lld | %.2f | %s | %.2f | %+.2f | %s |", (long long)H, (long long)m,
                b.tp == 1 ? "local" : p.proto == PZ_AR_PROTO_LL ? "LL" : "flag", p.ctas_per_row, (long long)p.donor_ctas, (long long)fill_ctas, fused, nb, filled, filled - fused, free_ ? "yes" : "no");
        if (b.sweep)
          for (int k = 0; k < (b.tp > 1 ? 8 : 4); k++) fprintf(f, sw[k] < 0 ? " - |" : " %.2f |", sw[k]);
        fprintf(f, "\n");
        fflush(f);
      }
    }
  if (mdf) fclose(mdf);
  if (json && pz_bench_write_json(root, json, 1) != 0) { fprintf(stderr, "prezero bench ar: cannot write %s\n", json); rc = 1; }
  cJSON_Delete(root);
  if (b.nccl) pz_nccl_destroy(b.nccl);
  for (int r = 0; r < b.tp; r++) { /* cleanup: failures ignored on purpose (the exit code is decided) */
    PZ_CUDA_IGNORE(cudaSetDevice(pz_comm_device(b.comm, r)));
    PZ_CUDA_IGNORE(cudaFree(b.part[r])); PZ_CUDA_IGNORE(cudaFree(b.partn[r])); PZ_CUDA_IGNORE(cudaFree(b.res[r]));
    PZ_CUDA_IGNORE(cudaFree(b.w[r])); PZ_CUDA_IGNORE(cudaFree(b.x[r])); PZ_CUDA_IGNORE(cudaFree(b.fill[r]));
    PZ_CUDA_IGNORE(cudaStreamDestroy(b.st[r]));
  }
  pz_comm_destroy(b.comm);
  return rc;
}
#endif
