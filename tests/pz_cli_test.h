/* Running the prezero CLI from a test: one command line in; exit code and captured standard
 * output / error out. Shared by the CLI-level tests (test_cli, test_compare, test_bad_input). */
#ifndef PZ_CLI_TEST_H
#define PZ_CLI_TEST_H
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>

/* Reads at most cap-1 bytes of `path` into buf, NUL-terminated ("" when unreadable). */
static void slurp(const char *path, char *buf, size_t cap) {
  FILE *f = fopen(path, "r");
  size_t n = f ? fread(buf, 1, cap - 1, f) : 0;
  buf[n] = 0;
  if (f) fclose(f);
}

/* Runs `"<cli>" <args>` through the shell with stdout and stderr sent to dir/out and dir/err,
 * then reads them into out / err. Returns the exit code, or 128 + the signal number. */
static int pz_cli_run(const char *cli, const char *dir, const char *args, char *out, size_t out_cap, char *err,
                      size_t err_cap) {
  char cmd[4096], p[300];
  snprintf(cmd, sizeof cmd, "\"%s\" %s >%s/out 2>%s/err", cli, args, dir, dir);
  int rc = system(cmd);
  snprintf(p, sizeof p, "%s/out", dir);
  slurp(p, out, out_cap);
  snprintf(p, sizeof p, "%s/err", dir);
  slurp(p, err, err_cap);
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : 128 + (WIFSIGNALED(rc) ? WTERMSIG(rc) : 0);
}
#endif
