// Router scoring + top-k kernel (softmax / sigmoid / top-k softmax; greedy, group_limited_greedy,
// noaux_tc),
// bit-identical to pz_ref_moe_route (src/backend/cpu/ref_moe.c). Launcher in moe.h.
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
extern "C" { /* core/status.h has no C++ guards of its own */
#include "core/status.h"
}
#include "backend/cuda/cuda_util.h"
#include "backend/cuda/moe.h"
#include "backend/cuda/route_key.h"
#include "expf_glibc.cuh"
#include "backend/cuda/kernels/pad_rows.cuh"

namespace {

// a ranks before b: larger first, NaN last, ties (incl. +0 == -0) to the lower index. A strict
// total order on (value, index), so any reduction order finds the same winner as the CPU scan.
__device__ __forceinline__ bool ranks_before(float a, int ia, float b, int ib) {
  bool na = isnan(a), nb = isnan(b);
  if (na != nb) return nb;
  if (!na && a != b) return a > b;
  return ia < ib;
}

struct route_params {
  int m, E, K, G, TG;
  int scoring, method, norm;
  float rsf;
  const float *__restrict__ logits;  // [m, E], row stride ld
  int64_t ld;
  const float *__restrict__ bias;    // [E] or nullptr
  int32_t *__restrict__ ids;         // [m, K]
  float *__restrict__ weights;       // [m, K]
  const int32_t *__restrict__ rows;  // nullptr, or [1]: rows >= *rows (0 < *rows < m) are padding
};

// The top-k variants (moe.h PZ_MOE_TOPK_*), one kernel instance each.
constexpr int kTopkKeys = PZ_MOE_TOPK_KEYS;      // two stages over 64-bit rank keys (route_key.h), the default
constexpr int kTopkSerial = PZ_MOE_TOPK_SERIAL;  // warp 0 alone, K rounds over every expert
constexpr int kTopkCompare = PZ_MOE_TOPK_COMPARE; // two stages with the branching comparison (ranks_before)

constexpr int kRouteThreads = 128;
constexpr int kRouteWarps = kRouteThreads / 32;
constexpr int kPerThread = PZ_MOE_MAX_EXPERTS / kRouteThreads; /* candidates a thread holds (expert tid + 128 j) */
static_assert(PZ_MOE_MAX_EXPERTS % kRouteThreads == 0, "the two-stage top-k gives every thread whole candidates");
static_assert(kRouteWarps * PZ_MOE_MAX_TOPK <= kRouteThreads, "stage 2 ranks one candidate per thread");

// ranks_before with an empty candidate (index < 0) ranking after every real one.
__device__ __forceinline__ bool better(float a, int ia, float b, int ib) {
  if (ia < 0) return false;
  if (ib < 0) return true;
  return ranks_before(a, ia, b, ib);
}

__device__ __forceinline__ void cswap(float &va, int &ia, float &vb, int &ib) { /* (a, b) into rank order */
  if (better(vb, ib, va, ia)) {
    const float tv = va;
    const int ti = ia;
    va = vb;
    ia = ib;
    vb = tv;
    ib = ti;
  }
}

// Batcher's odd-even merge network for 8 elements: cs(a, b) puts elements a < b into rank order. Both
// two-stage top-k variants sort their 8 candidates per thread with it (indices constant after inlining,
// so the candidates stay in registers).
template <class CS>
__device__ __forceinline__ void sort8(CS cs) {
  cs(0, 1); cs(2, 3); cs(4, 5); cs(6, 7);
  cs(0, 2); cs(1, 3); cs(4, 6); cs(5, 7);
  cs(1, 2); cs(5, 6);
  cs(0, 4); cs(1, 5); cs(2, 6); cs(3, 7);
  cs(2, 4); cs(3, 5);
  cs(1, 2); cs(3, 4); cs(5, 6);
}

// Top-k in two stages, all warps: each thread sorts its kPerThread candidates (Batcher's odd-even
// merge network for 8), each warp takes its k best by k arg-max butterflies over its lanes' heads
// (the winner lane pops), then each of the kRouteWarps * k finalists counts the finalists that rank
// before it: that count is its slot. The ranking is a strict total order on (value, index), so the
// result is the serial scan's (the CPU's) exactly. s_sel[0..k): the chosen experts in rank order, -1
// where fewer than k experts are eligible (s_ok). Ends with __syncthreads.
__device__ __forceinline__ void topk_two_stage(const float *s_choice, const unsigned char *s_ok, int E, int K,
                                               float *s_cv, int *s_ci, int *s_sel) {
  static_assert(kPerThread == 8, "the sorting network below is for 8 candidates per thread");
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  float v[kPerThread];
  int ix[kPerThread];
#pragma unroll
  for (int j = 0; j < kPerThread; j++) {
    const int e = tid + j * kRouteThreads;
    const bool ok = e < E && s_ok[e];
    v[j] = ok ? s_choice[e] : 0.0f;
    ix[j] = ok ? e : -1;
  }
  sort8([&](int a, int b) { cswap(v[a], ix[a], v[b], ix[b]); });
  for (int t = 0; t < K; t++) {
    float bv = v[0];
    int bi = ix[0];
    for (int o = 16; o; o >>= 1) { /* butterfly: every lane ends with the warp's best head */
      const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
      const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
      if (better(ov, oi, bv, bi)) {
        bv = ov;
        bi = oi;
      }
    }
    if (bi >= 0 && ix[0] == bi) { /* indices are unique: one lane pops its head */
#pragma unroll
      for (int j = 0; j + 1 < kPerThread; j++) {
        v[j] = v[j + 1];
        ix[j] = ix[j + 1];
      }
      v[kPerThread - 1] = 0.0f;
      ix[kPerThread - 1] = -1;
    }
    if (lane == 0) {
      s_cv[warp * K + t] = bv;
      s_ci[warp * K + t] = bi;
    }
  }
  if (tid < K) s_sel[tid] = -1;
  __syncthreads();
  const int nc = kRouteWarps * K;
  if (tid < nc && s_ci[tid] >= 0) {
    const float cv = s_cv[tid];
    const int ci = s_ci[tid];
    int rank = 0;
    for (int u = 0; u < nc; u++) rank += better(s_cv[u], s_ci[u], cv, ci) ? 1 : 0;
    if (rank < K) s_sel[rank] = ci;
  }
  __syncthreads();
}

// topk_two_stage over route_key.h's keys: one unsigned 64-bit comparison per step instead of
// better()'s NaN and empty-candidate branches, the same result (the keys order the candidates as
// better() does). s_ck: kRouteWarps * K finalist keys. Ends with __syncthreads.
__device__ __forceinline__ void topk_keys(const float *s_choice, const unsigned char *s_ok, int E, int K,
                                          unsigned long long *s_ck, int *s_sel) {
  static_assert(kPerThread == 8, "the sorting network below is for 8 candidates per thread");
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  unsigned long long k[kPerThread];
#pragma unroll
  for (int j = 0; j < kPerThread; j++) {
    const int e = tid + j * kRouteThreads;
    k[j] = e < E && s_ok[e] ? pz_route_key(s_choice[e], e) : 0ull;
  }
  sort8([&](int a, int b) {
    const unsigned long long hi = k[a] > k[b] ? k[a] : k[b];
    k[b] = k[a] > k[b] ? k[b] : k[a];
    k[a] = hi;
  });
  for (int t = 0; t < K; t++) {
    unsigned long long b = k[0];
    for (int o = 16; o; o >>= 1) { /* butterfly: every lane ends with the warp's best head */
      const unsigned long long ob = __shfl_xor_sync(0xffffffffu, b, o);
      b = ob > b ? ob : b;
    }
    if (b != 0ull && k[0] == b) { /* keys are unique: one lane pops its head */
#pragma unroll
      for (int j = 0; j + 1 < kPerThread; j++) k[j] = k[j + 1];
      k[kPerThread - 1] = 0ull;
    }
    if (lane == 0) s_ck[warp * K + t] = b;
  }
  if (tid < K) s_sel[tid] = -1;
  __syncthreads();
  const int nc = kRouteWarps * K;
  if (tid < nc) {
    const unsigned long long c = s_ck[tid];
    if (c != 0ull) {
      int rank = 0;
#pragma unroll 8
      for (int u = 0; u < nc; u++) rank += s_ck[u] > c ? 1 : 0;
      if (rank < K) s_sel[rank] = pz_route_key_index(c);
    }
  }
  __syncthreads();
}

// One CTA per token: scores into shared memory, group mask, then the top-k under ranks_before:
// topk_keys (TOPK kTopkKeys, the default), topk_two_stage (kTopkCompare, PREZERO_MOE_ROUTE_KEYS=0,
// about 12 µs per call under ncu), or (kTopkSerial, PREZERO_MOE_ROUTE_TOPK=0) warp 0 alone by K
// rounds of a warp arg-max over every expert, which took about 16 µs per call on the H200 (ncu,
// Kimi-K2 384 experts, top 8: bench/results/moe_h200_int4_ab/route_topk/, round 84).
template <int TOPK>
__global__ void __launch_bounds__(kRouteThreads) moe_route_kernel(route_params p) {
  __shared__ float s_score[PZ_MOE_MAX_EXPERTS];
  __shared__ float s_choice[PZ_MOE_MAX_EXPERTS];
  __shared__ unsigned char s_ok[PZ_MOE_MAX_EXPERTS];
  __shared__ float s_red[kRouteThreads / 32];
  __shared__ float s_gscore[PZ_MOE_MAX_GROUPS];
  __shared__ unsigned char s_gsel[PZ_MOE_MAX_GROUPS];
  __shared__ float s_w[PZ_MOE_MAX_TOPK];
  __shared__ float s_cv[kRouteWarps * PZ_MOE_MAX_TOPK];
  __shared__ int s_ci[kRouteWarps * PZ_MOE_MAX_TOPK];
  __shared__ unsigned long long s_ck[kRouteWarps * PZ_MOE_MAX_TOPK];
  __shared__ int s_sel[PZ_MOE_MAX_TOPK];
  __shared__ float s_sum;
  const int i = blockIdx.x, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int E = p.E;
  // This thread's logits and bias (experts tid + 128 j) into registers first, all loads at once and
  // before the real-row word is known (the logits hold all m rows): one memory latency instead of
  // one per loop step, each behind the last one's arithmetic. Same operations, same results.
  const float *x = p.logits + (int64_t)i * p.ld;
  const bool biased = p.method == PZ_TOPK_NOAUX_TC && p.bias != nullptr;
  float xv[kPerThread], bv[kPerThread];
#pragma unroll
  for (int j = 0; j < kPerThread; j++) {
    const int e = tid + j * kRouteThreads;
    xv[j] = e < E ? x[e] : 0.0f;
    bv[j] = biased && e < E ? p.bias[e] : 0.0f;
  }
  if (i >= pz_real_rows(p.rows, p.m)) {  // a padding row routes to no expert (every slot -1 / 0)
    if (tid < p.K) {
      p.ids[(int64_t)i * p.K + tid] = -1;
      p.weights[(int64_t)i * p.K + tid] = 0.0f;
    }
    return;
  }

  float sc[kPerThread];  // this thread's scores, experts tid + 128 j
  if (p.scoring == PZ_SCORE_SOFTMAX) {
    float mx = -INFINITY;  // CPU: if (x > mx) mx = x, in order; NaN never wins; the max value
#pragma unroll           // is order-independent (±0 give equal exps)
    for (int j = 0; j < kPerThread; j++)
      if (tid + j * kRouteThreads < E && xv[j] > mx) mx = xv[j];
    for (int o = 16; o; o >>= 1) {
      float v = __shfl_xor_sync(0xffffffffu, mx, o);
      if (v > mx) mx = v;
    }
    if (lane == 0) s_red[warp] = mx;
    __syncthreads();
    mx = s_red[0];
    for (int w = 1; w < kRouteThreads / 32; w++)
      if (s_red[w] > mx) mx = s_red[w];
#pragma unroll
    for (int j = 0; j < kPerThread; j++) {
      const int e = tid + j * kRouteThreads;
      sc[j] = e < E ? expf_glibc(__fsub_rn(xv[j], mx)) : 0.0f;
      if (e < E) s_score[e] = sc[j];
    }
    __syncthreads();
    if (tid == 0) {  // the sum in expert order, one rounding per add, as the CPU
      float sum = 0.0f;
#pragma unroll 16
      for (int e = 0; e < E; e++) sum = __fadd_rn(sum, s_score[e]);
      s_sum = sum;
    }
    __syncthreads();
    const float sum = s_sum;
#pragma unroll
    for (int j = 0; j < kPerThread; j++) sc[j] = __fdiv_rn(sc[j], sum);
  } else if (p.scoring == PZ_SCORE_TOPK_SOFTMAX) {  // rank the logits; the softmax follows the selection
#pragma unroll
    for (int j = 0; j < kPerThread; j++) sc[j] = xv[j];
  } else {
#pragma unroll
    for (int j = 0; j < kPerThread; j++)
      sc[j] = tid + j * kRouteThreads < E ? __fdiv_rn(1.0f, __fadd_rn(1.0f, expf_glibc(-xv[j]))) : 0.0f;
  }
#pragma unroll
  for (int j = 0; j < kPerThread; j++) {
    const int e = tid + j * kRouteThreads;
    if (e < E) {
      s_score[e] = sc[j];
      s_choice[e] = biased ? __fadd_rn(sc[j], bv[j]) : sc[j];
      s_ok[e] = 1;
    }
  }
  __syncthreads();

  if (p.method != PZ_TOPK_GREEDY && p.G > 1) {
    const int G = p.G, per = E / G;
    if (tid < G) {  // group score: its best (group_limited) or sum of its best two (noaux_tc)
      const float *cg = s_choice + tid * per;
      int b0 = -1, b1 = -1;
      for (int j = 0; j < per; j++) {
        if (b0 < 0 || ranks_before(cg[j], j, cg[b0], b0)) {
          b1 = b0;
          b0 = j;
        } else if (b1 < 0 || ranks_before(cg[j], j, cg[b1], b1)) {
          b1 = j;
        }
      }
      float gs = cg[b0];
      if (p.method == PZ_TOPK_NOAUX_TC && per >= 2) gs = __fadd_rn(cg[b0], cg[b1]);
      s_gscore[tid] = gs;
    }
    __syncthreads();
    if (tid < G) {  // kept iff fewer than topk_group groups rank before it
      int rank = 0;
      for (int h = 0; h < G; h++) rank += ranks_before(s_gscore[h], h, s_gscore[tid], tid) ? 1 : 0;
      s_gsel[tid] = rank < p.TG ? 1 : 0;
    }
    __syncthreads();
    for (int e = tid; e < E; e += kRouteThreads) s_ok[e] = s_gsel[e / per];
    __syncthreads();
  }

  const int K = p.K;
  int my_sel = -1;
  if constexpr (TOPK != kTopkSerial) {
    if constexpr (TOPK == kTopkKeys) topk_keys(s_choice, s_ok, E, K, s_ck, s_sel);
    else topk_two_stage(s_choice, s_ok, E, K, s_cv, s_ci, s_sel);
    if (warp != 0) return;
    if (lane < K) my_sel = s_sel[lane];
  } else {
    if (warp != 0) return;
    for (int t = 0; t < K; t++) {
      float bv = 0.0f;
      int bi = -1;
      for (int e = lane; e < E; e += 32) {
        if (!s_ok[e]) continue;
        float v = s_choice[e];
        if (bi < 0 || ranks_before(v, e, bv, bi)) {
          bv = v;
          bi = e;
        }
      }
      for (int o = 16; o; o >>= 1) {  // butterfly: every lane ends with the same winner
        float ov = __shfl_xor_sync(0xffffffffu, bv, o);
        int oi = __shfl_xor_sync(0xffffffffu, bi, o);
        if (oi >= 0 && (bi < 0 || ranks_before(ov, oi, bv, bi))) {
          bv = ov;
          bi = oi;
        }
      }
      if (lane == t) my_sel = bi;
      __syncwarp();
      if (lane == 0 && bi >= 0) s_ok[bi] = 0;
      __syncwarp();
    }
  }
  float w = 0.0f;
  if (lane < K) {
    w = my_sel >= 0 ? s_score[my_sel] : 0.0f;
    s_w[lane] = w;
  }
  __syncwarp();
  if (p.scoring == PZ_SCORE_TOPK_SOFTMAX) {  // softmax over the k chosen logits, l_0 the first (largest)
    const float l0 = s_w[0];                  // 0 when the first slot is empty, as the CPU
    float e = 0.0f;
    if (lane < K) {
      e = my_sel >= 0 ? expf_glibc(__fsub_rn(w, l0)) : 0.0f;
    }
    __syncwarp();
    if (lane < K) s_w[lane] = e;
    __syncwarp();
    if (lane == 0) {  // the sum in selection order, one rounding per add
      float den = 0.0f;
      for (int t = 0; t < K; t++) den = __fadd_rn(den, s_w[t]);
      s_sum = den;
    }
    __syncwarp();
    w = __fdiv_rn(e, s_sum);
  } else if (p.norm && K > 1) {
    if (lane == 0) {
      float den = 0.0f;
      for (int t = 0; t < K; t++) den = __fadd_rn(den, s_w[t]);
      s_sum = __fadd_rn(den, 1e-20f);
    }
    __syncwarp();
    w = __fdiv_rn(w, s_sum);
  }
  if (lane < K) {
    p.ids[(int64_t)i * K + lane] = my_sel;
    p.weights[(int64_t)i * K + lane] = __fmul_rn(w, p.rsf);
  }
}

}  // namespace

