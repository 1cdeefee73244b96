/* Host side of the split-K GEMM family: the handle (semaphores, cuBLAS), shape checks, the
 * AUTO choice (env > tuner table > heuristic) and the capturable launcher of every flavour. */
#include "backend/cuda/gemm.h"
#include <cublas_v2.h>
#include <stdlib.h>
#include <string.h>
#include "backend/cuda/cuda_util.h"
#include "backend/cuda/tuner.h"
#include "core/options.h"

#define PZ_GEMM_SEM_CAPACITY (1 << 16)
#define PZ_GEMM_CUBLAS_WS (32u << 20)

struct pz_gemm_ctx {
  int device;
  int sm_count;
  bool wgmma; /* compute capability 9 (Hopper): the wgmma kernel (wn 3) is available */
  char name[256];
  int *sems; /* PZ_GEMM_SEM_CAPACITY ints, zero between launches */
  cublasHandle_t cublas;
  void *cublas_ws;
  pz_tuner_table table;
  pz_gemm_flavour force; /* AUTO: none; else what every AUTO launch resolves to (baselines) */
  pz_runtime_opts ro;    /* the options at creation (core/options.h) */
  pz_gemm_flavour env_force; /* ro.gemm_force parsed (AUTO: none) */
};

/* Reads the GEMM options of ro into c; PZ_ERR_INVALID_ARG for a bad PREZERO_GEMM_FORCE. */
static pz_status take_opts(pz_gemm_ctx *c, const pz_runtime_opts *ro) {
  c->ro = *ro;
  c->env_force = PZ_GEMM_AUTO;
  if (ro->gemm_force[0]) {
    c->env_force = pz_gemm_flavour_parse(ro->gemm_force);
    if (c->env_force == PZ_GEMM_FLAVOUR_COUNT)
      return pz_error(PZ_ERR_INVALID_ARG, "PREZERO_GEMM_FORCE=%s: use atomic|zero|memset|fullk|serial|cublas or 1..6",
                      ro->gemm_force);
  }
  if (ro->gemm_wt > 0 && ro->gemm_wt != 1 && ro->gemm_wt != 2 && ro->gemm_wt != 4)
    return pz_error(PZ_ERR_INVALID_ARG, "PREZERO_GEMM_WT=%d: use 1, 2 or 4 (4 only with the wgmma kernel)", ro->gemm_wt);
  if (ro->gemm_warps > 0 && ro->gemm_warps != 4 && ro->gemm_warps != 8)
    return pz_error(PZ_ERR_INVALID_ARG, "PREZERO_GEMM_WARPS=%d: use 4 or 8", ro->gemm_warps);
  if (ro->gemm_bn > 0 && !pz_gemm_bn_ok(ro->gemm_bn, 1))
    return pz_error(PZ_ERR_INVALID_ARG, "PREZERO_GEMM_BN=%d: use 0 (one tile of all tokens) or 16, 32, 64, 128, 256", ro->gemm_bn);
  return PZ_OK;
}

pz_status pz_gemm_ctx_create(pz_gemm_ctx **out) {
  pz_runtime_opts ro;
  if (out) *out = NULL;
  PZ_CHECK(pz_runtime_opts_take(&ro, NULL, "pz_gemm_ctx_create", NULL));
  return pz_gemm_ctx_create_opts(&ro, out);
}

