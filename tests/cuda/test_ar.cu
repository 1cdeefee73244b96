/* CUDA test of the fused AR + residual + RMSNorm donor with zero_fill: CPU reference
 * (pz_ref_ar_rmsnorm), bit-identity on integer inputs and across ranks, fill ranges with guard
 * bands, 10,000 mixed-batch CUDA-graph replays, a peer that never arrives (timeout), NCCL path.
 * TP=1 on one GPU; TP=2 when two GPUs are visible. PZ_TEST_QUICK=1: fewer replays, no TP=2
 * (for compute-sanitizer). Peer timeouts are multiplied by PZ_TEST_TIMEOUT_SCALE (pz_test.h).
 * Exits 77 without a GPU. */
extern "C" {
#include "core/status.h" /* C header without C++ guards */
}
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "backend/cpu/ref_ops.h"
#include "backend/cuda/ar_fused.h"
#include "backend/cuda/ar_nccl.h"
#include "backend/cuda/comm.h"
#include "backend/cuda/gate_cuda.h"
#include "prezero_options.h"
#include "pz_test.h"

#define CU(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) { fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); exit(1); } } while (0)

static uint64_t rng = 88172645463325252ull;
static uint32_t next_u32(void) { rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17; return (uint32_t)(rng >> 11); }
static float uniform(void) { return (float)(next_u32() & 0xffffff) / 16777216.0f * 2.0f - 1.0f; }

/* Host + device copies of one rank's operands for [m, H] (row stride ld = H + 8). */
struct Rank {
  int dev;
  int64_t m, H, ld;
  float *h_part, *h_res;
  float *d_part, *d_res_in, *d_res_out;
  pz_bf16 *d_w, *d_x;
};

static void make_inputs(float *part, float *res, int64_t n, bool integer) {
  for (int64_t i = 0; i < n; i++) {
    part[i] = integer ? (float)((int)(next_u32() % 17) - 8) : uniform() * 3.0f;
    res[i] = integer ? (float)((int)(next_u32() % 17) - 8) : uniform() * 3.0f;
  }
}

static void rank_alloc(Rank *r, int dev, int64_t m, int64_t H) {
  r->dev = dev; r->m = m; r->H = H; r->ld = H + 8;
  size_t n = (size_t)m * r->ld;
  r->h_part = (float *)calloc(n, 4);
  r->h_res = (float *)calloc(n, 4);
  CU(cudaSetDevice(dev));
  CU(cudaMalloc(&r->d_part, n * 4));
  CU(cudaMalloc(&r->d_res_in, n * 4));
  CU(cudaMalloc(&r->d_res_out, n * 4));
  CU(cudaMalloc(&r->d_w, (size_t)H * 2));
  CU(cudaMalloc(&r->d_x, n * 2));
}
static void rank_free(Rank *r) {
  cudaSetDevice(r->dev);
  cudaFree(r->d_part); cudaFree(r->d_res_in); cudaFree(r->d_res_out); cudaFree(r->d_w); cudaFree(r->d_x);
  free(r->h_part); free(r->h_res);
}
static void rank_upload(Rank *r, const pz_bf16 *w) {
  size_t n = (size_t)r->m * r->ld;
  CU(cudaSetDevice(r->dev));
  CU(cudaMemcpy(r->d_part, r->h_part, n * 4, cudaMemcpyHostToDevice));
  CU(cudaMemcpy(r->d_res_in, r->h_res, n * 4, cudaMemcpyHostToDevice));
  CU(cudaMemcpy(r->d_w, w, (size_t)r->H * 2, cudaMemcpyHostToDevice));
  CU(cudaMemset(r->d_res_out, 0xff, n * 4)); /* NaN poison: every element must be written */
  CU(cudaMemset(r->d_x, 0xff, n * 2));
}
static pz_ar_rmsnorm_args rank_args(const Rank *r, int64_t m, bool in_place) {
  pz_ar_rmsnorm_args a;
  memset(&a, 0, sizeof a);
  a.partial = r->d_part; a.ld_partial = r->ld;
  a.residual_in = r->d_res_in; a.residual_out = in_place ? r->d_res_in : r->d_res_out; a.ld_res = r->ld;
  a.weight = r->d_w; a.x_norm = r->d_x; a.ld_x = r->ld;
  a.eps = 1e-6f; a.m = m; a.H = r->H;
  return a;
}

