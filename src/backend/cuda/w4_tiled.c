/* Host side of the tiled INT4 layout (w4_tiled.h): the inverse rearrangement for read-back. */
#include <stdlib.h>
#include <string.h>
#include "backend/cuda/moe_q.h"
#include "backend/cuda/w4_tiled.h"

pz_status pz_moe_w4a16_untile_host(int32_t *words, pz_bf16 *scales, int64_t E, int64_t N, int64_t K) {
  if (E < 1 || !pz_w4t_shape_ok(N, K))
    return pz_error(PZ_ERR_SHAPE, "moe w4a16 untile: %lld matrices [%lld, %lld] (needs rows %% 16, columns %% 128)",
                    (long long)E, (long long)N, (long long)K);
  const int64_t nw = N * (K / 8), ns = N * (K / 32);
  const size_t tb = (size_t)(words ? nw * 4 : ns * 2);
  void *tmp = malloc(tb);
  if (!tmp) return pz_error(PZ_ERR_OOM, "moe w4a16 untile: %zu bytes of host memory", tb);
  for (int64_t e = 0; e < E; e++) {
    if (words) {
      uint32_t *m = (uint32_t *)words + e * nw, *t = tmp;
      memcpy(t, m, (size_t)nw * 4);
      for (int64_t r = 0; r < N; r++)
        for (int64_t w = 0; w < K / 8; w++) m[r * (K / 8) + w] = pz_w4t_unperm(t[pz_w4t_word_index(K, r, w)]);
    }
    if (scales) {
      pz_bf16 *m = scales + e * ns, *t = tmp;
      memcpy(t, m, (size_t)ns * 2);
      for (int64_t r = 0; r < N; r++)
        for (int64_t q = 0; q < K / 32; q++) m[r * (K / 32) + q] = t[pz_w4t_scale_index(K, r, q)];
    }
  }
  free(tmp);
  return PZ_OK;
}

/* ---------------------------------------------------------------- the executor's use */
#include "backend/cuda/cuda_util.h"
#include "backend/cuda/exec_ops.h"

/* The three (words, scales, N, K) matrices of MOE node n, or 0 when it has no tileable INT4
 * experts: shapes not whole 16 x 128 tiles, or a source that is a view or has views (its bytes
 * are seen under another tensor id, which the marks could not follow). */
typedef struct { int w, s; int64_t N, K; } w4_mat;
/* A MOE node's INT4 source slots: the words of gate, up, down, then their scales. */
static const int k_w4_slots[6] = {PZ_MOE_W_GATE, PZ_MOE_W_UP, PZ_MOE_W_DOWN, PZ_MOE_S_GATE, PZ_MOE_S_UP, PZ_MOE_S_DOWN};
static bool is_int4_moe(const pz_node *n) {
  return n->op == PZ_OP_MOE && n->p.moe.wquant == 1 && n->n_src >= PZ_MOE_NSRC_Q;
}
static int w4_mats(const pz_graph *g, const pz_node *n, const unsigned char *has_view, w4_mat out[3]) {
  if (!is_int4_moe(n) || n->p.moe.q_group != 32) return 0;
  for (int i = 0; i < 3; i++) {
    const int ws = n->src[k_w4_slots[i]], ss = n->src[k_w4_slots[3 + i]];
    if (ws < 0 || ss < 0 || ws >= g->n_tensors || ss >= g->n_tensors) return 0;
    const pz_tensor *w = &g->tensors[ws], *s = &g->tensors[ss];
    if (w->view_of >= 0 || s->view_of >= 0 || has_view[ws] || has_view[ss]) return 0;
    if (w->ndim != 3 || s->ndim != 3 || w->ne[0] != s->ne[0] || w->ne[1] != s->ne[1] || w->ne[2] * 8 != s->ne[2] * 32)
      return 0;
    out[i] = (w4_mat){ws, ss, w->ne[1], w->ne[2] * 8};
    if (!pz_w4t_shape_ok(out[i].N, out[i].K)) return 0;
  }
  return 3;
}

static bool aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }

pz_status pz_cuda_tile_w4_experts(const pz_graph *g, pz_cuda_rank *R) {
  unsigned char *has_view = calloc((size_t)(g->n_tensors ? g->n_tensors : 1), 1);
  if (!has_view) return pz_error(PZ_ERR_OOM, "INT4 experts: host allocation");
  for (int t = 0; t < g->n_tensors; t++)
    if (g->tensors[t].view_of >= 0) has_view[pz_storage_of(g, t)] = 1;
  void *tmp = NULL;
  size_t tmp_bytes = 0;
  pz_status st = PZ_OK;
  for (int i = 0; i < g->n_nodes && st == PZ_OK; i++) {
    w4_mat m[3];
    if (!w4_mats(g, &g->nodes[i], has_view, m)) continue;
    bool ok = true;
    for (int j = 0; j < 3; j++) ok = ok && aligned16(R->data[m[j].w]) && aligned16(R->data[m[j].s]);
    if (!ok) continue; /* stays as stored: the kernel's compressed-tensors path */
    /* The node's scratch before any of its tensors moves: if it cannot be had, the node stays as
     * stored, whole (the executor's memory plan does not count this transient). */
    size_t want = 0;
    for (int j = 0; j < 3; j++) {
      const int64_t E = g->tensors[m[j].w].ne[0];
      const size_t b = pz_moe_w4a16_tile_tmp_bytes(m[j].N, m[j].K) * (size_t)(E < 8 ? E : 8); /* <= 8 per pass */
      if (b > want) want = b;
    }
    if (want > tmp_bytes) {
      if (tmp) PZ_CUDA_IGNORE(cudaFree(tmp));
      tmp = NULL;
      tmp_bytes = 0;
      if (cudaMalloc(&tmp, want) != cudaSuccess) {
        (void)cudaGetLastError();
        tmp = NULL;
        bool part = false; /* a tensor shared with a node tiled before: the node cannot stay as stored */
        for (int j = 0; j < 3 && R->w4_tiled; j++) part = part || R->w4_tiled[m[j].w] || R->w4_tiled[m[j].s];
        if (part)
          st = pz_error(PZ_ERR_OOM, "INT4 experts: %.1f MiB of GPU scratch to tile %s, whose weights are shared with "
                        "a tiled node (PREZERO_MOE_W4_TILED=0 keeps every expert as stored)", want / 1048576.0,
                        g->nodes[i].name);
        continue; /* no scratch: this node keeps the stored layout */
      }
      tmp_bytes = want;
    }
    if (!R->w4_tiled) {
      R->w4_tiled = calloc((size_t)g->n_tensors, 1);
      if (!R->w4_tiled) { st = pz_error(PZ_ERR_OOM, "INT4 experts: host allocation"); break; }
      R->w4_tiled_n = g->n_tensors;
    }
    /* words and scales each once, even when another node shares one of them */
    for (int j = 0; j < 3 && st == PZ_OK; j++) {
      const int64_t E = g->tensors[m[j].w].ne[0];
      void *w = R->w4_tiled[m[j].w] ? NULL : R->data[m[j].w], *sc = R->w4_tiled[m[j].s] ? NULL : R->data[m[j].s];
      if (!w && !sc) continue;
      st = pz_moe_w4a16_tile(w, sc, E, m[j].N, m[j].K, tmp, tmp_bytes, R->stream);
      if (st == PZ_OK) {
        R->w4_tiled[m[j].w] = 1;
        R->w4_tiled[m[j].s] = 2;
      }
    }
  }
  if (tmp) {
    if (st == PZ_OK) st = PZ_CUDA_STATUS_MSG(cudaStreamSynchronize(R->stream), "INT4 experts: tiling");
    PZ_CUDA_IGNORE(cudaFree(tmp));
  }
  free(has_view);
  return st;
}

bool pz_cuda_w4_node_tiled(const pz_cuda_rank *R, const pz_node *n) {
  if (!R->w4_tiled || !is_int4_moe(n)) return false;
  for (int i = 0; i < 6; i++)
    if (!pz_cuda_w4_tensor_tiled(R, n->src[k_w4_slots[i]])) return false;
  return true;
}

bool pz_cuda_w4_tensor_tiled(const pz_cuda_rank *R, int t) {
  return R->w4_tiled && t >= 0 && t < R->w4_tiled_n && R->w4_tiled[t];
}

size_t pz_cuda_w4_tensor_bytes(const pz_graph *g, int t) {
  const pz_tensor *x = &g->tensors[t];
  return (size_t)pz_tensor_numel(x) * pz_dtype_size(x->dtype);
}

pz_status pz_cuda_w4_untile_read(const pz_graph *g, const pz_cuda_rank *R, int t, void *whole) {
  if (!pz_cuda_w4_tensor_tiled(R, t)) return PZ_OK;
  const pz_tensor *x = &g->tensors[t];
  const int64_t E = x->ne[0], N = x->ne[1], K = R->w4_tiled[t] == 1 ? x->ne[2] * 8 : x->ne[2] * 32;
  return R->w4_tiled[t] == 1 ? pz_moe_w4a16_untile_host(whole, NULL, E, N, K) : pz_moe_w4a16_untile_host(NULL, whole, E, N, K);
}
