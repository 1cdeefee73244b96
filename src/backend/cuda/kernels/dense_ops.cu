/* CUDA kernels + launchers of the dense decode ops (dense_ops.h): embedding, RMSNorm, lm_head,
 * SiLU-and-multiply, argmax over a vocab shard and its cross-rank combine. */
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
extern "C" { /* core/status.h has no C++ guards of its own */
#include "core/status.h"
}
#include "backend/cuda/cuda_util.h"
#include "backend/cuda/dense_ops.h"
#include "backend/cuda/kernels/pdl.cuh"
#include "expf_glibc.cuh"

namespace {

__device__ __forceinline__ float bf2f(uint16_t h) { return __uint_as_float((uint32_t)h << 16); }
/* Round to nearest even, NaN kept quiet: the same bits as pz_f32_to_bf16. */
__device__ __forceinline__ uint16_t f2bf(float f) {
  return __bfloat16_as_ushort(__float2bfloat16_rn(f));
}

/* ---------------------------------------------------------------- embedding */

__global__ void embedding_kernel(pz_embedding_params p) {
  const int64_t i = blockIdx.x;
  const int64_t id = p.ids[i];
  const int64_t lo = (int64_t)p.rank * p.vocab_per_rank;
  float *o = p.out + i * p.ld_out;
  if (id < 0 || id >= p.vocab_size) {
    for (int64_t j = threadIdx.x; j < p.H; j += blockDim.x) o[j] = __int_as_float(0x7fc00000);
  } else if (id >= lo && id < lo + p.vocab_per_rank) {
    const uint16_t *w = (const uint16_t *)p.W + (id - lo) * p.H;
    for (int64_t j = threadIdx.x; j < p.H; j += blockDim.x) o[j] = bf2f(w[j]);
  } else {
    for (int64_t j = threadIdx.x; j < p.H; j += blockDim.x) o[j] = 0.0f;
  }
}

/* ---------------------------------------------------------------- RMSNorm */

#define NORM_THREADS 256

/* Block-wide sum, fixed tree order (warp shuffles, then warp 0 over the warp sums). */
__device__ __forceinline__ float block_sum(float v, float *red) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int w = threadIdx.x >> 5, l = threadIdx.x & 31;
  __syncthreads(); /* red may still be read from a previous call */
  if (l == 0) red[w] = v;
  __syncthreads();
  const int nw = blockDim.x >> 5;
  float t = l < nw ? red[l] : 0.0f;
  for (int o = 16; o > 0; o >>= 1) t += __shfl_xor_sync(0xffffffffu, t, o);
  return t;
}

template <typename T>
__device__ __forceinline__ float load_x(const T *x, int64_t j);
template <>
__device__ __forceinline__ float load_x<float>(const float *x, int64_t j) { return x[j]; }
template <>
__device__ __forceinline__ float load_x<uint16_t>(const uint16_t *x, int64_t j) { return bf2f(x[j]); }

template <typename T>
__global__ void __launch_bounds__(NORM_THREADS) rmsnorm_kernel(pz_rmsnorm_params p) {
  pz_pdl_trigger(); /* a GEMM launched after this kernel may start its weight loads now (kernels/pdl.cuh) */
  __shared__ float red[32];
  const T *x = (const T *)p.x + (int64_t)blockIdx.x * p.ldx;
  float ss = 0.0f;
  for (int64_t j = threadIdx.x; j < p.n; j += blockDim.x) {
    float v = load_x<T>(x, j);
    ss = __fadd_rn(ss, __fmul_rn(v, v));
  }
  ss = block_sum(ss, red);
  /* the reference's formula: mean = ss / (float)n, inv = 1 / sqrtf(mean + eps) (IEEE ops) */
  const float inv = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(ss, (float)p.n), p.eps)));
  const uint16_t *w = (const uint16_t *)p.w;
  uint16_t *y = (uint16_t *)p.y + (int64_t)blockIdx.x * p.ldy;
  for (int64_t j = threadIdx.x; j < p.n; j += blockDim.x)
    y[j] = f2bf(__fmul_rn(__fmul_rn(load_x<T>(x, j), inv), bf2f(w[j])));
}

/* ---------------------------------------------------------------- argmax */

/* Merge of two candidates (v, id, nan): NaN beats everything, lower id among NaNs; else larger
 * v, lower id on ties; id -1 = none. Associative and commutative. */
