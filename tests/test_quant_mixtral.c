/* Quantised routed experts in Mixtral's published names (block_sparse_moe.experts.E.{w1,w3,w2}): the
 * golden Mixtral checkpoint (tests/data/golden/mixtral) with its experts stored as compressed-tensors
 * pack-quantized INT4 (weight_packed / weight_scale / weight_shape) or as FP8 e4m3 with
 * weight_scale_inv block scales decodes the same tokens and logits as its dequantised twin, at TP 1
 * and 2 (was: "tensor model.layers.0.mlp.experts.0.gate_proj.weight_packed is missing", and the same
 * for the FP8 experts' weight_scale_inv). The quantization_config's patterns are matched against the
 * Mixtral module names: ignoring "re:.*block_sparse_moe\.experts.*" keeps the experts unquantised. */
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "core/dtype.h"
#include "core/fp8.h"
#include "model/builder.h"
#include "model/checkpoint.h"
#include "model/safetensors.h"
#include "prezero.h"
#include "pz_test.h"
#include "quant_ckpt_test.h"
#include "quant_synth_test.h"

static char dir[] = "/tmp/pz_test_quant_mixtral_XXXXXX";
enum { M = 2, STEPS = 6, V = 256, MAXE = 128 };

#define QCFG_INT4                                                                                                   \
  "\"quantization_config\":{\"quant_method\":\"compressed-tensors\",\"format\":\"pack-quantized\","                 \
  "\"quantization_status\":\"compressed\",\"kv_cache_scheme\":null,\"config_groups\":{\"group_0\":{"                \
  "\"targets\":[\"Linear\"],\"input_activations\":null,\"output_activations\":null,\"weights\":{\"num_bits\":4,"     \
  "\"group_size\":32,\"strategy\":\"group\",\"symmetric\":true,\"type\":\"int\",\"actorder\":null,"                 \
  "\"dynamic\":false}}},\"ignore\":[\"lm_head\",\"re:.*block_sparse_moe.gate\",\"re:.*self_attn.*\"%s]}"
#define QCFG_FP8                                                                                                    \
  "\"quantization_config\":{\"quant_method\":\"fp8\",\"fmt\":\"e4m3\",\"activation_scheme\":\"dynamic\","           \
  "\"weight_block_size\":[128,128]%s}"

/* compressed-tensors float-quantized FP8 (llm-compressor's FP8_BLOCK scheme, as the tool writes it): block scales
 * stored as "X.weight_scale", dynamic FP8 input activations (which prezero leaves in bf16) */
#define QCFG_FP8_CT(WEIGHTS, INPUT, EXTRA)                                                                          \
  "\"quantization_config\":{\"quant_method\":\"compressed-tensors\",\"format\":\"float-quantized\","             \
  "\"quantization_status\":\"compressed\",\"kv_cache_scheme\":null,\"config_groups\":{\"group_0\":{"                \
  "\"targets\":[\"Linear\"],\"input_activations\":" INPUT ",\"output_activations\":null,\"weights\":" WEIGHTS      \
  "}},\"ignore\":[\"lm_head\",\"re:.*block_sparse_moe.gate\",\"re:.*self_attn.*\"" EXTRA "]}"
#define CT_W_BLOCK                                                                                                  \
  "{\"num_bits\":8,\"type\":\"float\",\"symmetric\":true,\"group_size\":null,\"strategy\":\"block\","             \
  "\"block_structure\":[128,128],\"dynamic\":false,\"actorder\":null,\"observer\":\"minmax\"}"
#define CT_W_CHANNEL                                                                                                \
  "{\"num_bits\":8,\"type\":\"float\",\"symmetric\":true,\"group_size\":null,\"strategy\":\"channel\","           \
  "\"block_structure\":null,\"dynamic\":false,\"actorder\":null,\"observer\":\"minmax\"}"
#define CT_IN_TOKEN                                                                                                 \
  "{\"num_bits\":8,\"type\":\"float\",\"symmetric\":true,\"group_size\":null,\"strategy\":\"token\","              \
  "\"dynamic\":true,\"observer\":null}"
#define CT_IN_DYN                                                                                                   \
  "{\"num_bits\":8,\"type\":\"float\",\"symmetric\":true,\"group_size\":128,\"strategy\":\"group\","              \
  "\"dynamic\":true,\"observer\":null}"

typedef struct { char name[200]; pz_st_write_entry w; void *own; } ent;
static ent ents[MAXE];
static int n_ents;

