/* CPU executor: per-rank storage for every tensor, deterministic weight / KV-cache fill, and the
 * decode step that runs every node for every TP rank (collectives once, over all ranks). */
#include "backend/cpu/cpu_backend.h"
#include "core/options.h"
#include "backend/cpu/cpu_ops.h"
#include "core/pool.h"
#include "core/fill_rule.h"
#include "core/fill_shard.h"
#include "core/kv_pages.h"
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef pz_status (*op_fn)(pz_cpu_ctx *, const pz_node *);
static const op_fn op_table[] = {
#define PZ_OP(e, name, coll) pz_cpu_op_##e,
#include "core/ops.def"
#undef PZ_OP
};
_Static_assert(sizeof op_table / sizeof op_table[0] == PZ_OP_COUNT, "one CPU kernel per op");

struct pz_cpu_exec {
  pz_graph *g;              /* private copy of the graph */
  pz_cpu_exec_opts opts;
  int tp;
  void **store;             /* store[r * n_tensors + t]: owner allocations (NULL for views) */
  void ***data;             /* data[r][t]: element 0 of tensor t on rank r */
  pz_cpu_pool *pool;
  int64_t last_m;
};

/* ------------------------------------------------------------ deterministic values */

/* Values: core/fill_rule.h, shared with the CUDA fill kernel (identical bits). */
typedef struct fill_job {
  const pz_tensor *t;
  void *dst;
  uint64_t key;
  int rank, tp;
  float scale, offset;
} fill_job;

/* Rows [lo, hi) of the tensor seen as [numel / ne[last], ne[last]]: the full (unsharded) flat
 * index of a row's first element comes from its coordinates (pz_fill_index: the shard dim
 * shifted by rank * ne[shard_dim], or mapped through its parts / replicated slices); along the
 * last dim it then advances by 1 (or is mapped per element when the last dim is so mapped). */
static void fill_rows(void *va, int64_t lo, int64_t hi) {
  const fill_job *f = va;
  const pz_tensor *t = f->t;
  const int64_t w = t->ne[t->ndim - 1];
  const bool per_elem = pz_fill_last_dim_mapped(t->ndim, t->ne, t->full_ne, t->shard_dim, f->tp, t->n_parts);
#define FULL_IDX(j) (per_elem ? pz_fill_index(t->ndim, t->ne, t->full_ne, t->shard_dim, f->rank, f->tp, t->n_parts, \
                                              t->part_ne, t->part_full, row, (j)) : full + (j))
  for (int64_t row = lo; row < hi; row++) {
    const int64_t full = pz_fill_index(t->ndim, t->ne, t->full_ne, t->shard_dim, f->rank, f->tp, t->n_parts, t->part_ne,
                                       t->part_full, row, 0);
    int64_t li = row * w;
    if (t->dtype == PZ_BF16) {
      pz_bf16 *o = (pz_bf16 *)f->dst + li;
      for (int64_t j = 0; j < w; j++) o[j] = pz_fill_bf16_bits(pz_fill_value(f->key, (uint64_t)FULL_IDX(j), f->scale, f->offset));
    } else if (t->dtype == PZ_F32) {
      float *o = (float *)f->dst + li;
      for (int64_t j = 0; j < w; j++) o[j] = pz_fill_value(f->key, (uint64_t)FULL_IDX(j), f->scale, f->offset);
    } else {
      int32_t *o = (int32_t *)f->dst + li;
      for (int64_t j = 0; j < w; j++) o[j] = pz_fill_i32(pz_fill_value(f->key, (uint64_t)FULL_IDX(j), f->scale, f->offset));
    }
  }
#undef FULL_IDX
}


