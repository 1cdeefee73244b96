/* compressed-tensors pack-quantized checkpoints (Kimi-K2.5 layout: config wrapped in text_config,
 * tensors under "language_model."), written by this test from hash-filled weights with
 * power-of-two group scales: the routed experts (kept packed in memory) and the shared experts
 * (dequantised to bf16 at load) are INT4. The INT4 model and its dequantised bf16 twin (a plain
 * checkpoint written here from the same integers) decode identical tokens and logits at TP 1 and 2;
 * the packed words and scales read back are the written ones, per rank; bad checkpoints give
 * one-line errors. */
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include "backend/cpu/cpu_backend.h"
#include "core/quant.h"
#include "hf_export_test.h"
#include "model/builder.h"
#include "model/checkpoint.h"
#include "model/safetensors.h"
#include "pz_cli_test.h"
#include "pz_test.h"
#include "quant_ckpt_test.h"
#include "quant_synth_test.h"

static char dir[] = "/tmp/pz_test_int4_XXXXXX";
enum { SEED = 91, M = 2, STEPS = 5, V = 256 };

#define TEXT_HI(H, I)                                                                                                \
  "\"model_type\":\"kimi_k2\",\"hidden_size\":" #H ",\"num_hidden_layers\":3,\"num_attention_heads\":4,"           \
  "\"q_lora_rank\":32,\"kv_lora_rank\":32,\"qk_nope_head_dim\":16,\"qk_rope_head_dim\":8,\"v_head_dim\":16,"            \
  "\"n_routed_experts\":8,\"n_shared_experts\":1,\"num_experts_per_tok\":2,\"moe_intermediate_size\":" #I ","        \
  "\"intermediate_size\":96,\"first_k_dense_replace\":1,\"n_group\":2,\"topk_group\":1,\"topk_method\":\"noaux_tc\","  \
  "\"scoring_func\":\"sigmoid\",\"norm_topk_prob\":true,\"routed_scaling_factor\":2.5,\"vocab_size\":256,"             \
  "\"max_position_embeddings\":128,\"rms_norm_eps\":1e-6,\"rope_theta\":10000"
#define TEXT TEXT_HI(64, 64)
/* Routed and shared experts INT4; attention, the dense MLP and lm_head bf16. */
#define QCFG_W(WEIGHTS)                                                                                               \
  "\"quantization_config\":{\"quant_method\":\"compressed-tensors\",\"format\":\"pack-quantized\","                   \
  "\"quantization_status\":\"compressed\",\"config_groups\":{\"group_0\":{\"targets\":[\"Linear\"],"                   \
  "\"input_activations\":null,\"output_activations\":null,\"weights\":{\"num_bits\":4," WEIGHTS ","                      \
  "\"symmetric\":true,\"type\":\"int\",\"actorder\":null,\"dynamic\":false}}},"                                       \
  "\"ignore\":[\"re:.*self_attn.*\",\"re:.*mlp\\\\.(gate|up|gate_up|down)_proj.*\",\"re:.*lm_head.*\"]}"
#define QCFG QCFG_W("\"group_size\":32,\"strategy\":\"group\"")
static const char *cfg_int4 = "{\"model_type\":\"kimi_k25\",\"text_config\":{" TEXT "," QCFG "}}";
static const char *cfg_bf16 = "{" TEXT "}";

static ent *find_e(ents *s, const char *name) {
  for (int i = 0; i < s->n; i++) if (!strcmp(s->e[i].name, name)) return &s->e[i];
  return NULL;
}
static void write_file(const char *sub, const char *name, const char *text) {
  char p[300];
  snprintf(p, sizeof p, "%s/%s", dir, sub);
  mkdir(p, 0755);
  snprintf(p, sizeof p, "%s/%s/%s", dir, sub, name);
  FILE *f = fopen(p, "w");
  if (!f) { perror(p); exit(1); }
  fputs(text, f);
  fclose(f);
}

static void write_ck(const char *sub, const char *cfg, const ents *s) {
  write_file(sub, "config.json", cfg);
  static pz_st_write_entry w[600];
  for (int i = 0; i < s->n; i++) {
    w[i] = (pz_st_write_entry){.name = s->e[i].name, .dtype = s->e[i].dtype, .ndim = s->e[i].ndim, .data = s->e[i].data};
    for (int d = 0; d < s->e[i].ndim; d++) w[i].shape[d] = s->e[i].shape[d];
  }
  char p[300];
  snprintf(p, sizeof p, "%s/%s/model.safetensors", dir, sub);
  CHECK_OK(pz_st_write(p, s->n, w));
}

/* Hash-filled bf16 weights of the plain config `cfg` in the published layout (prefix "model."). */
static void export_cfg(const char *cfg, ents *out) {
  pz_model_config mc;
  CHECK_OK(pz_config_parse(cfg, strlen(cfg), "bf16", &mc));
  pz_test_export_hf(&mc, SEED, out);
}
static void export_bf16(ents *out) { export_cfg(cfg_bf16, out); }

/* Every expert weight (routed and shared) of `bf` becomes INT4 with power-of-two scales in `q`
 * (weight_packed / weight_scale / weight_shape, names prefixed "language_model."), and its value in
 * `bf` the exact dequantised q * s (exact in bf16). Other tensors are copied with the prefix. */
static void quantise_g(ents *bf, ents *q, int64_t G);
static const char *quantise_only; /* set: quantise_g quantises only the expert weights whose names contain it */
static void quantise(ents *bf, ents *q) { quantise_g(bf, q, 32); }
/* quantise with one scale per G columns (G 0: one per row, compressed-tensors' strategy "channel"). */
static void quantise_g(ents *bf, ents *q, int64_t G0) {
  char nm[300];
  for (int i = 0; i < bf->n; i++) {
    ent *e = &bf->e[i];
    const bool expert = strstr(e->name, "experts.") && strstr(e->name, "_proj.weight") &&
                        (!quantise_only || strstr(e->name, quantise_only));
    if (!expert) {
      snprintf(nm, sizeof nm, "language_model.%.270s", e->name);
      add(q, nm, e->dtype, e->ndim, e->shape, e->data);
      continue;
    }
    const int64_t R = e->shape[0], C = e->shape[1], G = G0 ? G0 : C, NG = (C + G - 1) / G; /* the last group may be short */
    int32_t *pk = calloc((size_t)(R * C / 8), 4);
    pz_bf16 *sc = calloc((size_t)(R * NG), 2), *w = e->data;
    for (int64_t r = 0; r < R; r++)
      for (int64_t g0 = 0; g0 < C; g0 += G) {
        float amax = 0;
        for (int j = 0; j < G && g0 + j < C; j++) amax = fmaxf(amax, fabsf(pz_bf16_to_f32(w[r * C + g0 + j])));
        const float s = amax > 0 ? ldexpf(1.0f, (int)ceilf(log2f(amax / 7.0f))) : 1.0f; /* |q| <= 7 */
        sc[r * NG + g0 / G] = pz_f32_to_bf16(s);
        for (int j = 0; j < G && g0 + j < C; j++) {
          int v = (int)rintf(pz_bf16_to_f32(w[r * C + g0 + j]) / s);
          v = v < -8 ? -8 : v > 7 ? 7 : v;
          const int64_t c = g0 + j;
          pk[r * (C / 8) + c / 8] |= (int32_t)((uint32_t)(v + 8) << (4 * (c % 8)));
          w[r * C + c] = pz_f32_to_bf16((float)v * s); /* the twin: exactly q * s */
        }
      }
    char base[220];
    snprintf(base, sizeof base, "language_model.%.*s", (int)(strlen(e->name) - 7), e->name);
    snprintf(nm, sizeof nm, "%s.weight_packed", base);
    add(q, nm, PZ_ST_I32, 2, (int64_t[]){R, C / 8}, pk);
    snprintf(nm, sizeof nm, "%s.weight_scale", base);
    add(q, nm, PZ_ST_BF16, 2, (int64_t[]){R, NG}, sc);
    snprintf(nm, sizeof nm, "%s.weight_shape", base);
    add(q, nm, PZ_ST_I64, 1, (int64_t[]){2}, (int64_t[]){R, C});
    free(pk);
    free(sc);
  }
}

