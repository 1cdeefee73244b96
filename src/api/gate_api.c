/* Public fill-gate API (include/prezero/gate.h) over core/gate.h and, with CUDA, the calibration
 * of backend/cuda/gate_cuda.h. */
#include "prezero/gate.h"
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "core/gate.h"
#include "core/status.h"
#ifdef PZ_HAVE_CUDA
#include "backend/cuda/gate_cuda.h"
#endif

static void to_public(const pz_device_desc *in, pz_gate_device *d) {
  memset(d, 0, sizeof *d);
  snprintf(d->name, sizeof d->name, "%s", in->name);
  d->num_sms = in->num_sms;
  d->ctas_per_sm = in->ctas_per_sm;
  d->fill_bytes_per_us_cta = in->fill_bytes_per_us_cta;
  d->donor_t0_us = in->donor_t0_us;
  d->donor_bytes_per_us = in->donor_bytes_per_us;
  d->fill_min_bytes_per_cta = in->fill_min_bytes_per_cta;
  d->fill_penalty_bytes_per_us = in->fill_penalty_bytes_per_us;
  d->max_added_us = in->max_added_us;
}

/* The internal description: the default's unmodelled fields, no overrides. */
static void to_internal(const pz_gate_device *d, pz_device_desc *o) {
  pz_device_desc_default(o);
  snprintf(o->name, sizeof o->name, "%s", d->name);
  o->num_sms = d->num_sms;
  o->ctas_per_sm = d->ctas_per_sm;
  o->fill_bytes_per_us_cta = d->fill_bytes_per_us_cta;
  o->donor_t0_us = d->donor_t0_us;
  o->donor_bytes_per_us = d->donor_bytes_per_us;
  o->fill_min_bytes_per_cta = d->fill_min_bytes_per_cta;
  o->fill_penalty_bytes_per_us = d->fill_penalty_bytes_per_us;
  o->max_added_us = d->max_added_us;
}

pz_status pz_gate_device_default(pz_gate_device *d) {
  if (!d) return pz_error(PZ_ERR_INVALID_ARG, "pz_gate_device_default: d is NULL");
  pz_device_desc in;
  pz_device_desc_default(&in);
  to_public(&in, d);
  return PZ_OK;
}

pz_status pz_gate_calibrate(int cuda_device, pz_gate_device *out) {
  if (!out || cuda_device < 0)
    return pz_error(PZ_ERR_INVALID_ARG, "pz_gate_calibrate: %s", !out ? "out is NULL" : "cuda_device is negative");
#ifdef PZ_HAVE_CUDA
  pz_device_desc in;
  PZ_CHECK(pz_gate_calibrate_cuda(cuda_device, 1, &in));
  to_public(&in, out);
  return PZ_OK;
#else
  return pz_error(PZ_ERR_UNSUPPORTED, "pz_gate_calibrate: this build has no CUDA backend; "
                  "pz_gate_device_default gives the H200 figures");
#endif
}

