/* Split-K GEMM family (src/backend/cuda/gemm.h) against a CPU reference: every flavour, exact
 * integer inputs, guard bands around a column slice, determinism, CUDA-graph replays, shapes. */
#define _POSIX_C_SOURCE 200809L
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "backend/cuda/gemm.h"
#include "core/status.h"
#include "core/options.h"
#include "pz_test.h"

#define G 8 /* guard columns on each side of the C slice */
static const uint32_t SENT32 = 0x7fc0dead;  /* NaN sentinel for f32 guards and stale C */
static const uint16_t SENT16 = 0x7fd1;      /* NaN sentinel for bf16 */

static uint32_t rng = 12345;
static uint32_t next_u32(void) {
  rng ^= rng << 13;
  rng ^= rng >> 17;
  rng ^= rng << 5;
  return rng;
}

/* Host problem: A [m, lda], W [n, ldw] as bf16; bias [n]; reference ref[m, n] in double. */
typedef struct prob {
  int m, n, k;
  int64_t lda, ldw;
  pz_bf16 *A, *W;
  float *bias;
  double *ref;
  double *mag; /* Σ|a·w| per output, for the tolerance of real-valued inputs */
  double *rms; /* sqrt(Σ(a·w)²): the scale of partial sums, for bf16 atomics' roundings */
  void *dA, *dW;
  float *dbias;
} prob;

/* kind 0: integers in [-4, 4]; 1: integers in [-1, 1]; 2: reals in [-1, 1]. */
static float draw(int kind) {
  uint32_t r = next_u32();
  if (kind == 0) return (float)((int)(r % 9u) - 4);
  if (kind == 1) return (float)((int)(r % 3u) - 1);
  return (float)((double)(r >> 8) / 8388608.0 - 1.0);
}

static void prob_make(prob *p, int m, int n, int k, int kind, int with_bias) {
  memset(p, 0, sizeof *p);
  p->m = m;
  p->n = n;
  p->k = k;
  p->lda = k + 8;
  p->ldw = k + 64;
  p->A = malloc(sizeof(pz_bf16) * m * p->lda);
  p->W = malloc(sizeof(pz_bf16) * n * p->ldw);
  p->bias = malloc(sizeof(float) * n);
  p->ref = malloc(sizeof(double) * m * n);
  p->mag = malloc(sizeof(double) * m * n);
  p->rms = malloc(sizeof(double) * m * n);
  for (int64_t i = 0; i < m * p->lda; i++) p->A[i] = pz_f32_to_bf16(draw(kind));
  for (int64_t i = 0; i < n * p->ldw; i++) p->W[i] = pz_f32_to_bf16(draw(kind));
  for (int j = 0; j < n; j++) p->bias[j] = with_bias ? (float)((int)(next_u32() % 7u) - 3) : 0.0f;
  for (int i = 0; i < m; i++)
    for (int j = 0; j < n; j++) {
      double s = p->bias[j], a = fabs(p->bias[j]), r2 = 0;
      for (int t = 0; t < k; t++) {
        double x = (double)pz_bf16_to_f32(p->A[i * p->lda + t]) * pz_bf16_to_f32(p->W[j * p->ldw + t]);
        s += x;
        a += fabs(x);
        r2 += x * x;
      }
      p->ref[i * n + j] = s;
      p->mag[i * n + j] = a;
      p->rms[i * n + j] = sqrt(r2);
    }
  cudaMalloc(&p->dA, sizeof(pz_bf16) * m * p->lda);
  cudaMalloc(&p->dW, sizeof(pz_bf16) * n * p->ldw);
  cudaMalloc((void **)&p->dbias, sizeof(float) * n);
  cudaMemcpy(p->dA, p->A, sizeof(pz_bf16) * m * p->lda, cudaMemcpyHostToDevice);
  cudaMemcpy(p->dW, p->W, sizeof(pz_bf16) * n * p->ldw, cudaMemcpyHostToDevice);
  cudaMemcpy(p->dbias, p->bias, sizeof(float) * n, cudaMemcpyHostToDevice);
}

static void prob_free(prob *p) {
  free(p->A);
  free(p->W);
  free(p->bias);
  free(p->ref);
  free(p->mag);
  free(p->rms);
  cudaFree(p->dA);
  cudaFree(p->dW);
  cudaFree(p->dbias);
}

/* Output buffer: m rows of ldc = n + 2G (+ 4) elements; the slice starts at column G. */
typedef struct outbuf {
  pz_dtype dt;
  int64_t ldc;
  size_t es, bytes;
  void *d, *h;
} outbuf;

