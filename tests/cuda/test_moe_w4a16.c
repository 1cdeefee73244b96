/* CUDA W4A16 routed experts (src/backend/cuda/moe_q.h) against the CPU reference of quantised
 * experts (pz_ref_moe_experts_q, ref_ops.h: int4 x scale in f32, the bf16 MoE math) at Kimi-K2.5's
 * per-rank shapes (H 7168, moe_intermediate 2048 at TP 1, 1024 at TP 2, 512 at TP 4; 384 experts at
 * TP 4, fewer at TP 1 / 2 to bound the host's memory), m = 1..128, with the bf16 shared expert, tied
 * routing (every token the same experts), every expert chosen, empty slots; determinism (two launches
 * bit-identical); the launcher's own routing with the shared experts on a side stream (eager and
 * from a CUDA graph) bit-identical to the plain launch; argument errors; and the engine on CUDA with synthetic INT4 experts (`--quant int4`,
 * tiny, TP 1) against the CPU engine's logits. PZ_TEST_QUICK=1: one batch per TP shape and 64
 * experts at TP 4 (for compute-sanitizer). Exits 77 (skipped) without a GPU. */
#define _POSIX_C_SOURCE 200809L
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "backend/cpu/ref_ops.h"
#include "backend/cuda/moe.h"
#include "backend/cuda/mlp_gemm.h"
#include "backend/cuda/moe_q.h"
#include "core/options.h"
#include "backend/cuda/w4_tiled.h"
#include "backend/cuda/moe_w4_split.h"
#include "core/status.h"
#include "prezero.h"
#include "pz_test.h"
#include "moe_q_test_common.h"


static void *up(const void *h, size_t bytes) {
  void *d = NULL;
  if (cudaMalloc(&d, bytes ? bytes : 16) != cudaSuccess) { fprintf(stderr, "cudaMalloc %zu failed\n", bytes); exit(1); }
  if (h && bytes && cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice) != cudaSuccess) {
    fprintf(stderr, "cudaMemcpy %zu failed\n", bytes);
    exit(1);
  }
  if (!h && cudaMemset(d, 0, bytes ? bytes : 16) != cudaSuccess) {
    fprintf(stderr, "cudaMemset %zu failed\n", bytes);
    exit(1);
  }
  return d;
}

enum { ROUTE_RANDOM, ROUTE_TIED, ROUTE_ALL, ROUTE_EMPTY };

/* Values of got [m, H] outside the reference's bound: |got - ref| <= TOL_REL x the row's max |ref| + 1e-6. */
static int outside_bound(const float *got, const float *ref, int m, int64_t H) {
  int bad = 0;
  for (int i = 0; i < m; i++) {
    double mx = 0;
    for (int64_t j = 0; j < H; j++) mx = fmax(mx, fabs(ref[i * H + j]));
    for (int64_t j = 0; j < H; j++) bad += !(fabs((double)got[i * H + j] - ref[i * H + j]) <= TOL_REL * mx + 1e-6);
  }
  return bad;
}

/* The expert kernels' dynamic schedule (items_dynamic 1, PREZERO_MOE_DYNAMIC=1: each CTA runs item blockIdx.x,
 * then claims its next work item from a counter the gather zeroes) against the static one (items_dynamic 0, the
 * default: item i on CTA i mod grid) on the launch `a` describes (w4_tiled as given): the same output bits
 * eagerly, with the default K splits and with every item unsplit (wk 1: the most items); then captured once in a
 * CUDA graph and replayed three times. Before every dynamic launch and replay the output and the whole workspace
 * (counters, work list, h, d) are poisoned with 0xff, so an item left unrun shows as NaN bits and a counter that
 * the gather did not reset leaves items unrun. With wk 1 the two counters are read back: each holds the number
 * of items its kernel ran (n_work x row tiles of 128) when the grid had fewer CTAs than items, else 0 (no
 * claims); past 4 CTAs per SM (more than any grid of these kernels) it must be the item count, and such a
 * claim is counted in g_claims. tk: scratch of m x H floats. */
