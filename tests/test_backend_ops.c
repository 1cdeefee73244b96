/* Backend-ops harness, CPU: every op of ops.def, at the shapes of backend_ops_cases.h (odd ones, TP 1
 * and 2), run by the CPU executor and checked bit for bit against the references below. */
#define _POSIX_C_SOURCE 200809L
#include "backend_ops_cases.h"
#include "passes/prezero.h"

/* The reference of each op (all bit-exact: the contracts of ref_ops.h fix every rounding):
 *   EMBEDDING, RMSNORM, AR_RMSNORM, GEMM, LM_HEAD, ARGMAX, DENSE_MLP: written out here in plain
 *     loops from the contracts (independent of src/backend/cpu);
 *   MOE: pz_ref_moe_route (routing, tested in test_cpu_moe.c), then the experts composed here
 *     from the plain SwiGLU loops (not pz_ref_moe_experts, which the op calls);
 *   MLA_ATTN: pz_ref_mla_decode on copies of the inputs and of the cache before the step: checks
 *     the op's unpacking (slots, strides, cache layout, positions); the formula itself is checked
 *     against the non-absorbed attention in test_cpu_mla.c;
 *   GQA_ATTN: pz_ref_gqa_attention likewise (its formula: test_cpu_gqa.c's double model);
 *   SILU_MUL: written out in a plain loop from the contract;
 *   AR_RMSNORM_MAYBE_PREZERO: AR_RMSNORM's reference plus the zero_fill (n_total columns when
 *     the gate holds, the n_base prefix otherwise, nothing else touched);
 *   MM_MAYBE_PREZERO: the GEMM reference, with the buffer poisoned (NaN) before the step, so a
 *     consumer that trusted a fill the donor did not make shows up. */

typedef struct run {
  bo_graph *bg;
  pz_cpu_exec *e;
  void ***snap;         /* snap[r][t]: copy of STATE tensor t of rank r before the step */
  int32_t next[BO_M];
  int bad;              /* mismatches of this case */
} run;

static float F(pz_bf16 h) { return pz_bf16_to_f32(h); }
static float RB(float f) { return pz_bf16_to_f32(pz_f32_to_bf16(f)); } /* rounded to bf16 */
static bool same(float a, float b) { return memcmp(&a, &b, 4) == 0; }
static const pz_tensor *T(run *R, int id) { return &R->bg->g->tensors[id]; }
static void *D(run *R, int r, int id) { return pz_cpu_exec_data(R->e, r, id); }
static float G(run *R, int r, int id, int64_t i, int64_t j) { return bo_get(T(R, id), D(R, r, id), i, j); }

/* Counts a mismatch (printing the first few): got vs want at (rank, i, j) of what. */
static void expect(run *R, bool ok, const char *what, int r, int64_t i, int64_t j, float got, float want) {
  if (ok) return;
  if (R->bad++ < 5)
    fprintf(stderr, "  %s rank %d [%lld, %lld] = %.9g, want %.9g\n", what, r, (long long)i, (long long)j, got, want);
}

/* Rows [0, m) x columns [0, n) of 2-D tensor id on every rank equal want(r, i, j) bit for bit. */
typedef float (*want_fn)(run *R, int r, int64_t i, int64_t j);
static void expect_all(run *R, int id, int64_t n, want_fn want) {
  for (int r = 0; r < R->bg->c->tp; r++)
    for (int64_t i = 0; i < R->bg->c->m; i++)
      for (int64_t j = 0; j < n; j++) {
        float g = G(R, r, id, i, j), w = want(R, r, i, j);
        expect(R, same(g, w), T(R, id)->name, r, i, j, g, w);
      }
}

/* Every element of owner tensor base outside columns [c0, c0 + n) of rows [0, m) still holds the
 * executor's NaN poison (an op wrote only its slice and its m rows). */
static void untouched(run *R, int base, int64_t c0, int64_t n) {
  const pz_tensor *b = T(R, base);
  for (int r = 0; r < R->bg->c->tp; r++)
    for (int64_t i = 0; i < b->ne[0]; i++)
      for (int64_t j = 0; j < b->ne[1]; j++)
        if (i >= R->bg->c->m || j < c0 || j >= c0 + n) {
          float g = G(R, r, base, i, j);
          expect(R, isnan(g), b->name, r, i, j, g, NAN);
        }
}

