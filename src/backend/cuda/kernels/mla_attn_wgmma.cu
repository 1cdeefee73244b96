/* MLA decode attention, version 3 (sm_90a): TMA + wgmma, for kv_lora_rank 512 and qk_rope_head_dim
 * 64 (kv_lora + rope = 576: DeepSeek-V2 / V2-Lite / V3, Kimi-K2). Same inputs, schedule and outputs as
 * versions 1 and 2 (mla_kernels.cu): one CTA takes one work slot (a slice of one sequence, the balanced
 * split-KV schedule of core/kv_sched.h) for 64 heads and writes the slice's unnormalised output and
 * (max, sum) per head for the combine kernel.
 *
 * Algorithm: flash-decoding over the absorbed form, as FlashMLA published it for Hopper (the heads of a
 * rank are the wgmma M = 64 side; the compressed cache row [c | k_pe] is the key, its first 512 columns
 * the value, so one shared-memory tile feeds both products). The code is ours:
 *   - thread 0 streams 32-position KV tiles (9 TMA boxes of 64 columns x 32 rows, 128-byte swizzle,
 *     through the block table when paged) into a 3-stage ring guarded by mbarriers, refilling the stage
 *     of tile t - 1 once tile t's P · V is issued: both warpgroups are past that stage (the score
 *     exchange), so the refill never waits, and the warpgroup-wide wgmmas are not held up by it; the
 *     block table is read one load ahead (a separate producer warp would cap the registers at 224 per
 *     thread, and ptxas then serializes the m64n256 wgmma: warning C7512);
 *   - two consumer warpgroups. S = Q·Kᵀ [64 heads x 32 positions] is split along the 576 columns:
 *     warpgroup g multiplies the k16 steps 2g and 2g + 1 of each 64-column block (18 steps, wgmma
 *     m64n32k16, Q and K from shared memory; interleaved so that every descriptor is the warpgroup's
 *     base plus a compile-time offset, and the wgmmas issue back to back), the two partial scores are
 *     exchanged through shared memory and both warpgroups form S = S_0 + S_1 (the same bits in both,
 *     IEEE addition commutes);
 *   - both run the online softmax on the whole S (identical in both), keep P in registers and multiply
 *     it by their half of V: O_g [64 x 256] += P · V[:, 256 g ..] (wgmma m64n256k16, A from registers,
 *     B read MN-major from the same KV tile);
 *   - rows of a partial last tile past the slice's end are masked in S and zeroed in V (so that garbage
 *     beyond the context cannot turn 0 · V into NaN).
 * Heads beyond the rank's count (fewer than 64 heads) are computed on neighbouring rows of Q or on TMA's
 * zeros and never written. */
#include <cuda.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
extern "C" {
#include "core/status.h"
}
#include "backend/cuda/cuda_util.h"
#include "backend/cuda/kernels/gemm_wgmma_common.cuh"
#include "backend/cuda/kernels/mla_attn_common.cuh"
#include "backend/cuda/kernels/mla_attn_tma.cuh"
#include "backend/cuda/gemm.h"

