/* Checkpoint directories written by this test from hash-filled weights, in the published
 * Hugging Face layout (q_a_proj / kv_a_proj_with_mqa separate, kv_b_proj whole, one tensor per
 * expert, "model." prefix): loading them gives a decode bit-identical to the hash-filled run
 * (TP 1 and 2, V3 and V2-Lite layouts), as one file, as an index with shards, with the experts
 * fused as transformers >= 5 saves them, with tied embeddings, as F32 (misaligned), and FP8
 * with block scales equals the bf16 checkpoint of the dequantised values computed here. Bad
 * checkpoints give one-line errors through the library and the CLI ($PZ_CLI); index shard names
 * outside the directory and an oversized index are refused. */
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "backend/cpu/cpu_backend.h"
#include "core/dtype.h"
#include "hf_export_test.h"
#include "model/builder.h"
#include "model/checkpoint.h"
#include "model/safetensors.h"
#include "pz_test.h"

static char dir[] = "/tmp/pz_test_ck_XXXXXX";
enum { SEED = 77, M = 2, STEPS = 5 };

/* V3 layout: q LoRA, noaux_tc with groups, shared expert, a dense first layer, YaRN. */
static const char *cfg_v3 =
    "{\"model_type\":\"deepseek_v3\",\"hidden_size\":64,\"num_hidden_layers\":3,\"num_attention_heads\":4,"
    "\"q_lora_rank\":32,\"kv_lora_rank\":32,\"qk_nope_head_dim\":16,\"qk_rope_head_dim\":8,\"v_head_dim\":16,"
    "\"n_routed_experts\":8,\"n_shared_experts\":1,\"num_experts_per_tok\":2,\"moe_intermediate_size\":32,"
    "\"intermediate_size\":96,\"first_k_dense_replace\":1,\"n_group\":2,\"topk_group\":1,\"topk_method\":\"noaux_tc\","
    "\"scoring_func\":\"sigmoid\",\"norm_topk_prob\":true,\"routed_scaling_factor\":2.5,\"vocab_size\":256,"
    "\"max_position_embeddings\":128,\"rms_norm_eps\":1e-6,\"rope_theta\":10000,"
    "\"rope_scaling\":{\"type\":\"yarn\",\"factor\":4,\"original_max_position_embeddings\":32,\"mscale\":1,"
    "\"mscale_all_dim\":0.8}%s}";
/* V2-Lite layout: q_proj, softmax greedy, two shared experts. */
static const char *cfg_v2 =
    "{\"model_type\":\"deepseek_v2\",\"hidden_size\":64,\"num_hidden_layers\":2,\"num_attention_heads\":4,"
    "\"q_lora_rank\":null,\"kv_lora_rank\":32,\"qk_nope_head_dim\":16,\"qk_rope_head_dim\":8,\"v_head_dim\":16,"
    "\"n_routed_experts\":8,\"n_shared_experts\":2,\"num_experts_per_tok\":2,\"moe_intermediate_size\":24,"
    "\"intermediate_size\":96,\"first_k_dense_replace\":1,\"topk_method\":\"greedy\",\"vocab_size\":256,"
    "\"max_position_embeddings\":128%s}";

/* ------------------------------------------------------------------ helpers */

static void path2(char *buf, size_t cap, const char *a, const char *b) { snprintf(buf, cap, "%s/%s/%s", dir, a, b); }

static void mk(const char *sub) {
  char p[300];
  snprintf(p, sizeof p, "%s/%s", dir, sub);
  if (mkdir(p, 0755) != 0) { perror(p); exit(1); }
}

static void write_text(const char *sub, const char *name, const char *text) {
  char p[300];
  path2(p, sizeof p, sub, name);
  FILE *f = fopen(p, "w");
  if (!f) { perror(p); exit(1); }
  fputs(text, f);
  fclose(f);
}

static void write_config(const char *sub, const char *tmpl, const char *extra) {
  char buf[4096];
  snprintf(buf, sizeof buf, tmpl, extra ? extra : "");
  write_text(sub, "config.json", buf);
}

/* The hash-filled weights of a TP-1 graph of config file `cfg_path` (seed SEED), exported in
 * the published layout. */
static void export_hf(const char *cfg_path, ents *out) {
  pz_model_config mc;
  CHECK_OK(pz_config_load(cfg_path, &mc));
  pz_test_export_hf(&mc, SEED, out);
}

static const ent *find_e(const ents *s, const char *name) {
  for (int i = 0; i < s->n; i++)
    if (!strcmp(s->e[i].name, name)) return &s->e[i];
  return NULL;
}

/* The transformers >= 5 layout of the routed experts: per layer gate_up_proj [E, 2I, H] (each
 * expert's gate rows, then its up rows) and down_proj [E, H, I]; everything else as in `in`. */
static void fuse_experts(const ents *in, ents *out) {
  out->n = 0;
  for (int i = 0; i < in->n; i++)
    if (!strstr(in->e[i].name, ".mlp.experts.")) add(out, in->e[i].name, in->e[i].dtype, in->e[i].ndim, in->e[i].shape, in->e[i].data);
  char nm[200];
  for (int L = 0; L < 64; L++) {
    snprintf(nm, sizeof nm, "model.layers.%d.mlp.experts.0.gate_proj.weight", L);
    const ent *g0 = find_e(in, nm);
    if (!g0) continue;
    int E = 0;
    for (;; E++) {
      snprintf(nm, sizeof nm, "model.layers.%d.mlp.experts.%d.gate_proj.weight", L, E);
      if (!find_e(in, nm)) break;
    }
    const int64_t I = g0->shape[0], H = g0->shape[1];
    const size_t blk = (size_t)(I * H) * sizeof(pz_bf16);
    snprintf(nm, sizeof nm, "model.layers.%d.mlp.experts.gate_up_proj", L);
    ent *gu = add(out, nm, PZ_ST_BF16, 3, (int64_t[]){E, 2 * I, H}, NULL);
    snprintf(nm, sizeof nm, "model.layers.%d.mlp.experts.down_proj", L);
    ent *dn = add(out, nm, PZ_ST_BF16, 3, (int64_t[]){E, H, I}, NULL);
    for (int e = 0; e < E; e++) {
      snprintf(nm, sizeof nm, "model.layers.%d.mlp.experts.%d.gate_proj.weight", L, e);
      memcpy((char *)gu->data + 2 * (size_t)e * blk, find_e(in, nm)->data, blk);
      snprintf(nm, sizeof nm, "model.layers.%d.mlp.experts.%d.up_proj.weight", L, e);
      memcpy((char *)gu->data + (2 * (size_t)e + 1) * blk, find_e(in, nm)->data, blk);
      snprintf(nm, sizeof nm, "model.layers.%d.mlp.experts.%d.down_proj.weight", L, e);
      memcpy((char *)dn->data + (size_t)e * blk, find_e(in, nm)->data, blk);
    }
  }
}

