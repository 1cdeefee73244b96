/* config.json of the GQA families (llama, mistral, qwen2, qwen3, qwen3_moe, mixtral, glm4_moe, phi3, dots1): their
 * transformers class defaults, the RoPE variants (default, llama3, yarn; phi3's LongRoPE in config_longrope.c), the
 * MoE fields, and the refusal of what prezero does not run (other families' fields; the sliding windows:
 * config_window.c). */
#include "model/config.h"
#include "model/config_impl.h"
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

/* The GQA families and the defaults of their Hugging Face config classes (LlamaConfig, Qwen2Config,
 * Qwen3Config, Qwen3MoeConfig, MixtralConfig, MistralConfig, Glm4MoeConfig, Phi3Config, Dots1Config) for the optional
 * fields prezero reads. Mistral (MistralForCausalLM) is Llama's layout and names without biases, every layer
 * sliding by its window. Phi-3 (Phi3ForCausalLM) is Llama's math with fused qkv_proj / gate_up_proj tensors.
 * dots.llm1 (Dots1ForCausalLM) is Qwen3's attention with DeepSeek-V3's MoE. Which layers slide:
 * pz_cfg_parse_gqa_window (config_window.c). */
static const struct {
  const char *model_type;
  int64_t kv_heads;       /* num_key_value_heads when absent (0: num_attention_heads) */
  int64_t head_dim;       /* head_dim when absent or null (0: hidden_size / num_attention_heads) */
  float rope_theta, rms_norm_eps;
  bool qk_norm;           /* q_norm / k_norm per head (Qwen3) */
  bool sliding_flag;      /* use_sliding_window gates sliding_window (Qwen); else sliding_window alone */
  int64_t sliding_window; /* sliding_window when absent (0: none; MistralConfig, the Qwen classes: 4096) */
} gqa_fam[FAM_COUNT] = {
    [FAM_LLAMA] = {"llama", 0, 0, 10000.f, 1e-6f, false, false, 0},
    [FAM_QWEN2] = {"qwen2", 32, 0, 10000.f, 1e-6f, false, true, 4096},
    [FAM_QWEN3] = {"qwen3", 32, 128, 10000.f, 1e-6f, true, true, 4096},
    [FAM_QWEN3_MOE] = {"qwen3_moe", 4, 0, 10000.f, 1e-6f, true, true, 4096},
    [FAM_MIXTRAL] = {"mixtral", 8, 0, 1000000.f, 1e-5f, false, false, 0},
    [FAM_MISTRAL] = {"mistral", 8, 0, 10000.f, 1e-6f, false, false, 4096},
    [FAM_GLM4_MOE] = {"glm4_moe", 8, 0, 10000.f, 1e-5f, false, false, 0}, /* qk_norm: use_qk_norm */
    [FAM_PHI3] = {"phi3", 0, 0, 10000.f, 1e-5f, false, false, 0},
    [FAM_DOTS1] = {"dots1", 32, 0, 10000.f, 1e-6f, true, false, 4096},
};

int pz_cfg_gqa_family_of(const char *model_type) {
  for (int f = 0; f < FAM_COUNT; f++)
    if (!strcmp(model_type, gqa_fam[f].model_type)) return f;
  return -1;
}

/* Float `key` of obj where null reads as absent (*v keeps its default). */
static pz_status get_float_or_null(const reader *r, const cJSON *obj, const char *key, const char *field, float *v) {
  const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, key);
  if (!it || cJSON_IsNull(it)) return PZ_OK;
  return pz_cfg_get_float_in(r, obj, key, field, false, v);
}

/* YaRN of a GQA layout (Qwen's long-context setting, rope_scaling {"type" or "rope_type": "yarn", "factor",
 * "original_max_position_embeddings"}), read as transformers' _compute_yarn_parameters (5.x) reads it:
 * original_max_position_embeddings from the config's top level if there, else rope_scaling's, else
 * max_position_embeddings; factor null -> max_position_embeddings / original; beta_fast / beta_slow null or 0
 * -> 32 / 1; the cos/sin attention factor get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim)
 * where both are given and non-zero, else 0.1 ln(factor) + 1 (core/rope.h); no softmax rescaling (that is
 * DeepSeek's MLA only). An explicit attention_factor and truncate false are refused. */
