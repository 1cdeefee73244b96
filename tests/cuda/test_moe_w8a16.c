/* CUDA W8A16 routed experts (src/backend/cuda/moe_q.h) against the CPU reference of quantised
 * experts (pz_ref_moe_experts_q, ref_ops.h: bf16(e4m3 x scale_inv) as the loader dequantises, then
 * the bf16 MoE math) at the FP8 checkpoints' per-rank shapes: DeepSeek-V3 (256 experts, H 7168,
 * moe_intermediate 2048) at TP 1 (I 2048) and TP 2 (I 1024), Kimi-K2 (384 experts) at TP 4 (I 512),
 * 128x128 block scales, the bf16 shared expert, m = 1..128; tied routing (every token the same
 * experts), every expert chosen, empty slots; small shapes with partial and non-square scale blocks; per-channel
 * scales (blocks of 1 row x PZ_FP8_CHANNEL_COLS) at Qwen3-30B-A3B expert shapes;
 * determinism (two launches bit-identical); argument errors; and the engine on CUDA with synthetic
 * FP8 experts (`--quant fp8`, tiny, TP 1) against the CPU engine's logits. Exits 77 (skipped)
 * without a GPU.
 * Host memory: an expert's bytes are generated (and uploaded) only when a case first routes to it,
 * into calloc'd arrays, so only the chosen experts' pages are touched (TP 1: <= 128 x 44 MB). */
#define _POSIX_C_SOURCE 200809L
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "backend/cpu/ref_ops.h"
#include "backend/cuda/moe.h"
#include "backend/cuda/moe_q.h"
#include "core/fp8.h"
#include "core/status.h"
#include "prezero.h"
#include "pz_test.h"
#include "moe_q_test_common.h"


static void *dev_alloc(size_t bytes) {
  void *d = NULL;
  if (cudaMalloc(&d, bytes ? bytes : 16) != cudaSuccess) { fprintf(stderr, "cudaMalloc %zu failed\n", bytes); exit(1); }
  if (cudaMemset(d, 0, bytes ? bytes : 16) != cudaSuccess) { fprintf(stderr, "cudaMemset %zu failed\n", bytes); exit(1); }
  return d;
}
static void h2d(void *d, const void *h, size_t bytes) {
  if (bytes && cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice) != cudaSuccess) {
    fprintf(stderr, "cudaMemcpy %zu failed\n", bytes);
    exit(1);
  }
}
static void *up(const void *h, size_t bytes) {
  void *d = dev_alloc(bytes);
  if (h) h2d(d, h, bytes);
  return d;
}

/* Random e4m3 bytes, every finite code equally likely: xorshift64 words, NaN codes (low 7 bits all
 * ones: 0x7f, 0xff) turned into 0x7e / 0xfe. */
static void fill_e4m3(uint8_t *b, size_t n, uint64_t seed) {
  uint64_t s = seed * 0x9e3779b97f4a7c15ull + 0x632be59bd9b4e019ull;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    uint64_t v = s;
    const uint64_t nan = ((v & 0x7f7f7f7f7f7f7f7full) + 0x0101010101010101ull) & 0x8080808080808080ull;
    v ^= nan >> 7;
    memcpy(b + i, &v, 8);
  }
  for (; i < n; i++) b[i] = 0x3c; /* 1.5 */
}

/* One rank's experts: host arrays (calloc, filled per expert on first use) and device copies. */
typedef struct model {
  int E;
  int64_t H, I, SI, bm, bn;
  int64_t sr_gu, sc_gu, sr_d, sc_d;
  uint8_t *wg, *wu, *wd;
  float *sg, *su, *sd;
  pz_bf16 *shg, *shu, *shd;
  void *dwg, *dwu, *dwd, *dsg, *dsu, *dsd, *dshg, *dshu, *dshd;
  char *filled;
} model;

static double e4m3_rms(void) {
  double s = 0;
  int n = 0;
  for (int b = 0; b < 256; b++) {
    const float v = pz_fp8_e4m3_to_f32((uint8_t)b);
    if (isnan(v)) continue;
    s += (double)v * v;
    n++;
  }
  return sqrt(s / n);
}

