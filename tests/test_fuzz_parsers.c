/* Deterministic, seeded mutation fuzzing of every parser of user input, in process, no fuzzing
 * library (issue 19, CPU part): config.json (pz_config_parse, incl. text_config,
 * quantization_config, rope_scaling), safetensors headers (pz_st_open), checkpoint directories
 * (pz_checkpoint_open: the index and config.json extras; pz_checkpoint_load_config) and the CLI's
 * --prompt-ids / integer / --seed parsers (white-box, tools/cmd_run.c) and the GEMM tuner-table
 * reader (pz_tuner_table_load_text: every kept entry must satisfy the documented ranges).
 * Mutations: truncation at every length of each seed, random byte flips / inserts / deletes /
 * interesting tokens, structured (cJSON) deletion of every field and replacement of every value
 * by wrong types, huge and negative numbers, deep nesting, hand-written hostile safetensors
 * headers (overlapping / out-of-range / negative offsets, header length beyond the file).
 * Assertion per input: PZ_OK with a sane result, or an error status with a non-empty message;
 * never a crash, abort, exit or hang (SIGALRM after 10 s on one input fails the test).
 * PZ_FUZZ_SEED (default 19) picks the random stream; PZ_FUZZ_ITERS scales the random cases. */
#include <cjson/cJSON.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "pz_test.h"
#include "model/checkpoint.h"
#include "model/config.h"
#include "model/safetensors.h"
#include "backend/gemm_table.h"
#include "backend/tables/gemm_tables.h"
/* White-box: parse_prompts, parse_int (static functions of the CLI). */
#include "../tools/cmd_run.c"
#include "../tools/cli_ranks.c" /* cmd_run.c's rank launcher */

extern const struct { const char *name; const char *json; } pz_embedded_presets[];

static uint64_t rs = 19;
static uint64_t rnd(void) { rs += 0x9e3779b97f4a7c15ull; uint64_t x = rs;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull; x = (x ^ (x >> 27)) * 0x94d049bb133111ebull; return x ^ (x >> 31); }
static size_t rndn(size_t n) { return n ? (size_t)(rnd() % n) : 0; }

static const char *section = "";
static long n_ok, n_err, case_no;
static void on_alarm(int sig) {
  (void)sig;
  static const char m[] = "test_fuzz_parsers: one input ran more than 10 s (hang) in section ";
  if (write(2, m, sizeof m - 1) < 0 || write(2, section, strlen(section)) < 0 || write(2, "\n", 1) < 0) {}
  _exit(3);
}

/* One result: OK counted, or an error whose message must be non-empty. */
static void verdict(pz_status st, const char *what) {
  case_no++;
  if (st == PZ_OK) { n_ok++; return; }
  n_err++;
  const char *m = pz_last_error();
  if (!m || !m[0]) { fprintf(stderr, "%s case %ld: status %s with an empty message\n", what, case_no, pz_status_string(st)); pz_test_failures++; }
}

/* ------------------------------------------------------------------ byte mutations */

static const char *const tokens[] = {
  "1e999", "-1", "-0", "0", "1", "2", "3", "4", "32", "128", "9007199254740993", "1e308", "-1e308", "2147483648",
  "2147483647", "-9223372036854775809", "18446744073709551616", "0.5", "1e-320", "null", "true", "false", "\"\"",
  "[]", "{}", "\"re:(\"", "\"re:((((((((((a*)*)*)*)*)*)*)*)*)\"", "\"yarn\"", "\"F32\"", "\"BF16\"", "[0,0]",
  "[0,1e300]", "[-8,0]", "\"\\u0000\"", "\"\\ud800\"", ",", ":", "\"", "{", "}", "[", "]", "\\", "\"__metadata__\"",
};
#define N_TOKENS (sizeof tokens / sizeof tokens[0])

/* A random mutation of src[0..n) into a new buffer (caller frees), length in *out_n. */
static char *mutate_bytes(const char *src, size_t n, size_t *out_n) {
  size_t cap = n + 4096;
  char *b = malloc(cap);
  memcpy(b, src, n);
  size_t len = n;
  int ops = 1 + (int)rndn(4);
  for (int k = 0; k < ops; k++) {
    size_t at = rndn(len + 1);
    switch (rndn(7)) {
    case 0: if (len) b[rndn(len)] ^= (char)(1u << rndn(8)); break;
    case 1: if (len) b[rndn(len)] = "{}[]\":,-0e9 \0\xff"[rndn(15)]; break;
    case 2: { size_t d = 1 + rndn(16); if (at + d > len) d = len - at; memmove(b + at, b + at + d, len - at - d); len -= d; break; }
    case 3: { const char *t = tokens[rndn(N_TOKENS)]; size_t tl = strlen(t);
      if (len + tl > cap) break;
      memmove(b + at + tl, b + at, len - at); memcpy(b + at, t, tl); len += tl; break; }
    case 4: { /* replace the number at/after `at` by a token */
      size_t i = at; while (i < len && !(b[i] >= '0' && b[i] <= '9')) i++;
      size_t j = i; while (j < len && ((b[j] >= '0' && b[j] <= '9') || b[j] == '.' || b[j] == 'e' || b[j] == '-')) j++;
      const char *t = tokens[rndn(20)]; size_t tl = strlen(t);
      if (i >= len || len - (j - i) + tl > cap) break;
      memmove(b + i + tl, b + j, len - j); memcpy(b + i, t, tl); len = len - (j - i) + tl; break; }
    case 5: { size_t d = 1 + rndn(32); if (at + d > len) d = len - at; /* duplicate a range */
      if (len + d > cap) break;
      memmove(b + at + d, b + at, len - at); len += d; break; }
    default: len = rndn(len + 1); break; /* truncate */
    }
  }
  *out_n = len;
  return b;
}

/* ------------------------------------------------------------------ structured (cJSON) mutations */

