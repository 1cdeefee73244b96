/* GEMM tuner: CUDA-graph timing of candidates over rotated weights, and the JSON table
 * (cJSON) of winners per device, stored under PREZERO_CACHE_DIR (default ~/.cache/prezero). */
#include "backend/cuda/tuner.h"
#include "core/options.h"
#include "core/stats.h"
#include "backend/tables/gemm_tables.h"
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "backend/cuda/cuda_util.h"

#define POOL_A_ELEMS (256 * 32768) /* A: m <= 256, k <= 32768 (Kimi-K2's dense down at TP 1: k 18432) */
#define POOL_C_ELEMS (256 * 65536) /* C: m <= 256, n <= 65536 (its dense gate | up at TP 1: n 36864) */

pz_status pz_tuner_pool_create(pz_tuner_pool *p, size_t w_bytes) {
  memset(p, 0, sizeof *p);
  p->w_bytes = w_bytes;
  PZ_CUDA_CHECK(cudaStreamCreateWithFlags(&p->stream, cudaStreamNonBlocking));
  PZ_CUDA_CHECK(cudaMalloc(&p->w, w_bytes));
  PZ_CUDA_CHECK(cudaMalloc(&p->a, POOL_A_ELEMS * 2));
  PZ_CUDA_CHECK(cudaMalloc(&p->c, POOL_C_ELEMS * 4));
  PZ_CUDA_CHECK(cudaMalloc((void **)&p->sink, 64));
  PZ_CHECK(pz_gemm_fill_bf16(p->w, (int64_t)(w_bytes / 2), 1234u, false, p->stream));
  PZ_CHECK(pz_gemm_fill_bf16(p->a, POOL_A_ELEMS, 99u, false, p->stream));
  PZ_CUDA_CHECK(cudaMemsetAsync(p->c, 0, POOL_C_ELEMS * 4, p->stream));
  PZ_CUDA_CHECK(cudaStreamSynchronize(p->stream));
  return PZ_OK;
}

void pz_tuner_pool_destroy(pz_tuner_pool *p) {
  PZ_CUDA_IGNORE(cudaFree(p->w));
  PZ_CUDA_IGNORE(cudaFree(p->a));
  PZ_CUDA_IGNORE(cudaFree(p->c));
  PZ_CUDA_IGNORE(cudaFree(p->sink));
  if (p->stream) PZ_CUDA_IGNORE(cudaStreamDestroy(p->stream));
  memset(p, 0, sizeof *p);
}


