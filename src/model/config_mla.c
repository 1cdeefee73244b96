/* config.json of the DeepSeek-V2 family (MLA: deepseek_v2, deepseek_v3, kimi_k2 and configs without
 * model_type): the fields, their defaults per model_type, YaRN rope_scaling and the consistency checks. */
#include "model/config.h"
#include "model/config_impl.h"
#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>

/* The MLA layouts' RoPE: rope_scaling (null or yarn), or transformers 5's rope_parameters (as
 * save_pretrained writes it: rope_theta inside, rope_type "default" or "yarn"); the two are not both
 * given. Sets c->rope.type (theta and the yarn defaults are set by the caller). */
static pz_status parse_rope_scaling(const reader *r, pz_model_config *c) {
  const cJSON *rs, *rp;
  const char *name;
  c->rope.type = PZ_ROPE_DEFAULT;
  PZ_CHECK(pz_cfg_rope_object(r, &c->rope.theta, &rs, &rp, &name));
  if (!rs) return PZ_OK;
  char fn[8][64];
  static const char *const keys[8] = {"type", "factor", "original_max_position_embeddings", "beta_fast", "beta_slow",
                                      "mscale", "mscale_all_dim", "rope_type"};
  for (int i = 0; i < 8; i++) snprintf(fn[i], sizeof fn[i], "%s.%s", name, keys[i]);
  const char *f_type = fn[rp ? 7 : 0]; /* rope_parameters names rope_type, rope_scaling the legacy type */
  const cJSON *ty = cJSON_GetObjectItemCaseSensitive(rs, "type");
  if (!ty) ty = cJSON_GetObjectItemCaseSensitive(rs, "rope_type");
  if (!ty) return pz_error(PZ_ERR_CONFIG, "config %s: required field \"%s\" is missing", r->src, f_type);
  if (!cJSON_IsString(ty)) return pz_cfg_type_err(r, f_type, "a string", ty);
  if (rp && !strcmp(ty->valuestring, "default")) return PZ_OK; /* plain RoPE at rope_theta */
  if (strcmp(ty->valuestring, "yarn"))
    return pz_error(PZ_ERR_CONFIG, "config %s: field \"%s\" is \"%s\", supported: yarn%s", r->src, f_type,
                    ty->valuestring, rp ? ", default" : "");
  /* Every message names its field by the dotted path (rope_scaling.factor). */
  pz_rope_params *p = &c->rope;
  p->beta_fast = 32.f;
  p->beta_slow = 1.f;
  p->mscale = 1.f;
  p->mscale_all_dim = 0.f;
  PZ_CHECK(pz_cfg_get_float_in(r, rs, "factor", fn[1], true, &p->factor));
  if (!(p->factor >= 1.f)) return pz_error(PZ_ERR_CONFIG, "config %s: field \"%s\" must be >= 1", r->src, fn[1]);
  int64_t orig = 0;
  PZ_CHECK(pz_cfg_get_int_in(r, rs, "original_max_position_embeddings", fn[2], true, false, 1, &orig));
  p->original_max_position_embeddings = orig;
  PZ_CHECK(pz_cfg_get_float_in(r, rs, "beta_fast", fn[3], false, &p->beta_fast));
  PZ_CHECK(pz_cfg_get_float_in(r, rs, "beta_slow", fn[4], false, &p->beta_slow));
  PZ_CHECK(pz_cfg_get_float_in(r, rs, "mscale", fn[5], false, &p->mscale));
  PZ_CHECK(pz_cfg_get_float_in(r, rs, "mscale_all_dim", fn[6], false, &p->mscale_all_dim));
  p->type = PZ_ROPE_YARN;
  /* YaRN's correction range takes log(orig / (2 pi beta)): beta <= 0 gave NaN frequencies (token
   * 0 everywhere); transformers fails on these too. */
  if (!(p->beta_fast > 0.f) || !(p->beta_slow > 0.f))
    return pz_error(PZ_ERR_CONFIG, "config %s: fields \"%s\" (%g) and \"%s\" (%g) must be > 0", r->src, fn[3],
                    p->beta_fast, fn[4], p->beta_slow);
  /* beta_fast bounds the fast (high-frequency) end of the correction range, beta_slow the slow
   * end: transformers' rope_config_validation flags beta_fast < beta_slow (the range inverted). */
  if (p->beta_fast < p->beta_slow)
    return pz_error(PZ_ERR_CONFIG, "config %s: field \"%s\" (%g) is below \"%s\" (%g); beta_fast must be >= "
                    "beta_slow (the defaults are 32 and 1)", r->src, fn[3], p->beta_fast, fn[4], p->beta_slow);
  return PZ_OK;
}

