/* MLA decode reference: context 1 by hand, the absorbed form against the plain (non-absorbed)
 * attention composed from the unfused references, cache append, YaRN, q_b / o_proj slots.
 * Paged KV cache (core/kv_pages.h): at the Kimi-K2 / DeepSeek-V3 per-rank shapes of TP 1/2/4/8,
 * batches mixing contexts 1 / 63 / 64 / 65 / 8192 (32768 unless PZ_TEST_QUICK is set) give the
 * same bits through the identity table and through shuffled pages (unused pages and rows past
 * each position NaN: never read) as through the contiguous cache, and append to the right page;
 * the prezero slots stay bit-identical on a paged cache; the CPU executor decodes a builder
 * graph with paged caches bit for bit like the same graph with contiguous caches (seeded fill
 * included), and like a shuffled block table set with pz_cpu_exec_set_block_table. */
#define _POSIX_C_SOURCE 200809L
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/ref_ops.h"
#include "core/kv_pages.h"
#include "model/builder.h"
#include "model/config.h"
#include "pz_test.h"
#include <stdlib.h>
#include <string.h>
#include <time.h>

static pz_bf16 B(float f) { return pz_f32_to_bf16(f); }
static float F(pz_bf16 h) { return pz_bf16_to_f32(h); }

/* Context 1, no q LoRA: softmax over one position is 1, so o = W_UV · c_0 whatever q is. */
static void test_context1(void) {
  pz_mla_params p = {.n_heads = 1, .hidden = 4, .q_lora_rank = 0, .kv_lora_rank = 4, .qk_nope_head_dim = 2,
                     .qk_rope_head_dim = 4, .v_head_dim = 2, .max_ctx = 3, .eps = 0.f,
                     .rope = {.theta = 10000.f, .factor = 1.f}};
  p.softmax_scale = pz_ref_mla_softmax_scale(2, 4, &p.rope);
  float q[6] = {1, -1, 0.5f, 0.25f, -2, 3};
  float kv_a[8] = {2, 2, 2, 2, 1, 2, 3, 4};     /* kv_c = [2,2,2,2] -> RMSNorm -> [1,1,1,1] */
  pz_bf16 ones[4] = {B(1), B(1), B(1), B(1)};
  pz_bf16 w_uk[2 * 4];
  for (int i = 0; i < 8; i++) w_uk[i] = B(0.125f * (float)(i - 3));
  pz_bf16 w_uv[2 * 4] = {B(1), B(0), B(0), B(0), B(0), B(1), B(1), B(0)}; /* o = [c0, c1 + c2] = [1, 2] */
  pz_bf16 o_w[4 * 2] = {B(1), B(0), B(0), B(1), B(1), B(1), B(2), B(-1)};  /* out = [1, 2, 3, 0] */
  pz_bf16 cache[3 * 8];
  for (int i = 0; i < 24; i++) cache[i] = B(100.f);
  int32_t pos[1] = {0};
  float out[4] = {9, 9, 9, 9};
  pz_ref_mla_io io = {.q = q, .ld_q = 6, .kv_a = kv_a, .ld_kv_a = 8, .kva_norm_w = ones, .w_uk = w_uk,
                      .w_uv = w_uv, .o_w = o_w, .kv_cache = cache, .cache_seq_stride = 24, .pos = pos,
                      .out = out, .ld_out = 4, .out_zero_init = true};
  CHECK_OK(pz_ref_mla_decode(1, &p, &io));
  float want[4] = {1, 2, 3, 0};
  for (int i = 0; i < 4; i++) CHECK(out[i] == want[i]);
  /* cache[0] = [c | k_pe roped at pos 0] = [1,1,1,1 | 1,3,2,4] (RoPE at 0 is the HF permutation) */
  float wc[8] = {1, 1, 1, 1, 1, 3, 2, 4};
  for (int i = 0; i < 8; i++) CHECK(F(cache[i]) == wc[i]);
  CHECK(F(cache[8]) == 100.f && F(cache[23]) == 100.f);
  /* zero_init = false accumulates onto out */
  io.out_zero_init = false;
  for (int i = 0; i < 8; i++) cache[i] = B(100.f);
  CHECK_OK(pz_ref_mla_decode(1, &p, &io));
  for (int i = 0; i < 4; i++) CHECK(out[i] == 2 * want[i]);
  /* pos outside the cache */
  pos[0] = 3;
  CHECK_ST(pz_ref_mla_decode(1, &p, &io), PZ_ERR_INVALID_ARG);
  pos[0] = -1;
  CHECK_ST(pz_ref_mla_decode(1, &p, &io), PZ_ERR_INVALID_ARG);
}

/* Random problem with q LoRA, 2 heads, YaRN with cos/sin mscale != 1, m = 3 rows at different
 * positions, checked against the non-absorbed form: k_j = W_UK·c_j, v_j = W_UV·c_j,
 * score = q_nope·k_j + q_pe·kpe_j (double), composed from pz_ref_rmsnorm / gemm / rope. */