/* sub's greedy decode from tokens 5, 200 (quant_synth_test.h). */
static pz_status decode(const char *sub, int tp, int32_t *toks, float *logits) {
  char p[300];
  snprintf(p, sizeof p, "%s/%s", dir, sub);
  return pz_test_decode_dir(p, tp, STEPS, (const int32_t[]){5, 200}, toks, logits);
}

/* Checkpoints sub_a and sub_b decode to the same tokens and logits at TP tp (same_decode: TP 1). */
static void same_decode_tp(const char *sub_a, const char *sub_b, int tp) {
  int32_t ta[STEPS * M], tb[STEPS * M];
  float la[M * V], lb[M * V];
  CHECK_OK(decode(sub_a, tp, ta, la));
  CHECK_OK(decode(sub_b, tp, tb, lb));
  CHECK(!memcmp(ta, tb, sizeof ta) && !memcmp(la, lb, sizeof la));
}
static void same_decode(const char *sub_a, const char *sub_b) { same_decode_tp(sub_a, sub_b, 1); }

/* A copy of q with entry `name` changed by f (shape / dtype) or dropped (f NULL), written to sub;
 * loading it must fail with `want` and one line naming `needle`. */
static void bad(ents *q, const char *sub, const char *name, void (*f)(ent *), pz_status want, const char *needle) {
  ents s = {.n = 0};
  for (int i = 0; i < q->n; i++) {
    if (!strcmp(q->e[i].name, name) && !f) continue;
    ent *e = add(&s, q->e[i].name, q->e[i].dtype, q->e[i].ndim, q->e[i].shape, q->e[i].data);
    if (!strcmp(e->name, name)) f(e);
  }
  write_ck(sub, cfg_int4, &s);
  int32_t t[STEPS * M];
  pz_status st = decode(sub, 1, t, NULL);
  const char *msg = pz_last_error();
  if (st != want || !strstr(msg, needle) || strchr(msg, '\n')) {
    fprintf(stderr, "FAIL: %s -> %s [%s], want %s with '%s'\n", sub, pz_status_string(st), msg, pz_status_string(want),
            needle);
    pz_test_failures++;
  }
  free_ents(&s);
}
static void narrow(ent *e) { e->shape[1] -= 1; e->nbytes = (size_t)(e->shape[0] * e->shape[1]) * pz_st_dtype_size(e->dtype); }
static void as_u8_2x(ent *e) { e->dtype = PZ_ST_U8; e->shape[1] *= 2; } /* the same bytes, one per element */
static bool pz_test_ends(const char *s, const char *suffix) {
  const size_t a = strlen(s), b = strlen(suffix);
  return a >= b && !strcmp(s + a - b, suffix);
}
static void as_f16(ent *e) { e->dtype = PZ_ST_F16; }
static void wrong_shape_value(ent *e) { ((int64_t *)e->data)[1] = 7; }
static void transposed(ent *e) { const int64_t r = e->shape[0]; e->shape[0] = e->shape[1]; e->shape[1] = r; }
static void as_f32_2(ent *e) { e->dtype = PZ_ST_F32; e->shape[0] = 2; e->nbytes = 8; } /* the same 16 bytes' first 8 */
static void nan_scale(ent *e) { ((uint16_t *)e->data)[5] = 0x7fc0; } /* a bf16 NaN in the scales */

/* Every expert weight's element (r, c) of `bf` times 2^((r + c / 128) % 4 - (c / 32) % 2), exact in bf16: the hash-filled
 * weights have about one magnitude everywhere, which would give every group the same power-of-two scale and
 * hide a scale read from the wrong group. */
static void vary(ents *bf) {
  for (int i = 0; i < bf->n; i++) {
    ent *e = &bf->e[i];
    if (!(strstr(e->name, "experts.") && strstr(e->name, "_proj.weight"))) continue;
    pz_bf16 *w = e->data;
    for (int64_t r = 0; r < e->shape[0]; r++)
      for (int64_t c = 0; c < e->shape[1]; c++)
        w[r * e->shape[1] + c] =
            pz_f32_to_bf16(ldexpf(pz_bf16_to_f32(w[r * e->shape[1] + c]), (int)((r + c / 128) % 4 - (c / 32) % 2)));
  }
}

/* GPTQ's tensors (AutoGPTQ / GPTQModel layout) of the compressed-tensors checkpoint q (group G; 0: per row) into
 * out, names without the "language_model." prefix: X.qweight I32 [in/8, out] (the packed words transposed: the same
 * nibbles), X.scales F16 [in/G, out] (transposed; these power-of-two scales are exact in f16), X.qzeros I32
 * [in/G, out/8] with every nibble `zero` (7: checkpoint_format "gptq", 8: "gptq_v2") and X.g_idx I32 [in] = k / G
 * (perm: two columns of different groups swapped in each g_idx). Other tensors copied. */
