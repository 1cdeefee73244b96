/* CUDA kernels of the MLA decode op (absorbed form, sm_90a): the prologue (q_a / kv_a layernorms,
 * YaRN RoPE of k_pe, cache append), W_UK absorption with RoPE of q_pe, flash-decoding attention
 * split along the KV sequence (mma.sync bf16, cp.async pipeline), the split combine, and W_UV.
 * The cache is contiguous per sequence or paged (core/kv_pages.h): the append and the KV loads
 * go through the block table. */
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include "backend/cuda/kernels/pdl.cuh"
extern "C" { /* core/status.h has no C++ guards of its own */
#include "core/status.h"
}
#include "backend/cuda/cuda_util.h"
#include "backend/cuda/mla_kernels.h"
#include "core/kv_pages.h"
#include "core/kv_sched.h"

/* Algorithm: flash-decoding (Dao et al., "Flash-Decoding for long-context inference", 2023):
 * each CTA runs online softmax over one slice of the sequence and stores its unnormalised
 * output with (max, sum); a second kernel merges the slices. MLA's absorbed form (DeepSeek-V2
 * paper, §2.1.2; FlashMLA) uses the compressed cache row [c | k_pe] as the key and its first
 * kv_lora columns as the value, so one tile of the cache feeds both products. The code is ours. */

#include "backend/cuda/kernels/mla_attn_common.cuh"
#include "backend/cuda/kernels/mla_rope.cuh"
#include "backend/cuda/kernels/mma_sync_ops.cuh"

namespace {

__device__ __forceinline__ float bf2f(uint16_t h) { return __uint_as_float((uint32_t)h << 16); }
__device__ __forceinline__ uint16_t f2bf(float f) { return __bfloat16_as_ushort(__float2bfloat16_rn(f)); }

/* ---------------------------------------------------------------- prologue */

#define PREP_THREADS 256

__device__ __forceinline__ float block_sum(float v, float *red) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int w = threadIdx.x >> 5, l = threadIdx.x & 31;
  __syncthreads();
  if (l == 0) red[w] = v;
  __syncthreads();
  float t = l < (int)(blockDim.x >> 5) ? red[l] : 0.0f;
  for (int o = 16; o > 0; o >>= 1) t += __shfl_xor_sync(0xffffffffu, t, o);
  return t;
}

/* y[j] = bf16((x[j] * inv) * w[j]), inv = 1/sqrtf(Σx²/n + eps): pz_ref_rmsnorm's formula with a
 * tree-ordered sum (see dense_ops.h on precision). */
__device__ void norm_row(const float *x, int n, const uint16_t *w, float eps, uint16_t *y, float *red) {
  float ss = 0.0f;
  for (int j = threadIdx.x; j < n; j += blockDim.x) ss = __fadd_rn(ss, __fmul_rn(x[j], x[j]));
  ss = block_sum(ss, red);
  const float inv = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(ss, (float)n), eps)));
  for (int j = threadIdx.x; j < n; j += blockDim.x) y[j] = f2bf(__fmul_rn(__fmul_rn(x[j], inv), bf2f(w[j])));
}

/* grid (m, 2): y = 0 q_a_layernorm (q LoRA only), y = 1 kv_a_layernorm + RoPE(k_pe) -> cache. */
__global__ void __launch_bounds__(PREP_THREADS) mla_prep_kernel(Kp k) {
  pz_pdl_trigger(); /* a GEMM launched after this kernel may start its weight loads now (kernels/pdl.cuh) */
  __shared__ float red[32];
  const int i = blockIdx.x;
  if (blockIdx.y == 0) {
    if (k.q_lora > 0)
      norm_row(k.qkv_a + (int64_t)i * k.ld_qkv_a, k.q_lora, k.qa_norm_w, k.eps, k.qcn + (int64_t)i * k.q_lora, red);
    return;
  }
  const float *kv = k.q_lora > 0 ? k.qkv_a + (int64_t)i * k.ld_qkv_a + k.q_lora : k.kv_a + (int64_t)i * k.ld_kv_a;
  const int pos = k.pos[i];
  uint16_t *dst = k.cache + pz_kv_row_offset(k.block_table, k.ld_bt, k.cache_seq_stride, i, pos, k.kvw);
  norm_row(kv, k.L, k.kva_norm_w, k.eps, dst, red);
  const int half = k.rope / 2;
  for (int r = threadIdx.x; r < half; r += blockDim.x) {
    float o0, o1;
    rope_pair(k, pos, r, kv[k.L + 2 * r], kv[k.L + 2 * r + 1], &o0, &o1);
    dst[k.L + r] = f2bf(o0);
    dst[k.L + r + half] = f2bf(o1);
  }
}

/* ---------------------------------------------------------------- W_UK absorption */

#define BLK_ROWS 16     /* rows (tokens) per CTA of the absorb / W_UV kernels */
#define BLK_COLS 64     /* output columns per CTA */
#define BLK_THREADS 256 /* thread t: columns 2*(t%32), +1 of rows 2*(t/32), +1 */

/* grid (heads, ceil(m/16), ceil(L/64)): q_lat[i, h, c] = Σ_d q_nope[i, h, d] * W_UK[h, d, c]
 * (d in order, separate multiply and add: the reference's f32 value), rounded to bf16 for the
 * tensor cores. q rows and the W_UK block sit in shared memory; each thread owns 2 rows x 2
 * columns. CTAs with blockIdx.z == 0 also write RoPE(q_pe) (bf16) after the latent part. */
