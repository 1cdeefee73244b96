// W8A16 routed experts (moe_q.h): gather, grouped gate/up + SwiGLU and down over the chosen
// experts only with the FP8 e4m3 bytes converted in registers, and the deterministic combine; the
// gather, item loop, combine and host flow are moe_q_common.cuh's (shared with moe_w4a16.cu).
// Each weight becomes bf16(f32(e4m3) * scale_inv) rounded to nearest even: e4m3 -> f16x2 by the
// hardware conversion (exact: every finite e4m3 is an f16), f16 -> f32 (exact), one IEEE f32 multiply
// by the block's f32 scale, then cvt.rn.bf16x2 -- exactly pz_fp8_dequant_row's f32 product rounded
// to bf16 (pz_ref_qexpert_dequant, the loader). The bf16 weights and bf16 activations then go
// through mma.m16n8k16 with f32 accumulation.
#include <cuda_fp16.h>
#include "backend/cuda/kernels/moe_q_common.cuh"

namespace {

using namespace moeq;
constexpr int kChunk8 = 64;  // k per chunk: 16 bytes per lane and row (lane c holds k 16c..16c+15)

__device__ __forceinline__ uint4 ld_w16(const uint8_t *p) {
  uint4 v;
  asm("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p));
  return v;
}

template <int Q>
__device__ __forceinline__ uint32_t word(const uint4 &v) {
  return Q == 0 ? v.x : Q == 1 ? v.y : Q == 2 ? v.z : v.w;
}

// Four e4m3 bytes (k order: byte 0 first) times s as two bf16x2: lo = (b0, b1), hi = (b2, b3).
__device__ __forceinline__ void fp8x4_to_bf16(uint32_t w, float s, uint32_t &lo, uint32_t &hi) {
  uint32_t h01, h23;
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(h01) : "h"((unsigned short)(w & 0xffffu)));
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(h23) : "h"((unsigned short)(w >> 16)));
  const float2 f01 = __half22float2(*reinterpret_cast<const __half2 *>(&h01));
  const float2 f23 = __half22float2(*reinterpret_cast<const __half2 *>(&h23));
  const __nv_bfloat162 b01 = __floats2bfloat162_rn(__fmul_rn(f01.x, s), __fmul_rn(f01.y, s));
  const __nv_bfloat162 b23 = __floats2bfloat162_rn(__fmul_rn(f23.x, s), __fmul_rn(f23.y, s));
  lo = *reinterpret_cast<const uint32_t *>(&b01);
  hi = *reinterpret_cast<const uint32_t *>(&b23);
}

