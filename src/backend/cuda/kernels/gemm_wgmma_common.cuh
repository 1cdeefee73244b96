/* Device helpers of the Hopper GEMM kernels (gemm_wgmma.cu: split-K grid; gemm_wgmma_streamk.cu:
 * persistent stream-K grid): mbarriers, TMA tensor copies, wgmma descriptors and fences, vector
 * reductions, named barriers; and the tensor-map encoder both launchers use.
 * Source of every instruction form: the PTX ISA (mbarrier, cp.async.bulk.tensor, wgmma, red, bar). */
#pragma once
#include <cuda.h>
#include <cudaTypedefs.h>
#include <stdint.h>
extern "C" {
#include "core/status.h"
}

namespace pz_wg {

__device__ __forceinline__ uint32_t smem_u32(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }

__device__ __forceinline__ void mbar_init(uint64_t *b, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_u32(b)), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_expect_tx(uint64_t *b, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(b)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint64_t *b) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_u32(b)) : "memory");
}
/* Waits until the phase of parity `parity` has completed (a fresh barrier counts parity 1 as done). */
__device__ __forceinline__ void mbar_wait(uint64_t *b, uint32_t parity) {
  uint32_t done = 0;
  const uint32_t a = smem_u32(b);
  while (true) {
    asm volatile(
        "{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
        : "=r"(done)
        : "r"(a), "r"(parity)
        : "memory");
    if (done) break;
  }
}

__device__ __forceinline__ void tma_load_2d(void *dst, const CUtensorMap *map, uint64_t *bar, int c0, int c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];" ::"r"(
          smem_u32(dst)),
      "l"((uint64_t)map), "r"(c0), "r"(c1), "r"(smem_u32(bar))
      : "memory");
}

/* Shared-memory matrix descriptor of a K-major tile with 128-byte rows, 128-byte swizzle:
 * start address >> 4 (bits 0-13), leading byte offset 16 (unused by swizzled K-major), stride
 * byte offset 1024 between 8-row groups (bits 32-45), swizzle mode 1 = 128B (bits 62-63).
 * Source: PTX ISA, "Matrix Descriptor Format" of the asynchronous warpgroup MMA. */
__device__ __forceinline__ uint64_t make_desc(const void *tile) {
  const uint32_t a = smem_u32(tile);
  return (uint64_t)((a & 0x3FFFF) >> 4) | ((uint64_t)1 << 16) | ((uint64_t)(1024 >> 4) << 32) | ((uint64_t)1 << 62);
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}

__device__ __forceinline__ void red_v4(float *p, float4 v) {
  asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};" ::"l"(p), "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w)
               : "memory");
}
/* Named barrier `id` (1..15; 0 is __syncthreads) over `count` threads (a multiple of 32). */
__device__ __forceinline__ void bar_sync(int id, int count) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(count) : "memory");
}

} // namespace pz_wg

/* 2-D bf16 tensor map over rows x k (row stride ld elements), box 64 x box_rows, 128-byte swizzle,
 * rows past `rows` read as zeros (gemm_wgmma.cu). Errors: PZ_ERR_CUDA (the encoder refused),
 * PZ_ERR_UNSUPPORTED (pz_gemm_wgmma_init not run). */
pz_status pz_gemm_wgmma_encode_map(CUtensorMap *map, const void *base, int64_t rows, int64_t k, int64_t ld, int box_rows);
