/* One rank of a TP group per process (include/prezero/allreduce.h): buffers exported with CUDA
 * IPC, handles exchanged through files in the id's rendezvous directory, the fused kernel of
 * kernels/ar_fused.cu launched on the rank's own view (IPC mappings in place of peer pointers).
 *
 * Rendezvous, two phases, each polled (1 ms sleeps) until timeout_ms:
 *   1. every rank writes "r<rank>" (its record: sizes, nonce, pid, PCI bus id, IPC handle) as a
 *      temporary file hard-linked into place (atomic; a second process claiming the same rank
 *      finds the name taken), then reads every peer's record and maps its buffers;
 *   2. every rank writes "ok<rank>" once it has mapped all peers, waits for every "ok<q>", then
 *      removes its own "r<rank>" (every peer has read it). pz_ar_unique_id_remove removes the rest.
 * Inboxes are zeroed before the handle is published, so a peer may start pushing as soon as it
 * has mapped them. Each rank also creates "hx<rank>" (the host exchange of ar_mp.h) before its
 * record, every peer maps it in phase 1, and it is unlinked after phase 2 (the mappings stay). */
#define _POSIX_C_SOURCE 200809L
#define _DEFAULT_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <cuda_runtime.h>
#include "backend/ar_mp_id.h"
#include <sched.h>
#include <sys/mman.h>
#include "backend/cuda/ar_fused.h"
#include "backend/cuda/ar_mp.h"
#include "backend/cuda/comm.h"
#include "backend/cuda/cuda_util.h"
#include "core/gate.h"
#include "core/status.h"

_Static_assert(PZ_AR_MP_MAX_WORLD <= PZ_AR_MAX_TP, "world beyond the kernel's ranks");
_Static_assert(sizeof(pz_ar_stream) == sizeof(cudaStream_t), "stream type");

#define REC_MAGIC "PZARREC"

typedef struct rec {
  char magic[8];
  uint64_t nonce;
  int32_t world, rank, device, pid;
  int64_t max_m, max_H;
  char pci[32];
  uint64_t bytes;
  cudaIpcMemHandle_t handle;
} rec;

struct pz_ar_comm {
  pz_comm_rank_view view;
  int world, rank, device;
  int timeout_ms;
  void *base;                     /* inbox | raw | flags, exported */
  void *peer[PZ_AR_MP_MAX_WORLD]; /* IPC mappings of the peers' bases (NULL for self) */
  size_t inbox_bytes, raw_bytes, flag_bytes, ss_bytes;
  pz_device_desc dd;
  /* host exchange (ar_mp.h): each rank's file "hx<rank>" in the rendezvous directory, mapped by
   * every rank: hx_hdr, then two slots of PZ_AR_HOSTX_SLOT bytes (round k uses slot k & 1) */
  void *hx[PZ_AR_MP_MAX_WORLD];
  uint64_t hx_round;
  uint64_t nonce;
  int broken;                     /* a collective failed: the ranks' rounds no longer agree */
};

typedef struct hx_hdr {
  uint64_t nonce;
  uint64_t seq;      /* last round whose payload is in place (release / acquire) */
  uint64_t bytes[2]; /* payload bytes of the round in each slot */
  uint64_t tag[2];   /* pz_hx_tag of the round in each slot */
  uint64_t abort;    /* non-zero: this rank failed and left the group (pz_ar_comm_abort) */
} hx_hdr;
#define HX_DATA 64
#define HX_FILE (HX_DATA + 2 * PZ_AR_HOSTX_SLOT)

