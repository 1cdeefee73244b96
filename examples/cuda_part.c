/* CUDA part of the third-party example: the program owns its device buffers and its stream,
 * captures its own CUDA graph with prezero's fused all-reduce + RMSNorm and split-K GEMMs inside,
 * and replays it (the seed's pattern, with a one-rank communicator: world 1, this process):
 *   graph = the donor: all-reduce + residual + RMSNorm of partial [m, H] -> x_norm [m, H] bf16,
 *           whose extra CTAs zero_fill the [m, n_total] f32 output buffer of the GEMMs below
 *         + GEMM 1, A = x_norm, zero_init = 0, into columns [0, n1) of the buffer
 *         + GEMM 2, A = x_norm, zero_init = 0, into columns [n1, n1 + n2)
 *         + GEMM 3, A = x_norm, zero_init = 1, into its own [m, n3] f32 output (zeroes itself if it must).
 * Values are chosen so everything is exact: partial rows of +-1 (mean square 1, so with eps 1e-6 the
 * RMSNorm scale is 1 - 5e-7 and bf16(+-w * scale) rounds back to the integer +-w), small-integer
 * RMSNorm weights and GEMM weights, so every product sum is an exact integer in f32 in any order and
 * x_norm, residual and the GEMM outputs are compared bit for bit with a host reference. Five replays:
 * a missing zero_fill would leave the split-K sums accumulating over replays. Exit 0 on success, 1 on a mismatch or error, 77
 * (skipped) without a CUDA GPU of compute capability 9 (the kernels are built for sm_90a). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cuda_runtime.h>
#include <prezero.h>

#define CU(call)                                                                               \
  do {                                                                                         \
    cudaError_t e_ = (call);                                                                   \
    if (e_ != cudaSuccess) {                                                                   \
      printf("FAIL %s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_));       \
      return 1;                                                                                \
    }                                                                                          \
  } while (0)
#define OK(call)                                                                               \
  do {                                                                                         \
    pz_status s_ = (call);                                                                     \
    if (s_ != PZ_OK) {                                                                         \
      printf("FAIL %s:%d: %s: %s (%s)\n", __FILE__, __LINE__, #call, pz_status_string(s_),     \
             pz_last_error());                                                                 \
      return 1;                                                                                \
    }                                                                                          \
  } while (0)

static uint16_t bf16_of_int(int v) { /* small integers are exact in bf16 */
  float f = (float)v;
  uint32_t u;
  memcpy(&u, &f, 4);
  return (uint16_t)(u >> 16);
}
/* bf16 bits of the f32 product p * w (exact for these small values; -1 * 0 is -0, bits 0x8000, as on the GPU). */
static uint16_t bf16_of_prod(float p, int w) {
  float f = p * (float)w;
  uint32_t u;
  memcpy(&u, &f, 4);
  return (uint16_t)(u >> 16);
}
static int val(int i, int j, int salt) { return (int)((i * 7 + j * 13 + salt * 5) % 5) - 2; } /* -2..2 */

