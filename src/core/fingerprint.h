/* Fingerprints of decode graphs, for checking that the TP ranks of one group (one process each)
 * built the same graph before their first collective. */
#ifndef PZ_CORE_FINGERPRINT_H
#define PZ_CORE_FINGERPRINT_H
#include <stddef.h>
#include <stdint.h>

#include "core/ir.h"
#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* FNV-1a, 64-bit (Fowler, Noll, Vo: offset basis 0xcbf29ce484222325, prime 0x100000001b3): h is the
 * running hash (PZ_FNV1A64_OFFSET to start), data n bytes. Not cryptographic. The host code's one
 * FNV-1a (compare's CUPTI keys, the tests' hashes); core/fill_rule.h keeps its own inline copy over
 * a NUL-terminated name because it also runs on the device. */
#define PZ_FNV1A64_OFFSET 0xcbf29ce484222325ULL
uint64_t pz_fnv1a64(uint64_t h, const void *data, size_t n);

/* *fp = FNV-1a of pz_graph_dump_text(g) (every node's op and name, every tensor it reads or writes:
 * shape, dtype, view; the prezero buffer summary), then every field of every node's parameters
 * exactly (floats as hex: rope, eps, softmax scale, routed_scaling_factor, ...) and each tensor's
 * seeded-fill scale and offset.
 * Equal graphs give equal fingerprints on every host (the dump is deterministic); a different layer
 * count, shape, pass outcome or prezero slot gives a different one (up to 64-bit collisions).
 * Errors: PZ_ERR_INVALID_ARG (NULL), PZ_ERR_OOM (no memory for the dump), PZ_ERR_IO (the dump failed). */
pz_status pz_graph_fingerprint(const pz_graph *g, uint64_t *fp);

#ifdef __cplusplus
}
#endif
#endif
