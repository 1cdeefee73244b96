/* CUDA runtime helpers of the decode engine: visible GPUs, free memory, and the memory plan that
 * decides how many layers of a model fit on each GPU (per-rank bytes, split by layer). */
#ifndef PZ_BACKEND_CUDA_RUNTIME_H
#define PZ_BACKEND_CUDA_RUNTIME_H
#include <stdbool.h>
#include <stdint.h>
#include "core/ir.h"
#ifdef __cplusplus
extern "C" {
#endif

/* Visible CUDA devices; 0 when there is no GPU or no driver (never an error). */
int pz_cuda_device_count(void);

/* Free and total bytes of each of the n devices (cudaMemGetInfo). Errors: PZ_ERR_NO_DEVICE,
 * PZ_ERR_CUDA. */
pz_status pz_cuda_mem_info(int n, const int *devices, int64_t *free_bytes, int64_t *total_bytes);

/* Bytes kept free on a GPU of `total_bytes` for what the plan does not count (CUDA context,
 * cuBLAS workspace, communicator inboxes, kernel workspaces, captured graphs):
 * max(2 GiB, 3% of total). */
int64_t pz_cuda_default_reserve(int64_t total_bytes);
/* reserve_mb MiB when reserve_mb >= 0 (PREZERO_CUDA_RESERVE_MB), else pz_cuda_default_reserve. */
int64_t pz_cuda_reserve_for(int64_t total_bytes, int64_t reserve_mb);

/* Per-rank device bytes of graph g, split into the part outside the layers (embedding, final
 * norm, lm_head, inputs, activations) and each layer's part: a tensor belongs to layer L when
 * its name starts with "layers.L." (weights, KV cache, the prezero buffers of its donors).
 * Owner tensors only (views share storage), each rounded up to 256 bytes.
 * layer_bytes[n_layers] (n_layers = g->info.n_layers). Errors: PZ_ERR_INVALID_ARG. */
pz_status pz_cuda_bytes_by_layer(const pz_graph *g, int64_t *fixed_bytes, int64_t *layer_bytes, int n_layers);

/* Largest N in 0..n_layers with fixed + Σ_{L<N} layer_bytes[L] <= budget (bytes). */
int pz_cuda_fit_layers(int64_t fixed_bytes, const int64_t *layer_bytes, int n_layers, int64_t budget);

/* The one memory plan (the engine and compare use it): for graph g on GPUs 0..tp-1, the budget
 * per GPU (the smallest free memory minus the reserve, pz_cuda_reserve_for(total, reserve_mb),
 * minus margin), the bytes the executor allocates for the first N layers (cum[N], N = 0..n_layers:
 * everything outside the layers in cum[0], as pz_cuda_exec_bytes_per_batch counts it when
 * per_batch, else pz_cuda_exec_bytes) and the largest N that fits (fit). Free with
 * pz_cuda_mem_plan_free. Errors: PZ_ERR_NO_DEVICE, PZ_ERR_CUDA, PZ_ERR_OOM (host), PZ_ERR_INVALID_ARG. */
typedef struct pz_cuda_mem_plan {
  int64_t budget;   /* bytes per GPU usable by the executor */
  int n_layers, fit;
  int64_t *cum;     /* [n_layers + 1] */
} pz_cuda_mem_plan;
pz_status pz_cuda_plan_memory(const pz_graph *g, bool per_batch, int tp, int64_t reserve_mb, int64_t margin,
                              pz_cuda_mem_plan *out);
/* The same plan on the n GPUs devices[0..n) (the smallest budget of them): one rank per process
 * plans on its own GPU only (pz_ar_comm_device), so no process makes a context on a GPU it does
 * not use. Same errors, and PZ_ERR_NO_DEVICE for a device that does not exist. */
pz_status pz_cuda_plan_memory_on(const pz_graph *g, bool per_batch, int n, const int *devices, int64_t reserve_mb,
                                 int64_t margin, pz_cuda_mem_plan *out);
void pz_cuda_mem_plan_free(pz_cuda_mem_plan *p);
/* One rank per process (collective over comm's ranks): the layer count every rank can take. Each
 * rank fits its plan p in its share of its GPU's budget (the ranks on one GPU, rank r on GPU
 * r % n_gpus, each allocate their own copy) and *fit = the fewest layers any rank fits, so every
 * rank builds the same graph; p->budget becomes the smallest rank's budget (its share of its GPU), so
 * every rank reports the same usable bytes. Errors: PZ_ERR_INVALID_ARG (also when the ranks' plans differ in layer
 * count or bytes: they were created with different configs), those of pz_ar_comm_allgather_host. */
struct pz_ar_comm;
pz_status pz_cuda_mem_plan_fit_ranks(pz_cuda_mem_plan *p, struct pz_ar_comm *comm, int n_gpus, int *fit);
/* The same plan for a given per-GPU budget (bytes), without asking any device (`prezero plan`
 * models an H200 when none is visible). Errors: PZ_ERR_INVALID_ARG, PZ_ERR_OOM (host). */
pz_status pz_cuda_plan_memory_budget(const pz_graph *g, bool per_batch, int64_t budget, pz_cuda_mem_plan *out);

#ifdef __cplusplus
}
#endif
#endif
