/* CPU reference ops against hand-computed values: split-K GEMM (zero_init, bias, split
 * slicing), RMSNorm, AR + residual + RMSNorm, embedding, argmax, YaRN RoPE. */
#include "backend/cpu/ref_ops.h"
#include "pz_test.h"
#include <string.h>

static pz_bf16 B(float f) { return pz_f32_to_bf16(f); }
static float F(pz_bf16 h) { return pz_bf16_to_f32(h); }
static int same_bits(float a, float b) { return memcmp(&a, &b, 4) == 0; }

static void test_gemm(void) {
  /* A = [[1,2],[3,4]], W = [[1,0],[0,1],[1,1]] (n=3, k=2): C = A·Wᵀ = [[1,2,3],[3,4,7]] */
  pz_bf16 A[4] = {B(1), B(2), B(3), B(4)};
  pz_bf16 W[6] = {B(1), B(0), B(0), B(1), B(1), B(1)};
  float C[2 * 5];
  for (int i = 0; i < 10; i++) C[i] = -99.f;
  pz_ref_gemm(2, 3, 2, A, 2, W, 2, NULL, C + 1, 5, 1, true); /* column slice at col 1, ldc 5 */
  float want[6] = {1, 2, 3, 3, 4, 7};
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < 3; j++) CHECK(C[i * 5 + 1 + j] == want[i * 3 + j]);
  CHECK(C[0] == -99.f && C[4] == -99.f && C[5] == -99.f && C[9] == -99.f); /* outside the slice untouched */
  /* bias added once, also with 3 splits; zero_init=false accumulates onto C */
  float bias[3] = {0.5f, 0.f, -1.f};
  float C2[6];
  for (int i = 0; i < 6; i++) C2[i] = 10.f;
  pz_ref_gemm(2, 3, 2, A, 2, W, 2, bias, C2, 3, 3, false);
  float want2[6] = {11.5f, 12, 12, 13.5f, 14, 16};
  for (int i = 0; i < 6; i++) CHECK(C2[i] == want2[i]);
  pz_ref_gemm(2, 3, 2, A, 2, W, 2, bias, C2, 3, 2, true);
  for (int i = 0; i < 6; i++) CHECK(C2[i] == want2[i] - 10.f);

  /* slicing rule: chunk = roundup(ceil(k/split), 64) */
  CHECK(pz_ref_split_chunk(200, 1) == 256);
  CHECK(pz_ref_split_chunk(200, 2) == 128);
  CHECK(pz_ref_split_chunk(200, 3) == 128);
  CHECK(pz_ref_split_chunk(1024, 4) == 256);
  CHECK(pz_ref_split_chunk(7168, 0) == 7168 / 7);   /* default split 7 -> 1024 */
  CHECK(pz_ref_default_split(1536) == 1 && pz_ref_default_split(7168) == 7 && pz_ref_default_split(20000) == 8);

  /* integer-valued inputs: splits 1/2/3 bit-identical and equal to the exact integer product */
  enum { M = 3, N = 5, K = 200 };
  static pz_bf16 Ai[M * K], Wi[N * K];
  long long exact[M * N] = {0};
  for (int i = 0; i < M * K; i++) Ai[i] = B((float)((i * 7 + 3) % 9 - 4));
  for (int i = 0; i < N * K; i++) Wi[i] = B((float)((i * 5 + 1) % 7 - 3));
  for (int i = 0; i < M; i++)
    for (int j = 0; j < N; j++)
      for (int k = 0; k < K; k++) exact[i * N + j] += (long long)F(Ai[i * K + k]) * (long long)F(Wi[j * K + k]);
  float Cs[3][M * N];
  for (int s = 1; s <= 3; s++) pz_ref_gemm(M, N, K, Ai, K, Wi, K, NULL, Cs[s - 1], N, s, true);
  for (int i = 0; i < M * N; i++) {
    CHECK(Cs[0][i] == (float)exact[i]);
    CHECK(same_bits(Cs[0][i], Cs[1][i]) && same_bits(Cs[0][i], Cs[2][i]));
  }
  /* non-integer inputs: the split result is exactly 0 + p0 + p1 with p_s in k order */
  static pz_bf16 Af[K], Wf[K];
  for (int k = 0; k < K; k++) { Af[k] = B(0.1f * (float)(k % 13) + 0.013f); Wf[k] = B(0.37f - 0.011f * (float)(k % 17)); }
  float p0 = 0.f, p1 = 0.f, full = 0.f;
  for (int k = 0; k < 128; k++) p0 += F(Af[k]) * F(Wf[k]);
  for (int k = 128; k < K; k++) p1 += F(Af[k]) * F(Wf[k]);
  for (int k = 0; k < K; k++) full += F(Af[k]) * F(Wf[k]);
  float c3, c1, c3acc = 2.5f;
  pz_ref_gemm(1, 1, K, Af, K, Wf, K, NULL, &c3, 1, 3, true);
  pz_ref_gemm(1, 1, K, Af, K, Wf, K, NULL, &c1, 1, 1, true);
  pz_ref_gemm(1, 1, K, Af, K, Wf, K, NULL, &c3acc, 1, 3, false);
  float e3 = 0.f; e3 += p0; e3 += p1;
  float e3acc = 2.5f; e3acc += p0; e3acc += p1;
  CHECK(same_bits(c3, e3));
  CHECK(same_bits(c1, 0.f + full));
  CHECK(same_bits(c3acc, e3acc));

  /* worker threads split the columns (n = 300: a partial last block): bit-identical */
  {
    enum { TM = 8, TN = 300, TK = 100 };
    static pz_bf16 ta[TM * TK], tw[TN * TK];
    static float c1t[TM * TN], c2t[TM * TN];
    for (int i = 0; i < TM * TK; i++) ta[i] = B(0.01f * (float)(i % 101) - 0.3f);
    for (int i = 0; i < TN * TK; i++) tw[i] = B(0.02f * (float)(i % 53) - 0.5f);
    pz_ref_gemm(TM, TN, TK, ta, TK, tw, TK, NULL, c1t, TN, 2, true);
    CHECK_OK(pz_ref_set_threads(2));
    pz_ref_gemm(TM, TN, TK, ta, TK, tw, TK, NULL, c2t, TN, 2, true);
    CHECK_OK(pz_ref_set_threads(1));
    CHECK(memcmp(c1t, c2t, sizeof c1t) == 0);
    /* and equals an independent scalar evaluation of the same order (chunk 64: [0,64), [64,100)) */
    int ok = 1;
    for (int i = 0; i < TM; i++)
      for (int j = 0; j < TN; j++) {
        float q0 = 0.f, q1 = 0.f;
        for (int k = 0; k < 64; k++) q0 += F(ta[i * TK + k]) * F(tw[j * TK + k]);
        for (int k = 64; k < TK; k++) q1 += F(ta[i * TK + k]) * F(tw[j * TK + k]);
        float e = 0.f; e += q0; e += q1;
        ok &= same_bits(e, c1t[i * TN + j]);
      }
    CHECK(ok);
  }
}