/* Compares rank outputs with the CPU reference of rows [0, m). exact: bit for bit; else
 * residual bit for bit (one add, same order) and x_norm within one bf16 ulp. */
static int check_vs_ref(int tp, Rank *ranks, const pz_bf16 *w, int64_t m, bool exact, bool in_place, const char *what) {
  int64_t H = ranks[0].H, ld = ranks[0].ld;
  size_t n = (size_t)m * ld;
  const float *parts[8];
  for (int r = 0; r < tp; r++) parts[r] = ranks[r].h_part;
  float *ref_res = (float *)calloc(n, 4);
  pz_bf16 *ref_x = (pz_bf16 *)calloc(n, 2);
  pz_ref_ar_rmsnorm(tp, parts, ld, ranks[0].h_res, ref_res, ld, w, 1e-6f, m, H, ref_x, ld);
  float *g_res = (float *)malloc(n * 4);
  pz_bf16 *g_x = (pz_bf16 *)malloc(n * 2);
  int bad = 0;
  for (int r = 0; r < tp; r++) {
    CU(cudaSetDevice(ranks[r].dev));
    CU(cudaMemcpy(g_res, in_place ? ranks[r].d_res_in : ranks[r].d_res_out, n * 4, cudaMemcpyDeviceToHost));
    CU(cudaMemcpy(g_x, ranks[r].d_x, n * 2, cudaMemcpyDeviceToHost));
    for (int64_t i = 0; i < m && bad < 5; i++)
      for (int64_t j = 0; j < H && bad < 5; j++) {
        size_t k = (size_t)i * ld + j;
        if (memcmp(&g_res[k], &ref_res[k], 4) != 0) {
          fprintf(stderr, "%s: rank %d residual[%lld,%lld] = %.9g, ref %.9g\n", what, r, (long long)i, (long long)j, g_res[k], ref_res[k]);
          bad++;
        }
        float gx = pz_bf16_to_f32(g_x[k]), rx = pz_bf16_to_f32(ref_x[k]);
        bool ok = exact ? g_x[k] == ref_x[k] : (gx == rx || fabsf(gx - rx) <= fabsf(rx) * (1.0f / 128.0f) + 1e-30f);
        if (!ok) {
          fprintf(stderr, "%s: rank %d x_norm[%lld,%lld] = %.9g, ref %.9g\n", what, r, (long long)i, (long long)j, gx, rx);
          bad++;
        }
      }
  }
  /* Every rank holds the same bits. */
  if (tp > 1) {
    pz_bf16 *x0 = (pz_bf16 *)malloc(n * 2);
    float *r0 = (float *)malloc(n * 4);
    CU(cudaSetDevice(ranks[0].dev));
    CU(cudaMemcpy(x0, ranks[0].d_x, n * 2, cudaMemcpyDeviceToHost));
    CU(cudaMemcpy(r0, in_place ? ranks[0].d_res_in : ranks[0].d_res_out, n * 4, cudaMemcpyDeviceToHost));
    for (int r = 1; r < tp; r++) {
      CU(cudaSetDevice(ranks[r].dev));
      CU(cudaMemcpy(g_x, ranks[r].d_x, n * 2, cudaMemcpyDeviceToHost));
      CU(cudaMemcpy(g_res, in_place ? ranks[r].d_res_in : ranks[r].d_res_out, n * 4, cudaMemcpyDeviceToHost));
      for (int64_t i = 0; i < m; i++) {
        if (memcmp(x0 + i * ld, g_x + i * ld, H * 2) || memcmp(r0 + i * ld, g_res + i * ld, H * 4)) {
          fprintf(stderr, "%s: rank %d row %lld differs from rank 0\n", what, r, (long long)i);
          bad++;
          break;
        }
      }
    }
    free(x0); free(r0);
  }
  free(ref_res); free(ref_x); free(g_res); free(g_x);
  CHECK(bad == 0);
  return bad;
}

/* Fill buffer with guard bands: 4 guard rows after m, 16 guard columns per row, 64 bytes
 * before the buffer; everything starts as 0x5a bytes. */
