/* CUDA executor of the per-rank decode graph: every TP rank on its own GPU in this process (or,
 * with opts.ar_comm, one rank per process), storage + deterministic fill, eager node launches or
 * one CUDA graph per captured batch size. */
#ifndef PZ_BACKEND_CUDA_EXEC_H
#define PZ_BACKEND_CUDA_EXEC_H
#include <stdbool.h>
#include <stdint.h>
#include <cuda_runtime.h>
#include "core/gate.h"
#include "core/ir.h"
#ifdef __cplusplus
extern "C" {
#endif

#define PZ_CUDA_MAX_TP 8
#define PZ_CUDA_MAX_CAPTURE 16 /* = PZ_OPTS_MAX_GRAPH_SIZES: every size the options reader lets through is kept */
#define PZ_CUDA_MAX_M 256      /* largest batch (tokens) a step may have */

typedef struct pz_cuda_exec_opts {
  uint64_t seed;              /* weights and KV cache = f(seed, tensor name, full index), as the CPU executor */
  int n_devices;              /* 0: rank r runs on CUDA device r; else devices[0..tp-1] */
  int devices[PZ_CUDA_MAX_TP];
  int graphs;                 /* -1: PREZERO_CUDA_GRAPH (unset or 1 = on, 0 = eager); 0: eager; 1: CUDA graphs.
                                 Eager with PREZERO_CUDA_SYNC=1 waits after every node and names
                                 the node of a CUDA fault (debugging) */
  int n_capture;              /* 0: PREZERO_CUDA_GRAPH_SIZES ("1,2,4") or the default 1,2,4,8,16,32,64,128 */
  int capture[PZ_CUDA_MAX_CAPTURE]; /* batch sizes (tokens), ascending; sizes above the graph's m are
                                 dropped and the graph's m is always added as the largest */
  int prezero;                /* the graph's prezero flag (pz_prezero_flag): part of the graph cache key.
                                 1 on a graph with no prezero op (the OFF graph, before the pass):
                                 per-batch mode, the executor runs the prezero pass for each batch
                                 size with the consumers whose kernel there is split-K
                                 (pz_pass_prezero_batch); a size where none is runs the OFF graph
                                 itself. PREZERO_PLAN_PER_BATCH=0 uses the static rewrite at every
                                 size instead. pz_cuda_exec_set_prezero switches OFF / ON. */
  pz_device_desc dev;         /* gate description; num_sms == 0: pz_gate_calibrate_cuda on rank 0's GPU */
  int poison;                 /* tests: fill ACT/BUFFER storage with NaN bytes (0xff) before each step */
  int64_t reserve_bytes;      /* bytes to leave free per GPU; 0: pz_cuda_default_reserve() */
  /* Optional weight source (a checkpoint: pz_checkpoint_fill_rows, model/checkpoint.h): when
   * set, every WEIGHT tensor t of rank r is produced on the host by load_weight(load_user, t, r,
   * row0, n_rows, dst) (local rows [row0, row0 + n_rows), a row = the last dim, into dst[n_rows *
   * ne[last]] of t's dtype) and copied to the rank's device storage, instead of the device fill.
   * Rows go through two host staging buffers of load_chunk_bytes each (pinned when possible),
   * so the host fills one while the other is copied; host memory stays at 2 chunks whatever
   * the tensor sizes. Progress is the hook's (pz_checkpoint_fill_rows prints it). Without it,
   * the device fill gives quantised expert tensors (INT4 weight_packed / weight_scale, FP8 e4m3
   * weight / weight_scale_inv) the synthetic quantised values of model/quant_synth.h, bit for
   * bit, computed on the GPU (core/quant_fill.h, pz_fill_quant_launch). */
  pz_status (*load_weight)(void *user, const pz_tensor *t, int rank, int64_t row0, int64_t n_rows, void *dst);
  void *load_user;
  int64_t load_chunk_bytes;   /* 0: PREZERO_CUDA_LOAD_CHUNK_KB (KiB), else 64 MiB; raised to one row when smaller */
  const struct pz_runtime_opts *runtime; /* every other switch (core/options.h), read once at creation;
                                 NULL: from the environment (pz_runtime_opts_from_env) */
  /* One TP rank per process (include/prezero/allreduce.h): NULL runs every rank of the graph in
   * this process (peer access between their GPUs). Else this process runs only rank
   * pz_ar_comm_rank(ar_comm) of the TP group (its world must be the graph's TP), on
   * pz_ar_comm_device(ar_comm); n_devices / devices are ignored. The all-reduce donors run
   * through the communicator's CUDA IPC buffers, and what is combined on the host (argmax
   * candidates, logits shards, rank 0's gate description) goes through its host exchange, so
   * pz_cuda_exec_create, _step and _logits are collective: every rank calls them, in the same
   * order. The communicator is not owned; it must outlive the executor and have been created
   * with max_m >= the graph's m and max_H >= its hidden size. */
  struct pz_ar_comm *ar_comm;
} pz_cuda_exec_opts;
#define PZ_CUDA_EXEC_OPTS_INIT {.seed = 1234, .n_devices = 0, .graphs = -1, .n_capture = 0, .prezero = 0, \
                                .poison = 0, .reserve_bytes = 0, .runtime = NULL}
