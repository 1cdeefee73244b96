/* CPU test of pz_median (core/stats.h): odd, even, one-element and duplicate cases, each
 * worked out by hand in its comment, and the in-place sort the callers rely on. */
#include "core/stats.h"
#include "pz_test.h"

int main(void) {
  double one[] = {4.25};
  CHECK(pz_median(one, 1) == 4.25); /* a single value is its own median */

  double odd[] = {9.0, 1.0, 5.0}; /* sorted 1 5 9 -> middle 5 */
  CHECK(pz_median(odd, 3) == 5.0);
  CHECK(odd[0] == 1.0 && odd[1] == 5.0 && odd[2] == 9.0); /* sorted in place */

  double odd7[] = {7, 3, 6, 1, 5, 2, 4}; /* sorted 1..7 -> element 4 (index 3) */
  CHECK(pz_median(odd7, 7) == 4.0);

  double two[] = {3.0, 1.0}; /* (1 + 3) / 2 = 2 */
  CHECK(pz_median(two, 2) == 2.0);

  double even[] = {10.0, 1.0, 3.0, 2.0}; /* sorted 1 2 3 10 -> (2 + 3) / 2 = 2.5, not the upper 3 */
  CHECK(pz_median(even, 4) == 2.5);
  CHECK(even[0] == 1.0 && even[1] == 2.0 && even[2] == 3.0 && even[3] == 10.0);

  double even6[] = {0.5, -1.0, 8.0, 2.0, 2.5, 100.0}; /* sorted -1 0.5 2 2.5 8 100 -> (2 + 2.5) / 2 = 2.25 */
  CHECK(pz_median(even6, 6) == 2.25);

  double dup_odd[] = {2.0, 7.0, 2.0, 7.0, 2.0}; /* sorted 2 2 2 7 7 -> 2 */
  CHECK(pz_median(dup_odd, 5) == 2.0);

  double dup_even[] = {5.0, 5.0, 1.0, 5.0}; /* sorted 1 5 5 5 -> (5 + 5) / 2 = 5 */
  CHECK(pz_median(dup_even, 4) == 5.0);

  double all_same[] = {3.5, 3.5, 3.5, 3.5, 3.5, 3.5}; /* (3.5 + 3.5) / 2 = 3.5 */
  CHECK(pz_median(all_same, 6) == 3.5);

  /* pz_interval_own: lane 1 holds A [0, 10), B [4, 15) (a PDL kernel started during A: own 15 - 10 = 5),
   * C [20, 26) (after a gap: its whole span, 6), D [21, 24) (inside C: own 0); lane 2's E [5, 9) is not cut by
   * lane 1 (own 4). Given out of order: the sort puts them by (lane, start, end); idx follows each. */
  pz_interval iv[] = {{1, 20, 26, 99, 2}, {2, 5, 9, 99, 4}, {1, 4, 15, 99, 1}, {1, 0, 10, 99, 0}, {1, 21, 24, 99, 3}};
  pz_interval_own(iv, 5);
  const unsigned long want_idx[] = {0, 1, 2, 3, 4};
  const unsigned long long want_own[] = {10, 5, 6, 0, 4};
  for (int i = 0; i < 5; i++) CHECK(iv[i].idx == want_idx[i] && iv[i].own == want_own[i]);
  pz_interval_own(iv, 0); /* nothing: no effect, no crash */
  pz_interval_own(NULL, 3);

  double none[] = {1.0};
  CHECK(pz_median(none, 0) == 0.0); /* n < 1: 0, the array untouched */
  CHECK(none[0] == 1.0);
  TEST_DONE();
}
