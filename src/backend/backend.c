/* backend.h: the handle and the dispatch to each backend's table (backend_impl.h). */
#include "backend/backend_impl.h"
#include <stdlib.h>
#include <string.h>
#include "passes/prezero.h"

struct pz_backend {
  const pz_backend_vtbl *vt;
  void *x; /* the executor */
};

static const pz_backend_vtbl *table_of(pz_backend_kind kind) {
  if (kind == PZ_BACKEND_CPU) return &pz_backend_cpu_vtbl;
#ifdef PZ_HAVE_CUDA
  if (kind == PZ_BACKEND_CUDA) return &pz_backend_cuda_vtbl;
#endif
  return NULL;
}

pz_status pz_backend_create(pz_backend_kind kind, const pz_graph *g, const pz_backend_opts *opts, pz_backend **out) {
  if (!g || !out) return pz_error(PZ_ERR_INVALID_ARG, "pz_backend_create: NULL graph or out");
  *out = NULL;
  const pz_backend_vtbl *vt = table_of(kind);
  if (!vt) {
    if (kind == PZ_BACKEND_CUDA)
      return pz_error(PZ_ERR_UNSUPPORTED, "the CUDA backend is not in this build (built without CUDA); use the CPU backend");
    return pz_error(PZ_ERR_INVALID_ARG, "pz_backend_create: unknown backend kind %d", (int)kind);
  }
  pz_backend_opts def = PZ_BACKEND_OPTS_INIT;
  pz_backend *b = calloc(1, sizeof *b);
  if (!b) return pz_error(PZ_ERR_OOM, "backend allocation");
  b->vt = vt;
  pz_status st = vt->create(g, opts ? opts : &def, &b->x);
  if (st != PZ_OK) {
    free(b);
    return st;
  }
  *out = b;
  return PZ_OK;
}

pz_backend_kind pz_backend_kind_of(const pz_backend *b) { return b ? b->vt->kind : PZ_BACKEND_CPU; }
const char *pz_backend_name(const pz_backend *b) { return b ? b->vt->name : "none"; }

int pz_backend_max_tp(pz_backend_kind kind) {
  const pz_backend_vtbl *vt = table_of(kind);
  return vt ? vt->max_tp : 0;
}

#define NEED_B(fn)                                                                \
  do {                                                                            \
    if (!b) return pz_error(PZ_ERR_INVALID_ARG, "%s: NULL backend", fn);          \
  } while (0)

static pz_status unsupported(const pz_backend *b, const char *what) {
  return pz_error(PZ_ERR_UNSUPPORTED, "the %s backend has no %s (a CUDA backend feature)", b->vt->name, what);
}

pz_status pz_backend_capture(pz_backend *b, int64_t m) {
  NEED_B("pz_backend_capture");
  return b->vt->capture ? b->vt->capture(b->x, m) : PZ_OK;
}

pz_status pz_backend_step(pz_backend *b, int64_t m, const int32_t *tokens, const int32_t *pos, int32_t *next) {
  NEED_B("pz_backend_step");
  return b->vt->step(b->x, m, tokens, pos, next);
}

pz_status pz_backend_logits(const pz_backend *b, int64_t m, float *out) {
  NEED_B("pz_backend_logits");
  return b->vt->logits(b->x, m, out);
}

int64_t pz_backend_bad_row(const pz_backend *b, int *is_nan) {
  if (is_nan) *is_nan = 0;
  return b && b->vt->bad_row ? b->vt->bad_row(b->x, is_nan) : -1;
}

pz_status pz_backend_time_step(pz_backend *b, int64_t M, int32_t pos_all, int iters, int reps, double *us_median) {
  NEED_B("pz_backend_time_step");
  return b->vt->time_step(b->x, M, M, pos_all, iters, reps, us_median);
}

pz_status pz_backend_time_step_rows(pz_backend *b, int64_t M, int64_t rows, int32_t pos_all, int iters, int reps,
                                    double *us_median) {
  NEED_B("pz_backend_time_step_rows");
  return b->vt->time_step(b->x, M, rows, pos_all, iters, reps, us_median);
}

void pz_backend_destroy(pz_backend *b) {
  if (!b) return;
  b->vt->destroy(b->x);
  free(b);
}

int64_t pz_backend_padded_m(const pz_backend *b, int64_t m) {
  return b && b->vt->padded_m ? b->vt->padded_m(b->x, m) : m;
}

const pz_device_desc *pz_backend_device_desc(const pz_backend *b) { return b ? b->vt->device_desc(b->x) : NULL; }

int64_t pz_backend_device_bytes(const pz_backend *b) { return b && b->vt->device_bytes ? b->vt->device_bytes(b->x) : 0; }

void pz_backend_gemm_table(const pz_backend *b, char *buf, size_t len) {
  if (!buf || !len) return;
  buf[0] = 0;
  if (b && b->vt->gemm_table) b->vt->gemm_table(b->x, buf, len);
}

bool pz_backend_per_batch(const pz_backend *b) { return b && b->vt->per_batch && b->vt->per_batch(b->x); }

pz_status pz_backend_set_prezero(pz_backend *b, int on) {
  NEED_B("pz_backend_set_prezero");
  return b->vt->set_prezero ? b->vt->set_prezero(b->x, on) : unsupported(b, "per-batch prezero switch");
}

pz_status pz_backend_set_gemm_force(pz_backend *b, int flavour) {
  NEED_B("pz_backend_set_gemm_force");
  return b->vt->set_gemm_force ? b->vt->set_gemm_force(b->x, flavour) : unsupported(b, "split-K GEMM flavour to force");
}

pz_status pz_backend_plan(pz_backend *b, int64_t m, pz_prezero_report *rep, const pz_graph **g) {
  NEED_B("pz_backend_plan");
  if (!rep) return pz_error(PZ_ERR_INVALID_ARG, "pz_backend_plan: NULL report");
  memset(rep, 0, sizeof *rep); /* safe to pz_prezero_report_free whatever the answer */
  return b->vt->plan ? b->vt->plan(b->x, m, rep, g) : unsupported(b, "per-batch prezero plan");
}
