/* MoE reference: router top-k (softmax greedy, group_limited_greedy, sigmoid noaux_tc with
 * groups), norm_topk_prob, routed scaling, ties, and the SwiGLU experts by hand. */
#include "backend/cpu/ref_ops.h"
#include "pz_test.h"
#include <string.h>

static pz_bf16 B(float f) { return pz_f32_to_bf16(f); }
static float F(pz_bf16 h) { return pz_bf16_to_f32(h); }
static double sigm(double x) { return 1.0 / (1.0 + exp(-x)); }

static void test_softmax_greedy(void) {
  /* logits ln(1..4): softmax scores 0.1, 0.2, 0.3, 0.4 */
  float lg[2 * 4] = {0, logf(2), logf(3), logf(4), 1, 1, 1, 1};
  pz_moe_params p = {.n_experts = 4, .top_k = 2, .n_group = 1, .topk_group = 1, .scoring = PZ_SCORE_SOFTMAX,
                     .topk_method = PZ_TOPK_GREEDY, .norm_topk_prob = false, .routed_scaling_factor = 1.f};
  int32_t ids[4];
  float w[4];
  pz_ref_moe_route(2, lg, 4, NULL, &p, ids, w);
  CHECK(ids[0] == 3 && ids[1] == 2);
  CHECK_NEAR(w[0], 0.4, 1e-6);
  CHECK_NEAR(w[1], 0.3, 1e-6);
  CHECK(ids[2] == 0 && ids[3] == 1);           /* all tied: lower index wins */
  CHECK(w[2] == 0.25f && w[3] == 0.25f);
  p.routed_scaling_factor = 2.f;               /* scaling without normalisation */
  pz_ref_moe_route(1, lg, 4, NULL, &p, ids, w);
  CHECK_NEAR(w[0], 0.8, 1e-6);
  CHECK_NEAR(w[1], 0.6, 1e-6);
  p.norm_topk_prob = true;                     /* normalised, then scaled */
  pz_ref_moe_route(1, lg, 4, NULL, &p, ids, w);
  CHECK_NEAR(w[0], 2 * 4.0 / 7, 1e-6);
  CHECK_NEAR(w[1], 2 * 3.0 / 7, 1e-6);
  /* top_k 1 never normalises (HF: top_k > 1 and norm_topk_prob) */
  p.top_k = 1; p.routed_scaling_factor = 1.f;
  pz_ref_moe_route(1, lg, 4, NULL, &p, ids, w);
  CHECK(ids[0] == 3);
  CHECK_NEAR(w[0], 0.4, 1e-6);
  /* all experts chosen: every id once, in score order */
  p.top_k = 4; p.norm_topk_prob = false;
  pz_ref_moe_route(1, lg, 4, NULL, &p, ids, w);
  CHECK(ids[0] == 3 && ids[1] == 2 && ids[2] == 1 && ids[3] == 0);
}

static void test_group_limited(void) {
  /* 8 experts in 4 groups of 2, keep 2 groups by max score, top 3. Softmax scores ∝ exp(l).
   * Group maxima: g0 = 4 (e0), g1 = 3.9 (e2), g2 = 3.8 (e4), g3 = 1 -> keep g0, g1.
   * Greedy would take e0, e2, e4; group-limited takes e0, e2, e1. */
  float lg[8] = {4, 1, 3.9f, 0, 3.8f, 0, 0, 1};
  pz_moe_params p = {.n_experts = 8, .top_k = 3, .n_group = 4, .topk_group = 2, .scoring = PZ_SCORE_SOFTMAX,
                     .topk_method = PZ_TOPK_GROUP_LIMITED, .norm_topk_prob = false, .routed_scaling_factor = 1.f};
  int32_t ids[3];
  float w[3];
  pz_ref_moe_route(1, lg, 8, NULL, &p, ids, w);
  CHECK(ids[0] == 0 && ids[1] == 2 && ids[2] == 1);
  double den = 0;
  for (int e = 0; e < 8; e++) den += exp(lg[e]);
  CHECK_NEAR(w[0], exp(4.0) / den, 1e-6);
  CHECK_NEAR(w[1], exp(3.9) / den, 1e-6);
  CHECK_NEAR(w[2], exp(1.0) / den, 1e-6);
  p.topk_method = PZ_TOPK_GREEDY;
  pz_ref_moe_route(1, lg, 8, NULL, &p, ids, w);
  CHECK(ids[0] == 0 && ids[1] == 2 && ids[2] == 4);
}

