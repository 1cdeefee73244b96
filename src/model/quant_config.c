/* quantization_config (compressed-tensors pack-quantized INT4, FP8 block scales) and the module patterns of its
 * targets / ignore lists: parsing, the Python-to-POSIX pattern rewrite and pz_quant_applies (model/config.h).
 * Split out of config.c; its reader helpers are in config_read.h. */
#include "model/config.h"
#include "model/config_read.h"
#include <cjson/cJSON.h>
#include <math.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* An upper bound of the size glibc's regcomp gives an extended regex: it copies the operand of
 * `+` once and of `{n,m}` max(n, m) times more (regcomp.c duplicate_tree), nested repetitions
 * multiply, and a quantifier after a quantifier applies again. One unit per atom, bracket
 * expression or escape; alternatives and groups add up. "a++++...+" or "((a{9}){9}){9}" would take
 * gigabytes (found by fuzz_config); compressed-tensors' own patterns (".*mlp\\.(gate|up)_proj.*")
 * cost tens. Returns the bound, capped at cap + 1 once it exceeds cap. */
#define PZ_QUANT_PATTERN_COST 4096
static int64_t pattern_cost(const char *re, int64_t cap) {
  int64_t total[PZ_QUANT_PATTERN_LEN + 2], last[PZ_QUANT_PATTERN_LEN + 2];
  int d = 0;
  total[0] = last[0] = 0;
  for (const char *p = re; *p; p++) {
    int64_t atom = -1, mul = 1;
    if (*p == '\\') {
      atom = 1;
      if (p[1]) p++;
    } else if (*p == '[') { /* bracket expression: one atom; ']' first (after an optional '^') is literal */
      const char *q = p + 1;
      if (*q == '^') q++;
      if (*q == ']') q++;
      while (*q && *q != ']') q++;
      p = *q ? q : q - 1;
      atom = 1;
    } else if (*p == '(') {
      if (d + 1 >= PZ_QUANT_PATTERN_LEN + 2) return cap + 1;
      total[d] += last[d];
      last[d] = 0;
      d++;
      total[d] = last[d] = 0;
      continue;
    } else if (*p == ')') {
      if (d == 0) { atom = 1; } /* unbalanced: regcomp refuses it */
      else {
        atom = total[d] + last[d] + 1;
        d--;
      }
    } else if (*p == '|') {
      total[d] += last[d];
      last[d] = 0;
      continue;
    } else if (*p == '+') {
      mul = 2;
    } else if (*p == '*' || *p == '?') {
      mul = 1;
    } else if (*p == '{' && p[1] >= '0' && p[1] <= '9') {
      int64_t a = 0, b = -1;
      const char *q = p + 1;
      while (*q >= '0' && *q <= '9' && a <= cap) a = a * 10 + (*q++ - '0');
      if (*q == ',') {
        q++;
        if (*q >= '0' && *q <= '9') {
          b = 0;
          while (*q >= '0' && *q <= '9' && b <= cap) b = b * 10 + (*q++ - '0');
        }
      }
      if (*q == '}') {
        mul = (b > a ? b : a) + 1;
        p = q;
      } else {
        atom = 1; /* not an interval: a literal '{' */
      }
    } else {
      atom = 1;
    }
    if (atom >= 0) {
      total[d] += last[d];
      last[d] = atom;
    } else {
      last[d] = last[d] * mul + 1;
    }
    if (last[d] > cap || total[d] > cap) return cap + 1;
  }
  int64_t c = total[d] + last[d];
  while (d > 0) { /* unclosed groups: regcomp refuses them; count them in anyway */
    d--;
    c += total[d] + last[d];
  }
  return c > cap ? cap + 1 : c;
}

/* Python's re syntax that POSIX extended regexes lack, rewritten: the classes \d \D \w \W \s \S (ASCII, as
 * the module names are) as bracket expressions, "(?:" as "(", and an escaped punctuation character inside a
 * bracket expression as itself (POSIX reads a backslash there literally). false (refused) for what would
 * otherwise change meaning in silence: a backslash before a letter or digit other than those classes and
 * \b \B (\A \Z \n \x41 would match a letter in POSIX), an escaped ] - ^ or backslash inside brackets, a
 * negated class inside brackets, or out (cap bytes) too small. Other Python-only syntax ("(?P<",
 * lookarounds) fails regcomp and is refused there. */