/* kind 0: GEMM with cfg; kind 1: streaming read of `bytes`. */
static pz_status time_graph(pz_gemm_ctx *ctx, const pz_tuner_pool *pool, int kind, int m, int n, int k,
                            pz_gemm_config cfg, int64_t bytes, int iters, int reps, double *us) {
  cudaStream_t s = pool->stream;
  size_t slot = kind == 0 ? (size_t)n * k * 2 : (size_t)bytes;
  slot = (slot + 255) & ~(size_t)255;
  int nrot = (int)(pool->w_bytes / slot);
  if (nrot < 1) return pz_error(PZ_ERR_SHAPE, "tuner: %zu-byte weights exceed the %zu-byte pool", slot, pool->w_bytes);
  if (kind == 0 && ((int64_t)m * k > POOL_A_ELEMS || (int64_t)m * n > POOL_C_ELEMS))
    return pz_error(PZ_ERR_SHAPE, "tuner: m=%d n=%d k=%d exceeds the timing pool (m*k <= %d, m*n <= %d)", m, n, k,
                    POOL_A_ELEMS, POOL_C_ELEMS);
  pz_gemm_args a;
  memset(&a, 0, sizeof a);
  a.m = m;
  a.n = n;
  a.k = k;
  a.A = pool->a;
  a.lda = k;
  a.ldw = k;
  a.C = pool->c;
  a.ldc = n;
  a.c_dtype = PZ_F32;
  a.zero_init = cfg.flavour != PZ_GEMM_SPLITK_ATOMIC;
  a.config = cfg;
  cudaGraph_t g = NULL;
  cudaGraphExec_t ge = NULL;
  cudaEvent_t e0 = NULL, e1 = NULL;
  pz_status st = PZ_OK;
  /* One eager launch first: module loading and library set-up stay out of the capture. */
  if (kind == 0) {
    a.W = pool->w;
    PZ_CHECK(pz_gemm_launch(ctx, &a, s));
  } else {
    PZ_CHECK(pz_gemm_stream_read(pool->w, bytes, pool->sink, pz_gemm_ctx_sm_count(ctx), s));
  }
  PZ_CUDA_CHECK(cudaStreamSynchronize(s));
  PZ_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  double *t = malloc(sizeof(double) * (size_t)reps);
  if (!t) return pz_error(PZ_ERR_OOM, "tuner: host allocation");
  for (int i = 0; i < iters && st == PZ_OK; i++) {
    const char *w = (const char *)pool->w + (size_t)(i % nrot) * slot;
    if (kind == 0) {
      a.W = w;
      st = pz_gemm_launch(ctx, &a, s);
    } else {
      st = pz_gemm_stream_read(w, bytes, pool->sink, pz_gemm_ctx_sm_count(ctx), s);
    }
  }
  PZ_CUDA_KEEP_MSG(cudaStreamEndCapture(s, &g), st, "tuner: capture");
  if (st == PZ_OK) st = PZ_CUDA_STATUS_MSG(cudaGraphInstantiate(&ge, g, 0), "tuner: instantiate");
  if (st == PZ_OK) st = PZ_CUDA_STATUS_MSG(cudaEventCreate(&e0), "tuner: event create");
  if (st == PZ_OK) st = PZ_CUDA_STATUS_MSG(cudaEventCreate(&e1), "tuner: event create");
  if (st == PZ_OK) st = PZ_CUDA_STATUS_MSG(cudaGraphLaunch(ge, s), "tuner: warm-up replay");
  for (int r = 0; r < reps && st == PZ_OK; r++) {
    float ms = 0;
    st = PZ_CUDA_STATUS_MSG(cudaEventRecord(e0, s), "tuner: replay");
    if (st == PZ_OK) st = PZ_CUDA_STATUS_MSG(cudaGraphLaunch(ge, s), "tuner: replay");
    if (st == PZ_OK) st = PZ_CUDA_STATUS_MSG(cudaEventRecord(e1, s), "tuner: replay");
    if (st == PZ_OK) st = PZ_CUDA_STATUS_MSG(cudaEventSynchronize(e1), "tuner: replay");
    if (st == PZ_OK) st = PZ_CUDA_STATUS_MSG(cudaEventElapsedTime(&ms, e0, e1), "tuner: replay");
    t[r] = 1000.0 * ms / iters;
  }
  if (st == PZ_OK) *us = pz_median(t, reps); /* core/stats.h: the one median */
  free(t);
  if (e0) PZ_CUDA_IGNORE(cudaEventDestroy(e0)); /* cleanup: nothing to report */
  if (e1) PZ_CUDA_IGNORE(cudaEventDestroy(e1));
  if (ge) PZ_CUDA_IGNORE(cudaGraphExecDestroy(ge));
  if (g) PZ_CUDA_IGNORE(cudaGraphDestroy(g));
  return st;
}

pz_status pz_tuner_time_gemm(pz_gemm_ctx *ctx, const pz_tuner_pool *pool, int m, int n, int k,
                             pz_gemm_config cfg, int iters, int reps, double *us) {
  return time_graph(ctx, pool, 0, m, n, k, cfg, 0, iters, reps, us);
}

pz_status pz_tuner_time_read(pz_gemm_ctx *ctx, const pz_tuner_pool *pool, int64_t bytes, int iters,
                             int reps, double *us) {
  pz_gemm_config none = {PZ_GEMM_AUTO, 0, 0, 0, 0, 0};
  return time_graph(ctx, pool, 1, 0, 0, 0, none, bytes, iters, reps, us);
}

/* The handle's option when set (> 0, or >= 0 for switches), else dflt. */
static int opt_or(int v, int dflt) { return v >= 0 ? v : dflt; }

