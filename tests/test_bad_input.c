/* Hostile input beyond test_cli.c: odd flag values, degenerate and oversized config.json files,
 * corrupt checkpoint directories and misuse of the public API. Each CLI case must exit 1 or 2
 * (never a signal) with exactly one stderr line "prezero <cmd>: <what>; <fix>". Runs that must
 * succeed pass --device cpu, so the test means the same on a GPU machine. */
#define _GNU_SOURCE 1 /* setenv, mkdtemp */
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "model/config.h"
#include "prezero.h"
#include "prezero/graph.h"
#include "pz_test.h"
#include "pz_cli_test.h"

static const char *cli;
static char dir[] = "/tmp/pz_test_bad_XXXXXX";
static char out_txt[1 << 16], err_txt[1 << 16];

/* Runs the CLI with `args` (shell words); see pz_cli_run. */
static int run(const char *args) {
  return pz_cli_run(cli, dir, args, out_txt, sizeof out_txt, err_txt, sizeof err_txt);
}

static int count(const char *hay, const char *needle) {
  int n = 0;
  for (const char *p = strstr(hay, needle); p; p = strstr(p + 1, needle)) n++;
  return n;
}

/* `prezero cmd args` must fail cleanly: exit 1 or 2, one stderr line with the prefix, a "; "
 * before the advice, and `needle` in it; no decode output. */
static int last_rc; /* exit code of the last bad() */
static void bad(const char *cmd, const char *args, const char *needle) {
  char full[2048], prefix[64];
  snprintf(full, sizeof full, "%s %s", cmd, args);
  snprintf(prefix, sizeof prefix, "prezero %s: ", cmd);
  int rc = last_rc = run(full);
  size_t n = strlen(err_txt);
  int ok = (rc == 1 || rc == 2) && n > 0 && err_txt[n - 1] == '\n' && count(err_txt, "\n") == 1 &&
           !strncmp(err_txt, prefix, strlen(prefix)) && strstr(err_txt, needle) && strstr(err_txt, "; ") &&
           !strstr(out_txt, "step 1:") && !strstr(out_txt, "seq 0:");
  if (!ok) {
    fprintf(stderr, "FAIL: prezero %s -> exit %d, stderr: [%s] (want one line with '%s')\n", full, rc, err_txt, needle);
    pz_test_failures++;
  }
}

static void path_of(char *buf, size_t cap, const char *name) {
  if (snprintf(buf, cap, "%s/%s", dir, name) >= (int)cap) { /* a test's own name too long: fail loudly */
    fprintf(stderr, "FAIL: path %s/%s longer than %zu bytes\n", dir, name, cap);
    pz_test_failures++;
  }
}

static void write_bytes(const char *name, const void *data, size_t n) {
  char p[400];
  path_of(p, sizeof p, name);
  FILE *f = fopen(p, "wb");
  if (!f || fwrite(data, 1, n, f) != n) { perror(p); exit(1); }
  fclose(f);
}
static void write_text(const char *name, const char *text) { write_bytes(name, text, strlen(text)); }

static void make_dir(const char *name) {
  char p[400];
  path_of(p, sizeof p, name);
  if (mkdir(p, 0777) != 0) { perror(p); exit(1); }
}

/* A safetensors file: 8-byte little-endian header length, the header, then data_len zero bytes
 * (header_len_override != 0 replaces the length field). */
static void write_st(const char *name, const char *header, size_t data_len, uint64_t header_len_override) {
  size_t hl = strlen(header), n = 8 + hl + data_len;
  unsigned char *b = calloc(1, n);
  uint64_t L = header_len_override ? header_len_override : hl;
  for (int i = 0; i < 8; i++) b[i] = (unsigned char)(L >> (8 * i));
  memcpy(b + 8, header, hl);
  write_bytes(name, b, n);
  free(b);
}

/* The tiny preset's fields as a config.json body with `extra` appended (a later key of the same
 * name is refused as a duplicate, so callers replace fields through `fmt` instead). */
#define TINY_FIELDS                                                                                         \
  "\"intermediate_size\": 1024, \"moe_intermediate_size\": 128, \"num_attention_heads\": 8, "               \
  "\"q_lora_rank\": 128, \"kv_lora_rank\": 96, \"qk_nope_head_dim\": 32, \"qk_rope_head_dim\": 32, "        \
  "\"v_head_dim\": 64, \"n_shared_experts\": 1, \"first_k_dense_replace\": 1, \"topk_method\": \"noaux_tc\", " \
  "\"scoring_func\": \"sigmoid\", \"norm_topk_prob\": true, \"routed_scaling_factor\": 2.5, "                 \
  "\"max_position_embeddings\": 4096"

/* config.json with hidden, layers, experts, top-k, n_group, vocab as given plus `extra`. */
static void write_cfg(const char *name, const char *hidden, const char *layers, const char *experts, const char *topk,
                      const char *ngroup, const char *vocab, const char *extra) {
  char t[4096];
  snprintf(t, sizeof t,
           "{" TINY_FIELDS ", \"hidden_size\": %s, \"num_hidden_layers\": %s, \"n_routed_experts\": %s, "
           "\"num_experts_per_tok\": %s, \"n_group\": %s, \"topk_group\": 1, \"vocab_size\": %s%s}",
           hidden, layers, experts, topk, ngroup, vocab, extra);
  write_text(name, t);
}