static void out_make(outbuf *o, const prob *p, pz_dtype dt) {
  o->dt = dt;
  o->es = pz_dtype_size(dt);
  o->ldc = p->n + 2 * G + 4;
  o->bytes = o->es * p->m * o->ldc;
  cudaMalloc(&o->d, o->bytes);
  o->h = malloc(o->bytes);
}
static void out_free(outbuf *o) {
  cudaFree(o->d);
  free(o->h);
}
/* Fills the whole buffer with the NaN sentinel; zero_slice then zeroes the n columns. */
static void out_poison(outbuf *o, const prob *p, int zero_slice) {
  for (size_t i = 0; i < o->bytes / o->es; i++) {
    if (o->es == 4) ((uint32_t *)o->h)[i] = SENT32;
    else ((uint16_t *)o->h)[i] = SENT16;
  }
  if (zero_slice)
    for (int i = 0; i < p->m; i++) memset((char *)o->h + (i * o->ldc + G) * o->es, 0, p->n * o->es);
  cudaMemcpy(o->d, o->h, o->bytes, cudaMemcpyHostToDevice);
}
static void *slice(const outbuf *o) { return (char *)o->d + G * o->es; }

static pz_gemm_args args_for(const prob *p, const outbuf *o, int flavour, int splits, int wt, bool zero_init,
                             bool bias) {
  static int calls = 0; /* alternate 8 and 4 warps per CTA over the launches */
  pz_gemm_args a;
  memset(&a, 0, sizeof a);
  a.m = p->m;
  a.n = p->n;
  a.k = p->k;
  a.A = p->dA;
  a.lda = p->lda;
  a.W = p->dW;
  a.ldw = p->ldw;
  a.C = slice(o);
  a.ldc = o->ldc;
  a.c_dtype = o->dt;
  a.bias = bias ? p->dbias : NULL;
  a.zero_init = zero_init;
  a.config.flavour = (pz_gemm_flavour)flavour;
  a.config.splits = splits;
  a.config.wt = wt;
  a.config.warps = (calls & 1) ? 4 : 8;
  /* every other pair of launches uses the warps-along-n layout where the tile divides n */
  a.config.wn = ((calls >> 1) & 1) && wt > 0 && p->n % (a.config.warps * 16 * wt) == 0;
  calls++;
  return a;
}

static float out_at(const outbuf *o, int64_t idx) {
  if (o->es == 4) {
    float f;
    memcpy(&f, (char *)o->h + idx * 4, 4);
    return f;
  }
  return pz_bf16_to_f32(((uint16_t *)o->h)[idx]);
}

/* Copies back and checks: guards untouched; slice == ref exactly (exact=1) or within tolerance. */
static int out_check(outbuf *o, const prob *p, int exact, const char *what) {
  cudaError_t e = cudaMemcpy(o->h, o->d, o->bytes, cudaMemcpyDeviceToHost);
  if (e != cudaSuccess) {
    fprintf(stderr, "%s: CUDA error %s\n", what, cudaGetErrorString(e));
    pz_test_failures++;
    return 1;
  }
  int bad = 0;
  for (int i = 0; i < p->m && bad < 5; i++)
    for (int64_t c = 0; c < o->ldc && bad < 5; c++) {
      int64_t idx = i * o->ldc + c;
      if (c < G || c >= G + p->n) {
        int same = o->es == 4 ? ((uint32_t *)o->h)[idx] == SENT32 : ((uint16_t *)o->h)[idx] == SENT16;
        if (!same) {
          fprintf(stderr, "%s: guard column %lld of row %d was written\n", what, (long long)c, i);
          bad++;
        }
        continue;
      }
      int j = (int)(c - G);
      double want = p->ref[i * p->n + j], got = out_at(o, idx);
      double tol = exact ? 0.0 : 2e-5 * p->mag[i * p->n + j] + 1e-6;
      /* bf16 C: up to 8 roundings (one per atomic) of values on the scale of the partials. */
      if (o->dt == PZ_BF16 && !exact) tol += (fabs(want) + 3.0 * p->rms[i * p->n + j]) / 64.0;
      if (!(fabs(got - want) <= tol)) {
        fprintf(stderr, "%s: C[%d,%d] = %.9g, want %.9g (tol %g)\n", what, i, j, got, want, tol);
        bad++;
      }
    }
  if (bad) pz_test_failures++;
  return bad;
}

static pz_gemm_ctx *ctx;
/* Handles whose wgmma kernel takes 1, 2 and 4 k-blocks per TMA stage (PREZERO_GEMM_WG_KS); ctx has the
 * default (2 on splits of 2 or 4 k-blocks, else 1). */
static pz_gemm_ctx *ctx_ks[3];
static const int ks_list[3] = {1, 2, 4};

