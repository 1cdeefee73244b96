/* CUDA MLA decode op (src/backend/cuda/mla.h) against pz_ref_mla_decode: tiny, Kimi-K2 per-rank
 * (TP 1/2/4) and the no-q-LoRA layout (V2-Lite), contexts 1/7/128/8192, batches 1/3/64; the cache
 * append (rows beyond pos are never read or written: NaN sentinels), run-to-run determinism, and
 * the qb_prezero / oproj_prezero slots set vs unset bit-identical (2 K splits, docs/ARCHITECTURE.md §5). */
#define _POSIX_C_SOURCE 200809L
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "backend/cpu/ref_ops.h"
#include "backend/cuda/mla.h"
#include "passes/prezero.h"
#include "pz_test.h"

/* Stated tolerances of the CUDA op against the f32 reference (mla.h explains why not exact):
 * per output row, rms(gpu - ref) <= TOL_RMS * rms(ref) and max|gpu - ref| <= TOL_MAX * rms(ref);
 * appended cache values within one bf16 ulp. */
#define TOL_RMS 1.5e-2
#define TOL_MAX 6e-2

static uint32_t rng = 777;
static pz_gemm_ctx *G = NULL; /* the split-K GEMM handle of the cases */

/* A new handle from the environment as it is now (options are read when a handle is made). */
static void remake_G(void) {
  pz_gemm_ctx_destroy(G);
  G = NULL;
  CHECK_OK(pz_gemm_ctx_create(&G));
}
static uint32_t next_u32(void) {
  rng ^= rng << 13;
  rng ^= rng >> 17;
  rng ^= rng << 5;
  return rng;
}
static float uniform(void) { return (float)(next_u32() & 0xffffff) / 16777216.0f * 2.0f - 1.0f; }
static pz_bf16 *rand_bf16(int64_t n, float scale, float offset) {
  pz_bf16 *p = malloc(sizeof(pz_bf16) * (size_t)n);
  for (int64_t i = 0; i < n; i++) p[i] = pz_f32_to_bf16(offset + scale * uniform());
  return p;
}
static void *dev_copy(const void *h, size_t bytes) {
  void *d = NULL;
  if (cudaMalloc(&d, bytes) != cudaSuccess) return NULL;
  cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice);
  return d;
}

typedef struct shape {
  const char *name;
  int heads;
  int64_t H, q_lora, L, nope, rope, v;
  float theta, factor, beta_fast, beta_slow, mscale, mscale_all;
  int64_t orig_max;
} shape;

static const shape TINY = {"tiny tp1", 8, 512, 128, 96, 32, 32, 64, 10000, 4, 32, 1, 1, 1, 1024};
static const shape TINY4 = {"tiny tp4", 2, 512, 128, 96, 32, 32, 64, 10000, 4, 32, 1, 1, 1, 1024};
static const shape K2_TP4 = {"kimi-k2 tp4", 16, 7168, 1536, 512, 128, 64, 128, 50000, 32, 1, 1, 1, 1, 4096};
static const shape K2_TP2 = {"kimi-k2 tp2", 32, 7168, 1536, 512, 128, 64, 128, 50000, 32, 1, 1, 1, 1, 4096};
static const shape K2_TP1 = {"kimi-k2 tp1", 64, 7168, 1536, 512, 128, 64, 128, 50000, 32, 1, 1, 1, 1, 4096};
static const shape V2LITE = {"v2-lite (no q lora)", 16, 2048, 0, 512, 128, 64, 128, 10000, 40, 32, 1, 0.707f, 0.707f, 4096};

/* Host and device copies of one layer's weights. */
typedef struct layer {
  shape s;
  pz_mla_params p;
  int64_t qh, kvw, nq;
  pz_bf16 *qa_w, *qb_w, *kva_w, *w_uk, *w_uv, *o_w;
  pz_bf16 *d_qa_w, *d_qb_w, *d_kva_w, *d_w_uk, *d_w_uv, *d_o_w;
} layer;

