/* GQA references (backend/cpu/ref_ops.h) against independent computations written here:
 *  - pz_ref_gqa_attention behind a qkv GEMM (with and without bias) vs a naive double-precision
 *    model (explicit per-head loops, full softmax, RoPE rotate-half from inverse frequencies
 *    computed here, llama3 scaling by transformers' formula, LongRoPE's short / long factors chosen per
 *    position and its attention factor on cos / sin) at contexts 1, 2, 63, 64, 65, 300, heads / kv heads
 *    1, 2, 4, 8, with and without qk-norm, plain, llama3 and LongRoPE RoPE (one batch's rows on both
 *    sides of original_max_position_embeddings), and sliding windows 1, 8, 64, 100 (key t attended when
 *    pos - t < window; the cache rows before the window NaN, so reading one shows); a window the sequence
 *    fits gives full attention's bits;
 *  - the KV append (v exact, k exact where no rotation happens, else within one bf16 ulp of the
 *    double model; nothing else of the cache touched); RoPE at position 0 is the identity;
 *  - o_proj over the bf16 attention output; the accumulate mode = plain + previous contents;
 *  - SiLU-mul vs the formula in double; top-k softmax routing vs hand-computed cases (ties, NaN,
 *    scaling) and vs softmax + renormalisation; MoE without shared experts vs a double SwiGLU;
 *  - argument errors. */
#include "backend/cpu/ref_ops.h"
#include "pz_test.h"
#include <stdint.h>
#include <string.h>

#ifndef M_PI
#define M_PI 3.14159265358979323846
#endif

static pz_bf16 B(float f) { return pz_f32_to_bf16(f); }
static float F(pz_bf16 h) { return pz_bf16_to_f32(h); }

