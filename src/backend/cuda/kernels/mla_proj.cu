/* The MLA op's two per-head projections on tensor cores (sm_80+ mma.sync, bf16 in, f32 accumulate):
 *   absorb: q_lat[i, h, c] = bf16( Σ_d bf16(q_nope[i, h, d]) · W_UK[h, d, c] ), d < nope, c < L
 *   W_UV:   o[i, h·vd + e] = bf16( Σ_c bf16(olat[i, h, c]) · W_UV[h, e, c] ),   c < L,    e < vd
 * Both are a batched GEMM out[i, n] = Σ_k A[i, k] · B_h(k, n) per head h, with f32 A rows (the q_b
 * output, the combine's output) rounded to bf16 as they are read and bf16 weights: W_UK is stored
 * k-major ([d][c], "KN"), W_UV n-major ([e][c], "NK").
 *
 * The exact kernels of mla_kernels.cu (f32 products and sums in the reference's order) stay for
 * PREZERO_MLA_PROJ=0 and for shapes this path does not take (pz_mla_k_proj_tc_ok). They ran on the CUDA
 * cores at 2 x 2 outputs per thread and reloaded W per 16 rows; W_UV's transposed shared-memory store
 * hit one bank 32 times. Rounding A to bf16 is what the attention kernels already do to q_lat.
 *
 * Layout (ours): a CTA of 4 warps owns 64 output columns n of one head and BM = 16 / 32 / 64 rows,
 * and streams K in 64-wide chunks through a 3-stage cp.async ring: A as f32 [BM][72] (8 floats of
 * padding: the 8-byte fragment loads of a half-warp hit distinct banks), B as bf16 [64][72] ([k][n]
 * for KN, read with ldmatrix.trans; [n][k] for NK, read with 4-byte loads). Warp w takes rows
 * 16 (w % (BM/16)) and 64 / (4 / (BM/16)) columns: mma m16n8k16 tiles (PTX ISA, "Matrix fragments for
 * mma.m16n8k16" and "ldmatrix"). Rows past m and columns past N load as zeros and are not stored.
 * Needs K and N multiples of 8 and 16-byte aligned weights (pz_mla_k_proj_tc_ok); q rows that are not
 * 16-byte aligned are loaded without cp.async. */
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include "backend/cuda/kernels/pdl.cuh"
extern "C" {
#include "core/status.h"
}
#include "backend/cuda/cuda_util.h"
#include "backend/cuda/mla_kernels.h"
#include "backend/cuda/kernels/mla_attn_common.cuh" /* pack_bf2 */
#include "backend/cuda/kernels/mla_rope.cuh"
#include "backend/cuda/kernels/mma_sync_ops.cuh"

