/* Config.json forms of the GQA families beyond the published files the presets copy:
 *  - model_type "mistral" (MistralForCausalLM: Llama's layout and tensor names, no biases) with
 *    sliding_window null builds, at TP 1/2/4/8 and with the prezero pass off and on, the graph a
 *    "llama" config of the same numbers builds: every tensor (name, dtype, kind, shape, strides,
 *    view, sharding, parts, init) and node (op, name, layer, role, sources, outputs, params) equal;
 *  - the llama golden checkpoint (tests/data/golden/llama, Hugging Face's tokens) under a Mistral
 *    config.json decodes bit for bit as under its own, and gives HF's greedy tokens;
 *  - the qwen3_moe golden checkpoint under the config.json transformers >= 5 writes for it
 *    (num_local_experts in place of num_experts, rope_parameters in place of rope_theta, "dtype"
 *    in place of "torch_dtype") decodes bit for bit as under the published form;
 *  - an F16 checkpoint (Llama 2's published dtype): every loaded element is bf16 of the f16 value
 *    (the compiler's conversion), subnormals / +-0 / +-inf / NaN included, and decode gives HF's
 *    tokens within the golden tolerance. */
#include <math.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cjson/cJSON.h>
#include "model/builder.h"
#include "model/checkpoint.h"
#include "model/config.h"
#include "model/safetensors.h"
#include "core/dtype.h"
#include "passes/prezero.h"
#include "prezero.h"
#include "pz_test.h"
#include "golden_common.h"

static char tmpdir[] = "/tmp/pz_test_gqa_review_XXXXXX";
static char root[600];

/* ------------------------------------------------------------------ mistral graph = llama graph */

static int same_tensor(const pz_tensor *a, const pz_tensor *b) {
  if (strcmp(a->name, b->name) || a->dtype != b->dtype || a->kind != b->kind || a->ndim != b->ndim ||
      a->view_of != b->view_of || a->view_offset != b->view_offset || a->batched != b->batched ||
      a->shard_dim != b->shard_dim || a->n_parts != b->n_parts || a->init_scale != b->init_scale ||
      a->init_offset != b->init_offset)
    return 0;
  for (int d = 0; d < a->ndim; d++)
    if (a->ne[d] != b->ne[d] || a->stride[d] != b->stride[d] || a->full_ne[d] != b->full_ne[d]) return 0;
  for (int p = 0; p < a->n_parts && p < PZ_MAX_PARTS; p++)
    if (a->part_ne[p] != b->part_ne[p] || a->part_full[p] != b->part_full[p]) return 0;
  return 1;
}

static int same_node(const pz_node *a, const pz_node *b) {
  if (a->op != b->op || strcmp(a->name, b->name) || a->layer != b->layer || a->role != b->role ||
      a->n_src != b->n_src || a->n_dst != b->n_dst)
    return 0;
  for (int i = 0; i < a->n_src; i++)
    if (a->src[i] != b->src[i]) return 0;
  for (int i = 0; i < a->n_dst; i++)
    if (a->dst[i] != b->dst[i]) return 0;
  return !memcmp(&a->p, &b->p, sizeof a->p);
}

/* Number of differences between the graphs (0: equal but for the model name); each is named on
 * log (NULL: silent). */
