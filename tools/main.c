/* prezero CLI: dispatches to run | graph | plan | compare | soak | tune | bench <gemm|ar|attn|moe|step>. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli.h"
#include "core/utf8.h"
#include "prezero.h"

static void usage(FILE *f) {
  fprintf(f,
          "prezero: decodes LLMs (DeepSeek-V2 / V3 / Kimi-K2 MLA + MoE; Llama, Mistral, Qwen2 / 3, Qwen3-MoE, Mixtral,\n"
          "Phi-3 / Phi-4, dots.llm1, GLM-4.5 GQA) with the zeroing of\n"
          "split-K GEMM outputs moved into the fused all-reduce + RMSNorm kernel before them (CPU or CUDA)\n"
          "usage: prezero <command> [options]\n"
          "  run      decode steps of a model preset or config.json (default: tiny; CUDA when a GPU is visible, else CPU)\n"
          "  graph    print the rank-0 decode graph (text, or --dot FILE)\n"
          "  plan     the per-batch prezero plan: what each donor fills and which consumers fire\n"
          "  compare  prezero ON vs OFF end to end (GPU)\n"
          "  soak     many replays of the decode step, ON/OFF and batch sizes mixed: bit-identity, memory, hangs (GPU)\n"
          "  bench    kernel benchmarks: bench gemm | ar | attn | moe | step (GPU)\n"
          "  tune     tune the split-K GEMMs for this GPU and save the table (GPU)\n"
          "run 'prezero <command> --help' for its options; 'prezero --version' for the version\n"
          "options take their value as '--flag value' or '--flag=value'\n");
}

/* Flags that take no value: "--flag=..." is refused for them rather than split. */
static const char *const no_value[] = {"--help", "-h", "--no-profile", "--deterministic", "--sweep", "--no-tune",
                                       "--paged", "--one-gpu", NULL};

static int is_no_value(const char *a) {
  for (int k = 0; no_value[k]; k++)
    if (!strcmp(a, no_value[k])) return 1;
  return 0;
}

/* Every subcommand takes options only, each either alone (no_value) or followed by one value.
 * Walks argv[first..argc) (after split_eq) as the subcommands do and refuses, with one error
 * line: an option that takes a value given twice (the subcommands kept the last one silently),
 * and a word where an option belongs when --help / -h is there too (help returned before the
 * subcommand saw it; without --help the subcommand calls it an unknown option). Returns 0 or 2. */
static int check_options(int argc, char **argv, int first, const char *cmd) {
  int help = 0, n = 0, rc = 0;
  for (int i = first; i < argc; i++) help |= !strcmp(argv[i], "--help") || !strcmp(argv[i], "-h");
  const char **seen = malloc(sizeof(char *) * (size_t)(argc + 1)); /* the options taking a value so far */
  if (!seen) return 0; /* the subcommand still parses everything else */
  for (int i = first; i < argc && !rc; i++) {
    const char *a = argv[i];
    if (a[0] != '-') {
      if (!help) continue; /* the subcommand refuses it as an unknown option */
      fprintf(stderr, "prezero %s: unexpected argument '%s' (options only, '--flag value'); drop it or see 'prezero %s --help'\n",
              cmd, a, cmd);
      rc = 2;
      break;
    }
    if (is_no_value(a)) continue;
    for (int k = 0; k < n && !rc; k++)
      if (!strcmp(seen[k], a)) {
        fprintf(stderr, "prezero %s: %s given twice; give it once\n", cmd, a);
        rc = 2;
      }
    seen[n++] = a;
    i++; /* its value */
  }
  free(seen);
  return rc;
}

/* Rewrites "--flag=value" (GNU style) into the two words "--flag" "value" in a new argv, from
 * argv[first] on, so that every subcommand reads both forms. Returns NULL (after one error line)
 * for "=" after a flag that takes no value. */
