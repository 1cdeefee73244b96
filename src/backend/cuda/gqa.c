/* CUDA GQA decode op: launch planning (KV splits), workspace layout and the step's sequence of
 * kernels and the o_proj split-K GEMM (gqa.h). The kernels live in kernels/gqa_kernels.cu. */
#include "backend/cuda/gqa.h"
#include <stdlib.h>
#include <string.h>
#include "core/rope.h"
#include "backend/cuda/cuda_util.h"
#include "backend/cuda/dense_ops.h"
#include "backend/cuda/gqa_kernels.h"
#include "passes/prezero.h"

struct pz_gqa_cuda_ctx {
  pz_gqa_params p;
  int m_max;
  pz_gemm_ctx *gemm;
  int sm_count, ctas_per_sm, htiles;
  int forced_splits;   /* 0: by occupancy */
  int64_t ms_cap;      /* m * splits the partial scratch holds */
  size_t b_qhl, b_o, b_opart, b_ml; /* workspace parts (bytes, 256-aligned) */
  pz_gqa_kparams k;    /* shape fields; pointers set per call */
};

static size_t align256(size_t b) { return (b + 255) / 256 * 256; }

float pz_gqa_rope_mscale(const pz_rope_params *rp) { return rp ? pz_rope_cos_sin_mscale(rp) : 1.0f; }

int pz_gqa_cuda_splits(const pz_gqa_cuda_ctx *c, int m) {
  if (!c || m < 1) return 1;
  int64_t s;
  if (c->forced_splits > 0) {
    s = c->forced_splits;
  } else {
    const int64_t per = (int64_t)m * c->p.n_kv_heads * c->htiles;
    s = (int64_t)c->sm_count * c->ctas_per_sm / per;
  }
  /* not capped by a sliding layer's window: a row the window does not cut keeps full attention's bits */
  const int64_t tiles = (c->p.max_ctx + PZ_GQA_BN - 1) / PZ_GQA_BN;
  if (s > PZ_GQA_MAX_SPLITS) s = PZ_GQA_MAX_SPLITS;
  if (s > tiles) s = tiles;
  if (s * m > c->ms_cap) s = c->ms_cap / m;
  return s < 1 ? 1 : (int)s;
}

void pz_gqa_cuda_force_splits(pz_gqa_cuda_ctx *c, int splits) {
  if (c) c->forced_splits = splits > 0 ? splits : 0;
}

