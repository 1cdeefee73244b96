/* CUDA MoE (src/backend/cuda/moe.h) against the CPU references (ref_ops.h): router top-k
 * bit for bit (every scoring/top-k method, top-k softmax too, ties, NaN, all/one expert, unfillable slots),
 * routed + shared experts and the dense MLP within a stated tolerance (tiny and Kimi-K2 TP 4),
 * determinism, CUDA-graph replays at two batch sizes, argument errors. */
#define _POSIX_C_SOURCE 200809L
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "backend/cpu/ref_ops.h"
#include "backend/cuda/mlp_gemm.h"
#include "backend/cuda/moe.h"
#include "core/options.h"
#include "bench/dev/dev_helpers.h" /* pz_moe_fill_bf16 and its host twin */
#include "core/status.h"
#include "pz_test.h"

/* Output tolerance (experts, MLP): |gpu - ref| <= TOL_REL * max|ref row| + 1e-6. The GPU sums
 * the gate/up/down dot products in another order than the CPU (f32 both); h = bf16(silu(g)*u)
 * may then round to the neighbouring bf16 (2^-8 relative) for a few elements, which moves the
 * output by far less than 1e-3 of the row's scale. */
#define TOL_REL 2e-3

static uint64_t rng = 0x1234567;
static double urand(void) { /* [0, 1) */
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return (double)(rng >> 11) / 9007199254740992.0;
}

static void *dev_upload(const void *h, size_t bytes) {
  void *d = NULL;
  if (cudaMalloc(&d, bytes ? bytes : 16) != cudaSuccess) return NULL;
  if (bytes) cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice);
  return d;
}

static pz_moe_params mk(int E, int K, int G, int TG, pz_scoring sc, pz_topk_method meth, bool norm, float rsf) {
  pz_moe_params p;
  memset(&p, 0, sizeof p);
  p.n_experts = E;
  p.top_k = K;
  p.n_group = G;
  p.topk_group = TG;
  p.scoring = sc;
  p.topk_method = meth;
  p.norm_topk_prob = norm;
  p.routed_scaling_factor = rsf;
  return p;
}

/* ------------------------------------------------------------------ router */

/* Runs GPU and CPU routing on logits [m, E] (row stride E+3) and checks ids and weights bit
 * for bit. Returns the number of mismatching tokens. */
static int check_route(const char *name, int m, const pz_moe_params *p, const float *logits, const float *bias) {
  const int E = p->n_experts, K = p->top_k;
  const int64_t ld = E + 3;
  float *lg = malloc(sizeof(float) * m * ld);
  for (int i = 0; i < m; i++) {
    memcpy(lg + i * ld, logits + (int64_t)i * E, sizeof(float) * E);
    for (int j = E; j < ld; j++) lg[i * ld + j] = NAN; /* never read */
  }
  int32_t *ids = malloc(sizeof(int32_t) * m * K), *gids = malloc(sizeof(int32_t) * m * K);
  float *w = malloc(sizeof(float) * m * K), *gw = malloc(sizeof(float) * m * K);
  pz_ref_moe_route(m, lg, ld, bias, p, ids, w);
  float *dl = dev_upload(lg, sizeof(float) * m * ld), *db = bias ? dev_upload(bias, sizeof(float) * E) : NULL;
  int32_t *di = NULL;
  float *dw = NULL;
  cudaMalloc((void **)&di, sizeof(int32_t) * m * K);
  cudaMalloc((void **)&dw, sizeof(float) * m * K);
  int bad = 0;
  static const char *const mode_names[] = {"two-stage keyed", "serial", "two-stage compare"};
  for (int mode = 0; mode < 3; mode++) { /* PZ_MOE_TOPK_KEYS (default), _SERIAL, _COMPARE (moe.h) */
    cudaMemset(di, 0x55, sizeof(int32_t) * m * K); /* stale: each pass must write every slot itself */
    cudaMemset(dw, 0x55, sizeof(float) * m * K);
    CHECK_OK(pz_moe_route_launch_rows(m, dl, ld, db, p, di, dw, NULL, mode, 0));
    CHECK(cudaDeviceSynchronize() == cudaSuccess);
    cudaMemcpy(gids, di, sizeof(int32_t) * m * K, cudaMemcpyDeviceToHost);
    cudaMemcpy(gw, dw, sizeof(float) * m * K, cudaMemcpyDeviceToHost);
    for (int i = 0; i < m; i++) {
      int wdiff = 0; /* bit for bit; two NaNs count as equal (the GPU writes the canonical NaN) */
      for (int t = 0; t < K; t++)
        if (memcmp(&w[i * K + t], &gw[i * K + t], sizeof(float)) && !(isnan(w[i * K + t]) && isnan(gw[i * K + t])))
          wdiff = 1;
      if (memcmp(ids + i * K, gids + i * K, sizeof(int32_t) * K) || wdiff) {
        if (bad < 3) {
          fprintf(stderr, "route %s (%s top-k) token %d:\n", name, mode_names[mode], i);
          for (int t = 0; t < K; t++)
            fprintf(stderr, "  slot %d: cpu %d %.9g  gpu %d %.9g\n", t, ids[i * K + t], w[i * K + t], gids[i * K + t],
                    gw[i * K + t]);
        }
        bad++;
      }
    }
  }
  if (bad) fprintf(stderr, "route %s: %d of %d tokens differ\n", name, bad, m);
  CHECK(bad == 0);
  cudaFree(dl);
  cudaFree(db);
  cudaFree(di);
  cudaFree(dw);
  free(lg);
  free(ids);
  free(gids);
  free(w);
  free(gw);
  return bad;
}

/* kind 0: reals N(0,1)-ish * scale; 1: small integers (many ties); 2: all equal; 3: reals with
 * some NaN. */
static void fill_logits(float *l, int64_t n, int kind, float scale) {
  for (int64_t i = 0; i < n; i++) {
    double u = urand();
    if (kind == 0) l[i] = (float)((u * 2 - 1 + urand() * 2 - 1 + urand() * 2 - 1) * scale);
    else if (kind == 1) l[i] = (float)((int)(u * 5) - 2);
    else if (kind == 2) l[i] = 0.5f;
    else l[i] = u < 0.05 ? NAN : (float)((u * 2 - 1) * scale);
  }
}

static void route_case(const char *name, int m, pz_moe_params p, int kind, int with_bias, int bias_kind) {
  const int E = p.n_experts;
  float *l = malloc(sizeof(float) * m * E), *b = malloc(sizeof(float) * E);
  fill_logits(l, (int64_t)m * E, kind, 3.0f);
  for (int e = 0; e < E; e++) b[e] = bias_kind == 1 ? (float)((e % 3) * 0.25) : (float)(urand() * 0.2 - 0.1);
  check_route(name, m, &p, l, with_bias ? b : NULL);
  free(l);
  free(b);
}