struct Cand {
  float v;
  int id;
  int nan;
};
__device__ __forceinline__ Cand merge(Cand a, Cand b) {
  if (a.id < 0) return b;
  if (b.id < 0) return a;
  if (a.nan || b.nan) {
    if (a.nan && b.nan) return a.id < b.id ? a : b;
    return a.nan ? a : b;
  }
  if (a.v > b.v) return a;
  if (b.v > a.v) return b;
  return a.id < b.id ? a : b;
}
__device__ __forceinline__ Cand shfl_cand(Cand c, int o) {
  Cand r;
  r.v = __shfl_xor_sync(0xffffffffu, c.v, o);
  r.id = __shfl_xor_sync(0xffffffffu, c.id, o);
  r.nan = __shfl_xor_sync(0xffffffffu, c.nan, o);
  return r;
}

#define ARGMAX_THREADS 512
__global__ void __launch_bounds__(ARGMAX_THREADS) argmax_shard_kernel(pz_argmax_params p) {
  __shared__ Cand red[ARGMAX_THREADS / 32];
  const int64_t i = blockIdx.x;
  const float *row = p.logits + i * p.ld;
  const int64_t lo = (int64_t)p.rank * p.vocab_per_rank;
  int64_t n = p.vocab_size - lo;
  if (n > p.vocab_per_rank) n = p.vocab_per_rank;
  Cand c = {0.0f, -1, 0};
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
    float v = row[j];
    Cand e = {v, (int)(lo + j), isnan(v) ? 1 : 0};
    c = merge(c, e);
  }
  for (int o = 16; o > 0; o >>= 1) c = merge(c, shfl_cand(c, o));
  const int w = threadIdx.x >> 5, l = threadIdx.x & 31;
  if (l == 0) red[w] = c;
  __syncthreads();
  if (w == 0) {
    c = l < (int)(blockDim.x >> 5) ? red[l] : Cand{0.0f, -1, 0};
    for (int o = 16; o > 0; o >>= 1) c = merge(c, shfl_cand(c, o));
    if (l == 0) {
      pz_argmax_cand out;
      out.v = c.id >= 0 ? (c.nan ? __int_as_float(0x7fc00000) : c.v) : 0.0f;
      out.id = c.id;
      p.cand[i] = out;
      if (p.ids) p.ids[i] = c.id < 0 ? 0 : c.id;
    }
  }
}

struct CombineArgs {
  const pz_argmax_cand *c[PZ_ARGMAX_MAX_TP];
  int tp;
  int64_t m;
  int32_t *ids;
};
__global__ void argmax_combine_kernel(CombineArgs a) {
  const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= a.m) return;
  Cand best = {0.0f, -1, 0};
  for (int r = 0; r < a.tp; r++) {
    pz_argmax_cand x = a.c[r][i];
    Cand e = {x.v, x.id, isnan(x.v) ? 1 : 0};
    if (x.id >= 0) best = merge(best, e);
  }
  a.ids[i] = best.id < 0 ? 0 : best.id;
}

/* ---------------------------------------------------------------- any-shape GEMM */

#define GG_WARPS 4 /* output columns per CTA (one per warp) */
#define GG_ROWS 8  /* rows per pass over a W row */

/* grid (ceil(n / 4)), 128 threads: warp w owns column j = 4*blockIdx.x + w; for each group of 8
 * rows: lane l sums A[i, k] * W[j, k] over k = l, l+32, .. (f32), the lanes' sums meet in a
 * butterfly (fixed order), lane r writes row i0 + r. */
__global__ void __launch_bounds__(32 * GG_WARPS) gemm_any_kernel(pz_gemm_args a) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int j = blockIdx.x * GG_WARPS + warp;
  if (j >= a.n) return;
  const int64_t ldw = a.ldw > 0 ? a.ldw : a.k;
  const uint16_t *w = (const uint16_t *)a.W + (int64_t)j * ldw;
  const uint16_t *A = (const uint16_t *)a.A;
  const float bias = a.bias ? a.bias[j] : 0.0f;
  for (int i0 = 0; i0 < a.m; i0 += GG_ROWS) {
    const int nr = min(GG_ROWS, a.m - i0);
    float acc[GG_ROWS];
#pragma unroll
    for (int r = 0; r < GG_ROWS; r++) acc[r] = 0.0f;
    for (int k = lane; k < a.k; k += 32) {
      const float wv = bf2f(w[k]);
#pragma unroll
      for (int r = 0; r < GG_ROWS; r++)
        if (r < nr) acc[r] = __fadd_rn(acc[r], __fmul_rn(bf2f(A[(int64_t)(i0 + r) * a.lda + k]), wv));
    }
#pragma unroll
    for (int r = 0; r < GG_ROWS; r++)
      for (int o = 16; o; o >>= 1) acc[r] = __fadd_rn(acc[r], __shfl_xor_sync(0xffffffffu, acc[r], o));
    float mine = 0.0f;
#pragma unroll
    for (int r = 0; r < GG_ROWS; r++)
      if (lane == r) mine = acc[r];
    if (lane < nr) {
      const float v = __fadd_rn(mine, bias);
      const int64_t o = (int64_t)(i0 + lane) * a.ldc + j;
      if (a.c_dtype == PZ_F32) {
        float *c = (float *)a.C + o;
        *c = a.zero_init ? v : __fadd_rn(*c, v);
      } else {
        uint16_t *c = (uint16_t *)a.C + o;
        *c = f2bf(a.zero_init ? v : __fadd_rn(bf2f(*c), v));
      }
    }
  }
}