static void cli_flags(void) {
  char a[600];
  /* TP: odd, zero, negative, too large for tiny's 8 heads, above the limit, junk, overflow. */
  bad("run", "--tp 3", "num_attention_heads");
  bad("run", "--tp -1", "--tp");
  bad("run", "--tp 16", "num_attention_heads");
  bad("run", "--tp 128", "--tp");
  bad("run", "--tp 2x", "integer");
  bad("run", "--tp 99999999999999999999", "integer");
  bad("graph", "--tp 0", "--tp");
  bad("graph", "--config kimi_k2 --tp 128", "--tp");
  /* Batch. */
  bad("run", "--batch abc", "integer");
  bad("run", "--batch -1", "--batch");
  bad("run", "--batch 1.5", "integer");
  bad("graph", "--batch 257", "--batch");
  /* Context: == max_position_embeddings leaves no room for a step; max - 1 with one step fits. */
  bad("run", "--context 4096 --steps 1", "max_position_embeddings");
  bad("run", "--context -1", "--context");
  CHECK(run("run --context 4095 --steps 1 --batch 1 --device cpu") == 0 && strstr(out_txt, "step 1:"));
  /* Steps, layers. */
  bad("run", "--steps -3", "--steps");
  bad("run", "--steps 1000001", "--steps");
  bad("run", "--layers 0", "--layers");    /* was silently "all layers" */
  bad("run", "--layers -1", "--layers");
  bad("graph", "--layers 0", "--layers");
  bad("graph", "--config kimi_k2 --layers 62", "num_hidden_layers");
  /* Seed: negative and one past 2^64 - 1; 2^64 - 1 itself is a seed. */
  bad("run", "--seed -1", "--seed");
  bad("run", "--seed 18446744073709551616", "--seed");
  CHECK(run("run --seed 18446744073709551615 --steps 1 --batch 1 --device cpu") == 0 && strstr(out_txt, "step 1:"));
  /* Leading zeros are decimal (base 0 made 010 octal 8 and refused 08); 0x is hex. */
  CHECK(run("run --seed 010 --steps 1 --batch 1 --device cpu") == 0 && strstr(out_txt, "seed 10,"));
  CHECK(run("run --seed 08 --steps 1 --batch 1 --device cpu") == 0 && strstr(out_txt, "seed 8,"));
  CHECK(run("run --seed 0x10 --steps 1 --batch 1 --device cpu") == 0 && strstr(out_txt, "seed 16,"));
  bad("run", "--seed 0x", "--seed");
  bad("run", "--seed 12abc", "--seed");
  /* --device cuda that cannot run says why (no CUDA backend in this build, or no GPU) and the fix
   * (it said "device 1 is not available" in a build without CUDA). */
#ifndef PZ_HAVE_CUDA
  bad("run", "--device cuda --steps 1", "this build has no CUDA backend");
  CHECK(strstr(err_txt, "; rebuild with nvcc present (PZ_WITH_CUDA=ON) or use the CPU device (--device cpu)") &&
        !strstr(err_txt, "device 1"));
#else
  if (pz_gpu_count() == 0) {
    bad("run", "--device cuda --steps 1", "no CUDA GPU is visible");
    CHECK(strstr(err_txt, "--device cpu") != NULL);
  }
#endif
  /* Threads, empty config, empty prompt lists, a --logits path that cannot be written. */
  bad("run", "--threads 100000", "--threads");
  bad("run", "--threads -2", "--threads");
  bad("run", "--config ''", "--config");
  bad("graph", "--config ''", "--config");
  bad("run", "--prompt-ids ''", "--prompt-ids");
  bad("run", "--prompt-ids '1,,2'", "--prompt-ids");
  bad("run", "--prompt-ids '1;'", "--prompt-ids");
  bad("run", "--prompt-ids 1,-2", "--prompt-ids");
  bad("run", "--prompt-ids 1,1024", "vocab_size");
  bad("run", "--steps 1 --logits /nonexistent-dir/l.bin", "--logits");
  bad("graph", "--dot /nonexistent-dir/g.dot", "--dot");
  CHECK(out_txt[0] == 0); /* checked before the graph is printed (it printed the whole graph first) */
  /* --render of a directory says so (it said "out of memory reading the JSON"). */
  snprintf(a, sizeof a, "--render %s", dir);
  bad("compare", a, "is a directory; give the path of a compare.json");
  CHECK(last_rc == 1 && !strstr(err_txt, "memory"));
  bad("run", "--config tiny extra", "unknown option");
  /* Output that cannot be written (a full disk) is an error, not a silent exit 0. */
  if (access("/dev/full", W_OK) == 0) {
    const char *full_cmds[] = {"run --steps 1 --batch 1 --device cpu", "graph --layers 1"};
    for (int i = 0; i < 2; i++) {
      char cmd[1024], p[300];
      snprintf(cmd, sizeof cmd, "\"%s\" %s >/dev/full 2>%s/err", cli, full_cmds[i], dir);
      int rc = system(cmd);
      snprintf(p, sizeof p, "%s/err", dir);
      slurp(p, err_txt, sizeof err_txt);
      if (!(WIFEXITED(rc) && WEXITSTATUS(rc) == 1 && count(err_txt, "\n") == 1 && strstr(err_txt, "standard output") &&
            strstr(err_txt, "; "))) {
        fprintf(stderr, "FAIL: prezero %s >/dev/full -> %d, stderr [%s]\n", full_cmds[i], rc, err_txt);
        pz_test_failures++;
      }
    }
  }
  /* --prezero on with the pass switched off by PREZERO_DISABLE_PASSES reports what ran: off. */
  setenv("PREZERO_DISABLE_PASSES", "prezero", 1);
  CHECK(run("run --prezero on --steps 1 --batch 1 --device cpu") == 0 && strstr(out_txt, "prezero off"));
  unsetenv("PREZERO_DISABLE_PASSES");
  CHECK(run("run --prezero on --steps 1 --batch 1 --device cpu") == 0 && strstr(out_txt, "prezero on"));
  /* A flag beats its environment variable: --prezero against PREZERO_ENABLE, both ways. */
  setenv("PREZERO_ENABLE", "1", 1);
  CHECK(run("run --prezero off --steps 1 --batch 1 --device cpu") == 0 && strstr(out_txt, "prezero off"));
  CHECK(run("run --steps 1 --batch 1 --device cpu") == 0 && strstr(out_txt, "prezero on"));
  CHECK(run("graph --prezero off --layers 1") == 0 && strstr(out_txt, "# prezero off"));
  setenv("PREZERO_ENABLE", "0", 1);
  CHECK(run("run --prezero on --steps 1 --batch 1 --device cpu") == 0 && strstr(out_txt, "prezero on"));
  CHECK(run("graph --prezero on --layers 1") == 0 && strstr(out_txt, "# prezero on"));
  unsetenv("PREZERO_ENABLE");
  /* A malformed variable: one line and exit 2 (the command's input is wrong) in run, graph and plan alike. */
  static const char *const malformed[][2] = {{"PREZERO_MLP_GEMM", "2"}, {"PREZERO_CUDA_GRAPH_SIZES", "0,-1"}};
  for (size_t i = 0; i < sizeof malformed / sizeof malformed[0]; i++) {
    setenv(malformed[i][0], malformed[i][1], 1);
    bad("run", "--steps 1", malformed[i][0]);
    CHECK(last_rc == 2);
    bad("graph", "--layers 1", malformed[i][0]);
    CHECK(last_rc == 2);
    bad("plan", "--layers 1", malformed[i][0]);
    CHECK(last_rc == 2);
    unsetenv(malformed[i][0]);
  }
  /* A PREZERO_DISABLE_PASSES that names no pass: the same line and exit 2 in run, graph and plan (graph
   * exited 1, plan accepted it and printed the rewrite). */
  setenv("PREZERO_DISABLE_PASSES", "prezer0", 1);
  bad("run", "--prezero on --steps 1 --batch 1 --device cpu", "PREZERO_DISABLE_PASSES: no pass is called 'prezer0'");
  CHECK(last_rc == 2);
  bad("graph", "--prezero on --layers 1", "PREZERO_DISABLE_PASSES: no pass is called 'prezer0'");
  CHECK(last_rc == 2 && out_txt[0] == 0);
  bad("plan", "--config tiny --layers 1 --batch 1", "PREZERO_DISABLE_PASSES: no pass is called 'prezer0'");
  CHECK(last_rc == 2 && out_txt[0] == 0);
  unsetenv("PREZERO_DISABLE_PASSES");
  /* An environment switch that points nowhere names itself, not --config. */
  setenv("PREZERO_DUMP_GRAPH", "/nonexistent-dir/dump", 1);
  bad("graph", "", "PREZERO_DUMP_GRAPH");
  bad("run", "--steps 1", "PREZERO_DUMP_GRAPH");
  unsetenv("PREZERO_DUMP_GRAPH");
}

