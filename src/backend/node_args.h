/* A node's inputs as both executors read them (backend/cpu/cpu_ops.c, backend/cuda/exec_ops.c):
 * required slots, row strides, the vocab size of a vocab-parallel op. Header-only. */
#ifndef PZ_BACKEND_NODE_ARGS_H
#define PZ_BACKEND_NODE_ARGS_H
#include <stdint.h>
#include "core/ir.h"
#include "core/status.h"

/* PZ_OK when src slot `slot` of n is present; else PZ_ERR_INVALID_ARG ("<node>: missing input <slot>"). */
static inline pz_status pz_node_need_src(const pz_node *n, int slot) {
  if (slot >= n->n_src || n->src[slot] < 0) return pz_error(PZ_ERR_INVALID_ARG, "%s: missing input %d", n->name, slot);
  return PZ_OK;
}

/* *ld = the row stride (elements) of tensor `id` of g, a 1-D tensor (its length) or one whose
 * last dimension is unit-stride (the stride of the one before). Returns PZ_OK, or PZ_ERR_SHAPE
 * when the column stride is not 1 (n names the node in the message). */
static inline pz_status pz_node_row_ld(const pz_graph *g, const pz_node *n, int id, int64_t *ld) {
  const pz_tensor *t = &g->tensors[id];
  if (t->ndim == 1) { *ld = t->ne[0]; return PZ_OK; }
  if (t->stride[t->ndim - 1] != 1) return pz_error(PZ_ERR_SHAPE, "%s: tensor %s has non-unit column stride", n->name, t->name);
  *ld = t->stride[t->ndim - 2];
  return PZ_OK;
}

/* The row stride (elements) of optional src slot `slot` of n, unchecked: 0 when the slot is absent,
 * ne[0] for a 1-D tensor, else the stride of its second-to-last dimension. */
static inline int64_t pz_node_opt_ld(const pz_graph *g, const pz_node *n, int slot) {
  if (slot >= n->n_src || n->src[slot] < 0) return 0;
  const pz_tensor *t = &g->tensors[n->src[slot]];
  return t->ndim >= 2 ? t->stride[t->ndim - 2] : t->ne[0];
}

/* The whole vocabulary (tokens) of a vocab-parallel node (EMBEDDING, ARGMAX): the node's
 * p.vocab.vocab_size, else the graph's info.vocab_size, else vocab_per_rank * tp. */
static inline int64_t pz_node_vocab_size(const pz_graph *g, const pz_node *n, int64_t vocab_per_rank, int tp) {
  return n->p.vocab.vocab_size > 0 ? n->p.vocab.vocab_size
         : g->info.vocab_size > 0  ? g->info.vocab_size
                                   : vocab_per_rank * tp;
}
#endif
