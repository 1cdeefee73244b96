/* Pass manager: runs the ordered list of graph passes (each switchable off with
 * PREZERO_DISABLE_PASSES=name,...), verify() after each, optional before/after dumps
 * (PREZERO_DUMP_GRAPH=dir, text + DOT), and per-pass statistics. */
#ifndef PZ_PASSES_H
#define PZ_PASSES_H
#include <stdio.h>
#include "core/ir.h"

typedef struct pz_pass_opts {
  int prezero;            /* -1: from PREZERO_ENABLE (default off); 0: off; 1: on */
  const char *dump_dir;   /* NULL: from PREZERO_DUMP_GRAPH (unset: no dumps) */
  FILE *log;              /* statistics lines go here when non-NULL */
} pz_pass_opts;
#define PZ_PASS_OPTS_INIT {.prezero = -1, .dump_dir = NULL, .log = NULL}

#define PZ_MAX_PASSES 8
typedef struct pz_pass_stats {
  char name[32];
  bool ran;               /* false when switched off */
  int matched, rewritten; /* donors matched, nodes rewritten */
} pz_pass_stats;

/* Runs every enabled pass on g in place. stats (may be NULL) receives up to PZ_MAX_PASSES
 * entries, *n_stats their count. Errors: PZ_ERR_VERIFY if a pass breaks the graph, PZ_ERR_IO
 * for dump failures, PZ_ERR_OOM. */
pz_status pz_run_passes(pz_graph *g, const pz_pass_opts *o, pz_pass_stats *stats, int *n_stats);
/* The effective prezero flag for o (resolves -1 through PREZERO_ENABLE). Part of any
 * captured-graph cache key. */
int pz_prezero_flag(const pz_pass_opts *o);
/* Non-zero when PREZERO_DISABLE_PASSES (comma-separated names, or "all") names this pass. */
int pz_pass_disabled(const char *name);
/* The passes, in order: "prezero" (runs only when pz_prezero_flag() is on; see
 * passes/prezero.h). Dumps: <dir>/NN-<pass>.{before,after}.{txt,dot}, NN = 1-based position. */
#endif
