/* Minimal test harness: CHECK macros that report file:line and count failures. */
#ifndef PZ_TEST_H
#define PZ_TEST_H
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
static int pz_test_failures = 0; /* failed checks so far in this test binary */
/* stdout line-buffered from the start, as stderr is unbuffered: a test killed by a signal (seen under
 * compute-sanitizer racecheck) still leaves every line it printed in a redirected log. */
__attribute__((constructor)) static void pz_test_line_buffered(void) { setvbuf(stdout, NULL, _IOLBF, 0); }
/* CHECK(cond): counts a failure and prints file:line and the condition when cond is false.
 * CHECK_OK(call) / CHECK_ST(call, want): the pz_status of call must be PZ_OK / want (prints the
 * status strings and pz_last_error()). CHECK_NEAR(a, b, tol): |a - b| <= tol in double (NaN
 * fails). TEST_DONE(): returns 1 from main when any check failed, else prints "all checks
 * passed" and returns 0. Failures never stop the test: every check runs. */
#define CHECK(cond) do { if (!(cond)) { fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); pz_test_failures++; } } while (0)
#define CHECK_OK(call) do { pz_status s_ = (call); if (s_ != PZ_OK) { fprintf(stderr, "%s:%d: %s -> %s: %s\n", __FILE__, __LINE__, #call, pz_status_string(s_), pz_last_error()); pz_test_failures++; } } while (0)
#define CHECK_ST(call, want) do { pz_status s_ = (call); if (s_ != (want)) { fprintf(stderr, "%s:%d: %s -> %s, want %s (%s)\n", __FILE__, __LINE__, #call, pz_status_string(s_), pz_status_string(want), pz_last_error()); pz_test_failures++; } } while (0)
#define CHECK_NEAR(a, b, tol) do { double a_ = (a), b_ = (b); if (!(fabs(a_ - b_) <= (tol))) { fprintf(stderr, "%s:%d: %s = %.9g, want %.9g (tol %g)\n", __FILE__, __LINE__, #a, a_, b_, (double)(tol)); pz_test_failures++; } } while (0)
/* out = the directory of source file `file` + "/" + rel: the repository's files (golden data,
 * configs, bench results, scripts) found from a test's own source location. PZ_TEST_PATH passes
 * the calling file's __FILE__ (absolute under CMake) and sizeof out. */
static inline void pz_test_path_from(const char *file, const char *rel, char *out, size_t len) {
  const char *slash = strrchr(file, '/');
  if (slash) snprintf(out, len, "%.*s/%s", (int)(slash - file), file, rel);
  else snprintf(out, len, "./%s", rel);
}
#define PZ_TEST_PATH(out, rel) pz_test_path_from(__FILE__, (rel), (out), sizeof(out))
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
/* The factor every test deadline is multiplied by (a peer or rendezvous timeout, a host-side
 * wait, a bound on elapsed time): PZ_TEST_TIMEOUT_SCALE, a number in 1..10000 (default 1).
 * compute-sanitizer slows kernels 10-100x, so the sanitizer sweep of tools/device-check.sh sets
 * it (20 by default) to keep a slow but correct run from tripping a deadline. Anything else is
 * reported once on stderr and read as 1. */
static inline double pz_test_timeout_scale(void) {
  static double scale = 0;
  if (scale > 0) return scale;
  const char *v = getenv("PZ_TEST_TIMEOUT_SCALE");
  char *end = NULL;
  double x = v && *v ? strtod(v, &end) : 1.0;
  if (v && *v && (*end || !(x >= 1.0 && x <= 10000.0))) {
    fprintf(stderr, "PZ_TEST_TIMEOUT_SCALE=%s is not a number in 1..10000; using 1\n", v);
    x = 1.0;
  }
  return scale = x;
}
/* A deadline t (any unit) scaled by pz_test_timeout_scale(). */
static inline long long pz_test_timeout(long long t) { return (long long)((double)t * pz_test_timeout_scale()); }
#define TEST_DONE() do { if (pz_test_failures) { fprintf(stderr, "%d check(s) failed\n", pz_test_failures); return 1; } printf("all checks passed\n"); return 0; } while (0)
#endif
