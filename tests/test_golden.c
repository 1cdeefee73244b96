/* Golden test against an independent implementation: the checkpoints under tests/data/golden/
 * {deepseek_v3, deepseek_v2_lite, deepseek_v3_fp8, moonlight, deepseek_v2, deepseek_v3_int4} (written by tools/make_golden.py with Hugging Face transformers, float32, eager attention)
 * must give the same greedy tokens and last-step logits within the file's logits_atol, at TP 1,
 * 2 and 4, batched (prompts of different lengths side by side) and one prompt at a time, with the
 * prezero pass off and on, through the library and the CLI. A negative control shows the tolerance catches a RoPE detail. */
#include <cjson/cJSON.h>
#include <math.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "prezero.h"
#include "pz_test.h"
#include "golden_common.h"

static char tmpdir[] = "/tmp/pz_test_golden_XXXXXX";

static void check_model(const golden *g, const char *name) {
  static int32_t tok[MAXP][MAXS], tok1[MAXP][MAXS];
  static float lg[MAXP * MAXV], lg1[MAXP * MAXV];
  const int64_t nv = g->n * g->vocab;
  for (int tp = 1; tp <= 4; tp *= 2) {
    memset(tok, 0xff, sizeof tok);
    CHECK_OK(golden_run_cpu(g->dir, g, 0, g->n, tp, 0, tok, lg));
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
  /* The prezero pass on a real checkpoint's graph (TP 2) changes nothing, bit for bit. */
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
  snprintf(cmd, sizeof cmd, "\"%s\" run --model %s --device cpu --prompt-ids '%s' --steps %d --logits %s/cli.f32 > %s/cli.out",
           cli, g->dir, ids, g->steps, tmpdir, tmpdir);
  CHECK(system(cmd) == 0);
  snprintf(p, sizeof p, "%s/cli.out", tmpdir);
  char *out = pz_test_slurp(p, NULL);
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

/* Negative control: the V3 golden model without its YaRN rope_scaling (weights shared by links)
 * must miss the HF logits by more than the tolerance, so the tolerance does resolve RoPE. */
static void negative_control(const golden *g) {
  char p[1200], src[1200];
  snprintf(p, sizeof p, "%s/noyarn", tmpdir);
  mkdir(p, 0755);
  snprintf(src, sizeof src, "%s/config.json", g->dir);
  char *txt = pz_test_slurp(src, NULL);
  cJSON *root = txt ? cJSON_Parse(txt) : NULL;
  free(txt);
  if (!root) { CHECK(root != NULL); return; }
  CHECK(cJSON_GetObjectItem(root, "rope_scaling") && !cJSON_IsNull(cJSON_GetObjectItem(root, "rope_scaling")));
  cJSON_DeleteItemFromObject(root, "rope_scaling");
  char *s = cJSON_Print(root);
  cJSON_Delete(root);
  snprintf(p, sizeof p, "%s/noyarn/config.json", tmpdir);
  FILE *f = fopen(p, "w");
  fputs(s, f);
  fclose(f);
  free(s);
  static const char *files[] = {"model.safetensors.index.json", "model-00001-of-00002.safetensors",
                                "model-00002-of-00002.safetensors", "model.safetensors"};
  for (int i = 0; i < 4; i++) {
    snprintf(src, sizeof src, "%s/%s", g->dir, files[i]);
    snprintf(p, sizeof p, "%s/noyarn/%s", tmpdir, files[i]);
    if (access(src, R_OK) == 0) CHECK(symlink(src, p) == 0);
  }
  static int32_t tok[MAXP][MAXS];
  static float lg[MAXP * MAXV];
  snprintf(p, sizeof p, "%s/noyarn", tmpdir);
  CHECK_OK(golden_run_cpu(p, g, 0, g->n, 1, 0, tok, lg));
  double d = golden_max_diff(lg, g->logits, g->n * g->vocab);
  printf("negative control (YaRN dropped): max |logit - HF| = %.4f, must exceed %.4f\n", d, g->atol);
  CHECK(d > g->atol);
}

int main(void) {
  if (!mkdtemp(tmpdir)) { perror("mkdtemp"); return 1; }
  setenv("PREZERO_PROGRESS", "0", 1);
  char root[600];
  const char *env = getenv("PZ_GOLDEN_DIR");
  if (env) snprintf(root, sizeof root, "%s", env);
  else PZ_TEST_PATH(root, "data/golden");
  /* moonlight: deepseek_v3 without q LoRA (Moonlight-16B-A3B); deepseek_v2: q LoRA with
   * group_limited_greedy routing, routed_scaling_factor and YaRN mscale 0.707 (DeepSeek-V2 / V2.5);
   * deepseek_v3_int4: routed experts pack-quantized INT4 by the compressed-tensors package (Kimi-K2's
   * targets / ignore), against transformers on the weights compressed-tensors decompresses. */
  static const char *models[] = {"deepseek_v3", "deepseek_v2_lite", "deepseek_v3_fp8", "moonlight", "deepseek_v2",
                                 "deepseek_v3_int4"};
  static golden g;
  for (int i = 0; i < (int)(sizeof models / sizeof models[0]); i++) {
    char d[700];
    snprintf(d, sizeof d, "%s/%s", root, models[i]);
    if (!load_golden(d, &g)) { pz_test_failures++; continue; }
    check_model(&g, models[i]);
    check_cli(&g, models[i]);
    if (i == 0) negative_control(&g);
  }
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
  TEST_DONE();
}