static void model_init(model *md, int E, int64_t H, int64_t I, int64_t SI, int64_t bm, int64_t bn) {
  memset(md, 0, sizeof *md);
  md->E = E; md->H = H; md->I = I; md->SI = SI; md->bm = bm; md->bn = bn;
  md->sr_gu = (I + bm - 1) / bm; md->sc_gu = (H + bn - 1) / bn;
  md->sr_d = (H + bm - 1) / bm; md->sc_d = (I + bn - 1) / bn;
  const size_t nw = (size_t)E * I * H, ns_gu = (size_t)E * md->sr_gu * md->sc_gu, ns_d = (size_t)E * md->sr_d * md->sc_d;
  md->wg = calloc(nw, 1); md->wu = calloc(nw, 1); md->wd = calloc(nw, 1);
  md->sg = malloc(4 * ns_gu); md->su = malloc(4 * ns_gu); md->sd = malloc(4 * ns_d);
  md->filled = calloc((size_t)E, 1);
  if (!md->wg || !md->wu || !md->wd || !md->sg || !md->su || !md->sd || !md->filled) { fprintf(stderr, "host OOM\n"); exit(1); }
  /* f32 scales with random mantissas around 1 / (rms(e4m3) * sqrt(fan_in)) / 2, as weight_scale_inv. */
  const double r = e4m3_rms();
  for (size_t i = 0; i < ns_gu; i++) {
    md->sg[i] = (float)((0.5 + urand()) * 0.5 / (r * sqrt((double)H)));
    md->su[i] = (float)((0.5 + urand()) * 0.5 / (r * sqrt((double)H)));
  }
  for (size_t i = 0; i < ns_d; i++) md->sd[i] = (float)((0.5 + urand()) * 0.5 / (r * sqrt((double)I)));
  md->dwg = dev_alloc(nw); md->dwu = dev_alloc(nw); md->dwd = dev_alloc(nw);
  md->dsg = up(md->sg, 4 * ns_gu); md->dsu = up(md->su, 4 * ns_gu); md->dsd = up(md->sd, 4 * ns_d);
  if (SI) {
    md->shg = malloc(2 * (size_t)SI * H); md->shu = malloc(2 * (size_t)SI * H); md->shd = malloc(2 * (size_t)SI * H);
    for (int64_t i = 0; i < SI * H; i++) {
      md->shg[i] = pz_f32_to_bf16((float)((2 * urand() - 1) / sqrt((double)H)));
      md->shu[i] = pz_f32_to_bf16((float)((2 * urand() - 1) / sqrt((double)H)));
      md->shd[i] = pz_f32_to_bf16((float)((2 * urand() - 1) / sqrt((double)SI)));
    }
    md->dshg = up(md->shg, 2 * (size_t)SI * H); md->dshu = up(md->shu, 2 * (size_t)SI * H);
    md->dshd = up(md->shd, 2 * (size_t)SI * H);
  }
}

static void model_use(model *md, int e) {
  if (e < 0 || md->filled[e]) return;
  const size_t n = (size_t)md->I * md->H, o = (size_t)e * n;
  fill_e4m3(md->wg + o, n, 3 * (uint64_t)e + 1);
  fill_e4m3(md->wu + o, n, 3 * (uint64_t)e + 2);
  fill_e4m3(md->wd + o, n, 3 * (uint64_t)e + 3);
  h2d((uint8_t *)md->dwg + o, md->wg + o, n);
  h2d((uint8_t *)md->dwu + o, md->wu + o, n);
  h2d((uint8_t *)md->dwd + o, md->wd + o, n);
  md->filled[e] = 1;
}

static void model_free(model *md) {
  void *dp[] = {md->dwg, md->dwu, md->dwd, md->dsg, md->dsu, md->dsd, md->dshg, md->dshu, md->dshd};
  for (size_t i = 0; i < sizeof dp / sizeof dp[0]; i++) if (dp[i]) cudaFree(dp[i]);
  free(md->wg); free(md->wu); free(md->wd); free(md->sg); free(md->su); free(md->sd);
  free(md->shg); free(md->shu); free(md->shd); free(md->filled);
  memset(md, 0, sizeof *md);
}

