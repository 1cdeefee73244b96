/* CUDA GQA decode op (src/backend/cuda/gqa.h) against pz_ref_gqa_attention: GQA ratios 1, 2, 4,
 * 8, 16 and 20 (two head tiles), head_dim 16, 32, 64, 96 and 128, qk-norm on and off, default / llama3 / yarn
 * RoPE, partial RoPE (rotary_dim 16 / 24 of 32, 64 of 128: GLM-4.5), LongRoPE (Phi-3-mini-128k's and Phi-4-mini's
 * shapes: short and long factors chosen per row by position, attention factor on cos / sin), contexts 1, 63, 64,
 * 65, 300 and 8192 with mixed lengths in one batch, forced split counts, sliding windows (64, 100, Phi-3-mini's
 * 2047, and windows the context fits, which give full attention's bits), a CUDA graph replayed as positions
 * advance (a sliding layer's window moving between replays; LongRoPE: a row crossing original_max_position_embeddings between replays), the cache append (rows beyond pos are never read
 * or written: NaN sentinels), run-to-run determinism, the oproj_prezero slot set vs unset
 * bit-identical (2 K splits, docs/ARCHITECTURE.md §5), and the argument checks.
 * PZ_TEST_QUICK=1: fewer shapes and batches (for compute-sanitizer). */
#define _POSIX_C_SOURCE 200809L
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "backend/cpu/ref_ops.h"
#include "backend/cuda/gqa.h"
#include "passes/prezero.h"
#include "pz_test.h"

/* Tolerances (gqa.h explains the precision):
 *  - cache: rows other than pos bit-identical; the appended row within one bf16 ulp (the same
 *    f32 operations in the same order; only the device's double cos / sin may differ from the
 *    host's in the last double bit).
 *  - o, the attention output (bf16, read through an identity o_proj, which passes it exactly):
 *    |o_gpu - o_ref| <= ulp(o_ref) + O_ABS with O_ABS = 2^-15 * max|V|: one bf16 ulp for the
 *    output rounding of two pre-rounding values that differ by at most 2^-15 * Σ_t p_t |V_t| <=
 *    2^-15 max|V| (q and p enter the tensor cores as bf16 hi + lo parts, 16 significant bits, and
 *    the sums accumulate in f32; bf16 p alone would err by ~2^-9 max|V| and fail this).
 *  - partial = o · o_wᵀ (random o_w): |gpu - ref| <= Σ_k |W_jk| |o_gpu_k - o_ref_k| + 3 γ_K Σ_k
 *    |W_jk| |o_k|, γ_K = K 2^-24 / (1 - K 2^-24): the o differences carried through the product
 *    plus the worst-case f32 summation error of the CPU's order (γ_K, round to nearest) and of the
 *    GPU's (2 γ_K: tensor-core accumulation may truncate, unit 2^-23) (Higham, Accuracy and
 *    Stability of Numerical Algorithms, §3.1). */
#define VMAX 2.0 /* |V| <= 2: cache rows 1.7 * U(-1, 1), new rows 2 * U(-1, 1) */
#define O_ABS (VMAX / 32768.0)

static uint32_t rng = 4242;
static pz_gemm_ctx *G = NULL;

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
static void remake_G(void) {
  pz_gemm_ctx_destroy(G);
  G = NULL;
  CHECK_OK(pz_gemm_ctx_create(&G));
}
/* Distance in bf16 ulps (sign-magnitude bits mapped to a line). */
static int ulps(pz_bf16 a, pz_bf16 b) {
  int x = (a & 0x8000) ? -(int)(a & 0x7fff) : (int)a, y = (b & 0x8000) ? -(int)(b & 0x7fff) : (int)b;
  return abs(x - y);
}
/* One bf16 ulp at the magnitude of v (the spacing above |v|). */
static double ulp_of(float v) {
  const float a = fabsf(v);
  if (a < 1e-38f) return ldexp(1.0, -133);
  int e;
  frexp(a, &e);
  return ldexp(1.0, e - 8);
}

typedef struct shape {
  const char *name;
  int heads, kvh;
  int64_t d, H;
  int qk_norm;
  pz_rope_params rope;
  int64_t rotary_dim; /* 0: RoPE on all d dims; else the first rotary_dim (GLM-4.5's partial_rotary_factor) */
} shape;

#define ROPE_DEFAULT(th) {.theta = th, .factor = 1, .type = PZ_ROPE_DEFAULT}
static const shape L70_TP1 = {"llama-3.1-70b tp1 (64/8, d128, llama3)", 64, 8, 128, 8192, 0,
                              {.theta = 500000, .factor = 8, .original_max_position_embeddings = 8192,
                               .type = PZ_ROPE_LLAMA3, .low_freq_factor = 1, .high_freq_factor = 4}, 0};
static const shape L70_TP8 = {"llama-3.1-70b tp8 (8/1, d128, llama3)", 8, 1, 128, 8192, 0,
                              {.theta = 500000, .factor = 8, .original_max_position_embeddings = 8192,
                               .type = PZ_ROPE_LLAMA3, .low_freq_factor = 1, .high_freq_factor = 4}, 0};
static const shape Q3_30B = {"qwen3-30b-a3b (32/4, d128, qk-norm)", 32, 4, 128, 2048, 1, ROPE_DEFAULT(1000000), 0};
static const shape MHA64 = {"ratio 1 (4/4, d64)", 4, 4, 64, 512, 0, ROPE_DEFAULT(10000), 0};
static const shape R8D64 = {"ratio 8 (16/2, d64, qk-norm, yarn)", 16, 2, 64, 1024, 1,
                            {.theta = 1000000, .factor = 4, .original_max_position_embeddings = 32768, .beta_fast = 32,
                             .beta_slow = 1, .mscale = 1, .mscale_all_dim = 0, .type = PZ_ROPE_YARN}, 0};
static const shape R2D16 = {"ratio 2 (4/2, d16: tiny_llama)", 4, 2, 16, 64, 0,
                            {.theta = 10000, .factor = 4, .original_max_position_embeddings = 128,
                             .type = PZ_ROPE_LLAMA3, .low_freq_factor = 1, .high_freq_factor = 4}, 0};
