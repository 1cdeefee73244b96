/* Configs of a supported model_type (or with the MLA fields) that carry a field of another family
 * changing the math: refused with one line naming the field, never run as the plain family.
 * DeepSeek-V3.2 (index_*), DeepSeek-V4 (o_lora_rank, hc_mult, compress_rates) and Kimi-Linear
 * (linear_attn_config) are refused by model_type and by their fields; neutral values (partial_rotary_factor 1, use_qk_norm false on llama, true on qwen3,
 * query_pre_attn_scalar equal to head_dim, no_rope_layers all 1) still parse. Other DeepSeek layouts
 * without MLA fields are refused by model_type; Qwen2.5-1M's dual chunk attention limits the positions
 * to its first chunk. */
#include "model/config.h"
#include "pz_test.h"
#include <string.h>

#define LLAMA_BASE                                                                                                     \
  "\"model_type\": \"llama\", \"hidden_size\": 256, \"num_hidden_layers\": 2, \"num_attention_heads\": 8, "            \
  "\"num_key_value_heads\": 2, \"intermediate_size\": 512, \"vocab_size\": 1024, \"max_position_embeddings\": 8192"
#define QWEN3_BASE                                                                                                     \
  "\"model_type\": \"qwen3\", \"hidden_size\": 256, \"num_hidden_layers\": 2, \"num_attention_heads\": 8, "            \
  "\"num_key_value_heads\": 2, \"head_dim\": 64, \"intermediate_size\": 512, \"vocab_size\": 1024, "                  \
  "\"max_position_embeddings\": 4096"
#define MLA_BASE                                                                                                       \
  "\"hidden_size\": 64, \"num_hidden_layers\": 2, \"num_attention_heads\": 2, \"q_lora_rank\": null, "                \
  "\"kv_lora_rank\": 32, \"qk_nope_head_dim\": 16, \"qk_rope_head_dim\": 16, \"v_head_dim\": 16, "                    \
  "\"n_routed_experts\": 4, \"num_experts_per_tok\": 2, \"moe_intermediate_size\": 32, \"intermediate_size\": 128, "  \
  "\"vocab_size\": 256, \"max_position_embeddings\": 256"

static void expect_msg(int line, const char *json, const char *want) {
  pz_model_config c;
  pz_status st = pz_config_parse(json, strlen(json), "f.json", &c);
  if (st != PZ_ERR_CONFIG || strcmp(pz_last_error(), want)) {
    fprintf(stderr, "line %d: %s -> %s \"%s\"\n  want \"%s\"\n", line, json, pz_status_string(st),
            st == PZ_OK ? "" : pz_last_error(), want);
    pz_test_failures++;
  }
}
#define EXPECT(json, want) expect_msg(__LINE__, json, want)

static void expect_ok(int line, const char *json) {
  pz_model_config c;
  pz_status st = pz_config_parse(json, strlen(json), "f.json", &c);
  if (st != PZ_OK) {
    fprintf(stderr, "line %d: %s -> %s \"%s\", want PZ_OK\n", line, json, pz_status_string(st), pz_last_error());
    pz_test_failures++;
  }
}
#define EXPECT_OK(json) expect_ok(__LINE__, json)

#define MSG_FOREIGN(field, val, what, mt)                                                                              \
  "config f.json: field \"" field "\" is " val " (" what "), which model_type " mt " does not have and prezero does "   \
  "not run; this model is not supported"
#define MSG_VARIANT(by, name, what)                                                                                    \
  "config f.json: " by " \"" name "\" is not supported: prezero has no " what " and would run every layer as plain "  \
  "MLA; prezero runs deepseek_v2, deepseek_v3, kimi_k2 (MLA) and llama, mistral, qwen2, qwen3, qwen3_moe, mixtral, "   \
  "glm4_moe, phi3, dots1 (GQA)"

