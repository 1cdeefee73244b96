/* Internal: the kernel parameter block of the GQA decode kernels (kernels/gqa_kernels.cu) and
 * their raw launchers, used by the orchestrating launcher in gqa.c. */
#ifndef PZ_BACKEND_CUDA_GQA_KERNELS_H
#define PZ_BACKEND_CUDA_GQA_KERNELS_H
#include <stddef.h>
#include <stdint.h>
#include <cuda_runtime.h>
#include "core/status.h"
#ifdef __cplusplus
extern "C" {
#endif

#define PZ_GQA_MAX_D 128      /* head_dim limit of the CUDA op (instances: 16, 32, 64, 96, 128) */
#define PZ_GQA_BN 64          /* KV positions per attention tile (16 per warp, 4 warps) */
#define PZ_GQA_HT 16          /* query heads per attention CTA (one m16 tensor-core tile) */
#define PZ_GQA_MAX_SPLITS 64  /* KV splits per sequence, at most */

/* One parameter block for every GQA kernel (passed by value). Per-rank shapes: heads =
 * n_heads, kvh = n_kv_heads, d = head_dim, ratio = heads / kvh; bf16 tensors are uint16_t. */
typedef struct pz_gqa_kparams {
  int m, heads, kvh, d;             /* rows (sequences); query heads; kv heads; head_dim */
  int rd;                           /* RoPE dims: the first rd (even, 2..d) of each head rotate (GLM-4.5's
                                       partial_rotary_factor); dims rd..d-1 pass through */
  int ratio, htiles;                /* heads / kvh; ceil(ratio / PZ_GQA_HT) head tiles per kv head */
  int splits;                       /* KV splits per sequence (1: the attention writes o itself) */
  int window;                       /* sliding window W (0: full attention): row i attends positions
                                       max(0, pos[i] - W + 1) .. pos[i] (pz_gqa_params.window) */
  int qk_norm;                      /* 1: q_norm / k_norm (Qwen3) */
  float eps;                        /* q_norm / k_norm eps */
  float qscale;                     /* softmax_scale * log2(e): q is pre-scaled, scores are base-2 */
  float rope_ms;                    /* cos/sin multiplier (1 unless the reference says otherwise) */
  float inv_freq[PZ_GQA_MAX_D / 2]; /* pz_rope_inv_freq(rope, rd): positions below rope_long_from */
  int rope_long_from;               /* pz_rope_long_from(rope): INT32_MAX except for LongRoPE */
  float inv_freq_long[PZ_GQA_MAX_D / 2]; /* pz_rope_inv_freq_long(rope, rd): positions from rope_long_from */
  /* prep: q/k norm, RoPE, cache append */
  const float *__restrict__ qkv;    /* [m, ld_qkv] f32: q (heads*d) | k (kvh*d) | v (kvh*d) */
  int64_t ld_qkv;
  const uint16_t *__restrict__ q_norm_w, *__restrict__ k_norm_w; /* [d] or NULL */
  uint16_t *__restrict__ k_cache, *__restrict__ v_cache; /* row t of (seq i, kv head g) at i*seq_stride + g*head_stride + t*d */
  int64_t seq_stride, head_stride;  /* elements */
  const int32_t *__restrict__ pos;  /* [m] */
  const int32_t *__restrict__ rows; /* NULL or [1]: rows >= *rows attend one position (gqa.h) */
  /* attention */
  uint16_t *__restrict__ qhl;       /* [m, heads, 2, d] bf16 scratch: hi and lo parts of q * qscale */
  float *__restrict__ opart;        /* [m, splits, heads, d] f32: unnormalised split outputs */
  float *__restrict__ ml;           /* [m, splits, heads, 2] f32: split (max, sum), base 2 */
  uint16_t *__restrict__ o;         /* [m, heads*d] bf16: the o_proj input */
} pz_gqa_kparams;

/* Kernels of one step, in stream order (o_proj goes after them, from gqa.c). Each enqueues on s
 * and returns PZ_ERR_CUDA when the launch fails; attn PZ_ERR_UNSUPPORTED for a head_dim without
 * an instance. No argument checks: gqa.c validates k. combine is a no-op when splits == 1. */
pz_status pz_gqa_k_prep(const pz_gqa_kparams *k, cudaStream_t s);    /* norms, RoPE, append, q hi/lo */
pz_status pz_gqa_k_attn(const pz_gqa_kparams *k, cudaStream_t s);    /* split flash-decoding */
pz_status pz_gqa_k_combine(const pz_gqa_kparams *k, cudaStream_t s); /* merge splits -> o */

/* Dynamic shared memory of the attention kernel for head_dim d (0 when d has no instance). */
size_t pz_gqa_k_attn_smem(int d);
/* Raises the attention kernel's shared-memory limit for head_dim d on the current device and
 * reads its resident CTAs per SM. Errors: PZ_ERR_UNSUPPORTED (d not 16, 32, 64 or 128, or the kernel
 * does not fit an SM), PZ_ERR_CUDA. */
pz_status pz_gqa_k_setup(int d, int *ctas_per_sm);
#ifdef __cplusplus
}
#endif
#endif
