/* The check both executors make before the seeded fill of a sharded tensor (core/fill_rule.h):
 * that TP rank `rank` of `tp` has a slice of every part of the shard dim inside full_ne. */
#ifndef PZ_CORE_FILL_SHARD_H
#define PZ_CORE_FILL_SHARD_H
#include "core/ir.h"
#include "core/status.h"
#ifdef __cplusplus
extern "C" {
#endif

/* Rank `rank`'s slice of t's shard dim lies inside full_ne (core/ir.h pz_tensor.n_parts): every
 * part either has a whole slice for the rank ((rank + 1) * part_ne <= part_full) or is replicated
 * evenly (part_full a multiple of part_ne, tp * part_ne a multiple of part_full), and the parts
 * add up to ne / full_ne; every other dim is no larger than its full extent.
 * Errors: PZ_ERR_SHAPE, one line naming the tensor, the dim and the part. */
pz_status pz_fill_check_shard(const pz_tensor *t, int rank, int tp);

#ifdef __cplusplus
}
#endif
#endif
