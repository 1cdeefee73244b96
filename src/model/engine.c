/* Public decode engine (include/prezero.h): config -> decode graph (builder) -> graph passes
 * (prezero) -> CPU executor holding every TP rank; tracks each sequence's position. */
#include <stdlib.h>
#include <string.h>
#include "backend/cpu/cpu_backend.h"
#include "model/builder.h"
#include "passes/passes.h"

_Static_assert(PZ_ENGINE_MAX_BATCH == PZ_MAX_BATCH, "public and builder batch limits agree");

struct pz_engine {
  pz_model_config cfg;
  pz_engine_config ec;
  pz_graph *g;
  pz_cpu_exec *cpu;
  int prezero;
  int64_t context, max_ctx;
  int32_t *pos;       /* [max_batch]: next position of each sequence */
  int last_m;
};

static pz_status check_config(const pz_engine_config *c, const pz_model_config *mc) {
  if (c->max_batch < 1 || c->max_batch > PZ_ENGINE_MAX_BATCH)
    return pz_error(PZ_ERR_INVALID_ARG, "batch %d is out of range 1..%d", c->max_batch, PZ_ENGINE_MAX_BATCH);
  if (c->tp < 1 || mc->num_attention_heads % c->tp)
    return pz_error(PZ_ERR_INVALID_ARG, "TP degree %d does not divide num_attention_heads (%lld) of %s; use a TP that divides it",
                    c->tp, (long long)mc->num_attention_heads, mc->name);
  if (c->context < 0 || c->context >= mc->max_position_embeddings)
    return pz_error(PZ_ERR_INVALID_ARG, "context %d is out of range 0..%lld (max_position_embeddings %lld of %s)",
                    c->context, (long long)mc->max_position_embeddings - 1, (long long)mc->max_position_embeddings,
                    mc->name);
  if (c->max_steps < 1)
    return pz_error(PZ_ERR_INVALID_ARG, "max_steps %d must be at least 1", c->max_steps);
  if ((int64_t)c->context + c->max_steps > mc->max_position_embeddings)
    return pz_error(PZ_ERR_INVALID_ARG, "context %d + %d decode steps exceeds max_position_embeddings (%lld) of %s",
                    c->context, c->max_steps, (long long)mc->max_position_embeddings, mc->name);
  if (c->layers < 0 || c->layers > mc->num_hidden_layers)
    return pz_error(PZ_ERR_INVALID_ARG, "layers %d is out of range 1..%lld (num_hidden_layers of %s)", c->layers,
                    (long long)mc->num_hidden_layers, mc->name);
  if (c->device != PZ_DEVICE_CPU)
    return pz_error(PZ_ERR_UNSUPPORTED, "device %d is not available in this build; use the CPU device", (int)c->device);
  return PZ_OK;
}

pz_status pz_engine_create(const pz_engine_config *cfg, pz_engine **out) {
  if (!cfg || !out) return pz_error(PZ_ERR_INVALID_ARG, "pz_engine_create: NULL argument");
  *out = NULL;
  pz_engine *e = calloc(1, sizeof *e);
  if (!e) return pz_error(PZ_ERR_OOM, "engine allocation");
  pz_status st;
  e->ec = *cfg;
  e->ec.model = NULL; /* not owned */
  PZ_CHECK_GOTO(pz_config_load(cfg->model, &e->cfg), st, fail);
  PZ_CHECK_GOTO(check_config(cfg, &e->cfg), st, fail);
  e->context = cfg->context;
  e->max_ctx = (int64_t)cfg->context + cfg->max_steps;
  pz_build_opts bo = {.tp = cfg->tp, .m = cfg->max_batch, .max_ctx = e->max_ctx, .layers = cfg->layers};
  PZ_CHECK_GOTO(pz_build_decode_graph(&e->cfg, &bo, &e->g), st, fail);
  pz_pass_opts po = PZ_PASS_OPTS_INIT;
  po.prezero = cfg->prezero;
  e->prezero = pz_prezero_flag(&po);
  PZ_CHECK_GOTO(pz_run_passes(e->g, &po, NULL, NULL), st, fail);
  pz_cpu_exec_opts xo = PZ_CPU_EXEC_OPTS_INIT;
  xo.seed = cfg->seed;
  xo.threads = cfg->threads;
  PZ_CHECK_GOTO(pz_cpu_exec_create(e->g, &xo, &e->cpu), st, fail);
  e->pos = malloc(sizeof(int32_t) * (size_t)cfg->max_batch);
  if (!e->pos) { st = pz_error(PZ_ERR_OOM, "engine allocation"); goto fail; }
  for (int i = 0; i < cfg->max_batch; i++) e->pos[i] = cfg->context;
  *out = e;
  return PZ_OK;
fail:
  pz_engine_destroy(e);
  return st;
}