__device__ __forceinline__ void mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// U chunks of 64 k from chunk ch. Lane (g = lane/4, c = lane%4) holds bytes 16c..16c+15 of its rows
// g and g+8 (a0 / a1, already offset by 16c) and the same 16 x elements of its token per n-tile.
// Step q (k16) of a chunk uses word q: its bytes 4q, 4q+1 fill mma k slots 2c, 2c+1 and 4q+2, 4q+3
// slots 2c+8, 2c+9, for A and B alike (a permutation of k within the step, as in the W4A16 tile).
template <bool DUAL, int NT, int U>
__device__ __forceinline__ void w8_steps(const uint8_t *a0, const uint8_t *a1, const uint8_t *b0, const uint8_t *b1,
                                         const float *sa0, const float *sa1, const float *sb0, const float *sb1, int bn,
                                         int ch, const __nv_bfloat16 *const (&xr)[NT], float (&acc)[2][NT][4]) {
  constexpr bool kLateX = DUAL && NT >= 3;  // (gate + up) x 3-4 n-tiles: x in two halves
  const int c = threadIdx.x & 3;
  uint4 ra[U][2], rb[U][2], rx[U][NT][2];
  float sa[U][2], sb[U][2];
#pragma unroll
  for (int u = 0; u < U; u++) {
    const int k = (ch + u) * kChunk8;
    ra[u][0] = ld_w16(a0 + k);
    ra[u][1] = ld_w16(a1 + k);
    const int sc = (k + c * 16) / bn;
    sa[u][0] = __ldg(sa0 + sc);
    sa[u][1] = __ldg(sa1 + sc);
    if (DUAL) {
      rb[u][0] = ld_w16(b0 + k);
      rb[u][1] = ld_w16(b1 + k);
      sb[u][0] = __ldg(sb0 + sc);
      sb[u][1] = __ldg(sb1 + sc);
    }
#pragma unroll
    for (int j = 0; j < NT; j++) {
      const uint4 *xp = reinterpret_cast<const uint4 *>(xr[j] + k + c * 16);
      rx[u][j][0] = __ldg(xp);
      if (!kLateX) rx[u][j][1] = __ldg(xp + 1);
    }
  }
#pragma unroll
  for (int u = 0; u < U; u++) {
#define PZ_W8_STEP(Q)                                                                   \
    {                                                                                   \
      uint32_t A[4], B[4];                                                              \
      fp8x4_to_bf16(word<Q>(ra[u][0]), sa[u][0], A[0], A[2]);                           \
      fp8x4_to_bf16(word<Q>(ra[u][1]), sa[u][1], A[1], A[3]);                           \
      if (DUAL) {                                                                       \
        fp8x4_to_bf16(word<Q>(rb[u][0]), sb[u][0], B[0], B[2]);                         \
        fp8x4_to_bf16(word<Q>(rb[u][1]), sb[u][1], B[1], B[3]);                         \
      }                                                                                 \
      _Pragma("unroll") for (int j = 0; j < NT; j++) {                                  \
        const uint4 &xv = rx[u][j][(Q) >> 1];                                           \
        const uint32_t x0 = ((Q) & 1) ? xv.z : xv.x, x1 = ((Q) & 1) ? xv.w : xv.y;      \
        mma(acc[0][j], A, x0, x1);                                                      \
        if (DUAL) mma(acc[1][j], B, x0, x1);                                            \
      }                                                                                 \
    }
    PZ_W8_STEP(0)
    PZ_W8_STEP(1)
    if (kLateX) /* the second 8 x of each token once the first are used: fewer live registers */
#pragma unroll
      for (int j = 0; j < NT; j++)
        rx[u][j][1] = __ldg(reinterpret_cast<const uint4 *>(xr[j] + (ch + u) * kChunk8 + c * 16) + 1);
    PZ_W8_STEP(2)
    PZ_W8_STEP(3)
#undef PZ_W8_STEP
  }
}

// The FP8 policy of moe_q_common.cuh: s.w* e4m3 bytes [N, K], s.s* f32 [ceil(N/bm), s.scols].
struct W8 {
  static constexpr int kChunk = kChunk8;
  template <bool DUAL, int NT>
  static __device__ __forceinline__ void tile(const seg &s, int e, int row0, int cb, int ce,
                                              const __nv_bfloat16 *const (&xr)[NT], float (&acc)[2][NT][4]) {
    const int lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3;
    const int64_t K = s.K;
    const int64_t wo = (int64_t)e * s.wstride + (int64_t)(row0 + g) * K + c * 16;
    const int64_t so0 = (int64_t)e * s.sstride + (int64_t)((row0 + g) / s.bm) * s.scols;
    const int64_t so1 = (int64_t)e * s.sstride + (int64_t)((row0 + g + 8) / s.bm) * s.scols;
    const uint8_t *a0 = (const uint8_t *)s.w0 + wo, *a1 = a0 + 8 * K;
    const uint8_t *b0 = DUAL ? (const uint8_t *)s.w1 + wo : nullptr, *b1 = DUAL ? b0 + 8 * K : nullptr;
    const float *sa0 = (const float *)s.s0 + so0, *sa1 = (const float *)s.s0 + so1;
    const float *sb0 = DUAL ? (const float *)s.s1 + so0 : nullptr, *sb1 = DUAL ? (const float *)s.s1 + so1 : nullptr;
    constexpr int U = DUAL ? (NT == 1 ? 2 : 1) : (NT <= 2 ? 2 : 1);  // loads in flight vs registers
    int ch = cb;
    for (; ch + U <= ce; ch += U) w8_steps<DUAL, NT, U>(a0, a1, b0, b1, sa0, sa1, sb0, sb1, s.bn, ch, xr, acc);
    if (U > 1)
      for (; ch < ce; ch++) w8_steps<DUAL, NT, 1>(a0, a1, b0, b1, sa0, sa1, sb0, sb1, s.bn, ch, xr, acc);
  }
};

}  // namespace