/* Puts an unused odd-sized U8 tensor first, so every tensor after it lands at an odd offset in
 * the file: the loader must not make misaligned loads (run under UBSan to see it). */
static void prepend_pad(ents *s) {
  memmove(&s->e[1], &s->e[0], sizeof s->e[0] * (size_t)s->n);
  s->n++;
  ent *e = &s->e[0];
  snprintf(e->name, sizeof e->name, "a.unused.pad");
  e->dtype = PZ_ST_U8;
  e->ndim = 1;
  e->shape[0] = 3;
  e->nbytes = 3;
  e->data = calloc(1, 3);
}

/* Writes entries [lo, hi) of s to sub/file. */
static void write_st(const char *sub, const char *file, const ents *s, int lo, int hi) {
  pz_st_write_entry w[600]; /* an ents' capacity (hf_export_test.h) */
  for (int i = lo; i < hi; i++) {
    const ent *e = &s->e[i];
    w[i - lo] = (pz_st_write_entry){.name = e->name, .dtype = e->dtype, .ndim = e->ndim, .data = e->data};
    for (int d = 0; d < e->ndim; d++) w[i - lo].shape[d] = e->shape[d];
  }
  char p[300];
  path2(p, sizeof p, sub, file);
  CHECK_OK(pz_st_write(p, hi - lo, w));
}

/* Three shards plus an index; entries [dup, dup+1) also go into the last shard when dup >= 0. */
static void write_sharded(const char *sub, const ents *s, int dup) {
  int cut[4] = {0, s->n / 3, 2 * s->n / 3, s->n};
  char fn[64], idx[65536];
  size_t o = (size_t)snprintf(idx, sizeof idx, "{\"metadata\":{\"total_size\":0},\"weight_map\":{");
  ents extra = {.n = 0};
  for (int k = 0; k < 3; k++) {
    snprintf(fn, sizeof fn, "model-%05d-of-00003.safetensors", k + 1);
    if (k == 2 && dup >= 0) {
      /* last shard: its own range plus a copy of entry `dup` */
      for (int i = cut[2]; i < cut[3]; i++) extra.e[extra.n++] = s->e[i];
      extra.e[extra.n++] = s->e[dup];
      write_st(sub, fn, &extra, 0, extra.n);
    } else {
      write_st(sub, fn, s, cut[k], cut[k + 1]);
    }
    for (int i = cut[k]; i < cut[k + 1]; i++)
      o += (size_t)snprintf(idx + o, sizeof idx - o, "%s\"%s\":\"%s\"", o > 60 ? "," : "", s->e[i].name, fn);
  }
  snprintf(idx + o, sizeof idx - o, "}}");
  write_text(sub, "model.safetensors.index.json", idx);
}

/* Copies s into out without the tensor `name`. */
static void copy_without(const ents *s, ents *out, const char *name);

/* Drops `"name":"<shard>"` (and a comma) from sub's index: the shard still holds the tensor. */
static void drop_from_index(const char *sub, const char *name) {
  char p[300], idx[65536], key[300];
  path2(p, sizeof p, sub, "model.safetensors.index.json");
  FILE *f = fopen(p, "r");
  size_t n = f ? fread(idx, 1, sizeof idx - 1, f) : 0;
  if (f) fclose(f);
  idx[n] = 0;
  snprintf(key, sizeof key, "\"%s\":\"", name);
  char *k = strstr(idx, key), *e = k ? strchr(k + strlen(key), '"') : NULL;
  CHECK(k && e);
  if (!k || !e) return;
  e++;
  if (*e == ',') e++;
  else if (k > idx && k[-1] == ',') k--;
  memmove(k, e, strlen(e) + 1);
  write_text(sub, "model.safetensors.index.json", idx);
}

/* Greedy decode of M sequences for STEPS steps from context 0: tokens [STEPS*M], last logits [M*V]. */
static pz_status decode(const char *model, const char *model_dir, int tp, int32_t *toks, float *logits) {
  pz_engine_config ec = PZ_ENGINE_CONFIG_INIT;
  ec.model = model;
  ec.model_dir = model_dir;
  ec.tp = tp;
  ec.max_batch = M;
  ec.context = 0;
  ec.max_steps = STEPS;
  ec.seed = SEED;
  ec.prezero = 0;
  ec.threads = 1;
  pz_engine *e = NULL;
  PZ_CHECK(pz_engine_create(&ec, &e));
  int32_t in[M] = {5, 200}, nx[M];
  pz_status st = PZ_OK;
  for (int s = 0; s < STEPS && st == PZ_OK; s++) {
    st = pz_engine_step(e, M, in, nx);
    memcpy(toks + s * M, nx, sizeof nx);
    memcpy(in, nx, sizeof nx);
  }
  if (st == PZ_OK) st = pz_engine_logits(e, M, logits);
  pz_engine_destroy(e);
  return st;
}

/* Checkpoint in sub must decode exactly like reference tokens/logits at TP tp. */
static void same_decode(const char *sub, int tp, const int32_t *rt, const float *rl, int64_t V) {
  char p[300];
  snprintf(p, sizeof p, "%s/%s", dir, sub);
  int32_t t[STEPS * M];
  float *l = malloc(sizeof(float) * (size_t)(M * V));
  pz_status st = decode(NULL, p, tp, t, l);
  int ok = st == PZ_OK && !memcmp(t, rt, sizeof t) && !memcmp(l, rl, sizeof(float) * (size_t)(M * V));
  if (!ok) {
    fprintf(stderr, "FAIL: %s at TP %d: %s (%s); tokens %s, logits %s\n", sub, tp, pz_status_string(st), pz_last_error(),
            memcmp(t, rt, sizeof t) ? "differ" : "equal", memcmp(l, rl, sizeof(float) * (size_t)(M * V)) ? "differ" : "equal");
    pz_test_failures++;
  }
  free(l);
}

/* ------------------------------------------------------------------ FP8 (reference quantiser) */

static double e4m3_val(unsigned b) {
  unsigned s = b >> 7, e = (b >> 3) & 15, m = b & 7;
  double v = e ? (1.0 + m / 8.0) * ldexp(1.0, (int)e - 7) : (m / 8.0) * ldexp(1.0, -6);
  return s ? -v : v;
}

/* Nearest finite E4M3 byte (brute force over the 254 finite codes). */
static uint8_t e4m3_of(double x) {
  unsigned best = 0;
  for (unsigned b = 0; b < 256; b++) {
    if ((b & 0x7f) == 0x7f) continue;
    if (fabs(e4m3_val(b) - x) < fabs(e4m3_val(best) - x)) best = b;
  }
  return (uint8_t)best;
}

