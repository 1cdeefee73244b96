/* Error messages stay valid UTF-8: a config string cut by a %.Ns inside a multi-byte character, a
 * message cut at the end of the message buffer, and a path with a raw non-UTF-8 byte come back with
 * '?' in place of each broken byte, never the byte itself. */
#include "core/status.h"
#include "core/utf8.h"
#include "model/config.h"
#include "pz_test.h"
#include <string.h>

#define LLAMA_BASE                                                                                                     \
  "\"hidden_size\": 256, \"num_hidden_layers\": 2, \"num_attention_heads\": 8, \"intermediate_size\": 512, "          \
  "\"vocab_size\": 1024, \"max_position_embeddings\": 8192"
#define X39 "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"

static void expect_msg(int line, const char *json, const char *want) {
  pz_model_config c;
  pz_status st = pz_config_parse(json, strlen(json), "f.json", &c);
  if (st != PZ_ERR_CONFIG || strcmp(pz_last_error(), want)) {
    fprintf(stderr, "line %d: -> %s \"%s\"\n  want \"%s\"\n", line, pz_status_string(st), pz_last_error(), want);
    pz_test_failures++;
  }
  CHECK(pz_utf8_bad_at(pz_last_error()) == -1);
}

int main(void) {
  /* model_type cut at 40 bytes, inside the two bytes of U+00E9 */
  expect_msg(__LINE__, "{\"model_type\": \"" X39 "\xc3\xa9\"}",
             "config f.json: model_type \"" X39 "?\" is not supported; prezero runs the DeepSeek-V2 family "
             "(deepseek_v2, deepseek_v3, kimi_k2: MLA) and llama, mistral, qwen2, qwen3, qwen3_moe, mixtral, glm4_moe, phi3, dots1 (GQA)");
  /* rope_scaling.rope_type cut the same way */
  expect_msg(__LINE__, "{\"model_type\": \"llama\", " LLAMA_BASE ", \"rope_scaling\": {\"rope_type\": \"" X39
             "\xc3\xa9\", \"factor\": 2.0}}",
             "config f.json: field \"rope_scaling.rope_type\" is \"" X39 "?\", which prezero does not support for "
             "model_type llama (supported: null, \"default\", \"llama3\", \"yarn\")");
  /* a long hidden_act: quoted up to 64 bytes (cut inside a character), the supported list kept */
  char json[4096], want[512];
  int o = snprintf(json, sizeof json, "{\"model_type\": \"llama\", " LLAMA_BASE ", \"hidden_act\": \"z");
  for (int i = 0; i < 600; i++) o += snprintf(json + o, sizeof json - (size_t)o, "\xc3\xa9");
  snprintf(json + o, sizeof json - (size_t)o, "\"}");
  o = snprintf(want, sizeof want, "config f.json: field \"hidden_act\" is \"z");
  for (int i = 0; i < 31; i++) o += snprintf(want + o, sizeof want - (size_t)o, "\xc3\xa9");
  snprintf(want + o, sizeof want - (size_t)o, "?\" (cut), supported: silu");
  expect_msg(__LINE__, json, want);
  /* a path with a raw 0xff byte, and a message cut at the buffer's end inside a character */
  CHECK(pz_error(PZ_ERR_IO, "config %s: cannot open", "/a/b\xff.json") == PZ_ERR_IO);
  CHECK(!strcmp(pz_last_error(), "config /a/b?.json: cannot open"));
  char longs[2048];
  memset(longs, 'a', 1022);
  memcpy(longs + 1022, "\xc3\xa9", 3); /* U+00E9 at bytes 1022..1023: the buffer keeps 1023 */
  pz_error(PZ_ERR_CONFIG, "%s", longs);
  const char *m = pz_last_error();
  CHECK(strlen(m) == 1023 && m[1022] == '?' && pz_utf8_bad_at(m) == -1);
  /* valid UTF-8 is left as it is */
  pz_error(PZ_ERR_CONFIG, "%s", "kl\xd1\x8e\xd1\x87 \xe2\x82\xac \xf0\x9f\x98\x80");
  CHECK(!strcmp(pz_last_error(), "kl\xd1\x8e\xd1\x87 \xe2\x82\xac \xf0\x9f\x98\x80"));
  TEST_DONE();
}
