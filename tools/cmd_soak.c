/* prezero soak: many CUDA-graph replays of the decode step at mixed batch sizes, prezero ON and
 * OFF interleaved, deterministic mode; checks bit-identical logits for the same inputs, no drop
 * of free GPU memory, no hang (soak.h; the loop is tools/soak_run.c). Arguments and model checks
 * run in every build; the run needs the CUDA backend. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cjson/cJSON.h>
#include "bench_common.h"
#include "cli.h"
#include "cli_args.h"
#include "soak.h"
#include "core/status.h"
#include "model/builder.h"
#include "model/config.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: prezero soak [--config NAME|PATH] [--layers N] [--tp T] [--context L] [--batch 1,3,8,...]\n"
          "                    [--seconds S] [--replays N] [--check-every K] [--step-timeout S]\n"
          "                    [--mem-slack MIB] [--host-slack MIB] [--seed X] [--json FILE] [--md FILE]\n"
          "  Builds one CUDA executor of the first --layers layers (default 2) of --config (default kimi_k2)\n"
          "  at --tp T (default 1; rank r on GPU r) with the OFF graph and the per-batch ON graphs over the\n"
          "  same weights, captures every batch size of --batch (default 1,3,8,17,64,128; distinct, at most\n"
          "  16, cycled in the order given) in both sets, then replays the decode step for --seconds S\n"
          "  (default 60) or --replays N (both: whichever comes first), batch sizes in turn, prezero ON and\n"
          "  OFF interleaved, with at most 2 split-K splits (PREZERO_GEMM_SPLITS=2: ON and OFF bit-identical).\n"
          "  Every step of batch m decodes the same tokens with sequence i at the same position\n"
          "  L - 1 - (7 i mod min(64, L)) (--context L, default 1024; no sequence advances), so each step must\n"
          "  give the logits of the first OFF step of its batch size bit for bit.\n"
          "  Checks (exit 0 only when all pass):\n"
          "    bit-identical  logits of every K-th step per batch size and set (--check-every, default 1)\n"
          "                   and the greedy tokens of every step equal the reference's\n"
          "    memory         free memory of each GPU (cudaMemGetInfo, after the warm-up, every 10 s and at\n"
          "                   the end) never drops more than --mem-slack MiB (default 32) below its start,\n"
          "                   the host resident set never grows more than --host-slack MiB (default 128)\n"
          "    no hang        a watchdog ends the run (exit 1, reports written) when a step does not return\n"
          "                   within --step-timeout S (default 30; creation, captures and warm-up: 10x);\n"
          "                   at TP > 1 PREZERO_AR_TIMEOUT_US defaults to the same time (a missing peer: an error)\n"
          "  Reports replays per second, steps per batch size, mismatches and the memory drift on stdout,\n"
          "  --md FILE and --json FILE.\n");
}

static int bad_value(const char *flag, const char *v, const char *want) {
  fprintf(stderr, "prezero soak: bad value '%.200s' for %s; use %s\n", v, flag, want);
  return PZ_CLI_EXIT_USAGE;
}

/* A number in lo..hi: an integer, or (real != 0) a decimal. Returns 0 and sets *out. */
static int parse_num(const char *v, double lo, double hi, int real, double *out) {
  char *end;
  errno = 0;
  double x = real ? strtod(v, &end) : (double)strtoll(v, &end, 10);
  if (!pz_cli_starts_number(v) || *end || errno || !(x >= lo && x <= hi)) return -1;
  *out = x;
  return 0;
}

