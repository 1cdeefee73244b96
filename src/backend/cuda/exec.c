/* CUDA executor: per-rank arenas on each rank's GPU, device fill identical to the CPU executor,
 * eager node launches or one CUDA graph per (batch size, prezero flag, gate override) captured on
 * every rank's stream, argmax candidates combined on the host in rank order. */
#include "backend/cuda/exec.h"
#include "backend/backend.h" /* pz_backend_timing_token */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "backend/cuda/ar_mp.h"
#include "backend/cuda/comm.h"
#include "backend/cuda/cuda_util.h"
#include "backend/cuda/exec_ops.h"
#include "backend/cuda/fill.h"
#include "backend/cuda/kv_pages_fill.h"
#include "backend/cuda/mlp_gemm.h"
#include "core/fingerprint.h"
#include "core/kv_pages.h"
#include "core/quant_fill.h"
#include "backend/cuda/gate_cuda.h"
#include "backend/cuda/profile.h"
#include "backend/cuda/runtime.h"
#include "backend/cuda/tuner.h"
#include "core/options.h"
#include "core/stats.h"
#include "passes/prezero.h"

#define ALIGN 256
#define MAX_VARIANTS 16
_Static_assert(sizeof(((pz_cuda_ctx *)0)->rank_data) / sizeof(void **) >= PZ_CUDA_MAX_TP, "rank_data holds every rank");
static const int default_sizes[] = {1, 2, 4, 8, 16, 32, 64, 128};

typedef struct graph_slot {
  bool valid;
  int64_t M;
  int prezero;
  int force;                    /* pz_gemm_flavour every AUTO GEMM was forced to (AUTO: none) */
  cudaGraph_t graph[PZ_CUDA_MAX_TP];
  cudaGraphExec_t exec[PZ_CUDA_MAX_TP];
} graph_slot;

/* Per-batch prezero (opts.prezero on an OFF graph): the graph a batch size runs, rewritten by
 * the pass for the consumers that fire there. Variant 0 is the OFF graph itself (e->g, the
 * ranks' own pointers); the others share one extra block per rank for the buffers the pass adds
 * (one step runs at a time, and no buffer carries data from one step to the next). */
typedef struct exec_variant {
  pz_graph *g;                  /* e->g for variant 0 */
  void **data[PZ_CUDA_MAX_TP];  /* NULL for variant 0 */
  pz_prezero_report rep;
} exec_variant;

struct pz_cuda_exec {
  pz_graph *g;                  /* the graph given (the OFF graph in per-batch mode) */
  pz_runtime_opts ro;           /* the options at creation (opts->runtime, else the environment) */
  bool per_batch;               /* opts.prezero on a graph with no prezero op: the pass runs per batch size */
  bool plan_static;             /* per-batch with PREZERO_PLAN_PER_BATCH=0: the static rewrite at every size */
  int on;                       /* per-batch: the graph set steps use (0 OFF, 1 ON); else opts.prezero */
  int n_var;
  exec_variant var[MAX_VARIANTS];
  signed char var_of_m[PZ_CUDA_MAX_M + 1]; /* per-batch ON: variant of each batch size, -1 not built */
  char *extra[PZ_CUDA_MAX_TP];  /* per-batch: device storage of the tensors the pass adds */
  int64_t extra_bytes;
  pz_cuda_exec_opts opts;
  int tp;
  pz_cuda_rank ranks[PZ_CUDA_MAX_TP];
  pz_comm *comm;                /* every rank in this process: peer access between their GPUs */
  struct pz_ar_comm *mp;        /* one rank per process (opts.ar_comm, not owned): ranks lo only */
  int lo, hi;                   /* the ranks this process runs: [0, tp), or [rank, rank + 1) with mp */
  pz_nccl *nccl;                /* PREZERO_AR_ALGO=nccl: the donors' NCCL fallback (ar_nccl.h) */
  pz_device_desc dev;
  bool graphs;
  int n_sizes;
  int sizes[PZ_CUDA_MAX_CAPTURE + 1];
  graph_slot slots[3][PZ_CUDA_MAX_CAPTURE + 1]; /* [OFF / ON / OFF under a forced GEMM flavour][size] */
  int force;                    /* pz_cuda_exec_set_gemm_force (AUTO: none) */
  int64_t max_m, max_ctx;
  int64_t *offset;              /* [n_tensors]: byte offset of each owner tensor in the arena */
  int64_t cand_offset;          /* arena offset of the argmax candidates */
  int64_t rows_offset;          /* arena offset of the step's real row count (pz_cuda_rank.rows) */
  int64_t arena_bytes;
  int64_t last_m;
  int64_t bad_row;  /* the last step's first row with a NaN candidate or a +infinity max, -1 none */
  int bad_nan;      /* that row held a NaN (else its max was +infinity) */
  bool sync_nodes;              /* PREZERO_CUDA_SYNC=1: eager steps wait after every node (debugging) */
};

/* ------------------------------------------------------------------ layout */

/* What the ranks of a one-process-per-rank group exchange at creation (PZ_HX_CREATE): rank 0's
 * gate description is taken by all; the fingerprint and batch must agree on every rank. */
typedef struct create_desc {
  uint64_t graph_fp; /* pz_graph_fingerprint of the graph this rank runs */
  int64_t max_m;
  pz_device_desc dev;
} create_desc;

static int64_t round_up(int64_t x) { return (x + ALIGN - 1) / ALIGN * ALIGN; }
static bool graph_has_prezero(const pz_graph *g);
static int64_t extra_layout(const pz_graph *g, int n_off, int64_t *offset);

/* Arena layout of g: owner tensors in id order, then the argmax candidates, then the step's real row
 * count (one i32: pz_cuda_rank.rows). */
static int64_t layout(const pz_graph *g, int64_t *offset, int64_t *cand_offset, int64_t *rows_offset) {
  int64_t off = 0;
  for (int t = 0; t < g->n_tensors; t++) {
    const pz_tensor *x = &g->tensors[t];
    if (offset) offset[t] = -1;
    if (x->view_of >= 0) continue;
    if (offset) offset[t] = off;
    off += round_up(pz_tensor_span(x) * (int64_t)pz_dtype_size(x->dtype));
  }
  if (cand_offset) *cand_offset = off;
  off += round_up((int64_t)sizeof(pz_argmax_cand) * (g->info.m > 0 ? g->info.m : 1));
  if (rows_offset) *rows_offset = off;
  off += round_up((int64_t)sizeof(int32_t));
  return off;
}

int64_t pz_cuda_exec_bytes(const pz_graph *g) { return g ? layout(g, NULL, NULL, NULL) : 0; }

int64_t pz_cuda_exec_bytes_per_batch(const pz_graph *g) {
  if (!g) return 0;
  int64_t b = layout(g, NULL, NULL, NULL);
  pz_graph *gs = NULL;
  if (graph_has_prezero(g) || pz_graph_clone(g, &gs) != PZ_OK) return b;
  if (pz_pass_prezero_batch(gs, NULL, NULL, NULL, NULL) == PZ_OK) b += extra_layout(gs, g->n_tensors, NULL);
  pz_graph_free(gs);
  return b;
}

/* ------------------------------------------------------------------ options */

static int parse_sizes(const char *s, int *out, int cap) {
  int n = 0;
  while (s && *s && n < cap) {
    char *end;
    long v = strtol(s, &end, 10);
    if (end == s) break;
    if (v > 0) out[n++] = (int)v;
    s = *end == ',' ? end + 1 : end;
  }
  return n;
}

static int cmp_int(const void *a, const void *b) { return *(const int *)a - *(const int *)b; }

/* Capture list: the requested sizes <= m, ascending and unique, plus m itself. */
static void set_sizes(pz_cuda_exec *e) {
  int req[PZ_CUDA_MAX_CAPTURE], n = 0;
  if (e->opts.n_capture > 0) {
    n = e->opts.n_capture > PZ_CUDA_MAX_CAPTURE ? PZ_CUDA_MAX_CAPTURE : e->opts.n_capture;
    memcpy(req, e->opts.capture, sizeof(int) * (size_t)n);
  } else {
    n = parse_sizes(e->ro.cuda_graph_sizes, req, PZ_CUDA_MAX_CAPTURE);
    if (n == 0) {
      n = (int)(sizeof default_sizes / sizeof default_sizes[0]);
      memcpy(req, default_sizes, sizeof default_sizes);
    }
  }
  qsort(req, (size_t)n, sizeof(int), cmp_int);
  e->n_sizes = 0;
  for (int i = 0; i < n; i++)
    if (req[i] < e->max_m && (e->n_sizes == 0 || e->sizes[e->n_sizes - 1] != req[i])) e->sizes[e->n_sizes++] = req[i];
  e->sizes[e->n_sizes++] = (int)e->max_m;
}