static void cli_configs(void) {
  char a[600], p[400];
#define BADCFG(cmd, file, needle)               \
  do {                                          \
    path_of(p, sizeof p, file);                 \
    snprintf(a, sizeof a, "--config %s", p);    \
    bad(cmd, a, needle);                        \
  } while (0)
  write_cfg("ok.json", "512", "2", "64", "6", "8", "1024", "");
  path_of(p, sizeof p, "ok.json");
  snprintf(a, sizeof a, "run --config %s --steps 1 --batch 1 --tp 2 --device cpu", p);
  CHECK(run(a) == 0 && strstr(out_txt, "step 1:"));

  write_text("empty.json", "");
  BADCFG("run", "empty.json", "JSON");
  write_text("space.json", "  \n ");
  BADCFG("graph", "space.json", "JSON");
  write_text("array.json", "[{\"hidden_size\": 512}]");
  BADCFG("run", "array.json", "object");
  write_text("null.json", "null");
  BADCFG("run", "null.json", "object");
  write_text("tc_array.json", "{\"text_config\": [1, 2]}");
  BADCFG("run", "tc_array.json", "text_config");
  write_text("tc_null.json", "{\"text_config\": null}");
  BADCFG("graph", "tc_null.json", "text_config");
  write_text("tc_wrong.json", "{\"text_config\": {" TINY_FIELDS ", \"hidden_size\": \"512\"}}");
  BADCFG("run", "tc_wrong.json", "hidden_size");
  write_text("tc_bool.json", "{\"text_config\": {" TINY_FIELDS ", \"hidden_size\": true}}");
  BADCFG("run", "tc_bool.json", "hidden_size");
  write_cfg("neg.json", "-512", "2", "64", "6", "8", "1024", "");
  BADCFG("run", "neg.json", "hidden_size");
  write_cfg("frac.json", "512.5", "2", "64", "6", "8", "1024", "");
  BADCFG("run", "frac.json", "hidden_size");
  /* kv_lora_rank 0: TINY_FIELDS has 96, so write this one by hand. */
  write_text("kv0.json", "{\"hidden_size\": 512, \"num_hidden_layers\": 2, \"num_attention_heads\": 8, "
                         "\"q_lora_rank\": 128, \"kv_lora_rank\": 0, \"qk_nope_head_dim\": 32, \"qk_rope_head_dim\": 32, "
                         "\"v_head_dim\": 64, \"n_routed_experts\": 64, \"num_experts_per_tok\": 6, "
                         "\"moe_intermediate_size\": 128, \"intermediate_size\": 1024, \"vocab_size\": 1024, "
                         "\"max_position_embeddings\": 4096}");
  BADCFG("run", "kv0.json", "kv_lora_rank");
  write_cfg("ngroup.json", "512", "2", "64", "6", "3", "1024", "");
  BADCFG("run", "ngroup.json", "n_group");
  write_cfg("topk.json", "512", "2", "64", "65", "8", "1024", "");
  BADCFG("graph", "topk.json", "num_experts_per_tok");
  write_text("method.json", "{\"hidden_size\": 512, \"num_hidden_layers\": 2, \"num_attention_heads\": 8, "
                            "\"q_lora_rank\": 128, \"kv_lora_rank\": 96, \"qk_nope_head_dim\": 32, \"qk_rope_head_dim\": 32, "
                            "\"v_head_dim\": 64, \"n_routed_experts\": 64, \"num_experts_per_tok\": 6, "
                            "\"moe_intermediate_size\": 128, \"intermediate_size\": 1024, \"vocab_size\": 1024, "
                            "\"max_position_embeddings\": 4096, \"topk_method\": \"top_p\"}");
  BADCFG("run", "method.json", "topk_method");
  write_text("scoring.json", "{\"hidden_size\": 512, \"num_hidden_layers\": 2, \"num_attention_heads\": 8, "
                             "\"q_lora_rank\": 128, \"kv_lora_rank\": 96, \"qk_nope_head_dim\": 32, \"qk_rope_head_dim\": 32, "
                             "\"v_head_dim\": 64, \"n_routed_experts\": 64, \"num_experts_per_tok\": 6, "
                             "\"moe_intermediate_size\": 128, \"intermediate_size\": 1024, \"vocab_size\": 1024, "
                             "\"max_position_embeddings\": 4096, \"scoring_func\": \"tanh\"}");
  BADCFG("graph", "scoring.json", "scoring_func");
  write_cfg("vocab.json", "512", "2", "64", "6", "8", "1023", "");
  path_of(p, sizeof p, "vocab.json");
  snprintf(a, sizeof a, "--config %s --tp 2", p);
  bad("run", a, "vocab_size");
  /* Values that used to pass the reader: overflowing dims, absurd layer counts, inf floats,
   * duplicate keys. */
  write_cfg("huge_hidden.json", "1000000000000000", "2", "64", "6", "8", "1024", "");
  BADCFG("run", "huge_hidden.json", "hidden_size");
  write_cfg("huge_layers.json", "512", "1000000000000000", "64", "6", "8", "1024", "");
  BADCFG("run", "huge_layers.json", "num_hidden_layers");   /* was truncated to a negative int: 0 layers ran */
  write_cfg("many_layers.json", "512", "1000000", "64", "6", "8", "1024", "");
  BADCFG("graph", "many_layers.json", "num_hidden_layers"); /* was OOM-killed */
  write_cfg("inf.json", "512", "2", "64", "6", "8", "1024", ", \"rope_theta\": 1e999");
  BADCFG("run", "inf.json", "rope_theta");
  write_cfg("beta0.json", "512", "2", "64", "6", "8", "1024",
            ", \"rope_scaling\": {\"type\": \"yarn\", \"factor\": 4, \"original_max_position_embeddings\": 1024, "
            "\"beta_fast\": 0, \"beta_slow\": 0}");
  BADCFG("run", "beta0.json", "beta_fast"); /* gave NaN frequencies: token 0 everywhere */
  write_cfg("theta1.json", "512", "2", "64", "6", "8", "1024",
            ", \"rope_theta\": 1, \"rope_scaling\": {\"type\": \"yarn\", \"factor\": 4, "
            "\"original_max_position_embeddings\": 1024}");
  BADCFG("run", "theta1.json", "rope_theta");
  write_cfg("dup.json", "512", "2", "64", "6", "8", "1024", ", \"hidden_size\": 1024");
  BADCFG("run", "dup.json", "twice");
  /* Dims each in range whose product overflows: a tensor above 2^50 elements. */
  write_cfg("ovf.json", "2147483647", "2", "1073741824", "6", "1", "1024", "");
  BADCFG("graph", "ovf.json", "2^50");
  BADCFG("run", "ovf.json", "2^50");
  /* hidden_size 2^24, vocab 2^25: the embedding alone is 1 PiB; must be a clear out-of-memory
   * error before anything is allocated, on any machine. The graph itself still prints. */
  write_cfg("pib.json", "16777216", "1", "64", "6", "8", "33554432", "");
  path_of(p, sizeof p, "pib.json");
  snprintf(a, sizeof a, "--config %s --device cpu", p); /* the CPU check; CUDA has its own memory plan */
  bad("run", a, "RAM");
  path_of(p, sizeof p, "pib.json");
  snprintf(a, sizeof a, "graph --config %s", p);
  CHECK(run(a) == 0 && strstr(out_txt, "embed_tokens.weight[33554432,16777216]bf16"));
  /* A prompt longer than max_position_embeddings (16 here) names the prompt, not --context. */
  write_text("pos16.json", "{\"hidden_size\": 64, \"num_hidden_layers\": 1, \"num_attention_heads\": 2, "
                           "\"q_lora_rank\": null, \"kv_lora_rank\": 32, \"qk_nope_head_dim\": 16, "
                           "\"qk_rope_head_dim\": 16, \"v_head_dim\": 16, \"n_routed_experts\": 4, "
                           "\"num_experts_per_tok\": 2, \"moe_intermediate_size\": 32, \"intermediate_size\": 128, "
                           "\"vocab_size\": 256, \"max_position_embeddings\": 16}");
  path_of(p, sizeof p, "pos16.json");
  snprintf(a, sizeof a, "--config %s --prompt-ids 1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17 --steps 1", p);
  bad("run", a, "shorter prompts");
  snprintf(a, sizeof a, "run --config %s --prompt-ids 1,2,3,4,5,6,7,8,9,10,11,12,13,14,15 --steps 2 --device cpu", p);
  CHECK(run(a) == 0 && strstr(out_txt, "seq 0:")); /* 15 prompt tokens + 2 steps = 16 positions */
  /* A config of another family names the family, not its first missing field (llama is read now:
   * an unsupported family instead). */
  write_text("llama.json", "{\"model_type\": \"gemma\", \"hidden_size\": 4096, \"num_hidden_layers\": 32, "
                           "\"num_attention_heads\": 32, \"intermediate_size\": 11008, \"vocab_size\": 32000, "
                           "\"max_position_embeddings\": 4096}");
  BADCFG("run", "llama.json", "DeepSeek-V2 family");
  /* Not files. */
  BADCFG("run", "missing.json", "missing.json");
  make_dir("cfgdir.json");
  BADCFG("run", "cfgdir.json", "is a directory");
  /* A FIFO (or a device) is refused before it is opened: opening a FIFO blocked forever. */
  path_of(p, sizeof p, "fifo.json");
  CHECK(mkfifo(p, 0600) == 0);
  BADCFG("graph", "fifo.json", "not a regular file");
  BADCFG("run", "fifo.json", "not a regular file");
  bad("graph", "--config /dev/zero", "not a regular file");
  snprintf(a, sizeof a, "--render %s", p);
  bad("compare", a, "not a regular file; give the path of a compare.json");
#undef BADCFG
}

