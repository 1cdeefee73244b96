/* libFuzzer target: pz_checkpoint_open on a directory whose model.safetensors.index.json is the
 * input (weight_map: tensor name -> shard file). The directory holds two small shards
 * (model-00001-of-00002.safetensors: "a" [2] f32 and "b" [2] f32; model-00002-of-00002.safetensors:
 * "c" [2, 2] f32) and its parent a valid file outside.safetensors with tensor "escaped", which
 * the reader must never open (an index naming "../outside.safetensors" would load it if the
 * escape check were missing). Contract checked: an error has a message and leaves *out NULL;
 * a checkpoint that opens has at most the 3 tensors of the two shards, none from outside, and
 * every byte of each is readable. The scratch folder (mkdtemp) is removed at exit.
 * Seed corpus: tests/fuzz/seeds/fuzz_index/ and tests/data/golden/ index files. */
#define _POSIX_C_SOURCE 200809L /* mkdtemp */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "model/checkpoint.h"
#include "model/safetensors.h"

static char root[64], dir[96];
static const char *const shards[] = {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"};

static void path_in(char *buf, size_t cap, const char *folder, const char *name) {
  snprintf(buf, cap, "%s/%s", folder, name);
}

static void cleanup(void) {
  char p[256];
  for (int i = 0; i < 2; i++) {
    path_in(p, sizeof p, dir, shards[i]);
    remove(p);
  }
  path_in(p, sizeof p, dir, "model.safetensors.index.json");
  remove(p);
  rmdir(dir);
  path_in(p, sizeof p, root, "outside.safetensors");
  remove(p);
  rmdir(root);
}

/* The scratch folder, its shards and the file outside it; aborts when they cannot be made (a
 * target that silently tested nothing would pass). */
static void setup(void) {
  snprintf(root, sizeof root, "/tmp/pz_fuzz_ix_XXXXXX");
  if (!mkdtemp(root)) { perror("fuzz_index: mkdtemp"); abort(); }
  path_in(dir, sizeof dir, root, "ck");
  if (mkdir(dir, 0700) != 0) { perror("fuzz_index: mkdir"); abort(); }
  atexit(cleanup);
  static const float v[4] = {1, 2, 3, 4};
  const pz_st_write_entry s1[2] = {{"a", PZ_ST_F32, 1, {2}, v}, {"b", PZ_ST_F32, 1, {2}, v + 2}};
  const pz_st_write_entry s2[1] = {{"c", PZ_ST_F32, 2, {2, 2}, v}};
  const pz_st_write_entry out[1] = {{"escaped", PZ_ST_F32, 1, {1}, v}};
  char p[256];
  path_in(p, sizeof p, dir, shards[0]);
  pz_status st = pz_st_write(p, 2, s1);
  path_in(p, sizeof p, dir, shards[1]);
  if (st == PZ_OK) st = pz_st_write(p, 1, s2);
  path_in(p, sizeof p, root, "outside.safetensors");
  if (st == PZ_OK) st = pz_st_write(p, 1, out);
  if (st != PZ_OK) { fprintf(stderr, "fuzz_index: %s\n", pz_last_error()); abort(); }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!dir[0]) setup();
  char p[256];
  path_in(p, sizeof p, dir, "model.safetensors.index.json");
  FILE *f = fopen(p, "wb");
  if (!f) abort();
  if (size && fwrite(data, 1, size, f) != size) abort();
  fclose(f);
  pz_checkpoint *ck = (pz_checkpoint *)0x1;
  pz_status st = pz_checkpoint_open(dir, &ck);
  if (st != PZ_OK) {
    if (!pz_last_error()[0] || ck) abort();
    return 0;
  }
  if (pz_checkpoint_find(ck, "escaped") || pz_checkpoint_count(ck) > 3) abort();
  static const char *const names[] = {"a", "b", "c"};
  volatile unsigned sum = 0;
  for (int i = 0; i < 3; i++) {
    const pz_st_tensor *t = pz_checkpoint_find(ck, names[i]);
    for (size_t k = 0; t && k < t->nbytes; k++) sum += ((const unsigned char *)t->data)[k];
  }
  (void)sum; /* every byte of each tensor is read (ASan checks the bounds); the sum is unused */
  pz_checkpoint_close(ck);
  return 0;
}