/* ---------------------------------------------------------------- plain references */

static float want_embedding(run *R, int r, int64_t i, int64_t j) {
  const int64_t vpr = bo_vpr(R->bg->c->b, R->bg->c->tp), id = R->bg->tokens[i];
  return id >= r * vpr && id < (r + 1) * vpr ? G(R, r, R->bg->in[1], id - r * vpr, j) : 0.0f;
}
static void check_embedding(run *R) { expect_all(R, R->bg->out[0].id, R->bg->c->a, want_embedding); }

/* inv = 1 / sqrtf(Σ_j v_j² / n + eps), the sum in j order (ref_ops.h). */
static float rms_inv(const float *v, int64_t n, float eps) {
  float ss = 0.0f;
  for (int64_t j = 0; j < n; j++) ss += v[j] * v[j];
  return 1.0f / sqrtf(ss / (float)n + eps);
}

static void check_rmsnorm(run *R) {
  const bo_graph *bg = R->bg;
  const int64_t n = bg->c->a;
  float *row = malloc(sizeof(float) * (size_t)n);
  for (int r = 0; r < bg->c->tp && row; r++)
    for (int64_t i = 0; i < bg->c->m; i++) {
      for (int64_t j = 0; j < n; j++) row[j] = G(R, r, bg->in[0], i, j);
      float inv = rms_inv(row, n, 1e-6f);
      for (int64_t j = 0; j < n; j++) {
        float w = RB((row[j] * inv) * G(R, r, bg->in[1], 0, j)), g = G(R, r, bg->out[0].id, i, j);
        expect(R, same(g, w), "y", r, i, j, g, w);
      }
    }
  free(row);
  if (bg->c->var & BO_STRIDED) untouched(R, T(R, bg->out[0].id)->view_of, 16, n);
}

/* The two AR nodes of bo_build_ar (in = {p0, w0, p1, w1, x0, x1, R}): R1 = Σ_r p0_r (rank order),
 * x0 = norm(R1) w0; R = R1 + Σ_r p1_r, x1 = norm(R) w1. */
static void check_ar(run *R) {
  const bo_graph *bg = R->bg;
  const int64_t H = bg->c->a;
  const int tp = bg->c->tp, *in = bg->in;
  float *r1 = malloc(sizeof(float) * (size_t)H * 2), *r2 = r1 ? r1 + H : NULL;
  for (int64_t i = 0; i < bg->c->m && r1; i++) {
    for (int64_t j = 0; j < H; j++) {
      float s = G(R, 0, in[0], i, j), t = G(R, 0, in[2], i, j);
      for (int q = 1; q < tp; q++) { s += G(R, q, in[0], i, j); t += G(R, q, in[2], i, j); }
      r1[j] = s;
      r2[j] = s + t;
    }
    float inv1 = rms_inv(r1, H, 1e-6f), inv2 = rms_inv(r2, H, 1e-6f);
    for (int r = 0; r < tp; r++)
      for (int64_t j = 0; j < H; j++) {
        float w0 = RB((r1[j] * inv1) * G(R, r, in[1], 0, j)), w1 = RB((r2[j] * inv2) * G(R, r, in[3], 0, j));
        float g0 = G(R, r, in[4], i, j), g1 = G(R, r, in[5], i, j), gr = G(R, r, in[6], i, j);
        expect(R, same(g0, w0), "x0", r, i, j, g0, w0);
        expect(R, same(g1, w1), "x1", r, i, j, g1, w1);
        expect(R, same(gr, r2[j]), "residual", r, i, j, gr, r2[j]);
      }
  }
  free(r1);
}

/* Split-K GEMM of the contract: slices of roundup(ceil(k / split), 64), split 0 = 1 below k = 2048
 * else min(8, k / 1024); C = base + (dot_0 + bias), then C += dot_s; base = 0 or C's old value. */
