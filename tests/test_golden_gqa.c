/* Golden test of the GQA layouts against an independent implementation: the checkpoints
 * tests/data/golden/{llama, qwen2, qwen2_tied, qwen3, qwen3_moe, mixtral, qwen3_yarn, mistral_nemo, llama32_tied,
 * glm4_moe, phi3, phi3_partial, dots1, phi3_longrope, mistral_sw, qwen2_sw, mistral_lt} (written by
 * tools/make_golden_gqa.py with Hugging Face transformers, float32, eager attention, in the
 * published tensor layout) must give HF's greedy tokens and last-step logits within the file's
 * logits_atol at TP 1, 2 and 4 (TP 4 replicates every model's kv heads, TP 2 qwen2_tied's),
 * batched and one prompt at a time, with the prezero pass off and on, through the library and the
 * CLI. Loader checks: the fused per-rank qkv_proj / gate_up_proj rows (and the qkv bias) are the
 * file's q / k / v and gate / up rows the contract names (phi3: the row ranges of its fused qkv_proj and
 * gate_up_proj); a Mixtral checkpoint in the
 * transformers >= 5 layout (mlp.gate, fused experts) decodes bit for bit as the published one;
 * broken checkpoints fail with one line naming the tensor. Negative controls show the tolerance
 * catches the llama3 RoPE scaling, glm4_moe's and phi3_partial's partial RoPE (run as full RoPE) and the
 * order of phi3's fused rows (gate and up halves, or k and v rows, exchanged in the file), and dots1's router
 * (e_score_correction_bias zeroed in the file, routed_scaling_factor run as 1, every expert group allowed);
 * glm4_moe's next-token-prediction layer stub (model.layers.3.*, a bias among it) is not read; dots1's
 * sliding layer keeps max_position_embeddings. phi3_longrope (LongRoPE, whose reference
 * transformers decoded one token at a time with a KV cache) is missed with its short factors, or its long
 * factors, at every position, and without its attention factor. Sliding windows (mistral_sw: every layer,
 * qwen2_sw: layers 1-2 of 3, mistral_lt: model_type mistral with layer_types, layers 0 and 2 of 3, window 8 under
 * sequences of 25-37 positions): the decode graph's per-layer windows, and the same checkpoints run with full
 * attention (mistral_lt: every layer sliding) or a window of 7 or 9 miss HF's logits (the tolerance resolves the
 * rule p - j < 8). */
#include <cjson/cJSON.h>
#include <math.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "core/dtype.h"
#include "core/rope.h"
#include "model/builder.h"
#include "model/checkpoint.h"
#include "model/safetensors.h"
#include "prezero.h"
#include "pz_test.h"
#include "golden_common.h"

static char tmpdir[] = "/tmp/pz_test_golden_gqa_XXXXXX";
static char root[600];

/* ------------------------------------------------------------------ decode (as test_golden.c) */

static void check_decode(const golden *g, const char *name) {
  static int32_t tok[MAXP][MAXS], tok1[MAXP][MAXS];
  static float lg[MAXP * MAXV], lg1[MAXP * MAXV];
  const int64_t nv = g->n * g->vocab;
  for (int tp = 1; tp <= 4; tp *= 2) {
    memset(tok, 0xff, sizeof tok);
    pz_status st = golden_run_cpu(g->dir, g, 0, g->n, tp, 0, tok, lg);
    CHECK_OK(st);
    if (st != PZ_OK) return;
    int same = 1;
    for (int i = 0; i < g->n; i++) same &= !memcmp(tok[i], g->tokens[i], sizeof(int32_t) * (size_t)g->steps);
    double d = golden_max_diff(lg, g->logits, nv);
    printf("%s TP %d: tokens %s, max |logit - HF| = %.4f (tolerance %.4f)\n", name, tp, same ? "equal" : "DIFFER", d, g->atol);
    CHECK(same);
    CHECK(d <= g->atol);
  }
  /* One prompt at a time (TP 1) gives the batched rows bit for bit: positions are per sequence. */
  CHECK_OK(golden_run_cpu(g->dir, g, 0, g->n, 1, 0, tok, lg));
  for (int i = 0; i < g->n; i++) {
    CHECK_OK(golden_run_cpu(g->dir, g, i, 1, 1, 0, &tok1[i], lg1 + i * g->vocab));
    CHECK(!memcmp(tok1[i], tok[i], sizeof(int32_t) * (size_t)g->steps));
  }
  CHECK(!memcmp(lg1, lg, sizeof(float) * (size_t)nv));
  /* The prezero pass on the checkpoint's graph (TP 2) changes nothing, bit for bit. */
  CHECK_OK(golden_run_cpu(g->dir, g, 0, g->n, 2, 0, tok, lg));
  CHECK_OK(golden_run_cpu(g->dir, g, 0, g->n, 2, 1, tok1, lg1));
  for (int i = 0; i < g->n; i++) CHECK(!memcmp(tok1[i], tok[i], sizeof(int32_t) * (size_t)g->steps));
  CHECK(!memcmp(lg1, lg, sizeof(float) * (size_t)nv));
}

/* The CLI's --prompt-ids / --logits on the checkpoint: same tokens, logits within tolerance. */
static void check_cli(const golden *g, const char *name) {
  const char *cli = getenv("PZ_CLI");
  if (!cli) { printf("PZ_CLI unset: CLI check of %s skipped\n", name); return; }
  char ids[2048] = "", cmd[6144], p[1200];
  size_t o = 0;
  for (int i = 0; i < g->n; i++)
    for (int j = 0; j < g->len[i]; j++)
      o += (size_t)snprintf(ids + o, sizeof ids - o, "%d%s", g->prompt[i][j], j + 1 < g->len[i] ? "," : i + 1 < g->n ? ";" : "");
  snprintf(cmd, sizeof cmd, "\"%s\" run --model %s --device cpu --tp 2 --prompt-ids '%s' --steps %d --logits %s/cli.f32 > %s/cli.out",
           cli, g->dir, ids, g->steps, tmpdir, tmpdir);
  CHECK(system(cmd) == 0);
  snprintf(p, sizeof p, "%s/cli.out", tmpdir);
  char *out = pz_test_slurp(p, NULL);
  CHECK(out != NULL);
  for (int i = 0; out && i < g->n; i++) {
    char want[1024];
    size_t w = (size_t)snprintf(want, sizeof want, "seq %d:", i);
    for (int k = 0; k < g->steps; k++) w += (size_t)snprintf(want + w, sizeof want - w, " %d", g->tokens[i][k]);
    snprintf(want + w, sizeof want - w, "\n");
    if (!strstr(out, want)) { fprintf(stderr, "FAIL: CLI output lacks '%s' for %s:\n%s", want, name, out); pz_test_failures++; }
  }
  free(out);
  size_t len;
  snprintf(p, sizeof p, "%s/cli.f32", tmpdir);
  float *l = (float *)pz_test_slurp(p, &len);
  CHECK(l && len == (size_t)(g->n * g->vocab * 4));
  if (l && len == (size_t)(g->n * g->vocab * 4)) CHECK(golden_max_diff(l, g->logits, g->n * g->vocab) <= g->atol);
  free(l);
}