static bool graphs_wanted(int opt, const pz_runtime_opts *ro) {
  if (opt == 0) return false;
  if (opt == 1) return true;
  return ro->cuda_graph != 0;
}

/* ------------------------------------------------------------------ create / free */

static pz_status check_ops(const pz_graph *g) {
  for (int i = 0; i < g->n_nodes; i++) {
    const pz_node *n = &g->nodes[i];
    if (!pz_cuda_op_launcher(n->op))
      return pz_error(PZ_ERR_UNSUPPORTED, "CUDA executor: op %s (node %s) has no CUDA launcher: %s; use --device cpu",
                      pz_op_name(n->op), n->name, pz_cuda_op_gap(n->op));
  }
  return PZ_OK;
}

static pz_status check_memory(pz_cuda_exec *e, int64_t need) {
  int devs[PZ_CUDA_MAX_TP];
  int64_t fr[PZ_CUDA_MAX_TP], tot[PZ_CUDA_MAX_TP];
  for (int r = e->lo; r < e->hi; r++) devs[r] = e->ranks[r].device;
  PZ_CHECK(pz_cuda_mem_info(e->hi - e->lo, devs + e->lo, fr + e->lo, tot + e->lo));
  for (int r = e->lo; r < e->hi; r++) {
    int64_t reserve = e->opts.reserve_bytes > 0 ? e->opts.reserve_bytes : pz_cuda_reserve_for(tot[r], e->ro.cuda_reserve_mb);
    if (need + reserve > fr[r])
      return pz_error(PZ_ERR_OOM,
                      "CUDA executor: rank %d needs %.2f GiB on GPU %d for the model's tensors, but only %.2f GiB are free "
                      "(%.2f GiB kept in reserve, PREZERO_CUDA_RESERVE_MB); use fewer --layers, a smaller batch or context, or a higher TP",
                      r, need / 1073741824.0, devs[r], fr[r] / 1073741824.0, reserve / 1073741824.0);
  }
  return PZ_OK;
}

/* ------------------------------------------------------------------ per-batch prezero plan */

static bool graph_has_prezero(const pz_graph *g) {
  for (int i = 0; i < g->n_nodes; i++)
    if (g->nodes[i].op == PZ_OP_AR_RMSNORM_MAYBE_PREZERO || g->nodes[i].op == PZ_OP_MM_MAYBE_PREZERO) return true;
  return false;
}

/* The plan's question, answered by the GEMM the rank-0 handle picks at m (every rank has the
 * same device and table, so they agree): zero_init = false resolves to a split-K kernel
 * exactly when the baseline's kernel zeroes its output (gemm.h, pz_gemm_choose). */
static bool gemm_fires(void *gemm, const pz_prezero_query *q, char *why, size_t why_len) {
  if (q->n % 64 || q->k % 64) { /* outside the split-K family: pz_cuda_gemm_any's kernel, which never needs a zeroed C */
    snprintf(why, why_len, "any-shape kernel (n=%lld, k=%lld): no zeroing to skip", (long long)q->n, (long long)q->k);
    return false;
  }
  pz_gemm_config cfg;
  bool split = false;
  if (pz_gemm_choose((pz_gemm_ctx *)gemm, (int)q->m, (int)q->n, (int)q->k, false, &cfg, &split) != PZ_OK) {
    snprintf(why, why_len, "no GEMM choice: %s", pz_last_error());
    return false;
  }
  char k[80];
  pz_gemm_config_describe(&cfg, k, sizeof k);
  snprintf(why, why_len, "%s%s", k, split ? "" : ": no zeroing to skip");
  return split;
}

/* The shared experts' gate | up slot of a quantised MoE (n = 2 inter, k = H): they run as GEMMs at m
 * (mlp_gemm.h pz_cuda_mlp_uses_gemm), as one GEMM of n rows or (PREZERO_MLP_ONE_GU=0) two of n / 2, and
 * that GEMM zeroes its output. One GEMM assumes the executor's arena keeps up_proj after gate_proj (it
 * does: pz_cuda_mlp_one_gu); were it two, zero_init = false would still be right, only the fill might be
 * spent on a GEMM that does not zero. */
static bool shared_gu_fires(void *gemm, const pz_prezero_query *q, char *why, size_t why_len) {
  const int64_t inter = q->n / 2, H = q->k;
  if (!pz_cuda_mlp_uses_gemm((const pz_gemm_ctx *)gemm, PZ_MLP_SHARED, (int)q->m, H, inter)) {
    snprintf(why, why_len, "shared experts fused at m=%lld (mlp_gemm.h): no GEMM", (long long)q->m);
    return false;
  }
  const pz_runtime_opts *ro = pz_gemm_ctx_opts((const pz_gemm_ctx *)gemm);
  pz_prezero_query one = *q;
  if (ro && ro->mlp_one_gu == 0) one.n = inter; /* PREZERO_MLP_ONE_GU=0: gate and up as two GEMMs */
  return gemm_fires(gemm, &one, why, why_len);
}

bool pz_cuda_gemm_fires(void *gemm, const pz_graph *g, const pz_prezero_query *q, char *why, size_t why_len) {
  (void)g;
  if (q->kind == PZ_PREZERO_SLOT_SHARED_GU) return shared_gu_fires(gemm, q, why, why_len);
  return gemm_fires(gemm, q, why, why_len);
}

static bool cuda_fires(void *user, const pz_graph *g, const pz_prezero_query *q, char *why, size_t why_len) {
  const pz_cuda_exec *e = (const pz_cuda_exec *)user;
  return pz_cuda_gemm_fires(e->ranks[e->lo].gemm, g, q, why, why_len);
}

/* Layout of the tensors g adds beyond the first n_off (owners only) from offset 0; returns bytes. */
static int64_t extra_layout(const pz_graph *g, int n_off, int64_t *offset) {
  int64_t off = 0;
  for (int t = n_off; t < g->n_tensors; t++) {
    const pz_tensor *x = &g->tensors[t];
    if (offset) offset[t - n_off] = -1;
    if (x->view_of >= 0) continue;
    if (offset) offset[t - n_off] = off;
    off += round_up(pz_tensor_span(x) * (int64_t)pz_dtype_size(x->dtype));
  }
  return off;
}

/* Runs the pass for batch m on a copy of the OFF graph (b NULL: the static rewrite). */
static pz_status plan_graph(pz_cuda_exec *e, int64_t m, bool all, pz_graph **gv, pz_prezero_report *rep) {
  PZ_CHECK(pz_graph_clone(e->g, gv));
  pz_prezero_batch b = {.m = m, .fires = cuda_fires, .user = e, .tp = e->tp, .dev = &e->dev, .attn_slots = e->ro.attn_slots};
  pz_prezero_batch bs = {.m = 0, .attn_slots = e->ro.attn_slots}; /* the static rewrite */
  pz_status st = pz_pass_prezero_batch(*gv, all ? &bs : &b, NULL, NULL, rep);
  if (st == PZ_OK) st = pz_graph_verify(*gv);
  if (st != PZ_OK) {
    pz_graph_free(*gv);
    *gv = NULL;
    pz_prezero_report_free(rep);
  }
  return st;
}

static void free_variant(exec_variant *v, const pz_cuda_exec *e) {
  if (v->g && v->g != e->g) pz_graph_free(v->g);
  for (int r = 0; r < PZ_CUDA_MAX_TP; r++) free(v->data[r]);
  pz_prezero_report_free(&v->rep);
  memset(v, 0, sizeof *v);
}

/* The variant batch m runs in the ON set, built on first use (host work only, so it may run
 * while a capture is open). */