/* The k-th item of a depth-first walk (every object member and array element), with its parent. */
static cJSON *nth_item(cJSON *node, int *k, cJSON **parent) {
  for (cJSON *c = node->child; c; c = c->next) {
    if ((*k)-- == 0) { *parent = node; return c; }
    cJSON *r = nth_item(c, k, parent);
    if (r) return r;
  }
  return NULL;
}
static int count_items(const cJSON *node) {
  int n = 0;
  for (const cJSON *c = node->child; c; c = c->next) n += 1 + count_items(c);
  return n;
}
#define N_VALUES 26
static cJSON *make_value(int v) {
  static const double nums[] = {-1, 0, 1, 2, 3, 4, 32, 0.5, 1e308, -1e308, 2147483648.0, 9e15, 1e16, 65537, 1e300};
  if (v < 15) return cJSON_CreateNumber(nums[v]);
  switch (v) {
  case 15: return cJSON_CreateNull();
  case 16: return cJSON_CreateTrue();
  case 17: return cJSON_CreateFalse();
  case 18: return cJSON_CreateString("str");
  case 19: return cJSON_CreateString("");
  case 20: return cJSON_CreateArray();
  case 21: return cJSON_CreateObject();
  case 22: return cJSON_CreateString("re:(");
  case 23: { cJSON *a = cJSON_CreateArray(); for (int i = 0; i < 20; i++) cJSON_AddItemToArray(a, cJSON_CreateString("re:.*x.*")); return a; }
  case 24: { char s[300]; memset(s, 'q', 299); s[299] = 0; return cJSON_CreateString(s); }
  default: { cJSON *a = cJSON_CreateArray(); cJSON_AddItemToArray(a, cJSON_CreateNumber(-5)); cJSON_AddItemToArray(a, cJSON_CreateNumber(1e20)); return a; }
  }
}
/* Calls fn(text) for the seed with item k deleted (op 0), replaced by make_value(op - 1), or
 * duplicated (op N_VALUES + 1), for every item k and op. */
static void structured(const char *seed, void (*fn)(const char *, size_t)) {
  cJSON *root = cJSON_Parse(seed);
  if (!root) { fprintf(stderr, "seed does not parse\n"); pz_test_failures++; return; }
  int n = count_items(root);
  cJSON_Delete(root);
  for (int k = 0; k < n; k++)
    for (int op = 0; op <= N_VALUES + 1; op++) {
      cJSON *r = cJSON_Parse(seed), *parent = NULL;
      int kk = k;
      cJSON *it = nth_item(r, &kk, &parent);
      if (op == 0) cJSON_Delete(cJSON_DetachItemViaPointer(parent, it));
      else if (op <= N_VALUES) cJSON_ReplaceItemViaPointer(parent, it, make_value(op - 1));
      else if (cJSON_IsObject(parent) && it->string) cJSON_AddItemToObject(parent, it->string, cJSON_Duplicate(it, 1));
      char *t = cJSON_PrintUnformatted(r);
      cJSON_Delete(r);
      if (t) fn(t, strlen(t));
      free(t);
    }
}

/* Deep nesting: `open` n times, then `mid`, then `close` n times. */
static char *nest(const char *pre, const char *open, int n, const char *mid, const char *close, const char *post) {
  size_t ol = strlen(open), cl = strlen(close);
  char *b = malloc(strlen(pre) + (ol + cl) * (size_t)n + strlen(mid) + strlen(post) + 1), *p = b;
  p += sprintf(p, "%s", pre);
  for (int i = 0; i < n; i++) p += sprintf(p, "%s", open);
  p += sprintf(p, "%s", mid);
  for (int i = 0; i < n; i++) p += sprintf(p, "%s", close);
  sprintf(p, "%s", post);
  return b;
}

/* ------------------------------------------------------------------ config.json */

static void config_case(const char *text, size_t len) {
  char *b = malloc(len ? len : 1); /* exactly len bytes, no NUL: ASan sees any read past the end */
  memcpy(b, text, len);
  pz_model_config c;
  memset(&c, 0xa5, sizeof c);
  alarm(10);
  pz_status st = pz_config_parse(b, len, "fuzz", &c);
  alarm(0);
  free(b);
  verdict(st, "config");
  if (st != PZ_OK) return;
  /* The attention shapes of the family read: MLA ranks, or GQA heads. */
  int attn_ok = c.attn == PZ_ATTN_MLA ? c.kv_lora_rank >= 1 && c.q_lora_rank >= 0 && c.qk_rope_head_dim >= 2 &&
                                            c.qk_rope_head_dim % 2 == 0 && c.decoder_sparse_step == 0
              : c.attn == PZ_ATTN_GQA && c.num_key_value_heads >= 1 && c.num_attention_heads >= 1 &&
                    c.num_attention_heads % c.num_key_value_heads == 0 && c.head_dim >= 2 && c.head_dim % 2 == 0 &&
                    /* glm4_moe and dots1 place their MoE layers as DeepSeek does (first_k_dense_replace): step 0 */
                    (c.decoder_sparse_step >= 1 || ((!strcmp(c.model_type, "glm4_moe") || !strcmp(c.model_type, "dots1")) &&
                                                    c.decoder_sparse_step == 0 &&
                                                    c.first_k_dense_replace >= 0)) &&
                    c.n_mlp_only >= 0 && c.n_mlp_only <= PZ_CONFIG_MAX_MLP_ONLY;
  int sane = c.hidden_size >= 1 && c.hidden_size <= PZ_CONFIG_MAX_INT && c.num_hidden_layers >= 1 &&
             c.num_hidden_layers <= PZ_CONFIG_MAX_LAYERS && c.num_attention_heads >= 1 && attn_ok && c.vocab_size >= 1 &&
             c.n_group >= 1 && c.topk_group >= 1 && c.moe_layer_freq >= 1 && c.rms_norm_eps > 0.f &&
             isfinite(c.rms_norm_eps) && c.rope.theta > 0.f && isfinite(c.rope.theta) && c.rope.factor >= 1.f &&
             isfinite(c.rope.factor) && isfinite(c.routed_scaling_factor) && c.quant.n_targets >= 0 &&
             c.quant.n_targets <= PZ_QUANT_MAX_PATTERNS && c.quant.n_ignore >= 0 &&
             c.quant.n_ignore <= PZ_QUANT_MAX_IGNORE && memchr(c.name, 0, sizeof c.name) != NULL &&
             (c.quant.kind == PZ_WQ_NONE || c.quant.kind == PZ_WQ_INT4 || c.quant.kind == PZ_WQ_FP8);
  for (int i = 0; sane && i < c.quant.n_targets; i++) sane = memchr(c.quant.targets[i], 0, PZ_QUANT_PATTERN_LEN) != NULL;
  for (int i = 0; sane && i < c.quant.n_ignore; i++) sane = memchr(c.quant.ignore[i], 0, PZ_QUANT_PATTERN_LEN) != NULL;
  if (!sane) { fprintf(stderr, "config case %ld: PZ_OK with an insane result\n", case_no); pz_test_failures++; return; }
  alarm(10);
  (void)pz_quant_applies(&c.quant, "model.layers.3.mlp.experts.7.down_proj");
  (void)pz_quant_applies(&c.quant, "lm_head");
  alarm(0);
  for (int l = 0; l < 4; l++) (void)pz_config_layer_is_moe(&c, l);
}