__global__ void __launch_bounds__(BLK_THREADS) mla_absorb_kernel(Kp k) {
  extern __shared__ float sq[]; /* [16][nope] f32, then W [nope][64] bf16 */
  uint16_t *sw = (uint16_t *)(sq + BLK_ROWS * k.nope);
  const int h = blockIdx.x, i0 = blockIdx.y * BLK_ROWS, c0 = blockIdx.z * BLK_COLS;
  const int nrow = min(BLK_ROWS, k.m - i0), ncol = min(BLK_COLS, k.L - c0);
  for (int x = threadIdx.x; x < BLK_ROWS * k.nope; x += blockDim.x) {
    const int r = x / k.nope, d = x % k.nope;
    sq[x] = r < nrow ? k.q[(int64_t)(i0 + r) * k.ldq + (int64_t)h * k.qh + d] : 0.0f;
  }
  const uint16_t *w = k.w_uk + (int64_t)h * k.nope * k.L + c0;
  for (int x = threadIdx.x; x < k.nope * BLK_COLS; x += blockDim.x) {
    const int d = x / BLK_COLS, c = x % BLK_COLS;
    sw[x] = c < ncol ? w[(int64_t)d * k.L + c] : 0;
  }
  __syncthreads();
  const int cp = 2 * (threadIdx.x & 31), r0 = 2 * (threadIdx.x >> 5);
  const float *q0 = sq + r0 * k.nope, *q1 = q0 + k.nope;
  float a00 = 0.0f, a01 = 0.0f, a10 = 0.0f, a11 = 0.0f;
  for (int d = 0; d < k.nope; d++) {
    const uint32_t wv = *(const uint32_t *)(sw + d * BLK_COLS + cp);
    const float w0 = __uint_as_float(wv << 16), w1 = __uint_as_float(wv & 0xffff0000u);
    const float x0 = q0[d], x1 = q1[d];
    a00 = __fadd_rn(a00, __fmul_rn(x0, w0));
    a01 = __fadd_rn(a01, __fmul_rn(x0, w1));
    a10 = __fadd_rn(a10, __fmul_rn(x1, w0));
    a11 = __fadd_rn(a11, __fmul_rn(x1, w1));
  }
  if (cp < ncol) {
    if (r0 < nrow) {
      uint16_t *o = k.qabs + ((int64_t)(i0 + r0) * k.heads + h) * k.kvw + c0 + cp;
      o[0] = f2bf(a00);
      if (cp + 1 < ncol) o[1] = f2bf(a01);
    }
    if (r0 + 1 < nrow) {
      uint16_t *o = k.qabs + ((int64_t)(i0 + r0 + 1) * k.heads + h) * k.kvw + c0 + cp;
      o[0] = f2bf(a10);
      if (cp + 1 < ncol) o[1] = f2bf(a11);
    }
  }
  if (blockIdx.z == 0) rope_q_rows(k, h, i0, nrow);
}

/* ---------------------------------------------------------------- attention */

/* cp.async stages: 2 for one head tile (two CTAs fit an SM), 3 above (one CTA per SM). */
__host__ __device__ constexpr int stages_for(int mt) { return mt == 1 ? 2 : PZ_MLA_STAGES; }
constexpr int PS = BN + 8; /* row stride of the P tile (elements): 80 bytes, conflict-free ldmatrix */

/* Shared memory (elements of bf16 unless noted), RS = kvw + 8 (16-byte rows of odd count, so the
 * 8 rows of an ldmatrix hit distinct banks):
 *   sQ [16*MT][RS] | sKV [STAGES][BN][RS] | sP [16*MT][PS] | sMax f32 [4][16*MT] | sSum f32 [4][16*MT] */
__host__ __device__ constexpr size_t attn_smem(int mt, int kvw) {
  return (size_t)(16 * mt * (kvw + 8) + stages_for(mt) * BN * (kvw + 8) + 16 * mt * PS) * 2 + (size_t)8 * 16 * mt * 4;
}

/* grid (splits, head groups, m), 128*MT threads. Warp w owns head tile mt = w/4 (16 heads) and
 * - in QK: the 8 positions (w%4)*8.. of the 32-position tile, over all kvw columns;
 * - in PV: latent columns (w%4)*L/4 .. of the output (NT n-tiles of 8).
 * Rows of the score/output tile are heads; positions beyond pos[i] or the split are masked and
 * their cache rows are zero-filled (never read from memory). */
/* One KV tile of the flash-decoding loop, shared by both attention kernels: mask and scale this
 * lane's four scores s (tokens start + tile*BN + wq*8 + 2*t4 + {0,1} for rows row0 / row1; -inf
 * past `end`), the running max over the four warps of the tile (sMax), the probabilities as bf16
 * into sP, the running sum (sSum), the rescale of the output accumulators o, and o += P · V with V
 * the tile's latent rows in kv (row stride RS elements). m_run / l_run: the running max and sum of
 * rows row0 and row1. Every thread of the CTA calls it (it syncs twice). */