enum { M = 3, NH = 2, QL = 24, KVL = 32, NOPE = 8, ROPE = 8, VD = 8, HID = 16, CTX = 20 };
#define QH (NOPE + ROPE)
#define KVW (KVL + ROPE)
static float rnd(unsigned *s) { *s = *s * 1664525u + 1013904223u; return (float)((*s >> 8) & 0xffff) / 32768.f - 1.f; }

static void test_vs_plain(void) {
  unsigned s = 7;
  pz_mla_params p = {.n_heads = NH, .hidden = HID, .q_lora_rank = QL, .kv_lora_rank = KVL, .qk_nope_head_dim = NOPE,
                     .qk_rope_head_dim = ROPE, .v_head_dim = VD, .max_ctx = CTX, .eps = 1e-6f,
                     .rope = {.theta = 10000.f, .factor = 40.f, .original_max_position_embeddings = 4096,
                              .beta_fast = 32.f, .beta_slow = 1.f, .mscale = 1.0f, .mscale_all_dim = 0.707f}};
  p.softmax_scale = pz_ref_mla_softmax_scale(NOPE, ROPE, &p.rope);
  static float qkv[M * (QL + KVW)];
  static pz_bf16 qan[QL], qb[NH * QH * QL], kvan[KVL], wuk[NH * NOPE * KVL], wuv[NH * VD * KVL], ow[HID * NH * VD];
  static pz_bf16 cache[M * CTX * KVW], cache0[M * CTX * KVW], cache1[M * CTX * KVW];
  for (int i = 0; i < M * (QL + KVW); i++) qkv[i] = 2.f * rnd(&s);
  for (int i = 0; i < QL; i++) qan[i] = B(1.f + 0.2f * rnd(&s));
  for (int i = 0; i < KVL; i++) kvan[i] = B(1.f + 0.2f * rnd(&s));
  for (int i = 0; i < NH * QH * QL; i++) qb[i] = B(0.3f * rnd(&s));
  for (int i = 0; i < NH * NOPE * KVL; i++) wuk[i] = B(0.3f * rnd(&s));
  for (int i = 0; i < NH * VD * KVL; i++) wuv[i] = B(0.3f * rnd(&s));
  for (int i = 0; i < HID * NH * VD; i++) ow[i] = B(0.3f * rnd(&s));
  for (int i = 0; i < M * CTX * KVW; i++) cache[i] = B(rnd(&s));
  memcpy(cache0, cache, sizeof cache);
  memcpy(cache1, cache, sizeof cache);
  int32_t pos[M] = {0, 6, 19};
  float out[M * HID];
  pz_ref_mla_io io = {.qkv_a = qkv, .ld_qkv_a = QL + KVW, .qa_norm_w = qan, .qb_w = qb, .kva_norm_w = kvan,
                      .w_uk = wuk, .w_uv = wuv, .o_w = ow, .kv_cache = cache, .cache_seq_stride = CTX * KVW,
                      .pos = pos, .out = out, .ld_out = HID, .out_zero_init = true};
  CHECK_OK(pz_ref_mla_decode(M, &p, &io));

  /* composition of unfused references */
  static pz_bf16 qn[M * QL];
  static float q[M * NH * QH];
  pz_ref_rmsnorm(M, QL, qkv, PZ_F32, QL + KVW, qan, p.eps, qn, QL);
  pz_ref_gemm(M, NH * QH, QL, qn, QL, qb, QL, NULL, q, NH * QH, 1, true);
  float inv[ROPE / 2], ms = pz_ref_yarn_cos_sin_mscale(&p.rope);
  CHECK(ms != 1.0f);
  pz_ref_yarn_inv_freq(&p.rope, ROPE, inv);
  double maxerr = 0, maxv = 0;
  for (int i = 0; i < M; i++) {
    /* the appended entry */
    pz_bf16 cnew[KVL];
    pz_ref_rmsnorm(1, KVL, qkv + i * (QL + KVW) + QL, PZ_F32, KVL, kvan, p.eps, cnew, KVL);
    float kpe[ROPE];
    memcpy(kpe, qkv + i * (QL + KVW) + QL + KVL, sizeof kpe);
    pz_ref_rope(kpe, ROPE, pos[i], inv, ms);
    pz_bf16 *row = cache1 + i * CTX * KVW + pos[i] * KVW;
    memcpy(row, cnew, sizeof cnew);
    for (int r = 0; r < ROPE; r++) row[KVL + r] = B(kpe[r]);
    CHECK(memcmp(cache + i * CTX * KVW, cache1 + i * CTX * KVW, sizeof(pz_bf16) * CTX * KVW) == 0);
    pz_bf16 o[NH * VD];
    for (int h = 0; h < NH; h++) {
      float qpe[ROPE];
      memcpy(qpe, q + i * NH * QH + h * QH + NOPE, sizeof qpe);
      pz_ref_rope(qpe, ROPE, pos[i], inv, ms);
      double sc[CTX], mx = -1e30, sum = 0;
      for (int j = 0; j <= pos[i]; j++) {
        const pz_bf16 *cj = cache1 + i * CTX * KVW + j * KVW;
        double sco = 0;
        for (int d = 0; d < NOPE; d++) {
          double k = 0;
          for (int c = 0; c < KVL; c++) k += (double)F(wuk[(h * NOPE + d) * KVL + c]) * F(cj[c]);
          sco += (double)q[i * NH * QH + h * QH + d] * k;
        }
        for (int r = 0; r < ROPE; r++) sco += (double)qpe[r] * F(cj[KVL + r]);
        sc[j] = sco * p.softmax_scale;
        if (sc[j] > mx) mx = sc[j];
      }
      for (int j = 0; j <= pos[i]; j++) { sc[j] = exp(sc[j] - mx); sum += sc[j]; }
      for (int e = 0; e < VD; e++) {
        double acc = 0;
        for (int j = 0; j <= pos[i]; j++) {
          const pz_bf16 *cj = cache1 + i * CTX * KVW + j * KVW;
          double v = 0;
          for (int c = 0; c < KVL; c++) v += (double)F(wuv[(h * VD + e) * KVL + c]) * F(cj[c]);
          acc += sc[j] / sum * v;
        }
        o[h * VD + e] = B((float)acc);
      }
    }
    for (int n = 0; n < HID; n++) {
      double y = 0;
      for (int k = 0; k < NH * VD; k++) y += (double)F(o[k]) * F(ow[n * NH * VD + k]);
      maxerr = fmax(maxerr, fabs(y - out[i * HID + n]));
      maxv = fmax(maxv, fabs(y));
    }
  }
  printf("mla vs plain attention: max |out| %.4f, max err %.3g\n", maxv, maxerr);
  CHECK(maxv > 0.05);
  CHECK(maxerr <= 0.02 * maxv); /* o may land on the other side of a bf16 rounding */

  /* worker threads (outside an executor): bit-identical output and cache */
  {
    static float out3[M * HID];
    memcpy(cache, cache0, sizeof cache);
    pz_ref_mla_io io3 = io;
    io3.out = out3;
    CHECK_OK(pz_ref_set_threads(2));
    CHECK_OK(pz_ref_mla_decode(M, &p, &io3));
    CHECK_OK(pz_ref_set_threads(1));
    CHECK(memcmp(out3, out, sizeof out3) == 0);
    CHECK(memcmp(cache, cache1, sizeof cache) == 0);
  }

  /* slots: q_b into a pre-zeroed wider buffer (zero_init=false) and o_proj into a pre-zeroed
   * slice give bit-identical outputs; the q_b slice holds q */
  enum { W = NH * QH + HID + 5 };
  static float buf[M * W], out2[M * HID];
  memset(buf, 0, sizeof buf);
  memcpy(cache, cache0, sizeof cache);
  pz_ref_mla_io io2 = io;
  io2.qb_out = buf + 2; io2.ld_qb_out = W; io2.qb_zero_init = false;
  io2.out = buf + 2 + NH * QH; io2.ld_out = W; io2.out_zero_init = false;
  CHECK_OK(pz_ref_mla_decode(M, &p, &io2));
  int same = 1, qsame = 1;
  for (int i = 0; i < M; i++) {
    for (int n = 0; n < HID; n++) same &= memcmp(&buf[i * W + 2 + NH * QH + n], &out[i * HID + n], 4) == 0;
    for (int n = 0; n < NH * QH; n++) qsame &= memcmp(&buf[i * W + 2 + n], &q[i * NH * QH + n], 4) == 0;
    same &= buf[i * W] == 0 && buf[i * W + 1] == 0 && buf[i * W + W - 1] == 0;
  }
  CHECK(same);
  CHECK(qsame);
  CHECK(memcmp(cache, cache1, sizeof cache) == 0);
  /* a slot that was NOT pre-zeroed shows up (zero_init=false accumulates) */
  memcpy(cache, cache0, sizeof cache);
  for (int i = 0; i < M * HID; i++) out2[i] = 1.0f;
  io2 = io;
  io2.out = out2; io2.out_zero_init = false;
  CHECK_OK(pz_ref_mla_decode(M, &p, &io2));
  int differs = 0;
  for (int i = 0; i < M * HID; i++) differs |= out2[i] != out[i];
  CHECK(differs);
}

