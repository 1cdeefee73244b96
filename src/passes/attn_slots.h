/* What the prezero pass needs to know about an attention op, and nothing model-specific in the
 * pass itself: which inputs link the op to a donor's consumer GEMMs, which GEMMs inside the op
 * can write into a pre-zeroed column slice of the donor's buffer (its "slots"), and where the op
 * keeps the slots' columns and the donor's zero_fill figures. One table entry per op
 * (attn_slots.c); an op without an entry has no slots. */
#ifndef PZ_PASSES_ATTN_SLOTS_H
#define PZ_PASSES_ATTN_SLOTS_H
#include <stdbool.h>
#include <stdint.h>
#include "core/ir.h"
#include "passes/prezero.h"
#ifdef __cplusplus
extern "C" {
#endif

#define PZ_ATTN_MAX_LINKS 3
#define PZ_ATTN_MAX_SLOTS 2

/* One slot: the op's inner GEMM C[m, n] (+)= A[m, k] · W[n, k]ᵀ (n, k in elements) writes its
 * f32 result into node->src[src] when that is set. */
typedef struct pz_attn_slot {
  pz_prezero_slot kind; /* PZ_PREZERO_SLOT_QB, PZ_PREZERO_SLOT_OPROJ or PZ_PREZERO_SLOT_SHARED_GU */
  const char *name;     /* "q_b", "o_proj", "sh_gu": the slice tensor is "<node>.<name>.prezero" */
  int src;              /* index into node->src */
  int link;             /* -1: any link will do; else the src index that must be a consumer's output */
  bool output;          /* the slot is the op's output dst[0] itself (the partial [m, H]): it lies
                           beyond n_base, and the output tensor becomes a view of the slot */
  bool gated;           /* an inner slot that a per-batch plan keeps only where the donor's whole fill
                           with it is free at m (pz_prezero_active) and the donor's and fill's CTAs
                           fit one per SM, and that lies beyond n_base (the run-time gate decides its
                           fill, in the static rewrite too): its GEMM's zeroing costs less than its
                           fill can (MoE sh_gu, measured: its fill of 16 KB per token cost more donor
                           time than the zeroing it saved at m 64 and 128, bench/results/moe_sh_gu_slot/) */
  int64_t n, k;         /* the inner GEMM's shape from the op's params */
} pz_attn_slot;

/* An attention op as the pass sees it. Slots are in buffer order; output slots come last. */
typedef struct pz_attn_desc {
  int n_links;
  int link[PZ_ATTN_MAX_LINKS]; /* src indices: f32 outputs of GEMMs that read the donor's x_norm */
  int n_slots;
  pz_attn_slot slot[PZ_ATTN_MAX_SLOTS]; /* the slots this node's params give it (absent ones left out) */
} pz_attn_desc;

/* Fills d for node n and returns true when n's op has slots (MLA_ATTN, GQA_ATTN, MOE) and n has the
 * op's source count; false otherwise (d untouched). Slots the params rule out (MLA q_b without
 * q LoRA) are not listed.
 *   MLA_ATTN: links QKV_A, Q, KV_A; q_b slot (src PZ_MLA_QB_PREZERO, n = heads*(nope+rope),
 *             k = q_lora_rank; only when q_lora_rank > 0, only when linked through QKV_A);
 *             o_proj slot (PZ_MLA_OPROJ_PREZERO, n = hidden, k = heads*v_head_dim).
 *   GQA_ATTN: link QKV; o_proj slot (PZ_GQA_OPROJ_PREZERO, n = hidden, k = heads*head_dim).
 *   MOE (quantised experts, PZ_MOE_NSRC_Q sources): link LOGITS (the router GEMM's output); the shared
 *             experts' gate | up slot (PZ_MOE_SH_GU_PREZERO, n = 2 * shared_inter, k = hidden; only
 *             with shared experts and hidden set). Not an attention op, but the pass treats it as one:
 *             the first slotted op after the donor that reads a consumer's output. */
bool pz_attn_describe(const pz_node *n, pz_attn_desc *d);

/* True when src index s of a node with op `op` is one of the op's slots (a slot is written by
 * the op, never read). */
bool pz_attn_is_slot(pz_op op, int s);

/* Records a slot's column inside the donor's buffer in n's params (kind as in pz_attn_slot).
 * Returns false when n's op has no such slot. */
bool pz_attn_set_slot_col(pz_node *n, pz_prezero_slot kind, int64_t col);

/* Records the donor's zero_fill figures (columns of its buffer, elements) in n's params, so the
 * op evaluates the same gate as the donor. Returns false when n's op has no slots. */
bool pz_attn_set_fill(pz_node *n, int64_t n_total, int64_t n_base);
#ifdef __cplusplus
}
#endif
#endif