/* Defaults of transformers' DeepseekV3Config (also taken for kimi_k2, the same layout) and
 * DeepseekV2Config (transformers 5.24): save_pretrained writes only the fields that differ from
 * them (to_json_file(use_diff=True)), so a field it leaves out has this value, not "missing".
 * DeepseekV3 has no topk_method / scoring_func: it always routes noaux_tc over sigmoid scores;
 * DeepseekV2 routes over softmax scores, topk_method "greedy" by default. Configs without a
 * model_type (DeepSeek's own files) keep every dimension required and the greedy / softmax
 * defaults of DeepSeek's remote code. */
typedef struct mla_defaults {
  int64_t vocab, hidden, inter, moe_inter, layers, heads, n_shared, n_routed, kv_lora, q_lora, rope, v, nope;
  int64_t n_group, topk_group, topk, first_dense, max_pos;
  float rsf;
  bool norm_topk;
  int topk_method, scoring; /* indices of pz_topk_method / pz_scoring */
} mla_defaults;
static const mla_defaults mla_v3_defaults = {129280, 7168, 18432, 2048, 61, 128, 1, 256, 512, 1536, 64, 128, 128,
                                             8, 4, 8, 3, 4096, 2.5f, true, 2, 1};
static const mla_defaults mla_v2_defaults = {102400, 4096, 11008, 1407, 32, 32, 2, 64, 512, 1536, 64, 128, 128,
                                             1, 1, 0 /* None: required */, 0, 2048, 1.0f, false, 0, 0};
/* Mistral4Config (transformers 5.25; Mistral-Small-4): DeepSeek's MLA with a router of its own (softmax scores,
 * groups chosen by their top-2 sums, norm_topk_prob); no topk_method / scoring_func fields. */
static const mla_defaults mla_mistral4_defaults = {131072, 4096, 12288, 2048, 36, 32, 1, 128, 256, 1024, 64, 128, 64,
                                                   1, 1, 4, 0, 1048576, 1.0f, true, 0, 0};

/* What of a mistral4 config prezero cannot run as read: Mistral4Config fills in YaRN (factor 128) and Llama 4's query
 * scaling when the RoPE object is absent, and its router picks groups by the top-2 sum of softmax scores, which none of
 * prezero's topk_methods does (greedy ignores the groups); it has no topk_method / scoring_func fields, so another
 * value there would be run by prezero and ignored by transformers. */
static pz_status check_mistral4(const reader *r, const pz_model_config *c) {
  const cJSON *rope, *from;
  const char *name;
  float theta = 0.f;
  PZ_CHECK(pz_cfg_rope_object(r, &theta, &rope, &from, &name));
  if (!rope)
    return pz_error(PZ_ERR_CONFIG, "config %s: model_type mistral4 without \"rope_parameters\": Mistral4Config then fills "
                    "in YaRN (factor 128) and Llama 4's query scaling, which prezero does not assume; give the RoPE "
                    "object", r->src);
  if (c->n_group > 1 && c->topk_group < c->n_group)
    return pz_error(PZ_ERR_CONFIG, "config %s: field \"n_group\" is %lld with topk_group %lld; model_type mistral4 "
                    "chooses groups by the top-2 sum of softmax scores, a router prezero does not have (n_group 1 or "
                    "topk_group = n_group runs)", r->src, (long long)c->n_group, (long long)c->topk_group);
  if (c->topk_method != PZ_TOPK_GREEDY || c->scoring_func != PZ_SCORE_SOFTMAX)
    return pz_error(PZ_ERR_CONFIG, "config %s: fields \"topk_method\" / \"scoring_func\" say other than greedy / softmax; "
                    "model_type mistral4 has neither field (transformers routes by softmax scores); remove them", r->src);
  return PZ_OK;
}

/* An MLA config of another model_type (its MLA fields make it one): fields of other MLA families that change the math
 * and that the DeepSeek layout has no place for are refused rather than dropped: MiniCPM3's muP scales, LongCat-Flash's
 * zero-computation experts, a per-layer dense / MoE list (GLM-4.7-Flash's glm4_moe_lite, axk1: mlp_layer_types),
 * attention kinds per layer (layer_types other than full attention), layers without RoPE and soft-capped logits. And a
 * model_type prezero has no defaults for, without DeepSeek's remote code (auto_map), that does not state its routing
 * (scoring_func): its transformers class routes as it defines (glm4_moe_lite: sigmoid with a correction bias), not as
 * DeepSeek's remote code defaults (greedy over softmax), so it is refused. */