static pz_status variant_for(pz_cuda_exec *e, int64_t m, exec_variant **out) {
  if (m < 1 || m > PZ_CUDA_MAX_M) return pz_error(PZ_ERR_INVALID_ARG, "CUDA executor: batch %lld outside 1..%d", (long long)m, PZ_CUDA_MAX_M);
  if (e->var_of_m[m] >= 0) { *out = &e->var[e->var_of_m[m]]; return PZ_OK; }
  pz_graph *gv = NULL;
  pz_prezero_report rep;
  PZ_CHECK(plan_graph(e, m, e->plan_static, &gv, &rep));
  int idx = -1;
  if (pz_prezero_report_fired(&rep) == 0) idx = 0;
  for (int i = 1; i < e->n_var && idx < 0; i++)
    if (pz_prezero_report_same(&e->var[i].rep, &rep)) idx = i;
  if (idx >= 0) {
    pz_graph_free(gv);
    pz_prezero_report_free(&rep);
    e->var_of_m[m] = (signed char)idx;
    *out = &e->var[idx];
    return PZ_OK;
  }
  pz_status st = PZ_OK;
  const int n_off = e->g->n_tensors;
  int64_t *xoff = calloc((size_t)(gv->n_tensors - n_off + 1), sizeof(int64_t));
  exec_variant *v = &e->var[e->n_var];
  if (e->n_var >= MAX_VARIANTS) st = pz_error(PZ_ERR_INTERNAL, "CUDA executor: more than %d prezero plans", MAX_VARIANTS);
  else if (!xoff) st = pz_error(PZ_ERR_OOM, "CUDA executor: host allocation");
  else if (extra_layout(gv, n_off, xoff) > e->extra_bytes)
    st = pz_error(PZ_ERR_INTERNAL, "CUDA executor: the prezero plan of batch %lld needs more buffer bytes than the static rewrite",
                  (long long)m);
  if (st == PZ_OK) st = check_ops(gv);
  if (st == PZ_OK) {
    memset(v, 0, sizeof *v);
    v->g = gv;
    v->rep = rep;
    for (int r = e->lo; r < e->hi && st == PZ_OK; r++) {
      v->data[r] = calloc((size_t)gv->n_tensors, sizeof(void *));
      if (!v->data[r]) { st = pz_error(PZ_ERR_OOM, "CUDA executor: host allocation"); break; }
      for (int t = 0; t < gv->n_tensors; t++) {
        const pz_tensor *x = &gv->tensors[t];
        int own = pz_storage_of(gv, t);
        char *base = own < n_off ? e->ranks[r].arena + e->offset[own] : e->extra[r] + xoff[own - n_off];
        size_t off = x->view_of >= 0 ? (size_t)x->view_offset * pz_dtype_size(x->dtype) : 0;
        v->data[r][t] = base + off;
      }
    }
    if (st == PZ_OK) {
      e->var_of_m[m] = (signed char)e->n_var++;
      *out = v;
    } else {
      free_variant(v, e);
      gv = NULL;
    }
  }
  free(xoff);
  if (st != PZ_OK && gv) {
    pz_graph_free(gv);
    pz_prezero_report_free(&rep);
  }
  return st;
}

/* The graph and pointers a step of batch m runs. */
static pz_status current(pz_cuda_exec *e, int64_t m, const pz_graph **g, void **data[PZ_CUDA_MAX_TP]) {
  *g = e->g;
  for (int r = e->lo; r < e->hi; r++) data[r] = e->ranks[r].data;
  if (!e->per_batch || !e->on) return PZ_OK;
  exec_variant *v;
  PZ_CHECK(variant_for(e, m, &v));
  if (v->data[e->lo]) { /* variant 0 (nothing fires) runs the OFF graph with the ranks' own pointers */
    *g = v->g;
    for (int r = e->lo; r < e->hi; r++) data[r] = v->data[r];
  }
  return PZ_OK;
}

bool pz_cuda_exec_per_batch(const pz_cuda_exec *e) { return e && e->per_batch; }

void pz_cuda_exec_gemm_table(const pz_cuda_exec *e, char *buf, size_t len) {
  if (!buf || !len) return;
  buf[0] = 0;
  if (!e || !e->ranks[e->lo].gemm) return;
  const pz_tuner_table *t = pz_gemm_ctx_table(e->ranks[e->lo].gemm);
  if (!strcmp(t->source, "cache")) snprintf(buf, len, "cache %s", t->path);
  else snprintf(buf, len, "%s", t->source);
}

pz_status pz_cuda_exec_set_gemm_force(pz_cuda_exec *e, int flavour) {
  if (!e || flavour < 0 || flavour >= PZ_GEMM_FLAVOUR_COUNT)
    return pz_error(PZ_ERR_INVALID_ARG, "CUDA executor: NULL or GEMM flavour %d outside 0..%d", flavour, PZ_GEMM_FLAVOUR_COUNT - 1);
  for (int r = e->lo; r < e->hi; r++) PZ_CHECK(pz_gemm_ctx_set_force(e->ranks[r].gemm, (pz_gemm_flavour)flavour));
  e->force = flavour;
  return PZ_OK;
}

pz_status pz_cuda_exec_set_prezero(pz_cuda_exec *e, int on) {
  if (!e) return pz_error(PZ_ERR_INVALID_ARG, "CUDA executor: NULL");
  on = on != 0;
  if (!e->per_batch && on != e->on)
    return pz_error(PZ_ERR_INVALID_ARG, "CUDA executor: prezero can be switched only on an executor made from the OFF graph "
                    "with opts.prezero = 1 (this one runs a graph already rewritten, or none)");
  e->on = on;
  return PZ_OK;
}

pz_status pz_cuda_exec_plan(pz_cuda_exec *e, int64_t m, pz_prezero_report *rep, const pz_graph **g) {
  if (!e || !rep) return pz_error(PZ_ERR_INVALID_ARG, "CUDA executor plan: NULL argument");
  memset(rep, 0, sizeof *rep);
  if (m < 1 || m > e->max_m) return pz_error(PZ_ERR_INVALID_ARG, "CUDA executor plan: batch %lld not in 1..%lld", (long long)m, (long long)e->max_m);
  pz_graph *gv = NULL;
  PZ_CHECK(plan_graph(e, m, e->plan_static, &gv, rep));
  pz_graph_free(gv);
  if (g) {
    *g = e->g;
    if (e->per_batch) {
      exec_variant *v;
      PZ_CHECK(variant_for(e, m, &v));
      *g = v->g;
    }
  }
  return PZ_OK;
}

static int64_t find_max_ctx(const pz_graph *g) {
  for (int i = 0; i < g->n_nodes; i++)
    if (g->nodes[i].op == PZ_OP_MLA_ATTN) return g->nodes[i].p.mla.max_ctx;
    else if (g->nodes[i].op == PZ_OP_GQA_ATTN) return g->nodes[i].p.gqa.max_ctx;
  return 0;
}

/* ------------------------------------------------------------------ checkpoint weights */

/* Staging chunk of the weight hook: the option, else PREZERO_CUDA_LOAD_CHUNK_KB, else 64 MiB;
 * at least the longest weight row. */
static size_t load_chunk(const pz_cuda_exec *e) {
  int64_t c = e->opts.load_chunk_bytes;
  if (c <= 0 && e->ro.cuda_load_chunk_kb > 0) c = e->ro.cuda_load_chunk_kb * 1024;
  if (c <= 0) c = (int64_t)64 << 20;
  for (int t = 0; t < e->g->n_tensors; t++) {
    const pz_tensor *x = &e->g->tensors[t];
    if (x->kind != PZ_T_WEIGHT || x->view_of >= 0) continue;
    int64_t row = x->ne[x->ndim - 1] * (int64_t)pz_dtype_size(x->dtype);
    if (row > c) c = row;
  }
  return (size_t)c;
}

/* Rank r's WEIGHT tensors from the hook: rows filled on the host into one of two staging
 * buffers while the other one's copy runs on the rank's stream (an event per buffer says when
 * it may be refilled). Pageable buffers when pinning fails (cudaMemcpyAsync then returns once
 * the source is staged, so reuse stays safe). */
static pz_status load_weights(pz_cuda_exec *e, int r) {
  pz_cuda_rank *R = &e->ranks[r];
  const size_t cap = load_chunk(e);
  char *buf[2] = {NULL, NULL};
  bool pinned[2] = {false, false}, used[2] = {false, false};
  cudaEvent_t ev[2] = {NULL, NULL};
  pz_status st = PZ_OK;
  for (int b = 0; b < 2; b++) {
    /* A failed pinned allocation is not an error: pageable memory serves. */
    if (PZ_CUDA_PROBE(cudaHostAlloc((void **)&buf[b], cap, cudaHostAllocPortable))) pinned[b] = true;
    else {
      buf[b] = malloc(cap);
      if (!buf[b]) { st = pz_error(PZ_ERR_OOM, "CUDA executor: %zu-byte host staging buffer for the weights", cap); goto done; }
    }
    cudaEvent_t evb = NULL; /* stored once created, so a failed call leaves ev[b] NULL */
    PZ_CUDA_CHECK_MSG_GOTO(cudaEventCreateWithFlags(&evb, cudaEventDisableTiming), st, done,
                           "CUDA executor: event creation on GPU %d", R->device);
    ev[b] = evb;
  }
  int slot = 0;
  for (int t = 0; t < e->g->n_tensors; t++) {
    const pz_tensor *x = &e->g->tensors[t];
    if (x->kind != PZ_T_WEIGHT || x->view_of >= 0) continue;
    if (!pz_tensor_contiguous(x)) { st = pz_error(PZ_ERR_SHAPE, "CUDA executor: weight %s must be contiguous", x->name); goto done; }
    const int64_t w = x->ne[x->ndim - 1], rowb = w * (int64_t)pz_dtype_size(x->dtype);
    if (rowb <= 0) continue;
    const int64_t rows = pz_tensor_numel(x) / w, per = (int64_t)cap / rowb;
    for (int64_t r0 = 0; r0 < rows; r0 += per) {
      const int64_t n = rows - r0 < per ? rows - r0 : per;
      if (used[slot])
        PZ_CUDA_CHECK_MSG_GOTO(cudaEventSynchronize(ev[slot]), st, done, "CUDA executor: copying weights to GPU %d", R->device);
      PZ_CHECK_GOTO(e->opts.load_weight(e->opts.load_user, x, r, r0, n, buf[slot]), st, done);
      PZ_CUDA_CHECK_MSG_GOTO(cudaMemcpyAsync((char *)R->data[t] + r0 * rowb, buf[slot], (size_t)(n * rowb),
                                             cudaMemcpyHostToDevice, R->stream),
                             st, done, "CUDA executor: copying weight %s to GPU %d", x->name, R->device);
      PZ_CUDA_CHECK_MSG_GOTO(cudaEventRecord(ev[slot], R->stream), st, done, "CUDA executor: copying weight %s to GPU %d",
                             x->name, R->device);
      used[slot] = true;
      slot ^= 1;
    }
  }
done:
  /* The buffers may still be read by a copy in flight. */
  PZ_CUDA_KEEP_MSG(cudaStreamSynchronize(R->stream), st, "CUDA executor: copying weights to GPU %d", R->device);
  for (int b = 0; b < 2; b++) {
    if (ev[b]) PZ_CUDA_IGNORE(cudaEventDestroy(ev[b])); /* cleanup: the status above is what counts */
    if (pinned[b]) PZ_CUDA_IGNORE(cudaFreeHost(buf[b]));
    else free(buf[b]);
  }
  return st;
}

