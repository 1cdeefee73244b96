/* The GEMM tuner tables built into the library (src/backend/tables): found by device name and
 * SM count, well-formed, and covering the prezero consumer shapes; runs without a GPU. */
#include <cjson/cJSON.h>
#include <string.h>
#include "backend/tables/gemm_tables.h"
#include "pz_test.h"

/* Entry of the table for (m, n, k), or NULL. */
static const cJSON *entry(const cJSON *root, int m, int n, int k) {
  const cJSON *it;
  cJSON_ArrayForEach(it, cJSON_GetObjectItem(root, "entries")) {
    const cJSON *em = cJSON_GetObjectItem(it, "m"), *en = cJSON_GetObjectItem(it, "n"), *ek = cJSON_GetObjectItem(it, "k");
    if (cJSON_IsNumber(em) && cJSON_IsNumber(en) && cJSON_IsNumber(ek) && em->valueint == m && en->valueint == n &&
        ek->valueint == k)
      return it;
  }
  return NULL;
}

int main(void) {
  char key[256];
  CHECK(!strcmp(pz_gemm_table_key(key, sizeof key, "NVIDIA H200", 132), "gemm_NVIDIA_H200_132sm"));
  CHECK(!strcmp(pz_gemm_table_key(key, sizeof key, "NVIDIA H100 80GB HBM3", 132), "gemm_NVIDIA_H100_80GB_HBM3_132sm"));
  CHECK(pz_gemm_builtin_count() >= 1);
  CHECK(pz_gemm_builtin_key(-1) == NULL && pz_gemm_builtin_key(pz_gemm_builtin_count()) == NULL);
  /* Another SM count or name is another device: no table. */
  CHECK(pz_gemm_builtin_table("NVIDIA H200", 114) == NULL);
  CHECK(pz_gemm_builtin_table("NVIDIA H100 80GB HBM3", 132) == NULL);
  CHECK(pz_gemm_builtin_table(NULL, 132) == NULL);

  const char *text = pz_gemm_builtin_table("NVIDIA H200", 132);
  CHECK(text != NULL);
  if (!text) TEST_DONE();
  cJSON *root = cJSON_Parse(text);
  CHECK(root != NULL);
  if (!root) TEST_DONE();
  const cJSON *dev = cJSON_GetObjectItem(root, "device"), *sm = cJSON_GetObjectItem(root, "sm_count");
  CHECK(cJSON_IsString(dev) && !strcmp(dev->valuestring, "NVIDIA H200"));
  CHECK(cJSON_IsNumber(sm) && sm->valueint == 132);
  /* Kimi-K2 TP 1 consumers (docs/ARCHITECTURE.md section 2) at every power-of-two batch 1..256, then the
   * bf16 MLP GEMMs of Kimi-K2.5 / Kimi-K2 / DeepSeek-V3 at TP 1 (backend/cuda/mlp_gemm.h): the shared experts'
   * gate | up (2 x 2048 rows) and down, the dense layer's gate | up (2 x 18432 rows) and down. */
  static const int shapes[][2] = {{2112, 7168}, {12288, 1536}, {7168, 8192}, {384, 7168},
                                  {4096, 7168}, {7168, 2048}, {36864, 7168}, {7168, 18432}};
  int wgmma = 0, entries = 0;
  for (int s = 0; s < 8; s++)
    for (int m = 1; m <= 256; m *= 2) {
      const cJSON *e = entry(root, m, shapes[s][0], shapes[s][1]);
      CHECK(e != NULL);
      if (!e) {
        fprintf(stderr, "no built-in entry for m=%d n=%d k=%d\n", m, shapes[s][0], shapes[s][1]);
        continue;
      }
      entries++;
      const cJSON *bn = cJSON_GetObjectItem(e, "best_nozero");
      CHECK(cJSON_IsString(bn));
      const cJSON *best = cJSON_IsString(bn) ? cJSON_GetObjectItem(cJSON_GetObjectItem(e, "flavours"), bn->valuestring) : NULL;
      CHECK(best != NULL);
      const cJSON *sp = best ? cJSON_GetObjectItem(best, "splits") : NULL, *wn = best ? cJSON_GetObjectItem(best, "wn") : NULL;
      CHECK(cJSON_IsNumber(sp) && sp->valueint >= 1);
      if (cJSON_IsNumber(wn) && wn->valueint >= 3) wgmma++; /* the split-K (3) or stream-K (4) Hopper kernel */
    }
  CHECK(entries == 72);
  CHECK(wgmma > 0); /* the Hopper kernel is chosen somewhere on the H200 */
  cJSON_Delete(root);
  TEST_DONE();
}