static void test_route(void) {
  const int ms[] = {1, 128};
  for (int mi = 0; mi < 2; mi++) {
    int m = ms[mi];
    /* tiny.json: sigmoid noaux_tc, 64 experts, 8 groups keep 4, top 6, norm, 2.5 */
    pz_moe_params tiny = mk(64, 6, 8, 4, PZ_SCORE_SIGMOID, PZ_TOPK_NOAUX_TC, true, 2.5f);
    route_case("tiny", m, tiny, 0, 1, 0);
    route_case("tiny ties", m, tiny, 1, 1, 1);
    route_case("tiny nan", m, tiny, 3, 1, 0);
    route_case("tiny no bias", m, tiny, 0, 0, 0);
    /* kimi_k2.json: 384 experts, 1 group, top 8, sigmoid noaux_tc, norm, 2.827 */
    pz_moe_params kimi = mk(384, 8, 1, 1, PZ_SCORE_SIGMOID, PZ_TOPK_NOAUX_TC, true, 2.827f);
    route_case("kimi", m, kimi, 0, 1, 0);
    route_case("kimi ties", m, kimi, 1, 1, 1);
    /* deepseek_v3.json: 256 experts, 8 groups keep 4, top 8 */
    pz_moe_params v3 = mk(256, 8, 8, 4, PZ_SCORE_SIGMOID, PZ_TOPK_NOAUX_TC, true, 2.5f);
    route_case("v3", m, v3, 0, 1, 0);
    route_case("v3 equal", m, v3, 2, 1, 1);
    /* deepseek_v2_lite.json: softmax greedy, 64 experts, top 6, no norm */
    pz_moe_params lite = mk(64, 6, 1, 1, PZ_SCORE_SOFTMAX, PZ_TOPK_GREEDY, false, 1.0f);
    route_case("v2-lite", m, lite, 0, 0, 0);
    route_case("v2-lite ties", m, lite, 1, 0, 0);
    route_case("v2-lite equal", m, lite, 2, 0, 0);
    route_case("v2-lite nan", m, lite, 3, 0, 0);
    /* DeepSeek-V2: softmax group_limited_greedy, 160 experts, 8 groups keep 3, top 6, x16 */
    pz_moe_params v2 = mk(160, 6, 8, 3, PZ_SCORE_SOFTMAX, PZ_TOPK_GROUP_LIMITED, false, 16.0f);
    route_case("v2 group-limited", m, v2, 0, 0, 0);
    route_case("v2 group-limited ties", m, v2, 1, 0, 0);
    pz_moe_params v2n = v2;
    v2n.norm_topk_prob = true;
    route_case("v2 group-limited norm", m, v2n, 0, 0, 0);
    /* every expert chosen (top_k = n_experts), with and without groups; one expert chosen */
    route_case("all experts greedy", m, mk(8, 8, 1, 1, PZ_SCORE_SOFTMAX, PZ_TOPK_GREEDY, true, 1.0f), 0, 0, 0);
    route_case("all experts noaux", m, mk(16, 16, 4, 4, PZ_SCORE_SIGMOID, PZ_TOPK_NOAUX_TC, true, 2.0f), 0, 1, 0);
    /* the limits: 1024 experts (8 candidates per thread), top 32 (128 finalists); E not a multiple of 128 */
    route_case("E1024 top32", m, mk(1024, 32, 1, 1, PZ_SCORE_SIGMOID, PZ_TOPK_NOAUX_TC, true, 2.0f), 0, 1, 0);
    route_case("E1024 top32 ties", m, mk(1024, 32, 1, 1, PZ_SCORE_SIGMOID, PZ_TOPK_NOAUX_TC, true, 2.0f), 1, 1, 1);
    route_case("E1024 top32 groups", m, mk(1024, 32, 32, 3, PZ_SCORE_SIGMOID, PZ_TOPK_NOAUX_TC, true, 2.0f), 3, 1, 0);
    route_case("E200 top12 nan", m, mk(200, 12, 1, 1, PZ_SCORE_SOFTMAX, PZ_TOPK_GREEDY, false, 1.0f), 3, 0, 0);
    route_case("one expert softmax", m, mk(64, 1, 1, 1, PZ_SCORE_SOFTMAX, PZ_TOPK_GREEDY, true, 1.0f), 0, 0, 0);
    route_case("one expert noaux", m, mk(64, 1, 8, 2, PZ_SCORE_SIGMOID, PZ_TOPK_NOAUX_TC, true, 2.0f), 1, 1, 1);
    /* kept groups hold fewer experts than top_k: slots -1 / 0 */
    route_case("unfillable", m, mk(16, 6, 8, 2, PZ_SCORE_SIGMOID, PZ_TOPK_NOAUX_TC, true, 1.0f), 0, 1, 0);
    /* one expert per group (noaux_tc group score = that expert) */
    route_case("groups of one", m, mk(32, 4, 32, 8, PZ_SCORE_SIGMOID, PZ_TOPK_NOAUX_TC, false, 1.0f), 0, 1, 0);
    /* mixtral_8x7b.json: top-k of the logits, softmax over the 2 chosen (TOPK_SOFTMAX) */
    pz_moe_params mix = mk(8, 2, 1, 1, PZ_SCORE_TOPK_SOFTMAX, PZ_TOPK_GREEDY, false, 1.0f);
    route_case("mixtral", m, mix, 0, 0, 0);
    route_case("mixtral ties", m, mix, 1, 0, 0);
    route_case("mixtral equal", m, mix, 2, 0, 0);
    route_case("mixtral nan", m, mix, 3, 0, 0);
    /* top-k softmax with more experts, a scaling factor, and one expert (weight 1) */
    route_case("topk-softmax E128 top8 x2", m, mk(128, 8, 1, 1, PZ_SCORE_TOPK_SOFTMAX, PZ_TOPK_GREEDY, true, 2.0f), 0, 0, 0);
    route_case("topk-softmax one expert", m, mk(16, 1, 1, 1, PZ_SCORE_TOPK_SOFTMAX, PZ_TOPK_GREEDY, false, 1.0f), 0, 0, 0);
  }
  /* Hand-checked ties: all logits equal -> experts 0..K-1 in index order, equal weights. */
  {
    pz_moe_params p = mk(8, 3, 1, 1, PZ_SCORE_SOFTMAX, PZ_TOPK_GREEDY, false, 1.0f);
    float l[8] = {1, 1, 1, 1, 1, 1, 1, 1};
    float *dl = dev_upload(l, sizeof l);
    int32_t *di;
    float *dw;
    cudaMalloc((void **)&di, 3 * sizeof(int32_t));
    cudaMalloc((void **)&dw, 3 * sizeof(float));
    CHECK_OK(pz_moe_route_launch(1, dl, 8, NULL, &p, di, dw, 0));
    int32_t ids[3];
    float w[3];
    cudaMemcpy(ids, di, sizeof ids, cudaMemcpyDeviceToHost);
    cudaMemcpy(w, dw, sizeof w, cudaMemcpyDeviceToHost);
    CHECK(ids[0] == 0 && ids[1] == 1 && ids[2] == 2);
    CHECK(w[0] == 0.125f && w[1] == 0.125f && w[2] == 0.125f);
    /* Bad arguments. */
    CHECK_ST(pz_moe_route_launch(0, dl, 8, NULL, &p, di, dw, 0), PZ_ERR_SHAPE);
    p.top_k = 9;
    CHECK_ST(pz_moe_route_launch(1, dl, 8, NULL, &p, di, dw, 0), PZ_ERR_SHAPE);
    p.top_k = 3;
    p.n_group = 3;
    p.topk_method = PZ_TOPK_NOAUX_TC;
    CHECK_ST(pz_moe_route_launch(1, dl, 8, NULL, &p, di, dw, 0), PZ_ERR_SHAPE);
    CHECK_ST(pz_moe_route_launch(1, NULL, 8, NULL, &p, di, dw, 0), PZ_ERR_INVALID_ARG);
    cudaFree(dl);
    cudaFree(di);
    cudaFree(dw);
  }
  /* The real-row word (padding rows of a captured batch size, exec.c): with r = 3 of m = 6 rows,
   * rows 3..5 get -1 / 0 in every slot and rows 0..2 the CPU reference's routing bit for bit; a word
   * of 0 or of m (a full batch) changes nothing. */
  {
    enum { RM = 6, RE = 64, RK = 6 };
    pz_moe_params p = mk(RE, RK, 8, 3, PZ_SCORE_SIGMOID, PZ_TOPK_NOAUX_TC, true, 2.5f);
    float *l = malloc(sizeof(float) * RM * RE), bias[RE];
    fill_logits(l, (int64_t)RM * RE, 0, 3.0f);
    for (int e = 0; e < RE; e++) bias[e] = (float)(urand() - 0.5);
    int32_t ids[RM * RK], gids[RM * RK];
    float w[RM * RK], gw[RM * RK];
    pz_ref_moe_route(RM, l, RE, bias, &p, ids, w);
    float *dl = dev_upload(l, sizeof(float) * RM * RE), *db = dev_upload(bias, sizeof bias);
    int32_t *di, *drows;
    float *dw;
    cudaMalloc((void **)&di, sizeof gids);
    cudaMalloc((void **)&dw, sizeof gw);
    cudaMalloc((void **)&drows, sizeof(int32_t));
    const int32_t words[3] = {3, 0, RM};
    for (int k = 0; k < 3; k++) {
      const int r = words[k] > 0 && words[k] < RM ? words[k] : RM; /* the rows routed as real */
      cudaMemcpy(drows, &words[k], sizeof(int32_t), cudaMemcpyHostToDevice);
      cudaMemset(di, 0x55, sizeof gids); /* stale: every slot must be written */
      CHECK_OK(pz_moe_route_launch_rows(RM, dl, RE, db, &p, di, dw, drows, k, 0)); /* each top-k mode once */
      CHECK(cudaDeviceSynchronize() == cudaSuccess);
      cudaMemcpy(gids, di, sizeof gids, cudaMemcpyDeviceToHost);
      cudaMemcpy(gw, dw, sizeof gw, cudaMemcpyDeviceToHost);
      CHECK(memcmp(gids, ids, sizeof(int32_t) * r * RK) == 0 && memcmp(gw, w, sizeof(float) * r * RK) == 0);
      for (int q = r * RK; q < RM * RK; q++) CHECK(gids[q] == -1 && gw[q] == 0.0f);
    }
    CHECK(pz_moe_route_launch_rows(RM, dl, RE, db, &p, di, dw, NULL, 3, 0) == PZ_ERR_INVALID_ARG); /* no such mode */
    printf("route with the real-row word: padding rows to no expert, real rows as the CPU reference\n");
    free(l);
    cudaFree(dl);
    cudaFree(db);
    cudaFree(di);
    cudaFree(dw);
    cudaFree(drows);
  }
}

