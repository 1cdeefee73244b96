/* Balanced split-KV schedule: the host reference (core/kv_sched.h). */
#include "core/kv_sched.h"

/* S(c) = sum over i of ceil(n_i / c). */
static int64_t slices(const int32_t *pos, int m, int64_t c) {
  int64_t s = 0;
  for (int i = 0; i < m; i++) s += ((int64_t)pos[i] + 1 + c - 1) / c;
  return s;
}

/* off[0..m]: sequence i's first slot, slices of c tokens. */
static void pz_kv_sched_offsets(const int32_t *pos, int m, int64_t c, int32_t *off) {
  off[0] = 0;
  for (int i = 0; i < m; i++) off[i + 1] = off[i] + (int32_t)(((int64_t)pos[i] + 1 + c - 1) / c);
}

int64_t pz_kv_sched(const int32_t *pos, int m, int splits, int max_splits, int32_t *off) {
  int64_t N = 0, n_max = 0;
  for (int i = 0; i < m; i++) {
    const int64_t n = (int64_t)pos[i] + 1;
    N += n;
    if (n > n_max) n_max = n;
  }
  int64_t ca, cb, ccur;
  pz_kv_sched_candidates(N, n_max, m, splits, max_splits, &ca, &cb, &ccur);
  const int64_t T = (int64_t)m * splits;
  int64_t c = ca;
  if (splits == 1) {
    c = ccur; /* T == m: one slice per sequence, the longest context's length */
  } else if (slices(pos, m, ca) > T) { /* bisection: S(lo) > T >= S(hi) */
    int64_t lo = ca, hi = cb;
    while (hi - lo > PZ_KV_SCHED_TILE) {
      const int64_t mid = pz_kv_sched_mid(lo, hi);
      if (slices(pos, m, mid) <= T) hi = mid;
      else lo = mid;
    }
    c = hi;
  }
  if (off) pz_kv_sched_offsets(pos, m, c, off);
  return c;
}

int64_t pz_kv_sched_waves(const int32_t *pos, int m, int splits, int splits1, int max_splits, int32_t *off) {
  int64_t c = pz_kv_sched(pos, m, splits, max_splits, NULL);
  if (splits1 >= 1 && splits1 < splits) {
    const int64_t c1 = pz_kv_sched(pos, m, splits1, max_splits, NULL);
    if (pz_kv_sched_one_wave(c1, c, slices(pos, m, c), (int64_t)m * splits1)) c = c1;
  }
  if (off) pz_kv_sched_offsets(pos, m, c, off);
  return c;
}
