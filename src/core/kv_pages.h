/* The paged MLA KV cache (core/ir.h PZ_MLA_KV_CACHE / PZ_MLA_BLOCK_TABLE): where a sequence's
 * position lives, the identity block table the executors start from, the table's checks and the
 * seeded contents of a page pool, shared by the CPU reference, both executors and the CUDA fill.
 *
 * Layout: a page pool [n_pages, PZ_KV_BLOCK = 64, kvw] bf16 (kvw = kv_lora_rank +
 * qk_rope_head_dim) and a block table [m, max_blocks] i32, max_blocks = ceil(max_ctx / 64):
 * position j of sequence i is row j % 64 of page table[i * ld + j / 64]. The table is STATE (it
 * persists across steps; the host changes it between steps, e.g. pz_cpu_exec_set_block_table),
 * not an INPUT copied every step: a real engine changes a few entries when a sequence crosses a
 * block boundary, and the captured CUDA graphs read it where it lies. The contiguous cache of
 * one slab per sequence is the identity table i * max_blocks + b over a pool of m * max_blocks
 * pages (the default of both executors).
 *
 * Seeded contents (the "prompt" KV of `prezero compare`, `run` and the tests): position j < max_ctx
 * of sequence i, column c, holds pz_fill_value(key, (i * max_ctx + j) * kvw + c, scale, 0) as bf16
 * (core/fill_rule.h), wherever the table puts it: the flat index of the former contiguous
 * [m, max_ctx, kvw] cache, so every seeded result is what it was before paging. Rows j >= max_ctx
 * of a sequence's last page and pages no sequence maps are zero. */
#ifndef PZ_CORE_KV_PAGES_H
#define PZ_CORE_KV_PAGES_H
#include <stdbool.h>
#include <stdint.h>
#include "core/fill_rule.h"
#include "core/ir.h"
#ifdef __cplusplus
extern "C" {
#endif

/* Logical blocks of a sequence of max_ctx tokens: ceil(max_ctx / PZ_KV_BLOCK). */
PZ_FILL_HD static inline int64_t pz_kv_max_blocks(int64_t max_ctx) { return (max_ctx + PZ_KV_BLOCK - 1) / PZ_KV_BLOCK; }

/* Element offset (bf16 elements from the cache's element 0) of position j of sequence i.
 * table != NULL: the page pool, (table[i * ld_table + j / 64] * 64 + j % 64) * kvw; NULL: the
 * contiguous cache, i * seq_stride + j * kvw. No range checks (pz_kv_check_table does them). */
PZ_FILL_HD static inline int64_t pz_kv_row_offset(const int32_t *table, int64_t ld_table, int64_t seq_stride, int64_t i,
                                                  int64_t j, int64_t kvw) {
  if (!table) return i * seq_stride + j * kvw;
  return ((int64_t)table[i * ld_table + j / PZ_KV_BLOCK] * PZ_KV_BLOCK + j % PZ_KV_BLOCK) * kvw;
}

/* Flat index of the seeded value of position j, column c of sequence i (see above). */
PZ_FILL_HD static inline uint64_t pz_kv_fill_index(int64_t i, int64_t j, int64_t c, int64_t max_ctx, int64_t kvw) {
  return (uint64_t)((i * max_ctx + j) * kvw + c);
}

/* table[i * ld + b] = i * max_blocks + b for i < m, b < max_blocks (the contiguous layout). */
void pz_kv_identity_table(int32_t *table, int64_t m, int64_t ld, int64_t max_blocks);

/* Checks a block table of m rows (row stride ld >= max_blocks) over a pool of n_pages pages:
 * every entry of a row's first `blocks` columns lies in [0, n_pages), and with `unique` no page
 * appears twice among them (two sequences writing one page would overwrite each other's rows).
 * Errors: PZ_ERR_INVALID_ARG naming the first bad entry. */
pz_status pz_kv_check_table(const int32_t *table, int64_t m, int64_t ld, int64_t blocks, int64_t n_pages, bool unique);

/* The block-table tensor and pool shape of MLA node n of g: *pool the KV_CACHE tensor, *table the
 * BLOCK_TABLE tensor (NULL when the node has none: a contiguous cache). Returns false when n is
 * no MLA_ATTN node. */
bool pz_kv_node_tensors(const pz_graph *g, const pz_node *n, const pz_tensor **pool, const pz_tensor **table);

/* The MLA node of g whose KV_CACHE is tensor `pool_id` and that has a block table, or NULL. */
const pz_node *pz_kv_paged_node(const pz_graph *g, int pool_id);

/* Checks a paged MLA node's pool and table against its params: pool bf16 [n_pages, 64, kvw]
 * contiguous, table i32 [>= m, >= ceil(max_ctx / 64)] with unit column stride (m = the rows the
 * step runs). Errors: PZ_ERR_SHAPE with a one-line message naming the tensor. */
pz_status pz_kv_check_shapes(const pz_mla_params *p, const pz_tensor *pool, const pz_tensor *table, int64_t m,
                             const char *who);

/* Writes the seeded contents (see above) of sequences [i0, i1) of a pool through `table` (m rows
 * of stride ld, max_blocks = ceil(max_ctx / 64) used per row): every row of every page a
 * sequence maps, zero beyond max_ctx. Pages no sequence maps are left as they are. key =
 * pz_fill_name_key(seed, pool name), scale = init_scale or 1. Host code (the CPU executor; the
 * CUDA fill computes the same bits on the device). */
void pz_kv_fill_pages_host(uint16_t *pool, const int32_t *table, int64_t ld, int64_t i0, int64_t i1, int64_t max_ctx,
                           int64_t kvw, uint64_t key, float scale);
#ifdef __cplusplus
}
#endif
#endif
