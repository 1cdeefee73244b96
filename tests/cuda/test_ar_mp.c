/* Multi-process TP all-reduce (include/prezero/allreduce.h): the parent forks one process per
 * rank BEFORE any CUDA call of its own (a probe child counts the GPUs), every rank joins one
 * group through pz_ar_get_unique_id / pz_ar_comm_init_rank, runs the fused AR + residual +
 * RMSNorm with zero_fill on its own inputs, and checks its result against the CPU reference
 * (pz_ref_ar_rmsnorm over every rank's partial, regenerated from the seeds); the parent checks
 * that every rank's outputs are bit-identical (hashes in shared memory). Then mixed-size
 * CUDA-graph replays (PZ_AR_MP_REPLAYS, default 10,000), each checked bit for bit, and three
 * failure cases on GPU 0: a rank that exits before the rendezvous, a rank that stops launching,
 * a rank that exits mid-run: the survivor must get PZ_ERR_TIMEOUT within a few seconds.
 * Two processes on GPU 0 always; on GPUs 0 and 1 too when two are visible. Every timeout, wait and
 * elapsed-time bound is multiplied by PZ_TEST_TIMEOUT_SCALE (pz_test.h). Exits 77 without a GPU. */
#define _POSIX_C_SOURCE 200809L
#define _DEFAULT_SOURCE
#include <cuda_runtime.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "core/fingerprint.h"
#include "backend/cpu/ref_ops.h"
#include "core/dtype.h"
#include "prezero/allreduce.h"
#include "pz_test.h"

#define NCASE 6
#define WORLD 2

