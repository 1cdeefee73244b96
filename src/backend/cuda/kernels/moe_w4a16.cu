// W4A16 routed experts (moe_q.h): gather, grouped gate/up + SwiGLU and down over the chosen
// experts only with the INT4 words dequantised in registers (4-bit integers as bf16 on the tensor
// cores, one f32 scale multiply per 32-column group), and the deterministic combine. Modelled on
// the bf16 expert kernels of moe_experts.cu (same item shapes and fragment map); the gather, item
// loop, combine and host flow are moe_q_common.cuh's (shared with moe_w8a16.cu).
#include "backend/cuda/kernels/moe_q_common.cuh"

namespace {

using namespace moeq;
constexpr int kGroup = 32;     // INT4 columns per scale = k per chunk

// ---------------------------------------------------------------- INT4 x bf16 tensor-core tile

__device__ __forceinline__ uint32_t ld_word(const int32_t *p) {
  uint32_t v;
  asm("ld.global.nc.L1::no_allocate.u32 %0, [%1];" : "=r"(v) : "l"(p));
  return v;
}

// The 8 nibbles of one packed word (element j at bits 4j, stored as q + 8) as 4 registers of two
// bf16 each, in the order a 16-byte load of 8 consecutive bf16 has (register r: elements 2r, 2r+1):
// bf16 bits 0x4300 | u is 128 + u exactly, minus 136 gives q in [-8, 7] exactly.
__device__ __forceinline__ uint4 unpack8(uint32_t w) {
  const __nv_bfloat162 off = __floats2bfloat162_rn(136.0f, 136.0f);
  uint32_t r[4];
#pragma unroll
  for (int i = 0; i < 4; i++) {
    const uint32_t b = (w >> (8 * i)) & 0xffu;
    const uint32_t v = (b & 0xfu) | ((b >> 4) << 16) | 0x43004300u;
    __nv_bfloat162 h = *reinterpret_cast<const __nv_bfloat162 *>(&v);
    h = __hsub2(h, off);
    r[i] = *reinterpret_cast<const uint32_t *>(&h);
  }
  return make_uint4(r[0], r[1], r[2], r[3]);
}

// d = A(16x16: rows g / g+8 from lo / hi) * B(16x8, token g from x), twice (two k16 steps), from 0.
__device__ __forceinline__ void mma2_zero(float (&d)[4], const uint4 &lo, const uint4 &hi, const uint4 &x) {
  d[0] = d[1] = d[2] = d[3] = 0.0f;
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(lo.x), "r"(hi.x), "r"(lo.y), "r"(hi.y), "r"(x.x), "r"(x.y));
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(lo.z), "r"(hi.z), "r"(lo.w), "r"(hi.w), "r"(x.z), "r"(x.w));
}

// acc += scale(row) * group sum: d[0], d[1] belong to row g (scale sl), d[2], d[3] to row g+8 (sh).
__device__ __forceinline__ void add_scaled(float (&acc)[4], const float (&d)[4], float sl, float sh) {
  acc[0] = __fmaf_rn(sl, d[0], acc[0]);
  acc[1] = __fmaf_rn(sl, d[1], acc[1]);
  acc[2] = __fmaf_rn(sh, d[2], acc[2]);
  acc[3] = __fmaf_rn(sh, d[3], acc[3]);
}

