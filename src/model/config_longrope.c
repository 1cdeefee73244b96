/* Phi-3's LongRoPE rope_scaling (model_type phi3, rope type "longrope", or the legacy "su" / "yarn" that
 * Phi3Config reads as longrope), read as transformers 5's Phi3Config and _compute_longrope_parameters read it. */
#include "model/config.h"
#include "model/config_impl.h"
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

/* short_factor or long_factor of rs: a list of n numbers, each > 0, into out[n] (as f32, the values of
 * transformers' torch.tensor(factors, dtype=float32)). */
static pz_status read_factors(const reader *r, const cJSON *rs, const char *key, const char *name, int64_t n,
                              float *out) {
  char f[64];
  snprintf(f, sizeof f, "%s.%s", name, key);
  const cJSON *a = cJSON_GetObjectItemCaseSensitive(rs, key);
  if (!a)
    return pz_error(PZ_ERR_CONFIG, "config %s: required field \"%s\" is missing (model_type phi3's rope types longrope, "
                    "su and yarn are all LongRoPE, which needs short_factor and long_factor)", r->src, f);
  if (!cJSON_IsArray(a)) return pz_cfg_type_err(r, f, "a list of numbers", a);
  const int64_t got = cJSON_GetArraySize(a);
  if (got != n)
    return pz_error(PZ_ERR_CONFIG, "config %s: field \"%s\" has %lld entries, must have rotary dims / 2 = %lld (head_dim "
                    "times partial_rotary_factor, halved)", r->src, f, (long long)got, (long long)n);
  int64_t i = 0;
  for (const cJSON *e = a->child; e; e = e->next, i++) {
    if (!cJSON_IsNumber(e))
      return pz_error(PZ_ERR_CONFIG, "config %s: field \"%s\" has entry %lld that is not a number", r->src, f, (long long)i);
    const float v = (float)e->valuedouble;
    if (!(v > 0.f) || !isfinite(v))
      return pz_error(PZ_ERR_CONFIG, "config %s: field \"%s\" has entry %lld = %g, must be a finite number > 0", r->src, f,
                      (long long)i, e->valuedouble);
    out[i] = v;
  }
  return PZ_OK;
}

/* rs.key (name.key in messages), an optional number kept in double as transformers' Python floats are: 1 with *v
 * set when given (finite, as pz_cfg_get_float_in checks; above lo, or at lo too when lo_ok), 0 when absent or null. */
static pz_status opt_number(const reader *r, const cJSON *rs, const char *key, const char *name, double lo, bool lo_ok,
                            double *v, int *given) {
  char f[64];
  snprintf(f, sizeof f, "%s.%s", name, key);
  const cJSON *it = cJSON_GetObjectItemCaseSensitive(rs, key);
  *given = it && !cJSON_IsNull(it);
  if (!*given) return PZ_OK;
  float chk = 0.f;
  PZ_CHECK(pz_cfg_get_float_in(r, rs, key, f, true, &chk));
  *v = it->valuedouble;
  if (!(lo_ok ? *v >= lo : *v > lo))
    return pz_error(PZ_ERR_CONFIG, "config %s: field \"%s\" is %g, must be %s %g", r->src, f, *v, lo_ok ? ">=" : ">", lo);
  return PZ_OK;
}

pz_status pz_cfg_parse_longrope(const reader *r, const cJSON *rs, const char *name, pz_model_config *c) {
  pz_rope_params *p = &c->rope;
  char f[64];
  /* Phi3Config checks the lists against (hidden_size // num_attention_heads) * partial_rotary_factor rotary
   * dims, its rotary embedding computes with head_dim: they must be the same head size. */
  if (c->hidden_size / c->num_attention_heads != c->head_dim)
    return pz_error(PZ_ERR_CONFIG, "config %s: field \"head_dim\" (%lld) differs from hidden_size / num_attention_heads "
                    "(%lld): Phi3Config checks LongRoPE's factor lists against the latter and rotates by the former, so "
                    "transformers cannot run it", r->src, (long long)c->head_dim,
                    (long long)(c->hidden_size / c->num_attention_heads));
  const int64_t n = c->rotary_dim / 2;
  if (n > PZ_ROPE_MAX_FACTORS)
    return pz_error(PZ_ERR_CONFIG, "config %s: LongRoPE over %lld rotary dims; prezero keeps at most %d factors (%d dims)",
                    r->src, (long long)c->rotary_dim, PZ_ROPE_MAX_FACTORS, 2 * PZ_ROPE_MAX_FACTORS);
  static const char *const mscales[2] = {"short_mscale", "long_mscale"};
  for (int k = 0; k < 2; k++) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(rs, mscales[k]);
    if (it && !cJSON_IsNull(it))
      return pz_error(PZ_ERR_CONFIG, "config %s: field \"%s.%s\" is not supported (transformers ignores it and scales "
                      "cos/sin by attention_factor; other engines apply it); remove it, or give attention_factor",
                      r->src, name, mscales[k]);
  }
  PZ_CHECK(read_factors(r, rs, "short_factor", name, n, p->short_factor));
  PZ_CHECK(read_factors(r, rs, "long_factor", name, n, p->long_factor));
  /* Phi3Config has a top-level original_max_position_embeddings (default 4096) that standardize_rope_params
   * writes over the RoPE object's own: a file without it would run at 4096 in transformers, whatever the
   * RoPE object says, so it is required here. */
  int64_t orig = 0, own = 0;
  snprintf(f, sizeof f, "%s.original_max_position_embeddings", name);
  PZ_CHECK(pz_cfg_get_int_in(r, rs, "original_max_position_embeddings", f, false, true, 1, &own));
  if (!cJSON_GetObjectItemCaseSensitive(r->root, "original_max_position_embeddings"))
    return pz_error(PZ_ERR_CONFIG, "config %s: required field \"original_max_position_embeddings\" is missing (LongRoPE "
                    "switches from short_factor to long_factor there; transformers' Phi3Config would read its default "
                    "4096%s)", r->src, own > 0 ? ", not the RoPE object's own" : "");
  PZ_CHECK(pz_cfg_get_int(r, "original_max_position_embeddings", true, false, 1, &orig));
  p->original_max_position_embeddings = orig;
  /* The cos/sin attention factor (_compute_longrope_parameters, in Python floats: double): attention_factor
   * when given, else with factor (given, or max_position_embeddings / original_max_position_embeddings)
   * 1 for factor <= 1 and sqrt(1 + ln(factor) / ln(original_max_position_embeddings)) above. */
  double factor = (double)c->max_position_embeddings / (double)orig, af = 1.0;
  int given = 0;
  PZ_CHECK(opt_number(r, rs, "factor", name, 1.0, true, &factor, &given));
  PZ_CHECK(opt_number(r, rs, "attention_factor", name, 0.0, false, &af, &given));
  if (!given && factor > 1.0) {
    if (orig < 2) /* ln(1) = 0: transformers divides by zero */
      return pz_error(PZ_ERR_CONFIG, "config %s: field \"original_max_position_embeddings\" is 1; LongRoPE's attention "
                      "factor divides by its logarithm (give attention_factor)", r->src);
    af = sqrt(1.0 + log(factor) / log((double)orig));
  }
  p->factor = (float)factor;
  p->attention_factor = (float)af; /* transformers multiplies its f32 cos / sin by it: f32 arithmetic */
  p->n_factors = (int32_t)n;
  p->type = PZ_ROPE_LONGROPE;
  return PZ_OK;
}
