/* NCCL fallback of the donor: ncclAllReduce (in place on the partials) + residual/RMSNorm
 * kernel + cudaMemset2DAsync of the fill range. Used when P2P is missing and as the benchmark
 * baseline. NCCL is loaded at run time (dlopen), so the library builds without it. */
#ifndef PZ_BACKEND_CUDA_AR_NCCL_H
#define PZ_BACKEND_CUDA_AR_NCCL_H
#include <cuda_runtime.h>
#include "backend/cuda/ar_fused.h"
#include "backend/cuda/comm.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pz_nccl pz_nccl;

/* Loads NCCL (lib_name when non-empty: PREZERO_NCCL_LIB; else libnccl.so.2, else libnccl.so) and creates one NCCL
 * communicator per rank of c with ncclCommInitAll over c's devices. Sets NCCL_NVLS_ENABLE=0
 * (NVLink multicast must stay off). Errors: PZ_ERR_UNSUPPORTED (no NCCL library: the message
 * says how to point at one), PZ_ERR_NCCL (with NCCL's error string), PZ_ERR_OOM. */
pz_status pz_nccl_create(const pz_comm *c, const char *lib_name, pz_nccl **out);
/* Destroys the communicators and frees n (the NCCL library stays loaded); NULL is ignored. */
void pz_nccl_destroy(pz_nccl *n);

/* For every rank r of c: ncclAllReduce(sum, f32) of args[r].partial in place (m*H elements,
 * requires ld_partial == H), then the residual + RMSNorm kernel (pz_rmsnorm_residual_launch,
 * same formula as the fused kernel), then cudaMemset2DAsync zeroing rows 0..m-1, columns
 * [0, fill_all ? n_total : n_base) of args[r].fill when set. streams[r] is rank r's stream.
 * Errors: PZ_ERR_INVALID_ARG, PZ_ERR_NCCL, PZ_ERR_CUDA. */
pz_status pz_ar_rmsnorm_nccl_launch_all(pz_nccl *n, const pz_comm *c, const pz_ar_rmsnorm_args *args,
                                        const cudaStream_t *streams);

#ifdef __cplusplus
}
#endif
#endif
