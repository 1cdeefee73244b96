/* CUDA kernels of the GQA decode op (sm_90a): the prologue (q/k RMSNorm, rotate-half RoPE, bf16
 * K/V append, q split into bf16 hi + lo parts), flash-decoding attention split along the KV
 * sequence (mma.sync bf16 with f32 accumulation, cp.async pipeline), and the split combine. */
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
extern "C" { /* core/status.h has no C++ guards of its own */
#include "core/status.h"
}
#include "backend/cuda/cuda_util.h"
#include "backend/cuda/gqa_kernels.h"
#include "backend/cuda/kernels/pad_rows.cuh"
#include "backend/cuda/kernels/mma_sync_ops.cuh" /* smem_u32, cp.async (the L2::256B form for K / V and Q), ldmatrix, mma */

/* Algorithm: flash-decoding (Dao et al., "Flash-Decoding for long-context inference", 2023):
 * each CTA runs online softmax (Milakov & Gimelshein 2018) over one slice of one sequence's KV
 * for the query heads of one kv head, stores its unnormalised output with (max, sum), and a
 * second kernel merges the slices. The query heads of a group share every K/V tile (GQA,
 * Ainslie et al. 2023), as the 16 rows of one tensor-core tile. The code is ours.
 *
 * Precision: q (f32) and the probabilities p (f32) enter the bf16 tensor cores as two bf16
 * parts each, x = hi + lo with hi = bf16(x), lo = bf16(x - hi) (|x - hi - lo| <= 2^-17 |x|),
 * and K / V are bf16 already (exact), so the scores and the weighted sums are f32-accurate up to
 * the tensor cores' f32 accumulation: the attention output matches the reference before its
 * bf16 rounding to ~1e-5 relative, and o differs from it by at most one bf16 ulp where the
 * value sits near a rounding boundary (gqa.h states the bounds). */

namespace {

typedef pz_gqa_kparams Kp;

__device__ __forceinline__ uint16_t f2bf(float f) { return __bfloat16_as_ushort(__float2bfloat16_rn(f)); }
__device__ __forceinline__ float bf2f(uint16_t h) { return __uint_as_float((uint32_t)h << 16); }
__device__ __forceinline__ uint32_t pack_bf2(uint16_t lo, uint16_t hi) { return (uint32_t)lo | ((uint32_t)hi << 16); }

/* ---------------------------------------------------------------- prologue */

#define PREP_WARPS 4

/* grid (m, ceil((heads + kvh) / 4)), 128 threads: warp w of block y handles vector
 * v = 4y + w: v < heads is query head v, else kv head g = v - heads (its k and its v).
 * Per vector (pz_ref_gqa_attention steps 2-4, the same operations in the same order):
 *   qk_norm: inv = 1 / sqrtf(Σ_j x_j² / d + eps) with the sum sequential in j (every lane runs
 *   it over the staged row: the reference's order, so inv is bit-identical), y_j = (x_j * inv) * w_j;
 *   RoPE (rotate-half over the first r = k.rd dims): c = (float)cos((double)ang) * ms, s likewise,
 *   ang = (float)pos * inv_freq_j (inv_freq_long_j when pos >= rope_long_from: LongRoPE),
 *   y_j' = y_j*c - y_{j+r/2}*s, y_{j+r/2}' = y_{j+r/2}*c + y_j*s (IEEE multiply and add, no FMA)
 *   for j < r/2; y_j' = y_j for j >= r (partial RoPE);
 *   k: k_cache[pos] = bf16(y'), v_cache[pos] = bf16(v);
 *   q: qs = y' * qscale, qhl = (bf16(qs), bf16(qs - hi)). */
__global__ void __launch_bounds__(32 * PREP_WARPS) gqa_prep_kernel(Kp k) {
  __shared__ float sx[PREP_WARPS][PZ_GQA_MAX_D];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int v = blockIdx.y * PREP_WARPS + warp;
  if (v >= k.heads + k.kvh) return;
  const int i = blockIdx.x, d = k.d, half = k.rd / 2;
  const bool is_q = v < k.heads;
  const int g = v - k.heads;
  const int pos = k.pos[i];
  const float *x = k.qkv + (int64_t)i * k.ld_qkv + (int64_t)(is_q ? v : k.heads + g) * d;
  float *row = sx[warp];
  for (int j = lane; j < d; j += 32) row[j] = x[j];
  __syncwarp();
  if (k.qk_norm) {
    float ss = 0.0f;
    for (int j = 0; j < d; j++) ss = __fadd_rn(ss, __fmul_rn(row[j], row[j]));
    const float inv = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(ss, (float)d), k.eps)));
    const uint16_t *w = is_q ? k.q_norm_w : k.k_norm_w;
    float y[PZ_GQA_MAX_D / 32] = {};
