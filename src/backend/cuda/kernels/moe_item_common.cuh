/* The pieces of one grouped-expert work item that the bf16 (moe_experts.cu) and the quantised
 * (moe_q_common.cuh: W4A16, W8A16) expert kernels share: the gather of the routed (token, slot)
 * pairs into per-expert lists and work items, SwiGLU, the input rows of the item's tokens, and the
 * reduction of the warps' K slices through shared memory in warp order (deterministic) followed by
 * the write of h (bf16, SwiGLU applied) or d (f32).
 * S is the kernel's segment (N, WK, in, ld_in, in_mode, out, ld_out, out_mode), P its launch
 * parameters (pairs, topk); WARPS / THREADS the CTA's warps / threads. */
#pragma once
#include <cuda_bf16.h>
#include <stdint.h>

namespace pz_moe_item {

/* Exclusive scan of one int per thread over a CTA of THREADS (a multiple of 32, <= 1024) threads;
 * returns the prefix, *total gets the sum. s_warp: 32 ints of shared memory. */
template <int THREADS>
__device__ int block_exclusive_scan(int v, int *s_warp, int *total) {
  constexpr int NW = THREADS / 32;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  int x = v;
  for (int o = 1; o < 32; o <<= 1) {
    const int y = __shfl_up_sync(0xffffffffu, x, o);
    if (lane >= o) x += y;
  }
  if (lane == 31) s_warp[warp] = x;
  __syncthreads();
  if (warp == 0) {
    int w = lane < NW ? s_warp[lane] : 0;
    for (int o = 1; o < 32; o <<= 1) {
      const int y = __shfl_up_sync(0xffffffffu, w, o);
      if (lane >= o) w += y;
    }
    if (lane < NW) s_warp[lane] = w; /* inclusive over warps */
  }
  __syncthreads();
  const int before = (warp ? s_warp[warp - 1] : 0) + x - v;
  *total = s_warp[NW - 1];
  __syncthreads();
  return before;
}

/* The gather, one CTA of THREADS >= E threads (E <= 1024, n_pairs <= MAX_PAIRS): ids [n_pairs] (expert
 * of pair q = token * top_k + slot; ids outside [0, E) are skipped) -> the pairs sorted by expert, then
 * by pair index (deterministic): pairs[pos] = q; work items {expert, first position, count <= TOK, 0}
 * in expert order, *n_work of them; offsets [E + 1] (NULL: not written) the first position of each
 * expert. Counts by shared-memory atomics (order-free), two CTA scans, then warp 0 places 32 pairs at
 * a time with match_any ranks, reading the ids from shared memory (copied first by every thread). */
template <int THREADS, int TOK, int MAX_PAIRS>
__device__ void gather(int n_pairs, int E, const int32_t *ids, int *offsets, int *pairs, int4 *work, int *n_work) {
  __shared__ int s_cnt[THREADS];
  __shared__ int s_ids[MAX_PAIRS];
  __shared__ int s_warp[32];
  const int tid = threadIdx.x;
  s_cnt[tid] = 0;
  for (int q = tid; q < n_pairs; q += THREADS) s_ids[q] = ids[q];
  __syncthreads();
  for (int q = tid; q < n_pairs; q += THREADS) {
    const int id = s_ids[q];
    if (id >= 0 && id < E) atomicAdd(&s_cnt[id], 1);
  }
  __syncthreads();
  const int e = tid; /* E <= THREADS */
  const int cnt = e < E ? s_cnt[e] : 0;
  const int items = (cnt + TOK - 1) / TOK;
  int total_pairs, total_work;
  const int off = block_exclusive_scan<THREADS>(cnt, s_warp, &total_pairs);
  const int wk = block_exclusive_scan<THREADS>(items, s_warp, &total_work);
  if (e < E) {
    if (offsets) offsets[e] = off;
    for (int j = 0; j < items; j++) {
      const int c = cnt - j * TOK;
      work[wk + j] = make_int4(e, off + j * TOK, c < TOK ? c : TOK, 0);
    }
    s_cnt[e] = off; /* running insert position */
  }
  if (tid == 0) {
    if (offsets) offsets[E] = total_pairs;
    *n_work = total_work;
  }
  __syncthreads();
  if (tid >= 32) return;
  const int lane = tid;
  const unsigned before = (1u << lane) - 1u;
  for (int base = 0; base < n_pairs; base += 32) {
    const int q = base + lane;
    const int id = q < n_pairs ? s_ids[q] : -1;
    const bool valid = id >= 0 && id < E;
    const unsigned peers = __match_any_sync(0xffffffffu, valid ? id : E + lane);
    const int pos = valid ? s_cnt[id] + __popc(peers & before) : 0;
    __syncwarp();
    if (valid) {
      pairs[pos] = q;
      if ((peers & before) == 0) s_cnt[id] += __popc(peers);
    }
    __syncwarp();
  }
}

/* silu(g) * u with IEEE round-to-nearest operations (the CPU reference's order). */
__device__ __forceinline__ float silu_mul(float g, float u) {
  float s = __fdiv_rn(g, __fadd_rn(1.0f, expf(-g)));
  return __fmul_rn(s, u);
}

/* Where this warp works in an item: its lane, its first W row (row group warp / WK of row tile
 * `tile`, 16 rows each) and its K slice [cb, ce) of the item's nch K chunks (slice warp % WK). */
struct item_pos {
  int lane, row0, cb, ce;
};
/* WK: the warps splitting the item's K (s.WK, or a tail item's larger split: moe_q_common.cuh tail_of). */
template <int WARPS>
__device__ __forceinline__ item_pos item_at_wk(int WK, int tile, int nch) {
  const int warp = threadIdx.x >> 5, wk = warp % WK;
  item_pos ip;
  ip.lane = threadIdx.x & 31;
  ip.row0 = (tile * (WARPS / WK) + warp / WK) * 16;
  ip.cb = (int)((int64_t)wk * nch / WK);
  ip.ce = (int)((int64_t)(wk + 1) * nch / WK);
  return ip;
}
template <int WARPS, class S>
__device__ __forceinline__ item_pos item_at(const S &s, int tile, int nch) {
  return item_at_wk<WARPS>(s.WK, tile, nch);
}

template <int NT>
__device__ __forceinline__ void zero_acc(float (&acc)[2][NT][4]) {
#pragma unroll
  for (int a = 0; a < 2; a++)
#pragma unroll
    for (int j = 0; j < NT; j++)
#pragma unroll
      for (int r = 0; r < 4; r++) acc[a][j][r] = 0.0f;
}

/* Input row of the lane's token j * 8 + lane / 4 (the last token past cnt) at sorted positions
 * pos0..: in_mode 1 reads x of the pair's token (pairs[pos] / topk), 0 the row at pos. */
template <int NT, class S, class P>
__device__ __forceinline__ void token_rows(const S &s, const P &p, int pos0, int cnt, int lane,
                                           const __nv_bfloat16 *(&xr)[NT]) {
#pragma unroll
  for (int j = 0; j < NT; j++) {
    int slot = j * 8 + (lane >> 2);
    if (slot >= cnt) slot = cnt - 1;
    const int pos = pos0 + slot;
    const int row = s.in_mode == 1 ? p.pairs[pos] / p.topk : pos;
    xr[j] = s.in + (int64_t)row * s.ld_in;
  }
}

/* Every warp's mma accumulators (row tile of 16 x NT*8 tokens; DUAL: gate and up) into red, then
 * for each (row, token) of the item the sum over the WK K slices in warp order, written to
 * out row (out_mode 1: pairs[pos], 0: pos): bf16 silu(gate) * up when DUAL, else f32. Every
 * thread of the CTA calls it. */
template <bool DUAL, int NT, int WARPS, int THREADS, class S, class P>
__device__ __forceinline__ void reduce_write_wk(const S &s, const P &p, const float (&acc)[2][NT][4], int WK, int tile,
                                                int pos0, int cnt, float *red) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int WR = WARPS / WK;
  constexpr int NM = DUAL ? 2 : 1;
#pragma unroll
  for (int a = 0; a < NM; a++)
#pragma unroll
    for (int j = 0; j < NT; j++)
#pragma unroll
      for (int r = 0; r < 4; r++) red[(((warp * NM + a) * NT + j) * 4 + r) * 32 + lane] = acc[a][j][r];
  __syncthreads();
  const int per_wr = 16 * NT * 8;
  for (int f = threadIdx.x; f < WR * per_wr; f += THREADS) {
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
    if (DUAL)
      reinterpret_cast<__nv_bfloat16 *>(s.out)[(int64_t)orow * s.ld_out + grow] = __float2bfloat16_rn(silu_mul(v[0], v[1]));
    else
      reinterpret_cast<float *>(s.out)[(int64_t)orow * s.ld_out + grow] = v[0];
  }
  __syncthreads();
}
/* reduce_write_wk with the launch's split, s.WK. */
template <bool DUAL, int NT, int WARPS, int THREADS, class S, class P>
__device__ __forceinline__ void reduce_write(const S &s, const P &p, const float (&acc)[2][NT][4], int tile, int pos0,
                                             int cnt, float *red) {
  reduce_write_wk<DUAL, NT, WARPS, THREADS>(s, p, acc, s.WK, tile, pos0, cnt, red);
}

