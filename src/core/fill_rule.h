/* The seeded fill rule of weights and KV caches: one element's value as a pure function of
 * (seed, tensor name, full flat index, dtype, scale, offset), shared by both backends. */
#ifndef PZ_CORE_FILL_RULE_H
#define PZ_CORE_FILL_RULE_H
/* The CPU executor (src/backend/cpu/cpu_exec.c) and the CUDA fill kernel
 * (src/backend/cuda/fill.cu) both evaluate these functions and MUST produce identical bits:
 * the CUDA-vs-CPU tests compare logits bit for bit from the same seed, and
 * tests/test_fill_rule.c pins exact values, so any change here changes every seeded model.
 *
 * The rule, for a tensor `name` filled from `seed` (u64) with coefficients (scale, offset), f32:
 *   key      = splitmix64(seed ^ splitmix64(fnv1a64(name)))                 pz_fill_name_key
 *   u(i)     = (top 24 bits of splitmix64(key + i * 0x9e3779b97f4a7c15)) * 2^-23 - 1,
 *              in [-1, 1), a multiple of 2^-23 (exact in f32)             pz_fill_unit
 *   v(i)     = offset + scale * u(i), the product and the sum each rounded to f32
 *              (round to nearest even, never fused into an FMA)        pz_fill_value
 *   stored   = bf16: v rounded to nearest even (NaN stays NaN);
 *              f32:  v;
 *              i32:  v truncated toward zero, saturated to [INT32_MIN, INT32_MAX], NaN -> 0
 *                                                                          pz_fill_bits
 * where i is the element's flat (row-major) index in the FULL, unsharded tensor (shape
 * full_ne), not in the rank's shard: pz_fill_row_base maps a rank's local row to it, so every
 * TP degree sees the same full weights. u(i) is output number i+1 of the SplitMix64 generator
 * seeded with key. The backends choose (scale, offset): weights use (init_scale, init_offset);
 * "*kv_cache" STATE tensors (MLA, replicated) use (init_scale or 1 when it is 0, 0) with rank 0's
 * mapping; "*.k_cache" / "*.v_cache" STATE tensors (GQA, sharded by kv head) use the same
 * coefficients with their own shard mapping. Tensors with parts or replicated slices (core/ir.h
 * pz_tensor.n_parts) map local to full indices by pz_fill_index, which equals pz_fill_row_base
 * (+ the column) for every tensor without them.
 *
 * SplitMix64: Steele, Lea, Flood, "Fast splittable pseudorandom number generators", OOPSLA 2014,
 * constants of the reference implementation (prng.di.unimi.it/splitmix64.c). FNV-1a 64-bit:
 * offset basis 0xcbf29ce484222325, prime 0x100000001b3.
 *
 * Every function is `static inline` and PZ_FILL_HD (__host__ __device__ under nvcc, nothing in
 * plain C). On the device the rounding is explicit (__fmul_rn / __fadd_rn: nvcc fuses a*b+c by
 * default); host code relies on -ffp-contract=off, which CMakeLists.txt sets for all C. */
#include <stdint.h>
#include <string.h>
#include "core/dtype.h"

#if defined(__CUDACC__)
#define PZ_FILL_HD __host__ __device__
#else
#define PZ_FILL_HD
#endif

/* SplitMix64's output function (the finalizer applied after adding the golden gamma). */
PZ_FILL_HD static inline uint64_t pz_fill_splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/* Key of tensor `name` (NUL-terminated, bytes as unsigned) under `seed`:
 * splitmix64(seed ^ splitmix64(FNV-1a-64(name))). */
PZ_FILL_HD static inline uint64_t pz_fill_name_key(uint64_t seed, const char *name) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (const unsigned char *s = (const unsigned char *)name; *s; s++) h = (h ^ *s) * 0x100000001b3ull;
  return pz_fill_splitmix64(seed ^ pz_fill_splitmix64(h));
}

/* u in [-1, 1) for full flat index `idx` of the tensor with key `key`. The scaled integer is
 * exact (24 bits times a power of two), so the one rounding is that of the subtraction. */
PZ_FILL_HD static inline float pz_fill_unit(uint64_t key, uint64_t idx) {
  uint64_t h = pz_fill_splitmix64(key + idx * 0x9e3779b97f4a7c15ull);
#ifdef __CUDA_ARCH__
  return __fsub_rn(__fmul_rn((float)(h >> 40), 1.0f / 8388608.0f), 1.0f);
#else
  return (float)(h >> 40) * (1.0f / 8388608.0f) - 1.0f;
#endif
}

/* offset + scale * u(key, idx) in f32, multiply and add rounded separately (no FMA). */
PZ_FILL_HD static inline float pz_fill_value(uint64_t key, uint64_t idx, float scale, float offset) {
  float u = pz_fill_unit(key, idx);
#ifdef __CUDA_ARCH__
  return __fadd_rn(offset, __fmul_rn(scale, u));
#else
  return offset + scale * u;
#endif
}

/* The IEEE-754 bit pattern of v, on the host and the device. */
PZ_FILL_HD static inline uint32_t pz_fill_f32_bits(float v) {
  uint32_t u;
#ifdef __CUDA_ARCH__
  u = __float_as_uint(v);
#else
  memcpy(&u, &v, 4);
#endif
  return u;
}

/* bf16 bits of v: round to nearest even; a NaN stays NaN (quiet bit 0x40 set, sign and upper
 * payload kept); values beyond the bf16 range round to +-inf. The same as core/dtype.h's
 * pz_f32_to_bf16 (tests/test_fill_rule.c checks that), usable on the device. */
