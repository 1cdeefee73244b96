/* The router's rank order of (score, expert index) candidates as one unsigned 64-bit key, so that
 * "ranks before" is a single integer comparison: larger key ranks first. Host and device agnostic,
 * no CUDA calls: the top-k of kernels/moe_route.cu and its CPU test (tests/test_route_key.c) share it.
 *
 * The order is the CPU reference's (ranks_before in src/backend/cpu/ref_moe.c): larger score
 * first, +0 and -0 equal, NaN after every number, ties (NaNs among themselves too) to the lower
 * index; and an empty candidate (index < 0) after every real one. Key = hi << 32 | lo with
 *   hi = the score's bits made order-preserving as unsigned (non-negative: bits | 2^31; negative:
 *        ~bits; -0 as +0), or 1 for NaN (every number's hi is >= 0x007fffff, -inf's);
 *   lo = 2^32 - 1 - index (a lower index gives a larger key);
 * and key 0 for an empty candidate. Keys of distinct indices differ, so a top-k over keys is the
 * serial scan's exactly. Index range: 0 .. 2^31 - 1. */
#ifndef PZ_BACKEND_CUDA_ROUTE_KEY_H
#define PZ_BACKEND_CUDA_ROUTE_KEY_H
#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define PZ_ROUTE_KEY_FN __host__ __device__ static inline
#else
#define PZ_ROUTE_KEY_FN static inline
#endif

/* The key of expert idx with score v (idx < 0: the empty candidate, key 0). */
PZ_ROUTE_KEY_FN uint64_t pz_route_key(float v, int idx) {
  if (idx < 0) return 0;
  uint32_t u;
  memcpy(&u, &v, sizeof u);
  uint32_t hi;
  if ((u & 0x7fffffffu) > 0x7f800000u) {
    hi = 1u; /* NaN */
  } else {
    if ((u & 0x7fffffffu) == 0) u = 0; /* -0 ranks as +0 */
    hi = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
  }
  return ((uint64_t)hi << 32) | (uint64_t)(0xffffffffu - (uint32_t)idx);
}

/* The expert index of a key (-1 for key 0, the empty candidate). */
PZ_ROUTE_KEY_FN int pz_route_key_index(uint64_t key) {
  return key ? (int)(0xffffffffu - (uint32_t)key) : -1;
}

#endif
