/* CPU reference of the MLA decode op in its absorbed form (q_a_layernorm, q_b GEMM,
 * kv_a_layernorm, YaRN RoPE, cache append, latent attention, W_UV, o_proj). See ref_ops.h. */
#include "backend/cpu/ref_ops.h"
#include "core/kv_pages.h"
#include "core/pool.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define BF(x) pz_bf16_to_f32(x)

typedef float pz_v4 __attribute__((vector_size(16)));
typedef uint32_t pz_u4 __attribute__((vector_size(16)));
/* 4 consecutive bf16 -> 4 f32 lanes (exact). */
static inline pz_v4 bf4(const pz_bf16 *p) {
  pz_u4 u = {p[0], p[1], p[2], p[3]};
  u <<= 16;
  pz_v4 f;
  memcpy(&f, &u, 16);
  return f;
}
static inline pz_v4 ld4(const float *p) { pz_v4 f; memcpy(&f, p, 16); return f; }
static inline void st4(float *p, pz_v4 f) { memcpy(p, &f, 16); }

typedef struct mla_job {
  const pz_mla_params *p;
  const pz_ref_mla_io *io;
  const float *q; int64_t ldq;      /* q [m, heads*qh] f32 (pre-RoPE) */
  const float *inv_freq;
  float ms;
  pz_bf16 *o;                       /* [m, heads*v] bf16 */
  int64_t max_pos;                  /* largest pos + 1 over the rows (scratch size) */
  int64_t row;                      /* the sequence being processed */
  float *cf;                        /* its cache rows 0..pos as f32 [pos+1, kvw] */
  int failed;                       /* set to 1 when a worker's scratch allocation failed */
} mla_job;

/* Cache positions [lo, hi) of row J->row to f32. */
static void mla_convert(void *va, int64_t lo, int64_t hi) {
  const mla_job *J = va;
  const int64_t kvw = J->p->kv_lora_rank + J->p->qk_rope_head_dim;
  const pz_ref_mla_io *io = J->io;
  for (int64_t j = lo; j < hi; j++) {
    const pz_bf16 *src = io->kv_cache + pz_kv_row_offset(io->block_table, io->ld_block_table, io->cache_seq_stride, J->row, j, kvw);
    float *dst = J->cf + j * kvw;
    for (int64_t c = 0; c < kvw; c++) dst[c] = BF(src[c]);
  }
}

/* Heads [lo, hi) of row J->row: attention over positions 0..pos. Every sum below runs in the
 * order ref_ops.h documents (independent sums may be interleaved or run as vector lanes). */