static long long now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}
static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* Writes `len` bytes as dir/name atomically: temporary file, then link (fails if taken). */
static pz_status publish(const char *dir, const char *name, const void *data, size_t len) {
  char tmp[PZ_AR_ID_DIR_MAX + 64], fin[PZ_AR_ID_DIR_MAX + 64];
  snprintf(tmp, sizeof tmp, "%s/.tmp.%s.%d", dir, name, (int)getpid());
  snprintf(fin, sizeof fin, "%s/%s", dir, name);
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (fd < 0) return pz_error(PZ_ERR_IO, "all-reduce rendezvous: cannot create %s: %s", tmp, strerror(errno));
  ssize_t w = write(fd, data, len);
  int cl = close(fd);
  if (w != (ssize_t)len || cl != 0) {
    unlink(tmp);
    return pz_error(PZ_ERR_IO, "all-reduce rendezvous: cannot write %s", tmp);
  }
  if (link(tmp, fin) != 0) {
    int e = errno;
    unlink(tmp);
    if (e == EEXIST)
      return pz_error(PZ_ERR_INVALID_ARG, "all-reduce rendezvous: %s exists: another process joined with the same "
                      "rank, or the id was used before (one id per communicator)", fin);
    return pz_error(PZ_ERR_IO, "all-reduce rendezvous: cannot link %s: %s", fin, strerror(e));
  }
  unlink(tmp);
  return PZ_OK;
}

/* 1 when dir/name exists and holds exactly len bytes (read into data), else 0. */
static int try_read(const char *dir, const char *name, void *data, size_t len) {
  char p[PZ_AR_ID_DIR_MAX + 64];
  snprintf(p, sizeof p, "%s/%s", dir, name);
  int fd = open(p, O_RDONLY);
  if (fd < 0) return 0;
  ssize_t r = len ? read(fd, data, len) : 0;
  close(fd);
  return r == (ssize_t)len;
}

static void missing_list(const int *have, int world, int self, char *buf, size_t n) {
  buf[0] = 0;
  size_t off = 0;
  for (int q = 0; q < world; q++)
    if (q != self && !have[q] && off + 8 < n) off += (size_t)snprintf(buf + off, n - off, "%s%d", off ? "," : "", q);
}

static void comm_free(pz_ar_comm *c) {
  PZ_CUDA_IGNORE(cudaSetDevice(c->device));
  PZ_CUDA_IGNORE(cudaDeviceSynchronize());
  for (int q = 0; q < c->world; q++)
    if (c->peer[q]) PZ_CUDA_IGNORE(cudaIpcCloseMemHandle(c->peer[q]));
  if (c->base) PZ_CUDA_IGNORE(cudaFree(c->base));
  if (c->view.ss) PZ_CUDA_IGNORE(cudaFree(c->view.ss));
  if (c->view.ctrl) PZ_CUDA_IGNORE(cudaFree(c->view.ctrl));
  for (int q = 0; q < c->world; q++)
    if (c->hx[q]) munmap(c->hx[q], HX_FILE);
  free(c);
}