/* Replaces every 2-D *_proj.weight (not lm_head / embed / router) of s by FP8 + F32 scale_inv in
 * blocks of bs x bs, and the same tensor of `deq` (a copy of s) by the bf16 of the dequantised
 * value computed here. */
static void quantise(ents *s, ents *deq, int bs) {
  int n0 = s->n;
  for (int i = 0; i < n0; i++) {
    ent *e = &s->e[i];
    size_t len = strlen(e->name);
    if (e->ndim != 2 || len < 12 || strcmp(e->name + len - 12, "_proj.weight")) continue;
    const int64_t R = e->shape[0], C = e->shape[1], SR = (R + bs - 1) / bs, SC = (C + bs - 1) / bs;
    const pz_bf16 *w = e->data;
    uint8_t *q = malloc((size_t)(R * C));
    float *sc = malloc(sizeof(float) * (size_t)(SR * SC));
    pz_bf16 *dq = deq->e[i].data;
    for (int64_t br = 0; br < SR; br++)
      for (int64_t bc = 0; bc < SC; bc++) {
        double mx = 0;
        for (int64_t r = br * bs; r < R && r < (br + 1) * bs; r++)
          for (int64_t c = bc * bs; c < C && c < (bc + 1) * bs; c++) mx = fmax(mx, fabs(pz_bf16_to_f32(w[r * C + c])));
        float s_inv = mx > 0 ? (float)(mx / 448.0) : 1.0f;
        sc[br * SC + bc] = s_inv;
        for (int64_t r = br * bs; r < R && r < (br + 1) * bs; r++)
          for (int64_t c = bc * bs; c < C && c < (bc + 1) * bs; c++) {
            q[r * C + c] = e4m3_of(pz_bf16_to_f32(w[r * C + c]) / s_inv);
            dq[r * C + c] = pz_f32_to_bf16((float)(e4m3_val(q[r * C + c]) * (double)s_inv));
          }
      }
    free(e->data);
    e->data = q;
    e->dtype = PZ_ST_F8_E4M3;
    e->nbytes = (size_t)(R * C);
    char sn[256];
    snprintf(sn, sizeof sn, "%s_scale_inv", e->name);
    add(s, sn, PZ_ST_F32, 2, (int64_t[]){SR, SC}, sc);
    free(sc);
  }
}

static void copy_ents(const ents *a, ents *b);
static void copy_without(const ents *s, ents *out, const char *name) {
  copy_ents(s, out);
  for (int i = 0; i < out->n; i++)
    if (!strcmp(out->e[i].name, name)) { free(out->e[i].data); out->e[i] = out->e[--out->n]; }
}

static void copy_ents(const ents *a, ents *b) {
  b->n = 0;
  for (int i = 0; i < a->n; i++) add(b, a->e[i].name, a->e[i].dtype, a->e[i].ndim, a->e[i].shape, a->e[i].data);
}

/* A BF16 entry stored as F32 with the same values (exact: every bf16 is an f32). */
static void ent_to_f32(ent *e) {
  const size_t n = e->nbytes / 2;
  float *v = malloc(sizeof(float) * n);
  for (size_t j = 0; j < n; j++) v[j] = pz_bf16_to_f32(((pz_bf16 *)e->data)[j]);
  free(e->data);
  e->data = v;
  e->dtype = PZ_ST_F32;
  e->nbytes = n * 4;
}

/* ------------------------------------------------------------------ errors */

static int count_nl(const char *s) {
  int n = 0;
  for (; *s; s++) n += *s == '\n';
  return n;
}

/* The checkpoint in sub must fail with status want and a one-line message containing needle,
 * through the library and through the CLI (`run` with the extra flags cli_flags, e.g. "--device cpu"). */
static void bad_with(const char *sub, pz_status want, const char *needle, const char *cli_flags) {
  char p[300];
  snprintf(p, sizeof p, "%s/%s", dir, sub);
  int32_t t[STEPS * M];
  float l[M * 256];
  pz_status st = decode(NULL, p, 1, t, l);
  const char *msg = pz_last_error();
  if (st != want || !strstr(msg, needle) || strchr(msg, '\n')) {
    fprintf(stderr, "FAIL: %s -> %s [%s], want %s with '%s'\n", sub, pz_status_string(st), msg, pz_status_string(want),
            needle);
    pz_test_failures++;
  }
  const char *cli = getenv("PZ_CLI");
  if (!cli) return;
  char cmd[1024], err[8192] = "";
  snprintf(cmd, sizeof cmd, "\"%s\" run --model %s --prompt-ids 1,2 --steps 2 %s >%s/cli.out 2>%s/cli.err", cli, p,
           cli_flags, dir, dir);
  int rc = system(cmd);
  char ep[300];
  snprintf(ep, sizeof ep, "%s/cli.err", dir);
  FILE *f = fopen(ep, "r");
  size_t n = f ? fread(err, 1, sizeof err - 1, f) : 0;
  err[n] = 0;
  if (f) fclose(f);
  int code = WIFEXITED(rc) ? WEXITSTATUS(rc) : 128;
  if (code == 0 || count_nl(err) != 1 || strncmp(err, "prezero run: ", 13) || !strstr(err, needle)) {
    fprintf(stderr, "FAIL: CLI on %s -> exit %d, stderr [%s] (want one line with '%s')\n", sub, code, err, needle);
    pz_test_failures++;
  }
}
static void bad(const char *sub, pz_status want, const char *needle) { bad_with(sub, want, needle, ""); }