template <int NT, int HT>
__device__ __forceinline__ void attn_tile_softmax_pv(float (&s)[4], float (&o)[NT][4], float &m_run0, float &m_run1,
                                                     float &l_run0, float &l_run1, float *sMax, float *sSum,
                                                     uint16_t *sP, const uint16_t *kv, int RS, float scale, int start,
                                                     int tile, int end, int wq, int t4, int row0, int row1, int mt,
                                                     int lane) {
  constexpr int L = 32 * NT;
  const int p0 = start + tile * BN + wq * 8 + 2 * t4;
  s[0] = p0 < end ? s[0] * scale : -INFINITY;
  s[1] = p0 + 1 < end ? s[1] * scale : -INFINITY;
  s[2] = p0 < end ? s[2] * scale : -INFINITY;
  s[3] = p0 + 1 < end ? s[3] * scale : -INFINITY;
  float mx0 = fmaxf(s[0], s[1]), mx1 = fmaxf(s[2], s[3]);
  mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
  mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
  mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
  mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
  if (t4 == 0) { sMax[wq * HT + row0] = mx0; sMax[wq * HT + row1] = mx1; }
  __syncthreads();
  const float mn0 = fmaxf(m_run0, fmaxf(fmaxf(sMax[row0], sMax[HT + row0]), fmaxf(sMax[2 * HT + row0], sMax[3 * HT + row0])));
  const float mn1 = fmaxf(m_run1, fmaxf(fmaxf(sMax[row1], sMax[HT + row1]), fmaxf(sMax[2 * HT + row1], sMax[3 * HT + row1])));
  /* the first position of every tile is valid, so mn is finite */
  const float e0 = expf(s[0] - mn0), e1 = expf(s[1] - mn0), e2 = expf(s[2] - mn1), e3 = expf(s[3] - mn1);
  *(uint32_t *)(sP + row0 * PS + wq * 8 + 2 * t4) = pack_bf2(e0, e1);
  *(uint32_t *)(sP + row1 * PS + wq * 8 + 2 * t4) = pack_bf2(e2, e3);
  float sm0 = e0 + e1, sm1 = e2 + e3;
  sm0 += __shfl_xor_sync(0xffffffffu, sm0, 1);
  sm0 += __shfl_xor_sync(0xffffffffu, sm0, 2);
  sm1 += __shfl_xor_sync(0xffffffffu, sm1, 1);
  sm1 += __shfl_xor_sync(0xffffffffu, sm1, 2);
  if (t4 == 0) { sSum[wq * HT + row0] = sm0; sSum[wq * HT + row1] = sm1; }
  __syncthreads();
  const float al0 = expf(m_run0 - mn0), al1 = expf(m_run1 - mn1);
  l_run0 = l_run0 * al0 + ((sSum[row0] + sSum[HT + row0]) + (sSum[2 * HT + row0] + sSum[3 * HT + row0]));
  l_run1 = l_run1 * al1 + ((sSum[row1] + sSum[HT + row1]) + (sSum[2 * HT + row1] + sSum[3 * HT + row1]));
  m_run0 = mn0;
  m_run1 = mn1;
#pragma unroll
  for (int j = 0; j < NT; j++) { o[j][0] *= al0; o[j][1] *= al0; o[j][2] *= al1; o[j][3] *= al1; }
  /* O[16 heads x L/4 columns] += P[16 x 32] · V[32 x L/4] */
#pragma unroll
  for (int kk = 0; kk < BN; kk += 16) {
    uint32_t a[4];
    ldsm_x4(a, sP + (mt * 16 + (lane & 15)) * PS + kk + (lane >> 4) * 8);
    const uint16_t *vb = kv + (kk + (lane & 7) + ((lane >> 3) & 1) * 8) * RS + wq * (L / 4) + (lane >> 4) * 8;
#pragma unroll
    for (int j = 0; j < NT; j += 2) {
      if (j + 1 < NT) {
        uint32_t b[4];
        ldsm_x4_t(b, vb + j * 8);
        mma16816(o[j], a, b[0], b[1]);
        mma16816(o[j + 1], a, b[2], b[3]);
      } else {
        uint32_t b[2];
        ldsm_x2_t(b, vb + j * 8);
        mma16816(o[j], a, b[0], b[1]);
      }
    }
  }
}

/* The split's unnormalised partial output (k.opart) and its (max, sum) per head (ml), shared by
 * both attention kernels. */
template <int NT>
__device__ __forceinline__ void attn_write_partial(const Kp &k, const float (&o)[NT][4], int i, int split, int h0,
                                                   int row0, int row1, int wq, int t4, float *ml, float m_run0,
                                                   float m_run1, float l_run0, float l_run1) {
  constexpr int L = 32 * NT;
  const int64_t base = ((int64_t)i * k.splits + split) * k.heads;
  const int ha = h0 + row0, hb = h0 + row1;
#pragma unroll
  for (int j = 0; j < NT; j++) {
    const int col = wq * (L / 4) + j * 8 + 2 * t4;
    if (ha < k.heads) *(float2 *)(k.opart + (base + ha) * L + col) = make_float2(o[j][0], o[j][1]);
    if (hb < k.heads) *(float2 *)(k.opart + (base + hb) * L + col) = make_float2(o[j][2], o[j][3]);
  }
  if (wq == 0 && t4 == 0) {
    if (ha < k.heads) { ml[ha * 2] = m_run0; ml[ha * 2 + 1] = l_run0; }
    if (hb < k.heads) { ml[hb * 2] = m_run1; ml[hb * 2 + 1] = l_run1; }
  }
}

/* Lane roles in an attention CTA of 128*MT threads, shared by both kernels: warp 4*mt + wq owns
 * head tile mt (16 heads) and quarter wq; lane 4*g + t4 holds rows row0 = 16*mt + g and row1 =
 * row0 + 8 of that tile's scores and outputs (the mma.m16n8k16 accumulator layout). */
struct AttnLane {
  int tid, lane, t4, mt, wq, row0, row1;
};
__device__ __forceinline__ AttnLane attn_lane() {
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, mt = warp >> 2;
  return AttnLane{tid, lane, lane & 3, mt, warp & 3, mt * 16 + g, mt * 16 + g + 8};
}

/* KV tile `tile` of slice sl (cache rows start + tile*BN .., kvw columns; rows at or past end
 * are zero-filled, never read) into stage `stage` of sKV (row stride RS elements), by cp.async
 * from every thread of the CTA. No commit: the caller groups the copies. HINT: the copy loop
 * carries `#pragma unroll` (version 2's loop had it, version 1's not: each keeps its code). */
template <int THREADS, bool HINT>
__device__ __forceinline__ void attn_load_kv(uint16_t *sKV, const AttnSlice &sl, int tile, int stage, int kvw, int RS,
                                             int tid) {
  const int c8 = kvw / 8; /* 16-byte chunks per row */
  const int p0 = sl.start + tile * BN, end = sl.end;
  const uint16_t *cache = sl.cache;
  /* the tile's first row: one table lookup per tile (the tile lies inside one page) */
  const uint16_t *rows = sl.table ? cache + ((int64_t)sl.table[p0 / PZ_KV_BLOCK] * PZ_KV_BLOCK + p0 % PZ_KV_BLOCK) * kvw
                                  : cache + (int64_t)p0 * kvw;
  uint16_t *dst = sKV + stage * BN * RS;
  auto copy = [&](int e) {
    const int r = e / c8, c = e % c8;
    const bool ok = p0 + r < end;
    const uint16_t *src = ok ? rows + (int64_t)r * kvw + c * 8 : cache;
    cp_async16(dst + r * RS + c * 8, src, ok);
  };
  if constexpr (HINT) {
#pragma unroll
    for (int e = tid; e < BN * c8; e += THREADS) copy(e);
  } else {
    for (int e = tid; e < BN * c8; e += THREADS) copy(e);
  }
}