#pragma unroll
    for (int t = 0; t < PZ_GQA_MAX_D / 32; t++) {
      const int j = lane + 32 * t;
      if (j < d) y[t] = __fmul_rn(__fmul_rn(row[j], inv), bf2f(w[j]));
    }
    __syncwarp();
#pragma unroll
    for (int t = 0; t < PZ_GQA_MAX_D / 32; t++) {
      const int j = lane + 32 * t;
      if (j < d) row[j] = y[t];
    }
    __syncwarp();
  }
  uint16_t *kc = nullptr;
  if (!is_q) {
    const int64_t off = (int64_t)i * k.seq_stride + (int64_t)g * k.head_stride + (int64_t)pos * d;
    kc = k.k_cache + off;
    uint16_t *vc = k.v_cache + off;
    const float *vx = k.qkv + (int64_t)i * k.ld_qkv + (int64_t)(k.heads + k.kvh + g) * d;
    for (int j = lane; j < d; j += 32) vc[j] = f2bf(vx[j]);
  }
  uint16_t *q = is_q ? k.qhl + ((int64_t)i * k.heads + v) * 2 * d : nullptr;
  for (int j = lane; j < half; j += 32) {
    const float a = row[j], b = row[j + half];
    const float ang = __fmul_rn((float)pos, pos < k.rope_long_from ? k.inv_freq[j] : k.inv_freq_long[j]);
    const float c = __fmul_rn((float)cos((double)ang), k.rope_ms);
    const float s = __fmul_rn((float)sin((double)ang), k.rope_ms);
    const float ya = __fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s));
    const float yb = __fadd_rn(__fmul_rn(b, c), __fmul_rn(a, s));
    if (is_q) {
      const float qa = __fmul_rn(ya, k.qscale), qb = __fmul_rn(yb, k.qscale);
      const uint16_t ha = f2bf(qa), hb = f2bf(qb);
      q[j] = ha;
      q[j + half] = hb;
      q[d + j] = f2bf(__fsub_rn(qa, bf2f(ha)));
      q[d + j + half] = f2bf(__fsub_rn(qb, bf2f(hb)));
    } else {
      kc[j] = f2bf(ya);
      kc[j + half] = f2bf(yb);
    }
  }
  for (int j = 2 * half + lane; j < d; j += 32) { /* partial RoPE: the unrotated tail, as y (normed) */
    if (is_q) {
      const float qa = __fmul_rn(row[j], k.qscale);
      const uint16_t ha = f2bf(qa);
      q[j] = ha;
      q[d + j] = f2bf(__fsub_rn(qa, bf2f(ha)));
    } else {
      kc[j] = f2bf(row[j]);
    }
  }
}

/* ---------------------------------------------------------------- attention */

/* Compile-time shape of the attention kernel for head_dim D. 4 warps; warp w owns positions
 * 16w .. 16w+15 of every BN = 64-position tile and runs its own online softmax over them (no
 * cross-warp exchange inside the loop); the four warps' states merge once at the end. */
