/* Hopper stream-K GEMM (sm_90a), config wn = 4: a persistent grid of `ctas` CTAs walks the
 * (tile, 64-wide k-block) work units in equal contiguous shares, so every SM streams the same
 * number of W bytes whatever the tile count; partial tiles are added into C atomically. */
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>
extern "C" {
#include "core/status.h"
}
#include "backend/cuda/cuda_util.h"
#include "backend/cuda/gemm.h"
#include "backend/cuda/kernels/gemm_epilogue.cuh"
#include "backend/cuda/kernels/gemm_wgmma_common.cuh"
#include "backend/cuda/kernels/wgmma_ops.cuh"

/* Schedule (the stream-K decomposition of Osama et al., "Stream-K: Work-centric Parallel
 * Decomposition for Dense Matrix Multiplication on the GPU", PPoPP 2023; here with atomic
 * fix-up, which a prezero consumer needs anyway since its C arrives zeroed):
 * - units = tiles x k-blocks, tile-major (tile = token tile * n tiles + n tile, BM = 64 * wt W
 *   rows by BN tokens as in gemm_wgmma.cu); CTA b owns units [b U / G, (b + 1) U / G).
 * - Its share is a run of segments, one per tile it touches. The producer warp streams all of
 *   them through one TMA ring without a break; the consumer warpgroups run the wgmma loop of a
 *   segment, then its epilogue, while the producer already loads the next segment.
 * - Epilogue: the fp32 partial goes through a shared-memory tile of its own (not the ring), then
 *   16-byte red.global.add.v4.f32 (C f32, aligned) or scalar atomics. The segment that starts at
 *   k-block 0 adds the bias, so each tile gets it once.
 * Only the atomic flavour (1, and 3 through the launcher's memset node): C must be zero on entry.
 * Partial sums land in C in no fixed order (like split-K with 3+ splits): not bit-reproducible;
 * the deterministic mode (a fixed split count) runs the split-K kernel instead. */

