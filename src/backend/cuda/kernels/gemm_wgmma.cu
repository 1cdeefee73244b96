/* Hopper split-K GEMM (sm_90a): TMA loads of W and A tiles into a shared-memory ring, one
 * producer warp, wgmma consumer warpgroups with W's rows on the M = 64 side (swap-AB). */
#include <cuda.h> /* CUtensorMap and its enums (the encoder is looked up: no libcuda link) */
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
#include "backend/cuda/kernels/wgmma_ops.cuh"
#include "backend/cuda/kernels/gemm_wgmma_common.cuh"

/* Layout (our own; swap-AB is the usual trick for skinny GEMMs):
 *   Cᵀ[n, m] = W[n, k] · Aᵀ: a CTA owns BM = 64·(NWG/TS)·WM output columns (W rows; consumer
 *   warpgroup g issues WM m64 wgmmas on rows 64((g/TS)·WM + w)..) and BN tokens
 *   (the wgmma N side, 8..256), over one K slice of whole 64-wide k-blocks. TS = 1: every
 *   warpgroup takes all BN tokens; TS = 2 (config wt 1, warps 9): two warpgroups share one 64-row W
 *   tile and each takes BN/2 of the tokens, so a 64-column CTA issues its wgmmas from two
 *   warpgroups (at m >= 128 the single-warpgroup CTA reached 200-430 TFLOP/s on the H200 rows that
 *   lose to cuBLAS, bench/gemm/NOTES.md).
 * - Stage s of the ring holds W[n0 .. n0+BM) x [k, k+64) and A[t0 .. t0+BN) x [k, k+64), each a
 *   row of 128 bytes per W row / token, written by the copy engine with the 128-byte swizzle
 *   (16-byte unit u of row r lands at unit u ^ (r & 7)); rows past m arrive as zeros.
 * - The producer warp's lane 0 waits for the stage to be free (empty barrier), announces the
 *   bytes on the full barrier and issues both tensor copies. Consumer warpgroup g waits on the
 *   full barrier, issues four m64nBNk16 wgmmas (k steps of 32 bytes inside the swizzled rows),
 *   and frees the previous stage once its own wgmmas of that stage are done (wait_group 1).
 * - Epilogue: the fp32 tile goes through shared memory (the ring, no longer in use) so that
 *   every thread writes 4 adjacent columns of one token: a 16-byte vector reduction
 *   (red.global.add.v4.f32) when C is f32 and 16-byte aligned, scalar otherwise.
 * - Programmatic dependent launch (pz_gemm_args.pdl): the first stages' W tiles are requested before
 *   the grid waits for the kernel ahead of it (griddepcontrol.wait). The kernel does not release its
 *   own dependents early: with that release, back-to-back GEMMs of 9-warp configs were up to 1 µs
 *   slower (bench/gemm/NOTES.md), and no decode step has a GEMM right after a GEMM.
 * Flavours (gemm.h): 1 atomic, 2 in-kernel zero + flag, 4 full K store, 5 serial turnstile; the
 * epilogue and its per-tile semaphore protocol are gemm_epilogue.cuh, shared with gemm_splitk.cu. */

/* k-blocks per ring stage when the options leave it unset (PREZERO_GEMM_WG_KS): 2 where each split has at most
 * PZ_GEMM_WG_KS2_MAX_KB k-blocks and an even number of them (2 or 4), else 1. Measured on the H200 (bench/results/gemm_ks_ab/, round 97):
 * 2 was 4-7 % faster on DeepSeek-V2-Lite's o_proj (4 k-blocks per split) and the gates (2-4), and up to 8 % slower where
 * a split has 28-128 k-blocks. */
#define PZ_GEMM_WG_KS2_MAX_KB 4

static PFN_cuTensorMapEncodeTiled_v12000 g_encode = nullptr; /* resolved once by pz_gemm_wgmma_init */

