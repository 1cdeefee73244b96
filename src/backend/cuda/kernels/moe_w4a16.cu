// W4A16 routed experts (moe_q.h): gather, grouped gate/up + SwiGLU and down over the chosen
// experts only with the INT4 words dequantised in registers (4-bit integers as bf16 on the tensor
// cores, one f32 scale multiply per 32-column group), and the deterministic combine. Modelled on
// the bf16 expert kernels of moe_experts.cu (same item shapes and fragment map).
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>
extern "C" { /* core/status.h has no C++ guards of its own */
#include "core/status.h"
}
#include "backend/cuda/cuda_util.h"
#include "backend/cuda/moe.h"
#include "backend/cuda/moe_q.h"

namespace {

constexpr int kThreads = 256;  // 8 warps
constexpr int kWarps = kThreads / 32;
constexpr int kTok = 32;       // tokens per work item (4 n-tiles of 8)
constexpr int kGroup = 32;     // INT4 columns per scale = k per chunk

// ---------------------------------------------------------------- gather

struct gather_params {
  int n_pairs, K, E;
  const int32_t *ids;  // [m*K]
  int *pairs;          // [m*K] out: pair index by sorted position (expert, then pair order)
  int4 *work;          // out: {expert, first position, count, 0}
  int *n_work;         // [1] out
};

// One CTA: counts (shared atomics, order-free), serial scans by thread 0 (E <= 1024), then thread 0
// places the pairs in pair order (<= 8192 pairs), so every expert's list is sorted: deterministic.
__global__ void __launch_bounds__(1024) w4_gather_kernel(gather_params p) {
  __shared__ int s_pos[PZ_MOE_MAX_EXPERTS];
  for (int e = threadIdx.x; e < p.E; e += blockDim.x) s_pos[e] = 0;
  __syncthreads();
  for (int q = threadIdx.x; q < p.n_pairs; q += blockDim.x) {
    const int id = p.ids[q];
    if (id >= 0 && id < p.E) atomicAdd(&s_pos[id], 1);
  }
  __syncthreads();
  if (threadIdx.x != 0) return;
  int off = 0, nw = 0;
  for (int e = 0; e < p.E; e++) {
    const int c = s_pos[e];
    for (int j = 0; j < c; j += kTok) p.work[nw++] = make_int4(e, off + j, c - j < kTok ? c - j : kTok, 0);
    s_pos[e] = off;
    off += c;
  }
  *p.n_work = nw;
  for (int q = 0; q < p.n_pairs; q++) {
    const int id = p.ids[q];
    if (id >= 0 && id < p.E) p.pairs[s_pos[id]++] = q;
  }
}

// ---------------------------------------------------------------- INT4 x bf16 tensor-core tile

struct seg {
  const int32_t *w0, *w1;        // packed [N, K/8] of expert 0 (w1: up, DUAL only)
  const __nv_bfloat16 *s0, *s1;  // scales [N, K/32]
  int64_t wstride, sstride;      // words / scales between experts
  int N, K, WK;                  // rows, reduction length, warps splitting K
  const __nv_bfloat16 *in;       // input rows, stride ld_in
  int64_t ld_in;
  int in_mode;                   // 1: row = pairs[pos] / topk (x of the token), 0: row = pos (h)
  void *out;                     // bf16 h (DUAL) or f32 d
  int64_t ld_out;
  int out_mode;                  // 0: row = pos, 1: row = pairs[pos]
};

struct mm_params {
  seg s;
  int topk;
  const int *pairs;
  const int4 *work;
  const int *n_work;
};

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

__device__ __forceinline__ float silu_mul(float g, float u) {
  float s = __fdiv_rn(g, __fadd_rn(1.0f, expf(-g)));
  return __fmul_rn(s, u);
}

// One item: rows [tile*16*WR, ..) for cnt (<= 32) tokens at sorted positions pos0.., expert e.
// WR row groups x WK K slices of warps; slices reduced in warp order through shared memory.
template <bool DUAL, int NT>
__device__ void run_item(const mm_params &p, int e, int tile, int pos0, int cnt, float *red) {
  const seg &s = p.s;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int WK = s.WK, WR = kWarps / WK, wr = warp / WK, wk = warp % WK;
  const int row0 = (tile * WR + wr) * 16;
  float acc[2][NT][4];
#pragma unroll
  for (int a = 0; a < 2; a++)
#pragma unroll
    for (int j = 0; j < NT; j++)
#pragma unroll
      for (int r = 0; r < 4; r++) acc[a][j][r] = 0.0f;
  if (row0 < s.N) {
    const __nv_bfloat16 *xr[NT];
#pragma unroll
    for (int j = 0; j < NT; j++) {
      int slot = j * 8 + (lane >> 2);
      if (slot >= cnt) slot = cnt - 1;
      const int pos = pos0 + slot;
      const int row = s.in_mode == 1 ? p.pairs[pos] / p.topk : pos;
      xr[j] = s.in + (int64_t)row * s.ld_in;
    }
    const int nch = s.K / kGroup;
    const int cb = (int)((int64_t)wk * nch / WK), ce = (int)((int64_t)(wk + 1) * nch / WK);
    const int64_t wo = (int64_t)e * s.wstride + (int64_t)row0 * (s.K / 8);
    const int64_t so = (int64_t)e * s.sstride + (int64_t)row0 * (s.K / kGroup);
    warp_tile<DUAL, NT>(s.w0 + wo, DUAL ? s.w1 + wo : nullptr, s.s0 + so, DUAL ? s.s1 + so : nullptr, s.K, cb, ce,
                        xr, acc);
  }
  constexpr int NM = DUAL ? 2 : 1;
#pragma unroll
  for (int a = 0; a < NM; a++)
#pragma unroll
    for (int j = 0; j < NT; j++)
#pragma unroll
      for (int r = 0; r < 4; r++) red[(((warp * NM + a) * NT + j) * 4 + r) * 32 + lane] = acc[a][j][r];
  __syncthreads();
  const int per_wr = 16 * NT * 8;
  for (int f = threadIdx.x; f < WR * per_wr; f += kThreads) {
    const int fr = f / per_wr, rem = f % per_wr, tok = rem / 16, row = rem % 16;
    const int grow = (tile * WR + fr) * 16 + row;
    if (tok >= cnt || grow >= s.N) continue;
    const int j = tok >> 3, n = tok & 7;
    const int ln = (row & 7) * 4 + (n >> 1), r = (row >> 3) * 2 + (n & 1);
    float v[2] = {0.0f, 0.0f};
#pragma unroll
    for (int a = 0; a < NM; a++)
      for (int q = 0; q < WK; q++) v[a] += red[((((fr * WK + q) * NM + a) * NT + j) * 4 + r) * 32 + ln];
    const int pos = pos0 + tok;
    const int orow = s.out_mode == 1 ? p.pairs[pos] : pos;
    if (DUAL) reinterpret_cast<__nv_bfloat16 *>(s.out)[(int64_t)orow * s.ld_out + grow] = __float2bfloat16_rn(silu_mul(v[0], v[1]));
    else reinterpret_cast<float *>(s.out)[(int64_t)orow * s.ld_out + grow] = v[0];
  }
  __syncthreads();
}

__host__ __device__ inline int tiles_of(const seg &s) {
  const int rt = 16 * (kWarps / s.WK);
  return (s.N + rt - 1) / rt;
}

// Persistent grid over (work entry, row tile) items; the work count is read from the device.
template <bool DUAL>
__global__ void __launch_bounds__(kThreads, 2) w4_mm_kernel(mm_params p) {
  __shared__ float red[kWarps * 2 * 4 * 4 * 32];
  const int tiles = tiles_of(p.s), total = *p.n_work * tiles;
  for (int it = blockIdx.x; it < total; it += gridDim.x) {
    const int wi = it / tiles, tile = it % tiles;
    const int4 w = p.work[wi];
    switch ((w.z + 7) / 8) {
      case 1: run_item<DUAL, 1>(p, w.x, tile, w.y, w.z, red); break;
      case 2: run_item<DUAL, 2>(p, w.x, tile, w.y, w.z, red); break;
      case 3: run_item<DUAL, 3>(p, w.x, tile, w.y, w.z, red); break;
      default: run_item<DUAL, 4>(p, w.x, tile, w.y, w.z, red); break;
    }
  }
}

// out[i, :] = Σ_t w[i,t] * d[i*K+t, :] (slot order, ids < 0 skipped) (+ out when the shared experts
// wrote it first): the CPU's order, IEEE mul / add.
struct combine_params {
  int m, K, H;
  const int32_t *ids;
  const float *weights, *d;
  float *out;
  int64_t ld_out;
  int add_out;
};

__global__ void w4_combine_kernel(combine_params p) {
  const int i = blockIdx.y, j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= p.H) return;
  float y = 0.0f;
  for (int t = 0; t < p.K; t++) {
    if (p.ids[i * p.K + t] < 0) continue;
    y = __fadd_rn(y, __fmul_rn(p.weights[i * p.K + t], p.d[((int64_t)i * p.K + t) * p.H + j]));
  }
  float *o = p.out + (int64_t)i * p.ld_out + j;
  *o = p.add_out ? __fadd_rn(y, *o) : y;
}

