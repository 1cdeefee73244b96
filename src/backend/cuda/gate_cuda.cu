/* Gate calibration on the device (gate_cuda.h): occupancy, fill rate, donor time model. */
extern "C" {
#include "core/status.h" /* C header without C++ guards */
}
#include <stdlib.h>
#include <string.h>
#include "backend/cuda/ar_fused.h"
#include "backend/cuda/comm.h"
#include "backend/cuda/cuda_util.h"
#include "backend/cuda/gate_cuda.h"
#include "core/stats.h"

namespace {

/* Median µs per launch of a 20-launch graph that `enqueue` records (pz_median of 7 replays). */
template <class F>
pz_status time_graph(cudaStream_t s, F enqueue, float *us) {
  const int iters = 20, reps = 7;
  cudaGraph_t g = nullptr;
  cudaGraphExec_t ge = nullptr;
  cudaEvent_t e0 = nullptr, e1 = nullptr;
  double t[reps];
  pz_status st = PZ_OK;
  PZ_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < iters && st == PZ_OK; i++) st = enqueue();
  PZ_CUDA_KEEP(cudaStreamEndCapture(s, &g), st); /* the capture is ended even after a failed enqueue */
  if (st != PZ_OK) goto done;
  PZ_CUDA_CHECK_GOTO(cudaGraphInstantiate(&ge, g, 0), st, done);
  PZ_CUDA_CHECK_GOTO(cudaEventCreate(&e0), st, done);
  PZ_CUDA_CHECK_GOTO(cudaEventCreate(&e1), st, done);
  PZ_CUDA_CHECK_GOTO(cudaGraphLaunch(ge, s), st, done); /* warm-up */
  for (int r = 0; r < reps; r++) {
    float ms = 0;
    PZ_CUDA_CHECK_GOTO(cudaEventRecord(e0, s), st, done);
    PZ_CUDA_CHECK_GOTO(cudaGraphLaunch(ge, s), st, done);
    PZ_CUDA_CHECK_GOTO(cudaEventRecord(e1, s), st, done);
    PZ_CUDA_CHECK_GOTO(cudaEventSynchronize(e1), st, done);
    PZ_CUDA_CHECK_GOTO(cudaEventElapsedTime(&ms, e0, e1), st, done);
    t[r] = ms;
  }
  *us = (float)pz_median(t, reps) * 1000.0f / iters; /* odd reps: the middle float itself */
done:
  /* Cleanup: failures here are ignored on purpose (st says how the timing went). */
  if (e0) PZ_CUDA_IGNORE(cudaEventDestroy(e0));
  if (e1) PZ_CUDA_IGNORE(cudaEventDestroy(e1));
  if (ge) PZ_CUDA_IGNORE(cudaGraphExecDestroy(ge));
  if (g) PZ_CUDA_IGNORE(cudaGraphDestroy(g));
  return st;
}

} // namespace