static void cli_checkpoints(void) {
  char a[600], p[400], t[1024];
  /* A directory with a valid tiny config.json, weights varied below. */
  const char *cfg = "{\"hidden_size\": 64, \"num_hidden_layers\": 1, \"num_attention_heads\": 2, "
                    "\"q_lora_rank\": null, \"kv_lora_rank\": 32, \"qk_nope_head_dim\": 16, \"qk_rope_head_dim\": 16, "
                    "\"v_head_dim\": 16, \"n_routed_experts\": 4, \"num_experts_per_tok\": 2, "
                    "\"moe_intermediate_size\": 32, \"intermediate_size\": 128, \"vocab_size\": 256, "
                    "\"max_position_embeddings\": 256}";
  struct { const char *name, *header; size_t data; uint64_t hl; const char *needle; } cases[] = {
      {"ck_trunc_len", "", 0, 0, "8-byte"},                                     /* file of 8 bytes: length 0 */
      {"ck_hl_huge", "{}", 0, (uint64_t)1 << 63, "beyond"},
      {"ck_not_json", "hello", 4, 0, "JSON"},
      {"ck_array", "[1, 2]", 0, 0, "JSON object"},
      {"ck_off_beyond", "{\"a\": {\"dtype\": \"BF16\", \"shape\": [2], \"data_offsets\": [0, 400]}}", 4, 0, "beyond"},
      {"ck_off_reversed", "{\"a\": {\"dtype\": \"BF16\", \"shape\": [2], \"data_offsets\": [4, 0]}}", 4, 0, "data_offsets"},
      {"ck_off_neg", "{\"a\": {\"dtype\": \"BF16\", \"shape\": [2], \"data_offsets\": [-4, 0]}}", 4, 0, "data_offsets"},
      {"ck_shape_ovf", "{\"a\": {\"dtype\": \"BF16\", \"shape\": [4294967296, 4294967296, 4294967296], "
                       "\"data_offsets\": [0, 4]}}", 4, 0, "too large"},
      {"ck_shape_neg", "{\"a\": {\"dtype\": \"BF16\", \"shape\": [-2], \"data_offsets\": [0, 4]}}", 4, 0, "shape"},
      {"ck_dtype", "{\"a\": {\"dtype\": \"Q4_K\", \"shape\": [2], \"data_offsets\": [0, 4]}}", 4, 0, "dtype"},
      {"ck_entry", "{\"a\": 5}", 0, 0, "not an object"},
      {"ck_dup", "{\"a\": {\"dtype\": \"BF16\", \"shape\": [2], \"data_offsets\": [0, 4]}, "
                 "\"a\": {\"dtype\": \"BF16\", \"shape\": [2], \"data_offsets\": [0, 4]}}", 4, 0, "twice"},
      {"ck_empty", "{}", 0, 0, "model.embed_tokens.weight"},                    /* valid file, tensors missing */
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    make_dir(cases[i].name);
    snprintf(t, sizeof t, "%s/config.json", cases[i].name);
    write_text(t, cfg);
    snprintf(t, sizeof t, "%s/model.safetensors", cases[i].name);
    if (!strcmp(cases[i].name, "ck_trunc_len")) write_bytes(t, "\x10\x00\x00", 3);
    else write_st(t, cases[i].header, cases[i].data, cases[i].hl);
    path_of(p, sizeof p, cases[i].name);
    snprintf(a, sizeof a, "--model %s --prompt-ids 1,2 --steps 1", p);
    bad("run", a, cases[i].needle);
  }
  /* Directories where files should be, files where directories should be, junk. */
  make_dir("ck_cfgdir");
  make_dir("ck_cfgdir/config.json");
  make_dir("ck_wdir");
  write_text("ck_wdir/config.json", cfg);
  make_dir("ck_wdir/model.safetensors");
  make_dir("ck_cfgfifo"); /* FIFOs where the config, the weights and the index should be: no hang */
  path_of(p, sizeof p, "ck_cfgfifo/config.json");
  CHECK(mkfifo(p, 0600) == 0);
  write_st("ck_cfgfifo/model.safetensors", "{}", 0, 0);
  make_dir("ck_wfifo");
  write_text("ck_wfifo/config.json", cfg);
  path_of(p, sizeof p, "ck_wfifo/model.safetensors");
  CHECK(mkfifo(p, 0600) == 0);
  make_dir("ck_ififo");
  write_text("ck_ififo/config.json", cfg);
  path_of(p, sizeof p, "ck_ififo/model.safetensors.index.json");
  CHECK(mkfifo(p, 0600) == 0);
  make_dir("ck_noweights");
  write_text("ck_noweights/config.json", cfg);
  write_text("junk.bin", "\x7f" "ELF not a checkpoint");
  const char *dirs[][2] = {{"ck_cfgdir", "config.json"}, {"ck_wdir", "regular file"},
                           {"ck_noweights", "model.safetensors"},
                           {"ck_cfgfifo", "not a regular file"}, {"ck_wfifo", "not a regular file"},
                           {"ck_ififo", "not a regular file"}, {"junk.bin", "is a file, not a directory; pass its folder"},
                           {"does-not-exist", "does not exist"}};
  for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++) {
    path_of(p, sizeof p, dirs[i][0]);
    snprintf(a, sizeof a, "--model %s --steps 1", p);
    bad("run", a, dirs[i][1]);
  }
  /* --model given a file: the message names its folder as the fix (it said "no config.json
   * there" for a file and for a path that does not exist alike). */
  path_of(p, sizeof p, "ck_wdir/config.json");
  snprintf(a, sizeof a, "--model %s --steps 1", p);
  bad("run", a, "is a file, not a directory; pass its folder (--model ");
  path_of(p, sizeof p, "ck_wdir)");
  CHECK(strstr(err_txt, p) != NULL);
  CHECK(last_rc == 1 && !strstr(err_txt, "no config.json there"));
  path_of(p, sizeof p, "does-not-exist");
  snprintf(a, sizeof a, "--model %s --steps 1", p);
  bad("run", a, "does not exist");
  CHECK(last_rc == 1 && !strstr(err_txt, "no config.json there"));
  /* Index files: not an object, weight_map not an object, a shard outside the directory. */
  const char *idx[][3] = {{"ix_array", "[]", "weight_map"},
                          {"ix_map", "{\"weight_map\": [1]}", "weight_map"},
                          {"ix_escape", "{\"weight_map\": {\"a\": \"../../../etc/passwd\"}}", "outside"},
                          {"ix_num", "{\"weight_map\": {\"a\": 7}}", "file name"},
                          {"ix_gone", "{\"weight_map\": {\"a\": \"model-1.safetensors\"}}", "model-1.safetensors"}};
  for (size_t i = 0; i < sizeof idx / sizeof idx[0]; i++) {
    make_dir(idx[i][0]);
    snprintf(t, sizeof t, "%s/config.json", idx[i][0]);
    write_text(t, cfg);
    snprintf(t, sizeof t, "%s/model.safetensors.index.json", idx[i][0]);
    write_text(t, idx[i][1]);
    path_of(p, sizeof p, idx[i][0]);
    snprintf(a, sizeof a, "--model %s --steps 1", p);
    bad("run", a, idx[i][2]);
  }
  char golden[400];
  PZ_TEST_PATH(golden, "data/golden/deepseek_v3");
  struct stat gs;
  if (stat(golden, &gs) == 0) {
    /* max_position_embeddings 128 and no --context: the default context shrinks to fit the steps
     * (it failed with "--context 128 + --steps 2 exceeds" for a flag never given). */
    snprintf(a, sizeof a, "run --model %s --steps 2 --device cpu", golden);
    CHECK(run(a) == 0 && strstr(out_txt, "context 126,") && strstr(out_txt, "step 2:"));
    /* The seed makes no weights with --model: the header says what it seeds, or nothing. */
    CHECK(strstr(out_txt, "seed 1234 (prompts and KV cache)") && !strstr(out_txt, "seed 1234,"));
    snprintf(a, sizeof a, "run --model %s --prompt-ids 1,2 --steps 1 --device cpu", golden);
    CHECK(run(a) == 0 && strstr(out_txt, "seq 0:") && !strstr(out_txt, "seed") && strstr(out_txt, "weights from --model"));
    /* An explicit --context still has to fit, and says so. */
    snprintf(a, sizeof a, "--model %s --context 127 --steps 2", golden);
    bad("run", a, "--context 127 + --steps 2 exceeds max_position_embeddings (128)");
    CHECK(last_rc == 2);
    snprintf(a, sizeof a, "--model %s --steps 129", golden);
    bad("run", a, "--steps 129 exceeds max_position_embeddings (128) of deepseek_v3; use --steps 1..128");
    CHECK(last_rc == 2);
    /* A checkpoint directory given to --config points at --model (run, compare) or its
     * config.json (graph); it said "not a config.json" with the advice to check the path. */
    snprintf(a, sizeof a, "--config %s", golden);
    bad("run", a, "is a directory, not a config.json file; for a checkpoint directory use --model ");
    CHECK(last_rc == 1 && strstr(err_txt, golden));
    bad("compare", a, "for a checkpoint directory use --model ");
    bad("graph", a, "is a directory, not a config.json file; use --config ");
    CHECK(strstr(err_txt, "deepseek_v3/config.json") != NULL);
    /* A DeepSeek config missing the MLA ranks names them, not "the DeepSeek-V2 family only". */
    static char gtext[1 << 14], gedit[1 << 14];
    char gp[800];
    snprintf(gp, sizeof gp, "%s/config.json", golden);
    slurp(gp, gtext, sizeof gtext);
    /* without its model_type (DeepSeek's own config files): with "deepseek_v3" a missing field takes
       transformers' DeepseekV3Config default, as a save_pretrained config leaves those out */
    {
      char *mt = strstr(gtext, "\"model_type\": \"deepseek_v3\",\n");
      if (mt) memmove(mt, mt + strlen("\"model_type\": \"deepseek_v3\",\n"), strlen(mt + strlen("\"model_type\": \"deepseek_v3\",\n")) + 1);
    }
    const char *kv = strstr(gtext, "\"kv_lora_rank\": 32,\n"), *ql = strstr(gtext, "\"q_lora_rank\": 32,\n");
    CHECK(kv && ql && kv < ql);
    if (kv && ql && kv < ql) {
      size_t kl = strlen("\"kv_lora_rank\": 32,\n"), qll = strlen("\"q_lora_rank\": 32,\n");
      snprintf(gedit, sizeof gedit, "%.*s%s", (int)(kv - gtext), gtext, kv + kl); /* no kv_lora_rank */
      write_text("v3_nokv.json", gedit);
      path_of(p, sizeof p, "v3_nokv.json");
      snprintf(a, sizeof a, "--config %s", p);
      bad("run", a, "required field \"kv_lora_rank\" is missing");
      snprintf(gedit, sizeof gedit, "%.*s%.*s%s", (int)(kv - gtext), gtext, (int)(ql - (kv + kl)), kv + kl, ql + qll);
      write_text("v3_nolora.json", gedit); /* neither rank: was "prezero runs the DeepSeek-V2 family only" */
      path_of(p, sizeof p, "v3_nolora.json");
      snprintf(a, sizeof a, "--config %s", p);
      bad("run", a, "\"kv_lora_rank\" and \"q_lora_rank\" are missing");
      CHECK(!strstr(err_txt, "family"));
    }
  } else {
    fprintf(stderr, "note: %s not found; --model context and --config directory cases skipped\n", golden);
  }
  /* FP8 golden checkpoint with weight_block_size [1e300, 16] (was an overflowing int64 cast). */
  char src[400];
  PZ_TEST_PATH(src, "data/golden/deepseek_v3_fp8");
  struct stat sb;
  if (stat(src, &sb) == 0) {
    make_dir("fp8");
    snprintf(t, sizeof t, "cp %s/model.safetensors %s/fp8/", src, dir);
    CHECK(system(t) == 0);
    static char text[1 << 14], edited[1 << 14];
    char cp[800];
    snprintf(cp, sizeof cp, "%s/config.json", src);
    slurp(cp, text, sizeof text);
    char *k = strstr(text, "\"weight_block_size\""), *lb = k ? strchr(k, '[') : NULL, *rb = lb ? strchr(lb, ']') : NULL;
    CHECK(rb != NULL);
    if (rb) {
      snprintf(edited, sizeof edited, "%.*s[1e300, 16]%s", (int)(lb - text), text, rb + 1);
      write_text("fp8/config.json", edited);
      path_of(p, sizeof p, "fp8");
      snprintf(a, sizeof a, "--model %s --prompt-ids 1,2 --steps 1", p);
      bad("run", a, "weight_block_size");
    }
  } else {
    fprintf(stderr, "note: %s not found; FP8 block-size case skipped\n", src);
  }
}

