/* The workbench's helpers (bench/dev/README.md): device fills with host twins and a streaming-read
 * bandwidth yardstick, used only by tests (tests/cuda/test_moe.c) and benchmarks (`prezero bench
 * moe`, tools/bench_moe.c); no library code calls them. Built as the static library prezero_dev
 * (CUDA builds only); include as "bench/dev/dev_helpers.h". All calls are asynchronous on stream
 * s and run on the current device. */
#ifndef PZ_BENCH_DEV_HELPERS_H
#define PZ_BENCH_DEV_HELPERS_H
#include <stdint.h>
#include <cuda_runtime.h>
#include "core/dtype.h"
#include "core/status.h"
#ifdef __cplusplus
extern "C" {
#endif

/* Fills p[0..n) (device, bf16) with hash(seed, i) mapped to (u - 0.5) * 2 * scale, u uniform in
 * [0, 1) on a 2^-16 grid (rounded to bf16): the same values as pz_moe_hash_bf16 on the host.
 * hash: the SplitMix64 finaliser (Steele, Lea, Flood 2014) of i + γ*(seed+1), bits 16..31.
 * Errors: PZ_ERR_INVALID_ARG (p NULL, n < 0), PZ_ERR_CUDA. */
pz_status pz_moe_fill_bf16(pz_bf16 *p, int64_t n, uint32_t seed, float scale, cudaStream_t s);
/* Host twin of pz_moe_fill_bf16's element i (its bf16 bits). */
pz_bf16 pz_moe_hash_bf16(uint32_t seed, int64_t i, float scale);
/* Plain streaming read of `bytes` (a multiple of 16, >= 16; p 16-byte aligned) with 16-byte
 * non-caching loads (ld.global.nc.L1::no_allocate, as the expert kernels load weights) over a
 * grid-stride loop of 4 CTAs of 512 threads per SM; sink: one device unsigned the kernel may add
 * to (so the loads are not dropped). The MoE benchmark's bandwidth yardstick
 * (docs/ARCHITECTURE.md §7). Errors: PZ_ERR_INVALID_ARG (NULL / misaligned pointer, bad byte
 * count), PZ_ERR_CUDA. */
pz_status pz_moe_stream_read(const void *p, int64_t bytes, unsigned *sink, cudaStream_t s);

#ifdef __cplusplus
}
#endif
#endif