static void layer_make(layer *l, const shape *s, int64_t max_ctx) {
  memset(l, 0, sizeof *l);
  l->s = *s;
  l->qh = s->nope + s->rope;
  l->kvw = s->L + s->rope;
  pz_mla_params *p = &l->p;
  p->n_heads = s->heads; p->hidden = s->H; p->q_lora_rank = s->q_lora; p->kv_lora_rank = s->L;
  p->qk_nope_head_dim = s->nope; p->qk_rope_head_dim = s->rope; p->v_head_dim = s->v; p->max_ctx = max_ctx;
  p->eps = 1e-6f;
  p->rope = (pz_rope_params){.theta = s->theta, .factor = s->factor, .original_max_position_embeddings = s->orig_max,
                             .beta_fast = s->beta_fast, .beta_slow = s->beta_slow, .mscale = s->mscale,
                             .mscale_all_dim = s->mscale_all};
  p->softmax_scale = pz_ref_mla_softmax_scale(s->nope, s->rope, &p->rope);
  const int64_t hq = s->heads * l->qh;
  if (s->q_lora > 0) {
    l->qa_w = rand_bf16(s->q_lora, 0.1f, 1.0f);
    l->qb_w = rand_bf16(hq * s->q_lora, 1.0f / sqrtf((float)s->q_lora) * 1.7f, 0);
    l->d_qa_w = dev_copy(l->qa_w, 2 * (size_t)s->q_lora);
    l->d_qb_w = dev_copy(l->qb_w, 2 * (size_t)(hq * s->q_lora));
  }
  l->kva_w = rand_bf16(s->L, 0.1f, 1.0f);
  l->w_uk = rand_bf16(s->heads * s->nope * s->L, 1.7f / sqrtf((float)s->nope), 0);
  l->w_uv = rand_bf16(s->heads * s->v * s->L, 1.7f / sqrtf((float)s->L), 0);
  l->o_w = rand_bf16(s->H * s->heads * s->v, 1.7f / sqrtf((float)(s->heads * s->v)), 0);
  l->d_kva_w = dev_copy(l->kva_w, 2 * (size_t)s->L);
  l->d_w_uk = dev_copy(l->w_uk, 2 * (size_t)(s->heads * s->nope * s->L));
  l->d_w_uv = dev_copy(l->w_uv, 2 * (size_t)(s->heads * s->v * s->L));
  l->d_o_w = dev_copy(l->o_w, 2 * (size_t)(s->H * s->heads * s->v));
}

static void layer_free(layer *l) {
  free(l->qa_w); free(l->qb_w); free(l->kva_w); free(l->w_uk); free(l->w_uv); free(l->o_w);
  cudaFree(l->d_qa_w); cudaFree(l->d_qb_w); cudaFree(l->d_kva_w); cudaFree(l->d_w_uk); cudaFree(l->d_w_uv); cudaFree(l->d_o_w);
}

/* One step's inputs: activations, positions and a cache whose rows 0..pos-1 hold data and whose
 * rows >= pos hold NaN (0xffff) so that a read or write beyond the new token shows up. */
typedef struct step {
  int m;
  int64_t ctx, in_w, stride;
  float *in;       /* qkv_a [m, q_lora+kvw] or (no q LoRA) q [m, heads*qh] then kv_a [m, kvw] */
  float *in2;
  int32_t *pos;
  pz_bf16 *cache;  /* initial */
  float *d_in, *d_in2;
  int32_t *d_pos;
  pz_bf16 *d_cache;
} step;

static void step_make(step *st, const layer *l, int m, int64_t ctx) {
  memset(st, 0, sizeof *st);
  st->m = m;
  st->ctx = ctx;
  const shape *s = &l->s;
  st->stride = ctx * l->kvw;
  st->in_w = s->q_lora > 0 ? s->q_lora + l->kvw : s->heads * l->qh;
  st->in = malloc(sizeof(float) * (size_t)(m * st->in_w));
  for (int64_t i = 0; i < m * st->in_w; i++) st->in[i] = 2.0f * uniform();
  if (s->q_lora == 0) {
    st->in2 = malloc(sizeof(float) * (size_t)(m * l->kvw));
    for (int64_t i = 0; i < m * l->kvw; i++) st->in2[i] = 2.0f * uniform();
  }
  st->pos = malloc(sizeof(int32_t) * (size_t)m);
  for (int i = 0; i < m; i++) st->pos[i] = (int32_t)(ctx - 1 - (i * 37) % (ctx / 2 + 1));
  st->cache = malloc(sizeof(pz_bf16) * (size_t)(m * st->stride));
  for (int i = 0; i < m; i++) {
    pz_bf16 *c = st->cache + i * st->stride;
    int64_t n = (int64_t)st->pos[i] * l->kvw;
    for (int64_t j = 0; j < n; j++) c[j] = pz_f32_to_bf16(1.7f * uniform());
    for (int64_t j = n; j < st->stride; j++) c[j] = 0xffff;
  }
  st->d_in = dev_copy(st->in, sizeof(float) * (size_t)(m * st->in_w));
  if (st->in2) st->d_in2 = dev_copy(st->in2, sizeof(float) * (size_t)(m * l->kvw));
  st->d_pos = dev_copy(st->pos, sizeof(int32_t) * (size_t)m);
  st->d_cache = dev_copy(st->cache, sizeof(pz_bf16) * (size_t)(m * st->stride));
}

