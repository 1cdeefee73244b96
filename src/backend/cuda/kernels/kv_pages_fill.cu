/* Device fill of paged MLA KV caches (kv_pages_fill.h): the rule of core/kv_pages.h on top of
 * core/fill_rule.h, so the bits are the CPU executor's (cpu_exec.c fill_paged). */
extern "C" {
#include "core/status.h" /* C headers without C++ guards */
#include "core/ir.h"
}
#include "backend/cuda/kv_pages_fill.h"
#include "core/fill_rule.h"
#include "core/kv_pages.h"
#include "backend/cuda/cuda_util.h"

namespace {

__global__ void identity_kernel(int32_t *table, int64_t rows, int64_t ld, int64_t mb) {
  for (int64_t x = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; x < rows * mb; x += (int64_t)gridDim.x * blockDim.x) {
    const int64_t i = x / mb, b = x - i * mb;
    table[i * ld + b] = (int32_t)x;
  }
}

/* One thread per 8 consecutive columns of one logical row (i, j): 16-byte stores. */
__global__ void pages_kernel(uint16_t *pool, const int32_t *table, int64_t rows, int64_t ld, int64_t mb, int64_t max_ctx,
                             int64_t kvw, uint64_t key, float scale) {
  const int64_t c8 = kvw / 8, per_seq = mb * PZ_KV_BLOCK * c8;
  for (int64_t x = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; x < rows * per_seq; x += (int64_t)gridDim.x * blockDim.x) {
    const int64_t i = x / per_seq, rem = x - i * per_seq, j = rem / c8, c = (rem - j * c8) * 8;
    uint16_t *dst = pool + pz_kv_row_offset(table, ld, 0, i, j, kvw) + c;
    uint32_t b[8];
    for (int e = 0; e < 8; e++)
      b[e] = j < max_ctx ? pz_fill_bits(key, pz_kv_fill_index(i, j, c + e, max_ctx, kvw), scale, 0.0f, PZ_BF16) : 0u;
    *(uint4 *)dst = make_uint4(b[0] | b[1] << 16, b[2] | b[3] << 16, b[4] | b[5] << 16, b[6] | b[7] << 16);
  }
}

unsigned grid_for(int64_t n) {
  int64_t blocks = (n + 255) / 256;
  return (unsigned)(blocks < 1 ? 1 : blocks > 65536 ? 65536 : blocks);
}

} // namespace

extern "C" pz_status pz_kv_pages_fill_launch(uint16_t *pool, int64_t n_pages, int32_t *table, int64_t rows, int64_t ld,
                                             int64_t max_ctx, int64_t kvw, uint64_t key, float scale, bool set_identity,
                                             cudaStream_t s) {
  if (!pool || !table || n_pages < 1 || rows < 0 || max_ctx < 1) return pz_error(PZ_ERR_INVALID_ARG, "kv pages fill: NULL or empty");
  if ((uintptr_t)pool & 15) return pz_error(PZ_ERR_INVALID_ARG, "kv pages fill: pool must be 16-byte aligned");
  if (kvw < 8 || kvw % 8) return pz_error(PZ_ERR_SHAPE, "kv pages fill: row width %lld is not a multiple of 8", (long long)kvw);
  const int64_t mb = pz_kv_max_blocks(max_ctx);
  if (ld < mb) return pz_error(PZ_ERR_INVALID_ARG, "kv pages fill: table stride %lld < %lld blocks", (long long)ld, (long long)mb);
  if (rows == 0) return PZ_OK;
  if (set_identity) {
    identity_kernel<<<grid_for(rows * mb), 256, 0, s>>>(table, rows, ld, mb);
    PZ_CUDA_CHECK(cudaGetLastError());
  }
  PZ_CUDA_CHECK(cudaMemsetAsync(pool, 0, sizeof(uint16_t) * (size_t)(n_pages * PZ_KV_BLOCK * kvw), s));
  pages_kernel<<<grid_for(rows * mb * PZ_KV_BLOCK * (kvw / 8)), 256, 0, s>>>(pool, table, rows, ld, mb, max_ctx, kvw, key, scale);
  PZ_CUDA_CHECK(cudaGetLastError());
  return PZ_OK;
}

extern "C" pz_status pz_cuda_fill_paged(const pz_graph *g, void *const *data, uint64_t seed, cudaStream_t s) {
  if (!g || !data) return pz_error(PZ_ERR_INVALID_ARG, "kv pages fill: NULL graph or data");
  for (int k = 0; k < g->n_nodes; k++) {
    const pz_node *n = &g->nodes[k];
    const pz_tensor *pool, *bt;
    if (!pz_kv_node_tensors(g, n, &pool, &bt) || !pool || !bt) continue;
    PZ_CHECK(pz_kv_check_shapes(&n->p.mla, pool, bt, g->info.m, n->name));
    if (pool->ne[0] < bt->ne[0] * pz_kv_max_blocks(n->p.mla.max_ctx))
      return pz_error(PZ_ERR_SHAPE, "%s: pool %s has %lld pages, fewer than the identity table of %lld rows needs", n->name,
                      pool->name, (long long)pool->ne[0], (long long)bt->ne[0]);
    PZ_CHECK(pz_kv_pages_fill_launch((uint16_t *)data[pool->id], pool->ne[0], (int32_t *)data[bt->id], bt->ne[0],
                                     bt->stride[0], n->p.mla.max_ctx, pool->ne[2], pz_fill_name_key(seed, pool->name),
                                     pool->init_scale != 0.0f ? pool->init_scale : 1.0f, true, s));
  }
  return PZ_OK;
}