static int g_claims; /* launches in which the kernels had to claim items (checked at the end of main) */
static void dynamic_case(const pz_moe_q_args *a, float *tk) {
  const int m = a->m;
  const int64_t H = a->H, I = a->p.inter;
  const size_t nout = (size_t)m * H;
  float *want = tk ? malloc(4 * nout) : NULL;
  cudaStream_t s = NULL;
  CHECK(want && cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess);
  int dev = 0, sms = 0;
  CHECK(cudaGetDevice(&dev) == cudaSuccess && cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) == cudaSuccess);
  const size_t nw_off = ((size_t)4 * m * a->p.top_k + 255) / 256 * 256; /* moe_q_common.cuh layout_of: pairs, n_work */
  for (int wk1 = 0; wk1 < 2 && want; wk1++) {
    pz_moe_q_args c = *a;
    if (wk1) c.w4_wk_up = c.w4_wk_dn = 1;
    c.items_dynamic = 0;
    CHECK_OK(pz_moe_w4a16_launch(&c, s));
    CHECK(cudaStreamSynchronize(s) == cudaSuccess);
    cudaMemcpy(want, (const void *)c.out, 4 * nout, cudaMemcpyDeviceToHost);
    c.items_dynamic = 1;
    CHECK(cudaMemsetAsync(c.out, 0xff, 4 * nout, s) == cudaSuccess);
    CHECK(cudaMemsetAsync(c.workspace, 0xff, c.workspace_bytes, s) == cudaSuccess);
    CHECK_OK(pz_moe_w4a16_launch(&c, s));
    CHECK(cudaStreamSynchronize(s) == cudaSuccess);
    cudaMemcpy(tk, (const void *)c.out, 4 * nout, cudaMemcpyDeviceToHost);
    if (memcmp(tk, want, 4 * nout)) {
      fprintf(stderr, "m %d, %s splits, %s layout: the dynamic item schedule differs from the static one\n", m,
              wk1 ? "unsplit" : "default", c.w4_tiled ? "tiled" : "stored");
      pz_test_failures++;
    }
    if (wk1) {
      int nw[3] = {0, 0, 0};
      cudaMemcpy(nw, (const char *)c.workspace + nw_off, sizeof nw, cudaMemcpyDeviceToHost);
      const int64_t items[2] = {(int64_t)nw[0] * ((I + 127) / 128), (int64_t)nw[0] * ((H + 127) / 128)};
      for (int k = 0; k < 2; k++) {
        const int64_t got = nw[1 + k];
        const int ok = got == items[k] || (got == 0 && items[k] <= 4 * (int64_t)sms);
        if (!ok) {
          fprintf(stderr, "m %d, %s counter: %lld, want %lld items (or 0 without claims)\n", m, k ? "down" : "gate/up",
                  (long long)got, (long long)items[k]);
          pz_test_failures++;
        }
        if (got > 0) g_claims++;
      }
    }
    cudaGraph_t g = NULL;
    cudaGraphExec_t ge = NULL;
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
    CHECK_OK(pz_moe_w4a16_launch(&c, s));
    CHECK(cudaStreamEndCapture(s, &g) == cudaSuccess && g);
    CHECK(cudaGraphInstantiate(&ge, g, 0) == cudaSuccess);
    for (int r = 0; r < 3 && ge; r++) {
      CHECK(cudaMemsetAsync(c.out, 0xff, 4 * nout, s) == cudaSuccess);
      CHECK(cudaMemsetAsync(c.workspace, 0xff, c.workspace_bytes, s) == cudaSuccess);
      CHECK(cudaGraphLaunch(ge, s) == cudaSuccess);
      CHECK(cudaStreamSynchronize(s) == cudaSuccess);
      cudaMemcpy(tk, (const void *)c.out, 4 * nout, cudaMemcpyDeviceToHost);
      if (memcmp(tk, want, 4 * nout)) {
        fprintf(stderr, "m %d, %s splits: graph replay %d of the dynamic schedule differs\n", m,
                wk1 ? "unsplit" : "default", r);
        pz_test_failures++;
      }
    }
    if (ge) cudaGraphExecDestroy(ge);
    if (g) cudaGraphDestroy(g);
  }
  cudaStreamDestroy(s);
  free(want);
}

/* The tail split (tail_off 0, the default; PREZERO_MOE_TAIL=0 runs every item whole: kernels/moe_q_common.cuh
 * tail_of, moe_w4_split.h pz_moe_tail_r) on the launch `a` describes with exact arithmetic: x integers in
 * [-2, 2], every scale 2^-6 (a constant array reads the same in any layout), the case's random INT4 weights.
 * Then every gate / up group sum and every partial over K slices is an integer times 2^-6 below 2^24, exact
 * in f32 in any grouping, so the gate/up outputs are the same bits however items and K slices are cut; down
 * runs unsplit (wk 1: direct writes, no tail split), so the MoE output must be bit-identical with and
 * without the split, for gate/up splits 2 and 4. Output and workspace are poisoned (0xff) before every
 * launch, so a row no sub-item wrote shows. The kernels record tail_of's r in the workspace (n_work[3]:
 * gate/up, [4]: down): with tail_off it must be 1; without, it must be pz_moe_tail_r's on the item count read
 * back and a grid of 3 CTAs per SM (w4_up_ctas 3 given; where that is the grid), and g_tails counts the
 * launches whose r > 1 (main checks that some launch was split). dout: the launch's output [m, H] on the device. */
static int g_tails;
static void tail_case(const pz_moe_q_args *a, float *dout) {
  const int m = a->m, E = a->p.n_experts;
  const int64_t H = a->H, I = a->p.inter;
  const size_t nout = (size_t)m * H, ns = (size_t)E * I * (H / 32); /* gate / up / down scales: each E x I x H / 32 */
  pz_bf16 *xi = malloc(2 * nout), *sc = malloc(2 * ns);
  float *o[2] = {malloc(4 * nout), malloc(4 * nout)};
  CHECK(xi && sc && o[0] && o[1]);
  if (!xi || !sc || !o[0] || !o[1]) goto done;
  for (size_t i = 0; i < nout; i++) xi[i] = pz_f32_to_bf16((float)((int)(rnd32() % 5u) - 2));
  for (size_t i = 0; i < ns; i++) sc[i] = pz_f32_to_bf16(0.015625f);
  int dev = 0, sms = 0;
  CHECK(cudaGetDevice(&dev) == cudaSuccess && cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) == cudaSuccess);
  void *dx = up(xi, 2 * nout), *ds = up(sc, 2 * ns);
  const size_t nw_off = ((size_t)4 * m * a->p.top_k + 255) / 256 * 256; /* moe_q_common.cuh layout_of: pairs, n_work */
  static const int wks[] = {2, 4};
  for (int w = 0; w < 2; w++) {
    for (int off = 0; off < 2; off++) {
      pz_moe_q_args c = *a;
      c.x = dx;
      c.s_gate = c.s_up = c.s_down = ds;
      c.w4_wk_up = wks[w];
      c.w4_wk_dn = 1;
      c.w4_up_ctas = 3;
      c.tail_off = off;
      CHECK(cudaMemset(dout, 0xff, 4 * nout) == cudaSuccess);
      CHECK(cudaMemset(c.workspace, 0xff, c.workspace_bytes) == cudaSuccess);
      CHECK_OK(pz_moe_w4a16_launch(&c, 0));
      CHECK(cudaDeviceSynchronize() == cudaSuccess);
      cudaMemcpy(o[off], dout, 4 * nout, cudaMemcpyDeviceToHost);
      int nw[5] = {0, 0, 0, 0, 0};
      cudaMemcpy(nw, (const char *)c.workspace + nw_off, sizeof nw, cudaMemcpyDeviceToHost);
      const int64_t rows = 16 * (8 / wks[w]), items = (int64_t)nw[0] * ((I + rows - 1) / rows);
      int64_t grid = 3 * (int64_t)sms; /* launch_mm: every CTA slot, at most the most items the batch can have */
      const int64_t pairs = (int64_t)m * a->p.top_k, max_items = (pairs / 32 + (pairs < E ? pairs : E) + 1) * ((I + rows - 1) / rows);
      if (grid > max_items) grid = max_items;
      const int want = off ? 1 : pz_moe_tail_r(items, grid, wks[w], pz_moe_w4_wk_cap(H));
      if (nw[3] != want || nw[4] != 1) {
        fprintf(stderr, "m %d, I %lld, gate/up split %d, tail_off %d: the kernels split their last waves by %d / %d, want %d / 1 "
                "(%lld items, grid %lld)\n", m, (long long)I, wks[w], off, nw[3], nw[4], want, (long long)items, (long long)grid);
        pz_test_failures++;
      }
      if (!off && nw[3] > 1) g_tails++;
    }
    if (memcmp(o[0], o[1], 4 * nout)) {
      fprintf(stderr, "m %d, I %lld, gate/up split %d, exact inputs: the tail split changes the output\n", m,
              (long long)I, wks[w]);
      pz_test_failures++;
    }
  }
  cudaFree(dx);
  cudaFree(ds);
