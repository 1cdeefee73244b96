/* Prezero ON vs OFF on the CPU backend for DeepSeek-V2-Lite (no q LoRA: q_proj + kv_a share the
 * input donor's buffer, o_proj slot, router gate) with 2 layers (1 dense + 1 MoE) at TP 2:
 * bit-identical logits and tokens with NaN poisoning, batches on both sides of the gate. */
#define _GNU_SOURCE 1 /* setenv */
#include "test_prezero_common.h"

int main(void) {
  unsetenv("PREZERO_ENABLE");
  unsetenv("PREZERO_DISABLE_PASSES");
  unsetenv("PREZERO_ATTN_SLOTS");
  unsetenv("PREZERO_FORCE_GATE");
  const int64_t ms[3] = {1, 8, 3};
  const char *const force[1] = {NULL};
  on_vs_off_modes("deepseek_v2_lite", 2, 2, 8, ms, 3, force, 1);
  CHECK(gate_yes > 0 && gate_no > 0);
  printf("gate: %d steps with the fill free, %d without\n", gate_yes, gate_no);
  TEST_DONE();
}
