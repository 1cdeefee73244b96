/* The CPU prezero ops on their own: ar_rmsnorm_maybe_prezero_ zeroes exactly rows 0..m-1 of
 * every rank's buffer (all n_total columns when the gate holds, else the n_base prefix) and
 * otherwise equals ar_rmsnorm; mm_maybe_prezero_ trusts the fill only where the donor made it
 * and equals the zero-initialising GEMM; pz_prezero_slice_zeroed on hand-worked cases. */
#define _GNU_SOURCE 1 /* setenv */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/ref_ops.h"
#include "passes/prezero.h"
#include "pz_test.h"

enum { TP = 2, M = 4, H = 64, NT = 96, NB = 64, NW = 32 };

typedef struct {
  pz_graph *g;
  int part, w, res, xn, buf, W, c_tail, c_head, donor, mm_tail, mm_head;
  void *store[TP][16];
  void *data[TP][16];
  void **rank_data[TP];
} fixture;

static int add(pz_graph *g, const char *name, pz_dtype dt, pz_tensor_kind k, int nd, int64_t a, int64_t b) {
  int id = -1;
  int64_t ne[2] = {a, b};
  CHECK_OK(pz_graph_add_tensor(g, name, dt, k, nd, ne, &id));
  return id;
}

static void setup(fixture *f) {
  memset(f, 0, sizeof *f);
  pz_graph_info info = {.tp = TP, .m = M, .n_layers = 1, .hidden = H};
  CHECK_OK(pz_graph_create(&info, &f->g));
  pz_graph *g = f->g;
  f->part = add(g, "partial", PZ_F32, PZ_T_STATE, 2, M, H);
  f->w = add(g, "ln.weight", PZ_BF16, PZ_T_WEIGHT, 1, H, 0);
  f->res = add(g, "residual", PZ_F32, PZ_T_STATE, 2, M, H);
  f->xn = add(g, "ln.out", PZ_BF16, PZ_T_ACT, 2, M, H);
  f->buf = add(g, "ln.prezero_buf", PZ_F32, PZ_T_BUFFER, 2, M, NT);
  f->W = add(g, "mm.weight", PZ_BF16, PZ_T_WEIGHT, 2, NW, H);
  CHECK_OK(pz_graph_add_col_slice(g, "tail.out", f->buf, NB, NW, &f->c_tail)); /* beyond n_base */
  CHECK_OK(pz_graph_add_col_slice(g, "head.out", f->buf, 16, NW, &f->c_head)); /* inside the prefix */
  pz_op_params np = {.norm = {.eps = 1e-6f, .has_residual = true, .fill_buf = f->buf, .n_total = NT, .n_base = NB}};
  CHECK_OK(pz_graph_add_node(g, PZ_OP_AR_RMSNORM_MAYBE_PREZERO, "ln", 0, PZ_ROLE_INPUT_LAYERNORM,
                             (int[]){f->part, f->w, f->res}, 3, (int[]){f->xn, f->res}, 2, &np, &f->donor));
  pz_op_params gp = {.gemm = {.zero_init = true, .prezero_buf = f->buf, .n_base = NB, .col_offset = NB}};
  CHECK_OK(pz_graph_add_node(g, PZ_OP_MM_MAYBE_PREZERO, "tail", 0, PZ_ROLE_NONE, (int[]){f->xn, f->W, -1}, 3,
                             (int[]){f->c_tail}, 1, &gp, &f->mm_tail));
  gp.gemm.col_offset = 16;
  CHECK_OK(pz_graph_add_node(g, PZ_OP_MM_MAYBE_PREZERO, "head", 0, PZ_ROLE_NONE, (int[]){f->xn, f->W, -1}, 3,
                             (int[]){f->c_head}, 1, &gp, &f->mm_head));
  CHECK_OK(pz_graph_verify(g));
  CHECK(g->n_tensors <= 16);
  for (int r = 0; r < TP; r++) {
    for (int t = 0; t < g->n_tensors; t++) {
      const pz_tensor *x = &g->tensors[t];
      if (x->view_of >= 0) continue;
      f->store[r][t] = calloc((size_t)pz_tensor_span(x), pz_dtype_size(x->dtype));
    }
    for (int t = 0; t < g->n_tensors; t++) {
      const pz_tensor *x = &g->tensors[t];
      int own = pz_storage_of(g, t);
      f->data[r][t] = (char *)f->store[r][own] + (size_t)x->view_offset * pz_dtype_size(x->dtype);
    }
    f->rank_data[r] = f->data[r];
    float *p = f->data[r][f->part], *res = f->data[r][f->res];
    for (int i = 0; i < M * H; i++) {
      p[i] = (float)((i * 7 + r * 3) % 11) - 5.0f;
      res[i] = (float)((i * 5) % 9) - 4.0f;
    }
    pz_bf16 *w = f->data[r][f->w], *W = f->data[r][f->W];
    for (int i = 0; i < H; i++) w[i] = pz_f32_to_bf16(1.0f + 0.125f * (float)(i % 5));
    for (int i = 0; i < NW * H; i++) W[i] = pz_f32_to_bf16((float)((i * 3) % 7) - 3.0f);
  }
}