/* Parses argv into *o (defaults first). Returns -1 to go on, else the exit code (0 for --help). */
static int parse(int argc, char **argv, pz_soak_opts *o) {
  static const int def_batch[] = {1, 3, 8, 17, 64, 128};
  memset(o, 0, sizeof *o);
  o->config = "kimi_k2";
  o->layers = 2;
  o->tp = 1;
  o->context = 1024;
  o->nb = 6;
  memcpy(o->batch, def_batch, sizeof def_batch);
  o->seconds = 60;
  o->check_every = 1;
  o->step_timeout_s = 30;
  o->mem_slack_mib = 32;
  o->host_slack_mib = 128;
  o->seed = 1234;
  int seconds_given = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(stdout); return 0; }
    static const char *const takes[] = {"--config", "--layers", "--tp", "--context", "--batch", "--seconds",
                                        "--replays", "--check-every", "--step-timeout", "--mem-slack",
                                        "--host-slack", "--seed", "--json", "--md", NULL};
    int known = 0;
    for (int k = 0; takes[k]; k++) known |= !strcmp(a, takes[k]);
    if (!known) {
      fprintf(stderr, "prezero soak: unknown option '%.200s'; see 'prezero soak --help'\n", a);
      return PZ_CLI_EXIT_USAGE;
    }
    if (i + 1 >= argc) {
      fprintf(stderr, "prezero soak: %s needs a value; see 'prezero soak --help'\n", a);
      return PZ_CLI_EXIT_USAGE;
    }
    const char *v = argv[++i];
    double x = 0;
    if (!strcmp(a, "--config")) {
      if (pz_cli_empty_model_flag("soak", a, v, pz_config_preset_names())) return PZ_CLI_EXIT_USAGE;
      o->config = v;
    } else if (!strcmp(a, "--json")) o->json_path = v;
    else if (!strcmp(a, "--md")) o->md_path = v;
    else if (!strcmp(a, "--seed")) {
      if (pz_cli_parse_seed(v, &o->seed)) return bad_value(a, v, "a non-negative integer (decimal, or hex with 0x)");
    } else if (!strcmp(a, "--batch")) {
      int n = pz_bench_parse_list(v, o->batch, PZ_SOAK_MAX_B, 1, PZ_MAX_BATCH), dup = 0;
      for (int p = 0; p < n; p++)
        for (int q = 0; q < p; q++) dup |= o->batch[p] == o->batch[q];
      if (n < 1 || dup) return bad_value(a, v, "distinct batch sizes 1..256, at most 16, like --batch 1,3,8,17");
      o->nb = n;
    } else if (!strcmp(a, "--layers")) {
      if (parse_num(v, 1, 1000, 0, &x)) return bad_value(a, v, "--layers 1..1000");
      o->layers = (int)x;
    } else if (!strcmp(a, "--tp")) {
      if (parse_num(v, 1, PZ_SOAK_MAX_TP, 0, &x)) return bad_value(a, v, "--tp 1..8");
      o->tp = (int)x;
    } else if (!strcmp(a, "--context")) {
      if (parse_num(v, 1, 1 << 24, 0, &x)) return bad_value(a, v, "--context 1..16777216");
      o->context = (int)x;
    } else if (!strcmp(a, "--seconds")) {
      if (parse_num(v, 1, 604800, 1, &x)) return bad_value(a, v, "--seconds 1..604800 (a week)");
      o->seconds = x;
      seconds_given = 1;
    } else if (!strcmp(a, "--replays")) {
      if (parse_num(v, 1, 1e12, 0, &x)) return bad_value(a, v, "--replays 1..1000000000000");
      o->replays = (long long)x;
    } else if (!strcmp(a, "--check-every")) {
      if (parse_num(v, 1, 1000000, 0, &x)) return bad_value(a, v, "--check-every 1..1000000");
      o->check_every = (int)x;
    } else if (!strcmp(a, "--step-timeout")) {
      if (parse_num(v, 0.1, 3600, 1, &x)) return bad_value(a, v, "--step-timeout 0.1..3600 (seconds)");
      o->step_timeout_s = x;
    } else if (!strcmp(a, "--mem-slack")) {
      if (parse_num(v, 0, 1 << 20, 1, &x)) return bad_value(a, v, "--mem-slack 0..1048576 (MiB)");
      o->mem_slack_mib = x;
    } else if (!strcmp(a, "--host-slack")) {
      if (parse_num(v, 0, 1 << 20, 1, &x)) return bad_value(a, v, "--host-slack 0..1048576 (MiB)");
      o->host_slack_mib = x;
    }
  }
  if (o->replays && !seconds_given) o->seconds = 0; /* --replays alone: no time limit */
  pz_bench_command_line(o->command, sizeof o->command, "prezero soak", argc - 1, argv + 1);
  return -1;
}

