/* prezero public C11 API: the split-K GEMM of the decode step, on the caller's CUDA stream and
 * device pointers, for engines with their own buffers and CUDA graphs.
 *
 *   C[m, n] (+)= A[m, k] · W[n, k]ᵀ (+ bias[n])      (nn.Linear: W is [out_features, in_features])
 *
 * zero_init = 1: C = A·Wᵀ (+bias) whatever C held (the GEMM zeroes its output itself where its
 * kernel needs that: a memset node or an in-kernel zeroing split).
 * zero_init = 0: C must hold zeros on entry (e.g. zeroed by the fused AR + RMSNorm donor's
 * zero_fill) and ends as A·Wᵀ (+bias); the GEMM skips its own zeroing. pz_gemm_skips_zeroing
 * says whether that saves anything for a shape.
 *
 * Every call returns a pz_status; pz_last_error() has the message. In a build without the CUDA
 * backend every function here except pz_gemm_handle_destroy returns PZ_ERR_UNSUPPORTED.
 * No call allocates or synchronises on the stream after pz_gemm_handle_create, so pz_gemm_run is
 * capturable in the caller's CUDA graph (cudaStreamBeginCapture). */
#ifndef PREZERO_GEMM_H
#define PREZERO_GEMM_H
#include <stdint.h>
#include "prezero/common.h"
#ifdef __cplusplus
extern "C" {
#endif

/* The CUDA runtime's stream type without including cuda_runtime.h: cudaStream_t is
 * `struct CUstream_st *`; pass a cudaStream_t as is (NULL = the legacy default stream). */
struct CUstream_st;
struct pz_runtime_opts;

/* A GEMM handle on one CUDA device: per-tile semaphores, a cuBLAS handle with a 32 MiB
 * workspace, and the tuner's table of kernel choices for that device (the cache, else the
 * built-in table for the GPU, else the heuristic). One handle per stream: two GEMMs of one
 * handle must not run concurrently (graphs replayed on one stream are fine). */
typedef struct pz_gemm_handle pz_gemm_handle;

/* One GEMM, all pointers on the handle's device.
 *   m: rows (tokens), 1..256.   n, k: output / reduction columns, multiples of 64.
 *   A:    bf16 [m, lda] row-major, lda >= k, lda % 8 == 0 (elements), 16-byte aligned.
 *   W:    bf16 [n, ldw] row-major, ldw >= k (0 means k), ldw % 8 == 0, 16-byte aligned.
 *   out:  the output buffer, out_dtype PZ_ELEM_F32 or PZ_ELEM_BF16, [m, out_row_stride]
 *         row-major; the GEMM writes columns [out_col, out_col + n) of each of its m rows and
 *         nothing else (out= a column slice of a wider buffer, e.g. the donor's zero_fill buffer).
 *         out_row_stride >= out_col + n, a multiple of 8 (elements); out + out_col 16-byte aligned.
 *   bias: f32 [n] or NULL; added exactly once.
 *   zero_init: 1 or 0, see the top of this header. */
typedef struct pz_gemm_problem {
  int m, n, k;
  const void *A;
  int64_t lda;
  const void *W;
  int64_t ldw;
  void *out;
  int64_t out_col;
  int64_t out_row_stride;
  pz_elem_type out_dtype;
  const float *bias;
  int zero_init;
} pz_gemm_problem;

/* Creates a handle on the calling thread's current CUDA device (cudaSetDevice first).
 * opts: run-time options (prezero_options.h: PREZERO_GEMM_* fields, cache_dir), copied; NULL
 * reads them from the PREZERO_* environment. Errors: PZ_ERR_INVALID_ARG (out NULL, a malformed
 * option), PZ_ERR_NO_DEVICE, PZ_ERR_CUDA, PZ_ERR_OOM, PZ_ERR_UNSUPPORTED (no CUDA backend).
 * *out is NULL on error. */
PZ_API pz_status pz_gemm_handle_create(const struct pz_runtime_opts *opts, pz_gemm_handle **out);

/* Frees the handle's device memory and cuBLAS handle; NULL is ignored. Not while a GEMM of it
 * (or a graph holding one) may still run. */
PZ_API void pz_gemm_handle_destroy(pz_gemm_handle *h);

/* Enqueues the GEMM on `stream` (the kernel the tuner chose for (m, n, k, zero_init)).
 * Programmatic dependent launch (Hopper; PREZERO_PDL, on unless the handle's options set pdl = 0):
 * the wgmma kernels may start while the kernel ahead of them on `stream` is still running, and
 * read W from that moment; they wait for it to finish before they read A or bias or touch C. So
 * W must not be written by a kernel that can still be running when this one is enqueued (weights
 * dequantised into a scratch buffer by the kernel just ahead, say): create the handle with pdl = 0
 * then. A kernel ahead that calls griddepcontrol.launch_dependents early lets the GEMM start sooner.
 * Errors: PZ_ERR_INVALID_ARG (NULL handle / problem / pointer, misaligned pointer, zero_init not
 * 0/1), PZ_ERR_SHAPE (m outside 1..256, n or k not a multiple of 64, a stride too small or not
 * a multiple of 8), PZ_ERR_DTYPE (out_dtype), PZ_ERR_CUDA (launch), PZ_ERR_UNSUPPORTED. */
PZ_API pz_status pz_gemm_run(pz_gemm_handle *h, const pz_gemm_problem *p, struct CUstream_st *stream);

/* Will the kernel chosen for (m, n, k) with zero_init = 0 be a split-K kernel that skips a
 * zeroing of its output, i.e. does handing it a pre-zeroed output save anything? *skips = 1 for
 * the split-K kernels (in-kernel zero or memset node when zero_init = 1), 0 for the full-K,
 * deterministic serial split-K and cuBLAS kernels (they never need a zeroed output). kernel
 * (may be NULL) receives a one-line name of the choice, e.g. "wgmma atomic splits=8 wt=1"
 * (kernel_len bytes, NUL included). m tokens 1..256, n and k elements, multiples of 64.
 * Errors: PZ_ERR_INVALID_ARG (NULL handle or skips), PZ_ERR_SHAPE, PZ_ERR_UNSUPPORTED. */
PZ_API pz_status pz_gemm_skips_zeroing(pz_gemm_handle *h, int m, int n, int k, int *skips, char *kernel,
                                       size_t kernel_len);

#ifdef __cplusplus
}
#endif
#endif /* PREZERO_GEMM_H */