pz_status pz_tuner_tune(pz_gemm_ctx *ctx, const pz_tuner_pool *pool, int m, int n, int k, pz_tuner_entry *out) {
  static const int split_list[] = {1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16, 20, 24, 28, 32, 40, 48, 56};
  /* >= 128 MB of distinct weight copies per graph, so no launch finds its W in L2. */
  int iters = (int)(128.0e6 / ((double)n * k * 2)) + 1;
  if (iters < 20) iters = 20;
  if (iters > 64) iters = 64;
  const pz_runtime_opts *ro = pz_gemm_ctx_opts(ctx);
  iters = opt_or(ro->tuner_iters, iters);
  const int reps = opt_or(ro->tuner_reps, 5);
  const int sms = pz_gemm_ctx_sm_count(ctx);
  pz_tuner_entry e;
  memset(&e, 0, sizeof e);
  e.m_bucket = pz_tuner_m_bucket(m);
  e.n = n;
  e.k = k;
  /* Full sweep for atomic (1) and fullk (4); zero (2) and serial (5) time the 6 fastest
   * split-K configs of the atomic sweep (their kernels differ only in the epilogue). */
  enum { TOP = 6 };
  pz_gemm_config top[TOP];
  double top_us[TOP];
  int ntop = 0;
  const int flv[] = {PZ_GEMM_SPLITK_ATOMIC, PZ_GEMM_FULLK};
  /* Candidates 0-7: the mma.sync kernels (wt, warps, wn 0/1; 8 was the removed staged kernel); 9-11: the Hopper wgmma kernel
   * (wn 3) with 1, 2 or 4 64-row W tiles per CTA, only where it was initialised (compute capability 9);
   * 12-14: the Hopper stream-K kernel (wn 4, wt 1/2/4, one CTA per SM), atomic flavour only;
   * 15: the wgmma kernel's token split (wt 1, warps 9: two warpgroups per 64-row W tile), m > 8.
   * The wgmma candidates (9-11, 15) at m > 64 also run token tiles of 64 and 128 (config bn) below
   * the one-tile-of-all-tokens default: m / bn tiles side by side, more CTAs at short K.
   * PREZERO_TUNER_LEGACY=0 skips 0-7 (a faster sweep on Hopper). */
  const int hopper = pz_gemm_ctx_has_wgmma(ctx);
  const int legacy = opt_or(ro->tuner_legacy, 1) || !hopper;
  for (int fi = 0; fi < 2; fi++) {
    const int f = flv[fi];
    for (int cand = legacy ? 0 : 9; cand < (hopper ? 16 : 9); cand++) {
      int wt = 1 + (cand & 1), nw = cand & 2 ? 4 : 8, wn = cand >> 2;
      int chunk = 32; /* k per unit of the kernel's split granularity */
      if (cand == 8) continue; /* was the staged (cp.async) kernel, wn 2: removed, it won no H200 row */
      if (cand >= 12 && cand <= 14) { /* stream-K: one persistent grid of sm_count CTAs */
        if (f != PZ_GEMM_SPLITK_ATOMIC) continue;
        wt = cand == 12 ? 1 : cand == 13 ? 2 : 4;
        if (n % (64 * wt)) continue;
        pz_gemm_config c = {(pz_gemm_flavour)f, sms, wt, pz_gemm_wgmma_plain_warps(wt), 4, 0};
        double us = 0;
        PZ_CHECK(pz_tuner_time_gemm(ctx, pool, m, n, k, c, iters, reps, &us));
        if (e.cfg[f].splits == 0 || us < e.us[f]) {
          e.cfg[f] = c;
          e.us[f] = us;
        }
        continue;
      }
      if (cand >= 9) { /* wgmma: wt = 64-row W tiles per CTA (1, 2, 4); 15: wt 1 with the token split */
        if (cand == 15 && m <= 8) continue;
        wn = 3;
        wt = cand == 9 || cand == 15 ? 1 : cand == 10 ? 2 : 4;
        nw = cand == 15 ? 9 /* the token split */ : pz_gemm_wgmma_plain_warps(wt);
        chunk = 64;
        if (n % (64 * wt)) continue;
      } else {
        if (wt == 2 && m > 64) continue;
        if (wn && n % (16 * wt * nw)) continue;
      }
      const int tiles = wn == 3 ? n / (64 * wt) : n / (16 * wt * (wn ? nw : 1));
      static const int bn_list[] = {0, 64, 128}; /* token tiles; 0: one tile of all m tokens */
      for (size_t bi = 0; bi < sizeof bn_list / sizeof bn_list[0]; bi++) {
        const int bn = bn_list[bi];
        if (bn && (wn != 3 || m <= 64 || bn >= pz_gemm_wgmma_bn(m, wt))) continue; /* wgmma split-K, m > 64, below m */
        for (size_t si = 0; si < sizeof split_list / sizeof split_list[0]; si++) {
          const int s = split_list[si];
          if (f == PZ_GEMM_FULLK && s != 1) break;
          if (f != PZ_GEMM_FULLK && s == 1) continue;
          if ((k / chunk) / s < 2 || (int64_t)tiles * s * nw > 128 * sms) break;
          pz_gemm_config c = {(pz_gemm_flavour)f, s, wt, nw, wn, bn};
          double us = 0;
          PZ_CHECK(pz_tuner_time_gemm(ctx, pool, m, n, k, c, iters, reps, &us));
          if (e.cfg[f].splits == 0 || us < e.us[f]) {
            e.cfg[f] = c;
            e.us[f] = us;
          }
          if (f == PZ_GEMM_SPLITK_ATOMIC) { /* keep the TOP fastest, sorted */
            int pos;
            if (ntop < TOP) {
              pos = ntop++;
            } else {
              if (us >= top_us[TOP - 1]) continue;
              pos = TOP - 1;
            }
            while (pos > 0 && top_us[pos - 1] > us) {
              top[pos] = top[pos - 1];
              top_us[pos] = top_us[pos - 1];
              pos--;
            }
            top[pos] = c;
            top_us[pos] = us;
          }
        }
      }
    }
  }
  const int flv2[] = {PZ_GEMM_SPLITK_ZERO, PZ_GEMM_SPLITK_SERIAL};
  for (int fi = 0; fi < 2; fi++)
    for (int i = 0; i < ntop; i++) {
      pz_gemm_config c = top[i];
      c.flavour = (pz_gemm_flavour)flv2[fi];
      double us = 0;
      PZ_CHECK(pz_tuner_time_gemm(ctx, pool, m, n, k, c, iters, reps, &us));
      if (e.cfg[c.flavour].splits == 0 || us < e.us[c.flavour]) {
        e.cfg[c.flavour] = c;
        e.us[c.flavour] = us;
      }
    }
  if (e.cfg[PZ_GEMM_SPLITK_ATOMIC].splits > 0) {
    pz_gemm_config c = e.cfg[PZ_GEMM_SPLITK_ATOMIC];
    c.flavour = PZ_GEMM_MEMSET_SPLITK;
    e.cfg[PZ_GEMM_MEMSET_SPLITK] = c;
    PZ_CHECK(pz_tuner_time_gemm(ctx, pool, m, n, k, c, iters, reps, &e.us[PZ_GEMM_MEMSET_SPLITK]));
  }
  {
    pz_gemm_config c = {PZ_GEMM_CUBLAS, 1, 1, 8, 0, 0};
    e.cfg[PZ_GEMM_CUBLAS] = c;
    PZ_CHECK(pz_tuner_time_gemm(ctx, pool, m, n, k, c, iters, reps, &e.us[PZ_GEMM_CUBLAS]));
  }
  const int nz[] = {1, 4, 5, 6}, z[] = {2, 3, 4, 5, 6};
  e.best_nozero = PZ_GEMM_CUBLAS;
  e.best_zero = PZ_GEMM_CUBLAS;
  for (int i = 0; i < 4; i++)
    if (e.cfg[nz[i]].splits > 0 && e.us[nz[i]] < e.us[e.best_nozero]) e.best_nozero = (pz_gemm_flavour)nz[i];
  for (int i = 0; i < 5; i++)
    if (e.cfg[z[i]].splits > 0 && e.us[z[i]] < e.us[e.best_zero]) e.best_zero = (pz_gemm_flavour)z[i];
  PZ_CHECK(pz_tuner_put(pz_gemm_ctx_table(ctx), &e));
  if (out) *out = e;
  return PZ_OK;
}
