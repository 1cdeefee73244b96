/* pz_engine_reset_sequence and pz_engine_position on the CPU backend (the `tiny` preset, MLA + MoE,
 * and `tiny_llama`, GQA; TP 1 and 2): a batch slot reused for a new request decodes exactly what a
 * fresh sequence decodes. Engine A runs sequences 0 and 1 together for H steps (sequence 1's
 * tokens are a request that then finishes), resets sequence 1 and runs both for R more steps,
 * sequence 1 now fed a new request's greedy tokens. Engine B runs sequence 0 alone for the first
 * H steps (same tokens) and then both, sequence 1 from its empty cache. Per-row results do not
 * depend on the other rows of a batch (the one-prompt-at-a-time golden tests hold this), so A and
 * B must give the same tokens and logits bit for bit at every later step, for both sequences.
 * Also: positions reported before and after, a context-prefilled engine whose caches filled up
 * decoding, after its slots are reset, what a fresh context-0 engine decodes (full_then_fresh; also
 * `tiny_qwen3_moe` and TP 4), and the argument errors. */
#include <stdbool.h>
#include <string.h>
#include "prezero.h"
#include "pz_test.h"

#define H 5 /* steps before the reset */
#define R 6 /* steps after it */

static pz_engine *make(const char *model, int tp, int context) {
  pz_engine_config c = PZ_ENGINE_CONFIG_INIT;
  c.model = model;
  c.tp = tp;
  c.max_batch = 2;
  c.context = context;
  c.max_steps = H + R + 2;
  c.seed = 11;
  c.prezero = 0;
  c.threads = 1;
  c.device = PZ_DEVICE_CPU;
  pz_engine *e = NULL;
  CHECK_OK(pz_engine_create(&c, &e));
  return e;
}

/* reset false, the control: without the reset, sequence 1 of A (its old request's history in the
 * cache) decodes otherwise at the first step after, so the comparison would notice a reset that did
 * nothing. */
static void reuse_case(const char *model, int tp, bool reset) {
  pz_engine *a = make(model, tp, 0), *b = make(model, tp, 0);
  if (!a || !b) {
    pz_engine_destroy(a);
    pz_engine_destroy(b);
    return;
  }
  pz_engine_info info;
  CHECK_OK(pz_engine_get_info(a, &info));
  const int64_t V = info.vocab_size;
  float *la = malloc(sizeof(float) * (size_t)(2 * V)), *lb = malloc(sizeof(float) * (size_t)(2 * V));
  CHECK(la && lb);
  int32_t in_a[2] = {17, 201}, in_b[2] = {17, 0}, out_a[2], out_b[2];
  for (int s = 0; s < H && la && lb; s++) {
    CHECK_OK(pz_engine_step(a, 2, in_a, out_a));
    CHECK_OK(pz_engine_step(b, 1, in_b, out_b));
    CHECK(out_a[0] == out_b[0]); /* sequence 0 alone or beside another: the same row */
    in_a[0] = out_a[0];
    in_a[1] = out_a[1];
    in_b[0] = out_b[0];
  }
  int64_t p = -1;
  CHECK_OK(pz_engine_position(a, 0, &p));
  CHECK(p == H);
  CHECK_OK(pz_engine_position(a, 1, &p));
  CHECK(p == H);
  CHECK_OK(pz_engine_position(b, 1, &p));
  CHECK(p == 0);
  if (reset) {
    CHECK_OK(pz_engine_reset_sequence(a, 1));
    CHECK_OK(pz_engine_position(a, 1, &p));
    CHECK(p == 0);
    CHECK_OK(pz_engine_position(a, 0, &p));
    CHECK(p == H); /* the other sequence is untouched */
  }
  in_a[1] = in_b[1] = 42; /* the new request's first token */
  int compared = 0;
  for (int s = 0; s < R && la && lb; s++) {
    CHECK_OK(pz_engine_step(a, 2, in_a, out_a));
    CHECK_OK(pz_engine_step(b, 2, in_b, out_b));
    CHECK_OK(pz_engine_logits(a, 2, la));
    CHECK_OK(pz_engine_logits(b, 2, lb));
    if (!reset) {
      CHECK(memcmp(la + V, lb + V, sizeof(float) * (size_t)V) != 0);
      break;
    }
    if (memcmp(out_a, out_b, sizeof out_a) || memcmp(la, lb, sizeof(float) * (size_t)(2 * V))) {
      fprintf(stderr, "%s TP %d: step %d after the reset differs from a fresh sequence (tokens %d %d vs %d %d)\n", model,
              tp, s, out_a[0], out_a[1], out_b[0], out_b[1]);
      pz_test_failures++;
      break;
    }
    memcpy(in_a, out_a, sizeof in_a);
    memcpy(in_b, out_b, sizeof in_b);
    compared++;
  }
  if (reset) {
    CHECK(compared == R);
    CHECK_OK(pz_engine_position(a, 1, &p));
    CHECK(p == R);
  }
  free(la);
  free(lb);
  pz_engine_destroy(a);
  pz_engine_destroy(b);
}

/* A context-prefilled engine whose caches fill up, then every slot reset: the next step is refused
 * while a stepped sequence is full (a reset of a later one does not help), and after the resets each
 * sequence decodes, bit for bit, what sequence 0 of a fresh engine with no prefilled context decodes
 * from the same tokens (position 0 onwards, not the context). Sequence 2 sits out the first steps
 * (m = 2 < 3): its position stays 0 and it then starts as a fresh one. Tokens are fed as a prompt is
 * (ids given, outputs ignored) for the first steps, then greedily. */