template <int D>
struct AttnCfg {
  static constexpr int WARPS = 4, THREADS = 32 * WARPS, BN = PZ_GQA_BN;
  static constexpr int STAGES = 3; /* cp.async ring depth: 2 CTAs per SM at D = 128, 3 at D = 64 */
  static_assert(D % 16 == 0 && D <= PZ_GQA_MAX_D, "head_dim: whole k-steps of 16, at most PZ_GQA_MAX_D");
  static constexpr int RS = D + 8;  /* smem row stride (elements): 16-byte rows of odd count, conflict-free ldmatrix */
  static constexpr int NK = D / 16; /* k-steps of Q·Kᵀ */
  static constexpr int ND = D / 8;  /* n-tiles of P·V */
  static constexpr int CH = D / 8;  /* 16-byte chunks per row */
  static constexpr int OS = D + 4;  /* f32 row stride of the end-of-CTA merge buffer */
  /* sQ [2][16][RS] (hi, lo) | sKV [STAGES][2][BN][RS] (K, V); the merge reuses sKV */
  static constexpr size_t SMEM = (size_t)(2 * 16 * RS + STAGES * 2 * BN * RS) * 2;
  static_assert((size_t)WARPS * 16 * OS * 4 + 2 * WARPS * 16 * 4 <= (size_t)STAGES * 2 * BN * RS * 2,
                "the merge buffer fits the KV ring");
};

/* Slice of the attended KV positions [first, n) that split `split` owns (the combine kernel's rule too): the
 * n - first positions (n = pos + 1; first = kv_first) cut into k.splits chunks of whole BN tiles counted from
 * first; [start, end) may be empty. first 0 (full attention, or a window the sequence fits) is the plain
 * causal split. */
__device__ __forceinline__ int2 split_range(int first, int n, int splits, int split) {
  int chunk = (n - first + splits - 1) / splits;
  chunk = (chunk + PZ_GQA_BN - 1) / PZ_GQA_BN * PZ_GQA_BN;
  const int start = first + split * chunk;
  return make_int2(start, min(n, start + chunk));
}

/* K and V tile `tile` of the slice (rows start + tile*BN .., rows at or past end zero-filled,
 * never read) into ring stage `stage`, by cp.async from every thread. No commit. */
template <int D>
__device__ __forceinline__ void load_tile(uint16_t *sKV, const uint16_t *Kg, const uint16_t *Vg, int start, int end,
                                          int tile, int stage, int tid) {
  using C = AttnCfg<D>;
  const int p0 = start + tile * C::BN;
  uint16_t *dst = sKV + stage * 2 * C::BN * C::RS;
#pragma unroll
  for (int e = tid; e < 2 * C::BN * C::CH; e += C::THREADS) {
    const int kv = e / (C::BN * C::CH), r = (e / C::CH) % C::BN, c = e % C::CH;
    const bool ok = p0 + r < end;
    const uint16_t *base = kv ? Vg : Kg;
    const uint16_t *src = ok ? base + (int64_t)(p0 + r) * D + c * 8 : base;
    cp_async16_l2_256(dst + (kv * C::BN + r) * C::RS + c * 8, src, ok);
  }
}

/* KV positions row i attends: pos[i] + 1, or 1 for a padding row of a captured batch size (i >= *k.rows
 * when 0 < *k.rows < m, gqa.h): its output is discarded. */
__device__ __forceinline__ int kv_len(const Kp &k, int i) {
  return i >= pz_real_rows(k.rows, k.m) ? 1 : k.pos[i] + 1;
}

/* First KV position row i attends: n - W under a sliding window W that n = kv_len positions exceed (the last W
 * positions, its own included: pz_ref_gqa_first_pos), else 0. */
__device__ __forceinline__ int kv_first(const Kp &k, int i) {
  const int n = kv_len(k, i);
  return k.window > 0 && n > k.window ? n - k.window : 0;
}

/* grid (splits, kvh * htiles, m), 128 threads. CTA (split, g * htiles + t, i): query heads
 * h0 = g*ratio + 16t .. (nr of them, the rest of the 16 rows zero) of sequence i against the
 * slice's K/V of kv head g (its share of the positions kv_first .. pos). Writes o (bf16, normalised)
 * when splits == 1, else its unnormalised partial output and (max, sum) per head; an empty slice
 * writes (-inf, 0). */