enum { ROUTE_RANDOM, ROUTE_TIED, ROUTE_ALL, ROUTE_EMPTY };

/* One case on model md (shared expert used when shared != 0 and the model has one). */
static void run_case(const char *name, model *md, int K, int m, int route, int shared) {
  const int E = md->E;
  const int64_t H = md->H, I = md->I, SI = shared ? md->SI : 0;
  pz_moe_params p;
  memset(&p, 0, sizeof p);
  p.n_experts = E;
  p.top_k = K;
  p.n_group = 1;
  p.topk_group = 1;
  p.inter = I;
  p.shared_inter = SI;
  p.wquant = 2;
  p.q_block_rows = md->bm;
  p.q_block_cols = md->bn;
  pz_bf16 *x = malloc(2 * (size_t)m * H);
  for (int64_t i = 0; i < m * H; i++) x[i] = pz_f32_to_bf16((float)(2 * urand() - 1));
  int32_t *ids = malloc(4 * (size_t)m * K);
  float *wts = malloc(4 * (size_t)m * K);
  for (int i = 0; i < m; i++)
    for (int t = 0; t < K; t++) {
      int id;
      if (route == ROUTE_TIED) id = (t * 7) % E;                /* every token the same K experts */
      else if (route == ROUTE_ALL) id = (i * K + t) % E;        /* m * K >= E: every expert chosen */
      else {
        int ok;
        do { /* K distinct experts per token */
          id = (int)(rnd32() % (uint32_t)E);
          ok = 1;
          for (int u = 0; u < t; u++) ok &= ids[i * K + u] != id;
        } while (!ok);
      }
      if (route == ROUTE_EMPTY && t == K - 1) id = -1;
      ids[i * K + t] = id;
      wts[i * K + t] = route == ROUTE_TIED ? 0.125f : (float)(0.05 + urand());
      model_use(md, id);
    }
  /* CPU reference */
  float *ref = malloc(4 * (size_t)m * H), *gpu = malloc(4 * (size_t)m * H), *gpu2 = malloc(4 * (size_t)m * H);
  pz_ref_qexperts q = {.wquant = 2, .block_rows = md->bm, .block_cols = md->bn, .w_gate = md->wg, .w_up = md->wu,
                       .w_down = md->wd, .s_gate = md->sg, .s_up = md->su, .s_down = md->sd};
  CHECK_OK(pz_ref_moe_experts_q(m, H, x, H, ids, wts, &p, &q, SI ? md->shg : NULL, SI ? md->shu : NULL,
                                SI ? md->shd : NULL, ref, H));
  /* GPU */
  pz_moe_q_args a;
  memset(&a, 0, sizeof a);
  a.m = m;
  a.H = H;
  a.p = p;
  a.x = up(x, 2 * (size_t)m * H);
  a.ldx = H;
  a.ids = up(ids, 4 * (size_t)m * K);
  a.weights = up(wts, 4 * (size_t)m * K);
  a.w_gate = md->dwg; a.w_up = md->dwu; a.w_down = md->dwd;
  a.s_gate = md->dsg; a.s_up = md->dsu; a.s_down = md->dsd;
  if (SI) { a.sh_gate = md->dshg; a.sh_up = md->dshu; a.sh_down = md->dshd; }
  float *dout = up(NULL, 4 * (size_t)m * H);
  a.out = dout;
  a.ld_out = H;
  a.workspace_bytes = pz_moe_w8a16_workspace_bytes(m, H, &p);
  a.workspace = up(NULL, a.workspace_bytes);
  CHECK_OK(pz_moe_w8a16_launch(&a, 0));
  CHECK(cudaDeviceSynchronize() == cudaSuccess);
  cudaMemcpy(gpu, dout, 4 * (size_t)m * H, cudaMemcpyDeviceToHost);
  cudaMemset(dout, 0xff, 4 * (size_t)m * H); /* the second launch must write every element again */
  CHECK_OK(pz_moe_w8a16_launch(&a, 0));
  CHECK(cudaDeviceSynchronize() == cudaSuccess);
  cudaMemcpy(gpu2, dout, 4 * (size_t)m * H, cudaMemcpyDeviceToHost);
  CHECK(!memcmp(gpu, gpu2, 4 * (size_t)m * H)); /* deterministic */
  { /* the shared-memory reduction of unsplit items (direct_off 1, PREZERO_MOE_DIRECT=0) gives the same bits */
    pz_moe_q_args c = a;
    c.direct_off = 1;
    CHECK_OK(pz_moe_w8a16_launch(&c, 0));
    CHECK(cudaDeviceSynchronize() == cudaSuccess);
    cudaMemcpy(gpu2, dout, 4 * (size_t)m * H, cudaMemcpyDeviceToHost);
    CHECK(!memcmp(gpu, gpu2, 4 * (size_t)m * H));
  }
  { /* items claimed from a counter (items_dynamic 1, PREZERO_MOE_DYNAMIC=1) give the static schedule's bits;
       the workspace (counters, work list, h, d) poisoned first, so an unrun item shows as NaN */
    pz_moe_q_args c = a;
    c.items_dynamic = 1;
    cudaMemset(dout, 0xff, 4 * (size_t)m * H);
    cudaMemset(c.workspace, 0xff, c.workspace_bytes);
    CHECK_OK(pz_moe_w8a16_launch(&c, 0));
    CHECK(cudaDeviceSynchronize() == cudaSuccess);
    cudaMemcpy(gpu2, dout, 4 * (size_t)m * H, cudaMemcpyDeviceToHost);
    CHECK(!memcmp(gpu, gpu2, 4 * (size_t)m * H));
  }
  double worst = 0;
  int bad = 0;
  for (int i = 0; i < m; i++) {
    double mx = 0;
    for (int64_t j = 0; j < H; j++) mx = fmax(mx, fabs(ref[i * H + j]));
    for (int64_t j = 0; j < H; j++) {
      const double e = fabs((double)gpu[i * H + j] - ref[i * H + j]);
      if (!(e <= TOL_REL * mx + 1e-6)) bad++;
      worst = fmax(worst, e / (mx + 1e-30));
    }
  }
  printf("%-30s E %3d K %d H %lld I %4lld block %lldx%lld shared %4lld m %3d: worst %.2e of the row max%s\n", name, E,
         K, (long long)H, (long long)I, (long long)md->bm, (long long)md->bn, (long long)SI, m, worst,
         bad ? "  FAIL" : "");
  if (bad) pz_test_failures++;
  /* Argument errors (once per case is cheap). */
  pz_moe_q_args b = a;
  b.p.wquant = 1;
  CHECK_ST(pz_moe_w8a16_launch(&b, 0), PZ_ERR_INVALID_ARG);
  b = a; /* the W4A16 launcher refuses FP8 experts */
  CHECK_ST(pz_moe_w4a16_launch(&b, 0), PZ_ERR_INVALID_ARG);
  b = a;
  b.p.q_block_cols = 8;
  CHECK_ST(pz_moe_w8a16_launch(&b, 0), PZ_ERR_INVALID_ARG);
  b = a;
  b.p.q_block_rows = 0;
  CHECK_ST(pz_moe_w8a16_launch(&b, 0), PZ_ERR_INVALID_ARG);
  b = a;
  b.workspace_bytes = 16;
  CHECK_ST(pz_moe_w8a16_launch(&b, 0), PZ_ERR_INVALID_ARG);
  b = a;
  b.w_up = (const uint8_t *)a.w_up + 8;
  CHECK_ST(pz_moe_w8a16_launch(&b, 0), PZ_ERR_INVALID_ARG);
  b = a;
  b.s_down = NULL;
  CHECK_ST(pz_moe_w8a16_launch(&b, 0), PZ_ERR_INVALID_ARG);
  b = a;
  b.H = H - 32;
  b.ldx = H;
  CHECK_ST(pz_moe_w8a16_launch(&b, 0), PZ_ERR_SHAPE);
  b = a;
  b.p.inter = I + 16;
  CHECK_ST(pz_moe_w8a16_launch(&b, 0), PZ_ERR_SHAPE);
  b = a;
  b.m = PZ_MOE_MAX_M + 1;
  CHECK_ST(pz_moe_w8a16_launch(&b, 0), PZ_ERR_SHAPE);
  CHECK_ST(pz_moe_w8a16_launch(NULL, 0), PZ_ERR_INVALID_ARG);
  void *dp[] = {(void *)a.x, (void *)a.ids, (void *)a.weights, dout, a.workspace};
  for (size_t i = 0; i < sizeof dp / sizeof dp[0]; i++) cudaFree(dp[i]);
  free(x); free(ids); free(wts); free(ref); free(gpu); free(gpu2);
}