/* ------------------------------------------------------------------ experts */

static int compare_out(const char *name, int m, int64_t H, const float *gpu, const float *ref) {
  int bad = 0;
  double worst = 0;
  for (int i = 0; i < m; i++) {
    double mx = 0;
    for (int64_t j = 0; j < H; j++) mx = fmax(mx, fabs(ref[i * H + j]));
    for (int64_t j = 0; j < H; j++) {
      double d = fabs((double)gpu[i * H + j] - ref[i * H + j]);
      double rel = mx > 0 ? d / mx : d;
      if (rel > worst || isnan(gpu[i * H + j])) worst = isnan(gpu[i * H + j]) ? INFINITY : rel;
      if (!(d <= TOL_REL * mx + 1e-6)) {
        if (bad < 3)
          fprintf(stderr, "%s: out[%d,%lld] gpu %.9g ref %.9g (row max %.3g)\n", name, i, (long long)j, gpu[i * H + j],
                  ref[i * H + j], mx);
        bad++;
      }
    }
  }
  printf("  %-34s m=%3d H=%5lld  max |diff| / row max = %.2e%s\n", name, m, (long long)H, worst, bad ? "  FAIL" : "");
  CHECK(bad == 0);
  return bad;
}

/* A MoE problem with host copies of all weights (small shapes). */
typedef struct moe_prob {
  int m;
  int64_t H;
  pz_moe_params p;
  pz_bf16 *x, *wg, *wu, *wd, *sg, *su, *sd;
  float *logits, *bias;
} moe_prob;

static pz_bf16 *hash_weights(int64_t n, uint32_t seed, float scale) {
  pz_bf16 *w = malloc(sizeof(pz_bf16) * (size_t)n);
  for (int64_t i = 0; i < n; i++) w[i] = pz_moe_hash_bf16(seed, i, scale);
  return w;
}

/* Runs pz_moe_launch (route + experts) on the GPU, in a CUDA graph when `graph`, twice, and
 * checks: routing bitwise vs CPU, output vs pz_ref_moe within TOL_REL, the two runs bitwise
 * equal. `logit_kind` as fill_logits; `one_hot` makes every token pick expert 3 first. */
