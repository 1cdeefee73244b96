/* CPU reference ops, part 1: split-K GEMM, RMSNorm, AR + residual + RMSNorm, embedding,
 * argmax, YaRN RoPE. Formulas and their sources are documented in ref_ops.h. */
#include "backend/cpu/ref_ops.h"
#include "core/pool.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef M_PI
#define M_PI 3.14159265358979323846
#endif

/* ---------------------------------------------------------------- threads */

static pz_cpu_pool *ref_pool = NULL;

pz_status pz_ref_set_threads(int threads) {
  if (threads == 0) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    threads = n > 0 ? (int)(n > 64 ? 64 : n) : 1;
  }
  if (ref_pool) {
    if (pz_cpu_pool_current() == ref_pool) pz_cpu_pool_bind(NULL);
    pz_cpu_pool_free(ref_pool);
    ref_pool = NULL;
  }
  if (threads <= 1) return PZ_OK;
  PZ_CHECK(pz_cpu_pool_create(threads, &ref_pool));
  pz_cpu_pool_bind(ref_pool);
  return PZ_OK;
}

/* ---------------------------------------------------------------- GEMM */

int pz_ref_default_split(int64_t k) {
  if (k < 2048) return 1;
  int64_t s = k / 1024;
  return (int)(s > 8 ? 8 : s);
}

int64_t pz_ref_split_chunk(int64_t k, int split) {
  if (split <= 0) split = pz_ref_default_split(k);
  if (k < 1) return 1;
  int64_t c = (k + split - 1) / split;
  c = (c + 63) / 64 * 64;
  return c;
}

typedef struct gemm_job {
  int64_t m, n, k, lda, ldw, ldc, chunk;
  const pz_bf16 *A, *W;
  const float *Wf;          /* f32 weights instead of W (pz_ref_gemm_wf32), else NULL */
  const float *bias;
  float *C;
  bool zero_init;
} gemm_job;

/* Element (j, kk) of W as f32, whichever its storage. */
static inline float wval(const gemm_job *g, int64_t j, int64_t kk) {
  return g->Wf ? g->Wf[j * g->ldw + kk] : pz_bf16_to_f32(g->W[j * g->ldw + kk]);
}

#define BF(x) pz_bf16_to_f32(x)

/* Columns [j0, j1) (j0 a multiple of PZ_GEMM_NB): PZ_GEMM_NB columns at a time. The block's
 * W rows are converted once into an f32 panel P[kk][c] (k-major), then every row i keeps one
 * fp32 accumulator per column, each updated acc += a*w in k order: the compiler may run the
 * PZ_GEMM_NB independent accumulators as SIMD lanes (separate multiply and add, so the
 * rounding is the scalar one), never reassociating within a column. */
#define PZ_GEMM_NB 16
typedef float pz_v4 __attribute__((vector_size(16)));
static void gemm_cols(void *va, int64_t j0, int64_t j1) {
  const gemm_job *g = va;
  const int64_t k = g->k;
  float *panel = malloc(sizeof(float) * (size_t)(PZ_GEMM_NB * (g->chunk < k ? g->chunk : k)));
  if (!panel) { /* out of memory: the same arithmetic, one column at a time */
    for (int64_t j = j0; j < j1; j++)
      for (int64_t i = 0; i < g->m; i++)
        for (int64_t k0 = 0; k0 < k; k0 += g->chunk) {
          int64_t k1 = k0 + g->chunk < k ? k0 + g->chunk : k;
          float acc = 0.0f;
          for (int64_t kk = k0; kk < k1; kk++) acc += BF(g->A[i * g->lda + kk]) * wval(g, j, kk);
          if (k0 == 0 && g->bias) acc += g->bias[j];
          float *cp = g->C + i * g->ldc + j;
          *cp = ((k0 == 0 && g->zero_init) ? 0.0f : *cp) + acc;
        }
    return;
  }
  for (int64_t j = j0; j < j1; j += PZ_GEMM_NB) {
    int nc = (int)(j1 - j < PZ_GEMM_NB ? j1 - j : PZ_GEMM_NB);
    for (int64_t k0 = 0; k0 < k; k0 += g->chunk) {
      int64_t k1 = k0 + g->chunk < k ? k0 + g->chunk : k, kl = k1 - k0;
      for (int c = 0; c < PZ_GEMM_NB; c++) {
        const int64_t jc = j + (c < nc ? c : 0);
        if (g->Wf) {
          const float *w = g->Wf + jc * g->ldw + k0;
          for (int64_t kk = 0; kk < kl; kk++) panel[kk * PZ_GEMM_NB + c] = w[kk];
        } else {
          const pz_bf16 *w = g->W + jc * g->ldw + k0;
          for (int64_t kk = 0; kk < kl; kk++) panel[kk * PZ_GEMM_NB + c] = BF(w[kk]);
        }
      }
      for (int64_t i = 0; i < g->m; i++) {
        const pz_bf16 *a = g->A + i * g->lda + k0;
        /* 16 accumulators as 4 vectors of 4 lanes: lane-wise multiply then add. */
        pz_v4 acc0 = {0}, acc1 = {0}, acc2 = {0}, acc3 = {0};
        for (int64_t kk = 0; kk < kl; kk++) {
          float s = BF(a[kk]);
          pz_v4 av = {s, s, s, s};
          const float *pr = panel + kk * PZ_GEMM_NB;
          pz_v4 p0, p1, p2, p3;
          memcpy(&p0, pr, 16); memcpy(&p1, pr + 4, 16); memcpy(&p2, pr + 8, 16); memcpy(&p3, pr + 12, 16);
          acc0 += av * p0; acc1 += av * p1; acc2 += av * p2; acc3 += av * p3;
        }
        float acc[PZ_GEMM_NB];
        memcpy(acc, &acc0, 16); memcpy(acc + 4, &acc1, 16); memcpy(acc + 8, &acc2, 16); memcpy(acc + 12, &acc3, 16);
        float *crow = g->C + i * g->ldc + j;
        for (int c = 0; c < nc; c++) {
          float part = acc[c];
          if (k0 == 0 && g->bias) part += g->bias[j + c];
          /* slice 0 starts from 0 (zero_init) or from C's content; later slices add on */
          float base = (k0 == 0 && g->zero_init) ? 0.0f : crow[c];
          crow[c] = base + part;
        }
      }
    }
  }
  free(panel);
}