/* The pipeline's start, shared by both attention kernels: the Q tile (heads h0 .. h0 + HT - 1 of
 * sequence i, kvw columns of k.qabs; rows beyond k.heads are zero) into sQ, then the first
 * STAGES - 1 KV tiles of slice sl (those below sl.ntiles) into stages 0.., one commit group per
 * stage (Q joins the first). */
template <int HT, int THREADS, int STAGES, bool HINT>
__device__ __forceinline__ void attn_load_prologue(const Kp &k, uint16_t *sQ, uint16_t *sKV, const AttnSlice &sl, int i,
                                                   int h0, int kvw, int RS, int tid) {
  const int c8 = kvw / 8;
  for (int e = tid; e < HT * c8; e += THREADS) {
    const int r = e / c8, c = e % c8;
    const bool ok = h0 + r < k.heads;
    const uint16_t *src = ok ? k.qabs + ((int64_t)i * k.heads + h0 + r) * kvw + c * 8 : k.qabs;
    cp_async16(sQ + r * RS + c * 8, src, ok);
  }
#pragma unroll
  for (int s = 0; s < STAGES - 1; s++) {
    if (s < sl.ntiles) attn_load_kv<THREADS, HINT>(sKV, sl, s, s, kvw, RS, tid);
    cp_commit();
  }
}

/* Inside the tile loop, after the wait for tile `tile`: the copy of tile tile + STAGES - 1 (when
 * there is one) into the stage the previous tile freed, as one commit group (empty past the end,
 * so the group count stays what cp_wait expects). */
template <int THREADS, int STAGES, bool HINT>
__device__ __forceinline__ void attn_prefetch(uint16_t *sKV, const AttnSlice &sl, int tile, int kvw, int RS, int tid) {
  const int nt = tile + STAGES - 1;
  if (nt < sl.ntiles) attn_load_kv<THREADS, HINT>(sKV, sl, nt, nt % STAGES, kvw, RS, tid);
  cp_commit();
}

template <int MT, int NT>
__global__ void __launch_bounds__(128 * MT, 1) mla_attn_kernel(Kp k) {
  constexpr int HT = 16 * MT;
  constexpr int THREADS = 128 * MT;
  constexpr int STAGES = stages_for(MT);
  constexpr int NACC = MT == 1 ? 4 : 2;
  extern __shared__ uint4 smem_raw[];
  const int kvw = k.kvw, RS = kvw + 8;
  uint16_t *sQ = (uint16_t *)smem_raw;
  uint16_t *sKV = sQ + HT * RS;
  uint16_t *sP = sKV + STAGES * BN * RS;
  float *sMax = (float *)(sP + HT * PS);
  float *sSum = sMax + 4 * HT;

  const int split = blockIdx.x, h0 = blockIdx.y * HT, i = blockIdx.z;
  const auto [tid, lane, t4, mt, wq, row0, row1] = attn_lane();
  AttnSlice sl;
  if (!attn_slice<HT, THREADS>(k, i, split, h0, tid, blockIdx.x == 0 && blockIdx.y == 0 && i == 0, &sl)) return;
  attn_load_prologue<HT, THREADS, STAGES, false>(k, sQ, sKV, sl, sl.seq, h0, kvw, RS, tid);

  float o[NT][4];
#pragma unroll
  for (int j = 0; j < NT; j++) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;
  float m_run0 = -INFINITY, m_run1 = -INFINITY, l_run0 = 0.0f, l_run1 = 0.0f;
  const float scale = k.softmax_scale;

  for (int tile = 0; tile < sl.ntiles; tile++) {
    cp_wait<STAGES - 2>();
    __syncthreads();
    attn_prefetch<THREADS, STAGES, false>(sKV, sl, tile, kvw, RS, tid);
    const uint16_t *kv = sKV + (tile % STAGES) * BN * RS;
    /* S[16 heads x 8 positions] = Q · Kᵀ over kvw, two k-steps per B load, NACC independent
     * accumulator chains (the mma latency, not its rate, bounds a single chain) */
    float s[4];
    {
      float acc[NACC][4];
#pragma unroll
      for (int u = 0; u < NACC; u++) acc[u][0] = acc[u][1] = acc[u][2] = acc[u][3] = 0.0f;
      const uint16_t *qa = sQ + (mt * 16 + (lane & 15)) * RS + (lane >> 4) * 8;
      const uint16_t *kb = kv + (wq * 8 + (lane & 7)) * RS + (lane >> 3) * 8;
      int kc = 0;
      for (; kc + 16 * NACC <= kvw; kc += 16 * NACC) {
#pragma unroll
        for (int u = 0; u < NACC / 2; u++) {
          uint32_t a0[4], a1[4], b[4];
          ldsm_x4(a0, qa + kc + 32 * u);
          ldsm_x4(a1, qa + kc + 32 * u + 16);
          ldsm_x4(b, kb + kc + 32 * u);
          mma16816(acc[2 * u], a0, b[0], b[1]);
          mma16816(acc[2 * u + 1], a1, b[2], b[3]);
        }
      }
      for (; kc < kvw; kc += 32) {
        uint32_t a0[4], a1[4], b[4];
        ldsm_x4(a0, qa + kc);
        ldsm_x4(a1, qa + kc + 16);
        ldsm_x4(b, kb + kc);
        mma16816(acc[0], a0, b[0], b[1]);
        mma16816(acc[1], a1, b[2], b[3]);
      }
#pragma unroll
      for (int r = 0; r < 4; r++) {
        float t = acc[0][r];
#pragma unroll
        for (int u = 1; u < NACC; u++) t += acc[u][r];
        s[r] = t;
      }
    }
    attn_tile_softmax_pv<NT, HT>(s, o, m_run0, m_run1, l_run0, l_run1, sMax, sSum, sP, kv, RS, scale, sl.start, tile,
                                 sl.end, wq, t4, row0, row1, mt, lane);
  }
  cp_wait<0>();
  /* unnormalised partial output and its (max, sum) */
  attn_write_partial<NT>(k, o, i, split, h0, row0, row1, wq, t4, sl.ml, m_run0, m_run1, l_run0, l_run1);
}

