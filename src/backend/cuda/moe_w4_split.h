/* The K split of the W4A16 expert kernel's work items (kernels/moe_w4a16.cu): of a CTA's 8 warps, wk
 * share one item's K (each a contiguous 1/wk of it, reduced in warp order), so an item covers
 * 16 x 8 / wk weight rows (N side) of one expert for up to 32 of its tokens. Host and device
 * agnostic, no CUDA calls: the W4A16 launcher and the CPU test (tests/test_moe_w4_split.c) share it, and
 * every grouped expert kernel takes its fixed rule (pz_moe_wk_by_k).
 *
 * Fixed rule (the kernel's split before adaptive splits; PREZERO_MOE_W4_WK=0 restores it):
 *   gate/up (K = H): 2 for tiled experts with inter >= 1024, else by K; down (K = inter): by K;
 *   by K = 8 from 4096, 4 from 2048, 2 from 1024, else 1.
 * Fill rule (down's default; gate/up's with PREZERO_MOE_W4_WAVES=0, and what pz_moe_w4_up_ctas counts
 * with; tiled experts): wk = 1, whole K per warp and items of 128 rows, when
 * the batch has at least two such items per CTA slot, counting min(m x top_k, n_experts) experts
 * (an upper bound on those the router can choose): min(m top_k, E) x ceil(N / 128) >= 2 x slots;
 * otherwise the fixed rule, unless its items fill fewer than half the slots: then the smallest
 * larger split whose items do, at most 8 and K / 128 (Kimi-K2.5 m = 1: gate/up 2 -> 4 at TP 1, 512 items of
 * 32 rows instead of 256 of 64, and 2 -> 8 at TP 2; so ~4 CTAs per SM stream instead of ~2: the MoE
 * op 154.3 -> 149.4 us at TP 1, 118.5 -> 102.7 us at TP 2, bench/results/moe_h200_int4_ab/, round 68).
 * Measured on the H200 (bench/results/moe_h200_int4_ab/, Kimi-K2.5 per-rank shapes, 528 slots):
 * down unsplit was 2-6 % faster at TP 1 / 2 for m = 4..128 (those all pass the test above), and
 * gate/up unsplit 1-4 % faster at m = 64 / 128 but 6-19 % slower at m = 4 / 16 of TP 2 / 4, which
 * the test keeps on the fixed rule. Earlier runs (moe_h200_int4_wk_up.md): at m = 4 a gate/up split
 * of 2 (1024 items) beat 4 and 8 at TP 1, and 8 beat 2 at TP 4 m = 4 / 16, as the rules pick. */
#ifndef PZ_BACKEND_CUDA_MOE_W4_SPLIT_H
#define PZ_BACKEND_CUDA_MOE_W4_SPLIT_H
#include <stdint.h>

#if defined(__CUDACC__)
#define PZ_MOE_SPLIT_HD __host__ __device__ /* pz_moe_tail_r runs in the expert kernels too */
#else
#define PZ_MOE_SPLIT_HD
#endif

/* The fixed rule's wk for K (the reduction length) on its own; also the split every grouped expert
 * kernel takes (bf16 moe_experts.cu, W8A16). */
static inline int pz_moe_wk_by_k(int64_t K) { return K >= 4096 ? 8 : K >= 2048 ? 4 : K >= 1024 ? 2 : 1; }

/* The experts an m-token batch is expected to choose when each token takes top_k of n_experts at
 * random (each expert is missed by a token with probability 1 - top_k / n_experts):
 * n_experts x (1 - (1 - top_k / n_experts)^m). Real routers are skewed and choose fewer; bench moe's
 * random logits choose this many (Kimi-K2.5, 384 experts, top 8: 8.0 / 31.0 / 109.8 / 188.2 at m = 1 /
 * 4 / 16 / 32). 0 for inputs out of range. */
static inline double pz_moe_expected_experts(int m, int top_k, int n_experts) {
  if (m < 1 || top_k < 1 || n_experts < 1) return 0.0;
  const double miss = 1.0 - (double)(top_k < n_experts ? top_k : n_experts) / (double)n_experts;
  double p = 1.0;
  for (int i = 0; i < m; i++) p *= miss;
  return (double)n_experts * (1.0 - p);
}

/* ceil(x) for 0 <= x < 2^63, without libm (this header is host and device agnostic). */
static inline double pz_moe_ceil(double x) {
  const double c = (double)(int64_t)x;
  return c < x ? c + 1.0 : c;
}

/* The share of the CTA slots an item grid of `items` keeps busy over its waves: items / (slots x
 * ceil(items / slots)), in (0, 1]; 0 for items or slots <= 0. */
static inline double pz_moe_wave_fill(double items, int slots) {
  if (items <= 0.0 || slots < 1) return 0.0;
  const double w = items / (double)slots;
  return w / pz_moe_ceil(w);
}

/* The wave rule's threshold: the smallest K split whose items fill at least this share of the slots
 * over their waves (measured on the H200, bench/results/moe_h200_int4_ab/waves/). */