pz_status pz_gemm_ctx_create_opts(const pz_runtime_opts *ro, pz_gemm_ctx **out) {
  if (!out || !ro) return pz_error(PZ_ERR_INVALID_ARG, "pz_gemm_ctx_create_opts: NULL argument");
  *out = NULL;
  int ndev = 0;
  if (!PZ_CUDA_PROBE(cudaGetDeviceCount(&ndev)) || ndev == 0) /* no device is an answer */
    return pz_error(PZ_ERR_NO_DEVICE, "pz_gemm_ctx_create: no CUDA device");
  pz_gemm_ctx *c = calloc(1, sizeof *c);
  if (!c) return pz_error(PZ_ERR_OOM, "pz_gemm_ctx_create: host allocation");
  pz_status st = take_opts(c, ro);
  if (st != PZ_OK) {
    free(c);
    return st;
  }
  struct cudaDeviceProp prop;
  PZ_CUDA_CHECK_MSG_GOTO(cudaGetDevice(&c->device), st, fail, "pz_gemm_ctx_create");
  PZ_CUDA_CHECK_MSG_GOTO(cudaGetDeviceProperties(&prop, c->device), st, fail, "pz_gemm_ctx_create");
  c->sm_count = prop.multiProcessorCount;
  c->wgmma = prop.major == 9;
  snprintf(c->name, sizeof c->name, "%s", prop.name);
  PZ_CUDA_CHECK_MSG_GOTO(cudaMalloc((void **)&c->sems, PZ_GEMM_SEM_CAPACITY * sizeof(int)), st, fail, "pz_gemm_ctx_create: semaphores");
  PZ_CUDA_CHECK_MSG_GOTO(cudaMemset(c->sems, 0, PZ_GEMM_SEM_CAPACITY * sizeof(int)), st, fail, "pz_gemm_ctx_create: semaphores");
  PZ_CUDA_CHECK_MSG_GOTO(cudaMalloc(&c->cublas_ws, PZ_GEMM_CUBLAS_WS), st, fail, "pz_gemm_ctx_create: cuBLAS workspace");
  if (cublasCreate(&c->cublas) != CUBLAS_STATUS_SUCCESS) {
    c->cublas = NULL;
    st = pz_error(PZ_ERR_CUDA, "pz_gemm_ctx_create: cublasCreate failed");
    goto fail;
  }
  PZ_CUDA_CHECK_MSG_GOTO(cudaDeviceSynchronize(), st, fail, "pz_gemm_ctx_create");
  st = pz_gemm_kernels_init(c->wgmma);
  if (st != PZ_OK) goto fail;
  st = pz_tuner_table_init(&c->table, c->name, c->sm_count, c->ro.cache_dir, c->ro.gemm_builtin);
  if (st != PZ_OK) goto fail;
  *out = c;
  return PZ_OK;
fail:
  pz_gemm_ctx_destroy(c);
  return st;
}

pz_status pz_gemm_ctx_create_model(const char *device, int sm_count, bool hopper, pz_gemm_ctx **out) {
  if (!out || !device || sm_count < 1) return pz_error(PZ_ERR_INVALID_ARG, "pz_gemm_ctx_create_model: NULL device or sm_count < 1");
  *out = NULL;
  pz_gemm_ctx *c = calloc(1, sizeof *c);
  if (!c) return pz_error(PZ_ERR_OOM, "pz_gemm_ctx_create_model: host allocation");
  c->device = -1;
  c->sm_count = sm_count;
  c->wgmma = hopper;
  snprintf(c->name, sizeof c->name, "%s", device);
  pz_runtime_opts ro;
  pz_status st = pz_runtime_opts_take(&ro, NULL, "pz_gemm_ctx_create_model", NULL);
  if (st == PZ_OK) st = take_opts(c, &ro);
  if (st == PZ_OK) st = pz_tuner_table_init(&c->table, c->name, c->sm_count, c->ro.cache_dir, c->ro.gemm_builtin);
  if (st != PZ_OK) {
    free(c);
    return st;
  }
  *out = c;
  return PZ_OK;
}

void pz_gemm_config_describe(const pz_gemm_config *c, char *buf, size_t len) {
  if (!buf || !len) return;
  if (!c) { buf[0] = 0; return; }
  const char *kern = c->flavour == PZ_GEMM_CUBLAS ? "cublas" : c->wn == 3 ? "wgmma" : "mma.sync";
  if (c->flavour == PZ_GEMM_CUBLAS) snprintf(buf, len, "cublas");
  else if (c->wn == 4) snprintf(buf, len, "wgmma stream-K %s ctas=%d wt=%d", pz_gemm_flavour_name(c->flavour), c->splits, c->wt);
  else {
    char tile[24] = "";
    if (c->bn > 0) snprintf(tile, sizeof tile, " bn=%d", c->bn);
    snprintf(buf, len, "%s %s splits=%d wt=%d%s%s", kern, pz_gemm_flavour_name(c->flavour), c->splits, c->wt,
             pz_gemm_wgmma_token_split(c) ? " token-split" : "", tile);
  }
}