namespace {

constexpr int STAGES = 3;
constexpr int XCH = 16 * 128;                  /* one warpgroup's S fragment (16 floats x 128 threads) */
constexpr int CONSUMERS = 256;                 /* two warpgroups */
constexpr int THREADS = CONSUMERS;
constexpr size_t SMEM = (size_t)Q_BYTES + (size_t)STAGES * STAGE_BYTES + (size_t)2 * 2 * XCH * 4 +
                        (2 * STAGES + 1) * 8 + 1024; /* + barriers, + the 1 KB alignment slack */
static_assert(BN == 32, "version 3 is written for 32-position tiles (four 8-column S chunks per warpgroup)");

/* grid (head groups of 64, splits, m), THREADS threads, SMEM bytes of dynamic shared memory.
 * tq: qabs as [m * heads rows, 576] (box 64 x 64); tkv: the cache as [576, 64, pages] (paged) or
 * [576, max_ctx, m] (contiguous), box 64 x 32 x 1. */
__global__ void __launch_bounds__(THREADS, 1)
    mla_attn3_kernel(const __grid_constant__ CUtensorMap tq, const __grid_constant__ CUtensorMap tkv, Kp k) {
  extern __shared__ unsigned char smem3_raw[];
  unsigned char *sm = smem_align_1k(smem3_raw);
  unsigned char *sQ = sm, *sKV = sm + Q_BYTES;
  float *sX = (float *)(sKV + STAGES * STAGE_BYTES); /* [tile parity][warpgroup][16][128] */
  uint64_t *full = (uint64_t *)(sX + 4 * XCH), *empty = full + STAGES, *qbar = empty + STAGES;

  const int h0 = blockIdx.x * HT, split = blockIdx.y, i = blockIdx.z;
  const int tid = threadIdx.x;
  if (tid == 0) {
    for (int s = 0; s < STAGES; s++) {
      mbar_init(&full[s], 1);
      mbar_init(&empty[s], CONSUMERS / 32);
    }
    mbar_init(qbar, 1);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  }
  __syncthreads();
  AttnSlice sl;
  if (!attn_slice<HT, THREADS>(k, i, split, h0, tid, blockIdx.x == 0 && blockIdx.y == 0 && i == 0, &sl)) return;

  /* thread 0 issues every copy: Q, then tile t into stage t % STAGES once that stage is free. Tiles are
   * loaded in order; the page of the next one is read from the block table one load ahead (znext), so
   * that the table's global-memory latency never stalls the warp that issues the copies. */
  auto page_of = [&](int t) { return sl.table ? sl.table[(sl.start + t * BN) / PZ_KV_BLOCK] : sl.seq; };
  int znext = tid == 0 ? page_of(0) : 0;
  auto load_tile = [&](int t) {
    const int st = t % STAGES;
    if (t >= STAGES) mbar_wait(&empty[st], (uint32_t)((t / STAGES - 1) & 1));
    mbar_expect_tx(&full[st], STAGE_BYTES);
    const int p0 = sl.start + t * BN;
    const int row = sl.table ? p0 % PZ_KV_BLOCK : p0;
    const int z = znext;
    if (t + 1 < sl.ntiles) znext = page_of(t + 1);
    unsigned char *dst = sKV + st * STAGE_BYTES;
    for (int kb = 0; kb < KB; kb++) tma_load_3d(dst + kb * TILE_BYTES, &tkv, &full[st], kb * 64, row, z);
  };
  if (tid == 0) {
    mbar_expect_tx(qbar, Q_BYTES);
    for (int kb = 0; kb < KB; kb++) tma_load_2d(sQ + kb * HT * 128, &tq, qbar, kb * 64, sl.seq * k.heads + h0);
    for (int t = 0; t < STAGES && t < sl.ntiles; t++) load_tile(t);
  }

  /* consumers: warpgroup wg (broadcast from lane 0, so that the compiler knows it is warp-uniform and
   * keeps the descriptors in uniform registers), warp w of it; this thread's S / O rows r0, r1 */
  const int wg = __shfl_sync(0xffffffffu, tid >> 7, 0), wt = tid & 127, w = wt >> 5, lane = tid & 31, q4 = lane & 3;
  const int r0 = w * 16 + (lane >> 2), r1 = r0 + 8;
  float o[128];
#pragma unroll
  for (int j = 0; j < 128; j++) o[j] = 0.0f;
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.0f, 0.0f};
  const float scale = k.softmax_scale;
  /* descriptor bases: Q, and k16 step 2 wg of block 0 (descriptor addresses are in 16-byte units) */
  const uint64_t dq0 = make_desc(sQ) + 4 * wg, dk0 = make_desc(sKV) + 4 * wg;
  const uint64_t dv0 = make_desc_mn(sKV + wg * 4 * TILE_BYTES);
  mbar_wait(qbar, 0);
  __syncwarp();

