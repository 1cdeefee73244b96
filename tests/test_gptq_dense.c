/* GPTQ checkpoints of dense GQA layouts (the common GPTQ-Int4 exports of Qwen2 / Llama / Phi-3): every Linear of
 * the decoder layers of a golden checkpoint (q/k/v/o or Phi-3's fused qkv_proj, gate/up/down or Phi-3's fused
 * gate_up_proj) written as AutoGPTQ does (qweight I32 [in/8, out], F16 scales [in/32, out], qzeros 0x77777777,
 * g_idx k / 32) with power-of-two scales, beside its dequantised twin (F32 values q x s, exact). Both decode the
 * same tokens and logits at TP 1 and 2: the transposed reads of the row-sharded (q/k/v, gate/up), column-sharded
 * (o, down) and fused (Phi-3) modules are right. */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "core/dtype.h"
#include "model/safetensors.h"
#include "pz_test.h"
#include "quant_ckpt_test.h"
#include "quant_synth_test.h"

static char dir[] = "/tmp/pz_test_gptq_dense_XXXXXX";
enum { STEPS = 4, MAXT = 128 };

typedef struct {
  pz_st_write_entry w[MAXT];
  void *own[MAXT];
  char names[MAXT][200];
  int n;
} set;

static void put(set *s, const char *name, pz_st_dtype dt, int nd, const int64_t *shape, void *data) {
  CHECK(s->n < MAXT && strlen(name) < sizeof s->names[0]);
  if (s->n >= MAXT) exit(1);
  snprintf(s->names[s->n], sizeof s->names[0], "%s", name);
  s->w[s->n] = (pz_st_write_entry){.name = s->names[s->n], .dtype = dt, .ndim = nd, .data = data};
  for (int d = 0; d < nd; d++) s->w[s->n].shape[d] = shape[d];
  s->own[s->n++] = data;
}

/* dir/sub: the set's tensors and the golden config.json of `model` with `tail` added as its last fields. */
static void flush(set *s, const char *model, const char *sub, const char *tail) {
  char p[400], rel[128];
  snprintf(p, sizeof p, "%s/%s", dir, sub);
  mkdir(p, 0755);
  snprintf(p, sizeof p, "%s/%s/model.safetensors", dir, sub);
  CHECK_OK(pz_st_write(p, s->n, s->w));
  for (int i = 0; i < s->n; i++) free(s->own[i]);
  s->n = 0;
  snprintf(rel, sizeof rel, "data/golden/%s/config.json", model);
  snprintf(p, sizeof p, "%s/%s/config.json", dir, sub);
  pz_test_write_config_tail(rel, p, tail);
}

/* Golden `model` as GPTQ (sub "<model>_gptq") and its dequantised twin ("<model>_twin"). */
static void write_pair(const char *model, char *sub_q, char *sub_t, size_t cap) {
  char src[400], rel[128];
  snprintf(rel, sizeof rel, "data/golden/%s/model.safetensors", model);
  PZ_TEST_PATH(src, rel);
  pz_st_file *sf = NULL;
  CHECK_OK(pz_st_open(src, &sf));
  if (!sf) exit(1);
  static set q, t;
  int quantised = 0;
  for (int i = 0; i < sf->n; i++) {
    const pz_st_tensor *x = &sf->t[i];
    float *v = malloc(sizeof(float) * (size_t)(x->numel ? x->numel : 1));
    for (int64_t k = 0; k < x->numel; k++) {
      if (x->dtype == PZ_ST_F32) { memcpy(&v[k], (const char *)x->data + 4 * k, 4); continue; }
      pz_bf16 h;
      memcpy(&h, (const char *)x->data + 2 * k, 2);
      v[k] = pz_bf16_to_f32(h);
    }
    const size_t nl = strlen(x->name);
    const bool lin = strstr(x->name, ".layers.") && nl > 12 && !strcmp(x->name + nl - 12, "_proj.weight") && x->ndim == 2;
    if (!lin) {
      float *c = malloc(sizeof(float) * (size_t)(x->numel ? x->numel : 1));
      memcpy(c, v, sizeof(float) * (size_t)x->numel);
      put(&q, x->name, PZ_ST_F32, x->ndim, x->shape, c);
      put(&t, x->name, PZ_ST_F32, x->ndim, x->shape, v);
      continue;
    }
    const int64_t out = x->shape[0], in = x->shape[1], G = 32;
    CHECK(in % G == 0 && out % 8 == 0);
    int32_t *qw = calloc((size_t)(in / 8 * out), 4);
    uint16_t *sc = malloc(2 * (size_t)(in / G * out));
    uint32_t *qz = malloc(4 * (size_t)(in / G * (out / 8)));
    int32_t *gi = malloc(4 * (size_t)in);
    for (int64_t r = 0; r < out; r++)
      for (int64_t g0 = 0; g0 < in; g0 += G) {
        float amax = 0;
        for (int j = 0; j < G; j++) amax = fmaxf(amax, fabsf(v[r * in + g0 + j]));
        const float s = amax > 0 ? ldexpf(1.0f, (int)ceilf(log2f(amax / 7.0f)) - (int)((r + g0 / G) % 2)) : 1.0f;
        sc[(g0 / G) * out + r] = pz_test_f16_exact(s);
        for (int j = 0; j < G; j++) {
          int u = (int)rintf(v[r * in + g0 + j] / s);
          u = (u < -8 ? -8 : u > 7 ? 7 : u) + 8; /* unsigned, zero point 8 */
          const int64_t c = g0 + j;
          qw[(c / 8) * out + r] |= (int32_t)((uint32_t)u << (4 * (c % 8)));
          v[r * in + c] = (float)(u - 8) * s; /* the twin: exactly (u - 8) x s */
        }
      }
    for (int64_t k = 0; k < in / G * (out / 8); k++) qz[k] = 0x77777777u; /* checkpoint_format "gptq": zero - 1 */
    for (int64_t k = 0; k < in; k++) gi[k] = (int32_t)(k / G);
    char base[200], nm[220];
    snprintf(base, sizeof base, "%.*s", (int)(nl - 7), x->name);
    snprintf(nm, sizeof nm, "%s.qweight", base);
    put(&q, nm, PZ_ST_I32, 2, (int64_t[]){in / 8, out}, qw);
    snprintf(nm, sizeof nm, "%s.scales", base);
    put(&q, nm, PZ_ST_F16, 2, (int64_t[]){in / G, out}, sc);
    snprintf(nm, sizeof nm, "%s.qzeros", base);
    put(&q, nm, PZ_ST_I32, 2, (int64_t[]){in / G, out / 8}, qz);
    snprintf(nm, sizeof nm, "%s.g_idx", base);
    put(&q, nm, PZ_ST_I32, 1, (int64_t[]){in}, gi);
    put(&t, x->name, PZ_ST_F32, 2, x->shape, v);
    quantised++;
  }
  CHECK(quantised >= 4);
  snprintf(sub_q, cap, "%s_gptq", model);
  snprintf(sub_t, cap, "%s_twin", model);
  flush(&q, model, sub_q,
        "\"quantization_config\":{\"quant_method\":\"gptq\",\"bits\":4,\"group_size\":32,\"desc_act\":false,"
        "\"sym\":true,\"damp_percent\":0.01,\"true_sequential\":true,\"static_groups\":false,"
        "\"checkpoint_format\":\"gptq\",\"model_name_or_path\":null,\"model_file_base_name\":null}");
  flush(&t, model, sub_t, "");
  pz_st_close(sf);
}

