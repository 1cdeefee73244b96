/* The backend interface (src/backend/backend.h) over the CUDA backend, against the CUDA executor
 * called directly (cuda/exec.h) with the same options, on `tiny` (2 layers, TP 1, captured sizes
 * 1, 2, 4, 8, per-batch prezero mode on the OFF graph, every GEMM forced to full K so that two
 * executors are deterministic and comparable bit for bit):
 *  - at batch 1, 3 (padded to 4) and 8, OFF then ON: next tokens and logits of every step
 *    bit-identical to pz_cuda_exec_step / pz_cuda_exec_logits, the backend capturing each size
 *    ahead with pz_backend_capture;
 *  - the queries and extras answer as the executor does (padded batch, device bytes, per-batch,
 *    GEMM table, gate description, the plan's fired consumers, a bad forced flavour refused);
 *  - pz_backend_time_step accepted. Skipped (77) without a GPU. */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <string.h>
#include "backend/backend.h"
#include "backend/cuda/exec.h"
#include "backend/cuda/gemm.h"
#include "backend/cuda/runtime.h"
#include "core/options.h"
#include "model/builder.h"
#include "model/config.h"
#include "passes/prezero.h"
#include "pz_test.h"

enum { M = 8, STEPS = 3 };
static const int sizes[] = {1, 2, 4, 8};

