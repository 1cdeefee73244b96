/* prezero compare: prezero OFF vs ON end to end on the GPU (throughput, TPOT, E2E, per-layer
 * kernel components from CUPTI, bit-identity), written as JSON, markdown and gnuplot plots.
 * --render JSON re-writes the report of a saved run (works without CUDA). */
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <cjson/cJSON.h>
#include "compare/compare.h"
#include "cli.h"
#include "cli_args.h"
#include "cli_ranks.h"
#include "model/checkpoint.h"
#include "model/config.h"
#include "prezero.h"
#ifdef PZ_HAVE_CUDA
#include "backend/cuda/ar_mp.h" /* one rank per process: the rendezvous file */
#endif

static void usage(FILE *f) {
  fprintf(f,
          "usage: prezero compare [options]   (needs the CUDA backend, except --render)\n"
          "  --config NAME|PATH  model preset or config.json (default kimi_k2)\n"
          "  --model DIR         Hugging Face checkpoint directory (config.json + safetensors): config and\n"
          "                      weights of both engines from it instead of --config and the seed\n"
          "  --tp T              GPUs, ranks on devices 0..T-1 (default 1)\n"
          "  --quant Q           routed experts of the seeded weights: bf16, int4 (W4A16 group 32) or fp8 (W8A16\n"
          "                      128x128 blocks); the layers that fit follow their bytes (default: the config's\n"
          "                      quantization_config, int4 for kimi_k25, else bf16; not with --model)\n"
          "  --layers N          first N layers (default: as many as fit in free GPU memory; OFF and ON graphs share the weights)\n"
          "  --isl L             prompt KV tokens per request, seeded random cache (default 8192)\n"
          "  --isl A:B           unequal prompts: request i's length drawn uniformly from [A, B] with the seed (the\n"
          "                      same draw for every concurrency, round and engine; the KV capacity is B + osl)\n"
          "  --osl S             greedy decode steps per request (default 1024)\n"
          "  --conc A,B,...      concurrencies = batch sizes, ascending, 1..256 (default 4,8,16,32,64,128)\n"
          "  --rounds R          OFF/ON pairs per concurrency, run A B A B (default 2)\n"
          "  --seed X            weights, KV cache and first tokens (default 1234)\n"
          "  --profile-iters N   CUDA-graph replays per engine under CUPTI (default 20)\n"
          "  --no-profile        skip the CUPTI kernel breakdown\n"
          "  --deterministic     split-K GEMMs use at most 2 splits (sets PREZERO_GEMM_SPLITS=2 unless set), so\n"
          "                      ON and OFF must be bit-identical (docs/ARCHITECTURE.md section 5); timings are then not the tuned ones\n"
          "  --baseline LIST     also profile the OFF graph with every GEMM forced to each zeroing strategy in\n"
          "                      LIST (tuned, inkernel, memset, serial, fullk, cublas; comma-separated) and\n"
          "                      print their per-layer µs beside prezero ON (needs the CUPTI profile)\n"
          "  --out DIR           write compare.json, compare.md, *.dat, plots.gp and the PNGs (gnuplot, else\n"
          "                      python3 + matplotlib) into DIR, created if missing (default ./prezero_compare)\n"
          "  --render JSON       re-write compare.md and the plot files of a saved compare.json into --out\n"
          "  --procs N           one process per TP rank: forks N ranks (TP N), rank r on GPU r %% (visible GPUs),\n"
          "                      two on one GPU work (then time-sliced: a functional run, not a timing one);\n"
          "                      rank 0 reports and writes --out\n"
          "  --rank R --world W --id-file F  the same, each rank started by your own launcher\n"
          "  --timeout-s S       one process per rank: the longest wait on a peer, 1..3600 s (default 60)\n"
          "  --help              this text\n"
          "Per concurrency: TPOT = decode seconds / osl (host clock around the steps, each step waits for\n"
          "every GPU and the argmax); E2E per request = the osl decode steps (no prefill: the prompt KV is\n"
          "pre-filled); tokens/s per GPU = conc*osl / decode seconds / tp. Kernel components are medians\n"
          "per CUDA-graph node from CUPTI (rank 0), summed per layer. Determinism: see docs/ARCHITECTURE.md section 5;\n"
          "PREZERO_GEMM_SPLITS=2 makes ON and OFF bit-identical (0 + a + b = 0 + b + a).\n");
}

static int fail_line(const char *what, const char *fix) {
  fprintf(stderr, "prezero compare: %s; %s\n", what, fix);
  return 2;
}

/* One integer flag of this subcommand (tools/cli_args.h: one line on error, exit code 2). */
static int parse_int(const char *flag, const char *v, long long lo, long long hi, long long *out) {
  return pz_cli_parse_int("compare", flag, v, lo, hi, out);
}

/* --isl L or --isl A:B (1 <= A <= B <= 2^20): *isl = L or A, *isl_max = 0 or B. */
static int parse_isl(const char *v, int *isl, int *isl_max) {
  const char *colon = strchr(v, ':');
  long long a, b = 0;
  if (!colon) {
    if (parse_int("--isl", v, 1, 1 << 20, &a)) return 1;
  } else {
    char lo[32];
    const size_t n = (size_t)(colon - v);
    if (n == 0 || n >= sizeof lo) {
      char msg[300];
      snprintf(msg, sizeof msg, "--isl needs L or A:B, got '%.200s'", v);
      return fail_line(msg, "e.g. --isl 8192 or --isl 1024:16384") != 0;
    }
    memcpy(lo, v, n);
    lo[n] = 0;
    if (parse_int("--isl", lo, 1, 1 << 20, &a) || parse_int("--isl", colon + 1, 1, 1 << 20, &b)) return 1;
    if (b < a) {
      char msg[300];
      snprintf(msg, sizeof msg, "--isl %lld:%lld has its upper bound below the lower one", a, b);
      return fail_line(msg, "give A <= B, e.g. --isl 1024:16384") != 0;
    }
  }
  *isl = (int)a;
  *isl_max = (int)b;
  return 0;
}

/* "4,8,16": ascending integers in 1..256, at most PZ_CMP_MAX_CONC. */
static int parse_conc(const char *v, int *conc, int *n) {
  *n = 0;
  const char *s = v;
  while (*s) {
    char *end;
    errno = 0;
    long x = strtol(s, &end, 10);
    if (!pz_cli_starts_number(s) || end == s || errno || (*end && *end != ',')) return fail_line("--conc needs comma-separated integers", "e.g. --conc 4,8,16");
    if (x < 1 || x > 256) return fail_line("--conc values must be within 1..256", "e.g. --conc 4,8,16");
    if (*n == PZ_CMP_MAX_CONC) return fail_line("--conc has too many values", "give at most 16");
    if (*n && x <= conc[*n - 1]) return fail_line("--conc values must be ascending without repeats", "e.g. --conc 4,8,16");
    conc[(*n)++] = (int)x;
    s = *end ? end + 1 : end;
    if (*end && !*s) return fail_line("--conc ends with a comma", "e.g. --conc 4,8,16");
  }
  if (*n == 0) return fail_line("--conc is empty", "e.g. --conc 4,8,16");
  return 0;
}

/* ---------------------------------------------------------------- report */

static double pct(double on, double off) { return off != 0 ? 100.0 * (on - off) / off : 0.0; }

/* OFF's own spread over rounds, % of its median: (max - min) / median. */
static double off_spread_pct(const pz_cmp_point *p) {
  if (p->rounds < 2 || p->tpot_off_ms <= 0) return 0;
  double lo = p->tpot_off_rounds_ms[0], hi = lo;
  for (int i = 1; i < p->rounds; i++) {
    if (p->tpot_off_rounds_ms[i] < lo) lo = p->tpot_off_rounds_ms[i];
    if (p->tpot_off_rounds_ms[i] > hi) hi = p->tpot_off_rounds_ms[i];
  }
  return 100.0 * (hi - lo) / p->tpot_off_ms;
}

/* A TPOT difference no larger than OFF's own spread over rounds (needs >= 2 rounds). */
static bool is_noise(const pz_cmp_point *p) {
  if (p->rounds < 2) return false;
  double d = pct(p->tpot_on_ms, p->tpot_off_ms);
  return (d < 0 ? -d : d) <= off_spread_pct(p);
}