static void test_noaux_tc(void) {
  /* sigmoid scores s; choice = s + bias. Groups of 2 ranked by the SUM of their top-2 choices:
   * choice = [0.6,0.5 | 0.8,0.0 | σ(1)+0.2, σ(-1)+0.5 | 0.5,0.55]
   * sums   = [1.1     | 0.8     | 1.7                 | 1.05]  -> keep g2, g0
   * (ranking by max would keep g2 and g1: e2's 0.8 beats g0's 0.6).
   * top 3 of kept choices: e4 (0.931), e5 (0.769), e0 (0.6). Weights = UNbiased scores
   * σ(1), σ(-1), 0.5, normalised by their sum 1.5 (+1e-20), times 2.5. */
  float lg[8] = {0, 0, 0, 0, 1, -1, 0, 0};
  float bias[8] = {0.1f, 0, 0.3f, -0.5f, 0.2f, 0.5f, 0, 0.05f};
  pz_moe_params p = {.n_experts = 8, .top_k = 3, .n_group = 4, .topk_group = 2, .scoring = PZ_SCORE_SIGMOID,
                     .topk_method = PZ_TOPK_NOAUX_TC, .norm_topk_prob = true, .routed_scaling_factor = 2.5f};
  int32_t ids[3];
  float w[3];
  pz_ref_moe_route(1, lg, 8, bias, &p, ids, w);
  CHECK(ids[0] == 4 && ids[1] == 5 && ids[2] == 0);
  CHECK_NEAR(w[0], sigm(1) / 1.5 * 2.5, 1e-6);
  CHECK_NEAR(w[1], sigm(-1) / 1.5 * 2.5, 1e-6);
  CHECK_NEAR(w[2], 0.5 / 1.5 * 2.5, 1e-6);
  /* one group (Kimi-K2: n_group 1): plain top-k over biased choice: e4, e2 (0.8), e5 */
  p.n_group = 1; p.topk_group = 1;
  pz_ref_moe_route(1, lg, 8, bias, &p, ids, w);
  CHECK(ids[0] == 4 && ids[1] == 2 && ids[2] == 5);
  CHECK_NEAR(w[1], 0.5 / (sigm(1) + 0.5 + sigm(-1)) * 2.5, 1e-6);
  /* ties on the biased choice: lower index first */
  float z[8] = {0}, zb[8] = {0};
  p.top_k = 2;
  pz_ref_moe_route(1, z, 8, zb, &p, ids, w);
  CHECK(ids[0] == 0 && ids[1] == 1);
  CHECK_NEAR(w[0], 1.25, 1e-6);
  /* sigmoid + greedy (no bias): NaN logits rank last */
  float nl[4] = {NAN, 0.5f, NAN, 0.25f};
  pz_moe_params g = {.n_experts = 4, .top_k = 2, .n_group = 1, .topk_group = 1, .scoring = PZ_SCORE_SIGMOID,
                     .topk_method = PZ_TOPK_GREEDY, .routed_scaling_factor = 1.f};
  pz_ref_moe_route(1, nl, 4, NULL, &g, ids, w);
  CHECK(ids[0] == 1 && ids[1] == 3);
}

