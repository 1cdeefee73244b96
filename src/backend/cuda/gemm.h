/* CUDA split-K GEMM family for decode shapes (sm_90a): C[m,n] (+)= A[m,k]·W[n,k]ᵀ (+ bias),
 * six flavours behind one capturable launcher, plus the handle that owns their workspace. */
#ifndef PZ_BACKEND_CUDA_GEMM_H
#define PZ_BACKEND_CUDA_GEMM_H
#include <stdbool.h>
#include <stdint.h>
#include <cuda_runtime.h>
#include "prezero.h"
#include "core/dtype.h"
#include "backend/gemm_table.h"
#ifdef __cplusplus
extern "C" {
#endif

/* The flavours (pz_gemm_flavour), their names and the kernel choice (pz_gemm_config): backend/gemm_table.h. */

/* One GEMM. Shapes: 1 <= m <= 256; n, k multiples of 64.
 *   A: bf16 [m, lda] row-major, lda >= k, lda % 8 == 0, 16-byte aligned.
 *   W: bf16 [n, ldw] (nn.Linear layout), ldw >= k (0 means k), ldw % 8 == 0, 16-byte aligned.
 *   C: c_dtype PZ_F32 or PZ_BF16, [m, ldc] row-major, ldc >= n: a column slice of a wider
 *      buffer is written only in its n columns.
 *   bias: f32 [n] or NULL; added exactly once (by split 0) in every flavour.
 * config.flavour = AUTO (and/or splits/wt = 0) lets the tuner / heuristic fill them. */
typedef struct pz_gemm_args {
  int m, n, k;
  const void *A;
  int64_t lda;
  const void *W;
  int64_t ldw;
  void *C;
  int64_t ldc;
  pz_dtype c_dtype;
  const float *bias;
  bool zero_init;
  pz_gemm_config config;
  bool no_l2pf;       /* set by pz_gemm_launch from the handle's options (PREZERO_GEMM_L2PF=0) */
  int wg_ks;          /* set by pz_gemm_launch (PREZERO_GEMM_WG_KS): k-blocks per wgmma stage, 0 default */
  bool pdl;           /* set by pz_gemm_launch (PREZERO_PDL, default on): the wgmma split-K and stream-K
                       * kernels are launched with programmatic dependent launch: they wait in-kernel
                       * (griddepcontrol.wait) for the kernel ahead before they read A or touch C or
                       * their semaphores; the split-K kernel requests its first W tiles before that */
} pz_gemm_args;

typedef struct pz_gemm_ctx pz_gemm_ctx;

/* Creates a handle on the current CUDA device: per-tile semaphores (zeroed once; they reset
 * themselves), a cuBLAS handle with a fixed 32 MiB workspace, device name / SM count, and the
 * tuner table loaded from the cache (tuner.h). One handle per stream: two GEMMs of one
 * handle must not run concurrently. Errors: PZ_ERR_NO_DEVICE, PZ_ERR_CUDA, PZ_ERR_OOM. */
pz_status pz_gemm_ctx_create(pz_gemm_ctx **out);
/* The same with explicit run-time options (core/options.h: the PREZERO_GEMM_* fields,
 * cache_dir, gemm_builtin), read once here; pz_gemm_ctx_create reads them from the environment.
 * Errors as above, plus PZ_ERR_INVALID_ARG for a bad forced flavour, wt or warps. */
struct pz_runtime_opts;
pz_status pz_gemm_ctx_create_opts(const struct pz_runtime_opts *ro, pz_gemm_ctx **out);
/* The options the handle was created with (for the ops that run on it, e.g. the MLA op). */
const struct pz_runtime_opts *pz_gemm_ctx_opts(const pz_gemm_ctx *c);
/* A handle that only answers pz_gemm_choose / pz_gemm_heuristic for a device it does not touch
 * (no CUDA call: plans on a machine without that GPU): device name and SM count pick the tuner
 * table as pz_gemm_ctx_create would (cache, then the built-in table), hopper the wgmma kernel.
 * pz_gemm_launch refuses it (PZ_ERR_INVALID_ARG). Errors: PZ_ERR_INVALID_ARG, PZ_ERR_OOM. */
pz_status pz_gemm_ctx_create_model(const char *device, int sm_count, bool hopper, pz_gemm_ctx **out);
/* Makes every AUTO launch of this handle resolve to flavour f (its tuned config where the table
 * has one, else the heuristic's tile with f's split rule), before PREZERO_GEMM_FORCE is read; AUTO
 * restores the normal choice. For baselines (prezero compare --baseline). Errors: PZ_ERR_INVALID_ARG. */
pz_status pz_gemm_ctx_set_force(pz_gemm_ctx *c, pz_gemm_flavour f);
/* One line naming a resolved config: "cublas", or "<wgmma|mma.sync> <flavour> splits=S wt=T". */
void pz_gemm_config_describe(const pz_gemm_config *c, char *buf, size_t len);
/* Frees the semaphores, the cuBLAS handle and workspace, and the table; NULL is ignored. */
void pz_gemm_ctx_destroy(pz_gemm_ctx *ctx);
/* Device name and SM count the handle was created on (for the tuner key). */
const char *pz_gemm_ctx_device_name(const pz_gemm_ctx *ctx);
int pz_gemm_ctx_sm_count(const pz_gemm_ctx *ctx);
struct pz_tuner_table;
/* The handle's tuner table (never NULL). */
struct pz_tuner_table *pz_gemm_ctx_table(pz_gemm_ctx *ctx);

/* Validates a GEMM's shape and pointers: PZ_ERR_SHAPE (m outside 1..256, n or k not a
 * multiple of 64, ld too small or not a multiple of 8), PZ_ERR_DTYPE, PZ_ERR_INVALID_ARG
 * (NULL or misaligned pointer). */
pz_status pz_gemm_check(const pz_gemm_args *a);

/* What a GEMM choice depends on besides the shape: the device, its tuner table and the options. */
struct pz_tuner_table;
typedef struct pz_gemm_target {
  int sm_count;
  bool hopper;                         /* compute capability 9: the wgmma kernel (wn 3) exists */
  const struct pz_tuner_table *table;  /* NULL: none */
  const struct pz_runtime_opts *ro;    /* NULL: the defaults (no forced flavour, table on, ...) */
  pz_gemm_flavour force;               /* AUTO: none (pz_gemm_ctx_set_force) */
} pz_gemm_target;

/* The one GEMM choice, pure (no device, no environment): a full config for C[m,n] (+)= A[m,k]·W[n,k]ᵀ
 * with zero_init. want (NULL = AUTO) is the caller's config: AUTO takes, in order, t->force, the
 * forced flavour of ro (PREZERO_GEMM_FORCE), the tuner table's best for (m, n, k) and zero_init,
 * the heuristic; then ro's splits / wt / warps / wn / bn overrides. An explicit flavour takes its table
 * entry (else the heuristic's tile) and then want's non-zero fields; a want with warps > 0 names the
 * kernel, so its wn and bn are taken as they are (bn 0: one token tile of all m tokens, never the
 * table's). zero_init = true turns
 * SPLITK_ATOMIC into MEMSET_SPLITK; zero_init = false under AUTO keeps the zero_init = true choice
 * minus its zeroing (unless ro->gemm_match_baseline is 0). Nothing is clamped: a result the
 * kernels cannot run (splits beyond the k-blocks, a wt the layout lacks, wgmma off Hopper) is
 * PZ_ERR_INVALID_ARG naming where it came from (table entry, option, caller); n or k not a
 * positive multiple of 64 (no kernel of the family) is PZ_ERR_SHAPE. The launcher, the
 * tuner, compare, the executor's plan and `prezero plan` all go through it. */
pz_status pz_gemm_resolve(const pz_gemm_target *t, int m, int n, int k, bool zero_init, const pz_gemm_config *want,
                          pz_gemm_config *out);
/* The handle's target (its SM count, Hopper flag, table, options and forced flavour). */
void pz_gemm_ctx_target(const pz_gemm_ctx *ctx, pz_gemm_target *t);

/* The kernel AUTO resolves to for (m, n, k, zero_init): pz_gemm_ctx_set_force, then the
 * handle's forced flavour (PREZERO_GEMM_FORCE, name or digit, read at creation) win, then its
 * splits / wt (PREZERO_GEMM_SPLITS / _WT), then the tuner table, then the heuristic
 * (pz_gemm_heuristic); PREZERO_GEMM_TUNER=0 ignores the table; PREZERO_GEMM_WARPS. The switches act
 * on AUTO launches only (an explicit args.config is obeyed as given). *is_split_k tells prezero
 * whether zero_init = false has any effect (false for FULLK, CUBLAS, SERIAL: they never need a
 * zeroed C, so prezero is a no-op for them). zero_init = false resolves to the zero_init = true
 * choice with its zeroing dropped (same splits and tile), unless PREZERO_GEMM_MATCH_BASELINE=0.
 * m tokens, n and k elements. Errors: PZ_ERR_INVALID_ARG (ctx or out NULL), and those of
 * pz_gemm_resolve (PZ_ERR_SHAPE, PZ_ERR_INVALID_ARG). */
pz_status pz_gemm_choose(pz_gemm_ctx *ctx, int m, int n, int k, bool zero_init,
                         pz_gemm_config *out, bool *is_split_k);  /* = pz_gemm_resolve(target(ctx), AUTO) */

/* Heuristic without a table. hopper (and n, k multiples of 64): the wgmma kernel (wn 3, one
 * consumer warpgroup) with the split count of a wave model (gemm.c), and token tiles of 64 (bn)
 * from m = 128 with one W tile per CTA and n <= 2048. Otherwise (fitted to the
 * mma.sync rows of bench/results/gemm_h200_tuner_table.json):
 * 4-warp CTAs of 16*wt columns, wt 2 for m <= 64 else 1, split count so that (n tiles x splits)
 * is about 4 CTAs per SM, each split keeping >= 8 K chunks of 32 (at most 32 splits). flavour: SPLITK_ATOMIC
 * (zero_init false) / SPLITK_ZERO (zero_init true), FULLK when splits comes out as 1. */
pz_gemm_config pz_gemm_heuristic(int sm_count, int m, int n, int k, bool zero_init, bool hopper);
/* The same; token_tiles false: no token tile (bn 0) and the split count chosen for one tile of all m
 * tokens (what PREZERO_GEMM_BN=0 asks of the resolver). pz_gemm_heuristic passes true. */
pz_gemm_config pz_gemm_heuristic_tiles(int sm_count, int m, int n, int k, bool zero_init, bool hopper, bool token_tiles);
/* True when the handle's device is a Hopper (compute capability 9) and the wgmma kernel runs. */
bool pz_gemm_ctx_has_wgmma(const pz_gemm_ctx *ctx);

/* Enqueues the GEMM on `stream`. No host sync, no allocation: capturable in a CUDA graph.
 * An explicit flavour with splits/wt 0 takes them from the table entry of that flavour, else
 * the heuristic. SPLITK_ATOMIC with zero_init = true runs as MEMSET_SPLITK.
 * The register-ring kernels' W loads carry the L2::256B prefetch-size hint (measured on H200:
 * -5% time on 30 MB streams); PREZERO_GEMM_L2PF=0 (read once) turns it off. Errors: those of pz_gemm_check, PZ_ERR_CUDA (launch), PZ_ERR_UNSUPPORTED. */
pz_status pz_gemm_launch(pz_gemm_ctx *ctx, const pz_gemm_args *args, cudaStream_t stream);

/* ---- Kernels (kernels/gemm_splitk.cu); used by the launcher and the benchmark. ---- */

/* Raw kernel launch of a config pz_gemm_resolve returned (flavour SPLITK_ATOMIC, SPLITK_ZERO,
 * FULLK or SPLITK_SERIAL; wn 0 or 1, or 3 / 4 handed to the Hopper launchers below; the layout's
 * own rules: warps 0 means 8, m > 64 runs wt 1). sems: the handle's semaphore array
 * (sem_capacity ints, >= pz_gemm_sem_need, zero at first use). Shapes are not re-checked
 * (pz_gemm_check is the launcher's). Errors: PZ_ERR_INVALID_ARG (warps not 4/8, another
 * flavour, wt not 1/2, wn 2 (the removed staged kernel) or above 4, n not a multiple of the CTA's columns, splits outside
 * 1..k/32), PZ_ERR_SHAPE (too few semaphores), PZ_ERR_CUDA. */
pz_status pz_gemm_kernel_launch(const pz_gemm_args *a, const pz_gemm_config *cfg, int *sems, int64_t sem_capacity,
                                cudaStream_t stream);
/* Hopper kernel (kernels/gemm_wgmma.cu), config wn = 3: TMA + mbarrier ring of W / A tiles, one
 * producer warp, wgmma consumer warpgroups with W's rows on the M = 64 side. wt = 64-row W tiles
 * per CTA: 1 (one warpgroup), 2 (two), 4 (two warpgroups of two m64 wgmmas each; m tiles of at
 * most 128 tokens), so a CTA owns 64*wt output columns and pz_gemm_wgmma_bn(m, wt) tokens; k is
 * consumed in 64-wide blocks (splits 1..k/64). Flavours 1, 2, 4, 5 as above. warps 9 with wt 1 is
 * the token split: two warpgroups share the 64-row W tile and each takes half of the
 * max(16, pz_gemm_wgmma_bn(m, 1)) tokens (same grid as wt 1, twice the wgmma issuers per CTA);
 * any other warps value is ignored. bn (config bn): the token tile, 16..256 (128 at wt 4), a power of
 * two, or 0 for pz_gemm_wgmma_bn(m, wt); a tile above that is taken as that (no empty tiles).
 * Errors: PZ_ERR_UNSUPPORTED (not initialised: no Hopper device or no tensor-map encoder in the
 * driver), PZ_ERR_INVALID_ARG (flavour, wt, n not a multiple of 64*wt, splits, bn), PZ_ERR_SHAPE
 * (semaphores, strides), PZ_ERR_CUDA. */
pz_status pz_gemm_wgmma_launch(const pz_gemm_args *a, pz_gemm_flavour flavour, int splits, int wt, int warps, int bn,
                               int *sems, int64_t sem_capacity, cudaStream_t stream);
/* Hopper stream-K kernel (kernels/gemm_wgmma_streamk.cu), config wn = 4: `ctas` persistent CTAs
 * (normally the SM count; fewer when there are fewer (tile, k-block) units) each take an equal
 * contiguous share of the units, W tiles as in pz_gemm_wgmma_launch (wt 1, 2, 4), and add their
 * partial tiles into C atomically, so C must hold zeros on entry (flavour SPLITK_ATOMIC only;
 * MEMSET_SPLITK is this after the launcher's memset node). The order in which partials land is not
 * fixed: not bit-reproducible run to run. Errors: PZ_ERR_INVALID_ARG (flavour, wt, ctas < 1, n not
 * a multiple of 64*wt), PZ_ERR_SHAPE (strides), PZ_ERR_UNSUPPORTED (not initialised), PZ_ERR_CUDA. */
pz_status pz_gemm_wgmma_streamk_launch(const pz_gemm_args *a, pz_gemm_flavour flavour, int ctas, int wt,
                                       cudaStream_t stream);
/* Raises the stream-K kernels' shared-memory limit (called by pz_gemm_wgmma_init). Errors: PZ_ERR_CUDA. */
pz_status pz_gemm_wgmma_streamk_init(void);
/* The warps field of the Hopper kernels' plain configs (wn 3, 4) for wt 64-row W tiles: 4 per consumer
 * warpgroup + the producer, so 5 at wt 1 and 9 at wt 2, 4 (warps 9 at wt 1 is the token split below). */
static inline int pz_gemm_wgmma_plain_warps(int wt) { return wt == 1 ? 5 : 9; }
/* True for the Hopper kernel's token split (wn 3, wt 1, warps 9: two warpgroups share the 64-row W
 * tile, half the tokens each; pz_gemm_wgmma_launch). */
static inline bool pz_gemm_wgmma_token_split(const pz_gemm_config *c) { return c->wn == 3 && c->wt == 1 && c->warps == 9; }
/* Token tile of the Hopper kernel for batch m: the smallest of 8, 16, .., 256 (128 for wt 4) >= m. */
int pz_gemm_wgmma_bn(int m, int wt);
/* Resolves the driver's tensor-map encoder and raises the Hopper kernels' shared-memory limit;
 * called by pz_gemm_kernels_init on a compute-capability-9 device. Errors: PZ_ERR_UNSUPPORTED,
 * PZ_ERR_CUDA. */
pz_status pz_gemm_wgmma_init(void);
/* When `hopper` (compute capability 9, read once by pz_gemm_ctx_create), initialises the wgmma
 * kernels (pz_gemm_wgmma_init); nothing otherwise. Errors: PZ_ERR_CUDA, PZ_ERR_UNSUPPORTED. */
pz_status pz_gemm_kernels_init(bool hopper);
/* Number of semaphore ints a launch needs (2 per (token chunk, 16*wt-column n tile)); bounds
 * the wider tiles of wn 1 too. */
int64_t pz_gemm_sem_need(int m, int n, int wt);
/* Fills n bf16 values at p (device) with a hash of (index, seed): integers in [-4, 4] when
 * `ints`, else reals in [-1, 1) on a 2^-23 grid rounded to bf16. The 32-bit mixer is
 * Wellons' "lowbias32" (hash-prospector: constants 0x7feb352d, 0x846ca68b).
 * Errors: PZ_ERR_CUDA (launch). */
pz_status pz_gemm_fill_bf16(void *p, int64_t n, uint32_t seed, bool ints, cudaStream_t s);
/* Bias add for the cuBLAS flavour: C[i, j] += bias[j] (f32 bias; C f32 or bf16, row stride
 * ldc elements) over m rows and n columns. Errors: PZ_ERR_CUDA (launch). */
pz_status pz_gemm_bias_add(void *C, int64_t ldc, pz_dtype c_dtype, const float *bias, int m,
                           int n, cudaStream_t s);
/* Plain streaming read of `bytes` (multiple of 16) at p: 16-byte loads, grid-stride over
 * 4*sm_count CTAs of 512 threads, one reduction store into sink (never skipped by the
 * compiler). The benchmark's yardstick. Errors: PZ_ERR_CUDA (launch). */
pz_status pz_gemm_stream_read(const void *p, int64_t bytes, unsigned *sink, int sm_count,
                              cudaStream_t s);
#ifdef __cplusplus
}
#endif
#endif
