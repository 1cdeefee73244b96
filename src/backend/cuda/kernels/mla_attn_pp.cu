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

/* Shared-memory accesses by 32-bit shared address (st.shared / ld.shared: no generic-address
 * translation), and 2^x by the special function unit (PTX ISA ex2.approx.ftz: an approximation, results
 * below 2^-126 flushed to zero, 2^-inf = +0; P is rounded to bf16 right after it). */
__device__ __forceinline__ void sts_u32(uint32_t a, uint32_t v) {
  asm volatile("st.shared.u32 [%0], %1;" ::"r"(a), "r"(v) : "memory");
}
__device__ __forceinline__ void sts_f32(uint32_t a, float v) {
  asm volatile("st.shared.f32 [%0], %1;" ::"r"(a), "f"(v) : "memory");
}
__device__ __forceinline__ float lds_f32(uint32_t a) {
  float v;
  asm volatile("ld.shared.f32 %0, [%1];" : "=f"(v) : "r"(a) : "memory");
  return v;
}
__device__ __forceinline__ float ex2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

template <int V> struct IntC { static constexpr int value = V; };
/* base-2 scores: the scale's factor in, the max's factor out */
constexpr float kLog2e = 1.4426950408889634f, kLn2 = 0.6931471805599453f;

/* What both warpgroups share: the slice, its tile count, and the shared-memory regions. */
struct PPCta {
  const CUtensorMap *tkv;
  AttnSlice sl;
  int nt;  /* tiles of the slice (broadcast from lane 0) */
  int len; /* positions of the slice, end - start (broadcast from lane 0) */
  unsigned char *sQ, *sKV;
  float *sML;
  uint64_t *full, *empty, *pass;
};

__device__ __forceinline__ int pp_page_of(const AttnSlice &sl, int t) {
  return sl.table ? sl.table[(sl.start + t * BN) / PZ_KV_BLOCK] : sl.seq;
}
/* tile t into stage t % PP_STAGES once every warp has released it (one thread) */
__device__ __forceinline__ void pp_load_tile(const PPCta &c, int t, int z) {
  const int st = t % PP_STAGES;
  if (t >= PP_STAGES) mbar_wait(&c.empty[st], (uint32_t)((t / PP_STAGES - 1) & 1));
  mbar_expect_tx(&c.full[st], STAGE_BYTES);
  const int p0 = c.sl.start + t * BN;
  const int row = c.sl.table ? p0 % PZ_KV_BLOCK : p0;
  unsigned char *dst = c.sKV + st * STAGE_BYTES;
  for (int kb = 0; kb < KB; kb++) tma_load_3d(dst + kb * TILE_BYTES, c.tkv, &c.full[st], kb * 64, row, z);
}

/* The consumer side of warpgroup WG (0 or 1, warp-uniform), then the slice's output. The scores are kept
 * in base-2 units (the softmax scale times log2 e folded into S's scaling, 2^x by ex2.approx); the (max,
 * sum) written for the combine are in natural-log units, as versions 1-3 write them. */
__device__ __forceinline__ void pp_consume(const PPCta &c, const Kp &k, int i, int split, int h0, const int WG) {
  const int tid = threadIdx.x, wt = tid & 127, w = wt >> 5, lane = tid & 31, q4 = lane & 3;
  const int r0 = w * 16 + (lane >> 2), r1 = r0 + 8;
  const int nt = c.nt;
  /* thread wt == 0 refills the stages of the other warpgroup's tiles: u = PP_STAGES + 1 - WG, + 2, ..
   * (znext: the page of the next one) */
  int znext = 0;
  if (wt == 0 && PP_STAGES + 1 - WG < nt) znext = pp_page_of(c.sl, PP_STAGES + 1 - WG);
  float o[128];
#pragma unroll
  for (int j = 0; j < 128; j++) o[j] = 0.0f;
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.0f, 0.0f};
  const float scale2 = k.softmax_scale * kLog2e, lazy2 = k.lazy_rescale * kLog2e;
  const uint64_t dq0 = make_desc(c.sQ), dk0 = make_desc(c.sKV);
  const uint64_t dv0 = make_desc_mn(c.sKV + WG * 4 * TILE_BYTES); /* this warpgroup's 256 value columns */
  const uint32_t kv_s = smem_u32(c.sKV), ml_s = smem_u32(c.sML);
  /* this thread's P words in a stage's P block (64-byte swizzle): column unit cc of row r0 at pc[cc],
   * of row r1 = r0 + 8 at pc[cc] + 512 */
  uint32_t pc[4];