static const char *const extra_config_seeds[] = {
  /* text_config (Kimi-K2.5 style) with quantization_config outside it, INT4 compressed-tensors. */
  "{\"model_type\":\"kimi_k25\",\"text_config\":{\"model_type\":\"kimi_k2\",\"hidden_size\":64,\"num_hidden_layers\":2,"
  "\"num_attention_heads\":2,\"q_lora_rank\":null,\"kv_lora_rank\":16,\"qk_nope_head_dim\":8,\"qk_rope_head_dim\":4,"
  "\"v_head_dim\":8,\"n_routed_experts\":4,\"n_shared_experts\":1,\"num_experts_per_tok\":2,\"moe_intermediate_size\":32,"
  "\"intermediate_size\":64,\"first_k_dense_replace\":1,\"n_group\":2,\"topk_group\":1,\"topk_method\":\"noaux_tc\","
  "\"scoring_func\":\"sigmoid\",\"norm_topk_prob\":true,\"routed_scaling_factor\":2.5,\"vocab_size\":100,"
  "\"max_position_embeddings\":256,\"rope_scaling\":{\"type\":\"yarn\",\"factor\":4,\"original_max_position_embeddings\":64,"
  "\"beta_fast\":32,\"beta_slow\":1,\"mscale\":1,\"mscale_all_dim\":1}},\"quantization_config\":{\"quant_method\":"
  "\"compressed-tensors\",\"format\":\"pack-quantized\",\"kv_cache_scheme\":null,\"config_groups\":{\"group_0\":{"
  "\"format\":\"pack-quantized\",\"input_activations\":null,\"targets\":[\"Linear\"],\"weights\":{\"type\":\"int\","
  "\"num_bits\":4,\"group_size\":32,\"strategy\":\"group\",\"symmetric\":true,\"actorder\":null,\"dynamic\":false}}},"
  "\"ignore\":[\"lm_head\",\"re:.*self_attn.*\",\"re:.*mlp\\\\.(gate|up|down)_proj.*\"]}}",
  /* dots1: q/k norms, DeepSeek-V3 routing in groups, shared experts, a sliding layer under max_window_layers. */
  "{\"model_type\":\"dots1\",\"hidden_size\":64,\"num_hidden_layers\":3,\"num_attention_heads\":4,"
  "\"num_key_value_heads\":2,\"intermediate_size\":64,\"moe_intermediate_size\":16,\"n_routed_experts\":8,"
  "\"num_experts_per_tok\":2,\"n_shared_experts\":2,\"n_group\":4,\"topk_group\":2,\"first_k_dense_replace\":1,"
  "\"norm_topk_prob\":true,\"routed_scaling_factor\":2.5,\"vocab_size\":256,\"max_position_embeddings\":128,"
  "\"rope_theta\":10000000,\"sliding_window\":64,\"max_window_layers\":2}",
  /* FP8 with weight_block_size. */
  "{\"model_type\":\"deepseek_v3\",\"hidden_size\":64,\"num_hidden_layers\":1,\"num_attention_heads\":2,\"q_lora_rank\":16,"
  "\"kv_lora_rank\":16,\"qk_nope_head_dim\":8,\"qk_rope_head_dim\":4,\"v_head_dim\":8,\"n_routed_experts\":null,"
  "\"num_experts_per_tok\":null,\"moe_intermediate_size\":32,\"intermediate_size\":64,\"vocab_size\":100,"
  "\"max_position_embeddings\":256,\"rms_norm_eps\":1e-6,\"rope_theta\":10000,\"quantization_config\":{\"quant_method\":"
  "\"fp8\",\"fmt\":\"e4m3\",\"activation_scheme\":\"dynamic\",\"weight_block_size\":[128,128]}}",
};

