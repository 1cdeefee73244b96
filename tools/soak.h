/* prezero soak (tools/cmd_soak.c parses and reports, tools/soak_run.c runs): many CUDA-graph
 * replays of one decode step at mixed batch sizes, prezero ON and OFF interleaved, in
 * deterministic mode, checking that the same inputs give the same logits bit for bit, that free
 * device memory does not drop and that no step hangs. */
#ifndef PZ_TOOLS_SOAK_H
#define PZ_TOOLS_SOAK_H
#include <stdint.h>
#include <stdio.h>
#include "model/config.h"

#define PZ_SOAK_MAX_B 16      /* batch sizes in the cycle (= PZ_BACKEND_MAX_CAPTURE) */
#define PZ_SOAK_MAX_TP 8
#define PZ_SOAK_MAX_SAMPLES 4096 /* memory samples kept (one per ~10 s: over 11 hours) */
#define PZ_SOAK_SAMPLE_S 10.0 /* seconds between memory samples */
#define PZ_SOAK_MAX_LOGGED 5  /* mismatches printed on stderr (all are counted) */

typedef struct pz_soak_opts {
  const char *config;         /* preset name or config.json path (default kimi_k2) */
  int layers;                 /* first N layers (default 2: kimi_k2's dense layer 0 and one MoE layer) */
  int tp;                     /* ranks on GPUs 0..tp-1 (default 1) */
  int context;                /* sequence i decodes at position context - 1 - (7 i mod min(64, context)) */
  int batch[PZ_SOAK_MAX_B];   /* the cycle of batch sizes, distinct, in the order given */
  int nb;
  double seconds;             /* wall-clock limit of the replay loop (0: none; default 60) */
  long long replays;          /* replay limit (0: none) */
  int check_every;            /* logits fetched and compared on every K-th step of a batch size (default 1) */
  double step_timeout_s;      /* watchdog per step (default 30; creation, captures and warm-up: 10x) */
  double mem_slack_mib;       /* allowed drop of free device memory per GPU (default 32 MiB) */
  double host_slack_mib;      /* allowed growth of the host resident set (default 128 MiB) */
  unsigned long long seed;
  const char *json_path, *md_path;
  char command[1024];         /* "prezero soak ..." as typed */
} pz_soak_opts;

/* Per batch size of the cycle. */
typedef struct pz_soak_batch {
  int m;
  long long steps[2];         /* [prezero off, on] */
  long long checked[2];       /* steps whose logits were compared with the reference */
  long long mism_logits[2];   /* logits not bit-identical to the reference (taken from the first OFF step) */
  long long mism_tokens[2];   /* greedy next tokens not equal to the reference's */
  double step_s_sum[2], step_s_max[2]; /* host time of pz_backend_step (replay + argmax), s */
  int rewritten;              /* MM_MAYBE_PREZERO nodes in the ON graph at m (0: ON runs the OFF graph) */
} pz_soak_batch;

typedef struct pz_soak_result {
  char device[128], model[128];
  char determinism[256];      /* the switches that decide bit-identity, as the run took them */
  int vocab;
  pz_soak_batch b[PZ_SOAK_MAX_B];
  int nb;
  long long replays;          /* every step (replay), the warm-up's 2 per batch size included */
  long long loop_replays;     /* steps of the timed loop */
  double loop_s;              /* wall time of the loop, s */
  double replays_per_s;       /* loop_replays / loop_s (logits checks included) */
  /* memory: free bytes per GPU (cudaMemGetInfo) after the warm-up, at the end, and the lowest
   * sample; samples every PZ_SOAK_SAMPLE_S seconds (t in s since the loop began) */
  int ngpu;
  long long free_start[PZ_SOAK_MAX_TP], free_end[PZ_SOAK_MAX_TP], free_min[PZ_SOAK_MAX_TP];
  int n_samples;
  double sample_t[PZ_SOAK_MAX_SAMPLES];
  long long sample_free0[PZ_SOAK_MAX_SAMPLES]; /* GPU 0 (every GPU enters free_min) */
  long long rss_start, rss_end, rss_max; /* host resident set, bytes (/proc/self/statm) */
  /* first mismatch, for the report */
  long long first_replay;     /* -1: none */
  int first_m, first_on, first_index;
  float first_want, first_got;
  /* verdicts */
  int ran;                    /* the loop started (memory baseline taken) */
  int hang;                   /* the watchdog fired */
  char error[512];            /* "" or the error that stopped the run */
} pz_soak_result;

/* Runs the soak on the CUDA backend into *r (o already checked: pz_soak_parse). On a hang the
 * watchdog calls on_hang(r) (which writes the reports) and ends the process with exit code 1:
 * a kernel that never returns cannot be cancelled from the host. Returns 0 when the run
 * completed (whatever the checks say), 1 after an error (r->error says which). */
int pz_soak_run(const pz_soak_opts *o, const pz_model_config *mc, pz_soak_result *r,
                void (*on_hang)(const pz_soak_opts *o, pz_soak_result *r));

/* Whether every check passed: no mismatch, memory drift within the slacks, no hang, no error. */
int pz_soak_passed(const pz_soak_opts *o, const pz_soak_result *r);
/* Position of sequence i (the same at every batch size: see soak_run.c). */
int pz_soak_pos(int context, int i);
#endif
