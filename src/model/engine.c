/* Public decode engine (include/prezero.h): config -> decode graph (builder) -> graph passes
 * (prezero) -> a backend holding every TP rank (backend/backend.h: the CPU or the CUDA one);
 * tracks each sequence's position. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "backend/backend.h"
#include "core/pool.h"
#include "model/builder.h"
#include "core/options.h"
#include "passes/passes.h"
#include "model/checkpoint.h"
#include "model/quant_synth.h"
#ifdef PZ_HAVE_CUDA
#include "backend/cuda/ar_mp.h"   /* one rank per process: the communicator's host exchange */
#include "backend/cuda/runtime.h" /* visible GPUs, the memory plan */
#include "prezero/allreduce.h"
#endif

_Static_assert(PZ_ENGINE_MAX_BATCH == PZ_MAX_BATCH, "public and builder batch limits agree");

struct pz_engine {
  pz_model_config cfg;
  pz_engine_config ec;
  pz_graph *g;        /* after the passes (what the CPU backend runs and the dumps show) */
  pz_graph *g_off;    /* before the passes, kept when prezero is on: the CUDA backend plans per batch size */
  pz_runtime_opts ro; /* the options at creation (cfg->options, else the environment) */
  pz_backend *be;     /* the backend the steps run on */
  int layers_fitted;
  int64_t device_bytes;
  int prezero;
  int64_t context, max_ctx;
  int32_t *pos;       /* [max_batch]: next position of each sequence */
  float *lg;          /* CPU: the last step's logits, read back to check they are finite */
  size_t lg_cap;      /* floats in lg */
  pz_quant_synth_ctx synth; /* weight source of quantised graphs without a checkpoint */
  int last_m;
#ifdef PZ_HAVE_CUDA
  pz_ar_comm *comm;   /* one rank per process (cfg->id_file): this rank's communicator, owned */
  pz_ar_unique_id id;
  char *id_file;      /* set when joined: rank 0 removes it and the rendezvous at destroy */
  int rank;
#endif
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
  if (c->id_file) {
    if (c->device != PZ_DEVICE_CUDA)
      return pz_error(PZ_ERR_INVALID_ARG, "one TP rank per process (id_file) needs the CUDA device; use --device cuda");
    if (!c->id_file[0]) return pz_error(PZ_ERR_INVALID_ARG, "id_file is empty; give a path every rank sees");
    if (c->rank < 0 || c->rank >= c->tp)
      return pz_error(PZ_ERR_INVALID_ARG, "rank %d is out of range 0..%d (TP %d)", c->rank, c->tp - 1, c->tp);
  }
  if (c->layers < 0 || c->layers > mc->num_hidden_layers)
    return pz_error(PZ_ERR_INVALID_ARG, "layers %d is out of range 1..%lld (num_hidden_layers of %s)", c->layers,
                    (long long)mc->num_hidden_layers, mc->name);
#ifdef PZ_HAVE_CUDA
  if (c->device != PZ_DEVICE_CPU && c->device != PZ_DEVICE_CUDA)
    return pz_error(PZ_ERR_INVALID_ARG, "device %d is unknown; use the CPU or CUDA device", (int)c->device);
#else
  if (c->device == PZ_DEVICE_CUDA)
    return pz_error(PZ_ERR_UNSUPPORTED, "the CUDA device is not available: this build has no CUDA backend (nvcc was not "
                    "found, or PZ_WITH_CUDA=OFF); rebuild with nvcc present (PZ_WITH_CUDA=ON) or use the CPU device "
                    "(--device cpu)");
  if (c->device != PZ_DEVICE_CPU)
    return pz_error(PZ_ERR_UNSUPPORTED, "device %d is not available in this build (built without CUDA); use the CPU device",
                    (int)c->device);
#endif
  return PZ_OK;
}

int pz_gpu_count(void) {
#ifdef PZ_HAVE_CUDA
  return pz_cuda_device_count();
#else
  return 0;
#endif
}

static pz_status build_graph(pz_engine *e, const pz_engine_config *cfg, int layers) {
  pz_graph_free(e->g);
  pz_graph_free(e->g_off);
  e->g = e->g_off = NULL;
  pz_build_opts bo = {.tp = cfg->tp, .m = cfg->max_batch, .max_ctx = e->max_ctx, .layers = layers};
  PZ_CHECK(pz_build_decode_graph(&e->cfg, &bo, &e->g));
  pz_pass_opts po = PZ_PASS_OPTS_INIT;
  po.prezero = cfg->prezero;
  pz_pass_opts_apply(&po, &e->ro);
  /* On only when the pass really runs (PREZERO_DISABLE_PASSES=prezero wins over the flag). */
  e->prezero = pz_prezero_flag(&po) && !pz_pass_disabled_in(po.disable, "prezero");
  if (e->prezero && cfg->device == PZ_DEVICE_CUDA) PZ_CHECK(pz_graph_clone(e->g, &e->g_off));
  return pz_run_passes(e->g, &po, NULL, NULL);
}

#ifdef PZ_HAVE_CUDA
/* Memory plan on the GPUs of ranks 0..tp-1 (one rank per process: on its own GPU, then agreed): with layers = 0 keep the leading layers that fit
 * (rebuilding the graph when fewer than all do); with layers = N fail clearly when they do not. */
static pz_status fit_cuda(pz_engine *e, const pz_engine_config *cfg) {
  const int tp = cfg->tp, have = pz_cuda_device_count();
  if (have == 0) return pz_error(PZ_ERR_NO_DEVICE, "no CUDA GPU is visible; use the CPU device (--device cpu)");
  const int max_tp = pz_backend_max_tp(PZ_BACKEND_CUDA);
  if (tp > max_tp || (!e->comm && tp > have))
    return pz_error(PZ_ERR_NO_DEVICE, "TP %d needs %d GPUs in this process but %d %s visible; use a TP of at most %d",
                    tp, tp, have, have == 1 ? "is" : "are", have < max_tp ? have : max_tp);
  /* The one memory plan (runtime.h); the executor counts per-batch prezero buffers when given the OFF graph.
   * One rank per process: planned on the GPUs the ranks use, then the fewest layers any rank fits. */
  pz_cuda_mem_plan mp;
  const pz_graph *gp = e->g_off ? e->g_off : e->g;
  const int mine = e->comm ? pz_ar_comm_device(e->comm) : 0; /* one rank per process: its own GPU only */
  PZ_CHECK(e->comm ? pz_cuda_plan_memory_on(gp, e->g_off != NULL, 1, &mine, e->ro.cuda_reserve_mb, 0, &mp)
                   : pz_cuda_plan_memory(gp, e->g_off != NULL, tp, e->ro.cuda_reserve_mb, 0, &mp));
  const int n = mp.n_layers;
  int fit = mp.fit;
  if (e->comm) {
    pz_status xs = pz_cuda_mem_plan_fit_ranks(&mp, e->comm, have, &fit);
    if (xs != PZ_OK) {
      pz_cuda_mem_plan_free(&mp);
      return xs;
    }
  }
  const double G = 1073741824.0;
  pz_status st = PZ_OK;
  if (fit == 0)
    st = pz_error(PZ_ERR_OOM, "not even one layer of %s fits: %.2f GiB per GPU outside the layers + %.2f GiB for layer 0, "
                  "%.2f GiB usable (free minus reserve); use a higher --tp, a smaller --batch or --context",
                  e->cfg.name, mp.cum[0] / G, n > 0 ? (mp.cum[1] - mp.cum[0]) / G : 0.0, mp.budget / G);
  else if (fit < n && cfg->layers > 0)
    st = pz_error(PZ_ERR_OOM, "--layers %d of %s needs %.2f GiB per GPU but %.2f GiB are usable (free minus reserve); "
                  "at most %d layers fit; use --layers %d or less, or a higher --tp",
                  n, e->cfg.name, mp.cum[n] / G, mp.budget / G, fit, fit);
  pz_cuda_mem_plan_free(&mp);
  if (st != PZ_OK) return st;
  if (fit < n) {
    PZ_CHECK(build_graph(e, cfg, fit));
    e->layers_fitted = 1;
  }
  return PZ_OK;
}
#endif

#ifdef PZ_HAVE_CUDA
/* One rank per process: rank 0 makes the id and writes cfg->id_file, the others read it; then
 * every rank joins the communicator (prezero/allreduce.h) on GPU rank % visible. */
static pz_status join_group(pz_engine *e, const pz_engine_config *cfg) {
  const int timeout = cfg->timeout_ms > 0 ? cfg->timeout_ms : 60000;
  char *path = strdup(cfg->id_file);
  if (!path) return pz_error(PZ_ERR_OOM, "engine allocation");
  e->rank = cfg->rank;
  pz_status st = pz_ar_comm_join_file(cfg->tp, cfg->rank, cfg->id_file, -1 /* GPU rank % visible */, cfg->max_batch,
                                      (e->cfg.hidden_size + 7) / 8 * 8, timeout, &e->comm, &e->id);
  if (st != PZ_OK) { /* the join cleaned up after itself */
    free(path);
    return st;
  }
  e->id_file = path; /* destroy leaves the group (rank 0 removes the rendezvous and the file) */
  return PZ_OK;
}

/* One rank per process: every rank must have been created with the same settings (what the graph
 * fingerprint of the executor cannot see: the seed of the weights, the KV-cache sizes, prezero and
 * the experts' storage). Errors: PZ_ERR_INVALID_ARG naming the first field that differs, those of
 * the exchange. */
static pz_status check_same_engine(pz_engine *e, const pz_engine_config *cfg) {
  typedef struct { uint64_t seed; int64_t v[8]; } desc; /* v: in the order of names[] below */
  desc mine = {cfg->seed, {cfg->max_batch, cfg->context, cfg->max_steps, cfg->layers, e->prezero, cfg->quant,
                           e->cfg.num_hidden_layers, e->cfg.hidden_size}};
  desc all[PZ_AR_MP_MAX_WORLD];
  PZ_CHECK(pz_ar_comm_allgather_host(e->comm, PZ_HX_ENGINE, &mine, sizeof mine, all));
  static const char *names[] = {"max_batch", "context", "max_steps", "layers", "prezero", "quant",
                                "num_hidden_layers", "hidden_size"};
  for (int q = 1; q < cfg->tp; q++) {
    if (all[q].seed != all[0].seed)
      return pz_error(PZ_ERR_INVALID_ARG, "engine: rank %d was created with seed %llu and rank 0 with %llu: every rank "
                      "must be created with the same config", q, (unsigned long long)all[q].seed,
                      (unsigned long long)all[0].seed);
    const int64_t *a = all[q].v, *b = all[0].v;
    for (int i = 0; i < 8; i++)
      if (a[i] != b[i])
        return pz_error(PZ_ERR_INVALID_ARG, "engine: rank %d was created with %s %lld and rank 0 with %lld: every rank "
                        "must be created with the same config", q, names[i], (long long)a[i], (long long)b[i]);
  }
  return PZ_OK;
}
#endif

/* Synthetic seeded weights for a graph with quantised experts (model/quant_synth.h); else the
 * backend's own seeded fill. */
static void synth_weights(pz_engine *e, pz_backend_opts *bo) {
  if (!pz_graph_has_quant_weights(e->g)) return;
  e->synth = (pz_quant_synth_ctx){.q = {.seed = bo->seed}, .g = e->g};
  bo->load_weight = pz_quant_synth_fill_rows_hook;
  bo->load_user = &e->synth;
}

pz_status pz_engine_create(const pz_engine_config *cfg, pz_engine **out) {
  if (!cfg || !out) return pz_error(PZ_ERR_INVALID_ARG, "pz_engine_create: NULL argument");
  *out = NULL;
  /* The ranges prezero.h documents (they were taken as anything, and "" as the tiny preset). */
  if (cfg->threads < 0 || cfg->threads > 1024)
    return pz_error(PZ_ERR_INVALID_ARG, "threads %d is out of range; use 1..1024, or 0 for the default", cfg->threads);
  if (cfg->prezero < -1 || cfg->prezero > 1)
    return pz_error(PZ_ERR_INVALID_ARG, "prezero %d is not -1, 0 or 1; use 1 (on), 0 (off) or -1 (from the options)",
                    cfg->prezero);
  if (cfg->model_dir && !cfg->model_dir[0])
    return pz_error(PZ_ERR_INVALID_ARG, "model_dir is empty; give a checkpoint directory, or NULL for seeded weights");
  if (!cfg->model_dir && cfg->model && !cfg->model[0])
    return pz_error(PZ_ERR_INVALID_ARG, "model is empty; give a preset name or a config.json path, or NULL for \"tiny\"");
  pz_engine *e = calloc(1, sizeof *e);
  if (!e) return pz_error(PZ_ERR_OOM, "engine allocation");
  pz_status st;
  e->ec = *cfg;
  e->ec.model = NULL; /* not owned */
  e->ec.options = NULL;
  PZ_CHECK_GOTO(pz_runtime_opts_take(&e->ro, cfg->options, NULL, "fix or unset that variable"), st, fail);
  if (cfg->model_dir) PZ_CHECK_GOTO(pz_checkpoint_load_config(cfg->model_dir, &e->cfg), st, fail);
  else PZ_CHECK_GOTO(pz_config_load(cfg->model, &e->cfg), st, fail);
  PZ_CHECK_GOTO(check_config(cfg, &e->cfg), st, fail);
  if (cfg->quant != PZ_QUANT_AUTO) { /* --quant: synthetic weights in that storage */
    if (cfg->quant < PZ_QUANT_AUTO || cfg->quant > PZ_QUANT_FP8) {
      st = pz_error(PZ_ERR_INVALID_ARG, "quant %d is not one of auto, bf16, int4, fp8", cfg->quant);
      goto fail;
    }
    if (cfg->model_dir) {
      st = pz_error(PZ_ERR_INVALID_ARG, "--quant sets synthetic weights; a checkpoint's weights come as stored (drop --quant "
                    "or --model)");
      goto fail;
    }
    pz_quant_config_synthetic(cfg->quant == PZ_QUANT_INT4 ? PZ_WQ_INT4 : cfg->quant == PZ_QUANT_FP8 ? PZ_WQ_FP8 : PZ_WQ_NONE,
                              &e->cfg.quant);
  }
  e->context = cfg->context;
  e->max_ctx = (int64_t)cfg->context + cfg->max_steps;
  PZ_CHECK_GOTO(build_graph(e, cfg, cfg->layers), st, fail);
  pz_backend_opts bo = PZ_BACKEND_OPTS_INIT;
  bo.seed = cfg->seed;
  bo.runtime = &e->ro;
  pz_checkpoint *ck = NULL; /* weights from a checkpoint directory instead of the seeded fill */
  if (cfg->device == PZ_DEVICE_CUDA) {
#ifdef PZ_HAVE_CUDA
    if (cfg->id_file) {
      PZ_CHECK_GOTO(join_group(e, cfg), st, fail);
      PZ_CHECK_GOTO(check_same_engine(e, cfg), st, fail);
    }
    bo.ar_comm = e->comm;
    PZ_CHECK_GOTO(fit_cuda(e, cfg), st, fail);
    bo.prezero = e->prezero;
    pz_cpu_pool *pool = NULL, *prev = pz_cpu_pool_current();
    if (cfg->model_dir) {
      PZ_CHECK_GOTO(pz_checkpoint_open_planned(cfg->model_dir, &e->cfg, e->g, &ck), st, fail);
      /* Host-side conversion (FP8 dequantisation, sharding) on the CPU workers; serial if none. */
      long cores = sysconf(_SC_NPROCESSORS_ONLN);
      int threads = cfg->threads > 0 ? cfg->threads : cores > 64 ? 64 : cores > 0 ? (int)cores : 1;
      if (pz_cpu_pool_create(threads, &pool) == PZ_OK) pz_cpu_pool_bind(pool);
      else pool = NULL;
    }
    bo.load_weight = ck ? pz_checkpoint_fill_rows : NULL;
    bo.load_user = ck;
    /* With prezero on, the backend gets the OFF graph and runs the pass per captured batch
     * size: consumers whose kernel there does not zero (not split-K) stay plain GEMMs, and a
     * size where none fires runs the OFF graph itself (cuda/exec.h, opts.prezero). */
    /* Quantised experts without a checkpoint: the CUDA executor's own device fill gives them the
     * bits of quant_synth.h (core/quant_fill.h), far faster than the host hook at Kimi size. */
    st = pz_backend_create(PZ_BACKEND_CUDA, e->g_off ? e->g_off : e->g, &bo, &e->be);
    if (pool) {
      pz_cpu_pool_bind(prev);
      pz_cpu_pool_free(pool);
    }
    pz_checkpoint_close(ck);
    if (st != PZ_OK) goto fail;
#endif
  } else {
    bo.threads = cfg->threads;
    if (cfg->model_dir) PZ_CHECK_GOTO(pz_checkpoint_open_planned(cfg->model_dir, &e->cfg, e->g, &ck), st, fail);
    bo.load_weight = ck ? pz_checkpoint_fill_rows : NULL; /* all rows of a tensor at once (= pz_checkpoint_fill) */
    bo.load_user = ck;
    if (!ck) synth_weights(e, &bo); /* quantised experts without a checkpoint (quant_synth.h) */
    st = pz_backend_create(PZ_BACKEND_CPU, e->g, &bo, &e->be);
    pz_checkpoint_close(ck);
    if (st != PZ_OK) goto fail;
  }
  e->device_bytes = pz_backend_device_bytes(e->be);
  e->pos = malloc(sizeof(int32_t) * (size_t)cfg->max_batch);
  if (!e->pos) { st = pz_error(PZ_ERR_OOM, "engine allocation"); goto fail; }
  for (int i = 0; i < cfg->max_batch; i++) e->pos[i] = cfg->context;
  *out = e;
  return PZ_OK;
fail:
#ifdef PZ_HAVE_CUDA
  if (e->comm) pz_ar_comm_abort(e->comm); /* the peers are in a collective this rank will not reach */
#endif
  pz_engine_destroy(e);
  return st;
}

