/* prezero/allreduce.h: the fused all-reduce + residual + RMSNorm (with zero_fill) for ONE rank
 * of a tensor-parallel group, one process per rank (the ncclGetUniqueId pattern).
 *
 *   rank 0:         pz_ar_get_unique_id(&id);  ...send the id's bytes to every rank...
 *   every rank r:   pz_ar_comm_init_rank(&comm, world, r, id, device, timeout_ms);
 *                   pz_ar_rmsnorm(comm, &params, stream);      (eagerly or inside a CUDA graph)
 *                   pz_ar_comm_check(comm, stream);            (PZ_ERR_TIMEOUT if a peer vanished)
 *                   pz_ar_comm_destroy(comm);
 *   rank 0 (or the launcher), after every rank is done: pz_ar_unique_id_remove(&id);
 *
 * Transport: every rank allocates its receive buffers (inboxes) in its own GPU memory and
 * exports them with CUDA IPC (cudaIpcGetMemHandle); the peers map them (cudaIpcOpenMemHandle)
 * and the kernel stores into them directly, as it stores into peer memory when all ranks live in
 * one process. The IPC handles are exchanged through a rendezvous directory named in the id
 * (files written atomically with rename, polled until timeout_ms). All ranks must therefore run
 * on one host and see one file system path. Two ranks on ONE GPU (two processes, one device) are
 * supported: their kernels then time-slice on the GPU, each all-reduce waits for the other
 * process's time slice (correct, slow: use it for tests and for measuring the protocol only).
 * Ranks on different GPUs need peer access between them (NVLink or PCIe P2P).
 *
 * Status codes are those of prezero.h (pz_status, pz_last_error() for the message). Every
 * function is callable from C; nothing here needs the CUDA headers (streams are cudaStream_t,
 * declared compatibly below). In a build without the CUDA backend every function returns
 * PZ_ERR_UNSUPPORTED (pz_ar_get_unique_id and pz_ar_unique_id_remove still work). */
#ifndef PREZERO_ALLREDUCE_H
#define PREZERO_ALLREDUCE_H
#include <stdint.h>
#include "prezero.h" /* pz_status, pz_last_error */

#ifndef PZ_API /* the export macro (prezero/common.h); exported by default where it is missing */
#if defined(__GNUC__) || defined(__clang__)
#define PZ_API __attribute__((visibility("default")))
#else
#define PZ_API
#endif
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Same type as CUDA's cudaStream_t (typedef struct CUstream_st *cudaStream_t); NULL = the
 * legacy default stream. */
struct CUstream_st;
typedef struct CUstream_st *pz_ar_stream;

/* Largest TP group (ranks per communicator). */
#define PZ_AR_MP_MAX_WORLD 8

/* Opaque, plain bytes: copy it between processes any way you like (pipe, file, MPI, shared
 * memory), byte for byte. It names a fresh rendezvous directory and a random nonce; use one id
 * for one communicator (one pz_ar_comm_init_rank per rank). */
#define PZ_AR_UNIQUE_ID_BYTES 256
typedef struct pz_ar_unique_id {
  char internal[PZ_AR_UNIQUE_ID_BYTES];
} pz_ar_unique_id;

/* Creates the rendezvous directory (mode 0700) and fills *out. The directory is made under
 * /dev/shm when writable, else /tmp.
 * Errors: PZ_ERR_INVALID_ARG (out NULL), PZ_ERR_IO (directory cannot be created, path longer
 * than the id holds). */
PZ_API pz_status pz_ar_get_unique_id(pz_ar_unique_id *out);

/* Removes the id's rendezvous directory and the rendezvous files that remain in it (no other
 * file: a directory that still holds one stays). Call once, after every
 * rank's pz_ar_comm_init_rank has returned (a rank still in its rendezvous would time out).
 * Errors: PZ_ERR_INVALID_ARG (not an id made by pz_ar_get_unique_id: its directory must be a
 * "pz_ar.XXXXXX" one, and a directory that exists must be the caller's own, not a link). */
PZ_API pz_status pz_ar_unique_id_remove(const pz_ar_unique_id *id);

