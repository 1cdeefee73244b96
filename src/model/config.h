/* Model configuration of the DeepSeek-V2 family (V2, V2-Lite, V3, Kimi-K2; MLA) and of the Llama 3,
 * Qwen2 / 2.5, Qwen3, Qwen3-MoE, Mixtral, Mistral, GLM-4.5, Phi-3 / Phi-4 and dots.llm1 families (GQA), read from a Hugging Face config.json
 * (cJSON), or from a preset compiled into the binary. */
#ifndef PZ_MODEL_CONFIG_H
#define PZ_MODEL_CONFIG_H
#include <stdbool.h>
#include <stdint.h>
#include "core/ir.h"

/* Weight quantisation of a checkpoint (config.json "quantization_config"). */
typedef enum pz_wquant {
  PZ_WQ_NONE = 0,  /* no quantization_config: every weight bf16 (or f32) */
  PZ_WQ_INT4 = 1,  /* compressed-tensors "pack-quantized": symmetric INT4, one bf16 scale per group of
                      group_size input columns (strategy "group"); W4A16 */
  PZ_WQ_FP8 = 2    /* quant_method "fp8": e4m3 weights with f32 weight_scale_inv per block_rows x
                      block_cols block (DeepSeek-V3, Kimi-K2); W8A16 */
} pz_wquant;

#define PZ_QUANT_MAX_PATTERNS 16   /* entries of targets */
#define PZ_QUANT_MAX_IGNORE 256    /* entries of ignore kept: "re:" patterns and the exact names that may name a
                                    * routed expert (exports list every module they leave out by name: attention,
                                    * shared experts, routers, lm_head, which are read but not kept) */
#define PZ_QUANT_PATTERN_LEN 128   /* bytes of one entry, NUL included */
#define PZ_FP8_CHANNEL_COLS (1 << 20) /* block_cols of per-channel FP8 scales: one block spans a whole row (rows of
                                       * up to 2^20 columns; the W8A16 kernel's and the loader's limit) */

/* quantization_config as far as prezero runs it. targets / ignore are compressed-tensors' module
 * patterns: "Linear" (every Linear module), "re:REGEX" (Python re.match: anchored at the start
 * of the module name; read as a POSIX extended regex after Python's \d \D \w \W \s \S classes and "(?:"
 * groups are rewritten into it; escapes that would change meaning there (\A \Z \n, an escaped ] - ^ inside
 * brackets) and other Python-only syntax are refused) or an exact module name. */
typedef struct pz_quant_config {
  pz_wquant kind;
  int num_bits;                    /* INT4: 4 */
  int group_size;                  /* INT4: 32, the group of the kernels and of the graph's weight_scale tensors */
  int stored_group;                /* INT4: the checkpoint's group of input columns: its group_size (a multiple of
                                    * 32), or 0 for strategy "channel" (one scale per output row). The loader
                                    * repeats each stored scale over the 32-column groups it covers (exact) */
  int64_t block_rows, block_cols;  /* FP8: weight_block_size, [128, 128] in DeepSeek-V3 */
  int gptq;                        /* INT4 from GPTQ (quant_method "gptq"): tensors X.qweight [in/8, out], X.scales
                                    * [in/group, out], X.qzeros, X.g_idx, read transposed into the compressed-tensors
                                    * layout (checkpoint_quant.c); stored_group as for compressed-tensors */
  int gptq_zero;                   /* GPTQ: the qzeros nibble of the symmetric zero point 8: 7 in checkpoint_format
                                    * "gptq" (stored as zero - 1), 8 in "gptq_v2" */
  int gptq_experts;                /* GPTQ: 1 when the routed experts are quantised (modules_in_block_to_quantize
                                    * null, or naming them) */
  int ct_fp8;                      /* FP8 from compressed-tensors "float-quantized" (strategy "block" or "channel"): targets /
                                    * ignore are compressed-tensors patterns, and the block scales are stored as
                                    * "X.weight_scale" (DeepSeek's format: "X.weight_scale_inv"; both multiply) */
  int n_targets, n_ignore;
  char targets[PZ_QUANT_MAX_PATTERNS][PZ_QUANT_PATTERN_LEN];
  char ignore[PZ_QUANT_MAX_IGNORE][PZ_QUANT_PATTERN_LEN];
} pz_quant_config;

