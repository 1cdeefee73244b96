/* Public decode-graph API (include/prezero/graph.h) over the IR (core/ir.h) and the pass
 * manager (passes/passes.h). */
#include "prezero/graph.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "core/ir.h"
#include "core/status.h"
#include "passes/passes.h"

struct pz_decode_graph {
  pz_graph *g;
};

pz_status pz_decode_graph_create(int tp, int64_t m, int64_t hidden, pz_decode_graph **out) {
  if (!out) return pz_error(PZ_ERR_INVALID_ARG, "pz_decode_graph_create: out is NULL");
  *out = NULL;
  if (tp < 1 || tp > 64) return pz_error(PZ_ERR_INVALID_ARG, "pz_decode_graph_create: tp = %d; need 1..64", tp);
  if (m < 1 || m > 256) return pz_error(PZ_ERR_INVALID_ARG, "pz_decode_graph_create: m = %lld; need 1..256", (long long)m);
  if (hidden < 1 || hidden > ((int64_t)1 << 31))
    return pz_error(PZ_ERR_INVALID_ARG, "pz_decode_graph_create: hidden = %lld; need 1..2^31", (long long)hidden);
  pz_decode_graph *h = calloc(1, sizeof *h);
  if (!h) return pz_error(PZ_ERR_OOM, "pz_decode_graph_create: out of host memory");
  pz_graph_info info;
  memset(&info, 0, sizeof info);
  info.tp = tp;
  info.m = m;
  info.n_layers = 1;
  info.hidden = hidden;
  info.rms_eps = 1e-6f;
  snprintf(info.model_name, sizeof info.model_name, "user");
  pz_status st = pz_graph_create(&info, &h->g);
  if (st != PZ_OK) {
    free(h);
    return st;
  }
  *out = h;
  return PZ_OK;
}

void pz_decode_graph_destroy(pz_decode_graph *g) {
  if (!g) return;
  pz_graph_free(g->g);
  free(g);
}

static pz_status elem_to_dtype(const char *who, pz_elem_type e, pz_dtype *out) {
  switch (e) {
  case PZ_ELEM_F32: *out = PZ_F32; return PZ_OK;
  case PZ_ELEM_BF16: *out = PZ_BF16; return PZ_OK;
  case PZ_ELEM_I32: *out = PZ_I32; return PZ_OK;
  }
  return pz_error(PZ_ERR_DTYPE, "%s: element type %d; use PZ_ELEM_F32, PZ_ELEM_BF16 or PZ_ELEM_I32", who, (int)e);
}

static pz_elem_type dtype_to_elem(pz_dtype t) {
  return t == PZ_BF16 ? PZ_ELEM_BF16 : t == PZ_I32 ? PZ_ELEM_I32 : PZ_ELEM_F32;
}

static bool tensor_ok(const pz_decode_graph *g, int id) { return id >= 0 && id < g->g->n_tensors; }

pz_status pz_decode_graph_add_tensor(pz_decode_graph *g, const char *name, pz_elem_type dt,
                                     pz_graph_tensor_kind kind, int ndim, const int64_t *ne, int *id) {
  static const char who[] = "pz_decode_graph_add_tensor";
  if (!g || !name || !ne) return pz_error(PZ_ERR_INVALID_ARG, "%s: %s is NULL", who, !g ? "g" : !name ? "name" : "ne");
  pz_dtype t = PZ_F32;
  PZ_CHECK(elem_to_dtype(who, dt, &t));
  pz_tensor_kind k;
  switch (kind) {
  case PZ_GRAPH_ACT: k = PZ_T_ACT; break;
  case PZ_GRAPH_INPUT: k = PZ_T_INPUT; break;
  case PZ_GRAPH_WEIGHT: k = PZ_T_WEIGHT; break;
  case PZ_GRAPH_STATE: k = PZ_T_STATE; break;
  default:
    return pz_error(PZ_ERR_INVALID_ARG, "%s: %s: kind %d; use PZ_GRAPH_ACT, _INPUT, _WEIGHT or _STATE", who, name,
                    (int)kind);
  }
  if (ndim < 1 || ndim > PZ_MAX_DIMS) return pz_error(PZ_ERR_SHAPE, "%s: %s: ndim = %d; need 1..4", who, name, ndim);
  int tid = -1;
  PZ_CHECK(pz_graph_add_tensor(g->g, name, t, k, ndim, ne, &tid));
  if (k != PZ_T_WEIGHT) g->g->tensors[tid].batched = true;
  if (id) *id = tid;
  return PZ_OK;
}

