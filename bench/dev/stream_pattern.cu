/* Workbench (bench/dev/README.md): HBM read rate against the number of concurrent sequential streams
 * and the bytes read per visit of a stream, with the bytes each warp keeps in flight held constant.
 * Question it answers: does the DRAM side lose rate when many streams are read at once in small
 * pieces (a TMA box of 64 W rows x 128 bytes per stage: 64 streams per CTA, 128 bytes per visit; the
 * INT4 gate/up item: two 1 KB streams per warp), as the expert and GEMM kernels' 60-75 % of peak
 * against the plain read's ~94 % suggests? Standalone, as llm.c's dev/cuda files are:
 *   nvcc -O3 -arch=sm_90a -o stream_pattern bench/dev/stream_pattern.cu && ./stream_pattern [MiB]
 * (or `ninja -C build dev_stream_pattern`). MiB defaults to 2048, far beyond the H200's 60 MB L2.
 *
 * Each of the grid's warps owns S streams (contiguous regions of equal size, the whole buffer split
 * T = warps x S ways). A warp's 16-byte-per-lane load (512 bytes) covers 512 / SEG visits of SEG
 * contiguous bytes; visit v of a warp reads chunk v / S of its stream v % S, so the streams advance
 * round-robin, and every warp keeps U = 8 loads (4 KB) in flight per loop step, whatever S and SEG.
 * Loads are ld.global.nc.L1::no_allocate.v4 (the expert kernels' weight load). Prints one line per
 * (CTAs per SM, SEG, S): streams in total, GB/s (median of 10 reads), % of the first line's rate. */
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

constexpr int kThreads = 256, kU = 8;

__device__ __forceinline__ uint4 ld_nc(const char *p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

/* S = 2^logS streams per warp; region: bytes per stream (a multiple of seg x ng x kU); visits: per warp,
 * S x region / seg */
__global__ void __launch_bounds__(kThreads) pattern_read(const char *buf, int logS, int seg, long long region,
                                                         long long visits, unsigned *sink) {
  const int lane = threadIdx.x & 31, lpg = seg / 16, ng = 32 / lpg, gi = lane / lpg, li = lane % lpg;
  const long long warp = ((long long)blockIdx.x * kThreads + threadIdx.x) >> 5;
  const char *base = buf + (warp << logS) * region + li * 16;
  const long long smask = (1LL << logS) - 1;
  unsigned acc = 0;
  for (long long v0 = 0; v0 < visits; v0 += (long long)ng * kU) {
    uint4 r[kU];
#pragma unroll
    for (int u = 0; u < kU; u++) {
      const long long v = v0 + (long long)u * ng + gi;
      r[u] = ld_nc(base + (v & smask) * region + (v >> logS) * seg); /* S a power of two: no divisions */
    }
#pragma unroll
    for (int u = 0; u < kU; u++) acc ^= r[u].x ^ r[u].y ^ r[u].z ^ r[u].w;
  }
  if (acc == 0x9e3779b9u) atomicAdd(sink, 1u);
}

int main(int argc, char **argv) {
  const long long mib = argc > 1 ? atoll(argv[1]) : 2048;
  if (mib < 256) {
    fprintf(stderr, "usage: %s [MiB >= 256]\n", argv[0]);
    return 2;
  }
  int dev = 0, sms = 0;
  CHECK_CUDA(cudaGetDevice(&dev));
  CHECK_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  cudaDeviceProp prop;
  CHECK_CUDA(cudaGetDeviceProperties(&prop, dev));
  const size_t bytes = (size_t)mib << 20;
  char *p = nullptr;
  unsigned *sink = nullptr;
  CHECK_CUDA(cudaMalloc(&p, bytes));
  CHECK_CUDA(cudaMalloc(&sink, sizeof(unsigned)));
  CHECK_CUDA(cudaMemset(p, 0x5a, bytes));
  CHECK_CUDA(cudaMemset(sink, 0, sizeof(unsigned)));
  cudaEvent_t t0, t1;
  CHECK_CUDA(cudaEventCreate(&t0));
  CHECK_CUDA(cudaEventCreate(&t1));
  printf("%s, %d SMs, %lld MiB, %d threads per CTA, %d x 512 bytes in flight per warp\n", prop.name, sms, mib,
         kThreads, kU);
  printf("ctas_per_sm seg_bytes streams_per_warp streams_total bytes_read GB/s pct_of_first\n");
  const int cps_list[] = {1, 2, 4}, seg_list[] = {512, 256, 128}, s_list[] = {1, 2, 4, 8, 16, 64};
  double first = 0.0;
  for (int cps : cps_list)
    for (int seg : seg_list)
      for (int S : s_list) {
        const int grid = sms * cps, ng = 512 / seg;
        const long long warps = (long long)grid * (kThreads / 32), T = warps * S;
        /* region: a multiple of seg x ng x kU so that each warp's visits are whole loop steps */
        const long long quantum = (long long)seg * ng * kU;
        const long long region = (long long)(bytes / (size_t)T) / quantum * quantum;
        if (region < quantum) continue;
        const long long visits = S * (region / seg);
        const double read = (double)T * (double)region;
        int logS = 0;
        while ((1 << logS) < S) logS++;
        const int reps = 10;
        float ms[reps];
        pattern_read<<<grid, kThreads>>>(p, logS, seg, region, visits, sink); /* warm-up */
        CHECK_CUDA(cudaGetLastError());
        for (int r = 0; r < reps; r++) {
          CHECK_CUDA(cudaEventRecord(t0));
          pattern_read<<<grid, kThreads>>>(p, logS, seg, region, visits, sink);
          CHECK_CUDA(cudaEventRecord(t1));
          CHECK_CUDA(cudaEventSynchronize(t1));
          CHECK_CUDA(cudaEventElapsedTime(&ms[r], t0, t1));
        }
        std::sort(ms, ms + reps);
        const double med = 0.5 * (ms[reps / 2 - 1] + ms[reps / 2]);
        const double gbs = read / (med * 1e-3) / 1e9;
        if (first == 0.0) first = gbs;
        printf("%d %d %d %lld %.0f %.1f %.1f\n", cps, seg, S, T, read, gbs, 100.0 * gbs / first);
        fflush(stdout);
      }
  CHECK_CUDA(cudaFree(p));
  CHECK_CUDA(cudaFree(sink));
  return 0;
}