/* Δ of a component in µs (ON - OFF), or NAN when not measured. */
static double comp_delta(const pz_cmp_point *p, int c) {
  if (c == PZ_CMP_GEMM) {
    double d = 0;
    int any = 0;
    for (int k = PZ_CMP_QKV_A; k <= PZ_CMP_LAST_CONSUMER; k++)
      if (p->comp_on_us[k] >= 0 && p->comp_off_us[k] >= 0) { d += p->comp_on_us[k] - p->comp_off_us[k]; any = 1; }
    return any ? d : NAN;
  }
  if (p->comp_on_us[c] < 0 || p->comp_off_us[c] < 0) return NAN;
  return p->comp_on_us[c] - p->comp_off_us[c];
}

/* ON - OFF of the whole per-layer consumer + donor time (µs), NAN when not profiled: a MoE layer's
 * (every component, each averaged over the layers that have it). */
static double layer_delta(const pz_cmp_point *p) {
  if (!p->profiled) return NAN;
  double g = comp_delta(p, PZ_CMP_GEMM), d = comp_delta(p, PZ_CMP_DONOR);
  return g == g && d == d ? g + d : NAN;
}

/* The same for a dense layer: without the shared experts' gate | up (a MoE op's; NAN-free when not
 * measured). */
static double dense_delta(const pz_cmp_point *p) {
  const double d = layer_delta(p), s = comp_delta(p, PZ_CMP_SH_GU);
  return d == d && s == s ? d - s : d;
}

static const char *row_name(int c) {
  switch (c) {
    case PZ_CMP_GEMM: return "GEMM subtotal";
    case PZ_CMP_DONOR: return "donor fill cost (ON - OFF)";
    default: return pz_cmp_comp_name((pz_cmp_comp)c);
  }
}

static void cell_delta(FILE *f, const pz_cmp_point *p, int c) {
  if (!p->profiled) { fprintf(f, " - |"); return; }
  if (c <= PZ_CMP_LAST_CONSUMER && p->fired[c] == PZ_CMP_NOT_FIRED) {
    double d = comp_delta(p, c);
    if (d == d) fprintf(f, " n/f (%+.2f) |", d);
    else fprintf(f, " n/f |");
    return;
  }
  double d = comp_delta(p, c);
  if (d != d) fprintf(f, " - |");
  else fprintf(f, " %+.2f |", d);
}

/* The reviewer's question, "is prezero needed for our split-K GEMM?": per concurrency, each
 * consumer's and the donors' µs per layer under every measured zeroing strategy (the OFF graph
 * with every GEMM forced to it) against prezero ON. */
static void write_baselines(FILE *f, const pz_cmp_result *r) {
  static const int rows[] = {PZ_CMP_QKV_A, PZ_CMP_Q_B, PZ_CMP_GATE, PZ_CMP_O_PROJ, PZ_CMP_SH_GU, PZ_CMP_DONOR};
  fprintf(f, "\nPer-layer µs by zeroing strategy (CUPTI, rank 0; each baseline is the OFF graph with every GEMM forced "
             "to that strategy, its donors without fill; prezero ON is the per-batch plan; total = consumer GEMMs + 2 donors; "
             "best = the fastest baseline's total):\n");
  for (int i = 0; i < r->n_points; i++) {
    const pz_cmp_point *p = &r->points[i];
    if (!p->profiled) continue;
    fprintf(f, "\nconc %d:\n\n| component | prezero ON |", p->conc);
    int nb = 0;
    for (int b = 0; b < PZ_CMP_N_BASE; b++)
      if (b == PZ_CMP_BASE_TUNED || (r->baselines & (1u << b))) { fprintf(f, " %s |", pz_cmp_base_name(b)); nb++; }
    fprintf(f, "\n|---|---:|");
    for (int k = 0; k < nb; k++) fprintf(f, "---:|");
    fprintf(f, "\n");
    double tot_on = 0, tot[PZ_CMP_N_BASE] = {0};
    bool ok_on = true, ok[PZ_CMP_N_BASE];
    for (int b = 0; b < PZ_CMP_N_BASE; b++) ok[b] = true;
    for (size_t k = 0; k < sizeof rows / sizeof *rows; k++) {
      int c = rows[k];
      if (c == PZ_CMP_SH_GU && p->comp_on_us[c] < 0 && p->comp_off_us[c] < 0) continue; /* no such GEMM here */
      fprintf(f, "| %s |", c == PZ_CMP_DONOR ? "donors (x2)" : pz_cmp_comp_name((pz_cmp_comp)c));
      if (p->comp_on_us[c] >= 0) { fprintf(f, " %.2f |", p->comp_on_us[c]); tot_on += p->comp_on_us[c]; }
      else { fprintf(f, " - |"); ok_on = false; }
      for (int b = 0; b < PZ_CMP_N_BASE; b++) {
        if (b != PZ_CMP_BASE_TUNED && !(r->baselines & (1u << b))) continue;
        double v = p->base_us[b][c];
        if (v >= 0) { fprintf(f, " %.2f |", v); tot[b] += v; }
        else { fprintf(f, " - |"); ok[b] = false; }
      }
      fprintf(f, "\n");
    }
    fprintf(f, "| total |");
    if (ok_on) fprintf(f, " %.2f |", tot_on);
    else fprintf(f, " - |");
    int best = -1;
    for (int b = 0; b < PZ_CMP_N_BASE; b++) {
      if (b != PZ_CMP_BASE_TUNED && !(r->baselines & (1u << b))) continue;
      if (ok[b]) {
        fprintf(f, " %.2f |", tot[b]);
        if (best < 0 || tot[b] < tot[best]) best = b;
      } else {
        fprintf(f, " - |");
      }
    }
    fprintf(f, "\n");
    if (ok_on && best >= 0)
      fprintf(f, "\nprezero ON - best baseline (%s): %+.2f µs per layer\n", pz_cmp_base_name(best), tot_on - tot[best]);
  }
}

/* Whole-model TPOT (ms), projected from this run: the measured TPOT plus, for each layer kind,
 * the layers the run did not decode times OFF's measured per-layer kernel time of that kind; ON
 * adds to that the measured per-layer ON - OFF of the consumer GEMMs + 2 donors, since the ON graph
 * differs from OFF only there. Both layer kinds take the same Δ but for the shared experts' gate | up
 * (sh_gu, MoE layers only; dense_delta leaves it out): the components are averaged over
 * the layers that have them, and the `gate` one is the router in MoE layers but gate_up_proj in
 * GQA dense layers (so a dense MLA layer is credited with the router's part too: one or three of
 * 61 layers). Taking ON's own per-layer sums
 * instead would carry the rest of the layer's run-to-run kernel-time spread (side-stream and PDL
 * overlap, clocks) into the projection: in rounds 117-118 it made ON's projection 1.3-1.9 % slower
 * at conc 16-128 while the measured TPOT was 0.4-0.8 % faster. -1 when a kind the model has was
 * not measured. side: 0 OFF, 1 ON. */
static double tpot_projected(const pz_cmp_result *r, const pz_cmp_point *p, int side) {
  double t = side ? p->tpot_on_ms : p->tpot_off_ms;
  int md = r->dense_total - p->n_dense_run, mm = r->moe_total - p->n_moe_run;
  if ((md > 0 && p->dense_layer_us[0] < 0) || (mm > 0 && p->moe_layer_us[0] < 0) || !p->profiled) return -1;
  const double dm = side ? layer_delta(p) : 0, dd = side ? dense_delta(p) : 0; /* a MoE / dense layer's Δ */
  if (dm != dm) return -1;
  if (md > 0) t += md * (p->dense_layer_us[0] + dd) / 1000.0;
  if (mm > 0) t += mm * (p->moe_layer_us[0] + dm) / 1000.0;
  return t;
}

