/* CPU reference of the MoE block: router scoring (softmax, sigmoid, top-k softmax) and top-k
 * (greedy, group_limited_greedy, noaux_tc), routed SwiGLU experts, shared experts; and the dense
 * SwiGLU MLP. See ref_ops.h. */
#include "backend/cpu/ref_ops.h"
#include "core/pool.h"
#include "core/quant.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define BF(x) pz_bf16_to_f32(x)

/* a ranks before b: larger value first, NaN last, ties to the lower index. */
static bool ranks_before(float a, int ia, float b, int ib) {
  bool na = isnan(a), nb = isnan(b);
  if (na != nb) return nb;
  if (!na && a != b) return a > b;
  return ia < ib;
}

/* Indices of the k best values among the n with allowed[i] (or all when allowed NULL), in
 * ranking order. Plain selection: O(n*k), n <= a few hundred experts. */
static void top_k_idx(const float *v, const unsigned char *allowed, int n, int k, int *out) {
  unsigned char *used = calloc((size_t)n, 1);
  unsigned char local[512];
  if (!used && n <= 512) { memset(local, 0, (size_t)n); used = local; }
  for (int t = 0; t < k; t++) {
    int best = -1;
    for (int i = 0; i < n; i++) {
      if ((allowed && !allowed[i]) || (used && used[i])) continue;
      if (best < 0 || ranks_before(v[i], i, v[best], best)) best = i;
    }
    out[t] = best;
    if (best >= 0 && used) used[best] = 1;
  }
  if (used != local) free(used);
}

void pz_ref_moe_route(int64_t m, const float *logits, int64_t ld, const float *bias,
                      const pz_moe_params *p, int32_t *ids, float *weights) {
  const int E = p->n_experts, K = p->top_k;
  const int G = p->n_group > 0 ? p->n_group : 1, per = E / G;
  float *score = malloc(sizeof(float) * (size_t)E * 2 + sizeof(float) * (size_t)G);
  unsigned char *allowed = malloc((size_t)E);
  int *sel = malloc(sizeof(int) * (size_t)(K + G + 2));
  if (!score || !allowed || !sel) { /* cannot happen at these sizes; leave a defined result */
    for (int64_t i = 0; i < m * K; i++) { ids[i] = 0; weights[i] = 0.0f; }
    free(score); free(allowed); free(sel);
    return;
  }
  float *choice = score + E, *gscore = choice + E;
  for (int64_t i = 0; i < m; i++) {
    const float *x = logits + i * ld;
    if (p->scoring == PZ_SCORE_SOFTMAX) {
      float mx = -INFINITY;
      for (int e = 0; e < E; e++) if (x[e] > mx) mx = x[e];
      float sum = 0.0f;
      for (int e = 0; e < E; e++) { score[e] = expf(x[e] - mx); sum += score[e]; }
      for (int e = 0; e < E; e++) score[e] = score[e] / sum;
    } else if (p->scoring == PZ_SCORE_TOPK_SOFTMAX) {
      for (int e = 0; e < E; e++) score[e] = x[e]; /* rank the logits; the softmax follows the selection */
    } else {
      for (int e = 0; e < E; e++) score[e] = 1.0f / (1.0f + expf(-x[e]));
    }
    bool biased = p->topk_method == PZ_TOPK_NOAUX_TC && bias;
    for (int e = 0; e < E; e++) choice[e] = biased ? score[e] + bias[e] : score[e];
    const unsigned char *mask = NULL;
    if (p->topk_method != PZ_TOPK_GREEDY && G > 1) {
      for (int g = 0; g < G; g++) {
        const float *cg = choice + g * per;
        if (p->topk_method == PZ_TOPK_GROUP_LIMITED) {
          int b; top_k_idx(cg, NULL, per, 1, &b);
          gscore[g] = cg[b];
        } else {
          int b2[2]; int nk = per >= 2 ? 2 : 1;
          top_k_idx(cg, NULL, per, nk, b2);
          gscore[g] = nk == 2 ? cg[b2[0]] + cg[b2[1]] : cg[b2[0]];
        }
      }
      int tg = p->topk_group < G ? p->topk_group : G;
      top_k_idx(gscore, NULL, G, tg, sel);
      memset(allowed, 0, (size_t)E);
      for (int t = 0; t < tg; t++) memset(allowed + sel[t] * per, 1, (size_t)per);
      mask = allowed;
    }
    top_k_idx(choice, mask, E, K, sel);
    int32_t *id = ids + i * K;
    float *w = weights + i * K;
    for (int t = 0; t < K; t++) { id[t] = sel[t]; w[t] = sel[t] >= 0 ? score[sel[t]] : 0.0f; }
    if (p->scoring == PZ_SCORE_TOPK_SOFTMAX) { /* softmax over the k chosen logits (ref_ops.h) */
      const float l0 = sel[0] >= 0 ? score[sel[0]] : 0.0f;
      float den = 0.0f;
      for (int t = 0; t < K; t++) {
        w[t] = sel[t] >= 0 ? expf(score[sel[t]] - l0) : 0.0f;
        den += w[t];
      }
      for (int t = 0; t < K; t++) w[t] = w[t] / den;
    } else if (p->norm_topk_prob && K > 1) {
      float den = 0.0f;
      for (int t = 0; t < K; t++) den += w[t];
      den += 1e-20f;
      for (int t = 0; t < K; t++) w[t] = w[t] / den;
    }
    for (int t = 0; t < K; t++) w[t] = w[t] * p->routed_scaling_factor;
  }
  free(score); free(allowed); free(sel);
}

