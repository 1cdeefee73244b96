/* Internal: the kernel parameter block of the MLA decode kernels (kernels/mla_kernels.cu) and
 * their raw launchers, used by the orchestrating launcher in mla.c and by the benchmark. */
#ifndef PZ_BACKEND_CUDA_MLA_KERNELS_H
#define PZ_BACKEND_CUDA_MLA_KERNELS_H
#include <stdint.h>
#include <cuda_runtime.h>
#include "core/status.h"
#ifdef __cplusplus
extern "C" {
#endif

#define PZ_MLA_MAX_ROPE 128   /* qk_rope_head_dim limit of the CUDA op */
#define PZ_MLA_BN 32          /* KV positions per attention tile */
#define PZ_MLA_MAX_SPLITS 64  /* KV splits per sequence, at most */
#define PZ_MLA_STAGES 3       /* cp.async pipeline depth of the attention kernel (2 for <= 16 heads) */

/* One parameter block for every MLA kernel (passed by value). Per-rank shapes:
 * heads = p->n_heads, qh = nope + rope, kvw = kv_lora + rope. bf16 tensors are uint16_t. */
typedef struct pz_mla_kparams {
  int m, heads, L, rope, nope, vd, qh, kvw; /* rows; heads per rank; L = kv_lora_rank; rope, nope,
                                       vd = qk_rope / qk_nope / v head dims; qh = nope+rope; kvw = L+rope */
  int q_lora;                         /* 0: no q LoRA */
  float eps, softmax_scale, rope_ms;  /* layernorm eps; pz_ref_mla_softmax_scale; pz_ref_yarn_cos_sin_mscale */
  float inv_freq[PZ_MLA_MAX_ROPE / 2]; /* YaRN inverse frequencies (pz_ref_yarn_inv_freq) */
  /* prep: q_a_layernorm, kv_a_layernorm + k_pe RoPE + cache append */
  const float *__restrict__ qkv_a;    /* [m, ld_qkv_a] f32: q_c | kv_c | k_pe (q LoRA) */
  int64_t ld_qkv_a;
  const float *__restrict__ kv_a;     /* [m, ld_kv_a] f32: kv_c | k_pe (no q LoRA) */
  int64_t ld_kv_a;
  const uint16_t *__restrict__ qa_norm_w;  /* [q_lora] */
  const uint16_t *__restrict__ kva_norm_w; /* [L] */
  uint16_t *__restrict__ qcn;         /* [m, q_lora] bf16 scratch: q_a_layernorm output */
  uint16_t *__restrict__ cache;       /* [m, cache_seq_stride]: sequence i position j at i*stride + j*kvw, or the
                                         page pool [n_pages, 64, kvw] when block_table is set */
  int64_t cache_seq_stride;
  const int32_t *__restrict__ block_table; /* NULL, or [m, ld_bt]: position j of sequence i in page
                                         block_table[i*ld_bt + j/64], row j%64 (core/kv_pages.h) */
  int64_t ld_bt;
  const int32_t *__restrict__ pos;    /* [m] */
  const int32_t *__restrict__ rows;   /* NULL or [1]: rows >= *rows attend one position (mla.h) */
  /* absorb: q_lat = q_nope · W_UK, q_pe roped */
  const float *__restrict__ q;        /* [m, ldq] f32 (q_b output or q_proj output) */
  int64_t ldq;
  const uint16_t *__restrict__ w_uk;  /* [heads, nope, L] */
  uint16_t *__restrict__ qabs;        /* [m, heads, kvw] bf16: q_lat | q_pe(roped) */
  /* attention (split along the sequence) */
  int splits, mt;                     /* KV splits per sequence; 16-head tiles per CTA */
  int splits1;                        /* the one-wave split count (<= splits; mla.h): below splits, the
                                         balanced schedule takes m * splits1 slots where that is no
                                         slower (core/kv_sched.h, pz_kv_sched_waves) */
  int balance;                        /* 1: the balanced schedule of core/kv_sched.h; 0: sequence i
                                         takes slots i * splits .. as `splits` chunks of its own length */
  float lazy_rescale;                 /* attention v4: a slice's running max moves only when a tile's exceeds
                                         it by more than this (natural-log units; 8: P <= e^8, the lazy rescale
                                         of FlashAttention-4), 0 at every increase (PREZERO_MLA_LAZY=0) */
  int combine_warp;                   /* combine layout: 1 one warp per (row, head, 128 columns), 0 one CTA per
                                         (row, head) with block barriers, -1 by the grid's split slots per
                                         row (warps at >= PZ_MLA_COMBINE_WARP_SPLITS; mla_kernels.cu). Same
                                         bits (PREZERO_MLA_COMBINE=1 / 0 force one) */
  int attn_version;                   /* attention kernel: 3 (TMA + wgmma, kv_lora 512 / rope 64 on sm_90;
                                         the default where it applies), 2 (mma.sync, the default elsewhere)
                                         or 1 (PREZERO_MLA_ATTN=1|2|3 chooses) */
  int64_t max_ctx;                    /* positions per sequence of a contiguous cache (version 3's tensor map) */
  float *__restrict__ opart;          /* [m * splits slots, heads, L] f32, unnormalised: slot
                                         k.sched[i] + j holds slice j of sequence i (core/kv_sched.h) */
  float *__restrict__ ml;             /* [m * splits slots, heads, 2] f32: running max, sum */
  int32_t *__restrict__ sched;        /* [m + 1] i32: sequence i's first slot; sched[m] the slots used
                                         (written by the attention kernel, read by the combine) */
  /* combine + W_UV */
  float *__restrict__ olat;           /* [m, heads, L] f32 */
  const uint16_t *__restrict__ w_uv;  /* [heads, vd, L] */
  uint16_t *__restrict__ o;           /* [m, heads*vd] bf16: the o_proj input */
  int proj_tc;                        /* absorb and W_UV: 1 on tensor cores (kernels/mla_proj.cu: A rounded to
                                         bf16, f32 accumulation) where pz_mla_k_proj_tc_ok, 0 the exact f32
                                         kernels of mla_kernels.cu (PREZERO_MLA_PROJ=0) */
} pz_mla_kparams;

/* Kernels of one step, in stream order (the GEMMs go between them, from mla.c). Each enqueues
 * on s and returns PZ_ERR_CUDA when the launch fails; attn also PZ_ERR_UNSUPPORTED
 * for a shape without a kernel instance. No argument checks: mla.c validates k. */
pz_status pz_mla_k_prep(const pz_mla_kparams *k, cudaStream_t s);     /* norms, RoPE(k_pe), append */
pz_status pz_mla_k_absorb(const pz_mla_kparams *k, cudaStream_t s);   /* W_UK, RoPE(q_pe) */
pz_status pz_mla_k_attn(const pz_mla_kparams *k, cudaStream_t s);     /* split attention */
pz_status pz_mla_k_combine(const pz_mla_kparams *k, cudaStream_t s);  /* merge splits -> olat */
pz_status pz_mla_k_wuv(const pz_mla_kparams *k, cudaStream_t s);      /* o = bf16(W_UV · olat) */
/* The tensor-core absorb and W_UV (kernels/mla_proj.cu), which pz_mla_k_absorb / pz_mla_k_wuv take when
 * k->proj_tc is set and pz_mla_k_proj_tc_ok(k) holds: nope, kv_lora and v head dims multiples of 8,
 * W_UK, W_UV and olat 16-byte aligned (not a condition on q, so that a prezero q_b slot set or unset
 * takes the same path). pz_mla_k_proj_tc_setup raises their shared-memory limits (at most 83 KB) on the current device;
 * errors: PZ_ERR_CUDA. */
int pz_mla_k_proj_tc_ok(const pz_mla_kparams *k);
pz_status pz_mla_k_absorb_tc(const pz_mla_kparams *k, cudaStream_t s);
pz_status pz_mla_k_wuv_tc(const pz_mla_kparams *k, cudaStream_t s);
pz_status pz_mla_k_proj_tc_setup(void);
/* Raises the shared-memory limits of the absorb / W_UV kernels for k's shape (at create time,
 * current device). Errors: PZ_ERR_CUDA. */
pz_status pz_mla_k_setup(const pz_mla_kparams *k);

/* Attention kernel configuration for `version` (1 to 4): 16-head tiles per CTA for `heads`
 * (v1: 1 for <= 16 heads, 2 for <= 32, else 4; v2: 1 for <= 16, else 2; v3 / v4: 4, i.e. 64 heads,
 * fewer are padded; more heads go to more CTAs) and resident CTAs
 * per SM (occupancy, after raising the smem limit on the current device). Errors of
 * pz_mla_k_attn_setup: PZ_ERR_UNSUPPORTED (no kernel for kv_lora / kv_lora + rope, see the message;
 * v3 on a device that is not sm_90; or the smem does not fit an SM), PZ_ERR_CUDA. */
int pz_mla_k_attn_mt(int heads, int version);
pz_status pz_mla_k_attn_setup(int version, int mt, int L, int kvw, int *ctas_per_sm);
/* Version 3 (kernels/mla_attn_wgmma.cu): setup (kv_lora_rank L = 512 and
 * kvw = 576 only, sm_90 only; errors as above) and launch (PZ_ERR_CUDA when the tensor-map encoder or
 * the launch fails). pz_mla_k_attn and pz_mla_k_attn_setup forward to them for version 3. */
pz_status pz_mla_k_attn3_setup(int L, int kvw, int *ctas_per_sm);
pz_status pz_mla_k_attn3(const pz_mla_kparams *k, cudaStream_t s);
/* Version 4 (kernels/mla_attn_pp.cu, the ping-pong warpgroups): the same contract as version 3. */
pz_status pz_mla_k_attn4_setup(int L, int kvw, int *ctas_per_sm);
pz_status pz_mla_k_attn4(const pz_mla_kparams *k, cudaStream_t s);
#ifdef __cplusplus
}
#endif
#endif