/* ------------------------------------------------------------------ paged cache */

static uint64_t rs = 0x243f6a8885a308d3ull;
static uint32_t xr(void) {
  rs ^= rs << 13; rs ^= rs >> 7; rs ^= rs << 17;
  return (uint32_t)(rs >> 32);
}
static float ur(void) { return (float)(xr() >> 8) / 8388608.0f - 1.0f; } /* [-1, 1) */
static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}
#define NANB ((pz_bf16)0xffff) /* a bf16 NaN: any read of it reaches the output */

/* The builder's MLA params of `preset` at TP tp (layer 0): heads per rank, softmax scale, YaRN. */
static int preset_params(const char *preset, int tp, pz_mla_params *out) {
  pz_model_config c;
  pz_build_opts o = PZ_BUILD_OPTS_INIT;
  pz_graph *g = NULL;
  o.tp = tp; o.m = 1; o.max_ctx = 64; o.layers = 1;
  CHECK_OK(pz_config_load(preset, &c));
  CHECK_OK(pz_build_decode_graph(&c, &o, &g));
  int found = 0;
  for (int k = 0; g && k < g->n_nodes; k++)
    if (g->nodes[k].op == PZ_OP_MLA_ATTN) { *out = g->nodes[k].p.mla; found = 1; break; }
  pz_graph_free(g);
  CHECK(found);
  return found;
}