#define PZ_MOE_W4_WAVE_FILL 0.82

/* wk (1, 2, 4 or 8) for the gate/up (up = 1: N = inter, K = H) or down (up = 0: N = H, K = inter)
 * items of an m-token batch with top_k of n_experts experts, on slots CTA slots (SMs x CTAs per SM).
 * tiled: the experts are in the tiled layout (the adaptive rules apply to it only); adaptive: 0 for
 * the fixed rule, 1 for the fill rule below, 2 (the default) for the wave rule on gate/up and the
 * fill rule on down. Inputs out of range (m, top_k, n_experts, slots < 1) get the fixed rule.
 * Wave rule (gate/up; PREZERO_MOE_W4_WAVES=0 gives the fill rule back): the smallest split of 1, 2,
 * 4, 8 (at most K / 128) whose expected items, pz_moe_expected_experts x their 32-token chunks
 * (ceil(m top_k / experts / 32), at least 1) x ceil(N / (128 / wk)), fill at
 * least PZ_MOE_W4_WAVE_FILL of the slots over their waves (pz_moe_wave_fill); when none does, the one
 * that fills most (the smaller on ties). Items run in static waves (item i on CTA i mod grid), so a
 * last wave that is mostly empty leaves SMs idle: Kimi-K2.5 TP 2 m 16 has 110 experts x 8 items of 128
 * rows = 878 items on 396 slots, 2.2 waves (0.74), against 4.4 waves (0.89) at wk 2, which measured
 * 4 % faster (the fill rule's upper bound of 128 experts passed its 2-waves test). */
/* The largest K split a work item may take: 8, and no more than K's 128-column super-chunks (no warp left
 * without K). */
static inline int pz_moe_w4_wk_cap(int64_t K) { return K / 128 >= 8 ? 8 : K / 128 >= 4 ? 4 : K / 128 >= 2 ? 2 : 1; }

/* Small batches (the wave rule's, gate/up): a batch of at most n_experts / 8 (token, expert) pairs touches at
 * most an eighth of the experts, about one token each, and its few items are latency-bound: there a larger
 * split wins although a smaller one already fills the slots. The split is then the largest (up to 8 and
 * K / 128) whose expected items, pz_moe_expected_experts x ceil(inter / (128 / wk)), are at most 6 waves of
 * `slots` CTA slots, at least 1. Measured on the H200 (Kimi-K2.5, 132 SMs, the MoE op,
 * bench/results/moe_h200_int4_ab/small_m_split_r149/, two alternated pairs): against the wave rule's choice
 * TP 1 m 2 / 4 -4.6 / -4.8 % (split 4), TP 2 m 2 / 4 -1.5 / -5.9 % (split 8), TP 1 m 1, TP 2 m 1 and TP 4
 * m 1-4 equal within the pairs' spread (the same or an equal launch); at m 8 (64 pairs > 48) a larger split
 * than the wave rule's lost 0.5-3.4 %, so it keeps the wave rule. 0 where the batch is not small (the
 * caller then takes the wave rule) or inputs are out of range. */
static inline int pz_moe_w4_up_small_wk(int64_t H, int64_t inter, int m, int top_k, int n_experts, int slots) {
  if (H < 128 || inter < 1 || m < 1 || top_k < 1 || n_experts < 1 || slots < 1) return 0;
  if ((int64_t)m * top_k * 8 > n_experts) return 0;
  const int cap = pz_moe_w4_wk_cap(H);
  const double experts = pz_moe_expected_experts(m, top_k, n_experts), limit = 6.0 * (double)slots;
  int wk = 1;
  while (wk < cap && experts * (double)((inter * 2 * wk + 127) / 128) <= limit) wk *= 2;
  return wk;
}

/* The tail split of a persistent item grid (kernels/moe_q_common.cuh tail_of): total work items of K split wk
 * run in static waves of `grid` CTAs; where total > grid the last wave holds rest = total mod grid items and
 * leaves grid - rest CTAs idle for an item's time. Each of the rest then splits into r sub-items of 1/r the
 * rows, K over wk x r warps: r the largest power of 2 with rest x r <= grid and wk x r <= tail_wk, so the
 * sub-items still fit one wave and take about 1/r an item's time. 1 (no split) where total <= grid (the K
 * split rules above size one-wave batches), rest = 0, tail_wk <= wk, or inputs out of range. Example:
 * Kimi-K2.5 TP 4 m 16 gate/up, about 1756 items at wk 4 on 396 slots: rest 172, r 2 (344 sub-items at wk 8). */
PZ_MOE_SPLIT_HD static inline int pz_moe_tail_r(int64_t total, int64_t grid, int wk, int tail_wk) {
  if (grid < 1 || wk < 1 || total <= grid || tail_wk <= wk) return 1;
  const int64_t rest = total % grid;
  int r = 1;
  while (rest > 0 && (int64_t)wk * r * 2 <= tail_wk && rest * r * 2 <= grid) r *= 2;
  return r;
}

