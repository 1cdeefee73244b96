/* config.json reader (cJSON) for the DeepSeek-V2 family, and the embedded preset table
 * (generated from the configs folder by cmake/embed_presets.cmake). */
#include "model/config.h"
#include <cjson/cJSON.h>
#include <errno.h>
#include <regex.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* Generated table {name, json}, terminated by {NULL, NULL}. */
extern const struct { const char *name; const char *json; } pz_embedded_presets[];

const char *pz_config_preset_names(void) {
  static char buf[512];
  if (!buf[0]) {
    size_t o = 0;
    for (int i = 0; pz_embedded_presets[i].name && o < sizeof buf; i++)
      o += (size_t)snprintf(buf + o, sizeof buf - o, "%s%s", i ? ", " : "", pz_embedded_presets[i].name);
  }
  return buf;
}

typedef struct {
  const cJSON *root;
  const char *src;
} reader;

static pz_status type_err(const reader *r, const char *field, const char *want, const cJSON *it) {
  const char *got = cJSON_IsString(it) ? "a string" : cJSON_IsBool(it) ? "a boolean"
                  : cJSON_IsNull(it) ? "null" : cJSON_IsArray(it) ? "an array"
                  : cJSON_IsObject(it) ? "an object" : cJSON_IsNumber(it) ? "a number" : "invalid";
  return pz_error(PZ_ERR_CONFIG, "config %s: field \"%s\" must be %s, got %s", r->src, field, want, got);
}

/* Integer field. required: missing -> error; else *v keeps its default. null_ok: null -> 0. */
static pz_status get_int(const reader *r, const char *field, bool required, bool null_ok, int64_t min,
                         int64_t *v) {
  const cJSON *it = cJSON_GetObjectItemCaseSensitive(r->root, field);
  if (!it) {
    if (required) return pz_error(PZ_ERR_CONFIG, "config %s: required field \"%s\" is missing", r->src, field);
    return PZ_OK;
  }
  if (cJSON_IsNull(it) && null_ok) { *v = 0; return PZ_OK; }
  if (!cJSON_IsNumber(it)) return type_err(r, field, null_ok ? "an integer or null" : "an integer", it);
  double d = it->valuedouble;
  if (d != floor(d) || fabs(d) > 9.0e15) return type_err(r, field, "an integer", it);
  if ((int64_t)d < min)
    return pz_error(PZ_ERR_CONFIG, "config %s: field \"%s\" is %lld, must be >= %lld", r->src, field,
                    (long long)d, (long long)min);
  /* Every integer field is a dimension, count or position: keep it in int32 range so that the
   * builder's products and the int-typed kernel arguments cannot overflow. */
  if ((int64_t)d > PZ_CONFIG_MAX_INT)
    return pz_error(PZ_ERR_CONFIG, "config %s: field \"%s\" is %lld, must be <= %lld", r->src, field,
                    (long long)d, (long long)PZ_CONFIG_MAX_INT);
  *v = (int64_t)d;
  return PZ_OK;
}

static pz_status get_float(const reader *r, const cJSON *obj, const char *field, bool required, float *v) {
  const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, field);
  if (!it) {
    if (required) return pz_error(PZ_ERR_CONFIG, "config %s: required field \"%s\" is missing", r->src, field);
    return PZ_OK;
  }
  if (!cJSON_IsNumber(it)) return type_err(r, field, "a number", it);
  if (!isfinite((float)it->valuedouble)) /* 1e999 parses as inf; NaN logits would follow */
    return pz_error(PZ_ERR_CONFIG, "config %s: field \"%s\" is %g, must be a finite float", r->src, field,
                    it->valuedouble);
  *v = (float)it->valuedouble;
  return PZ_OK;
}

static pz_status get_bool(const reader *r, const char *field, bool *v) {
  const cJSON *it = cJSON_GetObjectItemCaseSensitive(r->root, field);
  if (!it) return PZ_OK;
  if (!cJSON_IsBool(it)) return type_err(r, field, "a boolean", it);
  *v = cJSON_IsTrue(it);
  return PZ_OK;
}

