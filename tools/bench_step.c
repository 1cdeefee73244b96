/* prezero bench step: time of one whole decode step (CUDA-graph replay over every TP rank) per
 * batch size, for the first N layers of a model (Kimi-K2 by default), prezero OFF and ON. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli.h"
#include "bench_common.h"
#include "cli_args.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: prezero bench step [--config NAME|PATH] [--tp 1,2] [--layers N] [--context L]\n"
          "                          [--batch 1,2,4,...] [--prezero off,on] [--iters N] [--reps N]\n"
          "                          [--rounds R] [--rows N] [--seed X] [--json FILE] [--md FILE]\n"
          "  Builds the decode graph of the first --layers layers (default 3: the dense layer 0 and\n"
          "  two MoE layers of kimi_k2, the default --config) into one executor whose ON graphs are\n"
          "  the per-batch prezero plan over the same weights, and times one decode step per batch\n"
          "  size (default 1,2,4,...,128) as a\n"
          "  CUDA-graph replay on every TP rank (rank r on GPU r): --iters steps back to back per\n"
          "  replay set (default 20), median of --reps sets (default 5), every sequence at position\n"
          "  --context (default 8192: the attention reads 8193 cached tokens). --rounds R repeats\n"
          "  OFF, ON R times (A B A B, default 3) at each batch size and reports each median over rounds.\n"
          "  --rows N times a step of N sequences in each batch size's graph (N <= every --batch): the\n"
          "  other rows are the padding a serving batch of N gets there (PREZERO_PAD_ATTN=0: they\n"
          "  attend their whole context instead of one position). Default: every row real.\n"
          "  Weights are seeded random (streamed from HBM: they exceed L2 many times over).\n"
          "  The table gives ON - OFF of each round's pair, and whether one step's logits after the\n"
          "  first round are equal ON and OFF: where they differ (split-K sums in another order),\n"
          "  some tokens may go to other experts, and the MoE layers' time follows the experts touched;\n"
          "  PREZERO_GEMM_SPLITS=2 (as compare --deterministic) makes them equal.\n");
}

#ifdef PZ_HAVE_CUDA
#include <cjson/cJSON.h>
#include "backend/backend.h"
#include "backend/cuda/runtime.h"
#include "core/status.h"
#include "core/options.h"
#include "model/builder.h"
#include "model/config.h"
#include "passes/passes.h"
#include "passes/prezero.h"

#define MAX_B 16
#define MAX_TP 4
#define MAX_ROUNDS 8

typedef struct cell {
  double us[MAX_ROUNDS];
  int n;
  int donors, donors_full; /* AR_RMSNORM_MAYBE_PREZERO nodes, and those whose gate said "fill all" */
  int rewritten;           /* MM_MAYBE_PREZERO nodes */
  int same;                /* ON cells: 1 = the step's logits equal OFF's bit for bit, 0 = they differ, -1 = not read */
} cell;

/* The step's logits at batch m (pz_backend_step at the timing's tokens and position, then pz_backend_logits) into
 * out[rows, vocab]: whether ON and OFF computed the same numbers, so the same MoE routing (a step whose numbers differ
 * may route some tokens to other experts, and the expert kernels' time follows the experts touched). */
static pz_status step_logits(pz_backend *e, int64_t m, int64_t rows, int32_t pos, int64_t vocab, int32_t *tk, float *out) {
  int32_t *ps = tk + m, *nx = ps + m;
  for (int64_t i = 0; i < rows; i++) {
    tk[i] = pz_backend_timing_token(i, vocab); /* the timed step's tokens */
    ps[i] = pos;
  }
  PZ_CHECK(pz_backend_step(e, rows, tk, ps, nx));
  return pz_backend_logits(e, rows, out);
}

static int fail(const char *what) {
  fprintf(stderr, "prezero bench step: %s: %s; see 'prezero bench step --help'\n", what, pz_last_error());
  return 1;
}

/* One CUDA backend per TP degree, both graph sets over the same weights (per-batch prezero mode,
 * backend/backend.h, cuda/exec.h): at every batch size, `rounds` times each of pzs[] in turn
 * (OFF, ON, OFF, ON ...), into cells[p][b]. */