/* ---------------------------------------------------------------- SiLU-and-multiply */

/* bf16(silu(g) * u) with the reference's operations: g / (1 + expf(-g)), then * u, each IEEE-rounded. */
__device__ __forceinline__ uint16_t silu_mul_bf16(float g, float u) {
  const float s = __fdiv_rn(g, __fadd_rn(1.0f, expf_glibc(-g)));
  return f2bf(__fmul_rn(s, u));
}

#define SILU_THREADS 256
/* grid (ceil(inter / (256 * V)), m): V = 4 columns per thread (16-byte loads, 8-byte stores) when
 * the strides and pointers allow, else 1. */
template <int V>
__global__ void __launch_bounds__(SILU_THREADS) silu_mul_kernel(pz_silu_mul_params p) {
  const int64_t i = blockIdx.y;
  const int64_t j = ((int64_t)blockIdx.x * SILU_THREADS + threadIdx.x) * V;
  if (j >= p.inter) return;
  const float *g = p.gu + i * p.ld_gu + j, *u = g + p.inter;
  uint16_t *a = (uint16_t *)p.act + i * p.ld_act + j;
  if (V == 4) {
    const float4 gv = *(const float4 *)g, uv = *(const float4 *)u;
    uint2 o;
    o.x = (uint32_t)silu_mul_bf16(gv.x, uv.x) | ((uint32_t)silu_mul_bf16(gv.y, uv.y) << 16);
    o.y = (uint32_t)silu_mul_bf16(gv.z, uv.z) | ((uint32_t)silu_mul_bf16(gv.w, uv.w) << 16);
    *(uint2 *)a = o;
  } else {
    a[0] = silu_mul_bf16(g[0], u[0]);
  }
}

} // namespace

extern "C" pz_status pz_cuda_embedding(const pz_embedding_params *p, cudaStream_t s) {
  if (!p || p->m < 0 || p->H < 1 || p->ld_out < p->H || p->vocab_per_rank < 1 || p->rank < 0)
    return pz_error(PZ_ERR_INVALID_ARG, "embedding: bad shape (m, H, ld_out, vocab_per_rank, rank)");
  if (p->m == 0) return PZ_OK;
  if (!p->ids || !p->W || !p->out) return pz_error(PZ_ERR_INVALID_ARG, "embedding: NULL pointer");
  embedding_kernel<<<(unsigned)p->m, 256, 0, s>>>(*p);
  PZ_CUDA_CHECK(cudaGetLastError());
  return PZ_OK;
}

extern "C" pz_status pz_cuda_rmsnorm(const pz_rmsnorm_params *p, cudaStream_t s) {
  if (!p || p->m < 0 || p->n < 1 || p->n > 65536 || p->ldx < p->n || p->ldy < p->n)
    return pz_error(PZ_ERR_INVALID_ARG, "rmsnorm: bad shape (m, n, ldx, ldy)");
  if (p->m == 0) return PZ_OK;
  if (!p->x || !p->w || !p->y) return pz_error(PZ_ERR_INVALID_ARG, "rmsnorm: NULL pointer");
  if (p->x_dtype == PZ_F32) rmsnorm_kernel<float><<<(unsigned)p->m, NORM_THREADS, 0, s>>>(*p);
  else if (p->x_dtype == PZ_BF16) rmsnorm_kernel<uint16_t><<<(unsigned)p->m, NORM_THREADS, 0, s>>>(*p);
  else return pz_error(PZ_ERR_DTYPE, "rmsnorm: x must be f32 or bf16, got %s", pz_dtype_name(p->x_dtype));
  PZ_CUDA_CHECK(cudaGetLastError());
  return PZ_OK;
}

extern "C" pz_status pz_cuda_lm_head(pz_gemm_ctx *g, int m, int64_t H, int64_t vocab_per_rank,
                                     const pz_bf16 *x, int64_t ldx, const pz_bf16 *W, float *logits,
                                     int64_t ld_logits, cudaStream_t s) {
  pz_gemm_args a = {};
  a.m = m;
  a.n = (int)vocab_per_rank;
  a.k = (int)H;
  a.A = x;
  a.lda = ldx;
  a.W = W;
  a.ldw = H;
  a.C = logits;
  a.ldc = ld_logits;
  a.c_dtype = PZ_F32;
  a.bias = NULL;
  a.zero_init = true;
  a.config.flavour = PZ_GEMM_AUTO;
  return pz_gemm_launch(g, &a, s);
}

