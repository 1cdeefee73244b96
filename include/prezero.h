/* prezero public C11 API: status codes, opaque engine handle and config structs.
 * Every call returns a pz_status; pz_last_error() gives the detailed message of the most
 * recent failure on the calling thread. Nothing in the library calls exit() or abort(). */
#ifndef PREZERO_H
#define PREZERO_H
#include <stddef.h>
#include <stdint.h>
#ifdef __cplusplus
extern "C" {
#endif

typedef enum pz_status {
#define PZ_STATUS(name, text) name,
#include "../src/core/status.def"
#undef PZ_STATUS
  PZ_STATUS_COUNT
} pz_status;

/* Short fixed text of a status value ("ok", "out of memory", ...). Never NULL. */
const char *pz_status_string(pz_status s);
/* Detailed message of the last failing call on this thread ("" if none). Never NULL. */
const char *pz_last_error(void);

#ifdef __cplusplus
}
#endif
#endif /* PREZERO_H */
