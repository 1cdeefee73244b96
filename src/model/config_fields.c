/* The config.json reader's typed field readers (integers, floats, booleans, enumerations), the RoPE
 * object lookup and the duplicate-key check, shared by the MLA and GQA parsers and quant_config.c. */
#include "model/config.h"
#include "model/config_read.h"
#include "model/config_impl.h"
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

pz_status pz_cfg_type_err(const reader *r, const char *field, const char *want, const cJSON *it) {
  const char *got = cJSON_IsString(it) ? "a string" : cJSON_IsBool(it) ? "a boolean"
                  : cJSON_IsNull(it) ? "null" : cJSON_IsArray(it) ? "an array"
                  : cJSON_IsObject(it) ? "an object" : cJSON_IsNumber(it) ? "a number" : "invalid";
  return pz_error(PZ_ERR_CONFIG, "config %s: field \"%s\" must be %s, got %s", r->src, field, want, got);
}

/* Integer field `key` of obj, named `field` in messages. required: missing -> error; else *v keeps
 * its default. null_ok: null -> 0. */
pz_status pz_cfg_get_int_in(const reader *r, const cJSON *obj, const char *key, const char *field,
                            bool required, bool null_ok, int64_t min, int64_t *v) {
  const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, key);
  if (!it) {
    if (required) return pz_error(PZ_ERR_CONFIG, "config %s: required field \"%s\" is missing", r->src, field);
    return PZ_OK;
  }
  if (cJSON_IsNull(it) && null_ok) { *v = 0; return PZ_OK; }
  if (!cJSON_IsNumber(it)) return pz_cfg_type_err(r, field, null_ok ? "an integer or null" : "an integer", it);
  double d = it->valuedouble;
  if (d != floor(d) || fabs(d) > 9.0e15) return pz_cfg_type_err(r, field, "an integer", it);
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

/* Integer field of the config object (pz_cfg_get_int_in on r->root). */
pz_status pz_cfg_get_int(const reader *r, const char *field, bool required, bool null_ok, int64_t min,
                         int64_t *v) {
  return pz_cfg_get_int_in(r, r->root, field, field, required, null_ok, min, v);
}

/* Float field `key` of obj, named `field` in messages. */
pz_status pz_cfg_get_float_in(const reader *r, const cJSON *obj, const char *key, const char *field,
                              bool required, float *v) {
  const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, key);
  if (!it) {
    if (required) return pz_error(PZ_ERR_CONFIG, "config %s: required field \"%s\" is missing", r->src, field);
    return PZ_OK;
  }
  if (!cJSON_IsNumber(it)) return pz_cfg_type_err(r, field, "a number", it);
  if (!isfinite((float)it->valuedouble)) /* 1e999 parses as inf; NaN logits would follow */
    return pz_error(PZ_ERR_CONFIG, "config %s: field \"%s\" is %g, must be a finite float", r->src, field,
                    it->valuedouble);
  *v = (float)it->valuedouble;
  return PZ_OK;
}

pz_status pz_cfg_get_float(const reader *r, const cJSON *obj, const char *field, bool required, float *v) {
  return pz_cfg_get_float_in(r, obj, field, field, required, v);
}

pz_status pz_cfg_get_bool(const reader *r, const char *field, bool *v) {
  const cJSON *it = cJSON_GetObjectItemCaseSensitive(r->root, field);
  if (!it) return PZ_OK;
  if (!cJSON_IsBool(it)) return pz_cfg_type_err(r, field, "a boolean", it);
  *v = cJSON_IsTrue(it);
  return PZ_OK;
}

/* String field matched against a list; *idx keeps its default when absent. */
pz_status pz_cfg_get_enum(const reader *r, const char *field, const char *const *names, int n, int *idx) {
  const cJSON *it = cJSON_GetObjectItemCaseSensitive(r->root, field);
  if (!it) return PZ_OK;
  if (!cJSON_IsString(it)) return pz_cfg_type_err(r, field, "a string", it);
  for (int i = 0; i < n; i++)
    if (!strcmp(it->valuestring, names[i])) { *idx = i; return PZ_OK; }
  char list[200] = "";
  for (int i = 0; i < n; i++) {
    strncat(list, i ? ", " : "", sizeof list - strlen(list) - 1);
    strncat(list, names[i], sizeof list - strlen(list) - 1);
  }
  return pz_error(PZ_ERR_CONFIG, "config %s: field \"%s\" is \"%.64s\"%s, supported: %s", r->src, field,
                  it->valuestring, strlen(it->valuestring) > 64 ? " (cut)" : "", list);
}