/* The model checks that need no GPU (the same refusals in every build). */
static int check_model(const pz_soak_opts *o, pz_model_config *mc) {
  if (pz_config_load(o->config, mc) != PZ_OK) {
    if (pz_cli_config_dir("soak", o->config, 0)) return PZ_CLI_EXIT_ERROR;
    fprintf(stderr, "prezero soak: %s; use --config with a preset name or a config.json path\n", pz_last_error());
    return PZ_CLI_EXIT_ERROR;
  }
  char why[160];
  snprintf(why, sizeof why, " (num_hidden_layers of %s)", mc->name);
  if (o->layers > mc->num_hidden_layers)
    return pz_cli_out_of_range("soak", "--layers", o->layers, 1, mc->num_hidden_layers, why);
  if (mc->max_position_embeddings <= 8 || (int64_t)o->context + 8 > mc->max_position_embeddings) {
    snprintf(why, sizeof why, " (max_position_embeddings of %s, less the 8 spare cache rows)", mc->name);
    return pz_cli_out_of_range("soak", "--context", o->context, 1, mc->max_position_embeddings - 8, why);
  }
  int max_m = 0;
  for (int b = 0; b < o->nb; b++) max_m = o->batch[b] > max_m ? o->batch[b] : max_m;
  pz_build_opts bo = {.tp = o->tp, .m = max_m, .max_ctx = (int64_t)o->context + 8, .layers = o->layers};
  pz_graph *g = NULL;
  if (pz_build_decode_graph(mc, &bo, &g) != PZ_OK) { /* e.g. a TP that does not divide the heads */
    const char *msg = pz_last_error();
    fprintf(stderr, "prezero soak: %s%s\n", msg, strstr(msg, "; ") ? "" : "; see 'prezero soak --help'");
    return PZ_CLI_EXIT_USAGE;
  }
  pz_graph_free(g);
  return -1;
}

/* ---- reports */
static long long sum2(const long long v[2]) { return v[0] + v[1]; }

static void totals(const pz_soak_result *r, long long *checked, long long *mism_log, long long *mism_tok,
                   double *max_step) {
  *checked = *mism_log = *mism_tok = 0;
  *max_step = 0;
  for (int b = 0; b < r->nb; b++) {
    *checked += sum2(r->b[b].checked);
    *mism_log += sum2(r->b[b].mism_logits);
    *mism_tok += sum2(r->b[b].mism_tokens);
    for (int k = 0; k < 2; k++)
      if (r->b[b].step_s_max[k] > *max_step) *max_step = r->b[b].step_s_max[k];
  }
}

static double drop_mib(const pz_soak_result *r, int g) { return (r->free_start[g] - r->free_min[g]) / 1048576.0; }

