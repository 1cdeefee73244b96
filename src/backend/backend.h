/* The one internal backend interface (docs/ARCHITECTURE.md §6): create / capture / step / logits /
 * time / destroy of an executor of the per-rank decode graph, whichever backend runs it. The engine
 * (model/engine.c), the compare harness (compare/) and `prezero bench step` run decode steps only
 * through it. One implementation per backend behind one table of entries (backend_impl.h):
 * backend/cpu/backend_cpu.c over pz_cpu_exec (cpu_backend.h) and backend/cuda/backend_cuda.c over
 * pz_cuda_exec (cuda/exec.h). Backend-specific extras (the per-batch prezero switch, a forced GEMM
 * flavour, the prezero plan) are optional entries: a backend without them answers
 * PZ_ERR_UNSUPPORTED. Every call returns a pz_status with a message (pz_last_error()). */
#ifndef PZ_BACKEND_BACKEND_H
#define PZ_BACKEND_BACKEND_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "core/gate.h"
#include "core/ir.h"
#ifdef __cplusplus
extern "C" {
#endif

typedef enum pz_backend_kind {
  PZ_BACKEND_CPU = 0,  /* every TP rank in this process on the host (cpu_backend.h) */
  PZ_BACKEND_CUDA = 1, /* rank r on CUDA device r (cuda/exec.h); only in builds with PZ_HAVE_CUDA */
} pz_backend_kind;

#define PZ_BACKEND_MAX_CAPTURE 16 /* batch sizes opts.capture holds (= PZ_CUDA_MAX_CAPTURE) */

/* Weight source for a backend (a checkpoint: pz_checkpoint_fill_rows, model/checkpoint.h): local
 * rows [row0, row0 + n_rows) of WEIGHT tensor t of rank `rank` (a row = the last dim) into
 * dst[n_rows * ne[last]] of t's dtype. The CPU backend asks for all rows of a tensor at once, the
 * CUDA backend for chunks of opts.load_chunk_bytes. Its errors abort the creation as they are. */
typedef pz_status (*pz_backend_load_fn)(void *user, const pz_tensor *t, int rank, int64_t row0, int64_t n_rows,
                                        void *dst);

/* Creation options; a field marked CPU or CUDA is read by that backend only (the other ignores it). */
typedef struct pz_backend_opts {
  uint64_t seed;              /* weights and KV cache = f(seed, tensor name, full index), the same bits on both backends */
  int threads;                /* CPU: worker threads (0: the option cpu_threads, else the cores; pz_cpu_threads_for) */
  int poison;                 /* tests: fill ACT/BUFFER storage with NaN before each step */
  int prezero;                /* CUDA: the graph's prezero flag (cuda/exec.h, pz_cuda_exec_opts.prezero): 1 on the OFF
                                 graph = per-batch mode, switchable with pz_backend_set_prezero. The CPU runs g as given */
  int graphs;                 /* CUDA: -1 the option (PREZERO_CUDA_GRAPH), 0 eager launches, 1 CUDA graphs */
  int n_capture;              /* CUDA: batch sizes to capture (0: the option, else 1,2,4,...,128) */
  int capture[PZ_BACKEND_MAX_CAPTURE];
  pz_device_desc dev;         /* the gate's description; num_sms 0: CPU pz_device_desc_default, CUDA calibrated on GPU 0 */
  int64_t reserve_bytes;      /* CUDA: bytes to leave free per GPU (0: pz_cuda_default_reserve) */
  pz_backend_load_fn load_weight; /* NULL: the seeded fill */
  void *load_user;            /* load_weight's first argument */
  int64_t load_chunk_bytes;   /* CUDA: host staging chunk of load_weight (0: the option, else 64 MiB) */
  const struct pz_runtime_opts *runtime; /* switches (core/options.h), read once at creation; NULL: the environment */
  struct pz_ar_comm *ar_comm; /* CUDA: NULL every rank in this process; else this process runs only the communicator's
                                 rank (cuda/exec.h, pz_cuda_exec_opts.ar_comm); the CPU refuses it */
} pz_backend_opts;
#define PZ_BACKEND_OPTS_INIT {.seed = 1234, .threads = 0, .poison = 0, .prezero = 0, .graphs = -1, .n_capture = 0, \
                              .reserve_bytes = 0, .load_weight = NULL, .runtime = NULL}
