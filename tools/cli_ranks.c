/* The CLI's rank launcher (cli_ranks.h). */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif
#ifndef _DEFAULT_SOURCE
#define _DEFAULT_SOURCE
#endif
#include "cli_ranks.h"
#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "prezero/allreduce.h"

/* The signal that asked the launcher to stop (Ctrl-C, SIGTERM, SIGHUP), 0 while none did. */
static volatile sig_atomic_t g_stop;
static void on_stop(int sig) { g_stop = sig; }

/* Copies what rank 0 appended to its stderr file since the last call to the launcher's stderr. */
static void stream_rank0(int fd) {
  char buf[4096];
  ssize_t k;
  while (fd >= 0 && (k = read(fd, buf, sizeof buf)) > 0) fwrite(buf, 1, (size_t)k, stderr);
  fflush(stderr);
}

static double ranks_now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int pz_cli_fork_ranks(const char *cmd, int n, double grace_s, char *id_path, size_t len, int *rc) {
  *rc = 1;
  if (n < 2 || n > PZ_AR_MP_MAX_WORLD) {
    fprintf(stderr, "prezero %s: --procs %d is out of range; use --procs 2..%d\n", cmd, n, PZ_AR_MP_MAX_WORLD);
    *rc = 2;
    return -1;
  }
  char dir[] = "/tmp/prezero-ranks-XXXXXX";
  if (!mkdtemp(dir)) {
    fprintf(stderr, "prezero %s: cannot make a temporary directory for the ranks' rendezvous (%s); check /tmp\n", cmd,
            strerror(errno));
    return -1;
  }
  snprintf(id_path, len, "%s/id", dir);
  fflush(stdout);
  fflush(stderr);
  /* Every rank's stderr file exists before any fork, so rank 0's can be streamed from the start. */
  for (int r = 0; r < n; r++) {
    char ep[64];
    snprintf(ep, sizeof ep, "%s/err%d", dir, r);
    int fd = open(ep, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd >= 0) close(fd);
  }
  char ep0[64];
  snprintf(ep0, sizeof ep0, "%s/err0", dir);
  int fd0 = open(ep0, O_RDONLY);
  /* Ctrl-C / SIGTERM / SIGHUP are held from before the first fork until the handlers below are in
   * place (the children take the default action again), so no signal orphans a started rank. */
  sigset_t stops, old_mask;
  sigemptyset(&stops);
  sigaddset(&stops, SIGINT);
  sigaddset(&stops, SIGTERM);
  sigaddset(&stops, SIGHUP);
  sigprocmask(SIG_BLOCK, &stops, &old_mask);
  pid_t pid[PZ_AR_MP_MAX_WORLD];
  int started = 0;
  for (int r = 0; r < n; r++) {
    pid[r] = fork();
    if (pid[r] < 0) {
      fprintf(stderr, "prezero %s: cannot start rank %d (fork: %s)\n", cmd, r, strerror(errno));
      break;
    }
    if (pid[r] == 0) {
      if (fd0 >= 0) close(fd0);
      signal(SIGINT, SIG_DFL);
      signal(SIGTERM, SIG_DFL);
      signal(SIGHUP, SIG_DFL);
      sigprocmask(SIG_SETMASK, &old_mask, NULL);
      if (r > 0) {
        int fd = open("/dev/null", O_WRONLY);
        if (fd >= 0) {
          dup2(fd, STDOUT_FILENO);
          close(fd);
        }
      }
      /* stderr into dir/err<r>: the parent prints what explains a failure, once */
      char ep[64];
      snprintf(ep, sizeof ep, "%s/err%d", dir, r);
      int fd = open(ep, O_WRONLY | O_CREAT | O_APPEND, 0600);
      if (fd >= 0) {
        dup2(fd, STDERR_FILENO);
        close(fd);
      }
      return r;
    }
    started++;
  }
  /* Ctrl-C / SIGTERM / SIGHUP: stop the ranks, then clean up below (the ranks get the terminal's
   * SIGINT themselves too; SIGTERM reaches those started with their own environment) */
  g_stop = 0;
  struct sigaction sa, old_int, old_term, old_hup;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_stop;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, &old_int);
  sigaction(SIGTERM, &sa, &old_term);
  sigaction(SIGHUP, &sa, &old_hup);
  sigprocmask(SIG_SETMASK, &old_mask, NULL);
  double stop_at = -1.0;
  /* rank 0's stderr (fd0) is shown as it is written (progress lines), and kept for the summary */
  int code[PZ_AR_MP_MAX_WORLD], alive[PZ_AR_MP_MAX_WORLD], left = started;
  for (int r = 0; r < started; r++) {
    alive[r] = 1;
    code[r] = 0;
  }
  double failed_at = started < n ? ranks_now_s() : -1.0;
  while (left > 0) {
    int ws = 0;
    pid_t p = waitpid(-1, &ws, WNOHANG);
    if (p > 0) {
      for (int r = 0; r < started; r++)
        if (alive[r] && pid[r] == p) {
          alive[r] = 0;
          left--;
          code[r] = WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + (WIFSIGNALED(ws) ? WTERMSIG(ws) : 0);
          if (code[r] != 0 && failed_at < 0) failed_at = ranks_now_s();
        }
      continue;
    }
    if (g_stop && stop_at < 0) {
      stop_at = ranks_now_s();
      for (int r = 0; r < started; r++)
        if (alive[r]) kill(pid[r], SIGTERM);
    }
    if ((failed_at >= 0 && ranks_now_s() - failed_at > grace_s) || (stop_at >= 0 && ranks_now_s() - stop_at > 2.0))
      for (int r = 0; r < started; r++)
        if (alive[r]) kill(pid[r], SIGKILL);
    stream_rank0(fd0);
    struct timespec ts = {0, 5000000};
    nanosleep(&ts, NULL);
  }
  stream_rank0(fd0);
  const bool streamed = fd0 >= 0;
  if (fd0 >= 0) close(fd0);
  /* Every rank's messages, for the summary: when another rank failed and rank 0 did not say why
   * itself (it succeeded, or only waited for a peer), the first such rank's. */
  char *msg[PZ_AR_MP_MAX_WORLD] = {0};
  for (int r = 0; r < started; r++) {
    char ep[64];
    snprintf(ep, sizeof ep, "%s/err%d", dir, r);
    FILE *f = fopen(ep, "rb");
    if (f) {
      char buf[4096];
      size_t k = fread(buf, 1, sizeof buf - 1, f);
      buf[k] = 0;
      fclose(f);
      msg[r] = strdup(buf);
    }
    unlink(ep);
  }
  for (int r = started; r < n; r++) { /* the files of ranks that never started */
    char ep[64];
    snprintf(ep, sizeof ep, "%s/err%d", dir, r);
    unlink(ep);
  }
  if (!streamed && msg[0]) fputs(msg[0], stderr); /* rank 0's file could not be read as it grew */
  /* Another rank's failure is shown when it says something rank 0 did not (the cause behind a
   * timeout or an out-of-step exchange); the same refusal on every rank (no GPU) is shown once. */
  for (int r = 1; r < started; r++) {
    if (code[r] == 0) continue;
    if (!msg[r] || !msg[r][0]) {
      if (code[0] == 0) fprintf(stderr, "prezero %s: rank %d failed (exit %d)\n", cmd, r, code[r]);
      continue;
    }
    if (msg[0] && !strcmp(msg[0], msg[r])) continue;
    bool seen = false;
    for (int q = 1; q < r && !seen; q++) seen = code[q] != 0 && msg[q] && !strcmp(msg[q], msg[r]);
    if (!seen) fprintf(stderr, "rank %d: %s", r, msg[r]);
  }
  for (int r = 0; r < started; r++) free(msg[r]);
  /* rank 0 removes the rendezvous when it ends normally; after a crash the id is still here */
  pz_ar_unique_id stale;
  if (pz_ar_unique_id_read_file(id_path, 1, &stale) == PZ_OK) pz_ar_unique_id_remove(&stale);
  unlink(id_path);
  rmdir(dir);
  sigaction(SIGINT, &old_int, NULL); /* only now: a second Ctrl-C during the clean-up is held off too */
  sigaction(SIGTERM, &old_term, NULL);
  sigaction(SIGHUP, &old_hup, NULL);
  if (g_stop) {
    fprintf(stderr, "prezero %s: stopped by signal %d; the ranks were ended and their rendezvous removed\n", cmd,
            (int)g_stop);
    *rc = 128 + (int)g_stop;
    return -1;
  }
  *rc = started < n ? 1 : 0;
  for (int r = 0; r < started && *rc == 0; r++)
    if (code[r] != 0) {
      *rc = code[r];
      if (code[r] >= 128) fprintf(stderr, "prezero %s: rank %d ended by signal %d\n", cmd, r, code[r] - 128);
    }
  return -1;
}

int pz_cli_ranks_form(const char *cmd, bool procs_given, bool sep, long long rank, long long world, const char *id_file) {
  if (procs_given && sep) {
    fprintf(stderr, "prezero %s: --procs forks every rank itself; give either --procs N or --rank/--world/--id-file\n", cmd);
    return 2;
  }
  if (sep && (rank < 0 || world < 2 || world > PZ_AR_MP_MAX_WORLD || rank >= world || !id_file || !id_file[0])) {
    fprintf(stderr, "prezero %s: one process per rank needs --rank 0..W-1, --world W (2..%d) and --id-file F together; "
                    "see 'prezero %s --help'\n", cmd, PZ_AR_MP_MAX_WORLD, cmd);
    return 2;
  }
  return 0;
}
