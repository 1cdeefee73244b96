/* MLA decode attention, version 4 (sm_90a): TMA + wgmma with ping-pong warpgroups, for kv_lora_rank 512
 * and qk_rope_head_dim 64. Same inputs, schedule (core/kv_sched.h) and outputs as version 3
 * (mla_attn_wgmma.cu): one CTA per work slot, 64 heads as the wgmma M side, the slice's unnormalised
 * output and (max, sum) per head for the combine kernel.
 *
 * What differs from version 3 (which splits every tile's S = Q·Kᵀ along the 576 columns over both
 * warpgroups, exchanges fp32 partial scores through shared memory and then runs the same softmax in
 * both): here the two consumer warpgroups take alternate 32-position tiles, as FlashMLA published for
 * Hopper (the structure is theirs, the code ours):
 *   - warpgroup g owns the tiles t = g, g + 2, ..: it computes their whole S (36 wgmma m64n32k16, Q and K
 *     from shared memory), waits for the other warpgroup's running (max, sum) after tile t - 1, runs the
 *     online softmax of tile t, and publishes P(t) (bf16, into the tile's rope block, which S no longer
 *     needs: 64 rows x 64 bytes, 64-byte swizzle, a K-major wgmma A operand) with (max, sum, rescale
 *     factor) per head (a 3-slot ring in shared memory), through an mbarrier per tile parity;
 *   - each warpgroup keeps half of O (256 value columns, 128 fp32 registers per thread) and accumulates
 *     every tile into it in order: the other warpgroup's tile t - 1 (P from shared memory, wgmma with A
 *     and B from descriptors), then its own tile t (P from registers), each after rescaling O by the
 *     tile's factor when a row's max moved (x * 1 is x: skipping is exact);
 *   - so one warpgroup's softmax and barrier waits overlap the other's tensor work, no fp32 scores cross
 *     shared memory, and Q is read once per tile instead of split across both warpgroups.
 * The ring has 4 stages of 32 positions (Q 72 KB + 144 KB): both warpgroups hold a tile each and two more
 * are in flight. Each stage is refilled by a thread of the warpgroup that reads it last (the one that does
 * not own its tile: it reads it in its next turn), so the refill seldom waits; the block table is read one
 * refill ahead by that thread. Rows past the slice's end are masked in S and zeroed in each warpgroup's
 * V half before its P · V (garbage there could turn 0 · V into NaN).
 * PREZERO_MLA_ATTN=4 selects it; it needs what version 3 needs (mla.c falls back to version 3). */
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

constexpr int PP_STAGES = 4;
constexpr int ML_SLOTS = 3;                  /* (max, sum, factor) of tiles t % 3: see the loop's note */
constexpr int PP_THREADS = 256;              /* two consumer warpgroups, no producer warp */
constexpr int P_OFF = 8 * TILE_BYTES;        /* the rope block of a stage: P of its tile once S is done */
constexpr int ML_FLOATS = 3 * HT;            /* one slot: max [64], sum [64], factor [64] */
constexpr size_t PP_SMEM = (size_t)Q_BYTES + (size_t)PP_STAGES * STAGE_BYTES + (size_t)ML_SLOTS * ML_FLOATS * 4 +
                           (2 * PP_STAGES + 3) * 8 + 1024; /* + barriers, + the 1 KB alignment slack */
static_assert(BN == 32, "version 4 is written for 32-position tiles");
static_assert(PP_SMEM <= 227 * 1024, "version 4's ring exceeds the shared memory of a CTA");
/* named barriers 2 + g: the per-warpgroup tail zeroing */
constexpr int BAR_ZERO = 2;

/* Descriptor of P [64 rows][32 bf16] as a K-major A operand: rows of 64 bytes, 64-byte swizzle (16-byte
 * unit c of row r at unit c ^ ((r & 7) >> 1)), stride byte offset 512 between 8-row groups, leading byte
 * offset unused (PTX ISA, "Matrix Descriptor Format": swizzle mode 2 = 64B in bits 62-63). */