#define FC 16 /* prefilled context */
#define FS 3  /* max_steps: the caches fill after FS steps */
static void full_then_fresh(const char *model, int tp) {
  pz_engine_config c = PZ_ENGINE_CONFIG_INIT;
  c.model = model;
  c.tp = tp;
  c.max_batch = 3;
  c.context = FC;
  c.max_steps = FS;
  c.seed = 5;
  c.prezero = 0;
  c.threads = 1;
  c.device = PZ_DEVICE_CPU;
  pz_engine *a = NULL, *ref[3] = {NULL, NULL, NULL};
  CHECK_OK(pz_engine_create(&c, &a));
  c.max_batch = 1;
  c.context = 0;
  c.max_steps = FC + FS; /* the same capacity, none of it prefilled */
  for (int i = 0; i < 3; i++) CHECK_OK(pz_engine_create(&c, &ref[i]));
  if (!a || !ref[0] || !ref[1] || !ref[2]) goto out;
  pz_engine_info info;
  CHECK_OK(pz_engine_get_info(a, &info));
  const int64_t V = info.vocab_size;
  float *la = malloc(sizeof(float) * (size_t)(3 * V)), *lr = malloc(sizeof(float) * (size_t)V);
  CHECK(la && lr);
  int32_t in[3] = {3, 4, 5}, out[3], rout[1];
  for (int s = 0; s < FS; s++) CHECK_OK(pz_engine_step(a, 3, in, out));
  int64_t p = -1;
  CHECK_OK(pz_engine_position(a, 2, &p));
  CHECK(p == FC + FS && p == info.max_ctx);
  CHECK_ST(pz_engine_step(a, 3, in, out), PZ_ERR_INVALID_ARG); /* full */
  CHECK_OK(pz_engine_reset_sequence(a, 2));
  CHECK_ST(pz_engine_step(a, 3, in, out), PZ_ERR_INVALID_ARG); /* 0 and 1 are still full */
  CHECK_OK(pz_engine_reset_sequence(a, 0));
  CHECK_OK(pz_engine_reset_sequence(a, 1));
  for (int i = 0; i < 3; i++) {
    CHECK_OK(pz_engine_position(a, i, &p));
    CHECK(p == 0);
  }
  static const int32_t prompt[3][3] = {{9, 250, 31}, {77, 2, 140}, {61, 61, 8}};
  int32_t pi[3] = {0, 0, 0}; /* prompt tokens fed so far */
  int compared = 0;
  for (int s = 0; s < 8 && la && lr; s++) {
    const int m = s < 2 ? 2 : 3;
    for (int i = 0; i < m; i++) in[i] = pi[i] < 3 ? prompt[i][pi[i]++] : in[i];
    CHECK_OK(pz_engine_step(a, m, in, out));
    CHECK_OK(pz_engine_logits(a, m, la));
    for (int i = 0; i < m; i++) {
      CHECK_OK(pz_engine_step(ref[i], 1, &in[i], rout));
      CHECK_OK(pz_engine_logits(ref[i], 1, lr));
      if (rout[0] != out[i] || memcmp(lr, la + (size_t)i * (size_t)V, sizeof(float) * (size_t)V)) {
        fprintf(stderr, "%s TP %d: step %d, sequence %d after the resets differs from a fresh one (token %d vs %d)\n",
                model, tp, s, i, out[i], rout[0]);
        pz_test_failures++;
      } else {
        compared++;
      }
      in[i] = out[i]; /* greedy once its prompt is fed */
    }
    CHECK_OK(pz_engine_position(a, 2, &p));
    CHECK(p == (s < 2 ? 0 : s - 1));
  }
  CHECK(compared == 2 * 8 + 6);
  free(la);
  free(lr);
out:
  for (int i = 0; i < 3; i++) pz_engine_destroy(ref[i]);
  pz_engine_destroy(a);
}

int main(void) {
  reuse_case("tiny", 1, true);
  reuse_case("tiny", 2, true);
  reuse_case("tiny_llama", 1, true);
  reuse_case("tiny_llama", 2, true);
  reuse_case("tiny", 1, false);
  full_then_fresh("tiny", 1);
  full_then_fresh("tiny", 4);
  full_then_fresh("tiny_llama", 2);
  full_then_fresh("tiny_qwen3_moe", 4);

  /* A context-prefilled engine: positions start at the context; a reset goes to 0, not back to it. */
  pz_engine *e = make("tiny", 1, 16);
  if (e) {
    int64_t p = -1;
    CHECK_OK(pz_engine_position(e, 1, &p));
    CHECK(p == 16);
    CHECK_OK(pz_engine_reset_sequence(e, 1));
    CHECK_OK(pz_engine_position(e, 1, &p));
    CHECK(p == 0);
    /* argument errors: a status and a message, nothing changed */
    CHECK(pz_engine_reset_sequence(e, 2) == PZ_ERR_INVALID_ARG && strstr(pz_last_error(), "out of range 0..1"));
    CHECK(pz_engine_reset_sequence(e, -1) == PZ_ERR_INVALID_ARG);
    CHECK(pz_engine_reset_sequence(NULL, 0) == PZ_ERR_INVALID_ARG);
    CHECK(pz_engine_position(e, 2, &p) == PZ_ERR_INVALID_ARG);
    CHECK(pz_engine_position(e, 0, NULL) == PZ_ERR_INVALID_ARG);
    CHECK(pz_engine_position(NULL, 0, &p) == PZ_ERR_INVALID_ARG);
    CHECK_OK(pz_engine_position(e, 0, &p));
    CHECK(p == 16);
    pz_engine_destroy(e);
  }
  TEST_DONE();
}