static pz_status fill_tensor(pz_cpu_exec *e, int r, const pz_tensor *t) {
  void *dst = e->store[(size_t)r * e->g->n_tensors + t->id];
  fill_job f = {.t = t, .dst = dst, .key = pz_fill_name_key(e->opts.seed, t->name), .rank = r, .tp = e->tp};
  if (t->kind == PZ_T_WEIGHT && e->opts.load_weight) {
    if (!pz_tensor_contiguous(t)) return pz_error(PZ_ERR_SHAPE, "weight %s must be contiguous", t->name);
    return e->opts.load_weight(e->opts.load_user, t, r, dst);
  }
  if (t->kind == PZ_T_WEIGHT) {
    if (!pz_tensor_contiguous(t))
      return pz_error(PZ_ERR_SHAPE, "weight %s must be contiguous", t->name);
    if (t->dtype == PZ_U8 || (t->dtype == PZ_I32 && pz_name_ends_with(t->name, ".weight_packed"))) /* quantised: only a weight source knows the scheme */
      return pz_error(PZ_ERR_INVALID_ARG, "weight %s is stored quantised (%s); give the executor a load_weight source "
                      "(a checkpoint, or model/quant_synth.h for synthetic weights)", t->name, pz_dtype_name(t->dtype));
    PZ_CHECK(pz_fill_check_shard(t, r, e->tp));
    f.scale = t->init_scale;
    f.offset = t->init_offset;
  } else if (t->kind == PZ_T_STATE && (pz_name_ends_with(t->name, ".k_cache") || pz_name_ends_with(t->name, ".v_cache"))) {
    /* GQA caches, sharded by kv head: the weights' mapping, so every TP sees the same full cache. */
    if (!pz_tensor_contiguous(t)) return pz_error(PZ_ERR_SHAPE, "kv cache %s must be contiguous", t->name);
    PZ_CHECK(pz_fill_check_shard(t, r, e->tp));
    f.scale = t->init_scale != 0.0f ? t->init_scale : 1.0f;
    f.offset = 0.0f;
    pz_par_for(pz_tensor_numel(t) / t->ne[t->ndim - 1], 1 + 4096 / t->ne[t->ndim - 1], fill_rows, &f);
    return PZ_OK;
  } else if (t->kind == PZ_T_STATE && pz_kv_paged_node(e->g, t->id)) {
    return PZ_OK; /* a paged MLA cache: filled through its block table (fill_paged) */
  } else if (t->kind == PZ_T_STATE && pz_name_ends_with(t->name, "kv_cache")) {
    f.t = t;
    f.rank = 0; /* replicated over ranks: identical contents */
    f.scale = t->init_scale != 0.0f ? t->init_scale : 1.0f;
    f.offset = 0.0f;
    if (!pz_tensor_contiguous(t)) return pz_error(PZ_ERR_SHAPE, "kv cache %s must be contiguous", t->name);
  } else {
    return PZ_OK; /* calloc'd: zero */
  }
  /* Unsharded view for the cache (shard_dim ignored); weights use their own mapping. */
  pz_tensor tc = *t;
  if (t->kind != PZ_T_WEIGHT) {
    tc.shard_dim = -1;
    tc.n_parts = 0;
    for (int d = 0; d < t->ndim; d++) tc.full_ne[d] = t->ne[d];
  }
  f.t = &tc;
  int64_t rows = pz_tensor_numel(t) / t->ne[t->ndim - 1];
  pz_par_for(rows, 1 + 4096 / t->ne[t->ndim - 1], fill_rows, &f);
  return PZ_OK;
}

/* Sequences [lo, hi) of one paged pool (core/kv_pages.h). */
typedef struct page_job {
  uint16_t *pool;
  const int32_t *table;
  int64_t ld, max_ctx, kvw;
  uint64_t key;
  float scale;
} page_job;
static void fill_pages_rows(void *va, int64_t lo, int64_t hi) {
  const page_job *j = va;
  pz_kv_fill_pages_host(j->pool, j->table, j->ld, lo, hi, j->max_ctx, j->kvw, j->key, j->scale);
}

/* Rank r's paged MLA caches: with `table` (m * max_blocks entries, row stride max_blocks) every
 * block table first takes it, else the identity (creation); then every pool is zeroed and gets
 * the seeded contents through its table (core/kv_pages.h), the same on every rank. */
static pz_status fill_paged(pz_cpu_exec *e, int r, const int32_t *table) {
  for (int k = 0; k < e->g->n_nodes; k++) {
    const pz_node *n = &e->g->nodes[k];
    const pz_tensor *pool, *bt;
    if (!pz_kv_node_tensors(e->g, n, &pool, &bt) || !pool || !bt) continue;
    PZ_CHECK(pz_kv_check_shapes(&n->p.mla, pool, bt, e->g->info.m, n->name));
    const int64_t mb = pz_kv_max_blocks(n->p.mla.max_ctx), rows = bt->ne[0], ld = bt->stride[0];
    int32_t *tab = e->data[r][bt->id];
    for (int64_t i = 0; i < rows; i++)
      for (int64_t b = 0; b < mb; b++) tab[i * ld + b] = table ? table[i * mb + b] : (int32_t)(i * mb + b);
    PZ_CHECK(pz_kv_check_table(tab, rows, ld, mb, pool->ne[0], true));
    uint16_t *dst = e->data[r][pool->id];
    memset(dst, 0, sizeof(uint16_t) * (size_t)pz_tensor_numel(pool));
    page_job j = {.pool = dst, .table = tab, .ld = ld, .max_ctx = n->p.mla.max_ctx, .kvw = pool->ne[2],
                  .key = pz_fill_name_key(e->opts.seed, pool->name), .scale = pool->init_scale != 0.0f ? pool->init_scale : 1.0f};
    pz_par_for(rows, 1, fill_pages_rows, &j);
  }
  return PZ_OK;
}