static pz_status parse_gqa_yarn(const reader *r, const cJSON *rs, const char *name, pz_model_config *c) {
  pz_rope_params *p = &c->rope;
  static const char *const keys[8] = {"factor", "original_max_position_embeddings", "beta_fast", "beta_slow",
                                      "mscale", "mscale_all_dim", "attention_factor", "truncate"};
  char f[8][64];
  for (int i = 0; i < 8; i++) snprintf(f[i], sizeof f[i], "%s.%s", name, keys[i]);
  const cJSON *af = cJSON_GetObjectItemCaseSensitive(rs, keys[6]);
  if (af && !cJSON_IsNull(af))
    return pz_error(PZ_ERR_CONFIG, "config %s: field \"%s\" is not supported (prezero derives YaRN's attention factor "
                    "from factor, mscale and mscale_all_dim, as transformers does without it); remove it", r->src, f[6]);
  const cJSON *tr = cJSON_GetObjectItemCaseSensitive(rs, keys[7]);
  if (tr && !cJSON_IsNull(tr)) {
    if (!cJSON_IsBool(tr)) return pz_cfg_type_err(r, f[7], "a boolean", tr);
    if (!cJSON_IsTrue(tr))
      return pz_error(PZ_ERR_CONFIG, "config %s: field \"%s\" false is not supported (prezero rounds YaRN's correction "
                      "range outwards, transformers' default); remove it", r->src, f[7]);
  }
  int64_t orig = 0;
  /* the top level's wins (transformers) */
  PZ_CHECK(pz_cfg_get_int_in(r, r->root, keys[1], keys[1], false, true, 1, &orig));
  if (orig <= 0) PZ_CHECK(pz_cfg_get_int_in(r, rs, keys[1], f[1], false, true, 1, &orig));
  if (orig <= 0) orig = c->max_position_embeddings;
  p->original_max_position_embeddings = orig;
  const cJSON *fa = cJSON_GetObjectItemCaseSensitive(rs, keys[0]);
  if (!fa) return pz_error(PZ_ERR_CONFIG, "config %s: required field \"%s\" is missing", r->src, f[0]);
  if (cJSON_IsNull(fa)) p->factor = (float)((double)c->max_position_embeddings / (double)orig);
  else PZ_CHECK(pz_cfg_get_float_in(r, rs, keys[0], f[0], true, &p->factor));
  if (!(p->factor >= 1.f)) return pz_error(PZ_ERR_CONFIG, "config %s: field \"%s\" is %g, must be >= 1", r->src, f[0], p->factor);
  float bf = 0.f, bs = 0.f, ms = 0.f, msa = 0.f;
  PZ_CHECK(get_float_or_null(r, rs, keys[2], f[2], &bf));
  PZ_CHECK(get_float_or_null(r, rs, keys[3], f[3], &bs));
  PZ_CHECK(get_float_or_null(r, rs, keys[4], f[4], &ms));
  PZ_CHECK(get_float_or_null(r, rs, keys[5], f[5], &msa));
  p->beta_fast = bf != 0.f ? bf : 32.f; /* transformers: `or 32` */
  p->beta_slow = bs != 0.f ? bs : 1.f;
  if (!(p->beta_fast > 0.f) || !(p->beta_slow > 0.f))
    return pz_error(PZ_ERR_CONFIG, "config %s: fields \"%s\" (%g) and \"%s\" (%g) must be > 0", r->src, f[2],
                    p->beta_fast, f[3], p->beta_slow);
  p->mscale = ms != 0.f && msa != 0.f ? ms : 1.f;
  p->mscale_all_dim = ms != 0.f && msa != 0.f ? msa : 0.f; /* get_mscale(f, 0) = 1: the factor alone */
  p->type = PZ_ROPE_YARN;
  return PZ_OK;
}

/* Phi3Config accepts RoPE types "default" and "longrope" (and reads the legacy "su" and "yarn" as
 * longrope: pz_cfg_parse_longrope, config_longrope.c); any other type is refused. */
static pz_status parse_phi3_rope(const reader *r, const cJSON *rs, const char *name, const char *f_type,
                                 const char *type, pz_model_config *c) {
  if (!strcmp(type, "longrope") || !strcmp(type, "su") || !strcmp(type, "yarn"))
    return pz_cfg_parse_longrope(r, rs, name, c);
  return pz_error(PZ_ERR_CONFIG, "config %s: field \"%s\" is \"%.40s\", which prezero does not support for model_type "
                  "phi3 (Phi3Config accepts only \"default\" and \"longrope\", or the legacy \"su\" and \"yarn\" it "
                  "reads as \"longrope\")", r->src, f_type, type);
}

/* rope_scaling of a GQA layout (or transformers' newer "rope_parameters", which also carries
 * rope_theta): null, type "default", "llama3" with all four of its fields, or "yarn" (parse_gqa_yarn);
 * phi3: null, "default" or LongRoPE (parse_phi3_rope; c->rotary_dim read before). */