static void moe_case(const char *name, int m, int64_t H, pz_moe_params p, int logit_kind, int one_hot, int graph) {
  const int E = p.n_experts, K = p.top_k;
  const int64_t I = p.inter, SI = p.shared_inter;
  pz_bf16 *x = hash_weights(m * H, 1, 1.0f);
  pz_bf16 *wg = hash_weights(E * I * H, 2, 2.0f / sqrtf((float)H)), *wu = hash_weights(E * I * H, 3, 2.0f / sqrtf((float)H));
  pz_bf16 *wd = hash_weights(E * H * I, 4, 2.0f / sqrtf((float)I));
  pz_bf16 *sg = SI ? hash_weights(SI * H, 5, 2.0f / sqrtf((float)H)) : NULL;
  pz_bf16 *su = SI ? hash_weights(SI * H, 6, 2.0f / sqrtf((float)H)) : NULL;
  pz_bf16 *sd = SI ? hash_weights(H * SI, 7, 2.0f / sqrtf((float)SI)) : NULL;
  float *lg = malloc(sizeof(float) * m * E), *bias = malloc(sizeof(float) * E);
  fill_logits(lg, (int64_t)m * E, logit_kind, 2.0f);
  if (one_hot)
    for (int i = 0; i < m; i++) lg[(int64_t)i * E + 3] = 50.0f;
  for (int e = 0; e < E; e++) bias[e] = (float)(urand() * 0.2 - 0.1);
  const float *bp = p.topk_method == PZ_TOPK_NOAUX_TC ? bias : NULL;

  float *ref = malloc(sizeof(float) * m * H), *got = malloc(sizeof(float) * m * H), *got2 = malloc(sizeof(float) * m * H);
  int32_t *rids = malloc(sizeof(int32_t) * m * K), *gids = malloc(sizeof(int32_t) * m * K);
  float *rw = malloc(sizeof(float) * m * K), *gw = malloc(sizeof(float) * m * K);
  CHECK_OK(pz_ref_moe(m, H, x, H, lg, E, bp, &p, wg, wu, wd, sg, su, sd, ref, H, rids, rw));

  void *dx = dev_upload(x, sizeof(pz_bf16) * m * H), *dwg = dev_upload(wg, sizeof(pz_bf16) * E * I * H);
  void *dwu = dev_upload(wu, sizeof(pz_bf16) * E * I * H), *dwd = dev_upload(wd, sizeof(pz_bf16) * E * H * I);
  void *dsg = SI ? dev_upload(sg, sizeof(pz_bf16) * SI * H) : NULL, *dsu = SI ? dev_upload(su, sizeof(pz_bf16) * SI * H) : NULL;
  void *dsd = SI ? dev_upload(sd, sizeof(pz_bf16) * H * SI) : NULL;
  float *dl = dev_upload(lg, sizeof(float) * m * E), *dbias = dev_upload(bias, sizeof(float) * E);
  float *dout = NULL;
  int32_t *dids = NULL;
  float *dwts = NULL;
  cudaMalloc((void **)&dout, sizeof(float) * m * H);
  cudaMalloc((void **)&dids, sizeof(int32_t) * m * K);
  cudaMalloc((void **)&dwts, sizeof(float) * m * K);
  size_t wsb = pz_moe_workspace_bytes(m, H, &p) + pz_moe_route_bytes(m, &p);
  void *ws = NULL;
  cudaMalloc(&ws, wsb);
  cudaMemset(dout, 0xff, sizeof(float) * m * H); /* NaN: every element must be written */
  pz_moe_args a;
  memset(&a, 0, sizeof a);
  a.m = m;
  a.H = H;
  a.p = p;
  a.x = dx;
  a.ldx = H;
  a.w_gate = dwg;
  a.w_up = dwu;
  a.w_down = dwd;
  a.sh_gate = dsg;
  a.sh_up = dsu;
  a.sh_down = dsd;
  a.out = dout;
  a.ld_out = H;
  a.workspace = ws;
  a.workspace_bytes = wsb;
  const float *dbp = bp ? dbias : NULL;
  cudaStream_t s;
  cudaStreamCreate(&s);
  for (int run = 0; run < 2; run++) {
    if (graph && run == 1) {
      cudaGraph_t g;
      cudaGraphExec_t ge;
      cudaMemsetAsync(dout, 0xff, sizeof(float) * m * H, s);
      CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal) == cudaSuccess);
      CHECK_OK(pz_moe_launch(&a, dl, E, dbp, dids, dwts, s));
      CHECK(cudaStreamEndCapture(s, &g) == cudaSuccess);
      CHECK(cudaGraphInstantiate(&ge, g, 0) == cudaSuccess);
      for (int r = 0; r < 3; r++) CHECK(cudaGraphLaunch(ge, s) == cudaSuccess);
      cudaGraphExecDestroy(ge);
      cudaGraphDestroy(g);
    } else {
      CHECK_OK(pz_moe_launch(&a, dl, E, dbp, dids, dwts, s));
    }
    CHECK(cudaStreamSynchronize(s) == cudaSuccess);
    cudaMemcpy(run ? got2 : got, dout, sizeof(float) * m * H, cudaMemcpyDeviceToHost);
  }
  cudaMemcpy(gids, dids, sizeof(int32_t) * m * K, cudaMemcpyDeviceToHost);
  cudaMemcpy(gw, dwts, sizeof(float) * m * K, cudaMemcpyDeviceToHost);
  CHECK(memcmp(gids, rids, sizeof(int32_t) * m * K) == 0);
  CHECK(memcmp(gw, rw, sizeof(float) * m * K) == 0);
  compare_out(name, m, H, got, ref);
  CHECK(memcmp(got, got2, sizeof(float) * m * H) == 0); /* deterministic, graph == direct */
  cudaStreamDestroy(s);
  cudaFree(dx);
  cudaFree(dwg);
  cudaFree(dwu);
  cudaFree(dwd);
  cudaFree(dsg);
  cudaFree(dsu);
  cudaFree(dsd);
  cudaFree(dl);
  cudaFree(dbias);
  cudaFree(dout);
  cudaFree(dids);
  cudaFree(dwts);
  cudaFree(ws);
  free(x); free(wg); free(wu); free(wd); free(sg); free(su); free(sd);
  free(lg); free(bias); free(ref); free(got); free(got2); free(rids); free(gids); free(rw); free(gw);
}

/* The rank's GEMM handles for pz_cuda_mlp (mlp_gemm.h): PREZERO_MLP_GEMM=1 (the GEMM path at every m)
 * and =0 (the fused kernel); created once in main. */
static pz_gemm_ctx *g_gemm_on, *g_gemm_off, *g_gemm_two; /* two: =1 with PREZERO_MLP_ONE_GU=0 */

/* One MLP run into an ld_out-wide output prefilled with 0xff; returns the [m, H] part and checks
 * that the columns past H stay untouched. g NULL: pz_mlp_launch itself. */
static void mlp_run(pz_gemm_ctx *g, int m, int64_t H, int64_t I, const void *dx, int64_t ldx, const void *dwg,
                    const void *dwu, const void *dwd, float *dout, int64_t ldo, void *ws, size_t wsb, float *host) {
  cudaMemset(dout, 0xff, sizeof(float) * m * ldo);
  if (g) CHECK_OK(pz_cuda_mlp(g, PZ_MLP_DENSE, m, H, I, dx, ldx, dwg, dwu, dwd, dout, ldo, ws, wsb, 0));
  else CHECK_OK(pz_mlp_launch(m, H, I, dx, ldx, dwg, dwu, dwd, dout, ldo, ws, wsb, 0));
  CHECK(cudaDeviceSynchronize() == cudaSuccess);
  float *got = malloc(sizeof(float) * m * ldo);
  cudaMemcpy(got, dout, sizeof(float) * m * ldo, cudaMemcpyDeviceToHost);
  for (int i = 0; i < m; i++) {
    memcpy(host + i * H, got + i * ldo, sizeof(float) * H);
    for (int64_t j = H; j < ldo; j++) {
      uint32_t u;
      memcpy(&u, &got[i * ldo + j], 4);
      CHECK(u == 0xffffffffu); /* columns past H untouched */
    }
  }
  free(got);
}

/* Dense MLP vs pz_ref_mlp (host weights), by both paths of pz_cuda_mlp and pz_mlp_launch itself.
 * exact: integer weights built so that every sum is exact in f32 and silu(g) = g (g >= 17:
 * 1 + expf(-g) rounds to 1), so the fused kernel and the GEMMs must agree bit for bit whatever the
 * order of their sums (and with the reference). */