pz_status pz_cpu_exec_set_block_table(pz_cpu_exec *e, const int32_t *table) {
  if (!e || !table) return pz_error(PZ_ERR_INVALID_ARG, "cpu exec: NULL executor or block table");
  for (int k = 0; k < e->g->n_nodes; k++) { /* check before anything is written */
    const pz_node *n = &e->g->nodes[k];
    const pz_tensor *pool, *bt;
    if (!pz_kv_node_tensors(e->g, n, &pool, &bt) || !pool || !bt) continue;
    const int64_t mb = pz_kv_max_blocks(n->p.mla.max_ctx);
    PZ_CHECK(pz_kv_check_table(table, bt->ne[0], mb, mb, pool->ne[0], true));
  }
  pz_status st = PZ_OK;
  pz_cpu_pool *prev = pz_cpu_pool_current();
  pz_cpu_pool_bind(e->pool);
  for (int r = 0; r < e->tp && st == PZ_OK; r++) st = fill_paged(e, r, table);
  pz_cpu_pool_bind(prev);
  return st;
}

/* ------------------------------------------------------------ create / free */

/* Worker threads: the request (a flag beats the environment), else the option (PREZERO_CPU_THREADS),
 * else the cores; at most PZ_CPU_MAX_THREADS (more only fails in pthread_create and cannot be faster). */
int pz_cpu_threads_for(int req, int opt_threads) {
  if (req <= 0 && opt_threads > 0) req = opt_threads;
  if (req > PZ_CPU_MAX_THREADS) req = PZ_CPU_MAX_THREADS;
  if (req > 0) return req;
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? (int)(n > 64 ? 64 : n) : 1;
}

/* Storage of every rank (saturating: a graph may describe far more than any machine holds)
 * against the machine's RAM, so that an oversized model fails here with the numbers instead of
 * calloc succeeding lazily and the fill being killed by the kernel's OOM killer. */
/* Bytes of memory available to a new allocation: Linux's MemAvailable (free memory plus what the page cache
 * and reclaimable slabs can give back), else the free pages; 0 when neither can be read. */
static double ram_available(void) {
  FILE *f = fopen("/proc/meminfo", "r");
  if (f) {
    char line[128];
    long long kb = -1;
    while (fgets(line, sizeof line, f))
      if (sscanf(line, "MemAvailable: %lld kB", &kb) == 1) break;
    fclose(f);
    if (kb > 0) return (double)kb * 1024.0;
  }
  long pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? (double)pages * (double)page : 0;
}

/* Every rank's storage is touched when it is filled, so it must fit in the memory available now, not in
 * the machine's total (a model between the two was killed by the kernel's out-of-memory killer with no
 * message). */
static pz_status check_ram(const pz_graph *g, int tp) {
  const double G = 1073741824.0;
  double need = 0; /* bytes; a double cannot overflow here */
  for (int t = 0; t < g->n_tensors; t++) {
    const pz_tensor *x = &g->tensors[t];
    if (x->view_of < 0) need += (double)pz_tensor_span(x) * (double)pz_dtype_size(x->dtype) * tp;
  }
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  const double total = pages > 0 && page > 0 ? (double)pages * (double)page : 0, avail = ram_available();
  const double have = avail > 0 ? avail : total;
  if (have > 0 && need > have)
    return pz_error(PZ_ERR_OOM, "cpu exec: %s at TP %d needs %.1f GiB of storage (weights, KV cache, activations of "
                    "%d layer%s) but this machine has %.1f GiB of RAM available (of %.1f GiB); run fewer layers "
                    "(pz_engine_config.layers, --layers N) or a smaller model",
                    g->info.model_name, tp, need / G, g->info.n_layers, g->info.n_layers == 1 ? "" : "s", have / G,
                    total / G);
  return PZ_OK;
}