struct FillBuf {
  int dev;
  char *base;     /* device allocation */
  void *ptr;      /* base + 64 */
  int64_t rows, n_total, stride;
  pz_dtype dt;
  size_t bytes;
};
static void fill_alloc(FillBuf *f, int dev, int64_t m, int64_t n_total, pz_dtype dt) {
  f->dev = dev; f->dt = dt; f->rows = m + 4; f->n_total = n_total;
  int64_t es = (int64_t)pz_dtype_size(dt);
  f->stride = n_total + 16;
  while ((f->stride * es) % 16) f->stride++;
  f->bytes = 64 + (size_t)f->rows * f->stride * es + 64;
  CU(cudaSetDevice(dev));
  CU(cudaMalloc(&f->base, f->bytes));
  f->ptr = f->base + 64;
}
static void fill_poison(FillBuf *f) { CU(cudaSetDevice(f->dev)); CU(cudaMemset(f->base, 0x5a, f->bytes)); }
static pz_zero_fill fill_desc(const FillBuf *f, int64_t n_base) {
  pz_zero_fill z = {f->ptr, f->n_total, n_base, f->stride, f->dt};
  return z;
}
/* Rows [0,m) x columns [0,cols) must be zero bytes; every other byte still 0x5a. */
static int fill_check(const FillBuf *f, int64_t m, int64_t cols, const char *what) {
  char *h = (char *)malloc(f->bytes);
  CU(cudaSetDevice(f->dev));
  CU(cudaMemcpy(h, f->base, f->bytes, cudaMemcpyDeviceToHost));
  int64_t es = (int64_t)pz_dtype_size(f->dt);
  int bad = 0;
  for (size_t b = 0; b < f->bytes && bad < 5; b++) {
    bool inside = false;
    if (b >= 64) {
      int64_t off = (int64_t)(b - 64), row = off / (f->stride * es), col = (off % (f->stride * es)) / es;
      inside = row < m && col < cols;
    }
    if (h[b] != (inside ? 0 : 0x5a)) {
      fprintf(stderr, "%s: byte %zu is 0x%02x, want %s\n", what, b, (unsigned char)h[b], inside ? "0" : "0x5a");
      bad++;
    }
  }
  free(h);
  CHECK(bad == 0);
  return bad;
}

static pz_bf16 *make_weight(int64_t H) {
  pz_bf16 *w = (pz_bf16 *)malloc(H * 2);
  for (int64_t j = 0; j < H; j++) w[j] = pz_f32_to_bf16(0.5f + (float)(next_u32() % 64) / 32.0f);
  return w;
}

