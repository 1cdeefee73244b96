/* RoPE constants of the DeepSeek-V2 family (YaRN) and of the GQA layouts (llama3, yarn, longrope):
 * inverse frequencies, the cos/sin and softmax mscale. Model math shared by every backend (formulas
 * and sources in core/rope.h). */
#include "core/rope.h"
#include <math.h>
#include <stdint.h>

#ifndef M_PI
#define M_PI 3.14159265358979323846
#endif

double pz_ref_yarn_get_mscale(double factor, double ms) {
  if (factor <= 1.0) return 1.0;
  return 0.1 * ms * log(factor) + 1.0;
}

static double yarn_corr_dim(double rot, double dim, double base, double orig_max) {
  return (dim * log(orig_max / (rot * 2.0 * M_PI))) / (2.0 * log(base));
}

void pz_ref_yarn_inv_freq(const pz_rope_params *rp, int64_t dim, float *inv_freq) {
  double base = rp->theta > 0 ? rp->theta : 10000.0;
  int64_t half = dim / 2;
  if (rp->factor <= 1.0f) {
    for (int64_t i = 0; i < half; i++) inv_freq[i] = (float)(1.0 / pow(base, (double)(2 * i) / (double)dim));
    return;
  }
  double orig = rp->original_max_position_embeddings > 0 ? (double)rp->original_max_position_embeddings : 4096.0;
  double low = floor(yarn_corr_dim(rp->beta_fast, (double)dim, base, orig));
  double high = ceil(yarn_corr_dim(rp->beta_slow, (double)dim, base, orig));
  if (low < 0) low = 0;
  if (high > (double)(dim - 1)) high = (double)(dim - 1);
  if (low == high) high += 0.001;
  for (int64_t i = 0; i < half; i++) {
    double extra = 1.0 / pow(base, (double)(2 * i) / (double)dim);
    double inter = extra / (double)rp->factor;
    double ramp = ((double)i - low) / (high - low);
    if (ramp < 0) ramp = 0;
    if (ramp > 1) ramp = 1;
    double mask = 1.0 - ramp;
    inv_freq[i] = (float)(inter * (1.0 - mask) + extra * mask);
  }
}

float pz_ref_yarn_cos_sin_mscale(const pz_rope_params *rp) {
  return (float)(pz_ref_yarn_get_mscale(rp->factor, rp->mscale) /
                 pz_ref_yarn_get_mscale(rp->factor, rp->mscale_all_dim));
}

float pz_ref_mla_softmax_scale(int64_t qk_nope_head_dim, int64_t qk_rope_head_dim,
                               const pz_rope_params *rp) {
  double s = 1.0 / sqrt((double)(qk_nope_head_dim + qk_rope_head_dim));
  if (rp && rp->mscale_all_dim != 0.0f) {
    double ms = pz_ref_yarn_get_mscale(rp->factor, rp->mscale_all_dim);
    s = s * ms * ms;
  }
  return (float)s;
}


void pz_ref_llama3_inv_freq(const pz_rope_params *rp, int64_t dim, float *inv_freq) {
  double base = rp->theta > 0 ? rp->theta : 10000.0;
  double factor = rp->factor > 0 ? rp->factor : 1.0;
  double lo = rp->low_freq_factor, hi = rp->high_freq_factor;
  double orig = rp->original_max_position_embeddings > 0 ? (double)rp->original_max_position_embeddings : 8192.0;
  double low_wl = orig / lo, high_wl = orig / hi;
  for (int64_t i = 0; i < dim / 2; i++) {
    double f = 1.0 / pow(base, (double)(2 * i) / (double)dim);
    double wl = 2.0 * M_PI / f;
    double v;
    if (wl > low_wl) v = f / factor;
    else if (wl < high_wl || hi == lo) v = f;
    else {
      double s = (orig / wl - lo) / (hi - lo);
      v = (1.0 - s) * f / factor + s * f;
    }
    inv_freq[i] = (float)v;
  }
}

void pz_rope_longrope_inv_freq(const pz_rope_params *rp, int64_t dim, bool use_long, float *inv_freq) {
  const double base = rp->theta > 0 ? rp->theta : 10000.0;
  const float *f = use_long ? rp->long_factor : rp->short_factor;
  for (int64_t i = 0; i < dim / 2; i++) { /* transformers' float32 steps, each rounded to f32 */
    const float s = (float)(2 * i) / (float)dim;
    const float p = (float)pow(base, (double)s);
    const float fp = f[i] * p;
    inv_freq[i] = 1.0f / fp;
  }
}

void pz_rope_inv_freq_long(const pz_rope_params *rp, int64_t dim, float *inv_freq) {
  if (rp->type == PZ_ROPE_LONGROPE) pz_rope_longrope_inv_freq(rp, dim, true, inv_freq);
  else pz_rope_inv_freq(rp, dim, inv_freq);
}

int32_t pz_rope_long_from(const pz_rope_params *rp) {
  if (rp->type != PZ_ROPE_LONGROPE) return INT32_MAX;
  return rp->original_max_position_embeddings < INT32_MAX ? (int32_t)rp->original_max_position_embeddings : INT32_MAX;
}

float pz_rope_cos_sin_mscale(const pz_rope_params *rp) {
  if (rp->type == PZ_ROPE_YARN) return pz_ref_yarn_cos_sin_mscale(rp);
  return rp->type == PZ_ROPE_LONGROPE ? rp->attention_factor : 1.0f;
}

void pz_rope_inv_freq(const pz_rope_params *rp, int64_t dim, float *inv_freq) {
  if (rp->type == PZ_ROPE_LONGROPE) { pz_rope_longrope_inv_freq(rp, dim, false, inv_freq); return; }
  if (rp->type == PZ_ROPE_LLAMA3) { pz_ref_llama3_inv_freq(rp, dim, inv_freq); return; }
  if (rp->type == PZ_ROPE_YARN) { pz_ref_yarn_inv_freq(rp, dim, inv_freq); return; }
  double base = rp->theta > 0 ? rp->theta : 10000.0;
  for (int64_t i = 0; i < dim / 2; i++) inv_freq[i] = (float)(1.0 / pow(base, (double)(2 * i) / (double)dim));
}
