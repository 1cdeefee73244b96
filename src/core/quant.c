/* INT4 pack-quantized and FP8 e4m3 element rules (quant.h). */
#include "core/quant.h"
#include <math.h>
#include <pthread.h>

static float e4m3_pos[127]; /* values of codes 0..0x7e, increasing */
static pthread_once_t e4m3_once = PTHREAD_ONCE_INIT;
static void e4m3_init(void) {
  for (int i = 0; i < 127; i++) e4m3_pos[i] = pz_fp8_e4m3_to_f32((uint8_t)i);
}

void pz_int4_dequant_row(const int32_t *packed, const pz_bf16 *scale, int64_t group, int64_t c0, int64_t n,
                         float *out) {
  for (int64_t j = 0; j < n; j++) {
    const int64_t c = c0 + j;
    out[j] = (float)pz_int4_get(packed[c >> 3], (int)(c & 7)) * pz_bf16_to_f32(scale[c / group]);
  }
}

void pz_int4_quantize_row(const float *w, int64_t n, int64_t group, int32_t *packed, pz_bf16 *scale) {
  for (int64_t g0 = 0; g0 < n; g0 += group) {
    float amax = 0.0f;
    for (int64_t j = 0; j < group; j++) amax = fmaxf(amax, fabsf(w[g0 + j]));
    pz_bf16 sb = pz_f32_to_bf16(amax / 7.5f);
    if (pz_bf16_to_f32(sb) == 0.0f) sb = pz_f32_to_bf16(1.1920928955078125e-7f); /* torch.finfo(float32).eps */
    scale[g0 / group] = sb;
    const float s = pz_bf16_to_f32(sb);
    for (int64_t j = 0; j < group; j += 8) {
      uint32_t word = 0;
      for (int k = 0; k < 8; k++) {
        float q = rintf(pz_bf16_to_f32(pz_f32_to_bf16(w[g0 + j + k] / s))); /* the quotient in bf16, as torch */
        q = q < -8.0f ? -8.0f : q > 7.0f ? 7.0f : q;
        word |= (uint32_t)((int)q + 8) << (4 * k);
      }
      packed[(g0 + j) >> 3] = (int32_t)word;
    }
  }
}

uint8_t pz_fp8_e4m3_from_f32(float v) {
  if (isnan(v)) return 0x7f;
  const uint8_t sign = signbit(v) ? 0x80 : 0;
  float a = fabsf(v);
  if (a >= 448.0f) return sign | 0x7e;
  /* Codes 0..0x7e are the finite non-negative values in increasing order: binary search for the
   * largest code whose value is <= a, then round to the nearer neighbour (ties to the even code). */
  pthread_once(&e4m3_once, e4m3_init);
  int lo = 0, hi = 0x7e;
  while (lo < hi) {
    int mid = (lo + hi + 1) / 2;
    if (e4m3_pos[mid] <= a) lo = mid;
    else hi = mid - 1;
  }
  if (lo < 0x7e) {
    float below = e4m3_pos[lo], above = e4m3_pos[lo + 1];
    float db = a - below, da = above - a;
    if (da < db || (da == db && (lo & 1))) lo++;
  }
  return sign | (uint8_t)lo;
}
