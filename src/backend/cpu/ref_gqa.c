/* CPU reference of the GQA decode op (per-head q/k RMSNorm, rotate-half RoPE, KV-cache append,
 * grouped attention, o_proj) and of SiLU-and-multiply. Formulas and rounding points: ref_ops.h. */
#include "backend/cpu/ref_ops.h"
#include "core/pool.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define BF(x) pz_bf16_to_f32(x)

void pz_ref_rope_half(float *x, int64_t dim, int32_t pos, const float *inv_freq, float ms) {
  if (dim < 2 || dim % 2) return;
  const int64_t half = dim / 2;
  for (int64_t i = 0; i < half; i++) {
    const float ang = (float)pos * inv_freq[i];
    const float c = (float)cos((double)ang) * ms, s = (float)sin((double)ang) * ms;
    const float x0 = x[i], x1 = x[i + half];
    x[i] = x0 * c - x1 * s;
    x[i + half] = x1 * c + x0 * s;
  }
}

int64_t pz_ref_gqa_first_pos(int32_t pos, int64_t window) {
  return window > 0 && (int64_t)pos + 1 > window ? (int64_t)pos + 1 - window : 0;
}

float pz_ref_gqa_rope_mscale(const pz_rope_params *rp) { return pz_rope_cos_sin_mscale(rp); }

/* x[d] = (x_j * inv) * w_j, inv = pz_ref_rms_inv(x, d, eps): f32, no rounding. */
static void head_norm(float *x, int64_t d, const pz_bf16 *w, float eps) {
  const float inv = pz_ref_rms_inv(x, d, eps);
  for (int64_t j = 0; j < d; j++) x[j] = (x[j] * inv) * BF(w[j]);
}

typedef struct gqa_job {
  const pz_gqa_params *p;
  const pz_ref_gqa_io *io;
  const float *inv_freq, *inv_freq_long; /* positions below / from long_from */
  int32_t long_from;
  float ms;
  pz_bf16 *o;        /* [m, heads*d] bf16 */
  int64_t max_pos;   /* largest pos + 1 over the rows (scratch size) */
  int failed;        /* set to 1 when a worker's scratch allocation failed */
} gqa_job;

/* (row, head) pairs [lo, hi), index = i * heads + h: q prepared (norm, RoPE), attention over the
 * row's cache positions t0..pos (t0 = pz_ref_gqa_first_pos), o written. Every sum runs in the order
 * ref_ops.h documents. */
static void gqa_heads(void *va, int64_t lo, int64_t hi) {
  gqa_job *J = va;
  const pz_gqa_params *p = J->p;
  const pz_ref_gqa_io *io = J->io;
  const int64_t heads = p->n_heads, kvh = p->n_kv_heads, d = p->head_dim, grp = heads / kvh;
  float *q = malloc(sizeof(float) * (size_t)(2 * d + J->max_pos));
  if (!q) { __atomic_store_n(&J->failed, 1, __ATOMIC_RELAXED); return; }
  float *acc = q + d, *sc = acc + d;
  for (int64_t x = lo; x < hi; x++) {
    const int64_t i = x / heads, h = x % heads, g = h / grp;
    const int32_t pos = io->pos[i];
    memcpy(q, io->qkv + i * io->ld_qkv + h * d, sizeof(float) * (size_t)d);
    if (io->q_norm_w) head_norm(q, d, io->q_norm_w, p->eps);
    pz_ref_rope_half(q, p->rotary_dim ? p->rotary_dim : d, pos, pos < J->long_from ? J->inv_freq : J->inv_freq_long,
                     J->ms);
    const pz_bf16 *K = io->k_cache + i * io->cache_seq_stride + g * io->cache_head_stride;
    const pz_bf16 *V = io->v_cache + i * io->cache_seq_stride + g * io->cache_head_stride;
    /* positions t0..pos: np of them, scores sc[0..np) */
    const int64_t t0 = pz_ref_gqa_first_pos(pos, p->window), np = (int64_t)pos + 1 - t0;
    K += t0 * d;
    V += t0 * d;
    for (int64_t t = 0; t < np; t++) {
      const pz_bf16 *kt = K + t * d;
      float dot = 0.0f;
      for (int64_t j = 0; j < d; j++) dot += q[j] * BF(kt[j]);
      sc[t] = dot * p->softmax_scale;
    }
    float mx = -INFINITY;
    for (int64_t t = 0; t < np; t++) if (sc[t] > mx) mx = sc[t];
    float sum = 0.0f;
    for (int64_t t = 0; t < np; t++) {
      sc[t] = expf(sc[t] - mx);
      sum += sc[t];
    }
    for (int64_t t = 0; t < np; t++) sc[t] = sc[t] / sum;
    /* o[j] = Σ_t w_t V_t[j], t in order (independent accumulators over j) */
    for (int64_t j = 0; j < d; j++) acc[j] = 0.0f;
    for (int64_t t = 0; t < np; t++) {
      const pz_bf16 *vt = V + t * d;
      const float wt = sc[t];
      for (int64_t j = 0; j < d; j++) acc[j] += wt * BF(vt[j]);
    }
    pz_bf16 *orow = J->o + i * (heads * d) + h * d;
    for (int64_t j = 0; j < d; j++) orow[j] = pz_f32_to_bf16(acc[j]);
  }
  free(q);
}