PZ_FILL_HD static inline uint16_t pz_fill_bf16_bits(float v) {
  uint32_t u = pz_fill_f32_bits(v);
  if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu)) return (uint16_t)((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

/* v truncated toward zero, saturated to the int32 range, NaN -> 0 (the PTX cvt.rzi.s32.f32
 * rule, spelt out on the host where a plain cast out of range is undefined). */
PZ_FILL_HD static inline int32_t pz_fill_i32(float v) {
#ifdef __CUDA_ARCH__
  return __float2int_rz(v);
#else
  if (v != v) return 0;
  if (v >= 2147483648.0f) return INT32_MAX;
  if (v <= -2147483648.0f) return INT32_MIN;
  return (int32_t)v;
#endif
}

/* Stored bits of pz_fill_value(key, idx, scale, offset) in `dtype` (a pz_dtype): bf16 in the
 * low 16 bits, f32 as its IEEE-754 pattern, i32 (any other dtype) as its two's complement. */
PZ_FILL_HD static inline uint32_t pz_fill_bits(uint64_t key, uint64_t idx, float scale, float offset, int dtype) {
  float v = pz_fill_value(key, idx, scale, offset);
  return dtype == PZ_BF16 ? (uint32_t)pz_fill_bf16_bits(v) : dtype == PZ_F32 ? pz_fill_f32_bits(v) : (uint32_t)pz_fill_i32(v);
}

/* Full flat index of the first element of local row `row` of a rank's shard, the shard seen as
 * rows = all dims but the last (ne[0..ndim-1], outermost first, contiguous). full_ne is the
 * unsharded shape; dim shard_dim (-1: none) of rank `rank` starts at rank * ne[shard_dim] in
 * it. Along the last dim the full index then advances by 1 per element. */
PZ_FILL_HD static inline int64_t pz_fill_row_base(int ndim, const int64_t *ne, const int64_t *full_ne, int shard_dim,
                                                  int rank, int64_t row) {
  const int last = ndim - 1;
  const int64_t w = ne[last];
  int64_t full = last == shard_dim ? (int64_t)rank * w : 0, mult = full_ne[last];
  int64_t rem = row;
  for (int d = last - 1; d >= 0; d--) {
    const int64_t n = ne[d];
    int64_t cd = rem % n;
    rem /= n;
    if (d == shard_dim) cd += (int64_t)rank * n;
    full += cd * mult;
    mult *= full_ne[d];
  }
  return full;
}

/* Full coordinate along the shard dim of local coordinate c (0 <= c < ne) of rank `rank` of tp,
 * for a dim of local extent ne and full extent full cut into parts (core/ir.h pz_tensor.n_parts:
 * n_parts 0 = one part (ne, full)): with c in part p at offset o, part p starting at F_p of the
 * full dim (the sum of part_full[0..p-1]) and rep_p = tp * part_ne[p] / part_full[p] ranks
 * sharing each slice of it (1 when part_ne[p] * tp <= part_full[p]):
 *   F_p + (rank / rep_p) * part_ne[p] + o.
 * One part without replication gives rank * ne + c (pz_fill_row_base's rule). */
PZ_FILL_HD static inline int64_t pz_fill_shard_coord(int64_t c, int rank, int tp, int64_t ne, int64_t full, int n_parts,
                                                     const int64_t *part_ne, const int64_t *part_full) {
  const int np = n_parts > 0 ? n_parts : 1;
  int64_t lo = 0, flo = 0;
  for (int p = 0; p < np; p++) {
    const int64_t pn = n_parts > 0 ? part_ne[p] : ne, pf = n_parts > 0 ? part_full[p] : full;
    if (c < lo + pn || p == np - 1) {
      const int64_t rep = pn * tp > pf && pf > 0 ? pn * tp / pf : 1;
      return flo + ((int64_t)rank / rep) * pn + (c - lo);
    }
    lo += pn;
    flo += pf;
  }
  return c;
}

/* Whether pz_fill_index must map each element of a row along the last dim (1: that dim is the shard dim and
 * is cut into parts or replicated over ranks); 0: a row's elements follow its first one's index by +1, so
 * one pz_fill_index per row serves. The rule every filler of the shard mapping uses (cpu_exec.c, fill.cu,
 * model/quant_synth.c). */
PZ_FILL_HD static inline int pz_fill_last_dim_mapped(int ndim, const int64_t *ne, const int64_t *full_ne, int shard_dim,
                                                     int tp, int n_parts) {
  const int last = ndim - 1;
  return shard_dim == last && (n_parts >= 2 || ne[last] * tp > full_ne[last]);
}

/* Full flat index of element (row, col) of a rank's shard seen as [rows, ne[ndim-1]] (rows = all
 * dims but the last, outermost first, contiguous): every coordinate mapped to the full tensor
 * (shape full_ne) by pz_fill_shard_coord along shard_dim (-1: none), unchanged along the others. */
PZ_FILL_HD static inline int64_t pz_fill_index(int ndim, const int64_t *ne, const int64_t *full_ne, int shard_dim, int rank,
                                               int tp, int n_parts, const int64_t *part_ne, const int64_t *part_full,
                                               int64_t row, int64_t col) {
  const int last = ndim - 1;
  int64_t full = last == shard_dim
                     ? pz_fill_shard_coord(col, rank, tp, ne[last], full_ne[last], n_parts, part_ne, part_full)
                     : col;
  int64_t mult = full_ne[last], rem = row;
  for (int d = last - 1; d >= 0; d--) {
    const int64_t n = ne[d];
    int64_t cd = rem % n;
    rem /= n;
    if (d == shard_dim) cd = pz_fill_shard_coord(cd, rank, tp, n, full_ne[d], n_parts, part_ne, part_full);
    full += cd * mult;
    mult *= full_ne[d];
  }
  return full;
}

#endif
