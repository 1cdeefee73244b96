/* CUDA MLA decode op: scratch ownership, launch planning (KV splits) and the step's sequence of
 * kernels and split-K GEMMs (mla.h). The kernels live in kernels/mla_kernels.cu. */
#include "backend/cuda/mla.h"
#include <stdlib.h>
#include <string.h>
#include "core/options.h"
#include "core/rope.h"
#include "backend/cuda/cuda_util.h"
#include "backend/cuda/mla_kernels.h"
#include "passes/prezero.h"

struct pz_mla_cuda_ctx {
  pz_mla_params p;
  int m_max;
  pz_gemm_ctx *gemm;
  int sm_count, ctas_per_sm, mt, head_groups, max_splits, attn_version;
  int forced_splits; /* 0: by occupancy */
  int waves;         /* by occupancy: 2 = two waves of CTAs where one gives fewer than 4 splits (v3 / v4) */
  int64_t ms_cap;    /* m * splits the partial scratch holds (0 while creating) */
  int last_proj_tc;  /* the last decode's absorb / W_UV ran on tensor cores (pz_mla_cuda_last_proj_tc) */
  pz_mla_kparams k;  /* shape fields and scratch pointers; io pointers set per call */
  void *scratch;
};

static int64_t align256(int64_t b) { return (b + 255) / 256 * 256; }

/* The split count for m rows with `waves` (1 or 2) waves of CTAs allowed (mla.h). */
static int splits_for(const pz_mla_cuda_ctx *c, int m, int waves) {
  int s;
  if (c->forced_splits > 0) { /* PREZERO_MLA_SPLITS, from the GEMM handle's options */
    s = c->forced_splits;
  } else {
    int64_t per = (int64_t)m * c->head_groups, slots = (int64_t)c->sm_count * c->ctas_per_sm;
    if (per < 1) per = 1;
    s = (int)(slots / per);
    if (waves == 2 && s < 4) s = (int)(2 * slots / per); /* s * m * head groups <= 2 * slots; ms_cap clamps below */
  }
  if (s > c->max_splits) s = c->max_splits;
  if (c->ms_cap > 0 && (int64_t)s * m > c->ms_cap) s = (int)(c->ms_cap / m);
  if (s < 1) s = 1;
  return s;
}

int pz_mla_cuda_splits(const pz_mla_cuda_ctx *c, int m) { return splits_for(c, m, c->waves); }

/* The one-wave split count a launch of m rows with split count s is given (bind_io), at most s. */
static int splits1_for(const pz_mla_cuda_ctx *c, int m, int s) {
  const int s1 = splits_for(c, m, 1);
  return s1 < s ? s1 : s;
}

pz_status pz_mla_cuda_last_schedule(const pz_mla_cuda_ctx *c, int m, int32_t *off, int *splits1) {
  if (!c || !off || m < 1 || m > c->m_max)
    return pz_error(PZ_ERR_INVALID_ARG, "mla cuda: NULL argument or m %d outside 1..m_max", m);
  PZ_CUDA_CHECK(cudaMemcpy(off, c->k.sched, sizeof(int32_t) * (size_t)(m + 1), cudaMemcpyDeviceToHost));
  if (splits1) *splits1 = splits1_for(c, m, pz_mla_cuda_splits(c, m));
  return PZ_OK;
}

