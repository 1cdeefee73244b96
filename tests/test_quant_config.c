/* quantization_config: the kimi_k25 preset (text_config-wrapped, compressed-tensors INT4 group 32
 * routed experts), fp8 block configs, the targets / ignore rule, and every unsupported scheme as
 * a one-line PZ_ERR_CONFIG naming the field. */
#include "model/builder.h"
#include "model/config.h"
#include "pz_test.h"
#include <string.h>

/* A small valid DeepSeek config with `quant` as its quantization_config (NULL: none). */
static pz_status parse_with(const char *quant, pz_model_config *c) {
  static char text[8192];
  snprintf(text, sizeof text,
           "{\"hidden_size\": 64, \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"q_lora_rank\": 32,"
           " \"kv_lora_rank\": 32, \"qk_nope_head_dim\": 16, \"qk_rope_head_dim\": 8, \"v_head_dim\": 16,"
           " \"n_routed_experts\": 8, \"num_experts_per_tok\": 2, \"moe_intermediate_size\": 64,"
           " \"intermediate_size\": 128, \"vocab_size\": 256, \"max_position_embeddings\": 512%s%s}",
           quant ? ", \"quantization_config\": " : "", quant ? quant : "");
  return pz_config_parse(text, strlen(text), "q.json", c);
}

/* A compressed-tensors config whose one group's weights are `weights` and ignore list `ignore`. */
static const char *ct(const char *weights, const char *extra) {
  static char q[4096];
  snprintf(q, sizeof q,
           "{\"quant_method\": \"compressed-tensors\", \"format\": \"pack-quantized\", \"config_groups\": {\"group_0\": "
           "{\"targets\": [\"Linear\"], \"input_activations\": null, \"weights\": %s}}, \"ignore\": [\"lm_head\", "
           "\"re:.*self_attn.*\"]%s}", weights, extra ? extra : "");
  return q;
}
#define W_OK "{\"num_bits\": 4, \"group_size\": 32, \"strategy\": \"group\", \"symmetric\": true, \"type\": \"int\", \"actorder\": null, \"dynamic\": false}"

static void expect_bad(const char *quant, const char *needle) {
  pz_model_config c;
  pz_status s = parse_with(quant, &c);
  if (s != PZ_ERR_CONFIG) {
    fprintf(stderr, "quant %s: got %s, want config error\n", quant, pz_status_string(s));
    pz_test_failures++;
  } else if (!strstr(pz_last_error(), needle) || strchr(pz_last_error(), '\n')) {
    fprintf(stderr, "quant %s: message '%s' does not name '%s' on one line\n", quant, pz_last_error(), needle);
    pz_test_failures++;
  }
}

