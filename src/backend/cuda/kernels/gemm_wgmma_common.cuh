/* Device helpers of the Hopper GEMM kernels (gemm_wgmma.cu: split-K grid; gemm_wgmma_streamk.cu:
 * persistent stream-K grid): mbarriers, TMA tensor copies, wgmma descriptors and fences, vector
 * reductions, named barriers; and the tensor-map encoder both launchers use.
 * Source of every instruction form: the PTX ISA (mbarrier, cp.async.bulk.tensor, wgmma, red, bar). */
#pragma once
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include "backend/cuda/kernels/wgmma_ops.cuh"
#include "backend/cuda/kernels/pdl.cuh"
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

/* The dynamic shared memory rounded up to 1024 bytes (the launch adds 1024 of slack). */
__device__ __forceinline__ unsigned char *smem_align_1k(unsigned char *raw) {
  return (unsigned char *)(((uintptr_t)raw + 1023) & ~(uintptr_t)1023);
}

/* Thread 0 initialises the TMA ring's barriers: full[s] waits for the producer's one arrival
 * plus the stage's bytes, empty[s] for one arrival per consumer warp; then fences them for the
 * copy engine. The caller syncs the CTA before any use. */
__device__ __forceinline__ void ring_init(uint64_t *full, uint64_t *empty, int stages, int consumer_warps) {
  if (threadIdx.x != 0) return;
  for (int s = 0; s < stages; s++) {
    mbar_init(&full[s], 1);
    mbar_init(&empty[s], consumer_warps);
  }
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

/* One ring stage into the accumulators: a warpgroup's WM m64 W tiles (rows 64 (wrow + w) of each
 * k-block sub-tile, W_BLK bytes apart) times BN tokens of the stage (at byte W_BYTES + aoff, A_BLK
 * apart; aoff = 128 x the warpgroup's first token, a multiple of 1024 so the 128-byte swizzle keeps its
 * phase), four k16 steps of 32 bytes inside the 128-byte swizzled rows of each of the stage's KS
 * k-blocks (every stage is full: no branch around the wgmmas, which ptxas would serialize,
 * warning C7520), committed as one wgmma group. */
template <int BN, int WM, int W_BLK, int W_BYTES, int A_BLK, int KS>
__device__ __forceinline__ void wg_mma_stage(float (&acc)[WM][BN / 2], const unsigned char *st, int wrow, int aoff) {
  wgmma_fence();
#pragma unroll
  for (int j = 0; j < KS; j++) {
    const uint64_t da = make_desc(st + W_BYTES + j * A_BLK + aoff);
#pragma unroll
    for (int w = 0; w < WM; w++) {
      const uint64_t dw = make_desc(st + j * W_BLK + (wrow + w) * 64 * 128);
#pragma unroll
      for (int kk = 0; kk < 4; kk++) Wgmma<BN>::mma(acc[w], dw + 2 * kk, da + 2 * kk, 1);
    }
  }
  wgmma_commit();
}

/* The accumulators into a token-major fp32 tile [tokens][CP] of shared memory. Fragment element
 * 4c + 2i + j: W row (column of C) 64 (wrow + w) + 16 (warp % 4) + lane / 4 + 8i, token
 * t0 + 8c + 2 (lane % 4) + j (PTX ISA, wgmma D fragment layout; BN = this warpgroup's tokens);
 * CP = the CTA's columns + 4 keeps the writes on distinct banks. */
template <int BN, int WM, int CP>
__device__ __forceinline__ void wg_frag_to_smem(float *tile_s, const float (&acc)[WM][BN / 2], int wrow, int t0,
                                                int warp, int lane) {
  const int tq = t0 + 2 * (lane & 3);
#pragma unroll
  for (int w = 0; w < WM; w++) {
    const int col = (wrow + w) * 64 + (warp & 3) * 16 + (lane >> 2);
#pragma unroll
    for (int c = 0; c < BN / 8; c++)
#pragma unroll
      for (int i = 0; i < 2; i++)
#pragma unroll
        for (int j = 0; j < 2; j++) tile_s[(8 * c + tq + j) * CP + col + 8 * i] = acc[w][4 * c + 2 * i + j];
  }
}

/* v += bias[col .. col + 3] */
__device__ __forceinline__ void add_bias4(float4 &v, const float *bias, int col) {
  v.x += bias[col];
  v.y += bias[col + 1];
  v.z += bias[col + 2];
  v.w += bias[col + 3];
}

} // namespace pz_wg

/* 2-D bf16 tensor map over rows x k (row stride ld elements), box 64 x box_rows, 128-byte swizzle,
 * rows past `rows` read as zeros (gemm_wgmma.cu). Errors: PZ_ERR_CUDA (the encoder refused),
 * PZ_ERR_UNSUPPORTED (pz_gemm_wgmma_init not run). */
pz_status pz_gemm_wgmma_encode_map(CUtensorMap *map, const void *base, int64_t rows, int64_t k, int64_t ld, int box_rows);
/* 3-D bf16 tensor map, d0 x d1 x d2 (d0 contiguous; s1, s2 element strides, multiples of 8), box 64 x
 * box1 x 1, 128-byte swizzle, coordinates past a dimension read as zeros (mla_attn_wgmma.cu). Errors as
 * pz_gemm_wgmma_encode_map. */
pz_status pz_gemm_wgmma_encode_map_3d(CUtensorMap *map, const void *base, int64_t d0, int64_t d1, int64_t d2,
                                      int64_t s1, int64_t s2, int box1);