/* Weights of the largest per-rank shape (128 heads); a smaller shape uses prefixes (random too). */
typedef struct big_w { pz_bf16 *qa, *qb, *kva, *wuk, *wuv, *ow; } big_w;
static big_w BW;
static void big_w_make(const pz_mla_params *p, int heads) {
  const int64_t ql = p->q_lora_rank, L = p->kv_lora_rank, nope = p->qk_nope_head_dim, qh = nope + p->qk_rope_head_dim;
  const int64_t vd = p->v_head_dim, H = p->hidden;
  int64_t n[6] = {ql, heads * qh * ql, L, heads * nope * L, heads * vd * L, H * heads * vd};
  float sc[6] = {0.1f, 1.7f / sqrtf((float)ql), 0.1f, 1.7f / sqrtf((float)nope), 1.7f / sqrtf((float)L), 0};
  sc[5] = 1.7f / sqrtf((float)(heads * vd));
  pz_bf16 **dst[6] = {&BW.qa, &BW.qb, &BW.kva, &BW.wuk, &BW.wuv, &BW.ow};
  for (int k = 0; k < 6; k++) {
    *dst[k] = malloc(sizeof(pz_bf16) * (size_t)n[k]);
    const float off = k == 0 || k == 2 ? 1.0f : 0.0f;
    for (int64_t x = 0; x < n[k]; x++) (*dst[k])[x] = B(off + sc[k] * ur());
  }
}
static void big_w_free(void) { free(BW.qa); free(BW.qb); free(BW.kva); free(BW.wuk); free(BW.wuv); free(BW.ow); }

static pz_ref_mla_io big_io(const pz_mla_params *p, const float *qkv, const int32_t *pos, float *out) {
  pz_ref_mla_io io = {.qkv_a = qkv, .ld_qkv_a = p->q_lora_rank + p->kv_lora_rank + p->qk_rope_head_dim,
                      .qa_norm_w = BW.qa, .qb_w = BW.qb, .kva_norm_w = BW.kva, .w_uk = BW.wuk, .w_uv = BW.wuv,
                      .o_w = BW.ow, .pos = pos, .out = out, .ld_out = p->hidden, .out_zero_init = true};
  return io;
}

/* A page pool holding the logical rows of the contiguous cache C [m, max_ctx, kvw] through
 * table [m, mb]; rows beyond max_ctx and pages nobody maps are NaN. */
static pz_bf16 *pool_from(const pz_bf16 *C, int m, int64_t max_ctx, int64_t kvw, const int32_t *table, int64_t mb,
                          int64_t n_pages) {
  const size_t n = (size_t)(n_pages * PZ_KV_BLOCK * kvw);
  pz_bf16 *pool = malloc(sizeof(pz_bf16) * n);
  for (size_t x = 0; x < n; x++) pool[x] = NANB;
  for (int i = 0; i < m; i++)
    for (int64_t j = 0; j < max_ctx; j++)
      memcpy(pool + pz_kv_row_offset(table, mb, 0, i, j, kvw), C + (i * max_ctx + j) * kvw, sizeof(pz_bf16) * (size_t)kvw);
  return pool;
}

/* One step of m rows with contexts ctx[i] (pos = ctx - 1, max_ctx = the largest): the contiguous
 * cache (rows >= pos NaN), then the identity table (when `identity`) and shuffled pages with
 * mb + 3 spare pages nobody maps (NaN). Each paged output is bit-identical to the contiguous one
 * and finite; the pool afterwards is the pool before with exactly the appended rows changed,
 * equal to the contiguous cache's. */
