/* Split-K GEMM kernels for decode shapes (sm_90a): W streamed from HBM with 16-byte loads straight
 * into mma.sync m16n8k16 fragments, activations through L1; flavours 1, 2, 4, 5 of gemm.h. */
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdlib.h>
extern "C" { /* core/status.h has no C++ guards of its own */
#include "core/status.h"
}
#include "backend/cuda/cuda_util.h"
#include "backend/cuda/gemm.h"
#include "backend/cuda/kernels/gemm_epilogue.cuh"

/* Layout (our own; the "weights as the MMA A operand" idea is the usual swap for skinny GEMMs):
 * - The MMA's 16-row side is W (16 output columns n), its 8-column side is 8 tokens of A.
 * - K is consumed in chunks of 32. Lane (g = lane/4, q = lane%4) loads 16 bytes
 *   W[n0+g(+8)][32c + 8q .. 8q+7] and A[t0+g][32c + 8q .. 8q+7]. Because a dot product does
 *   not care in which order k is summed, those 8 k values are fed to the MMA as its logical
 *   k {2q,2q+1, 2q+8,2q+9} (step 0) and again (step 1): every k in the chunk is used once and
 *   each 16-byte load lands directly in fragment registers, no shared memory for operands.
 * - A CTA (8 warps) owns NT = 16*WT output columns and one K slice; warp w takes chunks
 *   w, w+8, ... so the CTA's loads of one step cover 16 rows x 512 contiguous bytes. Warps are
 *   reduced in shared memory in a fixed tree order, so a CTA's partial is deterministic. */

