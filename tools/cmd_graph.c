/* prezero graph: builds the per-rank decode graph of a preset or config.json, runs the graph
 * passes (prezero when enabled) and prints the rank-0 graph as text, or DOT with --dot FILE. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli.h"
#include "cli_args.h"
#include "model/builder.h"
#include "core/options.h"
#include "passes/passes.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: prezero graph [options]\n"
          "  --config NAME|PATH  model preset (%s) or a config.json path (default tiny)\n"
          "  --tp T              tensor-parallel degree; must divide the attention heads (default 1)\n"
          "  --layers N          build only the first N layers (default: all)\n"
          "  --batch M           batch rows m of the graph, 1..%d (default 4)\n"
          "  --context L         KV-cache capacity per sequence in tokens (default min(4096, max_position_embeddings))\n"
          "  --prezero on|off    run the prezero pass (default: PREZERO_ENABLE, off when unset)\n"
          "  --dot FILE          also write the graph as Graphviz DOT to FILE\n"
          "  --help              this text\n"
          "Prints one entry per node of the rank-0 graph: id, name, op and params, then its inputs\n"
          "and outputs with shapes, dtypes and views.\n",
          pz_config_preset_names(), PZ_MAX_BATCH);
}

static int fail(const char *msg, const char *fix) {
  if (strstr(msg, "; ")) fprintf(stderr, "prezero graph: %s\n", msg);
  else fprintf(stderr, "prezero graph: %s; %s\n", msg, fix);
  return PZ_CLI_EXIT_ERROR;
}

static const char *hint(pz_status s) {
  switch (s) {
    case PZ_ERR_CONFIG: return "fix the config.json or use a preset with --config";
    case PZ_ERR_NOT_FOUND: return "use --config with a preset name or a config.json path";
    case PZ_ERR_IO: return "check the path given to --config";
    case PZ_ERR_OOM: return "use --layers N or a smaller --batch";
    default: return "see 'prezero graph --help'";
  }
}

/* One integer flag of this subcommand (tools/cli_args.h: one line on error, exit code 2). */
static int parse_int(const char *flag, const char *v, long long lo, long long hi, long long *out) {
  return pz_cli_parse_int("graph", flag, v, lo, hi, out);
}

