/* The CUDA error-to-status conversion behind cuda_util.h's checking macros. */
#include "backend/cuda/cuda_util.h"
#include <stdarg.h>
#include <stdio.h>

/* Records "[ctx: ]file:line: call: <CUDA error text>" as status s and clears the thread's CUDA
 * last-error state (this error is reported here, not again by a later launch check). */
static pz_status fail(pz_status s, cudaError_t ce, const char *file, int line, const char *call, const char *ctx) {
  (void)cudaGetLastError();
  if (!ctx) return pz_error(s, "%s:%d: %s: %s", file, line, call, cudaGetErrorString(ce));
  return pz_error(s, "%s: %s:%d: %s: %s", ctx, file, line, call, cudaGetErrorString(ce));
}

static pz_status status_of(cudaError_t ce) { return ce == cudaErrorMemoryAllocation ? PZ_ERR_OOM : PZ_ERR_CUDA; }

pz_status pz_cuda_error(cudaError_t ce, const char *file, int line, const char *call) {
  return ce == cudaSuccess ? PZ_OK : fail(status_of(ce), ce, file, line, call, NULL);
}

/* The context line from fmt and its arguments, then fail(). */
static pz_status vfail(pz_status s, cudaError_t ce, const char *file, int line, const char *call, const char *fmt,
                       va_list ap) {
  char ctx[512];
  vsnprintf(ctx, sizeof ctx, fmt, ap);
  return fail(s, ce, file, line, call, ctx);
}

pz_status pz_cuda_error_ctx(cudaError_t ce, const char *file, int line, const char *call, const char *fmt, ...) {
  if (ce == cudaSuccess) return PZ_OK;
  va_list ap;
  va_start(ap, fmt);
  pz_status st = vfail(status_of(ce), ce, file, line, call, fmt, ap);
  va_end(ap);
  return st;
}

pz_status pz_cuda_error_as(pz_status s, cudaError_t ce, const char *file, int line, const char *call, const char *fmt,
                           ...) {
  if (ce == cudaSuccess) return PZ_OK;
  va_list ap;
  va_start(ap, fmt);
  pz_status st = vfail(s, ce, file, line, call, fmt, ap);
  va_end(ap);
  return st;
}

int pz_cuda_probe(cudaError_t ce) {
  if (ce == cudaSuccess) return 1;
  (void)cudaGetLastError(); /* the failure is an answer: leave no last error behind */
  return 0;
}