int main(void) {
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
    printf("no CUDA GPU: skipped\n");
    return 77;
  }
  pz_ref_set_threads(0);
  const int64_t H = 7168;
  model md;
  /* DeepSeek-V3 per rank (256 experts, top 8, one shared expert of moe_intermediate 2048 / TP). */
  static const int ms1[] = {1, 4, 16}, ms2[] = {1, 8, 64}, ms4[] = {1, 4, 16, 128};
  model_init(&md, 256, H, 2048, 2048, 128, 128);
  for (int i = 0; i < 3; i++) run_case("deepseek_v3 tp1", &md, 8, ms1[i], ROUTE_RANDOM, 1);
  model_free(&md);
  model_init(&md, 256, H, 1024, 1024, 128, 128);
  for (int i = 0; i < 3; i++) run_case("deepseek_v3 tp2", &md, 8, ms2[i], ROUTE_RANDOM, 1);
  run_case("deepseek_v3 tp2 ties", &md, 8, 16, ROUTE_TIED, 1);
  model_free(&md);
  /* Kimi-K2 per rank at TP 4 (384 experts). */
  model_init(&md, 384, H, 512, 512, 128, 128);
  for (int i = 0; i < 4; i++) run_case("kimi_k2 tp4", &md, 8, ms4[i], ROUTE_RANDOM, 1);
  run_case("kimi_k2 tp4 ties", &md, 8, 32, ROUTE_TIED, 1);
  run_case("kimi_k2 tp4 all experts", &md, 8, 48, ROUTE_ALL, 0);
  run_case("kimi_k2 tp4 empty slots", &md, 8, 8, ROUTE_EMPTY, 1);
  model_free(&md);
  /* Small: every expert chosen with a partial 128-block (I 64 < 128 rows / columns of a block),
   * and non-square blocks that cut the 64-column chunks (48 columns) and the 16-row tiles (24 rows). */
  model_init(&md, 8, 256, 64, 0, 128, 128);
  run_case("small all experts", &md, 8, 3, ROUTE_ALL, 0);
  model_free(&md);
  model_init(&md, 16, 384, 192, 192, 24, 48);
  run_case("small blocks 24x48", &md, 4, 5, ROUTE_RANDOM, 1);
  run_case("small blocks 24x48 empty", &md, 4, 33, ROUTE_EMPTY, 1);
  model_free(&md);
  /* Per-channel scales (compressed-tensors' FP8 channel strategy): blocks of 1 row by a whole row
   * (PZ_FP8_CHANNEL_COLS columns), Qwen3-30B-A3B's expert shapes at TP 1 (H 2048, I 768, 128 experts, top 8). */
  model_init(&md, 128, 2048, 768, 0, 1, 1 << 20);
  run_case("channel scales", &md, 8, 4, ROUTE_RANDOM, 1);
  run_case("channel scales all experts", &md, 8, 64, ROUTE_ALL, 0);
  model_free(&md);
  engine_quant_case(PZ_QUANT_FP8, "fp8");
  TEST_DONE();
}