namespace {

struct Params {
  const __nv_bfloat16 *A;
  int64_t lda;
  const __nv_bfloat16 *W;
  int64_t ldw;
  void *C;
  int64_t ldc;
  const float *bias;
  int *sems;
  int m, n, k;
  int splits;
  pz_gemm_flavour mode; /* SPLITK_ATOMIC, SPLITK_ZERO (in-kernel zero), FULLK (store), SPLITK_SERIAL */
  int c_bf16;
  int l2pf; /* 1: W loads carry the L2::256B prefetch-size hint (default; PREZERO_GEMM_L2PF=0: off) */
};

/* W load with the L2 prefetch-size hint: the L2 fetches the whole 256-byte block from DRAM,
 * which the CTA's other warps request within a few cycles (their chunks are adjacent). */
__device__ __forceinline__ uint4 ld_stream_pf(const void *p) {
  uint4 r;
  asm("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];"
      : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
      : "l"(p));
  return r;
}
__device__ __forceinline__ uint4 ld_stream(const void *p) {
  uint4 r;
  asm("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
      : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
      : "l"(p));
  return r;
}

__device__ __forceinline__ void mma_bf16(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                         uint32_t a3, uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

/* MT8: 8-token tiles per CTA (1..16); WT: 16-row W tiles per warp (1, 2); U: chunks in flight
 * per warp (a register ring: chunk i+U is requested as soon as chunk i has been consumed);
 * NW: warps per CTA (4, 8); WN: false = the CTA's warps share its NT columns and interleave
 * its K chunks (reduced in shared memory), true = each warp owns NT columns of its own and
 * walks every chunk of the slice (the warps read the same A chunk, so A hits L1).
 * XP: A fragments are prefetched in the ring too (small m only). */
/* Shared-memory slot of accumulator element r of fragment (i, j) held by lane (g, q): token
 * 8j + 2q + (r & 1) at row `stride`, column col + 16i + g + 8(r >> 1) (the m16n8 C layout). */
__device__ __forceinline__ int frag_slot(int i, int j, int r, int g, int q, int stride, int col) {
  return (8 * j + 2 * q + (r & 1)) * stride + col + 16 * i + g + 8 * (r >> 1);
}

/* Calls f(i, j, r) for every accumulator element of a warp's WT x MT8 fragments (unrolled). */
template <int WT, int MT8, class F>
__device__ __forceinline__ void for_each_acc(F &&f) {
#pragma unroll
  for (int i = 0; i < WT; i++)
#pragma unroll
    for (int j = 0; j < MT8; j++)
#pragma unroll
      for (int r = 0; r < 4; r++) f(i, j, r);
}

template <int MT8, int WT, int U, int NW, bool WN>
__global__ void __launch_bounds__(NW * 32, MT8 <= 2 ? 16 / NW : 1) gemm_splitk_kernel(Params p) {
  constexpr int TOK = MT8 * 8;
  constexpr int NT = WT * 16;             /* columns per warp */
  constexpr int NTC = WN ? NW * NT : NT;  /* columns per CTA */
  constexpr int NTP = NT + 4;             /* padded rows: lanes (g, q) hit distinct banks */
  constexpr int NTCP = NTC + 4;
  constexpr int NTHR = NW * 32;
  constexpr bool XP = MT8 <= 2;
  constexpr int RED = WN ? TOK * NTCP : (NW / 2) * TOK * NTP;
  __shared__ float red[RED];

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 2, q = lane & 3;
  const gemm_tile gt = gemm_tile_of<TOK, NTC>(p);
  const int n0 = gt.n0, split = gt.split, t0 = gt.t0, tile = gt.tile;
  const int c_begin = gt.c_begin, c_end = gt.c_end, rows = gt.rows;

  tile_zero_prologue<NTC, NTHR>(p, gt); /* flavour 2: split 0 zeroes the C tile, then raises its flag */

  float acc[WT][MT8][4];
#pragma unroll
  for (int i = 0; i < WT; i++)
#pragma unroll
    for (int j = 0; j < MT8; j++)
#pragma unroll
      for (int r = 0; r < 4; r++) acc[i][j][r] = 0.0f;

  const int wcol = WN ? warp * NT : 0; /* this warp's first column inside the CTA tile */
  const __nv_bfloat16 *wbase = p.W + (int64_t)(n0 + wcol + g) * p.ldw + q * 8;
  const __nv_bfloat16 *abase = p.A + q * 8;
  const uint4 zero4 = make_uint4(0, 0, 0, 0);
  /* This warp's chunks: first + i * stride. Interleaved: one step of the CTA's warps reads
   * 16 rows x NW*64 contiguous bytes; WN: each warp reads its rows' slice front to back. */
  const int stride = WN ? 1 : NW;
  const int first = WN ? c_begin : c_begin + warp;
  const int nmine = first < c_end ? (c_end - first + stride - 1) / stride : 0;

  uint4 w[U][WT][2];
  uint4 xp[XP ? U : 1][MT8];
  auto load_slot = [&](uint4(&ws)[WT][2], uint4(&xs)[MT8], int c) {
#pragma unroll
    for (int i = 0; i < WT; i++)
#pragma unroll
      for (int h = 0; h < 2; h++) {
        const __nv_bfloat16 *src = wbase + (int64_t)(i * 16 + h * 8) * p.ldw + c * 32;
        ws[i][h] = p.l2pf ? ld_stream_pf(src) : ld_stream(src);
      }
    if (XP) {
#pragma unroll
      for (int j = 0; j < MT8; j++) {
        const int t = t0 + j * 8 + g;
        xs[j] = t < p.m ? __ldg((const uint4 *)(abase + (int64_t)t * p.lda + c * 32)) : zero4;
      }
    }
  };
#pragma unroll
  for (int u = 0; u < U; u++) {
    if (u < nmine) load_slot(w[u], xp[XP ? u : 0], first + u * stride);
  }
  for (int i0 = 0; i0 < nmine; i0 += U) {
#pragma unroll
    for (int u = 0; u < U; u++) {
      const int i = i0 + u;
      if (i < nmine) { /* warp-uniform */
        const int c = first + i * stride;
#pragma unroll
        for (int j = 0; j < MT8; j++) {
          uint4 x;
          if (XP) {
            x = xp[XP ? u : 0][j];
          } else {
            const int t = t0 + j * 8 + g;
            x = t < p.m ? __ldg((const uint4 *)(abase + (int64_t)t * p.lda + c * 32)) : zero4;
          }
#pragma unroll
          for (int wi = 0; wi < WT; wi++) {
            mma_bf16(acc[wi][j], w[u][wi][0].x, w[u][wi][1].x, w[u][wi][0].y, w[u][wi][1].y, x.x, x.y);
            mma_bf16(acc[wi][j], w[u][wi][0].z, w[u][wi][1].z, w[u][wi][0].w, w[u][wi][1].w, x.z, x.w);
          }
        }
        if (i + U < nmine) load_slot(w[u], xp[XP ? u : 0], c + U * stride);
      }
    }
  }

  /* Fragment element r of tile (i, j): column 16i + g + 8*(r>>1), token 8j + 2q + (r&1). */
  if (WN) {
    for_each_acc<WT, MT8>([&](int i, int j, int r) { red[frag_slot(i, j, r, g, q, NTCP, wcol)] = acc[i][j][r]; });
  } else {
    /* Fixed-order tree over the warps, e.g. for 8: ((w0+w4)+(w2+w6)) + ((w1+w5)+(w3+w7)). */
#pragma unroll
    for (int half = NW / 2; half >= 1; half >>= 1) {
      if (warp >= half && warp < 2 * half) {
        float *s = red + (warp - half) * TOK * NTP;
        for_each_acc<WT, MT8>([&](int i, int j, int r) { s[frag_slot(i, j, r, g, q, NTP, 0)] = acc[i][j][r]; });
      }
      __syncthreads();
      if (warp < half) {
        const float *s = red + warp * TOK * NTP;
        for_each_acc<WT, MT8>([&](int i, int j, int r) { acc[i][j][r] += s[frag_slot(i, j, r, g, q, NTP, 0)]; });
      }
      __syncthreads();
    }
    if (warp == 0) {
      for_each_acc<WT, MT8>([&](int i, int j, int r) { red[frag_slot(i, j, r, g, q, NTCP, 0)] = acc[i][j][r]; });
    }
  }

  tile_epilogue_from_smem<NTC, NTCP, NTHR>(p, red, rows, t0, n0, split, tile);
}

template <int MT8, int WT, int NW, bool WN>
cudaError_t launch_t(const Params &p, dim3 grid, cudaStream_t s) {
  /* Ring depth U: 16-byte W loads in flight per thread = 2*WT*U: 12-16 for m <= 8, 8 for
   * m <= 32, 4 above, where the prefetched A fragments (m <= 16) or the accumulators and the
   * A loads the compiler hoists (m > 16) need the registers. m <= 16 is held to 128 registers
   * (16 warps per SM). Register use and spills: -Xptxas -v (bench/gemm/device.sh logs it). */
  constexpr int U = MT8 == 1 ? (WT == 1 ? 6 : 4) : MT8 <= 4 ? 4 / WT : (WT == 1 ? 2 : 1);
  gemm_splitk_kernel<MT8, WT, U, NW, WN><<<grid, NW * 32, 0, s>>>(p);
  return cudaGetLastError();
}

template <int NW, bool WN>
cudaError_t launch_nw(const Params &p, int mt8, int wt, dim3 grid, cudaStream_t s) {
  switch (mt8 * 10 + wt) {
    case 11: return launch_t<1, 1, NW, WN>(p, grid, s);
    case 12: return launch_t<1, 2, NW, WN>(p, grid, s);
    case 21: return launch_t<2, 1, NW, WN>(p, grid, s);
    case 22: return launch_t<2, 2, NW, WN>(p, grid, s);
    case 41: return launch_t<4, 1, NW, WN>(p, grid, s);
    case 42: return launch_t<4, 2, NW, WN>(p, grid, s);
    case 81: return launch_t<8, 1, NW, WN>(p, grid, s);
    case 82: return launch_t<8, 2, NW, WN>(p, grid, s);
    default: return launch_t<16, 1, NW, WN>(p, grid, s);
  }
}

int mt8_for(int m) {
  if (m <= 8) return 1;
  if (m <= 16) return 2;
  if (m <= 32) return 4;
  if (m <= 64) return 8;
  return 16;
}

__device__ __forceinline__ uint32_t hash32(uint32_t x) {
  x ^= x >> 16;
  x *= 0x7feb352dU;
  x ^= x >> 15;
  x *= 0x846ca68bU;
  x ^= x >> 16;
  return x;
}

__global__ void fill_kernel(__nv_bfloat16 *p, int64_t n, uint32_t seed, int ints) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    uint32_t h = hash32((uint32_t)i * 0x9e3779b9U ^ hash32(seed + (uint32_t)(i >> 32)));
    float v = ints ? (float)((int)(h % 9u) - 4) : ((float)(h >> 8) * (2.0f / 16777216.0f) - 1.0f);
    p[i] = __float2bfloat16_rn(v);
  }
}