static int graph_diff(const pz_graph *a, const pz_graph *b, const char *what, FILE *log) {
  int bad = 0;
  if (a->info.tp != b->info.tp || a->info.m != b->info.m || a->info.n_layers != b->info.n_layers ||
      a->info.hidden != b->info.hidden || a->info.vocab_size != b->info.vocab_size || a->info.rms_eps != b->info.rms_eps ||
      a->in_tokens != b->in_tokens || a->in_pos != b->in_pos || a->out_tokens != b->out_tokens ||
      a->out_logits != b->out_logits) {
    if (log) fprintf(log, "%s: graph info differs\n", what);
    bad++;
  }
  if (a->n_tensors != b->n_tensors || a->n_nodes != b->n_nodes) {
    if (log) fprintf(log, "%s: %d tensors / %d nodes vs %d / %d\n", what, a->n_tensors, a->n_nodes, b->n_tensors, b->n_nodes);
    return bad + 1;
  }
  for (int i = 0; i < a->n_tensors; i++)
    if (!same_tensor(&a->tensors[i], &b->tensors[i])) {
      if (log) fprintf(log, "%s: tensor %d (%s vs %s) differs\n", what, i, a->tensors[i].name, b->tensors[i].name);
      bad++;
    }
  for (int i = 0; i < a->n_nodes; i++)
    if (!same_node(&a->nodes[i], &b->nodes[i])) {
      if (log) fprintf(log, "%s: node %d (%s vs %s) differs\n", what, i, a->nodes[i].name, b->nodes[i].name);
      bad++;
    }
  return bad;
}

/* A Mistral-7B-Instruct-v0.3-shaped config (4 layers) under model_type `mt`; `extra` is appended
 * (",\"key\": value" or ""). MistralConfig's defaults are spelled out so that a llama config
 * reads the same numbers. */
static void mistral_json(char *out, size_t cap, const char *mt, const char *extra) {
  snprintf(out, cap,
           "{\"model_type\": \"%s\", \"hidden_size\": 4096, \"num_hidden_layers\": 4, \"num_attention_heads\": 32, "
           "\"num_key_value_heads\": 8, \"intermediate_size\": 14336, \"vocab_size\": 32768, "
           "\"max_position_embeddings\": 32768, \"rms_norm_eps\": 1e-05, \"rope_theta\": 1000000.0, "
           "\"hidden_act\": \"silu\", \"tie_word_embeddings\": false%s}",
           mt, extra);
}