static void test_errors(const char *src_cfg, const ents *good) {
  ents s = {.n = 0};
  /* Header length beyond the file: a good file whose length field is made huge. */
  mk("e_hlen");
  write_config("e_hlen", src_cfg, NULL);
  write_st("e_hlen", "model.safetensors", good, 0, good->n);
  char p[300];
  path2(p, sizeof p, "e_hlen", "model.safetensors");
  FILE *f = fopen(p, "r+b");
  unsigned char big[8] = {0, 0, 0, 0x10, 0, 0, 0, 0};
  fwrite(big, 1, 8, f);
  fclose(f);
  bad("e_hlen", PZ_ERR_IO, "runs beyond the file");

  /* Truncated header: the length field matches the bytes present, the JSON stops halfway. */
  mk("e_trunc");
  write_config("e_trunc", src_cfg, NULL);
  write_st("e_trunc", "model.safetensors", good, 0, good->n);
  path2(p, sizeof p, "e_trunc", "model.safetensors");
  f = fopen(p, "rb");
  unsigned char hdr[8];
  if (fread(hdr, 1, 8, f) != 8) exit(1);
  uint64_t hl = 0;
  for (int i = 7; i >= 0; i--) hl = (hl << 8) | hdr[i];
  char *js = malloc(hl);
  if (fread(js, 1, hl, f) != hl) exit(1);
  fclose(f);
  f = fopen(p, "wb");
  uint64_t half = hl / 2;
  for (int i = 0; i < 8; i++) fputc((int)((half >> (8 * i)) & 0xff), f);
  fwrite(js, 1, half, f);
  fclose(f);
  free(js);
  bad("e_trunc", PZ_ERR_IO, "is not a JSON object");

  /* Wrong dtype: one weight stored as I16 (2 bytes like BF16; F16 is loadable). */
  mk("e_dtype");
  write_config("e_dtype", src_cfg, NULL);
  copy_ents(good, &s);
  for (int i = 0; i < s.n; i++)
    if (!strcmp(s.e[i].name, "model.layers.0.self_attn.o_proj.weight")) s.e[i].dtype = PZ_ST_I16;
  write_st("e_dtype", "model.safetensors", &s, 0, s.n);
  bad("e_dtype", PZ_ERR_DTYPE, "model.layers.0.self_attn.o_proj.weight\" has dtype I16");
  free_ents(&s);

  /* A bias the layers have no place for (o_proj's, as transformers writes when attention_bias is true),
     in a layer the graph runs: refused instead of dropped (the tokens were silently wrong); the same
     bias of a layer past the ones run (--layers) is not read and not refused. */
  mk("e_bias");
  write_config("e_bias", src_cfg, NULL);
  copy_ents(good, &s);
  {
    const int64_t hsz = find_e(&s, "model.layers.0.self_attn.o_proj.weight")->shape[0];
    float *zero = calloc((size_t)hsz, sizeof(float));
    add(&s, "model.layers.0.self_attn.o_proj.bias", PZ_ST_F32, 1, &hsz, zero);
    free(zero);
  }
  write_st("e_bias", "model.safetensors", &s, 0, s.n);
  bad("e_bias", PZ_ERR_UNSUPPORTED, "tensor \"model.layers.0.self_attn.o_proj.bias\" is a bias that prezero's");
  free_ents(&s);

  /* Missing tensor: one expert's up_proj left out. */
  mk("e_missing");
  write_config("e_missing", src_cfg, NULL);
  copy_ents(good, &s);
  for (int i = 0; i < s.n; i++)
    if (!strcmp(s.e[i].name, "model.layers.1.mlp.experts.3.up_proj.weight")) {
      free(s.e[i].data);
      s.e[i] = s.e[--s.n];
    }
  write_st("e_missing", "model.safetensors", &s, 0, s.n);
  bad("e_missing", PZ_ERR_NOT_FOUND, "model.layers.1.mlp.experts.3.up_proj.weight\" (for layers.1.mlp.experts.up_proj.weight) is missing");
  free_ents(&s);

  /* Shape mismatch: kv_b_proj stored transposed. */
  mk("e_shape");
  write_config("e_shape", src_cfg, NULL);
  copy_ents(good, &s);
  for (int i = 0; i < s.n; i++)
    if (!strcmp(s.e[i].name, "model.layers.0.self_attn.kv_b_proj.weight")) {
      int64_t a = s.e[i].shape[0];
      s.e[i].shape[0] = s.e[i].shape[1];
      s.e[i].shape[1] = a;
    }
  write_st("e_shape", "model.safetensors", &s, 0, s.n);
  bad("e_shape", PZ_ERR_SHAPE, "kv_b_proj.weight\" has shape [32, 128], config.json implies [128, 32]");
  free_ents(&s);

  /* Duplicate name: one tensor in two shards. */
  mk("e_dup");
  write_config("e_dup", src_cfg, NULL);
  write_sharded("e_dup", good, 1);
  bad("e_dup", PZ_ERR_IO, "appears in both");

  /* An index naming a shard that lacks the tensor. */
  mk("e_index");
  write_config("e_index", src_cfg, NULL);
  write_sharded("e_index", good, -1);
  char ip[300];
  path2(ip, sizeof ip, "e_index", "model.safetensors.index.json");
  f = fopen(ip, "w");
  fprintf(f, "{\"weight_map\":{\"model.norm.weight\":\"model-00001-of-00003.safetensors\",\"%s\":"
          "\"model-00001-of-00003.safetensors\"}}", good->e[good->n - 1].name);
  fclose(f);
  bad("e_index", PZ_ERR_IO, "which has no such tensor");

  /* lm_head.weight in neither the index nor its shards (embeddings not tied): refused naming it,
   * not left unfilled (transformers would initialise it at random, with a warning). */
  mk("e_nolm");
  write_config("e_nolm", src_cfg, NULL);
  copy_without(good, &s, "lm_head.weight");
  write_sharded("e_nolm", &s, -1);
  bad("e_nolm", PZ_ERR_NOT_FOUND, "tensor \"lm_head.weight\" (for lm_head.weight) is missing; the checkpoint does not "
      "match its config.json");
  free_ents(&s);

  /* NaN weights: every token came out 0 with exit 0; the (CPU) step now refuses non-finite logits. */
  mk("e_nan");
  write_config("e_nan", src_cfg, NULL);
  copy_ents(good, &s);
  for (int i = 0; i < s.n; i++)
    if (!strcmp(s.e[i].name, "model.norm.weight"))
      for (size_t j = 0; j < s.e[i].nbytes / 2; j++) ((pz_bf16 *)s.e[i].data)[j] = 0x7fc0; /* bf16 NaN */
  write_st("e_nan", "model.safetensors", &s, 0, s.n);
  bad_with("e_nan", PZ_ERR_IO, "logits of row 0 are not finite (NaN at token 0)", "--device cpu");
  free_ents(&s);

  /* No config.json. */
  mk("e_noconfig");
  bad("e_noconfig", PZ_ERR_IO, "no config.json there");

  /* No weights at all. */
  mk("e_none");
  write_config("e_none", src_cfg, NULL);
  bad("e_none", PZ_ERR_IO, "neither model.safetensors nor model.safetensors.index.json");
}

/* ------------------------------------------------------------------ main */

