/* The config.json reader's internals (src/model/config*.c only), beyond config_read.h: the typed
 * field readers (config_fields.c) that the MLA and GQA parsers share, and the MLA (config_mla.c) and
 * GQA (config_gqa.c) parsers that config.c calls by model_type. Every reader names the field in its
 * one-line PZ_ERR_CONFIG message as `config <src>: field "<field>" ...`. */
#ifndef PZ_MODEL_CONFIG_IMPL_H
#define PZ_MODEL_CONFIG_IMPL_H
#include <stdbool.h>
#include <stdint.h>
#include <cjson/cJSON.h>
#include "core/status.h"
#include "model/config.h"
#include "model/config_read.h"

/* Integer field `key` of obj, named `field` in messages. required: missing -> error; else *v keeps
 * its default. null_ok: null -> 0. The value must be a whole number in min..PZ_CONFIG_MAX_INT. */
pz_status pz_cfg_get_int_in(const reader *r, const cJSON *obj, const char *key, const char *field,
                            bool required, bool null_ok, int64_t min, int64_t *v);

/* Integer field of the config object (pz_cfg_get_int_in on r->root). */
pz_status pz_cfg_get_int(const reader *r, const char *field, bool required, bool null_ok, int64_t min,
                         int64_t *v);

/* Float field `key` of obj, named `field` in messages: a finite number. required: missing -> error;
 * else *v keeps its default. */
pz_status pz_cfg_get_float_in(const reader *r, const cJSON *obj, const char *key, const char *field,
                              bool required, float *v);

/* Float field `field` of obj (pz_cfg_get_float_in with key = field). */
pz_status pz_cfg_get_float(const reader *r, const cJSON *obj, const char *field, bool required, float *v);

/* Boolean field of the config object; *v keeps its default when absent. */
pz_status pz_cfg_get_bool(const reader *r, const char *field, bool *v);

/* String field of the config object matched against names[n]; *idx (the index of the match) keeps its
 * default when absent. Another string: PZ_ERR_CONFIG listing the supported ones. */
pz_status pz_cfg_get_enum(const reader *r, const char *field, const char *const *names, int n, int *idx);

/* The fields every layout has: hidden_size, num_hidden_layers (at most PZ_CONFIG_MAX_LAYERS) and
 * num_attention_heads, each >= 1 (required: absent is PZ_ERR_CONFIG, else they keep their values). */
pz_status pz_cfg_get_trunk(const reader *r, bool required, pz_model_config *c);

/* The group routing of c (n_routed_experts > 0, num_experts_per_tok, n_group, topk_group, as read):
 * n_group divides the experts into groups of at least min_per_group (2 where a group scores by its
 * top-2 experts), topk_group <= n_group, and the chosen groups hold num_experts_per_tok experts.
 * Else PZ_ERR_CONFIG naming the field. */
pz_status pz_cfg_check_group_routing(const reader *r, const pz_model_config *c, int64_t min_per_group);

/* The RoPE object of the config: rope_scaling, or transformers 5's rope_parameters (whose
 * rope_theta, when given, is read into *theta); not both. *obj is NULL when neither is an object
 * (absent or null), else the object to read, *from the one it came from (rope_parameters or NULL)
 * and *name its field name for messages. */
pz_status pz_cfg_rope_object(const reader *r, float *theta, const cJSON **obj, const cJSON **from,
                             const char **name);

/* Llama 4's query scaling ("llama_4_scaling_beta" in the RoPE object, non-zero): it is 1 below the RoPE object's
 * original_max_position_embeddings (or the top-level one, the lower of the two), so c->max_position_embeddings is cut
 * to that (read after every other use of max_position_embeddings). Without an original_max_position_embeddings:
 * PZ_ERR_CONFIG, one line. */
pz_status pz_cfg_llama4_scaling(const reader *r, pz_model_config *c);