static void test_gqa(void) {
  EXPECT("{" QWEN3_BASE ", \"partial_rotary_factor\": 0.5}",
         MSG_FOREIGN("partial_rotary_factor", "0.5", "RoPE on part of each head, as GLM-4 / Phi / Qwen3-Next", "qwen3"));
  EXPECT("{\"model_type\": \"llama\", \"hidden_size\": 256, \"num_hidden_layers\": 2, \"num_attention_heads\": 8, "
         "\"intermediate_size\": 512, \"vocab_size\": 1024, \"max_position_embeddings\": 8192, \"rope_parameters\": "
         "{\"rope_type\": \"default\", \"rope_theta\": 10000.0, \"partial_rotary_factor\": 0.25}}",
         MSG_FOREIGN("partial_rotary_factor", "0.25", "RoPE on part of each head, as GLM-4 / Phi / Qwen3-Next", "llama"));
  EXPECT("{" LLAMA_BASE ", \"attention_multiplier\": 0.0078125}",
         MSG_FOREIGN("attention_multiplier", "0.0078125", "a scaled attention, as Granite", "llama"));
  EXPECT("{" LLAMA_BASE ", \"embedding_multiplier\": 12.0}",
         MSG_FOREIGN("embedding_multiplier", "12", "scaled embeddings, as Granite", "llama"));
  EXPECT("{" LLAMA_BASE ", \"residual_multiplier\": 0.22}",
         MSG_FOREIGN("residual_multiplier", "0.22", "scaled residuals, as Granite", "llama"));
  EXPECT("{" LLAMA_BASE ", \"logits_scaling\": 16.0}",
         MSG_FOREIGN("logits_scaling", "16", "scaled logits, as Granite", "llama"));
  EXPECT("{" LLAMA_BASE ", \"logit_scale\": 0.0625}",
         MSG_FOREIGN("logit_scale", "0.0625", "scaled logits, as Cohere", "llama"));
  EXPECT("{" LLAMA_BASE ", \"final_logit_softcapping\": 30.0}",
         MSG_FOREIGN("final_logit_softcapping", "30", "soft-capped logits, as Gemma 2", "llama"));
  EXPECT("{" LLAMA_BASE ", \"attn_logit_softcapping\": 50.0}",
         MSG_FOREIGN("attn_logit_softcapping", "50", "soft-capped attention scores, as Gemma 2", "llama"));
  EXPECT("{" LLAMA_BASE ", \"query_pre_attn_scalar\": 144}",
         MSG_FOREIGN("query_pre_attn_scalar", "144", "a query scale other than 1/sqrt(head_dim), as Gemma", "llama"));
  EXPECT("{" LLAMA_BASE ", \"use_qk_norm\": true}",
         MSG_FOREIGN("use_qk_norm", "true", "q/k norms, as Llama 4 / GLM-4.5 / Cohere", "llama"));
  EXPECT("{" LLAMA_BASE ", \"no_rope_layers\": [1, 0]}",
         MSG_FOREIGN("no_rope_layers", "a list", "layers without RoPE, as Llama 4 / SmolLM3", "llama"));
  EXPECT("{" LLAMA_BASE ", \"rope_interleave\": true}",
         MSG_FOREIGN("rope_interleave", "true", "RoPE on interleaved pairs (prezero's GQA rotates halves)", "llama"));
  /* Neutral values and nulls are the plain family. */
  EXPECT_OK("{" QWEN3_BASE ", \"partial_rotary_factor\": 1.0, \"use_qk_norm\": true}");
  /* glm4_moe has partial_rotary_factor and use_qk_norm of its own; the other families' fields stay refused */
#define GLM_BASE                                                                                                       \
  "\"model_type\": \"glm4_moe\", \"hidden_size\": 256, \"num_hidden_layers\": 2, \"num_attention_heads\": 8, "       \
  "\"head_dim\": 64, \"intermediate_size\": 512, \"moe_intermediate_size\": 64, \"n_routed_experts\": 8, "              \
  "\"num_experts_per_tok\": 2, \"vocab_size\": 1024, \"max_position_embeddings\": 4096"
  EXPECT_OK("{" GLM_BASE ", \"partial_rotary_factor\": 0.5, \"use_qk_norm\": true}");
  EXPECT("{" GLM_BASE ", \"rope_interleave\": true}",
         MSG_FOREIGN("rope_interleave", "true", "RoPE on interleaved pairs (prezero's GQA rotates halves)", "glm4_moe"));
  EXPECT("{" GLM_BASE ", \"final_logit_softcapping\": 30.0}",
         MSG_FOREIGN("final_logit_softcapping", "30", "soft-capped logits, as Gemma 2", "glm4_moe"));
  EXPECT_OK("{" LLAMA_BASE ", \"use_qk_norm\": false, \"rope_interleave\": false, \"no_rope_layers\": [1, 1], "
            "\"query_pre_attn_scalar\": 32, \"final_logit_softcapping\": null, \"logit_scale\": 1}");
}

