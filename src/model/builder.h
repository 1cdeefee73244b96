/* Builder of the per-rank decode graph (docs/ARCHITECTURE.md §2): embedding, per layer
 * AR+RMSNorm -> attention -> AR+RMSNorm -> MLP, final norm, vocab-parallel lm_head and argmax.
 * DeepSeek-V2 family (c->attn PZ_ATTN_MLA): qkv_a (or q_proj + kv_a) -> MLA -> gate + MoE (or
 * DENSE_MLP). GQA layouts (PZ_ATTN_GQA: Llama 3, Qwen2, Qwen3, Qwen3-MoE, Mixtral): qkv_proj GEMM
 * (+ bias) -> GQA_ATTN -> gate_up_proj GEMM -> SILU_MUL -> down_proj GEMM, or gate + MoE on the
 * layers pz_config_layer_is_moe names. Allocates no weight storage. */
#ifndef PZ_MODEL_BUILDER_H
#define PZ_MODEL_BUILDER_H
#include "core/ir.h"
#include "model/config.h"

/* Largest batch (rows m of batched tensors) a graph may be built for. */
#define PZ_MAX_BATCH 256

typedef struct pz_build_opts {
  int tp;               /* TP degree: must divide num_attention_heads, intermediate_size,
                           moe_intermediate_size and vocab_size; GQA: and divide
                           num_key_value_heads or be a multiple of it */
  int64_t m;            /* maximum batch, 1..PZ_MAX_BATCH */
  int64_t max_ctx;      /* KV-cache capacity per sequence in tokens, 1..max_position_embeddings */
  int layers;           /* build the first `layers` layers; 0 = all num_hidden_layers */
} pz_build_opts;
#define PZ_BUILD_OPTS_INIT {.tp = 1, .m = 1, .max_ctx = 1024, .layers = 0}

/* Builds the rank-0 view of the per-rank decode graph (every rank runs the same graph; weight
 * tensors carry shard_dim/full_ne (and parts, core/ir.h) so rank r's slice is defined) and
 * verifies it.
 * Tensors (m = opts->m, H = hidden_size, all batched tensors have ne[0] = m):
 *   input_ids [m] i32 and positions [m] i32 (INPUT), residual [m,H] f32 (STATE),
 *   MLA: layers.L.self_attn.kv_cache, the page pool [m * max_blocks, 64, kv_lora_rank +
 *     qk_rope_head_dim] bf16 (STATE, not batched), max_blocks = ceil(max_ctx / 64), and one
 *     block_table [m, max_blocks] i32 (STATE) read by every MLA layer (core/kv_pages.h; the
 *     executors set it to the identity, the contiguous layout),
 *   GEMM outputs and partial sums f32 (ACT), normed activations bf16 (ACT),
 *   lm_head.out [m, vocab/TP] f32 (g->out_logits), argmax.out [m] i32 (g->out_tokens).
 * GQA layer L per rank, heads = num_attention_heads/TP, kvh = num_key_value_heads/TP (1 when TP is
 * a multiple of num_key_value_heads: rank r holds kv head r / (TP/num_key_value_heads)), d = head_dim,
 * I = intermediate_size/TP:
 *   layers.L.self_attn.qkv_proj.weight [(heads+2*kvh)*d, H] bf16 (rows q | k | v of this rank:
 *     parts {heads*d, kvh*d, kvh*d} of {NH*d, NKV*d, NKV*d}), .bias [(heads+2*kvh)*d] f32 when
 *     attention_bias (the GEMM's third source); q_norm / k_norm .weight [d] bf16 when qk_norm;
 *   layers.L.self_attn.o_proj.weight [H, heads*d] bf16 (shard_dim 1);
 *   layers.L.self_attn.k_cache / v_cache [m, kvh, max_ctx, d] bf16 (STATE, shard_dim 1 over the
 *     num_key_value_heads kv heads); GQA_ATTN softmax_scale = head_dim^-0.5, eps = rms_norm_eps;
 *   dense: layers.L.mlp.gate_up_proj.weight [2*I, H] (this rank's gate rows, then its up rows),
 *     layers.L.mlp.act_fn.out [m, I] bf16, layers.L.mlp.down_proj.weight [H, I] (shard_dim 1);
 *   MoE: layers.L.mlp.gate.weight [E, H] + the MOE node as for DeepSeek (no shared experts).
 *   tie_word_embeddings: lm_head reads embed_tokens.weight (no lm_head.weight).
 * Weights are bf16 (e_score_correction_bias and qkv biases f32) with init_scale = 1/sqrt(fan_in)
 * (norm weights: 1 + U(-0.05, 0.05)).
 * Errors: PZ_ERR_INVALID_ARG for tp/m/max_ctx/layers out of range, a TP degree that does not
 * divide the sharded dimensions (the message says which) or breaks the kv-head rule, a GQA
 * config whose num_key_value_heads does not divide num_attention_heads or whose head_dim is odd,
 * PZ_ERR_OOM, PZ_ERR_VERIFY. */
pz_status pz_build_decode_graph(const pz_model_config *c, const pz_build_opts *o, pz_graph **out);
#endif
