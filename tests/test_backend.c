/* The backend interface (src/backend/backend.h) over the CPU backend, against the CPU executor
 * called directly (cpu_backend.h) with the same options:
 *  - greedy decode of `tiny` at TP 2 (OFF graph and the graph after the prezero pass), next
 *    tokens and logits of every step bit-identical to pz_cpu_exec_step / pz_cpu_exec_logits,
 *    with explicit options and with opts = NULL (the defaults of both);
 *  - a weight source: the interface's row hook (asked for every row of a tensor at once) gives
 *    the same logits as the executor's whole-tensor hook writing the same values;
 *  - the queries' CPU answers (padded batch, no device bytes, no GEMM table, not per-batch, the
 *    executor's gate description), capture and timing accepted, the CUDA extras refused with
 *    PZ_ERR_UNSUPPORTED (the plan's report left empty), argument errors. */
#include <stdlib.h>
#include <string.h>
#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"
#include "core/options.h"
#include "model/builder.h"
#include "model/config.h"
#include "passes/passes.h"
#include "passes/prezero.h"
#include "pz_test.h"

enum { TP = 2, M = 4, CTX = 32, STEPS = 4, START = 5 };

static pz_graph *build(int prezero) {
  pz_model_config mc;
  CHECK_OK(pz_config_load("tiny", &mc));
  pz_build_opts bo = {.tp = TP, .m = M, .max_ctx = CTX, .layers = 0};
  pz_graph *g = NULL;
  CHECK_OK(pz_build_decode_graph(&mc, &bo, &g));
  if (g && prezero) {
    pz_pass_opts po = PZ_PASS_OPTS_INIT;
    po.prezero = 1;
    CHECK_OK(pz_run_passes(g, &po, NULL, NULL));
  }
  return g;
}

/* Decodes STEPS greedy steps with both and checks tokens and logits bit for bit. */
static void same_decode(pz_cpu_exec *x, pz_backend *b, int64_t vocab, const char *what) {
  int32_t tok[M], pos[M], nx[M], nb[M];
  for (int i = 0; i < M; i++) {
    tok[i] = (int32_t)((i * 389 + 17) % vocab);
    pos[i] = START + i;
  }
  float *lx = malloc(sizeof(float) * M * (size_t)vocab), *lb = malloc(sizeof(float) * M * (size_t)vocab);
  CHECK(lx && lb);
  if (!lx || !lb) goto done;
  for (int s = 0; s < STEPS; s++) {
    CHECK_OK(pz_cpu_exec_step(x, M, tok, pos, nx));
    CHECK_OK(pz_backend_step(b, M, tok, pos, nb));
    CHECK_OK(pz_cpu_exec_logits(x, M, lx));
    CHECK_OK(pz_backend_logits(b, M, lb));
    if (memcmp(nx, nb, sizeof nx) || memcmp(lx, lb, sizeof(float) * M * (size_t)vocab)) {
      fprintf(stderr, "%s: step %d: the backend's tokens or logits differ from the executor's\n", what, s);
      pz_test_failures++;
    }
    /* A partial batch too: the first two rows' logits. */
    CHECK_OK(pz_backend_logits(b, 2, lb));
    CHECK(memcmp(lx, lb, sizeof(float) * 2 * (size_t)vocab) == 0);
    for (int i = 0; i < M; i++) {
      tok[i] = nx[i];
      pos[i]++;
    }
  }
done:
  free(lx);
  free(lb);
}

/* A weight source: value of element j of local row `row` of t on rank r, a bf16 in [-0.06, 0.06]
 * (norm weights near 1) from the name, rank, row and column. */
static uint16_t src_value(const pz_tensor *t, int rank, int64_t row, int64_t j) {
  uint64_t h = 1469598103934665603ull;
  for (const char *s = t->name; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
  h ^= (uint64_t)rank * 0x9e3779b97f4a7c15ull + (uint64_t)row * 0xbf58476d1ce4e5b9ull + (uint64_t)j;
  h ^= h >> 29;
  h *= 0x94d049bb133111ebull;
  float v = ((float)(h >> 40) / (float)(1u << 24) - 0.5f) * 0.12f;
  if (strstr(t->name, "norm")) v += 1.0f;
  uint32_t u;
  memcpy(&u, &v, 4);
  return (uint16_t)(u >> 16);
}

static void write_rows(const pz_tensor *t, int rank, int64_t row0, int64_t n_rows, void *dst) {
  const int64_t w = t->ne[t->ndim - 1];
  for (int64_t r = 0; r < n_rows; r++)
    for (int64_t j = 0; j < w; j++) {
      uint16_t v = src_value(t, rank, row0 + r, j);
      if (t->dtype == PZ_BF16) ((uint16_t *)dst)[r * w + j] = v;
      else {
        uint32_t u = (uint32_t)v << 16;
        memcpy((float *)dst + r * w + j, &u, 4);
      }
    }
}

static int row_calls, row_calls_partial;
static pz_status rows_hook(void *user, const pz_tensor *t, int rank, int64_t row0, int64_t n_rows, void *dst) {
  (void)user;
  const int64_t w = t->ne[t->ndim - 1];
  row_calls++;
  if (row0 != 0 || n_rows != pz_tensor_numel(t) / w) row_calls_partial++;
  write_rows(t, rank, row0, n_rows, dst);
  return PZ_OK;
}
static pz_status whole_hook(void *user, const pz_tensor *t, int rank, void *dst) {
  (void)user;
  write_rows(t, rank, 0, pz_tensor_numel(t) / t->ne[t->ndim - 1], dst);
  return PZ_OK;
}
static pz_status failing_hook(void *user, const pz_tensor *t, int rank, int64_t row0, int64_t n_rows, void *dst) {
  (void)user; (void)t; (void)rank; (void)row0; (void)n_rows; (void)dst;
  return pz_error(PZ_ERR_IO, "test: this weight source fails");
}

int main(void) {
  pz_runtime_opts ro;
  pz_runtime_opts_default(&ro);
  ro.cpu_threads = 2;

  for (int prezero = 0; prezero < 2; prezero++) {
    pz_graph *g = build(prezero);
    if (!g) TEST_DONE();
    const int64_t vocab = g->info.vocab_size;
    const char *what = prezero ? "after the prezero pass" : "OFF graph";

    /* Explicit options, the same on both sides. */
    pz_cpu_exec_opts xo = PZ_CPU_EXEC_OPTS_INIT;
    xo.seed = 4242;
    xo.threads = 2;
    xo.poison = 1;
    xo.runtime = &ro;
    pz_backend_opts bo = PZ_BACKEND_OPTS_INIT;
    bo.seed = 4242;
    bo.threads = 2;
    bo.poison = 1;
    bo.runtime = &ro;
    pz_cpu_exec *x = NULL;
    pz_backend *b = NULL;
    CHECK_OK(pz_cpu_exec_create(g, &xo, &x));
    CHECK_OK(pz_backend_create(PZ_BACKEND_CPU, g, &bo, &b));
    if (x && b) same_decode(x, b, vocab, what);

    /* The queries' CPU answers. */
    if (b) {
      CHECK(pz_backend_kind_of(b) == PZ_BACKEND_CPU && !strcmp(pz_backend_name(b), "cpu"));
      CHECK(pz_backend_padded_m(b, 3) == 3 && pz_backend_padded_m(b, 1) == 1);
      CHECK(pz_backend_device_bytes(b) == 0);
      CHECK(!pz_backend_per_batch(b));
      char tab[16];
      memset(tab, 'x', sizeof tab);
      pz_backend_gemm_table(b, tab, sizeof tab);
      CHECK(tab[0] == 0);
      const pz_device_desc *d = pz_backend_device_desc(b), *dx = pz_cpu_exec_device_desc(x);
      CHECK(d && dx && d->num_sms == dx->num_sms && !strcmp(d->name, dx->name) && d->num_sms > 0);
      CHECK_OK(pz_backend_capture(b, 1));
      CHECK_OK(pz_backend_capture(b, M));
      CHECK_ST(pz_backend_capture(b, 0), PZ_ERR_INVALID_ARG);
      CHECK_ST(pz_backend_capture(b, M + 1), PZ_ERR_INVALID_ARG);
      /* The CUDA extras. */
      CHECK_ST(pz_backend_set_prezero(b, 1), PZ_ERR_UNSUPPORTED);
      CHECK_ST(pz_backend_set_gemm_force(b, 1), PZ_ERR_UNSUPPORTED);
      pz_prezero_report rep;
      memset(&rep, 0x5a, sizeof rep);
      const pz_graph *gp = NULL;
      CHECK_ST(pz_backend_plan(b, 2, &rep, &gp), PZ_ERR_UNSUPPORTED);
      CHECK(rep.n_donors == 0 && rep.d == NULL && gp == NULL);
      pz_prezero_report_free(&rep);
      CHECK_ST(pz_backend_plan(b, 2, NULL, NULL), PZ_ERR_INVALID_ARG);
      /* Timing: accepted, a finite non-negative figure (its value is no test's business). */
      double us = -1;
      CHECK_OK(pz_backend_time_step(b, 2, 7, 1, 3, &us));
      CHECK(us >= 0 && us < 1e12);
      CHECK_ST(pz_backend_time_step(b, 2, 7, 0, 3, &us), PZ_ERR_INVALID_ARG);
      CHECK_ST(pz_backend_time_step(b, 2, 7, 1, 65, &us), PZ_ERR_INVALID_ARG);
      CHECK_ST(pz_backend_time_step(b, M + 1, 7, 1, 1, &us), PZ_ERR_INVALID_ARG);
      CHECK_ST(pz_backend_time_step(b, 2, CTX, 1, 1, &us), PZ_ERR_INVALID_ARG);
      CHECK_ST(pz_backend_time_step(b, 2, -1, 1, 1, &us), PZ_ERR_INVALID_ARG);
      CHECK_ST(pz_backend_time_step(b, 2, 7, 1, 1, NULL), PZ_ERR_INVALID_ARG);
      /* the CPU backend pads nothing: a padded timing is refused, rows == M is the plain one */
      CHECK_ST(pz_backend_time_step_rows(b, 2, 1, 7, 1, 1, &us), PZ_ERR_INVALID_ARG);
      CHECK_OK(pz_backend_time_step_rows(b, 2, 2, 7, 1, 1, &us));
      /* Step and logits errors pass through from the executor. */
      int32_t tok[M] = {0}, pos[M] = {0};
      CHECK_ST(pz_backend_step(b, 0, tok, pos, NULL), PZ_ERR_INVALID_ARG);
      CHECK_ST(pz_backend_step(b, M + 1, tok, pos, NULL), PZ_ERR_INVALID_ARG);
      CHECK_ST(pz_backend_step(b, M, NULL, pos, NULL), PZ_ERR_INVALID_ARG);
      float one[1];
      CHECK_ST(pz_backend_logits(b, M, NULL), PZ_ERR_INVALID_ARG);
      CHECK_ST(pz_backend_logits(b, M + 1, one), PZ_ERR_INVALID_ARG);
    }
    pz_backend_destroy(b);
    pz_cpu_exec_free(x);

    /* opts = NULL on both: the defaults (seed 1234, the environment's switches) agree. */
    x = NULL;
    b = NULL;
    CHECK_OK(pz_cpu_exec_create(g, NULL, &x));
    CHECK_OK(pz_backend_create(PZ_BACKEND_CPU, g, NULL, &b));
    if (x && b) same_decode(x, b, vocab, "default options");
    pz_backend_destroy(b);
    pz_cpu_exec_free(x);

    /* A weight source: rows through the interface = the whole tensor through the executor. */
    if (!prezero) {
      xo.load_weight = whole_hook;
      bo.load_weight = rows_hook;
      row_calls = row_calls_partial = 0;
      x = NULL;
      b = NULL;
      CHECK_OK(pz_cpu_exec_create(g, &xo, &x));
      CHECK_OK(pz_backend_create(PZ_BACKEND_CPU, g, &bo, &b));
      CHECK(row_calls > 0 && row_calls_partial == 0);
      if (x && b) same_decode(x, b, vocab, "weight source");
      pz_backend_destroy(b);
      pz_cpu_exec_free(x);
      /* Its error aborts the creation as it is. */
      bo.load_weight = failing_hook;
      b = (pz_backend *)&ro; /* must be reset */
      CHECK_ST(pz_backend_create(PZ_BACKEND_CPU, g, &bo, &b), PZ_ERR_IO);
      CHECK(b == NULL);
    }
    pz_graph_free(g);
  }

  /* Argument errors and the kinds this build has. */
  pz_graph *g = build(0);
  pz_backend *b = NULL;
  CHECK_ST(pz_backend_create(PZ_BACKEND_CPU, NULL, NULL, &b), PZ_ERR_INVALID_ARG);
  CHECK_ST(pz_backend_create(PZ_BACKEND_CPU, g, NULL, NULL), PZ_ERR_INVALID_ARG);
  CHECK_ST(pz_backend_create((pz_backend_kind)7, g, NULL, &b), PZ_ERR_INVALID_ARG);
  CHECK(b == NULL);
  CHECK(pz_backend_max_tp(PZ_BACKEND_CPU) == 64);
  CHECK(pz_backend_max_tp((pz_backend_kind)7) == 0);
#ifdef PZ_HAVE_CUDA
  CHECK(pz_backend_max_tp(PZ_BACKEND_CUDA) >= 1);
#else
  CHECK_ST(pz_backend_create(PZ_BACKEND_CUDA, g, NULL, &b), PZ_ERR_UNSUPPORTED);
  CHECK(b == NULL && pz_backend_max_tp(PZ_BACKEND_CUDA) == 0);
#endif
  CHECK_ST(pz_backend_step(NULL, 1, NULL, NULL, NULL), PZ_ERR_INVALID_ARG);
  CHECK_ST(pz_backend_logits(NULL, 1, NULL), PZ_ERR_INVALID_ARG);
  CHECK_ST(pz_backend_capture(NULL, 1), PZ_ERR_INVALID_ARG);
  CHECK_ST(pz_backend_set_prezero(NULL, 0), PZ_ERR_INVALID_ARG);
  CHECK(pz_backend_device_desc(NULL) == NULL && pz_backend_padded_m(NULL, 5) == 5 && !strcmp(pz_backend_name(NULL), "none"));
  pz_backend_destroy(NULL);
  pz_graph_free(g);
  TEST_DONE();
}
