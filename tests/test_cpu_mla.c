/* MLA decode reference: context 1 by hand, the absorbed form against the plain (non-absorbed)
 * attention composed from the unfused references, cache append, YaRN, q_b / o_proj slots. */
#include "backend/cpu/ref_ops.h"
#include "pz_test.h"
#include <stdlib.h>
#include <string.h>

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

int main(void) {
  test_context1();
  test_vs_plain();
  TEST_DONE();
}