pz_status pz_ref_gqa_attention(int64_t m, const pz_gqa_params *p, const pz_ref_gqa_io *io) {
  const int64_t heads = p->n_heads, kvh = p->n_kv_heads, d = p->head_dim;
  if (m <= 0) return PZ_OK;
  if (d < 2 || d % 2 || kvh < 1 || heads < kvh || heads % kvh)
    return pz_error(PZ_ERR_SHAPE, "gqa: unsupported dims (head_dim %lld, heads %lld, kv heads %lld): head_dim must be even "
                    "and heads a multiple of kv heads", (long long)d, (long long)heads, (long long)kvh);
  if (p->rotary_dim && (p->rotary_dim < 2 || p->rotary_dim % 2 || p->rotary_dim > d))
    return pz_error(PZ_ERR_SHAPE, "gqa: rotary_dim %lld must be 0 (head_dim) or even in 2..head_dim (%lld)",
                    (long long)p->rotary_dim, (long long)d);
  if (p->rope.type == PZ_ROPE_LONGROPE &&
      (p->rope.n_factors != (p->rotary_dim ? p->rotary_dim : d) / 2 || p->rope.n_factors > PZ_ROPE_MAX_FACTORS))
    return pz_error(PZ_ERR_SHAPE, "gqa: LongRoPE with %d factors of each kind for %lld rotary dims (needs one per pair, "
                    "at most %d)",
                    (int)p->rope.n_factors, (long long)(p->rotary_dim ? p->rotary_dim : d), PZ_ROPE_MAX_FACTORS);
  if (!io->qkv || !io->o_w || !io->k_cache || !io->v_cache || !io->pos || !io->out)
    return pz_error(PZ_ERR_INVALID_ARG, "gqa: missing input pointer");
  if (!io->q_norm_w != !io->k_norm_w) return pz_error(PZ_ERR_INVALID_ARG, "gqa: q_norm and k_norm weights go together");
  if (p->window < 0) return pz_error(PZ_ERR_INVALID_ARG, "gqa: window %lld must be >= 0 (0: full attention)", (long long)p->window);
  int64_t max_pos = 0;
  for (int64_t i = 0; i < m; i++) {
    if (io->pos[i] < 0 || io->pos[i] >= p->max_ctx)
      return pz_error(PZ_ERR_INVALID_ARG, "gqa: position %d of row %lld outside [0, %lld)", io->pos[i], (long long)i,
                      (long long)p->max_ctx);
    if (io->pos[i] + 1 > max_pos) max_pos = io->pos[i] + 1;
  }
  pz_status st = PZ_OK;
  float *inv_freq = malloc(sizeof(float) * (size_t)d); /* [d/2] below long_from | [d/2] from it */
  float *kt = malloc(sizeof(float) * (size_t)d);
  pz_bf16 *o = malloc(sizeof(pz_bf16) * (size_t)(m * heads * d));
  if (!inv_freq || !kt || !o) { st = pz_error(PZ_ERR_OOM, "gqa: scratch allocation"); goto done; }
  const int64_t rd = p->rotary_dim ? p->rotary_dim : d;
  float *inv_long = inv_freq + d / 2;
  pz_rope_inv_freq(&p->rope, rd, inv_freq);
  pz_rope_inv_freq_long(&p->rope, rd, inv_long);
  const int32_t long_from = pz_rope_long_from(&p->rope);
  const float ms = pz_ref_gqa_rope_mscale(&p->rope);
  /* KV append: k (normed, roped) and v of every row to the cache at pos[i], bf16. */
  for (int64_t i = 0; i < m; i++) {
    const float *row = io->qkv + i * io->ld_qkv;
    const int64_t at = (int64_t)io->pos[i] * d;
    for (int64_t g = 0; g < kvh; g++) {
      memcpy(kt, row + (heads + g) * d, sizeof(float) * (size_t)d);
      if (io->k_norm_w) head_norm(kt, d, io->k_norm_w, p->eps);
      pz_ref_rope_half(kt, rd, io->pos[i], io->pos[i] < long_from ? inv_freq : inv_long, ms);
      pz_bf16 *kc = io->k_cache + i * io->cache_seq_stride + g * io->cache_head_stride + at;
      pz_bf16 *vc = io->v_cache + i * io->cache_seq_stride + g * io->cache_head_stride + at;
      const float *v = row + (heads + kvh + g) * d;
      for (int64_t j = 0; j < d; j++) {
        kc[j] = pz_f32_to_bf16(kt[j]);
        vc[j] = pz_f32_to_bf16(v[j]);
      }
    }
  }
  gqa_job J = {.p = p, .io = io, .inv_freq = inv_freq, .inv_freq_long = inv_long, .long_from = long_from, .ms = ms,
               .o = o, .max_pos = max_pos};
  pz_par_for(m * heads, 1, gqa_heads, &J);
  if (J.failed) { st = pz_error(PZ_ERR_OOM, "gqa: head scratch allocation"); goto done; }
  pz_ref_gemm(m, p->hidden, heads * d, o, heads * d, io->o_w, heads * d, NULL, io->out, io->ld_out, 0, io->out_zero_init);
done:
  free(inv_freq); free(kt); free(o);
  return st;
}

void pz_ref_silu_mul(int64_t m, int64_t inter, const float *gu, int64_t ld_gu, pz_bf16 *act, int64_t ld_act) {
  for (int64_t i = 0; i < m; i++) {
    const float *g = gu + i * ld_gu, *u = g + inter;
    pz_bf16 *a = act + i * ld_act;
    for (int64_t j = 0; j < inter; j++) {
      const float gv = g[j];
      const float s = gv / (1.0f + expf(-gv));
      a[j] = pz_f32_to_bf16(s * u[j]);
    }
  }
}