static void fuzz_config(void) {
  section = "config";
  const char *seeds[16];
  int ns = 0;
  for (int i = 0; pz_embedded_presets[i].name && ns < 10; i++) seeds[ns++] = pz_embedded_presets[i].json;
  for (size_t i = 0; i < sizeof extra_config_seeds / sizeof *extra_config_seeds; i++) seeds[ns++] = extra_config_seeds[i];
  long iters = getenv("PZ_FUZZ_ITERS") ? atol(getenv("PZ_FUZZ_ITERS")) : 3000;
  for (int s = 0; s < ns; s++) {
    size_t n = strlen(seeds[s]);
    config_case(seeds[s], n);
    pz_model_config c;
    if (pz_config_parse(seeds[s], n, "seed", &c) != PZ_OK) {
      fprintf(stderr, "config seed %d does not parse: %s\n", s, pz_last_error());
      pz_test_failures++;
    }
    for (size_t k = 0; k < n; k++) config_case(seeds[s], k);
    for (long i = 0; i < iters; i++) {
      size_t m;
      char *b = mutate_bytes(seeds[s], n, &m);
      config_case(b, m);
      free(b);
    }
    structured(seeds[s], config_case);
  }
  /* Deep nesting at the top, in a value, in text_config, quantization_config and rope_scaling. */
  const char *tc = extra_config_seeds[0];
  char *d[] = {
    nest("", "[", 100000, "", "]", ""),
    nest("", "{\"a\":", 100000, "1", "}", ""),
    nest("{\"q_lora_rank\":", "[", 900, "1", "]", "}"),
    nest("{\"text_config\":", "{\"text_config\":", 950, "{}", "}", "}"),
    nest("{\"kv_lora_rank\":1,\"quantization_config\":", "{\"quant_method\":", 500, "\"fp8\"", "}", "}"),
    nest("{\"kv_lora_rank\":1,\"rope_scaling\":{\"type\":\"yarn\",\"factor\":", "[", 990, "2", "]", "}}"),
  };
  for (size_t i = 0; i < sizeof d / sizeof *d; i++) { config_case(d[i], strlen(d[i])); free(d[i]); }
  /* Many fields, duplicate fields, a huge key list. */
  char *big = malloc(1 << 20), *p = big;
  p += sprintf(p, "{\"kv_lora_rank\":1");
  for (int i = 0; i < 3000; i++) p += sprintf(p, ",\"f%d\":%d", i, i);
  sprintf(p, "}");
  config_case(big, strlen(big));
  free(big);
  char dup[4096];
  snprintf(dup, sizeof dup, "%.*s,\"hidden_size\":64}", (int)strlen(tc) - 1, tc);
  config_case(dup, strlen(dup));
  config_case("", 0);
  config_case("\0\0\0", 3);
  config_case("{}", 2);
  config_case("null", 4);
}

/* ------------------------------------------------------------------ safetensors */

static char tdir[] = "/tmp/pz_test_fuzz_XXXXXX";
static char st_path[256];
static unsigned char *st_seed;
static size_t st_seed_n, st_seed_hlen;

static void write_file(const char *path, const void *b, size_t n) {
  FILE *f = fopen(path, "wb");
  if (!f || (n && fwrite(b, 1, n, f) != n) || fclose(f) != 0) { fprintf(stderr, "cannot write %s\n", path); exit(1); }
}

static void st_case_file(const char *path) {
  pz_st_file *f = (pz_st_file *)0x1;
  alarm(10);
  pz_status st = pz_st_open(path, &f);
  alarm(0);
  verdict(st, "safetensors");
  if (st != PZ_OK) {
    if (f) { fprintf(stderr, "safetensors case %ld: error but *out not NULL\n", case_no); pz_test_failures++; }
    return;
  }
  const unsigned char *lo = (const unsigned char *)f->map + 8, *hi = (const unsigned char *)f->map + f->size;
  int sane = f->n >= 0;
  unsigned sum = 0;
  for (int i = 0; sane && i < f->n; i++) {
    const pz_st_tensor *t = &f->t[i];
    int64_t numel = 1;
    for (int k = 0; k < t->ndim; k++) numel *= t->shape[k];
    const unsigned char *d = t->data;
    sane = t->name && t->ndim >= 0 && t->ndim <= PZ_ST_MAX_DIMS && t->dtype < PZ_ST_DTYPE_COUNT && numel == t->numel &&
           t->nbytes == (size_t)numel * pz_st_dtype_bits(t->dtype) / 8 && (t->nbytes == 0 || (d >= lo && d + t->nbytes <= hi)) &&
           pz_st_find(f, t->name) != NULL;
    for (size_t k = 0; sane && k < t->nbytes; k++) sum += d[k]; /* touch every byte */
  }
  if (!sane) { fprintf(stderr, "safetensors case %ld: PZ_OK with an insane result (sum %u)\n", case_no, sum); pz_test_failures++; }
  pz_st_close(f);
}
static void st_case(const void *b, size_t n) {
  write_file(st_path, b, n);
  st_case_file(st_path);
}
/* A file from a header text (length field = its length, or hl when hl != ~0), then data_n bytes. */
static void st_header_case_len(const char *hdr, size_t hn, uint64_t hl, size_t data_n) {
  size_t n = 8 + hn + data_n;
  unsigned char *b = malloc(n);
  uint64_t L = hl == ~0ull ? hn : hl;
  for (int i = 0; i < 8; i++) b[i] = (unsigned char)(L >> (8 * i));
  memcpy(b + 8, hdr, hn);
  for (size_t i = 0; i < data_n; i++) b[8 + hn + i] = (unsigned char)i;
  st_case(b, n);
  free(b);
}
static void st_header_case(const char *hdr, size_t hn) { st_header_case_len(hdr, hn, ~0ull, 64); }