int main(void) {
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev < 1) {
    printf("no CUDA GPU: skipped\n");
    return 77;
  }
  struct cudaDeviceProp prop;
  CU(cudaGetDeviceProperties(&prop, 0));
  if (prop.major != 9) {
    printf("GPU %s is compute capability %d.%d; the kernels are built for sm_90a: skipped\n", prop.name, prop.major,
           prop.minor);
    return 77;
  }
  CU(cudaSetDevice(0));
  const int m = 8, k = 1024, n1 = 2112, n2 = 384, n3 = 512; /* k = the donor's hidden size H */
  const int64_t n_total = n1 + n2; /* 2112 is a multiple of 32: slice 2 starts there */
  /* The donor's inputs: partial[i][j] in {-1, +1}, RMSNorm weight w_j = val(0, j, 3) in -2..2; the
     expected x_norm is the f32 product partial * w, exact in bf16 (signed zeros included). */
  float *hP = malloc((size_t)m * k * 4);
  uint16_t *hNW = malloc((size_t)k * 2), *hW = malloc((size_t)(n1 + n2 + n3) * k * 2);
  int *hX = malloc((size_t)m * k * sizeof(int)); /* expected x_norm as integers */
  for (int j = 0; j < k; j++) hNW[j] = bf16_of_int(val(0, j, 3));
  for (int i = 0; i < m; i++)
    for (int j = 0; j < k; j++) {
      const int sg = ((i * 31 + j * 17) % 3) ? 1 : -1;
      hP[(size_t)i * k + j] = (float)sg;
      hX[(size_t)i * k + j] = sg * val(0, j, 3);
    }
  for (int i = 0; i < n1 + n2 + n3; i++)
    for (int j = 0; j < k; j++) hW[(size_t)i * k + j] = bf16_of_int(val(i, j, 2));
  void *dA, *dW, *dBuf, *dC3, *dP, *dNW, *dRes;
  CU(cudaMalloc(&dA, (size_t)m * k * 2)); /* x_norm: written by the donor, read by the GEMMs */
  CU(cudaMalloc(&dW, (size_t)(n1 + n2 + n3) * k * 2));
  CU(cudaMalloc(&dBuf, (size_t)m * n_total * 4));
  CU(cudaMalloc(&dC3, (size_t)m * n3 * 4));
  CU(cudaMalloc(&dP, (size_t)m * k * 4));
  CU(cudaMalloc(&dNW, (size_t)k * 2));
  CU(cudaMalloc(&dRes, (size_t)m * k * 4));
  CU(cudaMemcpy(dP, hP, (size_t)m * k * 4, cudaMemcpyHostToDevice));
  CU(cudaMemcpy(dNW, hNW, (size_t)k * 2, cudaMemcpyHostToDevice));
  CU(cudaMemcpy(dW, hW, (size_t)(n1 + n2 + n3) * k * 2, cudaMemcpyHostToDevice));
  CU(cudaMemset(dA, 0x7f, (size_t)m * k * 2));
  CU(cudaMemset(dBuf, 0x7f, (size_t)m * n_total * 4)); /* garbage the graph must overwrite */
  CU(cudaMemset(dC3, 0x7f, (size_t)m * n3 * 4));

  pz_gemm_handle *h = NULL;
  OK(pz_gemm_handle_create(NULL, &h));
  int ns[3] = {n1, n2, n3};
  for (int i = 0; i < 3; i++) {
    int skips = -1;
    char kernel[128];
    OK(pz_gemm_skips_zeroing(h, m, ns[i], k, &skips, kernel, sizeof kernel));
    printf("gemm m %d n %d k %d: %s; zero_init = 0 %s\n", m, ns[i], k, kernel, skips ? "skips its zeroing" : "saves nothing");
  }
  pz_gemm_problem p1 = {.m = m, .n = n1, .k = k, .A = dA, .lda = k, .W = dW, .ldw = k, .out = dBuf, .out_col = 0,
                        .out_row_stride = n_total, .out_dtype = PZ_ELEM_F32, .bias = NULL, .zero_init = 0};
  pz_gemm_problem p2 = p1;
  p2.n = n2;
  p2.W = (const uint16_t *)dW + (size_t)n1 * k;
  p2.out_col = n1;
  pz_gemm_problem p3 = {.m = m, .n = n3, .k = k, .A = dA, .lda = k, .W = (const uint16_t *)dW + (size_t)(n1 + n2) * k,
                        .ldw = k, .out = dC3, .out_col = 0, .out_row_stride = n3, .out_dtype = PZ_ELEM_F32,
                        .bias = NULL, .zero_init = 1};

  /* A one-rank tensor-parallel group (world 1): the engine's processes would share this id. */
  pz_ar_unique_id id;
  pz_ar_comm *comm = NULL;
  OK(pz_ar_get_unique_id(&id));
  pz_ar_comm_config cc = PZ_AR_COMM_CONFIG_INIT;
  cc.max_m = m;
  cc.max_H = k;
  OK(pz_ar_comm_init_rank_config(&comm, &cc, id));
  OK(pz_ar_unique_id_remove(&id));
  pz_ar_rmsnorm_params ar = {.partial = dP, .ld_partial = k, .residual_in = NULL, .residual_out = dRes, .ld_res = k,
                             .weight = dNW, .x_norm = dA, .ld_x = k, .eps = 1e-6f, .m = m, .H = k,
                             .fill_ptr = dBuf, .fill_n_total = n_total, .fill_n_base = n_total,
                             .fill_row_stride = n_total, .fill_dtype = PZ_AR_FILL_F32, .fill_all = 1};

  cudaStream_t s;
  CU(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CU(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  OK(pz_ar_rmsnorm(comm, &ar, (pz_ar_stream)s));
  OK(pz_gemm_run(h, &p1, s));
  OK(pz_gemm_run(h, &p2, s));
  OK(pz_gemm_run(h, &p3, s));
  CU(cudaStreamEndCapture(s, &graph));
  CU(cudaGraphInstantiate(&exec, graph, 0));
  for (int r = 0; r < 5; r++) CU(cudaGraphLaunch(exec, s));
  OK(pz_ar_comm_check(comm, (pz_ar_stream)s)); /* synchronises; PZ_ERR_TIMEOUT if a rank were missing */

  float *buf = malloc((size_t)m * n_total * 4);
  float *c3 = malloc((size_t)m * n3 * 4);
  CU(cudaMemcpy(buf, dBuf, (size_t)m * n_total * 4, cudaMemcpyDeviceToHost));
  CU(cudaMemcpy(c3, dC3, (size_t)m * n3 * 4, cudaMemcpyDeviceToHost));
  uint16_t *xn = malloc((size_t)m * k * 2);
  float *res = malloc((size_t)m * k * 4);
  CU(cudaMemcpy(xn, dA, (size_t)m * k * 2, cudaMemcpyDeviceToHost));
  CU(cudaMemcpy(res, dRes, (size_t)m * k * 4, cudaMemcpyDeviceToHost));
  int bad = 0, bad_ar = 0;
  for (size_t i = 0; i < (size_t)m * k; i++)
    if ((xn[i] != bf16_of_prod(hP[i], val(0, (int)(i % k), 3)) || res[i] != hP[i]) && bad_ar++ < 5)
      printf("FAIL donor element %zu: x_norm bits 0x%04x (expected %d), residual %g (expected %g)\n", i, xn[i], hX[i],
             res[i], hP[i]);
  for (int i = 0; i < m; i++)
    for (int c = 0; c < n1 + n2 + n3; c++) {
      int ref = 0;
      for (int j = 0; j < k; j++) ref += hX[(size_t)i * k + j] * val(c, j, 2);
      float got = c < n1 + n2 ? buf[(size_t)i * n_total + c] : c3[(size_t)i * n3 + (c - n1 - n2)];
      if (got != (float)ref && bad++ < 5) printf("FAIL row %d col %d: %g, expected %d\n", i, c, got, ref);
    }
  printf("%s: the fused all-reduce + RMSNorm with zero_fill and 3 GEMMs in the program's own CUDA graph, 5 replays, "
         "%d wrong donor values, %d wrong GEMM values\n", bad || bad_ar ? "FAIL" : "ok", bad_ar, bad);
  bad += bad_ar;
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(s);
  pz_gemm_handle_destroy(h);
  pz_ar_comm_destroy(comm);
  cudaFree(dP);
  cudaFree(dNW);
  cudaFree(dRes);
  free(hP);
  free(hNW);
  free(hX);
  free(xn);
  free(res);
  cudaFree(dA);
  cudaFree(dW);
  cudaFree(dBuf);
  cudaFree(dC3);
  free(hW);
  free(buf);
  free(c3);
  return bad ? 1 : 0;
}