static void test_tp1(const pz_device_desc *dd, int quick) {
  pz_comm_config cc = PZ_COMM_CONFIG_INIT;
  cc.tp = 1; cc.devices[0] = 0; cc.max_m = 128; cc.max_H = 7168; cc.timeout_us = pz_test_timeout(2000000);
  pz_comm *c = NULL;
  CHECK_OK(pz_comm_create(&cc, &c));
  if (!c) return;
  cudaStream_t s;
  CU(cudaSetDevice(0));
  CU(cudaStreamCreate(&s));
  const int64_t Hs[] = {7168, 2048, 5120, 1032};
  const int64_t ms[] = {1, 5, 16, 128};
  for (int hi = 0; hi < 4; hi++)
    for (int mi = 0; mi < 4; mi++)
      for (int integer = 0; integer < 2; integer++) {
        int64_t H = Hs[hi], m = ms[mi];
        if (quick && m == 128 && hi > 0) continue;
        Rank r;
        rank_alloc(&r, 0, m, H);
        pz_bf16 *w = make_weight(H);
        make_inputs(r.h_part, r.h_res, m * r.ld, integer);
        rank_upload(&r, w);
        bool in_place = (mi & 1) != 0;
        pz_ar_rmsnorm_args a = rank_args(&r, m, in_place);
        CHECK_OK(pz_ar_rmsnorm_launch(c, 0, &a, dd, s));
        CU(cudaStreamSynchronize(s));
        char what[96];
        snprintf(what, sizeof what, "tp1 H=%lld m=%lld %s %s", (long long)H, (long long)m, integer ? "int" : "rand",
                 in_place ? "in-place" : "out-of-place");
        check_vs_ref(1, &r, w, m, integer != 0, in_place, what);
        free(w);
        rank_free(&r);
      }
  /* K = 3 CTAs per row on one GPU: the local sum-of-squares handshake (the override travels in
   * the device description: PREZERO_AR_CTAS_PER_ROW=3 through the options reader). */
  pz_device_desc k3 = *dd;
  k3.ar_ctas_per_row = 3;
  const pz_device_desc *dd0 = dd;
  dd = &k3;
  {
    Rank r;
    rank_alloc(&r, 0, 9, 7168);
    pz_bf16 *w = make_weight(7168);
    make_inputs(r.h_part, r.h_res, 9 * r.ld, true);
    rank_upload(&r, w);
    pz_ar_rmsnorm_args a = rank_args(&r, 9, false);
    for (int it = 0; it < 3; it++) CHECK_OK(pz_ar_rmsnorm_launch(c, 0, &a, dd, s));
    CU(cudaStreamSynchronize(s));
    check_vs_ref(1, &r, w, 9, true, false, "tp1 K=3");
    free(w);
    rank_free(&r);
  }
  /* The same through a thread-block cluster of 3 (distributed shared memory), with a fill
   * whose CTA count is rounded to the cluster size. */
  k3.ar_cluster = 2; /* PREZERO_AR_CLUSTER=1 */
  {
    Rank r;
    rank_alloc(&r, 0, 9, 7168);
    pz_bf16 *w = make_weight(7168);
    make_inputs(r.h_part, r.h_res, 9 * r.ld, true);
    rank_upload(&r, w);
    FillBuf f;
    fill_alloc(&f, 0, 9, 15424, PZ_F32);
    fill_poison(&f);
    pz_ar_rmsnorm_args a = rank_args(&r, 9, false);
    a.fill = fill_desc(&f, 8256);
    a.fill_all = true;
    for (int it = 0; it < 3; it++) CHECK_OK(pz_ar_rmsnorm_launch(c, 0, &a, dd, s));
    CU(cudaStreamSynchronize(s));
    check_vs_ref(1, &r, w, 9, true, false, "tp1 K=3 cluster");
    fill_check(&f, 9, 15424, "tp1 K=3 cluster fill");
    cudaFree(f.base);
    free(w);
    rank_free(&r);
  }
  dd = dd0;
  /* zero_fill: f32 and bf16, full and n_base-only, odd widths (tails), with guard bands. */
  {
    const int64_t m = 7, H = 2048;
    Rank r;
    rank_alloc(&r, 0, m, H);
    pz_bf16 *w = make_weight(H);
    make_inputs(r.h_part, r.h_res, m * r.ld, true);
    for (int dt = 0; dt < 2; dt++)
      for (int all = 0; all < 2; all++) {
        const int64_t n_total = dt ? 1001 : 15424, n_base = dt ? 333 : 8256;
        FillBuf f;
        fill_alloc(&f, 0, m, n_total, dt ? PZ_BF16 : PZ_F32);
        fill_poison(&f);
        rank_upload(&r, w);
        pz_ar_rmsnorm_args a = rank_args(&r, m, false);
        a.fill = fill_desc(&f, n_base);
        a.fill_all = all != 0;
        CHECK_OK(pz_ar_rmsnorm_launch(c, 0, &a, dd, s));
        CU(cudaStreamSynchronize(s));
        char what[64];
        snprintf(what, sizeof what, "tp1 fill %s %s", dt ? "bf16" : "f32", all ? "all" : "n_base");
        fill_check(&f, m, all ? n_total : n_base, what);
        check_vs_ref(1, &r, w, m, true, false, what);
        cudaFree(f.base);
      }
    /* Fill wider than the wave's spare slots (m=128, 15424 f32 columns = 7.9 MB): still all rows. */
    FillBuf f;
    fill_alloc(&f, 0, 128, 15424, PZ_F32);
    fill_poison(&f);
    Rank r2;
    rank_alloc(&r2, 0, 128, H);
    make_inputs(r2.h_part, r2.h_res, 128 * r2.ld, true);
    rank_upload(&r2, w);
    pz_ar_rmsnorm_args a = rank_args(&r2, 128, false);
    a.fill = fill_desc(&f, 15424);
    a.fill_all = true;
    CHECK_OK(pz_ar_rmsnorm_launch(c, 0, &a, dd, s));
    CU(cudaStreamSynchronize(s));
    fill_check(&f, 128, 15424, "tp1 fill m=128");
    cudaFree(f.base);
    rank_free(&r2);
    /* Argument checks. */
    pz_ar_rmsnorm_args b = rank_args(&r, m, false);
    b.H = 2044;
    CHECK_ST(pz_ar_rmsnorm_launch(c, 0, &b, dd, s), PZ_ERR_SHAPE);
    b = rank_args(&r, 129, false);
    CHECK_ST(pz_ar_rmsnorm_launch(c, 0, &b, dd, s), PZ_ERR_SHAPE);
    b = rank_args(&r, m, false);
    b.fill = fill_desc(&f, 10);
    b.fill.ptr = (char *)f.ptr + 4;
    CHECK_ST(pz_ar_rmsnorm_launch(c, 0, &b, dd, s), PZ_ERR_INVALID_ARG);
    free(w);
    rank_free(&r);
  }
  CHECK_OK(pz_comm_check(c));
  CU(cudaStreamDestroy(s));
  pz_comm_destroy(c);
}