static pz_status check_other_mla(const reader *r, const pz_model_config *c) {
  static const struct { const char *field, *what; } fields[] = {
      {"scale_emb", "MiniCPM3's scaled embeddings"},
      {"scale_depth", "MiniCPM3's scaled residuals"},
      {"dim_model_base", "MiniCPM3's scaled logits"},
      {"zero_expert_num", "LongCat-Flash's zero-computation experts"},
      {"mlp_layer_types", "a per-layer choice of dense MLP or MoE"},
      {"no_rope_layers", "layers without RoPE"},
      {"final_logit_softcapping", "soft-capped logits"},
      {"kv_source_layers", "layers that share another layer's KV cache"},
  };
  const char *mt = c->model_type[0] ? c->model_type : "(none)";
  for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(r->root, fields[i].field);
    if (it && !cJSON_IsNull(it))
      return pz_error(PZ_ERR_CONFIG, "config %s: field \"%s\" (%s, model_type %s) is not supported: prezero runs the "
                      "DeepSeek MLA layout without it", r->src, fields[i].field, fields[i].what, mt);
  }
  const cJSON *lt = cJSON_GetObjectItemCaseSensitive(r->root, "layer_types");
  if (lt && !cJSON_IsNull(lt)) {
    if (!cJSON_IsArray(lt)) return pz_cfg_type_err(r, "layer_types", "a list of strings", lt);
    for (const cJSON *e = lt->child; e; e = e->next)
      if (!cJSON_IsString(e) || strcmp(e->valuestring, "full_attention"))
        return pz_error(PZ_ERR_CONFIG, "config %s: field \"layer_types\" has an entry other than \"full_attention\" "
                        "(model_type %s); prezero's MLA layers are all full attention", r->src, mt);
  }
  return PZ_OK;
}

/* The routing part of check_other_mla, once the experts are read. */
static pz_status check_other_routing(const reader *r, const pz_model_config *c, bool known) {
  if (!known && c->model_type[0] && c->n_routed_experts > 0 && !cJSON_GetObjectItemCaseSensitive(r->root, "auto_map") &&
      !cJSON_GetObjectItemCaseSensitive(r->root, "scoring_func"))
    return pz_error(PZ_ERR_CONFIG, "config %s: model_type \"%s\" is not supported: an MLA layout whose transformers class "
                    "routes its experts as it defines, and the config states no scoring_func / topk_method for prezero "
                    "to follow; prezero runs deepseek_v2, deepseek_v3, kimi_k2 (MLA)", r->src, c->model_type);
  return PZ_OK;
}