__global__ void bias_kernel(void *C, int64_t ldc, int bf, const float *bias, int m, int n) {
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < (int64_t)m * n;
       e += (int64_t)gridDim.x * blockDim.x) {
    int64_t t = e / n, j = e - t * n;
    int64_t off = t * ldc + j;
    if (bf) {
      __nv_bfloat16 *c = (__nv_bfloat16 *)C;
      c[off] = __float2bfloat16_rn(__bfloat162float(c[off]) + bias[j]);
    } else {
      ((float *)C)[off] += bias[j];
    }
  }
}

__global__ void __launch_bounds__(512) stream_read_kernel(const uint4 *p, int64_t n16, unsigned *sink) {
  unsigned acc = 0;
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  for (; i + 3 * stride < n16; i += 4 * stride) {
    uint4 a = ld_stream(p + i), b = ld_stream(p + i + stride);
    uint4 c = ld_stream(p + i + 2 * stride), d = ld_stream(p + i + 3 * stride);
    acc ^= a.x ^ a.y ^ a.z ^ a.w ^ b.x ^ b.y ^ b.z ^ b.w ^ c.x ^ c.y ^ c.z ^ c.w ^ d.x ^ d.y ^ d.z ^ d.w;
  }
  for (; i < n16; i += stride) {
    uint4 a = ld_stream(p + i);
    acc ^= a.x ^ a.y ^ a.z ^ a.w;
  }
  if (acc == 0x9e3779b9U) *sink = acc; /* practically never; keeps the loads alive */
}

} // namespace