static void gemm_blocks(void *va, int64_t b0, int64_t b1) {
  const gemm_job *g = va;
  int64_t j1 = b1 * PZ_GEMM_NB < g->n ? b1 * PZ_GEMM_NB : g->n;
  gemm_cols(va, b0 * PZ_GEMM_NB, j1);
}

static void gemm_run(gemm_job *g) {
  const int64_t m = g->m, n = g->n, k = g->k;
  if (m <= 0 || n <= 0) return;
  if (k <= 0) { /* no K: C = bias (or 0) / C += bias */
    for (int64_t i = 0; i < m; i++)
      for (int64_t j = 0; j < n; j++) {
        float base = g->zero_init ? 0.0f : g->C[i * g->ldc + j];
        g->C[i * g->ldc + j] = base + (g->bias ? g->bias[j] : 0.0f);
      }
    return;
  }
  /* Parallel over column blocks so each thread's range stays block-aligned; small GEMMs
   * (< 2^17 multiply-adds, ~30 µs) stay on the calling thread, where waking workers costs more. */
  int64_t nb = (n + PZ_GEMM_NB - 1) / PZ_GEMM_NB;
  if (m * n * k < ((int64_t)1 << 17)) gemm_blocks(g, 0, nb);
  else pz_par_for(nb, 1, gemm_blocks, g);
}

void pz_ref_gemm(int64_t m, int64_t n, int64_t k, const pz_bf16 *A, int64_t lda,
                 const pz_bf16 *W, int64_t ldw, const float *bias, float *C, int64_t ldc,
                 int split_k, bool zero_init) {
  gemm_job g = {.m = m, .n = n, .k = k, .lda = lda, .ldw = ldw, .ldc = ldc,
                .chunk = pz_ref_split_chunk(k, split_k), .A = A, .W = W, .bias = bias,
                .C = C, .zero_init = zero_init};
  gemm_run(&g);
}

void pz_ref_gemm_wf32(int64_t m, int64_t n, int64_t k, const pz_bf16 *A, int64_t lda,
                      const float *W, int64_t ldw, const float *bias, float *C, int64_t ldc,
                      int split_k, bool zero_init) {
  gemm_job g = {.m = m, .n = n, .k = k, .lda = lda, .ldw = ldw, .ldc = ldc,
                .chunk = pz_ref_split_chunk(k, split_k), .A = A, .Wf = W, .bias = bias,
                .C = C, .zero_init = zero_init};
  gemm_run(&g);
}

/* ---------------------------------------------------------------- RMSNorm */

float pz_ref_rms_inv(const float *r, int64_t n, float eps) {
  float ss = 0.0f;
  for (int64_t j = 0; j < n; j++) ss += r[j] * r[j];
  float mean = ss / (float)n;
  return 1.0f / sqrtf(mean + eps);
}

static void norm_row(const float *r, int64_t n, const pz_bf16 *w, float eps, pz_bf16 *y) {
  float inv = pz_ref_rms_inv(r, n, eps);
  for (int64_t j = 0; j < n; j++) y[j] = pz_f32_to_bf16((r[j] * inv) * BF(w[j]));
}