pz_status pz_gqa_cuda_create(const pz_gqa_params *p, int m_max, pz_gemm_ctx *gemm, pz_gqa_cuda_ctx **out) {
  if (!p || !out || !gemm || m_max < 1 || m_max > 256)
    return pz_error(PZ_ERR_INVALID_ARG, "gqa cuda: NULL argument or m_max %d outside 1..256", m_max);
  *out = NULL;
  const int64_t heads = p->n_heads, kvh = p->n_kv_heads, d = p->head_dim;
  if (heads < 1 || kvh < 1 || heads % kvh || p->hidden < 1 || p->max_ctx < 1 || p->max_ctx > INT32_MAX)
    return pz_error(PZ_ERR_UNSUPPORTED, "gqa cuda: %lld heads over %lld kv heads (a multiple), max_ctx %lld unsupported",
                    (long long)heads, (long long)kvh, (long long)p->max_ctx);
  if (d != 16 && d != 32 && d != 64 && d != 96 && d != 128)
    return pz_error(PZ_ERR_UNSUPPORTED, "gqa cuda: head_dim %lld unsupported (the attention kernel has 16, 32, 64, 96 and 128)",
                    (long long)d);
  if (p->window < 0)
    return pz_error(PZ_ERR_UNSUPPORTED, "gqa cuda: window %lld must be >= 0 (0: full attention)", (long long)p->window);
  const int64_t rd = p->rotary_dim ? p->rotary_dim : d; /* partial RoPE (GLM-4.5): the first rd dims */
  if (rd < 2 || rd % 2 || rd > d)
    return pz_error(PZ_ERR_UNSUPPORTED, "gqa cuda: rotary_dim %lld must be 0 (head_dim) or even in 2..head_dim %lld",
                    (long long)p->rotary_dim, (long long)d);
  _Static_assert(PZ_GQA_MAX_D / 2 <= PZ_ROPE_MAX_FACTORS, "LongRoPE factors for every rotary width of the kernel");
  if (p->rope.type == PZ_ROPE_LONGROPE && p->rope.n_factors != rd / 2)
    return pz_error(PZ_ERR_UNSUPPORTED, "gqa cuda: LongRoPE with %d factors of each kind for %lld rotary dims (needs one "
                    "per pair)", (int)p->rope.n_factors, (long long)rd);
  pz_gqa_cuda_ctx *c = calloc(1, sizeof *c);
  if (!c) return pz_error(PZ_ERR_OOM, "gqa cuda: context");
  c->p = *p;
  c->m_max = m_max;
  c->gemm = gemm;
  const int ratio = (int)(heads / kvh);
  c->htiles = (ratio + PZ_GQA_HT - 1) / PZ_GQA_HT;
  pz_status st = pz_gqa_k_setup((int)d, &c->ctas_per_sm);
  int dev = 0;
  if (st != PZ_OK) goto fail;
  PZ_CUDA_CHECK_MSG_GOTO(cudaGetDevice(&dev), st, fail, "gqa cuda: cannot read the device's SM count");
  PZ_CUDA_CHECK_MSG_GOTO(cudaDeviceGetAttribute(&c->sm_count, cudaDevAttrMultiProcessorCount, dev), st, fail,
                         "gqa cuda: cannot read the device's SM count");
  {
    /* The automatic split count keeps m*splits <= max(m, slots / (kvh*htiles)); twice that
     * leaves room for a forced count, which is clamped to it. */
    int64_t ms = (int64_t)c->sm_count * c->ctas_per_sm / (kvh * c->htiles);
    if (ms < m_max) ms = m_max;
    c->ms_cap = 2 * ms;
  }
  c->b_qhl = align256((size_t)m_max * (size_t)heads * 2 * (size_t)d * 2);
  c->b_o = align256((size_t)m_max * (size_t)(heads * d) * 2);
  c->b_opart = align256((size_t)c->ms_cap * (size_t)(heads * d) * 4);
  c->b_ml = align256((size_t)c->ms_cap * (size_t)heads * 2 * 4);
  pz_gqa_kparams *k = &c->k;
  k->heads = (int)heads; k->kvh = (int)kvh; k->d = (int)d; k->rd = (int)rd;
  k->ratio = ratio; k->htiles = c->htiles;
  k->window = p->window < p->max_ctx ? (int)p->window : 0; /* a window of the whole cache changes nothing */
  k->eps = p->eps;
  k->qscale = (float)((double)p->softmax_scale * 1.4426950408889634); /* log2(e): base-2 scores */
  k->rope_ms = pz_gqa_rope_mscale(&p->rope);
  pz_rope_inv_freq(&p->rope, rd, k->inv_freq);
  pz_rope_inv_freq_long(&p->rope, rd, k->inv_freq_long); /* LongRoPE: from position rope_long_from on */
  k->rope_long_from = pz_rope_long_from(&p->rope);
  *out = c;
  return PZ_OK;
fail:
  free(c);
  return st;
}

void pz_gqa_cuda_destroy(pz_gqa_cuda_ctx *c) { free(c); }

size_t pz_gqa_cuda_workspace_bytes(const pz_gqa_cuda_ctx *c) {
  return c ? c->b_qhl + c->b_o + c->b_opart + c->b_ml : 0;
}

bool pz_gqa_cuda_oproj_zeroed(const pz_gqa_params *p, int64_t m, int tp, const pz_device_desc *dev) {
  return pz_prezero_slice_zeroed(m, p->oproj_col_offset, p->hidden, p->prezero_n_total, p->prezero_n_base, p->hidden,
                                 tp, dev);
}