// One warp's 16 rows (x2 when DUAL) over chunks [cb, ce) of 32 k (= one scale group each), for NT
// n-tiles of 8 tokens. Lane (g = lane/4, c = lane%4) reads word c of its two rows' chunk: the 8 k
// it holds map to the mma's k slots as in moe_experts.cu's warp_tile, and x uses the same map.
template <bool DUAL, int NT>
__device__ __forceinline__ void warp_tile(const int32_t *w0, const int32_t *w1, const __nv_bfloat16 *s0,
                                          const __nv_bfloat16 *s1, int K, int cb, int ce,
                                          const __nv_bfloat16 *const (&xr)[NT], float (&acc)[2][NT][4]) {
  const int lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3;
  const int KW = K / 8, KG = K / kGroup;
  const int32_t *a0 = w0 + (int64_t)g * KW + c, *a1 = a0 + (int64_t)8 * KW;
  const int32_t *b0 = DUAL ? w1 + (int64_t)g * KW + c : nullptr, *b1 = DUAL ? b0 + (int64_t)8 * KW : nullptr;
  const __nv_bfloat16 *sa0 = s0 + (int64_t)g * KG, *sa1 = sa0 + (int64_t)8 * KG;
  const __nv_bfloat16 *sb0 = DUAL ? s1 + (int64_t)g * KG : nullptr, *sb1 = DUAL ? sb0 + (int64_t)8 * KG : nullptr;
  constexpr int U = DUAL ? (NT == 1 ? 4 : NT == 2 ? 2 : 1) : (NT <= 2 ? 4 : 2);  // loads in flight vs registers
  int ch = cb;
  for (; ch + U <= ce; ch += U) {
    uint32_t ra[U][2], rb[U][2];
    float sa[U][2], sb[U][2];
    uint4 rx[U][NT];
#pragma unroll
    for (int u = 0; u < U; u++) {
      const int k = ch + u;
      ra[u][0] = ld_word(a0 + k * 4);
      ra[u][1] = ld_word(a1 + k * 4);
      sa[u][0] = __bfloat162float(sa0[k]);
      sa[u][1] = __bfloat162float(sa1[k]);
      if (DUAL) {
        rb[u][0] = ld_word(b0 + k * 4);
        rb[u][1] = ld_word(b1 + k * 4);
        sb[u][0] = __bfloat162float(sb0[k]);
        sb[u][1] = __bfloat162float(sb1[k]);
      }
#pragma unroll
      for (int j = 0; j < NT; j++) rx[u][j] = __ldg(reinterpret_cast<const uint4 *>(xr[j] + k * kGroup + c * 8));
    }
#pragma unroll
    for (int u = 0; u < U; u++) {
      const uint4 la = unpack8(ra[u][0]), ha = unpack8(ra[u][1]);
      uint4 lb = la, hb = ha;
      if (DUAL) {
        lb = unpack8(rb[u][0]);
        hb = unpack8(rb[u][1]);
      }
#pragma unroll
      for (int j = 0; j < NT; j++) {
        float d[4];
        mma2_zero(d, la, ha, rx[u][j]);
        add_scaled(acc[0][j], d, sa[u][0], sa[u][1]);
        if (DUAL) {
          mma2_zero(d, lb, hb, rx[u][j]);
          add_scaled(acc[1][j], d, sb[u][0], sb[u][1]);
        }
      }
    }
  }
  for (; ch < ce; ch++) {
    const uint4 la = unpack8(ld_word(a0 + ch * 4)), ha = unpack8(ld_word(a1 + ch * 4));
    const float s_lo = __bfloat162float(sa0[ch]), s_hi = __bfloat162float(sa1[ch]);
    uint4 lb = la, hb = ha;
    float t_lo = 0.0f, t_hi = 0.0f;
    if (DUAL) {
      lb = unpack8(ld_word(b0 + ch * 4));
      hb = unpack8(ld_word(b1 + ch * 4));
      t_lo = __bfloat162float(sb0[ch]);
      t_hi = __bfloat162float(sb1[ch]);
    }
#pragma unroll
    for (int j = 0; j < NT; j++) {
      const uint4 xv = __ldg(reinterpret_cast<const uint4 *>(xr[j] + ch * kGroup + c * 8));
      float d[4];
      mma2_zero(d, la, ha, xv);
      add_scaled(acc[0][j], d, s_lo, s_hi);
      if (DUAL) {
        mma2_zero(d, lb, hb, xv);
        add_scaled(acc[1][j], d, t_lo, t_hi);
      }
    }
  }
}

