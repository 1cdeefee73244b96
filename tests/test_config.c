/* config.json reader: presets, the text_config-wrapped form, defaults, a leading UTF-8 BOM, and
 * every kind of bad input (malformed, truncated, missing field, wrong type, bad values, invalid
 * UTF-8) written to a temp dir; rope_scaling messages name the dotted field path. */
#include "model/config.h"
#include "pz_test.h"
#include <string.h>
#include <unistd.h>

/* A valid DeepSeek-V3-like config, one "key": value per entry. */
static const char *const base[][2] = {
    {"hidden_size", "512"}, {"num_hidden_layers", "4"}, {"num_attention_heads", "8"},
    {"q_lora_rank", "128"}, {"kv_lora_rank", "96"}, {"qk_nope_head_dim", "32"},
    {"qk_rope_head_dim", "32"}, {"v_head_dim", "64"}, {"n_routed_experts", "64"},
    {"n_shared_experts", "1"}, {"num_experts_per_tok", "6"}, {"moe_intermediate_size", "128"},
    {"intermediate_size", "1024"}, {"first_k_dense_replace", "1"}, {"moe_layer_freq", "1"},
    {"n_group", "8"}, {"topk_group", "4"}, {"topk_method", "\"noaux_tc\""},
    {"scoring_func", "\"sigmoid\""}, {"norm_topk_prob", "true"}, {"routed_scaling_factor", "2.5"},
    {"vocab_size", "1024"}, {"max_position_embeddings", "4096"}, {"rms_norm_eps", "1e-6"},
    {"rope_theta", "10000"}, {"hidden_act", "\"silu\""},
    {"rope_scaling", "{\"type\": \"yarn\", \"factor\": 40, \"original_max_position_embeddings\": 4096, "
                     "\"beta_fast\": 32, \"beta_slow\": 1, \"mscale\": 0.707, \"mscale_all_dim\": 0.707}"},
};
#define NBASE ((int)(sizeof base / sizeof base[0]))

/* JSON text of base with field `key` dropped (value NULL) or replaced by `value`. */
static void make(char *out, size_t cap, const char *key, const char *value) {
  size_t o = (size_t)snprintf(out, cap, "{\n");
  int first = 1;
  for (int i = 0; i < NBASE; i++) {
    const char *v = base[i][1];
    if (key && !strcmp(key, base[i][0])) {
      if (!value) continue;
      v = value;
    }
    o += (size_t)snprintf(out + o, cap - o, "%s  \"%s\": %s", first ? "" : ",\n", base[i][0], v);
    first = 0;
  }
  snprintf(out + o, cap - o, "\n}\n");
}

static char dir[] = "/tmp/pz_test_config_XXXXXX";

static const char *write_file(const char *name, const char *text) {
  static char path[256];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "w");
  if (!f) { perror(path); exit(1); }
  fputs(text, f);
  fclose(f);
  return path;
}

/* Expects loading `text` from a file to fail with status `want` and a message containing `needle`. */
static void expect_bad(const char *name, const char *text, pz_status want, const char *needle) {
  pz_model_config c;
  const char *p = write_file(name, text);
  pz_status s = pz_config_load(p, &c);
  if (s != want) {
    fprintf(stderr, "%s: got %s (%s), want %s\n", name, pz_status_string(s), pz_last_error(), pz_status_string(want));
    pz_test_failures++;
  } else if (needle && !strstr(pz_last_error(), needle)) {
    fprintf(stderr, "%s: message '%s' does not mention '%s'\n", name, pz_last_error(), needle);
    pz_test_failures++;
  } else if (strchr(pz_last_error(), '\n')) {
    fprintf(stderr, "%s: message spans several lines: '%s'\n", name, pz_last_error());
    pz_test_failures++;
  }
}

/* A leading UTF-8 byte-order mark is skipped (by cJSON; Windows tools write one, Python's
 * utf-8-sig reads it): the same config with and without it parses to the same struct, from text
 * and from a file; error offsets still count from the file's first byte. */