/* For ranks started separately (one command per rank, e.g. `--rank R --world W --id-file F`):
 * rank 0 writes its id to `path` (a temporary file of a unique name beside it, then rename, so a
 * reader never sees a partial id, even with several writers; mode 0600; an existing file is
 * replaced), the other ranks wait for it with
 * pz_ar_unique_id_read_file. The path must be on a file system every rank sees.
 * Errors: PZ_ERR_INVALID_ARG (NULL, not an id made by pz_ar_get_unique_id), PZ_ERR_IO (cannot
 * write or rename, naming the path). */
PZ_API pz_status pz_ar_unique_id_write_file(const pz_ar_unique_id *id, const char *path);

/* Waits up to timeout_ms (>= 0; polled every few ms) for `path` to hold an id written by
 * pz_ar_unique_id_write_file, and reads it into *out.
 * Errors: PZ_ERR_INVALID_ARG (NULL, negative timeout), PZ_ERR_TIMEOUT (no file after timeout_ms:
 * start rank 0, or check the path), PZ_ERR_IO (unreadable, not a regular file (a FIFO, a
 * directory), not PZ_AR_UNIQUE_ID_BYTES long, or not an id). */
PZ_API pz_status pz_ar_unique_id_read_file(const char *path, int timeout_ms, pz_ar_unique_id *out);

typedef struct pz_ar_comm pz_ar_comm;

/* Sizes and timeouts of a communicator. Every rank must pass the same max_m and max_H. */
typedef struct pz_ar_comm_config {
  int world;         /* ranks in the group, 1..PZ_AR_MP_MAX_WORLD */
  int rank;          /* this process's rank, 0..world-1, each exactly once in the group */
  int device;        /* CUDA device ordinal (as this process sees it) this rank runs on */
  int64_t max_m;     /* largest m (tokens, rows) of any launch; >= 1 */
  int64_t max_H;     /* largest hidden size (elements); a positive multiple of 8, <= 16384 */
  int timeout_ms;    /* rendezvous: how long to wait for every peer's handles; kernels: how long
                        one wait on a peer may last before the kernel gives up and flags a
                        timeout (read by pz_ar_comm_check). <= 0: 10000 ms. */
} pz_ar_comm_config;
#ifdef __cplusplus /* by position: designated initializers are C++20 */
#define PZ_AR_COMM_CONFIG_INIT {1, 0, 0, 128, 8192, 10000}
#else
#define PZ_AR_COMM_CONFIG_INIT {.world = 1, .rank = 0, .device = 0, .max_m = 128, .max_H = 8192, \
                                .timeout_ms = 10000}
#endif

/* Joins the group `id` as `rank` of `world` on `device`, with max_m = 128, max_H = 8192:
 * pz_ar_comm_init_rank_config with those fields. Collective: every rank of the group must call
 * it (in any order, each in its own process) within timeout_ms of each other.
 * Sets the calling thread's current device to `device`. On success *comm is usable on this
 * device from any stream. Device memory: about 2*world*max_m*max_H*12 bytes per rank
 * (50 MB at world 2, max_m 128, max_H 8192).
 * Errors: PZ_ERR_INVALID_ARG (comm NULL, world, rank, sizes, id not from pz_ar_get_unique_id,
 * a peer with different world/max_m/max_H, two processes with the same rank), PZ_ERR_NO_DEVICE
 * (no GPU, device out of range), PZ_ERR_NO_P2P (a peer's GPU cannot be reached by this one),
 * PZ_ERR_TIMEOUT (some peer did not publish its handles within timeout_ms: the message names
 * the missing ranks), PZ_ERR_IO (rendezvous files), PZ_ERR_OOM, PZ_ERR_CUDA. On failure
 * *comm is NULL and everything it allocated is freed. */
PZ_API pz_status pz_ar_comm_init_rank(pz_ar_comm **comm, int world, int rank, pz_ar_unique_id id, int device,
                               int timeout_ms);
/* The same with every field given (cfg->world, ->rank, ->device, ->timeout_ms included). */
PZ_API pz_status pz_ar_comm_init_rank_config(pz_ar_comm **comm, const pz_ar_comm_config *cfg, pz_ar_unique_id id);

/* Waits for this rank's device work to end, unmaps the peers' buffers and frees this rank's.
 * Not collective: a peer may have exited already. No launch on comm may be pending in a stream
 * or graph that will still run. NULL is ignored. Sets the current device to the comm's. */
PZ_API void pz_ar_comm_destroy(pz_ar_comm *comm);