static void write_text(FILE *f, const pz_soak_opts *o, const pz_soak_result *r, int passed) {
  long long checked, ml, mt;
  double max_step;
  totals(r, &checked, &ml, &mt, &max_step);
  fprintf(f, "# prezero soak: %s, first %d layers, TP %d, %s\n\n", r->model, o->layers, o->tp, r->device);
  fprintf(f, "`%s`\n\n", o->command);
  fprintf(f, "Context %d, seed %llu, %s. %lld replays in %.1f s after the warm-up: **%.1f replays/s** "
          "(logits fetched every %d step(s) per batch size and set).\n\n", o->context, o->seed, r->determinism,
          r->loop_replays, r->loop_s, r->replays_per_s, o->check_every);
  fprintf(f, "| batch | steps OFF | steps ON | logits checks | logits mismatches | token mismatches | "
          "mean step OFF ms | mean step ON ms | max step ms | ON consumers rewritten |\n");
  pz_bench_md_rule(f, 10, 1);
  for (int b = 0; b < r->nb; b++) {
    const pz_soak_batch *s = &r->b[b];
    double mx = s->step_s_max[0] > s->step_s_max[1] ? s->step_s_max[0] : s->step_s_max[1];
    fprintf(f, "| %d | %lld | %lld | %lld | %lld | %lld | %.3f | %.3f | %.3f | %d |\n", s->m, s->steps[0], s->steps[1],
            sum2(s->checked), sum2(s->mism_logits), sum2(s->mism_tokens),
            s->steps[0] ? 1e3 * s->step_s_sum[0] / s->steps[0] : 0.0,
            s->steps[1] ? 1e3 * s->step_s_sum[1] / s->steps[1] : 0.0, 1e3 * mx, s->rewritten);
  }
  fprintf(f, "\nChecks:\n\n");
  fprintf(f, "- bit-identical logits: %s (%lld of %lld logits checks and %lld of %lld steps' tokens differ from the "
          "first OFF step of their batch size)\n", ml || mt ? "**FAIL**" : r->ran ? "pass" : "not run", ml, checked, mt,
          r->replays);
  if (r->first_replay >= 0)
    fprintf(f, "  - first mismatch: step %lld, batch %d, prezero %s, logit %d: %.9g, reference %.9g\n", r->first_replay,
            r->first_m, r->first_on ? "on" : "off", r->first_index, r->first_got, r->first_want);
  for (int g = 0; g < r->ngpu && r->ran; g++)
    fprintf(f, "- memory, GPU %d: free %.3f GiB after the warm-up, lowest %.3f GiB, %.3f GiB at the end: drop "
            "%.1f MiB (slack %.0f MiB): %s\n", g, r->free_start[g] / 1073741824.0, r->free_min[g] / 1073741824.0,
            r->free_end[g] / 1073741824.0, drop_mib(r, g), o->mem_slack_mib,
            drop_mib(r, g) > o->mem_slack_mib ? "**FAIL**" : "pass");
  if (r->ran) {
    double grow = (r->rss_max - r->rss_start) / 1048576.0;
    fprintf(f, "- host memory: resident %.1f MiB after the warm-up, at most %.1f MiB, %.1f MiB at the end: growth "
            "%.1f MiB (slack %.0f MiB): %s\n", r->rss_start / 1048576.0, r->rss_max / 1048576.0,
            r->rss_end / 1048576.0, grow, o->host_slack_mib, grow > o->host_slack_mib ? "**FAIL**" : "pass");
  }
  fprintf(f, "- no hang: %s (longest step %.3f ms; watchdog %.1f s per step)\n", r->hang ? "**FAIL**" : "pass",
          1e3 * max_step, o->step_timeout_s);
  if (r->error[0]) fprintf(f, "- error: %s\n", r->error);
  fprintf(f, "\nVerdict: %s\n", passed ? "PASS" : "FAIL");
}