/* Graph replays at mixed batch sizes on every rank of c, integer inputs, out-of-place
 * residual, fill per m (gate answer alternating); checks outputs, fills and no error. */
static void test_replays(pz_comm *c, const pz_device_desc *dd, int n_replays, const char *tag) {
  const int tp = pz_comm_tp(c);
  const int64_t H = 7168, n_total = 2112 + 64 / 2 * 192 + 7168, n_base = 2112 + 64 / 2 * 192;
  const int64_t ms[] = {1, 3, 8, 16, 33, 64, 128};
  const int nm = 7;
  Rank ranks[8];
  FillBuf fills[8][7];
  cudaStream_t st[8];
  cudaGraphExec_t ge[8][7];
  pz_bf16 *w = make_weight(H);
  for (int r = 0; r < tp; r++) {
    rank_alloc(&ranks[r], pz_comm_device(c, r), 128, H);
    make_inputs(ranks[r].h_part, ranks[r].h_res, 128 * ranks[r].ld, true);
    memcpy(ranks[r].h_res, ranks[0].h_res, 128 * ranks[r].ld * 4); /* residual is replicated */
    rank_upload(&ranks[r], w);
    CU(cudaSetDevice(ranks[r].dev));
    CU(cudaStreamCreateWithFlags(&st[r], cudaStreamNonBlocking));
    for (int mi = 0; mi < nm; mi++) {
      fill_alloc(&fills[r][mi], ranks[r].dev, ms[mi], n_total, PZ_F32);
      fill_poison(&fills[r][mi]);
      pz_ar_rmsnorm_args a = rank_args(&ranks[r], ms[mi], false);
      a.fill = fill_desc(&fills[r][mi], n_base);
      a.fill_all = (mi & 1) == 0;
      cudaGraph_t g;
      CU(cudaStreamBeginCapture(st[r], cudaStreamCaptureModeThreadLocal));
      pz_status s = pz_ar_rmsnorm_launch(c, r, &a, dd, st[r]);
      CU(cudaStreamEndCapture(st[r], &g));
      CHECK_OK(s);
      CU(cudaGraphInstantiate(&ge[r][mi], g, 0));
      CU(cudaGraphDestroy(g));
    }
  }
  int *seq = (int *)malloc(n_replays * sizeof(int));
  for (int i = 0; i < n_replays; i++) seq[i] = (int)(next_u32() % nm);
  for (int i = 0; i < n_replays; i++)
    for (int r = 0; r < tp; r++) {
      CU(cudaSetDevice(ranks[r].dev));
      CU(cudaGraphLaunch(ge[r][seq[i]], st[r]));
    }
  CHECK_OK(pz_comm_check(c));
  char what[96];
  /* The largest m replayed last-or-not wrote rows 0..127 of x_norm; rows of every m agree
   * with the reference because all replays compute the same function of constant inputs. */
  snprintf(what, sizeof what, "%s replays", tag);
  check_vs_ref(tp, ranks, w, 128, true, false, what);
  for (int r = 0; r < tp; r++)
    for (int mi = 0; mi < nm; mi++) {
      snprintf(what, sizeof what, "%s replay fill rank %d m=%lld", tag, r, (long long)ms[mi]);
      fill_check(&fills[r][mi], ms[mi], (mi & 1) == 0 ? n_total : n_base, what);
    }
  for (int r = 0; r < tp; r++) {
    CU(cudaSetDevice(ranks[r].dev));
    for (int mi = 0; mi < nm; mi++) { cudaGraphExecDestroy(ge[r][mi]); cudaFree(fills[r][mi].base); }
    cudaStreamDestroy(st[r]);
    rank_free(&ranks[r]);
  }
  free(seq);
  free(w);
}