namespace {
using namespace pz_wg;

struct SKParams {
  void *C;
  int64_t ldc;
  const float *bias;
  int m, n;
  int kblocks;   /* k / 64 */
  int ntiles_n;  /* n / BM */
  int64_t units; /* tiles x kblocks */
  int c_bf16;
  int vec; /* C f32 with 16-byte aligned rows: vector reductions */
};

constexpr int kMaxSmem = 227 * 1024; /* sm_90 opt-in dynamic shared memory per block */

template <int BN, int NWG, int WM>
struct SKPlan {
  static constexpr int BM = 64 * NWG * WM;
  static constexpr int W_BYTES = BM * 128;
  static constexpr int A_BYTES = BN * 128;
  static constexpr int STAGE = W_BYTES + A_BYTES;
  static constexpr int CP = BM + 4; /* epilogue tile row (floats) */
  static constexpr int EPI = BN * CP * 4;
  static constexpr int S0 = (kMaxSmem - 1024 - 16 * 16 - EPI) / STAGE;
  static constexpr int STAGES = S0 > 16 ? 16 : S0 < 2 ? 2 : S0;
  static constexpr int RING = STAGES * STAGE;
  static constexpr int SMEM = 1024 + RING + EPI + 2 * STAGES * 8;
  static constexpr int CONSUMERS = NWG * 128;
  static constexpr int THREADS = CONSUMERS + 32;
  static_assert(SMEM <= kMaxSmem, "stream-K plan exceeds shared memory");
};

/* The segment of CTA share [u, u_end) that starts at unit u. */
struct Seg {
  int tile, kb, kn;
};
__device__ __forceinline__ Seg seg_at(const SKParams &p, int64_t u, int64_t u_end) {
  Seg s;
  s.tile = (int)(u / p.kblocks);
  s.kb = (int)(u - (int64_t)s.tile * p.kblocks);
  const int64_t left = u_end - u;
  s.kn = left < p.kblocks - s.kb ? (int)left : p.kblocks - s.kb;
  return s;
}

template <int BN, int NWG, int WM>
__global__ void __launch_bounds__(SKPlan<BN, NWG, WM>::THREADS, 1)
    gemm_wgmma_streamk_kernel(const __grid_constant__ CUtensorMap tmW, const __grid_constant__ CUtensorMap tmA,
                              const SKParams p) {
  using P = SKPlan<BN, NWG, WM>;
  constexpr int S = P::STAGES;
  extern __shared__ unsigned char smem_raw[];
  unsigned char *smem = smem_align_1k(smem_raw); /* the 128-byte swizzle repeats every 1024 bytes */
  float *tile_s = (float *)(smem + P::RING); /* [BN][CP]: token-major fp32 partial of a segment */
  uint64_t *full = (uint64_t *)(smem + P::RING + P::EPI);
  uint64_t *empty = full + S;

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t u_begin = (int64_t)blockIdx.x * p.units / gridDim.x;
  const int64_t u_end = (int64_t)(blockIdx.x + 1) * p.units / gridDim.x;

  ring_init(full, empty, S, 4 * NWG);
  __syncthreads(); /* the only CTA-wide barrier: the producer warp leaves after its loop */
  pz_pdl_wait();      /* launched with programmatic dependent launch: nothing is read before the kernel ahead ends */

  if (warp == 4 * NWG) {
    /* Producer: lane 0 streams every segment of the share through the ring, back to back. */
    if (lane == 0) {
      uint32_t g = 0;
      for (int64_t u = u_begin; u < u_end;) {
        const Seg sg = seg_at(p, u, u_end);
        const int n0 = (sg.tile % p.ntiles_n) * P::BM, t0 = (sg.tile / p.ntiles_n) * BN;
        for (int i = 0; i < sg.kn; i++, g++) {
          const int s = (int)(g % S);
          mbar_wait(&empty[s], ((g / S) & 1) ^ 1);
          unsigned char *st = smem + s * P::STAGE;
          mbar_expect_tx(&full[s], P::STAGE);
          const int kc = (sg.kb + i) * 64;
          tma_load_2d(st, &tmW, &full[s], kc, n0);
          tma_load_2d(st + P::W_BYTES, &tmA, &full[s], kc, t0);
        }
        u += sg.kn;
      }
    }
    return;
  }

  const int wg = warp >> 2;
  constexpr int Q = P::BM / 4; /* 4-column groups per token row */
  uint32_t g = 0;
  float acc[WM][BN / 2];
  for (int64_t u = u_begin; u < u_end;) {
    const Seg sg = seg_at(p, u, u_end);
    const int n0 = (sg.tile % p.ntiles_n) * P::BM, t0 = (sg.tile / p.ntiles_n) * BN;
    const int rows = min(BN, p.m - t0);
#pragma unroll
    for (int w = 0; w < WM; w++)
#pragma unroll
      for (int i = 0; i < BN / 2; i++) acc[w][i] = 0.0f;
    for (int i = 0; i < sg.kn; i++, g++) {
      const int s = (int)(g % S);
      mbar_wait(&full[s], (g / S) & 1);
      wg_mma_stage<BN, WM, P::W_BYTES, P::W_BYTES, P::A_BYTES, 1>(acc, smem + s * P::STAGE, wg * WM, 0);
      if (i > 0) {
        wgmma_wait<1>();
        if (lane == 0) mbar_arrive(&empty[(g - 1) % S]);
      }
    }
    wgmma_wait<0>();
    if (lane == 0) mbar_arrive(&empty[(g - 1) % S]); /* the segment's last stage */

    /* Epilogue of the segment; the producer keeps loading the next one meanwhile. */
    bar_sync(1, P::CONSUMERS); /* the previous segment's reads of tile_s are done */
    wg_frag_to_smem<BN, WM, P::CP>(tile_s, acc, wg * WM, 0, warp, lane);
    bar_sync(1, P::CONSUMERS);
    const bool add_bias = p.bias != nullptr && sg.kb == 0;
    for (int e = threadIdx.x; e < rows * Q; e += P::CONSUMERS) {
      const int t = e / Q, j = (e - t * Q) * 4;
      float4 v = *(const float4 *)&tile_s[t * P::CP + j];
      if (add_bias) add_bias4(v, p.bias, n0 + j);
      const int64_t off = (int64_t)(t0 + t) * p.ldc + n0 + j;
      if (p.vec) {
        red_v4((float *)p.C + off, v);
      } else {
        c_atomic(p, off, v.x);
        c_atomic(p, off + 1, v.y);
        c_atomic(p, off + 2, v.z);
        c_atomic(p, off + 3, v.w);
      }
    }
    u += sg.kn;
  }
}

template <int BN, int NWG, int WM>
cudaError_t sk_set_smem() {
  return cudaFuncSetAttribute(gemm_wgmma_streamk_kernel<BN, NWG, WM>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                              SKPlan<BN, NWG, WM>::SMEM);
}

template <int BN, int NWG, int WM>
pz_status sk_launch_bn(const pz_gemm_args *a, const SKParams &p, int ctas, cudaStream_t s) {
  using P = SKPlan<BN, NWG, WM>;
  CUtensorMap tw, ta;
  const int64_t ldw = a->ldw ? a->ldw : a->k;
  PZ_CHECK(pz_gemm_wgmma_encode_map(&tw, a->W, a->n, a->k, ldw, P::BM));
  PZ_CHECK(pz_gemm_wgmma_encode_map(&ta, a->A, a->m, a->k, a->lda, BN));
  PZ_CUDA_CHECK(pz_launch_k(gemm_wgmma_streamk_kernel<BN, NWG, WM>, dim3(ctas), dim3(P::THREADS), P::SMEM, s, a->pdl, tw,
                            ta, p));
  return PZ_OK;
}

/* Largest token tile of a stream-K CTA: its epilogue tile (BN x BM fp32) has shared memory of its
 * own beside the ring, so wider W tiles take fewer tokens. */
__host__ __device__ constexpr int sk_bn_cap(int nwg, int wm) { return nwg * wm == 1 ? 256 : nwg * wm == 2 ? 128 : 64; }

template <int NWG, int WM>
pz_status sk_launch_nwg(const pz_gemm_args *a, const SKParams &p, int bn, int ctas, cudaStream_t s) {
  constexpr int CAP = sk_bn_cap(NWG, WM);
  switch (bn) {
    case 8: return sk_launch_bn<8, NWG, WM>(a, p, ctas, s);
    case 16: return sk_launch_bn<16, NWG, WM>(a, p, ctas, s);
    case 32: return sk_launch_bn<32, NWG, WM>(a, p, ctas, s);
    case 64: return sk_launch_bn<64, NWG, WM>(a, p, ctas, s);
    case 128: if constexpr (CAP >= 128) return sk_launch_bn<128, NWG, WM>(a, p, ctas, s);
    [[fallthrough]];
    default: return sk_launch_bn<CAP, NWG, WM>(a, p, ctas, s);
  }
}

template <int NWG, int WM>
cudaError_t sk_set_all() {
  constexpr int CAP = sk_bn_cap(NWG, WM);
  cudaError_t e;
  if ((e = sk_set_smem<8, NWG, WM>()) || (e = sk_set_smem<16, NWG, WM>()) || (e = sk_set_smem<32, NWG, WM>()) ||
      (e = sk_set_smem<64, NWG, WM>()) || (e = sk_set_smem<CAP >= 128 ? 128 : 64, NWG, WM>()) ||
      (e = sk_set_smem<CAP, NWG, WM>()))
    return e;
  return cudaSuccess;
}

/* Token tile for batch m: the smallest of 8, 16, .. >= m, at most the cap. */
int sk_bn(int m, int wt) {
  const int cap = sk_bn_cap(wt == 1 ? 1 : 2, wt == 4 ? 2 : 1);
  int bn = 8;
  while (bn < m && bn < cap) bn *= 2;
  return bn;
}

} // namespace

