/* Quantised weight elements: compressed-tensors pack-quantized INT4 (W4A16) and FP8 e4m3 with block
 * scales (W8A16, core/fp8.h): unpacking, exact dequantisation, and the quantisers that give
 * synthetic weights (`--quant int4|fp8`) the checkpoints' formats. */
#ifndef PZ_CORE_QUANT_H
#define PZ_CORE_QUANT_H
#include <stdint.h>
#include "core/dtype.h"
#include "core/fp8.h"
#ifdef __cplusplus
extern "C" {
#endif

/* INT4 packing of compressed-tensors (compressors/pack_quantized/helpers.py, pack_to_int32 with
 * num_bits 4, packed_dim 1): a row of `in` signed values q in [-8, 7] becomes in/8 int32 words;
 * element c sits in word c/8 at bits 4*(c%8) .. 4*(c%8)+3 (lowest nibble first) as the unsigned
 * q + 8. Scales: one bf16 per group of `group` consecutive columns (weight_scale [out, in/group]).
 * The value of an element is q * scale, exact in f32 (a 4-bit integer times an 8-bit mantissa). */
static inline int pz_int4_get(int32_t word, int j) { return (int)(((uint32_t)word >> (4 * j)) & 15u) - 8; }

/* Columns [c0, c0 + n) of one packed row: out[j] = q(c0 + j) * bf16->f32(scale[(c0 + j) / group]),
 * one f32 multiply (exact). packed: the row's in/8 words; scale: the row's in/group scales. */
void pz_int4_dequant_row(const int32_t *packed, const pz_bf16 *scale, int64_t group, int64_t c0, int64_t n, float *out);

/* Quantises one row of n values (n a multiple of group, group a multiple of 8) as compressed-tensors
 * does a bf16 weight with its symmetric minmax observer, strategy "group" (calculate_qparams, then
 * quantize): per group s = bf16(max|w| / 7.5) in f32 (7.5 = the 4-bit range 15 / 2; an all-zero
 * group gets float32's eps 2^-23), then q = clamp(round_half_even(bf16(w / s)), -8, 7) (the
 * quotient rounded to bf16, as torch divides two bf16 tensors); packed[n/8] and scale[n/group] as
 * above. tests/test_quant.c checks scales and values bit for bit against the package. */
void pz_int4_quantize_row(const float *w, int64_t n, int64_t group, int32_t *packed, pz_bf16 *scale);

/* Nearest e4m3 byte to v (round to nearest even, saturating to +-448, NaN -> 0x7f): the inverse
 * of pz_fp8_e4m3_to_f32 on its finite values (torch's float8_e4m3fn cast saturated). */
uint8_t pz_fp8_e4m3_from_f32(float v);

#ifdef __cplusplus
}
#endif
#endif