static uint64_t rng = 0x9e3779b97f4a7c15ull;
/* U(-1, 1) from a 64-bit LCG (Knuth's MMIX constants). */
static float rnd(void) {
  rng = rng * 6364136223846793005ull + 1442695040888963407ull;
  return (float)((double)(rng >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

/* Distance in bf16 ulps between two bf16 values of the same sign (large when signs differ). */
static int ulps(pz_bf16 a, pz_bf16 b) {
  if (a == b) return 0;
  if ((a ^ b) & 0x8000) return (a & 0x7fff) + (b & 0x7fff);
  return a > b ? a - b : b - a;
}

/* Inverse frequencies in double: theta^(-2i/d); llama3 (transformers' _compute_llama3_parameters):
 * wavelen = 2π/f; wavelen < orig/high: f; wavelen > orig/low: f/factor; else
 * (1 - s) f/factor + s f with s = (orig/wavelen - low) / (high - low); longrope
 * (_compute_longrope_parameters): theta^(-2i/d) / factor_i, the long factors when use_long. */
static void naive_inv_freq(const pz_rope_params *rp, int d, double *f, bool use_long) {
  for (int i = 0; i < d / 2; i++) {
    double base = pow(rp->theta, -(2.0 * i) / d);
    if (rp->type == PZ_ROPE_LONGROPE) {
      f[i] = base / (use_long ? rp->long_factor[i] : rp->short_factor[i]);
    } else if (rp->type == PZ_ROPE_LLAMA3) {
      double wl = 2 * M_PI / base, orig = (double)rp->original_max_position_embeddings;
      double lo = rp->low_freq_factor, hi = rp->high_freq_factor;
      if (wl < orig / hi) f[i] = base;
      else if (wl > orig / lo) f[i] = base / rp->factor;
      else {
        double s = (orig / wl - lo) / (hi - lo);
        f[i] = (1 - s) * base / rp->factor + s * base;
      }
    } else {
      f[i] = base;
    }
  }
}

/* y = x rotated by rotate-half RoPE at position pos (double), cos and sin scaled by ms. */
static void naive_rope(double *x, int d, int pos, const double *f, double ms) {
  double t[128];
  for (int j = 0; j < d; j++) t[j] = x[j];
  for (int j = 0; j < d / 2; j++) {
    double c = cos(pos * f[j]) * ms, s = sin(pos * f[j]) * ms;
    x[j] = t[j] * c - t[j + d / 2] * s;
    x[j + d / 2] = t[j + d / 2] * c + t[j] * s;
  }
}

static void naive_norm(double *x, int d, const pz_bf16 *w, double eps) {
  double ss = 0;
  for (int j = 0; j < d; j++) ss += x[j] * x[j];
  double inv = 1.0 / sqrt(ss / d + eps);
  for (int j = 0; j < d; j++) x[j] = x[j] * inv * F(w[j]);
}

#define M 2
#define HIN 64
#define MAXCTX 320
#define HSTRIDE ((MAXCTX + 3) * 64) /* kv-head stride of the caches, padded on purpose */

typedef struct gqa_case { int heads, kvh, d, ctx; bool qk_norm, bias, llama3, longrope; int window; } gqa_case;

/* LongRoPE of the cases: long factors from position 40 on (contexts 63-65 put one row on each side),
 * distinct short and long factors, cos / sin scaled by 1.3. */
#define LR_ORIG 40

static int n_k_ulp1 = 0, n_k_total = 0;

static void run_case(const gqa_case *C) {
  const int heads = C->heads, kvh = C->kvh, d = C->d, nq = (heads + 2 * kvh) * d, Hid = heads * d, H2 = 48;
  const int64_t sstride = (int64_t)kvh * HSTRIDE;
  pz_gqa_params p = {.n_heads = heads, .n_kv_heads = kvh, .head_dim = d, .hidden = Hid, .max_ctx = MAXCTX, .eps = 1e-6f,
                     .softmax_scale = (float)(1.0 / sqrt((double)d)),
                     .rope = {.theta = 10000.f, .factor = 1.f, .type = PZ_ROPE_DEFAULT}, .window = C->window};
  if (C->llama3)
    p.rope = (pz_rope_params){.theta = 10000.f, .factor = 8.f, .original_max_position_embeddings = 64,
                              .type = PZ_ROPE_LLAMA3, .low_freq_factor = 1.f, .high_freq_factor = 4.f};
  if (C->longrope) {
    p.rope = (pz_rope_params){.theta = 10000.f, .factor = 4.f, .original_max_position_embeddings = LR_ORIG,
                              .type = PZ_ROPE_LONGROPE, .n_factors = d / 2, .attention_factor = 1.3f};
    for (int j = 0; j < d / 2; j++) {
      p.rope.short_factor[j] = 1.0f + 0.25f * (float)j;
      p.rope.long_factor[j] = 1.5f + 2.0f * (float)j;
    }
  }
  /* inputs: x bf16 [M, HIN], qkv_proj W bf16 [nq, HIN] (+ bias f32 [nq]), norms, caches */
  pz_bf16 *x = malloc(sizeof(pz_bf16) * M * HIN), *W = malloc(sizeof(pz_bf16) * (size_t)nq * HIN);
  float *bias = malloc(sizeof(float) * (size_t)nq), *qkv = malloc(sizeof(float) * (size_t)M * nq);
  pz_bf16 qn[128], kn[128];
  const size_t csz = (size_t)M * sstride;
  pz_bf16 *kc = malloc(sizeof(pz_bf16) * csz), *vc = malloc(sizeof(pz_bf16) * csz);
  pz_bf16 *kc0 = malloc(sizeof(pz_bf16) * csz), *vc0 = malloc(sizeof(pz_bf16) * csz);
  pz_bf16 *eye = calloc((size_t)Hid * Hid, sizeof(pz_bf16)), *ow = malloc(sizeof(pz_bf16) * (size_t)H2 * Hid);
  float *out1 = malloc(sizeof(float) * M * Hid), *out2 = malloc(sizeof(float) * M * H2);
  float *slot = malloc(sizeof(float) * M * (H2 + 7)), *prev = malloc(sizeof(float) * M * (H2 + 7));
  for (int i = 0; i < M * HIN; i++) x[i] = B(rnd());
  for (int r = 0; r < nq; r++)   /* q rows larger: scores of order 1 (a peaked softmax) */
    for (int k = 0; k < HIN; k++) W[r * HIN + k] = B((r < heads * d ? 0.6f : 0.3f) * rnd());
  for (int r = 0; r < nq; r++) bias[r] = 0.5f * rnd();
  for (int j = 0; j < d; j++) { qn[j] = B(1.f + 0.3f * rnd()); kn[j] = B(1.f + 0.3f * rnd()); }
  for (size_t e = 0; e < csz; e++) { kc[e] = B(rnd()); vc[e] = B(rnd()); }
  int32_t pos[M] = {C->ctx - 1, (C->ctx - 1) / 2};
  /* a sliding window: key t of row i is attended when pos[i] - t < window; the rows before are NaN */
  for (int i = 0; i < M && C->window; i++)
    for (int g = 0; g < kvh; g++)
      for (int t = 0; pos[i] - t >= C->window; t++)
        for (int j = 0; j < d; j++) kc[i * sstride + g * HSTRIDE + t * d + j] = vc[i * sstride + g * HSTRIDE + t * d + j] = 0x7fc0;
  memcpy(kc0, kc, sizeof(pz_bf16) * csz);
  memcpy(vc0, vc, sizeof(pz_bf16) * csz);
  for (int j = 0; j < Hid; j++) eye[j * Hid + j] = B(1.f);
  for (int e = 0; e < H2 * Hid; e++) ow[e] = B(0.2f * rnd());

  /* the qkv GEMM (the tested op's input), then attention with o_proj = identity: out1 = bf16(o) */
  pz_ref_gemm(M, nq, HIN, x, HIN, W, HIN, C->bias ? bias : NULL, qkv, nq, 0, true);
  pz_ref_gqa_io io = {.qkv = qkv, .ld_qkv = nq, .q_norm_w = C->qk_norm ? qn : NULL, .k_norm_w = C->qk_norm ? kn : NULL,
                      .o_w = eye, .k_cache = kc, .v_cache = vc, .cache_seq_stride = sstride, .cache_head_stride = HSTRIDE,
                      .pos = pos, .out = out1, .ld_out = Hid, .out_zero_init = true};
  CHECK_OK(pz_ref_gqa_attention(M, &p, &io));

  double f[64], fl[64];
  naive_inv_freq(&p.rope, d, f, false);
  naive_inv_freq(&p.rope, d, fl, true);
  const double ms = C->longrope ? 1.3 : 1.0;
  const int long_from = C->longrope ? LR_ORIG : MAXCTX;
  double maxerr = 0;
  int bad_o = 0;
  for (int i = 0; i < M; i++) {
    /* qkv in double */
    double *y = malloc(sizeof(double) * (size_t)nq);
    for (int r = 0; r < nq; r++) {
      double acc = C->bias ? bias[r] : 0.0;
      for (int k = 0; k < HIN; k++) acc += (double)F(x[i * HIN + k]) * F(W[r * HIN + k]);
      y[r] = acc;
    }
    /* the appended k / v, and nothing else of the cache changed */
    for (int g = 0; g < kvh; g++) {
      const pz_bf16 *kr = kc + i * sstride + g * HSTRIDE + (int64_t)pos[i] * d;
      const pz_bf16 *vr = vc + i * sstride + g * HSTRIDE + (int64_t)pos[i] * d;
      double k[128];
      for (int j = 0; j < d; j++) k[j] = y[(heads + g) * d + j];
      if (C->qk_norm) naive_norm(k, d, kn, p.eps);
      naive_rope(k, d, pos[i], pos[i] >= long_from ? fl : f, ms);
      for (int j = 0; j < d; j++) {
        CHECK(vr[j] == B(qkv[i * nq + (heads + kvh + g) * d + j])); /* v: bf16 of the f32 input, exactly */
        if (!C->qk_norm && pos[i] == 0 && ms == 1.0) CHECK(kr[j] == B(qkv[i * nq + (heads + g) * d + j]));
        int u = ulps(kr[j], B((float)k[j]));
        CHECK(u <= 1);
        n_k_ulp1 += u == 1;
        n_k_total++;
      }
    }
    /* attention per head in double over the cache as it now is (bf16 values) */
    for (int h = 0; h < heads; h++) {
      const int g = h / (heads / kvh);
      double q[128];
      for (int j = 0; j < d; j++) q[j] = y[h * d + j];
      if (C->qk_norm) naive_norm(q, d, qn, p.eps);
      naive_rope(q, d, pos[i], pos[i] >= long_from ? fl : f, ms);
      const pz_bf16 *K = kc + i * sstride + g * HSTRIDE, *V = vc + i * sstride + g * HSTRIDE;
      double sc[MAXCTX], mx = -1e300, sum = 0;
      int t0 = 0; /* the first attended key: pos - t0 < window */
      while (C->window && pos[i] - t0 >= C->window) t0++;
      for (int t = t0; t <= pos[i]; t++) {
        double s = 0;
        for (int j = 0; j < d; j++) s += q[j] * F(K[t * d + j]);
        sc[t] = s / sqrt((double)d);
        if (sc[t] > mx) mx = sc[t];
      }
      for (int t = t0; t <= pos[i]; t++) sum += exp(sc[t] - mx);
      for (int j = 0; j < d; j++) {
        double o = 0;
        for (int t = t0; t <= pos[i]; t++) o += exp(sc[t] - mx) / sum * F(V[t * d + j]);
        /* f32 scores / softmax / sums (error ~1e-5 here), then one bf16 rounding (2^-9 relative) */
        double got = out1[i * Hid + h * d + j], err = fabs(got - o);
        if (!(err <= fabs(o) * (1.0 / 256) + 2e-4)) bad_o++;
        if (err > maxerr) maxerr = err;
        CHECK(got == F(B((float)got))); /* the o_proj input is bf16 */
      }
    }
    free(y);
  }
  if (bad_o) fprintf(stderr, "case heads %d kvh %d d %d ctx %d norm %d bias %d llama3 %d longrope %d window %d: %d outputs "
                     "off, max err %.3g\n", heads, kvh, d, C->ctx, C->qk_norm, C->bias, C->llama3, C->longrope, C->window,
                     bad_o, maxerr);
  CHECK(bad_o == 0);
  /* every cache entry other than the appended ones is untouched */
  int untouched = 1;
  for (int i = 0; i < M; i++)
    for (int g = 0; g < kvh; g++)
      for (int t = 0; t < MAXCTX + 3; t++) {
        if (t == pos[i]) continue;
        size_t at = (size_t)(i * sstride + g * HSTRIDE + t * d);
        if (memcmp(kc + at, kc0 + at, sizeof(pz_bf16) * (size_t)d) || memcmp(vc + at, vc0 + at, sizeof(pz_bf16) * (size_t)d))
          untouched = 0;
      }
  CHECK(untouched);

  /* o_proj: the same inputs with a real W [H2, heads*d] give o · Wᵀ over the bf16 o of out1 */
  io.o_w = ow;
  io.out = out2;
  io.ld_out = H2;
  p.hidden = H2;
  CHECK_OK(pz_ref_gqa_attention(M, &p, &io));
  for (int i = 0; i < M; i++)
    for (int n = 0; n < H2; n++) {
      double y = 0, mag = 0;
      for (int k = 0; k < Hid; k++) {
        y += (double)out1[i * Hid + k] * F(ow[n * Hid + k]);
        mag += fabs((double)out1[i * Hid + k] * F(ow[n * Hid + k]));
      }
      CHECK_NEAR(out2[i * H2 + n], y, 1e-6 * mag + 1e-30);
    }
  /* accumulate mode into a strided slot (row stride H2 + 7): prev + plain, bit for bit
   * (k = heads*d < 2048: one split, so the GEMM adds its one partial onto prev) */
  for (int e = 0; e < M * (H2 + 7); e++) slot[e] = prev[e] = rnd();
  io.out = slot;
  io.ld_out = H2 + 7;
  io.out_zero_init = false;
  CHECK_OK(pz_ref_gqa_attention(M, &p, &io));
  int same = 1;
  for (int i = 0; i < M; i++)
    for (int n = 0; n < H2 + 7; n++) {
      float want = n < H2 ? prev[i * (H2 + 7) + n] + out2[i * H2 + n] : prev[i * (H2 + 7) + n];
      if (memcmp(&want, &slot[i * (H2 + 7) + n], 4)) same = 0;
    }
  CHECK(same);
  free(x); free(W); free(bias); free(qkv); free(kc); free(vc); free(kc0); free(vc0); free(eye); free(ow);
  free(out1); free(out2); free(slot); free(prev);
}

static void test_attention(void) {
  static const int ctxs[] = {1, 2, 63, 64, 65, 300};
  static const int hk[4][2] = {{4, 4}, {4, 2}, {8, 2}, {8, 1}}; /* ratios 1, 2, 4, 8 */
  static const int dims[] = {16, 32, 64};
  int n = 0;
  for (int c = 0; c < 6; c++)
    for (int r = 0; r < 4; r++)
      for (int t = 0; t < 8; t++, n++) {
        gqa_case C = {.heads = hk[r][0], .kvh = hk[r][1], .d = dims[n % 3], .ctx = ctxs[c],
                      .qk_norm = t & 1, .bias = (t >> 1) & 1, .llama3 = (t >> 2) & 1};
        run_case(&C);
      }
  for (int c = 0; c < 6; c++) /* LongRoPE */
    for (int r = 0; r < 4; r++)
      for (int t = 0; t < 4; t++, n++) {
        gqa_case C = {.heads = hk[r][0], .kvh = hk[r][1], .d = dims[(t + r) % 3], .ctx = ctxs[c], .qk_norm = t & 1,
                      .bias = (t >> 1) & 1, .longrope = true};
        run_case(&C);
      }
  /* sliding windows: 1 (the token alone), 8, 64 (a tile), 100; rows inside, at and past each */
  static const int wins[] = {1, 8, 64, 100};
  for (int c = 0; c < 6; c++)
    for (int w = 0; w < 4; w++, n++) {
      gqa_case C = {.heads = hk[(c + w) % 4][0], .kvh = hk[(c + w) % 4][1], .d = dims[n % 3], .ctx = ctxs[c],
                    .qk_norm = w & 1, .bias = c & 1, .llama3 = (w >> 1) & 1, .window = wins[w]};
      run_case(&C);
    }
  printf("attention: %d cases; appended k within 1 bf16 ulp of the double model, %d of %d one ulp off\n", n, n_k_ulp1,
         n_k_total);
  CHECK(n_k_ulp1 * 20 < n_k_total); /* rounding-boundary cases only */
}

/* A window the row fits (pos + 1 <= window: nothing cut) gives full attention's output bit for bit; one position
 * less (window = pos) gives another output. */
static void test_window_identity(void) {
  enum { D = 32, HQ = 4, KV = 2, CTX = 80, NQ = (HQ + 2 * KV) * D, HD = HQ * D };
  const int64_t ss = (int64_t)KV * CTX * D;
  static float out[4][M * HD];
  float *qkv = malloc(sizeof(float) * M * NQ);
  pz_bf16 *c0 = malloc(sizeof(pz_bf16) * (size_t)(M * ss) * 2), *kc = malloc(sizeof(pz_bf16) * (size_t)(M * ss) * 2);
  pz_bf16 *eye = calloc(HD * HD, sizeof(pz_bf16));
  for (int j = 0; j < HD; j++) eye[j * HD + j] = B(1.f);
  for (int e = 0; e < M * NQ; e++) qkv[e] = rnd();
  for (int64_t e = 0; e < 2 * M * ss; e++) c0[e] = B(rnd());
  int32_t pos[M] = {CTX - 1, 40};
  static const int64_t wins[4] = {0, CTX, CTX + 1000, CTX - 1}; /* full, fits row 0 exactly, larger, cuts row 0 */
  for (int k = 0; k < 4; k++) {
    pz_gqa_params p = {.n_heads = HQ, .n_kv_heads = KV, .head_dim = D, .hidden = HD, .max_ctx = CTX, .eps = 1e-6f,
                       .softmax_scale = (float)(1.0 / sqrt((double)D)), .rope = {.theta = 10000.f, .factor = 1.f},
                       .window = wins[k]};
    memcpy(kc, c0, sizeof(pz_bf16) * (size_t)(M * ss) * 2);
    pz_ref_gqa_io io = {.qkv = qkv, .ld_qkv = NQ, .o_w = eye, .k_cache = kc, .v_cache = kc + M * ss,
                        .cache_seq_stride = ss, .cache_head_stride = CTX * D, .pos = pos, .out = out[k], .ld_out = HD,
                        .out_zero_init = true};
    CHECK_OK(pz_ref_gqa_attention(M, &p, &io));
  }
  CHECK(!memcmp(out[1], out[0], sizeof out[0]) && !memcmp(out[2], out[0], sizeof out[0]));
  CHECK(memcmp(out[3], out[0], sizeof(float) * HD) != 0);             /* row 0 (pos 79) loses position 0 */
  CHECK(!memcmp(out[3] + HD, out[0] + HD, sizeof(float) * HD));      /* row 1 (pos 40) fits window 79 */
  free(qkv); free(c0); free(kc); free(eye);
}

static void test_rope(void) {
  float inv[32], x[64], x0[64];
  pz_rope_params rp = {.theta = 500000.f, .factor = 8.f, .original_max_position_embeddings = 8192, .type = PZ_ROPE_LLAMA3,
                       .low_freq_factor = 1.f, .high_freq_factor = 4.f};
  pz_rope_inv_freq(&rp, 64, inv);
  for (int j = 0; j < 64; j++) x[j] = x0[j] = 3.f * rnd();
  pz_ref_rope_half(x, 64, 0, inv, 1.f);
  CHECK(memcmp(x, x0, sizeof x) == 0); /* position 0: the identity, bit for bit */
  double f[32], y[64];
  naive_inv_freq(&rp, 64, f, false);
  for (int j = 0; j < 32; j++) CHECK_NEAR(inv[j], f[j], 1e-7 * f[j]);
  for (int pos = 1; pos < 5000; pos += 1237) {
    memcpy(x, x0, sizeof x);
    for (int j = 0; j < 64; j++) y[j] = x0[j];
    pz_ref_rope_half(x, 64, pos, inv, 1.f);
    naive_rope(y, 64, pos, f, 1.0);
    for (int j = 0; j < 64; j++) CHECK_NEAR(x[j], y[j], 3e-3); /* f32 angle of up to 5000 rad: ~5e-4 rad */
  }
  /* norm preserved (a rotation) in every pair */
  memcpy(x, x0, sizeof x);
  pz_ref_rope_half(x, 64, 777, inv, 1.f);
  for (int j = 0; j < 32; j++)
    CHECK_NEAR((double)x[j] * x[j] + (double)x[j + 32] * x[j + 32], (double)x0[j] * x0[j] + (double)x0[j + 32] * x0[j + 32], 1e-4);
  rp.type = PZ_ROPE_DEFAULT;
  CHECK(pz_ref_gqa_rope_mscale(&rp) == 1.f);
  CHECK(pz_rope_long_from(&rp) == INT32_MAX);
  /* LongRoPE: the multiplier is attention_factor; the long table starts at original_max_position_embeddings */
  rp.type = PZ_ROPE_LONGROPE;
  rp.attention_factor = 1.19f;
  CHECK(pz_ref_gqa_rope_mscale(&rp) == 1.19f && pz_rope_long_from(&rp) == 8192);
}

static void test_errors(void) {
  float qkv[3 * 2 * 16] = {0}, out[2 * 16];
  pz_bf16 c[2 * 1 * 8 * 16] = {0}, w[16 * 32] = {0}, nw[16] = {0};
  int32_t pos[2] = {0, 8};
  pz_gqa_params p = {.n_heads = 1, .n_kv_heads = 1, .head_dim = 16, .hidden = 16, .max_ctx = 8, .eps = 1e-6f,
                     .softmax_scale = 0.25f, .rope = {.theta = 10000.f}};
  pz_ref_gqa_io io = {.qkv = qkv, .ld_qkv = 48, .o_w = w, .k_cache = c, .v_cache = c, .cache_seq_stride = 128,
                      .cache_head_stride = 128, .pos = pos, .out = out, .ld_out = 16, .out_zero_init = true};
  CHECK_ST(pz_ref_gqa_attention(2, &p, &io), PZ_ERR_INVALID_ARG); /* pos 8 == max_ctx */
  pos[1] = 7;
  CHECK_OK(pz_ref_gqa_attention(2, &p, &io));
  io.q_norm_w = nw;
  CHECK_ST(pz_ref_gqa_attention(2, &p, &io), PZ_ERR_INVALID_ARG); /* q_norm without k_norm */
  io.q_norm_w = NULL;
  p.head_dim = 15;
  CHECK_ST(pz_ref_gqa_attention(2, &p, &io), PZ_ERR_SHAPE);
  p.head_dim = 16;
  p.n_heads = 3;
  p.n_kv_heads = 2;
  CHECK_ST(pz_ref_gqa_attention(2, &p, &io), PZ_ERR_SHAPE);
  p.n_heads = 1;
  p.n_kv_heads = 1;
  p.rope = (pz_rope_params){.theta = 10000.f, .original_max_position_embeddings = 4, .type = PZ_ROPE_LONGROPE,
                            .n_factors = 7, .attention_factor = 1.f}; /* 8 pairs of head_dim 16 */
  for (int j = 0; j < 8; j++) p.rope.short_factor[j] = p.rope.long_factor[j] = 1.f;
  CHECK_ST(pz_ref_gqa_attention(2, &p, &io), PZ_ERR_SHAPE);
  p.rope.n_factors = 8;
  CHECK_OK(pz_ref_gqa_attention(2, &p, &io)); /* factors 1, attention factor 1: plain RoPE */
  p.rope = (pz_rope_params){.theta = 10000.f};
  p.n_kv_heads = 1;
  p.window = -1;
  CHECK_ST(pz_ref_gqa_attention(2, &p, &io), PZ_ERR_INVALID_ARG);
  p.window = 0;
  io.k_cache = NULL;
  CHECK_ST(pz_ref_gqa_attention(2, &p, &io), PZ_ERR_INVALID_ARG);
  CHECK_OK(pz_ref_gqa_attention(0, &p, &io)); /* no rows: nothing to do */
}

static void test_silu_mul(void) {
  enum { R = 3, I = 40, LDG = 2 * I + 5, LDA = I + 3 };
  float gu[R * LDG];
  pz_bf16 act[R * LDA];
  for (int e = 0; e < R * LDG; e++) gu[e] = 6.f * rnd();
  gu[0] = 0.f;        /* silu(0) * u = 0 */
  gu[1] = 30.f;       /* silu(30) = 30 (1 + e^-30 rounds to 1) */
  for (int e = 0; e < R * LDA; e++) act[e] = 0x7fc0;
  pz_ref_silu_mul(R, I, gu, LDG, act, LDA);
  int off1 = 0;
  for (int i = 0; i < R; i++)
    for (int j = 0; j < I; j++) {
      double g = gu[i * LDG + j], u = gu[i * LDG + I + j];
      double want = g / (1.0 + exp(-g)) * u;
      int d = ulps(act[i * LDA + j], B((float)want));
      CHECK(d <= 1);
      off1 += d;
    }
  CHECK(off1 <= 2);
  CHECK(act[0] == B(0.f) || act[0] == B(-0.f));
  CHECK(act[1] == B(30.f * gu[I + 1]));
  for (int i = 0; i < R; i++)
    for (int j = I; j < LDA; j++) CHECK(act[i * LDA + j] == 0x7fc0); /* padding untouched */
}

static void test_topk_softmax(void) {
  pz_moe_params p = {.n_experts = 4, .top_k = 2, .n_group = 1, .topk_group = 1, .scoring = PZ_SCORE_TOPK_SOFTMAX,
                     .topk_method = PZ_TOPK_GREEDY, .norm_topk_prob = false, .routed_scaling_factor = 1.f};
  int32_t ids[4];
  float w[4];
  /* ties: logits 1, 3, 2, 3 -> experts 1 and 3 (lower index first), equal weights 1/2 exactly */
  float a[4] = {1, 3, 2, 3};
  pz_ref_moe_route(1, a, 4, NULL, &p, ids, w);
  CHECK(ids[0] == 1 && ids[1] == 3);
  CHECK(w[0] == 0.5f && w[1] == 0.5f);
  /* logits 0, ln 2, ln 3, 0: top-2 = 2, 1 with softmax over (ln 3, ln 2) = 3/5, 2/5 */
  float b[4] = {0, logf(2), logf(3), 0};
  pz_ref_moe_route(1, b, 4, NULL, &p, ids, w);
  CHECK(ids[0] == 2 && ids[1] == 1);
  CHECK_NEAR(w[0], 0.6, 1e-6);
  CHECK_NEAR(w[1], 0.4, 1e-6);
  /* norm_topk_prob changes nothing; routed_scaling_factor multiplies */
  float w2[4];
  p.norm_topk_prob = true;
  pz_ref_moe_route(1, b, 4, NULL, &p, ids, w2);
  CHECK(memcmp(w, w2, 2 * sizeof(float)) == 0);
  p.routed_scaling_factor = 2.f;
  pz_ref_moe_route(1, b, 4, NULL, &p, ids, w2);
  CHECK(w2[0] == 2 * w[0] && w2[1] == 2 * w[1]);
  p.routed_scaling_factor = 1.f;
  /* top-1: weight 1 exactly; top-3 of ln 1..4: 4/9, 3/9, 2/9 */
  float c[4] = {0, logf(2), logf(3), logf(4)};
  p.top_k = 1;
  pz_ref_moe_route(1, c, 4, NULL, &p, ids, w);
  CHECK(ids[0] == 3 && w[0] == 1.f);
  p.top_k = 3;
  pz_ref_moe_route(1, c, 4, NULL, &p, ids, w);
  CHECK(ids[0] == 3 && ids[1] == 2 && ids[2] == 1);
  CHECK_NEAR(w[0], 4.0 / 9, 1e-6);
  CHECK_NEAR(w[1], 3.0 / 9, 1e-6);
  CHECK_NEAR(w[2], 2.0 / 9, 1e-6);
  /* NaN ranks last: logits NaN, 1, 0, -1 -> 1, 2 */
  float d[4] = {NAN, 1, 0, -1};
  p.top_k = 2;
  pz_ref_moe_route(1, d, 4, NULL, &p, ids, w);
  CHECK(ids[0] == 1 && ids[1] == 2);
  CHECK_NEAR(w[0], 1.0 / (1.0 + exp(-1.0)), 1e-6);
  /* equals Mixtral's softmax over all E, top-k, renormalise (SOFTMAX + norm_topk_prob) on rows
   * without ties */
  enum { R = 16, E = 8 };
  float lg[R * E];
  int32_t i1[R * 2], i2[R * 2];
  float w1[R * 2], wb[R * 2];
  for (int e = 0; e < R * E; e++) lg[e] = 4.f * rnd();
  p.n_experts = E;
  pz_ref_moe_route(R, lg, E, NULL, &p, i1, w1);
  pz_moe_params q = p;
  q.scoring = PZ_SCORE_SOFTMAX;
  q.norm_topk_prob = true;
  pz_ref_moe_route(R, lg, E, NULL, &q, i2, wb);
  CHECK(memcmp(i1, i2, sizeof i1) == 0);
  for (int t = 0; t < R * 2; t++) CHECK_NEAR(w1[t], wb[t], 5e-7);
  for (int r = 0; r < R; r++) CHECK_NEAR((double)w1[2 * r] + w1[2 * r + 1], 1.0, 3e-7);
}

/* Qwen3-MoE's block: softmax + norm_topk_prob, routed_scaling_factor 1, no shared experts:
 * out = Σ_t w_t E_t(x), E = SwiGLU with bf16 h, computed here in double. */
static void test_moe_no_shared(void) {
  enum { R = 3, H = 16, I = 8, E = 4, K = 2 };
  pz_bf16 x[R * H], wg[E * I * H], wu[E * I * H], wd[E * H * I];
  float lg[R * E], out[R * H];
  for (int e = 0; e < R * H; e++) x[e] = B(rnd());
  for (int e = 0; e < E * I * H; e++) { wg[e] = B(0.5f * rnd()); wu[e] = B(0.5f * rnd()); wd[e] = B(0.5f * rnd()); }
  for (int e = 0; e < R * E; e++) lg[e] = 2.f * rnd();
  pz_moe_params p = {.n_experts = E, .top_k = K, .n_group = 1, .topk_group = 1, .scoring = PZ_SCORE_SOFTMAX,
                     .topk_method = PZ_TOPK_GREEDY, .norm_topk_prob = true, .routed_scaling_factor = 1.f, .inter = I,
                     .shared_inter = 0};
  int32_t ids[R * K];
  float w[R * K];
  CHECK_OK(pz_ref_moe(R, H, x, H, lg, E, NULL, &p, wg, wu, wd, NULL, NULL, NULL, out, H, ids, w));
  for (int r = 0; r < R; r++) {
    /* routing by hand: the two largest logits, weights renormalised softmax probabilities */
    int a = 0;
    for (int e = 1; e < E; e++) if (lg[r * E + e] > lg[r * E + a]) a = e;
    int b = a == 0 ? 1 : 0;
    for (int e = 0; e < E; e++) if (e != a && lg[r * E + e] > lg[r * E + b]) b = e;
    CHECK(ids[r * K] == a && ids[r * K + 1] == b);
    double ea = exp(lg[r * E + a]), eb = exp(lg[r * E + b]);
    CHECK_NEAR(w[r * K], ea / (ea + eb), 1e-6);
    for (int n = 0; n < H; n++) {
      double y = 0, mag = 0;
      for (int t = 0; t < K; t++) {
        int e = ids[r * K + t];
        double acc = 0;
        for (int j = 0; j < I; j++) {
          double g = 0, u = 0;
          for (int k = 0; k < H; k++) {
            g += (double)F(x[r * H + k]) * F(wg[(e * I + j) * H + k]);
            u += (double)F(x[r * H + k]) * F(wu[(e * I + j) * H + k]);
          }
          double h = g / (1 + exp(-g)) * u;
          acc += h * F(wd[(e * H + n) * I + j]);
          mag += fabs(h * F(wd[(e * H + n) * I + j]));
        }
        y += w[r * K + t] * acc;
      }
      CHECK_NEAR(out[r * H + n], y, mag / 128 + 1e-6); /* h is rounded to bf16 (2^-9 relative) */
    }
  }
}

int main(void) {
  test_rope();
  test_attention();
  test_window_identity();
  test_errors();
  test_silu_mul();
  test_topk_softmax();
  test_moe_no_shared();
  TEST_DONE();
}
