/* The all-reduce unique id through a file (include/prezero/allreduce.h: pz_ar_unique_id_write_file
 * / pz_ar_unique_id_read_file), every build, no GPU:
 *  - write then read gives the same 256 bytes; a second write replaces the file; the file is
 *    mode 0600 and no temporary file is left beside it;
 *  - two threads of one process (one pid) rewriting the file 300 times each while it is read 2000
 *    times: every write succeeds and every read is one of the two ids, whole;
 *  - a reader started before the writer (a forked child writes after 150 ms) gets the id;
 *  - no file: PZ_ERR_TIMEOUT naming the path, at once for timeout 0 and not before 30 ms for 30;
 *  - a short file, a long file and 256 bytes that are not an id: PZ_ERR_IO; NULL arguments and
 *    a negative timeout: PZ_ERR_INVALID_ARG; a non-id to write: PZ_ERR_INVALID_ARG; an
 *    unwritable path: PZ_ERR_IO naming it; a FIFO or a directory to read: PZ_ERR_IO at once. Each
 *    message is one line. */
#define _POSIX_C_SOURCE 200809L
#define _DEFAULT_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <pthread.h>
#include <sys/stat.h>
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

/* A writer thread: rewrites path with id 300 times; bad counts failures. */
typedef struct { const pz_ar_unique_id *id; const char *path; int bad; } wjob;
static void *writer(void *p) {
  wjob *j = p;
  for (int i = 0; i < 300; i++) j->bad += pz_ar_unique_id_write_file(j->id, j->path) != PZ_OK;
  return NULL;
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
  struct stat sb;
  CHECK(stat(path, &sb) == 0 && (sb.st_mode & 0777) == 0600);
  int entries = 0;
  DIR *d = opendir(dir);
  for (struct dirent *e; d && (e = readdir(d));) entries += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
  if (d) closedir(d);
  CHECK(entries == 1); /* the id file only */
  /* concurrent writers (threads: one pid), one reader */
  pthread_t th[2];
  wjob jobs[2] = {{&a, path, 0}, {&b, path, 0}};
  for (int k = 0; k < 2; k++) CHECK(pthread_create(&th[k], NULL, writer, &jobs[k]) == 0);
  int torn = 0, reads_ok = 0;
  for (int i = 0; i < 2000; i++) {
    if (pz_ar_unique_id_read_file(path, 1000, &got) != PZ_OK) { torn++; continue; }
    reads_ok++;
    torn += memcmp(&got, &a, sizeof a) && memcmp(&got, &b, sizeof b);
  }
  for (int k = 0; k < 2; k++) CHECK(pthread_join(th[k], NULL) == 0 && jobs[k].bad == 0);
  CHECK(torn == 0 && reads_ok == 2000);
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
  struct timespec q0, q1;
  clock_gettime(CLOCK_MONOTONIC, &q0);
  CHECK_ST(pz_ar_unique_id_read_file(missing, 30, &got), PZ_ERR_TIMEOUT);
  clock_gettime(CLOCK_MONOTONIC, &q1);
  CHECK((q1.tv_sec - q0.tv_sec) * 1000.0 + (q1.tv_nsec - q0.tv_nsec) / 1e6 >= 30.0); /* it waited */
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
  /* a FIFO or a directory at the path: PZ_ERR_IO at once (a FIFO blocked the open past any timeout) */
  char fifo[300];
  snprintf(fifo, sizeof fifo, "%s/fifo", dir);
  CHECK(mkfifo(fifo, 0600) == 0);
  CHECK_ST(pz_ar_unique_id_read_file(fifo, 100, &got), PZ_ERR_IO);
  one_line("fifo: not a regular file; rank 0 writes it with pz_ar_unique_id_write_file");
  unlink(fifo);
  CHECK_ST(pz_ar_unique_id_read_file(dir, 100, &got), PZ_ERR_IO);
  one_line(": not a regular file; rank 0 writes it with pz_ar_unique_id_write_file");
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
