// Shared pieces of the quantised routed-expert kernels (moe_q.h: moe_w4a16.cu, moe_w8a16.cu): the
// gather (per-expert token lists and work items), the persistent grouped gate/up + SwiGLU and down
// kernel around a weight-format policy Q, the deterministic combine, the workspace layout and the
// host flow. A policy Q provides
//   static constexpr int kChunk;   // k per chunk (the K slices of the warps are whole chunks)
//   template <bool DUAL, int NT> static __device__ void tile(const seg &s, int e, int row0, int cb,
//       int ce, const __nv_bfloat16 *const (&xr)[NT], float (&acc)[2][NT][4]);
// which accumulates, for one warp, rows row0..row0+15 of expert e (gate into acc[0], up into acc[1]
// when DUAL) over chunks [cb, ce) for NT n-tiles of 8 tokens (xr: each lane's token row), in the
// mma.m16n8k16 accumulator layout (d[0], d[1]: row g = lane/4, d[2], d[3]: row g+8; tokens 2(lane%4),
// +1). Included by .cu files only; everything lives in an anonymous namespace (one copy per file).
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>
extern "C" { /* core/status.h has no C++ guards of its own */
#include "core/status.h"
}
#include "backend/cuda/cuda_util.h"
#include "backend/cuda/mlp_gemm.h"
#include "backend/cuda/moe.h"
#include "backend/cuda/moe_q.h"
#include "backend/cuda/moe_w4_split.h" /* pz_moe_wk_by_k */
#include "backend/cuda/kernels/moe_item_common.cuh"