/* The attention family of a layout. */
typedef enum pz_attn_kind {
  PZ_ATTN_MLA = 0,   /* deepseek_v2, deepseek_v3 (Kimi-K2): multi-head latent attention */
  PZ_ATTN_GQA = 1    /* llama, mistral, qwen2, qwen3, qwen3_moe, mixtral, glm4_moe, phi3, dots1: grouped-query attention */
} pz_attn_kind;

#define PZ_CONFIG_MAX_MLP_ONLY 64  /* entries of qwen3_moe's mlp_only_layers */
#define PZ_CONFIG_WINDOW_WORDS 157 /* 64-bit words of the sliding-layer set: ceil(PZ_CONFIG_MAX_LAYERS / 64) */

/* Field names and meanings follow the Hugging Face DeepseekV2Config / DeepseekV3Config; the GQA
 * layouts' fields follow LlamaConfig, Qwen2Config, Qwen3Config, Qwen3MoeConfig and MixtralConfig and
 * are mapped onto the same struct (see pz_config_parse). */
typedef struct pz_model_config {
  char name[64];                   /* preset name, or model_type of a file, or its path's basename */
  char model_type[32];             /* config.json model_type ("deepseek_v3", "llama", "qwen3_moe", ...);
                                      "" when the file has none (read as the DeepSeek-V2 family) */
  pz_attn_kind attn;               /* MLA or GQA */
  /* GQA layouts only (0 / false for MLA): */
  int64_t num_key_value_heads;     /* kv heads (default num_attention_heads) */
  int64_t head_dim;                /* per-head width (default hidden_size / num_attention_heads) */
  int64_t rotary_dim;              /* leading dims of each head that RoPE rotates: head_dim, or
                                      int(head_dim * partial_rotary_factor) (glm4_moe: 0.5 by default,
                                      phi3: 1.0) */
  bool attention_bias;             /* q/k/v projections have biases (qwen2: always; glm4_moe: "attention_bias") */
  bool qk_norm;                    /* qwen3, qwen3_moe (glm4_moe: use_qk_norm; dots1 always): per-head RMSNorm of q and k before RoPE */
  bool tie_word_embeddings;        /* lm_head shares embed_tokens.weight */
  int64_t decoder_sparse_step;     /* 0: DeepSeek's MoE-layer rule; >= 1 (qwen3_moe, mixtral = 1): layer L is MoE
                                      when (L + 1) % step == 0 and L is not in mlp_only_layers */
  int n_mlp_only;
  int32_t mlp_only_layers[PZ_CONFIG_MAX_MLP_ONLY];
  int64_t hidden_size;             /* H */
  int64_t num_hidden_layers;
  int64_t num_attention_heads;
  int64_t q_lora_rank;             /* 0 when config.json has null (no q LoRA: q_proj layout, V2-Lite) */
  int64_t kv_lora_rank;
  int64_t qk_nope_head_dim, qk_rope_head_dim, v_head_dim;
  int64_t n_routed_experts;        /* 0: no MoE layers */
  int64_t n_shared_experts;        /* 0 when null or absent */
  int64_t num_experts_per_tok;     /* top-k */
  int64_t moe_intermediate_size;
  int64_t intermediate_size;       /* dense MLP layers */
  int64_t first_k_dense_replace;   /* layers [0, k) are dense */
  int64_t moe_layer_freq;          /* layer L >= k is MoE when L % freq == 0 */
  int64_t n_group, topk_group;
  pz_topk_method topk_method;      /* "greedy" | "group_limited_greedy" | "noaux_tc" */
  pz_scoring scoring_func;         /* "softmax" | "sigmoid" */
  bool norm_topk_prob;
  float routed_scaling_factor;
  int64_t vocab_size;
  int64_t max_position_embeddings;
  /* GQA sliding-window attention (0 / empty otherwise): sliding_window is the window W in tokens of the
     layers in sliding_layers (bit L % 64 of word L / 64; read with pz_config_layer_window) */
  int64_t sliding_window;
  uint64_t sliding_layers[PZ_CONFIG_WINDOW_WORDS];
  float rms_norm_eps;
  pz_rope_params rope;             /* theta = rope_theta; factor 1 when rope_scaling is null */
  pz_quant_config quant;           /* kind PZ_WQ_NONE without quantization_config */
  bool text_config;                /* the file wrapped the text model in "text_config" (Kimi-K2.5):
                                      its checkpoint names tensors "language_model.model.*" */
} pz_model_config;

