/* Element types of the IR and bf16 <-> fp32 conversion (round to nearest even, as
 * PyTorch and CUDA's __float2bfloat16_rn do). */
#ifndef PZ_CORE_DTYPE_H
#define PZ_CORE_DTYPE_H
#include <stdint.h>
#include <string.h>
#ifdef __cplusplus
extern "C" {
#endif

/* PZ_U8: one byte per element, the FP8 e4m3 bytes of W8A16 expert weights (core/quant.h). Packed
 * INT4 weights are PZ_I32 words of eight 4-bit values (core/quant.h). */
typedef enum pz_dtype { PZ_F32 = 0, PZ_BF16 = 1, PZ_I32 = 2, PZ_U8 = 3, PZ_DTYPE_COUNT } pz_dtype;
/* bf16 bit pattern: the upper 16 bits of an IEEE-754 binary32. */
typedef uint16_t pz_bf16;

/* Bytes per element: 2 for PZ_BF16, 1 for PZ_U8, else 4. */
static inline size_t pz_dtype_size(pz_dtype t) { return t == PZ_BF16 ? 2 : t == PZ_U8 ? 1 : 4; }
/* "f32", "bf16", "i32", "u8", or "?" for any other value. */
static inline const char *pz_dtype_name(pz_dtype t) {
  return t == PZ_F32 ? "f32" : t == PZ_BF16 ? "bf16" : t == PZ_I32 ? "i32" : t == PZ_U8 ? "u8" : "?";
}
/* Exact widening (shift into the upper half). */
static inline float pz_bf16_to_f32(pz_bf16 h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}
/* Round to nearest even; NaN stays NaN (quiet bit 0x40 set, sign and upper payload kept);
 * values beyond the bf16 range round to ±inf. */
static inline pz_bf16 pz_f32_to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu)) return (pz_bf16)((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (pz_bf16)(u >> 16);
}
#ifdef __cplusplus
}
#endif
#endif