static void paged_case(const char *name, pz_mla_params p, const int64_t *ctx, int m, int identity) {
  const double t0 = now_s();
  const int64_t kvw = p.kv_lora_rank + p.qk_rope_head_dim, H = p.hidden;
  int64_t maxc = 1;
  for (int i = 0; i < m; i++) if (ctx[i] > maxc) maxc = ctx[i];
  p.max_ctx = maxc;
  const int64_t mb = pz_kv_max_blocks(maxc), S = maxc * kvw;
  int32_t *pos = malloc(sizeof(int32_t) * (size_t)m);
  for (int i = 0; i < m; i++) pos[i] = (int32_t)(ctx[i] - 1);
  const int64_t in_w = p.q_lora_rank + kvw;
  float *qkv = malloc(sizeof(float) * (size_t)(m * in_w));
  for (int64_t x = 0; x < m * in_w; x++) qkv[x] = 2.0f * ur();
  pz_bf16 *C = malloc(sizeof(pz_bf16) * (size_t)(m * S)), *C1 = malloc(sizeof(pz_bf16) * (size_t)(m * S));
  for (int i = 0; i < m; i++)
    for (int64_t x = 0; x < S; x++) C[i * S + x] = x < pos[i] * kvw ? B(1.7f * ur()) : NANB;
  memcpy(C1, C, sizeof(pz_bf16) * (size_t)(m * S));
  float *out0 = malloc(sizeof(float) * (size_t)(m * H)), *out1 = malloc(sizeof(float) * (size_t)(m * H));
  pz_ref_mla_io io = big_io(&p, qkv, pos, out0);
  io.kv_cache = C1;
  io.cache_seq_stride = S;
  CHECK_OK(pz_ref_mla_decode(m, &p, &io));
  int64_t nonfinite = 0;
  for (int64_t x = 0; x < m * H; x++) nonfinite += !isfinite(out0[x]);
  CHECK(nonfinite == 0);
  for (int v = identity ? 0 : 1; v < 2; v++) {
    const int64_t n_pages = m * mb + (v ? mb + 3 : 0);
    int32_t *perm = malloc(sizeof(int32_t) * (size_t)n_pages), *table = malloc(sizeof(int32_t) * (size_t)(m * mb));
    for (int64_t k = 0; k < n_pages; k++) perm[k] = (int32_t)k;
    for (int64_t k = n_pages - 1; v && k > 0; k--) {
      const int64_t r = (int64_t)(xr() % (uint32_t)(k + 1));
      const int32_t t = perm[k]; perm[k] = perm[r]; perm[r] = t;
    }
    memcpy(table, perm, sizeof(int32_t) * (size_t)(m * mb));
    if (!v) { /* the identity is the executors' default */
      int32_t *id = malloc(sizeof(int32_t) * (size_t)(m * mb));
      pz_kv_identity_table(id, m, mb, mb);
      CHECK(memcmp(id, table, sizeof(int32_t) * (size_t)(m * mb)) == 0);
      free(id);
    }
    pz_bf16 *pool = pool_from(C, m, maxc, kvw, table, mb, n_pages), *want = pool_from(C1, m, maxc, kvw, table, mb, n_pages);
    pz_ref_mla_io pio = big_io(&p, qkv, pos, out1);
    pio.kv_cache = pool;
    pio.block_table = table;
    pio.ld_block_table = mb;
    pio.n_pages = n_pages;
    for (int64_t x = 0; x < m * H; x++) out1[x] = NAN;
    CHECK_OK(pz_ref_mla_decode(m, &p, &pio));
    const size_t pool_bytes = sizeof(pz_bf16) * (size_t)(n_pages * PZ_KV_BLOCK * kvw);
    const int same_out = memcmp(out0, out1, sizeof(float) * (size_t)(m * H)) == 0, same_pool = memcmp(pool, want, pool_bytes) == 0;
    CHECK(same_out);
    CHECK(same_pool);
    if (!same_out || !same_pool) fprintf(stderr, "%s, %s table: output %s, pool %s\n", name, v ? "shuffled" : "identity",
                                         same_out ? "same" : "DIFFERS", same_pool ? "same" : "DIFFERS");
    free(pool); free(want); free(perm); free(table);
  }
  printf("paged %-14s m=%d contexts", name, m);
  for (int i = 0; i < m; i++) printf(" %lld", (long long)ctx[i]);
  printf(": %s%s bit-identical to contiguous (%.2f s)\n", identity ? "identity + " : "", "shuffled", now_s() - t0);
  free(pos); free(qkv); free(C); free(C1); free(out0); free(out1);
}

/* The q_b / o_proj slots on a shuffled paged cache: pre-zeroed slots (zero_init = false) give the
 * bits of no slots, the q_b slice holds q, and columns outside the slots stay zero. */