static pz_status parse_gqa_rope(const reader *r, gqa_family fam, pz_model_config *c) {
  pz_rope_params *p = &c->rope;
  p->theta = gqa_fam[fam].rope_theta;
  PZ_CHECK(pz_cfg_get_float(r, r->root, "rope_theta", false, &p->theta));
  p->type = PZ_ROPE_DEFAULT;
  p->factor = 1.f;
  p->original_max_position_embeddings = c->max_position_embeddings;
  p->beta_fast = 32.f;
  p->beta_slow = 1.f;
  p->mscale = 1.f;
  p->mscale_all_dim = 0.f;
  p->low_freq_factor = p->high_freq_factor = 1.f;
  const cJSON *rs, *rp;
  const char *name;
  PZ_CHECK(pz_cfg_rope_object(r, &p->theta, &rs, &rp, &name));
  if (!rs) return PZ_OK;
  char f_type[48], f[4][64];
  snprintf(f_type, sizeof f_type, "%s.rope_type", name);
  /* transformers reads rope_type, then the legacy "type". */
  const cJSON *ty = cJSON_GetObjectItemCaseSensitive(rs, "rope_type");
  const cJSON *legacy = cJSON_GetObjectItemCaseSensitive(rs, "type");
  if (!ty) ty = legacy;
  if (!ty) return pz_error(PZ_ERR_CONFIG, "config %s: required field \"%s\" is missing", r->src, f_type);
  if (ty == legacy) snprintf(f_type, sizeof f_type, "%s.type", name); /* messages name the key the file used */
  if (!cJSON_IsString(ty)) return pz_cfg_type_err(r, f_type, "a string", ty);
  if (legacy && ty != legacy && !(cJSON_IsString(legacy) && !strcmp(legacy->valuestring, ty->valuestring)))
    return pz_error(PZ_ERR_CONFIG, "config %s: fields \"%s\" and \"%s.type\" disagree", r->src, f_type, name);
  if (!strcmp(ty->valuestring, "default")) return PZ_OK;
  if (fam == FAM_PHI3) return parse_phi3_rope(r, rs, name, f_type, ty->valuestring, c);
  if (!strcmp(ty->valuestring, "yarn")) return parse_gqa_yarn(r, rs, name, c);
  if (strcmp(ty->valuestring, "llama3"))
    return pz_error(PZ_ERR_CONFIG, "config %s: field \"%s\" is \"%.40s\", which prezero does not support for "
                    "model_type %s (supported: null, \"default\", \"llama3\", \"yarn\")", r->src, f_type,
                    ty->valuestring, gqa_fam[fam].model_type);
  static const char *const keys[4] = {"factor", "low_freq_factor", "high_freq_factor",
                                      "original_max_position_embeddings"};
  for (int i = 0; i < 4; i++) snprintf(f[i], sizeof f[i], "%s.%s", name, keys[i]);
  PZ_CHECK(pz_cfg_get_float_in(r, rs, keys[0], f[0], true, &p->factor));
  PZ_CHECK(pz_cfg_get_float_in(r, rs, keys[1], f[1], true, &p->low_freq_factor));
  PZ_CHECK(pz_cfg_get_float_in(r, rs, keys[2], f[2], true, &p->high_freq_factor));
  int64_t orig = 0, top = 0;
  PZ_CHECK(pz_cfg_get_int_in(r, rs, keys[3], f[3], true, false, 1, &orig));
  /* transformers 5 (standardize_rope_params) gives a top-level original_max_position_embeddings priority,
   * for llama3 as for yarn */
  PZ_CHECK(pz_cfg_get_int_in(r, r->root, keys[3], keys[3], false, true, 1, &top));
  p->original_max_position_embeddings = top > 0 ? top : orig;
  if (!(p->factor >= 1.f)) return pz_error(PZ_ERR_CONFIG, "config %s: field \"%s\" must be >= 1", r->src, f[0]);
  /* The smooth band divides by high - low and the wavelength bounds by each factor. */
  if (!(p->low_freq_factor > 0.f) || !(p->high_freq_factor > p->low_freq_factor))
    return pz_error(PZ_ERR_CONFIG, "config %s: fields \"%s\" (%g) and \"%s\" (%g) must satisfy 0 < low < high",
                    r->src, f[1], p->low_freq_factor, f[2], p->high_freq_factor);
  p->type = PZ_ROPE_LLAMA3;
  return PZ_OK;
}

static pz_status parse_mlp_only(const reader *r, pz_model_config *c) {
  const cJSON *a = cJSON_GetObjectItemCaseSensitive(r->root, "mlp_only_layers");
  c->n_mlp_only = 0;
  if (!a || cJSON_IsNull(a)) return PZ_OK;
  if (!cJSON_IsArray(a)) return pz_cfg_type_err(r, "mlp_only_layers", "a list of layer indices", a);
  for (const cJSON *e = a->child; e; e = e->next) {
    if (!cJSON_IsNumber(e) || e->valuedouble != floor(e->valuedouble))
      return pz_cfg_type_err(r, "mlp_only_layers", "a list of integer layer indices", e);
    if (c->n_mlp_only >= PZ_CONFIG_MAX_MLP_ONLY)
      return pz_error(PZ_ERR_CONFIG, "config %s: field \"mlp_only_layers\" has more than %d entries; prezero keeps at "
                      "most %d", r->src, PZ_CONFIG_MAX_MLP_ONLY, PZ_CONFIG_MAX_MLP_ONLY);
    if (e->valuedouble < 0 || e->valuedouble >= (double)c->num_hidden_layers)
      return pz_error(PZ_ERR_CONFIG, "config %s: field \"mlp_only_layers\" has entry %g, outside 0..%lld "
                      "(num_hidden_layers - 1)", r->src, e->valuedouble, (long long)c->num_hidden_layers - 1);
    c->mlp_only_layers[c->n_mlp_only++] = (int32_t)e->valuedouble;
  }
  return PZ_OK;
}