static void test_rmsnorm(void) {
  /* rows: [2,2,2,2] -> inv 0.5; [1,-1,1,-1] -> inv 1; [3,4,0,0] -> inv 1/2.5 (eps 0) */
  float x[3 * 4] = {2, 2, 2, 2, 1, -1, 1, -1, 3, 4, 0, 0};
  pz_bf16 w[4] = {B(1), B(2), B(3), B(4)};
  pz_bf16 y[3 * 4];
  pz_ref_rmsnorm(3, 4, x, PZ_F32, 4, w, 0.f, y, 4);
  float want[12] = {1, 2, 3, 4, 1, -2, 3, -4, 1.2f, 3.2f, 0, 0};
  for (int i = 0; i < 12; i++) CHECK(y[i] == B(want[i]));
  /* bf16 input with a row stride of 6 gives the same */
  pz_bf16 xb[3 * 6];
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 6; j++) xb[i * 6 + j] = B(j < 4 ? x[i * 4 + j] : 1000.f);
  pz_bf16 y2[12];
  pz_ref_rmsnorm(3, 4, xb, PZ_BF16, 6, w, 0.f, y2, 4);
  CHECK(memcmp(y, y2, sizeof y) == 0);
  /* long bf16 rows (n > 1024 takes the two-pass path) equal the f32 path bit for bit */
  {
    enum { N = 1500 };
    static float xf[N];
    static pz_bf16 xh[N], wl[N], ya[N], yb[N];
    for (int j = 0; j < N; j++) {
      xh[j] = B(0.01f * (float)(j % 37) - 0.15f);
      xf[j] = F(xh[j]);
      wl[j] = B(1.0f + 0.001f * (float)(j % 11));
    }
    pz_ref_rmsnorm(1, N, xf, PZ_F32, N, wl, 1e-6f, ya, N);
    pz_ref_rmsnorm(1, N, xh, PZ_BF16, N, wl, 1e-6f, yb, N);
    CHECK(memcmp(ya, yb, sizeof ya) == 0);
  }
  /* eps enters under the root: [1,1,1,1], eps 3 -> inv = 1/sqrt(4) = 0.5 */
  float one[4] = {1, 1, 1, 1};
  CHECK(pz_ref_rms_inv(one, 4, 3.f) == 0.5f);
}

