// W4A16 routed experts (moe_q.h): gather, grouped gate/up + SwiGLU and down over the chosen
// experts only with the INT4 words dequantised in registers (4-bit integers as bf16 on the tensor
// cores, one f32 scale multiply per 32-column group), and the deterministic combine. Modelled on
// the bf16 expert kernels of moe_experts.cu (same item shapes and fragment map); the gather, item
// loop, combine and host flow are moe_q_common.cuh's (shared with moe_w8a16.cu). Each warp hints
// the weights and scales of the CTA's next item(s) into L2 once its own loads of the current item
// are done (prefetch_rows), so HBM stays busy over the reduction and the next item's start.
#include "backend/cuda/kernels/moe_q_common.cuh"
#include "backend/cuda/w4_tiled.h"
#include "backend/cuda/moe_w4_split.h"
#include <stdlib.h>

namespace {

using namespace moeq;
constexpr int kGroup = 32;     // INT4 columns per scale = k per chunk

// ---------------------------------------------------------------- INT4 x bf16 tensor-core tile

// (x & 0x000f000f) | 0x43004300 as one LOP3 (0xEA = (a & b) | c): nibbles 0 and 4 of x as the bf16 pair
// (128 + u0, 128 + u4). Written out because ptxas keeps the AND and the OR apart when both constants
// are immediates (a LOP3 takes one), one more instruction per bf16 pair of every unpack below; here
// the magic lives in a register, set once.
__device__ __forceinline__ uint32_t nib_pair(uint32_t x) {
  uint32_t v;
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(v) : "r"(x), "n"(0x000f000f), "r"(0x43004300u));
  return v;
}

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

// ---------------------------------------------------------------- 16-byte path (W4V)
// One uint4 per lane and row = one whole 32-column group (4 words). Per "super-chunk" of 4 groups
// lane c of a quad loads group ch+c of rows g and g+8 (each warp load: 8 rows x 64 contiguous
// bytes), then a 4x4 transpose inside the quad gives lane c word c of each of the 4 groups: the
// same per-group fragment map as warp_tile above, so every mma still sums one group only and the
// scale is applied per group in f32 exactly as before.

__device__ __forceinline__ uint4 ld16(const uint4 *p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}

// v (lane c of the quad: words 0..3 of group c) -> words c of groups 0..3 (block transpose by
// xor 2, then 2x2 transposes by xor 1; two shuffles per stage).
__device__ __forceinline__ void quad_transpose(uint4 &v, int c) {
  const unsigned full = 0xffffffffu;
  {
    const bool h = (c & 2) != 0;
    const uint32_t s0 = h ? v.x : v.z, s1 = h ? v.y : v.w;
    const uint32_t r0 = __shfl_xor_sync(full, s0, 2), r1 = __shfl_xor_sync(full, s1, 2);
    if (h) { v.x = r0; v.y = r1; } else { v.z = r0; v.w = r1; }
  }
  {
    const bool h = (c & 1) != 0;
    const uint32_t s0 = h ? v.x : v.y, s1 = h ? v.z : v.w;
    const uint32_t r0 = __shfl_xor_sync(full, s0, 1), r1 = __shfl_xor_sync(full, s1, 1);
    if (h) { v.x = r0; v.z = r1; } else { v.y = r0; v.w = r1; }
  }
}