/* The public API refuses misuse with a status and a message, never a crash. */
static void api(void) {
  pz_engine *e = (pz_engine *)1;
  CHECK_ST(pz_engine_create(NULL, &e), PZ_ERR_INVALID_ARG);
  pz_engine_config c = PZ_ENGINE_CONFIG_INIT;
  c.max_steps = 2;
  struct { const char *what; pz_engine_config c; pz_status want; } cases[24];
  int n = 0;
#define CASE(field, value, st)                       \
  do {                                               \
    cases[n].what = #field " = " #value;             \
    cases[n].c = c;                                  \
    cases[n].c.field = value;                        \
    cases[n].want = st;                              \
    n++;                                             \
  } while (0)
  CASE(tp, 0, PZ_ERR_INVALID_ARG);
  CASE(tp, 3, PZ_ERR_INVALID_ARG);
  CASE(max_batch, 257, PZ_ERR_INVALID_ARG);
  CASE(context, -1, PZ_ERR_INVALID_ARG);
  CASE(context, 4095, PZ_ERR_INVALID_ARG); /* 4095 + 2 steps > 4096 */
  CASE(layers, 5, PZ_ERR_INVALID_ARG);
  CASE(max_steps, 0, PZ_ERR_INVALID_ARG);
  CASE(model, "no_such_preset", PZ_ERR_NOT_FOUND);
  /* Outside prezero.h's ranges: these were taken (and "" ran the tiny preset). */
  CASE(threads, -1, PZ_ERR_INVALID_ARG);
  CASE(threads, 5000, PZ_ERR_INVALID_ARG);
  CASE(prezero, 2, PZ_ERR_INVALID_ARG);
  CASE(prezero, -7, PZ_ERR_INVALID_ARG);
  CASE(model, "", PZ_ERR_INVALID_ARG);
  CASE(model_dir, "", PZ_ERR_INVALID_ARG); /* was PZ_ERR_IO "checkpoint : does not exist" */
#undef CASE
  for (int i = 0; i < n; i++) {
    e = (pz_engine *)1;
    pz_status st = pz_engine_create(&cases[i].c, &e);
    if (st != cases[i].want || e != NULL || !pz_last_error()[0]) {
      fprintf(stderr, "FAIL: pz_engine_create with %s -> %s (%s)\n", cases[i].what, pz_status_string(st), pz_last_error());
      pz_test_failures++;
    }
  }
  /* A working engine, then misuse of step and logits. */
  c.max_batch = 2;
  c.layers = 1;
  c.threads = 1;
  CHECK_OK(pz_engine_create(&c, &e));
  if (!e) return;
  float lg[2 * 1024];
  int32_t in[3] = {1, 2, 3}, out[3];
  CHECK_ST(pz_engine_logits(e, 1, lg), PZ_ERR_INVALID_ARG); /* no step yet */
  CHECK_ST(pz_engine_step(e, 0, in, out), PZ_ERR_INVALID_ARG);
  CHECK_ST(pz_engine_step(e, 3, in, out), PZ_ERR_INVALID_ARG);
  CHECK_ST(pz_engine_step(e, 1, NULL, out), PZ_ERR_INVALID_ARG);
  int32_t neg[2] = {-1, 0}, big[2] = {0, 1024};
  CHECK_ST(pz_engine_step(e, 2, neg, out), PZ_ERR_INVALID_ARG);
  CHECK_ST(pz_engine_step(e, 2, big, out), PZ_ERR_INVALID_ARG);
  CHECK_OK(pz_engine_step(e, 2, in, out));
  CHECK_ST(pz_engine_logits(e, 3, lg), PZ_ERR_INVALID_ARG);
  CHECK_OK(pz_engine_logits(e, 2, lg));
  CHECK_OK(pz_engine_step(e, 2, in, out));
  CHECK_ST(pz_engine_step(e, 2, in, out), PZ_ERR_INVALID_ARG); /* max_steps = 2: the KV cache is full */
  CHECK_ST(pz_engine_get_info(e, NULL), PZ_ERR_INVALID_ARG);
  CHECK_ST(pz_engine_dump_graph(e, NULL, 0), PZ_ERR_INVALID_ARG);
  /* dot is 0 (text) or 1 (DOT): 5 and 7 were taken as DOT. */
  FILE *devnull = fopen("/dev/null", "w");
  CHECK(devnull != NULL);
  if (devnull) {
    CHECK_OK(pz_engine_dump_graph(e, devnull, 0));
    CHECK_OK(pz_engine_dump_graph(e, devnull, 1));
    CHECK_ST(pz_engine_dump_graph(e, devnull, 5), PZ_ERR_INVALID_ARG);
    CHECK(strstr(pz_last_error(), "dot = 5; use 0 (text) or 1 (Graphviz DOT)") != NULL);
    CHECK_ST(pz_engine_dump_graph(e, devnull, -1), PZ_ERR_INVALID_ARG);
  }
  FILE *full = fopen("/dev/full", "w");
  if (full) {
    CHECK_ST(pz_engine_dump_graph(e, full, 1), PZ_ERR_IO);
    CHECK(!strcmp(pz_last_error(), "graph dot: write failed (No space left on device)"));
    fclose(full);
  }
  pz_engine_destroy(e);
  pz_engine_destroy(NULL);
  /* Every status has a text. */
  for (int s = 0; s < PZ_STATUS_COUNT; s++) CHECK(pz_status_string((pz_status)s)[0] != 0);
  CHECK(pz_status_string((pz_status)-1) != NULL && pz_status_string(PZ_STATUS_COUNT) != NULL);
  /* The reader on raw text: length without NUL, embedded NUL, NULL arguments. */
  pz_model_config mc;
  CHECK_ST(pz_config_parse(NULL, 0, "x", &mc), PZ_ERR_INVALID_ARG);
  CHECK_ST(pz_config_parse("{}", 2, "x", NULL), PZ_ERR_INVALID_ARG);
  CHECK_ST(pz_config_parse("{\"hidden_size\": 5", 5, "x", &mc), PZ_ERR_CONFIG);
  CHECK_ST(pz_config_parse("{\"a\":1}\0{", 9, "x", &mc), PZ_ERR_CONFIG);
  CHECK_ST(pz_config_load("", &mc), PZ_OK); /* the library's documented default: tiny */
  CHECK(!strcmp(mc.name, "tiny"));
  if (devnull) fclose(devnull);
}

