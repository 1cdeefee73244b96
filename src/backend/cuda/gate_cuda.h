/* Calibration of the prezero gate on a CUDA device: fills a pz_device_desc (core/gate.h) from
 * the device's properties, the fused kernel's occupancy and two short timed runs. */
#ifndef PZ_BACKEND_CUDA_GATE_CUDA_H
#define PZ_BACKEND_CUDA_GATE_CUDA_H
#include "core/gate.h"
#include "prezero.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Fills *out for `device`:
 *   num_sms      cudaDevAttrMultiProcessorCount;
 *   ctas_per_sm  pz_ar_fused_occupancy (cudaOccupancyMaxActiveBlocksPerMultiprocessor);
 *   fill_bytes_per_us_cta  num_sms fill CTAs zero 64 KiB each (f32, 16-byte stores), timed as
 *                the median of 7 replays of a 20-launch CUDA graph; rate = bytes / µs / CTAs;
 *   donor_t0_us, donor_bytes_per_us  TP=1 fused kernel without fill, same timing, at
 *                (m=1, H=2048) and (m=128, H=7168): t0 = t(1, 2048) - 2048*14 B / rate,
 *                rate = (128*7168 - 2048)*14 B / (t(128,7168) - t(1,2048)).
 *   fill_penalty_bytes_per_us  8 MiB / median over 5 alternating pairs of
 *                (t(m=128, H=7168, + 8 MiB fill) - t(m=128, H=7168)),
 *                floored at 0.02 µs of difference; max_added_us stays at the default
 *                (0.2 µs, see core/gate.h).
 * The figures include the graph's per-node launch gap, as the donor's time in a decode graph
 * does. Takes about 50 ms. PREZERO_GATE_* environment variables are not read here.
 * calibrate == 0 (PREZERO_GATE_CALIBRATE=0, read by the caller's options): no timing; the figures
 * stay pz_device_desc_default's (H200), name, num_sms and ctas_per_sm are the device's.
 * Errors: PZ_ERR_NO_DEVICE, PZ_ERR_CUDA, PZ_ERR_OOM. */
pz_status pz_gate_calibrate_cuda(int device, int calibrate, pz_device_desc *out);

#ifdef __cplusplus
}
#endif
#endif
