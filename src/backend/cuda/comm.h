/* TP communicator in one process over the GPUs of one node (one device per rank): peer access
 * checked with a real copy, per-rank P2P inboxes registered once, device-side sequence flags. */
#ifndef PZ_BACKEND_CUDA_COMM_H
#define PZ_BACKEND_CUDA_COMM_H
#include <stdbool.h>
#include <stdint.h>
#include <cuda_runtime.h>
#include "prezero.h"
#include "core/gate.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pz_comm pz_comm;

typedef struct pz_comm_config {
  int tp;                   /* ranks, 1..PZ_AR_MAX_TP */
  int devices[PZ_AR_MAX_TP];/* CUDA device of each rank */
  int64_t max_m;            /* largest batch (tokens) any launch will use */
  int64_t max_H;            /* largest hidden size (elements, multiple of 8) */
  long long timeout_us;     /* debug: a wait on a peer longer than this ends the kernel with an
                               error flag (pz_comm_check -> PZ_ERR_TIMEOUT); 0 = wait forever.
                               PREZERO_AR_TIMEOUT_US overrides it when set. */
  bool allow_shared_device; /* tests only: several ranks on one device (then the kernels of the
                               ranks must run concurrently, which CUDA does not promise) */
} pz_comm_config;
#define PZ_COMM_CONFIG_INIT {.tp = 1, .devices = {0}, .max_m = 128, .max_H = 7168, \
                             .timeout_us = 0, .allow_shared_device = false}

/* Device-side state of one rank, as the kernels see it (all rank r's arrays are written by
 * its peers over P2P, except ss and ctrl; the LL packet format follows NCCL's low-latency
 * protocol, see core/gate.h):
 *   inbox[r]: LL packets, uint4 [2 parity][tp src][max_m][max_H/2] (each packet: 2 f32 data
 *             words, each followed by the 32-bit sequence number);
 *   raw[r]:   raw f32 rows for the flag protocol, float4 [2 parity][tp src][max_m][max_H/4];
 *   flags[r]: uint32 [2 parity][tp src][max_m][16 CTAs per row]: sequence of the raw data;
 *   ss:       this rank's [max_m][16] uint2 (sum of squares, sequence) for CTAs sharing a row;
 *   ctrl:     this rank's uint32 [8]: [0] sequence of the last completed launch, [1] CTAs done
 *             in the current launch, [2] error flag (1 = timeout), [3] row that timed out. */
typedef struct pz_comm_rank_view {
  uint4 *inbox[PZ_AR_MAX_TP];
  float4 *raw[PZ_AR_MAX_TP];
  unsigned *flags[PZ_AR_MAX_TP];
  uint2 *ss;
  unsigned *ctrl;
  int rank, tp, device;
  int64_t max_m, max_H;
  long long timeout_ns;
} pz_comm_rank_view;

/* Creates the communicator: checks every device exists, enables peer access between every
 * pair and proves it with a kernel on device i writing 64 KiB into device j's memory that
 * device j's copy back matches; allocates and zeroes the inboxes, sequence counters start at 0.
 * Errors: PZ_ERR_INVALID_ARG (tp, max_m, max_H, repeated device), PZ_ERR_NO_DEVICE,
 * PZ_ERR_NO_P2P (with which pair and why), PZ_ERR_OOM, PZ_ERR_CUDA. */
pz_status pz_comm_create(const pz_comm_config *cfg, pz_comm **out);
/* Frees every rank's buffers; NULL is ignored. No launch of c may still be running. */
void pz_comm_destroy(pz_comm *c);

/* Ranks of c. */
int pz_comm_tp(const pz_comm *c);
/* CUDA device of `rank`; -1 when c is NULL or rank is outside 0..tp-1. */
int pz_comm_device(const pz_comm *c, int rank);
/* Device-side state of `rank`, owned by c; NULL when c is NULL or rank is outside 0..tp-1. */
const pz_comm_rank_view *pz_comm_view(const pz_comm *c, int rank);

/* Synchronizes every rank's device and reads the device error flags. PZ_ERR_TIMEOUT when a
 * kernel gave up waiting for a peer (the communicator must then be pz_comm_reset before reuse:
 * the ranks' sequence counters no longer agree); PZ_ERR_CUDA for a failed sync or copy. */
pz_status pz_comm_check(pz_comm *c);
/* Synchronizes, zeroes inboxes, scratch and counters on every rank (all ranks idle).
 * Errors: PZ_ERR_CUDA. */
pz_status pz_comm_reset(pz_comm *c);

#ifdef __cplusplus
}
#endif
#endif