/* Creates (create != 0) or maps rank q's exchange file dir/hx<q>. */
static pz_status hx_map(pz_ar_comm *c, const char *dir, int q, int create) {
  char p[PZ_AR_ID_DIR_MAX + 32];
  snprintf(p, sizeof p, "%s/hx%d", dir, q);
  int fd = open(p, create ? O_RDWR | O_CREAT | O_EXCL : O_RDWR, 0600);
  if (fd < 0)
    return pz_error(errno == EEXIST ? PZ_ERR_INVALID_ARG : PZ_ERR_IO, "all-reduce rendezvous: cannot %s %s: %s",
                    create ? "create" : "open", p, strerror(errno));
  /* allocated now, not on first touch: a full tmpfs fails here instead of raising SIGBUS later */
  int fe = create ? posix_fallocate(fd, 0, (off_t)HX_FILE) : 0;
  if (fe != 0) {
    close(fd);
    unlink(p);
    return pz_error(PZ_ERR_IO, "all-reduce rendezvous: cannot allocate %zu bytes for %s: %s; free space there",
                    (size_t)HX_FILE, p, strerror(fe));
  }
  void *m = mmap(NULL, HX_FILE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (m == MAP_FAILED) {
    int e = errno;
    if (create) unlink(p);
    return pz_error(PZ_ERR_IO, "all-reduce rendezvous: cannot map %s: %s", p, strerror(e));
  }
  hx_hdr *h = (hx_hdr *)m;
  if (create) {
    h->nonce = c->nonce;
    __atomic_store_n(&h->seq, 0, __ATOMIC_RELEASE);
  } else if (h->nonce != c->nonce) {
    munmap(m, HX_FILE);
    return pz_error(PZ_ERR_INVALID_ARG, "all-reduce rendezvous: %s belongs to another id", p);
  }
  c->hx[q] = m;
  return PZ_OK;
}

static pz_status open_peer(pz_ar_comm *c, const rec *r, int q) {
  int pdev = -1;
  if (cudaDeviceGetByPCIBusId(&pdev, r->pci) != cudaSuccess) {
    (void)cudaGetLastError();
    pdev = -1; /* not visible here: let cudaIpcOpenMemHandle decide */
  }
  if (pdev >= 0 && pdev != c->device) {
    int can = 0;
    PZ_CUDA_CHECK(cudaDeviceCanAccessPeer(&can, c->device, pdev));
    if (!can)
      return pz_error(PZ_ERR_NO_P2P, "all-reduce: rank %d's GPU %d (%s) cannot access rank %d's GPU %s "
                      "(cudaDeviceCanAccessPeer = 0)", c->rank, c->device, "this process", q, r->pci);
  }
  void *p = NULL;
  cudaError_t e = cudaIpcOpenMemHandle(&p, r->handle, cudaIpcMemLazyEnablePeerAccess);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return pz_error(pdev >= 0 && pdev != c->device ? PZ_ERR_NO_P2P : PZ_ERR_CUDA,
                    "all-reduce: rank %d cannot map rank %d's buffers (pid %d, GPU %s): cudaIpcOpenMemHandle: %s",
                    c->rank, q, (int)r->pid, r->pci, cudaGetErrorString(e));
  }
  c->peer[q] = p;
  return PZ_OK;
}