/* Limits of the reader: every integer field is at most PZ_CONFIG_MAX_INT (int32 range, so that
 * shape products stay far inside int64), num_hidden_layers at most PZ_CONFIG_MAX_LAYERS. */
#define PZ_CONFIG_MAX_INT 2147483647LL
#define PZ_CONFIG_MAX_LAYERS 10000

/* Parses config.json text (len bytes, need not be NUL-terminated). Accepts the top-level
 * form and the form wrapped in "text_config" (multimodal checkpoints), after one leading UTF-8
 * byte-order mark (skipped, as Python's utf-8-sig does). `source` names the file in messages.
 * model_type (text_config's, else the outer one's) picks the family:
 *
 * DeepSeek-V2 family (attn PZ_ATTN_MLA): model_type deepseek_v2, deepseek_v3, kimi_* or absent,
 * or any other model_type with an MLA field (other deepseek* model_types without one, such as
 * DeepSeek-MoE v1's "deepseek", are refused as unsupported) (Hugging Face DeepseekV2Config / DeepseekV3Config).
 * Required fields: hidden_size, num_hidden_layers, num_attention_heads, q_lora_rank (may be
 * null), kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim, n_routed_experts,
 * num_experts_per_tok, moe_intermediate_size, intermediate_size, vocab_size,
 * max_position_embeddings. Optional with Hugging Face defaults: n_shared_experts (0),
 * first_k_dense_replace (0), moe_layer_freq (1), n_group (1), topk_group (1), topk_method
 * ("greedy"), scoring_func ("softmax"), norm_topk_prob (false), routed_scaling_factor (1),
 * rms_norm_eps (1e-6), rope_theta (10000), rope_scaling (null; only type "yarn" is supported:
 * factor, original_max_position_embeddings, beta_fast 32, beta_slow 1, mscale 1,
 * mscale_all_dim 0; rope.type PZ_ROPE_YARN, else PZ_ROPE_DEFAULT). decoder_sparse_step 0.
 *
 * GQA families (attn PZ_ATTN_GQA; transformers' LlamaConfig, Qwen2Config, Qwen3Config,
 * Qwen3MoeConfig, MixtralConfig, MistralConfig): model_type "llama", "qwen2", "qwen3", "qwen3_moe",
 * "mixtral", and "mistral" (Llama's layout without biases: num_key_value_heads 8, sliding_window
 * 4096 when absent; see sliding windows below).
 * Required: hidden_size, num_hidden_layers, num_attention_heads, intermediate_size, vocab_size,
 * max_position_embeddings; qwen3_moe also num_experts (-> n_routed_experts; or num_local_experts,
 * as transformers >= 5 writes it; both given must agree), num_experts_per_tok,
 * moe_intermediate_size; mixtral num_local_experts (-> n_routed_experts), num_experts_per_tok.
 * Optional, with the class defaults: num_key_value_heads (llama: num_attention_heads; qwen2 32,
 * qwen3 32, qwen3_moe 4, mixtral and mistral 8; null: num_attention_heads), head_dim (qwen3 128, others
 * hidden_size / num_attention_heads, which must then divide evenly; null: the quotient),
 * rms_norm_eps (1e-6; mixtral 1e-5), rope_theta (10000; mixtral 1e6), tie_word_embeddings
 * (false), hidden_act ("silu", the only one accepted), attention_bias (llama, qwen3, qwen3_moe:
 * must be false: their transformers classes then give o_proj a bias too; qwen2 always true; mixtral and
 * mistral always false), mlp_bias (llama: must be false);
 * qwen3_moe: norm_topk_prob (false), decoder_sparse_step (1, >= 1), mlp_only_layers ([]; at most
 * PZ_CONFIG_MAX_MLP_ONLY indices in 0..num_hidden_layers-1). qk_norm is true for qwen3 and
 * qwen3_moe. qwen3_moe routes by PZ_SCORE_SOFTMAX, mixtral by PZ_SCORE_TOPK_SOFTMAX with
 * norm_topk_prob true, moe_intermediate_size = intermediate_size and decoder_sparse_step 1;
 * dense models have n_routed_experts 0 (decoder_sparse_step 1). The MLA fields are 0, n_group /
 * topk_group / moe_layer_freq 1, topk_method greedy, routed_scaling_factor 1, n_shared_experts 0.
 * rope_scaling: null, {"rope_type" (or "type"): "default"}, "llama3" with factor (>= 1),
 * low_freq_factor, high_freq_factor (0 < low < high) and original_max_position_embeddings, all
 * required (rope.type PZ_ROPE_LLAMA3), or "yarn" (Qwen's long context; rope.type PZ_ROPE_YARN) with
 * factor (>= 1; null: max_position_embeddings / original) and optional original_max_position_embeddings
 * (the config's top-level one first, else max_position_embeddings), beta_fast / beta_slow (null or 0:
 * 32 / 1), mscale and mscale_all_dim (used only when both are non-zero, else the cos/sin factor is
 * 0.1 ln(factor) + 1), as transformers 5 reads them; attention_factor and truncate false are refused;
 * any other type is refused. transformers' newer
 * "rope_parameters" object (rope_theta inside it) is read the same way.
 * llama_4_scaling_beta in the RoPE object (non-zero; MLA and GQA): max_position_embeddings becomes at most the RoPE
 * object's original_max_position_embeddings (the top-level one where lower; one of them required), below which Llama
 * 4's query scale 1 + beta ln(1 + floor(p / orig)) is 1. model_type mistral4 (Mistral4Config, MLA): its class defaults,
 * norm_topk_prob true, softmax, greedy; refused without a RoPE object, with n_group > 1 and topk_group < n_group, or
 * with topk_method / scoring_func other than greedy / softmax.
 * dual_chunk_attention_config (Qwen2.5-1M; null or an object with chunk_size and local_size < chunk_size):
 * max_position_embeddings becomes min(max_position_embeddings, chunk_size - local_size), the first chunk,
 * where dual chunk attention is full attention.
 * glm4_moe (Glm4MoeConfig: GLM-4.5, GLM-4.5-Air): GQA attention (num_key_value_heads 8, head_dim
 * hidden_size / num_attention_heads when absent, attention_bias false, use_qk_norm false -> qk_norm,
 * rms_norm_eps 1e-5) with RoPE on the first rotary_dim = int(head_dim * partial_rotary_factor) dims of
 * each head (rotate-half pairs within them; partial_rotary_factor from rope_parameters / rope_scaling,
 * else the top level, else 0.5; 0 < factor <= 1, rotary_dim even and >= 2), and DeepSeek-V3's MoE:
 * n_routed_experts (or num_local_experts; both given must agree), num_experts_per_tok and
 * moe_intermediate_size required; n_shared_experts (1), first_k_dense_replace (1), n_group (1),
 * topk_group (1), norm_topk_prob (true), routed_scaling_factor (1); scoring sigmoid, topk_method
 * noaux_tc (e_score_correction_bias), decoder_sparse_step 0 and moe_layer_freq 1 (layers from
 * first_k_dense_replace are MoE). Layers past num_hidden_layers (the next-token-prediction layer) are
 * not read.
 * phi3 (Phi3Config: Phi-4, Phi-3-mini-4k, Phi-3-medium-4k; Phi3ForCausalLM stores fused qkv_proj and
 * gate_up_proj tensors, which the checkpoint loader splits): Llama's math without biases (attention_bias and
 * mlp_bias are not read: Phi3Attention and Phi3MLP have none), num_key_value_heads num_attention_heads,
 * rms_norm_eps 1e-5, partial_rotary_factor as glm4_moe's with default 1.0; rope_scaling null, "default" or
 * LongRoPE ("longrope", and "su" / "yarn", which Phi3Config reads as longrope; rope.type PZ_ROPE_LONGROPE,
 * pz_cfg_parse_longrope in config_impl.h: short / long factors, the required top-level
 * original_max_position_embeddings, the attention factor); sliding_window (null;
 * >= 1) on every layer (sliding windows below); resid_pdrop,
 * embd_pdrop and attention_dropout do not change inference and are not read; original_max_position_embeddings
 * is read under LongRoPE only.
 * dots1 (Dots1Config: dots.llm1.base, dots.llm1.inst): Qwen3's attention (q/k norms per head, qk_norm always; no
 * biases: attention_bias true, which would give o_proj a bias too, is refused; full RoPE; num_key_value_heads 32,
 * rms_norm_eps 1e-6, head_dim hidden_size / num_attention_heads when absent, null refused) and DeepSeek-V3's MoE
 * read as glm4_moe's with Dots1Config's defaults: n_shared_experts required (0 or more), first_k_dense_replace 0,
 * norm_topk_prob false (true with num_experts_per_tok 1 refused: transformers then gives the expert weight 1),
 * routed_scaling_factor 1, n_group / topk_group 1 (a null n_group is one group; a null topk_group under several
 * groups is refused); moe_layer_freq above 1, scoring_func other than "sigmoid" / "noaux_tc" and topk_method other
 * than "noaux_tc" (fields transformers does not read) are refused. Sliding layers as qwen2's, with
 * max_window_layers 62 and sliding_window 4096 by default; use_sliding_window is not read (nor does transformers
 * read it).
 * Sliding windows (sliding_window, sliding_layers; pz_config_layer_window), placed as transformers 5.25 places
 * them (pz_cfg_parse_gqa_window): mistral (4096 when absent), mixtral and phi3 (null when absent) slide every
 * layer by sliding_window; qwen3_moe every layer when use_sliding_window is true (sliding_window 4096 when
 * absent); qwen2 and qwen3 under use_sliding_window the layers whose layer_types entry is "sliding_attention",
 * else (no layer_types) those from max_window_layers (28) on; dots1 likewise without use_sliding_window. A query
 * at position p of a sliding layer attends key positions j with p - j < sliding_window; max_position_embeddings
 * is kept (the KV cache stays full length). Refused: llama's and glm4_moe's sliding_window below
 * max_position_embeddings (their transformers classes have none), a layer_types entry other than
 * "full_attention" / "sliding_attention" (llama, glm4_moe: other than "full_attention"), sliding layers
 * without a window, both kinds mixed in layer_types where every layer slides, a layer_types length other than
 * num_hidden_layers (qwen2, qwen3, dots1), a null max_window_layers under a window, and an explicit
 * sliding_window 0 where it applies (it masks every key).
 *
 * quantization_config (at the top level, else inside text_config, as transformers and vLLM read it): quant_method "compressed-tensors"
 * with format "pack-quantized" and one config group whose weights are type "int", num_bits 4,
 * strategy "group" with a group_size that is a multiple of 32 (or strategy "channel", group_size null), symmetric true, actorder null, not dynamic, and no
 * input/output activation quantisation; its targets and the top-level ignore list are kept
 * (at most PZ_QUANT_MAX_PATTERNS targets and PZ_QUANT_MAX_IGNORE ignore entries of PZ_QUANT_PATTERN_LEN - 1
 * bytes each, counting only the ignore entries kept: "re:" patterns and exact names of routed-expert
 * projections, see pz_quant_applies; symmetric absent reads as true, strategy absent as "group" when
 * group_size is given (compressed-tensors infers it so); the format may be given in the group; a "re:" pattern must
 * compile); or format "float-quantized" with weights type "float", num_bits 8, strategy "block" and a
 * block_structure [rows, cols] (integers 1..65536) or strategy "channel" (block 1 x PZ_FP8_CHANNEL_COLS), symmetric,
 * static, input activations null or dynamic FP8 (left
 * in bf16), no output activations (ct_fp8 set; targets / ignore as for INT4). Or quant_method "fp8" with fmt "e4m3" (when given) and weight_block_size
 * [rows, cols] (integers 1..65536). Or quant_method "gptq" with bits 4, sym true, desc_act false, group_size a
 * multiple of 32 or -1, checkpoint_format "gptq" / "gptq_v2" and no dynamic overrides (quant_gptq.c). Anything else
 * is PZ_ERR_CONFIG with one line naming the
 * unsupported field and value.
 * Errors: PZ_ERR_CONFIG for malformed/truncated JSON, a key or string value anywhere that is not
 * valid UTF-8 (the message names the field by its dotted path, e.g. "rope_scaling.type"), a
 * missing required field, a field of the wrong type (the message names the field), a key given
 * twice, an integer above the limits above, a float that is not finite, a model_type of no
 * supported family, an unsupported feature (named above), or inconsistent values (top-k >
 * experts, num_key_value_heads not dividing num_attention_heads, an odd head_dim or
 * qk_rope_head_dim). */