#pragma unroll
  for (int cc = 0; cc < 4; cc++) pc[cc] = (r0 >> 3) * 512 + (r0 & 7) * 64 + ((cc ^ ((r0 & 7) >> 1)) << 4) + 4 * q4;

  /* a partial last tile u: zero this warpgroup's V rows past the slice's end (S is done with them) */
  auto zero_tail = [&](int u) {
    const int nv = c.len - u * BN;
    if (nv >= BN) return;
    unsigned char *stg = c.sKV + (u % PP_STAGES) * STAGE_BYTES;
    for (int e = wt; e < (BN - nv) * 32; e += 128) {
      const int r = nv + e / 32, kb = WG * 4 + (e % 32) / 8, cu = e % 8;
      *(uint4 *)(stg + kb * TILE_BYTES + r * 128 + cu * 16) = make_uint4(0, 0, 0, 0);
    }
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    bar_sync(BAR_ZERO + WG, 128);
  };

  /* Iteration j: this warpgroup's own tile t = 2 j + WG (when t < nt) and the other's tile t - 1 (when
   * t >= 1). Tile t's P and (max, sum, factor) are written by its owner and read by the other warpgroup in
   * its next iteration; the slot t % 3 is written again only for tile t + 3, by that reader, after its
   * read. P lives in tile t's stage, which both warpgroups release after their P(t) · V(t). pass[t & 1]
   * completes its phase (t >> 1) & 1 for tile t; the owner arrives on it for tile t + 2 only after the
   * reader of tile t has waited (the reader publishes tile t + 1 after its wait), so no phase is skipped.
   * The loop is unrolled by two iterations, the ring's period: in iteration j of parity PAR (j % 2) the own
   * tile sits in stage 2 PAR + WG and the other's in the stage before it, so every wgmma descriptor is a
   * loop-invariant base plus a constant: ptxas forms S's K base once per block (in ordinary registers, WG
   * being a run-time value) and every descriptor after it with uniform-register adds. With the stage
   * computed from t in the loop it formed each of S's K descriptors in ordinary registers and moved it
   * over, ~8 instructions per wgmma and ~20 % of the kernel's warp stall samples (ncu, round 104). A
   * single loop with only S's block duplicated under a parity branch measured the same at m 4 / 16 and
   * 0.5-1 % slower at m 64 / 128 (round 107). iter returns false when the warpgroup is done. */
  static_assert(PP_STAGES == 4, "the loop below is unrolled by the ring's period of two iterations");
  const int so0 = (WG + PP_STAGES - 1) % PP_STAGES, so1 = (WG + 1) % PP_STAGES; /* the other's stage, per parity */
  auto iter = [&](auto par, int j) -> bool {
    constexpr int PAR = decltype(par)::value;
    const int st = 2 * PAR + WG, so = PAR ? so1 : so0;
    const int t = 2 * j + WG;
    const bool own = t < nt, oth = t >= 1 && t - 1 < nt;
    if (!own && !oth) return false;
    float s[16];
    if (own) {
      mbar_wait(&c.full[st], (uint32_t)((t / PP_STAGES) & 1));
      __syncwarp(); /* the wgmmas below are .aligned: the warp converged */
#pragma unroll
      for (int e = 0; e < 16; e++) s[e] = 0.0f;
      wgmma_fence();
      const uint64_t dk = dk0 + (uint64_t)(st * (STAGE_BYTES >> 4));
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
      mbar_wait(&c.pass[(t - 1) & 1], (uint32_t)(((t - 1) >> 1) & 1));
      const uint32_t ml = ml_s + (uint32_t)(((t - 1) % ML_SLOTS) * ML_FLOATS * 4);
      m_run[0] = lds_f32(ml + 4 * r0); m_run[1] = lds_f32(ml + 4 * r1);
      l_run[0] = lds_f32(ml + 4 * (HT + r0)); l_run[1] = lds_f32(ml + 4 * (HT + r1));
      al_o[0] = lds_f32(ml + 4 * (2 * HT + r0)); al_o[1] = lds_f32(ml + 4 * (2 * HT + r1));
      __syncwarp(); /* orders these reads before the quad lane 0's write of this slot for tile t + 2 */
    }
    uint32_t a[2][4];
    float al[2] = {1.0f, 1.0f};
    if (own) {
      /* element e = 4c + 2i + j: row i ? r1 : r0, position 8c + 2 q4 + j of the tile (wgmma D fragment);
       * only the slice's last tile can hold positions past its end */
      const int nv = c.len - t * BN;
      float mx[2] = {-INFINITY, -INFINITY};
      if (nv < BN) {
#pragma unroll
        for (int e = 0; e < 16; e++) {
          s[e] = 8 * (e >> 2) + 2 * q4 + (e & 1) < nv ? s[e] * scale2 : -INFINITY;
          mx[(e >> 1) & 1] = fmaxf(mx[(e >> 1) & 1], s[e]);
        }
      } else {
#pragma unroll
        for (int e = 0; e < 16; e++) {
          s[e] *= scale2;
          mx[(e >> 1) & 1] = fmaxf(mx[(e >> 1) & 1], s[e]);
        }
      }
      float sum[2] = {0.0f, 0.0f};
#pragma unroll
      for (int r = 0; r < 2; r++) {
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
        /* the first position of every tile is valid: mx finite. Lazy rescale: the running max moves only
           when this tile's exceeds it by more than k.lazy_rescale (natural-log units; so P <=
           e^lazy_rescale, exact either way: O and the sum share the max they use); on the first tile O and
           the sum are 0: no factor */
        if (mx[r] > m_run[r] + lazy2) {
          al[r] = m_run[r] == -INFINITY ? 1.0f : ex2(m_run[r] - mx[r]);
          m_run[r] = mx[r];
        }
      }
#pragma unroll
      for (int e = 0; e < 16; e++) {
        s[e] = ex2(s[e] - m_run[(e >> 1) & 1]);
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
      /* publish: P (word (cc, ii) = columns 8 cc + 2 q4, +1 of row ii ? r1 : r0) into the rope block;
       * (max, sum, factor) of rows r0 / r1 by the quad's lane 0 */
      const uint32_t pt = kv_s + (uint32_t)(st * STAGE_BYTES + P_OFF);
#pragma unroll
      for (int cc = 0; cc < 4; cc++) {
        sts_u32(pt + pc[cc], a[cc >> 1][(cc & 1) * 2]);
        sts_u32(pt + pc[cc] + 512, a[cc >> 1][(cc & 1) * 2 + 1]);
      }
      if (q4 == 0) {
        const uint32_t ml = ml_s + (uint32_t)((t % ML_SLOTS) * ML_FLOATS * 4);
        sts_f32(ml + 4 * r0, m_run[0]); sts_f32(ml + 4 * r1, m_run[1]);
        sts_f32(ml + 4 * (HT + r0), l_run[0]); sts_f32(ml + 4 * (HT + r1), l_run[1]);
        sts_f32(ml + 4 * (2 * HT + r0), al[0]); sts_f32(ml + 4 * (2 * HT + r1), al[1]);
      }
      asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); /* P is read by the other's wgmma */
      mbar_arrive(&c.pass[t & 1]);
    }
    if (oth && t - 1 == nt - 1) zero_tail(t - 1);
    if (own && t == nt - 1) zero_tail(t);
    /* O += the other's tile t - 1, then this tile, in tile order, each after its rescale */
    if (oth && __any_sync(0xffffffffu, al_o[0] != 1.0f || al_o[1] != 1.0f)) {
#pragma unroll
      for (int jj = 0; jj < 128; jj++) o[jj] *= al_o[(jj >> 1) & 1];
    }
    /* each product is waited for before O is touched again: a rescale between two wgmmas in flight on
     * the same accumulators makes ptxas serialize every wgmma of the kernel (C7520). The wait cannot move
     * into the rescale branch: wgmma.wait_group is .aligned over the warpgroup, and that branch is uniform
     * per warp only (round 77 ran it so, about 1 % faster at TP 1; undefined by the PTX rules) */
    if (oth) {
      /* the tile's bytes: already complete (its owner waited; the stage is not refilled before this
       * warpgroup releases it), waited for here so that this thread's view of the copy is its own */
      mbar_wait(&c.full[so], (uint32_t)(((t - 1) / PP_STAGES) & 1));
      wgmma_fence();
      const uint64_t dp = make_desc_p(c.sKV + so * STAGE_BYTES + P_OFF);
      const uint64_t dv = dv0 + (uint64_t)(so * (STAGE_BYTES >> 4));
#pragma unroll
      for (int kc = 0; kc < 2; kc++) WgmmaTransB<256>::mma(o, dp + 2 * kc, dv + (kc * 16 * 128 >> 4), 1);
      wgmma_commit();
      wgmma_wait<0>();
    }
    if (own) {
      if (__any_sync(0xffffffffu, al[0] != 1.0f || al[1] != 1.0f)) {
#pragma unroll
        for (int jj = 0; jj < 128; jj++) o[jj] *= al[(jj >> 1) & 1];
      }
      wgmma_fence();
      const uint64_t dv = dv0 + (uint64_t)(st * (STAGE_BYTES >> 4));
#pragma unroll
      for (int kc = 0; kc < 2; kc++) WgmmaRegA<256>::mma(o, a[kc], dv + (kc * 16 * 128 >> 4), 1);
      wgmma_commit();
      wgmma_wait<0>();
    }
    if (lane == 0) {
      if (oth) mbar_arrive(&c.empty[so]);
      if (own) mbar_arrive(&c.empty[st]);
    }
    /* this warpgroup read tile t - 1 last: refill its stage with tile t - 1 + PP_STAGES */
    if (wt == 0 && oth && t - 1 + PP_STAGES < nt) {
      const int u = t - 1 + PP_STAGES, z = znext;
      if (u + 2 < nt) znext = pp_page_of(c.sl, u + 2);
      pp_load_tile(c, u, z);
    }
    return true;
  };
  for (int j = 0;; j += 2)
    if (!iter(IntC<0>{}, j) || !iter(IntC<1>{}, j + 1)) break;

  /* the slice's unnormalised output and (max, sum) per head, as versions 1-3 write them (the max in
   * natural-log units) */
  const int64_t base = ((int64_t)i * k.splits + split) * k.heads;
  const int ha = h0 + r0, hb = h0 + r1;