/* String field matched against a list; *idx keeps its default when absent. */
static pz_status get_enum(const reader *r, const char *field, const char *const *names, int n, int *idx) {
  const cJSON *it = cJSON_GetObjectItemCaseSensitive(r->root, field);
  if (!it) return PZ_OK;
  if (!cJSON_IsString(it)) return type_err(r, field, "a string", it);
  for (int i = 0; i < n; i++)
    if (!strcmp(it->valuestring, names[i])) { *idx = i; return PZ_OK; }
  char list[200] = "";
  for (int i = 0; i < n; i++) {
    strncat(list, i ? ", " : "", sizeof list - strlen(list) - 1);
    strncat(list, names[i], sizeof list - strlen(list) - 1);
  }
  return pz_error(PZ_ERR_CONFIG, "config %s: field \"%s\" is \"%s\", supported: %s", r->src, field,
                  it->valuestring, list);
}

static pz_status parse_rope_scaling(const reader *r, pz_model_config *c) {
  const cJSON *rs = cJSON_GetObjectItemCaseSensitive(r->root, "rope_scaling");
  if (!rs || cJSON_IsNull(rs)) return PZ_OK;
  if (!cJSON_IsObject(rs)) return type_err(r, "rope_scaling", "an object or null", rs);
  const cJSON *ty = cJSON_GetObjectItemCaseSensitive(rs, "type");
  if (!ty) ty = cJSON_GetObjectItemCaseSensitive(rs, "rope_type");
  if (!ty) return pz_error(PZ_ERR_CONFIG, "config %s: required field \"rope_scaling.type\" is missing", r->src);
  if (!cJSON_IsString(ty)) return type_err(r, "rope_scaling.type", "a string", ty);
  if (strcmp(ty->valuestring, "yarn"))
    return pz_error(PZ_ERR_CONFIG, "config %s: field \"rope_scaling.type\" is \"%s\", supported: yarn",
                    r->src, ty->valuestring);
  reader sub = {rs, r->src};
  pz_rope_params *p = &c->rope;
  p->beta_fast = 32.f;
  p->beta_slow = 1.f;
  p->mscale = 1.f;
  p->mscale_all_dim = 0.f;
  PZ_CHECK(get_float(&sub, rs, "factor", true, &p->factor));
  if (!(p->factor >= 1.f)) return pz_error(PZ_ERR_CONFIG, "config %s: field \"rope_scaling.factor\" must be >= 1", r->src);
  int64_t orig = 0;
  PZ_CHECK(get_int(&sub, "original_max_position_embeddings", true, false, 1, &orig));
  p->original_max_position_embeddings = orig;
  PZ_CHECK(get_float(&sub, rs, "beta_fast", false, &p->beta_fast));
  PZ_CHECK(get_float(&sub, rs, "beta_slow", false, &p->beta_slow));
  PZ_CHECK(get_float(&sub, rs, "mscale", false, &p->mscale));
  PZ_CHECK(get_float(&sub, rs, "mscale_all_dim", false, &p->mscale_all_dim));
  /* YaRN's correction range takes log(orig / (2 pi beta)): beta <= 0 gave NaN frequencies (token
   * 0 everywhere); transformers fails on these too. */
  if (!(p->beta_fast > 0.f) || !(p->beta_slow > 0.f))
    return pz_error(PZ_ERR_CONFIG, "config %s: fields \"rope_scaling.beta_fast\" (%g) and \"beta_slow\" (%g) must be > 0",
                    r->src, p->beta_fast, p->beta_slow);
  return PZ_OK;
}

/* A key given twice: cJSON reads the first, Python's json (transformers) the last; refuse rather
 * than silently disagree with the reference implementation. */
static pz_status check_duplicates(const reader *r, const cJSON *obj, const char *where) {
  for (const cJSON *a = obj->child; a; a = a->next)
    for (const cJSON *b = a->next; b; b = b->next)
      if (a->string && b->string && !strcmp(a->string, b->string))
        return pz_error(PZ_ERR_CONFIG, "config %s: field \"%s%s\" appears twice", r->src, where, a->string);
  return PZ_OK;
}


/* ------------------------------------------------------------------ quantization_config */

static bool compile_pattern(const char *re, regex_t *out) {
  char buf[PZ_QUANT_PATTERN_LEN + 8];
  snprintf(buf, sizeof buf, "^(%s)", re); /* Python re.match anchors at the start only */
  return regcomp(out, buf, REG_EXTENDED | REG_NOSUB) == 0;
}