/* ------------------------------------------------------------------ checkpoint copies */

static void model_dir(char *buf, size_t cap, const char *model) { snprintf(buf, cap, "%s/%s", root, model); }

/* config.json of `model` with the first occurrence of `from` replaced by `to` (NULL: as is). */
static char *config_text(const char *model, const char *from, const char *to) {
  char p[1200];
  model_dir(p, sizeof p, model);
  strncat(p, "/config.json", sizeof p - strlen(p) - 1);
  char *txt = pz_test_slurp(p, NULL);
  if (!txt || !from) return txt;
  char *at = strstr(txt, from);
  CHECK(at != NULL);
  if (!at) return txt;
  size_t n = strlen(txt) - strlen(from) + strlen(to) + 1;
  char *out = malloc(n);
  snprintf(out, n, "%.*s%s%s", (int)(at - txt), txt, to, at + strlen(from));
  free(txt);
  return out;
}

/* A change to one tensor of a copy: drop it (new_name NULL, shape0 0), rename it, give it a
 * different first dim (its data then comes from the start of the original, or zeros), or, shape0 -1,
 * zero it (same shape). */
typedef struct edit {
  const char *name, *new_name;
  int drop;
  int64_t shape0;
  const char *copy_from; /* non-NULL: the data of this tensor of the file (the same byte count) */
} edit;

/* Rows [a, a + n) and [b, b + n) of tensor `name` of a copy exchanged. */
typedef struct row_swap {
  const char *name;
  int64_t a, b, n;
} row_swap;

/* tmpdir/sub: `model`'s config.json (edited as config_text) and its model.safetensors with the
 * edits and row swaps applied. Returns the directory (static buffer). */
static const char *write_copy_sw(const char *sub, const char *model, const char *from, const char *to, const edit *ed,
                                 int n_ed, const row_swap *sw, int n_sw) {
  static char dst[1200];
  char p[1300], src[1200];
  snprintf(dst, sizeof dst, "%s/%s", tmpdir, sub);
  mkdir(dst, 0755);
  char *cfg = config_text(model, from, to);
  snprintf(p, sizeof p, "%s/config.json", dst);
  FILE *f = fopen(p, "w");
  if (f && cfg) fputs(cfg, f);
  if (f) fclose(f);
  free(cfg);
  model_dir(src, sizeof src, model);
  strncat(src, "/model.safetensors", sizeof src - strlen(src) - 1);
  pz_st_file *sf = NULL;
  CHECK_OK(pz_st_open(src, &sf));
  if (!sf) return dst;
  pz_st_write_entry *e = calloc((size_t)sf->n, sizeof *e);
  void **own = calloc((size_t)sf->n, sizeof *own);
  int n = 0;
  for (int i = 0; i < sf->n; i++) {
    const pz_st_tensor *t = &sf->t[i];
    pz_st_write_entry w = {.name = t->name, .dtype = t->dtype, .ndim = t->ndim, .data = t->data};
    memcpy(w.shape, t->shape, sizeof w.shape);
    int keep = 1;
    for (int k = 0; k < n_ed; k++) {
      if (strcmp(ed[k].name, t->name)) continue;
      if (ed[k].drop) keep = 0;
      if (ed[k].new_name) w.name = ed[k].new_name;
      if (ed[k].shape0 > 0) {
        w.shape[0] = ed[k].shape0;
        size_t bytes = t->nbytes / (size_t)t->shape[0] * (size_t)ed[k].shape0;
        own[i] = calloc(1, bytes);
        memcpy(own[i], t->data, bytes < t->nbytes ? bytes : t->nbytes);
        w.data = own[i];
      }
      if (ed[k].shape0 < 0 && !own[i]) w.data = own[i] = calloc(1, t->nbytes);
      for (int j = 0; ed[k].copy_from && j < sf->n; j++)
        if (!strcmp(sf->t[j].name, ed[k].copy_from) && sf->t[j].nbytes == t->nbytes) w.data = sf->t[j].data;
    }
    for (int k = 0; k < n_sw; k++) {
      if (strcmp(sw[k].name, t->name) || own[i]) continue;
      const size_t rb = t->nbytes / (size_t)t->shape[0], nb = rb * (size_t)sw[k].n;
      char *c = own[i] = malloc(t->nbytes);
      memcpy(c, t->data, t->nbytes);
      memcpy(c + rb * (size_t)sw[k].a, (const char *)t->data + rb * (size_t)sw[k].b, nb);
      memcpy(c + rb * (size_t)sw[k].b, (const char *)t->data + rb * (size_t)sw[k].a, nb);
      w.data = c;
    }
    if (keep) e[n++] = w;
  }
  snprintf(p, sizeof p, "%s/model.safetensors", dst);
  CHECK_OK(pz_st_write(p, n, e));
  for (int i = 0; i < sf->n; i++) free(own[i]);
  free(own);
  free(e);
  pz_st_close(sf);
  return dst;
}

static const char *write_copy(const char *sub, const char *model, const char *from, const char *to, const edit *ed,
                              int n_ed) {
  return write_copy_sw(sub, model, from, to, ed, n_ed, NULL, 0);
}

/* A CPU engine at TP 2 on the checkpoint in dir (4 steps from position 0). */
static pz_status engine_tp2(const char *dir, pz_engine **e) {
  pz_engine_config ec = PZ_ENGINE_CONFIG_INIT;
  ec.model_dir = dir;
  ec.tp = 2;
  ec.context = 0;
  ec.max_steps = 4;
  ec.device = PZ_DEVICE_CPU;
  return pz_engine_create(&ec, e);
}

/* Opening a copy's checkpoint against its own graph (TP 2) fails with `want`, in one line
 * naming `needle`; the engine (and so the CLI) reports the same. */