static void run_layout(const char *tag, const char *tmpl, int with_errors) {
  char sub[64], cfg_path[300];
  snprintf(sub, sizeof sub, "%s_src", tag);
  mk(sub);
  write_config(sub, tmpl, NULL);
  path2(cfg_path, sizeof cfg_path, sub, "config.json");
  static ents hf, deq;
  hf.n = 0;
  export_hf(cfg_path, &hf);
  const int64_t V = 256;
  int32_t rt[2][STEPS * M];
  float *rl[2] = {malloc(sizeof(float) * M * V), malloc(sizeof(float) * M * V)};
  for (int k = 0; k < 2; k++) CHECK_OK(decode(cfg_path, NULL, k + 1, rt[k], rl[k]));

  snprintf(sub, sizeof sub, "%s_one", tag);
  mk(sub);
  write_config(sub, tmpl, NULL);
  write_st(sub, "model.safetensors", &hf, 0, hf.n);
  for (int k = 0; k < 2; k++) same_decode(sub, k + 1, rt[k], rl[k], V);

  snprintf(sub, sizeof sub, "%s_sharded", tag);
  mk(sub);
  write_config(sub, tmpl, NULL);
  write_sharded(sub, &hf, -1);
  for (int k = 0; k < 2; k++) same_decode(sub, k + 1, rt[k], rl[k], V);
  /* An index whose weight_map leaves out lm_head.weight that its shard holds: loaded from the shard,
   * as transformers does (modeling_utils reads every key of every shard the index names). */
  drop_from_index(sub, "lm_head.weight");
  same_decode(sub, 2, rt[1], rl[1], V);

  /* model.safetensors beside an index: the single file is loaded, as transformers'
   * from_pretrained does for a local directory (it checks model.safetensors first); the index
   * here is broken (its shards lack lm_head.weight), so loading it fails. */
  snprintf(sub, sizeof sub, "%s_both", tag);
  mk(sub);
  write_config(sub, tmpl, NULL);
  write_st(sub, "model.safetensors", &hf, 0, hf.n);
  {
    static ents nolm;
    copy_without(&hf, &nolm, "lm_head.weight");
    write_sharded(sub, &nolm, -1);
    free_ents(&nolm);
  }
  same_decode(sub, 2, rt[1], rl[1], V);

  /* Routed experts fused as transformers >= 5 saves them. */
  snprintf(sub, sizeof sub, "%s_fused", tag);
  mk(sub);
  write_config(sub, tmpl, NULL);
  static ents fz;
  fuse_experts(&hf, &fz);
  CHECK(fz.n < hf.n);
  write_st(sub, "model.safetensors", &fz, 0, fz.n);
  for (int k = 0; k < 2; k++) same_decode(sub, k + 1, rt[k], rl[k], V);
  /* One of a layer's two fused tensors missing: the message names it, and the other one the checkpoint holds
   * (not the per-expert name of the other layout). */
  for (int w = 0; w < 2; w++) {
    int L = 0;
    while (L < 64 && !find_e(&fz, (snprintf(sub, sizeof sub, "model.layers.%d.mlp.experts.down_proj", L), sub))) L++;
    char gone[120], held[120], want[400];
    snprintf(gone, sizeof gone, "model.layers.%d.mlp.experts.%s", L, w ? "gate_up_proj" : "down_proj");
    snprintf(held, sizeof held, "model.layers.%d.mlp.experts.%s", L, w ? "down_proj" : "gate_up_proj");
    snprintf(want, sizeof want, "it holds \"%s\" (fused experts, as transformers >= 5 saves them) but neither \"%s\" "
             "nor per-expert \"model.layers.%d.mlp.experts.0.%s.weight\"", held, gone, L, w ? "gate_proj" : "down_proj");
    static ents part;
    copy_without(&fz, &part, gone);
    snprintf(sub, sizeof sub, "%s_fused_no%d", tag, w);
    mk(sub);
    write_config(sub, tmpl, NULL);
    write_st(sub, "model.safetensors", &part, 0, part.n);
    bad(sub, PZ_ERR_NOT_FOUND, want);
    free_ents(&part);
  }
  free_ents(&fz);

  /* tie_word_embeddings: no lm_head.weight, the embedding serves as the LM head; equals a
   * checkpoint that stores a copy of the embedding as lm_head.weight. */
  {
    static ents tie, cp;
    copy_ents(&hf, &tie);
    copy_ents(&hf, &cp);
    const ent *emb = find_e(&hf, "model.embed_tokens.weight");
    for (int i = 0; i < tie.n; i++)
      if (!strcmp(tie.e[i].name, "lm_head.weight")) { free(tie.e[i].data); tie.e[i] = tie.e[--tie.n]; }
    for (int i = 0; i < cp.n; i++)
      if (!strcmp(cp.e[i].name, "lm_head.weight")) memcpy(cp.e[i].data, emb->data, emb->nbytes);
    char dt[64], dc[64], p[300];
    snprintf(dt, sizeof dt, "%s_tied", tag);
    snprintf(dc, sizeof dc, "%s_tiedcopy", tag);
    mk(dt);
    mk(dc);
    write_config(dt, tmpl, ",\"tie_word_embeddings\":true");
    write_config(dc, tmpl, NULL);
    write_st(dt, "model.safetensors", &tie, 0, tie.n);
    write_st(dc, "model.safetensors", &cp, 0, cp.n);
    int32_t t[STEPS * M];
    float *l = malloc(sizeof(float) * M * V);
    snprintf(p, sizeof p, "%s/%s", dir, dc);
    CHECK_OK(decode(NULL, p, 2, t, l));
    same_decode(dt, 2, t, l, V);
    CHECK(memcmp(l, rl[1], sizeof(float) * M * V) != 0);
    /* Tied, with lm_head.weight stored as F32 holding the embedding's (BF16) values: one model either
     * way, loaded; one value off by 2^-20 relative (not the embedding any more) is refused. */
    char df[64];
    snprintf(df, sizeof df, "%s_tiedf32", tag);
    mk(df);
    write_config(df, tmpl, ",\"tie_word_embeddings\":true");
    static ents hf32;
    copy_ents(&cp, &hf32);
    for (int i = 0; i < hf32.n; i++)
      if (!strcmp(hf32.e[i].name, "lm_head.weight")) ent_to_f32(&hf32.e[i]);
    write_st(df, "model.safetensors", &hf32, 0, hf32.n);
    same_decode(df, 2, t, l, V);
    for (int i = 0; i < hf32.n; i++)
      if (!strcmp(hf32.e[i].name, "lm_head.weight")) ((float *)hf32.e[i].data)[7] *= 1.0f + 0x1p-20f;
    write_st(df, "model.safetensors", &hf32, 0, hf32.n);
    bad(df, PZ_ERR_CONFIG, "\"lm_head.weight\" differs from \"model.embed_tokens.weight\"");
    free_ents(&hf32);
    /* Tied, with lm_head.weight stored and the embedding not (safetensors.torch.save_model keeps "lm_head.weight",
     * the first of the two names sharing memory; transformers 5 then ties the embedding to it): the same model.
     * Untied, the embedding is missing. */
    char dh[64];
    snprintf(dh, sizeof dh, "%s_tiedhead", tag);
    mk(dh);
    write_config(dh, tmpl, ",\"tie_word_embeddings\":true");
    static ents headonly;
    copy_without(&cp, &headonly, "model.embed_tokens.weight");
    CHECK(headonly.n == cp.n - 1);
    write_st(dh, "model.safetensors", &headonly, 0, headonly.n);
    same_decode(dh, 2, t, l, V);
    write_config(dh, tmpl, NULL);
    bad(dh, PZ_ERR_NOT_FOUND, "tensor \"model.embed_tokens.weight\" (for embed_tokens.weight) is missing");
    free_ents(&headonly);
    free(l);
    free_ents(&tie);
    free_ents(&cp);
  }

  /* F32 storage of the same (bf16-exact) values converts back exactly. */
  snprintf(sub, sizeof sub, "%s_f32", tag);
  mk(sub);
  write_config(sub, tmpl, NULL);
  static ents f32;
  copy_ents(&hf, &f32);
  for (int i = 0; i < f32.n; i++)
    if (f32.e[i].dtype == PZ_ST_BF16) ent_to_f32(&f32.e[i]);
  prepend_pad(&f32);
  write_st(sub, "model.safetensors", &f32, 0, f32.n);
  same_decode(sub, 2, rt[1], rl[1], V);
  free_ents(&f32);

  /* FP8 (16x16 blocks, partial blocks at the edges) == bf16 checkpoint of the dequantised values. */
  static ents q8;
  copy_ents(&hf, &q8);
  copy_ents(&hf, &deq);
  quantise(&q8, &deq, 16);
  char d8[64], dref[64];
  snprintf(d8, sizeof d8, "%s_fp8", tag);
  snprintf(dref, sizeof dref, "%s_fp8ref", tag);
  mk(d8);
  mk(dref);
  write_config(d8, tmpl, ",\"quantization_config\":{\"quant_method\":\"fp8\",\"fmt\":\"e4m3\",\"weight_block_size\":[16,16]}");
  write_config(dref, tmpl, NULL);
  prepend_pad(&q8);
  write_st(d8, "model.safetensors", &q8, 0, q8.n);
  write_st(dref, "model.safetensors", &deq, 0, deq.n);
  /* The same with a UTF-8 byte-order mark before config.json: the block size is still read. */
  char d8bom[64], cbuf[4200];
  snprintf(d8bom, sizeof d8bom, "%s_fp8bom", tag);
  mk(d8bom);
  snprintf(cbuf, sizeof cbuf, "\xef\xbb\xbf%s", tmpl);
  write_config(d8bom, cbuf, ",\"quantization_config\":{\"quant_method\":\"fp8\",\"fmt\":\"e4m3\",\"weight_block_size\":[16,16]}");
  write_st(d8bom, "model.safetensors", &q8, 0, q8.n);
  for (int k = 0; k < 2; k++) {
    char p[300];
    snprintf(p, sizeof p, "%s/%s", dir, dref);
    int32_t t[STEPS * M];
    float *l = malloc(sizeof(float) * M * V);
    CHECK_OK(decode(NULL, p, k + 1, t, l));
    same_decode(d8, k + 1, t, l, V);
    if (k == 0) same_decode(d8bom, 1, t, l, V);
    /* The quantisation must have changed the model (else the comparison proves nothing). */
    CHECK(memcmp(l, rl[k], sizeof(float) * M * V) != 0);
    free(l);
  }
  /* Without the block size in config.json the loader expects 128x128 scales: a clear error. */
  char d8b[64];
  snprintf(d8b, sizeof d8b, "%s_fp8_noblock", tag);
  mk(d8b);
  write_config(d8b, tmpl, NULL);
  write_st(d8b, "model.safetensors", &q8, 0, q8.n);
  if (with_errors) bad(d8b, PZ_ERR_DTYPE, "weight_block_size");
  /* BF16 weight_scale_inv (some FP8 exports store them so; the experts kept as FP8 already read them) widen to
   * f32 exactly: the same model as F32 scales of the same values. They were refused as "must be F32 [..];
   * check quantization_config.weight_block_size", which named the wrong field. */
  if (with_errors) {
    static ents s16, s32;
    copy_ents(&q8, &s16);
    copy_ents(&q8, &s32);
    int n_sc = 0;
    for (int i = 0; i < s16.n; i++) {
      const size_t len = strlen(s16.e[i].name);
      if (len < 10 || strcmp(s16.e[i].name + len - 10, "_scale_inv")) continue;
      const size_t n = s16.e[i].nbytes / 4;
      float *f = s32.e[i].data;
      pz_bf16 *b = malloc(2 * n);
      for (size_t j = 0; j < n; j++) {
        b[j] = pz_f32_to_bf16(f[j]);
        f[j] = pz_bf16_to_f32(b[j]);
      }
      free(s16.e[i].data);
      s16.e[i].data = b;
      s16.e[i].dtype = PZ_ST_BF16;
      s16.e[i].nbytes = 2 * n;
      n_sc++;
    }
    CHECK(n_sc > 3);
    static const char *const subs[2] = {"fp8_scale_bf16", "fp8_scale_f32_of_bf16"};
    const ents *srcs[2] = {&s16, &s32};
    int32_t t[2][STEPS * M];
    float *l[2];
    for (int k = 0; k < 2; k++) {
      char p[300];
      mk(subs[k]);
      write_config(subs[k], tmpl,
                   ",\"quantization_config\":{\"quant_method\":\"fp8\",\"fmt\":\"e4m3\",\"weight_block_size\":[16,16]}");
      write_st(subs[k], "model.safetensors", srcs[k], 0, srcs[k]->n);
      snprintf(p, sizeof p, "%s/%s", dir, subs[k]);
      l[k] = malloc(sizeof(float) * M * V);
      CHECK_OK(decode(NULL, p, 1, t[k], l[k]));
    }
    CHECK(!memcmp(t[0], t[1], sizeof t[0]) && !memcmp(l[0], l[1], sizeof(float) * M * V));
    free(l[0]);
    free(l[1]);
    /* A scale of another dtype is named by its dtype, not blamed on the block size. */
    for (int i = 0; i < s16.n; i++)
      if (!strcmp(s16.e[i].name, "model.layers.0.self_attn.o_proj.weight_scale_inv")) s16.e[i].dtype = PZ_ST_I16;
    mk("fp8_scale_i16");
    write_config("fp8_scale_i16", tmpl,
                 ",\"quantization_config\":{\"quant_method\":\"fp8\",\"fmt\":\"e4m3\",\"weight_block_size\":[16,16]}");
    write_st("fp8_scale_i16", "model.safetensors", &s16, 0, s16.n);
    bad("fp8_scale_i16", PZ_ERR_DTYPE, "o_proj.weight_scale_inv\" has dtype I16; FP8 block scales must be F32, BF16 or F16");
    free_ents(&s16);
    free_ents(&s32);
  }
  /* A NaN or a huge (-1e38: 448 * it overflows f32) weight_scale_inv is refused at load; they
   * decoded to token 0 everywhere with exit 0. */
  static const struct { const char *sub; float v; const char *needle; } badsc[] = {
      {"fp8_scale_nan", NAN, "block scale [1, 0] is nan, not a finite scale"},
      {"fp8_scale_huge", -1e38f, "block scale [1, 0] is -1e+38, not a finite scale"}};
  for (int b = 0; with_errors && b < 2; b++) {
    static ents qb;
    copy_ents(&q8, &qb);
    for (int i = 0; i < qb.n; i++)
      if (!strcmp(qb.e[i].name, "model.layers.0.self_attn.o_proj.weight_scale_inv"))
        ((float *)qb.e[i].data)[qb.e[i].shape[1]] = badsc[b].v; /* block [1, 0] */
    mk(badsc[b].sub);
    write_config(badsc[b].sub, tmpl,
                 ",\"quantization_config\":{\"quant_method\":\"fp8\",\"fmt\":\"e4m3\",\"weight_block_size\":[16,16]}");
    write_st(badsc[b].sub, "model.safetensors", &qb, 0, qb.n);
    bad(badsc[b].sub, PZ_ERR_IO, badsc[b].needle);
    free_ents(&qb);
  }

  /* The CLI's prompt mode on the checkpoint equals the CLI on the hash-filled config. */
  const char *cli = getenv("PZ_CLI");
  if (cli && with_errors) {
    char cmd[1200], p[300];
    snprintf(p, sizeof p, "%s/%s_one", dir, tag);
    snprintf(cmd, sizeof cmd, "\"%s\" run --model %s --prompt-ids '3,4,5;6' --steps 3 --logits %s/l1 | grep '^seq' > %s/o1",
             cli, p, dir, dir);
    CHECK(system(cmd) == 0);
    snprintf(cmd, sizeof cmd, "\"%s\" run --config %s --seed %d --device cpu --prompt-ids '3,4,5;6' --steps 3 --logits %s/l2 | "
             "grep '^seq' > %s/o2", cli, cfg_path, SEED, dir, dir);
    CHECK(system(cmd) == 0);
    snprintf(cmd, sizeof cmd, "cmp -s %s/o1 %s/o2 && cmp -s %s/l1 %s/l2 && test $(wc -l < %s/o1) -eq 2 && "
             "test $(wc -c < %s/l1) -eq %d", dir, dir, dir, dir, dir, dir, 2 * 256 * 4);
    CHECK(system(cmd) == 0);
    /* --model with --config, and a prompt token beyond the vocab: one-line usage errors. */
    snprintf(cmd, sizeof cmd, "\"%s\" run --model %s --config tiny 2>%s/e1; test $? -eq 2 && test $(wc -l < %s/e1) -eq 1 && "
             "grep -q 'use one of them' %s/e1", cli, p, dir, dir, dir);
    CHECK(system(cmd) == 0);
    snprintf(cmd, sizeof cmd, "\"%s\" run --model %s --prompt-ids 1,256 2>%s/e2; test $? -eq 2 && test $(wc -l < %s/e2) -eq 1 && "
             "grep -q 'token 256 is out of range; use ids 0..255' %s/e2", cli, p, dir, dir, dir);
    CHECK(system(cmd) == 0);
  }
  if (with_errors) test_errors(tmpl, &hf);
  free_ents(&q8);
  free_ents(&deq);
  free_ents(&hf);
  free(rl[0]);
  free(rl[1]);
}