int main(void) {
  pz_model_config c, k2;
  /* The preset: Kimi-K2's text model, wrapped, INT4 experts only. */
  CHECK_OK(pz_config_load("kimi_k25", &c));
  CHECK_OK(pz_config_load("kimi_k2", &k2));
  CHECK(!strcmp(c.name, "kimi_k25") && c.text_config && !k2.text_config);
  CHECK(c.hidden_size == k2.hidden_size && c.num_hidden_layers == 61 && c.n_routed_experts == 384 &&
        c.moe_intermediate_size == 2048 && c.intermediate_size == k2.intermediate_size &&
        c.num_attention_heads == k2.num_attention_heads && c.q_lora_rank == k2.q_lora_rank &&
        c.kv_lora_rank == k2.kv_lora_rank && c.vocab_size == k2.vocab_size &&
        c.num_experts_per_tok == 8 && c.first_k_dense_replace == 1 && c.topk_method == k2.topk_method);
  CHECK(c.quant.kind == PZ_WQ_INT4 && c.quant.num_bits == 4 && c.quant.group_size == 32);
  CHECK(k2.quant.kind == PZ_WQ_NONE);
  CHECK(c.quant.n_targets == 1 && !strcmp(c.quant.targets[0], "Linear") && c.quant.n_ignore == 6);
  const char *P = "language_model.model.layers.";
  char m[160];
  static const struct { const char *suffix; bool q; } mods[] = {
      {"1.mlp.experts.0.gate_proj", true}, {"60.mlp.experts.383.down_proj", true}, {"5.mlp.experts.7.up_proj", true},
      {"0.mlp.gate_proj", false}, {"0.mlp.down_proj", false}, {"3.mlp.shared_experts.up_proj", false},
      {"3.self_attn.q_a_proj", false}, {"3.self_attn.kv_b_proj", false}, {"3.self_attn.o_proj", false}};
  for (size_t i = 0; i < sizeof mods / sizeof mods[0]; i++) {
    snprintf(m, sizeof m, "%s%s", P, mods[i].suffix);
    if (pz_quant_applies(&c.quant, m) != mods[i].q) {
      fprintf(stderr, "pz_quant_applies(%s) != %d\n", m, mods[i].q);
      pz_test_failures++;
    }
  }
  CHECK(!pz_quant_applies(&c.quant, "language_model.lm_head"));
  CHECK(!pz_quant_applies(&k2.quant, "model.layers.1.mlp.experts.0.gate_proj"));

  /* Exact names, "re:" anchored at the start (re.match), targets other than Linear. An exact ignore name that
   * cannot name a routed expert ("lm_head") is not kept (the builder asks about routed experts only). */
  CHECK_OK(parse_with(ct(W_OK, NULL), &c));
  CHECK(c.quant.kind == PZ_WQ_INT4 && c.quant.n_ignore == 1 && !c.text_config);
  CHECK(!pz_quant_applies(&c.quant, "model.layers.1.self_attn.o_proj"));
  CHECK(pz_quant_applies(&c.quant, "model.layers.1.mlp.gate_proj"));
  CHECK_OK(parse_with("{\"quant_method\": \"compressed-tensors\", \"format\": \"pack-quantized\", \"config_groups\": "
                      "{\"g\": {\"targets\": [\"Linear\"], \"weights\": " W_OK "}}, \"ignore\": "
                      "[\"model.layers.1.mlp.experts.0.up_proj\", \"re:.*experts\\\\.1\\\\..*\"]}", &c));
  CHECK(c.quant.n_ignore == 2 && !pz_quant_applies(&c.quant, "model.layers.1.mlp.experts.0.up_proj") &&
        !pz_quant_applies(&c.quant, "x.model.layers.2.mlp.experts.1.up_proj"));
  CHECK(pz_quant_applies(&c.quant, "x.model.layers.1.mlp.experts.0.up_proj") && /* exact: the whole name */
        pz_quant_applies(&c.quant, "model.layers.1.mlp.experts.0.up_proj.x") &&
        pz_quant_applies(&c.quant, "model.layers.1.mlp.experts.2.up_proj"));
  CHECK_OK(parse_with("{\"quant_method\": \"compressed-tensors\", \"format\": \"pack-quantized\", \"config_groups\": "
                      "{\"g\": {\"targets\": [\"re:.*experts.*\"], \"weights\": " W_OK "}}}", &c));
  CHECK(pz_quant_applies(&c.quant, "model.layers.1.mlp.experts.0.up_proj"));
  CHECK(pz_quant_applies(&c.quant, "model.layers.1.mlp.shared_experts.up_proj")); /* ".*experts.*" matches it too */
  CHECK(!pz_quant_applies(&c.quant, "model.layers.1.self_attn.o_proj"));

  /* Python's re classes and non-capturing groups, rewritten for POSIX: "\\d+" matches digits (not a
   * literal "d"), "(?:" groups, \\w, \\s and negated classes, an escape inside brackets. */
  CHECK_OK(parse_with("{\"quant_method\": \"compressed-tensors\", \"format\": \"pack-quantized\", \"config_groups\": "
                      "{\"g\": {\"targets\": [\"re:.*mlp\\\\.experts\\\\.\\\\d+\\\\.(?:gate|up|down)_proj$\"], \"weights\": "
                      W_OK "}}, \"ignore\": [\"re:.*layers\\\\.\\\\D*1\\\\.\\\\w+\\\\.experts\\\\.7[\\\\.]\\\\S+\"]}",
                      &c));
  CHECK(c.quant.kind == PZ_WQ_INT4 && c.quant.n_targets == 1 && c.quant.n_ignore == 1);
  CHECK(pz_quant_applies(&c.quant, "model.layers.1.mlp.experts.12.gate_proj"));
  CHECK(pz_quant_applies(&c.quant, "model.layers.3.mlp.experts.0.down_proj"));
  CHECK(!pz_quant_applies(&c.quant, "model.layers.1.mlp.experts.d.gate_proj")); /* \\d is a digit, not "d" */
  CHECK(!pz_quant_applies(&c.quant, "model.layers.1.mlp.experts.12.gate_proj.x")); /* $ */
  CHECK(!pz_quant_applies(&c.quant, "model.layers.1.mlp.experts.7.up_proj"));      /* ignored by the \\D \\w \\S entry */
  CHECK(pz_quant_applies(&c.quant, "model.layers.2.mlp.experts.7.up_proj"));
  /* An export's ignore list of every module it leaves out, by name (compressed-tensors' QuantizationConfig
   * writes each unquantised Linear module of a quantised type): 489 names of a 61-layer DeepSeek-V3-shaped
   * model's attention, shared experts, dense MLP and lm_head, none a routed expert, are read (was: refused for
   * more than 256 entries) and kept out of q->ignore; the routed experts stay INT4, and exact routed-expert names
   * among them are kept and honoured. Past 256 kept entries ("re:" patterns here): refused on one line. */
  {
    static char q[64 << 10], names[60 << 10], text[(64 << 10) + 1024];
    for (int lim = 0; lim < 2; lim++) {
      size_t o = 0;
      int n = 0;
      if (!lim) {
        static const char *const attn[] = {"q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj", "o_proj"};
        static const char *const mlp[] = {"gate_proj", "up_proj", "down_proj"};
        o += (size_t)snprintf(names + o, sizeof names - o, "\"lm_head\"");
        n++;
        for (int L = 0; L < 61; L++)
          for (int k = 0; k < 5; k++, n++)
            o += (size_t)snprintf(names + o, sizeof names - o, ", \"model.layers.%d.self_attn.%s\"", L, attn[k]);
        for (int L = 0; L < 61; L++)
          for (int k = 0; k < 3; k++, n++)
            o += (size_t)snprintf(names + o, sizeof names - o, ", \"model.layers.%d.mlp.%s%s\"", L, L ? "shared_experts." : "",
                                  mlp[k]);
        /* two routed experts named exactly: kept */
        o += (size_t)snprintf(names + o, sizeof names - o, ", \"model.layers.7.mlp.experts.3.up_proj\", "
                              "\"model.layers.9.mlp.experts.0.gate_proj\"");
        n += 2;
        CHECK(n == 491);
      } else {
        for (int i = 0; i < PZ_QUANT_MAX_IGNORE + 1; i++, n++)
          o += (size_t)snprintf(names + o, sizeof names - o, "%s\"re:model\\\\.layers\\\\.%d\\\\..*\"", i ? ", " : "", i);
      }
      CHECK(o < sizeof names - 1);
      snprintf(q, sizeof q, "{\"quant_method\": \"compressed-tensors\", \"format\": \"pack-quantized\", \"config_groups\": "
               "{\"group_0\": {\"targets\": [\"Linear\"], \"weights\": " W_OK "}}, \"ignore\": [%s]}", names);
      snprintf(text, sizeof text,
               "{\"hidden_size\": 64, \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"q_lora_rank\": 32,"
               " \"kv_lora_rank\": 32, \"qk_nope_head_dim\": 16, \"qk_rope_head_dim\": 8, \"v_head_dim\": 16,"
               " \"n_routed_experts\": 8, \"num_experts_per_tok\": 2, \"moe_intermediate_size\": 64,"
               " \"intermediate_size\": 128, \"vocab_size\": 256, \"max_position_embeddings\": 512, "
               "\"quantization_config\": %s}", q);
      const pz_status st = pz_config_parse(text, strlen(text), "q.json", &c);
      if (!lim) {
        CHECK_OK(st);
        CHECK(c.quant.kind == PZ_WQ_INT4 && c.quant.n_ignore == 2);
        CHECK(pz_quant_applies(&c.quant, "model.layers.1.mlp.experts.0.gate_proj") &&
              pz_quant_applies(&c.quant, "model.layers.60.mlp.experts.0.down_proj") &&
              pz_quant_applies(&c.quant, "model.layers.7.mlp.experts.30.up_proj"));
        CHECK(!pz_quant_applies(&c.quant, "model.layers.7.mlp.experts.3.up_proj") &&
              !pz_quant_applies(&c.quant, "model.layers.9.mlp.experts.0.gate_proj"));
      } else {
        CHECK(st == PZ_ERR_CONFIG && strstr(pz_last_error(), "more than 256 entries that are \"re:\" patterns") &&
              !strchr(pz_last_error(), '\n'));
      }
    }
  }
  /* The first exact name under "model.language_model." is kept (it tells the builder the layout its names
   * use), the others not: the text_config-wrapped builder asks "model.language_model.layers.L..." names. */
  CHECK_OK(parse_with("{\"quant_method\": \"compressed-tensors\", \"format\": \"pack-quantized\", \"config_groups\": "
                      "{\"g\": {\"targets\": [\"Linear\"], \"weights\": " W_OK "}}, \"ignore\": [\"lm_head\", "
                      "\"model.language_model.layers.0.self_attn.o_proj\", \"model.language_model.layers.1.self_attn.o_proj\", "
                      "\"model.language_model.layers.1.mlp.experts.0.down_proj\"]}", &c));
  CHECK(c.quant.n_ignore == 2 && !strcmp(pz_quant_text_prefix(&c.quant), "model.language_model."));
  CHECK(!pz_quant_applies(&c.quant, "model.language_model.layers.1.mlp.experts.0.down_proj") &&
        pz_quant_applies(&c.quant, "model.language_model.layers.2.mlp.experts.0.down_proj"));
  /* A text_config-wrapped config with a quantization_config at both levels (a text_config copied from an FP8
   * base model, the compressed-tensors scheme of the export at the top): the top-level one is read, as
   * transformers and vLLM read it (was: text_config's, and the INT4 checkpoint refused as not FP8). A null
   * top-level one leaves text_config's (vLLM's fallback). */
  {
    static char wrapped[8192];
    static const char *const inner_q = "{\"quant_method\": \"fp8\", \"fmt\": \"e4m3\", \"weight_block_size\": [128, 128]}";
    for (int k = 0; k < 2; k++) {
      snprintf(wrapped, sizeof wrapped,
               "{\"model_type\": \"kimi_k25\", \"quantization_config\": %s, \"text_config\": {\"model_type\": \"kimi_k2\", "
               "\"hidden_size\": 64, \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"q_lora_rank\": 32,"
               " \"kv_lora_rank\": 32, \"qk_nope_head_dim\": 16, \"qk_rope_head_dim\": 8, \"v_head_dim\": 16,"
               " \"n_routed_experts\": 8, \"num_experts_per_tok\": 2, \"moe_intermediate_size\": 64,"
               " \"intermediate_size\": 128, \"vocab_size\": 256, \"max_position_embeddings\": 512, "
               "\"quantization_config\": %s}}", k ? "null" : ct(W_OK, NULL), inner_q);
      CHECK_OK(pz_config_parse(wrapped, strlen(wrapped), "w.json", &c));
      CHECK(c.text_config && c.quant.kind == (k ? PZ_WQ_FP8 : PZ_WQ_INT4));
    }
  }
  /* The format only in the group (compressed-tensors takes either place); missing at both: refused. */
  CHECK_OK(parse_with("{\"quant_method\": \"compressed-tensors\", \"config_groups\": {\"g\": {\"format\": "
                      "\"pack-quantized\", \"targets\": [\"Linear\"], \"weights\": " W_OK "}}}", &c));
  CHECK(c.quant.kind == PZ_WQ_INT4);
  expect_bad("{\"quant_method\": \"compressed-tensors\", \"config_groups\": {\"g\": {\"targets\": [\"Linear\"], "
             "\"weights\": " W_OK "}}}", "format");
  /* compressed-tensors' default for an absent "symmetric" is true. */
  CHECK_OK(parse_with(ct("{\"num_bits\": 4, \"group_size\": 32, \"strategy\": \"group\"}", NULL), &c));
  CHECK(c.quant.kind == PZ_WQ_INT4);
  /* A key given twice inside the group or its weights: Python keeps the last, cJSON the first: refused. */
  expect_bad(ct("{\"num_bits\": 4, \"group_size\": 32, \"strategy\": \"group\", \"symmetric\": true, \"symmetric\": false}",
                NULL), "appears twice");
  expect_bad("{\"quant_method\": \"compressed-tensors\", \"format\": \"pack-quantized\", \"config_groups\": {\"g\": "
             "{\"targets\": [\"Linear\"], \"weights\": " W_OK ", \"weights\": " W_OK "}}}", "appears twice");
  expect_bad("{\"quant_method\": \"compressed-tensors\", \"format\": \"pack-quantized\", \"config_groups\": {\"g\": "
             "{\"targets\": [\"Linear\"], \"weights\": " W_OK "}, \"g\": {\"targets\": [\"Linear\"], \"weights\": " W_OK
             "}}}", "appears twice");
  expect_bad(ct("{\"num_bits\": \"4\", \"group_size\": 32, \"strategy\": \"group\"}", NULL), "not a number");
  expect_bad("{\"quant_method\": \"compressed-tensors\", \"format\": \"pack-quantized\", \"config_groups\": {\"g\": "
             "{\"targets\": [\"re:(?P<x>a)\"], \"weights\": " W_OK "}}}", "regular expression"); /* Python-only */
  /* Escapes POSIX would read as something else: refused, not silently changed (JSON-escaped here). */
  static const char *const changed[] = {"re:.*down_proj\\\\Z", "re:\\\\A.*experts.*", "re:.*[a\\\\-z].*",
                                         "re:.*[\\\\^a].*", "re:.*[a\\\\]].*", "re:.*\\\\x41.*", "re:.*[\\\\D].*"};
  for (size_t i = 0; i < sizeof changed / sizeof changed[0]; i++) {
    char qq[600];
    snprintf(qq, sizeof qq, "{\"quant_method\": \"compressed-tensors\", \"format\": \"pack-quantized\", \"config_groups\": "
             "{\"g\": {\"targets\": [\"%s\"], \"weights\": " W_OK "}}}", changed[i]);
    expect_bad(qq, "regular expression");
  }
  /* An escaped punctuation character inside brackets is itself; \b is glibc's word boundary, as Python's. */
  CHECK_OK(parse_with("{\"quant_method\": \"compressed-tensors\", \"format\": \"pack-quantized\", \"config_groups\": "
                      "{\"g\": {\"targets\": [\"re:.*experts[\\\\.]\\\\d+\\\\b.*\"], \"weights\": " W_OK "}}}", &c));
  CHECK(pz_quant_applies(&c.quant, "model.layers.1.mlp.experts.3.up_proj") &&
        !pz_quant_applies(&c.quant, "model.layers.1.mlp.expertsx3.up_proj"));

  /* FP8 blocks. */
  CHECK_OK(parse_with("{\"quant_method\": \"fp8\", \"fmt\": \"e4m3\", \"activation_scheme\": \"dynamic\", "
                      "\"weight_block_size\": [128, 64]}", &c));
  CHECK(c.quant.kind == PZ_WQ_FP8 && c.quant.block_rows == 128 && c.quant.block_cols == 64);
  CHECK(pz_quant_applies(&c.quant, "model.layers.1.mlp.experts.0.up_proj"));
  /* Its skip lists, matched as transformers 5's should_convert_module does: a suffix of the module name,
   * or a regex from the start up to a module boundary. */
  CHECK_OK(parse_with("{\"quant_method\": \"fp8\", \"weight_block_size\": [128, 128], \"modules_to_not_convert\": "
                      "[\"lm_head\", \"model.layers.1\", \"mlp.gate\", \"down_proj\", \"model.layers.[4-5].mlp.experts\"], "
                      "\"ignored_layers\": [\"model.layers.7.mlp.experts.3.up_proj\"]}", &c));
  CHECK(c.quant.kind == PZ_WQ_FP8 && c.quant.n_ignore == 4); /* lm_head and mlp.gate cannot name an expert */
  CHECK(!pz_quant_applies(&c.quant, "model.layers.1.mlp.experts.0.up_proj"));  /* "model.layers.1" up to a '.' */
  CHECK(pz_quant_applies(&c.quant, "model.layers.11.mlp.experts.0.up_proj"));  /* not "model.layers.11" */
  CHECK(pz_quant_applies(&c.quant, "model.layers.2.mlp.gate_proj"));           /* "mlp.gate": not from the start */
  CHECK(pz_quant_applies(&c.quant, "model.layers.2.mlp.experts.0.gate_proj"));
  CHECK(!pz_quant_applies(&c.quant, "model.layers.2.mlp.experts.0.down_proj")); /* a suffix */
  CHECK(!pz_quant_applies(&c.quant, "model.layers.5.mlp.experts.9.up_proj"));   /* the regex, then a '.' */
  CHECK(pz_quant_applies(&c.quant, "model.layers.6.mlp.experts.9.up_proj"));
  CHECK(!pz_quant_applies(&c.quant, "model.layers.7.mlp.experts.3.up_proj"));   /* vLLM's list: the whole name */
  CHECK(pz_quant_applies(&c.quant, "model.layers.7.mlp.experts.30.up_proj"));
  expect_bad("{\"quant_method\": \"fp8\", \"weight_block_size\": [128, 128], \"modules_to_not_convert\": [\"model.(\"]}",
             "modules_to_not_convert");
  expect_bad("{\"quant_method\": \"fp8\", \"weight_block_size\": [128, 128], \"ignored_layers\": \"lm_head\"}",
             "ignored_layers");
  CHECK_OK(parse_with("null", &c));
  CHECK(c.quant.kind == PZ_WQ_NONE);
  /* Qwen3-235B-A22B-FP8's list: lm_head and each layer's input_layernorm, mlp.gate (the router) and
   * post_attention_layernorm, 283 entries, given twice (both keys): none names a routed expert, so the
   * config reads (it was refused for holding more than 256 entries) and the experts stay FP8; an entry
   * that does name them ("model.layers.7.mlp.experts", up to a '.') is kept, a bare "gate" is not (it is
   * neither a suffix of gate_proj nor a match from the start of the name in transformers 5). */
  {
    char path[512];
    PZ_TEST_PATH(path, "../configs/qwen3_235b_a22b.json");
    char *txt = pz_test_slurp(path, NULL);
    size_t cap = 64 << 10;
    char *q = malloc(cap), *json = malloc(cap + 8192);
    CHECK(txt && q && json);
    if (txt && q && json) {
      for (int extra = 0; extra < 3; extra++) {
        size_t o = (size_t)snprintf(q, cap, "[\"lm_head\"");
        for (int l = 0; l < 94; l++)
          o += (size_t)snprintf(q + o, cap - o, ", \"model.layers.%d.input_layernorm\", \"model.layers.%d.mlp.gate\", "
                                "\"model.layers.%d.post_attention_layernorm\"", l, l, l);
        snprintf(q + o, cap - o, "%s]", extra == 1 ? ", \"model.layers.7.mlp.experts\"" : extra == 2 ? ", \"gate\"" : "");
        *strrchr(txt, '}') = 0;
        snprintf(json, cap + 8192, "%s, \"quantization_config\": {\"quant_method\": \"fp8\", \"activation_scheme\": "
                 "\"dynamic\", \"fmt\": \"e4m3\", \"weight_block_size\": [128, 128], \"modules_to_not_convert\": %s, "
                 "\"ignored_layers\": %s}}", txt, q, q);
        strcat(txt, "}");
        pz_model_config f;
        CHECK_OK(pz_config_parse(json, strlen(json), "qwen3_fp8.json", &f));
        CHECK(f.quant.kind == PZ_WQ_FP8 && f.quant.n_ignore == (extra == 1 ? 2 : 0));
        CHECK(pz_quant_applies(&f.quant, "model.layers.3.mlp.experts.0.up_proj"));
        CHECK(pz_quant_applies(&f.quant, "model.layers.7.mlp.experts.0.gate_proj") == (extra != 1));
        CHECK(pz_quant_applies(&f.quant, "model.layers.3.mlp.experts.0.gate_proj"));
      }
    }
    free(txt);
    free(q);
    free(json);
  }

  /* Synthetic (--quant int4): only routed experts. */
  pz_quant_config s;
  pz_quant_config_synthetic(PZ_WQ_INT4, &s);
  CHECK(pz_quant_applies(&s, "model.layers.1.mlp.experts.0.gate_proj") && !pz_quant_applies(&s, "model.layers.0.mlp.up_proj") &&
        !pz_quant_applies(&s, "model.layers.1.mlp.shared_experts.down_proj") && !pz_quant_applies(&s, "lm_head") &&
        !pz_quant_applies(&s, "model.layers.1.self_attn.q_b_proj"));
  CHECK(!strcmp(pz_wquant_name(PZ_WQ_INT4), "int4") && !strcmp(pz_wquant_name(PZ_WQ_NONE), "bf16"));

  /* Unsupported schemes: one line naming the field. */
  /* The field named by its path in the group (was "quantization_config.weights.num_bits"). */
  expect_bad(ct("{\"num_bits\": 8, \"group_size\": 32, \"strategy\": \"group\", \"symmetric\": true}", NULL),
             "quantization_config.config_groups.group_0.weights.num_bits is 8, which prezero does not support");
  /* Coarser groups (a multiple of 32) and one scale per output row are read (the loader repeats each scale
   * over the kernels' 32-column groups); the kernels' group stays 32. Inferred strategies as compressed-tensors'
   * QuantizationArgs: a positive group_size "group", -1 "channel", none "tensor" (refused). */
  static const struct { const char *w; int stored; } coarse[] = {
      {"{\"num_bits\": 4, \"group_size\": 128, \"strategy\": \"group\", \"symmetric\": true}", 128},
      {"{\"num_bits\": 4, \"group_size\": 64}", 64},
      {"{\"num_bits\": 4, \"group_size\": 32, \"strategy\": \"group\"}", 32},
      {"{\"num_bits\": 4, \"group_size\": null, \"strategy\": \"channel\", \"symmetric\": true}", 0},
      {"{\"num_bits\": 4, \"strategy\": \"channel\"}", 0},
      {"{\"num_bits\": 4, \"group_size\": -1, \"strategy\": \"channel\"}", 0},
      {"{\"num_bits\": 4, \"group_size\": -1}", 0},
      /* compressed-tensors lowercases strategy and type */
      {"{\"num_bits\": 4, \"group_size\": 64, \"strategy\": \"GROUP\", \"type\": \"Int\"}", 64},
      {"{\"num_bits\": 4, \"strategy\": \"Channel\"}", 0},
  };
  for (size_t i = 0; i < sizeof coarse / sizeof coarse[0]; i++) {
    CHECK_OK(parse_with(ct(coarse[i].w, NULL), &c));
    CHECK(c.quant.kind == PZ_WQ_INT4 && c.quant.group_size == 32 && c.quant.stored_group == coarse[i].stored);
  }
  expect_bad(ct("{\"num_bits\": 4, \"group_size\": 16, \"strategy\": \"group\", \"symmetric\": true}", NULL),
             "config_groups.group_0.weights.group_size is 16, which prezero does not support (a group_size that is a "
             "multiple of 32");
  expect_bad(ct("{\"num_bits\": 4, \"group_size\": 96.5}", NULL), "weights.group_size is 96.5");
  expect_bad(ct("{\"num_bits\": 4, \"group_size\": 0, \"strategy\": \"group\"}", NULL), "weights.group_size is 0");
  expect_bad(ct("{\"num_bits\": 4, \"strategy\": \"group\"}", NULL), "weights.group_size is missing or null");
  /* A group_size that is there but not a number (was: "is missing or null"). */
  expect_bad(ct("{\"num_bits\": 4, \"group_size\": \"128\", \"strategy\": \"group\"}", NULL),
             "weights.group_size is not a number");
  expect_bad(ct("{\"num_bits\": 4, \"group_size\": true}", NULL), "weights.group_size is not a number");
  expect_bad(ct("{\"num_bits\": 4, \"strategy\": \"tensor\"}", NULL), "weights.strategy is tensor");
  expect_bad(ct("{\"num_bits\": 4, \"strategy\": \"block\", \"block_structure\": [128, 128], \"symmetric\": true}", NULL),
             "weights.strategy is block");
  expect_bad(ct("{\"num_bits\": 4, \"symmetric\": true}", NULL), "weights.strategy is missing with group_size null");
  /* No strategy but a group_size: compressed-tensors' QuantizationArgs infers "group" (was: refused). */
  CHECK_OK(parse_with(ct("{\"num_bits\": 4, \"group_size\": 32, \"symmetric\": true}", NULL), &c));
  CHECK(c.quant.kind == PZ_WQ_INT4 && c.quant.group_size == 32);
  CHECK_OK(parse_with(ct("{\"num_bits\": 4, \"group_size\": 32, \"strategy\": null}", NULL), &c));
  CHECK(c.quant.kind == PZ_WQ_INT4);
  /* compressed-tensors: a group_size needs strategy "group" */
  expect_bad(ct("{\"num_bits\": 4, \"group_size\": 32, \"strategy\": \"channel\", \"symmetric\": true}", NULL),
             "weights.group_size is set with strategy \"channel\"");
  expect_bad(ct("{\"num_bits\": 4, \"group_size\": 32, \"strategy\": \"group\", \"symmetric\": false}", NULL), "symmetric");
  expect_bad(ct("{\"num_bits\": 4, \"group_size\": 32, \"strategy\": \"group\", \"symmetric\": true, \"actorder\": \"group\"}", NULL),
             "actorder");
  expect_bad(ct("{\"num_bits\": 4, \"group_size\": 32, \"strategy\": \"group\", \"symmetric\": true, \"actorder\": \"dynamic\"}", NULL),
             "actorder");
  expect_bad(ct("{\"num_bits\": 4, \"group_size\": 32, \"strategy\": \"group\", \"symmetric\": true, \"actorder\": true}", NULL),
             "actorder");
  /* actorder "weight" / "static": columns and groups stored in their natural order (no g_idx); read. */
  for (int i = 0; i < 2; i++) {
    char w[256];
    snprintf(w, sizeof w, "{\"num_bits\": 4, \"group_size\": 32, \"strategy\": \"group\", \"symmetric\": true, "
             "\"actorder\": \"%s\"}", i ? "static" : "weight");
    CHECK_OK(parse_with(ct(w, NULL), &c));
    CHECK(c.quant.kind == PZ_WQ_INT4 && c.quant.group_size == 32);
  }
  expect_bad(ct("{\"num_bits\": 4, \"group_size\": 32, \"strategy\": \"group\", \"symmetric\": true, \"type\": \"float\"}", NULL),
             "weights.type");
  expect_bad(ct(W_OK, ", \"kv_cache_scheme\": {\"num_bits\": 8}"), "kv_cache_scheme");
  expect_bad("{\"quant_method\": \"compressed-tensors\", \"format\": \"int-quantized\"}", "format");
  expect_bad("{\"quant_method\": \"compressed-tensors\", \"format\": \"naive-quantized\"}", "format");
  /* compressed-tensors float-quantized FP8 with block scales (FP8_BLOCK): read as block-scaled FP8 experts whose
   * scales are "X.weight_scale", patterns as compressed-tensors'; the format may be given in the group only. */
  {
    static const char *const fp8_ct[] = {
        "{\"quant_method\": \"compressed-tensors\", \"format\": \"float-quantized\", \"config_groups\": {\"g\": {"
        "\"targets\": [\"Linear\"], \"weights\": {\"num_bits\": 8, \"type\": \"float\", \"strategy\": \"block\", "
        "\"block_structure\": [128, 64], \"symmetric\": true, \"dynamic\": false}, \"input_activations\": {\"num_bits\": 8, "
        "\"type\": \"float\", \"strategy\": \"group\", \"group_size\": 128, \"dynamic\": true}}}, \"ignore\": [\"lm_head\", \"re:.*layers\\\\.2\\\\.mlp.*\"]}",
        "{\"quant_method\": \"compressed-tensors\", \"config_groups\": {\"g\": {\"format\": \"float-quantized\", "
        "\"targets\": [\"Linear\"], \"weights\": {\"num_bits\": 8, \"type\": \"float\", \"strategy\": \"block\", "
        "\"block_structure\": [128, 64]}}}}"};
    for (int i = 0; i < 2; i++) {
      CHECK_OK(parse_with(fp8_ct[i], &c));
      CHECK(c.quant.kind == PZ_WQ_FP8 && c.quant.ct_fp8 == 1 && c.quant.block_rows == 128 && c.quant.block_cols == 64);
      CHECK(pz_quant_applies(&c.quant, "model.layers.1.mlp.experts.3.up_proj"));
      /* the first's ignore list names layer 2's experts */
      CHECK(pz_quant_applies(&c.quant, "model.layers.2.mlp.experts.0.up_proj") == (i == 1));
    }
    expect_bad("{\"quant_method\": \"compressed-tensors\", \"format\": \"float-quantized\", \"config_groups\": {\"g\": {"
               "\"targets\": [\"Linear\"], \"weights\": {\"num_bits\": 8, \"type\": \"float\", \"strategy\": \"tensor\"}}}}",
               "config_groups.g.weights.strategy is tensor, which prezero does not support (FP8 strategy \"block\"");
    /* the FP8 scheme (per-tensor weights, static activations): named by its weights' strategy */
    expect_bad("{\"quant_method\": \"compressed-tensors\", \"format\": \"float-quantized\", \"config_groups\": {\"g\": {"
               "\"targets\": [\"Linear\"], \"weights\": {\"num_bits\": 8, \"type\": \"float\", \"strategy\": \"tensor\"}, "
               "\"input_activations\": {\"num_bits\": 8, \"type\": \"float\", \"strategy\": \"tensor\", \"dynamic\": false}}}}",
               "config_groups.g.weights.strategy is tensor");
    /* per channel (FP8_DYNAMIC): blocks of one row by a whole row */
    CHECK_OK(parse_with("{\"quant_method\": \"compressed-tensors\", \"format\": \"float-quantized\", \"config_groups\": {"
                        "\"g\": {\"targets\": [\"Linear\"], \"weights\": {\"num_bits\": 8, \"type\": \"float\", "
                        "\"strategy\": \"channel\", \"group_size\": null}, \"input_activations\": {\"num_bits\": 8, \"type\": "
                        "\"float\", \"strategy\": \"token\", \"dynamic\": true}}}}", &c));
    CHECK(c.quant.kind == PZ_WQ_FP8 && c.quant.block_rows == 1 && c.quant.block_cols == PZ_FP8_CHANNEL_COLS);
    expect_bad("{\"quant_method\": \"compressed-tensors\", \"format\": \"float-quantized\", \"config_groups\": {\"g\": {"
               "\"targets\": [\"Linear\"], \"weights\": {\"num_bits\": 8, \"type\": \"float\", \"strategy\": \"block\", "
               "\"block_structure\": [128, 128]}, \"output_activations\": {\"num_bits\": 8}}}}",
               "config_groups.g.output_activations is set");
  }
  /* compressed-tensors' transforms (rotated weights) and sparse storage: refused on one line (were read as plain
   * pack-quantized weights); an empty transform_config and a "dense" sparsity_config read. */
  expect_bad(ct(W_OK, ", \"transform_config\": {\"config_groups\": {\"u\": {\"type\": \"hadamard\"}}}"),
             "transform_config");
  expect_bad(ct(W_OK, ", \"sparsity_config\": {\"format\": \"sparse-24-bitmask\", \"sparsity_structure\": \"2:4\"}"),
             "sparsity_config.format is \"sparse-24-bitmask\"");
  expect_bad(ct(W_OK, ", \"sparsity_config\": {\"format\": 3}"), "sparsity_config.format");
  expect_bad(ct(W_OK, ", \"sparsity_config\": [1]"), "sparsity_config");
  CHECK_OK(parse_with(ct(W_OK, ", \"transform_config\": null, \"sparsity_config\": {\"format\": \"dense\", "
                             "\"global_sparsity\": 0.0, \"sparsity_structure\": \"unstructured\", \"targets\": []}"), &c));
  CHECK(c.quant.kind == PZ_WQ_INT4);
  CHECK_OK(parse_with(ct(W_OK, ", \"transform_config\": {}, \"sparsity_config\": {}"), &c));
  CHECK(c.quant.kind == PZ_WQ_INT4);
  /* GPTQ: symmetric 4-bit with a group_size a multiple of 32 or -1 read as INT4 (test_int4_checkpoint loads
   * its tensors); a missing group_size, other bits, act order and asymmetric schemes refused naming the field. */
  expect_bad("{\"quant_method\": \"gptq\", \"bits\": 4}", "quantization_config.group_size is missing");
  expect_bad("{\"quant_method\": \"gptq\", \"bits\": 3, \"group_size\": 128}", "quantization_config.bits is 3");
  expect_bad("{\"quant_method\": \"gptq\", \"bits\": 4, \"group_size\": 128, \"sym\": false}", "quantization_config.sym");
  expect_bad("{\"quant_method\": \"gptq\", \"bits\": 4, \"group_size\": 128, \"desc_act\": true}",
             "quantization_config.desc_act");
  expect_bad("{\"quant_method\": \"gptq\", \"bits\": 4, \"group_size\": 128, \"desc_act\": true, \"static_groups\": false}",
             "quantization_config.desc_act");
  /* desc_act with static groups (AutoGPTQ's top-level static_groups, GPTQModel's meta): groups in column order */
  CHECK_OK(parse_with("{\"quant_method\": \"gptq\", \"bits\": 4, \"group_size\": 128, \"desc_act\": true, "
                      "\"static_groups\": true}", &c));
  CHECK(c.quant.gptq == 1);
  CHECK_OK(parse_with("{\"quant_method\": \"gptq\", \"bits\": 4, \"group_size\": 128, \"desc_act\": true, "
                      "\"meta\": {\"static_groups\": true}}", &c));
  CHECK(c.quant.gptq == 1);
  CHECK_OK(parse_with("{\"quant_method\": \"gptq\", \"bits\": 4, \"group_size\": 128, \"desc_act\": false, \"sym\": true, "
                      "\"checkpoint_format\": \"gptq\", \"modules_in_block_to_quantize\": [[\"self_attn.q_proj\"], "
                      "[\"mlp.experts.0.up_proj\"]]}", &c));
  CHECK(c.quant.kind == PZ_WQ_INT4 && c.quant.gptq == 1 && c.quant.gptq_zero == 7 && c.quant.stored_group == 128 &&
        c.quant.group_size == 32 && pz_quant_applies(&c.quant, "model.layers.1.mlp.experts.3.down_proj"));
  CHECK_OK(parse_with("{\"quant_method\": \"gptq\", \"bits\": 4, \"group_size\": -1, \"checkpoint_format\": "
                      "\"gptq_v2\", \"modules_in_block_to_quantize\": [[\"self_attn.q_proj\", \"self_attn.o_proj\"]]}", &c));
  CHECK(c.quant.gptq == 1 && c.quant.gptq_zero == 8 && c.quant.stored_group == 0 &&
        !pz_quant_applies(&c.quant, "model.layers.1.mlp.experts.3.down_proj")); /* experts not listed: bf16 */
  expect_bad("{\"quant_method\": \"awq\"}", "\"awq\"");
  expect_bad("{\"bits\": 4}", "quant_method");
  expect_bad("{\"quant_method\": \"fp8\"}", "weight_block_size");
  expect_bad("{\"quant_method\": \"fp8\", \"weight_block_size\": [128]}", "weight_block_size");
  expect_bad("{\"quant_method\": \"fp8\", \"fmt\": \"e5m2\", \"weight_block_size\": [128, 128]}", "fmt");
  expect_bad("{\"quant_method\": \"compressed-tensors\", \"format\": \"pack-quantized\", \"config_groups\": {\"g\": "
             "{\"targets\": [\"Linear\"], \"input_activations\": {\"num_bits\": 8}, \"weights\": " W_OK "}}}", "input_activations");
  expect_bad("{\"quant_method\": \"compressed-tensors\", \"format\": \"pack-quantized\", \"config_groups\": {\"a\": "
             "{\"targets\": [\"Linear\"], \"weights\": " W_OK "}, \"b\": {\"targets\": [\"Linear\"], \"weights\": " W_OK "}}}",
             "more than one group");
  expect_bad(ct(W_OK, ", \"ignore\": [\"re:(\"]"), "appears twice"); /* ignore given twice */
  expect_bad("{\"quant_method\": \"compressed-tensors\", \"format\": \"pack-quantized\", \"config_groups\": {\"g\": "
             "{\"targets\": [\"re:(unclosed\"], \"weights\": " W_OK "}}}", "regular expression");
  /* Patterns whose repeats glibc's regcomp would expand into gigabytes (fuzz_config found the first,
   * tests/fuzz/regressions/fuzz_config/quant_ignore_regex_stacked_plus): stacked '+' and nested
   * intervals are refused by their cost, on one line; the published patterns and modest repeats read. */
  static const char *const costly[] = {".*share++++++++++++++++++++++++++++++++++++++d_experts.*",
                                       "((((a{99}){99}){99}){99})",
                                       "(((((((((((((((((((((((((x+)+)+)+)+)+)+)+)+)+)+)+)+)+)+)+)+)+)+)+)+)+)+)+)+)+"};
  for (size_t i = 0; i < sizeof costly / sizeof costly[0]; i++) {
    char q[1024];
    snprintf(q, sizeof q, "{\"quant_method\": \"compressed-tensors\", \"format\": \"pack-quantized\", \"config_groups\": "
             "{\"g\": {\"targets\": [\"re:%s\"], \"weights\": " W_OK "}}}", costly[i]);
    expect_bad(q, "repeats too much");
  }
  {
    char q[1024];
    snprintf(q, sizeof q, "{\"quant_method\": \"compressed-tensors\", \"format\": \"pack-quantized\", \"config_groups\": "
             "{\"g\": {\"targets\": [\"re:.*mlp\\\\.(gate|up|gate_up|down)_proj.*\", \"re:(ab{2,5}c){3}[x-z]+\", "
             "\"re:a{1,}b\"], \"weights\": " W_OK "}}}");
    pz_model_config qc;
    CHECK_OK(parse_with(q, &qc));
  }
  expect_bad("\"int4\"", "quantization_config");

  /* A text_config-wrapped config whose patterns are anchored to transformers' newer layout
   * ("model.language_model.layers.N"): the builder asks with that layout, so the routed experts of
   * layer 1 are INT4 and layer 0's are left bf16 by the ignore entry; the published layout's
   * patterns ("language_model.model.layers.N") keep working the same way. */
  for (int lay = 0; lay < 2; lay++) {
    static char text[4096];
    const char *pre = lay ? "model\\\\.language_model\\\\." : "language_model\\\\.model\\\\.";
    snprintf(text, sizeof text,
             "{\"model_type\": \"kimi_k25\", \"text_config\": {\"model_type\": \"kimi_k2\", \"hidden_size\": 64, "
             "\"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"q_lora_rank\": 32, \"kv_lora_rank\": 32, "
             "\"qk_nope_head_dim\": 16, \"qk_rope_head_dim\": 8, \"v_head_dim\": 16, \"n_routed_experts\": 8, "
             "\"num_experts_per_tok\": 2, \"moe_intermediate_size\": 64, \"intermediate_size\": 128, "
             "\"first_k_dense_replace\": 0, \"vocab_size\": 256, \"max_position_embeddings\": 512, "
             "\"quantization_config\": {\"quant_method\": \"compressed-tensors\", \"format\": \"pack-quantized\", "
             "\"config_groups\": {\"g\": {\"targets\": [\"re:%slayers\\\\.\\\\d+\\\\.mlp\\\\.experts\\\\..*\"], "
             "\"weights\": " W_OK "}}, \"ignore\": [\"re:%slayers\\\\.0\\\\..*\"]}}}",
             pre, pre);
    pz_model_config tc;
    const pz_status ps = pz_config_parse(text, strlen(text), "tc.json", &tc);
    CHECK_OK(ps);
    if (ps != PZ_OK) continue;
    CHECK(tc.text_config && tc.quant.kind == PZ_WQ_INT4);
    CHECK(!strcmp(pz_quant_text_prefix(&tc.quant), lay ? "model.language_model." : "language_model.model."));
    pz_build_opts bo = PZ_BUILD_OPTS_INIT;
    bo.max_ctx = 64;
    pz_graph *g = NULL;
    const pz_status bs = pz_build_decode_graph(&tc, &bo, &g);
    CHECK_OK(bs);
    if (bs != PZ_OK) continue;
    int seen = 0;
    for (int i = 0; i < g->n_nodes; i++)
      if (g->nodes[i].op == PZ_OP_MOE) {
        seen++;
        CHECK(g->nodes[i].p.moe.wquant == (g->nodes[i].layer == 1 ? (int)PZ_WQ_INT4 : (int)PZ_WQ_NONE));
      }
    CHECK(seen == 2);
    pz_graph_free(g);
  }
  TEST_DONE();
}