  for (int t = 0; t < sl.ntiles; t++) {
    const int st = t % STAGES;
    unsigned char *stage = sKV + st * STAGE_BYTES;
    mbar_wait(&full[st], (uint32_t)((t / STAGES) & 1));
    __syncwarp(); /* the wgmmas below are .aligned: the warp converged */
    /* partial S over this warpgroup's 18 k16 steps */
    float sacc[16];
#pragma unroll
    for (int e = 0; e < 16; e++) sacc[e] = 0.0f;
    wgmma_fence();
    const uint64_t dk = dk0 + (uint64_t)(st * STAGE_BYTES >> 4);
#pragma unroll
    for (int kb = 0; kb < KB; kb++)
#pragma unroll
      for (int kk = 0; kk < 2; kk++)
        Wgmma<32>::mma(sacc, dq0 + (kb * HT * 128 >> 4) + 2 * kk, dk + (kb * TILE_BYTES >> 4) + 2 * kk, 1);
    wgmma_commit();
    wgmma_wait<0>();
    /* exchange the partials: S = S_0 + S_1 in both warpgroups */
    float *xb = sX + (t & 1) * 2 * XCH;
    /* as float4 [4][128 threads]: 4 vector stores and loads per thread, whole 512-byte warp rows */
    float4 *xm = (float4 *)(xb + wg * XCH) + wt;
#pragma unroll
    for (int q = 0; q < 4; q++) xm[q * 128] = make_float4(sacc[4 * q], sacc[4 * q + 1], sacc[4 * q + 2], sacc[4 * q + 3]);
    bar_sync(1, CONSUMERS);
    const float4 *xo = (const float4 *)(xb + (1 - wg) * XCH) + wt;
    float other[16];
#pragma unroll
    for (int q = 0; q < 4; q++) {
      const float4 v = xo[q * 128];
      other[4 * q] = v.x; other[4 * q + 1] = v.y; other[4 * q + 2] = v.z; other[4 * q + 3] = v.w;
    }
    /* element e = 4c + 2i + j: row i ? r1 : r0, position p0 + 8c + 2 q4 + j (wgmma D fragment) */
    const int p0 = sl.start + t * BN;
    float s[16], mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int e = 0; e < 16; e++) {
      const int pos = p0 + 8 * (e >> 2) + 2 * q4 + (e & 1);
      const float v = sacc[e] + other[e];
      s[e] = pos < sl.end ? v * scale : -INFINITY;
      mx[(e >> 1) & 1] = fmaxf(mx[(e >> 1) & 1], s[e]);
    }
    float al[2], sum[2] = {0.0f, 0.0f};
#pragma unroll
    for (int r = 0; r < 2; r++) {
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
      const float mn = fmaxf(m_run[r], mx[r]); /* the first position of every tile is valid: finite */
      al[r] = expf(m_run[r] - mn);
      m_run[r] = mn;
    }
#pragma unroll
    for (int e = 0; e < 16; e++) {
      s[e] = expf(s[e] - m_run[(e >> 1) & 1]);
      sum[(e >> 1) & 1] += s[e];
    }
#pragma unroll
    for (int r = 0; r < 2; r++) {
      sum[r] += __shfl_xor_sync(0xffffffffu, sum[r], 1);
      sum[r] += __shfl_xor_sync(0xffffffffu, sum[r], 2);
      l_run[r] = l_run[r] * al[r] + sum[r];
    }
    /* a partial last tile: zero this warpgroup's V rows past the end (they may hold anything) */
    const int nv = sl.end - p0;
    if (nv < BN) {
      for (int e = wt; e < (BN - nv) * 32; e += 128) {
        const int r = nv + e / 32, kb = wg * 4 + (e % 32) / 8, c = e % 8;
        *(uint4 *)(stage + kb * TILE_BYTES + r * 128 + c * 16) = make_uint4(0, 0, 0, 0);
      }
      asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
      bar_sync(2 + wg, 128);
    }
    /* P as the A fragments of two k16 steps (the accumulator layout of 16 columns is the A layout) */
    uint32_t a[2][4];
#pragma unroll
    for (int kc = 0; kc < 2; kc++) {
      a[kc][0] = pack_bf2(s[8 * kc + 0], s[8 * kc + 1]);
      a[kc][1] = pack_bf2(s[8 * kc + 2], s[8 * kc + 3]);
      a[kc][2] = pack_bf2(s[8 * kc + 4], s[8 * kc + 5]);
      a[kc][3] = pack_bf2(s[8 * kc + 6], s[8 * kc + 7]);
    }
    /* rescale O only when a row's max moved (x * 1 is x: skipping is exact) */
    if (__any_sync(0xffffffffu, al[0] != 1.0f || al[1] != 1.0f)) {
#pragma unroll
      for (int j = 0; j < 128; j++) o[j] *= al[(j >> 1) & 1];
    }
    wgmma_fence();
    const uint64_t dv = dv0 + (uint64_t)(st * STAGE_BYTES >> 4);
#pragma unroll
    for (int kc = 0; kc < 2; kc++) WgmmaRegA<256>::mma(o, a[kc], dv + (kc * 16 * 128 >> 4), 1);
    wgmma_commit();
    /* both warpgroups are past P(t - 1) · V(t - 1) (the exchange barrier): thread 0 refills that stage
     * with tile t + 2 while P(t) · V(t) runs (never waits; its warp has issued its share of the wgmmas) */
    if (tid == 0 && t >= 1 && t - 1 + STAGES < sl.ntiles) load_tile(t - 1 + STAGES);
    wgmma_wait<0>();
    if (lane == 0) mbar_arrive(&empty[st]);
  }

  /* the slice's unnormalised output and (max, sum) per head, as versions 1 and 2 write them */
  const int64_t base = ((int64_t)i * k.splits + split) * k.heads;
  const int ha = h0 + r0, hb = h0 + r1;
