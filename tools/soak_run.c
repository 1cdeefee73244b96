/* The replay loop of `prezero soak` (soak.h) on the CUDA backend, through the backend interface
 * only (backend/backend.h: create / capture / step / logits), with a host-side watchdog.
 *
 * Why repeats of a step must be bit-identical: every step of batch m decodes the same tokens
 * tok_m[i] with sequence i at the same position p_i = pz_soak_pos(context, i) at every batch size
 * and in every round. A step writes each sequence's K/V row at p_i before any attention reads it
 * (docs/ARCHITECTURE.md §2, the GQA and MLA ops) and reads rows 0..p_i; rows below p_i hold the
 * seeded fill and no step ever writes them (no sequence moves). So a step's result depends on
 * its own inputs only, whatever ran before it, and the first OFF step of each batch size is the
 * reference for all later steps of that size, OFF and ON alike. ON vs OFF is bit-identical only
 * with at most 2 split-K splits (0 + a + b = 0 + b + a; docs/ARCHITECTURE.md §5): the run takes
 * PREZERO_GEMM_SPLITS=2 through its options (1 is kept; unset or above 2 becomes 2), as
 * `prezero compare --deterministic` does. The batch sizes are exactly the captured sizes, so no
 * step is padded. */
#define _POSIX_C_SOURCE 200809L
#include "soak.h"
#include <string.h>

int pz_soak_pos(int context, int i) {
  const int w = context < 64 ? context : 64;
  return context - 1 - (7 * i) % w;
}

int pz_soak_passed(const pz_soak_opts *o, const pz_soak_result *r) {
  if (!r->ran || r->hang || r->error[0] || r->replays < 1) return 0;
  for (int b = 0; b < r->nb; b++)
    for (int k = 0; k < 2; k++)
      if (r->b[b].mism_logits[k] || r->b[b].mism_tokens[k]) return 0;
  for (int g = 0; g < r->ngpu; g++)
    if ((double)(r->free_start[g] - r->free_min[g]) > o->mem_slack_mib * 1048576.0) return 0;
  if ((double)(r->rss_max - r->rss_start) > o->host_slack_mib * 1048576.0) return 0;
  return 1;
}

#ifdef PZ_HAVE_CUDA
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#include <cuda_runtime_api.h>
#include "backend/backend.h"
#include "core/options.h"
#include "core/status.h"
#include "model/builder.h"
#include "passes/prezero.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint64_t mix64(uint64_t x) { /* splitmix64 finaliser */
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/* ---- watchdog: a thread that ends the process when an armed call outlives its limit */
typedef struct watchdog {
  pthread_mutex_t mu;
  int armed, stop;
  double deadline, limit;
  char what[200];
  const pz_soak_opts *o;
  pz_soak_result *r;
  void (*on_hang)(const pz_soak_opts *o, pz_soak_result *r);
  pthread_t th;
} watchdog;

static void *wd_main(void *p) {
  watchdog *w = p;
  for (;;) {
    pthread_mutex_lock(&w->mu);
    if (w->stop) {
      pthread_mutex_unlock(&w->mu);
      return NULL;
    }
    if (w->armed && now_s() > w->deadline) {
      /* The main thread is inside the armed call and touches r only while disarmed. */
      w->r->hang = 1;
      snprintf(w->r->error, sizeof w->r->error, "%s did not return within %.0f s (watchdog)", w->what, w->limit);
      fprintf(stderr, "prezero soak: %s; the GPU hangs or a peer never arrived: check nvidia-smi and the kernel log\n",
              w->r->error);
      if (w->on_hang) w->on_hang(w->o, w->r);
      fflush(NULL);
      _exit(1); /* a kernel that never returns cannot be cancelled from the host */
    }
    pthread_mutex_unlock(&w->mu);
    struct timespec ts = {0, 50 * 1000000L};
    nanosleep(&ts, NULL);
  }
}

