/* TP communicator: peer-access check by a real cross-device write, inbox allocation, reset and
 * error read-back (comm.h). */
extern "C" {
#include "core/status.h" /* C header without C++ guards */
}
#include "backend/cuda/comm.h"
#include <stdlib.h>
#include <string.h>
#include "backend/cuda/cuda_util.h"

struct pz_comm {
  pz_comm_config cfg;
  pz_comm_rank_view view[PZ_AR_MAX_TP];
  size_t inbox_bytes, raw_bytes, flag_bytes, ss_bytes;
  void *base[PZ_AR_MAX_TP]; /* one allocation per rank: inbox | raw | flags */
};

#define PZ_P2P_CHECK_WORDS 16384 /* 64 KiB written across each pair */

/* dst[i] = pattern(i, salt): written by the source device into the peer's memory. */
__global__ void pz_p2p_write_kernel(unsigned *dst, int n, unsigned salt) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    dst[i] = (unsigned)i * 2654435761u ^ salt;
}

/* cudaDeviceEnablePeerAccess, where "already enabled" (by an earlier communicator) is success. */
static cudaError_t enable_peer(int dj) {
  cudaError_t e = cudaDeviceEnablePeerAccess(dj, 0);
  if (e == cudaErrorPeerAccessAlreadyEnabled) {
    (void)cudaGetLastError();
    e = cudaSuccess;
  }
  return e;
}

static pz_status check_pair(int di, int dj) {
  int can = 0;
  PZ_CUDA_CHECK(cudaDeviceCanAccessPeer(&can, di, dj));
  if (!can)
    return pz_error(PZ_ERR_NO_P2P, "GPU %d cannot access GPU %d (cudaDeviceCanAccessPeer = 0); "
                    "use the NCCL path (PREZERO_AR_ALGO=nccl) or GPUs linked by NVLink/PCIe P2P", di, dj);
  PZ_CUDA_CHECK(cudaSetDevice(di));
  PZ_CHECK(PZ_CUDA_STATUS_AS(enable_peer(dj), PZ_ERR_NO_P2P, "enabling peer access GPU %d -> GPU %d failed", di, dj));
  /* A real write over the link: kernel on di stores into dj's memory. A failure of the write
   * itself (launch, sync, read-back) is PZ_ERR_NO_P2P; of the set-up around it PZ_ERR_CUDA. */
  unsigned *buf = NULL;
  PZ_CUDA_CHECK(cudaSetDevice(dj));
  PZ_CUDA_CHECK(cudaMalloc(&buf, PZ_P2P_CHECK_WORDS * sizeof(unsigned)));
  pz_status st = PZ_OK;
  int bad = -1;
  unsigned *host = NULL;
  const unsigned salt = 0x9e3779b9u ^ (unsigned)(di * 131 + dj);
  PZ_CUDA_CHECK_GOTO(cudaMemset(buf, 0, PZ_P2P_CHECK_WORDS * sizeof(unsigned)), st, done);
  PZ_CUDA_CHECK_GOTO(cudaDeviceSynchronize(), st, done);
  PZ_CUDA_CHECK_GOTO(cudaSetDevice(di), st, done);
  pz_p2p_write_kernel<<<16, 256>>>(buf, PZ_P2P_CHECK_WORDS, salt);
  PZ_CHECK_GOTO(PZ_CUDA_STATUS_AS(cudaGetLastError(), PZ_ERR_NO_P2P, "peer write GPU %d -> GPU %d failed", di, dj), st,
                done);
  PZ_CHECK_GOTO(PZ_CUDA_STATUS_AS(cudaDeviceSynchronize(), PZ_ERR_NO_P2P, "peer write GPU %d -> GPU %d failed", di, dj),
                st, done);
  host = (unsigned *)malloc(PZ_P2P_CHECK_WORDS * sizeof(unsigned));
  if (host) {
    PZ_CHECK_GOTO(PZ_CUDA_STATUS_AS(cudaSetDevice(dj), PZ_ERR_NO_P2P, "peer write GPU %d -> GPU %d failed", di, dj), st,
                  done);
    PZ_CHECK_GOTO(PZ_CUDA_STATUS_AS(cudaMemcpy(host, buf, PZ_P2P_CHECK_WORDS * sizeof(unsigned), cudaMemcpyDeviceToHost),
                                    PZ_ERR_NO_P2P, "peer write GPU %d -> GPU %d failed", di, dj),
                  st, done);
    bad = 0;
    for (int i = 0; i < PZ_P2P_CHECK_WORDS; i++)
      if (host[i] != ((unsigned)i * 2654435761u ^ salt)) bad++;
  }
  if (bad != 0)
    st = pz_error(PZ_ERR_NO_P2P, "peer write GPU %d -> GPU %d: %d of %d words wrong although the "
                  "driver reports peer access; use PREZERO_AR_ALGO=nccl", di, dj, bad, PZ_P2P_CHECK_WORDS);
done:
  free(host);
  PZ_CUDA_IGNORE(cudaSetDevice(dj)); /* cleanup: st already says how the check went */
  PZ_CUDA_IGNORE(cudaFree(buf));
  return st;
}