/* pz_ref_mlp with bf16 weights (wg..) or, when wgf is set, f32 weights (wgf..). */
static pz_status mlp_any(int64_t m, int64_t H, int64_t inter, const pz_bf16 *x, int64_t ldx,
                         const pz_bf16 *w_gate, const pz_bf16 *w_up, const pz_bf16 *w_down,
                         const float *wgf, const float *wuf, const float *wdf,
                         float *out, int64_t ld_out, bool zero_init) {
  if (m <= 0) return PZ_OK;
  float *g = malloc(sizeof(float) * (size_t)(2 * m * inter));
  pz_bf16 *h = malloc(sizeof(pz_bf16) * (size_t)(m * inter));
  if (!g || !h) { free(g); free(h); return pz_error(PZ_ERR_OOM, "mlp: scratch allocation"); }
  float *u = g + m * inter;
  if (wgf) {
    pz_ref_gemm_wf32(m, inter, H, x, ldx, wgf, H, NULL, g, inter, 1, true);
    pz_ref_gemm_wf32(m, inter, H, x, ldx, wuf, H, NULL, u, inter, 1, true);
  } else {
    pz_ref_gemm(m, inter, H, x, ldx, w_gate, H, NULL, g, inter, 1, true);
    pz_ref_gemm(m, inter, H, x, ldx, w_up, H, NULL, u, inter, 1, true);
  }
  for (int64_t i = 0; i < m * inter; i++) {
    float gv = g[i];
    float s = gv / (1.0f + expf(-gv));
    h[i] = pz_f32_to_bf16(s * u[i]);
  }
  if (wdf) pz_ref_gemm_wf32(m, H, inter, h, inter, wdf, inter, NULL, out, ld_out, 1, zero_init);
  else pz_ref_gemm(m, H, inter, h, inter, w_down, inter, NULL, out, ld_out, 1, zero_init);
  free(g); free(h);
  return PZ_OK;
}

pz_status pz_ref_mlp(int64_t m, int64_t H, int64_t inter, const pz_bf16 *x, int64_t ldx,
                     const pz_bf16 *w_gate, const pz_bf16 *w_up, const pz_bf16 *w_down,
                     float *out, int64_t ld_out, bool zero_init) {
  return mlp_any(m, H, inter, x, ldx, w_gate, w_up, w_down, NULL, NULL, NULL, out, ld_out, zero_init);
}

