/* Hugging Face checkpoint directory of the DeepSeek-V2 family and of the GQA layouts (Llama 3,
 * Qwen2, Qwen3, Qwen3-MoE, Mixtral): config.json + safetensors, one file or an index with shards.
 * Maps the builder's weight tensors to the published tensor names, fuses / splits / shards them
 * per TP rank and converts them to the graph's dtypes. */
#ifndef PZ_MODEL_CHECKPOINT_H
#define PZ_MODEL_CHECKPOINT_H
#include <stdbool.h>
#include "core/ir.h"
#include "model/config.h"
#include "model/safetensors.h"

typedef struct pz_checkpoint pz_checkpoint;

/* Opens DIR: DIR/model.safetensors when it is a regular file, else
 * DIR/model.safetensors.index.json ("weight_map": name -> shard file), the order of transformers'
 * from_pretrained (a directory with both loads the single file). Every shard is memory-mapped (pz_st_open) and its header checked;
 * the tensors of all shards form one table. A shard the index names by several spellings ("x", "./x", "a//x") or
 * through a link (same device and inode) is opened once. DIR/config.json is read (when present) for
 * quantization_config.weight_block_size (default [128, 128]) and tie_word_embeddings.
 * Errors (one line, naming the file): PZ_ERR_IO (no model.safetensors nor index, unreadable or
 * corrupt file: see pz_st_open, a malformed index or one over 256 MiB, a shard name outside DIR
 * (an absolute path or a ".." component), a tensor named in two shards, an index entry whose
 * shard lacks that tensor), PZ_ERR_OOM. *out is NULL on error. */
pz_status pz_checkpoint_open(const char *dir, pz_checkpoint **out);