static void mlp_case(const char *name, int m, int64_t H, int64_t I, bool exact) {
  const int64_t ldx = H + 8, ldo = H + 4;
  pz_bf16 *x, *wg, *wu, *wd;
  if (!exact) {
    x = hash_weights(m * ldx, 11, 1.0f);
    wg = hash_weights(I * H, 12, 2.0f / sqrtf((float)H));
    wu = hash_weights(I * H, 13, 2.0f / sqrtf((float)H));
    wd = hash_weights(H * I, 14, 2.0f / sqrtf((float)I));
  } else { /* g_i = 17 + i % 40 in [17, 56]; u: four consecutive values of (j % 5) - 2 (their sum is minus the fifth,
            * in [-2, 2]) plus one x in {-1, 0, 1}, so |u| <= 3; act = g u exact, |act| <= 168 < 256 (exact in bf16);
            * |out| <= I * 168 * 3 < 2^24 for I < 33,000 */
    CHECK(H >= 72 && I < 33000); /* x's 1s cover k < 64 and u reads x at 64 + i % 8 */
    x = malloc(sizeof(pz_bf16) * m * ldx);
    wg = malloc(sizeof(pz_bf16) * I * H);
    wu = malloc(sizeof(pz_bf16) * I * H);
    wd = malloc(sizeof(pz_bf16) * H * I);
    for (int t = 0; t < m; t++)
      for (int64_t k = 0; k < ldx; k++) x[t * ldx + k] = pz_f32_to_bf16(k < 64 ? 1.0f : (float)((t + k) % 3 - 1));
    for (int64_t i = 0; i < I; i++)
      for (int64_t k = 0; k < H; k++) {
        wg[i * H + k] = pz_f32_to_bf16(k < 17 + i % 40 ? 1.0f : 0.0f);
        wu[i * H + k] = pz_f32_to_bf16(k < 4 ? (float)((i + k) % 5 - 2) : k == 64 + i % 8 ? 1.0f : 0.0f);
      }
    for (int64_t j = 0; j < H; j++)
      for (int64_t i = 0; i < I; i++) wd[j * I + i] = pz_f32_to_bf16((float)((i + 3 * j) % 7 - 3));
  }
  float *ref = malloc(sizeof(float) * m * H), *fused = malloc(sizeof(float) * m * H);
  float *gemm = malloc(sizeof(float) * m * H), *off = malloc(sizeof(float) * m * H);
  CHECK_OK(pz_ref_mlp(m, H, I, x, ldx, wg, wu, wd, ref, H, true));
  void *dx = dev_upload(x, sizeof(pz_bf16) * m * ldx), *dwg = dev_upload(wg, sizeof(pz_bf16) * I * H);
  void *dwu = dev_upload(wu, sizeof(pz_bf16) * I * H), *dwd = dev_upload(wd, sizeof(pz_bf16) * H * I);
  float *dout = NULL;
  cudaMalloc((void **)&dout, sizeof(float) * m * ldo);
  const size_t wsb = pz_cuda_mlp_workspace_bytes(m, I), wsf = pz_mlp_workspace_bytes(m, I);
  CHECK(wsb >= wsf && wsb >= 4 * (size_t)m * 2 * I + 2 * (size_t)m * I);
  void *ws = NULL;
  cudaMalloc(&ws, wsb);
  mlp_run(NULL, m, H, I, dx, ldx, dwg, dwu, dwd, dout, ldo, ws, wsf, fused);
  compare_out(name, m, H, fused, ref);
  CHECK(pz_cuda_mlp_uses_gemm(g_gemm_on, PZ_MLP_DENSE, m, H, I) && !pz_cuda_mlp_uses_gemm(g_gemm_off, PZ_MLP_DENSE, m, H, I) &&
        !pz_cuda_mlp_uses_gemm(NULL, PZ_MLP_DENSE, m, H, I));
  mlp_run(g_gemm_on, m, H, I, dx, ldx, dwg, dwu, dwd, dout, ldo, ws, wsb, gemm);
  char nm[96];
  snprintf(nm, sizeof nm, "%s (GEMMs)", name);
  compare_out(nm, m, H, gemm, ref);
  /* gate and up in one allocation, up's rows after gate's: one GEMM of 2 I rows (pz_cuda_mlp_one_gu), unless
   * PREZERO_MLP_ONE_GU=0 (g_gemm_two) */
  pz_bf16 *dgu = NULL;
  cudaMalloc((void **)&dgu, sizeof(pz_bf16) * 2 * I * H);
  cudaMemcpy(dgu, wg, sizeof(pz_bf16) * I * H, cudaMemcpyHostToDevice);
  cudaMemcpy(dgu + I * H, wu, sizeof(pz_bf16) * I * H, cudaMemcpyHostToDevice);
  CHECK(pz_cuda_mlp_one_gu(g_gemm_on, H, I, dgu, dgu + I * H) && !pz_cuda_mlp_one_gu(g_gemm_two, H, I, dgu, dgu + I * H));
  CHECK(!pz_cuda_mlp_one_gu(g_gemm_on, H, I, dgu + I * H, dgu)); /* up before gate: two GEMMs */
  float *one = malloc(sizeof(float) * m * H), *two = malloc(sizeof(float) * m * H);
  mlp_run(g_gemm_on, m, H, I, dx, ldx, dgu, dgu + I * H, dwd, dout, ldo, ws, wsb, one);
  snprintf(nm, sizeof nm, "%s (GEMMs, one gate/up)", name);
  compare_out(nm, m, H, one, ref);
  mlp_run(g_gemm_two, m, H, I, dx, ldx, dgu, dgu + I * H, dwd, dout, ldo, ws, wsb, two);
  snprintf(nm, sizeof nm, "%s (GEMMs, gate/up apart)", name);
  compare_out(nm, m, H, two, ref);
  if (exact) CHECK(memcmp(one, fused, sizeof(float) * m * H) == 0 && memcmp(two, fused, sizeof(float) * m * H) == 0);
  cudaFree(dgu);
  free(one); free(two);
  mlp_run(g_gemm_off, m, H, I, dx, ldx, dwg, dwu, dwd, dout, ldo, ws, wsb, off); /* =0: the fused kernel's bits */
  CHECK(memcmp(off, fused, sizeof(float) * m * H) == 0);
  if (exact) {
    CHECK(memcmp(gemm, fused, sizeof(float) * m * H) == 0);
    CHECK(memcmp(ref, fused, sizeof(float) * m * H) == 0);
    printf("  %-34s m=%3d: fused, GEMMs and reference bit-identical\n", name, m);
  }
  CHECK_ST(pz_mlp_launch(m, H, I, dx, ldx, dwg, dwu, dwd, dout, ldo, ws, wsf - 1, 0), PZ_ERR_INVALID_ARG);
  CHECK_ST(pz_cuda_mlp(g_gemm_on, PZ_MLP_DENSE, m, H, I, dx, ldx, dwg, dwu, dwd, dout, ldo, ws, wsb - 1, 0), PZ_ERR_INVALID_ARG);
  CHECK_ST(pz_mlp_launch(m, H + 8, I, dx, ldx, dwg, dwu, dwd, dout, ldo, ws, wsf, 0), PZ_ERR_SHAPE);
  CHECK_ST(pz_cuda_mlp(g_gemm_on, PZ_MLP_DENSE, m, H, I, dx, ldx, dwg, dwu, dwd, dout, H - 1, ws, wsb, 0), PZ_ERR_SHAPE);
  CHECK_ST(pz_mlp_launch(0, H, I, dx, ldx, dwg, dwu, dwd, dout, ldo, ws, wsf, 0), PZ_ERR_SHAPE);
  CHECK_ST(pz_cuda_mlp(g_gemm_on, PZ_MLP_DENSE, 0, H, I, dx, ldx, dwg, dwu, dwd, dout, ldo, ws, wsb, 0), PZ_ERR_SHAPE);
  cudaFree(dx); cudaFree(dwg); cudaFree(dwu); cudaFree(dwd); cudaFree(dout); cudaFree(ws);
  free(x); free(wg); free(wu); free(wd); free(ref); free(fused); free(gemm); free(off);
}

/* pz_cuda_mlp_into (the prezero slot of a MoE op's shared gate | up): gate | up written into a given gu of row
 * stride 2 I + 32 whose extra columns hold a sentinel, pre-zeroed (gu_zeroed: the GEMMs run with zero_init =
 * false) or full of NaN bits (not zeroed: the GEMMs zero it themselves), against pz_cuda_mlp's own workspace gu,
 * on a handle with atomic split-K at 2 splits (0 + a + b == 0 + b + a: deterministic): the same output bits, the
 * same gu bits as the fresh run's, the sentinel columns untouched; then the argument errors. */