static void teardown(fixture *f) {
  for (int r = 0; r < TP; r++)
    for (int t = 0; t < 16; t++) free(f->store[r][t]);
  pz_graph_free(f->g);
}

static void poison_buf(fixture *f) {
  for (int r = 0; r < TP; r++) {
    uint32_t *b = f->data[r][f->buf];
    for (int i = 0; i < M * NT; i++) b[i] = 0x7fc00000u;
  }
}

static pz_cpu_ctx ctx(fixture *f, const pz_cpu_exec_opts *o, int rank, int64_t m) {
  pz_cpu_ctx c = {.g = f->g, .opts = o, .rank = rank, .tp = TP, .m = m, .data = f->data[rank], .rank_data = f->rank_data};
  return c;
}

/* Rows [0, m) x columns [0, cols) of every rank's buffer are +0.0; everything else is NaN. */
static void check_fill(fixture *f, int64_t m, int64_t cols) {
  for (int r = 0; r < TP; r++) {
    const uint32_t *b = f->data[r][f->buf];
    int bad = 0;
    for (int64_t i = 0; i < M; i++)
      for (int64_t j = 0; j < NT; j++) {
        uint32_t v = b[i * NT + j];
        bad += (i < m && j < cols) ? v != 0u : v != 0x7fc00000u;
      }
    CHECK(bad == 0);
  }
}

