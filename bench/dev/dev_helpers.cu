/* dev_helpers.h: the workbench's fills and streaming read (moved here from the MoE kernel file,
 * src/backend/cuda/kernels/moe_experts.cu, unchanged: the same values and the same loads). */
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include "bench/dev/dev_helpers.h"
#include "backend/cuda/cuda_util.h"

namespace {

__host__ __device__ inline uint32_t hash32(uint32_t seed, uint64_t i) {
  uint64_t z = i + 0x9e3779b97f4a7c15ull * (uint64_t)(seed + 1u);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return (uint32_t)(z >> 16);
}

__global__ void moe_fill_kernel(uint16_t *p, int64_t n, uint32_t seed, float scale) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    float t = __fsub_rn((float)(hash32(seed, (uint64_t)i) & 0xffffu) * (1.0f / 32768.0f), 1.0f);
    __nv_bfloat16 b = __float2bfloat16_rn(__fmul_rn(t, scale));
    p[i] = *reinterpret_cast<uint16_t *>(&b);
  }
}

/* 16 bytes at p, not kept in L1 (the expert kernels' weight load). */
__device__ __forceinline__ uint4 ld_stream(const void *p) {
  uint4 v;
  asm("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p));
  return v;
}

__global__ void moe_stream_read_kernel(const uint4 *p, int64_t n, unsigned *sink) {
  unsigned acc = 0;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    uint4 v = ld_stream(p + i);
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x9e3779b9u) atomicAdd(sink, 1u);  // practically never; keeps the loads alive
}

}  // namespace

extern "C" pz_status pz_moe_fill_bf16(pz_bf16 *p, int64_t n, uint32_t seed, float scale, cudaStream_t s) {
  if (!p || n < 0) return pz_error(PZ_ERR_INVALID_ARG, "moe fill: NULL pointer or negative count");
  if (!n) return PZ_OK;
  int64_t blocks = (n + 255) / 256;
  if (blocks > 65536) blocks = 65536;
  moe_fill_kernel<<<(unsigned)blocks, 256, 0, s>>>(p, n, seed, scale);
  PZ_CUDA_CHECK(cudaGetLastError());
  return PZ_OK;
}

extern "C" pz_status pz_moe_stream_read(const void *p, int64_t bytes, unsigned *sink, cudaStream_t s) {
  if (!p || !sink || bytes < 16 || bytes % 16 || ((uintptr_t)p & 15u))
    return pz_error(PZ_ERR_INVALID_ARG, "moe stream read: NULL/misaligned pointer or bytes not a multiple of 16");
  int dev = 0, sms = 0;
  PZ_CUDA_CHECK_MSG(cudaGetDevice(&dev), "moe: cannot read the SM count of the current device");
  PZ_CUDA_CHECK_MSG(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev),
                    "moe: cannot read the SM count of the current device");
  moe_stream_read_kernel<<<(unsigned)(sms > 0 ? sms * 4 : 512), 512, 0, s>>>((const uint4 *)p, bytes / 16, sink);
  PZ_CUDA_CHECK(cudaGetLastError());
  return PZ_OK;
}

extern "C" pz_bf16 pz_moe_hash_bf16(uint32_t seed, int64_t i, float scale) {
  float t = (float)(hash32(seed, (uint64_t)i) & 0xffffu) * (1.0f / 32768.0f) - 1.0f;
  return pz_f32_to_bf16(t * scale);
}
