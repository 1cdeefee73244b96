/* prezero run-time options (public): every switch of the library in one struct. The library
 * reads the environment in one place only, pz_runtime_opts_from_env (src/core/options.c), when an
 * engine, executor or GEMM handle is created without options; a caller can fill the struct itself
 * (pz_runtime_opts_default, then any field) and pass it instead: pz_engine_config.options. */
#ifndef PREZERO_OPTIONS_H
#define PREZERO_OPTIONS_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "prezero.h"
#ifdef __cplusplus
extern "C" {
#endif

#define PZ_OPTS_PATH 1024
#define PZ_OPTS_MAX_GRAPH_SIZES 16 /* sizes in PREZERO_CUDA_GRAPH_SIZES, more are refused */

/* Each field names the environment variable it is read from (the README's environment table
 * says what each does). -1 in an int field means "not set: the library's own choice". Fill a struct
 * of your own with pz_runtime_opts_default first, then set fields: pz_runtime_opts_take (how engines,
 * executors and GEMM handles take options) refuses one that the environment reader could not have
 * produced (pz_runtime_opts_check: e.g. a struct zeroed with memset has ar_algo "" and gemm_splits
 * 0, both refused); the environment reader checks every variable it reads. The two
 * message switches, PREZERO_LOG_ERRORS and PREZERO_PROGRESS, are not fields: they are read
 * where they act (pz_runtime_log_errors, pz_runtime_progress). */
typedef struct pz_runtime_opts {
  /* graph passes */
  int prezero;                        /* PREZERO_ENABLE: -1 unset (off), 0, 1 */
  char disable_passes[256];           /* PREZERO_DISABLE_PASSES: comma-separated pass names ("prezero") or "all" */
  char dump_graph[PZ_OPTS_PATH];      /* PREZERO_DUMP_GRAPH: folder for before/after dumps ("" none) */
  int attn_slots;                     /* PREZERO_ATTN_SLOTS: 1 thread slices into the slotted ops (attention,
                                       * a quantised MoE's shared gate | up), 0 not */
  int plan_per_batch;                 /* PREZERO_PLAN_PER_BATCH: 1 per-batch plans (CUDA), 0 the static rewrite */
  /* fill gate and donor launch */
  int force_gate;                     /* PREZERO_FORCE_GATE: -1 the gate decides, 0 off, 1 on */
  int ar_proto;                       /* PREZERO_AR_PROTO: -1 by size, 0 LL packets, 1 flag protocol */
  int ar_cluster;                     /* PREZERO_AR_CLUSTER: -1 default, 0 never, 1 wherever K is 2..8 */
  int ar_ctas_per_row;                /* PREZERO_AR_CTAS_PER_ROW: 0 by plan, else 1..16 */
  char ar_algo[16];                   /* PREZERO_AR_ALGO: "fused" (default) or "nccl" */
  int64_t ar_timeout_us;              /* PREZERO_AR_TIMEOUT_US: -1 the communicator's own, else µs per wait (0 forever) */
  char nccl_lib[PZ_OPTS_PATH];        /* PREZERO_NCCL_LIB: library to dlopen ("" the default names) */
  /* split-K GEMMs */
  char gemm_force[16];                /* PREZERO_GEMM_FORCE: "" none, else atomic, zero, memset, fullk,
                                         serial, cublas (or 1..6) */
  int gemm_splits, gemm_wt, gemm_warps, gemm_wn; /* PREZERO_GEMM_SPLITS / _WT / _WARPS / _WN: -1 unset */
  int gemm_tuner;                     /* PREZERO_GEMM_TUNER: 1 use the tuner table, 0 heuristic only */
  int gemm_builtin;                   /* PREZERO_GEMM_BUILTIN: 1 built-in table when no cache file, 0 never */
  int gemm_match_baseline;            /* PREZERO_GEMM_MATCH_BASELINE: 1 prezero GEMMs keep the baseline's config */
  int gemm_l2pf;                      /* PREZERO_GEMM_L2PF: 1 W prefetch-size hint on (mma.sync kernels), 0 off */
  int gemm_wg_ks;                     /* PREZERO_GEMM_WG_KS: 64-wide k-blocks per TMA stage of the wgmma kernel
                                       * (1, 2 or 4; -1 unset: 2 where each split has 2 or 4 k-blocks,
                                       * else 1) */
  char cache_dir[PZ_OPTS_PATH];       /* PREZERO_CACHE_DIR, else $HOME/.cache/prezero (the environment
                                         reader); pz_runtime_opts_default: ./.cache/prezero */
  int tuner_iters, tuner_reps, tuner_legacy; /* PREZERO_TUNER_ITERS / _REPS / _LEGACY: -1 unset */
  /* CUDA executor */
  int cuda_graph;                     /* PREZERO_CUDA_GRAPH: 1 CUDA graphs, 0 eager */
  char cuda_graph_sizes[256];         /* PREZERO_CUDA_GRAPH_SIZES: "1,2,4" ("" the default list); at most
                                       * PZ_OPTS_MAX_GRAPH_SIZES integers in 1..65536, else refused */
  int64_t cuda_load_chunk_kb;         /* PREZERO_CUDA_LOAD_CHUNK_KB: 0 default (64 MiB) */
  int cuda_sync;                      /* PREZERO_CUDA_SYNC: 1 eager steps wait after every node */
  int64_t cuda_reserve_mb;            /* PREZERO_CUDA_RESERVE_MB: -1 default reserve */
  /* ops */
  int mla_splits;                     /* PREZERO_MLA_SPLITS: 0 by occupancy, else KV splits */
  int mla_attn;                       /* PREZERO_MLA_ATTN: 0 (unset) v4 above 16 heads per rank, v2 otherwise;
                                         4 v4 (TMA + wgmma, ping-pong warpgroups; falls to v2 where it has no
                                         kernel), 3 v3 (TMA + wgmma, the score split over both warpgroups; the
                                         former default), 2 v2 (mma.sync), 1 v1 */
  int moe_persistent;                 /* PREZERO_MOE_PERSISTENT: -1 default, 0 off, 1 on */
  int moe_l2pf;                       /* PREZERO_MOE_L2PF: 1 the W4A16 expert kernel of the stored layout
                                       * (PREZERO_MOE_W4_TILED=0 or untileable shapes) prefetches its next
                                       * items' weights into L2, 0 (default: 25-28 % against 32-37 % of
                                       * HBM on the H200 with it on) off; same results */
  int moe_w4_tiled;                   /* PREZERO_MOE_W4_TILED: 1 (default) the CUDA executor rearranges
                                       * INT4 experts once, at load, into the W4A16 kernel's tiled layout
                                       * (pz_moe_w4a16_tile; H and I multiples of 128), 0 keeps the
                                       * compressed-tensors layout; results agree within rounding */
  /* host */
  int cpu_threads;                    /* PREZERO_CPU_THREADS: 0 default (the cores, at most 64), else 1..1024 */
  /* ops (added last, so the fields above keep their offsets) */
  int mla_balance;                    /* PREZERO_MLA_BALANCE: -1 unset or 1 (the default) the MLA attention
                                       * cuts a batch of unequal contexts into slices of one length
                                       * (core/kv_sched.h), 0 every sequence into PREZERO_MLA_SPLITS
                                       * slices of its own. Added in 0.2.0 (the struct grew) */
  int gate_calibrate;                 /* PREZERO_GATE_CALIBRATE: -1 unset or 1 (the default) the CUDA executor
                                       * times the fill gate's figures on the device at creation (about
                                       * 50 ms, some 2,000 all-reduce launches), 0 takes the H200 figures
                                       * (pz_gate_device_default) with the device's own name, SM count and
                                       * occupancy: for runs under compute-sanitizer, where those launches
                                       * cost minutes; the gate then decides from the H200 figures, the
                                       * results are the same. Added in 0.2.0 */
  int pad_attn;                       /* PREZERO_PAD_ATTN: -1 unset or 1 (the default) the rows that pad a
                                       * batch to its captured CUDA-graph size attend one KV position and
                                       * the MoE router sends them to no expert; 0 they attend their whole
                                       * context (max_ctx) and are routed (the former rule). The
                                       * real rows' results agree within rounding (bit for bit with GQA, or
                                       * with PREZERO_MLA_BALANCE=0: MLA's balanced schedule picks its chunk
                                       * from every row's length). Added in 0.2.0 */
  int gemm_bn;                        /* PREZERO_GEMM_BN: -1 unset (the tuner table's token tile, or
                                       * the heuristic's: 64 from m 128 at n <= 2048), 0 the wgmma
                                       * kernel always takes all m tokens (up to 256) in one tile (the switch
                                       * that turns the tuned smaller tiles off), 16..256 (a power of two)
                                       * that tile on every automatic wgmma launch. Added in 0.2.0 */
  int mla_waves;                      /* PREZERO_MLA_WAVES: -1 unset (the default) or 2: where one wave of MLA
                                       * attention v3 CTAs gives a sequence fewer than 4 KV splits (m x head
                                       * groups >= 34 on 132 SMs), the grid has two waves of split slots (m 64: 4,
                                       * m 128: 2) and each step's balanced schedule fills the second only
                                       * when its contexts are unequal enough for that to be faster
                                       * (core/kv_sched.h; H200, Kimi-K2 TP 1, contexts in [1024, 16384]:
                                       * m 128 850 -> 649 µs); 1 one wave of slots (the former rule).
                                       * Added in 0.2.0 */
  int moe_w4_wk;                      /* PREZERO_MOE_W4_WK: -1 unset or 1 (the default) the W4A16 kernel sizes
                                       * its work items on tiled INT4 experts by batch: down takes the whole
                                       * K per warp where the batch has two 128-row items per CTA slot, K
                                       * split over more warps where the fixed split's items fill fewer than
                                       * half the slots; gate/up the smallest split whose expected items fill
                                       * >= 82 % of the slots over their waves (PREZERO_MOE_W4_WAVES)
                                       * (src/backend/cuda/moe_w4_split.h); 0 the fixed K splits of before.
                                       * Results agree within rounding, and depend on the batch size (the
                                       * captured graph's, padding rows included) and the SM count. Added in 0.2.0 */
  int moe_direct;                     /* PREZERO_MOE_DIRECT: -1 unset or 1 (the default) the INT4 / FP8 expert
                                       * kernels' work items whose K is not split across warps write each
                                       * warp's rows straight from its registers (no shared-memory reduction,
                                       * no CTA barrier); 0 through shared memory as before. Bit-identical for
                                       * FP8, and for INT4 unless moe_tail is 1 (then 0 lets those launches take
                                       * the tail split: within rounding). Added in 0.2.0 */
  int mla_lazy;                       /* PREZERO_MLA_LAZY: -1 unset or 1 (the default) MLA attention v4 keeps a
                                       * slice's running max until a tile's max exceeds it by more than 8
                                       * (natural-log units; the lazy rescale of FlashAttention-4), so O is
                                       * rarely rescaled; 0 moves it at every increase. Not the same bits
                                       * (the softmax uses another max); both within the CPU reference's
                                       * bound. Added in 0.2.0 */
  int pdl;                            /* PREZERO_PDL: -1 unset or 1 (the default) the wgmma split-K and
                                       * stream-K GEMMs are launched with programmatic dependent launch
                                       * (Hopper): one may start while the kernel ahead of it in the stream
                                       * runs (the RMSNorm, all-reduce + RMSNorm and MLA kernels ahead of
                                       * a GEMM allow it from their start), requests its first weight tiles
                                       * (split-K), then waits for that kernel (griddepcontrol.wait) before
                                       * it reads A or touches C or its semaphores; 0 plain stream order.
                                       * Bit-identical. Added in 0.2.0 */
  int moe_route_topk;                 /* PREZERO_MOE_ROUTE_TOPK: -1 unset or 1 (the default) the MoE router's
                                       * top-k runs in two stages over the CTA's four warps (each warp's k
                                       * best, then the finalists ranked); 0 warp 0 alone, k rounds over
                                       * every expert, as before. Same ids and weights. Added in 0.2.0 */
  int moe_fork;                       /* PREZERO_MOE_FORK: -1 unset (the default) the INT4 / FP8 MoE op runs its
                                       * bf16 shared experts on a second stream beside the router and the
                                       * gather (latency-bound kernels of one CTA per token and of one CTA),
                                       * joining before the combine at batch <= 4 and before the routed
                                       * experts above; 1 always before the routed experts; 2 always before
                                       * the combine; 0 one stream, the shared experts first (before the
                                       * router; the former order routed first, same bits). A
                                       * fork and join that a CUDA graph records as edges. Bit-identical.
                                       * Added in 0.2.0 */
  int mla_combine;                    /* PREZERO_MLA_COMBINE: -1 unset (the default) the MLA split-KV combine
                                       * runs one warp per (row, head, 128 columns), the slices' weights
                                       * shared by shuffles, 8 slices' partial loads in flight per lane,
                                       * where the grid has at least 16 split slots per row (small
                                       * batches), else one CTA per (row, head) with block barriers, as
                                       * before; 1 the warp layout always; 0 the former always.
                                       * Bit-identical (same operations in the same order). Added in 0.2.0 */
  int mla_proj;                       /* PREZERO_MLA_PROJ: -1 unset or 1 (the default) the MLA op's W_UK
                                       * absorption and W_UV run on tensor cores (their f32 inputs rounded
                                       * to bf16, f32 sums) where the head dims are multiples of 8 (and the
                                       * weights 16-byte aligned); 0 the exact f32 CUDA-core kernels, as
                                       * before (the reference's products and order; the MLA op 1.3-2.3x
                                       * slower on the H200). Not bit-identical to each other;
                                       * prezero ON / OFF stay identical under either. Added in 0.2.0 */
  int moe_w4_up_regs;                 /* PREZERO_MOE_W4_UP_REGS: -1 unset or 1 (the default) the W4A16 gate/up
                                       * kernel on tiled INT4 experts runs 3 CTAs per SM with up to 80
                                       * registers per thread, where its 1-n-tile loop (uniform decode
                                       * routing) does not spill, except where only one wave of 4 per SM holds
                                       * the batch (moe_w4_split.h); 0 always 4 CTAs per SM and 64 registers as
                                       * before (7 registers stored and reloaded per 128-column step, through
                                       * L2). Bit-identical for the same K split unless moe_tail is 1 (the tail
                                       * split follows the grid: within rounding then). Added in 0.2.0 */
  int mlp_gemm;                       /* PREZERO_MLP_GEMM: -1 unset (the default) the bf16 SwiGLU MLPs run as
                                       * two split-K GEMMs, SiLU-and-multiply and a GEMM where H and the
                                       * intermediate size are multiples of 64: a dense layer's MLP at every
                                       * batch, the INT4 / FP8 MoE op's shared experts from 8 tokens; the
                                       * fused expert kernel elsewhere; 1 the GEMMs always (up to 256
                                       * tokens, any shape); 0 the fused kernel always, as before. Same
                                       * operations in another order of f32 sums: not bit-identical to
                                       * each other; the GEMMs as deterministic as the other split-K GEMMs
                                       * (at most 2 splits: same bits). Added in 0.2.0 */
  int mlp_one_gu;                     /* PREZERO_MLP_ONE_GU: -1 unset or 1 (the default) the GEMM path of a
                                       * SwiGLU MLP (PREZERO_MLP_GEMM) runs gate and up as one GEMM of 2 x
                                       * inter rows where up_proj's rows follow gate_proj's in memory (the
                                       * executor's arena keeps them so); 0 two GEMMs always. Another
                                       * split-K order of the same sums: not bit-identical to each other.
                                       * Added in 0.2.0 */
  int moe_w4_waves;                   /* PREZERO_MOE_W4_WAVES: -1 unset or 1 (the default) the W4A16 gate/up
                                       * K split on tiled INT4 experts is the smallest whose expected work
                                       * items fill >= 82 % of the CTA slots over their waves (the wave
                                       * rule, moe_w4_split.h); 0 the fill rule, as before. Results agree
                                       * within rounding. Added in 0.2.0 */
  int moe_route_keys;                 /* PREZERO_MOE_ROUTE_KEYS: -1 unset or 1 (the default) the router's
                                       * two-stage top-k compares one 64-bit rank key per candidate
                                       * (route_key.h); 0 the former branching comparison of (score,
                                       * index) pairs. Same ids and weights. Added in 0.2.0 */
  int moe_dynamic;                    /* PREZERO_MOE_DYNAMIC: 1 the INT4 / FP8 expert kernels claim the
                                       * work items beyond the first wave from a counter as they go (the
                                       * CTAs free first take them; a CTA that started late runs fewer);
                                       * -1 unset (the default) or 0 item i on CTA i mod grid, as before.
                                       * Bit-identical; no effect with moe_l2pf on the stored INT4 layout.
                                       * Off by default: on the H200 it gained 1-2.4 % at TP 2 / 4 and lost
                                       * 1.5-2.5 % at TP 1, m 32-64 (bench/moe/NOTES.md). Added in 0.2.0 */
  int moe_tail;                       /* PREZERO_MOE_TAIL: 1 the INT4 W4A16 expert kernels split each work
                                       * item of a batch's last, part-empty wave of CTAs into sub-items of
                                       * fewer rows with K split over more warps, so that wave takes a
                                       * fraction of an item's time (moe_q_common.cuh tail_of); -1 unset
                                       * (the default) or 0 run those items whole, as before. Opt-in: not
                                       * yet timed on a GPU. Results agree within rounding (K slices summed
                                       * in another grouping); the static and dynamic schedules stay
                                       * bit-identical. Added last */
} pz_runtime_opts;

/* The library's defaults, without reading anything. o NULL: nothing happens. */
PZ_API void pz_runtime_opts_default(pz_runtime_opts *o);
/* Defaults overridden by every PREZERO_* variable that is set (and HOME for cache_dir). Returns
 * 0, or -1 after writing one line naming a malformed value (e.g. PREZERO_GEMM_WT=x) to
 * err[err_len] (may be NULL); the field then keeps its default. o NULL: -1 with that said in err.
 * (It returns 0 / -1 rather than a pz_status because it runs before any handle exists and is
 * used by pz_runtime_opts_take, which turns the -1 into PZ_ERR_INVALID_ARG with the message.) */
PZ_API int pz_runtime_opts_from_env(pz_runtime_opts *o, char *err, size_t err_len);
/* Whether a struct a caller filled in holds only what the environment reader could have put there:
 * every integer field -1 (unset), its default, or in its variable's range (e.g. cpu_threads 0..1024,
 * a switch 0 or 1), the refused values inside a range (gemm_wt 3, ...), force_gate / ar_proto -1..1,
 * ar_algo "fused" or "nccl", gemm_force "" or a flavour, cuda_graph_sizes "" or a list as
 * PREZERO_CUDA_GRAPH_SIZES takes it, every string NUL-terminated in its array. Returns 0, or -1
 * after writing one line naming the first bad field, its variable and what to use to err[err_len]
 * (may be NULL); o NULL: -1. The ranges come from the same table as pz_runtime_opts_from_env's. */
PZ_API int pz_runtime_opts_check(const pz_runtime_opts *o, char *err, size_t err_len);
/* *out = *given (after pz_runtime_opts_check: a bad field is PZ_ERR_INVALID_ARG with its line; it was
 * taken as it was, e.g. cpu_threads -4 clamped, prezero 7 read as off), or (given NULL) the
 * environment's options. A malformed variable is PZ_ERR_INVALID_ARG with the message "[who: ]<variable
 * and what to use>[; fix]" (who and fix may be NULL). The one way engines, executors and GEMM handles
 * take their options. */
PZ_API pz_status pz_runtime_opts_take(pz_runtime_opts *out, const pz_runtime_opts *given, const char *who, const char *fix);

/* The two switches of messages rather than of computation, read where they act (each call):
 * PREZERO_LOG_ERRORS=1 (print every error where it is raised) and PREZERO_PROGRESS (checkpoint
 * loading progress: 0 off, 1 on, -1 unset). */
PZ_API bool pz_runtime_log_errors(void);
PZ_API int pz_runtime_progress(void);

#ifdef __cplusplus
}
#endif
#endif
