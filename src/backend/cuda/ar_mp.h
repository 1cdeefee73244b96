/* Internal parts of the one-rank-per-process communicator (ar_mp.c, public API in
 * include/prezero/allreduce.h) that the CUDA executor uses to run one TP rank per process:
 * the rank's device-side view for the fused kernel, and a small host-memory exchange between
 * the ranks (shared file mappings in the id's rendezvous directory) for what the executor
 * combines on the host: argmax candidates, logits shards, the gate description. */
#ifndef PZ_BACKEND_CUDA_AR_MP_H
#define PZ_BACKEND_CUDA_AR_MP_H
#include <stddef.h>
#include <stdint.h>
#include "prezero/allreduce.h"
#include "backend/cuda/comm.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Bytes one rank contributes to one host exchange round at most. */
#define PZ_AR_HOSTX_SLOT ((size_t)64 * 1024)

/* The rank's device-side state (inboxes of every rank mapped through CUDA IPC), for
 * pz_ar_rmsnorm_launch_view. NULL when c is NULL. */
const pz_comm_rank_view *pz_ar_comm_view(const pz_ar_comm *c);

/* Which collective a host exchange round is: every rank must be at the same one. A rank whose
 * calls drift from its peers' (a different branch, a skipped step) meets a different tag and fails
 * with a message naming both, even where the sizes happen to agree. */
typedef enum pz_hx_tag {
  PZ_HX_BARRIER = 1, /* pz_ar_comm_barrier */
  PZ_HX_LAYER_FIT,   /* the layers that fit on every rank (pz_cuda_mem_plan_fit_ranks) */
  PZ_HX_CREATE,      /* the executor's creation: graph fingerprint, options, gate description */
  PZ_HX_ARGMAX,      /* a step's argmax candidates */
  PZ_HX_LOGITS,      /* the logits shards */
  PZ_HX_ENGINE,      /* the engine's creation: seed, batch, context, prezero, quant of every rank */
  PZ_HX_TAG_COUNT
} pz_hx_tag;
/* "barrier", "layer fit", ... for messages; "?" outside the enum. */
const char *pz_hx_tag_name(int tag);

/* Collective on the host: every rank passes the same tag and `bytes` (0..PZ_AR_HOSTX_SLOT) and
 * receives all[q * bytes ...] = rank q's `mine`, for q = 0..world-1, in rank order. Rounds are
 * double-buffered: a rank can be at most one round ahead of the slowest. Errors:
 * PZ_ERR_INVALID_ARG (bytes too large, or a peer at another collective: a different tag or size;
 * the communicator is then broken), PZ_ERR_TIMEOUT (a peer did not reach this round within the
 * communicator's timeout, or it failed and left). */
pz_status pz_ar_comm_allgather_host(pz_ar_comm *c, int tag, const void *mine, size_t bytes, void *all);

/* pz_ar_comm_allgather_host of any size, split into rounds of PZ_AR_HOSTX_SLOT bytes per rank:
 * all[q * bytes ...] = rank q's mine. Same errors. */
pz_status pz_ar_comm_allgather_host_big(pz_ar_comm *c, int tag, const void *mine, size_t bytes, void *all);

/* Every rank waits until every rank has called it (a zero-byte exchange). Errors as above. */
pz_status pz_ar_comm_barrier(pz_ar_comm *c);

/* Marks c broken and tells the peers that this rank left: a peer waiting in a host exchange then
 * fails at once (PZ_ERR_TIMEOUT naming this rank) instead of after its timeout. Called when this
 * rank's sequence of collective calls can no longer match its peers' (a failed step, a failed
 * creation). After a failed exchange (timeout, size mismatch, a peer that exited or aborted) c is
 * broken too: every later exchange fails at once. */
void pz_ar_comm_abort(pz_ar_comm *c);

/* Joins rank `rank` of a group of `world` through a rendezvous file: rank 0 makes the unique id
 * and writes it to id_file (pz_ar_unique_id_write_file), the others wait for the file (up to
 * timeout_ms) and read it; then pz_ar_comm_init_rank_config on `device` (-1: GPU rank % the
 * visible GPUs, so several ranks may share one) with max_m, max_H and timeout_ms. *id receives the id (rank 0 removes it with pz_ar_comm_leave_file). Errors: those
 * of the calls named, PZ_ERR_NO_DEVICE when device is -1 and no GPU is visible; on rank 0's
 * failure after writing, the id and the file are removed (and
 * nothing is left for pz_ar_comm_leave_file to do). */
pz_status pz_ar_comm_join_file(int world, int rank, const char *id_file, int device, int64_t max_m, int64_t max_H,
                               int timeout_ms, pz_ar_comm **comm, pz_ar_unique_id *id);
/* The end of a group joined with pz_ar_comm_join_file: a barrier (every rank past its last
 * collective) unless comm is broken (then pz_ar_comm_abort instead: no second wait for a peer
 * that is gone), the communicator destroyed, and on rank 0 the id's rendezvous and id_file
 * removed. Only for a successful join. */
void pz_ar_comm_leave_file(pz_ar_comm *comm, const pz_ar_unique_id *id, int rank, const char *id_file);

#ifdef __cplusplus
}
#endif
#endif