pz_status pz_cuda_exec_create(const pz_graph *g, const pz_cuda_exec_opts *opts, pz_cuda_exec **out) {
  if (!g || !out) return pz_error(PZ_ERR_INVALID_ARG, "CUDA executor: NULL graph or out");
  *out = NULL;
  if (g->info.tp < 1 || g->info.tp > PZ_CUDA_MAX_TP)
    return pz_error(PZ_ERR_INVALID_ARG, "CUDA executor: TP %d is outside 1..%d", g->info.tp, PZ_CUDA_MAX_TP);
  PZ_CHECK(pz_graph_verify(g));
  PZ_CHECK(check_ops(g));
  const int tp = g->info.tp;
  pz_cuda_exec_opts def = PZ_CUDA_EXEC_OPTS_INIT;
  const pz_cuda_exec_opts *o = opts ? opts : &def;
  int ndev = pz_cuda_device_count();
  if (ndev == 0) return pz_error(PZ_ERR_NO_DEVICE, "CUDA executor: no GPU is visible; use --device cpu");
  int devs[PZ_CUDA_MAX_TP];
  int lo = 0, hi = tp; /* the ranks this process runs */
  if (o->ar_comm) {
    /* one rank per process: the communicator says which, and on which GPU */
    if (pz_ar_comm_world(o->ar_comm) != tp)
      return pz_error(PZ_ERR_INVALID_ARG, "CUDA executor: the communicator has %d ranks but the graph is TP %d",
                      pz_ar_comm_world(o->ar_comm), tp);
    lo = pz_ar_comm_rank(o->ar_comm);
    hi = lo + 1;
    for (int r = 0; r < tp; r++) devs[r] = -1;
    devs[lo] = pz_ar_comm_device(o->ar_comm);
  } else {
    for (int r = 0; r < tp; r++) devs[r] = o->n_devices > 0 ? o->devices[r] : r;
    if (o->n_devices > 0 && o->n_devices < tp)
      return pz_error(PZ_ERR_INVALID_ARG, "CUDA executor: %d devices given for TP %d", o->n_devices, tp);
  }
  for (int r = lo; r < hi; r++)
    if (devs[r] < 0 || devs[r] >= ndev)
      return pz_error(PZ_ERR_NO_DEVICE, "CUDA executor: TP %d needs %d GPUs (rank %d on GPU %d) but %d %s visible; "
                      "use a smaller --tp or a machine with more GPUs", tp, tp, r, devs[r], ndev, ndev == 1 ? "is" : "are");

  pz_cuda_exec *e = calloc(1, sizeof *e);
  if (!e) return pz_error(PZ_ERR_OOM, "CUDA executor: host allocation");
  pz_status st = PZ_OK;
  e->bad_row = -1;
  e->opts = *o;
  e->tp = tp;
  e->lo = lo;
  e->hi = hi;
  e->mp = o->ar_comm;
  for (int r = lo; r < hi; r++) e->ranks[r].device = devs[r];
  PZ_CHECK_GOTO(pz_graph_clone(g, &e->g), st, fail);
  e->max_m = g->info.m;
  e->max_ctx = find_max_ctx(g);
  PZ_CHECK_GOTO(pz_runtime_opts_take(&e->ro, o->runtime, "CUDA executor", NULL), st, fail);
  e->graphs = graphs_wanted(o->graphs, &e->ro);
  e->sync_nodes = e->ro.cuda_sync != 0;
  set_sizes(e);
  const int nt = e->g->n_tensors;
  e->offset = calloc((size_t)(nt ? nt : 1), sizeof(int64_t));
  if (!e->offset) { st = pz_error(PZ_ERR_OOM, "CUDA executor: host allocation"); goto fail; }
  e->arena_bytes = layout(e->g, e->offset, &e->cand_offset, &e->rows_offset);
  e->on = o->prezero != 0;
  e->per_batch = o->prezero && !graph_has_prezero(e->g);
  e->plan_static = e->per_batch && !e->ro.plan_per_batch;
  memset(e->var_of_m, -1, sizeof e->var_of_m);
  e->var[0].g = e->g;
  e->n_var = 1;
  if (e->per_batch) {
    /* The buffers of any plan fit in those of the static rewrite (a plan's slices are a subset). */
    pz_graph *gs = NULL;
    pz_prezero_report rs;
    PZ_CHECK_GOTO(plan_graph(e, e->max_m, true, &gs, &rs), st, fail);
    e->extra_bytes = extra_layout(gs, e->g->n_tensors, NULL);
    pz_graph_free(gs);
    pz_prezero_report_free(&rs);
  }
  PZ_CHECK_GOTO(check_memory(e, e->arena_bytes + e->extra_bytes), st, fail);

  if (e->mp) {
    /* One rank per process: the all-reduce goes through the caller's communicator (CUDA IPC). */
    if (strcmp(e->ro.ar_algo, "nccl") == 0) {
      st = pz_error(PZ_ERR_INVALID_ARG, "CUDA executor: PREZERO_AR_ALGO=nccl is not available with one process per "
                    "rank; unset it (the fused all-reduce runs through the ranks' shared buffers)");
      goto fail;
    }
    /* Every rank must take the same gate decisions and all-reduce launch shape: rank 0 calibrates
     * (unless a description is given) and every rank takes rank 0's. */
    /* The same exchange checks that every rank built the same graph (the same config, layers and
     * PREZERO_* pass options): a rank that did not would make other collective calls and hang
     * its peers until their timeout. */
    create_desc mine;
    memset(&mine, 0, sizeof mine);
    mine.dev = o->dev;
    mine.max_m = e->max_m;
    PZ_CHECK_GOTO(pz_graph_fingerprint(e->g, &mine.graph_fp), st, fail);
    if (lo == 0 && o->dev.num_sms <= 0) PZ_CHECK_GOTO(pz_gate_calibrate_cuda(devs[lo], e->ro.gate_calibrate, &mine.dev), st, fail);
    /* rank 0's overrides (PREZERO_FORCE_GATE, PREZERO_AR_PROTO / _CLUSTER / _CTAS_PER_ROW) too:
     * a launcher that gives each rank its own environment cannot split the protocol */
    if (lo == 0) pz_device_desc_apply_opts(&mine.dev, &e->ro);
    create_desc *all = calloc((size_t)tp, sizeof *all);
    if (!all) { st = pz_error(PZ_ERR_OOM, "CUDA executor: host allocation"); goto fail; }
    st = pz_ar_comm_allgather_host(e->mp, PZ_HX_CREATE, &mine, sizeof mine, all);
    for (int q = 1; q < tp && st == PZ_OK; q++)
      if (all[q].graph_fp != all[0].graph_fp || all[q].max_m != all[0].max_m)
        st = pz_error(PZ_ERR_INVALID_ARG, "CUDA executor: rank %d built another decode graph than rank 0 (fingerprint "
                      "%016llx, max batch %lld, against %016llx, %lld): every rank must run the same config, layers, "
                      "batch and PREZERO_* pass options (compare `prezero graph` on each)", q,
                      (unsigned long long)all[q].graph_fp, (long long)all[q].max_m,
                      (unsigned long long)all[0].graph_fp, (long long)all[0].max_m);
    if (st == PZ_OK) e->dev = all[0].dev;
    free(all);
    if (st != PZ_OK) goto fail;
  } else {
    /* Communicator first: it proves peer access between every pair (PZ_ERR_NO_P2P otherwise). */
    pz_comm_config cc = PZ_COMM_CONFIG_INIT;
    cc.tp = tp;
    for (int r = 0; r < tp; r++) cc.devices[r] = devs[r];
    cc.max_m = e->max_m;
    cc.max_H = (e->g->info.hidden + 7) / 8 * 8;
    if (e->ro.ar_timeout_us >= 0) cc.timeout_us = e->ro.ar_timeout_us;
    PZ_CHECK_GOTO(pz_comm_create(&cc, &e->comm), st, fail);
    if (strcmp(e->ro.ar_algo, "nccl") == 0) PZ_CHECK_GOTO(pz_nccl_create(e->comm, e->ro.nccl_lib, &e->nccl), st, fail);
    if (o->dev.num_sms > 0) e->dev = o->dev;
    else PZ_CHECK_GOTO(pz_gate_calibrate_cuda(devs[0], e->ro.gate_calibrate, &e->dev), st, fail);
    pz_device_desc_apply_opts(&e->dev, &e->ro); /* PREZERO_FORCE_GATE, PREZERO_AR_PROTO / _CLUSTER / _CTAS_PER_ROW */
  }

  for (int r = lo; r < hi; r++) {
    pz_cuda_rank *R = &e->ranks[r];
    PZ_CUDA_CHECK_MSG_GOTO(cudaSetDevice(R->device), st, fail, "CUDA executor: cudaSetDevice(%d)", R->device);
    /* Each handle is created into a local and stored only once it exists, so a failed call never
     * leaves a stale value for pz_cuda_exec_free (the fields start NULL: calloc). */
    cudaStream_t stream = NULL;
    PZ_CUDA_CHECK_MSG_GOTO(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), st, fail,
                           "CUDA executor: stream creation on GPU %d", R->device);
    R->stream = stream;
    PZ_CHECK_GOTO(pz_gemm_ctx_create_opts(&e->ro, &R->gemm), st, fail);
    PZ_CHECK_GOTO(pz_cuda_ops_prepare(e->g, R), st, fail);
    if (e->nccl) {
      void *ar_tmp = NULL;
      PZ_CUDA_CHECK_MSG_GOTO(cudaMalloc(&ar_tmp, sizeof(float) * (size_t)(e->max_m * e->g->info.hidden)), st, fail,
                             "CUDA executor: NCCL scratch on GPU %d", R->device);
      R->ar_tmp = ar_tmp;
    }
    void *arena = NULL;
    PZ_CUDA_CHECK_MSG_GOTO(cudaMalloc(&arena, (size_t)e->arena_bytes), st, fail,
                           "CUDA executor: cudaMalloc of %.2f GiB on GPU %d (rank %d) failed; use fewer --layers",
                           e->arena_bytes / 1073741824.0, R->device, r);
    R->arena = arena;
    R->arena_bytes = (size_t)e->arena_bytes;
    if (e->extra_bytes > 0) {
      void *extra = NULL;
      PZ_CUDA_CHECK_MSG_GOTO(cudaMalloc(&extra, (size_t)e->extra_bytes), st, fail,
                             "CUDA executor: %.2f MiB of prezero buffers on GPU %d", e->extra_bytes / 1048576.0, R->device);
      e->extra[r] = extra;
      PZ_CUDA_CHECK_MSG_GOTO(cudaMemsetAsync(e->extra[r], 0, (size_t)e->extra_bytes, R->stream), st, fail,
                             "CUDA executor: %.2f MiB of prezero buffers on GPU %d", e->extra_bytes / 1048576.0, R->device);
    }
    void *cand_host = NULL, *in_host = NULL;
    PZ_CUDA_CHECK_MSG_GOTO(cudaMallocHost(&cand_host, sizeof(pz_argmax_cand) * (size_t)e->max_m), st, fail,
                           "CUDA executor: pinned host allocation");
    R->cand_host = cand_host;
    PZ_CUDA_CHECK_MSG_GOTO(cudaMallocHost(&in_host, sizeof(int32_t) * (2 * (size_t)e->max_m + 1)), st, fail,
                           "CUDA executor: pinned host allocation");
    R->in_host = in_host;
    R->data = calloc((size_t)(nt ? nt : 1), sizeof(void *));
    if (!R->data) { st = pz_error(PZ_ERR_OOM, "CUDA executor: host allocation"); goto fail; }
    for (int t = 0; t < nt; t++) {
      const pz_tensor *x = &e->g->tensors[t];
      int own = pz_storage_of(e->g, t);
      size_t off = x->view_of >= 0 ? (size_t)x->view_offset * pz_dtype_size(x->dtype) : 0;
      R->data[t] = R->arena + e->offset[own] + off;
    }
    R->cand = (pz_argmax_cand *)(R->arena + e->cand_offset);
    R->rows = (int32_t *)(R->arena + e->rows_offset);
    PZ_CUDA_CHECK_MSG_GOTO(cudaMemsetAsync(R->arena, 0, R->arena_bytes, R->stream), st, fail,
                           "CUDA executor: arena memset on GPU %d", R->device);
    for (int t = 0; t < nt; t++) {
      const pz_tensor *x = &e->g->tensors[t];
      if (x->view_of >= 0 || !pz_fill_wanted(x) || (o->load_weight && x->kind == PZ_T_WEIGHT)) continue;
      if (x->kind == PZ_T_STATE && pz_kv_paged_node(e->g, t)) continue; /* paged MLA cache: pz_cuda_fill_paged */
      pz_qfill qf; /* quantised experts without a checkpoint: quant_synth.h's bits, made on the GPU */
      PZ_CHECK_GOTO(pz_qfill_plan(e->g, x, o->seed, &qf), st, fail);
      if (qf.kind != PZ_QFILL_NONE) PZ_CHECK_GOTO(pz_fill_quant_launch(&qf, r, R->data[t], R->stream), st, fail);
      else PZ_CHECK_GOTO(pz_fill_tensor_launch(x, r, tp, o->seed, R->data[t], R->stream), st, fail);
    }
    /* identity block tables, then the seeded pages through them (core/kv_pages.h, as the CPU) */
    PZ_CHECK_GOTO(pz_cuda_fill_paged(e->g, R->data, o->seed, R->stream), st, fail);
    if (o->load_weight) PZ_CHECK_GOTO(load_weights(e, r), st, fail);
    /* INT4 experts into the W4A16 kernel's tiled layout (PREZERO_MOE_W4_TILED=0 keeps them as stored) */
    if (e->ro.moe_w4_tiled) PZ_CHECK_GOTO(pz_cuda_tile_w4_experts(e->g, R), st, fail);
  }
  for (int r = lo; r < hi; r++) {
    PZ_CUDA_CHECK_MSG_GOTO(cudaSetDevice(e->ranks[r].device), st, fail, "CUDA executor: cudaSetDevice(%d)",
                           e->ranks[r].device);
    PZ_CUDA_CHECK_MSG_GOTO(cudaStreamSynchronize(e->ranks[r].stream), st, fail, "CUDA executor: fill on GPU %d failed",
                           e->ranks[r].device);
  }
  *out = e;
  return PZ_OK;
