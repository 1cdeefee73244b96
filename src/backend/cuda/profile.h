/* CUPTI kernel-activity collection over CUDA-graph replays, with each graph node attributed to
 * the decode-graph (IR) node whose launcher created it while the executor captured the graph. */
#ifndef PZ_BACKEND_CUDA_PROFILE_H
#define PZ_BACKEND_CUDA_PROFILE_H
#include <stdbool.h>
#include <stdint.h>
#include "core/status.h"
#ifdef __cplusplus
extern "C" {
#endif

/* Executor hook: the IR node id (pz_node.id) whose launcher runs next on this thread, or -1
 * after the last node. Every CUDA graph node created on this thread (stream capture) while a
 * tag is set is attributed to that IR node. A plain thread-local store: free when profiling is
 * off. */
void pz_profile_set_node(int node_id);

/* Starts the collector (process-wide, idempotent): subscribes to CUPTI's resource callbacks
 * (graph node created / cloned, so nodes of instantiated graphs inherit their template node's
 * tag) and registers the activity buffers. Must run before the graphs to be profiled are
 * captured. Activity records stay off until pz_profile_activity(true).
 * Errors: PZ_ERR_UNSUPPORTED (CUPTI refused: another subscriber, or no CUPTI), PZ_ERR_OOM. */
pz_status pz_profile_start(void);

/* Turns CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL and CUPTI_ACTIVITY_KIND_MEMSET records on or off.
 * Errors: PZ_ERR_INVALID_ARG (not started), PZ_ERR_UNSUPPORTED (CUPTI error, message says which). */
pz_status pz_profile_activity(bool on);

/* Waits for devices 0..n_devices-1 (0: every visible device), then delivers every record to the
 * collector (cuptiActivityFlushAll, forced). Errors: PZ_ERR_CUDA, PZ_ERR_UNSUPPORTED. */
pz_status pz_profile_flush(int n_devices);

/* Drops the records collected so far (the node attribution map is kept). */
void pz_profile_clear(void);

/* Records dropped by CUPTI since the start (buffers full); 0 when none. */
uint64_t pz_profile_dropped(void);

/* One graph node's collected records. tag: IR node id (-1: created outside any tagged launch);
 * seq: creation order (increasing over the process, so it orders the nodes one IR node
 * created); kind 0 = kernel, 1 = memset; name: the kernel's (mangled) name or "memset" (owned
 * by the collector, valid until pz_profile_stop); count: records; median_us / min_us: of their
 * own times in µs: end minus the later of start and the end of the record before it in the same
 * stream (core/stats.h pz_interval_own). That is end - start unless the kernel was launched with
 * programmatic dependent launch (PREZERO_PDL): it then starts while the kernel ahead runs and its
 * span includes waiting for it (an o_proj GEMM after the MLA op's W_UV kernel spanned ~104 µs at
 * batch 4 on the H200 in `prezero compare` against ~35 µs of its own). */
typedef struct pz_profile_node {
  uint64_t graph_node_id;
  int tag;
  uint64_t seq;
  int device;
  int kind;
  const char *name;
  int count;
  double median_us, min_us;
} pz_profile_node;

/* Summary of the records collected since the last pz_profile_clear, one entry per graph node
 * (records without a graph node id are skipped), sorted by (device, tag, seq). *out is
 * malloc'ed (caller frees); *n its length. Errors: PZ_ERR_OOM. */
pz_status pz_profile_summary(pz_profile_node **out, int *n);

/* Disables activity, flushes, unsubscribes and frees the collector. */
void pz_profile_stop(void);

#ifdef __cplusplus
}
#endif
#endif
