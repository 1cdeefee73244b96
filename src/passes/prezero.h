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
 * donor to AR_RMSNORM_MAYBE_PREZERO and the GEMMs to MM_MAYBE_PREZERO, and threads q_b / o_proj
 * slices into an MLA_ATTN node that reads those outputs (unless PREZERO_ATTN_SLOTS=0).
 * Column layout per buffer: [graph GEMM outputs in node order | q_b | o_proj], each slice
 * starting at a multiple of 32 columns (128 bytes; n_total rounded up too), with
 * n_base = the start of o_proj (everything before is always zeroed by the donor) and o_proj in
 * [n_base, n_total) (zeroed by the donor only when the gate holds, else by the attention op). When nothing matches, g is not
 * touched at all. st (may be NULL) gets matched = donors rewritten, rewritten = nodes rewritten.
 * log (may be NULL) gets one line per rewritten donor with its slices (offset, width).
 * Errors: PZ_ERR_OOM, PZ_ERR_SHAPE (internal inconsistency; the graph may be half-rewritten). */
pz_status pz_pass_prezero(pz_graph *g, FILE *log, pz_pass_stats *st);

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
