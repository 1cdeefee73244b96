/* libFuzzer target: pz_st_open on the input as a whole file (header length, JSON header, data).
 * Seed corpus: copies of tests/data/golden/ and tests/data/int4/ safetensors files in a scratch folder. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include "model/safetensors.h"
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static char path[64];
  if (!path[0]) snprintf(path, sizeof path, "/tmp/pz_fuzz_st_%d.safetensors", (int)getpid());
  FILE *f = fopen(path, "wb");
  if (!f) return 0;
  if (size) fwrite(data, 1, size, f);
  fclose(f);
  pz_st_file *st = NULL;
  pz_status s = pz_st_open(path, &st);
  if (s != PZ_OK && !pz_last_error()[0]) abort();
  if (s == PZ_OK) {
    volatile unsigned sum = 0;
    for (int i = 0; i < st->n; i++)
      for (size_t k = 0; k < st->t[i].nbytes; k++) sum += ((const unsigned char *)st->t[i].data)[k];
    (void)sum; /* every mapped byte is read (ASan checks the bounds); the sum itself is unused */
    pz_st_close(st);
  }
  return 0;
}