static void test_mla_variants(void) {
  const char *dsa = "DeepSeek Sparse Attention (the lightning indexer and its top-k token selection)";
  char want[512];
  snprintf(want, sizeof want, MSG_VARIANT("model_type", "deepseek_v32", "%s"), dsa);
  EXPECT("{\"model_type\": \"deepseek_v32\", " MLA_BASE ", \"index_topk\": 2048, \"index_n_heads\": 64, "
         "\"index_head_dim\": 128}", want);
  EXPECT("{\"model_type\": \"deepseek_v32\", " MLA_BASE "}", want); /* the class defaults carry the indexer */
  snprintf(want, sizeof want, MSG_VARIANT("field", "index_topk", "%s"), dsa);
  EXPECT("{" MLA_BASE ", \"index_topk\": 2048}", want); /* no model_type */
  EXPECT("{\"model_type\": \"kimi_linear\", " MLA_BASE ", \"linear_attn_config\": {\"kda_layers\": [1]}}",
         MSG_VARIANT("model_type", "kimi_linear", "Kimi Delta Attention (linear attention) layers"));
  EXPECT("{\"model_type\": \"deepseek_v3\", " MLA_BASE ", \"linear_attn_config\": {\"kda_layers\": [1]}}",
         MSG_VARIANT("field", "linear_attn_config", "Kimi Delta Attention (linear attention) layers"));
  EXPECT_OK("{\"model_type\": \"deepseek_v3\", " MLA_BASE ", \"index_topk\": null}");
  /* DeepSeek-V4 (DeepseekV4Config's fields: q_lora_rank and the V3.2 indexer's, no kv_lora_rank) is named by its
   * model_type, not as V3.2's indexer or a missing kv_lora_rank */
  const char *v4 = "DeepSeek-V4 attention (compressed KV, hyper-connections, grouped low-rank o_proj)";
  snprintf(want, sizeof want, MSG_VARIANT("model_type", "deepseek_v4", "%s"), v4);
  EXPECT("{\"architectures\": [\"DeepseekV4ForCausalLM\"], \"model_type\": \"deepseek_v4\", \"vocab_size\": 129280, "
         "\"hidden_size\": 4096, \"moe_intermediate_size\": 2048, \"num_hidden_layers\": 43, \"num_attention_heads\": 64, "
         "\"num_key_value_heads\": 1, \"head_dim\": 512, \"q_lora_rank\": 1024, \"num_experts_per_tok\": 6, "
         "\"n_routed_experts\": 256, \"scoring_func\": \"sqrtsoftplus\", \"hc_mult\": 4, \"sliding_window\": 128, "
         "\"o_groups\": 8, \"o_lora_rank\": 1024, \"index_n_heads\": 64, \"index_head_dim\": 128, \"index_topk\": 512}", want);
  EXPECT("{\"model_type\": \"deepseek_v4\"}", want); /* the class defaults */
  snprintf(want, sizeof want, MSG_VARIANT("field", "o_lora_rank", "%s"), v4);
  EXPECT("{" MLA_BASE ", \"o_lora_rank\": 1024}", want);
}

