/* Backend-ops harness, CUDA: every op of ops.def at the shapes of backend_ops_cases.h, run by the CUDA
 * executor (eager) and compared with the CPU executor on the same inputs, within a stated bound per op. */
#define _POSIX_C_SOURCE 200809L
#include <cuda_runtime.h>
#include "backend_ops_cases.h"
#include "backend/cuda/exec.h"
#include "backend/cuda/exec_ops.h"
#include "backend/cuda/runtime.h"

/* Bounds of CUDA vs CPU (bo_tol of each output, set by the case builders):
 *   EXACT: bit for bit (a NaN matches any NaN: the executors poison scratch with different NaNs):
 *     embedding, argmax ids, the AR residual, GEMM / LM_HEAD / MM_MAYBE_PREZERO on integer
 *     inputs (exact in fp32 in any summation order), the donor's zero_fill;
 *   ULP: bf16 outputs within one bf16 ulp: RMSNorm's sum of squares is a tree reduction on the
 *     GPU, so inv may differ by an f32 ulp (dense_ops.h, ar_fused.h; the MLA cache row, mla.h);
 *   REL: |gpu - cpu| <= rel * max|cpu row| + 1e-6: rel 1e-5 for GEMM / LM_HEAD on real inputs
 *     (fp32 summation order only), 2e-3 for MOE / DENSE_MLP (tensor-core summation order, which
 *     can flip the bf16 rounding of h; tests/cuda/test_moe.c's bound; routing is bit-exact),
 *     4e-3 = 2^-8 for GQA_ATTN's partial (its o values are within one bf16 ulp of the CPU's, a
 *     few of them one ulp off, carried through o_proj; tests/cuda/test_gqa_attn.c checks the
 *     exact element bound); the GQA k cache is ULP (the appended row), the v cache EXACT;
 *     SILU_MUL is EXACT (glibc's expf algorithm and IEEE-rounded operations, dense_ops.h);
 *   MLA: per row rms(gpu - cpu) <= 1.5e-2 rms(cpu) and max|gpu - cpu| <= 6e-2 rms(cpu)
 *     (tests/cuda/test_mla.c's bounds: the attention rounds q and p to bf16, mla.h).
 * GEMM cases run under every flavour (PREZERO_GEMM_FORCE, gemm.h), MM_MAYBE_PREZERO cases under
 * split-K atomics with 2 splits, so a consumer that trusts a fill the donor did not make adds
 * onto the NaN poison. Shapes the kernels do not take are declared per case (bo_case.cuda_gap),
 * listed, and must be refused by the executor; an op without a launcher is listed with its gap
 * (pz_cuda_op_gap) and the executor must refuse its graph with that reason. Cases of more ranks
 * than visible GPUs are listed as skipped. */
#define MLA_TOL_RMS 1.5e-2
#define MLA_TOL_MAX 6e-2

static const char *const gemm_flavours[] = {"", "atomic", "zero", "memset", "fullk", "serial", "cublas"};

/* load_weight hook of the CUDA executor: local rows [row0, row0 + n_rows) of t. */
static pz_status load_cuda(void *user, const pz_tensor *t, int rank, int64_t row0, int64_t n_rows, void *dst) {
  const int64_t w = t->ne[t->ndim - 1];
  for (int64_t i = 0; i < n_rows * w; i++) bo_store(t, dst, i, bo_value(user, t, rank, row0 * w + i));
  return PZ_OK;
}

static pz_status cuda_create(bo_graph *bg, pz_cuda_exec **out) {
  pz_cuda_exec_opts o = PZ_CUDA_EXEC_OPTS_INIT;
  o.seed = 77; /* the CPU executor's: KV caches get the same seeded fill */
  o.graphs = 0;
  o.poison = 1;
  o.prezero = 0; /* run each graph as built (no per-batch pass) */
  pz_device_desc_default(&o.dev);
  bo_gate(bg->c, &o.dev);
  o.load_weight = load_cuda;
  o.load_user = bg;
  o.load_chunk_bytes = 1 << 20;
  return pz_cuda_exec_create(bg->g, &o, out);
}

