/* Pieces shared by the TMA + wgmma MLA attention kernels (mla_attn_wgmma.cu: version 3, the k-split
 * warpgroups; mla_attn_pp.cu: version 4, the ping-pong warpgroups), kv_lora_rank 512 + rope 64: the
 * tile geometry, the 3-d tensor copy of a KV tile, the MN-major descriptor of its value columns, and
 * the host's tensor maps of Q and of the (paged or contiguous) cache. Include after
 * gemm_wgmma_common.cuh and mla_attn_common.cuh. */
#pragma once
#include <cuda.h>
#include <stdint.h>
#include "backend/cuda/gemm.h"

namespace {

using namespace pz_wg;

constexpr int HT = 64;                         /* head rows per CTA: the wgmma M side */
constexpr int KB = 9;                          /* 64-column blocks of a cache row (576 columns) */
constexpr int LV = 512;                        /* value (latent) columns; each warpgroup owns 256 */
constexpr int TILE_BYTES = BN * 128;           /* one 64-column block of a KV tile: 32 rows x 128 B */
constexpr int STAGE_BYTES = KB * TILE_BYTES;   /* 36 KB */
constexpr int Q_BYTES = KB * HT * 128;         /* 72 KB */

__device__ __forceinline__ void tma_load_3d(void *dst, const CUtensorMap *map, uint64_t *bar, int c0, int c1, int c2) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];" ::"r"(
          smem_u32(dst)),
      "l"((uint64_t)map), "r"(c0), "r"(c1), "r"(c2), "r"(smem_u32(bar))
      : "memory");
}

/* Descriptor of a B operand read MN-major from 64-column blocks of 128-byte swizzled rows: leading byte
 * offset = the distance between 64-column blocks (TILE_BYTES), stride byte offset 1024 between 8-row
 * groups, swizzle 128B (PTX ISA, "Matrix Descriptor Format"; MN-major canonical layout
 * ((8,8,m),(8,k)) : ((1,8,LBO),(64,SBO)) in 16-byte units). */
__device__ __forceinline__ uint64_t make_desc_mn(const void *tile) {
  const uint32_t a = smem_u32(tile);
  return (uint64_t)((a & 0x3FFFF) >> 4) | ((uint64_t)(TILE_BYTES >> 4) << 16) | ((uint64_t)(1024 >> 4) << 32) |
         ((uint64_t)1 << 62);
}

/* The tensor maps: tq over qabs as [m * heads rows, 576] (box 64 x 64); tkv over the cache as [576, 64,
 * pages] (paged) or [576, max_ctx, m] (contiguous), box 64 x BN x 1. Errors: the encoder's status. */
static inline pz_status mla_tma_maps(const Kp *k, CUtensorMap *tq, CUtensorMap *tkv) {
  PZ_CHECK(pz_gemm_wgmma_encode_map(tq, k->qabs, (int64_t)k->m * k->heads, k->kvw, k->kvw, HT));
  if (k->block_table)
    return pz_gemm_wgmma_encode_map_3d(tkv, k->cache, k->kvw, PZ_KV_BLOCK, (int64_t)1 << 31, k->kvw,
                                       (int64_t)PZ_KV_BLOCK * k->kvw, BN);
  return pz_gemm_wgmma_encode_map_3d(tkv, k->cache, k->kvw, k->max_ctx, k->m, k->kvw, k->cache_seq_stride, BN);
}

} // namespace
