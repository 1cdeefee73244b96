/* CPU reference of the MLA decode op in its absorbed form (q_a_layernorm, q_b GEMM,
 * kv_a_layernorm, YaRN RoPE, cache append, latent attention, W_UV, o_proj). See ref_ops.h. */
#include "backend/cpu/ref_ops.h"
#include "backend/cpu/cpu_pool.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define BF(x) pz_bf16_to_f32(x)

typedef struct mla_job {
  const pz_mla_params *p;
  const pz_ref_mla_io *io;
  const float *q; int64_t ldq;      /* q [m, heads*qh] f32 (pre-RoPE) */
  const float *inv_freq;
  float ms;
  pz_bf16 *o;                       /* [m, heads*v] bf16 */
  int64_t max_pos;                  /* largest pos + 1 over the rows (scratch size) */
} mla_job;

/* One (row, head) pair per index: attention of head h of token i over positions 0..pos[i]. */
static void mla_heads(void *va, int64_t lo, int64_t hi) {
  const mla_job *J = va;
  const pz_mla_params *p = J->p;
  const pz_ref_mla_io *io = J->io;
  const int64_t H = p->n_heads, nope = p->qk_nope_head_dim, rope = p->qk_rope_head_dim;
  const int64_t L = p->kv_lora_rank, vd = p->v_head_dim, qh = nope + rope, kvw = L + rope;
  float *qlat = malloc(sizeof(float) * (size_t)(L + rope + L + J->max_pos));
  if (!qlat) return; /* the caller pre-checked a same-size allocation */
  float *qpe = qlat + L, *olat = qpe + rope, *sc = olat + L;
  for (int64_t idx = lo; idx < hi; idx++) {
    int64_t i = idx / H, h = idx % H;
    const float *qrow = J->q + i * J->ldq + h * qh;
    /* q_lat = q_nope · W_UK[h]  ([nope] x [nope, L]) */
    const pz_bf16 *wuk = io->w_uk + h * nope * L;
    for (int64_t c = 0; c < L; c++) {
      float a = 0.0f;
      for (int64_t d = 0; d < nope; d++) a += qrow[d] * BF(wuk[d * L + c]);
      qlat[c] = a;
    }
    for (int64_t r = 0; r < rope; r++) qpe[r] = qrow[nope + r];
    pz_ref_rope(qpe, rope, io->pos[i], J->inv_freq, J->ms);
    const pz_bf16 *cache = io->kv_cache + i * io->cache_seq_stride;
    int64_t np = (int64_t)io->pos[i] + 1;
    float mx = -INFINITY;
    for (int64_t j = 0; j < np; j++) {
      const pz_bf16 *cj = cache + j * kvw;
      float lat = 0.0f, pe = 0.0f;
      for (int64_t c = 0; c < L; c++) lat += qlat[c] * BF(cj[c]);
      for (int64_t r = 0; r < rope; r++) pe += qpe[r] * BF(cj[L + r]);
      float s = (lat + pe) * p->softmax_scale;
      sc[j] = s;
      if (s > mx) mx = s;
    }
    float sum = 0.0f;
    for (int64_t j = 0; j < np; j++) {
      sc[j] = expf(sc[j] - mx);
      sum += sc[j];
    }
    for (int64_t j = 0; j < np; j++) sc[j] = sc[j] / sum;
    for (int64_t c = 0; c < L; c++) olat[c] = 0.0f;
    for (int64_t j = 0; j < np; j++) {
      const pz_bf16 *cj = cache + j * kvw;
      float pj = sc[j];
      for (int64_t c = 0; c < L; c++) olat[c] += pj * BF(cj[c]);
    }
    const pz_bf16 *wuv = io->w_uv + h * vd * L;
    pz_bf16 *orow = J->o + i * (H * vd) + h * vd;
    for (int64_t e = 0; e < vd; e++) {
      float a = 0.0f;
      for (int64_t c = 0; c < L; c++) a += BF(wuv[e * L + c]) * olat[c];
      orow[e] = pz_f32_to_bf16(a);
    }
  }
  free(qlat);
}