fail:
  if (o->ar_comm) pz_ar_comm_abort(o->ar_comm); /* the peers wait in a collective this rank will not reach */
  pz_cuda_exec_free(e);
  return st;
}

/* Cleanup (no status to return): failures of these calls are ignored on purpose. */
static void drop_slot(pz_cuda_exec *e, graph_slot *s) {
  for (int r = e->lo; r < e->hi; r++) {
    PZ_CUDA_IGNORE(cudaSetDevice(e->ranks[r].device));
    if (s->exec[r]) PZ_CUDA_IGNORE(cudaGraphExecDestroy(s->exec[r]));
    if (s->graph[r]) PZ_CUDA_IGNORE(cudaGraphDestroy(s->graph[r]));
  }
  memset(s, 0, sizeof *s);
}

/* A free cannot fail: its CUDA calls' results are ignored on purpose, and the last-error state
 * they leave is cleared at the end. */
void pz_cuda_exec_free(pz_cuda_exec *e) {
  if (!e) return;
  for (int r = e->lo; r < e->hi; r++)
    if (e->ranks[r].stream) {
      PZ_CUDA_IGNORE(cudaSetDevice(e->ranks[r].device));
      PZ_CUDA_IGNORE(cudaStreamSynchronize(e->ranks[r].stream));
    }
  for (int k = 0; k < 3; k++)
    for (int i = 0; i <= PZ_CUDA_MAX_CAPTURE; i++)
      if (e->slots[k][i].valid || e->slots[k][i].exec[e->lo]) drop_slot(e, &e->slots[k][i]);
  for (int i = 1; i < e->n_var; i++) free_variant(&e->var[i], e);
  for (int r = e->lo; r < e->hi; r++) {
    pz_cuda_rank *R = &e->ranks[r];
    PZ_CUDA_IGNORE(cudaSetDevice(R->device));
    pz_cuda_ops_release(e->g, R);
    pz_gemm_ctx_destroy(R->gemm);
    if (R->stream) PZ_CUDA_IGNORE(cudaStreamDestroy(R->stream));
    PZ_CUDA_IGNORE(cudaFree(R->arena));
    PZ_CUDA_IGNORE(cudaFree(e->extra[r]));
    if (R->cand_host) PZ_CUDA_IGNORE(cudaFreeHost(R->cand_host));
    if (R->in_host) PZ_CUDA_IGNORE(cudaFreeHost(R->in_host));
    free(R->data);
    free(R->w4_tiled);
  }
  pz_nccl_destroy(e->nccl);
  pz_comm_destroy(e->comm);
  pz_graph_free(e->g);
  free(e->offset);
  (void)cudaGetLastError(); /* clear what the ignored calls above left */
  free(e);
}