namespace {
using namespace pz_wg;

struct WParams {
  void *C;
  int64_t ldc;
  const float *bias;
  int *sems;
  int m, n;
  int kblocks; /* k / 64 */
  int splits;
  pz_gemm_flavour mode; /* SPLITK_ATOMIC, SPLITK_ZERO, FULLK or SPLITK_SERIAL */
  int c_bf16;
  int vec; /* 1: C f32, 16-byte aligned rows: vector reductions / stores */
};

/* Compile-time plan of one instantiation. KS = 64-wide k-blocks per ring stage: each W row then
 * arrives as KS x 128 contiguous bytes per stage (KS tensor copies of one k-block each, every
 * sub-tile its own 128-byte-swizzled [rows][64] block). */
template <int BN, int NWG, int WM, int KSR, int TS>
struct Plan {
  static_assert(TS == 1 || (TS == 2 && NWG == 2 && WM == 1 && BN >= 16), "wgmma plan: token split needs 2 warpgroups");
  static constexpr int BM = 64 * (NWG / TS) * WM;
  static constexpr int BNW = BN / TS; /* tokens per consumer warpgroup (its wgmma N) */
  static constexpr int W_BLK = BM * 128;      /* one k-block of W: BM rows x 64 bf16 */
  static constexpr int A_BLK = BN * 128;      /* one k-block of A: BN tokens x 64 bf16 */
  /* 2 CTAs per SM for small tiles, else 1; rings as deep as shared memory allows (a 2-3 % gain on
   * the Kimi-K2 TP 1 rows of the H200 at m >= 32 over 96 / 200 KB) */
  static constexpr int BUDGET = BN >= 128 || BM >= 256 ? 222 * 1024 : 110 * 1024;
  /* the requested KSR (PREZERO_GEMM_WG_KS, else the launcher's default: 2 on splits of 2 or 4 k-blocks,
   * PZ_GEMM_WG_KS2_MAX_KB), halved until at least three stages fit the budget (a halved KS still divides
   * the k-blocks of a split). Measured in this form: bench/results/gemm_ks_ab/ and gemm_ksrule_ab/. */
  static constexpr int KS = BUDGET / (KSR * (W_BLK + A_BLK)) >= 3 ? KSR
                            : KSR >= 2 && BUDGET / ((KSR / 2) * (W_BLK + A_BLK)) >= 3 ? KSR / 2 : 1;
  static constexpr int W_BYTES = KS * W_BLK;
  static constexpr int A_BYTES = KS * A_BLK;
  static constexpr int STAGE = W_BYTES + A_BYTES;
  static constexpr int S0 = BUDGET / STAGE;
  static constexpr int SMAX = 8 / KS < 2 ? 2 : 8 / KS;
  static constexpr int STAGES = S0 > SMAX ? SMAX : S0 < 2 ? 2 : S0;
  static constexpr int CP = BM + 4; /* epilogue tile row (floats): fragment writes hit distinct banks */
  static constexpr int EPI = BN * CP * 4;
  static constexpr int RING = STAGES * STAGE;
  static constexpr int DATA = RING > EPI ? RING : EPI;
  static constexpr int SMEM = 1024 /* alignment slack */ + DATA + 2 * STAGES * 8;
  static constexpr int THREADS = NWG * 128 + 32;
  static_assert(SMEM <= 227 * 1024, "wgmma plan: the ring exceeds the 227 KB of shared memory per CTA");
};

template <int BN, int NWG, int WM, int KSR, int TS>
__global__ void __launch_bounds__(Plan<BN, NWG, WM, KSR, TS>::THREADS, 1)
    gemm_wgmma_kernel(const __grid_constant__ CUtensorMap tmW, const __grid_constant__ CUtensorMap tmA,
                      const WParams p) {
  using P = Plan<BN, NWG, WM, KSR, TS>;
  constexpr int KS = P::KS;
  constexpr int S = P::STAGES;
  extern __shared__ unsigned char smem_raw[];
  unsigned char *smem = smem_align_1k(smem_raw); /* the 128-byte swizzle repeats every 1024 bytes */
  uint64_t *full = (uint64_t *)(smem + P::DATA);
  uint64_t *empty = full + S;

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int n0 = blockIdx.x * P::BM;
  const int split = blockIdx.y;
  const int t0 = blockIdx.z * BN;
  const int tile = blockIdx.z * gridDim.x + blockIdx.x;
  const int kb0 = (int)((int64_t)split * p.kblocks / p.splits);
  const int kb1 = (int)((int64_t)(split + 1) * p.kblocks / p.splits);
  const int nk = kb1 - kb0;
  const int ns = nk / KS; /* ring stages of this K slice: the launcher takes KS > 1 only when KS divides nk */
  const int rows = min(BN, p.m - t0);

  ring_init(full, empty, S, 4 * NWG);
  /* Launched with programmatic dependent launch, this grid may start before the kernel ahead of it
   * in the stream has finished. The weights are not written by any kernel of a decode step, so the
   * producer requests the W tiles of the first `pre` stages (their full barriers announce the whole
   * stage, A included: none can complete before its A tile lands) before waiting; A, C and the
   * semaphores are touched only after pz_pdl_wait. */
  const int pre = ns < S ? ns : S;
  __syncthreads(); /* the barriers' initialisation, before the producer uses them */
  if (warp == 4 * NWG && lane == 0)
    for (int i = 0; i < pre; i++) {
      mbar_expect_tx(&full[i], P::STAGE);
      for (int j = 0; j < KS; j++)
        tma_load_2d(smem + i * P::STAGE + j * P::W_BLK, &tmW, &full[i], (kb0 + i * KS + j) * 64, n0);
    }
  pz_pdl_wait();
  /* Flavour 2: split 0 zeroes this CTA's C tile first, then raises the tile's flag. */
  const bool zeroes = p.mode == PZ_GEMM_SPLITK_ZERO && split == 0 && p.splits > 1;
  if (zeroes) {
    tile_zero(p, t0, n0, rows, P::BM, P::THREADS);
    __threadfence();
  }
  __syncthreads();
  if (zeroes) tile_flag_raise(p, tile);

  float acc[WM][P::BNW / 2];
#pragma unroll
  for (int w = 0; w < WM; w++)
#pragma unroll
    for (int i = 0; i < P::BNW / 2; i++) acc[w][i] = 0.0f;
  const int wg = warp >> 2; /* consumer warpgroup (NWG = the producer warp's group index) */
  const int wrow = (wg / TS) * WM;  /* its first m64 W tile */
  const int wtok = (wg % TS) * P::BNW; /* its first token of the tile */

  if (warp == 4 * NWG) {
    /* Producer: lane 0 streams the K slice through the ring. */
    if (lane == 0) {
      for (int i = 0; i < ns; i++) {
        const int s = i % S;
        unsigned char *st = smem + s * P::STAGE;
        if (i >= pre) { /* the first `pre` stages have their W requested and their bytes announced */
          mbar_wait(&empty[s], ((i / S) & 1) ^ 1);
          mbar_expect_tx(&full[s], P::STAGE);
        }
        for (int j = 0; j < KS; j++) {
          const int kc = (kb0 + i * KS + j) * 64;
          if (i >= pre) tma_load_2d(st + j * P::W_BLK, &tmW, &full[s], kc, n0);
          tma_load_2d(st + P::W_BYTES + j * P::A_BLK, &tmA, &full[s], kc, t0);
        }
      }
    }
  } else {
    for (int i = 0; i < ns; i++) {
      const int s = i % S;
      mbar_wait(&full[s], (i / S) & 1);
      wg_mma_stage<P::BNW, WM, P::W_BLK, P::W_BYTES, P::A_BLK, KS>(acc, smem + s * P::STAGE, wrow, wtok * 128);
      if (i > 0) {
        wgmma_wait<1>();
        if (lane == 0) mbar_arrive(&empty[(i - 1) % S]);
      }
    }
    wgmma_wait<0>();
  }
  __syncthreads(); /* every stage consumed: the ring becomes the epilogue tile */

  float *tile_s = (float *)smem; /* [BN][CP]: token-major fp32 partial of this CTA */
  if (warp < 4 * NWG) wg_frag_to_smem<P::BNW, WM, P::CP>(tile_s, acc, wrow, wtok, warp, lane);

  tile_wait(p, split, tile);
  __syncthreads();

  const bool add_bias = p.bias != nullptr && split == 0;
  const bool store = c_overwrites(p, split);
  constexpr int Q = P::BM / 4; /* 4-column groups per token row */
  for (int e = threadIdx.x; e < rows * Q; e += P::THREADS) {
    const int t = e / Q, j = (e - t * Q) * 4;
    float4 v = *(const float4 *)&tile_s[t * P::CP + j];
    if (add_bias) add_bias4(v, p.bias, n0 + j);
    const int64_t off = (int64_t)(t0 + t) * p.ldc + n0 + j;
    if (p.vec && !store && p.mode != PZ_GEMM_SPLITK_SERIAL) {
      red_v4((float *)p.C + off, v);
    } else if (p.vec && store) {
      *(float4 *)((float *)p.C + off) = v;
    } else {
      const float vv[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
      for (int u = 0; u < 4; u++) c_put(p, split, off + u, vv[u]);
    }
  }

  tile_release(p, split, tile);
}

template <int BN, int NWG, int WM, int KS, int TS>
cudaError_t set_smem_ks() {
  return cudaFuncSetAttribute(gemm_wgmma_kernel<BN, NWG, WM, KS, TS>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                              Plan<BN, NWG, WM, KS, TS>::SMEM);
}
template <int BN, int NWG, int WM, int TS>
cudaError_t set_smem() {
  cudaError_t e;
  if ((e = set_smem_ks<BN, NWG, WM, 1, TS>()) || (e = set_smem_ks<BN, NWG, WM, 2, TS>()) ||
      (e = set_smem_ks<BN, NWG, WM, 4, TS>()))
    return e;
  return cudaSuccess;
}

template <int BN, int NWG, int WM, int KS, int TS>
pz_status launch_ks(const pz_gemm_args *a, WParams p, int zt, cudaStream_t s) {
  using P = Plan<BN, NWG, WM, KS, TS>;
  CUtensorMap tw, ta;
  const int64_t ldw = a->ldw ? a->ldw : a->k;
  PZ_CHECK(pz_gemm_wgmma_encode_map(&tw, a->W, a->n, a->k, ldw, P::BM));
  PZ_CHECK(pz_gemm_wgmma_encode_map(&ta, a->A, a->m, a->k, a->lda, BN));
  PZ_CUDA_CHECK(pz_launch_k(gemm_wgmma_kernel<BN, NWG, WM, KS, TS>, dim3(a->n / P::BM, p.splits, zt), dim3(P::THREADS),
                            P::SMEM, s, a->pdl, tw, ta, p));
  return PZ_OK;
}

template <int BN, int NWG, int WM, int TS>
pz_status launch_bn(const pz_gemm_args *a, WParams p, int zt, cudaStream_t s) {
  /* KS > 1 only where every split's k-blocks are a multiple of it (the stages are then all full,
   * see wg_mma_stage); otherwise 1 */
  const int kblocks = p.kblocks, splits = p.splits;
  const int want = a->wg_ks > 0 ? a->wg_ks : kblocks / splits <= PZ_GEMM_WG_KS2_MAX_KB ? 2 : 1;
  const int ks = want > 1 && kblocks % splits == 0 && (kblocks / splits) % want == 0 ? want : 1;
  return ks == 4 ? launch_ks<BN, NWG, WM, 4, TS>(a, p, zt, s)
         : ks == 2 ? launch_ks<BN, NWG, WM, 2, TS>(a, p, zt, s)
                   : launch_ks<BN, NWG, WM, 1, TS>(a, p, zt, s);
}

/* WM = 2 stops at BN = 128: 2 x 128 accumulators per thread would not fit the register file. A token
 * split (TS = 2) starts at BN = 16 (8 tokens per warpgroup): its launcher raises bn to 16 first. */
template <int NWG, int WM, int TS>
pz_status launch_nwg(const pz_gemm_args *a, const WParams &p, int bn, int zt, cudaStream_t s) {
  switch (bn) {
    case 8:
      if constexpr (TS == 1) return launch_bn<8, NWG, WM, TS>(a, p, zt, s);
      else return pz_error(PZ_ERR_INVALID_ARG, "gemm wgmma: the token split needs a token tile of at least 16");
    case 16: return launch_bn<16, NWG, WM, TS>(a, p, zt, s);
    case 32: return launch_bn<32, NWG, WM, TS>(a, p, zt, s);
    case 64: return launch_bn<64, NWG, WM, TS>(a, p, zt, s);
    case 128: return launch_bn<128, NWG, WM, TS>(a, p, zt, s);
    default: return launch_bn<(WM == 1 ? 256 : 128), NWG, WM, TS>(a, p, zt, s);
  }
}

template <int NWG, int WM, int TS>
cudaError_t set_all() {
  cudaError_t e;
  if ((e = set_smem<8 * TS, NWG, WM, TS>()) || (e = set_smem<16, NWG, WM, TS>()) || (e = set_smem<32, NWG, WM, TS>()) ||
      (e = set_smem<64, NWG, WM, TS>()) || (e = set_smem<128, NWG, WM, TS>()) ||
      (e = set_smem<(WM == 1 ? 256 : 128), NWG, WM, TS>()))
    return e;
  return cudaSuccess;
}

} // namespace

/* A bf16 tensor map of `rank` dimensions (dims[0] contiguous, byte strides of the others), box[0] = 64
 * (128 bytes: the 128B swizzle's row), coordinates past a dimension read as zeros. */
static pz_status encode(CUtensorMap *map, const void *base, cuuint32_t rank, const cuuint64_t *dims,
                        const cuuint64_t *strides, const cuuint32_t *box) {
  if (!g_encode) return pz_error(PZ_ERR_UNSUPPORTED, "gemm wgmma: not initialised (pz_gemm_wgmma_init)");
  const cuuint32_t estr[3] = {1, 1, 1};
  CUresult r = g_encode(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, rank, const_cast<void *>(base), dims, strides, box, estr,
                        CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                        CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) return pz_error(PZ_ERR_CUDA, "gemm wgmma: cuTensorMapEncodeTiled (%u-D) failed (%d)", rank, (int)r);
  return PZ_OK;
}

/* 2-D bf16 tensor map over rows x k (row stride ld elements), box 64 x box_rows, 128B swizzle,
 * rows past `rows` read as zeros. */
pz_status pz_gemm_wgmma_encode_map(CUtensorMap *map, const void *base, int64_t rows, int64_t k, int64_t ld, int box_rows) {
  const cuuint64_t dims[2] = {(cuuint64_t)k, (cuuint64_t)rows};
  const cuuint64_t strides[1] = {(cuuint64_t)ld * 2};
  const cuuint32_t box[2] = {64, (cuuint32_t)box_rows};
  return encode(map, base, 2, dims, strides, box);
}

/* 3-D bf16 tensor map: d0 x d1 x d2 elements (d0 contiguous), strides s1 / s2 elements between
 * consecutive d1 / d2 indices, box 64 x box1 x 1, 128B swizzle, coordinates past a dimension read as
 * zeros (the MLA attention's KV cache: columns x positions x sequences or pages). */
pz_status pz_gemm_wgmma_encode_map_3d(CUtensorMap *map, const void *base, int64_t d0, int64_t d1, int64_t d2,
                                      int64_t s1, int64_t s2, int box1) {
  const cuuint64_t dims[3] = {(cuuint64_t)d0, (cuuint64_t)d1, (cuuint64_t)d2};
  const cuuint64_t strides[2] = {(cuuint64_t)s1 * 2, (cuuint64_t)s2 * 2};
  const cuuint32_t box[3] = {64, (cuuint32_t)box1, 1};
  return encode(map, base, 3, dims, strides, box);
}

extern "C" int pz_gemm_wgmma_bn(int m, int wt) {
  int bn = 8; /* the token split (wt 1, warps 9) takes at least 16: pz_gemm_wgmma_launch */
  const int cap = wt == 4 ? 128 : 256;
  while (bn < m && bn < cap) bn *= 2;
  return bn;
}

extern "C" pz_status pz_gemm_wgmma_init(void) {
  if (!g_encode) {
    void *fn = nullptr;
    cudaDriverEntryPointQueryResult q;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess || !fn) {
      cudaGetLastError();
      return pz_error(PZ_ERR_UNSUPPORTED, "gemm wgmma: the driver has no cuTensorMapEncodeTiled (needs CUDA 12+)");
    }
    g_encode = (PFN_cuTensorMapEncodeTiled_v12000)fn;
  }
  PZ_CUDA_CHECK((set_all<1, 1, 1>()));
  PZ_CUDA_CHECK((set_all<2, 1, 1>()));
  PZ_CUDA_CHECK((set_all<2, 2, 1>()));
  PZ_CUDA_CHECK((set_all<2, 1, 2>()));
  return pz_gemm_wgmma_streamk_init();
}