pz_status pz_ref_mla_decode(int64_t m, const pz_mla_params *p, const pz_ref_mla_io *io) {
  const int64_t H = p->n_heads, nope = p->qk_nope_head_dim, rope = p->qk_rope_head_dim;
  const int64_t L = p->kv_lora_rank, vd = p->v_head_dim, qh = nope + rope, kvw = L + rope;
  const int64_t ql = p->q_lora_rank;
  if (m <= 0) return PZ_OK;
  if (rope % 2 || rope > 512 || L <= 0 || H <= 0)
    return pz_error(PZ_ERR_SHAPE, "mla: unsupported dims (rope %lld, kv_lora %lld, heads %lld)",
                    (long long)rope, (long long)L, (long long)H);
  if (!io->kv_cache || !io->pos || !io->kva_norm_w || !io->w_uk || !io->w_uv || !io->o_w || !io->out ||
      (ql > 0 ? (!io->qkv_a || !io->qa_norm_w || !io->qb_w) : (!io->q || !io->kv_a)))
    return pz_error(PZ_ERR_INVALID_ARG, "mla: missing input pointer");
  int64_t max_pos = 0;
  for (int64_t i = 0; i < m; i++) {
    if (io->pos[i] < 0 || io->pos[i] >= p->max_ctx)
      return pz_error(PZ_ERR_INVALID_ARG, "mla: position %d of row %lld outside [0, %lld)",
                      io->pos[i], (long long)i, (long long)p->max_ctx);
    if (io->pos[i] + 1 > max_pos) max_pos = io->pos[i] + 1;
  }
  pz_status st = PZ_OK;
  float *inv_freq = malloc(sizeof(float) * (size_t)(rope / 2 + 1));
  float *kvtmp = malloc(sizeof(float) * (size_t)kvw);
  pz_bf16 *o = malloc(sizeof(pz_bf16) * (size_t)(m * H * vd));
  pz_bf16 *qcn = NULL;
  float *qbuf = NULL;
  float *probe = malloc(sizeof(float) * (size_t)(L + rope + L + max_pos));
  if (!inv_freq || !kvtmp || !o || !probe) { st = pz_error(PZ_ERR_OOM, "mla: scratch allocation"); goto done; }
  pz_ref_yarn_inv_freq(&p->rope, rope, inv_freq);
  float ms = pz_ref_yarn_cos_sin_mscale(&p->rope);

  /* 1. q */
  const float *q;
  int64_t ldq;
  if (ql > 0) {
    qcn = malloc(sizeof(pz_bf16) * (size_t)(m * ql));
    if (!qcn) { st = pz_error(PZ_ERR_OOM, "mla: scratch allocation"); goto done; }
    pz_ref_rmsnorm(m, ql, io->qkv_a, PZ_F32, io->ld_qkv_a, io->qa_norm_w, p->eps, qcn, ql);
    float *qo = io->qb_out;
    int64_t ldo = io->ld_qb_out;
    bool zi = io->qb_zero_init;
    if (!qo) {
      qbuf = malloc(sizeof(float) * (size_t)(m * H * qh));
      if (!qbuf) { st = pz_error(PZ_ERR_OOM, "mla: scratch allocation"); goto done; }
      qo = qbuf;
      ldo = H * qh;
      zi = true;
    }
    pz_ref_gemm(m, H * qh, ql, qcn, ql, io->qb_w, ql, NULL, qo, ldo, 0, zi);
    q = qo;
    ldq = ldo;
  } else {
    q = io->q;
    ldq = io->ld_q;
  }
  /* 2. kv_a_layernorm + RoPE on k_pe, append to the cache at pos[i] */
  for (int64_t i = 0; i < m; i++) {
    const float *kv = ql > 0 ? io->qkv_a + i * io->ld_qkv_a + ql : io->kv_a + i * io->ld_kv_a;
    pz_bf16 *dst = io->kv_cache + i * io->cache_seq_stride + (int64_t)io->pos[i] * kvw;
    pz_ref_rmsnorm(1, L, kv, PZ_F32, L, io->kva_norm_w, p->eps, dst, L);
    for (int64_t r = 0; r < rope; r++) kvtmp[r] = kv[L + r];
    pz_ref_rope(kvtmp, rope, io->pos[i], inv_freq, ms);
    for (int64_t r = 0; r < rope; r++) dst[L + r] = pz_f32_to_bf16(kvtmp[r]);
  }
  /* 3. absorbed attention, one (row, head) per index */
  mla_job J = {.p = p, .io = io, .q = q, .ldq = ldq, .inv_freq = inv_freq, .ms = ms, .o = o, .max_pos = max_pos};
  pz_par_for(m * H, 1, mla_heads, &J);
  /* 4. o_proj */
  pz_ref_gemm(m, p->hidden, H * vd, o, H * vd, io->o_w, H * vd, NULL, io->out, io->ld_out, 0,
              io->out_zero_init);
done:
  free(inv_freq); free(kvtmp); free(o); free(qcn); free(qbuf); free(probe);
  return st;
}