static void bad(const char *what, const char *dir, pz_status want, const char *needle) {
  pz_model_config c;
  pz_graph *g = NULL;
  pz_checkpoint *ck = NULL;
  pz_build_opts o = PZ_BUILD_OPTS_INIT;
  o.tp = 2;
  o.max_ctx = 16;
  CHECK_OK(pz_checkpoint_load_config(dir, &c));
  CHECK_OK(pz_build_decode_graph(&c, &o, &g));
  if (!g) return;
  pz_status st = pz_checkpoint_open_planned(dir, &c, g, &ck);
  const char *msg = pz_last_error();
  printf("bad checkpoint (%s): %s: %s\n", what, pz_status_string(st), msg);
  CHECK(st == want);
  CHECK(ck == NULL);
  CHECK(strstr(msg, needle) != NULL);
  CHECK(strchr(msg, '\n') == NULL);
  pz_graph_free(g);
  pz_engine *e = NULL;
  CHECK_ST(engine_tp2(dir, &e), want);
  CHECK(e == NULL && strstr(pz_last_error(), needle) != NULL);
}

static void test_bad_checkpoints(void) {
  const char *d;
  /* tie_word_embeddings true over a stored lm_head.weight: refused where the two differ (transformers 4
   * and 5 read such a file differently); accepted when they are the same bytes (a tied model saved
   * with both tensors), where both readings agree. */
  d = write_copy("tied_head_differs", "llama", "\"tie_word_embeddings\": false", "\"tie_word_embeddings\": true", NULL, 0);
  bad("tied config, a different lm_head.weight", d, PZ_ERR_CONFIG, "\"lm_head.weight\" differs from \"model.embed_tokens.weight\"");
  d = write_copy("tied_head_same", "llama", "\"tie_word_embeddings\": false", "\"tie_word_embeddings\": true",
                 (edit[]){{"lm_head.weight", NULL, 0, 0, "model.embed_tokens.weight"}}, 1);
  {
    pz_engine *e = NULL;
    CHECK_OK(engine_tp2(d, &e));
    pz_engine_destroy(e);
  }
  d = write_copy("no_k_proj", "llama", NULL, NULL, (edit[]){{"model.layers.1.self_attn.k_proj.weight", NULL, 1, 0, NULL}}, 1);
  bad("k_proj missing", d, PZ_ERR_NOT_FOUND, "\"model.layers.1.self_attn.k_proj.weight\"");
  d = write_copy("v_proj_shape", "llama", NULL, NULL, (edit[]){{"model.layers.0.self_attn.v_proj.weight", NULL, 0, 16, NULL}}, 1);
  bad("v_proj [16, 64] instead of [32, 64]", d, PZ_ERR_SHAPE, "\"model.layers.0.self_attn.v_proj.weight\" has shape [16, 64]");
  d = write_copy("no_q_bias", "qwen2", NULL, NULL, (edit[]){{"model.layers.0.self_attn.q_proj.bias", NULL, 1, 0, NULL}}, 1);
  bad("q_proj.bias missing", d, PZ_ERR_NOT_FOUND, "\"model.layers.0.self_attn.q_proj.bias\"");
  d = write_copy("k_bias_shape", "qwen2", NULL, NULL, (edit[]){{"model.layers.1.self_attn.k_proj.bias", NULL, 0, 64, NULL}}, 1);
  bad("k_proj.bias [64]", d, PZ_ERR_SHAPE, "\"model.layers.1.self_attn.k_proj.bias\" has shape [64]");
  d = write_copy("no_up_proj", "qwen3", NULL, NULL, (edit[]){{"model.layers.1.mlp.up_proj.weight", NULL, 1, 0, NULL}}, 1);
  bad("up_proj missing", d, PZ_ERR_NOT_FOUND, "\"model.layers.1.mlp.up_proj.weight\"");
  d = write_copy("no_k_norm", "qwen3", NULL, NULL, (edit[]){{"model.layers.0.self_attn.k_norm.weight", NULL, 1, 0, NULL}}, 1);
  bad("k_norm missing", d, PZ_ERR_NOT_FOUND, "\"model.layers.0.self_attn.k_norm.weight\"");
  d = write_copy("no_expert", "qwen3_moe", NULL, NULL, (edit[]){{"model.layers.2.mlp.experts.5.down_proj.weight", NULL, 1, 0, NULL}}, 1);
  bad("qwen3_moe expert 5 down_proj missing", d, PZ_ERR_NOT_FOUND, "\"model.layers.2.mlp.experts.5.down_proj.weight\"");
  d = write_copy("no_w3", "mixtral", NULL, NULL, (edit[]){{"model.layers.1.block_sparse_moe.experts.3.w3.weight", NULL, 1, 0, NULL}}, 1);
  bad("mixtral expert 3 w3 missing", d, PZ_ERR_NOT_FOUND, "\"model.layers.1.block_sparse_moe.experts.3.w3.weight\"");
  d = write_copy("no_router", "mixtral", NULL, NULL, (edit[]){{"model.layers.0.block_sparse_moe.gate.weight", NULL, 1, 0, NULL}}, 1);
  bad("mixtral router missing", d, PZ_ERR_NOT_FOUND, "\"model.layers.0.block_sparse_moe.gate.weight\"");
  d = write_copy("no_score_bias", "glm4_moe", NULL, NULL,
                 (edit[]){{"model.layers.2.mlp.gate.e_score_correction_bias", NULL, 1, 0, NULL}}, 1);
  bad("glm4_moe e_score_correction_bias missing", d, PZ_ERR_NOT_FOUND, "\"model.layers.2.mlp.gate.e_score_correction_bias\"");
  d = write_copy("no_shared", "glm4_moe", NULL, NULL,
                 (edit[]){{"model.layers.1.mlp.shared_experts.up_proj.weight", NULL, 1, 0, NULL}}, 1);
  bad("glm4_moe shared expert up_proj missing", d, PZ_ERR_NOT_FOUND, "\"model.layers.1.mlp.shared_experts.up_proj.weight\"");
  d = write_copy("glm_no_v_bias", "glm4_moe", NULL, NULL, (edit[]){{"model.layers.0.self_attn.v_proj.bias", NULL, 1, 0, NULL}}, 1);
  bad("glm4_moe v_proj.bias missing", d, PZ_ERR_NOT_FOUND, "\"model.layers.0.self_attn.v_proj.bias\"");
  /* phi3: the fused tensors, named as stored */
  d = write_copy("phi3_no_qkv", "phi3", NULL, NULL, (edit[]){{"model.layers.1.self_attn.qkv_proj.weight", NULL, 1, 0, NULL}}, 1);
  bad("phi3 qkv_proj missing", d, PZ_ERR_NOT_FOUND, "\"model.layers.1.self_attn.qkv_proj.weight\" (for layers.1.");
  d = write_copy("phi3_qkv_shape", "phi3", NULL, NULL, (edit[]){{"model.layers.0.self_attn.qkv_proj.weight", NULL, 0, 96, NULL}}, 1);
  bad("phi3 qkv_proj [96, 64] instead of [128, 64]", d, PZ_ERR_SHAPE,
      "\"model.layers.0.self_attn.qkv_proj.weight\" has shape [96, 64], config.json implies [128, 64]");
  d = write_copy("phi3_no_gate_up", "phi3", NULL, NULL, (edit[]){{"model.layers.0.mlp.gate_up_proj.weight", NULL, 1, 0, NULL}}, 1);
  bad("phi3 gate_up_proj missing", d, PZ_ERR_NOT_FOUND, "\"model.layers.0.mlp.gate_up_proj.weight\"");
  d = write_copy("phi3_gate_up_shape", "phi3_partial", NULL, NULL,
                 (edit[]){{"model.layers.1.mlp.gate_up_proj.weight", NULL, 0, 128, NULL}}, 1);
  bad("phi3 gate_up_proj [128, 64] instead of [256, 64]", d, PZ_ERR_SHAPE,
      "\"model.layers.1.mlp.gate_up_proj.weight\" has shape [128, 64], config.json implies [256, 64]");
  /* a checkpoint with separate q/k/v (Mistral-Nemo's) under model_type phi3: the fused name is asked for */
  d = write_copy("phi3_as_mistral", "mistral_nemo", "\"model_type\": \"mistral\"", "\"model_type\": \"phi3\"", NULL, 0);
  bad("phi3 config over separate q/k/v", d, PZ_ERR_NOT_FOUND, "\"model.layers.0.self_attn.qkv_proj.weight\"");
  d = write_copy("dots1_no_q_norm", "dots1", NULL, NULL, (edit[]){{"model.layers.2.self_attn.q_norm.weight", NULL, 1, 0, NULL}}, 1);
  bad("dots1 q_norm missing", d, PZ_ERR_NOT_FOUND, "\"model.layers.2.self_attn.q_norm.weight\"");
  d = write_copy("dots1_shared_shape", "dots1", NULL, NULL,
                 (edit[]){{"model.layers.1.mlp.shared_experts.gate_proj.weight", NULL, 0, 16, NULL}}, 1);
  bad("dots1 shared expert gate_proj of one expert's width", d, PZ_ERR_SHAPE,
      "\"model.layers.1.mlp.shared_experts.gate_proj.weight\" has shape [16, 64]");
  d = write_copy("untied", "qwen2_tied", "\"tie_word_embeddings\": true", "\"tie_word_embeddings\": false", NULL, 0);
  bad("tie_word_embeddings false without lm_head.weight", d, PZ_ERR_NOT_FOUND, "\"lm_head.weight\"");
}