static void put(const char *name, pz_st_dtype dt, int nd, const int64_t *shape, const void *data, void *own) {
  if (n_ents >= MAXE) { fprintf(stderr, "too many tensors\n"); exit(1); }
  ent *e = &ents[n_ents++];
  if (strlen(name) >= sizeof e->name) { fprintf(stderr, "tensor name too long: %s\n", name); exit(1); }
  memcpy(e->name, name, strlen(name) + 1);
  e->w = (pz_st_write_entry){.name = e->name, .dtype = dt, .ndim = nd, .data = data};
  for (int d = 0; d < nd; d++) e->w.shape[d] = shape[d];
  e->own = own;
}

/* dir/sub/config.json: the golden Mixtral config.json with cfg_tail ("" or fields) added as its last fields. */
static void write_config(const char *sub, const char *cfg_tail) {
  char p[400];
  snprintf(p, sizeof p, "%s/%s/config.json", dir, sub);
  pz_test_write_config_tail("data/golden/mixtral/config.json", p, cfg_tail);
}

/* Writes the tensors put so far into dir/sub/model.safetensors (and frees them), then its config. */
static void flush(const char *sub, const char *cfg_tail) {
  char p[400];
  snprintf(p, sizeof p, "%s/%s", dir, sub);
  mkdir(p, 0755);
  pz_st_write_entry w[MAXE];
  for (int i = 0; i < n_ents; i++) w[i] = ents[i].w;
  snprintf(p, sizeof p, "%s/%s/model.safetensors", dir, sub);
  CHECK_OK(pz_st_write(p, n_ents, w));
  for (int i = 0; i < n_ents; i++) free(ents[i].own);
  n_ents = 0;
  write_config(sub, cfg_tail);
}

/* dir/sub holding from's weights (a hard link) under the config cfg_tail makes. */
static void relink(const char *from, const char *sub, const char *cfg_tail) {
  char src[400], dst[400];
  snprintf(dst, sizeof dst, "%s/%s", dir, sub);
  mkdir(dst, 0755);
  snprintf(src, sizeof src, "%s/%s/model.safetensors", dir, from);
  snprintf(dst, sizeof dst, "%s/%s/model.safetensors", dir, sub);
  CHECK(link(src, dst) == 0);
  write_config(sub, cfg_tail);
}

/* Nearest e4m3 byte of x (finite, |x| <= 448). */
static uint8_t to_e4m3(float x) {
  uint8_t best = 0;
  float bd = INFINITY;
  for (int b = 0; b < 256; b++) {
    if ((b & 0x7f) == 0x7f) continue;
    const float d = fabsf(pz_fp8_e4m3_to_f32((uint8_t)b) - x);
    if (d < bd) { bd = d; best = (uint8_t)b; }
  }
  return best;
}

/* An expert weight [R, C] f32 as INT4 (power-of-two group scales) or FP8 (one power-of-two scale per
 * 128x128 block; R, C <= 128 here): the quantised tensors under `base`, and the exact dequantised
 * values (f32) written back into w, the twin's `base`.weight. */