static void paged_slots(const pz_mla_params *p0) {
  pz_mla_params p = *p0;
  const int m = 3;
  const int64_t ctx[3] = {1, 65, 130}, kvw = p.kv_lora_rank + p.qk_rope_head_dim, H = p.hidden;
  const int64_t nqb = p.n_heads * (p.qk_nope_head_dim + p.qk_rope_head_dim), W = 32 + nqb + H;
  p.max_ctx = 130;
  const int64_t mb = pz_kv_max_blocks(p.max_ctx), n_pages = m * mb + 2, S = p.max_ctx * kvw;
  int32_t pos[3], table[3 * 3];
  for (int i = 0; i < m; i++) pos[i] = (int32_t)(ctx[i] - 1);
  const int32_t tab[9] = {7, 2, 9, 4, 0, 10, 1, 8, 5}; /* pages 3 and 6 unused */
  memcpy(table, tab, sizeof table);
  CHECK(mb == 3 && n_pages == 11);
  const int64_t in_w = p.q_lora_rank + kvw;
  float *qkv = malloc(sizeof(float) * (size_t)(m * in_w));
  for (int64_t x = 0; x < m * in_w; x++) qkv[x] = 2.0f * ur();
  pz_bf16 *C = malloc(sizeof(pz_bf16) * (size_t)(m * S));
  for (int i = 0; i < m; i++)
    for (int64_t x = 0; x < S; x++) C[i * S + x] = x < pos[i] * kvw ? B(1.7f * ur()) : NANB;
  pz_bf16 *pool = pool_from(C, m, p.max_ctx, kvw, table, mb, n_pages);
  const size_t pb = sizeof(pz_bf16) * (size_t)(n_pages * PZ_KV_BLOCK * kvw);
  pz_bf16 *pool0 = malloc(pb);
  memcpy(pool0, pool, pb);
  float *out = malloc(sizeof(float) * (size_t)(m * H)), *buf = calloc((size_t)(m * W), sizeof(float));
  pz_ref_mla_io io = big_io(&p, qkv, pos, out);
  io.kv_cache = pool; io.block_table = table; io.ld_block_table = mb; io.n_pages = n_pages;
  CHECK_OK(pz_ref_mla_decode(m, &p, &io));
  memcpy(pool, pool0, pb);
  pz_ref_mla_io io2 = io;
  io2.qb_out = buf + 32; io2.ld_qb_out = W; io2.qb_zero_init = false;
  io2.out = buf + 32 + nqb; io2.ld_out = W; io2.out_zero_init = false;
  CHECK_OK(pz_ref_mla_decode(m, &p, &io2));
  /* q from the unfused references: q_a_layernorm then the q_b GEMM */
  pz_bf16 *qn = malloc(sizeof(pz_bf16) * (size_t)(m * p.q_lora_rank));
  float *q = malloc(sizeof(float) * (size_t)(m * nqb));
  pz_ref_rmsnorm(m, p.q_lora_rank, qkv, PZ_F32, in_w, BW.qa, p.eps, qn, p.q_lora_rank);
  pz_ref_gemm(m, nqb, p.q_lora_rank, qn, p.q_lora_rank, BW.qb, p.q_lora_rank, NULL, q, nqb, 1, true);
  int64_t diff = 0, qdiff = 0, guard = 0;
  for (int i = 0; i < m; i++) {
    for (int64_t n = 0; n < H; n++) diff += memcmp(&buf[i * W + 32 + nqb + n], &out[i * H + n], 4) != 0;
    for (int64_t n = 0; n < nqb; n++) qdiff += memcmp(&buf[i * W + 32 + n], &q[i * nqb + n], 4) != 0;
    for (int64_t n = 0; n < 32; n++) guard += buf[i * W + n] != 0.0f;
  }
  CHECK(diff == 0);
  CHECK(qdiff == 0);
  CHECK(guard == 0);
  printf("paged slots %s: q_b / o_proj set vs unset %lld / %lld differing values\n", "kimi-k2 tp8", (long long)qdiff,
         (long long)diff);
  /* a page outside the pool is refused where it is read: 9 pages leave entries 9 and 10 outside,
   * which no row reads (row 0 uses block 0, row 1 blocks 0-1); 8 pages put entry 8 (row 2, block
   * 1) outside too */
  memcpy(pool, pool0, pb);
  io.n_pages = 9;
  CHECK_OK(pz_ref_mla_decode(m, &p, &io));
  io.n_pages = 8;
  CHECK_ST(pz_ref_mla_decode(m, &p, &io), PZ_ERR_INVALID_ARG);
  io.n_pages = n_pages;
  table[4] = -1; /* row 1, block 1: read by context 65 */
  CHECK_ST(pz_ref_mla_decode(m, &p, &io), PZ_ERR_INVALID_ARG);
  table[4] = tab[4];
  table[2] = -5; /* row 0, block 2: beyond its context 1, never read, not checked */
  CHECK_OK(pz_ref_mla_decode(m, &p, &io));
  free(qkv); free(C); free(pool); free(pool0); free(out); free(buf); free(qn); free(q);
}