static void write_projection(FILE *f, const pz_cmp_result *r) {
  if (r->dense_total + r->moe_total <= r->layers) return; /* the whole model ran */
  fprintf(f, "\nProjection to all %d layers (%d dense, %d MoE) - a projection, not a measurement:\n"
             "TPOT_all = TPOT_measured + (dense layers not run) x t_dense + (MoE layers not run) x t_moe, with t_dense / "
             "t_moe OFF's mean CUPTI kernel time of one layer of that kind in this run (every kernel of the layer); for "
             "ON each adds the measured per-layer ON - OFF of the consumer GEMMs + 2 donors (a dense layer without the "
             "MoE op's sh_gu), the "
             "only nodes in which the ON graph differs, so that the rest of the layer's kernel-time spread stays out of "
             "the comparison.\n\n",
          r->dense_total + r->moe_total, r->dense_total, r->moe_total);
  fprintf(f, "| conc | layers run (dense + MoE) | t_dense OFF / ON µs | t_moe OFF / ON µs | TPOT_all OFF ms | ON ms | Δ%% |\n");
  fprintf(f, "|---:|---|---:|---:|---:|---:|---:|\n");
  for (int i = 0; i < r->n_points; i++) {
    const pz_cmp_point *p = &r->points[i];
    double off = tpot_projected(r, p, 0), on = tpot_projected(r, p, 1);
    fprintf(f, "| %d | %d + %d |", p->conc, p->n_dense_run, p->n_moe_run);
    for (int k = 0; k < 2; k++) {
      const double *v = k ? p->moe_layer_us : p->dense_layer_us;
      if (v[0] >= 0 && v[1] >= 0) fprintf(f, " %.1f / %.1f |", v[0], v[1]);
      else fprintf(f, " - |");
    }
    if (off > 0 && on > 0) fprintf(f, " %.3f | %.3f | %+.2f%% |\n", off, on, pct(on, off));
    else fprintf(f, " - | - | - |\n");
  }
}

/* prezero's saving per layer (OFF - ON of the consumer GEMMs + 2 donors, µs, averaged over the layers
 * run: a dense layer has no sh_gu; NAN when not profiled) and its share of the step: measured (the
 * layers this run decoded over its TPOT OFF) and projected to all the model's layers (over the
 * projected TPOT OFF); NAN where not measured. */
static void step_share(const pz_cmp_result *r, const pz_cmp_point *p, double *saving, double *share_run,
                       double *share_all) {
  const double dm = layer_delta(p), dd = dense_delta(p);
  *saving = *share_run = *share_all = NAN;
  if (dm != dm) return;
  int nd = p->n_dense_run, nm = p->n_moe_run;
  if (nd + nm <= 0) { /* a report without the layer split: every layer as measured */
    nd = 0;
    nm = r->layers;
  }
  const double save_run = -(nd * dd + nm * dm);
  *saving = nd + nm > 0 ? save_run / (nd + nm) : -dm;
  if (p->tpot_off_ms <= 0) return;
  *share_run = save_run / (p->tpot_off_ms * 1000.0);
  if (r->dense_total + r->moe_total <= 0) return; /* a report without the layer split: no projection */
  const int all = r->dense_total + r->moe_total;
  const double t_all = all <= r->layers ? p->tpot_off_ms : tpot_projected(r, p, 0);
  if (t_all > 0) *share_all = -(r->dense_total * dd + r->moe_total * dm) / (t_all * 1000.0);
}

/* How many layers fit and what one layer costs, the question of a quantised model (issue 15). */
static void write_layer_summary(FILE *f, const pz_cmp_result *r) {
  const int all = r->dense_total + r->moe_total > 0 ? r->dense_total + r->moe_total : r->layers_total;
  fprintf(f, "\nLayers and share of the step: %d of %d layers fit on each GPU%s", r->layers, r->layers_total,
          r->layers_auto ? " (chosen from free memory)" : " (--layers)");
  if (r->experts[0]) fprintf(f, "; routed experts %s", r->experts);
  if (r->moe_layer_bytes > 0)
    fprintf(f, "; one MoE layer %.2f GiB per GPU, %.2f GiB outside the layers, %.1f GiB usable", r->moe_layer_bytes / 1073741824.0,
            r->fixed_bytes / 1073741824.0, r->budget_bytes / 1073741824.0);
  fprintf(f, ". Saving = OFF - ON of the consumer GEMMs + 2 donors per layer (CUPTI); share of the step = saving x layers / "
             "TPOT OFF, for the layers run (measured) and for all %d (over the projected TPOT, a projection).\n\n", all);
  fprintf(f, "| conc | MoE layer OFF / ON µs | dense layer OFF / ON µs | saving per layer µs | share of a MoE layer | "
             "TPOT OFF ms (%d layers run) | share of the step, layers run | share of a %d-layer step |\n",
          r->layers, all);
  fprintf(f, "|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (int i = 0; i < r->n_points; i++) {
    const pz_cmp_point *p = &r->points[i];
    double sv, sr, sa;
    step_share(r, p, &sv, &sr, &sa);
    fprintf(f, "| %d |", p->conc);
    for (int k = 0; k < 2; k++) {
      const double *v = k ? p->dense_layer_us : p->moe_layer_us;
      if (v[0] >= 0 && v[1] >= 0) fprintf(f, " %.1f / %.1f |", v[0], v[1]);
      else fprintf(f, " - |");
    }
    if (sv == sv) fprintf(f, " %+.2f |", sv);
    else fprintf(f, " - |");
    const double dm = layer_delta(p); /* a MoE layer's own saving (with its sh_gu) */
    if (dm == dm && p->moe_layer_us[0] > 0) fprintf(f, " %.2f%% |", -100.0 * dm / p->moe_layer_us[0]);
    else fprintf(f, " - |");
    fprintf(f, " %.3f |", p->tpot_off_ms);
    if (sr == sr) fprintf(f, " %.2f%% |", 100.0 * sr);
    else fprintf(f, " - |");
    if (sa == sa) fprintf(f, " %.2f%% |\n", 100.0 * sa);
    else fprintf(f, " - |\n");
  }
}