/* Every flavour x a few split counts / tile widths, zero_init false (flavour 1) and true. */
static void check_all_flavours(prob *p, pz_dtype dt, int exact, const char *name) {
  static const int splits_list[] = {1, 2, 3, 7};
  outbuf o;
  out_make(&o, p, dt);
  char what[256];
  for (int f = 1; f <= 6; f++)
    for (int wt = 1; wt <= 2; wt++)
      for (int si = 0; si < 4; si++) {
        int s = splits_list[si];
        if ((f == 4 || f == 6) && si > 0) continue;
        if (f == 6 && wt == 2) continue;
        if (s > p->k / 32) continue;
        for (int zi = 0; zi < 2; zi++) {
          bool zero_init = zi == 1;
          if (f == 1 && zero_init) continue; /* runs as flavour 3, covered there */
          snprintf(what, sizeof what, "%s m=%d n=%d k=%d %s flavour=%s splits=%d wt=%d zero_init=%d", name, p->m,
                   p->n, p->k, pz_dtype_name(dt), pz_gemm_flavour_name((pz_gemm_flavour)f), s, wt, zero_init);
          out_poison(&o, p, !zero_init);
          pz_gemm_args a = args_for(p, &o, f, s, wt, zero_init, true);
          pz_status st = pz_gemm_launch(ctx, &a, 0);
          if (st != PZ_OK) {
            fprintf(stderr, "%s: %s: %s\n", what, pz_status_string(st), pz_last_error());
            pz_test_failures++;
            continue;
          }
          out_check(&o, p, exact, what);
          /* The same case on the Hopper wgmma kernel (wn 3) with 1, 2 and 4 64-row W tiles per CTA,
           * and the default (ki 3), 1, 2 and 4 k-blocks per ring stage; wgt 0 is wt 1 with the token
           * split (warps 9: two warpgroups per W tile). */
          for (int wgt = 0; wgt <= 4 && wt == 1 && f != 6 && pz_gemm_ctx_has_wgmma(ctx); wgt = wgt ? 2 * wgt : 1)
            for (int ki = 0; ki < 4; ki++) {
              const int wtile = wgt ? wgt : 1;
              if (p->n % (64 * wtile) || s > p->k / 64) continue;
              out_poison(&o, p, !zero_init);
              a.config.wn = 3;
              a.config.wt = wtile;
              a.config.warps = wgt ? 5 : 9;
              st = pz_gemm_launch(ki < 3 ? ctx_ks[ki] : ctx, &a, 0);
              char w2[300];
              char ks_name[16];
              if (ki < 3) snprintf(ks_name, sizeof ks_name, "%d", ks_list[ki]);
              else snprintf(ks_name, sizeof ks_name, "default");
              snprintf(w2, sizeof w2, "%s [wgmma wt %d%s ks %s]", what, wtile, wgt ? "" : " token split", ks_name);
              if (st != PZ_OK) {
                fprintf(stderr, "%s: %s: %s\n", w2, pz_status_string(st), pz_last_error());
                pz_test_failures++;
                continue;
              }
              out_check(&o, p, exact, w2);
            }
          /* The wgmma kernel with token tiles below m (config bn): m / bn tiles side by side, the last
           * one partial; wt 1, 2, 4 and the token split (wgt 0). */
          for (int wgt = 0; wgt <= 4 && wt == 1 && f != 6 && pz_gemm_ctx_has_wgmma(ctx); wgt = wgt ? 2 * wgt : 1)
            for (int bnc = 16; bnc <= 32; bnc *= 2) {
              const int wtile = wgt ? wgt : 1;
              if (p->n % (64 * wtile) || s > p->k / 64 || bnc >= pz_gemm_wgmma_bn(p->m, wtile)) continue;
              out_poison(&o, p, !zero_init);
              a.config.wn = 3;
              a.config.wt = wtile;
              a.config.warps = wgt ? 5 : 9;
              a.config.bn = bnc;
              st = pz_gemm_launch(ctx, &a, 0);
              a.config.bn = 0;
              char w2[300];
              snprintf(w2, sizeof w2, "%s [wgmma wt %d%s bn %d]", what, wtile, wgt ? "" : " token split", bnc);
              if (st != PZ_OK) {
                fprintf(stderr, "%s: %s: %s\n", w2, pz_status_string(st), pz_last_error());
                pz_test_failures++;
                continue;
              }
              out_check(&o, p, exact, w2);
            }
          /* The Hopper stream-K kernel (wn 4): atomic flavours only, grids from one CTA (every
           * segment in one share) to more CTAs than work units, so shares start and end
           * anywhere inside tiles. */
          static const int ctas_list[] = {1, 3, 7, 0 /* the SM count */, 5000};
          for (int ci = 0; ci < 5 && (f == 1 || f == 3) && wt == 1 && si == 0 && pz_gemm_ctx_has_wgmma(ctx); ci++)
            for (int wgt = 1; wgt <= 4; wgt *= 2) {
              if (p->n % (64 * wgt)) continue;
              out_poison(&o, p, !zero_init);
              a.config.wn = 4;
              a.config.wt = wgt;
              a.config.warps = 9;
              a.config.splits = ctas_list[ci] ? ctas_list[ci] : pz_gemm_ctx_sm_count(ctx);
              st = pz_gemm_launch(ctx, &a, 0);
              char w2[320];
              snprintf(w2, sizeof w2, "%s [stream-K wt %d ctas %d]", what, wgt, a.config.splits);
              if (st != PZ_OK) {
                fprintf(stderr, "%s: %s: %s\n", w2, pz_status_string(st), pz_last_error());
                pz_test_failures++;
                continue;
              }
              out_check(&o, p, exact, w2);
            }
        }
      }
  /* AUTO (tuner table or heuristic), both zero_init values. */
  for (int zi = 0; zi < 2; zi++) {
    out_poison(&o, p, zi == 0);
    pz_gemm_args a = args_for(p, &o, PZ_GEMM_AUTO, 0, 0, zi == 1, true);
    CHECK_OK(pz_gemm_launch(ctx, &a, 0));
    snprintf(what, sizeof what, "%s auto zero_init=%d", name, zi);
    out_check(&o, p, exact, what);
  }
  out_free(&o);
}

