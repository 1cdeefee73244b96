/* The balanced split-KV schedule of the MLA decode attention (core/kv_sched.h), checked with exact
 * integer arithmetic against the rules it promises: every slot within the partial scratch
 * (m * splits), every sequence cut into 1..max_splits whole-tile slices that cover its tokens
 * exactly once, no slice longer than the former per-sequence rule's longest chunk, the former
 * schedule exactly when all lengths are equal, and the best chunk that a brute-force scan finds.
 * Over mixed batches like the benchmark's (contexts drawn from [1024, 16384], m = 16, 4 splits) the
 * longest slice (which sets the grid's time when its CTAs fit one wave) must be 1.4x shorter than the
 * former rule's on average, and never longer. The one-wave-or-two choice (pz_kv_sched_waves) against
 * its rule recomputed by brute force: equal contexts always keep one wave. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include "core/kv_sched.h"
#include "pz_test.h"

#define MAXS 64 /* PZ_MLA_MAX_SPLITS */

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t next_u32(void) {
  rng = rng * 6364136223846793005ull + 1442695040888963407ull;
  return (uint32_t)(rng >> 33);
}

static int64_t ceil32(int64_t x, int64_t d) { return ((x + d - 1) / d + 31) / 32 * 32; }

/* sum of ceil(n_i / c) */
static int64_t count(const int32_t *pos, int m, int64_t c) {
  int64_t s = 0;
  for (int i = 0; i < m; i++) s += (pos[i] + 1 + c - 1) / c;
  return s;
}

/* The smallest multiple of 32 >= max(32, ceil32(n_max / MAXS)) whose slices fit m * splits. */
static int64_t best_chunk(const int32_t *pos, int m, int splits, int64_t n_max) {
  int64_t c = ceil32(n_max, MAXS);
  if (c < 32) c = 32;
  while (count(pos, m, c) > (int64_t)m * splits) c += 32;
  return c;
}

/* Checks one batch; returns C / best (1 when the rule holds). */
static double check(const int32_t *pos, int m, int splits, const char *what) {
  int32_t off[300];
  const int64_t c = pz_kv_sched(pos, m, splits, MAXS, off);
  int64_t n_max = 0;
  for (int i = 0; i < m; i++)
    if (pos[i] + 1 > n_max) n_max = pos[i] + 1;
  int bad = 0;
  if (c < 32 || c % 32) bad = 1;
  if (off[0] != 0 || off[m] > (int64_t)m * splits) bad = 2;
  for (int i = 0; i < m && !bad; i++) {
    const int64_t n = pos[i] + 1, cnt = off[i + 1] - off[i];
    if (cnt < 1 || cnt > MAXS) bad = 3;
    else if ((cnt - 1) * c >= n || cnt * c < n) bad = 4; /* the slices cover [0, n) exactly */
  }
  if (c > ceil32(n_max, splits) && c > 32 && c > ceil32(n_max, MAXS)) bad = 5; /* never longer than the former rule */
  const int64_t best = best_chunk(pos, m, splits, n_max);
  if (c < best) bad = 6; /* would not fit: best is the smallest that does */
  if (c != best) bad = 7; /* the bisection finds the smallest that fits */
  if (bad) {
    fprintf(stderr, "%s: m=%d splits=%d: rule %d broken (C=%lld, best %lld, slots %d of %d)\n", what, m, splits, bad,
            (long long)c, (long long)best, (int)off[m], m * splits);
    pz_test_failures++;
  }
  return (double)c / (double)best;
}

