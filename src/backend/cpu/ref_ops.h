/* Raw-pointer CPU reference implementations of every decode op (plain C, fp32 accumulation).
 * The CPU backend's kernels call these, and CUDA tests call them to check GPU kernels. */
#ifndef PZ_BACKEND_CPU_REF_OPS_H
#define PZ_BACKEND_CPU_REF_OPS_H
#include <stdbool.h>
#include <stdint.h>
#include "core/dtype.h"
#include "core/ir.h"
#include "core/rope.h"
#ifdef __cplusplus
extern "C" {
#endif

/* LM head: pz_ref_gemm(m, vocab_per_rank, H, x_norm, ..., W_shard, ..., NULL, logits, ...,
 * split_k 0, zero_init true) -> this rank's logits [m, vocab/TP] f32.
 *
 * Conventions of this header:
 * - Matrices are row-major; every `ld*` is the row stride in ELEMENTS (>= the row length).
 *   Columns are always unit-stride.
 * - "fp32 accumulation in order" means: acc = 0.0f, then acc += a*b for each index in
 *   increasing order, one rounding per add (no reassociation, no FMA contraction is relied on).
 * - bf16 conversions round to nearest even (pz_f32_to_bf16, dtype.h).
 * - When called from inside a CPU executor step, these functions may split their OUTPUT
 *   elements over the executor's worker threads; every output element is still computed by
 *   exactly one thread in the documented order, so results never depend on the thread count. */

/* Optional worker threads for reference calls made from the calling thread outside an
 * executor (e.g. a CUDA test checking a large shape): threads > 1 starts a process-wide pool
 * of that many threads and binds it to the calling thread; 0 = number of online cores;
 * 1 = serial again (the default; the pool is freed). Results are bit-identical for any count.
 * Errors: PZ_ERR_OOM, PZ_ERR_INTERNAL (thread creation failed). Not thread-safe: call it from
 * one thread. */
pz_status pz_ref_set_threads(int threads);

/* ---------------------------------------------------------------- GEMM (split-K) */

/* Split count used when split_k == 0: 1 when k < 2048, else min(8, k / 1024).
 * (A fixed, documented heuristic; the CUDA tuner picks its own.) */
int pz_ref_default_split(int64_t k);

/* Width of each K slice for a split count: chunk = roundup(ceil(k / split), 64), slice s is
 * [s*chunk, min(k, (s+1)*chunk)); slices past k are empty and contribute nothing. split <= 0
 * uses pz_ref_default_split(k). Returns chunk (>= 1). */
int64_t pz_ref_split_chunk(int64_t k, int split);

/* C[m,n] (+)= A[m,k] · W[n,k]ᵀ (+ bias[n]), simulating a split-K kernel exactly:
 *   A: bf16, row stride lda; W: bf16 [n,k], row stride ldw (nn.Linear layout);
 *   bias: f32 [n] or NULL; C: f32, row stride ldc (may be a column slice of a wider buffer).
 *   For every output (i,j): K is cut into slices by pz_ref_split_chunk(k, split_k);
 *   partial_s = fp32 dot of slice s in k order (partial_0 = dot_0 + bias[j] when bias: the
 *   bias is added exactly once, by split 0, also when zero_init is false);
 *   zero_init = true:  C = 0, then C += partial_s for s = 0..S-1 in order;
 *   zero_init = false: C += partial_s for s = 0..S-1 onto whatever C holds (so a missing
 *   pre-zero shows up in the result).
 * Ties with the CUDA contract (docs/ARCHITECTURE.md §3): with 0 on entry both flavours are bit-identical. */
void pz_ref_gemm(int64_t m, int64_t n, int64_t k, const pz_bf16 *A, int64_t lda,
                 const pz_bf16 *W, int64_t ldw, const float *bias, float *C, int64_t ldc,
                 int split_k, bool zero_init);

/* pz_ref_gemm with f32 weights W[n,k] (row stride ldw): the same slices, order and roundings, each
 * weight read as it is instead of widened from bf16, so weights that are exact in bf16 give
 * pz_ref_gemm's bits. Used for dequantised INT4 / FP8 experts (int4 x scale is exact in f32, not
 * always in bf16). */
void pz_ref_gemm_wf32(int64_t m, int64_t n, int64_t k, const pz_bf16 *A, int64_t lda,
                      const float *W, int64_t ldw, const float *bias, float *C, int64_t ldc,
                      int split_k, bool zero_init);

/* ---------------------------------------------------------------- RMSNorm, AR + RMSNorm */

/* The one RMSNorm formula used everywhere (CPU and CUDA references):
 *   ss = Σ_j r_j² (fp32, in order), mean = ss / (float)n, inv = 1.0f / sqrtf(mean + eps),
 *   y_j = bf16((r_j * inv) * w_j)      (one rounding, at the end).
 * Hugging Face's DeepseekV2RMSNorm rounds r*inv to bf16 before the weight multiply; we
 * deliberately round once (this project's contract, ir.h pz_norm_params). */
float pz_ref_rms_inv(const float *r, int64_t n, float eps);

/* y[m,n] bf16 (row stride ldy) = RMSNorm(x) * w. x: f32 (x_dtype PZ_F32) or bf16 (PZ_BF16)
 * with row stride ldx; w: bf16 [n]. Other dtypes: nothing is written (caller validates). */
void pz_ref_rmsnorm(int64_t m, int64_t n, const void *x, pz_dtype x_dtype, int64_t ldx,
                    const pz_bf16 *w, float eps, pz_bf16 *y, int64_t ldy);

/* Fused all-reduce + residual add + RMSNorm over tp ranks' partials (docs/ARCHITECTURE.md §3):
 *   partials[r]: f32 [m,H] of rank r, row stride ld_partial (r = 0..tp-1);
 *   s = partials[0]; s += partials[r] for r = 1..tp-1 (fp32, rank order);
 *   residual_out = residual_in ? residual_in + s : s    (residual_in NULL means zero;
 *   residual_in may equal residual_out: in place), f32, row stride ld_res for both;
 *   x_norm[m,H] bf16 (row stride ld_x) = RMSNorm(residual_out) * w  (formula above). */
void pz_ref_ar_rmsnorm(int tp, const float *const *partials, int64_t ld_partial,
                       const float *residual_in, float *residual_out, int64_t ld_res,
                       const pz_bf16 *w, float eps, int64_t m, int64_t H,
                       pz_bf16 *x_norm, int64_t ld_x);

/* ---------------------------------------------------------------- vocab-parallel ops */

/* Embedding of rank `rank` (vocab-parallel): W is this rank's bf16 [vocab_per_rank, H] shard
 * holding token ids [rank*vpr, (rank+1)*vpr). out[i,:] (f32, row stride ld_out) =
 * W[ids[i] - rank*vpr, :] when the id falls in the shard, else 0; summing all ranks' outputs
 * (the next all-reduce) gives the full embedding.
 * Errors: PZ_ERR_INVALID_ARG if an id is outside [0, vocab_size). */
pz_status pz_ref_embedding(int64_t m, const int32_t *ids, const pz_bf16 *W, int64_t H,
                           int64_t vocab_size, int64_t vocab_per_rank, int rank,
                           float *out, int64_t ld_out);

/* Greedy argmax over the vocab shards of all tp ranks: logits[r] is rank r's f32
 * [m, vocab_per_rank] (row stride ld); column j of rank r is token id r*vpr + j, ids at or
 * beyond vocab_size (padding) are skipped. Ties: the lowest token id wins. NaN: the first NaN
 * (lowest id) wins, as torch.argmax does, so a broken model shows up instead of hiding.
 * out_ids: i32 [m]. */
void pz_ref_argmax(int tp, const float *const *logits, int64_t ld, int64_t m,
                   int64_t vocab_per_rank, int64_t vocab_size, int32_t *out_ids);

/* ---------------------------------------------------------------- RoPE / YaRN */

/* YaRN frequencies and mscales: core/rope.h (shared with the CUDA backend). */


/* Applies RoPE in place to x[dim] (f32) at position pos, in the Hugging Face DeepSeek
 * convention: the input holds interleaved pairs (x[2i], x[2i+1]); apply_rotary_pos_emb first
 * permutes to [x0,x2,..,x1,x3,..] then rotates halves. The OUTPUT is in that half-split
 * layout:  ang_i = (float)pos * inv_freq[i] (f32 multiply), c_i = (float)cos(ang_i)*ms,
 * s_i = (float)sin(ang_i)*ms (cos/sin evaluated in double, ms = pz_ref_yarn_cos_sin_mscale),
 *   out[i]       = x[2i]*c_i   - x[2i+1]*s_i
 *   out[i+dim/2] = x[2i+1]*c_i + x[2i]*s_i.
 * q_pe and k_pe both go through it, so their dot product matches HF. At pos 0 with ms == 1 the
 * result is the permuted input. dim must be even and <= 512 (else x is left unchanged). */
void pz_ref_rope(float *x, int64_t dim, int32_t pos, const float *inv_freq, float ms);

/* ---------------------------------------------------------------- MLA decode (absorbed) */

/* Pointers of one MLA decode call. Per-rank shapes (heads = p->n_heads, qh = nope+rope,
 * kvw = kv_lora + rope): */
typedef struct pz_ref_mla_io {
  const float *qkv_a; int64_t ld_qkv_a;  /* q LoRA layouts: f32 [m, q_lora + kv_lora + rope] = q_c | kv_c | k_pe */
  const float *q; int64_t ld_q;          /* no q LoRA (V2-Lite): f32 [m, heads*qh] (q_proj output) */
  const float *kv_a; int64_t ld_kv_a;    /* no q LoRA: f32 [m, kvw] = kv_c | k_pe */
  const pz_bf16 *qa_norm_w;              /* [q_lora] (q LoRA only) */
  const pz_bf16 *qb_w;                   /* [heads*qh, q_lora] (q LoRA only) */
  const pz_bf16 *kva_norm_w;             /* [kv_lora] */
  const pz_bf16 *w_uk;                   /* [heads, nope, kv_lora] (kv_b_proj rows of k_nope) */
  const pz_bf16 *w_uv;                   /* [heads, v, kv_lora]    (kv_b_proj rows of v) */
  const pz_bf16 *o_w;                    /* [H, heads*v] (o_proj, row-parallel shard) */
  pz_bf16 *kv_cache; int64_t cache_seq_stride; /* no block table: sequence i's position j at kv_cache + i*stride + j*kvw */
  /* Paged cache (core/kv_pages.h): block_table [m, ld_block_table] i32 set, kv_cache is the page
   * pool [n_pages, PZ_KV_BLOCK, kvw] and position j of sequence i is at kv_cache +
   * (block_table[i*ld + j/64]*64 + j%64)*kvw (cache_seq_stride unused). NULL: contiguous. */
  const int32_t *block_table; int64_t ld_block_table; int64_t n_pages;
  const int32_t *pos;                    /* [m] position of the new token (0 <= pos < max_ctx) */
  float *qb_out; int64_t ld_qb_out;      /* q_b output [m, heads*qh] f32; NULL: internal scratch */
  bool qb_zero_init;                     /* ignored when qb_out is NULL (internal: true) */
  float *out; int64_t ld_out;            /* o_proj output = partial [m, H] f32 */
  bool out_zero_init;                    /* false: out must hold zeros on entry (pre-zeroed slot) */
} pz_ref_mla_io;

/* One MLA decode step in the absorbed form (DeepSeek-V2 modeling, weights absorbed):
 *  1. q LoRA: q_c = qkv_a[:, :q_lora] -> RMSNorm(q_a_layernorm) -> bf16 -> q_b GEMM
 *     (pz_ref_gemm, split_k 0, zero_init as io) -> q f32 [m, heads*qh].
 *     kv_c = qkv_a[:, q_lora : q_lora+kv_lora], k_pe = the last rope columns.
 *     No q LoRA: q = io->q, kv_c / k_pe from io->kv_a.
 *  2. c = bf16(RMSNorm(kv_c) * kva_norm_w); k_pe roped (pz_ref_rope) then bf16; both written
 *     to the cache at pos[i] as [c | k_pe] (kvw bf16).
 *  3. Per head h: q_nope = q[h*qh : h*qh+nope], q_pe = roped q[h*qh+nope : (h+1)*qh] (f32);
 *     q_lat[c] = Σ_d q_nope[d]*W_UK[h,d,c] (f32, d in order);
 *     score_j = (Σ_c q_lat[c]*C_j[c] + Σ_r q_pe[r]*Kpe_j[r]) * softmax_scale, j = 0..pos
 *     (both dots in order, f32, summed as lat + pe);
 *     p_j = expf(score_j - max) / Σ expf(..) (f32, j order); o_lat[c] = Σ_j p_j*C_j[c];
 *     o[h*v + e] = bf16(Σ_c W_UV[h,e,c]*o_lat[c]).
 *  4. out (+)= o · o_wᵀ via pz_ref_gemm(split_k 0, out_zero_init).
 * Rounding points: q_a_layernorm output, cache contents (c, k_pe) and the o_proj input o are
 * bf16; everything else stays f32. The cache is read (positions 0..pos[i]) and written (pos[i])
 * only through the block table when one is given; the results do not depend on where the pages
 * lie (the same bits as the contiguous cache holding the same rows). Rows have unequal lengths
 * (pos[i] + 1 each).
 * Errors: PZ_ERR_INVALID_ARG (pos outside [0, max_ctx), missing pointer, a block-table entry of a
 * used block (0..pos[i]/64) outside [0, n_pages)), PZ_ERR_OOM. */
pz_status pz_ref_mla_decode(int64_t m, const pz_mla_params *p, const pz_ref_mla_io *io);

/* ---------------------------------------------------------------- GQA decode */

/* Applies rotate-half RoPE (GPT-NeoX pairing, Hugging Face apply_rotary_pos_emb of
 * modeling_llama.py / modeling_qwen3.py: x*cos + rotate_half(x)*sin, rotate_half(x) = [-x2, x1])
 * in place to x[dim] (f32) at position pos: for i < dim/2, ang_i = (float)pos * inv_freq[i] (f32
 * multiply), c_i = (float)cos(ang_i) * ms, s_i = (float)sin(ang_i) * ms (cos / sin in double),
 *   out[i]       = x[i]*c_i - x[i+dim/2]*s_i
 *   out[i+dim/2] = x[i+dim/2]*c_i + x[i]*s_i    (each product rounded to f32, then the sum).
 * No permutation: at pos 0 with ms == 1 the output is the input. dim must be even (else x is
 * left unchanged). */
void pz_ref_rope_half(float *x, int64_t dim, int32_t pos, const float *inv_freq, float ms);

/* The first cache position a query at position pos attends under sliding window `window` (tokens; 0 = full
 * attention): max(0, pos - window + 1), so that key j is attended when j <= pos and pos - j < window, the
 * last `window` positions with pos itself (transformers 5 masking_utils.sliding_window_overlay keeps
 * kv_idx > q_idx - sliding_window; MistralModel, Qwen2Model and the others put that mask on their sliding
 * layers, and DynamicSlidingWindowLayer keeps the window - 1 keys before the new one); 0 when window is 0 or
 * pos < window. */
int64_t pz_ref_gqa_first_pos(int32_t pos, int64_t window);

/* The cos/sin multiplier of a GQA layout's RoPE: pz_rope_cos_sin_mscale (core/rope.h):
 * pz_ref_yarn_cos_sin_mscale for rope.type PZ_ROPE_YARN (Hugging Face's yarn attention_factor),
 * rope.attention_factor for LONGROPE, 1 for DEFAULT and LLAMA3. */
float pz_ref_gqa_rope_mscale(const pz_rope_params *rp);

/* Pointers of one GQA decode call. Per-rank shapes (heads = p->n_heads, kvh = p->n_kv_heads,
 * d = p->head_dim, H = p->hidden): */
typedef struct pz_ref_gqa_io {
  const float *qkv; int64_t ld_qkv;      /* f32 [m, (heads + 2*kvh)*d] = q | k | v (qkv_proj output, bias included) */
  const pz_bf16 *q_norm_w, *k_norm_w;    /* [d] each (Qwen3 qk-norm), or both NULL */
  const pz_bf16 *o_w;                    /* [H, heads*d] (o_proj, row-parallel shard) */
  pz_bf16 *k_cache, *v_cache;            /* element (i, g, t, j) at cache + i*cache_seq_stride + g*cache_head_stride + t*d + j */
  int64_t cache_seq_stride, cache_head_stride; /* elements; head stride >= max_ctx*d */
  const int32_t *pos;                    /* [m] position of the new token (0 <= pos < max_ctx) */
  float *out; int64_t ld_out;            /* o_proj output = partial [m, H] f32 */
  bool out_zero_init;                    /* false: o_proj accumulates onto out (the pre-zeroed slot) */
} pz_ref_gqa_io;

/* One GQA decode step (Hugging Face LlamaAttention / Qwen2Attention / Qwen3Attention /
 * MixtralAttention with a KV cache), for each row i at p = pos[i]:
 *  1. q_h = qkv[i, h*d : +d] (h < heads), k_g = qkv[i, (heads+g)*d : +d], v_g = qkv[i,
 *     (heads+kvh+g)*d : +d] (g < kvh), f32.
 *  2. qk_norm (q_norm_w set): x = (x_j * inv) * w_j with inv = pz_ref_rms_inv(x, d, eps) (sum of
 *     squares f32 in order), f32, NOT rounded (Hugging Face's Qwen3RMSNorm rounds x*inv to the
 *     model dtype before the weight; this project rounds once, at the cache / o_proj input).
 *  3. RoPE on the first r = p->rotary_dim (0: d) dims of q_h and k_g: pz_ref_rope_half(x, r, ...) with
 *     inv_freq = pz_rope_inv_freq(&p->rope, r) for p < pz_rope_long_from(&p->rope), else
 *     pz_rope_inv_freq_long(&p->rope, r) (LongRoPE's long factors; the same table for the other types),
 *     and ms = pz_ref_gqa_rope_mscale(&p->rope) (transformers' partial rotary: rotate-half within the
 *     first r dims, the rest passed through); q stays f32.
 *     LongRoPE per position: the token at position p rotates by the long factors when p >=
 *     original_max_position_embeddings, and its key keeps that rotation in the cache, which is what
 *     transformers computes when it decodes one token at a time with a KV cache (its longrope update
 *     picks the long factors once max(position_ids) + 1 > original_max_position_embeddings). prezero
 *     has no prefill pass: a prompt is fed through this op one token per step, so its positions follow
 *     the same rule. transformers differs when it runs many positions in one forward (a prompt prefilled
 *     at once, or greedy by full recomputation): once that sequence is longer than
 *     original_max_position_embeddings, every position of it, the earlier ones included, rotates by the
 *     long factors. (Recent vLLM rotates every position by the long factors whenever its max_model_len
 *     exceeds original_max_position_embeddings.)
 *  4. k_cache[i, g, p] = bf16(k_g), v_cache[i, g, p] = bf16(v_g) (every row's append happens
 *     before any attention, so a row attends to its own new token).
 *  5. Per head h, g = h / (heads / kvh): score_t = (Σ_j q_h[j] * K_t[j]) * softmax_scale for
 *     t = t0..p, t0 = pz_ref_gqa_first_pos(p, p->window) (0 for full attention; a sliding layer's window
 *     W > 0 attends the last W positions), dot f32 in j order, K_t = k_cache[i, g, t] widened exactly;
 *     the cache keeps every position (max_ctx long; positions before t0 are kept but not read); two-pass softmax:
 *     mx = max score, e_t = expf(score_t - mx), sum = Σ e_t (f32, t order), w_t = e_t / sum;
 *     o[h*d + j] = bf16(Σ_t w_t * V_t[j]) (f32, t order).
 *  6. out (+)= o · o_wᵀ via pz_ref_gemm(split_k 0, zero_init = out_zero_init).
 * Rounding points: the cache contents and the o_proj input o are bf16; q, k before the cache,
 * scores, softmax and the attention sums stay f32. Results do not depend on the thread count.
 * Errors: PZ_ERR_SHAPE (head_dim odd or < 2, rotary_dim neither 0 nor even in 2..head_dim, heads not a
 * multiple of kvh, heads / kvh < 1, LongRoPE whose n_factors is not rotary dims / 2),
 * PZ_ERR_INVALID_ARG (pos outside [0, max_ctx), a missing pointer, only one of the two norm
 * weights, window < 0), PZ_ERR_OOM. */
pz_status pz_ref_gqa_attention(int64_t m, const pz_gqa_params *p, const pz_ref_gqa_io *io);

/* SiLU-and-multiply of a fused gate_up_proj output (Hugging Face LlamaMLP: down(act(gate(x)) *
 * up(x)), act = SiLU): gu f32 [m, 2*inter] (row stride ld_gu) = gate | up;
 *   act[i, j] = bf16(silu(g) * u), g = gu[i, j], u = gu[i, inter + j], silu(g) = g / (1 + expf(-g))
 * (f32, one rounding; the formula of pz_ref_mlp, so GEMM + SILU_MUL + GEMM equals DENSE_MLP when
 * the GEMMs split alike). act: bf16 [m, inter], row stride ld_act. */
void pz_ref_silu_mul(int64_t m, int64_t inter, const float *gu, int64_t ld_gu, pz_bf16 *act, int64_t ld_act);

/* ---------------------------------------------------------------- MoE / MLP */

/* Router top-k for m tokens (Hugging Face DeepSeek-V2/V3 MoEGate):
 *   logits: f32 [m, E] (row stride ld); bias: f32 [E] e_score_correction_bias (noaux_tc) or NULL.
 *   scores = softmax(logits) (max-subtracted, expf, sum in order) or sigmoid = 1/(1+expf(-x)).
 *   greedy: top_k over scores.
 *   group_limited_greedy: groups (E/n_group consecutive experts) ranked by their max score,
 *     keep topk_group groups, top_k over the kept experts' scores.
 *   noaux_tc: choice = score + bias; groups ranked by the sum of their two largest choice
 *     values (the only one, when a group has one expert), keep topk_group groups, top_k over
 *     the kept experts' choice; the weights are the UNbiased scores of the chosen experts.
 *   Experts of groups not kept are never chosen (vLLM / SGLang mask them with -inf; the HF
 *   reference fills 0.0, which differs only when a kept expert's choice value is below 0).
 *   top-k softmax (PZ_SCORE_TOPK_SOFTMAX, Mixtral): the choice values are the logits (+ bias for
 *     noaux_tc); after the selection w_t = expf(l_t - l_0) / Σ_u expf(l_u - l_0) over the k chosen
 *     logits (l_0 = the first chosen, the largest; sum in selection order); equal to Hugging
 *     Face MixtralSparseMoeBlock's softmax over all E, top-k, renormalise. norm_topk_prob is not
 *     applied on top (the k weights already sum to 1); empty slots (id -1) get 0.
 *   Tie-break everywhere (groups and experts): the lower index wins. NaN scores rank lowest.
 *   norm_topk_prob (and top_k > 1, SOFTMAX / SIGMOID): w /= (Σ w + 1e-20f) (sum in selection
 *   order; for Qwen3-MoE's softmax weights, whose sum is >= 1/E, the 1e-20f changes no bit).
 *   Then w *= routed_scaling_factor, always (DeepSeek-V3 code; V2 skipped it when
 *   normalising, which no shipped V2 config combines with a factor != 1).
 * Output per token, in selection order (descending choice value, ties to the lower index):
 *   ids: i32 [m, top_k], weights: f32 [m, top_k] (row stride top_k). When the kept groups hold
 *   fewer than top_k experts, the missing slots get id -1 and weight 0 (HF would pick masked
 *   experts there; no shipped config allows it). */
void pz_ref_moe_route(int64_t m, const float *logits, int64_t ld, const float *bias,
                      const pz_moe_params *p, int32_t *ids, float *weights);

/* SwiGLU MLP (the TP shard of it): for each row i,
 *   g = x·Wgᵀ, u = x·Wuᵀ (pz_ref_gemm, split 1: f32 [inter]);
 *   h = bf16(silu(g)*u), silu(g) = g / (1 + expf(-g))  (the only rounding, before down);
 *   out[i] (+)= h·Wdᵀ  (pz_ref_gemm split 1; f32 [H], zero_init as given).
 * x: bf16 [m, H] row stride ldx; w_gate, w_up: bf16 [inter, H]; w_down: bf16 [H, inter];
 * out: f32 [m, H] row stride ld_out. Errors: PZ_ERR_OOM. */
pz_status pz_ref_mlp(int64_t m, int64_t H, int64_t inter, const pz_bf16 *x, int64_t ldx,
                     const pz_bf16 *w_gate, const pz_bf16 *w_up, const pz_bf16 *w_down,
                     float *out, int64_t ld_out, bool zero_init);

/* Routed + shared experts for a GIVEN routing (ids/weights [m, top_k] as pz_ref_moe_route
 * returns them; id -1 = empty slot), so a CUDA MoE can be checked with any routing (e.g. the
 * benchmark's uniform random one): out as pz_ref_moe below. p supplies top_k, n_experts,
 * inter and shared_inter. Errors: PZ_ERR_INVALID_ARG (an id outside [-1, n_experts)), PZ_ERR_OOM. */
pz_status pz_ref_moe_experts(int64_t m, int64_t H, const pz_bf16 *x, int64_t ldx,
                             const int32_t *ids, const float *weights, const pz_moe_params *p,
                             const pz_bf16 *w_gate, const pz_bf16 *w_up, const pz_bf16 *w_down,
                             const pz_bf16 *sh_gate, const pz_bf16 *sh_up, const pz_bf16 *sh_down,
                             float *out, int64_t ld_out);

/* MoE block (the TP shard of it): routing by pz_ref_moe_route, then for each token i
 *   y = Σ_{j=0..top_k-1} w_ij * E_{id_ij}(x_i)   (f32, j in selection order, from 0),
 *   where E_e(x) is pz_ref_mlp with expert e's [inter, H]/[H, inter] slices (f32 output);
 *   then, with shared experts (sh_gate != NULL, shared_inter > 0), y += S(x_i) (pz_ref_mlp
 *   with the [shared_inter, H] weights). out[i] = y (f32 [m,H], row stride ld_out).
 * x: bf16 [m,H]; logits: f32 [m,E] (row stride ld_logits); bias: [E] or NULL;
 * w_gate/w_up: bf16 [E, inter, H]; w_down: bf16 [E, H, inter].
 * If ids_out/weights_out are non-NULL ([m, top_k]) the routing is returned there too.
 * Errors: PZ_ERR_OOM. */
pz_status pz_ref_moe(int64_t m, int64_t H, const pz_bf16 *x, int64_t ldx,
                     const float *logits, int64_t ld_logits, const float *bias,
                     const pz_moe_params *p, const pz_bf16 *w_gate, const pz_bf16 *w_up,
                     const pz_bf16 *w_down, const pz_bf16 *sh_gate, const pz_bf16 *sh_up,
                     const pz_bf16 *sh_down, float *out, int64_t ld_out,
                     int32_t *ids_out, float *weights_out);

/* ---------------------------------------------------------------- quantised routed experts */

/* Routed-expert weights stored quantised (core/ir.h PZ_MOE_S_*, core/quant.h):
 *   wquant 1 (INT4): w_* int32 words [E, rows, cols/8], s_* bf16 [E, rows, cols/group];
 *   wquant 2 (FP8):  w_* e4m3 bytes [E, rows, cols], s_* f32 [E, ceil(rows/bm), ceil(cols/bn)];
 * with (rows, cols) = (inter, H) for gate / up and (H, inter) for down. */
typedef struct pz_ref_qexperts {
  int wquant;                       /* 1 INT4, 2 FP8 */
  int64_t group, block_rows, block_cols;
  const void *w_gate, *w_up, *w_down;
  const void *s_gate, *s_up, *s_down;
} pz_ref_qexperts;

/* Dequantises projection `which` (0 gate, 1 up, 2 down) of expert e into out[rows * cols] f32:
 * INT4: q * scale (pz_int4_dequant_row), exact in f32; FP8: bf16(e4m3 * scale_inv) (pz_fp8_dequant_row,
 * then rounded to bf16 as the checkpoint loader's dequantisation is), so FP8 experts kept as FP8
 * compute exactly what the same checkpoint dequantised at load computes. */
void pz_ref_qexpert_dequant(const pz_ref_qexperts *q, int which, int64_t e, int64_t inter, int64_t H, float *out);

/* pz_ref_moe_experts with quantised routed experts: each chosen expert's three matrices are
 * dequantised to f32 (pz_ref_qexpert_dequant) and its SwiGLU runs as pz_ref_mlp does, with
 * pz_ref_gemm_wf32 for the weight products; everything else (slots, combine order, shared
 * experts in bf16) is pz_ref_moe_experts'. So weights whose dequantised values are exact in bf16
 * give the bf16 path's bits. Errors: those of pz_ref_moe_experts, PZ_ERR_INVALID_ARG (bad wquant). */
pz_status pz_ref_moe_experts_q(int64_t m, int64_t H, const pz_bf16 *x, int64_t ldx,
                               const int32_t *ids, const float *weights, const pz_moe_params *p,
                               const pz_ref_qexperts *q, const pz_bf16 *sh_gate, const pz_bf16 *sh_up,
                               const pz_bf16 *sh_down, float *out, int64_t ld_out);

/* pz_ref_moe (routing, then the experts) with quantised routed experts (pz_ref_moe_experts_q); shapes
 * and dtypes as pz_ref_moe's, the routed weights as q describes them. Errors: PZ_ERR_INVALID_ARG (q
 * NULL, or a wquant / group / block that is neither INT4 with a group a multiple of 8 nor FP8 with a
 * positive block), PZ_ERR_OOM. */
pz_status pz_ref_moe_q(int64_t m, int64_t H, const pz_bf16 *x, int64_t ldx,
                       const float *logits, int64_t ld_logits, const float *bias,
                       const pz_moe_params *p, const pz_ref_qexperts *q, const pz_bf16 *sh_gate,
                       const pz_bf16 *sh_up, const pz_bf16 *sh_down, float *out, int64_t ld_out,
                       int32_t *ids_out, float *weights_out);

#ifdef __cplusplus
}
#endif
#endif