static void quantise(const char *base, float *w, int64_t R, int64_t C, int fp8) { /* fp8 2: compressed-tensors names */
  char nm[240];
  float *deq = malloc(sizeof(float) * (size_t)(R * C));
  if (!fp8) {
    int32_t *pk = calloc((size_t)(R * C / 8), 4);
    pz_bf16 *sc = calloc((size_t)(R * C / 32), 2);
    for (int64_t r = 0; r < R; r++)
      for (int64_t g0 = 0; g0 < C; g0 += 32) {
        float amax = 0;
        for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(w[r * C + g0 + j]));
        const float s = amax > 0 ? ldexpf(1.0f, (int)ceilf(log2f(amax / 7.0f))) : 1.0f;
        sc[r * (C / 32) + g0 / 32] = pz_f32_to_bf16(s);
        for (int j = 0; j < 32; j++) {
          int v = (int)rintf(w[r * C + g0 + j] / s);
          v = v < -8 ? -8 : v > 7 ? 7 : v;
          const int64_t c = g0 + j;
          pk[r * (C / 8) + c / 8] |= (int32_t)((uint32_t)(v + 8) << (4 * (c % 8)));
          deq[r * C + c] = (float)v * s;
        }
      }
    int64_t *shp = malloc(2 * sizeof(int64_t));
    shp[0] = R;
    shp[1] = C;
    snprintf(nm, sizeof nm, "%s.weight_packed", base);
    put(nm, PZ_ST_I32, 2, (int64_t[]){R, C / 8}, pk, pk);
    snprintf(nm, sizeof nm, "%s.weight_scale", base);
    put(nm, PZ_ST_BF16, 2, (int64_t[]){R, C / 32}, sc, sc);
    snprintf(nm, sizeof nm, "%s.weight_shape", base);
    put(nm, PZ_ST_I64, 1, (int64_t[]){2}, shp, shp);
  } else if (fp8 == 3) { /* one power-of-two scale per row, compressed-tensors' FP8 channel strategy */
    uint8_t *q = malloc((size_t)(R * C));
    pz_bf16 *s = malloc(sizeof(pz_bf16) * (size_t)R);
    for (int64_t r = 0; r < R; r++) {
      float amax = 0;
      for (int64_t c = 0; c < C; c++) amax = fmaxf(amax, fabsf(w[r * C + c]));
      const float sr = amax > 0 ? ldexpf(1.0f, (int)ceilf(log2f(amax / 448.0f)) - (int)(r % 3)) : 1.0f;
      s[r] = pz_f32_to_bf16(sr); /* BF16 scales, as the tool writes them for a bf16 model */
      for (int64_t c = 0; c < C; c++) {
        const float x = fminf(fmaxf(w[r * C + c] / sr, -448.0f), 448.0f);
        q[r * C + c] = to_e4m3(x);
        deq[r * C + c] = pz_fp8_e4m3_to_f32(q[r * C + c]) * sr;
      }
    }
    snprintf(nm, sizeof nm, "%s.weight", base);
    put(nm, PZ_ST_F8_E4M3, 2, (int64_t[]){R, C}, q, q);
    snprintf(nm, sizeof nm, "%s.weight_scale", base);
    put(nm, PZ_ST_BF16, 2, (int64_t[]){R, 1}, s, s);
  } else {
    uint8_t *q = malloc((size_t)(R * C));
    float *s = malloc(sizeof(float));
    float amax = 0;
    for (int64_t k = 0; k < R * C; k++) amax = fmaxf(amax, fabsf(w[k]));
    *s = amax > 0 ? ldexpf(1.0f, (int)ceilf(log2f(amax / 448.0f))) : 1.0f;
    for (int64_t k = 0; k < R * C; k++) {
      q[k] = to_e4m3(w[k] / *s);
      deq[k] = pz_fp8_e4m3_to_f32(q[k]) * *s;
    }
    snprintf(nm, sizeof nm, "%s.weight", base);
    put(nm, PZ_ST_F8_E4M3, 2, (int64_t[]){R, C}, q, q);
    snprintf(nm, sizeof nm, "%s.weight_scale%s", base, fp8 == 2 ? "" : "_inv");
    put(nm, PZ_ST_F32, 2, (int64_t[]){1, 1}, s, s);
  }
  memcpy(w, deq, sizeof(float) * (size_t)(R * C)); /* w (the caller's copy) becomes the twin's values */
  free(deq);
}

/* Writes sub (experts quantised, fp8 or INT4) and sub_twin (their dequantised values, F32). */
static void write_pair(const char *sub, const char *sub_twin, int fp8) {
  char src[400];
  PZ_TEST_PATH(src, "data/golden/mixtral/model.safetensors");
  pz_st_file *sf = NULL;
  CHECK_OK(pz_st_open(src, &sf));
  if (!sf) exit(1);
  float *copies[MAXE] = {0};
  int is_exp[MAXE] = {0};
  for (int i = 0; i < sf->n; i++) {
    const pz_st_tensor *t = &sf->t[i];
    CHECK(t->dtype == PZ_ST_F32 || t->dtype == PZ_ST_BF16);
    copies[i] = malloc(sizeof(float) * (size_t)(t->numel ? t->numel : 1));
    for (int64_t k = 0; k < t->numel; k++) {
      if (t->dtype == PZ_ST_F32) { memcpy(&copies[i][k], (const char *)t->data + 4 * k, 4); continue; }
      pz_bf16 h;
      memcpy(&h, (const char *)t->data + 2 * k, 2);
      copies[i][k] = pz_bf16_to_f32(h);
    }
    is_exp[i] = strstr(t->name, ".block_sparse_moe.experts.") != NULL;
  }
  for (int i = 0; i < sf->n; i++) {
    const pz_st_tensor *t = &sf->t[i];
    if (!is_exp[i]) { put(t->name, PZ_ST_F32, t->ndim, t->shape, copies[i], NULL); continue; }
    char base[200];
    snprintf(base, sizeof base, "%.*s", (int)(strlen(t->name) - strlen(".weight")), t->name);
    quantise(base, copies[i], t->shape[0], t->shape[1], fp8);
  }
  char q[2048];
  if (fp8 == 2) snprintf(q, sizeof q, "%s", QCFG_FP8_CT(CT_W_BLOCK, CT_IN_DYN, ""));
  else if (fp8 == 3) snprintf(q, sizeof q, "%s", QCFG_FP8_CT(CT_W_CHANNEL, CT_IN_TOKEN, ""));
  else snprintf(q, sizeof q, fp8 ? QCFG_FP8 : QCFG_INT4, "");
  flush(sub, q);
  for (int i = 0; i < sf->n; i++) put(sf->t[i].name, PZ_ST_F32, sf->t[i].ndim, sf->t[i].shape, copies[i], copies[i]);
  flush(sub_twin, "");
  pz_st_close(sf);
}