static char **split_eq(int argc, char **argv, int first, const char *cmd, int *new_argc) {
  char **out = malloc(sizeof(char *) * (size_t)(2 * argc + 1));
  if (!out) return NULL;
  int n = 0;
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i], *eq = i >= first && a[0] == '-' && a[1] == '-' ? strchr(a, '=') : NULL;
    if (!eq || eq == a + 2) { out[n++] = argv[i]; continue; }
    size_t len = (size_t)(eq - a);
    for (int k = 0; no_value[k]; k++)
      if (strlen(no_value[k]) == len && !strncmp(a, no_value[k], len)) {
        fprintf(stderr, "prezero %s: %.*s takes no value; write %.*s alone\n", cmd, (int)len, a, (int)len, a);
        free(out);
        return NULL;
      }
    argv[i][len] = 0; /* argv strings are writable (C11 5.1.2.2.1) */
    out[n++] = argv[i];
    out[n++] = argv[i] + len + 1;
  }
  out[n] = NULL;
  *new_argc = n;
  return out;
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

/* Every argument must be UTF-8 text without control characters: the CLI quotes its options and
 * values in its messages, which stay one readable line that way (a path with a newline or an
 * invalid byte is refused up front rather than echoed). Returns 0 or 2 after one error line. */
static int check_text(int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    long bad = pz_utf8_bad_at(argv[i]);
    for (long j = 0; argv[i][j] && bad < 0; j++)
      if ((unsigned char)argv[i][j] < 0x20 || argv[i][j] == 0x7f) bad = j;
    if (bad >= 0) {
      fprintf(stderr, "prezero: argument %d has byte 0x%02x at offset %ld, which is not printable UTF-8 text; "
                      "pass options, values and paths as UTF-8 text without control characters\n",
              i, (unsigned)(unsigned char)argv[i][bad], bad);
      return 2;
    }
  }
  return 0;
}

int main(int argc, char **argv) {
  if (check_text(argc, argv)) return 2;
  const char *cmd = argc < 2 ? "run" : argv[1];
  char bench_cmd[64];
  if (argc >= 3 && !strcmp(cmd, "bench") && argv[2][0] != '-') {
    snprintf(bench_cmd, sizeof bench_cmd, "bench %.40s", argv[2]);
    cmd = bench_cmd;
  }
  int n = argc;
  char **args = split_eq(argc, argv, 1, cmd, &n);
  if (!args) return 2;
  /* the subcommand's options start after "prezero run" / "prezero bench gemm" */
  static const char *const cmds[] = {"run", "graph", "plan", "compare", "soak", "tune", "bench", NULL};
  int first = n; /* none: top-level --help / --version / an unknown command are checked by dispatch */
  for (int k = 0; argc >= 2 && cmds[k]; k++)
    if (!strcmp(argv[1], cmds[k])) first = cmd == bench_cmd ? 3 : 2;
  int rc = check_options(n, args, first, cmd);
  if (!rc) rc = dispatch(n, args);
  rc = finish(argc < 2 ? "run" : argv[1], rc);
  free(args);
  return rc;
}

static int dispatch(int argc, char **argv) {
  if (argc < 2) return pz_cmd_run(argc, argv); /* no command: decode the embedded default */
  const char *c = argv[1];
  const int help = !strcmp(c, "-h") || !strcmp(c, "--help") || !strcmp(c, "help");
  const int version = !strcmp(c, "--version") || !strcmp(c, "-V") || !strcmp(c, "version");
  if (!strcmp(c, "help") && argc == 3 && argv[2][0] != '-') { /* prezero help CMD: CMD's own help */
    char *av[3] = {argv[0], argv[2], (char *)"--help"};
    return dispatch(3, av);
  }
  if ((help || version) && argc > 2) {
    fprintf(stderr, "prezero: unexpected argument '%s' after %s; run 'prezero %s' alone\n", argv[2], c, c);
    return 2;
  }
  if (help) { usage(stdout); return 0; }
  if (version) {
#ifdef PZ_HAVE_CUDA
    printf("prezero %s (CPU backend; CUDA backend built)\n", PZ_VERSION);
#else
    printf("prezero %s (CPU backend; built without CUDA)\n", PZ_VERSION);
#endif
    return 0;
  }
  if (!strcmp(c, "run")) return pz_cmd_run(argc - 1, argv + 1);
  if (!strcmp(c, "graph")) return pz_cmd_graph(argc - 1, argv + 1);
  if (!strcmp(c, "plan")) return pz_cmd_plan(argc - 1, argv + 1);
  if (!strcmp(c, "compare")) return pz_cmd_compare(argc - 1, argv + 1);
  if (!strcmp(c, "soak")) return pz_cmd_soak(argc - 1, argv + 1);
  if (!strcmp(c, "tune")) return pz_cmd_tune(argc - 1, argv + 1);
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
