/* Checkpoint tensors the checkpoint tests write (test_checkpoint, test_int4_checkpoint): an owned
 * list of named tensors, and a graph's hash-filled weights exported in the published layout. */
#ifndef PZ_TESTS_HF_EXPORT_TEST_H
#define PZ_TESTS_HF_EXPORT_TEST_H
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "backend/cpu/cpu_backend.h"
#include "core/dtype.h"
#include "model/builder.h"
#include "model/safetensors.h"
#include "pz_test.h"

/* One checkpoint tensor: an owned copy of its nbytes bytes (dtype, shape[0..ndim)). */
typedef struct { char name[300]; pz_st_dtype dtype; int ndim; int64_t shape[3]; void *data; size_t nbytes; } ent;
/* Up to 600 tensors, e[0..n). */
typedef struct { ent e[600]; int n; } ents;

/* Appends a tensor named `name` of dtype dt and shape[0..ndim) to s: its bytes zeroed, then copied
 * from src when src is set. Returns the new entry. */
static ent *add(ents *s, const char *name, pz_st_dtype dt, int ndim, const int64_t *shape, const void *src) {
  ent *e = &s->e[s->n++];
  snprintf(e->name, sizeof e->name, "%s", name);
  e->dtype = dt;
  e->ndim = ndim;
  size_t n = 1;
  for (int d = 0; d < ndim; d++) { e->shape[d] = shape[d]; n *= (size_t)shape[d]; }
  e->nbytes = n * pz_st_dtype_size(dt);
  e->data = calloc(1, e->nbytes ? e->nbytes : 1);
  if (src) memcpy(e->data, src, e->nbytes);
  return e;
}

static void free_ents(ents *s) {
  for (int i = 0; i < s->n; i++) free(s->e[i].data);
  s->n = 0;
}

static const pz_tensor *find_t(const pz_graph *g, const char *name) {
  for (int i = 0; i < g->n_tensors; i++)
    if (!strcmp(g->tensors[i].name, name)) return &g->tensors[i];
  return NULL;
}

/* The hash-filled weights (seed `seed`) of the TP-1 decode graph of mc, exported into out in the
 * published Hugging Face layout: "model." prefix (not on lm_head.weight), q_a_proj and
 * kv_a_proj_with_mqa separate, kv_b_proj whole [heads * (nope + v), kv_lora] bf16, one 2-D
 * tensor per routed expert. Exits the test on a build failure. */
static void pz_test_export_hf(const pz_model_config *mc, uint64_t seed, ents *out) {
  pz_build_opts bo = {.tp = 1, .m = 1, .max_ctx = 8, .layers = 0};
  pz_graph *g = NULL;
  CHECK_OK(pz_build_decode_graph(mc, &bo, &g));
  pz_cpu_exec_opts xo = PZ_CPU_EXEC_OPTS_INIT;
  xo.seed = seed;
  xo.threads = 1;
  pz_cpu_exec *x = NULL;
  CHECK_OK(pz_cpu_exec_create(g, &xo, &x));
  if (!x) exit(1);
  const int64_t nope = mc->qk_nope_head_dim, v = mc->v_head_dim, kvl = mc->kv_lora_rank;
  char nm[200];
  for (int i = 0; i < g->n_tensors; i++) {
    const pz_tensor *t = &g->tensors[i];
    if (t->kind != PZ_T_WEIGHT) continue;
    const void *d = pz_cpu_exec_data(x, 0, t->id);
    const pz_st_dtype dt = t->dtype == PZ_F32 ? PZ_ST_F32 : PZ_ST_BF16;
    int L = -1, used = 0;
    const char *rest = sscanf(t->name, "layers.%d.%n", &L, &used) == 1 && used ? t->name + used : NULL;
    if (rest && !strcmp(rest, "self_attn.fused_qkv_a_proj.weight")) {
      const int64_t H = t->ne[1], q = mc->q_lora_rank;
      snprintf(nm, sizeof nm, "model.layers.%d.self_attn.q_a_proj.weight", L);
      add(out, nm, dt, 2, (int64_t[]){q, H}, d);
      snprintf(nm, sizeof nm, "model.layers.%d.self_attn.kv_a_proj_with_mqa.weight", L);
      add(out, nm, dt, 2, (int64_t[]){t->ne[0] - q, H}, (const pz_bf16 *)d + q * H);
    } else if (rest && !strcmp(rest, "self_attn.kv_b_proj.w_uk")) {
      char uvn[200];
      snprintf(uvn, sizeof uvn, "layers.%d.self_attn.kv_b_proj.w_uv", L);
      const pz_bf16 *uk = d, *uv = pz_cpu_exec_data(x, 0, find_t(g, uvn)->id);
      const int64_t heads = t->ne[0];
      snprintf(nm, sizeof nm, "model.layers.%d.self_attn.kv_b_proj.weight", L);
      ent *e = add(out, nm, PZ_ST_BF16, 2, (int64_t[]){heads * (nope + v), kvl}, NULL);
      pz_bf16 *o = e->data;
      for (int64_t h = 0; h < heads; h++) {
        memcpy(o + h * (nope + v) * kvl, uk + h * nope * kvl, sizeof(pz_bf16) * (size_t)(nope * kvl));
        memcpy(o + (h * (nope + v) + nope) * kvl, uv + h * v * kvl, sizeof(pz_bf16) * (size_t)(v * kvl));
      }
    } else if (rest && !strcmp(rest, "self_attn.kv_b_proj.w_uv")) {
      continue;
    } else if (rest && !strncmp(rest, "mlp.experts.", 12) && t->ndim == 3) {
      for (int64_t e = 0; e < t->ne[0]; e++) {
        snprintf(nm, sizeof nm, "model.layers.%d.mlp.experts.%lld.%s", L, (long long)e, rest + 12);
        add(out, nm, dt, 2, (int64_t[]){t->ne[1], t->ne[2]}, (const pz_bf16 *)d + e * t->ne[1] * t->ne[2]);
      }
    } else {
      snprintf(nm, sizeof nm, "%s%s", strcmp(t->name, "lm_head.weight") ? "model." : "", t->name);
      add(out, nm, dt, t->ndim, t->ne, d);
    }
  }
  pz_cpu_exec_free(x);
  pz_graph_free(g);
}
#endif