pz_status pz_config_parse(const char *json, size_t len, const char *source, pz_model_config *out);

/* Loads a preset by name (see pz_config_preset_names: configs/<name>.json, the published
 * config.json of e.g. deepseek_v3, kimi_k2, llama3_1_8b, qwen3_30b_a3b, mixtral_8x7b, plus the small
 * test layouts tiny (MLA), tiny_llama and tiny_qwen3_moe) or, when `name_or_path` contains '/'
 * or ends in ".json", a config.json file. NULL or "" means the default preset "tiny".
 * Errors: PZ_ERR_NOT_FOUND for an unknown preset (the message lists the presets), PZ_ERR_IO
 * for an unreadable file, and pz_config_parse's errors. */
pz_status pz_config_load(const char *name_or_path, pz_model_config *out);

/* The sliding window of layer L (0-based), in tokens: c->sliding_window when L is one of c's sliding layers, else
 * 0 (full causal attention; every MLA layer, every layer of a config without a window, L outside
 * 0..num_hidden_layers-1). A query at position p of a sliding layer attends key positions j with p - j < W
 * (pz_gqa_params.window). */
int64_t pz_config_layer_window(const pz_model_config *c, int64_t layer);

/* Comma-separated names of the embedded presets, e.g. "deepseek_v2_lite, deepseek_v3, ...". */
const char *pz_config_preset_names(void);

