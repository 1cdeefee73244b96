/* Sliding-window attention of the GQA families (config_impl.h pz_cfg_parse_gqa_window): which layers slide and
 * over how many tokens, decided from config.json as transformers 5.25 decides it for each model_type. */
#include "model/config_impl.h"
#include <cjson/cJSON.h>
#include <string.h>

/* Where a family's transformers model puts its sliding layers. */
typedef enum {
  PLACE_NONE,  /* none: LlamaConfig and Glm4MoeConfig have no sliding_window, their models ignore the field */
  PLACE_ALL,   /* every layer when the window is set: MistralModel, MixtralModel, Phi3Model and Qwen3MoeModel build
                  create_sliding_window_causal_mask for all layers when config.sliding_window is not None (a mistral
                  config.json with layer_types is placed by them instead: AutoConfig reads it as ministral) */
  PLACE_LAYERS /* the layers whose layer_types entry is "sliding_attention"; without layer_types, those from
                  max_window_layers on when the window is set (Qwen2Config, Qwen3Config, Dots1Config __post_init__) */
} placement;

/* The family's placement and, for PLACE_LAYERS, its class default of max_window_layers. */
static placement placement_of(gqa_family fam, int64_t *mwl) {
  switch (fam) {
    case FAM_MISTRAL: case FAM_MIXTRAL: case FAM_PHI3: case FAM_QWEN3_MOE: return PLACE_ALL;
    case FAM_QWEN2: case FAM_QWEN3: *mwl = 28; return PLACE_LAYERS;
    case FAM_DOTS1: *mwl = 62; return PLACE_LAYERS;
    default: return PLACE_NONE;
  }
}

static void set_sliding(pz_model_config *c, int64_t layer) {
  c->sliding_layers[layer / 64] |= (uint64_t)1 << (layer % 64);
}

/* layer_types of a family without sliding layers: null, or every entry "full_attention". */
static pz_status check_full_only(const reader *r, const cJSON *lt) {
  for (const cJSON *e = lt->child; e; e = e->next)
    if (!cJSON_IsString(e) || strcmp(e->valuestring, "full_attention"))
      return pz_error(PZ_ERR_CONFIG, "config %s: field \"layer_types\" has an entry other than \"full_attention\"; "
                      "this model_type has no sliding layers in transformers", r->src);
  return PZ_OK;
}

/* Counts the "full_attention" (*n_full) and "sliding_attention" (*n_slide) entries of layer_types; any other entry
 * is refused (transformers' other kinds, chunked or indexed attention, are not run). */
static pz_status count_kinds(const reader *r, const cJSON *lt, int64_t *n_full, int64_t *n_slide) {
  *n_full = *n_slide = 0;
  for (const cJSON *e = lt->child; e; e = e->next) {
    const bool full = cJSON_IsString(e) && !strcmp(e->valuestring, "full_attention");
    const bool slide = cJSON_IsString(e) && !strcmp(e->valuestring, "sliding_attention");
    if (!full && !slide)
      return pz_error(PZ_ERR_CONFIG, "config %s: field \"layer_types\" has an entry other than \"full_attention\" "
                      "and \"sliding_attention\"", r->src);
    *n_full += full;
    *n_slide += slide;
  }
  return PZ_OK;
}

