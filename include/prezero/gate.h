/* prezero public C11 API: the fill gate. Before the split-K GEMMs that follow it, the fused
 * all-reduce + residual + RMSNorm kernel (the donor) can zero those GEMMs' output buffer with
 * extra CTAs in its idle SMs (zero_fill). The gate decides, per batch size, whether that fill is
 * free: it fits beside the donor's own CTAs in one wave, ends within the donor's time, and its
 * memory traffic adds at most max_added_us to the donor.
 *
 * All functions are pure arithmetic over a pz_gate_device (no device access) except
 * pz_gate_calibrate. Units: m in tokens (rows), n_total in columns (elements), H (hidden_size) in
 * elements, bytes, µs. Every call returns a pz_status; pz_last_error() has the message. */
#ifndef PREZERO_GATE_H
#define PREZERO_GATE_H
#include <stdint.h>
#include "prezero/common.h"
#ifdef __cplusplus
extern "C" {
#endif

/* What the gate knows of the GPU and of the donor kernel. */
typedef struct pz_gate_device {
  char name[64];                    /* device name (informational) */
  int num_sms;                      /* multiprocessors, >= 1 */
  int ctas_per_sm;                  /* resident donor/fill CTAs per SM (occupancy of the fused
                                       kernel, 512 threads per CTA); <= 0 selects the original
                                       one-CTA-per-token gate: m + ceil(bytes / (8*roundup(H/8,32)
                                       elements)) < num_sms */
  double fill_bytes_per_us_cta;     /* bytes one fill CTA zeroes per µs, > 0 */
  double donor_t0_us;               /* donor time model: t(m, H) = donor_t0_us +              */
  double donor_bytes_per_us;        /*   m*H*14 bytes / donor_bytes_per_us (µs; a lower bound) */
  int64_t fill_min_bytes_per_cta;   /* a fill CTA gets at least this many bytes (16384) */
  double fill_penalty_bytes_per_us; /* fill bytes per µs the fill adds to the donor's time
                                       (memory-system share); <= 0: not modelled */
  double max_added_us;              /* most the fill may add to the donor by that estimate, µs */
} pz_gate_device;

/* The gate's arithmetic for one (m, n_total, dtype, H, tp), as pz_gate_estimate returns it. */
typedef struct pz_gate_estimate {
  int64_t slots;        /* num_sms * ctas_per_sm: CTAs of one wave */
  int64_t donor_ctas;   /* CTAs of the donor launch that really runs for (m, H, tp) */
  int64_t fill_bytes;   /* m * n_total * element size */
  int64_t fill_ctas;    /* fill CTAs the donor launches beside its own (0 when fill_bytes is 0) */
  double fill_us;       /* fill_bytes / (fill_ctas * fill_bytes_per_us_cta) */
  double donor_us;      /* donor_t0_us + m*H*14 / donor_bytes_per_us */
  double added_us;      /* fill_bytes / fill_penalty_bytes_per_us (0 when not modelled) */
  int is_free;          /* pz_gate_is_free's answer */
} pz_gate_estimate;

/* The figures of one NVIDIA H200 (132 SMs x 2 CTAs, fill 18900 B/µs per CTA, donor 2.29 µs +
 * m*H*14 B / 4.9e6 B/µs, penalty 6.1e6 B/µs, at most 0.2 µs added), what the CPU backend and
 * `prezero plan` use without a GPU. Errors: PZ_ERR_INVALID_ARG (d NULL). */
PZ_API pz_status pz_gate_device_default(pz_gate_device *d);

/* Measures *out on CUDA device `cuda_device` (0-based): SM count, the fused kernel's occupancy,
 * fill and donor rates and the fill penalty, timed in CUDA graphs on that device (about 50 ms;
 * allocates and frees its own buffers; reads no environment). Errors: PZ_ERR_INVALID_ARG (out
 * NULL, cuda_device < 0), PZ_ERR_NO_DEVICE, PZ_ERR_CUDA, PZ_ERR_OOM, PZ_ERR_UNSUPPORTED (a build
 * without the CUDA backend). */
PZ_API pz_status pz_gate_calibrate(int cuda_device, pz_gate_device *out);

/* *is_free = 1 when zeroing the whole [m, n_total] buffer of element type dt (PZ_ELEM_F32 or
 * PZ_ELEM_BF16) beside the donor of batch m, hidden size H, TP degree tp is free on d, else 0.
 * m >= 1 tokens; n_total >= 1 columns; H a multiple of 8, 8..16384 elements; tp 1..8.
 * Errors: PZ_ERR_INVALID_ARG (NULL pointer, a value out of those ranges, num_sms < 1, a figure of
 * d that is NaN or infinite, fill_bytes_per_us_cta or donor_bytes_per_us <= 0, donor_t0_us or
 * max_added_us < 0, fill_min_bytes_per_cta < 1), PZ_ERR_DTYPE (dt). */
PZ_API pz_status pz_gate_is_free(const pz_gate_device *d, int64_t m, int64_t n_total, pz_elem_type dt, int64_t H,
                                 int tp, int *is_free);

/* The numbers behind pz_gate_is_free (same arguments and errors), for plans and logs. With
 * ctas_per_sm <= 0 (the original gate) only slots, fill_bytes and is_free are filled. */
PZ_API pz_status pz_gate_estimate_for(const pz_gate_device *d, int64_t m, int64_t n_total, pz_elem_type dt,
                                      int64_t H, int tp, pz_gate_estimate *out);

#ifdef __cplusplus
}
#endif
#endif /* PREZERO_GATE_H */