/* Fields of other families that change the math of a layer (RoPE on part of each head, scaled
 * attention, embeddings, residuals or logits, soft-capping, q/k norms, layers without RoPE,
 * interleaved RoPE pairs): the other GQA families have none of them (glm4_moe reads its own
 * partial_rotary_factor and use_qk_norm, phi3 its own partial_rotary_factor) and prezero would run the
 * layer without it, a different model, so a config that sets one to anything but its neutral value is
 * refused. neutral: 0 any number but null refused, 1 the number 1, 2 the number head_dim, 3 false,
 * 4 a list of 1s (every layer with RoPE). */
static const struct { const char *field, *what; int neutral; } foreign_fields[] = {
    {"partial_rotary_factor", "RoPE on part of each head, as GLM-4 / Phi / Qwen3-Next", 1},
    {"attention_multiplier", "a scaled attention, as Granite", 0},
    {"embedding_multiplier", "scaled embeddings, as Granite", 1},
    {"residual_multiplier", "scaled residuals, as Granite", 1},
    {"logits_scaling", "scaled logits, as Granite", 1},
    {"logit_scale", "scaled logits, as Cohere", 1},
    {"final_logit_softcapping", "soft-capped logits, as Gemma 2", 0},
    {"attn_logit_softcapping", "soft-capped attention scores, as Gemma 2", 0},
    {"query_pre_attn_scalar", "a query scale other than 1/sqrt(head_dim), as Gemma", 2},
    {"use_qk_norm", "q/k norms, as Llama 4 / GLM-4.5 / Cohere", 3},
    {"no_rope_layers", "layers without RoPE, as Llama 4 / SmolLM3", 4},
    {"rope_interleave", "RoPE on interleaved pairs (prezero's GQA rotates halves)", 3},
};

static pz_status check_foreign_fields(const reader *r, gqa_family fam, const pz_model_config *c) {
  for (size_t i = 0; i < sizeof foreign_fields / sizeof foreign_fields[0]; i++) {
    const char *f = foreign_fields[i].field;
    if (fam == FAM_GLM4_MOE && (i == 0 || i == 9)) continue; /* its own fields (parse_glm4_moe) */
    if (fam == FAM_PHI3 && i == 0) continue;                    /* its own (parse_partial_rotary) */
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(r->root, f);
    if (!it) { /* transformers 5 keeps partial_rotary_factor in rope_parameters */
      const cJSON *rp = cJSON_GetObjectItemCaseSensitive(r->root, "rope_parameters");
      if (i == 0 && cJSON_IsObject(rp)) it = cJSON_GetObjectItemCaseSensitive(rp, f);
    }
    if (!it || cJSON_IsNull(it)) continue;
    const int n = foreign_fields[i].neutral;
    bool neutral = false;
    if (n == 1) neutral = cJSON_IsNumber(it) && it->valuedouble == 1.0;
    else if (n == 2) neutral = cJSON_IsNumber(it) && it->valuedouble == (double)c->head_dim;
    else if (n == 3) neutral = cJSON_IsFalse(it) || (i == 9 && cJSON_IsTrue(it) && c->qk_norm);
    else if (n == 4 && cJSON_IsArray(it)) {
      neutral = true;
      for (const cJSON *e = it->child; e; e = e->next) neutral &= cJSON_IsNumber(e) && e->valuedouble == 1.0;
    }
    if (neutral) continue;
    char val[32];
    if (cJSON_IsNumber(it)) snprintf(val, sizeof val, "%g", it->valuedouble);
    else snprintf(val, sizeof val, "%s", cJSON_IsTrue(it) ? "true" : cJSON_IsFalse(it) ? "false"
                                         : cJSON_IsArray(it) ? "a list" : "set");
    return pz_error(PZ_ERR_CONFIG, "config %s: field \"%s\" is %s (%s), which model_type %s does not have and prezero "
                    "does not run; this model is not supported", r->src, f, val, foreign_fields[i].what,
                    gqa_fam[fam].model_type);
  }
  return PZ_OK;
}