static bool pattern_matches(const char *pat, const char *module) {
  if (!strncmp(pat, "re:", 3)) {
    regex_t rx;
    if (!compile_pattern(pat + 3, &rx)) return false;
    bool hit = regexec(&rx, module, 0, NULL, 0) == 0;
    regfree(&rx);
    return hit;
  }
  return !strcmp(pat, "Linear") || !strcmp(pat, module);
}

bool pz_quant_applies(const pz_quant_config *q, const char *module) {
  if (!q || !module || q->kind == PZ_WQ_NONE) return false;
  if (q->kind == PZ_WQ_FP8) return true;
  bool hit = false;
  for (int i = 0; i < q->n_targets && !hit; i++) hit = pattern_matches(q->targets[i], module);
  for (int i = 0; i < q->n_ignore && hit; i++)
    if (strcmp(q->ignore[i], "Linear") && pattern_matches(q->ignore[i], module)) hit = false;
  return hit;
}

const char *pz_wquant_name(pz_wquant k) { return k == PZ_WQ_INT4 ? "int4" : k == PZ_WQ_FP8 ? "fp8" : "bf16"; }

void pz_quant_config_synthetic(pz_wquant kind, pz_quant_config *q) {
  memset(q, 0, sizeof *q);
  q->kind = kind;
  if (kind == PZ_WQ_INT4) {
    q->num_bits = 4;
    q->group_size = 32;
    q->n_targets = 1;
    snprintf(q->targets[0], PZ_QUANT_PATTERN_LEN, "Linear");
    static const char *const ig[] = {"re:.*lm_head.*", "re:.*self_attn.*", "re:.*shared_experts.*",
                                     "re:.*mlp\\.(gate|up|gate_up|down)_proj.*"};
    q->n_ignore = 4;
    for (int i = 0; i < 4; i++) snprintf(q->ignore[i], PZ_QUANT_PATTERN_LEN, "%s", ig[i]);
  } else if (kind == PZ_WQ_FP8) {
    q->block_rows = q->block_cols = 128;
  }
}

static pz_status q_unsupported(const reader *r, const char *field, const char *got, const char *supported) {
  return pz_error(PZ_ERR_CONFIG, "config %s: quantization_config.%s is %s, which prezero does not support (%s)", r->src,
                  field, got, supported);
}

/* A list of pattern strings into dst[PZ_QUANT_MAX_PATTERNS]. */
static pz_status q_patterns(const reader *r, const cJSON *arr, const char *field, char (*dst)[PZ_QUANT_PATTERN_LEN],
                            int *n) {
  *n = 0;
  if (!arr || cJSON_IsNull(arr)) return PZ_OK;
  if (!cJSON_IsArray(arr)) return type_err(r, field, "a list of strings", arr);
  for (const cJSON *e = arr->child; e; e = e->next) {
    if (!cJSON_IsString(e)) return type_err(r, field, "a list of strings", e);
    if (*n >= PZ_QUANT_MAX_PATTERNS)
      return pz_error(PZ_ERR_CONFIG, "config %s: field \"%s\" has more than %d entries; prezero keeps at most %d", r->src,
                      field, PZ_QUANT_MAX_PATTERNS, PZ_QUANT_MAX_PATTERNS);
    if (strlen(e->valuestring) >= PZ_QUANT_PATTERN_LEN)
      return pz_error(PZ_ERR_CONFIG, "config %s: an entry of \"%s\" is longer than %d bytes", r->src, field,
                      PZ_QUANT_PATTERN_LEN - 1);
    if (!strncmp(e->valuestring, "re:", 3)) {
      regex_t rx;
      if (!compile_pattern(e->valuestring + 3, &rx))
        return pz_error(PZ_ERR_CONFIG, "config %s: \"%s\" entry \"%s\" is not a regular expression prezero can read",
                        r->src, field, e->valuestring);
      regfree(&rx);
    }
    snprintf(dst[(*n)++], PZ_QUANT_PATTERN_LEN, "%s", e->valuestring);
  }
  return PZ_OK;
}

#define Q_SUPPORTED "compressed-tensors pack-quantized INT4 (num_bits 4, group_size 32, symmetric, strategy \"group\") " \
                    "or fp8 with weight_block_size"