static bool py_re_to_posix(const char *re, char *out, size_t cap) {
  size_t o = 0;
  bool br = false; /* inside [...] */
#define PUT(str)                                  \
  do {                                            \
    const char *s_ = (str);                       \
    size_t l_ = strlen(s_);                       \
    if (o + l_ + 1 > cap) return false;           \
    memcpy(out + o, s_, l_);                      \
    o += l_;                                      \
  } while (0)
  for (const char *c = re; *c; c++) {
    if (*c == '\\' && c[1]) {
      const char n = c[1];
      const char *cls = n == 'd' || n == 'D' ? "0-9" : n == 'w' || n == 'W' ? "A-Za-z0-9_"
                        : n == 's' || n == 'S' ? "[:space:]" : NULL;
      const bool neg = n == 'D' || n == 'W' || n == 'S';
      const bool alnum = (n >= 'a' && n <= 'z') || (n >= 'A' && n <= 'Z') || (n >= '0' && n <= '9');
      if (!cls && alnum && (br || (n != 'b' && n != 'B'))) return false;
      if (!cls && br && (n == ']' || n == '-' || n == '^' || n == '\\')) return false;
      c++;
      if (cls && br) {
        if (neg) return false;
        PUT(cls);
      } else if (cls) {
        PUT(neg ? "[^" : "[");
        PUT(cls);
        PUT("]");
      } else if (br) {
        const char ch[2] = {n, 0};
        PUT(ch);
      } else {
        const char esc[3] = {'\\', n, 0};
        PUT(esc);
      }
      continue;
    }
    if (!br && c[0] == '(' && c[1] == '?' && c[2] == ':') {
      PUT("(");
      c += 2;
      continue;
    }
    if (!br && *c == '[') {
      br = true;
      PUT("[");
      if (c[1] == '^') {
        PUT("^");
        c++;
      }
      if (c[1] == ']') { /* a leading ] is literal */
        PUT("]");
        c++;
      }
      continue;
    }
    if (br && *c == ']') br = false;
    const char ch[2] = {*c, 0};
    PUT(ch);
  }
#undef PUT
  out[o] = 0;
  return true;
}

static bool compile_pattern_flags(const char *re, regex_t *out, int flags) {
  char posix[PZ_QUANT_PATTERN_LEN * 8], buf[PZ_QUANT_PATTERN_LEN * 8 + 8];
  if (pattern_cost(re, PZ_QUANT_PATTERN_COST) > PZ_QUANT_PATTERN_COST) return false;
  if (!py_re_to_posix(re, posix, sizeof posix)) return false;
  snprintf(buf, sizeof buf, "^(%s)", posix); /* Python re.match anchors at the start only */
  return regcomp(out, buf, REG_EXTENDED | flags) == 0;
}
static bool compile_pattern(const char *re, regex_t *out) { return compile_pattern_flags(re, out, REG_NOSUB); }

/* transformers' should_convert_module (quantizers_utils.py, transformers 5): a skip-list key matches
 * a module when it is a suffix of the name, or matches as a regex from the start of the name up to a
 * module boundary (the match ends at the end of the name, before a '.', or just after one): "layers.1"
 * matches "layers.1.mlp" but not "layers.11.mlp"; "mlp.gate" not "mlp.gate_proj". POSIX takes the
 * longest match where Python takes the first; for the module-name keys of real configs they agree. */
static bool skip_key_matches(const char *key, const char *module) {
  const size_t lk = strlen(key), lm = strlen(module);
  if (lk && lk <= lm && !strcmp(module + lm - lk, key)) return true;
  regex_t rx;
  if (!compile_pattern_flags(key, &rx, 0)) return false;
  regmatch_t mt[1];
  bool hit = regexec(&rx, module, 1, mt, 0) == 0;
  if (hit) {
    const regoff_t e = mt[0].rm_eo;
    hit = module[e] == 0 || module[e] == '.' || (e > 0 && module[e - 1] == '.');
  }
  regfree(&rx);
  return hit;
}

/* Whether the skip-list key `key` can name a routed expert's projection as the builder asks pz_quant_applies
 * about it: "<prefix>layers.L.mlp.experts.E.{gate,up,down}_proj" or Mixtral's
 * "<prefix>layers.L.block_sparse_moe.experts.E.w{1,2,3}", prefix "model.", "model.language_model." or
 * "language_model.model.", for some L and E. exact: as a compressed-tensors ignore entry that is not a "re:"
 * pattern (the whole module name); else as an FP8 skip-list key (skip_key_matches: a suffix, or a match from
 * the start up to a module boundary), where keys with regex syntax other than '.' are kept (not judged). Every
 * run of digits, in the key and in those names, counts as one placeholder, so "model.layers.7.mlp.experts" is
 * kept as an FP8 key and a norm, a router ("model.layers.7.mlp.gate"), an attention projection or lm_head is
 * not. Published exports list every module they leave out by name (Qwen3-235B-A22B-FP8: 283 norms and
 * routers; compressed-tensors' own ignore list of a DeepSeek-V3-shaped model that keeps attention and the
 * shared experts in bf16: about 490 entries), more than q->ignore holds. */