static void mlp_into_case(const char *name, int m, int64_t H, int64_t I, bool one_gu) {
  pz_runtime_opts ro;
  pz_runtime_opts_default(&ro);
  ro.mlp_gemm = 1;
  ro.mlp_one_gu = one_gu ? -1 : 0;
  ro.gemm_splits = 2;
  snprintf(ro.gemm_force, sizeof ro.gemm_force, "atomic");
  pz_gemm_ctx *g = NULL;
  CHECK_OK(pz_gemm_ctx_create_opts(&ro, &g));
  if (!g) return;
  const int64_t ldx = H, ldo = H, ldg = 2 * I + 32;
  pz_bf16 *x = malloc(sizeof(pz_bf16) * m * ldx), *w = malloc(sizeof(pz_bf16) * 3 * I * H);
  for (int64_t q = 0; q < m * ldx; q++) x[q] = pz_f32_to_bf16((float)((q * 7) % 11 - 5) / 8.0f);
  for (int64_t q = 0; q < 3 * I * H; q++) w[q] = pz_f32_to_bf16((float)((q * 5) % 13 - 6) / 64.0f);
  pz_bf16 *dx = dev_upload(x, sizeof(pz_bf16) * m * ldx), *dw = dev_upload(w, sizeof(pz_bf16) * 3 * I * H);
  const pz_bf16 *dwg = dw, *dwu = dw + I * H, *dwd = dw + 2 * I * H; /* gate then up: adjacent */
  CHECK(pz_cuda_mlp_one_gu(g, H, I, dwg, dwu) == one_gu);
  const size_t wsb = pz_cuda_mlp_workspace_bytes(m, I);
  void *ws = NULL;
  float *dout = NULL, *dgu = NULL;
  cudaMalloc(&ws, wsb);
  cudaMalloc((void **)&dout, sizeof(float) * m * ldo);
  cudaMalloc((void **)&dgu, sizeof(float) * m * ldg);
  float *base = malloc(sizeof(float) * m * ldo), *got = malloc(sizeof(float) * m * ldo);
  float *gu_ws = malloc(sizeof(float) * m * 2 * I), *gu = malloc(sizeof(float) * m * ldg);
  CHECK_OK(pz_cuda_mlp(g, PZ_MLP_SHARED, m, H, I, dx, ldx, dwg, dwu, dwd, dout, ldo, ws, wsb, 0));
  CHECK(cudaDeviceSynchronize() == cudaSuccess);
  cudaMemcpy(base, dout, sizeof(float) * m * ldo, cudaMemcpyDeviceToHost);
  cudaMemcpy(gu_ws, ws, sizeof(float) * m * 2 * I, cudaMemcpyDeviceToHost); /* gu at the workspace's start */
  for (int zeroed = 0; zeroed < 2; zeroed++) {
    cudaMemset(dgu, 0xff, sizeof(float) * m * ldg);
    if (zeroed) cudaMemset2D(dgu, sizeof(float) * ldg, 0, sizeof(float) * 2 * I, m);
    cudaMemset(dout, 0xff, sizeof(float) * m * ldo);
    CHECK_OK(pz_cuda_mlp_into(g, PZ_MLP_SHARED, m, H, I, dx, ldx, dwg, dwu, dwd, dout, ldo, dgu, ldg, zeroed, ws, wsb, 0));
    CHECK(cudaDeviceSynchronize() == cudaSuccess);
    cudaMemcpy(got, dout, sizeof(float) * m * ldo, cudaMemcpyDeviceToHost);
    cudaMemcpy(gu, dgu, sizeof(float) * m * ldg, cudaMemcpyDeviceToHost);
    CHECK(memcmp(got, base, sizeof(float) * m * ldo) == 0);
    int bad_gu = 0, bad_guard = 0;
    for (int i = 0; i < m; i++) {
      bad_gu += memcmp(gu + i * ldg, gu_ws + i * 2 * I, sizeof(float) * 2 * I) != 0;
      for (int64_t j = 2 * I; j < ldg; j++) {
        uint32_t u;
        memcpy(&u, &gu[i * ldg + j], 4);
        bad_guard += u != 0xffffffffu;
      }
    }
    CHECK(bad_gu == 0 && bad_guard == 0);
    printf("  %-34s m=%3d: gu given (%s, %s), output and gu bit-identical to the workspace's, guard intact\n", name, m,
           zeroed ? "pre-zeroed" : "not zeroed", one_gu ? "one gate/up GEMM" : "two");
  }
  CHECK_ST(pz_cuda_mlp_into(g, PZ_MLP_SHARED, m, H, I, dx, ldx, dwg, dwu, dwd, dout, ldo, dgu + 1, ldg, true, ws, wsb, 0),
           PZ_ERR_INVALID_ARG); /* misaligned */
  CHECK_ST(pz_cuda_mlp_into(g, PZ_MLP_SHARED, m, H, I, dx, ldx, dwg, dwu, dwd, dout, ldo, dgu, 2 * I - 4, true, ws, wsb, 0),
           PZ_ERR_INVALID_ARG); /* ld_gu < 2 inter */
  CHECK_ST(pz_cuda_mlp_into(g, PZ_MLP_SHARED, m, H, I, dx, ldx, dwg, dwu, dwd, dout, ldo, dgu, ldg + 2, true, ws, wsb, 0),
           PZ_ERR_INVALID_ARG); /* ld_gu not a multiple of 4 */
  cudaFree(dx); cudaFree(dw); cudaFree(ws); cudaFree(dout); cudaFree(dgu);
  free(x); free(w); free(base); free(got); free(gu_ws); free(gu);
  pz_gemm_ctx_destroy(g);
}

/* Kimi-K2 per-rank shapes at TP 4 (384 experts, inter 512, H 7168, 1 shared expert): weights
 * filled on the device (8.5 GB); the reference composes pz_ref_moe_route and pz_ref_mlp per
 * expert with that expert's weights copied back, as pz_ref_moe defines the block. */
