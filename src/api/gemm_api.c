/* Public GEMM API (include/prezero/gemm.h) over the CUDA backend's handle and launcher
 * (src/backend/cuda/gemm.h). A build without CUDA answers PZ_ERR_UNSUPPORTED. */
#include "prezero/gemm.h"
#include <stdlib.h>
#include <string.h>
#include "core/status.h"
#include "prezero_options.h"
#ifdef PZ_HAVE_CUDA
#include "backend/cuda/gemm.h"

struct pz_gemm_handle {
  pz_gemm_ctx *ctx;
};

pz_status pz_gemm_handle_create(const struct pz_runtime_opts *opts, pz_gemm_handle **out) {
  if (!out) return pz_error(PZ_ERR_INVALID_ARG, "pz_gemm_handle_create: out is NULL");
  *out = NULL;
  pz_runtime_opts ro;
  PZ_CHECK(pz_runtime_opts_take(&ro, opts, "pz_gemm_handle_create", NULL));
  pz_gemm_handle *h = calloc(1, sizeof *h);
  if (!h) return pz_error(PZ_ERR_OOM, "pz_gemm_handle_create: out of host memory");
  pz_status st = pz_gemm_ctx_create_opts(&ro, &h->ctx);
  if (st != PZ_OK) {
    free(h);
    return st;
  }
  *out = h;
  return PZ_OK;
}

void pz_gemm_handle_destroy(pz_gemm_handle *h) {
  if (!h) return;
  pz_gemm_ctx_destroy(h->ctx);
  free(h);
}

pz_status pz_gemm_run(pz_gemm_handle *h, const pz_gemm_problem *p, struct CUstream_st *stream) {
  if (!h || !p) return pz_error(PZ_ERR_INVALID_ARG, "pz_gemm_run: %s is NULL", !h ? "handle" : "problem");
  if (p->zero_init != 0 && p->zero_init != 1)
    return pz_error(PZ_ERR_INVALID_ARG, "pz_gemm_run: zero_init is %d; use 0 or 1", p->zero_init);
  if (p->out_dtype != PZ_ELEM_F32 && p->out_dtype != PZ_ELEM_BF16)
    return pz_error(PZ_ERR_DTYPE, "pz_gemm_run: out_dtype %d; use PZ_ELEM_F32 or PZ_ELEM_BF16", (int)p->out_dtype);
  if (!p->out) return pz_error(PZ_ERR_INVALID_ARG, "pz_gemm_run: out is NULL");
  if (p->out_col < 0 || p->out_row_stride < p->out_col + p->n)
    return pz_error(PZ_ERR_SHAPE, "pz_gemm_run: columns [%lld, %lld) do not fit in out_row_stride %lld",
                    (long long)p->out_col, (long long)(p->out_col + p->n), (long long)p->out_row_stride);
  pz_dtype dt = p->out_dtype == PZ_ELEM_F32 ? PZ_F32 : PZ_BF16;
  pz_gemm_args a;
  memset(&a, 0, sizeof a);
  a.m = p->m;
  a.n = p->n;
  a.k = p->k;
  a.A = p->A;
  a.lda = p->lda;
  a.W = p->W;
  a.ldw = p->ldw;
  a.C = (char *)p->out + p->out_col * (int64_t)pz_dtype_size(dt);
  a.ldc = p->out_row_stride;
  a.c_dtype = dt;
  a.bias = p->bias;
  a.zero_init = p->zero_init != 0;
  a.config.flavour = PZ_GEMM_AUTO;
  PZ_CHECK(pz_gemm_check(&a));
  return pz_gemm_launch(h->ctx, &a, (cudaStream_t)stream);
}

pz_status pz_gemm_skips_zeroing(pz_gemm_handle *h, int m, int n, int k, int *skips, char *kernel, size_t kernel_len) {
  if (!h || !skips) return pz_error(PZ_ERR_INVALID_ARG, "pz_gemm_skips_zeroing: %s is NULL", !h ? "handle" : "skips");
  if (m < 1 || m > 256 || n <= 0 || k <= 0 || n % 64 || k % 64)
    return pz_error(PZ_ERR_SHAPE, "pz_gemm_skips_zeroing: (m, n, k) = (%d, %d, %d); need m in 1..256, n and k "
                    "positive multiples of 64", m, n, k);
  pz_gemm_config cfg;
  bool split = false;
  PZ_CHECK(pz_gemm_choose(h->ctx, m, n, k, false, &cfg, &split));
  *skips = split ? 1 : 0;
  if (kernel && kernel_len) pz_gemm_config_describe(&cfg, kernel, kernel_len);
  return PZ_OK;
}

#else /* no CUDA backend */

pz_status pz_gemm_handle_create(const struct pz_runtime_opts *opts, pz_gemm_handle **out) {
  if (out) *out = NULL;
  return pz_error(PZ_ERR_UNSUPPORTED, "pz_gemm_handle_create: this build has no CUDA backend (built with "
                  "PZ_WITH_CUDA=OFF or without nvcc)");
}
void pz_gemm_handle_destroy(pz_gemm_handle *h) { (void)h; }
pz_status pz_gemm_run(pz_gemm_handle *h, const pz_gemm_problem *p, struct CUstream_st *stream) {
  return pz_error(PZ_ERR_UNSUPPORTED, "pz_gemm_run: this build has no CUDA backend");
}
pz_status pz_gemm_skips_zeroing(pz_gemm_handle *h, int m, int n, int k, int *skips, char *kernel, size_t kernel_len) {
  if (skips) *skips = 0;
  return pz_error(PZ_ERR_UNSUPPORTED, "pz_gemm_skips_zeroing: this build has no CUDA backend");
}
#endif
