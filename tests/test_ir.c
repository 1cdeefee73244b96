/* IR basics: tensors, column views, verify() catching malformed graphs, status strings. */
#include "core/ir.h"
#include "pz_test.h"
#include <string.h>

int main(void) {
  CHECK(strcmp(pz_status_string(PZ_OK), "ok") == 0);
  CHECK(strcmp(pz_status_string(PZ_ERR_OOM), "out of memory") == 0);
  CHECK(pz_bf16_to_f32(pz_f32_to_bf16(1.0f)) == 1.0f);
  CHECK(pz_f32_to_bf16(1.00390625f) == 0x3f80);   /* ties to even: 1 + 2^-8 rounds down */
  CHECK(pz_f32_to_bf16(1.01171875f) == 0x3f82);   /* 1 + 3*2^-8 rounds up to even */

  pz_graph_info info = {.tp = 1, .m = 4, .n_layers = 1, .hidden = 64};
  pz_graph *g;
  CHECK_OK(pz_graph_create(&info, &g));
  int a, w, buf, c;
  CHECK_OK(pz_graph_add_tensor(g, "a", PZ_BF16, PZ_T_INPUT, 2, (int64_t[]){4, 64}, &a));
  CHECK_OK(pz_graph_add_tensor(g, "w", PZ_BF16, PZ_T_WEIGHT, 2, (int64_t[]){32, 64}, &w));
  CHECK_OK(pz_graph_add_tensor(g, "buf", PZ_F32, PZ_T_BUFFER, 2, (int64_t[]){4, 100}, &buf));
  CHECK_OK(pz_graph_add_col_slice(g, "c", buf, 50, 32, &c));
  CHECK(g->tensors[c].stride[0] == 100 && g->tensors[c].view_offset == 50);
  CHECK(!pz_tensor_contiguous(&g->tensors[c]));
  CHECK_ST(pz_graph_add_col_slice(g, "bad", buf, 80, 32, NULL), PZ_ERR_SHAPE);
  pz_op_params p = {.gemm = {.zero_init = true}};
  CHECK_OK(pz_graph_add_node(g, PZ_OP_GEMM, "mm", 0, PZ_ROLE_QKV_A, (int[]){a, w, -1}, 3, (int[]){c}, 1, &p, NULL));
  CHECK_OK(pz_graph_verify(g));
  /* A GEMM whose k does not match must fail verify. */
  int w2;
  CHECK_OK(pz_graph_add_tensor(g, "w2", PZ_BF16, PZ_T_WEIGHT, 2, (int64_t[]){32, 48}, &w2));
  CHECK_OK(pz_graph_add_node(g, PZ_OP_GEMM, "mm_bad", 0, PZ_ROLE_NONE, (int[]){a, w2, -1}, 3, (int[]){c}, 1, &p, NULL));
  CHECK_ST(pz_graph_verify(g), PZ_ERR_VERIFY);
  CHECK(strstr(pz_last_error(), "mm_bad") != NULL);
  pz_graph_free(g);

  /* Reading an activation before it is written fails verify. */
  CHECK_OK(pz_graph_create(&info, &g));
  int x, y;
  CHECK_OK(pz_graph_add_tensor(g, "x", PZ_F32, PZ_T_ACT, 2, (int64_t[]){4, 64}, &x));
  CHECK_OK(pz_graph_add_tensor(g, "wn", PZ_BF16, PZ_T_WEIGHT, 1, (int64_t[]){64}, &w));
  CHECK_OK(pz_graph_add_tensor(g, "y", PZ_BF16, PZ_T_ACT, 2, (int64_t[]){4, 64}, &y));
  pz_op_params np = {.norm = {.eps = 1e-6f}};
  CHECK_OK(pz_graph_add_node(g, PZ_OP_RMSNORM, "norm", 0, PZ_ROLE_NONE, (int[]){x, w}, 2, (int[]){y}, 1, &np, NULL));
  CHECK_ST(pz_graph_verify(g), PZ_ERR_VERIFY);
  pz_graph_free(g);
  TEST_DONE();
}