void pz_gemm_ctx_destroy(pz_gemm_ctx *c) {
  if (!c) return;
  if (c->cublas) cublasDestroy(c->cublas);
  if (c->cublas_ws) PZ_CUDA_IGNORE(cudaFree(c->cublas_ws)); /* teardown: nothing to report */
  if (c->sems) PZ_CUDA_IGNORE(cudaFree(c->sems));
  pz_tuner_table_free(&c->table);
  free(c);
}

const char *pz_gemm_ctx_device_name(const pz_gemm_ctx *c) { return c->name; }

pz_status pz_gemm_ctx_set_force(pz_gemm_ctx *c, pz_gemm_flavour f) {
  if (!c || (unsigned)f >= PZ_GEMM_FLAVOUR_COUNT) return pz_error(PZ_ERR_INVALID_ARG, "pz_gemm_ctx_set_force: NULL handle or flavour %d", (int)f);
  c->force = f;
  return PZ_OK;
}
const pz_runtime_opts *pz_gemm_ctx_opts(const pz_gemm_ctx *c) { return c ? &c->ro : NULL; }
int pz_gemm_ctx_sm_count(const pz_gemm_ctx *c) { return c->sm_count; }
bool pz_gemm_ctx_has_wgmma(const pz_gemm_ctx *c) { return c->wgmma; }
struct pz_tuner_table *pz_gemm_ctx_table(pz_gemm_ctx *c) { return &c->table; }

pz_status pz_gemm_check(const pz_gemm_args *a) {
  if (!a) return pz_error(PZ_ERR_INVALID_ARG, "gemm: args is NULL");
  if (a->m < 1 || a->m > 256)
    return pz_error(PZ_ERR_SHAPE, "gemm: m=%d outside 1..256", a->m);
  if (a->n < 64 || a->n % 64 || a->k < 64 || a->k % 64)
    return pz_error(PZ_ERR_SHAPE, "gemm: n=%d and k=%d must be positive multiples of 64", a->n, a->k);
  int64_t ldw = a->ldw ? a->ldw : a->k;
  if (a->lda < a->k || a->lda % 8 || ldw < a->k || ldw % 8 || a->ldc < a->n)
    return pz_error(PZ_ERR_SHAPE, "gemm: strides lda=%lld ldw=%lld (>= k=%d, multiples of 8), ldc=%lld (>= n=%d)",
                    (long long)a->lda, (long long)ldw, a->k, (long long)a->ldc, a->n);
  if (a->c_dtype != PZ_F32 && a->c_dtype != PZ_BF16)
    return pz_error(PZ_ERR_DTYPE, "gemm: C must be f32 or bf16, got %s", pz_dtype_name(a->c_dtype));
  if (!a->A || !a->W || !a->C) return pz_error(PZ_ERR_INVALID_ARG, "gemm: NULL A, W or C");
  if (((uintptr_t)a->A & 15) || ((uintptr_t)a->W & 15))
    return pz_error(PZ_ERR_INVALID_ARG, "gemm: A and W must be 16-byte aligned");
  if ((unsigned)a->config.flavour >= PZ_GEMM_FLAVOUR_COUNT)
    return pz_error(PZ_ERR_INVALID_ARG, "gemm: unknown flavour %d", (int)a->config.flavour);
  return PZ_OK;
}

/* Hopper: the wgmma kernel. Fitted by hand to the H200 (bench/results/gemm_h200.json, the run of
 * 2026-12-01 21:48Z; every pick below is a config that run measured as the best for its row but the
 * 64-column router gate of DeepSeek-V2-Lite at m = 256, where the mma.sync kernel wins):
 * - wt 2 (128 columns per CTA, half the A re-reads) from m >= 16 when n gives >= sm_count/4 such tiles;
 * - full K when K is short (<= 32 k-blocks of 64) and the tiles alone fill half the SMs. With 64-column
 *   tiles (wt 1) instead of 128 when that fills them and wt 2 does not, from m >= 128 (one CTA per SM;
 *   the split-K alternative doubles the epilogue's traffic), and at m = 64 (token tiles of 64: 2 CTAs
 *   per SM) when the wt 1 grid fits one wave of them (m = 65..127 have 128-token tiles and keep
 *   wt 2: unmeasured there);
 * - token tiles of 64 (config bn) from m >= 128 with wt 1 and n <= 2048 (2026-12-02 runs,
 *   bench/results/gemm_h200_tuned_r58.json: the tuned best on every such row ran bn 64 or 128);
 *   full K then needs the tiles to fill half of the 2-per-SM slots;
 * - otherwise the split count minimises a wave model of the busiest SM slot: waves x (k-blocks per
 *   split + 4 for the pipeline fill + an epilogue term, BN/32 k-blocks, BN/8 from m >= 128 where
 *   each extra wave also re-reduces BN x 64·wt fp32 partials), with 2 CTAs per SM for token tiles
 *   <= 64 and 1 above, at most 40 splits (28 from m >= 64); with a token tile it also charges every
 *   split's partials (bn x 64 fp32 per tile) spread over the SMs at 2 k-blocks of W per 64x64 bf16
 *   W block's worth of bytes, which keeps the picks at the 128-256 CTAs the tuner found; ties go to
 *   fewer splits. */