done:
  free(xi);
  free(sc);
  free(o[0]);
  free(o[1]);
}

/* The tiled layout (pz_moe_w4a16_tile, w4_tiled.h) on the case's device weights, in place:
 * - the gate words and scales equal the host's map of the stored arrays (wg, sg) bit for bit, and
 *   pz_moe_w4a16_untile_host gives the stored arrays back;
 * - the kernel on them (twice: bit-identical) is within the same bound of
 *   the CPU reference (ref) as the stored layout's kernel, and its deviation from that kernel
 *   (gpu) is reported;
 * - shapes that are not multiples of 128 are refused by the tiler and the launcher.
 * Leaves a's weights tiled (the caller frees them). */
static void tiled_case(pz_moe_q_args *a, const int32_t *wg, const pz_bf16 *sg, int64_t H, int64_t I, const float *ref,
                       const float *gpu, float *dout) {
  const int E = a->p.n_experts, m = a->m;
  void *tmp = NULL;
  const size_t tb = pz_moe_w4a16_tile_tmp_bytes(I > H ? I : H, I > H ? H : I) * 3; /* >= either matrix; 3 per pass */
  CHECK(cudaMalloc(&tmp, tb) == cudaSuccess);
  if (H % 128 || I % 128) { /* the matrix whose columns are not whole super-chunks is refused */
    if (H % 128) CHECK_ST(pz_moe_w4a16_tile((void *)a->w_gate, (void *)a->s_gate, E, I, H, tmp, tb, 0), PZ_ERR_SHAPE);
    if (I % 128) CHECK_ST(pz_moe_w4a16_tile((void *)a->w_down, (void *)a->s_down, E, H, I, tmp, tb, 0), PZ_ERR_SHAPE);
    pz_moe_q_args b = *a;
    b.w4_tiled = 1;
    CHECK_ST(pz_moe_w4a16_launch(&b, 0), PZ_ERR_SHAPE);
    cudaFree(tmp);
    return;
  }
  CHECK_OK(pz_moe_w4a16_tile((void *)a->w_gate, (void *)a->s_gate, E, I, H, tmp, tb, 0));
  CHECK_OK(pz_moe_w4a16_tile((void *)a->w_up, (void *)a->s_up, E, I, H, tmp, tb, 0));
  CHECK_OK(pz_moe_w4a16_tile((void *)a->w_down, (void *)a->s_down, E, H, I, tmp, tb, 0));
  CHECK_ST(pz_moe_w4a16_tile((void *)a->w_down, (void *)a->s_down, E, H, I, tmp, 16, 0), PZ_ERR_INVALID_ARG);
  CHECK(cudaDeviceSynchronize() == cudaSuccess);
  /* the map, bit for bit, on the gate matrices */
  const size_t nw = (size_t)E * I * (H / 8), ns = (size_t)E * I * (H / 32);
  int32_t *tw = malloc(4 * nw);
  pz_bf16 *ts = malloc(2 * ns);
  CHECK(cudaMemcpy(tw, a->w_gate, 4 * nw, cudaMemcpyDeviceToHost) == cudaSuccess);
  CHECK(cudaMemcpy(ts, a->s_gate, 2 * ns, cudaMemcpyDeviceToHost) == cudaSuccess);
  size_t mis = 0;
  for (int e = 0; e < E; e++)
    for (int64_t r = 0; r < I; r++) {
      for (int64_t w = 0; w < H / 8; w++) {
        const size_t src = ((size_t)e * I + r) * (H / 8) + w, dst = (size_t)e * I * (H / 8) + pz_w4t_word_index(H, r, w);
        mis += (uint32_t)tw[dst] != pz_w4t_perm((uint32_t)wg[src]);
      }
      for (int64_t q = 0; q < H / 32; q++) {
        const size_t src = ((size_t)e * I + r) * (H / 32) + q, dst = (size_t)e * I * (H / 32) + pz_w4t_scale_index(H, r, q);
        mis += ts[dst] != sg[src];
      }
    }
  CHECK(mis == 0);
  CHECK_OK(pz_moe_w4a16_untile_host(tw, ts, E, I, H));
  CHECK(!memcmp(tw, wg, 4 * nw) && !memcmp(ts, sg, 2 * ns));
  free(tw);
  free(ts);
  /* the kernel on the tiled layout */
  float *t[2];
  for (int d = 0; d < 2; d++) { /* twice: deterministic */
    pz_moe_q_args b = *a;
    b.w4_tiled = 1;
    CHECK_OK(pz_moe_w4a16_launch(&b, 0));
    CHECK(cudaDeviceSynchronize() == cudaSuccess);
    t[d] = malloc(4 * (size_t)m * H);
    cudaMemcpy(t[d], dout, 4 * (size_t)m * H, cudaMemcpyDeviceToHost);
  }
  CHECK(!memcmp(t[0], t[1], 4 * (size_t)m * H));
  double worst = 0, vs = 0;
  int bad = 0;
  size_t same = 0;
  for (int i = 0; i < m; i++) {
    double mx = 0;
    for (int64_t j = 0; j < H; j++) mx = fmax(mx, fabs(ref[i * H + j]));
    for (int64_t j = 0; j < H; j++) {
      const double e = fabs((double)t[0][i * H + j] - ref[i * H + j]);
      if (!(e <= TOL_REL * mx + 1e-6)) bad++;
      worst = fmax(worst, e / (mx + 1e-30));
      vs = fmax(vs, fabs((double)t[0][i * H + j] - gpu[i * H + j]) / (mx + 1e-30));
      same += t[0][i * H + j] == gpu[i * H + j];
    }
  }
  printf("%-28s   tiled layout: worst %.2e of the row max, %.2e from the stored layout's kernel (%.1f%% of values equal)%s\n",
         "", worst, vs, 100.0 * same / ((double)m * H), bad ? "  FAIL" : "");
  if (bad) pz_test_failures++;
  pz_moe_q_args b = *a; /* a tiled launch on a misaligned pointer is refused */
  b.w4_tiled = 1;
  b.s_up = (const char *)a->s_up + 4;
  CHECK_ST(pz_moe_w4a16_launch(&b, 0), PZ_ERR_INVALID_ARG);
  /* gate/up or down K split over 1, 2, 4 or 8 warps (w4_wk_up / w4_wk_dn, A/B runs): within the same
     bound */
  static const int wks[] = {1, 2, 4, 8};
  float *tk = malloc(4 * (size_t)m * H);
  for (int q = 0; q < 8 && tk; q++) {
    pz_moe_q_args c = *a;
    c.w4_tiled = 1;
    if (q < 4) c.w4_wk_up = wks[q];
    else c.w4_wk_dn = wks[q - 4];
    CHECK_OK(pz_moe_w4a16_launch(&c, 0));
    CHECK(cudaDeviceSynchronize() == cudaSuccess);
    cudaMemcpy(tk, dout, 4 * (size_t)m * H, cudaMemcpyDeviceToHost);
    const int badq = outside_bound(tk, ref, m, H);
    if (badq) {
      fprintf(stderr, "tiled, %s %d: %d values outside the bound\n", q < 4 ? "w4_wk_up" : "w4_wk_dn", wks[q % 4], badq);
      pz_test_failures++;
    }
  }
  /* the default's K splits are moe_w4_split.h's rule (adaptive, then PREZERO_MOE_W4_WK=0's fixed one, then
     PREZERO_MOE_W4_WAVES=0's fill rule for gate/up) on
     this device's CTA slots (gate/up: w4_up_ctas 3 or 4 given, or pz_moe_w4_up_ctas's choice by batch; down:
     4): the same splits given explicitly are bit-identical (and w4_wk_fixed 0, the default, repeats t[0] bit
     for bit: run to run) */
  int dev = 0, sms = 0;
  CHECK(cudaGetDevice(&dev) == cudaSuccess &&
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) == cudaSuccess);
  static const int ctas_list[] = {0, 4, 3}; /* by batch (the default), PREZERO_MOE_W4_UP_REGS=0, always 3 */
  for (int q = 0; q < 9 && tk; q++) { /* rule: 0 the default (wave rule on gate/up), 1 fixed, 2 the fill rule */
    const int rule = q % 3, fixed = rule == 1, ctas = ctas_list[q / 3];
    const int adaptive = rule == 1 ? 0 : rule == 2 ? 1 : 2;
    pz_moe_q_args c = *a, d;
    c.w4_tiled = 1;
    c.w4_wk_fixed = fixed;
    c.w4_waves_off = rule == 2;
    c.w4_up_ctas = ctas;
    d = c;
    const int up_ctas = ctas ? ctas : pz_moe_w4_up_ctas(H, I, m, a->p.top_k, E, sms, 0, !fixed);
    d.w4_wk_up = pz_moe_w4_wk(1, H, I, m, a->p.top_k, E, up_ctas * sms, 1, adaptive);
    d.w4_wk_dn = pz_moe_w4_wk(0, H, I, m, a->p.top_k, E, 4 * sms, 1, adaptive);
    d.w4_up_ctas = up_ctas; /* a given split would otherwise enter the CTA rule's count (pz_moe_w4_up_ctas wk_up) */
    CHECK_OK(pz_moe_w4a16_launch(&c, 0));
    CHECK(cudaDeviceSynchronize() == cudaSuccess);
    cudaMemcpy(tk, dout, 4 * (size_t)m * H, cudaMemcpyDeviceToHost);
    if (q == 0 && memcmp(tk, t[0], 4 * (size_t)m * H)) {
      fprintf(stderr, "tiled: w4_wk_fixed 0 differs from the default\n");
      pz_test_failures++;
    }
    CHECK_OK(pz_moe_w4a16_launch(&d, 0));
    CHECK(cudaDeviceSynchronize() == cudaSuccess);
    cudaMemcpy(t[1], dout, 4 * (size_t)m * H, cudaMemcpyDeviceToHost);
    if (memcmp(tk, t[1], 4 * (size_t)m * H)) {
      fprintf(stderr, "tiled, rule %d, w4_up_ctas %d: the launcher's splits are not moe_w4_split.h's "
              "(up %d, down %d)\n", rule, ctas, d.w4_wk_up, d.w4_wk_dn);
      pz_test_failures++;
    }
  }
  /* the gate/up kernel at 3 CTAs per SM (80 registers) and at 4 (64 registers, with spills), both forced, give
     the same bits for the same K splits: only the registers and the grid differ */
  static const int up_wks[] = {1, 2, 8};
  for (int w = 0; w < 3 && tk; w++) {
    for (int four = 0; four < 2; four++) {
      pz_moe_q_args c = *a;
      c.w4_tiled = 1;
      c.w4_wk_up = up_wks[w];
      c.w4_wk_dn = 1;
      c.w4_up_ctas = four ? 4 : 3;
      c.tail_off = 1; /* the tail split follows the grid (3 or 4 x SMs): here the same items on both */
      CHECK_OK(pz_moe_w4a16_launch(&c, 0));
      CHECK(cudaDeviceSynchronize() == cudaSuccess);
      cudaMemcpy(four ? t[1] : tk, dout, 4 * (size_t)m * H, cudaMemcpyDeviceToHost);
    }
    if (memcmp(tk, t[1], 4 * (size_t)m * H)) {
      fprintf(stderr, "tiled, w4_wk_up %d: the gate/up kernel at 4 CTAs per SM differs from 3\n", up_wks[w]);
      pz_test_failures++;
    }
  }
  { /* a CTA count other than 0, 3 or 4 is refused with a status */
    pz_moe_q_args c = *a;
    c.w4_tiled = 1;
    c.w4_up_ctas = 5;
    CHECK_ST(pz_moe_w4a16_launch(&c, 0), PZ_ERR_INVALID_ARG);
  }
  /* the register epilogue of unsplit items (direct_off 0, the default; PREZERO_MOE_DIRECT=0 is the shared-
     memory reduction) changes no bit, both with every item unsplit (wk 1 for gate/up and down: the direct
     write acts on every item) and with the default splits; the unsplit one is within the reference's bound */
  float *tv = malloc(4 * (size_t)m * H);
  for (int split = 0; split < 2 && tk && tv; split++)
    for (int v = 0; v < 2; v++) {
      pz_moe_q_args c = *a;
      c.w4_tiled = 1;
      if (!split) c.w4_wk_up = c.w4_wk_dn = 1;
      c.direct_off = v;
      c.tail_off = 1; /* direct_off 1 lets unsplit launches take the tail split (they reduce in shared memory) */
      CHECK_OK(pz_moe_w4a16_launch(&c, 0));
      CHECK(cudaDeviceSynchronize() == cudaSuccess);
      cudaMemcpy(v ? tk : tv, dout, 4 * (size_t)m * H, cudaMemcpyDeviceToHost);
      if (v && memcmp(tk, tv, 4 * (size_t)m * H)) {
        fprintf(stderr, "tiled, %s splits: direct_off 1 differs from the default epilogue\n", split ? "default" : "unsplit");
        pz_test_failures++;
      }
      if (!v && !split) {
        const int badv = outside_bound(tv, ref, m, H);
        if (badv) {
          fprintf(stderr, "tiled, unsplit, direct epilogue: %d values outside the bound\n", badv);
          pz_test_failures++;
        }
      }
    }
  free(tv);
  {
    pz_moe_q_args c = *a;
    c.w4_tiled = 1; /* the weights are tiled now */
    dynamic_case(&c, tk);
    tail_case(&c, dout);
  }
  free(tk);
  for (int d = 0; d < 2; d++) free(t[d]);
  b = *a;
  b.w4_wk_up = 3;
  CHECK_ST(pz_moe_w4a16_launch(&b, 0), PZ_ERR_INVALID_ARG);
  b = *a;
  b.w4_wk_dn = 6;
  CHECK_ST(pz_moe_w4a16_launch(&b, 0), PZ_ERR_INVALID_ARG);

  cudaFree(tmp);
}

/* A host callback on the side stream that holds it for 3 ms: the shared experts queued after it
 * finish after the routed experts, so a missing or late join would let the combine read `out` before
 * they wrote it (wrong bits), not just by chance. No CUDA calls (a stream callback may not make any). */
static void CUDART_CB hold_side(void *unused) {
  (void)unused;
  const struct timespec ts = {0, 3000000};
  nanosleep(&ts, NULL);
}

/* The launcher's own routing and the shared experts on a side stream (moe_q.h logits, side):
 * with a routing from pz_moe_route_launch (random logits) the plain launch gives `want`; then the
 * launcher routing the same logits itself, with no fork, joined before gate/up (fork_join 1) and
 * before the combine (2), and with the join by batch (0) replayed from a captured CUDA graph, must
 * give the same ids and the same output bits, with the side stream held back (hold_side) so that a
 * missing join shows. A side stream without its events, and fork_join 3, are refused.
 * All of it three times: the shared experts fused (gemm NULL), then as GEMMs (PREZERO_MLP_GEMM=1, at
 * most 2 split-K splits, so run to run deterministic) with gate and up as one GEMM (g_mlp_gemm: the
 * test's weights are adjacent) and as two (g_mlp_gemm2: PREZERO_MLP_ONE_GU=0), whose plain launches
 * must lie within the reference bound of the fused one's. */