static const shape R4D32 = {"ratio 4 (8/2, d32, qk-norm)", 8, 2, 32, 256, 1, ROPE_DEFAULT(10000), 0};
static const shape R16 = {"ratio 16 (32/2, d128, qk-norm)", 32, 2, 128, 1024, 1, ROPE_DEFAULT(1000000), 0};
static const shape R20 = {"ratio 20 (20/1, d128: two head tiles)", 20, 1, 128, 1280, 0, ROPE_DEFAULT(10000), 0};
/* Partial RoPE: GLM-4.5-Air at TP 8 (96/8 heads, d 128, partial_rotary_factor 0.5: 64 rotated dims),
 * and a qk-norm layout rotating 16 of 32 dims (0.5) and 24 of 32 (0.75). */
static const shape GLM_AIR_TP8 = {"glm-4.5-air tp8 (12/1, d128, rotary 64)", 12, 1, 128, 4096, 0,
                                  ROPE_DEFAULT(1000000), 64};
static const shape R4D32P = {"ratio 4 (8/2, d32, qk-norm, rotary 16)", 8, 2, 32, 256, 1, ROPE_DEFAULT(10000), 16};
static const shape R2D32P = {"ratio 2 (4/2, d32, rotary 24, llama3)", 4, 2, 32, 128, 0,
                             {.theta = 10000, .factor = 4, .original_max_position_embeddings = 128,
                              .type = PZ_ROPE_LLAMA3, .low_freq_factor = 1, .high_freq_factor = 4}, 24};
/* head_dim 96 (Phi-3-mini / Phi-3.5-mini: 32 heads, 32 kv heads, hidden 3072): TP 4's 8/8, and a
 * grouped layout with qk-norm and partial RoPE (rotary 64 of 96) over the same kernel instance. */
static const shape PHI3_MINI_TP4 = {"phi-3-mini tp4 (8/8, d96)", 8, 8, 96, 3072, 0, ROPE_DEFAULT(10000), 0};
static const shape R4D96 = {"ratio 4 (8/2, d96, qk-norm, rotary 64)", 8, 2, 96, 768, 1, ROPE_DEFAULT(10000), 64};

/* LongRoPE with 48 factors of each kind (the factors written here are distinct, not the published ones): phi4
 * Phi-4-mini's shape (24 / 8 heads, d 128, partial_rotary_factor 0.75: 96 rotated dims), else Phi-3-mini-128k's
 * at TP 4 (8 / 8 heads, d 96, all rotated), with original_max_position_embeddings `orig`: 240 puts the rows of
 * run_shape's context-300 batch (positions 299, 262, 225) on both sides, 150 makes check_graph's row 0 cross
 * between its replays (100, then 170). */
static shape longrope_shape(bool phi4, int64_t orig) {
  shape s = {phi4 ? "phi-4-mini tp1 (24/8, d128, rotary 96, longrope)" : "phi-3-mini-128k tp4 (8/8, d96, longrope)",
             phi4 ? 24 : 8, 8, phi4 ? 128 : 96, 3072, 0,
             {.theta = 10000, .factor = 32, .original_max_position_embeddings = orig, .type = PZ_ROPE_LONGROPE,
              .n_factors = 48, .attention_factor = 1.19f}, phi4 ? 96 : 0};
  for (int j = 0; j < 48; j++) {
    s.rope.short_factor[j] = 1.0f + 0.05f * (float)j;
    s.rope.long_factor[j] = 1.0f + 1.5f * (float)j;
  }
  return s;
}

/* One layer: params (hidden H, and the identity-o_proj twin of hidden heads*d) and weights. */
typedef struct layer {
  shape s;
  pz_gqa_params p, pid;
  int64_t hd, w;      /* heads*d; qkv row width */
  pz_bf16 *qn, *kn, *ow, *oid;
  pz_bf16 *d_qn, *d_kn, *d_ow, *d_oid;
} layer;

static void layer_make(layer *l, const shape *s, int64_t max_ctx) {
  memset(l, 0, sizeof *l);
  l->s = *s;
  l->hd = s->heads * s->d;
  l->w = (s->heads + 2 * s->kvh) * s->d;
  pz_gqa_params *p = &l->p;
  p->n_heads = s->heads; p->n_kv_heads = s->kvh; p->head_dim = s->d; p->hidden = s->H; p->max_ctx = max_ctx;
  p->eps = 1e-6f;
  p->softmax_scale = (float)(1.0 / sqrt((double)s->d));
  p->rope = s->rope;
  p->rotary_dim = s->rotary_dim;
  l->pid = *p;
  l->pid.hidden = l->hd;
  if (s->qk_norm) {
    l->qn = malloc(sizeof(pz_bf16) * (size_t)s->d);
    l->kn = malloc(sizeof(pz_bf16) * (size_t)s->d);
    for (int64_t j = 0; j < s->d; j++) {
      l->qn[j] = pz_f32_to_bf16(1.0f + 0.3f * uniform());
      l->kn[j] = pz_f32_to_bf16(1.0f + 0.3f * uniform());
    }
    l->d_qn = dev_copy(l->qn, 2 * (size_t)s->d);
    l->d_kn = dev_copy(l->kn, 2 * (size_t)s->d);
  }
  l->ow = malloc(sizeof(pz_bf16) * (size_t)(s->H * l->hd));
  for (int64_t i = 0; i < s->H * l->hd; i++) l->ow[i] = pz_f32_to_bf16(uniform() * 1.7f / sqrtf((float)l->hd));
  l->oid = calloc((size_t)(l->hd * l->hd), sizeof(pz_bf16));
  for (int64_t i = 0; i < l->hd; i++) l->oid[i * l->hd + i] = pz_f32_to_bf16(1.0f);
  l->d_ow = dev_copy(l->ow, 2 * (size_t)(s->H * l->hd));
  l->d_oid = dev_copy(l->oid, 2 * (size_t)(l->hd * l->hd));
}

static void layer_free(layer *l) {
  free(l->qn); free(l->kn); free(l->ow); free(l->oid);
  cudaFree(l->d_qn); cudaFree(l->d_kn); cudaFree(l->d_ow); cudaFree(l->d_oid);
}

/* One step's inputs: qkv, positions, and caches [m, kvh, max_ctx, d] whose rows below `fill`
 * (pos[i] unless given) hold data and whose other rows hold NaN (0xffff), so a read or write
 * beyond what the step may touch shows up; a sliding layer's rows before its window
 * (pz_ref_gqa_first_pos) hold NaN too. */
typedef struct step {
  int m;
  int64_t ctx, seq, head, n;  /* max_ctx; strides (elements); cache elements */
  float *qkv;
  int32_t *pos;
  pz_bf16 *kc, *vc;           /* initial caches */
  float *d_qkv;
  int32_t *d_pos;
  pz_bf16 *d_kc, *d_vc;
} step;

