/* Graph IR construction: tensors, views, nodes, clone. verify() lives in verify.c. */
#include "core/ir.h"
#include <assert.h>
#include <stdlib.h>
#include <string.h>

static const char *const op_names[] = {
#define PZ_OP(e, name, coll) name,
#include "core/ops.def"
#undef PZ_OP
};
static const bool op_coll[] = {
#define PZ_OP(e, name, coll) coll,
#include "core/ops.def"
#undef PZ_OP
};
static const char *const role_suffix[] = {
#define PZ_ROLE(e, s) s,
#include "core/roles.def"
#undef PZ_ROLE
};
_Static_assert(sizeof op_names / sizeof op_names[0] == PZ_OP_COUNT, "ops.def table size");
_Static_assert(PZ_OP_COUNT == 13, "update backends when adding an op");

const char *pz_op_name(pz_op op) { return (unsigned)op < PZ_OP_COUNT ? op_names[op] : "?"; }
bool pz_op_is_collective(pz_op op) { return (unsigned)op < PZ_OP_COUNT && op_coll[op]; }
const char *pz_role_suffix(pz_role r) { return (unsigned)r < PZ_ROLE_COUNT ? role_suffix[r] : "?"; }

pz_status pz_graph_create(const pz_graph_info *info, pz_graph **out) {
  pz_graph *g = calloc(1, sizeof *g);
  if (!g) return pz_error(PZ_ERR_OOM, "graph allocation failed");
  g->info = *info;
  g->in_tokens = g->in_pos = g->out_tokens = g->out_logits = -1;
  *out = g;
  return PZ_OK;
}

void pz_graph_free(pz_graph *g) {
  if (!g) return;
  free(g->tensors);
  free(g->nodes);
  free(g);
}

pz_status pz_graph_clone(const pz_graph *g, pz_graph **out) {
  pz_graph *c = malloc(sizeof *c);
  if (!c) return pz_error(PZ_ERR_OOM, "graph clone failed");
  *c = *g;
  c->tensors = malloc(sizeof(pz_tensor) * (size_t)(g->cap_tensors ? g->cap_tensors : 1));
  c->nodes = malloc(sizeof(pz_node) * (size_t)(g->cap_nodes ? g->cap_nodes : 1));
  if (!c->tensors || !c->nodes) {
    free(c->tensors); free(c->nodes); free(c);
    return pz_error(PZ_ERR_OOM, "graph clone failed");
  }
  if (g->n_tensors > 0) memcpy(c->tensors, g->tensors, sizeof(pz_tensor) * (size_t)g->n_tensors);
  if (g->n_nodes > 0) memcpy(c->nodes, g->nodes, sizeof(pz_node) * (size_t)g->n_nodes); /* empty: g->nodes may be NULL */
  *out = c;
  return PZ_OK;
}

static pz_status grow(void **p, int *cap, int need, size_t elt) {
  if (need <= *cap) return PZ_OK;
  int nc = *cap ? *cap * 2 : 64;
  while (nc < need) nc *= 2;
  void *q = realloc(*p, elt * (size_t)nc);
  if (!q) return pz_error(PZ_ERR_OOM, "graph grow failed");
  memset((char *)q + elt * (size_t)*cap, 0, elt * (size_t)(nc - *cap));
  *p = q;
  *cap = nc;
  return PZ_OK;
}

pz_status pz_graph_add_tensor(pz_graph *g, const char *name, pz_dtype t, pz_tensor_kind k,
                              int ndim, const int64_t *ne, int *id) {
  if (ndim < 1 || ndim > PZ_MAX_DIMS)
    return pz_error(PZ_ERR_SHAPE, "tensor %s: ndim %d not in 1..4", name, ndim);
  int64_t numel = 1;
  for (int d = 0; d < ndim; d++) {
    if (ne[d] <= 0) return pz_error(PZ_ERR_SHAPE, "tensor %s: dim %d is %lld", name, d, (long long)ne[d]);
    if (ne[d] > PZ_MAX_NUMEL / numel) /* byte counts (x 8) and strides must stay in int64 */
      return pz_error(PZ_ERR_SHAPE, "tensor %s: more than 2^50 elements (dim %d is %lld); use smaller dimensions",
                      name, d, (long long)ne[d]);
    numel *= ne[d];
  }
  PZ_CHECK(grow((void **)&g->tensors, &g->cap_tensors, g->n_tensors + 1, sizeof(pz_tensor)));
  pz_tensor *x = &g->tensors[g->n_tensors];
  memset(x, 0, sizeof *x);
  x->id = g->n_tensors;
  snprintf(x->name, sizeof x->name, "%s", name);
  x->dtype = t;
  x->kind = k;
  x->ndim = ndim;
  x->view_of = -1;
  x->shard_dim = -1;
  x->init_scale = 0.f;
  int64_t s = 1;
  for (int d = ndim - 1; d >= 0; d--) {
    x->ne[d] = ne[d];
    x->full_ne[d] = ne[d];
    x->stride[d] = s;
    s *= ne[d];
  }
  if (id) *id = x->id;
  g->n_tensors++;
  return PZ_OK;
}

int pz_storage_of(const pz_graph *g, int id) {
  while (id >= 0 && g->tensors[id].view_of >= 0) id = g->tensors[id].view_of;
  return id;
}

const pz_tensor *pz_graph_find_tensor(const pz_graph *g, const char *name) {
  for (int i = 0; g && name && i < g->n_tensors; i++)
    if (!strcmp(g->tensors[i].name, name)) return &g->tensors[i];
  return NULL;
}

bool pz_name_ends_with(const char *s, const char *suf) {
  const size_t a = strlen(s), b = strlen(suf);
  return a >= b && !strcmp(s + a - b, suf);
}

int64_t pz_tensor_numel(const pz_tensor *t) {
  int64_t n = 1;
  for (int d = 0; d < t->ndim; d++) n *= t->ne[d];
  return n;
}

int64_t pz_tensor_span(const pz_tensor *t) {
  int64_t s = 1;
  for (int d = 0; d < t->ndim; d++) s += (t->ne[d] - 1) * t->stride[d];
  return s;
}

bool pz_tensor_contiguous(const pz_tensor *t) {
  int64_t s = 1;
  for (int d = t->ndim - 1; d >= 0; d--) {
    if (t->ne[d] > 1 && t->stride[d] != s) return false;
    s *= t->ne[d];
  }
  return true;
}

pz_status pz_graph_make_col_view(pz_graph *g, int t, int base, int64_t col0) {
  if (t < 0 || t >= g->n_tensors || base < 0 || base >= g->n_tensors)
    return pz_error(PZ_ERR_INVALID_ARG, "col view: bad tensor id");
  pz_tensor *x = &g->tensors[t], *b = &g->tensors[base];
  if (x->ndim != 2 || b->ndim != 2 || x->ne[0] != b->ne[0] || col0 < 0 ||
      col0 + x->ne[1] > b->ne[1] || x->dtype != b->dtype)
    return pz_error(PZ_ERR_SHAPE, "col view %s of %s: [%lld,%lld] at col %lld does not fit [%lld,%lld]",
                    x->name, b->name, (long long)x->ne[0], (long long)x->ne[1], (long long)col0,
                    (long long)b->ne[0], (long long)b->ne[1]);
  x->view_of = base;
  x->view_offset = b->view_offset + col0 * b->stride[1];
  x->stride[0] = b->stride[0];
  x->stride[1] = b->stride[1];
  if (b->view_of >= 0) x->view_of = b->view_of;
  return PZ_OK;
}

pz_status pz_graph_add_col_slice(pz_graph *g, const char *name, int base, int64_t col0,
                                 int64_t cols, int *id) {
  if (base < 0 || base >= g->n_tensors) return pz_error(PZ_ERR_INVALID_ARG, "col slice: bad base");
  pz_tensor b = g->tensors[base];
  int64_t ne[2] = {b.ne[0], cols};
  int t = -1;
  PZ_CHECK(pz_graph_add_tensor(g, name, b.dtype, PZ_T_BUFFER, 2, ne, &t));
  g->tensors[t].batched = b.batched;
  PZ_CHECK(pz_graph_make_col_view(g, t, base, col0));
  if (id) *id = t;
  return PZ_OK;
}

pz_status pz_graph_add_node(pz_graph *g, pz_op op, const char *name, int layer, pz_role role,
                            const int *src, int n_src, const int *dst, int n_dst,
                            const pz_op_params *p, int *id) {
  if ((unsigned)op >= PZ_OP_COUNT) return pz_error(PZ_ERR_INVALID_ARG, "node %s: bad op", name);
  if (n_src < 0 || n_src > PZ_MAX_SRC || n_dst < 1 || n_dst > PZ_MAX_DST)
    return pz_error(PZ_ERR_INVALID_ARG, "node %s: %d srcs / %d dsts", name, n_src, n_dst);
  for (int i = 0; i < n_src; i++)
    if (src[i] < -1 || src[i] >= g->n_tensors)
      return pz_error(PZ_ERR_INVALID_ARG, "node %s: src %d id %d out of range", name, i, src[i]);
  for (int i = 0; i < n_dst; i++)
    if (dst[i] < 0 || dst[i] >= g->n_tensors)
      return pz_error(PZ_ERR_INVALID_ARG, "node %s: dst %d id %d out of range", name, i, dst[i]);
  PZ_CHECK(grow((void **)&g->nodes, &g->cap_nodes, g->n_nodes + 1, sizeof(pz_node)));
  pz_node *n = &g->nodes[g->n_nodes];
  memset(n, 0, sizeof *n);
  n->id = g->n_nodes;
  n->op = op;
  snprintf(n->name, sizeof n->name, "%s", name);
  n->layer = layer;
  n->role = role;
  n->n_src = n_src;
  n->n_dst = n_dst;
  for (int i = 0; i < PZ_MAX_SRC; i++) n->src[i] = i < n_src ? src[i] : -1;
  for (int i = 0; i < PZ_MAX_DST; i++) n->dst[i] = i < n_dst ? dst[i] : -1;
  if (p) n->p = *p;
  if (id) *id = n->id;
  g->n_nodes++;
  return PZ_OK;
}