#pragma unroll
  for (int cc = 0; cc < 64; cc++) {
    const int col = WG * 256 + 8 * cc + 2 * q4;
    if (ha < k.heads) *(float2 *)(k.opart + (base + ha) * LV + col) = make_float2(o[4 * cc], o[4 * cc + 1]);
    if (hb < k.heads) *(float2 *)(k.opart + (base + hb) * LV + col) = make_float2(o[4 * cc + 2], o[4 * cc + 3]);
  }
  if (WG == 0 && q4 == 0) {
    if (ha < k.heads) { c.sl.ml[ha * 2] = m_run[0] * kLn2; c.sl.ml[ha * 2 + 1] = l_run[0]; }
    if (hb < k.heads) { c.sl.ml[hb * 2] = m_run[1] * kLn2; c.sl.ml[hb * 2 + 1] = l_run[1]; }
  }
}

/* grid (head groups of 64, splits, m), PP_THREADS threads, PP_SMEM bytes of dynamic shared memory;
 * tensor maps as version 3 (mla_tma_maps). */
__global__ void __launch_bounds__(PP_THREADS, 1)
    mla_attn4_kernel(const __grid_constant__ CUtensorMap tq, const __grid_constant__ CUtensorMap tkv, Kp k) {
  extern __shared__ unsigned char smem4_raw[];
  unsigned char *sm = smem_align_1k(smem4_raw);
  PPCta c;
  c.tkv = &tkv;
  c.sQ = sm;
  c.sKV = sm + Q_BYTES;
  c.sML = (float *)(c.sKV + PP_STAGES * STAGE_BYTES); /* [slot][max | sum | factor][64 rows] */
  c.full = (uint64_t *)(c.sML + ML_SLOTS * ML_FLOATS);
  c.empty = c.full + PP_STAGES;
  uint64_t *qbar = c.empty + PP_STAGES;
  c.pass = qbar + 1; /* pass[t & 1]: tile t's P and (max, sum, factor) are published (every thread of
                      * the owner arrives, release; the reader waits, acquire) */

  const int h0 = blockIdx.x * HT, split = blockIdx.y, i = blockIdx.z;
  const int tid = threadIdx.x;
  if (tid == 0) {
    for (int s = 0; s < PP_STAGES; s++) {
      mbar_init(&c.full[s], 1);
      mbar_init(&c.empty[s], PP_THREADS / 32); /* every warp releases every stage once */
    }
    mbar_init(qbar, 1);
    mbar_init(&c.pass[0], 128);
    mbar_init(&c.pass[1], 128);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  }
  __syncthreads();
  if (!attn_slice<HT, PP_THREADS>(k, i, split, h0, tid, blockIdx.x == 0 && blockIdx.y == 0 && i == 0, &c.sl)) return;
  /* the tile count and the slice's length, broadcast so that ptxas sees the branches around the wgmmas
   * as warp-uniform (a value loaded from memory is not, and it would serialize every wgmma: warning
   * C7520) */
  c.nt = __shfl_sync(0xffffffffu, c.sl.ntiles, 0);
  c.len = __shfl_sync(0xffffffffu, c.sl.end - c.sl.start, 0);

  if (tid == 0) {
    mbar_expect_tx(qbar, Q_BYTES);
    for (int kb = 0; kb < KB; kb++) tma_load_2d(c.sQ + kb * HT * 128, &tq, qbar, kb * 64, c.sl.seq * k.heads + h0);
    for (int t = 0; t < PP_STAGES && t < c.nt; t++) pp_load_tile(c, t, pp_page_of(c.sl, t));
  }
  mbar_wait(qbar, 0);
  __syncwarp();
  /* the warpgroup index, broadcast from lane 0 (warp-uniform) */
  pp_consume(c, k, i, split, h0, __shfl_sync(0xffffffffu, tid >> 7, 0));
}

} // namespace

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