static void kimi_case(int m) {
  const int64_t H = 7168, I = 512, E = 384;
  const int K = 8;
  pz_moe_params p = mk(384, 8, 1, 1, PZ_SCORE_SIGMOID, PZ_TOPK_NOAUX_TC, true, 2.827f);
  p.inter = I;
  p.shared_inter = I;
  size_t fr = 0, tot = 0;
  cudaMemGetInfo(&fr, &tot);
  const size_t wbytes = (size_t)3 * E * I * H * 2;
  if (fr < wbytes + ((size_t)1 << 30)) {
    printf("  kimi-k2 tp4: %zu MB free < %zu MB needed; skipped\n", fr >> 20, (wbytes >> 20) + 1024);
    return;
  }
  pz_bf16 *dwg, *dwu, *dwd, *dsg, *dsu, *dsd, *dx;
  cudaMalloc((void **)&dwg, E * I * H * 2);
  cudaMalloc((void **)&dwu, E * I * H * 2);
  cudaMalloc((void **)&dwd, E * I * H * 2);
  cudaMalloc((void **)&dsg, I * H * 2);
  cudaMalloc((void **)&dsu, I * H * 2);
  cudaMalloc((void **)&dsd, I * H * 2);
  cudaMalloc((void **)&dx, m * H * 2);
  const float sh = 2.0f / sqrtf((float)H), si = 2.0f / sqrtf((float)I);
  CHECK_OK(pz_moe_fill_bf16(dwg, E * I * H, 21, sh, 0));
  CHECK_OK(pz_moe_fill_bf16(dwu, E * I * H, 22, sh, 0));
  CHECK_OK(pz_moe_fill_bf16(dwd, E * I * H, 23, si, 0));
  CHECK_OK(pz_moe_fill_bf16(dsg, I * H, 24, sh, 0));
  CHECK_OK(pz_moe_fill_bf16(dsu, I * H, 25, sh, 0));
  CHECK_OK(pz_moe_fill_bf16(dsd, I * H, 26, si, 0));
  CHECK_OK(pz_moe_fill_bf16(dx, m * H, 27, 1.0f, 0));
  float *lg = malloc(sizeof(float) * m * E), *bias = malloc(sizeof(float) * E);
  fill_logits(lg, m * E, 0, 2.0f);
  for (int e = 0; e < E; e++) bias[e] = (float)(urand() * 0.2 - 0.1);
  float *dl = dev_upload(lg, sizeof(float) * m * E), *db = dev_upload(bias, sizeof(float) * E), *dout;
  int32_t *dids;
  float *dwts;
  cudaMalloc((void **)&dout, sizeof(float) * m * H);
  cudaMalloc((void **)&dids, sizeof(int32_t) * m * K);
  cudaMalloc((void **)&dwts, sizeof(float) * m * K);
  size_t wsb = pz_moe_workspace_bytes(m, H, &p) + pz_moe_route_bytes(m, &p);
  void *ws;
  cudaMalloc(&ws, wsb);
  pz_moe_args a;
  memset(&a, 0, sizeof a);
  a.m = m; a.H = H; a.p = p; a.x = dx; a.ldx = H;
  a.w_gate = dwg; a.w_up = dwu; a.w_down = dwd; a.sh_gate = dsg; a.sh_up = dsu; a.sh_down = dsd;
  a.out = dout; a.ld_out = H; a.workspace = ws; a.workspace_bytes = wsb;
  CHECK_OK(pz_moe_launch(&a, dl, E, db, dids, dwts, 0));
  CHECK(cudaDeviceSynchronize() == cudaSuccess);
  float *got = malloc(sizeof(float) * m * H), *ref = calloc((size_t)m * H, sizeof(float));
  int32_t *gids = malloc(sizeof(int32_t) * m * K), *rids = malloc(sizeof(int32_t) * m * K);
  float *gw = malloc(sizeof(float) * m * K), *rw = malloc(sizeof(float) * m * K);
  cudaMemcpy(got, dout, sizeof(float) * m * H, cudaMemcpyDeviceToHost);
  cudaMemcpy(gids, dids, sizeof(int32_t) * m * K, cudaMemcpyDeviceToHost);
  cudaMemcpy(gw, dwts, sizeof(float) * m * K, cudaMemcpyDeviceToHost);
  pz_ref_moe_route(m, lg, E, bias, &p, rids, rw);
  CHECK(memcmp(gids, rids, sizeof(int32_t) * m * K) == 0);
  CHECK(memcmp(gw, rw, sizeof(float) * m * K) == 0);
  /* Reference: d[i*K+t] = E_id(x_i) by pz_ref_mlp over each expert's tokens. */
  pz_bf16 *x = malloc(sizeof(pz_bf16) * m * H), *xg = malloc(sizeof(pz_bf16) * m * H);
  pz_bf16 *eg = malloc(I * H * 2), *eu = malloc(I * H * 2), *ed = malloc(I * H * 2);
  float *d = calloc((size_t)m * K * H, sizeof(float)), *dg = malloc(sizeof(float) * m * H);
  int *slot = malloc(sizeof(int) * m);
  cudaMemcpy(x, dx, sizeof(pz_bf16) * m * H, cudaMemcpyDeviceToHost);
  int distinct = 0;
  for (int e = 0; e < E; e++) {
    int cnt = 0;
    for (int q = 0; q < m * K; q++)
      if (rids[q] == e) {
        memcpy(xg + (int64_t)cnt * H, x + (int64_t)(q / K) * H, H * 2);
        slot[cnt++] = q;
      }
    if (!cnt) continue;
    distinct++;
    cudaMemcpy(eg, dwg + e * I * H, I * H * 2, cudaMemcpyDeviceToHost);
    cudaMemcpy(eu, dwu + e * I * H, I * H * 2, cudaMemcpyDeviceToHost);
    cudaMemcpy(ed, dwd + e * I * H, I * H * 2, cudaMemcpyDeviceToHost);
    CHECK_OK(pz_ref_mlp(cnt, H, I, xg, H, eg, eu, ed, dg, H, true));
    for (int c = 0; c < cnt; c++) memcpy(d + (int64_t)slot[c] * H, dg + (int64_t)c * H, sizeof(float) * H);
  }
  for (int i = 0; i < m; i++)
    for (int64_t j = 0; j < H; j++) {
      float y = 0.0f;
      for (int t = 0; t < K; t++) y += rw[i * K + t] * d[((int64_t)i * K + t) * H + j];
      ref[i * H + j] = y;
    }
  cudaMemcpy(eg, dsg, I * H * 2, cudaMemcpyDeviceToHost);
  cudaMemcpy(eu, dsu, I * H * 2, cudaMemcpyDeviceToHost);
  cudaMemcpy(ed, dsd, I * H * 2, cudaMemcpyDeviceToHost);
  CHECK_OK(pz_ref_mlp(m, H, I, x, H, eg, eu, ed, dg, H, true));
  for (int64_t q = 0; q < m * H; q++) ref[q] += dg[q];
  char name[64];
  snprintf(name, sizeof name, "kimi-k2 tp4 moe (%d experts)", distinct);
  compare_out(name, m, H, got, ref);
  cudaFree(dwg); cudaFree(dwu); cudaFree(dwd); cudaFree(dsg); cudaFree(dsu); cudaFree(dsd); cudaFree(dx);
  cudaFree(dl); cudaFree(db); cudaFree(dout); cudaFree(dids); cudaFree(dwts); cudaFree(ws);
  free(lg); free(bias); free(got); free(ref); free(gids); free(rids); free(gw); free(rw);
  free(x); free(xg); free(eg); free(eu); free(ed); free(d); free(dg); free(slot);
}

static void test_experts(int quick) {
  /* tiny.json at TP 1 (inter 128) and TP 4 (inter 32), 1 shared expert */
  pz_moe_params tiny = mk(64, 6, 8, 4, PZ_SCORE_SIGMOID, PZ_TOPK_NOAUX_TC, true, 2.5f);
  tiny.inter = 128;
  tiny.shared_inter = 128;
  moe_case("tiny tp1 moe", 1, 512, tiny, 0, 0, 0);
  moe_case("tiny tp1 moe graph", 37, 512, tiny, 0, 0, 1);
  moe_case("tiny tp1 moe", 128, 512, tiny, 0, 0, 0);
  tiny.inter = 32;
  tiny.shared_inter = 32;
  moe_case("tiny tp4 moe", 1, 512, tiny, 0, 0, 0);
  moe_case("tiny tp4 moe graph", 128, 512, tiny, 0, 0, 1);
  /* every token picks expert 3: one expert with 128 tokens (4 work groups of 32) */
  moe_case("tiny tp4 one hot expert", 128, 512, tiny, 0, 1, 0);
  moe_case("tiny tp4 ties", 77, 512, tiny, 1, 0, 0);
  /* no shared experts, softmax greedy (V2-Lite style) */
  pz_moe_params lite = mk(64, 6, 1, 1, PZ_SCORE_SOFTMAX, PZ_TOPK_GREEDY, false, 1.0f);
  lite.inter = 176; /* 1408 / 8: not a multiple of 32 (masked K tail in down) */
  lite.shared_inter = 0;
  moe_case("lite tp8 moe (no shared)", 9, 256, lite, 0, 0, 0);
  /* all experts chosen, and a single expert chosen */
  pz_moe_params all = mk(8, 8, 1, 1, PZ_SCORE_SOFTMAX, PZ_TOPK_GREEDY, true, 1.0f);
  all.inter = 64;
  all.shared_inter = 64;
  moe_case("all experts chosen", 1, 256, all, 0, 0, 0);
  moe_case("all experts chosen", 128, 256, all, 0, 0, 0);
  pz_moe_params one = mk(16, 1, 1, 1, PZ_SCORE_SIGMOID, PZ_TOPK_NOAUX_TC, true, 1.0f);
  one.inter = 48;
  one.shared_inter = 0;
  moe_case("single expert chosen", 1, 256, one, 0, 0, 0);
  moe_case("single expert chosen", 128, 256, one, 0, 0, 0);
  /* dense MLP: tiny (intermediate 1024 / TP 2), Kimi-K2 first layer at TP 4 (18432 / 4) */
  mlp_case("tiny dense mlp tp2", 1, 512, 512, false);
  mlp_case("tiny dense mlp tp2", 128, 512, 512, false);
  mlp_case("tiny dense mlp, exact", 16, 512, 512, true);
  mlp_case("dense mlp, n / k not multiples of 64", 9, 208, 112, false); /* the any-shape GEMM kernel */
  if (getenv("PZ_TEST_SMALL")) return; /* e.g. under compute-sanitizer: tiny shapes only */
  mlp_case("kimi-k2 dense mlp tp4", 1, 7168, 4608, false);
  mlp_case("kimi-k2.5 shared expert tp1, exact", 64, 7168, 2048, true);
  mlp_into_case("shared gate | up into a slot", 16, 512, 256, true);
  mlp_into_case("shared gate | up into a slot", 9, 1024, 128, false);
  if (!quick) mlp_case("kimi-k2 dense mlp tp4", 128, 7168, 4608, false);
  /* Kimi-K2 MoE layer, TP 4 */
  kimi_case(1);
  if (!quick) kimi_case(128);
}