/* ------------------------------------------------------------------ running nodes */

/* Debugging (PREZERO_CUDA_SYNC=1, eager only): waits for every rank after node n so a fault is
 * reported with the node that caused it. */
static pz_status sync_after(pz_cuda_exec *e, const pz_node *n) {
  for (int r = e->lo; r < e->hi; r++) {
    PZ_CUDA_CHECK(cudaSetDevice(e->ranks[r].device));
    PZ_CUDA_CHECK_MSG(cudaStreamSynchronize(e->ranks[r].stream), "CUDA executor: node %s (%s) failed on rank %d", n->name,
                      pz_op_name(n->op), r);
  }
  return PZ_OK;
}

/* Issues every node for every rank with m rows (eager, or under capture). */
static pz_status run_nodes(pz_cuda_exec *e, int64_t m, bool capturing) {
  pz_cuda_ctx c = {.g = e->g, .tp = e->tp, .lo = e->lo, .hi = e->hi, .m = m, .ranks = e->ranks, .comm = e->comm,
                   .mp = e->mp, .nccl = e->nccl, .dev = &e->dev};
  const pz_graph *g = e->g;
  PZ_CHECK(current(e, m, &g, c.rank_data));
  c.g = g;
  for (int i = 0; i < g->n_nodes; i++) {
    const pz_node *n = &g->nodes[i];
    pz_profile_set_node(n->id); /* CUPTI attribution of the graph nodes captured next (profile.h) */
    pz_cuda_op_fn fn = pz_cuda_op_launcher(n->op);
    if (!fn) return pz_error(PZ_ERR_UNSUPPORTED, "CUDA executor: op %s (node %s): %s", pz_op_name(n->op), n->name, pz_cuda_op_gap(n->op));
    pz_status st;
    if (pz_op_is_collective(n->op)) {
      PZ_CUDA_CHECK(cudaSetDevice(e->ranks[e->lo].device));
      c.rank = e->lo;
      c.data = c.rank_data[e->lo];
      c.stream = e->ranks[e->lo].stream;
      c.gemm = e->ranks[e->lo].gemm;
      st = fn(&c, n);
    } else {
      st = PZ_OK;
      for (int r = e->lo; r < e->hi && st == PZ_OK; r++) {
        PZ_CUDA_CHECK(cudaSetDevice(e->ranks[r].device));
        c.rank = r;
        c.data = c.rank_data[r];
        c.stream = e->ranks[r].stream;
        c.gemm = e->ranks[r].gemm;
        st = fn(&c, n);
      }
    }
    if (st == PZ_OK && e->sync_nodes && !capturing) st = sync_after(e, n);
    if (st != PZ_OK) {
      pz_profile_set_node(-1);
      pz_log_propagate(__FILE__, __LINE__, n->name, st);
      return st;
    }
  }
  pz_profile_set_node(-1);
  return PZ_OK;
}

/* The captured graphs of batch M for the current key, capturing them when missing. */
static pz_status get_slot(pz_cuda_exec *e, int64_t M, graph_slot **out) {
  int idx = -1;
  for (int i = 0; i < e->n_sizes; i++)
    if (e->sizes[i] == M) idx = i;
  if (idx < 0) return pz_error(PZ_ERR_INVALID_ARG, "CUDA executor: batch %lld is not a captured size", (long long)M);
  graph_slot *s = &e->slots[e->force != PZ_GEMM_AUTO ? 2 : e->per_batch ? e->on : 0][idx];
  if (s->valid && s->M == M && s->prezero == e->on && s->force == e->force) {
    *out = s;
    return PZ_OK;
  }
  if (s->valid) drop_slot(e, s);
  for (int r = e->lo; r < e->hi; r++) {
    PZ_CUDA_CHECK(cudaSetDevice(e->ranks[r].device));
    PZ_CUDA_CHECK(cudaStreamBeginCapture(e->ranks[r].stream, cudaStreamCaptureModeRelaxed));
  }
  /* Every rank's capture is ended even after a failure (the first error is the one reported). */
  pz_status st = run_nodes(e, M, true);
  for (int r = e->lo; r < e->hi; r++) {
    PZ_CUDA_KEEP_MSG(cudaSetDevice(e->ranks[r].device), st, "CUDA executor: cudaSetDevice(%d)", e->ranks[r].device);
    PZ_CUDA_KEEP_MSG(cudaStreamEndCapture(e->ranks[r].stream, &s->graph[r]), st,
                     "CUDA executor: capture of batch %lld on rank %d failed", (long long)M, r);
  }
  for (int r = e->lo; r < e->hi && st == PZ_OK; r++) {
    PZ_CUDA_CHECK_MSG_GOTO(cudaSetDevice(e->ranks[r].device), st, fail, "CUDA executor: cudaSetDevice(%d)",
                           e->ranks[r].device);
    PZ_CUDA_CHECK_MSG_GOTO(cudaGraphInstantiate(&s->exec[r], s->graph[r], 0), st, fail,
                           "CUDA executor: instantiating the graph of batch %lld on rank %d", (long long)M, r);
  }
fail:
  if (st != PZ_OK) {
    (void)cudaGetLastError();
    drop_slot(e, s);
    return st;
  }
  s->valid = true;
  s->M = M;
  s->prezero = e->on;
  s->force = e->force;
  *out = s;
  return PZ_OK;
}

int64_t pz_cuda_exec_padded_m(const pz_cuda_exec *e, int64_t m) {
  if (!e || !e->graphs) return m;
  for (int i = 0; i < e->n_sizes; i++)
    if (e->sizes[i] >= m) return e->sizes[i];
  return e->max_m;
}

bool pz_cuda_exec_graphs(const pz_cuda_exec *e) { return e && e->graphs; }

int pz_cuda_exec_w4_tiled(const pz_cuda_exec *e, int rank, int tensor_id) {
  if (!e || rank < e->lo || rank >= e->hi || !pz_cuda_w4_tensor_tiled(&e->ranks[rank], tensor_id)) return 0;
  return e->ranks[rank].w4_tiled[tensor_id];
}

pz_status pz_cuda_exec_capture(pz_cuda_exec *e, int64_t m) {
  if (!e) return pz_error(PZ_ERR_INVALID_ARG, "CUDA exec capture: NULL executor");
  if (m < 1 || m > e->max_m)
    return pz_error(PZ_ERR_INVALID_ARG, "CUDA exec capture: batch %lld not in 1..%lld", (long long)m, (long long)e->max_m);
  if (!e->graphs) return PZ_OK;
  graph_slot *s = NULL;
  return get_slot(e, pz_cuda_exec_padded_m(e, m), &s);
}

int pz_cuda_exec_capture_sizes(const pz_cuda_exec *e, int *sizes, int cap) {
  int n = 0;
  if (!e || !sizes) return 0;
  for (int i = 0; i < e->n_sizes && n < cap; i++) sizes[n++] = e->sizes[i];
  return n;
}

const pz_device_desc *pz_cuda_exec_device_desc(const pz_cuda_exec *e) { return &e->dev; }