static void fuzz_safetensors(void) {
  section = "safetensors";
  snprintf(st_path, sizeof st_path, "%s/x.safetensors", tdir);
  float a[6] = {1, 2, 3, 4, 5, 6};
  uint16_t bb[4] = {1, 2, 3, 4};
  int64_t c = 7;
  pz_st_write_entry e[4] = {{"a", PZ_ST_F32, 2, {2, 3}, a}, {"b", PZ_ST_BF16, 1, {4}, bb}, {"c", PZ_ST_I64, 0, {0}, &c},
                            {"d", PZ_ST_U8, 1, {0}, NULL}};
  CHECK_OK(pz_st_write(st_path, 4, e));
  st_seed = (unsigned char *)pz_test_slurp(st_path, &st_seed_n);
  CHECK(st_seed && st_seed_n > 8);
  if (!st_seed) return;
  for (int i = 7; i >= 0; i--) st_seed_hlen = (st_seed_hlen << 8) | st_seed[i];
  long e0 = n_err;
  st_case(st_seed, st_seed_n);
  CHECK(n_err == e0); /* the seed itself opens */
  /* Every truncation. */
  for (size_t k = 0; k < st_seed_n; k++) st_case(st_seed, k);
  /* Random byte mutations, mostly inside the header. */
  long iters = getenv("PZ_FUZZ_ITERS") ? atol(getenv("PZ_FUZZ_ITERS")) : 1500;
  for (long i = 0; i < iters; i++) {
    size_t m;
    char *b = mutate_bytes((const char *)st_seed + 8, (size_t)st_seed_hlen, &m);
    st_header_case_len(b, m, rndn(4) ? ~0ull : (uint64_t)st_seed_hlen, st_seed_n - 8 - st_seed_hlen);
    free(b);
  }
  for (long i = 0; i < iters / 4; i++) { /* whole-file flips, the length field included */
    unsigned char *b = malloc(st_seed_n);
    memcpy(b, st_seed, st_seed_n);
    for (int k = 0; k < 1 + (int)rndn(3); k++) b[rndn(i % 2 ? 8 : st_seed_n)] ^= (unsigned char)(1u << rndn(8));
    st_case(b, st_seed_n);
    free(b);
  }
  /* Header length field: 0, around the real one, beyond the file, huge. */
  const uint64_t lens[] = {0, 1, 2, st_seed_hlen - 1, st_seed_hlen + 1, st_seed_n - 8, st_seed_n - 7, st_seed_n,
                           1ull << 32, (256ull << 20) + 1, 1ull << 63, ~0ull - 1, ~0ull};
  for (size_t i = 0; i < sizeof lens / sizeof *lens; i++) {
    unsigned char *b = malloc(st_seed_n);
    memcpy(b, st_seed, st_seed_n);
    for (int k = 0; k < 8; k++) b[k] = (unsigned char)(lens[i] >> (8 * k));
    st_case(b, st_seed_n);
    free(b);
  }
  /* Structured mutations of the header (data kept). */
  char *hdr = malloc(st_seed_hlen + 1);
  memcpy(hdr, st_seed + 8, st_seed_hlen);
  hdr[st_seed_hlen] = 0;
  while (st_seed_hlen && hdr[strlen(hdr) - 1] == ' ') hdr[strlen(hdr) - 1] = 0;
  structured(hdr, st_header_case);
  free(hdr);
  /* Hand-written hostile headers. */
  static const char *const hs[] = {
    "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
    "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
    "{\"a\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[60,68]}}",
    "{\"a\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[64,72]}}",
    "{\"a\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[64,64]}}",
    "{\"a\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[65,65]}}",
    "{\"a\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[1e15,1e15]}}",
    "{\"a\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[-8,0]}}",
    "{\"a\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[8,0]}}",
    "{\"a\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[0.5,8.5]}}",
    "{\"a\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[\"0\",\"8\"]}}",
    "{\"a\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[0]}}",
    "{\"a\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[0,8,16]}}",
    "{\"a\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":{}}}",
    "{\"a\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[1e300,1e300]}}",
    "{\"a\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[9007199254740993,9007199254741001]}}",
    "{\"a\":{\"dtype\":\"U8\",\"shape\":[-1],\"data_offsets\":[0,0]}}",
    "{\"a\":{\"dtype\":\"U8\",\"shape\":[1e300],\"data_offsets\":[0,8]}}",
    "{\"a\":{\"dtype\":\"F64\",\"shape\":[2147483648,2147483648,4],\"data_offsets\":[0,8]}}",
    "{\"a\":{\"dtype\":\"F64\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,0]}}",
    "{\"a\":{\"dtype\":\"U8\",\"shape\":[0,1e15,1e15],\"data_offsets\":[0,0]}}",
    "{\"a\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,1]}}",
    "{\"a\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1],\"data_offsets\":[0,1]}}",
    "{\"a\":{\"dtype\":\"U8\",\"shape\":[1.5],\"data_offsets\":[0,1]}}",
    "{\"a\":{\"dtype\":\"U8\",\"shape\":[\"2\"],\"data_offsets\":[0,2]}}",
    "{\"a\":{\"dtype\":\"U8\",\"shape\":[[2]],\"data_offsets\":[0,2]}}",
    "{\"a\":{\"dtype\":\"U8\",\"shape\":null,\"data_offsets\":[0,2]}}",
    "{\"a\":{\"dtype\":\"F33\",\"shape\":[1],\"data_offsets\":[0,4]}}",
    "{\"a\":{\"dtype\":5,\"shape\":[1],\"data_offsets\":[0,4]}}",
    "{\"a\":{\"dtype\":\"\",\"shape\":[1],\"data_offsets\":[0,4]}}",
    "{\"a\":{\"dtype\":null,\"shape\":[1],\"data_offsets\":[0,4]}}",
    "{\"a\":{\"shape\":[1],\"data_offsets\":[0,4]}}",
    "{\"a\":5}", "{\"a\":[]}", "{\"a\":null}", "{\"a\":\"x\"}", "{\"a\":{}}",
    "{\"__metadata__\":{\"format\":\"pt\"}}", "{\"__metadata__\":5}", "{\"__metadata__\":null,\"__metadata__\":[]}",
    "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]}}",
    "{\"\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}",
    "[]", "\"str\"", "5", "null", "", "{", "{} x", "{}   ", "{}\t\r\n", "{\"a\\u0000b\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}",
  };
  for (size_t i = 0; i < sizeof hs / sizeof *hs; i++) {
    st_header_case(hs[i], strlen(hs[i]));
    for (size_t k = 0; k < strlen(hs[i]); k += 7) st_header_case_len(hs[i], k, strlen(hs[i]), 64);
  }
  st_header_case("{}\0\0\0\0\0\0", 8);
  st_header_case("{\0}", 3);
  char *d1 = nest("", "{\"a\":", 5000, "1", "}", ""), *d2 = nest("{\"a\":{\"dtype\":\"U8\",\"shape\":", "[", 3000, "1", "]", ",\"data_offsets\":[0,1]}}");
  st_header_case(d1, strlen(d1));
  st_header_case(d2, strlen(d2));
  free(d1);
  free(d2);
  char *many = malloc(1 << 20), *p = many;
  p += sprintf(p, "{");
  for (int i = 0; i < 5000; i++) p += sprintf(p, "%s\"t%d\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[%d,%d]}", i ? "," : "", i, i % 64, i % 64 + 1);
  sprintf(p, "}");
  st_header_case(many, strlen(many));
  free(many);
  /* Not a file, absent, empty. */
  st_case_file(tdir);
  char absent[300];
  snprintf(absent, sizeof absent, "%s/absent.safetensors", tdir);
  st_case_file(absent);
  st_case("", 0);
}