/* sub's greedy decode from tokens 7, 190 (quant_synth_test.h). */
static pz_status decode(const char *sub, int tp, int32_t *toks, float *logits) {
  char p[400];
  snprintf(p, sizeof p, "%s/%s", dir, sub);
  return pz_test_decode_dir(p, tp, STEPS, (const int32_t[]){7, 190}, toks, logits);
}

static void same_decode(const char *a, const char *b, int tp) {
  int32_t ta[STEPS * M], tb[STEPS * M];
  static float la[M * V], lb[M * V];
  CHECK_OK(decode(a, tp, ta, la));
  CHECK_OK(decode(b, tp, tb, lb));
  CHECK(!memcmp(ta, tb, sizeof ta));
  CHECK(!memcmp(la, lb, sizeof la));
  int nonzero = 0;
  for (int i = 0; i < M * V; i++) nonzero += la[i] != 0.0f;
  CHECK(nonzero > V);
}

/* The routed experts' kind in the graph of checkpoint sub at TP tp. */
static pz_dtype expert_dtype(const char *sub, int tp) {
  char p[400];
  snprintf(p, sizeof p, "%s/%s", dir, sub);
  pz_model_config mc;
  CHECK_OK(pz_checkpoint_load_config(p, &mc));
  pz_build_opts bo = PZ_BUILD_OPTS_INIT;
  bo.max_ctx = 8;
  bo.tp = tp;
  pz_graph *g = NULL;
  CHECK_OK(pz_build_decode_graph(&mc, &bo, &g));
  if (!g) return PZ_DTYPE_COUNT;
  pz_dtype dt = PZ_DTYPE_COUNT;
  for (int i = 0; i < g->n_tensors; i++)
    if (!strncmp(g->tensors[i].name, "layers.1.mlp.experts.gate_proj.", 31) && g->tensors[i].kind == PZ_T_WEIGHT &&
        !strstr(g->tensors[i].name, "scale"))
      dt = g->tensors[i].dtype;
  pz_graph_free(g);
  return dt;
}