static void test_ar_rmsnorm(void) {
  /* 2 ranks, m=2, H=4: residual_out = residual + p0 + p1 */
  float p0[8] = {1, 0, 0, 0, 1, 1, 1, 1}, p1[8] = {0, 1, 1, 1, 0, -2, 0, -2};
  float res[8] = {1, 1, 1, 1, 0, 0, 0, 0};
  const float *parts[2] = {p0, p1};
  pz_bf16 w[4] = {B(1), B(1), B(1), B(1)};
  pz_bf16 xn[8];
  pz_ref_ar_rmsnorm(2, parts, 4, res, res, 4, w, 0.f, 2, 4, xn, 4); /* in place */
  float want_r[8] = {2, 2, 2, 2, 1, -1, 1, -1};
  for (int i = 0; i < 8; i++) CHECK(res[i] == want_r[i]);
  float want_x[8] = {1, 1, 1, 1, 1, -1, 1, -1};
  for (int i = 0; i < 8; i++) CHECK(xn[i] == B(want_x[i]));
  /* NULL residual: residual_out = Σ partials */
  float r2[8];
  pz_ref_ar_rmsnorm(2, parts, 4, NULL, r2, 4, w, 0.f, 2, 4, xn, 4);
  for (int i = 0; i < 8; i++) CHECK(r2[i] == p0[i] + p1[i]);
  /* composition: equals plain RMSNorm of the summed residual */
  pz_bf16 xn2[8];
  pz_ref_rmsnorm(2, 4, r2, PZ_F32, 4, w, 0.f, xn2, 4);
  CHECK(memcmp(xn, xn2, sizeof xn) == 0);
}

static void test_vocab(void) {
  /* vocab 5 over 2 ranks of 3 rows (last row of rank 1 is padding), H = 2 */
  pz_bf16 W0[6] = {B(0), B(0.5f), B(1), B(1.5f), B(2), B(2.5f)};
  pz_bf16 W1[6] = {B(3), B(3.5f), B(4), B(4.5f), B(9), B(9)};
  int32_t ids[3] = {1, 4, 3};
  float o0[6], o1[6];
  CHECK_OK(pz_ref_embedding(3, ids, W0, 2, 5, 3, 0, o0, 2));
  CHECK_OK(pz_ref_embedding(3, ids, W1, 2, 5, 3, 1, o1, 2));
  float want0[6] = {1, 1.5f, 0, 0, 0, 0}, want1[6] = {0, 0, 4, 4.5f, 3, 3.5f};
  for (int i = 0; i < 6; i++) { CHECK(o0[i] == want0[i]); CHECK(o1[i] == want1[i]); }
  int32_t bad[1] = {5};
  CHECK_ST(pz_ref_embedding(1, bad, W0, 2, 5, 3, 0, o0, 2), PZ_ERR_INVALID_ARG);
  bad[0] = -1;
  CHECK_ST(pz_ref_embedding(1, bad, W0, 2, 5, 3, 0, o0, 2), PZ_ERR_INVALID_ARG);

  /* argmax: row 0 tie between id 1 (rank 0) and id 4 (rank 1) -> 1; row 1 max in rank 1;
   * row 2: the padding column (id 5) holds the largest value but is skipped; row 3 NaN at id 1 */
  float l0[4 * 3] = {0, 7, 7, -1, 0, 0, 1, 2, 3, 1, NAN, 5};
  float l1[4 * 3] = {7, 7, 1, 9, 8, 0, 0, 4, 99, 6, 6, 6};
  const float *L[2] = {l0, l1};
  int32_t out[4];
  pz_ref_argmax(2, L, 3, 4, 3, 5, out);
  CHECK(out[0] == 1);
  CHECK(out[1] == 3);
  CHECK(out[2] == 4);
  CHECK(out[3] == 1); /* NaN at id 1 wins over 5 (id 2) and 6 (ids 3..) */
  /* all equal -> id 0 */
  float z[3] = {0, 0, 0};
  const float *Z[2] = {z, z};
  pz_ref_argmax(2, Z, 3, 1, 3, 6, out);
  CHECK(out[0] == 0);
}