static bool key_may_name_expert(const char *key, bool exact) {
  if (!exact && strpbrk(key, "*+?[](){}|^$\\")) return true;
  char k[PZ_QUANT_PATTERN_LEN];
  size_t o = 0;
  for (const char *c = key; *c && o + 1 < sizeof k; c++) {
    const bool dig = *c >= '0' && *c <= '9';
    if (dig && o && k[o - 1] == '#') continue;
    k[o++] = dig ? '#' : *c;
  }
  k[o] = 0;
  static const char *const pre[] = {"model.", "model.language_model.", "language_model.model."};
  static const char *const proj[] = {"mlp.experts.#.gate_proj", "mlp.experts.#.up_proj", "mlp.experts.#.down_proj",
                                     "block_sparse_moe.experts.#.w#"};
  const size_t lk = strlen(k);
  for (int a = 0; a < 3; a++)
    for (int b = 0; b < 4; b++) {
      char t[160];
      snprintf(t, sizeof t, "%slayers.#.%s", pre[a], proj[b]);
      const size_t lt = strlen(t);
      if (exact) {
        if (!strcmp(t, k)) return true;
        continue;
      }
      if (lk <= lt && !strcmp(t + lt - lk, k)) return true; /* a suffix */
      if (lk <= lt && !strncmp(t, k, lk) && (t[lk] == 0 || t[lk] == '.' || (lk && t[lk - 1] == '.'))) return true;
    }
  return false;
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
  if (q->gptq) return q->gptq_experts != 0; /* every Linear of the blocks (or those modules_in_block_to_quantize names) */
  if (q->kind == PZ_WQ_FP8 && !q->ct_fp8) { /* every Linear module but those a skip-list key names (transformers' rule) */
    for (int i = 0; i < q->n_ignore; i++)
      if (q->ignore[i][0] && skip_key_matches(q->ignore[i], module)) return false;
    return true;
  }
  bool hit = false;
  for (int i = 0; i < q->n_targets && !hit; i++) hit = pattern_matches(q->targets[i], module);
  for (int i = 0; i < q->n_ignore && hit; i++)
    if (strcmp(q->ignore[i], "Linear") && pattern_matches(q->ignore[i], module)) hit = false;
  return hit;
}

const char *pz_quant_text_prefix(const pz_quant_config *q) {
  static const char *const inner[] = {"model.language_model.", "model\\.language_model\\."};
  for (int i = 0; q && i < q->n_targets + q->n_ignore; i++) {
    const char *pat = i < q->n_targets ? q->targets[i] : q->ignore[i - q->n_targets];
    for (int k = 0; k < 2; k++)
      if (strstr(pat, inner[k])) return "model.language_model.";
  }
  return "language_model.model.";
}

const char *pz_wquant_name(pz_wquant k) { return k == PZ_WQ_INT4 ? "int4" : k == PZ_WQ_FP8 ? "fp8" : "bf16"; }