namespace {

constexpr int KC = 64;      /* K per chunk */
constexpr int NB = 64;      /* output columns per CTA */
constexpr int STAGES = 3;   /* cp.async ring depth */
constexpr int APAD = 72;    /* floats per A row in shared memory */
constexpr int BPAD = 72;    /* bf16 per B row in shared memory */
constexpr int THREADS = 128;

template <int BM>
struct Sz {
  static constexpr int STAGE = BM * APAD * 4 + 64 * BPAD * 2; /* bytes of one ring stage: A, then B */
  static constexpr int SMEM = STAGES * STAGE;
};

/* The per-call view of one projection: A row i of head h at A + i·lda + h·ldah (f32), B_h at W + h·ldwh
 * (KN: row k at + k·ldw; NK: row n at + n·ldw), out row i of head h at out + i·ldo + h·ldoh (bf16). */
struct Proj {
  const float *A;
  int64_t lda, ldah;
  const uint16_t *W;
  int64_t ldw, ldwh;
  uint16_t *out;
  int64_t ldo, ldoh;
  int m, K, N;
};

__device__ __forceinline__ Proj absorb_view(const pz_mla_kparams &k) {
  return Proj{k.q, k.ldq, k.qh, k.w_uk, k.L, (int64_t)k.nope * k.L, k.qabs, (int64_t)k.heads * k.kvw, k.kvw,
              k.m, k.nope, k.L};
}
__device__ __forceinline__ Proj wuv_view(const pz_mla_kparams &k) {
  return Proj{k.olat, (int64_t)k.heads * k.L, k.L, k.w_uv, k.L, (int64_t)k.vd * k.L, k.o, (int64_t)k.heads * k.vd,
              k.vd, k.m, k.L, k.vd};
}

/* Chunk kc of A (rows i0.., columns kc·64..) and B_h into stage buffers sa / sb. */
template <int BM, bool KN>
__device__ __forceinline__ void load_chunk(const Proj &p, int h, int i0, int n0, int kc, float *sa, uint16_t *sb) {
  const int k0 = kc * KC;
  const float *ah = p.A + (int64_t)h * p.ldah;
  /* A's rows in 16-byte copies where they are 16-byte aligned (always for olat and the op's q scratch; a
   * prezero q_b slot of another width may not be), else loaded and stored here: the same values either way */
  const bool vec = (((uintptr_t)p.A | (uintptr_t)(p.lda * 4) | (uintptr_t)(p.ldah * 4)) & 15) == 0;
  for (int v = threadIdx.x; v < BM * (KC / 4); v += THREADS) {
    const int r = v / (KC / 4), c = (v % (KC / 4)) * 4;
    const bool ok = i0 + r < p.m && k0 + c < p.K;
    const float *src = ah + (int64_t)(i0 + r) * p.lda + k0 + c;
    if (vec) {
      cp_async16(sa + r * APAD + c, ok ? src : p.A, ok);
    } else {
#pragma unroll
      for (int u = 0; u < 4; u++) sa[r * APAD + c + u] = ok ? src[u] : 0.0f;
    }
  }
  const uint16_t *wh = p.W + (int64_t)h * p.ldwh;
  for (int v = threadIdx.x; v < 64 * (64 / 8); v += THREADS) {
    const int r = v / 8, c = (v % 8) * 8;
    /* KN: row r = k0 + r, columns n0 + c..; NK: row r = n0 + r, columns k0 + c.. */
    const bool ok = KN ? (k0 + r < p.K && n0 + c < p.N) : (n0 + r < p.N && k0 + c < p.K);
    const uint16_t *src = KN ? wh + (int64_t)(k0 + r) * p.ldw + n0 + c : wh + (int64_t)(n0 + r) * p.ldw + k0 + c;
    cp_async16(sb + r * BPAD + c, ok ? src : p.W, ok);
  }
}

/* grid (ceil(N / 64), heads, ceil(m / BM)), 128 threads, Sz<BM>::SMEM. ABSORB: the W_UK absorption
 * (KN weights; the CTAs of column block 0 also write RoPE(q_pe)); else W_UV (NK weights). */
template <int BM, bool ABSORB>
__global__ void __launch_bounds__(THREADS) mla_proj_kernel(const pz_mla_kparams k) {
  constexpr bool KN = ABSORB;
  constexpr int WM = BM / 16;     /* warps along rows */
  constexpr int WN = 4 / WM;      /* warps along columns */
  constexpr int NT = NB / WN / 8; /* n8 tiles per warp (even: ldmatrix.x4 takes two) */
  if (!ABSORB) pz_pdl_trigger();  /* the o_proj GEMM after W_UV may start its weight loads (kernels/pdl.cuh) */
  extern __shared__ __align__(16) unsigned char smem[];
  const Proj p = ABSORB ? absorb_view(k) : wuv_view(k);
  const int n0 = blockIdx.x * NB, h = blockIdx.y, i0 = blockIdx.z * BM;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int wr = (warp % WM) * 16, wc = (warp / WM) * (NB / WN);
  const int nck = (p.K + KC - 1) / KC;
  auto sa_of = [&](int s) { return (float *)(smem + s * Sz<BM>::STAGE); };
  auto sb_of = [&](int s) { return (uint16_t *)(smem + s * Sz<BM>::STAGE + BM * APAD * 4); };

#pragma unroll
  for (int s = 0; s < STAGES - 1; s++) {
    if (s < nck) load_chunk<BM, KN>(p, h, i0, n0, s, sa_of(s), sb_of(s));
    cp_commit();
  }
  float acc[NT][4];
#pragma unroll
  for (int j = 0; j < NT; j++) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;

  for (int kc = 0; kc < nck; kc++) {
    const int nx = kc + STAGES - 1;
    if (nx < nck) load_chunk<BM, KN>(p, h, i0, n0, nx, sa_of(nx % STAGES), sb_of(nx % STAGES));
    cp_commit();
    cp_wait<STAGES - 1>();
    __syncthreads();
    const float *sa = sa_of(kc % STAGES);
    const uint16_t *sb = sb_of(kc % STAGES);
#pragma unroll
    for (int ks = 0; ks < KC / 16; ks++) {
      const int kq = ks * 16 + 2 * (lane & 3);
      const float *a0 = sa + (wr + (lane >> 2)) * APAD + kq;
      const float2 x00 = *(const float2 *)a0, x10 = *(const float2 *)(a0 + 8 * APAD);
      const float2 x01 = *(const float2 *)(a0 + 8), x11 = *(const float2 *)(a0 + 8 * APAD + 8);
      const uint32_t a[4] = {pack_bf2(x00.x, x00.y), pack_bf2(x10.x, x10.y), pack_bf2(x01.x, x01.y), pack_bf2(x11.x, x11.y)};
#pragma unroll
      for (int j = 0; j < NT; j += 2) {
        uint32_t b[4];
        if (KN) {
          /* matrices: (k 0-7, n j), (k 8-15, n j), (k 0-7, n j+1), (k 8-15, n j+1), transposed */
          const int q = lane >> 3;
          ldsm_x4_t(b, sb + (ks * 16 + (q & 1) * 8 + (lane & 7)) * BPAD + wc + (j + (q >> 1)) * 8);
        } else {
          const uint16_t *r0 = sb + (wc + j * 8 + (lane >> 2)) * BPAD + kq;
          const uint16_t *r1 = r0 + 8 * BPAD;
          b[0] = *(const uint32_t *)r0;
          b[1] = *(const uint32_t *)(r0 + 8);
          b[2] = *(const uint32_t *)r1;
          b[3] = *(const uint32_t *)(r1 + 8);
        }
        mma16816(acc[j], a, b[0], b[1]);
        mma16816(acc[j + 1], a, b[2], b[3]);
      }
    }
    __syncthreads(); /* the stage is refilled by the next iteration's loads */
  }
  cp_wait<0>();

#pragma unroll
  for (int j = 0; j < NT; j++) {
    const int n = n0 + wc + j * 8 + 2 * (lane & 3);
    const int r = i0 + wr + (lane >> 2);
    if (n < p.N) {
      if (r < p.m) *(uint32_t *)(p.out + (int64_t)r * p.ldo + (int64_t)h * p.ldoh + n) = pack_bf2(acc[j][0], acc[j][1]);
      if (r + 8 < p.m)
        *(uint32_t *)(p.out + (int64_t)(r + 8) * p.ldo + (int64_t)h * p.ldoh + n) = pack_bf2(acc[j][2], acc[j][3]);
    }
  }
  if (ABSORB && blockIdx.x == 0) rope_q_rows(k, h, i0, min(BM, k.m - i0));
}

template <int BM, bool ABSORB>
pz_status launch_bm(const pz_mla_kparams *k, cudaStream_t s) {
  const int N = ABSORB ? k->L : k->vd;
  const dim3 grid((unsigned)((N + NB - 1) / NB), (unsigned)k->heads, (unsigned)((k->m + BM - 1) / BM));
  mla_proj_kernel<BM, ABSORB><<<grid, THREADS, Sz<BM>::SMEM, s>>>(*k);
  PZ_CUDA_CHECK(cudaGetLastError());
  return PZ_OK;
}

template <bool ABSORB>
pz_status launch(const pz_mla_kparams *k, cudaStream_t s) {
  if (k->m <= 16) return launch_bm<16, ABSORB>(k, s);
  if (k->m <= 32) return launch_bm<32, ABSORB>(k, s);
  return launch_bm<64, ABSORB>(k, s);
}

template <int BM>
cudaError_t setup_bm() {
  cudaError_t e = cudaFuncSetAttribute(mla_proj_kernel<BM, true>, cudaFuncAttributeMaxDynamicSharedMemorySize, Sz<BM>::SMEM);
  if (e == cudaSuccess)
    e = cudaFuncSetAttribute(mla_proj_kernel<BM, false>, cudaFuncAttributeMaxDynamicSharedMemorySize, Sz<BM>::SMEM);
  return e;
}

} // namespace

