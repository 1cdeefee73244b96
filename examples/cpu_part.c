/* CPU part of the third-party example: builds one decode-layer fragment with prezero's graph
 * API (a fused AR + residual + RMSNorm donor, two split-K GEMM consumers of its output, one
 * full-K GEMM), runs the pass manager with the prezero pass, and evaluates the fill gate's
 * arithmetic. Every result is checked against values computed here from the documented rules
 * (include/prezero/graph.h: slices at multiples of 32 columns in node order; include/prezero/gate.h:
 * the H200 figures and formulas). Exit 0 when all checks pass, 1 otherwise. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <prezero.h>

static int failures;
#define EXPECT(cond, ...)                         \
  do {                                            \
    if (!(cond)) {                                \
      failures++;                                 \
      printf("FAIL %s:%d: ", __FILE__, __LINE__); \
      printf(__VA_ARGS__);                        \
      printf("\n");                               \
    }                                             \
  } while (0)
#define OK(call)                                                                              \
  do {                                                                                        \
    pz_status s_ = (call);                                                                    \
    if (s_ != PZ_OK) {                                                                        \
      printf("FAIL %s:%d: %s: %s (%s)\n", __FILE__, __LINE__, #call, pz_status_string(s_),    \
             pz_last_error());                                                                \
      return 1;                                                                               \
    }                                                                                         \
  } while (0)

static int64_t round_up(int64_t x, int64_t a) { return (x + a - 1) / a * a; }

static int graph_part(void) {
  const int64_t m = 4, H = 7168, n_qkv = 2112, n_router = 384, n_dense = 256;
  pz_decode_graph *g = NULL;
  OK(pz_decode_graph_create(4, m, H, &g));
  int partial, w_norm, residual, x_norm, w_qkv, qkv, w_router, router, w_dense, dense;
  OK(pz_decode_graph_add_tensor(g, "attn.partial", PZ_ELEM_F32, PZ_GRAPH_INPUT, 2, (int64_t[]){m, H}, &partial));
  OK(pz_decode_graph_add_tensor(g, "norm.weight", PZ_ELEM_BF16, PZ_GRAPH_WEIGHT, 1, (int64_t[]){H}, &w_norm));
  OK(pz_decode_graph_add_tensor(g, "residual", PZ_ELEM_F32, PZ_GRAPH_STATE, 2, (int64_t[]){m, H}, &residual));
  OK(pz_decode_graph_add_tensor(g, "norm.out", PZ_ELEM_BF16, PZ_GRAPH_ACT, 2, (int64_t[]){m, H}, &x_norm));
  OK(pz_decode_graph_add_tensor(g, "qkv_a.weight", PZ_ELEM_BF16, PZ_GRAPH_WEIGHT, 2, (int64_t[]){n_qkv, H}, &w_qkv));
  OK(pz_decode_graph_add_tensor(g, "qkv_a.out", PZ_ELEM_F32, PZ_GRAPH_ACT, 2, (int64_t[]){m, n_qkv}, &qkv));
  OK(pz_decode_graph_add_tensor(g, "router.weight", PZ_ELEM_BF16, PZ_GRAPH_WEIGHT, 2, (int64_t[]){n_router, H}, &w_router));
  OK(pz_decode_graph_add_tensor(g, "router.out", PZ_ELEM_F32, PZ_GRAPH_ACT, 2, (int64_t[]){m, n_router}, &router));
  OK(pz_decode_graph_add_tensor(g, "dense.weight", PZ_ELEM_BF16, PZ_GRAPH_WEIGHT, 2, (int64_t[]){n_dense, H}, &w_dense));
  OK(pz_decode_graph_add_tensor(g, "dense.out", PZ_ELEM_F32, PZ_GRAPH_ACT, 2, (int64_t[]){m, n_dense}, &dense));
  int donor, n_q, n_r, n_d;
  OK(pz_decode_graph_add_ar_rmsnorm(g, "layers.1.input_layernorm", 1, partial, w_norm, residual, 1, x_norm, 1e-6f, &donor));
  OK(pz_decode_graph_add_gemm(g, "layers.1.qkv_a", 1, x_norm, w_qkv, -1, qkv, 0, &n_q));
  OK(pz_decode_graph_add_gemm(g, "layers.1.router", 1, x_norm, w_router, -1, router, 0, &n_r));
  OK(pz_decode_graph_add_gemm(g, "layers.1.dense_fullk", 1, x_norm, w_dense, -1, dense, 1, &n_d));
  OK(pz_decode_graph_verify(g));

  int matched = -1, rewritten = -1;
  OK(pz_decode_graph_run_passes(g, 1, stdout, &matched, &rewritten));
  printf("pass: matched %d, rewritten %d\n", matched, rewritten);
  OK(pz_decode_graph_dump(g, stdout, 0));

  /* Expected from the rule: one donor; its two split-K consumers get slices in node order, each
   * starting at a multiple of 32 columns; the full-K GEMM (split_k = 1) is left alone. */
  int64_t col_q = 0, col_r = round_up(col_q + n_qkv, 32), n_total = round_up(col_r + n_router, 32);
  EXPECT(matched == 1, "matched %d, expected 1", matched);
  EXPECT(rewritten == 3, "rewritten %d, expected 3 (donor + 2 GEMMs)", rewritten);
  pz_graph_node_info ni;
  OK(pz_decode_graph_node_info(g, donor, &ni));
  EXPECT(!strcmp(ni.op, "ar_rmsnorm_maybe_prezero_"), "donor op %s", ni.op);
  EXPECT(ni.fill_n_total == n_total, "n_total %lld, expected %lld", (long long)ni.fill_n_total, (long long)n_total);
  EXPECT(ni.fill_n_base == n_total, "n_base %lld, expected %lld (no o_proj slot)", (long long)ni.fill_n_base,
         (long long)n_total);
  int buf = ni.fill_buf;
  pz_graph_tensor_info ti;
  OK(pz_decode_graph_tensor_info(g, buf, &ti));
  EXPECT(ti.kind == PZ_GRAPH_BUFFER && ti.dtype == PZ_ELEM_F32 && ti.ndim == 2 && ti.ne[0] == m && ti.ne[1] == n_total,
         "buffer %s kind %d [%lld, %lld]", ti.name, (int)ti.kind, (long long)ti.ne[0], (long long)ti.ne[1]);
  struct { int node, tensor; int64_t col, n; } slices[2] = {{n_q, qkv, col_q, n_qkv}, {n_r, router, col_r, n_router}};
  for (int i = 0; i < 2; i++) {
    OK(pz_decode_graph_node_info(g, slices[i].node, &ni));
    EXPECT(!strcmp(ni.op, "mm_maybe_prezero_") && ni.zero_init == 2, "%s: op %s zero_init %d", ni.name, ni.op,
           ni.zero_init);
    OK(pz_decode_graph_tensor_info(g, slices[i].tensor, &ti));
    EXPECT(ti.view_of == buf && ti.view_offset == slices[i].col && ti.stride[0] == n_total && ti.ne[1] == slices[i].n,
           "%s: view_of %d offset %lld row stride %lld cols %lld; expected %d, %lld, %lld, %lld", ti.name, ti.view_of,
           (long long)ti.view_offset, (long long)ti.stride[0], (long long)ti.ne[1], buf, (long long)slices[i].col,
           (long long)n_total, (long long)slices[i].n);
  }
  OK(pz_decode_graph_node_info(g, n_d, &ni));
  EXPECT(!strcmp(ni.op, "gemm") && ni.zero_init == 1, "full-K GEMM rewritten: op %s", ni.op);
  printf("graph: buffer [%lld, %lld], qkv_a at column %lld, router at column %lld\n", (long long)m,
         (long long)n_total, (long long)col_q, (long long)col_r);
  pz_decode_graph_destroy(g);
  return 0;
}

