/* The options reader: the one place the library reads the environment (core/options.h). */
#include "core/options.h"
#include "core/status.h"
#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
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
  o->moe_tail = -1;       /* unset: off; 1 splits the last wave's W4A16 items (moe_q_common.cuh tail_of): opt-in
                             until measured on a GPU */
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
  /* digits with an optional leading '-' only: strtoll also takes " 8" and "+8" */
  const bool plain = (v[0] >= '0' && v[0] <= '9') || (v[0] == '-' && v[1] >= '0' && v[1] <= '9');
  long long x = plain ? strtoll(v, &end, 10) : 0;
  if (!plain || *end || errno || x < lo || x > hi) {
    char want[96];
    snprintf(want, sizeof want, "use an integer in %lld..%lld", lo, hi);
    complain(r, name, v, want);
    return;
  }
  *out = x;
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
/* Whether v is such a list; complains (as name) when not. */
static bool sizes_ok(reader *r, const char *name, const char *v) {
  const char *s = v;
  int n = 0;
  for (;;) {
    char *end;
    errno = 0;
    long x = *s >= '0' && *s <= '9' ? strtol(s, &end, 10) : (end = (char *)s, 0);
    if (end == s || errno || x < 1 || x > 65536 || (*end && *end != ',') || (*end == ',' && !end[1])) {
      complain(r, name, v, "use a comma-separated list of batch sizes in 1..65536, e.g. 1,2,4,8");
      return false;
    }
    if (++n > PZ_OPTS_MAX_GRAPH_SIZES) {
      complain(r, name, v, "give at most 16 batch sizes");
      return false;
    }
    if (!*end) return true;
    s = end + 1;
  }
}

static void get_sizes(reader *r, const char *name, char *dst, size_t cap) {
  const char *v = getenv(name);
  if (!v || !*v || !sizes_ok(r, name, v)) return;
  if (strlen(v) >= cap) {
    complain(r, name, v, "the list is too long; give fewer sizes");
    return;
  }
  snprintf(dst, cap, "%s", v);
}

/* Every integer option and 0 / 1 switch: its variable, its field and its range. The environment reader
 * (pz_runtime_opts_from_env) and the check of options a caller fills in (pz_runtime_opts_check) read this one
 * table, so the two cannot disagree. A field also takes -1 (unset) and its default value. */
