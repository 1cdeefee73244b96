/* CUDA dense ops (src/backend/cuda/dense_ops.h) against the CPU references of ref_ops.h:
 * embedding and argmax bit for bit (TP shards, ties, NaN, padding, out-of-range ids), RMSNorm
 * within one bf16 ulp, lm_head exact on integer inputs, at tiny and Kimi-K2 per-rank shapes;
 * SiLU-and-multiply bit for bit (edge values included). */
#define _POSIX_C_SOURCE 200809L
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "backend/cpu/ref_ops.h"
#include "backend/cuda/dense_ops.h"
#include "backend/cuda/gemm.h"
#include "pz_test.h"

static uint32_t rng = 2024;
static uint32_t next_u32(void) {
  rng ^= rng << 13;
  rng ^= rng >> 17;
  rng ^= rng << 5;
  return rng;
}
static float uniform(void) { return (float)(next_u32() & 0xffffff) / 16777216.0f * 2.0f - 1.0f; }

static void *dev_copy(const void *h, size_t bytes) {
  void *d = NULL;
  if (cudaMalloc(&d, bytes) != cudaSuccess) return NULL;
  cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice);
  return d;
}
static uint32_t f2u(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

/* ---------------------------------------------------------------- embedding */
static void test_embedding(int64_t H, int64_t vocab, int tp) {
  const int64_t vpr = (vocab + tp - 1) / tp, m = 7, ld = H + 16;
  pz_bf16 *W = malloc(sizeof(pz_bf16) * vpr * H * tp);
  for (int64_t i = 0; i < vpr * H * tp; i++) W[i] = pz_f32_to_bf16(uniform());
  int32_t ids[7] = {0, (int32_t)(vocab - 1), (int32_t)(vpr - 1), (int32_t)(vpr < vocab ? vpr : vocab - 2), 3, (int32_t)(vocab / 2), 0};
  int32_t *d_ids = dev_copy(ids, sizeof ids);
  float *ref = malloc(sizeof(float) * m * ld), *got = malloc(sizeof(float) * m * ld);
  float *d_out = NULL;
  cudaMalloc((void **)&d_out, sizeof(float) * m * ld);
  for (int r = 0; r < tp; r++) {
    const pz_bf16 *Wr = W + (int64_t)r * vpr * H;
    pz_bf16 *d_W = dev_copy(Wr, sizeof(pz_bf16) * vpr * H);
    for (int64_t i = 0; i < m * ld; i++) ref[i] = got[i] = -7.0f; /* guard columns keep it */
    cudaMemcpy(d_out, got, sizeof(float) * m * ld, cudaMemcpyHostToDevice);
    CHECK_OK(pz_ref_embedding(m, ids, Wr, H, vocab, vpr, r, ref, ld));
    pz_embedding_params p = {.ids = d_ids, .W = d_W, .out = d_out, .m = m, .H = H, .ld_out = ld,
                             .vocab_size = vocab, .vocab_per_rank = vpr, .rank = r};
    CHECK_OK(pz_cuda_embedding(&p, 0));
    cudaMemcpy(got, d_out, sizeof(float) * m * ld, cudaMemcpyDeviceToHost);
    int bad = 0;
    for (int64_t i = 0; i < m * ld; i++) bad += f2u(ref[i]) != f2u(got[i]);
    CHECK(bad == 0);
    cudaFree(d_W);
  }
  /* an id out of range: the CPU refuses, the GPU fills the row with NaN */
  int32_t bad_ids[2] = {5, (int32_t)vocab};
  cudaMemcpy(d_ids, bad_ids, sizeof bad_ids, cudaMemcpyHostToDevice);
  pz_bf16 *d_W = dev_copy(W, sizeof(pz_bf16) * vpr * H);
  pz_embedding_params p = {.ids = d_ids, .W = d_W, .out = d_out, .m = 2, .H = H, .ld_out = ld,
                           .vocab_size = vocab, .vocab_per_rank = vpr, .rank = 0};
  CHECK_OK(pz_cuda_embedding(&p, 0));
  cudaMemcpy(got, d_out, sizeof(float) * 2 * ld, cudaMemcpyDeviceToHost);
  CHECK(got[0] == pz_bf16_to_f32(W[5 * H]));
  CHECK(isnan(got[ld]) && isnan(got[ld + H - 1]));
  CHECK_ST(pz_ref_embedding(2, bad_ids, W, H, vocab, vpr, 0, ref, ld), PZ_ERR_INVALID_ARG);
  p.ld_out = H - 1;
  CHECK_ST(pz_cuda_embedding(&p, 0), PZ_ERR_INVALID_ARG);
  cudaFree(d_W); cudaFree(d_ids); cudaFree(d_out);
  free(W); free(ref); free(got);
}

/* ---------------------------------------------------------------- RMSNorm */
static void test_rmsnorm(int64_t m, int64_t n, pz_dtype xt, float scale) {
  const int64_t ldx = n + 8, ldy = n + 24;
  const size_t xs = pz_dtype_size(xt);
  void *x = malloc(xs * m * ldx);
  pz_bf16 *w = malloc(sizeof(pz_bf16) * n), *ref = malloc(sizeof(pz_bf16) * m * ldy), *got = malloc(sizeof(pz_bf16) * m * ldy);
  for (int64_t i = 0; i < m * ldx; i++) {
    float v = uniform() * scale;
    if (xt == PZ_F32) ((float *)x)[i] = v;
    else ((pz_bf16 *)x)[i] = pz_f32_to_bf16(v);
  }
  for (int64_t j = 0; j < n; j++) w[j] = pz_f32_to_bf16(1.0f + 0.5f * uniform());
  for (int64_t i = 0; i < m * ldy; i++) ref[i] = got[i] = 0x7fd1;
  pz_ref_rmsnorm(m, n, x, xt, ldx, w, 1e-6f, ref, ldy);
  void *dx = dev_copy(x, xs * m * ldx);
  pz_bf16 *dw = dev_copy(w, sizeof(pz_bf16) * n), *dy = dev_copy(got, sizeof(pz_bf16) * m * ldy);
  pz_rmsnorm_params p = {.x = dx, .x_dtype = xt, .w = dw, .y = dy, .m = m, .n = n, .ldx = ldx, .ldy = ldy, .eps = 1e-6f};
  CHECK_OK(pz_cuda_rmsnorm(&p, 0));
  cudaMemcpy(got, dy, sizeof(pz_bf16) * m * ldy, cudaMemcpyDeviceToHost);
  int64_t exact = 0, over = 0, guard = 0;
  for (int64_t i = 0; i < m; i++)
    for (int64_t j = 0; j < ldy; j++) {
      pz_bf16 a = ref[i * ldy + j], b = got[i * ldy + j];
      if (j >= n) { guard += b != 0x7fd1; continue; }
      if (a == b) exact++;
      else if (abs((int)(int16_t)a - (int)(int16_t)b) > 1 || ((a ^ b) & 0x8000)) over++;
    }
  CHECK(guard == 0);
  CHECK(over == 0);                 /* within one bf16 ulp everywhere */
  CHECK(exact >= m * n * 95 / 100); /* and almost always the same bits */
  printf("rmsnorm m=%lld n=%lld %s: %lld of %lld bit-identical\n", (long long)m, (long long)n, pz_dtype_name(xt),
         (long long)exact, (long long)(m * n));
  p.x_dtype = PZ_I32;
  CHECK_ST(pz_cuda_rmsnorm(&p, 0), PZ_ERR_DTYPE);
  cudaFree(dx); cudaFree(dw); cudaFree(dy);
  free(x); free(w); free(ref); free(got);
}

/* ---------------------------------------------------------------- argmax */
/* mode 0: random reals; 1: few distinct integers (many ties, across ranks too);
 * 2: like 1 plus NaNs in some rows; 3: all -inf rows. */
static void test_argmax(int64_t m, int64_t vocab, int tp, int mode) {
  const int64_t vpr = (vocab + tp - 1) / tp, ld = vpr + 4;
  float *L[PZ_ARGMAX_MAX_TP];
  const float *Lc[PZ_ARGMAX_MAX_TP];
  pz_argmax_cand *dc[PZ_ARGMAX_MAX_TP];
  float *dL[PZ_ARGMAX_MAX_TP];
  for (int r = 0; r < tp; r++) {
    L[r] = malloc(sizeof(float) * m * ld);
    for (int64_t i = 0; i < m * ld; i++) {
      float v = mode == 0 ? uniform() : (float)(next_u32() % 5) - 2.0f;
      if (mode == 3) v = -INFINITY;
      if (mode == 2 && (i / ld) % 3 == 1 && next_u32() % 997 == 0) v = NAN;
      L[r][i] = v;
    }
    if (mode == 2 && m > 2) L[r][2 * ld + (vpr - 1)] = NAN; /* a late NaN in row 2 of every rank */
    Lc[r] = L[r];
    dL[r] = dev_copy(L[r], sizeof(float) * m * ld);
    cudaMalloc((void **)&dc[r], sizeof(pz_argmax_cand) * m);
  }
  int32_t *ref = malloc(sizeof(int32_t) * m), *got = malloc(sizeof(int32_t) * m), *got1 = malloc(sizeof(int32_t) * m);
  pz_ref_argmax(tp, Lc, ld, m, vpr, vocab, ref);
  int32_t *dids = NULL, *dids1 = NULL;
  cudaMalloc((void **)&dids, sizeof(int32_t) * m);
  cudaMalloc((void **)&dids1, sizeof(int32_t) * m);
  for (int r = 0; r < tp; r++) {
    pz_argmax_params p = {.logits = dL[r], .cand = dc[r], .ids = r == 0 ? dids1 : NULL, .m = m, .ld = ld,
                          .vocab_per_rank = vpr, .vocab_size = vocab, .rank = r};
    CHECK_OK(pz_cuda_argmax_shard(&p, 0));
  }
  CHECK_OK(pz_cuda_argmax_combine(tp, (const pz_argmax_cand *const *)dc, m, dids, 0));
  cudaMemcpy(got, dids, sizeof(int32_t) * m, cudaMemcpyDeviceToHost);
  cudaMemcpy(got1, dids1, sizeof(int32_t) * m, cudaMemcpyDeviceToHost);
  int bad = 0;
  for (int64_t i = 0; i < m; i++) bad += ref[i] != got[i];
  CHECK(bad == 0);
  if (tp == 1) { /* the shard's own ids equal the combine's */
    bad = 0;
    for (int64_t i = 0; i < m; i++) bad += ref[i] != got1[i];
    CHECK(bad == 0);
  }
  if (mode == 3) CHECK(ref[0] == 0 && got[0] == 0); /* all -inf: the lowest id */
  CHECK_ST(pz_cuda_argmax_combine(PZ_ARGMAX_MAX_TP + 1, (const pz_argmax_cand *const *)dc, m, dids, 0), PZ_ERR_INVALID_ARG);
  for (int r = 0; r < tp; r++) { cudaFree(dL[r]); cudaFree(dc[r]); free(L[r]); }
  cudaFree(dids); cudaFree(dids1);
  free(ref); free(got); free(got1);
}

/* A hand case: ties across ranks go to the lower id; a NaN beats a larger value before it. */
static void test_argmax_hand(void) {
  float r0[8] = {1, 5, 2, 5, 0, 0, 0, 0}, r1[8] = {5, 5, 9, 0, 0, 0, 0, 0};
  float r1n[8] = {5, NAN, 9, 0, 0, 0, 0, 0};
  pz_argmax_cand *dc[2];
  float *d0 = dev_copy(r0, sizeof r0), *d1 = dev_copy(r1, sizeof r1), *d1n = dev_copy(r1n, sizeof r1n);
  cudaMalloc((void **)&dc[0], sizeof(pz_argmax_cand));
  cudaMalloc((void **)&dc[1], sizeof(pz_argmax_cand));
  int32_t *dids = NULL, id = -5;
  cudaMalloc((void **)&dids, sizeof(int32_t));
  /* vocab 14 (rank 1 holds ids 8..13; its columns 6, 7 are padding), rank 1 has a 9 at id 10 */
  pz_argmax_params p0 = {.logits = d0, .cand = dc[0], .m = 1, .ld = 8, .vocab_per_rank = 8, .vocab_size = 14, .rank = 0};
  pz_argmax_params p1 = {.logits = d1, .cand = dc[1], .m = 1, .ld = 8, .vocab_per_rank = 8, .vocab_size = 14, .rank = 1};
  CHECK_OK(pz_cuda_argmax_shard(&p0, 0));
  CHECK_OK(pz_cuda_argmax_shard(&p1, 0));
  CHECK_OK(pz_cuda_argmax_combine(2, (const pz_argmax_cand *const *)dc, 1, dids, 0));
  cudaMemcpy(&id, dids, 4, cudaMemcpyDeviceToHost);
  CHECK(id == 10);
  CHECK_OK(pz_cuda_argmax_combine(1, (const pz_argmax_cand *const *)dc, 1, dids, 0));
  cudaMemcpy(&id, dids, 4, cudaMemcpyDeviceToHost);
  CHECK(id == 1); /* rank 0 alone: 5 at ids 1 and 3, the lower wins */
  p1.logits = d1n;
  CHECK_OK(pz_cuda_argmax_shard(&p1, 0));
  CHECK_OK(pz_cuda_argmax_combine(2, (const pz_argmax_cand *const *)dc, 1, dids, 0));
  cudaMemcpy(&id, dids, 4, cudaMemcpyDeviceToHost);
  CHECK(id == 9);
  cudaFree(d0); cudaFree(d1); cudaFree(d1n); cudaFree(dc[0]); cudaFree(dc[1]); cudaFree(dids);
}

/* ---------------------------------------------------------------- lm_head */
static void test_lm_head(pz_gemm_ctx *g, int m, int64_t H, int64_t vpr) {
  pz_bf16 *x = malloc(sizeof(pz_bf16) * m * H), *W = malloc(sizeof(pz_bf16) * vpr * H);
  for (int64_t i = 0; i < m * H; i++) x[i] = pz_f32_to_bf16((float)((int)(next_u32() % 5) - 2));
  for (int64_t i = 0; i < vpr * H; i++) W[i] = pz_f32_to_bf16((float)((int)(next_u32() % 5) - 2));
  float *ref = malloc(sizeof(float) * m * vpr), *got = malloc(sizeof(float) * m * vpr);
  pz_ref_gemm(m, vpr, H, x, H, W, H, NULL, ref, vpr, 1, true);
  pz_bf16 *dx = dev_copy(x, sizeof(pz_bf16) * m * H), *dW = dev_copy(W, sizeof(pz_bf16) * vpr * H);
  float *dl = NULL;
  cudaMalloc((void **)&dl, sizeof(float) * m * vpr);
  cudaMemset(dl, 0x7f, sizeof(float) * m * vpr); /* stale logits must be overwritten */
  CHECK_OK(pz_cuda_lm_head(g, m, H, vpr, dx, H, dW, dl, vpr, 0));
  cudaMemcpy(got, dl, sizeof(float) * m * vpr, cudaMemcpyDeviceToHost);
  int64_t bad = 0;
  for (int64_t i = 0; i < m * vpr; i++) bad += ref[i] != got[i]; /* integer sums: exact in any order */
  CHECK(bad == 0);
  cudaFree(dx); cudaFree(dW); cudaFree(dl);
  free(x); free(W); free(ref); free(got);
}

/* ---------------------------------------------------------------- SiLU-and-multiply */

/* pz_cuda_silu_mul against pz_ref_silu_mul bit for bit (NaN matches any NaN: the CPU and the
 * GPU make different NaN bits from inf/inf): the 4-wide path (inter % 4 == 0, aligned strides)
 * and the scalar one, rows wider than the data (the padding of act must stay untouched), and
 * with `specials` the edge values of g (±inf, NaN, |g| beyond expf's range, ±0, a denormal). */
static void test_silu_mul(int64_t m, int64_t inter, int64_t pad_gu, int64_t pad_act, int specials) {
  const int64_t ld_gu = 2 * inter + pad_gu, ld_act = inter + pad_act;
  float *gu = malloc(sizeof(float) * (size_t)(m * ld_gu));
  pz_bf16 *ref = malloc(sizeof(pz_bf16) * (size_t)(m * ld_act)), *got = malloc(sizeof(pz_bf16) * (size_t)(m * ld_act));
  for (int64_t i = 0; i < m * ld_gu; i++) gu[i] = 8.0f * uniform();
  if (specials) {
    const float sp[] = {INFINITY, -INFINITY, NAN, -100.0f, 100.0f, -88.5f, 89.0f, -0.0f, 0.0f, 1e-40f, -104.0f, 20.0f};
    for (int64_t k = 0; k < (int64_t)(sizeof sp / sizeof sp[0]) && k < inter; k++) gu[k] = sp[k];
    if (m > 1 && inter > 1) gu[ld_gu + inter + 1] = INFINITY; /* u = inf */
  }
  for (int64_t i = 0; i < m * ld_act; i++) ref[i] = 0x5555;
  pz_ref_silu_mul(m, inter, gu, ld_gu, ref, ld_act);
  float *dg = dev_copy(gu, sizeof(float) * (size_t)(m * ld_gu));
  pz_bf16 *da = NULL;
  cudaMalloc((void **)&da, sizeof(pz_bf16) * (size_t)(m * ld_act));
  cudaMemset(da, 0x55, sizeof(pz_bf16) * (size_t)(m * ld_act)); /* 0x5555: the padding sentinel */
  pz_silu_mul_params p = {.gu = dg, .act = da, .m = m, .inter = inter, .ld_gu = ld_gu, .ld_act = ld_act};
  CHECK_OK(pz_cuda_silu_mul(&p, 0));
  CHECK(cudaDeviceSynchronize() == cudaSuccess);
  cudaMemcpy(got, da, sizeof(pz_bf16) * (size_t)(m * ld_act), cudaMemcpyDeviceToHost);
  int64_t bad = 0;
  for (int64_t i = 0; i < m * ld_act; i++) {
    const bool nan_r = (ref[i] & 0x7fff) > 0x7f80, nan_g = (got[i] & 0x7fff) > 0x7f80;
    if (nan_r || nan_g ? !(nan_r && nan_g) : ref[i] != got[i]) {
      if (bad++ < 5)
        fprintf(stderr, "silu_mul m=%lld inter=%lld [%lld]: cpu 0x%04x, cuda 0x%04x\n", (long long)m, (long long)inter,
                (long long)i, ref[i], got[i]);
    }
  }
  CHECK(bad == 0);
  printf("silu_mul m=%lld inter=%lld ld_gu=%lld ld_act=%lld%s: %lld of %lld values differ\n", (long long)m,
         (long long)inter, (long long)ld_gu, (long long)ld_act, specials ? " (edge values)" : "", (long long)bad,
         (long long)(m * ld_act));
  p.ld_gu = 2 * inter - 1;
  CHECK_ST(pz_cuda_silu_mul(&p, 0), PZ_ERR_INVALID_ARG);
  cudaFree(dg); cudaFree(da);
  free(gu); free(ref); free(got);
}

int main(void) {
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
    printf("no CUDA GPU: test_dense_ops skipped\n");
    return 77;
  }
  pz_ref_set_threads(0);
  /* tiny: H 512, vocab 1024; Kimi-K2: H 7168, vocab 163840 */
  test_embedding(512, 1024, 1);
  test_embedding(512, 1024, 4);
  test_embedding(7168, 163840, 4);
  test_embedding(64, 1001, 3); /* last rank has padding */
  test_rmsnorm(5, 512, PZ_F32, 1.0f);
  test_rmsnorm(5, 512, PZ_BF16, 3.0f);
  test_rmsnorm(64, 7168, PZ_F32, 10.0f);
  test_rmsnorm(3, 7168, PZ_BF16, 1.0f);
  test_rmsnorm(128, 1536, PZ_F32, 0.1f); /* q_a_layernorm shape */
  test_rmsnorm(3, 512, PZ_F32, 100.0f);  /* kv_a_layernorm shape */
  test_argmax_hand();
  for (int mode = 0; mode < 4; mode++) {
    test_argmax(3, 1024, 1, mode);
    test_argmax(8, 1024, 4, mode);
    test_argmax(5, 1001, 3, mode);
    test_argmax(4, 163840, 4, mode);
  }
  test_argmax(64, 163840, 1, 1);
  test_silu_mul(3, 64, 0, 0, 1);
  test_silu_mul(5, 37, 3, 1, 1);          /* odd: the scalar path */
  test_silu_mul(4, 1024, 8, 4, 0);        /* strided rows, 4-wide */
  test_silu_mul(128, 28672 / 8, 0, 0, 0); /* Llama-3.1-70B TP 8: intermediate 28672 / 8 */
  pz_gemm_ctx *g = NULL;
  CHECK_OK(pz_gemm_ctx_create(&g));
  if (g) {
    test_lm_head(g, 3, 512, 1024);
    test_lm_head(g, 4, 512, 256);
    test_lm_head(g, 8, 7168, 40960 / 4); /* a quarter of a Kimi-K2 TP-4 shard keeps it quick */
    pz_gemm_ctx_destroy(g);
  }
  pz_ref_set_threads(1);
  TEST_DONE();
}
