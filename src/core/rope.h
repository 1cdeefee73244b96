/* RoPE constants of the DeepSeek-V2 family (YaRN) and of the GQA layouts (llama3, yarn, longrope)
 * (host math, shared by the CPU reference and the CUDA backend): inverse frequencies, the cos/sin
 * multiplier and the MLA softmax scale. */
#ifndef PZ_CORE_ROPE_H
#define PZ_CORE_ROPE_H
#include <stdbool.h>
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

/* Phi-3 "longrope" inverse frequencies (transformers' _compute_longrope_parameters):
 *   inv_freq_i = 1 / (f_i * theta^(2i/dim)), f = rp->long_factor when use_long, else rp->short_factor
 * (f32 values, as transformers' torch.tensor(..., float32) holds them). Written to inv_freq[dim/2] in
 * transformers' float32 steps, each rounded to f32: s = f32(2i) / f32(dim), p = f32(theta^s) (pow in
 * double), f32(f_i * p), f32(1 / that); so the values equal transformers' bit for bit wherever torch's
 * f32 pow is correctly rounded (it may be one ulp off: 1 of 96 entries for Phi-3-mini-128k-like factors
 * under transformers 5.25 / torch 2.15 on x86), where computing in double and rounding once would be up
 * to 4 ulps off. dim/2 must not exceed rp->n_factors <= PZ_ROPE_MAX_FACTORS (the config reader makes it
 * equal; the GQA ops refuse other counts). */
void pz_rope_longrope_inv_freq(const pz_rope_params *rp, int64_t dim, bool use_long, float *inv_freq);

/* inv_freq[dim/2] for rp->type: DEFAULT theta^(-2i/dim), YARN pz_ref_yarn_inv_freq, LLAMA3
 * pz_ref_llama3_inv_freq, LONGROPE pz_rope_longrope_inv_freq with the short factors. The GQA layouts'
 * one entry point (host math for both backends); it holds for positions below pz_rope_long_from. */
void pz_rope_inv_freq(const pz_rope_params *rp, int64_t dim, float *inv_freq);

/* The table for positions >= pz_rope_long_from(rp): LONGROPE's long factors
 * (pz_rope_longrope_inv_freq), else the same table as pz_rope_inv_freq. */
void pz_rope_inv_freq_long(const pz_rope_params *rp, int64_t dim, float *inv_freq);

/* The first position that rotates by pz_rope_inv_freq_long's table: LONGROPE's
 * original_max_position_embeddings (clamped to INT32_MAX), INT32_MAX (none) for the other types.
 * Per position, as transformers' longrope update decides for one token decoded with a KV cache
 * (long factors once max(position_ids) + 1 > original_max_position_embeddings); keys already cached
 * keep the rotation they were stored with. */
int32_t pz_rope_long_from(const pz_rope_params *rp);

/* The cos/sin multiplier of a GQA layout's RoPE: pz_ref_yarn_cos_sin_mscale for YARN (Hugging
 * Face's yarn attention_factor), rp->attention_factor for LONGROPE, 1 for DEFAULT and LLAMA3. */
float pz_rope_cos_sin_mscale(const pz_rope_params *rp);

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