void pz_ref_qexpert_dequant(const pz_ref_qexperts *q, int which, int64_t e, int64_t inter, int64_t H, float *out) {
  const int64_t rows = which == 2 ? H : inter, cols = which == 2 ? inter : H;
  const void *w = which == 0 ? q->w_gate : which == 1 ? q->w_up : q->w_down;
  const void *sc = which == 0 ? q->s_gate : which == 1 ? q->s_up : q->s_down;
  if (q->wquant == 1) {
    const int32_t *pw = (const int32_t *)w + e * rows * (cols / 8);
    const pz_bf16 *ps = (const pz_bf16 *)sc + e * rows * (cols / q->group);
    for (int64_t r = 0; r < rows; r++)
      pz_int4_dequant_row(pw + r * (cols / 8), ps + r * (cols / q->group), q->group, 0, cols, out + r * cols);
  } else {
    const int64_t sr = (rows + q->block_rows - 1) / q->block_rows, scn = (cols + q->block_cols - 1) / q->block_cols;
    const uint8_t *pw = (const uint8_t *)w + e * rows * cols;
    const float *ps = (const float *)sc + e * sr * scn;
    for (int64_t r = 0; r < rows; r++) {
      float *o = out + r * cols;
      pz_fp8_dequant_row(pw, cols, ps, scn, q->block_rows, q->block_cols, r, 0, cols, o);
      for (int64_t j = 0; j < cols; j++) o[j] = pz_bf16_to_f32(pz_f32_to_bf16(o[j])); /* the loader's bf16 rounding */
    }
  }
}

typedef struct moe_job {
  int64_t H, I, m;
  int K;
  const pz_bf16 *x; int64_t ldx;
  const pz_bf16 *w_gate, *w_up, *w_down;
  const pz_ref_qexperts *q; /* quantised experts instead of w_* (pz_ref_moe_experts_q), else NULL */
  const int32_t *ids;
  float *d;                 /* [m*K, H] expert output per (token, slot) */
  int failed;               /* set (racy but only ever to 1) when a chunk's scratch failed */
} moe_job;

/* Experts [lo, hi): each runs once over the tokens that chose it (rows are independent in the
 * GEMMs, so this equals a per-token evaluation bit for bit) and writes only its own slots. */
static void moe_experts(void *va, int64_t lo, int64_t hi) {
  moe_job *J = va;
  const int64_t H = J->H, I = J->I, MK = J->m * J->K;
  pz_bf16 *xg = malloc(sizeof(pz_bf16) * (size_t)(MK * H));
  float *dg = malloc(sizeof(float) * (size_t)(MK * H));
  int64_t *slot = malloc(sizeof(int64_t) * (size_t)MK);
  float *wf = J->q ? malloc(sizeof(float) * (size_t)(3 * I * H)) : NULL; /* one expert, dequantised */
  if (!xg || !dg || !slot || (J->q && !wf)) {
    __atomic_store_n(&J->failed, 1, __ATOMIC_RELAXED);
    free(xg); free(dg); free(slot); free(wf);
    return;
  }
  for (int64_t e = lo; e < hi; e++) {
    int64_t cnt = 0;
    for (int64_t t = 0; t < MK; t++)
      if (J->ids[t] == e) {
        memcpy(xg + cnt * H, J->x + (t / J->K) * J->ldx, sizeof(pz_bf16) * (size_t)H);
        slot[cnt++] = t;
      }
    if (!cnt) continue;
    pz_status st;
    if (J->q) {
      for (int w = 0; w < 3; w++) pz_ref_qexpert_dequant(J->q, w, e, I, H, wf + w * I * H);
      st = mlp_any(cnt, H, I, xg, H, NULL, NULL, NULL, wf, wf + I * H, wf + 2 * I * H, dg, H, true);
    } else {
      st = pz_ref_mlp(cnt, H, I, xg, H, J->w_gate + e * I * H, J->w_up + e * I * H, J->w_down + e * H * I, dg, H, true);
    }
    if (st != PZ_OK) { __atomic_store_n(&J->failed, 1, __ATOMIC_RELAXED); break; }
    for (int64_t c = 0; c < cnt; c++) memcpy(J->d + slot[c] * H, dg + c * H, sizeof(float) * (size_t)H);
  }
  free(xg); free(dg); free(slot); free(wf);
}