template <int D>
__global__ void __launch_bounds__(128, 2) gqa_attn_kernel(Kp k) {
  using C = AttnCfg<D>;
  constexpr int BN = C::BN, RS = C::RS, NK = C::NK, ND = C::ND, STAGES = C::STAGES;
  extern __shared__ uint4 smem_raw[];
  uint16_t *sQ = (uint16_t *)smem_raw;
  uint16_t *sKV = sQ + 2 * 16 * RS;

  const int split = blockIdx.x, i = blockIdx.z;
  const int g = blockIdx.y / k.htiles, ht = blockIdx.y - g * k.htiles;
  const int h0 = g * k.ratio + ht * PZ_GQA_HT;
  const int nr = min(PZ_GQA_HT, k.ratio - ht * PZ_GQA_HT);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, gr = lane >> 2, t4 = lane & 3;
  const int2 se = split_range(kv_first(k, i), kv_len(k, i), k.splits, split);
  const int start = se.x, end = se.y;
  if (start >= end) {
    if (tid < nr) {
      float *ml = k.ml + (((int64_t)i * k.splits + split) * k.heads + h0 + tid) * 2;
      ml[0] = -INFINITY;
      ml[1] = 0.0f;
    }
    return;
  }
  const int ntiles = (end - start + BN - 1) / BN;
  const int64_t kvoff = (int64_t)i * k.seq_stride + (int64_t)g * k.head_stride;
  const uint16_t *Kg = k.k_cache + kvoff, *Vg = k.v_cache + kvoff;

  /* Q hi / lo rows (zero beyond nr), joined to the first tile's commit group */
  for (int e = tid; e < 2 * 16 * C::CH; e += C::THREADS) {
    const int part = e / (16 * C::CH), r = (e / C::CH) % 16, c = e % C::CH;
    const bool ok = r < nr;
    const uint16_t *src = ok ? k.qhl + (((int64_t)i * k.heads + h0 + r) * 2 + part) * D + c * 8 : k.qhl;
    cp_async16_l2_256(sQ + (part * 16 + r) * RS + c * 8, src, ok);
  }
#pragma unroll
  for (int s = 0; s < STAGES - 1; s++) {
    if (s < ntiles) load_tile<D>(sKV, Kg, Vg, start, end, s, s, tid);
    cp_commit();
  }

  uint32_t qh[NK][4], ql[NK][4];
  float o[ND][4];
#pragma unroll
  for (int j = 0; j < ND; j++) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;
  float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f; /* rows gr and gr + 8 (base-2 max, partial sum) */

  for (int tile = 0; tile < ntiles; tile++) {
    cp_wait<STAGES - 2>();
    __syncthreads();
    if (tile == 0) {
#pragma unroll
      for (int u = 0; u < NK; u++) {
        ldsm_x4(qh[u], sQ + (lane & 15) * RS + u * 16 + (lane >> 4) * 8);
        ldsm_x4(ql[u], sQ + (16 + (lane & 15)) * RS + u * 16 + (lane >> 4) * 8);
      }
    }
    { /* the next tile into the stage the previous iteration freed (all warps passed the barrier) */
      const int nt = tile + STAGES - 1;
      if (nt < ntiles) load_tile<D>(sKV, Kg, Vg, start, end, nt, nt % STAGES, tid);
      cp_commit();
    }
    const uint16_t *sK = sKV + (tile % STAGES) * 2 * BN * RS + warp * 16 * RS;
    const uint16_t *sV = sK + BN * RS;
    /* S[16 heads x 16 positions] = (q_hi + q_lo) · Kᵀ: four independent accumulator chains */
    float sa[2][4], sb[2][4];
#pragma unroll
    for (int j = 0; j < 2; j++) sa[j][0] = sa[j][1] = sa[j][2] = sa[j][3] = sb[j][0] = sb[j][1] = sb[j][2] = sb[j][3] = 0.0f;
    {
      const uint16_t *kb = sK + ((lane & 7) + ((lane >> 4) & 1) * 8) * RS + ((lane >> 3) & 1) * 8;
#pragma unroll
      for (int u = 0; u < NK; u++) {
        uint32_t b[4];
        ldsm_x4(b, kb + u * 16);
        mma16816(sa[0], qh[u], b[0], b[1]);
        mma16816(sa[1], qh[u], b[2], b[3]);
        mma16816(sb[0], ql[u], b[0], b[1]);
        mma16816(sb[1], ql[u], b[2], b[3]);
      }
    }
    /* mask, online softmax (base 2: q carries log2 e), p split into bf16 hi / lo A fragments */
    const int pb = start + tile * BN + warp * 16 + 2 * t4;
    float s[2][4];
#pragma unroll
    for (int j = 0; j < 2; j++) {
      const bool v0 = pb + j * 8 < end, v1 = pb + j * 8 + 1 < end;
      s[j][0] = v0 ? sa[j][0] + sb[j][0] : -INFINITY;
      s[j][1] = v1 ? sa[j][1] + sb[j][1] : -INFINITY;
      s[j][2] = v0 ? sa[j][2] + sb[j][2] : -INFINITY;
      s[j][3] = v1 ? sa[j][3] + sb[j][3] : -INFINITY;
    }
    float mx0 = fmaxf(fmaxf(s[0][0], s[0][1]), fmaxf(s[1][0], s[1][1]));
    float mx1 = fmaxf(fmaxf(s[0][2], s[0][3]), fmaxf(s[1][2], s[1][3]));
    mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
    mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
    mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
    mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
    const float n0 = fmaxf(m0, mx0), n1 = fmaxf(m1, mx1);
    /* a warp whose positions are all masked so far keeps max -inf: subtract 0 then (exp2 -> 0) */
    const float u0 = n0 == -INFINITY ? 0.0f : n0, u1 = n1 == -INFINITY ? 0.0f : n1;
    const float al0 = exp2f(m0 - u0), al1 = exp2f(m1 - u1);
    m0 = n0;
    m1 = n1;
    float p[2][4];
#pragma unroll
    for (int j = 0; j < 2; j++) {
      p[j][0] = exp2f(s[j][0] - u0);
      p[j][1] = exp2f(s[j][1] - u0);
      p[j][2] = exp2f(s[j][2] - u1);
      p[j][3] = exp2f(s[j][3] - u1);
    }
    l0 = l0 * al0 + ((p[0][0] + p[0][1]) + (p[1][0] + p[1][1]));
    l1 = l1 * al1 + ((p[0][2] + p[0][3]) + (p[1][2] + p[1][3]));
#pragma unroll
    for (int j = 0; j < ND; j++) { o[j][0] *= al0; o[j][1] *= al0; o[j][2] *= al1; o[j][3] *= al1; }
    /* accumulator layout of S (rows gr / gr+8, columns 8j + 2t4 + {0,1}) = A layout of P */
    uint32_t ah[4], al[4];
#pragma unroll
    for (int j = 0; j < 2; j++) {
      uint16_t h[4];
#pragma unroll
      for (int e = 0; e < 4; e++) h[e] = f2bf(p[j][e]);
      ah[2 * j] = pack_bf2(h[0], h[1]);
      ah[2 * j + 1] = pack_bf2(h[2], h[3]);
      al[2 * j] = pack_bf2(f2bf(p[j][0] - bf2f(h[0])), f2bf(p[j][1] - bf2f(h[1])));
      al[2 * j + 1] = pack_bf2(f2bf(p[j][2] - bf2f(h[2])), f2bf(p[j][3] - bf2f(h[3])));
    }
    /* O[16 heads x D] += (p_hi + p_lo) · V[16 positions x D] */
    {
      const uint16_t *vb = sV + ((lane & 7) + ((lane >> 3) & 1) * 8) * RS + (lane >> 4) * 8;
#pragma unroll
      for (int j = 0; j < ND; j += 2) {
        uint32_t b[4];
        ldsm_x4_t(b, vb + j * 8);
        mma16816(o[j], ah, b[0], b[1]);
        mma16816(o[j + 1], ah, b[2], b[3]);
        mma16816(o[j], al, b[0], b[1]);
        mma16816(o[j + 1], al, b[2], b[3]);
      }
    }
  }
  cp_wait<0>();
  __syncthreads(); /* every warp is done with the ring: reuse it for the merge */

  /* row sums over the quad, then the four warps' states merged in warp order */
  l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
  l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
  l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
  l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
  float *sO = (float *)sKV;                 /* [WARPS][16][OS] */
  float *sM = sO + C::WARPS * 16 * C::OS;   /* [WARPS][16] */
  float *sL = sM + C::WARPS * 16;           /* [WARPS][16] */
  {
    float *ow = sO + warp * 16 * C::OS;
#pragma unroll
    for (int j = 0; j < ND; j++) {
      *(float2 *)(ow + gr * C::OS + j * 8 + 2 * t4) = make_float2(o[j][0], o[j][1]);
      *(float2 *)(ow + (gr + 8) * C::OS + j * 8 + 2 * t4) = make_float2(o[j][2], o[j][3]);
    }
    if (t4 == 0) {
      sM[warp * 16 + gr] = m0; sM[warp * 16 + gr + 8] = m1;
      sL[warp * 16 + gr] = l0; sL[warp * 16 + gr + 8] = l1;
    }
  }
  __syncthreads();
  const bool direct = k.splits == 1;
  for (int e = tid; e < nr * (D / 4); e += C::THREADS) {
    const int r = e / (D / 4), c = (e % (D / 4)) * 4;
    float M = sM[r];
#pragma unroll
    for (int w = 1; w < C::WARPS; w++) M = fmaxf(M, sM[w * 16 + r]); /* finite: warp 0 holds the slice's first token */
    float L = 0.0f;
    float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
    for (int w = 0; w < C::WARPS; w++) {
      const float sc = exp2f(sM[w * 16 + r] - M);
      L += sc * sL[w * 16 + r];
      const float4 x = *(const float4 *)(sO + (w * 16 + r) * C::OS + c);
      acc.x += sc * x.x; acc.y += sc * x.y; acc.z += sc * x.z; acc.w += sc * x.w;
    }
    const int h = h0 + r;
    if (direct) {
      const float inv = 1.0f / L;
      uint2 pk;
      pk.x = pack_bf2(f2bf(acc.x * inv), f2bf(acc.y * inv));
      pk.y = pack_bf2(f2bf(acc.z * inv), f2bf(acc.w * inv));
      *(uint2 *)(k.o + ((int64_t)i * k.heads + h) * D + c) = pk;
    } else {
      const int64_t row = ((int64_t)i * k.splits + split) * k.heads + h;
      *(float4 *)(k.opart + row * D + c) = acc;
      if (c == 0) { k.ml[row * 2] = M; k.ml[row * 2 + 1] = L; }
    }
  }
}

