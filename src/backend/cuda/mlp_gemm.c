/* The SwiGLU MLP by path (mlp_gemm.h): the fused expert kernel or GEMM + SiLU-and-multiply + GEMM. */
#include "backend/cuda/mlp_gemm.h"
#include <stdint.h>
#include <string.h>
#include "backend/cuda/dense_ops.h"
#include "backend/cuda/moe.h"
#include "core/options.h"

static size_t al256(size_t b) { return (b + 255) / 256 * 256; }

bool pz_cuda_mlp_uses_gemm(const pz_gemm_ctx *g, pz_mlp_role role, int m, int64_t H, int64_t inter) {
  if (!g || m < 1 || m > 256) return false;
  const pz_runtime_opts *ro = pz_gemm_ctx_opts(g);
  const int v = ro ? ro->mlp_gemm : -1; /* PREZERO_MLP_GEMM */
  if (v == 0) return false;
  if (v == 1) return true;
  const int min_m = role == PZ_MLP_SHARED ? PZ_MLP_GEMM_MIN_M_SHARED : PZ_MLP_GEMM_MIN_M_DENSE;
  return m >= min_m && H > 0 && inter > 0 && H % 64 == 0 && inter % 64 == 0;
}

bool pz_cuda_mlp_one_gu(const pz_gemm_ctx *g, int64_t H, int64_t inter, const pz_bf16 *w_gate, const pz_bf16 *w_up) {
  const pz_runtime_opts *ro = g ? pz_gemm_ctx_opts(g) : NULL;
  if (ro && ro->mlp_one_gu == 0) return false; /* PREZERO_MLP_ONE_GU=0 */
  return w_gate && w_up && H > 0 && inter > 0 && 2 * inter <= INT32_MAX && w_up == w_gate + inter * H;
}

/* gu f32 [m, 2 inter] at 0, act bf16 [m, inter] after it */
static size_t gu_bytes(int max_m, int64_t inter) { return al256((size_t)4 * (size_t)max_m * 2 * (size_t)inter); }

size_t pz_cuda_mlp_workspace_bytes(int max_m, int64_t inter) {
  if (max_m < 1 || inter < 1) return 0;
  const size_t gemm = gu_bytes(max_m, inter) + al256((size_t)2 * (size_t)max_m * (size_t)inter);
  const size_t fused = pz_mlp_workspace_bytes(max_m, inter);
  return gemm > fused ? gemm : fused;
}

static pz_status gemm_into(pz_gemm_ctx *g, int m, int64_t n, int64_t k, const void *A, int64_t lda, const pz_bf16 *W,
                           float *C, int64_t ldc, bool zero_init, cudaStream_t s) {
  pz_gemm_args a;
  memset(&a, 0, sizeof a);
  a.m = m;
  a.n = (int)n;
  a.k = (int)k;
  a.A = A;
  a.lda = lda;
  a.W = W;
  a.ldw = k;
  a.C = C;
  a.ldc = ldc;
  a.c_dtype = PZ_F32;
  a.zero_init = zero_init;
  a.config.flavour = PZ_GEMM_AUTO;
  return pz_cuda_gemm_any(g, &a, s);
}

pz_status pz_cuda_mlp(pz_gemm_ctx *g, pz_mlp_role role, int m, int64_t H, int64_t inter, const pz_bf16 *x, int64_t ldx,
                      const pz_bf16 *w_gate, const pz_bf16 *w_up, const pz_bf16 *w_down, float *out,
                      int64_t ld_out, void *workspace, size_t workspace_bytes, cudaStream_t stream) {
  return pz_cuda_mlp_into(g, role, m, H, inter, x, ldx, w_gate, w_up, w_down, out, ld_out, NULL, 0, false, workspace,
                          workspace_bytes, stream);
}

pz_status pz_cuda_mlp_into(pz_gemm_ctx *g, pz_mlp_role role, int m, int64_t H, int64_t inter, const pz_bf16 *x,
                           int64_t ldx, const pz_bf16 *w_gate, const pz_bf16 *w_up, const pz_bf16 *w_down, float *out,
                           int64_t ld_out, float *gu_out, int64_t ld_gu, bool gu_zeroed, void *workspace,
                           size_t workspace_bytes, cudaStream_t stream) {
  if (!pz_cuda_mlp_uses_gemm(g, role, m, H, inter))
    return pz_mlp_launch(m, H, inter, x, ldx, w_gate, w_up, w_down, out, ld_out, workspace, workspace_bytes, stream);
  /* the fused kernel's contract, so that the path never changes what is accepted */
  PZ_CHECK(pz_mlp_check(m, H, inter, x, ldx, w_gate, w_up, w_down, out, ld_out, workspace));
  const size_t need = pz_cuda_mlp_workspace_bytes(m, inter);
  if (workspace_bytes < need)
    return pz_error(PZ_ERR_INVALID_ARG, "mlp: workspace %zu bytes < %zu needed", workspace_bytes, need);
  if (gu_out && (((uintptr_t)gu_out & 15) || ld_gu < 2 * inter || ld_gu % 4))
    return pz_error(PZ_ERR_INVALID_ARG, "mlp: gu must be 16-byte aligned with a row stride >= %lld and a multiple of 4 "
                    "(ld_gu %lld)", (long long)(2 * inter), (long long)ld_gu);
  float *gu = gu_out ? gu_out : (float *)workspace;
  const int64_t ldg = gu_out ? ld_gu : 2 * inter;
  const bool zero = !(gu_out && gu_zeroed); /* a pre-zeroed gu: the GEMMs accumulate into the zeros */
  pz_bf16 *act = (pz_bf16 *)((char *)workspace + gu_bytes(m, inter));
  if (pz_cuda_mlp_one_gu(g, H, inter, w_gate, w_up)) { /* up's rows follow gate's: one [2 inter, H] weight */
    PZ_CHECK(gemm_into(g, m, 2 * inter, H, x, ldx, w_gate, gu, ldg, zero, stream));
  } else {
    PZ_CHECK(gemm_into(g, m, inter, H, x, ldx, w_gate, gu, ldg, zero, stream));
    PZ_CHECK(gemm_into(g, m, inter, H, x, ldx, w_up, gu + inter, ldg, zero, stream));
  }
  pz_silu_mul_params sp = {.gu = gu, .act = act, .m = m, .inter = inter, .ld_gu = ldg, .ld_act = inter};
  PZ_CHECK(pz_cuda_silu_mul(&sp, stream));
  return gemm_into(g, m, H, inter, act, inter, w_down, out, ld_out, true, stream);
}