static pz_status experts_any(int64_t m, int64_t H, const pz_bf16 *x, int64_t ldx,
                             const int32_t *ids, const float *weights, const pz_moe_params *p,
                             const pz_bf16 *w_gate, const pz_bf16 *w_up, const pz_bf16 *w_down,
                             const pz_ref_qexperts *q,
                             const pz_bf16 *sh_gate, const pz_bf16 *sh_up, const pz_bf16 *sh_down,
                             float *out, int64_t ld_out) {
  if (m <= 0) return PZ_OK;
  if (q && (q->wquant < 1 || q->wquant > 2 || (q->wquant == 1 && (q->group < 8 || q->group % 8)) ||
            (q->wquant == 2 && (q->block_rows < 1 || q->block_cols < 1))))
    return pz_error(PZ_ERR_INVALID_ARG, "moe: quantised experts with wquant %d, group %lld, block %lldx%lld are not INT4 "
                    "(group a multiple of 8) or FP8 (positive block)", q->wquant, (long long)q->group,
                    (long long)q->block_rows, (long long)q->block_cols);
  const int K = p->top_k, E = p->n_experts;
  for (int64_t t = 0; t < m * K; t++)
    if (ids[t] < -1 || ids[t] >= E)
      return pz_error(PZ_ERR_INVALID_ARG, "moe: expert id %d of slot %lld outside [-1, %d)", ids[t], (long long)t, E);
  pz_status st = PZ_OK;
  float *d = malloc(sizeof(float) * (size_t)(m * K * H));      /* expert output per (token, slot) */
  float *sh = malloc(sizeof(float) * (size_t)(m * H));
  if (!d || !sh) { st = pz_error(PZ_ERR_OOM, "moe: scratch allocation"); goto done; }
  memset(d, 0, sizeof(float) * (size_t)(m * K * H)); /* slots with no expert (id -1) add 0 */
  moe_job J = {.H = H, .I = p->inter, .m = m, .K = K, .x = x, .ldx = ldx, .w_gate = w_gate,
               .w_up = w_up, .w_down = w_down, .q = q, .ids = ids, .d = d};
  pz_par_for(E, 1, moe_experts, &J);
  if (J.failed) { st = pz_error(PZ_ERR_OOM, "moe: expert scratch allocation"); goto done; }
  for (int64_t i = 0; i < m; i++) {
    float *o = out + i * ld_out;
    for (int64_t j = 0; j < H; j++) {
      float y = 0.0f;
      for (int t = 0; t < K; t++) y += weights[i * K + t] * d[(i * K + t) * H + j];
      o[j] = y;
    }
  }
  if (sh_gate && sh_up && sh_down && p->shared_inter > 0) {
    PZ_CHECK_GOTO(pz_ref_mlp(m, H, p->shared_inter, x, ldx, sh_gate, sh_up, sh_down, sh, H, true), st, done);
    for (int64_t i = 0; i < m; i++)
      for (int64_t j = 0; j < H; j++) out[i * ld_out + j] += sh[i * H + j];
  }
done:
  free(d); free(sh);
  return st;
}

pz_status pz_ref_moe_experts(int64_t m, int64_t H, const pz_bf16 *x, int64_t ldx,
                             const int32_t *ids, const float *weights, const pz_moe_params *p,
                             const pz_bf16 *w_gate, const pz_bf16 *w_up, const pz_bf16 *w_down,
                             const pz_bf16 *sh_gate, const pz_bf16 *sh_up, const pz_bf16 *sh_down,
                             float *out, int64_t ld_out) {
  return experts_any(m, H, x, ldx, ids, weights, p, w_gate, w_up, w_down, NULL, sh_gate, sh_up, sh_down, out, ld_out);
}

