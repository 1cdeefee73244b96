/* config.json reader (cJSON) for the DeepSeek-V2 family (MLA) and the Llama / Qwen2 / Qwen3 /
 * Qwen3-MoE / Mixtral families (GQA): the embedded preset table (generated from the configs folder
 * by cmake/embed_presets.cmake), loading a preset or file, the JSON checks (NUL bytes, nesting,
 * UTF-8, trailing text) and the choice of family by model_type. The families' fields are read in
 * config_mla.c and config_gqa.c, with the field readers of config_fields.c. */
#include "core/json_tail.h"
#include "core/utf8.h"
#include "model/config.h"
#include "model/config_read.h"
#include "model/config_impl.h"
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* Generated table {name, json}, terminated by {NULL, NULL}. */
extern const struct { const char *name; const char *json; } pz_embedded_presets[];

static char preset_names[2048];
static pthread_once_t preset_names_once = PTHREAD_ONCE_INIT;
static void preset_names_init(void) {
  size_t o = 0;
  for (int i = 0; pz_embedded_presets[i].name && o < sizeof preset_names; i++)
    o += (size_t)snprintf(preset_names + o, sizeof preset_names - o, "%s%s", i ? ", " : "", pz_embedded_presets[i].name);
}

/* Written once (pthread_once): engines created from several threads may ask at the same time. */
const char *pz_config_preset_names(void) {
  pthread_once(&preset_names_once, preset_names_init);
  return preset_names;
}

/* The model_type of the config object (text_config's, else the outer one's), or NULL. */
static const char *model_type_of(const cJSON *root, const cJSON *outer) {
  const cJSON *mt = cJSON_GetObjectItemCaseSensitive(root, "model_type");
  if (!cJSON_IsString(mt) && outer) mt = cJSON_GetObjectItemCaseSensitive(outer, "model_type");
  return cJSON_IsString(mt) ? mt->valuestring : NULL;
}

/* norm_topk_prob with one expert per token: transformers 5's routers (DeepseekV3, Qwen3-MoE, Glm4Moe,
 * Dots1) divide by the top-k sum for any k, giving the one expert weight 1; the MoE op (and DeepSeek's
 * own modeling code, which transformers' DeepseekV2 follows by not normalising at all) normalises from
 * two experts up, giving it its score. The two disagree, so such a config is refused rather than run as
 * one of them. deepseek_v2 (and a config without model_type, read as that family) agrees with the op;
 * Mixtral's softmax over the top k is weight 1 either way. */
static pz_status check_top1_norm(const reader *r, const pz_model_config *c) {
  if (!c->norm_topk_prob || c->num_experts_per_tok != 1 || c->n_routed_experts <= 0 ||
      c->scoring_func == PZ_SCORE_TOPK_SOFTMAX || !c->model_type[0] || !strcmp(c->model_type, "deepseek_v2"))
    return PZ_OK;
  return pz_error(PZ_ERR_CONFIG, "config %s: field \"norm_topk_prob\" true with num_experts_per_tok 1 is not supported "
                  "(transformers gives the one expert weight 1, prezero's MoE op its score); set norm_topk_prob false "
                  "or num_experts_per_tok >= 2", r->src);
}