/* Dual chunk attention (Qwen2.5-1M's "dual_chunk_attention_config": chunk_size, local_size): serving
 * engines that read it split a sequence into chunks of chunk_size - local_size tokens and give
 * queries past the first chunk remapped positions; within the first chunk it is plain full attention,
 * which is what prezero (and transformers, which ignores the field) runs. So the positions are limited
 * to that first chunk: max_position_embeddings becomes min(max_position_embeddings,
 * chunk_size - local_size), and a longer --context is refused rather than run as another model. */
static pz_status parse_dual_chunk(const reader *r, pz_model_config *c) {
  const cJSON *d = cJSON_GetObjectItemCaseSensitive(r->root, "dual_chunk_attention_config");
  if (!d || cJSON_IsNull(d)) return PZ_OK;
  if (!cJSON_IsObject(d)) return pz_cfg_type_err(r, "dual_chunk_attention_config", "an object or null", d);
  PZ_CHECK(pz_cfg_check_duplicates(r, d, "dual_chunk_attention_config."));
  int64_t chunk = 0, local = 0;
  PZ_CHECK(pz_cfg_get_int_in(r, d, "chunk_size", "dual_chunk_attention_config.chunk_size", true, false, 1, &chunk));
  PZ_CHECK(pz_cfg_get_int_in(r, d, "local_size", "dual_chunk_attention_config.local_size", true, false, 0, &local));
  if (local >= chunk)
    return pz_error(PZ_ERR_CONFIG, "config %s: field \"dual_chunk_attention_config.local_size\" (%lld) must be below "
                    "chunk_size (%lld)", r->src, (long long)local, (long long)chunk);
  if (chunk - local < c->max_position_embeddings) c->max_position_embeddings = chunk - local;
  return PZ_OK;
}

/* Partial RoPE (GLM-4.5, Phi-4-mini): partial_rotary_factor from the RoPE object (rope_parameters or
 * rope_scaling), else the top level, else `dflt` (Glm4MoeConfig 0.5, Phi3Config 1.0), as transformers 5
 * standardises it; RoPE then rotates the first int(head_dim * factor) dims of each head (rotate-half within
 * them). The product is
 * taken in double, as Python does: the factor rounded to float first can land below an integer product
 * (80 * 0.7f = 55.99..., transformers 56). A null factor is refused: transformers 5 reads a null top-level
 * one as 1.0 (full RoPE) and fails on a null one in the RoPE object, 4.x fails on both. */
static pz_status parse_partial_rotary(const reader *r, double dflt, pz_model_config *c) {
  static const char *const objs[2] = {"rope_parameters", "rope_scaling"};
  double prf = dflt;
  const cJSON *at = NULL, *from = r->root;
  char f[64] = "partial_rotary_factor";
  for (int i = 0; i < 2 && !at; i++) {
    const cJSON *o = cJSON_GetObjectItemCaseSensitive(r->root, objs[i]);
    const cJSON *it = cJSON_IsObject(o) ? cJSON_GetObjectItemCaseSensitive(o, "partial_rotary_factor") : NULL;
    if (!it) continue;
    snprintf(f, sizeof f, "%s.partial_rotary_factor", objs[i]);
    at = it;
    from = o;
  }
  if (!at) at = cJSON_GetObjectItemCaseSensitive(r->root, "partial_rotary_factor");
  if (at) {
    if (cJSON_IsNull(at))
      return pz_error(PZ_ERR_CONFIG, "config %s: field \"%s\" is null; give a number in (0, 1] or leave it out "
                      "(%g)", r->src, f, dflt);
    float chk = 0.f;
    PZ_CHECK(pz_cfg_get_float_in(r, from, "partial_rotary_factor", f, true, &chk));
    prf = at->valuedouble;
  }
  if (!(prf > 0. && prf <= 1.))
    return pz_error(PZ_ERR_CONFIG, "config %s: field \"%s\" is %g, must be in (0, 1]", r->src, f, prf);
  /* transformers: int(head_dim * partial_rotary_factor), the factor a Python float (double) */
  const int64_t rd = (int64_t)((double)c->head_dim * prf);
  if (rd < 2 || rd % 2)
    return pz_error(PZ_ERR_CONFIG, "config %s: field \"%s\" (%g) gives %lld rotary dims of head_dim %lld; RoPE needs an "
                    "even count >= 2", r->src, f, prf, (long long)rd, (long long)c->head_dim);
  c->rotary_dim = rd;
  return PZ_OK;
}

/* DeepSeek-V3's fields that Dots1Config does not have (transformers ignores them; the router is always sigmoid
 * + noaux_tc, every layer from first_k_dense_replace on MoE) but that other readers of the same file act on:
 * a value that says otherwise is refused rather than run as transformers runs it. */