/* Same config three times on real-valued inputs: bit-identical (split <= 2, or serial). */
static void check_run_to_run(prob *p) {
  /* wn 4 here: the wgmma kernel with wt 4; wn 5: with wt 1 and the token split (warps 9); wn 6: wt 1
   * with a token tile of 8 below m (config bn 16 at m = 13 ... run where m > 16) */
  struct { int f, s, wn; } cases[] = {{1, 2, 0}, {2, 2, 1}, {3, 2, 0}, {5, 2, 1}, {5, 7, 0}, {4, 1, 0},
                                      {1, 2, 3}, {2, 2, 3}, {5, 2, 3}, {5, 7, 3}, {4, 1, 3}, {1, 2, 4},
                                      {1, 2, 5}, {5, 7, 5}, {4, 1, 5}, {1, 2, 6}, {5, 7, 6}, {4, 1, 6}};
  outbuf o;
  out_make(&o, p, PZ_F32);
  void *first = malloc(o.bytes);
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    for (int r = 0; r < 3; r++) {
      out_poison(&o, p, cases[c].f == 1);
      pz_gemm_args a = args_for(p, &o, cases[c].f, cases[c].s, 1, cases[c].f != 1, false);
      a.config.warps = 4 + 4 * (int)(c & 1); /* fixed per case: the warp tree's order is part of it */
      a.config.wn = cases[c].wn >= 4 ? 3 : cases[c].wn;
      if (cases[c].wn == 4) a.config.wt = 4;
      if (cases[c].wn == 5) a.config.warps = 9;
      if (cases[c].wn == 6) {
        if (pz_gemm_wgmma_bn(p->m, 1) <= 16) break; /* no tile below m to take */
        a.config.warps = 5;
        a.config.bn = 16;
      }
      if (cases[c].wn >= 3 && !pz_gemm_ctx_has_wgmma(ctx)) break;
      CHECK_OK(pz_gemm_launch(ctx, &a, 0));
      CHECK(cudaMemcpy(o.h, o.d, o.bytes, cudaMemcpyDeviceToHost) == cudaSuccess);
      if (r == 0) memcpy(first, o.h, o.bytes);
      else if (memcmp(first, o.h, o.bytes)) {
        fprintf(stderr, "run-to-run: flavour %d splits %d kernel case %d (wn 4: wgmma wt 4, 5: token split, 6: bn 16) differs on run %d\n",
                cases[c].f, cases[c].s, cases[c].wn, r);
        pz_test_failures++;
      }
    }
  }
  free(first);
  out_free(&o);
}

/* A graph of one GEMM (flavour 3 = memset node + atomic kernel, 2, 5) replayed `replays`
 * times: the result stays exact, so the self-resetting flags never go stale. */
static void check_graph_replays(prob *p, int replays) {
  const int flv[] = {3, 2, 5};
  outbuf o;
  out_make(&o, p, PZ_F32);
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess);
  for (int fi = 0; fi < 9; fi++) { /* 0-2: the mma.sync kernels, 3-5: the wgmma kernel, 6: stream-K,
                                     7: the wgmma token split (flavour 2: in-kernel zero + tile flags),
                                     8: the wgmma kernel with token tiles of 16 (flavour 5: a turnstile per tile) */
    if (fi >= 3 && !pz_gemm_ctx_has_wgmma(ctx)) break;
    out_poison(&o, p, 0);
    pz_gemm_args a = args_for(p, &o, flv[fi % 3], 4, 1, true, true);
    if (fi >= 3) a.config.wn = 3;
    if (fi == 7) a.config.warps = 9;
    if (fi == 8) {
      a.config.warps = 5;
      a.config.bn = 16;
    }
    if (fi == 6) { /* memset node + the stream-K kernel */
      a.config.wn = 4;
      a.config.warps = 9;
      a.config.splits = pz_gemm_ctx_sm_count(ctx);
    }
    cudaGraph_t g;
    cudaGraphExec_t ge;
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
    CHECK_OK(pz_gemm_launch(ctx, &a, s));
    CHECK(cudaStreamEndCapture(s, &g) == cudaSuccess);
    CHECK(cudaGraphInstantiate(&ge, g, 0) == cudaSuccess);
    int bad = 0;
    for (int r = 1; r <= replays && !bad; r++) {
      CHECK(cudaGraphLaunch(ge, s) == cudaSuccess);
      if (r % 500 == 0 || r == replays) {
        CHECK(cudaStreamSynchronize(s) == cudaSuccess);
        char what[128];
        snprintf(what, sizeof what, "graph flavour %d%s after %d replays", flv[fi % 3],
                 fi == 8 ? " (wgmma bn 16)" : fi == 7 ? " (wgmma token split)" : fi == 6 ? " (stream-K)" : fi >= 3 ? " (wgmma)" : "", r);
        bad = out_check(&o, p, 1, what);
      }
    }
    cudaGraphExecDestroy(ge);
    cudaGraphDestroy(g);
  }
  cudaStreamDestroy(s);
  out_free(&o);
}

