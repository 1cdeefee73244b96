/* Fused all-reduce + residual add + RMSNorm with zero_fill (the prezero donor, docs/ARCHITECTURE.md §3),
 * C-callable launchers. One-shot LL-packet exchange over P2P for tp >= 2 (after NCCL's
 * low-latency protocol, see core/gate.h PZ_AR_PROTO_LL); TP=1 is local. */
#ifndef PZ_BACKEND_CUDA_AR_FUSED_H
#define PZ_BACKEND_CUDA_AR_FUSED_H
#include <stdbool.h>
#include <stdint.h>
#include <cuda_runtime.h>
#include "backend/cuda/comm.h"
#include "core/dtype.h"
#include "core/gate.h"

#ifdef __cplusplus
extern "C" {
#endif

/* zero_fill = (ptr, n_total, n_base, row_stride, dtype): rows 0..m-1 of a [m, n_total] f32 or
 * bf16 buffer whose rows are row_stride elements apart. ptr NULL: no fill. ptr and
 * row_stride * sizeof(dtype) must be multiples of 16 bytes. */
typedef struct pz_zero_fill {
  void *ptr;
  int64_t n_total, n_base, row_stride;
  pz_dtype dtype;
} pz_zero_fill;

/* One rank's operands (device pointers on that rank's GPU). Shapes, row strides in elements:
 *   partial      f32  [m, H] (ld_partial)  this rank's GEMM partial sum (read; the NCCL path
 *                                          overwrites it in place with the sum);
 *   residual_in  f32  [m, H] (ld_res)      NULL = zero (first layer); may equal residual_out;
 *   residual_out f32  [m, H] (ld_res)      residual_in + Σ_r partial_r;
 *   weight       bf16 [H];
 *   x_norm       bf16 [m, H] (ld_x)        RMSNorm(residual_out) * weight.
 * Formula (same as pz_ref_ar_rmsnorm, src/backend/cpu/ref_ops.h): s = p_0; s += p_r for
 * r = 1..tp-1 in rank order; r = residual_in + s; inv = 1/sqrtf(Σr²/H + eps) (IEEE div/sqrt,
 * Σr² in a fixed tree order); x = bf16((r*inv)*w). Every rank computes identical bits.
 * ld_* must be multiples of 4, H a multiple of 8, pointers 16-byte aligned.
 * fill_all: the gate's answer for this m (pz_prezero_active), decided by the host at capture:
 * true zeroes all n_total columns, false only [0, n_base). */
typedef struct pz_ar_rmsnorm_args {
  const float *partial;
  int64_t ld_partial;
  const float *residual_in;
  float *residual_out;
  int64_t ld_res;
  const pz_bf16 *weight;
  pz_bf16 *x_norm;
  int64_t ld_x;
  float eps;
  int64_t m, H;
  pz_zero_fill fill;
  bool fill_all;
} pz_ar_rmsnorm_args;

/* Enqueues the fused kernel of `rank` on stream s (the caller's current device is set to the
 * rank's GPU). Grid: pz_ar_plan_for(m, H, tp) donor CTAs (the same on every rank) followed by
 * pz_ar_plan_fill_ctas(dev, plan, fill bytes) fill CTAs that skip the handshake and zero with
 * 16-byte stores over a grid-stride loop. Every rank must enqueue the same sequence of
 * launches (same m, H), in order, on one stream per rank: launches of one communicator must
 * not overlap on a rank (the sequence number lives in the communicator); the kernels of all
 * ranks must be able to run at the same time. Sequence numbers are 32-bit (wrap after 2^32
 * launches; 0 is skipped).
 * Capture-safe: no host memset, sequence numbers live in device memory (comm.h).
 * dev: gate description (occupancy, fill rate); NULL = pz_device_desc_default.
 * Errors: PZ_ERR_INVALID_ARG (pointers, alignment, rank), PZ_ERR_SHAPE (m > max_m, H > max_H,
 * H not a multiple of 8, donor CTAs beyond one wave), PZ_ERR_CUDA. A peer that never arrives
 * shows up later as PZ_ERR_TIMEOUT from pz_comm_check when a timeout is configured. */
pz_status pz_ar_rmsnorm_launch(const pz_comm *c, int rank, const pz_ar_rmsnorm_args *a,
                               const pz_device_desc *dev, cudaStream_t s);

/* The same on one rank's device-side state alone (pz_ar_rmsnorm_launch calls it with
 * pz_comm_view(c, rank)): v->inbox/raw/flags[q] may be peer pointers or CUDA IPC mappings of
 * rank q's buffers in another process (src/backend/cuda/ar_mp.c). Same contract and errors. */
pz_status pz_ar_rmsnorm_launch_view(const pz_comm_rank_view *v, const pz_ar_rmsnorm_args *a,
                                    const pz_device_desc *dev, cudaStream_t s);

/* The same for every rank: args[r] and streams[r] for r = 0..tp-1, each after cudaSetDevice of rank
 * r's device (left current). Stops at the first failure: PZ_ERR_CUDA (cudaSetDevice) or that rank's
 * pz_ar_rmsnorm_launch error; earlier ranks are already enqueued. */
pz_status pz_ar_rmsnorm_launch_all(const pz_comm *c, const pz_ar_rmsnorm_args *args,
                                   const pz_device_desc *dev, const cudaStream_t *streams);

/* Residual + RMSNorm only (no exchange, one CTA per row, no fill) on the current device:
 * used after an NCCL all-reduce has summed the partials. Same formula as above with tp = 1
 * (a->partial is the sum). Errors: PZ_ERR_INVALID_ARG (pointers, strides, alignment, fill
 * fields), PZ_ERR_SHAPE (H not a multiple of 8 or beyond 4*PZ_AR_THREADS*PZ_AR_MAX_QPT),
 * PZ_ERR_CUDA. */
pz_status pz_rmsnorm_residual_launch(const pz_ar_rmsnorm_args *a, cudaStream_t s);

/* Fill only (donor_ctas = 0, n_ctas CTAs of the fused kernel): used by calibration.
 * Zeroes rows 0..m-1, columns [0, cols) of the fill buffer (f->n_total / n_base not read).
 * Errors: PZ_ERR_INVALID_ARG (f or f->ptr NULL, n_ctas < 1, cols outside 0..row_stride, ptr or
 * row_stride bytes not a multiple of 16), PZ_ERR_CUDA. */
pz_status pz_zero_fill_launch(const pz_zero_fill *f, int64_t m, int64_t cols, int n_ctas,
                              cudaStream_t s);

/* Resident CTAs per SM of the fused kernel on `device`: the minimum over its instantiations of
 * 1, 2 and 4 quads per thread (H <= 8192; cudaOccupancyMaxActiveBlocksPerMultiprocessor,
 * PZ_AR_THREADS threads, dynamic shared memory qpt*PZ_AR_THREADS*24 bytes). The current device
 * is restored. Errors: PZ_ERR_CUDA. */
pz_status pz_ar_fused_occupancy(int device, int *ctas_per_sm);

#ifdef __cplusplus
}
#endif
#endif