pz_status pz_mla_cuda_create(const pz_mla_params *p, int m_max, pz_gemm_ctx *gemm, pz_mla_cuda_ctx **out) {
  if (!p || !out || !gemm || m_max < 1 || m_max > 256)
    return pz_error(PZ_ERR_INVALID_ARG, "mla cuda: NULL argument or m_max %d outside 1..256", m_max);
  *out = NULL;
  const int64_t H = p->n_heads, L = p->kv_lora_rank, rope = p->qk_rope_head_dim, nope = p->qk_nope_head_dim;
  const int64_t vd = p->v_head_dim, qh = nope + rope, kvw = L + rope, ql = p->q_lora_rank;
  if (H < 1 || rope < 2 || rope % 2 || rope > PZ_MLA_MAX_ROPE || nope < 1 || vd < 1 || p->hidden < 1 || p->max_ctx < 1)
    return pz_error(PZ_ERR_UNSUPPORTED, "mla cuda: heads %lld, rope %lld (even, <= %d), nope %lld, v %lld unsupported",
                    (long long)H, (long long)rope, PZ_MLA_MAX_ROPE, (long long)nope, (long long)vd);
  if ((ql > 0 && (ql % 64 || (H * qh) % 64)) || (H * vd) % 64 || p->hidden % 64)
    return pz_error(PZ_ERR_UNSUPPORTED, "mla cuda: GEMM dims q_lora %lld, heads*qh %lld, heads*v %lld, H %lld must be multiples of 64",
                    (long long)ql, (long long)(H * qh), (long long)(H * vd), (long long)p->hidden);
  pz_mla_cuda_ctx *c = calloc(1, sizeof *c);
  if (!c) return pz_error(PZ_ERR_OOM, "mla cuda: context");
  c->p = *p;
  c->m_max = m_max;
  c->gemm = gemm;
  /* Attention kernel: PREZERO_MLA_ATTN (the GEMM handle's options), else version 4 (ping-pong
   * warpgroups) for more than 16 heads per rank and version 2 for 16 or fewer (where v2's 16-head CTAs
   * win: bench/results/attn_paged_h200/attn_v4.md, v3 in the same run); a version without a kernel for
   * the shape or the device falls to the next lower one (v4 and v3 need the same). */
  const pz_runtime_opts *ro = pz_gemm_ctx_opts(gemm);
  int version = ro && ro->mla_attn >= 1 && ro->mla_attn <= 4 ? ro->mla_attn : H > 16 ? 4 : 2;
  c->forced_splits = ro && ro->mla_splits > 0 ? ro->mla_splits : 0;
  c->k.balance = !(ro && ro->mla_balance == 0); /* -1 unset or 1: on */
  /* v4's lazy rescale (mla_kernels.h): a threshold of 8 (P <= e^8 ~ 3e3, far inside f32 and bf16 range);
     PREZERO_MLA_LAZY=0 rescales at every increase of the running max, as v1-v3 */
  c->k.lazy_rescale = ro && ro->mla_lazy == 0 ? 0.0f : 8.0f;
  c->k.combine_warp = ro && (ro->mla_combine == 0 || ro->mla_combine == 1) ? ro->mla_combine : -1; /* mla_kernels.h */
  c->k.proj_tc = !(ro && ro->mla_proj == 0); /* absorb / W_UV on tensor cores where the shape allows (mla_kernels.h) */
  pz_status st;
  for (;; version--) {
    c->mt = pz_mla_k_attn_mt((int)H, version);
    st = pz_mla_k_attn_setup(version, c->mt, (int)L, (int)kvw, &c->ctas_per_sm);
    if (st == PZ_OK || version == 1) break;
  }
  c->attn_version = version;
  /* two waves of split slots: v3 with the balanced schedule (measured on v3 only, bench/results/
   * attn_paged_h200/attn_*_splits*; PREZERO_MLA_BALANCE=0, the former schedule, keeps one) unless
   * PREZERO_MLA_WAVES=1 */
  c->waves = version >= 3 && c->k.balance && !(ro && ro->mla_waves == 1) ? 2 : 1;
  c->head_groups = (int)((H + 16 * c->mt - 1) / (16 * c->mt));
  c->max_splits = PZ_MLA_MAX_SPLITS;
  int dev = 0;
  if (st != PZ_OK) goto fail;
  PZ_CUDA_CHECK_MSG_GOTO(cudaGetDevice(&dev), st, fail, "mla cuda: cannot read the device's SM count");
  PZ_CUDA_CHECK_MSG_GOTO(cudaDeviceGetAttribute(&c->sm_count, cudaDevAttrMultiProcessorCount, dev), st, fail,
                         "mla cuda: cannot read the device's SM count");

  pz_mla_kparams *k = &c->k;
  k->heads = (int)H; k->L = (int)L; k->rope = (int)rope; k->nope = (int)nope; k->vd = (int)vd;
  k->qh = (int)qh; k->kvw = (int)kvw; k->q_lora = (int)ql;
  k->eps = p->eps;
  k->softmax_scale = p->softmax_scale;
  k->rope_ms = pz_ref_yarn_cos_sin_mscale(&p->rope);
  pz_ref_yarn_inv_freq(&p->rope, rope, k->inv_freq);
  k->mt = c->mt;
  k->attn_version = c->attn_version;
  k->max_ctx = p->max_ctx;
  PZ_CHECK_GOTO(pz_mla_k_setup(k), st, fail);
  /* Scratch for the partials: the automatic split count keeps m*splits <= max(m, slots/head
   * groups); twice that leaves room for PREZERO_MLA_SPLITS, which is clamped to it. */
  int64_t slots = (int64_t)c->sm_count * c->ctas_per_sm;
  int64_t ms_max = slots / c->head_groups;
  if (ms_max < m_max) ms_max = m_max;
  ms_max *= 2;
  c->ms_cap = ms_max;
  const int64_t b_qcn = align256(m_max * (ql > 0 ? ql : 1) * 2);
  const int64_t b_q = align256(m_max * H * qh * 4);
  const int64_t b_qabs = align256(m_max * H * kvw * 2);
  const int64_t b_opart = align256(ms_max * H * L * 4);
  const int64_t b_ml = align256(ms_max * H * 2 * 4);
  const int64_t b_olat = align256(m_max * H * L * 4);
  const int64_t b_o = align256(m_max * H * vd * 2);
  const int64_t b_sched = align256((m_max + 1) * 4);
  const int64_t total = b_qcn + b_q + b_qabs + b_opart + b_ml + b_olat + b_o + b_sched;
  PZ_CUDA_CHECK_MSG_GOTO(cudaMalloc((void **)&c->scratch, (size_t)total), st, fail, "mla cuda: scratch of %lld bytes",
                         (long long)total);
  char *b = c->scratch;
  k->qcn = (uint16_t *)b; b += b_qcn;
  k->q = (const float *)b; b += b_q;
  k->qabs = (uint16_t *)b; b += b_qabs;
  k->opart = (float *)b; b += b_opart;
  k->ml = (float *)b; b += b_ml;
  k->olat = (float *)b; b += b_olat;
  k->o = (uint16_t *)b; b += b_o;
  k->sched = (int32_t *)b;
  *out = c;
  return PZ_OK;
fail:
  free(c);
  return st;
}