static void test_bom(void) {
  char text[8192], bommed[8200];
  make(text, sizeof text, NULL, NULL);
  snprintf(bommed, sizeof bommed, "\xef\xbb\xbf%s", text);
  pz_model_config a, b;
  memset(&a, 0x55, sizeof a);
  memset(&b, 0xaa, sizeof b);
  CHECK_OK(pz_config_parse(text, strlen(text), "cfg", &a));
  CHECK_OK(pz_config_parse(bommed, strlen(bommed), "cfg", &b));
  CHECK(memcmp(&a, &b, sizeof a) == 0);
  CHECK(b.hidden_size == 512 && b.n_group == 8 && b.rope.factor == 40.f);
  memset(&b, 0xaa, sizeof b);
  CHECK_OK(pz_config_load(write_file("bom.json", bommed), &b));
  CHECK(b.hidden_size == 512 && b.kv_lora_rank == 96 && b.topk_method == PZ_TOPK_NOAUX_TC);
  /* Only one mark, only in front; a bare mark is an empty document; the error offset of a
   * malformed file counts the mark (byte 2 without it, 5 with it). */
  expect_bad("bom_twice.json", "\xef\xbb\xbf\xef\xbb\xbf{}", PZ_ERR_CONFIG, "malformed or truncated JSON at byte 3 ");
  expect_bad("bom_inside.json", "{\xef\xbb\xbf}", PZ_ERR_CONFIG, "malformed or truncated JSON at byte 2 ");
  expect_bad("bom_only.json", "\xef\xbb\xbf", PZ_ERR_CONFIG, "malformed or truncated JSON at byte 0 (line 1) of 3");
  expect_bad("nobom_bad.json", "{hidden_size: 512}", PZ_ERR_CONFIG, "malformed or truncated JSON at byte 2 ");
  expect_bad("bom_bad.json", "\xef\xbb\xbf{hidden_size: 512}", PZ_ERR_CONFIG, "malformed or truncated JSON at byte 5 ");
  expect_bad("bom_utf16.json", "\xff\xfe{}", PZ_ERR_CONFIG, "malformed or truncated JSON at byte 0 ");
  /* NaN / Infinity as Python's json.dump writes them: named with their field, not "truncated". */
  expect_bad("nan.json", "{\"model_type\": \"llama\",\n \"rms_norm_eps\": NaN, \"hidden_size\": 64}", PZ_ERR_CONFIG,
             "field \"rms_norm_eps\" is NaN at byte 41 (line 2), which is not JSON (Python's json.dump writes it for a "
             "non-finite float); give a finite number");
  expect_bad("inf.json", "{\"routed_scaling_factor\": Infinity}", PZ_ERR_CONFIG,
             "field \"routed_scaling_factor\" is Infinity at byte 26 (line 1)");
  expect_bad("neginf.json", "{\"rope_scaling\": {\"factor\": -Infinity}}", PZ_ERR_CONFIG,
             "field \"factor\" is -Infinity at byte 28 (line 1)");
  expect_bad("nan_list.json", "[NaN]", PZ_ERR_CONFIG, "a value is NaN at byte 1 (line 1)");
}

/* Keys and string values must be valid UTF-8; the message names the field by its dotted path. */
static void test_utf8(void) {
  char text[8192];
  static const char *const bad_mt[][2] = {
      {"\"deepseek_v3\xff\"", "byte 0xff at 11"},   /* never valid */
      {"\"\x80x\"", "byte 0x80 at 0"},               /* lone continuation byte */
      {"\"\xc0\xaf\"", "byte 0xc0 at 0"},            /* overlong '/' */
      {"\"a\xe0\x80\xaf" "b\"", "byte 0xe0 at 1"},   /* overlong, 3 bytes */
      {"\"\xed\xa0\x80\"", "byte 0xed at 0"},        /* UTF-16 surrogate U+D800 */
      {"\"\xf4\x90\x80\x80\"", "byte 0xf4 at 0"},    /* above U+10FFFF */
      {"\"ab\xe2\x82\"", "byte 0xe2 at 2"},           /* cut short at the end */
      {"\"\xe2\x82x\"", "byte 0xe2 at 0"},            /* cut short inside */
  };
  char want[160];
  for (size_t i = 0; i < sizeof bad_mt / sizeof bad_mt[0]; i++) {
    make(text, sizeof text, NULL, NULL);
    size_t n = strlen(text);
    snprintf(text + n - 3, sizeof text - (n - 3), ",\n  \"model_type\": %s\n}\n", bad_mt[i][0]);
    snprintf(want, sizeof want, "field \"model_type\" is not valid UTF-8 (%s of the string); save the file as UTF-8",
             bad_mt[i][1]);
    expect_bad("mt_utf8.json", text, PZ_ERR_CONFIG, want);
  }
  /* Nested objects, arrays, text_config and keys. */
  make(text, sizeof text, "rope_scaling", "{\"type\": \"ya\xffrn\", \"factor\": 40}");
  expect_bad("rs_utf8.json", text, PZ_ERR_CONFIG, "field \"rope_scaling.type\" is not valid UTF-8 (byte 0xff at 2");
  make(text, sizeof text, "topk_method", "[\"ok\", \"n\xc3\"]");
  expect_bad("arr_utf8.json", text, PZ_ERR_CONFIG, "field \"topk_method[1]\" is not valid UTF-8 (byte 0xc3 at 1");
  expect_bad("tc_utf8.json", "{\"text_config\": {\"model_type\": \"llama\xfe\"}}", PZ_ERR_CONFIG,
             "field \"text_config.model_type\" is not valid UTF-8");
  expect_bad("key_utf8.json", "{\"hidden\xa0size\": 1}", PZ_ERR_CONFIG,
             "a field name at the top level is not valid UTF-8 (byte 0xa0 at 6)");
  make(text, sizeof text, "rope_scaling", "{\"type\": \"yarn\", \"fa\xe9" "ctor\": 40}");
  expect_bad("rskey_utf8.json", text, PZ_ERR_CONFIG, "a field name in \"rope_scaling\" is not valid UTF-8 (byte 0xe9 at 2)");
  /* Well-formed multi-byte text anywhere (1- to 4-byte sequences, the largest code point) parses. */
  make(text, sizeof text, NULL, NULL);
  size_t n = strlen(text);
  snprintf(text + n - 3, sizeof text - (n - 3), ",\n  \"_name_or_path\": \"mod\xc3\xa8le \xe6\xa8\xa1\xe5\x9e\x8b "
           "\xf0\x9f\xa6\x99 \xf4\x8f\xbf\xbf \xed\x9f\xbf\xee\x80\x80\",\n  \"\xc3\xa9\": [\"\xe2\x82\xac\"]\n}\n");
  pz_model_config c;
  CHECK_OK(pz_config_parse(text, strlen(text), "utf8_ok", &c));
  CHECK(c.hidden_size == 512 && c.kv_lora_rank == 96);
  /* A NUL escape would cut the string short ("deepseek_v3\u0000x" read as "deepseek_v3"): refused;
   * an escaped backslash before "u0000" is plain text and parses. */
  make(text, sizeof text, NULL, NULL);
  n = strlen(text);
  snprintf(text + n - 3, sizeof text - (n - 3), ",\n  \"_name_or_path\": \"x\\u0000y\"\n}\n");
  expect_bad("nul_escape.json", text, PZ_ERR_CONFIG, "a string holds the NUL escape \\u0000 at byte");
  make(text, sizeof text, NULL, NULL);
  n = strlen(text);
  snprintf(text + n - 3, sizeof text - (n - 3), ",\n  \"_name_or_path\": \"x\\\\u0000y\"\n}\n");
  CHECK_OK(pz_config_parse(text, strlen(text), "escaped_backslash", &c));
}