static void to_gptq(const ents *q, ents *out, int64_t G0, int zero, bool perm) {
  char nm[300];
  for (int i = 0; i < q->n; i++) {
    const ent *e = &q->e[i];
    const char *n0 = !strncmp(e->name, "language_model.", 15) ? e->name + 15 : e->name;
    if (pz_test_ends(n0, ".weight_shape") || pz_test_ends(n0, ".weight_scale")) continue;
    if (!pz_test_ends(n0, ".weight_packed")) { add(out, n0, e->dtype, e->ndim, e->shape, e->data); continue; }
    const int64_t R = e->shape[0], W = e->shape[1], C = 8 * W, G = G0 ? G0 : C;
    char base[260], sname[300];
    snprintf(base, sizeof base, "%.*s", (int)(strlen(n0) - 14), n0);
    snprintf(sname, sizeof sname, "%.*s.weight_scale", (int)(strlen(e->name) - 14), e->name);
    const ent *se = NULL;
    for (int k = 0; k < q->n && !se; k++) if (!strcmp(q->e[k].name, sname)) se = &q->e[k];
    CHECK(se && se->shape[1] == C / G);
    if (!se) return;
    snprintf(nm, sizeof nm, "%s.qweight", base);
    ent *qw = add(out, nm, PZ_ST_I32, 2, (int64_t[]){W, R}, NULL);
    for (int64_t r = 0; r < R; r++)
      for (int64_t w = 0; w < W; w++) ((int32_t *)qw->data)[w * R + r] = ((const int32_t *)e->data)[r * W + w];
    snprintf(nm, sizeof nm, "%s.scales", base);
    ent *sc = add(out, nm, PZ_ST_F16, 2, (int64_t[]){C / G, R}, NULL);
    for (int64_t r = 0; r < R; r++)
      for (int64_t g = 0; g < C / G; g++)
        ((uint16_t *)sc->data)[g * R + r] =
            pz_test_f16_exact(pz_bf16_to_f32(((const pz_bf16 *)se->data)[r * (C / G) + g]));
    snprintf(nm, sizeof nm, "%s.qzeros", base);
    ent *z = add(out, nm, PZ_ST_I32, 2, (int64_t[]){C / G, R / 8}, NULL);
    for (int64_t k = 0; k < C / G * (R / 8); k++) ((uint32_t *)z->data)[k] = 0x11111111u * (uint32_t)zero;
    snprintf(nm, sizeof nm, "%s.g_idx", base);
    ent *gi = add(out, nm, PZ_ST_I32, 1, (int64_t[]){C}, NULL);
    for (int64_t k = 0; k < C; k++) ((int32_t *)gi->data)[k] = (int32_t)(k / G);
    if (perm && C > G) { ((int32_t *)gi->data)[0] = 1; ((int32_t *)gi->data)[G] = 0; }
  }
}

/* cfg (a plain config, ending in "}") with a GPTQ quantization_config as AutoGPTQ writes it (bits 4, group_size gs
 * (-1 per row), desc_act false, sym true; `change`, when set, is "key":value replacing the one of that key) and
 * `extra` fields (", ..." or "") into buf. */
static void gptq_cfg(char *buf, size_t cap, const char *cfg, int gs, const char *extra) {
  char gsf[32];
  snprintf(gsf, sizeof gsf, "\"group_size\":%d", gs);
  const char *fields[] = {"\"bits\":4", gsf, "\"desc_act\":false", "\"sym\":true"};
  char body[1024] = "";
  size_t o = 0;
  for (int i = 0; i < 4; i++) { /* an extra "key": replaces the default of that key */
    char key[32];
    snprintf(key, sizeof key, "%.*s", (int)(strchr(fields[i], ':') - fields[i]), fields[i]);
    if (strstr(extra, key)) continue;
    o += (size_t)snprintf(body + o, sizeof body - o, "%s,", fields[i]);
  }
  snprintf(buf, cap, "%.*s,\"quantization_config\":{\"quant_method\":\"gptq\",%s\"damp_percent\":0.01,"
           "\"static_groups\":false,\"true_sequential\":true,\"model_name_or_path\":null,"
           "\"model_file_base_name\":\"model\"%s}}", (int)(strrchr(cfg, '}') - cfg), cfg, body, extra);
}

/* A checkpoint quantised with one scale per G columns (G 0: per row, strategy "channel") under the config cfg_q,
 * beside its dequantised bf16 twin under cfg_b (hidden H, moe_intermediate_size I): each rank's down_proj scales
 * are the stored ones repeated over the kernels' 32-column groups (TP 2 may cut a stored group), and the INT4 model decodes the twin's tokens and logits at TP 1 and 2 (the shared experts, dequantised at
 * load, read the coarse scales too). This checkpoint under a group-32 config, and the same weights quantised per
 * 32 columns under cfg_q, are refused on one line naming the scales. */
