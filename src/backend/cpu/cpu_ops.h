/* CPU kernels of every op, one per ops.def entry: pz_cpu_op_<OP>(ctx, node). The executor
 * dispatches through a table generated from ops.def. Each kernel reads its inputs and writes
 * its outputs through ctx->data (this rank) or ctx->rank_data (collectives, all ranks). */
#ifndef PZ_BACKEND_CPU_OPS_H
#define PZ_BACKEND_CPU_OPS_H
#include "backend/cpu/cpu_backend.h"

#define PZ_OP(e, name, coll) pz_status pz_cpu_op_##e(pz_cpu_ctx *c, const pz_node *n);
#include "core/ops.def"
#undef PZ_OP
#endif