/* Rank, world and device of comm (-1 when comm is NULL). */
PZ_API int pz_ar_comm_rank(const pz_ar_comm *comm);
PZ_API int pz_ar_comm_world(const pz_ar_comm *comm);
PZ_API int pz_ar_comm_device(const pz_ar_comm *comm);

/* Dtype of the zero_fill buffer. */
typedef enum pz_ar_fill_dtype { PZ_AR_FILL_F32 = 0, PZ_AR_FILL_BF16 = 1 } pz_ar_fill_dtype;

/* One rank's operands: device pointers on the comm's GPU, row strides (ld_*) in elements.
 *   partial      f32  [m, H], ld_partial   this rank's partial sum (read only);
 *   residual_in  f32  [m, H], ld_res       NULL = zeros; may equal residual_out (in place);
 *   residual_out f32  [m, H], ld_res       residual_in + Σ_ranks partial;
 *   weight       bf16 [H]                  the RMSNorm weight (raw bf16 bits);
 *   x_norm       bf16 [m, H], ld_x         bf16((residual_out * inv_rms) * weight),
 *                inv_rms = 1/sqrtf(Σ residual_out² / H + eps) per row.
 * The partials are summed in rank order 0..world-1 (IEEE f32 adds), so every rank gets
 * bit-identical residual_out and x_norm, equal to prezero's CPU reference.
 * zero_fill (fill_ptr non-NULL): extra CTAs of the same launch zero rows 0..m-1 of a
 * [m, fill_row_stride] buffer of fill_dtype: columns [0, fill_n_total) when fill_all, else
 * [0, fill_n_base). They take no part in the exchange (docs/ARCHITECTURE.md §3).
 * Requirements: 1 <= m <= max_m, H a multiple of 8, H <= max_H; ld_* >= H and multiples of 4;
 * partial, residual_*, x_norm and fill_ptr 16-byte aligned, weight 8-byte aligned;
 * 0 <= fill_n_base <= fill_n_total <= fill_row_stride, fill_row_stride * element size a
 * multiple of 16 bytes. Every rank must pass the same m and H (its own pointers). */
typedef struct pz_ar_rmsnorm_params {
  const float *partial;
  int64_t ld_partial;
  const float *residual_in;
  float *residual_out;
  int64_t ld_res;
  const uint16_t *weight;
  uint16_t *x_norm;
  int64_t ld_x;
  float eps;
  int64_t m, H;
  void *fill_ptr;
  int64_t fill_n_total, fill_n_base, fill_row_stride;
  pz_ar_fill_dtype fill_dtype;
  int fill_all;
} pz_ar_rmsnorm_params;

/* Enqueues the fused all-reduce + residual + RMSNorm (+ zero_fill) of this rank on `stream`
 * (a stream of the comm's device; the current device must be the comm's). Capture-safe: it may
 * be recorded into a CUDA graph and replayed any number of times, at mixed m. Rules shared by
 * all ranks: every rank enqueues the same sequence of launches (same m, H, in the same order),
 * launches of one comm never overlap on a rank (one stream, or ordered streams), and every rank
 * keeps launching until the group is done: a launch whose peer never comes waits timeout_ms,
 * then ends, flagging the comm (outputs of that launch are then garbage).
 * Errors (at enqueue): PZ_ERR_INVALID_ARG (comm or p NULL, pointers, strides, alignment, fill
 * fields), PZ_ERR_SHAPE (m > max_m, H > max_H, H not a multiple of 8, m too large for one wave
 * of the GPU), PZ_ERR_CUDA. A peer that vanished is reported by pz_ar_comm_check. */
PZ_API pz_status pz_ar_rmsnorm(pz_ar_comm *comm, const pz_ar_rmsnorm_params *p, pz_ar_stream stream);

/* Waits for `stream` (cudaStreamSynchronize) and reads the comm's error flag.
 * PZ_ERR_TIMEOUT: a launch of this rank waited more than timeout_ms for a peer (the peer exited,
 * crashed or stopped launching); the comm is then unusable (its sequence numbers no longer agree
 * with the peers'): destroy it and build a new group with a new id. Every later launch on the
 * comm ends at once without waiting. PZ_ERR_CUDA: the stream failed. Errors: PZ_ERR_INVALID_ARG
 * (comm NULL). Returns at most about timeout_ms after the last launch started (kernels never
 * wait forever). */
PZ_API pz_status pz_ar_comm_check(pz_ar_comm *comm, pz_ar_stream stream);

#ifdef __cplusplus
}
#endif
#endif
