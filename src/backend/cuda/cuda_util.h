/* CUDA helpers shared by the CUDA backend: status-returning check macro with file:line. */
#ifndef PZ_BACKEND_CUDA_UTIL_H
#define PZ_BACKEND_CUDA_UTIL_H
#include <cuda_runtime.h>
#include "core/status.h"

/* Returns PZ_ERR_CUDA (or PZ_ERR_OOM for allocation failures) with the CUDA error text. */
#define PZ_CUDA_CHECK(call)                                                            \
  do {                                                                                 \
    cudaError_t pz_ce_ = (call);                                                       \
    if (pz_ce_ != cudaSuccess) {                                                       \
      pz_status pz_cs_ = pz_ce_ == cudaErrorMemoryAllocation ? PZ_ERR_OOM : PZ_ERR_CUDA; \
      pz_error(pz_cs_, "%s:%d: %s: %s", __FILE__, __LINE__, #call, cudaGetErrorString(pz_ce_)); \
      pz_log_propagate(__FILE__, __LINE__, #call, pz_cs_);                            \
      return pz_cs_;                                                                   \
    }                                                                                  \
  } while (0)
#endif
