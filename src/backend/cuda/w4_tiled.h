/* The tiled INT4 layout the W4A16 expert kernel reads fastest (kernels/moe_w4a16.cu, policy W4T):
 * the index and nibble maps, for the host (the executor's read-back, the tests) and the device
 * (the repack kernel, pz_moe_w4a16_tile in moe_q.h). Our own layout; the idea of rearranging
 * quantised weights once so that each thread's load is its tensor-core fragment is the Marlin
 * kernel's (Frantar et al., "MARLIN: Mixed-Precision Auto-Regressive Parallel Inference", 2024).
 *
 * One matrix [N, K] of compressed-tensors pack-quantized INT4 (group 32): words i32 [N, K/8]
 * (column 8w + j at bits 4j..4j+3 of word w), scales bf16 [N, K/32]. N % 16 == 0, K % 128 == 0.
 * Tiled, per 16-row block b and 128-column super-chunk sc (KS = K / 128 per row block):
 *   words:  256 per (b, sc), at ((b KS + sc) 2 + h) 128 + (g 4 + c) 4 + G for row 16 b + 8 h + g,
 *           group 4 sc + G, word c of the group (columns 8c..8c+7), nibbles permuted: column
 *           2i of the word at nibble i, column 2i + 1 at nibble i + 4 (i = 0..3);
 *   scales: 64 per (b, sc), at ((b KS + sc) 8 + g) 8 + 2 G + h for row 16 b + 8 h + g, group 4 sc + G.
 * So a warp's lane l = 4 g + c reads 16 contiguous bytes per row half h (words G = 0..3) and the
 * 16 bytes of unit g of the scales: the same element count and bytes as the source. */
#ifndef PZ_BACKEND_CUDA_W4_TILED_H
#define PZ_BACKEND_CUDA_W4_TILED_H
#include <stdint.h>
#include "core/fill_rule.h" /* PZ_FILL_HD: host + device */

/* True when an [N, K] matrix can be tiled. */
PZ_FILL_HD static inline int pz_w4t_shape_ok(int64_t N, int64_t K) {
  return N > 0 && K > 0 && N % 16 == 0 && K % 128 == 0;
}

/* Tiled position of word w (0 .. K/8 - 1) of row r. */
PZ_FILL_HD static inline int64_t pz_w4t_word_index(int64_t K, int64_t r, int64_t w) {
  const int64_t b = r / 16, h = (r % 16) / 8, g = r % 8, sc = w / 16, G = (w % 16) / 4, c = w % 4;
  return ((b * (K / 128) + sc) * 2 + h) * 128 + (g * 4 + c) * 4 + G;
}

/* Tiled position of the scale of group q (0 .. K/32 - 1) of row r. */
PZ_FILL_HD static inline int64_t pz_w4t_scale_index(int64_t K, int64_t r, int64_t q) {
  const int64_t b = r / 16, h = (r % 16) / 8, g = r % 8, sc = q / 4, G = q % 4;
  return ((b * (K / 128) + sc) * 8 + g) * 8 + 2 * G + h;
}

/* Nibble permutation of a word: source nibble 2i -> i, 2i + 1 -> i + 4; and its inverse. */
PZ_FILL_HD static inline uint32_t pz_w4t_perm(uint32_t w) {
  uint32_t o = 0;
  for (int i = 0; i < 4; i++) {
    o |= ((w >> (8 * i)) & 15u) << (4 * i);
    o |= ((w >> (8 * i + 4)) & 15u) << (4 * (i + 4));
  }
  return o;
}
PZ_FILL_HD static inline uint32_t pz_w4t_unperm(uint32_t w) {
  uint32_t o = 0;
  for (int i = 0; i < 4; i++) {
    o |= ((w >> (4 * i)) & 15u) << (8 * i);
    o |= ((w >> (4 * (i + 4))) & 15u) << (8 * i + 4);
  }
  return o;
}

#endif