__device__ __forceinline__ uint32_t comp(const uint4 &v, int i) {
  return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

// 8 nibbles of a word as 4 bf16 pairs in the order (i, i+4) for register i (one shift + lop3 +
// bf16 subtract each); x is permuted to the same order by perm_x. bf16 bits 0x4300 | u = 128 + u.
__device__ __forceinline__ uint4 unpack8p(uint32_t w) {
  const __nv_bfloat162 off = __floats2bfloat162_rn(136.0f, 136.0f);
  uint32_t r[4];
#pragma unroll
  for (int i = 0; i < 4; i++) {
    const uint32_t v = nib_pair(w >> (4 * i));
    __nv_bfloat162 h = *reinterpret_cast<const __nv_bfloat162 *>(&v);
    h = __hsub2(h, off);
    r[i] = *reinterpret_cast<const uint32_t *>(&h);
  }
  return make_uint4(r[0], r[1], r[2], r[3]);
}

// 8 consecutive bf16 (x0..x7 as (0,1) (2,3) (4,5) (6,7)) -> (0,4) (1,5) (2,6) (3,7).
__device__ __forceinline__ uint4 perm_x(const uint4 &x) {
  return make_uint4(__byte_perm(x.x, x.z, 0x5410), __byte_perm(x.x, x.z, 0x7632), __byte_perm(x.y, x.w, 0x5410),
                    __byte_perm(x.y, x.w, 0x7632));
}

// Scales of groups ch..ch+3 for rows g / g+8: lane c loads group ch+c (coalesced over the quad),
// packed (row g low, row g+8 high); lane G of the quad holds group G.
__device__ __forceinline__ uint32_t ld_scales(const __nv_bfloat16 *lo, const __nv_bfloat16 *hi, int k) {
  const unsigned short a = __ldg(reinterpret_cast<const unsigned short *>(lo) + k);
  const unsigned short b = __ldg(reinterpret_cast<const unsigned short *>(hi) + k);
  return (uint32_t)a | ((uint32_t)b << 16);
}
__device__ __forceinline__ float bf_lo(uint32_t v) { return __uint_as_float(v << 16); }
__device__ __forceinline__ float bf_hi(uint32_t v) { return __uint_as_float(v & 0xffff0000u); }

template <bool DUAL, int NT>
struct vbuf {
  uint4 a[2], b[DUAL ? 2 : 1];
  uint32_t sa, sb;
};

template <bool DUAL, int NT, int U>
__device__ __forceinline__ void vload(vbuf<DUAL, NT> (&r)[U], const uint4 *a0, const uint4 *a1, const uint4 *b0,
                                      const uint4 *b1, const __nv_bfloat16 *sa0, const __nv_bfloat16 *sa1,
                                      const __nv_bfloat16 *sb0, const __nv_bfloat16 *sb1, int ch, int c) {
#pragma unroll
  for (int u = 0; u < U; u++) {
    const int k = ch + 4 * u + c;
    r[u].a[0] = ld16(a0 + k);
    r[u].a[1] = ld16(a1 + k);
    r[u].sa = ld_scales(sa0, sa1, k);
    if (DUAL) {
      r[u].b[DUAL ? 1 : 0] = ld16(b1 + k);
      r[u].b[0] = ld16(b0 + k);
      r[u].sb = ld_scales(sb0, sb1, k);
    } else {
      r[u].sb = 0;
    }
  }
}

template <bool DUAL, int NT, int U>
__device__ __forceinline__ void vcompute(vbuf<DUAL, NT> (&r)[U], int ch, int lane,
                                         const __nv_bfloat16 *const (&xr)[NT], float (&acc)[2][NT][4]) {
  const int c = lane & 3, qb = lane & ~3;
  const unsigned full = 0xffffffffu;
#pragma unroll
  for (int u = 0; u < U; u++) {
    quad_transpose(r[u].a[0], c);
    quad_transpose(r[u].a[1], c);
    if (DUAL) {
      quad_transpose(r[u].b[0], c);
      quad_transpose(r[u].b[DUAL ? 1 : 0], c);
    }
#pragma unroll
    for (int G = 0; G < 4; G++) {
      const int k = ch + 4 * u + G;
      const uint32_t sa = __shfl_sync(full, r[u].sa, qb | G);
      const uint32_t sb = DUAL ? __shfl_sync(full, r[u].sb, qb | G) : 0u;
      const uint4 la = unpack8p(comp(r[u].a[0], G)), ha = unpack8p(comp(r[u].a[1], G));
      uint4 lb = la, hb = ha;
      if (DUAL) {
        lb = unpack8p(comp(r[u].b[0], G));
        hb = unpack8p(comp(r[u].b[DUAL ? 1 : 0], G));
      }
#pragma unroll
      for (int j = 0; j < NT; j++) {
        const uint4 xv = perm_x(__ldg(reinterpret_cast<const uint4 *>(xr[j] + k * kGroup + c * 8)));
        float d[4];
        mma2_zero(d, la, ha, xv);
        add_scaled(acc[0][j], d, bf_lo(sa), bf_hi(sa));
        if (DUAL) {
          mma2_zero(d, lb, hb, xv);
          add_scaled(acc[1][j], d, bf_lo(sb), bf_hi(sb));
        }
      }
    }
  }
}

// Same contract as warp_tile; needs 16-byte aligned weights (rows are: K % 32 == 0). Whole
// super-chunks of 4 groups go through the 16-byte path, U at a time with the next U prefetched into
// registers while the current ones are computed; the < 4 groups left use warp_tile's loads.
template <bool DUAL, int NT>
__device__ __forceinline__ void warp_tile_v(const int32_t *w0, const int32_t *w1, const __nv_bfloat16 *s0,
                                            const __nv_bfloat16 *s1, int K, int cb, int ce,
                                            const __nv_bfloat16 *const (&xr)[NT], float (&acc)[2][NT][4]) {
  const int lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3;
  const int KQ = K / 32, KG = K / kGroup;  // uint4 per row, scales per row
  const uint4 *a0 = reinterpret_cast<const uint4 *>(w0) + (int64_t)g * KQ, *a1 = a0 + (int64_t)8 * KQ;
  const uint4 *b0 = DUAL ? reinterpret_cast<const uint4 *>(w1) + (int64_t)g * KQ : a0;
  const uint4 *b1 = DUAL ? b0 + (int64_t)8 * KQ : a1;
  const __nv_bfloat16 *sa0 = s0 + (int64_t)g * KG, *sa1 = sa0 + (int64_t)8 * KG;
  const __nv_bfloat16 *sb0 = DUAL ? s1 + (int64_t)g * KG : sa0, *sb1 = DUAL ? sb0 + (int64_t)8 * KG : sa1;
  constexpr int U = DUAL ? 1 : (NT <= 2 ? 2 : 1);
  constexpr bool PF = DUAL ? NT <= 1 : NT <= 2;  // prefetch only where the registers allow (no spills)
  constexpr int S = 4 * U;  // groups per step
  int ch = cb;
  if (PF && ch + S <= ce) {
    vbuf<DUAL, NT> cur[U];
    vload<DUAL, NT, U>(cur, a0, a1, b0, b1, sa0, sa1, sb0, sb1, ch, c);
    for (;;) {
      const bool more = ch + 2 * S <= ce;
      vbuf<DUAL, NT> nxt[U];
      if (more) vload<DUAL, NT, U>(nxt, a0, a1, b0, b1, sa0, sa1, sb0, sb1, ch + S, c);
      vcompute<DUAL, NT, U>(cur, ch, lane, xr, acc);
      ch += S;
      if (!more) break;
#pragma unroll
      for (int u = 0; u < U; u++) cur[u] = nxt[u];
    }
  }
  // Whole super-chunks left (fewer than U), one at a time.
  for (; ch + 4 <= ce; ch += 4) {
    vbuf<DUAL, NT> one[1];
    vload<DUAL, NT, 1>(one, a0, a1, b0, b1, sa0, sa1, sb0, sb1, ch, c);
    vcompute<DUAL, NT, 1>(one, ch, lane, xr, acc);
  }
  if (ch < ce) warp_tile<DUAL, NT>(w0, w1, s0, s1, K, ch, ce, xr, acc);
}

// ---------------------------------------------------------------- tiled layout (W4T)
// The layout of pz_moe_w4a16_tile (moe_q.h; our own, after the idea of pre-permuting quantised
// weights offline so that each thread's load is its mma fragment, as the Marlin kernel does):
// per 16-row block b and 128-column super-chunk sc of a matrix, 1024 bytes of words, unit u of 16
// bytes = lane (g, c) = (u % 32 / 4, u % 4) of row half h = u / 32, holding word c (columns
// 8c..8c+7 of the group) of groups 4 sc + 0..3 of row 16 b + 8 h + g, its nibbles in mma order
// (column 2i at nibble i, 2i + 1 at nibble i + 4); the scales likewise, 128 bytes per (b, sc):
// unit g holds (row 16 b + g, row 16 b + 8 + g) of groups 4 sc + 0..3 as bf16 pairs. So lane l
// reads rows g and g + 8 with two coalesced 16-byte loads (units l and 32 + l) and its 8 scales
// with one, and no shuffle or permute is left: each mma still sums one group, in the 4-byte
// path's k-slot order (warp_tile), and its scale multiplies the f32 group sum as before.

template <bool DUAL>
struct tstage {
  uint4 lo, hi, sc;            // rows g / g + 8 of matrix 0, its scales
  uint4 lo1, hi1, sc1;         // matrix 1 (DUAL)
};

template <bool DUAL>
__device__ __forceinline__ void tload(tstage<DUAL> &b, const uint4 *wa, const uint4 *wb, const uint4 *sa,
                                      const uint4 *sb) {
  b.lo = ld16(wa);
  b.hi = ld16(wa + 32);
  b.sc = ld16(sa); /* streamed once like the words: not into L1, which keeps the activations */
  if (DUAL) {
    b.lo1 = ld16(wb);
    b.hi1 = ld16(wb + 32);
    b.sc1 = ld16(sb);
  }
}

template <bool DUAL, int NT>
__device__ __forceinline__ void tcompute(const tstage<DUAL> &b, const uint4 *const (&xq)[NT], float (&acc)[2][NT][4]) {
#pragma unroll
  for (int G = 0; G < 4; G++) {
    uint4 xv[NT];
#pragma unroll
    for (int j = 0; j < NT; j++) xv[j] = __ldg(xq[j] + G * (kGroup / 8));
    {  /* matrix 0, then (DUAL) matrix 1: one pair of unpacked rows live at a time */
      const uint4 l = unpack8p(comp(b.lo, G)), h = unpack8p(comp(b.hi, G));
      const uint32_t sw = comp(b.sc, G);
#pragma unroll
      for (int j = 0; j < NT; j++) {
        float d[4];
        mma2_zero(d, l, h, xv[j]);
        add_scaled(acc[0][j], d, bf_lo(sw), bf_hi(sw));
      }
    }
    if (DUAL) {
      const uint4 l = unpack8p(comp(b.lo1, G)), h = unpack8p(comp(b.hi1, G));
      const uint32_t sw = comp(b.sc1, G);
#pragma unroll
      for (int j = 0; j < NT; j++) {
        float d[4];
        mma2_zero(d, l, h, xv[j]);
        add_scaled(acc[1][j], d, bf_lo(sw), bf_hi(sw));
      }
    }
  }
}

// Super-chunks [cb, ce) of one warp's 16-row block (wa / sa: the block's words / scales at this
// lane's unit), each loaded then computed: no registers go to a prefetch ring, so 3-4 CTAs (24-32 warps)
// fit an SM and the other warps hide the load latency. On the H200 that beat a register pipeline one
// or two super-chunks ahead at 2 CTAs per SM on every Kimi-K2.5 row (TP 1 m = 16: 1056 against
// 1184 us; m = 128: 3433 against 3897 us; bench moe --quant int4, one build, 2026-12-01); a one-ahead
// load in the down pass alone (its single-matrix stage fits the 64 registers without spills) measured
// equal within 1 % at TP 1 / 2 / 4 (bench/results/moe_h200_int4_ab/, 2026-12-02) and was removed. At 64
// registers the paths for 2-4 n-tiles (9-32 tokens of one expert in a work item) spill, and gate/up's
// 1-n-tile path did too (7 registers per step), which is why gate/up now runs 3 CTAs per SM with up to 80
// registers (W4T below); its 2-4 n-tile paths still spill there. Uniform decode routing runs the 1-n-tile
// path, which those timings measure. Also measured and dropped (bench/results/moe_h200_int4_ab/README.md): a cp.async
// ring per warp in shared memory, at 4 CTAs per SM (rounds 65-66) and at 2 CTAs per SM with 128
// registers and 4 stages (round 75: TP 1 m 16 4 % faster, TP 4 m 128 12 % slower); the 136 taken out
// by an extra mma per group instead of the bf16 subtract (round 74: 25 % slower: the mma.sync pipe and
// its latency chain, not the ALU count, bound this loop).
template <bool DUAL, int NT>
__device__ __forceinline__ void warp_tile_t(const uint4 *wa, const uint4 *wb, const uint4 *sa, const uint4 *sb, int cb,
                                            int ce, const __nv_bfloat16 *const (&xr)[NT], float (&acc)[2][NT][4]) {
  const int c = threadIdx.x & 3;
  /* pointers advanced per super-chunk (64 units of words, 8 of scales, 16 of x), not recomputed */
  const uint4 *xq[NT];
#pragma unroll
  for (int j = 0; j < NT; j++) xq[j] = reinterpret_cast<const uint4 *>(xr[j] + (int64_t)cb * 128 + c * 8);
  wa += (int64_t)cb * 64; wb += (int64_t)cb * 64; sa += (int64_t)cb * 8; sb += (int64_t)cb * 8;
  for (int sc = cb; sc < ce; sc++) {
    tstage<DUAL> b;
    tload<DUAL>(b, wa, wb, sa, sb);
    tcompute<DUAL, NT>(b, xq, acc);
    wa += 64; wb += 64; sa += 8; sb += 8;
#pragma unroll
    for (int j = 0; j < NT; j++) xq[j] += 16;
  }
}

// The tiled policy: s.w* words and s.s* scales in pz_moe_w4a16_tile's layout (N % 16 == 0,
// K % 128 == 0), chunks of 128 columns (4 groups), 4 CTAs per SM (64 registers per thread); gate/up 3 per
// SM (80 registers) unless pz_moe_w4_up_ctas or w4_up_ctas says 4.
struct W4T {
  static constexpr int kChunk = 128;
  static constexpr int kMinBlocks = 4;
  static constexpr bool kTail = true; /* the tail split (moe_q_common.cuh tail_of) */
  /* gate/up: 3 CTAs per SM, 80 registers: its 1-n-tile loop holds both matrices' words and scales and
     spilled 7 registers per step at 64 (cuobjdump; ncu round 112: 2.8 GB of L2 writes in one Kimi-K2.5
     TP 1 m 64 gate/up launch, which moved 4.7 GB of weights); none at 80 */
  static constexpr int kMinBlocksUp = 3;
  template <bool DUAL, int NT>
  static __device__ __forceinline__ void tile(const seg &s, int e, int row0, int cb, int ce,
                                              const __nv_bfloat16 *const (&xr)[NT], float (&acc)[2][NT][4]) {
    const int lane = threadIdx.x & 31;
    const int64_t blk = (int64_t)(s.K / 128) * (row0 / 16); /* super-chunks before this row block */
    const uint4 *w0 = reinterpret_cast<const uint4 *>(s.w0) + (int64_t)e * (s.wstride / 4) + blk * 64 + lane;
    const uint4 *w1 = DUAL ? reinterpret_cast<const uint4 *>(s.w1) + (int64_t)e * (s.wstride / 4) + blk * 64 + lane : w0;
    const uint4 *s0 = reinterpret_cast<const uint4 *>(s.s0) + (int64_t)e * (s.sstride / 8) + blk * 8 + (lane >> 2);
    const uint4 *s1 = DUAL ? reinterpret_cast<const uint4 *>(s.s1) + (int64_t)e * (s.sstride / 8) + blk * 8 + (lane >> 2) : s0;
    warp_tile_t<DUAL, NT>(w0, w1, s0, s1, cb, ce, xr, acc);
  }
};

// ---------------------------------------------------------------- L2 prefetch (hints only)
// One warp hints into L2 what its tile over groups [cb, ce) of rows row0..row0+15 will read: lane
// (row lane % 16, matrix lane / 16 when DUAL, else half lane / 16 of the groups) covers its row's
// weights (BULK: cp.async.bulk.prefetch, 16-byte aligned, else one prefetch per 32-byte sector)
// and scales, 8 groups (128 weight bytes) per step in k order across the lanes, so the bytes
// arrive roughly in the order the tile consumes them. No results depend on it.

__device__ __forceinline__ void pf_l2(const void *q) { asm volatile("prefetch.global.L2 [%0];" ::"l"(q)); }

__device__ __forceinline__ void pf_bulk(const void *q, uint32_t bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(q), "r"(bytes) : "memory");
#else
  for (uint32_t o = 0; o < bytes; o += 32) pf_l2((const char *)q + o);
#endif
}