/* Whether layer L (0-based) uses MoE (else a dense MLP). decoder_sparse_step >= 1 (GQA layouts,
 * Hugging Face Qwen3MoeDecoderLayer): n_routed_experts > 0 && (L + 1) % decoder_sparse_step == 0 &&
 * L not in mlp_only_layers (Mixtral: every layer; dense models: none). decoder_sparse_step 0
 * (DeepSeek-V2 family, DeepseekV2DecoderLayer): n_routed_experts > 0 && L >= first_k_dense_replace
 * && L % moe_layer_freq == 0. */
bool pz_config_layer_is_moe(const pz_model_config *c, int64_t layer);

/* Whether the Linear module `module` (a Hugging Face module name such as
 * "model.layers.3.mlp.experts.0.gate_proj", with the checkpoint's prefix) is quantised under q:
 * kind != NONE and, for INT4, some target matches it and no ignore entry does (compressed-tensors'
 * rule); FP8: every Linear module but those an entry of modules_to_not_convert / ignored_layers (kept
 * in q->ignore) names: a suffix of the name, or a regex match from its start up to a module boundary
 * (transformers 5's should_convert_module; the checkpoint's dtypes decide the rest). q->ignore holds
 * only the entries that may name a routed expert's projection (the modules the builder asks about; INT4:
 * every "re:" pattern and the exact names of routed-expert projections): norm, router, attention,
 * shared-expert and lm_head names are dropped at parse time, so for such a module the answer may differ
 * from compressed-tensors' (the checkpoint's dtypes decide how it is read).
 * A "re:" pattern that does not compile matches nothing (pz_config_parse refuses such configs). */