// ---------------------------------------------------------------- host side

int choose_wk(int64_t K) { return K >= 4096 ? 8 : K >= 2048 ? 4 : K >= 1024 ? 2 : 1; }
size_t align256(size_t b) { return (b + 255) & ~(size_t)255; }
int max_work_of(int max_m, int E, int K) {
  const int pairs = max_m * K;
  return pairs / kTok + (pairs < E ? pairs : E) + 1;
}

struct ws_layout { size_t pairs, n_work, work, h, d, mlp, total; };

ws_layout layout_of(int max_m, int64_t H, const pz_moe_params *p) {
  ws_layout l;
  const size_t pairs = (size_t)max_m * (size_t)p->top_k;
  size_t o = 0;
  l.pairs = o; o += align256(sizeof(int) * pairs);
  l.n_work = o; o += 256;
  l.work = o; o += align256(sizeof(int4) * (size_t)max_work_of(max_m, p->n_experts, p->top_k));
  l.h = o; o += align256(2 * pairs * (size_t)p->inter);
  l.d = o; o += align256(4 * pairs * (size_t)H);
  l.mlp = o; o += align256(p->shared_inter > 0 ? pz_mlp_workspace_bytes(max_m, p->shared_inter) : 0);
  l.total = o;
  return l;
}

bool aligned(const void *q, unsigned a) { return ((uintptr_t)q & (a - 1)) == 0; }