int pz_cmd_graph(int argc, char **argv) {
  const char *config = "tiny", *dot = NULL;
  long long tp = 1, layers = 0, batch = 4, context = 0;
  bool context_set = false; /* --context given (any value given is checked, -1 included) */
  int prezero = -1;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(stdout); return 0; }
    bool takes = !strcmp(a, "--config") || !strcmp(a, "--tp") || !strcmp(a, "--layers") || !strcmp(a, "--batch") ||
                 !strcmp(a, "--context") || !strcmp(a, "--prezero") || !strcmp(a, "--dot");
    if (!takes) {
      fprintf(stderr, "prezero graph: unknown option '%s'; see 'prezero graph --help'\n", a);
      return 2;
    }
    if (!v) {
      fprintf(stderr, "prezero graph: %s needs a value; see 'prezero graph --help'\n", a);
      return 2;
    }
    i++;
    if (!strcmp(a, "--config")) config = v;
    else if (!strcmp(a, "--dot")) dot = v;
    else if (!strcmp(a, "--prezero")) {
      if (!strcmp(v, "on")) prezero = 1;
      else if (!strcmp(v, "off")) prezero = 0;
      else { fprintf(stderr, "prezero graph: --prezero '%s' is not on or off; use --prezero on|off\n", v); return 2; }
    } else if (!strcmp(a, "--tp") && parse_int(a, v, 1, 64, &tp)) return 2;
    else if (!strcmp(a, "--layers") && parse_int(a, v, 1, 100000, &layers)) return 2;
    else if (!strcmp(a, "--batch") && parse_int(a, v, 1, PZ_MAX_BATCH, &batch)) return 2;
    else if (!strcmp(a, "--context")) {
      if (parse_int(a, v, -((long long)1 << 40), (long long)1 << 40, &context)) return 2;
      context_set = true;
    }
  }
  if (!config[0]) {
    fprintf(stderr, "prezero graph: --config is empty; use a preset (%s) or a config.json path\n", pz_config_preset_names());
    return 2;
  }
  pz_model_config cfg;
  pz_status st = pz_config_load(config, &cfg);
  if (st != PZ_OK) {
    int rc = pz_cli_config_dir("graph", config, 0); /* a checkpoint directory given to --config */
    return rc ? rc : fail(pz_last_error(), hint(st));
  }
  if (layers > cfg.num_hidden_layers) {
    fprintf(stderr, "prezero graph: --layers %lld exceeds num_hidden_layers (%lld) of %s; use --layers 1..%lld\n", layers,
            (long long)cfg.num_hidden_layers, cfg.name, (long long)cfg.num_hidden_layers);
    return PZ_CLI_EXIT_USAGE;
  }
  if (context > cfg.max_position_embeddings) {
    fprintf(stderr, "prezero graph: --context %lld exceeds max_position_embeddings (%lld) of %s; use --context 1..%lld\n",
            context, (long long)cfg.max_position_embeddings, cfg.name, (long long)cfg.max_position_embeddings);
    return PZ_CLI_EXIT_USAGE;
  }
  if (context_set && context < 1) {
    char why[160];
    snprintf(why, sizeof why, " (max_position_embeddings of %s)", cfg.name);
    return pz_cli_out_of_range("graph", "--context", context, 1, cfg.max_position_embeddings, why);
  }
  /* A --dot path that cannot be written fails now, before the graph is printed. */
  FILE *dot_f = NULL;
  if (dot && !(dot_f = fopen(dot, "w"))) {
    fprintf(stderr, "prezero graph: cannot write --dot %s (%s); check the --dot path\n", dot, strerror(errno));
    return PZ_CLI_EXIT_ERROR;
  }
  pz_build_opts bo = PZ_BUILD_OPTS_INIT;
  bo.tp = (int)tp;
  bo.m = batch;
  bo.layers = (int)layers;
  bo.max_ctx = context > 0 ? context : (cfg.max_position_embeddings < 4096 ? cfg.max_position_embeddings : 4096);
  pz_graph *g = NULL;
  st = pz_build_decode_graph(&cfg, &bo, &g);
  if (st != PZ_OK) {
    if (dot_f) { fclose(dot_f); remove(dot); }
    fail(pz_last_error(), hint(st));
    return st == PZ_ERR_INVALID_ARG ? PZ_CLI_EXIT_USAGE : PZ_CLI_EXIT_ERROR; /* a --tp that does not fit the model */
  }
  pz_pass_opts po = PZ_PASS_OPTS_INIT;
  po.prezero = prezero;
  pz_runtime_opts ro;
  char bad[300];
  if (pz_runtime_opts_from_env(&ro, bad, sizeof bad) != 0) {
    pz_graph_free(g);
    if (dot_f) { fclose(dot_f); remove(dot); }
    fprintf(stderr, "prezero graph: %s; fix or unset that variable\n", bad);
    return PZ_CLI_EXIT_USAGE; /* a malformed variable: the same code as run and plan */
  }
  pz_pass_opts_apply(&po, &ro);
  if (pz_pass_check_disable(po.disable) != PZ_OK) { /* a malformed variable: exit 2, as run and plan */
    pz_graph_free(g);
    if (dot_f) { fclose(dot_f); remove(dot); }
    fprintf(stderr, "prezero graph: %s\n", pz_last_error());
    return PZ_CLI_EXIT_USAGE;
  }
  pz_pass_stats stats[PZ_MAX_PASSES];
  int n_stats = 0;
  st = pz_run_passes(g, &po, stats, &n_stats);
  if (st != PZ_OK) {
    pz_graph_free(g);
    if (dot_f) { fclose(dot_f); remove(dot); }
    return fail(pz_last_error(), hint(st));
  }
  printf("# prezero %s\n", pz_prezero_flag(&po) ? "on" : "off");
  for (int i = 0; i < n_stats; i++)
    printf("# pass %s: %s, matched %d, rewritten %d\n", stats[i].name, stats[i].ran ? "ran" : "disabled",
           stats[i].matched, stats[i].rewritten);
  st = pz_graph_dump_text(g, stdout);
  if (dot_f) {
    if (st == PZ_OK) st = pz_graph_dump_dot(g, dot_f);
    if (fclose(dot_f) && st == PZ_OK) st = pz_error(PZ_ERR_IO, "cannot write %s", dot);
  }
  pz_graph_free(g);
  if (st != PZ_OK) return fail(pz_last_error(), "check that standard output and the --dot file can be written");
  return 0;
}