/* Raw bits of element o (elements from element 0) of a dtype-typed host buffer. */
static uint32_t raw(const pz_tensor *t, const void *b, int64_t o) {
  if (t->dtype == PZ_BF16) return ((const uint16_t *)b)[o];
  return ((const uint32_t *)b)[o];
}
static float val(const pz_tensor *t, const void *b, int64_t o) {
  if (t->dtype == PZ_BF16) return pz_bf16_to_f32(((const pz_bf16 *)b)[o]);
  if (t->dtype == PZ_I32) return (float)((const int32_t *)b)[o];
  return ((const float *)b)[o];
}
/* Distance in bf16 ulps (sign-magnitude bits mapped to a line). */
static int ulps(uint32_t a, uint32_t b) {
  int x = (a & 0x8000) ? -(int)(a & 0x7fff) : (int)a, y = (b & 0x8000) ? -(int)(b & 0x7fff) : (int)b;
  return abs(x - y);
}

/* Compares output o on every rank; returns its worst error in the tolerance's unit (ulps, or
 * |d| / bound) into *worst, and the number of values outside the bound. */
static int64_t compare(const bo_graph *bg, pz_cpu_exec *ce, pz_cuda_exec *ge, const bo_out *o, double *worst) {
  const pz_tensor *t = &bg->g->tensors[o->id];
  const bool flat = t->ndim >= 3; /* a KV cache: each sequence's whole cache is one row */
  const int64_t rows = flat ? t->ne[0] : bg->c->m, cols = flat ? pz_tensor_numel(t) / t->ne[0] : t->ne[1];
  const int64_t ld = flat ? t->stride[0] : t->ndim == 2 ? t->stride[0] : 0;
  const size_t bytes = (size_t)pz_tensor_span(t) * pz_dtype_size(t->dtype);
  void *g = malloc(bytes);
  int64_t bad = 0;
  *worst = 0;
  for (int r = 0; r < bg->c->tp && g; r++) {
    CHECK_OK(pz_cuda_exec_read(ge, r, o->id, g, bytes));
    const void *c = pz_cpu_exec_data(ce, r, o->id);
    for (int64_t i = 0; i < rows; i++) {
      double mx = 0, ss = 0, dss = 0, dmx = 0;
      for (int64_t j = 0; j < cols; j++) {
        double v = val(t, c, i * ld + j);
        mx = fmax(mx, fabs(v));
        ss += v * v;
      }
      for (int64_t j = 0; j < cols; j++) {
        const int64_t e = i * ld + j;
        const float a = val(t, c, e), b = val(t, g, e);
        double err = 0;
        bool ok;
        if (isnan(a) || isnan(b)) ok = isnan(a) && isnan(b);
        else if (o->tol == BO_TOL_EXACT) ok = raw(t, c, e) == raw(t, g, e);
        else if (o->tol == BO_TOL_ULP) ok = (err = ulps(raw(t, c, e), raw(t, g, e))) <= 1;
        else if (o->tol == BO_TOL_REL) ok = (err = fabs((double)a - b) / (o->rel * mx + 1e-6)) <= 1;
        else { ok = true; dss += ((double)a - b) * ((double)a - b); dmx = fmax(dmx, fabs((double)a - b)); }
        if (!ok && bad++ < 5)
          fprintf(stderr, "  %s rank %d [%lld, %lld]: cpu %.9g, cuda %.9g\n", t->name, r, (long long)i, (long long)j, a, b);
        *worst = fmax(*worst, err);
      }
      if (o->tol == BO_TOL_MLA) {
        double rms = sqrt(ss / (double)cols), er = sqrt(dss / (double)cols) / (rms + 1e-30), em = dmx / (rms + 1e-30);
        *worst = fmax(*worst, fmax(er / MLA_TOL_RMS, em / MLA_TOL_MAX));
        if (er > MLA_TOL_RMS || em > MLA_TOL_MAX) {
          if (bad++ < 5) fprintf(stderr, "  %s rank %d row %lld: rms err %.3g, max err %.3g of the row's rms\n", t->name, r, (long long)i, er, em);
        }
      }
    }
  }
  free(g);
  return bad;
}

static const char *tol_text(const bo_out *o) {
  static char buf[64];
  switch (o->tol) {
    case BO_TOL_EXACT: return "exact";
    case BO_TOL_ULP: return "<= 1 bf16 ulp";
    case BO_TOL_REL: snprintf(buf, sizeof buf, "<= %.0e of the row max", o->rel); return buf;
    default: return "MLA rms/max bounds";
  }
}

