/* `prezero compare` driver (compare.h): one CUDA backend of the model (its OFF graphs and its
 * per-batch ON graphs over the same weights), memory plan, A B A B decode rounds, bit-identity,
 * CUPTI per-component kernel times, baselines. Above model/ and passes/; reaches the GPU only
 * through the backend interface (backend/backend.h), the memory plan and the profiler. */
#include "core/fingerprint.h" /* pz_fnv1a64 */
#include "compare/compare.h"
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "backend/backend.h"
#include "prezero/allreduce.h" /* one rank per process: the communicator's rank and world */
#include "backend/cuda/gemm.h" /* flavour names of the baselines */
#include "backend/cuda/profile.h"
#include "backend/cuda/runtime.h"
#include "model/builder.h"
#include "model/checkpoint.h"
#include "model/config.h"
#include "core/options.h"
#include "core/stats.h"
#include "passes/passes.h"
#include "passes/prezero.h"

#define GiB (1024.0 * 1024.0 * 1024.0)
#define EXTRA_MARGIN ((int64_t)1 << 30) /* per GPU, beside the reserve: both executors' scratch */

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

static void note(pz_cmp_result *r, FILE *log, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void note(pz_cmp_result *r, FILE *log, const char *fmt, ...) {
  char line[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  size_t n = strlen(r->notes);
  snprintf(r->notes + n, sizeof r->notes - n, "%s%s", n ? " " : "", line);
  if (log) fprintf(log, "compare: %s\n", line);
}

static void progress(const pz_cmp_opts *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void progress(const pz_cmp_opts *o, const char *fmt, ...) {
  if (!o->progress) return;
  char line[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  o->progress(o->user, line);
}

/* ---------------------------------------------------------------- graphs and memory plan */

/* The OFF decode graph (the executor runs the prezero pass per batch size for the ON set). */
static pz_status build(const pz_model_config *mc, const pz_cmp_opts *o, int layers, pz_graph **g) {
  pz_build_opts bo = PZ_BUILD_OPTS_INIT;
  bo.tp = o->tp;
  bo.m = o->conc[o->n_conc - 1];
  bo.max_ctx = (int64_t)pz_cmp_isl_cap(o->isl, o->isl_max) + o->osl;
  bo.layers = layers;
  return pz_build_decode_graph(mc, &bo, g);
}

/* Chooses (or checks) the layer count so that the one executor (weights once, OFF and ON graph
 * sets over them) fits. */
static pz_status plan_layers(const pz_model_config *mc, const pz_cmp_opts *o, const pz_runtime_opts *ro,
                             pz_cmp_result *r, int *layers) {
  pz_graph *g = NULL;
  PZ_CHECK(build(mc, o, 0, &g));
  pz_cuda_mem_plan mp;
  /* one rank per process: planned on this rank's GPU only (the fit is then agreed over the ranks) */
  const int mine = o->ar_comm ? pz_ar_comm_device(o->ar_comm) : 0;
  pz_status st = o->ar_comm ? pz_cuda_plan_memory_on(g, true, 1, &mine, ro->cuda_reserve_mb, EXTRA_MARGIN, &mp)
                            : pz_cuda_plan_memory(g, true, o->tp, ro->cuda_reserve_mb, EXTRA_MARGIN, &mp); /* runtime.h */
  /* the routed experts' storage as built, and one MoE layer's bytes */
  snprintf(r->experts, sizeof r->experts, "bf16");
  for (int i = 0; i < g->n_nodes; i++)
    if (g->nodes[i].op == PZ_OP_MOE) {
      const pz_moe_params *p = &g->nodes[i].p.moe;
      if (p->wquant == 1) snprintf(r->experts, sizeof r->experts, "int4 W4A16 group %lld", (long long)p->q_group);
      else if (p->wquant == 2)
        snprintf(r->experts, sizeof r->experts, "fp8 W8A16 block %lldx%lld", (long long)p->q_block_rows,
                 (long long)p->q_block_cols);
      break;
    }
  pz_graph_free(g);
  if (st != PZ_OK) return st;
  const int n = mp.n_layers;
  int fit = mp.fit;
  if (o->ar_comm) { /* every rank must build the same graph: the fewest layers any rank fits */
    st = pz_cuda_mem_plan_fit_ranks(&mp, o->ar_comm, pz_cuda_device_count(), &fit);
    if (st != PZ_OK) {
      pz_cuda_mem_plan_free(&mp);
      return st;
    }
  }
  r->fixed_bytes = (double)mp.cum[0];
  r->budget_bytes = (double)mp.budget;
  for (int L = n - 1; L >= 0; L--)
    if (pz_config_layer_is_moe(mc, L)) { r->moe_layer_bytes = (double)(mp.cum[L + 1] - mp.cum[L]); break; }
  const int want = o->layers > 0 ? o->layers : fit;
  const int64_t need = mp.cum[want < n ? want : n];
  if (o->layers > 0 && o->layers > fit && fit >= 1) {
    st = pz_error(PZ_ERR_OOM,
                  "--layers %d needs %.1f GiB per GPU but %.1f GiB fit beside the reserve; use --layers %d or fewer "
                  "(or omit --layers)",
                  o->layers, need / GiB, mp.budget / GiB, fit);
  } else if (want < 1 || fit < 1) {
    st = pz_error(PZ_ERR_OOM,
                  "not even one layer of %s fits per GPU: %.1f GiB free beside the reserve; use a larger --tp or a "
                  "smaller --isl/--osl/--conc",
                  mc->name, mp.budget / GiB);
  } else {
    *layers = want;
    r->layers_auto = o->layers == 0;
    note(r, o->log, "%s: %d of %d layers (%s), %.1f GiB per GPU (weights once; OFF and ON graphs over them), "
         "%.1f GiB available beside the reserve; routed experts %s, %.2f GiB per MoE layer.",
         mc->name, want, n, o->layers ? "--layers" : "as many as fit in free memory", need / GiB, mp.budget / GiB,
         r->experts, r->moe_layer_bytes / GiB);
  }
  pz_cuda_mem_plan_free(&mp);
  return st;
}

/* ---------------------------------------------------------------- prezero fired? */

/* The component a plan entry belongs to. */
static int comp_of(const pz_graph *g, const pz_prezero_consumer *c) {
  if (c->kind == PZ_PREZERO_SLOT_QB) return PZ_CMP_Q_B;
  if (c->kind == PZ_PREZERO_SLOT_OPROJ) return PZ_CMP_O_PROJ;
  if (c->kind == PZ_PREZERO_SLOT_SHARED_GU) return PZ_CMP_SH_GU;
  pz_role r = g->nodes[c->node].role;
  if (r == PZ_ROLE_QKV_A || r == PZ_ROLE_Q_PROJ || r == PZ_ROLE_KV_A || r == PZ_ROLE_QKV_PROJ) return PZ_CMP_QKV_A;
  if (r == PZ_ROLE_ROUTER_GATE || r == PZ_ROLE_GATE_UP) return PZ_CMP_GATE;
  return -1;
}

/* fired[c] from the executor's plan at M: a component fires when it fires in every layer that
 * has it (the layers share shapes); NA when no donor has it as a candidate. */
static void fired_from_plan(const pz_graph *g, const pz_prezero_report *rep, int fired[PZ_CMP_N_COMP]) {
  for (int c = 0; c < PZ_CMP_N_COMP; c++) fired[c] = PZ_CMP_NA;
  for (int i = 0; i < rep->n_donors; i++)
    for (int k = 0; k < rep->d[i].n; k++) {
      int c = comp_of(g, &rep->d[i].c[k]);
      if (c < 0) continue;
      int f = rep->d[i].c[k].fires ? PZ_CMP_FIRED : PZ_CMP_NOT_FIRED;
      if (fired[c] == PZ_CMP_NA || f == PZ_CMP_NOT_FIRED) fired[c] = f;
    }
}

/* ---------------------------------------------------------------- CUPTI attribution */

static uint64_t hash_str(const char *s) { return splitmix64(pz_fnv1a64(PZ_FNV1A64_OFFSET, s, strlen(s))); }

void pz_compare_attribute(const pz_graph *g, const pz_profile_node *v, int nv, int dev0, pz_cmp_components *out,
                          int *unattributed) {
  int nl = g->info.n_layers > 0 ? g->info.n_layers : 1;
  double *sum = calloc((size_t)nl * PZ_CMP_N_COMP, sizeof(double));
  int *has = calloc((size_t)nl * PZ_CMP_N_COMP, sizeof(int));
  double *lay = calloc((size_t)nl, sizeof(double)); /* every kernel of layer L */
  bool *is_moe = calloc((size_t)nl, sizeof(bool));
  memset(out, 0, sizeof *out);
  out->dense_layer_us = out->moe_layer_us = -1;
  *unattributed = 0;
  if (!sum || !has || !lay || !is_moe) goto done;
  for (int i = 0; i < g->n_nodes; i++)
    if (g->nodes[i].op == PZ_OP_MOE && g->nodes[i].layer >= 0 && g->nodes[i].layer < nl) is_moe[g->nodes[i].layer] = true;
  for (int i = 0; i < nv;) {
    if (v[i].device != dev0) { i++; continue; }
    int tag = v[i].tag, j = i;
    while (j < nv && v[j].device == dev0 && v[j].tag == tag) j++;
    if (tag < 0 || tag >= g->n_nodes) {
      *unattributed += j - i;
      i = j;
      continue;
    }
    const pz_node *n = &g->nodes[tag];
    int L = n->layer;
    if (L < 0 || L >= nl) { i = j; continue; }
    int comp = -1;
    if (n->role == PZ_ROLE_QKV_A || n->role == PZ_ROLE_Q_PROJ || n->role == PZ_ROLE_KV_A || n->role == PZ_ROLE_QKV_PROJ)
      comp = PZ_CMP_QKV_A;
    else if (n->role == PZ_ROLE_ROUTER_GATE || n->role == PZ_ROLE_GATE_UP) comp = PZ_CMP_GATE;
    else if (n->op == PZ_OP_AR_RMSNORM || n->op == PZ_OP_AR_RMSNORM_MAYBE_PREZERO) comp = PZ_CMP_DONOR;
    for (int k = i; k < j; k++) lay[L] += v[k].median_us;
    /* A MoE op's shared experts as GEMMs (cuda mlp_gemm.h) are captured first: [memset] gate | up GEMM(s),
       silu_mul, [memset] down GEMM, then the router, gather, expert and combine kernels. SH_GU is what comes
       before the first silu_mul record and is none of the op's own kernels; none without a silu_mul (fused). */
    int silu = -1;
    if (n->op == PZ_OP_MOE)
      for (int q = i; q < j && silu < 0; q++)
        if (v[q].name && strstr(v[q].name, "silu_mul")) silu = q;
    for (int k = i; k < j; k++) {
      int c = comp;
      if (n->op == PZ_OP_MOE) {
        const char *nm = v[k].name ? v[k].name : "";
        const bool own = strstr(nm, "moe") || strstr(nm, "route") || strstr(nm, "gather") || strstr(nm, "mm_kernel<") ||
                         strstr(nm, "combine");
        c = silu >= 0 && k < silu && !own ? PZ_CMP_SH_GU : -1;
      }
      if (n->op == PZ_OP_MLA_ATTN || n->op == PZ_OP_GQA_ATTN) {
        const char *own = n->op == PZ_OP_MLA_ATTN ? "mla_" : "gqa_"; /* the op's own kernels */
        int own_before = 0, own_after = 0;
        for (int q = i; q < j; q++)
          if (strstr(v[q].name, own)) { if (q < k) own_before++; else if (q > k) own_after++; }
        if (strstr(v[k].name, own)) c = -1;
        else if (n->op == PZ_OP_MLA_ATTN && own_before == 1 && own_after >= 1 && n->p.mla.q_lora_rank > 0) c = PZ_CMP_Q_B;
        else if (own_before >= 1 && own_after == 0) c = PZ_CMP_O_PROJ;
        else c = -1;
      }
      if (c < 0) continue;
      sum[(size_t)L * PZ_CMP_N_COMP + c] += v[k].median_us;
      has[(size_t)L * PZ_CMP_N_COMP + c] = 1;
      out->sig[c] += hash_str(v[k].name) + (uint64_t)v[k].kind;
      out->nodes[c]++;
    }
    i = j;
  }
  {
    double dsum = 0, msum = 0;
    for (int L = 0; L < nl; L++) {
      if (!lay[L]) continue;
      if (is_moe[L]) { msum += lay[L]; out->n_moe++; }
      else { dsum += lay[L]; out->n_dense++; }
    }
    out->dense_layer_us = out->n_dense ? dsum / out->n_dense : -1;
    out->moe_layer_us = out->n_moe ? msum / out->n_moe : -1;
  }
  for (int c = 0; c < PZ_CMP_N_COMP; c++) {
    if (c == PZ_CMP_GEMM) continue;
    double s = 0;
    int cnt = 0;
    for (int L = 0; L < nl; L++)
      if (has[(size_t)L * PZ_CMP_N_COMP + c]) { s += sum[(size_t)L * PZ_CMP_N_COMP + c]; cnt++; }
    out->us[c] = cnt ? s / cnt : -1.0;
  }
  out->us[PZ_CMP_GEMM] = 0;
  for (int c = PZ_CMP_QKV_A; c <= PZ_CMP_LAST_CONSUMER; c++)
    if (out->us[c] > 0) out->us[PZ_CMP_GEMM] += out->us[c];
done:
  free(sum);
  free(has);
  free(lay);
  free(is_moe);
}

/* Replays backend e's graph of batch M under CUPTI and attributes the records. */
static pz_status profile_engine(pz_backend *e, const pz_graph *g, int64_t M, int32_t pos, int iters, pz_cmp_components *acc,
                                int *unattributed, int *n_nodes) {
  const int tp = g->info.tp;
  PZ_CHECK(pz_profile_flush(tp));
  pz_profile_clear();
  double us = 0;
  PZ_CHECK(pz_backend_time_step(e, M, pos, iters, 1, &us));
  PZ_CHECK(pz_profile_flush(tp));
  pz_profile_node *v = NULL;
  int nv = 0;
  PZ_CHECK(pz_profile_summary(&v, &nv));
  pz_compare_attribute(g, v, nv, 0, acc, unattributed);
  *n_nodes = nv;
  free(v);
  pz_profile_clear();
  return PZ_OK;
}

/* ---------------------------------------------------------------- the run */

/* The one backend seen as two engines: OFF (prezero 0) and ON (1). */
typedef struct side {
  pz_backend *e;
  int prezero;
} side;

static pz_status decode_round(const pz_cmp_opts *o, const pz_cmp_engine_ops *ops, void *e, int conc,
                              const int32_t *first, int32_t *out, double *seconds, const char *what, int ci, int round) {
  int32_t tok[256], pos[256], next[256];
  for (int i = 0; i < conc; i++) {
    tok[i] = first[i];
    pos[i] = pz_cmp_isl_of(o->seed, o->isl, o->isl_max, i);
  }
  int every = o->osl >= 64 ? o->osl / 16 : o->osl;
  double t0 = now_s();
  for (int s = 0; s < o->osl; s++) {
    PZ_CHECK(ops->step(e, conc, tok, pos, next));
    memcpy(out + (size_t)s * conc, next, sizeof(int32_t) * (size_t)conc);
    for (int i = 0; i < conc; i++) {
      tok[i] = next[i];
      pos[i]++;
    }
    if ((s + 1) % every == 0)
      progress(o, "conc %d (%d/%d) round %d/%d %s step %d/%d", conc, ci + 1, o->n_conc, round + 1, o->rounds, what,
               s + 1, o->osl);
  }
  *seconds = now_s() - t0;
  return PZ_OK;
}

static double max_abs_diff(const float *a, const float *b, size_t n, bool *identical) {
  double m = 0;
  *identical = memcmp(a, b, n * sizeof(float)) == 0;
  for (size_t i = 0; i < n; i++) {
    double d = fabs((double)a[i] - (double)b[i]);
    if (d > m || d != d) m = d != d ? INFINITY : d;
  }
  return m;
}

/* Host wrappers of the backend for pz_compare_decode: each side switches the graph set before
 * it steps (the logits are read right after that side's round). */
static pz_status cuda_step(void *e, int m, const int32_t *tok, const int32_t *pos, int32_t *next) {
  side *sd = e;
  PZ_CHECK(pz_backend_set_prezero(sd->e, sd->prezero));
  return pz_backend_step(sd->e, m, tok, pos, next);
}
static pz_status cuda_logits(void *e, int m, float *out) { return pz_backend_logits(((side *)e)->e, m, out); }
static const pz_cmp_engine_ops cuda_ops = {cuda_step, cuda_logits};

pz_status pz_compare_decode(const pz_cmp_opts *o, int ci, const pz_cmp_engine_ops *ops, void *eng[2], int64_t vocab,
                            const int32_t *first, pz_cmp_point *pt) {
  const int conc = o->conc[ci];
  size_t ntok = (size_t)o->rounds * o->osl * conc, nl = (size_t)conc * (size_t)vocab;
  int32_t *tokv[2] = {malloc(ntok * sizeof(int32_t)), malloc(ntok * sizeof(int32_t))};
  float *logv[3] = {malloc(nl * sizeof(float)), malloc(nl * sizeof(float)), malloc(nl * sizeof(float))};
  pz_status st = PZ_OK;
  if (!tokv[0] || !tokv[1] || !logv[0] || !logv[1] || !logv[2]) {
    st = pz_error(PZ_ERR_OOM, "compare: host buffers for tokens and logits (%.2f GiB)", 3.0 * nl * sizeof(float) / GiB);
    goto done;
  }
  pt->conc = conc;
  pt->rounds = o->rounds;
  pt->first_token_mismatch = -1;
  pt->logits_off_spread = -1;
  /* Timed rounds, A B A B: OFF then ON, rounds times. logv: 0 = OFF last round, 1 = ON last
   * round, 2 = OFF first round (for OFF's own run-to-run spread). */
  double t_on[PZ_CMP_MAX_ROUNDS], t_off[PZ_CMP_MAX_ROUNDS];
  for (int rd = 0; rd < o->rounds && st == PZ_OK; rd++) {
    for (int k = 0; k < 2 && st == PZ_OK; k++) {
      double sec = 0;
      int32_t *out = tokv[k] + (size_t)rd * o->osl * conc;
      st = decode_round(o, ops, eng[k], conc, first, out, &sec, k ? "ON" : "OFF", ci, rd);
      if (st != PZ_OK) break;
      (k ? t_on : t_off)[rd] = sec;
      if (k == 0 && rd == 0 && o->rounds > 1) st = ops->logits(eng[0], conc, logv[2]);
      if (rd == o->rounds - 1 && st == PZ_OK) st = ops->logits(eng[k], conc, logv[k]);
    }
  }
  if (st != PZ_OK) goto done;
  double tot_on[PZ_CMP_MAX_ROUNDS] = {0}, tot_off[PZ_CMP_MAX_ROUNDS] = {0};
  for (int rd = 0; rd < o->rounds; rd++) {
    pt->tpot_on_rounds_ms[rd] = 1e3 * t_on[rd] / o->osl;
    pt->tpot_off_rounds_ms[rd] = 1e3 * t_off[rd] / o->osl;
    tot_on[rd] = t_on[rd];
    tot_off[rd] = t_off[rd];
  }
  double mon = pz_median(tot_on, o->rounds), moff = pz_median(tot_off, o->rounds);
  pt->tpot_on_ms = 1e3 * mon / o->osl;
  pt->tpot_off_ms = 1e3 * moff / o->osl;
  pt->e2e_on_s = mon;
  pt->e2e_off_s = moff;
  pt->tput_on = (double)conc * o->osl / mon / o->tp;
  pt->tput_off = (double)conc * o->osl / moff / o->tp;
  /* Bit-identity. */
  pt->tokens_identical = true;
  for (size_t i = 0; i < ntok; i++)
    if (tokv[0][i] != tokv[1][i]) {
      pt->tokens_identical = false;
      pt->first_token_mismatch = (int64_t)(i % ((size_t)o->osl * conc));
      break;
    }
  pt->logits_max_abs_diff = max_abs_diff(logv[0], logv[1], nl, &pt->logits_identical);
  if (o->rounds > 1) {
    bool same;
    pt->logits_off_spread = max_abs_diff(logv[2], logv[0], nl, &same);
  }
done:
  for (int k = 0; k < 2; k++) free(tokv[k]);
  for (int k = 0; k < 3; k++) free(logv[k]);
  return st;
}

/* The settings that decide bit-identity, as the run's options hold them. */
static void determinism_line(pz_cmp_result *r, const pz_runtime_opts *ro) {
  char splits[16];
  if (ro->gemm_splits > 0) snprintf(splits, sizeof splits, "%d", ro->gemm_splits);
  else snprintf(splits, sizeof splits, "unset");
  snprintf(r->determinism, sizeof r->determinism,
           "PREZERO_GEMM_FORCE=%s PREZERO_GEMM_SPLITS=%s PREZERO_GEMM_TUNER=%d PREZERO_FORCE_GATE=%s PREZERO_ATTN_SLOTS=%d",
           ro->gemm_force[0] ? ro->gemm_force : "unset", splits, ro->gemm_tuner,
           ro->force_gate < 0 ? "unset" : ro->force_gate ? "on" : "off", ro->attn_slots);
}

static pz_status check_opts(const pz_cmp_opts *o) {
  const int max_tp = pz_backend_max_tp(PZ_BACKEND_CUDA);
  if (o->tp < 1 || o->tp > max_tp) return pz_error(PZ_ERR_INVALID_ARG, "--tp %d is out of range 1..%d", o->tp, max_tp);
  if (o->n_conc < 1 || o->n_conc > PZ_CMP_MAX_CONC)
    return pz_error(PZ_ERR_INVALID_ARG, "--conc needs 1..%d values", PZ_CMP_MAX_CONC);
  for (int i = 0; i < o->n_conc; i++)
    if (o->conc[i] < 1 || o->conc[i] > 256 || (i && o->conc[i] <= o->conc[i - 1]))
      return pz_error(PZ_ERR_INVALID_ARG, "--conc values must be ascending within 1..256");
  if (o->isl < 1 || o->osl < 1) return pz_error(PZ_ERR_INVALID_ARG, "--isl and --osl must be at least 1");
  if (o->isl_max != 0 && o->isl_max < o->isl)
    return pz_error(PZ_ERR_INVALID_ARG, "--isl %d:%d: the upper bound is below the lower one", o->isl, o->isl_max);
  if (o->rounds < 1 || o->rounds > PZ_CMP_MAX_ROUNDS)
    return pz_error(PZ_ERR_INVALID_ARG, "--rounds %d is out of range 1..%d", o->rounds, PZ_CMP_MAX_ROUNDS);
  if (o->profile_iters < 1 || o->profile_iters > 10000)
    return pz_error(PZ_ERR_INVALID_ARG, "profile iterations %d out of range 1..10000", o->profile_iters);
  return PZ_OK;
}

pz_status pz_compare_run(const pz_cmp_opts *o, pz_cmp_result *r) {
  if (!o || !r) return pz_error(PZ_ERR_INVALID_ARG, "pz_compare_run: NULL argument");
  memset(r, 0, sizeof *r);
  PZ_CHECK(check_opts(o));
  int ndev = pz_cuda_device_count();
  if (o->ar_comm && pz_ar_comm_world(o->ar_comm) != o->tp)
    return pz_error(PZ_ERR_INVALID_ARG, "compare: the communicator has %d ranks but --tp is %d",
                    pz_ar_comm_world(o->ar_comm), o->tp);
  if (ndev < (o->ar_comm ? 1 : o->tp))
    return pz_error(PZ_ERR_NO_DEVICE, "TP %d needs %d GPUs but %d %s visible", o->tp, o->ar_comm ? 1 : o->tp, ndev,
                    ndev == 1 ? "is" : "are");
  pz_model_config mc;
  PZ_CHECK(o->model_dir ? pz_checkpoint_load_config(o->model_dir, &mc) : pz_config_load(o->model, &mc));
  if (o->quant != PZ_QUANT_AUTO) { /* synthetic weights in that storage (the executor's device fill) */
    if (o->quant < PZ_QUANT_AUTO || o->quant > PZ_QUANT_FP8)
      return pz_error(PZ_ERR_INVALID_ARG, "quant %d is not one of auto, bf16, int4, fp8", o->quant);
    if (o->model_dir)
      return pz_error(PZ_ERR_INVALID_ARG, "--quant sets synthetic weights; a checkpoint's weights come as stored (drop "
                      "--quant or --model)");
    pz_quant_config_synthetic(o->quant == PZ_QUANT_INT4 ? PZ_WQ_INT4 : o->quant == PZ_QUANT_FP8 ? PZ_WQ_FP8 : PZ_WQ_NONE,
                              &mc.quant);
  }
  if ((int64_t)pz_cmp_isl_cap(o->isl, o->isl_max) + o->osl > mc.max_position_embeddings)
    return pz_error(PZ_ERR_INVALID_ARG, "--isl %d + --osl %d exceeds max_position_embeddings %lld of %s",
                    pz_cmp_isl_cap(o->isl, o->isl_max), o->osl, (long long)mc.max_position_embeddings, mc.name);
  snprintf(r->model, sizeof r->model, "%s", mc.name);
  r->tp = o->tp;
  r->isl = o->isl;
  r->isl_max = o->isl_max > o->isl ? o->isl_max : 0;
  r->osl = o->osl;
  r->rounds = o->rounds;
  r->seed = o->seed;
  r->layers_total = (int)mc.num_hidden_layers;
  for (int64_t L = 0; L < mc.num_hidden_layers; L++) {
    if (pz_config_layer_is_moe(&mc, L)) r->moe_total++;
    else r->dense_total++;
  }
  r->baselines = o->profile ? o->baselines & ((1u << PZ_CMP_N_BASE) - 2) : 0;
  pz_runtime_opts ro; /* read once for the whole run */
  PZ_CHECK(pz_runtime_opts_take(&ro, NULL, NULL, NULL));
  determinism_line(r, &ro);
  int layers = 0;
  PZ_CHECK(plan_layers(&mc, o, &ro, r, &layers));
  r->layers = layers;

  pz_graph *g = NULL;
  pz_backend *ex = NULL;
  side sides[2] = {{NULL, 0}, {NULL, 1}};
  pz_status st = PZ_OK;
  bool prof = o->profile;
  if (prof) {
    st = pz_profile_start();
    if (st != PZ_OK) {
      note(r, o->log, "CUPTI unavailable (%s): no per-component kernel times.", pz_last_error());
      prof = false;
      st = PZ_OK;
    }
  }
  progress(o, "building and filling the engine (%d layers, TP %d; OFF and ON graphs share it)", layers, o->tp);
  st = build(&mc, o, layers, &g);
  if (st == PZ_OK) {
    pz_backend_opts xo = PZ_BACKEND_OPTS_INIT;
    xo.seed = o->seed;
    xo.graphs = 1;
    xo.n_capture = o->n_conc;
    memcpy(xo.capture, o->conc, sizeof(int) * (size_t)o->n_conc);
    xo.prezero = 1; /* on the OFF graph: per-batch plans, switchable (cuda/exec.h) */
    xo.runtime = &ro;
    xo.ar_comm = o->ar_comm;
    pz_checkpoint *ck = NULL;
    if (o->model_dir) {
      st = pz_checkpoint_open_planned(o->model_dir, &mc, g, &ck);
      xo.load_weight = pz_checkpoint_fill_rows;
      xo.load_user = ck;
    }
    if (st == PZ_OK) st = pz_backend_create(PZ_BACKEND_CUDA, g, &xo, &ex);
    pz_checkpoint_close(ck);
    if (st == PZ_OK && !pz_backend_per_batch(ex))
      st = pz_error(PZ_ERR_INTERNAL, "compare: the executor did not take the per-batch prezero plan");
  }
  sides[0].e = sides[1].e = ex;
  if (ex) snprintf(r->device, sizeof r->device, "%.127s", pz_backend_device_desc(ex)->name);

  if (r->isl_max && o->profile)
    note(r, o->log, "ISL per request drawn uniformly from [%d, %d] (seeded); the CUPTI kernel breakdown replays "
         "every row at the batch's mean drawn length.", o->isl, o->isl_max);
  for (int ci = 0; ci < o->n_conc && st == PZ_OK; ci++) {
    const int conc = o->conc[ci];
    pz_cmp_point *pt = &r->points[ci];
    r->n_points = ci + 1;
    pt->conc = conc;
    pt->batch = (int)pz_backend_padded_m(ex, conc);
    pt->rounds = o->rounds;
    pt->first_token_mismatch = -1;
    pt->logits_off_spread = -1;
    for (int c = 0; c < PZ_CMP_N_COMP; c++) {
      pt->comp_on_us[c] = pt->comp_off_us[c] = -1;
      pt->fired[c] = PZ_CMP_NA;
      pt->dense_layer_us[c % 2] = pt->moe_layer_us[c % 2] = -1;
      for (int b = 0; b < PZ_CMP_N_BASE; b++) pt->base_us[b][c] = -1;
    }
    int32_t first[256];
    for (int i = 0; i < conc; i++)
      first[i] = (int32_t)(splitmix64(o->seed ^ ((uint64_t)conc << 32) ^ (uint64_t)i) % (uint64_t)mc.vocab_size);
    /* The one position of the CUPTI replays (pz_backend_time_step): isl, or the mean of this
     * batch's drawn lengths. */
    int32_t prof_pos = o->isl;
    if (r->isl_max) {
      int64_t sum = 0;
      for (int i = 0; i < conc; i++) sum += pz_cmp_isl_of(o->seed, o->isl, o->isl_max, i);
      prof_pos = (int32_t)((sum + conc / 2) / conc);
    }
    /* Capture (first use of this batch size) with CUPTI records on, then per-component profile. */
    {
      pz_prezero_report rep;
      st = pz_backend_plan(ex, pt->batch, &rep, NULL);
      if (st != PZ_OK) break;
      fired_from_plan(g, &rep, pt->fired);
      pz_prezero_report_free(&rep);
    }
    if (prof && (st = pz_profile_activity(true)) != PZ_OK) break;
    for (int k = 0; k < 2 && st == PZ_OK; k++) {
      progress(o, "conc %d (%d/%d): capturing the %s graph", conc, ci + 1, o->n_conc, k ? "ON" : "OFF");
      int32_t pos[256], next[256];
      for (int i = 0; i < conc; i++) pos[i] = pz_cmp_isl_of(o->seed, o->isl, o->isl_max, i);
      st = cuda_step(&sides[k], conc, first, pos, next);
    }
    if (st == PZ_OK && prof) {
      pz_cmp_components acc[2];
      int unattr[2] = {0, 0}, nn[2] = {0, 0};
      for (int k = 0; k < 2 && st == PZ_OK; k++) {
        progress(o, "conc %d (%d/%d): CUPTI profile of the %s graph (%d replays)", conc, ci + 1, o->n_conc,
                 k ? "ON" : "OFF", o->profile_iters);
        st = pz_backend_set_prezero(ex, k);
        if (st == PZ_OK) st = profile_engine(ex, g, pt->batch, prof_pos, o->profile_iters, &acc[k], &unattr[k], &nn[k]);
      }
      if (st == PZ_OK) {
        pt->profiled = nn[0] > 0 && nn[1] > 0;
        for (int k = 0; k < 2; k++) {
          pt->dense_layer_us[k] = acc[k].dense_layer_us;
          pt->moe_layer_us[k] = acc[k].moe_layer_us;
        }
        pt->n_dense_run = acc[0].n_dense;
        pt->n_moe_run = acc[0].n_moe;
        for (int c = 0; c < PZ_CMP_N_COMP; c++) {
          pt->comp_off_us[c] = acc[0].us[c];
          pt->comp_on_us[c] = acc[1].us[c];
          pt->kernels_changed[c] = acc[0].sig[c] != acc[1].sig[c] || acc[0].nodes[c] != acc[1].nodes[c];
        }
        if (!pt->profiled)
          note(r, o->log, "conc %d: CUPTI delivered no graph-node kernel records (OFF %d, ON %d nodes).", conc, nn[0],
               nn[1]);
        else if (unattr[0] || unattr[1])
          note(r, o->log, "conc %d: %d / %d profiled graph nodes (OFF / ON) carried no IR-node tag.", conc, unattr[0],
               unattr[1]);
      }
      /* Baselines: the OFF graph with every GEMM forced to one strategy, captured and profiled
       * the same way (CUPTI on while capturing, for the node tags). */
      if (st == PZ_OK && pt->profiled)
        for (int c = 0; c < PZ_CMP_N_COMP; c++) pt->base_us[PZ_CMP_BASE_TUNED][c] = pt->comp_off_us[c];
      for (int b = 1; b < PZ_CMP_N_BASE && st == PZ_OK; b++) {
        if (!(o->baselines & (1u << b))) continue;
        static const pz_gemm_flavour fl[PZ_CMP_N_BASE] = {PZ_GEMM_AUTO, PZ_GEMM_SPLITK_ZERO, PZ_GEMM_MEMSET_SPLITK,
                                                          PZ_GEMM_SPLITK_SERIAL, PZ_GEMM_FULLK, PZ_GEMM_CUBLAS};
        progress(o, "conc %d (%d/%d): baseline %s (capture + CUPTI profile)", conc, ci + 1, o->n_conc,
                 pz_cmp_base_name(b));
        int32_t pos[256], next[256];
        for (int i = 0; i < conc; i++) pos[i] = pz_cmp_isl_of(o->seed, o->isl, o->isl_max, i);
        st = pz_backend_set_prezero(ex, 0);
        if (st == PZ_OK) st = pz_backend_set_gemm_force(ex, fl[b]);
        if (st == PZ_OK) st = pz_backend_step(ex, conc, first, pos, next);
        pz_cmp_components acc;
        int un = 0, nn = 0;
        if (st == PZ_OK) st = profile_engine(ex, g, pt->batch, prof_pos, o->profile_iters, &acc, &un, &nn);
        pz_status st2 = pz_backend_set_gemm_force(ex, PZ_GEMM_AUTO);
        if (st == PZ_OK) st = st2;
        if (st == PZ_OK && nn > 0)
          for (int c = 0; c < PZ_CMP_N_COMP; c++) pt->base_us[b][c] = acc.us[c];
      }
      if (st == PZ_OK) st = pz_profile_activity(false);
    }
    if (st != PZ_OK) break;
    st = pz_compare_decode(o, ci, &cuda_ops, (void *[2]){&sides[0], &sides[1]}, mc.vocab_size, first, pt);
    if (st != PZ_OK) break;
    progress(o, "conc %d (%d/%d) done: TPOT OFF %.3f ms, ON %.3f ms; tokens %s", conc, ci + 1, o->n_conc,
             pt->tpot_off_ms, pt->tpot_on_ms, pt->tokens_identical ? "identical" : "DIFFER");
  }
  if (st != PZ_OK && r->n_points > 0) { /* keep the concurrencies that completed */
    char msg[400];
    snprintf(msg, sizeof msg, "%s", pz_last_error());
    r->n_points--;
    note(r, o->log, "stopped at concurrency %d: %s", o->conc[r->n_points], msg);
    pz_error(st, "%s", msg);
  }
  if (prof) {
    uint64_t d = pz_profile_dropped();
    if (d) note(r, o->log, "CUPTI dropped %llu records.", (unsigned long long)d);
    pz_profile_stop();
  }
  pz_backend_destroy(ex);
  pz_graph_free(g);
  return st;
}
