/* How closely the CUDA engine's logits must follow the CPU engine's on the tiny model (test_step,
 * test_engine_mp), one row (a sequence at a step) at a time.
 *
 * The GPU attention rounds q_lat and the softmax probabilities to bf16 for the tensor cores, and the
 * MLA absorb / W_UV round their f32 inputs (mla.h; tests/cuda/test_mla.c bounds a row's op error by
 * 1.5e-2 of its rms, 6e-2 at most). Logits have std ~0.6; the estimated error over 4 layers is ~0.01 rms,
 * ~0.04 max over 4096 logits: LOGIT_TOL = 0.06 per row. A row may also move by more when a perturbation
 * this small flips one of its routed experts at a router near-tie (the tiny model routes 6 of 64
 * experts in 3 MoE layers). Measured on the CPU reference alone: rounding q_lat to bf16 moved one row
 * of 32 by 0.234 and the other 31 by at most 0.006 (the GPU, rounds 101-102 on the H200: the same row, 0.233,
 * and the others within 0.0064, rms 0.0014). Which row flips, if any, depends on the exact perturbation: the
 * former exact absorb / W_UV flipped none. So at most FLIP_ROWS rows may exceed LOGIT_TOL, each by at most
 * FLIP_TOL, the rows within LOGIT_TOL must agree to an rms of LOGIT_TOL / 4, and no logit may be non-finite. */
#ifndef PZ_TEST_LOGIT_AGREE_H
#define PZ_TEST_LOGIT_AGREE_H
#include <math.h>
#include <stdint.h>

#define LOGIT_TOL 0.06f
#define FLIP_ROWS 1
#define FLIP_TOL 0.3f

typedef struct logit_agree {
  double max_in;  /* largest |diff| over the rows within LOGIT_TOL */
  double max_all; /* largest |diff| over every row */
  double ss_in;   /* Σ diff² over the rows within LOGIT_TOL */
  int64_t n_in;   /* logits in those rows */
  int rows, flipped;
  int64_t nonfinite; /* non-finite logits of either engine: none allowed */
} logit_agree;

/* Adds one row of vocab logits (ref: the CPU's, got: the GPU's); returns 1 when it is within LOGIT_TOL. */
static inline int logit_agree_row(logit_agree *a, const float *ref, const float *got, int64_t vocab) {
  double mx = 0, ss = 0;
  for (int64_t j = 0; j < vocab; j++) {
    if (!isfinite(ref[j]) || !isfinite(got[j])) { /* counted apart: a NaN would not stay the maximum */
      a->nonfinite++;
      continue;
    }
    const double d = fabs((double)ref[j] - got[j]);
    if (d > mx) mx = d;
    ss += d * d;
  }
  a->rows++;
  if (mx > a->max_all) a->max_all = mx;
  if (mx <= LOGIT_TOL) {
    if (mx > a->max_in) a->max_in = mx;
    a->ss_in += ss;
    a->n_in += vocab;
    return 1;
  }
  a->flipped++;
  return 0;
}
static inline double logit_agree_rms(const logit_agree *a) { return sqrt(a->ss_in / (double)(a->n_in > 0 ? a->n_in : 1)); }
/* The bounds above hold and every logit is finite. */
static inline int logit_agree_ok(const logit_agree *a) {
  return a->nonfinite == 0 && a->flipped <= FLIP_ROWS && a->max_all <= FLIP_TOL && logit_agree_rms(a) <= LOGIT_TOL / 4;
}
#endif
