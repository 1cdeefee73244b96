/* The CUDA backend behind backend.h: pz_cuda_exec (exec.h), every entry, the extras included. */
#include <stdlib.h>
#include "backend/backend_impl.h"
#include "backend/cuda/exec.h"

_Static_assert(PZ_BACKEND_MAX_CAPTURE == PZ_CUDA_MAX_CAPTURE, "the interface holds every capture size");

typedef struct cuda_backend {
  pz_cuda_exec *x;
  int64_t device_bytes; /* per rank, for the graph given (per-batch mode: with the static rewrite's buffers) */
} cuda_backend;

#define X(p) (((cuda_backend *)(p))->x)
#define CX(p) (((const cuda_backend *)(p))->x)

static pz_status cuda_create(const pz_graph *g, const pz_backend_opts *o, void **out) {
  if (o->n_capture < 0 || o->n_capture > PZ_BACKEND_MAX_CAPTURE)
    return pz_error(PZ_ERR_INVALID_ARG, "CUDA backend: %d capture sizes, at most %d", o->n_capture, PZ_BACKEND_MAX_CAPTURE);
  cuda_backend *c = calloc(1, sizeof *c);
  if (!c) return pz_error(PZ_ERR_OOM, "CUDA backend allocation");
  pz_cuda_exec_opts xo = PZ_CUDA_EXEC_OPTS_INIT;
  xo.seed = o->seed;
  xo.graphs = o->graphs;
  xo.n_capture = o->n_capture;
  for (int i = 0; i < o->n_capture; i++) xo.capture[i] = o->capture[i];
  xo.prezero = o->prezero;
  xo.dev = o->dev;
  xo.poison = o->poison;
  xo.reserve_bytes = o->reserve_bytes;
  xo.load_weight = o->load_weight;
  xo.load_user = o->load_user;
  xo.load_chunk_bytes = o->load_chunk_bytes;
  xo.runtime = o->runtime;
  xo.ar_comm = o->ar_comm;
  pz_status st = pz_cuda_exec_create(g, &xo, &c->x);
  if (st != PZ_OK) {
    free(c);
    return st;
  }
  c->device_bytes = pz_cuda_exec_per_batch(c->x) ? pz_cuda_exec_bytes_per_batch(g) : pz_cuda_exec_bytes(g);
  *out = c;
  return PZ_OK;
}

static pz_status cuda_capture(void *x, int64_t m) { return pz_cuda_exec_capture(X(x), m); }
static pz_status cuda_step(void *x, int64_t m, const int32_t *tokens, const int32_t *pos, int32_t *next) {
  return pz_cuda_exec_step(X(x), m, tokens, pos, next);
}
static pz_status cuda_logits(const void *x, int64_t m, float *out) { return pz_cuda_exec_logits(CX(x), m, out); }
static pz_status cuda_time_step(void *x, int64_t M, int64_t rows, int32_t pos_all, int iters, int reps,
                                double *us_median) {
  return pz_cuda_exec_time_step(X(x), M, rows, pos_all, iters, reps, us_median);
}
static void cuda_destroy(void *x) {
  if (!x) return;
  pz_cuda_exec_free(X(x));
  free(x);
}
static int64_t cuda_padded_m(const void *x, int64_t m) { return pz_cuda_exec_padded_m(CX(x), m); }
static const pz_device_desc *cuda_device_desc(const void *x) { return pz_cuda_exec_device_desc(CX(x)); }
static int64_t cuda_device_bytes(const void *x) { return ((const cuda_backend *)x)->device_bytes; }
static void cuda_gemm_table(const void *x, char *buf, size_t len) { pz_cuda_exec_gemm_table(CX(x), buf, len); }
static bool cuda_per_batch(const void *x) { return pz_cuda_exec_per_batch(CX(x)); }
static pz_status cuda_set_prezero(void *x, int on) { return pz_cuda_exec_set_prezero(X(x), on); }
static pz_status cuda_set_gemm_force(void *x, int flavour) { return pz_cuda_exec_set_gemm_force(X(x), flavour); }
static int64_t cuda_bad_row(const void *x, int *is_nan) { return pz_cuda_exec_bad_row(CX(x), is_nan); }
static pz_status cuda_plan(void *x, int64_t m, struct pz_prezero_report *rep, const pz_graph **g) {
  return pz_cuda_exec_plan(X(x), m, rep, g);
}

const pz_backend_vtbl pz_backend_cuda_vtbl = {
    .kind = PZ_BACKEND_CUDA,
    .name = "cuda",
    .max_tp = PZ_CUDA_MAX_TP,
    .create = cuda_create,
    .capture = cuda_capture,
    .step = cuda_step,
    .logits = cuda_logits,
    .time_step = cuda_time_step,
    .destroy = cuda_destroy,
    .padded_m = cuda_padded_m,
    .device_desc = cuda_device_desc,
    .device_bytes = cuda_device_bytes,
    .gemm_table = cuda_gemm_table,
    .per_batch = cuda_per_batch,
    .set_prezero = cuda_set_prezero,
    .set_gemm_force = cuda_set_gemm_force,
    .plan = cuda_plan,
    .bad_row = cuda_bad_row,
};