static int run_one(const pz_model_config *mc, const pz_runtime_opts *ro, int tp, int layers, int context, const int *bs,
                   int nb, const int *pzs, int npz, int rounds, uint64_t seed, int iters, int reps, int real_rows,
                   cell cells[2][MAX_B],
                   char *device, size_t device_len) {
  int max_b = bs[nb - 1];
  pz_build_opts bo = {.tp = tp, .m = max_b, .max_ctx = (int64_t)context + 8, .layers = layers};
  pz_graph *g = NULL;
  if (pz_build_decode_graph(mc, &bo, &g) != PZ_OK) return fail("building the decode graph");
  int any_on = 0;
  for (int p = 0; p < npz; p++) any_on |= pzs[p];
  pz_backend_opts xo = PZ_BACKEND_OPTS_INIT;
  xo.seed = seed;
  xo.runtime = ro;
  xo.graphs = 1;
  xo.prezero = any_on; /* on the OFF graph: the ON set is the per-batch plan */
  xo.n_capture = nb;
  memcpy(xo.capture, bs, sizeof(int) * (size_t)nb);
  pz_backend *e = NULL;
  if (pz_backend_create(PZ_BACKEND_CUDA, g, &xo, &e) != PZ_OK) { pz_graph_free(g); return fail("creating the CUDA executor"); }
  snprintf(device, device_len, "%s", pz_backend_device_desc(e)->name);
  const int64_t vocab = mc->vocab_size > 0 ? mc->vocab_size : 1;
  const int64_t max_rows = real_rows > 0 ? real_rows : max_b;
  float *lg[2] = {malloc(sizeof(float) * (size_t)(max_rows * vocab)), malloc(sizeof(float) * (size_t)(max_rows * vocab))};
  int32_t *tk = malloc(sizeof(int32_t) * 3 * (size_t)max_b);
  int rc = 0;
  for (int b = 0; b < nb && rc == 0; b++) {
    for (int p = 0; p < npz && rc == 0; p++) {
      cell *c = &cells[p][b];
      c->donors = c->donors_full = c->rewritten = 0;
      c->same = -1;
      if (!pzs[p]) continue;
      const pz_graph *gb = g;
      pz_prezero_report rep;
      if (pz_backend_plan(e, bs[b], &rep, &gb) != PZ_OK) { rc = fail("the prezero plan"); break; }
      pz_prezero_report_free(&rep);
      for (int i = 0; i < gb->n_nodes; i++) {
        const pz_node *n = &gb->nodes[i];
        if (n->op == PZ_OP_MM_MAYBE_PREZERO) c->rewritten++;
        if (n->op != PZ_OP_AR_RMSNORM_MAYBE_PREZERO) continue;
        c->donors++;
        c->donors_full += pz_prezero_fill_cols(bs[b], n->p.norm.n_total, n->p.norm.n_base, gb->info.hidden, tp,
                                               pz_backend_device_desc(e)) == n->p.norm.n_total;
      }
    }
    int read_ok[2] = {0, 0}; /* this batch's logits read after the first round (step_logits) */
    for (int r = 0; r < rounds && rc == 0; r++)
      for (int p = 0; p < npz && rc == 0; p++) {
        double us = 0;
        const int64_t rows = real_rows > 0 ? real_rows : bs[b];
        if (pz_backend_set_prezero(e, pzs[p]) != PZ_OK ||
            pz_backend_time_step_rows(e, bs[b], rows, context, iters, reps, &us) != PZ_OK) {
          rc = fail("timing a step");
          break;
        }
        cell *c = &cells[p][b];
        c->us[c->n++] = us;
        fprintf(stderr, "  tp %d prezero %-3s batch %4d round %d/%d: %9.1f us/step\n", tp, pzs[p] ? "on" : "off", bs[b],
                r + 1, rounds, us);
        /* after the first round's timings of both: ON's logits against OFF's (no timing depends on it) */
        if (r == 0 && npz == 2 && lg[0] && lg[1] && tk) {
          read_ok[pzs[p]] = step_logits(e, bs[b], rows, context, vocab, tk, lg[pzs[p]]) == PZ_OK;
          if (p == npz - 1 && read_ok[0] && read_ok[1])
            cells[pzs[0] ? 0 : 1][b].same = !memcmp(lg[0], lg[1], sizeof(float) * (size_t)(rows * vocab));
        }
      }
  }
  free(lg[0]);
  free(lg[1]);
  free(tk);
  pz_backend_destroy(e);
  pz_graph_free(g);
  return rc;
}

