/* `prezero compare`'s markdown report (compare.md; the same text goes to stdout) and the derived
 * numbers it shares with the plots and the JSON: Δ%, OFF's spread over rounds, per-layer kernel Δ,
 * the whole-model projection and prezero's share of the step (compare_out.h). */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include "bench_common.h"
#include "compare_out.h"

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
double pz_cmpout_comp_delta(const pz_cmp_point *p, int c) {
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
  double g = pz_cmpout_comp_delta(p, PZ_CMP_GEMM), d = pz_cmpout_comp_delta(p, PZ_CMP_DONOR);
  return g == g && d == d ? g + d : NAN;
}

/* The same for a dense layer: without the shared experts' gate | up (a MoE op's; NAN-free when not
 * measured). */
static double dense_delta(const pz_cmp_point *p) {
  const double d = layer_delta(p), s = pz_cmpout_comp_delta(p, PZ_CMP_SH_GU);
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
    double d = pz_cmpout_comp_delta(p, c);
    if (d == d) fprintf(f, " n/f (%+.2f) |", d);
    else fprintf(f, " n/f |");
    return;
  }
  double d = pz_cmpout_comp_delta(p, c);
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
void pz_cmpout_step_share(const pz_cmp_result *r, const pz_cmp_point *p, double *saving, double *share_run,
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
  pz_bench_md_rule(f, 8, 1);
  for (int i = 0; i < r->n_points; i++) {
    const pz_cmp_point *p = &r->points[i];
    double sv, sr, sa;
    pz_cmpout_step_share(r, p, &sv, &sr, &sa);
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

void pz_cmpout_write_markdown(FILE *f, const pz_cmp_result *r) {
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
  pz_bench_md_rule(f, 11, 1);
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