static pz_status parse_root(const reader *r, const cJSON *outer, pz_model_config *c) {
  if (!cJSON_IsObject(r->root)) return pz_error(PZ_ERR_CONFIG, "config %s: top level must be a JSON object", r->src);
  PZ_CHECK(pz_cfg_check_duplicates(r, r->root, ""));
  const cJSON *rs = cJSON_GetObjectItemCaseSensitive(r->root, "rope_scaling");
  if (cJSON_IsObject(rs)) PZ_CHECK(pz_cfg_check_duplicates(r, rs, "rope_scaling."));
  const char *mt = model_type_of(r->root, outer);
  snprintf(c->model_type, sizeof c->model_type, "%s", mt ? mt : "");
  int fam = mt ? pz_cfg_gqa_family_of(mt) : -1;
  if (fam >= 0) return pz_cfg_parse_gqa(r, (gqa_family)fam, c);
  /* No MLA field and a model_type outside the families: another family (Gemma, Phi-2, ...), not a
   * broken DeepSeek config. deepseek_v2 / deepseek_v3 / a kimi_* model_type, no model_type, or any
   * MLA field means a DeepSeek config with a field missing: the field reader names it. Other deepseek
   * model_types without MLA fields are other layouts (DeepSeek-MoE / LLM v1 "deepseek": multi-head
   * attention; DeepSeek-VL2 "deepseek_vl_v2": the text model under "language_config"): refused as such. */
  bool mla = !mt || !strcmp(mt, "deepseek_v2") || !strcmp(mt, "deepseek_v3") || !strncmp(mt, "kimi", 4);
  static const char *const mla_fields[] = {"q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim"};
  for (size_t i = 0; i < sizeof mla_fields / sizeof mla_fields[0]; i++)
    mla |= cJSON_GetObjectItemCaseSensitive(r->root, mla_fields[i]) != NULL;
  /* MLA variants whose layers prezero does not have: it would run every layer as plain MLA, a
   * different model. Refused by model_type, and by the fields that carry the variant (a config
   * without model_type, or one whose class defaults fill them in). */
  static const struct { const char *mt, *f[3], *what; } variants[] = {
      /* first: DeepSeek-V4's configs carry the V3.2 indexer fields too, and have no kv_lora_rank */
      {"deepseek_v4", {"o_lora_rank", "hc_mult", "compress_rates"},
       "DeepSeek-V4 attention (compressed KV, hyper-connections, grouped low-rank o_proj)"},
      {"deepseek_v32", {"index_topk", "index_n_heads", "index_head_dim"},
       "DeepSeek Sparse Attention (the lightning indexer and its top-k token selection)"},
      {"kimi_linear", {"linear_attn_config", NULL, NULL}, "Kimi Delta Attention (linear attention) layers"},
  };
  for (size_t v = 0; v < sizeof variants / sizeof variants[0]; v++) {
    const char *by = mt && !strcmp(mt, variants[v].mt) ? "model_type" : NULL, *name = mt;
    for (int k = 0; k < 3 && !by && variants[v].f[k]; k++) {
      const cJSON *it = cJSON_GetObjectItemCaseSensitive(r->root, variants[v].f[k]);
      if (it && !cJSON_IsNull(it)) by = "field", name = variants[v].f[k];
    }
    if (by)
      return pz_error(PZ_ERR_CONFIG, "config %s: %s \"%s\" is not supported: prezero has no %s and would run every "
                      "layer as plain MLA; prezero runs deepseek_v2, deepseek_v3, kimi_k2 (MLA) and llama, mistral, "
                      "qwen2, qwen3, qwen3_moe, mixtral, glm4_moe, phi3, dots1 (GQA)", r->src, by, name, variants[v].what);
  }
  if (!mla)
    return pz_error(PZ_ERR_CONFIG, "config %s: model_type \"%.40s\" is not supported; prezero runs the DeepSeek-V2 "
                    "family (deepseek_v2, deepseek_v3, kimi_k2: MLA) and llama, mistral, qwen2, qwen3, qwen3_moe, mixtral, "
                    "glm4_moe, phi3, dots1 (GQA)",
                    r->src, mt);
  return pz_cfg_parse_mla(r, c);
}

/* Every key and string value under obj (an object or array) must be valid UTF-8, as Python's json
 * (transformers) requires; the message names the field by its dotted path (path[0, plen)). */
static pz_status check_utf8(const char *src, const cJSON *obj, char *path, size_t cap, size_t plen) {
  int i = 0;
  for (const cJSON *e = obj->child; e; e = e->next, i++) {
    long at = cJSON_IsObject(obj) && e->string ? pz_utf8_bad_at(e->string) : -1;
    if (at >= 0)
      return pz_error(PZ_ERR_CONFIG, "config %s: a field name %s%.*s%s is not valid UTF-8 (byte 0x%02x at %ld); save "
                      "the file as UTF-8", src, plen ? "in \"" : "at the top level", (int)plen, path, plen ? "\"" : "",
                      (unsigned)(unsigned char)e->string[at], at);
    size_t n = plen;
    if (cJSON_IsObject(obj)) n += (size_t)snprintf(path + plen, cap - plen, "%s%s", plen ? "." : "", e->string);
    else n += (size_t)snprintf(path + plen, cap - plen, "[%d]", i);
    if (n >= cap) n = cap - 1; /* a very deep path is cut in the message */
    at = cJSON_IsString(e) ? pz_utf8_bad_at(e->valuestring) : -1;
    if (at >= 0)
      return pz_error(PZ_ERR_CONFIG, "config %s: field \"%.*s\" is not valid UTF-8 (byte 0x%02x at %ld of the string); "
                      "save the file as UTF-8", src, (int)n, path, (unsigned)(unsigned char)e->valuestring[at], at);
    if (cJSON_IsObject(e) || cJSON_IsArray(e)) PZ_CHECK(check_utf8(src, e, path, cap, n));
    path[plen] = 0;
  }
  return PZ_OK;
}