extern "C" size_t pz_moe_w8a16_workspace_bytes(int max_m, int64_t H, const pz_moe_params *p) {
  if (!p || max_m < 1) return 0;
  return layout_of(max_m, H, p).total;
}

extern "C" pz_status pz_moe_w8a16_launch(const pz_moe_q_args *a, cudaStream_t stream) {
  if (!a) return pz_error(PZ_ERR_INVALID_ARG, "moe w8a16: NULL args");
  const pz_moe_params *p = &a->p;
  const int64_t bm = p->q_block_rows, bn = p->q_block_cols;
  if (p->wquant != 2 || bm < 1 || bn < 16 || bn % 16 || bm > (1 << 20) || bn > (1 << 20))
    return pz_error(PZ_ERR_INVALID_ARG, "moe w8a16: experts must be FP8 with block scales of >= 1 rows and a multiple of "
                    "16 columns (wquant %d, block %lldx%lld)", p->wquant, (long long)bm, (long long)bn);
  const int64_t H = a->H, I = p->inter;
  if (a->m < 1 || a->m > PZ_MOE_MAX_M) return pz_error(PZ_ERR_SHAPE, "moe w8a16: m = %d outside 1..%d", a->m, PZ_MOE_MAX_M);
  const int E = p->n_experts, K = p->top_k;
  if (E < 1 || E > PZ_MOE_MAX_EXPERTS || K < 1 || K > E || K > PZ_MOE_MAX_TOPK)
    return pz_error(PZ_ERR_SHAPE, "moe w8a16: n_experts %d / top_k %d outside the limits (moe.h)", E, K);
  if (H < kChunk8 || H % kChunk8 || I < kChunk8 || I % kChunk8 || H > (1 << 20) || I > (1 << 20))
    return pz_error(PZ_ERR_SHAPE, "moe w8a16: H %lld and inter %lld must be positive multiples of %d", (long long)H,
                    (long long)I, kChunk8);
  if (!aligned(a->w_gate, 16) || !aligned(a->w_up, 16) || !aligned(a->w_down, 16) || !aligned(a->s_gate, 4) ||
      !aligned(a->s_up, 4) || !aligned(a->s_down, 4))
    return pz_error(PZ_ERR_INVALID_ARG, "moe w8a16: the e4m3 weights must be 16-byte aligned, the f32 scales 4-byte");
  ws_layout l;
  PZ_CHECK(check_args(a, "moe w8a16", &l));
  const int64_t sr_gu = (I + bm - 1) / bm, sc_gu = (H + bn - 1) / bn, sr_d = (H + bm - 1) / bm, sc_d = (I + bn - 1) / bn;
  seg up = {}, dn = {};
  up.w0 = a->w_gate; up.w1 = a->w_up; up.s0 = a->s_gate; up.s1 = a->s_up;
  up.wstride = I * H; up.sstride = sr_gu * sc_gu;
  up.N = (int)I; up.K = (int)H; up.WK = pz_moe_wk_by_k(H);
  up.bm = (int)bm; up.bn = (int)bn; up.scols = (int)sc_gu;
  dn.w0 = a->w_down; dn.s0 = a->s_down;
  dn.wstride = H * I; dn.sstride = sr_d * sc_d;
  dn.N = (int)H; dn.K = (int)I; dn.WK = pz_moe_wk_by_k(I);
  up.direct = dn.direct = !a->direct_off;
  dn.bm = (int)bm; dn.bn = (int)bn; dn.scols = (int)sc_d;
  return run_all<W8>(a, l, up, dn, "moe w8a16", stream);
}
