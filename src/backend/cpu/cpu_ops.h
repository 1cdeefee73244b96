/* CPU kernels of every op, one per ops.def entry: pz_cpu_op_<OP>(ctx, node). The executor
 * dispatches through a table generated from ops.def. Each kernel reads its inputs and writes
 * its outputs through ctx->data (this rank) or ctx->rank_data (collectives, all ranks). */
#ifndef PZ_BACKEND_CPU_OPS_H
#define PZ_BACKEND_CPU_OPS_H
#include "backend/cpu/cpu_backend.h"

/* Shapes and dtypes per op: ops.def and the src slot comments of core/ir.h; formulas:
 * backend/cpu/ref_ops.h. ctx->m rows are computed (<= the graph's m).
 * Errors: PZ_ERR_INVALID_ARG (missing input, too few src/dst slots, an embedding id outside
 * the vocab, MLA position outside the cache), PZ_ERR_SHAPE (output shape, non-unit column
 * stride, KV-cache layout, zero_fill buffer width), PZ_ERR_DTYPE (operand dtypes),
 * PZ_ERR_UNSUPPORTED, PZ_ERR_OOM (reference scratch). */
#define PZ_OP(e, name, coll) pz_status pz_cpu_op_##e(pz_cpu_ctx *c, const pz_node *n);
#include "core/ops.def"
#undef PZ_OP
#endif