static void coarse_case(const char *tag, const char *cfg_q, const char *cfg_b, int64_t H, int64_t I, int64_t G) {
  ents bf = {.n = 0}, q = {.n = 0};
  char sub_q[64], sub_b[64], sub_x[64], p[300];
  snprintf(sub_q, sizeof sub_q, "int4_%s", tag);
  snprintf(sub_b, sizeof sub_b, "twin_%s", tag);
  export_cfg(cfg_b, &bf);
  vary(&bf);
  quantise_g(&bf, &q, G);
  write_ck(sub_b, cfg_b, &bf);
  write_ck(sub_q, cfg_q, &q);
  pz_model_config mc;
  snprintf(p, sizeof p, "%s/%s", dir, sub_q);
  CHECK_OK(pz_checkpoint_load_config(p, &mc));
  CHECK(mc.quant.kind == PZ_WQ_INT4 && mc.quant.group_size == 32 && mc.quant.stored_group == G);
  const int64_t GC = G ? G : I; /* down_proj's stored group */
  for (int tp = 1; tp <= 2; tp++) {
    pz_build_opts bo = {.tp = tp, .m = M, .max_ctx = 8, .layers = 0};
    pz_graph *g = NULL;
    CHECK_OK(pz_build_decode_graph(&mc, &bo, &g));
    if (!g) return;
    const pz_tensor *ds = find_t(g, "layers.1.mlp.experts.down_proj.weight_scale");
    pz_checkpoint *ck = NULL;
    CHECK_OK(pz_checkpoint_open_planned(p, &mc, g, &ck));
    CHECK(ds && ds->ne[1] == H && ds->ne[2] == I / tp / 32);
    for (int r = 0; ck && ds && r < tp; r++) {
      pz_bf16 *gs = malloc(sizeof(pz_bf16) * (size_t)pz_tensor_numel(ds));
      CHECK_OK(pz_checkpoint_fill(ck, ds, r, gs));
      int bad_scales = 0;
      for (int e = 0; e < 8; e++) {
        char nm[200];
        snprintf(nm, sizeof nm, "language_model.model.layers.1.mlp.experts.%d.down_proj.weight_scale", e);
        const pz_bf16 *ssrc = find_e(&q, nm)->data;
        for (int64_t row = 0; row < H; row++)
          for (int64_t w = 0; w < ds->ne[2]; w++) /* graph group (r * ne2 + w) covers columns from 32 * that */
            bad_scales += gs[(e * H + row) * ds->ne[2] + w] != ssrc[row * (I / GC) + (r * ds->ne[2] + w) * 32 / GC];
      }
      CHECK(bad_scales == 0);
      free(gs);
    }
    pz_checkpoint_close(ck);
    pz_graph_free(g);
    int32_t t4[STEPS * M], tb[STEPS * M];
    float l4[M * V], lb[M * V];
    CHECK_OK(decode(sub_q, tp, t4, l4));
    CHECK_OK(decode(sub_b, tp, tb, lb));
    CHECK(!memcmp(t4, tb, sizeof t4) && !memcmp(l4, lb, sizeof l4));
    int nonzero = 0;
    for (int i = 0; i < M * V; i++) nonzero += l4[i] != 0.0f;
    CHECK(nonzero > V);
  }
  /* The same weights as GPTQ writes them (group G, or -1 per row), under a plain config: the twin's tokens and
   * logits (the GPTQ scales and words, transposed, are these). */
  {
    ents gq = {.n = 0};
    to_gptq(&q, &gq, G, 7, false);
    char cfg[4096], sub[64];
    gptq_cfg(cfg, sizeof cfg, cfg_b, G ? (int)G : -1, "");
    snprintf(sub, sizeof sub, "gptq_%s", tag);
    write_ck(sub, cfg, &gq);
    for (int tp = 1; tp <= 2; tp++) same_decode_tp(sub, sub_b, tp);
    free_ents(&gq);
  }
  /* This checkpoint under its shape's group-32 config, and a group-32 one of its shape under cfg_q. */
  char cfg32[4096];
  snprintf(cfg32, sizeof cfg32, "%s", cfg_q);
  char *at = strstr(cfg32, "\"group_size\":");
  char *end = at ? strstr(at, ",\"symmetric\"") : NULL;
  if (!at) at = strstr(cfg32, "\"strategy\":\"channel\""), end = at ? strstr(at, ",\"symmetric\"") : NULL;
  CHECK(at && end);
  if (!at || !end) return;
  char tail[4096];
  snprintf(tail, sizeof tail, "%s", end);
  snprintf(at, sizeof cfg32 - (size_t)(at - cfg32), "\"group_size\":32,\"strategy\":\"group\"%s", tail);
  snprintf(sub_x, sizeof sub_x, "e_%s_as32", tag);
  write_ck(sub_x, cfg32, &q);
  int32_t t[STEPS * M];
  CHECK_ST(decode(sub_x, 1, t, NULL), PZ_ERR_SHAPE);
  CHECK(strstr(pz_last_error(), ".weight_scale\" have shape") && strstr(pz_last_error(), "group_size 32 implies") &&
        !strchr(pz_last_error(), '\n'));
  ents bf32 = {.n = 0}, q32 = {.n = 0};
  export_cfg(cfg_b, &bf32);
  quantise_g(&bf32, &q32, 32);
  snprintf(sub_x, sizeof sub_x, "e_32_as_%s", tag);
  write_ck(sub_x, cfg_q, &q32);
  CHECK_ST(decode(sub_x, 1, t, NULL), PZ_ERR_SHAPE);
  CHECK(strstr(pz_last_error(), ".weight_scale\" have shape") && strstr(pz_last_error(), G ? "group_size 128 implies" :
        "strategy \"channel\" implies") && !strchr(pz_last_error(), '\n'));
  free_ents(&bf32);
  free_ents(&q32);
  free_ents(&bf);
  free_ents(&q);
}

/* The weights dequantised at load (the shared experts) take quantization_config's group, as the routed experts'
 * scales do, rather than one inferred from their scales' shape, on one line naming the tensor: under group_size 128
 * (cfg_q, H 256, I 384), shared experts quantised per 32 columns (the routed experts per 128); and under group_size
 * 256 with the routed experts left bf16, shared experts whose 384 columns older compressed-tensors split into
 * ceil(384 / 256) = 2 groups of 256 and 128 (were: read, silently, as groups of 32, and as 2 groups of 192, which
 * gives columns 192-255 the second group's scale). */
static void shared_group_case(const char *cfg_q, const char *cfg_b) {
  ents bf = {.n = 0}, q = {.n = 0}, bf32 = {.n = 0}, q32 = {.n = 0}, s = {.n = 0};
  export_cfg(cfg_b, &bf);
  quantise_g(&bf, &q, 128);
  export_cfg(cfg_b, &bf32);
  quantise_g(&bf32, &q32, 32);
  for (int i = 0; i < q.n; i++) {
    const ent *e = strstr(q.e[i].name, "shared_experts.") ? find_e(&q32, q.e[i].name) : &q.e[i];
    CHECK(e != NULL);
    if (e) add(&s, e->name, e->dtype, e->ndim, e->shape, e->data);
  }
  write_ck("e_shared_g32_as_g128", cfg_q, &s);
  int32_t t[STEPS * M];
  CHECK_ST(decode("e_shared_g32_as_g128", 1, t, NULL), PZ_ERR_SHAPE);
  CHECK(strstr(pz_last_error(), "shared_experts.") && strstr(pz_last_error(), ".weight_scale\" have shape [") &&
        strstr(pz_last_error(), "group_size 128 implies") && !strchr(pz_last_error(), '\n'));
  free_ents(&s);
  /* group_size 256, routed experts bf16 (ignored), shared experts INT4 in 2 groups per 384-column row. */
  char cfg256[4096];
  snprintf(cfg256, sizeof cfg256, "%s", cfg_q);
  char *at = strstr(cfg256, "\"group_size\":128");
  char *ig = strstr(cfg256, "\"ignore\":[");
  CHECK(at && ig);
  if (!at || !ig) return;
  at[13] = '2', at[14] = '5', at[15] = '6';
  char tail[4096];
  snprintf(tail, sizeof tail, "%s", ig + 10);
  snprintf(ig + 10, sizeof cfg256 - (size_t)(ig + 10 - cfg256), "\"re:.*mlp\\\\.experts\\\\.\\\\d+\\\\..*\",%s", tail);
  ents bs = {.n = 0}, qs = {.n = 0};
  export_cfg(cfg_b, &bs);
  vary(&bs);
  quantise_only = "shared_experts.";
  quantise_g(&bs, &qs, 256);
  quantise_only = NULL;
  int short_groups = 0;
  for (int i = 0; i < qs.n; i++)
    short_groups += strstr(qs.e[i].name, "shared_experts.down_proj.weight_scale") && qs.e[i].shape[1] == 2;
  CHECK(short_groups == 2);
  write_ck("e_shared_short_group", cfg256, &qs);
  CHECK_ST(decode("e_shared_short_group", 1, t, NULL), PZ_ERR_SHAPE);
  CHECK(strstr(pz_last_error(), "shared_experts.down_proj.weight_packed\" has 384 columns, not a multiple of "
               "quantization_config's group_size 256") && !strchr(pz_last_error(), '\n'));
  free_ents(&bs);
  free_ents(&qs);
  free_ents(&bf);
  free_ents(&q);
  free_ents(&bf32);
  free_ents(&q32);
}