/* ---------------------------------------------------------------- combine */

#define COMB_WARPS 4
/* grid (m, ceil(heads / 4)), 128 threads, one warp per (sequence i, head h):
 * o[i, h] = bf16(Σ_s w_s O_s / Σ_s w_s l_s), w_s = exp2(max_s - max), over the non-empty splits
 * (the first ceil((n - first) / chunk), split_range's rule), s in order; 4 columns per lane (float4). */
__global__ void __launch_bounds__(32 * COMB_WARPS) gqa_combine_kernel(Kp k) {
  __shared__ float sw[COMB_WARPS][PZ_GQA_MAX_SPLITS];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int i = blockIdx.x, h = blockIdx.y * COMB_WARPS + warp;
  if (h >= k.heads) return;
  const int n = kv_len(k, i), first = kv_first(k, i);
  int nv = 0;
  while (nv < k.splits && split_range(first, n, k.splits, nv).x < n) nv++;
  const int64_t sstride = (int64_t)k.heads; /* rows between splits */
  const int64_t row0 = (int64_t)i * k.splits * k.heads + h;
  float mx = -INFINITY;
  for (int s = lane; s < nv; s += 32) mx = fmaxf(mx, k.ml[(row0 + s * sstride) * 2]);
  for (int o = 16; o; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
  float den = 0.0f;
  for (int s = lane; s < nv; s += 32) {
    const float w = exp2f(k.ml[(row0 + s * sstride) * 2] - mx);
    sw[warp][s] = w;
    den += w * k.ml[(row0 + s * sstride) * 2 + 1];
  }
  for (int o = 16; o; o >>= 1) den += __shfl_xor_sync(0xffffffffu, den, o);
  __syncwarp();
  const float inv = 1.0f / den;
  const int d = k.d;
  for (int c = lane * 4; c < d; c += 128) {
    float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    for (int s = 0; s < nv; s++) {
      const float4 x = *(const float4 *)(k.opart + (row0 + s * sstride) * d + c);
      const float w = sw[warp][s];
      acc.x += w * x.x; acc.y += w * x.y; acc.z += w * x.z; acc.w += w * x.w;
    }
    uint2 pk;
    pk.x = pack_bf2(f2bf(acc.x * inv), f2bf(acc.y * inv));
    pk.y = pack_bf2(f2bf(acc.z * inv), f2bf(acc.w * inv));
    *(uint2 *)(k.o + ((int64_t)i * k.heads + h) * d + c) = pk;
  }
}

typedef void (*attn_fn)(Kp);
attn_fn pick_attn(int d) {
  switch (d) {
    case 16: return gqa_attn_kernel<16>;
    case 32: return gqa_attn_kernel<32>;
    case 64: return gqa_attn_kernel<64>;
    case 96: return gqa_attn_kernel<96>; /* Phi-3-mini / Phi-3.5-mini */
    case 128: return gqa_attn_kernel<128>;
    default: return nullptr;
  }
}

} // namespace

