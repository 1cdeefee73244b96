/* Quantised weight elements (core/quant.h) against another implementation and exact arithmetic:
 * - INT4 unpacking and dequantisation bit for bit against tests/data/int4/golden.safetensors,
 *   written by the compressed-tensors package (tools/make_int4_golden.py): its signed values, its
 *   f32 dequantisation (q x scale) and its default bf16 one (the product rounded to bf16);
 * - the INT4 quantiser (synthetic --quant int4 weights) against compressed-tensors' quantisation of
 *   the same weight, scales and values bit for bit;
 * - the e4m3 encoder: every finite code round-trips, midpoints round to the even code, saturation;
 * - the CPU reference of quantised experts equals the bf16 experts on exactly representable values. */
#include <math.h>
#include <string.h>
#include "backend/cpu/ref_ops.h"
#include "core/quant.h"
#include "model/safetensors.h"
#include "pz_test.h"

static const pz_st_tensor *need(const pz_st_file *f, const char *name, pz_st_dtype dt) {
  const pz_st_tensor *t = pz_st_find(f, name);
  if (!t || t->dtype != dt) {
    fprintf(stderr, "golden: tensor %s missing or not %s\n", name, pz_st_dtype_name(dt));
    exit(1);
  }
  return t;
}

static void golden(void) {
  char path[700];
  PZ_TEST_PATH(path, "data/int4/golden.safetensors");
  pz_st_file *f = NULL;
  CHECK_OK(pz_st_open(path, &f));
  if (!f) return;
  const pz_st_tensor *tw = need(f, "weight", PZ_ST_BF16), *tp = need(f, "weight_packed", PZ_ST_I32);
  const pz_st_tensor *ts = need(f, "weight_scale", PZ_ST_BF16), *tq = need(f, "q", PZ_ST_I8);
  const pz_st_tensor *t32 = need(f, "dequant_f32", PZ_ST_F32), *t16 = need(f, "dequant_bf16", PZ_ST_BF16);
  const pz_st_tensor *tsh = need(f, "weight_shape", PZ_ST_I64);
  const int64_t R = tw->shape[0], C = tw->shape[1], G = C / ts->shape[1];
  CHECK(R == 24 && C == 256 && G == 32 && tp->shape[1] == C / 8);
  int64_t shape[2];
  memcpy(shape, tsh->data, sizeof shape);
  CHECK(shape[0] == R && shape[1] == C);
  /* Aligned copies (safetensors does not align tensors). */
  int32_t *pk = malloc(tp->nbytes);
  pz_bf16 *sc = malloc(ts->nbytes), *w = malloc(tw->nbytes), *d16 = malloc(t16->nbytes);
  int8_t *q = malloc(tq->nbytes);
  float *d32 = malloc(t32->nbytes), *mine = malloc(sizeof(float) * (size_t)(R * C));
  memcpy(pk, tp->data, tp->nbytes); memcpy(sc, ts->data, ts->nbytes); memcpy(w, tw->data, tw->nbytes);
  memcpy(d16, t16->data, t16->nbytes); memcpy(q, tq->data, tq->nbytes); memcpy(d32, t32->data, t32->nbytes);
  int bad_q = 0, bad32 = 0, bad16 = 0, clamped = 0;
  for (int64_t r = 0; r < R; r++) {
    for (int64_t c = 0; c < C; c++) {
      bad_q += pz_int4_get(pk[r * (C / 8) + c / 8], (int)(c % 8)) != q[r * C + c];
      clamped += q[r * C + c] == -8;
    }
    /* Whole rows, and a row cut at an odd column (a TP shard need not start on a word). */
    pz_int4_dequant_row(pk + r * (C / 8), sc + r * (C / G), G, 0, 77, mine + r * C);
    pz_int4_dequant_row(pk + r * (C / 8), sc + r * (C / G), G, 77, C - 77, mine + r * C + 77);
  }
  for (int64_t i = 0; i < R * C; i++) {
    uint32_t a, b;
    memcpy(&a, &mine[i], 4);
    memcpy(&b, &d32[i], 4);
    bad32 += a != b;
    bad16 += pz_f32_to_bf16(mine[i]) != d16[i];
  }
  CHECK(bad_q == 0);
  CHECK(bad32 == 0);
  CHECK(bad16 == 0);
  CHECK(clamped > 0); /* the file has values at the -8 end */
  /* Our quantiser on the same bf16 weight: scales and 4-bit values bit for bit. */
  int32_t *pk2 = malloc(tp->nbytes);
  pz_bf16 *sc2 = malloc(ts->nbytes);
  float *row = malloc(sizeof(float) * (size_t)C);
  int bad_s = 0, diff_q = 0;
  for (int64_t r = 0; r < R; r++) {
    for (int64_t c = 0; c < C; c++) row[c] = pz_bf16_to_f32(w[r * C + c]);
    pz_int4_quantize_row(row, C, G, pk2 + r * (C / 8), sc2 + r * (C / G));
    for (int64_t g = 0; g < C / G; g++) bad_s += sc2[r * (C / G) + g] != sc[r * (C / G) + g];
    for (int64_t c = 0; c < C; c++)
      diff_q += pz_int4_get(pk2[r * (C / 8) + c / 8], (int)(c % 8)) != q[r * C + c];
  }
  CHECK(bad_s == 0);
  CHECK(diff_q == 0);
  free(pk); free(sc); free(w); free(d16); free(q); free(d32); free(mine); free(pk2); free(sc2); free(row);
  pz_st_close(f);
}