static void step_make(step *st, const layer *l, int m, int64_t ctx, const int32_t *pos, int32_t fill_to) {
  memset(st, 0, sizeof *st);
  st->m = m;
  st->ctx = ctx;
  const int64_t d = l->s.d, kvh = l->s.kvh;
  st->head = ctx * d;
  st->seq = kvh * st->head;
  st->n = m * st->seq;
  st->qkv = malloc(sizeof(float) * (size_t)(m * l->w));
  for (int64_t i = 0; i < m * l->w; i++) st->qkv[i] = 2.0f * uniform();
  st->pos = malloc(sizeof(int32_t) * (size_t)m);
  for (int i = 0; i < m; i++)
    st->pos[i] = pos ? pos[i] : (int32_t)(ctx - 1 - (i * 37) % (ctx / 2 + 1));
  st->kc = malloc(sizeof(pz_bf16) * (size_t)st->n);
  st->vc = malloc(sizeof(pz_bf16) * (size_t)st->n);
  for (int i = 0; i < m; i++) {
    const int64_t f = fill_to > 0 ? fill_to : st->pos[i], t0 = pz_ref_gqa_first_pos(st->pos[i], l->p.window);
    for (int64_t g = 0; g < kvh; g++)
      for (int64_t t = 0; t < ctx; t++)
        for (int64_t j = 0; j < d; j++) {
          const int64_t e = i * st->seq + g * st->head + t * d + j;
          st->kc[e] = t < f && t >= t0 ? pz_f32_to_bf16(1.7f * uniform()) : 0xffff;
          st->vc[e] = t < f && t >= t0 ? pz_f32_to_bf16(1.7f * uniform()) : 0xffff;
        }
  }
  st->d_qkv = dev_copy(st->qkv, sizeof(float) * (size_t)(m * l->w));
  st->d_pos = dev_copy(st->pos, sizeof(int32_t) * (size_t)m);
  st->d_kc = dev_copy(st->kc, sizeof(pz_bf16) * (size_t)st->n);
  st->d_vc = dev_copy(st->vc, sizeof(pz_bf16) * (size_t)st->n);
}

static void step_free(step *st) {
  free(st->qkv); free(st->pos); free(st->kc); free(st->vc);
  cudaFree(st->d_qkv); cudaFree(st->d_pos); cudaFree(st->d_kc); cudaFree(st->d_vc);
}

static pz_gqa_cuda_io gpu_io(const layer *l, const step *st, const pz_bf16 *d_ow, float *d_out, int64_t ld_out,
                             void *ws, size_t ws_bytes) {
  pz_gqa_cuda_io io = {0};
  io.qkv = st->d_qkv; io.ld_qkv = l->w;
  io.q_norm_w = l->d_qn; io.k_norm_w = l->d_kn;
  io.o_w = d_ow;
  io.k_cache = st->d_kc; io.v_cache = st->d_vc;
  io.cache_seq_stride = st->seq; io.cache_head_stride = st->head;
  io.pos = st->d_pos;
  io.out = d_out; io.ld_out = ld_out; io.out_zeroed = false;
  io.workspace = ws; io.workspace_bytes = ws_bytes;
  return io;
}

/* The reference step with the identity o_proj: o (as f32 [m, heads*d]) and the caches after it,
 * from kc / vc (updated in place). */
static void reference_o(const layer *l, const step *st, const int32_t *pos, pz_bf16 *kc, pz_bf16 *vc, float *o) {
  pz_ref_gqa_io io = {0};
  io.qkv = st->qkv; io.ld_qkv = l->w;
  io.q_norm_w = l->qn; io.k_norm_w = l->kn;
  io.o_w = l->oid;
  io.k_cache = kc; io.v_cache = vc;
  io.cache_seq_stride = st->seq; io.cache_head_stride = st->head;
  io.pos = pos;
  io.out = o; io.ld_out = l->hd; io.out_zero_init = true;
  CHECK_OK(pz_ref_gqa_attention(st->m, &l->pid, &io));
}

/* Caches: bit-identical except the appended rows, which may be one bf16 ulp off. Returns the
 * number of appended values one ulp off. */
static int64_t check_cache(const step *st, const layer *l, const int32_t *pos, const pz_bf16 *ref, const pz_bf16 *got) {
  int64_t far = 0, near = 0;
  for (int64_t e = 0; e < st->n; e++) {
    if (ref[e] == got[e]) continue;
    const int64_t i = e / st->seq, t = (e % st->head) / l->s.d;
    if (t == pos[i] && ulps(ref[e], got[e]) <= 1) near++;
    else if (far++ < 3)
      fprintf(stderr, "  cache element %lld (row %lld, position %lld): ref 0x%04x, gpu 0x%04x\n", (long long)e,
              (long long)i, (long long)t, ref[e], got[e]);
  }
  CHECK(far == 0);
  return near;
}

/* o: |gpu - ref| <= ulp(ref) + O_ABS per value; returns the count that differ at all, the worst
 * excess over ulp(ref) in units of O_ABS in *worst. */
static int64_t check_o(const float *ref, const float *got, int64_t n, double *worst) {
  int64_t bad = 0, diff = 0;
  *worst = 0;
  for (int64_t e = 0; e < n; e++) {
    if (!isfinite(got[e])) { if (bad++ < 3) fprintf(stderr, "  o[%lld] = %g not finite\n", (long long)e, got[e]); continue; }
    const double dlt = fabs((double)got[e] - ref[e]);
    if (dlt == 0) continue;
    diff++;
    const double ex = (dlt - ulp_of(ref[e])) / O_ABS;
    if (ex > *worst) *worst = ex;
    if (ex > 1 && bad++ < 3) fprintf(stderr, "  o[%lld]: ref %.9g, gpu %.9g\n", (long long)e, ref[e], got[e]);
  }
  CHECK(bad == 0);
  return diff;
}

/* partial vs o_ref · o_wᵀ (pz_ref_gemm, the reference's own o_proj call), bounded by the o
 * differences carried through and the f32 summation bound (see the top). Returns the worst
 * |gpu - ref| / bound. */