pz_status pz_config_parse(const char *json, size_t len, const char *source, pz_model_config *out) {
  if (!json || !out) return pz_error(PZ_ERR_INVALID_ARG, "pz_config_parse: NULL argument");
  const char *src = source ? source : "(text)";
  /* A raw NUL byte is not JSON (RFC 8259 allows no control character unescaped, Python's json
   * refuses it), and cJSON's strings end at one: "mod\0el_type" would read as "mod". The file's
   * length is the bytes read, not strlen. */
  const char *nul = memchr(json, 0, len);
  if (nul)
    return pz_error(PZ_ERR_CONFIG, "config %s: invalid JSON: a raw NUL byte at byte %zu of %zu; remove it (save the "
                    "file as plain UTF-8 text)", src, (size_t)(nul - json), len);
  const char *end = NULL;
  cJSON *root = cJSON_ParseWithLengthOpts(json, len, &end, false);
  if (!root) {
    const char *e = cJSON_GetErrorPtr();
    size_t off = (e && e >= json && e <= json + len) ? (size_t)(e - json) : len;
    int line = 1;
    for (size_t i = 0; i < off; i++) line += json[i] == '\n';
    /* NaN / Infinity / -Infinity: not JSON, but what Python's json.dump writes for a non-finite float
     * (and json.load reads back), so a config.json saved from Python can hold them. Name the value
     * and the key before it instead of calling the file truncated. */
    static const char *const nonfinite[] = {"NaN", "Infinity", "-Infinity"};
    for (int k = 0; k < 3; k++) {
      const size_t kl = strlen(nonfinite[k]);
      if (off + kl > len || strncmp(json + off, nonfinite[k], kl)) continue;
      size_t q1 = off, q0;
      while (q1 > 0 && json[q1 - 1] != '"') q1--; /* the closing quote of the key before the value */
      q0 = q1 > 1 ? q1 - 1 : 0;
      while (q0 > 0 && json[q0 - 1] != '"') q0--;
      const int kn = q1 > q0 + 1 && q1 - q0 - 1 <= 64 ? (int)(q1 - q0 - 1) : 0;
      return pz_error(PZ_ERR_CONFIG, "config %s: %s%.*s%s is %s at byte %zu (line %d), which is not JSON (Python's "
                      "json.dump writes it for a non-finite float); give a finite number", src, kn ? "field \"" : "a value",
                      kn, kn ? json + q0 : "", kn ? "\"" : "", nonfinite[k], off, line);
    }
    /* cJSON stops at CJSON_NESTING_LIMIT levels of arrays and objects: valid JSON, so say that
     * rather than "malformed" (depth counted outside strings up to where the parser stopped). */
    long depth = 0;
    for (size_t i = 0, in_str = 0; i < off; i++) {
      const char ch = json[i];
      if (in_str) { if (ch == '\\') i++; else if (ch == '"') in_str = 0; }
      else if (ch == '"') in_str = 1;
      else if (ch == '[' || ch == '{') depth++;
      else if (ch == ']' || ch == '}') depth--;
    }
    if (depth >= CJSON_NESTING_LIMIT && off < len && (json[off] == '[' || json[off] == '{'))
      return pz_error(PZ_ERR_CONFIG, "config %s: arrays and objects nested deeper than %d levels at byte %zu (line %d), "
                      "more than prezero reads; a config.json nests a few levels", src, (int)CJSON_NESTING_LIMIT, off, line);
    return pz_error(PZ_ERR_CONFIG, "config %s: malformed or truncated JSON at byte %zu (line %d) of %zu",
                    src, off, line, len);
  }
  const char *tail = pz_json_tail_bad(end, json + len, false); /* only whitespace may follow the value */
  if (tail) {
    cJSON_Delete(root);
    return pz_error(PZ_ERR_CONFIG, "config %s: unexpected text after the JSON object at byte %zu", src,
                    (size_t)(tail - json));
  }
  /* A \u0000 escape (an unescaped backslash before it) would cut a string short in the parsed
   * tree, so "llama\u0000x" would read as "llama": refused, as Python would not match it either. */
  for (size_t i = 0; i + 6 <= len && json[i]; i++)
    if (json[i] == '\\' && !strncmp(json + i + 1, "u0000", 5)) {
      size_t bs = 0;
      while (bs < i && json[i - 1 - bs] == '\\') bs++;
      if (bs % 2 == 0) {
        cJSON_Delete(root);
        return pz_error(PZ_ERR_CONFIG, "config %s: a string holds the NUL escape \\u0000 at byte %zu; remove it", src, i);
      }
    }
  char path[256] = "";
  pz_status ust = cJSON_IsObject(root) || cJSON_IsArray(root) ? check_utf8(src, root, path, sizeof path, 0) : PZ_OK;
  if (ust != PZ_OK) {
    cJSON_Delete(root);
    return ust;
  }
  memset(out, 0, sizeof *out);
  reader r = {root, src};
  const cJSON *tc = cJSON_GetObjectItemCaseSensitive(root, "text_config");
  if (tc) {
    if (!cJSON_IsObject(tc)) {
      pz_status st = pz_cfg_type_err(&r, "text_config", "an object", tc);
      cJSON_Delete(root);
      return st;
    }
    r.root = tc;
  }
  pz_status st = parse_root(&r, tc ? root : NULL, out);
  if (st == PZ_OK) st = check_top1_norm(&r, out);
  if (st == PZ_OK) st = pz_cfg_parse_quant(&r, tc ? root : NULL, &out->quant);
  if (st == PZ_OK) {
    out->text_config = tc != NULL;
    const char *mt = model_type_of(r.root, tc ? root : NULL);
    snprintf(out->name, sizeof out->name, "%s", mt ? mt : src);
  }
  cJSON_Delete(root);
  return st;
}

