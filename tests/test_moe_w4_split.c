/* The W4A16 expert kernel's K split per work item (backend/cuda/moe_w4_split.h), host-only: each
 * expected value below is worked out by hand from the rule's statement for the Kimi-K2.5 per-rank
 * shapes the H200 runs measured (bench/results/moe_h200_int4_ab/: H 7168, 384 experts, top 8,
 * inter 2048 / 1024 / 512 at TP 1 / 2 / 4, 132 SMs x 4 = 528 CTA slots), so the tiled default takes
 * the unsplit items exactly where they measured faster, and the fixed rule elsewhere. */
#include <stdio.h>
#include "backend/cuda/moe_w4_split.h"
#include "pz_test.h"

#define H 7168
#define E 384
#define TOPK 8
#define SLOTS 528

int main(void) {
  /* fixed rule on its own */
  CHECK(pz_moe_wk_by_k(7168) == 8 && pz_moe_wk_by_k(4096) == 8 && pz_moe_wk_by_k(4095) == 4);
  CHECK(pz_moe_wk_by_k(2048) == 4 && pz_moe_wk_by_k(1024) == 2 && pz_moe_wk_by_k(512) == 1);

  /* down (N = H: 56 items of 128 rows per expert): 8 experts at m = 1 -> 448 < 1056 -> fixed (by inter);
     m = 4 -> 32 experts -> 1792 >= 1056 -> 1, at every TP */
  CHECK(pz_moe_w4_wk(0, H, 2048, 1, TOPK, E, SLOTS, 1, 1) == 4);
  CHECK(pz_moe_w4_wk(0, H, 1024, 1, TOPK, E, SLOTS, 1, 1) == 2);
  for (int inter = 1024; inter <= 2048; inter *= 2) /* (inter 512: the fixed rule gives 1 as well) */
    for (int m = 4; m <= 256; m *= 2) CHECK(pz_moe_w4_wk(0, H, inter, m, TOPK, E, SLOTS, 1, 1) == 1);

  /* gate/up, TP 1 (inter 2048: 16 items per expert): m 4 -> 512 -> fixed 2; m 8 -> 1024 -> fixed 2;
     m 16 -> 2048 -> 1 */
  CHECK(pz_moe_w4_wk(1, H, 2048, 4, TOPK, E, SLOTS, 1, 1) == 2);
  CHECK(pz_moe_w4_wk(1, H, 2048, 8, TOPK, E, SLOTS, 1, 1) == 2);
  CHECK(pz_moe_w4_wk(1, H, 2048, 16, TOPK, E, SLOTS, 1, 1) == 1);
  /* TP 2 (inter 1024: 8 per expert): m 16 -> 1024 -> fixed 2 (measured 8 % slower unsplit); m 32 -> 2048 -> 1 */
  CHECK(pz_moe_w4_wk(1, H, 1024, 16, TOPK, E, SLOTS, 1, 1) == 2);
  CHECK(pz_moe_w4_wk(1, H, 1024, 32, TOPK, E, SLOTS, 1, 1) == 1);
  /* TP 4 (inter 512: 4 per expert; fixed by H: 8): m 32 -> 1024 -> 8; m 64 -> 384 experts -> 1536 -> 1 */
  CHECK(pz_moe_w4_wk(1, H, 512, 4, TOPK, E, SLOTS, 1, 1) == 8);
  CHECK(pz_moe_w4_wk(1, H, 512, 32, TOPK, E, SLOTS, 1, 1) == 8);
  CHECK(pz_moe_w4_wk(1, H, 512, 64, TOPK, E, SLOTS, 1, 1) == 1);
  CHECK(pz_moe_w4_wk(1, H, 512, 256, TOPK, E, SLOTS, 1, 1) == 1);

  /* few items: the fixed split's items (experts x ceil(N / (128 / wk)), rows per item 128 / wk) fill
     fewer than half the 528 slots -> the smallest larger split whose items do, else 8.
     m = 1, TP 1 up (N 2048): fixed 2 -> 8 x 32 = 256 (2 x 256 = 512 < 528); 4 -> 8 x 64 = 512 (1024) -> 4.
     m = 1, TP 2 up (N 1024): 2 -> 128; 4 -> 256 (512 < 528); 8 -> 512 -> 8.
     m = 2, TP 2 up: 16 experts: 2 -> 256 (512 < 528); 4 -> 512 -> 4.
     m = 3, TP 2 up: 24 experts: 2 -> 384 (768 >= 528) -> 2.
     m = 4, TP 1 up: 2 -> 32 x 32 = 1024 -> 2 (measured best against 4 and 8).
     m = 1, TP 4 up (N 512): fixed 8 -> 8 x 32 = 256 (512 < 528), nothing larger -> 8.
     m = 1 down: TP 1 fixed 4 -> 8 x 224 = 1792 -> 4; TP 4 fixed 1 -> 8 x 56 = 448 (896 >= 528) -> 1. */
  CHECK(pz_moe_w4_wk(1, H, 2048, 1, TOPK, E, SLOTS, 1, 1) == 4);
  CHECK(pz_moe_w4_wk(1, H, 1024, 1, TOPK, E, SLOTS, 1, 1) == 8);
  CHECK(pz_moe_w4_wk(1, H, 1024, 2, TOPK, E, SLOTS, 1, 1) == 4);
  CHECK(pz_moe_w4_wk(1, H, 1024, 3, TOPK, E, SLOTS, 1, 1) == 2);
  CHECK(pz_moe_w4_wk(1, H, 2048, 4, TOPK, E, SLOTS, 1, 1) == 2);
  CHECK(pz_moe_w4_wk(1, H, 512, 1, TOPK, E, SLOTS, 1, 1) == 8);
  CHECK(pz_moe_w4_wk(0, H, 2048, 1, TOPK, E, SLOTS, 1, 1) == 4);
  CHECK(pz_moe_w4_wk(0, H, 512, 1, TOPK, E, SLOTS, 1, 1) == 1);
  /* the thresholds hold at equality: unsplit needs items(1) >= 2 x slots (TP 4 up, m 33: 264 experts x 4
     = 1056 = 2 x 528 -> 1; one slot more -> the fixed 8); a larger split needs 2 x items < slots
     (TP 2 up, m 2: 16 experts x 16 = 256 items at wk 2, 2 x 256 = 512: 512 slots -> 2, 513 -> 4) */
  CHECK(pz_moe_w4_wk(1, H, 512, 33, TOPK, E, 528, 1, 1) == 1);
  CHECK(pz_moe_w4_wk(1, H, 512, 33, TOPK, E, 529, 1, 1) == 8);
  CHECK(pz_moe_w4_wk(1, H, 1024, 2, TOPK, E, 512, 1, 1) == 2);
  CHECK(pz_moe_w4_wk(1, H, 1024, 2, TOPK, E, 513, 1, 1) == 4);
  /* capped at K / 128: H 256 (2 super-chunks), inter 128, 8 experts, m 48 top 2 (the GPU test's small
     tileable case): up fixed by K 256 -> 1, items 8 x 1 = 8 -> wants more but K allows 2 -> 2;
     down (K = 128: one super-chunk) stays 1 */
  CHECK(pz_moe_w4_wk(1, 256, 128, 48, 2, 8, SLOTS, 1, 1) == 2);
  CHECK(pz_moe_w4_wk(0, 256, 128, 48, 2, 8, SLOTS, 1, 1) == 1);
  /* with the fixed rule (PREZERO_MOE_W4_WK=0) m = 1 keeps 2 */
  CHECK(pz_moe_w4_wk(1, H, 2048, 1, TOPK, E, SLOTS, 1, 0) == 2);

  /* the experts count saturates at n_experts: 16 experts, m 256 -> 16 x 56 = 896 < 1056 -> fixed */
  CHECK(pz_moe_w4_wk(0, H, 2048, 256, TOPK, 16, SLOTS, 1, 1) == 4);
  /* adaptive off (PREZERO_MOE_W4_WK=0) or the stored layout: the fixed rule, up's 2 only when tiled */
  CHECK(pz_moe_w4_wk(0, H, 2048, 64, TOPK, E, SLOTS, 1, 0) == 4);
  CHECK(pz_moe_w4_wk(1, H, 2048, 64, TOPK, E, SLOTS, 1, 0) == 2);
  CHECK(pz_moe_w4_wk(1, H, 2048, 64, TOPK, E, SLOTS, 0, 1) == 8);
  CHECK(pz_moe_w4_wk(0, H, 2048, 64, TOPK, E, SLOTS, 0, 1) == 4);
  /* degenerate inputs: the fixed rule */
  CHECK(pz_moe_w4_wk(0, H, 2048, 0, TOPK, E, SLOTS, 1, 1) == 4);
  CHECK(pz_moe_w4_wk(0, H, 2048, 64, TOPK, E, 0, 1, 1) == 4);
  /* other GPUs: more slots need more experts (an H100 PCIe, 114 SMs: 456 slots, threshold 912) */
  CHECK(pz_moe_w4_wk(1, H, 1024, 16, TOPK, E, 456, 1, 1) == 1);

  /* the wave rule (adaptive 2, gate/up's default; down keeps the fill rule). Expected experts
     384 (1 - (376/384)^m): m 1 -> 8 exactly, m 4 -> 31.01, m 8 -> 59.52, m 16 -> 109.82, m 128 -> 358.06;
     with top_k >= n_experts every expert. Fill = items / (slots x ceil(items / slots)). */
  CHECK(pz_moe_expected_experts(1, TOPK, E) > 7.999999 && pz_moe_expected_experts(1, TOPK, E) < 8.000001);
  CHECK(pz_moe_expected_experts(16, TOPK, E) > 109.8 && pz_moe_expected_experts(16, TOPK, E) < 109.85);
  CHECK(pz_moe_expected_experts(3, 16, 16) == 16.0);
  CHECK(pz_moe_expected_experts(0, TOPK, E) == 0.0 && pz_moe_expected_experts(4, 0, E) == 0.0);
  CHECK(pz_moe_wave_fill(396, 396) == 1.0 && pz_moe_wave_fill(198, 396) == 0.5);
  CHECK(pz_moe_wave_fill(397, 396) == 397.0 / 792.0 && pz_moe_wave_fill(0, 396) == 0.0 && pz_moe_wave_fill(5, 0) == 0.0);
  /* 396 slots (132 SMs x 3). TP 2 m 16 (N 1024): wk 1 -> 878.6 items, 2.22 waves, fill 0.740; wk 2 -> 1757.1,
     0.887 -> 2 (the fill rule: 128 x 8 = 1024 >= 792 -> 1, measured 4 % slower) */
  CHECK(pz_moe_w4_wk(1, H, 1024, 16, TOPK, E, 396, 1, 2) == 2);
  CHECK(pz_moe_w4_wk(1, H, 1024, 16, TOPK, E, 396, 1, 1) == 1);
  /* TP 1 m 8 (N 2048): wk 1 -> 952.4 items, fill 0.802 < 0.82; wk 2 -> 0.962 -> 2 */
  CHECK(pz_moe_w4_wk(1, H, 2048, 8, TOPK, E, 396, 1, 2) == 2);
  /* TP 2 m 8: wk 1 0.601, wk 2 0.802, wk 4 (1904.7 items) 0.962 -> 4 */
  CHECK(pz_moe_w4_wk(1, H, 1024, 8, TOPK, E, 396, 1, 2) == 4);
  /* TP 4 m 16 (N 512): wk 1 0.555, 2 0.740, 4 0.887 -> 4 (the fixed 8 before) */
  CHECK(pz_moe_w4_wk(1, H, 512, 16, TOPK, E, 396, 1, 2) == 4);
  /* TP 4 m 4: 0.313 / 0.627 / 0.627 / 0.835 -> 8 */
  CHECK(pz_moe_w4_wk(1, H, 512, 4, TOPK, E, 396, 1, 2) == 8);
  /* TP 1 m 4 is a small batch (32 pairs <= 384 / 8: the small-batch split below); the wave rule alone (the
     fill test, as at m 8) would take 0.627, then 992.4 items 0.835 -> 2; TP 1 m 128: 5729 items 0.964 -> 1 */
  CHECK(pz_moe_w4_wk(1, H, 2048, 4, TOPK, E, 396, 1, 2) == 4);
  CHECK(pz_moe_w4_wk(1, H, 2048, 128, TOPK, E, 396, 1, 2) == 1);
  /* TP 1 m 1 on 528 slots: a small batch, 8 experts x 128 rows at split 8 = 1024 items <= 6 x 528 -> 8 */
  CHECK(pz_moe_w4_wk(1, H, 2048, 1, TOPK, E, 528, 1, 2) == 8);
  /* The small-batch split (pairs <= E / 8): the largest split up to 8 and H / 128 whose expected items are at
     most 6 waves of the slots. 396 slots (limit 2376 items), Kimi-K2.5 per rank:
     TP 1 m 4 (31.0 experts, N 2048): 992 / 1985 / 3970 items at 2 / 4 / 8 -> 4 (measured best, round 149);
     TP 2 m 4 (N 1024): 1985 at 8 -> 8; TP 1 m 2 (15.7 experts): 2008 at 8 -> 8; TP 4 m 4 (N 512): 992 -> 8 */
  CHECK(pz_moe_w4_up_small_wk(H, 2048, 4, TOPK, E, 396) == 4);
  CHECK(pz_moe_w4_up_small_wk(H, 1024, 4, TOPK, E, 396) == 8);
  CHECK(pz_moe_w4_up_small_wk(H, 2048, 2, TOPK, E, 396) == 8);
  CHECK(pz_moe_w4_up_small_wk(H, 512, 4, TOPK, E, 396) == 8);
  /* m 8 (64 pairs > 48) is not small: 0, and the wave rule decides (TP 1 m 8 -> 2 above) */
  CHECK(pz_moe_w4_up_small_wk(H, 2048, 8, TOPK, E, 396) == 0);
  CHECK(pz_moe_w4_up_small_wk(H, 2048, 6, TOPK, E, 396) == 2); /* 48 pairs = 384 / 8: still small; 45.5 experts x 32 = 1457 items at 2, 2914 at 4 */
  /* capped by H / 128 (H 256: 2), at least 1 (items of split 1 already beyond the limit), inputs out of range 0 */
  CHECK(pz_moe_w4_up_small_wk(256, 2048, 1, TOPK, E, 396) == 2);
  CHECK(pz_moe_w4_up_small_wk(H, 1 << 20, 1, TOPK, E, 10) == 1);
  CHECK(pz_moe_w4_up_small_wk(H, 2048, 0, TOPK, E, 396) == 0 && pz_moe_w4_up_small_wk(H, 2048, 1, TOPK, E, 0) == 0);
  /* the fill rule (adaptive 1) and the fixed one never take it */
  CHECK(pz_moe_w4_wk(1, H, 2048, 4, TOPK, E, 396, 1, 1) == 2 && pz_moe_w4_wk(1, H, 2048, 4, TOPK, E, 396, 1, 0) == 2);
  /* none reaches the threshold: the fullest, the smaller on ties. 8 experts of N 128 (1 item of 128 rows
     each at wk 1) on 1000 slots: 8 / 16 / 32 / 64 items -> 8 (cap by K 7168: 8); K 256 caps it at 2 */
  CHECK(pz_moe_w4_wk(1, H, 128, 1, 8, 8, 1000, 1, 2) == 8);
  CHECK(pz_moe_w4_wk(1, 256, 128, 1, 8, 8, 1000, 1, 2) == 2);
  /* 32-token chunks: 8 experts, top 2, m 256: 64 tokens each, 2 items per row tile; N 512 (4 tiles at wk 1) on
     100 slots: 64 / 128 / 256 items at wk 1 / 2 / 4: fill 0.64, 0.64, 0.853 -> 4 (counting one chunk: 8) */
  CHECK(pz_moe_w4_wk(1, H, 512, 256, 2, 8, 100, 1, 2) == 4);
  /* down and the stored layout are not the wave rule's: the fill rule, and the fixed one */
  for (int m = 1; m <= 128; m *= 2) CHECK(pz_moe_w4_wk(0, H, 1024, m, TOPK, E, 396, 1, 2) == pz_moe_w4_wk(0, H, 1024, m, TOPK, E, 396, 1, 1));
  CHECK(pz_moe_w4_wk(1, H, 1024, 16, TOPK, E, 396, 0, 2) == 8); /* stored: by K */
  /* pz_moe_w4_up_ctas counts with the fill rule, except for small batches under the wave rule (adaptive 2),
     which count the small-batch split's items on 3 x 132 slots: TP 2 (N 1024) m 1: 8 experts x 64 = 512 items,
     one wave of 528 -> 4 (as the fill rule); m 2 / 4: 16 / 32 x 64 = 1024 / 2048 -> 3 (the fill rule: 4);
     TP 1 (N 2048) m 1 / 2: 8 x 128 = 1024 / 16 x 128 = 2048 -> 3 (the fill rule: 4); from m 8 the two agree */
  CHECK(pz_moe_w4_up_ctas(H, 1024, 1, TOPK, E, 132, 0, 2) == 4);
  CHECK(pz_moe_w4_up_ctas(H, 1024, 2, TOPK, E, 132, 0, 2) == 3 && pz_moe_w4_up_ctas(H, 1024, 4, TOPK, E, 132, 0, 2) == 3);
  CHECK(pz_moe_w4_up_ctas(H, 2048, 1, TOPK, E, 132, 0, 2) == 3 && pz_moe_w4_up_ctas(H, 2048, 2, TOPK, E, 132, 0, 2) == 3);
  for (int m = 8; m <= 128; m *= 2)
    CHECK(pz_moe_w4_up_ctas(H, 1024, m, TOPK, E, 132, 0, 2) == pz_moe_w4_up_ctas(H, 1024, m, TOPK, E, 132, 0, 1));

  /* the gate/up kernel's CTAs per SM (132 SMs: 528 slots at 4, 396 at 3), Kimi-K2.5 per rank (top 8 of 384):
     TP 2 (inter 1024) m 4: 32 experts, split 2 at 528 slots -> 64-row items, 32 x 16 = 512 <= 528: one wave
     at 4 per SM, 1.3 at 3 -> 4; TP 1 (inter 2048) m 4: 32 x 32 = 1024 > 528 -> 3; m 1 / 2 at TP 1 and 2:
     8 x 64 (split 4) and 16 x 32 = 512 -> 4; m 16 at TP 2: 128 x 16 = 2048 -> 3; m 64 / 128: 384 experts -> 3 */
  CHECK(pz_moe_w4_up_ctas(H, 1024, 4, TOPK, E, 132, 0, 1) == 4);
  CHECK(pz_moe_w4_up_ctas(H, 2048, 4, TOPK, E, 132, 0, 1) == 3);
  CHECK(pz_moe_w4_up_ctas(H, 2048, 1, TOPK, E, 132, 0, 1) == 4);
  CHECK(pz_moe_w4_up_ctas(H, 2048, 2, TOPK, E, 132, 0, 1) == 4);
  CHECK(pz_moe_w4_up_ctas(H, 1024, 1, TOPK, E, 132, 0, 1) == 4);
  CHECK(pz_moe_w4_up_ctas(H, 1024, 16, TOPK, E, 132, 0, 1) == 3);
  CHECK(pz_moe_w4_up_ctas(H, 2048, 16, TOPK, E, 132, 0, 1) == 3);
  for (int m = 64; m <= 256; m *= 2) CHECK(pz_moe_w4_up_ctas(H, 2048, m, TOPK, E, 132, 0, 1) == 3);
  /* a given split counts: TP 1 m 4 with 128-row items (wk 1): 32 x 16 = 512 -> 4; wk 8: 32 x 128 -> 3 */
  CHECK(pz_moe_w4_up_ctas(H, 2048, 4, TOPK, E, 132, 1, 1) == 4);
  CHECK(pz_moe_w4_up_ctas(H, 2048, 4, TOPK, E, 132, 8, 1) == 3);
  /* the boundaries: 512 items fit 128 SMs x 4 exactly, not 127 x 4 = 508; 256 items (TP 2 m 4, wk 1: 8 tiles
     x 32) fit 86 x 3 = 258 (both kernels in one wave: 3), not 85 x 3 = 255 (4) */
  CHECK(pz_moe_w4_up_ctas(H, 1024, 4, TOPK, E, 128, 2, 1) == 4);
  CHECK(pz_moe_w4_up_ctas(H, 1024, 4, TOPK, E, 127, 2, 1) == 3);
  CHECK(pz_moe_w4_up_ctas(H, 1024, 4, TOPK, E, 86, 1, 1) == 3);
  CHECK(pz_moe_w4_up_ctas(H, 1024, 4, TOPK, E, 85, 1, 1) == 4);
  /* TP 4 (inter 512) m 1: split 8 (fixed by K), 16-row items, 8 x 32 = 256 <= 396: one wave either way -> 3 */
  CHECK(pz_moe_w4_up_ctas(H, 512, 1, TOPK, E, 132, 0, 1) == 3);
  /* degenerate inputs: 3 */
  CHECK(pz_moe_w4_up_ctas(H, 2048, 0, TOPK, E, 132, 0, 1) == 3);
  CHECK(pz_moe_w4_up_ctas(H, 2048, 4, TOPK, E, 0, 0, 1) == 3);

  /* the tail split (pz_moe_tail_r; the kernels' cap is pz_moe_w4_wk_cap(K): 8 for H 7168, 4 for inter 512):
     Kimi-K2.5 TP 4 m 16 gate/up, 1756 items at wk 4 on 396 slots: 4 full waves (1584), rest 172; 344 <= 396 and
     wk 8 <= 8 -> 2 */
  CHECK(pz_moe_w4_wk_cap(H) == 8 && pz_moe_w4_wk_cap(512) == 4);
  CHECK(pz_moe_tail_r(1756, 396, 4, 8) == 2);
  /* 512 items at wk 2 (TP 1 shapes, 16 experts x 32 tiles): rest 116 -> 232 <= 396 (r 2), 464 > 396 -> 2 */
  CHECK(pz_moe_tail_r(512, 396, 2, 8) == 2);
  /* 1024 at wk 4: rest 232, 464 > 396 -> 1 (two sub-waves would take as long as one whole wave) */
  CHECK(pz_moe_tail_r(1024, 396, 4, 8) == 1);
  /* a nearly empty last wave: 400 items, rest 4 -> r 8 at wk 1 (wk 8 <= 8, 32 <= 396) */
  CHECK(pz_moe_tail_r(400, 396, 1, 8) == 8);
  /* ... but at most the cap: wk 2 with cap 4 -> 2; wk 8 at cap 8 -> 1 */
  CHECK(pz_moe_tail_r(400, 396, 2, 4) == 2);
  CHECK(pz_moe_tail_r(400, 396, 8, 8) == 1);
  /* no tail: one wave or less (the K split rules size those), whole waves */
  CHECK(pz_moe_tail_r(396, 396, 1, 8) == 1 && pz_moe_tail_r(300, 396, 1, 8) == 1);
  CHECK(pz_moe_tail_r(792, 396, 1, 8) == 1);
  /* boundary: rest x r == grid is allowed (one full sub-wave): 396 + 198 items at wk 1 -> r 2, not 4 */
  CHECK(pz_moe_tail_r(594, 396, 1, 8) == 2);
  /* degenerate inputs: 1 */
  CHECK(pz_moe_tail_r(1000, 0, 1, 8) == 1 && pz_moe_tail_r(1000, 396, 0, 8) == 1 && pz_moe_tail_r(1000, 396, 1, 0) == 1);
  TEST_DONE();
}