/* ------------------------------------------------------------------ fused rows */

/* Row r (of `cols` values) of checkpoint tensor `name` in dir's model.safetensors, as f32. */
static int file_row(const pz_st_file *f, const char *name, int64_t r, int64_t cols, float *out) {
  const pz_st_tensor *t = pz_st_find(f, name);
  if (!t || t->dtype != PZ_ST_BF16) { fprintf(stderr, "no BF16 tensor %s\n", name); return 0; }
  for (int64_t j = 0; j < cols; j++) {
    pz_bf16 v;
    memcpy(&v, (const char *)t->data + 2 * (size_t)(r * cols + j), 2);
    out[j] = pz_bf16_to_f32(v);
  }
  return 1;
}

/* Every rank's qkv_proj weight / bias rows and gate_up_proj rows of layer 1 at TP tp are the
 * file's rows the contract names: q rows [r*heads*d, +heads*d), k and v rows of this rank's kv
 * heads (kv head r / (TP / num_key_value_heads) when TP exceeds it), gate then up rows
 * [r*I/TP, +I/TP). Values are compared exactly (bf16 copies; the bias converted to f32). */
static void check_rows(const char *model, int tp) {
  char dir[1200], p[1300];
  model_dir(dir, sizeof dir, model);
  pz_model_config c;
  pz_graph *g = NULL;
  pz_checkpoint *ck = NULL;
  pz_build_opts o = PZ_BUILD_OPTS_INIT;
  o.tp = tp;
  o.max_ctx = 16;
  CHECK_OK(pz_checkpoint_load_config(dir, &c));
  CHECK_OK(pz_build_decode_graph(&c, &o, &g));
  if (g) CHECK_OK(pz_checkpoint_open_planned(dir, &c, g, &ck));
  snprintf(p, sizeof p, "%s/model.safetensors", dir);
  pz_st_file *f = NULL;
  CHECK_OK(pz_st_open(p, &f));
  if (!g || !ck || !f) { pz_checkpoint_close(ck); pz_graph_free(g); pz_st_close(f); return; }
  const int64_t H = c.hidden_size, d = c.head_dim, heads = c.num_attention_heads / tp, nkv = c.num_key_value_heads;
  const int64_t kvh = nkv >= tp ? nkv / tp : 1;
  const pz_tensor *w = pz_graph_find_tensor(g, "layers.1.self_attn.qkv_proj.weight");
  const pz_tensor *b = pz_graph_find_tensor(g, "layers.1.self_attn.qkv_proj.bias");
  const pz_tensor *gu = pz_graph_find_tensor(g, "layers.1.mlp.gate_up_proj.weight");
  CHECK(w && w->ne[0] == (heads + 2 * kvh) * d && w->ne[1] == H);
  CHECK(!b == !c.attention_bias);
  int64_t n = (heads + 2 * kvh) * d, bad_rows = 0, checked = 0;
  pz_bf16 *got = malloc(sizeof(pz_bf16) * (size_t)(n > 2 * c.intermediate_size ? n : 2 * c.intermediate_size) * (size_t)H);
  float *gb = malloc(sizeof(float) * (size_t)n), *want = malloc(sizeof(float) * (size_t)H);
  const bool fused = !strcmp(c.model_type, "phi3"); /* qkv_proj: q | k | v rows; gate_up_proj: gate | up */
  const int64_t nq = c.num_attention_heads * d, I_full = c.intermediate_size;
  for (int r = 0; r < tp && w; r++) {
    const int64_t kv0 = nkv >= tp ? r * kvh : r / (tp / nkv); /* first kv head of rank r */
    CHECK_OK(pz_checkpoint_fill(ck, w, r, got));
    if (b) CHECK_OK(pz_checkpoint_fill(ck, b, r, gb));
    for (int64_t i = 0; i < n; i++) {
      const char *proj = i < heads * d ? "q_proj" : i < (heads + kvh) * d ? "k_proj" : "v_proj";
      const int64_t src = i < heads * d ? r * heads * d + i : kv0 * d + (i - heads * d) % (kvh * d);
      const int part = i < heads * d ? 0 : i < (heads + kvh) * d ? 1 : 2;
      const int64_t frow = src + (part ? nq : 0) + (part == 2 ? nkv * d : 0); /* its row of the fused tensor */
      char name[200];
      snprintf(name, sizeof name, "model.layers.1.self_attn.%s.weight", fused ? "qkv_proj" : proj);
      int ok = file_row(f, name, fused ? frow : src, H, want);
      for (int64_t j = 0; ok && j < H; j++) ok = pz_bf16_to_f32(got[i * H + j]) == want[j];
      if (b) { /* element src of the 1-D bias = its row src of one value */
        float bv = NAN;
        snprintf(name, sizeof name, "model.layers.1.self_attn.%s.bias", proj);
        ok = ok && file_row(f, name, src, 1, &bv) && gb[i] == bv;
      }
      bad_rows += !ok;
      checked++;
    }
    if (gu) {
      const int64_t I = c.intermediate_size / tp;
      CHECK(gu->ne[0] == 2 * I && gu->ne[1] == H);
      CHECK_OK(pz_checkpoint_fill(ck, gu, r, got));
      for (int64_t i = 0; i < 2 * I; i++) {
        const int64_t sr = r * I + i % I;
        int ok = fused ? file_row(f, "model.layers.1.mlp.gate_up_proj.weight", sr + (i < I ? 0 : I_full), H, want)
                       : file_row(f, i < I ? "model.layers.1.mlp.gate_proj.weight" : "model.layers.1.mlp.up_proj.weight",
                                  sr, H, want);
        for (int64_t j = 0; ok && j < H; j++) ok = pz_bf16_to_f32(got[i * H + j]) == want[j];
        bad_rows += !ok;
        checked++;
      }
    }
  }
  printf("%s TP %d: %lld fused rows (kv heads per rank %lld%s) equal the file's\n", model, tp, (long long)checked,
         (long long)kvh, nkv < tp ? ", replicated" : "");
  CHECK(bad_rows == 0);
  free(got);
  free(gb);
  free(want);
  pz_st_close(f);
  pz_checkpoint_close(ck);
  pz_graph_free(g);
}