static void wd_arm(watchdog *w, double limit, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void wd_arm(watchdog *w, double limit, const char *fmt, ...) {
  pthread_mutex_lock(&w->mu);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(w->what, sizeof w->what, fmt, ap);
  va_end(ap);
  w->limit = limit;
  w->deadline = now_s() + limit;
  w->armed = 1;
  pthread_mutex_unlock(&w->mu);
}

static void wd_disarm(watchdog *w) {
  pthread_mutex_lock(&w->mu);
  w->armed = 0;
  pthread_mutex_unlock(&w->mu);
}

/* ---- memory probes */
static int free_bytes(int ngpu, long long *out, char *err, size_t len) {
  int cur = 0;
  if (cudaGetDevice(&cur) != cudaSuccess) cur = 0;
  for (int g = 0; g < ngpu; g++) {
    size_t f = 0, t = 0;
    cudaError_t e = cudaSetDevice(g);
    if (e == cudaSuccess) e = cudaMemGetInfo(&f, &t);
    if (e != cudaSuccess) {
      snprintf(err, len, "cudaMemGetInfo on GPU %d: %s", g, cudaGetErrorString(e));
      return -1;
    }
    out[g] = (long long)f;
  }
  (void)cudaSetDevice(cur);
  return 0;
}

static long long rss_bytes(void) { /* resident pages of this process (proc(5), /proc/[pid]/statm) */
  FILE *f = fopen("/proc/self/statm", "r");
  long long size = 0, res = 0;
  if (f) {
    if (fscanf(f, "%lld %lld", &size, &res) != 2) res = 0;
    fclose(f);
  }
  return res * (long long)sysconf(_SC_PAGESIZE);
}

static void sample(const pz_soak_opts *o, pz_soak_result *r, double t, long long *now_free) {
  for (int g = 0; g < r->ngpu; g++)
    if (now_free[g] < r->free_min[g]) r->free_min[g] = now_free[g];
  long long rss = rss_bytes();
  if (rss > r->rss_max) r->rss_max = rss;
  if (r->n_samples < PZ_SOAK_MAX_SAMPLES) {
    r->sample_t[r->n_samples] = t;
    r->sample_free0[r->n_samples] = now_free[0];
    r->n_samples++;
  }
  (void)o;
}

static int fail(pz_soak_result *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(pz_soak_result *r, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(r->error, sizeof r->error, fmt, ap);
  va_end(ap);
  return 1;
}

/* Compares logits got[m * vocab] with the reference; on the first mismatch of the run records
 * where. Returns 1 when they differ (bit for bit). */
static int compare_logits(pz_soak_result *r, const float *want, const float *got, size_t n, long long replay, int m,
                          int on) {
  if (!memcmp(want, got, n * sizeof(float))) return 0;
  size_t i = 0;
  while (i < n && !memcmp(&want[i], &got[i], sizeof(float))) i++;
  if (r->first_replay < 0) {
    r->first_replay = replay;
    r->first_m = m;
    r->first_on = on;
    r->first_index = (int)i;
    r->first_want = i < n ? want[i] : 0;
    r->first_got = i < n ? got[i] : 0;
  }
  return 1;
}

int pz_soak_run(const pz_soak_opts *o, const pz_model_config *mc, pz_soak_result *r,
                void (*on_hang)(const pz_soak_opts *o, pz_soak_result *r)) {
  memset(r, 0, sizeof *r);
  r->first_replay = -1;
  r->nb = o->nb;
  r->ngpu = o->tp;
  r->vocab = (int)mc->vocab_size;
  snprintf(r->model, sizeof r->model, "%s", mc->name);
  snprintf(r->device, sizeof r->device, "?");
  int max_m = 0;
  for (int b = 0; b < o->nb; b++) {
    r->b[b].m = o->batch[b];
    max_m = o->batch[b] > max_m ? o->batch[b] : max_m;
  }
  /* Options: deterministic GEMMs; at TP > 1 a peer that never arrives ends the step with
   * PZ_ERR_TIMEOUT (the communicator's own timeout, checked after every step). */
  pz_runtime_opts ro;
  if (pz_runtime_opts_take(&ro, NULL, NULL, NULL) != PZ_OK) return fail(r, "%s", pz_last_error());
  if (ro.gemm_splits != 1) ro.gemm_splits = 2;
  if (ro.ar_timeout_us < 0 && o->tp > 1) ro.ar_timeout_us = (int64_t)(o->step_timeout_s * 1e6);
  snprintf(r->determinism, sizeof r->determinism, "PREZERO_GEMM_SPLITS=%d PREZERO_GEMM_FORCE=%s PREZERO_FORCE_GATE=%s "
           "PREZERO_AR_ALGO=%s PREZERO_AR_TIMEOUT_US=%lld", ro.gemm_splits, ro.gemm_force[0] ? ro.gemm_force : "unset",
           ro.force_gate < 0 ? "unset" : ro.force_gate ? "on" : "off", ro.ar_algo, (long long)ro.ar_timeout_us);

  pz_build_opts bo = {.tp = o->tp, .m = max_m, .max_ctx = (int64_t)o->context + 8, .layers = o->layers};
  pz_graph *g = NULL;
  if (pz_build_decode_graph(mc, &bo, &g) != PZ_OK) return fail(r, "building the decode graph: %s", pz_last_error());

  const size_t vocab = (size_t)mc->vocab_size;
  float *ref[PZ_SOAK_MAX_B] = {0}, *cur = malloc(sizeof(float) * vocab * (size_t)max_m);
  int32_t *tok[PZ_SOAK_MAX_B] = {0}, *ref_next[PZ_SOAK_MAX_B] = {0};
  int32_t pos[PZ_MAX_BATCH], next[PZ_MAX_BATCH];
  int rc = 0, wd_started = 0;
  pz_backend *e = NULL;
  watchdog wd;
  memset(&wd, 0, sizeof wd);
  pthread_mutex_init(&wd.mu, NULL);
  wd.o = o;
  wd.r = r;
  wd.on_hang = on_hang;
  const double T = o->step_timeout_s, T_slow = 10 * o->step_timeout_s;
  if (!cur) { rc = fail(r, "host memory for the logits (%.1f MiB)", 4.0 * vocab * max_m / 1048576.0); goto done; }
  for (int b = 0; b < o->nb; b++) {
    const int m = o->batch[b];
    ref[b] = malloc(sizeof(float) * vocab * (size_t)m);
    tok[b] = malloc(sizeof(int32_t) * (size_t)m);
    ref_next[b] = malloc(sizeof(int32_t) * (size_t)m);
    if (!ref[b] || !tok[b] || !ref_next[b]) { rc = fail(r, "host memory for the reference logits"); goto done; }
    for (int i = 0; i < m; i++) tok[b][i] = (int32_t)(mix64(o->seed ^ ((uint64_t)m << 32) ^ (uint64_t)i) % vocab);
  }
  for (int i = 0; i < max_m; i++) pos[i] = pz_soak_pos(o->context, i);
  if (pthread_create(&wd.th, NULL, wd_main, &wd) != 0) { rc = fail(r, "cannot start the watchdog thread"); goto done; }
  wd_started = 1;

  /* One executor: the OFF graph plus the per-batch ON graphs over the same weights. */
  pz_backend_opts xo = PZ_BACKEND_OPTS_INIT;
  xo.seed = o->seed;
  xo.graphs = 1;
  xo.prezero = 1;
  xo.runtime = &ro;
  for (int b = 0; b < o->nb; b++) xo.capture[b] = o->batch[b];
  xo.n_capture = o->nb;
  for (int i = 1; i < xo.n_capture; i++) /* ascending, as the executor wants them */
    for (int j = i; j > 0 && xo.capture[j] < xo.capture[j - 1]; j--) {
      int t = xo.capture[j];
      xo.capture[j] = xo.capture[j - 1];
      xo.capture[j - 1] = t;
    }
  fprintf(stderr, "[soak] %s, %d layers, TP %d: creating the executor (OFF and per-batch ON graphs)\n", mc->name,
          o->layers, o->tp);
  wd_arm(&wd, T_slow, "creating the executor");
  pz_status st = pz_backend_create(PZ_BACKEND_CUDA, g, &xo, &e);
  wd_disarm(&wd);
  if (st != PZ_OK) { rc = fail(r, "creating the CUDA executor: %s", pz_last_error()); goto done; }
  if (!pz_backend_per_batch(e)) { rc = fail(r, "the executor did not take the per-batch prezero plan (PREZERO_PLAN_PER_BATCH=0?)"); goto done; }
  snprintf(r->device, sizeof r->device, "%.127s", pz_backend_device_desc(e)->name);

  /* The ON plan per batch size, then the warm-up: capture both sets, the reference OFF step,
   * the first ON step checked against it. */
  for (int b = 0; b < o->nb; b++) {
    const int m = o->batch[b];
    if (pz_backend_padded_m(e, m) != m) { rc = fail(r, "batch %d runs padded to %lld", m, (long long)pz_backend_padded_m(e, m)); goto done; }
    pz_prezero_report rep;
    const pz_graph *gb = NULL;
    if (pz_backend_plan(e, m, &rep, &gb) != PZ_OK) { rc = fail(r, "the prezero plan at batch %d: %s", m, pz_last_error()); goto done; }
    pz_prezero_report_free(&rep);
    for (int i = 0; gb && i < gb->n_nodes; i++) r->b[b].rewritten += gb->nodes[i].op == PZ_OP_MM_MAYBE_PREZERO;
    for (int on = 0; on < 2; on++) {
      st = pz_backend_set_prezero(e, on);
      wd_arm(&wd, T_slow, "warm-up of batch %d, prezero %s (capture + first replay)", m, on ? "on" : "off");
      if (st == PZ_OK) st = pz_backend_capture(e, m);
      double ts = now_s();
      if (st == PZ_OK) st = pz_backend_step(e, m, tok[b], pos, next);
      double dt = now_s() - ts;
      if (st == PZ_OK) st = pz_backend_logits(e, m, on ? cur : ref[b]);
      wd_disarm(&wd);
      if (st != PZ_OK) { rc = fail(r, "warm-up of batch %d, prezero %s: %s", m, on ? "on" : "off", pz_last_error()); goto done; }
      pz_soak_batch *s = &r->b[b];
      s->steps[on]++;
      s->step_s_sum[on] += dt;
      if (dt > s->step_s_max[on]) s->step_s_max[on] = dt;
      r->replays++;
      if (!on) {
        memcpy(ref_next[b], next, sizeof(int32_t) * (size_t)m);
        continue;
      }
      s->checked[1]++;
      s->mism_logits[1] += compare_logits(r, ref[b], cur, vocab * (size_t)m, r->replays - 1, m, 1);
      s->mism_tokens[1] += memcmp(ref_next[b], next, sizeof(int32_t) * (size_t)m) != 0;
    }
  }

  /* Baselines after the warm-up: every graph is captured, every buffer allocated. */
  char err[256];
  long long now_free[PZ_SOAK_MAX_TP];
  wd_arm(&wd, T, "cudaMemGetInfo");
  int mem_ok = free_bytes(r->ngpu, r->free_start, err, sizeof err) == 0;
  wd_disarm(&wd);
  if (!mem_ok) { rc = fail(r, "%s", err); goto done; }
  for (int gi = 0; gi < r->ngpu; gi++) r->free_min[gi] = r->free_end[gi] = r->free_start[gi];
  r->rss_start = r->rss_max = r->rss_end = rss_bytes();
  r->ran = 1;
  fprintf(stderr, "[soak] warm-up done (%d batch sizes, both sets captured); replaying for %s\n", o->nb,
          o->replays && o->seconds > 0 ? "the limit reached first" : o->replays ? "the replay count" : "the time limit");

  const double t0 = now_s();
  double next_sample = t0 + PZ_SOAK_SAMPLE_S;
  long long visits[PZ_SOAK_MAX_B][2];
  memset(visits, 0, sizeof visits);
  int logged = 0;
  sample(o, r, 0.0, r->free_start);
  for (long long k = 0;; k++) {
    double t = now_s();
    if ((o->replays && k >= o->replays) || (o->seconds > 0 && t - t0 >= o->seconds)) break;
    const int c = (int)(k / o->nb), b = (int)(k % o->nb), on = (c + b) & 1, m = o->batch[b];
    pz_soak_batch *s = &r->b[b];
    st = pz_backend_set_prezero(e, on);
    wd_arm(&wd, T, "replay %lld (batch %d, prezero %s)", r->replays, m, on ? "on" : "off");
    double ts = now_s();
    if (st == PZ_OK) st = pz_backend_step(e, m, tok[b], pos, next);
    double dt = now_s() - ts;
    int check = st == PZ_OK && visits[b][on]++ % o->check_every == 0;
    if (check) st = pz_backend_logits(e, m, cur);
    wd_disarm(&wd);
    if (st != PZ_OK) { rc = fail(r, "replay %lld (batch %d, prezero %s): %s", r->replays, m, on ? "on" : "off", pz_last_error()); break; }
    s->steps[on]++;
    s->step_s_sum[on] += dt;
    if (dt > s->step_s_max[on]) s->step_s_max[on] = dt;
    r->replays++;
    r->loop_replays++;
    int bad_tok = memcmp(ref_next[b], next, sizeof(int32_t) * (size_t)m) != 0, bad_log = 0;
    s->mism_tokens[on] += bad_tok;
    if (check) {
      s->checked[on]++;
      bad_log = compare_logits(r, ref[b], cur, vocab * (size_t)m, r->replays - 1, m, on);
      s->mism_logits[on] += bad_log;
    }
    if ((bad_tok || bad_log) && logged++ < PZ_SOAK_MAX_LOGGED)
      fprintf(stderr, "[soak] replay %lld (batch %d, prezero %s): %s differ from the first OFF step's\n",
              r->replays - 1, m, on ? "on" : "off", bad_log ? "logits" : "next tokens");
    t = now_s();
    if (t >= next_sample) {
      wd_arm(&wd, T, "cudaMemGetInfo");
      mem_ok = free_bytes(r->ngpu, now_free, err, sizeof err) == 0;
      wd_disarm(&wd);
      if (!mem_ok) { rc = fail(r, "%s", err); break; }
      sample(o, r, t - t0, now_free);
      long long mism = 0;
      for (int j = 0; j < o->nb; j++)
        for (int q = 0; q < 2; q++) mism += r->b[j].mism_logits[q] + r->b[j].mism_tokens[q];
      fprintf(stderr, "[soak] %6.0f s: %lld replays (%.1f/s), %lld mismatches, GPU 0 free %.2f GiB (%+.1f MiB since the start)\n",
              t - t0, r->loop_replays, r->loop_replays / (t - t0), mism, now_free[0] / 1073741824.0,
              (now_free[0] - r->free_start[0]) / 1048576.0);
      next_sample += PZ_SOAK_SAMPLE_S;
      if (next_sample < t) next_sample = t + PZ_SOAK_SAMPLE_S;
    }
  }
  r->loop_s = now_s() - t0;
  r->replays_per_s = r->loop_s > 0 ? r->loop_replays / r->loop_s : 0;
  wd_arm(&wd, T, "cudaMemGetInfo");
  mem_ok = free_bytes(r->ngpu, r->free_end, err, sizeof err) == 0;
  wd_disarm(&wd);
  if (!mem_ok && !rc) rc = fail(r, "%s", err);
  if (mem_ok) sample(o, r, r->loop_s, r->free_end);
  r->rss_end = rss_bytes();
  if (r->rss_end > r->rss_max) r->rss_max = r->rss_end;

done:
  if (e) {
    if (wd_started) wd_arm(&wd, T_slow, "freeing the executor");
    pz_backend_destroy(e);
    if (wd_started) wd_disarm(&wd);
  }
  if (wd_started) {
    pthread_mutex_lock(&wd.mu);
    wd.stop = 1;
    pthread_mutex_unlock(&wd.mu);
    pthread_join(wd.th, NULL);
  }
  pthread_mutex_destroy(&wd.mu);
  pz_graph_free(g);
  free(cur);
  for (int b = 0; b < o->nb; b++) {
    free(ref[b]);
    free(tok[b]);
    free(ref_next[b]);
  }
  return rc;
}
#endif