/* Copies inputs (host rows already in in_host) and poisons scratch, on every rank. */
static pz_status stage_inputs(pz_cuda_exec *e, int64_t M) {
  for (int r = e->lo; r < e->hi; r++) {
    pz_cuda_rank *R = &e->ranks[r];
    PZ_CUDA_CHECK(cudaSetDevice(R->device));
    if (e->g->in_tokens >= 0)
      PZ_CUDA_CHECK(cudaMemcpyAsync(R->data[e->g->in_tokens], R->in_host, sizeof(int32_t) * (size_t)M,
                                    cudaMemcpyHostToDevice, R->stream));
    if (e->g->in_pos >= 0)
      PZ_CUDA_CHECK(cudaMemcpyAsync(R->data[e->g->in_pos], R->in_host + e->max_m, sizeof(int32_t) * (size_t)M,
                                    cudaMemcpyHostToDevice, R->stream));
    /* the real rows of this step (in_host[2 max_m], set with the rows): the attention ops let the
     * padding rows of a captured size attend one position instead of their whole context. Copied
     * only when it changes (a steady batch size adds no copy to the step). */
    if (R->in_host[2 * e->max_m] != R->rows_staged) {
      PZ_CUDA_CHECK(cudaMemcpyAsync(R->rows, R->in_host + 2 * e->max_m, sizeof(int32_t), cudaMemcpyHostToDevice,
                                    R->stream));
      R->rows_staged = R->in_host[2 * e->max_m];
    }
    if (e->opts.poison)
      for (int t = 0; t < e->g->n_tensors; t++) {
        const pz_tensor *x = &e->g->tensors[t];
        if (x->view_of >= 0 || (x->kind != PZ_T_ACT && x->kind != PZ_T_BUFFER)) continue;
        PZ_CUDA_CHECK(cudaMemsetAsync(R->data[t], 0xff, (size_t)pz_tensor_span(x) * pz_dtype_size(x->dtype), R->stream));
      }
    if (e->opts.poison && e->extra[r]) PZ_CUDA_CHECK(cudaMemsetAsync(e->extra[r], 0xff, (size_t)e->extra_bytes, R->stream));
  }
  return PZ_OK;
}

static pz_status launch_step(pz_cuda_exec *e, int64_t M) {
  if (!e->graphs) return run_nodes(e, M, false);
  graph_slot *s = NULL;
  PZ_CHECK(get_slot(e, M, &s));
  for (int r = e->lo; r < e->hi; r++) {
    PZ_CUDA_CHECK(cudaSetDevice(e->ranks[r].device));
    PZ_CUDA_CHECK(cudaGraphLaunch(s->exec[r], e->ranks[r].stream));
  }
  return PZ_OK;
}

static pz_status wait_all(pz_cuda_exec *e) {
  for (int r = e->lo; r < e->hi; r++) {
    PZ_CUDA_CHECK(cudaSetDevice(e->ranks[r].device));
    PZ_CUDA_CHECK(cudaStreamSynchronize(e->ranks[r].stream));
  }
  if (e->mp) PZ_CHECK(pz_ar_comm_check(e->mp, e->ranks[e->lo].stream)); /* a peer that vanished: PZ_ERR_TIMEOUT */
  else if (e->ro.ar_timeout_us >= 0) PZ_CHECK(pz_comm_check(e->comm));
  return PZ_OK;
}

static pz_status step_once(pz_cuda_exec *e, int64_t m, const int32_t *tokens, const int32_t *pos, int32_t *next);

/* One rank per process: a failed step leaves this rank's collective calls out of step with its
 * peers', so it leaves the group (they fail at once instead of after their timeout). */
pz_status pz_cuda_exec_step(pz_cuda_exec *e, int64_t m, const int32_t *tokens, const int32_t *pos, int32_t *next) {
  if (!e) return pz_error(PZ_ERR_INVALID_ARG, "CUDA exec step: NULL executor");
  pz_status st = step_once(e, m, tokens, pos, next);
  if (st != PZ_OK && e->mp) pz_ar_comm_abort(e->mp);
  return st;
}

/* Rows m..M-1 of one rank's staged inputs (tk = in_host: tokens, then positions at tk + max_m) as the
 * padding of a batch of m in the graph of M: token 0 at the last position (which a live sequence of
 * that row writes itself before it reads it), and the real row count in tk[2 max_m], so that the
 * attention lets them attend one position and the MoE router sends them to no expert
 * (PREZERO_PAD_ATTN=0 stages 0: their whole context, routed as real rows). Their outputs are discarded. */
static void pad_rows(const pz_cuda_exec *e, int32_t *tk, int64_t m, int64_t M) {
  int32_t *ps = tk + e->max_m;
  for (int64_t i = m; i < M; i++) {
    tk[i] = 0;
    ps[i] = (int32_t)(e->max_ctx > 0 ? e->max_ctx - 1 : 0);
  }
  tk[2 * e->max_m] = e->ro.pad_attn == 0 ? 0 : (int32_t)m;
}

static pz_status step_once(pz_cuda_exec *e, int64_t m, const int32_t *tokens, const int32_t *pos, int32_t *next) {
  if (!e || !tokens || !pos) return pz_error(PZ_ERR_INVALID_ARG, "CUDA exec step: NULL argument");
  e->bad_row = -1; /* set again below from this step's candidates */
  e->bad_nan = 0;
  if (m < 1 || m > e->max_m)
    return pz_error(PZ_ERR_INVALID_ARG, "CUDA exec step: batch %lld not in 1..%lld", (long long)m, (long long)e->max_m);
  for (int64_t i = 0; i < m; i++)
    if (pos[i] < 0 || (e->max_ctx > 0 && pos[i] >= e->max_ctx))
      return pz_error(PZ_ERR_INVALID_ARG, "CUDA exec step: pos[%lld] = %d is outside 0..%lld", (long long)i, pos[i],
                      (long long)(e->max_ctx > 0 ? e->max_ctx - 1 : 0x7fffffff));
  const int64_t M = pz_cuda_exec_padded_m(e, m);
  for (int r = e->lo; r < e->hi; r++) {
    int32_t *tk = e->ranks[r].in_host, *ps = tk + e->max_m;
    for (int64_t i = 0; i < m; i++) {
      tk[i] = tokens[i];
      ps[i] = pos[i];
    }
    pad_rows(e, tk, m, M);
  }
  PZ_CHECK(stage_inputs(e, M));
  PZ_CHECK(launch_step(e, M));
  PZ_CHECK(wait_all(e));
  e->last_m = m;
  /* One rank per process: every rank's candidates, in rank order (a collective: every rank's
   * step exchanges, whether it asks for next or not). */
  pz_argmax_cand *gathered = NULL;
  if (e->mp) {
    gathered = malloc(sizeof *gathered * (size_t)(e->tp * m));
    if (!gathered) return pz_error(PZ_ERR_OOM, "CUDA exec step: host allocation");
    pz_status xs = pz_ar_comm_allgather_host_big(e->mp, PZ_HX_ARGMAX, e->ranks[e->lo].cand_host, sizeof *gathered * (size_t)m, gathered);
    if (xs != PZ_OK) {
      free(gathered);
      return xs;
    }
  }
  /* each rank's candidate is its shard's max (a NaN when the shard has one): a NaN in any shard, or
     +infinity as the row's max, marks the row's logits non-finite (pz_cuda_exec_bad_row); a shard whose
     max is -infinity does not (the row's max decides, whatever the TP degree) */
  for (int64_t i = 0; i < m; i++) {
    int32_t best = -1, nan_id = -1;
    float bv = 0.0f;
    for (int r = 0; r < e->tp && nan_id < 0; r++) {
      pz_argmax_cand cnd = gathered ? gathered[(int64_t)r * m + i] : e->ranks[r].cand_host[i];
      if (cnd.id < 0) continue;
      if (isnan(cnd.v)) nan_id = cnd.id;
      else if (best < 0 || cnd.v > bv) { best = cnd.id; bv = cnd.v; }
    }
    if (e->bad_row < 0 && (nan_id >= 0 || (best >= 0 && isinf(bv) && bv > 0))) {
      e->bad_row = i;
      e->bad_nan = nan_id >= 0;
    }
    if (next) next[i] = nan_id >= 0 ? nan_id : best < 0 ? 0 : best;
  }
  free(gathered);
  return PZ_OK;
}

static pz_status logits_once(const pz_cuda_exec *e, int64_t m, float *out);

int64_t pz_cuda_exec_bad_row(const pz_cuda_exec *e, int *is_nan) {
  if (is_nan) *is_nan = e ? e->bad_nan : 0;
  return e ? e->bad_row : -1;
}

pz_status pz_cuda_exec_logits(const pz_cuda_exec *e, int64_t m, float *out) {
  if (!e) return pz_error(PZ_ERR_INVALID_ARG, "CUDA exec logits: NULL executor");
  pz_status st = logits_once(e, m, out);
  if (st != PZ_OK && e->mp) pz_ar_comm_abort(e->mp); /* as a failed step */
  return st;
}