static pz_gemm_config heuristic_wgmma(int sm_count, int m, int n, int k, bool zero_init, bool token_tiles) {
  pz_gemm_config c = {PZ_GEMM_AUTO, 1, 1, 5, 3, 0};
  if (m >= 16 && n % 128 == 0 && n / 128 >= sm_count / 4) c.wt = 2;
  if (token_tiles && m >= 128 && c.wt == 1 && n <= 2048) c.bn = 64; /* token tiles of 64: 2 CTAs per SM, fewer splits */
  const int bn = c.bn ? c.bn : pz_gemm_wgmma_bn(m, c.wt);
  const int64_t tiles = (int64_t)(n / (64 * c.wt)) * ((m + bn - 1) / bn);
  const int64_t slots = (int64_t)sm_count * (bn <= 64 && c.wt == 1 ? 2 : 1);
  const int kb = k / 64;
  if (kb <= 32 && m >= 16 && c.wt == 2) {
    const int bn1 = pz_gemm_wgmma_bn(m, 1);
    const int64_t tiles1 = (int64_t)(n / 64) * ((m + bn1 - 1) / bn1);
    if ((m >= 128 && tiles < sm_count / 2 && tiles1 >= sm_count / 2) ||
        (m >= 64 && bn1 <= 64 && tiles >= sm_count / 2 && tiles1 <= 2 * (int64_t)sm_count)) {
      c.wt = 1;
      c.flavour = PZ_GEMM_FULLK;
      return c;
    }
  }
  if (kb <= 32 && m >= 16 && tiles >= (c.bn ? slots : sm_count) / 2) {
    if (!c.bn && tiles > sm_count && tiles % sm_count < sm_count / 2) {
      /* more than one wave of whole-K tiles, the last under half full: the stream-K grid, one CTA
       * per SM sharing the (tile, k-block) units (DeepSeek-V3 q_b 24576 x 1536 at m 128 / 256: 192
       * 128-column tiles, 30.7 / 44.6 µs against 35.1 / 51.6 full K in round 84's gemm_h200_v12.json;
       * at m 16 / 32 / 64 within 1.00 / 1.05 / 1.04 of the best, gemm_h200.json of round 91). */
      c.flavour = zero_init ? PZ_GEMM_MEMSET_SPLITK : PZ_GEMM_SPLITK_ATOMIC;
      c.wn = 4;
      c.splits = sm_count;
      c.warps = 9;
      return c;
    }
    c.flavour = PZ_GEMM_FULLK;
    return c;
  }
  const int cap = m >= 64 ? 28 : 40;
  const int epi = m >= 128 ? bn / 2 : bn / 8; /* in quarter k-blocks */
  int64_t best = -1;
  for (int s = 1; s <= kb / 2 && s <= cap; s++) {
    const int64_t waves = (tiles * s + slots - 1) / slots;
    /* in quarter k-blocks x 4 sm_count; with token tiles (c.bn) each split's fp32 partials (bn x 64
     * columns) also cost their atomic traffic spread over the SMs, weighted 2x a k-block of W */
    const int64_t cost = waves * (4 * ((kb + s - 1) / s + 4) + epi) * 4 * sm_count + (c.bn ? tiles * s * bn : 0);
    if (best < 0 || cost < best) {
      best = cost;
      c.splits = s;
    }
  }
  c.flavour = c.splits == 1 ? PZ_GEMM_FULLK : zero_init ? PZ_GEMM_SPLITK_ZERO : PZ_GEMM_SPLITK_ATOMIC;
  return c;
}