pz_status pz_cpu_exec_create(const pz_graph *g, const pz_cpu_exec_opts *opts, pz_cpu_exec **out) {
  if (!g || !out) return pz_error(PZ_ERR_INVALID_ARG, "cpu exec: NULL graph or out");
  if (g->info.tp < 1 || g->info.tp > 64) return pz_error(PZ_ERR_INVALID_ARG, "cpu exec: tp %d not in 1..64", g->info.tp);
  PZ_CHECK(pz_graph_verify(g));
  pz_cpu_exec *e = calloc(1, sizeof *e);
  if (!e) return pz_error(PZ_ERR_OOM, "cpu exec allocation");
  pz_status st = PZ_OK;
  pz_cpu_exec_opts def = PZ_CPU_EXEC_OPTS_INIT;
  e->opts = opts ? *opts : def;
  if (e->opts.dev.num_sms <= 0) pz_device_desc_default(&e->opts.dev);
  pz_runtime_opts ro;
  st = pz_runtime_opts_take(&ro, e->opts.runtime, "cpu exec", NULL);
  if (st != PZ_OK) {
    free(e);
    return st;
  }
  pz_device_desc_apply_opts(&e->opts.dev, &ro); /* PREZERO_FORCE_GATE, the donor-launch overrides */
  e->tp = g->info.tp;
  PZ_CHECK_GOTO(pz_graph_clone(g, &e->g), st, fail);
  const int nt = e->g->n_tensors;
  PZ_CHECK_GOTO(check_ram(e->g, e->tp), st, fail);
  e->store = calloc((size_t)e->tp * (size_t)(nt ? nt : 1), sizeof(void *));
  e->data = calloc((size_t)e->tp, sizeof(void **));
  if (!e->store || !e->data) { st = pz_error(PZ_ERR_OOM, "cpu exec allocation"); goto fail; }
  PZ_CHECK_GOTO(pz_cpu_pool_create(pz_cpu_threads_for(e->opts.threads, ro.cpu_threads), &e->pool), st, fail);
  pz_cpu_pool *prev = pz_cpu_pool_current();
  pz_cpu_pool_bind(e->pool);
  for (int r = 0; r < e->tp; r++) {
    e->data[r] = calloc((size_t)(nt ? nt : 1), sizeof(void *));
    if (!e->data[r]) { st = pz_error(PZ_ERR_OOM, "cpu exec allocation"); goto fail_bound; }
    for (int t = 0; t < nt; t++) {
      const pz_tensor *x = &e->g->tensors[t];
      if (x->view_of >= 0) continue;
      size_t bytes = (size_t)pz_tensor_span(x) * pz_dtype_size(x->dtype);
      void *p = calloc(bytes ? bytes : 1, 1);
      if (!p) { st = pz_error(PZ_ERR_OOM, "cpu exec: %zu bytes for %s (rank %d)", bytes, x->name, r); goto fail_bound; }
      e->store[(size_t)r * nt + t] = p;
      PZ_CHECK_GOTO(fill_tensor(e, r, x), st, fail_bound);
    }
    for (int t = 0; t < nt; t++) {
      const pz_tensor *x = &e->g->tensors[t];
      int own = pz_storage_of(e->g, t);
      size_t off = x->view_of >= 0 ? (size_t)x->view_offset * pz_dtype_size(x->dtype) : 0;
      e->data[r][t] = (char *)e->store[(size_t)r * nt + own] + off;
    }
    PZ_CHECK_GOTO(fill_paged(e, r, NULL), st, fail_bound); /* identity block tables, seeded pages */
  }
  pz_cpu_pool_bind(prev);
  *out = e;
  return PZ_OK;
fail_bound:
  pz_cpu_pool_bind(prev);
fail:
  pz_cpu_exec_free(e);
  return st;
}

void pz_cpu_exec_free(pz_cpu_exec *e) {
  if (!e) return;
  if (e->store && e->g)
    for (size_t i = 0; i < (size_t)e->tp * (size_t)e->g->n_tensors; i++) free(e->store[i]);
  if (e->data)
    for (int r = 0; r < e->tp; r++) free(e->data[r]);
  free(e->store);
  free(e->data);
  pz_cpu_pool_free(e->pool);
  pz_graph_free(e->g);
  free(e);
}

void *pz_cpu_exec_data(const pz_cpu_exec *e, int rank, int tensor_id) {
  if (!e || rank < 0 || rank >= e->tp || tensor_id < 0 || tensor_id >= e->g->n_tensors) return NULL;
  return e->data[rank][tensor_id];
}

const pz_device_desc *pz_cpu_exec_device_desc(const pz_cpu_exec *e) { return e ? &e->opts.dev : NULL; }

/* ------------------------------------------------------------ step */