/* A chain of dependent wgmma GEMMs in one graph, each launched with programmatic dependent launch
 * (the handle's default, PREZERO_PDL): X = A·W1ᵀ (bf16, full K), Y = X·W2ᵀ (f32, in-kernel
 * zero), then X = A·W3ᵀ over the same buffer while Y's reads of it must be done (write after read),
 * Z = X·W2ᵀ (f32, serial turnstile). Integer inputs in [-1, 1] keep every value exact (|X| <= 256 in
 * bf16, |Y|, |Z| <= 32768 in f32), so Y and Z must equal the integer products on every replay: a
 * kernel that read A or wrote C before the kernel ahead of it finished would break them. */
static void check_pdl_chain(int replays) {
  if (!pz_gemm_ctx_has_wgmma(ctx)) return;
  enum { M = 24, K = 256, N1 = 128, N2 = 192 };
  pz_bf16 *hA = malloc(sizeof(pz_bf16) * M * K), *hW1 = malloc(sizeof(pz_bf16) * N1 * K),
          *hW3 = malloc(sizeof(pz_bf16) * N1 * K), *hW2 = malloc(sizeof(pz_bf16) * N2 * N1);
  int *x1 = malloc(sizeof(int) * M * N1), *x3 = malloc(sizeof(int) * M * N1);
  float *hy = malloc(sizeof(float) * M * N2), *hz = malloc(sizeof(float) * M * N2);
  int *wy = malloc(sizeof(int) * M * N2), *wz = malloc(sizeof(int) * M * N2); /* Y and Z as integers */
  for (int i = 0; i < M * K; i++) hA[i] = pz_f32_to_bf16(draw(1));
  for (int i = 0; i < N1 * K; i++) hW1[i] = pz_f32_to_bf16(draw(1));
  for (int i = 0; i < N1 * K; i++) hW3[i] = pz_f32_to_bf16(draw(1));
  for (int i = 0; i < N2 * N1; i++) hW2[i] = pz_f32_to_bf16(draw(1));
  for (int i = 0; i < M; i++)
    for (int j = 0; j < N1; j++) {
      int s1 = 0, s3 = 0;
      for (int t = 0; t < K; t++) {
        const int a = (int)pz_bf16_to_f32(hA[i * K + t]);
        s1 += a * (int)pz_bf16_to_f32(hW1[j * K + t]);
        s3 += a * (int)pz_bf16_to_f32(hW3[j * K + t]);
      }
      x1[i * N1 + j] = s1;
      x3[i * N1 + j] = s3;
    }
  for (int i = 0; i < M; i++)
    for (int j = 0; j < N2; j++) {
      int sy = 0, sz = 0;
      for (int t = 0; t < N1; t++) {
        const int w = (int)pz_bf16_to_f32(hW2[j * N1 + t]);
        sy += x1[i * N1 + t] * w;
        sz += x3[i * N1 + t] * w;
      }
      wy[i * N2 + j] = sy;
      wz[i * N2 + j] = sz;
    }
  void *dA, *dW1, *dW2, *dW3, *dX, *dY, *dZ;
  CHECK(cudaMalloc(&dA, sizeof(pz_bf16) * M * K) == cudaSuccess);
  CHECK(cudaMalloc(&dW1, sizeof(pz_bf16) * N1 * K) == cudaSuccess);
  CHECK(cudaMalloc(&dW3, sizeof(pz_bf16) * N1 * K) == cudaSuccess);
  CHECK(cudaMalloc(&dW2, sizeof(pz_bf16) * N2 * N1) == cudaSuccess);
  CHECK(cudaMalloc(&dX, sizeof(pz_bf16) * M * N1) == cudaSuccess);
  CHECK(cudaMalloc(&dY, sizeof(float) * M * N2) == cudaSuccess);
  CHECK(cudaMalloc(&dZ, sizeof(float) * M * N2) == cudaSuccess);
  cudaMemcpy(dA, hA, sizeof(pz_bf16) * M * K, cudaMemcpyHostToDevice);
  cudaMemcpy(dW1, hW1, sizeof(pz_bf16) * N1 * K, cudaMemcpyHostToDevice);
  cudaMemcpy(dW3, hW3, sizeof(pz_bf16) * N1 * K, cudaMemcpyHostToDevice);
  cudaMemcpy(dW2, hW2, sizeof(pz_bf16) * N2 * N1, cudaMemcpyHostToDevice);
  /* {A, W, C, n, k, C dtype, flavour, splits} of the four GEMMs */
  const struct { void *A, *W, *C; int n, k; pz_dtype dt; int flavour, splits; } g4[4] = {
      {dA, dW1, dX, N1, K, PZ_BF16, 4, 1}, {dX, dW2, dY, N2, N1, PZ_F32, 2, 2},
      {dA, dW3, dX, N1, K, PZ_BF16, 4, 1}, {dX, dW2, dZ, N2, N1, PZ_F32, 5, 2}};
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess);
  cudaGraph_t g;
  cudaGraphExec_t ge;
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
  for (int i = 0; i < 4; i++) {
    pz_gemm_args a;
    memset(&a, 0, sizeof a);
    a.m = M;
    a.n = g4[i].n;
    a.k = g4[i].k;
    a.A = g4[i].A;
    a.lda = g4[i].k;
    a.W = g4[i].W;
    a.C = g4[i].C;
    a.ldc = g4[i].n;
    a.c_dtype = g4[i].dt;
    a.zero_init = true;
    a.config.flavour = (pz_gemm_flavour)g4[i].flavour;
    a.config.splits = g4[i].splits;
    a.config.wt = 1;
    a.config.warps = 5;
    a.config.wn = 3;
    CHECK_OK(pz_gemm_launch(ctx, &a, s));
  }
  CHECK(cudaStreamEndCapture(s, &g) == cudaSuccess);
  CHECK(cudaGraphInstantiate(&ge, g, 0) == cudaSuccess);
  int bad = 0;
  for (int r = 1; r <= replays && !bad; r++) {
    CHECK(cudaMemsetAsync(dY, 0xff, sizeof(float) * M * N2, s) == cudaSuccess); /* NaN: stale values show */
    CHECK(cudaMemsetAsync(dZ, 0xff, sizeof(float) * M * N2, s) == cudaSuccess);
    CHECK(cudaGraphLaunch(ge, s) == cudaSuccess);
    if (r % 100 != 0 && r != replays) continue;
    CHECK(cudaStreamSynchronize(s) == cudaSuccess);
    cudaMemcpy(hy, dY, sizeof(float) * M * N2, cudaMemcpyDeviceToHost);
    cudaMemcpy(hz, dZ, sizeof(float) * M * N2, cudaMemcpyDeviceToHost);
    for (int i = 0; i < M && bad < 5; i++)
      for (int j = 0; j < N2 && bad < 5; j++) {
        const int e = i * N2 + j;
        if (hy[e] != (float)wy[e] || hz[e] != (float)wz[e]) {
          fprintf(stderr, "pdl chain replay %d: Y[%d,%d] = %g (want %d), Z = %g (want %d)\n", r, i, j, hy[e], wy[e],
                  hz[e], wz[e]);
          bad++;
        }
      }
  }
  if (bad) pz_test_failures++;
  cudaGraphExecDestroy(ge);
  cudaGraphDestroy(g);
  cudaStreamDestroy(s);
  cudaFree(dA);
  cudaFree(dW1);
  cudaFree(dW2);
  cudaFree(dW3);
  cudaFree(dX);
  cudaFree(dY);
  cudaFree(dZ);
  free(hA);
  free(hW1);
  free(hW2);
  free(hW3);
  free(x1);
  free(x3);
  free(hy);
  free(hz);
  free(wy);
  free(wz);
}