static pz_status check_dots1_v3_fields(const reader *r) {
  int64_t freq = 1;
  PZ_CHECK(pz_cfg_get_int(r, "moe_layer_freq", false, true, 1, &freq)); /* null: 0, as absent */
  if (freq > 1)
    return pz_error(PZ_ERR_CONFIG, "config %s: field \"moe_layer_freq\" is %lld; model_type dots1 makes every layer "
                    "from first_k_dense_replace on MoE (1, or leave it out)", r->src, (long long)freq);
  static const char *const scoring[] = {"sigmoid", "noaux_tc"}, *const method[] = {"noaux_tc"};
  const cJSON *sf = cJSON_GetObjectItemCaseSensitive(r->root, "scoring_func");
  const cJSON *tm = cJSON_GetObjectItemCaseSensitive(r->root, "topk_method");
  int i = 0;
  if (sf && !cJSON_IsNull(sf)) PZ_CHECK(pz_cfg_get_enum(r, "scoring_func", scoring, 2, &i));
  if (tm && !cJSON_IsNull(tm)) PZ_CHECK(pz_cfg_get_enum(r, "topk_method", method, 1, &i));
  return PZ_OK;
}

/* n_group / topk_group of DeepSeek-V3's router. dots1: a null n_group is read as one group, no group limit
 * (topk_group then has nothing to choose; dots.llm1 files may write nulls there); Dots1Config keeps the null
 * and transformers' router fails on it. A null topk_group under several groups says nothing and is refused. */
static pz_status parse_v3_groups(const reader *r, bool dots, pz_model_config *c) {
  PZ_CHECK(pz_cfg_get_int(r, "n_group", false, dots, 1, &c->n_group));
  PZ_CHECK(pz_cfg_get_int(r, "topk_group", false, dots, 1, &c->topk_group));
  if (c->n_group == 0) c->n_group = c->topk_group = 1;
  if (c->topk_group == 0 && c->n_group > 1)
    return pz_error(PZ_ERR_CONFIG, "config %s: field \"topk_group\" is null under n_group %lld; give the number of "
                    "groups each token chooses from", r->src, (long long)c->n_group);
  if (c->topk_group == 0) c->topk_group = 1;
  return PZ_OK;
}

/* c->n_routed_experts from the config's own field `name` or from num_local_experts, which transformers
 * >= 5 maps it to (the config's attribute_map) and which save_pretrained then writes alone: either is
 * read (>= min), and both must agree. */
static pz_status read_experts(const reader *r, const char *name, int64_t min, pz_model_config *c) {
  const bool has_own = cJSON_GetObjectItemCaseSensitive(r->root, name) != NULL;
  const bool has_nle = cJSON_GetObjectItemCaseSensitive(r->root, "num_local_experts") != NULL;
  int64_t nle = -1;
  if (has_nle) PZ_CHECK(pz_cfg_get_int(r, "num_local_experts", true, false, min, &nle));
  PZ_CHECK(pz_cfg_get_int(r, name, !has_nle, false, min, &c->n_routed_experts));
  if (!has_own) c->n_routed_experts = nle;
  else if (has_nle && nle != c->n_routed_experts)
    return pz_error(PZ_ERR_CONFIG, "config %s: fields \"%s\" (%lld) and \"num_local_experts\" (%lld) disagree; give one",
                    r->src, name, (long long)c->n_routed_experts, (long long)nle);
  return PZ_OK;
}

/* DeepSeek-V3's MoE as Glm4MoeConfig and Dots1Config read it: the router (sigmoid scores,
 * e_score_correction_bias, noaux_tc group selection) and shared experts, layers from first_k_dense_replace
 * on. Glm4MoeConfig's defaults: n_shared_experts 1, first_k_dense_replace 1, norm_topk_prob true;
 * Dots1Config's: n_shared_experts none (Dots1MoE multiplies by it: required), first_k_dense_replace 0,
 * norm_topk_prob false. */
static pz_status parse_v3_moe(const reader *r, gqa_family fam, pz_model_config *c) {
  const bool dots = fam == FAM_DOTS1;
  PZ_CHECK(read_experts(r, "n_routed_experts", 1, c));
  PZ_CHECK(pz_cfg_get_int(r, "num_experts_per_tok", true, false, 1, &c->num_experts_per_tok));
  PZ_CHECK(pz_cfg_get_int(r, "moe_intermediate_size", true, false, 1, &c->moe_intermediate_size));
  c->n_shared_experts = 1;
  PZ_CHECK(pz_cfg_get_int(r, "n_shared_experts", dots, !dots, 0, &c->n_shared_experts));
  c->first_k_dense_replace = dots ? 0 : 1;
  PZ_CHECK(pz_cfg_get_int(r, "first_k_dense_replace", false, false, 0, &c->first_k_dense_replace));
  PZ_CHECK(parse_v3_groups(r, dots, c));
  c->norm_topk_prob = !dots;
  PZ_CHECK(pz_cfg_get_bool(r, "norm_topk_prob", &c->norm_topk_prob));
  PZ_CHECK(pz_cfg_get_float(r, r->root, "routed_scaling_factor", false, &c->routed_scaling_factor));
  c->scoring_func = PZ_SCORE_SIGMOID;
  c->topk_method = PZ_TOPK_NOAUX_TC;
  c->decoder_sparse_step = 0; /* DeepSeek's rule: MoE from first_k_dense_replace on */
  if (dots) PZ_CHECK(check_dots1_v3_fields(r));
  return pz_cfg_check_group_routing(r, c, 2);
}