template <bool DUAL>
pz_status launch_mm(const mm_params &mp, int64_t max_items, cudaStream_t stream) {
  int dev = 0, sms = 0, per_sm = 0;
  PZ_CUDA_CHECK_MSG(cudaGetDevice(&dev), "moe w4a16: cannot read the current device");
  PZ_CUDA_CHECK_MSG(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev), "moe w4a16: SM count");
  PZ_CUDA_CHECK_MSG(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, w4_mm_kernel<DUAL>, kThreads, 0),
                    "moe w4a16: occupancy of the expert kernel");
  int64_t grid = (int64_t)sms * (per_sm < 1 ? 1 : per_sm);
  if (grid > max_items) grid = max_items;
  if (grid < 1) grid = 1;
  w4_mm_kernel<DUAL><<<(unsigned)grid, kThreads, 0, stream>>>(mp);
  PZ_CUDA_CHECK(cudaGetLastError());
  return PZ_OK;
}

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
  const int E = p->n_experts, K = p->top_k;
  const int64_t H = a->H, I = p->inter, SI = p->shared_inter > 0 ? p->shared_inter : 0;
  if (a->m < 1 || a->m > PZ_MOE_MAX_M) return pz_error(PZ_ERR_SHAPE, "moe w4a16: m = %d outside 1..%d", a->m, PZ_MOE_MAX_M);
  if (E < 1 || E > PZ_MOE_MAX_EXPERTS || K < 1 || K > E || K > PZ_MOE_MAX_TOPK)
    return pz_error(PZ_ERR_SHAPE, "moe w4a16: n_experts %d / top_k %d outside the limits (moe.h)", E, K);
  if (H < 32 || H % 32 || I < 32 || I % 32 || H > (1 << 20) || I > (1 << 20))
    return pz_error(PZ_ERR_SHAPE, "moe w4a16: H %lld and inter %lld must be positive multiples of 32", (long long)H,
                    (long long)I);
  if (!a->x || !a->ids || !a->weights || !a->w_gate || !a->w_up || !a->w_down || !a->s_gate || !a->s_up || !a->s_down ||
      !a->out || !a->workspace)
    return pz_error(PZ_ERR_INVALID_ARG, "moe w4a16: NULL pointer in args");
  if (SI && (!a->sh_gate || !a->sh_up || !a->sh_down))
    return pz_error(PZ_ERR_INVALID_ARG, "moe w4a16: shared_inter %lld > 0 needs the three shared weights", (long long)SI);
  if (a->ldx < H || a->ldx % 8 || a->ld_out < H || a->ld_out % 4 || !aligned(a->x, 16) || !aligned(a->out, 16) ||
      !aligned(a->w_gate, 4) || !aligned(a->w_up, 4) || !aligned(a->w_down, 4) || !aligned(a->workspace, 256))
    return pz_error(PZ_ERR_INVALID_ARG, "moe w4a16: x / out must be 16-byte aligned with row strides multiples of 8 / 4, "
                    "words 4-byte, the workspace 256-byte aligned");
  const ws_layout l = layout_of(a->m, H, p);
  if (a->workspace_bytes < l.total)
    return pz_error(PZ_ERR_INVALID_ARG, "moe w4a16: workspace %zu bytes < %zu needed", a->workspace_bytes, l.total);
  char *ws = (char *)a->workspace;
  int *pairs = (int *)(ws + l.pairs), *n_work = (int *)(ws + l.n_work);
  int4 *work = (int4 *)(ws + l.work);
  __nv_bfloat16 *h = (__nv_bfloat16 *)(ws + l.h);
  float *d = (float *)(ws + l.d);

  if (SI) /* bf16 shared experts into out first; the combine adds the routed part before them */
    PZ_CHECK(pz_mlp_launch(a->m, H, SI, a->x, a->ldx, a->sh_gate, a->sh_up, a->sh_down, a->out, a->ld_out, ws + l.mlp,
                           l.total - l.mlp, stream));

  gather_params gp = {a->m * K, K, E, a->ids, pairs, work, n_work};
  w4_gather_kernel<<<1, 1024, 0, stream>>>(gp);
  PZ_CUDA_CHECK(cudaGetLastError());

  const int64_t max_work = max_work_of(a->m, E, K);
  mm_params up;
  up.topk = K;
  up.pairs = pairs;
  up.work = work;
  up.n_work = n_work;
  up.s = seg{(const int32_t *)a->w_gate, (const int32_t *)a->w_up, (const __nv_bfloat16 *)a->s_gate,
             (const __nv_bfloat16 *)a->s_up, I * (H / 8), I * (H / kGroup), (int)I, (int)H, choose_wk(H),
             (const __nv_bfloat16 *)a->x, a->ldx, 1, h, I, 0};
  PZ_CHECK(launch_mm<true>(up, max_work * tiles_of(up.s), stream));

  mm_params dn = up;
  dn.s = seg{(const int32_t *)a->w_down, nullptr, (const __nv_bfloat16 *)a->s_down, nullptr, H * (I / 8),
             H * (I / kGroup), (int)H, (int)I, choose_wk(I), h, I, 0, d, H, 1};
  PZ_CHECK(launch_mm<false>(dn, max_work * tiles_of(dn.s), stream));

  combine_params cp = {a->m, K, (int)H, a->ids, a->weights, d, a->out, a->ld_out, SI ? 1 : 0};
  w4_combine_kernel<<<dim3((unsigned)((H + 127) / 128), (unsigned)a->m), 128, 0, stream>>>(cp);
  PZ_CUDA_CHECK(cudaGetLastError());
  return PZ_OK;
}
