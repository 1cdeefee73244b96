/* CUDA MoE for decode (sm_90a): router scoring + top-k, token gather per expert, routed
 * SwiGLU experts (grouped, weight-streaming), shared experts and the dense SwiGLU MLP. */
#ifndef PZ_BACKEND_CUDA_MOE_H
#define PZ_BACKEND_CUDA_MOE_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <cuda_runtime.h>
#include "prezero.h"
#include "core/dtype.h"
#include "core/ir.h"
#ifdef __cplusplus
extern "C" {
#endif

/* Limits of these kernels (checked by every launcher, PZ_ERR_SHAPE beyond them). */
#define PZ_MOE_MAX_M 256        /* tokens per call */
#define PZ_MOE_MAX_EXPERTS 1024 /* n_routed_experts */
#define PZ_MOE_MAX_TOPK 32      /* num_experts_per_tok */
#define PZ_MOE_MAX_GROUPS 32    /* n_group */

/* ---------------------------------------------------------------- router top-k */

/* Router scoring and top-k for m tokens; the same function as pz_ref_moe_route (ref_ops.h),
 * bit for bit:
 *   logits: f32 [m, E] (row stride ld_logits, the router gate GEMM's output);
 *   bias:   f32 [E] e_score_correction_bias or NULL (used by noaux_tc only, as on the CPU);
 *   p:      n_experts E, top_k, n_group, topk_group, scoring (softmax / sigmoid / top-k softmax),
 *           topk_method (greedy / group_limited_greedy / noaux_tc), norm_topk_prob,
 *           routed_scaling_factor (inter / shared_inter are not read);
 *   ids:    i32 [m, top_k] out, weights: f32 [m, top_k] out (row stride top_k), in selection
 *           order; -1 / 0 in slots the kept groups cannot fill.
 * Bit-exactness: the scores use expf_glibc (a transcription of the algorithm of glibc's
 * expf, sysdeps/ieee754/flt-32/e_expf.c: 32-entry 2^(i/32) table, degree-3 polynomial in
 * double; equal to glibc 2.36's expf on all 2^32 inputs but 2 on the machine it was checked
 * on), IEEE-rounded f32 adds and divides (no contraction), the softmax sum in expert order,
 * and the CPU's ranking rule (larger first, NaN last, ties to the lower index).
 * One CTA of 128 threads per token; the top-k runs in two stages over all four warps (each warp's
 * k best, then the 4k finalists ranked), the same choice as the CPU's serial scan. Capturable (no
 * sync, no allocation).
 * Errors: PZ_ERR_SHAPE (m outside 1..PZ_MOE_MAX_M, E outside 1..PZ_MOE_MAX_EXPERTS, top_k
 * outside 1..min(E, PZ_MOE_MAX_TOPK), E not divisible by n_group, n_group > PZ_MOE_MAX_GROUPS),
 * PZ_ERR_INVALID_ARG (NULL pointer), PZ_ERR_CUDA (launch). */
pz_status pz_moe_route_launch(int m, const float *logits, int64_t ld_logits, const float *bias,
                              const pz_moe_params *p, int32_t *ids, float *weights,
                              cudaStream_t stream);
/* The router's top-k: each of the CTA's four warps takes its k best, then the finalists are ranked
 * (two stages), comparing one 64-bit rank key per candidate (route_key.h; the default) ... */
#define PZ_MOE_TOPK_KEYS 0
/* ... or warp 0 alone in k rounds over every expert, as before (PREZERO_MOE_ROUTE_TOPK=0) ... */
#define PZ_MOE_TOPK_SERIAL 1
/* ... or the two stages with the former comparison of (score, index) pairs, NaN and empty
 * candidates by branches (PREZERO_MOE_ROUTE_KEYS=0). */
#define PZ_MOE_TOPK_COMPARE 2
/* The mode of the two switches (serial first). */
static inline int pz_moe_topk_mode(bool serial, bool keys_off) {
  return serial ? PZ_MOE_TOPK_SERIAL : keys_off ? PZ_MOE_TOPK_COMPARE : PZ_MOE_TOPK_KEYS;
}

/* pz_moe_route_launch with the executor's real-row word (NULL: every row real): when 0 < *rows < m, rows
 * *rows .. m-1 are the padding of a captured batch size and route to no expert (ids -1, weights 0
 * in every slot), so they add no expert weights to the step (exec.c pad_rows; the word is 0 under
 * PREZERO_PAD_ATTN=0, which routes them as real rows). topk_mode: one of the PZ_MOE_TOPK_* above,
 * all with the same ids and weights. Errors as pz_moe_route_launch, and PZ_ERR_INVALID_ARG for
 * another topk_mode. */
pz_status pz_moe_route_launch_rows(int m, const float *logits, int64_t ld_logits, const float *bias,
                                   const pz_moe_params *p, int32_t *ids, float *weights,
                                   const int32_t *rows, int topk_mode, cudaStream_t stream);

/* ---------------------------------------------------------------- experts */

/* One MoE block's experts on one TP rank (the MoE node after the gate GEMM and the router).
 * Shapes (per rank): H = hidden_size, I = moe_intermediate_size / TP (p->inter),
 * S_I = n_shared_experts * moe_intermediate_size / TP (p->shared_inter, 0 = none).
 *   x:       bf16 [m, H] x_norm, row stride ldx (multiple of 8, 16-byte aligned)
 *   ids, weights: the router's i32 / f32 [m, top_k] (pz_moe_route_launch)
 *   w_gate, w_up: bf16 [E, I, H];  w_down: bf16 [E, H, I]   (expert e at e*I*H)
 *   sh_gate, sh_up: bf16 [S_I, H]; sh_down: bf16 [H, S_I]   (or all NULL)
 *   out:     f32 [m, H] TP partial sum (row stride ld_out), fully written:
 *            out[i] = Σ_{t in slot order} weights[i,t] * E_{ids[i,t]}(x_i)  (+ S(x_i))
 *            with E_e / S the SwiGLU MLP of pz_ref_mlp (h = bf16(silu(g)*u) before down).
 *   workspace: device memory of pz_moe_workspace_bytes(...) bytes, 256-byte aligned; its
 *            contents need no initialisation and are scratch between launches.
 * Requirements: H, I, S_I multiples of 16 (they are rows of some matrix) and of 8 (16-byte
 * rows); every id in [-1, E) (the router's output).
 * Kernels (all capturable: counts, offsets and the work list stay on the device):
 *   1. gather (1 CTA): per-expert counts, offsets, the (token, slot) pairs sorted by expert
 *      (then by token, deterministic), and a work list of (expert, <= 32 tokens) groups;
 *   2. gate/up + SwiGLU: one CTA item per (work group, 16 intermediate rows); the CTA's 8
 *      warps split H and stream W_gate/W_up rows with 16-byte loads straight into bf16
 *      tensor-core fragments (mma.m16n8k16, weights as the M side, tokens as N); only the
 *      chosen experts' weights are read, each once per group of <= 32 tokens;
 *   3. down: the same kernel shape over W_down's H rows; f32 result per (token, slot);
 *   4. combine: out = Σ_t w * d in slot order (+ shared output), deterministic.
 *   The shared experts run as a dense segment of kernels 2 and 3 (no extra launches).
 * Persistent grids sized from the SM count and occupancy (no host sync);
 * no_persistent (PREZERO_MOE_PERSISTENT=0) launches one CTA per possible item instead (idle ones exit).
 * Errors: PZ_ERR_SHAPE, PZ_ERR_INVALID_ARG (NULL / misaligned pointer, workspace too small),
 * PZ_ERR_CUDA. */
typedef struct pz_moe_args {
  int m;
  int64_t H;
  pz_moe_params p;
  const pz_bf16 *x; int64_t ldx;
  const int32_t *ids;
  const float *weights;
  const pz_bf16 *w_gate, *w_up, *w_down;
  const pz_bf16 *sh_gate, *sh_up, *sh_down;
  float *out; int64_t ld_out;
  void *workspace; size_t workspace_bytes;
  bool no_persistent;     /* one CTA per possible item instead of persistent grids (a baseline) */
  const int32_t *rows;    /* pz_moe_launch's router: the real-row word (pz_moe_route_launch_rows) or NULL */
  bool route_serial_topk; /* pz_moe_launch's router: the former serial top-k (PREZERO_MOE_ROUTE_TOPK=0) */
  bool route_keys_off;    /* pz_moe_launch's router: the two stages with the former comparison
                           * (PREZERO_MOE_ROUTE_KEYS=0); route_serial_topk takes precedence */
} pz_moe_args;

/* Workspace bytes pz_moe_experts_launch needs for up to max_m tokens (a multiple of 256);
 * 0 when p is NULL or max_m < 1. */
size_t pz_moe_workspace_bytes(int max_m, int64_t H, const pz_moe_params *p);

/* Enqueues the experts of a (pz_moe_args above: shapes, workspace, kernels, errors) on `stream`. */
pz_status pz_moe_experts_launch(const pz_moe_args *a, cudaStream_t stream);

/* Router + experts in one call: pz_moe_route_launch(logits, bias) into the workspace, then
 * pz_moe_experts_launch. ids_out / weights_out (i32/f32 [m, top_k]) receive the routing
 * when non-NULL (else workspace). Workspace: pz_moe_workspace_bytes + pz_moe_route_bytes.
 * pz_moe_route_bytes: 2 * roundup(4 * max_m * top_k, 256) bytes (ids i32 then weights f32); 0
 * when p is NULL or max_m < 1. pz_moe_launch errors: PZ_ERR_INVALID_ARG (NULL args, workspace
 * too small), and those of pz_moe_route_launch and pz_moe_experts_launch. */
size_t pz_moe_route_bytes(int max_m, const pz_moe_params *p);
pz_status pz_moe_launch(const pz_moe_args *a, const float *logits, int64_t ld_logits,
                        const float *bias, int32_t *ids_out, float *weights_out,
                        cudaStream_t stream);

/* ---------------------------------------------------------------- dense MLP */

/* Dense SwiGLU MLP of the first first_k_dense_replace layers (TP shard; pz_ref_mlp):
 *   x bf16 [m, H] (ldx), w_gate / w_up bf16 [inter, H], w_down bf16 [H, inter] (inter =
 *   intermediate_size / TP), out f32 [m, H] TP partial (ld_out), fully written;
 *   workspace >= pz_mlp_workspace_bytes(max_m, inter) bytes (the bf16 h [m, inter]).
 * The same kernels as the experts' dense segment (2 launches). Requirements as above.
 * Errors: PZ_ERR_SHAPE, PZ_ERR_INVALID_ARG, PZ_ERR_CUDA. */
size_t pz_mlp_workspace_bytes(int max_m, int64_t inter);
/* pz_mlp_launch's argument checks without the workspace size (also those of mlp_gemm.h's pz_cuda_mlp):
 * 1 <= m <= PZ_MOE_MAX_M, H and inter multiples of 16 in 16..2^20, no NULL pointer, ldx >= H and a
 * multiple of 8, ld_out >= H, x / weights / workspace 16-byte aligned. Errors: PZ_ERR_SHAPE,
 * PZ_ERR_INVALID_ARG. */
pz_status pz_mlp_check(int m, int64_t H, int64_t inter, const pz_bf16 *x, int64_t ldx, const pz_bf16 *w_gate,
                       const pz_bf16 *w_up, const pz_bf16 *w_down, const float *out, int64_t ld_out,
                       const void *workspace);
pz_status pz_mlp_launch(int m, int64_t H, int64_t inter, const pz_bf16 *x, int64_t ldx,
                        const pz_bf16 *w_gate, const pz_bf16 *w_up, const pz_bf16 *w_down,
                        float *out, int64_t ld_out, void *workspace, size_t workspace_bytes,
                        cudaStream_t stream);

/* The fills and the streaming-read yardstick that tests and benchmarks use live in the kernel
 * workbench: bench/dev/dev_helpers.h (pz_moe_fill_bf16, pz_moe_hash_bf16, pz_moe_stream_read). */

#ifdef __cplusplus
}
#endif
#endif