int main(void) {
  fixture f;
  setup(&f);
  pz_cpu_exec_opts o = PZ_CPU_EXEC_OPTS_INIT;
  pz_device_desc_default(&o.dev);
  const int64_t m = 2;

  /* Reference results of the unrewritten donor: pz_ref_ar_rmsnorm on copies of the inputs. */
  float res_ref[TP][M * H];
  pz_bf16 xn_ref[TP][M * H];
  const float *parts[TP];
  for (int r = 0; r < TP; r++) parts[r] = f.data[r][f.part];
  for (int r = 0; r < TP; r++) {
    memcpy(res_ref[r], f.data[r][f.res], sizeof res_ref[r]);
    pz_ref_ar_rmsnorm(TP, parts, H, res_ref[r], res_ref[r], H, f.data[r][f.w], 1e-6f, m, H, xn_ref[r], H);
  }

  /* Gate forced on: all n_total columns of rows 0..m-1 on every rank, nothing else. */
  o.dev.force_gate = 1; /* PREZERO_FORCE_GATE=on */
  poison_buf(&f);
  pz_cpu_ctx c = ctx(&f, &o, 0, m);
  CHECK_OK(pz_cpu_op_AR_RMSNORM_MAYBE_PREZERO(&c, &f.g->nodes[f.donor]));
  check_fill(&f, m, NT);
  for (int r = 0; r < TP; r++) {
    CHECK(memcmp(f.data[r][f.res], res_ref[r], sizeof(float) * m * H) == 0);
    CHECK(memcmp(f.data[r][f.xn], xn_ref[r], sizeof(pz_bf16) * m * H) == 0);
  }
  /* The GEMMs then accumulate onto the zeros: equal to the zero-initialising GEMM, bit for bit,
   * and to a double-precision dot product. */
  float want[TP][M * NW];
  for (int r = 0; r < TP; r++) {
    c = ctx(&f, &o, r, m);
    CHECK_OK(pz_cpu_op_MM_MAYBE_PREZERO(&c, &f.g->nodes[f.mm_tail]));
    CHECK_OK(pz_cpu_op_MM_MAYBE_PREZERO(&c, &f.g->nodes[f.mm_head]));
    pz_ref_gemm(m, NW, H, f.data[r][f.xn], H, f.data[r][f.W], H, NULL, want[r], NW, 0, true);
    const float *tail = f.data[r][f.c_tail], *head = f.data[r][f.c_head];
    const pz_bf16 *A = f.data[r][f.xn], *W = f.data[r][f.W];
    for (int64_t i = 0; i < m; i++)
      for (int64_t j = 0; j < NW; j++) {
        double d = 0;
        for (int64_t k = 0; k < H; k++) d += (double)pz_bf16_to_f32(A[i * H + k]) * pz_bf16_to_f32(W[j * H + k]);
        CHECK(memcmp(&tail[i * NT + j], &want[r][i * NW + j], 4) == 0);
        CHECK(memcmp(&head[i * NT + j], &want[r][i * NW + j], 4) == 0);
        CHECK_NEAR(tail[i * NT + j], d, 1e-4 * (1 + fabs(d)));
      }
  }

  /* Gate forced off: only the n_base prefix; the tail GEMM zeroes its own slice. */
  o.dev.force_gate = 2; /* off */
  poison_buf(&f);
  c = ctx(&f, &o, 0, m);
  CHECK_OK(pz_cpu_op_AR_RMSNORM_MAYBE_PREZERO(&c, &f.g->nodes[f.donor]));
  check_fill(&f, m, NB);
  for (int r = 0; r < TP; r++) {
    c = ctx(&f, &o, r, m);
    CHECK_OK(pz_cpu_op_MM_MAYBE_PREZERO(&c, &f.g->nodes[f.mm_tail]));
    CHECK_OK(pz_cpu_op_MM_MAYBE_PREZERO(&c, &f.g->nodes[f.mm_head]));
    pz_ref_gemm(m, NW, H, f.data[r][f.xn], H, f.data[r][f.W], H, NULL, want[r], NW, 0, true);
    const float *tail = f.data[r][f.c_tail], *head = f.data[r][f.c_head];
    int same = 1;
    for (int64_t i = 0; i < m; i++)
      for (int64_t j = 0; j < NW; j++)
        same &= !memcmp(&tail[i * NT + j], &want[r][i * NW + j], 4) && !memcmp(&head[i * NT + j], &want[r][i * NW + j], 4);
    CHECK(same);
    /* Rows m.. were never touched. */
    CHECK(isnan(tail[m * NT]) && isnan(head[(M - 1) * NT + NW - 1]));
  }

  /* The GEMM trusts the fill where the contract says it was made: without the donor, the
   * poisoned slice comes back NaN (gate on: tail; always: head in the prefix). */
  o.dev.force_gate = 1; /* PREZERO_FORCE_GATE=on */
  poison_buf(&f);
  c = ctx(&f, &o, 0, m);
  CHECK_OK(pz_cpu_op_MM_MAYBE_PREZERO(&c, &f.g->nodes[f.mm_tail]));
  CHECK(isnan(((float *)f.data[0][f.c_tail])[0]));
  o.dev.force_gate = 2; /* off */
  poison_buf(&f);
  CHECK_OK(pz_cpu_op_MM_MAYBE_PREZERO(&c, &f.g->nodes[f.mm_head]));
  CHECK(isnan(((float *)f.data[0][f.c_head])[0]));
  CHECK_OK(pz_cpu_op_MM_MAYBE_PREZERO(&c, &f.g->nodes[f.mm_tail])); /* zeroes itself: finite */
  CHECK(!isnan(((float *)f.data[0][f.c_tail])[0]));
  o.dev.force_gate = 0;

  /* pz_prezero_slice_zeroed / pz_prezero_fill_cols, by hand. */
  pz_device_desc d = o.dev;
  CHECK(pz_prezero_slice_zeroed(1, 0, 64, 96, 64, 64, 1, &d));      /* inside the prefix */
  CHECK(!pz_prezero_slice_zeroed(1, 0, 97, 96, 64, 64, 1, &d));     /* past n_total */
  CHECK(!pz_prezero_slice_zeroed(1, -1, 4, 96, 64, 64, 1, &d));
  for (int64_t mm = 1; mm <= 256; mm *= 4) {
    bool act = pz_prezero_active(mm, 96, PZ_F32, 64, 1, &d);
    CHECK(pz_prezero_slice_zeroed(mm, 64, 32, 96, 64, 64, 1, &d) == act);
    CHECK(pz_prezero_fill_cols(mm, 96, 64, 64, 1, &d) == (act ? 96 : 64));
  }
  d.force_gate = 2;
  CHECK(!pz_prezero_slice_zeroed(1, 64, 32, 96, 64, 64, 1, &d) && pz_prezero_slice_zeroed(1, 32, 32, 96, 64, 64, 1, &d));
  d.force_gate = 1;
  CHECK(pz_prezero_slice_zeroed(256, 64, 32, 96, 64, 64, 1, &d));
  d.force_gate = 0;
  teardown(&f);
  TEST_DONE();
}