/* Resolves every WEIGHT tensor of the per-rank graph g (built from config c with TP = g->info.tp)
 * to checkpoint tensors and checks them, before any storage is filled:
 *   embed_tokens.weight        <- model.embed_tokens.weight [vocab, H] (rows sharded by rank), or lm_head.weight
 *                                 when tie_word_embeddings is true and the embedding is absent (safetensors'
 *                                 save_model keeps only the first name, sorted, of tensors sharing memory)
 *   norm.weight                <- model.norm.weight;  lm_head.weight <- lm_head.weight (or
 *                                 model.embed_tokens.weight when tie_word_embeddings is true)
 *   layers.L.self_attn.fused_qkv_a_proj.weight <- rows of model.layers.L.self_attn.q_a_proj.weight
 *                                 [q_lora, H] then kv_a_proj_with_mqa.weight [kv_lora + rope, H]
 *   layers.L.self_attn.kv_b_proj.w_uk / w_uv <- kv_b_proj.weight [heads*(nope+v), kv_lora]: head h's
 *                                 rows [h*(nope+v), +nope) are W_UK[h], the next v rows W_UV[h]
 *                                 (DeepSeek-V2 modeling: kv_b output viewed as [heads, nope+v])
 *   layers.L.mlp.experts.{gate,up,down}_proj.weight [E, ., .] <- model.layers.L.mlp.experts.e.*
 *                                 (one 2-D tensor per expert, as published), or the
 *                                 transformers >= 5 fused layout when expert 0 is absent:
 *                                 mlp.experts.gate_up_proj [E, 2I, H] (gate rows, then up rows)
 *                                 and mlp.experts.down_proj [E, H, I]
 *   every other layers.L.* <- model.layers.L.* with the same suffix.
 * GQA layouts (c->attn == PZ_ATTN_GQA: llama, mistral, qwen2, qwen3, qwen3_moe, mixtral, glm4_moe, phi3, dots1;
 * Hugging Face Llama (= Mistral) / Qwen2 / Qwen3 / Qwen3Moe / Mixtral / Phi3 / Dots1 modeling names), per TP rank r, heads =
 * num_attention_heads / TP, kvh = num_key_value_heads / TP (1 when TP > num_key_value_heads, TP
 * a multiple of it), d = head_dim, I = intermediate_size:
 *   layers.L.self_attn.qkv_proj.weight [(heads + 2*kvh)*d, H] <- rows [r*heads*d, +heads*d) of
 *                                 model.layers.L.self_attn.q_proj.weight [num_attention_heads*d, H],
 *                                 then rows [k0*d, +kvh*d) of k_proj.weight and of v_proj.weight
 *                                 [num_key_value_heads*d, H], k0 = r*kvh, or r / (TP /
 *                                 num_key_value_heads) when the kv heads are replicated (as vLLM)
 *   layers.L.self_attn.qkv_proj.bias [(heads + 2*kvh)*d] f32 <- the same elements of
 *                                 {q,k,v}_proj.bias (BF16, F16 or F32 in the file; qwen2)
 *   layers.L.self_attn.{q_norm,k_norm}.weight [d] <- model.layers.L.self_attn.{q,k}_norm.weight
 *                                 (qwen3, qwen3_moe; replicated); o_proj, down_proj by shard_dim
 *   layers.L.mlp.gate_up_proj.weight [2*I/TP, H] <- rows [r*I/TP, +I/TP) of mlp.gate_proj.weight
 *                                 [I, H], then the same rows of mlp.up_proj.weight
 *   phi3 (Phi3ForCausalLM publishes them fused; no biases): q_proj / k_proj / v_proj above are rows
 *                                 [0, num_attention_heads*d), the next num_key_value_heads*d and the last
 *                                 num_key_value_heads*d of model.layers.L.self_attn.qkv_proj.weight
 *                                 [(num_attention_heads + 2*num_key_value_heads)*d, H]; gate_proj / up_proj
 *                                 the first and second I rows of mlp.gate_up_proj.weight [2*I, H]
 *   qwen3_moe experts and router: the DeepSeek names above (mlp.gate.weight, mlp.experts.e.*)
 *   mixtral: layers.L.mlp.gate.weight <- model.layers.L.block_sparse_moe.gate.weight [E, H];
 *                                 layers.L.mlp.experts.{gate,up,down}_proj.weight <-
 *                                 block_sparse_moe.experts.e.{w1, w3, w2}.weight (published
 *                                 layout); a checkpoint with none of those but mlp.gate.weight /
 *                                 mlp.experts.* (as transformers >= 5 holds Mixtral) is read by
 *                                 the DeepSeek rules (per expert, or fused gate_up_proj / down_proj)
 *   lm_head.weight                <- lm_head.weight, or model.embed_tokens.weight when
 *                                 tie_word_embeddings (config.json: the text model's, or a
 *                                 text_config wrapper's own; or c) and lm_head.weight is absent
 * Every name above gets the prefix "language_model." when the checkpoint has
 * language_model.model.embed_tokens.weight and no model.embed_tokens.weight (Kimi-K2.5); and
 * "model.X" is read as "model.language_model.X" (lm_head.weight as it is) when the checkpoint has
 * model.language_model.embed_tokens.weight and no model.embed_tokens.weight (transformers' newer
 * multimodal layout).
 * Quantised routed experts (the graph's, from config.json's quantization_config; core/ir.h
 * PZ_MOE_S_*) are copied as stored, per expert e and projection P:
 *   INT4: layers.L.mlp.experts.P.weight_packed i32 <- ...experts.e.P.weight_packed I32 [out, in/8]
 *         and .weight_scale bf16 <- ...experts.e.P.weight_scale BF16 [out, in/32] (compressed-tensors
 *         pack-quantized; a TP shard of down_proj's columns is a slice of whole words and groups);
 *   FP8:  layers.L.mlp.experts.P.weight u8 <- F8_E4M3 [out, in] and .weight_scale_inv f32 <- F32
 *         [ceil(out/bm), ceil(in/bn)].
 * A bf16 graph weight X.weight whose checkpoint tensor is INT4 (X.weight_packed I32 [out, in/8],
 * X.weight_scale BF16 [out, in/group], X.weight_shape I64/I32 [2] = [out, in]; e.g. shared experts
 * a config does not ignore) is dequantised at load: bf16(q * scale) (core/quant.h).
 * Each rank's slice follows the tensor's shard_dim / full_ne (builder.c).
 * Loadable dtypes: BF16 (copied), F32 (rounded to bf16 to nearest even, or kept for f32 tensors
 * such as e_score_correction_bias), F16 (as Llama 2 publishes: converted to f32 exactly, then as
 * F32), F8_E4M3 with NAME_scale_inv F32 block scales (`X.weight` ->
 * `X.weight_scale_inv` [ceil(rows/bm), ceil(cols/bn)]), dequantised to bf16 at load
 * (core/fp8.h): one table look-up, one f32 multiply and one rounding per element, about 0.7 ns per
 * parameter on one core (vs 0.1 ns for a bf16 copy; measured on this project's 2-core CPU
 * machine, 4096x7168 weight), i.e. some 8 core-minutes for DeepSeek-V3's 671B parameters; the
 * stored weights then take 2 bytes per parameter instead of 1 (the backends have no FP8 GEMM).
 * Errors (one line): PZ_ERR_NOT_FOUND (a needed tensor is missing, INT4 scales included: the
 * message names it and the graph tensor it feeds), PZ_ERR_SHAPE (shape differs from what
 * config.json implies; a packed tensor not [out, in/8], scales not [out, in/group], weight_shape
 * missing or not [out, in]), PZ_ERR_DTYPE (a dtype other than the above, FP8 without usable
 * scales, experts stored unquantised where config.json says INT4), PZ_ERR_IO (an FP8 block scale
 * that is NaN, infinite or above FLT_MAX / 448 in magnitude), PZ_ERR_CONFIG (tie_word_embeddings true
 * while the checkpoint's lm_head.weight differs from the embedding: other bytes, and other values when the
 * dtypes differ), PZ_ERR_OOM. */