/* The DeepSeek-V2 family (MLA): deepseek_v2, deepseek_v3, kimi_k2 and configs without model_type. */
pz_status pz_cfg_parse_mla(const reader *r, pz_model_config *c) {
  c->attn = PZ_ATTN_MLA;
  const mla_defaults *d = !strcmp(c->model_type, "deepseek_v3") || !strcmp(c->model_type, "kimi_k2") ? &mla_v3_defaults
                          : !strcmp(c->model_type, "deepseek_v2")                                    ? &mla_v2_defaults
                          : !strcmp(c->model_type, "mistral4")                                       ? &mla_mistral4_defaults
                                                                                                      : NULL;
  const bool req = d == NULL; /* dimensions are required only without a known model_type */
  PZ_CHECK(check_other_mla(r, c)); /* before the required fields: another family's config may lack them */
  if (d) {
    c->vocab_size = d->vocab; c->hidden_size = d->hidden; c->intermediate_size = d->inter;
    c->moe_intermediate_size = d->moe_inter; c->num_hidden_layers = d->layers; c->num_attention_heads = d->heads;
    c->n_routed_experts = d->n_routed; c->kv_lora_rank = d->kv_lora; c->q_lora_rank = d->q_lora;
    c->qk_rope_head_dim = d->rope; c->v_head_dim = d->v; c->qk_nope_head_dim = d->nope;
    c->num_experts_per_tok = d->topk; c->max_position_embeddings = d->max_pos;
  }
  /* Both LoRA ranks missing: name both (the reader below would name only q_lora_rank). */
  if (req && !cJSON_GetObjectItemCaseSensitive(r->root, "q_lora_rank") &&
      !cJSON_GetObjectItemCaseSensitive(r->root, "kv_lora_rank"))
    return pz_error(PZ_ERR_CONFIG, "config %s: required fields \"kv_lora_rank\" and \"q_lora_rank\" are missing (the MLA "
                    "ranks, q_lora_rank null for V2-Lite)", r->src);
  PZ_CHECK(pz_cfg_get_trunk(r, req, c));
  /* transformers' DeepseekV2/V3 attention: q_lora_rank None means q_proj (no q LoRA), any other
   * value is the width of q_a_proj, so 0 is not "none" but an empty layer: refused. */
  const cJSON *qlr = cJSON_GetObjectItemCaseSensitive(r->root, "q_lora_rank");
  if (cJSON_IsNumber(qlr) && qlr->valuedouble == 0)
    return pz_error(PZ_ERR_CONFIG, "config %s: field \"q_lora_rank\" is 0, must be >= 1; use null for no q LoRA "
                    "(q_proj, as DeepSeek-V2-Lite)", r->src);
  PZ_CHECK(pz_cfg_get_int(r, "q_lora_rank", req, true, 1, &c->q_lora_rank));
  PZ_CHECK(pz_cfg_get_int(r, "kv_lora_rank", req, false, 1, &c->kv_lora_rank));
  PZ_CHECK(pz_cfg_get_int(r, "qk_nope_head_dim", req, false, 1, &c->qk_nope_head_dim));
  PZ_CHECK(pz_cfg_get_int(r, "qk_rope_head_dim", req, false, 2, &c->qk_rope_head_dim));
  PZ_CHECK(pz_cfg_get_int(r, "v_head_dim", req, false, 1, &c->v_head_dim));
  PZ_CHECK(pz_cfg_get_int(r, "n_routed_experts", req, true, 0, &c->n_routed_experts));
  c->n_shared_experts = d ? d->n_shared : 0;
  PZ_CHECK(pz_cfg_get_int(r, "n_shared_experts", false, true, 0, &c->n_shared_experts));
  PZ_CHECK(pz_cfg_get_int(r, "num_experts_per_tok", req || !d->topk, true, 0, &c->num_experts_per_tok));
  PZ_CHECK(pz_cfg_get_int(r, "moe_intermediate_size", req, false, 1, &c->moe_intermediate_size));
  PZ_CHECK(pz_cfg_get_int(r, "intermediate_size", req, false, 1, &c->intermediate_size));
  c->first_k_dense_replace = d ? d->first_dense : 0;
  PZ_CHECK(pz_cfg_get_int(r, "first_k_dense_replace", false, false, 0, &c->first_k_dense_replace));
  c->moe_layer_freq = 1;
  PZ_CHECK(pz_cfg_get_int(r, "moe_layer_freq", false, false, 1, &c->moe_layer_freq));
  /* DeepSeek's remote code (a config with auto_map, or without model_type) puts experts on every
   * moe_layer_freq-th layer from first_k_dense_replace; transformers' own DeepseekV2 / V3 classes
   * ignore the field and put them on every layer from there, so a save_pretrained checkpoint has them
   * there: follow the code that wrote the config. */
  if (d && !cJSON_GetObjectItemCaseSensitive(r->root, "auto_map")) c->moe_layer_freq = 1;
  c->n_group = d ? d->n_group : 1;
  PZ_CHECK(pz_cfg_get_int(r, "n_group", false, true, 1, &c->n_group));
  if (c->n_group == 0) c->n_group = 1;
  c->topk_group = d ? d->topk_group : 1;
  PZ_CHECK(pz_cfg_get_int(r, "topk_group", false, true, 1, &c->topk_group));
  if (c->topk_group == 0) c->topk_group = 1;
  static const char *const methods[] = {"greedy", "group_limited_greedy", "noaux_tc"};
  int m = d ? d->topk_method : 0;
  PZ_CHECK(pz_cfg_get_enum(r, "topk_method", methods, 3, &m));
  c->topk_method = (pz_topk_method)m;
  static const char *const scorings[] = {"softmax", "sigmoid"};
  int s = d ? d->scoring : 0;
  PZ_CHECK(pz_cfg_get_enum(r, "scoring_func", scorings, 2, &s));
  c->scoring_func = (pz_scoring)s;
  c->norm_topk_prob = d ? d->norm_topk : false;
  PZ_CHECK(pz_cfg_get_bool(r, "norm_topk_prob", &c->norm_topk_prob));
  c->routed_scaling_factor = d ? d->rsf : 1.f;
  PZ_CHECK(pz_cfg_get_float(r, r->root, "routed_scaling_factor", false, &c->routed_scaling_factor));
  PZ_CHECK(pz_cfg_get_int(r, "vocab_size", req, false, 1, &c->vocab_size));
  PZ_CHECK(pz_cfg_get_int(r, "max_position_embeddings", req, false, 1, &c->max_position_embeddings));
  c->rms_norm_eps = 1e-6f;
  PZ_CHECK(pz_cfg_get_float(r, r->root, "rms_norm_eps", false, &c->rms_norm_eps));
  /* DeepseekV2/V3 MLPs and experts apply ACT2FN[hidden_act] (default "silu"); prezero's are SiLU. */
  static const char *const acts[] = {"silu"};
  int act = 0;
  PZ_CHECK(pz_cfg_get_enum(r, "hidden_act", acts, 1, &act));
  c->rope.theta = 10000.f;
  PZ_CHECK(pz_cfg_get_float(r, r->root, "rope_theta", false, &c->rope.theta));
  c->rope.factor = 1.f;
  c->rope.original_max_position_embeddings = c->max_position_embeddings;
  c->rope.beta_fast = 32.f;
  c->rope.beta_slow = 1.f;
  c->rope.mscale = 1.f;
  c->rope.mscale_all_dim = 0.f;
  PZ_CHECK(parse_rope_scaling(r, c));
  PZ_CHECK(pz_cfg_llama4_scaling(r, c));
  /* transformers' DeepseekV3 reads rope_interleave (default true: the rotated pairs are adjacent, as
   * prezero's kernels and DeepSeek's checkpoints have them) and attention_bias (default false: biases
   * on q_a / q / kv_a / o); prezero has no kernels for the other values. */
  bool interleave = true, abias = false;
  PZ_CHECK(pz_cfg_get_bool(r, "rope_interleave", &interleave));
  if (!interleave)
    return pz_error(PZ_ERR_CONFIG, "config %s: field \"rope_interleave\" is false; prezero's MLA rotates interleaved "
                    "pairs only (rope_interleave true, DeepSeek's layout)", r->src);
  PZ_CHECK(pz_cfg_get_bool(r, "attention_bias", &abias));
  if (abias)
    return pz_error(PZ_ERR_CONFIG, "config %s: field \"attention_bias\" is true; prezero's MLA projections have no "
                    "biases (attention_bias false, DeepSeek's layout)", r->src);

  if (d == &mla_mistral4_defaults) PZ_CHECK(check_mistral4(r, c));
  PZ_CHECK(check_other_routing(r, c, d != NULL));

  /* Consistency of the values read. */
  if (c->qk_rope_head_dim % 2)
    return pz_error(PZ_ERR_CONFIG, "config %s: field \"qk_rope_head_dim\" must be even (RoPE rotates pairs), got %lld",
                    r->src, (long long)c->qk_rope_head_dim);
  if (!(c->rms_norm_eps > 0.f)) return pz_error(PZ_ERR_CONFIG, "config %s: field \"rms_norm_eps\" must be > 0", r->src);
  if (!(c->rope.theta > 0.f)) return pz_error(PZ_ERR_CONFIG, "config %s: field \"rope_theta\" must be > 0", r->src);
  if (c->rope.factor > 1.f && c->rope.theta == 1.f) /* YaRN divides by log(rope_theta) */
    return pz_error(PZ_ERR_CONFIG, "config %s: field \"rope_theta\" must not be 1 with YaRN rope_scaling", r->src);
  /* n_routed_experts 0 (not null, which means dense, as in transformers) with experts per token:
   * an MoE layout without experts, not a dense model (it ran as one). */
  if (c->first_k_dense_replace < c->num_hidden_layers && c->n_routed_experts == 0 && c->num_experts_per_tok > 0 &&
      cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(r->root, "n_routed_experts")))
    return pz_error(PZ_ERR_CONFIG, "config %s: field \"num_experts_per_tok\" (%lld) must be in 1..n_routed_experts (0); "
                    "give n_routed_experts, or null for both fields for a dense model", r->src,
                    (long long)c->num_experts_per_tok);
  if (c->first_k_dense_replace < c->num_hidden_layers && c->n_routed_experts > 0) {
    if (c->num_experts_per_tok < 1 || c->num_experts_per_tok > c->n_routed_experts)
      return pz_error(PZ_ERR_CONFIG, "config %s: field \"num_experts_per_tok\" (%lld) must be in 1..n_routed_experts (%lld)",
                      r->src, (long long)c->num_experts_per_tok, (long long)c->n_routed_experts);
    PZ_CHECK(pz_cfg_check_group_routing(r, c, 1));
  }
  return PZ_OK;
}