/* ---------------------------------------------------------------- attention, version 2 */

/* Shared memory of version 2: sQ [HT][RS] | sKV [STAGES][BN][RS] | sP [HT][PS] |
 * sS f32 [4][HT][SS] (partial scores of the 4 k-quarters) | sMax f32 [4][HT] | sSum f32 [4][HT]. */
constexpr int SS = BN + 8;
__host__ __device__ constexpr size_t attn2_smem(int mt, int kvw) {
  return attn_smem(mt, kvw) + (size_t)4 * 16 * mt * SS * 4;
}

/* Version 2 (default): as version 1, except that in QK warp (mt, kq) multiplies its head tile by
 * ALL 32 positions of the tile over one quarter of the kvw columns, with that quarter of Q held
 * in registers (loaded once per CTA). The tile's K rows are then read from shared memory once
 * per head tile and Q never again (version 1 re-read both per 8 positions, which bounded it by
 * shared-memory bandwidth); the four quarters' partial scores are summed in shared memory, in
 * quarter order. Grid (head groups, splits, m): the head groups of one slice run side by side,
 * so the second read of a KV tile hits L2. KQ = kvw / 64, a compile-time constant. */
template <int MT, int NT, int KQ>
__global__ void __launch_bounds__(128 * MT, MT == 1 ? 2 : 1) mla_attn2_kernel(Kp k) {
  constexpr int HT = 16 * MT;
  constexpr int THREADS = 128 * MT;
  constexpr int STAGES = stages_for(MT);
  constexpr int KVW = 64 * KQ, RS = KVW + 8;
  extern __shared__ uint4 smem_raw[];
  uint16_t *sQ = (uint16_t *)smem_raw;
  uint16_t *sKV = sQ + HT * RS;
  uint16_t *sP = sKV + STAGES * BN * RS;
  float *sS = (float *)(sP + HT * PS);
  float *sMax = sS + 4 * HT * SS;
  float *sSum = sMax + 4 * HT;

  const int h0 = blockIdx.x * HT, split = blockIdx.y, i = blockIdx.z;
  const auto [tid, lane, t4, mt, wq, row0, row1] = attn_lane();
  AttnSlice sl;
  if (!attn_slice<HT, THREADS>(k, i, split, h0, tid, blockIdx.x == 0 && blockIdx.y == 0 && i == 0, &sl)) return;
  attn_load_prologue<HT, THREADS, STAGES, true>(k, sQ, sKV, sl, sl.seq, h0, KVW, RS, tid);

  float o[NT][4];
#pragma unroll
  for (int j = 0; j < NT; j++) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;
  uint32_t qf[KQ][4];
  float m_run0 = -INFINITY, m_run1 = -INFINITY, l_run0 = 0.0f, l_run1 = 0.0f;
  const float scale = k.softmax_scale;

  for (int tile = 0; tile < sl.ntiles; tile++) {
    cp_wait<STAGES - 2>();
    __syncthreads();
    if (tile == 0) {
#pragma unroll
      for (int u = 0; u < KQ; u++)
        ldsm_x4(qf[u], sQ + (mt * 16 + (lane & 15)) * RS + (wq * KQ + u) * 16 + (lane >> 4) * 8);
    }
    attn_prefetch<THREADS, STAGES, true>(sKV, sl, tile, KVW, RS, tid);
    const uint16_t *kv = sKV + (tile % STAGES) * BN * RS;
    /* partial S[16 heads x 32 positions] over k-quarter wq: 4 independent n-tile chains */
    {
      float acc[4][4];
#pragma unroll
      for (int j = 0; j < 4; j++) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
      const uint16_t *kb = kv + ((lane & 7) + ((lane >> 4) & 1) * 8) * RS + ((lane >> 3) & 1) * 8 + wq * KQ * 16;
#pragma unroll
      for (int u = 0; u < KQ; u++) {
#pragma unroll
        for (int pp = 0; pp < 2; pp++) {
          uint32_t b[4];
          ldsm_x4(b, kb + pp * 16 * RS + u * 16);
          mma16816(acc[2 * pp], qf[u], b[0], b[1]);
          mma16816(acc[2 * pp + 1], qf[u], b[2], b[3]);
        }
      }
      float *ps = sS + wq * HT * SS;
#pragma unroll
      for (int j = 0; j < 4; j++) {
        *(float2 *)(ps + row0 * SS + j * 8 + 2 * t4) = make_float2(acc[j][0], acc[j][1]);
        *(float2 *)(ps + row1 * SS + j * 8 + 2 * t4) = make_float2(acc[j][2], acc[j][3]);
      }
    }
    __syncthreads();
    /* this warp's 8 positions (wq*8..): the quarters summed in order */
    float s[4];
    {
      const int col = wq * 8 + 2 * t4;
      float2 x0 = *(const float2 *)(sS + row0 * SS + col), x1 = *(const float2 *)(sS + row1 * SS + col);
#pragma unroll
      for (int q = 1; q < 4; q++) {
        const float2 y0 = *(const float2 *)(sS + (q * HT + row0) * SS + col);
        const float2 y1 = *(const float2 *)(sS + (q * HT + row1) * SS + col);
        x0.x += y0.x; x0.y += y0.y; x1.x += y1.x; x1.y += y1.y;
      }
      s[0] = x0.x; s[1] = x0.y; s[2] = x1.x; s[3] = x1.y;
    }
    attn_tile_softmax_pv<NT, HT>(s, o, m_run0, m_run1, l_run0, l_run1, sMax, sSum, sP, kv, RS, scale, sl.start, tile,
                                 sl.end, wq, t4, row0, row1, mt, lane);
  }
  cp_wait<0>();
  attn_write_partial<NT>(k, o, i, split, h0, row0, row1, wq, t4, sl.ml, m_run0, m_run1, l_run0, l_run1);
}