static void step_free(step *st) {
  free(st->in); free(st->in2); free(st->pos); free(st->cache);
  cudaFree(st->d_in); cudaFree(st->d_in2); cudaFree(st->d_pos); cudaFree(st->d_cache);
}

static pz_mla_cuda_io gpu_io(const layer *l, const step *st) {
  pz_mla_cuda_io io = {0};
  if (l->s.q_lora > 0) {
    io.qkv_a = st->d_in; io.ld_qkv_a = st->in_w;
    io.qa_norm_w = l->d_qa_w; io.qb_w = l->d_qb_w;
  } else {
    io.q = st->d_in; io.ld_q = st->in_w;
    io.kv_a = st->d_in2; io.ld_kv_a = l->kvw;
  }
  io.kva_norm_w = l->d_kva_w; io.w_uk = l->d_w_uk; io.w_uv = l->d_w_uv; io.o_w = l->d_o_w;
  io.kv_cache = st->d_cache; io.cache_seq_stride = st->stride; io.pos = st->d_pos;
  return io;
}

/* Reference output [m, H] and cache after the step (host). */
static void reference(const layer *l, const step *st, float *out, pz_bf16 *cache) {
  memcpy(cache, st->cache, sizeof(pz_bf16) * (size_t)(st->m * st->stride));
  pz_ref_mla_io io = {0};
  if (l->s.q_lora > 0) {
    io.qkv_a = st->in; io.ld_qkv_a = st->in_w; io.qa_norm_w = l->qa_w; io.qb_w = l->qb_w;
  } else {
    io.q = st->in; io.ld_q = st->in_w; io.kv_a = st->in2; io.ld_kv_a = l->kvw;
  }
  io.kva_norm_w = l->kva_w; io.w_uk = l->w_uk; io.w_uv = l->w_uv; io.o_w = l->o_w;
  io.kv_cache = cache; io.cache_seq_stride = st->stride; io.pos = st->pos;
  io.out = out; io.ld_out = l->s.H; io.out_zero_init = true;
  CHECK_OK(pz_ref_mla_decode(st->m, &l->p, &io));
}