__device__ __forceinline__ uint64_t make_desc_p(const void *p) {
  const uint32_t a = smem_u32(p);
  return (uint64_t)((a & 0x3FFFF) >> 4) | ((uint64_t)1 << 16) | ((uint64_t)(512 >> 4) << 32) | ((uint64_t)2 << 62);
}

/* grid (head groups of 64, splits, m), PP_THREADS threads, PP_SMEM bytes of dynamic shared memory;
 * tensor maps as version 3 (mla_tma_maps). */
__global__ void __launch_bounds__(PP_THREADS, 1)
    mla_attn4_kernel(const __grid_constant__ CUtensorMap tq, const __grid_constant__ CUtensorMap tkv, Kp k) {
  extern __shared__ unsigned char smem4_raw[];
  unsigned char *sm = smem_align_1k(smem4_raw);
  unsigned char *sQ = sm, *sKV = sm + Q_BYTES;
  float *sML = (float *)(sKV + PP_STAGES * STAGE_BYTES); /* [slot][max | sum | factor][64 rows] */
  uint64_t *full = (uint64_t *)(sML + ML_SLOTS * ML_FLOATS), *empty = full + PP_STAGES, *qbar = empty + PP_STAGES;
  uint64_t *pass = qbar + 1; /* pass[t & 1]: tile t's P and (max, sum, factor) are published (every thread of
                              * the owner arrives, release; the reader waits, acquire) */

  const int h0 = blockIdx.x * HT, split = blockIdx.y, i = blockIdx.z;
  const int tid = threadIdx.x;
  if (tid == 0) {
    for (int s = 0; s < PP_STAGES; s++) {
      mbar_init(&full[s], 1);
      mbar_init(&empty[s], PP_THREADS / 32); /* every warp releases every stage once */
    }
    mbar_init(qbar, 1);
    mbar_init(&pass[0], 128);
    mbar_init(&pass[1], 128);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  }
  __syncthreads();
  AttnSlice sl;
  if (!attn_slice<HT, PP_THREADS>(k, i, split, h0, tid, blockIdx.x == 0 && blockIdx.y == 0 && i == 0, &sl)) return;
  /* the tile count, broadcast so that ptxas sees the branches around the wgmmas as warp-uniform (a
   * value loaded from memory is not, and it would serialize every wgmma: warning C7520) */
  const int nt = __shfl_sync(0xffffffffu, sl.ntiles, 0);

  auto page_of = [&](int t) { return sl.table ? sl.table[(sl.start + t * BN) / PZ_KV_BLOCK] : sl.seq; };
  auto load_tile = [&](int t, int z) { /* tile t into stage t % PP_STAGES once every warp has released it */
    const int st = t % PP_STAGES;
    if (t >= PP_STAGES) mbar_wait(&empty[st], (uint32_t)((t / PP_STAGES - 1) & 1));
    mbar_expect_tx(&full[st], STAGE_BYTES);
    const int p0 = sl.start + t * BN;
    const int row = sl.table ? p0 % PZ_KV_BLOCK : p0;
    unsigned char *dst = sKV + st * STAGE_BYTES;
    for (int kb = 0; kb < KB; kb++) tma_load_3d(dst + kb * TILE_BYTES, &tkv, &full[st], kb * 64, row, z);
  };
  if (tid == 0) {
    mbar_expect_tx(qbar, Q_BYTES);
    for (int kb = 0; kb < KB; kb++) tma_load_2d(sQ + kb * HT * 128, &tq, qbar, kb * 64, sl.seq * k.heads + h0);
    for (int t = 0; t < PP_STAGES && t < nt; t++) load_tile(t, page_of(t));
  }

  /* warpgroup wg (broadcast from lane 0: warp-uniform, descriptors in uniform registers), warp w of it;
   * this thread's S / O rows r0, r1. Thread wt == 0 of warpgroup g refills the stages of the other
   * warpgroup's tiles: tiles u = PP_STAGES + 1 - g, + 2, .. (znext: the page of the next one). */
  const int wg = __shfl_sync(0xffffffffu, tid >> 7, 0), wt = tid & 127, w = wt >> 5, lane = tid & 31, q4 = lane & 3;
  const int r0 = w * 16 + (lane >> 2), r1 = r0 + 8;
  int znext = 0;
  if (wt == 0 && PP_STAGES + 1 - wg < nt) znext = page_of(PP_STAGES + 1 - wg);
  float o[128];
#pragma unroll
  for (int j = 0; j < 128; j++) o[j] = 0.0f;
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.0f, 0.0f};
  const float scale = k.softmax_scale;
  const uint64_t dq0 = make_desc(sQ), dk0 = make_desc(sKV);
  const uint64_t dv0 = make_desc_mn(sKV + wg * 4 * TILE_BYTES); /* this warpgroup's 256 value columns */
  mbar_wait(qbar, 0);
  __syncwarp();

  /* a partial last tile u: zero this warpgroup's V rows past the slice's end (S is done with them) */
  auto zero_tail = [&](int u) {
    const int nv = sl.end - (sl.start + u * BN);
    if (nv >= BN) return;
    unsigned char *stg = sKV + (u % PP_STAGES) * STAGE_BYTES;
    for (int e = wt; e < (BN - nv) * 32; e += 128) {
      const int r = nv + e / 32, kb = wg * 4 + (e % 32) / 8, c = e % 8;
      *(uint4 *)(stg + kb * TILE_BYTES + r * 128 + c * 16) = make_uint4(0, 0, 0, 0);
    }
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    bar_sync(BAR_ZERO + wg, 128);
  };

  /* Iteration t of warpgroup wg: its own tile t (when t < nt) and the other's tile t - 1 (when t >= 1).
   * Tile t's P and (max, sum, factor) are written by its owner and read by the other warpgroup in its next
   * iteration; the slot t % 3 is written again only for tile t + 3, by that reader, after its read. P lives
   * in tile t's stage, which both warpgroups release after their P(t) · V(t). pass[t & 1] completes its
   * phase (t >> 1) & 1 for tile t; the owner arrives on it for tile t + 2 only after the reader of tile t
   * has waited (the reader publishes tile t + 1 after its wait), so no phase is skipped. */
  for (int t = wg;; t += 2) {
    const bool own = t < nt, oth = t >= 1 && t - 1 < nt;
    if (!own && !oth) break;
    const int st = t % PP_STAGES, so = (t + PP_STAGES - 1) % PP_STAGES;
    float s[16];
    if (own) {
      mbar_wait(&full[st], (uint32_t)((t / PP_STAGES) & 1));
      __syncwarp(); /* the wgmmas below are .aligned: the warp converged */
#pragma unroll
      for (int e = 0; e < 16; e++) s[e] = 0.0f;
      wgmma_fence();
      const uint64_t dk = dk0 + (uint64_t)(st * STAGE_BYTES >> 4);
#pragma unroll
      for (int kb = 0; kb < KB; kb++)
#pragma unroll
        for (int kk = 0; kk < 4; kk++)
          Wgmma<32>::mma(s, dq0 + (kb * HT * 128 >> 4) + 2 * kk, dk + (kb * TILE_BYTES >> 4) + 2 * kk, 1);
      wgmma_commit();
      wgmma_wait<0>();
    }
    /* the running (max, sum) after tile t - 1 and its factor, from the other warpgroup */
    float al_o[2] = {1.0f, 1.0f};
    if (oth) {
      mbar_wait(&pass[(t - 1) & 1], (uint32_t)(((t - 1) >> 1) & 1));
      const float *ml = sML + ((t - 1) % ML_SLOTS) * ML_FLOATS;
      m_run[0] = ml[r0]; m_run[1] = ml[r1];
      l_run[0] = ml[HT + r0]; l_run[1] = ml[HT + r1];
      al_o[0] = ml[2 * HT + r0]; al_o[1] = ml[2 * HT + r1];
      __syncwarp(); /* orders these reads before the quad lane 0's write of this slot for tile t + 2 */
    }
    uint32_t a[2][4];
    float al[2] = {1.0f, 1.0f};
    if (own) {
      /* element e = 4c + 2i + j: row i ? r1 : r0, position p0 + 8c + 2 q4 + j (wgmma D fragment) */
      const int p0 = sl.start + t * BN;
      float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
      for (int e = 0; e < 16; e++) {
        const int pos = p0 + 8 * (e >> 2) + 2 * q4 + (e & 1);
        s[e] = pos < sl.end ? s[e] * scale : -INFINITY;
        mx[(e >> 1) & 1] = fmaxf(mx[(e >> 1) & 1], s[e]);
      }
      float sum[2] = {0.0f, 0.0f};
#pragma unroll
      for (int r = 0; r < 2; r++) {
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
        /* the first position of every tile is valid: mx finite. Lazy rescale: the running max moves only
           when this tile's exceeds it by more than k.lazy_rescale (so P <= e^lazy_rescale, exact either
           way: O and the sum share the max they use); on the first tile O and the sum are 0: no factor */
        if (mx[r] > m_run[r] + k.lazy_rescale) {
          al[r] = m_run[r] == -INFINITY ? 1.0f : expf(m_run[r] - mx[r]);
          m_run[r] = mx[r];
        }
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
      /* P as the A fragments of two k16 steps (the accumulator layout of 16 columns is the A layout) */
#pragma unroll
      for (int kc = 0; kc < 2; kc++) {
        a[kc][0] = pack_bf2(s[8 * kc + 0], s[8 * kc + 1]);
        a[kc][1] = pack_bf2(s[8 * kc + 2], s[8 * kc + 3]);
        a[kc][2] = pack_bf2(s[8 * kc + 4], s[8 * kc + 5]);
        a[kc][3] = pack_bf2(s[8 * kc + 6], s[8 * kc + 7]);
      }
      /* publish: P (word (c, i) = columns 8c + 2 q4, +1 of row i ? r1 : r0) into the rope block, 64-byte
       * swizzle; (max, sum, factor) of rows r0 / r1 by the quad's lane 0 */
      unsigned char *pt = sKV + st * STAGE_BYTES + P_OFF;
#pragma unroll
      for (int c = 0; c < 4; c++)
#pragma unroll
        for (int ii = 0; ii < 2; ii++) {
          const int r = ii ? r1 : r0;
          *(uint32_t *)(pt + (r >> 3) * 512 + (r & 7) * 64 + ((c ^ ((r & 7) >> 1)) << 4) + 4 * q4) =
              a[c >> 1][(c & 1) * 2 + ii];
        }
      if (q4 == 0) {
        float *ml = sML + (t % ML_SLOTS) * ML_FLOATS;
        ml[r0] = m_run[0]; ml[r1] = m_run[1];
        ml[HT + r0] = l_run[0]; ml[HT + r1] = l_run[1];
        ml[2 * HT + r0] = al[0]; ml[2 * HT + r1] = al[1];
      }
      asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); /* P is read by the other's wgmma */
      mbar_arrive(&pass[t & 1]);
    }
    if (oth && t - 1 == nt - 1) zero_tail(t - 1);
    if (own && t == nt - 1) zero_tail(t);
    /* O += the other's tile t - 1, then this tile, in tile order, each after its rescale */
    if (oth && __any_sync(0xffffffffu, al_o[0] != 1.0f || al_o[1] != 1.0f)) {
#pragma unroll
      for (int j = 0; j < 128; j++) o[j] *= al_o[(j >> 1) & 1];
    }
    /* each product is waited for before O is touched again: a rescale between two wgmmas in flight on
     * the same accumulators makes ptxas serialize every wgmma of the kernel (C7520). The wait cannot move
     * into the rescale branch: wgmma.wait_group is .aligned over the warpgroup, and that branch is uniform
     * per warp only (round 77 ran it so, about 1 % faster at TP 1; undefined by the PTX rules) */
    if (oth) {
      /* the tile's bytes: already complete (its owner waited; the stage is not refilled before this
       * warpgroup releases it), waited for here so that this thread's view of the copy is its own */
      mbar_wait(&full[so], (uint32_t)(((t - 1) / PP_STAGES) & 1));
      wgmma_fence();
      const uint64_t dp = make_desc_p(sKV + so * STAGE_BYTES + P_OFF);
      const uint64_t dv = dv0 + (uint64_t)(so * STAGE_BYTES >> 4);
#pragma unroll
      for (int kc = 0; kc < 2; kc++) WgmmaTransB<256>::mma(o, dp + 2 * kc, dv + (kc * 16 * 128 >> 4), 1);
      wgmma_commit();
      wgmma_wait<0>();
    }
    if (own) {
      if (__any_sync(0xffffffffu, al[0] != 1.0f || al[1] != 1.0f)) {
#pragma unroll
        for (int j = 0; j < 128; j++) o[j] *= al[(j >> 1) & 1];
      }
      wgmma_fence();
      const uint64_t dv = dv0 + (uint64_t)(st * STAGE_BYTES >> 4);
#pragma unroll
      for (int kc = 0; kc < 2; kc++) WgmmaRegA<256>::mma(o, a[kc], dv + (kc * 16 * 128 >> 4), 1);
      wgmma_commit();
      wgmma_wait<0>();
    }
    if (lane == 0) {
      if (oth) mbar_arrive(&empty[so]);
      if (own) mbar_arrive(&empty[st]);
    }
    /* this warpgroup read tile t - 1 last: refill its stage with tile t - 1 + PP_STAGES */
    if (wt == 0 && oth && t - 1 + PP_STAGES < nt) {
      const int u = t - 1 + PP_STAGES, z = znext;
      if (u + 2 < nt) znext = page_of(u + 2);
      load_tile(u, z);
    }
  }

  /* the slice's unnormalised output and (max, sum) per head, as versions 1-3 write them */
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