#define MSG_OTHER(mt)                                                                                                  \
  "config f.json: model_type \"" mt "\" is not supported; prezero runs the DeepSeek-V2 family (deepseek_v2, "         \
  "deepseek_v3, kimi_k2: MLA) and llama, mistral, qwen2, qwen3, qwen3_moe, mixtral, glm4_moe, phi3, dots1 (GQA)"

/* Other DeepSeek layouts without the MLA fields are named as unsupported, not as an MLA config with
 * its ranks missing: DeepSeek-MoE 16B ("deepseek", multi-head attention) and DeepSeek-VL2
 * ("deepseek_vl_v2", the text model under "language_config"). */
static void test_other_deepseek(void) {
  EXPECT("{\"model_type\": \"deepseek\", \"hidden_size\": 2048, \"num_hidden_layers\": 28, \"num_attention_heads\": 16, "
         "\"num_key_value_heads\": 16, \"n_routed_experts\": 64, \"n_shared_experts\": 2, \"num_experts_per_tok\": 6, "
         "\"moe_intermediate_size\": 1408, \"intermediate_size\": 10944, \"first_k_dense_replace\": 1, "
         "\"vocab_size\": 102400, \"max_position_embeddings\": 4096}",
         MSG_OTHER("deepseek"));
  EXPECT("{\"model_type\": \"deepseek_vl_v2\", \"language_config\": {\"model_type\": \"deepseek_v2\", " MLA_BASE "}}",
         MSG_OTHER("deepseek_vl_v2"));
  /* the MLA fields still make it a DeepSeek config whatever the model_type, where the routing is stated or DeepSeek's
   * remote code (auto_map) gives its defaults */
  EXPECT_OK("{\"model_type\": \"deepseek_vl_v2\", " MLA_BASE ", \"scoring_func\": \"softmax\"}");
  EXPECT_OK("{\"model_type\": \"deepseek_vl_v2\", " MLA_BASE ", \"auto_map\": {\"AutoConfig\": \"c.C\"}}");
}

/* MLA configs of other families: their own fields that change the math are refused, naming the field and the
 * model_type, and a model_type without DeepSeek's remote code that states no routing is refused (GLM-4.7-Flash's
 * glm4_moe_lite routes by sigmoid scores with a correction bias; prezero's default for an unknown model_type is
 * DeepSeek's remote code's greedy softmax). */