static cJSON *to_json(const pz_soak_opts *o, const pz_soak_result *r, int passed) {
  long long checked, ml, mt;
  double max_step;
  totals(r, &checked, &ml, &mt, &max_step);
  cJSON *j = cJSON_CreateObject();
  cJSON_AddStringToObject(j, "bench", "soak");
  pz_bench_json_add_command_date(j, o->command);
  cJSON_AddStringToObject(j, "device", r->device);
  cJSON_AddStringToObject(j, "model", r->model);
  cJSON_AddNumberToObject(j, "layers", o->layers);
  cJSON_AddNumberToObject(j, "tp", o->tp);
  cJSON_AddNumberToObject(j, "context", o->context);
  cJSON_AddNumberToObject(j, "seed", (double)o->seed);
  cJSON *bl = cJSON_AddArrayToObject(j, "batches");
  for (int b = 0; b < o->nb; b++) cJSON_AddItemToArray(bl, cJSON_CreateNumber(o->batch[b]));
  cJSON_AddNumberToObject(j, "seconds_limit", o->seconds);
  cJSON_AddNumberToObject(j, "replays_limit", (double)o->replays);
  cJSON_AddNumberToObject(j, "check_every", o->check_every);
  cJSON_AddNumberToObject(j, "step_timeout_s", o->step_timeout_s);
  cJSON_AddStringToObject(j, "determinism", r->determinism);
  cJSON_AddStringToObject(j, "method",
                          "one executor (OFF graph + per-batch ON graphs over the same weights); replays of the captured "
                          "decode step, batch sizes in turn, ON/OFF alternating; fixed tokens per batch size and fixed "
                          "positions per sequence (each step rewrites its own KV row before reading it), so every step "
                          "must equal the first OFF step of its batch size bit for bit");
  cJSON_AddNumberToObject(j, "replays", (double)r->replays);
  cJSON_AddNumberToObject(j, "loop_replays", (double)r->loop_replays);
  cJSON_AddNumberToObject(j, "loop_s", r->loop_s);
  cJSON_AddNumberToObject(j, "replays_per_s", r->replays_per_s);
  cJSON_AddNumberToObject(j, "logits_checks", (double)checked);
  cJSON_AddNumberToObject(j, "logits_mismatches", (double)ml);
  cJSON_AddNumberToObject(j, "token_mismatches", (double)mt);
  cJSON_AddNumberToObject(j, "max_step_ms", 1e3 * max_step);
  if (r->first_replay >= 0) {
    cJSON *fm = cJSON_AddObjectToObject(j, "first_mismatch");
    cJSON_AddNumberToObject(fm, "step", (double)r->first_replay);
    cJSON_AddNumberToObject(fm, "batch", r->first_m);
    cJSON_AddStringToObject(fm, "prezero", r->first_on ? "on" : "off");
    cJSON_AddNumberToObject(fm, "logit_index", r->first_index);
    cJSON_AddNumberToObject(fm, "got", r->first_got);
    cJSON_AddNumberToObject(fm, "want", r->first_want);
  } else {
    cJSON_AddNullToObject(j, "first_mismatch");
  }
  cJSON *pb = cJSON_AddArrayToObject(j, "per_batch");
  for (int b = 0; b < r->nb; b++) {
    const pz_soak_batch *s = &r->b[b];
    for (int k = 0; k < 2; k++) {
      cJSON *row = cJSON_CreateObject();
      cJSON_AddNumberToObject(row, "batch", s->m);
      cJSON_AddStringToObject(row, "prezero", k ? "on" : "off");
      cJSON_AddNumberToObject(row, "steps", (double)s->steps[k]);
      cJSON_AddNumberToObject(row, "logits_checks", (double)s->checked[k]);
      cJSON_AddNumberToObject(row, "logits_mismatches", (double)s->mism_logits[k]);
      cJSON_AddNumberToObject(row, "token_mismatches", (double)s->mism_tokens[k]);
      cJSON_AddNumberToObject(row, "mean_step_ms", s->steps[k] ? 1e3 * s->step_s_sum[k] / s->steps[k] : 0.0);
      cJSON_AddNumberToObject(row, "max_step_ms", 1e3 * s->step_s_max[k]);
      cJSON_AddNumberToObject(row, "mm_maybe_prezero_nodes", k ? s->rewritten : 0);
      cJSON_AddItemToArray(pb, row);
    }
  }
  cJSON *mem = cJSON_AddObjectToObject(j, "memory");
  cJSON_AddNumberToObject(mem, "slack_mib", o->mem_slack_mib);
  cJSON_AddNumberToObject(mem, "sample_every_s", PZ_SOAK_SAMPLE_S);
  cJSON *gp = cJSON_AddArrayToObject(mem, "gpus");
  for (int g = 0; g < r->ngpu && r->ran; g++) {
    cJSON *x = cJSON_CreateObject();
    cJSON_AddNumberToObject(x, "gpu", g);
    cJSON_AddNumberToObject(x, "free_start_bytes", (double)r->free_start[g]);
    cJSON_AddNumberToObject(x, "free_min_bytes", (double)r->free_min[g]);
    cJSON_AddNumberToObject(x, "free_end_bytes", (double)r->free_end[g]);
    cJSON_AddNumberToObject(x, "drop_mib", drop_mib(r, g));
    cJSON_AddItemToArray(gp, x);
  }
  cJSON *sm = cJSON_AddArrayToObject(mem, "gpu0_samples");
  for (int i = 0; i < r->n_samples; i++) {
    cJSON *x = cJSON_CreateObject();
    cJSON_AddNumberToObject(x, "t_s", r->sample_t[i]);
    cJSON_AddNumberToObject(x, "free_bytes", (double)r->sample_free0[i]);
    cJSON_AddItemToArray(sm, x);
  }
  cJSON_AddNumberToObject(mem, "host_slack_mib", o->host_slack_mib);
  cJSON_AddNumberToObject(mem, "host_rss_start_bytes", (double)r->rss_start);
  cJSON_AddNumberToObject(mem, "host_rss_max_bytes", (double)r->rss_max);
  cJSON_AddNumberToObject(mem, "host_rss_end_bytes", (double)r->rss_end);
  cJSON *ck = cJSON_AddObjectToObject(j, "checks");
  int mem_ok = r->ran && (double)(r->rss_max - r->rss_start) <= o->host_slack_mib * 1048576.0;
  for (int g = 0; g < r->ngpu; g++) mem_ok &= drop_mib(r, g) <= o->mem_slack_mib;
  cJSON_AddBoolToObject(ck, "bit_identical", r->ran && ml == 0 && mt == 0);
  cJSON_AddBoolToObject(ck, "memory", mem_ok);
  cJSON_AddBoolToObject(ck, "no_hang", !r->hang);
  if (r->error[0]) cJSON_AddStringToObject(j, "error", r->error);
  else cJSON_AddNullToObject(j, "error");
  cJSON_AddStringToObject(j, "verdict", passed ? "pass" : "fail");
  return j;
}

