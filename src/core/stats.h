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

#ifdef __cplusplus
}
#endif
#endif