static float gemm_ref(run *R, int r, int A, int W, int bias, int64_t i, int64_t j, int split, float base) {
  const int64_t k = T(R, W)->ne[1];
  if (split <= 0) split = k < 2048 ? 1 : (int)(k / 1024 > 8 ? 8 : k / 1024);
  const int64_t chunk = ((k + split - 1) / split + 63) / 64 * 64;
  float C = base;
  for (int64_t k0 = 0; k0 < k; k0 += chunk) {
    float acc = 0.0f;
    for (int64_t kk = k0; kk < k0 + chunk && kk < k; kk++) acc += G(R, r, A, i, kk) * G(R, r, W, j, kk);
    if (k0 == 0 && bias >= 0) acc += G(R, r, bias, 0, j);
    C = C + acc;
  }
  return C;
}

static float want_gemm(run *R, int r, int64_t i, int64_t j) {
  const bo_graph *bg = R->bg;
  const bool lm = bg->c->op == PZ_OP_LM_HEAD, accum = bg->c->var & BO_ACCUM;
  float base = accum ? bo_get(T(R, bg->in[3]), R->snap[r][bg->in[3]], i, j) : 0.0f;
  return gemm_ref(R, r, bg->in[0], bg->in[1], bg->in[2], i, j, lm ? 0 : (int)bg->c->c, base);
}
static void check_gemm(run *R) {
  const bo_graph *bg = R->bg;
  expect_all(R, bg->in[3], T(R, bg->in[1])->ne[0], want_gemm);
  if (bg->in[4] >= 0) untouched(R, bg->in[4], 64, T(R, bg->in[1])->ne[0]);
}

/* Greedy argmax over every rank's shard: padding ids skipped, the first NaN wins, else the largest
 * value with ties to the lowest id. */
static void check_argmax(run *R) {
  const bo_graph *bg = R->bg;
  const int tp = bg->c->tp;
  const int64_t V = bg->c->a, vpr = bo_vpr(V, tp);
  int ties = 0;
  for (int64_t i = 0; i < bg->c->m; i++) {
    int64_t best = -1, nan_id = -1;
    float bv = 0.0f;
    for (int r = 0; r < tp; r++)
      for (int64_t j = 0; j < vpr && r * vpr + j < V; j++) {
        float v = G(R, r, bg->in[0], i, j);
        if (isnan(v)) { if (nan_id < 0) nan_id = r * vpr + j; }
        else if (best < 0 || v > bv) { best = r * vpr + j; bv = v; }
        else ties += v == bv;
      }
    int32_t want = (int32_t)(nan_id >= 0 ? nan_id : best);
    expect(R, R->next[i] == want, "next", 0, i, 0, (float)R->next[i], (float)want);
    for (int r = 0; r < tp; r++) {
      int32_t got = ((const int32_t *)D(R, r, bg->in[1]))[i];
      expect(R, got == want, "ids", r, i, 0, (float)got, (float)want);
    }
  }
  if (!(bg->c->var & (BO_REAL | BO_PADMAX))) CHECK(ties > 0); /* the integer logits do tie */
}

/* One row of the SwiGLU MLP (pz_ref_mlp's contract, split 1): g, u = 0 + x·W (k order),
 * h = bf16((g / (1 + expf(-g))) * u), out = 0 + h·Wd. Weights at wg/wu [I, H], wd [H, I]. */
static void mlp_row(const pz_bf16 *x, int64_t H, int64_t I, const pz_bf16 *wg, const pz_bf16 *wu,
                    const pz_bf16 *wd, float *h, float *out) {
  for (int64_t q = 0; q < I; q++) {
    float g = 0.0f, u = 0.0f;
    for (int64_t k = 0; k < H; k++) g += F(x[k]) * F(wg[q * H + k]);
    for (int64_t k = 0; k < H; k++) u += F(x[k]) * F(wu[q * H + k]);
    g = 0.0f + g;
    u = 0.0f + u;
    h[q] = RB((g / (1.0f + expf(-g))) * u);
  }
  for (int64_t j = 0; j < H; j++) {
    float acc = 0.0f;
    for (int64_t q = 0; q < I; q++) acc += h[q] * F(wd[j * I + q]);
    out[j] = 0.0f + acc;
  }
}

static void check_mlp(run *R) {
  const bo_graph *bg = R->bg;
  const int64_t H = bg->c->a, I = bg->c->b;
  float *h = malloc(sizeof(float) * (size_t)(I + H)), *o = h ? h + I : NULL;
  for (int r = 0; r < bg->c->tp && h; r++)
    for (int64_t i = 0; i < bg->c->m; i++) {
      const pz_bf16 *x = (const pz_bf16 *)D(R, r, bg->in[0]) + i * H;
      mlp_row(x, H, I, D(R, r, bg->in[1]), D(R, r, bg->in[2]), D(R, r, bg->in[3]), h, o);
      for (int64_t j = 0; j < H; j++) expect(R, same(G(R, r, bg->in[4], i, j), o[j]), "out", r, i, j, G(R, r, bg->in[4], i, j), o[j]);
    }
  free(h);
}

/* MoE: routing by pz_ref_moe_route, then y = Σ_t w_t E_{id_t}(x) (slot order, from 0) + S(x). */
static void check_moe(run *R) {
  const bo_graph *bg = R->bg;
  const bo_moe_shape *s = &bo_moe_shapes[bg->c->a];
  const pz_moe_params *p = &s->p;
  const int64_t H = s->H, I = p->inter, SI = p->shared_inter, E = p->n_experts, m = bg->c->m;
  const int K = p->top_k, *in = bg->in;
  int32_t ids[BO_M * 32];
  float wts[BO_M * 32];
  float *h = malloc(sizeof(float) * (size_t)(I + SI + 2 * H)), *d = h ? h + I + SI : NULL, *y = d ? d + H : NULL;
  int used = 0;
  for (int r = 0; r < bg->c->tp && h; r++) {
    const pz_bf16 *x = D(R, r, in[PZ_MOE_X]), *wg = D(R, r, in[PZ_MOE_W_GATE]), *wu = D(R, r, in[PZ_MOE_W_UP]),
                  *wd = D(R, r, in[PZ_MOE_W_DOWN]);
    pz_ref_moe_route(m, D(R, r, in[PZ_MOE_LOGITS]), E, in[PZ_MOE_BIAS] >= 0 ? D(R, r, in[PZ_MOE_BIAS]) : NULL, p, ids, wts);
    for (int64_t i = 0; i < m; i++) {
      for (int64_t j = 0; j < H; j++) y[j] = 0.0f;
      for (int t = 0; t < K; t++) {
        int32_t e = ids[i * K + t];
        if (e < 0) { memset(d, 0, sizeof(float) * (size_t)H); }
        else mlp_row(x + i * H, H, I, wg + e * I * H, wu + e * I * H, wd + e * H * I, h, d);
        used += e >= 0;
        for (int64_t j = 0; j < H; j++) y[j] += wts[i * K + t] * d[j];
      }
      if (SI > 0) {
        mlp_row(x + i * H, H, SI, D(R, r, in[PZ_MOE_SH_GATE]), D(R, r, in[PZ_MOE_SH_UP]), D(R, r, in[PZ_MOE_SH_DOWN]), h, d);
        for (int64_t j = 0; j < H; j++) y[j] += d[j];
      }
      for (int64_t j = 0; j < H; j++) {
        float g = G(R, r, in[PZ_MOE_NSRC], i, j);
        expect(R, same(g, y[j]), "moe.out", r, i, j, g, y[j]);
      }
    }
  }
  CHECK(used > 0);
  free(h);
}

/* MLA: pz_ref_mla_decode on the inputs and a copy of the cache as it was before the step. */
static void check_mla(run *R) {
  const bo_graph *bg = R->bg;
  const pz_node *n = &bg->g->nodes[0];
  const int *in = bg->in;
  const int64_t H = n->p.mla.hidden, m = bg->c->m, cache_n = pz_tensor_numel(T(R, in[PZ_MLA_KV_CACHE]));
  pz_bf16 *cache = malloc(sizeof(pz_bf16) * (size_t)cache_n);
  float *out = malloc(sizeof(float) * (size_t)(m * H));
  for (int r = 0; r < bg->c->tp && cache && out; r++) {
    memcpy(cache, R->snap[r][in[PZ_MLA_KV_CACHE]], sizeof(pz_bf16) * (size_t)cache_n);
#define OPT(slot) (in[slot] >= 0 ? D(R, r, in[slot]) : NULL)
#define LDOF(slot) (in[slot] >= 0 ? T(R, in[slot])->stride[0] : 0)
    pz_ref_mla_io io = {.qkv_a = OPT(PZ_MLA_QKV_A), .ld_qkv_a = LDOF(PZ_MLA_QKV_A), .q = OPT(PZ_MLA_Q), .ld_q = LDOF(PZ_MLA_Q),
                        .kv_a = OPT(PZ_MLA_KV_A), .ld_kv_a = LDOF(PZ_MLA_KV_A), .qa_norm_w = OPT(PZ_MLA_QA_NORM_W),
                        .qb_w = OPT(PZ_MLA_QB_W), .kva_norm_w = OPT(PZ_MLA_KVA_NORM_W), .w_uk = OPT(PZ_MLA_W_UK),
                        .w_uv = OPT(PZ_MLA_W_UV), .o_w = OPT(PZ_MLA_O_W), .kv_cache = cache,
                        .cache_seq_stride = T(R, in[PZ_MLA_KV_CACHE])->stride[0], .pos = bg->pos,
                        .out = out, .ld_out = H, .out_zero_init = true};
#undef OPT
#undef LDOF
    CHECK_OK(pz_ref_mla_decode(m, &n->p.mla, &io));
    for (int64_t i = 0; i < m; i++)
      for (int64_t j = 0; j < H; j++) expect(R, same(G(R, r, in[PZ_MLA_NSRC], i, j), out[i * H + j]), "attn.out", r, i, j,
                                             G(R, r, in[PZ_MLA_NSRC], i, j), out[i * H + j]);
    const pz_bf16 *got = D(R, r, in[PZ_MLA_KV_CACHE]);
    int64_t diff = 0, changed = 0;
    for (int64_t t = 0; t < cache_n; t++) {
      diff += got[t] != cache[t];
      changed += got[t] != ((const pz_bf16 *)R->snap[r][in[PZ_MLA_KV_CACHE]])[t];
    }
    expect(R, diff == 0, "kv_cache (elements differing)", r, 0, 0, (float)diff, 0);
    CHECK(changed > 0); /* the step appended its rows */
  }
  free(cache);
  free(out);
}

/* GQA: pz_ref_gqa_attention on the inputs and copies of the caches as they were before the step
 * (the op's unpacking: slots, strides, cache layout, positions; the formula is checked against a
 * double-precision model in test_cpu_gqa.c). */
static void check_gqa(run *R) {
  const bo_graph *bg = R->bg;
  const pz_node *n = &bg->g->nodes[0];
  const int *in = bg->in;
  const int64_t H = n->p.gqa.hidden, m = bg->c->m, cache_n = pz_tensor_numel(T(R, in[PZ_GQA_K_CACHE]));
  const pz_tensor *kt = T(R, in[PZ_GQA_K_CACHE]);
  pz_bf16 *kc = malloc(sizeof(pz_bf16) * (size_t)cache_n), *vc = malloc(sizeof(pz_bf16) * (size_t)cache_n);
  float *out = malloc(sizeof(float) * (size_t)(m * H));
  for (int r = 0; r < bg->c->tp && kc && vc && out; r++) {
    memcpy(kc, R->snap[r][in[PZ_GQA_K_CACHE]], sizeof(pz_bf16) * (size_t)cache_n);
    memcpy(vc, R->snap[r][in[PZ_GQA_V_CACHE]], sizeof(pz_bf16) * (size_t)cache_n);
#define OPT(slot) (in[slot] >= 0 ? D(R, r, in[slot]) : NULL)
    pz_ref_gqa_io io = {.qkv = D(R, r, in[PZ_GQA_QKV]), .ld_qkv = T(R, in[PZ_GQA_QKV])->stride[0],
                        .q_norm_w = OPT(PZ_GQA_Q_NORM_W), .k_norm_w = OPT(PZ_GQA_K_NORM_W), .o_w = D(R, r, in[PZ_GQA_O_W]),
                        .k_cache = kc, .v_cache = vc, .cache_seq_stride = kt->stride[0], .cache_head_stride = kt->stride[1],
                        .pos = bg->pos, .out = out, .ld_out = H, .out_zero_init = true};
#undef OPT
    CHECK_OK(pz_ref_gqa_attention(m, &n->p.gqa, &io));
    for (int64_t i = 0; i < m; i++)
      for (int64_t j = 0; j < H; j++) expect(R, same(G(R, r, in[PZ_GQA_NSRC], i, j), out[i * H + j]), "attn.out", r, i, j,
                                             G(R, r, in[PZ_GQA_NSRC], i, j), out[i * H + j]);
    const pz_bf16 *gk = D(R, r, in[PZ_GQA_K_CACHE]), *gv = D(R, r, in[PZ_GQA_V_CACHE]);
    int64_t diff = 0, changed = 0;
    for (int64_t t = 0; t < cache_n; t++) {
      diff += (gk[t] != kc[t]) + (gv[t] != vc[t]);
      changed += gk[t] != ((const pz_bf16 *)R->snap[r][in[PZ_GQA_K_CACHE]])[t];
    }
    expect(R, diff == 0, "k/v cache (elements differing)", r, 0, 0, (float)diff, 0);
    CHECK(changed > 0); /* the step appended its rows */
  }
  free(kc);
  free(vc);
  free(out);
}