template <bool DUAL, bool BULK>
__device__ __forceinline__ void prefetch_rows(const seg &s, int e, int row0, int cb, int ce) {
  const int lane = threadIdx.x & 31, row = lane & 15, hi = lane >> 4;
  const int m = DUAL ? hi : 0;
  int g0 = cb, g1 = ce;
  if (!DUAL) {
    const int mid = cb + (ce - cb) / 2;
    g0 = hi ? mid : cb;
    g1 = hi ? ce : mid;
  }
  if (g0 >= g1) return;
  const int64_t r = (int64_t)row0 + row;
  const char *w = (const char *)(m ? s.w1 : s.w0) + 4 * ((int64_t)e * s.wstride + r * (s.K / 8));
  const char *sc = (const char *)(m ? s.s1 : s.s0) + 2 * ((int64_t)e * s.sstride + r * (s.K / kGroup));
  for (int g = g0; g < g1; g += 8) {
    const int n = g1 - g < 8 ? g1 - g : 8;  // groups this step: 16 bytes of weights, 2 of scales each
    if (BULK) {
      pf_bulk(w + 16 * (int64_t)g, 16u * (uint32_t)n);
    } else {
      for (int o = 0; o < 16 * n; o += 32) pf_l2(w + 16 * (int64_t)g + o);
      pf_l2(w + 16 * (int64_t)(g + n) - 1);
    }
    pf_l2(sc + 2 * (int64_t)g);
    pf_l2(sc + 2 * (int64_t)(g + n) - 1);
  }
}

