/* One process per TP rank for the CLI's own commands (`prezero run --procs N`): the launcher
 * forks the ranks before any CUDA call, each child continues the command as its rank. */
#ifndef PZ_TOOLS_CLI_RANKS_H
#define PZ_TOOLS_CLI_RANKS_H
#include <stdbool.h>
#include <stddef.h>

/* Forks n (2..PZ_AR_MP_MAX_WORLD) children. In child r: returns r, with id_path[len] = a fresh
 * rendezvous file path (in a private temporary directory) that every child shares, and stdout
 * sent to /dev/null for r > 0 (rank 0 prints). In the parent: waits for every child and returns
 * -1 with *rc = the first non-zero exit code of a child (in rank order; 0 when all succeeded);
 * once one child has failed, the others are given grace_s seconds and then killed (a rank
 * waiting on a failed peer ends with its own timeout first). Rank 0's stderr is shown as it is
 * written; at the end each other failing rank's message that differs from rank 0's (and from
 * an earlier rank's) is printed once. SIGINT / SIGTERM / SIGHUP to the launcher end the ranks
 * (SIGTERM, then SIGKILL after 2 s) and it returns with *rc = 128 + the signal after the clean-up.
 * Removes the directory, and a rendezvous a crashed rank 0 left, at the end.
 * Must be called before this process makes any CUDA call. On a launcher failure (no temporary
 * directory, fork) prints one line naming cmd and returns -1 with *rc = 1. */
int pz_cli_fork_ranks(const char *cmd, int n, double grace_s, char *id_path, size_t len, int *rc);

/* The one-process-per-rank flags of a command: --procs N alone, or --rank R, --world W (2..8)
 * and --id-file F together (sep: any of the three given). Returns 0 when they are consistent,
 * else prints one line "prezero <cmd>: ..." saying what is wrong and returns 2 (usage). */
int pz_cli_ranks_form(const char *cmd, bool procs_given, bool sep, long long rank, long long world, const char *id_file);

#endif