/* Cleanup (no status to return): these calls' failures are ignored on purpose. */
static void free_all(pz_comm *c) {
  for (int r = 0; r < c->cfg.tp; r++) {
    pz_comm_rank_view *v = &c->view[r];
    PZ_CUDA_IGNORE(cudaSetDevice(v->device));
    if (c->base[r]) PZ_CUDA_IGNORE(cudaFree(c->base[r]));
    if (v->ss) PZ_CUDA_IGNORE(cudaFree(v->ss));
    if (v->ctrl) PZ_CUDA_IGNORE(cudaFree(v->ctrl));
  }
}

pz_status pz_comm_create(const pz_comm_config *cfg, pz_comm **out) {
  *out = NULL;
  if (!cfg || cfg->tp < 1 || cfg->tp > PZ_AR_MAX_TP || cfg->max_m < 1 || cfg->max_H < 8 ||
      cfg->max_H % 8 != 0)
    return pz_error(PZ_ERR_INVALID_ARG, "comm: tp must be 1..%d, max_m >= 1, max_H a positive multiple of 8",
                    PZ_AR_MAX_TP);
  int ndev = 0;
  PZ_CHECK(PZ_CUDA_STATUS_AS(cudaGetDeviceCount(&ndev), PZ_ERR_NO_DEVICE, "comm: no CUDA device"));
  if (ndev == 0) return pz_error(PZ_ERR_NO_DEVICE, "comm: no CUDA device (none visible)");
  for (int r = 0; r < cfg->tp; r++) {
    if (cfg->devices[r] < 0 || cfg->devices[r] >= ndev)
      return pz_error(PZ_ERR_NO_DEVICE, "comm: rank %d wants GPU %d but %d GPU(s) are visible", r,
                      cfg->devices[r], ndev);
    for (int q = 0; q < r; q++)
      if (cfg->devices[q] == cfg->devices[r] && !cfg->allow_shared_device)
        return pz_error(PZ_ERR_INVALID_ARG, "comm: ranks %d and %d both on GPU %d (one device per rank)",
                        q, r, cfg->devices[r]);
  }
  for (int i = 0; i < cfg->tp; i++)
    for (int j = 0; j < cfg->tp; j++)
      if (cfg->devices[i] != cfg->devices[j]) PZ_CHECK(check_pair(cfg->devices[i], cfg->devices[j]));

  pz_comm *c = (pz_comm *)calloc(1, sizeof *c);
  if (!c) return pz_error(PZ_ERR_OOM, "comm: out of host memory");
  c->cfg = *cfg;
  long long tus = cfg->timeout_us; /* the executor puts PREZERO_AR_TIMEOUT_US here */
  c->inbox_bytes = cfg->tp > 1 ? (size_t)2 * cfg->tp * cfg->max_m * (cfg->max_H / 2) * sizeof(uint4) : 0;
  c->raw_bytes = cfg->tp > 1 ? (size_t)2 * cfg->tp * cfg->max_m * (cfg->max_H / 4) * sizeof(float4) : 0;
  c->flag_bytes = cfg->tp > 1 ? (size_t)2 * cfg->tp * cfg->max_m * 16 * sizeof(unsigned) : 0;
  c->ss_bytes = (size_t)cfg->max_m * 16 * sizeof(uint2);
  pz_status st = PZ_OK;
  for (int r = 0; r < cfg->tp; r++) {
    pz_comm_rank_view *v = &c->view[r];
    v->rank = r;
    v->tp = cfg->tp;
    v->device = cfg->devices[r];
    v->max_m = cfg->max_m;
    v->max_H = cfg->max_H;
    v->timeout_ns = tus > 0 ? tus * 1000 : 0;
    PZ_CUDA_CHECK_MSG_GOTO(cudaSetDevice(v->device), st, fail, "comm: cudaSetDevice(%d)", v->device);
    size_t all = c->inbox_bytes + c->raw_bytes + c->flag_bytes;
    /* Each allocation goes to a local first, so a failed one leaves its field NULL for free_all. */
    void *base = NULL, *ss = NULL, *ctrl = NULL;
    if (all)
      PZ_CUDA_CHECK_MSG_GOTO(cudaMalloc(&base, all), st, fail, "comm: cannot allocate %zu bytes of inbox on GPU %d", all,
                             v->device);
    c->base[r] = base;
    PZ_CUDA_CHECK_MSG_GOTO(cudaMalloc(&ss, c->ss_bytes), st, fail, "comm: cannot allocate %zu bytes of inbox on GPU %d",
                           all, v->device);
    v->ss = (uint2 *)ss;
    PZ_CUDA_CHECK_MSG_GOTO(cudaMalloc(&ctrl, 8 * sizeof(unsigned)), st, fail,
                           "comm: cannot allocate %zu bytes of inbox on GPU %d", all, v->device);
    v->ctrl = (unsigned *)ctrl;
    if (all) {
      v->inbox[r] = (uint4 *)c->base[r];
      v->raw[r] = (float4 *)((char *)c->base[r] + c->inbox_bytes);
      v->flags[r] = (unsigned *)((char *)c->base[r] + c->inbox_bytes + c->raw_bytes);
    }
  }
  if (st == PZ_OK)
    for (int r = 0; r < cfg->tp; r++)
      for (int q = 0; q < cfg->tp; q++) {
        c->view[r].inbox[q] = c->view[q].inbox[q];
        c->view[r].raw[q] = c->view[q].raw[q];
        c->view[r].flags[q] = c->view[q].flags[q];
      }
  if (st == PZ_OK) st = pz_comm_reset(c);
fail:
  if (st != PZ_OK) {
    free_all(c);
    free(c);
    return st;
  }
  *out = c;
  return PZ_OK;
}

