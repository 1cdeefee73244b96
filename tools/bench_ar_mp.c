/* prezero bench ar --procs N: the fused AR + residual + RMSNorm donor with one process per TP
 * rank, through the public multi-process API (include/prezero/allreduce.h: a unique id, one
 * communicator per process, CUDA IPC inboxes). The parent forks the ranks before any CUDA call
 * (a CUDA context does not survive fork); rank r runs on GPU r % (GPUs it sees), or on GPU 0 for
 * every rank with --one-gpu. Each rank captures `iters` launches into its own CUDA graph and times
 * `reps` replays with CUDA events; a row reports the slowest rank's median per launch (µs), with
 * and without the Kimi-K2 zero_fill. With several ranks on one GPU their kernels time-slice, so
 * each all-reduce waits for the other process's slice: the output says so, and those figures
 * measure the protocol, not the NVLink speed.
 * prezero bench ar --rank R --world W --id-file F: the same with each rank started by its own
 * command (a launcher, a shell loop, one per GPU), in any order within --timeout-s. Rank 0 removes
 * leftovers, makes the unique id, creates the results file F.results (O_EXCL; the `shared` struct
 * below with a copy of the id, mapped by every rank) and then writes the id to F
 * (pz_ar_unique_id_write_file); the other ranks wait until F and F.results hold the same id
 * (pz_ar_unique_id_read_file), map F.results and run. Rank 0 waits for every rank's results,
 * reports as --procs does and removes F, F.results and the rendezvous. */
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS, usleep */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "cli.h"
#include "bench_common.h"

#ifdef PZ_HAVE_CUDA
#include <cjson/cJSON.h>
#include <cuda_runtime.h>
#include "prezero/allreduce.h"

static const int64_t k_ms[] = {1, 4, 8, 16, 32, 64, 128};
#define NM 7
#define H_KIMI 7168
#define N_BASE (2112 + 64 / 2 * 192) /* qkv_a + q_b at TP 2 */
#define N_TOTAL (N_BASE + H_KIMI)    /* + o_proj */

/* Results shared by the ranks and the parent (anonymous shared mapping made before fork). */
typedef struct shared {
  pz_ar_unique_id id;                   /* --id-file form: this run's id (a stale results file shows another) */
  int ready;                            /* --id-file form: rank 0 has initialised the file (release store) */
  double us[PZ_AR_MP_MAX_WORLD][NM][2]; /* median µs per launch: [0] no fill, [1] full fill */
  int device[PZ_AR_MP_MAX_WORLD], ngpu[PZ_AR_MP_MAX_WORLD], done[PZ_AR_MP_MAX_WORLD];
  char name[64];
  char err[PZ_AR_MP_MAX_WORLD][256];
} shared;

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