extern "C" int pz_mla_k_proj_tc_ok(const pz_mla_kparams *k) {
  /* 16-byte cp.async rows of W: K and N multiples of 8 (the 8-element column groups, which also keeps the
   * f32 olat rows in 16-byte pieces) and 16-byte aligned bases; bf16 pairs stored. Nothing here depends on
   * q's pointer or stride, which differ with a prezero q_b slot set or unset: both take the same path. */
  const uintptr_t al = (uintptr_t)k->w_uk | (uintptr_t)k->w_uv | (uintptr_t)k->olat;
  return k->proj_tc != 0 && k->nope % 8 == 0 && k->L % 8 == 0 && k->vd % 8 == 0 && k->kvw % 2 == 0 && (al & 15) == 0 &&
         ((uintptr_t)k->qabs & 3) == 0 && ((uintptr_t)k->o & 3) == 0;
}

extern "C" pz_status pz_mla_k_absorb_tc(const pz_mla_kparams *k, cudaStream_t s) { return launch<true>(k, s); }
extern "C" pz_status pz_mla_k_wuv_tc(const pz_mla_kparams *k, cudaStream_t s) { return launch<false>(k, s); }

extern "C" pz_status pz_mla_k_proj_tc_setup(void) {
  PZ_CUDA_CHECK(setup_bm<16>());
  PZ_CUDA_CHECK(setup_bm<32>());
  PZ_CUDA_CHECK(setup_bm<64>());
  return PZ_OK;
}