static void e4m3(void) {
  int bad = 0;
  for (int b = 0; b < 256; b++) {
    if ((b & 0x7f) == 0x7f) continue;
    bad += pz_fp8_e4m3_from_f32(pz_fp8_e4m3_to_f32((uint8_t)b)) != (b == 0x80 ? 0x80 : b);
  }
  CHECK(bad == 0);
  /* 1.0625 lies halfway between 1.0 (0x38, even) and 1.125 (0x39): to the even code. */
  CHECK(pz_fp8_e4m3_from_f32(1.0625f) == 0x38 && pz_fp8_e4m3_from_f32(1.1875f) == 0x3a);
  CHECK(pz_fp8_e4m3_from_f32(-1.07f) == 0xb9);
  CHECK(pz_fp8_e4m3_from_f32(1000.0f) == 0x7e && pz_fp8_e4m3_from_f32(-1e30f) == 0xfe);
  CHECK(pz_fp8_e4m3_from_f32(ldexpf(1.0f, -10)) == 0x00);       /* half the smallest subnormal: to even 0 */
  CHECK(pz_fp8_e4m3_from_f32(3.0f * ldexpf(1.0f, -10)) == 0x02); /* 1.5 subnormal steps: to even 2 */
}

/* pz_ref_moe_experts_q on INT4 / FP8 experts whose values are exact in bf16 equals
 * pz_ref_moe_experts on those values, bit for bit; a value that is not exact in bf16 changes it. */
static void ref_experts(void) {
  enum { E = 4, H = 64, I = 32, m = 3, K = 2 };
  pz_moe_params p = {.n_experts = E, .top_k = K, .n_group = 1, .topk_group = 1, .inter = I, .shared_inter = 0};
  static int32_t gw[E * I * H / 8], uw[E * I * H / 8], dw[E * H * I / 8];
  static pz_bf16 gs[E * I * H / 32], us[E * I * H / 32], ds[E * H * I / 32];
  static pz_bf16 gb[E * I * H], ub[E * I * H], db[E * H * I], x[m * H];
  uint32_t st = 12345;
#define RND() (st = st * 1664525u + 1013904223u, st >> 8)
  for (int i = 0; i < E * I * H / 8; i++) { gw[i] = (int32_t)(RND() ^ (RND() << 16)); uw[i] = (int32_t)(RND() ^ (RND() << 16)); }
  for (int i = 0; i < E * H * I / 8; i++) dw[i] = (int32_t)(RND() ^ (RND() << 16));
  for (int i = 0; i < E * I * H / 32; i++) {
    gs[i] = pz_f32_to_bf16(ldexpf(1.0f, -(int)(RND() % 6) - 4));
    us[i] = pz_f32_to_bf16(ldexpf(1.0f, -(int)(RND() % 6) - 4));
    ds[i] = pz_f32_to_bf16(ldexpf(1.0f, -(int)(RND() % 6) - 4));
  }
  for (int i = 0; i < m * H; i++) x[i] = pz_f32_to_bf16((float)((int)(RND() % 17) - 8) / 8.0f);
  pz_ref_qexperts q = {.wquant = 1, .group = 32, .w_gate = gw, .w_up = uw, .w_down = dw, .s_gate = gs, .s_up = us, .s_down = ds};
  float *tmp = malloc(sizeof(float) * I * H);
  for (int e = 0; e < E; e++) {
    pz_ref_qexpert_dequant(&q, 0, e, I, H, tmp);
    for (int i = 0; i < I * H; i++) gb[e * I * H + i] = pz_f32_to_bf16(tmp[i]);
    pz_ref_qexpert_dequant(&q, 1, e, I, H, tmp);
    for (int i = 0; i < I * H; i++) ub[e * I * H + i] = pz_f32_to_bf16(tmp[i]);
    pz_ref_qexpert_dequant(&q, 2, e, I, H, tmp);
    for (int i = 0; i < I * H; i++) db[e * H * I + i] = pz_f32_to_bf16(tmp[i]);
  }
  /* Independent check of one element: expert 2, down row 5, column 17 = nibble 1 of word 2 of the row. */
  {
    const int32_t wd = dw[(2 * H + 5) * (I / 8) + 2];
    const int qv = (int)((((uint32_t)wd) >> 4) & 15) - 8;
    CHECK(pz_bf16_to_f32(db[(2 * H + 5) * I + 17]) == (float)qv * pz_bf16_to_f32(ds[(2 * H + 5) * (I / 32) + 0]));
  }
  int32_t ids[m * K] = {0, 3, 3, 1, 2, 2 == 2 ? 0 : 1};
  float wts[m * K] = {0.75f, 0.25f, 1.5f, -0.5f, 1.0f, 0.125f};
  float o1[m * H], o2[m * H];
  CHECK_OK(pz_ref_moe_experts_q(m, H, x, H, ids, wts, &p, &q, NULL, NULL, NULL, o1, H));
  CHECK_OK(pz_ref_moe_experts(m, H, x, H, ids, wts, &p, gb, ub, db, NULL, NULL, NULL, o2, H));
  CHECK(!memcmp(o1, o2, sizeof o1));
  int nz = 0;
  for (int i = 0; i < m * H; i++) nz += o1[i] != 0.0f;
  CHECK(nz > m * H / 2);
  /* Bad wquant / group. */
  pz_ref_qexperts qb = q;
  qb.group = 12;
  CHECK_ST(pz_ref_moe_experts_q(m, H, x, H, ids, wts, &p, &qb, NULL, NULL, NULL, o1, H), PZ_ERR_INVALID_ARG);
  free(tmp);
}

int main(void) {
  golden();
  e4m3();
  ref_experts();
  TEST_DONE();
}