/* ------------------------------------------------------------------ checkpoint directories */

static char ck_dir[256];
static void ck_write(const char *name, const void *b, size_t n) {
  char p[512];
  snprintf(p, sizeof p, "%s/%s", ck_dir, name);
  write_file(p, b, n);
}
static void ck_open_case(void) {
  pz_checkpoint *ck = (pz_checkpoint *)0x1;
  alarm(10);
  pz_status st = pz_checkpoint_open(ck_dir, &ck);
  alarm(0);
  verdict(st, "checkpoint");
  if (st != PZ_OK) {
    if (ck) { fprintf(stderr, "checkpoint case %ld: error but *out not NULL\n", case_no); pz_test_failures++; }
    return;
  }
  int n = pz_checkpoint_count(ck);
  if (n < 0 || n > 16) { fprintf(stderr, "checkpoint case %ld: %d tensors\n", case_no, n); pz_test_failures++; }
  (void)pz_checkpoint_find(ck, "a");
  pz_checkpoint_close(ck);
}
static void index_case(const char *t, size_t n) { ck_write("model.safetensors.index.json", t, n); ck_open_case(); }
static void ckconfig_case(const char *t, size_t n) {
  ck_write("config.json", t, n);
  ck_open_case();
  pz_model_config c;
  alarm(10);
  pz_status st = pz_checkpoint_load_config(ck_dir, &c);
  alarm(0);
  verdict(st, "checkpoint config");
}

static void fuzz_checkpoint(void) {
  section = "checkpoint";
  snprintf(ck_dir, sizeof ck_dir, "%s/ck", tdir);
  mkdir(ck_dir, 0700);
  char p[512];
  float v[4] = {1, 2, 3, 4};
  pz_st_write_entry e1[2] = {{"a", PZ_ST_F32, 1, {2}, v}, {"b", PZ_ST_F32, 1, {2}, v + 2}};
  pz_st_write_entry e2[1] = {{"c", PZ_ST_F32, 2, {2, 2}, v}};
  pz_st_write_entry e3[1] = {{"a", PZ_ST_F32, 1, {1}, v}};
  snprintf(p, sizeof p, "%s/s1.safetensors", ck_dir);
  CHECK_OK(pz_st_write(p, 2, e1));
  snprintf(p, sizeof p, "%s/s2.safetensors", ck_dir);
  CHECK_OK(pz_st_write(p, 1, e2));
  snprintf(p, sizeof p, "%s/s3.safetensors", ck_dir);
  CHECK_OK(pz_st_write(p, 1, e3));
  snprintf(p, sizeof p, "%s/bad.safetensors", ck_dir);
  write_file(p, "\xff\xff\xff\xff\xff\xff\xff\xff{}", 10);
  snprintf(p, sizeof p, "%s/sub", ck_dir);
  mkdir(p, 0700);
  const char *idx = "{\"metadata\":{\"total_size\":32},\"weight_map\":{\"a\":\"s1.safetensors\",\"b\":\"s1.safetensors\","
                    "\"c\":\"s2.safetensors\"}}";
  size_t n = strlen(idx);
  long e0 = n_err;
  index_case(idx, n);
  CHECK(n_err == e0); /* the valid index opens */
  for (size_t k = 0; k < n; k++) index_case(idx, k);
  long iters = getenv("PZ_FUZZ_ITERS") ? atol(getenv("PZ_FUZZ_ITERS")) / 3 : 500;
  for (long i = 0; i < iters; i++) {
    size_t m;
    char *b = mutate_bytes(idx, n, &m);
    index_case(b, m);
    free(b);
  }
  structured(idx, index_case);
  static const char *const shard_names[] = {"../s1.safetensors", "/etc/passwd", "", ".", "sub", "sub/", "absent.safetensors",
                                            "s1.safetensors/", "s3.safetensors", "bad.safetensors", "model.safetensors.index.json",
                                            "s1.safetensors\\u0000x", "..", "./s1.safetensors"};
  for (size_t i = 0; i < sizeof shard_names / sizeof *shard_names; i++) {
    char t[512];
    snprintf(t, sizeof t, "{\"weight_map\":{\"a\":\"s1.safetensors\",\"c\":\"%s\"}}", shard_names[i]);
    index_case(t, strlen(t));
    snprintf(t, sizeof t, "{\"weight_map\":{\"a\":\"%s\"}}", shard_names[i]);
    index_case(t, strlen(t));
  }
  const char *idx_bad[] = {"{\"weight_map\":{\"zz\":\"s1.safetensors\"}}", "{\"weight_map\":{\"a\":\"s1.safetensors\",\"a\":\"s3.safetensors\"}}",
                           "{\"weight_map\":{\"b\":\"s1.safetensors\",\"a\":\"s3.safetensors\"}}", "{\"weight_map\":{}}",
                           "{\"weight_map\":[]}", "{\"weight_map\":{\"a\":5}}", "[]", "{}", "null"};
  for (size_t i = 0; i < sizeof idx_bad / sizeof *idx_bad; i++) index_case(idx_bad[i], strlen(idx_bad[i]));
  char *deep = nest("{\"weight_map\":", "{\"a\":", 20000, "1", "}", "}");
  index_case(deep, strlen(deep));
  free(deep);
  /* config.json next to a valid index: the extras reader and pz_checkpoint_load_config. */
  index_case(idx, n);
  const char *cfg = extra_config_seeds[1];
  size_t cn = strlen(cfg);
  for (size_t k = 0; k < cn; k += 3) ckconfig_case(cfg, k);
  for (long i = 0; i < iters; i++) {
    size_t m;
    char *b = mutate_bytes(cfg, cn, &m);
    ckconfig_case(b, m);
    free(b);
  }
  structured(cfg, ckconfig_case);
  const char *ck_cfgs[] = {"{\"quantization_config\":{\"weight_block_size\":[1e300,-1]}}",
                           "{\"quantization_config\":{\"weight_block_size\":[0.5,2]}}",
                           "{\"text_config\":5,\"quantization_config\":{\"weight_block_size\":5}}",
                           "{\"text_config\":{\"tie_word_embeddings\":true,\"quantization_config\":[]}}"};
  for (size_t i = 0; i < sizeof ck_cfgs / sizeof *ck_cfgs; i++) ckconfig_case(ck_cfgs[i], strlen(ck_cfgs[i]));
  snprintf(p, sizeof p, "%s/config.json", ck_dir);
  unlink(p);
  /* No index: model.safetensors, mutated. */
  snprintf(p, sizeof p, "%s/model.safetensors.index.json", ck_dir);
  unlink(p);
  ck_open_case(); /* neither file */
  ck_write("model.safetensors", st_seed, st_seed_n);
  ck_open_case();
  for (long i = 0; i < iters / 2; i++) {
    unsigned char *b = malloc(st_seed_n);
    memcpy(b, st_seed, st_seed_n);
    b[rndn(st_seed_n)] ^= (unsigned char)(1u << rndn(8));
    ck_write("model.safetensors", b, st_seed_n);
    ck_open_case();
    free(b);
  }
}

