/* Worker-thread pool (used by the CPU backend and the checkpoint loader): a parallel-for over an index range whose chunks are
 * a pure function of (n, threads); callers give each output element to exactly one index. */
#ifndef PZ_CORE_POOL_H
#define PZ_CORE_POOL_H
#include <stdint.h>
#include "core/status.h"

typedef struct pz_cpu_pool pz_cpu_pool;
/* fn processes indices [lo, hi) of the range. */
typedef void (*pz_par_fn)(void *arg, int64_t lo, int64_t hi);

/* Starts threads-1 workers (the caller is the last thread). threads < 1 is taken as 1.
 * Errors: PZ_ERR_OOM, PZ_ERR_INTERNAL (pthread_create failed). */
pz_status pz_cpu_pool_create(int threads, pz_cpu_pool **out);
/* Stops and joins the workers, frees p; NULL is ignored. Not while a pz_par_for runs on p. */
void pz_cpu_pool_free(pz_cpu_pool *p);

/* Makes p the calling thread's current pool (NULL: none). The executor binds its pool for the
 * duration of a step, so reference functions called from op kernels use it. */
void pz_cpu_pool_bind(pz_cpu_pool *p);
/* The calling thread's current pool (NULL: none). */
pz_cpu_pool *pz_cpu_pool_current(void);

/* Runs fn over [0, n): serially (fn(arg, 0, n)) when no pool is bound, when called from a
 * worker (no nesting), or when n < 2*min_chunk; otherwise cut into contiguous chunks, one per
 * thread, and waits for all of them. fn must not depend on how the range is cut. */
void pz_par_for(int64_t n, int64_t min_chunk, pz_par_fn fn, void *arg);
#endif
