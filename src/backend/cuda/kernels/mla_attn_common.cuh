/* Device helpers shared by the MLA attention kernels (mla_kernels.cu: versions 1 and 2, mma.sync;
 * mla_attn_wgmma.cu: version 3, TMA + wgmma): P's bf16 packing, the real-row rule of padded batches, the balanced
 * split-KV schedule (core/kv_sched.h, whose host twin pz_kv_sched it follows step for step) and a work
 * slot's slice of a sequence. Everything is in an anonymous namespace: each kernel file has its own copy. */
#pragma once
#include <math.h>
#include <stdint.h>
#include "backend/cuda/mla_kernels.h"
#include "core/kv_pages.h"
#include "core/kv_sched.h"
#include "backend/cuda/kernels/pad_rows.cuh"

namespace {

typedef pz_mla_kparams Kp;
constexpr int BN = PZ_MLA_BN;
/* A tile starts at a multiple of BN (slices are whole tiles), so it lies inside one page. */
static_assert(PZ_KV_BLOCK % PZ_MLA_BN == 0, "an attention tile must not straddle two KV pages");

/* Two floats as bf16 (round to nearest even), lo in the low half: one cvt.rn.bf16x2 (PTX ISA). */
__device__ __forceinline__ uint32_t pack_bf2(float lo, float hi) {
  uint32_t r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}

/* Warp sum and maximum over its 32 lanes (every lane gets the result). */
template <typename T>
__device__ __forceinline__ T warp_sum(T v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ unsigned warp_max_u32(unsigned v) {
  for (int o = 16; o > 0; o >>= 1) v = max(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
/* The rows that attend their context (pad_rows.cuh: the padding rows of a captured batch size attend
 * one position, mla.h). */
__device__ __forceinline__ int real_rows(const Kp &k) { return pz_real_rows(k.rows, k.m); }
/* n_i: the KV positions row i attends (pos[i] + 1; 1 for a padding row). */
__device__ __forceinline__ unsigned kv_len(const Kp &k, int mr, int i) {
  return i < mr ? (unsigned)k.pos[i] + 1u : 1u;
}
/* S(c) = sum over the batch of ceil(n_i / c), by one warp (32-bit division: n and c are below 2^31,
 * the sum of at most 2^16 counts of at most 2^26 fits 2^32 for m <= 65535). */
__device__ __forceinline__ unsigned warp_slices(const Kp &k, int mr, unsigned c, int lane) {
  unsigned v = 0;
  for (int i = lane; i < k.m; i += 32) v += (kv_len(k, mr, i) - 1u + c) / c;
  return warp_sum(v);
}

/* The chunk C of the balanced schedule for `splits` slices per sequence on average (core/kv_sched.h,
 * pz_kv_sched's steps), warp-wide (every lane gets it). */
__device__ long long sched_chunk(const Kp &k, int mr, int lane, int splits, unsigned long long nsum, unsigned nmax) {
  int64_t ca, cb, ccur;
  pz_kv_sched_candidates((int64_t)nsum, (int64_t)nmax, k.m, splits, PZ_MLA_MAX_SPLITS, &ca, &cb, &ccur);
  if (splits == 1) return ccur; /* T == m: one slice per sequence, the longest context's length */
  const unsigned long long T = (unsigned long long)k.m * (unsigned)splits;
  if (warp_slices(k, mr, (unsigned)ca, lane) <= T) return ca;
  long long lo = ca, hi = cb; /* bisection: S(lo) > T >= S(hi) */
  while (hi - lo > PZ_KV_SCHED_TILE) {
    const long long mid = pz_kv_sched_mid(lo, hi);
    if (warp_slices(k, mr, (unsigned)mid, lane) <= T) hi = mid;
    else lo = mid;
  }
  return hi;
}

/* The balanced split-KV schedule (core/kv_sched.h; pz_kv_sched_waves is its host twin, step for step):
 * block-wide, every thread calls it; warp 0 computes it with shuffles only (no block barrier inside
 * the search), the others wait at one barrier. Returns the chunk C and, for work slot w (0 .. m *
 * splits - 1), *seq / *j: slice j of sequence seq, or *seq = -1 when the batch needs fewer slots than
 * w + 1. With `writer`, the slot offsets off[0..m] go to k.sched for the combine. */
__device__ long long attn_schedule(const Kp &k, int w, bool writer, int *seq, int *j) {
  __shared__ int found[3]; /* seq, j, C */
  if (threadIdx.x < 32) {
    const int lane = threadIdx.x;
    const int mr = real_rows(k);
    unsigned long long nsum = 0;
    unsigned nmax = 0;
    for (int i = lane; i < k.m; i += 32) {
      const unsigned n = kv_len(k, mr, i);
      nsum += n;
      nmax = max(nmax, n);
    }
    nsum = warp_sum(nsum);
    nmax = warp_max_u32(nmax);
    long long c = sched_chunk(k, mr, lane, k.splits, nsum, nmax);
    if (k.splits1 >= 1 && k.splits1 < k.splits) { /* one wave of slots or two (core/kv_sched.h) */
      const long long c1 = sched_chunk(k, mr, lane, k.splits1, nsum, nmax);
      if (pz_kv_sched_one_wave(c1, c, warp_slices(k, mr, (unsigned)c, lane), (int64_t)k.m * k.splits1)) c = c1;
    }
    /* the slot offsets, 32 sequences at a time (inclusive shuffle scan of the slice counts) */
    if (lane == 0) found[0] = -1, found[1] = 0, found[2] = (int)c;
    __syncwarp();
    const unsigned cu = (unsigned)c;
    int base = 0;
    for (int i0 = 0; i0 < k.m; i0 += 32) {
      const int i = i0 + lane;
      const int cnt = i < k.m ? (int)((kv_len(k, mr, i) - 1u + cu) / cu) : 0;
      int incl = cnt;
      for (int o = 1; o < 32; o <<= 1) {
        const int t = __shfl_up_sync(0xffffffffu, incl, o);
        if (lane >= o) incl += t;
      }
      const int off = base + incl - cnt;
      if (i < k.m && w >= off && w < off + cnt) found[0] = i, found[1] = w - off;
      if (writer && i < k.m) k.sched[i] = off;
      base += __shfl_sync(0xffffffffu, incl, 31);
    }
    if (writer && lane == 0) k.sched[k.m] = base;
  }
  __syncthreads();
  *seq = found[0];
  *j = found[1];
  return found[2];
}

/* The slot's slice of a KV sequence, shared by both attention kernels: work slot w = i * splits +
 * split of the grid takes slice j of sequence seq in the balanced schedule (attn_schedule): tokens
 * [start, end) = [j C, min(n, (j + 1) C)) of its n = pos[seq] + 1, ntiles tiles of BN (the last one
 * partial). It reads its cache rows from `cache` (contiguous: row t of sequence seq at cache + t * kvw;
 * paged, table = sequence seq's row of the block table: at cache + (table[t / 64] * 64 + t % 64) * kvw),
 * its queries from row seq of qabs, and writes its (max, sum) per head to ml (the k.ml rows of slot
 * w) and its partial output to slot w of k.opart; the combine reads slots k.sched[seq] ..
 * k.sched[seq + 1] - 1. */
struct AttnSlice {
  int seq, start, end, ntiles;
  float *ml;
  const uint16_t *cache;
  const int32_t *table;
};

/* Fills *sl for CTA (slot w = i * splits + split, head tile h0 .. h0 + HT - 1); block-wide (every
 * thread calls it). An unused slot marks its heads (-inf, 0) and returns false: the CTA then has
 * nothing more to do. `writer` (one CTA of the grid) also stores the schedule for the combine.
 * With k.balance 0 slot w is chunk `split` of sequence i, as before the balanced schedule. */
template <int HT, int THREADS>
__device__ __forceinline__ bool attn_slice(const Kp &k, int i, int split, int h0, int tid, bool writer, AttnSlice *sl) {
  const int w = i * k.splits + split;
  const int mr = real_rows(k);
  int seq = i, j = split;
  long long c;
  if (k.balance) {
    c = attn_schedule(k, w, writer, &seq, &j);
  } else { /* PREZERO_MLA_BALANCE=0: sequence i in `splits` chunks of whole tiles of its own length */
    c = pz_kv_sched_ceil_tiles((long long)kv_len(k, mr, i), k.splits);
  }
  const int n = seq >= 0 ? (int)kv_len(k, mr, seq) : 0;
  const int start = seq >= 0 ? (int)(j * c) : 0;
  const int end = seq >= 0 ? (int)min((long long)n, start + c) : 0;
  float *ml = k.ml + (int64_t)w * k.heads * 2;
  if (start >= end) {
    for (int r = tid; r < HT; r += THREADS)
      if (h0 + r < k.heads) { ml[(h0 + r) * 2] = -INFINITY; ml[(h0 + r) * 2 + 1] = 0.0f; }
    return false;
  }
  sl->seq = seq;
  sl->start = start;
  sl->end = end;
  sl->ntiles = (end - start + BN - 1) / BN;
  sl->ml = ml;
  sl->table = k.block_table ? k.block_table + (int64_t)seq * k.ld_bt : nullptr;
  sl->cache = sl->table ? k.cache : k.cache + (int64_t)seq * k.cache_seq_stride;
  return true;
}

} // namespace