#define RCU(call)                                                                                     \
  do {                                                                                                \
    cudaError_t e_ = (call);                                                                          \
    if (e_ != cudaSuccess) {                                                                          \
      snprintf(sh->err[r], sizeof sh->err[r], "%s: %s", #call, cudaGetErrorString(e_));               \
      return 1;                                                                                       \
    }                                                                                                 \
  } while (0)
#define RPZ(call)                                                                                     \
  do {                                                                                                \
    if ((call) != PZ_OK) {                                                                            \
      snprintf(sh->err[r], sizeof sh->err[r], "%s: %s", #call, pz_last_error());                      \
      return 1;                                                                                       \
    }                                                                                                 \
  } while (0)

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* One rank (a forked child): returns its exit code; results and errors go to sh. */
static int rank_main(shared *sh, int r, int world, int one_gpu, int iters, int reps, pz_ar_unique_id id, int timeout_ms) {
  int ngpu = 0;
  /* No driver or no GPU: say so with the fix, not the runtime's "driver version is insufficient". */
  if (cudaGetDeviceCount(&ngpu) != cudaSuccess || ngpu < 1) {
    (void)cudaGetLastError();
    snprintf(sh->err[r], sizeof sh->err[r], "no CUDA GPU is visible; run it on a machine with a CUDA GPU");
    return 1;
  }
  const int dev = one_gpu ? 0 : r % ngpu;
  sh->device[r] = dev;
  sh->ngpu[r] = ngpu;
  RCU(cudaSetDevice(dev));
  if (r == 0) {
    struct cudaDeviceProp prop;
    RCU(cudaGetDeviceProperties(&prop, dev));
    snprintf(sh->name, sizeof sh->name, "%.63s", prop.name);
  }
  pz_ar_comm_config cc = PZ_AR_COMM_CONFIG_INIT;
  cc.world = world;
  cc.rank = r;
  cc.device = dev;
  cc.max_m = 128;
  cc.max_H = H_KIMI;
  cc.timeout_ms = timeout_ms;
  pz_ar_comm *comm = NULL;
  RPZ(pz_ar_comm_init_rank_config(&comm, &cc, id));
  const size_t n = (size_t)128 * H_KIMI;
  float *part, *res, *fill;
  uint16_t *w, *x;
  RCU(cudaMalloc((void **)&part, n * 4));
  RCU(cudaMalloc((void **)&res, n * 4));
  RCU(cudaMalloc((void **)&fill, (size_t)128 * N_TOTAL * 4));
  RCU(cudaMalloc((void **)&w, H_KIMI * 2));
  RCU(cudaMalloc((void **)&x, n * 2));
  RCU(cudaMemset(part, 0, n * 4)); /* zeros: the residual stays finite over any number of launches */
  RCU(cudaMemset(res, 0, n * 4));
  RCU(cudaMemset(w, 0x3f, H_KIMI * 2)); /* bf16 0x3f3f, about 0.75 */
  cudaStream_t s;
  cudaEvent_t e0, e1;
  RCU(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  RCU(cudaEventCreate(&e0));
  RCU(cudaEventCreate(&e1));
  double t[64];
  if (reps > 64) reps = 64;
  for (int mi = 0; mi < NM; mi++)
    for (int kind = 0; kind < 2; kind++) {
      pz_ar_rmsnorm_params p = {.partial = part, .ld_partial = H_KIMI, .residual_in = res, .residual_out = res,
                                .ld_res = H_KIMI, .weight = w, .x_norm = x, .ld_x = H_KIMI, .eps = 1e-6f,
                                .m = k_ms[mi], .H = H_KIMI};
      if (kind) {
        p.fill_ptr = fill;
        p.fill_n_total = N_TOTAL;
        p.fill_n_base = N_BASE;
        p.fill_row_stride = N_TOTAL;
        p.fill_dtype = PZ_AR_FILL_F32;
        p.fill_all = 1;
      }
      cudaGraph_t g;
      cudaGraphExec_t ge;
      RCU(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
      pz_status st = PZ_OK;
      for (int i = 0; i < iters && st == PZ_OK; i++) st = pz_ar_rmsnorm(comm, &p, (pz_ar_stream)s);
      RCU(cudaStreamEndCapture(s, &g));
      RPZ(st);
      RCU(cudaGraphInstantiate(&ge, g, 0));
      RCU(cudaGraphDestroy(g));
      for (int k = 0; k <= reps; k++) { /* k = 0: warm-up */
        RCU(cudaEventRecord(e0, s));
        RCU(cudaGraphLaunch(ge, s));
        RCU(cudaEventRecord(e1, s));
        RCU(cudaEventSynchronize(e1));
        float ms;
        RCU(cudaEventElapsedTime(&ms, e0, e1));
        if (k > 0) t[k - 1] = ms * 1000.0 / iters;
      }
      RCU(cudaGraphExecDestroy(ge));
      RPZ(pz_ar_comm_check(comm, (pz_ar_stream)s));
      qsort(t, (size_t)reps, sizeof t[0], cmp_d);
      sh->us[r][mi][kind] = reps % 2 ? t[reps / 2] : 0.5 * (t[reps / 2 - 1] + t[reps / 2]);
    }
  cudaFree(part);
  cudaFree(res);
  cudaFree(fill);
  cudaFree(w);
  cudaFree(x);
  cudaStreamDestroy(s);
  pz_ar_comm_destroy(comm);
  __atomic_store_n(&sh->done[r], 1, __ATOMIC_RELEASE); /* after the results: a reader that sees it sees them */
  return 0;
}

static int report(shared *sh, int world, int iters, int reps, const char *json, const char *md, int argc, char **argv);

static double elapsed_since(double t0) { return now_s() - t0; }

/* --rank R --world W --id-file F (see the header). Ranks may start in any order within
 * timeout_s; a rank waits for this run's id file and results file (a leftover pair from an
 * earlier run holds another id, and is waited past). */
static int separate_rank(int rank, int world, const char *idf, int timeout_s, int one_gpu, int iters, int reps,
                         const char *json, const char *md, int argc, char **argv) {
  char res[1024];
  if (snprintf(res, sizeof res, "%s.results", idf) >= (int)sizeof res) {
    fprintf(stderr, "prezero bench ar: --id-file path too long; use a shorter one\n");
    return 2;
  }
  pz_ar_unique_id id;
  shared *sh = NULL;
  const double t0 = now_s();
  if (rank == 0) {
    unlink(idf); /* leftovers of an earlier run */
    unlink(res);
    if (pz_ar_get_unique_id(&id) != PZ_OK) { fprintf(stderr, "prezero bench ar: %s\n", pz_last_error()); return 1; }
    int fd = open(res, O_RDWR | O_CREAT | O_EXCL, 0600);
    if (fd < 0 || ftruncate(fd, (off_t)sizeof(shared)) != 0 ||
        (sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) == MAP_FAILED) {
      fprintf(stderr, "prezero bench ar: cannot create %s: %s; give an --id-file in a writable directory\n", res,
              strerror(errno));
      if (fd >= 0) close(fd);
      unlink(res);
      pz_ar_unique_id_remove(&id);
      return 1;
    }
    close(fd);
    sh->id = id;
    __atomic_store_n(&sh->ready, 1, __ATOMIC_RELEASE);
    if (pz_ar_unique_id_write_file(&id, idf) != PZ_OK) { /* after the results file: readers find both */
      fprintf(stderr, "prezero bench ar: %s\n", pz_last_error());
      munmap(sh, sizeof *sh);
      unlink(res);
      pz_ar_unique_id_remove(&id);
      return 1;
    }
  } else {
    for (;;) { /* this run's id and its results file, both, or the deadline */
      const int left_ms = (int)(1000.0 * (timeout_s - elapsed_since(t0)));
      if (left_ms <= 0 || pz_ar_unique_id_read_file(idf, left_ms, &id) != PZ_OK) {
        fprintf(stderr, "prezero bench ar: rank %d: %s\n", rank,
                left_ms <= 0 ? "no id file of this run before --timeout-s; start rank 0" : pz_last_error());
        if (sh) munmap(sh, sizeof *sh);
        return 1;
      }
      int fd = open(res, O_RDWR);
      struct stat sb;
      if (fd >= 0 && fstat(fd, &sb) == 0 && sb.st_size >= (off_t)sizeof(shared)) {
        shared *m = mmap(NULL, sizeof *m, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (m != MAP_FAILED) {
          if (__atomic_load_n(&m->ready, __ATOMIC_ACQUIRE) && !memcmp(&m->id, &id, sizeof id)) {
            close(fd);
            sh = m;
            break;
          }
          munmap(m, sizeof *m);
        }
      }
      if (fd >= 0) close(fd);
      usleep(20000); /* a leftover pair, or rank 0 between its two files */
    }
  }
  const int rc = rank_main(sh, rank, world, one_gpu, iters, reps, id, 1000 * timeout_s);
  if (rank != 0) {
    if (rc) fprintf(stderr, "prezero bench ar: rank %d failed: %s\n", rank, sh->err[rank][0] ? sh->err[rank] : "no message");
    munmap(sh, sizeof *sh);
    return rc ? 1 : 0;
  }
  /* Rank 0: every rank's results or error. The ranks meet in every timed launch, so once rank 0
   * is done the others end within moments; 60 s past that is a dead rank. */
  const double t1 = now_s();
  int waiting = rc == 0; /* rank 0 itself failed: the others fail on their own (peer timeout) */
  while (waiting && now_s() - t1 < 60.0) {
    waiting = 0;
    for (int r = 0; r < world; r++) waiting |= !__atomic_load_n(&sh->done[r], __ATOMIC_ACQUIRE) && !sh->err[r][0];
    if (waiting) usleep(5000);
  }
  unlink(idf);
  pz_ar_unique_id_remove(&id);
  int bad = rc != 0;
  for (int r = 0; r < (rc ? 1 : world); r++) /* rank 0 failed: its own error is the news */
    if (!__atomic_load_n(&sh->done[r], __ATOMIC_ACQUIRE)) {
      fprintf(stderr, "prezero bench ar: rank %d failed: %s\n", r, sh->err[r][0] ? sh->err[r] : "no results 60 s after rank 0's");
      bad = 1;
    }
  const int out = bad ? 1 : report(sh, world, iters, reps, json, md, argc, argv);
  munmap(sh, sizeof *sh);
  unlink(res);
  return out;
}

/* A whole-string integer in [lo, hi] (pz_bench_parse_list of one value), or the exit code 2 after
 * one line naming the option. */
static int int_arg(const char *opt, const char *v, int lo, int hi, int *out) {
  if (pz_bench_parse_list(v, out, 1, lo, hi) != 1) {
    fprintf(stderr, "prezero bench ar: %s '%s' is not an integer in %d..%d; use %s %d..%d\n", opt, v, lo, hi, opt, lo,
            hi);
    return 2;
  }
  return 0;
}

int pz_bench_ar_procs(int argc, char **argv) {
  int procs = 0, world = 0, one_gpu = 0, iters = 10, reps = 7, rank = -1, timeout_s = 120, sep = 0, e = 0;
  const char *json = NULL, *md = NULL, *idf = NULL;
  for (int i = 1; i < argc && !e; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--one-gpu")) { one_gpu = 1; continue; }
    const bool known = !strcmp(a, "--procs") || !strcmp(a, "--world") || !strcmp(a, "--rank") || !strcmp(a, "--id-file") ||
                       !strcmp(a, "--timeout-s") || !strcmp(a, "--iters") || !strcmp(a, "--reps") || !strcmp(a, "--json") ||
                       !strcmp(a, "--md");
    if (!known || !v) {
      fprintf(stderr, "prezero bench ar: option '%s' %s; the multi-process forms take --procs N, or --rank R --world W "
                      "--id-file F [--timeout-s S], with --one-gpu --iters --reps --json --md; see --help\n", a,
              known ? "needs a value" : "is not one of the multi-process forms'");
      return 2;
    }
    i++;
    if (!strcmp(a, "--procs")) e = int_arg(a, v, 2, PZ_AR_MP_MAX_WORLD, &procs);
    else if (!strcmp(a, "--world")) { e = int_arg(a, v, 2, PZ_AR_MP_MAX_WORLD, &world); sep = 1; }
    else if (!strcmp(a, "--rank")) { e = int_arg(a, v, 0, PZ_AR_MP_MAX_WORLD - 1, &rank); sep = 1; }
    else if (!strcmp(a, "--id-file")) { idf = v; sep = 1; }
    else if (!strcmp(a, "--timeout-s")) { e = int_arg(a, v, 1, 3600, &timeout_s); sep = 1; }
    else if (!strcmp(a, "--iters")) e = int_arg(a, v, 1, 1000, &iters);
    else if (!strcmp(a, "--reps")) e = int_arg(a, v, 1, 64, &reps);
    else if (!strcmp(a, "--json")) json = v;
    else md = v;
  }
  if (e) return e;
  if (procs && sep) {
    fprintf(stderr, "prezero bench ar: --procs forks every rank itself; give either --procs N or --rank/--world/--id-file\n");
    return 2;
  }
  if (sep) {
    if (rank < 0 || !world || rank >= world || !idf || !idf[0]) {
      fprintf(stderr, "prezero bench ar: the separate-ranks form needs --rank 0..W-1, --world W (2..%d) and --id-file F; "
                      "got rank %d, world %d, %s\n", PZ_AR_MP_MAX_WORLD, rank, world, idf ? "an id file" : "no id file");
      return 2;
    }
    return separate_rank(rank, world, idf, timeout_s, one_gpu, iters, reps, json, md, argc, argv);
  }
  if (!procs) {
    fprintf(stderr, "prezero bench ar: --procs is missing; give --procs N (2..%d)\n", PZ_AR_MP_MAX_WORLD);
    return 2;
  }
  world = procs;
  shared *sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (sh == MAP_FAILED) { perror("prezero bench ar: mmap"); return 1; }
  memset(sh, 0, sizeof *sh);
  pz_ar_unique_id id;
  if (pz_ar_get_unique_id(&id) != PZ_OK) {
    fprintf(stderr, "prezero bench ar: %s\n", pz_last_error());
    return 1;
  }
  fflush(stdout);
  fflush(stderr);
  pid_t pid[PZ_AR_MP_MAX_WORLD];
  for (int r = 0; r < world; r++) {
    pid[r] = fork();
    if (pid[r] < 0) { perror("prezero bench ar: fork"); return 1; }
    if (pid[r] == 0) _exit(rank_main(sh, r, world, one_gpu, iters, reps, id, 20000));
  }
  /* Wait for every rank; a rank still running after the deadline is killed (a hang is an error). */
  const double deadline = 600.0, t0 = now_s();
  int left = world, code[PZ_AR_MP_MAX_WORLD] = {0}, alive[PZ_AR_MP_MAX_WORLD];
  for (int r = 0; r < world; r++) alive[r] = 1;
  while (left > 0) {
    for (int r = 0; r < world; r++) {
      int ws = 0;
      if (alive[r] && waitpid(pid[r], &ws, WNOHANG) == pid[r]) {
        alive[r] = 0;
        left--;
        code[r] = WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + (WIFSIGNALED(ws) ? WTERMSIG(ws) : 0);
      }
    }
    if (left > 0 && now_s() - t0 > deadline)
      for (int r = 0; r < world; r++)
        if (alive[r]) {
          kill(pid[r], SIGKILL);
          waitpid(pid[r], NULL, 0);
          alive[r] = 0;
          left--;
          code[r] = 124;
          snprintf(sh->err[r], sizeof sh->err[r], "still running after %.0f s: killed", deadline);
        }
    if (left > 0) usleep(5000);
  }
  pz_ar_unique_id_remove(&id);
  for (int r = 0; r < world; r++)
    if (code[r] != 0 || !sh->done[r]) {
      fprintf(stderr, "prezero bench ar: rank %d failed (exit %d): %s\n", r, code[r], sh->err[r][0] ? sh->err[r] : "no message");
      return 1;
    }
  const int rc = report(sh, world, iters, reps, json, md, argc, argv);
  munmap(sh, sizeof *sh);
  return rc;
}

/* The table of every rank's results (the slowest rank per row) to stdout, --md and --json. */
static int report(shared *sh, int world, int iters, int reps, const char *json, const char *md, int argc, char **argv) {
  int distinct = 0;
  for (int r = 0; r < world; r++) {
    int seen = 0;
    for (int q = 0; q < r; q++) seen |= sh->device[q] == sh->device[r];
    distinct += !seen;
  }
  char placement[128];
  if (distinct == 1) snprintf(placement, sizeof placement, "%d processes on ONE GPU (time-sliced: protocol cost, not NVLink speed)", world);
  else snprintf(placement, sizeof placement, "%d processes on %d GPUs", world, distinct);
  char cmd[1024];
  pz_bench_command_line(cmd, sizeof cmd, "prezero bench ar", argc - 1, argv + 1);
  cJSON *root = cJSON_CreateObject();
  cJSON_AddStringToObject(root, "bench", "ar_procs");
  pz_bench_json_add_command_date(root, cmd);
  cJSON_AddStringToObject(root, "device", sh->name);
  cJSON_AddNumberToObject(root, "tp", world);
  cJSON_AddStringToObject(root, "placement", placement);
  cJSON_AddNumberToObject(root, "iters_per_graph", iters);
  cJSON_AddNumberToObject(root, "replays", reps);
  cJSON_AddNumberToObject(root, "H", H_KIMI);
  cJSON_AddNumberToObject(root, "n_total", N_TOTAL);
  cJSON *rows = cJSON_AddArrayToObject(root, "rows");
  FILE *mdf = md ? fopen(md, "w") : NULL;
  if (md && !mdf) { fprintf(stderr, "prezero bench ar: cannot write %s\n", md); return 1; }
  FILE *outs[2] = {stdout, mdf};
  for (int o = 0; o < 2; o++) {
    if (!outs[o]) continue;
    fprintf(outs[o], "# prezero bench ar, one process per rank, TP %d, %s: %s\n\nCommand: `%s`. One process per TP rank through the public "
                     "multi-process API (CUDA IPC inboxes). CUDA-graph replay of %d launches per rank, median of %d replays, "
                     "slowest rank. H = %d, Kimi-K2 fill n_total = %d f32 columns.\n\n| m | fused µs | fused + fill µs | fill adds µs |\n|---:|---:|---:|---:|\n",
            world, sh->name, placement, cmd, iters, reps, H_KIMI, N_TOTAL);
  }
  for (int mi = 0; mi < NM; mi++) {
    double v[2] = {0, 0};
    for (int kind = 0; kind < 2; kind++)
      for (int r = 0; r < world; r++)
        if (sh->us[r][mi][kind] > v[kind]) v[kind] = sh->us[r][mi][kind];
    cJSON *row = cJSON_CreateObject();
    cJSON_AddNumberToObject(row, "m", (double)k_ms[mi]);
    cJSON_AddNumberToObject(row, "fused_us", v[0]);
    cJSON_AddNumberToObject(row, "fused_fill_us", v[1]);
    cJSON_AddItemToArray(rows, row);
    for (int o = 0; o < 2; o++)
      if (outs[o]) fprintf(outs[o], "| %lld | %.2f | %.2f | %+.2f |\n", (long long)k_ms[mi], v[0], v[1], v[1] - v[0]);
  }
  if (mdf) fclose(mdf);
  int rc = 0;
  if (json && pz_bench_write_json(root, json, 1) != 0) { fprintf(stderr, "prezero bench ar: cannot write %s\n", json); rc = 1; }
  cJSON_Delete(root);
  return rc;
}
#endif