pz_status pz_ref_moe_experts_q(int64_t m, int64_t H, const pz_bf16 *x, int64_t ldx,
                               const int32_t *ids, const float *weights, const pz_moe_params *p,
                               const pz_ref_qexperts *q, const pz_bf16 *sh_gate, const pz_bf16 *sh_up,
                               const pz_bf16 *sh_down, float *out, int64_t ld_out) {
  if (!q) return pz_error(PZ_ERR_INVALID_ARG, "moe: NULL quantised experts");
  return experts_any(m, H, x, ldx, ids, weights, p, NULL, NULL, NULL, q, sh_gate, sh_up, sh_down, out, ld_out);
}

static pz_status moe_any(int64_t m, int64_t H, const pz_bf16 *x, int64_t ldx,
                         const float *logits, int64_t ld_logits, const float *bias,
                         const pz_moe_params *p, const pz_bf16 *w_gate, const pz_bf16 *w_up,
                         const pz_bf16 *w_down, const pz_ref_qexperts *q, const pz_bf16 *sh_gate, const pz_bf16 *sh_up,
                         const pz_bf16 *sh_down, float *out, int64_t ld_out,
                         int32_t *ids_out, float *weights_out) {
  if (m <= 0) return PZ_OK;
  const int K = p->top_k;
  pz_status st = PZ_OK;
  int32_t *ids = malloc(sizeof(int32_t) * (size_t)(m * K));
  float *w = malloc(sizeof(float) * (size_t)(m * K));
  if (!ids || !w) { st = pz_error(PZ_ERR_OOM, "moe: scratch allocation"); goto done; }
  pz_ref_moe_route(m, logits, ld_logits, bias, p, ids, w);
  PZ_CHECK_GOTO(experts_any(m, H, x, ldx, ids, w, p, w_gate, w_up, w_down, q, sh_gate, sh_up, sh_down,
                            out, ld_out), st, done);
  if (ids_out) memcpy(ids_out, ids, sizeof(int32_t) * (size_t)(m * K));
  if (weights_out) memcpy(weights_out, w, sizeof(float) * (size_t)(m * K));
done:
  free(ids); free(w);
  return st;
}

pz_status pz_ref_moe(int64_t m, int64_t H, const pz_bf16 *x, int64_t ldx,
                     const float *logits, int64_t ld_logits, const float *bias,
                     const pz_moe_params *p, const pz_bf16 *w_gate, const pz_bf16 *w_up,
                     const pz_bf16 *w_down, const pz_bf16 *sh_gate, const pz_bf16 *sh_up,
                     const pz_bf16 *sh_down, float *out, int64_t ld_out,
                     int32_t *ids_out, float *weights_out) {
  return moe_any(m, H, x, ldx, logits, ld_logits, bias, p, w_gate, w_up, w_down, NULL, sh_gate, sh_up, sh_down, out,
                 ld_out, ids_out, weights_out);
}

pz_status pz_ref_moe_q(int64_t m, int64_t H, const pz_bf16 *x, int64_t ldx,
                       const float *logits, int64_t ld_logits, const float *bias,
                       const pz_moe_params *p, const pz_ref_qexperts *q, const pz_bf16 *sh_gate,
                       const pz_bf16 *sh_up, const pz_bf16 *sh_down, float *out, int64_t ld_out,
                       int32_t *ids_out, float *weights_out) {
  if (!q) return pz_error(PZ_ERR_INVALID_ARG, "moe: NULL quantised experts");
  return moe_any(m, H, x, ldx, logits, ld_logits, bias, p, NULL, NULL, NULL, q, sh_gate, sh_up, sh_down, out, ld_out,
                 ids_out, weights_out);
}