/* Compares one step on the GPU with the reference; returns the worst rms ratio seen. */
static void check_step(pz_mla_cuda_ctx *c, const layer *l, int m, int64_t ctx) {
  step st;
  step_make(&st, l, m, ctx);
  const int64_t H = l->s.H;
  float *ref = malloc(sizeof(float) * (size_t)(m * H)), *got = malloc(sizeof(float) * (size_t)(m * H));
  pz_bf16 *rc = malloc(sizeof(pz_bf16) * (size_t)(m * st.stride)), *gc = malloc(sizeof(pz_bf16) * (size_t)(m * st.stride));
  reference(l, &st, ref, rc);
  float *d_out = NULL;
  cudaMalloc((void **)&d_out, sizeof(float) * (size_t)(m * H));
  cudaMemset(d_out, 0x7f, sizeof(float) * (size_t)(m * H)); /* stale: must be overwritten */
  pz_mla_cuda_io io = gpu_io(l, &st);
  io.out = d_out; io.ld_out = H; io.out_zeroed = false;
  CHECK_OK(pz_mla_cuda_decode(c, m, &io, 0));
  CHECK(cudaDeviceSynchronize() == cudaSuccess);
  cudaMemcpy(got, d_out, sizeof(float) * (size_t)(m * H), cudaMemcpyDeviceToHost);
  cudaMemcpy(gc, st.d_cache, sizeof(pz_bf16) * (size_t)(m * st.stride), cudaMemcpyDeviceToHost);
  /* cache: bit-identical outside the appended rows, within one ulp inside */
  int64_t far = 0, ulp = 0;
  for (int i = 0; i < m; i++)
    for (int64_t j = 0; j < st.stride; j++) {
      pz_bf16 a = rc[i * st.stride + j], b = gc[i * st.stride + j];
      if (a == b) continue;
      bool appended = j / l->kvw == st.pos[i];
      if (appended && !((a ^ b) & 0x8000) && abs((int)a - (int)b) == 1) ulp++;
      else far++;
    }
  CHECK(far == 0);
  double worst_rms = 0, worst_max = 0;
  int nonfinite = 0;
  for (int i = 0; i < m; i++) {
    double se = 0, sr = 0, mx = 0;
    for (int64_t j = 0; j < H; j++) {
      double r = ref[i * H + j], g = got[i * H + j];
      if (!isfinite(g)) nonfinite++;
      se += (g - r) * (g - r);
      sr += r * r;
      if (fabs(g - r) > mx) mx = fabs(g - r);
    }
    double rr = sqrt(sr / (double)H);
    double er = sqrt(se / (double)H) / rr, em = mx / rr;
    if (er > worst_rms) worst_rms = er;
    if (em > worst_max) worst_max = em;
  }
  CHECK(nonfinite == 0);
  CHECK(worst_rms <= TOL_RMS);
  CHECK(worst_max <= TOL_MAX);
  printf("v%d %-20s m=%-3d ctx=%-5lld splits=%-2d rms err %.2e, max err %.2e (of row rms); cache: %lld values 1 ulp off\n",
         pz_mla_cuda_attn_version(c), l->s.name, m, (long long)ctx, pz_mla_cuda_splits(c, m), worst_rms, worst_max, (long long)ulp);
  free(ref); free(got); free(rc); free(gc);
  cudaFree(d_out);
  step_free(&st);
}

/* Slots: unset vs set (pre-zeroed, zero_init = false) vs set on stale data (zero_init = true)
 * give the same bits with 2 K splits; a slot claimed zeroed but holding data shows in the
 * result (negative control); repeated runs are bit-identical. */