extern "C" pz_status pz_gemm_wgmma_launch(const pz_gemm_args *a, pz_gemm_flavour flavour, int splits, int wt, int warps,
                                          int bn_tile, int *sems, int64_t sem_capacity, cudaStream_t stream) {
  if (!g_encode) return pz_error(PZ_ERR_UNSUPPORTED, "gemm wgmma: not initialised (pz_gemm_wgmma_init)");
  if (flavour != PZ_GEMM_SPLITK_ATOMIC && flavour != PZ_GEMM_SPLITK_ZERO && flavour != PZ_GEMM_FULLK &&
      flavour != PZ_GEMM_SPLITK_SERIAL)
    return pz_error(PZ_ERR_INVALID_ARG, "gemm wgmma: flavour %d is not a kernel flavour", (int)flavour);
  if (wt != 1 && wt != 2 && wt != 4)
    return pz_error(PZ_ERR_INVALID_ARG, "gemm wgmma: wt %d (64-row W tiles per CTA) must be 1, 2 or 4", wt);
  const int bm = 64 * wt;
  if (a->n % bm)
    return pz_error(PZ_ERR_INVALID_ARG, "gemm wgmma: n=%d is not a multiple of the %d-column tile", a->n, bm);
  const int kblocks = a->k / 64;
  if (flavour == PZ_GEMM_FULLK) splits = 1;
  if (splits < 1 || splits > kblocks)
    return pz_error(PZ_ERR_INVALID_ARG, "gemm wgmma: splits %d outside 1..%d (k=%d)", splits, kblocks, a->k);
  const int ts = wt == 1 && warps == 9 ? 2 : 1; /* two warpgroups share the 64-row W tile, half the tokens each */
  if (!pz_gemm_bn_ok(bn_tile, wt))
    return pz_error(PZ_ERR_INVALID_ARG, "gemm wgmma: token tile %d not a power of two in 16..%d", bn_tile, wt == 4 ? 128 : 256);
  int bn = pz_gemm_wgmma_bn(a->m, wt);
  if (bn_tile && bn_tile < bn) bn = bn_tile; /* m / bn token tiles side by side: more CTAs at short K */
  if (ts == 2 && bn < 16) bn = 16;
  const int zt = (a->m + bn - 1) / bn;
  if (2 * (int64_t)(a->n / bm) * zt > sem_capacity)
    return pz_error(PZ_ERR_SHAPE, "gemm wgmma: n=%d in %d token tiles of %d needs more semaphores than the handle has; use "
                                  "a larger token tile (PREZERO_GEMM_BN) or more W tiles per CTA", a->n, zt, bn);
  const int64_t ldw = a->ldw ? a->ldw : a->k;
  if ((a->lda * 2) % 16 || (ldw * 2) % 16)
    return pz_error(PZ_ERR_SHAPE, "gemm wgmma: row strides must be multiples of 16 bytes");
  WParams p;
  gemm_params_common(p, a, sems, splits, flavour);
  p.kblocks = kblocks;
  p.c_bf16 = a->c_dtype == PZ_BF16;
  p.vec = !p.c_bf16 && ((uintptr_t)a->C % 16) == 0 && (a->ldc % 4) == 0;
  return ts == 2 ? launch_nwg<2, 1, 2>(a, p, bn, zt, stream)
         : wt == 1 ? launch_nwg<1, 1, 1>(a, p, bn, zt, stream)
         : wt == 2 ? launch_nwg<2, 1, 1>(a, p, bn, zt, stream)
                   : launch_nwg<2, 2, 1>(a, p, bn, zt, stream);
}