static void test_experts(void) {
  /* H = 2, 2 experts of inter 1, top 1, one shared expert of inter 1.
   * x = [1, 1]. Expert 0: gate [1,0] -> g = 1, up [0,2] -> u = 2, h = bf16(silu(1)*2),
   * down [1,-1] -> [h, -h]. Expert 1: gate [0,1] -> 1, up [1,1] -> 2 (same h), down [2,3].
   * Router logits [0.5, 0] -> softmax picks e0 with weight σ(0.5).
   * Shared: gate [1,1] -> 2, up [1,0] -> 1, hs = bf16(silu(2)), down [1, 1]. */
  pz_bf16 x[2] = {B(1), B(1)};
  float lg[2] = {0.5f, 0};
  pz_bf16 wg[4] = {B(1), B(0), B(0), B(1)}, wu[4] = {B(0), B(2), B(1), B(1)};
  pz_bf16 wd[4] = {B(1), B(-1), B(2), B(3)}; /* [E, H, I=1] */
  pz_bf16 sg[2] = {B(1), B(1)}, su[2] = {B(1), B(0)}, sd[2] = {B(1), B(1)};
  pz_moe_params p = {.n_experts = 2, .top_k = 1, .n_group = 1, .topk_group = 1, .scoring = PZ_SCORE_SOFTMAX,
                     .topk_method = PZ_TOPK_GREEDY, .routed_scaling_factor = 1.f, .inter = 1, .shared_inter = 1};
  float out[2];
  int32_t id;
  float wt;
  CHECK_OK(pz_ref_moe(1, 2, x, 2, lg, 2, NULL, &p, wg, wu, wd, sg, su, sd, out, 2, &id, &wt));
  double h = F(B((float)(1.0 * sigm(1.0) * 2.0)));
  double hs = F(B((float)(2.0 * sigm(2.0))));
  double w0 = sigm(0.5);
  CHECK(id == 0);
  CHECK_NEAR(wt, w0, 1e-6);
  CHECK_NEAR(out[0], w0 * h + hs, 1e-5);
  CHECK_NEAR(out[1], -w0 * h + hs, 1e-5);
  /* no shared experts; all experts chosen (top 2): w0*E0 + w1*E1 */
  p.top_k = 2;
  CHECK_OK(pz_ref_moe(1, 2, x, 2, lg, 2, NULL, &p, wg, wu, wd, NULL, NULL, NULL, out, 2, NULL, NULL));
  double w1 = 1 - w0;
  CHECK_NEAR(out[0], w0 * h + w1 * 2 * h, 1e-5);
  CHECK_NEAR(out[1], -w0 * h + w1 * 3 * h, 1e-5);
  /* given routing: expert 1 with weight 0.5 and an empty slot (-1) */
  int32_t gid[2] = {1, -1};
  float gw[2] = {0.5f, 0.7f};
  CHECK_OK(pz_ref_moe_experts(1, 2, x, 2, gid, gw, &p, wg, wu, wd, NULL, NULL, NULL, out, 2));
  CHECK_NEAR(out[0], 0.5 * 2 * h, 1e-6);
  CHECK_NEAR(out[1], 0.5 * 3 * h, 1e-6);
  gid[1] = 2;
  CHECK_ST(pz_ref_moe_experts(1, 2, x, 2, gid, gw, &p, wg, wu, wd, NULL, NULL, NULL, out, 2), PZ_ERR_INVALID_ARG);
  /* dense MLP = the shared expert alone */
  float mo[2];
  CHECK_OK(pz_ref_mlp(1, 2, 1, x, 2, sg, su, sd, mo, 2, true));
  CHECK_NEAR(mo[0], hs, 1e-6);
  CHECK_NEAR(mo[1], hs, 1e-6);
}

/* Sharding along the intermediate dim: the sum of two shards' outputs equals the unsharded
 * MoE (fp32 order differs: tolerance), and the routing is identical. */
