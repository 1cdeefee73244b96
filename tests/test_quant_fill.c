/* The element-wise synthetic quantised weights the CUDA executor fills on the GPU (core/quant_fill.h):
 * their host twin, pz_qfill_rows_host (the kernel's loop), gives exactly the bytes of the host
 * quantiser pz_quant_synth_fill_rows (model/quant_synth.h, itself checked against compressed-tensors)
 * for every quantised tensor of the tiny model, INT4 and FP8, TP 1 and 2, whole and in row
 * ranges; the arithmetic e4m3 rounding equals the table search of pz_fp8_e4m3_from_f32 over a
 * sweep of f32 values (every 2^11-th bit pattern, each e4m3 value and its neighbours and
 * midpoints); the tensor kinds are told apart by dtype and sibling as quant_synth does. */
#include <math.h>
#include <string.h>
#include "core/fp8.h"
#include "core/quant.h"
#include "core/quant_fill.h"
#include "model/builder.h"
#include "model/quant_synth.h"
#include "pz_test.h"

enum { SEED = 777 };

static float f32_of(uint32_t u) { float v; memcpy(&v, &u, 4); return v; }

static void check_e4m3(void) {
  long bad = 0, n = 0;
  for (uint64_t u = 0; u < (1ull << 32); u += 2048, n++) {
    const float v = f32_of((uint32_t)u);
    if (pz_qfill_e4m3(v) != pz_fp8_e4m3_from_f32(v)) {
      if (bad++ < 5) fprintf(stderr, "FAIL: e4m3(%a) = 0x%02x, table 0x%02x\n", v, pz_qfill_e4m3(v), pz_fp8_e4m3_from_f32(v));
    }
  }
  /* every code's value, the values just beside it and the midpoints to its neighbours */
  for (int c = 0; c < 0x7e; c++) {
    const float a = pz_fp8_e4m3_to_f32((uint8_t)c), b = pz_fp8_e4m3_to_f32((uint8_t)(c + 1)), mid = 0.5f * (a + b);
    const float t[6] = {a, nextafterf(a, 1e9f), mid, nextafterf(mid, 0.0f), nextafterf(mid, 1e9f), -mid};
    for (int k = 0; k < 6; k++, n++)
      if (pz_qfill_e4m3(t[k]) != pz_fp8_e4m3_from_f32(t[k])) {
        if (bad++ < 10) fprintf(stderr, "FAIL: e4m3(%a) = 0x%02x, table 0x%02x\n", t[k], pz_qfill_e4m3(t[k]), pz_fp8_e4m3_from_f32(t[k]));
      }
  }
  /* fixed points of the format: 448 saturates, 2^-9 is code 1, a tie at 2^-10 goes to 0, NaN 0x7f */
  CHECK(pz_qfill_e4m3(448.0f) == 0x7e && pz_qfill_e4m3(1e30f) == 0x7e && pz_qfill_e4m3(-500.0f) == 0xfe);
  CHECK(pz_qfill_e4m3(0x1p-9f) == 0x01 && pz_qfill_e4m3(0x1p-10f) == 0x00 && pz_qfill_e4m3(1.0f) == 0x38);
  CHECK(pz_qfill_e4m3(NAN) == 0x7f && pz_qfill_e4m3(-0.0f) == 0x80 && pz_qfill_e4m3(1.0625f) == 0x38); /* tie to even */
  CHECK(pz_qfill_e4m3(1.1875f) == 0x3a); /* tie between 0x39 (1.125) and 0x3a (1.25): even */
  CHECK(bad == 0);
  printf("e4m3: %ld values, %ld differ from the table search\n", n, bad);
}