pz_status pz_cfg_parse_gqa_window(const reader *r, gqa_family fam, bool gated, int64_t dflt, pz_model_config *c) {
  c->sliding_window = 0;
  memset(c->sliding_layers, 0, sizeof c->sliding_layers);
  int64_t mwl = 0, sw = dflt;
  PZ_CHECK(pz_cfg_get_int(r, "sliding_window", false, true, INT64_MIN, &sw)); /* null: 0, no window; < 0 below */
  const cJSON *swj = cJSON_GetObjectItemCaseSensitive(r->root, "sliding_window");
  const cJSON *lt = cJSON_GetObjectItemCaseSensitive(r->root, "layer_types");
  if (lt && cJSON_IsNull(lt)) lt = NULL;
  if (lt && !cJSON_IsArray(lt)) return pz_cfg_type_err(r, "layer_types", "a list of strings", lt);
  /* transformers 5.25's AutoConfig loads a model_type mistral config.json that has layer_types as ministral
   * (MinistralConfig: MistralConfig's fields and defaults plus layer_types), whose model slides only the layers
   * listed as "sliding_attention"; without layer_types MinistralConfig slides every layer, as MistralModel does */
  const placement pl = fam == FAM_MISTRAL && lt ? PLACE_LAYERS : placement_of(fam, &mwl);
  if (pl == PLACE_NONE) {
    if (sw > 0 && sw < c->max_position_embeddings)
      return pz_error(PZ_ERR_CONFIG, "config %s: field \"sliding_window\" is %lld, below max_position_embeddings "
                      "(%lld); model_type %s has no sliding window in transformers, so prezero does not run one "
                      "(null or a window >= max_position_embeddings)", r->src, (long long)sw,
                      (long long)c->max_position_embeddings, c->model_type);
    return lt ? check_full_only(r, lt) : PZ_OK;
  }
  bool use = true;
  if (gated) { /* Qwen2Config and the others: sliding_window = sliding_window if use_sliding_window else None */
    use = false;
    PZ_CHECK(pz_cfg_get_bool(r, "use_sliding_window", &use));
    if (!use) sw = 0;
  }
  if (use && sw < 0) /* PLACE_NONE and use_sliding_window false ignore the field, as transformers does */
    return pz_error(PZ_ERR_CONFIG, "config %s: field \"sliding_window\" is %lld; a window is >= 1 tokens, or null "
                    "for none", r->src, (long long)sw);
  if (use && swj && cJSON_IsNumber(swj) && sw == 0)
    return pz_error(PZ_ERR_CONFIG, "config %s: field \"sliding_window\" is 0, which masks every key (transformers "
                    "computes NaN); give a window >= 1 or null", r->src);
  const char *no_window = gated && !use ? "use_sliding_window is false (transformers then has no window)"
                                        : "sliding_window is null";
  int64_t n_full = 0, n_slide = 0;
  if (lt) PZ_CHECK(count_kinds(r, lt, &n_full, &n_slide));
  if (pl == PLACE_ALL) {
    /* layer_types is not the model's: one kind throughout is what its cache and mask agree on (all full: the
     * cache keeps every key and the mask still slides), a mix fails in transformers */
    if (n_full && n_slide)
      return pz_error(PZ_ERR_CONFIG, "config %s: field \"layer_types\" mixes \"full_attention\" and "
                      "\"sliding_attention\"; model_type %s slides every layer by sliding_window (transformers' cache "
                      "and mask then disagree)", r->src, c->model_type);
    if (n_slide && sw <= 0)
      return pz_error(PZ_ERR_CONFIG, "config %s: field \"layer_types\" has \"sliding_attention\" layers but %s; give "
                      "the window", r->src, no_window);
    if (sw > 0)
      for (int64_t L = 0; L < c->num_hidden_layers; L++) set_sliding(c, L);
  } else if (lt) {
    if ((int64_t)cJSON_GetArraySize(lt) != c->num_hidden_layers)
      return pz_error(PZ_ERR_CONFIG, "config %s: field \"layer_types\" has %d entries, must have num_hidden_layers "
                      "(%lld)", r->src, cJSON_GetArraySize(lt), (long long)c->num_hidden_layers);
    if (n_slide && sw <= 0)
      return pz_error(PZ_ERR_CONFIG, "config %s: field \"layer_types\" has \"sliding_attention\" layers but %s; give "
                      "the window", r->src, no_window);
    int64_t L = 0;
    for (const cJSON *e = lt->child; e; e = e->next, L++)
      if (!strcmp(e->valuestring, "sliding_attention")) set_sliding(c, L);
  } else if (sw > 0) {
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(r->root, "max_window_layers");
    if (m && cJSON_IsNull(m))
      return pz_error(PZ_ERR_CONFIG, "config %s: field \"max_window_layers\" is null under sliding_window %lld "
                      "(transformers cannot place the sliding layers); give a number or sliding_window null", r->src,
                      (long long)sw);
    PZ_CHECK(pz_cfg_get_int(r, "max_window_layers", false, false, 0, &mwl));
    for (int64_t L = mwl; L < c->num_hidden_layers; L++) set_sliding(c, L);
  }
  for (int i = 0; i < PZ_CONFIG_WINDOW_WORDS; i++)
    if (c->sliding_layers[i]) c->sliding_window = sw;
  return PZ_OK;
}