int main(void) {
  if (!mkdtemp(dir)) { perror("mkdtemp"); return 1; }
  static ents bf, q;
  export_bf16(&bf);
  quantise(&bf, &q);
  write_ck("twin", cfg_bf16, &bf);
  write_ck("int4", cfg_int4, &q);

  /* Coarser INT4 groups than the kernels' 32, read by repeating each scale: group 128 (llm-compressor's W4A16
   * default) at H 256, I 384, whose down_proj rows of 3 groups TP 2 cuts at 1.5 groups; and one scale per row
   * (strategy "channel") at H 128, I 256. */
  {
    static const char *cq128 = "{\"model_type\":\"kimi_k25\",\"text_config\":{" TEXT_HI(256, 384) ","
                               QCFG_W("\"group_size\":128,\"strategy\":\"group\"") "}}";
    static const char *cb128 = "{" TEXT_HI(256, 384) "}";
    static const char *cqch = "{\"model_type\":\"kimi_k25\",\"text_config\":{" TEXT_HI(128, 256) ","
                              QCFG_W("\"group_size\":null,\"strategy\":\"channel\"") "}}";
    static const char *cbch = "{" TEXT_HI(128, 256) "}";
    coarse_case("g128", cq128, cb128, 256, 384, 128);
    coarse_case("channel", cqch, cbch, 128, 256, 0);
    shared_group_case(cq128, cb128);
  }

  /* GPTQ (AutoGPTQ / GPTQModel) checkpoints of the same INT4 weights, group 32: checkpoint_format "gptq" (zero point
   * stored as 7) and "gptq_v2" (8) decode the twin's tokens and logits at TP 1 and 2; refused on one line: a zero
   * point that is not the format's, a permuted g_idx (act order), and configs of other GPTQ schemes. */
  {
    static const char *const fmts[] = {"", ",\"checkpoint_format\":\"gptq_v2\""};
    for (int v = 0; v < 2; v++) {
      ents gq = {.n = 0};
      to_gptq(&q, &gq, 32, v ? 8 : 7, false);
      char cfg[4096], sub[32];
      gptq_cfg(cfg, sizeof cfg, cfg_bf16, 32, fmts[v]);
      snprintf(sub, sizeof sub, "gptq32_v%d", v + 1);
      write_ck(sub, cfg, &gq);
      for (int tp = 1; tp <= 2; tp++) same_decode_tp(sub, "twin", tp);
      /* the other format's zero point */
      gptq_cfg(cfg, sizeof cfg, cfg_bf16, 32, fmts[1 - v]);
      snprintf(sub, sizeof sub, "e_gptq32_zero_v%d", v + 1);
      write_ck(sub, cfg, &gq);
      int32_t tz[STEPS * M];
      CHECK_ST(decode(sub, 1, tz, NULL), PZ_ERR_UNSUPPORTED);
      CHECK(strstr(pz_last_error(), ".qzeros\" word [0, 0] is 0x") && strstr(pz_last_error(), "symmetric zero point") &&
            !strchr(pz_last_error(), '\n'));
      free_ents(&gq);
    }
    /* desc_act true with static groups (GPTQModel's meta.static_groups): the groups stay in column order, g_idx
     * k / 32 (checked per module), read; the same config over a permuted g_idx is refused by the tensor check. A
     * GPTQ checkpoint whose config.json has no quantization_config (an older AutoGPTQ export with
     * quantize_config.json) is refused on one line saying so. */
    {
      ents gs = {.n = 0};
      to_gptq(&q, &gs, 32, 7, false);
      char c3[4096];
      gptq_cfg(c3, sizeof c3, cfg_bf16, 32, ",\"desc_act\":true,\"meta\":{\"static_groups\":true}");
      write_ck("gptq32_static", c3, &gs);
      same_decode("gptq32_static", "twin");
      write_ck("e_gptq_noconfig", cfg_bf16, &gs);
      int32_t tz[STEPS * M];
      CHECK_ST(decode("e_gptq_noconfig", 1, tz, NULL), PZ_ERR_CONFIG);
      CHECK(strstr(pz_last_error(), "stores GPTQ tensors") && strstr(pz_last_error(), "quantize_config.json") &&
            !strchr(pz_last_error(), '\n'));
      free_ents(&gs);
      ents gp2 = {.n = 0};
      to_gptq(&q, &gp2, 32, 7, true);
      write_ck("e_gptq_static_perm", c3, &gp2);
      CHECK_ST(decode("e_gptq_static_perm", 1, tz, NULL), PZ_ERR_UNSUPPORTED);
      CHECK(strstr(pz_last_error(), ".g_idx\"[0] is 1, not 0") && !strchr(pz_last_error(), '\n'));
      free_ents(&gp2);
    }
    ents gp = {.n = 0};
    to_gptq(&q, &gp, 32, 7, true);
    char cfg[4096];
    gptq_cfg(cfg, sizeof cfg, cfg_bf16, 32, "");
    write_ck("e_gptq_act_order", cfg, &gp);
    int32_t tz[STEPS * M];
    CHECK_ST(decode("e_gptq_act_order", 1, tz, NULL), PZ_ERR_UNSUPPORTED);
    CHECK(strstr(pz_last_error(), ".g_idx\"[0] is 1, not 0") && strstr(pz_last_error(), "act order") &&
          !strchr(pz_last_error(), '\n'));
    /* the CLI prints it on one line, without a generic hint that does not apply (a permuted g_idx is not read on
     * any device, and this run is on the CPU already) */
    const char *cli = getenv("PZ_CLI");
    if (cli && *cli) {
      char args[600], out[4096], err[4096];
      snprintf(args, sizeof args, "run --model %s/e_gptq_act_order --device cpu --prompt-ids 5,200 --steps 2", dir);
      const int rc = pz_cli_run(cli, dir, args, out, sizeof out, err, sizeof err);
      const char *nl = strchr(err, '\n');
      CHECK(rc != 0 && !strncmp(err, "prezero run: ", 13) && strstr(err, ".g_idx\"[0] is 1, not 0") &&
            strstr(err, "act order") && !strstr(err, "--device") && nl && !nl[1]);
      if (!(strstr(err, "act order") && !strstr(err, "--device"))) fprintf(stderr, "act order CLI: [%s]\n", err);
    }
    free_ents(&gp);
    static const struct { int gs; const char *extra, *needle; } badcfg[] = {
        {32, ",\"desc_act\":true", "quantization_config.desc_act is true"},
        {32, ",\"sym\":false", "quantization_config.sym is not true"},
        {16, "", "quantization_config.group_size is 16"},
        {32, ",\"checkpoint_format\":\"marlin\"", "quantization_config.checkpoint_format is \"marlin\""},
        {32, ",\"dynamic\":{\"-:.*mlp.*\":{}}", "quantization_config.dynamic is set"},
        {32, ",\"bits\":8", "quantization_config.bits is 8"},
    };
    for (size_t i = 0; i < sizeof badcfg / sizeof badcfg[0]; i++) {
      char c2[4096];
      gptq_cfg(c2, sizeof c2, cfg_bf16, badcfg[i].gs, badcfg[i].extra);
      pz_model_config mc2;
      CHECK_ST(pz_config_parse(c2, strlen(c2), "gptq.json", &mc2), PZ_ERR_CONFIG);
      CHECK(strstr(pz_last_error(), badcfg[i].needle) && !strchr(pz_last_error(), '\n'));
      if (!strstr(pz_last_error(), badcfg[i].needle)) fprintf(stderr, "gptq case %zu: %s\n", i, pz_last_error());
    }
  }

  /* The INT4 checkpoint's graph: routed experts packed, shared experts bf16. */
  pz_model_config mc;
  char p[300];
  snprintf(p, sizeof p, "%s/int4", dir);
  CHECK_OK(pz_checkpoint_load_config(p, &mc));
  CHECK(mc.quant.kind == PZ_WQ_INT4 && mc.text_config);
  for (int tp = 1; tp <= 2; tp++) {
    pz_build_opts bo = {.tp = tp, .m = M, .max_ctx = 8, .layers = 0};
    pz_graph *g = NULL;
    CHECK_OK(pz_build_decode_graph(&mc, &bo, &g));
    if (!g) return 1;
    const pz_tensor *gp = find_t(g, "layers.1.mlp.experts.gate_proj.weight_packed");
    const pz_tensor *dp = find_t(g, "layers.1.mlp.experts.down_proj.weight_packed");
    const pz_tensor *ds = find_t(g, "layers.1.mlp.experts.down_proj.weight_scale");
    const pz_tensor *sh = find_t(g, "layers.1.mlp.shared_experts.up_proj.weight");
    CHECK(gp && gp->dtype == PZ_I32 && gp->ne[0] == 8 && gp->ne[1] == 64 / tp && gp->ne[2] == 64 / 8);
    CHECK(dp && dp->dtype == PZ_I32 && dp->ne[1] == 64 && dp->ne[2] == 64 / tp / 8);
    CHECK(ds && ds->dtype == PZ_BF16 && ds->ne[2] == 64 / tp / 32);
    CHECK(sh && sh->dtype == PZ_BF16);
    CHECK(!find_t(g, "layers.1.mlp.experts.gate_proj.weight"));
    /* Round trip: each rank's packed words and scales are the written ones (down: a column slice). */
    pz_checkpoint *ck = NULL;
    CHECK_OK(pz_checkpoint_open_planned(p, &mc, g, &ck));
    if (ck && gp && dp && ds) {
      for (int r = 0; r < tp; r++) {
        int32_t *got = malloc(sizeof(int32_t) * (size_t)pz_tensor_numel(dp));
        pz_bf16 *gs = malloc(sizeof(pz_bf16) * (size_t)pz_tensor_numel(ds));
        CHECK_OK(pz_checkpoint_fill(ck, dp, r, got));
        CHECK_OK(pz_checkpoint_fill(ck, ds, r, gs));
        int bad_words = 0, bad_scales = 0;
        for (int e = 0; e < 8; e++) {
          char nm[200];
          snprintf(nm, sizeof nm, "language_model.model.layers.1.mlp.experts.%d.down_proj.weight_packed", e);
          const int32_t *src = find_e(&q, nm)->data;
          snprintf(nm, sizeof nm, "language_model.model.layers.1.mlp.experts.%d.down_proj.weight_scale", e);
          const pz_bf16 *ssrc = find_e(&q, nm)->data;
          for (int64_t row = 0; row < 64; row++) {
            for (int64_t w = 0; w < dp->ne[2]; w++)
              bad_words += got[(e * 64 + row) * dp->ne[2] + w] != src[row * 8 + r * dp->ne[2] + w];
            for (int64_t w = 0; w < ds->ne[2]; w++)
              bad_scales += gs[(e * 64 + row) * ds->ne[2] + w] != ssrc[row * 2 + r * ds->ne[2] + w];
          }
        }
        CHECK(bad_words == 0 && bad_scales == 0);
        free(got);
        free(gs);
      }
    }
    pz_checkpoint_close(ck);
    pz_graph_free(g);
  }

  /* The INT4 model and its dequantised bf16 twin: identical tokens and logits. */
  for (int tp = 1; tp <= 2; tp++) {
    int32_t t4[STEPS * M], tb[STEPS * M];
    float l4[M * V], lb[M * V];
    CHECK_OK(decode("int4", tp, t4, l4));
    CHECK_OK(decode("twin", tp, tb, lb));
    CHECK(!memcmp(t4, tb, sizeof t4));
    CHECK(!memcmp(l4, lb, sizeof l4));
    int nonzero = 0;
    for (int i = 0; i < M * V; i++) nonzero += l4[i] != 0.0f;
    CHECK(nonzero > V); /* a real decode, not an all-zero one */
  }

  /* The same checkpoint with transformers' newer multimodal names: "model.language_model.X" for
   * "language_model.model.X", lm_head.weight at the top: the same tokens and logits. */
  {
    ents s = {.n = 0};
    char nm[300];
    for (int i = 0; i < q.n; i++) {
      const char *n0 = q.e[i].name;
      if (!strncmp(n0, "language_model.model.", 21)) snprintf(nm, sizeof nm, "model.language_model.%s", n0 + 21);
      else if (!strncmp(n0, "language_model.", 15)) snprintf(nm, sizeof nm, "%s", n0 + 15);
      else snprintf(nm, sizeof nm, "%s", n0);
      add(&s, nm, q.e[i].dtype, q.e[i].ndim, q.e[i].shape, q.e[i].data);
    }
    const float vb[4] = {1, 2, 3, 4}; /* a vision tower's bias beside the text model: not the text model's to refuse */
    add(&s, "model.vision_tower.proj.bias", PZ_ST_F32, 1, (int64_t[]){4}, vb);
    write_ck("int4_lm_inner", cfg_int4, &s);
    same_decode("int4_lm_inner", "int4");
    free_ents(&s);
  }

  /* A text_config-wrapped config whose outer tie_word_embeddings is true and the inner one false (what
   * transformers' save_pretrained writes for a multimodal model it ties by the outer flag), with no lm_head
   * tensor: the embedding serves as the LM head, the same tokens and logits as a checkpoint that stores a
   * copy of the embedding as lm_head.weight (was: "lm_head.weight ... is missing"). */
  {
    static const char *cfg_tie = "{\"model_type\":\"kimi_k25\",\"tie_word_embeddings\":true,\"text_config\":{" TEXT
                                 ",\"tie_word_embeddings\":false," QCFG "}}";
    ents a = {.n = 0}, b = {.n = 0};
    const ent *emb = NULL;
    for (int i = 0; i < q.n; i++)
      if (!strcmp(q.e[i].name, "language_model.model.embed_tokens.weight")) emb = &q.e[i];
    CHECK(emb != NULL);
    for (int i = 0; i < q.n && emb; i++) {
      const int lm = !strcmp(q.e[i].name, "language_model.lm_head.weight");
      if (!lm) add(&a, q.e[i].name, q.e[i].dtype, q.e[i].ndim, q.e[i].shape, q.e[i].data);
      add(&b, q.e[i].name, q.e[i].dtype, q.e[i].ndim, q.e[i].shape, lm ? emb->data : q.e[i].data);
    }
    CHECK(a.n == q.n - 1 && b.n == q.n);
    write_ck("int4_tie_outer", cfg_tie, &a);
    write_ck("int4_lm_copy", cfg_int4, &b);
    same_decode("int4_tie_outer", "int4_lm_copy");
    free_ents(&a);
    free_ents(&b);
  }

  /* Bad checkpoints: one line each, naming the tensor. */
  bad(&q, "e_shape", "language_model.model.layers.1.mlp.experts.3.up_proj.weight_packed", narrow, PZ_ERR_SHAPE,
      "experts.3.up_proj.weight_packed");
  bad(&q, "e_noscale", "language_model.model.layers.2.mlp.experts.5.gate_proj.weight_scale", NULL, PZ_ERR_NOT_FOUND,
      "experts.5.gate_proj.weight_scale");
  bad(&q, "e_dtype", "language_model.model.layers.1.mlp.experts.0.down_proj.weight_packed", as_f16, PZ_ERR_DTYPE,
      "experts.0.down_proj.weight_packed");
  bad(&q, "e_sh_noscale", "language_model.model.layers.1.mlp.shared_experts.down_proj.weight_scale", NULL,
      PZ_ERR_NOT_FOUND, "shared_experts.down_proj.weight_scale");
  bad(&q, "e_sh_shape", "language_model.model.layers.2.mlp.shared_experts.gate_proj.weight_packed", narrow, PZ_ERR_SHAPE,
      "shared_experts.gate_proj.weight_packed");
  bad(&q, "e_wshape", "language_model.model.layers.1.mlp.shared_experts.up_proj.weight_shape", wrong_shape_value,
      PZ_ERR_SHAPE, "up_proj.weight_shape\" must be an integer [2] holding [64, 64], but it holds [64, 7]; the checkpoint "
      "does not match");
  /* The message says what the checkpoint holds (was: "must be I32 [64, 8] ..., got I32" for a transposed
   * [8, 64] tensor; and no "; <how to fix>" for weight_shape). */
  bad(&q, "e_sh_transposed", "language_model.model.layers.2.mlp.shared_experts.gate_proj.weight_packed", transposed,
      PZ_ERR_SHAPE, "got I32 [8, 64]; the checkpoint does not match");
  bad(&q, "e_wshape_f32", "language_model.model.layers.1.mlp.shared_experts.up_proj.weight_shape", as_f32_2,
      PZ_ERR_SHAPE, "but it is F32 [2]; the checkpoint does not match");
  bad(&q, "e_nan_scale", "language_model.model.layers.1.mlp.experts.4.gate_proj.weight_scale", nan_scale, PZ_ERR_IO,
      "non-finite");
  bad(&q, "e_sh_nan_scale", "language_model.model.layers.2.mlp.shared_experts.up_proj.weight_scale", nan_scale, PZ_ERR_IO,
      "non-finite");
  bad(&q, "e_wshape_routed", "language_model.model.layers.1.mlp.experts.6.down_proj.weight_shape", wrong_shape_value,
      PZ_ERR_SHAPE, "experts.6.down_proj.weight_shape");
  bad(&q, "e_noshape_routed", "language_model.model.layers.2.mlp.experts.1.gate_proj.weight_shape", NULL, PZ_ERR_SHAPE,
      "experts.1.gate_proj.weight_shape\" must be an integer [2] holding [64, 64], but it is missing; the checkpoint");
  /* Zero points or a column order beside the packed weights (an asymmetric or actorder export): refused on one
   * line, whatever config.json says. */
  static const char *const extra[] = {"language_model.model.layers.1.mlp.experts.0.gate_proj.weight_zero_point",
                                      "language_model.model.layers.2.mlp.experts.3.down_proj.weight_g_idx"};
  for (int x = 0; x < 2; x++) {
    ents s = {.n = 0};
    for (int i = 0; i < q.n; i++) add(&s, q.e[i].name, q.e[i].dtype, q.e[i].ndim, q.e[i].shape, q.e[i].data);
    const int32_t one[2] = {0, 0};
    add(&s, extra[x], PZ_ST_I32, 2, (int64_t[]){1, 2}, one);
    write_ck(x ? "e_g_idx" : "e_zero_point", cfg_int4, &s);
    int32_t tz[STEPS * M];
    CHECK_ST(decode(x ? "e_g_idx" : "e_zero_point", 1, tz, NULL), PZ_ERR_UNSUPPORTED);
    CHECK(strstr(pz_last_error(), extra[x]) && strstr(pz_last_error(), x ? "column order" : "zero points") &&
          !strchr(pz_last_error(), '\n'));
    /* no group size in the reason: groups of 32, coarser ones and per-channel scales are all read */
    CHECK(strstr(pz_last_error(), "(symmetric, columns in their stored order)") && !strstr(pz_last_error(), "group 32"));
    free_ents(&s);
  }
  /* A module stored both as a bf16 X.weight and as pack-quantized X.weight_packed: refused on one line naming both
   * (was: the shared expert's bf16 copy read and its INT4 one dropped, the routed expert's the other way round,
   * with no word). */
  static const char *const twice[] = {"language_model.model.layers.2.mlp.shared_experts.down_proj",
                                      "language_model.model.layers.1.mlp.experts.5.up_proj"};
  for (int x = 0; x < 2; x++) {
    ents s = {.n = 0};
    for (int i = 0; i < q.n; i++) add(&s, q.e[i].name, q.e[i].dtype, q.e[i].ndim, q.e[i].shape, q.e[i].data);
    char nm[260], sub[32];
    snprintf(nm, sizeof nm, "%s.weight", twice[x]);
    add(&s, nm, PZ_ST_BF16, 2, (int64_t[]){64, 64}, NULL);
    snprintf(sub, sizeof sub, "e_twice_%d", x);
    write_ck(sub, cfg_int4, &s);
    int32_t tz[STEPS * M];
    CHECK_ST(decode(sub, 1, tz, NULL), PZ_ERR_DTYPE);
    CHECK(strstr(pz_last_error(), nm) && strstr(pz_last_error(), "is stored twice") && !strchr(pz_last_error(), '\n'));
    free_ents(&s);
  }
  /* INT4 scales in a dtype other than BF16, F16 or F32 (the same bytes read as U8), on a routed and on a shared
   * expert: refused by dtype, on one line naming the tensor. */
  bad(&q, "e_u8_scale", "language_model.model.layers.1.mlp.experts.2.up_proj.weight_scale", as_u8_2x, PZ_ERR_DTYPE,
      "language_model.model.layers.1.mlp.experts.2.up_proj.weight_scale\" is U8; INT4 scales must be BF16, F16 or F32");
  bad(&q, "e_sh_u8_scale", "language_model.model.layers.2.mlp.shared_experts.down_proj.weight_scale", as_u8_2x,
      PZ_ERR_DTYPE,
      "language_model.model.layers.2.mlp.shared_experts.down_proj.weight_scale\" is U8; INT4 scales must be BF16, F16 or F32");
  /* Packed words stored as U32 (the same bits), and INT4 scales stored as F16 or F32 (compressed-tensors writes them
   * in the dtype of the model it quantised; these power-of-two scales are exact in each): the same tokens and logits
   * as the I32 / BF16 checkpoint, routed and shared experts alike (were refused by dtype). */
  static const struct { const char *tag; pz_st_dtype words, scales; } conv[] = {
      {"int4_u32_words", PZ_ST_U32, PZ_ST_BF16}, {"int4_f16_scales", PZ_ST_I32, PZ_ST_F16},
      {"int4_f32_scales", PZ_ST_I32, PZ_ST_F32}};
  for (size_t k = 0; k < sizeof conv / sizeof conv[0]; k++) {
    ents s = {.n = 0};
    for (int i = 0; i < q.n; i++) {
      const ent *e = &q.e[i];
      if (pz_test_ends(e->name, ".weight_packed")) {
        add(&s, e->name, conv[k].words, e->ndim, e->shape, e->data);
      } else if (pz_test_ends(e->name, ".weight_scale") && conv[k].scales != PZ_ST_BF16) {
        ent *d = add(&s, e->name, conv[k].scales, e->ndim, e->shape, NULL);
        const size_t n = e->nbytes / 2;
        for (size_t j = 0; j < n; j++) {
          const float v = pz_bf16_to_f32(((const pz_bf16 *)e->data)[j]);
          if (conv[k].scales == PZ_ST_F32) ((float *)d->data)[j] = v;
          else ((uint16_t *)d->data)[j] = pz_test_f16_exact(v);
        }
      } else {
        add(&s, e->name, e->dtype, e->ndim, e->shape, e->data);
      }
    }
    write_ck(conv[k].tag, cfg_int4, &s);
    same_decode(conv[k].tag, "int4");
    free_ents(&s);
  }
  /* An F32 scale that bf16 cannot hold is rounded to nearest even, as F32 weights are: s (1 + 2^-8 + 2^-12) reads
   * as s (1 + 2^-7) (truncation would give s). */
  {
    ents s = {.n = 0};
    const char *nm = "language_model.model.layers.1.mlp.experts.2.up_proj.weight_scale";
    float s0 = 0, s1 = 0;
    for (int i = 0; i < q.n; i++) {
      const ent *e = &q.e[i];
      if (strcmp(e->name, nm)) { add(&s, e->name, e->dtype, e->ndim, e->shape, e->data); continue; }
      ent *d = add(&s, e->name, PZ_ST_F32, e->ndim, e->shape, NULL);
      for (size_t j = 0; j < e->nbytes / 2; j++) ((float *)d->data)[j] = pz_bf16_to_f32(((const pz_bf16 *)e->data)[j]);
      s0 = ((float *)d->data)[0];
      s1 = ((float *)d->data)[1];
      ((float *)d->data)[0] = s0 * (1.0f + 0x1p-8f + 0x1p-12f);
    }
    write_ck("int4_f32_round", cfg_int4, &s);
    pz_model_config mr;
    snprintf(p, sizeof p, "%s/int4_f32_round", dir);
    CHECK_OK(pz_checkpoint_load_config(p, &mr));
    pz_build_opts bo = {.tp = 1, .m = M, .max_ctx = 8, .layers = 0};
    pz_graph *g = NULL;
    CHECK_OK(pz_build_decode_graph(&mr, &bo, &g));
    const pz_tensor *us = g ? find_t(g, "layers.1.mlp.experts.up_proj.weight_scale") : NULL;
    pz_checkpoint *ck = NULL;
    CHECK_OK(pz_checkpoint_open_planned(p, &mr, g, &ck));
    CHECK(us && us->ne[1] == 64 && us->ne[2] == 2 && s0 != 0);
    if (us && ck) {
      pz_bf16 *got = malloc(sizeof(pz_bf16) * (size_t)pz_tensor_numel(us));
      CHECK_OK(pz_checkpoint_fill(ck, us, 0, got));
      CHECK(got[2 * 64 * 2] == pz_f32_to_bf16(s0 * (1.0f + 0x1p-7f)) && got[2 * 64 * 2 + 1] == pz_f32_to_bf16(s1));
      free(got);
    }
    pz_checkpoint_close(ck);
    pz_graph_free(g);
    free_ents(&s);
  }
  /* config.json says INT4 but the experts are stored in bf16. */
  write_ck("e_bf16_experts", cfg_int4, &bf);
  int32_t t[STEPS * M];
  CHECK_ST(decode("e_bf16_experts", 1, t, NULL), PZ_ERR_DTYPE);
  CHECK(strstr(pz_last_error(), "unquantised") && !strchr(pz_last_error(), '\n'));
  /* config.json and the checkpoint disagree on the scheme: INT4 config over FP8 experts, fp8 config over
   * pack-quantized experts; one line naming what the checkpoint holds (was: "unquantised" for FP8 experts,
   * a "missing" tensor for the INT4 ones). */
  {
    ents s = {.n = 0};
    for (int i = 0; i < bf.n; i++) {
      const ent *e = &bf.e[i];
      const bool routed = strstr(e->name, ".mlp.experts.") && strstr(e->name, "_proj.weight");
      add(&s, e->name, routed ? PZ_ST_F8_E4M3 : e->dtype, e->ndim, e->shape, routed ? NULL : e->data);
    }
    write_ck("e_fp8_experts", cfg_int4, &s);
    CHECK_ST(decode("e_fp8_experts", 1, t, NULL), PZ_ERR_DTYPE);
    CHECK(strstr(pz_last_error(), "INT4 but the checkpoint stores") && strstr(pz_last_error(), "as FP8 (F8_E4M3)") &&
          !strchr(pz_last_error(), '\n'));
    free_ents(&s);
    static const char *cfg_fp8 = "{" TEXT ",\"quantization_config\":{\"quant_method\":\"fp8\",\"fmt\":\"e4m3\","
                                 "\"weight_block_size\":[128,128]}}";
    write_ck("e_fp8_cfg_int4_ck", cfg_fp8, &q);
    CHECK_ST(decode("e_fp8_cfg_int4_ck", 1, t, NULL), PZ_ERR_DTYPE);
    CHECK(strstr(pz_last_error(), "quantization_config is fp8") && strstr(pz_last_error(), ".weight_packed\", compressed-tensors INT4") &&
          !strchr(pz_last_error(), '\n'));
  }
  free_ents(&bf);
  free_ents(&q);
  TEST_DONE();
}
