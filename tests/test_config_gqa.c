/* config.json reader for the GQA layouts (llama, mistral, qwen2, qwen3, qwen3_moe, mixtral, glm4_moe, phi3, dots1): the embedded
 * presets against the published Hugging Face values (a table written here, independent of
 * configs/ JSON files) and the published parameter counts of the model cards; field mapping and the
 * config classes' defaults on inline JSON; every refusal (PZ_ERR_CONFIG, the message names the
 * field); pz_config_layer_is_moe for qwen3_moe / mixtral; llama3 and phi3's LongRoPE inverse frequencies
 * against the formulas in long double; DeepSeek configs still read as MLA. */
#include "core/rope.h"
#include "model/builder.h"
#include "model/config.h"
#include "pz_test.h"
#include <math.h>
#include <string.h>

/* ------------------------------------------------------------------ presets */

/* Published config.json values (huggingface.co/<repo>/blob/main/config.json) and, for the tiny
 * presets, the values they are specified with. */
typedef struct {
  const char *preset, *model_type;
  int64_t hidden, layers, heads, kv_heads, head_dim, inter, moe_inter, experts, topk, vocab, max_pos;
  double eps, theta;
  pz_rope_type rope;
  double factor, low, high;
  int64_t orig;
  bool bias, qk_norm, norm_topk;
  pz_scoring scoring;
} preset_want;

static const preset_want presets[] = {
    /* meta-llama/Llama-3.1-8B */
    {"llama3_1_8b", "llama", 4096, 32, 32, 8, 128, 14336, 0, 0, 0, 128256, 131072, 1e-5, 500000, PZ_ROPE_LLAMA3, 8, 1,
     4, 8192, false, false, false, PZ_SCORE_SOFTMAX},
    /* meta-llama/Llama-3.1-70B */
    {"llama3_1_70b", "llama", 8192, 80, 64, 8, 128, 28672, 0, 0, 0, 128256, 131072, 1e-5, 500000, PZ_ROPE_LLAMA3, 8, 1,
     4, 8192, false, false, false, PZ_SCORE_SOFTMAX},
    /* Qwen/Qwen2.5-72B-Instruct: q/k/v biases (Qwen2Attention) */
    {"qwen2_5_72b", "qwen2", 8192, 80, 64, 8, 128, 29568, 0, 0, 0, 152064, 32768, 1e-6, 1000000, PZ_ROPE_DEFAULT, 1, 1,
     1, 32768, true, false, false, PZ_SCORE_SOFTMAX},
    /* Qwen/Qwen3-32B: head_dim 128 with hidden 5120 / 64 heads */
    {"qwen3_32b", "qwen3", 5120, 64, 64, 8, 128, 25600, 0, 0, 0, 151936, 40960, 1e-6, 1000000, PZ_ROPE_DEFAULT, 1, 1, 1,
     40960, false, true, false, PZ_SCORE_SOFTMAX},
    /* Qwen/Qwen3-30B-A3B */
    {"qwen3_30b_a3b", "qwen3_moe", 2048, 48, 32, 4, 128, 6144, 768, 128, 8, 151936, 40960, 1e-6, 1000000,
     PZ_ROPE_DEFAULT, 1, 1, 1, 40960, false, true, true, PZ_SCORE_SOFTMAX},
    /* Qwen/Qwen3-235B-A22B */
    {"qwen3_235b_a22b", "qwen3_moe", 4096, 94, 64, 4, 128, 12288, 1536, 128, 8, 151936, 40960, 1e-6, 1000000,
     PZ_ROPE_DEFAULT, 1, 1, 1, 40960, false, true, true, PZ_SCORE_SOFTMAX},
    /* mistralai/Mixtral-8x7B-v0.1: experts of width intermediate_size, softmax over the top 2 */
    {"mixtral_8x7b", "mixtral", 4096, 32, 32, 8, 128, 14336, 14336, 8, 2, 32000, 32768, 1e-5, 1000000, PZ_ROPE_DEFAULT,
     1, 1, 1, 32768, false, false, true, PZ_SCORE_TOPK_SOFTMAX},
    /* zai-org/GLM-4.5-Air: glm4_moe, partial RoPE (0.5 of head_dim 128), q/k/v biases, sigmoid routing,
     * one dense layer first (intermediate_size), then 128 experts of 1408 with one shared */
    {"glm4_5_air", "glm4_moe", 4096, 46, 96, 8, 128, 10944, 1408, 128, 8, 151552, 131072, 1e-5, 1000000,
     PZ_ROPE_DEFAULT, 1, 1, 1, 131072, true, false, true, PZ_SCORE_SIGMOID},
    /* microsoft/phi-4: phi3 (fused qkv_proj / gate_up_proj in the checkpoint), 40 heads over 10 kv heads */
    {"phi_4", "phi3", 5120, 40, 40, 10, 128, 17920, 0, 0, 0, 100352, 16384, 1e-5, 250000, PZ_ROPE_DEFAULT, 1, 1, 1,
     16384, false, false, false, PZ_SCORE_SOFTMAX},
    /* The tiny test layouts. */
    {"tiny_llama", "llama", 64, 2, 4, 2, 16, 96, 0, 0, 0, 256, 512, 1e-5, 10000, PZ_ROPE_LLAMA3, 4, 1, 4, 128, false,
     false, false, PZ_SCORE_SOFTMAX},
    {"tiny_qwen3_moe", "qwen3_moe", 64, 2, 4, 2, 16, 96, 32, 8, 2, 256, 512, 1e-6, 1000000, PZ_ROPE_DEFAULT, 1, 1, 1,
     512, false, true, true, PZ_SCORE_SOFTMAX},
};
#define NPRESETS ((int)(sizeof presets / sizeof presets[0]))