/* ------------------------------------------------------------------ index shard names */

/* pz_checkpoint_open on dir/ix with the index text idx: PZ_ERR_IO naming `name` as outside the
 * directory, in one line. */
static void index_escapes(const char *idx, const char *name) {
  char p[300], want[400];
  write_text("ix", "model.safetensors.index.json", idx);
  snprintf(p, sizeof p, "%s/ix", dir);
  snprintf(want, sizeof want, "the index names shard \"%s\", outside the checkpoint directory (an absolute path or a "
           "\"..\" component); name shards relative to the directory", name);
  pz_checkpoint *ck = (pz_checkpoint *)1;
  pz_status st = pz_checkpoint_open(p, &ck);
  if (st != PZ_ERR_IO || ck || !strstr(pz_last_error(), want) || strchr(pz_last_error(), '\n')) {
    fprintf(stderr, "FAIL: index %s -> %s [%s], want PZ_ERR_IO with '%s'\n", idx, pz_status_string(st), pz_last_error(),
            want);
    pz_test_failures++;
  }
  if (st == PZ_OK && ck != (pz_checkpoint *)1) pz_checkpoint_close(ck);
}

/* Shard names that leave the checkpoint directory (absolute, any ".." component) are refused
 * even when the file they name exists and holds the tensor; names inside it (also "./x",
 * "sub/x" and a ".." inside a file name) open. Text after the JSON object is refused (whitespace
 * is fine). An index over 256 MiB is refused unread. */
