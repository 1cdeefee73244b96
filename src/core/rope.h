/* RoPE / YaRN constants of the DeepSeek-V2 family (host math, shared by the CPU reference and
 * the CUDA backend): inverse frequencies, the cos/sin multiplier and the MLA softmax scale. */
#ifndef PZ_CORE_ROPE_H
#define PZ_CORE_ROPE_H
#include <stdint.h>
#include "core/ir.h"
#ifdef __cplusplus
extern "C" {
#endif

/* YaRN inverse frequencies for rotary dim `dim` (even), written to inv_freq[dim/2]:
 * DeepSeek-V2 modeling (huggingface deepseek-ai/DeepSeek-V2 modeling_deepseek.py,
 * DeepseekV2YarnRotaryEmbedding):
 *   extra_i = 1/theta^(2i/dim), inter_i = extra_i / factor,
 *   corr(r) = dim*ln(orig_max/(r*2π)) / (2 ln theta),
 *   low = max(floor(corr(beta_fast)), 0), high = min(ceil(corr(beta_slow)), dim-1),
 *   ramp_i = clamp((i - low)/(high - low), 0, 1)  (high += 0.001 when low == high),
 *   mask_i = 1 - ramp_i, inv_freq_i = inter_i*(1 - mask_i) + extra_i*mask_i.
 * factor <= 1 gives plain RoPE (inv_freq_i = extra_i). Computed in double, rounded to f32
 * once (PyTorch computes in f32; values may differ from it by an ulp). */
void pz_ref_yarn_inv_freq(const pz_rope_params *rp, int64_t dim, float *inv_freq);

/* Llama 3.1 "llama3" inverse frequencies (transformers' _compute_llama3_parameters): with
 * base_i = theta^(-2i/dim), wavelen_i = 2π / base_i, low_wl = orig_max / low_freq_factor,
 * high_wl = orig_max / high_freq_factor:
 *   wavelen_i > low_wl:  base_i / factor;   wavelen_i < high_wl: base_i;
 *   otherwise, s = (orig_max / wavelen_i - low_freq_factor) / (high_freq_factor - low_freq_factor):
 *   (1 - s) * base_i / factor + s * base_i.
 * Written to inv_freq[dim/2]; computed in double, rounded to f32 once. */
void pz_ref_llama3_inv_freq(const pz_rope_params *rp, int64_t dim, float *inv_freq);

/* inv_freq[dim/2] for rp->type: DEFAULT theta^(-2i/dim), YARN pz_ref_yarn_inv_freq, LLAMA3
 * pz_ref_llama3_inv_freq. The GQA layouts' one entry point (host math for both backends). */
void pz_rope_inv_freq(const pz_rope_params *rp, int64_t dim, float *inv_freq);

/* yarn_get_mscale(factor, ms) = factor <= 1 ? 1 : 0.1*ms*ln(factor) + 1 (DeepSeek-V2). */
double pz_ref_yarn_get_mscale(double factor, double ms);

/* cos/sin multiplier: get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim). */
float pz_ref_yarn_cos_sin_mscale(const pz_rope_params *rp);

/* MLA softmax scale: (nope+rope)^-0.5 * m², m = get_mscale(factor, mscale_all_dim) when
 * mscale_all_dim != 0 (DeepseekV2Attention.__init__), else (nope+rope)^-0.5. */
float pz_ref_mla_softmax_scale(int64_t qk_nope_head_dim, int64_t qk_rope_head_dim,
                               const pz_rope_params *rp);

#ifdef __cplusplus
}
#endif
#endif
