/* CUDA executor's memory plan and device checks that need no GPU (runs in any CUDA build):
 * per-rank bytes of Kimi-K2 layers against hand-computed weight and KV-cache sizes (33.8 GB of
 * routed experts per MoE layer at TP 1, half at TP 2), the layer-fit rule, and the clear
 * PZ_ERR_NO_DEVICE of the executor and the engine when no GPU is visible. */
#define _POSIX_C_SOURCE 200809L
#include <string.h>
#include "backend/cuda/exec.h"
#include "backend/cuda/runtime.h"
#include "model/builder.h"
#include "model/config.h"
#include "pz_test.h"

enum { M = 4, CTX = 1024 };

/* Kimi-K2 (configs/kimi_k2.json) weight bytes, by hand: H 7168, 64 heads, q_lora 1536, kv_lora
 * 512, rope 64, nope 128, v 128, 384 experts of 2048, 1 shared expert, dense 18432, bf16. */
static int64_t attn_w(int tp) {
  int64_t h = 64 / tp;
  return 2 * ((int64_t)2112 * 7168 + 1536 + h * 192 * 1536 + 512 + 2 * h * 128 * 512 + (int64_t)7168 * h * 128 + 2 * 7168);
}
static int64_t moe_w(int tp) {
  return 2 * (3 * (int64_t)384 * (2048 / tp) * 7168 + 3 * (int64_t)(2048 / tp) * 7168 + (int64_t)384 * 7168) + 384 * 4;
}
static int64_t dense_w(int tp) { return 2 * 3 * (int64_t)(18432 / tp) * 7168; }
static int64_t kv_bytes(void) { return (int64_t)M * CTX * 576 * 2; }
/* Upper bound of one layer's activations and the 256-byte rounding of its tensors. */
static int64_t act_bound(void) { return (int64_t)M * (2112 * 4 + 7168 * 12 + 384 * 4) + 40 * 256; }

static void plan(int tp) {
  pz_model_config mc;
  CHECK_OK(pz_config_load("kimi_k2", &mc));
  pz_build_opts bo = {.tp = tp, .m = M, .max_ctx = CTX, .layers = 4};
  pz_graph *g = NULL;
  CHECK_OK(pz_build_decode_graph(&mc, &bo, &g));
  if (!g) return;
  int64_t fixed = 0, lb[4];
  CHECK_OK(pz_cuda_bytes_by_layer(g, &fixed, lb, 4));
  int64_t l0 = attn_w(tp) + dense_w(tp) + kv_bytes(), l1 = attn_w(tp) + moe_w(tp) + kv_bytes();
  CHECK(lb[0] >= l0 && lb[0] <= l0 + act_bound());
  for (int L = 1; L < 4; L++) CHECK(lb[L] >= l1 && lb[L] <= l1 + act_bound());
  int64_t experts = 3 * (int64_t)384 * 2048 * 7168 * 2 / tp; /* 33.8 GB at TP 1 */
  CHECK(experts == (tp == 1 ? 33822867456LL : 16911433728LL));
  int64_t fx = 2 * (int64_t)163840 / tp * 7168 * 2 + 7168 * 2; /* embed_tokens + lm_head + norm */
  CHECK(fixed >= fx && fixed <= fx + (int64_t)M * (163840 / tp) * 4 * 2 + M * 7168 * 8 + 40 * 256);
  /* The executor adds only its argmax scratch and the real-row word (256-byte rounded each). */
  int64_t total = fixed;
  for (int L = 0; L < 4; L++) total += lb[L];
  CHECK(pz_cuda_exec_bytes(g) >= total && pz_cuda_exec_bytes(g) <= total + 4096);
  /* Fit: leading layers whose sum stays within the budget. */
  CHECK(pz_cuda_fit_layers(fixed, lb, 4, fixed - 1) == 0);
  CHECK(pz_cuda_fit_layers(fixed, lb, 4, fixed + lb[0] - 1) == 0);
  CHECK(pz_cuda_fit_layers(fixed, lb, 4, fixed + lb[0]) == 1);
  CHECK(pz_cuda_fit_layers(fixed, lb, 4, fixed + lb[0] + lb[1] + lb[2] / 2) == 2);
  CHECK(pz_cuda_fit_layers(fixed, lb, 4, INT64_MAX / 2) == 4);
  printf("kimi_k2 TP %d per rank: outside the layers %.2f GiB, dense layer 0 %.2f GiB, MoE layer %.2f GiB\n", tp,
         fixed / 1073741824.0, lb[0] / 1073741824.0, lb[1] / 1073741824.0);
  pz_graph_free(g);
}

int main(void) {
  plan(1);
  plan(2);
  CHECK(pz_cuda_default_reserve((int64_t)100 << 30) == ((int64_t)3 << 30));
  CHECK(pz_cuda_default_reserve((int64_t)10 << 30) == ((int64_t)2 << 30));
  if (pz_cuda_device_count() == 0) {
    /* No GPU: both entry points say so clearly, nothing is created. */
    pz_model_config mc;
    CHECK_OK(pz_config_load("tiny", &mc));
    pz_build_opts bo = {.tp = 1, .m = 2, .max_ctx = 16, .layers = 1};
    pz_graph *g = NULL;
    CHECK_OK(pz_build_decode_graph(&mc, &bo, &g));
    pz_cuda_exec *e = NULL;
    if (g) CHECK_ST(pz_cuda_exec_create(g, NULL, &e), PZ_ERR_NO_DEVICE);
    CHECK(e == NULL);
    pz_graph_free(g);
    pz_engine_config c = PZ_ENGINE_CONFIG_INIT;
    c.device = PZ_DEVICE_CUDA;
    pz_engine *en = NULL;
    CHECK_ST(pz_engine_create(&c, &en), PZ_ERR_NO_DEVICE);
    CHECK(en == NULL && strstr(pz_last_error(), "--device cpu"));
    CHECK(pz_gpu_count() == 0);
    printf("no GPU: executor and engine refuse with PZ_ERR_NO_DEVICE (%s)\n", pz_last_error());
  }
  TEST_DONE();
}