extern "C" pz_status pz_gemm_kernels_init(bool hopper) {
  if (hopper) PZ_CHECK(pz_gemm_wgmma_init()); /* sm_90a kernels: Hopper only */
  return PZ_OK;
}

extern "C" int64_t pz_gemm_sem_need(int m, int n, int wt) {
  int mt8 = mt8_for(m);
  if (mt8 == 16) wt = 1;
  int64_t tiles = (int64_t)(n / (16 * wt)) * ((m + mt8 * 8 - 1) / (mt8 * 8));
  return 2 * tiles; /* the warps-along-n layout has fewer, wider tiles: this bounds it too */
}

extern "C" pz_status pz_gemm_kernel_launch(const pz_gemm_args *a, const pz_gemm_config *cfg, int *sems,
                                           int64_t sem_capacity, cudaStream_t stream) {
  if (!cfg) return pz_error(PZ_ERR_INVALID_ARG, "gemm kernel: NULL config");
  const pz_gemm_flavour flavour = cfg->flavour;
  int splits = cfg->splits, wt = cfg->wt, warps = cfg->warps;
  const int wn = cfg->wn;
  if (wn == 3) return pz_gemm_wgmma_launch(a, flavour, splits, wt, warps, cfg->bn, sems, sem_capacity, stream);
  if (wn == 4) return pz_gemm_wgmma_streamk_launch(a, flavour, splits, wt, stream);
  if (warps == 0) warps = 8;
  if (warps != 4 && warps != 8) return pz_error(PZ_ERR_INVALID_ARG, "gemm kernel: warps %d not 4 or 8", warps);
  if (flavour != PZ_GEMM_SPLITK_ATOMIC && flavour != PZ_GEMM_SPLITK_ZERO && flavour != PZ_GEMM_FULLK &&
      flavour != PZ_GEMM_SPLITK_SERIAL)
    return pz_error(PZ_ERR_INVALID_ARG, "gemm kernel: flavour %s is not a kernel flavour", pz_gemm_flavour_name(flavour));
  const int mt8 = mt8_for(a->m);
  if (mt8 == 16) wt = 1;
  if (wt != 1 && wt != 2) return pz_error(PZ_ERR_INVALID_ARG, "gemm kernel: wt %d not 1 or 2", wt);
  if (wn != 0 && wn != 1)
    return pz_error(PZ_ERR_INVALID_ARG, "gemm kernel: kernel wn %d is not 0, 1, 3 or 4 (the staged wn 2 was removed)", wn);
  const int cols = 16 * wt * (wn ? warps : 1); /* output columns per CTA */
  if (a->n % cols)
    return pz_error(PZ_ERR_INVALID_ARG, "gemm kernel: n=%d is not a multiple of the %d-column tile (wt %d, warps %d%s)",
                    a->n, cols, wt, warps, wn ? ", warps along n" : "");
  const int nchunks = a->k / 32;
  if (flavour == PZ_GEMM_FULLK) splits = 1;
  if (splits < 1 || splits > nchunks)
    return pz_error(PZ_ERR_INVALID_ARG, "gemm kernel: splits %d outside 1..%d (k=%d)", splits, nchunks, a->k);
  if (pz_gemm_sem_need(a->m, a->n, wt) > sem_capacity)
    return pz_error(PZ_ERR_SHAPE, "gemm kernel: n=%d needs more semaphores than the handle has", a->n);
  Params p;
  p.A = (const __nv_bfloat16 *)a->A;
  p.lda = a->lda;
  p.W = (const __nv_bfloat16 *)a->W;
  p.ldw = a->ldw ? a->ldw : a->k;
  gemm_params_common(p, a, sems, splits, flavour);
  p.k = a->k;
  p.c_bf16 = a->c_dtype == PZ_BF16;
  p.l2pf = !a->no_l2pf; /* PREZERO_GEMM_L2PF=0 (the handle's options) turns the W prefetch-size hint off */
  dim3 grid(a->n / cols, splits, (a->m + mt8 * 8 - 1) / (mt8 * 8));
  cudaError_t e = wn ? (warps == 4 ? launch_nw<4, true>(p, mt8, wt, grid, stream) : launch_nw<8, true>(p, mt8, wt, grid, stream))
                     : (warps == 4 ? launch_nw<4, false>(p, mt8, wt, grid, stream) : launch_nw<8, false>(p, mt8, wt, grid, stream));
  PZ_CUDA_CHECK(e);
  return PZ_OK;
}