pz_status pz_ar_comm_init_rank_config(pz_ar_comm **comm, const pz_ar_comm_config *cfg, pz_ar_unique_id id) {
  if (!comm) return pz_error(PZ_ERR_INVALID_ARG, "pz_ar_comm_init_rank: comm is NULL");
  *comm = NULL;
  if (!cfg) return pz_error(PZ_ERR_INVALID_ARG, "pz_ar_comm_init_rank: cfg is NULL");
  if (cfg->world < 1 || cfg->world > PZ_AR_MP_MAX_WORLD || cfg->rank < 0 || cfg->rank >= cfg->world)
    return pz_error(PZ_ERR_INVALID_ARG, "pz_ar_comm_init_rank: world must be 1..%d and rank 0..world-1 (world=%d rank=%d)",
                    PZ_AR_MP_MAX_WORLD, cfg->world, cfg->rank);
  if (cfg->max_m < 1 || cfg->max_H < 8 || cfg->max_H % 8 || cfg->max_H > 4 * PZ_AR_THREADS * PZ_AR_MAX_QPT)
    return pz_error(PZ_ERR_INVALID_ARG, "pz_ar_comm_init_rank: max_m >= 1, max_H a multiple of 8 in 8..%d "
                    "(max_m=%lld max_H=%lld)", 4 * PZ_AR_THREADS * PZ_AR_MAX_QPT, (long long)cfg->max_m,
                    (long long)cfg->max_H);
  pz_ar_id_layout L;
  PZ_CHECK(pz_ar_id_parse(&id, &L));
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
    (void)cudaGetLastError();
    return pz_error(PZ_ERR_NO_DEVICE, "pz_ar_comm_init_rank: no CUDA device visible");
  }
  if (cfg->device < 0 || cfg->device >= ndev)
    return pz_error(PZ_ERR_NO_DEVICE, "pz_ar_comm_init_rank: device %d out of range (%d visible)", cfg->device, ndev);

  pz_ar_comm *c = (pz_ar_comm *)calloc(1, sizeof *c);
  if (!c) return pz_error(PZ_ERR_OOM, "pz_ar_comm_init_rank: out of host memory");
  c->world = cfg->world;
  c->rank = cfg->rank;
  c->device = cfg->device;
  c->timeout_ms = cfg->timeout_ms > 0 ? cfg->timeout_ms : 10000;
  pz_device_desc_default(&c->dd);
  const int tp = c->world;
  const int64_t mm = cfg->max_m, mh = cfg->max_H;
  c->inbox_bytes = tp > 1 ? (size_t)2 * tp * mm * (mh / 2) * 16 : 0;
  c->raw_bytes = tp > 1 ? (size_t)2 * tp * mm * (mh / 4) * 16 : 0;
  c->flag_bytes = tp > 1 ? (size_t)2 * tp * mm * 16 * sizeof(unsigned) : 0;
  c->ss_bytes = (size_t)mm * 16 * 8;
  pz_comm_rank_view *v = &c->view;
  v->rank = c->rank;
  v->tp = tp;
  v->device = c->device;
  v->max_m = mm;
  v->max_H = mh;
  v->timeout_ns = (long long)c->timeout_ms * 1000000LL;

  pz_status st = PZ_OK;
  const size_t all = c->inbox_bytes + c->raw_bytes + c->flag_bytes;
  void *ss = NULL, *ctrl = NULL;
  PZ_CUDA_CHECK_MSG_GOTO(cudaSetDevice(c->device), st, fail, "pz_ar_comm_init_rank: cudaSetDevice(%d)", c->device);
  if (all)
    PZ_CUDA_CHECK_MSG_GOTO(cudaMalloc(&c->base, all), st, fail, "pz_ar_comm_init_rank: cannot allocate %zu bytes on GPU %d",
                           all, c->device);
  PZ_CUDA_CHECK_GOTO(cudaMalloc(&ss, c->ss_bytes), st, fail);
  v->ss = (uint2 *)ss;
  PZ_CUDA_CHECK_GOTO(cudaMalloc(&ctrl, 8 * sizeof(unsigned)), st, fail);
  v->ctrl = (unsigned *)ctrl;
  if (all) PZ_CUDA_CHECK_GOTO(cudaMemset(c->base, 0, all), st, fail);
  PZ_CUDA_CHECK_GOTO(cudaMemset(v->ss, 0, c->ss_bytes), st, fail);
  PZ_CUDA_CHECK_GOTO(cudaMemset(v->ctrl, 0, 8 * sizeof(unsigned)), st, fail);
  PZ_CUDA_CHECK_GOTO(cudaDeviceSynchronize(), st, fail);

  if (tp > 1) {
    rec me;
    memset(&me, 0, sizeof me);
    memcpy(me.magic, REC_MAGIC, sizeof REC_MAGIC);
    me.nonce = L.nonce;
    me.world = tp;
    me.rank = c->rank;
    me.device = c->device;
    me.pid = (int32_t)getpid();
    me.max_m = mm;
    me.max_H = mh;
    me.bytes = all;
    PZ_CUDA_CHECK_GOTO(cudaDeviceGetPCIBusId(me.pci, (int)sizeof me.pci, c->device), st, fail);
    PZ_CUDA_CHECK_GOTO(cudaIpcGetMemHandle(&me.handle, c->base), st, fail);
    char name[32];
    c->nonce = L.nonce;
    PZ_CHECK_GOTO(hx_map(c, L.dir, c->rank, 1), st, fail); /* before the record: a peer that reads it finds the file */
    snprintf(name, sizeof name, "r%d", c->rank);
    PZ_CHECK_GOTO(publish(L.dir, name, &me, sizeof me), st, fail_hx);

    /* Phase 1: every peer's record, mapped as it appears. */
    int have[PZ_AR_MP_MAX_WORLD] = {0};
    have[c->rank] = 1;
    int n_have = 1;
    long long t0 = now_ms();
    while (n_have < tp) {
      for (int q = 0; q < tp; q++) {
        if (have[q]) continue;
        rec r;
        char pn[32];
        snprintf(pn, sizeof pn, "r%d", q);
        if (!try_read(L.dir, pn, &r, sizeof r)) continue;
        if (memcmp(r.magic, REC_MAGIC, sizeof REC_MAGIC) || r.nonce != L.nonce || r.rank != q) {
          st = pz_error(PZ_ERR_INVALID_ARG, "all-reduce rendezvous: %s/%s is not a record of this id", L.dir, pn);
          goto fail_unpublish;
        }
        if (r.world != tp || r.max_m != mm || r.max_H != mh || r.bytes != all) {
          st = pz_error(PZ_ERR_INVALID_ARG, "all-reduce: rank %d joined with world=%d max_m=%lld max_H=%lld, rank %d "
                        "with world=%d max_m=%lld max_H=%lld (every rank must pass the same)", q, (int)r.world,
                        (long long)r.max_m, (long long)r.max_H, c->rank, tp, (long long)mm, (long long)mh);
          goto fail_unpublish;
        }
        PZ_CHECK_GOTO(open_peer(c, &r, q), st, fail_unpublish);
        PZ_CHECK_GOTO(hx_map(c, L.dir, q, 0), st, fail_unpublish);
        have[q] = 1;
        n_have++;
      }
      if (n_have == tp) break;
      if (now_ms() - t0 > c->timeout_ms) {
        char miss[64];
        missing_list(have, tp, c->rank, miss, sizeof miss);
        st = pz_error(PZ_ERR_TIMEOUT, "all-reduce rendezvous: rank %d of %d waited %d ms in %s; rank(s) %s never "
                      "arrived", c->rank, tp, c->timeout_ms, L.dir, miss);
        goto fail_unpublish;
      }
      sleep_ms(1);
    }
    /* Phase 2: everyone has mapped everyone. */
    snprintf(name, sizeof name, "ok%d", c->rank);
    PZ_CHECK_GOTO(publish(L.dir, name, &me.nonce, sizeof me.nonce), st, fail_unpublish);
    memset(have, 0, sizeof have);
    have[c->rank] = 1;
    n_have = 1;
    t0 = now_ms();
    while (n_have < tp) {
      for (int q = 0; q < tp; q++) {
        uint64_t nn = 0;
        char pn[32];
        snprintf(pn, sizeof pn, "ok%d", q);
        if (!have[q] && try_read(L.dir, pn, &nn, sizeof nn) && nn == L.nonce) {
          have[q] = 1;
          n_have++;
        }
      }
      if (n_have == tp) break;
      if (now_ms() - t0 > c->timeout_ms) {
        char miss[64];
        missing_list(have, tp, c->rank, miss, sizeof miss);
        st = pz_error(PZ_ERR_TIMEOUT, "all-reduce rendezvous: rank %d of %d mapped every peer but rank(s) %s did not "
                      "confirm within %d ms (exited or failed to map)", c->rank, tp, miss, c->timeout_ms);
        goto fail_unpublish;
      }
      sleep_ms(1);
    }
    char own[PZ_AR_ID_DIR_MAX + 32];
    snprintf(own, sizeof own, "%s/r%d", L.dir, c->rank);
    unlink(own); /* every peer has read it */
    snprintf(own, sizeof own, "%s/hx%d", L.dir, c->rank);
    unlink(own); /* and mapped this one */
    for (int q = 0; q < tp; q++) {
      void *pb = q == c->rank ? c->base : c->peer[q];
      v->inbox[q] = (uint4 *)pb;
      v->raw[q] = (float4 *)((char *)pb + c->inbox_bytes);
      v->flags[q] = (unsigned *)((char *)pb + c->inbox_bytes + c->raw_bytes);
    }
  }
  *comm = c;
  return PZ_OK;
fail_unpublish: {
    char p[PZ_AR_ID_DIR_MAX + 32];
    snprintf(p, sizeof p, "%s/r%d", L.dir, c->rank); /* our handle must not outlive our buffers */
    unlink(p);
  }
fail_hx: {
    char p[PZ_AR_ID_DIR_MAX + 32];
    snprintf(p, sizeof p, "%s/hx%d", L.dir, c->rank); /* created by this rank (O_EXCL) */
    if (c->hx[c->rank]) unlink(p);
  }
fail:
  comm_free(c);
  return st;
}

pz_status pz_ar_comm_init_rank(pz_ar_comm **comm, int world, int rank, pz_ar_unique_id id, int device,
                               int timeout_ms) {
  pz_ar_comm_config cfg = PZ_AR_COMM_CONFIG_INIT;
  cfg.world = world;
  cfg.rank = rank;
  cfg.device = device;
  cfg.timeout_ms = timeout_ms;
  return pz_ar_comm_init_rank_config(comm, &cfg, id);
}

void pz_ar_comm_destroy(pz_ar_comm *c) {
  if (c) comm_free(c);
}

int pz_ar_comm_rank(const pz_ar_comm *c) { return c ? c->rank : -1; }
int pz_ar_comm_world(const pz_ar_comm *c) { return c ? c->world : -1; }
int pz_ar_comm_device(const pz_ar_comm *c) { return c ? c->device : -1; }

pz_status pz_ar_rmsnorm(pz_ar_comm *c, const pz_ar_rmsnorm_params *p, pz_ar_stream stream) {
  if (!c || !p) return pz_error(PZ_ERR_INVALID_ARG, "pz_ar_rmsnorm: comm and params are required");
  if (p->fill_ptr && p->fill_dtype != PZ_AR_FILL_F32 && p->fill_dtype != PZ_AR_FILL_BF16)
    return pz_error(PZ_ERR_INVALID_ARG, "pz_ar_rmsnorm: fill_dtype must be PZ_AR_FILL_F32 or PZ_AR_FILL_BF16");
  pz_ar_rmsnorm_args a;
  memset(&a, 0, sizeof a);
  a.partial = p->partial;
  a.ld_partial = p->ld_partial;
  a.residual_in = p->residual_in;
  a.residual_out = p->residual_out;
  a.ld_res = p->ld_res;
  a.weight = (const pz_bf16 *)p->weight;
  a.x_norm = (pz_bf16 *)p->x_norm;
  a.ld_x = p->ld_x;
  a.eps = p->eps;
  a.m = p->m;
  a.H = p->H;
  a.fill.ptr = p->fill_ptr;
  a.fill.n_total = p->fill_n_total;
  a.fill.n_base = p->fill_n_base;
  a.fill.row_stride = p->fill_row_stride;
  a.fill.dtype = p->fill_dtype == PZ_AR_FILL_BF16 ? PZ_BF16 : PZ_F32;
  a.fill_all = p->fill_all != 0;
  return pz_ar_rmsnorm_launch_view(&c->view, &a, &c->dd, (cudaStream_t)stream);
}

pz_status pz_ar_comm_check(pz_ar_comm *c, pz_ar_stream stream) {
  if (!c) return pz_error(PZ_ERR_INVALID_ARG, "pz_ar_comm_check: comm is NULL");
  PZ_CUDA_CHECK(cudaStreamSynchronize((cudaStream_t)stream));
  unsigned h[8];
  PZ_CUDA_CHECK(cudaMemcpy(h, c->view.ctrl, sizeof h, cudaMemcpyDeviceToHost));
  if (h[2]) c->broken = 1;
  if (h[2])
    return pz_error(PZ_ERR_TIMEOUT, "all-reduce: rank %d of %d (GPU %d) waited more than %d ms for a peer (row %u, "
                    "launch %u): a peer exited or stopped launching; destroy the communicator", c->rank, c->world,
                    c->device, c->timeout_ms, h[3], h[0] + 1);
  return PZ_OK;
}

const pz_comm_rank_view *pz_ar_comm_view(const pz_ar_comm *c) { return c ? &c->view : NULL; }

_Static_assert(sizeof(hx_hdr) <= HX_DATA, "host exchange header overlaps its slots");

const char *pz_hx_tag_name(int tag) {
  static const char *names[PZ_HX_TAG_COUNT] = {"?", "barrier", "layer fit", "executor creation", "argmax", "logits", "engine creation"};
  return tag > 0 && tag < PZ_HX_TAG_COUNT ? names[tag] : "?";
}

pz_status pz_ar_comm_allgather_host(pz_ar_comm *c, int tag, const void *mine, size_t bytes, void *all) {
  if (!c || (bytes && (!mine || !all)))
    return pz_error(PZ_ERR_INVALID_ARG, "all-reduce host exchange: NULL communicator or buffer");
  if (bytes > PZ_AR_HOSTX_SLOT)
    return pz_error(PZ_ERR_INVALID_ARG, "all-reduce host exchange: %zu bytes per rank, at most %zu", bytes,
                    (size_t)PZ_AR_HOSTX_SLOT);
  if (c->broken)
    return pz_error(PZ_ERR_TIMEOUT, "all-reduce host exchange: rank %d's group broke at an earlier exchange (a peer "
                    "failed or left); destroy it", c->rank);
  if (c->world == 1) {
    if (bytes) memmove(all, mine, bytes);
    return PZ_OK;
  }
  const uint64_t k = ++c->hx_round;
  const int slot = (int)(k & 1);
  hx_hdr *me = (hx_hdr *)c->hx[c->rank];
  if (bytes) memcpy((char *)c->hx[c->rank] + HX_DATA + slot * PZ_AR_HOSTX_SLOT, mine, bytes);
  me->bytes[slot] = bytes;
  me->tag[slot] = (uint64_t)tag;
  __atomic_store_n(&me->seq, k, __ATOMIC_RELEASE);
  const long long t0 = now_ms(); /* one deadline for the whole exchange */
  for (int q = 0; q < c->world; q++) {
    hx_hdr *h = (hx_hdr *)c->hx[q];
    if (q != c->rank) {
      for (long spin = 0; __atomic_load_n(&h->seq, __ATOMIC_ACQUIRE) < k; spin++) {
        if (__atomic_load_n(&h->abort, __ATOMIC_ACQUIRE)) {
          c->broken = 1;
          return pz_error(PZ_ERR_TIMEOUT, "all-reduce host exchange: rank %d of %d failed and left the group (its own "
                          "error says why); rank %d stops at round %llu", q, c->world, c->rank, (unsigned long long)k);
        }
        if (spin < 2000) {
          sched_yield();
          continue;
        }
        if (now_ms() - t0 > c->timeout_ms) {
          c->broken = 1;
          return pz_error(PZ_ERR_TIMEOUT, "all-reduce host exchange: rank %d of %d waited %d ms for rank %d at round "
                          "%llu: the peer exited or stopped; destroy the communicator", c->rank, c->world,
                          c->timeout_ms, q, (unsigned long long)k);
        }
        struct timespec ts = {0, 50000};
        nanosleep(&ts, NULL);
      }
      if (h->tag[slot] != (uint64_t)tag) {
        c->broken = 1;
        return pz_error(PZ_ERR_INVALID_ARG, "all-reduce host exchange: at round %llu rank %d is at the %s exchange and rank "
                        "%d at the %s one (the ranks' calls are out of step: every rank must make the same collective "
                        "calls in the same order)", (unsigned long long)k, q, pz_hx_tag_name((int)h->tag[slot]), c->rank,
                        pz_hx_tag_name(tag));
      }
      if (h->bytes[slot] != bytes) {
        c->broken = 1;
        return pz_error(PZ_ERR_INVALID_ARG, "all-reduce host exchange: rank %d sent %llu bytes at round %llu, rank %d "
                        "%zu (the ranks' calls are out of step: every rank must make the same collective calls with "
                        "the same sizes)", q, (unsigned long long)h->bytes[slot], (unsigned long long)k, c->rank, bytes);
      }
    }
    if (bytes) memcpy((char *)all + (size_t)q * bytes, (char *)c->hx[q] + HX_DATA + slot * PZ_AR_HOSTX_SLOT, bytes);
  }
  return PZ_OK;
}

void pz_ar_comm_abort(pz_ar_comm *c) {
  if (!c) return;
  c->broken = 1;
  if (c->world > 1 && c->hx[c->rank]) __atomic_store_n(&((hx_hdr *)c->hx[c->rank])->abort, 1, __ATOMIC_RELEASE);
}

pz_status pz_ar_comm_allgather_host_big(pz_ar_comm *c, int tag, const void *mine, size_t bytes, void *all) {
  if (!c) return pz_error(PZ_ERR_INVALID_ARG, "all-reduce host exchange: NULL communicator");
  if (bytes <= PZ_AR_HOSTX_SLOT) return pz_ar_comm_allgather_host(c, tag, mine, bytes, all);
  const int W = c->world;
  char *tmp = (char *)malloc((size_t)W * PZ_AR_HOSTX_SLOT);
  if (!tmp) return pz_error(PZ_ERR_OOM, "all-reduce host exchange: host allocation");
  pz_status st = PZ_OK;
  for (size_t off = 0; off < bytes && st == PZ_OK; off += PZ_AR_HOSTX_SLOT) {
    const size_t n = bytes - off < PZ_AR_HOSTX_SLOT ? bytes - off : PZ_AR_HOSTX_SLOT;
    st = pz_ar_comm_allgather_host(c, tag, (const char *)mine + off, n, tmp);
    for (int q = 0; q < W && st == PZ_OK; q++) memcpy((char *)all + (size_t)q * bytes + off, tmp + (size_t)q * n, n);
  }
  free(tmp);
  return st;
}

pz_status pz_ar_comm_barrier(pz_ar_comm *c) { return pz_ar_comm_allgather_host(c, PZ_HX_BARRIER, NULL, 0, NULL); }

pz_status pz_ar_comm_join_file(int world, int rank, const char *id_file, int device, int64_t max_m, int64_t max_H,
                               int timeout_ms, pz_ar_comm **comm, pz_ar_unique_id *id) {
  if (!comm || !id || !id_file || !id_file[0])
    return pz_error(PZ_ERR_INVALID_ARG, "all-reduce join: NULL communicator, id or id file");
  *comm = NULL;
  if (device < 0) {
    int have = 0;
    if (cudaGetDeviceCount(&have) != cudaSuccess) {
      (void)cudaGetLastError();
      have = 0;
    }
    if (have == 0) return pz_error(PZ_ERR_NO_DEVICE, "no CUDA GPU is visible; one rank per process needs one GPU per rank");
    device = rank % have;
  }
  if (rank == 0) {
    PZ_CHECK(pz_ar_get_unique_id(id));
    pz_status st = pz_ar_unique_id_write_file(id, id_file);
    if (st != PZ_OK) {
      pz_ar_unique_id_remove(id);
      return st;
    }
  } else {
    PZ_CHECK(pz_ar_unique_id_read_file(id_file, timeout_ms, id));
  }
  pz_ar_comm_config cc = PZ_AR_COMM_CONFIG_INIT;
  cc.world = world;
  cc.rank = rank;
  cc.device = device;
  cc.max_m = max_m;
  cc.max_H = max_H;
  cc.timeout_ms = timeout_ms;
  pz_status st = pz_ar_comm_init_rank_config(comm, &cc, *id);
  if (st != PZ_OK && rank == 0) {
    pz_ar_unique_id_remove(id);
    unlink(id_file);
  }
  return st;
}

void pz_ar_comm_leave_file(pz_ar_comm *comm, const pz_ar_unique_id *id, int rank, const char *id_file) {
  if (comm) {
    /* a broken group has no common round left to meet in: leave at once, telling the peers */
    if (comm->broken) pz_ar_comm_abort(comm);
    else if (pz_ar_comm_barrier(comm) != PZ_OK) pz_ar_comm_abort(comm);
    pz_ar_comm_destroy(comm);
  }
  if (rank == 0 && id && id_file) {
    pz_ar_unique_id_remove(id);
    unlink(id_file);
  }
}