static void test_mistral_graph(void) {
  char mj[1024], lj[1024];
  pz_model_config cm, cl;
  mistral_json(mj, sizeof mj, "mistral", ", \"sliding_window\": null");
  mistral_json(lj, sizeof lj, "llama", "");
  CHECK_OK(pz_config_parse(mj, strlen(mj), "mistral", &cm));
  CHECK_OK(pz_config_parse(lj, strlen(lj), "llama", &cl));
  int compared = 0;
  for (int tp = 1; tp <= 8; tp *= 2)
    for (int on = 0; on <= 1; on++) {
      pz_build_opts o = PZ_BUILD_OPTS_INIT;
      o.tp = tp;
      o.m = 4;
      o.max_ctx = 256;
      pz_graph *gm = NULL, *gl = NULL;
      CHECK_OK(pz_build_decode_graph(&cm, &o, &gm));
      CHECK_OK(pz_build_decode_graph(&cl, &o, &gl));
      if (!gm || !gl) { pz_graph_free(gm); pz_graph_free(gl); continue; }
      pz_pass_stats sm = {0}, sl = {0};
      if (on) {
        CHECK_OK(pz_pass_prezero(gm, NULL, &sm));
        CHECK_OK(pz_pass_prezero(gl, NULL, &sl));
        CHECK(sl.matched > 0 && sm.matched == sl.matched && sm.rewritten == sl.rewritten);
      }
      char what[64];
      snprintf(what, sizeof what, "mistral vs llama TP %d prezero %s", tp, on ? "on" : "off");
      CHECK(graph_diff(gm, gl, what, stderr) == 0);
      compared += gm->n_nodes;
      pz_graph_free(gm);
      pz_graph_free(gl);
    }
  printf("mistral graphs equal llama's at TP 1/2/4/8, prezero off and on (%d nodes compared)\n", compared);
  /* Negative controls: one number apart (rms_norm_eps absent: MistralConfig's 1e-6 vs 1e-5), or
   * llama with head_dim 64, and the graphs differ (llama's attention_bias true is refused: it gives o_proj a
   * bias too). */
  char mj2[1024];
  mistral_json(mj2, sizeof mj2, "mistral", ", \"sliding_window\": null");
  char *eps = strstr(mj2, "\"rms_norm_eps\": 1e-05, ");
  CHECK(eps != NULL);
  if (eps) memmove(eps, eps + strlen("\"rms_norm_eps\": 1e-05, "), strlen(eps + strlen("\"rms_norm_eps\": 1e-05, ")) + 1);
  pz_model_config c2, cb;
  CHECK_OK(pz_config_parse(mj2, strlen(mj2), "mistral2", &c2));
  CHECK(c2.rms_norm_eps == 1e-6f);
  mistral_json(lj, sizeof lj, "llama", ", \"attention_bias\": true");
  CHECK(pz_config_parse(lj, strlen(lj), "llama_bias", &cb) == PZ_ERR_CONFIG && strstr(pz_last_error(), "o_proj"));
  mistral_json(lj, sizeof lj, "llama", ", \"head_dim\": 64");
  CHECK_OK(pz_config_parse(lj, strlen(lj), "llama_hd64", &cb));
  pz_build_opts o = PZ_BUILD_OPTS_INIT;
  o.tp = 2;
  o.m = 4;
  o.max_ctx = 256;
  pz_graph *g1 = NULL, *g2 = NULL, *g3 = NULL;
  CHECK_OK(pz_build_decode_graph(&cm, &o, &g1));
  CHECK_OK(pz_build_decode_graph(&c2, &o, &g2));
  CHECK_OK(pz_build_decode_graph(&cb, &o, &g3));
  if (g1 && g2 && g3) {
    int d_eps = graph_diff(g1, g2, "control", NULL), d_bias = graph_diff(g1, g3, "control", NULL);
    printf("negative controls: rms_norm_eps 1e-6 %d differences, head_dim 64 %d\n", d_eps, d_bias);
    CHECK(d_eps > 0);
    CHECK(d_bias > 0);
  }
  pz_graph_free(g1);
  pz_graph_free(g2);
  pz_graph_free(g3);
}

/* ------------------------------------------------------------------ checkpoints under other configs */


/* tmpdir/sub: a link to `model`'s model.safetensors and its config.json edited by `edit`. */
static const char *copy_with(const char *sub, const char *model, void (*edit)(cJSON *)) {
  static char dst[1200];
  char p[1300], src[1300];
  snprintf(dst, sizeof dst, "%s/%s", tmpdir, sub);
  mkdir(dst, 0755);
  snprintf(src, sizeof src, "%s/%s/model.safetensors", root, model);
  snprintf(p, sizeof p, "%s/model.safetensors", dst);
  CHECK(symlink(src, p) == 0);
  snprintf(src, sizeof src, "%s/%s/config.json", root, model);
  char *txt = pz_test_slurp(src, NULL);
  cJSON *r = txt ? cJSON_Parse(txt) : NULL;
  free(txt);
  CHECK(r != NULL);
  if (!r) return dst;
  edit(r);
  char *s = cJSON_Print(r);
  cJSON_Delete(r);
  snprintf(p, sizeof p, "%s/config.json", dst);
  FILE *f = fopen(p, "w");
  if (f) { fputs(s, f); fclose(f); }
  free(s);
  return dst;
}

static void rename_key(cJSON *r, const char *from, const char *to) {
  cJSON *it = cJSON_DetachItemFromObjectCaseSensitive(r, from);
  CHECK(it != NULL);
  if (it) cJSON_AddItemToObject(r, to, it);
}

/* MistralForCausalLM's config.json for the same model: model_type, architectures, a null
 * sliding_window; Llama-only keys (attention_bias, mlp_bias) dropped as MistralConfig has none. */
