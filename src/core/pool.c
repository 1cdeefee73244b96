/* Worker-thread pool of the CPU backend (pthreads): one job at a time, generation-counted. */
#include "core/pool.h"
#include <pthread.h>
#include <stdlib.h>

struct pz_cpu_pool {
  int threads;
  pthread_t *tid;
  pthread_mutex_t mu;
  pthread_cond_t go, done;
  uint64_t gen;          /* incremented for each job */
  int pending;           /* workers still running the current job */
  int quit;
  /* current job */
  pz_par_fn fn;
  void *arg;
  int64_t n, chunk;
};

static _Thread_local pz_cpu_pool *tls_pool = NULL;
static _Thread_local int tls_in_worker = 0;

typedef struct { pz_cpu_pool *p; int idx; } worker_arg;

static void run_chunk(pz_cpu_pool *p, int idx) {
  int64_t lo = (int64_t)idx * p->chunk, hi = lo + p->chunk;
  if (hi > p->n) hi = p->n;
  if (lo < hi) p->fn(p->arg, lo, hi);
}

static void *worker(void *va) {
  worker_arg *wa = va;
  pz_cpu_pool *p = wa->p;
  int idx = wa->idx;
  free(wa);
  tls_in_worker = 1;
  uint64_t seen = 0;
  pthread_mutex_lock(&p->mu);
  for (;;) {
    while (!p->quit && p->gen == seen) pthread_cond_wait(&p->go, &p->mu);
    if (p->quit) break;
    seen = p->gen;
    pthread_mutex_unlock(&p->mu);
    run_chunk(p, idx);
    pthread_mutex_lock(&p->mu);
    if (--p->pending == 0) pthread_cond_signal(&p->done);
  }
  pthread_mutex_unlock(&p->mu);
  return NULL;
}

pz_status pz_cpu_pool_create(int threads, pz_cpu_pool **out) {
  if (threads < 1) threads = 1;
  pz_cpu_pool *p = calloc(1, sizeof *p);
  if (!p) return pz_error(PZ_ERR_OOM, "thread pool allocation failed");
  p->threads = threads;
  pthread_mutex_init(&p->mu, NULL);
  pthread_cond_init(&p->go, NULL);
  pthread_cond_init(&p->done, NULL);
  p->tid = calloc((size_t)threads, sizeof(pthread_t));
  if (!p->tid) { free(p); return pz_error(PZ_ERR_OOM, "thread pool allocation failed"); }
  for (int i = 1; i < threads; i++) {
    worker_arg *wa = malloc(sizeof *wa);
    if (!wa) { p->threads = i; pz_cpu_pool_free(p); return pz_error(PZ_ERR_OOM, "thread pool allocation failed"); }
    wa->p = p;
    wa->idx = i;
    if (pthread_create(&p->tid[i], NULL, worker, wa) != 0) {
      free(wa);
      p->threads = i;
      pz_cpu_pool_free(p);
      return pz_error(PZ_ERR_INTERNAL, "pthread_create failed for worker %d", i);
    }
  }
  *out = p;
  return PZ_OK;
}

void pz_cpu_pool_free(pz_cpu_pool *p) {
  if (!p) return;
  pthread_mutex_lock(&p->mu);
  p->quit = 1;
  pthread_cond_broadcast(&p->go);
  pthread_mutex_unlock(&p->mu);
  for (int i = 1; i < p->threads; i++) pthread_join(p->tid[i], NULL);
  if (tls_pool == p) tls_pool = NULL;
  pthread_mutex_destroy(&p->mu);
  pthread_cond_destroy(&p->go);
  pthread_cond_destroy(&p->done);
  free(p->tid);
  free(p);
}

void pz_cpu_pool_bind(pz_cpu_pool *p) { tls_pool = p; }
pz_cpu_pool *pz_cpu_pool_current(void) { return tls_pool; }

void pz_par_for(int64_t n, int64_t min_chunk, pz_par_fn fn, void *arg) {
  pz_cpu_pool *p = tls_pool;
  if (n <= 0) return;
  if (min_chunk < 1) min_chunk = 1;
  if (!p || tls_in_worker || p->threads < 2 || n < 2 * min_chunk) {
    fn(arg, 0, n);
    return;
  }
  int64_t t = p->threads;
  if (t > n / min_chunk) t = n / min_chunk;
  pthread_mutex_lock(&p->mu);
  p->fn = fn;
  p->arg = arg;
  p->n = n;
  p->chunk = (n + t - 1) / t;
  p->pending = p->threads - 1;
  p->gen++;
  pthread_cond_broadcast(&p->go);
  pthread_mutex_unlock(&p->mu);
  tls_in_worker = 1; /* the caller's own chunk must not nest either */
  run_chunk(p, 0);
  tls_in_worker = 0;
  pthread_mutex_lock(&p->mu);
  while (p->pending > 0) pthread_cond_wait(&p->done, &p->mu);
  pthread_mutex_unlock(&p->mu);
}