void pz_quant_config_synthetic(pz_wquant kind, pz_quant_config *q) {
  memset(q, 0, sizeof *q);
  q->kind = kind;
  if (kind == PZ_WQ_INT4) {
    q->num_bits = 4;
    q->group_size = q->stored_group = 32;
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

pz_status pz_cfg_quant_unsupported(const reader *r, const char *field, const char *got, const char *supported) {
  return pz_error(PZ_ERR_CONFIG, "config %s: quantization_config.%s is %s, which prezero does not support (%s)", r->src,
                  field, got, supported);
}
static pz_status q_unsupported(const reader *r, const char *field, const char *got, const char *supported) {
  return pz_cfg_quant_unsupported(r, field, got, supported);
}

void pz_cfg_number_got(char *got, size_t cap, const cJSON *it, const char *absent) {
  if (cJSON_IsNumber(it)) snprintf(got, cap, "%g", it->valuedouble);
  else snprintf(got, cap, "%s", it && !cJSON_IsNull(it) ? "not a number" : absent);
}

bool pz_cfg_group_multiple_of_32(const cJSON *gs) {
  return cJSON_IsNumber(gs) && gs->valuedouble >= 32 && gs->valuedouble <= 1048576 && fmod(gs->valuedouble, 32) == 0;
}

/* q_unsupported for field `f` of config group g's weights ("config_groups.<name>.weights.<f>"). */
static pz_status w_unsupported(const reader *r, const cJSON *g, const char *f, const char *got, const char *supported) {
  char field[200];
  snprintf(field, sizeof field, "config_groups.%.80s.weights.%s", g->string, f);
  return q_unsupported(r, field, got, supported);
}

/* Whether an ignore / skip-list entry `key` is kept for pz_quant_applies: it may name a routed expert's
 * projection (key_may_name_expert, exact as there), or it is the first (*inner not yet set) naming transformers'
 * newer text layout "model.language_model." (pz_quant_text_prefix reads the layout from it), which sets *inner. */
static bool keep_skip_key(const char *key, bool exact, bool *inner) {
  const bool names_inner = !*inner && strstr(key, "model.language_model.");
  if (!names_inner && !key_may_name_expert(key, exact)) return false;
  *inner |= names_inner;
  return true;
}

/* A list of pattern strings into dst[max]. ignore_list (compressed-tensors' ignore): an exact module name
 * that cannot name a routed expert's projection (key_may_name_expert; the only modules the builder asks
 * pz_quant_applies about) is checked for type only and not kept, except the first naming transformers' newer
 * text layout "model.language_model." (pz_quant_text_prefix reads the layout from it); "re:" patterns are
 * all kept. max counts the entries kept. */
static pz_status q_patterns(const reader *r, const cJSON *arr, const char *field, char (*dst)[PZ_QUANT_PATTERN_LEN],
                            int max, int *n, bool ignore_list) {
  *n = 0;
  bool inner = false;
  if (!arr || cJSON_IsNull(arr)) return PZ_OK;
  if (!cJSON_IsArray(arr)) return pz_cfg_type_err(r, field, "a list of strings", arr);
  for (const cJSON *e = arr->child; e; e = e->next) {
    if (!cJSON_IsString(e)) return pz_cfg_type_err(r, field, "a list of strings", e);
    if (ignore_list && strncmp(e->valuestring, "re:", 3) && !keep_skip_key(e->valuestring, true, &inner)) continue;
    if (*n >= max)
      return pz_error(PZ_ERR_CONFIG, "config %s: field \"%s\" has more than %d entries%s; prezero keeps at most %d",
                      r->src, field, max, ignore_list ? " that are \"re:\" patterns or name a routed expert" : "", max);
    if (strlen(e->valuestring) >= PZ_QUANT_PATTERN_LEN)
      return pz_error(PZ_ERR_CONFIG, "config %s: an entry of \"%s\" is longer than %d bytes", r->src, field,
                      PZ_QUANT_PATTERN_LEN - 1);
    if (!strncmp(e->valuestring, "re:", 3)) {
      regex_t rx;
      if (pattern_cost(e->valuestring + 3, PZ_QUANT_PATTERN_COST) > PZ_QUANT_PATTERN_COST)
        return pz_error(PZ_ERR_CONFIG, "config %s: \"%s\" entry \"%s\" repeats too much (its repetitions would expand "
                        "past %d units when compiled); write the pattern without nested or stacked repeats",
                        r->src, field, e->valuestring, PZ_QUANT_PATTERN_COST);
      if (!compile_pattern(e->valuestring + 3, &rx))
        return pz_error(PZ_ERR_CONFIG, "config %s: \"%s\" entry \"%s\" is not a regular expression prezero can read",
                        r->src, field, e->valuestring);
      regfree(&rx);
    }
    snprintf(dst[(*n)++], PZ_QUANT_PATTERN_LEN, "%s", e->valuestring);
  }
  return PZ_OK;
}

#define Q_STRATEGIES "strategy \"group\" (group_size a multiple of 32) or \"channel\""
#define Q_SUPPORTED "compressed-tensors pack-quantized INT4 (num_bits 4, symmetric, strategy \"group\" with a group_size " \
                    "that is a multiple of 32, or \"channel\"), compressed-tensors float-quantized FP8 with strategy " \
                    "\"block\" or \"channel\", fp8 with weight_block_size, or symmetric 4-bit gptq"

/* A block shape [rows, cols] of integers 1..65536 (fp8's weight_block_size, compressed-tensors' block_structure)
 * into *rows / *cols; false for anything else. */
static bool read_block(const cJSON *bs, int64_t *rows, int64_t *cols) {
  const cJSON *a = cJSON_IsArray(bs) && cJSON_GetArraySize(bs) == 2 ? cJSON_GetArrayItem(bs, 0) : NULL;
  const cJSON *b = a ? cJSON_GetArrayItem(bs, 1) : NULL;
  if (!cJSON_IsNumber(a) || !cJSON_IsNumber(b) || a->valuedouble < 1 || b->valuedouble < 1 || a->valuedouble > 65536 ||
      b->valuedouble > 65536 || a->valuedouble != floor(a->valuedouble) || b->valuedouble != floor(b->valuedouble))
    return false;
  *rows = (int64_t)a->valuedouble;
  *cols = (int64_t)b->valuedouble;
  return true;
}

/* Config group g's "weights" object into *w (present, no key given twice). */
static pz_status group_weights(const reader *r, const cJSON *g, const cJSON **w) {
  *w = cJSON_GetObjectItemCaseSensitive(g, "weights");
  if (!cJSON_IsObject(*w))
    return pz_error(PZ_ERR_CONFIG, "config %s: quantization_config.config_groups.%s.weights is missing", r->src, g->string);
  char where[200];
  snprintf(where, sizeof where, "quantization_config.config_groups.%s.weights.", g->string);
  return pz_cfg_check_duplicates(r, *w, where);
}

/* The weights' num_bits is `want`, else refused naming what it is and `supported`. */
static pz_status group_num_bits(const reader *r, const cJSON *g, const cJSON *w, int want, const char *supported) {
  const cJSON *nb = cJSON_GetObjectItemCaseSensitive(w, "num_bits");
  if (cJSON_IsNumber(nb) && nb->valuedouble == want) return PZ_OK;
  char got[64];
  pz_cfg_number_got(got, sizeof got, nb, "missing");
  return w_unsupported(r, g, "num_bits", got, supported);
}

/* The weights' scales are static: "dynamic" absent, false or null. */
static pz_status group_static(const reader *r, const cJSON *g, const cJSON *w) {
  const cJSON *dyn = cJSON_GetObjectItemCaseSensitive(w, "dynamic");
  if (dyn && !cJSON_IsFalse(dyn) && !cJSON_IsNull(dyn))
    return w_unsupported(r, g, "dynamic", "set", "static weight scales");
  return PZ_OK;
}

/* Group g's targets (at least one) and the top-level ignore list of q into out. */
static pz_status group_patterns(const reader *r, const cJSON *q, const cJSON *g, pz_quant_config *out) {
  PZ_CHECK(q_patterns(r, cJSON_GetObjectItemCaseSensitive(g, "targets"), "quantization_config.config_groups.*.targets",
                      out->targets, PZ_QUANT_MAX_PATTERNS, &out->n_targets, false));
  if (out->n_targets == 0)
    return pz_error(PZ_ERR_CONFIG, "config %s: quantization_config.config_groups.%s.targets is missing or empty", r->src,
                    g->string);
  return q_patterns(r, cJSON_GetObjectItemCaseSensitive(q, "ignore"), "quantization_config.ignore", out->ignore,
                    PZ_QUANT_MAX_IGNORE, &out->n_ignore, true);
}

/* compressed-tensors "float-quantized" FP8 weights with block scales (llm-compressor's FP8_BLOCK scheme) or one
 * scale per output row (FP8_DYNAMIC): weights type "float", num_bits 8, strategy "block" with a block_structure
 * [rows, cols] or "channel", symmetric, static. Dynamic FP8 input activations (those schemes' per-token groups or
 * tokens) are not quantised: prezero runs the weights as W8A16 with bf16 activations, as it runs DeepSeek's fp8
 * "activation_scheme": "dynamic". Per-tensor weight scales (the FP8 scheme) and static activation scales are
 * refused on one line. */
static pz_status parse_fp8_group(const reader *r, const cJSON *q, const cJSON *g, pz_quant_config *out) {
  char where[200];
  const cJSON *oa = cJSON_GetObjectItemCaseSensitive(g, "output_activations");
  if (oa && !cJSON_IsNull(oa)) {
    snprintf(where, sizeof where, "config_groups.%.80s.output_activations", g->string);
    return q_unsupported(r, where, "set", "FP8 weights with bf16 activations (W8A16)");
  }
  const cJSON *w;
  PZ_CHECK(group_weights(r, g, &w));
  const cJSON *ty = cJSON_GetObjectItemCaseSensitive(w, "type");
  if (!(cJSON_IsString(ty) && !strcasecmp(ty->valuestring, "float")))
    return w_unsupported(r, g, "type", cJSON_IsString(ty) ? ty->valuestring : ty ? "not a string" : "missing",
                         "type \"float\" for format float-quantized");
  PZ_CHECK(group_num_bits(r, g, w, 8, "num_bits 8 (FP8 e4m3)"));
  /* "block": one scale per block_structure block; "channel" (FP8_DYNAMIC): one per output row, read as blocks of
   * 1 row x PZ_FP8_CHANNEL_COLS columns (a whole row: the kernels and the loader take any block). */
  const cJSON *stg = cJSON_GetObjectItemCaseSensitive(w, "strategy");
  const bool channel = cJSON_IsString(stg) && !strcasecmp(stg->valuestring, "channel");
  if (!(cJSON_IsString(stg) && (channel || !strcasecmp(stg->valuestring, "block"))))
    return w_unsupported(r, g, "strategy", cJSON_IsString(stg) ? stg->valuestring : stg && !cJSON_IsNull(stg) ?
                         "not a string" : "missing", "FP8 strategy \"block\" with a block_structure, or \"channel\"");
  const cJSON *bs = cJSON_GetObjectItemCaseSensitive(w, "block_structure");
  int64_t brows = 1, bcols = PZ_FP8_CHANNEL_COLS;
  if (channel && bs && !cJSON_IsNull(bs))
    return w_unsupported(r, g, "block_structure", "set", "block_structure null with strategy \"channel\"");
  if (!channel && !read_block(bs, &brows, &bcols))
    return pz_error(PZ_ERR_CONFIG, "config %s: quantization_config.config_groups.%s.weights.block_structure must be "
                    "[rows, cols], integers 1..65536", r->src, g->string);
  const cJSON *gs = cJSON_GetObjectItemCaseSensitive(w, "group_size");
  if (gs && !cJSON_IsNull(gs) && !(channel && cJSON_IsNumber(gs) && gs->valuedouble == -1))
    return w_unsupported(r, g, "group_size", "set", channel ? "group_size null or -1 with strategy \"channel\"" :
                         "group_size null with strategy \"block\"");
  const cJSON *sym = cJSON_GetObjectItemCaseSensitive(w, "symmetric");
  if (sym && !cJSON_IsTrue(sym)) return w_unsupported(r, g, "symmetric", "not true", "symmetric FP8 (no zero points)");
  PZ_CHECK(group_static(r, g, w));
  /* the activations after the weights, so that a per-tensor scheme is named by its weights */
  const cJSON *ia = cJSON_GetObjectItemCaseSensitive(g, "input_activations");
  if (ia && !cJSON_IsNull(ia)) {
    snprintf(where, sizeof where, "config_groups.%.80s.input_activations", g->string);
    if (!cJSON_IsObject(ia)) return pz_cfg_type_err(r, where, "an object", ia);
    const cJSON *ty = cJSON_GetObjectItemCaseSensitive(ia, "type"), *nb = cJSON_GetObjectItemCaseSensitive(ia, "num_bits");
    const cJSON *dy = cJSON_GetObjectItemCaseSensitive(ia, "dynamic");
    const bool ok = (!ty || (cJSON_IsString(ty) && !strcasecmp(ty->valuestring, "float"))) && cJSON_IsNumber(nb) &&
                    nb->valuedouble == 8 && cJSON_IsTrue(dy);
    if (!ok)
      return q_unsupported(r, where, "not dynamic FP8 (num_bits 8, type \"float\", dynamic true)",
                           "dynamic FP8 input activations, which prezero leaves in bf16 (W8A16), or none");
  }
  out->kind = PZ_WQ_FP8;
  out->ct_fp8 = 1;
  out->block_rows = brows;
  out->block_cols = bcols;
  return group_patterns(r, q, g, out);
}

/* The one config group of a compressed-tensors quantization_config, by its format (the group's, else top_fmt):
 * "pack-quantized" INT4 here, "float-quantized" FP8 in parse_fp8_group. */
static pz_status parse_int4_group(const reader *r, const cJSON *q, const char *top_fmt, pz_quant_config *out) {
  const cJSON *groups = cJSON_GetObjectItemCaseSensitive(q, "config_groups");
  if (!cJSON_IsObject(groups) || !groups->child)
    return pz_error(PZ_ERR_CONFIG, "config %s: quantization_config.config_groups is missing or empty; %s needs one group",
                    r->src, "compressed-tensors");
  PZ_CHECK(pz_cfg_check_duplicates(r, groups, "quantization_config.config_groups."));
  if (groups->child->next)
    return pz_error(PZ_ERR_CONFIG, "config %s: quantization_config.config_groups has more than one group, which prezero "
                    "does not support (one INT4 group)", r->src);
  const cJSON *g = groups->child;
  char where[160];
  if (!cJSON_IsObject(g)) return pz_cfg_type_err(r, "quantization_config.config_groups.*", "an object", g);
  snprintf(where, sizeof where, "quantization_config.config_groups.%s.", g->string);
  PZ_CHECK(pz_cfg_check_duplicates(r, g, where));
  const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(g, "format");
  if (fmt && !cJSON_IsNull(fmt) && (!cJSON_IsString(fmt) || (strcmp(fmt->valuestring, "pack-quantized") &&
                                                             strcmp(fmt->valuestring, "float-quantized")))) {
    char field[160];
    snprintf(field, sizeof field, "config_groups.%.80s.format", g->string);
    return q_unsupported(r, field, cJSON_IsString(fmt) ? fmt->valuestring : "not a string", Q_SUPPORTED);
  }
  if (!top_fmt && !cJSON_IsString(fmt))
    return q_unsupported(r, "format", "missing (neither quantization_config.format nor the group's)", Q_SUPPORTED);
  if (!strcmp(cJSON_IsString(fmt) ? fmt->valuestring : top_fmt, "float-quantized")) return parse_fp8_group(r, q, g, out);
  const char *acts[] = {"input_activations", "output_activations"};
  for (int i = 0; i < 2; i++) {
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(g, acts[i]);
    if (a && !cJSON_IsNull(a)) {
      snprintf(where, sizeof where, "config_groups.%s.%s", g->string, acts[i]);
      return q_unsupported(r, where, "set", "weight-only quantisation: W4A16, activations stay bf16");
    }
  }
  const cJSON *w;
  PZ_CHECK(group_weights(r, g, &w));
  const cJSON *ty = cJSON_GetObjectItemCaseSensitive(w, "type");
  if (ty && !(cJSON_IsString(ty) && !strcasecmp(ty->valuestring, "int")))
    return w_unsupported(r, g, "type", cJSON_IsString(ty) ? ty->valuestring : "not a string", Q_SUPPORTED);
  PZ_CHECK(group_num_bits(r, g, w, 4, "num_bits 4"));
  /* The strategy before the group size. Absent, compressed-tensors' QuantizationArgs infers it: "group" from
   * a positive group_size, "channel" from -1, "tensor" from none. The kernels' group is 32; a checkpoint's
   * coarser group (a multiple of 32) or one scale per output row ("channel") is read by repeating each
   * scale over the 32-column groups it covers (exact). */
  const cJSON *gs = cJSON_GetObjectItemCaseSensitive(w, "group_size");
  const cJSON *stg = cJSON_GetObjectItemCaseSensitive(w, "strategy");
  const bool stg_absent = !stg || cJSON_IsNull(stg), gs_absent = !gs || cJSON_IsNull(gs);
  const bool gs_minus1 = cJSON_IsNumber(gs) && gs->valuedouble == -1;
  if (!stg_absent && !cJSON_IsString(stg)) return w_unsupported(r, g, "strategy", "not a string", Q_STRATEGIES);
  if (stg_absent && gs_absent)
    return w_unsupported(r, g, "strategy", "missing with group_size null (per-tensor, as compressed-tensors infers)",
                         Q_STRATEGIES);
  /* compressed-tensors lowercases the strategy and type names (QuantizationArgs' validators) */
  const bool channel = stg_absent ? gs_minus1 : !strcasecmp(stg->valuestring, "channel");
  if (!stg_absent && !channel && strcasecmp(stg->valuestring, "group"))
    return w_unsupported(r, g, "strategy", stg->valuestring, Q_STRATEGIES);
  if (channel) {
    if (!gs_absent && !gs_minus1) /* compressed-tensors: a group_size needs strategy "group" */
      return w_unsupported(r, g, "group_size", "set with strategy \"channel\"", "group_size null or -1 with strategy "
                           "\"channel\"");
    out->stored_group = 0;
  } else {
    if (!pz_cfg_group_multiple_of_32(gs)) {
      char got[64];
      pz_cfg_number_got(got, sizeof got, gs, "missing or null");
      return w_unsupported(r, g, "group_size", got,
                           "a group_size that is a multiple of 32 (32, 64, 128, ...): the INT4 kernels' group is 32");
    }
    out->stored_group = (int)gs->valuedouble;
  }
  const cJSON *sym = cJSON_GetObjectItemCaseSensitive(w, "symmetric");
  if (sym && !cJSON_IsTrue(sym)) /* absent: compressed-tensors' default, symmetric */
    return w_unsupported(r, g, "symmetric", "not true", "symmetric INT4 (no zero points)");
  /* actorder "weight" (alias "static") reorders the columns only while quantising: the stored columns and
   * their groups are in the natural order, no g_idx. "group" (alias "dynamic") permutes the groups (g_idx). */
  const cJSON *ao = cJSON_GetObjectItemCaseSensitive(w, "actorder");
  if (ao && !cJSON_IsNull(ao) && !cJSON_IsFalse(ao) &&
      !(cJSON_IsString(ao) && (!strcmp(ao->valuestring, "weight") || !strcmp(ao->valuestring, "static"))))
    return w_unsupported(r, g, "actorder", cJSON_IsString(ao) ? ao->valuestring : "set",
                         "actorder null, \"weight\" or \"static\": columns and groups in their natural order");
  PZ_CHECK(group_static(r, g, w));
  out->kind = PZ_WQ_INT4;
  out->num_bits = 4;
  out->group_size = 32;
  return group_patterns(r, q, g, out);
}

pz_status pz_cfg_parse_quant(const reader *r, const cJSON *outer, pz_quant_config *out) {
  memset(out, 0, sizeof *out);
  /* The top-level one first, as transformers (the model's config.quantization_config) and vLLM read a wrapped
   * config; text_config's when the top has none (vLLM's fallback). */
  const cJSON *top = outer ? cJSON_GetObjectItemCaseSensitive(outer, "quantization_config") : NULL;
  const cJSON *q = top && !cJSON_IsNull(top) ? top : cJSON_GetObjectItemCaseSensitive(r->root, "quantization_config");
  if (!q || cJSON_IsNull(q)) return PZ_OK;
  if (!cJSON_IsObject(q)) return pz_cfg_type_err(r, "quantization_config", "an object", q);
  PZ_CHECK(pz_cfg_check_duplicates(r, q, "quantization_config."));
  const cJSON *m = cJSON_GetObjectItemCaseSensitive(q, "quant_method");
  if (!cJSON_IsString(m))
    return pz_error(PZ_ERR_CONFIG, "config %s: quantization_config.quant_method is missing; supported: %s", r->src,
                    Q_SUPPORTED);
  if (!strcmp(m->valuestring, "compressed-tensors")) {
    /* the format at the top, or (compressed-tensors allows either) only in the group */
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(q, "format");
    if (fmt && !cJSON_IsNull(fmt) && (!cJSON_IsString(fmt) || (strcmp(fmt->valuestring, "pack-quantized") &&
                                                               strcmp(fmt->valuestring, "float-quantized"))))
      return q_unsupported(r, "format", cJSON_IsString(fmt) ? fmt->valuestring : "not a string", Q_SUPPORTED);
    const cJSON *kv = cJSON_GetObjectItemCaseSensitive(q, "kv_cache_scheme");
    if (kv && !cJSON_IsNull(kv)) return q_unsupported(r, "kv_cache_scheme", "set", "a bf16 KV cache");
    /* compressed-tensors' other compressions: rotations (QuIP / SpinQuant transforms) the weights were
     * multiplied by, to be undone at run time, and sparse storage (bitmask, 2:4) of the weights. Read
     * as plain pack-quantized weights they would give wrong tokens or missing tensors. */
    const cJSON *tf = cJSON_GetObjectItemCaseSensitive(q, "transform_config");
    if (tf && !cJSON_IsNull(tf) && !(cJSON_IsObject(tf) && !tf->child))
      return q_unsupported(r, "transform_config", "set (rotated weights)", "weights without transforms");
    const cJSON *sp = cJSON_GetObjectItemCaseSensitive(q, "sparsity_config");
    if (sp && !cJSON_IsNull(sp)) {
      if (!cJSON_IsObject(sp)) return pz_cfg_type_err(r, "quantization_config.sparsity_config", "an object", sp);
      const cJSON *sf = cJSON_GetObjectItemCaseSensitive(sp, "format");
      if (sf && !cJSON_IsNull(sf) && !(cJSON_IsString(sf) && !strcmp(sf->valuestring, "dense"))) {
        char got[96];
        snprintf(got, sizeof got, cJSON_IsString(sf) ? "\"%.80s\"" : "not a string", cJSON_IsString(sf) ? sf->valuestring : "");
        return q_unsupported(r, "sparsity_config.format", got, "sparsity_config format \"dense\" or none");
      }
    }
    return parse_int4_group(r, q, cJSON_IsString(fmt) ? fmt->valuestring : NULL, out);
  }
  if (!strcmp(m->valuestring, "gptq")) return pz_cfg_parse_gptq(r, q, out);
  if (!strcmp(m->valuestring, "fp8")) {
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(q, "fmt");
    if (fmt && !(cJSON_IsString(fmt) && !strcmp(fmt->valuestring, "e4m3")))
      return q_unsupported(r, "fmt", cJSON_IsString(fmt) ? fmt->valuestring : "not a string", "fp8 fmt \"e4m3\"");
    const cJSON *bs = cJSON_GetObjectItemCaseSensitive(q, "weight_block_size");
    if (!bs || cJSON_IsNull(bs)) return q_unsupported(r, "weight_block_size", "missing (per-tensor FP8)", Q_SUPPORTED);
    if (!read_block(bs, &out->block_rows, &out->block_cols))
      return pz_error(PZ_ERR_CONFIG, "config %s: quantization_config.weight_block_size must be [rows, cols], integers "
                      "1..65536", r->src);
    out->kind = PZ_WQ_FP8;
    /* The modules left unquantised: transformers' FineGrainedFP8Config "modules_to_not_convert" and vLLM's
     * fp8 "ignored_layers", lists of module names or Python regexes (skip_key_matches: a suffix, or a
     * match from the start up to a module boundary); kept in out->ignore for pz_quant_applies when they
     * may name a routed expert (key_may_name_expert). A key prezero cannot read as a regex is refused. */
    static const char *const skip[] = {"modules_to_not_convert", "ignored_layers"};
    out->n_ignore = 0;
    bool inner = false;
    for (int i = 0; i < 2; i++) {
      char field[64];
      snprintf(field, sizeof field, "quantization_config.%s", skip[i]);
      const cJSON *arr = cJSON_GetObjectItemCaseSensitive(q, skip[i]);
      if (!arr || cJSON_IsNull(arr)) continue;
      if (!cJSON_IsArray(arr)) return pz_cfg_type_err(r, field, "a list of strings", arr);
      for (const cJSON *e = arr->child; e; e = e->next) {
        if (!cJSON_IsString(e)) return pz_cfg_type_err(r, field, "a list of strings", e);
        const char *key = e->valuestring;
        if (strlen(key) >= PZ_QUANT_PATTERN_LEN)
          return pz_error(PZ_ERR_CONFIG, "config %s: an entry of \"%s\" is longer than %d bytes", r->src, field,
                          PZ_QUANT_PATTERN_LEN - 1);
        regex_t rx;
        if (!compile_pattern(key, &rx))
          return pz_error(PZ_ERR_CONFIG, "config %s: \"%s\" entry \"%s\" is not a module name or regular expression "
                          "prezero can read; write the module's name", r->src, field, key);
        regfree(&rx);
        if (!keep_skip_key(key, false, &inner)) continue;
        if (out->n_ignore >= PZ_QUANT_MAX_IGNORE)
          return pz_error(PZ_ERR_CONFIG, "config %s: fields \"quantization_config.modules_to_not_convert\" and "
                          "\"ignored_layers\" name more than %d routed-expert modules; prezero keeps at most %d", r->src,
                          PZ_QUANT_MAX_IGNORE, PZ_QUANT_MAX_IGNORE);
        snprintf(out->ignore[out->n_ignore++], PZ_QUANT_PATTERN_LEN, "%s", key);
      }
    }
    return PZ_OK;
  }
  char got[96];
  snprintf(got, sizeof got, "\"%.80s\"", m->valuestring);
  return q_unsupported(r, "quant_method", got, Q_SUPPORTED);
}

