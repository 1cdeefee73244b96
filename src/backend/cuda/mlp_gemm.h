/* The bf16 SwiGLU MLP of one TP rank (the dense layers' MLP and the MoE op's shared experts) by one
 * of two paths, chosen per call:
 *   fused  pz_mlp_launch (moe.h): two launches of the experts' mma.sync kernel, 32 tokens per work
 *          item and one item per 16 weight rows, so W is read once per 32 tokens;
 *   GEMM   the split-K GEMM family through the handle (pz_cuda_gemm_any, dense_ops.h):
 *          gu[:, 0:inter] = x·w_gateᵀ and gu[:, inter:2 inter] = x·w_upᵀ (f32, zero_init; one GEMM of
 *          2 inter rows where the weights are adjacent, pz_cuda_mlp_one_gu), then
 *          act = bf16(silu(g)·u) (pz_cuda_silu_mul), then out = act·w_downᵀ (f32, zero_init):
 *          the weights are read once for every batch size, on tensor cores.
 * Both compute pz_ref_mlp (backend/cpu/ref_ops.h): f32 sums of bf16 products, the activation
 * rounded to bf16 once, the same SiLU; they differ only in the order of the f32 sums (so not bit for
 * bit, except where every sum is exact). The fused path is deterministic; the GEMM path is as
 * deterministic as the handle's GEMMs: float atomics over more than 2 split-K splits vary run to run,
 * at most 2 (PREZERO_GEMM_SPLITS=2, `prezero compare --deterministic`) do not.
 *
 * Why (one H200, Kimi-K2.5 TP 1, shared expert H 7168, inter 2048, ncu per kernel): the fused path
 * took 72 + 51 µs at m = 128 and 38 + 19 µs at m = 32 for 88 MB of weights
 * (bench/results/moe_h200_int4_ab/times_r115/), 0.7-1.5 TB/s, since it reads W again for every
 * 32 tokens and runs one 459 KB work item per CTA. */
