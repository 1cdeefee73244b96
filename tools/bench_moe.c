/* prezero bench moe: the CUDA MoE block (router top-k + routed + shared experts) on Kimi-K2 /
 * Kimi-K2.5 per-rank shapes at TP 1/2/4, uniform random routing, with the routed experts in bf16,
 * INT4 W4A16 (compressed-tensors group 32, moe_q.h) or FP8 W8A16, beside a streaming read of the
 * bytes; --quant int4|fp8 also times the bf16 MoE in the same run for its speed-up. */
#define _POSIX_C_SOURCE 200809L
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli.h"
#include "bench_common.h"

#define NSETS 4      /* logit sets rotated inside one graph: different experts each launch */
#define MAX_COPIES 3 /* quantised weight copies rotated inside one graph (beyond the 60 MB L2) */

/* Kimi-K2 / Kimi-K2.5 (configs/kimi_k2.json, kimi_k25.json): H 7168, 384 routed experts, top 8,
 * moe_intermediate 2048, 1 shared expert, sigmoid + noaux_tc, 1 group, norm_topk_prob,
 * routed_scaling_factor 2.827. */
#define KIMI_H 7168
#define KIMI_E 384
#define KIMI_K 8
#define KIMI_I 2048
#define BENCH_MAX_M 256

enum { Q_BF16 = 0, Q_INT4 = 1, Q_FP8 = 2 };
static const char *const qname[3] = {"bf16", "int4", "fp8"};

static void usage(FILE *f) {
  fprintf(f,
          "usage: prezero bench moe [--quant bf16|int4|fp8] [--json FILE] [--md FILE] [--m 1,4,8,...] [--tp 1,2,4]\n"
          "                         [--reps N] [--w4-wk-up 0|1|2|4|8] [--w4-wk-dn 0|1|2|4|8]\n"
          "  Times the MoE op (router top-k + gather + routed experts gate/up + SwiGLU + down + combine, and\n"
          "  the bf16 shared expert) for Kimi-K2.5 per-rank shapes (H %d, %d experts, top %d, moe_intermediate\n"
          "  %d / TP, 1 shared) in CUDA-graph replays: %d random logit sets (uniform routing) rotated inside\n"
          "  the graph, and for int4/fp8 up to %d copies of the expert weights, so they stream from HBM;\n"
          "  median of --reps (default 7) replays.\n"
          "  --quant   routed experts as bf16 (pz_moe_launch), int4 (compressed-tensors W4A16 group 32,\n"
          "            pz_moe_w4a16_launch) or fp8 (e4m3 with 128x128 f32 block scales, pz_moe_w8a16_launch);\n"
          "            for int4 / fp8 the bf16 MoE is timed in the same run for the speed-up (default bf16)\n"
          "  --m       batch sizes, 1..%d (default 1,4,8,16,32,64,128)\n"
          "  --tp      TP degrees whose per-rank shapes are timed (one GPU; default 1,2,4)\n"
          "  --w4-wk-up  int4, for A/B runs: warps splitting the gate/up K per work item (0 = the default,\n"
          "              src/backend/cuda/moe_w4_split.h: tiled experts the smallest split whose expected items\n"
          "              fill >= 82 %% of the CTA slots over their waves, a small batch (at most experts / 8\n"
          "              pairs) the largest within 6 waves; PREZERO_MOE_W4_WAVES=0: the down rule below;\n"
          "              fixed: 2 where moe_intermediate / TP >= 1024, else by H: 8; PREZERO_MOE_W4_WK=0: fixed)\n"
          "  --w4-wk-dn  int4, for A/B runs: the same for the down K (0 = the default: tiled experts 1 when\n"
          "              the batch has >= 2 items of 128 rows per CTA slot, more than the fixed split where\n"
          "              its items fill < half the slots; fixed: by moe_intermediate / TP, 4 at 2048, 2 at\n"
          "              1024, 1 below)\n"
          "  int4 is timed in the tiled layout the engine uses (pz_moe_w4a16_tile, PREZERO_MOE_W4_TILED=1) and,\n"
          "  in the same run, in the stored compressed-tensors layout (last column: its us and ratio).\n"
          "  Touched bytes = the distinct chosen routed experts' weights (packed words + scales for int4,\n"
          "  e4m3 bytes + block scales for fp8) + the shared expert's bf16 weights; %% of 4.8 TB/s over them.\n",
          KIMI_H, KIMI_E, KIMI_K, KIMI_I, NSETS, MAX_COPIES, BENCH_MAX_M);
}

typedef struct bench_args {
  const char *json_path, *md_path;
  int quant, ms[16], nm, tps[8], ntp, reps, wk_up, wk_dn;
} bench_args;

