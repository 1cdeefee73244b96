/* Prezero ON vs OFF on the CPU backend (DESIGN.md §5): the rewritten graph decodes bit for
 * bit like the original (logits and tokens) over several steps, at TP 1/2/4, at batch sizes
 * where the gate says yes and where it says no, with NaN-poisoned activations and buffers (a
 * missing zero-fill shows up as NaN), and with PREZERO_FORCE_GATE=on|off. A negative control
 * shows the poisoning catches a donor that does not fill what its consumers assume. */
#define _GNU_SOURCE 1 /* setenv */
#include "test_prezero_common.h"

/* Negative control: a donor that zeroes nothing (n_base = 0, gate forced off) while its
 * consumers still believe their slices are in the always-zeroed prefix: the poisoned buffer
 * leaks NaN into the logits. This is what a broken fill would look like. */
static void broken_fill_is_caught(void) {
  int64_t M = 4, ms[1] = {4};
  pz_graph *on = build("tiny", 2, 2, M, 1);
  if (!on) return;
  for (int i = 0; i < on->n_nodes; i++)
    if (on->nodes[i].op == PZ_OP_AR_RMSNORM_MAYBE_PREZERO) on->nodes[i].p.norm.n_base = 0;
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
  broken_fill_is_caught();
  TEST_DONE();
}
