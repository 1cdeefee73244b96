/* pz_compare_decode (the timed A B A B rounds of `prezero compare`, needs no GPU) driven with the
 * CPU executor on the tiny preset: OFF and ON of one seed decode the same tokens and bit-identical
 * logits; engines of two seeds are caught (first differing token found by an independent
 * decode); timings are consistent (tokens/s per GPU = conc * 1000 / TPOT ms / tp, E2E = TPOT x
 * OSL); the steps ran in order OFF ON OFF ON from position isl. */
#include <string.h>
#include "backend/cpu/cpu_backend.h"
#include "compare/compare.h"
#include "model/builder.h"
#include "model/config.h"
#include "passes/passes.h"
#include "pz_test.h"

typedef struct eng {
  pz_cpu_exec *x;
  int id;           /* 0 = OFF, 1 = ON */
  int steps;
} eng;

static int order[64], n_order; /* engine id of every round start */
static int bad_pos;             /* steps whose positions were not isl + step */
static int isl_used;

static pz_status step(void *e, int m, const int32_t *tok, const int32_t *pos, int32_t *next) {
  eng *E = e;
  if (pos[0] == isl_used && n_order < 64) order[n_order++] = E->id;
  for (int i = 0; i < m; i++) bad_pos += pos[i] != pos[0];
  E->steps++;
  return pz_cpu_exec_step(E->x, m, tok, pos, next);
}
static pz_status logits(void *e, int m, float *out) { return pz_cpu_exec_logits(((eng *)e)->x, m, out); }
static const pz_cmp_engine_ops ops = {step, logits};

static pz_cpu_exec *make(const pz_model_config *mc, int tp, int prezero, uint64_t seed, int m, int max_ctx) {
  pz_graph *g = NULL;
  pz_build_opts bo = PZ_BUILD_OPTS_INIT;
  bo.tp = tp;
  bo.m = m;
  bo.max_ctx = max_ctx;
  CHECK_OK(pz_build_decode_graph(mc, &bo, &g));
  pz_pass_opts po = PZ_PASS_OPTS_INIT;
  po.prezero = prezero;
  CHECK_OK(pz_run_passes(g, &po, NULL, NULL));
  pz_cpu_exec_opts xo = PZ_CPU_EXEC_OPTS_INIT;
  xo.seed = seed;
  xo.threads = 2;
  pz_cpu_exec *x = NULL;
  CHECK_OK(pz_cpu_exec_create(g, &xo, &x));
  pz_graph_free(g);
  return x;
}

int main(void) {
  pz_model_config mc;
  CHECK_OK(pz_config_load("tiny", &mc));
  pz_cmp_opts o = PZ_CMP_OPTS_INIT;
  o.model = "tiny";
  o.tp = 2;
  o.isl = 12;
  o.osl = 5;
  o.n_conc = 2;
  o.conc[0] = 2;
  o.conc[1] = 3;
  o.rounds = 2;
  isl_used = o.isl;
  const int max_ctx = o.isl + o.osl;
  int32_t first[3] = {5, 77, 901};

  /* Same seed: identical. */
  eng off = {make(&mc, 2, 0, 42, 3, max_ctx), 0, 0}, on = {make(&mc, 2, 1, 42, 3, max_ctx), 1, 0};
  pz_cmp_point pt;
  memset(&pt, 0, sizeof pt);
  n_order = 0;
  CHECK_OK(pz_compare_decode(&o, 1, &ops, (void *[2]){&off, &on}, mc.vocab_size, first, &pt));
  CHECK(pt.conc == 3 && pt.rounds == 2);
  CHECK(pt.tokens_identical && pt.first_token_mismatch == -1);
  CHECK(pt.logits_identical && pt.logits_max_abs_diff == 0.0);
  CHECK(pt.logits_off_spread == 0.0); /* the CPU reference is deterministic */
  CHECK(off.steps == 2 * o.osl && on.steps == 2 * o.osl);
  CHECK(n_order == 4 && order[0] == 0 && order[1] == 1 && order[2] == 0 && order[3] == 1);
  CHECK(bad_pos == 0);
  CHECK(pt.tpot_on_ms > 0 && pt.tpot_off_ms > 0);
  CHECK_NEAR(pt.tput_on, 3 * 1000.0 / pt.tpot_on_ms / 2, 1e-9 * pt.tput_on);
  CHECK_NEAR(pt.tput_off, 3 * 1000.0 / pt.tpot_off_ms / 2, 1e-9 * pt.tput_off);
  CHECK_NEAR(pt.e2e_on_s, pt.tpot_on_ms * o.osl / 1000.0, 1e-12);
  /* the median of two rounds is their mean */
  CHECK_NEAR(pt.tpot_off_ms, 0.5 * (pt.tpot_off_rounds_ms[0] + pt.tpot_off_rounds_ms[1]), 1e-9);

  /* Two seeds: the first differing token, found independently by decoding both here. */
  eng other = {make(&mc, 2, 1, 43, 3, max_ctx), 1, 0};
  memset(&pt, 0, sizeof pt);
  o.rounds = 1;
  CHECK_OK(pz_compare_decode(&o, 0, &ops, (void *[2]){&off, &other}, mc.vocab_size, first, &pt));
  CHECK(!pt.tokens_identical && !pt.logits_identical && pt.logits_max_abs_diff > 0);
  CHECK(pt.logits_off_spread == -1.0); /* one round: no spread */
  int32_t ta[2], tb[2], na[2], nb[2], pos[2];
  memcpy(ta, first, sizeof ta);
  memcpy(tb, first, sizeof tb);
  int64_t want = -1;
  for (int s = 0; s < o.osl && want < 0; s++) {
    for (int i = 0; i < 2; i++) pos[i] = o.isl + s;
    CHECK_OK(pz_cpu_exec_step(off.x, 2, ta, pos, na));
    CHECK_OK(pz_cpu_exec_step(other.x, 2, tb, pos, nb));
    for (int i = 0; i < 2 && want < 0; i++)
      if (na[i] != nb[i]) want = (int64_t)s * 2 + i;
    memcpy(ta, na, sizeof ta);
    memcpy(tb, nb, sizeof tb);
  }
  CHECK(want >= 0);
  CHECK(pt.first_token_mismatch == want);

  pz_cpu_exec_free(off.x);
  pz_cpu_exec_free(on.x);
  pz_cpu_exec_free(other.x);
  TEST_DONE();
}
