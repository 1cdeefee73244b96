/* Summary statistics shared by the timing code: the one median rule of the project. */
#ifndef PZ_CORE_STATS_H
#define PZ_CORE_STATS_H
#ifdef __cplusplus
extern "C" {
#endif

/* Sorts v[0..n) ascending in place and returns its median: the middle element for odd n, the
 * mean of the two middle elements for even n (so {1, 2, 3, 10} gives 2.5). n must be >= 1 (0 is
 * returned for n < 1). Every median in the project (benchmarks, the compare harness, the
 * per-node profile, the fill-gate calibration, pz_cuda_exec_time_step) is this function.
 * NaNs are not expected (they are timings); they sort as neither smaller nor larger. */
double pz_median(double *v, int n);

/* One timed record of a queue (a kernel or memset of a CUDA stream): [start, end) in ns on one
 * clock; lane: the queue (the caller folds device and stream into it); idx: the caller's own. */
typedef struct pz_interval {
  unsigned long long lane, start, end;
  unsigned long long own; /* out: see pz_interval_own */
  unsigned long idx;
} pz_interval;

/* Sorts v[0..n) by (lane, start, end) and sets each v[i].own = end - max(start, e), e the latest
 * end of the records of its lane sorted before it (0 when e >= end): the time a record ran after
 * everything ahead of it in its queue had finished. A kernel launched with programmatic dependent
 * launch starts while the kernel ahead of it runs and waits for it in-kernel, so its record spans
 * that wait; its own time does not. For records that never overlap, own = end - start. No errors:
 * v NULL or n 0 does nothing. O(n log n) (qsort); the rule is ours, not taken from elsewhere. */
void pz_interval_own(pz_interval *v, unsigned long n);

#ifdef __cplusplus
}
#endif
#endif