static pz_status read_file(const char *path, char **text, size_t *len) {
  /* Checked before opening: a directory opens, then fails with a bare "read error", and opening a
   * FIFO blocks until a writer comes (a hang), so only a regular file is opened. */
  struct stat sb;
  const bool odd = stat(path, &sb) == 0 && !S_ISREG(sb.st_mode);
  if (odd && S_ISDIR(sb.st_mode))
    return pz_error(PZ_ERR_IO, "config %s: is a directory, not a config.json file", path);
  if (odd)
    return pz_error(PZ_ERR_IO, "config %s: not a regular file (a FIFO, device or socket); give the path of a config.json file",
                    path);
  FILE *f = fopen(path, "rb");
  if (!f) return pz_error(PZ_ERR_IO, "config %s: cannot open (%s)", path, strerror(errno));
  size_t cap = 1 << 16, n = 0;
  char *buf = malloc(cap);
  for (;;) {
    if (!buf) { fclose(f); return pz_error(PZ_ERR_OOM, "config %s: out of memory", path); }
    n += fread(buf + n, 1, cap - n, f);
    if (n < cap) break;
    /* the buffer full at 64 MiB: the file holds at least that much (it read up to 128 MiB before) */
    if (cap >= (64u << 20)) {
      free(buf);
      fclose(f);
      return pz_error(PZ_ERR_CONFIG, "config %s: 64 MiB or larger; a config.json is a few KB", path);
    }
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
  if (c->decoder_sparse_step >= 1) { /* Qwen3MoeDecoderLayer; Mixtral (step 1, no list): every layer */
    if (c->n_routed_experts <= 0 || (layer + 1) % c->decoder_sparse_step) return false;
    for (int i = 0; i < c->n_mlp_only && i < PZ_CONFIG_MAX_MLP_ONLY; i++)
      if (c->mlp_only_layers[i] == layer) return false;
    return true;
  }
  return c->n_routed_experts > 0 && layer >= c->first_k_dense_replace && c->moe_layer_freq > 0 &&
         layer % c->moe_layer_freq == 0;
}

_Static_assert(PZ_CONFIG_WINDOW_WORDS * 64 >= PZ_CONFIG_MAX_LAYERS, "a bit per layer");

int64_t pz_config_layer_window(const pz_model_config *c, int64_t layer) {
  if (!c || c->sliding_window <= 0 || layer < 0 || layer >= c->num_hidden_layers || layer >= PZ_CONFIG_MAX_LAYERS)
    return 0;
  return c->sliding_layers[layer / 64] >> (layer % 64) & 1 ? c->sliding_window : 0;
}

float pz_yarn_get_mscale(float scale, float mscale) {
  if (scale <= 1.f) return 1.f;
  return 0.1f * mscale * logf(scale) + 1.f;
}
