/* The decode-graph IR: tensors (dtype, shape, element strides, views into a base buffer)
 * and nodes (op, typed params, src/dst tensor ids, layer and role). One graph describes the
 * per-rank decode step; every TP rank runs the same graph on its own storage. */
#ifndef PZ_CORE_IR_H
#define PZ_CORE_IR_H
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include "core/dtype.h"
#include "core/status.h"
#ifdef __cplusplus
extern "C" {
#endif

#define PZ_MAX_DIMS 4    /* dimensions of a tensor */
#define PZ_MAX_SRC 20    /* inputs of a node (MLA_ATTN uses PZ_MLA_NSRC of them) */
#define PZ_MAX_DST 4     /* outputs of a node */
#define PZ_NAME_LEN 96   /* bytes of a tensor / node name, NUL included (longer names are cut) */
#define PZ_MAX_PARTS 3   /* parts of a fused weight along its shard dim (pz_tensor.n_parts) */

typedef enum pz_op {
#define PZ_OP(e, name, coll) PZ_OP_##e,
#include "core/ops.def"
#undef PZ_OP
  PZ_OP_COUNT
} pz_op;

typedef enum pz_role {
#define PZ_ROLE(e, suffix) PZ_ROLE_##e,
#include "core/roles.def"
#undef PZ_ROLE
  PZ_ROLE_COUNT
} pz_role;

typedef enum pz_tensor_kind {
  PZ_T_ACT = 0,   /* activation, produced by a node during the step */
  PZ_T_INPUT,     /* fed by the host each step (token ids, positions) */
  PZ_T_WEIGHT,    /* model parameter, filled at load (random or checkpoint) */
  PZ_T_STATE,     /* persists across steps: residual stream, KV cache */
  PZ_T_BUFFER     /* scratch buffer added by a pass (e.g. a prezero buffer) */
} pz_tensor_kind;

/* A tensor. Shape ne[0..ndim-1] is outermost-first (ne = {m, n} for an [m,n] matrix);
 * stride[] is in elements. A view (view_of >= 0) has no storage of its own: its element
 * (i0,i1,..) lives at base[view_offset + Σ i_d*stride[d]] of tensor view_of, which owns
 * storage. When `batched` is set, ne[0] is the batch m (the graph's maximum); a step may
 * run with fewer rows. */
typedef struct pz_tensor {
  int id;
  char name[PZ_NAME_LEN];
  pz_dtype dtype;
  pz_tensor_kind kind;
  int ndim;
  int64_t ne[PZ_MAX_DIMS];
  int64_t stride[PZ_MAX_DIMS];
  int view_of;            /* -1: owns its storage */
  int64_t view_offset;    /* elements into view_of's storage */
  bool batched;           /* ne[0] is the batch dimension */
  /* Weights (and GQA KV caches): how the full (unsharded) tensor maps to this rank. shard_dim = -1
   * means replicated; otherwise this rank holds [rank*ne[d], (rank+1)*ne[d]) of full_ne[d], unless
   * parts say otherwise: n_parts >= 2 cuts dim shard_dim into parts sharded separately (GQA
   * qkv_proj: q | k | v rows, gate_up_proj: gate | up rows), part p spanning part_ne[p] of ne[d]
   * and part_full[p] of full_ne[d], in order; n_parts 0 is one part (ne[d], full_ne[d]). A part
   * with part_ne * tp > part_full is replicated: rank r holds slice r / (tp * part_ne / part_full)
   * of it (GQA kv heads when TP > num_key_value_heads). pz_fill_index (core/fill_rule.h) maps it. */
  int shard_dim;
  int64_t full_ne[PZ_MAX_DIMS];
  int n_parts;
  int64_t part_ne[PZ_MAX_PARTS], part_full[PZ_MAX_PARTS];
  float init_scale;       /* weights: values ~ U(-s, s) (+ init_offset) */
  float init_offset;
} pz_tensor;

/* GEMM / MM_MAYBE_PREZERO / LM_HEAD.  C[m,n] (+)= A[m,k] · W[n,k]^T (+ bias).
 * src: {A, W, bias or -1}; dst: {C}. C may be a column slice (stride[0] > n). */
typedef struct pz_gemm_params {
  bool zero_init;     /* true: the GEMM zeroes C itself; false: C must be zero on entry */
  int split_k;        /* 0: backend chooses; >=1: number of K splits (1 = not split-K) */
  int prezero_buf;    /* MM_MAYBE_PREZERO: tensor id of the whole [m,n_total] buffer */
  int64_t n_base;     /* MM_MAYBE_PREZERO: columns [0,n_base) of the buffer are always zeroed by the donor */
  int64_t col_offset; /* MM_MAYBE_PREZERO: first column of C inside the buffer */
} pz_gemm_params;

/* AR_RMSNORM / AR_RMSNORM_MAYBE_PREZERO / RMSNORM.
 * AR: src {partial[m,H] f32, weight[H] bf16, residual[m,H] f32 or -1}; dst {x_norm[m,H] bf16, residual}.
 * residual_out = (has_residual ? residual_in : 0) + Σ_ranks partial (fixed rank order);
 * x_norm = bf16(residual_out * rsqrt(mean(residual_out²) + eps) * weight). */
typedef struct pz_norm_params {
  float eps;             /* rms_norm_eps */
  bool has_residual;     /* false for layer 0 (residual starts as the embedding) */
  /* AR_RMSNORM_MAYBE_PREZERO: zero_fill = (buf, n_total, n_base) */
  int fill_buf;          /* tensor id of the [m, n_total] f32 buffer, -1 if none */
  int64_t n_total;       /* columns zeroed when prezero_active(m) */
  int64_t n_base;        /* columns always zeroed (prefix) */
} pz_norm_params;

/* config.json "rope_scaling" type. */
typedef enum pz_rope_type {
  PZ_ROPE_DEFAULT = 0,  /* rope_scaling null (or type "default"): inv_freq_i = theta^(-2i/dim) */
  PZ_ROPE_YARN = 1,     /* DeepSeek-V2 YaRN (pz_ref_yarn_inv_freq, core/rope.h) */
  PZ_ROPE_LLAMA3 = 2,   /* Llama 3.1 "llama3" (pz_ref_llama3_inv_freq, core/rope.h) */
  PZ_ROPE_LONGROPE = 3  /* Phi-3 "longrope": per-dimension short / long factors chosen by position
                           (pz_rope_longrope_inv_freq, core/rope.h) */
} pz_rope_type;

/* LongRoPE factors of each kind per rope params: rotary dims up to 2 * PZ_ROPE_MAX_FACTORS (every phi3
 * model rotates at most 128; the CUDA attention kernel's head_dim is at most 128 too). Every graph node
 * carries them (pz_op_params), so the bound is kept to what runs. */
#define PZ_ROPE_MAX_FACTORS 64

/* RoPE parameters. YaRN (DeepSeek-V2 "rope_scaling", type yarn; the formulas are those of
 * DeepseekV2YarnRotaryEmbedding in DeepSeek-V2's modeling_deepseek.py, see
 * pz_ref_yarn_inv_freq in core/rope.h): factor 1 = plain RoPE. The MLA layouts read
 * factor > 1 as YaRN; the GQA layouts read `type` (pz_rope_inv_freq, core/rope.h). */
typedef struct pz_rope_params {
  float theta;                 /* rope_theta: base of the inverse frequencies */
  float factor;                /* context extension factor (<= 1: no YaRN) */
  int64_t original_max_position_embeddings; /* tokens of the pre-training context */
  float beta_fast, beta_slow;  /* rotations bounding the frequency ramp (32 and 1 by default) */
  float mscale, mscale_all_dim; /* attention-scale coefficients of yarn_get_mscale */
  pz_rope_type type;           /* PZ_ROPE_DEFAULT unless rope_scaling names a type */
  float low_freq_factor, high_freq_factor; /* llama3: 1 and 4 in Llama 3.1 */
  /* longrope: positions < original_max_position_embeddings rotate by short_factor, the others by
   * long_factor (inv_freq_j = 1 / (factor_j * theta^(2j/dim)), n_factors = dim / 2 each); cos and sin
   * are scaled by attention_factor. Zero (unused) for the other types. */
  int32_t n_factors;
  float attention_factor;
  float short_factor[PZ_ROPE_MAX_FACTORS], long_factor[PZ_ROPE_MAX_FACTORS];
} pz_rope_params;

/* Source slots of MLA_ATTN (index into node->src; -1 when absent). */
enum {
  PZ_MLA_QKV_A = 0,   /* [m, q_lora + kv_lora + rope] f32: qkv_a output (q LoRA layouts) */
  PZ_MLA_Q,           /* [m, heads*(nope+rope)] f32: q_proj output (no q LoRA, V2-Lite) */
  PZ_MLA_KV_A,        /* [m, kv_lora + rope] f32: kv_a output (no q LoRA) */
  PZ_MLA_QA_NORM_W,   /* [q_lora] bf16 */
  PZ_MLA_QB_W,        /* [heads*(nope+rope), q_lora] bf16 (heads per rank) */
  PZ_MLA_KVA_NORM_W,  /* [kv_lora] bf16 */
  PZ_MLA_W_UK,        /* [heads, nope, kv_lora] bf16: kv_b_proj rows for k_nope */
  PZ_MLA_W_UV,        /* [heads, v, kv_lora] bf16: kv_b_proj rows for v */
  PZ_MLA_O_W,         /* [H, heads*v] bf16 (row-parallel: k sharded) */
  PZ_MLA_KV_CACHE,    /* bf16, replicated over ranks. Without a block table: [m, >= max_ctx, kv_lora + rope],
                         one contiguous slab per sequence. With one: the page pool [n_pages, PZ_KV_BLOCK,
                         kv_lora + rope]; position j of sequence i is row j % PZ_KV_BLOCK of page
                         block_table[i, j / PZ_KV_BLOCK] (core/kv_pages.h) */
  PZ_MLA_POS,         /* [m] i32: position of the new token = tokens already in the cache */
  PZ_MLA_QB_PREZERO,  /* optional [m, heads*(nope+rope)] f32 slice, pre-zeroed by the donor */
  PZ_MLA_OPROJ_PREZERO, /* optional [m, H] f32 slice, pre-zeroed by the donor */
  PZ_MLA_BLOCK_TABLE, /* optional [m, max_blocks] i32 STATE (max_blocks = ceil(max_ctx / PZ_KV_BLOCK)):
                         sequence i's logical block b is page block_table[i, b] of the KV_CACHE pool.
                         The builder's graphs share one "block_table" over all layers, which the
                         executors set to the identity i * max_blocks + b (core/kv_pages.h) */
  PZ_MLA_NSRC
};
#define PZ_KV_BLOCK 64 /* tokens per KV-cache page (PZ_MLA_BLOCK_TABLE) */

typedef struct pz_mla_params {
  int n_heads;             /* heads on this rank = num_attention_heads / TP */
  int64_t hidden;          /* H */
  int64_t q_lora_rank;     /* 0: no q LoRA (q_proj layout) */
  int64_t kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim;
  int64_t max_ctx;
  float eps;               /* q_a / kv_a layernorm eps */
  float softmax_scale;     /* 1/sqrt(nope+rope) * yarn mscale² (DeepSeek-V2 modeling) */
  pz_rope_params rope;
  /* Set by the prezero pass with the slots: the donor's zero_fill (n_total, n_base), so the
   * op evaluates the same gate as the donor: a slot inside [0, n_base) is always pre-zeroed;
   * one beyond n_base only when prezero_active(m, n_total, f32, H, tp). 0 when unset. */
  int64_t prezero_n_total, prezero_n_base;
  int64_t qb_col_offset, oproj_col_offset; /* columns of the slots inside the buffer */
} pz_mla_params;

/* Router scoring. SOFTMAX: softmax over all E logits, then top-k of the probabilities (DeepSeek-V2,
 * Qwen3-MoE; norm_topk_prob renormalises the k). SIGMOID: DeepSeek-V3. TOPK_SOFTMAX: top-k of the
 * logits, then softmax over those k (Mixtral; the k weights sum to 1). */
typedef enum pz_scoring { PZ_SCORE_SOFTMAX = 0, PZ_SCORE_SIGMOID = 1, PZ_SCORE_TOPK_SOFTMAX = 2 } pz_scoring;
typedef enum pz_topk_method {
  PZ_TOPK_GREEDY = 0,            /* plain top-k over scores */
  PZ_TOPK_GROUP_LIMITED = 1,     /* group_limited_greedy: groups ranked by max score */
  PZ_TOPK_NOAUX_TC = 2           /* groups ranked by sum of top-2 of (score + bias) */
} pz_topk_method;

/* Source slots of MOE. Expert weights are sharded by TP along the intermediate dim. */
enum {
  PZ_MOE_X = 0,          /* [m,H] bf16 x_norm */
  PZ_MOE_LOGITS,         /* [m,E] f32 router logits (output of the gate GEMM) */
  PZ_MOE_BIAS,           /* [E] f32 e_score_correction_bias, or -1 */
  PZ_MOE_W_GATE,         /* [E, I/TP, H] bf16 */
  PZ_MOE_W_UP,           /* [E, I/TP, H] bf16 */
  PZ_MOE_W_DOWN,         /* [E, H, I/TP] bf16 */
  PZ_MOE_SH_GATE,        /* [S*I/TP, H] bf16 shared experts (S = n_shared_experts), or -1 */
  PZ_MOE_SH_UP,          /* [S*I/TP, H] bf16 */
  PZ_MOE_SH_DOWN,        /* [H, S*I/TP] bf16 */
  PZ_MOE_NSRC,
  /* Quantised routed experts only (pz_moe_params.wquant != 0): the node then has PZ_MOE_NSRC_Q
   * sources, the three scales after the bf16 layout's slots (core/quant.h gives the element rules):
   * INT4: W_GATE / W_UP are i32 [E, I/TP, H/8] and W_DOWN i32 [E, H, I/TP/8] (weight_packed words),
   *       the scales bf16 [E, I/TP, H/32] and [E, H, I/TP/32] (weight_scale, one per group of 32);
   * FP8:  W_* are u8 (e4m3) of the bf16 shapes, the scales f32 [E, ceil(I/TP/bm), ceil(H/bn)] and
   *       [E, ceil(H/bm), ceil(I/TP/bn)] (weight_scale_inv). */
  PZ_MOE_S_GATE = PZ_MOE_NSRC,
  PZ_MOE_S_UP,
  PZ_MOE_S_DOWN,
  PZ_MOE_SH_GU_PREZERO, /* optional [m, 2 * shared_inter] f32 slice of a donor's buffer beyond its n_base
                         * (zeroed by the donor when the fill gate holds): the shared experts' gate | up
                         * GEMM output when they run as GEMMs (cuda mlp_gemm.h); set by the prezero pass
                         * only (passes/attn_slots.h), -1 otherwise */
  PZ_MOE_NSRC_Q
};

/* Router and experts of MOE (config.json names: n_routed_experts, num_experts_per_tok, n_group,
 * topk_group, scoring_func, topk_method, norm_topk_prob, routed_scaling_factor; the routing rule
 * is pz_ref_moe_route's, backend/cpu/ref_ops.h). */
typedef struct pz_moe_params {
  int n_experts, top_k, n_group, topk_group; /* E, experts per token, groups of E/n_group experts, groups kept */
  pz_scoring scoring;
  pz_topk_method topk_method;
  bool norm_topk_prob;         /* renormalise the top-k weights to sum 1 */
  float routed_scaling_factor; /* multiplies the routed experts' weights */
  int64_t inter;           /* moe_intermediate_size / TP */
  int64_t shared_inter;    /* n_shared_experts * moe_intermediate_size / TP (0: none) */
  int wquant;              /* routed experts' storage: 0 bf16, 1 INT4 group (W4A16), 2 FP8 block (W8A16);
                              the values of model/config.h's pz_wquant */
  int64_t q_group;         /* INT4: columns per scale (32) */
  int64_t q_block_rows, q_block_cols; /* FP8: weight_block_size */
  int64_t hidden;          /* H (hidden_size), the experts' K; 0 = not given (then no prezero slot) */
  /* Prezero (set by the pass with the PZ_MOE_SH_GU_PREZERO slot; 0 otherwise): the donor buffer's
   * columns and n_base, and the slot's first column in it. */
  int64_t prezero_n_total, prezero_n_base, sh_gu_col_offset;
} pz_moe_params;

/* Source slots of GQA_ATTN (index into node->src; -1 when absent). Per-rank shapes: heads =
 * pz_gqa_params.n_heads, kvh = n_kv_heads, d = head_dim. */
enum {
  PZ_GQA_QKV = 0,       /* [m, (heads + 2*kvh)*d] f32: qkv_proj output, bias included: q | k | v */
  PZ_GQA_Q_NORM_W,      /* [d] bf16: q_norm weight (Qwen3 qk-norm), or -1 */
  PZ_GQA_K_NORM_W,      /* [d] bf16: k_norm weight, or -1 (present exactly when Q_NORM_W is) */
  PZ_GQA_O_W,           /* [H, heads*d] bf16: o_proj (row-parallel: k sharded) */
  PZ_GQA_K_CACHE,       /* [m, kvh, max_ctx, d] bf16, per sequence (this rank's kv heads) */
  PZ_GQA_V_CACHE,       /* [m, kvh, max_ctx, d] bf16 */
  PZ_GQA_POS,           /* [m] i32: position of the new token = tokens already in the cache */
  PZ_GQA_OPROJ_PREZERO, /* optional [m, H] f32 slice, pre-zeroed by the donor */
  PZ_GQA_NSRC
};

/* GQA decode attention of one layer (Llama / Qwen2 / Qwen3 / Mixtral / Qwen3-MoE), per row i at
 * position p = pos[i], for each head h with kv head g = h / (heads / kvh):
 *   q = qkv[i, h*d : +d], k = qkv[i, (heads+g)*d : +d], v = qkv[i, (heads+kvh+g)*d : +d] (f32);
 *   qk_norm: q = RMSNorm(q, eps) * q_norm_w, k = RMSNorm(k, eps) * k_norm_w (per head, over d);
 *   RoPE, rotate-half (GPT-NeoX) pairing (j, j + r/2) over the first r = rotary_dim (0: d) dims,
 *   inv_freq from pz_rope_inv_freq(rope, r); dims r..d-1 unrotated;
 *   k_cache[i, g, p] = bf16(k), v_cache[i, g, p] = bf16(v);
 *   o[h] = Σ_{t0<=t<=p} softmax_t(softmax_scale * q·k_cache[i,g,t]) v_cache[i,g,t], rounded to bf16, where
 *   t0 = 0 (window 0: full causal attention) or max(0, p - window + 1) (a sliding layer: the last `window`
 *   positions, its own included);
 *   partial[i, :] = o_w · o (f32), written to dst, or accumulated into the pre-zeroed slot.
 * The exact rounding points are pz_ref_gqa_attention's (backend/cpu/ref_ops.h). */
typedef struct pz_gqa_params {
  int n_heads;             /* query heads on this rank = num_attention_heads / TP */
  int n_kv_heads;          /* kv heads on this rank = num_key_value_heads / TP (1 when TP > kv heads:
                              each kv head is replicated over TP / num_key_value_heads ranks) */
  int64_t head_dim;        /* d */
  int64_t hidden;          /* H */
  int64_t max_ctx;         /* KV-cache capacity in tokens */
  int64_t window;          /* sliding window W in tokens (0: full attention): a query at position p attends key
                              positions j with p - j < W (transformers' sliding_window_overlay, masking_utils.py);
                              the cache stays max_ctx long. The builder sets 0 where W >= max_ctx (no effect) */
  float eps;               /* q_norm / k_norm eps (rms_norm_eps) */
  float softmax_scale;     /* head_dim^-0.5 */
  pz_rope_params rope;
  int64_t rotary_dim;      /* 0: RoPE on all head_dim dims; else on the first rotary_dim (even, < head_dim:
                              GLM-4.5's partial_rotary_factor), the rest passed through */
  /* Set by the prezero pass with the o_proj slot (as pz_mla_params'). 0 when unset. */
  int64_t prezero_n_total, prezero_n_base;
  int64_t oproj_col_offset;
} pz_gqa_params;

/* DENSE_MLP src: {x[m,H] bf16, W_gate[I/TP,H], W_up[I/TP,H], W_down[H,I/TP]} -> partial[m,H] f32. */
typedef struct pz_mlp_params { int64_t inter; /* intermediate_size / TP */ } pz_mlp_params;

/* EMBEDDING / LM_HEAD / ARGMAX: vocab-parallel over TP ranks. */
typedef struct pz_vocab_params {
  int64_t vocab_size, vocab_per_rank; /* tokens; rank r holds ids [r*vocab_per_rank, (r+1)*vocab_per_rank) */
} pz_vocab_params;

/* Parameters of a node; the member read is fixed by the op (gemm: GEMM, LM_HEAD, MM_MAYBE_PREZERO;
 * norm: RMSNORM, AR_RMSNORM*; mla: MLA_ATTN; gqa: GQA_ATTN; moe: MOE; mlp: DENSE_MLP, SILU_MUL (inter = I);
 * vocab: EMBEDDING, ARGMAX). */
typedef union pz_op_params {
  pz_gemm_params gemm;
  pz_norm_params norm;
  pz_mla_params mla;
  pz_gqa_params gqa;
  pz_moe_params moe;
  pz_mlp_params mlp;
  pz_vocab_params vocab;
} pz_op_params;

/* One op of the decode step. */
typedef struct pz_node {
  int id;                   /* index in g->nodes (nodes run in id order) */
  pz_op op;
  char name[PZ_NAME_LEN];   /* e.g. "layers.3.self_attn.qkv_a" */
  int layer;                /* -1 outside the layers */
  pz_role role;
  int n_src, n_dst;
  int src[PZ_MAX_SRC];      /* tensor ids; -1 = absent optional input */
  int dst[PZ_MAX_DST];
  pz_op_params p;
} pz_node;

/* Model dimensions the graph was built from (per-model, not per-rank). */
typedef struct pz_graph_info {
  int tp;
  int64_t m;                /* maximum batch (rows of batched tensors) */
  int n_layers;
  int64_t hidden, vocab_size; /* hidden_size (elements), vocab_size (tokens) */
  float rms_eps;            /* rms_norm_eps */
  char model_name[64];
} pz_graph_info;

/* A per-rank decode graph: tensors[i].id == i, nodes[i].id == i (arrays grown on demand). */
typedef struct pz_graph {
  pz_graph_info info;
  pz_tensor *tensors;
  int n_tensors, cap_tensors;
  pz_node *nodes;
  int n_nodes, cap_nodes;
  /* Well-known tensors (ids) the executor feeds and reads. */
  int in_tokens, in_pos, out_tokens, out_logits;
} pz_graph;

/* Dump name of op (ops.def, e.g. "ar_rmsnorm"); "?" when op is out of range. */
const char *pz_op_name(pz_op op);
/* Whether op is collective across TP ranks (ops.def column 3); false when out of range. */
bool pz_op_is_collective(pz_op op);
/* Name suffix of a role (roles.def, e.g. "self_attn.qkv_a"; "" for NONE, "?" out of range). */
const char *pz_role_suffix(pz_role r);

/* Creates an empty graph with a copy of *info; the well-known ids start at -1.
 * Errors: PZ_ERR_OOM. */
pz_status pz_graph_create(const pz_graph_info *info, pz_graph **out);
/* Frees g and its arrays; NULL is ignored. */
void pz_graph_free(pz_graph *g);
/* Deep copy (same ids, same capacities). Errors: PZ_ERR_OOM (*out untouched). */
pz_status pz_graph_clone(const pz_graph *g, pz_graph **out);

/* Largest element count of one tensor (2^50): its byte count and strides stay far inside int64. */
#define PZ_MAX_NUMEL ((int64_t)1 << 50)
/* Adds a contiguous tensor that owns storage; shape is outermost-first. Returns the id
 * in *id. Errors: PZ_ERR_SHAPE (ndim/dims invalid, a dim <= 0, or more than PZ_MAX_NUMEL
 * elements), PZ_ERR_OOM. */
pz_status pz_graph_add_tensor(pz_graph *g, const char *name, pz_dtype t, pz_tensor_kind k,
                              int ndim, const int64_t *ne, int *id);
/* Adds a 2-D view [rows, cols] (a BUFFER tensor of base's dtype and batched flag) of columns
 * [col0, col0+cols) of 2-D tensor `base` (row stride = base's row stride, in elements); id
 * may be NULL. Errors: PZ_ERR_INVALID_ARG (bad base id), PZ_ERR_SHAPE if out of range, PZ_ERR_OOM. */
pz_status pz_graph_add_col_slice(pz_graph *g, const char *name, int base, int64_t col0,
                                 int64_t cols, int *id);
/* Turns existing 2-D tensor `t` into a view of columns [col0, col0+ne[1]) of 2-D tensor base
 * (a view of base's owner when base is itself a view; strides taken from base). Errors:
 * PZ_ERR_INVALID_ARG (bad id), PZ_ERR_SHAPE (not 2-D, rows or dtype differ, columns out of range). */
pz_status pz_graph_make_col_view(pz_graph *g, int t, int base, int64_t col0);
/* Appends a node (id = the previous n_nodes, in *id when id != NULL); p may be NULL (zero
 * params). src/dst ids must exist (or be -1 in src); unused slots are set to -1. Shapes are
 * checked later by pz_graph_verify. Errors: PZ_ERR_INVALID_ARG (bad op, n_src outside
 * 0..PZ_MAX_SRC, n_dst outside 1..PZ_MAX_DST, an id out of range), PZ_ERR_OOM. */
pz_status pz_graph_add_node(pz_graph *g, pz_op op, const char *name, int layer, pz_role role,
                            const int *src, int n_src, const int *dst, int n_dst,
                            const pz_op_params *p, int *id);

/* Tensor that owns storage for id (follows view_of); -1 for id < 0. */
int pz_storage_of(const pz_graph *g, int id);
/* Elements of the tensor's shape: Π ne[d]. */
int64_t pz_tensor_numel(const pz_tensor *t);
/* The tensor of g named `name` (exact match), or NULL when there is none. */
const pz_tensor *pz_graph_find_tensor(const pz_graph *g, const char *name);
/* True when the tensor name s ends with suf (e.g. ".weight_packed"). */
bool pz_name_ends_with(const char *s, const char *suf);
/* Elements of storage the tensor spans from its element 0: 1 + Σ (ne[d]-1)*stride[d]
 * (view_offset not included). */
int64_t pz_tensor_span(const pz_tensor *t);
/* Row-major dense: stride[d] = Π ne[d+1..] for every dim with ne[d] > 1. */
bool pz_tensor_contiguous(const pz_tensor *t);

/* verify(): every id in range, dtypes and shapes match each op's contract, every input is
 * produced before it is read (or is a weight/input/state), no op writes a weight.
 * Errors: PZ_ERR_VERIFY with the node named in pz_last_error(). */
pz_status pz_graph_verify(const pz_graph *g);

/* Text dump: one line per node: id, name, op, src and dst with shapes/dtypes/views.
 * DOT dump: nodes as boxes, tensors as edges. Both are deterministic.
 * Errors: PZ_ERR_IO when writing to f fails (ferror). */
pz_status pz_graph_dump_text(const pz_graph *g, FILE *f);
pz_status pz_graph_dump_dot(const pz_graph *g, FILE *f);
#ifdef __cplusplus
}
#endif
#endif