/* A destroy cannot fail: the free's result is ignored on purpose. */
void pz_mla_cuda_destroy(pz_mla_cuda_ctx *c) {
  if (!c) return;
  PZ_CUDA_IGNORE(cudaFree(c->scratch));
  free(c);
}

void *pz_mla_cuda_qabs(pz_mla_cuda_ctx *c) { return c ? c->k.qabs : NULL; }
void *pz_mla_cuda_o(pz_mla_cuda_ctx *c) { return c ? c->k.o : NULL; }
void *pz_mla_cuda_olat(pz_mla_cuda_ctx *c) { return c ? c->k.olat : NULL; }
int pz_mla_cuda_last_proj_tc(const pz_mla_cuda_ctx *c) { return c ? c->last_proj_tc : 0; }
int pz_mla_cuda_attn_version(const pz_mla_cuda_ctx *c) { return c ? c->attn_version : 0; }

void pz_mla_cuda_slots_zeroed(const pz_mla_params *p, int64_t m, int tp, const pz_device_desc *dev,
                              bool *qb_zeroed, bool *oproj_zeroed) {
  const int64_t qh = p->qk_nope_head_dim + p->qk_rope_head_dim;
  if (qb_zeroed)
    *qb_zeroed = pz_prezero_slice_zeroed(m, p->qb_col_offset, p->n_heads * qh, p->prezero_n_total,
                                         p->prezero_n_base, p->hidden, tp, dev);
  if (oproj_zeroed)
    *oproj_zeroed = pz_prezero_slice_zeroed(m, p->oproj_col_offset, p->hidden, p->prezero_n_total,
                                            p->prezero_n_base, p->hidden, tp, dev);
}

