/* GEMM tuner: times the split-K GEMM candidates on the device per (m bucket, n, k) and keeps
 * the winners in a JSON table (cJSON) per device name + SM count in the cache directory. */
#ifndef PZ_BACKEND_CUDA_TUNER_H
#define PZ_BACKEND_CUDA_TUNER_H
#include "backend/cuda/gemm.h"
#ifdef __cplusplus
extern "C" {
#endif

/* The table itself (entries, JSON reader and writer, look-up): backend/gemm_table.h. */

/* Device buffers for timing: `w` holds rotated copies of W (bytes >= 2 x L2 so each launch
 * streams its weights from HBM), `a` bf16 [256 x 16384], `c` f32 [256 x 32768]; all filled
 * with random bf16 / zero. */
typedef struct pz_tuner_pool {
  void *w;
  size_t w_bytes;
  void *a;
  void *c;
  unsigned *sink;
  cudaStream_t stream;
} pz_tuner_pool;
/* Allocates the pool on the current device (w_bytes of weight copies) and fills it; returns
 * after a stream sync. Errors: PZ_ERR_OOM, PZ_ERR_CUDA (the pool may be partly allocated:
 * pz_tuner_pool_destroy frees it). */
pz_status pz_tuner_pool_create(pz_tuner_pool *p, size_t w_bytes);
/* Frees the buffers and the stream, zeroes *p. */
void pz_tuner_pool_destroy(pz_tuner_pool *p);

/* Median µs of one GEMM launch `cfg` for (m, n, k, c f32, no bias): a CUDA graph of `iters`
 * launches, each on the next copy of W in the pool (copies rotate), replayed `reps` times after
 * one warm-up replay; per replay time / iters, median over replays.
 * Errors: PZ_ERR_SHAPE (one copy of W, rounded up to 256 bytes, exceeds the pool), PZ_ERR_OOM,
 * PZ_ERR_CUDA (capture, instantiate, replay), and those of pz_gemm_launch. */
pz_status pz_tuner_time_gemm(pz_gemm_ctx *ctx, const pz_tuner_pool *pool, int m, int n, int k,
                             pz_gemm_config cfg, int iters, int reps, double *us);
/* Same method and errors for the plain streaming read of `bytes` (pz_gemm_stream_read). */
pz_status pz_tuner_time_read(pz_gemm_ctx *ctx, const pz_tuner_pool *pool, int64_t bytes, int iters,
                             int reps, double *us);
/* Times the candidates for (m, n, k) and stores the entry (key bucket(m)) in ctx's table; *out
 * gets a copy. Candidates: atomic and fullk over every layout (wt 1/2, warps 4/8, wn 0/1; on
 * Hopper the wgmma and stream-K kernels, wn 3/4) and split 1..32 with >= 2 K chunks of 32 each and at most 128 warps per SM;
 * zero and serial over the 6 fastest atomic configs; memset with the best atomic one; cuBLAS.
 * Each: a graph of max(20, 128 MB / weight bytes) launches (at most 64), 5 replays, median
 * (PREZERO_TUNER_ITERS / PREZERO_TUNER_REPS override). Layouts whose tile does not divide n
 * are not tried; the first failing timing ends the call.
 * Errors: those of pz_tuner_time_gemm, PZ_ERR_OOM (table). */
pz_status pz_tuner_tune(pz_gemm_ctx *ctx, const pz_tuner_pool *pool, int m, int n, int k,
                        pz_tuner_entry *out);
#ifdef __cplusplus
}
#endif
#endif
