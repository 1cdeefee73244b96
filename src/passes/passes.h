/* Pass manager: runs the ordered list of graph passes (each switchable off with
 * PREZERO_DISABLE_PASSES=name,...), verify() after each, optional before/after dumps
 * (PREZERO_DUMP_GRAPH=dir, text + DOT), and per-pass statistics. */
#ifndef PZ_PASSES_H
#define PZ_PASSES_H
#include <stdio.h>
#include "core/ir.h"

/* Everything the passes read: no environment (pz_pass_opts_from_env fills these from it). */
typedef struct pz_pass_opts {
  int prezero;            /* -1 or 0: off; 1: on (PREZERO_ENABLE) */
  const char *dump_dir;   /* NULL or "": no dumps (PREZERO_DUMP_GRAPH) */
  FILE *log;              /* statistics lines go here when non-NULL */
  const char *disable;    /* NULL, or comma-separated pass names or "all" to skip (PREZERO_DISABLE_PASSES) */
  int attn_slots;         /* -1 or 1: thread slices into the attention op's slots; 0: not (PREZERO_ATTN_SLOTS) */
} pz_pass_opts;
#define PZ_PASS_OPTS_INIT {.prezero = -1, .dump_dir = NULL, .log = NULL, .disable = NULL, .attn_slots = -1}

#define PZ_MAX_PASSES 8
typedef struct pz_pass_stats {
  char name[32];
  bool ran;               /* false when switched off */
  int matched, rewritten; /* donors matched, nodes rewritten */
} pz_pass_stats;

/* Runs every enabled pass on g in place. stats (may be NULL) receives up to PZ_MAX_PASSES
 * entries, *n_stats their count. Errors: PZ_ERR_VERIFY if a pass breaks the graph, PZ_ERR_IO
 * for dump failures, PZ_ERR_OOM, PZ_ERR_INVALID_ARG when opts->disable (PREZERO_DISABLE_PASSES)
 * names something that is neither a pass nor "all". */
pz_status pz_run_passes(pz_graph *g, const pz_pass_opts *o, pz_pass_stats *stats, int *n_stats);
/* The effective prezero flag for o (1 only when o->prezero is 1). Part of any captured-graph
 * cache key. */
int pz_prezero_flag(const pz_pass_opts *o);
/* Non-zero when the list (comma-separated names, or "all"; NULL = none) names this pass. */
int pz_pass_disabled_in(const char *list, const char *name);
/* PZ_OK when every name of the list (comma-separated, NULL = none) is a pass or "all"; else
 * PZ_ERR_INVALID_ARG with a one-line message naming PREZERO_DISABLE_PASSES (what pz_run_passes
 * refuses), so commands that never run the passes refuse the same list. */
pz_status pz_pass_check_disable(const char *list);
/* Fills the pass options from run-time options ro (core/options.h): prezero (unless *po already
 * says 0 or 1), dump_dir, disable and attn_slots. ro's strings must outlive po. */
struct pz_runtime_opts;
void pz_pass_opts_apply(pz_pass_opts *po, const struct pz_runtime_opts *ro);
/* The passes, in order: "prezero" (runs only when pz_prezero_flag() is on; see
 * passes/prezero.h). Dumps: <dir>/NN-<pass>.{before,after}.{txt,dot}, NN = 1-based position. */
#endif
