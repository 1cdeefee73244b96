/* Pass manager placeholder: no passes registered yet. */
#include "passes/passes.h"
#include <stdlib.h>
#include <string.h>
int pz_prezero_flag(const pz_pass_opts *o) {
  if (o && o->prezero >= 0) return o->prezero;
  const char *e = getenv("PREZERO_ENABLE");
  return e && e[0] == '1';
}
pz_status pz_run_passes(pz_graph *g, const pz_pass_opts *o, pz_pass_stats *stats, int *n_stats) {
  if (n_stats) *n_stats = 0;
  if (pz_prezero_flag(o)) return pz_error(PZ_ERR_UNSUPPORTED, "the prezero pass is not implemented yet");
  return pz_graph_verify(g);
}