#ifndef PZ_BACKEND_CUDA_MLP_GEMM_H
#define PZ_BACKEND_CUDA_MLP_GEMM_H
#include <stdbool.h>
#include <stdint.h>
#include <cuda_runtime.h>
#include "core/dtype.h"
#include "core/status.h"
#include "backend/cuda/gemm.h"
#ifdef __cplusplus
extern "C" {
#endif

/* Where the MLP runs, for the by-batch rule. */
typedef enum pz_mlp_role {
  PZ_MLP_DENSE = 0,  /* a dense layer's MLP, alone on its stream */
  PZ_MLP_SHARED = 1  /* the MoE op's shared experts, on a side stream beside the routing (moe_q.h) */
} pz_mlp_role;
/* By batch (PREZERO_MLP_GEMM unset), the GEMM path from this many tokens up: a dense MLP at every
 * batch, the shared experts from 8. On the H200 (bench/results/mlp_gemm_ab/): the GEMMs took 35-40 µs
 * off a Kimi-K2 3-layer decode step at batch 1 / 2 / 4 (its dense MLP, inter 18432), and the
 * Kimi-K2.5 shared expert (inter 2048) 1-4 % off the INT4 MoE op at m 32-128; at m 1 / 4 that
 * shared expert, joined at the combine, overlaps the routed experts, and as GEMMs it took 1-11 µs
 * more (their CTAs delay the routed experts' grid). */
#define PZ_MLP_GEMM_MIN_M_DENSE 1
#define PZ_MLP_GEMM_MIN_M_SHARED 8

/* Whether pz_cuda_mlp takes the GEMM path: g non-NULL, 1 <= m <= 256 (the GEMM family's rows), and
 * PREZERO_MLP_GEMM (the handle's options) 1 (any H, inter: shapes outside the split-K family run the
 * any-shape kernel of pz_cuda_gemm_any), or unset with m at least the role's minimum and H, inter
 * multiples of 64 (the split-K family's shapes; the any-shape kernel reads W once per 8 tokens without
 * tensor cores, no faster than the fused kernel); PREZERO_MLP_GEMM=0 never. */
bool pz_cuda_mlp_uses_gemm(const pz_gemm_ctx *g, pz_mlp_role role, int m, int64_t H, int64_t inter);

/* Whether the GEMM path runs gate and up as one GEMM of 2 inter rows into gu: w_up == w_gate + inter * H
 * (up_proj's rows right after gate_proj's, as the CUDA executor's arena lays out consecutive weights),
 * unless PREZERO_MLP_ONE_GU=0 (the handle's options). One launch and one wave schedule instead of two;
 * another split-K order of the same sums. */
bool pz_cuda_mlp_one_gu(const pz_gemm_ctx *g, int64_t H, int64_t inter, const pz_bf16 *w_gate, const pz_bf16 *w_up);

/* Workspace bytes for up to max_m tokens, either path: align256(4 * max_m * 2 inter) (gu, f32) +
 * align256(2 * max_m * inter) (act, bf16); at least pz_mlp_workspace_bytes. 0 when max_m < 1 or
 * inter < 1. */
size_t pz_cuda_mlp_workspace_bytes(int max_m, int64_t inter);

/* out[m, H] f32 (row stride ld_out, columns past H untouched) = the MLP of x[m, H] bf16 (ldx) with
 * w_gate / w_up bf16 [inter, H] and w_down bf16 [H, inter] (nn.Linear layout, rows contiguous),
 * fully written. workspace: 16-byte aligned, >= pz_cuda_mlp_workspace_bytes(m, inter) bytes.
 * g: the rank's GEMM handle, or NULL (the fused path); role: pz_cuda_mlp_uses_gemm's rule.
 * Capturable: no host sync, no allocation.
 * A GEMM of the handle must not run on another stream meanwhile (gemm.h: one handle per stream).
 * Requirements, either path (pz_mlp_launch's): 1 <= m <= 256, H and inter multiples of 16, ldx >= H and
 * a multiple of 8, ld_out >= H, x / weights / workspace 16-byte aligned.
 * Errors: PZ_ERR_SHAPE (m, H, inter, ldx, ld_out), PZ_ERR_INVALID_ARG (NULL, misaligned, workspace
 * below the path's need), those of pz_cuda_gemm_any and pz_cuda_silu_mul, PZ_ERR_CUDA. */
pz_status pz_cuda_mlp(pz_gemm_ctx *g, pz_mlp_role role, int m, int64_t H, int64_t inter, const pz_bf16 *x, int64_t ldx,
                      const pz_bf16 *w_gate, const pz_bf16 *w_up, const pz_bf16 *w_down, float *out,
                      int64_t ld_out, void *workspace, size_t workspace_bytes, cudaStream_t stream);

/* pz_cuda_mlp with the GEMM path's gate | up output given: gu f32 [m, 2 inter] (gate's columns, then
 * up's), row stride ld_gu >= 2 inter (a multiple of 4), 16-byte aligned, or NULL (the workspace's, as
 * pz_cuda_mlp). gu_zeroed: gu holds zeros on entry (a slice the prezero donor zeroed,
 * passes/prezero.h pz_prezero_slice_zeroed), so the gate | up GEMMs run with zero_init = false and skip
 * their own zeroing; false: they zero it. The fused path ignores gu. After a GEMM-path call gu holds
 * the gate | up sums. Same results either way (the same kernels and split; with more than 2 splits the
 * atomic order is not fixed, as in every split-K GEMM). Errors: pz_cuda_mlp's, and PZ_ERR_INVALID_ARG
 * for a misaligned gu or ld_gu < 2 inter. */
pz_status pz_cuda_mlp_into(pz_gemm_ctx *g, pz_mlp_role role, int m, int64_t H, int64_t inter, const pz_bf16 *x,
                           int64_t ldx, const pz_bf16 *w_gate, const pz_bf16 *w_up, const pz_bf16 *w_down, float *out,
                           int64_t ld_out, float *gu, int64_t ld_gu, bool gu_zeroed, void *workspace,
                           size_t workspace_bytes, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif
