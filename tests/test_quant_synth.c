/* Synthetic quantised weights (model/quant_synth.h, `--quant int4|fp8`): every non-expert weight is
 * the seeded bf16 model's (bytes equal to the CPU executor's own fill), the INT4 experts are
 * compressed-tensors' quantisation of the bf16 model's experts (within half a scale step, each
 * value in [-8, 7]), FP8 experts the nearest e4m3 of value / (init_scale / 448); the engine decodes
 * them deterministically at TP 1 and 2; the CLI refuses a bad --quant in one line. */
#include <math.h>
#include <string.h>
#include <unistd.h>
#include "backend/cpu/cpu_backend.h"
#include "core/quant.h"
#include "model/builder.h"
#include "model/quant_synth.h"
#include "prezero.h"
#include "pz_cli_test.h"
#include "pz_test.h"
#include "quant_synth_test.h"

enum { SEED = 4242 };

static const pz_tensor *find_t(const pz_graph *g, const char *name) {
  for (int i = 0; i < g->n_tensors; i++) if (!strcmp(g->tensors[i].name, name)) return &g->tensors[i];
  return NULL;
}

static void check_weights(pz_wquant kind, int tp) {
  pz_model_config c, cq;
  CHECK_OK(pz_config_load("tiny", &c));
  cq = c;
  pz_quant_config_synthetic(kind, &cq.quant);
  pz_build_opts bo = {.tp = tp, .m = 2, .max_ctx = 8, .layers = 2};
  pz_graph *g = NULL, *gq = NULL;
  CHECK_OK(pz_build_decode_graph(&c, &bo, &g));
  CHECK_OK(pz_build_decode_graph(&cq, &bo, &gq));
  if (!g || !gq) exit(1);
  pz_cpu_exec_opts xo = PZ_CPU_EXEC_OPTS_INIT;
  xo.seed = SEED;
  xo.threads = 1;
  pz_cpu_exec *x = NULL;
  CHECK_OK(pz_cpu_exec_create(g, &xo, &x));
  if (!x) exit(1);
  /* Without a weight source the executor refuses quantised storage (one line). */
  pz_cpu_exec *xq = NULL;
  if (kind == PZ_WQ_FP8 || kind == PZ_WQ_INT4) {
    CHECK_ST(pz_cpu_exec_create(gq, &xo, &xq), PZ_ERR_INVALID_ARG);
    CHECK(strstr(pz_last_error(), "quantised") && !strchr(pz_last_error(), '\n'));
  }
  pz_quant_synth q = {.seed = SEED};
  int n_same = 0, n_q = 0;
  for (int r = 0; r < tp; r++)
    for (int i = 0; i < gq->n_tensors; i++) {
      const pz_tensor *t = &gq->tensors[i];
      if (t->kind != PZ_T_WEIGHT) continue;
      const int64_t w = t->ne[t->ndim - 1], rows = pz_tensor_numel(t) / w;
      void *d = malloc((size_t)pz_tensor_numel(t) * pz_dtype_size(t->dtype));
      CHECK_OK(pz_quant_synth_fill_rows(&q, gq, t, r, 0, rows, d));
      const pz_tensor *tb = find_t(g, t->name);
      if (tb && tb->dtype == t->dtype) { /* the same tensor as in the bf16 model: the same bytes */
        CHECK(!memcmp(d, pz_cpu_exec_data(x, r, tb->id), (size_t)pz_tensor_numel(t) * pz_dtype_size(t->dtype)));
        n_same++;
      }
      const size_t nl = strlen(t->name);
      if (kind == PZ_WQ_INT4 && nl > 14 && !strcmp(t->name + nl - 14, ".weight_packed")) {
        char tw[PZ_NAME_LEN + 8], ts[PZ_NAME_LEN + 8];
        snprintf(tw, sizeof tw, "%.*s", (int)(nl - 7), t->name);             /* X.weight */
        snprintf(ts, sizeof ts, "%.*s_scale", (int)(nl - 7), t->name);       /* X.weight_scale */
        const pz_tensor *twin = find_t(g, tw), *st = find_t(gq, ts);
        CHECK(twin && st);
        if (!twin || !st) continue;
        pz_bf16 *sc = malloc((size_t)pz_tensor_numel(st) * 2);
        const int64_t sw = st->ne[st->ndim - 1];
        CHECK_OK(pz_quant_synth_fill_rows(&q, gq, st, r, 0, rows, sc));
        const pz_bf16 *bv = pz_cpu_exec_data(x, r, twin->id);
        const int64_t cols = w * 8, group = cols / sw;
        int far = 0;
        float *row = malloc(sizeof(float) * (size_t)cols);
        for (int64_t rr = 0; rr < rows; rr++) {
          pz_int4_dequant_row((const int32_t *)d + rr * w, sc + rr * sw, group, 0, cols, row);
          for (int64_t j = 0; j < cols; j++) {
            const float b = pz_bf16_to_f32(bv[rr * cols + j]), s = pz_bf16_to_f32(sc[rr * sw + j / group]);
            /* half a step, plus the quotient's bf16 rounding (|w / s| <= 7.5, 2^-8 relative) */
            far += fabsf(row[j] - b) > 0.5f * s + 7.5f * s / 256.0f;
          }
        }
        CHECK(far == 0);
        n_q++;
        free(row);
        free(sc);
      }
      if (kind == PZ_WQ_FP8 && t->dtype == PZ_U8) {
        const pz_tensor *twin = find_t(g, t->name);
        const pz_bf16 *bv = pz_cpu_exec_data(x, r, twin->id);
        const float s = t->init_scale / 448.0f;
        int bad = 0;
        for (int64_t j = 0; j < pz_tensor_numel(t); j++)
          bad += ((uint8_t *)d)[j] != pz_fp8_e4m3_from_f32(pz_bf16_to_f32(bv[j]) / s);
        CHECK(bad == 0);
        n_q++;
      }
      free(d);
    }
  CHECK(n_same > 10 && n_q == 3 * tp);
  pz_cpu_exec_free(x);
  pz_graph_free(g);
  pz_graph_free(gq);
}