/* ------------------------------------------------------------------ layouts and controls */

/* The Mixtral golden model re-saved as transformers >= 5 keeps it in memory (mlp.gate.weight,
 * mlp.experts.gate_up_proj [E, 2I, H] with w1 rows then w3 rows, mlp.experts.down_proj [E, H, I])
 * decodes bit for bit as the published layout (TP 2). */
static void check_mixtral_fused(const golden *g) {
  char src[1200], p[1300];
  model_dir(src, sizeof src, "mixtral");
  snprintf(p, sizeof p, "%s/model.safetensors", src);
  pz_st_file *f = NULL;
  CHECK_OK(pz_st_open(p, &f));
  pz_model_config c;
  CHECK_OK(pz_checkpoint_load_config(src, &c));
  if (!f) return;
  const int64_t E = c.n_routed_experts, I = c.intermediate_size, H = c.hidden_size;
  const int L = (int)c.num_hidden_layers;
  pz_st_write_entry *e = calloc((size_t)f->n, sizeof *e);
  char (*names)[128] = calloc((size_t)f->n, sizeof *names);
  void **own = calloc((size_t)(2 * L), sizeof *own);
  int n = 0;
  for (int i = 0; i < f->n; i++) {
    const pz_st_tensor *t = &f->t[i];
    if (strstr(t->name, ".block_sparse_moe.experts.")) continue;
    pz_st_write_entry w = {.name = t->name, .dtype = t->dtype, .ndim = t->ndim, .data = t->data};
    memcpy(w.shape, t->shape, sizeof w.shape);
    const char *at = strstr(t->name, ".block_sparse_moe.gate.weight");
    if (at) {
      snprintf(names[n], sizeof names[n], "%.*s.mlp.gate.weight", (int)(at - t->name), t->name);
      w.name = names[n];
    }
    e[n++] = w;
  }
  for (int l = 0; l < L; l++) {
    pz_bf16 *gu = malloc(sizeof(pz_bf16) * (size_t)(E * 2 * I * H)), *dn = malloc(sizeof(pz_bf16) * (size_t)(E * H * I));
    own[2 * l] = gu;
    own[2 * l + 1] = dn;
    for (int64_t x = 0; x < E; x++) {
      char nm[200];
      static const char *const part[] = {"w1", "w3", "w2"};
      for (int k = 0; k < 3; k++) {
        snprintf(nm, sizeof nm, "model.layers.%d.block_sparse_moe.experts.%lld.%s.weight", l, (long long)x, part[k]);
        const pz_st_tensor *t = pz_st_find(f, nm);
        CHECK(t && t->nbytes == sizeof(pz_bf16) * (size_t)(I * H));
        if (!t) continue;
        if (k < 2) memcpy(gu + (x * 2 * I + k * I) * H, t->data, t->nbytes);
        else memcpy(dn + x * H * I, t->data, t->nbytes);
      }
    }
    snprintf(names[n], sizeof names[n], "model.layers.%d.mlp.experts.gate_up_proj", l);
    e[n] = (pz_st_write_entry){.name = names[n], .dtype = PZ_ST_BF16, .ndim = 3, .shape = {E, 2 * I, H}, .data = gu};
    n++;
    snprintf(names[n], sizeof names[n], "model.layers.%d.mlp.experts.down_proj", l);
    e[n] = (pz_st_write_entry){.name = names[n], .dtype = PZ_ST_BF16, .ndim = 3, .shape = {E, H, I}, .data = dn};
    n++;
  }
  char dst[1200];
  snprintf(dst, sizeof dst, "%s/mixtral_fused", tmpdir);
  mkdir(dst, 0755);
  snprintf(p, sizeof p, "%s/model.safetensors", dst);
  CHECK_OK(pz_st_write(p, n, e));
  for (int i = 0; i < 2 * L; i++) free(own[i]);
  free(own);
  free(names);
  free(e);
  pz_st_close(f);
  char *cfg = config_text("mixtral", NULL, NULL);
  snprintf(p, sizeof p, "%s/config.json", dst);
  FILE *cf = fopen(p, "w");
  if (cf && cfg) fputs(cfg, cf);
  if (cf) fclose(cf);
  free(cfg);
  static int32_t t0[MAXP][MAXS], t1[MAXP][MAXS];
  static float l0[MAXP * MAXV], l1[MAXP * MAXV];
  CHECK_OK(golden_run_cpu(g->dir, g, 0, g->n, 2, 0, t0, l0));
  CHECK_OK(golden_run_cpu(dst, g, 0, g->n, 2, 0, t1, l1));
  for (int i = 0; i < g->n; i++) CHECK(!memcmp(t0[i], t1[i], sizeof(int32_t) * (size_t)g->steps));
  CHECK(!memcmp(l0, l1, sizeof(float) * (size_t)(g->n * g->vocab)));
  printf("mixtral in the transformers >= 5 layout: decode %s the published layout's\n",
         memcmp(l0, l1, sizeof(float) * (size_t)(g->n * g->vocab)) ? "DIFFERS from" : "bit-identical to");
}