typedef struct shm {
  volatile int stopped, survivor_done, exited;
  uint64_t hash[WORLD][NCASE + 1]; /* eager cases, then the replay stream */
  int done[WORLD][NCASE + 1];
} shm_t;
static shm_t *g_shm;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}
static void msleep(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

#define CU(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) { fprintf(stderr, "[rank %d] %s:%d: %s: %s\n", g_rank, __FILE__, __LINE__, #call, cudaGetErrorString(e_)); _exit(1); } } while (0)
static int g_rank = -1;


/* Seeded inputs: xorshift per (seed). */
typedef struct { uint64_t s; } rng_t;
static uint32_t rnext(rng_t *r) { r->s ^= r->s << 13; r->s ^= r->s >> 7; r->s ^= r->s << 17; return (uint32_t)(r->s >> 11); }
static float runi(rng_t *r) { return (float)(rnext(r) & 0xffffff) / 16777216.0f * 2.0f - 1.0f; }
static void gen(float *x, int64_t n, uint64_t seed, int integer) {
  rng_t r = {seed * 0x9e3779b97f4a7c15ull + 12345};
  for (int64_t i = 0; i < n; i++) x[i] = integer ? (float)((int)(rnext(&r) % 17) - 8) : runi(&r) * 3.0f;
}
static void gen_w(pz_bf16 *w, int64_t H, uint64_t seed) {
  rng_t r = {seed * 31 + 7};
  for (int64_t i = 0; i < H; i++) w[i] = pz_f32_to_bf16(0.5f + (float)(rnext(&r) % 8) * 0.125f);
}

typedef struct { int64_t m, H; int integer, fill, fill_all, in_place; } case_t;
static const case_t k_cases[NCASE] = {
  {1, 2048, 1, 0, 0, 0}, {7, 2048, 0, 1, 0, 0}, {64, 7168, 1, 1, 1, 0},
  {128, 7168, 0, 1, 1, 0}, {33, 5120, 1, 1, 0, 1}, {16, 4096, 0, 0, 0, 1},
};
#define FILL_TOTAL 288
#define FILL_BASE 96
#define FILL_STRIDE 320

/* One operand set of this rank on the device, with its expected outputs. */
typedef struct {
  int64_t m, H;
  float *d_part, *d_rin, *d_rout;
  pz_bf16 *d_w, *d_x;
  float *d_fill;
  float *exp_res;   /* [m,H] */
  pz_bf16 *exp_x;   /* [m,H] */
  int integer, fill, fill_all, in_place;
  float *h_res_in;
} opset;

static void opset_make(opset *o, const case_t *c, uint64_t seed, int rank) {
  memset(o, 0, sizeof *o);
  o->m = c->m; o->H = c->H; o->integer = c->integer; o->fill = c->fill; o->fill_all = c->fill_all; o->in_place = c->in_place;
  size_t n = (size_t)c->m * c->H;
  float *parts[WORLD];
  for (int r = 0; r < WORLD; r++) {
    parts[r] = (float *)malloc(n * 4);
    gen(parts[r], (int64_t)n, seed * 16 + 1 + r, c->integer);
  }
  o->h_res_in = (float *)malloc(n * 4);
  gen(o->h_res_in, (int64_t)n, seed * 16 + 9, c->integer);
  pz_bf16 *w = (pz_bf16 *)malloc((size_t)c->H * 2);
  gen_w(w, c->H, seed);
  o->exp_res = (float *)malloc(n * 4);
  o->exp_x = (pz_bf16 *)malloc(n * 2);
  pz_ref_ar_rmsnorm(WORLD, (const float *const *)parts, c->H, o->h_res_in, o->exp_res, c->H, w, 1e-6f, c->m, c->H,
                    o->exp_x, c->H);
  CU(cudaMalloc((void **)&o->d_part, n * 4));
  CU(cudaMalloc((void **)&o->d_rin, n * 4));
  CU(cudaMalloc((void **)&o->d_rout, n * 4));
  CU(cudaMalloc((void **)&o->d_w, (size_t)c->H * 2));
  CU(cudaMalloc((void **)&o->d_x, n * 2));
  CU(cudaMalloc((void **)&o->d_fill, (size_t)c->m * FILL_STRIDE * 4));
  CU(cudaMemcpy(o->d_part, parts[rank], n * 4, cudaMemcpyHostToDevice));
  CU(cudaMemcpy(o->d_w, w, (size_t)c->H * 2, cudaMemcpyHostToDevice));
  for (int r = 0; r < WORLD; r++) free(parts[r]);
  free(w);
}
static void opset_free(opset *o) {
  cudaFree(o->d_part); cudaFree(o->d_rin); cudaFree(o->d_rout); cudaFree(o->d_w); cudaFree(o->d_x); cudaFree(o->d_fill);
  free(o->exp_res); free(o->exp_x); free(o->h_res_in);
}
/* Inputs restored, outputs poisoned (NaN / 0xff), on stream s. */
static void opset_reset(opset *o, cudaStream_t s) {
  size_t n = (size_t)o->m * o->H;
  CU(cudaMemcpyAsync(o->d_rin, o->h_res_in, n * 4, cudaMemcpyHostToDevice, s));
  if (!o->in_place) CU(cudaMemsetAsync(o->d_rout, 0xff, n * 4, s));
  CU(cudaMemsetAsync(o->d_x, 0xff, n * 2, s));
  CU(cudaMemsetAsync(o->d_fill, 0xff, (size_t)o->m * FILL_STRIDE * 4, s));
}
static pz_ar_rmsnorm_params opset_params(const opset *o) {
  pz_ar_rmsnorm_params p;
  memset(&p, 0, sizeof p);
  p.partial = o->d_part; p.ld_partial = o->H;
  p.residual_in = o->d_rin; p.residual_out = o->in_place ? o->d_rin : o->d_rout; p.ld_res = o->H;
  p.weight = o->d_w; p.x_norm = o->d_x; p.ld_x = o->H;
  p.eps = 1e-6f; p.m = o->m; p.H = o->H;
  if (o->fill) {
    p.fill_ptr = o->d_fill; p.fill_n_total = FILL_TOTAL; p.fill_n_base = FILL_BASE; p.fill_row_stride = FILL_STRIDE;
    p.fill_dtype = PZ_AR_FILL_F32; p.fill_all = o->fill_all;
  }
  return p;
}
/* Copies the outputs back and compares: integer inputs bit for bit; else residual bit for bit
 * and x_norm within one bf16 ulp. Fill: zeros in [0, cols), poison beyond. Returns failures;
 * *hash gets the outputs' hash. */
static int opset_verify(const opset *o, const char *what, uint64_t *hash) {
  size_t n = (size_t)o->m * o->H;
  float *res = (float *)malloc(n * 4);
  pz_bf16 *x = (pz_bf16 *)malloc(n * 2);
  uint32_t *fill = (uint32_t *)malloc((size_t)o->m * FILL_STRIDE * 4);
  CU(cudaMemcpy(res, o->in_place ? o->d_rin : o->d_rout, n * 4, cudaMemcpyDeviceToHost));
  CU(cudaMemcpy(x, o->d_x, n * 2, cudaMemcpyDeviceToHost));
  CU(cudaMemcpy(fill, o->d_fill, (size_t)o->m * FILL_STRIDE * 4, cudaMemcpyDeviceToHost));
  int bad_r = 0, bad_x = 0, bad_f = 0;
  if (memcmp(res, o->exp_res, n * 4) != 0) bad_r = 1;
  for (size_t i = 0; i < n; i++) {
    if (x[i] == o->exp_x[i]) continue;
    int d = (int)x[i] - (int)o->exp_x[i];
    if (o->integer || d > 1 || d < -1 || ((x[i] ^ o->exp_x[i]) & 0x8000)) { bad_x++; }
  }
  int64_t cols = o->fill ? (o->fill_all ? FILL_TOTAL : FILL_BASE) : 0;
  for (int64_t r = 0; r < o->m; r++)
    for (int64_t c = 0; c < FILL_STRIDE; c++) {
      uint32_t v = fill[r * FILL_STRIDE + c];
      if (c < cols ? v != 0u : v != 0xffffffffu) bad_f++;
    }
  if (bad_r || bad_x || bad_f)
    fprintf(stderr, "[rank %d] %s m=%lld H=%lld: residual %s, %d x_norm values off, %d fill words wrong\n", g_rank, what,
            (long long)o->m, (long long)o->H, bad_r ? "DIFFERS" : "ok", bad_x, bad_f);
  uint64_t h = 1469598103934665603ull;
  h = pz_fnv1a64(h, res, n * 4);
  h = pz_fnv1a64(h, x, n * 2);
  *hash = pz_fnv1a64(*hash ^ h, fill, (size_t)o->m * FILL_STRIDE * 4);
  free(res); free(x); free(fill);
  return (bad_r || bad_x || bad_f) ? 1 : 0;
}

static int replays_wanted(void) {
  const char *e = getenv("PZ_AR_MP_REPLAYS");
  int n = e ? atoi(e) : 10000; /* issue 16: 10,000 mixed-size replays (about 55 s on one H200, 2 processes) */
  return n > 0 ? n : 10000;
}

/* The correctness child: eager cases, then mixed-size graph replays. Returns the exit code. */
static int child_run(int rank, int device, pz_ar_unique_id id) {
  pz_ar_comm_config cfg = PZ_AR_COMM_CONFIG_INIT;
  cfg.world = WORLD; cfg.rank = rank; cfg.device = device; cfg.max_m = 128; cfg.max_H = 7168; cfg.timeout_ms = (int)pz_test_timeout(10000);
  pz_ar_comm *comm = NULL;
  CHECK_OK(pz_ar_comm_init_rank_config(&comm, &cfg, id));
  if (!comm) return 1;
  CHECK(pz_ar_comm_rank(comm) == rank && pz_ar_comm_world(comm) == WORLD && pz_ar_comm_device(comm) == device);
  cudaStream_t s;
  CU(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  /* Argument errors are reported at enqueue, not by a hang. */
  {
    pz_ar_rmsnorm_params bad;
    memset(&bad, 0, sizeof bad);
    CHECK_ST(pz_ar_rmsnorm(comm, &bad, s), PZ_ERR_INVALID_ARG);
    CHECK_ST(pz_ar_rmsnorm(NULL, &bad, s), PZ_ERR_INVALID_ARG);
  }
  /* Eager cases. */
  for (int ci = 0; ci < NCASE; ci++) {
    opset o;
    opset_make(&o, &k_cases[ci], 100 + ci, rank);
    opset_reset(&o, s);
    pz_ar_rmsnorm_params p = opset_params(&o);
    CHECK_OK(pz_ar_rmsnorm(comm, &p, s));
    CHECK_OK(pz_ar_comm_check(comm, s));
    uint64_t h = 0;
    char what[32];
    snprintf(what, sizeof what, "eager case %d", ci);
    pz_test_failures += opset_verify(&o, what, &h);
    g_shm->hash[rank][ci] = h;
    g_shm->done[rank][ci] = 1;
    opset_free(&o);
  }
  /* Graph replays: 7 sizes x 2 input variants, one graph each, replayed in a seeded order that
   * is the same on every rank; each replay poisons its outputs first and is checked bit for bit. */
  enum { NS = 7, NV = 2 };
  static const int64_t ms[NS] = {1, 2, 5, 16, 33, 64, 128};
  opset g[NS][NV];
  cudaGraphExec_t ge[NS][NV];
  for (int i = 0; i < NS; i++)
    for (int v = 0; v < NV; v++) {
      case_t c = {ms[i], 7168, 1, 1, (i + v) & 1, 0};
      opset_make(&g[i][v], &c, 1000 + i * NV + v, rank);
      pz_ar_rmsnorm_params p = opset_params(&g[i][v]);
      cudaGraph_t graph;
      CU(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
      pz_status st = pz_ar_rmsnorm(comm, &p, s);
      CU(cudaStreamEndCapture(s, &graph));
      CHECK_OK(st);
      CU(cudaGraphInstantiate(&ge[i][v], graph, 0));
      CU(cudaGraphDestroy(graph));
    }
  const int n_rep = replays_wanted();
  rng_t order = {424242};
  uint64_t h = 0;
  int bad = 0;
  double t0 = now_s();
  for (int it = 0; it < n_rep; it++) {
    int i = (int)(rnext(&order) % NS), v = (int)(rnext(&order) % NV);
    opset_reset(&g[i][v], s);
    CU(cudaGraphLaunch(ge[i][v], s));
    pz_status st = pz_ar_comm_check(comm, s);
    if (st != PZ_OK) {
      CHECK_OK(st);
      break;
    }
    char what[48];
    snprintf(what, sizeof what, "replay %d", it);
    if (opset_verify(&g[i][v], what, &h)) {
      if (++bad > 5) break;
    }
  }
  pz_test_failures += bad;
  printf("[rank %d] GPU %d: %d graph replays in %.2f s, %d wrong\n", rank, device, n_rep, now_s() - t0, bad);
  g_shm->hash[rank][NCASE] = h;
  g_shm->done[rank][NCASE] = 1;
  for (int i = 0; i < NS; i++)
    for (int v = 0; v < NV; v++) {
      cudaGraphExecDestroy(ge[i][v]);
      opset_free(&g[i][v]);
    }
  CU(cudaStreamDestroy(s));
  pz_ar_comm_destroy(comm);
  return pz_test_failures ? 1 : 0;
}

enum { FAIL_BEFORE = 0, FAIL_STALL = 1, FAIL_EXIT = 2 };

/* Failure cases: rank 1 misbehaves, rank 0 must see PZ_ERR_TIMEOUT within a few seconds. */
static int child_fail(int kind, int rank, int device, pz_ar_unique_id id) {
  const int tmo = (int)pz_test_timeout(1500);
  if (kind == FAIL_BEFORE && rank == 1) _exit(0); /* never joins */
  pz_ar_comm *comm = NULL;
  double t0 = now_s();
  pz_status st = pz_ar_comm_init_rank(&comm, WORLD, rank, id, device, tmo);
  if (kind == FAIL_BEFORE) {
    double dt = now_s() - t0;
    CHECK_ST(st, PZ_ERR_TIMEOUT);
    CHECK(comm == NULL);
    CHECK(dt < 5.0 * pz_test_timeout_scale());
    printf("[rank 0] peer never joined: %s after %.2f s (%s)\n", pz_status_string(st), dt, pz_last_error());
    return pz_test_failures ? 1 : 0;
  }
  CHECK_OK(st);
  if (!comm) return 1;
  cudaStream_t s;
  CU(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  case_t c = {4, 2048, 1, 1, 1, 0};
  opset o;
  opset_make(&o, &c, 77, rank);
  opset_reset(&o, s);
  pz_ar_rmsnorm_params p = opset_params(&o);
  const int n_ok = 5;
  for (int i = 0; i < n_ok; i++) CHECK_OK(pz_ar_rmsnorm(comm, &p, s));
  if (rank == 1) {
    CHECK_OK(pz_ar_comm_check(comm, s));
    if (kind == FAIL_EXIT) {
      g_shm->exited = 1;
      _exit(pz_test_failures ? 1 : 0); /* mid-run: rank 0 has more launches queued */
    }
    g_shm->stopped = 1; /* alive, but launches nothing more */
    for (int i = 0; i < pz_test_timeout(30000) && !g_shm->survivor_done; i++) msleep(1);
    opset_free(&o);
    pz_ar_comm_destroy(comm);
    return pz_test_failures ? 1 : 0;
  }
  /* Rank 0: three more launches than rank 1 makes, queued at once. */
  for (int i = 0; i < 3; i++) CHECK_OK(pz_ar_rmsnorm(comm, &p, s));
  if (kind == FAIL_STALL)
    for (int i = 0; i < pz_test_timeout(20000) && !g_shm->stopped; i++) msleep(1);
  t0 = now_s();
  st = pz_ar_comm_check(comm, s);
  double dt = now_s() - t0;
  CHECK_ST(st, PZ_ERR_TIMEOUT);
  CHECK(dt < 8.0 * pz_test_timeout_scale());
  printf("[rank 0] peer %s: %s after %.2f s (%s)\n", kind == FAIL_EXIT ? "exited mid-run" : "stopped launching",
         pz_status_string(st), dt, pz_last_error());
  /* Once flagged, later launches end at once. */
  CHECK_OK(pz_ar_rmsnorm(comm, &p, s));
  t0 = now_s();
  CHECK_ST(pz_ar_comm_check(comm, s), PZ_ERR_TIMEOUT);
  dt = now_s() - t0;
  CHECK(dt < 1.0 * pz_test_timeout_scale());
  g_shm->survivor_done = 1;
  opset_free(&o);
  CU(cudaStreamDestroy(s));
  pz_ar_comm_destroy(comm);
  return pz_test_failures ? 1 : 0;
}

/* Forks WORLD ranks (kind < 0: correctness, else a failure case) and collects their exit codes
 * within `deadline_s` (SIGKILL to a child past it). Returns the number of failed ranks. */
static int run_group(int kind, const int *devices, double deadline_s, const char *label) {
  memset(g_shm, 0, sizeof *g_shm);
  pz_ar_unique_id id;
  pz_status st = pz_ar_get_unique_id(&id);
  if (st != PZ_OK) {
    fprintf(stderr, "%s: pz_ar_get_unique_id: %s\n", label, pz_last_error());
    return WORLD;
  }
  fflush(stdout);
  fflush(stderr);
  pid_t pid[WORLD];
  for (int r = 0; r < WORLD; r++) {
    pid[r] = fork();
    if (pid[r] == 0) {
      g_rank = r;
      int rc = kind < 0 ? child_run(r, devices[r], id) : child_fail(kind, r, devices[r], id);
      fflush(stdout);
      fflush(stderr);
      _exit(rc);
    }
  }
  int failed = 0, left = WORLD, code[WORLD] = {0, 0};
  int alive[WORLD] = {1, 1};
  double t0 = now_s();
  while (left > 0) {
    for (int r = 0; r < WORLD; r++) {
      if (!alive[r]) continue;
      int ws = 0;
      if (waitpid(pid[r], &ws, WNOHANG) == pid[r]) {
        alive[r] = 0;
        left--;
        code[r] = WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + (WIFSIGNALED(ws) ? WTERMSIG(ws) : 0);
      }
    }
    if (left > 0 && now_s() - t0 > deadline_s) {
      for (int r = 0; r < WORLD; r++)
        if (alive[r]) {
          fprintf(stderr, "%s: rank %d (pid %d) still running after %.0f s: killed (hang)\n", label, r, (int)pid[r],
                  deadline_s);
          kill(pid[r], SIGKILL);
          waitpid(pid[r], NULL, 0);
          alive[r] = 0;
          left--;
          code[r] = 124;
        }
    }
    if (left > 0) msleep(5);
  }
  pz_ar_unique_id_remove(&id);
  for (int r = 0; r < WORLD; r++)
    if (code[r] != 0) {
      fprintf(stderr, "%s: rank %d exited with %d\n", label, r, code[r]);
      failed++;
    }
  if (kind < 0) {
    for (int ci = 0; ci <= NCASE; ci++) {
      if (!g_shm->done[0][ci] || !g_shm->done[1][ci]) {
        fprintf(stderr, "%s: case %d not finished on every rank\n", label, ci);
        failed++;
      } else if (g_shm->hash[0][ci] != g_shm->hash[1][ci]) {
        fprintf(stderr, "%s: case %d: ranks' outputs differ (hash %016llx vs %016llx)\n", label, ci,
                (unsigned long long)g_shm->hash[0][ci], (unsigned long long)g_shm->hash[1][ci]);
        failed++;
      }
    }
  }
  printf("%s (%.1f s): %s\n", label, now_s() - t0, failed ? "FAILED" : "ok");
  fflush(stdout);
  return failed;
}

/* GPU count and whether GPU 0 accepts several processes, asked in a child so the parent never
 * touches CUDA (a CUDA context does not survive fork). */
static int probe_gpus(int *shared_ok) {
  pid_t p = fork();
  if (p == 0) {
    int n = 0, mode = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) n = 0;
    if (n > 0 && cudaDeviceGetAttribute(&mode, cudaDevAttrComputeMode, 0) == cudaSuccess &&
        (mode == cudaComputeModeExclusiveProcess || mode == cudaComputeModeProhibited))
      n += 100;
    _exit(n > 199 ? 199 : n);
  }
  int ws = 0;
  waitpid(p, &ws, 0);
  int n = WIFEXITED(ws) ? WEXITSTATUS(ws) : 0;
  *shared_ok = n < 100;
  return n % 100;
}

int main(void) {
  int shared_ok = 1;
  int ndev = probe_gpus(&shared_ok);
  if (ndev == 0) {
    printf("no CUDA device: skipped\n");
    return 77;
  }
  g_shm = (shm_t *)mmap(NULL, sizeof(shm_t), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (g_shm == MAP_FAILED) {
    perror("mmap");
    return 1;
  }
  int failed = 0;
  const int same[WORLD] = {0, 0}, two[WORLD] = {0, 1};
  if (shared_ok) {
    failed += run_group(-1, same, 120 * pz_test_timeout_scale(), "2 processes on GPU 0: eager cases + graph replays");
    failed += run_group(FAIL_BEFORE, same, 30 * pz_test_timeout_scale(), "2 processes on GPU 0: rank 1 exits before the rendezvous");
    failed += run_group(FAIL_STALL, same, 30 * pz_test_timeout_scale(), "2 processes on GPU 0: rank 1 stops launching");
    failed += run_group(FAIL_EXIT, same, 30 * pz_test_timeout_scale(), "2 processes on GPU 0: rank 1 exits mid-run");
  } else {
    printf("GPU 0 is in an exclusive compute mode: the one-GPU cases are skipped\n");
  }
  if (ndev >= 2) {
    failed += run_group(-1, two, 120 * pz_test_timeout_scale(), "2 processes on GPUs 0/1: eager cases + graph replays");
    failed += run_group(FAIL_EXIT, two, 30 * pz_test_timeout_scale(), "2 processes on GPUs 0/1: rank 1 exits mid-run");
  } else {
    printf("one GPU visible: the two-GPU cases are skipped\n");
  }
  if (!shared_ok && ndev < 2) return 77;
  if (failed) {
    fprintf(stderr, "%d failure(s)\n", failed);
    return 1;
  }
  printf("all checks passed\n");
  return 0;
}