/* ---------------------------------------------------------------- combine, W_UV */

#define COMB_THREADS 128
/* Sequence i's slices for the combine: slots *s0 .. *s0 + *nv - 1 (1..PZ_MLA_MAX_SPLITS of them, in
 * token order: the attention kernel's schedule; k.balance 0: slots i * splits .., its non-empty chunks). */
__device__ __forceinline__ void comb_slots(const Kp &k, int i, int *s0, int *nv) {
  if (k.balance) {
    *s0 = k.sched[i];
    *nv = min(PZ_MLA_MAX_SPLITS, k.sched[i + 1] - *s0);
  } else { /* the non-empty chunks of sequence i: the first ceil(n / chunk) of its `splits` slots */
    const int n = (int)kv_len(k, real_rows(k), i);
    const int chunk = (int)pz_kv_sched_ceil_tiles(n, k.splits);
    *s0 = i * k.splits;
    *nv = min(k.splits, (n + chunk - 1) / chunk);
  }
}

/* grid (m, heads): olat[i,h,:] = Σ_s w_s O_s / Σ_s w_s l_s, w_s = exp(max_s - max), over sequence
 * i's slices (comb_slots). Slice weights are computed once into shared memory; columns go 4 per
 * thread (float4). The layout below 16 split slots per row (PREZERO_MLA_COMBINE=0: always). */
__global__ void __launch_bounds__(COMB_THREADS) mla_combine_kernel(Kp k) {
  __shared__ float sw[PZ_MLA_MAX_SPLITS], sm[PZ_MLA_MAX_SPLITS];
  const int i = blockIdx.x, h = blockIdx.y;
  int s0, nv;
  comb_slots(k, i, &s0, &nv);
  const float *ml = k.ml + (int64_t)s0 * k.heads * 2;
  for (int s = threadIdx.x; s < nv; s += blockDim.x) {
    sm[s] = ml[((int64_t)s * k.heads + h) * 2];
    sw[s] = ml[((int64_t)s * k.heads + h) * 2 + 1];
  }
  __syncthreads();
  float mx = -INFINITY;
  for (int s = 0; s < nv; s++) mx = fmaxf(mx, sm[s]);
  float den = 0.0f;
  for (int s = 0; s < nv; s++) den += expf(sm[s] - mx) * sw[s];
  __syncthreads();
  const float inv = 1.0f / den;
  for (int s = threadIdx.x; s < nv; s += blockDim.x) sw[s] = expf(sm[s] - mx) * inv;
  __syncthreads();
  const float4 *op = (const float4 *)(k.opart + ((int64_t)s0 * k.heads + h) * k.L);
  const int64_t sstride = (int64_t)k.heads * k.L / 4;
  float4 *out = (float4 *)(k.olat + ((int64_t)i * k.heads + h) * k.L);
  for (int c = threadIdx.x; c < k.L / 4; c += blockDim.x) {
    float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll 4
    for (int s = 0; s < nv; s++) {
      const float4 v = op[s * sstride + c];
      const float w = sw[s];
      acc.x += w * v.x; acc.y += w * v.y; acc.z += w * v.z; acc.w += w * v.w;
    }
    out[c] = acc;
  }
}

/* The same sums, one warp per (row i = blockIdx.y, head, 128 columns), COMBW_THREADS / 32 warps per CTA:
 * no block barrier; lane l holds slices l and l + 32's (max, sum), every lane runs the former's sequential
 * max / denominator loop over shuffled values (the same operations in the same order: the same bits), and
 * each lane adds its float4 column over the slices with COMBW_BATCH loads in flight. Measured on the H200
 * in CUDA-graph replay (bench/results/attn_paged_h200/combine_r92/): 0.8-1.7 µs faster than the former at
 * m 4 (33-64 slices per row), 0-1 µs slower at m 16 (8) and 1-8 µs slower at m 64 / 128 (1-2 slices, whose
 * partials the former reads from L2 in the time of its launch), so it is taken from
 * PZ_MLA_COMBINE_WARP_SPLITS split slots per row. */
#define COMBW_THREADS 256
#define COMBW_BATCH 8
#define PZ_MLA_COMBINE_WARP_SPLITS 16
__global__ void __launch_bounds__(COMBW_THREADS) mla_combine_warp_kernel(Kp k) {
  const int i = blockIdx.y, lane = threadIdx.x & 31;
  const int per_head = (k.L / 4 + 31) / 32; /* warps per head: 128 float4 columns each */
  const int gw = blockIdx.x * (COMBW_THREADS / 32) + (threadIdx.x >> 5);
  const int h = gw / per_head, c = (gw - h * per_head) * 32 + lane;
  if (h >= k.heads) return; /* whole warps */
  int s0, nv;
  comb_slots(k, i, &s0, &nv);
  const float *ml = k.ml + (int64_t)s0 * k.heads * 2;
  float ma = -INFINITY, la = 0.0f, mb = -INFINITY, lb = 0.0f; /* slices lane, lane + 32 */
  if (lane < nv) { ma = ml[((int64_t)lane * k.heads + h) * 2]; la = ml[((int64_t)lane * k.heads + h) * 2 + 1]; }
  if (lane + 32 < nv) {
    mb = ml[((int64_t)(lane + 32) * k.heads + h) * 2];
    lb = ml[((int64_t)(lane + 32) * k.heads + h) * 2 + 1];
  }
  float mx = -INFINITY;
  for (int s = 0; s < nv; s++) mx = fmaxf(mx, __shfl_sync(0xffffffffu, s < 32 ? ma : mb, s & 31));
  float den = 0.0f;
  for (int s = 0; s < nv; s++) {
    const float ms = __shfl_sync(0xffffffffu, s < 32 ? ma : mb, s & 31);
    const float ls = __shfl_sync(0xffffffffu, s < 32 ? la : lb, s & 31);
    den += expf(ms - mx) * ls;
  }
  const float inv = 1.0f / den;
  const float wa = expf(ma - mx) * inv, wb = expf(mb - mx) * inv; /* slices lane, lane + 32 */
  const bool col = c < k.L / 4;
  const float4 *op = (const float4 *)(k.opart + ((int64_t)s0 * k.heads + h) * k.L) + c;
  const int64_t sstride = (int64_t)k.heads * k.L / 4;
  float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  for (int sb = 0; sb < nv; sb += COMBW_BATCH) {
    float4 v[COMBW_BATCH];
#pragma unroll
    for (int j = 0; j < COMBW_BATCH; j++)
      v[j] = col && sb + j < nv ? op[(sb + j) * sstride] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
    for (int j = 0; j < COMBW_BATCH; j++) {
      if (sb + j >= nv) break;
      const int s = sb + j;
      const float w = __shfl_sync(0xffffffffu, s < 32 ? wa : wb, s & 31);
      acc.x += w * v[j].x; acc.y += w * v[j].y; acc.z += w * v[j].z; acc.w += w * v[j].w;
    }
  }
  if (col) ((float4 *)(k.olat + ((int64_t)i * k.heads + h) * k.L))[c] = acc;
}