static void test_tp_shards(void) {
  enum { M = 4, H = 16, E = 6, I = 8, S = 8, K = 2 };
  unsigned s = 3;
  static pz_bf16 x[M * H], wg[E * I * H], wu[E * I * H], wd[E * H * I], sg[S * H], su[S * H], sd[H * S];
  static pz_bf16 wg2[2][E * I / 2 * H], wu2[2][E * I / 2 * H], wd2[2][E * H * I / 2], sg2[2][S / 2 * H], su2[2][S / 2 * H], sd2[2][H * S / 2];
  float lg[M * E], bias[E];
#define R() (s = s * 1664525u + 1013904223u, (float)((s >> 8) & 0xffff) / 32768.f - 1.f)
  for (int i = 0; i < M * H; i++) x[i] = B(R());
  for (int i = 0; i < E * I * H; i++) { wg[i] = B(R()); wu[i] = B(R()); wd[i] = B(R()); }
  for (int i = 0; i < S * H; i++) { sg[i] = B(R()); su[i] = B(R()); sd[i] = B(R()); }
  for (int i = 0; i < M * E; i++) lg[i] = R();
  for (int i = 0; i < E; i++) bias[i] = 0.1f * R();
  for (int r = 0; r < 2; r++) {
    for (int e = 0; e < E; e++)
      for (int j = 0; j < I / 2; j++)
        for (int k = 0; k < H; k++) {
          wg2[r][(e * I / 2 + j) * H + k] = wg[(e * I + r * I / 2 + j) * H + k];
          wu2[r][(e * I / 2 + j) * H + k] = wu[(e * I + r * I / 2 + j) * H + k];
          wd2[r][(e * H + k) * I / 2 + j] = wd[(e * H + k) * I + r * I / 2 + j];
        }
    for (int j = 0; j < S / 2; j++)
      for (int k = 0; k < H; k++) {
        sg2[r][j * H + k] = sg[(r * S / 2 + j) * H + k];
        su2[r][j * H + k] = su[(r * S / 2 + j) * H + k];
        sd2[r][k * S / 2 + j] = sd[k * S + r * S / 2 + j];
      }
  }
  pz_moe_params p = {.n_experts = E, .top_k = K, .n_group = 3, .topk_group = 2, .scoring = PZ_SCORE_SIGMOID,
                     .topk_method = PZ_TOPK_NOAUX_TC, .norm_topk_prob = true, .routed_scaling_factor = 2.f,
                     .inter = I, .shared_inter = S};
  float full[M * H], part[2][M * H];
  int32_t ids1[M * K], ids2[M * K];
  float w1[M * K], w2[M * K];
  CHECK_OK(pz_ref_moe(M, H, x, H, lg, E, bias, &p, wg, wu, wd, sg, su, sd, full, H, ids1, w1));
  p.inter = I / 2; p.shared_inter = S / 2;
  for (int r = 0; r < 2; r++)
    CHECK_OK(pz_ref_moe(M, H, x, H, lg, E, bias, &p, wg2[r], wu2[r], wd2[r], sg2[r], su2[r], sd2[r], part[r], H, ids2, w2));
  CHECK(memcmp(ids1, ids2, sizeof ids1) == 0 && memcmp(w1, w2, sizeof w1) == 0);
  /* worker threads: bit-identical */
  float part_t[M * H];
  CHECK_OK(pz_ref_set_threads(2));
  CHECK_OK(pz_ref_moe(M, H, x, H, lg, E, bias, &p, wg2[1], wu2[1], wd2[1], sg2[1], su2[1], sd2[1], part_t, H, NULL, NULL));
  CHECK_OK(pz_ref_set_threads(1));
  CHECK(memcmp(part_t, part[1], sizeof part_t) == 0);
  double maxd = 0, maxv = 0;
  for (int i = 0; i < M * H; i++) {
    maxd = fmax(maxd, fabs(full[i] - (part[0][i] + part[1][i])));
    maxv = fmax(maxv, fabs(full[i]));
  }
  CHECK(maxv > 0.1);
  CHECK(maxd <= 1e-5 * maxv + 1e-6);
}

int main(void) {
  test_softmax_greedy();
  test_group_limited();
  test_noaux_tc();
  test_experts();
  test_tp_shards();
  TEST_DONE();
}
