/* CUDA dense decode ops around the layers (sm_90a): vocab-parallel embedding, RMSNorm (also the
 * final norm), lm_head through the split-K GEMM family, SiLU-and-multiply (the GQA layouts' MLP
 * activation), greedy argmax over a vocab shard plus the cross-rank combine. Each launcher takes a plain params struct, is capturable in a CUDA graph
 * (no host sync, no allocation) and matches the CPU reference of backend/cpu/ref_ops.h. */
#ifndef PZ_BACKEND_CUDA_DENSE_OPS_H
#define PZ_BACKEND_CUDA_DENSE_OPS_H
#include <stdbool.h>
#include <stdint.h>
#include <cuda_runtime.h>
#include "core/dtype.h"
#include "core/status.h"
#include "backend/cuda/gemm.h"
#ifdef __cplusplus
extern "C" {
#endif

/* Embedding of TP rank `rank` (vocab-parallel, pz_ref_embedding's contract):
 *   out[i, :] = W[ids[i] - rank*vocab_per_rank, :] (bf16 -> f32, exact) when the id falls in
 *   this rank's shard, else 0. Bit-identical to pz_ref_embedding.
 * An id outside [0, vocab_size) cannot be reported from inside a captured graph: its row is
 * filled with NaN instead (the CPU reference returns PZ_ERR_INVALID_ARG), so it shows up. */
typedef struct pz_embedding_params {
  const int32_t *__restrict__ ids;   /* [m] i32, device */
  const pz_bf16 *__restrict__ W;     /* [vocab_per_rank, H] bf16, this rank's shard */
  float *__restrict__ out;           /* [m, ld_out] f32 */
  int64_t m, H, ld_out;
  int64_t vocab_size, vocab_per_rank;
  int rank;
} pz_embedding_params;
/* Errors: PZ_ERR_INVALID_ARG (NULL pointer, m < 0, H < 1, ld_out < H), PZ_ERR_CUDA. */
pz_status pz_cuda_embedding(const pz_embedding_params *p, cudaStream_t s);

/* RMSNorm (pz_ref_rmsnorm's formula): y[i, j] = bf16((x[i,j] * inv_i) * w[j]) with
 *   inv_i = 1 / sqrtf(Σ_j x[i,j]² / n + eps). x: f32 or bf16 (x_dtype), row stride ldx (elements);
 *   w: bf16 [n]; y: bf16 [m, ldy]. Used for the final norm and the q_a / kv_a layernorms.
 * Precision: the sum of squares is a tree reduction (one CTA per row, fixed order, so runs are
 * bit-identical), not the reference's sequential sum; inv may differ from the CPU's by an ulp,
 * so an output may differ from pz_ref_rmsnorm by at most one bf16 ulp (tested). */
typedef struct pz_rmsnorm_params {
  const void *__restrict__ x;        /* [m, ldx] f32 or bf16 */
  pz_dtype x_dtype;
  const pz_bf16 *__restrict__ w;     /* [n] bf16 */
  pz_bf16 *__restrict__ y;           /* [m, ldy] bf16 */
  int64_t m, n, ldx, ldy;
  float eps;
} pz_rmsnorm_params;
/* Errors: PZ_ERR_INVALID_ARG (NULL, n < 1, n > 65536, ld < n), PZ_ERR_DTYPE, PZ_ERR_CUDA. */
pz_status pz_cuda_rmsnorm(const pz_rmsnorm_params *p, cudaStream_t s);

/* lm_head of one rank: logits[m, vocab_per_rank] f32 (row stride ld_logits) = x[m, H] bf16 ·
 * W[vocab_per_rank, H]ᵀ, through pz_gemm_launch (zero_init = true, flavour chosen by the tuner).
 * Needs H and vocab_per_rank multiples of 64, m <= 256 (pz_gemm_check).
 * Errors: those of pz_gemm_launch. */
pz_status pz_cuda_lm_head(pz_gemm_ctx *g, int m, int64_t H, int64_t vocab_per_rank,
                          const pz_bf16 *x, int64_t ldx, const pz_bf16 *W, float *logits,
                          int64_t ld_logits, cudaStream_t s);

/* Any-shape GEMM, for what the split-K family (gemm.h) does not take: C[m,n] (+)= A[m,k] · W[n,k]ᵀ
 * (+ bias) under the pz_gemm_args contract (zero_init, C a strided slice, f32 or bf16 C, bias
 * added once) with n and k of any size and no alignment rule. Runs pz_gemm_launch when
 * pz_gemm_check accepts the shape; when it refuses only for n or k not a multiple of 64, a
 * plain kernel instead: one warp per output column, rows in groups of 8, each dot product over k
 * in a fixed order (lane-strided f32 partial sums, then a shuffle tree), so runs are
 * bit-identical and no zeroed C is needed (zero_init = false adds onto C: on a zeroed C the same
 * bits as zero_init = true). For the odd small shapes of the GQA / MoE layouts (a router of 8
 * experts, the tiny models); W is read once per 8 rows, A from cache. pz_gemm_args.config is
 * ignored by that kernel. Errors: those of pz_gemm_check other than the multiple-of-64 rule,
 * PZ_ERR_INVALID_ARG (NULL, m, n or k < 1, a row stride too small), errors of pz_gemm_launch,
 * PZ_ERR_CUDA. */
pz_status pz_cuda_gemm_any(pz_gemm_ctx *g, const pz_gemm_args *a, cudaStream_t s);

/* One rank's greedy-argmax candidate for one row: the best column of its shard, as a token id.
 * id = -1: the shard holds no valid token (all padding). v is NaN when the winner is a NaN. */
typedef struct pz_argmax_cand {
  float v;
  int32_t id;
} pz_argmax_cand;

/* Argmax over rank `rank`'s vocab shard: logits f32 [m, ld] (column j = token id
 * rank*vocab_per_rank + j; ids >= vocab_size are padding and skipped). Per row: the first NaN
 * (lowest id) wins; else the largest value, ties to the lowest id (pz_ref_argmax's rule; the
 * merge is associative and commutative, so the parallel reduction is exact). Writes cand[m];
 * when ids != NULL also ids[i] = cand.id (the TP = 1 answer, 0 when the shard is empty). */
typedef struct pz_argmax_params {
  const float *__restrict__ logits;  /* [m, ld] f32 */
  pz_argmax_cand *__restrict__ cand; /* [m] */
  int32_t *__restrict__ ids;         /* [m] i32 or NULL */
  int64_t m, ld, vocab_per_rank, vocab_size;
  int rank;
} pz_argmax_params;
/* Errors: PZ_ERR_INVALID_ARG (NULL logits/cand, ld < vocab_per_rank), PZ_ERR_CUDA. */
pz_status pz_cuda_argmax_shard(const pz_argmax_params *p, cudaStream_t s);

/* SiLU-and-multiply of a fused gate_up_proj output (pz_ref_silu_mul's contract):
 *   act[i, j] = bf16(silu(g) * u), g = gu[i, j], u = gu[i, inter + j], silu(g) = g / (1 + expf(-g)),
 * IEEE-rounded f32 divide, add and multiply and glibc's expf algorithm (expf_glibc.cuh), so the
 * output is bit-identical to pz_ref_silu_mul. gu: f32 [m, ld_gu] (gate | up), act: bf16 [m, ld_act]. */
typedef struct pz_silu_mul_params {
  const float *__restrict__ gu;      /* [m, ld_gu] f32, ld_gu >= 2*inter */
  pz_bf16 *__restrict__ act;         /* [m, ld_act] bf16, ld_act >= inter */
  int64_t m, inter, ld_gu, ld_act;
} pz_silu_mul_params;
/* Errors: PZ_ERR_INVALID_ARG (NULL, m < 1, inter < 1, a row stride too small), PZ_ERR_CUDA. */
pz_status pz_cuda_silu_mul(const pz_silu_mul_params *p, cudaStream_t s);

#define PZ_ARGMAX_MAX_TP 8
/* Cross-rank combine: cands[r] (device pointers, r = 0..tp-1, each [m], gathered by the caller
 * by all-gather or P2P) -> ids[m] i32. Ranks in order: the first NaN candidate wins, else the
 * largest value with ties to the lower rank (= lower id); all empty -> 0. Together with
 * pz_cuda_argmax_shard this equals pz_ref_argmax over all shards, bit for bit.
 * Errors: PZ_ERR_INVALID_ARG (tp outside 1..PZ_ARGMAX_MAX_TP, NULL), PZ_ERR_CUDA. */
pz_status pz_cuda_argmax_combine(int tp, const pz_argmax_cand *const *cands, int64_t m,
                                 int32_t *ids, cudaStream_t s);

#ifdef __cplusplus
}
#endif
#endif