static void test_tp2(const pz_device_desc *dd) {
  pz_comm_config cc = PZ_COMM_CONFIG_INIT;
  cc.tp = 2; cc.devices[0] = 0; cc.devices[1] = 1; cc.max_m = 128; cc.max_H = 7168; cc.timeout_us = pz_test_timeout(2000000);
  pz_comm *c = NULL;
  pz_status s = pz_comm_create(&cc, &c);
  if (s == PZ_ERR_NO_P2P) { printf("TP=2 skipped: %s\n", pz_last_error()); return; }
  CHECK_OK(s);
  if (!c) return;
  cudaStream_t st[2];
  for (int r = 0; r < 2; r++) { CU(cudaSetDevice(r)); CU(cudaStreamCreateWithFlags(&st[r], cudaStreamNonBlocking)); }
  const int64_t Hs[] = {7168, 5120, 2048};
  const int64_t ms[] = {1, 4, 8, 16, 32, 64, 128};
  for (int hi = 0; hi < 3; hi++)
    for (int mi = 0; mi < 7; mi++)
      for (int integer = 0; integer < 2; integer++) {
        int64_t H = Hs[hi], m = ms[mi];
        Rank ranks[2];
        pz_bf16 *w = make_weight(H);
        for (int r = 0; r < 2; r++) {
          rank_alloc(&ranks[r], r, m, H);
          make_inputs(ranks[r].h_part, ranks[r].h_res, m * ranks[r].ld, integer);
        }
        memcpy(ranks[1].h_res, ranks[0].h_res, m * ranks[0].ld * 4);
        pz_ar_rmsnorm_args a[2];
        for (int r = 0; r < 2; r++) { rank_upload(&ranks[r], w); a[r] = rank_args(&ranks[r], m, false); }
        CHECK_OK(pz_ar_rmsnorm_launch_all(c, a, dd, st));
        for (int r = 0; r < 2; r++) { CU(cudaSetDevice(r)); CU(cudaStreamSynchronize(st[r])); }
        CHECK_OK(pz_comm_check(c));
        char what[64];
        snprintf(what, sizeof what, "tp2 H=%lld m=%lld %s", (long long)H, (long long)m, integer ? "int" : "rand");
        check_vs_ref(2, ranks, w, m, integer != 0, false, what);
        free(w);
        for (int r = 0; r < 2; r++) rank_free(&ranks[r]);
      }
  /* Both protocols forced, odd CTAs-per-row counts (uneven slices), in place. */
  {
    const char *protos[2] = {"ll", "flag"};
    const char *ks[3] = {"1", "3", "5"};
    const int64_t pm[3] = {1, 7, 33};
    for (int pi = 0; pi < 2; pi++)
      for (int ki = 0; ki < 3; ki++)
        for (int mi = 0; mi < 3; mi++) {
          pz_device_desc forced = *dd;
          forced.ar_proto = pi + 1; /* 1 ll, 2 flag */
          forced.ar_ctas_per_row = atoi(ks[ki]);
          int64_t m = pm[mi], H = 5120;
          Rank ranks[2];
          pz_bf16 *w = make_weight(H);
          for (int r = 0; r < 2; r++) {
            rank_alloc(&ranks[r], r, m, H);
            make_inputs(ranks[r].h_part, ranks[r].h_res, m * ranks[r].ld, true);
          }
          memcpy(ranks[1].h_res, ranks[0].h_res, m * ranks[0].ld * 4);
          pz_ar_rmsnorm_args a[2];
          for (int r = 0; r < 2; r++) { rank_upload(&ranks[r], w); a[r] = rank_args(&ranks[r], m, true); }
          for (int it = 0; it < 3; it++) { /* sequence numbers advance; in place: re-upload after */
            CHECK_OK(pz_ar_rmsnorm_launch_all(c, a, &forced, st));
            for (int r = 0; r < 2; r++) { CU(cudaSetDevice(r)); CU(cudaStreamSynchronize(st[r])); }
            if (it < 2) for (int r = 0; r < 2; r++) rank_upload(&ranks[r], w);
          }
          CHECK_OK(pz_comm_check(c));
          char what[64];
          snprintf(what, sizeof what, "tp2 %s K=%s m=%lld", protos[pi], ks[ki], (long long)m);
          check_vs_ref(2, ranks, w, m, true, true, what);
          free(w);
          for (int r = 0; r < 2; r++) rank_free(&ranks[r]);
        }
  }
  /* NCCL path with contiguous rows, bit-identical to the reference on integer inputs. */
  {
    pz_nccl *n = NULL;
    if (pz_nccl_create(c, getenv("PREZERO_NCCL_LIB"), &n) == PZ_OK) {
      const int64_t m = 16, H = 7168;
      pz_bf16 *w = make_weight(H);
      Rank ranks[2];
      pz_ar_rmsnorm_args a[2];
      memset(ranks, 0, sizeof ranks);
      for (int r = 0; r < 2; r++) {
        ranks[r].dev = r; ranks[r].m = m; ranks[r].H = H; ranks[r].ld = H;
        size_t cnt = (size_t)m * H;
        ranks[r].h_part = (float *)calloc(cnt, 4); ranks[r].h_res = (float *)calloc(cnt, 4);
        CU(cudaSetDevice(r));
        CU(cudaMalloc(&ranks[r].d_part, cnt * 4)); CU(cudaMalloc(&ranks[r].d_res_in, cnt * 4));
        CU(cudaMalloc(&ranks[r].d_res_out, cnt * 4)); CU(cudaMalloc(&ranks[r].d_w, H * 2));
        CU(cudaMalloc(&ranks[r].d_x, cnt * 2));
        make_inputs(ranks[r].h_part, ranks[r].h_res, cnt, true);
      }
      memcpy(ranks[1].h_res, ranks[0].h_res, (size_t)m * H * 4);
      FillBuf f[2];
      for (int r = 0; r < 2; r++) {
        rank_upload(&ranks[r], w);
        a[r] = rank_args(&ranks[r], m, false);
        fill_alloc(&f[r], r, m, 15424, PZ_F32);
        fill_poison(&f[r]);
        a[r].fill = fill_desc(&f[r], 8256);
        a[r].fill_all = false;
      }
      a[0].ld_partial = H + 4; /* rows must be contiguous for NCCL: refused */
      CHECK_ST(pz_ar_rmsnorm_nccl_launch_all(n, c, a, st), PZ_ERR_INVALID_ARG);
      a[0].ld_partial = H;
      CHECK_OK(pz_ar_rmsnorm_nccl_launch_all(n, c, a, st));
      for (int r = 0; r < 2; r++) { CU(cudaSetDevice(r)); CU(cudaStreamSynchronize(st[r])); }
      check_vs_ref(2, ranks, w, m, true, false, "nccl path");
      for (int r = 0; r < 2; r++) { fill_check(&f[r], m, 8256, "nccl fill"); cudaFree(f[r].base); rank_free(&ranks[r]); }
      free(w);
      pz_nccl_destroy(n);
    } else {
      printf("NCCL path skipped: %s\n", pz_last_error());
    }
  }
  test_replays(c, dd, 10000, "tp2");
  /* Peer that never arrives: only rank 1 launches; it must end with PZ_ERR_TIMEOUT. Then a
   * reset makes the communicator usable again. */
  {
    pz_comm_config cc2 = cc;
    cc2.timeout_us = pz_test_timeout(20000);
    pz_comm *c2 = NULL;
    CHECK_OK(pz_comm_create(&cc2, &c2));
    Rank r;
    rank_alloc(&r, 1, 4, 7168);
    pz_bf16 *w = make_weight(7168);
    make_inputs(r.h_part, r.h_res, 4 * r.ld, true);
    rank_upload(&r, w);
    pz_ar_rmsnorm_args a = rank_args(&r, 4, false);
    CU(cudaSetDevice(1));
    CHECK_OK(pz_ar_rmsnorm_launch(c2, 1, &a, dd, st[1]));
    CHECK_ST(pz_comm_check(c2), PZ_ERR_TIMEOUT);
    CHECK_OK(pz_comm_reset(c2));
    test_replays(c2, dd, 50, "tp2 after reset");
    free(w);
    rank_free(&r);
    pz_comm_destroy(c2);
  }
  for (int r = 0; r < 2; r++) { cudaSetDevice(r); cudaStreamDestroy(st[r]); }
  pz_comm_destroy(c);
}