static void write_markdown(FILE *f, const pz_cmp_result *r) {
  char isl[64];
  if (r->isl_max > r->isl) snprintf(isl, sizeof isl, "%d:%d (per request, seeded uniform)", r->isl, r->isl_max);
  else snprintf(isl, sizeof isl, "%d", r->isl);
  fprintf(f, "## prezero compare: %s%s%s%s, TP %d, %d of %d layers%s, ISL %s, OSL %d, %d round%s (%s)\n\n", r->model,
          r->experts[0] ? " (routed experts " : "", r->experts, r->experts[0] ? ")" : "", r->tp, r->layers, r->layers_total, r->layers_auto ? " (chosen from free memory)" : "", isl, r->osl, r->rounds,
          r->rounds == 1 ? "" : "s", r->device[0] ? r->device : "GPU");
  if (r->isl_max > r->isl)
    fprintf(f, "Unequal prompts: request i's ISL is drawn uniformly from [%d, %d] by the seed, the same for every\n"
               "concurrency, round and engine (a batch mixes lengths).\n\n", r->isl, r->isl_max);
  fprintf(f, "Decode of synthetic requests: a seeded random prompt KV cache of ISL tokens per request, then OSL greedy\n"
             "steps with batch = concurrency, prezero OFF and ON alternated (OFF ON OFF ON ...) in one process with\n"
             "the same seed (same weights, cache and first tokens). TPOT = decode time / OSL; E2E = the OSL decode\n"
             "steps of one request (no prefill); tokens/s per GPU = conc x OSL / decode time / TP. Medians over the\n"
             "rounds; 'OFF spread' = (max - min) / median of OFF's rounds, the run's own noise.\n\n");
  fprintf(f, "| conc | tok/s/GPU ON | OFF | Δ%% | TPOT ON ms | OFF | Δ%% | E2E ON s | OFF | Δ%% | OFF spread %% |\n");
  fprintf(f, "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (int i = 0; i < r->n_points; i++) {
    const pz_cmp_point *p = &r->points[i];
    const char *nz = is_noise(p) ? " (noise)" : "";
    fprintf(f, "| %d | %.1f | %.1f | %+.2f%%%s | %.3f | %.3f | %+.2f%%%s | %.3f | %.3f | %+.2f%%%s | %.2f |\n", p->conc,
            p->tput_on, p->tput_off, pct(p->tput_on, p->tput_off), nz, p->tpot_on_ms, p->tpot_off_ms,
            pct(p->tpot_on_ms, p->tpot_off_ms), nz, p->e2e_on_s, p->e2e_off_s, pct(p->e2e_on_s, p->e2e_off_s), nz,
            off_spread_pct(p));
  }
  fprintf(f, "\n(noise) = the ON - OFF difference is no larger than OFF's own spread over its rounds.\n");
  fprintf(f, "\nDecode kernel Δ per layer (ON - OFF, µs; negative = saved). CUPTI kernel + memset records of\n"
             "CUDA-graph replays, rank 0, median per graph node; each component averaged over the layers that\n"
             "have it; zeroing memsets/kernels count in their GEMM. n/f = not fired (the tuner's kernel is not\n"
             "split-K, or the fill gate found the fill not free at this batch size). The rows keep the MLA\n"
             "layouts' names; in GQA layouts qkv_a is qkv_proj, gate is gate_up_proj (dense layers) or the\n"
             "router (MoE layers), o_proj is the attention op's o_proj, and q_b does not exist.\n\n");
  fprintf(f, "| component |");
  for (int i = 0; i < r->n_points; i++) fprintf(f, " %d |", r->points[i].conc);
  fprintf(f, "\n|---|");
  for (int i = 0; i < r->n_points; i++) fprintf(f, "---:|");
  fprintf(f, "\n");
  for (int c = 0; c < PZ_CMP_N_COMP; c++) {
    fprintf(f, "| %s |", row_name(c));
    for (int i = 0; i < r->n_points; i++) cell_delta(f, &r->points[i], c);
    fprintf(f, "\n");
  }
  fprintf(f, "| layer total (consumer GEMMs + 2 donors) |");
  for (int i = 0; i < r->n_points; i++) {
    double t = layer_delta(&r->points[i]);
    if (t == t) fprintf(f, " %+.2f |", t);
    else fprintf(f, " - |");
  }
  fprintf(f, "\n");
  fprintf(f, "\nKernel time per layer, ON / OFF (µs):\n\n| component |");
  for (int i = 0; i < r->n_points; i++) fprintf(f, " %d |", r->points[i].conc);
  fprintf(f, "\n|---|");
  for (int i = 0; i < r->n_points; i++) fprintf(f, "---:|");
  fprintf(f, "\n");
  for (int c = 0; c < PZ_CMP_N_COMP; c++) {
    fprintf(f, "| %s |", c == PZ_CMP_DONOR ? "donors (AR+RMSNorm x2)" : row_name(c));
    for (int i = 0; i < r->n_points; i++) {
      const pz_cmp_point *p = &r->points[i];
      if (!p->profiled || p->comp_on_us[c] < 0) fprintf(f, " - |");
      else fprintf(f, " %.2f / %.2f |", p->comp_on_us[c], p->comp_off_us[c]);
    }
    fprintf(f, "\n");
  }
  if (r->baselines) write_baselines(f, r);
  write_projection(f, r);
  write_layer_summary(f, r);
  /* The fired list, from the executor's per-batch plan (saved as each component's "fired"). */
  fprintf(f, "\nConsumers that fired (the executor's per-batch plan: the ON graph differs from OFF only in these "
             "GEMMs and their donors' fill; where none fires, ON runs the OFF graph):");
  for (int i = 0; i < r->n_points; i++) {
    const pz_cmp_point *p = &r->points[i];
    fprintf(f, " conc %d:", p->conc);
    int n = 0;
    for (int c = PZ_CMP_QKV_A; c <= PZ_CMP_LAST_CONSUMER; c++)
      if (p->fired[c] == PZ_CMP_FIRED) { fprintf(f, " %s", pz_cmp_comp_name((pz_cmp_comp)c)); n++; }
    fprintf(f, "%s;", n ? "" : " none");
  }
  fprintf(f, "\n");
  fprintf(f, "\nBit-identity (ON vs OFF, every token of every round; final step's logits):\n\n");
  fprintf(f, "| conc | tokens | logits | max abs diff | OFF run-to-run spread |\n|---:|---|---|---:|---:|\n");
  bool all_tok = true, all_log = true;
  for (int i = 0; i < r->n_points; i++) {
    const pz_cmp_point *p = &r->points[i];
    all_tok &= p->tokens_identical;
    all_log &= p->logits_identical;
    char spread[32];
    if (p->logits_off_spread < 0) snprintf(spread, sizeof spread, "-");
    else snprintf(spread, sizeof spread, "%.3g", p->logits_off_spread);
    char tok[64];
    if (p->tokens_identical) snprintf(tok, sizeof tok, "identical");
    else snprintf(tok, sizeof tok, "differ (first at step %lld, row %lld)",
                  (long long)(p->first_token_mismatch / p->conc), (long long)(p->first_token_mismatch % p->conc));
    fprintf(f, "| %d | %s | %s | %.3g | %s |\n", p->conc, tok, p->logits_identical ? "bit-identical" : "differ",
            p->logits_max_abs_diff, spread);
  }
  /* Per concurrency: identical, within OFF's own spread, or beyond it (the list names which). */
  char beyond[256] = "", within_l[256] = "";
  bool diverged = false;
  for (int i = 0; i < r->n_points; i++) {
    const pz_cmp_point *p = &r->points[i];
    if (p->logits_identical) continue;
    diverged |= !p->tokens_identical;
    bool in = p->logits_off_spread >= 0 && p->logits_max_abs_diff <= p->logits_off_spread;
    char *l = in ? within_l : beyond;
    size_t n = strlen(l);
    snprintf(l + n, sizeof beyond - n, "%s%d", n ? ", " : "", p->conc);
  }
  char logits[900];
  if (all_log) snprintf(logits, sizeof logits, "BIT-IDENTICAL");
  else
    snprintf(logits, sizeof logits, "not bit-identical%s%s%s%s%s (float atomics leave the split-K order free, "
             "docs/ARCHITECTURE.md; split counts <= 2, e.g. PREZERO_GEMM_SPLITS=2, remove that freedom)%s",
             beyond[0] ? "; beyond OFF's own run-to-run spread at conc " : "", beyond,
             within_l[0] ? "; within it at conc " : "", within_l, "",
             diverged ? "; where tokens differ, the final logits belong to different sequences" : "");
  fprintf(f, "\nVerdict: tokens %s; logits %s. Settings: %s.\n", all_tok ? "IDENTICAL" : "DIFFER", logits,
          r->determinism);
  /* Targets: TPOT never worse beyond the noise; per-layer total never worse than OFF + 0.1 µs;
   * >= 3 µs saved per layer at concurrency <= 32. */
  int slower = 0, measured = 0, not_worse = 0, small = 0, small_ok = 0;
  for (int i = 0; i < r->n_points; i++) {
    const pz_cmp_point *p = &r->points[i];
    if (pct(p->tpot_on_ms, p->tpot_off_ms) > off_spread_pct(p)) slower++;
    double t = layer_delta(p);
    if (t != t) continue;
    measured++;
    not_worse += t <= 0.1;
    if (p->conc <= 32) {
      small++;
      small_ok += t <= -3.0;
    }
  }
  fprintf(f, "\nTargets: TPOT ON slower than OFF beyond OFF's spread at %d of %d concurrencies; per-layer total "
             "(consumer GEMMs + 2 donors) ON <= OFF + 0.1 µs at %d of %d profiled concurrencies; ON saves >= 3 µs per layer "
             "at %d of %d profiled concurrencies <= 32.\n",
          slower, r->n_points, not_worse, measured, small_ok, small);
  if (r->notes[0]) fprintf(f, "\nNotes: %s\n", r->notes);
  if (r->command[0]) fprintf(f, "\nCommand: `%s`%s%s\n", r->command, r->date[0] ? ", " : "", r->date);
}

/* The matplotlib renderer: $PREZERO_PLOT_SCRIPT, else tools/plot_compare.py of the source tree. */
static const char *plot_script(void) {
  const char *e = getenv("PREZERO_PLOT_SCRIPT");
#ifdef PZ_PLOT_SCRIPT
  return e && *e ? e : PZ_PLOT_SCRIPT;
#else
  return e && *e ? e : "tools/plot_compare.py";
#endif
}

/* gnuplot data and script; the PNGs are rendered by gnuplot when it is on PATH, else by
 * python3 + matplotlib (plot_script(), from the compare.json at json_src). */
