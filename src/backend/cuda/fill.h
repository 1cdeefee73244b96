/* Device-side deterministic fill of weights and KV caches: the same values, bit for bit, as the
 * CPU executor's fill (src/backend/cpu/cpu_exec.c), computed on the GPU so large models load fast. */
#ifndef PZ_BACKEND_CUDA_FILL_H
#define PZ_BACKEND_CUDA_FILL_H
#include <stdint.h>
#include <cuda_runtime.h>
#include "core/ir.h"
#ifdef __cplusplus
extern "C" {
#endif

/* Key of a tensor: splitmix64(seed ^ splitmix64(FNV-1a-64(name))), as the CPU executor.
 * SplitMix64: Steele, Lea, Flood, "Fast splittable pseudorandom number generators" (2014);
 * constants of the reference implementation (prng.di.unimi.it/splitmix64.c). */
uint64_t pz_fill_name_key(uint64_t seed, const char *name);

/* Whether `t` is filled at load (weights, and STATE tensors whose name ends in "kv_cache");
 * every other tensor starts as zero. */
int pz_fill_wanted(const pz_tensor *t);

/* Enqueues the fill of tensor t's storage on `rank` (device pointer dst, contiguous, the
 * tensor's own dtype) on stream s of the current device:
 *   weights:   value(i) = init_offset + init_scale * u(key, full(i)), where full(i) is the flat
 *              index of local element i in the unsharded tensor full_ne (the shard dim shifted
 *              by rank * ne[shard_dim]) and u(key, j) = (top 24 bits of splitmix64(key + j*γ))
 *              * 2^-23 - 1 in [-1, 1); bf16 by round-to-nearest-even, i32 by truncation;
 *   kv_cache:  the same with rank 0's mapping (replicated), scale init_scale or 1, offset 0.
 * The multiply and add are rounded separately (no FMA), as the CPU code does.
 * dst must be 16-byte aligned (16-byte stores).
 * Errors: PZ_ERR_SHAPE (not contiguous, shard beyond full_ne, ndim outside 1..4),
 * PZ_ERR_INVALID_ARG (t not fillable, dst NULL or misaligned), PZ_ERR_CUDA. */
pz_status pz_fill_tensor_launch(const pz_tensor *t, int rank, uint64_t seed, void *dst, cudaStream_t s);

#ifdef __cplusplus
}
#endif
#endif