/* Fills the per-call fields of the kernel block; checks what the kernels rely on. */
static pz_status bind_io(pz_mla_cuda_ctx *c, int m, const pz_mla_cuda_io *io, pz_mla_kparams *k) {
  const pz_mla_params *p = &c->p;
  if (m < 1 || m > c->m_max) return pz_error(PZ_ERR_INVALID_ARG, "mla cuda: m %d outside 1..%d", m, c->m_max);
  if (!io || !io->kv_cache || !io->pos || !io->kva_norm_w || !io->w_uk || !io->w_uv || !io->o_w || !io->out ||
      (p->q_lora_rank > 0 ? (!io->qkv_a || !io->qa_norm_w || !io->qb_w) : (!io->q || !io->kv_a)))
    return pz_error(PZ_ERR_INVALID_ARG, "mla cuda: missing input pointer");
  const int64_t kvw = c->k.kvw;
  if (io->block_table) { /* paged: 64-row pages of kvw (a multiple of 32) columns */
    if (io->ld_block_table < (p->max_ctx + PZ_KV_BLOCK - 1) / PZ_KV_BLOCK || ((uintptr_t)io->kv_cache & 15) ||
        ((uintptr_t)io->block_table & 3))
      return pz_error(PZ_ERR_INVALID_ARG, "mla cuda: block table stride %lld must be >= ceil(max_ctx / %d) = %lld, pool 16-byte aligned",
                      (long long)io->ld_block_table, PZ_KV_BLOCK, (long long)((p->max_ctx + PZ_KV_BLOCK - 1) / PZ_KV_BLOCK));
  } else if (io->cache_seq_stride % 8 || io->cache_seq_stride < p->max_ctx * kvw || ((uintptr_t)io->kv_cache & 15)) {
    return pz_error(PZ_ERR_INVALID_ARG, "mla cuda: cache_seq_stride %lld must be a multiple of 8 and >= max_ctx*kvw = %lld, cache 16-byte aligned",
                    (long long)io->cache_seq_stride, (long long)(p->max_ctx * kvw));
  }
  *k = c->k;
  k->m = m;
  k->qkv_a = io->qkv_a; k->ld_qkv_a = io->ld_qkv_a;
  k->kv_a = io->kv_a; k->ld_kv_a = io->ld_kv_a;
  k->qa_norm_w = io->qa_norm_w; k->kva_norm_w = io->kva_norm_w;
  k->cache = io->kv_cache; k->cache_seq_stride = io->cache_seq_stride;
  k->block_table = io->block_table; k->ld_bt = io->ld_block_table;
  k->pos = io->pos;
  k->rows = io->rows;
  k->w_uk = io->w_uk; k->w_uv = io->w_uv;
  k->splits = pz_mla_cuda_splits(c, m);
  k->splits1 = splits1_for(c, m, k->splits); /* the batch's schedule takes one wave where that is no slower */
  return PZ_OK;
}

pz_status pz_mla_cuda_attention_only(pz_mla_cuda_ctx *c, int m, const pz_mla_cuda_io *io, cudaStream_t s) {
  if (!c) return pz_error(PZ_ERR_INVALID_ARG, "mla cuda: NULL context");
  pz_mla_kparams k;
  PZ_CHECK(bind_io(c, m, io, &k));
  PZ_CHECK(pz_mla_k_attn(&k, s));
  return pz_mla_k_combine(&k, s);
}

pz_status pz_mla_cuda_decode(pz_mla_cuda_ctx *c, int m, const pz_mla_cuda_io *io, cudaStream_t s) {
  if (!c) return pz_error(PZ_ERR_INVALID_ARG, "mla cuda: NULL context");
  const pz_mla_params *p = &c->p;
  pz_mla_kparams k;
  PZ_CHECK(bind_io(c, m, io, &k));
  const int64_t H = p->n_heads, qh = k.qh, ql = p->q_lora_rank;
  PZ_CHECK(pz_mla_k_prep(&k, s));
  if (ql > 0) {
    /* q_b: into the slot (zero_init unless the donor pre-zeroed it) or the op's scratch */
    float *qo = io->qb_slot ? io->qb_slot : (float *)c->k.q;
    int64_t ldq = io->qb_slot ? io->ld_qb_slot : H * qh;
    pz_gemm_args g = {0};
    g.m = m; g.n = (int)(H * qh); g.k = (int)ql;
    g.A = k.qcn; g.lda = ql;
    g.W = io->qb_w; g.ldw = ql;
    g.C = qo; g.ldc = ldq; g.c_dtype = PZ_F32;
    g.zero_init = io->qb_slot ? !io->qb_slot_zeroed : true;
    g.config.flavour = PZ_GEMM_AUTO;
    PZ_CHECK(pz_gemm_launch(c->gemm, &g, s));
    k.q = qo;
    k.ldq = ldq;
  } else {
    k.q = io->q;
    k.ldq = io->ld_q;
  }
  c->last_proj_tc = pz_mla_k_proj_tc_ok(&k); /* the path pz_mla_k_absorb and pz_mla_k_wuv take */
  PZ_CHECK(pz_mla_k_absorb(&k, s));
  PZ_CHECK(pz_mla_k_attn(&k, s));
  PZ_CHECK(pz_mla_k_combine(&k, s));
  PZ_CHECK(pz_mla_k_wuv(&k, s));
  pz_gemm_args g = {0};
  g.m = m; g.n = (int)p->hidden; g.k = (int)(H * k.vd);
  g.A = k.o; g.lda = H * k.vd;
  g.W = io->o_w; g.ldw = H * k.vd;
  g.C = io->out; g.ldc = io->ld_out; g.c_dtype = PZ_F32;
  g.zero_init = !io->out_zeroed;
  g.config.flavour = PZ_GEMM_AUTO;
  return pz_gemm_launch(c->gemm, &g, s);
}