// The INT4 policy of moe_q_common.cuh: s.w* i32 words [N, K/8], s.s* bf16 scales [N, K/32].
// V16: the 16-byte weight loads (weights 16-byte aligned; same layout and results as the 4-byte
// path). PF: the L2 prefetch hook (kernel-side hints only; PF false is the kernel of c6c16cc).
template <bool PF, bool V16>
struct W4P {
  static constexpr int kChunk = kGroup;
  static constexpr bool kL2Prefetch = PF;
  static constexpr bool kTail = true;
  template <bool DUAL>
  static __device__ __forceinline__ void prefetch(const seg &s, int e, int row0, int cb, int ce) {
    prefetch_rows<DUAL, V16>(s, e, row0, cb, ce);
  }
  template <bool DUAL, int NT>
  static __device__ __forceinline__ void tile(const seg &s, int e, int row0, int cb, int ce,
                                              const __nv_bfloat16 *const (&xr)[NT], float (&acc)[2][NT][4]) {
    const int64_t wo = (int64_t)e * s.wstride + (int64_t)row0 * (s.K / 8);
    const int64_t so = (int64_t)e * s.sstride + (int64_t)row0 * (s.K / kGroup);
    const int32_t *w0 = (const int32_t *)s.w0, *w1 = (const int32_t *)s.w1;
    const __nv_bfloat16 *s0 = (const __nv_bfloat16 *)s.s0, *s1 = (const __nv_bfloat16 *)s.s1;
    /* NT >= 2 (9+ tokens of one expert in the item: rare in decode) keeps the 4-byte path: the 16-byte
       one's x loads for 4 groups do not fit 128 registers there without spills. */
    if constexpr (V16 && NT <= 1)
      warp_tile_v<DUAL, NT>(w0 + wo, DUAL ? w1 + wo : nullptr, s0 + so, DUAL ? s1 + so : nullptr, s.K, cb, ce, xr, acc);
    else
      warp_tile<DUAL, NT>(w0 + wo, DUAL ? w1 + wo : nullptr, s0 + so, DUAL ? s1 + so : nullptr, s.K, cb, ce, xr, acc);
  }
};
template <bool PF> using W4V = W4P<PF, true>;
template <bool PF> using W4 = W4P<PF, false>;

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
  const int wks[2] = {a->w4_wk_up, a->w4_wk_dn};
  for (int i = 0; i < 2; i++)
    if (wks[i] != 0 && wks[i] != 1 && wks[i] != 2 && wks[i] != 4 && wks[i] != 8)
      return pz_error(PZ_ERR_INVALID_ARG, "moe w4a16: %s %d is not 0, 1, 2, 4 or 8", i ? "w4_wk_dn" : "w4_wk_up", wks[i]);
  up.N = (int)I; up.K = (int)H;
  dn.w0 = a->w_down; dn.s0 = a->s_down;
  dn.wstride = H * (I / 8); dn.sstride = H * (I / kGroup);
  dn.N = (int)H; dn.K = (int)I;
  /* the K split per work item (moe_w4_split.h): adaptive on tiled experts unless w4_wk_fixed, on the CTA
     slots launch_mm's grid has: W4T::kMinBlocks per SM for down (its 64 registers make it exact); for gate/up
     the instance w4_up_ctas or pz_moe_w4_up_ctas picks, its slots read from the occupancy the launch will
     have (the 32 KB of reduction memory included). The SM count is read for tiled experts only */
  static_assert(W4T::kMinBlocks == 4 && W4T::kMinBlocksUp == 3, "pz_moe_w4_up_ctas chooses between 3 and 4");
  if (a->w4_up_ctas != 0 && a->w4_up_ctas != 3 && a->w4_up_ctas != 4)
    return pz_error(PZ_ERR_INVALID_ARG, "moe w4a16: w4_up_ctas %d is not 0 (by batch), 3 or 4", a->w4_up_ctas);
  int sms = 0, up_per_sm = W4T::kMinBlocks;
  const int tiled = a->w4_tiled != 0 && H % 128 == 0 && I % 128 == 0, adaptive = a->w4_wk_fixed ? 0 : a->w4_waves_off ? 1 : 2;
  if (tiled) {
    int dev = 0;
    PZ_CUDA_CHECK_MSG(cudaGetDevice(&dev), "moe w4a16: cannot read the current device");
    PZ_CUDA_CHECK_MSG(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev), "moe w4a16: SM count");
  }
  const int up_ctas = !tiled ? W4T::kMinBlocks
                      : a->w4_up_ctas ? a->w4_up_ctas
                                      : pz_moe_w4_up_ctas(H, I, a->m, K, E, sms, a->w4_wk_up, adaptive);
  if (tiled) {
    PZ_CUDA_CHECK_MSG(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
                          &up_per_sm, mm_kernel_of<W4T, true>(up_ctas == W4T::kMinBlocks, a->items_dynamic != 0, !a->tail_off), kThreads, kRedBytes),
                      "moe w4a16: occupancy of the gate/up kernel");
    if (up_per_sm < 1) up_per_sm = 1;
  }
  const int slots = W4T::kMinBlocks * sms, slots_up = up_per_sm * sms; /* 0 (not read): the fixed rule */
  up.WK = a->w4_wk_up ? a->w4_wk_up : pz_moe_w4_wk(1, H, I, a->m, K, E, slots_up, tiled, adaptive);
  dn.WK = a->w4_wk_dn ? a->w4_wk_dn : pz_moe_w4_wk(0, H, I, a->m, K, E, slots, tiled, adaptive);
  up.direct = dn.direct = !a->direct_off;
  /* the tail split (moe_q_common.cuh tail_of): sub-items up to 8 warps and K's 128-column super-chunks */
  up.tail_wk = a->tail_off ? 0 : pz_moe_w4_wk_cap(H);
  dn.tail_wk = a->tail_off ? 0 : pz_moe_w4_wk_cap(I);
  if (a->w4_tiled) { /* pz_moe_w4a16_tile's layout (W4T): 128-column super-chunks, 16-byte units */
    if (H % 128 || I % 128)
      return pz_error(PZ_ERR_SHAPE, "moe w4a16: tiled experts need H %lld and inter %lld multiples of 128",
                      (long long)H, (long long)I);
    const void *pp[] = {a->w_gate, a->w_up, a->w_down, a->s_gate, a->s_up, a->s_down};
    for (int i = 0; i < 6; i++)
      if (!aligned(pp[i], 16)) return pz_error(PZ_ERR_INVALID_ARG, "moe w4a16: tiled experts must be 16-byte aligned");
    pz_moe_q_args at = *a;
    at.w4_up_ctas = up_ctas; /* which gate/up kernel run_all launches */
    return run_all<W4T>(&at, l, up, dn, "moe w4a16", stream);
  }
  /* 16-byte weight loads when every packed array is 16-byte aligned (rows and experts then are:
     K % 32 == 0); otherwise the 4-byte path, same results. */
  const bool v16 = aligned(a->w_gate, 16) && aligned(a->w_up, 16) && aligned(a->w_down, 16);
  /* L2 prefetch of the next items (same results): a->l2pf (PREZERO_MOE_L2PF=1); off by default. */
  const bool pf = a->l2pf != 0;
  if (v16) return pf ? run_all<W4V<true>>(a, l, up, dn, "moe w4a16", stream)
                     : run_all<W4V<false>>(a, l, up, dn, "moe w4a16", stream);
  return pf ? run_all<W4<true>>(a, l, up, dn, "moe w4a16", stream)
            : run_all<W4<false>>(a, l, up, dn, "moe w4a16", stream);
}

