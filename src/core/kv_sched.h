/* Balanced split-KV schedule of the MLA decode attention (CUDA op, kernels/mla_kernels.cu): how the
 * KV sequences of a batch are cut into slices, one CTA (per head group) each, when their lengths
 * differ. The host function below is the reference the device code follows step for step; its
 * test is tests/test_kv_sched.c.
 *
 * Input: n_i = pos_i + 1 >= 1 cached tokens of sequence i < m (1 for a padding row of a captured batch
 * size, mla.h `rows`: the device code passes its attention length, and so must a caller of the twin), `splits` >= 1 slices per sequence
 * on average (the op's automatic or forced split count), at most max_splits slices per sequence
 * (the combine's limit). Output: one chunk length C (tokens, a multiple of tile = 32, the
 * attention tile), sequence i cut into cnt_i = ceil(n_i / C) slices of C tokens (the last one
 * shorter), the slices numbered sequence by sequence: slot off_i + j is slice j of sequence i,
 * off_0 = 0, off_{i+1} = off_i + cnt_i, and off_m <= T = m * splits (the partial scratch).
 *
 * Why: the former rule cut every sequence into `splits` chunks of its own length, so in a batch of
 * mixed lengths the longest sequence's chunks (ceil(n_max / splits)) set the time of the whole
 * grid while the short ones' CTAs idle (MLA attention at TP 1, m = 16, contexts drawn from
 * [1024, 16384]: 12 % of HBM bandwidth, against 24 % at a uniform 8192; bench/results/attn_paged_h200).
 * One C for the batch gives long sequences more slices and short ones fewer, within the same T.
 *
 * Choice of C: the smallest multiple of 32 that is >= lb = max(32, ceil32(n_max / max_splits)) (so no
 * sequence gets more than max_splits slices) and whose slices fit, S(C) = sum ceil(n_i / C) <= T.
 * S falls as C grows, so a bisection over multiples of 32 finds it between
 *   ca = max(lb, ceil32(ceil(N / T))), N = sum n_i: no smaller C fits (S(c) >= N / c); taken at once
 *        when S(ca) <= T, as with equal lengths, where ca is the former rule's chunk exactly;
 *   cb = min(ccur, max(lb, ceil32(ceil(N / (T - m))))) (ccur when T == m), which always fits since
 *        S(c) <= N / c + m, and ccur = ceil32(ceil(n_max / splits)) (the former rule's longest chunk)
 *        fits too;
 * lo = ca, hi = cb; while hi - lo > 32: mid = lo + 32 floor((hi - lo) / 64); S(mid) <= T ? hi = mid :
 * lo = mid; C = hi (C = ca when S(ca) <= T). At most log2((cb - ca) / 32) + 1 evaluations of S.
 * So C <= ccur always: no slice is longer than the former rule's longest.
 *
 * One wave or two (pz_kv_sched_waves): where the op's split count fills two waves of resident CTAs
 * (`splits`, mla.h) rather than one (`splits1` < splits), the schedule is made for both slot counts,
 * T = m * splits and T1 = m * splits1, and the one-wave schedule (C1) is taken unless the two-wave one
 * (C2, S2 slices) is estimated faster: one wave runs in about C1 (all its slices at once), two in about
 * ceil(S2 / T1) * C2 (T1 slices at a time). Equal lengths always keep one wave (ceil(S2 / T1) * C2 is
 * a multiple of 32 >= n / splits1, so >= C1): a second wave only pays where it lets long contexts
 * spread over the slots that short ones leave (H200, Kimi-K2 TP 1, m 128, contexts in [1024, 16384]:
 * 850 -> 649 us; equal contexts at 8192 cost 2-4 % more with two waves, bench/results/attn_paged_h200). */
#ifndef PZ_CORE_KV_SCHED_H
#define PZ_CORE_KV_SCHED_H
#include <stdint.h>
#include "core/fill_rule.h" /* PZ_FILL_HD: __host__ __device__ under nvcc */
#ifdef __cplusplus
extern "C" {
#endif

#define PZ_KV_SCHED_TILE 32 /* tokens per attention tile: chunks are whole tiles (PZ_MLA_BN) */

/* ceil(x / d) rounded up to a multiple of the tile, for x >= 0, d >= 1. */
PZ_FILL_HD static inline int64_t pz_kv_sched_ceil_tiles(int64_t x, int64_t d) {
  const int64_t c = (x + d - 1) / d;
  return (c + PZ_KV_SCHED_TILE - 1) / PZ_KV_SCHED_TILE * PZ_KV_SCHED_TILE;
}

/* The three candidates of the header's rule from N = sum n_i, n_max, m, splits, max_splits.
 * *ccur >= *cb >= *ca >= lb. */
PZ_FILL_HD static inline void pz_kv_sched_candidates(int64_t N, int64_t n_max, int64_t m, int64_t splits,
                                                     int64_t max_splits, int64_t *ca, int64_t *cb, int64_t *ccur) {
  const int64_t T = m * splits;
  int64_t lb = pz_kv_sched_ceil_tiles(n_max, max_splits);
  if (lb < PZ_KV_SCHED_TILE) lb = PZ_KV_SCHED_TILE;
  int64_t cc = pz_kv_sched_ceil_tiles(n_max, splits);
  if (cc < lb) cc = lb;
  int64_t a = pz_kv_sched_ceil_tiles(N, T);
  if (a < lb) a = lb;
  if (a > cc) a = cc;
  int64_t b = cc;
  if (T > m) {
    b = pz_kv_sched_ceil_tiles(N, T - m);
    if (b < lb) b = lb;
    if (b > cc) b = cc;
  }
  if (b < a) b = a;
  *ca = a;
  *cb = b;
  *ccur = cc;
}

/* The bisection step of the header's rule: the next candidate strictly between lo and hi (hi - lo > 32,
 * both multiples of 32). */
PZ_FILL_HD static inline int64_t pz_kv_sched_mid(int64_t lo, int64_t hi) { return lo + (hi - lo) / 64 * 32; }

/* The one-wave-or-two choice of the header: 1 when the one-wave chunk c1 (at t1 = m * splits1 slots)
 * is no slower than the two-wave chunk c2 with s2 slices, i.e. c1 <= ceil(s2 / t1) * c2. */
PZ_FILL_HD static inline int pz_kv_sched_one_wave(int64_t c1, int64_t c2, int64_t s2, int64_t t1) {
  return c1 <= (s2 + t1 - 1) / t1 * c2;
}

/* The header's schedule for pos[0..m) (n_i = pos[i] + 1; every pos[i] >= 0), m >= 1, splits >= 1,
 * max_splits >= splits: returns C and, when off is not NULL, writes off[0..m] (m + 1 entries). */
int64_t pz_kv_sched(const int32_t *pos, int m, int splits, int max_splits, int32_t *off);
/* The same with the one-wave-or-two choice: splits1 (1 <= splits1 <= splits) slices per sequence
 * fill one wave; splits1 == splits is pz_kv_sched. off[m] <= m * splits1 when one wave is taken. */
int64_t pz_kv_sched_waves(const int32_t *pos, int m, int splits, int splits1, int max_splits, int32_t *off);

#ifdef __cplusplus
}
#endif
#endif
