/* FP8 E4M3 (the "e4m3fn" variant: no infinities, 0x7f/0xff are NaN) decoding and the
 * 128x128 block dequantisation DeepSeek-V3 / Kimi-K2 checkpoints use (weight_scale_inv). */
#ifndef PZ_CORE_FP8_H
#define PZ_CORE_FP8_H
#include <stdint.h>

/* Value of one E4M3 byte: sign bit 7, exponent bits 6..3 (bias 7), mantissa bits 2..0;
 * exponent 0 is subnormal (m/8 * 2^-6); 0x7f and 0xff are NaN; the largest finite is 448.
 * (OCP 8-bit floating point specification, E4M3; torch.float8_e4m3fn.) Exact in f32. */
float pz_fp8_e4m3_to_f32(uint8_t b);

/* Dequantises columns [c0, c0 + n) of row `row` of an FP8 weight [rows, cols] into f32:
 *   out[j] = e4m3(w[row * cols + c0 + j]) * scale_inv[(row / bm) * scale_cols + (c0 + j) / bn]
 * where scale_inv is f32 [ceil(rows / bm), scale_cols = ceil(cols / bn)] (block bm x bn, 128 x 128
 * in DeepSeek-V3's config "weight_block_size"). One f32 multiply per element: this is
 * DeepSeek-V3's inference/kernel.py weight_dequant (y = x * s), computed in f32. */
void pz_fp8_dequant_row(const uint8_t *w, int64_t cols, const float *scale_inv, int64_t scale_cols,
                        int64_t bm, int64_t bn, int64_t row, int64_t c0, int64_t n, float *out);
#endif
