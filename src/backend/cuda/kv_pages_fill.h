/* Device fill of the paged MLA KV caches (core/kv_pages.h): the identity block table and the
 * seeded page contents through a table, the same bits as the CPU executor's fill_paged. */
#ifndef PZ_BACKEND_CUDA_KV_PAGES_FILL_H
#define PZ_BACKEND_CUDA_KV_PAGES_FILL_H
#include <stdbool.h>
#include <stdint.h>
#include <cuda_runtime.h>
#include "core/ir.h"
#ifdef __cplusplus
extern "C" {
#endif

/* Enqueues on stream s (current device): with set_identity, table[i*ld + b] = i*mb + b for
 * i < rows, b < mb = ceil(max_ctx / 64); then the pool [n_pages, 64, kvw] bf16 zeroed and every
 * row of every page that sequences 0..rows-1 map through `table` written with the seeded
 * contents of core/kv_pages.h (key = pz_fill_name_key(seed, pool name), scale = init_scale or 1;
 * zero beyond max_ctx). Device pointers; the table's entries must lie in [0, n_pages) and not
 * repeat (pz_kv_check_table on the host copy; not checked here). Errors: PZ_ERR_INVALID_ARG (NULL,
 * misaligned pool), PZ_ERR_SHAPE (kvw not a multiple of 8), PZ_ERR_CUDA. */
pz_status pz_kv_pages_fill_launch(uint16_t *pool, int64_t n_pages, int32_t *table, int64_t rows, int64_t ld,
                                  int64_t max_ctx, int64_t kvw, uint64_t key, float scale, bool set_identity,
                                  cudaStream_t s);

/* The executor's fill of one rank's paged MLA caches: for every MLA node of g with a block table
 * (pz_kv_paged_node), its table (data[table id], device) set to the identity and its pool
 * (data[pool id]) filled through it by pz_kv_pages_fill_launch. data[t]: the rank's device
 * pointer of tensor t. Errors: PZ_ERR_SHAPE (pz_kv_check_shapes), those of the launch. */
pz_status pz_cuda_fill_paged(const pz_graph *g, void *const *data, uint64_t seed, cudaStream_t s);
#ifdef __cplusplus
}
#endif
#endif
