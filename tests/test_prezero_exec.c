/* Prezero ON vs OFF on the CPU backend (docs/ARCHITECTURE.md §5): the rewritten graph decodes bit for
 * bit like the original (logits and tokens) over several steps, at TP 1/2/4, at batch sizes
 * where the gate says yes and where it says no, with NaN-poisoned activations and buffers (a
 * missing zero-fill shows up as NaN), and with PREZERO_FORCE_GATE=on|off. Negative controls
 * show the poisoning catches a donor that does not fill what a consumer (graph GEMM, q_b
 * slot, o_proj slot) assumes. */
#define _GNU_SOURCE 1 /* setenv */
#include "test_prezero_common.h"

/* Negative controls: the donor zeroes less than a consumer assumes (gate forced off), and the
 * poisoned buffer leaks NaN into the logits. This is what a broken fill would look like, for
 * each kind of consumer:
 *   0: graph GEMMs (qkv_a, gate): the donors' n_base set to 0;
 *   1: the q_b slot: input donors' n_base cut to the end of qkv_a (the MLA op still believes
 *      q_b lies in the prefix);
 *   2: the o_proj slot: the MLA op believes o_proj lies in the prefix (its prezero_n_base set
 *      to n_total) while the donor zeroes only the real prefix. */
static void broken_fill_is_caught(int variant) {
  int64_t M = 4, ms[1] = {4};
  pz_graph *on = build("tiny", 2, 2, M, 1);
  if (!on) return;
  for (int i = 0; i < on->n_nodes; i++) {
    pz_node *n = &on->nodes[i];
    if (variant == 0 && n->op == PZ_OP_AR_RMSNORM_MAYBE_PREZERO) n->p.norm.n_base = 0;
    if (variant == 1 && n->op == PZ_OP_AR_RMSNORM_MAYBE_PREZERO && n->role == PZ_ROLE_INPUT_LAYERNORM)
      n->p.norm.n_base = n->p.norm.n_base - (on->nodes[i + 2].p.mla.n_heads *
                                             (on->nodes[i + 2].p.mla.qk_nope_head_dim + on->nodes[i + 2].p.mla.qk_rope_head_dim));
    if (variant == 2 && n->op == PZ_OP_MLA_ATTN) n->p.mla.prezero_n_base = n->p.mla.prezero_n_total;
  }
  if (variant == 1) CHECK(on->nodes[3].op == PZ_OP_MLA_ATTN && on->nodes[1].p.norm.n_base == on->nodes[3].p.mla.qb_col_offset);
  CHECK_OK(pz_graph_verify(on));
  int64_t V = on->info.vocab_size;
  trace t;
  trace_alloc(&t, 1, M, V);
  setenv("PREZERO_FORCE_GATE", "off", 1);
  decode(on, ms, 1, &t);
  unsetenv("PREZERO_FORCE_GATE");
  int nan = 0;
  for (int64_t i = 0; i < M * V; i++) nan += isnan(t.logits[i]);
  CHECK(nan > 0);
  if (nan == 0) fprintf(stderr, "negative control %d: no NaN reached the logits\n", variant);
  trace_free(&t);
  pz_graph_free(on);
}

int main(void) {
  unsetenv("PREZERO_ENABLE");
  unsetenv("PREZERO_DISABLE_PASSES");
  unsetenv("PREZERO_ATTN_SLOTS");
  /* tiny (4 layers: 1 dense + 3 MoE) at TP 1/2/4; batches on both sides of the gate. */
  const int64_t ms[5] = {1, 4, 128, 37, 2};
  on_vs_off("tiny", 1, 4, 128, ms, 5);
  on_vs_off("tiny", 2, 4, 128, ms, 5);
  on_vs_off("tiny", 4, 4, 128, ms, 5);
  CHECK(gate_yes > 0 && gate_no > 0);
  printf("gate: %d steps with the fill free, %d without\n", gate_yes, gate_no);
  for (int v = 0; v < 3; v++) broken_fill_is_caught(v);
  TEST_DONE();
}