static void check_model(pz_wquant kind, int tp) {
  pz_model_config c;
  CHECK_OK(pz_config_load("tiny", &c));
  pz_quant_config_synthetic(kind, &c.quant);
  pz_build_opts bo = {.tp = tp, .m = 2, .max_ctx = 8, .layers = 2};
  pz_graph *g = NULL;
  CHECK_OK(pz_build_decode_graph(&c, &bo, &g));
  if (!g) exit(1);
  pz_quant_synth q = {.seed = SEED};
  int kinds[5] = {0};
  for (int r = 0; r < tp; r++)
    for (int i = 0; i < g->n_tensors; i++) {
      const pz_tensor *t = &g->tensors[i];
      pz_qfill qf;
      CHECK_OK(pz_qfill_plan(g, t, SEED, &qf));
      if (qf.kind == PZ_QFILL_NONE) {
        /* not quantised: a plain dtype (the executors' fill rule applies) */
        CHECK(t->kind != PZ_T_WEIGHT || t->dtype == PZ_BF16 || t->dtype == PZ_F32);
        continue;
      }
      kinds[qf.kind]++;
      const int64_t w = t->ne[t->ndim - 1], rows = pz_tensor_numel(t) / w;
      CHECK(qf.rows == rows && qf.out_cols == w);
      const size_t bytes = (size_t)pz_tensor_numel(t) * pz_dtype_size(t->dtype);
      char *want = malloc(bytes), *got = malloc(bytes);
      memset(got, 0xa5, bytes);
      CHECK_OK(pz_quant_synth_fill_rows(&q, g, t, r, 0, rows, want));
      /* in two row ranges, as a chunked fill would ask */
      const int64_t h = rows / 3;
      CHECK_OK(pz_qfill_rows_host(&qf, r, 0, h, got));
      CHECK_OK(pz_qfill_rows_host(&qf, r, h, rows - h, got + (size_t)h * w * pz_dtype_size(t->dtype)));
      if (memcmp(want, got, bytes)) {
        fprintf(stderr, "FAIL: %s (rank %d of %d): the device fill's host twin differs from quant_synth\n", t->name, r, tp);
        pz_test_failures++;
      }
      free(want);
      free(got);
    }
  if (kind == PZ_WQ_INT4) CHECK(kinds[PZ_QFILL_INT4_PACKED] > 0 && kinds[PZ_QFILL_INT4_SCALE] == kinds[PZ_QFILL_INT4_PACKED]);
  /* FP8 experts stay e4m3 where the shard keeps whole 128-blocks (tiny at TP 1; at TP 2 the builder
   * stores them bf16) */
  if (kind == PZ_WQ_FP8) CHECK((tp > 1 || kinds[PZ_QFILL_FP8_BYTES] > 0) && kinds[PZ_QFILL_FP8_SCALE] == kinds[PZ_QFILL_FP8_BYTES]);
  if (kind == PZ_WQ_NONE) CHECK(kinds[1] + kinds[2] + kinds[3] + kinds[4] == 0);
  printf("%s tp %d: %d packed, %d scale, %d e4m3, %d scale_inv tensors (per rank x ranks) identical\n",
         kind == PZ_WQ_INT4 ? "int4" : kind == PZ_WQ_FP8 ? "fp8" : "bf16", tp, kinds[1], kinds[2], kinds[3], kinds[4]);
  pz_graph_free(g);
}

int main(void) {
  check_e4m3();
  check_model(PZ_WQ_INT4, 1);
  check_model(PZ_WQ_INT4, 2);
  check_model(PZ_WQ_FP8, 1);
  check_model(PZ_WQ_FP8, 2);
  check_model(PZ_WQ_NONE, 1);
  /* errors: NULL, nothing to fill, rows outside */
  pz_qfill none;
  memset(&none, 0, sizeof none);
  int32_t w[4];
  CHECK_ST(pz_qfill_plan(NULL, NULL, 0, &none), PZ_ERR_INVALID_ARG);
  CHECK_ST(pz_qfill_rows_host(&none, 0, 0, 1, w), PZ_ERR_INVALID_ARG);
  none.kind = PZ_QFILL_FP8_SCALE;
  none.rows = 1; none.cols = none.out_cols = 4; none.fp8_s = 0.5f;
  CHECK_ST(pz_qfill_rows_host(&none, 0, 0, 2, w), PZ_ERR_INVALID_ARG);
  CHECK_OK(pz_qfill_rows_host(&none, 0, 0, 1, w));
  CHECK(((float *)w)[3] == 0.5f);
  TEST_DONE();
}
