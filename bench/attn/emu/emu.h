/* A small CPU emulator of the CUDA features the MLA kernels use, for checking their indexing
 * without a GPU: one OS thread per CUDA thread, __syncthreads / warp collectives as barriers,
 * ldmatrix and mma.sync m16n8k16 (bf16, f32 accumulate) by their documented fragment layouts
 * (PTX ISA, "Matrix fragments for mma.m16n8k16" and "ldmatrix"). Development tool only. */
#pragma once
#include <pthread.h>
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <algorithm>
#include <functional>
#include <vector>
#include <cuda_runtime.h> /* vector types only (uint4, float2, dim3): host-compilable */
extern "C" {
#include "core/dtype.h"
}

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)

struct EmuTls {
  dim3 tid, bid, bdim, gdim;
};
extern thread_local EmuTls emu_tls;
#define threadIdx emu_tls.tid
#define blockIdx emu_tls.bid
#define blockDim emu_tls.bdim
#define gridDim emu_tls.gdim

struct EmuWarp {
  pthread_barrier_t bar;
  uint64_t v[32];
  const void *addr[32];
  uint32_t a[32][4], b[32][2];
};
struct EmuCta {
  pthread_barrier_t bar;
  std::vector<EmuWarp> warps;
  std::vector<uint4> smem;
};
extern EmuCta *emu_cta;

inline void *emu_dyn_smem() { return emu_cta->smem.data(); }
inline int emu_lane() { return (int)(threadIdx.x & 31); }
inline EmuWarp &emu_warp() { return emu_cta->warps[threadIdx.x >> 5]; }
inline void emu_wsync() { pthread_barrier_wait(&emu_warp().bar); }
inline void __syncthreads() { pthread_barrier_wait(&emu_cta->bar); }
inline void __syncwarp() { emu_wsync(); }

inline float __uint_as_float(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
inline float __int_as_float(int u) { float f; memcpy(&f, &u, 4); return f; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fsqrt_rn(float a) { return sqrtf(a); }
inline uint16_t __float2bfloat16_rn(float f) { return pz_f32_to_bf16(f); }
/* mla_attn_common.cuh's pack_bf2 (cvt.rn.bf16x2.f32): lo in the low half */
inline uint32_t pack_bf2(float lo, float hi) { return (uint32_t)pz_f32_to_bf16(lo) | ((uint32_t)pz_f32_to_bf16(hi) << 16); }
inline uint16_t __bfloat16_as_ushort(uint16_t h) { return h; }
inline int min(int a, int b) { return a < b ? a : b; }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline long long max(long long a, long long b) { return a > b ? a : b; }
inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }

template <typename T>
inline T __shfl_xor_sync(unsigned, T v, int o) {
  EmuWarp &w = emu_warp();
  uint64_t x = 0;
  memcpy(&x, &v, sizeof(T));
  w.v[emu_lane()] = x;
  emu_wsync();
  uint64_t y = w.v[emu_lane() ^ o];
  emu_wsync();
  T r;
  memcpy(&r, &y, sizeof(T));
  return r;
}

/* lane l gets lane src's v (__shfl_sync) or lane l - d's (__shfl_up_sync; its own below d) */
template <typename T>
inline T emu_shfl_from(T v, int src) {
  EmuWarp &w = emu_warp();
  uint64_t x = 0;
  memcpy(&x, &v, sizeof(T));
  w.v[emu_lane()] = x;
  emu_wsync();
  uint64_t y = w.v[src];
  emu_wsync();
  T r;
  memcpy(&r, &y, sizeof(T));
  return r;
}
template <typename T>
inline T __shfl_sync(unsigned, T v, int src) { return emu_shfl_from(v, src & 31); }
template <typename T>
inline T __shfl_up_sync(unsigned, T v, int d) { return emu_shfl_from(v, emu_lane() >= d ? emu_lane() - d : emu_lane()); }

inline void cp_async16(void *dst, const void *src, bool valid) {
  if (valid) memcpy(dst, src, 16);
  else memset(dst, 0, 16);
}
inline void cp_commit() {}
template <int N>
inline void cp_wait() {}

/* ldmatrix: lane 8j+r gives the address of row r of matrix j; lane T receives, per matrix,
 * (row T/4, columns 2(T%4), 2(T%4)+1), or with .trans (rows 2(T%4), 2(T%4)+1 of column T/4). */
template <int NM, bool TRANS>
inline void emu_ldsm(uint32_t *r, const void *p) {
  EmuWarp &w = emu_warp();
  const int T = emu_lane();
  w.addr[T] = p;
  emu_wsync();
  for (int j = 0; j < NM; j++) {
    uint16_t lo, hi;
    if (!TRANS) {
      const uint16_t *row = (const uint16_t *)w.addr[8 * j + T / 4];
      lo = row[2 * (T % 4)];
      hi = row[2 * (T % 4) + 1];
    } else {
      lo = ((const uint16_t *)w.addr[8 * j + 2 * (T % 4)])[T / 4];
      hi = ((const uint16_t *)w.addr[8 * j + 2 * (T % 4) + 1])[T / 4];
    }
    r[j] = (uint32_t)lo | ((uint32_t)hi << 16);
  }
  emu_wsync();
}
inline void ldsm_x4(uint32_t (&r)[4], const void *p) { emu_ldsm<4, false>(r, p); }
inline void ldsm_x4_t(uint32_t (&r)[4], const void *p) { emu_ldsm<4, true>(r, p); }
inline void ldsm_x2_t(uint32_t (&r)[2], const void *p) { emu_ldsm<2, true>(r, p); }

/* mma.m16n8k16 row.col bf16 -> f32: lane (g = T/4, t = T%4) holds A (g|g+8, 2t..2t+1 | +8) in
 * a0..a3, B (k 2t..2t+1 | +8, n g) in b0, b1, D (g|g+8, 2t..2t+1) in d0..d3. */
inline float emu_half(uint32_t r, int hi) { return pz_bf16_to_f32((uint16_t)(hi ? r >> 16 : r & 0xffff)); }
inline void mma16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  EmuWarp &w = emu_warp();
  const int T = emu_lane(), g = T / 4, t = T % 4;
  for (int i = 0; i < 4; i++) w.a[T][i] = a[i];
  w.b[T][0] = b0;
  w.b[T][1] = b1;
  emu_wsync();
  for (int e = 0; e < 4; e++) {
    const int row = g + (e >= 2 ? 8 : 0), col = 2 * t + (e & 1);
    float acc = d[e];
    for (int k = 0; k < 16; k++) {
      const float av = emu_half(w.a[(row % 8) * 4 + (k % 8) / 2][(row >= 8 ? 1 : 0) + (k >= 8 ? 2 : 0)], k & 1);
      const float bv = emu_half(w.b[col * 4 + (k % 8) / 2][k >= 8 ? 1 : 0], k & 1);
      acc += av * bv;
    }
    d[e] = acc;
  }
  emu_wsync();
}

/* Runs kernel body f for every CTA of grid (sequentially), one OS thread per CUDA thread. */
void emu_launch(dim3 grid, dim3 block, size_t smem_bytes, const std::function<void()> &f);
