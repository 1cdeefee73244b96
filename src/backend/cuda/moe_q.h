/* CUDA routed experts with quantised weights (sm_90a), both on tensor cores (mma.m16n8k16 bf16):
 * - W4A16: compressed-tensors pack-quantized words and bf16 group-32 scales (core/quant.h) stay
 *   packed in device memory and are dequantised in registers; the tensor cores multiply the 4-bit
 *   integers, and each group's scale multiplies its f32 partial sum.
 * - W8A16: FP8 e4m3 bytes and f32 block scales (weight_scale_inv, core/fp8.h) stay as stored; each
 *   weight becomes bf16(e4m3 * scale) in registers, the value the loader's bf16 dequantisation and
 *   the CPU reference (pz_ref_qexpert_dequant) give.
 * Shared experts stay bf16 (pz_cuda_mlp, mlp_gemm.h: the fused kernel or GEMMs). The kernels share one structure
 * (kernels/moe_q_common.cuh). */
#ifndef PZ_BACKEND_CUDA_MOE_Q_H
#define PZ_BACKEND_CUDA_MOE_Q_H
#include <stddef.h>
#include <stdint.h>
#include <cuda_runtime.h>
#include "prezero.h"
#include "core/dtype.h"
#include "core/ir.h"
#include "backend/cuda/gemm.h"
#ifdef __cplusplus
extern "C" {
#endif

/* One MoE block's routed (+ shared) experts on one TP rank, for a given routing:
 *   x:        bf16 [m, H] (row stride ldx, a multiple of 8; 16-byte aligned)
 *   ids, weights: i32 / f32 [m, top_k] (pz_moe_route_launch; id -1 = empty slot)
 *   W4A16 (p.wquant 1): w_gate, w_up: i32 [E, I, H/8] packed words, s_gate, s_up: bf16 [E, I, H/32];
 *                       w_down: i32 [E, H, I/8], s_down: bf16 [E, H, I/32]  (I = p.inter, the rank's shard)
 *   W8A16 (p.wquant 2): w_gate, w_up: e4m3 bytes [E, I, H], s_gate, s_up: f32 [E, ceil(I/bm), ceil(H/bn)];
 *                       w_down: e4m3 [E, H, I], s_down: f32 [E, ceil(H/bm), ceil(I/bn)]
 *                       (bm, bn = p.q_block_rows, p.q_block_cols; 128 x 128 in DeepSeek-V3 / Kimi-K2)
 *   sh_gate, sh_up: bf16 [S_I, H], sh_down: bf16 [H, S_I] (S_I = p.shared_inter) or NULL
 *   out: f32 [m, H] (row stride ld_out, a multiple of 4), fully written:
 *        out[i] = Σ_{t in slot order} weights[i,t] * E_{ids[i,t]}(x_i)  (+ S(x_i))
 *   with E_e the SwiGLU of pz_ref_moe_experts_q (ref_ops.h): g = x·Wgᵀ, u = x·Wuᵀ, h = bf16(silu(g)*u),
 *   d = h·Wdᵀ, W = q * scale (INT4) or bf16(e4m3 * scale_inv) (FP8). The products sum in another
 *   order than the CPU (W4A16: per group of 32 columns on the tensor cores, then scale * group sum
 *   added in f32; W8A16: f32 accumulation on the tensor cores in k order per warp slice), so results
 *   agree within rounding, not bit for bit; the combine is the same f32 order as the CPU's.
 * Requirements: W4A16: p.wquant == 1 and p.q_group == 32, H and I multiples of 32;
 *   W8A16: p.wquant == 2, q_block_rows >= 1, q_block_cols a multiple of 16, H and I multiples of 64;
 *   both: 1 <= m <= 256; n_experts <= 1024, top_k <= 32 (moe.h limits).
 * Kernels (capturable; no host sync): the router when logits is given (moe.h), gather (one CTA:
 * per-expert counts, token lists in pair order, work items of <= 32 tokens), gate/up + SwiGLU over
 * the chosen experts only, down, and the combine; the shared experts run through pz_cuda_mlp (gemm below) into
 * out, first on `stream`, or on `side` beside the router and gather (and, joined at the combine, beside
 * the routed experts too: the fields below).
 * Workspace: pz_moe_w4a16_workspace_bytes / pz_moe_w8a16_workspace_bytes(max_m, H, &p) bytes (the
 * same layout), 256-byte aligned, no initialisation.
 * Errors: PZ_ERR_SHAPE (limits above), PZ_ERR_INVALID_ARG (NULL / misaligned pointers, workspace
 * too small, side without ev_fork and ev_join, fork_join outside 0..2, wquant / group / block not the
 * launcher's format), those of pz_moe_route_launch_rows, PZ_ERR_CUDA (launch, event). */
typedef struct pz_moe_q_args {
  int m;
  int64_t H;
  pz_moe_params p;
  const pz_bf16 *x; int64_t ldx;
  int32_t *ids;    /* the routing, read; written first by the launcher when logits is non-NULL */
  float *weights;
  const void *w_gate, *w_up, *w_down;  /* i32 words (W4A16) or e4m3 bytes (W8A16) */
  const void *s_gate, *s_up, *s_down;  /* bf16 group scales (W4A16) or f32 block scales (W8A16) */
  const pz_bf16 *sh_gate, *sh_up, *sh_down;
  float *out; int64_t ld_out;
  void *workspace; size_t workspace_bytes;
  int l2pf; /* W4A16, stored layout only: 1 prefetches the next items' weights into L2
             * (PREZERO_MOE_L2PF=1; 0, the default, was faster on the H200); same results */
  int w4_tiled; /* W4A16: 1 = w_* and s_* are in pz_moe_w4a16_tile's layout (H and I multiples of 128,
                 * 16-byte aligned), 0 = as stored (compressed-tensors); l2pf then has no effect */
  int w4_wk_up; /* W4A16, for A/B runs: warps of a CTA splitting the gate/up K (H) in one work item, 1, 2,
                 * 4 or 8 (items of 16 x 8 / w4_wk_up rows), 0 = the default (moe_w4_split.h). Results
                 * agree within rounding (the K slices add in warp order) */
  int w4_wk_dn; /* W4A16, for A/B runs: the same for the down K (inter), 0 = the default (moe_w4_split.h) */
  int w4_wk_fixed; /* W4A16: 1 = the fixed K splits of moe_w4_split.h (PREZERO_MOE_W4_WK=0), 0 = the adaptive
                    * default for tiled experts (down: whole K per warp when the batch has >= 2 items of 128
                    * rows per CTA slot, more warps per K where the fixed split's items fill < half the
                    * slots; gate/up: the wave rule, see w4_waves_off); results agree within rounding and
                    * depend on m and the SM count */
  int w4_waves_off; /* W4A16 tiled: 1 = gate/up's adaptive split by the fill rule (moe_w4_split.h), as before
                     * (PREZERO_MOE_W4_WAVES=0); 0, the default, = by the wave rule (the smallest split whose
                     * expected items fill >= 82 % of the CTA slots over their waves). Results agree within
                     * rounding */
  int w4_up_ctas; /* W4A16 tiled, the gate/up kernel's CTAs per SM: 0, the default, = by batch (moe_w4_split.h
                   * pz_moe_w4_up_ctas: 3, with up to 80 registers, where its 1-n-tile loop does not spill, or
                   * 4 where only one wave of 4 per SM holds the batch's items); 4 = 64 registers, as before
                   * (PREZERO_MOE_W4_UP_REGS=0; that loop stores and reloads 7 registers per 128-column step,
                   * about 0.6 bytes of L2 writes per weight byte on the H200); 3 = always 3. Other values:
                   * PZ_ERR_INVALID_ARG. Bit-identical for the same K split with tail_off (the tail split
                   * follows the grid); the adaptive K split counts the launched kernel's CTA slots */
  int items_dynamic; /* both: 1 = where the batch has more work items than the grid has CTAs, each CTA takes
                      * item blockIdx.x, then claims its next item from a counter in the workspace as it starts
                      * each one (the gather zeroes the counters), so the items beyond the first wave go to the
                      * CTAs free first: one that started late (beside the shared experts' kernels) or drew
                      * expensive items runs fewer (PREZERO_MOE_DYNAMIC=1); no effect on the stored-layout W4A16
                      * kernel with l2pf (its prefetch follows the static order); 0, the default, = item i runs
                      * on CTA i mod grid, as before. Bit-identical (an item's outputs and operations do not
                      * depend on its CTA). On the H200 it gained 1-2.4 % at TP 2 / 4 and lost 1.5-2.5 % at
                      * TP 1 m 32-64 (bench/results/moe_h200_int4_ab/dyn_r138/), so the executor's default is 0 */
  int direct_off; /* both: 1 = work items whose K is not split reduce through shared memory with CTA barriers
                   * (PREZERO_MOE_DIRECT=0); 0, the default, = each warp writes its rows from its registers.
                   * Bit-identical for W8A16, and for W4A16 with tail_off (direct_off 1 lets launches of
                   * unsplit K take the tail split: within rounding) */
  int tail_off; /* W4A16: 1 = the items of a batch's last, part-empty wave of CTAs run whole (the executor's
                 * default: PREZERO_MOE_TAIL unset or 0); 0 (PREZERO_MOE_TAIL=1) = each splits into up to 8 / WK
                 * sub-items of fewer rows, K over more warps, as many as that wave's CTAs hold (kernels/moe_q_common.cuh tail_of), where the launch reduces
                 * through shared memory (K split, or direct_off). Results agree within rounding; static and
                 * dynamic schedules bit-identical. W8A16 runs its items whole */
  /* Routing by the launcher: logits non-NULL (f32 [m, E], row stride ld_logits) makes the launcher run
   * pz_moe_route_launch_rows(m, logits, ld_logits, bias, &p, ids, weights, rows, mode) itself (mode
   * pz_moe_topk_mode(route_serial_topk, route_keys_off)),
   * after the fork below, so the shared experts need not wait for it. NULL: ids / weights already hold
   * a routing (as before). Errors of the router are returned as they are. */
  const float *logits; int64_t ld_logits;
  const float *bias;      /* f32 [E] e_score_correction_bias or NULL */
  const int32_t *rows;    /* the executor's real-row word (moe.h) or NULL */
  int route_serial_topk;  /* 1: the router's former serial top-k (PREZERO_MOE_ROUTE_TOPK=0) */
  int route_keys_off;     /* 1: the router's two stages with the former comparison (PREZERO_MOE_ROUTE_KEYS=0) */
  /* Shared experts beside the routing (p.shared_inter > 0): side non-NULL, with ev_fork and ev_join
   * (events, best created with cudaEventDisableTiming, used by no other stream meanwhile), runs the bf16
   * shared experts on side, forked from `stream` before the router and the gather, which are latency
   * bound (one CTA per token, then one CTA: about 12 + 4 µs at m = 4 on the H200 under ncu) and leave
   * the SMs to the shared experts. `stream` waits for them before the routed experts' gate/up
   * (fork_join 1) or only before the combine (fork_join 2: the shared experts overlap the routed
   * experts too); 0, the default, picks 2 at m <= 4 and 1 above: on the H200 (Kimi-K2.5 shapes, TP 1
   * and 2) 2 was 2-5 µs faster at m 1 and 4 and 2-47 µs slower at m 16 and 64, where the shared
   * experts' CTAs delay the routed experts' persistent grid (bench/results/moe_h200_int4_ab/fork/).
   * CUDA graph capture records the fork and join as graph edges (side joins the capture of `stream`).
   * side NULL: one stream, the shared experts first (PREZERO_MOE_FORK=0). The same bits every way where
   * the shared experts' kernels are deterministic (the fused kernel; as GEMMs, at most 2 split-K
   * splits): they write out before the combine adds the routed part, as before. */
  cudaStream_t side;
  cudaEvent_t ev_fork, ev_join;
  int fork_join;
  /* The rank's GEMM handle, or NULL: the shared experts run through pz_cuda_mlp (mlp_gemm.h), as
   * GEMMs + SiLU-and-multiply + GEMM where pz_cuda_mlp_uses_gemm(gemm, PZ_MLP_SHARED, m, H, shared_inter)
   * (by default from 8 tokens up to 256, H and shared_inter multiples of 64; PREZERO_MLP_GEMM), else the
   * fused kernel (pz_mlp_launch) as with NULL. On `side` the GEMMs overlap
   * no other GEMM of the handle: until the join `stream` runs only the router, the gather and the
   * expert kernels. */
  pz_gemm_ctx *gemm;
  /* The shared experts' gate | up output when they run as GEMMs (pz_cuda_mlp_into): sh_gu f32
   * [m, 2 shared_inter] with row stride ld_sh_gu (the prezero slot PZ_MOE_SH_GU_PREZERO), or NULL (the
   * workspace's); sh_gu_zeroed: it holds zeros on entry (the donor zeroed it), so those GEMMs skip their
   * zeroing. Same results either way */
  float *sh_gu;
  int64_t ld_sh_gu;
  int sh_gu_zeroed;
} pz_moe_q_args;

/* W4A16 (p.wquant 1): workspace bytes for up to max_m tokens of hidden size H (0 when p is NULL or
 * max_m < 1), and the launch of a (pz_moe_q_args above: shapes, workspace, errors) on `stream`. */
size_t pz_moe_w4a16_workspace_bytes(int max_m, int64_t H, const pz_moe_params *p);
pz_status pz_moe_w4a16_launch(const pz_moe_q_args *a, cudaStream_t stream);
/* Rearranges E INT4 matrices [N, K] in place, words i32 [E, N, K/8] and scales bf16 [E, N, K/32]
 * (compressed-tensors layout, group 32), into the tiled layout of w4_tiled = 1 (w4_tiled.h gives
 * the maps): same bytes, same values. Either array may be NULL (only the other one moves), not
 * both. tmp: device scratch of tmp_bytes >= pz_moe_w4a16_tile_tmp_bytes(N, K) (the words of one
 * of the E matrices; a multiple lets that many go per pass). Runs on `stream`; not for capture (it
 * copies). Errors: PZ_ERR_SHAPE (N % 16 or K % 128 not 0, E < 1), PZ_ERR_INVALID_ARG (both NULL,
 * not 16-byte aligned, tmp too small), PZ_ERR_CUDA. */
size_t pz_moe_w4a16_tile_tmp_bytes(int64_t N, int64_t K);
pz_status pz_moe_w4a16_tile(void *words, void *scales, int64_t E, int64_t N, int64_t K, void *tmp, size_t tmp_bytes,
                            cudaStream_t stream);
/* Host inverse for read-back: tiled words and / or scales (either may be NULL) of E matrices [N, K]
 * in host memory back to the compressed-tensors layout, in place (a heap copy of one matrix's
 * array). Errors: PZ_ERR_SHAPE, PZ_ERR_OOM. */
pz_status pz_moe_w4a16_untile_host(int32_t *words, pz_bf16 *scales, int64_t E, int64_t N, int64_t K);

/* W8A16 (p.wquant 2): the same pair for FP8 e4m3 experts with f32 block scales. */
size_t pz_moe_w8a16_workspace_bytes(int max_m, int64_t H, const pz_moe_params *p);
pz_status pz_moe_w8a16_launch(const pz_moe_q_args *a, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif
