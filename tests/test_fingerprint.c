/* pz_graph_fingerprint, the check the ranks of a one-process-per-rank group make before their
 * first collective: equal graphs (built twice, cloned) agree; a graph that differs anywhere (layers,
 * batch, TP, the prezero rewrite, one node's parameter, one tensor's shape, and what the dump does
 * not print or rounds: the rope base, routed_scaling_factor, an eps one ulp off) does not. FNV-1a itself against the published test vectors. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "core/fingerprint.h"
#include "model/builder.h"
#include "model/config.h"
#include "passes/prezero.h"
#include "pz_test.h"

static pz_graph *build(const char *preset, int tp, int m, int layers) {
  pz_model_config mc;
  CHECK_OK(pz_config_load(preset, &mc));
  pz_build_opts bo = PZ_BUILD_OPTS_INIT;
  bo.tp = tp;
  bo.m = m;
  bo.max_ctx = 64;
  bo.layers = layers;
  pz_graph *g = NULL;
  CHECK_OK(pz_build_decode_graph(&mc, &bo, &g));
  return g;
}

static uint64_t fp(const pz_graph *g) {
  uint64_t h = 0;
  CHECK_OK(pz_graph_fingerprint(g, &h));
  return h;
}

/* tiny with another rms_norm_eps: the same shapes (test_engine_mp's phase 4 relies on that), another fingerprint */
static void eps_config(void) {
  pz_model_config mc;
  CHECK_OK(pz_config_load("tiny", &mc));
  pz_build_opts bo = PZ_BUILD_OPTS_INIT;
  bo.tp = 2;
  bo.m = 4;
  bo.max_ctx = 64;
  pz_graph *a = NULL, *b = NULL;
  CHECK_OK(pz_build_decode_graph(&mc, &bo, &a));
  mc.rms_norm_eps *= 2;
  CHECK_OK(pz_build_decode_graph(&mc, &bo, &b));
  if (!a || !b) return;
  CHECK(fp(a) != fp(b));
  CHECK(a->n_tensors == b->n_tensors);
  for (int i = 0; i < a->n_tensors && i < b->n_tensors; i++)
    CHECK(pz_tensor_span(&a->tensors[i]) == pz_tensor_span(&b->tensors[i]) && a->tensors[i].dtype == b->tensors[i].dtype);
  pz_graph_free(a);
  pz_graph_free(b);
}

int main(void) {
  eps_config();
  /* FNV-1a 64 test vectors (Fowler / Noll / Vo's published table): "" and "a", "foobar". */
  CHECK(pz_fnv1a64(PZ_FNV1A64_OFFSET, "", 0) == 0xcbf29ce484222325ULL);
  CHECK(pz_fnv1a64(PZ_FNV1A64_OFFSET, "a", 1) == 0xaf63dc4c8601ec8cULL);
  CHECK(pz_fnv1a64(PZ_FNV1A64_OFFSET, "foobar", 6) == 0x85944171f73967e8ULL);

  const char *presets[] = {"kimi_k2", "deepseek_v2_lite", "tiny"};
  for (int p = 0; p < 3; p++) {
    pz_graph *a = build(presets[p], 2, 16, 2), *b = build(presets[p], 2, 16, 2);
    if (!a || !b) return 1;
    const uint64_t fa = fp(a);
    CHECK(fa == fp(b));
    CHECK(fa == fp(a)); /* deterministic */
    pz_graph *c = NULL;
    CHECK_OK(pz_graph_clone(a, &c));
    CHECK(c && fp(c) == fa);

    pz_graph *l3 = build(presets[p], 2, 16, 3), *m8 = build(presets[p], 2, 8, 2), *t1 = build(presets[p], 1, 16, 2);
    CHECK(fp(l3) != fa);
    CHECK(fp(m8) != fa);
    CHECK(fp(t1) != fa);

    /* the prezero rewrite (a rank with other PREZERO_DISABLE_PASSES) */
    pz_graph *on = NULL;
    CHECK_OK(pz_graph_clone(a, &on));
    CHECK_OK(pz_pass_prezero(on, NULL, NULL));
    CHECK(fp(on) != fa);

    /* one parameter of one node, one dim of one tensor */
    int k = -1;
    for (int i = 0; i < c->n_nodes && k < 0; i++)
      if (c->nodes[i].op == PZ_OP_AR_RMSNORM) k = i;
    CHECK(k >= 0);
    if (k >= 0) {
      c->nodes[k].p.norm.eps *= 2;
      CHECK(fp(c) != fa);
      c->nodes[k].p.norm.eps /= 2;
      CHECK(fp(c) == fa);
      const int t = c->nodes[k].dst[0];
      c->tensors[t].ne[1] += 8;
      CHECK(fp(c) != fa);
    }
    /* what the dump does not print, or rounds: the rope base, the routed scaling, an eps one ulp off */
    pz_graph *d = NULL;
    CHECK_OK(pz_graph_clone(a, &d));
    int changed = 0;
    for (int i = 0; i < d->n_nodes; i++) {
      pz_node *n = &d->nodes[i];
      uint64_t before = fp(d);
      if (n->op == PZ_OP_MLA_ATTN) n->p.mla.rope.theta *= 1.5f;
      else if (n->op == PZ_OP_GQA_ATTN) n->p.gqa.rope.theta *= 1.5f;
      else if (n->op == PZ_OP_MOE) n->p.moe.routed_scaling_factor += 0.25f;
      else if (n->op == PZ_OP_AR_RMSNORM) n->p.norm.eps = nextafterf(n->p.norm.eps, 1.0f);
      else continue;
      CHECK(fp(d) != before);
      changed++;
    }
    CHECK(changed >= 3);
    pz_graph_free(d);
    CHECK_ST(pz_graph_fingerprint(NULL, &(uint64_t){0}), PZ_ERR_INVALID_ARG);
    CHECK_ST(pz_graph_fingerprint(a, NULL), PZ_ERR_INVALID_ARG);
    pz_graph_free(a); pz_graph_free(b); pz_graph_free(c); pz_graph_free(l3); pz_graph_free(m8); pz_graph_free(t1);
    pz_graph_free(on);
  }
  TEST_DONE();
}