/* Llama, Qwen2, Qwen3, Qwen3-MoE, Mixtral, GLM-4.5, Phi-3 and dots.llm1 (GQA). */
pz_status pz_cfg_parse_gqa(const reader *r, gqa_family fam, pz_model_config *c) {
  c->attn = PZ_ATTN_GQA;
  PZ_CHECK(pz_cfg_get_trunk(r, true, c));
  /* Absent: the class default; null: num_attention_heads (every class's None rule). */
  int64_t kvh = gqa_fam[fam].kv_heads ? gqa_fam[fam].kv_heads : c->num_attention_heads;
  PZ_CHECK(pz_cfg_get_int(r, "num_key_value_heads", false, true, 1, &kvh));
  c->num_key_value_heads = kvh ? kvh : c->num_attention_heads;
  if (c->num_attention_heads % c->num_key_value_heads)
    return pz_error(PZ_ERR_CONFIG, "config %s: field \"num_key_value_heads\" (%lld) must divide num_attention_heads "
                    "(%lld)", r->src, (long long)c->num_key_value_heads, (long long)c->num_attention_heads);
  int64_t hd = gqa_fam[fam].head_dim;
  const cJSON *hdj = cJSON_GetObjectItemCaseSensitive(r->root, "head_dim");
  /* Dots1Attention and Phi3Attention: head_dim = getattr(config, "head_dim", hidden_size // heads), None for a
   * null one, and the attention scale head_dim**-0.5 fails on it (the other families read null as absent) */
  if ((fam == FAM_DOTS1 || fam == FAM_PHI3) && hdj && cJSON_IsNull(hdj))
    return pz_error(PZ_ERR_CONFIG, "config %s: field \"head_dim\" is null (transformers' %s fails on it); "
                    "give a number or leave it out", r->src, fam == FAM_DOTS1 ? "Dots1Attention" : "Phi3Attention");
  PZ_CHECK(pz_cfg_get_int(r, "head_dim", false, true, 1, &hd));
  if (hd == 0) {
    if (c->hidden_size % c->num_attention_heads)
      return pz_error(PZ_ERR_CONFIG, "config %s: hidden_size (%lld) is not a multiple of num_attention_heads (%lld); "
                      "give field \"head_dim\"", r->src, (long long)c->hidden_size, (long long)c->num_attention_heads);
    hd = c->hidden_size / c->num_attention_heads;
  }
  c->head_dim = hd;
  c->rotary_dim = hd;
  if (c->head_dim % 2)
    return pz_error(PZ_ERR_CONFIG, "config %s: field \"head_dim\" must be even (rotate-half RoPE pairs j and "
                    "j + head_dim/2), got %lld", r->src, (long long)c->head_dim);
  PZ_CHECK(pz_cfg_get_int(r, "intermediate_size", true, false, 1, &c->intermediate_size));
  PZ_CHECK(pz_cfg_get_int(r, "vocab_size", true, false, 1, &c->vocab_size));
  PZ_CHECK(pz_cfg_get_int(r, "max_position_embeddings", true, false, 1, &c->max_position_embeddings));
  c->rms_norm_eps = gqa_fam[fam].rms_norm_eps;
  PZ_CHECK(pz_cfg_get_float(r, r->root, "rms_norm_eps", false, &c->rms_norm_eps));
  if (!(c->rms_norm_eps > 0.f)) return pz_error(PZ_ERR_CONFIG, "config %s: field \"rms_norm_eps\" must be > 0", r->src);
  /* phi3's partial RoPE first: LongRoPE's factor lists have one entry per rotated pair */
  if (fam == FAM_PHI3) PZ_CHECK(parse_partial_rotary(r, 1.0, c));
  PZ_CHECK(parse_gqa_rope(r, fam, c));
  if (!(c->rope.theta > 0.f)) return pz_error(PZ_ERR_CONFIG, "config %s: field \"rope_theta\" must be > 0", r->src);
  PZ_CHECK(parse_dual_chunk(r, c));
  PZ_CHECK(pz_cfg_llama4_scaling(r, c));
  static const char *const acts[] = {"silu"};
  int act = 0;
  PZ_CHECK(pz_cfg_get_enum(r, "hidden_act", acts, 1, &act));
  c->tie_word_embeddings = false;
  PZ_CHECK(pz_cfg_get_bool(r, "tie_word_embeddings", &c->tie_word_embeddings));
  /* q/k/v biases: Qwen2Attention always has them, MixtralAttention and MistralAttention never;
   * Glm4MoeAttention reads attention_bias for q/k/v only. LlamaAttention, Qwen3Attention, Qwen3MoeAttention and
   * Dots1Attention give o_proj a bias too when attention_bias is true, which prezero's attention op has no place
   * for: refused (the seeded model would lack it, and every such checkpoint has an o_proj.bias the loader
   * refuses). Only LlamaMLP reads mlp_bias. */
  c->attention_bias = fam == FAM_QWEN2;
  if (fam == FAM_LLAMA || fam == FAM_QWEN3 || fam == FAM_QWEN3_MOE || fam == FAM_GLM4_MOE || fam == FAM_DOTS1)
    PZ_CHECK(pz_cfg_get_bool(r, "attention_bias", &c->attention_bias));
  if (fam != FAM_GLM4_MOE && fam != FAM_QWEN2 && c->attention_bias)
    return pz_error(PZ_ERR_CONFIG, "config %s: field \"attention_bias\" is true; model_type %s then has an o_proj "
                    "bias (besides the q/k/v ones), which prezero does not run; set it false or leave it out", r->src,
                    gqa_fam[fam].model_type);
  if (fam == FAM_LLAMA) {
    bool mlp_bias = false;
    PZ_CHECK(pz_cfg_get_bool(r, "mlp_bias", &mlp_bias));
    if (mlp_bias)
      return pz_error(PZ_ERR_CONFIG, "config %s: field \"mlp_bias\" is true; prezero runs MLPs without biases", r->src);
  }
  c->qk_norm = gqa_fam[fam].qk_norm;
  if (fam == FAM_GLM4_MOE) {
    PZ_CHECK(pz_cfg_get_bool(r, "use_qk_norm", &c->qk_norm));
    PZ_CHECK(parse_partial_rotary(r, 0.5, c));
  }
  PZ_CHECK(pz_cfg_parse_gqa_window(r, fam, gqa_fam[fam].sliding_flag, gqa_fam[fam].sliding_window, c));
  PZ_CHECK(check_foreign_fields(r, fam, c));

  /* MoE (DeepSeek-only fields stay neutral: one group, greedy, no shared experts, scale 1). */
  c->decoder_sparse_step = 1;
  c->moe_layer_freq = 1;
  c->n_group = c->topk_group = 1;
  c->topk_method = PZ_TOPK_GREEDY;
  c->scoring_func = PZ_SCORE_SOFTMAX;
  c->routed_scaling_factor = 1.f;
  if (fam == FAM_QWEN3_MOE) {
    /* num_experts (earlier releases, the published files) or num_local_experts (transformers >= 5) */
    PZ_CHECK(read_experts(r, "num_experts", 0, c));
    PZ_CHECK(pz_cfg_get_int(r, "num_experts_per_tok", true, false, 1, &c->num_experts_per_tok));
    PZ_CHECK(pz_cfg_get_int(r, "moe_intermediate_size", true, false, 1, &c->moe_intermediate_size));
    PZ_CHECK(pz_cfg_get_bool(r, "norm_topk_prob", &c->norm_topk_prob));
    PZ_CHECK(pz_cfg_get_int(r, "decoder_sparse_step", false, false, 1, &c->decoder_sparse_step));
    PZ_CHECK(parse_mlp_only(r, c));
  } else if (fam == FAM_GLM4_MOE || fam == FAM_DOTS1) {
    PZ_CHECK(parse_v3_moe(r, fam, c));
  } else if (fam == FAM_MIXTRAL) {
    PZ_CHECK(pz_cfg_get_int(r, "num_local_experts", true, false, 1, &c->n_routed_experts));
    PZ_CHECK(pz_cfg_get_int(r, "num_experts_per_tok", true, false, 1, &c->num_experts_per_tok));
    c->moe_intermediate_size = c->intermediate_size;
    c->scoring_func = PZ_SCORE_TOPK_SOFTMAX; /* softmax over the k chosen logits: weights sum to 1 */
    c->norm_topk_prob = true;
  }
  if (c->n_routed_experts > 0 && c->num_experts_per_tok > c->n_routed_experts)
    return pz_error(PZ_ERR_CONFIG, "config %s: field \"num_experts_per_tok\" (%lld) must be in 1..%s (%lld)", r->src,
                    (long long)c->num_experts_per_tok, fam == FAM_MIXTRAL ? "num_local_experts"
                    : fam == FAM_GLM4_MOE || fam == FAM_DOTS1 ? "n_routed_experts" : "num_experts",
                    (long long)c->n_routed_experts);
  return PZ_OK;
}