bool pz_quant_applies(const pz_quant_config *q, const char *module);

/* The module-name prefix of the text model of a text_config-wrapped config, as q's patterns spell
 * it: "model.language_model." (transformers' newer layout, whose layers are "...language_model.layers.N")
 * when a target or ignore entry names that prefix (literally or regex-escaped), else
 * "language_model.model." (the published Kimi-K2.5 layout, layers "...model.layers.N"). A pattern
 * anchored to one layout never matches the other's names, so the builder asks with the layout the
 * patterns were written for. Never NULL. */
const char *pz_quant_text_prefix(const pz_quant_config *q);

/* "int4" / "fp8" / "bf16" for a kind (bf16 for PZ_WQ_NONE). */
const char *pz_wquant_name(pz_wquant k);

/* The quantisation prezero gives synthetic weights for `--quant int4|fp8`: INT4 group 32 with the
 * targets "Linear" and an ignore list that keeps everything but the routed experts in bf16
 * (attention, shared experts, the dense MLP, lm_head: Kimi-K2-Thinking's list), or FP8 128x128. */
void pz_quant_config_synthetic(pz_wquant kind, pz_quant_config *out);

/* YaRN attention-scale factor from DeepSeek-V2's modeling code (yarn_get_mscale):
 * 0.1 * mscale * ln(scale) + 1 for scale > 1, else 1. */
float pz_yarn_get_mscale(float scale, float mscale);
#endif