struct pz_runtime_opts;

typedef struct pz_cuda_exec pz_cuda_exec;

/* Creates the executor for graph g (after the passes; a private copy is kept):
 *   1. checks that every node's op has a CUDA launcher (PZ_ERR_UNSUPPORTED naming the op and
 *      node otherwise: there is no fallback), that tp GPUs are visible (PZ_ERR_NO_DEVICE) and
 *      that the per-rank storage fits each GPU's free memory minus the reserve (PZ_ERR_OOM with
 *      the bytes needed and free; nothing is allocated then);
 *   2. creates the TP communicator (peer access proven between every pair: PZ_ERR_NO_P2P),
 *      one stream and one split-K GEMM handle per rank, calibrates the gate; with
 *      PREZERO_AR_ALGO=nccl the donors run as NCCL all-reduce + residual/RMSNorm kernel +
 *      memset of the fill (ar_nccl.h; a baseline; PZ_ERR_UNSUPPORTED without an NCCL library);
 *   3. allocates one arena per rank (views share their owner's storage, 256-byte aligned),
 *      zeroes it and fills weights and KV caches on the device (fill.h), bit-identical to
 *      pz_cpu_exec_create for the same seed; with opts->load_weight the weights come from
 *      the hook instead (its errors are returned as they are; PZ_ERR_SHAPE for a weight that
 *      is not contiguous); then INT4 routed experts move into the W4A16 kernel's tiled layout
 *      (pz_cuda_tile_w4_experts, exec_ops.h; PREZERO_MOE_W4_TILED=0 skips it), which
 *      pz_cuda_exec_read undoes on read-back.
 * CUDA graphs are captured lazily, on the first step that needs a batch size.
 * Errors: those above, PZ_ERR_VERIFY, PZ_ERR_INVALID_ARG, PZ_ERR_CUDA. */
pz_status pz_cuda_exec_create(const pz_graph *g, const pz_cuda_exec_opts *opts, pz_cuda_exec **out);

/* One decode step for sequences 0..m-1 (1 <= m <= graph m): tokens[m] i32, pos[m] i32 (tokens
 * already in each sequence's cache, < max_ctx), next[m] i32 out (greedy argmax, lowest id on
 * ties; may be NULL). With graphs, m is padded to the smallest captured size M >= m: padded
 * rows decode token 0 at position max_ctx - 1 (a cache slot no step reads before writing it),
 * attend one KV position (their whole context with PREZERO_PAD_ATTN=0) and are discarded. The step waits for every rank. Errors: PZ_ERR_INVALID_ARG, PZ_ERR_CUDA,
 * PZ_ERR_TIMEOUT (a peer never arrived; only with PREZERO_AR_TIMEOUT_US set). */