extern "C" pz_status pz_gemm_wgmma_streamk_init(void) {
  PZ_CUDA_CHECK((sk_set_all<1, 1>()));
  PZ_CUDA_CHECK((sk_set_all<2, 1>()));
  PZ_CUDA_CHECK((sk_set_all<2, 2>()));
  return PZ_OK;
}

extern "C" pz_status pz_gemm_wgmma_streamk_launch(const pz_gemm_args *a, pz_gemm_flavour flavour, int ctas, int wt,
                                                  cudaStream_t stream) {
  if (flavour != PZ_GEMM_SPLITK_ATOMIC)
    return pz_error(PZ_ERR_INVALID_ARG, "gemm stream-K: runs the atomic flavour only (C zeroed on entry), got %s",
                    pz_gemm_flavour_name(flavour));
  if (wt != 1 && wt != 2 && wt != 4)
    return pz_error(PZ_ERR_INVALID_ARG, "gemm stream-K: wt %d (64-row W tiles per CTA) must be 1, 2 or 4", wt);
  if (ctas < 1) return pz_error(PZ_ERR_INVALID_ARG, "gemm stream-K: grid of %d CTAs", ctas);
  const int bm = 64 * wt;
  if (a->n % bm)
    return pz_error(PZ_ERR_INVALID_ARG, "gemm stream-K: n=%d is not a multiple of the %d-column tile", a->n, bm);
  const int64_t ldw = a->ldw ? a->ldw : a->k;
  if ((a->lda * 2) % 16 || (ldw * 2) % 16)
    return pz_error(PZ_ERR_SHAPE, "gemm stream-K: row strides must be multiples of 16 bytes");
  const int bn = sk_bn(a->m, wt);
  SKParams p;
  p.C = a->C;
  p.ldc = a->ldc;
  p.bias = a->bias;
  p.m = a->m;
  p.n = a->n;
  p.kblocks = a->k / 64;
  p.ntiles_n = a->n / bm;
  p.units = (int64_t)p.ntiles_n * ((a->m + bn - 1) / bn) * p.kblocks;
  p.c_bf16 = a->c_dtype == PZ_BF16;
  p.vec = !p.c_bf16 && ((uintptr_t)a->C % 16) == 0 && (a->ldc % 4) == 0;
  const int g = p.units < ctas ? (int)p.units : ctas;
  return wt == 1 ? sk_launch_nwg<1, 1>(a, p, bn, g, stream)
         : wt == 2 ? sk_launch_nwg<2, 1>(a, p, bn, g, stream)
                   : sk_launch_nwg<2, 2>(a, p, bn, g, stream);
}