/* The same write without the shared-memory reduction, for items whose K is not split (WK = 1): each
 * warp writes its own 16 rows x NT*8 tokens straight from its accumulators (lane (g, c) holds rows
 * g / g + 8 and tokens 2c / 2c + 1 of every n-tile, the mma.m16n8k16 accumulator layout). No CTA
 * barrier, so the warps of a CTA stream on into their next items independently. Values are
 * reduce_write's bit for bit: its sum over one K slice is 0 + acc, formed here the same way. Called by
 * the warps that have rows (row0 < N). */
template <bool DUAL, int NT, class S, class P>
__device__ __forceinline__ void direct_write(const S &s, const P &p, const float (&acc)[2][NT][4], int row0, int pos0,
                                             int cnt, int lane) {
  const int g = lane >> 2, c = lane & 3;
#pragma unroll
  for (int j = 0; j < NT; j++)
#pragma unroll
    for (int u = 0; u < 2; u++) {
      const int tok = j * 8 + 2 * c + u;
      if (tok >= cnt) continue;
      const int pos = pos0 + tok;
      const int64_t orow = s.out_mode == 1 ? p.pairs[pos] : pos;
#pragma unroll
      for (int h = 0; h < 2; h++) {
        const int grow = row0 + g + 8 * h;
        if (grow >= s.N) continue;
        const float v0 = __fadd_rn(0.0f, acc[0][j][2 * h + u]);
        if (DUAL) {
          const float v1 = __fadd_rn(0.0f, acc[1][j][2 * h + u]);
          reinterpret_cast<__nv_bfloat16 *>(s.out)[orow * s.ld_out + grow] = __float2bfloat16_rn(silu_mul(v0, v1));
        } else {
          reinterpret_cast<float *>(s.out)[orow * s.ld_out + grow] = v0;
        }
      }
    }
}

} // namespace pz_moe_item