struct pz_runtime_opts;
struct pz_ar_comm;
struct pz_prezero_report;

typedef struct pz_backend pz_backend;

/* Creates a backend of `kind` for graph g (after the passes, or the OFF graph for CUDA per-batch
 * mode; the executor keeps a private copy): storage for every tensor of every rank, weights and
 * KV caches filled from opts->seed (or opts->load_weight). opts NULL: PZ_BACKEND_OPTS_INIT.
 * Errors: PZ_ERR_INVALID_ARG (NULL g / out, an unknown kind), PZ_ERR_UNSUPPORTED (CUDA in a build
 * without it, an op the backend cannot run), and the executor's own (pz_cpu_exec_create: PZ_ERR_OOM,
 * PZ_ERR_VERIFY, PZ_ERR_SHAPE; pz_cuda_exec_create: PZ_ERR_NO_DEVICE, PZ_ERR_NO_P2P, PZ_ERR_OOM,
 * PZ_ERR_CUDA, ...). *out is NULL after an error. */
pz_status pz_backend_create(pz_backend_kind kind, const pz_graph *g, const pz_backend_opts *opts, pz_backend **out);

/* The backend's kind (PZ_BACKEND_CPU for NULL) and its name, "cpu" or "cuda" ("none" for NULL). */
pz_backend_kind pz_backend_kind_of(const pz_backend *b);
const char *pz_backend_name(const pz_backend *b);

/* Makes the step of m rows (1..graph m) ready to run without running it: CUDA with graphs
 * captures the graphs of batch pz_backend_padded_m(b, m) for the current set (OFF / ON / forced
 * flavour) when they are missing; CUDA eager and the CPU have nothing to capture (PZ_OK). A step
 * captures lazily too, so this only moves the capture's cost. Errors: PZ_ERR_INVALID_ARG (NULL,
 * m out of range), those of the capture (PZ_ERR_CUDA, the launchers' PZ_ERR_UNSUPPORTED). */
pz_status pz_backend_capture(pz_backend *b, int64_t m);

/* One decode step of sequences 0..m-1 (1 <= m <= graph m): tokens[m] i32 (token ids < vocab),
 * pos[m] i32 (tokens already in each sequence's KV cache, < the cache length), next[m] i32 out
 * (greedy argmax, lowest id on ties; may be NULL). Each sequence's cache row at pos[i] is written.
 * Errors: PZ_ERR_INVALID_ARG (NULL b / tokens / pos, m or a position out of range, a token the
 * ops refuse), PZ_ERR_SHAPE, PZ_ERR_CUDA, PZ_ERR_TIMEOUT (CUDA: a peer never arrived). */
pz_status pz_backend_step(pz_backend *b, int64_t m, const int32_t *tokens, const int32_t *pos, int32_t *next);

/* Logits of the last step's first m rows, gathered over the ranks: out[m, vocab] f32 (host memory,
 * row-major). Errors: PZ_ERR_INVALID_ARG (NULL, a graph without out_logits, m outside 1..the last
 * step's m), PZ_ERR_OOM (host staging), PZ_ERR_CUDA. */
pz_status pz_backend_logits(const pz_backend *b, int64_t m, float *out);

/* The last step's first row whose logits are not finite, as the backend saw them without copying them
 * out (CUDA: from the argmax candidates: a NaN anywhere in a row, or +infinity as its max), -1 when
 * none or the backend does not track it (CPU: check pz_backend_logits). *is_nan (may be NULL): 1 NaN,
 * 0 infinity. */
int64_t pz_backend_bad_row(const pz_backend *b, int *is_nan);

/* Benchmark timing of the step of batch M (1..graph m; with CUDA graphs a captured size, see
 * pz_backend_padded_m): one warm-up step (capturing when needed), then `reps` (1..64) times the
 * step `iters` (>= 1) times back to back; every row decodes token (i * 7919) % vocab at position
 * pos_all (the slot is rewritten each time, positions do not advance). *us_median: the median over
 * reps of the elapsed time per step, in µs (CUDA: device events from rank 0's start to the last
 * rank's end; CPU: the host's monotonic clock around the steps). Errors: PZ_ERR_INVALID_ARG (NULL,
 * M not a batch the backend runs as is, pos_all outside the cache, iters < 1, reps outside
 * 1..64), and those of pz_backend_step. */