extern "C" pz_status pz_cuda_argmax_shard(const pz_argmax_params *p, cudaStream_t s) {
  if (!p || p->m < 0 || p->vocab_per_rank < 1 || p->ld < p->vocab_per_rank || p->rank < 0)
    return pz_error(PZ_ERR_INVALID_ARG, "argmax: bad shape (m, ld, vocab_per_rank, rank)");
  if (p->m == 0) return PZ_OK;
  if (!p->logits || !p->cand) return pz_error(PZ_ERR_INVALID_ARG, "argmax: NULL logits or cand");
  argmax_shard_kernel<<<(unsigned)p->m, ARGMAX_THREADS, 0, s>>>(*p);
  PZ_CUDA_CHECK(cudaGetLastError());
  return PZ_OK;
}

extern "C" pz_status pz_cuda_argmax_combine(int tp, const pz_argmax_cand *const *cands, int64_t m,
                                            int32_t *ids, cudaStream_t s) {
  if (tp < 1 || tp > PZ_ARGMAX_MAX_TP || !cands || !ids || m < 0)
    return pz_error(PZ_ERR_INVALID_ARG, "argmax combine: tp %d outside 1..%d or NULL pointer", tp, PZ_ARGMAX_MAX_TP);
  if (m == 0) return PZ_OK;
  CombineArgs a = {};
  for (int r = 0; r < tp; r++) {
    if (!cands[r]) return pz_error(PZ_ERR_INVALID_ARG, "argmax combine: cands[%d] is NULL", r);
    a.c[r] = cands[r];
  }
  a.tp = tp;
  a.m = m;
  a.ids = ids;
  argmax_combine_kernel<<<(unsigned)((m + 127) / 128), 128, 0, s>>>(a);
  PZ_CUDA_CHECK(cudaGetLastError());
  return PZ_OK;
}

extern "C" pz_status pz_cuda_silu_mul(const pz_silu_mul_params *p, cudaStream_t s) {
  if (!p || !p->gu || !p->act || p->m < 1 || p->inter < 1 || p->ld_gu < 2 * p->inter || p->ld_act < p->inter)
    return pz_error(PZ_ERR_INVALID_ARG, "silu_mul: NULL pointer, empty shape or row stride below 2*inter / inter");
  const bool v4 = p->inter % 4 == 0 && p->ld_gu % 4 == 0 && p->ld_act % 4 == 0 && ((uintptr_t)p->gu & 15) == 0 &&
                  ((uintptr_t)p->act & 7) == 0;
  const int64_t per = (int64_t)SILU_THREADS * (v4 ? 4 : 1);
  dim3 grid((unsigned)((p->inter + per - 1) / per), (unsigned)p->m);
  if (v4) silu_mul_kernel<4><<<grid, SILU_THREADS, 0, s>>>(*p);
  else silu_mul_kernel<1><<<grid, SILU_THREADS, 0, s>>>(*p);
  PZ_CUDA_CHECK(cudaGetLastError());
  return PZ_OK;
}

extern "C" pz_status pz_cuda_gemm_any(pz_gemm_ctx *g, const pz_gemm_args *a, cudaStream_t s) {
  if (!a) return pz_error(PZ_ERR_INVALID_ARG, "gemm: NULL arguments");
  const pz_status chk = pz_gemm_check(a);
  if (chk == PZ_OK) return pz_gemm_launch(g, a, s);
  if (a->n > 0 && a->k > 0 && a->n % 64 == 0 && a->k % 64 == 0) return chk; /* another rule: its error stands */
  const int64_t ldw = a->ldw > 0 ? a->ldw : a->k;
  if (!a->A || !a->W || !a->C || a->m < 1 || a->n < 1 || a->k < 1 || a->lda < a->k || ldw < a->k || a->ldc < a->n ||
      (a->c_dtype != PZ_F32 && a->c_dtype != PZ_BF16))
    return pz_error(PZ_ERR_INVALID_ARG, "gemm (any shape): m=%d n=%d k=%d, lda %lld ldw %lld ldc %lld, C f32 or bf16 needed",
                    a->m, a->n, a->k, (long long)a->lda, (long long)ldw, (long long)a->ldc);
  gemm_any_kernel<<<(unsigned)((a->n + GG_WARPS - 1) / GG_WARPS), 32 * GG_WARPS, 0, s>>>(*a);
  PZ_CUDA_CHECK(cudaGetLastError());
  return PZ_OK;
}