typedef struct {
  const char *env, *field;
  size_t off, size; /* of the field: int or int64_t */
  long long lo, hi;
  bool flag;        /* the variable is "0" or "1" */
} int_opt;
#define OPT(env, field, lo, hi, flag) \
  {env, #field, offsetof(pz_runtime_opts, field), sizeof(((pz_runtime_opts *)0)->field), lo, hi, flag}
static const int_opt int_opts[] = {
    OPT("PREZERO_ENABLE", prezero, 0, 1, true),
    OPT("PREZERO_ATTN_SLOTS", attn_slots, 0, 1, true),
    OPT("PREZERO_PLAN_PER_BATCH", plan_per_batch, 0, 1, true),
    OPT("PREZERO_AR_CLUSTER", ar_cluster, 0, 1, false),
    OPT("PREZERO_AR_CTAS_PER_ROW", ar_ctas_per_row, 1, 16, false),
    OPT("PREZERO_AR_TIMEOUT_US", ar_timeout_us, 0, (int64_t)1 << 40, false),
    OPT("PREZERO_GEMM_SPLITS", gemm_splits, 1, 1024, false),
    OPT("PREZERO_GEMM_WT", gemm_wt, 1, 4, false),
    OPT("PREZERO_GEMM_WARPS", gemm_warps, 4, 8, false),
    OPT("PREZERO_GEMM_WN", gemm_wn, 0, 4, false),
    OPT("PREZERO_GEMM_TUNER", gemm_tuner, 0, 1, true),
    OPT("PREZERO_GEMM_BUILTIN", gemm_builtin, 0, 1, true),
    OPT("PREZERO_GEMM_MATCH_BASELINE", gemm_match_baseline, 0, 1, true),
    OPT("PREZERO_GEMM_L2PF", gemm_l2pf, 0, 1, true),
    OPT("PREZERO_GEMM_WG_KS", gemm_wg_ks, 1, 4, false),
    OPT("PREZERO_GEMM_BN", gemm_bn, 0, 256, false),
    OPT("PREZERO_TUNER_ITERS", tuner_iters, 1, 1 << 20, false),
    OPT("PREZERO_TUNER_REPS", tuner_reps, 1, 1 << 10, false),
    OPT("PREZERO_TUNER_LEGACY", tuner_legacy, 0, 1, false),
    OPT("PREZERO_CUDA_GRAPH", cuda_graph, 0, 1, true),
    OPT("PREZERO_CUDA_LOAD_CHUNK_KB", cuda_load_chunk_kb, 1, (int64_t)1 << 30, false),
    OPT("PREZERO_CUDA_SYNC", cuda_sync, 0, 1, true),
    OPT("PREZERO_CUDA_RESERVE_MB", cuda_reserve_mb, 0, (int64_t)1 << 30, false),
    OPT("PREZERO_MLA_SPLITS", mla_splits, 1, 1 << 16, false),
    OPT("PREZERO_MLA_ATTN", mla_attn, 1, 4, false),
    OPT("PREZERO_MLA_BALANCE", mla_balance, 0, 1, false),
    OPT("PREZERO_MLA_WAVES", mla_waves, 1, 2, false),
    OPT("PREZERO_GATE_CALIBRATE", gate_calibrate, 0, 1, false),
    OPT("PREZERO_PAD_ATTN", pad_attn, 0, 1, false),
    OPT("PREZERO_MOE_PERSISTENT", moe_persistent, 0, 1, false),
    OPT("PREZERO_MOE_L2PF", moe_l2pf, 0, 1, true),
    OPT("PREZERO_MOE_W4_TILED", moe_w4_tiled, 0, 1, true),
    OPT("PREZERO_MOE_W4_WK", moe_w4_wk, 0, 1, true),
    OPT("PREZERO_MOE_DIRECT", moe_direct, 0, 1, true),
    OPT("PREZERO_MLA_LAZY", mla_lazy, 0, 1, true),
    OPT("PREZERO_PDL", pdl, 0, 1, true),
    OPT("PREZERO_MOE_ROUTE_TOPK", moe_route_topk, 0, 1, true),
    OPT("PREZERO_MOE_FORK", moe_fork, 0, 2, false),
    OPT("PREZERO_MLA_COMBINE", mla_combine, 0, 1, true),
    OPT("PREZERO_MLA_PROJ", mla_proj, 0, 1, true),
    OPT("PREZERO_MOE_W4_UP_REGS", moe_w4_up_regs, 0, 1, true),
    OPT("PREZERO_MOE_W4_WAVES", moe_w4_waves, 0, 1, true),
    OPT("PREZERO_MOE_ROUTE_KEYS", moe_route_keys, 0, 1, true),
    OPT("PREZERO_MOE_DYNAMIC", moe_dynamic, 0, 1, true),
    OPT("PREZERO_MOE_TAIL", moe_tail, 0, 1, true),
    OPT("PREZERO_MLP_GEMM", mlp_gemm, 0, 1, false),
    OPT("PREZERO_MLP_ONE_GU", mlp_one_gu, 0, 1, true),
    OPT("PREZERO_CPU_THREADS", cpu_threads, 0, 1024, false),  /* 0: the default, as --threads 0 */
};
#undef OPT

static int64_t opt_get(const pz_runtime_opts *o, const int_opt *t) {
  const char *p = (const char *)o + t->off;
  if (t->size == sizeof(int64_t)) { int64_t v; memcpy(&v, p, sizeof v); return v; }
  int v;
  memcpy(&v, p, sizeof v);
  return v;
}

static void opt_set(pz_runtime_opts *o, const int_opt *t, int64_t x) {
  char *p = (char *)o + t->off;
  if (t->size == sizeof(int64_t)) { memcpy(p, &x, sizeof x); return; }
  const int v = (int)x;
  memcpy(p, &v, sizeof v);
}

/* The values inside an option's range that are still refused (the environment reader's and the field check's
 * rule, one place): env, complain about the variable and reset the field to -1; else name the field. */
static void refuse_gap(reader *r, int env, const char *var, const char *field, int *f, const char *want) {
  char v[24], nm[96];
  snprintf(v, sizeof v, "%d", *f);
  if (env) {
    complain(r, var, v, want);
    *f = -1;
  } else {
    snprintf(nm, sizeof nm, "pz_runtime_opts.%s (%s)", field, var);
    complain(r, nm, v, want);
  }
}

static void gaps_in_ranges(reader *r, pz_runtime_opts *o, int env) {
  if (o->gemm_wt == 3) refuse_gap(r, env, "PREZERO_GEMM_WT", "gemm_wt", &o->gemm_wt, "use 1, 2 or 4 (4 only with the wgmma kernel)");
  if (o->gemm_warps > 0 && o->gemm_warps != 4 && o->gemm_warps != 8)
    refuse_gap(r, env, "PREZERO_GEMM_WARPS", "gemm_warps", &o->gemm_warps, "use 4 or 8");
  if (o->gemm_wn == 2) /* the staged cp.async kernel: removed (it won no H200 row) */
    refuse_gap(r, env, "PREZERO_GEMM_WN", "gemm_wn", &o->gemm_wn,
               "use 0 or 1 (mma.sync), 3 (wgmma) or 4 (stream-K); the staged kernel 2 was removed");
  if (o->gemm_bn > 0 && (o->gemm_bn < 16 || (o->gemm_bn & (o->gemm_bn - 1))))
    refuse_gap(r, env, "PREZERO_GEMM_BN", "gemm_bn", &o->gemm_bn, "use 0 (one tile of all tokens) or 16, 32, 64, 128, 256");
  if (o->gemm_wg_ks == 3) refuse_gap(r, env, "PREZERO_GEMM_WG_KS", "gemm_wg_ks", &o->gemm_wg_ks, "use 1, 2 or 4");
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
  for (size_t i = 0; i < sizeof int_opts / sizeof int_opts[0]; i++) { /* the integers and switches */
    const int_opt *t = &int_opts[i];
    int64_t x = opt_get(o, t);
    if (t->flag) {
      int f = (int)x;
      get_flag(&r, t->env, &f);
      x = f;
    } else {
      get_int(&r, t->env, t->lo, t->hi, &x);
    }
    opt_set(o, t, x);
  }
  get_str(&r, "PREZERO_DISABLE_PASSES", o->disable_passes, sizeof o->disable_passes);
  get_str(&r, "PREZERO_DUMP_GRAPH", o->dump_graph, sizeof o->dump_graph);
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
  if ((v = getenv("PREZERO_AR_ALGO")) && *v) {
    if (strcmp(v, "fused") && strcmp(v, "nccl")) complain(&r, "PREZERO_AR_ALGO", v, "use fused (default) or nccl");
    else snprintf(o->ar_algo, sizeof o->ar_algo, "%s", v);
  }
  get_str(&r, "PREZERO_NCCL_LIB", o->nccl_lib, sizeof o->nccl_lib);
  if ((v = getenv("PREZERO_GEMM_FORCE")) && *v) {
    if (gemm_flavour_ok(v)) snprintf(o->gemm_force, sizeof o->gemm_force, "%s", v);
    else complain(&r, "PREZERO_GEMM_FORCE", v, "use atomic, zero, memset, fullk, serial, cublas or 1..6");
  }
  gaps_in_ranges(&r, o, true);
  if ((v = getenv("PREZERO_CACHE_DIR")) && *v) get_str(&r, "PREZERO_CACHE_DIR", o->cache_dir, sizeof o->cache_dir);
  else if ((v = getenv("HOME")) && *v && strlen(v) + sizeof "/.cache/prezero" <= sizeof o->cache_dir)
    snprintf(o->cache_dir, sizeof o->cache_dir, "%s/.cache/prezero", v); /* a HOME too long keeps the default */
  get_sizes(&r, "PREZERO_CUDA_GRAPH_SIZES", o->cuda_graph_sizes, sizeof o->cuda_graph_sizes);
  int msg = -1; /* the two message switches are read where they act; checked here too */
  get_flag(&r, "PREZERO_PROGRESS", &msg);
  get_flag(&r, "PREZERO_LOG_ERRORS", &msg);
  return r.bad ? -1 : 0;
}

/* A string field must end inside its array. */
static bool str_ok(reader *r, const char *field, const char *s, size_t cap) {
  if (memchr(s, 0, cap)) return true;
  char nm[96];
  snprintf(nm, sizeof nm, "pz_runtime_opts.%s", field);
  complain(r, nm, "...", "it has no terminating NUL inside its array; write it with snprintf");
  return false;
}

int pz_runtime_opts_check(const pz_runtime_opts *o, char *err, size_t err_len) {
  reader r = {err, err_len, 0};
  if (err && err_len) err[0] = 0;
  if (!o) {
    if (err && err_len) snprintf(err, err_len, "pz_runtime_opts_check: the options pointer is NULL");
    return -1;
  }
  pz_runtime_opts d;
  pz_runtime_opts_default(&d);
  for (size_t i = 0; i < sizeof int_opts / sizeof int_opts[0]; i++) {
    const int_opt *t = &int_opts[i];
    const int64_t x = opt_get(o, t);
    if (x == -1 || x == opt_get(&d, t) || (x >= t->lo && x <= t->hi)) continue;
    char nm[96], v[24], want[96];
    snprintf(nm, sizeof nm, "pz_runtime_opts.%s (%s)", t->field, t->env);
    snprintf(v, sizeof v, "%lld", (long long)x);
    snprintf(want, sizeof want, "use %lld..%lld, or -1 for the default", t->lo, t->hi);
    complain(&r, nm, v, want);
  }
  pz_runtime_opts c = *o; /* gaps_in_ranges only reads it here */
  gaps_in_ranges(&r, &c, false);
  char iv[24];
  snprintf(iv, sizeof iv, "%d", o->force_gate);
  if (o->force_gate < -1 || o->force_gate > 1)
    complain(&r, "pz_runtime_opts.force_gate (PREZERO_FORCE_GATE)", iv, "use -1 (the gate decides), 0 (off) or 1 (on)");
  snprintf(iv, sizeof iv, "%d", o->ar_proto);
  if (o->ar_proto < -1 || o->ar_proto > 1)
    complain(&r, "pz_runtime_opts.ar_proto (PREZERO_AR_PROTO)", iv, "use -1 (by size), 0 (ll) or 1 (flag)");
  if (str_ok(&r, "ar_algo", o->ar_algo, sizeof o->ar_algo) && strcmp(o->ar_algo, "fused") && strcmp(o->ar_algo, "nccl"))
    complain(&r, "pz_runtime_opts.ar_algo (PREZERO_AR_ALGO)", o->ar_algo, "use fused (default) or nccl");
  if (str_ok(&r, "gemm_force", o->gemm_force, sizeof o->gemm_force) && o->gemm_force[0] && !gemm_flavour_ok(o->gemm_force))
    complain(&r, "pz_runtime_opts.gemm_force (PREZERO_GEMM_FORCE)", o->gemm_force,
             "use \"\" or atomic, zero, memset, fullk, serial, cublas or 1..6");
  if (str_ok(&r, "cuda_graph_sizes", o->cuda_graph_sizes, sizeof o->cuda_graph_sizes) && o->cuda_graph_sizes[0])
    sizes_ok(&r, "pz_runtime_opts.cuda_graph_sizes (PREZERO_CUDA_GRAPH_SIZES)", o->cuda_graph_sizes);
  str_ok(&r, "disable_passes", o->disable_passes, sizeof o->disable_passes);
  str_ok(&r, "dump_graph", o->dump_graph, sizeof o->dump_graph);
  str_ok(&r, "nccl_lib", o->nccl_lib, sizeof o->nccl_lib);
  str_ok(&r, "cache_dir", o->cache_dir, sizeof o->cache_dir);
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
  char bad[300];
  if (given) { /* a caller's struct: the ranges the environment reader enforces (it was taken as it was) */
    if (pz_runtime_opts_check(given, bad, sizeof bad) != 0)
      return pz_error(PZ_ERR_INVALID_ARG, "%s%s%s", who ? who : "", who ? ": " : "", bad);
    *out = *given;
    return PZ_OK;
  }
  if (pz_runtime_opts_from_env(out, bad, sizeof bad) == 0) return PZ_OK;
  return pz_error(PZ_ERR_INVALID_ARG, "%s%s%s%s%s", who ? who : "", who ? ": " : "", bad, fix ? "; " : "", fix ? fix : "");
}