/* CPU: the step's logits must be finite. A NaN or an infinity (NaN weights, NaN or huge FP8
 * scales, an overflow) gives a token id all the same (the NaN's, as torch.argmax does): refuse the
 * step instead. One pass over m rows, next to the lm_head GEMM's m * vocab * hidden work. */
static pz_status check_logits(pz_engine *e, int m) {
  const size_t V = (size_t)e->cfg.vocab_size, n = (size_t)m * V;
  if (n > e->lg_cap) {
    float *nl = realloc(e->lg, sizeof(float) * n);
    if (!nl) return pz_error(PZ_ERR_OOM, "engine: logits check buffer of %zu floats", n);
    e->lg = nl;
    e->lg_cap = n;
  }
  PZ_CHECK(pz_backend_logits(e->be, m, e->lg));
  for (size_t k = 0; k < n; k++)
    if (!isfinite(e->lg[k]))
      return pz_error(PZ_ERR_IO, "decode step: the logits of row %zu are not finite (%s at token %zu); the model's "
                      "weights or scales hold NaN or infinity, or overflow: check the checkpoint", k / V,
                      isnan(e->lg[k]) ? "NaN" : "infinity", k % V);
  return PZ_OK;
}

pz_status pz_engine_step(pz_engine *e, int m, const int32_t *tokens_in, int32_t *tokens_out) {
  if (!e || !tokens_in || !tokens_out) return pz_error(PZ_ERR_INVALID_ARG, "pz_engine_step: NULL argument");
  if (m < 1 || m > e->ec.max_batch)
    return pz_error(PZ_ERR_INVALID_ARG, "step batch %d is out of range 1..%d (the engine's max_batch)", m, e->ec.max_batch);
  for (int i = 0; i < m; i++) {
    pz_status bad = PZ_OK;
    if (tokens_in[i] < 0 || tokens_in[i] >= e->cfg.vocab_size)
      bad = pz_error(PZ_ERR_INVALID_ARG, "token %d of row %d is out of range 0..%lld", tokens_in[i], i,
                     (long long)e->cfg.vocab_size - 1);
    else if (e->pos[i] >= e->max_ctx)
      bad = pz_error(PZ_ERR_INVALID_ARG, "sequence %d's KV cache is full (%lld tokens); create the engine with more max_steps",
                     i, (long long)e->max_ctx);
    if (bad != PZ_OK) {
#ifdef PZ_HAVE_CUDA
      if (e->comm) pz_ar_comm_abort(e->comm); /* the peers' step waits for this one: tell them */
#endif
      return bad;
    }
  }
  PZ_CHECK(pz_backend_step(e->be, m, tokens_in, e->pos, tokens_out));
  for (int i = 0; i < m; i++) e->pos[i]++;
  e->last_m = m;
  if (e->ec.device == PZ_DEVICE_CPU) return check_logits(e, m);
  /* CUDA: the argmax candidates tell (a NaN anywhere in a row, or an infinite max), no copy-out */
  int is_nan = 0;
  const int64_t bad = pz_backend_bad_row(e->be, &is_nan);
  if (bad >= 0)
    return pz_error(PZ_ERR_IO, "decode step: the logits of row %lld are not finite (%s); the model's weights or scales "
                    "hold NaN or infinity, or overflow: check the checkpoint", (long long)bad, is_nan ? "NaN" : "infinity");
  return PZ_OK;
}

pz_status pz_engine_logits(const pz_engine *e, int m, float *out) {
  if (!e || !out) return pz_error(PZ_ERR_INVALID_ARG, "pz_engine_logits: NULL argument");
  if (e->last_m == 0) return pz_error(PZ_ERR_INVALID_ARG, "pz_engine_logits: no step has run yet");
  if (m < 1 || m > e->last_m)
    return pz_error(PZ_ERR_INVALID_ARG, "pz_engine_logits: %d rows requested, the last step had %d", m, e->last_m);
  return pz_backend_logits(e->be, m, out);
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
  info->device = e->ec.device;
  info->model_layers = (int)e->cfg.num_hidden_layers;
  info->layers_fitted = e->layers_fitted;
  info->device_bytes_per_rank = e->device_bytes;
  info->rank = -1;
#ifdef PZ_HAVE_CUDA
  if (e->comm) info->rank = pz_ar_comm_rank(e->comm);
#endif
  pz_backend_gemm_table(e->be, info->gemm_table, sizeof info->gemm_table);
  for (int i = 0; i < e->g->n_tensors; i++) {
    const pz_tensor *t = &e->g->tensors[i];
    if (t->view_of >= 0) continue;
    int64_t bytes = pz_tensor_numel(t) * (int64_t)pz_dtype_size(t->dtype) * e->ec.tp;
    if (t->kind == PZ_T_WEIGHT) info->weight_bytes += bytes;
    else if (t->kind == PZ_T_STATE && (t->ndim == 3 || t->ndim == 4)) info->kv_cache_bytes += bytes; /* MLA / GQA caches */
  }
  return PZ_OK;
}

pz_status pz_engine_position(const pz_engine *e, int seq, int64_t *pos) {
  if (!e || !pos) return pz_error(PZ_ERR_INVALID_ARG, "pz_engine_position: NULL argument");
  if (seq < 0 || seq >= e->ec.max_batch)
    return pz_error(PZ_ERR_INVALID_ARG, "pz_engine_position: sequence %d is out of range 0..%d (the engine's max_batch - 1)",
                    seq, e->ec.max_batch - 1);
  *pos = e->pos[seq];
  return PZ_OK;
}

pz_status pz_engine_reset_sequence(pz_engine *e, int seq) {
  if (!e) return pz_error(PZ_ERR_INVALID_ARG, "pz_engine_reset_sequence: NULL engine");
  if (seq < 0 || seq >= e->ec.max_batch)
    return pz_error(PZ_ERR_INVALID_ARG, "pz_engine_reset_sequence: sequence %d is out of range 0..%d (the engine's "
                    "max_batch - 1)", seq, e->ec.max_batch - 1);
  e->pos[seq] = 0; /* attention reads positions < pos only; the step writes this sequence's entry at pos */
  return PZ_OK;
}

pz_status pz_engine_dump_graph(const pz_engine *e, FILE *f, int dot) {
  if (!e || !f) return pz_error(PZ_ERR_INVALID_ARG, "pz_engine_dump_graph: NULL argument");
  if (dot != 0 && dot != 1)
    return pz_error(PZ_ERR_INVALID_ARG, "pz_engine_dump_graph: dot = %d; use 0 (text) or 1 (Graphviz DOT)", dot);
  return dot ? pz_graph_dump_dot(e->g, f) : pz_graph_dump_text(e->g, f);
}

void pz_engine_destroy(pz_engine *e) {
  if (!e) return;
  pz_backend_destroy(e->be);
#ifdef PZ_HAVE_CUDA
  /* Every rank is past its last collective before rank 0 removes the rendezvous; a peer that is
   * gone already times out in the barrier, and the removal goes ahead. */
  if (e->id_file) pz_ar_comm_leave_file(e->comm, &e->id, e->rank, e->id_file);
  free(e->id_file);
#endif
  pz_graph_free(e->g);
  pz_graph_free(e->g_off);
  free(e->pos);
  free(e->lg);
  free(e);
}
