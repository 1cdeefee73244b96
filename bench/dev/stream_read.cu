/* Workbench (bench/dev/README.md): the streaming read that the benchmarks use as their HBM
 * bandwidth yardstick, in three versions, timed on the current GPU. Standalone, as llm.c's
 * dev/cuda files are:
 *   nvcc -O3 -arch=sm_90a -o stream_read bench/dev/stream_read.cu && ./stream_read [version] [MiB]
 * (or `ninja -C build dev_stream_read`). version 0 (default) runs all; MiB defaults to 1024, far
 * beyond the H200's 60 MB L2. Prints the median over 20 timed reads of each version, in GB/s.
 *   1: ld.global.nc.L1::no_allocate.v4 (pz_moe_stream_read, bench/dev/dev_helpers.cu; the expert
 *      kernels' weight load)
 *   2: plain 16-byte loads (ld.global.v4)
 *   3: __ldcs, the evict-first streaming load (ld.global.cs.v4) */
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

#define CHECK_CUDA(x)                                                                            \
  do {                                                                                           \
    cudaError_t e_ = (x);                                                                        \
    if (e_ != cudaSuccess) {                                                                     \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));        \
      exit(1);                                                                                   \
    }                                                                                            \
  } while (0)

template <int V>
__device__ __forceinline__ uint4 load16(const uint4 *p) {
  if constexpr (V == 1) {
    uint4 v;
    asm("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
        : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
        : "l"(p));
    return v;
  } else if constexpr (V == 2) {
    return *p;
  } else {
    return __ldcs(p);
  }
}

/* Grid-stride read of n 16-byte words; the xor keeps the loads alive (sink is practically never
 * written). */
template <int V>
__global__ void stream_read(const uint4 *p, long long n, unsigned *sink) {
  unsigned acc = 0;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
    uint4 v = load16<V>(p + i);
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x9e3779b9u) atomicAdd(sink, 1u);
}

static void launch(int version, const uint4 *p, long long n, unsigned *sink, int grid) {
  if (version == 1) stream_read<1><<<grid, 512>>>(p, n, sink);
  else if (version == 2) stream_read<2><<<grid, 512>>>(p, n, sink);
  else stream_read<3><<<grid, 512>>>(p, n, sink);
}

int main(int argc, char **argv) {
  const int only = argc > 1 ? atoi(argv[1]) : 0;
  const long long mib = argc > 2 ? atoll(argv[2]) : 1024;
  if (only < 0 || only > 3 || mib < 1) {
    fprintf(stderr, "usage: %s [version 0..3 (0: all)] [MiB >= 1]\n", argv[0]);
    return 2;
  }
  int dev = 0, sms = 0;
  CHECK_CUDA(cudaGetDevice(&dev));
  CHECK_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  cudaDeviceProp prop;
  CHECK_CUDA(cudaGetDeviceProperties(&prop, dev));
  const size_t bytes = (size_t)mib << 20;
  uint4 *p = nullptr;
  unsigned *sink = nullptr;
  CHECK_CUDA(cudaMalloc(&p, bytes));
  CHECK_CUDA(cudaMalloc(&sink, sizeof(unsigned)));
  CHECK_CUDA(cudaMemset(p, 0x5a, bytes));
  CHECK_CUDA(cudaMemset(sink, 0, sizeof(unsigned)));
  cudaEvent_t t0, t1;
  CHECK_CUDA(cudaEventCreate(&t0));
  CHECK_CUDA(cudaEventCreate(&t1));
  printf("%s, %d SMs, %lld MiB read, grid %d x 512\n", prop.name, sms, mib, 4 * sms);
  for (int v = 1; v <= 3; v++) {
    if (only && v != only) continue;
    const int reps = 20;
    float ms[reps];
    launch(v, p, (long long)(bytes / 16), sink, 4 * sms); /* warm-up */
    CHECK_CUDA(cudaGetLastError());
    for (int r = 0; r < reps; r++) {
      CHECK_CUDA(cudaEventRecord(t0));
      launch(v, p, (long long)(bytes / 16), sink, 4 * sms);
      CHECK_CUDA(cudaEventRecord(t1));
      CHECK_CUDA(cudaEventSynchronize(t1));
      CHECK_CUDA(cudaEventElapsedTime(&ms[r], t0, t1));
    }
    std::sort(ms, ms + reps);
    const double med = 0.5 * (ms[reps / 2 - 1] + ms[reps / 2]); /* even count: mean of the middle two */
    printf("version %d: %8.1f GB/s (median of %d, %.3f ms)\n", v, (double)bytes / (med * 1e-3) / 1e9, reps, med);
  }
  CHECK_CUDA(cudaFree(p));
  CHECK_CUDA(cudaFree(sink));
  return 0;
}