pz_status pz_checkpoint_plan(pz_checkpoint *ck, const pz_model_config *c, const pz_graph *g);

/* Fills dst (the tensor's per-rank storage: ne[] elements of t->dtype, contiguous) with TP rank
 * `rank`'s slice of graph weight t, as planned. Signature of the CPU executor's load_weight hook
 * (user = the checkpoint); any backend can call it to produce host tensors.
 * Shows a progress bar on stderr while loading when stderr is a terminal, or when the load has
 * taken more than 1 s (then as plain lines); PREZERO_PROGRESS=0 turns it off.
 * Errors: PZ_ERR_INVALID_ARG (t was not planned, or rank out of range), PZ_ERR_IO (a NaN or infinite INT4 /
 * FP8 expert scale, or a weight dequantised from one), PZ_ERR_OOM. */
pz_status pz_checkpoint_fill(void *ck, const pz_tensor *t, int rank, void *dst);

/* Local rows [row0, row0 + n_rows) of what pz_checkpoint_fill writes (a row = the last dim,
 * ne[ndim-1] elements; rows are numbered row-major over the other dims of the per-rank tensor),
 * into dst[n_rows * ne[ndim-1]] elements of t->dtype. Filling a tensor in any cut of its rows
 * gives pz_checkpoint_fill's bytes; progress counts the rows' bytes. Lets a backend stage a large
 * tensor through a bounded host buffer (the CUDA executor's load_weight hook).
 * Errors: those of pz_checkpoint_fill, PZ_ERR_INVALID_ARG (rows outside the tensor). */
pz_status pz_checkpoint_fill_rows(void *ck, const pz_tensor *t, int rank, int64_t row0, int64_t n_rows, void *dst);

/* The tensor `name` of any shard, or NULL. */
const pz_st_tensor *pz_checkpoint_find(const pz_checkpoint *ck, const char *name);

/* Number of tensors over all shards. */
int pz_checkpoint_count(const pz_checkpoint *ck);

/* Reads DIR/config.json with pz_config_load. Errors: as pz_config_load (PZ_ERR_IO when the
 * directory has no readable config.json), PZ_ERR_INVALID_ARG for NULL. */
pz_status pz_checkpoint_load_config(const char *dir, pz_model_config *out);

/* pz_checkpoint_open + pz_checkpoint_plan; on error nothing is left open. */
pz_status pz_checkpoint_open_planned(const char *dir, const pz_model_config *c, const pz_graph *g,
                                     pz_checkpoint **out);

/* Unmaps every shard and frees; NULL is ignored. */
void pz_checkpoint_close(pz_checkpoint *ck);
#endif
