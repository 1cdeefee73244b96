/* The CPU backend behind backend.h: pz_cpu_exec (cpu_backend.h), plus the host-clock timing. It
 * has no captured graphs, no device memory, no GEMM table and none of the CUDA extras (their
 * entries are left NULL, so backend.c answers for them). */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <time.h>
#include "backend/backend_impl.h"
#include "backend/cpu/cpu_backend.h"
#include "core/stats.h"

typedef struct cpu_backend {
  pz_cpu_exec *x;
  int64_t max_m, max_ctx, vocab;
  pz_backend_load_fn load; /* opts->load_weight, asked for all rows of a tensor at once */
  void *load_user;
} cpu_backend;

/* The executor's whole-tensor hook over the interface's row hook: rows [0, numel / ne[last]). */
static pz_status load_all_rows(void *user, const pz_tensor *t, int rank, void *dst) {
  const cpu_backend *c = user;
  const int64_t w = t->ne[t->ndim - 1];
  return c->load(c->load_user, t, rank, 0, pz_tensor_numel(t) / (w ? w : 1), dst);
}

/* The KV-cache length (max_ctx of the graph's MLA or GQA nodes; 0 when it has none). */
static int64_t graph_max_ctx(const pz_graph *g) {
  for (int i = 0; i < g->n_nodes; i++) {
    if (g->nodes[i].op == PZ_OP_MLA_ATTN) return g->nodes[i].p.mla.max_ctx;
    if (g->nodes[i].op == PZ_OP_GQA_ATTN) return g->nodes[i].p.gqa.max_ctx;
  }
  return 0;
}

static pz_status cpu_create(const pz_graph *g, const pz_backend_opts *o, void **out) {
  if (o->ar_comm)
    return pz_error(PZ_ERR_INVALID_ARG, "CPU backend: one rank per process needs the CUDA backend (--device cuda)");
  cpu_backend *c = calloc(1, sizeof *c);
  if (!c) return pz_error(PZ_ERR_OOM, "CPU backend allocation");
  c->max_m = g->info.m;
  c->max_ctx = graph_max_ctx(g);
  c->vocab = g->info.vocab_size > 0 ? g->info.vocab_size : 1;
  c->load = o->load_weight;
  c->load_user = o->load_user;
  pz_cpu_exec_opts xo = PZ_CPU_EXEC_OPTS_INIT;
  xo.seed = o->seed;
  xo.threads = o->threads;
  xo.poison = o->poison;
  xo.dev = o->dev;
  xo.load_weight = o->load_weight ? load_all_rows : NULL;
  xo.load_user = o->load_weight ? c : NULL;
  xo.runtime = o->runtime;
  pz_status st = pz_cpu_exec_create(g, &xo, &c->x);
  if (st != PZ_OK) {
    free(c);
    return st;
  }
  *out = c;
  return PZ_OK;
}

static pz_status cpu_capture(void *x, int64_t m) {
  const cpu_backend *c = x;
  if (m < 1 || m > c->max_m)
    return pz_error(PZ_ERR_INVALID_ARG, "CPU backend capture: batch %lld not in 1..%lld", (long long)m, (long long)c->max_m);
  return PZ_OK; /* nodes run one by one: nothing to capture */
}

static pz_status cpu_step(void *x, int64_t m, const int32_t *tokens, const int32_t *pos, int32_t *next) {
  return pz_cpu_exec_step(((cpu_backend *)x)->x, m, tokens, pos, next);
}

static pz_status cpu_logits(const void *x, int64_t m, float *out) {
  return pz_cpu_exec_logits(((const cpu_backend *)x)->x, m, out);
}

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return 1e6 * (double)ts.tv_sec + 1e-3 * (double)ts.tv_nsec;
}

static pz_status cpu_time_step(void *x, int64_t M, int64_t rows, int32_t pos_all, int iters, int reps,
                               double *us_median) {
  cpu_backend *c = x;
  if (rows != M)
    return pz_error(PZ_ERR_INVALID_ARG, "CPU backend timing: %lld real rows of %lld: the CPU backend runs every batch "
                    "as is (no padding)", (long long)rows, (long long)M);
  if (!us_median || iters < 1 || reps < 1 || reps > 64 || M < 1 || M > c->max_m)
    return pz_error(PZ_ERR_INVALID_ARG, "CPU backend timing: bad arguments (M %lld, iters %d, reps %d)", (long long)M,
                    iters, reps);
  if (pos_all < 0 || (c->max_ctx > 0 && pos_all >= c->max_ctx))
    return pz_error(PZ_ERR_INVALID_ARG, "CPU backend timing: position %d outside the KV cache", pos_all);
  int32_t *in = malloc(sizeof(int32_t) * 2 * (size_t)M);
  if (!in) return pz_error(PZ_ERR_OOM, "CPU backend timing: host allocation");
  int32_t *tok = in, *pos = in + M;
  for (int64_t i = 0; i < M; i++) {
    tok[i] = pz_backend_timing_token(i, c->vocab);
    pos[i] = pos_all;
  }
  double t[64];
  pz_status st = pz_cpu_exec_step(c->x, M, tok, pos, NULL); /* warm-up */
  for (int k = 0; k < reps && st == PZ_OK; k++) {
    const double t0 = now_us();
    for (int it = 0; it < iters && st == PZ_OK; it++) st = pz_cpu_exec_step(c->x, M, tok, pos, NULL);
    t[k] = (now_us() - t0) / iters;
  }
  free(in);
  if (st == PZ_OK) *us_median = pz_median(t, reps);
  return st;
}

static void cpu_destroy(void *x) {
  cpu_backend *c = x;
  if (!c) return;
  pz_cpu_exec_free(c->x);
  free(c);
}

static const pz_device_desc *cpu_device_desc(const void *x) {
  return pz_cpu_exec_device_desc(((const cpu_backend *)x)->x);
}

const pz_backend_vtbl pz_backend_cpu_vtbl = {
    .kind = PZ_BACKEND_CPU,
    .name = "cpu",
    .max_tp = 64, /* pz_cpu_exec_create's limit */
    .create = cpu_create,
    .capture = cpu_capture,
    .step = cpu_step,
    .logits = cpu_logits,
    .time_step = cpu_time_step,
    .destroy = cpu_destroy,
    .device_desc = cpu_device_desc,
};