pz_status pz_decode_graph_add_ar_rmsnorm(pz_decode_graph *g, const char *name, int layer, int partial, int weight,
                                         int residual, int read_residual, int x_norm, float eps, int *node) {
  static const char who[] = "pz_decode_graph_add_ar_rmsnorm";
  if (!g || !name) return pz_error(PZ_ERR_INVALID_ARG, "%s: %s is NULL", who, !g ? "g" : "name");
  if (!tensor_ok(g, partial) || !tensor_ok(g, weight) || !tensor_ok(g, residual) || !tensor_ok(g, x_norm))
    return pz_error(PZ_ERR_INVALID_ARG, "%s: %s: a tensor id is out of range 0..%d", who, name, g->g->n_tensors - 1);
  if (!(eps > 0) || !isfinite(eps))
    return pz_error(PZ_ERR_INVALID_ARG, "%s: %s: eps = %g; use a finite eps > 0 (e.g. 1e-6)", who, name, (double)eps);
  if (read_residual != 0 && read_residual != 1)
    return pz_error(PZ_ERR_INVALID_ARG, "%s: %s: read_residual = %d; use 0 or 1", who, name, read_residual);
  pz_op_params p;
  memset(&p, 0, sizeof p);
  p.norm.eps = eps;
  p.norm.has_residual = read_residual != 0;
  p.norm.fill_buf = -1;
  int src[3] = {partial, weight, read_residual ? residual : -1};
  int dst[2] = {x_norm, residual};
  return pz_graph_add_node(g->g, PZ_OP_AR_RMSNORM, name, layer, PZ_ROLE_NONE, src, 3, dst, 2, &p, node);
}

pz_status pz_decode_graph_add_gemm(pz_decode_graph *g, const char *name, int layer, int A, int W, int bias, int C,
                                   int split_k, int *node) {
  static const char who[] = "pz_decode_graph_add_gemm";
  if (!g || !name) return pz_error(PZ_ERR_INVALID_ARG, "%s: %s is NULL", who, !g ? "g" : "name");
  if (!tensor_ok(g, A) || !tensor_ok(g, W) || !tensor_ok(g, C) || (bias != -1 && !tensor_ok(g, bias)))
    return pz_error(PZ_ERR_INVALID_ARG, "%s: %s: a tensor id is out of range 0..%d (bias may be -1)", who, name,
                    g->g->n_tensors - 1);
  if (split_k < 0) return pz_error(PZ_ERR_INVALID_ARG, "%s: %s: split_k = %d; need >= 0", who, name, split_k);
  pz_op_params p;
  memset(&p, 0, sizeof p);
  p.gemm.zero_init = true;
  p.gemm.split_k = split_k;
  p.gemm.prezero_buf = -1;
  int src[3] = {A, W, bias};
  return pz_graph_add_node(g->g, PZ_OP_GEMM, name, layer, PZ_ROLE_NONE, src, 3, &C, 1, &p, node);
}

pz_status pz_decode_graph_verify(const pz_decode_graph *g) {
  if (!g) return pz_error(PZ_ERR_INVALID_ARG, "pz_decode_graph_verify: g is NULL");
  /* Names identify tensors in dumps, logs and the passes' buffer names: one tensor per name. */
  for (int i = 0; i < g->g->n_tensors; i++)
    for (int j = 0; j < i; j++)
      if (!strcmp(g->g->tensors[i].name, g->g->tensors[j].name))
        return pz_error(PZ_ERR_VERIFY, "pz_decode_graph_verify: tensors %d and %d are both named \"%s\"; give each "
                        "tensor its own name", j, i, g->g->tensors[i].name);
  return pz_graph_verify(g->g);
}

pz_status pz_decode_graph_run_passes(pz_decode_graph *g, int prezero, FILE *log, int *matched, int *rewritten) {
  if (!g) return pz_error(PZ_ERR_INVALID_ARG, "pz_decode_graph_run_passes: g is NULL");
  if (prezero != 0 && prezero != 1)
    return pz_error(PZ_ERR_INVALID_ARG, "pz_decode_graph_run_passes: prezero = %d; use 0 or 1", prezero);
  pz_pass_opts o = PZ_PASS_OPTS_INIT;
  o.prezero = prezero;
  o.log = log;
  pz_pass_stats st[PZ_MAX_PASSES];
  int n = 0;
  PZ_CHECK(pz_decode_graph_verify(g));
  PZ_CHECK(pz_run_passes(g->g, &o, st, &n));
  int mt = 0, rw = 0;
  for (int i = 0; i < n; i++)
    if (st[i].ran) {
      mt += st[i].matched;
      rw += st[i].rewritten;
    }
  if (matched) *matched = mt;
  if (rewritten) *rewritten = rw;
  return PZ_OK;
}

pz_status pz_decode_graph_dump(const pz_decode_graph *g, FILE *f, int dot) {
  if (!g || !f) return pz_error(PZ_ERR_INVALID_ARG, "pz_decode_graph_dump: %s is NULL", !g ? "g" : "f");
  if (dot != 0 && dot != 1)
    return pz_error(PZ_ERR_INVALID_ARG, "pz_decode_graph_dump: dot = %d; use 0 (text) or 1 (Graphviz DOT)", dot);
  return dot ? pz_graph_dump_dot(g->g, f) : pz_graph_dump_text(g->g, f);
}

pz_status pz_decode_graph_counts(const pz_decode_graph *g, int *n_nodes, int *n_tensors) {
  if (!g) return pz_error(PZ_ERR_INVALID_ARG, "pz_decode_graph_counts: g is NULL");
  if (n_nodes) *n_nodes = g->g->n_nodes;
  if (n_tensors) *n_tensors = g->g->n_tensors;
  return PZ_OK;
}

pz_status pz_decode_graph_node_info(const pz_decode_graph *g, int id, pz_graph_node_info *out) {
  if (!g || !out) return pz_error(PZ_ERR_INVALID_ARG, "pz_decode_graph_node_info: %s is NULL", !g ? "g" : "out");
  if (id < 0 || id >= g->g->n_nodes)
    return pz_error(PZ_ERR_INVALID_ARG, "pz_decode_graph_node_info: node %d; the graph has %d", id, g->g->n_nodes);
  const pz_node *n = &g->g->nodes[id];
  memset(out, 0, sizeof *out);
  snprintf(out->name, sizeof out->name, "%s", n->name);
  snprintf(out->op, sizeof out->op, "%s", pz_op_name(n->op));
  out->layer = n->layer;
  out->n_src = n->n_src;
  out->n_dst = n->n_dst;
  for (int i = 0; i < 20; i++) out->src[i] = i < n->n_src ? n->src[i] : -1;
  for (int i = 0; i < 4; i++) out->dst[i] = i < n->n_dst ? n->dst[i] : -1;
  bool gemm = n->op == PZ_OP_GEMM || n->op == PZ_OP_MM_MAYBE_PREZERO || n->op == PZ_OP_LM_HEAD;
  bool norm = n->op == PZ_OP_AR_RMSNORM || n->op == PZ_OP_AR_RMSNORM_MAYBE_PREZERO || n->op == PZ_OP_RMSNORM;
  out->zero_init = n->op == PZ_OP_MM_MAYBE_PREZERO ? 2 : gemm ? (n->p.gemm.zero_init ? 1 : 0) : -1;
  out->fill_buf = norm ? n->p.norm.fill_buf : -1;
  out->fill_n_total = norm && n->p.norm.fill_buf >= 0 ? n->p.norm.n_total : 0;
  out->fill_n_base = norm && n->p.norm.fill_buf >= 0 ? n->p.norm.n_base : 0;
  return PZ_OK;
}

pz_status pz_decode_graph_tensor_info(const pz_decode_graph *g, int id, pz_graph_tensor_info *out) {
  if (!g || !out) return pz_error(PZ_ERR_INVALID_ARG, "pz_decode_graph_tensor_info: %s is NULL", !g ? "g" : "out");
  if (!tensor_ok(g, id))
    return pz_error(PZ_ERR_INVALID_ARG, "pz_decode_graph_tensor_info: tensor %d; the graph has %d", id,
                    g->g->n_tensors);
  const pz_tensor *t = &g->g->tensors[id];
  memset(out, 0, sizeof *out);
  snprintf(out->name, sizeof out->name, "%s", t->name);
  out->dtype = dtype_to_elem(t->dtype);
  out->kind = t->kind == PZ_T_ACT ? PZ_GRAPH_ACT : t->kind == PZ_T_INPUT ? PZ_GRAPH_INPUT
            : t->kind == PZ_T_WEIGHT ? PZ_GRAPH_WEIGHT : t->kind == PZ_T_STATE ? PZ_GRAPH_STATE : PZ_GRAPH_BUFFER;
  out->ndim = t->ndim;
  for (int d = 0; d < 4; d++) {
    out->ne[d] = d < t->ndim ? t->ne[d] : 0;
    out->stride[d] = d < t->ndim ? t->stride[d] : 0;
  }
  out->view_of = t->view_of;
  out->view_offset = t->view_offset;
  return PZ_OK;
}