/* SILU_MUL: act = bf16(silu(g) * u), silu(g) = g / (1 + expf(-g)), written out from the contract. */
static void check_silu(run *R) {
  const bo_graph *bg = R->bg;
  const int64_t I = bg->c->a;
  for (int r = 0; r < bg->c->tp; r++)
    for (int64_t i = 0; i < bg->c->m; i++)
      for (int64_t j = 0; j < I; j++) {
        const float g = G(R, r, bg->in[0], i, j), u = G(R, r, bg->in[0], i, I + j);
        const float s = g / (1.0f + expf(-g)), want = RB(s * u), got = G(R, r, bg->in[1], i, j);
        expect(R, same(got, want), "act", r, i, j, got, want);
      }
}

/* Donor: AR_RMSNORM's reference for x0, x1, R; the buffer's fill columns of rows [0, m) are +0,
 * beyond them (and rows >= m) the poison is untouched; consumer columns are checked by the MM case. */
static void check_donor(run *R) {
  const bo_graph *bg = R->bg;
  check_ar(R);
  pz_device_desc dev;
  pz_device_desc_default(&dev);
  const int var = bg->c->var;
  int64_t cols = var & BO_GATE_ON ? BO_NT : var & BO_GATE_OFF ? BO_NB
               : pz_prezero_fill_cols(bg->c->m, BO_NT, BO_NB, bg->c->a, bg->c->tp, &dev);
  for (int r = 0; r < bg->c->tp; r++)
    for (int64_t i = 0; i < BO_M; i++)
      for (int64_t j = 0; j < BO_NT; j++) {
        if (i < bg->c->m && (j < BO_NC || (j >= BO_NB && j < BO_NB + BO_NC))) continue; /* a consumer's */
        float g = G(R, r, bg->in[7], i, j);
        bool zero = i < bg->c->m && j < cols;
        expect(R, zero ? same(g, 0.0f) : isnan(g), "prezero_buf", r, i, j, g, zero ? 0.0f : NAN);
      }
}

/* Consumers: each slice equals the zero-initialising GEMM (backend split, no bias). */
static float want_mm(run *R, int r, int64_t i, int64_t j) {
  const bool second = j >= BO_NB;
  return gemm_ref(R, r, R->bg->in[8], R->bg->in[second ? 10 : 9], -1, i, second ? j - BO_NB : j, 0, 0.0f);
}
static void check_mm(run *R) {
  const bo_graph *bg = R->bg;
  for (int r = 0; r < bg->c->tp; r++)
    for (int64_t i = 0; i < bg->c->m; i++)
      for (int64_t j = 0; j < BO_NT; j++) {
        if (!(j < BO_NC || (j >= BO_NB && j < BO_NB + BO_NC))) continue;
        float g = G(R, r, bg->in[7], i, j), w = want_mm(R, r, i, j);
        expect(R, same(g, w), j < BO_NB ? "mm0.out" : "mm1.out", r, i, j, g, w);
      }
}

/* ---------------------------------------------------------------- driver */

