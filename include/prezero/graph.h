/* prezero public C11 API: a per-rank decode graph built node by node, the graph passes (the
 * prezero rewrite) and its dump, for engines that describe their own decode step.
 *
 * A graph holds tensors (element type, shape, strides, views into a base tensor) and nodes that
 * run in the order they were added. Ids are 0-based, in order of addition. Every call returns a
 * pz_status; pz_last_error() has the message. Nothing here touches a GPU or the environment.
 *
 * The prezero pass looks for a fused all-reduce + residual + RMSNorm node (the donor,
 * pz_decode_graph_add_ar_rmsnorm) whose normalised output x_norm is the A of later split-K
 * GEMMs (pz_decode_graph_add_gemm with split_k != 1) writing 2-D f32 activations of their own.
 * It adds one [m, n_total] f32 buffer "<donor>.prezero_buf", turns each such GEMM's output into a
 * column slice of it (each slice starting at a multiple of 32 columns), makes the donor zero the
 * buffer (op "ar_rmsnorm_maybe_prezero_", zero_fill n_total / n_base) and the GEMMs skip their own
 * zeroing where the donor filled their slice (op "mm_maybe_prezero_"). */
#ifndef PREZERO_GRAPH_H
#define PREZERO_GRAPH_H
#include <stdint.h>
#include <stdio.h>
#include "prezero/common.h"
#ifdef __cplusplus
extern "C" {
#endif

typedef struct pz_decode_graph pz_decode_graph;

/* Tensor kinds. ACT, INPUT and STATE tensors are batched: their first dimension is the batch m. */
typedef enum pz_graph_tensor_kind {
  PZ_GRAPH_ACT = 0,     /* produced by a node during the step */
  PZ_GRAPH_INPUT = 1,   /* fed by the host each step */
  PZ_GRAPH_WEIGHT = 2,  /* model parameter (never written by a node) */
  PZ_GRAPH_STATE = 3,   /* persists across steps (the residual stream) */
  PZ_GRAPH_BUFFER = 4   /* added by a pass (the prezero buffer); not accepted by add_tensor */
} pz_graph_tensor_kind;

/* What a tensor is after the passes. A view (view_of >= 0) has no storage: its element (i, j)
 * lives at element view_offset + i*stride[0] + j*stride[1] of tensor view_of; for a column slice
 * of a 2-D buffer view_offset is the slice's first column and stride[0] the buffer's row stride. */
typedef struct pz_graph_tensor_info {
  char name[96];
  pz_elem_type dtype;
  pz_graph_tensor_kind kind;
  int ndim;
  int64_t ne[4];        /* shape, outermost first (elements) */
  int64_t stride[4];    /* elements */
  int view_of;          /* -1: owns its storage */
  int64_t view_offset;  /* elements */
} pz_graph_tensor_info;

/* What a node is after the passes. */
typedef struct pz_graph_node_info {
  char name[96];
  char op[48];          /* "ar_rmsnorm", "gemm", "ar_rmsnorm_maybe_prezero_", "mm_maybe_prezero_", ... */
  int layer;
  int n_src, n_dst;
  int src[20];          /* tensor ids, -1 for an absent optional input */
  int dst[4];
  int zero_init;        /* GEMMs: 1 zeroes its own output, 0 expects it zeroed, 2 (op
                           "mm_maybe_prezero_") decided per step: 0 when its slice lies in the
                           donor's zero-filled columns at that batch size (below fill_n_base, or
                           below fill_n_total when the fill gate says free), else 1; -1 not a GEMM */
  int fill_buf;         /* donors: tensor id of the buffer they zero, -1 when none */
  int64_t fill_n_total; /* donors: columns [0, n_total) of the buffer zeroed when the gate says free */
  int64_t fill_n_base;  /* donors: columns [0, n_base) zeroed every step */
} pz_graph_node_info;

/* Creates an empty graph for one TP rank: tp ranks (1..64), m the largest batch (rows of
 * batched tensors, 1..256), hidden the model's hidden size H (elements, > 0; the gate's H).
 * Errors: PZ_ERR_INVALID_ARG (out NULL, a value out of range), PZ_ERR_OOM. *out NULL on error. */
PZ_API pz_status pz_decode_graph_create(int tp, int64_t m, int64_t hidden, pz_decode_graph **out);
/* Frees the graph; NULL is ignored. */
PZ_API void pz_decode_graph_destroy(pz_decode_graph *g);

/* Adds a contiguous tensor of ndim (1..4) dimensions ne[] (outermost first, each > 0, at most
 * 2^50 elements); kind ACT/INPUT/WEIGHT/STATE; *id receives its id (id may be NULL).
 * Errors: PZ_ERR_INVALID_ARG (g or name NULL, kind), PZ_ERR_DTYPE (dt), PZ_ERR_SHAPE, PZ_ERR_OOM. */
PZ_API pz_status pz_decode_graph_add_tensor(pz_decode_graph *g, const char *name, pz_elem_type dt,
                                            pz_graph_tensor_kind kind, int ndim, const int64_t *ne, int *id);

/* Adds the fused all-reduce + residual + RMSNorm (op "ar_rmsnorm"): partial [m, H] f32 (this
 * rank's partial sums), weight [H] bf16, residual [m, H] f32 STATE, x_norm [m, H] bf16:
 *   residual = (read_residual ? residual : 0) + Σ over ranks of partial;
 *   x_norm   = bf16(residual * rsqrt(mean(residual²) + eps) * weight).
 * layer: the decoder layer (-1 outside layers), for names and dumps. *node may be NULL.
 * Errors: PZ_ERR_INVALID_ARG (NULL, an id out of range, eps not finite and > 0, read_residual not
 * 0 or 1), PZ_ERR_OOM; shapes are
 * checked by pz_decode_graph_verify (PZ_ERR_VERIFY). */
PZ_API pz_status pz_decode_graph_add_ar_rmsnorm(pz_decode_graph *g, const char *name, int layer, int partial,
                                                int weight, int residual, int read_residual, int x_norm, float eps,
                                                int *node);

/* Adds a GEMM (op "gemm", zero_init 1): C[m, n] = A[m, k] · W[n, k]ᵀ (+ bias[n]); A bf16, W bf16
 * WEIGHT, bias f32 [n] or -1, C f32 [m, n]. split_k: 0 the backend chooses, 1 not split-K (the
 * pass leaves it alone), >= 2 that many K splits. *node may be NULL.
 * Errors: PZ_ERR_INVALID_ARG (NULL, an id out of range, split_k < 0), PZ_ERR_OOM; shapes by verify. */
PZ_API pz_status pz_decode_graph_add_gemm(pz_decode_graph *g, const char *name, int layer, int A, int W, int bias,
                                          int C, int split_k, int *node);

/* Checks that no two tensors share a name, every node's dtypes and shapes, that every input is
 * produced before it is read (or is an INPUT, WEIGHT or STATE) and that no node writes a weight.
 * Errors: PZ_ERR_INVALID_ARG (g NULL), PZ_ERR_VERIFY naming the tensors or the node. */
PZ_API pz_status pz_decode_graph_verify(const pz_decode_graph *g);

/* Runs the pass manager on g in place: verify, the passes in order (today only "prezero",
 * run when prezero = 1; 0 runs none), verify after each. log (may be NULL) gets one line per
 * rewritten donor with its slices. *matched (may be NULL): donors rewritten; *rewritten (may be
 * NULL): nodes rewritten. Errors: PZ_ERR_INVALID_ARG (g NULL, prezero not 0/1, or g already has a
 * tensor named as one the pass would create, "<donor>.prezero_buf" or "<node>.<slot>.prezero": the
 * message names it and g is left as it was), PZ_ERR_VERIFY, PZ_ERR_OOM, PZ_ERR_SHAPE. */
PZ_API pz_status pz_decode_graph_run_passes(pz_decode_graph *g, int prezero, FILE *log, int *matched,
                                            int *rewritten);

/* Writes the graph: text (dot = 0; one entry per node: name, op and params, every input and
 * output with shape, dtype and view) or Graphviz DOT (dot = 1). Deterministic.
 * Errors: PZ_ERR_INVALID_ARG (NULL, dot not 0 or 1), PZ_ERR_IO (writing failed). */
PZ_API pz_status pz_decode_graph_dump(const pz_decode_graph *g, FILE *f, int dot);

/* Counts of nodes / tensors. Errors: PZ_ERR_INVALID_ARG (NULL). */
PZ_API pz_status pz_decode_graph_counts(const pz_decode_graph *g, int *n_nodes, int *n_tensors);
/* Node / tensor `id`. Errors: PZ_ERR_INVALID_ARG (NULL, id out of range). */
PZ_API pz_status pz_decode_graph_node_info(const pz_decode_graph *g, int id, pz_graph_node_info *out);
PZ_API pz_status pz_decode_graph_tensor_info(const pz_decode_graph *g, int id, pz_graph_tensor_info *out);

#ifdef __cplusplus
}
#endif
#endif /* PREZERO_GRAPH_H */
