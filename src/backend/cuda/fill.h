/* Device-side deterministic fill of weights and KV caches: the fill rule of core/fill_rule.h, the
 * same bits as the CPU executor's fill, computed on the GPU so large models load fast. */
#ifndef PZ_BACKEND_CUDA_FILL_H
#define PZ_BACKEND_CUDA_FILL_H
#include <stdint.h>
#include <cuda_runtime.h>
#include "core/ir.h"
#ifdef __cplusplus
extern "C" {
#endif

/* Whether `t` is filled at load (weights, STATE tensors whose name ends in "kv_cache" (MLA) or
 * in ".k_cache" / ".v_cache" (GQA)); every other tensor starts as zero. */
int pz_fill_wanted(const pz_tensor *t);

/* Enqueues the fill of tensor t's storage on `rank` (device pointer dst, contiguous, the
 * tensor's own dtype) on stream s of the current device, by the rule of core/fill_rule.h with
 * key pz_fill_name_key(seed, t->name):
 *   weights:   element i = pz_fill_bits(key, full(i), init_scale, init_offset, dtype), where
 *              full(i) is the flat index of local element i in the unsharded tensor full_ne
 *              (pz_fill_index for rank `rank` of `tp`: the shard dim shifted by rank * ne, or
 *              mapped through its parts / replicated slices, pz_tensor.n_parts);
 *   k_cache / v_cache (GQA, sharded by kv head): the weights' mapping, scale init_scale or 1,
 *              offset 0;
 *   kv_cache (MLA): rank 0's mapping of the unsharded shape (replicated), scale init_scale or 1,
 *              offset 0.
 * The CPU executor's fill (cpu_exec.c) computes the same bits. dst must be 16-byte aligned.
 * Errors: PZ_ERR_SHAPE (not contiguous, a shard or part beyond full_ne, ndim outside 1..4),
 * PZ_ERR_INVALID_ARG (t not fillable, dst NULL or misaligned), PZ_ERR_CUDA. */
pz_status pz_fill_tensor_launch(const pz_tensor *t, int rank, int tp, uint64_t seed, void *dst, cudaStream_t s);

/* Enqueues the fill of a quantised synthetic weight (q from pz_qfill_plan, core/quant_fill.h:
 * INT4 packed words or their bf16 scales, FP8 e4m3 bytes or their f32 scales) of `rank` into dst
 * (contiguous, the tensor's dtype) on stream s: bit for bit what model/quant_synth.h gives on the
 * host (the host twin pz_qfill_rows_host is tested against it), computed on the GPU.
 * Errors: PZ_ERR_INVALID_ARG (NULL, kind none), PZ_ERR_SHAPE (an INT4 group that does not split
 * the columns), PZ_ERR_CUDA. */
struct pz_qfill;
pz_status pz_fill_quant_launch(const struct pz_qfill *q, int rank, void *dst, cudaStream_t s);

#ifdef __cplusplus
}
#endif
#endif