static void test_index_paths(void) {
  float v[2] = {1, 2};
  pz_st_write_entry t = {"t", PZ_ST_F32, 1, {2}, v}, u = {"u", PZ_ST_F32, 1, {1}, v}, w = {"w", PZ_ST_F32, 1, {1}, v};
  char p[300], outside[300], idx[900];
  mk("ix");
  mk("ix/sub");
  snprintf(outside, sizeof outside, "%s/outside.safetensors", dir);
  CHECK_OK(pz_st_write(outside, 1, &t));
  path2(p, sizeof p, "ix", "s.safetensors");
  CHECK_OK(pz_st_write(p, 1, &t));
  path2(p, sizeof p, "ix", "sub/s.safetensors");
  CHECK_OK(pz_st_write(p, 1, &u));
  path2(p, sizeof p, "ix", "s..safetensors");
  CHECK_OK(pz_st_write(p, 1, &w));
  const char *esc[] = {"../outside.safetensors", "./../outside.safetensors", "sub/../../outside.safetensors", "..",
                       "../", "sub/..", outside, "/etc/passwd", "//etc/passwd"};
  for (size_t i = 0; i < sizeof esc / sizeof esc[0]; i++) {
    snprintf(idx, sizeof idx, "{\"weight_map\":{\"t\":\"%s\"}}", esc[i]);
    index_escapes(idx, esc[i]);
  }
  /* The escape is refused after a good shard too. */
  index_escapes("{\"weight_map\":{\"u\":\"sub/s.safetensors\",\"t\":\"../outside.safetensors\"}}",
                "../outside.safetensors");
  write_text("ix", "model.safetensors.index.json",
             "{\"weight_map\":{\"t\":\"./s.safetensors\",\"u\":\"sub/s.safetensors\",\"w\":\"s..safetensors\"}}");
  snprintf(p, sizeof p, "%s/ix", dir);
  pz_checkpoint *ck = NULL;
  CHECK_OK(pz_checkpoint_open(p, &ck));
  CHECK(pz_checkpoint_count(ck) == 3);
  const pz_st_tensor *tw = pz_checkpoint_find(ck, "w"), *tt = pz_checkpoint_find(ck, "t");
  CHECK(tw && strstr(tw->file->path, "/ix/s..safetensors") && tt && strstr(tt->file->path, "/ix/./s.safetensors"));
  pz_checkpoint_close(ck);
  /* One shard named by several spellings ("x", "./x", ".//x") and through a symbolic link: opened once, so
   * its tensors are not taken for copies in two shards (transformers reads such an index). */
  pz_st_write_entry two[2] = {{"a", PZ_ST_F32, 1, {1}, v}, {"b", PZ_ST_F32, 1, {1}, v + 1}};
  path2(p, sizeof p, "ix", "two.safetensors");
  CHECK_OK(pz_st_write(p, 2, two));
  path2(p, sizeof p, "ix", "sub/link.safetensors");
  unlink(p);
  CHECK(symlink("../two.safetensors", p) == 0);
  static const char *const aliases[][2] = {{"two.safetensors", "./two.safetensors"},
                                           {".//two.safetensors", "two.safetensors"},
                                           {"two.safetensors", "sub/link.safetensors"},
                                           {"sub/link.safetensors", "./sub//link.safetensors"}};
  for (size_t i = 0; i < sizeof aliases / sizeof aliases[0]; i++) {
    snprintf(idx, sizeof idx, "{\"weight_map\":{\"a\":\"%s\",\"b\":\"%s\"}}", aliases[i][0], aliases[i][1]);
    write_text("ix", "model.safetensors.index.json", idx);
    snprintf(p, sizeof p, "%s/ix", dir);
    ck = NULL;
    pz_status ast = pz_checkpoint_open(p, &ck);
    const pz_st_tensor *ta = ck ? pz_checkpoint_find(ck, "a") : NULL, *tb = ck ? pz_checkpoint_find(ck, "b") : NULL;
    float fa = 0, fb = 0;
    if (ta && tb) { memcpy(&fa, ta->data, 4); memcpy(&fb, tb->data, 4); }
    if (ast != PZ_OK || pz_checkpoint_count(ck) != 2 || !ta || !tb || ta->file != tb->file || fa != 1 || fb != 2) {
      fprintf(stderr, "FAIL: index %s -> %s [%s], want one shard holding a = 1, b = 2\n", idx, pz_status_string(ast),
              ast == PZ_OK ? "" : pz_last_error());
      pz_test_failures++;
    }
    pz_checkpoint_close(ck);
  }
  /* Text after the index's JSON object is refused; trailing whitespace is not. */
  write_text("ix", "model.safetensors.index.json", "{\"weight_map\":{\"t\":\"s.safetensors\"}} {\"x\":1}");
  snprintf(p, sizeof p, "%s/ix", dir);
  ck = (pz_checkpoint *)1;
  CHECK_ST(pz_checkpoint_open(p, &ck), PZ_ERR_IO);
  CHECK(ck == NULL && strstr(pz_last_error(), "text after the JSON object; fix or regenerate the index"));
  write_text("ix", "model.safetensors.index.json", "{\"weight_map\":{\"t\":\"s.safetensors\"}}\n \t\r\n");
  ck = NULL;
  CHECK_OK(pz_checkpoint_open(p, &ck));
  if (ck) pz_checkpoint_close(ck);
  /* "__metadata__" is a string-to-string map (the safetensors format) or null; an array or a
   * non-string value is refused (it was skipped). */
  static const char *const metas[][2] = {
      {"[\"a\"]", "\"__metadata__\" is an array, but the format allows only a map of string values"},
      {"{\"format\":\"pt\",\"n\":3}", "\"__metadata__\"[\"n\"] is a number, but the format allows only a map"},
      {"\"pt\"", "\"__metadata__\" is a string, but"},
      {"{\"format\":\"pt\"}", NULL},
      {"null", NULL},
  };
  for (size_t i = 0; i < sizeof metas / sizeof metas[0]; i++) {
    char hdr[300];
    int hl = snprintf(hdr, sizeof hdr, "{\"__metadata__\":%s,\"t\":{\"dtype\":\"F32\",\"shape\":[1],"
                      "\"data_offsets\":[0,4]}}", metas[i][0]);
    path2(p, sizeof p, "ix", "meta.safetensors");
    FILE *mf = fopen(p, "wb");
    unsigned char len8[8] = {(unsigned char)hl};
    CHECK(mf && fwrite(len8, 1, 8, mf) == 8 && fwrite(hdr, 1, (size_t)hl, mf) == (size_t)hl && fwrite(v, 1, 4, mf) == 4);
    if (mf) fclose(mf);
    pz_st_file *sf = NULL;
    pz_status mst = pz_st_open(p, &sf);
    if (metas[i][1]) {
      CHECK(mst == PZ_ERR_IO && !sf && strstr(pz_last_error(), metas[i][1]) && strstr(pz_last_error(), "; "));
    } else {
      CHECK(mst == PZ_OK && sf && sf->n == 1);
    }
    pz_st_close(sf);
  }
  /* A huge index (sparse: nothing is written or read). */
  mk("ixbig");
  path2(p, sizeof p, "ixbig", "model.safetensors.index.json");
  FILE *f = fopen(p, "wb");
  CHECK(f && ftruncate(fileno(f), (off_t)(256 << 20) + 1) == 0);
  if (f) fclose(f);
  snprintf(p, sizeof p, "%s/ixbig", dir);
  ck = (pz_checkpoint *)1;
  CHECK_ST(pz_checkpoint_open(p, &ck), PZ_ERR_IO);
  CHECK(ck == NULL && strstr(pz_last_error(), "model.safetensors.index.json: larger than 256 MiB, too large for a JSON "
                                              "index or config; check the file"));
}

int main(void) {
  if (!mkdtemp(dir)) { perror("mkdtemp"); return 1; }
  setenv("PREZERO_PROGRESS", "0", 1);
  test_index_paths();
  run_layout("v3", cfg_v3, 1);
  run_layout("v2", cfg_v2, 0);
  char cmd[400];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (!pz_test_failures && system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
  TEST_DONE();
}