static void check_bad_shapes(prob *p) {
  outbuf o;
  out_make(&o, p, PZ_F32);
  pz_gemm_args a = args_for(p, &o, 1, 2, 1, false, false);
  pz_gemm_args b;
  b = a; b.m = 0;        CHECK_ST(pz_gemm_launch(ctx, &b, 0), PZ_ERR_SHAPE);
  b = a; b.m = 257;      CHECK_ST(pz_gemm_launch(ctx, &b, 0), PZ_ERR_SHAPE);
  b = a; b.n = 100;      CHECK_ST(pz_gemm_launch(ctx, &b, 0), PZ_ERR_SHAPE);
  b = a; b.k = 96;       CHECK_ST(pz_gemm_launch(ctx, &b, 0), PZ_ERR_SHAPE);
  b = a; b.lda = b.k - 8; CHECK_ST(pz_gemm_launch(ctx, &b, 0), PZ_ERR_SHAPE);
  b = a; b.ldc = b.n - 1; CHECK_ST(pz_gemm_launch(ctx, &b, 0), PZ_ERR_SHAPE);
  b = a; b.c_dtype = PZ_I32; CHECK_ST(pz_gemm_launch(ctx, &b, 0), PZ_ERR_DTYPE);
  b = a; b.config.splits = 1000; CHECK_ST(pz_gemm_launch(ctx, &b, 0), PZ_ERR_INVALID_ARG);
  b = a; b.config.wn = 2; b.config.splits = 2; CHECK_ST(pz_gemm_launch(ctx, &b, 0), PZ_ERR_INVALID_ARG); /* removed kernel */
  CHECK(strstr(pz_last_error(), "wn 2"));
  if (pz_gemm_ctx_has_wgmma(ctx)) { /* wgmma: splits count whole 64-wide k-blocks; n % 128 for 2 warpgroups */
    b = a; b.config.wn = 3; b.config.splits = b.k / 64 + 1; CHECK_ST(pz_gemm_launch(ctx, &b, 0), PZ_ERR_INVALID_ARG);
    b = a; b.config.wn = 3; b.config.wt = 2; b.n = 192; CHECK_ST(pz_gemm_launch(ctx, &b, 0), PZ_ERR_INVALID_ARG);
    b = a; b.config.wn = 3; b.config.wt = 3; CHECK_ST(pz_gemm_launch(ctx, &b, 0), PZ_ERR_INVALID_ARG);
    b = a; b.config.wn = 3; b.config.wt = 4; b.n = 128; CHECK_ST(pz_gemm_launch(ctx, &b, 0), PZ_ERR_INVALID_ARG);
    /* token tiles (bn): a power of two in 16..256 (128 at wt 4), the wgmma split-K kernel only */
    b = a; b.config.wn = 3; b.config.warps = 5; b.config.bn = 8; CHECK_ST(pz_gemm_launch(ctx, &b, 0), PZ_ERR_INVALID_ARG);
    b = a; b.config.wn = 3; b.config.warps = 5; b.config.bn = 48; CHECK_ST(pz_gemm_launch(ctx, &b, 0), PZ_ERR_INVALID_ARG);
    b = a; b.config.wn = 3; b.config.wt = 4; b.config.warps = 9; b.config.bn = 256; CHECK_ST(pz_gemm_launch(ctx, &b, 0), PZ_ERR_INVALID_ARG);
    b = a; b.config.wn = 0; b.config.bn = 64; CHECK_ST(pz_gemm_launch(ctx, &b, 0), PZ_ERR_INVALID_ARG);
    /* stream-K (wn 4): only the atomic flavours; its grid is at least one CTA. */
    b = a; b.config.flavour = PZ_GEMM_SPLITK_ZERO; b.config.wn = 4; b.config.warps = 9; b.config.splits = 132;
    CHECK_ST(pz_gemm_launch(ctx, &b, 0), PZ_ERR_INVALID_ARG);
    b = a; b.config.flavour = PZ_GEMM_SPLITK_SERIAL; b.config.wn = 4; b.config.warps = 9; b.config.splits = 132;
    CHECK_ST(pz_gemm_launch(ctx, &b, 0), PZ_ERR_INVALID_ARG);
    b = a; b.config.flavour = PZ_GEMM_SPLITK_ATOMIC; b.config.wn = 4; b.config.warps = 9; b.config.wt = 3; b.config.splits = 132;
    CHECK_ST(pz_gemm_launch(ctx, &b, 0), PZ_ERR_INVALID_ARG);
  }
  out_free(&o);
}