static pz_status parse_int4_group(const reader *r, const cJSON *q, pz_quant_config *out) {
  const cJSON *groups = cJSON_GetObjectItemCaseSensitive(q, "config_groups");
  if (!cJSON_IsObject(groups) || !groups->child)
    return pz_error(PZ_ERR_CONFIG, "config %s: quantization_config.config_groups is missing or empty; %s needs one group",
                    r->src, "compressed-tensors");
  if (groups->child->next)
    return pz_error(PZ_ERR_CONFIG, "config %s: quantization_config.config_groups has more than one group, which prezero "
                    "does not support (one INT4 group)", r->src);
  const cJSON *g = groups->child;
  char where[160];
  if (!cJSON_IsObject(g)) return type_err(r, "quantization_config.config_groups.*", "an object", g);
  const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(g, "format");
  if (cJSON_IsString(fmt) && strcmp(fmt->valuestring, "pack-quantized"))
    return q_unsupported(r, "config_groups.format", fmt->valuestring, Q_SUPPORTED);
  const char *acts[] = {"input_activations", "output_activations"};
  for (int i = 0; i < 2; i++) {
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(g, acts[i]);
    if (a && !cJSON_IsNull(a)) {
      snprintf(where, sizeof where, "config_groups.%s.%s", g->string, acts[i]);
      return q_unsupported(r, where, "set", "weight-only quantisation: W4A16, activations stay bf16");
    }
  }
  const cJSON *w = cJSON_GetObjectItemCaseSensitive(g, "weights");
  if (!cJSON_IsObject(w))
    return pz_error(PZ_ERR_CONFIG, "config %s: quantization_config.config_groups.%s.weights is missing", r->src, g->string);
  const cJSON *ty = cJSON_GetObjectItemCaseSensitive(w, "type");
  if (ty && !(cJSON_IsString(ty) && !strcmp(ty->valuestring, "int")))
    return q_unsupported(r, "weights.type", cJSON_IsString(ty) ? ty->valuestring : "not a string", Q_SUPPORTED);
  const cJSON *nb = cJSON_GetObjectItemCaseSensitive(w, "num_bits");
  if (!cJSON_IsNumber(nb) || nb->valuedouble != 4) {
    char got[64];
    snprintf(got, sizeof got, cJSON_IsNumber(nb) ? "%g" : "missing", cJSON_IsNumber(nb) ? nb->valuedouble : 0.0);
    return q_unsupported(r, "weights.num_bits", got, "num_bits 4");
  }
  const cJSON *gs = cJSON_GetObjectItemCaseSensitive(w, "group_size");
  if (!cJSON_IsNumber(gs) || gs->valuedouble != 32) {
    char got[64];
    snprintf(got, sizeof got, cJSON_IsNumber(gs) ? "%g" : "missing or null", cJSON_IsNumber(gs) ? gs->valuedouble : 0.0);
    return q_unsupported(r, "weights.group_size", got, "group_size 32");
  }
  const cJSON *stg = cJSON_GetObjectItemCaseSensitive(w, "strategy");
  if (!cJSON_IsString(stg) || strcmp(stg->valuestring, "group"))
    return q_unsupported(r, "weights.strategy", cJSON_IsString(stg) ? stg->valuestring : "missing", "strategy \"group\"");
  const cJSON *sym = cJSON_GetObjectItemCaseSensitive(w, "symmetric");
  if (!cJSON_IsTrue(sym)) return q_unsupported(r, "weights.symmetric", "not true", "symmetric INT4 (no zero points)");
  const cJSON *ao = cJSON_GetObjectItemCaseSensitive(w, "actorder");
  if (ao && !cJSON_IsNull(ao) && !cJSON_IsFalse(ao))
    return q_unsupported(r, "weights.actorder", cJSON_IsString(ao) ? ao->valuestring : "set",
                         "actorder null: columns in their natural order");
  const cJSON *dyn = cJSON_GetObjectItemCaseSensitive(w, "dynamic");
  if (dyn && !cJSON_IsFalse(dyn) && !cJSON_IsNull(dyn))
    return q_unsupported(r, "weights.dynamic", "set", "static weight scales");
  out->kind = PZ_WQ_INT4;
  out->num_bits = 4;
  out->group_size = 32;
  PZ_CHECK(q_patterns(r, cJSON_GetObjectItemCaseSensitive(g, "targets"), "quantization_config.config_groups.*.targets",
                      out->targets, &out->n_targets));
  if (out->n_targets == 0)
    return pz_error(PZ_ERR_CONFIG, "config %s: quantization_config.config_groups.%s.targets is missing or empty", r->src,
                    g->string);
  return q_patterns(r, cJSON_GetObjectItemCaseSensitive(q, "ignore"), "quantization_config.ignore", out->ignore,
                    &out->n_ignore);
}