static double check_partial(const layer *l, int m, const float *o_ref, const float *o_gpu, const float *got) {
  const int64_t H = l->s.H, K = l->hd;
  pz_bf16 *ob = malloc(sizeof(pz_bf16) * (size_t)(m * K));
  float *ref = malloc(sizeof(float) * (size_t)(m * H));
  for (int64_t e = 0; e < m * K; e++) ob[e] = pz_f32_to_bf16(o_ref[e]);
  pz_ref_gemm(m, H, K, ob, K, l->ow, K, NULL, ref, H, 0, true);
  const double u = ldexp(1.0, -24), gam = K * u / (1 - K * u);
  double worst = 0;
  int64_t bad = 0;
  for (int i = 0; i < m; i++)
    for (int64_t j = 0; j < H; j++) {
      double carried = 0, mag = 0;
      const pz_bf16 *w = l->ow + j * K;
      for (int64_t k = 0; k < K; k++) {
        const double a = fabs((double)pz_bf16_to_f32(w[k]));
        carried += a * fabs((double)o_gpu[i * K + k] - o_ref[i * K + k]);
        mag += a * fmax(fabs((double)o_gpu[i * K + k]), fabs((double)o_ref[i * K + k]));
      }
      const double bound = carried + 3 * gam * mag + 1e-30;
      const double r = fabs((double)got[i * H + j] - ref[i * H + j]) / bound;
      if (!(r <= 1) && bad++ < 3)
        fprintf(stderr, "  partial[%d, %lld]: ref %.9g, gpu %.9g, bound %.3g\n", i, (long long)j, ref[i * H + j],
                got[i * H + j], bound);
      if (r > worst || isnan(r)) worst = isnan(r) ? INFINITY : r;
    }
  CHECK(bad == 0);
  free(ob);
  free(ref);
  return worst;
}

/* One step of layer l at m rows, context ctx (positions pos or the default spread), splits forced
 * (0: automatic): the identity-o_proj run against the reference's o and caches, a repeat
 * (bit-identical), then the real o_proj against o_ref · o_wᵀ. */
static void check_step(const layer *l, int m, int64_t ctx, const int32_t *pos, int splits) {
  layer L = *l;
  L.p.max_ctx = ctx;
  L.pid.max_ctx = ctx;
  pz_gqa_cuda_ctx *cid = NULL, *cr = NULL;
  CHECK_OK(pz_gqa_cuda_create(&L.pid, m, G, &cid));
  CHECK_OK(pz_gqa_cuda_create(&L.p, m, G, &cr));
  if (!cid || !cr) { pz_gqa_cuda_destroy(cid); pz_gqa_cuda_destroy(cr); return; }
  pz_gqa_cuda_force_splits(cid, splits);
  pz_gqa_cuda_force_splits(cr, splits);
  step st;
  step_make(&st, &L, m, ctx, pos, 0);
  const int64_t hd = L.hd, H = L.s.H;
  const size_t ws_b = pz_gqa_cuda_workspace_bytes(cid) > pz_gqa_cuda_workspace_bytes(cr) ? pz_gqa_cuda_workspace_bytes(cid)
                                                                                          : pz_gqa_cuda_workspace_bytes(cr);
  void *ws = NULL;
  float *d_o = NULL, *d_out = NULL;
  cudaMalloc(&ws, ws_b);
  cudaMalloc((void **)&d_o, sizeof(float) * (size_t)(m * hd));
  cudaMalloc((void **)&d_out, sizeof(float) * (size_t)(m * H));
  cudaMemset(d_o, 0x7f, sizeof(float) * (size_t)(m * hd)); /* stale: must be overwritten */
  cudaMemset(d_out, 0x7f, sizeof(float) * (size_t)(m * H));
  float *o_ref = malloc(sizeof(float) * (size_t)(m * hd)), *o_gpu = malloc(sizeof(float) * (size_t)(m * hd));
  float *o_again = malloc(sizeof(float) * (size_t)(m * hd)), *got = malloc(sizeof(float) * (size_t)(m * H));
  pz_bf16 *kr = malloc(2 * (size_t)st.n), *vr = malloc(2 * (size_t)st.n), *kg = malloc(2 * (size_t)st.n),
          *vg = malloc(2 * (size_t)st.n);
  memcpy(kr, st.kc, 2 * (size_t)st.n);
  memcpy(vr, st.vc, 2 * (size_t)st.n);
  reference_o(&L, &st, st.pos, kr, vr, o_ref);
  pz_gqa_cuda_io io = gpu_io(&L, &st, L.d_oid, d_o, hd, ws, ws_b);
  CHECK_OK(pz_gqa_cuda_decode(cid, m, &io, 0));
  CHECK(cudaDeviceSynchronize() == cudaSuccess);
  cudaMemcpy(o_gpu, d_o, sizeof(float) * (size_t)(m * hd), cudaMemcpyDeviceToHost);
  cudaMemcpy(kg, st.d_kc, 2 * (size_t)st.n, cudaMemcpyDeviceToHost);
  cudaMemcpy(vg, st.d_vc, 2 * (size_t)st.n, cudaMemcpyDeviceToHost);
  const int64_t knear = check_cache(&st, &L, st.pos, kr, kg), vnear = check_cache(&st, &L, st.pos, vr, vg);
  double worst_o = 0;
  const int64_t ndiff = check_o(o_ref, o_gpu, m * hd, &worst_o);
  /* again: the step rewrites the same cache rows with the same bits and gives the same o */
  CHECK_OK(pz_gqa_cuda_decode(cid, m, &io, 0));
  cudaMemcpy(o_again, d_o, sizeof(float) * (size_t)(m * hd), cudaMemcpyDeviceToHost);
  CHECK(memcmp(o_gpu, o_again, sizeof(float) * (size_t)(m * hd)) == 0);
  io = gpu_io(&L, &st, L.d_ow, d_out, H, ws, ws_b);
  CHECK_OK(pz_gqa_cuda_decode(cr, m, &io, 0));
  CHECK(cudaDeviceSynchronize() == cudaSuccess);
  cudaMemcpy(got, d_out, sizeof(float) * (size_t)(m * H), cudaMemcpyDeviceToHost);
  const double worst_p = check_partial(&L, m, o_ref, o_gpu, got);
  printf("%-42s m=%-3d ctx=%-5lld splits=%-2d o: %5.2f%% of %lld differ (worst %.2f of the slack beyond 1 ulp); "
         "partial worst %.3f of its bound; cache: %lld k / %lld v values 1 ulp off\n",
         L.s.name, m, (long long)ctx, pz_gqa_cuda_splits(cr, m), 100.0 * (double)ndiff / (double)(m * hd),
         (long long)(m * hd), worst_o, worst_p, (long long)knear, (long long)vnear);
  free(o_ref); free(o_gpu); free(o_again); free(got); free(kr); free(vr); free(kg); free(vg);
  cudaFree(ws); cudaFree(d_o); cudaFree(d_out);
  step_free(&st);
  pz_gqa_cuda_destroy(cid);
  pz_gqa_cuda_destroy(cr);
}