static pz_gemm_ctx *g_mlp_gemm, *g_mlp_gemm2;
static void fork_case(const pz_moe_q_args *a, float *dout) {
  const int m = a->m, E = a->p.n_experts, K = a->p.top_k;
  const int64_t H = a->H;
  const size_t nout = (size_t)m * H;
  float *lg = malloc(4 * (size_t)m * E), *want = malloc(4 * nout), *got = malloc(4 * nout), *fused = malloc(4 * nout);
  int32_t *ids_want = malloc(4 * (size_t)m * K), *ids_got = malloc(4 * (size_t)m * K);
  for (int64_t i = 0; i < (int64_t)m * E; i++) lg[i] = (float)(4 * urand() - 2);
  float *dlg = up(lg, 4 * (size_t)m * E);
  int32_t *ids = up(NULL, 4 * (size_t)m * K);
  float *wts = up(NULL, 4 * (size_t)m * K);
  cudaStream_t s = NULL, side = NULL;
  cudaEvent_t e0 = NULL, e1 = NULL;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess);
  CHECK(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking) == cudaSuccess);
  CHECK(cudaEventCreateWithFlags(&e0, cudaEventDisableTiming) == cudaSuccess);
  CHECK(cudaEventCreateWithFlags(&e1, cudaEventDisableTiming) == cudaSuccess);
  pz_moe_q_args b = *a;
  for (int path = 0; path < 3; path++) {
  b = *a;
  b.gemm = path == 0 ? NULL : path == 1 ? g_mlp_gemm : g_mlp_gemm2;
  if (path) CHECK(pz_cuda_mlp_one_gu(b.gemm, H, a->p.shared_inter, a->sh_gate, a->sh_up) == (path == 1));
  b.ids = ids;
  b.weights = wts;
  CHECK_OK(pz_moe_route_launch(m, dlg, E, NULL, &b.p, ids, wts, s));
  CHECK_OK(pz_moe_w4a16_launch(&b, s));
  CHECK(cudaStreamSynchronize(s) == cudaSuccess);
  cudaMemcpy(want, dout, 4 * nout, cudaMemcpyDeviceToHost);
  cudaMemcpy(ids_want, ids, 4 * (size_t)m * K, cudaMemcpyDeviceToHost);
  if (!path) memcpy(fused, want, 4 * nout);
  else {
    const int badg = outside_bound(want, fused, m, H);
    if (badg) fprintf(stderr, "shared experts as %s GEMM(s): %d values outside the bound of the fused ones\n",
                      path == 1 ? "one" : "two", badg);
    if (badg) pz_test_failures++;
  }
  b.logits = dlg;
  b.ld_logits = E;
  for (int mode = 0; mode < 4; mode++) { /* 0 no fork, 1 / 2 the joins, 3 the join by batch from a graph */
    b.side = mode ? side : NULL;
    b.ev_fork = mode ? e0 : NULL;
    b.ev_join = mode ? e1 : NULL;
    b.fork_join = mode == 3 ? 0 : mode;
    CHECK(cudaMemsetAsync(ids, 0x7f, 4 * (size_t)m * K, s) == cudaSuccess); /* stale routing and output */
    CHECK(cudaMemsetAsync(dout, 0xff, 4 * nout, s) == cudaSuccess);
    if (mode < 3) {
      if (mode) CHECK(cudaLaunchHostFunc(side, hold_side, NULL) == cudaSuccess);
      CHECK_OK(pz_moe_w4a16_launch(&b, s));
    } else {
      cudaGraph_t g = NULL;
      cudaGraphExec_t ge = NULL;
      CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
      CHECK(cudaEventRecord(e0, s) == cudaSuccess); /* side joins the capture, then holds */
      CHECK(cudaStreamWaitEvent(side, e0, 0) == cudaSuccess);
      CHECK(cudaLaunchHostFunc(side, hold_side, NULL) == cudaSuccess);
      CHECK_OK(pz_moe_w4a16_launch(&b, s));
      CHECK(cudaStreamEndCapture(s, &g) == cudaSuccess && g); /* fails if side were left unjoined */
      CHECK(cudaGraphInstantiate(&ge, g, 0) == cudaSuccess);
      CHECK(cudaGraphLaunch(ge, s) == cudaSuccess);
      CHECK(cudaStreamSynchronize(s) == cudaSuccess);
      cudaGraphExecDestroy(ge);
      cudaGraphDestroy(g);
    }
    CHECK(cudaStreamSynchronize(s) == cudaSuccess);
    cudaMemcpy(got, dout, 4 * nout, cudaMemcpyDeviceToHost);
    cudaMemcpy(ids_got, ids, 4 * (size_t)m * K, cudaMemcpyDeviceToHost);
    CHECK(!memcmp(ids_got, ids_want, 4 * (size_t)m * K));
    if (memcmp(got, want, 4 * nout)) {
      fprintf(stderr, "fork mode %d (shared experts %s): output differs from the plain launch\n", mode,
              path == 0 ? "fused" : path == 1 ? "as one gate/up GEMM" : "as two gate/up GEMMs");
      pz_test_failures++;
    }
  }
  }
  pz_moe_q_args c = b;
  c.ev_join = NULL; /* a side stream needs both events */
  CHECK_ST(pz_moe_w4a16_launch(&c, s), PZ_ERR_INVALID_ARG);
  c = b;
  c.fork_join = 3;
  CHECK_ST(pz_moe_w4a16_launch(&c, s), PZ_ERR_INVALID_ARG);
  cudaEventDestroy(e0); cudaEventDestroy(e1);
  cudaStreamDestroy(s); cudaStreamDestroy(side);
  cudaFree(dlg); cudaFree(ids); cudaFree(wts);
  free(lg); free(want); free(got); free(fused); free(ids_want); free(ids_got);
}