/* Every rope_scaling message names its field by the dotted path, like the GQA reader's. */
static void test_rope_messages(void) {
  char text[8192];
  static const char *const cases[][2] = {
      {"{\"type\": \"yarn\", \"factor\": 1e999, \"original_max_position_embeddings\": 4096}",
       "field \"rope_scaling.factor\" is inf, must be a finite float"},
      {"{\"type\": \"yarn\", \"factor\": \"4\", \"original_max_position_embeddings\": 4096}",
       "field \"rope_scaling.factor\" must be a number, got a string"},
      {"{\"type\": \"yarn\", \"factor\": 0.5, \"original_max_position_embeddings\": 4096}",
       "field \"rope_scaling.factor\" must be >= 1"},
      {"{\"type\": \"yarn\", \"factor\": 4}",
       "required field \"rope_scaling.original_max_position_embeddings\" is missing"},
      {"{\"type\": \"yarn\", \"factor\": 4, \"original_max_position_embeddings\": 0}",
       "field \"rope_scaling.original_max_position_embeddings\" is 0, must be >= 1"},
      {"{\"type\": \"yarn\", \"factor\": 4, \"original_max_position_embeddings\": 4096.5}",
       "field \"rope_scaling.original_max_position_embeddings\" must be an integer, got a number"},
      {"{\"type\": \"yarn\", \"factor\": 4, \"original_max_position_embeddings\": 4096, \"beta_fast\": -1e999}",
       "field \"rope_scaling.beta_fast\" is -inf, must be a finite float"},
      {"{\"type\": \"yarn\", \"factor\": 4, \"original_max_position_embeddings\": 4096, \"beta_slow\": null}",
       "field \"rope_scaling.beta_slow\" must be a number, got null"},
      {"{\"type\": \"yarn\", \"factor\": 4, \"original_max_position_embeddings\": 4096, \"mscale\": true}",
       "field \"rope_scaling.mscale\" must be a number, got a boolean"},
      {"{\"type\": \"yarn\", \"factor\": 4, \"original_max_position_embeddings\": 4096, \"mscale_all_dim\": 1e999}",
       "field \"rope_scaling.mscale_all_dim\" is inf, must be a finite float"},
      {"{\"type\": \"yarn\", \"factor\": 4, \"original_max_position_embeddings\": 4096, \"beta_slow\": 0}",
       "fields \"rope_scaling.beta_fast\" (32) and \"rope_scaling.beta_slow\" (0) must be > 0"},
      {"{\"type\": \"yarn\", \"factor\": 4, \"factor\": 5, \"original_max_position_embeddings\": 4096}",
       "field \"rope_scaling.factor\" appears twice"},
      /* the correction range inverted (was accepted); transformers warns on it */
      {"{\"type\": \"yarn\", \"factor\": 4, \"original_max_position_embeddings\": 4096, \"beta_fast\": 1, "
       "\"beta_slow\": 32}",
       "field \"rope_scaling.beta_fast\" (1) is below \"rope_scaling.beta_slow\" (32); beta_fast must be >= beta_slow"},
      {"{\"type\": \"yarn\", \"factor\": 4, \"original_max_position_embeddings\": 4096, \"beta_fast\": 0.5}",
       "field \"rope_scaling.beta_fast\" (0.5) is below \"rope_scaling.beta_slow\" (1)"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    make(text, sizeof text, "rope_scaling", cases[i][0]);
    expect_bad("rope_msg.json", text, PZ_ERR_CONFIG, cases[i][1]);
  }
}

/* Configs as transformers 5's save_pretrained writes them: only the fields that differ from the
 * config class's defaults (to_json_file(use_diff=True)), RoPE under rope_parameters. A field left out
 * takes DeepseekV3Config's / DeepseekV2Config's default (transformers 5.24): V3 always routes noaux_tc
 * over sigmoid scores (it has no topk_method / scoring_func), 8 groups, top 4 groups, 8 experts,
 * factor 2.5, 1 shared expert, 3 dense layers; V2 greedy over softmax, 2 shared experts. A file without
 * model_type keeps every dimension required. rope_interleave false and attention_bias true are refused
 * (prezero has no kernels for them; transformers' defaults are true / false). */
static void test_hf_saved(void) {
  pz_model_config c;
  const char *dims = "\"hidden_size\": 256, \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"q_lora_rank\": 64, "
                     "\"kv_lora_rank\": 32, \"qk_nope_head_dim\": 16, \"qk_rope_head_dim\": 16, \"v_head_dim\": 16, "
                     "\"n_routed_experts\": 16, \"moe_intermediate_size\": 64, \"intermediate_size\": 128, "
                     "\"vocab_size\": 512";
  char t[2048];
  snprintf(t, sizeof t, "{\"model_type\": \"deepseek_v3\", %s}", dims);
  CHECK_OK(pz_config_parse(t, strlen(t), "v3", &c));
  CHECK(c.topk_method == PZ_TOPK_NOAUX_TC && c.scoring_func == PZ_SCORE_SIGMOID && c.n_group == 8 && c.topk_group == 4);
  CHECK(c.num_experts_per_tok == 8 && c.n_shared_experts == 1 && c.routed_scaling_factor == 2.5f && c.norm_topk_prob);
  CHECK(c.first_k_dense_replace == 3 && c.max_position_embeddings == 4096 && c.rope.type == PZ_ROPE_DEFAULT);
  /* moe_layer_freq: transformers' classes ignore it (experts on every layer from first_k_dense_replace),
     DeepSeek's remote code (auto_map) reads it */
  snprintf(t, sizeof t, "{\"model_type\": \"deepseek_v3\", %s, \"moe_layer_freq\": 2}", dims);
  CHECK_OK(pz_config_parse(t, strlen(t), "freq", &c));
  CHECK(c.moe_layer_freq == 1);
  snprintf(t, sizeof t, "{\"model_type\": \"deepseek_v3\", %s, \"moe_layer_freq\": 2, \"auto_map\": {\"AutoConfig\": "
           "\"configuration_deepseek.DeepseekV3Config\"}}", dims);
  CHECK_OK(pz_config_parse(t, strlen(t), "freq_remote", &c));
  CHECK(c.moe_layer_freq == 2);
  snprintf(t, sizeof t, "{\"model_type\": \"deepseek_v3\", \"hidden_size\": 256}"); /* every other dimension: V3's */
  CHECK_OK(pz_config_parse(t, strlen(t), "v3min", &c));
  CHECK(c.kv_lora_rank == 512 && c.q_lora_rank == 1536 && c.num_attention_heads == 128 && c.n_routed_experts == 256);
  snprintf(t, sizeof t, "{\"model_type\": \"deepseek_v2\", %s, \"num_experts_per_tok\": 4}", dims);
  CHECK_OK(pz_config_parse(t, strlen(t), "v2", &c));
  CHECK(c.topk_method == PZ_TOPK_GREEDY && c.scoring_func == PZ_SCORE_SOFTMAX && c.n_group == 1 && c.topk_group == 1);
  CHECK(c.n_shared_experts == 2 && c.routed_scaling_factor == 1.f && !c.norm_topk_prob && c.first_k_dense_replace == 0);
  snprintf(t, sizeof t, "{\"model_type\": \"deepseek_v2\", %s}", dims); /* DeepseekV2Config's top-k is None */
  CHECK(pz_config_parse(t, strlen(t), "v2k", &c) == PZ_ERR_CONFIG && strstr(pz_last_error(), "num_experts_per_tok"));
  snprintf(t, sizeof t, "{%s, \"num_experts_per_tok\": 4}", dims); /* no model_type: DeepSeek's remote-code defaults */
  CHECK(pz_config_parse(t, strlen(t), "none", &c) == PZ_ERR_CONFIG && strstr(pz_last_error(), "max_position_embeddings"));
  /* rope_parameters: yarn, default with its rope_theta, and the refusals */
  snprintf(t, sizeof t, "{\"model_type\": \"deepseek_v3\", %s, \"rope_parameters\": {\"rope_type\": \"yarn\", \"factor\": 4, "
           "\"original_max_position_embeddings\": 1024, \"rope_theta\": 50000, \"mscale_all_dim\": 1}}", dims);
  CHECK_OK(pz_config_parse(t, strlen(t), "yarn", &c));
  CHECK(c.rope.type == PZ_ROPE_YARN && c.rope.factor == 4.f && c.rope.theta == 50000.f && c.rope.mscale_all_dim == 1.f &&
        c.rope.original_max_position_embeddings == 1024);
  snprintf(t, sizeof t, "{\"model_type\": \"deepseek_v3\", %s, \"rope_scaling\": null, \"rope_parameters\": "
           "{\"rope_type\": \"default\", \"rope_theta\": 50000}}", dims);
  CHECK_OK(pz_config_parse(t, strlen(t), "default", &c));
  CHECK(c.rope.type == PZ_ROPE_DEFAULT && c.rope.theta == 50000.f);
  static const char *const bad[][2] = {
      {"\"rope_parameters\": {\"rope_type\": \"linear\", \"factor\": 2}", "\"rope_parameters.rope_type\" is \"linear\""},
      {"\"rope_parameters\": {\"rope_type\": \"yarn\", \"factor\": 2}",
       "required field \"rope_parameters.original_max_position_embeddings\""},
      {"\"rope_parameters\": {\"rope_type\": \"default\"}, \"rope_scaling\": {\"type\": \"yarn\", \"factor\": 2}",
       "are both given"},
      {"\"rope_interleave\": false", "\"rope_interleave\" is false"},
      {"\"attention_bias\": true", "\"attention_bias\" is true"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    snprintf(t, sizeof t, "{\"model_type\": \"deepseek_v3\", %s, %s}", dims, bad[i][0]);
    const pz_status st = pz_config_parse(t, strlen(t), "bad", &c);
    if (st != PZ_ERR_CONFIG || !strstr(pz_last_error(), bad[i][1])) {
      fprintf(stderr, "hf_saved case %zu: got %s '%s', want '%s'\n", i, pz_status_string(st), pz_last_error(), bad[i][1]);
      pz_test_failures++;
    }
  }
}

/* The 64 MiB bound of a config file: a file of 64 MiB + 1 byte (sparse: NUL bytes after a '{') is refused with
 * the bound named (it was read while under 128 MiB); one a little under it is read whole, and refused for
 * its NUL bytes. */
static void test_size_bound(void) {
  static const long long sizes[2] = {(64LL << 20) + 1, (64LL << 20) - 4096};
  for (int i = 0; i < 2; i++) {
    char path[300];
    snprintf(path, sizeof path, "%s/big%d.json", dir, i);
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (!f) return;
    fputc('{', f);
    CHECK(fseek(f, sizes[i] - 1, SEEK_SET) == 0 && fputc(' ', f) != EOF);
    fclose(f);
    pz_model_config c;
    CHECK(pz_config_load(path, &c) == PZ_ERR_CONFIG);
    CHECK(strstr(pz_last_error(), i ? "a raw NUL byte at byte 1 of 67104768" : "64 MiB or larger") != NULL);
    remove(path);
  }
}

/* norm_topk_prob with one expert per token: refused under deepseek_v3 / kimi_k2 (transformers' router
 * gives the expert weight 1, the MoE op its score), accepted under deepseek_v2 and without model_type
 * (DeepSeek's code normalises from two experts, as the op does), and with norm_topk_prob false. */
static void test_top1_norm(void) {
  static const char *const mts[] = {"deepseek_v3", "kimi_k2", "deepseek_v2", NULL};
  static const int refused[] = {1, 1, 0, 0};
  char t[8192], u[8400];
  pz_model_config c;
  make(t, sizeof t, "num_experts_per_tok", "1");
  for (int i = 0; i < 4; i++) {
    if (mts[i]) snprintf(u, sizeof u, "{\"model_type\": \"%s\",%s", mts[i], t + 1);
    else snprintf(u, sizeof u, "%s", t);
    pz_status st = pz_config_parse(u, strlen(u), "top1", &c);
    if (refused[i]) {
      CHECK(st == PZ_ERR_CONFIG && strstr(pz_last_error(), "\"norm_topk_prob\" true with num_experts_per_tok 1") &&
            !strchr(pz_last_error(), '\n'));
    } else {
      CHECK_OK(st);
      CHECK(c.num_experts_per_tok == 1 && c.norm_topk_prob);
    }
  }
  make(t, sizeof t, "norm_topk_prob", "false");
  snprintf(u, sizeof u, "{\"model_type\": \"deepseek_v3\",%s", t + 1);
  CHECK_OK(pz_config_parse(u, strlen(u), "top1", &c)); /* top-6 without normalising: accepted as before */
}

int main(void) {
  if (!mkdtemp(dir)) { perror("mkdtemp"); return 1; }
  test_hf_saved();
  test_size_bound();
  test_top1_norm();
  pz_model_config c;
  char text[8192], wrapped[8400];

  /* Presets (values from the Hugging Face config.json of each model). */
  CHECK_OK(pz_config_load("kimi_k2", &c));
  CHECK(c.hidden_size == 7168 && c.num_attention_heads == 64 && c.q_lora_rank == 1536 && c.kv_lora_rank == 512);
  CHECK(c.n_routed_experts == 384 && c.num_experts_per_tok == 8 && c.first_k_dense_replace == 1);
  CHECK(c.topk_method == PZ_TOPK_NOAUX_TC && c.scoring_func == PZ_SCORE_SIGMOID && c.norm_topk_prob);
  CHECK_NEAR(c.routed_scaling_factor, 2.827, 1e-6);
  CHECK_NEAR(c.rope.theta, 50000, 0);
  CHECK_NEAR(c.rope.factor, 32, 0);
  CHECK(c.rope.original_max_position_embeddings == 4096 && c.vocab_size == 163840);
  CHECK(!strcmp(c.name, "kimi_k2"));
  CHECK(!pz_config_layer_is_moe(&c, 0) && pz_config_layer_is_moe(&c, 1) && pz_config_layer_is_moe(&c, 60));

  CHECK_OK(pz_config_load("deepseek_v3", &c));
  CHECK(c.num_attention_heads == 128 && c.n_routed_experts == 256 && c.n_group == 8 && c.topk_group == 4);
  CHECK(c.first_k_dense_replace == 3 && !pz_config_layer_is_moe(&c, 2) && pz_config_layer_is_moe(&c, 3));

  CHECK_OK(pz_config_load("deepseek_v2_lite", &c));
  CHECK(c.q_lora_rank == 0);  /* null in config.json */
  CHECK(c.topk_method == PZ_TOPK_GREEDY && c.scoring_func == PZ_SCORE_SOFTMAX && !c.norm_topk_prob);
  CHECK(c.n_shared_experts == 2 && c.moe_intermediate_size == 1408 && c.intermediate_size == 10944);
  CHECK_NEAR(c.rope.mscale_all_dim, 0.707, 1e-6);

  /* tiny: the default, and its split-K GEMMs have n, k multiples of 64 at TP 1, 2, 4, 8. */
  CHECK_OK(pz_config_load(NULL, &c));
  CHECK(!strcmp(c.name, "tiny"));
  CHECK(c.q_lora_rank > 0 && c.topk_method == PZ_TOPK_NOAUX_TC && c.n_group > 1 && c.rope.factor > 1);
  CHECK(c.first_k_dense_replace == 1 && c.num_attention_heads % 8 == 0);
  for (int tp = 1; tp <= 8; tp *= 2) {
    int64_t qh = c.qk_nope_head_dim + c.qk_rope_head_dim, heads = c.num_attention_heads / tp;
    int64_t nk[4][2] = {{c.q_lora_rank + c.kv_lora_rank + c.qk_rope_head_dim, c.hidden_size},  /* qkv_a */
                        {heads * qh, c.q_lora_rank},                                           /* q_b */
                        {c.hidden_size, heads * c.v_head_dim},                                 /* o_proj */
                        {c.n_routed_experts, c.hidden_size}};                                  /* gate */
    for (int i = 0; i < 4; i++) CHECK(nk[i][0] % 64 == 0 && nk[i][1] % 64 == 0);
  }

  /* A file with the full base parses; the values and YaRN fields come through. */
  make(text, sizeof text, NULL, NULL);
  CHECK_OK(pz_config_load(write_file("ok.json", text), &c));
  CHECK(c.hidden_size == 512 && c.topk_group == 4 && c.n_group == 8);
  CHECK_NEAR(c.rope.factor, 40, 0);
  CHECK_NEAR(c.rope.mscale, 0.707, 1e-6);
  CHECK_NEAR(pz_yarn_get_mscale(40.f, 0.707f), 0.1 * 0.707 * log(40.0) + 1.0, 1e-6);
  CHECK_NEAR(pz_yarn_get_mscale(1.f, 0.707f), 1.0, 0);

  /* text_config-wrapped form gives the same values. */
  snprintf(wrapped, sizeof wrapped, "{\"model_type\": \"kimi_k25\", \"vision_config\": {}, \"text_config\": %s}", text);
  pz_model_config w;
  CHECK_OK(pz_config_parse(wrapped, strlen(wrapped), "wrapped", &w));
  CHECK(w.hidden_size == c.hidden_size && w.kv_lora_rank == c.kv_lora_rank && w.n_group == c.n_group);
  CHECK(!strcmp(w.name, "kimi_k25"));

  /* Defaults for optional fields. */
  make(text, sizeof text, "rope_scaling", NULL);
  CHECK_OK(pz_config_parse(text, strlen(text), "no_rope_scaling", &c));
  CHECK(c.rope.factor == 1.f && c.rope.original_max_position_embeddings == 4096);
  make(text, sizeof text, "topk_method", NULL);
  CHECK_OK(pz_config_parse(text, strlen(text), "no_topk_method", &c));
  CHECK(c.topk_method == PZ_TOPK_GREEDY);
  make(text, sizeof text, "q_lora_rank", "null");
  CHECK_OK(pz_config_parse(text, strlen(text), "q_lora_null", &c));
  CHECK(c.q_lora_rank == 0);

  /* Malformed and truncated JSON. */
  make(text, sizeof text, NULL, NULL);
  char half[4096];
  snprintf(half, sizeof half, "%.*s", (int)(strlen(text) / 2), text);
  expect_bad("truncated.json", half, PZ_ERR_CONFIG, "JSON");
  expect_bad("empty.json", "", PZ_ERR_CONFIG, "JSON");
  expect_bad("malformed.json", "{hidden_size: 512}", PZ_ERR_CONFIG, "JSON");
  expect_bad("trailing_comma.json", "{\"hidden_size\": 512,}", PZ_ERR_CONFIG, "JSON");
  expect_bad("array.json", "[1, 2]", PZ_ERR_CONFIG, "object");
  snprintf(wrapped, sizeof wrapped, "%s}", text);
  expect_bad("trailing_text.json", wrapped, PZ_ERR_CONFIG, "after");

  /* Each required field missing. */
  const char *required[] = {"hidden_size", "num_hidden_layers", "num_attention_heads", "q_lora_rank", "kv_lora_rank",
                            "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "n_routed_experts",
                            "num_experts_per_tok", "moe_intermediate_size", "intermediate_size", "vocab_size",
                            "max_position_embeddings"};
  for (size_t i = 0; i < sizeof required / sizeof required[0]; i++) {
    make(text, sizeof text, required[i], NULL);
    expect_bad("missing.json", text, PZ_ERR_CONFIG, required[i]);
    CHECK(strstr(pz_last_error(), "missing") != NULL);
  }
  make(text, sizeof text, "rope_scaling", "{\"type\": \"yarn\", \"original_max_position_embeddings\": 4096}");
  expect_bad("missing_factor.json", text, PZ_ERR_CONFIG, "factor");

  /* Wrong types. */
  make(text, sizeof text, "hidden_size", "\"7168\"");
  expect_bad("string_int.json", text, PZ_ERR_CONFIG, "hidden_size");
  make(text, sizeof text, "kv_lora_rank", "512.5");
  expect_bad("fraction.json", text, PZ_ERR_CONFIG, "kv_lora_rank");
  make(text, sizeof text, "num_attention_heads", "true");
  expect_bad("bool_int.json", text, PZ_ERR_CONFIG, "num_attention_heads");
  make(text, sizeof text, "norm_topk_prob", "1");
  expect_bad("int_bool.json", text, PZ_ERR_CONFIG, "norm_topk_prob");
  make(text, sizeof text, "rms_norm_eps", "\"1e-6\"");
  expect_bad("string_float.json", text, PZ_ERR_CONFIG, "rms_norm_eps");
  make(text, sizeof text, "topk_method", "3");
  expect_bad("int_string.json", text, PZ_ERR_CONFIG, "topk_method");
  make(text, sizeof text, "rope_scaling", "[40]");
  expect_bad("array_obj.json", text, PZ_ERR_CONFIG, "rope_scaling");
  make(text, sizeof text, "hidden_size", "null");
  expect_bad("null_int.json", text, PZ_ERR_CONFIG, "hidden_size");
  expect_bad("text_config_type.json", "{\"text_config\": 3}", PZ_ERR_CONFIG, "text_config");

  /* Unsupported or inconsistent values. */
  make(text, sizeof text, "topk_method", "\"random\"");
  expect_bad("method.json", text, PZ_ERR_CONFIG, "topk_method");
  make(text, sizeof text, "scoring_func", "\"relu\"");
  expect_bad("scoring.json", text, PZ_ERR_CONFIG, "scoring_func");
  make(text, sizeof text, "rope_scaling", "{\"type\": \"linear\", \"factor\": 2}");
  expect_bad("rope_type.json", text, PZ_ERR_CONFIG, "rope_scaling.type");
  /* DeepseekV2/V3 MLPs take ACT2FN[hidden_act]; prezero's are SiLU only, so another activation is
   * refused as in the GQA families (it ran as SiLU, a different model); absent means "silu". */
  make(text, sizeof text, "hidden_act", "\"gelu\"");
  expect_bad("act_gelu.json", text, PZ_ERR_CONFIG, "field \"hidden_act\" is \"gelu\", supported: silu");
  make(text, sizeof text, "hidden_act", "1");
  expect_bad("act_type.json", text, PZ_ERR_CONFIG, "hidden_act");
  make(text, sizeof text, "hidden_act", NULL);
  CHECK_OK(pz_config_load(write_file("act_absent.json", text), &c));
  make(text, sizeof text, "hidden_size", "0");
  expect_bad("zero.json", text, PZ_ERR_CONFIG, "hidden_size");
  make(text, sizeof text, "num_experts_per_tok", "65");
  expect_bad("topk.json", text, PZ_ERR_CONFIG, "num_experts_per_tok");
  /* n_routed_experts 0 with 6 per token: an MoE layout without experts (it ran as a dense model);
   * null stays the dense model it is in transformers. */
  make(text, sizeof text, "n_routed_experts", "0");
  expect_bad("experts0.json", text, PZ_ERR_CONFIG, "\"num_experts_per_tok\" (6) must be in 1..n_routed_experts (0); ");
  make(text, sizeof text, "n_routed_experts", "null");
  CHECK_OK(pz_config_load(write_file("experts_null.json", text), &c));
  CHECK(c.n_routed_experts == 0 && !pz_config_layer_is_moe(&c, 1));
  make(text, sizeof text, "n_group", "7");
  expect_bad("groups.json", text, PZ_ERR_CONFIG, "n_group");
  make(text, sizeof text, "qk_rope_head_dim", "33");
  expect_bad("odd_rope.json", text, PZ_ERR_CONFIG, "qk_rope_head_dim");
  /* q_lora_rank 0 read as null (no q LoRA); transformers builds a 0-wide q_a_proj from it. */
  make(text, sizeof text, "q_lora_rank", "0");
  expect_bad("q_lora0.json", text, PZ_ERR_CONFIG, "field \"q_lora_rank\" is 0, must be >= 1; use null for no q LoRA");
  make(text, sizeof text, "q_lora_rank", "-2");
  expect_bad("q_lora_neg.json", text, PZ_ERR_CONFIG, "field \"q_lora_rank\" is -2, must be >= 1");
  /* A raw NUL byte inside a key: cJSON's key ended there ("model\0_type" read as "model"). */
  {
    make(text, sizeof text, NULL, NULL);
    char *k = strstr(text, "\"vocab_size\"");
    CHECK(k != NULL);
    if (k) {
      k[6] = 0; /* "vocab\0size" */
      const size_t len = strlen(text) + 1 + strlen(k + 7);
      char path[300];
      snprintf(path, sizeof path, "%s/nul.json", dir);
      FILE *f = fopen(path, "wb");
      CHECK(f && fwrite(text, 1, len, f) == len);
      if (f) fclose(f);
      CHECK_ST(pz_config_load(path, &c), PZ_ERR_CONFIG);
      CHECK(strstr(pz_last_error(), "invalid JSON: a raw NUL byte at byte") && strstr(pz_last_error(), "; "));
      CHECK_ST(pz_config_parse(text, len, "nul", &c), PZ_ERR_CONFIG);
      k[6] = '_';
      CHECK_OK(pz_config_parse(text, strlen(text), "nul_fixed", &c));
    }
  }

  /* Unknown preset lists the presets; a missing file is an I/O error. */
  CHECK_ST(pz_config_load("kimi_k3", &c), PZ_ERR_NOT_FOUND);
  CHECK(strstr(pz_last_error(), "kimi_k3") && strstr(pz_last_error(), "kimi_k2") &&
        strstr(pz_last_error(), "deepseek_v2_lite") && strstr(pz_last_error(), "tiny"));
  CHECK(strstr(pz_config_preset_names(), "deepseek_v3") != NULL);
  CHECK_ST(pz_config_load("/nonexistent/dir/config.json", &c), PZ_ERR_IO);

  test_bom();
  test_utf8();
  test_rope_messages();

  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd)) fprintf(stderr, "could not remove %s\n", dir);
  TEST_DONE();
}