/* The DeepSeek-V2 family (MLA): deepseek_v2, deepseek_v3 and kimi_k2 (their transformers class defaults
 * fill absent fields) and configs without model_type (every dimension required). Reads r->root into c
 * (c->model_type set by the caller) and checks the values together. Errors: PZ_ERR_CONFIG, one line. */
pz_status pz_cfg_parse_mla(const reader *r, pz_model_config *c);

/* Phi-3's LongRoPE (config_longrope.c): the RoPE object rs (named `name` in messages) of a phi3 config whose
 * type is "longrope" (or the legacy "su" / "yarn"), read as transformers 5's Phi3Config and
 * _compute_longrope_parameters read it, into c->rope (type PZ_ROPE_LONGROPE): short_factor and long_factor,
 * lists of rotary_dim / 2 numbers > 0 each (c->rotary_dim, c->head_dim and c->max_position_embeddings read
 * before; head_dim must be hidden_size / num_attention_heads, as Phi3Config checks the lists against it); the
 * top-level original_max_position_embeddings (required: Phi3Config would read its default 4096 over the RoPE
 * object's own); attention_factor (> 0) when given, else from factor (>= 1; null or absent:
 * max_position_embeddings / original_max_position_embeddings): 1 for factor <= 1, else
 * sqrt(1 + ln(factor) / ln(original_max_position_embeddings)), in double, stored as f32. short_mscale /
 * long_mscale (which transformers ignores) are refused. Errors: PZ_ERR_CONFIG, one line naming the field. */
pz_status pz_cfg_parse_longrope(const reader *r, const cJSON *rs, const char *name, pz_model_config *c);

/* The GQA families by model_type (config_gqa.c holds their class defaults). */
typedef enum { FAM_LLAMA, FAM_QWEN2, FAM_QWEN3, FAM_QWEN3_MOE, FAM_MIXTRAL, FAM_MISTRAL, FAM_GLM4_MOE, FAM_PHI3, FAM_DOTS1, FAM_COUNT } gqa_family;

/* The gqa_family of model_type ("llama", "qwen2", "qwen3", "qwen3_moe", "mixtral", "mistral", "glm4_moe", "phi3", "dots1"), or -1. */
int pz_cfg_gqa_family_of(const char *model_type);

/* A GQA family's config (Llama, Mistral, Qwen2, Qwen3, Qwen3-MoE, Mixtral, GLM-4.5, Phi-3, dots.llm1): reads r->root into c (c->model_type
 * set by the caller), absent optional fields taking fam's class defaults; other families' fields that change a
 * layer's math are refused. Errors: PZ_ERR_CONFIG, one line. */
pz_status pz_cfg_parse_gqa(const reader *r, gqa_family fam, pz_model_config *c);

/* The sliding layers of a GQA family (config_window.c), into c->sliding_window and c->sliding_layers, as
 * transformers 5.25 places them: mistral, mixtral, phi3 and qwen3_moe slide every layer when the window is set;
 * qwen2, qwen3 and dots1 the layers whose layer_types entry is "sliding_attention", else (no layer_types) those
 * from max_window_layers (28; dots1 62) on; llama and glm4_moe none. dflt: sliding_window when absent (0: none);
 * gated: use_sliding_window (default false) decides whether sliding_window is read as a window (qwen2, qwen3,
 * qwen3_moe). Needs c->num_hidden_layers, c->max_position_embeddings and c->model_type. Refused, naming the field:
 * an explicit sliding_window 0 where it applies; a layer_types entry other than "full_attention" /
 * "sliding_attention", sliding entries without a window, a mix of both kinds where every layer slides, a length
 * other than num_hidden_layers where layer_types places the layers; a null max_window_layers under a window;
 * llama's and glm4_moe's sliding_window below max_position_embeddings (transformers ignores it) or any non-full
 * layer_types entry of theirs. Errors: PZ_ERR_CONFIG, one line. */
pz_status pz_cfg_parse_gqa_window(const reader *r, gqa_family fam, bool gated, int64_t dflt, pz_model_config *c);

#endif