pz_status pz_cuda_exec_step(pz_cuda_exec *e, int64_t m, const int32_t *tokens, const int32_t *pos, int32_t *next);

/* The last step's first row whose logits are not finite, -1 when none (or no step yet); *is_nan (may
 * be NULL): 1 a NaN, 0 an infinity. Read from the argmax candidates, each rank's shard max: a NaN
 * anywhere in a row, or +infinity as its max, shows; a -infinity below a finite max does not. */
int64_t pz_cuda_exec_bad_row(const pz_cuda_exec *e, int *is_nan);

/* Captures the CUDA graphs of batch pz_cuda_exec_padded_m(e, m) for the set later steps run (OFF /
 * ON / forced flavour) when they are missing, without running them (a step would capture them
 * itself); nothing to do when graphs are off. 1 <= m <= graph m. Errors: PZ_ERR_INVALID_ARG,
 * PZ_ERR_CUDA, the launchers' errors (PZ_ERR_UNSUPPORTED for shapes beyond a kernel). */
pz_status pz_cuda_exec_capture(pz_cuda_exec *e, int64_t m);

/* Logits of the last step's first m rows, gathered over ranks: out[m, vocab] f32 (host,
 * row-major). Errors: PZ_ERR_INVALID_ARG (NULL, no out_logits tensor, m outside 1..the last
 * step's m), PZ_ERR_OOM (host staging), PZ_ERR_CUDA. */
pz_status pz_cuda_exec_logits(const pz_cuda_exec *e, int64_t m, float *out);

/* Batch size a step of m rows runs at: the smallest captured size >= m (graphs on; the graph's
 * m when none is), else m. */
int64_t pz_cuda_exec_padded_m(const pz_cuda_exec *e, int64_t m);
/* Whether CUDA graphs are used (false for NULL). */
bool pz_cuda_exec_graphs(const pz_cuda_exec *e);
/* Captured sizes (ascending, tokens) into sizes[cap]; returns their count (at most cap). */
int pz_cuda_exec_capture_sizes(const pz_cuda_exec *e, int *sizes, int cap);

/* Timing for benchmarks: one warm-up step (capturing the graph when needed), then `reps` times
 * the step of batch M (a captured size when graphs are on) `iters` times back to back on every
 * rank with no host sync between steps; every row decodes token (i*7919) % vocab at position
 * pos_all (the attention reads pos_all + 1 cache entries; that slot is rewritten each time,
 * positions do not advance). *us_median: median over reps of (elapsed from rank 0's start to
 * the last rank's end) / iters, in µs; graph launch and input copies included. With one rank
 * per process it times this process's rank (its kernels wait for the peers' inside the
 * all-reduce), and every rank must call it with the same arguments.
 * rows (1..M): the real rows; rows..M-1 are padding as pz_cuda_exec_step makes it for a batch of
 * `rows` in the graph of M (token 0 at position max_ctx - 1, attending one position unless
 * PREZERO_PAD_ATTN=0), so that a padded step can be timed; rows = M times a full batch.
 * Errors: PZ_ERR_INVALID_ARG (M not captured, rows outside 1..M, pos_all outside the cache,
 * iters < 1, reps outside 1..64), and those of pz_cuda_exec_step. */
pz_status pz_cuda_exec_time_step(pz_cuda_exec *e, int64_t M, int64_t rows, int32_t pos_all, int iters, int reps,
                                 double *us_median);

/* The gate description the executor evaluates prezero_active() against (owned by e). */
const pz_device_desc *pz_cuda_exec_device_desc(const pz_cuda_exec *e);

/* Copies this rank's bytes of tensor id (views resolved; `bytes` from its element 0) to host
 * memory dst, after synchronising, in the layout the graph declares (tiled INT4 experts are read
 * whole and rearranged back). For tests. Errors: PZ_ERR_INVALID_ARG, PZ_ERR_OOM, PZ_ERR_CUDA. */
