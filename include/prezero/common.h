/* prezero public C11 API, common part: version, the export macro, status codes and the error
 * message of the last failing call. Included by every public header (prezero.h,
 * prezero/gemm.h, prezero/gate.h, prezero/graph.h). */
#ifndef PREZERO_COMMON_H
#define PREZERO_COMMON_H
#include <stddef.h>
#include <stdint.h>

/* The library and CLI version (`prezero --version`); also the shared library's version (SONAME
 * libprezero.so.<major>.<minor>, see CMakeLists.txt). */
#define PZ_VERSION "0.2.0"

/* Marks the public API: the shared library is built with hidden default visibility
 * (-fvisibility=hidden), so only declarations carrying PZ_API are exported. */
#if defined(_WIN32)
#define PZ_API
#elif defined(__GNUC__) || defined(__clang__)
#define PZ_API __attribute__((visibility("default")))
#else
#define PZ_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

typedef enum pz_status {
#define PZ_STATUS(name, text) name,
#include "prezero_status.def"
#undef PZ_STATUS
  PZ_STATUS_COUNT
} pz_status;

/* Short fixed text of a status value ("ok", "out of memory", ...). Never NULL. */
PZ_API const char *pz_status_string(pz_status s);
/* Detailed message of the last failing call on this thread ("" if none). Never NULL. */
PZ_API const char *pz_last_error(void);

/* Element types of the public kernel-level API (prezero/gemm.h, prezero/gate.h, prezero/graph.h). */
typedef enum pz_elem_type {
  PZ_ELEM_F32 = 0,   /* IEEE binary32, 4 bytes */
  PZ_ELEM_BF16 = 1,  /* bfloat16, 2 bytes (upper half of a binary32) */
  PZ_ELEM_I32 = 2    /* int32, 4 bytes (token ids, positions) */
} pz_elem_type;

#ifdef __cplusplus
}
#endif
#endif /* PREZERO_COMMON_H */