static void mla_heads(void *va, int64_t lo, int64_t hi) {
  mla_job *J = va;
  const pz_mla_params *p = J->p;
  const pz_ref_mla_io *io = J->io;
  const int64_t H = p->n_heads, nope = p->qk_nope_head_dim, rope = p->qk_rope_head_dim;
  const int64_t L = p->kv_lora_rank, vd = p->v_head_dim, qh = nope + rope, kvw = L + rope;
  const int64_t i = J->row, L4 = L / 4 * 4;
  float *qlat = malloc(sizeof(float) * (size_t)(L + rope + L + J->max_pos));
  if (!qlat) { __atomic_store_n(&J->failed, 1, __ATOMIC_RELAXED); return; }
  float *qpe = qlat + L, *olat = qpe + rope, *sc = olat + L;
  for (int64_t h = lo; h < hi; h++) {
    const float *qrow = J->q + i * J->ldq + h * qh;
    /* q_lat[c] = Σ_d q_nope[d] * W_UK[h,d,c], d in order (vector lanes over c) */
    const pz_bf16 *wuk = io->w_uk + h * nope * L;
    for (int64_t c = 0; c < L; c++) qlat[c] = 0.0f;
    for (int64_t d = 0; d < nope; d++) {
      const float qd = qrow[d];
      const pz_v4 qv = {qd, qd, qd, qd};
      const pz_bf16 *w = wuk + d * L;
      int64_t c = 0;
      for (; c < L4; c += 4) st4(qlat + c, ld4(qlat + c) + qv * bf4(w + c));
      for (; c < L; c++) qlat[c] += qd * BF(w[c]);
    }
    for (int64_t r = 0; r < rope; r++) qpe[r] = qrow[nope + r];
    pz_ref_rope(qpe, rope, io->pos[i], J->inv_freq, J->ms);
    const int64_t np = (int64_t)io->pos[i] + 1;
    /* scores: 4 positions at a time, each its own chain over c (then over r) */
    float mx = -INFINITY;
    int64_t j = 0;
    for (; j + 4 <= np; j += 4) {
      const float *c0 = J->cf + j * kvw, *c1 = c0 + kvw, *c2 = c1 + kvw, *c3 = c2 + kvw;
      float l0 = 0.f, l1 = 0.f, l2 = 0.f, l3 = 0.f, e0 = 0.f, e1 = 0.f, e2 = 0.f, e3 = 0.f;
      for (int64_t c = 0; c < L; c++) {
        const float qc = qlat[c];
        l0 += qc * c0[c]; l1 += qc * c1[c]; l2 += qc * c2[c]; l3 += qc * c3[c];
      }
      for (int64_t r = 0; r < rope; r++) {
        const float qr = qpe[r];
        e0 += qr * c0[L + r]; e1 += qr * c1[L + r]; e2 += qr * c2[L + r]; e3 += qr * c3[L + r];
      }
      sc[j] = (l0 + e0) * p->softmax_scale;
      sc[j + 1] = (l1 + e1) * p->softmax_scale;
      sc[j + 2] = (l2 + e2) * p->softmax_scale;
      sc[j + 3] = (l3 + e3) * p->softmax_scale;
    }
    for (; j < np; j++) {
      const float *cj = J->cf + j * kvw;
      float lat = 0.0f, pe = 0.0f;
      for (int64_t c = 0; c < L; c++) lat += qlat[c] * cj[c];
      for (int64_t r = 0; r < rope; r++) pe += qpe[r] * cj[L + r];
      sc[j] = (lat + pe) * p->softmax_scale;
    }
    for (j = 0; j < np; j++) if (sc[j] > mx) mx = sc[j];
    float sum = 0.0f;
    for (j = 0; j < np; j++) {
      sc[j] = expf(sc[j] - mx);
      sum += sc[j];
    }
    for (j = 0; j < np; j++) sc[j] = sc[j] / sum;
    /* o_lat[c] = Σ_j p_j * C_j[c], j in order (vector lanes over c) */
    for (int64_t c = 0; c < L; c++) olat[c] = 0.0f;
    for (j = 0; j < np; j++) {
      const float *cj = J->cf + j * kvw;
      const float pj = sc[j];
      const pz_v4 pv = {pj, pj, pj, pj};
      int64_t c = 0;
      for (; c < L4; c += 4) st4(olat + c, ld4(olat + c) + pv * ld4(cj + c));
      for (; c < L; c++) olat[c] += pj * cj[c];
    }
    /* o[h*v + e] = bf16(Σ_c W_UV[h,e,c] * o_lat[c]), c in order */
    const pz_bf16 *wuv = io->w_uv + h * vd * L;
    pz_bf16 *orow = J->o + i * (H * vd) + h * vd;
    int64_t e = 0;
    for (; e + 4 <= vd; e += 4) {
      const pz_bf16 *w0 = wuv + e * L, *w1 = w0 + L, *w2 = w1 + L, *w3 = w2 + L;
      float a0 = 0.f, a1 = 0.f, a2 = 0.f, a3 = 0.f;
      for (int64_t c = 0; c < L; c++) {
        const float oc = olat[c];
        a0 += BF(w0[c]) * oc; a1 += BF(w1[c]) * oc; a2 += BF(w2[c]) * oc; a3 += BF(w3[c]) * oc;
      }
      orow[e] = pz_f32_to_bf16(a0); orow[e + 1] = pz_f32_to_bf16(a1);
      orow[e + 2] = pz_f32_to_bf16(a2); orow[e + 3] = pz_f32_to_bf16(a3);
    }
    for (; e < vd; e++) {
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
    for (int64_t b = 0; io->block_table && b <= io->pos[i] / PZ_KV_BLOCK; b++) { /* the blocks row i reads and writes */
      const int32_t pg = io->block_table[i * io->ld_block_table + b];
      if (pg < 0 || pg >= io->n_pages)
        return pz_error(PZ_ERR_INVALID_ARG, "mla: block table maps block %lld of row %lld to page %d outside [0, %lld)",
                        (long long)b, (long long)i, pg, (long long)io->n_pages);
    }
  }
  pz_status st = PZ_OK;
  float *inv_freq = malloc(sizeof(float) * (size_t)(rope / 2 + 1));
  float *kvtmp = malloc(sizeof(float) * (size_t)kvw);
  pz_bf16 *o = malloc(sizeof(pz_bf16) * (size_t)(m * H * vd));
  pz_bf16 *qcn = NULL;
  float *qbuf = NULL;
  float *cf = malloc(sizeof(float) * (size_t)(max_pos * kvw));
  if (!inv_freq || !kvtmp || !o || !cf) { st = pz_error(PZ_ERR_OOM, "mla: scratch allocation"); goto done; }
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
    pz_bf16 *dst = io->kv_cache + pz_kv_row_offset(io->block_table, io->ld_block_table, io->cache_seq_stride, i, io->pos[i], kvw);
    pz_ref_rmsnorm(1, L, kv, PZ_F32, L, io->kva_norm_w, p->eps, dst, L);
    for (int64_t r = 0; r < rope; r++) kvtmp[r] = kv[L + r];
    pz_ref_rope(kvtmp, rope, io->pos[i], inv_freq, ms);
    for (int64_t r = 0; r < rope; r++) dst[L + r] = pz_f32_to_bf16(kvtmp[r]);
  }
  /* 3. absorbed attention, one (row, head) per index */
  mla_job J = {.p = p, .io = io, .q = q, .ldq = ldq, .inv_freq = inv_freq, .ms = ms, .o = o,
               .max_pos = max_pos, .cf = cf};
  for (int64_t i = 0; i < m; i++) {
    J.row = i;
    pz_par_for((int64_t)io->pos[i] + 1, 256, mla_convert, &J);
    pz_par_for(H, 1, mla_heads, &J);
  }
  if (J.failed) { st = pz_error(PZ_ERR_OOM, "mla: head scratch allocation"); goto done; }
  /* 4. o_proj */
  pz_ref_gemm(m, p->hidden, H * vd, o, H * vd, io->o_w, H * vd, NULL, io->out, io->ld_out, 0,
              io->out_zero_init);
done:
  free(inv_freq); free(kvtmp); free(o); free(qcn); free(qbuf); free(cf);
  return st;
}
