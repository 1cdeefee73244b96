/* NCCL fallback of the fused AR + RMSNorm (ar_nccl.h). NCCL's C API is declared here with the
 * few types it needs (opaque communicator, int enums: ncclFloat32 = 7, ncclSum = 0, as in
 * nccl.h of NCCL 2.x) and resolved with dlsym, so no NCCL headers are needed to build. */
#define _POSIX_C_SOURCE 200809L
#include "backend/cuda/ar_nccl.h"
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include "backend/cuda/cuda_util.h"

typedef struct ncclComm *nccl_comm_t;
enum { NCCL_SUCCESS = 0, NCCL_FLOAT32 = 7, NCCL_SUM = 0 };

struct pz_nccl {
  void *lib;
  int tp;
  nccl_comm_t comms[PZ_AR_MAX_TP];
  int (*init_all)(nccl_comm_t *, int, const int *);
  int (*all_reduce)(const void *, void *, size_t, int, int, nccl_comm_t, cudaStream_t);
  int (*group_start)(void);
  int (*group_end)(void);
  int (*destroy)(nccl_comm_t);
  const char *(*err)(int);
};

static const char *nccl_err(pz_nccl *n, int r) { return n->err ? n->err(r) : "?"; }

pz_status pz_nccl_create(const pz_comm *c, const char *lib_name, pz_nccl **out) {
  *out = NULL;
  setenv("NCCL_NVLS_ENABLE", "0", 1);
  const char *names[] = {lib_name, "libnccl.so.2", "libnccl.so"};
  void *lib = NULL;
  for (int i = 0; i < 3 && !lib; i++)
    if (names[i] && *names[i]) lib = dlopen(names[i], RTLD_NOW | RTLD_GLOBAL);
  if (!lib)
    return pz_error(PZ_ERR_UNSUPPORTED, "NCCL library not found (%s); set PREZERO_NCCL_LIB to libnccl.so.2 "
                    "or add its folder to LD_LIBRARY_PATH", dlerror());
  pz_nccl *n = (pz_nccl *)calloc(1, sizeof *n);
  if (!n) { dlclose(lib); return pz_error(PZ_ERR_OOM, "nccl: out of host memory"); }
  n->lib = lib;
  n->tp = pz_comm_tp(c);
  *(void **)&n->init_all = dlsym(lib, "ncclCommInitAll");
  *(void **)&n->all_reduce = dlsym(lib, "ncclAllReduce");
  *(void **)&n->group_start = dlsym(lib, "ncclGroupStart");
  *(void **)&n->group_end = dlsym(lib, "ncclGroupEnd");
  *(void **)&n->destroy = dlsym(lib, "ncclCommDestroy");
  *(void **)&n->err = dlsym(lib, "ncclGetErrorString");
  if (!n->init_all || !n->all_reduce || !n->group_start || !n->group_end || !n->destroy) {
    dlclose(lib);
    free(n);
    return pz_error(PZ_ERR_UNSUPPORTED, "NCCL library lacks ncclCommInitAll/ncclAllReduce/ncclGroup*");
  }
  int devs[PZ_AR_MAX_TP];
  for (int r = 0; r < n->tp; r++) devs[r] = pz_comm_device(c, r);
  int rc = n->init_all(n->comms, n->tp, devs);
  if (rc != NCCL_SUCCESS) {
    pz_status s = pz_error(PZ_ERR_NCCL, "ncclCommInitAll(%d ranks): %s", n->tp, nccl_err(n, rc));
    dlclose(lib);
    free(n);
    return s;
  }
  *out = n;
  return PZ_OK;
}

void pz_nccl_destroy(pz_nccl *n) {
  if (!n) return;
  for (int r = 0; r < n->tp; r++)
    if (n->comms[r]) n->destroy(n->comms[r]);
  /* The library stays loaded: NCCL keeps threads that may still reference it. */
  free(n);
}

pz_status pz_ar_rmsnorm_nccl_launch_all(pz_nccl *n, const pz_comm *c, const pz_ar_rmsnorm_args *args,
                                        const cudaStream_t *streams) {
  int tp = pz_comm_tp(c);
  if (!n || n->tp != tp) return pz_error(PZ_ERR_INVALID_ARG, "nccl: communicator does not match");
  for (int r = 0; r < tp; r++)
    if (args[r].ld_partial != args[r].H || args[r].m != args[0].m || args[r].H != args[0].H)
      return pz_error(PZ_ERR_INVALID_ARG, "nccl: partials must be contiguous (ld_partial == H), same m, H on all ranks");
  if (tp > 1) {
    /* The group is always closed; a cudaSetDevice failure inside it is the error reported. */
    pz_status st = PZ_OK;
    int rc = n->group_start();
    for (int r = 0; r < tp && rc == NCCL_SUCCESS && st == PZ_OK; r++) {
      PZ_CUDA_KEEP(cudaSetDevice(pz_comm_device(c, r)), st);
      if (st != PZ_OK) break;
      rc = n->all_reduce(args[r].partial, (void *)args[r].partial, (size_t)(args[r].m * args[r].H), NCCL_FLOAT32,
                         NCCL_SUM, n->comms[r], streams[r]);
    }
    int rc2 = n->group_end();
    if (st != PZ_OK) return st;
    if (rc != NCCL_SUCCESS || rc2 != NCCL_SUCCESS)
      return pz_error(PZ_ERR_NCCL, "ncclAllReduce: %s", nccl_err(n, rc != NCCL_SUCCESS ? rc : rc2));
  }
  for (int r = 0; r < tp; r++) {
    const pz_ar_rmsnorm_args *a = &args[r];
    PZ_CUDA_CHECK(cudaSetDevice(pz_comm_device(c, r)));
    PZ_CHECK(pz_rmsnorm_residual_launch(a, streams[r]));
    if (a->fill.ptr) {
      size_t es = pz_dtype_size(a->fill.dtype);
      int64_t cols = a->fill_all ? a->fill.n_total : a->fill.n_base;
      if (cols > 0)
        PZ_CUDA_CHECK(cudaMemset2DAsync(a->fill.ptr, (size_t)a->fill.row_stride * es, 0, (size_t)cols * es,
                                        (size_t)a->m, streams[r]));
    }
  }
  return PZ_OK;
}
