/* CUDA MLA decode op (src/backend/cuda/mla.h) against pz_ref_mla_decode: tiny, Kimi-K2 per-rank
 * (TP 1/2/4) and the no-q-LoRA layout (V2-Lite), contexts 1/7/128/8192, batches 1/3/64; the cache
 * append (rows beyond pos are never read or written: NaN sentinels), run-to-run determinism, and
 * the qb_prezero / oproj_prezero slots set vs unset bit-identical (2 K splits, docs/ARCHITECTURE.md §5).
 * Paged KV cache (core/kv_pages.h): Kimi-K2 (64 heads) and DeepSeek-V3 (128 heads) per rank at TP
 * 1/2/4/8, one batch mixing contexts 1 / 63 / 64 / 65 / 8192 (and 32768 / 100 / 4097; PZ_TEST_QUICK:
 * a subset without the long contexts) against the reference, the identity table and shuffled
 * pages (spare pages and rows past each position NaN: never read) bit-identical to the contiguous
 * cache on the GPU with the append in the right page, a captured graph following a new table,
 * and the slots bit-identical set vs unset on a shuffled paged cache. The combine's two layouts
 * (PREZERO_MLA_COMBINE) bit-identical. The absorb / W_UV on tensor cores (the default) against the exact
 * f32 kernels (PREZERO_MLA_PROJ=0), element by element. */
#define _POSIX_C_SOURCE 200809L
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "backend/cpu/ref_ops.h"
#include "backend/cuda/mla.h"
#include "backend/cuda/mla_kernels.h" /* PZ_MLA_MAX_SPLITS */
#include "core/kv_sched.h"
#include "core/kv_pages.h"
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
static const shape K2_TP8 = {"kimi-k2 tp8", 8, 7168, 1536, 512, 128, 64, 128, 50000, 32, 1, 1, 1, 1, 4096};
/* DeepSeek-V3 (configs/deepseek_v3.json): 128 heads, YaRN factor 40, beta_fast 32 */
static const shape V3_TP1 = {"deepseek-v3 tp1", 128, 7168, 1536, 512, 128, 64, 128, 10000, 40, 32, 1, 1, 1, 4096};
static const shape V3_TP2 = {"deepseek-v3 tp2", 64, 7168, 1536, 512, 128, 64, 128, 10000, 40, 32, 1, 1, 1, 4096};
static const shape V3_TP4 = {"deepseek-v3 tp4", 32, 7168, 1536, 512, 128, 64, 128, 10000, 40, 32, 1, 1, 1, 4096};
static const shape V3_TP8 = {"deepseek-v3 tp8", 16, 7168, 1536, 512, 128, 64, 128, 10000, 40, 32, 1, 1, 1, 4096};

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

/* pos0: the rows' positions (NULL: spread over [ctx/2, ctx - 1]). */
static void step_make_at(step *st, const layer *l, int m, int64_t ctx, const int32_t *pos0) {
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
  for (int i = 0; i < m; i++) st->pos[i] = pos0 ? pos0[i] : (int32_t)(ctx - 1 - (i * 37) % (ctx / 2 + 1));
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

static void step_make(step *st, const layer *l, int m, int64_t ctx) { step_make_at(st, l, m, ctx, NULL); }

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

/* GPU output rows against the reference's: the worst rms and max error ratios (of the row's rms)
 * and the non-finite count; asserts the stated tolerances. */
static void out_vs_ref(const float *ref, const float *got, int m, int64_t H, double *worst_rms, double *worst_max) {
  *worst_rms = 0;
  *worst_max = 0;
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
    if (er > *worst_rms) *worst_rms = er;
    if (em > *worst_max) *worst_max = em;
  }
  CHECK(nonfinite == 0);
  CHECK(*worst_rms <= TOL_RMS);
  CHECK(*worst_max <= TOL_MAX);
}

/* Cache rows [m, stride] of the reference (rc) and the GPU (gc): bit-identical outside the
 * appended rows, within one bf16 ulp inside; returns the count of 1-ulp values. */
static int64_t cache_vs_ref(const pz_bf16 *rc, const pz_bf16 *gc, const step *st, int64_t kvw) {
  int64_t far = 0, ulp = 0;
  for (int i = 0; i < st->m; i++)
    for (int64_t j = 0; j < st->stride; j++) {
      pz_bf16 a = rc[i * st->stride + j], b = gc[i * st->stride + j];
      if (a == b) continue;
      bool appended = j / kvw == st->pos[i];
      if (appended && !((a ^ b) & 0x8000) && abs((int)a - (int)b) == 1) ulp++;
      else far++;
    }
  CHECK(far == 0);
  return ulp;
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
  const int64_t ulp = cache_vs_ref(rc, gc, &st, l->kvw);
  double worst_rms, worst_max;
  out_vs_ref(ref, got, m, H, &worst_rms, &worst_max);
  printf("v%d %-20s m=%-3d ctx=%-5lld splits=%-2d rms err %.2e, max err %.2e (of row rms); cache: %lld values 1 ulp off\n",
         pz_mla_cuda_attn_version(c), l->s.name, m, (long long)ctx, pz_mla_cuda_splits(c, m), worst_rms, worst_max, (long long)ulp);
  free(ref); free(got); free(rc); free(gc);
  cudaFree(d_out);
  step_free(&st);
}

/* ------------------------------------------------------------------ paged cache */

/* A page pool holding a step's cache [m, ctx, kvw] (rows >= pos NaN) through a block table:
 * the identity (shuffled = 0, no spare pages) or a random permutation of m*mb + spare pages;
 * rows beyond ctx and the spare pages nobody maps are NaN. Host and device copies. */