static void run_shape(const shape *s, const int *ms, int nm, const int64_t *ctxs, int nc) {
  layer l;
  layer_make(&l, s, 1);
  for (int a = 0; a < nm; a++)
    for (int b = 0; b < nc; b++) check_step(&l, ms[a], ctxs[b], NULL, 0);
  layer_free(&l);
}

/* A CUDA graph of one decode step, captured once and replayed at two sets of positions (the
 * second crossing tile and split boundaries): each replay against the reference run on the
 * reference's own caches of the step before. W > 0: a sliding layer of window W, whose window moves
 * between the replays (the cache rows before the first replay's windows hold NaN; every row's position
 * grows, so they stay outside the second's too). */
static void check_graph(const shape *s, int64_t W) {
  const int m = 3;
  const int64_t ctx = 1024;
  const int32_t p1[3] = {100, 0, 511}, p2[3] = {170, 64, 1023};
  layer l;
  layer_make(&l, s, ctx);
  l.p.window = l.pid.window = W;
  pz_gqa_cuda_ctx *c = NULL;
  CHECK_OK(pz_gqa_cuda_create(&l.pid, m, G, &c));
  if (!c) { layer_free(&l); return; }
  step st;
  step_make(&st, &l, m, ctx, p1, 1024); /* rows below 1024 hold data: both steps read only those */
  const size_t ws_b = pz_gqa_cuda_workspace_bytes(c);
  void *ws = NULL;
  float *d_o = NULL;
  cudaMalloc(&ws, ws_b);
  cudaMalloc((void **)&d_o, sizeof(float) * (size_t)(m * l.hd));
  cudaStream_t s0 = NULL;
  CHECK(cudaStreamCreateWithFlags(&s0, cudaStreamNonBlocking) == cudaSuccess);
  pz_gqa_cuda_io io = gpu_io(&l, &st, l.d_oid, d_o, l.hd, ws, ws_b);
  cudaGraph_t gr = NULL;
  cudaGraphExec_t ge = NULL;
  CHECK(cudaStreamBeginCapture(s0, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
  CHECK_OK(pz_gqa_cuda_decode(c, m, &io, s0));
  CHECK(cudaStreamEndCapture(s0, &gr) == cudaSuccess);
  CHECK(cudaGraphInstantiate(&ge, gr, 0) == cudaSuccess);
  pz_bf16 *kr = malloc(2 * (size_t)st.n), *vr = malloc(2 * (size_t)st.n), *kg = malloc(2 * (size_t)st.n),
          *vg = malloc(2 * (size_t)st.n);
  float *o_ref = malloc(sizeof(float) * (size_t)(m * l.hd)), *o_gpu = malloc(sizeof(float) * (size_t)(m * l.hd));
  memcpy(kr, st.kc, 2 * (size_t)st.n);
  memcpy(vr, st.vc, 2 * (size_t)st.n);
  for (int rep = 0; rep < 2; rep++) {
    const int32_t *p = rep ? p2 : p1;
    cudaMemcpy(st.d_pos, p, sizeof(int32_t) * m, cudaMemcpyHostToDevice);
    CHECK(cudaGraphLaunch(ge, s0) == cudaSuccess);
    CHECK(cudaStreamSynchronize(s0) == cudaSuccess);
    reference_o(&l, &st, p, kr, vr, o_ref);
    cudaMemcpy(o_gpu, d_o, sizeof(float) * (size_t)(m * l.hd), cudaMemcpyDeviceToHost);
    cudaMemcpy(kg, st.d_kc, 2 * (size_t)st.n, cudaMemcpyDeviceToHost);
    cudaMemcpy(vg, st.d_vc, 2 * (size_t)st.n, cudaMemcpyDeviceToHost);
    const int64_t near = check_cache(&st, &l, p, kr, kg);
    check_cache(&st, &l, p, vr, vg);
    double worst = 0;
    const int64_t nd = check_o(o_ref, o_gpu, m * l.hd, &worst);
    /* the next step's reference starts from the GPU's caches (an appended value may be an ulp off) */
    memcpy(kr, kg, 2 * (size_t)st.n);
    memcpy(vr, vg, 2 * (size_t)st.n);
    printf("graph replay %d %-29s window %-4lld positions %d/%d/%d: o %lld of %lld differ (worst %.2f), k cache %lld 1 "
           "ulp off\n", rep, s->name, (long long)W, p[0], p[1], p[2], (long long)nd, (long long)(m * l.hd), worst, (long long)near);
  }
  free(kr); free(vr); free(kg); free(vg); free(o_ref); free(o_gpu);
  if (ge) cudaGraphExecDestroy(ge);
  if (gr) cudaGraphDestroy(gr);
  cudaStreamDestroy(s0);
  cudaFree(ws); cudaFree(d_o);
  step_free(&st);
  pz_gqa_cuda_destroy(c);
  layer_free(&l);
}

/* The o_proj slot: unset vs set (pre-zeroed, zero_init = false) vs set on stale data (zero_init
 * = true) give the same bits with 2 K splits; a slot claimed zeroed but holding data shows in
 * the result (negative control); columns outside the slot are untouched; the slot rule is
 * pz_prezero_slice_zeroed's. */
static void check_slots(const shape *s) {
  setenv("PREZERO_GEMM_SPLITS", "2", 1);
  setenv("PREZERO_GEMM_TUNER", "0", 1);
  remake_G();
  layer l;
  layer_make(&l, s, 128);
  pz_gqa_cuda_ctx *c = NULL;
  CHECK_OK(pz_gqa_cuda_create(&l.p, 8, G, &c));
  if (!c) { layer_free(&l); return; }
  const int m = 3;
  step st;
  step_make(&st, &l, m, 128, NULL, 0);
  const int64_t H = s->H, ntot = 64 + H + 32; /* [a qkv-ish slice | o_proj | tail] */
  const size_t bytes = sizeof(float) * (size_t)(m * ntot);
  const size_t ws_b = pz_gqa_cuda_workspace_bytes(c);
  void *ws = NULL;
  float *d_buf = NULL, *d_out = NULL;
  cudaMalloc(&ws, ws_b);
  cudaMalloc((void **)&d_buf, bytes);
  cudaMalloc((void **)&d_out, sizeof(float) * (size_t)(m * H));
  float *ones = malloc(bytes), *r[5];
  for (int64_t i = 0; i < m * ntot; i++) ones[i] = 1.0f;
  for (int k = 0; k < 5; k++) r[k] = malloc(bytes);
  /* 0: no slot (stale output), 1: again */
  pz_gqa_cuda_io io = gpu_io(&l, &st, l.d_ow, d_out, H, ws, ws_b);
  cudaMemcpy(d_out, ones, sizeof(float) * (size_t)(m * H), cudaMemcpyHostToDevice);
  CHECK_OK(pz_gqa_cuda_decode(c, m, &io, 0));
  cudaMemcpy(r[0], d_out, sizeof(float) * (size_t)(m * H), cudaMemcpyDeviceToHost);
  CHECK_OK(pz_gqa_cuda_decode(c, m, &io, 0));
  cudaMemcpy(r[1], d_out, sizeof(float) * (size_t)(m * H), cudaMemcpyDeviceToHost);
  CHECK(memcmp(r[0], r[1], sizeof(float) * (size_t)(m * H)) == 0);
  /* 2: the slot in a pre-zeroed buffer, zero_init = false */
  cudaMemset(d_buf, 0, bytes);
  io.out = d_buf + 64; io.ld_out = ntot; io.out_zeroed = true;
  CHECK_OK(pz_gqa_cuda_decode(c, m, &io, 0));
  cudaMemcpy(r[2], d_buf, bytes, cudaMemcpyDeviceToHost);
  /* 3: the slot on stale data, zero_init = true */
  cudaMemcpy(d_buf, ones, bytes, cudaMemcpyHostToDevice);
  io.out_zeroed = false;
  CHECK_OK(pz_gqa_cuda_decode(c, m, &io, 0));
  cudaMemcpy(r[3], d_buf, bytes, cudaMemcpyDeviceToHost);
  /* 4: negative control: stale data claimed zeroed */
  cudaMemcpy(d_buf, ones, bytes, cudaMemcpyHostToDevice);
  io.out_zeroed = true;
  CHECK_OK(pz_gqa_cuda_decode(c, m, &io, 0));
  cudaMemcpy(r[4], d_buf, bytes, cudaMemcpyDeviceToHost);
  CHECK(cudaDeviceSynchronize() == cudaSuccess);
  int64_t diff2 = 0, diff3 = 0, diff4 = 0, guard2 = 0, guard3 = 0;
  for (int i = 0; i < m; i++) {
    for (int64_t j = 0; j < H; j++) {
      uint32_t a, b2, b3, b4;
      memcpy(&a, &r[0][i * H + j], 4);
      memcpy(&b2, &r[2][i * ntot + 64 + j], 4);
      memcpy(&b3, &r[3][i * ntot + 64 + j], 4);
      memcpy(&b4, &r[4][i * ntot + 64 + j], 4);
      diff2 += a != b2; diff3 += a != b3; diff4 += a != b4;
    }
    for (int64_t j = 0; j < 64; j++) { guard2 += r[2][i * ntot + j] != 0.0f; guard3 += r[3][i * ntot + j] != 1.0f; }
    for (int64_t j = 64 + H; j < ntot; j++) { guard2 += r[2][i * ntot + j] != 0.0f; guard3 += r[3][i * ntot + j] != 1.0f; }
  }
  CHECK(diff2 == 0);
  CHECK(diff3 == 0);
  CHECK(guard2 == 0 && guard3 == 0);
  CHECK(diff4 > 0);
  printf("slot %-38s set vs unset: %lld / %lld differing values (stale-claimed-zero control: %lld)\n", s->name,
         (long long)diff2, (long long)diff3, (long long)diff4);
  /* the rule: inside n_base always zeroed; beyond it as the gate says */
  pz_gqa_params p = l.p;
  pz_device_desc dev;
  pz_device_desc_default(&dev);
  p.prezero_n_total = ntot; p.prezero_n_base = 64 + H; p.oproj_col_offset = 64;
  CHECK(pz_gqa_cuda_oproj_zeroed(&p, m, 2, &dev));
  p.prezero_n_base = 64; p.oproj_col_offset = 64;
  CHECK(pz_gqa_cuda_oproj_zeroed(&p, m, 2, &dev) == pz_prezero_slice_zeroed(m, 64, H, ntot, 64, H, 2, &dev));
  for (int k = 0; k < 5; k++) free(r[k]);
  free(ones);
  cudaFree(ws); cudaFree(d_buf); cudaFree(d_out);
  step_free(&st);
  pz_gqa_cuda_destroy(c);
  layer_free(&l);
  unsetenv("PREZERO_GEMM_SPLITS");
  unsetenv("PREZERO_GEMM_TUNER");
  remake_G();
}

/* A sliding layer (window W) of shape s at m rows, context ctx, positions pos (NULL: the default spread), splits
 * forced (0: automatic): check_step against the reference, whose cache rows before each row's window hold NaN. */
static void check_window_step(const shape *s, int64_t W, int m, int64_t ctx, const int32_t *pos, int splits) {
  layer l;
  layer_make(&l, s, ctx);
  l.p.window = l.pid.window = W;
  printf("window %-5lld ", (long long)W);
  check_step(&l, m, ctx, pos, splits);
  layer_free(&l);
}

/* The same step with window 0 and with window W (identity o_proj, automatic splits, which do not depend on W): the
 * rows W does not cut (pos + 1 <= W) give full attention's o bit for bit, and the rows it cuts differ from it
 * (the window is applied). W >= ctx: every row bit for bit (the op drops such a window). */
static void check_window_identity(const shape *s, int64_t W, int m, int64_t ctx, const int32_t *pos) {
  layer l;
  layer_make(&l, s, ctx);
  pz_gqa_params pw = l.pid;
  pw.window = W;
  pz_gqa_cuda_ctx *c0 = NULL, *cw = NULL;
  CHECK_OK(pz_gqa_cuda_create(&l.pid, m, G, &c0));
  CHECK_OK(pz_gqa_cuda_create(&pw, m, G, &cw));
  if (!c0 || !cw) { pz_gqa_cuda_destroy(c0); pz_gqa_cuda_destroy(cw); layer_free(&l); return; }
  CHECK(pz_gqa_cuda_splits(c0, m) == pz_gqa_cuda_splits(cw, m));
  step st;
  step_make(&st, &l, m, ctx, pos, 0); /* l's window is 0: every row below pos holds data */
  const size_t ws_b = pz_gqa_cuda_workspace_bytes(c0);
  const int64_t hd = l.hd;
  void *ws = NULL;
  float *d_o = NULL;
  cudaMalloc(&ws, ws_b);
  cudaMalloc((void **)&d_o, sizeof(float) * (size_t)(m * hd));
  float *o0 = malloc(sizeof(float) * (size_t)(m * hd)), *ow = malloc(sizeof(float) * (size_t)(m * hd));
  pz_gqa_cuda_io io = gpu_io(&l, &st, l.d_oid, d_o, hd, ws, ws_b);
  CHECK_OK(pz_gqa_cuda_decode(c0, m, &io, 0)); /* a repeat rewrites the appended rows with the same bits */
  cudaMemcpy(o0, d_o, sizeof(float) * (size_t)(m * hd), cudaMemcpyDeviceToHost);
  CHECK_OK(pz_gqa_cuda_decode(cw, m, &io, 0));
  CHECK(cudaDeviceSynchronize() == cudaSuccess);
  cudaMemcpy(ow, d_o, sizeof(float) * (size_t)(m * hd), cudaMemcpyDeviceToHost);
  int same = 0, cut = 0, cut_differ = 0;
  for (int i = 0; i < m; i++) {
    const int eq = !memcmp(o0 + i * hd, ow + i * hd, sizeof(float) * (size_t)hd);
    if (st.pos[i] + 1 <= W) { CHECK(eq); same += eq; }
    else { cut++; cut_differ += !eq; }
  }
  CHECK(cut_differ == cut);
  printf("window %-5lld %-42s ctx=%-5lld splits=%-2d: %d rows inside the window bit-identical to full attention, %d of %d "
         "cut rows differ from it\n", (long long)W, s->name, (long long)ctx, pz_gqa_cuda_splits(cw, m), same, cut_differ, cut);
  free(o0); free(ow);
  cudaFree(ws); cudaFree(d_o);
  step_free(&st);
  pz_gqa_cuda_destroy(c0);
  pz_gqa_cuda_destroy(cw);
  layer_free(&l);
}

/* Sliding windows (Mistral, Phi-3, Qwen2's sliding layers): W 64 (one tile) and 100 (slices starting off a tile
 * boundary) at contexts 1, 63, 64, 65 and 300 (W >= ctx among them: the window larger than the context), one batch
 * at 8192 with every boundary (rows inside, at and past W), forced split counts 1, 3 and 64, Phi-3-mini's 2047 at
 * d 96, and the rows a window does not cut against full attention bit for bit. */
static void check_windows(int quick) {
  const int64_t ctx[] = {1, 63, 64, 65, 300};
  const int64_t W[] = {64, 100};
  for (int w = 0; w < 2; w++)
    for (int b = 0; b < (quick ? 4 : 5); b++) {
      check_window_step(&Q3_30B, W[w], 3, ctx[b], NULL, 0);
      if (!quick) check_window_step(&R2D16, W[w], 1, ctx[b], NULL, 0);
    }
  /* mixed lengths at 300: inside, at and past both windows */
  const int32_t p300[8] = {299, 0, 62, 63, 64, 99, 100, 163};
  check_window_step(&MHA64, 64, 8, 300, p300, 0);
  check_window_step(&MHA64, 100, 8, 300, p300, 0);
  check_window_step(&R4D32P, 100, 8, 300, p300, 3);
  /* 8192: lengths 8192, 1, 64, 65, 100, 101, 164, 4096 */
  const int32_t p8k[8] = {8191, 0, 63, 64, 99, 100, 163, 4095};
  check_window_step(&L70_TP8, 64, 8, 8192, p8k, 0);
  check_window_step(&L70_TP8, 100, 8, 8192, p8k, 0);
  check_window_step(&L70_TP8, 100, 8, 8192, p8k, 1);
  if (!quick) {
    check_window_step(&L70_TP8, 100, 8, 8192, p8k, 3);
    check_window_step(&L70_TP8, 64, 8, 8192, p8k, 64);
    check_window_step(&Q3_30B, 64, 8, 8192, p8k, 0);
  }
  /* Phi-3-mini (d 96): its 2047-token window at 8192 */
  const int32_t pphi[4] = {8191, 2045, 2046, 2047};
  check_window_step(&PHI3_MINI_TP4, 2047, 4, 8192, pphi, 0);
  /* windows a row fits: full attention's bits; W >= ctx: every row */
  check_window_identity(&L70_TP8, 100, 8, 8192, p8k);
  check_window_identity(&MHA64, 64, 8, 300, p300);
  check_window_identity(&Q3_30B, 300, 8, 300, p300);
  check_window_identity(&Q3_30B, 100000, 8, 300, p300);
}

/* The split counts follow the documented rule; the argument checks refuse what they say. */
static void check_args(void) {
  layer l;
  layer_make(&l, &Q3_30B, 256);
  pz_gqa_cuda_ctx *c = NULL;
  pz_gqa_params bad = l.p;
  bad.head_dim = 80; /* a multiple of 16 without an instance (16, 32, 64, 96, 128 have one) */
  CHECK_ST(pz_gqa_cuda_create(&bad, 4, G, &c), PZ_ERR_UNSUPPORTED);
  bad = l.p;
  bad.rotary_dim = 7; /* odd */
  CHECK_ST(pz_gqa_cuda_create(&bad, 4, G, &c), PZ_ERR_UNSUPPORTED);
  bad.rotary_dim = 2 * l.p.head_dim; /* beyond the head */
  CHECK_ST(pz_gqa_cuda_create(&bad, 4, G, &c), PZ_ERR_UNSUPPORTED);
  bad = l.p;
  bad.n_kv_heads = 5;
  CHECK_ST(pz_gqa_cuda_create(&bad, 4, G, &c), PZ_ERR_UNSUPPORTED);
  bad = l.p;
  bad.hidden = 0;
  CHECK_ST(pz_gqa_cuda_create(&bad, 4, G, &c), PZ_ERR_UNSUPPORTED);
  bad = l.p;
  bad.window = -1;
  CHECK_ST(pz_gqa_cuda_create(&bad, 4, G, &c), PZ_ERR_UNSUPPORTED);
  CHECK_ST(pz_gqa_cuda_create(&l.p, 0, G, &c), PZ_ERR_INVALID_ARG);
  CHECK_OK(pz_gqa_cuda_create(&l.p, 4, G, &c));
  if (c) {
    /* splits: at most ceil(max_ctx / 64) = 4 here, and at least 1; forced counts are clamped */
    for (int m = 1; m <= 4; m++) CHECK(pz_gqa_cuda_splits(c, m) >= 1 && pz_gqa_cuda_splits(c, m) <= 4);
    pz_gqa_cuda_force_splits(c, 1000);
    CHECK(pz_gqa_cuda_splits(c, 1) == 4);
    pz_gqa_cuda_force_splits(c, 0);
    step st;
    step_make(&st, &l, 3, 256, NULL, 0);
    const size_t ws_b = pz_gqa_cuda_workspace_bytes(c);
    void *ws = NULL;
    float *d_out = NULL;
    cudaMalloc(&ws, ws_b);
    cudaMalloc((void **)&d_out, sizeof(float) * 3 * (size_t)l.s.H);
    pz_gqa_cuda_io io = gpu_io(&l, &st, l.d_ow, d_out, l.s.H, ws, ws_b);
    CHECK_ST(pz_gqa_cuda_decode(c, 5, &io, 0), PZ_ERR_INVALID_ARG); /* m > m_max */
    io.k_norm_w = NULL;
    CHECK_ST(pz_gqa_cuda_decode(c, 3, &io, 0), PZ_ERR_INVALID_ARG); /* one norm weight alone */
    io = gpu_io(&l, &st, l.d_ow, d_out, l.s.H, ws, ws_b - 256);
    CHECK_ST(pz_gqa_cuda_decode(c, 3, &io, 0), PZ_ERR_INVALID_ARG); /* workspace too small */
    io = gpu_io(&l, &st, l.d_ow, d_out, l.s.H, ws, ws_b);
    io.cache_head_stride = 8;
    CHECK_ST(pz_gqa_cuda_decode(c, 3, &io, 0), PZ_ERR_INVALID_ARG); /* head stride below max_ctx*d */
    io = gpu_io(&l, &st, l.d_ow, d_out, l.s.H, ws, ws_b);
    io.ld_qkv = 100;
    CHECK_ST(pz_gqa_cuda_decode(c, 3, &io, 0), PZ_ERR_INVALID_ARG);
    cudaFree(ws); cudaFree(d_out);
    step_free(&st);
  }
  pz_gqa_cuda_destroy(c);
  layer_free(&l);
}

int main(void) {
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
    printf("no CUDA GPU: test_gqa_attn skipped\n");
    return 77;
  }
  pz_ref_set_threads(0);
  CHECK_OK(pz_gemm_ctx_create(&G));
  if (!G) TEST_DONE();
  const int quick = getenv("PZ_TEST_QUICK") != NULL;
  {
    /* small contexts: one tile, its boundary, two tiles, several; batches of mixed lengths */
    const int ms[] = {1, 3};
    const int64_t ctx[] = {1, 63, 64, 65, 300};
    run_shape(&Q3_30B, ms, 2, ctx, quick ? 4 : 5);
    run_shape(&MHA64, ms, 2, ctx, quick ? 4 : 5);
    run_shape(&R8D64, ms, 2, ctx, quick ? 4 : 5);
    run_shape(&R20, ms + 1, 1, ctx, quick ? 3 : 5);
    run_shape(&R2D16, ms, 2, ctx, quick ? 4 : 5);
    run_shape(&R4D32, ms + 1, 1, ctx, quick ? 4 : 5);
    run_shape(&R4D32P, ms, 2, ctx, quick ? 4 : 5);
    run_shape(&R2D32P, ms + 1, 1, ctx, quick ? 4 : 5);
    run_shape(&GLM_AIR_TP8, ms + 1, 1, ctx, quick ? 3 : 5);
    run_shape(&PHI3_MINI_TP4, ms, 2, ctx, quick ? 3 : 5);
    run_shape(&R4D96, ms + 1, 1, ctx, quick ? 4 : 5);
    const shape lr4 = longrope_shape(true, 240), lr3 = longrope_shape(false, 240);
    run_shape(&lr4, ms, 2, ctx, quick ? 4 : 5);
    run_shape(&lr3, ms, 2, ctx, quick ? 3 : 5);
    if (!quick) {
      run_shape(&R16, ms, 2, ctx, 5);
      run_shape(&L70_TP8, ms, 2, ctx, 5);
      const int m3[] = {3};
      const int64_t c2[] = {1, 65};
      run_shape(&L70_TP1, m3, 1, c2, 2);
    }
  }
  {
    /* context 8192 at the benchmark's shapes */
    const int m1[] = {2}, m4[] = {1, 4}, m16[] = {16};
    const int64_t c8k[] = {8192};
    run_shape(&L70_TP8, quick ? m1 : m16, 1, c8k, 1);
    if (!quick) {
      run_shape(&L70_TP1, m4, 2, c8k, 1);
      run_shape(&Q3_30B, m4 + 1, 1, c8k, 1);
      run_shape(&R16, m1, 1, c8k, 1);
      run_shape(&GLM_AIR_TP8, m4 + 1, 1, c8k, 1);
      run_shape(&PHI3_MINI_TP4, m4 + 1, 1, c8k, 1);
    }
  }
  {
    /* one batch holding every boundary: lengths 8192, 1, 63, 64, 65, 66, 128, 4096 */
    const int32_t pos[8] = {8191, 0, 62, 63, 64, 65, 127, 4095};
    layer l;
    layer_make(&l, &L70_TP8, 8192);
    check_step(&l, 8, 8192, pos, 0);
    /* forced split counts: one (the attention writes o itself), three, and more than tiles */
    check_step(&l, 8, 8192, pos, 1);
    if (!quick) check_step(&l, 8, 8192, pos, 3);
    layer_free(&l);
    layer_make(&l, &Q3_30B, 300);
    check_step(&l, 2, 300, NULL, 1);
    check_step(&l, 2, 300, NULL, 64);
    layer_free(&l);
  }
  check_windows(quick);
  check_graph(&Q3_30B, 0);
  check_graph(&Q3_30B, 100); /* p2's rows 170 / 1023 cut by the window, 64 not */
  const shape lr_graph = longrope_shape(true, 150);
  check_graph(&lr_graph, 0);
  check_slots(&Q3_30B);
  if (!quick) check_slots(&MHA64);
  check_args();
  pz_gemm_ctx_destroy(G);
  pz_ref_set_threads(1);
  TEST_DONE();
}
