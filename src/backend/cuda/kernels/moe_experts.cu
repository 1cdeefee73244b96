// Routed + shared experts and the dense SwiGLU MLP for decode: gather (per-expert counts,
// offsets, sorted (token, slot) pairs, work list), weight-streaming grouped gate/up + SwiGLU and
// down kernels on bf16 tensor cores, and the deterministic combine. Launchers in moe.h.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
extern "C" { /* core/status.h has no C++ guards of its own */
#include "core/status.h"
}
#include "backend/cuda/cuda_util.h"
#include "backend/cuda/moe.h"
#include "backend/cuda/moe_w4_split.h" /* pz_moe_wk_by_k */
#include "backend/cuda/kernels/moe_item_common.cuh"

namespace {

constexpr int kThreads = 256;  // 8 warps per CTA in the expert kernels
constexpr int kWarps = kThreads / 32;
constexpr int kGroup = 32;     // tokens per work item (4 n-tiles of 8)
constexpr int kGatherThreads = 1024;

// ---------------------------------------------------------------- gather

struct gather_params {
  int n_pairs, K, E;
  const int32_t *__restrict__ ids;  // [m*K]
  int *__restrict__ offsets;        // [E+1] out: first sorted position of expert e
  int *__restrict__ pairs;          // [m*K] out: pair index (token*K + slot) by sorted position
  int4 *__restrict__ work;          // out: {expert, first position, token count, 0}
  int *__restrict__ n_work;         // [1] out
};

// One CTA: pz_moe_item::gather (moe_item_common.cuh), work items of kGroup tokens.
__global__ void __launch_bounds__(kGatherThreads) moe_gather_kernel(gather_params p) {
  pz_moe_item::gather<kGatherThreads, kGroup, PZ_MOE_MAX_M * PZ_MOE_MAX_TOPK>(p.n_pairs, p.E, p.ids, p.offsets, p.pairs,
                                                                           p.work, p.n_work);
}

// ---------------------------------------------------------------- expert GEMM kernels

// One segment of work: a weight matrix (or one per expert) of N rows x K, input rows, outputs.
// mode of the input row of sorted position pos: 0 = pos (dense, or h by position),
// 1 = pairs[pos] / topk (x of the pair's token). Output row: 0 = pos, 1 = pairs[pos].
struct seg_params {
  const __nv_bfloat16 *w0, *w1;  // [N, K] of expert 0 (w1: up, DUAL only)
  int64_t wstride;               // elements between experts
  int N, K, WK;                  // rows, reduction length, warps splitting K (1,2,4,8)
  const __nv_bfloat16 *in;       // [.., K] rows, row stride ld_in
  int64_t ld_in;
  int in_mode;
  void *out;                     // bf16 (DUAL) or f32, row stride ld_out
  int64_t ld_out;
  int out_mode;
};

struct mm_params {
  seg_params dense, routed;
  int m;                         // dense tokens (0: no dense segment)
  int topk;
  const int *pairs;
  const int4 *work;
  const int *n_work;             // nullptr: no routed segment
  bool one_per_item;             // host only: one CTA per possible item instead of a persistent grid
};

__device__ __forceinline__ uint4 ld_stream(const void *p) {
  uint4 v;
  asm("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

// d += A(16x16, rows g / g+8 from lo / hi) * B(16x8, token g from x) twice (two k16 steps).
// The 8 consecutive k each lane loaded (lane&3 selects the 8) map to the mma's k slots
// {2c, 2c+1, 2c+8, 2c+9} of step 0 and the same of step 1; A and B use the same map, so the
// dot products are unchanged (only the order of the k terms differs).
__device__ __forceinline__ void mma2(float (&d)[4], const uint4 &lo, const uint4 &hi, const uint4 &x) {
  asm(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(lo.x), "r"(hi.x), "r"(lo.y), "r"(hi.y), "r"(x.x), "r"(x.y));
  asm(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(lo.z), "r"(hi.z), "r"(lo.w), "r"(hi.w), "r"(x.z), "r"(x.w));
}

template <bool DUAL, int NT>
struct unroll_of {
  static constexpr int value = DUAL ? (NT == 1 ? 4 : NT == 2 ? 2 : 1) : (NT == 1 ? 8 : NT == 2 ? 4 : 2);
};

// One warp's 16 rows (x2 when DUAL) over chunks [cb, ce) of 32 k, for NT n-tiles of 8 tokens.
template <bool DUAL, int NT>
__device__ __forceinline__ void warp_tile(const __nv_bfloat16 *w0, const __nv_bfloat16 *w1, int K,
                                          int cb, int ce, const __nv_bfloat16 *const (&xr)[NT],
                                          float (&acc)[2][NT][4]) {
  constexpr int U = unroll_of<DUAL, NT>::value;
  const int lane = threadIdx.x & 31, c8 = (lane & 3) * 8;
  const __nv_bfloat16 *a0 = w0 + (int64_t)(lane >> 2) * K + c8, *a1 = a0 + (int64_t)8 * K;
  const __nv_bfloat16 *b0 = DUAL ? w1 + (int64_t)(lane >> 2) * K + c8 : nullptr;
  const __nv_bfloat16 *b1 = DUAL ? b0 + (int64_t)8 * K : nullptr;
  const int full_end = min(ce, K / 32);
  int ch = cb;
  for (; ch + U <= full_end; ch += U) {
    uint4 ra[U][2], rb[U][2], rx[U][NT];
#pragma unroll
    for (int u = 0; u < U; u++) {
      const int k = (ch + u) * 32;
      ra[u][0] = ld_stream(a0 + k);
      ra[u][1] = ld_stream(a1 + k);
      if (DUAL) {
        rb[u][0] = ld_stream(b0 + k);
        rb[u][1] = ld_stream(b1 + k);
      }
#pragma unroll
      for (int j = 0; j < NT; j++) rx[u][j] = __ldg(reinterpret_cast<const uint4 *>(xr[j] + k + c8));
    }
#pragma unroll
    for (int u = 0; u < U; u++)
#pragma unroll
      for (int j = 0; j < NT; j++) {
        mma2(acc[0][j], ra[u][0], ra[u][1], rx[u][j]);
        if (DUAL) mma2(acc[1][j], rb[u][0], rb[u][1], rx[u][j]);
      }
  }
  for (; ch < ce; ch++) {  // tail, one chunk at a time, masked past K (K % 8 == 0)
    const int k = ch * 32;
    const bool ok = k + c8 < K;
    const uint4 z = make_uint4(0, 0, 0, 0);
    uint4 la = ok ? ld_stream(a0 + k) : z, ha = ok ? ld_stream(a1 + k) : z;
    uint4 lb = z, hb = z;
    if (DUAL && ok) {
      lb = ld_stream(b0 + k);
      hb = ld_stream(b1 + k);
    }
#pragma unroll
    for (int j = 0; j < NT; j++) {
      uint4 xv = ok ? __ldg(reinterpret_cast<const uint4 *>(xr[j] + k + c8)) : z;
      mma2(acc[0][j], la, ha, xv);
      if (DUAL) mma2(acc[1][j], lb, hb, xv);
    }
  }
}


// One item: rows [tile*16*WR, ..) of matrix (w0, w1) for cnt (<= 32) tokens at sorted positions
// pos0.. of segment s. The CTA's warps are WR row groups x WK K slices; K slices are reduced
// through shared memory in warp order (deterministic).
template <bool DUAL, int NT>
__device__ void run_item(const seg_params &s, const mm_params &p, const __nv_bfloat16 *w0,
                         const __nv_bfloat16 *w1, int tile, int pos0, int cnt, float *red) {
  const pz_moe_item::item_pos ip = pz_moe_item::item_at<kWarps>(s, tile, (s.K + 31) / 32);
  float acc[2][NT][4];
  pz_moe_item::zero_acc<NT>(acc);
  if (ip.row0 < s.N) {
    const __nv_bfloat16 *xr[NT];
    pz_moe_item::token_rows<NT>(s, p, pos0, cnt, ip.lane, xr);
    warp_tile<DUAL, NT>(w0 + (int64_t)ip.row0 * s.K, DUAL ? w1 + (int64_t)ip.row0 * s.K : nullptr, s.K, ip.cb, ip.ce,
                        xr, acc);
  }
  pz_moe_item::reduce_write<DUAL, NT, kWarps, kThreads>(s, p, acc, tile, pos0, cnt, red);
}

template <bool DUAL>
__device__ __forceinline__ void dispatch_item(const seg_params &s, const mm_params &p,
                                              const __nv_bfloat16 *w0, const __nv_bfloat16 *w1, int tile,
                                              int pos0, int cnt, float *red) {
  switch ((cnt + 7) / 8) {
    case 1: run_item<DUAL, 1>(s, p, w0, w1, tile, pos0, cnt, red); break;
    case 2: run_item<DUAL, 2>(s, p, w0, w1, tile, pos0, cnt, red); break;
    case 3: run_item<DUAL, 3>(s, p, w0, w1, tile, pos0, cnt, red); break;
    default: run_item<DUAL, 4>(s, p, w0, w1, tile, pos0, cnt, red); break;
  }
}

__host__ __device__ inline int tiles_of(const seg_params &s) {
  const int rt = 16 * (kWarps / s.WK);
  return (s.N + rt - 1) / rt;
}

// Persistent grid over items: first the dense segment's (token group, row tile) items, then
// the routed segment's (work entry, row tile) items, the work count read from the device.
template <bool DUAL>
__global__ void __launch_bounds__(kThreads, 2) moe_mm_kernel(mm_params p) {
  __shared__ float red[kWarps * 2 * 4 * 4 * 32];
  const int d_tiles = p.m > 0 ? tiles_of(p.dense) : 0;
  const int d_items = d_tiles * ((p.m + kGroup - 1) / kGroup);
  const int r_tiles = p.n_work ? tiles_of(p.routed) : 0;
  const int total = d_items + (p.n_work ? *p.n_work * r_tiles : 0);
  for (int it = blockIdx.x; it < total; it += gridDim.x) {
    if (it < d_items) {
      const int grp = it / d_tiles, tile = it % d_tiles, pos0 = grp * kGroup;
      const int cnt = min(kGroup, p.m - pos0);
      dispatch_item<DUAL>(p.dense, p, p.dense.w0, p.dense.w1, tile, pos0, cnt, red);
    } else {
      const int r = it - d_items, wi = r / r_tiles, tile = r % r_tiles;
      const int4 w = p.work[wi];
      const int64_t eo = (int64_t)w.x * p.routed.wstride;
      dispatch_item<DUAL>(p.routed, p, p.routed.w0 + eo, DUAL ? p.routed.w1 + eo : nullptr, tile, w.y, w.z, red);
    }
  }
}

// out[i, :] = Σ_t w[i,t] * d[i*K+t, :] (slot order, ids < 0 skipped) (+ out[i, :] when the
// shared experts' down kernel wrote it first). f32, IEEE mul/add (no contraction).
struct combine_params {
  int m, K, H;
  const int32_t *ids;
  const float *weights;
  const float *d;  // [m*K, H]
  float *out;
  int64_t ld_out;
  int add_out;
};

__global__ void moe_combine_kernel(combine_params p) {
  const int i = blockIdx.y;
  const int j = (blockIdx.x * blockDim.x + threadIdx.x) * 4;
  if (j >= p.H) return;
  float4 y = make_float4(0.f, 0.f, 0.f, 0.f);
  for (int t = 0; t < p.K; t++) {
    if (p.ids[i * p.K + t] < 0) continue;
    const float w = p.weights[i * p.K + t];
    const float4 d = *reinterpret_cast<const float4 *>(p.d + ((int64_t)i * p.K + t) * p.H + j);
    y.x = __fadd_rn(y.x, __fmul_rn(w, d.x));
    y.y = __fadd_rn(y.y, __fmul_rn(w, d.y));
    y.z = __fadd_rn(y.z, __fmul_rn(w, d.z));
    y.w = __fadd_rn(y.w, __fmul_rn(w, d.w));
  }
  float *o = p.out + (int64_t)i * p.ld_out + j;
  if (p.add_out) {
    y.x = __fadd_rn(y.x, o[0]);
    y.y = __fadd_rn(y.y, o[1]);
    y.z = __fadd_rn(y.z, o[2]);
    y.w = __fadd_rn(y.w, o[3]);
  }
  o[0] = y.x;
  o[1] = y.y;
  o[2] = y.z;
  o[3] = y.w;
}

// ---------------------------------------------------------------- host side

size_t align256(size_t b) { return (b + 255) & ~(size_t)255; }

int max_work_of(int max_m, int E, int K) {
  int pairs = max_m * K;
  return pairs / kGroup + (pairs < E ? pairs : E) + 1;
}

struct ws_layout {
  size_t offsets, pairs, n_work, work, h, d, hs, total;
};

ws_layout layout_of(int max_m, int64_t H, const pz_moe_params *p) {
  ws_layout l;
  const size_t pairs = (size_t)max_m * p->top_k;
  size_t o = 0;
  l.offsets = o; o += align256(sizeof(int) * (size_t)(p->n_experts + 1));
  l.pairs = o; o += align256(sizeof(int) * pairs);
  l.n_work = o; o += 256;
  l.work = o; o += align256(sizeof(int4) * (size_t)max_work_of(max_m, p->n_experts, p->top_k));
  l.h = o; o += align256(2 * pairs * (size_t)p->inter);
  l.d = o; o += align256(4 * pairs * (size_t)H);
  l.hs = o; o += align256(2 * (size_t)max_m * (size_t)(p->shared_inter > 0 ? p->shared_inter : 0));
  l.total = o;
  return l;
}

// The SM count of the current device. (A failed query used to surface at the next launch check
// as a stale last error; it is reported here, by the call that failed.)
pz_status sm_count(int *sms) {
  int dev = 0;
  PZ_CUDA_CHECK_MSG(cudaGetDevice(&dev), "moe: cannot read the SM count of the current device");
  PZ_CUDA_CHECK_MSG(cudaDeviceGetAttribute(sms, cudaDevAttrMultiProcessorCount, dev),
                    "moe: cannot read the SM count of the current device");
  return PZ_OK;
}

template <bool DUAL>
pz_status blocks_per_sm(int *out) {
  static int cached = 0;  // same value on every device of one kind; queried once
  if (!cached) {
    int b = 0;
    PZ_CUDA_CHECK_MSG(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, moe_mm_kernel<DUAL>, kThreads, 0),
                      "moe: occupancy of the expert GEMM kernel");
    cached = b < 1 ? 1 : b;
  }
  *out = cached;
  return PZ_OK;
}

bool aligned16(const void *q) { return ((uintptr_t)q & 15u) == 0; }

// Launches one expert-GEMM kernel; max_items bounds the items (grid = min(bound, SMs x occupancy)).
template <bool DUAL>
pz_status launch_mm(const mm_params &mp, int64_t max_items, cudaStream_t stream) {
  int sms = 0, per_sm = 0;
  PZ_CHECK(sm_count(&sms));
  if (sms <= 0) return pz_error(PZ_ERR_CUDA, "moe: cannot read the SM count of the current device");
  if (!mp.one_per_item) PZ_CHECK(blocks_per_sm<DUAL>(&per_sm));
  // PREZERO_MOE_PERSISTENT=0 (pz_moe_args.no_persistent): one CTA per possible item instead
  int64_t grid = !mp.one_per_item ? (int64_t)sms * per_sm : max_items;
  if (grid > max_items) grid = max_items;
  if (grid > 0x7fffffff) grid = 0x7fffffff;
  if (grid < 1) grid = 1;
  moe_mm_kernel<DUAL><<<(unsigned)grid, kThreads, 0, stream>>>(mp);
  PZ_CUDA_CHECK(cudaGetLastError());
  return PZ_OK;
}

seg_params seg(const void *w0, const void *w1, int64_t wstride, int64_t N, int64_t K, const void *in,
               int64_t ld_in, int in_mode, void *out, int64_t ld_out, int out_mode) {
  seg_params s;
  s.w0 = (const __nv_bfloat16 *)w0;
  s.w1 = (const __nv_bfloat16 *)w1;
  s.wstride = wstride;
  s.N = (int)N;
  s.K = (int)K;
  s.WK = pz_moe_wk_by_k(K);
  s.in = (const __nv_bfloat16 *)in;
  s.ld_in = ld_in;
  s.in_mode = in_mode;
  s.out = out;
  s.ld_out = ld_out;
  s.out_mode = out_mode;
  return s;
}

pz_status check_dims(const char *what, int m, int64_t H, int64_t inter) {
  if (m < 1 || m > PZ_MOE_MAX_M) return pz_error(PZ_ERR_SHAPE, "%s: m = %d outside 1..%d", what, m, PZ_MOE_MAX_M);
  if (H < 16 || H % 16 || H > (1 << 20))
    return pz_error(PZ_ERR_SHAPE, "%s: H = %lld must be a positive multiple of 16", what, (long long)H);
  if (inter < 0 || inter % 16 || inter > (1 << 20))
    return pz_error(PZ_ERR_SHAPE, "%s: intermediate size %lld must be a multiple of 16", what, (long long)inter);
  return PZ_OK;
}

}  // namespace

extern "C" size_t pz_moe_workspace_bytes(int max_m, int64_t H, const pz_moe_params *p) {
  if (!p || max_m < 1) return 0;
  return layout_of(max_m, H, p).total;
}

extern "C" size_t pz_moe_route_bytes(int max_m, const pz_moe_params *p) {
  if (!p || max_m < 1) return 0;
  return 2 * align256(4 * (size_t)max_m * (size_t)p->top_k);
}

extern "C" pz_status pz_moe_experts_launch(const pz_moe_args *a, cudaStream_t stream) {
  if (!a) return pz_error(PZ_ERR_INVALID_ARG, "moe: NULL args");
  const pz_moe_params *p = &a->p;
  PZ_CHECK(check_dims("moe", a->m, a->H, p->inter));
  const int E = p->n_experts, K = p->top_k;
  if (E < 1 || E > PZ_MOE_MAX_EXPERTS) return pz_error(PZ_ERR_SHAPE, "moe: n_experts = %d outside 1..%d", E, PZ_MOE_MAX_EXPERTS);
  if (K < 1 || K > E || K > PZ_MOE_MAX_TOPK) return pz_error(PZ_ERR_SHAPE, "moe: top_k = %d outside 1..min(n_experts, %d)", K, PZ_MOE_MAX_TOPK);
  if (p->inter < 16) return pz_error(PZ_ERR_SHAPE, "moe: inter = %lld < 16", (long long)p->inter);
  const bool shared = p->shared_inter > 0;
  if (shared && p->shared_inter % 16)
    return pz_error(PZ_ERR_SHAPE, "moe: shared_inter = %lld is not a multiple of 16", (long long)p->shared_inter);
  if (!a->x || !a->ids || !a->weights || !a->w_gate || !a->w_up || !a->w_down || !a->out || !a->workspace)
    return pz_error(PZ_ERR_INVALID_ARG, "moe: NULL pointer in args");
  if (shared && (!a->sh_gate || !a->sh_up || !a->sh_down))
    return pz_error(PZ_ERR_INVALID_ARG, "moe: shared_inter = %lld > 0 needs all three shared weights",
                    (long long)p->shared_inter);
  if (a->ldx < a->H || a->ldx % 8 || a->ld_out < a->H || a->ld_out % 4)
    return pz_error(PZ_ERR_SHAPE, "moe: ldx %lld / ld_out %lld too small or misaligned", (long long)a->ldx,
                    (long long)a->ld_out);
  if (!aligned16(a->x) || !aligned16(a->w_gate) || !aligned16(a->w_up) || !aligned16(a->w_down) ||
      !aligned16(a->out) || ((uintptr_t)a->workspace & 255u) ||
      (shared && (!aligned16(a->sh_gate) || !aligned16(a->sh_up) || !aligned16(a->sh_down))))
    return pz_error(PZ_ERR_INVALID_ARG, "moe: x, weights and out must be 16-byte aligned, workspace 256-byte");
  const ws_layout l = layout_of(a->m, a->H, p);
  if (a->workspace_bytes < l.total)
    return pz_error(PZ_ERR_INVALID_ARG, "moe: workspace %zu bytes < %zu needed", a->workspace_bytes, l.total);
  char *ws = (char *)a->workspace;
  int *offsets = (int *)(ws + l.offsets), *pairs = (int *)(ws + l.pairs), *n_work = (int *)(ws + l.n_work);
  int4 *work = (int4 *)(ws + l.work);
  __nv_bfloat16 *h = (__nv_bfloat16 *)(ws + l.h), *hs = (__nv_bfloat16 *)(ws + l.hs);
  float *d = (float *)(ws + l.d);
  const int64_t H = a->H, I = p->inter, SI = shared ? p->shared_inter : 0;

  gather_params gp;
  gp.n_pairs = a->m * K;
  gp.K = K;
  gp.E = E;
  gp.ids = a->ids;
  gp.offsets = offsets;
  gp.pairs = pairs;
  gp.work = work;
  gp.n_work = n_work;
  moe_gather_kernel<<<1, kGatherThreads, 0, stream>>>(gp);
  PZ_CUDA_CHECK(cudaGetLastError());

  const int64_t max_work = max_work_of(a->m, E, K);
  const int64_t d_groups = (a->m + kGroup - 1) / kGroup;
  mm_params up;
  up.m = shared ? a->m : 0;
  up.topk = K;
  up.pairs = pairs;
  up.work = work;
  up.n_work = n_work;
  up.one_per_item = a->no_persistent;
  up.dense = seg(a->sh_gate, a->sh_up, 0, SI, H, a->x, a->ldx, 0, hs, SI, 0);
  up.routed = seg(a->w_gate, a->w_up, I * H, I, H, a->x, a->ldx, 1, h, I, 0);
  int64_t max_items = (shared ? d_groups * tiles_of(up.dense) : 0) + max_work * tiles_of(up.routed);
  PZ_CHECK(launch_mm<true>(up, max_items, stream));

  mm_params dn = up;
  dn.dense = seg(a->sh_down, nullptr, 0, H, SI, hs, SI, 0, a->out, a->ld_out, 0);
  dn.routed = seg(a->w_down, nullptr, H * I, H, I, h, I, 0, d, H, 1);
  max_items = (shared ? d_groups * tiles_of(dn.dense) : 0) + max_work * tiles_of(dn.routed);
  PZ_CHECK(launch_mm<false>(dn, max_items, stream));

  combine_params cp;
  cp.m = a->m;
  cp.K = K;
  cp.H = (int)H;
  cp.ids = a->ids;
  cp.weights = a->weights;
  cp.d = d;
  cp.out = a->out;
  cp.ld_out = a->ld_out;
  cp.add_out = shared ? 1 : 0;
  dim3 grid((unsigned)((H / 4 + 127) / 128), (unsigned)a->m);
  moe_combine_kernel<<<grid, 128, 0, stream>>>(cp);
  PZ_CUDA_CHECK(cudaGetLastError());
  return PZ_OK;
}

extern "C" pz_status pz_moe_launch(const pz_moe_args *a, const float *logits, int64_t ld_logits,
                                   const float *bias, int32_t *ids_out, float *weights_out,
                                   cudaStream_t stream) {
  if (!a) return pz_error(PZ_ERR_INVALID_ARG, "moe: NULL args");
  pz_moe_args b = *a;
  const size_t need = pz_moe_workspace_bytes(a->m, a->H, &a->p), rb = pz_moe_route_bytes(a->m, &a->p);
  if (!a->workspace || a->workspace_bytes < need + rb)
    return pz_error(PZ_ERR_INVALID_ARG, "moe: workspace %zu bytes < %zu needed (experts + routing)",
                    a->workspace_bytes, need + rb);
  char *r = (char *)a->workspace + need;
  int32_t *ids = ids_out ? ids_out : (int32_t *)r;
  float *w = weights_out ? weights_out : (float *)(r + rb / 2);
  PZ_CHECK(pz_moe_route_launch_rows(a->m, logits, ld_logits, bias, &a->p, ids, w, a->rows, pz_moe_topk_mode(a->route_serial_topk, a->route_keys_off),
                                    stream));
  b.ids = ids;
  b.weights = w;
  b.workspace_bytes = need;
  return pz_moe_experts_launch(&b, stream);
}

extern "C" size_t pz_mlp_workspace_bytes(int max_m, int64_t inter) {
  if (max_m < 1 || inter < 1) return 0;
  return align256(2 * (size_t)max_m * (size_t)inter);
}

extern "C" pz_status pz_mlp_check(int m, int64_t H, int64_t inter, const pz_bf16 *x, int64_t ldx,
                                  const pz_bf16 *w_gate, const pz_bf16 *w_up, const pz_bf16 *w_down, const float *out,
                                  int64_t ld_out, const void *workspace) {
  PZ_CHECK(check_dims("mlp", m, H, inter));
  if (inter < 16) return pz_error(PZ_ERR_SHAPE, "mlp: inter = %lld < 16", (long long)inter);
  if (!x || !w_gate || !w_up || !w_down || !out || !workspace)
    return pz_error(PZ_ERR_INVALID_ARG, "mlp: NULL pointer");
  if (ldx < H || ldx % 8 || ld_out < H) return pz_error(PZ_ERR_SHAPE, "mlp: ldx / ld_out too small or misaligned");
  if (!aligned16(x) || !aligned16(w_gate) || !aligned16(w_up) || !aligned16(w_down) || !aligned16(workspace))
    return pz_error(PZ_ERR_INVALID_ARG, "mlp: x, weights and workspace must be 16-byte aligned");
  return PZ_OK;
}

extern "C" pz_status pz_mlp_launch(int m, int64_t H, int64_t inter, const pz_bf16 *x, int64_t ldx,
                                   const pz_bf16 *w_gate, const pz_bf16 *w_up, const pz_bf16 *w_down,
                                   float *out, int64_t ld_out, void *workspace, size_t workspace_bytes,
                                   cudaStream_t stream) {
  PZ_CHECK(pz_mlp_check(m, H, inter, x, ldx, w_gate, w_up, w_down, out, ld_out, workspace));
  if (workspace_bytes < pz_mlp_workspace_bytes(m, inter))
    return pz_error(PZ_ERR_INVALID_ARG, "mlp: workspace %zu bytes < %zu needed", workspace_bytes,
                    pz_mlp_workspace_bytes(m, inter));
  const int64_t groups = (m + kGroup - 1) / kGroup;
  mm_params up;
  up.m = m;
  up.topk = 1;
  up.pairs = nullptr;
  up.work = nullptr;
  up.n_work = nullptr;
  up.one_per_item = false;
  up.dense = seg(w_gate, w_up, 0, inter, H, x, ldx, 0, workspace, inter, 0);
  up.routed = up.dense;
  PZ_CHECK(launch_mm<true>(up, groups * tiles_of(up.dense), stream));
  mm_params dn = up;
  dn.dense = seg(w_down, nullptr, 0, H, inter, workspace, inter, 0, out, ld_out, 0);
  dn.routed = dn.dense;
  return launch_mm<false>(dn, groups * tiles_of(dn.dense), stream);
}