typedef void (*check_fn)(run *R);
static const check_fn checks[PZ_OP_COUNT] = {
    [PZ_OP_EMBEDDING] = check_embedding, [PZ_OP_RMSNORM] = check_rmsnorm, [PZ_OP_AR_RMSNORM] = check_ar,
    [PZ_OP_GEMM] = check_gemm, [PZ_OP_MLA_ATTN] = check_mla, [PZ_OP_MOE] = check_moe, [PZ_OP_DENSE_MLP] = check_mlp,
    [PZ_OP_LM_HEAD] = check_gemm, [PZ_OP_ARGMAX] = check_argmax, [PZ_OP_AR_RMSNORM_MAYBE_PREZERO] = check_donor,
    [PZ_OP_MM_MAYBE_PREZERO] = check_mm, [PZ_OP_GQA_ATTN] = check_gqa, [PZ_OP_SILU_MUL] = check_silu,
};

/* Builds, runs and checks one case; returns 1 when it passed. */
static int run_case(const bo_case *c) {
  char label[160];
  bo_graph bg;
  bo_build(c, &bg);
  run R = {.bg = &bg};
  R.e = bg.g ? bo_cpu_create(&bg) : NULL;
  int ok = 0;
  if (R.e) {
    const int nt = bg.g->n_tensors;
    R.snap = calloc((size_t)c->tp, sizeof(void **));
    for (int r = 0; r < c->tp && R.snap; r++) {
      R.snap[r] = calloc((size_t)nt, sizeof(void *));
      for (int t = 0; t < nt && R.snap[r]; t++) {
        const pz_tensor *x = &bg.g->tensors[t];
        if (x->kind != PZ_T_STATE || x->view_of >= 0) continue;
        size_t bytes = (size_t)pz_tensor_span(x) * pz_dtype_size(x->dtype);
        R.snap[r][t] = malloc(bytes);
        if (R.snap[r][t]) memcpy(R.snap[r][t], D(&R, r, t), bytes);
      }
    }
    pz_status st = bo_cpu_step(&bg, R.e, R.next);
    if (st != PZ_OK) {
      fprintf(stderr, "  step failed: %s\n", pz_last_error());
      R.bad++;
    } else {
      checks[c->op](&R);
    }
    ok = R.bad == 0;
    for (int r = 0; r < c->tp && R.snap; r++) {
      for (int t = 0; t < nt && R.snap[r]; t++) free(R.snap[r][t]);
      free(R.snap[r]);
    }
    free(R.snap);
  }
  printf("%-4s %-26s %s%s\n", ok ? "ok" : "FAIL", pz_op_name(c->op), bo_label(c, label, sizeof label),
         ok ? ": bit-exact" : "");
  if (!ok && R.bad) fprintf(stderr, "  %d mismatches\n", R.bad);
  CHECK(ok);
  pz_cpu_exec_free(R.e);
  pz_graph_free(bg.g);
  return ok;
}

int main(void) {
  int n_run = 0, n_ok = 0, n_ops = 0;
  const char *gaps[PZ_OP_COUNT];
  int n_gaps = 0;
  for (int op = 0; op < PZ_OP_COUNT; op++) {
    const bo_entry *en = &bo_entries[op];
    int cases = 0;
    for (int i = 0; i < BO_N_CASES; i++) cases += bo_cases[i].op == (pz_op)op;
    if (!en->build || !checks[op] || cases == 0) {
      if (en->gap[0]) {
        printf("gap: %s: %s\n", pz_op_name(op), en->gap);
        gaps[n_gaps++] = pz_op_name(op);
      } else {
        fprintf(stderr, "op %s has %s and no declared gap\n", pz_op_name(op),
                !en->build ? "no case builder" : !checks[op] ? "no CPU check" : "no cases");
        pz_test_failures++;
      }
      continue;
    }
    n_ops++;
    for (int i = 0; i < BO_N_CASES; i++)
      if (bo_cases[i].op == (pz_op)op) { n_run++; n_ok += run_case(&bo_cases[i]); }
  }
  printf("CPU backend: %d of %d ops checked, %d of %d cases bit-exact (TP 1 and 2), %d gap(s)", n_ops, PZ_OP_COUNT, n_ok,
         n_run, n_gaps);
  for (int i = 0; i < n_gaps; i++) printf("%s %s", i ? "," : ":", gaps[i]);
  printf("\n");
  TEST_DONE();
}