extern "C" pz_status pz_gate_calibrate_cuda(int device, int calibrate, pz_device_desc *out) {
  pz_device_desc_default(out);
  int ndev = 0;
  if (!PZ_CUDA_PROBE(cudaGetDeviceCount(&ndev)) || device < 0 || device >= ndev)
    return pz_error(PZ_ERR_NO_DEVICE, "fill-gate calibration: no CUDA device %d", device);
  PZ_CUDA_CHECK(cudaSetDevice(device));
  cudaDeviceProp prop;
  PZ_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  snprintf(out->name, sizeof out->name, "%s", prop.name);
  out->num_sms = prop.multiProcessorCount;
  PZ_CHECK(pz_ar_fused_occupancy(device, &out->ctas_per_sm));
  if (calibrate == 0) return PZ_OK; /* the H200 figures of pz_device_desc_default */

  const int64_t fill_cols = 16384; /* 64 KiB of f32 per row: one row per fill CTA */
  const int64_t Hmax = 7168, mmax = 128;
  float *fill = nullptr, *part = nullptr, *res = nullptr;
  pz_bf16 *w = nullptr, *x = nullptr;
  cudaStream_t s = nullptr;
  pz_comm *c = nullptr;
  pz_status st = PZ_OK;
  float t_fill = 0, t_small = 0, t_big = 0, t_a = 0, t_b = 0;
  pz_comm_config cc = PZ_COMM_CONFIG_INIT;
  cc.tp = 1;
  cc.devices[0] = device;
  cc.max_m = mmax;
  cc.max_H = Hmax;
#define CK(call) PZ_CUDA_CHECK_MSG_GOTO(call, st, done, "fill-gate calibration")
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CK(cudaMalloc(&fill, (size_t)out->num_sms * fill_cols * 4));
  CK(cudaMalloc(&part, (size_t)mmax * Hmax * 4));
  CK(cudaMalloc(&res, (size_t)mmax * Hmax * 4));
  CK(cudaMalloc(&w, (size_t)Hmax * 2));
  CK(cudaMalloc(&x, (size_t)mmax * Hmax * 2));
  CK(cudaMemset(part, 0x3c, (size_t)mmax * Hmax * 4)); /* small positive floats, not zeros */
  CK(cudaMemset(res, 0x3c, (size_t)mmax * Hmax * 4));
  CK(cudaMemset(w, 0x3f, (size_t)Hmax * 2));
  CK(cudaDeviceSynchronize());
  PZ_CHECK_GOTO(pz_comm_create(&cc, &c), st, done);
  {
    pz_zero_fill zf = {fill, fill_cols, fill_cols, fill_cols, PZ_F32};
    int n = out->num_sms;
    PZ_CHECK_GOTO(time_graph(s, [&]() { return pz_zero_fill_launch(&zf, n, fill_cols, n, s); }, &t_fill), st, done);
    pz_ar_rmsnorm_args a;
    memset(&a, 0, sizeof a);
    a.partial = part; a.residual_in = res; a.residual_out = res; a.weight = w; a.x_norm = x;
    a.eps = 1e-6f;
    a.m = 1; a.H = 2048; a.ld_partial = a.ld_res = a.ld_x = 2048;
    PZ_CHECK_GOTO(time_graph(s, [&]() { return pz_ar_rmsnorm_launch(c, 0, &a, out, s); }, &t_small), st, done);
    a.m = mmax; a.H = Hmax; a.ld_partial = a.ld_res = a.ld_x = Hmax;
    PZ_CHECK_GOTO(time_graph(s, [&]() { return pz_ar_rmsnorm_launch(c, 0, &a, out, s); }, &t_big), st, done);
    /* Penalty: m=128, H=7168 with and without an 8 MiB fill (128 rows x 16384 f32). The fill
     * CTA count uses the rate just measured. */
    out->fill_bytes_per_us_cta = (double)out->num_sms * fill_cols * 4 / t_fill / out->num_sms;
    a.m = 128;
    /* Five alternating pairs; the median difference (one pair varied by +-25% run to run). */
    double diffs[5];
    for (int i = 0; i < 5; i++) {
      a.fill.ptr = nullptr;
      a.fill_all = false;
      PZ_CHECK_GOTO(time_graph(s, [&]() { return pz_ar_rmsnorm_launch(c, 0, &a, out, s); }, &t_a), st, done);
      a.fill = zf;
      a.fill_all = true;
      PZ_CHECK_GOTO(time_graph(s, [&]() { return pz_ar_rmsnorm_launch(c, 0, &a, out, s); }, &t_b), st, done);
      diffs[i] = t_b - t_a;
    }
    t_b = t_a + (float)pz_median(diffs, 5); /* odd count: the middle difference itself */
  }
  {
    double fill_bytes = (double)out->num_sms * fill_cols * 4;
    out->fill_bytes_per_us_cta = fill_bytes / t_fill / out->num_sms;
    double b_small = 2048.0 * 14, b_big = (double)mmax * Hmax * 14;
    double dt = t_big - t_small;
    out->donor_bytes_per_us = dt > 0.05 ? (b_big - b_small) / dt : 2.0e6;
    out->donor_t0_us = t_small - b_small / out->donor_bytes_per_us;
    if (out->donor_t0_us < 0) out->donor_t0_us = 0;
    double added = t_b - t_a;
    out->fill_penalty_bytes_per_us = 128.0 * fill_cols * 4 / (added > 0.02 ? added : 0.02);
  }
done:
#undef CK
  if (c) pz_comm_destroy(c);
  /* Cleanup: failures here are ignored on purpose (st says how the calibration went). */
  PZ_CUDA_IGNORE(cudaSetDevice(device));
  if (s) PZ_CUDA_IGNORE(cudaStreamDestroy(s));
  PZ_CUDA_IGNORE(cudaFree(fill)); PZ_CUDA_IGNORE(cudaFree(part)); PZ_CUDA_IGNORE(cudaFree(res));
  PZ_CUDA_IGNORE(cudaFree(w)); PZ_CUDA_IGNORE(cudaFree(x));
  return st;
}