void pz_ref_rmsnorm(int64_t m, int64_t n, const void *x, pz_dtype x_dtype, int64_t ldx,
                    const pz_bf16 *w, float eps, pz_bf16 *y, int64_t ldy) {
  if (x_dtype == PZ_F32) {
    for (int64_t i = 0; i < m; i++) norm_row((const float *)x + i * ldx, n, w, eps, y + i * ldy);
  } else if (x_dtype == PZ_BF16) {
    float buf[1024];
    for (int64_t i = 0; i < m; i++) {
      const pz_bf16 *xr = (const pz_bf16 *)x + i * ldx;
      /* Row in chunks is not possible (the norm needs the whole row): convert in place of y's
       * lifetime using a stack buffer when it fits, else two passes reading x directly. */
      if (n <= 1024) {
        for (int64_t j = 0; j < n; j++) buf[j] = BF(xr[j]);
        norm_row(buf, n, w, eps, y + i * ldy);
      } else {
        float ss = 0.0f;
        for (int64_t j = 0; j < n; j++) ss += BF(xr[j]) * BF(xr[j]);
        float inv = 1.0f / sqrtf(ss / (float)n + eps);
        for (int64_t j = 0; j < n; j++) y[i * ldy + j] = pz_f32_to_bf16((BF(xr[j]) * inv) * BF(w[j]));
      }
    }
  }
}

void pz_ref_ar_rmsnorm(int tp, const float *const *partials, int64_t ld_partial,
                       const float *residual_in, float *residual_out, int64_t ld_res,
                       const pz_bf16 *w, float eps, int64_t m, int64_t H,
                       pz_bf16 *x_norm, int64_t ld_x) {
  for (int64_t i = 0; i < m; i++) {
    float *ro = residual_out + i * ld_res;
    const float *ri = residual_in ? residual_in + i * ld_res : NULL;
    for (int64_t j = 0; j < H; j++) {
      float s = partials[0][i * ld_partial + j];
      for (int r = 1; r < tp; r++) s += partials[r][i * ld_partial + j];
      ro[j] = ri ? ri[j] + s : s;
    }
    norm_row(ro, H, w, eps, x_norm + i * ld_x);
  }
}

/* ---------------------------------------------------------------- vocab-parallel ops */

pz_status pz_ref_embedding(int64_t m, const int32_t *ids, const pz_bf16 *W, int64_t H,
                           int64_t vocab_size, int64_t vocab_per_rank, int rank,
                           float *out, int64_t ld_out) {
  int64_t lo = (int64_t)rank * vocab_per_rank;
  for (int64_t i = 0; i < m; i++) {
    int64_t id = ids[i];
    if (id < 0 || id >= vocab_size)
      return pz_error(PZ_ERR_INVALID_ARG, "embedding: token id %lld of row %lld is outside [0, %lld)",
                      (long long)id, (long long)i, (long long)vocab_size);
    float *o = out + i * ld_out;
    if (id >= lo && id < lo + vocab_per_rank) {
      const pz_bf16 *wr = W + (id - lo) * H;
      for (int64_t j = 0; j < H; j++) o[j] = BF(wr[j]);
    } else {
      for (int64_t j = 0; j < H; j++) o[j] = 0.0f;
    }
  }
  return PZ_OK;
}

void pz_ref_argmax(int tp, const float *const *logits, int64_t ld, int64_t m,
                   int64_t vocab_per_rank, int64_t vocab_size, int32_t *out_ids) {
  for (int64_t i = 0; i < m; i++) {
    int64_t best = -1;
    float bv = 0.0f;
    int found_nan = 0;
    for (int r = 0; r < tp && !found_nan; r++) {
      const float *row = logits[r] + i * ld;
      for (int64_t j = 0; j < vocab_per_rank; j++) {
        int64_t id = (int64_t)r * vocab_per_rank + j;
        if (id >= vocab_size) break;
        float v = row[j];
        if (isnan(v)) { best = id; found_nan = 1; break; }
        if (best < 0 || v > bv) { best = id; bv = v; } /* strict >: the lowest id keeps ties */
      }
    }
    out_ids[i] = (int32_t)(best < 0 ? 0 : best);
  }
}

/* ---------------------------------------------------------------- RoPE / YaRN */

void pz_ref_rope(float *x, int64_t dim, int32_t pos, const float *inv_freq, float ms) {
  int64_t half = dim / 2;
  float tmp[512];
  float *t = tmp;
  if (dim > 512) return; /* rope dims are 64 in every DeepSeek config; callers validate */
  for (int64_t i = 0; i < dim; i++) t[i] = x[i];
  for (int64_t i = 0; i < half; i++) {
    float ang = (float)pos * inv_freq[i];
    float c = (float)cos((double)ang) * ms, s = (float)sin((double)ang) * ms;
    float x0 = t[2 * i], x1 = t[2 * i + 1];
    x[i] = x0 * c - x1 * s;
    x[i + half] = x1 * c + x0 * s;
  }
}
