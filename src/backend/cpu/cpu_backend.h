/* CPU reference backend: runs every TP rank of a per-rank decode graph in one process.
 * Each rank has its own storage for every tensor; collective ops (AR_RMSNORM*, ARGMAX)
 * see all ranks and reduce in fixed rank order 0..tp-1. Plain C, fp32 accumulation. */
#ifndef PZ_BACKEND_CPU_H
#define PZ_BACKEND_CPU_H
#include "core/gate.h"
#include "core/ir.h"

typedef struct pz_cpu_exec_opts {
  uint64_t seed;          /* weights and KV-cache contents are a pure function of (seed, tensor name, full index) */
  int threads;            /* worker threads (0 = number of cores); at most PZ_CPU_MAX_THREADS are used */
  int poison;             /* fill ACT/BUFFER storage with NaN before each step (tests: proves every read is written first) */
  pz_device_desc dev;     /* what prezero_active() evaluates against */
  /* Optional second weight source (a checkpoint, model/checkpoint.h): when set, every WEIGHT
   * tensor t of rank r is filled by load_weight(load_user, t, r, dst) instead of the seeded
   * hash; dst holds pz_tensor_span(t) elements of t->dtype. An error aborts the creation. */
  pz_status (*load_weight)(void *user, const pz_tensor *t, int rank, void *dst);
  void *load_user;
  const struct pz_runtime_opts *runtime; /* switches (core/options.h) read once at creation; NULL: the environment */
} pz_cpu_exec_opts;
struct pz_runtime_opts;
#define PZ_CPU_MAX_THREADS 1024
#define PZ_CPU_EXEC_OPTS_INIT {.seed = 1234, .threads = 0, .poison = 0}

/* Executor notes (SplitMix64: Steele, Lea, Flood, "Fast splittable pseudorandom number
 * generators", OOPSLA 2014, constants of prng.di.unimi.it/splitmix64.c; FNV-1a 64-bit: offset
 * basis 0xcbf29ce484222325, prime 0x100000001b3):
 * - threads: opts.threads, or the option cpu_threads (PREZERO_CPU_THREADS=N) when it is 0 (1: no worker threads). Work is
 *   split by output element, so results are bit-identical for every thread count.
 * - dev.num_sms <= 0 (as PZ_CPU_EXEC_OPTS_INIT leaves it) means pz_device_desc_default().
 * - Weight values: init_offset + init_scale * u, u in [-1, 1) = top 24 bits of output
 *   number (idx+1) of SplitMix64 seeded with mix(seed, FNV-1a(name)), idx = the element's
 *   flat index in the FULL tensor (shape full_ne; rank r's shard sits at r*ne[shard_dim], or
 *   where the tensor's parts / replicated slices put it: pz_fill_index, core/fill_rule.h).
 *   STATE tensors named "*kv_cache" (MLA) get bf16 values init_scale (or 1) * u, the same on every
 *   rank (paged pools: through the block table, set to the identity first, core/kv_pages.h); "*.k_cache" / "*.v_cache" (GQA, [m, kv heads, max_ctx, head_dim], sharded by kv head)
 *   the same values by the weights' mapping, so every TP degree sees one full cache; other STATE
 *   and INPUT tensors start at zero.
 * - Collective ops (AR_RMSNORM*, ARGMAX) are called once per step with ctx->rank = 0,
 *   ctx->data = rank 0's pointers and ctx->rank_data = every rank's; other ops once per rank. */
typedef struct pz_cpu_exec pz_cpu_exec;

/* Per-op context passed to every CPU kernel. */
typedef struct pz_cpu_ctx {
  const pz_graph *g;
  const pz_cpu_exec_opts *opts;
  int rank, tp;
  int64_t m;              /* rows of this step (<= g->info.m) */
  void **data;            /* data[t]: this rank's element 0 of tensor t (views resolved) */
  void ***rank_data;      /* rank_data[r][t]: the same for every rank (collective ops only) */
} pz_cpu_ctx;

/* Storage for every tensor on every rank; weights filled from (seed, name) and sharded
 * consistently so any TP degree sees the same full weights. Errors: PZ_ERR_OOM (also, before
 * anything is allocated, when all ranks' storage exceeds the machine's physical RAM),
 * PZ_ERR_VERIFY. */
/* The worker threads an executor asked for `req` threads starts: req when > 0 (a flag beats the
 * environment), else PREZERO_CPU_THREADS when set and > 0, else the cores (at most 64); never
 * above PZ_CPU_MAX_THREADS. */
int pz_cpu_threads_for(int req, int opt_threads);
pz_status pz_cpu_exec_create(const pz_graph *g, const pz_cpu_exec_opts *opts, pz_cpu_exec **out);
/* One decode step for m <= g->info.m sequences: tokens[m] i32 in, pos[m] i32 (tokens already
 * in each sequence's KV cache, < max_ctx), next[m] i32 out (greedy argmax; may be NULL).
 * Errors: PZ_ERR_INVALID_ARG (NULL e/tokens/pos, m outside 1..g->info.m, pos < 0, a token or
 * position the ops refuse, next given for a graph without out_tokens), PZ_ERR_SHAPE (an input
 * tensor not i32 [>= m]), and the op kernels' errors (cpu_ops.h). */
pz_status pz_cpu_exec_step(pz_cpu_exec *e, int64_t m, const int32_t *tokens, const int32_t *pos, int32_t *next);
/* Replaces the block table of every paged MLA layer (core/kv_pages.h) on every rank with
 * table[m * max_blocks] i32 (m = g->info.m rows, row stride max_blocks = ceil(max_ctx / 64)),
 * then re-fills every page pool with the seeded contents through it: the prompt KV moves to the
 * new pages (pages no sequence maps become zero; what earlier steps appended is lost). At
 * creation the table is the identity i * max_blocks + b. Errors: PZ_ERR_INVALID_ARG (NULL, an
 * entry outside [0, n_pages), a page mapped twice), PZ_ERR_SHAPE (a pool or table of the wrong
 * shape), PZ_ERR_OOM. A graph without paged caches: nothing happens. */
pz_status pz_cpu_exec_set_block_table(pz_cpu_exec *e, const int32_t *table);
/* Full logits of the last step, gathered over ranks: out[m, vocab] f32, row-major.
 * Errors: PZ_ERR_INVALID_ARG (NULL, no out_logits tensor, m outside 1..the last step's m). */
pz_status pz_cpu_exec_logits(const pz_cpu_exec *e, int64_t m, float *out);
/* This rank's data pointer for tensor id (views resolved), for tests; NULL when e is NULL or
 * rank / tensor_id is out of range. */
void *pz_cpu_exec_data(const pz_cpu_exec *e, int rank, int tensor_id);
/* The gate description the executor evaluates prezero_active() against: opts.dev (or
 * pz_device_desc_default when its num_sms <= 0) with the options' gate and donor-launch overrides
 * applied; owned by e, NULL for NULL. */
const pz_device_desc *pz_cpu_exec_device_desc(const pz_cpu_exec *e);
/* Stops the worker threads and frees every rank's storage; NULL is ignored. */
void pz_cpu_exec_free(pz_cpu_exec *e);
#endif