static void check_preset(const preset_want *w) {
  pz_model_config c;
  pz_status st = pz_config_load(w->preset, &c);
  if (st != PZ_OK) {
    fprintf(stderr, "preset %s: %s\n", w->preset, pz_last_error());
    pz_test_failures++;
    return;
  }
#define EQ(field, want)                                                                                    \
  do {                                                                                                     \
    if ((double)(field) != (double)(want)) {                                                               \
      fprintf(stderr, "preset %s: %s = %.9g, want %.9g\n", w->preset, #field, (double)(field), (double)(want)); \
      pz_test_failures++;                                                                                  \
    }                                                                                                      \
  } while (0)
  CHECK(!strcmp(c.name, w->preset));
  CHECK(!strcmp(c.model_type, w->model_type));
  EQ(c.attn, PZ_ATTN_GQA);
  EQ(c.hidden_size, w->hidden);
  EQ(c.num_hidden_layers, w->layers);
  EQ(c.num_attention_heads, w->heads);
  EQ(c.num_key_value_heads, w->kv_heads);
  EQ(c.head_dim, w->head_dim);
  EQ(c.intermediate_size, w->inter);
  EQ(c.moe_intermediate_size, w->moe_inter);
  EQ(c.n_routed_experts, w->experts);
  EQ(c.num_experts_per_tok, w->topk);
  EQ(c.vocab_size, w->vocab);
  EQ(c.max_position_embeddings, w->max_pos);
  EQ(c.rms_norm_eps, (float)w->eps);
  EQ(c.rope.theta, (float)w->theta);
  EQ(c.rope.type, w->rope);
  EQ(c.rope.factor, (float)w->factor);
  if (w->rope == PZ_ROPE_LLAMA3) {
    EQ(c.rope.low_freq_factor, (float)w->low);
    EQ(c.rope.high_freq_factor, (float)w->high);
  }
  EQ(c.rope.original_max_position_embeddings, w->orig);
  EQ(c.attention_bias, w->bias);
  EQ(c.qk_norm, w->qk_norm);
  EQ(c.tie_word_embeddings, false); /* all nine publish false */
  EQ(c.norm_topk_prob, w->norm_topk);
  EQ(c.scoring_func, w->scoring);
  const bool glm = !strcmp(w->model_type, "glm4_moe");
  EQ(c.rotary_dim, glm ? w->head_dim / 2 : w->head_dim); /* GLM-4.5: partial_rotary_factor 0.5 */
  EQ(c.decoder_sparse_step, glm ? 0 : 1);                 /* glm4_moe: first_k_dense_replace instead */
  EQ(c.first_k_dense_replace, glm ? 1 : 0);
  EQ(c.n_mlp_only, 0);
  EQ(c.n_shared_experts, glm ? 1 : 0);
  EQ(c.routed_scaling_factor, 1);
  EQ(c.topk_method, glm ? PZ_TOPK_NOAUX_TC : PZ_TOPK_GREEDY); /* sigmoid + e_score_correction_bias */
  EQ(c.q_lora_rank + c.kv_lora_rank + c.qk_nope_head_dim + c.qk_rope_head_dim + c.v_head_dim, 0);
  EQ(c.quant.kind, PZ_WQ_NONE);
  for (int64_t L = 0; L < c.num_hidden_layers; L++) EQ(pz_config_layer_is_moe(&c, L), w->experts > 0 && L >= (glm ? 1 : 0));
#undef EQ
}

/* Parameter count from the config (embeddings, lm_head unless tied, per layer: q/k/v/o with
 * biases and q/k norms when present, dense MLP or router + experts, two norms; final norm),
 * total and activated (top-k experts of each MoE layer). */
static void param_count(const pz_model_config *c, double *total, double *active) {
  double H = (double)c->hidden_size, d = (double)c->head_dim, q = (double)c->num_attention_heads * d,
         kv = (double)c->num_key_value_heads * d, V = (double)c->vocab_size;
  double emb = V * H * (c->tie_word_embeddings ? 1 : 2) + H;
  *total = *active = emb;
  for (int64_t L = 0; L < c->num_hidden_layers; L++) {
    double attn = H * (q + 2 * kv) + q * H + (c->attention_bias ? q + 2 * kv : 0) + (c->qk_norm ? 2 * d : 0) + 2 * H;
    double expert = 3 * H * (double)c->moe_intermediate_size;
    if (pz_config_layer_is_moe(c, L)) {
      *total += attn + H * (double)c->n_routed_experts + expert * (double)c->n_routed_experts;
      *active += attn + H * (double)c->n_routed_experts + expert * (double)c->num_experts_per_tok;
    } else {
      double mlp = 3 * H * (double)c->intermediate_size;
      *total += attn + mlp;
      *active += attn + mlp;
    }
  }
}

/* Whether x (billions) is the published figure p given to `dec` decimals: rounded or truncated
 * (Qwen3-30B-A3B's "3.3B activated" is 3.35B truncated). */
static bool published_as(double x, double p, int dec) {
  double unit = pow(10.0, -dec);
  return x >= p - 0.5 * unit * 1.000001 && x < p + unit;
}

/* Published sizes (model cards / release posts) in billions, to `dec` decimals. */
static void check_params(const char *preset, double total_b, double active_b, int dec) {
  pz_model_config c;
  CHECK_OK(pz_config_load(preset, &c));
  double t, a;
  param_count(&c, &t, &a);
  printf("%s: %.4f B parameters, %.4f B activated\n", preset, t / 1e9, a / 1e9);
  if (!published_as(t / 1e9, total_b, dec) || !published_as(a / 1e9, active_b, dec)) {
    fprintf(stderr, "%s: %.4f B / %.4f B activated, published %.*f B / %.*f B\n", preset, t / 1e9, a / 1e9, dec,
            total_b, dec, active_b);
    pz_test_failures++;
  }
}

static void test_presets(void) {
  for (int i = 0; i < NPRESETS; i++) check_preset(&presets[i]);
  /* The name list holds every preset, untruncated (tiny_qwen3_moe sorts last). */
  const char *names = pz_config_preset_names();
  for (int i = 0; i < NPRESETS; i++) CHECK(strstr(names, presets[i].preset) != NULL);
  static const char *const mla[] = {"deepseek_v2_lite", "deepseek_v3", "kimi_k2", "kimi_k25", "tiny"};
  for (int i = 0; i < 5; i++) CHECK(strstr(names, mla[i]) != NULL);
  size_t n = strlen(names);
  CHECK(n > 14 && !strcmp(names + n - 14, "tiny_qwen3_moe"));
  /* Llama 3.1 8B: 8,030,261,248 parameters (model.safetensors.index.json total_size / 2 bytes). */
  pz_model_config c;
  CHECK_OK(pz_config_load("llama3_1_8b", &c));
  double t, a;
  param_count(&c, &t, &a);
  CHECK(t == 8030261248.0 && a == t);
  check_params("llama3_1_70b", 70.6, 70.6, 1);       /* "70.6B params" */
  check_params("qwen2_5_72b", 72.7, 72.7, 1);        /* "Number of Parameters: 72.7B" */
  check_params("qwen3_32b", 32.8, 32.8, 1);          /* "Number of Parameters: 32.8B" */
  check_params("qwen3_30b_a3b", 30.5, 3.3, 1);       /* "30.5B in total and 3.3B activated" */
  check_params("qwen3_235b_a22b", 235, 22, 0);       /* "235B in total and 22B activated" */
  check_params("mixtral_8x7b", 46.7, 12.9, 1);
  check_params("phi_4", 14, 14, 0);                  /* "14B parameters, dense decoder-only Transformer" */       /* "46.7B total parameters but only uses 12.9B per token" */
}

/* ------------------------------------------------------------------ inline JSON */

typedef struct { const char *k, *v; } kv;

/* JSON object of base[0..n) with each of `over` (NULL-terminated) replacing the base value of its
 * key (value NULL: key dropped) or appended. */
static void make(char *out, size_t cap, const kv *base, int n, const kv *over) {
  size_t o = (size_t)snprintf(out, cap, "{");
  int first = 1;
  for (int i = 0; i < n; i++) {
    const char *v = base[i].v;
    for (const kv *p = over; p && p->k; p++)
      if (!strcmp(p->k, base[i].k)) v = p->v;
    if (!v) continue;
    o += (size_t)snprintf(out + o, cap - o, "%s\"%s\": %s", first ? "" : ", ", base[i].k, v);
    first = 0;
  }
  for (const kv *p = over; p && p->k; p++) {
    int in_base = 0;
    for (int i = 0; i < n; i++) in_base |= !strcmp(p->k, base[i].k);
    if (!in_base && p->v) {
      o += (size_t)snprintf(out + o, cap - o, "%s\"%s\": %s", first ? "" : ", ", p->k, p->v);
      first = 0;
    }
  }
  snprintf(out + o, cap - o, "}");
}

static char text[8192];

static pz_status parse(const kv *base, int n, const kv *over, pz_model_config *c) {
  make(text, sizeof text, base, n, over);
  return pz_config_parse(text, strlen(text), "inline", c);
}

/* Expects PZ_ERR_CONFIG with a one-line message containing each needle. */
static void bad_at(int line, const kv *base, int n, const kv *over, const char *needle, const char *needle2) {
  pz_model_config c;
  pz_status st = parse(base, n, over, &c);
  const char *m = pz_last_error();
  if (st != PZ_ERR_CONFIG || !strstr(m, needle) || (needle2 && !strstr(m, needle2)) || strchr(m, '\n')) {
    fprintf(stderr, "line %d: %s -> %s \"%s\", want PZ_ERR_CONFIG naming \"%s\"%s%s\n", line, text,
            pz_status_string(st), st == PZ_OK ? "" : m, needle, needle2 ? " and " : "", needle2 ? needle2 : "");
    pz_test_failures++;
  }
}
#define BAD(base, over, needle) bad_at(__LINE__, base, (int)(sizeof base / sizeof base[0]), (const kv[])over, needle, NULL)
#define BAD2(base, over, n1, n2) bad_at(__LINE__, base, (int)(sizeof base / sizeof base[0]), (const kv[])over, n1, n2)
#define PARSE(base, over, c) parse(base, (int)(sizeof base / sizeof base[0]), (const kv[])over, c)
#define NONE {{NULL, NULL}}
#define OV(...) {__VA_ARGS__, {NULL, NULL}}

/* pz_config_layer_window of every layer of c: w where pat (one letter per layer) has 'S', else 0 (full
 * attention); 0 outside the layers. */
static void windows_at(int line, const pz_model_config *c, int64_t w, const char *pat) {
  int ok = (int64_t)strlen(pat) == c->num_hidden_layers;
  for (int64_t L = 0; ok && L < c->num_hidden_layers; L++) ok = pz_config_layer_window(c, L) == (pat[L] == 'S' ? w : 0);
  ok = ok && pz_config_layer_window(c, -1) == 0 && pz_config_layer_window(c, c->num_hidden_layers) == 0;
  if (!ok) {
    fprintf(stderr, "line %d: layer windows of %s (window %lld):", line, c->model_type, (long long)c->sliding_window);
    for (int64_t L = 0; L < c->num_hidden_layers; L++) fprintf(stderr, " %lld", (long long)pz_config_layer_window(c, L));
    fprintf(stderr, ", want %lld on '%s'\n", (long long)w, pat);
    pz_test_failures++;
  }
}
#define WINDOWS(c, w, pat) windows_at(__LINE__, c, w, pat)

/* n letters k (a static buffer, n < 128). */
static const char *all(char k, int n) {
  static char b[128];
  memset(b, k, (size_t)n);
  b[n] = 0;
  return b;
}

/* Every value distinct, so a field read into the wrong member shows. */
static const kv llama[] = {
    {"model_type", "\"llama\""}, {"hidden_size", "384"}, {"num_hidden_layers", "3"}, {"num_attention_heads", "12"},
    {"num_key_value_heads", "4"}, {"intermediate_size", "1000"}, {"vocab_size", "777"},
    {"max_position_embeddings", "2048"}, {"rms_norm_eps", "1e-05"}, {"rope_theta", "500000.0"},
    {"hidden_act", "\"silu\""},
    {"rope_scaling", "{\"factor\": 8.0, \"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0, "
                     "\"original_max_position_embeddings\": 1024, \"rope_type\": \"llama3\"}"},
};
static const kv qwen2[] = {
    {"model_type", "\"qwen2\""}, {"hidden_size", "320"}, {"num_hidden_layers", "5"}, {"num_attention_heads", "10"},
    {"num_key_value_heads", "2"}, {"intermediate_size", "900"}, {"vocab_size", "1500"},
    {"max_position_embeddings", "4096"}, {"rope_theta", "1000000.0"}, {"sliding_window", "131072"},
    {"use_sliding_window", "false"}, {"max_window_layers", "70"}, {"tie_word_embeddings", "true"},
};
static const kv qwen3[] = {
    {"model_type", "\"qwen3\""}, {"hidden_size", "320"}, {"num_hidden_layers", "4"}, {"num_attention_heads", "8"},
    {"num_key_value_heads", "2"}, {"head_dim", "64"}, {"intermediate_size", "800"}, {"vocab_size", "1200"},
    {"max_position_embeddings", "8192"}, {"rope_theta", "1000000"}, {"rope_scaling", "null"},
    {"sliding_window", "null"}, {"use_sliding_window", "false"}, {"attention_bias", "false"},
};
static const kv qwen3_moe[] = {
    {"model_type", "\"qwen3_moe\""}, {"hidden_size", "256"}, {"num_hidden_layers", "6"}, {"num_attention_heads", "8"},
    {"num_key_value_heads", "4"}, {"head_dim", "48"}, {"intermediate_size", "700"}, {"moe_intermediate_size", "96"},
    {"num_experts", "16"}, {"num_experts_per_tok", "4"}, {"norm_topk_prob", "true"}, {"decoder_sparse_step", "2"},
    {"mlp_only_layers", "[3]"}, {"vocab_size", "999"}, {"max_position_embeddings", "1024"},
};
static const kv mixtral[] = {
    {"model_type", "\"mixtral\""}, {"hidden_size", "512"}, {"num_hidden_layers", "4"}, {"num_attention_heads", "16"},
    {"num_key_value_heads", "4"}, {"intermediate_size", "1792"}, {"num_local_experts", "8"},
    {"num_experts_per_tok", "2"}, {"vocab_size", "3200"}, {"max_position_embeddings", "32768"},
    {"sliding_window", "null"},
};

static void test_llama(void) {
  pz_model_config c;
  CHECK_OK(PARSE(llama, NONE, &c));
  CHECK(!strcmp(c.model_type, "llama") && !strcmp(c.name, "llama") && c.attn == PZ_ATTN_GQA);
  CHECK(c.hidden_size == 384 && c.num_hidden_layers == 3 && c.num_attention_heads == 12 && c.num_key_value_heads == 4);
  CHECK(c.head_dim == 32); /* hidden / heads */
  CHECK(c.intermediate_size == 1000 && c.vocab_size == 777 && c.max_position_embeddings == 2048);
  CHECK(c.rms_norm_eps == 1e-5f && c.rope.theta == 500000.f);
  CHECK(c.rope.type == PZ_ROPE_LLAMA3 && c.rope.factor == 8.f && c.rope.low_freq_factor == 1.f &&
        c.rope.high_freq_factor == 4.f && c.rope.original_max_position_embeddings == 1024);
  CHECK(!c.attention_bias && !c.qk_norm && !c.tie_word_embeddings);
  CHECK(c.n_routed_experts == 0 && c.decoder_sparse_step == 1 && c.n_mlp_only == 0);
  CHECK(c.kv_lora_rank == 0 && c.q_lora_rank == 0 && c.qk_rope_head_dim == 0 && c.qk_nope_head_dim == 0 &&
        c.v_head_dim == 0 && c.first_k_dense_replace == 0 && c.n_group == 1 && c.topk_group == 1);
  for (int L = 0; L < 3; L++) CHECK(!pz_config_layer_is_moe(&c, L));
  /* LlamaConfig defaults: kv heads = heads, rms_norm_eps 1e-6, rope_theta 10000, no rope_scaling. */
  CHECK_OK(PARSE(llama, OV({"num_key_value_heads", NULL}, {"rms_norm_eps", NULL}, {"rope_theta", NULL},
                           {"rope_scaling", NULL}, {"hidden_act", NULL}), &c));
  CHECK(c.num_key_value_heads == 12 && c.rms_norm_eps == 1e-6f && c.rope.theta == 10000.f);
  CHECK(c.rope.type == PZ_ROPE_DEFAULT && c.rope.factor == 1.f && c.rope.original_max_position_embeddings == 2048);
  CHECK_OK(PARSE(llama, OV({"num_key_value_heads", "null"}, {"head_dim", "null"}), &c));
  CHECK(c.num_key_value_heads == 12 && c.head_dim == 32);
  /* Explicit head_dim (need not be hidden / heads), tie_word_embeddings. */
  CHECK_OK(PARSE(llama, OV({"head_dim", "64"}, {"attention_bias", "false"}, {"tie_word_embeddings", "true"},
                           {"mlp_bias", "false"}), &c));
  CHECK(c.head_dim == 64 && !c.attention_bias && c.tie_word_embeddings);
  /* attention_bias true: LlamaAttention gives o_proj a bias too (bias=config.attention_bias on q, k, v and o),
   * which prezero's attention has no place for; refused rather than run with q/k/v biases only. */
  BAD2(llama, OV({"attention_bias", "true"}), "\"attention_bias\"", "o_proj");
  /* rope_scaling "default" under either key; transformers' newer rope_parameters. */
  CHECK_OK(PARSE(llama, OV({"rope_scaling", "{\"rope_type\": \"default\"}"}), &c));
  CHECK(c.rope.type == PZ_ROPE_DEFAULT && c.rope.factor == 1.f);
  CHECK_OK(PARSE(llama, OV({"rope_scaling", "{\"type\": \"default\"}"}), &c));
  CHECK(c.rope.type == PZ_ROPE_DEFAULT);
  CHECK_OK(PARSE(llama, OV({"rope_scaling", NULL}, {"rope_theta", NULL},
                           {"rope_parameters", "{\"rope_type\": \"llama3\", \"rope_theta\": 250000.0, \"factor\": 2.0, "
                                               "\"low_freq_factor\": 0.5, \"high_freq_factor\": 2.0, "
                                               "\"original_max_position_embeddings\": 512}"}), &c));
  CHECK(c.rope.type == PZ_ROPE_LLAMA3 && c.rope.theta == 250000.f && c.rope.factor == 2.f &&
        c.rope.low_freq_factor == 0.5f && c.rope.high_freq_factor == 2.f && c.rope.original_max_position_embeddings == 512);
  /* a top-level original_max_position_embeddings wins over rope_scaling's (transformers 5), llama3 as yarn */
  CHECK_OK(PARSE(llama, OV({"rope_scaling", "{\"rope_type\": \"llama3\", \"factor\": 2.0, \"low_freq_factor\": 0.5, "
                                            "\"high_freq_factor\": 2.0, \"original_max_position_embeddings\": 512}"},
                           {"original_max_position_embeddings", "1024"}), &c));
  CHECK(c.rope.type == PZ_ROPE_LLAMA3 && c.rope.original_max_position_embeddings == 1024);
  /* sliding_window at or above max_position_embeddings is full attention. */
  CHECK_OK(PARSE(llama, OV({"sliding_window", "2048"}), &c));
  CHECK_OK(PARSE(llama, OV({"sliding_window", "null"}), &c));
  /* LlamaConfig has no sliding_window: any value, a negative one too, is ignored as transformers ignores it. */
  CHECK_OK(PARSE(llama, OV({"sliding_window", "-1"}), &c));
  CHECK(c.sliding_window == 0);
  /* text_config-wrapped form. */
  make(text, sizeof text, llama, (int)(sizeof llama / sizeof llama[0]), NULL);
  char wrapped[9000];
  snprintf(wrapped, sizeof wrapped, "{\"model_type\": \"llava\", \"text_config\": %s}", text);
  CHECK_OK(pz_config_parse(wrapped, strlen(wrapped), "wrapped", &c));
  CHECK(c.text_config && c.attn == PZ_ATTN_GQA && !strcmp(c.model_type, "llama") && c.hidden_size == 384);
}

static void test_qwen(void) {
  pz_model_config c;
  CHECK_OK(PARSE(qwen2, NONE, &c));
  CHECK(!strcmp(c.model_type, "qwen2") && c.attn == PZ_ATTN_GQA);
  CHECK(c.hidden_size == 320 && c.num_hidden_layers == 5 && c.num_attention_heads == 10 && c.num_key_value_heads == 2);
  CHECK(c.head_dim == 32 && c.intermediate_size == 900 && c.vocab_size == 1500 && c.max_position_embeddings == 4096);
  CHECK(c.rms_norm_eps == 1e-6f && c.rope.theta == 1e6f && c.rope.type == PZ_ROPE_DEFAULT);
  CHECK(c.attention_bias && !c.qk_norm && c.tie_word_embeddings); /* Qwen2Attention: q/k/v bias always */
  CHECK_OK(PARSE(qwen2, OV({"attention_bias", "false"}, {"tie_word_embeddings", NULL}), &c));
  CHECK(c.attention_bias && !c.tie_word_embeddings);
  /* Qwen2Config defaults: num_key_value_heads 32 (with the base's 10 heads, 32 does not divide them:
   * refused, naming the field), rope_theta 10000. */
  CHECK_OK(PARSE(qwen2, OV({"num_attention_heads", "64"}, {"hidden_size", "2048"}, {"num_key_value_heads", NULL},
                           {"rope_theta", NULL}), &c));
  CHECK(c.num_key_value_heads == 32 && c.rope.theta == 10000.f && c.head_dim == 32);
  BAD(qwen2, OV({"num_key_value_heads", NULL}), "num_key_value_heads");
  /* use_sliding_window false: sliding_window is not read as a window. */
  CHECK_OK(PARSE(qwen2, OV({"sliding_window", "4096"}), &c));
  CHECK_OK(PARSE(qwen2, OV({"sliding_window", "-1"}), &c));
  CHECK(c.sliding_window == 0);

  CHECK_OK(PARSE(qwen3, NONE, &c));
  CHECK(!strcmp(c.model_type, "qwen3") && c.attn == PZ_ATTN_GQA && c.qk_norm && !c.attention_bias);
  CHECK(c.hidden_size == 320 && c.num_attention_heads == 8 && c.num_key_value_heads == 2 && c.head_dim == 64);
  CHECK(c.intermediate_size == 800 && c.vocab_size == 1200 && c.max_position_embeddings == 8192 && c.n_routed_experts == 0);
  CHECK(c.rope.type == PZ_ROPE_DEFAULT && c.rope.theta == 1e6f);
  /* Qwen3Config defaults: head_dim 128, num_key_value_heads 32 (with 32 heads); attention_bias true gives o_proj a
   * bias too in Qwen3Attention and Qwen3MoeAttention: refused. */
  CHECK_OK(PARSE(qwen3, OV({"head_dim", NULL}, {"num_key_value_heads", NULL}, {"num_attention_heads", "32"},
                           {"attention_bias", "false"}), &c));
  CHECK(c.head_dim == 128 && c.num_key_value_heads == 32 && !c.attention_bias && c.qk_norm);
  BAD2(qwen3, OV({"attention_bias", "true"}), "\"attention_bias\"", "o_proj");
  BAD2(qwen3_moe, OV({"attention_bias", "true"}), "model_type qwen3_moe", "o_proj");
  CHECK_OK(PARSE(qwen3, OV({"layer_types", "[\"full_attention\", \"full_attention\", \"full_attention\", "
                                          "\"full_attention\"]"}), &c));
  WINDOWS(&c, 0, "FFFF");
}

static void test_moe(void) {
  pz_model_config c;
  CHECK_OK(PARSE(qwen3_moe, NONE, &c));
  CHECK(!strcmp(c.model_type, "qwen3_moe") && c.attn == PZ_ATTN_GQA && c.qk_norm && !c.attention_bias);
  CHECK(c.hidden_size == 256 && c.num_hidden_layers == 6 && c.num_attention_heads == 8 && c.num_key_value_heads == 4);
  CHECK(c.head_dim == 48 && c.intermediate_size == 700 && c.moe_intermediate_size == 96);
  CHECK(c.n_routed_experts == 16 && c.num_experts_per_tok == 4 && c.norm_topk_prob);
  CHECK(c.scoring_func == PZ_SCORE_SOFTMAX && c.topk_method == PZ_TOPK_GREEDY && c.routed_scaling_factor == 1.f &&
        c.n_shared_experts == 0);
  CHECK(c.decoder_sparse_step == 2 && c.n_mlp_only == 1 && c.mlp_only_layers[0] == 3);
  /* Qwen3MoeDecoderLayer: MoE when L not in mlp_only_layers and (L + 1) % step == 0: layers 1 and 5
   * (3 is listed, 0, 2, 4 are off the step). */
  static const bool want_step2[6] = {false, true, false, false, false, true};
  for (int L = 0; L < 6; L++) CHECK(pz_config_layer_is_moe(&c, L) == want_step2[L]);
  CHECK_OK(PARSE(qwen3_moe, OV({"decoder_sparse_step", "1"}, {"mlp_only_layers", "[0, 4, 5]"}), &c));
  static const bool want_list[6] = {false, true, true, true, false, false};
  for (int L = 0; L < 6; L++) CHECK(pz_config_layer_is_moe(&c, L) == want_list[L]);
  /* Qwen3MoeConfig defaults: norm_topk_prob false, decoder_sparse_step 1, mlp_only_layers [] (also for
   * null), num_key_value_heads 4, head_dim hidden / heads. */
  CHECK_OK(PARSE(qwen3_moe, OV({"norm_topk_prob", NULL}, {"decoder_sparse_step", NULL}, {"mlp_only_layers", "null"},
                               {"num_key_value_heads", NULL}, {"head_dim", NULL}), &c));
  CHECK(!c.norm_topk_prob && c.decoder_sparse_step == 1 && c.n_mlp_only == 0 && c.num_key_value_heads == 4 &&
        c.head_dim == 32);
  for (int L = 0; L < 6; L++) CHECK(pz_config_layer_is_moe(&c, L));
  CHECK_OK(PARSE(qwen3_moe, OV({"mlp_only_layers", NULL}), &c));
  CHECK(c.n_mlp_only == 0);
  /* num_experts 0: every layer dense. */
  CHECK_OK(PARSE(qwen3_moe, OV({"num_experts", "0"}), &c));
  for (int L = 0; L < 6; L++) CHECK(!pz_config_layer_is_moe(&c, L));
  /* transformers >= 5's save_pretrained writes num_local_experts (Qwen3MoeConfig.attribute_map maps
   * num_experts to it) and no num_experts: the same 16 experts; both given must agree. */
  CHECK_OK(PARSE(qwen3_moe, OV({"num_experts", NULL}, {"num_local_experts", "16"}), &c));
  CHECK(c.n_routed_experts == 16 && c.num_experts_per_tok == 4 && pz_config_layer_is_moe(&c, 1));
  CHECK_OK(PARSE(qwen3_moe, OV({"num_local_experts", "16"}), &c));
  CHECK(c.n_routed_experts == 16);
  BAD2(qwen3_moe, OV({"num_local_experts", "12"}), "num_experts", "num_local_experts");
  BAD(qwen3_moe, OV({"num_experts", NULL}, {"num_local_experts", "\"8\""}), "num_local_experts");
  BAD(qwen3_moe, OV({"num_experts", NULL}, {"num_local_experts", "2"}), "num_experts_per_tok"); /* top-4 of 2 */

  CHECK_OK(PARSE(mixtral, NONE, &c));
  CHECK(!strcmp(c.model_type, "mixtral") && c.attn == PZ_ATTN_GQA && !c.qk_norm && !c.attention_bias);
  CHECK(c.hidden_size == 512 && c.num_attention_heads == 16 && c.num_key_value_heads == 4 && c.head_dim == 32);
  CHECK(c.n_routed_experts == 8 && c.num_experts_per_tok == 2 && c.moe_intermediate_size == 1792 &&
        c.intermediate_size == 1792);
  CHECK(c.scoring_func == PZ_SCORE_TOPK_SOFTMAX && c.norm_topk_prob && c.decoder_sparse_step == 1);
  CHECK(c.n_shared_experts == 0 && c.routed_scaling_factor == 1.f && c.vocab_size == 3200);
  /* MixtralConfig defaults: rope_theta 1e6, rms_norm_eps 1e-5, num_key_value_heads 8; attention bias
   * never (the field is not read). */
  CHECK(c.rope.theta == 1e6f && c.rms_norm_eps == 1e-5f && c.rope.type == PZ_ROPE_DEFAULT);
  CHECK_OK(PARSE(mixtral, OV({"num_key_value_heads", NULL}, {"attention_bias", "true"}), &c));
  CHECK(c.num_key_value_heads == 8 && !c.attention_bias);
  for (int L = 0; L < 4; L++) CHECK(pz_config_layer_is_moe(&c, L));
  CHECK_OK(PARSE(mixtral, OV({"sliding_window", "32768"}), &c));
}

/* zai-org/GLM-4.5-Air's config.json (model_type glm4_moe). */
static const kv glm45_air[] = {
    {"architectures", "[\"Glm4MoeForCausalLM\"]"}, {"model_type", "\"glm4_moe\""}, {"attention_bias", "true"},
    {"first_k_dense_replace", "1"}, {"head_dim", "128"}, {"hidden_act", "\"silu\""}, {"hidden_size", "4096"},
    {"intermediate_size", "10944"}, {"max_position_embeddings", "131072"}, {"moe_intermediate_size", "1408"},
    {"n_group", "1"}, {"n_routed_experts", "128"}, {"n_shared_experts", "1"}, {"norm_topk_prob", "true"},
    {"num_attention_heads", "96"}, {"num_experts_per_tok", "8"}, {"num_hidden_layers", "46"},
    {"num_key_value_heads", "8"}, {"num_nextn_predict_layers", "1"}, {"partial_rotary_factor", "0.5"},
    {"rms_norm_eps", "1e-05"}, {"rope_scaling", "null"}, {"rope_theta", "1000000"}, {"routed_scaling_factor", "1.0"},
    {"tie_word_embeddings", "false"}, {"topk_group", "1"}, {"use_qk_norm", "false"}, {"vocab_size", "151552"},
};

/* glm4_moe: GQA attention with partial RoPE (rotary_dim = int(head_dim * partial_rotary_factor)), q/k/v
 * biases, optional q/k norms, and DeepSeek-V3's MoE from first_k_dense_replace on; Glm4MoeConfig's
 * defaults fill what is absent; bad values are refused with one line naming the field. */
static void test_glm4_moe(void) {
  pz_model_config c;
  CHECK_OK(PARSE(glm45_air, NONE, &c));
  CHECK(!strcmp(c.model_type, "glm4_moe") && c.attn == PZ_ATTN_GQA && c.attention_bias && !c.qk_norm);
  CHECK(c.hidden_size == 4096 && c.num_hidden_layers == 46 && c.num_attention_heads == 96 && c.num_key_value_heads == 8);
  CHECK(c.head_dim == 128 && c.rotary_dim == 64 && c.intermediate_size == 10944 && c.moe_intermediate_size == 1408);
  CHECK(c.n_routed_experts == 128 && c.num_experts_per_tok == 8 && c.n_shared_experts == 1 && c.norm_topk_prob);
  CHECK(c.n_group == 1 && c.topk_group == 1 && c.routed_scaling_factor == 1.f && c.first_k_dense_replace == 1);
  CHECK(c.scoring_func == PZ_SCORE_SIGMOID && c.topk_method == PZ_TOPK_NOAUX_TC && c.decoder_sparse_step == 0);
  CHECK(c.rope.theta == 1e6f && c.rope.type == PZ_ROPE_DEFAULT && c.rms_norm_eps == 1e-5f && c.vocab_size == 151552);
  CHECK(!pz_config_layer_is_moe(&c, 0));
  for (int L = 1; L < 46; L++) CHECK(pz_config_layer_is_moe(&c, L));
  /* Glm4MoeConfig's defaults: partial_rotary_factor 0.5, n_shared_experts 1, first_k_dense_replace 1,
   * norm_topk_prob true, num_key_value_heads 8, rms_norm_eps 1e-5, attention_bias / use_qk_norm false,
   * head_dim hidden / heads. */
  CHECK_OK(PARSE(glm45_air, OV({"partial_rotary_factor", NULL}, {"n_shared_experts", NULL}, {"first_k_dense_replace", NULL},
                               {"norm_topk_prob", NULL}, {"num_key_value_heads", NULL}, {"rms_norm_eps", NULL},
                               {"attention_bias", NULL}, {"use_qk_norm", NULL}, {"head_dim", NULL},
                               {"num_attention_heads", "16"}), &c));
  CHECK(c.head_dim == 256 && c.rotary_dim == 128 && c.n_shared_experts == 1 && c.first_k_dense_replace == 1);
  CHECK(c.norm_topk_prob && c.num_key_value_heads == 8 && c.rms_norm_eps == 1e-5f && !c.attention_bias && !c.qk_norm);
  CHECK_OK(PARSE(glm45_air, OV({"use_qk_norm", "true"}, {"first_k_dense_replace", "3"}, {"n_group", "8"},
                               {"topk_group", "4"}, {"routed_scaling_factor", "2.5"}, {"norm_topk_prob", "false"}), &c));
  CHECK(c.qk_norm && c.n_group == 8 && c.topk_group == 4 && c.routed_scaling_factor == 2.5f && !c.norm_topk_prob);
  for (int L = 0; L < 46; L++) CHECK(pz_config_layer_is_moe(&c, L) == (L >= 3));
  /* transformers 5 keeps partial_rotary_factor in rope_parameters, which wins over the top level */
  CHECK_OK(PARSE(glm45_air, OV({"rope_theta", NULL}, {"rope_scaling", NULL},
                               {"rope_parameters", "{\"rope_type\": \"default\", \"rope_theta\": 500000.0, "
                                                   "\"partial_rotary_factor\": 0.25}"}), &c));
  CHECK(c.rotary_dim == 32 && c.rope.theta == 5e5f);
  CHECK_OK(PARSE(glm45_air, OV({"partial_rotary_factor", "1.0"}), &c));
  CHECK(c.rotary_dim == 128);
  /* int(head_dim * factor) with the factor a double, as Python: 80 * 0.7 gives 56 (0.7 rounded to float
   * first gives 55.99..., 55); 20 * 0.35 gives 7, refused as odd (6 through a float, a different RoPE) */
  CHECK_OK(PARSE(glm45_air, OV({"head_dim", "80"}, {"partial_rotary_factor", "0.7"}), &c));
  CHECK(c.head_dim == 80 && c.rotary_dim == 56);
  CHECK_OK(PARSE(glm45_air, OV({"head_dim", "80"}, {"partial_rotary_factor", "0.9"}), &c));
  CHECK(c.rotary_dim == 72);
  BAD2(glm45_air, OV({"head_dim", "20"}, {"partial_rotary_factor", "0.35"}), "\"partial_rotary_factor\"",
       "7 rotary dims");
  /* null: transformers 5 reads a top-level null as 1.0 (full RoPE) and fails on one in rope_parameters;
   * neither is the default 0.5 */
  BAD2(glm45_air, OV({"partial_rotary_factor", "null"}), "\"partial_rotary_factor\" is null", "(0, 1]");
  BAD(glm45_air, OV({"rope_scaling", NULL}, {"rope_parameters", "{\"rope_type\": \"default\", \"rope_theta\": 1e6, "
                                                                  "\"partial_rotary_factor\": null}"}),
      "\"rope_parameters.partial_rotary_factor\" is null");
  /* num_local_experts (Glm4MoeConfig.attribute_map) names the same field */
  CHECK_OK(PARSE(glm45_air, OV({"n_routed_experts", NULL}, {"num_local_experts", "64"}), &c));
  CHECK(c.n_routed_experts == 64);
  BAD2(glm45_air, OV({"num_local_experts", "64"}), "n_routed_experts", "num_local_experts");
  BAD(glm45_air, OV({"head_dim", NULL}), "head_dim"); /* 4096 / 96 */
  BAD2(glm45_air, OV({"partial_rotary_factor", "0"}), "\"partial_rotary_factor\" is 0", "(0, 1]");
  BAD2(glm45_air, OV({"partial_rotary_factor", "1.5"}), "\"partial_rotary_factor\"", "(0, 1]");
  BAD2(glm45_air, OV({"partial_rotary_factor", "0.01"}), "\"partial_rotary_factor\"", "1 rotary dims");
  BAD2(glm45_air, OV({"partial_rotary_factor", "0.1171875"}), "\"partial_rotary_factor\"", "15 rotary dims"); /* odd */
  BAD(glm45_air, OV({"partial_rotary_factor", "\"half\""}), "\"partial_rotary_factor\"");
  BAD(glm45_air, OV({"rope_scaling", "{\"rope_type\": \"default\", \"partial_rotary_factor\": 2}"}),
      "\"rope_scaling.partial_rotary_factor\"");
  BAD(glm45_air, OV({"n_routed_experts", NULL}), "\"n_routed_experts\"");
  BAD(glm45_air, OV({"moe_intermediate_size", NULL}), "\"moe_intermediate_size\"");
  BAD2(glm45_air, OV({"n_group", "3"}), "\"n_group\" (3)", "n_routed_experts (128)");
  BAD2(glm45_air, OV({"n_group", "128"}), "\"n_group\" (128)", "at least 2");
  BAD2(glm45_air, OV({"topk_group", "2"}), "\"topk_group\" (2)", "n_group (1)");
  BAD2(glm45_air, OV({"n_group", "32"}, {"topk_group", "1"}), "\"num_experts_per_tok\" (8)", "(4)");
  BAD(glm45_air, OV({"use_qk_norm", "1"}), "\"use_qk_norm\"");
  BAD(glm45_air, OV({"sliding_window", "4096"}), "\"sliding_window\"");
}

/* microsoft/phi-4's config.json (model_type phi3: Phi3ForCausalLM, fused qkv_proj / gate_up_proj). */
static const kv phi4[] = {
    {"architectures", "[\"Phi3ForCausalLM\"]"}, {"attention_bias", "false"}, {"attention_dropout", "0.0"},
    {"bos_token_id", "100257"}, {"embd_pdrop", "0.0"}, {"eos_token_id", "100265"}, {"hidden_act", "\"silu\""},
    {"hidden_size", "5120"}, {"initializer_range", "0.02"}, {"intermediate_size", "17920"},
    {"max_position_embeddings", "16384"}, {"model_type", "\"phi3\""}, {"num_attention_heads", "40"},
    {"num_hidden_layers", "40"}, {"num_key_value_heads", "10"}, {"original_max_position_embeddings", "16384"},
    {"pad_token_id", "100349"}, {"resid_pdrop", "0.0"}, {"rms_norm_eps", "1e-05"}, {"rope_scaling", "null"},
    {"rope_theta", "250000"}, {"sliding_window", "null"}, {"tie_word_embeddings", "false"},
    {"torch_dtype", "\"bfloat16\""}, {"transformers_version", "\"4.47.0\""}, {"use_cache", "true"},
    {"vocab_size", "100352"},
};
/* microsoft/Phi-3-mini-4k-instruct's config.json: MHA (32 kv heads), head_dim 96, a 2047-token window. */
static const kv phi3_mini[] = {
    {"_name_or_path", "\"Phi-3-mini-4k-instruct\""}, {"architectures", "[\"Phi3ForCausalLM\"]"},
    {"attention_dropout", "0.0"},
    {"auto_map", "{\"AutoConfig\": \"configuration_phi3.Phi3Config\", "
                 "\"AutoModelForCausalLM\": \"modeling_phi3.Phi3ForCausalLM\"}"},
    {"bos_token_id", "1"}, {"embd_pdrop", "0.0"}, {"eos_token_id", "32000"}, {"hidden_act", "\"silu\""},
    {"hidden_size", "3072"}, {"initializer_range", "0.02"}, {"intermediate_size", "8192"},
    {"max_position_embeddings", "4096"}, {"model_type", "\"phi3\""}, {"num_attention_heads", "32"},
    {"num_hidden_layers", "32"}, {"num_key_value_heads", "32"}, {"original_max_position_embeddings", "4096"},
    {"pad_token_id", "32000"}, {"resid_pdrop", "0.0"}, {"rms_norm_eps", "1e-05"}, {"rope_scaling", "null"},
    {"rope_theta", "10000.0"}, {"sliding_window", "2047"}, {"tie_word_embeddings", "false"},
    {"torch_dtype", "\"bfloat16\""}, {"transformers_version", "\"4.40.2\""}, {"use_cache", "true"},
    {"attention_bias", "false"}, {"vocab_size", "32064"},
};
/* microsoft/Phi-3-medium-4k-instruct's config.json (its shape fields; Phi-3-mini-4k's others). */
static const kv phi3_medium_over[] = {
    {"_name_or_path", "\"Phi-3-medium-4k-instruct\""}, {"hidden_size", "5120"}, {"intermediate_size", "17920"},
    {"num_attention_heads", "40"}, {"num_hidden_layers", "40"}, {"num_key_value_heads", "10"}, {NULL, NULL},
};
/* microsoft/Phi-4-mini-instruct's config.json: partial RoPE 0.75, tied embeddings, LongRoPE. Its rope_scaling
 * lists 48 short and 48 long factors (the values written here are not the published ones; test_phi3_longrope
 * checks distinct values on Phi-3-mini-128k's layout). */
#define F48 "[1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, " \
            "1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, " \
            "1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]"
static const kv phi4_mini[] = {
    {"architectures", "[\"Phi3ForCausalLM\"]"}, {"attention_bias", "false"}, {"attention_dropout", "0.0"},
    {"bos_token_id", "199999"}, {"embd_pdrop", "0.0"}, {"eos_token_id", "199999"}, {"full_attn_mod", "1"},
    {"hidden_act", "\"silu\""}, {"hidden_size", "3072"}, {"initializer_range", "0.02"},
    {"intermediate_size", "8192"}, {"interpolate_factor", "1"}, {"lm_head_bias", "false"},
    {"max_position_embeddings", "131072"}, {"mlp_bias", "false"}, {"model_type", "\"phi3\""},
    {"num_attention_heads", "24"}, {"num_hidden_layers", "32"}, {"num_key_value_heads", "8"},
    {"original_max_position_embeddings", "4096"}, {"pad_token_id", "199999"}, {"partial_rotary_factor", "0.75"},
    {"resid_pdrop", "0.0"}, {"rms_norm_eps", "1e-05"},
    {"rope_scaling", "{\"long_factor\": " F48 ", \"short_factor\": " F48 ", \"type\": \"longrope\"}"},
    {"rope_theta", "10000.0"}, {"sliding_window", "262144"}, {"tie_word_embeddings", "true"},
    {"torch_dtype", "\"bfloat16\""}, {"transformers_version", "\"4.45.0\""}, {"use_cache", "true"},
    {"vocab_size", "200064"},
};

/* The per-rank weights the decode graph of c gives rank 0 at TP tp (the CUDA kernels take the same): q heads
 * heads / tp, kv heads nkv / tp (or one replicated past nkv), qkv_proj [(q + 2 kv heads) * head_dim, H],
 * o_proj [H, q heads * head_dim], gate_up_proj [2 * I / tp, H], down_proj [H, I / tp]; a TP that neither
 * divides num_key_value_heads nor is a multiple of it is refused naming the field. */
static void check_phi3_shapes(const pz_model_config *c, int tp) {
  pz_build_opts o = PZ_BUILD_OPTS_INIT;
  o.tp = tp;
  o.max_ctx = 16;
  o.layers = 1;
  pz_graph *g = NULL;
  const int64_t nh = c->num_attention_heads, nkv = c->num_key_value_heads, d = c->head_dim, H = c->hidden_size;
  const int64_t I = c->intermediate_size;
  if (nh % tp || (tp <= nkv ? nkv % tp : tp % nkv)) {
    CHECK_ST(pz_build_decode_graph(c, &o, &g), PZ_ERR_INVALID_ARG);
    CHECK(g == NULL && strstr(pz_last_error(), "num_") && !strchr(pz_last_error(), '\n'));
    printf("%s TP %d: refused (%s)\n", c->name, tp, pz_last_error());
    return;
  }
  CHECK_OK(pz_build_decode_graph(c, &o, &g));
  if (!g) return;
  const int64_t heads = nh / tp, kvh = tp <= nkv ? nkv / tp : 1;
  const pz_tensor *qkv = pz_graph_find_tensor(g, "layers.0.self_attn.qkv_proj.weight");
  const pz_tensor *op = pz_graph_find_tensor(g, "layers.0.self_attn.o_proj.weight");
  const pz_tensor *gu = pz_graph_find_tensor(g, "layers.0.mlp.gate_up_proj.weight");
  const pz_tensor *dn = pz_graph_find_tensor(g, "layers.0.mlp.down_proj.weight");
  CHECK(qkv && qkv->ne[0] == (heads + 2 * kvh) * d && qkv->ne[1] == H);
  CHECK(op && op->ne[0] == H && op->ne[1] == heads * d);
  CHECK(gu && gu->ne[0] == 2 * (I / tp) && gu->ne[1] == H && I % tp == 0);
  CHECK(dn && dn->ne[0] == H && dn->ne[1] == I / tp);
  CHECK(pz_graph_find_tensor(g, "layers.0.self_attn.qkv_proj.bias") == NULL);
  printf("%s TP %d: qkv_proj [%lld, %lld] (%lld q + 2 x %lld kv heads of %lld), gate_up_proj [%lld, %lld]\n", c->name,
         tp, (long long)(qkv ? qkv->ne[0] : -1), (long long)H, (long long)heads, (long long)kvh, (long long)d,
         (long long)(gu ? gu->ne[0] : -1), (long long)H);
  pz_graph_free(g);
}

/* phi3 (Phi3Config): Llama's math (no biases, SiLU MLP, rotate-half RoPE), partial_rotary_factor (default
 * 1.0), sliding_window on every layer (LongRoPE: test_phi3_longrope); the published configs of Phi-4,
 * Phi-3-mini-4k and Phi-3-medium-4k parse, with the parameter counts of their model cards and the per-rank
 * shapes of TP 1, 2, 4 and 8. */
static void test_phi3(void) {
  pz_model_config c;
  CHECK_OK(PARSE(phi4, NONE, &c));
  CHECK(!strcmp(c.model_type, "phi3") && c.attn == PZ_ATTN_GQA && !c.attention_bias && !c.qk_norm);
  CHECK(c.hidden_size == 5120 && c.num_hidden_layers == 40 && c.num_attention_heads == 40 && c.num_key_value_heads == 10);
  CHECK(c.head_dim == 128 && c.rotary_dim == 128 && c.intermediate_size == 17920 && c.vocab_size == 100352);
  CHECK(c.max_position_embeddings == 16384 && c.rope.type == PZ_ROPE_DEFAULT && c.rope.theta == 250000.f);
  CHECK(c.rms_norm_eps == 1e-5f && !c.tie_word_embeddings && c.n_routed_experts == 0 && c.decoder_sparse_step == 1);
  for (int L = 0; L < 40; L++) CHECK(!pz_config_layer_is_moe(&c, L));
  double t, a;
  param_count(&c, &t, &a);
  printf("phi-4: %.0f parameters\n", t);
  CHECK(t == 14659507200.0 && a == t); /* "14B parameters" (model card); 2 x 14,659,507,200 bytes of BF16 */
  snprintf(c.name, sizeof c.name, "phi-4");
  for (int tp = 1; tp <= 8; tp *= 2) check_phi3_shapes(&c, tp); /* TP 8: 10 kv heads, refused */

  CHECK_OK(PARSE(phi3_mini, NONE, &c));
  CHECK(c.hidden_size == 3072 && c.num_hidden_layers == 32 && c.num_attention_heads == 32 && c.num_key_value_heads == 32);
  CHECK(c.head_dim == 96 && c.rotary_dim == 96 && c.intermediate_size == 8192 && c.vocab_size == 32064);
  CHECK(c.rope.type == PZ_ROPE_DEFAULT && c.rope.theta == 10000.f && c.rms_norm_eps == 1e-5f && !c.tie_word_embeddings);
  /* sliding_window 2047 on every layer (Phi3Model's sliding mask keeps key j of query i when i - j < 2047); the
   * positions stay max_position_embeddings 4096 */
  CHECK(c.max_position_embeddings == 4096 && c.sliding_window == 2047);
  WINDOWS(&c, 2047, all('S', 32));
  param_count(&c, &t, &a);
  CHECK(published_as(t / 1e9, 3.8, 1)); /* "3.8B parameters" */
  snprintf(c.name, sizeof c.name, "Phi-3-mini-4k");
  for (int tp = 1; tp <= 8; tp *= 2) check_phi3_shapes(&c, tp);

  CHECK_OK(parse(phi3_mini, (int)(sizeof phi3_mini / sizeof phi3_mini[0]), phi3_medium_over, &c));
  CHECK(c.hidden_size == 5120 && c.num_hidden_layers == 40 && c.num_key_value_heads == 10 && c.head_dim == 128);
  CHECK(c.max_position_embeddings == 4096);
  WINDOWS(&c, 2047, all('S', 40));
  param_count(&c, &t, &a);
  CHECK(published_as(t / 1e9, 14, 0)); /* "14B parameters" */
  snprintf(c.name, sizeof c.name, "Phi-3-medium-4k");
  for (int tp = 1; tp <= 8; tp *= 2) check_phi3_shapes(&c, tp);

  /* Phi-4-mini: LongRoPE over int(128 * 0.75) = 96 rotated dims (48 factors of each kind) with tied embeddings,
   * and its 262144 window covers 131072 positions; with default RoPE the same partial RoPE */
  CHECK_OK(PARSE(phi4_mini, NONE, &c));
  CHECK(c.rope.type == PZ_ROPE_LONGROPE && c.rope.n_factors == 48 && c.rope.original_max_position_embeddings == 4096);
  CHECK(c.head_dim == 128 && c.rotary_dim == 96 && c.tie_word_embeddings && c.num_key_value_heads == 8);
  CHECK(c.max_position_embeddings == 131072 && c.vocab_size == 200064);
  WINDOWS(&c, 262144, all('S', 32)); /* the decode graph drops a window of the whole cache or more */
  snprintf(c.name, sizeof c.name, "Phi-4-mini");
  for (int tp = 1; tp <= 8; tp *= 2) check_phi3_shapes(&c, tp);
  CHECK_OK(PARSE(phi4_mini, OV({"rope_scaling", "null"}), &c));
  CHECK(c.rope.type == PZ_ROPE_DEFAULT && c.rotary_dim == 96);
  snprintf(c.name, sizeof c.name, "Phi-4-mini (default RoPE)");
  for (int tp = 1; tp <= 8; tp *= 2) check_phi3_shapes(&c, tp);
  CHECK_OK(PARSE(phi4_mini, OV({"rope_scaling", "null"}, {"partial_rotary_factor", NULL},
                               {"rope_parameters", "{\"rope_type\": \"default\", \"rope_theta\": 10000.0, "
                                                   "\"partial_rotary_factor\": 0.5}"}), &c));
  CHECK(c.rotary_dim == 64);

  /* Phi3Config defaults: num_key_value_heads = num_attention_heads, rms_norm_eps 1e-5, rope_theta 10000,
   * sliding_window null, partial_rotary_factor 1, tie_word_embeddings false; head_dim when given is read
   * (Phi3Attention: getattr(config, "head_dim", ...)) */
  CHECK_OK(PARSE(phi4, OV({"num_key_value_heads", NULL}, {"rms_norm_eps", NULL}, {"rope_theta", NULL},
                          {"sliding_window", NULL}, {"tie_word_embeddings", NULL}, {"rope_scaling", NULL}), &c));
  CHECK(c.num_key_value_heads == 40 && c.rms_norm_eps == 1e-5f && c.rope.theta == 10000.f && c.rotary_dim == 128);
  CHECK(c.max_position_embeddings == 16384 && !c.tie_word_embeddings);
  WINDOWS(&c, 0, all('F', 40));
  CHECK_OK(PARSE(phi4, OV({"head_dim", "64"}), &c));
  CHECK(c.head_dim == 64 && c.rotary_dim == 64);
  /* a window at or above max_position_embeddings masks nothing; dropout is training only; attention_bias and
   * mlp_bias are not Phi3Config fields (Phi3Attention and Phi3MLP have no biases) */
  CHECK_OK(PARSE(phi4, OV({"sliding_window", "16384"}, {"resid_pdrop", "0.1"}, {"attention_dropout", "0.1"},
                          {"attention_bias", "true"}), &c));
  CHECK(c.max_position_embeddings == 16384 && !c.attention_bias);
  CHECK_OK(PARSE(phi4, OV({"rope_scaling", "{\"rope_type\": \"default\"}"}), &c));
  CHECK(c.rope.type == PZ_ROPE_DEFAULT);

  /* Refusals, one line each naming the field (LongRoPE's: test_phi3_longrope). */
  BAD2(phi4, OV({"rope_scaling", "{\"rope_type\": \"llama3\", \"factor\": 8.0, \"low_freq_factor\": 1.0, "
                                 "\"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 8192}"}),
       "\"rope_scaling.rope_type\" is \"llama3\"", "\"default\"");
  BAD2(phi4, OV({"rope_scaling", "{\"type\": \"linear\", \"factor\": 2.0}"}), "\"rope_scaling.type\" is \"linear\"",
       "\"longrope\"");
  BAD2(phi4, OV({"rope_scaling", "{\"type\": \"yarn\", \"factor\": 4.0}"}), "\"rope_scaling.short_factor\" is missing",
       "LongRoPE"); /* Phi3Config reads yarn as longrope: not Qwen's YaRN */
  BAD(phi4, OV({"sliding_window", "0"}), "\"sliding_window\"");
  BAD2(phi4, OV({"sliding_window", "-1"}), "\"sliding_window\" is -1", ">= 1 tokens, or null");
  BAD(phi4, OV({"sliding_window", "\"2047\""}), "\"sliding_window\"");
  BAD2(phi4, OV({"layer_types", "[\"sliding_attention\"]"}), "\"layer_types\"", "sliding_window is null");
  BAD2(phi3_mini, OV({"layer_types", "[\"sliding_attention\", \"full_attention\"]"}), "\"layer_types\" mixes",
       "every layer");
  BAD2(phi4, OV({"partial_rotary_factor", "null"}), "\"partial_rotary_factor\" is null", "(1)");
  BAD2(phi4, OV({"partial_rotary_factor", "1.5"}), "\"partial_rotary_factor\"", "(0, 1]");
  BAD2(phi4, OV({"partial_rotary_factor", "0.1171875"}), "\"partial_rotary_factor\"", "15 rotary dims"); /* odd */
  BAD2(phi4, OV({"head_dim", "null"}), "\"head_dim\" is null", "Phi3Attention"); /* None ** -0.5 in transformers */
  BAD(phi4, OV({"hidden_act", "\"gelu_new\""}), "\"hidden_act\"");
  BAD(phi4, OV({"num_key_value_heads", "7"}), "\"num_key_value_heads\"");
  BAD(phi4, OV({"intermediate_size", NULL}), "\"intermediate_size\"");
  BAD(phi4, OV({"use_qk_norm", "true"}), "\"use_qk_norm\"");
  BAD(phi4, OV({"rope_interleave", "true"}), "\"rope_interleave\"");
}

/* rednote-hilab/dots.llm1.inst's config.json (model_type dots1, Dots1ForCausalLM), written from memory, not
 * copied from the published file: the dimensions are dots.llm1's (its report: 142B parameters, 62 layers, 128
 * routed experts of which 6 are chosen, 2 shared); fields that may differ in the published file (n_group /
 * topk_group 1 or null, scoring_func, sliding_window null or 4096 under max_window_layers 62) are also parsed
 * in both forms below. */
static const kv dots_inst[] = {
    {"architectures", "[\"Dots1ForCausalLM\"]"}, {"attention_bias", "false"}, {"attention_dropout", "0.0"},
    {"bos_token_id", "null"}, {"eos_token_id", "151649"}, {"first_k_dense_replace", "1"}, {"hidden_act", "\"silu\""},
    {"hidden_size", "4096"}, {"initializer_range", "0.02"}, {"intermediate_size", "10944"},
    {"max_position_embeddings", "32768"}, {"max_window_layers", "62"}, {"model_type", "\"dots1\""},
    {"moe_intermediate_size", "1408"}, {"moe_layer_freq", "1"}, {"n_group", "1"}, {"n_routed_experts", "128"},
    {"n_shared_experts", "2"}, {"norm_topk_prob", "true"}, {"num_attention_heads", "32"},
    {"num_experts_per_tok", "6"}, {"num_hidden_layers", "62"}, {"num_key_value_heads", "32"},
    {"rms_norm_eps", "1e-05"}, {"rope_scaling", "null"}, {"rope_theta", "10000000"},
    {"routed_scaling_factor", "2.5"}, {"scoring_func", "\"sigmoid\""}, {"sliding_window", "null"},
    {"tie_word_embeddings", "false"}, {"topk_group", "1"}, {"topk_method", "\"noaux_tc\""},
    {"torch_dtype", "\"bfloat16\""}, {"transformers_version", "\"4.46.3\""}, {"use_cache", "true"},
    {"use_sliding_window", "false"}, {"vocab_size", "152064"},
};

/* The per-rank weights the decode graph of a dots1 config gives rank 0 at TP tp, against shapes derived here:
 * qkv_proj [(32 / tp + 2 * 32 / tp) * 128, H], o_proj [H, 32 / tp * 128], q_norm / k_norm [128] (per head,
 * replicated), layer 0's dense gate_up_proj [2 * 10944 / tp, H] and down_proj [H, 10944 / tp], layer 1's router
 * [128, H] and e_score_correction_bias [128] (replicated), routed experts [128, 1408 / tp, H] / [128, H, 1408 / tp]
 * and the shared experts' MLP of 2 * 1408 / tp rows. */
static void check_dots1_shapes(const pz_model_config *c, int tp) {
  pz_build_opts o = PZ_BUILD_OPTS_INIT;
  o.tp = tp;
  o.max_ctx = 16;
  o.layers = 2;
  pz_graph *g = NULL;
  CHECK_OK(pz_build_decode_graph(c, &o, &g));
  if (!g) return;
  const int64_t H = 4096, d = 128, heads = 32 / tp, kvh = 32 / tp, I = 10944 / tp, MI = 1408 / tp, SI = 2 * 1408 / tp;
  static const struct { const char *name; int nd; } t[] = {
      {"layers.0.self_attn.qkv_proj.weight", 2}, {"layers.0.self_attn.o_proj.weight", 2},
      {"layers.0.self_attn.q_norm.weight", 1},   {"layers.0.self_attn.k_norm.weight", 1},
      {"layers.0.mlp.gate_up_proj.weight", 2},   {"layers.0.mlp.down_proj.weight", 2},
      {"layers.1.mlp.gate.weight", 2},           {"layers.1.mlp.gate.e_score_correction_bias", 1},
      {"layers.1.mlp.experts.gate_proj.weight", 3}, {"layers.1.mlp.experts.down_proj.weight", 3},
      {"layers.1.mlp.shared_experts.gate_proj.weight", 2}, {"layers.1.mlp.shared_experts.down_proj.weight", 2},
  };
  const int64_t want[][3] = {{(heads + 2 * kvh) * d, H}, {H, heads * d}, {d}, {d}, {2 * I, H}, {H, I}, {128, H},
                             {128}, {128, MI, H}, {128, H, MI}, {SI, H}, {H, SI}};
  for (int i = 0; i < (int)(sizeof t / sizeof t[0]); i++) {
    const pz_tensor *x = pz_graph_find_tensor(g, t[i].name);
    int ok = x && x->ndim == t[i].nd;
    for (int k = 0; ok && k < t[i].nd; k++) ok = x->ne[k] == want[i][k];
    if (!ok) {
      fprintf(stderr, "dots.llm1 TP %d: %s is not [%lld, %lld, %lld]\n", tp, t[i].name, (long long)want[i][0],
              (long long)want[i][1], (long long)want[i][2]);
      pz_test_failures++;
    }
  }
  CHECK(pz_graph_find_tensor(g, "layers.0.self_attn.qkv_proj.bias") == NULL);
  printf("dots.llm1 TP %d: qkv_proj [%lld, 4096], experts [128, %lld, 4096], shared [%lld, 4096], dense [%lld, 4096]\n",
         tp, (long long)((heads + 2 * kvh) * d), (long long)MI, (long long)SI, (long long)(2 * I));
  pz_graph_free(g);
}

/* Parameters of a dots1 config (each figure derived here): embeddings and lm_head, per layer q/k/v/o, the per-head
 * q/k norms and two norms, layer 0's dense MLP, the MoE layers' router (+ correction bias), routed and shared
 * experts; activated: top-k of the routed experts. */
static void dots1_params(const pz_model_config *c, double *total, double *active) {
  const double H = (double)c->hidden_size, d = (double)c->head_dim, V = (double)c->vocab_size;
  const double attn = H * d * (double)(2 * c->num_attention_heads + 2 * c->num_key_value_heads) + 2 * d + 2 * H;
  const double expert = 3 * H * (double)c->moe_intermediate_size, E = (double)c->n_routed_experts;
  const double moe_fixed = attn + E * H + E + expert * (double)c->n_shared_experts;
  const double dense = attn + 3 * H * (double)c->intermediate_size, n_moe = (double)(c->num_hidden_layers - 1);
  *total = 2 * V * H + H + dense + n_moe * (moe_fixed + E * expert);
  *active = 2 * V * H + H + dense + n_moe * (moe_fixed + (double)c->num_experts_per_tok * expert);
}

/* "[v_0, v_1, ...]": n entries a + b * i, exact in f32 and printed exactly. */
static const char *factor_list(char *buf, size_t cap, int n, double a, double b) {
  size_t o = (size_t)snprintf(buf, cap, "[");
  for (int i = 0; i < n; i++) o += (size_t)snprintf(buf + o, cap - o, "%s%.9g", i ? ", " : "", a + b * i);
  snprintf(buf + o, cap - o, "]");
  return buf;
}

/* 1 / (f * theta^s) in long double with transformers' exponent s = 2i / dim as its float32 tensor holds it
 * (_compute_longrope_parameters: arange(0, dim, 2).float() / dim); that rounding moves theta^s by up to
 * s ln(theta) 2^-24 relative, ten f32 ulps at theta 1e4, so it is taken here, and the rest (pow, product and
 * quotient, each rounded to f32 there) is left to the tolerance. */
static long double longrope_ref(long double theta, int dim, int i, long double f) {
  const float s = (float)(2 * i) / (float)dim;
  return 1.0L / (f * powl(theta, (long double)s));
}

/* phi3's LongRoPE (Phi-3-mini-128k / Phi-3.5-mini's layout: head_dim 96, 48 factors of each kind, a top-level
 * original_max_position_embeddings 4096 under max_position_embeddings 131072): the factors exactly, the
 * inverse frequencies of both tables against the formula in long double, the long table from position 4096
 * on, the attention factor sqrt(1 + ln 32 / ln 4096) = sqrt(17 / 12) on cos / sin; the legacy "su" / "yarn"
 * types and transformers 5's rope_parameters read the same; factor / attention_factor; every refusal. */
static void test_phi3_longrope(void) {
  char sf[1024], lf[1024], rs[2300], bad[4096];
  factor_list(sf, sizeof sf, 48, 1.0, 1.0 / 64);
  factor_list(lf, sizeof lf, 48, 1.0, 0.75);
  snprintf(rs, sizeof rs, "{\"long_factor\": %s, \"short_factor\": %s, \"type\": \"longrope\"}", lf, sf);
#define LR(...) OV({"max_position_embeddings", "131072"}, {"sliding_window", "262144"}, {"rope_scaling", rs}, __VA_ARGS__)
  pz_model_config c, c2;
  CHECK_OK(PARSE(phi3_mini, LR({"_name_or_path", "\"Phi-3-mini-128k-instruct\""}), &c));
  CHECK(c.rope.type == PZ_ROPE_LONGROPE && c.head_dim == 96 && c.rotary_dim == 96 && c.rope.n_factors == 48);
  CHECK(c.max_position_embeddings == 131072 && c.rope.original_max_position_embeddings == 4096 && c.rope.theta == 1e4f);
  for (int i = 0; i < 48; i++) CHECK(c.rope.short_factor[i] == (float)(1.0 + i / 64.0) && c.rope.long_factor[i] == (float)(1.0 + 0.75 * i));
  CHECK(pz_rope_long_from(&c.rope) == 4096);
  CHECK_NEAR(c.rope.attention_factor, (double)sqrtl(17.0L / 12.0L), 1.2e-7); /* ln 32 / ln 4096 = 5 / 12 */
  CHECK(pz_rope_cos_sin_mscale(&c.rope) == c.rope.attention_factor);
  float fs[48], fl[48];
  pz_rope_inv_freq(&c.rope, 96, fs);
  pz_rope_inv_freq_long(&c.rope, 96, fl);
  for (int i = 0; i < 48; i++) {
    const long double ws = longrope_ref(1e4L, 96, i, 1.0L + i / 64.0L), wl = longrope_ref(1e4L, 96, i, 1.0L + 0.75L * i);
    if (!(fabsl((long double)fs[i] - ws) <= ws * 0x1p-22L) || !(fabsl((long double)fl[i] - wl) <= wl * 0x1p-22L)) {
      fprintf(stderr, "longrope inv_freq i=%d: short %.9g (want %.12Lg), long %.9g (want %.12Lg)\n", i, fs[i], ws, fl[i], wl);
      pz_test_failures++;
    }
  }
  CHECK(fs[0] == 1.0f && fl[0] == 1.0f && fl[1] < fs[1]);
  /* the legacy "su" / "yarn" (Phi3Config reads both as longrope), the key "rope_type", and transformers 5's
   * rope_parameters (rope_theta and partial_rotary_factor inside) read the same */
  static const char *const types[3] = {"\"type\": \"su\"", "\"type\": \"yarn\"", "\"rope_type\": \"longrope\""};
  for (int k = 0; k < 4; k++) {
    char alt[4096];
    if (k < 3) {
      snprintf(alt, sizeof alt, "{\"long_factor\": %s, \"short_factor\": %s, %s}", lf, sf, types[k]);
      CHECK_OK(PARSE(phi3_mini, LR({"rope_scaling", alt}), &c2));
    } else {
      snprintf(alt, sizeof alt, "{\"rope_type\": \"longrope\", \"rope_theta\": 10000.0, \"partial_rotary_factor\": 1.0, "
               "\"long_factor\": %s, \"short_factor\": %s, \"original_max_position_embeddings\": 4096}", lf, sf);
      CHECK_OK(PARSE(phi3_mini, LR({"rope_scaling", NULL}, {"rope_theta", NULL}, {"rope_parameters", alt}), &c2));
    }
    CHECK(!memcmp(&c2.rope, &c.rope, sizeof c.rope));
  }
  /* the top level's original_max_position_embeddings wins over the RoPE object's own (standardize_rope_params) */
  snprintf(bad, sizeof bad, "{\"long_factor\": %s, \"short_factor\": %s, \"type\": \"longrope\", "
           "\"original_max_position_embeddings\": 2048}", lf, sf);
  CHECK_OK(PARSE(phi3_mini, LR({"rope_scaling", bad}), &c2));
  CHECK(!memcmp(&c2.rope, &c.rope, sizeof c.rope));
  /* attention factor: given factor 4 -> sqrt(1 + ln 4 / ln 4096) = sqrt(7 / 6); attention_factor as given;
   * max_position_embeddings at the original length -> 1; factor null -> the ratio */
  static const struct { const char *extra, *max_pos; long double want; } af[] = {
      {", \"factor\": 4.0", "131072", 0}, {", \"attention_factor\": 1.25", "131072", 1.25L},
      {", \"factor\": 4.0, \"attention_factor\": 1.5", "131072", 1.5L}, {"", "4096", 1.0L},
      {", \"factor\": null, \"attention_factor\": null", "131072", 0},
  };
  for (int k = 0; k < 5; k++) {
    snprintf(bad, sizeof bad, "{\"long_factor\": %s, \"short_factor\": %s, \"type\": \"longrope\"%s}", lf, sf, af[k].extra);
    CHECK_OK(PARSE(phi3_mini, LR({"rope_scaling", bad}, {"max_position_embeddings", af[k].max_pos}), &c2));
    const long double want = k == 0 ? sqrtl(7.0L / 6.0L) : k == 4 ? sqrtl(17.0L / 12.0L) : af[k].want;
    CHECK_NEAR(c2.rope.attention_factor, (double)want, 1.2e-7);
  }
  /* partial RoPE: Phi-4-mini's 0.75 of 128 -> 48 factors; 64 (a list for all of head_dim) is refused */
  char f64[1200], rs64[2600];
  snprintf(rs64, sizeof rs64, "{\"long_factor\": %s, \"short_factor\": %s, \"type\": \"longrope\"}",
           factor_list(f64, sizeof f64, 64, 1.0, 0.5), sf);
  BAD2(phi4_mini, OV({"rope_scaling", rs64}), "\"rope_scaling.long_factor\" has 64 entries", "rotary dims / 2 = 48");

  /* refusals, one line each naming the field */
  static const struct { const char *key, *val, *n1, *n2; } lists[] = {
      {"short_factor", "[1.0, 2.0]", "\"rope_scaling.short_factor\" has 2 entries", "= 48"},
      {"short_factor", "1.0", "\"rope_scaling.short_factor\" must be a list of numbers", NULL},
      {"short_factor", NULL, "\"rope_scaling.short_factor\" is missing", NULL},
      {"long_factor", NULL, "\"rope_scaling.long_factor\" is missing", NULL},
  };
  for (int k = 0; k < 4; k++) {
    const bool sh = !strcmp(lists[k].key, "short_factor");
    if (lists[k].val)
      snprintf(bad, sizeof bad, "{\"%s\": %s, \"%s\": %s, \"type\": \"longrope\"}", lists[k].key, lists[k].val,
               sh ? "long_factor" : "short_factor", sh ? lf : sf);
    else
      snprintf(bad, sizeof bad, "{\"%s\": %s, \"type\": \"longrope\"}", sh ? "long_factor" : "short_factor", sh ? lf : sf);
    BAD2(phi3_mini, LR({"rope_scaling", bad}), lists[k].n1, lists[k].n2);
  }
  /* one entry of a right-length list replaced: a string, null, a boolean (Python counts True as 1), 0, < 0 */
  static const char *const entries[5] = {"\"1.0\"", "null", "true", "0", "-1.5"};
  for (int k = 0; k < 5; k++) {
    char l[1100];
    factor_list(l, sizeof l, 48, 1.0, 0.75);
    char *at = strstr(l, ", 3.25"); /* entry 3 */
    CHECK(at != NULL);
    if (!at) continue;
    char edited[1200];
    snprintf(edited, sizeof edited, "%.*s, %s%s", (int)(at - l), l, entries[k], at + strlen(", 3.25"));
    snprintf(bad, sizeof bad, "{\"long_factor\": %s, \"short_factor\": %s, \"type\": \"longrope\"}", edited, sf);
    BAD2(phi3_mini, LR({"rope_scaling", bad}), "\"rope_scaling.long_factor\" has entry 3", k < 3 ? "not a number" : "> 0");
  }
  /* the top-level original_max_position_embeddings: required (Phi3Config would read 4096 over the RoPE
   * object's own), an integer >= 1 */
  BAD2(phi3_mini, LR({"original_max_position_embeddings", NULL}), "\"original_max_position_embeddings\" is missing", "4096");
  snprintf(bad, sizeof bad, "{\"long_factor\": %s, \"short_factor\": %s, \"type\": \"longrope\", "
           "\"original_max_position_embeddings\": 4096}", lf, sf);
  BAD2(phi3_mini, LR({"rope_scaling", bad}, {"original_max_position_embeddings", NULL}),
       "\"original_max_position_embeddings\" is missing", "not the RoPE object's own");
  BAD(phi3_mini, LR({"original_max_position_embeddings", "null"}), "\"original_max_position_embeddings\"");
  BAD(phi3_mini, LR({"original_max_position_embeddings", "\"4096\""}), "\"original_max_position_embeddings\"");
  BAD(phi3_mini, LR({"original_max_position_embeddings", "0"}), "\"original_max_position_embeddings\" is 0");
  /* factor, attention_factor, short_mscale / long_mscale, head_dim */
  static const struct { const char *extra, *n1, *n2; } fields[] = {
      {", \"factor\": 0.5", "\"rope_scaling.factor\" is 0.5", ">= 1"},
      {", \"factor\": \"32\"", "\"rope_scaling.factor\" must be a number", NULL},
      {", \"attention_factor\": 0", "\"rope_scaling.attention_factor\" is 0", "> 0"},
      {", \"attention_factor\": [1.2]", "\"rope_scaling.attention_factor\" must be a number", NULL},
      {", \"short_mscale\": 1.0", "\"rope_scaling.short_mscale\" is not supported", "attention_factor"},
      {", \"long_mscale\": 1.19", "\"rope_scaling.long_mscale\" is not supported", NULL},
  };
  for (int k = 0; k < 6; k++) {
    snprintf(bad, sizeof bad, "{\"long_factor\": %s, \"short_factor\": %s, \"type\": \"longrope\"%s}", lf, sf,
             fields[k].extra);
    BAD2(phi3_mini, LR({"rope_scaling", bad}), fields[k].n1, fields[k].n2);
  }
  BAD2(phi3_mini, LR({"hidden_size", "5120"}), "LongRoPE over 160 rotary dims", "at most 64 factors"); /* head_dim 160 */
  BAD2(phi3_mini, LR({"head_dim", "64"}), "\"head_dim\" (64) differs from hidden_size / num_attention_heads (96)",
       "transformers cannot run it");
  BAD2(phi3_mini, LR({"original_max_position_embeddings", "1"}), "\"original_max_position_embeddings\" is 1",
       "attention_factor");
  snprintf(bad, sizeof bad, "{\"long_factor\": %s, \"short_factor\": %s, \"type\": \"dynamic\"}", lf, sf);
  BAD2(phi3_mini, LR({"rope_scaling", bad}), "\"rope_scaling.type\" is \"dynamic\"", "\"longrope\"");
#undef LR
}

/* dots1 (Dots1Config): Qwen3's attention (q/k norms per head, no biases, full RoPE) with DeepSeek-V3's MoE
 * (sigmoid + e_score_correction_bias, noaux_tc groups, norm_topk_prob, routed_scaling_factor, shared experts,
 * layers from first_k_dense_replace on); sliding layers from layer_types or max_window_layers; Dots1Config's
 * defaults fill what is absent; bad values are refused with one line naming the field. */
static void test_dots1(void) {
  pz_model_config c;
  CHECK_OK(PARSE(dots_inst, NONE, &c));
  CHECK(!strcmp(c.model_type, "dots1") && c.attn == PZ_ATTN_GQA && !c.attention_bias && c.qk_norm);
  CHECK(c.hidden_size == 4096 && c.num_hidden_layers == 62 && c.num_attention_heads == 32 && c.num_key_value_heads == 32);
  CHECK(c.head_dim == 128 && c.rotary_dim == 128 && c.intermediate_size == 10944 && c.moe_intermediate_size == 1408);
  CHECK(c.n_routed_experts == 128 && c.num_experts_per_tok == 6 && c.n_shared_experts == 2 && c.norm_topk_prob);
  CHECK(c.n_group == 1 && c.topk_group == 1 && c.routed_scaling_factor == 2.5f && c.first_k_dense_replace == 1);
  CHECK(c.scoring_func == PZ_SCORE_SIGMOID && c.topk_method == PZ_TOPK_NOAUX_TC && c.decoder_sparse_step == 0);
  CHECK(c.rope.theta == 1e7f && c.rope.type == PZ_ROPE_DEFAULT && c.rms_norm_eps == 1e-5f && c.vocab_size == 152064);
  CHECK(c.max_position_embeddings == 32768 && !c.tie_word_embeddings);
  CHECK(!pz_config_layer_is_moe(&c, 0));
  for (int L = 1; L < 62; L++) CHECK(pz_config_layer_is_moe(&c, L));
  double t, a;
  dots1_params(&c, &t, &a);
  printf("dots.llm1: %.4f B parameters, %.4f B activated\n", t / 1e9, a / 1e9);
  CHECK(published_as(t / 1e9, 142, 0) && published_as(a / 1e9, 14, 0)); /* "142B total, 14B activated" */
  for (int tp = 1; tp <= 8; tp *= 2) check_dots1_shapes(&c, tp);

  /* The forms the published file may have instead: n_group / topk_group null (one group), sliding_window 4096
   * under max_window_layers 62 = num_hidden_layers (no sliding layer), scoring_func "noaux_tc" */
  CHECK_OK(PARSE(dots_inst, OV({"n_group", "null"}, {"topk_group", "null"}, {"sliding_window", "4096"},
                               {"scoring_func", "\"noaux_tc\""}), &c));
  CHECK(c.n_group == 1 && c.topk_group == 1 && c.max_position_embeddings == 32768);
  WINDOWS(&c, 0, all('F', 62));
  /* Dots1Config's defaults: num_key_value_heads 32, rms_norm_eps 1e-6, rope_theta 1e4, first_k_dense_replace 0,
   * norm_topk_prob false, routed_scaling_factor 1, n_group / topk_group 1, attention_bias false, head_dim
   * hidden / heads, sliding_window 4096 with max_window_layers 62 (no sliding layer of 62) */
  CHECK_OK(PARSE(dots_inst, OV({"num_key_value_heads", NULL}, {"rms_norm_eps", NULL}, {"rope_theta", NULL},
                               {"first_k_dense_replace", NULL}, {"norm_topk_prob", NULL}, {"routed_scaling_factor", NULL},
                               {"n_group", NULL}, {"topk_group", NULL}, {"attention_bias", NULL},
                               {"sliding_window", NULL}, {"max_window_layers", NULL}, {"num_attention_heads", "64"}), &c));
  CHECK(c.num_key_value_heads == 32 && c.num_attention_heads == 64 && c.head_dim == 64 && c.rms_norm_eps == 1e-6f);
  CHECK(c.rope.theta == 1e4f && c.first_k_dense_replace == 0 && !c.norm_topk_prob && c.routed_scaling_factor == 1.f);
  CHECK(c.n_group == 1 && c.topk_group == 1 && !c.attention_bias && c.max_position_embeddings == 32768);
  for (int L = 0; L < 62; L++) CHECK(pz_config_layer_is_moe(&c, L));
  /* more layers than the default max_window_layers 62 under the default window 4096: layers 62.. slide */
  CHECK_OK(PARSE(dots_inst, OV({"sliding_window", NULL}, {"max_window_layers", NULL}, {"num_hidden_layers", "64"}), &c));
  char pat[136];
  snprintf(pat, sizeof pat, "%sSS", all('F', 62));
  CHECK(c.max_position_embeddings == 32768); /* the positions are not limited by the window */
  WINDOWS(&c, 4096, pat);
  /* sliding layers from max_window_layers on, or listed in layer_types */
  CHECK_OK(PARSE(dots_inst, OV({"sliding_window", "8192"}, {"max_window_layers", "60"}), &c));
  snprintf(pat, sizeof pat, "%sSS", all('F', 60));
  WINDOWS(&c, 8192, pat);
  CHECK_OK(PARSE(dots_inst, OV({"sliding_window", "65536"}, {"max_window_layers", "0"}), &c));
  WINDOWS(&c, 65536, all('S', 62)); /* above max_position_embeddings: the decode graph drops it */
  CHECK_OK(PARSE(dots_inst, OV({"sliding_window", "null"}, {"max_window_layers", "0"}, {"use_sliding_window", "true"}), &c));
  WINDOWS(&c, 0, all('F', 62)); /* no window: no sliding layer; use_sliding_window is not read */
  char lt[62 * 22 + 8];
  size_t o = (size_t)snprintf(lt, sizeof lt, "[");
  for (int L = 0; L < 62; L++)
    o += (size_t)snprintf(lt + o, sizeof lt - o, "%s\"%s_attention\"", L ? ", " : "", L == 61 ? "sliding" : "full");
  snprintf(lt + o, sizeof lt - o, "]");
  CHECK_OK(PARSE(dots_inst, OV({"sliding_window", "2048"}, {"max_window_layers", "62"}, {"layer_types", lt}), &c));
  snprintf(pat, sizeof pat, "%sS", all('F', 61));
  CHECK(c.max_position_embeddings == 32768);
  WINDOWS(&c, 2048, pat);
  CHECK_OK(PARSE(dots_inst, OV({"sliding_window", "2048"}, {"max_window_layers", "0"}, {"layer_types", lt}), &c));
  WINDOWS(&c, 2048, pat); /* layer_types wins over max_window_layers */
  BAD2(dots_inst, OV({"layer_types", lt}), "\"layer_types\"", "sliding_window is null");
  BAD2(dots_inst, OV({"layer_types", "[\"full_attention\"]"}), "\"layer_types\" has 1 entries", "(62)");
  BAD(dots_inst, OV({"layer_types", "\"full_attention\""}), "\"layer_types\"");
  BAD2(dots_inst, OV({"sliding_window", "4096"}, {"max_window_layers", "null"}), "\"max_window_layers\" is null",
       "4096");
  BAD(dots_inst, OV({"sliding_window", "0"}), "\"sliding_window\"");
  /* head_dim, when given, is read (Dots1Attention: getattr(config, "head_dim", ...)); num_local_experts names
   * n_routed_experts (Dots1Config.attribute_map) */
  CHECK_OK(PARSE(dots_inst, OV({"head_dim", "64"}, {"n_routed_experts", NULL}, {"num_local_experts", "64"},
                               {"n_group", "8"}, {"topk_group", "4"}), &c));
  CHECK(c.head_dim == 64 && c.rotary_dim == 64 && c.n_routed_experts == 64 && c.n_group == 8 && c.topk_group == 4);
  CHECK_OK(PARSE(dots_inst, OV({"n_shared_experts", "0"}), &c));
  CHECK(c.n_shared_experts == 0); /* a shared MLP of width 0 adds nothing */

  /* Refusals, one line each naming the field. */
  BAD2(dots_inst, OV({"attention_bias", "true"}), "\"attention_bias\"", "o_proj");
  BAD2(dots_inst, OV({"head_dim", "null"}), "\"head_dim\" is null", "Dots1Attention");
  BAD(dots_inst, OV({"n_shared_experts", NULL}), "\"n_shared_experts\"");
  BAD(dots_inst, OV({"n_shared_experts", "null"}), "\"n_shared_experts\"");
  BAD(dots_inst, OV({"n_routed_experts", NULL}), "\"n_routed_experts\"");
  BAD(dots_inst, OV({"num_experts_per_tok", NULL}), "\"num_experts_per_tok\"");
  BAD2(dots_inst, OV({"num_experts_per_tok", "1"}), "\"norm_topk_prob\"", "num_experts_per_tok 1");
  CHECK_OK(PARSE(dots_inst, OV({"num_experts_per_tok", "1"}, {"norm_topk_prob", "false"}), &c));
  /* The same rule for every family whose transformers router divides by the top-1 sum (weight 1), where
   * the MoE op gives the expert its score: Qwen3-MoE and GLM-4.5 too; Mixtral's top-k softmax is 1 anyway. */
  BAD2(qwen3_moe, OV({"num_experts_per_tok", "1"}), "\"norm_topk_prob\"", "num_experts_per_tok 1");
  CHECK_OK(PARSE(qwen3_moe, OV({"num_experts_per_tok", "1"}, {"norm_topk_prob", "false"}), &c));
  BAD2(glm45_air, OV({"num_experts_per_tok", "1"}), "\"norm_topk_prob\"", "num_experts_per_tok 1");
  BAD2(dots_inst, OV({"n_group", "4"}, {"topk_group", "null"}), "\"topk_group\" is null", "n_group 4");
  BAD2(dots_inst, OV({"n_group", "3"}), "\"n_group\" (3)", "n_routed_experts (128)");
  BAD2(dots_inst, OV({"n_group", "8"}, {"topk_group", "9"}), "\"topk_group\" (9)", "n_group (8)");
  BAD2(dots_inst, OV({"n_group", "64"}, {"topk_group", "2"}), "\"num_experts_per_tok\" (6)", "(4)");
  BAD(dots_inst, OV({"first_k_dense_replace", "null"}), "\"first_k_dense_replace\"");
  BAD2(dots_inst, OV({"moe_layer_freq", "2"}), "\"moe_layer_freq\" is 2", "first_k_dense_replace");
  BAD(dots_inst, OV({"moe_layer_freq", "0"}), "\"moe_layer_freq\"");
  BAD(dots_inst, OV({"scoring_func", "\"softmax\""}), "\"scoring_func\"");
  BAD(dots_inst, OV({"topk_method", "\"greedy\""}), "\"topk_method\"");
  BAD(dots_inst, OV({"hidden_act", "\"gelu\""}), "\"hidden_act\"");
  BAD(dots_inst, OV({"partial_rotary_factor", "0.5"}), "\"partial_rotary_factor\"");
  BAD(dots_inst, OV({"rope_scaling", "{\"rope_type\": \"dynamic\", \"factor\": 2.0}"}), "\"rope_scaling.rope_type\"");
  BAD(dots_inst, OV({"num_key_value_heads", "5"}), "\"num_key_value_heads\"");
  BAD(dots_inst, OV({"rope_interleave", "true"}), "\"rope_interleave\"");
}

/* mistralai/Mistral-7B-Instruct-v0.3's config.json (sliding_window null). */
static const kv mistral[] = {
    {"architectures", "[\"MistralForCausalLM\"]"}, {"model_type", "\"mistral\""}, {"hidden_size", "4096"},
    {"num_hidden_layers", "32"}, {"num_attention_heads", "32"}, {"num_key_value_heads", "8"},
    {"intermediate_size", "14336"}, {"vocab_size", "32768"}, {"max_position_embeddings", "32768"},
    {"rms_norm_eps", "1e-05"}, {"rope_theta", "1000000.0"}, {"sliding_window", "null"}, {"hidden_act", "\"silu\""},
    {"tie_word_embeddings", "false"}, {"torch_dtype", "\"bfloat16\""}, {"transformers_version", "\"4.42.0.dev0\""},
};

/* MistralForCausalLM runs as Llama's layout (MistralAttention: q/k/v/o without biases, the Llama
 * MLP), every layer sliding by sliding_window when it is set. */
static void test_mistral(void) {
  pz_model_config c;
  CHECK_OK(PARSE(mistral, NONE, &c));
  CHECK(!strcmp(c.model_type, "mistral") && c.attn == PZ_ATTN_GQA);
  CHECK(c.hidden_size == 4096 && c.num_hidden_layers == 32 && c.num_attention_heads == 32 && c.num_key_value_heads == 8);
  CHECK(c.head_dim == 128 && c.intermediate_size == 14336 && c.vocab_size == 32768 && c.max_position_embeddings == 32768);
  CHECK(c.rms_norm_eps == 1e-5f && c.rope.theta == 1e6f && c.rope.type == PZ_ROPE_DEFAULT && c.rope.factor == 1.f);
  CHECK(!c.attention_bias && !c.qk_norm && !c.tie_word_embeddings && c.n_routed_experts == 0);
  for (int L = 0; L < 32; L++) CHECK(!pz_config_layer_is_moe(&c, L));
  WINDOWS(&c, 0, all('F', 32)); /* sliding_window null */
  /* MistralConfig defaults: num_key_value_heads 8, rms_norm_eps 1e-6, rope_theta 10000, head_dim
   * hidden / heads; attention_bias and mlp_bias are not fields of MistralConfig (never biases). */
  CHECK_OK(PARSE(mistral, OV({"num_key_value_heads", NULL}, {"rms_norm_eps", NULL}, {"rope_theta", NULL},
                             {"attention_bias", "true"}, {"mlp_bias", "true"}), &c));
  CHECK(c.num_key_value_heads == 8 && c.rms_norm_eps == 1e-6f && c.rope.theta == 10000.f && !c.attention_bias);
  CHECK_OK(PARSE(mistral, OV({"num_key_value_heads", "null"}), &c));
  CHECK(c.num_key_value_heads == 32);
  /* Mistral-Nemo: head_dim 128 with hidden 5120 / 32 heads. */
  CHECK_OK(PARSE(mistral, OV({"hidden_size", "5120"}, {"head_dim", "128"}, {"vocab_size", "131072"}), &c));
  CHECK(c.head_dim == 128 && c.hidden_size == 5120);
  /* MistralModel puts its one sliding mask on every layer: Mistral-7B-v0.1's 4096 window under 32768 positions
   * (which stay 32768), MistralConfig's 4096 when the field is absent; a window of the whole context or more is
   * kept here and dropped by the decode graph. */
  CHECK_OK(PARSE(mistral, OV({"sliding_window", "4096"}), &c));
  CHECK(c.max_position_embeddings == 32768 && c.sliding_window == 4096);
  WINDOWS(&c, 4096, all('S', 32));
  CHECK_OK(PARSE(mistral, OV({"sliding_window", NULL}), &c));
  WINDOWS(&c, 4096, all('S', 32));
  CHECK_OK(PARSE(mistral, OV({"sliding_window", "131072"}), &c));
  WINDOWS(&c, 131072, all('S', 32));
  /* With layer_types, transformers' AutoConfig reads a mistral config.json as ministral, whose model slides the
   * layers listed as "sliding_attention" only (all full: no window at all; a mix alternates, as Ministral-8B);
   * sliding layers without a window, a wrong length and a window of 0 are refused */
  CHECK_OK(PARSE(mistral, OV({"sliding_window", "16"}, {"num_hidden_layers", "2"},
                             {"layer_types", "[\"full_attention\", \"full_attention\"]"}), &c));
  WINDOWS(&c, 0, "FF");
  CHECK_OK(PARSE(mistral, OV({"sliding_window", "16"}, {"num_hidden_layers", "2"},
                             {"layer_types", "[\"sliding_attention\", \"sliding_attention\"]"}), &c));
  WINDOWS(&c, 16, "SS");
  CHECK_OK(PARSE(mistral, OV({"sliding_window", "16"}, {"num_hidden_layers", "3"},
                             {"layer_types", "[\"full_attention\", \"sliding_attention\", \"full_attention\"]"}), &c));
  WINDOWS(&c, 16, "FSF");
  CHECK_OK(PARSE(mistral, OV({"sliding_window", NULL}, {"num_hidden_layers", "2"},
                             {"layer_types", "[\"full_attention\", \"sliding_attention\"]"}), &c));
  WINDOWS(&c, 4096, "FS"); /* MinistralConfig's default window, as MistralConfig's */
  BAD2(mistral, OV({"sliding_window", "16"}, {"num_hidden_layers", "2"}, {"layer_types", "[\"full_attention\"]"}),
       "\"layer_types\" has 1 entries", "(2)");
  BAD2(mistral, OV({"num_hidden_layers", "2"}, {"layer_types", "[\"sliding_attention\", \"sliding_attention\"]"}),
       "\"layer_types\"", "sliding_window is null");
  BAD2(mistral, OV({"sliding_window", "0"}), "\"sliding_window\" is 0", "every key");
  BAD(mistral, OV({"hidden_act", "\"gelu\""}), "hidden_act");
  BAD(mistral, OV({"num_key_value_heads", "5"}), "num_key_value_heads");
  /* YaRN without original_max_position_embeddings: max_position_embeddings (32768) is the original. */
  CHECK_OK(PARSE(mistral, OV({"rope_scaling", "{\"type\": \"yarn\", \"factor\": 4.0}"}), &c));
  CHECK(c.rope.type == PZ_ROPE_YARN && c.rope.factor == 4.f && c.rope.original_max_position_embeddings == 32768);
}

/* Which layers slide, as transformers 5.25 places them: Qwen2 / Qwen3 by use_sliding_window with layer_types or
 * else max_window_layers (Qwen2Config / Qwen3Config __post_init__), Qwen3-MoE and Mixtral every layer (their models'
 * one sliding mask), Llama none (LlamaConfig has no window); the refusals name the field. Mistral, Phi-3 and
 * dots.llm1: test_mistral, test_phi3, test_dots1. */
static void test_sliding_windows(void) {
  pz_model_config c;
  CHECK_OK(PARSE(qwen2, NONE, &c)); /* use_sliding_window false */
  WINDOWS(&c, 0, "FFFFF");
  CHECK_OK(PARSE(qwen2, OV({"use_sliding_window", "true"}), &c)); /* max_window_layers 70 of 5 layers: none */
  WINDOWS(&c, 0, "FFFFF");
  CHECK_OK(PARSE(qwen2, OV({"use_sliding_window", "true"}, {"max_window_layers", "3"}), &c));
  WINDOWS(&c, 131072, "FFFSS");
  CHECK(c.max_position_embeddings == 4096);
  CHECK_OK(PARSE(qwen2, OV({"use_sliding_window", "true"}, {"max_window_layers", "3"}, {"sliding_window", "1024"}), &c));
  WINDOWS(&c, 1024, "FFFSS");
  /* Qwen2Config's defaults: sliding_window 4096, max_window_layers 28 */
  CHECK_OK(PARSE(qwen2, OV({"use_sliding_window", "true"}, {"max_window_layers", NULL}, {"sliding_window", NULL}), &c));
  WINDOWS(&c, 0, "FFFFF");
  CHECK_OK(PARSE(qwen2, OV({"use_sliding_window", "true"}, {"max_window_layers", NULL}, {"sliding_window", NULL},
                           {"num_hidden_layers", "30"}), &c));
  char pat[136];
  snprintf(pat, sizeof pat, "%sSS", all('F', 28));
  WINDOWS(&c, 4096, pat);
  CHECK_OK(PARSE(qwen2, OV({"use_sliding_window", "true"}, {"sliding_window", "null"}, {"max_window_layers", "0"}), &c));
  WINDOWS(&c, 0, "FFFFF");
  /* layer_types places the layers (max_window_layers is then not read) */
  static const char *const lt5 = "[\"sliding_attention\", \"full_attention\", \"sliding_attention\", "
                                 "\"full_attention\", \"full_attention\"]";
  CHECK_OK(PARSE(qwen2, OV({"use_sliding_window", "true"}, {"sliding_window", "64"}, {"layer_types", lt5}), &c));
  WINDOWS(&c, 64, "SFSFF");
  CHECK_OK(PARSE(qwen2, OV({"use_sliding_window", "true"}, {"sliding_window", "64"}, {"layer_types", lt5},
                           {"max_window_layers", "null"}), &c));
  WINDOWS(&c, 64, "SFSFF");
  /* use_sliding_window false: sliding_window is not a window (also 0); sliding layers then have none */
  CHECK_OK(PARSE(qwen2, OV({"sliding_window", "0"}), &c));
  WINDOWS(&c, 0, "FFFFF");
  BAD2(qwen2, OV({"layer_types", lt5}), "\"layer_types\" has \"sliding_attention\" layers", "use_sliding_window is false");
  BAD2(qwen2, OV({"use_sliding_window", "true"}, {"sliding_window", "null"}, {"layer_types", lt5}), "\"layer_types\"",
       "sliding_window is null");
  BAD2(qwen2, OV({"use_sliding_window", "true"}, {"max_window_layers", "null"}), "\"max_window_layers\" is null",
       "131072");
  BAD2(qwen2, OV({"use_sliding_window", "true"}, {"sliding_window", "0"}), "\"sliding_window\" is 0", "every key");
  BAD2(qwen2, OV({"use_sliding_window", "true"}, {"layer_types", "[\"sliding_attention\", \"full_attention\"]"}),
       "\"layer_types\" has 2 entries", "(5)");
  BAD2(qwen2, OV({"use_sliding_window", "true"},
                 {"layer_types", "[\"chunked_attention\", \"full_attention\", \"full_attention\", \"full_attention\", "
                                 "\"full_attention\"]"}), "\"layer_types\"", "\"sliding_attention\"");
  BAD(qwen2, OV({"use_sliding_window", "true"}, {"layer_types", "\"sliding_attention\""}), "\"layer_types\"");
  /* Qwen3: Qwen2's rule */
  CHECK_OK(PARSE(qwen3, OV({"use_sliding_window", "true"}, {"sliding_window", "512"}, {"max_window_layers", "2"}), &c));
  WINDOWS(&c, 512, "FFSS");
  CHECK_OK(PARSE(qwen3, OV({"use_sliding_window", "true"}), &c)); /* sliding_window null */
  WINDOWS(&c, 0, "FFFF");
  /* Qwen3-MoE: every layer under use_sliding_window (Qwen3MoeConfig has no max_window_layers or layer_types) */
  CHECK_OK(PARSE(qwen3_moe, OV({"use_sliding_window", "true"}), &c));
  WINDOWS(&c, 4096, "SSSSSS");
  CHECK_OK(PARSE(qwen3_moe, OV({"use_sliding_window", "true"}, {"sliding_window", "256"}, {"max_window_layers", "3"}), &c));
  WINDOWS(&c, 256, "SSSSSS");
  CHECK_OK(PARSE(qwen3_moe, OV({"sliding_window", "256"}), &c));
  WINDOWS(&c, 0, "FFFFFF");
  BAD2(qwen3_moe, OV({"use_sliding_window", "true"},
                     {"layer_types", "[\"sliding_attention\", \"full_attention\", \"full_attention\", "
                                     "\"full_attention\", \"full_attention\", \"full_attention\"]"}),
       "\"layer_types\" mixes", "qwen3_moe");
  /* Mixtral: every layer, MixtralConfig's default null */
  CHECK_OK(PARSE(mixtral, OV({"sliding_window", "4096"}), &c));
  WINDOWS(&c, 4096, "SSSS");
  CHECK(c.max_position_embeddings == 32768);
  CHECK_OK(PARSE(mixtral, OV({"sliding_window", NULL}), &c));
  WINDOWS(&c, 0, "FFFF");
  /* Llama: none; a window the context covers says nothing */
  CHECK_OK(PARSE(llama, OV({"sliding_window", "4096"}), &c));
  WINDOWS(&c, 0, "FFF");
  BAD2(llama, OV({"layer_types", "[\"sliding_attention\", \"full_attention\", \"full_attention\"]"}),
       "\"layer_types\"", "no sliding layers");
}

static void test_refusals(void) {
  pz_model_config c;
  /* Shapes. */
  BAD(llama, OV({"num_key_value_heads", "5"}), "num_key_value_heads");
  BAD(mixtral, OV({"num_key_value_heads", "32"}), "num_key_value_heads"); /* more kv heads than heads */
  BAD(qwen3, OV({"head_dim", "63"}), "head_dim");
  BAD(llama, OV({"hidden_size", "390"}), "head_dim"); /* 390 / 12 heads: no even split, no head_dim */
  BAD(llama, OV({"head_dim", "0"}), "head_dim");
  /* Sliding windows (the ones that run: test_sliding_windows). */
  BAD2(llama, OV({"sliding_window", "2047"}), "\"sliding_window\" is 2047", "no sliding window in transformers");
  BAD(qwen3, OV({"layer_types", "[\"full_attention\", \"sliding_attention\"]"}), "layer_types");
  /* Activation, biases. */
  BAD(llama, OV({"hidden_act", "\"gelu\""}), "hidden_act");
  BAD(qwen2, OV({"hidden_act", "\"gelu_pytorch_tanh\""}), "hidden_act");
  BAD(mixtral, OV({"hidden_act", "\"relu\""}), "hidden_act");
  BAD(llama, OV({"mlp_bias", "true"}), "mlp_bias");
  /* MoE. */
  BAD(qwen3_moe, OV({"mlp_only_layers", "[6]"}), "mlp_only_layers");
  BAD(qwen3_moe, OV({"mlp_only_layers", "[-1]"}), "mlp_only_layers");
  BAD(qwen3_moe, OV({"mlp_only_layers", "[1.5]"}), "mlp_only_layers");
  BAD(qwen3_moe, OV({"mlp_only_layers", "3"}), "mlp_only_layers");
  {
    char many[600] = "[";
    for (int i = 0; i <= PZ_CONFIG_MAX_MLP_ONLY; i++) snprintf(many + strlen(many), sizeof many - strlen(many), "%s0", i ? "," : "");
    strcat(many, "]");
    BAD(qwen3_moe, OV({"mlp_only_layers", many}), "mlp_only_layers");
  }
  BAD(qwen3_moe, OV({"decoder_sparse_step", "0"}), "decoder_sparse_step");
  BAD(qwen3_moe, OV({"num_experts_per_tok", "17"}), "num_experts_per_tok");
  BAD(qwen3_moe, OV({"num_experts_per_tok", "0"}), "num_experts_per_tok");
  BAD(mixtral, OV({"num_experts_per_tok", "9"}), "num_experts_per_tok");
  BAD(mixtral, OV({"num_local_experts", "0"}), "num_local_experts");
  BAD(qwen3_moe, OV({"num_experts", NULL}), "num_experts");
  BAD(qwen3_moe, OV({"moe_intermediate_size", NULL}), "moe_intermediate_size");
  BAD(mixtral, OV({"num_local_experts", NULL}), "num_local_experts");
  /* rope_scaling: default, llama3 and yarn. YaRN as Qwen2.5 / Qwen3 document it for long context, read as
     transformers 5 reads it (parse_gqa_yarn): beta 32 / 1, the cos/sin factor from factor alone. */
  CHECK_OK(PARSE(qwen2, OV({"rope_scaling", "{\"type\": \"yarn\", \"factor\": 4.0, \"original_max_position_embeddings\": 32768}"}),
                 &c));
  CHECK(c.rope.type == PZ_ROPE_YARN && c.rope.factor == 4.f && c.rope.original_max_position_embeddings == 32768 &&
        c.rope.beta_fast == 32.f && c.rope.beta_slow == 1.f && c.rope.mscale == 1.f && c.rope.mscale_all_dim == 0.f);
  CHECK(pz_ref_yarn_cos_sin_mscale(&c.rope) == (float)(0.1 * log(4.0) + 1.0));
  /* factor null: max_position_embeddings / original (4096 / 1024); null and 0 betas are the defaults; mscale
     without mscale_all_dim is not used (transformers needs both); the top-level original wins */
  CHECK_OK(PARSE(qwen3, OV({"rope_scaling", "{\"rope_type\": \"yarn\", \"factor\": null, \"beta_fast\": null, "
                                            "\"beta_slow\": 0, \"mscale\": 0.707, \"original_max_position_embeddings\": 1024}"},
                           {"max_position_embeddings", "4096"}), &c));
  CHECK(c.rope.type == PZ_ROPE_YARN && c.rope.factor == 4.f && c.rope.beta_fast == 32.f && c.rope.beta_slow == 1.f &&
        c.rope.mscale == 1.f && c.rope.mscale_all_dim == 0.f);
  CHECK_OK(PARSE(qwen3, OV({"rope_scaling", "{\"rope_type\": \"yarn\", \"factor\": 2.0, \"beta_fast\": 16, "
                                            "\"mscale\": 0.5, \"mscale_all_dim\": 0.25, \"truncate\": true, "
                                            "\"original_max_position_embeddings\": 1024}"},
                           {"original_max_position_embeddings", "512"}), &c));
  CHECK(c.rope.factor == 2.f && c.rope.beta_fast == 16.f && c.rope.original_max_position_embeddings == 512 &&
        c.rope.mscale == 0.5f && c.rope.mscale_all_dim == 0.25f);
  BAD(qwen3, OV({"rope_scaling", "{\"rope_type\": \"yarn\", \"factor\": 4.0, \"attention_factor\": 1.2}"}),
      "\"rope_scaling.attention_factor\" is not supported");
  BAD(qwen3, OV({"rope_scaling", "{\"rope_type\": \"yarn\", \"factor\": 4.0, \"truncate\": false}"}),
      "\"rope_scaling.truncate\" false is not supported");
  BAD(qwen3, OV({"rope_scaling", "{\"rope_type\": \"yarn\", \"factor\": 0.5}"}), "\"rope_scaling.factor\" is 0.5, must be >= 1");
  BAD(qwen3, OV({"rope_scaling", "{\"rope_type\": \"yarn\"}"}), "\"rope_scaling.factor\" is missing");
  BAD(qwen3, OV({"rope_scaling", "{\"rope_type\": \"yarn\", \"factor\": 4.0, \"beta_slow\": -1}"}), "must be > 0");
  BAD(qwen2, OV({"rope_scaling", "{\"type\": \"dynamic\", \"factor\": 4.0}"}),
      "\"rope_scaling.type\" is \"dynamic\""); /* the message names the key the file used */
  BAD2(qwen3, OV({"rope_scaling", "{\"rope_type\": \"dynamic\", \"factor\": 2.0}"}), "rope_scaling", "dynamic");
  BAD2(mixtral, OV({"rope_scaling", "{\"type\": \"linear\", \"factor\": 2.0}"}), "rope_scaling", "linear");
  BAD2(llama, OV({"rope_scaling", "{\"rope_type\": \"longrope\", \"short_factor\": [1], \"long_factor\": [1]}"}),
       "rope_scaling", "longrope");
  BAD(llama, OV({"rope_scaling", "{\"factor\": 8.0}"}), "rope_scaling.rope_type");
  BAD(llama, OV({"rope_scaling", "\"llama3\""}), "rope_scaling");
  BAD(llama, OV({"rope_scaling", "{\"rope_type\": \"llama3\", \"type\": \"yarn\", \"factor\": 8.0, "
                                 "\"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0, "
                                 "\"original_max_position_embeddings\": 8192}"}), "rope_scaling");
  static const char *const l3[4] = {"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"};
  for (int drop = 0; drop < 4; drop++) {
    char rs[300], want[80];
    snprintf(rs, sizeof rs, "{\"rope_type\": \"llama3\"");
    static const char *const v[4] = {"8.0", "1.0", "4.0", "8192"};
    for (int i = 0; i < 4; i++)
      if (i != drop) snprintf(rs + strlen(rs), sizeof rs - strlen(rs), ", \"%s\": %s", l3[i], v[i]);
    strcat(rs, "}");
    snprintf(want, sizeof want, "rope_scaling.%s", l3[drop]);
    BAD(llama, OV({"rope_scaling", rs}), want);
  }
  BAD(llama, OV({"rope_scaling", "{\"rope_type\": \"llama3\", \"factor\": 8.0, \"low_freq_factor\": 4.0, "
                                 "\"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 8192}"}),
      "high_freq_factor");
  BAD(llama, OV({"rope_scaling", "{\"rope_type\": \"llama3\", \"factor\": 0.5, \"low_freq_factor\": 1.0, "
                                 "\"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 8192}"}),
      "rope_scaling.factor");
  BAD(llama, OV({"rope_scaling", "{\"rope_type\": \"llama3\", \"factor\": \"8\", \"low_freq_factor\": 1.0, "
                                 "\"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 8192}"}),
      "rope_scaling.factor");
  BAD(llama, OV({"rope_parameters", "{\"rope_type\": \"default\", \"rope_theta\": 10000.0}"}), "rope_parameters");
  BAD(llama, OV({"rope_scaling", "{\"rope_type\": \"default\", \"rope_type\": \"llama3\"}"}), "appears twice");
  /* The DeepSeek path's checks: missing field, wrong type, duplicate key, bad values, JSON. */
  BAD(llama, OV({"vocab_size", NULL}), "vocab_size");
  BAD(qwen3, OV({"max_position_embeddings", NULL}), "max_position_embeddings");
  BAD(mixtral, OV({"hidden_size", "\"4096\""}), "hidden_size");
  BAD(qwen2, OV({"num_hidden_layers", "2.5"}), "num_hidden_layers");
  BAD(qwen2, OV({"num_hidden_layers", "10001"}), "num_hidden_layers");
  BAD(qwen3, OV({"intermediate_size", "4294967296"}), "intermediate_size");
  BAD(llama, OV({"rms_norm_eps", "0"}), "rms_norm_eps");
  BAD(llama, OV({"rope_theta", "1e999"}), "rope_theta");
  BAD(llama, OV({"rope_theta", "-1"}), "rope_theta");
  BAD(qwen3, OV({"tie_word_embeddings", "1"}), "tie_word_embeddings");
  BAD(qwen3, OV({"attention_bias", "\"no\""}), "attention_bias");
  BAD(qwen3_moe, OV({"norm_topk_prob", "null"}), "norm_topk_prob");
  BAD(qwen2, OV({"use_sliding_window", "0"}), "use_sliding_window");
  BAD(mixtral, OV({"sliding_window", "\"4096\""}), "sliding_window");
  BAD(qwen3, OV({"num_key_value_heads", "0"}), "num_key_value_heads");
  {
    pz_model_config c;
    make(text, sizeof text, qwen3, (int)(sizeof qwen3 / sizeof qwen3[0]), NULL);
    char dup[8300];
    snprintf(dup, sizeof dup, "%.*s, \"hidden_size\": 64}", (int)strlen(text) - 1, text);
    CHECK_ST(pz_config_parse(dup, strlen(dup), "dup", &c), PZ_ERR_CONFIG);
    CHECK(strstr(pz_last_error(), "\"hidden_size\" appears twice") != NULL);
    for (size_t cut = 0; cut + 1 < strlen(text); cut += 7) { /* truncated JSON */
      CHECK_ST(pz_config_parse(text, cut, "cut", &c), PZ_ERR_CONFIG);
      CHECK(strstr(pz_last_error(), "JSON") != NULL || strstr(pz_last_error(), "top level") != NULL);
    }
  }
  /* Another family: named, with the supported ones. */
  BAD2(llama, OV({"model_type", "\"gemma\""}), "\"gemma\"", "qwen3_moe");
  BAD2(qwen2, OV({"model_type", "\"qwen2_moe\""}), "\"qwen2_moe\"", "DeepSeek-V2 family");
}

/* ------------------------------------------------------------------ llama3 RoPE */

/* transformers' _compute_llama3_parameters in long double; *branch: 0 high frequency (unchanged),
 * 1 the smooth band, 2 low frequency (divided by factor). */
static long double llama3_ref(long double theta, int dim, int i, long double factor, long double lo, long double hi,
                              long double orig, int *branch) {
  const long double pi = 3.141592653589793238462643383279502884L;
  long double f = powl(theta, -(long double)(2 * i) / (long double)dim);
  long double wavelen = 2 * pi / f;
  if (wavelen < orig / hi) { *branch = 0; return f; }
  if (wavelen > orig / lo) { *branch = 2; return f / factor; }
  *branch = 1;
  long double s = (orig / wavelen - lo) / (hi - lo);
  return (1 - s) * f / factor + s * f;
}

/* pz_rope_inv_freq of c's rope at width d against llama3_ref; counts per branch into n[3]. */
static void check_llama3(const pz_rope_params *rp, int d, int n[3]) {
  float got[256];
  pz_rope_inv_freq(rp, d, got);
  n[0] = n[1] = n[2] = 0;
  for (int i = 0; i < d / 2; i++) {
    int b;
    long double want = llama3_ref(rp->theta, d, i, rp->factor, rp->low_freq_factor, rp->high_freq_factor,
                                  (long double)rp->original_max_position_embeddings, &b);
    n[b]++;
    /* One rounding to f32 (the library computes in double): within an ulp of the long double value. */
    if (!(fabsl((long double)got[i] - want) <= want * 0x1p-23L)) {
      fprintf(stderr, "llama3 inv_freq d=%d i=%d (branch %d): %.9g, want %.12Lg\n", d, i, b, got[i], want);
      pz_test_failures++;
    }
  }
}

static void test_llama3_rope(void) {
  /* tiny_llama: theta 1e4, d 16, factor 4, low 1, high 4, orig 128 -> wavelengths 2*pi*10^(i/2):
   * 6.3, 19.9 below orig/high = 32 (unchanged), 62.8 in the band, 199 .. 19869 above orig/low = 128. */
  pz_model_config c;
  CHECK_OK(pz_config_load("tiny_llama", &c));
  int n[3];
  check_llama3(&c.rope, (int)c.head_dim, n);
  CHECK(n[0] == 2 && n[1] == 1 && n[2] == 5);
  float f[8];
  pz_rope_inv_freq(&c.rope, 16, f);
  CHECK(f[0] == 1.0f);                                       /* high frequency: theta^0 */
  CHECK(f[1] == (float)powl(10000.0L, -0.125L));             /* high frequency, unchanged */
  CHECK(f[7] == (float)(powl(10000.0L, -0.875L) / 4.0L));    /* low frequency / factor */
  long double f2 = powl(10000.0L, -0.25L), s = (128.0L * f2 / (2 * 3.141592653589793238462643383279502884L) - 1) / 3;
  CHECK(s > 0 && s < 1);
  CHECK_NEAR(f[2], (double)((1 - s) * f2 / 4 + s * f2), 1e-7 * (double)f2); /* the smooth middle */
  CHECK(f[2] < (float)f2 && f[2] > (float)(f2 / 4));
  /* Llama 3.1 8B: theta 5e5, d 128, orig 8192: every branch occurs. */
  CHECK_OK(pz_config_load("llama3_1_8b", &c));
  check_llama3(&c.rope, (int)c.head_dim, n);
  CHECK(n[0] > 0 && n[1] > 0 && n[2] > 0 && n[0] + n[1] + n[2] == 64);
  printf("llama3_1_8b inv_freq: %d unchanged, %d smoothed, %d divided by %g\n", n[0], n[1], n[2], (double)c.rope.factor);
  /* DEFAULT (qwen3): theta^(-2i/d). */
  CHECK_OK(pz_config_load("qwen3_32b", &c));
  float q[64];
  pz_rope_inv_freq(&c.rope, 128, q);
  for (int i = 0; i < 64; i++) {
    long double want = powl(1e6L, -(long double)(2 * i) / 128.0L);
    if (!(fabsl((long double)q[i] - want) <= want * 0x1p-23L)) {
      fprintf(stderr, "default inv_freq i=%d: %.9g, want %.12Lg\n", i, q[i], want);
      pz_test_failures++;
    }
  }
}

/* ------------------------------------------------------------------ DeepSeek family */

static void test_deepseek(void) {
  pz_model_config c;
  CHECK_OK(pz_config_load("kimi_k2", &c));
  CHECK(c.attn == PZ_ATTN_MLA && !strcmp(c.model_type, "kimi_k2") && c.rope.type == PZ_ROPE_YARN);
  CHECK(c.rope.factor == 32.f && c.kv_lora_rank == 512 && c.n_routed_experts == 384 && c.decoder_sparse_step == 0);
  CHECK(c.num_key_value_heads == 0 && c.head_dim == 0 && !c.qk_norm && !c.attention_bias);
  CHECK(!pz_config_layer_is_moe(&c, 0) && pz_config_layer_is_moe(&c, 1) && pz_config_layer_is_moe(&c, 60));
  CHECK_OK(pz_config_load("deepseek_v3", &c));
  CHECK(c.attn == PZ_ATTN_MLA && !strcmp(c.model_type, "deepseek_v3") && c.rope.type == PZ_ROPE_YARN);
  CHECK(!pz_config_layer_is_moe(&c, 2) && pz_config_layer_is_moe(&c, 3)); /* first_k_dense_replace 3 */
  CHECK_OK(pz_config_load("deepseek_v2_lite", &c));
  CHECK(c.attn == PZ_ATTN_MLA && c.q_lora_rank == 0);
  CHECK_OK(pz_config_load("kimi_k25", &c));
  CHECK(c.attn == PZ_ATTN_MLA && c.text_config && c.rope.type == PZ_ROPE_YARN);
  CHECK_OK(pz_config_load("tiny", &c));
  CHECK(c.attn == PZ_ATTN_MLA && c.rope.type == PZ_ROPE_YARN && !strcmp(c.model_type, "tiny_deepseek_v3"));
  /* No model_type: the DeepSeek family; rope_scaling null: DEFAULT. */
  static const char v2[] =
      "{\"hidden_size\": 64, \"num_hidden_layers\": 2, \"num_attention_heads\": 2, \"q_lora_rank\": null, "
      "\"kv_lora_rank\": 32, \"qk_nope_head_dim\": 16, \"qk_rope_head_dim\": 16, \"v_head_dim\": 16, "
      "\"n_routed_experts\": 4, \"num_experts_per_tok\": 2, \"moe_intermediate_size\": 32, "
      "\"intermediate_size\": 128, \"vocab_size\": 256, \"max_position_embeddings\": 256, \"rope_scaling\": null}";
  CHECK_OK(pz_config_parse(v2, strlen(v2), "v2", &c));
  CHECK(c.attn == PZ_ATTN_MLA && c.model_type[0] == 0 && c.rope.type == PZ_ROPE_DEFAULT && c.rope.factor == 1.f);
  CHECK(c.decoder_sparse_step == 0 && pz_config_layer_is_moe(&c, 0) && pz_config_layer_is_moe(&c, 1));
  /* A DeepSeek config keeps the DeepSeek rules: rope_scaling llama3 is refused there. */
  static const char v3l3[] =
      "{\"model_type\": \"deepseek_v3\", \"hidden_size\": 64, \"num_hidden_layers\": 2, \"num_attention_heads\": 2, "
      "\"q_lora_rank\": null, \"kv_lora_rank\": 32, \"qk_nope_head_dim\": 16, \"qk_rope_head_dim\": 16, "
      "\"v_head_dim\": 16, \"n_routed_experts\": 4, \"num_experts_per_tok\": 2, \"moe_intermediate_size\": 32, "
      "\"intermediate_size\": 128, \"vocab_size\": 256, \"max_position_embeddings\": 256, \"rope_scaling\": "
      "{\"rope_type\": \"llama3\", \"factor\": 8.0, \"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0, "
      "\"original_max_position_embeddings\": 64}}";
  CHECK_ST(pz_config_parse(v3l3, strlen(v3l3), "v3l3", &c), PZ_ERR_CONFIG);
  CHECK(strstr(pz_last_error(), "rope_scaling") != NULL);
}

int main(void) {
  test_presets();
  test_llama();
  test_qwen();
  test_moe();
  test_mistral();
  test_glm4_moe();
  test_phi3();
  test_phi3_longrope();
  test_dots1();
  test_sliding_windows();
  test_refusals();
  test_llama3_rope();
  test_deepseek();
  TEST_DONE();
}