/* A handle with explicit options: forced flavour ("" none) and the tuner switch. */
static pz_gemm_ctx *mk(const char *force, int tuner, pz_status want) {
  pz_runtime_opts ro;
  pz_runtime_opts_default(&ro);
  const char *cd = getenv("PREZERO_CACHE_DIR");
  if (cd) snprintf(ro.cache_dir, sizeof ro.cache_dir, "%s", cd);
  snprintf(ro.gemm_force, sizeof ro.gemm_force, "%s", force);
  ro.gemm_tuner = tuner;
  pz_gemm_ctx *h = NULL;
  CHECK_ST(pz_gemm_ctx_create_opts(&ro, &h), want);
  return h;
}

static void check_choose(void) {
  pz_gemm_config c;
  bool sk = true;
  pz_gemm_ctx *h1 = mk("fullk", 1, PZ_OK);
  if (h1) CHECK_OK(pz_gemm_choose(h1, 8, 2112, 7168, false, &c, &sk));
  CHECK(h1 && c.flavour == PZ_GEMM_FULLK && !sk && c.splits == 1);
  pz_gemm_ctx_destroy(h1);
  pz_gemm_ctx *h2 = mk("atomic", 1, PZ_OK);
  if (h2) CHECK_OK(pz_gemm_choose(h2, 8, 2112, 7168, false, &c, &sk));
  CHECK(h2 && c.flavour == PZ_GEMM_SPLITK_ATOMIC && sk && c.splits >= 2);
  if (h2) CHECK_OK(pz_gemm_choose(h2, 8, 2112, 7168, true, &c, &sk));
  CHECK(h2 && c.flavour == PZ_GEMM_MEMSET_SPLITK && sk);
  pz_gemm_ctx_destroy(h2);
  CHECK(mk("bogus", 1, PZ_ERR_INVALID_ARG) == NULL); /* refused when the handle is made */
  /* the environment still sets the options of a handle made without them */
  setenv("PREZERO_GEMM_FORCE", "fullk", 1);
  pz_gemm_ctx *he = NULL;
  CHECK_OK(pz_gemm_ctx_create(&he));
  unsetenv("PREZERO_GEMM_FORCE");
  if (he) CHECK_OK(pz_gemm_choose(he, 8, 2112, 7168, false, &c, &sk));
  CHECK(he && c.flavour == PZ_GEMM_FULLK); /* read at creation: unsetting it later changes nothing */
  pz_gemm_ctx_destroy(he);
  pz_gemm_ctx *h3 = mk("", 0, PZ_OK);
  if (h3) CHECK_OK(pz_gemm_choose(h3, 4, 384, 7168, false, &c, &sk));
  pz_gemm_config h = pz_gemm_heuristic(pz_gemm_ctx_sm_count(ctx), 4, 384, 7168, false, pz_gemm_ctx_has_wgmma(ctx));
  CHECK(h3 && c.flavour == h.flavour && c.splits == h.splits && c.wt == h.wt);
  CHECK(sk == (h.flavour == PZ_GEMM_SPLITK_ATOMIC));
  pz_gemm_ctx_destroy(h3);
  /* A prezero consumer (zero_init = false) runs the baseline's kernel minus its zeroing. */
  static const int shapes[][3] = {{1, 2112, 7168}, {8, 3072, 1536}, {32, 7168, 2048}, {128, 384, 7168}};
  for (int i = 0; i < 4; i++) {
    pz_gemm_config on, off;
    bool sk_on = false, sk_off = false;
    CHECK_OK(pz_gemm_choose(ctx, shapes[i][0], shapes[i][1], shapes[i][2], false, &on, &sk_on));
    CHECK_OK(pz_gemm_choose(ctx, shapes[i][0], shapes[i][1], shapes[i][2], true, &off, &sk_off));
    CHECK(on.splits == off.splits && on.wt == off.wt && on.warps == off.warps && on.wn == off.wn);
    CHECK(sk_on == sk_off);
    if (off.flavour == PZ_GEMM_SPLITK_ZERO || off.flavour == PZ_GEMM_MEMSET_SPLITK)
      CHECK(on.flavour == PZ_GEMM_SPLITK_ATOMIC);
    else
      CHECK(on.flavour == off.flavour);
  }
  CHECK(pz_gemm_flavour_parse("serial") == PZ_GEMM_SPLITK_SERIAL);
  CHECK(pz_gemm_flavour_parse("3") == PZ_GEMM_MEMSET_SPLITK);
}

