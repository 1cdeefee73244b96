/* CUPTI collector (profile.h) on the GPU: graph nodes captured under IR-node tags are attributed
 * to those tags (kernels and memsets, in creation order), every replay gives one record per node,
 * records stop when activity is off. Exits 77 (skipped) without a GPU. */
#include <string.h>
#include <cuda_runtime.h>
#include "backend/cuda/gemm.h"
#include "backend/cuda/profile.h"
#include "pz_test.h"

#define REPLAYS 10

static int count_tag(const pz_profile_node *v, int n, int dev, int tag) {
  int c = 0;
  for (int i = 0; i < n; i++) c += v[i].device == dev && v[i].tag == tag;
  return c;
}

static const pz_profile_node *nth(const pz_profile_node *v, int n, int dev, int tag, int k) {
  for (int i = 0; i < n; i++)
    if (v[i].device == dev && v[i].tag == tag && k-- == 0) return &v[i];
  return NULL;
}

static bool is_fill(const pz_profile_node *x) { return x && x->kind == 0 && strstr(x->name, "fill_kernel"); }
/* A memset node: a MEMSET record, or a kernel the driver turned it into (CUPTI keeps that
 * optimisation), which is not our fill kernel. */
static bool is_memset(const pz_profile_node *x) { return x && (x->kind == 1 || !strstr(x->name, "fill_kernel")); }

int main(void) {
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
    cudaGetLastError();
    printf("no GPU: skipped\n");
    return 77;
  }
  int dev = 0;
  CHECK(cudaSetDevice(dev) == cudaSuccess);
  pz_status st = pz_profile_start();
  if (st == PZ_ERR_UNSUPPORTED) {
    printf("CUPTI unavailable (%s): skipped\n", pz_last_error());
    return 77;
  }
  CHECK_OK(st);
  CHECK_ST(pz_profile_start(), PZ_OK); /* idempotent */

  cudaStream_t s;
  void *a = NULL, *b = NULL;
  CHECK(cudaStreamCreate(&s) == cudaSuccess);
  CHECK(cudaMalloc(&a, 2u << 20) == cudaSuccess);
  CHECK(cudaMalloc(&b, 1u << 16) == cudaSuccess);
  /* Tag 7: fill kernel, then memset. Tag 9: two fill kernels. Untagged: one memset. */
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed) == cudaSuccess);
  pz_profile_set_node(7);
  CHECK_OK(pz_gemm_fill_bf16(a, 1 << 20, 1, false, s));
  CHECK(cudaMemsetAsync(b, 0, 1u << 16, s) == cudaSuccess);
  pz_profile_set_node(9);
  CHECK_OK(pz_gemm_fill_bf16(a, 1 << 20, 2, true, s));
  CHECK_OK(pz_gemm_fill_bf16(a, 1 << 18, 3, true, s));
  pz_profile_set_node(-1);
  CHECK(cudaMemsetAsync(b, 0, 4096, s) == cudaSuccess);
  cudaGraph_t g;
  cudaGraphExec_t ge;
  CHECK(cudaStreamEndCapture(s, &g) == cudaSuccess);
  CHECK(cudaGraphInstantiate(&ge, g, 0) == cudaSuccess);

  CHECK_OK(pz_profile_activity(true));
  for (int i = 0; i < REPLAYS; i++) CHECK(cudaGraphLaunch(ge, s) == cudaSuccess);
  CHECK_OK(pz_profile_flush(1));
  pz_profile_node *v = NULL;
  int n = 0;
  CHECK_OK(pz_profile_summary(&v, &n));
  printf("%d graph nodes with records\n", n);
  for (int i = 0; i < n; i++)
    printf("  dev %d tag %d seq %llu kind %d count %d median %.2f us %s\n", v[i].device, v[i].tag,
           (unsigned long long)v[i].seq, v[i].kind, v[i].count, v[i].median_us, v[i].name);
  CHECK(count_tag(v, n, dev, 7) == 2);
  CHECK(count_tag(v, n, dev, 9) == 2);
  CHECK(count_tag(v, n, dev, -1) == 1);
  CHECK(is_fill(nth(v, n, dev, 7, 0)));   /* creation order inside a tag */
  CHECK(is_memset(nth(v, n, dev, 7, 1)));
  CHECK(is_fill(nth(v, n, dev, 9, 0)) && is_fill(nth(v, n, dev, 9, 1)));
  CHECK(is_memset(nth(v, n, dev, -1, 0)));
  const pz_profile_node *f0 = nth(v, n, dev, 9, 0), *f1 = nth(v, n, dev, 9, 1);
  CHECK(f0 && f1 && f0->seq < f1->seq);
  for (int i = 0; i < n; i++) {
    CHECK(v[i].count == REPLAYS);
    CHECK(v[i].median_us > 0 && v[i].min_us <= v[i].median_us);
  }
  free(v);

  /* Activity off: replays leave no records. */
  pz_profile_clear();
  CHECK_OK(pz_profile_activity(false));
  for (int i = 0; i < 3; i++) CHECK(cudaGraphLaunch(ge, s) == cudaSuccess);
  CHECK_OK(pz_profile_flush(1));
  CHECK_OK(pz_profile_summary(&v, &n));
  CHECK(n == 0);
  free(v);

  cudaGraphExecDestroy(ge);
  cudaGraphDestroy(g);
  cudaFree(a);
  cudaFree(b);
  cudaStreamDestroy(s);
  pz_profile_stop();
  TEST_DONE();
}