static int write_plots(const char *dir, const pz_cmp_result *r, const char *json_src, bool *rendered) {
  char p[1200];
  *rendered = false;
  snprintf(p, sizeof p, "%s/throughput.dat", dir);
  FILE *f = fopen(p, "w");
  if (!f) return 1;
  fprintf(f, "# conc  tok/s/GPU ON  tok/s/GPU OFF  TPOT ON ms  TPOT OFF ms\n");
  for (int i = 0; i < r->n_points; i++)
    fprintf(f, "%d %.3f %.3f %.4f %.4f\n", r->points[i].conc, r->points[i].tput_on, r->points[i].tput_off,
            r->points[i].tpot_on_ms, r->points[i].tpot_off_ms);
  fclose(f);
  snprintf(p, sizeof p, "%s/components.dat", dir);
  f = fopen(p, "w");
  if (!f) return 1;
  fprintf(f, "# conc  Δ µs/layer (ON - OFF): qkv_a q_b gate o_proj sh_gu gemm_subtotal donor_fill; n/f or unmeasured = 0\n");
  for (int i = 0; i < r->n_points; i++) {
    const pz_cmp_point *pt = &r->points[i];
    fprintf(f, "%d", pt->conc);
    for (int c = 0; c < PZ_CMP_N_COMP; c++) {
      double d = comp_delta(pt, c);
      bool nf = c <= PZ_CMP_LAST_CONSUMER && pt->fired[c] == PZ_CMP_NOT_FIRED;
      fprintf(f, " %.4f", (d == d && !nf && pt->profiled) ? d : 0.0);
    }
    fprintf(f, "\n");
  }
  fclose(f);
  snprintf(p, sizeof p, "%s/plots.gp", dir);
  f = fopen(p, "w");
  if (!f) return 1;
  fprintf(f,
          "# prezero compare plots: run 'gnuplot plots.gp' in this folder.\n"
          "if (strstrt(GPVAL_TERMINALS, 'pngcairo') > 0) { set terminal pngcairo size 900,560 } else { set terminal png size 900,560 }\n"
          "set termoption noenhanced\n"
          "set output 'throughput.png'\n"
          "set title '%s TP %d, %d layers: output tokens/s per GPU'\n"
          "set xlabel 'concurrency'; set ylabel 'tokens/s per GPU'; set logscale x 2; set key left top; set grid\n"
          "plot 'throughput.dat' using 1:2 with linespoints lw 2 title 'prezero ON', "
          "'' using 1:3 with linespoints lw 2 title 'prezero OFF'\n"
          "unset logscale x\n"
          "set output 'components.png'\n"
          "set title 'kernel time per layer, ON - OFF (µs; negative = saved; n/f = 0)'\n"
          "set xlabel 'concurrency'; set ylabel 'µs per layer'; set style data histogram\n"
          "set style histogram clustered gap 1; set style fill solid 0.8 border -1; set key outside right\n"
          "plot 'components.dat' using 2:xtic(1) title 'qkv_a', '' using 3 title 'q_b', '' using 4 title 'gate', "
          "'' using 5 title 'o_proj', '' using 6 title 'sh_gu', '' using 7 title 'GEMM subtotal', '' using 8 title "
          "'donor fill cost'\n",
          r->model, r->tp, r->layers);
  fclose(f);
  char cmd[3000];
  if (system("command -v gnuplot >/dev/null 2>&1") == 0) {
    snprintf(cmd, sizeof cmd, "cd '%s' && gnuplot plots.gp 2>/dev/null", dir);
    *rendered = system(cmd) == 0;
  }
  if (!*rendered && json_src && json_src[0] && access(plot_script(), R_OK) == 0 &&
      system("command -v python3 >/dev/null 2>&1") == 0) {
    snprintf(cmd, sizeof cmd, "python3 '%s' '%s' '%s' >/dev/null 2>&1", plot_script(), json_src, dir);
    *rendered = system(cmd) == 0;
  }
  return 0;
}

/* ---------------------------------------------------------------- JSON */

/* A number written with 17 significant digits, so reading it back gives the same double and
 * --render reproduces the report byte for byte (cJSON's own printer may keep 15 digits). */
static cJSON *num17(double v) {
  char b[40];
  if (v != v || v > 1e308 || v < -1e308) return cJSON_CreateNull();
  snprintf(b, sizeof b, "%.17g", v);
  return cJSON_CreateRaw(b);
}
static void add_num(cJSON *o, const char *k, double v) { cJSON_AddItemToObject(o, k, num17(v)); }
static cJSON *pair_arr(const double *v, int n) {
  cJSON *a = cJSON_CreateArray();
  for (int i = 0; a && i < n; i++) cJSON_AddItemToArray(a, num17(v[i]));
  return a;
}

static cJSON *to_json(const pz_cmp_result *r) {
  cJSON *j = cJSON_CreateObject();
  cJSON_AddStringToObject(j, "model", r->model);
  cJSON_AddStringToObject(j, "device", r->device);
  add_num(j, "tp", r->tp);
  add_num(j, "layers", r->layers);
  add_num(j, "layers_total", r->layers_total);
  add_num(j, "dense_total", r->dense_total);
  add_num(j, "moe_total", r->moe_total);
  cJSON_AddStringToObject(j, "experts", r->experts);
  add_num(j, "moe_layer_bytes", r->moe_layer_bytes);
  add_num(j, "fixed_bytes", r->fixed_bytes);
  add_num(j, "budget_bytes", r->budget_bytes);
  if (r->baselines) {
    cJSON *bl = cJSON_AddArrayToObject(j, "baselines");
    for (int b = 1; b < PZ_CMP_N_BASE; b++)
      if (r->baselines & (1u << b)) cJSON_AddItemToArray(bl, cJSON_CreateString(pz_cmp_base_name(b)));
  }
  cJSON_AddBoolToObject(j, "layers_auto", r->layers_auto);
  add_num(j, "isl", r->isl);
  if (r->isl_max > r->isl) add_num(j, "isl_max", r->isl_max);
  add_num(j, "osl", r->osl);
  add_num(j, "rounds", r->rounds);
  add_num(j, "seed", (double)r->seed);
  cJSON_AddStringToObject(j, "determinism", r->determinism);
  cJSON_AddStringToObject(j, "notes", r->notes);
  cJSON_AddStringToObject(j, "command", r->command);
  cJSON_AddStringToObject(j, "date", r->date);
  cJSON_AddStringToObject(j, "units", "tput: output tokens/s per GPU; tpot: ms; e2e: s per request (osl decode "
                                      "steps, no prefill); components: µs per layer (CUPTI, rank 0)");
  cJSON *pts = cJSON_AddArrayToObject(j, "points");
  for (int i = 0; i < r->n_points; i++) {
    const pz_cmp_point *p = &r->points[i];
    cJSON *o = cJSON_CreateObject();
    add_num(o, "conc", p->conc);
    add_num(o, "batch", p->batch);
    {
      double sv, sr, sa; /* derived (the report's "share of the step" table); not read back */
      step_share(r, p, &sv, &sr, &sa);
      add_num(o, "saving_per_layer_us", sv);
      add_num(o, "share_of_step_run", sr);
      add_num(o, "share_of_step_all_layers", sa);
    }
    add_num(o, "tput_on", p->tput_on);
    add_num(o, "tput_off", p->tput_off);
    add_num(o, "tpot_on_ms", p->tpot_on_ms);
    add_num(o, "tpot_off_ms", p->tpot_off_ms);
    add_num(o, "e2e_on_s", p->e2e_on_s);
    add_num(o, "e2e_off_s", p->e2e_off_s);
    cJSON_AddItemToObject(o, "tpot_on_rounds_ms", pair_arr(p->tpot_on_rounds_ms, p->rounds));
    cJSON_AddItemToObject(o, "tpot_off_rounds_ms", pair_arr(p->tpot_off_rounds_ms, p->rounds));
    cJSON_AddBoolToObject(o, "profiled", p->profiled);
    cJSON *comp = cJSON_AddObjectToObject(o, "components_us_per_layer");
    for (int c = 0; c < PZ_CMP_N_COMP; c++) {
      cJSON *x = cJSON_AddObjectToObject(comp, pz_cmp_comp_name((pz_cmp_comp)c));
      add_num(x, "on", p->comp_on_us[c]);
      add_num(x, "off", p->comp_off_us[c]);
      if (c <= PZ_CMP_LAST_CONSUMER)
        cJSON_AddStringToObject(x, "fired", p->fired[c] == PZ_CMP_FIRED ? "yes" : p->fired[c] == PZ_CMP_NOT_FIRED ? "n/f" : "n/a");
      cJSON_AddBoolToObject(x, "kernels_changed", p->kernels_changed[c]);
    }
    cJSON_AddItemToObject(o, "dense_layer_us", pair_arr(p->dense_layer_us, 2));
    cJSON_AddItemToObject(o, "moe_layer_us", pair_arr(p->moe_layer_us, 2));
    add_num(o, "n_dense_run", p->n_dense_run);
    add_num(o, "n_moe_run", p->n_moe_run);
    if (r->baselines) {
      cJSON *bj = cJSON_AddObjectToObject(o, "baselines_us_per_layer");
      for (int b = 0; b < PZ_CMP_N_BASE; b++) {
        if (b != PZ_CMP_BASE_TUNED && !(r->baselines & (1u << b))) continue;
        cJSON *x = cJSON_AddObjectToObject(bj, pz_cmp_base_name(b));
        for (int c = 0; c < PZ_CMP_N_COMP; c++) add_num(x, pz_cmp_comp_name((pz_cmp_comp)c), p->base_us[b][c]);
      }
    }
    cJSON_AddBoolToObject(o, "tokens_identical", p->tokens_identical);
    add_num(o, "first_token_mismatch", (double)p->first_token_mismatch);
    cJSON_AddBoolToObject(o, "logits_identical", p->logits_identical);
    add_num(o, "logits_max_abs_diff", p->logits_max_abs_diff);
    add_num(o, "logits_off_spread", p->logits_off_spread);
    cJSON_AddItemToArray(pts, o);
  }
  return j;
}