static pz_status parse_quant(const reader *r, const cJSON *outer, pz_quant_config *out) {
  memset(out, 0, sizeof *out);
  const cJSON *q = cJSON_GetObjectItemCaseSensitive(r->root, "quantization_config");
  if (!q && outer) q = cJSON_GetObjectItemCaseSensitive(outer, "quantization_config");
  if (!q || cJSON_IsNull(q)) return PZ_OK;
  if (!cJSON_IsObject(q)) return type_err(r, "quantization_config", "an object", q);
  PZ_CHECK(check_duplicates(r, q, "quantization_config."));
  const cJSON *m = cJSON_GetObjectItemCaseSensitive(q, "quant_method");
  if (!cJSON_IsString(m))
    return pz_error(PZ_ERR_CONFIG, "config %s: quantization_config.quant_method is missing; supported: %s", r->src,
                    Q_SUPPORTED);
  if (!strcmp(m->valuestring, "compressed-tensors")) {
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(q, "format");
    if (!cJSON_IsString(fmt) || strcmp(fmt->valuestring, "pack-quantized"))
      return q_unsupported(r, "format", cJSON_IsString(fmt) ? fmt->valuestring : "missing", Q_SUPPORTED);
    const cJSON *kv = cJSON_GetObjectItemCaseSensitive(q, "kv_cache_scheme");
    if (kv && !cJSON_IsNull(kv)) return q_unsupported(r, "kv_cache_scheme", "set", "a bf16 KV cache");
    return parse_int4_group(r, q, out);
  }
  if (!strcmp(m->valuestring, "fp8")) {
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(q, "fmt");
    if (fmt && !(cJSON_IsString(fmt) && !strcmp(fmt->valuestring, "e4m3")))
      return q_unsupported(r, "fmt", cJSON_IsString(fmt) ? fmt->valuestring : "not a string", "fp8 fmt \"e4m3\"");
    const cJSON *bs = cJSON_GetObjectItemCaseSensitive(q, "weight_block_size");
    if (!bs || cJSON_IsNull(bs)) return q_unsupported(r, "weight_block_size", "missing (per-tensor FP8)", Q_SUPPORTED);
    const cJSON *a = cJSON_IsArray(bs) && cJSON_GetArraySize(bs) == 2 ? cJSON_GetArrayItem(bs, 0) : NULL;
    const cJSON *b = a ? cJSON_GetArrayItem(bs, 1) : NULL;
    if (!cJSON_IsNumber(a) || !cJSON_IsNumber(b) || a->valuedouble < 1 || b->valuedouble < 1 || a->valuedouble > 65536 ||
        b->valuedouble > 65536 || a->valuedouble != floor(a->valuedouble) || b->valuedouble != floor(b->valuedouble))
      return pz_error(PZ_ERR_CONFIG, "config %s: quantization_config.weight_block_size must be [rows, cols], integers "
                      "1..65536", r->src);
    out->kind = PZ_WQ_FP8;
    out->block_rows = (int64_t)a->valuedouble;
    out->block_cols = (int64_t)b->valuedouble;
    return PZ_OK;
  }
  char got[96];
  snprintf(got, sizeof got, "\"%.80s\"", m->valuestring);
  return q_unsupported(r, "quant_method", got, Q_SUPPORTED);
}