/* The decode-graph API (prezero/graph.h): duplicate tensor names, a non-finite eps, a flag other
 * than 0 / 1 and a dot other than 0 / 1 are refused (each was accepted). */
static void graph_api(void) {
  const int64_t m = 2, H = 64;
  pz_decode_graph *g = NULL;
  CHECK_OK(pz_decode_graph_create(1, m, H, &g));
  if (!g) return;
  int partial, w, res, xn, node = -1;
  CHECK_OK(pz_decode_graph_add_tensor(g, "partial", PZ_ELEM_F32, PZ_GRAPH_INPUT, 2, (int64_t[]){m, H}, &partial));
  CHECK_OK(pz_decode_graph_add_tensor(g, "norm.weight", PZ_ELEM_BF16, PZ_GRAPH_WEIGHT, 1, (int64_t[]){H}, &w));
  CHECK_OK(pz_decode_graph_add_tensor(g, "residual", PZ_ELEM_F32, PZ_GRAPH_STATE, 2, (int64_t[]){m, H}, &res));
  CHECK_OK(pz_decode_graph_add_tensor(g, "x_norm", PZ_ELEM_BF16, PZ_GRAPH_ACT, 2, (int64_t[]){m, H}, &xn));
  const float bad_eps[] = {INFINITY, -INFINITY, NAN, 0.f, -1e-6f};
  for (size_t i = 0; i < sizeof bad_eps / sizeof bad_eps[0]; i++) {
    CHECK_ST(pz_decode_graph_add_ar_rmsnorm(g, "norm", 0, partial, w, res, 1, xn, bad_eps[i], &node), PZ_ERR_INVALID_ARG);
    CHECK(strstr(pz_last_error(), "use a finite eps > 0") != NULL);
  }
  CHECK_ST(pz_decode_graph_add_ar_rmsnorm(g, "norm", 0, partial, w, res, 5, xn, 1e-6f, &node), PZ_ERR_INVALID_ARG);
  CHECK(strstr(pz_last_error(), "read_residual = 5; use 0 or 1") != NULL);
  CHECK_ST(pz_decode_graph_add_ar_rmsnorm(g, "norm", 0, partial, w, res, -1, xn, 1e-6f, &node), PZ_ERR_INVALID_ARG);
  CHECK_OK(pz_decode_graph_add_ar_rmsnorm(g, "norm", 0, partial, w, res, 1, xn, 1e-6f, &node));
  CHECK_OK(pz_decode_graph_verify(g));
  FILE *devnull = fopen("/dev/null", "w");
  CHECK(devnull != NULL);
  if (devnull) {
    CHECK_OK(pz_decode_graph_dump(g, devnull, 0));
    CHECK_OK(pz_decode_graph_dump(g, devnull, 1));
    CHECK_ST(pz_decode_graph_dump(g, devnull, 7), PZ_ERR_INVALID_ARG);
    CHECK(strstr(pz_last_error(), "dot = 7; use 0 (text) or 1 (Graphviz DOT)") != NULL);
    fclose(devnull);
  }
  /* A write that fails is PZ_ERR_IO, also when the dump fits in the stream's buffer (it was
   * PZ_OK: the error only showed at the caller's fclose). */
  FILE *full = fopen("/dev/full", "w");
  if (full) {
    CHECK_ST(pz_decode_graph_dump(g, full, 0), PZ_ERR_IO);
    CHECK(!strcmp(pz_last_error(), "graph dump: write failed (No space left on device)"));
    clearerr(full);
    CHECK_ST(pz_decode_graph_dump(g, full, 1), PZ_ERR_IO);
    CHECK(!strcmp(pz_last_error(), "graph dot: write failed (No space left on device)"));
    fclose(full);
  }
  /* A second tensor named "residual": verify (and so run_passes) refuses it. */
  int dup = -1;
  CHECK_OK(pz_decode_graph_add_tensor(g, "residual", PZ_ELEM_F32, PZ_GRAPH_ACT, 2, (int64_t[]){m, H}, &dup));
  CHECK_ST(pz_decode_graph_verify(g), PZ_ERR_VERIFY);
  CHECK(strstr(pz_last_error(), "tensors 2 and 4 are both named \"residual\"; give each tensor its own name") != NULL);
  CHECK_ST(pz_decode_graph_run_passes(g, 1, NULL, NULL, NULL), PZ_ERR_VERIFY);
  pz_decode_graph_destroy(g);

  /* A caller's tensor already named "<donor>.prezero_buf", the name the pass gives the donor's buffer: the pass
     refuses, naming it (it returned PZ_OK and left two tensors of that name, which verify then refused). */
  pz_decode_graph *g2 = NULL;
  int a2, w2, r2, x2, wq2, q2, b2, id2;
  CHECK_OK(pz_decode_graph_create(1, 4, 512, &g2));
  CHECK_OK(pz_decode_graph_add_tensor(g2, "attn.partial", PZ_ELEM_F32, PZ_GRAPH_INPUT, 2, (int64_t[]){4, 512}, &a2));
  CHECK_OK(pz_decode_graph_add_tensor(g2, "norm.w", PZ_ELEM_BF16, PZ_GRAPH_WEIGHT, 1, (int64_t[]){512}, &w2));
  CHECK_OK(pz_decode_graph_add_tensor(g2, "resid", PZ_ELEM_F32, PZ_GRAPH_STATE, 2, (int64_t[]){4, 512}, &r2));
  CHECK_OK(pz_decode_graph_add_tensor(g2, "xn", PZ_ELEM_BF16, PZ_GRAPH_ACT, 2, (int64_t[]){4, 512}, &x2));
  CHECK_OK(pz_decode_graph_add_tensor(g2, "wq", PZ_ELEM_BF16, PZ_GRAPH_WEIGHT, 2, (int64_t[]){128, 512}, &wq2));
  CHECK_OK(pz_decode_graph_add_tensor(g2, "q", PZ_ELEM_F32, PZ_GRAPH_ACT, 2, (int64_t[]){4, 128}, &q2));
  CHECK_OK(pz_decode_graph_add_tensor(g2, "n.prezero_buf", PZ_ELEM_F32, PZ_GRAPH_ACT, 2, (int64_t[]){4, 128}, &b2));
  CHECK_OK(pz_decode_graph_add_ar_rmsnorm(g2, "n", 0, a2, w2, r2, 1, x2, 1e-6f, &id2));
  CHECK_OK(pz_decode_graph_add_gemm(g2, "g", 0, x2, wq2, -1, q2, 0, &id2));
  int nn0 = -1, nt0 = -1, nn1 = -2, nt1 = -2;
  CHECK_OK(pz_decode_graph_counts(g2, &nn0, &nt0));
  CHECK_ST(pz_decode_graph_run_passes(g2, 1, NULL, NULL, NULL), PZ_ERR_INVALID_ARG);
  CHECK(strstr(pz_last_error(), "already has a tensor named \"n.prezero_buf\"") != NULL &&
        strstr(pz_last_error(), "the graph is left as it was") != NULL);
  CHECK_OK(pz_decode_graph_counts(g2, &nn1, &nt1));
  CHECK(nn1 == nn0 && nt1 == nt0); /* nothing added */
  pz_graph_node_info ni2;
  CHECK_OK(pz_decode_graph_node_info(g2, id2, &ni2));
  CHECK(!strcmp(ni2.op, "gemm") && ni2.zero_init == 1); /* the GEMM not rewritten */
  pz_decode_graph_destroy(g2);
}

int main(void) {
  cli = getenv("PZ_CLI");
  if (!cli || !*cli) { fprintf(stderr, "PZ_CLI is not set (run through ctest); skipping\n"); return 77; }
  if (!mkdtemp(dir)) { perror("mkdtemp"); return 1; }
  unsetenv("PREZERO_ENABLE");
  unsetenv("PREZERO_DUMP_GRAPH");
  unsetenv("PREZERO_CPU_THREADS");
  setenv("PREZERO_PROGRESS", "0", 1);
  cli_flags();
  cli_configs();
  cli_checkpoints();
  api();
  graph_api();
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd)) fprintf(stderr, "could not remove %s\n", dir);
  TEST_DONE();
}