static void to_mistral(cJSON *r) {
  cJSON_ReplaceItemInObjectCaseSensitive(r, "model_type", cJSON_CreateString("mistral"));
  const char *arch[] = {"MistralForCausalLM"};
  cJSON_ReplaceItemInObjectCaseSensitive(r, "architectures", cJSON_CreateStringArray(arch, 1));
  cJSON_DeleteItemFromObjectCaseSensitive(r, "attention_bias");
  cJSON_DeleteItemFromObjectCaseSensitive(r, "mlp_bias");
  cJSON_AddNullToObject(r, "sliding_window");
}

/* What transformers >= 5's Qwen3MoeConfig.save_pretrained writes: num_local_experts (its
 * attribute_map target of num_experts), rope_parameters {rope_theta, rope_type}, dtype. */
static void to_v5_qwen3_moe(cJSON *r) {
  rename_key(r, "num_experts", "num_local_experts");
  rename_key(r, "torch_dtype", "dtype");
  cJSON *theta = cJSON_DetachItemFromObjectCaseSensitive(r, "rope_theta");
  CHECK(theta != NULL);
  cJSON_DeleteItemFromObjectCaseSensitive(r, "rope_scaling");
  cJSON *rp = cJSON_CreateObject();
  if (theta) cJSON_AddItemToObject(rp, "rope_theta", theta);
  cJSON_AddStringToObject(rp, "rope_type", "default");
  cJSON_AddItemToObject(r, "rope_parameters", rp);
  cJSON_AddStringToObject(r, "transformers_version", "5.0.0");
}

/* `model` under its own config and under edit's: tokens equal HF's, logits bit-identical. */
static void check_same(const char *model, const char *sub, void (*edit)(cJSON *), const char *want_type) {
  char d[700];
  snprintf(d, sizeof d, "%s/%s", root, model);
  static golden g;
  if (!load_golden(d, &g)) { pz_test_failures++; return; }
  const char *dst = copy_with(sub, model, edit);
  pz_model_config c;
  CHECK_OK(pz_checkpoint_load_config(dst, &c));
  CHECK(!strcmp(c.model_type, want_type));
  static int32_t t0[MAXP][MAXS], t1[MAXP][MAXS];
  static float l0[MAXP * MAXV], l1[MAXP * MAXV];
  for (int tp = 1; tp <= 2; tp++) {
    memset(t1, 0xff, sizeof t1);
    CHECK_OK(golden_run_cpu(g.dir, &g, 0, g.n, tp, -1, t0, l0));
    CHECK_OK(golden_run_cpu(dst, &g, 0, g.n, tp, -1, t1, l1));
    int hf = 1;
    for (int i = 0; i < g.n; i++) hf &= !memcmp(t1[i], g.tokens[i], sizeof(int32_t) * (size_t)g.steps);
    int bits = !memcmp(l0, l1, sizeof(float) * (size_t)(g.n * g.vocab));
    printf("%s as %s TP %d: HF tokens %s, logits %s the published config's\n", model, sub, tp, hf ? "equal" : "DIFFER",
           bits ? "bit-identical to" : "DIFFER from");
    CHECK(hf);
    CHECK(bits);
  }
}

/* ------------------------------------------------------------------ F16 checkpoints */

#if defined(__FLT16_MANT_DIG__)
/* The llama golden checkpoint stored as F16, as Llama 2 is published: each BF16 value converted by
 * the compiler's _Float16 (round to nearest even), and in one embedding row (a token no prompt
 * feeds) the special values: the smallest and largest subnormals, -0, the smallest normal, 1,
 * 65504, +-inf, a NaN. The loader must give, for every element, bf16 of the f16's value, computed
 * here by the compiler's f16 -> f32 conversion; decode gives HF's tokens within the tolerance. */