pz_status pz_engine_step(pz_engine *e, int m, const int32_t *tokens_in, int32_t *tokens_out) {
  if (!e || !tokens_in || !tokens_out) return pz_error(PZ_ERR_INVALID_ARG, "pz_engine_step: NULL argument");
  if (m < 1 || m > e->ec.max_batch)
    return pz_error(PZ_ERR_INVALID_ARG, "step batch %d is out of range 1..%d (the engine's max_batch)", m, e->ec.max_batch);
  for (int i = 0; i < m; i++) {
    if (tokens_in[i] < 0 || tokens_in[i] >= e->cfg.vocab_size)
      return pz_error(PZ_ERR_INVALID_ARG, "token %d of row %d is out of range 0..%lld", tokens_in[i], i,
                      (long long)e->cfg.vocab_size - 1);
    if (e->pos[i] >= e->max_ctx)
      return pz_error(PZ_ERR_INVALID_ARG, "sequence %d's KV cache is full (%lld tokens); create the engine with more max_steps",
                      i, (long long)e->max_ctx);
  }
  PZ_CHECK(pz_cpu_exec_step(e->cpu, m, tokens_in, e->pos, tokens_out));
  for (int i = 0; i < m; i++) e->pos[i]++;
  e->last_m = m;
  return PZ_OK;
}

pz_status pz_engine_logits(const pz_engine *e, int m, float *out) {
  if (!e || !out) return pz_error(PZ_ERR_INVALID_ARG, "pz_engine_logits: NULL argument");
  if (e->last_m == 0) return pz_error(PZ_ERR_INVALID_ARG, "pz_engine_logits: no step has run yet");
  if (m < 1 || m > e->last_m)
    return pz_error(PZ_ERR_INVALID_ARG, "pz_engine_logits: %d rows requested, the last step had %d", m, e->last_m);
  return pz_cpu_exec_logits(e->cpu, m, out);
}

pz_status pz_engine_get_info(const pz_engine *e, pz_engine_info *info) {
  if (!e || !info) return pz_error(PZ_ERR_INVALID_ARG, "pz_engine_get_info: NULL argument");
  memset(info, 0, sizeof *info);
  snprintf(info->model, sizeof info->model, "%s", e->cfg.name);
  info->tp = e->ec.tp;
  info->max_batch = e->ec.max_batch;
  info->n_layers = e->g->info.n_layers;
  info->prezero = e->prezero;
  info->hidden_size = e->cfg.hidden_size;
  info->vocab_size = e->cfg.vocab_size;
  info->context = e->context;
  info->max_ctx = e->max_ctx;
  for (int i = 0; i < e->g->n_tensors; i++) {
    const pz_tensor *t = &e->g->tensors[i];
    if (t->view_of >= 0) continue;
    int64_t bytes = pz_tensor_numel(t) * (int64_t)pz_dtype_size(t->dtype) * e->ec.tp;
    if (t->kind == PZ_T_WEIGHT) info->weight_bytes += bytes;
    else if (t->kind == PZ_T_STATE && t->ndim == 3) info->kv_cache_bytes += bytes;
  }
  return PZ_OK;
}

pz_status pz_engine_dump_graph(const pz_engine *e, FILE *f, int dot) {
  if (!e || !f) return pz_error(PZ_ERR_INVALID_ARG, "pz_engine_dump_graph: NULL argument");
  return dot ? pz_graph_dump_dot(e->g, f) : pz_graph_dump_text(e->g, f);
}

void pz_engine_destroy(pz_engine *e) {
  if (!e) return;
  pz_cpu_exec_free(e->cpu);
  pz_graph_free(e->g);
  free(e->pos);
  free(e);
}
