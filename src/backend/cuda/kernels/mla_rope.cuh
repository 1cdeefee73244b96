/* YaRN RoPE of one pair, shared by the MLA prologue and absorb kernels (mla_kernels.cu) and the
 * tensor-core absorb (mla_proj.cu), so that both absorbs write the same RoPE(q_pe) bits. */
#pragma once
#include <math.h>
#include <stdint.h>
#include <cuda_bf16.h>
#include "backend/cuda/mla_kernels.h"

namespace {

/* RoPE pair r of a rope-dim vector at position pos (pz_ref_rope: interleaved input, half-split
 * output; cos/sin in double, one f32 rounding, times ms; separate multiply and add). */
__device__ __forceinline__ void rope_pair(const pz_mla_kparams &k, int pos, int r, float x0, float x1, float *o0,
                                          float *o1) {
  const float ang = __fmul_rn((float)pos, k.inv_freq[r]);
  const float c = __fmul_rn((float)cos((double)ang), k.rope_ms);
  const float s = __fmul_rn((float)sin((double)ang), k.rope_ms);
  *o0 = __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, s));
  *o1 = __fadd_rn(__fmul_rn(x1, c), __fmul_rn(x0, s));
}

/* RoPE(q_pe) of rows i0 .. i0 + nrow - 1 of head h into columns L .. L + rope of qabs (bf16, round to
 * nearest even), the CTA's threads striding over (row, pair). */
__device__ __forceinline__ void rope_q_rows(const pz_mla_kparams &k, int h, int i0, int nrow) {
  const int half = k.rope / 2;
  for (int e = threadIdx.x; e < nrow * half; e += blockDim.x) {
    const int i = i0 + e / half, r = e % half;
    const float *q = k.q + (int64_t)i * k.ldq + (int64_t)h * k.qh + k.nope;
    float o0, o1;
    rope_pair(k, k.pos[i], r, q[2 * r], q[2 * r + 1], &o0, &o1);
    uint16_t *dst = k.qabs + ((int64_t)i * k.heads + h) * k.kvw + k.L;
    dst[r] = __bfloat16_as_ushort(__float2bfloat16_rn(o0));
    dst[r + half] = __bfloat16_as_ushort(__float2bfloat16_rn(o1));
  }
}

} // namespace
