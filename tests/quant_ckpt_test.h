/* Pieces the tests that write quantised checkpoints share (test_int4_checkpoint, test_gptq_dense,
 * test_quant_mixtral): exact binary16 bits of a test scale, and a golden config.json with fields added. */
#ifndef PZ_TESTS_QUANT_CKPT_TEST_H
#define PZ_TESTS_QUANT_CKPT_TEST_H
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "pz_test.h"

/* The binary16 bits of v, which must be a normal f16 with at most 10 fraction bits (the tests' power-of-two
 * scales; CHECK fails otherwise). */
static inline uint16_t pz_test_f16_exact(float v) {
  uint32_t u;
  memcpy(&u, &v, 4);
  const int e = (int)((u >> 23) & 0xff) - 127 + 15;
  CHECK(e >= 1 && e <= 30 && (u & 0x1fffu) == 0);
  return (uint16_t)(((u >> 16) & 0x8000u) | ((uint32_t)e << 10) | ((u & 0x7fffffu) >> 13));
}

/* dst: the golden config.json `golden` (a path under tests/, e.g. "data/golden/mixtral/config.json") with `tail`
 * ("" or JSON fields) added as its last fields. CHECK fails when the golden file cannot be read. */
static inline void pz_test_write_config_tail(const char *golden, const char *dst, const char *tail) {
  char src[400];
  PZ_TEST_PATH(src, golden);
  char *txt = pz_test_slurp(src, NULL);
  CHECK(txt != NULL);
  if (!txt) return;
  char *end = strrchr(txt, '}');
  if (end) *end = 0;
  FILE *f = fopen(dst, "w");
  CHECK(f != NULL);
  if (f) {
    fprintf(f, "%s%s%s}\n", txt, tail[0] ? "," : "", tail);
    fclose(f);
  }
  free(txt);
}
#endif