typedef struct paged {
  int m;
  int64_t ctx, kvw, mb, n_pages;
  int32_t *table, *d_table;
  pz_bf16 *pool, *d_pool;
} paged;

static void paged_make(paged *pg, const step *st, int64_t kvw, int shuffled, int64_t spare) {
  memset(pg, 0, sizeof *pg);
  pg->m = st->m; pg->ctx = st->ctx; pg->kvw = kvw;
  pg->mb = pz_kv_max_blocks(st->ctx);
  pg->n_pages = st->m * pg->mb + spare;
  int32_t *perm = malloc(sizeof(int32_t) * (size_t)pg->n_pages);
  for (int64_t k = 0; k < pg->n_pages; k++) perm[k] = (int32_t)k;
  for (int64_t k = pg->n_pages - 1; shuffled && k > 0; k--) {
    const int64_t r = (int64_t)(next_u32() % (uint32_t)(k + 1));
    const int32_t t = perm[k]; perm[k] = perm[r]; perm[r] = t;
  }
  pg->table = malloc(sizeof(int32_t) * (size_t)(st->m * pg->mb));
  memcpy(pg->table, perm, sizeof(int32_t) * (size_t)(st->m * pg->mb));
  free(perm);
  const size_t n = (size_t)(pg->n_pages * PZ_KV_BLOCK * kvw);
  pg->pool = malloc(sizeof(pz_bf16) * n);
  for (size_t x = 0; x < n; x++) pg->pool[x] = 0xffff;
  for (int i = 0; i < st->m; i++)
    for (int64_t j = 0; j < st->ctx; j++)
      memcpy(pg->pool + pz_kv_row_offset(pg->table, pg->mb, 0, i, j, kvw), st->cache + i * st->stride + j * kvw,
             sizeof(pz_bf16) * (size_t)kvw);
  pg->d_pool = dev_copy(pg->pool, sizeof(pz_bf16) * n);
  pg->d_table = dev_copy(pg->table, sizeof(int32_t) * (size_t)(st->m * pg->mb));
}

static void paged_free(paged *pg) {
  free(pg->table); free(pg->pool);
  cudaFree(pg->d_table); cudaFree(pg->d_pool);
}

static size_t paged_bytes(const paged *pg) { return sizeof(pz_bf16) * (size_t)(pg->n_pages * PZ_KV_BLOCK * pg->kvw); }

static void paged_io(pz_mla_cuda_io *io, const paged *pg) {
  io->kv_cache = pg->d_pool;
  io->cache_seq_stride = 0;
  io->block_table = pg->d_table;
  io->ld_block_table = pg->mb;
}

/* The device pool after a step against the contiguous cache after the same step (gc, [m, ctx,
 * kvw]): every logical row bit-identical, every other pool row (beyond ctx, spare pages) still
 * the NaN it held. Returns the differing count. */
static int64_t paged_vs_contiguous(const paged *pg, const pz_bf16 *gc) {
  const size_t n = paged_bytes(pg) / sizeof(pz_bf16);
  pz_bf16 *got = malloc(sizeof(pz_bf16) * n), *want = malloc(sizeof(pz_bf16) * n);
  cudaMemcpy(got, pg->d_pool, sizeof(pz_bf16) * n, cudaMemcpyDeviceToHost);
  for (size_t x = 0; x < n; x++) want[x] = 0xffff;
  for (int i = 0; i < pg->m; i++)
    for (int64_t j = 0; j < pg->ctx; j++)
      memcpy(want + pz_kv_row_offset(pg->table, pg->mb, 0, i, j, pg->kvw), gc + (i * pg->ctx + j) * pg->kvw,
             sizeof(pz_bf16) * (size_t)pg->kvw);
  int64_t diff = 0;
  for (size_t x = 0; x < n; x++) diff += got[x] != want[x];
  free(got); free(want);
  return diff;
}

/* One decode batch at contexts ctx[0..m-1] (each row's new token at position ctx - 1), contiguous cache:
 * the layer, the step, the CPU reference's output [m, H] and cache, and a device output buffer [m, H] f32. */
typedef struct {
  layer l;
  step st;
  int32_t *pos;
  float *ref;
  pz_bf16 *rc;
  float *d_out;
  int64_t ob, cb; /* bytes of one output, of the cache */
} batch;

static void batch_make(batch *b, const shape *s, const int64_t *ctx, int m) {
  int64_t maxc = 1;
  for (int i = 0; i < m; i++) if (ctx[i] > maxc) maxc = ctx[i];
  layer_make(&b->l, s, maxc);
  b->pos = malloc(sizeof(int32_t) * (size_t)m);
  for (int i = 0; i < m; i++) b->pos[i] = (int32_t)(ctx[i] - 1);
  step_make_at(&b->st, &b->l, m, maxc, b->pos);
  b->ob = (int64_t)sizeof(float) * m * s->H;
  b->cb = (int64_t)sizeof(pz_bf16) * m * b->st.stride;
  b->ref = malloc((size_t)b->ob);
  b->rc = malloc((size_t)b->cb);
  reference(&b->l, &b->st, b->ref, b->rc);
  b->d_out = NULL;
  CHECK(cudaMalloc((void **)&b->d_out, (size_t)b->ob) == cudaSuccess);
}

static void batch_free(batch *b) {
  free(b->pos); free(b->ref); free(b->rc);
  cudaFree(b->d_out);
  step_free(&b->st);
  layer_free(&b->l);
}