static pz_status logits_once(const pz_cuda_exec *e, int64_t m, float *out) {
  if (!e || !out) return pz_error(PZ_ERR_INVALID_ARG, "CUDA exec logits: NULL argument");
  if (e->g->out_logits < 0) return pz_error(PZ_ERR_INVALID_ARG, "CUDA exec logits: graph has no out_logits");
  if (m < 1 || m > e->last_m)
    return pz_error(PZ_ERR_INVALID_ARG, "CUDA exec logits: %lld rows, last step had %lld", (long long)m, (long long)e->last_m);
  const pz_tensor *L = &e->g->tensors[e->g->out_logits];
  int64_t vpr = L->ne[1], ld = L->ndim >= 2 ? L->stride[0] : vpr;
  int64_t vocab = e->g->info.vocab_size > 0 ? e->g->info.vocab_size : vpr * e->tp;
  const size_t shard = sizeof(float) * (size_t)(m * ld);
  /* one rank per process: every rank's shard, gathered through the host exchange (collective) */
  float *tmp = malloc(e->mp ? shard * (size_t)(e->tp + 1) : shard);
  if (!tmp) return pz_error(PZ_ERR_OOM, "CUDA exec logits: host allocation");
  pz_status st = PZ_OK;
  for (int r = e->lo; r < e->hi && st == PZ_OK; r++) {
    PZ_CUDA_CHECK_MSG_GOTO(cudaSetDevice(e->ranks[r].device), st, done, "CUDA exec logits: cudaSetDevice(%d)",
                           e->ranks[r].device);
    PZ_CUDA_CHECK_MSG_GOTO(cudaMemcpy(tmp, e->ranks[r].data[e->g->out_logits], shard, cudaMemcpyDeviceToHost),
                           st, done, "CUDA exec logits: copy from rank %d", r);
    if (e->mp) break;
    for (int64_t i = 0; i < m; i++)
      for (int64_t j = 0; j < vpr; j++) {
        int64_t id = (int64_t)r * vpr + j;
        if (id < vocab) out[i * vocab + id] = tmp[i * ld + j];
      }
  }
  if (e->mp && st == PZ_OK) {
    float *all = tmp + shard / sizeof(float);
    st = pz_ar_comm_allgather_host_big(e->mp, PZ_HX_LOGITS, tmp, shard, all);
    for (int r = 0; r < e->tp && st == PZ_OK; r++)
      for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < vpr; j++) {
          int64_t id = (int64_t)r * vpr + j;
          if (id < vocab) out[i * vocab + id] = all[(size_t)r * (size_t)(m * ld) + (size_t)(i * ld + j)];
        }
  }
done:
  free(tmp);
  return st;
}

pz_status pz_cuda_exec_read(const pz_cuda_exec *e, int rank, int tensor_id, void *dst, size_t bytes) {
  if (!e || !dst || rank < 0 || rank >= e->tp || tensor_id < 0 || tensor_id >= e->g->n_tensors)
    return pz_error(PZ_ERR_INVALID_ARG, "CUDA exec read: bad rank %d or tensor %d", rank, tensor_id);
  if (rank < e->lo || rank >= e->hi)
    return pz_error(PZ_ERR_INVALID_ARG, "CUDA exec read: rank %d runs in another process (this one runs rank %d)", rank,
                    e->lo);
  PZ_CUDA_CHECK(cudaSetDevice(e->ranks[rank].device));
  PZ_CUDA_CHECK(cudaStreamSynchronize(e->ranks[rank].stream));
  const pz_cuda_rank *R = &e->ranks[rank];
  if (!pz_cuda_w4_tensor_tiled(R, tensor_id)) {
    PZ_CUDA_CHECK(cudaMemcpy(dst, R->data[tensor_id], bytes, cudaMemcpyDeviceToHost));
    return PZ_OK;
  }
  /* INT4 experts moved into the kernel's tiled layout at load: read whole, rearrange back, copy
   * the prefix asked for (the graph's layout) */
  const size_t whole = pz_cuda_w4_tensor_bytes(e->g, tensor_id);
  if (bytes > whole) return pz_error(PZ_ERR_INVALID_ARG, "CUDA exec read: %zu bytes of a %zu-byte tensor", bytes, whole);
  void *tmp = malloc(whole);
  if (!tmp) return pz_error(PZ_ERR_OOM, "CUDA exec read: %zu bytes of host memory", whole);
  pz_status st = PZ_CUDA_STATUS_MSG(cudaMemcpy(tmp, R->data[tensor_id], whole, cudaMemcpyDeviceToHost), "CUDA exec read");
  if (st == PZ_OK) st = pz_cuda_w4_untile_read(e->g, R, tensor_id, tmp);
  if (st == PZ_OK) memcpy(dst, tmp, bytes);
  free(tmp);
  return st;
}

pz_status pz_cuda_exec_time_step(pz_cuda_exec *e, int64_t M, int64_t rows, int32_t pos_all, int iters, int reps,
                                 double *us_median) {
  if (!e || !us_median || iters < 1 || reps < 1 || reps > 64 || M < 1 || M > e->max_m || rows < 1 || rows > M)
    return pz_error(PZ_ERR_INVALID_ARG, "CUDA exec timing: bad arguments (M %lld, rows %lld, iters %d, reps %d)",
                    (long long)M, (long long)rows, iters, reps);
  if (pos_all < 0 || (e->max_ctx > 0 && pos_all >= e->max_ctx))
    return pz_error(PZ_ERR_INVALID_ARG, "CUDA exec timing: position %d outside the KV cache", pos_all);
  if (e->graphs && pz_cuda_exec_padded_m(e, M) != M)
    return pz_error(PZ_ERR_INVALID_ARG, "CUDA exec timing: batch %lld is not a captured size", (long long)M);
  int64_t vocab = e->g->info.vocab_size > 0 ? e->g->info.vocab_size : 1;
  for (int r = e->lo; r < e->hi; r++) {
    int32_t *tk = e->ranks[r].in_host, *ps = tk + e->max_m;
    for (int64_t i = 0; i < rows; i++) {
      tk[i] = pz_backend_timing_token(i, vocab);
      ps[i] = pos_all;
    }
    pad_rows(e, tk, rows, M); /* as step_once pads a batch of `rows` */
  }
  PZ_CHECK(stage_inputs(e, M));
  PZ_CHECK(launch_step(e, M)); /* warm-up (and capture) */
  PZ_CHECK(wait_all(e));
  cudaEvent_t ev[PZ_CUDA_MAX_TP][2];
  memset(ev, 0, sizeof ev);
  double t[64];
  pz_status st = PZ_OK;
  for (int r = e->lo; r < e->hi; r++) {
    PZ_CUDA_CHECK_MSG_GOTO(cudaSetDevice(e->ranks[r].device), st, done, "CUDA exec timing: cudaSetDevice(%d)",
                           e->ranks[r].device);
    PZ_CUDA_CHECK_MSG_GOTO(cudaEventCreate(&ev[r][0]), st, done, "CUDA exec timing: event creation");
    PZ_CUDA_CHECK_MSG_GOTO(cudaEventCreate(&ev[r][1]), st, done, "CUDA exec timing: event creation");
  }
  const int d0 = e->ranks[e->lo].device;
  for (int k = 0; k < reps; k++) {
    PZ_CUDA_CHECK_GOTO(cudaSetDevice(d0), st, done);
    PZ_CUDA_CHECK_GOTO(cudaEventRecord(ev[e->lo][0], e->ranks[e->lo].stream), st, done);
    for (int it = 0; it < iters; it++) PZ_CHECK_GOTO(launch_step(e, M), st, done);
    /* Rank 0's stop waits for every rank's end, so the time covers the slowest rank. */
    for (int r = e->lo + 1; r < e->hi; r++) {
      PZ_CUDA_CHECK_GOTO(cudaSetDevice(e->ranks[r].device), st, done);
      PZ_CUDA_CHECK_GOTO(cudaEventRecord(ev[r][1], e->ranks[r].stream), st, done);
      PZ_CUDA_CHECK_GOTO(cudaSetDevice(d0), st, done);
      PZ_CUDA_CHECK_GOTO(cudaStreamWaitEvent(e->ranks[e->lo].stream, ev[r][1], 0), st, done);
    }
    PZ_CUDA_CHECK_GOTO(cudaSetDevice(d0), st, done);
    PZ_CUDA_CHECK_GOTO(cudaEventRecord(ev[e->lo][1], e->ranks[e->lo].stream), st, done);
    PZ_CHECK_GOTO(wait_all(e), st, done);
    float ms = 0.0f;
    PZ_CUDA_CHECK_MSG_GOTO(cudaEventElapsedTime(&ms, ev[e->lo][0], ev[e->lo][1]), st, done, "CUDA exec timing: elapsed time");
    t[k] = ms * 1000.0 / iters;
  }
  *us_median = pz_median(t, reps);
done:
  /* Cleanup: failures here are ignored on purpose (st already says how the timing went). */
  for (int r = e->lo; r < e->hi; r++) {
    PZ_CUDA_IGNORE(cudaSetDevice(e->ranks[r].device));
    if (ev[r][0]) PZ_CUDA_IGNORE(cudaEventDestroy(ev[r][0]));
    if (ev[r][1]) PZ_CUDA_IGNORE(cudaEventDestroy(ev[r][1]));
  }
  return st;
}
