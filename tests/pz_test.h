/* Minimal test harness: CHECK macros that report file:line and count failures. */
#ifndef PZ_TEST_H
#define PZ_TEST_H
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
static int pz_test_failures = 0; /* failed checks so far in this test binary */
/* CHECK(cond): counts a failure and prints file:line and the condition when cond is false.
 * CHECK_OK(call) / CHECK_ST(call, want): the pz_status of call must be PZ_OK / want (prints the
 * status strings and pz_last_error()). CHECK_NEAR(a, b, tol): |a - b| <= tol in double (NaN
 * fails). TEST_DONE(): returns 1 from main when any check failed, else prints "all checks
 * passed" and returns 0. Failures never stop the test: every check runs. */
#define CHECK(cond) do { if (!(cond)) { fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); pz_test_failures++; } } while (0)
#define CHECK_OK(call) do { pz_status s_ = (call); if (s_ != PZ_OK) { fprintf(stderr, "%s:%d: %s -> %s: %s\n", __FILE__, __LINE__, #call, pz_status_string(s_), pz_last_error()); pz_test_failures++; } } while (0)
#define CHECK_ST(call, want) do { pz_status s_ = (call); if (s_ != (want)) { fprintf(stderr, "%s:%d: %s -> %s, want %s (%s)\n", __FILE__, __LINE__, #call, pz_status_string(s_), pz_status_string(want), pz_last_error()); pz_test_failures++; } } while (0)
#define CHECK_NEAR(a, b, tol) do { double a_ = (a), b_ = (b); if (!(fabs(a_ - b_) <= (tol))) { fprintf(stderr, "%s:%d: %s = %.9g, want %.9g (tol %g)\n", __FILE__, __LINE__, #a, a_, b_, (double)(tol)); pz_test_failures++; } } while (0)
/* The whole file at path, NUL-terminated (caller frees); its length in *len when len is not
 * NULL. NULL when the file cannot be opened, sized or read whole, or on allocation failure. */
static inline char *pz_test_slurp(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  long n = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
  char *b = n >= 0 && fseek(f, 0, SEEK_SET) == 0 ? (char *)malloc((size_t)n + 1) : NULL;
  if (b && fread(b, 1, (size_t)n, f) != (size_t)n) { free(b); b = NULL; }
  fclose(f);
  if (b) b[n] = 0;
  if (b && len) *len = (size_t)n;
  return b;
}
#define TEST_DONE() do { if (pz_test_failures) { fprintf(stderr, "%d check(s) failed\n", pz_test_failures); return 1; } printf("all checks passed\n"); return 0; } while (0)
#endif
