/* Shared helpers of the prezero ON-vs-OFF decode tests (test_prezero_exec*.c): build a preset's
 * graph with the pass on or off, decode several steps on the CPU backend with NaN poisoning,
 * and compare logits and tokens bit for bit. Each test file includes it once. */
#ifndef PZ_TEST_PREZERO_COMMON_H
#define PZ_TEST_PREZERO_COMMON_H
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "backend/cpu/cpu_backend.h"
#include "model/builder.h"
#include "passes/passes.h"
#include "passes/prezero.h"
#include "pz_test.h"

/* What one decode run produced (M = the graph's max batch; rows >= m of a step: -1 / 0). */
typedef struct {
  int32_t *tokens;   /* [steps][M] */
  float *logits;     /* [steps][M * vocab] */
} trace;

static int gate_yes, gate_no; /* batch sizes seen on each side of the input_layernorm gate */

/* The device the gate evaluates against: 16 SMs with no calibration (ctas_per_sm = 0), so
 * the original gate of docs/ARCHITECTURE.md §8 decides: m + ceil(m*n_total / (8*roundup(H/8, 32))) < 16.
 * Small batches get the fill for free and large ones do not, independent of the calibrated
 * constants. Both executors and the coverage count use it; the tests CHECK that both sides
 * of the gate were exercised. */
static pz_device_desc test_dev(void) {
  pz_device_desc d;
  pz_device_desc_default(&d);
  d.num_sms = 16;
  d.ctas_per_sm = 0;
  snprintf(d.name, sizeof d.name, "test: 16 SMs, original fill gate");
  return d;
}

/* Decode graph of `preset` (max batch M tokens, KV capacity 32, first `layers` layers, 0 = all)
 * after pz_run_passes with prezero = 0/1 (on: at least one node must be rewritten); NULL after
 * a failed CHECK. */
static pz_graph *build(const char *preset, int tp, int layers, int64_t M, int prezero) {
  pz_model_config c;
  CHECK_OK(pz_config_load(preset, &c));
  pz_build_opts bo = PZ_BUILD_OPTS_INIT;
  bo.tp = tp;
  bo.m = M;
  bo.layers = layers;
  bo.max_ctx = 32;
  pz_graph *g = NULL;
  CHECK_OK(pz_build_decode_graph(&c, &bo, &g));
  if (!g) return NULL;
  pz_pass_opts o = PZ_PASS_OPTS_INIT;
  o.prezero = prezero;
  pz_pass_stats st[PZ_MAX_PASSES];
  int ns = 0;
  CHECK_OK(pz_run_passes(g, &o, st, &ns));
  if (prezero) CHECK(ns >= 1 && st[0].ran && st[0].rewritten > 0);
  return g;
}

/* Decodes `steps` steps with batch ms[s] at step s (positions 3+s, tokens fed back) on the CPU
 * executor (seed 77, NaN poisoning, test_dev()), recording tokens and logits f32 [m, vocab]. */
static void decode(const pz_graph *g, const int64_t *ms, int steps, trace *t) {
  pz_cpu_exec_opts eo = PZ_CPU_EXEC_OPTS_INIT;
  eo.poison = 1;
  eo.seed = 77;
  eo.dev = test_dev();
  pz_cpu_exec *e = NULL;
  CHECK_OK(pz_cpu_exec_create(g, &eo, &e));
  if (!e) return;
  int64_t M = g->info.m, V = g->info.vocab_size;
  int32_t tok[256], pos[256], next[256];
  for (int64_t i = 0; i < M; i++) tok[i] = (int32_t)((i * 131 + 7) % V);
  for (int s = 0; s < steps; s++) {
    int64_t m = ms[s];
    for (int64_t i = 0; i < m; i++) pos[i] = 3 + s;
    CHECK_OK(pz_cpu_exec_step(e, m, tok, pos, next));
    memset(t->tokens + (size_t)s * M, 0xff, sizeof(int32_t) * (size_t)M);
    memcpy(t->tokens + (size_t)s * M, next, sizeof(int32_t) * (size_t)m);
    memset(t->logits + (size_t)s * M * V, 0, sizeof(float) * (size_t)(M * V));
    CHECK_OK(pz_cpu_exec_logits(e, m, t->logits + (size_t)s * M * V));
    for (int64_t i = 0; i < m; i++) tok[i] = next[i];
  }
  pz_cpu_exec_free(e);
}

