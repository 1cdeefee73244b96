/* Helpers shared by the `prezero bench` front-ends (see bench_common.h). */
#define _POSIX_C_SOURCE 200809L
#include "bench_common.h"
#include "cli_args.h"
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cjson/cJSON.h>

int pz_bench_parse_list(const char *s, int *v, int cap, int lo, int hi) {
  int n = 0;
  while (*s) {
    char *end;
    if (!pz_cli_starts_number(s)) return -1; /* an empty element ("1,,2"), a '+' or a space */
    errno = 0;
    long x = strtol(s, &end, 10);
    if (end == s || errno || x < lo || x > hi || (*end && *end != ',') || n >= cap) return -1;
    v[n++] = (int)x;
    s = end;
    if (*s == ',' && !*++s) return -1; /* a trailing comma: an empty last element */
  }
  return n;
}

extern char **environ;

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Appends at most n chars of s to buf (cap bytes, NUL-terminated), truncating at cap - 1. */
static void append(char *buf, size_t cap, const char *s, size_t n) {
  size_t len = strlen(buf);
  for (size_t i = 0; i < n && s[i] && len + 1 < cap; i++) buf[len++] = s[i];
  buf[len] = 0;
}

/* Appends NAME=value to buf, the value in single quotes when it holds anything but [A-Za-z0-9_./,:+=-]
 * (a quote inside becomes '\''), so that the line can be run again as it reads. */
static void add_env_word(char *buf, size_t cap, const char *kv) {
  const char *eq = strchr(kv, '=');
  if (!eq) return;
  const char *v = eq + 1;
  bool plain = *v != 0;
  for (const char *c = v; *c && plain; c++)
    plain = (*c >= 'A' && *c <= 'Z') || (*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9') || strchr("_./,:+=-", *c);
  append(buf, cap, kv, (size_t)(v - kv));
  if (!plain) append(buf, cap, "'", 1);
  for (const char *c = v; *c; c++) {
    if (*c == '\'') append(buf, cap, "'\\''", 4);
    else append(buf, cap, c, 1);
  }
  if (!plain) append(buf, cap, "'", 1);
}

void pz_bench_command_line(char *buf, size_t cap, const char *prefix, int argc, char **argv) {
  if (!buf || cap == 0) return;
  buf[0] = 0;
  /* the PREZERO_* switches set in the environment, sorted, as NAME=value words before the command */
  size_t n = 0;
  for (char **e = environ; e && *e; e++) n += strncmp(*e, "PREZERO_", 8) == 0;
  char **set = n ? malloc(n * sizeof *set) : NULL;
  if (set) {
    size_t k = 0;
    for (char **e = environ; e && *e && k < n; e++)
      if (strncmp(*e, "PREZERO_", 8) == 0) set[k++] = *e;
    qsort(set, k, sizeof *set, cmp_str);
    for (size_t i = 0; i < k; i++) {
      add_env_word(buf, cap, set[i]);
      strncat(buf, " ", cap - strlen(buf) - 1);
    }
    free(set);
  }
  strncat(buf, prefix, cap - strlen(buf) - 1);
  for (int i = 0; i < argc; i++) {
    strncat(buf, " ", cap - strlen(buf) - 1);
    strncat(buf, argv[i], cap - strlen(buf) - 1);
  }
}

void pz_bench_json_add_command_date(cJSON *root, const char *cmd) {
  cJSON_AddStringToObject(root, "command", cmd);
  time_t now = time(NULL);
  char ts[64];
  strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
  cJSON_AddStringToObject(root, "date", ts);
}

int pz_bench_write_json(const cJSON *root, const char *path, int newline) {
  char *text = cJSON_Print(root);
  FILE *f = fopen(path, "w");
  int rc = (!f || !text || fputs(text, f) < 0 || (newline && fputc('\n', f) == EOF)) ? -1 : 0;
  if (f) fclose(f);
  free(text);
  return rc;
}

void pz_bench_md_rule(FILE *f, int ncols, int right_align) {
  fputc('|', f);
  for (int i = 0; i < ncols; i++) fputs(right_align ? "---:|" : "---|", f);
  fputc('\n', f);
}

int pz_bench_no_cuda(const char *name, int argc, char **argv, void (*usage)(FILE *f)) {
  for (int i = 1; i < argc; i++)
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      usage(stdout);
      return 0;
    }
  fprintf(stderr, "prezero %s: this build has no CUDA backend; rebuild with nvcc present (PZ_WITH_CUDA=ON) "
                  "and run it on a machine with a CUDA GPU\n", name);
  return 1;
}

