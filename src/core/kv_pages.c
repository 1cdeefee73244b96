/* Paged MLA KV cache helpers (kv_pages.h): identity table, table checks, shape checks, the
 * seeded page fill on the host. */
#include "core/kv_pages.h"
#include <stdlib.h>
#include <string.h>

void pz_kv_identity_table(int32_t *table, int64_t m, int64_t ld, int64_t max_blocks) {
  for (int64_t i = 0; i < m; i++)
    for (int64_t b = 0; b < max_blocks; b++) table[i * ld + b] = (int32_t)(i * max_blocks + b);
}

pz_status pz_kv_check_table(const int32_t *table, int64_t m, int64_t ld, int64_t blocks, int64_t n_pages, bool unique) {
  if (!table || m < 0 || blocks < 0 || ld < blocks || n_pages < 1 || n_pages > INT32_MAX)
    return pz_error(PZ_ERR_INVALID_ARG, "block table: NULL, or %lld rows of %lld blocks (stride %lld) over %lld pages",
                    (long long)m, (long long)blocks, (long long)ld, (long long)n_pages);
  uint8_t *seen = unique ? calloc((size_t)n_pages, 1) : NULL;
  if (unique && !seen) return pz_error(PZ_ERR_OOM, "block table: check scratch");
  pz_status st = PZ_OK;
  for (int64_t i = 0; i < m && st == PZ_OK; i++)
    for (int64_t b = 0; b < blocks; b++) {
      const int32_t pg = table[i * ld + b];
      if (pg < 0 || pg >= n_pages) {
        st = pz_error(PZ_ERR_INVALID_ARG, "block table: sequence %lld block %lld maps page %d outside [0, %lld)",
                      (long long)i, (long long)b, pg, (long long)n_pages);
        break;
      }
      if (unique && seen[pg]++) {
        st = pz_error(PZ_ERR_INVALID_ARG, "block table: page %d is mapped twice (again by sequence %lld block %lld)", pg,
                      (long long)i, (long long)b);
        break;
      }
    }
  free(seen);
  return st;
}

bool pz_kv_node_tensors(const pz_graph *g, const pz_node *n, const pz_tensor **pool, const pz_tensor **table) {
  if (!g || !n || n->op != PZ_OP_MLA_ATTN || n->n_src < PZ_MLA_NSRC) return false;
  const int pi = n->src[PZ_MLA_KV_CACHE], ti = n->src[PZ_MLA_BLOCK_TABLE];
  if (pool) *pool = pi >= 0 && pi < g->n_tensors ? &g->tensors[pi] : NULL;
  if (table) *table = ti >= 0 && ti < g->n_tensors ? &g->tensors[ti] : NULL;
  return true;
}

const pz_node *pz_kv_paged_node(const pz_graph *g, int pool_id) {
  if (!g || pool_id < 0) return NULL;
  for (int k = 0; k < g->n_nodes; k++) {
    const pz_node *n = &g->nodes[k];
    const pz_tensor *pool, *table;
    if (pz_kv_node_tensors(g, n, &pool, &table) && pool && table && pool->id == pool_id) return n;
  }
  return NULL;
}

pz_status pz_kv_check_shapes(const pz_mla_params *p, const pz_tensor *pool, const pz_tensor *table, int64_t m,
                             const char *who) {
  const int64_t kvw = p->kv_lora_rank + p->qk_rope_head_dim, mb = pz_kv_max_blocks(p->max_ctx);
  if (!pool || pool->dtype != PZ_BF16 || pool->ndim != 3 || pool->ne[1] != PZ_KV_BLOCK || pool->ne[2] != kvw ||
      !pz_tensor_contiguous(pool) || pool->ne[0] < 1 || pool->ne[0] > INT32_MAX)
    return pz_error(PZ_ERR_SHAPE, "%s: paged kv cache %s must be contiguous bf16 [n_pages, %d, %lld]", who,
                    pool ? pool->name : "(none)", PZ_KV_BLOCK, (long long)kvw);
  if (!table || table->dtype != PZ_I32 || table->ndim != 2 || table->ne[0] < m || table->ne[1] < mb ||
      table->stride[1] != 1 || table->stride[0] < table->ne[1])
    return pz_error(PZ_ERR_SHAPE, "%s: block table %s must be i32 [>= %lld, >= %lld] with unit column stride", who,
                    table ? table->name : "(none)", (long long)m, (long long)mb);
  return PZ_OK;
}

void pz_kv_fill_pages_host(uint16_t *pool, const int32_t *table, int64_t ld, int64_t i0, int64_t i1, int64_t max_ctx,
                           int64_t kvw, uint64_t key, float scale) {
  const int64_t mb = pz_kv_max_blocks(max_ctx);
  for (int64_t i = i0; i < i1; i++)
    for (int64_t b = 0; b < mb; b++) {
      uint16_t *page = pool + (int64_t)table[i * ld + b] * PZ_KV_BLOCK * kvw;
      for (int64_t t = 0; t < PZ_KV_BLOCK; t++) {
        const int64_t j = b * PZ_KV_BLOCK + t;
        uint16_t *row = page + t * kvw;
        if (j >= max_ctx) {
          memset(row, 0, sizeof(uint16_t) * (size_t)kvw);
          continue;
        }
        for (int64_t c = 0; c < kvw; c++)
          row[c] = pz_fill_bf16_bits(pz_fill_value(key, pz_kv_fill_index(i, j, c, max_ctx, kvw), scale, 0.0f));
      }
    }
}
