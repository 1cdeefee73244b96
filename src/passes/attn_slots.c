/* The slotted ops' prezero slots (attn_slots.h): one table entry per op. The shapes are those
 * of the ops' contracts in core/ir.h (pz_mla_params, pz_gqa_params, pz_moe_params). */
#include "passes/attn_slots.h"
#include <stddef.h>

/* Where an op keeps its prezero fields. */
typedef enum { F_N_TOTAL = 0, F_N_BASE, F_COL_QB, F_COL_OPROJ, F_COL_SHGU } field;

typedef struct {
  pz_prezero_slot kind;
  const char *name;
  int src, link;
  bool output, gated;
} slot_entry;

typedef struct {
  pz_op op;
  int n_src;
  int n_links;
  int link[PZ_ATTN_MAX_LINKS];
  int n_slots;
  slot_entry slot[PZ_ATTN_MAX_SLOTS];
  /* The inner GEMM of slot `kind`: n, k from the params; false when the params rule it out. */
  bool (*shape)(const pz_op_params *p, pz_prezero_slot kind, int64_t *n, int64_t *k);
  int64_t *(*field_of)(pz_op_params *p, field f);
} op_entry;

/* MLA (DeepSeek-V2 modeling): q_b_proj [heads*(nope+rope), q_lora_rank]; o_proj [H, heads*v]. */
static bool mla_shape(const pz_op_params *p, pz_prezero_slot kind, int64_t *n, int64_t *k) {
  const pz_mla_params *a = &p->mla;
  if (kind == PZ_PREZERO_SLOT_QB) {
    if (a->q_lora_rank <= 0) return false;
    *n = (int64_t)a->n_heads * (a->qk_nope_head_dim + a->qk_rope_head_dim);
    *k = a->q_lora_rank;
    return true;
  }
  *n = a->hidden;
  *k = (int64_t)a->n_heads * a->v_head_dim;
  return true;
}

static int64_t *mla_field(pz_op_params *p, field f) {
  pz_mla_params *a = &p->mla;
  switch (f) {
    case F_N_TOTAL: return &a->prezero_n_total;
    case F_N_BASE: return &a->prezero_n_base;
    case F_COL_QB: return &a->qb_col_offset;
    case F_COL_OPROJ: return &a->oproj_col_offset;
    default: return NULL;
  }
}

/* GQA (Llama / Qwen2 / Qwen3 modeling): o_proj [H, heads*head_dim]. */
static bool gqa_shape(const pz_op_params *p, pz_prezero_slot kind, int64_t *n, int64_t *k) {
  const pz_gqa_params *a = &p->gqa;
  if (kind != PZ_PREZERO_SLOT_OPROJ) return false;
  *n = a->hidden;
  *k = (int64_t)a->n_heads * a->head_dim;
  return true;
}

static int64_t *gqa_field(pz_op_params *p, field f) {
  pz_gqa_params *a = &p->gqa;
  switch (f) {
    case F_N_TOTAL: return &a->prezero_n_total;
    case F_N_BASE: return &a->prezero_n_base;
    case F_COL_OPROJ: return &a->oproj_col_offset;
    default: return NULL;
  }
}

/* Quantised MOE (its shared experts run as GEMMs, cuda mlp_gemm.h): the gate | up GEMM
 * [2 x shared_inter, H], one block of gate_proj's rows then up_proj's; only with shared experts and H given. */
static bool moe_shape(const pz_op_params *p, pz_prezero_slot kind, int64_t *n, int64_t *k) {
  const pz_moe_params *a = &p->moe;
  if (kind != PZ_PREZERO_SLOT_SHARED_GU || a->wquant == 0 || a->shared_inter <= 0 || a->hidden <= 0) return false;
  *n = 2 * a->shared_inter;
  *k = a->hidden;
  return true;
}

static int64_t *moe_field(pz_op_params *p, field f) {
  pz_moe_params *a = &p->moe;
  switch (f) {
    case F_N_TOTAL: return &a->prezero_n_total;
    case F_N_BASE: return &a->prezero_n_base;
    case F_COL_SHGU: return &a->sh_gu_col_offset;
    default: return NULL;
  }
}

static const op_entry table[] = {
  {PZ_OP_MLA_ATTN, PZ_MLA_NSRC, 3, {PZ_MLA_QKV_A, PZ_MLA_Q, PZ_MLA_KV_A}, 2,
   {{PZ_PREZERO_SLOT_QB, "q_b", PZ_MLA_QB_PREZERO, PZ_MLA_QKV_A, false, false},
    {PZ_PREZERO_SLOT_OPROJ, "o_proj", PZ_MLA_OPROJ_PREZERO, -1, true, false}},
   mla_shape, mla_field},
  {PZ_OP_GQA_ATTN, PZ_GQA_NSRC, 1, {PZ_GQA_QKV}, 1,
   {{PZ_PREZERO_SLOT_OPROJ, "o_proj", PZ_GQA_OPROJ_PREZERO, -1, true, false}},
   gqa_shape, gqa_field},
  /* only the quantised layout has the slot's source (PZ_MOE_NSRC_Q sources; bf16 MOE nodes have PZ_MOE_NSRC) */
  {PZ_OP_MOE, PZ_MOE_NSRC_Q, 1, {PZ_MOE_LOGITS}, 1,
   {{PZ_PREZERO_SLOT_SHARED_GU, "sh_gu", PZ_MOE_SH_GU_PREZERO, -1, false, true}},
   moe_shape, moe_field},
};

static const op_entry *entry_of(pz_op op) {
  for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
    if (table[i].op == op) return &table[i];
  return NULL;
}

bool pz_attn_describe(const pz_node *n, pz_attn_desc *d) {
  const op_entry *e = n ? entry_of(n->op) : NULL;
  if (!e || n->n_src != e->n_src) return false;
  d->n_links = e->n_links;
  for (int i = 0; i < e->n_links; i++) d->link[i] = e->link[i];
  d->n_slots = 0;
  for (int i = 0; i < e->n_slots; i++) {
    const slot_entry *s = &e->slot[i];
    int64_t sn = 0, sk = 0;
    if (!e->shape(&n->p, s->kind, &sn, &sk)) continue;
    d->slot[d->n_slots++] = (pz_attn_slot){.kind = s->kind, .name = s->name, .src = s->src, .link = s->link,
                                           .output = s->output, .gated = s->gated, .n = sn, .k = sk};
  }
  return true;
}

bool pz_attn_is_slot(pz_op op, int s) {
  const op_entry *e = entry_of(op);
  for (int i = 0; e && i < e->n_slots; i++)
    if (e->slot[i].src == s) return true;
  return false;
}

bool pz_attn_set_slot_col(pz_node *n, pz_prezero_slot kind, int64_t col) {
  const op_entry *e = n ? entry_of(n->op) : NULL;
  if (!e || kind == PZ_PREZERO_SLOT_GEMM) return false;
  int64_t *f = e->field_of(&n->p, kind == PZ_PREZERO_SLOT_QB       ? F_COL_QB
                                  : kind == PZ_PREZERO_SLOT_OPROJ  ? F_COL_OPROJ
                                                                   : F_COL_SHGU);
  if (!f) return false;
  *f = col;
  return true;
}

bool pz_attn_set_fill(pz_node *n, int64_t n_total, int64_t n_base) {
  const op_entry *e = n ? entry_of(n->op) : NULL;
  if (!e) return false;
  *e->field_of(&n->p, F_N_TOTAL) = n_total;
  *e->field_of(&n->p, F_N_BASE) = n_base;
  return true;
}