int main(void) {
  if (!mkdtemp(dir)) { perror("mkdtemp"); return 1; }
  write_pair("int4", "int4_twin", 0);
  write_pair("fp8", "fp8_twin", 1);
  write_pair("fp8_ct", "fp8_ct_twin", 2);
  write_pair("fp8_channel", "fp8_channel_twin", 3);
  CHECK(expert_dtype("int4", 1) == PZ_I32);
  CHECK(expert_dtype("fp8", 1) == PZ_U8);
  CHECK(expert_dtype("fp8_ct", 1) == PZ_U8);
  for (int tp = 1; tp <= 2; tp++) {
    same_decode("int4", "int4_twin", tp);
    same_decode("fp8", "fp8_twin", tp);
    same_decode("fp8_ct", "fp8_twin", tp); /* compressed-tensors' FP8 block format: DeepSeek's format's bits */
    /* one scale per row (FP8_DYNAMIC): FP8 experts at TP 1 and 2 (down's per-row scales replicated on every rank:
     * a TP shard of its columns cuts no scale block), the twin's tokens and logits */
    same_decode("fp8_channel", "fp8_channel_twin", tp);
  }
  CHECK(expert_dtype("fp8_channel", 1) == PZ_U8);
  CHECK(expert_dtype("fp8_channel", 2) == PZ_U8);
  /* compressed-tensors FP8: its ignore list keeps Mixtral's experts bf16 (the twin's, dequantised); the FP8 schemes
   * that are not block-scaled, static or non-FP8 activations, and a malformed block each refused on one line naming
   * the field. */
  {
    relink("fp8_twin", "fp8_ct_ignored", QCFG_FP8_CT(CT_W_BLOCK, "null", ",\"re:.*block_sparse_moe\\\\.experts.*\""));
    CHECK(expert_dtype("fp8_ct_ignored", 1) == PZ_BF16);
    same_decode("fp8_ct_ignored", "fp8_twin", 1);
    static const struct { const char *q, *needle; } bad_ct[] = {
        {QCFG_FP8_CT("{\"num_bits\":8,\"type\":\"float\",\"strategy\":\"channel\",\"block_structure\":[128,128]}",
                     CT_IN_DYN, ""), "config_groups.group_0.weights.block_structure is set"},
        {QCFG_FP8_CT("{\"num_bits\":8,\"type\":\"float\",\"strategy\":\"tensor\"}", "null", ""),
         "weights.strategy is tensor"},
        {QCFG_FP8_CT(CT_W_BLOCK, "{\"num_bits\":8,\"type\":\"float\",\"strategy\":\"tensor\",\"dynamic\":false}", ""),
         "config_groups.group_0.input_activations is not dynamic FP8"},
        {QCFG_FP8_CT(CT_W_BLOCK, "{\"num_bits\":8,\"type\":\"int\",\"dynamic\":true}", ""), "input_activations"},
        {QCFG_FP8_CT("{\"num_bits\":4,\"type\":\"float\",\"strategy\":\"block\",\"block_structure\":[128,128]}", "null",
                     ""), "weights.num_bits is 4"},
        {QCFG_FP8_CT("{\"num_bits\":8,\"type\":\"int\",\"strategy\":\"block\",\"block_structure\":[128,128]}", "null",
                     ""), "weights.type is int"},
        {QCFG_FP8_CT("{\"num_bits\":8,\"type\":\"float\",\"strategy\":\"block\",\"block_structure\":[128]}", "null",
                     ""), "weights.block_structure must be [rows, cols]"},
    };
    for (size_t i = 0; i < sizeof bad_ct / sizeof bad_ct[0]; i++) {
      char sub[32], p[400];
      snprintf(sub, sizeof sub, "fp8_ct_bad%zu", i);
      relink("fp8_ct", sub, bad_ct[i].q);
      snprintf(p, sizeof p, "%s/%s", dir, sub);
      pz_model_config mc;
      CHECK_ST(pz_checkpoint_load_config(p, &mc), PZ_ERR_CONFIG);
      CHECK(strstr(pz_last_error(), bad_ct[i].needle) && !strchr(pz_last_error(), '\n'));
      if (!strstr(pz_last_error(), bad_ct[i].needle)) fprintf(stderr, "case %zu: %s\n", i, pz_last_error());
    }
    /* The compressed-tensors config over DeepSeek's names (weight_scale_inv) names the scales it looks for. */
    relink("fp8", "fp8_ct_over_inv", QCFG_FP8_CT(CT_W_BLOCK, CT_IN_DYN, ""));
    int32_t toks[STEPS * M];
    CHECK(decode("fp8_ct_over_inv", 1, toks, NULL) != PZ_OK);
    CHECK(strstr(pz_last_error(), ".weight_scale\"") && !strchr(pz_last_error(), '\n'));
  }
  /* An ignore entry on Mixtral's expert names keeps them bf16 in the graph (dequantised at load): the
   * same tokens and logits. */
  {
    char q[2048];
    snprintf(q, sizeof q, QCFG_INT4, ",\"re:.*block_sparse_moe\\\\.experts.*\"");
    relink("int4", "int4_ignored", q);
    CHECK(expert_dtype("int4_ignored", 1) == PZ_BF16);
    same_decode("int4_ignored", "int4_twin", 1);
  }
  /* FP8's skip lists (transformers' modules_to_not_convert, vLLM's ignored_layers: module names or
   * regexes matched from the start up to a module boundary): the twin's unquantised experts under an
   * fp8 config that names them load as bf16 and decode the twin's tokens and logits; the same config
   * without the list wants FP8 experts and is refused. */
  static const char *const lists[] = {
      "\"modules_to_not_convert\":[\"lm_head\",\"model.layers.*.block_sparse_moe.experts\"]",
      "\"ignored_layers\":[\"model.layers.0.block_sparse_moe.experts\",\"model.layers.1.block_sparse_moe.experts\"]", NULL};
  for (int i = 0; i < 3; i++) {
    char sub[64], q[1024];
    snprintf(sub, sizeof sub, "fp8_skip%d", i);
    char extra[256];
    snprintf(extra, sizeof extra, "%s%s", lists[i] ? "," : "", lists[i] ? lists[i] : "");
    snprintf(q, sizeof q, QCFG_FP8, extra);
    relink("fp8_twin", sub, q);
    if (lists[i]) {
      CHECK(expert_dtype(sub, 1) == PZ_BF16);
      same_decode(sub, "fp8_twin", 1);
    } else {
      int32_t toks[STEPS * M];
      CHECK(expert_dtype(sub, 1) == PZ_U8);
      CHECK(decode(sub, 1, toks, NULL) != PZ_OK);
    }
  }
  TEST_DONE();
}