pz_status pz_cuda_exec_read(const pz_cuda_exec *e, int rank, int tensor_id, void *dst, size_t bytes);
/* 1 (words) or 2 (scales) when rank's tensor id is an INT4 expert array moved into the W4A16
 * kernel's tiled layout at creation, else 0 (also for bad arguments). For tests. */
int pz_cuda_exec_w4_tiled(const pz_cuda_exec *e, int rank, int tensor_id);

/* Bytes of device storage each rank's arena needs for g (owner tensors in id order, each
 * rounded up to 256 bytes, + the argmax candidates [m]), without allocating anything; 0 for
 * NULL. Workspaces of the ops (MLA, MoE, GEMM handle) are not included. */
int64_t pz_cuda_exec_bytes(const pz_graph *g);

/* Bytes per rank a per-batch executor of the OFF graph g allocates: pz_cuda_exec_bytes(g) plus
 * the buffers of the static rewrite (every plan's buffers fit there). */
int64_t pz_cuda_exec_bytes_per_batch(const pz_graph *g);

/* The per-batch plan's question (passes/prezero.h, pz_prezero_fires_fn) answered by GEMM handle
 * `gemm` (a pz_gemm_ctx *): fires when zero_init = false resolves to a split-K kernel there, i.e.
 * the baseline's kernel zeroes its output; why gets the kernel's name (and the reason when not).
 * A quantised MoE's shared gate | up slot (PZ_PREZERO_SLOT_SHARED_GU) fires when, besides, the shared
 * experts run as GEMMs at q->m (mlp_gemm.h pz_cuda_mlp_uses_gemm). */
struct pz_prezero_query;
bool pz_cuda_gemm_fires(void *gemm, const pz_graph *g, const struct pz_prezero_query *q, char *why, size_t why_len);

/* Where rank 0's GEMM choices come from: "cache <path>", "built-in" or "none" (into buf[len]). */
void pz_cuda_exec_gemm_table(const pz_cuda_exec *e, char *buf, size_t len);

/* Per-batch mode (see opts.prezero): true when e runs the pass per batch size. */
bool pz_cuda_exec_per_batch(const pz_cuda_exec *e);
/* Switches the graph set later steps run: 0 the OFF graph, 1 the per-batch ON graphs. Both sets
 * share the weights, KV cache and activations; their captures are kept side by side.
 * Errors: PZ_ERR_INVALID_ARG (not per-batch and on differs from opts.prezero). */
pz_status pz_cuda_exec_set_prezero(pz_cuda_exec *e, int on);
/* Baselines: every AUTO GEMM of every rank resolves to pz_gemm_flavour `flavour` in later
 * steps (gemm.h, pz_gemm_ctx_set_force; PZ_GEMM_AUTO = 0 restores the normal choice). Steps
 * under a forced flavour capture their own graphs (kept apart from the OFF and ON sets, one
 * flavour at a time). Errors: PZ_ERR_INVALID_ARG. */
pz_status pz_cuda_exec_set_gemm_force(pz_cuda_exec *e, int flavour);
/* The prezero plan at batch m (1..graph m): every donor with candidate consumers, each consumer
 * with its shape, slice and whether its kernel at m fires (rep, owned by the caller:
 * pz_prezero_report_free). *g (may be NULL) gets the graph the ON set runs at m (the OFF graph
 * when nothing fires). Errors: PZ_ERR_INVALID_ARG, PZ_ERR_OOM, those of the pass. */
struct pz_prezero_report;
pz_status pz_cuda_exec_plan(pz_cuda_exec *e, int64_t m, struct pz_prezero_report *rep, const pz_graph **g);

/* Waits for every rank's stream, then frees the captured graphs, op resources, GEMM handles,
 * streams, arenas and the communicator; NULL is ignored. */
void pz_cuda_exec_free(pz_cuda_exec *e);

#ifdef __cplusplus
}
#endif
#endif
