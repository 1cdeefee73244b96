/* Prezero ON vs OFF on the CPU backend for the GQA layouts (docs/ARCHITECTURE.md §5): tiny_llama
 * (dense: qkv_proj slice + o_proj slot of the input donor, gate_up_proj slice of the
 * post-attention donor) and tiny_qwen3_moe (q/k norm, router gate slice) decode bit for bit like
 * the OFF graph over several steps at TP 1, 2 and 4 (2 kv heads: at TP 4 each is replicated over
 * two ranks), at batch sizes on both sides of the fill gate and with PREZERO_FORCE_GATE=on|off,
 * with NaN-poisoned activations and buffers. Negative controls show the poisoning catches a donor that fills less
 * than a consumer (graph GEMM, GQA o_proj slot) assumes. */
#define _GNU_SOURCE 1 /* setenv */
#include "test_prezero_common.h"

/* The donor zeroes less than a consumer assumes (gate forced off), so NaN from the poisoned
 * buffer reaches the logits:
 *   0: graph GEMMs (qkv_proj, gate_up_proj / router gate): every donor's n_base set to 0;
 *   1: the o_proj slot: the GQA op believes its slot lies in the always-zeroed prefix
 *      (prezero_n_base = n_total) while the donor zeroes only the real prefix. */
static void broken_fill_is_caught(const char *preset, int variant) {
  int64_t M = 4, ms[1] = {4};
  pz_graph *on = build(preset, 2, 2, M, 1);
  if (!on) return;
  int touched = 0;
  for (int i = 0; i < on->n_nodes; i++) {
    pz_node *n = &on->nodes[i];
    if (variant == 0 && n->op == PZ_OP_AR_RMSNORM_MAYBE_PREZERO) n->p.norm.n_base = 0, touched++;
    if (variant == 1 && n->op == PZ_OP_GQA_ATTN && n->src[PZ_GQA_OPROJ_PREZERO] >= 0)
      n->p.gqa.prezero_n_base = n->p.gqa.prezero_n_total, touched++;
  }
  CHECK(touched >= 2);
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
  if (nan == 0) fprintf(stderr, "%s negative control %d: no NaN reached the logits\n", preset, variant);
  trace_free(&t);
  pz_graph_free(on);
}

/* The ON graph really has the GQA slots this test relies on: each layer's GQA_ATTN writes its
 * partial into its input donor's buffer beyond n_base. */
static void check_has_slots(const char *preset, int tp) {
  pz_graph *on = build(preset, tp, 2, 8, 1);
  if (!on) return;
  int slots = 0;
  for (int i = 0; i < on->n_nodes; i++) {
    const pz_node *n = &on->nodes[i];
    if (n->op != PZ_OP_GQA_ATTN) continue;
    CHECK(n->src[PZ_GQA_OPROJ_PREZERO] >= 0 && n->p.gqa.oproj_col_offset == n->p.gqa.prezero_n_base &&
          n->p.gqa.prezero_n_total > n->p.gqa.prezero_n_base);
    slots += n->src[PZ_GQA_OPROJ_PREZERO] >= 0;
  }
  CHECK(slots == 2);
  pz_graph_free(on);
}

int main(void) {
  unsetenv("PREZERO_ENABLE");
  unsetenv("PREZERO_DISABLE_PASSES");
  unsetenv("PREZERO_ATTN_SLOTS");
  unsetenv("PREZERO_FORCE_GATE");
  /* 2 layers each; batches on both sides of the gate of test_dev(). */
  const int64_t ms[5] = {1, 4, 64, 23, 2};
  static const char *const presets[2] = {"tiny_llama", "tiny_qwen3_moe"};
  for (int p = 0; p < 2; p++)
    for (int tp = 1; tp <= 4; tp *= 2) { /* 2 kv heads: 2, 1, and 1 replicated over 2 ranks */
      check_has_slots(presets[p], tp);
      on_vs_off(presets[p], tp, 2, 64, ms, 5);
    }
  CHECK(gate_yes > 0 && gate_no > 0);
  printf("gate: %d steps with the fill free, %d without\n", gate_yes, gate_no);
  for (int p = 0; p < 2; p++)
    for (int v = 0; v < 2; v++) broken_fill_is_caught(presets[p], v);
  TEST_DONE();
}
