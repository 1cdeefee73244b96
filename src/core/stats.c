/* Summary statistics: pz_median, pz_interval_own (see stats.h). */
#include "core/stats.h"
#include <stdlib.h>

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static int cmp_interval(const void *a, const void *b) {
  const pz_interval *x = a, *y = b;
  if (x->lane != y->lane) return x->lane < y->lane ? -1 : 1;
  if (x->start != y->start) return x->start < y->start ? -1 : 1;
  return x->end < y->end ? -1 : x->end > y->end;
}

void pz_interval_own(pz_interval *v, unsigned long n) {
  if (!v || n == 0) return;
  qsort(v, (size_t)n, sizeof *v, cmp_interval);
  unsigned long long e = 0; /* latest end so far in this lane */
  for (unsigned long i = 0; i < n; i++) {
    if (i == 0 || v[i].lane != v[i - 1].lane) e = 0;
    const unsigned long long from = v[i].start > e ? v[i].start : e;
    v[i].own = v[i].end > from ? v[i].end - from : 0;
    if (v[i].end > e) e = v[i].end;
  }
}

double pz_median(double *v, int n) {
  if (n < 1) return 0.0;
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}
