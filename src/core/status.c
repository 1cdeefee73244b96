/* pz_status strings and the per-thread last-error message. */
#include "core/status.h"
#include "core/options.h"
#include "core/utf8.h"
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

static _Thread_local char pz_err_msg[1024];

const char *pz_status_string(pz_status s) {
  static const char *const texts[] = {
#define PZ_STATUS(name, text) text,
#include "prezero_status.def"
#undef PZ_STATUS
  };
  if ((int)s < 0 || s >= PZ_STATUS_COUNT) return "unknown status";
  return texts[s];
}

const char *pz_last_error(void) { return pz_err_msg; }

pz_status pz_error(pz_status s, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(pz_err_msg, sizeof pz_err_msg, fmt, ap);
  va_end(ap);
  /* Messages quote paths and config strings, cut with %.Ns or at the buffer's end: never hand a
   * caller (or a terminal, or a JSON log) a broken or raw non-UTF-8 byte. */
  pz_utf8_scrub(pz_err_msg);
  return s;
}

void pz_log_propagate(const char *file, int line, const char *expr, pz_status s) {
  if (pz_runtime_log_errors()) /* PREZERO_LOG_ERRORS=1 (core/options.h) */
    fprintf(stderr, "prezero: %s:%d: %s -> %s (%s)\n", file, line, expr,
            pz_status_string(s), pz_err_msg);
}
