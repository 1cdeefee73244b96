/* prezero CLI: dispatches to run | graph | compare | bench <gemm|ar|attn|moe|step>. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include "cli.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: prezero <command> [options]\n"
          "  run      decode steps of a model preset or config.json (default: tiny, CPU)\n"
          "  graph    print the rank-0 decode graph (text, or --dot FILE)\n"
          "  compare  prezero ON vs OFF end to end (GPU)\n"
          "  bench    kernel benchmarks: bench gemm | ar | attn | moe | step (GPU)\n"
          "run 'prezero <command> --help' for its options\n");
}

/* A command that succeeded but whose standard output could not be written (a full disk, a
 * closed pipe) fails too: the results it printed are lost. */
static int finish(const char *cmd, int rc) {
  errno = 0;
  int flush_failed = fflush(stdout) != 0;
  int err = flush_failed ? errno : 0;
  if (rc == 0 && (flush_failed || ferror(stdout))) {
    fprintf(stderr, "prezero %s: cannot write standard output (%s); check where the output goes\n", cmd,
            err ? strerror(err) : "write error");
    return 1;
  }
  return rc;
}

static int dispatch(int argc, char **argv);

int main(int argc, char **argv) {
  int rc = dispatch(argc, argv);
  return finish(argc < 2 ? "run" : argv[1], rc);
}

static int dispatch(int argc, char **argv) {
  if (argc < 2) return pz_cmd_run(argc, argv); /* no command: decode the embedded default */
  const char *c = argv[1];
  if (!strcmp(c, "-h") || !strcmp(c, "--help") || !strcmp(c, "help")) { usage(stdout); return 0; }
  if (!strcmp(c, "run")) return pz_cmd_run(argc - 1, argv + 1);
  if (!strcmp(c, "graph")) return pz_cmd_graph(argc - 1, argv + 1);
  if (!strcmp(c, "compare")) return pz_cmd_compare(argc - 1, argv + 1);
  if (!strcmp(c, "bench")) {
    if (argc < 3 || !strcmp(argv[2], "--help")) {
      fprintf(argc < 3 ? stderr : stdout, "usage: prezero bench <gemm|ar|attn|moe|step> [options] (run 'prezero bench gemm --help')\n");
      return argc < 3 ? 2 : 0;
    }
    if (!strcmp(argv[2], "gemm")) return pz_cmd_bench_gemm(argc - 2, argv + 2);
    if (!strcmp(argv[2], "ar")) return pz_cmd_bench_ar(argc - 2, argv + 2);
    if (!strcmp(argv[2], "moe")) return pz_cmd_bench_moe(argc - 2, argv + 2);
    if (!strcmp(argv[2], "attn")) return pz_cmd_bench_attn(argc - 2, argv + 2);
    if (!strcmp(argv[2], "step")) return pz_cmd_bench_step(argc - 2, argv + 2);
    fprintf(stderr, "prezero bench: unknown benchmark '%s'; use gemm, ar, moe, attn or step\n", argv[2]);
    return 2;
  }
  fprintf(stderr, "prezero: unknown command '%s'; run 'prezero --help' for the list\n", c);
  return 2;
}