int pz_cmd_bench_step(int argc, char **argv) {
  const char *config = "kimi_k2", *json_path = NULL, *md_path = NULL;
  int tps[MAX_TP] = {1, 2}, ntp = 2, bs[MAX_B] = {1, 2, 4, 8, 16, 32, 64, 128}, nb = 8, pzs[2] = {0, 1}, npz = 2;
  int layers = 3, context = 8192, iters = 20, reps = 5, rounds = 3, real_rows = 0;
  unsigned long long seed = 1234;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(stdout); return 0; }
    if (!v) { fprintf(stderr, "prezero bench step: %s needs a value (or is unknown); see 'prezero bench step --help'\n", a); return 2; }
    i++;
    int one[1], n;
    if (!strcmp(a, "--config")) {
      if (pz_cli_empty_model_flag("bench step", a, v, pz_config_preset_names())) return PZ_CLI_EXIT_USAGE;
      config = v;
    }
    else if (!strcmp(a, "--json")) json_path = v;
    else if (!strcmp(a, "--md")) md_path = v;
    else if (!strcmp(a, "--tp")) { if ((ntp = pz_bench_parse_list(v, tps, MAX_TP, 1, 8)) < 1) goto bad; }
    else if (!strcmp(a, "--batch")) {
      if ((nb = pz_bench_parse_list(v, bs, MAX_B, 1, PZ_MAX_BATCH)) < 1) goto bad;
      for (int k = 1; k < nb; k++) if (bs[k] <= bs[k - 1]) goto bad;
    } else if (!strcmp(a, "--prezero")) {
      npz = 0;
      for (const char *s = v; *s && npz < 2;) {
        size_t l = strcspn(s, ",");
        if (l == 2 && !strncmp(s, "on", 2)) pzs[npz++] = 1;
        else if (l == 3 && !strncmp(s, "off", 3)) pzs[npz++] = 0;
        else goto bad;
        s += l + (s[l] == ',');
      }
      if (npz < 1) goto bad;
    } else if (!strcmp(a, "--seed")) { if (pz_cli_parse_seed(v, &seed)) goto bad; }
    else if ((n = pz_bench_parse_list(v, one, 1, 0, 1 << 20)) == 1) {
      if (!strcmp(a, "--layers") && one[0] >= 1) layers = one[0];
      else if (!strcmp(a, "--context")) context = one[0];
      else if (!strcmp(a, "--iters") && one[0] >= 1) iters = one[0];
      else if (!strcmp(a, "--reps") && one[0] >= 1 && one[0] <= 64) reps = one[0];
      else if (!strcmp(a, "--rounds") && one[0] >= 1 && one[0] <= MAX_ROUNDS) rounds = one[0];
      else if (!strcmp(a, "--rows") && one[0] >= 1) real_rows = one[0];
      else goto bad;
    } else goto bad;
    continue;
  bad:
    fprintf(stderr, "prezero bench step: bad value '%s' for %s; see 'prezero bench step --help'\n", v, a);
    return 2;
  }
  for (int b = 0; b < nb && real_rows > 0; b++)
    if (real_rows > bs[b]) {
      fprintf(stderr, "prezero bench step: --rows %d exceeds batch %d; give --batch sizes of at least %d\n", real_rows,
              bs[b], real_rows);
      return 2;
    }
  /* The switches, read once: every executor takes them (run_one) and the labels below print them. */
  pz_runtime_opts ro;
  {
    char bad[300];
    if (pz_runtime_opts_from_env(&ro, bad, sizeof bad) != 0) {
      fprintf(stderr, "prezero bench step: %s\n", bad);
      return 2;
    }
  }
  pz_model_config mc;
  if (pz_config_load(config, &mc) != PZ_OK) return fail("loading the config");
  if (layers > mc.num_hidden_layers) layers = (int)mc.num_hidden_layers;
  if ((int64_t)context + 8 > mc.max_position_embeddings) {
    fprintf(stderr, "prezero bench step: --context %d exceeds max_position_embeddings of %s; use a smaller --context\n", context, mc.name);
    return 1;
  }
  int ngpu = pz_cuda_device_count(), min_tp = tps[0];
  for (int t = 1; t < ntp; t++) min_tp = tps[t] < min_tp ? tps[t] : min_tp;
  if (min_tp > ngpu) { /* no --tp value can run: refuse rather than write empty tables */
    char what[32], msg[300];
    snprintf(what, sizeof what, "TP %d", min_tp);
    pz_cli_gpu_refusal(msg, sizeof msg, what, min_tp, ngpu, 1);
    fprintf(stderr, "prezero bench step: %s\n", msg);
    return 1;
  }
  static cell cells[MAX_TP][2][MAX_B];
  memset(cells, 0, sizeof cells);
  char device[64] = "?";
  int ran[MAX_TP] = {0};
  for (int t = 0; t < ntp; t++) {
    if (tps[t] > ngpu) {
      fprintf(stderr, "prezero bench step: TP %d needs %d GPUs, %d visible; skipping it (run on a machine with at least %d "
                      "GPUs to time it)\n", tps[t], tps[t], ngpu, tps[t]);
      continue;
    }
    fprintf(stderr, "%s, %d layers, TP %d: one executor, %d round(s) of OFF / ON per batch size\n", mc.name, layers,
            tps[t], rounds);
    if (run_one(&mc, &ro, tps[t], layers, context, bs, nb, pzs, npz, rounds, seed, iters, reps, real_rows, cells[t], device,
                sizeof device))
      return 1;
    ran[t] = 1;
  }

  /* Outputs. */
  cJSON *root = cJSON_CreateObject();
  cJSON_AddStringToObject(root, "bench", "step");
  cJSON_AddStringToObject(root, "device", device);
  cJSON_AddStringToObject(root, "model", mc.name);
  cJSON_AddNumberToObject(root, "layers", layers);
  cJSON_AddNumberToObject(root, "context", context);
  cJSON_AddNumberToObject(root, "iters", iters);
  cJSON_AddNumberToObject(root, "reps", reps);
  cJSON_AddNumberToObject(root, "rounds", rounds);
  if (real_rows > 0) { /* padded steps: real_rows sequences in each batch size's graph */
    cJSON_AddNumberToObject(root, "real_rows", real_rows);
    cJSON_AddStringToObject(root, "padding_rows_attend", ro.pad_attn == 0 ? "whole context" : "one position");
  }
  const char *algo = ro.ar_algo;
  cJSON_AddStringToObject(root, "ar_algo", algo);
  {
    char cmd[1024];
    pz_bench_command_line(cmd, sizeof cmd, "prezero bench step", argc - 1, argv + 1);
    pz_bench_json_add_command_date(root, cmd);
  }
  cJSON_AddStringToObject(root, "method",
                          "CUDA-graph replay of the whole decode step on every rank, iters back to back, median of reps; "
                          "median over rounds (OFF, ON alternating at each batch size, one executor: both graph sets over the same "
                          "weights); weights seeded random, streamed from HBM");
  cJSON *rows = cJSON_AddArrayToObject(root, "results");
  FILE *md = md_path ? fopen(md_path, "w") : NULL;
  if (md_path && !md) { fprintf(stderr, "prezero bench step: cannot write %s; check the path\n", md_path); return 1; }
  FILE *outs[2] = {stdout, md};
  for (int o = 0; o < 2; o++) {
    if (!outs[o]) continue;
    fprintf(outs[o], "# prezero bench step: %s, first %d layers, context %d, %s, AR+RMSNorm donors: %s\n\n", mc.name,
            layers, context, device, algo);
    fprintf(outs[o], "Decode-step time (µs, CUDA-graph replay, median of %d sets of %d steps%s).\n\n", reps, iters,
            rounds > 1 ? ", median over rounds" : "");
    if (real_rows > 0) {
      fprintf(outs[o], "Padded steps: %d real sequences in each batch size's graph; the other rows attend %s.\n\n",
              real_rows, ro.pad_attn == 0 ? "their whole context (PREZERO_PAD_ATTN=0)" : "one position");
    }
  }
  for (int t = 0; t < ntp; t++) {
    if (!ran[t]) continue;
    for (int o = 0; o < 2; o++) {
      if (!outs[o]) continue;
      fprintf(outs[o], "TP %d\n\n| batch | OFF µs | ON µs | Δ µs | Δ %% | Δ µs by round (ON − OFF) | ON = OFF logits | donors with "
                       "full fill (ON) |\n", tps[t]);
      pz_bench_md_rule(outs[o], 8, 1);
    }
    for (int b = 0; b < nb; b++) {
      double us[2] = {0, 0};
      int have[2] = {0, 0};
      for (int p = 0; p < npz; p++) {
        cell *c = &cells[t][p][b];
        if (c->n == 0) continue;
        double tmp[MAX_ROUNDS];
        memcpy(tmp, c->us, sizeof(double) * (size_t)c->n);
        us[pzs[p]] = pz_median(tmp, c->n);
        have[pzs[p]] = 1;
        cJSON *row = cJSON_CreateObject();
        cJSON_AddNumberToObject(row, "tp", tps[t]);
        cJSON_AddStringToObject(row, "prezero", pzs[p] ? "on" : "off");
        cJSON_AddNumberToObject(row, "batch", bs[b]);
        cJSON_AddNumberToObject(row, "us_per_step", us[pzs[p]]);
        cJSON *all = cJSON_AddArrayToObject(row, "us_rounds");
        for (int k = 0; k < c->n; k++) cJSON_AddItemToArray(all, cJSON_CreateNumber(c->us[k]));
        cJSON_AddNumberToObject(row, "prezero_donors", c->donors);
        cJSON_AddNumberToObject(row, "prezero_donors_full_fill", c->donors_full);
        cJSON_AddNumberToObject(row, "mm_maybe_prezero_nodes", c->rewritten);
        if (pzs[p] && c->same >= 0) cJSON_AddBoolToObject(row, "logits_equal_off", c->same == 1);
        cJSON_AddItemToArray(rows, row);
      }
      int full = 0, donors = 0, same = -1;
      const cell *con = NULL, *coff = NULL;
      for (int p = 0; p < npz; p++) {
        if (pzs[p]) { full = cells[t][p][b].donors_full; donors = cells[t][p][b].donors; same = cells[t][p][b].same; con = &cells[t][p][b]; }
        else coff = &cells[t][p][b];
      }
      for (int o = 0; o < 2; o++) {
        if (!outs[o]) continue;
        fprintf(outs[o], "| %d |", bs[b]);
        for (int p = 0; p < 2; p++) have[p] ? fprintf(outs[o], " %.1f |", us[p]) : fprintf(outs[o], " — |");
        if (have[0] && have[1])
          fprintf(outs[o], " %+.1f | %+.2f%% |", us[1] - us[0], 100.0 * (us[1] - us[0]) / us[0]);
        else
          fprintf(outs[o], " — | — |");
        if (con && coff && con->n == coff->n && con->n > 0) { /* the rounds alternate OFF, ON: round k's pair */
          for (int k = 0; k < con->n; k++) fprintf(outs[o], "%s%+.1f", k ? " / " : " ", con->us[k] - coff->us[k]);
          fprintf(outs[o], " |");
        } else
          fprintf(outs[o], " — |");
        fprintf(outs[o], " %s |", same < 0 ? "—" : same ? "yes" : "no");
        have[1] ? fprintf(outs[o], " %d/%d |\n", full, donors) : fprintf(outs[o], " — |\n");
      }
    }
    for (int o = 0; o < 2; o++)
      if (outs[o]) fprintf(outs[o], "\n");
  }
  if (md) fclose(md);
  int rc = 0;
  if (json_path && pz_bench_write_json(root, json_path, 0) != 0) {
    fprintf(stderr, "prezero bench step: cannot write %s; check the path\n", json_path);
    rc = 1;
  }
  cJSON_Delete(root);
  return rc;
}
#else
int pz_cmd_bench_step(int argc, char **argv) {
  return pz_bench_no_cuda("bench step", argc, argv, usage);
}
#endif