static void test_other_mla(void) {
#define GLM_LITE(extra)                                                                                                \
  "{\"architectures\": [\"Glm4MoeLiteForCausalLM\"], \"model_type\": \"glm4_moe_lite\", \"vocab_size\": 154880, "        \
  "\"hidden_size\": 2048, \"intermediate_size\": 10240, \"moe_intermediate_size\": 1536, \"num_hidden_layers\": 47, "      \
  "\"num_attention_heads\": 20, \"num_key_value_heads\": 20, \"n_shared_experts\": 1, \"n_routed_experts\": 64, "          \
  "\"routed_scaling_factor\": 1.8, \"kv_lora_rank\": 512, \"q_lora_rank\": 768, \"qk_rope_head_dim\": 64, "                \
  "\"v_head_dim\": 256, \"qk_nope_head_dim\": 192, \"n_group\": 1, \"topk_group\": 1, \"num_experts_per_tok\": 4, "        \
  "\"norm_topk_prob\": true, \"max_position_embeddings\": 202752, \"rope_parameters\": {\"rope_type\": \"default\", "      \
  "\"rope_theta\": 1000000}" extra "}"
  EXPECT(GLM_LITE(", \"mlp_layer_types\": [\"dense\", \"sparse\"]"),
         "config f.json: field \"mlp_layer_types\" (a per-layer choice of dense MLP or MoE, model_type glm4_moe_lite) is "
         "not supported: prezero runs the DeepSeek MLA layout without it");
  EXPECT(GLM_LITE(""), "config f.json: model_type \"glm4_moe_lite\" is not supported: an MLA layout whose transformers "
         "class routes its experts as it defines, and the config states no scoring_func / topk_method for prezero to "
         "follow; prezero runs deepseek_v2, deepseek_v3, kimi_k2 (MLA)");
#undef GLM_LITE
  /* openbmb/MiniCPM3-4B: MLA with muP scales (embeddings x12, residuals x1.4 / sqrt(layers), logits / (H / 256)) */
  EXPECT("{\"architectures\": [\"MiniCPM3ForCausalLM\"], \"auto_map\": {\"AutoConfig\": "
         "\"configuration_minicpm.MiniCPM3Config\"}, \"model_type\": \"minicpm3\", \"hidden_size\": 2560, "
         "\"num_hidden_layers\": 62, \"num_attention_heads\": 40, \"num_key_value_heads\": 40, \"qk_nope_head_dim\": 64, "
         "\"qk_rope_head_dim\": 32, \"q_lora_rank\": 768, \"kv_lora_rank\": 256, \"v_head_dim\": 64, "
         "\"intermediate_size\": 6400, \"vocab_size\": 73448, \"max_position_embeddings\": 32768, \"scale_emb\": 12, "
         "\"dim_model_base\": 256, \"scale_depth\": 1.4}",
         "config f.json: field \"scale_emb\" (MiniCPM3's scaled embeddings, model_type minicpm3) is not supported: prezero "
         "runs the DeepSeek MLA layout without it");
  EXPECT("{\"model_type\": \"deepseek_v3\", " MLA_BASE ", \"layer_types\": [\"full_attention\", \"linear_attention\"]}",
         "config f.json: field \"layer_types\" has an entry other than \"full_attention\" (model_type deepseek_v3); "
         "prezero's MLA layers are all full attention");
  EXPECT_OK("{\"model_type\": \"deepseek_v3\", " MLA_BASE ", \"layer_types\": [\"full_attention\", \"full_attention\"]}");
}

/* Qwen2.5-1M's dual_chunk_attention_config: full attention equals dual chunk attention within the
 * first chunk (chunk_size - local_size tokens), so max_position_embeddings is cut to it. */
static void test_dual_chunk(void) {
#define QWEN2_1M(dca)                                                                                                  \
  "{\"model_type\": \"qwen2\", \"hidden_size\": 256, \"num_hidden_layers\": 2, \"num_attention_heads\": 8, "         \
  "\"num_key_value_heads\": 2, \"intermediate_size\": 512, \"vocab_size\": 1024, \"max_position_embeddings\": 1010000, " \
  "\"rope_theta\": 10000000.0, \"sliding_window\": 32768, \"use_sliding_window\": false" dca "}"
  pz_model_config c;
  const char *j = QWEN2_1M(", \"dual_chunk_attention_config\": {\"chunk_size\": 262144, \"local_size\": 8192, "
                           "\"original_max_position_embeddings\": 262144}");
  CHECK_OK(pz_config_parse(j, strlen(j), "f.json", &c));
  CHECK(c.max_position_embeddings == 262144 - 8192);
  j = QWEN2_1M("");
  CHECK_OK(pz_config_parse(j, strlen(j), "f.json", &c));
  CHECK(c.max_position_embeddings == 1010000);
  j = QWEN2_1M(", \"dual_chunk_attention_config\": null");
  CHECK_OK(pz_config_parse(j, strlen(j), "f.json", &c));
  CHECK(c.max_position_embeddings == 1010000);
  j = QWEN2_1M(", \"dual_chunk_attention_config\": {\"chunk_size\": 4000000, \"local_size\": 8192}");
  CHECK_OK(pz_config_parse(j, strlen(j), "f.json", &c)); /* a first chunk past the table: unchanged */
  CHECK(c.max_position_embeddings == 1010000);
  EXPECT(QWEN2_1M(", \"dual_chunk_attention_config\": {\"chunk_size\": 8192, \"local_size\": 8192}"),
         "config f.json: field \"dual_chunk_attention_config.local_size\" (8192) must be below chunk_size (8192)");
  EXPECT(QWEN2_1M(", \"dual_chunk_attention_config\": {\"local_size\": 8192}"),
         "config f.json: required field \"dual_chunk_attention_config.chunk_size\" is missing");
  EXPECT(QWEN2_1M(", \"dual_chunk_attention_config\": 1"),
         "config f.json: field \"dual_chunk_attention_config\" must be an object or null, got a number");
#undef QWEN2_1M
}