/* One case: returns the worst |gpu - ref| / (max|ref row| + tiny) over the rows. */
static void run_case(const char *name, int E, int K, int64_t H, int64_t I, int64_t SI, int m, int route) {
  pz_moe_params p;
  memset(&p, 0, sizeof p);
  p.n_experts = E;
  p.top_k = K;
  p.n_group = 1;
  p.topk_group = 1;
  p.inter = I;
  p.shared_inter = SI;
  p.wquant = 1;
  p.q_group = 32;
  const size_t nw_gu = (size_t)E * I * (H / 8), nw_d = (size_t)E * H * (I / 8);
  const size_t ns_gu = (size_t)E * I * (H / 32), ns_d = (size_t)E * H * (I / 32);
  int32_t *wg = malloc(4 * nw_gu), *wu = malloc(4 * nw_gu), *wd = malloc(4 * nw_d);
  pz_bf16 *sg = malloc(2 * ns_gu), *su = malloc(2 * ns_gu), *sd = malloc(2 * ns_d), *x = malloc(2 * (size_t)m * H);
  pz_bf16 *shg = SI ? malloc(2 * (size_t)SI * H) : NULL, *shu = SI ? malloc(2 * (size_t)SI * H) : NULL;
  pz_bf16 *shd = SI ? malloc(2 * (size_t)SI * H) : NULL;
  for (size_t i = 0; i < nw_gu; i++) { wg[i] = (int32_t)rnd32(); wu[i] = (int32_t)rnd32(); }
  for (size_t i = 0; i < nw_d; i++) wd[i] = (int32_t)rnd32();
  /* Scales with random mantissas around 1/sqrt(fan_in) / 4 (not powers of two). */
  for (size_t i = 0; i < ns_gu; i++) {
    sg[i] = pz_f32_to_bf16((float)((0.5 + urand()) * 0.25 / sqrt((double)H)));
    su[i] = pz_f32_to_bf16((float)((0.5 + urand()) * 0.25 / sqrt((double)H)));
  }
  for (size_t i = 0; i < ns_d; i++) sd[i] = pz_f32_to_bf16((float)((0.5 + urand()) * 0.25 / sqrt((double)I)));
  for (int64_t i = 0; i < m * H; i++) x[i] = pz_f32_to_bf16((float)(2 * urand() - 1));
  for (int64_t i = 0; SI && i < SI * H; i++) {
    shg[i] = pz_f32_to_bf16((float)((2 * urand() - 1) / sqrt((double)H)));
    shu[i] = pz_f32_to_bf16((float)((2 * urand() - 1) / sqrt((double)H)));
    shd[i] = pz_f32_to_bf16((float)((2 * urand() - 1) / sqrt((double)SI)));
  }
  int32_t *ids = malloc(4 * (size_t)m * K);
  float *wts = malloc(4 * (size_t)m * K);
  for (int i = 0; i < m; i++)
    for (int t = 0; t < K; t++) {
      int id;
      if (route == ROUTE_TIED) id = (t * 7) % E;                /* every token the same K experts */
      else if (route == ROUTE_ALL) id = (i * K + t) % E;        /* m * K >= E: every expert chosen */
      else {
        int ok;
        do { /* K distinct experts per token */
          id = (int)(rnd32() % (uint32_t)E);
          ok = 1;
          for (int u = 0; u < t; u++) ok &= ids[i * K + u] != id;
        } while (!ok);
      }
      if (route == ROUTE_EMPTY && t == K - 1) id = -1;
      ids[i * K + t] = id;
      wts[i * K + t] = route == ROUTE_TIED ? 0.125f : (float)(0.05 + urand());
    }
  /* CPU reference */
  float *ref = malloc(4 * (size_t)m * H), *gpu = malloc(4 * (size_t)m * H), *gpu2 = malloc(4 * (size_t)m * H);
  pz_ref_qexperts q = {.wquant = 1, .group = 32, .w_gate = wg, .w_up = wu, .w_down = wd, .s_gate = sg, .s_up = su, .s_down = sd};
  CHECK_OK(pz_ref_moe_experts_q(m, H, x, H, ids, wts, &p, &q, shg, shu, shd, ref, H));
  /* GPU */
  pz_moe_q_args a;
  memset(&a, 0, sizeof a);
  a.m = m;
  a.H = H;
  a.p = p;
  a.x = up(x, 2 * (size_t)m * H);
  a.ldx = H;
  a.ids = up(ids, 4 * (size_t)m * K);
  a.weights = up(wts, 4 * (size_t)m * K);
  a.w_gate = up(wg, 4 * nw_gu);
  a.w_up = up(wu, 4 * nw_gu);
  a.w_down = up(wd, 4 * nw_d);
  a.s_gate = up(sg, 2 * ns_gu);
  a.s_up = up(su, 2 * ns_gu);
  a.s_down = up(sd, 2 * ns_d);
  if (SI) {
    /* gate and up in one allocation, up's rows right after gate's, as the executor's arena lays them out
     * (so the GEMM path runs them as one GEMM: pz_cuda_mlp_one_gu) */
    pz_bf16 *dgu = up(NULL, 4 * (size_t)SI * H);
    CHECK(cudaMemcpy(dgu, shg, 2 * (size_t)SI * H, cudaMemcpyHostToDevice) == cudaSuccess);
    CHECK(cudaMemcpy(dgu + SI * H, shu, 2 * (size_t)SI * H, cudaMemcpyHostToDevice) == cudaSuccess);
    a.sh_gate = dgu;
    a.sh_up = dgu + SI * H;
    a.sh_down = up(shd, 2 * (size_t)SI * H);
  }
  float *dout = up(NULL, 4 * (size_t)m * H);
  a.out = dout;
  a.ld_out = H;
  a.workspace_bytes = pz_moe_w4a16_workspace_bytes(m, H, &p);
  a.workspace = up(NULL, a.workspace_bytes);
  CHECK_OK(pz_moe_w4a16_launch(&a, 0));
  CHECK(cudaDeviceSynchronize() == cudaSuccess);
  cudaMemcpy(gpu, dout, 4 * (size_t)m * H, cudaMemcpyDeviceToHost);
  CHECK_OK(pz_moe_w4a16_launch(&a, 0));
  CHECK(cudaDeviceSynchronize() == cudaSuccess);
  cudaMemcpy(gpu2, dout, 4 * (size_t)m * H, cudaMemcpyDeviceToHost);
  CHECK(!memcmp(gpu, gpu2, 4 * (size_t)m * H)); /* deterministic */
  double worst = 0;
  int bad = 0;
  for (int i = 0; i < m; i++) {
    double mx = 0;
    for (int64_t j = 0; j < H; j++) mx = fmax(mx, fabs(ref[i * H + j]));
    for (int64_t j = 0; j < H; j++) {
      const double e = fabs((double)gpu[i * H + j] - ref[i * H + j]);
      if (!(e <= TOL_REL * mx + 1e-6)) bad++;
      worst = fmax(worst, e / (mx + 1e-30));
    }
  }
  printf("%-28s E %3d K %d H %lld I %4lld shared %4lld m %3d: worst %.2e of the row max%s\n", name, E, K, (long long)H,
         (long long)I, (long long)SI, m, worst, bad ? "  FAIL" : "");
  if (bad) pz_test_failures++;
  if (SI && route == ROUTE_RANDOM) fork_case(&a, dout);
  dynamic_case(&a, gpu2); /* the stored layout's kernels (W4 policies without the L2 prefetch) */
  { /* the stored layout's L2 prefetch (l2pf 1, PREZERO_MOE_L2PF=1: hints only, over the same items, tail split
       included) gives the default's bits */
    pz_moe_q_args c = a;
    c.l2pf = 1;
    CHECK(cudaMemset(dout, 0xff, 4 * (size_t)m * H) == cudaSuccess);
    CHECK_OK(pz_moe_w4a16_launch(&c, 0));
    CHECK(cudaDeviceSynchronize() == cudaSuccess);
    cudaMemcpy(gpu2, dout, 4 * (size_t)m * H, cudaMemcpyDeviceToHost);
    if (memcmp(gpu, gpu2, 4 * (size_t)m * H)) {
      fprintf(stderr, "%s m %d: the stored layout's L2 prefetch changes the output\n", name, m);
      pz_test_failures++;
    }
  }
  tiled_case(&a, wg, sg, H, I, ref, gpu, dout);
  /* Argument errors (once per case is cheap). */
  pz_moe_q_args b = a;
  b.p.wquant = 0;
  CHECK_ST(pz_moe_w4a16_launch(&b, 0), PZ_ERR_INVALID_ARG);
  b = a;
  b.workspace_bytes = 16;
  CHECK_ST(pz_moe_w4a16_launch(&b, 0), PZ_ERR_INVALID_ARG);
  b = a;
  b.H = H - 16;
  b.ldx = H;
  CHECK_ST(pz_moe_w4a16_launch(&b, 0), PZ_ERR_SHAPE);
  void *dp[] = {(void *)a.x, (void *)a.ids, (void *)a.weights, (void *)a.w_gate, (void *)a.w_up, (void *)a.w_down,
                (void *)a.s_gate, (void *)a.s_up, (void *)a.s_down, (void *)a.sh_gate, (void *)a.sh_down,
                dout, a.workspace};
  for (size_t i = 0; i < sizeof dp / sizeof dp[0]; i++) cudaFree(dp[i]);
  free(wg); free(wu); free(wd); free(sg); free(su); free(sd); free(x); free(shg); free(shu); free(shd);
  free(ids); free(wts); free(ref); free(gpu); free(gpu2);
}

