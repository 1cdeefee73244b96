/* The table behind backend.h: what one backend implementation provides. Included only by
 * backend.c and the implementations (backend/cpu/backend_cpu.c, backend/cuda/backend_cuda.c). */
#ifndef PZ_BACKEND_BACKEND_IMPL_H
#define PZ_BACKEND_BACKEND_IMPL_H
#include "backend/backend.h"
#ifdef __cplusplus
extern "C" {
#endif

/* One backend's entries over its own handle `x` (the executor). create, step, logits, time_step
 * and destroy are required; an entry left NULL means "not on this backend": backend.c then
 * answers PZ_ERR_UNSUPPORTED (optional entries) or the neutral value of the query (capture: PZ_OK,
 * padded_m: m, device_bytes: 0, gemm_table: "", per_batch: false, bad_row: -1). Arguments reach an entry
 * already checked for NULL b. */
typedef struct pz_backend_vtbl {
  pz_backend_kind kind;
  const char *name;
  int max_tp;
  pz_status (*create)(const pz_graph *g, const pz_backend_opts *o, void **x);
  pz_status (*capture)(void *x, int64_t m);
  pz_status (*step)(void *x, int64_t m, const int32_t *tokens, const int32_t *pos, int32_t *next);
  pz_status (*logits)(const void *x, int64_t m, float *out);
  pz_status (*time_step)(void *x, int64_t M, int64_t rows, int32_t pos_all, int iters, int reps, double *us_median);
  void (*destroy)(void *x);
  int64_t (*padded_m)(const void *x, int64_t m);
  const pz_device_desc *(*device_desc)(const void *x);
  int64_t (*device_bytes)(const void *x);
  void (*gemm_table)(const void *x, char *buf, size_t len);
  bool (*per_batch)(const void *x);
  pz_status (*set_prezero)(void *x, int on);
  pz_status (*set_gemm_force)(void *x, int flavour);
  pz_status (*plan)(void *x, int64_t m, struct pz_prezero_report *rep, const pz_graph **g);
  int64_t (*bad_row)(const void *x, int *is_nan);
} pz_backend_vtbl;

extern const pz_backend_vtbl pz_backend_cpu_vtbl;  /* backend/cpu/backend_cpu.c */
#ifdef PZ_HAVE_CUDA
extern const pz_backend_vtbl pz_backend_cuda_vtbl; /* backend/cuda/backend_cuda.c */
#endif

#ifdef __cplusplus
}
#endif
#endif