int main(void) {
  if (pz_cuda_device_count() < 1) {
    printf("no GPU: skipped\n");
    return 77;
  }
  pz_model_config mc;
  CHECK_OK(pz_config_load("tiny", &mc));
  const int64_t vocab = mc.vocab_size;
  pz_build_opts bo = PZ_BUILD_OPTS_INIT;
  bo.tp = 1;
  bo.m = M;
  bo.max_ctx = 64;
  bo.layers = 2;
  pz_graph *g = NULL;
  CHECK_OK(pz_build_decode_graph(&mc, &bo, &g));
  if (!g) TEST_DONE();

  pz_runtime_opts ro;
  pz_runtime_opts_default(&ro);
  snprintf(ro.gemm_force, sizeof ro.gemm_force, "fullk");
  pz_cuda_exec_opts xo = PZ_CUDA_EXEC_OPTS_INIT;
  pz_backend_opts o = PZ_BACKEND_OPTS_INIT;
  xo.seed = o.seed = 11;
  xo.graphs = o.graphs = 1;
  xo.prezero = o.prezero = 1;
  xo.n_capture = o.n_capture = 4;
  memcpy(xo.capture, sizes, sizeof sizes);
  memcpy(o.capture, sizes, sizeof sizes);
  pz_device_desc_default(&xo.dev);
  pz_device_desc_default(&o.dev);
  xo.runtime = o.runtime = &ro;
  pz_cuda_exec *x = NULL;
  pz_backend *b = NULL;
  CHECK_OK(pz_cuda_exec_create(g, &xo, &x));
  CHECK_OK(pz_backend_create(PZ_BACKEND_CUDA, g, &o, &b));
  if (!x || !b) goto done;

  CHECK(pz_backend_kind_of(b) == PZ_BACKEND_CUDA && !strcmp(pz_backend_name(b), "cuda"));
  CHECK(pz_backend_per_batch(b) && pz_cuda_exec_per_batch(x));
  CHECK(pz_backend_padded_m(b, 3) == pz_cuda_exec_padded_m(x, 3) && pz_backend_padded_m(b, 3) == 4);
  CHECK(pz_backend_device_bytes(b) == pz_cuda_exec_bytes_per_batch(g) && pz_backend_device_bytes(b) > 0);
  CHECK(pz_backend_max_tp(PZ_BACKEND_CUDA) == PZ_CUDA_MAX_TP);
  {
    char tb[1040], tx[1040];
    pz_backend_gemm_table(b, tb, sizeof tb);
    pz_cuda_exec_gemm_table(x, tx, sizeof tx);
    CHECK(!strcmp(tb, tx));
    CHECK(!strcmp(pz_backend_device_desc(b)->name, pz_cuda_exec_device_desc(x)->name));
  }

  const int ms[] = {1, 3, 8};
  float *lx = malloc(sizeof(float) * M * (size_t)vocab), *lb = malloc(sizeof(float) * M * (size_t)vocab);
  CHECK(lx && lb);
  for (size_t k = 0; lx && lb && k < sizeof ms / sizeof *ms; k++) {
    const int m = ms[k];
    pz_prezero_report rx, rb;
    CHECK_OK(pz_cuda_exec_plan(x, m, &rx, NULL));
    CHECK_OK(pz_backend_plan(b, m, &rb, NULL));
    CHECK(pz_prezero_report_fired(&rx) == pz_prezero_report_fired(&rb) && rx.n_donors == rb.n_donors);
    pz_prezero_report_free(&rx);
    pz_prezero_report_free(&rb);
    for (int on = 0; on < 2; on++) {
      CHECK_OK(pz_cuda_exec_set_prezero(x, on));
      CHECK_OK(pz_backend_set_prezero(b, on));
      CHECK_OK(pz_backend_capture(b, m)); /* ahead of the step; the executor captures in its step */
      int32_t t[M], pos[M], nx[M], nb[M];
      for (int i = 0; i < m; i++) t[i] = (int32_t)((i * 389 + 17) % vocab);
      for (int s = 0; s < STEPS; s++) {
        for (int i = 0; i < m; i++) pos[i] = 10 + s;
        CHECK_OK(pz_cuda_exec_step(x, m, t, pos, nx));
        CHECK_OK(pz_backend_step(b, m, t, pos, nb));
        CHECK_OK(pz_cuda_exec_logits(x, m, lx));
        CHECK_OK(pz_backend_logits(b, m, lb));
        bool same = !memcmp(nx, nb, sizeof(int32_t) * (size_t)m) &&
                    !memcmp(lx, lb, sizeof(float) * (size_t)m * (size_t)vocab);
        CHECK(same);
        if (!same) fprintf(stderr, "  m=%d prezero %d step %d: the backend differs from the executor\n", m, on, s);
        memcpy(t, nx, sizeof(int32_t) * (size_t)m);
      }
    }
  }
  free(lx);
  free(lb);

  CHECK_ST(pz_backend_capture(b, 0), PZ_ERR_INVALID_ARG);
  CHECK_ST(pz_backend_capture(b, M + 1), PZ_ERR_INVALID_ARG);
  CHECK_ST(pz_backend_set_gemm_force(b, 99), PZ_ERR_INVALID_ARG);
  CHECK_OK(pz_backend_set_gemm_force(b, PZ_GEMM_AUTO));
  {
    double us = -1;
    CHECK_OK(pz_backend_set_prezero(b, 0));
    CHECK_OK(pz_backend_time_step(b, 4, 20, 2, 2, &us));
    CHECK(us > 0);
    CHECK_ST(pz_backend_time_step(b, 3, 20, 2, 2, &us), PZ_ERR_INVALID_ARG); /* 3 is not a captured size */
    us = -1; /* 3 sequences padded to the graph of 4 (the attention padding rule), and the bounds of rows */
    CHECK_OK(pz_backend_time_step_rows(b, 4, 3, 20, 2, 2, &us));
    CHECK(us > 0);
    CHECK_ST(pz_backend_time_step_rows(b, 4, 0, 20, 2, 2, &us), PZ_ERR_INVALID_ARG);
    CHECK_ST(pz_backend_time_step_rows(b, 4, 5, 20, 2, 2, &us), PZ_ERR_INVALID_ARG);
  }
done:
  pz_backend_destroy(b);
  pz_cuda_exec_free(x);
  pz_graph_free(g);
  TEST_DONE();
}
