/* The split-K GEMM kernels' shared epilogue: C element stores / reductions and the per-tile
 * semaphore protocol of flavours 2 (in-kernel zero + flag) and 5 (serial turnstile). */
#pragma once
#include <cuda_bf16.h>
#include <stdint.h>

/* Every helper takes the kernel's parameter struct P, which has at least:
 *   void *C; int64_t ldc; int c_bf16 (C is bf16, else f32); int *sems (2 ints per tile: flag 2t,
 *   counter 2t+1, zero between launches); int splits; pz_gemm_flavour mode (SPLITK_ATOMIC, SPLITK_ZERO, FULLK or SPLITK_SERIAL). */

__device__ __forceinline__ int gemm_ld_acquire(const int *p) {
  int v;
  asm volatile("ld.acquire.gpu.global.b32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void gemm_st_release(int *p, int v) {
  asm volatile("st.release.gpu.global.b32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

template <class P>
__device__ __forceinline__ void c_store(const P &p, int64_t off, float v) {
  if (p.c_bf16) ((__nv_bfloat16 *)p.C)[off] = __float2bfloat16_rn(v);
  else ((float *)p.C)[off] = v;
}
template <class P>
__device__ __forceinline__ void c_atomic(const P &p, int64_t off, float v) {
  if (p.c_bf16) atomicAdd(((__nv_bfloat16 *)p.C) + off, __float2bfloat16_rn(v));
  else atomicAdd(((float *)p.C) + off, v);
}
/* C element read through L2 (the previous split's store is only guaranteed visible there). */
template <class P>
__device__ __forceinline__ float c_load_l2(const P &p, int64_t off) {
  if (p.c_bf16) {
    unsigned short u = __ldcg(((const unsigned short *)p.C) + off);
    return __uint_as_float((unsigned)u << 16);
  }
  return __ldcg(((const float *)p.C) + off);
}

/* True when this CTA's epilogue overwrites C instead of accumulating into it: full K, the first
 * split of the serial turnstile, or flavour 2 without splits. */
template <class P>
__device__ __forceinline__ bool c_overwrites(const P &p, int split) {
  return p.mode == PZ_GEMM_FULLK || (p.mode == PZ_GEMM_SPLITK_SERIAL && split == 0) || (p.mode == PZ_GEMM_SPLITK_ZERO && p.splits == 1);
}
/* One element of the CTA's partial into C[off]: store, serial add (split > 0 of flavour 5), or
 * atomic add. */
template <class P>
__device__ __forceinline__ void c_put(const P &p, int split, int64_t off, float v) {
  if (c_overwrites(p, split)) c_store(p, off, v);
  else if (p.mode == PZ_GEMM_SPLITK_SERIAL) c_store(p, off, c_load_l2(p, off) + v);
  else c_atomic(p, off, v);
}

/* Flavour 2, split 0, before the main loop: the CTA's threads (nthr of them) zero its C tile of
 * rows x cols at (t0, n0). The caller then fences, syncs and raises the flag (tile_flag_raise). */
template <class P>
__device__ __forceinline__ void tile_zero(const P &p, int t0, int n0, int rows, int cols, int nthr) {
  for (int e = threadIdx.x; e < rows * cols; e += nthr) {
    const int t = e / cols, j = e - t * cols;
    c_store(p, (int64_t)(t0 + t) * p.ldc + n0 + j, 0.0f);
  }
}
/* Thread 0 raises tile `tile`'s flag: its zeroing is visible. */
template <class P>
__device__ __forceinline__ void tile_flag_raise(const P &p, int tile) {
  if (threadIdx.x == 0) gemm_st_release(&p.sems[2 * tile], 1);
}
/* Before the epilogue: thread 0 of a split > 0 waits for split 0's zeroing (flavour 2) or for its
 * turn (flavour 5: the flag equals its split index). The caller syncs the CTA after it. */
template <class P>
__device__ __forceinline__ void tile_wait(const P &p, int split, int tile) {
  if ((p.mode == PZ_GEMM_SPLITK_ZERO || p.mode == PZ_GEMM_SPLITK_SERIAL) && split > 0 && threadIdx.x == 0)
    while (gemm_ld_acquire(&p.sems[2 * tile]) != (p.mode == PZ_GEMM_SPLITK_ZERO ? 1 : split)) __nanosleep(32);
}
/* After the epilogue, called by every thread of the CTA: flavour 5 passes the turn to the next
 * split (the last one resets the flag to 0); in flavour 2 the last waiter resets flag and counter
 * (every other waiter has already seen the flag: it counted after its wait), so the next launch
 * starts from zero. */
template <class P>
__device__ __forceinline__ void tile_release(const P &p, int split, int tile) {
  if (p.mode == PZ_GEMM_SPLITK_SERIAL && p.splits > 1) {
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) gemm_st_release(&p.sems[2 * tile], split == p.splits - 1 ? 0 : split + 1);
  } else if (p.mode == PZ_GEMM_SPLITK_ZERO && split > 0) {
    __syncthreads();
    if (threadIdx.x == 0 && atomicAdd(&p.sems[2 * tile + 1], 1) == p.splits - 2) {
      p.sems[2 * tile + 1] = 0;
      gemm_st_release(&p.sems[2 * tile], 0);
    }
  }
}

/* The whole epilogue of a CTA whose tile sits reduced in shared memory: wait for the turn /
 * the zeroing, add the bias in split 0 only, write each of the rows x NTC values through the
 * flavour's c_put, release the tile. red[t * NTCP + j] is token t0 + t, column n0 + j; NTHR
 * threads share the loop. Every thread of the CTA calls it. */
template <int NTC, int NTCP, int NTHR, class P>
__device__ __forceinline__ void tile_epilogue_from_smem(const P &p, const float *red, int rows, int t0, int n0,
                                                        int split, int tile) {
  tile_wait(p, split, tile); /* our turn / split 0's zeroing */
  __syncthreads();
  const bool add_bias = p.bias != nullptr && split == 0;
  for (int e = threadIdx.x; e < rows * NTC; e += NTHR) {
    const int t = e / NTC, j = e - t * NTC;
    float v = red[t * NTCP + j];
    if (add_bias) v += p.bias[n0 + j];
    const int64_t off = (int64_t)(t0 + t) * p.ldc + n0 + j;
    c_put(p, split, off, v);
  }
  tile_release(p, split, tile);
}

/* Host side: the launch fields both kernels' parameter blocks share (output, bias, semaphores,
 * shape, split count, flavour). */
template <class P>
inline void gemm_params_common(P &p, const pz_gemm_args *a, int *sems, int splits, pz_gemm_flavour flavour) {
  p.C = a->C;
  p.ldc = a->ldc;
  p.bias = a->bias;
  p.sems = sems;
  p.m = a->m;
  p.n = a->n;
  p.splits = splits;
  p.mode = flavour;
}

/* Where a split-K CTA works: its C tile (columns n0.., tokens t0.., `rows` of them, flag index
 * `tile`), its split and its half-open range of 32-wide K chunks. Grid: x = column tiles of NTC,
 * y = splits, z = token tiles of TOK. */
struct gemm_tile {
  int n0, split, t0, tile, c_begin, c_end, rows;
};
template <int TOK, int NTC, class P>
__device__ __forceinline__ gemm_tile gemm_tile_of(const P &p) {
  gemm_tile t;
  t.n0 = blockIdx.x * NTC;
  t.split = blockIdx.y;
  t.t0 = blockIdx.z * TOK;
  t.tile = blockIdx.z * gridDim.x + blockIdx.x;
  const int nchunks = p.k >> 5;
  t.c_begin = (int)((int64_t)t.split * nchunks / p.splits);
  t.c_end = (int)((int64_t)(t.split + 1) * nchunks / p.splits);
  t.rows = min(TOK, p.m - t.t0);
  return t;
}
/* Flavour 2 (in-kernel zero): split 0 zeroes its C tile, then raises the tile's flag. Every
 * thread of the CTA calls it. */
template <int NTC, int NTHR, class P>
__device__ __forceinline__ void tile_zero_prologue(const P &p, const gemm_tile &t) {
  if (p.mode == PZ_GEMM_SPLITK_ZERO && t.split == 0 && p.splits > 1) {
    tile_zero(p, t.t0, t.n0, t.rows, NTC, NTHR);
    __threadfence();
    __syncthreads();
    tile_flag_raise(p, t.tile);
  }
}
