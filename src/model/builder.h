/* Builder of the per-rank decode graph of the DeepSeek-V2 family (docs/ARCHITECTURE.md §2): embedding,
 * per layer AR+RMSNorm -> qkv_a (or q_proj + kv_a) -> MLA -> AR+RMSNorm -> gate + MoE (or
 * dense MLP), final norm, vocab-parallel lm_head and argmax. Allocates no weight storage. */
#ifndef PZ_MODEL_BUILDER_H
#define PZ_MODEL_BUILDER_H
#include "core/ir.h"
#include "model/config.h"

/* Largest batch (rows m of batched tensors) a graph may be built for. */
#define PZ_MAX_BATCH 256

typedef struct pz_build_opts {
  int tp;               /* TP degree: must divide num_attention_heads, intermediate_size,
                           moe_intermediate_size and vocab_size */
  int64_t m;            /* maximum batch, 1..PZ_MAX_BATCH */
  int64_t max_ctx;      /* KV-cache capacity per sequence in tokens, 1..max_position_embeddings */
  int layers;           /* build the first `layers` layers; 0 = all num_hidden_layers */
} pz_build_opts;
#define PZ_BUILD_OPTS_INIT {.tp = 1, .m = 1, .max_ctx = 1024, .layers = 0}

/* Builds the rank-0 view of the per-rank decode graph (every rank runs the same graph; weight
 * tensors carry shard_dim/full_ne so rank r's slice is defined) and verifies it.
 * Tensors (m = opts->m, H = hidden_size, all batched tensors have ne[0] = m):
 *   input_ids [m] i32 and positions [m] i32 (INPUT), residual [m,H] f32 (STATE),
 *   layers.L.self_attn.kv_cache [m, max_ctx, kv_lora_rank + qk_rope_head_dim] bf16 (STATE),
 *   GEMM outputs and partial sums f32 (ACT), normed activations bf16 (ACT),
 *   lm_head.out [m, vocab/TP] f32 (g->out_logits), argmax.out [m] i32 (g->out_tokens).
 * Weights are bf16 (e_score_correction_bias f32) with init_scale = 1/sqrt(fan_in)
 * (norm weights: 1 + U(-0.05, 0.05)).
 * Errors: PZ_ERR_INVALID_ARG for tp/m/max_ctx/layers out of range or a TP degree that does
 * not divide the sharded dimensions (the message says which), PZ_ERR_OOM, PZ_ERR_VERIFY. */
pz_status pz_build_decode_graph(const pz_model_config *c, const pz_build_opts *o, pz_graph **out);
#endif
