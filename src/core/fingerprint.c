/* A 64-bit fingerprint of a decode graph: FNV-1a over its text dump (pz_graph_dump_text), so two
 * graphs agree exactly when every node, parameter, shape, dtype and view the dump prints agrees. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>

#include "core/fingerprint.h"

uint64_t pz_fnv1a64(uint64_t h, const void *data, size_t n) {
  const unsigned char *p = (const unsigned char *)data;
  for (size_t i = 0; i < n; i++) {
    h ^= p[i];
    h *= 0x100000001b3ULL; /* the 64-bit FNV prime */
  }
  return h;
}

pz_status pz_graph_fingerprint(const pz_graph *g, uint64_t *fp) {
  if (!g || !fp) return pz_error(PZ_ERR_INVALID_ARG, "graph fingerprint: NULL graph or result");
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  if (!f) return pz_error(PZ_ERR_OOM, "graph fingerprint: cannot open a memory stream");
  pz_status st = pz_graph_dump_text(g, f);
  if (fclose(f) != 0 && st == PZ_OK) st = pz_error(PZ_ERR_OOM, "graph fingerprint: the dump did not fit in memory");
  if (st == PZ_OK) *fp = pz_fnv1a64(PZ_FNV1A64_OFFSET, buf, len);
  free(buf);
  return st;
}