extern "C" pz_status pz_gemm_fill_bf16(void *p, int64_t n, uint32_t seed, bool ints, cudaStream_t s) {
  fill_kernel<<<1024, 256, 0, s>>>((__nv_bfloat16 *)p, n, seed, ints ? 1 : 0);
  PZ_CUDA_CHECK(cudaGetLastError());
  return PZ_OK;
}

extern "C" pz_status pz_gemm_bias_add(void *C, int64_t ldc, pz_dtype c_dtype, const float *bias,
                                      int m, int n, cudaStream_t s) {
  int64_t total = (int64_t)m * n;
  int blocks = (int)((total + 255) / 256);
  if (blocks > 1024) blocks = 1024;
  bias_kernel<<<blocks, 256, 0, s>>>(C, ldc, c_dtype == PZ_BF16, bias, m, n);
  PZ_CUDA_CHECK(cudaGetLastError());
  return PZ_OK;
}

extern "C" pz_status pz_gemm_stream_read(const void *p, int64_t bytes, unsigned *sink, int sm_count,
                                         cudaStream_t s) {
  stream_read_kernel<<<sm_count * 4, 512, 0, s>>>((const uint4 *)p, bytes / 16, sink);
  PZ_CUDA_CHECK(cudaGetLastError());
  return PZ_OK;
}
