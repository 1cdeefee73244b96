/* The options reader: the one place the library reads the environment (core/options.h). */
#include "core/options.h"
#include "core/status.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void pz_runtime_opts_default(pz_runtime_opts *o) {
  if (!o) return;
  memset(o, 0, sizeof *o);
  o->prezero = -1;
  o->attn_slots = 1;
  o->plan_per_batch = 1;
  o->force_gate = -1;
  o->ar_proto = -1;
  o->ar_cluster = -1;
  snprintf(o->ar_algo, sizeof o->ar_algo, "fused");
  o->ar_timeout_us = -1;
  o->gemm_splits = o->gemm_wt = o->gemm_warps = o->gemm_wn = o->gemm_wg_ks = -1;
  o->gemm_tuner = o->gemm_builtin = o->gemm_match_baseline = o->gemm_l2pf = 1;
  snprintf(o->cache_dir, sizeof o->cache_dir, "./.cache/prezero");
  o->tuner_iters = o->tuner_reps = o->tuner_legacy = -1;
  o->cuda_graph = 1;
  o->cuda_reserve_mb = -1;
  o->mla_attn = 0; /* by heads per rank (mla.c) */
  o->moe_persistent = -1;
  o->moe_l2pf = 0; /* measured slower on the H200 (bench/results/moe_h200_int4_l2pf.md) */
  o->moe_w4_tiled = 1;
  o->moe_w4_wk = -1; /* the adaptive K split (moe_w4_split.h) */
  o->moe_direct = -1; /* on */
  o->mla_lazy = -1;   /* on */
  o->pdl = -1;   /* on */
  o->moe_route_topk = -1; /* the two-stage top-k */
  o->mla_combine = -1; /* the combine's layout by split slots per row (mla.c) */
  o->mla_proj = -1;    /* absorb / W_UV on tensor cores (mla_kernels.h) */
  o->moe_w4_waves = -1; /* gate/up's K split by the wave rule (moe_w4_split.h) */
  o->moe_route_keys = -1; /* the router's top-k over 64-bit rank keys (route_key.h) */
  o->moe_dynamic = -1;    /* unset: item i on CTA i mod grid; 1 claims items from a counter (moe_q.h) */
  o->moe_w4_up_regs = -1; /* gate/up at 3 CTAs per SM, no spills (moe_q.h w4_up_ctas) */
  o->moe_fork = -1;       /* the shared experts beside the router; the join by batch (moe_q.h) */
  o->mlp_gemm = -1;       /* the MLPs through the GEMMs by batch (backend/cuda/mlp_gemm.h) */
  o->mlp_one_gu = -1;     /* gate and up as one GEMM where their weights are adjacent (mlp_gemm.h) */
  o->mla_balance = -1;
  o->gate_calibrate = -1;
  o->pad_attn = -1;
  o->gemm_bn = -1;
  o->mla_waves = -1;
}

typedef struct reader {
  char *err;
  size_t len;
  int bad;
} reader;

static void complain(reader *r, const char *name, const char *v, const char *want) {
  if (!r->bad && r->err && r->len) snprintf(r->err, r->len, "%s=%s: %s", name, v, want);
  r->bad = 1;
}

/* An integer variable in [lo, hi]; unset or empty leaves *out. */
static void get_int(reader *r, const char *name, long long lo, long long hi, int64_t *out) {
  const char *v = getenv(name);
  if (!v || !*v) return;
  char *end;
  errno = 0;
  long long x = strtoll(v, &end, 10);
  if (*end || errno || x < lo || x > hi) {
    char want[96];
    snprintf(want, sizeof want, "use an integer in %lld..%lld", lo, hi);
    complain(r, name, v, want);
    return;
  }
  *out = x;
}

static void get_i(reader *r, const char *name, long long lo, long long hi, int *out) {
  int64_t x = *out;
  get_int(r, name, lo, hi, &x);
  *out = (int)x;
}

/* A 0 / 1 switch; anything else is refused. */
static void get_flag(reader *r, const char *name, int *out) {
  const char *v = getenv(name);
  if (!v || !*v) return;
  if (!strcmp(v, "0")) *out = 0;
  else if (!strcmp(v, "1")) *out = 1;
  else complain(r, name, v, "use 0 or 1");
}