/* The RoPE object of the config: rope_scaling, or transformers 5's rope_parameters (whose
 * rope_theta, when given, is read into *theta); not both. *obj is NULL when neither is an object
 * (absent or null), else the object to read, *from the one it came from (rope_parameters or NULL)
 * and *name its field name for messages. */
pz_status pz_cfg_rope_object(const reader *r, float *theta, const cJSON **obj, const cJSON **from,
                             const char **name) {
  const cJSON *rs = cJSON_GetObjectItemCaseSensitive(r->root, "rope_scaling");
  const cJSON *rp = cJSON_GetObjectItemCaseSensitive(r->root, "rope_parameters");
  *obj = *from = NULL;
  *name = "rope_scaling";
  if (rp && !cJSON_IsNull(rp)) {
    if (!cJSON_IsObject(rp)) return pz_cfg_type_err(r, "rope_parameters", "an object or null", rp);
    if (rs && !cJSON_IsNull(rs))
      return pz_error(PZ_ERR_CONFIG, "config %s: fields \"rope_scaling\" and \"rope_parameters\" are both given; "
                      "give one", r->src);
    PZ_CHECK(pz_cfg_check_duplicates(r, rp, "rope_parameters."));
    PZ_CHECK(pz_cfg_get_float_in(r, rp, "rope_theta", "rope_parameters.rope_theta", false, theta));
    rs = *from = rp;
    *name = "rope_parameters";
  }
  if (!rs || cJSON_IsNull(rs)) return PZ_OK;
  if (!cJSON_IsObject(rs)) return pz_cfg_type_err(r, *name, "an object or null", rs);
  *obj = rs;
  return PZ_OK;
}

/* Llama 4's attention temperature tuning in the RoPE object ("llama_4_scaling_beta": Mistral4Config, Ministral3Config,
 * and Mistral's DeepSeek-V3-layout exports): the queries are scaled by 1 + beta * ln(1 + floor(p / orig)), orig the
 * RoPE object's original_max_position_embeddings. That is exactly 1 below orig, where it is the attention prezero
 * runs; so, as with Qwen2.5-1M's dual chunks, the positions are limited to those: max_position_embeddings becomes
 * min(max_position_embeddings, orig), the top-level orig when it is lower (transformers 5 may write it over the
 * object's). beta null or 0 changes nothing. */
pz_status pz_cfg_llama4_scaling(const reader *r, pz_model_config *c) {
  const cJSON *rs, *from;
  const char *name;
  float theta = 0.f;
  PZ_CHECK(pz_cfg_rope_object(r, &theta, &rs, &from, &name));
  const cJSON *b = rs ? cJSON_GetObjectItemCaseSensitive(rs, "llama_4_scaling_beta") : NULL;
  if (!b || cJSON_IsNull(b)) return PZ_OK;
  char f[64];
  snprintf(f, sizeof f, "%s.llama_4_scaling_beta", name);
  float beta = 0.f;
  PZ_CHECK(pz_cfg_get_float_in(r, rs, "llama_4_scaling_beta", f, true, &beta));
  if (beta == 0.f) return PZ_OK;
  int64_t own = 0, top = 0;
  snprintf(f, sizeof f, "%s.original_max_position_embeddings", name);
  PZ_CHECK(pz_cfg_get_int_in(r, rs, "original_max_position_embeddings", f, false, true, 1, &own));
  PZ_CHECK(pz_cfg_get_int_in(r, r->root, "original_max_position_embeddings", "original_max_position_embeddings", false,
                             true, 1, &top));
  if (own <= 0 && top <= 0)
    return pz_error(PZ_ERR_CONFIG, "config %s: field \"%s.llama_4_scaling_beta\" is %g without \"%s\" (the position from "
                    "which the queries are scaled); give it", r->src, name, beta, f);
  const int64_t orig = own > 0 && (top <= 0 || own < top) ? own : top;
  if (orig < c->max_position_embeddings) c->max_position_embeddings = orig;
  return PZ_OK;
}

