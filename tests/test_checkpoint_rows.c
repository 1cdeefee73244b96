/* Row-range checkpoint fills (pz_checkpoint_fill_rows, the CUDA executor's weight hook) on the
 * committed golden checkpoints: every weight of every TP rank filled in chunks of 1, 3 or 7
 * rows equals the whole-tensor fill byte for byte (BF16, F32 bias and FP8 block-scaled
 * sources); rows outside the tensor are refused. Without a GPU: `prezero compare --model` and
 * `--device cuda` with a checkpoint give one-line errors ($PZ_CLI), and the engine refuses
 * the CUDA device cleanly (no CUDA build: PZ_ERR_UNSUPPORTED; no GPU: PZ_ERR_NO_DEVICE). */
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "model/builder.h"
#include "model/checkpoint.h"
#include "prezero.h"
#include "pz_test.h"

static char root[700], tmp[] = "/tmp/pz_test_ck_rows_XXXXXX";

static void check_rows(const char *model, int tp) {
  char dir[800];
  snprintf(dir, sizeof dir, "%s/%s", root, model);
  pz_model_config mc;
  CHECK_OK(pz_checkpoint_load_config(dir, &mc));
  pz_build_opts bo = {.tp = tp, .m = 2, .max_ctx = 16, .layers = 0};
  pz_graph *g = NULL;
  CHECK_OK(pz_build_decode_graph(&mc, &bo, &g));
  pz_checkpoint *ck = NULL;
  CHECK_OK(pz_checkpoint_open_planned(dir, &mc, g, &ck));
  if (!g || !ck) return;
  int tensors = 0, bad = 0;
  for (int r = 0; r < tp; r++)
    for (int t = 0; t < g->n_tensors; t++) {
      const pz_tensor *x = &g->tensors[t];
      if (x->kind != PZ_T_WEIGHT || x->view_of >= 0) continue;
      const int64_t w = x->ne[x->ndim - 1], rows = pz_tensor_numel(x) / w;
      const size_t rowb = (size_t)w * pz_dtype_size(x->dtype), bytes = rowb * (size_t)rows;
      char *whole = malloc(bytes), *cut = malloc(bytes);
      CHECK_OK(pz_checkpoint_fill(ck, x, r, whole));
      for (int k = 0; k < 3; k++) {
        const int per = (int[]){1, 3, 7}[k];
        memset(cut, 0xa5, bytes);
        for (int64_t r0 = 0; r0 < rows; r0 += per) {
          int64_t n = rows - r0 < per ? rows - r0 : per;
          CHECK_OK(pz_checkpoint_fill_rows(ck, x, r, r0, n, cut + (size_t)r0 * rowb));
        }
        if (memcmp(whole, cut, bytes) && !bad++)
          fprintf(stderr, "FAIL: %s TP %d rank %d %s: fill in %d-row chunks differs\n", model, tp, r, x->name, per);
      }
      if (t == 0 || tensors == 0) {
        CHECK_ST(pz_checkpoint_fill_rows(ck, x, r, rows - 1, 2, cut), PZ_ERR_INVALID_ARG);
        CHECK_ST(pz_checkpoint_fill_rows(ck, x, r, -1, 1, cut), PZ_ERR_INVALID_ARG);
      }
      tensors++;
      free(whole);
      free(cut);
    }
  printf("%s TP %d: %d rank-tensors filled in 1/3/7-row chunks, %d differ\n", model, tp, tensors, bad);
  CHECK(tensors > 0 && bad == 0);
  pz_checkpoint_close(ck);
  pz_graph_free(g);
}

static int lines(const char *s) {
  int n = 0;
  for (; *s; s++) n += *s == '\n';
  return n;
}