pz_gemm_config pz_gemm_heuristic(int sm_count, int m, int n, int k, bool zero_init, bool hopper) {
  return pz_gemm_heuristic_tiles(sm_count, m, n, k, zero_init, hopper, true);
}

pz_gemm_config pz_gemm_heuristic_tiles(int sm_count, int m, int n, int k, bool zero_init, bool hopper, bool token_tiles) {
  if (hopper && n % 64 == 0 && k % 64 == 0) return heuristic_wgmma(sm_count, m, n, k, zero_init, token_tiles);
  pz_gemm_config c = {PZ_GEMM_AUTO, 1, m <= 64 ? 2 : 1, 4, 0, 0}; /* mma.sync: no token tile */
  int tiles = n / (16 * c.wt);
  int target = 4 * sm_count;
  int s = (target + tiles - 1) / tiles;
  int max_s = (k / 32) / 8;
  if (s > max_s) s = max_s;
  if (s > 32) s = 32;
  if (s < 1) s = 1;
  c.splits = s;
  c.flavour = s == 1 ? PZ_GEMM_FULLK : zero_init ? PZ_GEMM_SPLITK_ZERO : PZ_GEMM_SPLITK_ATOMIC;
  return c;
}

static bool flavour_is_split_k(pz_gemm_flavour f) {
  return f == PZ_GEMM_SPLITK_ATOMIC || f == PZ_GEMM_SPLITK_ZERO || f == PZ_GEMM_MEMSET_SPLITK;
}

/* Why a config cannot run (NULL when it can): the kernels' own limits, checked once here so the
 * launchers below never adjust a config. */
static const char *config_invalid(const pz_gemm_target *t, int m, int k, const pz_gemm_config *c) {
  if ((unsigned)c->flavour >= PZ_GEMM_FLAVOUR_COUNT || c->flavour == PZ_GEMM_AUTO) return "no flavour";
  if (c->bn != 0 && (c->flavour == PZ_GEMM_CUBLAS || c->wn != 3))
    return "a token tile (bn) is a setting of the wgmma split-K kernel (wn 3) only";
  if (c->flavour == PZ_GEMM_CUBLAS) return NULL;
  if (c->wn < 0 || c->wn > 4) return "kernel (wn) outside 0..4";
  if (c->wn == 2) return "the staged kernel (wn 2) was removed (it won no H200 row): use wn 0, 1, 3 or 4";
  if (c->wn >= 3 && !t->hopper) return "the wgmma kernels (wn 3, 4) need a Hopper GPU (compute capability 9)";
  if (c->wn == 4) { /* stream-K: splits is the persistent grid's CTA count */
    if (c->flavour != PZ_GEMM_SPLITK_ATOMIC && c->flavour != PZ_GEMM_MEMSET_SPLITK)
      return "the stream-K kernel (wn 4) runs only the atomic flavours (atomic, memset)";
    if (c->splits < 1 || c->splits > 65535) return "stream-K grid (splits = CTAs) outside 1..65535";
    if (c->wt != 1 && c->wt != 2 && c->wt != 4) return "W tiles per CTA (wt) not 1, 2 or 4";
    return NULL;
  }
  const int kblocks = k / (c->wn == 3 ? 64 : 32);
  if (c->splits < 1 || c->splits > kblocks) return "split count outside 1..the k-blocks of the kernel";
  if (c->flavour == PZ_GEMM_FULLK && c->splits != 1) return "full K with more than one split";
  if (c->wn == 3 ? (c->wt != 1 && c->wt != 2 && c->wt != 4) : (c->wt != 1 && c->wt != 2)) return "W tiles per CTA (wt) not 1, 2 (or 4 with wgmma)";
  if (c->wn != 3 && c->warps != 4 && c->warps != 8) return "warps not 4 or 8";
  if (!pz_gemm_bn_ok(c->bn, c->wt)) return "token tile (bn) not a power of two in 16..256 (16..128 at wt 4)";
  (void)m;
  return NULL;
}