int main(void) {
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
    printf("test_gemm: no CUDA GPU present; skipped\n");
    return 77;
  }
  /* A private, empty tuner cache so AUTO uses the heuristic deterministically. */
  setenv("PREZERO_CACHE_DIR", "/tmp/pz_test_gemm_cache_empty", 1);
  CHECK_OK(pz_gemm_ctx_create(&ctx));
  if (!ctx) TEST_DONE();
  for (int ki = 0; ki < 3; ki++) {
    pz_runtime_opts ro;
    CHECK(pz_runtime_opts_from_env(&ro, NULL, 0) == 0);
    ro.gemm_wg_ks = ks_list[ki];
    CHECK_OK(pz_gemm_ctx_create_opts(&ro, &ctx_ks[ki]));
    if (!ctx_ks[ki]) TEST_DONE();
  }
  const char *rs = getenv("PZ_TEST_REPLAYS");
  int replays = rs ? atoi(rs) : 10000;
  int quick = getenv("PZ_TEST_QUICK") != NULL;

  /* (m, n, k): tiny m, one token tile, several tiles, m > 128 (two token chunks), m = 256. */
  static const int shapes[][3] = {{1, 128, 256}, {5, 192, 512}, {16, 256, 1024}, {37, 128, 2048},
                                  {100, 64, 640}, {200, 128, 384}, {256, 64, 128}, {200, 256, 512}};
  int nshapes = quick ? 3 : 8;
  for (int i = 0; i < nshapes; i++) {
    prob p;
    prob_make(&p, shapes[i][0], shapes[i][1], shapes[i][2], 0, 1);
    check_all_flavours(&p, PZ_F32, 1, "int");
    prob_free(&p);
  }
  {
    prob p; /* bf16 C: values in [-1, 1], k = 128, every partial sum exact in bf16 */
    prob_make(&p, 9, 128, 128, 1, 1);
    check_all_flavours(&p, PZ_BF16, 1, "int-bf16");
    prob_free(&p);
    prob_make(&p, 24, 192, 1024, 2, 1);
    check_all_flavours(&p, PZ_BF16, 0, "real-bf16");
    prob_free(&p);
  }
  {
    prob p; /* real-valued inputs vs the float64 reference */
    prob_make(&p, 13, 256, 4096, 2, 1);
    check_all_flavours(&p, PZ_F32, 0, "real");
    check_run_to_run(&p);
    prob_free(&p);
    prob_make(&p, 40, 256, 2048, 2, 1); /* m = 40: three token tiles of 16 in the bn case */
    check_run_to_run(&p);
    prob_free(&p);
  }
  {
    prob p; /* m = 24: the token split's second warpgroup holds tokens 16..23 (real rows, not padding) */
    prob_make(&p, 24, 384, 2048, 0, 1);
    check_graph_replays(&p, replays);
    check_bad_shapes(&p);
    prob_free(&p);
  }
  check_pdl_chain(replays < 1000 ? replays : 1000);
  check_choose();
  for (int ki = 0; ki < 3; ki++) pz_gemm_ctx_destroy(ctx_ks[ki]);
  pz_gemm_ctx_destroy(ctx);
  TEST_DONE();
}