namespace {
namespace moeq {

constexpr int kThreads = 256;  // 8 warps
constexpr int kWarps = kThreads / 32;
constexpr int kTok = 32;       // tokens per work item (4 n-tiles of 8)

// ---------------------------------------------------------------- gather

struct gather_params {
  int n_pairs, K, E;
  const int32_t *ids;  // [m*K]
  int *pairs;          // [m*K] out: pair index by sorted position (expert, then pair order)
  int4 *work;          // out: {expert, first position, count, 0}
  int *n_work;         // [5] out: the work count, the two claim counters (zeroed), the two tail r (1; mm_params.tail_r)
};

// One CTA of 1024 threads: pz_moe_item::gather (moe_item_common.cuh: parallel counts and scans, then
// warp 0 places the pairs 32 at a time), work items of kTok tokens; each expert's list is sorted by
// pair index, so the results are deterministic. (Until 2026-12 thread 0 placed the pairs one by one
// from global memory, one dependent L2 round trip each: the MoE op took 16-20 us longer at m <= 4 and
// 50-100 us longer at m = 64-128 on the H200, bench/results/moe_h200_int4_ab/README.md round 77.)
// It also sets the two expert kernels' item counters (n_work[1], n_work[2]: mm_params.claim) to zero, so
// that a captured op needs no memset of its own.
__global__ void __launch_bounds__(1024) gather_kernel(gather_params p) {
  if (threadIdx.x == 0) {
    p.n_work[1] = p.n_work[2] = 0;
    p.n_work[3] = p.n_work[4] = 1; /* tail_of's r of the two expert kernels: 1 unless a tail instance records its own */
  }
  pz_moe_item::gather<1024, kTok, PZ_MOE_MAX_M * PZ_MOE_MAX_TOPK>(p.n_pairs, p.E, p.ids, nullptr, p.pairs, p.work,
                                                                p.n_work);
}

// ---------------------------------------------------------------- grouped expert GEMMs

struct seg {
  const void *w0, *w1;           // quantised weights [N, K] of expert 0 in Q's format (w1: up, DUAL only)
  const void *s0, *s1;           // their scales (Q's format)
  int64_t wstride, sstride;      // weight / scale elements between experts
  int N, K, WK;                  // rows, reduction length, warps splitting K
  int bm, bn, scols;             // block scales (W8A16): rows / columns per block, scale columns
  const __nv_bfloat16 *in;       // input rows, stride ld_in
  int64_t ld_in;
  int in_mode;                   // 1: row = pairs[pos] / topk (x of the token), 0: row = pos (h)
  void *out;                     // bf16 h (DUAL) or f32 d
  int64_t ld_out;
  int out_mode;                  // 0: row = pos, 1: row = pairs[pos]
  int direct;                    // 1: items with WK = 1 write from the warps' registers (no reduction, no
                                 // CTA barrier); 0: through shared memory (PREZERO_MOE_DIRECT=0). Same bits
  int tail_wk;                   // the largest K split a tail item may take (tail_of), <= 8; 0: no tail split
                                 // (PREZERO_MOE_TAIL=0; launches without reduction memory are excluded by tail_of)
};

struct mm_params {
  seg s;
  int topk;
  const int *pairs;
  const int4 *work;
  const int *n_work;  // [3]: the work count (the gather's), then the two claim counters below
  int *claim;  // item counter (zero on entry: the gather sets it) of the dynamic schedule (PREZERO_MOE_DYNAMIC=1),
               // or nullptr: the static one (item i to CTA i mod grid, the default)
  int tail_grid;  // G of tail_of: the static schedule's grid (launch_mm), so that the dynamic one, whose kernel
                  // instance may hold another number of CTAs per SM, splits the same items
  int *tail_r;    // where CTA 0 records tail_of's r (the workspace's n_work[3] / [4]: read by the tests), or nullptr
};


__host__ __device__ inline int tiles_of(const seg &s) {
  const int rt = 16 * (kWarps / s.WK);
  return (s.N + rt - 1) / rt;
}

// Optional L2 prefetch hook of a policy Q: `static constexpr bool kL2Prefetch = true;` and
//   template <bool DUAL> static __device__ void prefetch(const seg &s, int e, int row0, int cb, int ce);
// (one warp: hint the bytes tile<DUAL, *>(s, e, row0, cb, ce, ..) will read into L2; no results
// change). Policies without it (W8A16) compile to the kernel they had.
template <class Q>
__host__ __device__ constexpr auto l2pf_of(int) -> decltype(Q::kL2Prefetch, bool()) {
  return Q::kL2Prefetch;
}
template <class Q>
__host__ __device__ constexpr bool l2pf_of(long) {
  return false;
}

// Items prefetched ahead of the one being computed: 2 when an item's weights are small (the down
// pass: <= 64 KB per CTA), else 1, so at most ~1-2 items per CTA (tens of MB GPU-wide) sit in L2.
__device__ __forceinline__ int prefetch_depth(const seg &s) {
  const int64_t rows = 16 * (kWarps / s.WK);
  const int64_t bytes = rows * ((int64_t)s.K / 2) * (s.w1 ? 2 : 1);
  return bytes <= 65536 ? 2 : 1;
}

// This thread's slot (shared memory) of the next item to prefetch: keeps it out of the registers.
template <class Q>
__device__ __forceinline__ volatile int *nxt_slot() {
  __shared__ int s[kThreads];
  return s + threadIdx.x;
}

// This warp's share of the item of expert e, row tile `tile` into L2.
template <class Q, bool DUAL>
__device__ __forceinline__ void prefetch_item(const mm_params &p, int e, int tile) {
  const pz_moe_item::item_pos ip = pz_moe_item::item_at<kWarps>(p.s, tile, p.s.K / Q::kChunk);
  if (ip.row0 < p.s.N) Q::template prefetch<DUAL>(p.s, e, ip.row0, ip.cb, ip.ce);
}

// The tail split of the persistent item grid. Items run in static waves of G = gridDim.x CTAs (item i on
// CTA i mod G); a batch of T > G items leaves its last wave part empty: the rest = T mod G items run while
// the other CTAs idle for a whole item's time. The first T - rest items ("full waves") run as they are;
// each of the rest splits into r sub-items of 1/r its rows, r the largest power of 2 with rest x r <= G
// and WK x r <= s.tail_wk (each sub-item's K split over WK x r warps, the reduction of reduce_write_wk), so
// the last wave's items take about 1/r the time. Index space: j < full, the item j; full <= j < full +
// rest x r, sub-item (j - full) mod r of item full + (j - full) / r, row tile tile x r + sub at WK x r.
// The split depends on T (the routing) and G only: the static and dynamic schedules run the same items
// and give the same bits. Values agree with r = 1 within rounding (K slices summed in another grouping).
struct tail_split {
  int full, r, n;  // items in full waves, sub-items per tail item, the index space's size
};
// A policy opts in with `static constexpr bool kTail = true;` (the W4A16 ones); the others (W8A16) compile without
// the tail code.
template <class Q>
__host__ __device__ constexpr auto tail_on(int) -> decltype(Q::kTail, bool()) {
  return Q::kTail;
}
template <class Q>
__host__ __device__ constexpr bool tail_on(long) {
  return false;
}
// A launch whose items all write from the registers (direct, K unsplit): it has no reduction memory (red_bytes).
__host__ __device__ inline bool writes_direct(const seg &s) { return s.direct && s.WK == 1; }
__device__ __forceinline__ tail_split tail_of(const seg &s, int total, int G) {
  tail_split t{total, 1, total};
  if (writes_direct(s)) return t; /* no reduction memory in this launch */
  t.r = pz_moe_tail_r(total, G, s.WK, s.tail_wk);
  if (t.r == 1) return t;
  t.full = total - total % G;
  t.n = t.full + (total - t.full) * t.r;
  return t;
}

// One item: rows [tile*16*WR, ..) for cnt (<= 32) tokens at sorted positions pos0.., expert e.
// WR row groups x WK K slices of warps; slices reduced in warp order through shared memory.
// With a prefetching policy, once this warp's loads of the item are done (before the reduction's
// barriers) it hints the item *nxt_slot = expert * tiles + row tile into L2 (< 0: none), so HBM
// stays busy across items. The slot (this thread's, shared memory) keeps no register over the tile.
// WK: the item's K split (s.WK, or a tail sub-item's WK x r; tile then counts tiles of that split).
template <class Q, bool DUAL, int NT>
__device__ void run_item(const mm_params &p, int e, int WK, int tile, int pos0, int cnt, float *red) {
  const seg &s = p.s;
  const pz_moe_item::item_pos ip = pz_moe_item::item_at_wk<kWarps>(WK, tile, s.K / Q::kChunk);
  float acc[2][NT][4];
  pz_moe_item::zero_acc<NT>(acc);
  if (ip.row0 < s.N) {
    const __nv_bfloat16 *xr[NT];
    pz_moe_item::token_rows<NT>(s, p, pos0, cnt, ip.lane, xr);
    Q::template tile<DUAL, NT>(s, e, ip.row0, ip.cb, ip.ce, xr, acc);
  }
  if constexpr (l2pf_of<Q>(0)) {
    const int nxt = *nxt_slot<Q>();
    if (nxt >= 0) {
      const int tiles = tiles_of(s);
      prefetch_item<Q, DUAL>(p, nxt / tiles, nxt % tiles);
    }
  }
  if (s.direct && WK == 1) { /* uniform over the launch (tail_of splits no such launch): no thread reaches reduce_write's barriers */
    if (ip.row0 < s.N) pz_moe_item::direct_write<DUAL, NT>(s, p, acc, ip.row0, pos0, cnt, ip.lane);
    return;
  }
  pz_moe_item::reduce_write_wk<DUAL, NT, kWarps, kThreads>(s, p, acc, WK, tile, pos0, cnt, red);
}

// Persistent grid over (work entry, row tile) items; the work count is read from the device.
template <class Q>
__host__ __device__ constexpr auto min_blocks_of(int) -> decltype(Q::kMinBlocks, int()) {
  return Q::kMinBlocks;
}
template <class Q>
__host__ __device__ constexpr int min_blocks_of(long) {
  return 2;
}
// A policy may give its gate/up (DUAL) kernel fewer CTAs per SM, i.e. more registers per thread:
// `static constexpr int kMinBlocksUp;` (W4T: 3, where 64 registers spilled inside the gate/up loop).
template <class Q>
__host__ __device__ constexpr auto up_blocks_of(int) -> decltype(Q::kMinBlocksUp, int()) {
  return Q::kMinBlocksUp;
}
template <class Q>
__host__ __device__ constexpr int up_blocks_of(long) {
  return min_blocks_of<Q>(0);
}
// The item of index j of tail_of's space: `it` of the (work entry, row tile) list (a sub-item's parent), and
// the K split and row tile the item runs with.
struct item_ref {
  int it, WK, tile;
};
template <bool TAIL>
__device__ __forceinline__ item_ref item_of(const seg &s, const tail_split &t, int j, int tiles) {
  if (!TAIL || j < t.full) return item_ref{j, s.WK, j % tiles};
  const int it = t.full + (j - t.full) / t.r, sub = (j - t.full) % t.r;
  return item_ref{it, s.WK * t.r, (it % tiles) * t.r + sub};
}

// Work item j of tail_of's index space, by its tokens' n-tiles.
template <class Q, bool DUAL>
__device__ __forceinline__ void run_work(const mm_params &p, const tail_split &t, int j, int tiles, float *red) {
  const item_ref ir = item_of<tail_on<Q>(0)>(p.s, t, j, tiles);
  const int4 w = p.work[ir.it / tiles];
  switch ((w.z + 7) / 8) {
    case 1: run_item<Q, DUAL, 1>(p, w.x, ir.WK, ir.tile, w.y, w.z, red); break;
    case 2: run_item<Q, DUAL, 2>(p, w.x, ir.WK, ir.tile, w.y, w.z, red); break;
    case 3: run_item<Q, DUAL, 3>(p, w.x, ir.WK, ir.tile, w.y, w.z, red); break;
    default: run_item<Q, DUAL, 4>(p, w.x, ir.WK, ir.tile, w.y, w.z, red); break;
  }
}

// MB: the CTAs per SM the registers are sized for (__launch_bounds__'s minimum blocks). DYN: the dynamic
// schedule (p.claim; PREZERO_MOE_DYNAMIC=1), its own instance so that the static one (the default) carries
// none of its code (sm_90a SASS against the kernels before it: the same inner loops, instruction for
// instruction, and the same spills in them).
// TL: the tail split's instance (tail_of; policies with kTail, launches with s.tail_wk > 0), its own so that the
// instance that runs with the split off carries none of its code (the registers and spills it had before).
template <class Q, bool DUAL, int MB, bool DYN = false, bool TL = false>
__global__ void __launch_bounds__(kThreads, MB) mm_kernel(mm_params p) {
  extern __shared__ float red[]; /* kRedBytes, or none when no item reduces (red_bytes) */
  const int tiles = tiles_of(p.s);
  constexpr bool TAIL = TL && tail_on<Q>(0);
  const tail_split t = TAIL ? tail_of(p.s, *p.n_work * tiles, p.tail_grid) : tail_split{*p.n_work * tiles, 1, *p.n_work * tiles};
  if (TAIL && p.tail_r && blockIdx.x == 0 && threadIdx.x == 0) *p.tail_r = t.r;
  const int total = t.n;
  constexpr bool PF = l2pf_of<Q>(0);
  static_assert(!(DYN && PF), "the dynamic schedule is for policies without the L2 prefetch (its hints follow the static order)");
  if constexpr (!DYN) {
    if constexpr (PF) {
      const int pd = prefetch_depth(p.s);
      for (int d = 0; d < pd; d++) {
        const int j = blockIdx.x + d * (int)gridDim.x;
        if (j >= total) break;
        const int it = item_of<TAIL>(p.s, t, j, tiles).it; /* a sub-item: its parent */
        prefetch_item<Q, DUAL>(p, p.work[it / tiles].x, it % tiles);
      }
    }
    for (int j = blockIdx.x; j < total; j += gridDim.x) {
      if constexpr (PF) {
        int nxt = -1;
        const int nx = j + prefetch_depth(p.s) * (int)gridDim.x; /* read now, used after the tile */
        if (nx < total) {
          const int it = item_of<TAIL>(p.s, t, nx, tiles).it;
          nxt = p.work[it / tiles].x * tiles + it % tiles;
        }
        *nxt_slot<Q>() = nxt;
      }
      run_work<Q, DUAL>(p, t, j, tiles, red);
    }
  } else {
    // CTA b takes item b first; where the grid has fewer CTAs than items it then claims its next one from
    // the counter (zeroed by the gather) as it starts each item (thread 0, an atomic add whose answer is
    // stored to shared memory s_next[ph] only after the item, so no warp waits for it; double-buffered so
    // that a claim never overwrites the one the other threads are still reading). The items beyond the
    // first wave go to the CTAs that are free first: a CTA that started late (the shared experts' kernels
    // hold SMs at first) or drew expensive items runs fewer of them, and no CTA idles while another has a
    // tail of items. Every item writes its own outputs with the same operations wherever it runs: the
    // results are bit-identical to the static schedule's.
    __shared__ int s_next[2];
    const bool claim = total > (int)gridDim.x; /* uniform over the CTA */
    int ph = 0;
    for (int it = blockIdx.x; it < total;) {
      int claimed = 0;
      if (claim && threadIdx.x == 0) claimed = atomicAdd(p.claim, 1);
      run_work<Q, DUAL>(p, t, it, tiles, red);
      if (!claim) break; /* one item per CTA at most */
      if (threadIdx.x == 0) s_next[ph] = (int)gridDim.x + claimed;
      __syncthreads(); /* thread 0's claim is visible; uniform over the CTA (claim and it are) */
      it = s_next[ph];
      ph ^= 1;
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

__global__ void combine_kernel(combine_params p) {
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

inline size_t align256(size_t b) { return (b + 255) & ~(size_t)255; }
inline int max_work_of(int max_m, int E, int K) {
  const int pairs = max_m * K;
  return pairs / kTok + (pairs < E ? pairs : E) + 1;
}

struct ws_layout { size_t pairs, n_work, work, h, d, mlp, total; };

inline ws_layout layout_of(int max_m, int64_t H, const pz_moe_params *p) {
  ws_layout l;
  const size_t pairs = (size_t)max_m * (size_t)p->top_k;
  size_t o = 0;
  l.pairs = o; o += align256(sizeof(int) * pairs);
  l.n_work = o; o += 256;
  l.work = o; o += align256(sizeof(int4) * (size_t)max_work_of(max_m, p->n_experts, p->top_k));
  l.h = o; o += align256(2 * pairs * (size_t)p->inter);
  l.d = o; o += align256(4 * pairs * (size_t)H);
  l.mlp = o; o += align256(p->shared_inter > 0 ? pz_cuda_mlp_workspace_bytes(max_m, p->shared_inter) : 0);
  l.total = o;
  return l;
}

inline bool aligned(const void *q, unsigned a) { return ((uintptr_t)q & (a - 1)) == 0; }

// The K-slice reduction's shared memory (reduce_write): every warp's accumulators, DUAL and 4 n-tiles.
constexpr size_t kRedBytes = sizeof(float) * kWarps * 2 * 4 * 4 * 32;
// None when no item reduces (items write from the registers: direct, WK = 1), so that shared memory is left
// to the L1 cache, where the activations every warp of an item re-reads stay (same results).
inline size_t red_bytes(const seg &s) { return writes_direct(s) ? 0 : kRedBytes; }
// The kernel instance for (Q, DUAL): the gate/up kernel (DUAL) is the policy's kMinBlocksUp instance unless
// up_former (then the kMinBlocks one, as before); down always the kMinBlocks one.
// dyn: the dynamic schedule's instance (policies without the L2 prefetch only; else the static one).
// The static / dynamic and tail / no-tail instance at MB CTAs per SM (dyn: policies without the L2 prefetch only;
// tail: policies with kTail only).
template <class Q, bool DUAL, int MB>
auto mm_kernel_pick(bool dyn, bool tail) -> decltype(&mm_kernel<Q, DUAL, MB>) {
  if constexpr (tail_on<Q>(0)) {
    if (tail) {
      if constexpr (!l2pf_of<Q>(0)) {
        if (dyn) return &mm_kernel<Q, DUAL, MB, true, true>;
      }
      return &mm_kernel<Q, DUAL, MB, false, true>;
    }
  }
  if constexpr (!l2pf_of<Q>(0)) {
    if (dyn) return &mm_kernel<Q, DUAL, MB, true>;
  }
  return &mm_kernel<Q, DUAL, MB>;
}
template <class Q, bool DUAL>
auto mm_kernel_of(bool up_former, bool dyn, bool tail) -> decltype(&mm_kernel<Q, DUAL, min_blocks_of<Q>(0)>) {
  if constexpr (DUAL && up_blocks_of<Q>(0) != min_blocks_of<Q>(0)) {
    if (!up_former) return mm_kernel_pick<Q, DUAL, up_blocks_of<Q>(0)>(dyn, tail);
  }
  return mm_kernel_pick<Q, DUAL, min_blocks_of<Q>(0)>(dyn, tail);
}
// The grid: every CTA slot of that kernel on the device (persistent items), at most max_items.
template <class Q, bool DUAL>
pz_status launch_mm(const mm_params &mp_in, int64_t max_items, const char *name, cudaStream_t stream, bool up_former) {
  mm_params mp = mp_in;
  int dev = 0, sms = 0;
  PZ_CUDA_CHECK_MSG(cudaGetDevice(&dev), "%s: cannot read the current device", name);
  PZ_CUDA_CHECK_MSG(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev), "%s: SM count", name);
  const size_t smem = red_bytes(mp.s);
  const bool dyn = mp.claim != nullptr, tail = mp.s.tail_wk > 0;
  int64_t grid[2] = {1, 1}; /* the static instance's, then the one launched (another only when dynamic) */
  for (int d = 0; d < (dyn ? 2 : 1); d++) {
    int per_sm = 0;
    PZ_CUDA_CHECK_MSG(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, mm_kernel_of<Q, DUAL>(up_former, d == 1, tail),
                                                                    kThreads, smem),
                      "%s: occupancy of the expert kernel", name);
    grid[d] = (int64_t)sms * (per_sm < 1 ? 1 : per_sm);
    if (grid[d] > max_items) grid[d] = max_items;
    if (grid[d] < 1) grid[d] = 1;
  }
  if (!dyn) grid[1] = grid[0];
  mp.tail_grid = (int)grid[0];
  mm_kernel_of<Q, DUAL>(up_former, dyn, tail)<<<(unsigned)grid[1], kThreads, smem, stream>>>(mp);
  PZ_CUDA_CHECK(cudaGetLastError());
  return PZ_OK;
}

// The checks every quantised launcher makes (moe_q.h's limits, pointers, strides, workspace), then
// l = the workspace layout. `name` prefixes the messages.
inline pz_status check_args(const pz_moe_q_args *a, const char *name, ws_layout *l) {
  const pz_moe_params *p = &a->p;
  const int E = p->n_experts, K = p->top_k;
  const int64_t SI = p->shared_inter > 0 ? p->shared_inter : 0;
  if (a->m < 1 || a->m > PZ_MOE_MAX_M) return pz_error(PZ_ERR_SHAPE, "%s: m = %d outside 1..%d", name, a->m, PZ_MOE_MAX_M);
  if (E < 1 || E > PZ_MOE_MAX_EXPERTS || K < 1 || K > E || K > PZ_MOE_MAX_TOPK)
    return pz_error(PZ_ERR_SHAPE, "%s: n_experts %d / top_k %d outside the limits (moe.h)", name, E, K);
  if (!a->x || !a->ids || !a->weights || !a->w_gate || !a->w_up || !a->w_down || !a->s_gate || !a->s_up || !a->s_down ||
      !a->out || !a->workspace)
    return pz_error(PZ_ERR_INVALID_ARG, "%s: NULL pointer in args", name);
  if (SI && (!a->sh_gate || !a->sh_up || !a->sh_down))
    return pz_error(PZ_ERR_INVALID_ARG, "%s: shared_inter %lld > 0 needs the three shared weights", name, (long long)SI);
  if (a->ldx < a->H || a->ldx % 8 || a->ld_out < a->H || a->ld_out % 4 || !aligned(a->x, 16) || !aligned(a->out, 16) ||
      !aligned(a->workspace, 256))
    return pz_error(PZ_ERR_INVALID_ARG, "%s: x / out must be 16-byte aligned with row strides multiples of 8 / 4, "
                    "the workspace 256-byte aligned", name);
  if (a->side && (!a->ev_fork || !a->ev_join))
    return pz_error(PZ_ERR_INVALID_ARG, "%s: a side stream needs both events (ev_fork, ev_join)", name);
  if (a->fork_join < 0 || a->fork_join > 2)
    return pz_error(PZ_ERR_INVALID_ARG, "%s: fork_join %d outside 0..2", name, a->fork_join);
  *l = layout_of(a->m, a->H, p);
  if (a->workspace_bytes < l->total)
    return pz_error(PZ_ERR_INVALID_ARG, "%s: workspace %zu bytes < %zu needed", name, a->workspace_bytes, l->total);
  return PZ_OK;
}

// fork_join 0 (by batch): the join moves to the combine up to this many tokens (moe_q.h).
constexpr int kForkLateMaxM = 4;

// The router (when a->logits is given), shared experts (bf16, into out before the combine), gather,
// gate/up + SwiGLU into h, down into d, combine. With a->side the shared experts run there, forked
// before the router and joined before gate/up (fork_join 1) or before the combine (2; 0 by batch). An error
// after the fork still makes `stream` wait on ev_join before returning (a capture then fails anyway; the
// wait keeps eager work on the two streams ordered).
// up / dn: the two segments with their weight fields set (w*, s*, strides, N, K, WK, bm, bn, scols);
// the input / output fields are filled here.
template <class Q>
pz_status run_all(const pz_moe_q_args *a, const ws_layout &l, seg up_s, seg dn_s, const char *name,
                  cudaStream_t stream) {
  const pz_moe_params *p = &a->p;
  const int E = p->n_experts, K = p->top_k;
  const int64_t H = a->H, I = p->inter, SI = p->shared_inter > 0 ? p->shared_inter : 0;
  char *ws = (char *)a->workspace;
  int *pairs = (int *)(ws + l.pairs), *n_work = (int *)(ws + l.n_work);
  int4 *work = (int4 *)(ws + l.work);
  __nv_bfloat16 *h = (__nv_bfloat16 *)(ws + l.h);
  float *d = (float *)(ws + l.d);
  const bool fork = SI && a->side;
  const int join_at = a->fork_join ? a->fork_join : a->m <= kForkLateMaxM ? 2 : 1; /* moe_q.h fork_join */
  bool joined = !fork;
  pz_status st = PZ_OK;
  auto join = [&]() -> pz_status { /* stream waits for the shared experts on side (once) */
    if (joined) return PZ_OK;
    joined = true;
    PZ_CUDA_CHECK_MSG(cudaStreamWaitEvent(stream, a->ev_join, 0), "%s: join of the shared experts' stream", name);
    return PZ_OK;
  };

  if (fork) {
    PZ_CUDA_CHECK_MSG(cudaEventRecord(a->ev_fork, stream), "%s: fork of the shared experts' stream", name);
    PZ_CUDA_CHECK_MSG(cudaStreamWaitEvent(a->side, a->ev_fork, 0), "%s: fork of the shared experts' stream", name);
  }
  if (SI) { /* bf16 shared experts into out; the combine adds the routed part to them */
    st = pz_cuda_mlp_into(a->gemm, PZ_MLP_SHARED, a->m, H, SI, a->x, a->ldx, a->sh_gate, a->sh_up, a->sh_down, a->out,
                          a->ld_out, a->sh_gu, a->ld_sh_gu, a->sh_gu_zeroed != 0, ws + l.mlp, l.total - l.mlp,
                          fork ? a->side : stream);
    if (fork) {
      const cudaError_t e = cudaEventRecord(a->ev_join, a->side);
      if (e != cudaSuccess && st == PZ_OK)
        st = pz_error(PZ_ERR_CUDA, "%s: join of the shared experts' stream: %s", name, cudaGetErrorString(e));
    }
  }
  if (st == PZ_OK && a->logits)
    st = pz_moe_route_launch_rows(a->m, a->logits, a->ld_logits, a->bias, p, a->ids, a->weights, a->rows,
                                  pz_moe_topk_mode(a->route_serial_topk != 0, a->route_keys_off != 0), stream);
  if (st == PZ_OK) {
    gather_params gp = {a->m * K, K, E, a->ids, pairs, work, n_work};
    gather_kernel<<<1, 1024, 0, stream>>>(gp);
    st = PZ_CUDA_STATUS_MSG(cudaGetLastError(), "%s: gather launch", name);
  }
  if (st == PZ_OK && join_at == 1) st = join();

  const int64_t max_work = max_work_of(a->m, E, K);
  mm_params up;
  up.topk = K;
  up.pairs = pairs;
  up.work = work;
  up.n_work = n_work;
  up.claim = a->items_dynamic ? n_work + 1 : nullptr; /* zeroed by the gather (PREZERO_MOE_DYNAMIC=1) */
  up.tail_r = n_work + 3; /* tail_of's r, for the tests (the n_work slot has 256 bytes) */
  up.tail_grid = 1;       /* launch_mm sets it */
  up.s = up_s;
  up.s.in = (const __nv_bfloat16 *)a->x;
  up.s.ld_in = a->ldx;
  up.s.in_mode = 1;
  up.s.out = h;
  up.s.ld_out = I;
  up.s.out_mode = 0;
  if (st == PZ_OK) st = launch_mm<Q, true>(up, max_work * tiles_of(up.s), name, stream, a->w4_up_ctas == 4);

  mm_params dn = up;
  dn.claim = a->items_dynamic ? n_work + 2 : nullptr;
  dn.tail_r = n_work + 4;
  dn.s = dn_s;
  dn.s.in = h;
  dn.s.ld_in = I;
  dn.s.in_mode = 0;
  dn.s.out = d;
  dn.s.ld_out = H;
  dn.s.out_mode = 1;
  if (st == PZ_OK) st = launch_mm<Q, false>(dn, max_work * tiles_of(dn.s), name, stream, false);

  const pz_status sj = join(); /* also after an error: never an unjoined fork */
  if (st == PZ_OK) st = sj;
  if (st != PZ_OK) return st;
  combine_params cp = {a->m, K, (int)H, a->ids, a->weights, d, a->out, a->ld_out, SI ? 1 : 0};
  combine_kernel<<<dim3((unsigned)((H + 127) / 128), (unsigned)a->m), 128, 0, stream>>>(cp);
  PZ_CUDA_CHECK(cudaGetLastError());
  return PZ_OK;
}

}  // namespace moeq
}  // namespace