int main(void) {
  if (!mkdtemp(dir)) { perror("mkdtemp"); return 1; }
  static const char *const models[] = {"qwen2", "llama", "phi3"};
  for (int m = 0; m < 3; m++) {
    char sq[64], st[64], pq[400], pt[400];
    write_pair(models[m], sq, st, sizeof sq);
    snprintf(pq, sizeof pq, "%s/%s", dir, sq);
    snprintf(pt, sizeof pt, "%s/%s", dir, st);
    for (int tp = 1; tp <= 2; tp++) {
      int32_t ta[STEPS * 2], tb[STEPS * 2];
      static float la[2 * 4096], lb[2 * 4096];
      const int32_t first[2] = {5, 77};
      CHECK_OK(pz_test_decode_dir(pq, tp, STEPS, first, ta, la));
      CHECK_OK(pz_test_decode_dir(pt, tp, STEPS, first, tb, lb));
      CHECK(!memcmp(ta, tb, sizeof ta) && !memcmp(la, lb, sizeof la));
      int nonzero = 0;
      for (int i = 0; i < 2 * 256; i++) nonzero += la[i] != 0.0f;
      CHECK(nonzero > 256);
      printf("%s gptq tp%d: tokens and logits identical to the dequantised twin\n", models[m], tp);
    }
  }
  /* A module stored both as GPTQ and as a plain X.weight: refused on one line naming both (was: the plain one read
   * for a bf16 graph weight, the GPTQ one for packed experts, with no word). */
  {
    char sq[64], st[64], pq[200], lnk[400], src[400];
    write_pair("qwen2", sq, st, sizeof sq);
    snprintf(pq, sizeof pq, "%s/qwen2_twice", dir);
    mkdir(pq, 0755);
    /* the GPTQ file plus a second shard holding a stale plain copy of one module */
    static set extra;
    float *w = calloc(64 * 64, sizeof(float));
    put(&extra, "model.layers.1.self_attn.o_proj.weight", PZ_ST_F32, 2, (int64_t[]){64, 64}, w);
    snprintf(src, sizeof src, "%s/%s/model.safetensors", dir, sq);
    snprintf(lnk, sizeof lnk, "%s/model-00001-of-00002.safetensors", pq);
    CHECK(link(src, lnk) == 0);
    snprintf(lnk, sizeof lnk, "%s/model-00002-of-00002.safetensors", pq);
    CHECK_OK(pz_st_write(lnk, extra.n, extra.w));
    free(w);
    pz_st_file *sf = NULL;
    CHECK_OK(pz_st_open(src, &sf));
    snprintf(lnk, sizeof lnk, "%s/model.safetensors.index.json", pq);
    FILE *f = fopen(lnk, "w");
    CHECK(f != NULL);
    if (f && sf) {
      fprintf(f, "{\"metadata\":{},\"weight_map\":{\"model.layers.1.self_attn.o_proj.weight\":\"model-00002-of-00002.safetensors\"");
      for (int i = 0; i < sf->n; i++) fprintf(f, ",\"%s\":\"model-00001-of-00002.safetensors\"", sf->t[i].name);
      fprintf(f, "}}\n");
      fclose(f);
    }
    pz_st_close(sf);
    snprintf(src, sizeof src, "%s/%s/config.json", dir, sq);
    snprintf(lnk, sizeof lnk, "%s/config.json", pq);
    CHECK(link(src, lnk) == 0);
    int32_t tz[STEPS * 2];
    CHECK_ST(pz_test_decode_dir(pq, 1, STEPS, (const int32_t[]){5, 77}, tz, NULL), PZ_ERR_DTYPE);
    CHECK(strstr(pz_last_error(), "o_proj.weight\" (F32) and as GPTQ") && strstr(pz_last_error(), "o_proj.qweight") &&
          !strchr(pz_last_error(), '\n'));
  }
  TEST_DONE();
}