/* Negative control: the llama golden model without its llama3 rope_scaling misses the HF logits
 * by more than the tolerance, so the tolerance resolves the frequency scaling. */
static void negative_control(const golden *g) {
  char p[1300];
  const char *d = write_copy("norope", "llama", NULL, NULL, NULL, 0);
  snprintf(p, sizeof p, "%s/config.json", d);
  char *txt = pz_test_slurp(p, NULL);
  cJSON *r = txt ? cJSON_Parse(txt) : NULL;
  free(txt);
  if (!r) { CHECK(r != NULL); return; }
  CHECK(cJSON_IsObject(cJSON_GetObjectItem(r, "rope_scaling")));
  cJSON_DeleteItemFromObject(r, "rope_scaling");
  char *s = cJSON_Print(r);
  cJSON_Delete(r);
  FILE *f = fopen(p, "w");
  if (f) { fputs(s, f); fclose(f); }
  free(s);
  static int32_t tok[MAXP][MAXS];
  static float lg[MAXP * MAXV];
  CHECK_OK(golden_run_cpu(d, g, 0, g->n, 1, 0, tok, lg));
  double m = golden_max_diff(lg, g->logits, g->n * g->vocab);
  printf("negative control (llama3 rope_scaling dropped): max |logit - HF| = %.4f, must exceed %.4f\n", m, g->atol);
  CHECK(m > g->atol);
}

/* glm4_moe with partial_rotary_factor 1 (RoPE over all of head_dim) misses HF's logits: the tolerance
 * resolves the partial RoPE. */
static void negative_control_glm(const golden *g) {
  const char *d = write_copy("fullrope", "glm4_moe", "\"partial_rotary_factor\": 0.5", "\"partial_rotary_factor\": 1.0",
                             NULL, 0);
  static int32_t tok[MAXP][MAXS];
  static float lg[MAXP * MAXV];
  CHECK_OK(golden_run_cpu(d, g, 0, g->n, 1, 0, tok, lg));
  double m = golden_max_diff(lg, g->logits, g->n * g->vocab);
  printf("negative control (glm4_moe partial_rotary_factor 0.5 run as 1.0): max |logit - HF| = %.4f, must exceed %.4f\n", m,
         g->atol);
  CHECK(m > g->atol);
}

/* phi3_partial with partial_rotary_factor 1 (RoPE over all 16 dims instead of the first 12) misses HF's
 * logits; so do the phi3 golden's files with the gate and up halves of every gate_up_proj, or the k and v
 * rows of every qkv_proj, exchanged: the loader's split of the fused tensors is resolved, not just their
 * presence. */
static void negative_controls_phi3(const golden *g, const char *model) {
  static int32_t tok[MAXP][MAXS];
  static float lg[MAXP * MAXV];
  if (!strcmp(model, "phi3_partial")) {
    const char *d = write_copy("phi3_fullrope", model, "\"partial_rotary_factor\": 0.75",
                               "\"partial_rotary_factor\": 1.0", NULL, 0);
    CHECK_OK(golden_run_cpu(d, g, 0, g->n, 1, 0, tok, lg));
    double m = golden_max_diff(lg, g->logits, g->n * g->vocab);
    printf("negative control (phi3_partial partial_rotary_factor 0.75 run as 1.0): max |logit - HF| = %.4f, must exceed "
           "%.4f\n", m, g->atol);
    CHECK(m > g->atol);
    return;
  }
  pz_model_config c;
  CHECK_OK(pz_checkpoint_load_config(g->dir, &c));
  const int64_t I = c.intermediate_size, q = c.num_attention_heads * c.head_dim, kv = c.num_key_value_heads * c.head_dim;
  static const char *const what[2] = {"gate and up halves of gate_up_proj", "k and v rows of qkv_proj"};
  for (int k = 0; k < 2; k++) {
    char names[2][96];
    row_swap sw[2];
    for (int L = 0; L < 2; L++) {
      snprintf(names[L], sizeof names[L], "model.layers.%d.%s", L, k ? "self_attn.qkv_proj.weight" : "mlp.gate_up_proj.weight");
      sw[L] = (row_swap){names[L], k ? q : 0, k ? q + kv : I, k ? kv : I};
    }
    const char *d = write_copy_sw(k ? "phi3_kv_swapped" : "phi3_gate_up_swapped", model, NULL, NULL, NULL, 0, sw, 2);
    CHECK_OK(golden_run_cpu(d, g, 0, g->n, 2, 0, tok, lg));
    double m = golden_max_diff(lg, g->logits, g->n * g->vocab);
    printf("negative control (phi3 %s exchanged): max |logit - HF| = %.4f, must exceed %.4f\n", what[k], m, g->atol);
    CHECK(m > g->atol);
  }
}

/* dots1: its sliding layer (layer 2, max_window_layers 2, window 64) keeps max_position_embeddings 128;
 * the file with e_score_correction_bias zeroed, and the config with routed_scaling_factor 1 or with every
 * expert group allowed (topk_group = n_group = 4), miss HF's logits: the tolerance resolves each part of the
 * DeepSeek-V3 router (the q/k norms' share is expected.json's sensitivity). */
