/* The CLI's rank launcher (tools/cli_ranks.c) on the CPU, with children that do not touch a GPU:
 *  - two ranks that succeed: exit code 0, rank 0's stderr shown, the temporary directory gone;
 *  - rank 1 fails with a message: the launcher's code is rank 1's, its message printed once;
 *  - rank 0's stderr is streamed: rank 0 writes a line and waits (10 s at most) for a watcher
 *    process to see that line in the launcher's stderr; a launcher that printed it only at the end
 *    makes rank 0 give up and fail;
 *  - SIGTERM to the launcher while the ranks sleep: the ranks are ended within seconds, the code
 *    is 128 + 15, and the rendezvous directory is removed (no temporary files left behind). */
#define _POSIX_C_SOURCE 200809L
#define _DEFAULT_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "../tools/cli_ranks.c"
#include "pz_test.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Runs the launcher with stderr captured into err (cap bytes); kind selects what the ranks do. */
static int launch(int kind, char *err, size_t cap, char *id_path, size_t id_len, double *secs) {
  fflush(stderr);
  char tmpl[] = "/tmp/pz_test_cli_ranks_XXXXXX";
  int efd = mkstemp(tmpl);
  int saved = dup(STDERR_FILENO);
  dup2(efd, STDERR_FILENO);
  pid_t killer = -1;
  static char marker[64];
  snprintf(marker, sizeof marker, "%s.seen", tmpl);
  if (kind == 3) { /* the watcher: creates the marker once the launcher's stderr holds rank 0's line */
    killer = fork();
    if (killer == 0) {
      for (int i = 0; i < 1000; i++) {
        size_t n = 0;
        char *txt = pz_test_slurp(tmpl, &n);
        const int seen = txt && strstr(txt, "rank 0 live line") != NULL;
        free(txt);
        if (seen) {
          FILE *m = fopen(marker, "w");
          if (m) fclose(m);
          _exit(0);
        }
        usleep(10000);
      }
      _exit(1);
    }
  }
  if (kind == 2) { /* a separate process sends the launcher SIGTERM after 0.5 s */
    pid_t me = getpid();
    killer = fork();
    if (killer == 0) {
      usleep(500000);
      kill(me, SIGTERM);
      _exit(0);
    }
  }
  int rc = -1;
  double t0 = now_s();
  int r = pz_cli_fork_ranks("test", 2, 5.0, id_path, id_len, &rc);
  if (r >= 0) { /* a rank */
    if (kind == 0) {
      fprintf(stderr, "rank %d progress\n", r);
      _exit(0);
    }
    if (kind == 1) {
      if (r == 1) {
        fprintf(stderr, "prezero test: rank one broke\n");
        _exit(3);
      }
      _exit(0);
    }
    if (kind == 3) {
      if (r == 1) _exit(0);
      fprintf(stderr, "rank 0 live line\n");
      for (int i = 0; i < 1000; i++) {
        if (access(marker, F_OK) == 0) _exit(0);
        usleep(10000);
      }
      _exit(9); /* never seen while running: not streamed */
    }
    sleep(30); /* kind 2: until the launcher ends it */
    _exit(0);
  }
  *secs = now_s() - t0;
  if (killer > 0) waitpid(killer, NULL, 0);
  unlink(marker);
  fflush(stderr);
  dup2(saved, STDERR_FILENO);
  close(saved);
  FILE *f = fdopen(efd, "rb");
  fseek(f, 0, SEEK_SET);
  size_t k = fread(err, 1, cap - 1, f);
  err[k] = 0;
  fclose(f);
  unlink(tmpl);
  return rc;
}

static int dir_of_gone(const char *id_path) {
  char d[256];
  snprintf(d, sizeof d, "%s", id_path);
  char *slash = strrchr(d, '/');
  if (slash) *slash = 0;
  struct stat st;
  return stat(d, &st) != 0;
}

int main(void) {
  char err[8192], id[256];
  double s = 0;
  int rc = launch(0, err, sizeof err, id, sizeof id, &s);
  CHECK(rc == 0);
  CHECK(strstr(err, "rank 0 progress") != NULL);
  CHECK(strstr(err, "rank 1 progress") == NULL); /* only rank 0 speaks when all succeed */
  CHECK(dir_of_gone(id));

  rc = launch(1, err, sizeof err, id, sizeof id, &s);
  CHECK(rc == 3);
  const char *m = strstr(err, "rank 1: prezero test: rank one broke");
  CHECK(m != NULL);
  CHECK(m && strstr(m + strlen("rank 1: prezero test: rank one broke"), "rank one broke") == NULL); /* once */
  CHECK(dir_of_gone(id));

  rc = launch(2, err, sizeof err, id, sizeof id, &s);
  const double stop_s = s;
  const int stop_rc = rc;
  CHECK(rc == 128 + SIGTERM);
  CHECK(s < 10.0);
  CHECK(strstr(err, "stopped by signal 15") != NULL);
  CHECK(dir_of_gone(id));
  rc = launch(3, err, sizeof err, id, sizeof id, &s);
  CHECK(rc == 0); /* 9: rank 0's line did not reach the launcher's stderr while rank 0 ran */
  CHECK(strstr(err, "rank 0 live line") != NULL);
  CHECK(dir_of_gone(id));
  printf("launcher: ok, failure (code 3), SIGTERM after %.2f s (code %d), rank 0 streamed\n", stop_s, stop_rc);
  TEST_DONE();
}