/* A peer that never arrives on one GPU: a tp=2 communicator with both ranks on device 0
 * (test-only option), only rank 0 launches, the debug timeout turns the wait into an error. */
static void test_timeout_one_gpu(const pz_device_desc *dd) {
  pz_comm_config cc = PZ_COMM_CONFIG_INIT;
  cc.tp = 2; cc.devices[0] = 0; cc.devices[1] = 0; cc.allow_shared_device = true;
  cc.max_m = 16; cc.max_H = 2048; cc.timeout_us = pz_test_timeout(20000);
  pz_comm *c = NULL;
  CHECK_OK(pz_comm_create(&cc, &c));
  if (!c) return;
  Rank r;
  rank_alloc(&r, 0, 2, 2048);
  pz_bf16 *w = make_weight(2048);
  make_inputs(r.h_part, r.h_res, 2 * r.ld, true);
  rank_upload(&r, w);
  pz_ar_rmsnorm_args a = rank_args(&r, 2, false);
  CU(cudaSetDevice(0));
  CHECK_OK(pz_ar_rmsnorm_launch(c, 0, &a, dd, 0));
  CHECK_ST(pz_comm_check(c), PZ_ERR_TIMEOUT);
  CHECK_OK(pz_comm_reset(c));
  CHECK_OK(pz_comm_check(c));
  /* Shared device is refused without the test option. */
  pz_comm *c3 = NULL;
  cc.allow_shared_device = false;
  CHECK_ST(pz_comm_create(&cc, &c3), PZ_ERR_INVALID_ARG);
  free(w);
  rank_free(&r);
  pz_comm_destroy(c);
}