static void test_rope(void) {
  /* YaRN inv_freq, DeepSeek-V3 rope_scaling (factor 40, orig 4096, beta 32/1, theta 1e4),
   * dim 64. By hand: corr(b) = 64 ln(4096/(2πb)) / (2 ln 1e4): corr(32) = 10.47 -> low 10,
   * corr(1) = 22.51 -> high 23. */
  pz_rope_params rp = {.theta = 10000.f, .factor = 40.f, .original_max_position_embeddings = 4096,
                       .beta_fast = 32.f, .beta_slow = 1.f, .mscale = 1.f, .mscale_all_dim = 1.f};
  float inv[32];
  pz_ref_yarn_inv_freq(&rp, 64, inv);
  for (int i = 0; i < 32; i++) {
    double extra = pow(10000.0, -(2.0 * i) / 64.0);
    double ramp = i <= 10 ? 0.0 : i >= 23 ? 1.0 : (i - 10) / 13.0;
    double want = extra / 40.0 * ramp + extra * (1.0 - ramp);
    CHECK_NEAR(inv[i], want, want * 1e-6);
  }
  CHECK_NEAR(inv[0], 1.0, 0);
  CHECK_NEAR(inv[16], 0.01 * (7.0 / 13.0) + 0.01 / 40.0 * (6.0 / 13.0), 1e-9); /* 1e4^-0.5 = 0.01 */
  CHECK_NEAR(inv[31], pow(10000.0, -62.0 / 64.0) / 40.0, 1e-12);
  /* factor 1: plain RoPE */
  pz_rope_params plain = {.theta = 10000.f, .factor = 1.f};
  pz_ref_yarn_inv_freq(&plain, 4, inv);
  CHECK(inv[0] == 1.0f);
  CHECK_NEAR(inv[1], 0.01, 1e-9);
  /* mscale: 0.1*ms*ln(40)+1 */
  CHECK_NEAR(pz_ref_yarn_get_mscale(40, 0.707), 0.1 * 0.707 * 3.6888794541139363 + 1, 1e-12);
  CHECK(pz_ref_yarn_get_mscale(1, 0.707) == 1.0);
  pz_rope_params lite = rp;
  lite.mscale = 0.707f; lite.mscale_all_dim = 0.707f;
  CHECK(pz_ref_yarn_cos_sin_mscale(&lite) == 1.0f);
  double m = 0.1 * 0.707 * log(40.0) + 1.0;
  CHECK_NEAR(pz_ref_mla_softmax_scale(128, 64, &lite), m * m / sqrt(192.0), 1e-7);
  CHECK_NEAR(pz_ref_mla_softmax_scale(128, 64, &plain), 1 / sqrt(192.0), 1e-8);
  pz_rope_params k2 = rp; k2.mscale = 1.0f; k2.mscale_all_dim = 0.5f; /* cos/sin scale ratio */
  CHECK_NEAR(pz_ref_yarn_cos_sin_mscale(&k2), (0.1 * log(40.0) + 1) / (0.05 * log(40.0) + 1), 1e-6);

  /* RoPE at position 0 with ms 1: the permutation [x0,x2,x1,x3] only */
  float x[4] = {1, 2, 3, 4};
  pz_ref_yarn_inv_freq(&plain, 4, inv);
  pz_ref_rope(x, 4, 0, inv, 1.f);
  CHECK(x[0] == 1 && x[1] == 3 && x[2] == 2 && x[3] == 4);
  /* position 1, plain: pair 0 rotated by 1 rad, pair 1 by 0.01 rad */
  float y[4] = {1, 2, 3, 4};
  pz_ref_rope(y, 4, 1, inv, 1.f);
  CHECK_NEAR(y[0], 1 * cos(1.0) - 2 * sin(1.0), 1e-6);
  CHECK_NEAR(y[2], 2 * cos(1.0) + 1 * sin(1.0), 1e-6);
  CHECK_NEAR(y[1], 3 * cos(0.01) - 4 * sin(0.01), 1e-6);
  CHECK_NEAR(y[3], 4 * cos(0.01) + 3 * sin(0.01), 1e-6);
  /* rotation keeps each pair's norm; ms scales it */
  float z2[4] = {1, 2, 3, 4};
  pz_ref_rope(z2, 4, 7, inv, 0.5f);
  CHECK_NEAR(z2[0] * z2[0] + z2[2] * z2[2], 0.25 * 5, 1e-5);
}

int main(void) {
  test_gemm();
  test_rmsnorm();
  test_ar_rmsnorm();
  test_vocab();
  test_rope();
  TEST_DONE();
}
