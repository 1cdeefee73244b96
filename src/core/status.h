/* Internal status helpers: set the thread's error message and propagate with file:line. */
#ifndef PZ_CORE_STATUS_H
#define PZ_CORE_STATUS_H
#include "prezero.h"
#include <stdio.h>
#ifdef __cplusplus
extern "C" {
#endif

/* Records a printf-style message for pz_last_error() and returns s. */
pz_status pz_error(pz_status s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Logs "file:line: what failed" to stderr when PREZERO_LOG_ERRORS=1 (propagation trace). */
void pz_log_propagate(const char *file, int line, const char *expr, pz_status s);

/* Propagates a non-OK status to the caller, logging each level (NCCL style). */
#define PZ_CHECK(call)                                                 \
  do {                                                                 \
    pz_status pz_check_s_ = (call);                                    \
    if (pz_check_s_ != PZ_OK) {                                        \
      pz_log_propagate(__FILE__, __LINE__, #call, pz_check_s_);        \
      return pz_check_s_;                                              \
    }                                                                  \
  } while (0)

/* Same, but jumps to a cleanup label after storing the status in `st`. */
#define PZ_CHECK_GOTO(call, st, label)                                 \
  do {                                                                 \
    (st) = (call);                                                     \
    if ((st) != PZ_OK) {                                               \
      pz_log_propagate(__FILE__, __LINE__, #call, (st));               \
      goto label;                                                      \
    }                                                                  \
  } while (0)
#ifdef __cplusplus
}
#endif
#endif