/* A key given twice: cJSON reads the first, Python's json (transformers) the last; refuse rather
 * than silently disagree with the reference implementation. */
typedef struct { const char *name; size_t at; } dup_key;
static int dup_key_cmp(const void *x, const void *y) {
  const dup_key *a = x, *b = y;
  int c = strcmp(a->name, b->name);
  return c ? c : (a->at > b->at) - (a->at < b->at);
}

/* Sorted (name, position) pairs, so that a config of many fields (a 64 MiB file holds millions) is
 * checked in n log n, not n^2 (50000 fields took 13 s); the message names the same field as a
 * pairwise scan would, the first in file order that appears again. */
pz_status pz_cfg_check_duplicates(const reader *r, const cJSON *obj, const char *where) {
  size_t n = 0;
  for (const cJSON *a = obj->child; a; a = a->next) n += a->string != NULL;
  if (n < 2) return PZ_OK;
  dup_key *k = malloc(n * sizeof *k);
  if (!k) return pz_error(PZ_ERR_OOM, "config %s: out of memory checking %zu fields for duplicates", r->src, n);
  size_t i = 0, at = 0;
  for (const cJSON *a = obj->child; a; a = a->next, at++)
    if (a->string) k[i++] = (dup_key){a->string, at};
  qsort(k, n, sizeof *k, dup_key_cmp);
  const char *first = NULL;
  size_t first_at = 0;
  for (i = 0; i + 1 < n; i++) /* k[i] is the first of its name when k[i - 1] differs */
    if (!strcmp(k[i].name, k[i + 1].name) && (i == 0 || strcmp(k[i - 1].name, k[i].name)) &&
        (!first || k[i].at < first_at))
      first = k[i].name, first_at = k[i].at;
  pz_status st = first ? pz_error(PZ_ERR_CONFIG, "config %s: field \"%s%s\" appears twice", r->src, where, first) : PZ_OK;
  free(k);
  return st;
}

pz_status pz_cfg_get_trunk(const reader *r, bool required, pz_model_config *c) {
  PZ_CHECK(pz_cfg_get_int(r, "hidden_size", required, false, 1, &c->hidden_size));
  PZ_CHECK(pz_cfg_get_int(r, "num_hidden_layers", required, false, 1, &c->num_hidden_layers));
  if (c->num_hidden_layers > PZ_CONFIG_MAX_LAYERS)
    return pz_error(PZ_ERR_CONFIG, "config %s: field \"num_hidden_layers\" is %lld, must be <= %d", r->src,
                    (long long)c->num_hidden_layers, PZ_CONFIG_MAX_LAYERS);
  return pz_cfg_get_int(r, "num_attention_heads", required, false, 1, &c->num_attention_heads);
}

pz_status pz_cfg_check_group_routing(const reader *r, const pz_model_config *c, int64_t min_per_group) {
  const int64_t E = c->n_routed_experts;
  if (E % c->n_group || E / c->n_group < min_per_group)
    return pz_error(PZ_ERR_CONFIG, "config %s: field \"n_group\" (%lld) must divide n_routed_experts (%lld)%s", r->src,
                    (long long)c->n_group, (long long)E,
                    min_per_group > 1 ? " into groups of at least 2 (a group scores by its top-2 experts)" : "");
  if (c->topk_group > c->n_group)
    return pz_error(PZ_ERR_CONFIG, "config %s: field \"topk_group\" (%lld) must be <= n_group (%lld)", r->src,
                    (long long)c->topk_group, (long long)c->n_group);
  if (c->num_experts_per_tok > c->topk_group * (E / c->n_group))
    return pz_error(PZ_ERR_CONFIG, "config %s: field \"num_experts_per_tok\" (%lld) exceeds the experts in topk_group "
                    "groups (%lld)", r->src, (long long)c->num_experts_per_tok, (long long)(c->topk_group * (E / c->n_group)));
  return PZ_OK;
}