#ifdef PZ_HAVE_CUDA
#include "backend/cuda/gemm.h"

void *pz_bench_dalloc(size_t bytes, pz_status *st) {
  void *p = NULL;
  if (*st != PZ_OK) return NULL;
  *st = PZ_CUDA_STATUS_AS(cudaMalloc(&p, bytes), PZ_ERR_OOM, "bench attn: cannot allocate %zu bytes", bytes);
  return *st == PZ_OK ? p : NULL;
}

void pz_bench_fill_bf16(void *p, int64_t n, uint32_t seed, pz_status *st) {
  if (*st == PZ_OK && p) *st = pz_gemm_fill_bf16(p, n, seed, false, 0);
}

int pz_bench_need_gpus(const char *name, const char *what, int need, int tp_flag) {
  int have = 0;
  if (!PZ_CUDA_PROBE(cudaGetDeviceCount(&have))) have = 0; /* no driver / no GPU: none visible */
  if (have >= need) return 0;
  char msg[300];
  pz_cli_gpu_refusal(msg, sizeof msg, what, need, have, tp_flag);
  fprintf(stderr, "prezero %s: %s\n", name, msg);
  return -1;
}

pz_status pz_bench_graph_us(cudaGraphExec_t ge, cudaStream_t s, int launches, int reps, double *us) {
  pz_status st = PZ_OK; /* every call runs; the first failure is the one reported (PZ_CUDA_KEEP) */
  cudaEvent_t e0 = NULL, e1 = NULL;
  PZ_CUDA_KEEP(cudaEventCreate(&e0), st);
  PZ_CUDA_KEEP(cudaEventCreate(&e1), st);
  double t[PZ_BENCH_MAX_REPS];
  if (reps > PZ_BENCH_MAX_REPS) reps = PZ_BENCH_MAX_REPS;
  if (reps < 1) reps = 1;
  PZ_CUDA_KEEP(cudaGraphLaunch(ge, s), st); /* warm-up */
  PZ_CUDA_KEEP(cudaStreamSynchronize(s), st);
  for (int r = 0; r < reps; r++) {
    float ms = 0;
    PZ_CUDA_KEEP(cudaEventRecord(e0, s), st);
    PZ_CUDA_KEEP(cudaGraphLaunch(ge, s), st);
    PZ_CUDA_KEEP(cudaEventRecord(e1, s), st);
    PZ_CUDA_KEEP(cudaEventSynchronize(e1), st);
    PZ_CUDA_KEEP(cudaEventElapsedTime(&ms, e0, e1), st);
    t[r] = ms;
  }
  PZ_CUDA_KEEP(cudaStreamSynchronize(s), st);
  *us = pz_median(t, reps) * 1000.0 / launches;
  if (e0) PZ_CUDA_IGNORE(cudaEventDestroy(e0)); /* cleanup: st already says how the replays went */
  if (e1) PZ_CUDA_IGNORE(cudaEventDestroy(e1));
  return st;
}

pz_status pz_bench_capture_us(pz_bench_launch_fn f, void *ctx, int iters, int reps, cudaStream_t s, double *us) {
  cudaGraph_t g = NULL;
  cudaGraphExec_t ge = NULL;
  pz_status st = PZ_OK;
  PZ_CUDA_CHECK_MSG(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), "bench attn: cannot begin capture");
  for (int j = 0; j < iters && st == PZ_OK; j++) st = f(ctx, j, s);
  PZ_CUDA_KEEP_MSG(cudaStreamEndCapture(s, &g), st, "bench attn: capture/instantiate failed"); /* always ended */
  if (st == PZ_OK) st = PZ_CUDA_STATUS_MSG(cudaGraphInstantiate(&ge, g, 0), "bench attn: capture/instantiate failed");
  if (st == PZ_OK) st = pz_bench_graph_us(ge, s, iters, reps, us); /* its message names the replay call that failed */
  if (ge) PZ_CUDA_IGNORE(cudaGraphExecDestroy(ge)); /* cleanup: st is what counts */
  if (g) PZ_CUDA_IGNORE(cudaGraphDestroy(g));
  return st;
}
#endif