pz_status pz_gemm_resolve(const pz_gemm_target *t, int m, int n, int k, bool zero_init, const pz_gemm_config *want,
                          pz_gemm_config *out) {
  if (!t || !out) return pz_error(PZ_ERR_INVALID_ARG, "gemm resolve: NULL argument");
  if (n < 64 || n % 64 || k < 64 || k % 64) /* the family's shapes (pz_gemm_check); the heuristic divides by n's tiles */
    return pz_error(PZ_ERR_SHAPE, "gemm resolve: n=%d and k=%d must be positive multiples of 64", n, k);
  pz_runtime_opts dflt;
  const pz_runtime_opts *ro = t->ro;
  if (!ro) { pz_runtime_opts_default(&dflt); ro = &dflt; }
  pz_gemm_config w = want ? *want : (pz_gemm_config){PZ_GEMM_AUTO, 0, 0, 0, 0, 0};
  /* zero_init = false under AUTO runs the kernel zero_init = true would run, minus its zeroing
   * (in-kernel zero or memset node -> plain atomic split-K with the same splits and tile). So a
   * prezero consumer differs from the baseline only by the skipped zeroing: same partial sums,
   * bit-identical at split counts <= 2 (docs/ARCHITECTURE.md §5), and never a different tile choice.
   * A baseline that is not split-K (full-K, serial, cuBLAS) stays as it is: prezero is a no-op.
   * gemm_match_baseline = 0 (PREZERO_GEMM_MATCH_BASELINE=0) picks the tuner's own best
   * zero_init = false kernel instead. */
  if (!zero_init && w.flavour == PZ_GEMM_AUTO && ro->gemm_match_baseline) {
    PZ_CHECK(pz_gemm_resolve(t, m, n, k, true, &w, out));
    if (out->flavour == PZ_GEMM_SPLITK_ZERO || out->flavour == PZ_GEMM_MEMSET_SPLITK) out->flavour = PZ_GEMM_SPLITK_ATOMIC;
    return PZ_OK;
  }
  const char *source = "the heuristic";
  /* PREZERO_GEMM_BN=0 (one tile of all m tokens) asks the heuristic for its split count without tiles */
  const bool tiles = ro->gemm_bn != 0;
  pz_gemm_config c = pz_gemm_heuristic_tiles(t->sm_count, m, n, k, zero_init, t->hopper, tiles);
  const pz_tuner_entry *e = ro->gemm_tuner && t->table ? pz_tuner_lookup(t->table, m, n, k) : NULL;
  pz_gemm_flavour f = w.flavour;
  const bool automatic = f == PZ_GEMM_AUTO;
  if (f == PZ_GEMM_AUTO) f = t->force; /* pz_gemm_ctx_set_force (baselines) */
  if (f == PZ_GEMM_AUTO && ro->gemm_force[0]) {
    f = pz_gemm_flavour_parse(ro->gemm_force);
    if (f == PZ_GEMM_FLAVOUR_COUNT)
      return pz_error(PZ_ERR_INVALID_ARG, "PREZERO_GEMM_FORCE=%s: use atomic|zero|memset|fullk|serial|cublas or 1..6", ro->gemm_force);
    source = "PREZERO_GEMM_FORCE";
  }
  if (f == PZ_GEMM_AUTO && e) {
    f = zero_init ? e->best_zero : e->best_nozero;
    source = "the tuner table";
  }
  if (f != PZ_GEMM_AUTO) {
    if (e && e->cfg[f].splits > 0) {
      c = e->cfg[f];
      if (!strcmp(source, "the heuristic")) source = "the tuner table";
    } else if (f == PZ_GEMM_FULLK || f == PZ_GEMM_CUBLAS) {
      c.splits = 1;
    } else if (c.splits == 1 && f != PZ_GEMM_SPLITK_SERIAL && k / (c.wn >= 3 ? 64 : 32) >= 2) {
      c.splits = 2; /* a split-K flavour asked of a shape the heuristic runs whole (one k-block: stays 1) */
    }
    c.flavour = f;
  }
  if (zero_init && c.flavour == PZ_GEMM_SPLITK_ATOMIC) c.flavour = PZ_GEMM_MEMSET_SPLITK;
  if (automatic) { /* the options' overrides act on AUTO launches only */
    if (ro->gemm_wn >= 0 && ro->gemm_wn != c.wn) { /* a kernel switch: the other kernel's grid rule */
      if (ro->gemm_wn == 4) { /* stream-K zeroes C only through the memset node */
        c.splits = t->sm_count;
        if (c.flavour == PZ_GEMM_SPLITK_ZERO) c.flavour = PZ_GEMM_MEMSET_SPLITK;
      }
      else if (c.wn == 4) { /* from stream-K: the heuristic's grid (its tile and token tile with the wgmma kernel) */
        const pz_gemm_config h = pz_gemm_heuristic_tiles(t->sm_count, m, n, k, zero_init, t->hopper, tiles);
        c.splits = h.splits;
        if (ro->gemm_wn == 3 && h.wn == 3) c.wt = h.wt, c.warps = h.warps, c.bn = h.bn;
      }
      c.wn = ro->gemm_wn;
      source = "PREZERO_GEMM_WN";
    }
    if (ro->gemm_splits > 0) { /* a global option: capped at each GEMM's k-blocks (documented), not an error */
      /* A fixed split count (the deterministic mode) runs the split-K kernel, not stream-K, unless
       * PREZERO_GEMM_WN=4 asks for stream-K: then it is that kernel's CTA count. */
      if (c.wn == 4 && ro->gemm_wn != 4) c.wn = 3;
      const int kblocks = k / (c.wn >= 3 ? 64 : 32);
      c.splits = c.wn == 4 ? ro->gemm_splits
                 : ro->gemm_splits < kblocks ? ro->gemm_splits : kblocks > 0 ? kblocks : 1;
      source = "PREZERO_GEMM_SPLITS";
    }
    if (ro->gemm_wt > 0) {
      c.wt = ro->gemm_wt;
      if (c.wn == 3) c.warps = pz_gemm_wgmma_plain_warps(c.wt); /* the plain kernel of that tile, never the token split */
      source = "PREZERO_GEMM_WT";
    }
    if (ro->gemm_warps > 0) { c.warps = ro->gemm_warps; source = "PREZERO_GEMM_WARPS"; }
    if (ro->gemm_bn >= 0 && c.wn == 3 && c.bn != ro->gemm_bn) { c.bn = ro->gemm_bn; source = "PREZERO_GEMM_BN"; }
  } else { /* an explicit config: its non-zero fields are obeyed as given */
    if (w.splits > 0) c.splits = w.splits;
    if (w.wt > 0) c.wt = w.wt;
    if (w.warps > 0) { /* the caller names the kernel: its token tile is taken as given, 0 = all m tokens */
      c.warps = w.warps;
      c.wn = w.wn;
      c.bn = w.bn;
    } else if (w.wt > 0 && c.wn == 3) {
      c.warps = pz_gemm_wgmma_plain_warps(c.wt); /* a tile alone: the plain kernel, not the token split */
    }
    if (w.bn > 0) c.bn = w.bn;
    source = "the caller's config";
  }
  if (c.flavour == PZ_GEMM_FULLK || c.flavour == PZ_GEMM_CUBLAS) c.splits = 1;
  /* a token tile from the table belongs to the wgmma kernel's tile it was tuned with: another kernel or
   * tile (an option or the caller switched it) takes all m tokens again; a caller's own bn is checked */
  if (c.bn && (automatic || w.bn == 0) && (c.wn != 3 || (c.wt == 4 && c.bn > 128))) c.bn = 0;
  const char *why = config_invalid(t, m, k, &c);
  if (why)
    return pz_error(PZ_ERR_INVALID_ARG,
                    "gemm m=%d n=%d k=%d: %s gives %s splits=%d wt=%d warps=%d wn=%d bn=%d, which cannot run: %s; fix or "
                    "delete it (a tuner table: re-run prezero tune)",
                    m, n, k, source, pz_gemm_flavour_name(c.flavour), c.splits, c.wt, c.warps, c.wn, c.bn, why);
  *out = c;
  return PZ_OK;
}