/* ------------------------------------------------------------------ CLI argument parsers */

static off_t err_size(void) { return lseek(2, 0, SEEK_END); }

static void prompt_case(const char *arg) {
  prompts pr;
  memset(&pr, 0, sizeof pr);
  off_t before = err_size();
  alarm(10);
  int r = parse_prompts(arg, &pr);
  alarm(0);
  case_no++;
  if (r == 0) {
    n_ok++;
    int total = 0, mx = 0, sane = pr.n >= 1 && pr.n <= PZ_ENGINE_MAX_BATCH;
    for (int i = 0; sane && i < pr.n; i++) {
      sane = pr.len[i] >= 1 && pr.off[i] == total;
      total += pr.len[i];
      if (pr.len[i] > mx) mx = pr.len[i];
    }
    for (int i = 0; sane && i < total; i++) sane = pr.tok[i] >= 0;
    sane = sane && total == pr.len_total && mx == pr.max_len;
    if (!sane) { fprintf(stdout, "prompt-ids case %ld '%.60s': OK with an insane result\n", case_no, arg); pz_test_failures++; }
    free_prompts(&pr);
  } else {
    n_err++;
    if (err_size() <= before) { fprintf(stdout, "prompt-ids case %ld '%.60s': refused without a message\n", case_no, arg); pz_test_failures++; }
    if (pr.tok || pr.off || pr.len) { fprintf(stdout, "prompt-ids case %ld: refused but not freed\n", case_no); pz_test_failures++; }
  }
}

static void fuzz_cli(void) {
  section = "cli";
  fflush(stderr);
  int saved = dup(2);
  char ep[300];
  snprintf(ep, sizeof ep, "%s/stderr.txt", tdir);
  FILE *ef = fopen(ep, "w+");
  if (!ef || saved < 0) { CHECK(0); return; }
  dup2(fileno(ef), 2);
  static const char alpha[] = "0123456789,;-+ x\t.e";
  char buf[64];
  long iters = getenv("PZ_FUZZ_ITERS") ? atol(getenv("PZ_FUZZ_ITERS")) * 3 : 5000;
  for (long i = 0; i < iters; i++) {
    size_t len = rndn(40);
    for (size_t k = 0; k < len; k++) buf[k] = rndn(3) ? alpha[rndn(10)] : alpha[rndn(sizeof alpha - 1)];
    buf[len] = 0;
    prompt_case(buf);
    long long x = 0;
    off_t before = err_size();
    int r = parse_int("--steps", buf, 1, 1000000, &x);
    case_no++;
    if (r == 0) n_ok++; else n_err++;
    if (r == 0 && (x < 1 || x > 1000000)) { printf("parse_int '%s' -> %lld\n", buf, x); pz_test_failures++; }
    if (r != 0 && err_size() <= before) { printf("parse_int '%s' refused without a message\n", buf); pz_test_failures++; }
    unsigned long long seed = 0;
    (void)pz_cli_parse_seed(buf, &seed);
  }
  static const char *const fixed[] = {"", ";", ",", "1;", ";1", "1,", ",1", "1;;2", "1,,2", "2147483647", "2147483648",
                                      "-1", "-0", "+5", " 5", "5 ", "99999999999999999999", "1;2;3", "0", "1e3", "0x10"};
  for (size_t i = 0; i < sizeof fixed / sizeof *fixed; i++) prompt_case(fixed[i]);
  size_t bn = 300000;
  char *big = malloc(bn * 2 + 2);
  for (size_t k = 0; k < bn; k++) { big[2 * k] = '7'; big[2 * k + 1] = ','; }
  big[2 * bn - 1] = 0;
  prompt_case(big); /* 300000 tokens, one prompt */
  for (size_t k = 0; k < 300; k++) { big[2 * k] = '1'; big[2 * k + 1] = ';'; }
  big[599] = 0;
  prompt_case(big); /* 300 prompts: more than PZ_ENGINE_MAX_BATCH */
  big[2 * 256 - 1] = 0;
  prompt_case(big); /* exactly 256 */
  free(big);
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  fclose(ef);
  unlink(ep);
}