// The INT4 policy of moe_q_common.cuh: s.w* i32 words [N, K/8], s.s* bf16 scales [N, K/32].
struct W4 {
  static constexpr int kChunk = kGroup;
  template <bool DUAL, int NT>
  static __device__ __forceinline__ void tile(const seg &s, int e, int row0, int cb, int ce,
                                              const __nv_bfloat16 *const (&xr)[NT], float (&acc)[2][NT][4]) {
    const int64_t wo = (int64_t)e * s.wstride + (int64_t)row0 * (s.K / 8);
    const int64_t so = (int64_t)e * s.sstride + (int64_t)row0 * (s.K / kGroup);
    const int32_t *w0 = (const int32_t *)s.w0, *w1 = (const int32_t *)s.w1;
    const __nv_bfloat16 *s0 = (const __nv_bfloat16 *)s.s0, *s1 = (const __nv_bfloat16 *)s.s1;
    warp_tile<DUAL, NT>(w0 + wo, DUAL ? w1 + wo : nullptr, s0 + so, DUAL ? s1 + so : nullptr, s.K, cb, ce, xr, acc);
  }
};

}  // namespace

extern "C" size_t pz_moe_w4a16_workspace_bytes(int max_m, int64_t H, const pz_moe_params *p) {
  if (!p || max_m < 1) return 0;
  return layout_of(max_m, H, p).total;
}

extern "C" pz_status pz_moe_w4a16_launch(const pz_moe_q_args *a, cudaStream_t stream) {
  if (!a) return pz_error(PZ_ERR_INVALID_ARG, "moe w4a16: NULL args");
  const pz_moe_params *p = &a->p;
  if (p->wquant != 1 || p->q_group != kGroup)
    return pz_error(PZ_ERR_INVALID_ARG, "moe w4a16: experts must be INT4 with group %d (wquant %d, group %lld)", kGroup,
                    p->wquant, (long long)p->q_group);
  const int64_t H = a->H, I = p->inter;
  if (a->m < 1 || a->m > PZ_MOE_MAX_M) return pz_error(PZ_ERR_SHAPE, "moe w4a16: m = %d outside 1..%d", a->m, PZ_MOE_MAX_M);
  const int E = p->n_experts, K = p->top_k;
  if (E < 1 || E > PZ_MOE_MAX_EXPERTS || K < 1 || K > E || K > PZ_MOE_MAX_TOPK)
    return pz_error(PZ_ERR_SHAPE, "moe w4a16: n_experts %d / top_k %d outside the limits (moe.h)", E, K);
  if (H < 32 || H % 32 || I < 32 || I % 32 || H > (1 << 20) || I > (1 << 20))
    return pz_error(PZ_ERR_SHAPE, "moe w4a16: H %lld and inter %lld must be positive multiples of 32", (long long)H,
                    (long long)I);
  if (!aligned(a->w_gate, 4) || !aligned(a->w_up, 4) || !aligned(a->w_down, 4))
    return pz_error(PZ_ERR_INVALID_ARG, "moe w4a16: the packed words must be 4-byte aligned");
  ws_layout l;
  PZ_CHECK(check_args(a, "moe w4a16", &l));
  seg up = {}, dn = {};
  up.w0 = a->w_gate; up.w1 = a->w_up; up.s0 = a->s_gate; up.s1 = a->s_up;
  up.wstride = I * (H / 8); up.sstride = I * (H / kGroup);
  up.N = (int)I; up.K = (int)H; up.WK = choose_wk(H);
  dn.w0 = a->w_down; dn.s0 = a->s_down;
  dn.wstride = H * (I / 8); dn.sstride = H * (I / kGroup);
  dn.N = (int)H; dn.K = (int)I; dn.WK = choose_wk(I);
  return run_all<W4>(a, l, up, dn, "moe w4a16", stream);
}