static void negative_controls_dots1(const golden *g) {
  pz_model_config c;
  CHECK_OK(pz_checkpoint_load_config(g->dir, &c));
  CHECK(c.max_position_embeddings == 128 && c.qk_norm && c.n_group == 4 && c.topk_group == 2 && c.n_shared_experts == 2);
  CHECK(pz_config_layer_window(&c, 0) == 0 && pz_config_layer_window(&c, 1) == 0 && pz_config_layer_window(&c, 2) == 64);
  static int32_t tok[MAXP][MAXS];
  static float lg[MAXP * MAXV];
  static const edit zero_bias[] = {{"model.layers.1.mlp.gate.e_score_correction_bias", NULL, 0, -1, NULL},
                                   {"model.layers.2.mlp.gate.e_score_correction_bias", NULL, 0, -1, NULL}};
  const struct { const char *sub, *what, *from, *to; const edit *ed; int n_ed; } ctl[] = {
      {"dots1_no_bias", "e_score_correction_bias zeroed", NULL, NULL, zero_bias, 2},
      {"dots1_scale_1", "routed_scaling_factor 2.5 run as 1", "\"routed_scaling_factor\": 2.5",
       "\"routed_scaling_factor\": 1.0", NULL, 0},
      {"dots1_all_groups", "topk_group 2 run as 4 (no group limit)", "\"topk_group\": 2", "\"topk_group\": 4", NULL, 0},
  };
  for (int k = 0; k < 3; k++) {
    const char *d = write_copy(ctl[k].sub, "dots1", ctl[k].from, ctl[k].to, ctl[k].ed, ctl[k].n_ed);
    CHECK_OK(golden_run_cpu(d, g, 0, g->n, 2, 0, tok, lg));
    double m = golden_max_diff(lg, g->logits, g->n * g->vocab);
    printf("negative control (dots1 %s): max |logit - HF| = %.4f, must exceed %.4f\n", ctl[k].what, m, g->atol);
    CHECK(m > g->atol);
  }
}

/* A copy of phi3_longrope whose rope_scaling is changed: what 0 the long factors replaced by the short ones
 * (short factors at every position), 1 the short ones by the long ones (long factors at every position, as
 * transformers rotates a sequence it runs in one forward once it is longer than original_max_position_embeddings),
 * 2 attention_factor 1 (cos and sin unscaled). Returns the directory (static buffer). */
static const char *longrope_copy(int what) {
  static const char *const sub[3] = {"lr_short_everywhere", "lr_long_everywhere", "lr_attention_factor_1"};
  const char *d = write_copy(sub[what], "phi3_longrope", NULL, NULL, NULL, 0);
  char p[1300];
  snprintf(p, sizeof p, "%s/config.json", d);
  char *txt = pz_test_slurp(p, NULL);
  cJSON *r = txt ? cJSON_Parse(txt) : NULL;
  free(txt);
  cJSON *rs = r ? cJSON_GetObjectItem(r, "rope_scaling") : NULL;
  CHECK(cJSON_IsObject(rs));
  if (!cJSON_IsObject(rs)) { cJSON_Delete(r); return d; }
  if (what == 2) {
    cJSON_AddNumberToObject(rs, "attention_factor", 1.0);
  } else {
    const char *from = what ? "long_factor" : "short_factor", *to = what ? "short_factor" : "long_factor";
    cJSON_ReplaceItemInObject(rs, to, cJSON_Duplicate(cJSON_GetObjectItem(rs, from), 1));
  }
  char *s = cJSON_Print(r);
  cJSON_Delete(r);
  FILE *f = fopen(p, "w");
  if (f) { fputs(s, f); fclose(f); }
  free(s);
  return d;
}

/* Distance in f32 ulps of two finite floats of the same sign. */
static int64_t f32_ulps(float a, float b) {
  int32_t x, y;
  memcpy(&x, &a, 4);
  memcpy(&y, &b, 4);
  return x > y ? (int64_t)x - y : (int64_t)y - x;
}

/* phi3_longrope: the config reads as LongRoPE (long factors from position 6 on, attention factor from
 * max_position_embeddings 128) with its window of 64 on every layer; its inverse-frequency
 * tables are transformers' (expected.json "longrope": within one f32 ulp, torch's f32 pow may be one off; the
 * committed file: bit for bit) and so is its cos / sin factor (as f32, the value transformers multiplies by);
 * and each of its three parts is resolved: the changed copies of longrope_copy miss HF's logits. */
static void negative_controls_longrope(const golden *g) {
  pz_model_config c;
  CHECK_OK(pz_checkpoint_load_config(g->dir, &c));
  CHECK(c.rope.type == PZ_ROPE_LONGROPE && c.rotary_dim == 12 && c.rope.n_factors == 6 && c.max_position_embeddings == 128);
  CHECK(pz_config_layer_window(&c, 0) == 64 && pz_config_layer_window(&c, 1) == 64);
  CHECK(pz_rope_long_from(&c.rope) == 6 && c.rope.short_factor[1] == 1.2f && c.rope.long_factor[5] == 32.f);
  CHECK(fabs(c.rope.attention_factor - sqrt(1.0 + log(128.0 / 6.0) / log(6.0))) < 1e-6);
  char p[1100];
  snprintf(p, sizeof p, "%s/expected.json", g->dir);
  char *txt = pz_test_slurp(p, NULL);
  cJSON *e = txt ? cJSON_Parse(txt) : NULL;
  free(txt);
  const cJSON *lr = cJSON_GetObjectItem(e, "longrope");
  CHECK(cJSON_IsObject(lr));
  float tab[2][6];
  pz_rope_inv_freq(&c.rope, 12, tab[0]);
  pz_rope_inv_freq_long(&c.rope, 12, tab[1]);
  int equal = 0, n = 0;
  for (int k = 0; k < 2 && lr; k++) {
    const cJSON *a = cJSON_GetObjectItem(lr, k ? "inv_freq_long" : "inv_freq_short");
    CHECK(cJSON_GetArraySize(a) == 6);
    int j = 0;
    for (const cJSON *x = a ? a->child : NULL; x && j < 6; x = x->next, j++, n++) {
      const float want = (float)x->valuedouble;
      CHECK(f32_ulps(tab[k][j], want) <= 1);
      equal += tab[k][j] == want;
    }
  }
  const cJSON *as = lr ? cJSON_GetObjectItem(lr, "attention_scaling") : NULL;
  CHECK(cJSON_IsNumber(as) && c.rope.attention_factor == (float)as->valuedouble);
  printf("phi3_longrope: %d of %d inverse frequencies bit-identical to transformers' (the rest within 1 ulp), attention "
         "factor %.9g %s\n", equal, n, (double)c.rope.attention_factor,
         as && c.rope.attention_factor == (float)as->valuedouble ? "equal" : "DIFFERS");
  cJSON_Delete(e);
  static const char *const what[3] = {"short factors at every position", "long factors at every position",
                                      "attention_factor 1"};
  static int32_t tok[MAXP][MAXS];
  static float lg[MAXP * MAXV];
  for (int k = 0; k < 3; k++) {
    CHECK_OK(golden_run_cpu(longrope_copy(k), g, 0, g->n, 2, 0, tok, lg));
    double m = golden_max_diff(lg, g->logits, g->n * g->vocab);
    printf("negative control (phi3_longrope, %s): max |logit - HF| = %.4f, must exceed %.4f\n", what[k], m, g->atol);
    CHECK(m > g->atol);
  }
}