static pz_status check_args(const char *who, const pz_gate_device *d, int64_t m, int64_t n_total, pz_elem_type dt,
                            int64_t H, int tp, const void *out) {
  if (!d || !out) return pz_error(PZ_ERR_INVALID_ARG, "%s: %s is NULL", who, !d ? "d" : "the result pointer");
  if (dt != PZ_ELEM_F32 && dt != PZ_ELEM_BF16)
    return pz_error(PZ_ERR_DTYPE, "%s: dt %d; use PZ_ELEM_F32 or PZ_ELEM_BF16", who, (int)dt);
  if (m < 1) return pz_error(PZ_ERR_INVALID_ARG, "%s: m = %lld; need >= 1", who, (long long)m);
  if (n_total < 1) return pz_error(PZ_ERR_INVALID_ARG, "%s: n_total = %lld; need >= 1", who, (long long)n_total);
  if (H < 8 || H % 8 || H > 4 * PZ_AR_THREADS * PZ_AR_MAX_QPT)
    return pz_error(PZ_ERR_INVALID_ARG, "%s: H = %lld; need a multiple of 8 in 8..%d", who, (long long)H,
                    4 * PZ_AR_THREADS * PZ_AR_MAX_QPT);
  if (tp < 1 || tp > PZ_AR_MAX_TP) return pz_error(PZ_ERR_INVALID_ARG, "%s: tp = %d; need 1..%d", who, tp, PZ_AR_MAX_TP);
  if (d->num_sms < 1) return pz_error(PZ_ERR_INVALID_ARG, "%s: num_sms = %d; need >= 1", who, d->num_sms);
  /* The figures of d as gate.h documents them (NaN, infinite or non-positive rates gave made-up answers). */
  const struct { const char *name; double v, lo; int open; } f[] = {
      {"fill_bytes_per_us_cta", d->fill_bytes_per_us_cta, 0, 1}, {"donor_bytes_per_us", d->donor_bytes_per_us, 0, 1},
      {"donor_t0_us", d->donor_t0_us, 0, 0}, {"max_added_us", d->max_added_us, 0, 0},
      {"fill_penalty_bytes_per_us", d->fill_penalty_bytes_per_us, -HUGE_VAL, 0}};
  for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
    if (!isfinite(f[i].v) || (f[i].open ? f[i].v <= f[i].lo : f[i].v < f[i].lo))
      return pz_error(PZ_ERR_INVALID_ARG, "%s: d->%s = %g; need a finite value%s (pz_gate_device_default or "
                      "pz_gate_calibrate fill it)", who, f[i].name, f[i].v,
                      f[i].lo == 0 ? (f[i].open ? " > 0" : " >= 0") : "");
  if (d->fill_min_bytes_per_cta < 1)
    return pz_error(PZ_ERR_INVALID_ARG, "%s: d->fill_min_bytes_per_cta = %lld; need >= 1 (16384 by default)", who,
                    (long long)d->fill_min_bytes_per_cta);
  if (m > ((int64_t)1 << 40) / n_total)
    return pz_error(PZ_ERR_INVALID_ARG, "%s: m * n_total above 2^40 elements", who);
  return PZ_OK;
}

pz_status pz_gate_is_free(const pz_gate_device *d, int64_t m, int64_t n_total, pz_elem_type dt, int64_t H, int tp,
                          int *is_free) {
  PZ_CHECK(check_args("pz_gate_is_free", d, m, n_total, dt, H, tp, is_free));
  pz_device_desc in;
  to_internal(d, &in);
  *is_free = pz_is_prezero_free(m, n_total, dt == PZ_ELEM_F32 ? PZ_F32 : PZ_BF16, H, tp, &in) ? 1 : 0;
  return PZ_OK;
}

pz_status pz_gate_estimate_for(const pz_gate_device *d, int64_t m, int64_t n_total, pz_elem_type dt, int64_t H,
                               int tp, pz_gate_estimate *out) {
  PZ_CHECK(check_args("pz_gate_estimate_for", d, m, n_total, dt, H, tp, out));
  pz_device_desc in;
  to_internal(d, &in);
  pz_dtype idt = dt == PZ_ELEM_F32 ? PZ_F32 : PZ_BF16;
  memset(out, 0, sizeof *out);
  out->slots = (int64_t)in.num_sms * (in.ctas_per_sm > 0 ? in.ctas_per_sm : 1);
  out->fill_bytes = m * n_total * (int64_t)pz_dtype_size(idt);
  out->is_free = pz_is_prezero_free(m, n_total, idt, H, tp, &in) ? 1 : 0;
  if (in.ctas_per_sm <= 0) return PZ_OK;
  pz_ar_plan p;
  if (!pz_ar_plan_for_dev(m, H, tp, &in, &p))
    return pz_error(PZ_ERR_INVALID_ARG, "pz_gate_estimate_for: no donor launch for m=%lld H=%lld tp=%d",
                    (long long)m, (long long)H, tp);
  out->donor_ctas = p.donor_ctas;
  out->fill_ctas = pz_ar_plan_fill_ctas(&in, &p, out->fill_bytes);
  double rate = in.fill_bytes_per_us_cta > 0 ? in.fill_bytes_per_us_cta : 1.0;
  out->fill_us = out->fill_ctas > 0 ? (double)out->fill_bytes / ((double)out->fill_ctas * rate) : 0.0;
  out->donor_us = pz_ar_donor_us(&in, m, H);
  out->added_us = in.fill_penalty_bytes_per_us > 0 ? (double)out->fill_bytes / in.fill_penalty_bytes_per_us : 0.0;
  return PZ_OK;
}