int main(void) {
  int32_t pos[300];
  /* equal lengths: the former schedule (chunk ceil32(n / splits), ceil(n / chunk) slices) */
  for (int t = 0; t < 2000; t++) {
    const int m = 1 + (int)(next_u32() % 256), splits = 1 + (int)(next_u32() % MAXS);
    const int n = 1 + (int)(next_u32() % 40000);
    for (int i = 0; i < m; i++) pos[i] = n - 1;
    int32_t off[300];
    const int64_t c = pz_kv_sched(pos, m, splits, MAXS, off);
    const int64_t former = ceil32(n, splits);
    if (c != former || off[1] != (n + former - 1) / former) {
      fprintf(stderr, "equal lengths n=%d m=%d splits=%d: C=%lld, former chunk %lld\n", n, m, splits, (long long)c,
              (long long)former);
      pz_test_failures++;
    }
    check(pos, m, splits, "equal");
  }
  /* random mixed batches, including single tokens and lengths past a tile boundary */
  double worst = 0, sum = 0;
  int trials = 0;
  for (int t = 0; t < 20000; t++) {
    const int m = 1 + (int)(next_u32() % 256), splits = 1 + (int)(next_u32() % MAXS);
    const int span = 1 + (int)(next_u32() % 32768);
    for (int i = 0; i < m; i++) pos[i] = (int32_t)(next_u32() % (uint32_t)span);
    if (t % 7 == 0) pos[next_u32() % (uint32_t)m] = 0;
    const double r = check(pos, m, splits, "mixed");
    if (splits >= 2) {
      if (r > worst) worst = r;
      sum += r;
      trials++;
    }
  }
  /* the benchmark's kind of batch: contexts uniform in [1024, 16384], m = 16, 4 splits */
  double gain_worst = 1e9, gain_sum = 0;
  for (int t = 0; t < 1000; t++) {
    int64_t n_max = 0;
    for (int i = 0; i < 16; i++) {
      pos[i] = 1023 + (int32_t)(next_u32() % 15361u);
      if (pos[i] + 1 > n_max) n_max = pos[i] + 1;
    }
    const int64_t c = pz_kv_sched(pos, 16, 4, MAXS, NULL);
    const double gain = (double)ceil32(n_max, 4) / (double)c;
    if (gain < gain_worst) gain_worst = gain;
    gain_sum += gain;
    check(pos, 16, 4, "bench-like");
  }
  CHECK(gain_worst >= 1.0 && gain_sum / 1000 >= 1.4);

  /* one wave or two (pz_kv_sched_waves): the one-wave chunk C1 (m * splits1 slots) unless the two-wave
   * chunk C2 with S2 slices is faster by the header's estimate, C1 > ceil(S2 / (m * splits1)) * C2;
   * C1, C2, S2 recomputed here by brute force */
  int two_waves = 0, waves_trials = 0;
  for (int t = 0; t < 20000; t++) {
    const int m = 1 + (int)(next_u32() % 256), splits = 2 + (int)(next_u32() % (MAXS - 1));
    const int splits1 = 1 + (int)(next_u32() % (uint32_t)(splits - 1));
    const int equal = t % 4 == 0, span = 1 + (int)(next_u32() % 32768);
    int64_t n_max = 0;
    for (int i = 0; i < m; i++) {
      pos[i] = equal && i ? pos[0] : (int32_t)(next_u32() % (uint32_t)span);
      if (pos[i] + 1 > n_max) n_max = pos[i] + 1;
    }
    int32_t off[300];
    const int64_t c = pz_kv_sched_waves(pos, m, splits, splits1, MAXS, off);
    const int64_t c1 = best_chunk(pos, m, splits1, n_max), c2 = best_chunk(pos, m, splits, n_max);
    const int64_t s2 = count(pos, m, c2), t1 = (int64_t)m * splits1;
    const int64_t want = c1 <= (s2 + t1 - 1) / t1 * c2 ? c1 : c2;
    if (c != want || off[m] != count(pos, m, c) || (c == c1 && off[m] > t1) || (equal && c != c1)) {
      fprintf(stderr, "waves: m=%d splits=%d splits1=%d%s: C=%lld, want %lld (C1 %lld, C2 %lld, S2 %lld), slots %d\n", m,
              splits, splits1, equal ? " equal" : "", (long long)c, (long long)want, (long long)c1, (long long)c2,
              (long long)s2, (int)off[m]);
      pz_test_failures++;
    }
    waves_trials++;
    two_waves += c != c1;
  }
  CHECK(two_waves > 0 && two_waves < waves_trials);
  /* splits1 == splits (one wave only: forced splits, versions 1 / 2, PREZERO_MLA_WAVES=1): pz_kv_sched */
  for (int t = 0; t < 2000; t++) {
    const int m = 1 + (int)(next_u32() % 256), splits = 1 + (int)(next_u32() % MAXS);
    const int span = 1 + (int)(next_u32() % 32768);
    for (int i = 0; i < m; i++) pos[i] = (int32_t)(next_u32() % (uint32_t)span);
    int32_t a[300], b[300];
    const int64_t ca = pz_kv_sched_waves(pos, m, splits, splits, MAXS, a), cb = pz_kv_sched(pos, m, splits, MAXS, b);
    if (ca != cb || memcmp(a, b, sizeof(int32_t) * (size_t)(m + 1))) {
      fprintf(stderr, "waves: splits1 == splits = %d, m=%d: C %lld, pz_kv_sched %lld\n", splits, m, (long long)ca, (long long)cb);
      pz_test_failures++;
    }
  }
  /* the benchmark's mixed batches take the second wave (m 128: 2 splits against 1; m 64: 4 against 2) */
  int bench_two[2] = {0, 0};
  for (int t = 0; t < 200; t++) {
    for (int v = 0; v < 2; v++) {
      const int m = v ? 64 : 128, splits = v ? 4 : 2;
      for (int i = 0; i < m; i++) pos[i] = 1023 + (int32_t)(next_u32() % 15361u);
      bench_two[v] += pz_kv_sched_waves(pos, m, splits, splits / 2, MAXS, NULL) != pz_kv_sched(pos, m, splits / 2, MAXS, NULL);
    }
  }
  CHECK(bench_two[0] == 200 && bench_two[1] == 200);
  /* tests/cuda/test_mla.c's m = 64 batches on version 3 (4 splits, 2 for one wave): the unequal one
   * takes two waves, the equal one (context 300) one, so that test runs both choices on the device */
  for (int i = 0; i < 64; i++) pos[i] = (int32_t)((i % 2 ? 1000 - 7 * i : 65 + i) - 1);
  CHECK(pz_kv_sched_waves(pos, 64, 4, 2, MAXS, NULL) == pz_kv_sched(pos, 64, 4, MAXS, NULL));
  CHECK(pz_kv_sched_waves(pos, 64, 4, 2, MAXS, NULL) != pz_kv_sched(pos, 64, 2, MAXS, NULL));
  for (int i = 0; i < 64; i++) pos[i] = 299;
  CHECK(pz_kv_sched_waves(pos, 64, 4, 2, MAXS, NULL) == pz_kv_sched(pos, 64, 2, MAXS, NULL));
  printf("kv schedule: 22000 batches, every rule held; C / best chunk: mean %.3f, worst %.3f (splits >= 2); "
         "contexts in [1024, 16384] at m = 16, 4 splits: the longest slice %.2fx shorter on average, %.2fx at worst; "
         "one wave or two: %d of %d batches took two\n",
         sum / trials, worst, gain_sum / 1000, gain_worst, two_waves, waves_trials);
  TEST_DONE();
}