static double num(const cJSON *o, const char *k, double dflt) {
  const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, k);
  return cJSON_IsNumber(x) ? x->valuedouble : dflt;
}
static bool boolean(const cJSON *o, const char *k) { return cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, k)); }
static void str(const cJSON *o, const char *k, char *dst, size_t cap) {
  const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, k);
  snprintf(dst, cap, "%s", cJSON_IsString(x) ? x->valuestring : "");
}

/* Reads a compare.json; returns a one-line reason on failure (NULL when fine). */
static const char *from_json(const char *text, pz_cmp_result *r) {
  memset(r, 0, sizeof *r);
  cJSON *j = cJSON_Parse(text);
  if (!j || !cJSON_IsObject(j)) { cJSON_Delete(j); return "is not a JSON object"; }
  const cJSON *pts = cJSON_GetObjectItemCaseSensitive(j, "points");
  if (!cJSON_IsArray(pts) || !cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(j, "tp"))) {
    cJSON_Delete(j);
    return "has no 'tp' number or 'points' array (not a compare.json)";
  }
  str(j, "model", r->model, sizeof r->model);
  str(j, "device", r->device, sizeof r->device);
  str(j, "determinism", r->determinism, sizeof r->determinism);
  str(j, "notes", r->notes, sizeof r->notes);
  str(j, "command", r->command, sizeof r->command);
  str(j, "date", r->date, sizeof r->date);
  r->tp = (int)num(j, "tp", 1);
  r->layers = (int)num(j, "layers", 0);
  r->layers_total = (int)num(j, "layers_total", 0);
  r->dense_total = (int)num(j, "dense_total", 0);
  r->moe_total = (int)num(j, "moe_total", 0);
  str(j, "experts", r->experts, sizeof r->experts);
  r->moe_layer_bytes = num(j, "moe_layer_bytes", 0);
  r->fixed_bytes = num(j, "fixed_bytes", 0);
  r->budget_bytes = num(j, "budget_bytes", 0);
  {
    const cJSON *bl = cJSON_GetObjectItemCaseSensitive(j, "baselines"), *x;
    cJSON_ArrayForEach(x, bl)
      for (int b = 1; b < PZ_CMP_N_BASE; b++)
        if (cJSON_IsString(x) && !strcmp(x->valuestring, pz_cmp_base_name(b))) r->baselines |= 1u << b;
  }
  r->layers_auto = boolean(j, "layers_auto");
  r->isl = (int)num(j, "isl", 0);
  r->isl_max = (int)num(j, "isl_max", 0);
  r->osl = (int)num(j, "osl", 0);
  r->rounds = (int)num(j, "rounds", 1);
  r->seed = (uint64_t)num(j, "seed", 0);
  const cJSON *o;
  cJSON_ArrayForEach(o, pts) {
    if (r->n_points == PZ_CMP_MAX_CONC) break;
    pz_cmp_point *p = &r->points[r->n_points++];
    p->conc = (int)num(o, "conc", 0);
    p->batch = (int)num(o, "batch", p->conc);
    if (p->conc < 1) { cJSON_Delete(j); return "has a point without a positive 'conc'"; }
    p->tput_on = num(o, "tput_on", 0);
    p->tput_off = num(o, "tput_off", 0);
    p->tpot_on_ms = num(o, "tpot_on_ms", 0);
    p->tpot_off_ms = num(o, "tpot_off_ms", 0);
    p->e2e_on_s = num(o, "e2e_on_s", 0);
    p->e2e_off_s = num(o, "e2e_off_s", 0);
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(o, "tpot_off_rounds_ms"), *b = cJSON_GetObjectItemCaseSensitive(o, "tpot_on_rounds_ms");
    p->rounds = 0;
    for (int i = 0; i < PZ_CMP_MAX_ROUNDS && i < cJSON_GetArraySize(a); i++) {
      p->tpot_off_rounds_ms[i] = cJSON_GetArrayItem(a, i)->valuedouble;
      const cJSON *bi = cJSON_GetArrayItem(b, i);
      p->tpot_on_rounds_ms[i] = bi ? bi->valuedouble : 0;
      p->rounds = i + 1;
    }
    p->profiled = boolean(o, "profiled");
    const cJSON *comp = cJSON_GetObjectItemCaseSensitive(o, "components_us_per_layer");
    for (int c = 0; c < PZ_CMP_N_COMP; c++) {
      const cJSON *x = cJSON_GetObjectItemCaseSensitive(comp, pz_cmp_comp_name((pz_cmp_comp)c));
      p->comp_on_us[c] = num(x, "on", -1);
      p->comp_off_us[c] = num(x, "off", -1);
      p->kernels_changed[c] = boolean(x, "kernels_changed");
      char fired[8];
      str(x, "fired", fired, sizeof fired);
      p->fired[c] = !strcmp(fired, "yes") ? PZ_CMP_FIRED : !strcmp(fired, "n/f") ? PZ_CMP_NOT_FIRED : PZ_CMP_NA;
    }
    {
      const cJSON *bj = cJSON_GetObjectItemCaseSensitive(o, "baselines_us_per_layer");
      for (int b = 0; b < PZ_CMP_N_BASE; b++) {
        const cJSON *x = cJSON_GetObjectItemCaseSensitive(bj, pz_cmp_base_name(b));
        for (int c = 0; c < PZ_CMP_N_COMP; c++) p->base_us[b][c] = num(x, pz_cmp_comp_name((pz_cmp_comp)c), -1);
      }
    }
    {
      const cJSON *d = cJSON_GetObjectItemCaseSensitive(o, "dense_layer_us"), *mo = cJSON_GetObjectItemCaseSensitive(o, "moe_layer_us");
      for (int k = 0; k < 2; k++) {
        const cJSON *x = cJSON_GetArrayItem(d, k), *y = cJSON_GetArrayItem(mo, k);
        p->dense_layer_us[k] = cJSON_IsNumber(x) ? x->valuedouble : -1;
        p->moe_layer_us[k] = cJSON_IsNumber(y) ? y->valuedouble : -1;
      }
      p->n_dense_run = (int)num(o, "n_dense_run", 0);
      p->n_moe_run = (int)num(o, "n_moe_run", 0);
    }
    p->tokens_identical = boolean(o, "tokens_identical");
    p->first_token_mismatch = (int64_t)num(o, "first_token_mismatch", -1);
    p->logits_identical = boolean(o, "logits_identical");
    p->logits_max_abs_diff = num(o, "logits_max_abs_diff", 0);
    p->logits_off_spread = num(o, "logits_off_spread", -1);
  }
  cJSON_Delete(j);
  return NULL;
}

/* Writes compare.json (unless from a render), compare.md and the plots into dir; prints the
 * markdown on stdout. */