/* The table helpers: identity, range and duplicate checks. */
static void table_helpers(void) {
  int32_t t[2 * 3];
  pz_kv_identity_table(t, 2, 3, 3);
  const int32_t want[6] = {0, 1, 2, 3, 4, 5};
  CHECK(memcmp(t, want, sizeof t) == 0);
  CHECK(pz_kv_max_blocks(1) == 1 && pz_kv_max_blocks(64) == 1 && pz_kv_max_blocks(65) == 2 && pz_kv_max_blocks(8192) == 128);
  CHECK_OK(pz_kv_check_table(t, 2, 3, 3, 6, true));
  CHECK_ST(pz_kv_check_table(t, 2, 3, 3, 5, true), PZ_ERR_INVALID_ARG);
  t[4] = 1;
  CHECK_OK(pz_kv_check_table(t, 2, 3, 3, 6, false));
  CHECK_ST(pz_kv_check_table(t, 2, 3, 3, 6, true), PZ_ERR_INVALID_ARG);
  CHECK(pz_kv_row_offset(NULL, 0, 1000, 2, 5, 10) == 2050);
  const int32_t tb[2] = {3, 1};
  CHECK(pz_kv_row_offset(tb, 2, 0, 0, 70, 10) == (1 * 64 + 6) * 10);
}

/* ------------------------------------------------------------------ executor */

/* The builder graph of `preset` with contiguous caches instead: every MLA node's block table
 * slot unset and its pool seen as [m, max_ctx, kvw] (the layout before paging; max_ctx a
 * multiple of 64 or not, the storage is at least that large). */
static pz_graph *contiguous_clone(const pz_graph *g) {
  pz_graph *c = NULL;
  CHECK_OK(pz_graph_clone(g, &c));
  for (int k = 0; c && k < c->n_nodes; k++) {
    pz_node *n = &c->nodes[k];
    if (n->op != PZ_OP_MLA_ATTN) continue;
    n->src[PZ_MLA_BLOCK_TABLE] = -1;
    pz_tensor *t = &c->tensors[n->src[PZ_MLA_KV_CACHE]];
    const int64_t kvw = t->ne[2], mc = n->p.mla.max_ctx;
    t->ne[0] = c->info.m; t->ne[1] = mc;
    t->stride[0] = mc * kvw; t->stride[1] = kvw; t->stride[2] = 1;
    t->full_ne[0] = t->ne[0]; t->full_ne[1] = mc;
    t->batched = true;
  }
  if (c) CHECK_OK(pz_graph_verify(c));
  return c;
}

/* A few decode steps of every executor from the same positions (mixed, crossing block
 * boundaries), fed its own argmax; logits [steps, m, vocab] into L[e]. */
static void decode_all(pz_cpu_exec **ex, int n_ex, int64_t m, int steps, int64_t vocab, float **L) {
  int32_t tok[8], pos[8], next[8];
  const int32_t p0[8] = {0, 62, 63, 90, 5, 127, 60, 1};
  for (int e = 0; e < n_ex; e++) {
    for (int i = 0; i < m; i++) { tok[i] = (int32_t)(7 + 31 * i); pos[i] = p0[i]; }
    for (int s = 0; s < steps; s++) {
      CHECK_OK(pz_cpu_exec_step(ex[e], m, tok, pos, next));
      CHECK_OK(pz_cpu_exec_logits(ex[e], m, L[e] + (int64_t)s * m * vocab));
      for (int i = 0; i < m; i++) { tok[i] = next[i]; pos[i]++; }
    }
  }
}