/* The GEMM flavour names and digits prezero understands (gemm.h pz_gemm_flavour_parse). */
static bool gemm_flavour_ok(const char *v) {
  static const char *const names[] = {"auto", "atomic", "zero", "memset", "fullk", "serial", "cublas"};
  if (v[0] >= '0' && v[0] <= '6' && v[1] == 0) return true;
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    if (!strcmp(v, names[i])) return true;
  return false;
}

static void get_str(reader *r, const char *name, char *dst, size_t cap) {
  const char *v = getenv(name);
  if (!v) return;
  if (strlen(v) >= cap) { /* cut, a path would name another file or directory */
    char want[96];
    snprintf(want, sizeof want, "%zu bytes, longer than the %zu this option holds; use a shorter value", strlen(v),
             cap - 1);
    complain(r, name, "...", want);
    return;
  }
  snprintf(dst, cap, "%s", v);
}

/* A list of batch sizes "1,2,4": at most PZ_OPTS_MAX_GRAPH_SIZES decimal integers in 1..65536 separated
 * by single commas (no spaces or signs); empty leaves *dst; anything else is refused (it used to fall back
 * to the default list, or drop the sizes past 16, in silence). */
static void get_sizes(reader *r, const char *name, char *dst, size_t cap) {
  const char *v = getenv(name);
  if (!v || !*v) return;
  const char *s = v;
  int n = 0;
  for (;;) {
    char *end;
    errno = 0;
    long x = *s >= '0' && *s <= '9' ? strtol(s, &end, 10) : (end = (char *)s, 0);
    if (end == s || errno || x < 1 || x > 65536 || (*end && *end != ',') || (*end == ',' && !end[1])) {
      complain(r, name, v, "use a comma-separated list of batch sizes in 1..65536, e.g. 1,2,4,8");
      return;
    }
    if (++n > PZ_OPTS_MAX_GRAPH_SIZES) {
      complain(r, name, v, "give at most 16 batch sizes");
      return;
    }
    if (!*end) break;
    s = end + 1;
  }
  if (strlen(v) >= cap) {
    complain(r, name, v, "the list is too long; give fewer sizes");
    return;
  }
  snprintf(dst, cap, "%s", v);
}