static int write_outputs(const char *dir, const pz_cmp_result *r, bool json, const char *json_src) {
  char p[1200];
  if (mkdir(dir, 0777) != 0 && errno != EEXIST) {
    fprintf(stderr, "prezero compare: cannot create --out folder '%s': %s; give a writable folder\n", dir, strerror(errno));
    return 1;
  }
  if (json) {
    cJSON *j = to_json(r);
    char *text = j ? cJSON_Print(j) : NULL;
    snprintf(p, sizeof p, "%s/compare.json", dir);
    FILE *f = text ? fopen(p, "w") : NULL;
    if (!f || fputs(text, f) < 0 || fclose(f) != 0) {
      fprintf(stderr, "prezero compare: cannot write '%s'; give a writable --out folder\n", p);
      free(text);
      cJSON_Delete(j);
      return 1;
    }
    free(text);
    cJSON_Delete(j);
  }
  snprintf(p, sizeof p, "%s/compare.md", dir);
  FILE *f = fopen(p, "w");
  if (!f) {
    fprintf(stderr, "prezero compare: cannot write '%s'; give a writable --out folder\n", p);
    return 1;
  }
  write_markdown(f, r);
  fclose(f);
  write_markdown(stdout, r);
  bool rendered = false;
  char src[1200];
  if (json) snprintf(src, sizeof src, "%s/compare.json", dir);
  else snprintf(src, sizeof src, "%s", json_src);
  if (write_plots(dir, r, src, &rendered) != 0) {
    fprintf(stderr, "prezero compare: cannot write the plot files in '%s'; give a writable --out folder\n", dir);
    return 1;
  }
  const char *js = json ? "compare.json," : "";
  if (rendered) fprintf(stderr, "prezero compare: wrote %s/{%scompare.md,throughput.png,components.png}\n", dir, js);
  else fprintf(stderr, "prezero compare: wrote %s/{%scompare.md,*.dat,plots.gp}; neither gnuplot nor python3 with "
               "matplotlib rendered the PNGs: install gnuplot, or matplotlib and 'python3 %s %s %s'\n", dir, js,
               plot_script(), src, dir);
  return 0;
}

/* --baseline LIST: names of pz_cmp_base, comma-separated, into a bit set. */
static int parse_baselines(const char *v, unsigned *out) {
  unsigned m = 0;
  const char *s = v;
  while (*s) {
    size_t l = strcspn(s, ",");
    int hit = -1;
    for (int b = 0; b < PZ_CMP_N_BASE; b++)
      if (strlen(pz_cmp_base_name(b)) == l && !strncmp(s, pz_cmp_base_name(b), l)) hit = b;
    if (hit < 0) {
      char msg[400];
      snprintf(msg, sizeof msg, "--baseline '%.*s' is not one of tuned, inkernel, memset, serial, fullk, cublas", (int)(l > 100 ? 100 : l), s);
      return fail_line(msg, "e.g. --baseline inkernel,memset,serial,cublas");
    }
    m |= 1u << hit;
    s += l;
    if (*s == ',') {
      s++;
      if (!*s) break;
    }
  }
  if (!m) return fail_line("--baseline is empty", "e.g. --baseline inkernel,memset,serial,cublas");
  *out = m;
  return 0;
}

static int render(const char *json_path, const char *dir) {
  struct stat sb; /* a directory opens, then reads as "out of memory": say what it is */
  if (stat(json_path, &sb) == 0 && S_ISDIR(sb.st_mode)) {
    char cj[4096];
    snprintf(cj, sizeof cj, "%s/compare.json", json_path);
    int has = stat(cj, &sb) == 0 && S_ISREG(sb.st_mode);
    fprintf(stderr, "prezero compare: --render %s is a directory; give the path of a compare.json%s%s\n", json_path,
            has ? ", e.g. --render " : "", has ? cj : "");
    return PZ_CLI_EXIT_ERROR;
  }
  if (stat(json_path, &sb) == 0 && !S_ISREG(sb.st_mode)) { /* a FIFO would block the open below */
    fprintf(stderr, "prezero compare: --render %s is not a regular file; give the path of a compare.json\n", json_path);
    return PZ_CLI_EXIT_ERROR;
  }
  FILE *f = fopen(json_path, "rb");
  if (!f) {
    fprintf(stderr, "prezero compare: cannot read '%s': %s; give the path of a compare.json\n", json_path, strerror(errno));
    return PZ_CLI_EXIT_ERROR;
  }
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *text = malloc((size_t)(n > 0 ? n : 0) + 1);
  size_t got = text ? fread(text, 1, (size_t)(n > 0 ? n : 0), f) : 0;
  fclose(f);
  if (!text) { fail_line("out of memory reading the JSON", "free some memory"); return PZ_CLI_EXIT_ERROR; }
  text[got] = 0;
  pz_cmp_result *r = malloc(sizeof *r);
  const char *why = r ? from_json(text, r) : "could not be read (out of memory)";
  free(text);
  if (why) {
    fprintf(stderr, "prezero compare: '%s' %s; give a compare.json written by 'prezero compare'\n", json_path, why);
    free(r);
    return 1;
  }
  int rc = write_outputs(dir, r, false, json_path);
  free(r);
  return rc;
}

#ifdef PZ_HAVE_CUDA
/* One status line on stderr, rewritten in place on a terminal, else one line per update. */
static bool progress_shown;
static void on_progress(void *user, const char *line) {
  (void)user;
  if (isatty(2)) fprintf(stderr, "\r[compare] %-100.100s", line);
  else fprintf(stderr, "[compare] %s\n", line);
  progress_shown = true;
  fflush(stderr);
}
#endif