static void exec_paged(int tp, int64_t max_ctx) {
  pz_model_config c;
  CHECK_OK(pz_config_load("tiny", &c));
  pz_build_opts o = PZ_BUILD_OPTS_INIT;
  o.tp = tp; o.m = 4; o.max_ctx = max_ctx; o.layers = 2;
  pz_graph *g = NULL;
  CHECK_OK(pz_build_decode_graph(&c, &o, &g));
  if (!g) return;
  pz_graph *gc = contiguous_clone(g);
  const int64_t m = 4, vocab = g->info.vocab_size, mb = pz_kv_max_blocks(max_ctx);
  const int steps = 4;
  pz_cpu_exec_opts eo = PZ_CPU_EXEC_OPTS_INIT;
  eo.threads = 2;
  eo.poison = 1;
  pz_cpu_exec *ex[4] = {NULL, NULL, NULL, NULL};
  CHECK_OK(pz_cpu_exec_create(g, &eo, &ex[0]));  /* paged, identity table */
  CHECK_OK(pz_cpu_exec_create(gc, &eo, &ex[1])); /* contiguous */
  CHECK_OK(pz_cpu_exec_create(g, &eo, &ex[2]));  /* paged, shuffled table set through the API */
  CHECK_OK(pz_cpu_exec_create(g, &eo, &ex[3]));  /* shuffled table written without moving the pages */
  if (!ex[0] || !ex[1] || !ex[2] || !ex[3]) goto done;
  int bt = -1;
  for (int t = 0; t < g->n_tensors; t++) if (!strcmp(g->tensors[t].name, "block_table")) bt = t;
  CHECK(bt >= 0);
  if (bt < 0) goto done;
  /* the table starts as the identity on every rank */
  int32_t *idt = malloc(sizeof(int32_t) * (size_t)(m * mb)), *sh = malloc(sizeof(int32_t) * (size_t)(m * mb));
  pz_kv_identity_table(idt, m, mb, mb);
  for (int r = 0; r < tp; r++) CHECK(memcmp(pz_cpu_exec_data(ex[0], r, bt), idt, sizeof(int32_t) * (size_t)(m * mb)) == 0);
  for (int64_t k = 0; k < m * mb; k++) sh[k] = (int32_t)k;
  for (int64_t k = m * mb - 1; k > 0; k--) {
    const int64_t r = (int64_t)(xr() % (uint32_t)(k + 1));
    const int32_t t = sh[k]; sh[k] = sh[r]; sh[r] = t;
  }
  CHECK(memcmp(sh, idt, sizeof(int32_t) * (size_t)(m * mb)) != 0);
  /* refusals leave the executor as it was */
  int32_t bad = sh[1];
  sh[1] = (int32_t)(m * mb);
  CHECK_ST(pz_cpu_exec_set_block_table(ex[2], sh), PZ_ERR_INVALID_ARG);
  sh[1] = sh[0];
  CHECK_ST(pz_cpu_exec_set_block_table(ex[2], sh), PZ_ERR_INVALID_ARG);
  sh[1] = bad;
  CHECK_OK(pz_cpu_exec_set_block_table(ex[2], sh));
  for (int r = 0; r < tp; r++) memcpy(pz_cpu_exec_data(ex[3], r, bt), sh, sizeof(int32_t) * (size_t)(m * mb));
  float *L[4];
  for (int e = 0; e < 4; e++) L[e] = malloc(sizeof(float) * (size_t)(steps * m * vocab));
  decode_all(ex, 4, m, steps, vocab, L);
  const size_t lb = sizeof(float) * (size_t)(steps * m * vocab);
  CHECK(memcmp(L[0], L[1], lb) == 0); /* identity table == contiguous cache, seeded fill included */
  CHECK(memcmp(L[0], L[2], lb) == 0); /* shuffled pages, the prompt KV moved with the table */
  CHECK(memcmp(L[0], L[3], lb) != 0); /* negative control: the table is really read */
  int64_t nonfinite = 0;
  for (int64_t x = 0; x < steps * m * vocab; x++) nonfinite += !isfinite(L[0][x]);
  CHECK(nonfinite == 0);
  printf("cpu exec tiny tp%d max_ctx %lld: paged (identity, shuffled) vs contiguous bit-identical over %d steps\n", tp,
         (long long)max_ctx, steps);
  for (int e = 0; e < 4; e++) free(L[e]);
  free(idt); free(sh);
done:
  for (int e = 0; e < 4; e++) pz_cpu_exec_free(ex[e]);
  pz_graph_free(gc);
  pz_graph_free(g);
}

int main(void) {
  test_context1();
  test_vs_plain();
  table_helpers();
  const int quick = getenv("PZ_TEST_QUICK") != NULL;
  exec_paged(1, 150);
  exec_paged(2, 128);
  /* Kimi-K2 (64 heads) and DeepSeek-V3 (128 heads) per rank at TP 1/2/4/8 */
  CHECK_OK(pz_ref_set_threads(0));
  pz_mla_params pk[4], pv[4];
  const int tps[4] = {1, 2, 4, 8};
  int ok = 1;
  for (int k = 0; k < 4; k++) ok &= preset_params("kimi_k2", tps[k], &pk[k]) & preset_params("deepseek_v3", tps[k], &pv[k]);
  if (ok) {
    CHECK(pk[0].n_heads == 64 && pk[3].n_heads == 8 && pv[0].n_heads == 128 && pv[3].n_heads == 16);
    big_w_make(&pv[0], 128);
    const int64_t mixed[5] = {1, 63, 64, 65, 8192}, short5[5] = {65, 1, 64, 63, 130};
    char nm[32];
    for (int k = 0; k < 4; k++) {
      if (quick && k != 2) continue;
      snprintf(nm, sizeof nm, "kimi-k2 tp%d", tps[k]);
      paged_case(nm, pk[k], short5, 5, 1);
      paged_case(nm, pk[k], mixed, 5, 1);
      snprintf(nm, sizeof nm, "deepseek-v3 tp%d", tps[k]);
      paged_case(nm, pv[k], short5, 5, 1);
      paged_case(nm, pv[k], mixed, 5, 1);
    }
    if (!quick) {
      const int64_t longc[3] = {32768, 100, 4097};
      paged_case("kimi-k2 tp8", pk[3], longc, 3, 1);
      paged_case("deepseek-v3 tp8", pv[3], longc, 3, 1);
    }
    paged_slots(&pk[3]);
    big_w_free();
  }
  CHECK_OK(pz_ref_set_threads(1));
  TEST_DONE();
}
