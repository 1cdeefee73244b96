/* Helpers shared by the `prezero bench` front-ends (tools/bench_*.c): list options, the
 * command/date fields of the JSON record, JSON and markdown output, CUDA-graph replay timing,
 * CUDA checks. Medians are pz_median (core/stats.h). */
#ifndef PZ_TOOLS_BENCH_COMMON_H
#define PZ_TOOLS_BENCH_COMMON_H
#include <stddef.h>
#include <stdio.h>
#include "core/stats.h" /* pz_median: the medians every front-end reports */

struct cJSON;

/* H200 datasheet HBM3e bandwidth in TB/s: the "HBM limit" of docs/ARCHITECTURE.md §7. */
#define PZ_BENCH_HBM_TBPS 4.8

/* Parses a comma-separated list of decimal integers ("1,4,8") into v[0..cap). Returns the count
 * (0 for ""), or -1 when an item is empty ("1,", ",1", "1,,2") or not a number (a leading '+'
 * or space included), lies outside lo..hi, is followed by anything but ',' or the end, or there
 * are more than cap. */
int pz_bench_parse_list(const char *s, int *v, int cap, int lo, int hi);

/* Writes "NAME=value " for each PREZERO_* variable set in the environment (sorted: the switches the
 * run had), then `prefix`, then " argv[i]" for i in 0..argc, into buf (truncated to cap - 1 chars). */
void pz_bench_command_line(char *buf, size_t cap, const char *prefix, int argc, char **argv);
/* Adds "command": cmd and "date": the current UTC time as "YYYY-MM-DDTHH:MM:SSZ" to root. */
void pz_bench_json_add_command_date(struct cJSON *root, const char *cmd);
/* Writes cJSON_Print(root) to path, plus "\n" when newline is nonzero. Returns 0, or -1 when
 * the file cannot be opened or written (prints nothing: the caller says what failed). */
int pz_bench_write_json(const struct cJSON *root, const char *path, int newline);

/* Writes a markdown table's header rule of ncols columns: "|---|---|\n", or with right_align
 * "|---:|---:|\n". */
void pz_bench_md_rule(FILE *f, int ncols, int right_align);

/* `prezero bench <name>` in a build without the CUDA backend: prints usage(stdout) and returns 0
 * when argv[1..argc) holds --help or -h; otherwise prints the one line "prezero <name>:
 * this build has no CUDA backend; <how to fix>" on stderr and returns 1. name is the command
 * as typed: "bench gemm", "tune". */
int pz_bench_no_cuda(const char *name, int argc, char **argv, void (*usage)(FILE *f));

#ifdef PZ_HAVE_CUDA
#include <cuda_runtime_api.h>
#include "backend/cuda/cuda_util.h"
/* The front-ends' form of PZ_CUDA_CHECK (backend/cuda/cuda_util.h) for functions that print
 * their error themselves: a failed call is recorded by pz_cuda_error (file:line, the call, the
 * CUDA error text; last-error state cleared), printed as the one line "prezero <name>: <that
 * message>" on stderr, and then the statement on_fail runs (`return -1`, `goto fail`).
 * name: the command as typed, "bench ar", ... */
#define PZ_BENCH_CUDA(name, call, on_fail)                                           \
  do {                                                                               \
    cudaError_t pz_be_ = (call);                                                     \
    if (pz_be_ != cudaSuccess) {                                                     \
      pz_cuda_error(pz_be_, __FILE__, __LINE__, #call);                              \
      fprintf(stderr, "prezero %s: %s\n", (name), pz_last_error());                  \
      on_fail;                                                                       \
    }                                                                                \
  } while (0)
/* Returns 0 when at least `need` CUDA GPUs are visible (cudaGetDeviceCount; an error counts as
 * none); otherwise prints the one line "prezero <name>: " + pz_cli_gpu_refusal(what, need,
 * visible, tp_flag) (tools/cli_args.h) on stderr and returns -1. name as for pz_bench_no_cuda. */
int pz_bench_need_gpus(const char *name, const char *what, int need, int tp_flag);
/* Most replays pz_bench_graph_us times. */
#define PZ_BENCH_MAX_REPS 64
/* Times an instantiated CUDA graph holding `launches` launches on stream s: one warm-up replay
 * (then the stream is synchronised), then min(reps, 64) replays, each between two events and
 * synchronised. *us = pz_median of the replay times, in µs per launch (replay time / launches).
 * Returns PZ_OK, or the status of the first CUDA error met (PZ_CUDA_KEEP: every call still runs,
 * the message names it); *us is set either way. */
pz_status pz_bench_graph_us(cudaGraphExec_t ge, cudaStream_t s, int launches, int reps, double *us);
/* One launch of a `prezero bench attn` table: launch j (0, 1, ...) of a captured graph, on stream s. */
typedef pz_status (*pz_bench_launch_fn)(void *ctx, int j, cudaStream_t s);
/* Captures f(ctx, j, s) for j in 0..iters on stream s into one CUDA graph (thread-local capture;
 * launch j may rotate its buffers) and times it with pz_bench_graph_us (reps replays): *us, µs per
 * launch. Returns PZ_OK, the first failing launch's status (the capture still ended), or the
 * status of a failed capture / instantiate / replay ("bench attn: ..." messages). */
pz_status pz_bench_capture_us(pz_bench_launch_fn f, void *ctx, int iters, int reps, cudaStream_t s, double *us);
/* Chained set-up: when *st is PZ_OK, cudaMalloc of `bytes` (PZ_ERR_OOM with "bench attn: cannot
 * allocate N bytes" into *st on failure); NULL when *st is or becomes an error. */
void *pz_bench_dalloc(size_t bytes, pz_status *st);
/* Chained set-up: when *st is PZ_OK and p is set, n seeded random bf16 values into p
 * (pz_gemm_fill_bf16, backend/cuda/gemm.h), its status into *st. */
void pz_bench_fill_bf16(void *p, int64_t n, uint32_t seed, pz_status *st);
#endif

#endif