static void check_slots(const shape *s) {
  setenv("PREZERO_GEMM_SPLITS", "2", 1);
  setenv("PREZERO_GEMM_TUNER", "0", 1);
  remake_G();
  layer l;
  layer_make(&l, s, 128);
  pz_gemm_ctx *g = G;
  pz_mla_cuda_ctx *c = NULL;
  CHECK_OK(pz_mla_cuda_create(&l.p, 8, g, &c));
  if (!c) { layer_free(&l); return; }
  const int m = 3;
  step st;
  step_make(&st, &l, m, 128);
  const int64_t H = s->H, nqb = s->heads * l.qh, ntot = 64 + nqb + H; /* [qkv_a-ish | q_b | o_proj] */
  const size_t bytes = sizeof(float) * (size_t)(m * ntot);
  float *d_buf = NULL, *d_out = NULL;
  cudaMalloc((void **)&d_buf, bytes);
  cudaMalloc((void **)&d_out, sizeof(float) * (size_t)(m * H));
  float *ones = malloc(bytes), *r[5];
  for (int64_t i = 0; i < m * ntot; i++) ones[i] = 1.0f;
  for (int k = 0; k < 5; k++) r[k] = malloc(bytes);
  pz_mla_cuda_io io = gpu_io(&l, &st);
  /* 0: no slots */
  cudaMemcpy(d_out, ones, sizeof(float) * (size_t)(m * H), cudaMemcpyHostToDevice);
  io.out = d_out; io.ld_out = H; io.out_zeroed = false;
  CHECK_OK(pz_mla_cuda_decode(c, m, &io, 0));
  cudaMemcpy(r[0], d_out, sizeof(float) * (size_t)(m * H), cudaMemcpyDeviceToHost);
  /* 1: again (determinism) */
  CHECK_OK(pz_mla_cuda_decode(c, m, &io, 0));
  cudaMemcpy(r[1], d_out, sizeof(float) * (size_t)(m * H), cudaMemcpyDeviceToHost);
  CHECK(memcmp(r[0], r[1], sizeof(float) * (size_t)(m * H)) == 0);
  /* 2: slots in a pre-zeroed buffer, zero_init = false */
  cudaMemset(d_buf, 0, bytes);
  io.qb_slot = s->q_lora > 0 ? d_buf + 64 : NULL; io.ld_qb_slot = ntot; io.qb_slot_zeroed = true;
  io.out = d_buf + 64 + nqb; io.ld_out = ntot; io.out_zeroed = true;
  CHECK_OK(pz_mla_cuda_decode(c, m, &io, 0));
  cudaMemcpy(r[2], d_buf, bytes, cudaMemcpyDeviceToHost);
  /* 3: slots on stale data (ones), zero_init = true */
  cudaMemcpy(d_buf, ones, bytes, cudaMemcpyHostToDevice);
  io.qb_slot_zeroed = false; io.out_zeroed = false;
  CHECK_OK(pz_mla_cuda_decode(c, m, &io, 0));
  cudaMemcpy(r[3], d_buf, bytes, cudaMemcpyDeviceToHost);
  /* 4: negative control: stale data claimed zeroed */
  cudaMemcpy(d_buf, ones, bytes, cudaMemcpyHostToDevice);
  io.qb_slot_zeroed = true; io.out_zeroed = true;
  CHECK_OK(pz_mla_cuda_decode(c, m, &io, 0));
  cudaMemcpy(r[4], d_buf, bytes, cudaMemcpyDeviceToHost);
  int64_t diff2 = 0, diff3 = 0, diff4 = 0, qb23 = 0, guard2 = 0, guard3 = 0;
  for (int i = 0; i < m; i++) {
    for (int64_t j = 0; j < H; j++) {
      uint32_t a, b2, b3, b4;
      memcpy(&a, &r[0][i * H + j], 4);
      memcpy(&b2, &r[2][i * ntot + 64 + nqb + j], 4);
      memcpy(&b3, &r[3][i * ntot + 64 + nqb + j], 4);
      memcpy(&b4, &r[4][i * ntot + 64 + nqb + j], 4);
      diff2 += a != b2; diff3 += a != b3; diff4 += a != b4;
    }
    for (int64_t j = 0; j < 64; j++) { guard2 += r[2][i * ntot + j] != 0.0f; guard3 += r[3][i * ntot + j] != 1.0f; }
    if (s->q_lora > 0)
      for (int64_t j = 0; j < nqb; j++) qb23 += memcmp(&r[2][i * ntot + 64 + j], &r[3][i * ntot + 64 + j], 4) != 0;
  }
  CHECK(diff2 == 0);
  CHECK(diff3 == 0);
  CHECK(qb23 == 0);
  CHECK(guard2 == 0 && guard3 == 0); /* columns outside the slots untouched */
  CHECK(diff4 > 0);                  /* the flag is obeyed: stale data leaks into the result */
  printf("slots %-18s set vs unset: %lld / %lld differing values (stale-claimed-zero control: %lld)\n", s->name,
         (long long)diff2, (long long)diff3, (long long)diff4);
  /* the slot rule is the CPU op's: inside n_base always zeroed */
  pz_mla_params p = l.p;
  p.prezero_n_total = ntot; p.prezero_n_base = 64 + nqb; p.qb_col_offset = 64; p.oproj_col_offset = 64 + nqb;
  pz_device_desc dev;
  pz_device_desc_default(&dev);
  bool qz = false, oz = true;
  pz_mla_cuda_slots_zeroed(&p, m, 4, &dev, &qz, &oz);
  CHECK(qz);
  CHECK(oz == pz_prezero_slice_zeroed(m, 64 + nqb, H, ntot, 64 + nqb, H, 4, &dev));
  for (int k = 0; k < 5; k++) free(r[k]);
  free(ones);
  cudaFree(d_buf); cudaFree(d_out);
  step_free(&st);
  pz_mla_cuda_destroy(c);
  layer_free(&l);
  unsetenv("PREZERO_GEMM_SPLITS");
  unsetenv("PREZERO_GEMM_TUNER");
  remake_G();
}

static void run_shape(const shape *s, const int *ms, int nm, const int64_t *ctxs, int nc, int m_max) {
  int64_t max_ctx = 1;
  for (int k = 0; k < nc; k++) if (ctxs[k] > max_ctx) max_ctx = ctxs[k];
  layer l;
  layer_make(&l, s, max_ctx);
  pz_gemm_ctx *g = G;
  pz_mla_cuda_ctx *c = NULL;
  CHECK_OK(pz_mla_cuda_create(&l.p, m_max, g, &c));
  if (c) {
    for (int a = 0; a < nm; a++)
      for (int b = 0; b < nc; b++) {
        l.p.max_ctx = ctxs[b]; /* the step's cache is sized to its own context */
        pz_mla_cuda_destroy(c);
        c = NULL;
        CHECK_OK(pz_mla_cuda_create(&l.p, m_max, g, &c));
        if (c) check_step(c, &l, ms[a], ctxs[b]);
      }
  }
  pz_mla_cuda_destroy(c);
  layer_free(&l);
}