void pz_comm_destroy(pz_comm *c) {
  if (!c) return;
  for (int r = 0; r < c->cfg.tp; r++) { /* a destroy cannot fail: results ignored on purpose */
    PZ_CUDA_IGNORE(cudaSetDevice(c->view[r].device));
    PZ_CUDA_IGNORE(cudaDeviceSynchronize());
  }
  free_all(c);
  free(c);
}

int pz_comm_tp(const pz_comm *c) { return c->cfg.tp; }
int pz_comm_device(const pz_comm *c, int rank) {
  return c && rank >= 0 && rank < pz_comm_tp(c) ? c->view[rank].device : -1;
}
const pz_comm_rank_view *pz_comm_view(const pz_comm *c, int rank) {
  return c && rank >= 0 && rank < pz_comm_tp(c) ? &c->view[rank] : NULL;
}

pz_status pz_comm_check(pz_comm *c) {
  for (int r = 0; r < c->cfg.tp; r++) {
    unsigned h[8];
    PZ_CUDA_CHECK(cudaSetDevice(c->view[r].device));
    PZ_CUDA_CHECK(cudaDeviceSynchronize());
    PZ_CUDA_CHECK(cudaMemcpy(h, c->view[r].ctrl, sizeof h, cudaMemcpyDeviceToHost));
    if (h[2])
      return pz_error(PZ_ERR_TIMEOUT, "all-reduce: rank %d (GPU %d) waited more than %lld us for a peer "
                      "(row %u, sequence %u); reset the communicator", r, c->view[r].device,
                      c->view[r].timeout_ns / 1000, h[3], h[0] + 1);
  }
  return PZ_OK;
}

pz_status pz_comm_reset(pz_comm *c) {
  for (int r = 0; r < c->cfg.tp; r++) {
    pz_comm_rank_view *v = &c->view[r];
    PZ_CUDA_CHECK(cudaSetDevice(v->device));
    PZ_CUDA_CHECK(cudaDeviceSynchronize());
  }
  for (int r = 0; r < c->cfg.tp; r++) {
    pz_comm_rank_view *v = &c->view[r];
    PZ_CUDA_CHECK(cudaSetDevice(v->device));
    size_t all = c->inbox_bytes + c->raw_bytes + c->flag_bytes;
    if (all) PZ_CUDA_CHECK(cudaMemset(c->base[r], 0, all));
    PZ_CUDA_CHECK(cudaMemset(v->ss, 0, c->ss_bytes));
    PZ_CUDA_CHECK(cudaMemset(v->ctrl, 0, 8 * sizeof(unsigned)));
    PZ_CUDA_CHECK(cudaDeviceSynchronize());
  }
  return PZ_OK;
}
