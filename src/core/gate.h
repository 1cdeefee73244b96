/* The prezero gate: is_prezero_free() decides, per batch size m, whether the donor's
 * zero-fill CTAs fit beside its own CTAs in one wave of the device's SMs without lengthening
 * its critical path; prezero_active() adds the environment override. */
#ifndef PZ_CORE_GATE_H
#define PZ_CORE_GATE_H
#include <stdbool.h>
#include <stdint.h>
#include "core/dtype.h"

/* What the gate knows of the device and of the donor kernel's launch configuration.
 * The CUDA backend fills it by calibration (SM count, occupancy, measured fill rate);
 * the CPU backend uses pz_device_desc_default() (H200 figures, DESIGN.md §7). */
typedef struct pz_device_desc {
  char name[64];
  int num_sms;              /* multiprocessors */
  int donor_ctas_per_sm;    /* resident donor CTAs per SM (occupancy) */
  int fill_ctas_per_sm;     /* resident fill CTAs per SM */
  int donor_rows_per_cta;   /* tokens handled per donor CTA (1 for the one-shot kernel) */
  int64_t fill_bytes_per_cta; /* bytes one fill CTA zeroes in the donor's own time */
} pz_device_desc;

/* H200-like defaults: 132 SMs, 1 donor CTA per token, fill CTA clears as many bytes as
 * one donor row of H fp32 rounded to 32*8 elements (the original gate's arithmetic). */
void pz_device_desc_default(pz_device_desc *d);

/* True when donor CTAs + fill CTAs fit in one wave:
 *   donor = ceil(m / donor_rows_per_cta) (+ the same for every rank: grid depends on m,H,tp only)
 *   fill  = ceil(m * n_total * sizeof(dtype) / fill_bytes_per_cta)
 *   donor + fill <= num_sms * min(donor_ctas_per_sm, fill_ctas_per_sm)
 * Units: m tokens, n_total columns, H elements. Pure function of its arguments. */
bool pz_is_prezero_free(int64_t m, int64_t n_total, pz_dtype dt, int64_t H, int tp,
                        const pz_device_desc *dev);

/* prezero_active(m): the gate's answer for this batch, unless PREZERO_FORCE_GATE=on|off
 * overrides it (for tests). Evaluated per step / per captured batch size. */
bool pz_prezero_active(int64_t m, int64_t n_total, pz_dtype dt, int64_t H, int tp,
                       const pz_device_desc *dev);
#endif