/* Compares every output of a case run on both backends; appends what was compared to res. */
static int64_t compare_all(bo_graph *bg, pz_cpu_exec *ce, pz_cuda_exec *ge, const int32_t *nc, const int32_t *ng,
                           char *res, size_t len) {
  int64_t bad = 0;
  size_t rl = 0;
  for (int k = 0; k < bg->n_out && rl < len; k++) {
    double worst = 0;
    bad += compare(bg, ce, ge, &bg->out[k], &worst);
    rl += (size_t)snprintf(res + rl, len - rl, "%s%s %s", k ? "; " : "", bg->g->tensors[bg->out[k].id].name,
                           tol_text(&bg->out[k]));
    if (bg->out[k].tol != BO_TOL_EXACT && rl < len) rl += (size_t)snprintf(res + rl, len - rl, " (worst %.2g of it)", worst);
  }
  if (bg->c->op == PZ_OP_ARGMAX) {
    for (int i = 0; i < bg->c->m; i++)
      if (nc[i] != ng[i] && bad++ < 5) fprintf(stderr, "  next[%d]: cpu %d, cuda %d\n", i, nc[i], ng[i]);
    if (bg->c->tp == 1) { /* the kernel writes the ids tensor only at TP 1 (exec_ops.c) */
      int32_t ids[BO_M];
      CHECK_OK(pz_cuda_exec_read(ge, 0, bg->in[1], ids, sizeof ids));
      for (int i = 0; i < bg->c->m; i++) bad += ids[i] != nc[i];
    }
    snprintf(res, len, "next ids exact");
  }
  return bad;
}

/* Runs case c on both backends under the current environment and compares; 1 when it passed.
 * A case with a declared shape gap passes when the CUDA executor refuses it (creation or step
 * returns an error naming the limit); a gap it runs anyway fails the test, so the list of gaps
 * stays true (drop the gap when a kernel gains the shape, or make the launcher refuse it). */
static int run_case(const bo_case *c, const char *flavour) {
  char label[160], res[256] = "";
  bo_graph bg;
  bo_build(c, &bg);
  if (!bg.g) return 0;
  bo_label(c, label, sizeof label);
  pz_cpu_exec *ce = bo_cpu_create(&bg);
  pz_cuda_exec *ge = NULL;
  int32_t nc[BO_M] = {0}, ng[BO_M] = {0};
  int64_t bad = 1;
  if (ce) {
    CHECK_OK(bo_cpu_step(&bg, ce, nc));
    pz_status st = cuda_create(&bg, &ge);
    if (st == PZ_OK) {
      st = pz_cuda_exec_step(ge, c->m, bg.tokens, bg.pos, ng);
    }
    if (c->cuda_gap) {
      bad = st == PZ_OK;
      printf("gap: %s %s: %s (%s)\n", pz_op_name(c->op), label, c->cuda_gap, st == PZ_OK ? "NOT refused" : pz_last_error());
      if (st == PZ_OK) {
        int64_t diff = compare_all(&bg, ce, ge, nc, ng, res, sizeof res);
        fprintf(stderr, "  the CUDA executor ran a declared gap (%s the CPU): drop the gap or refuse the shape\n",
                diff ? "and differs from" : "within the bounds of");
      }
    } else if (st != PZ_OK) {
      fprintf(stderr, "  CUDA: %s\n", pz_last_error());
    } else {
      bad = compare_all(&bg, ce, ge, nc, ng, res, sizeof res);
    }
  }
  if (!c->cuda_gap)
    printf("%-4s %-26s %s%s%s: %s\n", bad ? "FAIL" : "ok", pz_op_name(c->op), label, flavour[0] ? " gemm=" : "", flavour, res);
  CHECK(bad == 0);
  pz_cuda_exec_free(ge);
  pz_cpu_exec_free(ce);
  pz_graph_free(bg.g);
  return bad == 0;
}