pz_status pz_backend_time_step(pz_backend *b, int64_t M, int32_t pos_all, int iters, int reps, double *us_median);
/* The token row i decodes in pz_backend_time_step(_rows): (i * 7919) % vocab (vocab >= 1). */
static inline int32_t pz_backend_timing_token(int64_t i, int64_t vocab) { return (int32_t)((i * 7919) % vocab); }
/* The same with only rows 0..rows-1 real (1 <= rows <= M): rows rows..M-1 are the padding a step of
 * `rows` sequences gets in the graph of M (token 0 at the cache's last position; the attention
 * padding rule of pz_cuda_exec_step). The CPU backend pads nothing: rows must equal M there.
 * Errors: those of pz_backend_time_step, and PZ_ERR_INVALID_ARG for rows outside 1..M. */
pz_status pz_backend_time_step_rows(pz_backend *b, int64_t M, int64_t rows, int32_t pos_all, int iters, int reps,
                                    double *us_median);

/* Frees everything the backend holds (waiting for the device first); NULL is ignored. */
void pz_backend_destroy(pz_backend *b);

/* ---- queries (no errors) */

/* Batch size a step of m rows runs at: CUDA with graphs, the smallest captured size >= m (the
 * graph's m above them); otherwise m. */
int64_t pz_backend_padded_m(const pz_backend *b, int64_t m);
/* The gate description prezero_active() is evaluated against (owned by b; NULL for NULL). */
const pz_device_desc *pz_backend_device_desc(const pz_backend *b);
/* Bytes of device storage per rank for the graph's tensors (pz_cuda_exec_bytes, or
 * pz_cuda_exec_bytes_per_batch in per-batch mode); 0 on the CPU (host memory) and for NULL. */
int64_t pz_backend_device_bytes(const pz_backend *b);
/* Where the split-K GEMM choices come from, into buf[len] (NUL-terminated): "cache <path>",
 * "built-in" or "none" on CUDA; "" on the CPU (no GEMM table). Nothing is written when buf is
 * NULL or len is 0. */
void pz_backend_gemm_table(const pz_backend *b, char *buf, size_t len);
/* True when the backend runs the prezero pass per batch size (CUDA per-batch mode); false on the
 * CPU and for NULL. */
bool pz_backend_per_batch(const pz_backend *b);
/* Largest TP degree a backend of `kind` runs (64 on the CPU, PZ_CUDA_MAX_TP on CUDA; 0 for a kind
 * this build does not have). */
int pz_backend_max_tp(pz_backend_kind kind);

/* ---- optional entries: PZ_ERR_UNSUPPORTED where the backend has none (the CPU has none) */

/* Per-batch mode: later steps run the OFF graph (on = 0) or the per-batch ON graphs (on = 1);
 * both share the weights, KV cache and activations. Errors: PZ_ERR_INVALID_ARG (NULL; not
 * per-batch and `on` differs from opts.prezero), PZ_ERR_UNSUPPORTED. */
pz_status pz_backend_set_prezero(pz_backend *b, int on);
/* Baselines: every AUTO GEMM resolves to pz_gemm_flavour `flavour` in later steps (cuda/gemm.h;
 * 0 = PZ_GEMM_AUTO restores the normal choice). Errors: PZ_ERR_INVALID_ARG, PZ_ERR_UNSUPPORTED. */
pz_status pz_backend_set_gemm_force(pz_backend *b, int flavour);
/* The prezero plan at batch m (1..graph m) into *rep (owned by the caller: pz_prezero_report_free,
 * passes/prezero.h); *g (may be NULL) gets the graph the ON set runs at m, owned by b.
 * Errors: PZ_ERR_INVALID_ARG, PZ_ERR_OOM, the pass's errors, PZ_ERR_UNSUPPORTED. */
pz_status pz_backend_plan(pz_backend *b, int64_t m, struct pz_prezero_report *rep, const pz_graph **g);

#ifdef __cplusplus
}
#endif
#endif
