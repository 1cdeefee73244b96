/* CUDA executor internals: the per-op launch context and the op table mapping each decode-graph
 * op (core/ops.def) to the C launchers of the CUDA kernels (GEMM, AR, dense ops, MLA, MoE). */
#ifndef PZ_BACKEND_CUDA_EXEC_OPS_H
#define PZ_BACKEND_CUDA_EXEC_OPS_H
#include <stdbool.h>
#include <cuda_runtime.h>
#include "backend/cuda/ar_nccl.h"
#include "backend/cuda/comm.h"
#include "backend/cuda/dense_ops.h"
#include "backend/cuda/exec.h"
#include "backend/cuda/gemm.h"
#include "core/gate.h"
#include "core/ir.h"

/* What one rank owns besides tensor storage. */
typedef struct pz_cuda_rank {
  int device;
  cudaStream_t stream;
  pz_gemm_ctx *gemm;
  char *arena;                 /* device storage of every owner tensor */
  size_t arena_bytes;
  void **data;                 /* data[t]: element 0 of tensor t on this rank (views resolved) */
  pz_argmax_cand *cand;        /* device [m]: this rank's argmax candidates (ARGMAX node) */
  pz_argmax_cand *cand_host;   /* pinned host [m]: copied there by the ARGMAX node */
  int32_t *in_host;            /* pinned host [2*m + 1]: tokens, positions, then the real row count of this step */
  int32_t *rows;               /* device [1] (in the arena): the real row count, staged with the inputs; the
                                  attention ops' padding rule (mla.h, gqa.h); <= 0: every row is real */
  int32_t rows_staged;         /* the value *rows holds (0 after the arena's memset): copied only on a change */
  void **op_ctx;               /* [n_nodes]: per-node op state (the MLA / GQA op's context), or NULL */
  void *ws;                    /* device scratch shared by the MoE / dense-MLP / GQA nodes (run in order) */
  size_t ws_bytes;
  float *ar_tmp;               /* NCCL donors only: contiguous [m, H] f32 copy of a strided partial */
  unsigned char *w4_tiled;     /* [n_tensors] or NULL: 1 words, 2 scales of INT4 experts moved into the
                                  W4A16 kernel's tiled layout at load (pz_cuda_tile_w4_experts) */
  int w4_tiled_n;              /* entries of w4_tiled (the graph's tensors at load; plans add more after) */
  cudaStream_t moe_side;       /* INT4 / FP8 MoE nodes with shared experts: the stream those run on beside
                                  the router (moe_q.h side), with its fork and join events; NULL when the
                                  graph has no such node or PREZERO_MOE_FORK=0 */
  cudaEvent_t moe_ev_fork, moe_ev_join;
} pz_cuda_rank;

/* INT4 routed experts of every MOE node of g (wquant 1, H and I multiples of 128, no views of or
 * as its weights, 16-byte aligned) rearranged in place on rank R into the W4A16 kernel's tiled
 * layout (moe_q.h pz_moe_w4a16_tile), marking each tensor in R->w4_tiled (allocated here). Once,
 * after the fill or the checkpoint load; words and scales are each moved once even when nodes
 * share them. A node whose scratch (up to 8 experts' matrix, e.g. 56 MiB for Kimi-K2.5 at TP 1)
 * cannot be allocated keeps the stored layout, whole. Errors: PZ_ERR_OOM (host), PZ_ERR_CUDA and
 * those of pz_moe_w4a16_tile. */
pz_status pz_cuda_tile_w4_experts(const pz_graph *g, pz_cuda_rank *R);
/* True when MOE node n's experts on rank R are tiled (op_moe_q passes w4_tiled = 1). */
bool pz_cuda_w4_node_tiled(const pz_cuda_rank *R, const pz_node *n);
/* True when tensor t of rank R is in the tiled layout; its whole bytes (words or scales [E, N, ·]). */
bool pz_cuda_w4_tensor_tiled(const pz_cuda_rank *R, int t);
size_t pz_cuda_w4_tensor_bytes(const pz_graph *g, int t);
/* A tiled tensor t read back whole into host memory (`whole`, pz_cuda_w4_tensor_bytes bytes),
 * rearranged in place into the layout the graph declares (the stored one); a no-op for other
 * tensors. Errors: those of pz_moe_w4a16_untile_host. */
pz_status pz_cuda_w4_untile_read(const pz_graph *g, const pz_cuda_rank *R, int t, void *whole);

/* Context of one op launch. Non-collective ops: rank/stream/gemm/data are this rank's.
 * Collective ops (AR_RMSNORM*, ARGMAX) are called once and launch on every rank, issuing all
 * ranks' kernels before anything waits. */
typedef struct pz_cuda_ctx {
  const pz_graph *g;
  int rank, tp;
  int lo, hi;                  /* the ranks this process runs: [0, tp), or one with mp */
  int64_t m;                   /* rows of this launch (the padded size under capture) */
  pz_cuda_rank *ranks;         /* [tp] */
  void **data;                 /* rank_data[rank] */
  void **rank_data[8];         /* [tp]: each rank's tensor pointers for the graph g being run
                                  (ranks[r].data, or a per-batch plan's; PZ_CUDA_MAX_TP entries) */
  cudaStream_t stream;         /* ranks[rank].stream */
  pz_gemm_ctx *gemm;           /* ranks[rank].gemm */
  pz_comm *comm;
  struct pz_ar_comm *mp;       /* one rank per process: its communicator (comm is NULL) */
  pz_nccl *nccl;               /* non-NULL: donors run as NCCL all-reduce + RMSNorm (PREZERO_AR_ALGO=nccl) */
  const pz_device_desc *dev;
} pz_cuda_ctx;

typedef pz_status (*pz_cuda_op_fn)(pz_cuda_ctx *c, const pz_node *n);

/* The op table is generated from core/ops.def (exec_ops.c): every op there has exactly one entry,
 * either a launcher or a declared gap with a non-empty reason, fixed at compile time.
 * pz_cuda_op_launcher: the launcher of op, or NULL when this build has no CUDA kernel for it
 * (a gap; also NULL for op outside 0..PZ_OP_COUNT-1). The executor then refuses the graph with
 * PZ_ERR_UNSUPPORTED naming the op and the gap. */
pz_cuda_op_fn pz_cuda_op_launcher(pz_op op);
/* Why op has no launcher (the declared gap: which kernel is missing), "" when it has one,
 * "unknown op" when op is out of range. Never NULL. */
const char *pz_cuda_op_gap(pz_op op);

/* Creates rank R's op resources for graph g on the current device (R's GPU): one MLA context
 * per MLA node (scratch for g->info.m rows, R->gemm for its GEMMs), one GQA context per GQA node
 * (R->gemm for o_proj), one workspace sized for the largest MoE / dense-MLP / GQA node, and the
 * MoE side stream with its two events when a quantised MoE node has shared experts (unless
 * R->gemm's options say PREZERO_MOE_FORK=0).
 * Errors: those of pz_mla_cuda_create and pz_gqa_cuda_create, PZ_ERR_OOM, PZ_ERR_CUDA. */
pz_status pz_cuda_ops_prepare(const pz_graph *g, pz_cuda_rank *R);
/* Frees what pz_cuda_ops_prepare created (current device = R's GPU); safe on partial state. */
void pz_cuda_ops_release(const pz_graph *g, pz_cuda_rank *R);
#endif