/* One batch of rows with contexts ctx[0..m-1] (pos = ctx - 1): the contiguous GPU step against
 * the reference (stated tolerances, append within one ulp), then the identity table and shuffled
 * pages (3 + mb spare NaN pages) bit-identical to the contiguous GPU step, output and cache;
 * with `graph`, the shuffled step captured in a CUDA graph and replayed after the pages moved to
 * another shuffle (pool and table rewritten): the same bits again. 2 K splits (deterministic). */
static void check_paged(const shape *s, const int64_t *ctx, int m, int graph) {
  batch b;
  batch_make(&b, s, ctx, m);
  pz_mla_cuda_ctx *c = NULL;
  CHECK_OK(pz_mla_cuda_create(&b.l.p, m, G, &c));
  if (!c) { batch_free(&b); return; }
  const int32_t *pos = b.pos;
  const int64_t H = s->H, cb = b.cb, ob = b.ob;
  float *ref = b.ref, *got = malloc((size_t)ob), *got2 = malloc((size_t)ob);
  pz_bf16 *rc = b.rc, *gc = malloc((size_t)cb);
  float *d_out = b.d_out;
  pz_mla_cuda_io io = gpu_io(&b.l, &b.st);
  io.out = d_out; io.ld_out = H; io.out_zeroed = false;
  CHECK_OK(pz_mla_cuda_decode(c, m, &io, 0));
  CHECK(cudaDeviceSynchronize() == cudaSuccess);
  cudaMemcpy(got, d_out, (size_t)ob, cudaMemcpyDeviceToHost);
  cudaMemcpy(gc, b.st.d_cache, (size_t)cb, cudaMemcpyDeviceToHost);
  const int64_t ulp = cache_vs_ref(rc, gc, &b.st, b.l.kvw);
  double wr, wm;
  out_vs_ref(ref, got, m, H, &wr, &wm);
  if (!getenv("PREZERO_MLA_BALANCE")) { /* the slot offsets the device's schedule wrote: its host twin's */
    int32_t *doff = malloc(sizeof(int32_t) * (size_t)(m + 1)), *hoff = malloc(sizeof(int32_t) * (size_t)(m + 1));
    int s1 = 0;
    CHECK_OK(pz_mla_cuda_last_schedule(c, m, doff, &s1));
    pz_kv_sched_waves(pos, m, pz_mla_cuda_splits(c, m), s1, PZ_MLA_MAX_SPLITS, hoff);
    if (memcmp(doff, hoff, sizeof(int32_t) * (size_t)(m + 1))) {
      fprintf(stderr, "%s m=%d: the device's slot offsets differ from pz_kv_sched_waves (slots %d vs %d, splits %d / %d)\n",
              s->name, m, doff[m], hoff[m], pz_mla_cuda_splits(c, m), s1);
      pz_test_failures++;
    }
    free(doff);
    free(hoff);
  }
  int64_t dout[2] = {0, 0}, dpool[2] = {0, 0}, dgraph = -1;
  for (int v = 0; v < 2; v++) {
    paged pg;
    paged_make(&pg, &b.st, b.l.kvw, v, v ? pz_kv_max_blocks(b.st.ctx) + 3 : 0);
    pz_mla_cuda_io pio = io;
    paged_io(&pio, &pg);
    cudaMemset(d_out, 0xff, (size_t)ob);
    CHECK_OK(pz_mla_cuda_decode(c, m, &pio, 0));
    CHECK(cudaDeviceSynchronize() == cudaSuccess);
    cudaMemcpy(got2, d_out, (size_t)ob, cudaMemcpyDeviceToHost);
    for (int64_t x = 0; x < m * H; x++) dout[v] += memcmp(&got[x], &got2[x], 4) != 0;
    dpool[v] = paged_vs_contiguous(&pg, gc);
    if (v == 1 && graph) {
      /* capture the shuffled step, then move the prompt KV to a second shuffle and replay */
      cudaStream_t cs;
      cudaGraph_t gr = NULL;
      cudaGraphExec_t ge = NULL;
      CHECK(cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking) == cudaSuccess);
      CHECK(cudaStreamBeginCapture(cs, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
      CHECK_OK(pz_mla_cuda_decode(c, m, &pio, cs));
      CHECK(cudaStreamEndCapture(cs, &gr) == cudaSuccess);
      CHECK(gr && cudaGraphInstantiate(&ge, gr, 0) == cudaSuccess);
      paged pg2;
      paged_make(&pg2, &b.st, b.l.kvw, 1, pg.n_pages - b.st.m * pg.mb);
      CHECK(pg2.n_pages == pg.n_pages);
      cudaMemcpy(pg.d_pool, pg2.pool, paged_bytes(&pg2), cudaMemcpyHostToDevice);
      cudaMemcpy(pg.d_table, pg2.table, sizeof(int32_t) * (size_t)(m * pg.mb), cudaMemcpyHostToDevice);
      cudaMemset(d_out, 0xff, (size_t)ob);
      if (ge) {
        CHECK(cudaGraphLaunch(ge, cs) == cudaSuccess);
        CHECK(cudaStreamSynchronize(cs) == cudaSuccess);
      }
      cudaMemcpy(got2, d_out, (size_t)ob, cudaMemcpyDeviceToHost);
      dgraph = 0;
      for (int64_t x = 0; x < m * H; x++) dgraph += memcmp(&got[x], &got2[x], 4) != 0;
      /* the replay appended into pg2's pages, read from pg's device pool */
      cudaMemcpy(pg2.d_pool, pg.d_pool, paged_bytes(&pg2), cudaMemcpyDeviceToDevice);
      dgraph += paged_vs_contiguous(&pg2, gc);
      paged_free(&pg2);
      if (ge) cudaGraphExecDestroy(ge);
      if (gr) cudaGraphDestroy(gr);
      cudaStreamDestroy(cs);
    }
    paged_free(&pg);
  }
  CHECK(dout[0] == 0 && dout[1] == 0);
  CHECK(dpool[0] == 0 && dpool[1] == 0);
  if (graph) CHECK(dgraph == 0);
  printf("paged v%d %-16s m=%d ctx", pz_mla_cuda_attn_version(c), s->name, m);
  for (int i = 0; i < m; i++) printf(" %lld", (long long)ctx[i]);
  printf(": rms err %.2e, max err %.2e, %lld cache values 1 ulp off; identity / shuffled differ in %lld / %lld outputs, "
         "%lld / %lld pool values%s\n", wr, wm, (long long)ulp, (long long)dout[0], (long long)dout[1], (long long)dpool[0],
         (long long)dpool[1], graph ? (dgraph == 0 ? "; graph replay on moved pages identical" : "; graph replay DIFFERS") : "");
  free(got); free(got2); free(gc);
  pz_mla_cuda_destroy(c);
  batch_free(&b);
}

/* One batch (contexts ctx[0..m-1], contiguous cache) through the combine's layouts: the default (by
 * split slots per row), PREZERO_MLA_COMBINE=1 (one warp per row, head and 128 columns) and
 * PREZERO_MLA_COMBINE=0 (one CTA per row and head): the default against the reference, and all three
 * bit-identical. Returns the most slices a row of the batch had (the device's schedule). 2 K splits
 * (deterministic GEMMs) are set by the caller. */
static int check_combine_paths(const shape *s, const int64_t *ctx, int m) {
  batch b;
  batch_make(&b, s, ctx, m);
  const int64_t H = s->H, ob = b.ob;
  float *got[3] = {malloc((size_t)ob), malloc((size_t)ob), malloc((size_t)ob)};
  float *d_out = b.d_out;
  int most = -1, version = 0; /* the most slices of a row */
  int64_t diff[3] = {0, 0, 0};
  for (int v = 0; v < 3; v++) {
    if (v >= 1) setenv("PREZERO_MLA_COMBINE", v == 1 ? "1" : "0", 1);
    remake_G();
    pz_mla_cuda_ctx *c = NULL;
    CHECK_OK(pz_mla_cuda_create(&b.l.p, m, G, &c));
    if (c) {
      pz_mla_cuda_io io = gpu_io(&b.l, &b.st);
      io.out = d_out; io.ld_out = H; io.out_zeroed = false;
      cudaMemset(d_out, 0xff, (size_t)ob);
      CHECK_OK(pz_mla_cuda_decode(c, m, &io, 0));
      CHECK(cudaDeviceSynchronize() == cudaSuccess);
      cudaMemcpy(got[v], d_out, (size_t)ob, cudaMemcpyDeviceToHost);
      if (v == 0) {
        double wr, wm;
        out_vs_ref(b.ref, got[0], m, H, &wr, &wm);
        version = pz_mla_cuda_attn_version(c);
        int32_t *off = malloc(sizeof(int32_t) * (size_t)(m + 1));
        int s1 = 0;
        CHECK_OK(pz_mla_cuda_last_schedule(c, m, off, &s1));
        most = 0;
        for (int i = 0; i < m; i++) if (off[i + 1] - off[i] > most) most = off[i + 1] - off[i];
        free(off);
      }
      pz_mla_cuda_destroy(c);
    }
    for (int64_t x = 0; x < m * H; x++) diff[v] += memcmp(&got[0][x], &got[v][x], 4) != 0;
  }
  unsetenv("PREZERO_MLA_COMBINE");
  remake_G();
  CHECK(diff[1] == 0 && diff[2] == 0);
  printf("combine layouts v%d %-16s m=%d (up to %d slices per row): against the default, PREZERO_MLA_COMBINE=1 differs in "
         "%lld outputs, PREZERO_MLA_COMBINE=0 in %lld\n", version, s->name, m, most, (long long)diff[1], (long long)diff[2]);
  free(got[0]); free(got[1]); free(got[2]);
  batch_free(&b);
  return most;
}

/* Slots: unset vs set (pre-zeroed, zero_init = false) vs set on stale data (zero_init = true)
 * give the same bits with 2 K splits; a slot claimed zeroed but holding data shows in the
 * result (negative control); repeated runs are bit-identical. `paged`: all of it on a shuffled
 * page pool (core/kv_pages.h) instead of the contiguous cache. */
static void check_slots(const shape *s, int paged_cache) {
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
  paged pg;
  memset(&pg, 0, sizeof pg);
  if (paged_cache) { /* shuffled pages, 5 spare */
    paged_make(&pg, &st, l.kvw, 1, 5);
    paged_io(&io, &pg);
  }
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
  printf("slots %-18s%s set vs unset: %lld / %lld differing values (stale-claimed-zero control: %lld)\n", s->name,
         paged_cache ? " (paged)" : "", (long long)diff2, (long long)diff3, (long long)diff4);
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
  if (paged_cache) paged_free(&pg);
  pz_mla_cuda_destroy(c);
  layer_free(&l);
  unsetenv("PREZERO_GEMM_SPLITS");
  unsetenv("PREZERO_GEMM_TUNER");
  remake_G();
}

/* |a - b| <= 2^-6 (|b| + scale) for bf16 values a and b: the absorbed q of check_proj_paths' two paths
 * differs by the rounding of q to bf16 (2^-9 relative per term) and the final rounding (2^-9) */
static int64_t bf16_far(const pz_bf16 *a, const pz_bf16 *b, int64_t n, double scale) {
  int64_t far = 0;
  for (int64_t j = 0; j < n; j++) {
    const double x = pz_bf16_to_f32(a[j]), y = pz_bf16_to_f32(b[j]);
    if (!(fabs(x - y) <= (fabs(y) + scale) / 64.0)) far++;
  }
  return far;
}

/* got[n] (bf16) against ref[n] (double): |got - ref| <= (|ref| + rms(ref)) / 128, i.e. the output's own
 * bf16 rounding (2^-9 relative) with room for f32 sums; returns the count beyond */
static int64_t bf16_vs_exact(const pz_bf16 *got, const double *ref, int64_t n) {
  double ss = 0;
  for (int64_t j = 0; j < n; j++) ss += ref[j] * ref[j];
  const double rms = sqrt(ss / (double)(n > 0 ? n : 1));
  int64_t far = 0;
  for (int64_t j = 0; j < n; j++)
    if (!(fabs(pz_bf16_to_f32(got[j]) - ref[j]) <= (fabs(ref[j]) + rms) / 128.0)) far++;
  return far;
}
static double round_bf16(double x, int round) { return round ? pz_bf16_to_f32(pz_f32_to_bf16((float)x)) : x; }

/* The absorb and W_UV on tensor cores (the default) against the exact f32 kernels (PREZERO_MLA_PROJ=0):
 * - both op outputs within the stated tolerances of the reference;
 * - W_UV's output o of each path against a host product of that path's own input olat with W_UV, in
 *   double (olat rounded to bf16 first on the tensor-core path), within bf16_vs_exact;
 * - without q LoRA (q is the op's input, known here) the absorbed q_lat the same way; with q LoRA (q is
 *   the q_b GEMM's output) the two paths' q_lat within bf16_far of each other;
 * - RoPE(q_pe) bit-identical on both (the same code; the GEMMs at most 2 K splits give both the same q), q_lat
 *   different somewhere, and pz_mla_cuda_last_proj_tc saying which path each ran.
 * Each path first decodes another step, so that an element the checked step failed to write would hold
 * that step's value. m picks the kernel's row tile: <= 16, <= 32, else 64. q_unaligned (no q LoRA only):
 * the op reads q one float past a 16-byte boundary with a row stride of in_w + 1 (the path without
 * cp.async). */
static void check_proj_paths(const shape *s, int m, int64_t ctx, int q_unaligned) {
  layer l;
  layer_make(&l, s, ctx);
  step st0, st;
  step_make(&st0, &l, m, ctx);
  step_make(&st, &l, m, ctx);
  const int64_t H = s->H, L = s->L, V = s->v, nope = s->nope, R = (int64_t)m * s->heads;
  const int64_t nq = R * l.kvw, no = R * V;
  float *ref = malloc(sizeof(float) * (size_t)(m * H)), *got[2], *olat = malloc(sizeof(float) * (size_t)(R * L));
  pz_bf16 *rc = malloc(sizeof(pz_bf16) * (size_t)(m * st.stride)), *qabs[2], *o[2];
  double *ex = malloc(sizeof(double) * (size_t)(L > V ? L : V));
  reference(&l, &st, ref, rc);
  float *d_out = NULL;
  cudaMalloc((void **)&d_out, sizeof(float) * (size_t)(m * H));
  double rms[2] = {0, 0}, mx[2] = {0, 0};
  int64_t ofar[2] = {0, 0}, qhost[2] = {0, 0};
  /* at most 2 K splits (0 + a + b = 0 + b + a; the resolver takes full K for q_b on these shapes): the q_b
   * GEMM gives both paths the same q bits, so RoPE(q_pe) can be compared bit for bit and q_lat differs by the
   * projection alone */
  setenv("PREZERO_GEMM_SPLITS", "2", 1);
  setenv("PREZERO_GEMM_TUNER", "0", 1);
  for (int v = 0; v < 2; v++) {
    if (v == 1) setenv("PREZERO_MLA_PROJ", "0", 1);
    remake_G();
    got[v] = malloc(sizeof(float) * (size_t)(m * H));
    qabs[v] = malloc(sizeof(pz_bf16) * (size_t)nq);
    o[v] = malloc(sizeof(pz_bf16) * (size_t)no);
    pz_mla_cuda_ctx *c = NULL;
    CHECK_OK(pz_mla_cuda_create(&l.p, m, G, &c));
    if (c) {
      for (int pass = 0; pass < 2; pass++) {
        const step *x = pass ? &st : &st0;
        /* the cache as the step found it: each decode appends one row per sequence */
        cudaMemcpy(x->d_cache, x->cache, sizeof(pz_bf16) * (size_t)(m * x->stride), cudaMemcpyHostToDevice);
        pz_mla_cuda_io io = gpu_io(&l, x);
        io.out = d_out; io.ld_out = H; io.out_zeroed = false;
        float *d_q = NULL;
        if (q_unaligned && s->q_lora == 0) {
          const int64_t ld = x->in_w + 1;
          cudaMalloc((void **)&d_q, sizeof(float) * (size_t)(m * ld + 1));
          cudaMemcpy2D(d_q + 1, sizeof(float) * (size_t)ld, x->in, sizeof(float) * (size_t)x->in_w,
                       sizeof(float) * (size_t)x->in_w, (size_t)m, cudaMemcpyHostToDevice);
          io.q = d_q + 1;
          io.ld_q = ld;
        }
        CHECK_OK(pz_mla_cuda_decode(c, m, &io, 0));
        CHECK(cudaDeviceSynchronize() == cudaSuccess);
        cudaFree(d_q);
      }
      CHECK(pz_mla_cuda_last_proj_tc(c) == (v == 0)); /* the path each run was meant to take */
      cudaMemcpy(got[v], d_out, sizeof(float) * (size_t)(m * H), cudaMemcpyDeviceToHost);
      cudaMemcpy(qabs[v], pz_mla_cuda_qabs(c), sizeof(pz_bf16) * (size_t)nq, cudaMemcpyDeviceToHost);
      cudaMemcpy(o[v], pz_mla_cuda_o(c), sizeof(pz_bf16) * (size_t)no, cudaMemcpyDeviceToHost);
      cudaMemcpy(olat, pz_mla_cuda_olat(c), sizeof(float) * (size_t)(R * L), cudaMemcpyDeviceToHost);
      out_vs_ref(ref, got[v], m, H, &rms[v], &mx[v]);
      for (int64_t r = 0; r < R; r++) { /* row r = (token i, head h) */
        const int64_t h = r % s->heads, i = r / s->heads;
        for (int64_t e = 0; e < V; e++) {
          double a = 0;
          for (int64_t cc = 0; cc < L; cc++)
            a += round_bf16(olat[r * L + cc], v == 0) * pz_bf16_to_f32(l.w_uv[(h * V + e) * L + cc]);
          ex[e] = a;
        }
        ofar[v] += bf16_vs_exact(o[v] + r * V, ex, V);
        if (s->q_lora == 0) {
          const float *q = st.in + i * st.in_w + h * l.qh;
          for (int64_t cc = 0; cc < L; cc++) {
            double a = 0;
            for (int64_t d = 0; d < nope; d++) a += round_bf16(q[d], v == 0) * pz_bf16_to_f32(l.w_uk[(h * nope + d) * L + cc]);
            ex[cc] = a;
          }
          qhost[v] += bf16_vs_exact(qabs[v] + r * l.kvw, ex, L);
        }
      }
    }
    pz_mla_cuda_destroy(c);
  }
  unsetenv("PREZERO_MLA_PROJ");
  unsetenv("PREZERO_GEMM_SPLITS");
  unsetenv("PREZERO_GEMM_TUNER");
  remake_G();
  int64_t qfar = 0, qdiff = 0, ropediff = 0;
  for (int64_t r = 0; r < R; r++) {
    const pz_bf16 *a = qabs[0] + r * l.kvw, *b = qabs[1] + r * l.kvw;
    double ss = 0;
    for (int64_t j = 0; j < L; j++) ss += (double)pz_bf16_to_f32(b[j]) * pz_bf16_to_f32(b[j]);
    qfar += bf16_far(a, b, L, sqrt(ss / (double)L));
    for (int64_t j = 0; j < L; j++) qdiff += a[j] != b[j];
    for (int64_t j = L; j < l.kvw; j++) ropediff += a[j] != b[j];
  }
  printf("absorb / W_UV %-20s m=%-3d%s tensor cores: rms err %.2e, max %.2e; exact (PREZERO_MLA_PROJ=0): %.2e, %.2e; "
         "q_lat differs in %lld of %lld (%lld beyond the bound), RoPE(q_pe) in %lld; beyond the host products: o %lld / %lld, "
         "q_lat %lld / %lld%s\n",
         s->name, m, q_unaligned ? " (q unaligned)" : "", rms[0], mx[0], rms[1], mx[1], (long long)qdiff, (long long)(R * L),
         (long long)qfar, (long long)ropediff, (long long)ofar[0], (long long)ofar[1], (long long)qhost[0],
         (long long)qhost[1], s->q_lora == 0 ? "" : " (q LoRA: not checked on the host)");
  CHECK(qfar == 0);
  CHECK(ofar[0] == 0 && ofar[1] == 0);
  CHECK(qhost[0] == 0 && qhost[1] == 0);
  CHECK(ropediff == 0);
  CHECK(qdiff > 0);
  for (int v = 0; v < 2; v++) { free(got[v]); free(qabs[v]); free(o[v]); }
  free(ref); free(rc); free(olat); free(ex);
  cudaFree(d_out);
  step_free(&st0);
  step_free(&st);
  layer_free(&l);
}

/* The attention kernel version a context for shape s picks on this device (G's options). */
static int attn_version_of(const shape *s) {
  layer l;
  layer_make(&l, s, 64);
  pz_mla_cuda_ctx *c = NULL;
  CHECK_OK(pz_mla_cuda_create(&l.p, 8, G, &c));
  const int v = pz_mla_cuda_attn_version(c);
  pz_mla_cuda_destroy(c);
  layer_free(&l);
  return v;
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
    /* the absorb / W_UV on tensor cores against the exact kernels: row tiles 16 / 32 / 64, a partial
     * 64-column block and K chunk (tiny: kv_lora 96, nope 32), 64 heads, and q from the op's input (no q LoRA),
     * 16-byte aligned or not */
    const int ms[] = {3, 20, 64};
    for (int a = 0; a < 3; a++) {
      check_proj_paths(&TINY, ms[a], 300, 0);
      check_proj_paths(&K2_TP1, ms[a], 300, 0);
    }
    check_proj_paths(&TINY, 100, 300, 0); /* two 64-row tiles, the second partial */
    check_proj_paths(&V2LITE, 20, 300, 0);
    check_proj_paths(&V2LITE, 20, 300, 1);
  }
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
    check_slots(&K2_TP4, 0);
    unsetenv("PREZERO_MLA_ATTN");
    remake_G();
  }
  {
    /* the version-2 attention kernel (PREZERO_MLA_ATTN=2, mma.sync) stays correct on the shapes
     * that version 3 (the default on sm_90 for kv_lora 512 / rope 64) now takes */
    const int ms[] = {3, 64};
    const int64_t ctx[] = {7, 300};
    setenv("PREZERO_MLA_ATTN", "2", 1);
    remake_G();
    run_shape(&K2_TP4, ms, quick ? 1 : 2, ctx, 2, 64);
    run_shape(&K2_TP1, ms, 1, ctx, 2, 8);
    /* version 3 forced where the default picks version 2 (16 and 8 heads per rank: padded to 64) */
    setenv("PREZERO_MLA_ATTN", "3", 1);
    remake_G();
    run_shape(&K2_TP4, ms, quick ? 1 : 2, ctx, 2, 64);
    run_shape(&K2_TP8, ms, 1, ctx, 2, 8);
    /* a shape version 3 has no kernel for (kv_lora_rank / rope other than 512 / 64): it falls to v2 */
    run_shape(&TINY, ms, 1, ctx, 2, 64);
    CHECK(attn_version_of(&TINY) == 2);
    unsetenv("PREZERO_MLA_ATTN");
    remake_G();
  }
  {
    /* version 4 (ping-pong warpgroups) is the default above 16 heads per rank; version 3
     * (PREZERO_MLA_ATTN=3, the former default) stays correct on those shapes, and version 4 forced at 16
     * heads (padded to 64) too, with the prezero slots bit-identical set vs unset */
    const int ms[] = {3, 64};
    const int64_t ctx[] = {7, 300};
    CHECK(attn_version_of(&K2_TP1) == 4);
    /* v4 with the running max moved at every increase (PREZERO_MLA_LAZY=0): O's rescale runs on most
       tiles (the default's threshold of 8 rarely takes it on these scores) */
    setenv("PREZERO_MLA_LAZY", "0", 1);
    remake_G();
    {
      const int64_t cl[] = {7, 300, 2049};
      run_shape(&K2_TP1, ms, 1, cl, 3, 8);
      run_shape(&K2_TP2, ms, 1, cl, 3, 8);
    }
    unsetenv("PREZERO_MLA_LAZY");
    setenv("PREZERO_MLA_ATTN", "3", 1);
    remake_G();
    run_shape(&K2_TP1, ms, 2, ctx, 2, 64);
    run_shape(&K2_TP2, ms, quick ? 1 : 2, ctx, 2, 64);
    setenv("PREZERO_MLA_ATTN", "4", 1);
    remake_G();
    run_shape(&K2_TP4, ms, 1, ctx, 2, 64);
    if (!quick) {
      const int ml[] = {2};
      const int64_t cl[] = {4095, 4128};
      run_shape(&V3_TP1, ml, 1, cl, 2, 8);
    }
    unsetenv("PREZERO_MLA_ATTN");
    setenv("PREZERO_MLA_ATTN", "4", 1);
    check_slots(&K2_TP4, 0);
    check_slots(&V3_TP8, 1);
    unsetenv("PREZERO_MLA_ATTN");
    remake_G();
  }
  check_slots(&K2_TP4, 0);
  check_slots(&TINY, 0);
  check_slots(&V2LITE, 0);
  check_slots(&K2_TP4, 1);
  check_slots(&V3_TP8, 1);
  check_slots(&V2LITE, 1);
  {
    /* paged cache at the Kimi-K2 / DeepSeek-V3 per-rank shapes of TP 1/2/4/8, mixed contexts in
     * one batch, deterministic GEMMs (2 K splits) for the bit-identity */
    setenv("PREZERO_GEMM_SPLITS", "2", 1);
    setenv("PREZERO_GEMM_TUNER", "0", 1);
    remake_G();
    const shape *k2[4] = {&K2_TP1, &K2_TP2, &K2_TP4, &K2_TP8}, *v3[4] = {&V3_TP1, &V3_TP2, &V3_TP4, &V3_TP8};
    const int64_t mixed[5] = {1, 63, 64, 65, 8192}, mixed_q[5] = {1, 63, 64, 65, 300}, longc[3] = {32768, 100, 4097};
    /* m = 64 on version 4 (Kimi-K2 TP 1): the grid has two waves of slots (4 splits) and each step's
     * schedule fills one (equal contexts) or both (unequal ones; tests/test_kv_sched.c checks which
     * these two batches take): both against the CPU reference */
    {
      /* the split count: two waves of slots (v3 / v4, fewer than 4 splits in one wave), one wave with
       * PREZERO_MLA_WAVES=1 or PREZERO_MLA_BALANCE=0 (the former schedule keeps its grid) */
      layer l;
      layer_make(&l, &K2_TP1, 300);
      int sp[3] = {0, 0, 0}, ver = 0;
      const char *env[3] = {NULL, "PREZERO_MLA_WAVES", "PREZERO_MLA_BALANCE"}, *val[3] = {NULL, "1", "0"};
      for (int e = 0; e < 3; e++) {
        if (env[e]) setenv(env[e], val[e], 1);
        remake_G();
        pz_mla_cuda_ctx *c = NULL;
        CHECK_OK(pz_mla_cuda_create(&l.p, 64, G, &c));
        if (c) {
          sp[e] = pz_mla_cuda_splits(c, 64);
          if (e == 0) ver = pz_mla_cuda_attn_version(c);
          pz_mla_cuda_destroy(c);
        }
        if (env[e]) unsetenv(env[e]);
      }
      remake_G();
      CHECK(sp[1] >= 1 && sp[1] == sp[2]);
      if (ver >= 3 && sp[1] < 4) CHECK(sp[0] > sp[1] && sp[0] <= 2 * sp[1] + 1);
      else CHECK(sp[0] == sp[1]);
      printf("MLA splits at m 64, Kimi-K2 TP 1, v%d: %d (two waves), %d (PREZERO_MLA_WAVES=1), %d (PREZERO_MLA_BALANCE=0)\n", ver,
             sp[0], sp[1], sp[2]);
      layer_free(&l);
    }
    {
      /* the combine's layouts: equal contexts at m 128 (one slice per row), unequal ones at m 64 (the
       * short rows one slice, the long ones split), m 3 with a row of more than 32 slices (the lanes'
       * second (max, sum)), and 128 heads (two head groups per slot) */
      int64_t flat[128], wide[64];
      for (int i = 0; i < 128; i++) flat[i] = 300;
      for (int i = 0; i < 64; i++) wide[i] = i % 2 ? 1000 - 7 * i : 65 + i;
      const int64_t few[3] = {7, 300, 8192};
      CHECK(check_combine_paths(&K2_TP1, flat, 128) >= 1);
      CHECK(check_combine_paths(&K2_TP1, wide, 64) > 1);
      CHECK(check_combine_paths(&K2_TP1, few, 3) > 32);
      CHECK(check_combine_paths(&V3_TP1, few, 3) > 1);
      if (!quick) check_combine_paths(&K2_TP2, mixed, 5);
    }
    {
      int64_t wide[64], flat[64];
      for (int i = 0; i < 64; i++) wide[i] = i % 2 ? 1000 - 7 * i : 65 + i, flat[i] = 300;
      check_paged(&K2_TP1, wide, 64, 1);
      check_paged(&K2_TP1, flat, 64, 0);
    }
    for (int k = 0; k < 4; k++) {
      if (quick && k != 2 && k != 3) continue;
      check_paged(k2[k], quick ? mixed_q : mixed, 5, k == 3);
      check_paged(v3[k], quick ? mixed_q : mixed, 5, k == 0);
    }
    if (!quick) {
      check_paged(&K2_TP8, longc, 3, 0);
      check_paged(&V3_TP1, longc, 3, 1);
      /* the version-1 and version-2 attention kernels read through the table too */
      setenv("PREZERO_MLA_ATTN", "1", 1);
      remake_G();
      check_paged(&K2_TP2, mixed, 5, 0);
      setenv("PREZERO_MLA_ATTN", "2", 1);
      remake_G();
      check_paged(&K2_TP1, mixed, 5, 0);
      setenv("PREZERO_MLA_ATTN", "3", 1);
      remake_G();
      check_paged(&K2_TP8, mixed, 5, 0);
      unsetenv("PREZERO_MLA_ATTN");
    }
    /* version 3 through the table (version 4, the default, runs every check above): mixed contexts (1 to
     * 8192, one batch), a shuffled table, and the two-wave schedule of unequal contexts at m 64 */
    setenv("PREZERO_MLA_ATTN", "3", 1);
    remake_G();
    check_paged(&K2_TP1, quick ? mixed_q : mixed, 5, 1);
    check_paged(&V3_TP2, quick ? mixed_q : mixed, 5, 0);
    if (!quick) {
      int64_t wide[64];
      for (int i = 0; i < 64; i++) wide[i] = i % 2 ? 1000 - 7 * i : 65 + i;
      check_paged(&K2_TP1, wide, 64, 1);
      check_paged(&K2_TP1, longc, 3, 0);
    }
    unsetenv("PREZERO_MLA_ATTN");
    unsetenv("PREZERO_GEMM_SPLITS");
    unsetenv("PREZERO_GEMM_TUNER");
    remake_G();
  }
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
    int32_t off5[6];
    CHECK_ST(pz_mla_cuda_last_schedule(NULL, 3, off5, NULL), PZ_ERR_INVALID_ARG);
    CHECK_ST(pz_mla_cuda_last_schedule(c, 3, NULL, NULL), PZ_ERR_INVALID_ARG);
    CHECK_ST(pz_mla_cuda_last_schedule(c, 5, off5, NULL), PZ_ERR_INVALID_ARG); /* m above m_max 4 */
    step st;
    step_make(&st, &l, 3, 16);
    pz_mla_cuda_io io = gpu_io(&l, &st);
    float *d_out = NULL;
    cudaMalloc((void **)&d_out, sizeof(float) * 3 * 512);
    io.out = d_out; io.ld_out = 512;
    CHECK_ST(pz_mla_cuda_decode(c, 5, &io, 0), PZ_ERR_INVALID_ARG);
    io.cache_seq_stride = 8;
    CHECK_ST(pz_mla_cuda_decode(c, 3, &io, 0), PZ_ERR_INVALID_ARG);
    paged pg;
    paged_make(&pg, &st, l.kvw, 1, 0);
    paged_io(&io, &pg);
    io.ld_block_table = 0; /* fewer columns than ceil(max_ctx / 64) */
    CHECK_ST(pz_mla_cuda_decode(c, 3, &io, 0), PZ_ERR_INVALID_ARG);
    io.ld_block_table = pg.mb;
    CHECK_OK(pz_mla_cuda_decode(c, 3, &io, 0));
    paged_free(&pg);
    cudaFree(d_out);
    step_free(&st);
    pz_mla_cuda_destroy(c);
    layer_free(&l);
  }
  pz_gemm_ctx_destroy(G);
  pz_ref_set_threads(1);
  TEST_DONE();
}