int pz_runtime_opts_from_env(pz_runtime_opts *o, char *err, size_t err_len) {
  reader r = {err, err_len, 0};
  if (err && err_len) err[0] = 0;
  if (!o) {
    if (err && err_len) snprintf(err, err_len, "pz_runtime_opts_from_env: the options pointer is NULL");
    return -1;
  }
  pz_runtime_opts_default(o);
  const char *v = NULL;
  get_flag(&r, "PREZERO_ENABLE", &o->prezero);
  get_str(&r, "PREZERO_DISABLE_PASSES", o->disable_passes, sizeof o->disable_passes);
  get_str(&r, "PREZERO_DUMP_GRAPH", o->dump_graph, sizeof o->dump_graph);
  get_flag(&r, "PREZERO_ATTN_SLOTS", &o->attn_slots);
  get_flag(&r, "PREZERO_PLAN_PER_BATCH", &o->plan_per_batch);
  if ((v = getenv("PREZERO_FORCE_GATE")) && *v) {
    if (!strcmp(v, "on")) o->force_gate = 1;
    else if (!strcmp(v, "off")) o->force_gate = 0;
    else complain(&r, "PREZERO_FORCE_GATE", v, "use on or off");
  }
  if ((v = getenv("PREZERO_AR_PROTO")) && *v) {
    if (!strcmp(v, "ll")) o->ar_proto = 0;
    else if (!strcmp(v, "flag")) o->ar_proto = 1;
    else complain(&r, "PREZERO_AR_PROTO", v, "use ll or flag");
  }
  get_i(&r, "PREZERO_AR_CLUSTER", 0, 1, &o->ar_cluster);
  get_i(&r, "PREZERO_AR_CTAS_PER_ROW", 1, 16, &o->ar_ctas_per_row);
  if ((v = getenv("PREZERO_AR_ALGO")) && *v) {
    if (strcmp(v, "fused") && strcmp(v, "nccl")) complain(&r, "PREZERO_AR_ALGO", v, "use fused (default) or nccl");
    else snprintf(o->ar_algo, sizeof o->ar_algo, "%s", v);
  }
  get_int(&r, "PREZERO_AR_TIMEOUT_US", 0, (int64_t)1 << 40, &o->ar_timeout_us);
  get_str(&r, "PREZERO_NCCL_LIB", o->nccl_lib, sizeof o->nccl_lib);
  if ((v = getenv("PREZERO_GEMM_FORCE")) && *v) {
    if (gemm_flavour_ok(v)) snprintf(o->gemm_force, sizeof o->gemm_force, "%s", v);
    else complain(&r, "PREZERO_GEMM_FORCE", v, "use atomic, zero, memset, fullk, serial, cublas or 1..6");
  }
  get_i(&r, "PREZERO_GEMM_SPLITS", 1, 1024, &o->gemm_splits);
  get_i(&r, "PREZERO_GEMM_WT", 1, 4, &o->gemm_wt);
  if (o->gemm_wt == 3) {
    complain(&r, "PREZERO_GEMM_WT", "3", "use 1, 2 or 4 (4 only with the wgmma kernel)");
    o->gemm_wt = -1;
  }
  get_i(&r, "PREZERO_GEMM_WARPS", 4, 8, &o->gemm_warps);
  if (o->gemm_warps > 0 && o->gemm_warps != 4 && o->gemm_warps != 8) {
    complain(&r, "PREZERO_GEMM_WARPS", getenv("PREZERO_GEMM_WARPS"), "use 4 or 8");
    o->gemm_warps = -1;
  }
  get_i(&r, "PREZERO_GEMM_WN", 0, 4, &o->gemm_wn);
  if (o->gemm_wn == 2) { /* the staged cp.async kernel: removed (it won no H200 row) */
    complain(&r, "PREZERO_GEMM_WN", "2", "use 0 or 1 (mma.sync), 3 (wgmma) or 4 (stream-K); the staged kernel 2 was removed");
    o->gemm_wn = -1;
  }
  get_flag(&r, "PREZERO_GEMM_TUNER", &o->gemm_tuner);
  get_flag(&r, "PREZERO_GEMM_BUILTIN", &o->gemm_builtin);
  get_flag(&r, "PREZERO_GEMM_MATCH_BASELINE", &o->gemm_match_baseline);
  get_flag(&r, "PREZERO_GEMM_L2PF", &o->gemm_l2pf);
  get_i(&r, "PREZERO_GEMM_WG_KS", 1, 4, &o->gemm_wg_ks);
  get_i(&r, "PREZERO_GEMM_BN", 0, 256, &o->gemm_bn);
  if (o->gemm_bn > 0 && (o->gemm_bn < 16 || (o->gemm_bn & (o->gemm_bn - 1)))) {
    complain(&r, "PREZERO_GEMM_BN", getenv("PREZERO_GEMM_BN"), "use 0 (one tile of all tokens) or 16, 32, 64, 128, 256");
    o->gemm_bn = -1;
  }
  if (o->gemm_wg_ks == 3) {
    complain(&r, "PREZERO_GEMM_WG_KS", "3", "use 1, 2 or 4");
    o->gemm_wg_ks = -1;
  }
  if ((v = getenv("PREZERO_CACHE_DIR")) && *v) get_str(&r, "PREZERO_CACHE_DIR", o->cache_dir, sizeof o->cache_dir);
  else if ((v = getenv("HOME")) && *v && strlen(v) + sizeof "/.cache/prezero" <= sizeof o->cache_dir)
    snprintf(o->cache_dir, sizeof o->cache_dir, "%s/.cache/prezero", v); /* a HOME too long keeps the default */
  get_i(&r, "PREZERO_TUNER_ITERS", 1, 1 << 20, &o->tuner_iters);
  get_i(&r, "PREZERO_TUNER_REPS", 1, 1 << 10, &o->tuner_reps);
  get_i(&r, "PREZERO_TUNER_LEGACY", 0, 1, &o->tuner_legacy);
  get_flag(&r, "PREZERO_CUDA_GRAPH", &o->cuda_graph);
  get_sizes(&r, "PREZERO_CUDA_GRAPH_SIZES", o->cuda_graph_sizes, sizeof o->cuda_graph_sizes);
  get_int(&r, "PREZERO_CUDA_LOAD_CHUNK_KB", 1, (int64_t)1 << 30, &o->cuda_load_chunk_kb);
  get_flag(&r, "PREZERO_CUDA_SYNC", &o->cuda_sync);
  get_int(&r, "PREZERO_CUDA_RESERVE_MB", 0, (int64_t)1 << 30, &o->cuda_reserve_mb);
  get_i(&r, "PREZERO_MLA_SPLITS", 1, 1 << 16, &o->mla_splits);
  get_i(&r, "PREZERO_MLA_ATTN", 1, 4, &o->mla_attn);
  get_i(&r, "PREZERO_MLA_BALANCE", 0, 1, &o->mla_balance);
  get_i(&r, "PREZERO_MLA_WAVES", 1, 2, &o->mla_waves);
  get_i(&r, "PREZERO_GATE_CALIBRATE", 0, 1, &o->gate_calibrate);
  get_i(&r, "PREZERO_PAD_ATTN", 0, 1, &o->pad_attn);
  get_i(&r, "PREZERO_MOE_PERSISTENT", 0, 1, &o->moe_persistent);
  get_flag(&r, "PREZERO_MOE_L2PF", &o->moe_l2pf);
  get_flag(&r, "PREZERO_MOE_W4_TILED", &o->moe_w4_tiled);
  get_flag(&r, "PREZERO_MOE_W4_WK", &o->moe_w4_wk);
  get_flag(&r, "PREZERO_MOE_DIRECT", &o->moe_direct);
  get_flag(&r, "PREZERO_MLA_LAZY", &o->mla_lazy);
  get_flag(&r, "PREZERO_PDL", &o->pdl);
  get_flag(&r, "PREZERO_MOE_ROUTE_TOPK", &o->moe_route_topk);
  get_i(&r, "PREZERO_MOE_FORK", 0, 2, &o->moe_fork);
  get_flag(&r, "PREZERO_MLA_COMBINE", &o->mla_combine);
  get_flag(&r, "PREZERO_MLA_PROJ", &o->mla_proj);
  get_flag(&r, "PREZERO_MOE_W4_UP_REGS", &o->moe_w4_up_regs);
  get_flag(&r, "PREZERO_MOE_W4_WAVES", &o->moe_w4_waves);
  get_flag(&r, "PREZERO_MOE_ROUTE_KEYS", &o->moe_route_keys);
  get_flag(&r, "PREZERO_MOE_DYNAMIC", &o->moe_dynamic);
  get_i(&r, "PREZERO_MLP_GEMM", 0, 1, &o->mlp_gemm);
  get_flag(&r, "PREZERO_MLP_ONE_GU", &o->mlp_one_gu);
  get_i(&r, "PREZERO_CPU_THREADS", 0, 1024, &o->cpu_threads); /* 0: the default, as --threads 0 */
  int msg = -1; /* the two message switches are read where they act; checked here too */
  get_flag(&r, "PREZERO_PROGRESS", &msg);
  get_flag(&r, "PREZERO_LOG_ERRORS", &msg);
  return r.bad ? -1 : 0;
}

bool pz_runtime_log_errors(void) {
  const char *e = getenv("PREZERO_LOG_ERRORS");
  return e && e[0] == '1';
}

int pz_runtime_progress(void) {
  const char *e = getenv("PREZERO_PROGRESS");
  return e && *e ? strcmp(e, "0") != 0 : -1;
}

pz_status pz_runtime_opts_take(pz_runtime_opts *out, const pz_runtime_opts *given, const char *who, const char *fix) {
  if (!out) return pz_error(PZ_ERR_INVALID_ARG, "pz_runtime_opts_take: NULL out");
  if (given) {
    *out = *given;
    return PZ_OK;
  }
  char bad[300];
  if (pz_runtime_opts_from_env(out, bad, sizeof bad) == 0) return PZ_OK;
  return pz_error(PZ_ERR_INVALID_ARG, "%s%s%s%s%s", who ? who : "", who ? ": " : "", bad, fix ? "; " : "", fix ? fix : "");
}