static inline int pz_moe_w4_wk(int up, int64_t H, int64_t inter, int m, int top_k, int n_experts, int slots, int tiled,
                               int adaptive) {
  const int64_t N = up ? inter : H, K = up ? H : inter;
  const int fixed = up && tiled && inter >= 1024 ? 2 : pz_moe_wk_by_k(K);
  if (!tiled || !adaptive || m < 1 || top_k < 1 || n_experts < 1 || slots < 1) return fixed;
  const int cap = pz_moe_w4_wk_cap(K);
  if (up && adaptive == 2) {
    const int small = pz_moe_w4_up_small_wk(H, N, m, top_k, n_experts, slots);
    if (small > 0) return small;
    const double experts = pz_moe_expected_experts(m, top_k, n_experts);
    /* an item holds up to 32 tokens of one expert: more per expert make more items */
    const double per = experts > 0.0 ? (double)m * top_k / experts : 0.0;
    double chunks = pz_moe_ceil(per / 32.0);
    if (chunks < 1.0) chunks = 1.0;
    int best = 1;
    double best_fill = -1.0;
    for (int wk = 1; wk <= cap; wk *= 2) {
      const double fill = pz_moe_wave_fill(experts * chunks * (double)((N * wk + 127) / 128), slots);
      if (fill >= PZ_MOE_W4_WAVE_FILL) return wk;
      if (fill > best_fill) {
        best_fill = fill;
        best = wk;
      }
    }
    return best;
  }
  /* fill rule */
  const int64_t pairs = (int64_t)m * top_k, experts = pairs < n_experts ? pairs : n_experts;
  if (experts * ((N + 127) / 128) >= 2 * (int64_t)slots) return 1; /* items of 128 rows */
  /* larger splits up to 8 and up to K's 128-column super-chunks (no warp left without K) */
  int wk = fixed;
  while (wk < cap && 2 * experts * ((N * wk + 127) / 128) < slots) wk *= 2; /* items of 128 / wk rows */
  return wk;
}

/* CTAs per SM of the W4A16 gate/up kernel on tiled experts, on an sms-SM GPU: 3 (up to 80 registers per
 * thread, where its 1-n-tile loop, the one uniform decode routing runs, does not spill: the default) or 4
 * (64 registers, that loop spilling 7 per 128-column step: the former kernel). 4 only where that keeps the
 * batch's gate/up items in one wave that 3 per SM would cut into two: 3 sms < items <= 4 sms, counting min(m top_k, E) experts (an upper bound on those the router can
 * choose) x the row tiles of the split pz_moe_w4_wk's fill rule picks for 4 x sms slots (wk_up instead when it is
 * given, 1 / 2 / 4 / 8). Measured on the H200 (Kimi-K2.5, bench/results/moe_h200_int4_ab/up_regs/): the
 * MoE op at 3 per SM against 4 per SM, TP 1 m 4 / 16 / 64 / 128 -4.9 / -14.4 / -11.6 / -8.4 %, TP 2 m 16 /
 * 64 / 128 -6.8 / -12.2 / -10.5 %, but TP 2 m 4 +8 % (512 items: one wave of 528 slots, 1.3 waves of 396),
 * which this rule gives back to the 4-per-SM kernel. Where both hold the items in one wave (at most 3 sms),
 * 3 (not measured apart: Kimi-K2.5 TP 4 m 1, 256 items). Under the wave rule (adaptive 2) a small batch
 * (pz_moe_w4_up_small_wk) counts the items of its own split on 3 x sms slots instead, so the larger split runs on
 * the 3-per-SM kernel, as measured (Kimi-K2.5 TP 2 m 4: split 8 at 3 per SM 141.4 us against split 2 at 4 per
 * SM 150.2 us, round 149). Inputs out of range: 3. */
static inline int pz_moe_w4_up_ctas(int64_t H, int64_t inter, int m, int top_k, int n_experts, int sms, int wk_up,
                                    int adaptive) {
  if (H < 1 || inter < 1 || m < 1 || top_k < 1 || n_experts < 1 || sms < 1) return 3;
  const int small = adaptive == 2 ? pz_moe_w4_up_small_wk(H, inter, m, top_k, n_experts, 3 * sms) : 0;
  const int wk = wk_up == 1 || wk_up == 2 || wk_up == 4 || wk_up == 8 ? wk_up
                 : small > 0 ? small /* the small-batch split, on the 3-per-SM kernel's slots */
                             : pz_moe_w4_wk(1, H, inter, m, top_k, n_experts, 4 * sms, 1, adaptive ? 1 : 0);
  const int64_t pairs = (int64_t)m * top_k, experts = pairs < n_experts ? pairs : n_experts;
  const int64_t rows = 128 / wk; /* 16 rows per warp x 8 / wk warps */
  const int64_t items = experts * ((inter + rows - 1) / rows);
  return items > 3 * (int64_t)sms && items <= 4 * (int64_t)sms ? 4 : 3;
}

#endif