#pragma unroll
  for (int c = 0; c < 64; c++) {
    const int col = wg * 256 + 8 * c + 2 * q4;
    if (ha < k.heads) *(float2 *)(k.opart + (base + ha) * LV + col) = make_float2(o[4 * c], o[4 * c + 1]);
    if (hb < k.heads) *(float2 *)(k.opart + (base + hb) * LV + col) = make_float2(o[4 * c + 2], o[4 * c + 3]);
  }
  if (wg == 0 && q4 == 0) {
    if (ha < k.heads) { sl.ml[ha * 2] = m_run[0]; sl.ml[ha * 2 + 1] = l_run[0]; }
    if (hb < k.heads) { sl.ml[hb * 2] = m_run[1]; sl.ml[hb * 2 + 1] = l_run[1]; }
  }
}

} // namespace

extern "C" pz_status pz_mla_k_attn3_setup(int L, int kvw, int *ctas_per_sm) {
  if (L != LV || kvw != KB * 64)
    return pz_error(PZ_ERR_UNSUPPORTED, "mla cuda: attention v3 needs kv_lora_rank 512 and qk_rope_head_dim 64 (got %d, %d)",
                    L, kvw - L);
  int dev = 0, major = 0;
  PZ_CUDA_CHECK(cudaGetDevice(&dev));
  PZ_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  if (major != 9) return pz_error(PZ_ERR_UNSUPPORTED, "mla cuda: attention v3 is an sm_90a kernel (device is sm_%d0)", major);
  PZ_CHECK(pz_gemm_wgmma_init()); /* the tensor-map encoder */
  PZ_CUDA_CHECK(cudaFuncSetAttribute(mla_attn3_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)SMEM));
  int n = 0;
  PZ_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, mla_attn3_kernel, THREADS, SMEM));
  if (n < 1) return pz_error(PZ_ERR_UNSUPPORTED, "mla cuda: attention v3 (%zu B smem) does not fit an SM", SMEM);
  if (ctas_per_sm) *ctas_per_sm = n;
  return PZ_OK;
}

extern "C" pz_status pz_mla_k_attn3(const Kp *k, cudaStream_t s) {
  CUtensorMap tq, tkv;
  PZ_CHECK(mla_tma_maps(k, &tq, &tkv));
  const dim3 grid((unsigned)((k->heads + HT - 1) / HT), (unsigned)k->splits, (unsigned)k->m);
  mla_attn3_kernel<<<grid, THREADS, SMEM, s>>>(tq, tkv, *k);
  PZ_CUDA_CHECK(cudaGetLastError());
  return PZ_OK;
}