/* Runs `prezero ARGS`; returns the exit code, stderr in err. */
static int cli_run(const char *cli, const char *args, char *err, size_t cap) {
  char cmd[2400], p[300];
  snprintf(cmd, sizeof cmd, "\"%s\" %s >%s/out 2>%s/err", cli, args, tmp, tmp);
  int rc = system(cmd);
  snprintf(p, sizeof p, "%s/err", tmp);
  FILE *f = fopen(p, "r");
  size_t n = f ? fread(err, 1, cap - 1, f) : 0;
  err[n] = 0;
  if (f) fclose(f);
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : 128;
}

static void cli_bad(const char *cli, const char *args, int want_rc, const char *needle) {
  static char err[1 << 16];
  int rc = cli_run(cli, args, err, sizeof err);
  int ok = (want_rc ? rc == want_rc : rc != 0) && lines(err) == 1 && strstr(err, needle);
  if (!ok) {
    fprintf(stderr, "FAIL: prezero %s -> exit %d, stderr [%s] (want one line with '%s')\n", args, rc, err, needle);
    pz_test_failures++;
  }
}

int main(void) {
  setenv("PREZERO_PROGRESS", "0", 1);
  const char *env = getenv("PZ_GOLDEN_DIR");
  if (env) snprintf(root, sizeof root, "%s", env);
  else PZ_TEST_PATH(root, "data/golden");
  static const char *models[] = {"deepseek_v3", "deepseek_v2_lite", "deepseek_v3_fp8"};
  for (int i = 0; i < 3; i++)
    for (int tp = 1; tp <= 2; tp++) check_rows(models[i], tp);

  /* The engine on the CUDA device with a checkpoint: no longer refused as "CPU only". */
  if (pz_gpu_count() == 0) {
    char dir[800];
    snprintf(dir, sizeof dir, "%s/deepseek_v3", root);
    pz_engine_config ec = PZ_ENGINE_CONFIG_INIT;
    ec.model_dir = dir;
    ec.context = 0;
    ec.max_steps = 8;
    ec.device = PZ_DEVICE_CUDA;
    pz_engine *e = NULL;
#ifdef PZ_HAVE_CUDA
    CHECK_ST(pz_engine_create(&ec, &e), PZ_ERR_NO_DEVICE);
#else
    CHECK_ST(pz_engine_create(&ec, &e), PZ_ERR_UNSUPPORTED);
#endif
    CHECK(e == NULL && !strstr(pz_last_error(), "CPU device only"));
  }

  const char *cli = getenv("PZ_CLI");
  if (!cli) {
    printf("PZ_CLI unset: CLI checks skipped\n");
    TEST_DONE();
  }
  if (!mkdtemp(tmp)) { perror("mkdtemp"); return 1; }
  char a[1200];
  snprintf(a, sizeof a, "compare --model %s/deepseek_v3 --config tiny", root);
  cli_bad(cli, a, 2, "--model and --config both give the model; use one of them");
  snprintf(a, sizeof a, "compare --model %s/nope", root);
  cli_bad(cli, a, 1, "nope: does not exist (");
  snprintf(a, sizeof a, "compare --model %s/deepseek_v3 --layers 9", root);
  cli_bad(cli, a, 2, "exceeds num_hidden_layers (3)");
  snprintf(a, sizeof a, "compare --model %s/deepseek_v3 --tp 3", root);
  cli_bad(cli, a, 2, "does not divide num_attention_heads (4)");
  if (pz_gpu_count() == 0) { /* with a GPU these would start real runs */
    snprintf(a, sizeof a, "compare --model %s/deepseek_v3 --isl 4 --osl 2 --conc 1 --out %s/cmp", root, tmp);
#ifdef PZ_HAVE_CUDA
    cli_bad(cli, a, 1, "GPU");
#else
    cli_bad(cli, a, 1, "no CUDA backend");
#endif
    snprintf(a, sizeof a, "run --model %s/deepseek_v3 --device cuda --prompt-ids 1,2 --steps 2", root);
    cli_bad(cli, a, 0, "prezero run: ");
  }
  snprintf(a, sizeof a, "rm -rf %s", tmp);
  if (system(a) != 0) fprintf(stderr, "could not remove %s\n", tmp);
  TEST_DONE();
}