/* grid (heads, ceil(m/16), ceil(vd/64)): o[i, h*vd + e] = bf16(Σ_c W_UV[h,e,c] * olat[i,h,c])
 * (c in order, separate multiply and add, as the reference). olat rows [16][L] f32 and the
 * W_UV block transposed to [L][64] bf16 sit in shared memory; 2 rows x 2 columns per thread. */
__global__ void __launch_bounds__(BLK_THREADS) mla_wuv_kernel(Kp k) {
  pz_pdl_trigger(); /* a GEMM launched after this kernel may start its weight loads now (kernels/pdl.cuh) */
  extern __shared__ float so[]; /* [16][L] f32, then W [L][64] bf16 */
  uint16_t *sv = (uint16_t *)(so + BLK_ROWS * k.L);
  const int h = blockIdx.x, i0 = blockIdx.y * BLK_ROWS, e0 = blockIdx.z * BLK_COLS;
  const int nrow = min(BLK_ROWS, k.m - i0), ne = min(BLK_COLS, k.vd - e0);
  for (int x = threadIdx.x; x < BLK_ROWS * k.L; x += blockDim.x) {
    const int r = x / k.L;
    so[x] = r < nrow ? k.olat[((int64_t)(i0 + r) * k.heads + h) * k.L + (x - r * k.L)] : 0.0f;
  }
  const uint16_t *w = k.w_uv + ((int64_t)h * k.vd + e0) * k.L;
  for (int x = threadIdx.x; x < BLK_COLS * k.L; x += blockDim.x) {
    const int e = x / k.L, c = x - e * k.L;
    sv[c * BLK_COLS + e] = e < ne ? w[(int64_t)e * k.L + c] : 0;
  }
  __syncthreads();
  const int ep = 2 * (threadIdx.x & 31), r0 = 2 * (threadIdx.x >> 5);
  const float *o0 = so + r0 * k.L, *o1 = o0 + k.L;
  float a00 = 0.0f, a01 = 0.0f, a10 = 0.0f, a11 = 0.0f;
  for (int c = 0; c < k.L; c++) {
    const uint32_t wv = *(const uint32_t *)(sv + c * BLK_COLS + ep);
    const float w0 = __uint_as_float(wv << 16), w1 = __uint_as_float(wv & 0xffff0000u);
    const float x0 = o0[c], x1 = o1[c];
    a00 = __fadd_rn(a00, __fmul_rn(w0, x0));
    a01 = __fadd_rn(a01, __fmul_rn(w1, x0));
    a10 = __fadd_rn(a10, __fmul_rn(w0, x1));
    a11 = __fadd_rn(a11, __fmul_rn(w1, x1));
  }
  const int64_t ld = (int64_t)k.heads * k.vd;
  if (ep < ne) {
    if (r0 < nrow) {
      uint16_t *o = k.o + (int64_t)(i0 + r0) * ld + (int64_t)h * k.vd + e0 + ep;
      o[0] = f2bf(a00);
      if (ep + 1 < ne) o[1] = f2bf(a01);
    }
    if (r0 + 1 < nrow) {
      uint16_t *o = k.o + (int64_t)(i0 + r0 + 1) * ld + (int64_t)h * k.vd + e0 + ep;
      o[0] = f2bf(a10);
      if (ep + 1 < ne) o[1] = f2bf(a11);
    }
  }
}

typedef void (*attn_fn)(Kp);
template <int MT>
attn_fn pick_nt(int L) {
  switch (L) {
    case 96: return mla_attn_kernel<MT, 3>;
    case 128: return mla_attn_kernel<MT, 4>;
    case 256: return mla_attn_kernel<MT, 8>;
    case 512: return mla_attn_kernel<MT, 16>;
    default: return nullptr;
  }
}
template <int MT>
attn_fn pick2(int L, int kvw) {
  if (L == 96 && kvw == 128) return mla_attn2_kernel<MT, 3, 2>;
  if (L == 128 && kvw == 192) return mla_attn2_kernel<MT, 4, 3>;
  if (L == 256 && kvw == 320) return mla_attn2_kernel<MT, 8, 5>;
  if (L == 512 && kvw == 576) return mla_attn2_kernel<MT, 16, 9>;
  return nullptr;
}
attn_fn pick_attn(int version, int mt, int L, int kvw) {
  if (version == 2) return mt == 1 ? pick2<1>(L, kvw) : mt == 2 ? pick2<2>(L, kvw) : nullptr;
  switch (mt) {
    case 1: return pick_nt<1>(L);
    case 2: return pick_nt<2>(L);
    case 4: return pick_nt<4>(L);
    default: return nullptr;
  }
}
size_t smem_for(int version, int mt, int kvw) { return version == 2 ? attn2_smem(mt, kvw) : attn_smem(mt, kvw); }

} // namespace