static void poison(pz_cpu_exec *e) {
  const int nt = e->g->n_tensors;
  for (int r = 0; r < e->tp; r++)
    for (int t = 0; t < nt; t++) {
      const pz_tensor *x = &e->g->tensors[t];
      if (x->view_of >= 0 || (x->kind != PZ_T_ACT && x->kind != PZ_T_BUFFER)) continue;
      int64_t n = pz_tensor_span(x);
      void *p = e->store[(size_t)r * nt + t];
      if (x->dtype == PZ_BF16) for (int64_t i = 0; i < n; i++) ((uint16_t *)p)[i] = 0x7fc0;
      else for (int64_t i = 0; i < n; i++) ((uint32_t *)p)[i] = 0x7fc00000u; /* f32 NaN; i32: a huge bogus id */
    }
}

static pz_status put_input(pz_cpu_exec *e, int id, int64_t m, const int32_t *v, const char *what) {
  if (id < 0) return PZ_OK;
  const pz_tensor *t = &e->g->tensors[id];
  if (t->dtype != PZ_I32 || pz_tensor_numel(t) < m)
    return pz_error(PZ_ERR_SHAPE, "cpu exec: %s tensor %s is not i32 with >= %lld elements", what, t->name, (long long)m);
  for (int r = 0; r < e->tp; r++) memcpy(e->data[r][id], v, sizeof(int32_t) * (size_t)m);
  return PZ_OK;
}

pz_status pz_cpu_exec_step(pz_cpu_exec *e, int64_t m, const int32_t *tokens, const int32_t *pos, int32_t *next) {
  if (!e || !tokens || !pos) return pz_error(PZ_ERR_INVALID_ARG, "cpu exec step: NULL argument");
  if (m < 1 || m > e->g->info.m)
    return pz_error(PZ_ERR_INVALID_ARG, "cpu exec step: batch %lld not in 1..%lld", (long long)m, (long long)e->g->info.m);
  for (int64_t i = 0; i < m; i++)
    if (pos[i] < 0) return pz_error(PZ_ERR_INVALID_ARG, "cpu exec step: pos[%lld] = %d < 0", (long long)i, pos[i]);
  if (e->opts.poison) poison(e);
  PZ_CHECK(put_input(e, e->g->in_tokens, m, tokens, "token"));
  PZ_CHECK(put_input(e, e->g->in_pos, m, pos, "position"));
  pz_status st = PZ_OK;
  pz_cpu_pool *prev = pz_cpu_pool_current();
  pz_cpu_pool_bind(e->pool);
  for (int i = 0; i < e->g->n_nodes && st == PZ_OK; i++) {
    const pz_node *n = &e->g->nodes[i];
    pz_cpu_ctx c = {.g = e->g, .opts = &e->opts, .rank = 0, .tp = e->tp, .m = m,
                    .data = e->data[0], .rank_data = e->data};
    if (pz_op_is_collective(n->op)) {
      st = op_table[n->op](&c, n);
    } else {
      for (int r = 0; r < e->tp && st == PZ_OK; r++) {
        c.rank = r;
        c.data = e->data[r];
        st = op_table[n->op](&c, n);
      }
    }
    if (st != PZ_OK) pz_log_propagate(__FILE__, __LINE__, n->name, st);
  }
  pz_cpu_pool_bind(prev);
  if (st != PZ_OK) return st;
  e->last_m = m;
  if (next) {
    if (e->g->out_tokens < 0) return pz_error(PZ_ERR_INVALID_ARG, "cpu exec step: graph has no out_tokens");
    memcpy(next, e->data[0][e->g->out_tokens], sizeof(int32_t) * (size_t)m);
  }
  return PZ_OK;
}

pz_status pz_cpu_exec_logits(const pz_cpu_exec *e, int64_t m, float *out) {
  if (!e || !out) return pz_error(PZ_ERR_INVALID_ARG, "cpu exec logits: NULL argument");
  if (e->g->out_logits < 0) return pz_error(PZ_ERR_INVALID_ARG, "cpu exec logits: graph has no out_logits");
  if (m < 1 || m > e->last_m)
    return pz_error(PZ_ERR_INVALID_ARG, "cpu exec logits: %lld rows, last step had %lld", (long long)m, (long long)e->last_m);
  const pz_tensor *L = &e->g->tensors[e->g->out_logits];
  int64_t vpr = L->ne[1], ld = L->ndim >= 2 ? L->stride[0] : vpr;
  int64_t vocab = e->g->info.vocab_size > 0 ? e->g->info.vocab_size : vpr * e->tp;
  for (int r = 0; r < e->tp; r++) {
    const float *src = e->data[r][e->g->out_logits];
    for (int64_t i = 0; i < m; i++)
      for (int64_t j = 0; j < vpr; j++) {
        int64_t id = (int64_t)r * vpr + j;
        if (id < vocab) out[i * vocab + id] = src[i * ld + j];
      }
  }
  return PZ_OK;
}
