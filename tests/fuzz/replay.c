/* Replays files through one libFuzzer target's entry point as an ordinary test, no libFuzzer needed
 * (gcc or clang): linked with one tests/fuzz/fuzz_*.c by tests/fuzz/replay.cmake.
 *   test_fuzz_replay_<target> PATTERN...
 * Each PATTERN is a glob(3) pattern (the committed regression inputs, the target's seed corpus);
 * every regular file it matches is read into a buffer of exactly its size (ASan sees a read past
 * the end, as under libFuzzer) and passed to LLVMFuzzerTestOneInput, which must return 0. The
 * targets abort on a broken contract (an error without a message, an entry kept out of range),
 * so a failure is a non-zero return, a crash, a sanitizer report or a hang (more than 20 s on one
 * input). A pattern that matches no file, or an unreadable file, fails the test too: an empty
 * folder must not pass unnoticed. Each input's name is printed before it runs, so the last line
 * of a crashed run names the culprit. Exit 0 when all passed, 1 otherwise. */
#define _POSIX_C_SOURCE 200809L /* glob, alarm */
#include <glob.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void on_alarm(int sig) {
  (void)sig;
  static const char m[] = "replay: the last input named above ran more than 20 s (a hang)\n";
  if (write(2, m, sizeof m - 1) < 0) {}
  _exit(3);
}

/* Reads path whole into a buffer of exactly its size (at least 1 byte allocated); NULL on error. */
static uint8_t *read_exact(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  long sz = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
  uint8_t *b = sz >= 0 && fseek(f, 0, SEEK_SET) == 0 ? malloc(sz ? (size_t)sz : 1) : NULL;
  if (b && sz > 0 && fread(b, 1, (size_t)sz, f) != (size_t)sz) {
    free(b);
    b = NULL;
  }
  fclose(f);
  if (b) *n = (size_t)sz;
  return b;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s PATTERN...; give the glob patterns of the inputs to replay\n", argv[0]);
    return 1;
  }
  signal(SIGALRM, on_alarm);
  int failures = 0;
  long total = 0;
  for (int a = 1; a < argc; a++) {
    glob_t g;
    memset(&g, 0, sizeof g);
    int gr = glob(argv[a], 0, NULL, &g);
    if (gr != 0) {
      fprintf(stderr, "replay: %s %s; commit the inputs or fix the pattern in tests/fuzz/replay.cmake\n", argv[a],
              gr == GLOB_NOMATCH ? "matches no file" : "cannot be expanded");
      failures++;
      globfree(&g);
      continue;
    }
    for (size_t i = 0; i < g.gl_pathc; i++) {
      const char *p = g.gl_pathv[i];
      struct stat s;
      size_t n = 0;
      uint8_t *b = stat(p, &s) == 0 && S_ISREG(s.st_mode) ? read_exact(p, &n) : NULL;
      if (!b) {
        fprintf(stderr, "replay: %s is not a readable regular file; remove it or make it one\n", p);
        failures++;
        continue;
      }
      printf("replay: %s (%zu bytes)\n", p, n);
      fflush(stdout);
      alarm(20);
      int rc = LLVMFuzzerTestOneInput(b, n);
      alarm(0);
      free(b);
      total++;
      if (rc != 0) {
        fprintf(stderr, "replay: %s: the target returned %d, want 0\n", p, rc);
        failures++;
      }
    }
    printf("replay: %zu input(s) from %s\n", g.gl_pathc, argv[a]);
    globfree(&g);
  }
#ifdef PZ_REPLAY_SCRATCH
  /* The scratch file the target writes each input to (named by its pid), removed after the run. */
  char scratch[256];
  snprintf(scratch, sizeof scratch, PZ_REPLAY_SCRATCH, (int)getpid());
  remove(scratch);
#endif
  if (failures) {
    fprintf(stderr, "replay: %d failure(s) in %ld input(s)\n", failures, total);
    return 1;
  }
  printf("replay: all %ld input(s) passed\n", total);
  return 0;
}