// ---------------------------------------------------------------- the tiled layout's repack

namespace {
// One thread per source word (kind 0) or scale (kind 1) of `nm` matrices [N, K]: its tiled place
// in dst (w4_tiled.h), words with their nibbles permuted.
__global__ void w4_tile_kernel(const void *src, void *dst, int64_t nm, int64_t N, int64_t K, int kind) {
  const int64_t per_row = kind == 0 ? K / 8 : K / 32, per_mat = N * per_row;
  const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= nm * per_mat) return;
  const int64_t mat = i / per_mat, r = (i % per_mat) / per_row, j = i % per_row;
  if (kind == 0) {
    ((uint32_t *)dst)[mat * per_mat + pz_w4t_word_index(K, r, j)] = pz_w4t_perm(((const uint32_t *)src)[i]);
  } else {
    ((uint16_t *)dst)[mat * per_mat + pz_w4t_scale_index(K, r, j)] = ((const uint16_t *)src)[i];
  }
}
}  // namespace

extern "C" size_t pz_moe_w4a16_tile_tmp_bytes(int64_t N, int64_t K) {
  return N > 0 && K > 0 ? (size_t)(N * (K / 8)) * 4 : 0;
}

extern "C" pz_status pz_moe_w4a16_tile(void *words, void *scales, int64_t E, int64_t N, int64_t K, void *tmp,
                                       size_t tmp_bytes, cudaStream_t stream) {
  if (E < 1 || !pz_w4t_shape_ok(N, K))
    return pz_error(PZ_ERR_SHAPE, "moe w4a16 tile: %lld matrices [%lld, %lld] (needs rows %% 16, columns %% 128)",
                    (long long)E, (long long)N, (long long)K);
  if ((!words && !scales) || !tmp || !aligned(words, 16) || !aligned(scales, 16))
    return pz_error(PZ_ERR_INVALID_ARG, "moe w4a16 tile: NULL or not 16-byte aligned pointers");
  const size_t mat = pz_moe_w4a16_tile_tmp_bytes(N, K);
  if (tmp_bytes < mat)
    return pz_error(PZ_ERR_INVALID_ARG, "moe w4a16 tile: %zu bytes of scratch, needs %zu", tmp_bytes, mat);
  const int64_t per = (int64_t)(tmp_bytes / mat); /* matrices per pass */
  for (int kind = 0; kind < 2; kind++) {
    char *base = (char *)(kind == 0 ? words : scales);
    if (!base) continue; /* only the other array (it is shared with a matrix tiled before) */
    const int64_t mat_bytes = kind == 0 ? N * (K / 8) * 4 : N * (K / 32) * 2;
    const int64_t per_mat = kind == 0 ? N * (K / 8) : N * (K / 32);
    for (int64_t e0 = 0; e0 < E; e0 += per) {
      const int64_t nm = E - e0 < per ? E - e0 : per;
      const int64_t n = nm * per_mat;
      w4_tile_kernel<<<(unsigned)((n + 255) / 256), 256, 0, stream>>>(base + e0 * mat_bytes, tmp, nm, N, K, kind);
      PZ_CUDA_CHECK(cudaGetLastError());
      PZ_CUDA_CHECK(cudaMemcpyAsync(base + e0 * mat_bytes, tmp, (size_t)(nm * mat_bytes), cudaMemcpyDeviceToDevice, stream));
    }
  }
  return PZ_OK;
}
