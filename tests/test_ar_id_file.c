/* The all-reduce unique id through a file (include/prezero/allreduce.h: pz_ar_unique_id_write_file
 * / pz_ar_unique_id_read_file), every build, no GPU:
 *  - write then read gives the same 256 bytes; a second write replaces the file;
 *  - a reader started before the writer (a forked child writes after 150 ms) gets the id;
 *  - no file: PZ_ERR_TIMEOUT after the timeout (timeout 0: at once), naming the path;
 *  - a short file, a long file and 256 bytes that are not an id: PZ_ERR_IO; NULL arguments and
 *    a negative timeout: PZ_ERR_INVALID_ARG; a non-id to write: PZ_ERR_INVALID_ARG; an
 *    unwritable path: PZ_ERR_IO naming it. Each message is one line. */
#define _POSIX_C_SOURCE 200809L
#define _DEFAULT_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "prezero/allreduce.h"
#include "pz_test.h"

static char dir[] = "/tmp/pz_test_idfile_XXXXXX";

static void write_raw(const char *path, const void *b, size_t n) {
  FILE *f = fopen(path, "wb");
  CHECK(f != NULL);
  if (!f) return;
  CHECK(fwrite(b, 1, n, f) == n);
  fclose(f);
}

static void one_line(const char *need) {
  const char *e = pz_last_error();
  CHECK(strstr(e, need) != NULL && strchr(e, '\n') == NULL);
  if (!strstr(e, need)) fprintf(stderr, "message [%s] lacks [%s]\n", e, need);
}

int main(void) {
  if (!mkdtemp(dir)) { perror("mkdtemp"); return 1; }
  char path[256], other[256];
  snprintf(path, sizeof path, "%s/id", dir);
  snprintf(other, sizeof other, "%s/id2", dir);
  pz_ar_unique_id a, b, got;
  CHECK_OK(pz_ar_get_unique_id(&a));
  CHECK_OK(pz_ar_get_unique_id(&b));
  /* round trip, and a replacement */
  CHECK_OK(pz_ar_unique_id_write_file(&a, path));
  memset(&got, 0, sizeof got);
  CHECK_OK(pz_ar_unique_id_read_file(path, 0, &got));
  CHECK(!memcmp(&got, &a, sizeof a));
  CHECK_OK(pz_ar_unique_id_write_file(&b, path));
  CHECK_OK(pz_ar_unique_id_read_file(path, 1000, &got));
  CHECK(!memcmp(&got, &b, sizeof b));
  /* the reader first: a child writes after 150 ms */
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    struct timespec nap = {0, 150000000};
    nanosleep(&nap, NULL);
    _exit(pz_ar_unique_id_write_file(&a, other) == PZ_OK ? 0 : 1);
  }
  CHECK(pid > 0);
  memset(&got, 0, sizeof got);
  CHECK_OK(pz_ar_unique_id_read_file(other, 20000, &got));
  CHECK(!memcmp(&got, &a, sizeof a));
  int ws = 0;
  CHECK(pid > 0 && waitpid(pid, &ws, 0) == pid && WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
  /* no file */
  char missing[300];
  snprintf(missing, sizeof missing, "%s/never", dir);
  CHECK_ST(pz_ar_unique_id_read_file(missing, 0, &got), PZ_ERR_TIMEOUT);
  one_line("never: not there after 0 ms; start rank 0 first");
  CHECK_ST(pz_ar_unique_id_read_file(missing, 30, &got), PZ_ERR_TIMEOUT);
  one_line("not there after 30 ms");
  /* files that do not hold an id */
  char junk[PZ_AR_UNIQUE_ID_BYTES + 1];
  memset(junk, 'x', sizeof junk);
  write_raw(other, &a, 100);
  CHECK_ST(pz_ar_unique_id_read_file(other, 0, &got), PZ_ERR_IO);
  one_line("not 256 bytes long");
  write_raw(other, junk, sizeof junk);
  CHECK_ST(pz_ar_unique_id_read_file(other, 0, &got), PZ_ERR_IO);
  one_line("not 256 bytes long");
  write_raw(other, junk, PZ_AR_UNIQUE_ID_BYTES);
  CHECK_ST(pz_ar_unique_id_read_file(other, 0, &got), PZ_ERR_IO);
  one_line("does not hold an all-reduce id");
  /* arguments */
  CHECK_ST(pz_ar_unique_id_read_file(NULL, 0, &got), PZ_ERR_INVALID_ARG);
  CHECK_ST(pz_ar_unique_id_read_file(path, 0, NULL), PZ_ERR_INVALID_ARG);
  CHECK_ST(pz_ar_unique_id_read_file(path, -1, &got), PZ_ERR_INVALID_ARG);
  CHECK_ST(pz_ar_unique_id_write_file(&a, NULL), PZ_ERR_INVALID_ARG);
  pz_ar_unique_id bogus;
  memset(&bogus, 'y', sizeof bogus);
  CHECK_ST(pz_ar_unique_id_write_file(&bogus, path), PZ_ERR_INVALID_ARG);
  char nodir[300];
  snprintf(nodir, sizeof nodir, "%s/no/such/dir/id", dir);
  CHECK_ST(pz_ar_unique_id_write_file(&a, nodir), PZ_ERR_IO);
  one_line("no/such/dir/id: cannot create");
  /* clean up */
  CHECK_OK(pz_ar_unique_id_remove(&a));
  CHECK_OK(pz_ar_unique_id_remove(&b));
  unlink(path);
  unlink(other);
  rmdir(dir);
  TEST_DONE();
}