/* Fills the per-call fields of the kernel block; checks what the kernels rely on. */
static pz_status bind_io(const pz_gqa_cuda_ctx *c, int m, const pz_gqa_cuda_io *io, pz_gqa_kparams *k) {
  const pz_gqa_params *p = &c->p;
  if (m < 1 || m > c->m_max) return pz_error(PZ_ERR_INVALID_ARG, "gqa cuda: m %d outside 1..%d", m, c->m_max);
  if (!io || !io->qkv || !io->o_w || !io->k_cache || !io->v_cache || !io->pos || !io->out || !io->workspace)
    return pz_error(PZ_ERR_INVALID_ARG, "gqa cuda: missing input pointer");
  if (!io->q_norm_w != !io->k_norm_w)
    return pz_error(PZ_ERR_INVALID_ARG, "gqa cuda: q_norm and k_norm weights must be given together");
  const int64_t d = p->head_dim, kvh = p->n_kv_heads, w = (p->n_heads + 2 * kvh) * d;
  if (io->ld_qkv < w) return pz_error(PZ_ERR_INVALID_ARG, "gqa cuda: ld_qkv %lld < %lld", (long long)io->ld_qkv, (long long)w);
  if (io->cache_head_stride % 8 || io->cache_seq_stride % 8 || io->cache_head_stride < p->max_ctx * d ||
      io->cache_seq_stride < (kvh - 1) * io->cache_head_stride + p->max_ctx * d || ((uintptr_t)io->k_cache & 15) ||
      ((uintptr_t)io->v_cache & 15))
    return pz_error(PZ_ERR_INVALID_ARG,
                    "gqa cuda: cache strides (seq %lld, head %lld) must be multiples of 8, head >= max_ctx*d = %lld, "
                    "seq >= kvh heads of it; caches 16-byte aligned",
                    (long long)io->cache_seq_stride, (long long)io->cache_head_stride, (long long)(p->max_ctx * d));
  if (io->workspace_bytes < pz_gqa_cuda_workspace_bytes(c) || ((uintptr_t)io->workspace & 255))
    return pz_error(PZ_ERR_INVALID_ARG, "gqa cuda: workspace of %zu bytes (256-byte aligned) needed, %zu given",
                    pz_gqa_cuda_workspace_bytes(c), io->workspace_bytes);
  *k = c->k;
  k->m = m;
  k->splits = pz_gqa_cuda_splits(c, m);
  k->qk_norm = io->q_norm_w != NULL;
  k->qkv = io->qkv; k->ld_qkv = io->ld_qkv;
  k->q_norm_w = io->q_norm_w; k->k_norm_w = io->k_norm_w;
  k->k_cache = io->k_cache; k->v_cache = io->v_cache;
  k->seq_stride = io->cache_seq_stride; k->head_stride = io->cache_head_stride;
  k->pos = io->pos;
  k->rows = io->rows;
  char *b = io->workspace;
  k->qhl = (uint16_t *)b; b += c->b_qhl;
  k->o = (uint16_t *)b; b += c->b_o;
  k->opart = (float *)b; b += c->b_opart;
  k->ml = (float *)b;
  return PZ_OK;
}

pz_status pz_gqa_cuda_attention_only(pz_gqa_cuda_ctx *c, int m, const pz_gqa_cuda_io *io, cudaStream_t s) {
  if (!c) return pz_error(PZ_ERR_INVALID_ARG, "gqa cuda: NULL context");
  pz_gqa_kparams k;
  PZ_CHECK(bind_io(c, m, io, &k));
  PZ_CHECK(pz_gqa_k_attn(&k, s));
  return pz_gqa_k_combine(&k, s);
}

pz_status pz_gqa_cuda_decode(pz_gqa_cuda_ctx *c, int m, const pz_gqa_cuda_io *io, cudaStream_t s) {
  if (!c) return pz_error(PZ_ERR_INVALID_ARG, "gqa cuda: NULL context");
  pz_gqa_kparams k;
  PZ_CHECK(bind_io(c, m, io, &k));
  PZ_CHECK(pz_gqa_k_prep(&k, s));
  PZ_CHECK(pz_gqa_k_attn(&k, s));
  PZ_CHECK(pz_gqa_k_combine(&k, s));
  const int64_t hd = c->p.n_heads * c->p.head_dim;
  pz_gemm_args g = {0};
  g.m = m; g.n = (int)c->p.hidden; g.k = (int)hd;
  g.A = k.o; g.lda = hd;
  g.W = io->o_w; g.ldw = hd;
  g.C = io->out; g.ldc = io->ld_out; g.c_dtype = PZ_F32;
  g.zero_init = !io->out_zeroed;
  g.config.flavour = PZ_GEMM_AUTO;
  return pz_cuda_gemm_any(c->gemm, &g, s); /* the split-K family, or any shape it refuses (dense_ops.h) */
}
