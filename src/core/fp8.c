/* FP8 E4M3 decoding and block dequantisation (fp8.h). */
#include "core/fp8.h"
#include <math.h>
#include <pthread.h>

static float lut[256];
static pthread_once_t lut_once = PTHREAD_ONCE_INIT;

float pz_fp8_e4m3_to_f32(uint8_t b) {
  const int sign = b >> 7, e = (b >> 3) & 0xf, m = b & 7;
  if (e == 0xf && m == 7) return NAN;
  float v = e == 0 ? ldexpf((float)m, -9) /* m/8 * 2^-6 */ : ldexpf((float)(8 + m), e - 10); /* (1+m/8) * 2^(e-7) */
  return sign ? -v : v;
}

static void lut_init(void) {
  for (int i = 0; i < 256; i++) lut[i] = pz_fp8_e4m3_to_f32((uint8_t)i);
}

void pz_fp8_dequant_row(const uint8_t *w, int64_t cols, const float *scale_inv, int64_t scale_cols,
                        int64_t bm, int64_t bn, int64_t row, int64_t c0, int64_t n, float *out) {
  pthread_once(&lut_once, lut_init);
  const uint8_t *src = w + row * cols + c0;
  const float *srow = scale_inv + (row / bm) * scale_cols;
  /* One scale per run of columns inside a block (no division per element). */
  for (int64_t j = 0; j < n;) {
    const int64_t blk = (c0 + j) / bn, end = (blk + 1) * bn - c0 < n ? (blk + 1) * bn - c0 : n;
    const float sc = srow[blk];
    for (; j < end; j++) out[j] = lut[src[j]] * sc;
  }
}