int main(void) {
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
    printf("no CUDA GPU: skipped\n");
    return 77;
  }
  pz_ref_set_threads(0);
  const int64_t H = 7168;
  /* Kimi-K2.5 per rank: TP 1 (I 2048), TP 2 (1024), TP 4 (512); shared expert bf16 [I, H]. */
  /* PZ_TEST_QUICK (compute-sanitizer): one batch per TP shape, fewer experts at TP 4, no m = 128 */
  const int quick = getenv("PZ_TEST_QUICK") != NULL;
  static const int ms1[] = {1, 4, 16}, ms2[] = {1, 8, 64}, ms4[] = {1, 4, 16, 128};
  const int E4 = quick ? 64 : 384;
  pz_runtime_opts ro;
  pz_runtime_opts_default(&ro);
  ro.mlp_gemm = 1;    /* PREZERO_MLP_GEMM=1: the shared experts as GEMMs at every m (fork_case) */
  ro.gemm_splits = 2; /* at most 2 split-K splits: the same bits run to run */
  CHECK_OK(pz_gemm_ctx_create_opts(&ro, &g_mlp_gemm));
  ro.mlp_one_gu = 0; /* PREZERO_MLP_ONE_GU=0 */
  CHECK_OK(pz_gemm_ctx_create_opts(&ro, &g_mlp_gemm2));
  for (int i = 0; i < (quick ? 1 : 3); i++) run_case("kimi_k25 tp1", 16, 8, H, 2048, 2048, ms1[quick ? 2 : i], ROUTE_RANDOM);
  for (int i = 0; i < (quick ? 1 : 3); i++) run_case("kimi_k25 tp2", 32, 8, H, 1024, 1024, ms2[quick ? 1 : i], ROUTE_RANDOM);
  for (int i = 0; i < (quick ? 1 : 4); i++) run_case("kimi_k25 tp4", E4, 8, H, 512, 512, ms4[quick ? 1 : i], ROUTE_RANDOM);
  run_case("kimi_k25 tp4 ties", E4, 8, H, 512, 512, quick ? 12 : 32, ROUTE_TIED);
  run_case("kimi_k25 tp4 all experts", E4, 8, H, 512, 0, quick ? 8 : 48, ROUTE_ALL);
  run_case("kimi_k25 tp4 empty slots", E4, 8, H, 512, 512, 8, ROUTE_EMPTY);
  run_case("small all experts", 8, 8, 256, 64, 0, 3, ROUTE_ALL);
  run_case("small tileable, 2 n-tiles", 8, 2, 256, 128, 0, 48, ROUTE_ALL);
  run_case("tileable, 32 tokens/expert", 8, 8, 1024, 256, 256, 32, ROUTE_TIED);
  engine_quant_case(PZ_QUANT_INT4, "int4");
  /* Kimi-K2.5 TP 1 down (56 row tiles per work item) has more items than 4 CTAs per SM: the dynamic
     schedule's claims were exercised, not only its first wave */
  /* Kimi-K2.5 TP 1 m 16 gate/up at split 2 (16 experts x 32 row tiles = 512 items on 396 slots) splits its
     last wave */
  if (g_tails == 0) {
    fprintf(stderr, "no launch split its last wave: the test did not exercise the tail split\n");
    pz_test_failures++;
  }
  if (g_claims == 0) {
    fprintf(stderr, "no dynamic-schedule launch claimed items: the test did not exercise the counter\n");
    pz_test_failures++;
  }
  pz_gemm_ctx_destroy(g_mlp_gemm);
  pz_gemm_ctx_destroy(g_mlp_gemm2);
  TEST_DONE();
}