void pz_gemm_ctx_target(const pz_gemm_ctx *ctx, pz_gemm_target *t) {
  t->sm_count = ctx->sm_count;
  t->hopper = ctx->wgmma;
  t->table = &ctx->table;
  t->ro = &ctx->ro;
  t->force = ctx->force;
}

pz_status pz_gemm_choose(pz_gemm_ctx *ctx, int m, int n, int k, bool zero_init, pz_gemm_config *out,
                         bool *is_split_k) {
  if (!ctx || !out) return pz_error(PZ_ERR_INVALID_ARG, "gemm choose: NULL argument");
  pz_gemm_target t;
  pz_gemm_ctx_target(ctx, &t);
  PZ_CHECK(pz_gemm_resolve(&t, m, n, k, zero_init, NULL, out));
  if (is_split_k) *is_split_k = flavour_is_split_k(out->flavour);
  return PZ_OK;
}

static pz_status launch_cublas(pz_gemm_ctx *ctx, const pz_gemm_args *a, cudaStream_t s) {
  const float alpha = 1.0f, beta = 0.0f;
  int64_t ldw = a->ldw ? a->ldw : a->k;
  if (cublasSetStream(ctx->cublas, s) != CUBLAS_STATUS_SUCCESS ||
      cublasSetWorkspace(ctx->cublas, ctx->cublas_ws, PZ_GEMM_CUBLAS_WS) != CUBLAS_STATUS_SUCCESS)
    return pz_error(PZ_ERR_CUDA, "gemm cublas: cannot set stream / workspace");
  /* Column-major view: C'[n, m] = W'ᵀ · A' with W' = W as [k, n], A' = A as [k, m]. */
  cublasStatus_t cs = cublasGemmEx(ctx->cublas, CUBLAS_OP_T, CUBLAS_OP_N, a->n, a->m, a->k, &alpha,
                                   a->W, CUDA_R_16BF, (int)ldw, a->A, CUDA_R_16BF, (int)a->lda, &beta,
                                   a->C, a->c_dtype == PZ_BF16 ? CUDA_R_16BF : CUDA_R_32F, (int)a->ldc,
                                   CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  if (cs != CUBLAS_STATUS_SUCCESS) return pz_error(PZ_ERR_CUDA, "gemm cublas: cublasGemmEx status %d", (int)cs);
  if (a->bias) PZ_CHECK(pz_gemm_bias_add(a->C, a->ldc, a->c_dtype, a->bias, a->m, a->n, s));
  return PZ_OK;
}

pz_status pz_gemm_launch(pz_gemm_ctx *ctx, const pz_gemm_args *a, cudaStream_t s) {
  if (!ctx) return pz_error(PZ_ERR_INVALID_ARG, "gemm: ctx is NULL");
  if (!ctx->sems) return pz_error(PZ_ERR_INVALID_ARG, "gemm: a model handle (pz_gemm_ctx_create_model) only answers choices; create one with pz_gemm_ctx_create to launch");
  PZ_CHECK(pz_gemm_check(a));
  pz_gemm_target t;
  pz_gemm_ctx_target(ctx, &t);
  pz_gemm_config c;
  PZ_CHECK(pz_gemm_resolve(&t, a->m, a->n, a->k, a->zero_init, &a->config, &c));
  pz_gemm_args la = *a;
  la.no_l2pf = !ctx->ro.gemm_l2pf;
  la.wg_ks = ctx->ro.gemm_wg_ks > 0 ? ctx->ro.gemm_wg_ks : 0;
  la.pdl = ctx->ro.pdl != 0;
  a = &la;
  switch (c.flavour) {
    case PZ_GEMM_CUBLAS: return launch_cublas(ctx, a, s);
    case PZ_GEMM_MEMSET_SPLITK: {
      size_t es = pz_dtype_size(a->c_dtype);
      if (a->ldc == a->n) PZ_CUDA_CHECK(cudaMemsetAsync(a->C, 0, (size_t)a->m * a->n * es, s));
      else PZ_CUDA_CHECK(cudaMemset2DAsync(a->C, (size_t)a->ldc * es, 0, (size_t)a->n * es, (size_t)a->m, s));
      pz_gemm_config k = c;
      k.flavour = PZ_GEMM_SPLITK_ATOMIC; /* the zeroing is the memset node above */
      return pz_gemm_kernel_launch(a, &k, ctx->sems, PZ_GEMM_SEM_CAPACITY, s);
    }
    case PZ_GEMM_SPLITK_ATOMIC:
    case PZ_GEMM_SPLITK_ZERO:
    case PZ_GEMM_FULLK:
    case PZ_GEMM_SPLITK_SERIAL:
      return pz_gemm_kernel_launch(a, &c, ctx->sems, PZ_GEMM_SEM_CAPACITY, s);
    default: return pz_error(PZ_ERR_INTERNAL, "gemm: unresolved flavour %d", (int)c.flavour);
  }
}