extern "C" size_t pz_mla_k_attn4_smem(void) { return PP_SMEM; }

extern "C" pz_status pz_mla_k_attn4_setup(int L, int kvw, int *ctas_per_sm) {
  if (L != LV || kvw != KB * 64)
    return pz_error(PZ_ERR_UNSUPPORTED, "mla cuda: attention v4 needs kv_lora_rank 512 and qk_rope_head_dim 64 (got %d, %d)",
                    L, kvw - L);
  int dev = 0, major = 0;
  PZ_CUDA_CHECK(cudaGetDevice(&dev));
  PZ_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  if (major != 9) return pz_error(PZ_ERR_UNSUPPORTED, "mla cuda: attention v4 is an sm_90a kernel (device is sm_%d0)", major);
  PZ_CHECK(pz_gemm_wgmma_init()); /* the tensor-map encoder */
  PZ_CUDA_CHECK(cudaFuncSetAttribute(mla_attn4_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)PP_SMEM));
  int n = 0;
  PZ_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, mla_attn4_kernel, PP_THREADS, PP_SMEM));
  if (n < 1) return pz_error(PZ_ERR_UNSUPPORTED, "mla cuda: attention v4 (%zu B smem) does not fit an SM", PP_SMEM);
  if (ctas_per_sm) *ctas_per_sm = n;
  return PZ_OK;
}

extern "C" pz_status pz_mla_k_attn4(const Kp *k, cudaStream_t s) {
  CUtensorMap tq, tkv;
  PZ_CHECK(mla_tma_maps(k, &tq, &tkv));
  const dim3 grid((unsigned)((k->heads + HT - 1) / HT), (unsigned)k->splits, (unsigned)k->m);
  mla_attn4_kernel<<<grid, PP_THREADS, PP_SMEM, s>>>(tq, tkv, *k);
  PZ_CUDA_CHECK(cudaGetLastError());
  return PZ_OK;
}
