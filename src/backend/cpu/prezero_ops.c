/* CPU kernels of the prezero rewrite ops (placeholder until the pass lands). */
#include "backend/cpu/cpu_ops.h"
pz_status pz_cpu_op_AR_RMSNORM_MAYBE_PREZERO(pz_cpu_ctx *c, const pz_node *n) {
  return pz_error(PZ_ERR_UNSUPPORTED, "ar_rmsnorm_maybe_prezero_ is not implemented on the CPU yet");
}
pz_status pz_cpu_op_MM_MAYBE_PREZERO(pz_cpu_ctx *c, const pz_node *n) {
  return pz_error(PZ_ERR_UNSUPPORTED, "mm_maybe_prezero_ is not implemented on the CPU yet");
}