static int gate_part(void) {
  pz_gate_device d;
  OK(pz_gate_device_default(&d));
  /* The documented H200 figures. */
  EXPECT(d.num_sms == 132 && d.ctas_per_sm == 2 && d.fill_bytes_per_us_cta == 18900.0 && d.donor_t0_us == 2.29 &&
             d.donor_bytes_per_us == 4.9e6 && d.fill_penalty_bytes_per_us == 6.1e6 && d.max_added_us == 0.2,
         "H200 defaults differ");
  struct { int64_t m, n_total, H; int tp; } cases[] = {{4, 2496, 7168, 1}, {4, 2496, 7168, 4}, {128, 12352, 7168, 4},
                                                       {32, 2496, 5120, 2}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    pz_gate_estimate e;
    int is_free = -1;
    OK(pz_gate_estimate_for(&d, cases[i].m, cases[i].n_total, PZ_ELEM_F32, cases[i].H, cases[i].tp, &e));
    OK(pz_gate_is_free(&d, cases[i].m, cases[i].n_total, PZ_ELEM_F32, cases[i].H, cases[i].tp, &is_free));
    int64_t bytes = cases[i].m * cases[i].n_total * 4;
    double donor_us = d.donor_t0_us + (double)(cases[i].m * cases[i].H * 14) / d.donor_bytes_per_us;
    double added_us = (double)bytes / d.fill_penalty_bytes_per_us;
    double fill_us = (double)bytes / ((double)e.fill_ctas * d.fill_bytes_per_us_cta);
    int expect_free = e.donor_ctas + e.fill_ctas <= 264 && fill_us <= donor_us && added_us <= d.max_added_us;
    printf("gate: m %lld n_total %lld H %lld tp %d: donor %lld CTAs, fill %lld CTAs of %lld B, fill %.3f us, donor "
           "%.3f us, added %.4f us: %s\n", (long long)cases[i].m, (long long)cases[i].n_total, (long long)cases[i].H,
           cases[i].tp, (long long)e.donor_ctas, (long long)e.fill_ctas, (long long)e.fill_bytes, e.fill_us,
           e.donor_us, e.added_us, is_free ? "free" : "not free");
    EXPECT(e.slots == 264 && e.fill_bytes == bytes, "slots %lld bytes %lld", (long long)e.slots, (long long)e.fill_bytes);
    EXPECT(fabs(e.donor_us - donor_us) < 1e-9 && fabs(e.added_us - added_us) < 1e-12 && fabs(e.fill_us - fill_us) < 1e-9,
           "times differ from the formulas");
    EXPECT(e.fill_ctas >= 1 && is_free == e.is_free && is_free == expect_free, "is_free %d, estimate %d, formula %d",
           is_free, e.is_free, expect_free);
  }
  /* TP 1, m <= 8, H >= 6144: 8 CTAs per row in a cluster (gate.h), fill CTAs one cluster. */
  pz_gate_estimate e;
  OK(pz_gate_estimate_for(&d, 4, 2496, PZ_ELEM_F32, 7168, 1, &e));
  EXPECT(e.donor_ctas == 32 && e.fill_ctas == 8 && e.is_free == 1, "tp 1 m 4: donor %lld fill %lld free %d",
         (long long)e.donor_ctas, (long long)e.fill_ctas, e.is_free);
  /* 6.3 MB of fill adds ~1 us by the penalty estimate: never free. */
  OK(pz_gate_estimate_for(&d, 128, 12352, PZ_ELEM_F32, 7168, 4, &e));
  EXPECT(e.is_free == 0, "m 128 n_total 12352 came out free");
  /* Bad input is a status, not an exit. */
  int f;
  EXPECT(pz_gate_is_free(&d, 4, 2496, PZ_ELEM_F32, 7, 1, &f) == PZ_ERR_INVALID_ARG, "H = 7 accepted");
  EXPECT(pz_gate_is_free(&d, 0, 2496, PZ_ELEM_F32, 7168, 1, &f) == PZ_ERR_INVALID_ARG, "m = 0 accepted");
  printf("gate: bad input -> %s (%s)\n", pz_status_string(PZ_ERR_INVALID_ARG), pz_last_error());
  return 0;
}

int main(void) {
  printf("prezero %s example (CPU part)\n", PZ_VERSION);
  if (graph_part() || gate_part()) return 1;
  /* The GEMM entry points answer with a status in every build (PZ_ERR_UNSUPPORTED without CUDA). */
  pz_gemm_handle *h = NULL;
  pz_status s = pz_gemm_handle_create(NULL, &h);
  printf("gemm: pz_gemm_handle_create: %s\n", s == PZ_OK ? "ok (a GPU is present)" : pz_status_string(s));
  pz_gemm_handle_destroy(h);
  if (failures) {
    printf("%d check(s) FAILED\n", failures);
    return 1;
  }
  printf("all checks passed\n");
  return 0;
}
