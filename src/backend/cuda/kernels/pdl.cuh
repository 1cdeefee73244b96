/* Programmatic dependent launch on Hopper (sm_90): the two device-side halves.
 * Source: PTX ISA, griddepcontrol; CUDA C++ Programming Guide, "Programmatic Dependent Launch".
 *
 * A kernel launched with cudaLaunchAttributeProgrammaticStreamSerialization may start before the
 * kernel ahead of it in the stream has finished. It must call pz_pdl_wait before it reads anything
 * that kernel writes, or writes anything that kernel reads. Launched so (PREZERO_PDL, on by default):
 * the wgmma GEMMs (gemm.h, pz_gemm_args.pdl); pz_pdl_wait is a no-op in a grid launched without it.
 *
 * pz_pdl_trigger, called by every thread of a CTA, tells the scheduler that this CTA no longer holds
 * back the launch of a dependent grid; once all CTAs have (or have exited) the dependent may start,
 * and still waits in pz_pdl_wait for this grid's completion and memory flush. So a trigger never
 * changes results, only when a dependent grid's CTAs may occupy SMs: a kernel calls it at its start
 * when its own CTAs are all resident by then (any grid: the launch waits for every CTA's trigger). */
#pragma once
#include <cuda_runtime.h>

__device__ __forceinline__ void pz_pdl_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
__device__ __forceinline__ void pz_pdl_trigger() { asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }

/* kernel<<<grid, block, smem, s>>>(args...), with programmatic dependent launch when `pdl` is set (the
 * kernel must then call pz_pdl_wait before it touches what an earlier kernel writes or reads). */
template <typename... KArgs, typename... Args>
static inline cudaError_t pz_launch_k(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t s,
                                      bool pdl, Args... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = s;
  cudaLaunchAttribute at[1];
  at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  at[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = at;
  cfg.numAttrs = pdl ? 1 : 0;
  return cudaLaunchKernelEx(&cfg, kernel, args...);
}