extern "C" pz_status pz_moe_route_launch(int m, const float *logits, int64_t ld_logits,
                                         const float *bias, const pz_moe_params *p, int32_t *ids,
                                         float *weights, cudaStream_t stream) {
  return pz_moe_route_launch_rows(m, logits, ld_logits, bias, p, ids, weights, nullptr, PZ_MOE_TOPK_KEYS, stream);
}

extern "C" pz_status pz_moe_route_launch_rows(int m, const float *logits, int64_t ld_logits,
                                              const float *bias, const pz_moe_params *p, int32_t *ids,
                                              float *weights, const int32_t *rows, int topk_mode,
                                              cudaStream_t stream) {
  if (!p || !logits || !ids || !weights)
    return pz_error(PZ_ERR_INVALID_ARG, "moe route: NULL logits/ids/weights/params");
  if (topk_mode != PZ_MOE_TOPK_KEYS && topk_mode != PZ_MOE_TOPK_SERIAL && topk_mode != PZ_MOE_TOPK_COMPARE)
    return pz_error(PZ_ERR_INVALID_ARG, "moe route: top-k mode %d is not one of moe.h's PZ_MOE_TOPK_*", topk_mode);
  const int E = p->n_experts, K = p->top_k, G = p->n_group > 0 ? p->n_group : 1;
  if (m < 1 || m > PZ_MOE_MAX_M) return pz_error(PZ_ERR_SHAPE, "moe route: m = %d outside 1..%d", m, PZ_MOE_MAX_M);
  if (E < 1 || E > PZ_MOE_MAX_EXPERTS)
    return pz_error(PZ_ERR_SHAPE, "moe route: n_experts = %d outside 1..%d", E, PZ_MOE_MAX_EXPERTS);
  if (K < 1 || K > E || K > PZ_MOE_MAX_TOPK)
    return pz_error(PZ_ERR_SHAPE, "moe route: top_k = %d outside 1..min(n_experts, %d)", K, PZ_MOE_MAX_TOPK);
  if (G > PZ_MOE_MAX_GROUPS || E % G != 0)
    return pz_error(PZ_ERR_SHAPE, "moe route: n_group = %d must divide n_experts = %d and be <= %d", G, E,
                    PZ_MOE_MAX_GROUPS);
  if (ld_logits < E) return pz_error(PZ_ERR_SHAPE, "moe route: ld_logits %lld < n_experts %d", (long long)ld_logits, E);
  route_params rp;
  rp.m = m;
  rp.E = E;
  rp.K = K;
  rp.G = G;
  rp.TG = p->topk_group < G ? p->topk_group : G;
  rp.scoring = (int)p->scoring;
  rp.method = (int)p->topk_method;
  rp.norm = p->norm_topk_prob ? 1 : 0;
  rp.rsf = p->routed_scaling_factor;
  rp.logits = logits;
  rp.ld = ld_logits;
  rp.bias = bias;
  rp.ids = ids;
  rp.weights = weights;
  rp.rows = rows;
  if (topk_mode == PZ_MOE_TOPK_SERIAL) moe_route_kernel<kTopkSerial><<<m, kRouteThreads, 0, stream>>>(rp);
  else if (topk_mode == PZ_MOE_TOPK_COMPARE) moe_route_kernel<kTopkCompare><<<m, kRouteThreads, 0, stream>>>(rp);
  else moe_route_kernel<kTopkKeys><<<m, kRouteThreads, 0, stream>>>(rp);
  PZ_CUDA_CHECK(cudaGetLastError());
  return PZ_OK;
}
