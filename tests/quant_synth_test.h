/* The engine decodes the quantised-weight tests compare: synthetic weights (test_quant_synth,
 * test_quant_synth_gqa) and checkpoints a test wrote (test_int4_checkpoint, test_quant_mixtral). */
#ifndef PZ_TESTS_QUANT_SYNTH_TEST_H
#define PZ_TESTS_QUANT_SYNTH_TEST_H
#include <stdint.h>
#include <string.h>
#include "prezero.h"

/* An engine made from ec decodes `steps` greedy steps at batch 2 from first[2] (then each step's
 * tokens), then is destroyed. toks [steps x 2]; logits (NULL: not read) the last step's [2 x vocab_size].
 * Errors: those of pz_engine_create / pz_engine_step / pz_engine_logits. */
static inline pz_status pz_test_greedy2(const pz_engine_config *ec, int steps, const int32_t first[2], int32_t *toks,
                                        float *logits) {
  pz_engine *e = NULL;
  PZ_CHECK(pz_engine_create(ec, &e));
  int32_t in[2] = {first[0], first[1]};
  pz_status st = PZ_OK;
  for (int s = 0; s < steps && st == PZ_OK; s++) {
    st = pz_engine_step(e, 2, in, toks + 2 * s);
    memcpy(in, toks + 2 * s, sizeof in);
  }
  if (st == PZ_OK && logits) st = pz_engine_logits(e, 2, logits);
  pz_engine_destroy(e);
  return st;
}

/* Greedy tokens of 3 steps at batch 2 (prompts 3 and 99, then each step's tokens) and the last step's
 * logits, on the CPU with the prezero pass off: model (NULL: the tiny preset, or a config path), layers
 * (0: all), quant (PZ_QUANT_*), tp, seed. tok [3 x 2], lg [2 x vocab_size]. Errors: those of
 * pz_engine_create / pz_engine_step / pz_engine_logits. */
static inline pz_status pz_test_decode3(const char *model, int layers, int quant, int tp, uint64_t seed,
                                        int32_t *tok, float *lg) {
  pz_engine_config ec = PZ_ENGINE_CONFIG_INIT;
  ec.model = model;
  ec.tp = tp;
  ec.max_batch = 2;
  ec.context = 4;
  ec.max_steps = 3;
  ec.layers = layers;
  ec.seed = seed;
  ec.prezero = 0;
  ec.threads = 2;
  ec.quant = quant;
  static const int32_t first[2] = {3, 99};
  return pz_test_greedy2(&ec, 3, first, tok, lg);
}

/* Greedy decode of the checkpoint in directory `model_dir` on the CPU, prezero off, one thread, from
 * an empty KV cache: batch 2, first tokens first[2], then each step's tokens, `steps` steps (the
 * engine's max_steps). toks [steps x 2]; logits (NULL: not read) the last step's [2 x vocab_size].
 * Errors: those of pz_engine_create / pz_engine_step / pz_engine_logits. */
static inline pz_status pz_test_decode_dir(const char *model_dir, int tp, int steps, const int32_t first[2],
                                           int32_t *toks, float *logits) {
  pz_engine_config ec = PZ_ENGINE_CONFIG_INIT;
  ec.model_dir = model_dir;
  ec.tp = tp;
  ec.max_batch = 2;
  ec.context = 0;
  ec.max_steps = steps;
  ec.prezero = 0;
  ec.threads = 1;
  ec.device = PZ_DEVICE_CPU;
  return pz_test_greedy2(&ec, steps, first, toks, logits);
}

#endif