/* Parses the command line (every build). 0: go on; otherwise the exit code (help printed = -1 -> 0). */
static int parse(int argc, char **argv, bench_args *b) {
  static const int dm[] = {1, 4, 8, 16, 32, 64, 128};
  memset(b, 0, sizeof *b);
  b->nm = 7;
  memcpy(b->ms, dm, sizeof dm);
  b->tps[0] = 1; b->tps[1] = 2; b->tps[2] = 4; b->ntp = 3;
  b->reps = 7;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(stdout); return -1; }
    const bool known = !strcmp(a, "--json") || !strcmp(a, "--md") || !strcmp(a, "--reps") || !strcmp(a, "--m") ||
                       !strcmp(a, "--tp") || !strcmp(a, "--quant") || !strcmp(a, "--w4-wk-up") ||
                       !strcmp(a, "--w4-wk-dn");
    if (!known) { fprintf(stderr, "prezero bench moe: unknown option '%s'; see 'prezero bench moe --help'\n", a); return 2; }
    if (!v) { fprintf(stderr, "prezero bench moe: %s needs a value; see 'prezero bench moe --help'\n", a); return 2; }
    i++;
    if (!strcmp(a, "--json")) b->json_path = v;
    else if (!strcmp(a, "--md")) b->md_path = v;
    else if (!strcmp(a, "--quant")) {
      int q = -1;
      for (int k = 0; k < 3; k++)
        if (!strcmp(v, qname[k])) q = k;
      if (q < 0) { fprintf(stderr, "prezero bench moe: --quant '%s' is not a storage; use --quant bf16, int4 or fp8\n", v); return 2; }
      b->quant = q;
    } else if (!strcmp(a, "--w4-wk-up") || !strcmp(a, "--w4-wk-dn")) {
      int r[1];
      if (pz_bench_parse_list(v, r, 1, 0, 8) != 1 || (r[0] & (r[0] - 1))) {
        fprintf(stderr, "prezero bench moe: %s '%s' is not 0, 1, 2, 4 or 8; use one of those (0: the default split)\n", a, v);
        return 2;
      }
      if (!strcmp(a, "--w4-wk-up")) b->wk_up = r[0];
      else b->wk_dn = r[0];
    } else if (!strcmp(a, "--reps")) {
      int r[1];
      if (pz_bench_parse_list(v, r, 1, 1, 64) != 1) { fprintf(stderr, "prezero bench moe: --reps '%s' is not a count; use --reps 1..64\n", v); return 2; }
      b->reps = r[0];
    } else if (!strcmp(a, "--m")) {
      if ((b->nm = pz_bench_parse_list(v, b->ms, 16, 1, BENCH_MAX_M)) <= 0) {
        fprintf(stderr, "prezero bench moe: --m '%s' is not a list of batch sizes; write it like --m 1,4,16,128 (1..%d)\n", v, BENCH_MAX_M);
        return 2;
      }
    } else {
      if ((b->ntp = pz_bench_parse_list(v, b->tps, 8, 1, 16)) <= 0) {
        fprintf(stderr, "prezero bench moe: --tp '%s' is not a list of TP degrees; write it like --tp 1,2,4\n", v);
        return 2;
      }
      for (int t = 0; t < b->ntp; t++)
        if (KIMI_I % b->tps[t] || (KIMI_I / b->tps[t]) % 32) {
          fprintf(stderr, "prezero bench moe: TP %d does not split moe_intermediate 2048 into multiples of 32; use --tp 1,2,4,8,16 values\n", b->tps[t]);
          return 2;
        }
    }
  }
  if (b->reps < 3) b->reps = 3;
  return 0;
}

#ifdef PZ_HAVE_CUDA
#include <cuda_runtime.h>
#include <cjson/cJSON.h>
#include "backend/cuda/mlp_gemm.h"
#include "backend/cuda/moe.h"
#include "backend/cuda/moe_q.h"
#include "core/options.h"

/* The options reader's values (read once): PREZERO_MOE_L2PF, PREZERO_MOE_W4_WK, ... */
static const pz_runtime_opts *moe_opts(void) {
  static pz_runtime_opts o;
  static int read = 0;
  if (!read) {
    pz_runtime_opts_default(&o);
    char err[256];
    if (pz_runtime_opts_from_env(&o, err, sizeof err) != 0) fprintf(stderr, "prezero bench moe: %s\n", err);
    read = 1;
  }
  return &o;
}
static int moe_l2pf(void) { return moe_opts()->moe_l2pf == 1; }
static int moe_w4_wk_fixed(void) { return moe_opts()->moe_w4_wk == 0; } /* PREZERO_MOE_W4_WK=0 */
static int moe_direct_off(void) { return moe_opts()->moe_direct == 0; }   /* PREZERO_MOE_DIRECT=0 */
static int moe_up_former(void) { return moe_opts()->moe_w4_up_regs == 0; } /* PREZERO_MOE_W4_UP_REGS=0 */
static int moe_waves_off(void) { return moe_opts()->moe_w4_waves == 0; } /* PREZERO_MOE_W4_WAVES=0 */
static int route_serial(void) { return moe_opts()->moe_route_topk == 0; } /* PREZERO_MOE_ROUTE_TOPK=0 */
static int route_keys_off(void) { return moe_opts()->moe_route_keys == 0; } /* PREZERO_MOE_ROUTE_KEYS=0 */
static int items_dynamic(void) { return moe_opts()->moe_dynamic == 1; } /* PREZERO_MOE_DYNAMIC=1 */
static int tail_off(void) { return moe_opts()->moe_tail != 1; }          /* PREZERO_MOE_TAIL=1 opts in */
static int moe_fork(void) { return moe_opts()->moe_fork; } /* PREZERO_MOE_FORK: -1 by batch, 0 off, 1 / 2 the join */
#include "bench/dev/dev_helpers.h" /* pz_moe_fill_bf16, pz_moe_stream_read */
#include "core/status.h"