static pz_status decode(int quant, int tp, int32_t *tok, float *lg) { /* the tiny preset, 2 layers */
  return pz_test_decode3(NULL, 2, quant, tp, SEED, tok, lg);
}

int main(void) {
  check_weights(PZ_WQ_INT4, 1);
  check_weights(PZ_WQ_INT4, 2);
  check_weights(PZ_WQ_FP8, 1);
  pz_model_config c;
  CHECK_OK(pz_config_load("tiny", &c));
  const int V = (int)c.vocab_size;
  float *a = malloc(sizeof(float) * 2 * V), *b = malloc(sizeof(float) * 2 * V), *z = malloc(sizeof(float) * 2 * V);
  int32_t ta[6], tb[6], tz[6];
  /* bf16 is the tiny preset's own storage; int4 / fp8 run and repeat bit for bit. */
  CHECK_OK(decode(PZ_QUANT_AUTO, 1, ta, a));
  CHECK_OK(decode(PZ_QUANT_BF16, 1, tb, b));
  CHECK(!memcmp(ta, tb, sizeof ta) && !memcmp(a, b, sizeof(float) * 2 * V));
  const int qs[2] = {PZ_QUANT_INT4, PZ_QUANT_FP8};
  for (int k = 0; k < 2; k++) {
    CHECK_OK(decode(qs[k], 1, tb, b));
    CHECK_OK(decode(qs[k], 1, tz, z));
    CHECK(!memcmp(tb, tz, sizeof tb) && !memcmp(b, z, sizeof(float) * 2 * V));
    CHECK(memcmp(a, b, sizeof(float) * 2 * V)); /* quantised: other logits than bf16 */
    double md = 0;
    for (int i = 0; i < 2 * V; i++) md = fmax(md, fabs(a[i] - b[i]));
    CHECK(md < 0.5); /* close to the bf16 model: tiny's logits are O(1) */
  }
  CHECK_OK(decode(PZ_QUANT_INT4, 2, tz, z)); /* TP 2: the same tokens as TP 1 */
  CHECK_OK(decode(PZ_QUANT_INT4, 1, tb, b));
  CHECK(!memcmp(tb, tz, sizeof tb));
  CHECK_ST(decode(7, 1, tb, b), PZ_ERR_INVALID_ARG);
  free(a); free(b); free(z);

  const char *cli = getenv("PZ_CLI");
  if (cli) {
    char d[] = "/tmp/pz_test_qsynth_XXXXXX", out[8192], err[8192];
    if (!mkdtemp(d)) return 1;
    CHECK(pz_cli_run(cli, d, "run --quant int3", out, sizeof out, err, sizeof err) == 2 && strstr(err, "--quant") &&
          strchr(err, '\n') == strrchr(err, '\n'));
    CHECK(pz_cli_run(cli, d, "run --quant int4 --model /nonexistent", out, sizeof out, err, sizeof err) == 2 &&
          strstr(err, "--quant") && strchr(err, '\n') == strrchr(err, '\n'));
    CHECK(pz_cli_run(cli, d, "run --quant int4 --steps 2 --layers 2 --device cpu", out, sizeof out, err, sizeof err) == 0 &&
          strstr(out, "step 2:"));
  }
  TEST_DONE();
}
