/* pz_fill_check_shard (core/fill_shard.h): the shard check of the CPU and CUDA seeded fills. */
#include "core/fill_shard.h"
#include <stdbool.h>

pz_status pz_fill_check_shard(const pz_tensor *t, int rank, int tp) {
  if (t->shard_dim >= t->ndim) return pz_error(PZ_ERR_SHAPE, "fill: %s: shard_dim %d out of range", t->name, t->shard_dim);
  if (t->n_parts < 0 || t->n_parts == 1 || t->n_parts > PZ_MAX_PARTS || (t->n_parts && t->shard_dim < 0))
    return pz_error(PZ_ERR_SHAPE, "fill: %s: %d parts (0 or 2..%d along a shard dim)", t->name, t->n_parts, PZ_MAX_PARTS);
  for (int d = 0; d < t->ndim; d++) {
    if (d != t->shard_dim) {
      if (t->full_ne[d] < t->ne[d])
        return pz_error(PZ_ERR_SHAPE, "fill: %s: rank %d's shard exceeds full dim %d (%lld < %lld)", t->name, rank, d,
                        (long long)t->full_ne[d], (long long)t->ne[d]);
      continue;
    }
    const int np = t->n_parts ? t->n_parts : 1;
    int64_t sn = 0, sf = 0;
    for (int p = 0; p < np; p++) {
      const int64_t pn = t->n_parts ? t->part_ne[p] : t->ne[d], pf = t->n_parts ? t->part_full[p] : t->full_ne[d];
      sn += pn;
      sf += pf;
      const bool bad = pn < 1 || pf < pn || (pn * tp > pf ? (pf % pn || (pn * tp) % pf) : (int64_t)(rank + 1) * pn > pf);
      if (bad)
        return pz_error(PZ_ERR_SHAPE, "fill: %s: rank %d's shard exceeds full dim %d (part %d: %lld of %lld, TP %d)", t->name,
                        rank, d, p, (long long)pn, (long long)pf, tp);
    }
    if (sn != t->ne[d] || sf != t->full_ne[d])
      return pz_error(PZ_ERR_SHAPE, "fill: %s: parts of dim %d add up to %lld of %lld (full %lld of %lld)", t->name, d,
                      (long long)sn, (long long)t->ne[d], (long long)sf, (long long)t->full_ne[d]);
  }
  return PZ_OK;
}