static void test_f16(void) {
  static const uint16_t special[] = {0x0001, 0x03ff, 0x8000, 0x0400, 0x3c00, 0x7bff, 0x7c00, 0xfc00, 0x7e00, 0x8001};
  const int n_special = (int)(sizeof special / sizeof special[0]);
  char d[700], p[1300], dst[1200];
  snprintf(d, sizeof d, "%s/llama", root);
  static golden g;
  if (!load_golden(d, &g)) { pz_test_failures++; return; }
  int used[MAXV] = {0}, row = -1;
  for (int i = 0; i < g.n; i++) {
    for (int j = 0; j < g.len[i]; j++) used[g.prompt[i][j]] = 1;
    for (int k = 0; k < g.steps; k++) used[g.tokens[i][k]] = 1;
  }
  for (int t = 0; t < g.vocab && row < 0; t++)
    if (!used[t]) row = t;
  CHECK(row >= 0);
  snprintf(dst, sizeof dst, "%s/llama_f16", tmpdir);
  mkdir(dst, 0755);
  snprintf(p, sizeof p, "%s/model.safetensors", d);
  pz_st_file *f = NULL;
  CHECK_OK(pz_st_open(p, &f));
  if (!f || row < 0) { pz_st_close(f); return; }
  pz_st_write_entry *e = calloc((size_t)f->n, sizeof *e);
  uint16_t **own = calloc((size_t)f->n, sizeof *own);
  int64_t converted = 0;
  for (int i = 0; i < f->n; i++) {
    const pz_st_tensor *t = &f->t[i];
    CHECK(t->dtype == PZ_ST_BF16);
    own[i] = malloc(2 * (size_t)t->numel);
    for (int64_t k = 0; k < t->numel; k++) {
      pz_bf16 b;
      memcpy(&b, (const char *)t->data + 2 * k, 2);
      _Float16 h = (_Float16)pz_bf16_to_f32(b);
      memcpy(&own[i][k], &h, 2);
    }
    if (!strcmp(t->name, "model.embed_tokens.weight"))
      for (int k = 0; k < n_special; k++) own[i][row * t->shape[1] + k] = special[k];
    converted += t->numel;
    e[i] = (pz_st_write_entry){.name = t->name, .dtype = PZ_ST_F16, .ndim = t->ndim, .data = own[i]};
    memcpy(e[i].shape, t->shape, sizeof e[i].shape);
  }
  snprintf(p, sizeof p, "%s/model.safetensors", dst);
  CHECK_OK(pz_st_write(p, f->n, e));
  char src[1300];
  snprintf(src, sizeof src, "%s/config.json", d);
  snprintf(p, sizeof p, "%s/config.json", dst);
  CHECK(symlink(src, p) == 0);
  /* Every element of the embedding (TP 1: all rows) and of layer 1's fused qkv_proj (TP 1: q | k |
   * v rows in file order) against bf16((float)f16). */
  pz_model_config c;
  pz_graph *gr = NULL;
  pz_checkpoint *ck = NULL;
  pz_build_opts o = PZ_BUILD_OPTS_INIT;
  o.max_ctx = 16;
  CHECK_OK(pz_checkpoint_load_config(dst, &c));
  CHECK_OK(pz_build_decode_graph(&c, &o, &gr));
  if (gr) CHECK_OK(pz_checkpoint_open_planned(dst, &c, gr, &ck));
  int64_t bad = 0, checked = 0;
  static const char *const names[][4] = {
      {"embed_tokens.weight", "model.embed_tokens.weight", NULL, NULL},
      {"layers.1.self_attn.qkv_proj.weight", "model.layers.1.self_attn.q_proj.weight",
       "model.layers.1.self_attn.k_proj.weight", "model.layers.1.self_attn.v_proj.weight"}};
  for (int k = 0; k < 2 && ck; k++) {
    const pz_tensor *t = pz_graph_find_tensor(gr, names[k][0]);
    CHECK(t && t->dtype == PZ_BF16);
    if (!t) continue;
    int64_t numel = 1;
    for (int dd = 0; dd < t->ndim; dd++) numel *= t->ne[dd];
    pz_bf16 *got = malloc(sizeof(pz_bf16) * (size_t)numel);
    CHECK_OK(pz_checkpoint_fill(ck, t, 0, got));
    int64_t at = 0;
    for (int part = 1; part < 4 && names[k][part]; part++) {
      int idx = -1;
      for (int i = 0; i < f->n; i++)
        if (!strcmp(f->t[i].name, names[k][part])) idx = i;
      CHECK(idx >= 0);
      for (int64_t q = 0; idx >= 0 && q < f->t[idx].numel && at < numel; q++, at++) {
        _Float16 h;
        memcpy(&h, &own[idx][q], 2);
        pz_bf16 want = pz_f32_to_bf16((float)h);
        bad += got[at] != want;
        checked++;
      }
    }
    CHECK(at == numel);
    free(got);
  }
  /* The special row as bf16 bits: subnormals and 65504 rounded, -0, +-inf, a quiet NaN. */
  if (ck) {
    const pz_tensor *t = pz_graph_find_tensor(gr, "embed_tokens.weight");
    pz_bf16 *got = malloc(sizeof(pz_bf16) * (size_t)(t->ne[0] * t->ne[1]));
    CHECK_OK(pz_checkpoint_fill(ck, t, 0, got));
    static const pz_bf16 want[] = {0x3380, 0x3880, 0x8000, 0x3880, 0x3f80, 0x4780, 0x7f80, 0xff80, 0x7fc0, 0xb380};
    for (int k = 0; k < n_special; k++) {
      if (got[row * t->ne[1] + k] != want[k]) {
        fprintf(stderr, "F16 0x%04x loaded as bf16 0x%04x, want 0x%04x\n", special[k], got[row * t->ne[1] + k], want[k]);
        pz_test_failures++;
      }
    }
    free(got);
  }
  printf("F16 checkpoint: %lld elements of %lld checked, %lld differ from bf16(f16)\n", (long long)checked,
         (long long)converted, (long long)bad);
  CHECK(bad == 0 && checked > 0);
  pz_checkpoint_close(ck);
  pz_graph_free(gr);
  for (int i = 0; i < f->n; i++) free(own[i]);
  free(own);
  free(e);
  pz_st_close(f);
  static int32_t tok[MAXP][MAXS];
  static float lg[MAXP * MAXV];
  for (int tp = 1; tp <= 2; tp++) {
    CHECK_OK(golden_run_cpu(dst, &g, 0, g.n, tp, -1, tok, lg));
    int hf = 1;
    for (int i = 0; i < g.n; i++) hf &= !memcmp(tok[i], g.tokens[i], sizeof(int32_t) * (size_t)g.steps);
    double m = 0;
    for (int64_t i = 0; i < g.n * g.vocab; i++) m = fmax(m, fabs((double)lg[i] - (double)g.logits[i]));
    printf("llama as F16 TP %d: HF tokens %s, max |logit - HF| = %.4f (tolerance %.4f)\n", tp, hf ? "equal" : "DIFFER", m,
           g.atol);
    CHECK(hf);
    CHECK(m <= g.atol);
  }
}
#else
static void test_f16(void) { printf("no _Float16 in this compiler: F16 checkpoint check skipped\n"); }
#endif

int main(void) {
  if (!mkdtemp(tmpdir)) { perror("mkdtemp"); return 1; }
  setenv("PREZERO_PROGRESS", "0", 1);
  const char *env = getenv("PZ_GOLDEN_DIR");
  if (env) snprintf(root, sizeof root, "%s", env);
  else PZ_TEST_PATH(root, "data/golden");
  test_mistral_graph();
  check_same("llama", "mistral", to_mistral, "mistral");
  check_same("qwen3_moe", "qwen3_moe_v5", to_v5_qwen3_moe, "qwen3_moe");
  test_f16();
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
  TEST_DONE();
}
