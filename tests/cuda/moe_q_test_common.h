/* Shared by the quantised-expert GPU tests (test_moe_w4a16.c, test_moe_w8a16.c): the tolerance
 * policy, the seeded xorshift stream of their inputs and the engine CPU-vs-CUDA decode case. */
#pragma once
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include "prezero.h"
#include "pz_test.h"

/* |gpu - ref| <= TOL_REL * max|ref row| + 1e-6: the GPU sums the products in another order than
 * the CPU reference (f32 on the tensor cores per group / warp K slice, then the slices), and
 * h = bf16(silu(g) * u) may round to a neighbouring bf16 (2^-8 relative) for a few elements; the
 * same policy as test_moe's bf16 experts. */
#define TOL_REL 2e-3

/* xorshift64 (Marsaglia, "Xorshift RNGs", 2003), upper 32 bits. */
static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t rnd32(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return (uint32_t)(rng >> 32);
}
static double urand(void) { return (double)rnd32() / 4294967296.0; }

/* One decode step of tiny (2 layers, batch 4) with the routed experts stored as `quant`
 * (PZ_QUANT_INT4 / PZ_QUANT_FP8) on the CPU and on GPU 0: logits within 1e-2 of the largest
 * |logit| (the MoE sums in another order; every other op as test_exec checks it). */
static void engine_quant_case(int quant, const char *label) {
  float *lg[2] = {NULL, NULL};
  int vocab = 0;
  for (int d = 0; d < 2; d++) {
    pz_engine_config ec = PZ_ENGINE_CONFIG_INIT;
    ec.quant = quant;
    ec.layers = 2;
    ec.max_batch = 4;
    ec.context = 16;
    ec.max_steps = 2;
    ec.prezero = 0;
    ec.device = d ? PZ_DEVICE_CUDA : PZ_DEVICE_CPU;
    pz_engine *e = NULL;
    CHECK_OK(pz_engine_create(&ec, &e));
    if (!e) { free(lg[0]); return; }
    pz_engine_info info;
    CHECK_OK(pz_engine_get_info(e, &info));
    vocab = (int)info.vocab_size;
    int32_t in[4] = {1, 7, 300, 999}, out[4];
    CHECK_OK(pz_engine_step(e, 4, in, out));
    lg[d] = malloc(sizeof(float) * 4 * (size_t)vocab);
    CHECK_OK(pz_engine_logits(e, 4, lg[d]));
    pz_engine_destroy(e);
  }
  double mx = 0, md = 0;
  for (int i = 0; i < 4 * vocab; i++) {
    mx = fmax(mx, fabs(lg[0][i]));
    md = fmax(md, fabs((double)lg[0][i] - lg[1][i]));
  }
  printf("engine tiny --quant %s, TP 1: max |cuda - cpu| logit %.3e (max |logit| %.3f)\n", label, md, mx);
  CHECK(md <= 1e-2 * mx);
  free(lg[0]);
  free(lg[1]);
}
