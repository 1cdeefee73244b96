/* CUDA GQA decode op (Llama 3 / Qwen2 / Qwen3 / Mixtral / Qwen3-MoE attention with a KV cache):
 * q/k norm, rotate-half RoPE, K/V append, split-KV flash-decoding, and the o_proj GEMM on the
 * split-K family with the oproj_prezero slot (docs/ARCHITECTURE.md §2, §3; core/ir.h GQA_ATTN). */
#ifndef PZ_BACKEND_CUDA_GQA_H
#define PZ_BACKEND_CUDA_GQA_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <cuda_runtime.h>
#include "core/dtype.h"
#include "core/gate.h"
#include "core/ir.h"
#include "core/status.h"
#include "backend/cuda/gemm.h"
#ifdef __cplusplus
extern "C" {
#endif

/* Device pointers of one GQA decode call; the fields and shapes of pz_ref_gqa_io
 * (backend/cpu/ref_ops.h), per rank: heads = p->n_heads, kvh = p->n_kv_heads, d = p->head_dim,
 * H = p->hidden. */
typedef struct pz_gqa_cuda_io {
  const float *qkv; int64_t ld_qkv;      /* f32 [m, (heads + 2*kvh)*d] = q | k | v, row stride ld_qkv */
  const pz_bf16 *q_norm_w, *k_norm_w;    /* [d] each (Qwen3 qk-norm), or both NULL */
  const pz_bf16 *o_w;                    /* [H, heads*d] (o_proj shard) */
  pz_bf16 *k_cache, *v_cache;            /* element (i, g, t, j) at cache + i*cache_seq_stride + g*cache_head_stride + t*d + j */
  int64_t cache_seq_stride, cache_head_stride; /* elements, multiples of 8; head stride >= max_ctx*d; caches 16-byte aligned */
  const int32_t *pos;                    /* [m] i32, device: position of the new token */
  const int32_t *rows;                   /* NULL, or device i32 [1]: the real rows r (CUDA executor: a batch padded to
                                            its captured size); rows i >= r append their KV at pos[i] but attend
                                            position 0 only (their outputs are discarded); r <= 0: all rows real */
  /* o_proj output = partial [m, H] f32 (the oproj_prezero slot when set), written with
   * zero_init = !out_zeroed (out_zeroed: the slice is zero on entry, pre-zeroed by the donor). */
  float *out; int64_t ld_out; bool out_zeroed;
  /* scratch of pz_gqa_cuda_workspace_bytes bytes (256-byte aligned), contents free between calls */
  void *workspace; size_t workspace_bytes;
} pz_gqa_cuda_io;

typedef struct pz_gqa_cuda_ctx pz_gqa_cuda_ctx;

/* Creates the op for one layer shape on the current device: validates p, sets the attention
 * kernel's shared-memory limit, reads the SM count and occupancy. No device memory of its own:
 * the caller passes the workspace per call (the executor shares one among its nodes).
 * gemm: the split-K GEMM handle used for o_proj (borrowed; must outlive the op; one stream at a
 * time). Supported: head_dim 16, 32, 64, 96 or 128, n_heads a multiple of n_kv_heads (any ratio), any window >= 0,
 * m_max 1..256 (o_proj shapes outside the split-K family's multiples of 64 run
 * pz_cuda_gemm_any's plain kernel, dense_ops.h).
 * Errors: PZ_ERR_INVALID_ARG (NULL, m_max), PZ_ERR_UNSUPPORTED (shape, window < 0; LongRoPE whose n_factors is not
 * rotary dims / 2), PZ_ERR_CUDA, PZ_ERR_OOM. */
pz_status pz_gqa_cuda_create(const pz_gqa_params *p, int m_max, pz_gemm_ctx *gemm, pz_gqa_cuda_ctx **out);
/* Frees the context (not the borrowed GEMM handle); NULL is ignored. */
void pz_gqa_cuda_destroy(pz_gqa_cuda_ctx *c);

/* Workspace bytes a call of up to m_max rows needs (a multiple of 256): q hi/lo bf16
 * [m_max, heads, 2, d], o bf16 [m_max, heads*d], split partials f32 [ms_cap, heads, d] and
 * (max, sum) f32 [ms_cap, heads, 2], ms_cap = 2 * max(m_max, resident CTAs / (kvh * head tiles)).
 * 0 for NULL. */
size_t pz_gqa_cuda_workspace_bytes(const pz_gqa_cuda_ctx *c);

/* KV splits per sequence for m rows: the forced count (pz_gqa_cuda_force_splits) when set, else
 * max(1, floor(resident attention CTAs / (m * kvh * head tiles))): about one wave of CTAs; at most
 * PZ_GQA_MAX_SPLITS (64), ceil(max_ctx / 64) and ms_cap / m. A CTA's slice is ceil(n / splits)
 * rounded up to 64 positions of the n positions the row attends (pos + 1; a sliding layer's window W:
 * min(pos + 1, W), from max(0, pos - W + 1)), computed on the device from pos, so a captured graph stays
 * right as positions advance. The count does not depend on W, so a row the window does not cut (pos < W)
 * gets full attention's bits; a small window leaves the splits past its tiles empty (they exit at once).
 * One split writes o directly (no combine kernel). */
int pz_gqa_cuda_splits(const pz_gqa_cuda_ctx *c, int m);
/* Forces the split count (clamped as above); 0 restores the automatic choice. For tests and the
 * benchmark. */
void pz_gqa_cuda_force_splits(pz_gqa_cuda_ctx *c, int splits);

/* One decode step (pz_ref_gqa_attention's steps, in stream order):
 *   prep kernel: q/k RMSNorm (sequential sum of squares: the reference's bits), rotate-half RoPE
 *   (over the first rotary_dim dims when set: partial RoPE, GLM-4.5; LongRoPE's long-factor table
 *   from position pz_rope_long_from on, read from pos on the device),
 *     k, v -> bf16 cache row pos[i], q * softmax_scale * log2(e) -> bf16 hi + lo;
 *   attention kernel: per (split, kv head, 16-head tile, sequence) one CTA, cp.async ring of
 *     64-position K/V tiles, S = q·Kᵀ and O += p·V on mma.sync (bf16 in, f32 accumulate) with q
 *     and p as two bf16 parts each, online softmax in f32 (base 2);
 *   combine kernel (splits > 1) -> o bf16 [m, heads*d];
 *   o_proj GEMM (pz_cuda_gemm_any: pz_gemm_launch AUTO where the shape allows) into io->out.
 * Capturable: no host sync, no allocation, launch shapes depend on m only.
 * Precision vs pz_ref_gqa_attention: the cache rows are bit-identical (the same operations in
 * the same order; only the device's double cos / sin could differ from the host's in the last
 * double bit, which would move an f32 value by at most one ulp); o is within one bf16 ulp of the
 * reference's plus 2^-15 * max|V| (the attention sums carry 16 significant bits of q and p and
 * accumulate in f32; measured on H200: ~0.3% of o values one ulp off, none beyond), so the
 * partial output differs by what those o values and the GEMM's summation order give
 * (tests/cuda/test_gqa_attn.c states the bounds).
 * Errors: PZ_ERR_INVALID_ARG (m outside 1..m_max, NULL pointer, one norm weight without the
 * other, bad stride, workspace too small), errors of pz_gemm_launch, PZ_ERR_CUDA. Positions are
 * not checked on the device: pos[i] must lie in [0, max_ctx). */
pz_status pz_gqa_cuda_decode(pz_gqa_cuda_ctx *c, int m, const pz_gqa_cuda_io *io, cudaStream_t s);

/* Launches only the attention part (attention + combine) for m rows on the caches and positions
 * of io, reading the q left in io->workspace by the last decode with the same workspace. Used by
 * `prezero bench attn --layout gqa` to time the part whose bandwidth it reports.
 * Errors: as pz_gqa_cuda_decode's (without the GEMM's). */
pz_status pz_gqa_cuda_attention_only(pz_gqa_cuda_ctx *c, int m, const pz_gqa_cuda_io *io, cudaStream_t s);

/* The slot rule of the CPU op: a set o_proj slot is zero on entry when
 * pz_prezero_slice_zeroed(m, p->oproj_col_offset, H, p->prezero_n_total, p->prezero_n_base, H,
 * tp, dev) holds (the rule every op of the donor's group evaluates). */
bool pz_gqa_cuda_oproj_zeroed(const pz_gqa_params *p, int64_t m, int tp, const pz_device_desc *dev);

/* The cos/sin multiplier of the GQA layouts' RoPE: pz_rope_cos_sin_mscale (core/rope.h; YARN's
 * mscale, LONGROPE's attention_factor, else 1), 1 for NULL (the rule of pz_ref_gqa_rope_mscale,
 * backend/cpu/ref_ops.h). */
float pz_gqa_rope_mscale(const pz_rope_params *rp);
#ifdef __cplusplus
}
#endif
#endif