/* Zeroed trace buffers for `steps` steps of M rows and V = vocab_size logits per row. */
static void trace_alloc(trace *t, int steps, int64_t M, int64_t V) {
  t->tokens = calloc((size_t)steps * (size_t)M, sizeof(int32_t));
  t->logits = calloc((size_t)steps * (size_t)(M * V), sizeof(float));
}

static void trace_free(trace *t) {
  free(t->tokens);
  free(t->logits);
}

/* n_total of the first input_layernorm donor of the rewritten graph (for the gate coverage). */
static int64_t first_n_total(const pz_graph *g) {
  for (int i = 0; i < g->n_nodes; i++)
    if (g->nodes[i].op == PZ_OP_AR_RMSNORM_MAYBE_PREZERO) return g->nodes[i].p.norm.n_total;
  return 0;
}

/* CHECKs per step that a and b have the same tokens, bit-identical logits (memcmp) and only
 * finite logits over the step's ms[s] rows; prints the step that differs, labelled `what`. */
static void compare(const char *what, const trace *a, const trace *b, int steps, int64_t M, int64_t V, const int64_t *ms) {
  for (int s = 0; s < steps; s++) {
    const float *la = a->logits + (size_t)s * M * V, *lb = b->logits + (size_t)s * M * V;
    size_t n = (size_t)(ms[s] * V);
    int same_tok = memcmp(a->tokens + (size_t)s * M, b->tokens + (size_t)s * M, sizeof(int32_t) * (size_t)ms[s]) == 0;
    int same_log = memcmp(la, lb, sizeof(float) * n) == 0;
    int finite = 1;
    for (size_t i = 0; i < n; i++) finite &= isfinite(la[i]) && isfinite(lb[i]);
    CHECK(same_tok && same_log && finite);
    if (!(same_tok && same_log && finite))
      fprintf(stderr, "%s: step %d (m=%lld): tokens %s, logits %s, %s\n", what, s, (long long)ms[s],
              same_tok ? "same" : "DIFFER", same_log ? "bit-identical" : "DIFFER", finite ? "finite" : "NOT FINITE");
  }
}

/* Decodes with the pass off, then on under each gate mode of `force` (NULL = the gate itself,
 * "on", "off": PREZERO_FORCE_GATE), and compares each ON run with the OFF run. */
static void on_vs_off_modes(const char *preset, int tp, int layers, int64_t M, const int64_t *ms, int steps,
                            const char *const *force, int n_force) {
  pz_graph *off = build(preset, tp, layers, M, 0), *on = build(preset, tp, layers, M, 1);
  if (!off || !on) { pz_graph_free(off); pz_graph_free(on); return; }
  int64_t V = off->info.vocab_size;
  pz_device_desc dev = test_dev();
  int64_t nt = first_n_total(on);
  for (int s = 0; s < steps; s++) {
    if (pz_is_prezero_free(ms[s], nt, PZ_F32, on->info.hidden, tp, &dev)) gate_yes++;
    else gate_no++;
  }
  trace base, t;
  trace_alloc(&base, steps, M, V);
  trace_alloc(&t, steps, M, V);
  decode(off, ms, steps, &base);
  for (int f = 0; f < n_force; f++) {
    if (force[f]) setenv("PREZERO_FORCE_GATE", force[f], 1);
    else unsetenv("PREZERO_FORCE_GATE");
    decode(on, ms, steps, &t);
    char what[128];
    snprintf(what, sizeof what, "%s tp=%d ON (fill gate %s) vs OFF", preset, tp, force[f] ? force[f] : "free");
    compare(what, &base, &t, steps, M, V, ms);
  }
  unsetenv("PREZERO_FORCE_GATE");
  trace_free(&base);
  trace_free(&t);
  pz_graph_free(off);
  pz_graph_free(on);
}

/* on_vs_off_modes with the gate itself, then forced on, then forced off. */
static inline void on_vs_off(const char *preset, int tp, int layers, int64_t M, const int64_t *ms, int steps) {
  const char *const force[3] = {NULL, "on", "off"};
  on_vs_off_modes(preset, tp, layers, M, ms, steps, force, 3);
}
#endif