static pz_status parse_root(const reader *r, pz_model_config *c) {
  if (!cJSON_IsObject(r->root)) return pz_error(PZ_ERR_CONFIG, "config %s: top level must be a JSON object", r->src);
  PZ_CHECK(check_duplicates(r, r->root, ""));
  const cJSON *rs = cJSON_GetObjectItemCaseSensitive(r->root, "rope_scaling");
  if (cJSON_IsObject(rs)) PZ_CHECK(check_duplicates(r, rs, "rope_scaling."));
  /* No MLA field and a model_type outside the family: another family (Llama, Qwen, Mixtral, ...),
   * not a broken DeepSeek config. A deepseek_* / kimi_* model_type, or any MLA field, means a
   * DeepSeek config with a field missing: the field reader below names it. */
  const cJSON *mt = cJSON_GetObjectItemCaseSensitive(r->root, "model_type");
  bool family = cJSON_IsString(mt) && (!strncmp(mt->valuestring, "deepseek", 8) || !strncmp(mt->valuestring, "kimi", 4));
  static const char *const mla_fields[] = {"q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim"};
  for (size_t i = 0; i < sizeof mla_fields / sizeof mla_fields[0]; i++)
    family |= cJSON_GetObjectItemCaseSensitive(r->root, mla_fields[i]) != NULL;
  if (!family) {
    return pz_error(PZ_ERR_CONFIG, "config %s: model_type \"%s\" has no MLA fields (q_lora_rank, kv_lora_rank); prezero "
                    "runs the DeepSeek-V2 family only (DeepSeek-V2, V2-Lite, V3, Kimi-K2 configs)", r->src,
                    cJSON_IsString(mt) ? mt->valuestring : "?");
  }
  /* Both LoRA ranks missing: name both (the reader below would name only q_lora_rank). */
  if (!cJSON_GetObjectItemCaseSensitive(r->root, "q_lora_rank") &&
      !cJSON_GetObjectItemCaseSensitive(r->root, "kv_lora_rank"))
    return pz_error(PZ_ERR_CONFIG, "config %s: required fields \"kv_lora_rank\" and \"q_lora_rank\" are missing (MLA "
                    "ranks; q_lora_rank is null for V2-Lite)", r->src);
  PZ_CHECK(get_int(r, "hidden_size", true, false, 1, &c->hidden_size));
  PZ_CHECK(get_int(r, "num_hidden_layers", true, false, 1, &c->num_hidden_layers));
  if (c->num_hidden_layers > PZ_CONFIG_MAX_LAYERS)
    return pz_error(PZ_ERR_CONFIG, "config %s: field \"num_hidden_layers\" is %lld, must be <= %d", r->src,
                    (long long)c->num_hidden_layers, PZ_CONFIG_MAX_LAYERS);
  PZ_CHECK(get_int(r, "num_attention_heads", true, false, 1, &c->num_attention_heads));
  PZ_CHECK(get_int(r, "q_lora_rank", true, true, 0, &c->q_lora_rank));
  PZ_CHECK(get_int(r, "kv_lora_rank", true, false, 1, &c->kv_lora_rank));
  PZ_CHECK(get_int(r, "qk_nope_head_dim", true, false, 1, &c->qk_nope_head_dim));
  PZ_CHECK(get_int(r, "qk_rope_head_dim", true, false, 2, &c->qk_rope_head_dim));
  PZ_CHECK(get_int(r, "v_head_dim", true, false, 1, &c->v_head_dim));
  PZ_CHECK(get_int(r, "n_routed_experts", true, true, 0, &c->n_routed_experts));
  c->n_shared_experts = 0;
  PZ_CHECK(get_int(r, "n_shared_experts", false, true, 0, &c->n_shared_experts));
  PZ_CHECK(get_int(r, "num_experts_per_tok", true, true, 0, &c->num_experts_per_tok));
  PZ_CHECK(get_int(r, "moe_intermediate_size", true, false, 1, &c->moe_intermediate_size));
  PZ_CHECK(get_int(r, "intermediate_size", true, false, 1, &c->intermediate_size));
  c->first_k_dense_replace = 0;
  PZ_CHECK(get_int(r, "first_k_dense_replace", false, false, 0, &c->first_k_dense_replace));
  c->moe_layer_freq = 1;
  PZ_CHECK(get_int(r, "moe_layer_freq", false, false, 1, &c->moe_layer_freq));
  c->n_group = 1;
  PZ_CHECK(get_int(r, "n_group", false, true, 1, &c->n_group));
  if (c->n_group == 0) c->n_group = 1;
  c->topk_group = 1;
  PZ_CHECK(get_int(r, "topk_group", false, true, 1, &c->topk_group));
  if (c->topk_group == 0) c->topk_group = 1;
  static const char *const methods[] = {"greedy", "group_limited_greedy", "noaux_tc"};
  int m = 0;
  PZ_CHECK(get_enum(r, "topk_method", methods, 3, &m));
  c->topk_method = (pz_topk_method)m;
  static const char *const scorings[] = {"softmax", "sigmoid"};
  int s = 0;
  PZ_CHECK(get_enum(r, "scoring_func", scorings, 2, &s));
  c->scoring_func = (pz_scoring)s;
  c->norm_topk_prob = false;
  PZ_CHECK(get_bool(r, "norm_topk_prob", &c->norm_topk_prob));
  c->routed_scaling_factor = 1.f;
  PZ_CHECK(get_float(r, r->root, "routed_scaling_factor", false, &c->routed_scaling_factor));
  PZ_CHECK(get_int(r, "vocab_size", true, false, 1, &c->vocab_size));
  PZ_CHECK(get_int(r, "max_position_embeddings", true, false, 1, &c->max_position_embeddings));
  c->rms_norm_eps = 1e-6f;
  PZ_CHECK(get_float(r, r->root, "rms_norm_eps", false, &c->rms_norm_eps));
  c->rope.theta = 10000.f;
  PZ_CHECK(get_float(r, r->root, "rope_theta", false, &c->rope.theta));
  c->rope.factor = 1.f;
  c->rope.original_max_position_embeddings = c->max_position_embeddings;
  c->rope.beta_fast = 32.f;
  c->rope.beta_slow = 1.f;
  c->rope.mscale = 1.f;
  c->rope.mscale_all_dim = 0.f;
  PZ_CHECK(parse_rope_scaling(r, c));

  /* Consistency of the values read. */
  if (c->qk_rope_head_dim % 2)
    return pz_error(PZ_ERR_CONFIG, "config %s: field \"qk_rope_head_dim\" must be even (RoPE rotates pairs), got %lld",
                    r->src, (long long)c->qk_rope_head_dim);
  if (!(c->rms_norm_eps > 0.f)) return pz_error(PZ_ERR_CONFIG, "config %s: field \"rms_norm_eps\" must be > 0", r->src);
  if (!(c->rope.theta > 0.f)) return pz_error(PZ_ERR_CONFIG, "config %s: field \"rope_theta\" must be > 0", r->src);
  if (c->rope.factor > 1.f && c->rope.theta == 1.f) /* YaRN divides by log(rope_theta) */
    return pz_error(PZ_ERR_CONFIG, "config %s: field \"rope_theta\" must not be 1 with YaRN rope_scaling", r->src);
  if (c->first_k_dense_replace < c->num_hidden_layers && c->n_routed_experts > 0) {
    if (c->num_experts_per_tok < 1 || c->num_experts_per_tok > c->n_routed_experts)
      return pz_error(PZ_ERR_CONFIG, "config %s: field \"num_experts_per_tok\" (%lld) must be in 1..n_routed_experts (%lld)",
                      r->src, (long long)c->num_experts_per_tok, (long long)c->n_routed_experts);
    if (c->n_routed_experts % c->n_group)
      return pz_error(PZ_ERR_CONFIG, "config %s: field \"n_group\" (%lld) must divide n_routed_experts (%lld)",
                      r->src, (long long)c->n_group, (long long)c->n_routed_experts);
    if (c->topk_group > c->n_group)
      return pz_error(PZ_ERR_CONFIG, "config %s: field \"topk_group\" (%lld) must be <= n_group (%lld)", r->src,
                      (long long)c->topk_group, (long long)c->n_group);
    if (c->num_experts_per_tok > c->topk_group * (c->n_routed_experts / c->n_group))
      return pz_error(PZ_ERR_CONFIG, "config %s: num_experts_per_tok (%lld) exceeds the experts in topk_group groups (%lld)",
                      r->src, (long long)c->num_experts_per_tok,
                      (long long)(c->topk_group * (c->n_routed_experts / c->n_group)));
  }
  return PZ_OK;
}

