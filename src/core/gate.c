/* is_prezero_free / prezero_active (see gate.h for the rule and its source). */
#include "core/gate.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void pz_device_desc_default(pz_device_desc *d) {
  memset(d, 0, sizeof *d);
  snprintf(d->name, sizeof d->name, "default (H200-like)");
  d->num_sms = 132;
  d->donor_ctas_per_sm = 1;
  d->fill_ctas_per_sm = 1;
  d->donor_rows_per_cta = 1;
  d->fill_bytes_per_cta = 0; /* 0: derive from H, as the original gate does */
}

bool pz_is_prezero_free(int64_t m, int64_t n_total, pz_dtype dt, int64_t H, int tp,
                        const pz_device_desc *dev) {
  if (m <= 0 || n_total <= 0 || !dev || dev->num_sms <= 0) return false;
  int64_t rows = dev->donor_rows_per_cta > 0 ? dev->donor_rows_per_cta : 1;
  int64_t donor = (m + rows - 1) / rows;
  /* Original gate (DESIGN.md §8): one fill CTA clears 8*roundup(H/8, 32) elements. */
  int64_t per_cta = dev->fill_bytes_per_cta > 0
                        ? dev->fill_bytes_per_cta
                        : 8 * ((H / 8 + 31) / 32 * 32) * (int64_t)pz_dtype_size(dt);
  int64_t bytes = m * n_total * (int64_t)pz_dtype_size(dt);
  int64_t fill = (bytes + per_cta - 1) / per_cta;
  int per_sm = dev->donor_ctas_per_sm < dev->fill_ctas_per_sm ? dev->donor_ctas_per_sm : dev->fill_ctas_per_sm;
  if (per_sm < 1) per_sm = 1;
  (void)tp;
  return donor + fill <= (int64_t)dev->num_sms * per_sm;
}

bool pz_prezero_active(int64_t m, int64_t n_total, pz_dtype dt, int64_t H, int tp,
                       const pz_device_desc *dev) {
  const char *f = getenv("PREZERO_FORCE_GATE");
  if (f && strcmp(f, "on") == 0) return true;
  if (f && strcmp(f, "off") == 0) return false;
  return pz_is_prezero_free(m, n_total, dt, H, tp, dev);
}
