/* CUDA helpers shared by the CUDA backend: the one family of CUDA error-checking macros. */
#ifndef PZ_BACKEND_CUDA_UTIL_H
#define PZ_BACKEND_CUDA_UTIL_H
#include <cuda_runtime.h>
#include "core/status.h"
#ifdef __cplusplus
extern "C" {
#endif

/* Every CUDA runtime call whose result matters goes through one of the macros below; they all
 * turn a failure into a pz_status the same way (pz_cuda_error):
 *   - the status is PZ_ERR_OOM when the error is cudaErrorMemoryAllocation, else PZ_ERR_CUDA
 *     (PZ_CUDA_STATUS_AS names another);
 *   - pz_last_error() reads "FILE:LINE: CALL: <cudaGetErrorString>", preceded by "CONTEXT: "
 *     in the _MSG forms (CONTEXT is printf-formatted: what was being done, on which GPU, and
 *     how to fix it when there is a fix);
 *   - the thread's CUDA last-error state is cleared (cudaGetLastError), so a later launch check
 *     does not report the same error again at the wrong place;
 *   - the failing level is logged with file:line under PREZERO_LOG_ERRORS=1 (pz_log_propagate).
 *
 *   PZ_CUDA_CHECK(call)                        returns the status from the enclosing function
 *   PZ_CUDA_CHECK_MSG(call, fmt, ...)          the same, with a context
 *   PZ_CUDA_CHECK_GOTO(call, st, label)        stores the status in st and jumps to label
 *   PZ_CUDA_CHECK_MSG_GOTO(call, st, label, fmt, ...)
 *   PZ_CUDA_KEEP(call, st)                     always runs call; its failure is stored in st only
 *   PZ_CUDA_KEEP_MSG(call, st, fmt, ...)       when st is still PZ_OK (the first error wins),
 *                                              else it is dropped (last-error state cleared)
 *   PZ_CUDA_STATUS(call)                       an expression: PZ_OK or the error's status, for
 *   PZ_CUDA_STATUS_MSG(call, fmt, ...)         code that carries a status (`if (st == PZ_OK)
 *                                              st = PZ_CUDA_STATUS(...)`)
 *   PZ_CUDA_STATUS_AS(call, status, fmt, ...)  an expression: PZ_OK, or `status` instead of
 *                                              PZ_ERR_CUDA / PZ_ERR_OOM (same message), for the
 *                                              probes whose failure has its own status
 *                                              (PZ_ERR_NO_DEVICE, PZ_ERR_NO_P2P); use it inside
 *                                              PZ_CHECK / PZ_CHECK_GOTO
 *   PZ_CUDA_PROBE(call)                        an expression: 1 when call succeeded, else 0 with
 *                                              the last-error state cleared and nothing recorded:
 *                                              for calls whose failure is an answer, not an error
 *                                              (how many GPUs are visible, can pinned memory be
 *                                              had, or a query whose caller has a fallback)
 *   PZ_CUDA_IGNORE(call)                       a call whose failure cannot be reported: frees,
 *                                              destroys and the cudaSetDevice before them in
 *                                              cleanup paths, restoring the caller's device on an
 *                                              error path. Its result is discarded on purpose. */
pz_status pz_cuda_error(cudaError_t ce, const char *file, int line, const char *call);
pz_status pz_cuda_error_ctx(cudaError_t ce, const char *file, int line, const char *call, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
pz_status pz_cuda_error_as(pz_status s, cudaError_t ce, const char *file, int line, const char *call, const char *fmt,
                           ...) __attribute__((format(printf, 6, 7)));
int pz_cuda_probe(cudaError_t ce);

#define PZ_CUDA_CHECK(call)                                                    \
  do {                                                                         \
    cudaError_t pz_ce_ = (call);                                               \
    if (pz_ce_ != cudaSuccess) {                                               \
      pz_status pz_cs_ = pz_cuda_error(pz_ce_, __FILE__, __LINE__, #call);     \
      pz_log_propagate(__FILE__, __LINE__, #call, pz_cs_);                     \
      return pz_cs_;                                                           \
    }                                                                          \
  } while (0)

#define PZ_CUDA_CHECK_MSG(call, ...)                                                     \
  do {                                                                                   \
    cudaError_t pz_ce_ = (call);                                                         \
    if (pz_ce_ != cudaSuccess) {                                                         \
      pz_status pz_cs_ = pz_cuda_error_ctx(pz_ce_, __FILE__, __LINE__, #call, __VA_ARGS__); \
      pz_log_propagate(__FILE__, __LINE__, #call, pz_cs_);                               \
      return pz_cs_;                                                                     \
    }                                                                                    \
  } while (0)

#define PZ_CUDA_CHECK_GOTO(call, st, label)                                    \
  do {                                                                         \
    cudaError_t pz_ce_ = (call);                                               \
    if (pz_ce_ != cudaSuccess) {                                               \
      (st) = pz_cuda_error(pz_ce_, __FILE__, __LINE__, #call);                 \
      pz_log_propagate(__FILE__, __LINE__, #call, (st));                       \
      goto label;                                                              \
    }                                                                          \
  } while (0)

#define PZ_CUDA_CHECK_MSG_GOTO(call, st, label, ...)                               \
  do {                                                                             \
    cudaError_t pz_ce_ = (call);                                                   \
    if (pz_ce_ != cudaSuccess) {                                                   \
      (st) = pz_cuda_error_ctx(pz_ce_, __FILE__, __LINE__, #call, __VA_ARGS__);    \
      pz_log_propagate(__FILE__, __LINE__, #call, (st));                           \
      goto label;                                                                  \
    }                                                                              \
  } while (0)

#define PZ_CUDA_KEEP(call, st)                                                 \
  do {                                                                         \
    cudaError_t pz_ce_ = (call);                                               \
    if (pz_ce_ != cudaSuccess) {                                               \
      if ((st) == PZ_OK) {                                                     \
        (st) = pz_cuda_error(pz_ce_, __FILE__, __LINE__, #call);               \
        pz_log_propagate(__FILE__, __LINE__, #call, (st));                     \
      } else {                                                                 \
        (void)cudaGetLastError();                                              \
      }                                                                        \
    }                                                                          \
  } while (0)

#define PZ_CUDA_KEEP_MSG(call, st, ...)                                              \
  do {                                                                               \
    cudaError_t pz_ce_ = (call);                                                     \
    if (pz_ce_ != cudaSuccess) {                                                     \
      if ((st) == PZ_OK) {                                                           \
        (st) = pz_cuda_error_ctx(pz_ce_, __FILE__, __LINE__, #call, __VA_ARGS__);    \
        pz_log_propagate(__FILE__, __LINE__, #call, (st));                           \
      } else {                                                                       \
        (void)cudaGetLastError();                                                    \
      }                                                                              \
    }                                                                                \
  } while (0)

#define PZ_CUDA_STATUS(call) pz_cuda_error((call), __FILE__, __LINE__, #call)
#define PZ_CUDA_STATUS_MSG(call, ...) pz_cuda_error_ctx((call), __FILE__, __LINE__, #call, __VA_ARGS__)
#define PZ_CUDA_STATUS_AS(call, status, ...) pz_cuda_error_as((status), (call), __FILE__, __LINE__, #call, __VA_ARGS__)

#define PZ_CUDA_PROBE(call) pz_cuda_probe(call)

#define PZ_CUDA_IGNORE(call) ((void)(call))

#ifdef __cplusplus
}
#endif
#endif