pz_status pz_config_parse(const char *json, size_t len, const char *source, pz_model_config *out) {
  if (!json || !out) return pz_error(PZ_ERR_INVALID_ARG, "pz_config_parse: NULL argument");
  const char *src = source ? source : "(text)";
  const char *end = NULL;
  cJSON *root = cJSON_ParseWithLengthOpts(json, len, &end, false);
  if (!root) {
    const char *e = cJSON_GetErrorPtr();
    size_t off = (e && e >= json && e <= json + len) ? (size_t)(e - json) : len;
    int line = 1;
    for (size_t i = 0; i < off; i++) line += json[i] == '\n';
    return pz_error(PZ_ERR_CONFIG, "config %s: malformed or truncated JSON at byte %zu (line %d) of %zu",
                    src, off, line, len);
  }
  /* Only whitespace may follow the value. */
  for (const char *p = end; p && p < json + len && *p; p++)
    if (*p != ' ' && *p != '\n' && *p != '\r' && *p != '\t') {
      cJSON_Delete(root);
      return pz_error(PZ_ERR_CONFIG, "config %s: unexpected text after the JSON object at byte %zu", src,
                      (size_t)(p - json));
    }
  memset(out, 0, sizeof *out);
  reader r = {root, src};
  const cJSON *tc = cJSON_GetObjectItemCaseSensitive(root, "text_config");
  if (tc) {
    if (!cJSON_IsObject(tc)) {
      pz_status st = type_err(&r, "text_config", "an object", tc);
      cJSON_Delete(root);
      return st;
    }
    r.root = tc;
  }
  pz_status st = parse_root(&r, out);
  if (st == PZ_OK) st = parse_quant(&r, tc ? root : NULL, &out->quant);
  if (st == PZ_OK) {
    out->text_config = tc != NULL;
    const cJSON *mt = cJSON_GetObjectItemCaseSensitive(r.root, "model_type");
    if (!cJSON_IsString(mt)) mt = cJSON_GetObjectItemCaseSensitive(root, "model_type");
    snprintf(out->name, sizeof out->name, "%s", cJSON_IsString(mt) ? mt->valuestring : src);
  }
  cJSON_Delete(root);
  return st;
}