/* An op without a launcher: the executor must refuse its graph, naming the gap. */
static void check_refused(const bo_case *c, const char *gap) {
  bo_graph bg;
  bo_build(c, &bg);
  if (!bg.g) return;
  pz_cuda_exec *ge = NULL;
  pz_status st = cuda_create(&bg, &ge);
  CHECK(st == PZ_ERR_UNSUPPORTED && ge == NULL && strstr(pz_last_error(), gap));
  pz_cuda_exec_free(ge);
  pz_graph_free(bg.g);
}

int main(void) {
  const int ngpu = pz_cuda_device_count();
  if (ngpu <= 0) {
    fprintf(stderr, "no CUDA GPU: skipping the CUDA backend-ops harness\n");
    return 77;
  }
  int n_ok = 0, n_run = 0, n_shape_gaps = 0, n_gaps_refused = 0, n_skip = 0, n_ops = 0;
  const char *op_gaps[PZ_OP_COUNT];
  int n_op_gaps = 0;
  for (int op = 0; op < PZ_OP_COUNT; op++) {
    const bo_entry *en = &bo_entries[op];
    const bo_case *first = NULL;
    int cases = 0;
    for (int i = 0; i < BO_N_CASES; i++)
      if (bo_cases[i].op == (pz_op)op) { cases++; if (!first) first = &bo_cases[i]; }
    const char *gap = pz_cuda_op_gap((pz_op)op);
    if (!pz_cuda_op_launcher((pz_op)op)) {
      CHECK(gap[0] != 0); /* a gap always says why */
      printf("gap: %s: %s\n", pz_op_name(op), gap);
      op_gaps[n_op_gaps++] = pz_op_name(op);
      if (first && first->tp <= ngpu) check_refused(first, gap);
      continue;
    }
    if (!en->build || cases == 0) {
      if (en->gap[0]) {
        printf("gap: %s: %s\n", pz_op_name(op), en->gap);
        op_gaps[n_op_gaps++] = pz_op_name(op);
      } else {
        fprintf(stderr, "op %s has a CUDA launcher but no cases and no declared gap\n", pz_op_name(op));
        pz_test_failures++;
      }
      continue;
    }
    n_ops++;
    for (int i = 0; i < BO_N_CASES; i++) {
      const bo_case *c = &bo_cases[i];
      char label[160];
      if (c->op != (pz_op)op) continue;
      if (c->tp > ngpu) {
        bo_label(c, label, sizeof label);
        if (c->cuda_gap) printf("gap: %s %s: %s (not run: needs %d GPUs)\n", pz_op_name(op), label, c->cuda_gap, c->tp);
        else printf("skip %s %s: needs %d GPUs, %d visible\n", pz_op_name(op), label, c->tp, ngpu);
        n_shape_gaps += c->cuda_gap != NULL;
        n_skip++;
        continue;
      }
      if (c->cuda_gap) {
        n_shape_gaps++;
        n_gaps_refused += run_case(c, "");
      } else if (c->op == PZ_OP_GEMM) {
        for (size_t f = 0; f < sizeof gemm_flavours / sizeof gemm_flavours[0]; f++) {
          if (f) setenv("PREZERO_GEMM_FORCE", gemm_flavours[f], 1);
          n_run++;
          n_ok += run_case(c, gemm_flavours[f]);
          unsetenv("PREZERO_GEMM_FORCE");
        }
      } else if (c->op == PZ_OP_MM_MAYBE_PREZERO) {
        setenv("PREZERO_GEMM_FORCE", "atomic", 1);
        setenv("PREZERO_GEMM_SPLITS", "2", 1);
        n_run++;
        n_ok += run_case(c, "atomic/2");
        unsetenv("PREZERO_GEMM_FORCE");
        unsetenv("PREZERO_GEMM_SPLITS");
      } else {
        n_run++;
        n_ok += run_case(c, "");
      }
    }
  }
  printf("CUDA backend (%d GPU%s): %d of %d ops checked against the CPU, %d of %d runs within bounds, %d shape gap(s) "
         "(%d refused by the executor), %d case(s) skipped for GPUs, %d op gap(s)", ngpu, ngpu == 1 ? "" : "s", n_ops,
         PZ_OP_COUNT, n_ok, n_run, n_shape_gaps, n_gaps_refused, n_skip, n_op_gaps);
  for (int i = 0; i < n_op_gaps; i++) printf("%s %s", i ? "," : ":", op_gaps[i]);
  printf("\n");
  TEST_DONE();
}
