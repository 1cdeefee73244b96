/* CUPTI collector (profile.h): graph-node -> IR-node map built from resource callbacks during
 * stream capture and instantiation, and kernel / memset activity records grouped by graph node. */
#include "backend/cuda/profile.h"
#include <cuda.h>
#include <cuda_runtime.h>
#include <cupti.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include "backend/cuda/cuda_util.h"
#include "core/stats.h"

static _Thread_local int cur_tag = -1;
void pz_profile_set_node(int node_id) { cur_tag = node_id; }

/* ---------------------------------------------------------------- graph node map */

typedef struct { uint64_t key; int tag; uint64_t seq; } map_slot; /* key = graph node id + 1 */

typedef struct { const char *ptr; char *copy; } name_entry;

typedef struct rec {
  uint64_t gnid;
  uint32_t device, kind, stream;
  uint64_t start, end; /* ns, CUPTI's clock */
  uint64_t dur_ns;     /* pz_profile_summary: the record's own time (core/stats.h pz_interval_own) */
  const char *name;    /* interned */
} rec;

static struct {
  bool started, subscribed, callbacks;
  CUpti_SubscriberHandle sub;
  pthread_mutex_t mu;
  map_slot *map;
  size_t map_cap, map_n;
  uint64_t seq;
  rec *recs;
  size_t n_recs, cap_recs;
  name_entry *names;
  size_t n_names, cap_names;
  uint64_t dropped;
  bool oom;
} P = {.mu = PTHREAD_MUTEX_INITIALIZER};

static size_t hash64(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  return (size_t)x;
}

static map_slot *map_find(uint64_t id) {
  if (!P.map_cap) return NULL;
  uint64_t key = id + 1;
  for (size_t i = hash64(key) & (P.map_cap - 1);; i = (i + 1) & (P.map_cap - 1)) {
    if (P.map[i].key == key) return &P.map[i];
    if (P.map[i].key == 0) return NULL;
  }
}

static void map_put(uint64_t id, int tag, uint64_t seq) {
  if ((P.map_n + 1) * 2 > P.map_cap) {
    size_t cap = P.map_cap ? P.map_cap * 2 : 4096;
    map_slot *m = calloc(cap, sizeof *m);
    if (!m) {
      P.oom = true;
      if (P.map_n + 1 >= P.map_cap) return; /* no free slot left */
      goto insert;
    }
    for (size_t j = 0; j < P.map_cap; j++) {
      if (!P.map[j].key) continue;
      size_t i = hash64(P.map[j].key) & (cap - 1);
      while (m[i].key) i = (i + 1) & (cap - 1);
      m[i] = P.map[j];
    }
    free(P.map);
    P.map = m;
    P.map_cap = cap;
  }
insert:;
  uint64_t key = id + 1;
  size_t i = hash64(key) & (P.map_cap - 1);
  while (P.map[i].key && P.map[i].key != key) i = (i + 1) & (P.map_cap - 1);
  if (!P.map[i].key) P.map_n++;
  P.map[i] = (map_slot){.key = key, .tag = tag, .seq = seq};
}

static void CUPTIAPI on_callback(void *user, CUpti_CallbackDomain dom, CUpti_CallbackId cbid, const void *data) {
  if (dom != CUPTI_CB_DOMAIN_RESOURCE) return;
  const CUpti_ResourceData *rd = (const CUpti_ResourceData *)data;
  const CUpti_GraphData *gd = (const CUpti_GraphData *)rd->resourceDescriptor;
  if (!gd || !gd->node) return;
  uint64_t id = 0, orig = 0;
  if (cuptiGetGraphNodeId(gd->node, &id) != CUPTI_SUCCESS) return;
  pthread_mutex_lock(&P.mu);
  if (cbid == CUPTI_CBID_RESOURCE_GRAPHNODE_CREATED) {
    /* Instantiation / cloning also reports its new nodes as created (with no tag on this
     * thread); the CLONED callback, before or after, gives them their template's tag. */
    if (cur_tag >= 0 || !map_find(id)) map_put(id, cur_tag, ++P.seq);
  } else if (cbid == CUPTI_CBID_RESOURCE_GRAPHNODE_CLONED && gd->originalNode &&
             cuptiGetGraphNodeId(gd->originalNode, &orig) == CUPTI_SUCCESS) {
    /* Instantiation clones the template's nodes: the clone inherits tag and order. */
    map_slot *o = map_find(orig);
    if (o) map_put(id, o->tag, o->seq);
    else map_put(id, -1, ++P.seq);
  }
  pthread_mutex_unlock(&P.mu);
}

/* ---------------------------------------------------------------- activity buffers */

#define BUF_BYTES (8u << 20)

static void CUPTIAPI buf_requested(uint8_t **buffer, size_t *size, size_t *max_records) {
  *buffer = aligned_alloc(8, BUF_BYTES);
  *size = *buffer ? BUF_BYTES : 0;
  *max_records = 0;
}

static const char *intern(const char *s) {
  if (!s) return "?";
  for (size_t i = 0; i < P.n_names; i++)
    if (P.names[i].ptr == s) return P.names[i].copy;
  for (size_t i = 0; i < P.n_names; i++)
    if (!strcmp(P.names[i].copy, s)) return P.names[i].copy;
  if (P.n_names == P.cap_names) {
    size_t cap = P.cap_names ? P.cap_names * 2 : 64;
    name_entry *n = realloc(P.names, cap * sizeof *n);
    if (!n) { P.oom = true; return "?"; }
    P.names = n;
    P.cap_names = cap;
  }
  char *c = strdup(s);
  if (!c) { P.oom = true; return "?"; }
  P.names[P.n_names++] = (name_entry){.ptr = s, .copy = c};
  return c;
}

static void push_rec(rec r) {
  if (P.n_recs == P.cap_recs) {
    size_t cap = P.cap_recs ? P.cap_recs * 2 : 65536;
    rec *n = realloc(P.recs, cap * sizeof *n);
    if (!n) { P.oom = true; return; }
    P.recs = n;
    P.cap_recs = cap;
  }
  P.recs[P.n_recs++] = r;
}

static void CUPTIAPI buf_completed(CUcontext ctx, uint32_t stream, uint8_t *buffer, size_t size, size_t valid) {
  CUpti_Activity *a = NULL;
  pthread_mutex_lock(&P.mu);
  while (valid && cuptiActivityGetNextRecord(buffer, valid, &a) == CUPTI_SUCCESS) {
    if (a->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL || a->kind == CUPTI_ACTIVITY_KIND_KERNEL) {
      const CUpti_ActivityKernel10 *k = (const CUpti_ActivityKernel10 *)a;
      if (k->graphNodeId && k->end > k->start)
        push_rec((rec){.gnid = k->graphNodeId, .device = k->deviceId, .kind = 0, .stream = k->streamId,
                       .start = k->start, .end = k->end, .name = intern(k->name)});
    } else if (a->kind == CUPTI_ACTIVITY_KIND_MEMSET) {
      const CUpti_ActivityMemset4 *m = (const CUpti_ActivityMemset4 *)a;
      if (m->graphNodeId && m->end > m->start)
        push_rec((rec){.gnid = m->graphNodeId, .device = m->deviceId, .kind = 1, .stream = m->streamId,
                       .start = m->start, .end = m->end, .name = "memset"});
    }
  }
  size_t dropped = 0;
  if (cuptiActivityGetNumDroppedRecords(ctx, stream, &dropped) == CUPTI_SUCCESS) P.dropped += dropped;
  pthread_mutex_unlock(&P.mu);
  free(buffer);
}

/* ---------------------------------------------------------------- public */

static pz_status cupti_err(const char *what, CUptiResult r) {
  const char *s = NULL;
  cuptiGetResultString(r, &s);
  return pz_error(PZ_ERR_UNSUPPORTED, "CUPTI %s failed: %s", what, s ? s : "unknown error");
}
#define CUPTI_TRY(call, what)                            \
  do {                                                   \
    CUptiResult r_ = (call);                             \
    if (r_ != CUPTI_SUCCESS) return cupti_err(what, r_); \
  } while (0)

pz_status pz_profile_start(void) {
  if (P.started) return PZ_OK;
  if (!P.subscribed) {
    CUPTI_TRY(cuptiSubscribe(&P.sub, (CUpti_CallbackFunc)on_callback, NULL), "subscribe");
    P.subscribed = true;
  }
  CUPTI_TRY(cuptiEnableCallback(1, P.sub, CUPTI_CB_DOMAIN_RESOURCE, CUPTI_CBID_RESOURCE_GRAPHNODE_CREATED),
            "graph node callback");
  CUPTI_TRY(cuptiEnableCallback(1, P.sub, CUPTI_CB_DOMAIN_RESOURCE, CUPTI_CBID_RESOURCE_GRAPHNODE_CLONED),
            "graph node clone callback");
  if (!P.callbacks) {
    CUPTI_TRY(cuptiActivityRegisterCallbacks(buf_requested, buf_completed), "buffer registration");
    P.callbacks = true;
  }
  P.started = true;
  return PZ_OK;
}

pz_status pz_profile_activity(bool on) {
  if (!P.started) return pz_error(PZ_ERR_INVALID_ARG, "profile: pz_profile_start has not run");
  if (on) {
    CUPTI_TRY(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), "enabling kernel records");
    CUPTI_TRY(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMSET), "enabling memset records");
  } else {
    CUPTI_TRY(cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), "disabling kernel records");
    CUPTI_TRY(cuptiActivityDisable(CUPTI_ACTIVITY_KIND_MEMSET), "disabling memset records");
  }
  return PZ_OK;
}

pz_status pz_profile_flush(int n_devices) {
  if (!P.started) return pz_error(PZ_ERR_INVALID_ARG, "profile: pz_profile_start has not run");
  int n = 0, cur = 0;
  pz_status st = PZ_OK;
  if (!PZ_CUDA_PROBE(cudaGetDeviceCount(&n))) n = 0; /* no device: nothing to wait for */
  if (n_devices > 0 && n_devices < n) n = n_devices;
  if (n > 0) PZ_CUDA_CHECK_MSG(cudaGetDevice(&cur), "profile: current device");
  for (int d = 0; d < n; d++) {
    PZ_CUDA_CHECK_MSG_GOTO(cudaSetDevice(d), st, restore, "profile: device %d", d);
    PZ_CUDA_CHECK_MSG_GOTO(cudaDeviceSynchronize(), st, restore, "profile: device %d", d);
  }
  if (n > 0) PZ_CUDA_CHECK_MSG(cudaSetDevice(cur), "profile: restoring device %d", cur);
  CUPTI_TRY(cuptiActivityFlushAll(1), "flush");
  if (P.oom) return pz_error(PZ_ERR_OOM, "profile: out of host memory while collecting records");
  return PZ_OK;
restore:
  PZ_CUDA_IGNORE(cudaSetDevice(cur)); /* error path: put the caller's device back; st is what counts */
  return st;
}

void pz_profile_clear(void) {
  pthread_mutex_lock(&P.mu);
  P.n_recs = 0;
  pthread_mutex_unlock(&P.mu);
}

uint64_t pz_profile_dropped(void) { return P.dropped; }

static int cmp_rec(const void *a, const void *b) {
  const rec *x = a, *y = b;
  if (x->gnid != y->gnid) return x->gnid < y->gnid ? -1 : 1;
  if (x->dur_ns != y->dur_ns) return x->dur_ns < y->dur_ns ? -1 : 1;
  return 0;
}

static int cmp_node(const void *a, const void *b) {
  const pz_profile_node *x = a, *y = b;
  if (x->device != y->device) return x->device - y->device;
  if (x->tag != y->tag) return x->tag - y->tag;
  if (x->seq != y->seq) return x->seq < y->seq ? -1 : 1;
  return x->graph_node_id < y->graph_node_id ? -1 : x->graph_node_id > y->graph_node_id;
}

pz_status pz_profile_summary(pz_profile_node **out, int *n) {
  *out = NULL;
  *n = 0;
  pthread_mutex_lock(&P.mu);
  /* own time of each record: a kernel launched with programmatic dependent launch starts during the
   * kernel ahead of it in its stream and waits in-kernel; that wait is the other kernel's time */
  pz_interval *iv = malloc((P.n_recs ? P.n_recs : 1) * sizeof *iv);
  if (!iv) {
    pthread_mutex_unlock(&P.mu);
    return pz_error(PZ_ERR_OOM, "profile summary");
  }
  for (size_t i = 0; i < P.n_recs; i++)
    iv[i] = (pz_interval){.lane = ((unsigned long long)P.recs[i].device << 32) | P.recs[i].stream,
                          .start = P.recs[i].start, .end = P.recs[i].end, .idx = (unsigned long)i};
  pz_interval_own(iv, P.n_recs);
  for (size_t i = 0; i < P.n_recs; i++) P.recs[iv[i].idx].dur_ns = iv[i].own;
  free(iv);
  qsort(P.recs, P.n_recs, sizeof(rec), cmp_rec);
  size_t groups = 0, widest = 0;
  for (size_t i = 0, start = 0; i < P.n_recs; i++) {
    if (i == 0 || P.recs[i].gnid != P.recs[i - 1].gnid) {
      groups++;
      start = i;
    }
    if (i - start + 1 > widest) widest = i - start + 1;
  }
  pz_profile_node *v = calloc(groups ? groups : 1, sizeof *v);
  double *dur = malloc((widest ? widest : 1) * sizeof *dur); /* one group's durations, for pz_median */
  if (!v || !dur) {
    pthread_mutex_unlock(&P.mu);
    free(v);
    free(dur);
    return pz_error(PZ_ERR_OOM, "profile summary");
  }
  size_t k = 0;
  for (size_t i = 0; i < P.n_recs;) {
    size_t j = i;
    while (j < P.n_recs && P.recs[j].gnid == P.recs[i].gnid) j++;
    size_t c = j - i; /* durations of the group are sorted ascending: recs[i] is the minimum */
    for (size_t q = 0; q < c; q++) dur[q] = (double)P.recs[i + q].dur_ns;
    double med = pz_median(dur, (int)c);
    const map_slot *m = map_find(P.recs[i].gnid);
    v[k++] = (pz_profile_node){.graph_node_id = P.recs[i].gnid, .tag = m ? m->tag : -1, .seq = m ? m->seq : 0,
                               .device = (int)P.recs[i].device, .kind = (int)P.recs[i].kind,
                               .name = P.recs[i].name, .count = (int)c, .median_us = med * 1e-3,
                               .min_us = (double)P.recs[i].dur_ns * 1e-3};
    i = j;
  }
  pthread_mutex_unlock(&P.mu);
  free(dur);
  qsort(v, k, sizeof *v, cmp_node);
  *out = v;
  *n = (int)k;
  return PZ_OK;
}

void pz_profile_stop(void) {
  if (!P.started) return;
  pz_profile_activity(false);
  cuptiActivityFlushAll(1);
  cuptiEnableCallback(0, P.sub, CUPTI_CB_DOMAIN_RESOURCE, CUPTI_CBID_RESOURCE_GRAPHNODE_CREATED);
  cuptiEnableCallback(0, P.sub, CUPTI_CB_DOMAIN_RESOURCE, CUPTI_CBID_RESOURCE_GRAPHNODE_CLONED);
  if (P.subscribed) cuptiUnsubscribe(P.sub);
  P.subscribed = false;
  pthread_mutex_lock(&P.mu);
  free(P.map);
  P.map = NULL;
  P.map_cap = P.map_n = 0;
  free(P.recs);
  P.recs = NULL;
  P.n_recs = P.cap_recs = 0;
  for (size_t i = 0; i < P.n_names; i++) free(P.names[i].copy);
  free(P.names);
  P.names = NULL;
  P.n_names = P.cap_names = 0;
  pthread_mutex_unlock(&P.mu);
  P.started = false;
}
