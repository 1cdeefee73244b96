/* CUDA runtime helpers: device count, free memory, reserve, and the per-layer memory plan. */
#include "backend/cuda/runtime.h"
#include "backend/cuda/exec.h"
#include <stdlib.h>
#include <string.h>
#include <cuda_runtime.h>
#include "backend/cuda/ar_mp.h"
#include "backend/cuda/cuda_util.h"

int pz_cuda_device_count(void) {
  int n = 0;
  return PZ_CUDA_PROBE(cudaGetDeviceCount(&n)) ? n : 0; /* no driver / no GPU: 0, not an error */
}

pz_status pz_cuda_mem_info(int n, const int *devices, int64_t *free_bytes, int64_t *total_bytes) {
  int have = pz_cuda_device_count();
  if (have == 0) return pz_error(PZ_ERR_NO_DEVICE, "no CUDA device is visible");
  int cur = 0;
  PZ_CUDA_CHECK(cudaGetDevice(&cur));
  for (int i = 0; i < n; i++) {
    if (devices[i] < 0 || devices[i] >= have)
      return pz_error(PZ_ERR_NO_DEVICE, "CUDA device %d does not exist (%d visible)", devices[i], have);
    size_t f = 0, t = 0;
    PZ_CUDA_CHECK(cudaSetDevice(devices[i]));
    PZ_CUDA_CHECK(cudaMemGetInfo(&f, &t));
    if (free_bytes) free_bytes[i] = (int64_t)f;
    if (total_bytes) total_bytes[i] = (int64_t)t;
  }
  PZ_CUDA_CHECK(cudaSetDevice(cur));
  return PZ_OK;
}

int64_t pz_cuda_default_reserve(int64_t total_bytes) { return pz_cuda_reserve_for(total_bytes, -1); }

int64_t pz_cuda_reserve_for(int64_t total_bytes, int64_t reserve_mb) {
  if (reserve_mb >= 0) return reserve_mb << 20;
  int64_t r = total_bytes / 100 * 3;
  return r > ((int64_t)2 << 30) ? r : ((int64_t)2 << 30);
}

static int layer_of(const char *name) {
  if (strncmp(name, "layers.", 7) != 0) return -1;
  char *end;
  long L = strtol(name + 7, &end, 10);
  if (end == name + 7 || *end != '.') return -1;
  return (int)L;
}

pz_status pz_cuda_bytes_by_layer(const pz_graph *g, int64_t *fixed_bytes, int64_t *layer_bytes, int n_layers) {
  if (!g || !fixed_bytes || (n_layers > 0 && !layer_bytes))
    return pz_error(PZ_ERR_INVALID_ARG, "pz_cuda_bytes_by_layer: NULL argument");
  *fixed_bytes = 0;
  for (int L = 0; L < n_layers; L++) layer_bytes[L] = 0;
  for (int i = 0; i < g->n_tensors; i++) {
    const pz_tensor *t = &g->tensors[i];
    if (t->view_of >= 0) continue;
    int64_t b = (pz_tensor_span(t) * (int64_t)pz_dtype_size(t->dtype) + 255) / 256 * 256;
    int L = layer_of(t->name);
    if (L >= 0 && L < n_layers) layer_bytes[L] += b;
    else *fixed_bytes += b;
  }
  return PZ_OK;
}

int pz_cuda_fit_layers(int64_t fixed_bytes, const int64_t *layer_bytes, int n_layers, int64_t budget) {
  int64_t used = fixed_bytes;
  if (used > budget) return 0;
  int n = 0;
  while (n < n_layers && used + layer_bytes[n] <= budget) used += layer_bytes[n++];
  return n;
}

pz_status pz_cuda_plan_memory_on(const pz_graph *g, bool per_batch, int n, const int *devices, int64_t reserve_mb,
                                 int64_t margin, pz_cuda_mem_plan *out) {
  if (!g || !out || !devices || n < 1 || n > PZ_CUDA_MAX_TP)
    return pz_error(PZ_ERR_INVALID_ARG, "memory plan: bad arguments");
  memset(out, 0, sizeof *out);
  int64_t fr[PZ_CUDA_MAX_TP], tot[PZ_CUDA_MAX_TP];
  PZ_CHECK(pz_cuda_mem_info(n, devices, fr, tot));
  int64_t budget = INT64_MAX;
  for (int r = 0; r < n; r++) {
    int64_t b = fr[r] - pz_cuda_reserve_for(tot[r], reserve_mb) - margin;
    if (b < budget) budget = b;
  }
  return pz_cuda_plan_memory_budget(g, per_batch, budget, out);
}

pz_status pz_cuda_plan_memory(const pz_graph *g, bool per_batch, int tp, int64_t reserve_mb, int64_t margin,
                              pz_cuda_mem_plan *out) {
  if (tp < 1 || tp > PZ_CUDA_MAX_TP) return pz_error(PZ_ERR_INVALID_ARG, "memory plan: bad arguments");
  int devs[PZ_CUDA_MAX_TP];
  for (int r = 0; r < tp; r++) devs[r] = r;
  return pz_cuda_plan_memory_on(g, per_batch, tp, devs, reserve_mb, margin, out);
}

pz_status pz_cuda_plan_memory_budget(const pz_graph *g, bool per_batch, int64_t budget, pz_cuda_mem_plan *out) {
  if (!g || !out) return pz_error(PZ_ERR_INVALID_ARG, "memory plan: bad arguments");
  memset(out, 0, sizeof *out);
  out->budget = budget;
  const int n = g->info.n_layers > 0 ? g->info.n_layers : 0;
  int64_t fixed = 0, *lb = calloc((size_t)n + 1, sizeof(int64_t));
  out->cum = calloc((size_t)n + 1, sizeof(int64_t));
  if (!lb || !out->cum) {
    free(lb);
    pz_cuda_mem_plan_free(out);
    return pz_error(PZ_ERR_OOM, "memory plan: host allocation");
  }
  pz_status st = pz_cuda_bytes_by_layer(g, &fixed, lb, n);
  if (st == PZ_OK) {
    /* outside the layers = everything the executor allocates (its prezero buffers included) minus the layers */
    fixed = per_batch ? pz_cuda_exec_bytes_per_batch(g) : pz_cuda_exec_bytes(g);
    for (int L = 0; L < n; L++) fixed -= lb[L];
    out->n_layers = n;
    out->cum[0] = fixed;
    for (int L = 0; L < n; L++) out->cum[L + 1] = out->cum[L] + lb[L];
    out->fit = pz_cuda_fit_layers(fixed, lb, n, out->budget);
  }
  free(lb);
  if (st != PZ_OK) pz_cuda_mem_plan_free(out);
  return st;
}

/* The largest N whose first N layers fit in the per-GPU budget divided by `shares`; 0 when not
 * even the bytes outside the layers fit. */
static int fit_shared(const pz_cuda_mem_plan *p, int shares) {
  const int64_t budget = p->budget / shares;
  int fit = 0;
  while (fit < p->n_layers && p->cum[fit + 1] <= budget) fit++;
  return p->cum[0] <= budget ? fit : 0;
}

pz_status pz_cuda_mem_plan_fit_ranks(pz_cuda_mem_plan *p, pz_ar_comm *comm, int n_gpus, int *fit) {
  if (!p || !p->cum || !comm || !fit || n_gpus < 1)
    return pz_error(PZ_ERR_INVALID_ARG, "memory plan of the ranks: NULL plan, communicator or fit, or no GPU");
  const int tp = pz_ar_comm_world(comm), rank = pz_ar_comm_rank(comm);
  int shares = 0; /* ranks on this rank's GPU (rank r runs on GPU r % n_gpus), each with its own copy */
  for (int r = 0; r < tp; r++) shares += r % n_gpus == rank % n_gpus;
  /* each rank's plan (layer count, bytes of the whole graph) too: ranks planning different graphs
   * are refused here, before a fit agreed over them reads as "does not fit" on one of them */
  typedef struct { int64_t fit, n_layers, total, budget; } rank_fit;
  rank_fit mine = {shares > 1 ? fit_shared(p, shares) : p->fit, p->n_layers, p->cum[p->n_layers], p->budget / shares};
  rank_fit all[PZ_AR_MP_MAX_WORLD];
  PZ_CHECK(pz_ar_comm_allgather_host(comm, PZ_HX_LAYER_FIT, &mine, sizeof mine, all));
  int64_t f = mine.fit;
  for (int r = 0; r < tp; r++) {
    if (all[r].n_layers != all[0].n_layers || all[r].total != all[0].total)
      return pz_error(PZ_ERR_INVALID_ARG, "memory plan of the ranks: rank %d planned %lld layers (%.3f GiB) and rank 0 "
                      "%lld (%.3f GiB): every rank must be created with the same config, layers and batch", r,
                      (long long)all[r].n_layers, all[r].total / 1073741824.0, (long long)all[0].n_layers,
                      all[0].total / 1073741824.0);
    f = all[r].fit < f ? all[r].fit : f;
  }
  int64_t b = all[0].budget;
  for (int r = 1; r < tp; r++) b = all[r].budget < b ? all[r].budget : b;
  p->budget = b; /* the tightest rank's share, so every rank's message names the same usable bytes */
  *fit = (int)f;
  return PZ_OK;
}

void pz_cuda_mem_plan_free(pz_cuda_mem_plan *p) {
  if (!p) return;
  free(p->cum);
  p->cum = NULL;
}