static pz_status read_file(const char *path, char **text, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return pz_error(PZ_ERR_IO, "config %s: cannot open (%s)", path, strerror(errno));
  struct stat sb; /* a directory opens, then fails with a bare "read error": say what it is */
  if (fstat(fileno(f), &sb) == 0 && S_ISDIR(sb.st_mode)) {
    fclose(f);
    return pz_error(PZ_ERR_IO, "config %s: is a directory, not a config.json file", path);
  }
  size_t cap = 1 << 16, n = 0;
  char *buf = malloc(cap);
  for (;;) {
    if (!buf) { fclose(f); return pz_error(PZ_ERR_OOM, "config %s: out of memory", path); }
    n += fread(buf + n, 1, cap - n, f);
    if (n < cap) break;
    if (cap > (64u << 20)) { free(buf); fclose(f); return pz_error(PZ_ERR_CONFIG, "config %s: larger than 64 MiB", path); }
    cap *= 2;
    char *nb = realloc(buf, cap);
    if (!nb) free(buf);
    buf = nb;
  }
  int err = ferror(f);
  fclose(f);
  if (err) { free(buf); return pz_error(PZ_ERR_IO, "config %s: read error", path); }
  *text = buf;
  *len = n;
  return PZ_OK;
}

pz_status pz_config_load(const char *name_or_path, pz_model_config *out) {
  if (!out) return pz_error(PZ_ERR_INVALID_ARG, "pz_config_load: NULL output");
  const char *name = (name_or_path && name_or_path[0]) ? name_or_path : "tiny";
  size_t nl = strlen(name);
  bool is_path = strchr(name, '/') || (nl > 5 && !strcmp(name + nl - 5, ".json"));
  if (!is_path) {
    for (int i = 0; pz_embedded_presets[i].name; i++)
      if (!strcmp(pz_embedded_presets[i].name, name)) {
        PZ_CHECK(pz_config_parse(pz_embedded_presets[i].json, strlen(pz_embedded_presets[i].json), name, out));
        snprintf(out->name, sizeof out->name, "%s", name);
        return PZ_OK;
      }
    return pz_error(PZ_ERR_NOT_FOUND, "unknown model preset \"%s\" (presets: %s, or a path to a config.json)",
                    name, pz_config_preset_names());
  }
  char *text = NULL;
  size_t len = 0;
  PZ_CHECK(read_file(name, &text, &len));
  pz_status st = pz_config_parse(text, len, name, out);
  free(text);
  return st;
}

bool pz_config_layer_is_moe(const pz_model_config *c, int64_t layer) {
  return c->n_routed_experts > 0 && layer >= c->first_k_dense_replace && layer % c->moe_layer_freq == 0;
}

float pz_yarn_get_mscale(float scale, float mscale) {
  if (scale <= 1.f) return 1.f;
  return 0.1f * mscale * logf(scale) + 1.f;
}