extern "C" size_t pz_gqa_k_attn_smem(int d) {
  switch (d) {
    case 16: return AttnCfg<16>::SMEM;
    case 32: return AttnCfg<32>::SMEM;
    case 64: return AttnCfg<64>::SMEM;
    case 96: return AttnCfg<96>::SMEM;
    case 128: return AttnCfg<128>::SMEM;
    default: return 0;
  }
}

extern "C" pz_status pz_gqa_k_setup(int d, int *ctas_per_sm) {
  attn_fn f = pick_attn(d);
  if (!f) return pz_error(PZ_ERR_UNSUPPORTED, "gqa cuda: no attention kernel for head_dim %d (16, 32, 64, 96 and 128 have one)", d);
  const size_t smem = pz_gqa_k_attn_smem(d);
  PZ_CUDA_CHECK(cudaFuncSetAttribute(f, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
  int n = 0;
  PZ_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, f, 128, smem));
  if (n < 1) return pz_error(PZ_ERR_UNSUPPORTED, "gqa cuda: attention kernel (%zu B smem) does not fit an SM", smem);
  if (ctas_per_sm) *ctas_per_sm = n;
  return PZ_OK;
}

extern "C" pz_status pz_gqa_k_prep(const Kp *k, cudaStream_t s) {
  dim3 grid((unsigned)k->m, (unsigned)((k->heads + k->kvh + PREP_WARPS - 1) / PREP_WARPS));
  gqa_prep_kernel<<<grid, 32 * PREP_WARPS, 0, s>>>(*k);
  PZ_CUDA_CHECK(cudaGetLastError());
  return PZ_OK;
}

extern "C" pz_status pz_gqa_k_attn(const Kp *k, cudaStream_t s) {
  attn_fn f = pick_attn(k->d);
  if (!f) return pz_error(PZ_ERR_UNSUPPORTED, "gqa cuda: no attention kernel for head_dim %d", k->d);
  dim3 grid((unsigned)k->splits, (unsigned)(k->kvh * k->htiles), (unsigned)k->m);
  f<<<grid, 128, pz_gqa_k_attn_smem(k->d), s>>>(*k);
  PZ_CUDA_CHECK(cudaGetLastError());
  return PZ_OK;
}

extern "C" pz_status pz_gqa_k_combine(const Kp *k, cudaStream_t s) {
  if (k->splits <= 1) return PZ_OK;
  dim3 grid((unsigned)k->m, (unsigned)((k->heads + COMB_WARPS - 1) / COMB_WARPS));
  gqa_combine_kernel<<<grid, 32 * COMB_WARPS, 0, s>>>(*k);
  PZ_CUDA_CHECK(cudaGetLastError());
  return PZ_OK;
}