extern "C" int pz_mla_k_attn_mt(int heads, int version) {
  if (version >= 3) return 4; /* 64 heads per CTA: the wgmma M side */
  if (version == 2) return heads <= 16 ? 1 : 2;
  return heads <= 16 ? 1 : heads <= 32 ? 2 : 4;
}

extern "C" pz_status pz_mla_k_attn_setup(int version, int mt, int L, int kvw, int *ctas_per_sm) {
  if (version == 4) return pz_mla_k_attn4_setup(L, kvw, ctas_per_sm);
  if (version == 3) return pz_mla_k_attn3_setup(L, kvw, ctas_per_sm);
  attn_fn f = pick_attn(version, mt, L, kvw);
  if (!f || kvw % 32 != 0 || kvw <= L)
    return pz_error(PZ_ERR_UNSUPPORTED, "mla cuda: attention v%d has no kernel for kv_lora_rank %d, kv_lora + rope %d "
                    "(v1: kv_lora 96/128/256/512, kv_lora + rope a multiple of 32; v2: (96,128), (128,192), (256,320), (512,576))",
                    version, L, kvw);
  const size_t smem = smem_for(version, mt, kvw);
  PZ_CUDA_CHECK(cudaFuncSetAttribute(f, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
  int n = 0;
  PZ_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, f, 128 * mt, smem));
  if (n < 1) return pz_error(PZ_ERR_UNSUPPORTED, "mla cuda: attention kernel (%zu B smem) does not fit an SM", smem);
  if (ctas_per_sm) *ctas_per_sm = n;
  return PZ_OK;
}

extern "C" pz_status pz_mla_k_prep(const Kp *k, cudaStream_t s) {
  mla_prep_kernel<<<dim3((unsigned)k->m, 2), PREP_THREADS, 0, s>>>(*k);
  PZ_CUDA_CHECK(cudaGetLastError());
  return PZ_OK;
}

static size_t absorb_smem(const Kp *k) { return (size_t)BLK_ROWS * k->nope * 4 + (size_t)k->nope * BLK_COLS * 2; }
static size_t wuv_smem(const Kp *k) { return (size_t)BLK_ROWS * k->L * 4 + (size_t)k->L * BLK_COLS * 2; }

extern "C" pz_status pz_mla_k_absorb(const Kp *k, cudaStream_t s) {
  if (pz_mla_k_proj_tc_ok(k)) return pz_mla_k_absorb_tc(k, s);
  dim3 grid((unsigned)k->heads, (unsigned)((k->m + BLK_ROWS - 1) / BLK_ROWS), (unsigned)((k->L + BLK_COLS - 1) / BLK_COLS));
  mla_absorb_kernel<<<grid, BLK_THREADS, absorb_smem(k), s>>>(*k);
  PZ_CUDA_CHECK(cudaGetLastError());
  return PZ_OK;
}

extern "C" pz_status pz_mla_k_attn(const Kp *k, cudaStream_t s) {
  if (k->attn_version == 4) return pz_mla_k_attn4(k, s);
  if (k->attn_version == 3) return pz_mla_k_attn3(k, s);
  attn_fn f = pick_attn(k->attn_version, k->mt, k->L, k->kvw);
  if (!f) return pz_error(PZ_ERR_UNSUPPORTED, "mla cuda: no attention v%d kernel for kv_lora_rank %d", k->attn_version, k->L);
  const int ht = 16 * k->mt;
  const unsigned hg = (unsigned)((k->heads + ht - 1) / ht);
  dim3 grid = k->attn_version == 2 ? dim3(hg, (unsigned)k->splits, (unsigned)k->m) : dim3((unsigned)k->splits, hg, (unsigned)k->m);
  f<<<grid, 128 * k->mt, smem_for(k->attn_version, k->mt, k->kvw), s>>>(*k);
  PZ_CUDA_CHECK(cudaGetLastError());
  return PZ_OK;
}

extern "C" pz_status pz_mla_k_combine(const Kp *k, cudaStream_t s) {
  if (k->combine_warp == 1 || (k->combine_warp < 0 && k->splits >= PZ_MLA_COMBINE_WARP_SPLITS)) {
    const int warps = k->heads * ((k->L / 4 + 31) / 32), per_cta = COMBW_THREADS / 32;
    const dim3 grid((unsigned)((warps + per_cta - 1) / per_cta), (unsigned)k->m);
    mla_combine_warp_kernel<<<grid, COMBW_THREADS, 0, s>>>(*k);
  } else {
    mla_combine_kernel<<<dim3((unsigned)k->m, (unsigned)k->heads), COMB_THREADS, 0, s>>>(*k);
  }
  PZ_CUDA_CHECK(cudaGetLastError());
  return PZ_OK;
}

extern "C" pz_status pz_mla_k_wuv(const Kp *k, cudaStream_t s) {
  if (pz_mla_k_proj_tc_ok(k)) return pz_mla_k_wuv_tc(k, s);
  dim3 grid((unsigned)k->heads, (unsigned)((k->m + BLK_ROWS - 1) / BLK_ROWS), (unsigned)((k->vd + BLK_COLS - 1) / BLK_COLS));
  mla_wuv_kernel<<<grid, BLK_THREADS, wuv_smem(k), s>>>(*k);
  PZ_CUDA_CHECK(cudaGetLastError());
  return PZ_OK;
}

/* Raises the dynamic shared-memory limits of the absorb and W_UV kernels (once per shape). */
extern "C" pz_status pz_mla_k_setup(const Kp *k) {
  PZ_CUDA_CHECK(cudaFuncSetAttribute(mla_absorb_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)absorb_smem(k)));
  PZ_CUDA_CHECK(cudaFuncSetAttribute(mla_wuv_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)wuv_smem(k)));
  return pz_mla_k_proj_tc_setup();
}