static void test_errors(void) {
  pz_moe_params p = mk(64, 6, 8, 4, PZ_SCORE_SIGMOID, PZ_TOPK_NOAUX_TC, true, 2.5f);
  p.inter = 32;
  p.shared_inter = 32;
  pz_moe_args a;
  memset(&a, 0, sizeof a);
  a.m = 4;
  a.H = 512;
  a.p = p;
  CHECK_ST(pz_moe_experts_launch(&a, 0), PZ_ERR_INVALID_ARG); /* NULL pointers */
  CHECK_ST(pz_moe_experts_launch(NULL, 0), PZ_ERR_INVALID_ARG);
  a.m = 0;
  CHECK_ST(pz_moe_experts_launch(&a, 0), PZ_ERR_SHAPE);
  a.m = 4;
  a.H = 500;
  CHECK_ST(pz_moe_experts_launch(&a, 0), PZ_ERR_SHAPE);
  a.H = 512;
  a.p.inter = 40;
  CHECK_ST(pz_moe_experts_launch(&a, 0), PZ_ERR_SHAPE);
  a.p.inter = 32;
  CHECK(pz_moe_workspace_bytes(4, 512, &p) % 256 == 0 && pz_moe_workspace_bytes(4, 512, &p) > 0);
  /* Every pointer set except the shared weights: nothing is launched in any case below. */
  char *dummy = NULL;
  cudaMalloc((void **)&dummy, 4096);
  a.x = (const pz_bf16 *)dummy; a.ldx = 512; a.ids = (const int32_t *)dummy; a.weights = (const float *)dummy;
  a.w_gate = a.w_up = a.w_down = (const pz_bf16 *)dummy; a.out = (float *)dummy; a.ld_out = 512;
  a.workspace = dummy; a.workspace_bytes = pz_moe_workspace_bytes(4, 512, &p);
  CHECK_ST(pz_moe_experts_launch(&a, 0), PZ_ERR_INVALID_ARG); /* shared_inter > 0, no shared weights */
  a.p.shared_inter = 40;
  CHECK_ST(pz_moe_experts_launch(&a, 0), PZ_ERR_SHAPE);
  a.p.shared_inter = 0;
  a.workspace_bytes = 256;
  CHECK_ST(pz_moe_experts_launch(&a, 0), PZ_ERR_INVALID_ARG); /* workspace too small */
  a.workspace_bytes = pz_moe_workspace_bytes(4, 512, &p);
  a.x = (const pz_bf16 *)(dummy + 2);
  CHECK_ST(pz_moe_experts_launch(&a, 0), PZ_ERR_INVALID_ARG); /* misaligned x */
  a.x = (const pz_bf16 *)dummy;
  a.ldx = 500;
  CHECK_ST(pz_moe_experts_launch(&a, 0), PZ_ERR_SHAPE);
  cudaFree(dummy);
}

int main(void) {
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
    printf("test_moe: no CUDA GPU present; skipped\n");
    return 77;
  }
  const int quick = getenv("PZ_TEST_QUICK") != NULL;
  pz_ref_set_threads(0); /* reference GEMMs on every core (bit-identical for any count) */
  printf("router top-k vs pz_ref_moe_route (ids and weights bit for bit)\n");
  test_route();
  printf("experts / MLP vs CPU reference (tolerance %.0e of the row's max |ref|)\n", TOL_REL);
  pz_runtime_opts ro;
  pz_runtime_opts_default(&ro);
  ro.mlp_gemm = 1; /* PREZERO_MLP_GEMM=1 */
  CHECK_OK(pz_gemm_ctx_create_opts(&ro, &g_gemm_on));
  ro.mlp_one_gu = 0; /* PREZERO_MLP_ONE_GU=0 */
  CHECK_OK(pz_gemm_ctx_create_opts(&ro, &g_gemm_two));
  ro.mlp_one_gu = -1;
  ro.mlp_gemm = 0; /* PREZERO_MLP_GEMM=0 */
  CHECK_OK(pz_gemm_ctx_create_opts(&ro, &g_gemm_off));
  { /* the by-batch rule (PREZERO_MLP_GEMM unset): dense MLPs from 1 token, shared experts from 8, split-K shapes only */
    pz_gemm_ctx *gd = NULL;
    ro.mlp_gemm = -1;
    CHECK_OK(pz_gemm_ctx_create_opts(&ro, &gd));
    CHECK(pz_cuda_mlp_uses_gemm(gd, PZ_MLP_DENSE, 1, 7168, 18432) && pz_cuda_mlp_uses_gemm(gd, PZ_MLP_DENSE, 256, 7168, 18432));
    CHECK(!pz_cuda_mlp_uses_gemm(gd, PZ_MLP_DENSE, 257, 7168, 18432) && !pz_cuda_mlp_uses_gemm(gd, PZ_MLP_DENSE, 0, 7168, 18432));
    CHECK(!pz_cuda_mlp_uses_gemm(gd, PZ_MLP_SHARED, 7, 7168, 2048) && pz_cuda_mlp_uses_gemm(gd, PZ_MLP_SHARED, 8, 7168, 2048));
    CHECK(!pz_cuda_mlp_uses_gemm(gd, PZ_MLP_DENSE, 64, 2048, 2736)); /* DeepSeek-V2-Lite dense TP 4: 2736 % 64 != 0 */
    CHECK(pz_cuda_mlp_uses_gemm(g_gemm_on, PZ_MLP_SHARED, 1, 2048, 2736) && !pz_cuda_mlp_uses_gemm(g_gemm_off, PZ_MLP_DENSE, 64, 7168, 2048));
    pz_gemm_ctx_destroy(gd);
  }
  test_experts(quick);
  test_errors();
  pz_gemm_ctx_destroy(g_gemm_on);
  pz_gemm_ctx_destroy(g_gemm_off);
  pz_gemm_ctx_destroy(g_gemm_two);
  pz_ref_set_threads(1);
  TEST_DONE();
}
