/* libFuzzer target: pz_tuner_table_load_text (the GEMM tuner-table JSON a cache file holds).
 * Seed corpus: a scratch copy of the tables in src/backend/tables (libFuzzer writes into it). A kept
 * entry outside the ranges gemm_table.h documents aborts (a finding). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "backend/gemm_table.h"
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  pz_tuner_table t;
  memset(&t, 0, sizeof t);
  strcpy(t.device, "NVIDIA H200");
  t.sm_count = 132;
  if (pz_tuner_table_load_text(&t, (const char *)data, size, NULL) != PZ_OK) abort();
  for (int i = 0; i < t.count; i++) {
    const pz_tuner_entry *e = &t.e[i];
    if (e->m_bucket < 1 || e->m_bucket > 256 || (e->m_bucket & (e->m_bucket - 1)) || e->n % 64 || e->k % 64) abort();
    for (int f = 1; f < PZ_GEMM_FLAVOUR_COUNT; f++)
      if (e->cfg[f].splits && (e->cfg[f].splits > 4096 || e->cfg[f].wt < 1 || e->cfg[f].warps < 1 || e->cfg[f].wn > 4 || (e->cfg[f].bn && (e->cfg[f].wn != 3 || e->cfg[f].bn < 16 || e->cfg[f].bn > 256 || (e->cfg[f].bn & (e->cfg[f].bn - 1)))))) abort();
  }
  pz_tuner_table_free(&t);
  return 0;
}