int main(void) {
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
    printf("no CUDA GPU: test_mla skipped\n");
    return 77;
  }
  pz_ref_set_threads(0);
  CHECK_OK(pz_gemm_ctx_create(&G));
  if (!G) TEST_DONE();
  /* PZ_TEST_QUICK: no context 8192 / batch 64 on Kimi-K2 (for compute-sanitizer) */
  const int quick = getenv("PZ_TEST_QUICK") != NULL;
  {
    const int ms[] = {1, 3, 64};
    const int64_t ctx[] = {1, 7, 128, 1000};
    run_shape(&TINY, ms, 3, ctx, 4, 64);
    run_shape(&TINY4, ms, 2, ctx, 3, 64);
  }
  {
    const int ms[] = {1, 3, 64};
    const int64_t ctx[] = {1, 7, 128, 8192};
    run_shape(&K2_TP4, ms, quick ? 2 : 3, ctx, quick ? 3 : 4, 64);
  }
  {
    const int ms[] = {3};
    const int64_t ctx[] = {7, 300};
    run_shape(&K2_TP2, ms, 1, ctx, 2, 8);
    run_shape(&K2_TP1, ms, 1, ctx, 2, 8);
    run_shape(&V2LITE, ms, 1, ctx, 2, 8);
  }
  {
    /* forced split counts: one split (the switch-off), and more splits than tiles */
    const int ms[] = {3};
    const int64_t ctx[] = {300};
    setenv("PREZERO_MLA_SPLITS", "1", 1);
    remake_G();
    run_shape(&K2_TP4, ms, 1, ctx, 1, 8);
    setenv("PREZERO_MLA_SPLITS", "64", 1);
    remake_G();
    run_shape(&K2_TP4, ms, 1, ctx, 1, 8);
    unsetenv("PREZERO_MLA_SPLITS");
    remake_G();
  }
  {
    /* the version-1 attention kernel (PREZERO_MLA_ATTN=1) stays correct too */
    const int ms[] = {3, 64};
    const int64_t ctx[] = {7, 300};
    setenv("PREZERO_MLA_ATTN", "1", 1);
    remake_G();
    run_shape(&TINY, ms, 2, ctx, 2, 64);
    run_shape(&K2_TP4, ms, quick ? 1 : 2, ctx, 2, 64);
    run_shape(&K2_TP1, ms, 1, ctx, 2, 8);
    unsetenv("PREZERO_MLA_ATTN"); /* check_slots makes its own handle: keep v1 for it */
    setenv("PREZERO_MLA_ATTN", "1", 1);
    check_slots(&K2_TP4);
    unsetenv("PREZERO_MLA_ATTN");
    remake_G();
  }
  check_slots(&K2_TP4);
  check_slots(&TINY);
  check_slots(&V2LITE);
  /* argument checks */
  {
    layer l;
    layer_make(&l, &TINY, 16);
    pz_gemm_ctx *g = G;
    pz_mla_cuda_ctx *c = NULL;
    pz_mla_params bad = l.p;
    bad.kv_lora_rank = 80;
    CHECK_ST(pz_mla_cuda_create(&bad, 4, g, &c), PZ_ERR_UNSUPPORTED);
    CHECK_OK(pz_mla_cuda_create(&l.p, 4, g, &c));
    step st;
    step_make(&st, &l, 3, 16);
    pz_mla_cuda_io io = gpu_io(&l, &st);
    float *d_out = NULL;
    cudaMalloc((void **)&d_out, sizeof(float) * 3 * 512);
    io.out = d_out; io.ld_out = 512;
    CHECK_ST(pz_mla_cuda_decode(c, 5, &io, 0), PZ_ERR_INVALID_ARG);
    io.cache_seq_stride = 8;
    CHECK_ST(pz_mla_cuda_decode(c, 3, &io, 0), PZ_ERR_INVALID_ARG);
    cudaFree(d_out);
    step_free(&st);
    pz_mla_cuda_destroy(c);
    layer_free(&l);
  }
  pz_gemm_ctx_destroy(G);
  pz_ref_set_threads(1);
  TEST_DONE();
}