int main(void) {
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
    printf("no CUDA device: skipped\n");
    return 77;
  }
  const char *q = getenv("PZ_TEST_QUICK");
  int quick = q && atoi(q) != 0;
  pz_device_desc dd;
  pz_runtime_opts ro; /* PREZERO_GATE_CALIBRATE=0 (the sanitizer sweep): no timing launches */
  char bad[256];
  if (pz_runtime_opts_from_env(&ro, bad, sizeof bad) != 0) {
    fprintf(stderr, "%s\n", bad);
    return 1;
  }
  CHECK_OK(pz_gate_calibrate_cuda(0, ro.gate_calibrate, &dd));
  printf("fill-gate %s: %s, %d SMs x %d CTAs, fill %.0f B/us/CTA, donor t0 %.2f us + %.0f B/us, penalty %.0f B/us\n",
         ro.gate_calibrate == 0 ? "figures (H200 defaults, PREZERO_GATE_CALIBRATE=0)" : "calibration", dd.name,
         dd.num_sms, dd.ctas_per_sm, dd.fill_bytes_per_us_cta, dd.donor_t0_us, dd.donor_bytes_per_us,
         dd.fill_penalty_bytes_per_us);
  CHECK(dd.num_sms > 0 && dd.ctas_per_sm >= 1 && dd.fill_bytes_per_us_cta > 0);
  test_tp1(&dd, quick);
  test_timeout_one_gpu(&dd);
  {
    pz_comm_config cc = PZ_COMM_CONFIG_INIT;
    cc.tp = 1; cc.devices[0] = 0; cc.timeout_us = pz_test_timeout(2000000);
    pz_comm *c = NULL;
    CHECK_OK(pz_comm_create(&cc, &c));
    if (c) { test_replays(c, &dd, quick ? 200 : 10000, "tp1"); pz_comm_destroy(c); }
  }
  if (!quick && ndev >= 2) test_tp2(&dd);
  else printf("TP=2 skipped: %s\n", quick ? "PZ_TEST_QUICK" : "fewer than 2 GPUs");
  TEST_DONE();
}