/* stdout, --md and --json. Returns 0, or 1 when a file cannot be written (one line said so). */
static int write_reports(const pz_soak_opts *o, const pz_soak_result *r, int passed) {
  write_text(stdout, o, r, passed);
  fflush(stdout);
  int rc = 0;
  if (o->md_path) {
    FILE *f = fopen(o->md_path, "w");
    if (f) write_text(f, o, r, passed);
    if (!f || fclose(f) != 0) {
      fprintf(stderr, "prezero soak: cannot write %s; check the path\n", o->md_path);
      rc = 1;
    }
  }
  if (o->json_path) {
    cJSON *j = to_json(o, r, passed);
    if (pz_bench_write_json(j, o->json_path, 1) != 0) {
      fprintf(stderr, "prezero soak: cannot write %s; check the path\n", o->json_path);
      rc = 1;
    }
    cJSON_Delete(j);
  }
  return rc;
}

#ifdef PZ_HAVE_CUDA
static void on_hang(const pz_soak_opts *o, pz_soak_result *r) { (void)write_reports(o, r, 0); }
#endif

int pz_cmd_soak(int argc, char **argv) {
  pz_soak_opts o;
  int rc = parse(argc, argv, &o);
  if (rc >= 0) return rc;
  pz_model_config mc;
  if ((rc = check_model(&o, &mc)) >= 0) return rc;
#ifndef PZ_HAVE_CUDA
  (void)write_reports;
  fprintf(stderr, "prezero soak: this build has no CUDA backend, which the soak needs; rebuild with nvcc present "
                  "(PZ_WITH_CUDA=ON) and run it on a machine with a CUDA GPU\n");
  return PZ_CLI_EXIT_ERROR;
#else
  char what[32];
  snprintf(what, sizeof what, "--tp %d", o.tp);
  if (pz_bench_need_gpus("soak", what, o.tp, 1) != 0) return PZ_CLI_EXIT_ERROR;
  pz_soak_result *r = malloc(sizeof *r);
  if (!r) {
    fprintf(stderr, "prezero soak: out of host memory for the results; free some memory\n");
    return PZ_CLI_EXIT_ERROR;
  }
  int failed = pz_soak_run(&o, &mc, r, on_hang);
  int passed = !failed && pz_soak_passed(&o, r);
  int wrc = write_reports(&o, r, passed);
  if (failed) fprintf(stderr, "prezero soak: %s%s\n", r->error, strstr(r->error, "; ") ? "" : "; see 'prezero soak --help'");
  else if (!passed) fprintf(stderr, "prezero soak: a check failed (see the report); the verdict is FAIL\n");
  free(r);
  return passed && !wrc ? 0 : PZ_CLI_EXIT_ERROR;
#endif
}