/* Llama 4's query scaling ("llama_4_scaling_beta" in the RoPE object: Mistral4Config writes it with beta 0.1 and
 * original_max_position_embeddings 8192): the queries are scaled by 1 + beta * ln(1 + floor(p / orig)), which is
 * exactly 1 for p < orig and 1 + 0.1 ln 2 at p = orig, so the positions are cut to orig. mistral4 (Mistral-Small-4:
 * MLA with Mistral4Config's defaults) runs where prezero's router is its router: one group (or every group chosen),
 * softmax scores; its RoPE object is required (Mistral4Config fills in YaRN without one). */
static void test_llama4_scaling(void) {
#define MISTRAL4(rope, extra)                                                                                          \
  "{\"architectures\": [\"Mistral4ForCausalLM\"], \"model_type\": \"mistral4\", \"vocab_size\": 131072, "                  \
  "\"hidden_size\": 4096, \"intermediate_size\": 12288, \"moe_intermediate_size\": 2048, \"num_hidden_layers\": 36, "       \
  "\"num_attention_heads\": 32, \"num_key_value_heads\": 32, \"n_shared_experts\": 1, \"n_routed_experts\": 128, "         \
  "\"kv_lora_rank\": 256, \"q_lora_rank\": 1024, \"qk_rope_head_dim\": 64, \"v_head_dim\": 128, \"qk_nope_head_dim\": 64, "  \
  "\"num_experts_per_tok\": 4, \"max_position_embeddings\": 1048576" rope extra "}"
#define M4_ROPE(beta)                                                                                                  \
  ", \"rope_parameters\": {\"type\": \"yarn\", \"rope_theta\": 10000.0, \"factor\": 128.0, "                                \
  "\"original_max_position_embeddings\": 8192, \"max_position_embeddings\": 1048576, \"beta_fast\": 32.0, "                 \
  "\"beta_slow\": 1.0, \"mscale_all_dim\": 1.0, \"mscale\": 1.0" beta ", \"partial_rotary_factor\": 0.5}"
  pz_model_config c;
  const char *j = MISTRAL4(M4_ROPE(", \"llama_4_scaling_beta\": 0.1"), "");
  CHECK_OK(pz_config_parse(j, strlen(j), "f.json", &c));
  CHECK(c.attn == PZ_ATTN_MLA && c.max_position_embeddings == 8192);
  CHECK(c.rope.type == PZ_ROPE_YARN && c.rope.factor == 128.f && c.rope.original_max_position_embeddings == 8192);
  CHECK(c.n_routed_experts == 128 && c.num_experts_per_tok == 4 && c.n_shared_experts == 1 && c.norm_topk_prob);
  CHECK(c.scoring_func == PZ_SCORE_SOFTMAX && c.topk_method == PZ_TOPK_GREEDY && c.first_k_dense_replace == 0);
  CHECK(c.routed_scaling_factor == 1.f && c.kv_lora_rank == 256 && c.q_lora_rank == 1024 && c.qk_nope_head_dim == 64);
  j = MISTRAL4(M4_ROPE(""), ""); /* no scaling: every position */
  CHECK_OK(pz_config_parse(j, strlen(j), "f.json", &c));
  CHECK(c.max_position_embeddings == 1048576);
  j = MISTRAL4(M4_ROPE(", \"llama_4_scaling_beta\": 0"), "");
  CHECK_OK(pz_config_parse(j, strlen(j), "f.json", &c));
  CHECK(c.max_position_embeddings == 1048576);
  j = MISTRAL4(M4_ROPE(", \"llama_4_scaling_beta\": 0.1"), ", \"n_group\": 4, \"topk_group\": 4");
  CHECK_OK(pz_config_parse(j, strlen(j), "f.json", &c)); /* every group chosen: no group limit */
  EXPECT(MISTRAL4("", ""), "config f.json: model_type mistral4 without \"rope_parameters\": Mistral4Config then fills in "
         "YaRN (factor 128) and Llama 4's query scaling, which prezero does not assume; give the RoPE object");
  EXPECT(MISTRAL4(M4_ROPE(""), ", \"n_group\": 8, \"topk_group\": 4"),
         "config f.json: field \"n_group\" is 8 with topk_group 4; model_type mistral4 chooses groups by the top-2 sum "
         "of softmax scores, a router prezero does not have (n_group 1 or topk_group = n_group runs)");
  EXPECT(MISTRAL4(M4_ROPE(""), ", \"scoring_func\": \"sigmoid\""),
         "config f.json: fields \"topk_method\" / \"scoring_func\" say other than greedy / softmax; model_type mistral4 "
         "has neither field (transformers routes by softmax scores); remove them");
  /* DeepSeek-V3's layout with the scaling in rope_scaling (Mistral's exports of it), text_config-wrapped */
  j = "{\"model_type\": \"mistral3\", \"text_config\": {\"model_type\": \"deepseek_v3\", \"hidden_size\": 64, "
      "\"num_hidden_layers\": 2, \"num_attention_heads\": 2, \"q_lora_rank\": null, \"kv_lora_rank\": 32, "
      "\"n_routed_experts\": 16, \"num_experts_per_tok\": 2, \"vocab_size\": 256, \"max_position_embeddings\": 294912, "
      "\"rope_scaling\": {\"type\": \"yarn\", \"factor\": 64.0, "
      "\"original_max_position_embeddings\": 4096, \"llama_4_scaling_beta\": 0.1}}}";
  CHECK_OK(pz_config_parse(j, strlen(j), "f.json", &c));
  CHECK(c.attn == PZ_ATTN_MLA && c.max_position_embeddings == 4096 && c.rope.factor == 64.f);
  /* a GQA layout: the lower of the RoPE object's and the top level's original_max_position_embeddings */
  j = "{" LLAMA_BASE ", \"original_max_position_embeddings\": 2048, \"rope_scaling\": {\"rope_type\": \"yarn\", "
      "\"factor\": 4.0, \"original_max_position_embeddings\": 4096, \"llama_4_scaling_beta\": 0.1}}";
  CHECK_OK(pz_config_parse(j, strlen(j), "f.json", &c));
  CHECK(c.attn == PZ_ATTN_GQA && c.max_position_embeddings == 2048);
  EXPECT("{" LLAMA_BASE ", \"rope_scaling\": {\"rope_type\": \"default\", \"llama_4_scaling_beta\": 0.1}}",
         "config f.json: field \"rope_scaling.llama_4_scaling_beta\" is 0.1 without "
         "\"rope_scaling.original_max_position_embeddings\" (the position from which the queries are scaled); give it");
#undef M4_ROPE
#undef MISTRAL4
}

int main(void) {
  test_llama4_scaling();
  test_other_mla();
  test_other_deepseek();
  test_dual_chunk();
  test_gqa();
  test_mla_variants();
  TEST_DONE();
}
