/* The prezero rewrite: the graph pass (donor-driven, by dataflow) and the run-time contract
 * its ops share (which columns of a donor's zero_fill buffer are zero on a consumer's entry). */
#ifndef PZ_PASSES_PREZERO_H
#define PZ_PASSES_PREZERO_H
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include "core/gate.h"
#include "core/ir.h"
#include "passes/passes.h"
#ifdef __cplusplus
extern "C" {
#endif

/* The prezero pass alone (no verify, no dumps; pz_run_passes adds those). Rewrites g in place:
 * for every AR_RMSNORM donor whose x_norm feeds split-K GEMM consumers that pass the legality
 * check (see prezero_pass.c, consumer_output_legal), it adds one [m, n_total] f32 BUFFER
 * "<donor>.prezero_buf", turns each consumer's output into a column view of it, rewrites the
 * donor to AR_RMSNORM_MAYBE_PREZERO and the GEMMs to MM_MAYBE_PREZERO, and threads slices into
 * the slots of the first slotted op that reads one of those outputs (passes/attn_slots.h:
 * MLA_ATTN q_b and o_proj, GQA_ATTN o_proj, a quantised MOE's shared gate | up; pz_pass_prezero_batch
 * with attn_slots = 0 does not;
 * the pass manager passes PREZERO_ATTN_SLOTS through pz_pass_opts).
 * Column layout per buffer: [graph GEMM outputs in node order | inner-GEMM slots (q_b) | output
 * slot (o_proj)], each slice starting at a multiple of 32 columns (128 bytes; n_total rounded up
 * too), with n_base = the start of the output slot (everything before is always zeroed by the
 * donor) and the output slot in [n_base, n_total) (zeroed by the donor only when the gate holds,
 * else by the attention op). When nothing matches, g is not
 * touched at all. st (may be NULL) gets matched = donors rewritten, rewritten = nodes rewritten.
 * log (may be NULL) gets one line per rewritten donor with its slices (offset, width).
 * Errors: PZ_ERR_OOM, PZ_ERR_SHAPE (internal inconsistency; the graph may be half-rewritten). */
pz_status pz_pass_prezero(pz_graph *g, FILE *log, pz_pass_stats *st);

/* ---- the per-batch plan (docs/ARCHITECTURE.md §4, step 4) ---------- */

/* Which kind of consumer a plan entry is: a graph GEMM node, or a GEMM inside a slotted op (node =
 * that op): q_b (MLA_ATTN), o_proj (MLA_ATTN, GQA_ATTN; the op's output), or the shared experts'
 * gate | up GEMM of a quantised MOE (n = 2 x shared_inter, k = H). */
typedef enum {
  PZ_PREZERO_SLOT_GEMM = 0,
  PZ_PREZERO_SLOT_QB,
  PZ_PREZERO_SLOT_OPROJ,
  PZ_PREZERO_SLOT_SHARED_GU
} pz_prezero_slot;

/* One consumer GEMM at batch m: C[m, n] (+)= A[m, k] · W[n, k]ᵀ (n, k in elements). */
typedef struct pz_prezero_query {
  int node;             /* graph node id */
  pz_prezero_slot kind;
  int64_t m, n, k;
} pz_prezero_query;

#define PZ_PREZERO_WHY_LEN 96
/* True when the kernel this consumer runs at q->m zeroes its output first and skips that
 * zeroing under zero_init = false (a split-K kernel with in-kernel zero or a memset node), i.e.
 * prezero saves something. why[why_len] may name the kernel (and, when false, the reason).
 * Must be a pure function of its arguments for one plan. */
typedef bool (*pz_prezero_fires_fn)(void *user, const pz_graph *g, const pz_prezero_query *q, char *why,
                                    size_t why_len);

/* A plan for one batch size m (tokens): only consumers whose kernel at m fires get a slice, the
 * rest stay plain GEMMs with their own outputs, so a batch size where nothing fires gets the
 * OFF graph back untouched; the o_proj slot (the one beyond n_base) is kept only when
 * pz_prezero_active(m, n_total, f32, H, tp, dev) holds for the buffer with it. */
typedef struct pz_prezero_batch {
  int64_t m;
  pz_prezero_fires_fn fires;  /* NULL: every legal consumer fires (the static rewrite) */
  void *user;
  int tp;
  const pz_device_desc *dev;  /* the gate's description (required with fires) */
  int attn_slots;             /* 0: no slices into the attention op's slots; else (-1, 1) on */
} pz_prezero_batch;

/* What a plan did for one donor: its buffer's columns and every candidate consumer. */
#define PZ_PREZERO_MAX_CONSUMERS 8
typedef struct pz_prezero_consumer {
  int node;
  pz_prezero_slot kind;
  int64_t n, k;         /* the consumer GEMM's shape (m is the plan's) */
  int64_t col;          /* first column of its slice in the buffer; -1 when it does not fire */
  bool fires;
  char why[PZ_PREZERO_WHY_LEN]; /* the answer's words: the kernel, and why it does not fire */
} pz_prezero_consumer;
typedef struct pz_prezero_donor_plan {
  int donor;                    /* AR_RMSNORM node id (before the rewrite) */
  int64_t n_total, n_base;      /* 0 when nothing fires (no buffer) */
  int n;
  pz_prezero_consumer c[PZ_PREZERO_MAX_CONSUMERS];
} pz_prezero_donor_plan;
typedef struct pz_prezero_report {
  int64_t m;                    /* 0 for the static rewrite */
  int n_donors, cap;            /* donors with at least one candidate consumer */
  pz_prezero_donor_plan *d;     /* owned; pz_prezero_report_free */
} pz_prezero_report;

/* The prezero pass for one batch size: pz_pass_prezero with b's question asked of every
 * candidate consumer (b NULL: the static rewrite, identical to pz_pass_prezero). rep (may be
 * NULL) gets one entry per donor with candidates, fired or not. Errors: PZ_ERR_INVALID_ARG
 * (b->fires without m >= 1, tp >= 1, dev), PZ_ERR_OOM, PZ_ERR_SHAPE. */
pz_status pz_pass_prezero_batch(pz_graph *g, const pz_prezero_batch *b, FILE *log, pz_pass_stats *st,
                                pz_prezero_report *rep);
void pz_prezero_report_free(pz_prezero_report *r);
/* Same donors, buffers and fired consumers at the same columns (so the rewritten graphs are equal). */
bool pz_prezero_report_same(const pz_prezero_report *a, const pz_prezero_report *b);
/* Prints the plan as text: per donor its fill (columns, bytes, fill CTAs from pz_ar_plan_for /
 * pz_ar_plan_fill_ctas, and the predicted added µs = bytes / dev->fill_penalty_bytes_per_us,
 * the gate's penalty model) and each consumer (fires or n/f, shape, slice, kernel); then a total.
 * g is the graph the plan was made from (node ids). Errors: PZ_ERR_INVALID_ARG. */
pz_status pz_prezero_report_print(const pz_prezero_report *r, const pz_graph *g, int tp, const pz_device_desc *dev,
                                  FILE *f);
/* Fired consumers over all donors (0 for NULL). */
int pz_prezero_report_fired(const pz_prezero_report *r);

/* Columns of a zero_fill buffer the donor zeroes in this step, for m rows: n_total when
 * pz_prezero_active(m, n_total, PZ_F32, H, tp, dev) holds, else n_base. m in tokens, columns
 * in elements, H = hidden_size. Every op of one donor's group must call this with the same
 * arguments so they agree (the decision is made per step / per captured batch size). */
int64_t pz_prezero_fill_cols(int64_t m, int64_t n_total, int64_t n_base, int64_t H, int tp,
                             const pz_device_desc *dev);

/* True when buffer columns [col_offset, col_offset + n) are zero on the consumer's entry in
 * this step (col_offset + n <= pz_prezero_fill_cols(...)); false means the consumer must zero
 * its slice itself (or write it without accumulating). */
bool pz_prezero_slice_zeroed(int64_t m, int64_t col_offset, int64_t n, int64_t n_total,
                             int64_t n_base, int64_t H, int tp, const pz_device_desc *dev);
#ifdef __cplusplus
}
#endif
#endif