static void rm_tree(void) {
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tdir);
  if (system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", tdir);
}

/* ------------------------------------------------------------------ GEMM tuner table */

static const char *const tt_dev = "NVIDIA H200";
static const int tt_sm = 132;

/* Loads text into a fresh table; every kept entry must lie in the documented ranges, and a
 * best_* must name a flavour the entry kept. */
static void tuner_case(const char *text, size_t len) {
  pz_tuner_table t;
  memset(&t, 0, sizeof t);
  snprintf(t.device, sizeof t.device, "%s", tt_dev);
  t.sm_count = tt_sm;
  int dropped = -1;
  pz_status st = pz_tuner_table_load_text(&t, text, len, &dropped);
  verdict(st, "tuner");
  for (int i = 0; st == PZ_OK && i < t.count; i++) {
    const pz_tuner_entry *e = &t.e[i];
    bool ok = e->m_bucket >= 1 && e->m_bucket <= 256 && !(e->m_bucket & (e->m_bucket - 1)) && e->n >= 64 &&
              e->n % 64 == 0 && e->k >= 64 && e->k % 64 == 0 && e->n <= (1 << 20) && e->k <= (1 << 20);
    for (int f = 1; f < PZ_GEMM_FLAVOUR_COUNT; f++) {
      const pz_gemm_config *c = &e->cfg[f];
      if (c->splits == 0) continue;
      ok = ok && (int)c->flavour == f && c->splits >= 1 && c->splits <= 4096 && c->wt >= 1 && c->wt <= 8 && c->warps >= 1 &&
           c->warps <= 32 && c->wn >= 0 && c->wn <= 4 && e->us[f] >= 0 && e->us[f] < 1e12 &&
           (c->bn == 0 || (c->wn == 3 && c->bn >= 16 && c->bn <= (c->wt == 4 ? 128 : 256) && !(c->bn & (c->bn - 1))));
    }
    ok = ok && (e->best_nozero == PZ_GEMM_AUTO || (e->best_nozero < PZ_GEMM_FLAVOUR_COUNT && e->cfg[e->best_nozero].splits > 0));
    ok = ok && (e->best_zero == PZ_GEMM_AUTO || (e->best_zero < PZ_GEMM_FLAVOUR_COUNT && e->cfg[e->best_zero].splits > 0));
    if (!ok) {
      fprintf(stderr, "tuner case %ld: entry %d (m %d n %d k %d) kept outside the documented ranges\n", case_no, i,
              e->m_bucket, e->n, e->k);
      pz_test_failures++;
      break;
    }
  }
  pz_tuner_table_free(&t);
}

static void fuzz_tuner(void) {
  section = "tuner";
  const char *full = pz_gemm_builtin_table(tt_dev, tt_sm);
  if (!full) { fprintf(stderr, "no built-in table for %s / %d SMs\n", tt_dev, tt_sm); pz_test_failures++; return; }
  /* The whole built-in table must load with nothing dropped; then a 3-entry seed is mutated. */
  pz_tuner_table t;
  memset(&t, 0, sizeof t);
  snprintf(t.device, sizeof t.device, "%s", tt_dev);
  t.sm_count = tt_sm;
  int dropped = -1;
  cJSON *root = cJSON_Parse(full);
  CHECK(root != NULL);
  CHECK_OK(pz_tuner_table_load_text(&t, full, strlen(full), &dropped));
  CHECK(dropped == 0);
  CHECK(t.count == cJSON_GetArraySize(cJSON_GetObjectItem(root, "entries")));
  pz_tuner_table_free(&t);
  cJSON *ents = cJSON_GetObjectItem(root, "entries");
  while (cJSON_GetArraySize(ents) > 3) cJSON_DeleteItemFromArray(ents, 3);
  char *seed = cJSON_PrintUnformatted(root);
  cJSON_Delete(root);
  const size_t n = strlen(seed);
  tuner_case(seed, n);
  for (size_t k = 0; k < n; k++) tuner_case(seed, k);
  long iters = getenv("PZ_FUZZ_ITERS") ? atol(getenv("PZ_FUZZ_ITERS")) : 3000;
  for (long i = 0; i < iters; i++) {
    size_t m;
    char *b = mutate_bytes(seed, n, &m);
    tuner_case(b, m);
    free(b);
  }
  structured(seed, tuner_case);
  free(seed);
  char *d = nest("{\"device\":\"NVIDIA H200\",\"sm_count\":132,\"entries\":", "[", 900, "1", "]", "}");
  tuner_case(d, strlen(d));
  free(d);
  tuner_case("", 0);
  tuner_case("null", 4);
}

int main(void) {
  const char *sv = getenv("PZ_FUZZ_SEED");
  rs = sv ? strtoull(sv, NULL, 0) : 19;
  signal(SIGALRM, on_alarm);
  if (!mkdtemp(tdir)) { perror("mkdtemp"); return 1; }
  long c0;
  struct { const char *name; void (*fn)(void); } secs[] = {{"config", fuzz_config}, {"safetensors", fuzz_safetensors},
                                                           {"checkpoint", fuzz_checkpoint}, {"cli", fuzz_cli},
                                                           {"tuner", fuzz_tuner}};
  for (size_t i = 0; i < sizeof secs / sizeof *secs; i++) {
    c0 = case_no;
    long ok0 = n_ok, err0 = n_err;
    double t0 = now_s();
    secs[i].fn();
    printf("%-12s %7ld inputs: %6ld ok, %6ld refused with a message (%.1f s)\n", secs[i].name, case_no - c0, n_ok - ok0,
           n_err - err0, now_s() - t0);
  }
  free(st_seed);
  rm_tree();
  TEST_DONE();
}