/* The sliding-window goldens (window 8): the decode graph (TP 2, KV cache of 40 positions) gives the sliding layers'
 * attention window 8 and the others 0; the checkpoint run with full attention (the window removed from config.json)
 * or with a window of 7 or 9 misses HF's logits, so the tolerance resolves which positions the window keeps. */
static void negative_controls_sw(const golden *g, const char *model) {
  const bool qwen = !strcmp(model, "qwen2_sw"), lt = !strcmp(model, "mistral_lt");
  pz_model_config c;
  CHECK_OK(pz_checkpoint_load_config(g->dir, &c));
  CHECK(c.sliding_window == 8 && c.max_position_embeddings == 128);
  pz_build_opts o = PZ_BUILD_OPTS_INIT;
  o.tp = 2;
  o.max_ctx = 40;
  pz_graph *gr = NULL;
  CHECK_OK(pz_build_decode_graph(&c, &o, &gr));
  int n_attn = 0;
  for (int i = 0; gr && i < gr->n_nodes; i++) {
    const pz_node *n = &gr->nodes[i];
    if (n->op != PZ_OP_GQA_ATTN) continue;
    n_attn++;
    /* qwen2_sw: max_window_layers 1; mistral_lt: layer_types [sliding, full, sliding] */
    CHECK(n->p.gqa.window == ((qwen && n->layer == 0) || (lt && n->layer == 1) ? 0 : 8));
  }
  CHECK(n_attn == (int)c.num_hidden_layers);
  pz_graph_free(gr);
  static int32_t tok[MAXP][MAXS];
  static float lg[MAXP * MAXV];
  const struct { const char *sub, *what, *from, *to; } ctl[] = {
      /* mistral_lt: its full layer sliding too (MistralModel's placement, layer_types ignored) */
      {lt ? "sw_all" : "sw_full", lt ? "every layer sliding" : "full attention",
       lt ? "\"full_attention\"" : qwen ? "\"use_sliding_window\": true" : "\"sliding_window\": 8",
       lt ? "\"sliding_attention\"" : qwen ? "\"use_sliding_window\": false" : "\"sliding_window\": null"},
      {"sw_7", "window 7", "\"sliding_window\": 8", "\"sliding_window\": 7"},
      {"sw_9", "window 9", "\"sliding_window\": 8", "\"sliding_window\": 9"},
  };
  for (int k = 0; k < 3; k++) {
    char sub[64];
    snprintf(sub, sizeof sub, "%s_%s", model, ctl[k].sub);
    const char *d = write_copy(sub, model, ctl[k].from, ctl[k].to, NULL, 0);
    CHECK_OK(golden_run_cpu(d, g, 0, g->n, 2, 0, tok, lg));
    double m = golden_max_diff(lg, g->logits, g->n * g->vocab);
    printf("negative control (%s run with %s): max |logit - HF| = %.4f, must exceed %.4f\n", model, ctl[k].what, m, g->atol);
    CHECK(m > g->atol);
  }
}

int main(void) {
  if (!mkdtemp(tmpdir)) { perror("mkdtemp"); return 1; }
  setenv("PREZERO_PROGRESS", "0", 1);
  const char *env = getenv("PZ_GOLDEN_DIR");
  if (env) snprintf(root, sizeof root, "%s", env);
  else PZ_TEST_PATH(root, "data/golden");
  /* Loader: fused rows, sharded and replicated kv heads, the qkv bias. */
  check_rows("llama", 1);
  check_rows("llama", 2);
  check_rows("llama", 4);
  check_rows("qwen2", 2);
  check_rows("qwen2_tied", 2);
  check_rows("qwen2_tied", 4);
  check_rows("qwen3", 4);
  check_rows("phi3", 1);
  check_rows("phi3", 2);
  check_rows("phi3", 4);
  check_rows("dots1", 4);
  test_bad_checkpoints();

  /* mistral_nemo: model_type mistral with head_dim given != hidden_size / heads (Mistral-Nemo);
   * llama32_tied: Llama 3.2's tied embeddings with llama3 RoPE scaling; glm4_moe: GLM-4.5's partial RoPE,
   * q/k/v biases and q/k norms with DeepSeek-V3's routed + shared experts; phi3: Phi-3 / Phi-4's fused
   * qkv_proj and gate_up_proj; phi3_partial: with Phi-4-mini's partial RoPE (0.75), tied embeddings and a
   * sliding window below max_position_embeddings; dots1: dots.llm1's q/k norms with DeepSeek-V3's grouped routing
   * (4 groups, 2 chosen), two shared experts' width and a sliding layer whose window covers the sequences;
   * phi3_longrope: Phi-3's LongRoPE (partial RoPE, short factors below position 6 and long ones from it,
   * attention factor on cos / sin), every prompt crossing position 6; mistral_sw / qwen2_sw: sliding windows of 8
   * that the sequences outgrow (every layer / layers 1-2); mistral_lt: model_type mistral with layer_types, which
   * transformers reads as ministral (layers 0 and 2 sliding, layer 1 full). */
  static const char *models[] = {"llama", "qwen2", "qwen2_tied", "qwen3", "qwen3_moe", "mixtral", "qwen3_yarn",
                                 "mistral_nemo", "llama32_tied", "glm4_moe", "phi3", "phi3_partial", "dots1",
                                 "phi3_longrope", "mistral_sw", "qwen2_sw", "mistral_lt"};
  static golden g;
  for (int i = 0; i < (int)(sizeof models / sizeof models[0]); i++) {
    char d[700];
    snprintf(d, sizeof d, "%s/%s", root, models[i]);
    if (!load_golden(d, &g)) { pz_test_failures++; continue; }
    check_decode(&g, models[i]);
    check_cli(&g, models[i]);
    if (!strcmp(models[i], "llama")) negative_control(&g);
    if (!strcmp(models[i], "mixtral")) check_mixtral_fused(&g);
    if (!strcmp(models[i], "glm4_moe")) negative_control_glm(&g);
    if (!strcmp(models[i], "phi3") || !strcmp(models[i], "phi3_partial")) negative_controls_phi3(&g, models[i]);
    if (!strcmp(models[i], "phi3_longrope")) negative_controls_longrope(&g);
    if (!strcmp(models[i], "dots1")) negative_controls_dots1(&g);
    if (strstr(models[i], "_sw") || !strcmp(models[i], "mistral_lt")) negative_controls_sw(&g, models[i]);
  }
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
  TEST_DONE();
}
