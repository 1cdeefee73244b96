/* CUDA part of the third-party example: the program owns its device buffers and its stream,
 * captures its own CUDA graph with prezero's split-K GEMM inside, and replays it:
 *   graph = memset of the [m, n_total] f32 output buffer (what the donor's zero_fill does)
 *         + GEMM 1, zero_init = 0, into columns [0, n1) of the buffer
 *         + GEMM 2, zero_init = 0, into columns [n1, n1 + n2)
 *         + GEMM 3, zero_init = 1, into its own [m, n3] f32 output (zeroes itself if it must).
 * Inputs are small integers, so every product sum is exact in f32 (in any order) and the results are
 * compared bit for bit with a host reference. Exit 0 on success, 1 on a mismatch or error, 77
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
  const int m = 8, k = 1024, n1 = 2112, n2 = 384, n3 = 512;
  const int64_t n_total = n1 + n2; /* 2112 is a multiple of 32: slice 2 starts there */
  uint16_t *hA = malloc((size_t)m * k * 2), *hW = malloc((size_t)(n1 + n2 + n3) * k * 2);
  for (int i = 0; i < m; i++)
    for (int j = 0; j < k; j++) hA[(size_t)i * k + j] = bf16_of_int(val(i, j, 1));
  for (int i = 0; i < n1 + n2 + n3; i++)
    for (int j = 0; j < k; j++) hW[(size_t)i * k + j] = bf16_of_int(val(i, j, 2));
  void *dA, *dW, *dBuf, *dC3;
  CU(cudaMalloc(&dA, (size_t)m * k * 2));
  CU(cudaMalloc(&dW, (size_t)(n1 + n2 + n3) * k * 2));
  CU(cudaMalloc(&dBuf, (size_t)m * n_total * 4));
  CU(cudaMalloc(&dC3, (size_t)m * n3 * 4));
  CU(cudaMemcpy(dA, hA, (size_t)m * k * 2, cudaMemcpyHostToDevice));
  CU(cudaMemcpy(dW, hW, (size_t)(n1 + n2 + n3) * k * 2, cudaMemcpyHostToDevice));
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

  cudaStream_t s;
  CU(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CU(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  CU(cudaMemsetAsync(dBuf, 0, (size_t)m * n_total * 4, s));
  OK(pz_gemm_run(h, &p1, s));
  OK(pz_gemm_run(h, &p2, s));
  OK(pz_gemm_run(h, &p3, s));
  CU(cudaStreamEndCapture(s, &graph));
  CU(cudaGraphInstantiate(&exec, graph, 0));
  for (int r = 0; r < 5; r++) CU(cudaGraphLaunch(exec, s));
  CU(cudaStreamSynchronize(s));

  float *buf = malloc((size_t)m * n_total * 4);
  float *c3 = malloc((size_t)m * n3 * 4);
  CU(cudaMemcpy(buf, dBuf, (size_t)m * n_total * 4, cudaMemcpyDeviceToHost));
  CU(cudaMemcpy(c3, dC3, (size_t)m * n3 * 4, cudaMemcpyDeviceToHost));
  int bad = 0;
  for (int i = 0; i < m; i++)
    for (int c = 0; c < n1 + n2 + n3; c++) {
      int ref = 0;
      for (int j = 0; j < k; j++) ref += val(i, j, 1) * val(c, j, 2);
      float got = c < n1 + n2 ? buf[(size_t)i * n_total + c] : c3[(size_t)i * n3 + (c - n1 - n2)];
      if (got != (float)ref && bad++ < 5) printf("FAIL row %d col %d: %g, expected %d\n", i, c, got, ref);
    }
  printf("%s: 3 GEMMs in the program's own CUDA graph, 5 replays, %d wrong values\n", bad ? "FAIL" : "ok", bad);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(s);
  pz_gemm_handle_destroy(h);
  cudaFree(dA);
  cudaFree(dW);
  cudaFree(dBuf);
  cudaFree(dC3);
  free(hA);
  free(hW);
  free(buf);
  free(c3);
  return bad ? 1 : 0;
}