int pz_cmd_compare(int argc, char **argv) {
  pz_cmp_opts o = PZ_CMP_OPTS_INIT;
  const char *out = "prezero_compare", *render_path = NULL;
  bool config_given = false;
  long long v;
  long long procs = 0, rank = -1, world = 0, timeout_s = 60;
  const char *id_file = NULL;
  bool tp_given = false;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(stdout); return 0; }
    if (!strcmp(a, "--no-profile")) { o.profile = false; continue; }
    if (!strcmp(a, "--deterministic")) { setenv("PREZERO_GEMM_SPLITS", "2", 1); continue; } /* the flag beats the environment */
    const char *val = i + 1 < argc ? argv[i + 1] : NULL;
    bool takes = !strcmp(a, "--config") || !strcmp(a, "--model") || !strcmp(a, "--tp") || !strcmp(a, "--layers") ||
                 !strcmp(a, "--isl") || !strcmp(a, "--osl") || !strcmp(a, "--conc") || !strcmp(a, "--rounds") || !strcmp(a, "--seed") ||
                 !strcmp(a, "--out") || !strcmp(a, "--render") || !strcmp(a, "--profile-iters") || !strcmp(a, "--baseline") || !strcmp(a, "--quant") ||
                 !strcmp(a, "--procs") || !strcmp(a, "--rank") || !strcmp(a, "--world") || !strcmp(a, "--id-file") || !strcmp(a, "--timeout-s");
    if (!takes) {
      char msg[300];
      snprintf(msg, sizeof msg, "unknown option '%.200s'", a);
      return fail_line(msg, "see 'prezero compare --help'");
    }
    if (!val) {
      char msg[300];
      snprintf(msg, sizeof msg, "%s needs a value", a);
      return fail_line(msg, "see 'prezero compare --help'");
    }
    i++;
    if ((!strcmp(a, "--config") || !strcmp(a, "--model")) &&
        pz_cli_empty_model_flag("compare", a, val, pz_config_preset_names()))
      return PZ_CLI_EXIT_USAGE;
    if (!strcmp(a, "--config")) { o.model = val; config_given = true; }
    else if (!strcmp(a, "--model")) o.model_dir = val;
    else if (!strcmp(a, "--out")) out = val;
    else if (!strcmp(a, "--render")) render_path = val;
    else if (!strcmp(a, "--baseline")) { if (parse_baselines(val, &o.baselines)) return 2; }
    else if (!strcmp(a, "--quant")) {
      o.quant = !strcmp(val, "bf16") ? PZ_QUANT_BF16 : !strcmp(val, "int4") ? PZ_QUANT_INT4 : !strcmp(val, "fp8") ? PZ_QUANT_FP8 : -1;
      if (o.quant < 0) {
        char msg[300];
        snprintf(msg, sizeof msg, "--quant '%.200s' is not a storage of the routed experts", val);
        return fail_line(msg, "use --quant bf16, int4 or fp8");
      }
    }
    else if (!strcmp(a, "--conc")) { if (parse_conc(val, o.conc, &o.n_conc)) return 2; }
    else if (!strcmp(a, "--tp")) { if (parse_int(a, val, 1, 8, &v)) return 2; o.tp = (int)v; tp_given = true; }
    else if (!strcmp(a, "--procs")) { if (parse_int(a, val, 2, 8, &procs)) return 2; }
    else if (!strcmp(a, "--rank")) { if (parse_int(a, val, 0, 7, &rank)) return 2; }
    else if (!strcmp(a, "--world")) { if (parse_int(a, val, 2, 8, &world)) return 2; }
    else if (!strcmp(a, "--timeout-s")) { if (parse_int(a, val, 1, 3600, &timeout_s)) return 2; }
    else if (!strcmp(a, "--id-file")) id_file = val;
    else if (!strcmp(a, "--layers")) { if (parse_int(a, val, 1, 1000, &v)) return 2; o.layers = (int)v; }
    else if (!strcmp(a, "--isl")) { if (parse_isl(val, &o.isl, &o.isl_max)) return 2; }
    else if (!strcmp(a, "--osl")) { if (parse_int(a, val, 1, 1 << 20, &v)) return 2; o.osl = (int)v; }
    else if (!strcmp(a, "--rounds")) { if (parse_int(a, val, 1, PZ_CMP_MAX_ROUNDS, &v)) return 2; o.rounds = (int)v; }
    else if (!strcmp(a, "--profile-iters")) { if (parse_int(a, val, 1, 10000, &v)) return 2; o.profile_iters = (int)v; }
    else if (!strcmp(a, "--seed")) {
      unsigned long long s;
      if (pz_cli_parse_seed(val, &s)) {
        char msg[300];
        snprintf(msg, sizeof msg, "--seed needs a non-negative integer (decimal, or hex with 0x), got '%.200s'", val);
        return fail_line(msg, "e.g. --seed 1234");
      }
      o.seed = s;
    }
  }
  if (render_path) return render(render_path, out);
  /* One process per rank: --procs N, or --rank/--world/--id-file together. */
  const bool sep = rank >= 0 || world || id_file;
  if (pz_cli_ranks_form("compare", procs != 0, sep, rank, world, id_file)) return 2;
  const int nranks = (int)(procs ? procs : world);
  if (nranks) {
    if (tp_given && o.tp != nranks) return fail_line("--tp differs from the number of ranks", "leave --tp out or make them equal");
    o.tp = nranks;
  }
  if (o.baselines && !o.profile)
    return fail_line("--baseline needs the CUPTI profile", "drop --no-profile or --baseline");
  if (o.model_dir && config_given)
    return fail_line("--model and --config both give the model", "use one of them");
  if (o.model_dir && o.quant != PZ_QUANT_AUTO)
    return fail_line("--quant sets synthetic weights but --model's checkpoint comes as stored", "drop --quant or --model");
  /* Checks that need no GPU, so they fail the same way in every build. */
  pz_model_config mc;
  if ((o.model_dir ? pz_checkpoint_load_config(o.model_dir, &mc) : pz_config_load(o.model, &mc)) != PZ_OK) {
    char msg[400];
    snprintf(msg, sizeof msg, "%.380s", pz_last_error());
    if (!o.model_dir && o.model && pz_cli_config_dir("compare", o.model, 1)) return PZ_CLI_EXIT_ERROR;
    if (o.model_dir && strstr(msg, "; ")) fprintf(stderr, "prezero compare: %s\n", msg);
    else fail_line(msg, o.model_dir ? "give --model a Hugging Face checkpoint directory"
                                     : "use --config with a preset name or a config.json path");
    return 1;
  }
  if (o.layers > mc.num_hidden_layers) {
    char msg[200];
    snprintf(msg, sizeof msg, "--layers %d exceeds num_hidden_layers (%lld) of %s", o.layers,
             (long long)mc.num_hidden_layers, mc.name);
    fail_line(msg, "use a smaller --layers");
    return 2;
  }
  if (mc.num_attention_heads % o.tp) {
    char msg[200];
    snprintf(msg, sizeof msg, "--tp %d does not divide num_attention_heads (%lld) of %s", o.tp,
             (long long)mc.num_attention_heads, mc.name);
    fail_line(msg, "use a TP that divides it");
    return 2;
  }
  if ((int64_t)pz_cmp_isl_cap(o.isl, o.isl_max) + o.osl > mc.max_position_embeddings) {
    char msg[200];
    snprintf(msg, sizeof msg, "--isl %d + --osl %d exceeds max_position_embeddings (%lld) of %s",
             pz_cmp_isl_cap(o.isl, o.isl_max), o.osl, (long long)mc.max_position_embeddings, mc.name);
    fail_line(msg, "use a smaller --isl or --osl");
    return 2;
  }
#ifndef PZ_HAVE_CUDA
  fprintf(stderr, "prezero compare: this build has no CUDA backend; rebuild with nvcc present (PZ_WITH_CUDA=ON) and run on a GPU\n");
  return 1;
#else
  if (procs) {
    /* Fork the ranks before any CUDA call; each child goes on as its rank. */
    static char id_buf[256];
    int prc = 0;
    int r = pz_cli_fork_ranks("compare", (int)procs, 2.0 * (double)timeout_s + 10.0, id_buf, sizeof id_buf, &prc);
    if (r < 0) return prc;
    rank = r;
    id_file = id_buf;
  }
  pz_ar_comm *comm = NULL;
  pz_ar_unique_id id;
  memset(&id, 0, sizeof id);
  if (nranks) {
    const pz_status js = pz_ar_comm_join_file(nranks, (int)rank, id_file, -1 /* GPU rank % visible */, o.conc[o.n_conc - 1],
                                              (mc.hidden_size + 7) / 8 * 8, (int)(timeout_s * 1000), &comm, &id);
    if (js != PZ_OK) {
      fprintf(stderr, "prezero compare: %s%s\n", pz_last_error(), strstr(pz_last_error(), "; ") ? "" : "; see 'prezero compare --help'");
      return 1; /* the join cleaned up after itself */
    }
    o.ar_comm = comm;
  }
  int gpus = pz_gpu_count();
  if (!comm && gpus < o.tp) {
    char what[32], msg[300];
    snprintf(what, sizeof what, "--tp %d", o.tp);
    pz_cli_gpu_refusal(msg, sizeof msg, what, o.tp, gpus, 1);
    fprintf(stderr, "prezero compare: %s\n", msg);
    return 1;
  }
  o.progress = on_progress;
  o.log = stderr;
  pz_cmp_result *r = malloc(sizeof *r);
  if (!r) return fail_line("out of memory", "free some host memory");
  pz_status st = pz_compare_run(&o, r);
  if (st != PZ_OK && comm) pz_ar_comm_abort(comm); /* the peers may wait in a collective this rank left */
  snprintf(r->command, sizeof r->command, "prezero");
  for (int i = 0; i < argc; i++) {
    strncat(r->command, " ", sizeof r->command - strlen(r->command) - 1);
    strncat(r->command, argv[i], sizeof r->command - strlen(r->command) - 1);
  }
  {
    time_t now = time(NULL);
    strftime(r->date, sizeof r->date, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
  }
  if (progress_shown && isatty(2)) fprintf(stderr, "\r%-112s\r", "");
  if (comm) pz_ar_comm_leave_file(comm, &id, (int)rank, id_file);
  const bool reports = rank <= 0; /* one process per rank: rank 0 reports and writes --out */
  if (st != PZ_OK) {
    const char *msg = pz_last_error();
    if (strstr(msg, "; ")) fprintf(stderr, "prezero compare: %s\n", msg);
    else fprintf(stderr, "prezero compare: %s; see 'prezero compare --help'\n", msg);
    if (r->n_points > 0 && reports) write_outputs(out, r, true, NULL); /* the concurrencies that completed */
    free(r);
    return 1;
  }
  int rc = reports ? write_outputs(out, r, true, NULL) : 0;
  free(r);
  return rc;
#endif
}
