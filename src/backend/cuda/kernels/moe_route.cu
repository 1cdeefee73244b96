// Router scoring + top-k kernel (softmax / sigmoid; greedy, group_limited_greedy, noaux_tc),
// bit-identical to pz_ref_moe_route (src/backend/cpu/ref_moe.c). Launcher in moe.h.
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
extern "C" { /* core/status.h has no C++ guards of its own */
#include "core/status.h"
}
#include "backend/cuda/cuda_util.h"
#include "backend/cuda/moe.h"

namespace {

// 2^(i/32) rounded to double, minus i << 47 (so that adding ki << 47 puts k/32's integer part
// into the exponent): the table of glibc's expf algorithm (sysdeps/ieee754/flt-32/e_expf.c,
// EXP2F_TABLE_BITS = 5). The values were computed here from exp2l and agree with glibc's.
__constant__ unsigned long long k_exp2_tab[32] = {
    0x3ff0000000000000ull, 0x3fefd9b0d3158574ull, 0x3fefb5586cf9890full, 0x3fef9301d0125b51ull,
    0x3fef72b83c7d517bull, 0x3fef54873168b9aaull, 0x3fef387a6e756238ull, 0x3fef1e9df51fdee1ull,
    0x3fef06fe0a31b715ull, 0x3feef1a7373aa9cbull, 0x3feedea64c123422ull, 0x3feece086061892dull,
    0x3feebfdad5362a27ull, 0x3feeb42b569d4f82ull, 0x3feeab07dd485429ull, 0x3feea47eb03a5585ull,
    0x3feea09e667f3bcdull, 0x3fee9f75e8ec5f74ull, 0x3feea11473eb0187ull, 0x3feea589994cce13ull,
    0x3feeace5422aa0dbull, 0x3feeb737b0cdc5e5ull, 0x3feec49182a3f090ull, 0x3feed503b23e255dull,
    0x3feee89f995ad3adull, 0x3feeff76f2fb5e47ull, 0x3fef199bdd85529cull, 0x3fef3720dcef9069ull,
    0x3fef5818dcfba487ull, 0x3fef7c97337b9b5full, 0x3fefa4afa2a490daull, 0x3fefd0765b6e4540ull};

// expf with the algorithm of glibc's expf, so that GPU scores equal the CPU reference's bit for
// bit: x = k/32 + r (k integer, via the 1.5*2^52 rounding shift), exp(x) = 2^(k/32) * p(r) with
// p of degree 3 evaluated in double with fused multiply-adds, then one rounding to float.
// Special cases as glibc: NaN -> NaN, x > 0x1.62e42ep6 -> +inf, x < -0x1.9fe368p6 -> 0.
__device__ __forceinline__ float expf_glibc(float x) {
  if (isnan(x)) return x + x;
  if (x > 0x1.62e42ep6f) return INFINITY;
  if (x < -0x1.9fe368p6f) return 0.0f;
  const double inv_ln2_n = 0x1.71547652b82fep+0 * 32.0;  // N / ln 2
  const double shift = 0x1.8p+52;
  const double c0 = 0x1.c6af84b912394p-5 / (32.0 * 32.0 * 32.0);  // exp2 poly scaled by N^-i
  const double c1 = 0x1.ebfce50fac4f3p-3 / (32.0 * 32.0);
  const double c2 = 0x1.62e42ff0c52d6p-1 / 32.0;
  double z = __dmul_rn(inv_ln2_n, (double)x);
  double kd = __dadd_rn(z, shift);
  unsigned long long ki = (unsigned long long)__double_as_longlong(kd);
  kd = __dsub_rn(kd, shift);
  double r = __dsub_rn(z, kd);
  unsigned long long t = k_exp2_tab[ki & 31ull] + (ki << 47);
  double s = __longlong_as_double((long long)t);
  double p = __fma_rn(c0, r, c1);
  double r2 = __dmul_rn(r, r);
  double y = __fma_rn(c2, r, 1.0);
  y = __fma_rn(p, r2, y);
  y = __dmul_rn(y, s);
  return __double2float_rn(y);
}

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
};

constexpr int kRouteThreads = 128;

// One CTA per token: scores into shared memory, group mask, then warp 0 selects top-k by K
// rounds of a warp arg-max under ranks_before.
__global__ void __launch_bounds__(kRouteThreads) moe_route_kernel(route_params p) {
  __shared__ float s_score[PZ_MOE_MAX_EXPERTS];
  __shared__ float s_choice[PZ_MOE_MAX_EXPERTS];
  __shared__ unsigned char s_ok[PZ_MOE_MAX_EXPERTS];
  __shared__ float s_red[kRouteThreads / 32];
  __shared__ float s_gscore[PZ_MOE_MAX_GROUPS];
  __shared__ unsigned char s_gsel[PZ_MOE_MAX_GROUPS];
  __shared__ float s_w[PZ_MOE_MAX_TOPK];
  __shared__ float s_sum;
  const int i = blockIdx.x, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int E = p.E;
  const float *x = p.logits + (int64_t)i * p.ld;

  if (p.scoring == PZ_SCORE_SOFTMAX) {
    float mx = -INFINITY;  // CPU: if (x > mx) mx = x, in order; NaN never wins; the max value
    for (int e = tid; e < E; e += kRouteThreads) {  // is order-independent (±0 give equal exps)
      float v = x[e];
      if (v > mx) mx = v;
    }
    for (int o = 16; o; o >>= 1) {
      float v = __shfl_xor_sync(0xffffffffu, mx, o);
      if (v > mx) mx = v;
    }
    if (lane == 0) s_red[warp] = mx;
    __syncthreads();
    mx = s_red[0];
    for (int w = 1; w < kRouteThreads / 32; w++)
      if (s_red[w] > mx) mx = s_red[w];
    for (int e = tid; e < E; e += kRouteThreads) s_score[e] = expf_glibc(__fsub_rn(x[e], mx));
    __syncthreads();
    if (tid == 0) {  // the sum in expert order, one rounding per add, as the CPU
      float sum = 0.0f;
      for (int e = 0; e < E; e++) sum = __fadd_rn(sum, s_score[e]);
      s_sum = sum;
    }
    __syncthreads();
    const float sum = s_sum;
    for (int e = tid; e < E; e += kRouteThreads) s_score[e] = __fdiv_rn(s_score[e], sum);
  } else {
    for (int e = tid; e < E; e += kRouteThreads)
      s_score[e] = __fdiv_rn(1.0f, __fadd_rn(1.0f, expf_glibc(-x[e])));
  }
  const bool biased = p.method == PZ_TOPK_NOAUX_TC && p.bias != nullptr;
  for (int e = tid; e < E; e += kRouteThreads) {
    s_choice[e] = biased ? __fadd_rn(s_score[e], p.bias[e]) : s_score[e];
    s_ok[e] = 1;
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

  if (warp != 0) return;
  const int K = p.K;
  int my_sel = -1;
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
  float w = 0.0f;
  if (lane < K) {
    w = my_sel >= 0 ? s_score[my_sel] : 0.0f;
    s_w[lane] = w;
  }
  __syncwarp();
  if (p.norm && K > 1) {
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
  if (!p || !logits || !ids || !weights)
    return pz_error(PZ_ERR_INVALID_ARG, "moe route: NULL logits/ids/weights/params");
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
  moe_route_kernel<<<m, kRouteThreads, 0, stream>>>(rp);
  PZ_CUDA_CHECK(cudaGetLastError());
  return PZ_OK;
}