#define BENCH_CHECK(call)                                                              \
  do {                                                                                 \
    pz_status s_ = (call);                                                             \
    if (s_ != PZ_OK) {                                                                 \
      fprintf(stderr, "prezero bench moe: %s failed: %s\n", #call, pz_last_error());  \
      goto fail;                                                                       \
    }                                                                                  \
  } while (0)
#define BENCH_CUDA(call) PZ_BENCH_CUDA("bench moe", call, goto fail)

/* Bytes of one routed expert's three matrices at intermediate I (gate, up: [I, H]; down: [H, I]). */
static double expert_bytes(int q, int64_t I) {
  const double n = 3.0 * (double)I * KIMI_H;
  if (q == Q_INT4) return n / 2 + n / 32 * 2;                    /* 4-bit words + bf16 scale per 32 */
  if (q == Q_FP8) return n + 4.0 * 3.0 * ((I + 127) / 128) * ((KIMI_H + 127) / 128); /* + f32 block scales */
  return n * 2;
}

static size_t al256(size_t b) { return (b + 255) / 256 * 256; }

/* One quantised weight copy at intermediate I inside a buffer sized for the largest I: the weights
 * (gate, up [E, I, H]; down [E, H, I]: INT4 packed words, 8 per i32, or e4m3 bytes) then the
 * scales (INT4: bf16 per 32 columns; FP8: f32 per 128x128 block), each 256-byte aligned. */
typedef struct q_view {
  const void *wg, *wu, *wd, *sg, *su, *sd;
} q_view;
static size_t q_wbytes(int q, int64_t I) { return al256((size_t)KIMI_E * I * KIMI_H / (q == Q_INT4 ? 2 : 1)); }
static size_t q_sbytes(int q, int64_t I, int down) {
  if (q == Q_INT4) return al256((size_t)KIMI_E * I * KIMI_H / 32 * 2);
  const int64_t r = down ? KIMI_H : I, c = down ? I : KIMI_H;
  return al256((size_t)KIMI_E * ((r + 127) / 128) * ((c + 127) / 128) * 4);
}
static size_t q_bytes(int q, int64_t I) {
  return 3 * q_wbytes(q, I) + 2 * q_sbytes(q, I, 0) + q_sbytes(q, I, 1);
}
static q_view q_at(int q, char *base, int64_t I) {
  const size_t w = q_wbytes(q, I), s = q_sbytes(q, I, 0);
  q_view v;
  v.wg = base; v.wu = base + w; v.wd = base + 2 * w;
  v.sg = base + 3 * w; v.su = base + 3 * w + s; v.sd = base + 3 * w + 2 * s;
  return v;
}

/* The params of the quantised launchers (INT4 group 32; FP8 128x128 blocks). */
static pz_moe_params q_params(int q, pz_moe_params p) {
  p.wquant = q == Q_INT4 ? 1 : q == Q_FP8 ? 2 : 0;
  p.q_group = q == Q_INT4 ? 32 : 0;
  p.q_block_rows = p.q_block_cols = q == Q_FP8 ? 128 : 0;
  return p;
}
static size_t q_ws_bytes(int q, int max_m, const pz_moe_params *p0) {
  const pz_moe_params p = q_params(q, *p0);
  return q == Q_INT4 ? pz_moe_w4a16_workspace_bytes(max_m, KIMI_H, &p)
         : q == Q_FP8 ? pz_moe_w8a16_workspace_bytes(max_m, KIMI_H, &p)
                      : pz_moe_workspace_bytes(max_m, KIMI_H, &p);
}

static void md_row_note(FILE *md, int tp, int m, const char *note) {
  if (md) fprintf(md, "| %d | %d | - | - | - | - | - | - | - | %s |\n", tp, m, note);
}

static int run_bench(const bench_args *b, int argc, char **argv) {
  const int q = b->quant;
  if (pz_bench_need_gpus("bench moe", "this benchmark", 1, 0)) return 1;
  int rc = 1, min_tp = 1 << 30, max_m = 1;
  for (int t = 0; t < b->ntp; t++) min_tp = b->tps[t] < min_tp ? b->tps[t] : min_tp;
  for (int i = 0; i < b->nm; i++) max_m = b->ms[i] > max_m ? b->ms[i] : max_m;
  const int64_t H = KIMI_H, E = KIMI_E, Imax = KIMI_I / min_tp;
  struct cudaDeviceProp prop;
  PZ_BENCH_CUDA("bench moe", cudaGetDeviceProperties(&prop, 0), return 1);
  size_t fr = 0, tot = 0;
  PZ_BENCH_CUDA("bench moe", cudaMemGetInfo(&fr, &tot), return 1);
  /* A quantised launcher that answers PZ_ERR_UNSUPPORTED (a build without that kernel) turns its
   * rows into notes; the run goes on. */
  char q_note[300] = "";
  /* bf16 experts: timed for bf16 and, as the speed-up's reference, for int4 / fp8 (one copy: at
   * every m the chosen experts' bf16 bytes are far beyond L2, and the logit sets rotate them). */
  const bool do_bf16 = true;
  const size_t mat = (size_t)E * Imax * H * 2; /* one bf16 routed matrix [E, I, H] */
  const size_t qcopy = q != Q_BF16 ? q_bytes(q, Imax) : 0;
  const size_t fixed = (do_bf16 ? 3 * mat : 0) + ((size_t)3 << 30); /* + shared, activations, workspace, slack */
  int ncopy = 0;
  if (q != Q_BF16) {
    ncopy = MAX_COPIES;
    while (ncopy > 1 && fixed + ncopy * qcopy > fr) ncopy--;
  }
  const size_t need = fixed + (size_t)ncopy * qcopy;
  pz_bf16 *wg = NULL, *wu = NULL, *wd = NULL, *sg = NULL, *su = NULL, *sd = NULL, *x = NULL;
  char *qw[MAX_COPIES] = {NULL, NULL, NULL};
  float *logits = NULL, *out = NULL;
  void *ws = NULL;
  unsigned *sink = NULL;
  cudaStream_t s = NULL, side = NULL; /* side: the int4 / fp8 op's shared experts (PREZERO_MOE_FORK) */
  cudaEvent_t ev_fork = NULL, ev_join = NULL;
  pz_gemm_ctx *gemm = NULL; /* the int4 / fp8 op's shared experts as GEMMs by batch (PREZERO_MLP_GEMM) */
  cJSON *root = cJSON_CreateObject(), *rows = NULL;
  FILE *md = NULL;
  if (fr < need) {
    fprintf(stderr, "prezero bench moe: %zu MB free, TP %d %s needs %zu MB; use a larger --tp\n", fr >> 20, min_tp, qname[q],
            need >> 20);
    goto fail;
  }
  BENCH_CUDA(cudaStreamCreate(&s));
  BENCH_CUDA(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
  BENCH_CUDA(cudaEventCreateWithFlags(&ev_fork, cudaEventDisableTiming));
  BENCH_CUDA(cudaEventCreateWithFlags(&ev_join, cudaEventDisableTiming));
  if (q != Q_BF16) BENCH_CHECK(pz_gemm_ctx_create_opts(moe_opts(), &gemm));
  if (do_bf16) {
    BENCH_CUDA(cudaMalloc((void **)&wg, mat));
    BENCH_CUDA(cudaMalloc((void **)&wu, mat));
    BENCH_CUDA(cudaMalloc((void **)&wd, mat));
  }
  for (int c = 0; c < ncopy; c++) BENCH_CUDA(cudaMalloc((void **)&qw[c], qcopy));
  /* the shared expert's gate and up in one allocation, up's rows right after gate's at each TP's I (as the
   * executor's arena lays out consecutive weights: pz_cuda_mlp_one_gu) */
  BENCH_CUDA(cudaMalloc((void **)&sg, 2 * (size_t)Imax * H * 2));
  BENCH_CUDA(cudaMalloc((void **)&sd, (size_t)Imax * H * 2));
  BENCH_CUDA(cudaMalloc((void **)&x, (size_t)max_m * H * 2));
  BENCH_CUDA(cudaMalloc((void **)&logits, sizeof(float) * NSETS * max_m * E));
  BENCH_CUDA(cudaMalloc((void **)&out, sizeof(float) * max_m * H));
  BENCH_CUDA(cudaMalloc((void **)&sink, sizeof(unsigned)));
  {
    const float sc = 0.02f;
    if (do_bf16) {
      BENCH_CHECK(pz_moe_fill_bf16(wg, (int64_t)(mat / 2), 1, sc, s));
      BENCH_CHECK(pz_moe_fill_bf16(wu, (int64_t)(mat / 2), 2, sc, s));
      BENCH_CHECK(pz_moe_fill_bf16(wd, (int64_t)(mat / 2), 3, sc, s));
    }
    /* Quantised copies: the weights get hashed bits (every nibble is a valid 4-bit value; e4m3 bytes
     * of bf16 halves of magnitude < 1 are finite), INT4 scales small bf16 values; FP8 scales are the
     * same hashed halves read as f32 (finite). The kernels' work does not depend on the values. */
    for (int c = 0; c < ncopy; c++) {
      const size_t wsz = q_wbytes(q, Imax);
      BENCH_CHECK(pz_moe_fill_bf16((pz_bf16 *)qw[c], (int64_t)(3 * wsz / 2), 10 + c, q == Q_INT4 ? 1.0f : 0.5f, s));
      BENCH_CHECK(pz_moe_fill_bf16((pz_bf16 *)(qw[c] + 3 * wsz), (int64_t)((qcopy - 3 * wsz) / 2), 20 + c, 0.002f, s));
    }
    BENCH_CHECK(pz_moe_fill_bf16(sg, 2 * Imax * H, 4, sc, s));
    BENCH_CHECK(pz_moe_fill_bf16(sd, Imax * H, 6, sc, s));
    BENCH_CHECK(pz_moe_fill_bf16(x, max_m * H, 7, 1.0f, s));
    float *hl = malloc(sizeof(float) * NSETS * max_m * E);
    if (!hl) { fprintf(stderr, "prezero bench moe: out of host memory\n"); goto fail; }
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
    size_t wsb = 0;
    for (int t = 0; t < b->ntp; t++) {
      pz_moe_params p0;
      memset(&p0, 0, sizeof p0);
      p0.n_experts = (int)E; p0.top_k = KIMI_K; p0.n_group = 1; p0.topk_group = 1;
      p0.inter = KIMI_I / b->tps[t]; p0.shared_inter = p0.inter;
      size_t w1 = al256(pz_moe_workspace_bytes(max_m, H, &p0)) + pz_moe_route_bytes(max_m, &p0);
      size_t w2 = al256(q_ws_bytes(q, max_m, &p0)) + pz_moe_route_bytes(max_m, &p0);
      if (w1 > wsb) wsb = w1;
      if (w2 > wsb) wsb = w2;
    }
    BENCH_CUDA(cudaMalloc(&ws, wsb));
  }
  BENCH_CUDA(cudaStreamSynchronize(s));

  printf("device: %s, %d SMs; Kimi-K2.5 MoE per rank (H %d, %d experts, top %d, 1 shared), routed experts %s; "
         "%d logit sets%s per graph\n", prop.name, prop.multiProcessorCount, KIMI_H, KIMI_E, KIMI_K, qname[q], NSETS,
         ncopy > 1 ? (ncopy == 2 ? " x 2 weight copies" : " x 3 weight copies") : "");
  cJSON_AddStringToObject(root, "device", prop.name);
  {
    char cmd[1024];
    pz_bench_command_line(cmd, sizeof cmd, "prezero bench moe", argc - 1, argv + 1);
    pz_bench_json_add_command_date(root, cmd);
  }
  cJSON_AddStringToObject(root, "quant", qname[q]);
  cJSON_AddNumberToObject(root, "weight_copies", q != Q_BF16 ? ncopy : 1);
  cJSON_AddStringToObject(root, "method",
                          "CUDA graph of NSETS x copies launches of the MoE op (router top-k + gather + gate/up + "
                          "down + combine + bf16 shared expert; bf16: pz_moe_launch, int4 / fp8: pz_moe_w4a16_launch / "
                          "pz_moe_w8a16_launch with the router, the shared expert on a second stream beside the router "
                          "and gather unless PREZERO_MOE_FORK=0; int4 / fp8: the shared expert as split-K GEMMs + SiLU-and-multiply + GEMM "
                          "where shared_as_gemms, PREZERO_MLP_GEMM; gate and up as one GEMM where shared_one_gu, PREZERO_MLP_ONE_GU) cycling 4 random logit sets (and for int4 / fp8 "
                          "the weight copies); median per-launch time over reps replays after a warm-up; touched bytes "
                          "= distinct chosen experts x expert bytes (int4: packed words + bf16 group-32 scales; fp8: "
                          "e4m3 bytes + f32 128x128 block scales) + shared expert bf16 bytes "
                          "(averaged over the sets); hbm_share = touched bytes / us / 4.8 TB/s");
  rows = cJSON_AddArrayToObject(root, "rows");
  if (b->md_path && !(md = fopen(b->md_path, "w"))) {
    fprintf(stderr, "prezero bench moe: cannot write --md %s; give a writable path\n", b->md_path);
    goto fail;
  }
  if (md) {
    fprintf(md, "prezero bench moe --quant %s (%s), routed experts %s; touched = chosen experts + shared expert\n\n",
            qname[q], prop.name, qname[q]);
    fprintf(md, "| TP | m | experts read | touched MB | µs | TB/s | %% of 4.8 TB/s | bf16 µs | speed-up vs bf16 | read µs (same bytes) / note | int4 stored-layout µs (its / tiled) |\n");
    pz_bench_md_rule(md, 11, 0);
  }
  printf("%3s %4s %8s %10s %9s %7s %7s %9s %8s %9s %16s\n", "TP", "m", "experts", "touch MB", "us", "TB/s", "%HBM", "bf16 us",
         "speedup", "read us", "stored-layout us");
  for (int ti = 0; ti < b->ntp; ti++) {
    const int tp = b->tps[ti];
    const int64_t I = KIMI_I / tp;
    pz_moe_params p;
    memset(&p, 0, sizeof p);
    p.n_experts = (int)E; p.top_k = KIMI_K; p.n_group = 1; p.topk_group = 1;
    p.scoring = PZ_SCORE_SIGMOID; p.topk_method = PZ_TOPK_NOAUX_TC; p.norm_topk_prob = true;
    p.routed_scaling_factor = 2.827f; p.inter = I; p.shared_inter = I;
    for (int mi = 0; mi < b->nm; mi++) {
      const int m = b->ms[mi];
      cJSON *row = cJSON_CreateObject();
      cJSON_AddItemToArray(rows, row);
      cJSON_AddStringToObject(row, "quant", qname[q]);
      cJSON_AddNumberToObject(row, "tp", tp);
      cJSON_AddNumberToObject(row, "m", m);
      cJSON_AddNumberToObject(row, "inter", (double)I);
      if (q_note[0]) { /* the quantised launcher said unsupported: a note per row */
        printf("%3d %4d %s\n", tp, m, q_note);
        md_row_note(md, tp, m, q_note);
        cJSON_AddStringToObject(row, "note", q_note);
        continue;
      }
      /* routing of each logit set (deterministic; the same for both storages) */
      const size_t rb = pz_moe_route_bytes(m, &p);
      char *route = (char *)ws + al256(q_ws_bytes(q, m, &p));
      int32_t *ids = (int32_t *)route;
      float *wts = (float *)(route + rb / 2);
      double distinct = 0;
      int32_t h_ids[BENCH_MAX_M * KIMI_K];
      for (int ls = 0; ls < NSETS; ls++) {
        BENCH_CHECK(pz_moe_route_launch(m, logits + (size_t)ls * max_m * E, E, NULL, &p, ids, wts, s));
        BENCH_CUDA(cudaStreamSynchronize(s));
        BENCH_CUDA(cudaMemcpy(h_ids, ids, sizeof(int32_t) * m * KIMI_K, cudaMemcpyDeviceToHost));
        unsigned char seen[KIMI_E] = {0};
        for (int k = 0; k < m * KIMI_K; k++)
          if (h_ids[k] >= 0 && h_ids[k] < KIMI_E && !seen[h_ids[k]]) { seen[h_ids[k]] = 1; distinct += 1; }
      }
      distinct /= NSETS;
      const double shared = 3.0 * I * H * 2, routed = distinct * expert_bytes(q, I), touched = routed + shared;
      /* bf16 MoE (pz_moe_launch: route + experts), one weight copy, the logit sets rotated */
      double us_bf16 = -1;
      if (do_bf16) {
        pz_moe_args a;
        memset(&a, 0, sizeof a);
        a.m = m; a.H = H; a.p = p; a.x = x; a.ldx = H;
        su = sg + I * H; /* adjacent to gate at this TP's I */
        a.w_gate = wg; a.w_up = wu; a.w_down = wd; a.sh_gate = sg; a.sh_up = su; a.sh_down = sd;
        a.out = out; a.ld_out = H; a.workspace = ws;
        a.workspace_bytes = al256(pz_moe_workspace_bytes(m, H, &p)) + pz_moe_route_bytes(m, &p);
        a.route_serial_topk = route_serial();
        a.route_keys_off = route_keys_off();
        cudaGraph_t g = NULL;
        cudaGraphExec_t ge = NULL;
        BENCH_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
        for (int r = 0; r < 2 * NSETS; r++)
          BENCH_CHECK(pz_moe_launch(&a, logits + (size_t)(r % NSETS) * max_m * E, E, NULL, NULL, NULL, s));
        BENCH_CUDA(cudaStreamEndCapture(s, &g));
        BENCH_CUDA(cudaGraphInstantiate(&ge, g, 0));
        BENCH_CHECK(pz_bench_graph_us(ge, s, 2 * NSETS, b->reps, &us_bf16));
        PZ_CUDA_IGNORE(cudaGraphExecDestroy(ge)); /* a destroy: nothing to report */
        PZ_CUDA_IGNORE(cudaGraphDestroy(g));
      }
      double us = us_bf16, us_ct = -1;
      /* int4: the tiled layout the engine runs (PREZERO_MOE_W4_TILED=1, lay 0), then the stored
       * compressed-tensors layout (lay 1), same bytes; the weights are random words either way */
      const int nlay = q == Q_INT4 && H % 128 == 0 && I % 128 == 0 ? 2 : 1;
      for (int lay = 0; lay < nlay && q != Q_BF16; lay++) { /* route + W4A16 / W8A16 experts, launches cycling (logit set, weight copy) */
        cudaGraph_t g = NULL;
        cudaGraphExec_t ge = NULL;
        const int nl = NSETS * (ncopy > 1 ? ncopy : 2);
        pz_status lst = PZ_OK;
        BENCH_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
        for (int r = 0; r < nl && lst == PZ_OK; r++) {
          const q_view v = q_at(q, qw[(r / NSETS) % ncopy], I);
          pz_moe_q_args a;
          memset(&a, 0, sizeof a);
          a.m = m; a.H = H; a.p = q_params(q, p);
          a.x = x; a.ldx = H; a.ids = ids; a.weights = wts;
          a.w_gate = v.wg; a.w_up = v.wu; a.w_down = v.wd; a.s_gate = v.sg; a.s_up = v.su; a.s_down = v.sd;
          a.sh_gate = sg; a.sh_up = sg + I * H; a.sh_down = sd;
          a.out = out; a.ld_out = H; a.workspace = ws; a.workspace_bytes = (size_t)(route - (char *)ws);
          a.l2pf = moe_l2pf(); /* PREZERO_MOE_L2PF=1: the W4A16 kernel with its L2 prefetch */
          a.w4_tiled = nlay == 2 && lay == 0;
          a.w4_wk_up = b->wk_up;
          a.w4_wk_dn = b->wk_dn;
          a.w4_wk_fixed = moe_w4_wk_fixed();
          a.direct_off = moe_direct_off();
          a.items_dynamic = items_dynamic();
          a.tail_off = tail_off();
          a.w4_up_ctas = moe_up_former() ? 4 : 0;
          a.w4_waves_off = moe_waves_off();
          a.logits = logits + (size_t)(r % NSETS) * max_m * E; /* the launcher routes */
          a.ld_logits = E;
          a.route_serial_topk = route_serial();
          a.route_keys_off = route_keys_off();
          if (moe_fork() != 0) { /* the shared expert beside the router and gather */
            a.side = side;
            a.ev_fork = ev_fork;
            a.ev_join = ev_join;
            a.fork_join = moe_fork() > 0 ? moe_fork() : 0;
          }
          a.gemm = gemm;
          lst = q == Q_INT4 ? pz_moe_w4a16_launch(&a, s) : pz_moe_w8a16_launch(&a, s);
        }
        char lmsg[300];
        snprintf(lmsg, sizeof lmsg, "%s", lst != PZ_OK ? pz_last_error() : "");
        cudaError_t ce = cudaStreamEndCapture(s, &g);
        if (lst == PZ_ERR_UNSUPPORTED) { /* the rest of the rows say so too */
          if (g) PZ_CUDA_IGNORE(cudaGraphDestroy(g));
          PZ_CUDA_IGNORE(cudaGetLastError());
          snprintf(q_note, sizeof q_note, "%s unsupported on CUDA: %.250s", qname[q], lmsg);
          printf("%3d %4d %s\n", tp, m, q_note);
          md_row_note(md, tp, m, q_note);
          cJSON_AddStringToObject(row, "note", q_note);
          break; /* out of the layouts; the row is done */
        }
        if (lst != PZ_OK) { fprintf(stderr, "prezero bench moe: the %s MoE launch failed: %s\n", qname[q], lmsg); goto fail; }
        BENCH_CUDA(ce);
        BENCH_CUDA(cudaGraphInstantiate(&ge, g, 0));
        BENCH_CHECK(pz_bench_graph_us(ge, s, nl, b->reps, lay == 0 ? &us : &us_ct));
        PZ_CUDA_IGNORE(cudaGraphExecDestroy(ge));
        PZ_CUDA_IGNORE(cudaGraphDestroy(g));
      }
      if (q_note[0]) continue;
      /* yardstick: one contiguous read of the same touched bytes, rotated over the weight pool */
      const char *pool[MAX_COPIES + 3];
      int npool = 0;
      size_t pool_bytes = 0;
      if (q != Q_BF16) { for (int c = 0; c < ncopy; c++) pool[npool++] = qw[c]; pool_bytes = qcopy; }
      else { pool[0] = (const char *)wg; pool[1] = (const char *)wu; pool[2] = (const char *)wd; npool = 3; pool_bytes = mat; }
      int64_t rbytes = (int64_t)touched < (int64_t)pool_bytes ? (int64_t)touched : (int64_t)pool_bytes;
      rbytes &= ~(int64_t)4095;
      double rus = 0;
      if (rbytes >= 4096) {
        cudaGraph_t gr = NULL;
        cudaGraphExec_t ger = NULL;
        const int nread = 8;
        BENCH_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
        for (int r = 0; r < nread; r++) {
          int64_t off = (int64_t)((r / npool) * rbytes) % (int64_t)(pool_bytes - rbytes + 1);
          off &= ~(int64_t)4095;
          BENCH_CHECK(pz_moe_stream_read(pool[r % npool] + off, rbytes, sink, s));
        }
        BENCH_CUDA(cudaStreamEndCapture(s, &gr));
        BENCH_CUDA(cudaGraphInstantiate(&ger, gr, 0));
        BENCH_CHECK(pz_bench_graph_us(ger, s, nread, b->reps, &rus));
        rus = rus * touched / (double)rbytes; /* scaled when capped at one pool buffer */
        PZ_CUDA_IGNORE(cudaGraphExecDestroy(ger));
        PZ_CUDA_IGNORE(cudaGraphDestroy(gr));
      }
      BENCH_CUDA(cudaGetLastError());
      const double tbps = touched / (us * 1e-6) / 1e12, share = tbps / PZ_BENCH_HBM_TBPS;
      const double speedup = q != Q_BF16 && us_bf16 > 0 ? us_bf16 / us : 0;
      char bf[32] = "-", sp[32] = "-", ct[48] = "-";
      if (q != Q_BF16) { snprintf(bf, sizeof bf, "%.1f", us_bf16); snprintf(sp, sizeof sp, "%.2fx", speedup); }
      if (us_ct > 0) snprintf(ct, sizeof ct, "%.1f (%.2fx)", us_ct, us_ct / us);
      printf("%3d %4d %8.1f %10.1f %9.1f %7.2f %6.1f%% %9s %8s %9.1f %16s\n", tp, m, distinct, touched / 1e6, us, tbps,
             100.0 * share, bf, sp, rus, ct);
      fflush(stdout);
      if (md)
        fprintf(md, "| %d | %d | %.1f | %.1f | %.1f | %.2f | %.1f%% | %s | %s | %.1f | %s |\n", tp, m, distinct, touched / 1e6,
                us, tbps, 100.0 * share, bf, sp, rus, ct);
      if (us_ct > 0) cJSON_AddNumberToObject(row, "stored_layout_us", us_ct);
      cJSON_AddNumberToObject(row, "experts_read", distinct);
      cJSON_AddNumberToObject(row, "routed_bytes", routed);
      cJSON_AddNumberToObject(row, "shared_bytes", shared);
      cJSON_AddNumberToObject(row, "touched_bytes", touched);
      cJSON_AddNumberToObject(row, "us", us);
      cJSON_AddNumberToObject(row, "touched_tbps", tbps);
      cJSON_AddNumberToObject(row, "hbm_share", share);
      if (q != Q_BF16) {
        cJSON_AddNumberToObject(row, "bf16_us", us_bf16);
        cJSON_AddNumberToObject(row, "speedup_vs_bf16", speedup);
      }
      if (q == Q_INT4) cJSON_AddBoolToObject(row, "w4_wk_fixed", moe_w4_wk_fixed()); /* PREZERO_MOE_W4_WK=0 */
      if (q == Q_INT4) cJSON_AddBoolToObject(row, "w4_up_former", moe_up_former()); /* PREZERO_MOE_W4_UP_REGS=0 */
      if (q == Q_INT4) cJSON_AddBoolToObject(row, "w4_waves_off", moe_waves_off()); /* PREZERO_MOE_W4_WAVES=0 */
      if (q != Q_BF16) cJSON_AddBoolToObject(row, "direct_off", moe_direct_off());  /* PREZERO_MOE_DIRECT=0 */
      if (q != Q_BF16) cJSON_AddBoolToObject(row, "items_dynamic", items_dynamic()); /* PREZERO_MOE_DYNAMIC=1 */
      if (q != Q_BF16) cJSON_AddBoolToObject(row, "tail_off", tail_off());           /* PREZERO_MOE_TAIL=0 */
      cJSON_AddBoolToObject(row, "route_serial_topk", route_serial());              /* PREZERO_MOE_ROUTE_TOPK=0 */
      cJSON_AddBoolToObject(row, "route_keys_off", route_keys_off());               /* PREZERO_MOE_ROUTE_KEYS=0 */
      if (q != Q_BF16) cJSON_AddNumberToObject(row, "moe_fork", moe_fork());        /* PREZERO_MOE_FORK, -1 unset */
      if (q != Q_BF16) cJSON_AddBoolToObject(row, "shared_as_gemms", pz_cuda_mlp_uses_gemm(gemm, PZ_MLP_SHARED, m, H, I)); /* PREZERO_MLP_GEMM */
      if (q != Q_BF16) cJSON_AddBoolToObject(row, "shared_one_gu", pz_cuda_mlp_one_gu(gemm, H, I, sg, sg + I * H)); /* PREZERO_MLP_ONE_GU */
      cJSON_AddNumberToObject(row, "read_us_same_bytes", rus);
    }
  }
  rc = 0;
fail:
  if (b->json_path && rows && pz_bench_write_json(root, b->json_path, 0) != 0) {
    fprintf(stderr, "prezero bench moe: cannot write --json %s; give a writable path\n", b->json_path);
    rc = 1;
  }
  if (md) fclose(md);
  cJSON_Delete(root);
  /* Cleanup: failures ignored on purpose (the exit code is already decided). */
  PZ_CUDA_IGNORE(cudaFree(wg)); PZ_CUDA_IGNORE(cudaFree(wu)); PZ_CUDA_IGNORE(cudaFree(wd));
  for (int c = 0; c < MAX_COPIES; c++) PZ_CUDA_IGNORE(cudaFree(qw[c]));
  PZ_CUDA_IGNORE(cudaFree(sg)); PZ_CUDA_IGNORE(cudaFree(sd)); PZ_CUDA_IGNORE(cudaFree(x));
  PZ_CUDA_IGNORE(cudaFree(logits)); PZ_CUDA_IGNORE(cudaFree(out)); PZ_CUDA_IGNORE(cudaFree(ws));
  PZ_CUDA_IGNORE(cudaFree(sink));
  if (s) PZ_CUDA_IGNORE(cudaStreamDestroy(s));
  if (side) PZ_CUDA_IGNORE(cudaStreamDestroy(side));
  if (ev_fork) PZ_CUDA_IGNORE(cudaEventDestroy(ev_fork));
  if (ev_join) PZ_CUDA_IGNORE(cudaEventDestroy(ev_join));
  pz_gemm_ctx_destroy(gemm);
  return rc;
}
#endif

int pz_cmd_bench_moe(int argc, char **argv) {
  bench_args b;
  int p = parse(argc, argv, &b);
  if (p) return p < 0 ? 0 : p;
#ifdef PZ_HAVE_CUDA
  return run_bench(&b, argc, argv);
#else
  return pz_bench_no_cuda("bench moe", 1, argv, usage);
#endif
}
