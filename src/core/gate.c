/* is_prezero_free / prezero_active and the donor's launch plan (see gate.h for the rule,
 * its units and the source of each constant). Plain C: the CPU backend uses it too. */
#include "core/gate.h"
#include "core/options.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void pz_device_desc_default(pz_device_desc *d) {
  memset(d, 0, sizeof *d);
  snprintf(d->name, sizeof d->name, "default (H200)");
  d->num_sms = 132;
  /* Measured on one H200 by pz_gate_calibrate_cuda (bench/results/ar_h200_tp1.md). */
  d->ctas_per_sm = 2;
  d->fill_bytes_per_us_cta = 18900.0;
  d->donor_t0_us = 2.29;
  d->donor_bytes_per_us = 4.9e6;
  d->fill_min_bytes_per_cta = 16384;
  d->fill_penalty_bytes_per_us = 6.1e6; /* median of 5 calibrations: 4.4e6 .. 7.1e6 */
  d->max_added_us = 0.2;
  d->donor_ctas_per_sm = 1;
  d->fill_ctas_per_sm = 1;
  d->donor_rows_per_cta = 1;
  d->fill_bytes_per_cta = 0;
}

void pz_device_desc_apply_opts(pz_device_desc *d, const pz_runtime_opts *o) {
  if (!d || !o) return;
  /* Only the options that are set; d's own overrides stay otherwise. */
  if (o->force_gate >= 0) d->force_gate = o->force_gate ? 1 : 2;
  if (o->ar_proto >= 0) d->ar_proto = o->ar_proto + 1;
  if (o->ar_cluster >= 0) d->ar_cluster = o->ar_cluster ? 2 : 1;
  if (o->ar_ctas_per_row > 0) d->ar_ctas_per_row = o->ar_ctas_per_row;
}

/* a / b rounded up for a >= 0, b > 0, without forming a + b - 1 (b may be near INT64_MAX: a caller's
 * fill_min_bytes_per_cta) */
static int64_t ceil_div(int64_t a, int64_t b) { return a / b + (a % b != 0); }

bool pz_ar_plan_for(int64_t m, int64_t H, int tp, pz_ar_plan *out) { return pz_ar_plan_for_dev(m, H, tp, NULL, out); }

bool pz_ar_plan_for_dev(int64_t m, int64_t H, int tp, const pz_device_desc *dev, pz_ar_plan *out) {
  memset(out, 0, sizeof *out);
  if (m <= 0 || H <= 0 || H % 8 != 0 || H > 4 * PZ_AR_THREADS * PZ_AR_MAX_QPT || tp < 1 ||
      tp > PZ_AR_MAX_TP)
    return false;
  int k = 1, proto = PZ_AR_PROTO_LL;
  if (tp >= 2) {
    /* From the 2xH200 sweep (bench/results/ar_h200x2_tp2.md, LL/flag x K=1,2,4,8): small
     * batches want about 8 KiB of row per CTA, m <= 16 about 16 KiB, larger batches two CTAs
     * per row when the row is >= 16 KiB; K rounded up to a power of two; at most 128 donor
     * CTAs (one per SM on any GPU with >= 128 SMs). LL up to PZ_AR_LL_MAX_BYTES of partial
     * per rank, the flag protocol above. */
    int64_t row_bytes = 4 * H;
    int64_t want = m <= 4 ? ceil_div(row_bytes, 8192) : m <= 16 ? ceil_div(row_bytes, 16384) : row_bytes >= 16384 ? 2 : 1;
    int64_t kk = 1;
    while (kk < want) kk *= 2; /* powers of two: K=3 ran slower than K=4 at H=5120, m <= 4 */
    while (kk > 1 && m * kk > 128) kk /= 2;
    k = (int)(kk > 8 ? 8 : kk);
    proto = m * H * 4 <= PZ_AR_LL_MAX_BYTES ? PZ_AR_PROTO_LL : PZ_AR_PROTO_FLAG;
  }
  if (dev && dev->ar_proto == 1) proto = PZ_AR_PROTO_LL;
  if (dev && dev->ar_proto == 2) proto = PZ_AR_PROTO_FLAG;
  /* Thread-block clusters (DSMEM sum of squares): by default only at TP=1 with rows of at
   * least 6144 elements, where the H200 sweep (bench/results/ar_h200_tp1_cluster.md) showed
   * K=8 (m <= 8) / K=4 (m <= 16) clusters 0.3-0.5 µs faster than one CTA per row; at TP >= 2
   * they were slower (ar_h200x2_tp2_cluster.md). PREZERO_AR_CLUSTER=1 forces them wherever
   * K is 2..8, =0 turns them off (TP=1 then uses one CTA per row). */
  int cl_mode = dev && dev->ar_cluster ? dev->ar_cluster - 1 : -1; /* -1 default, 0 never, 1 forced */
  bool tp1_cluster = tp == 1 && cl_mode != 0 && H >= 6144 && m <= 16;
  if (tp1_cluster) k = m <= 8 ? 8 : 4;
  if (dev && dev->ar_ctas_per_row >= 1 && dev->ar_ctas_per_row <= 16) {
    k = dev->ar_ctas_per_row;
    tp1_cluster = false; /* an explicit K uses clusters only with PREZERO_AR_CLUSTER=1 */
  }
  int64_t quads = H / 4;
  if (k > quads) k = (int)quads;
  int64_t slice = ceil_div(quads, k);
  int qpt = (int)ceil_div(slice, PZ_AR_THREADS);
  /* The kernel is instantiated for 1, 2, 4 and 8 quads per thread. */
  qpt = qpt <= 1 ? 1 : qpt <= 2 ? 2 : qpt <= 4 ? 4 : 8;
  bool use_cluster = k >= 2 && k <= 8 && (cl_mode == 1 || tp1_cluster);
  out->cluster = use_cluster ? k : 1;
  out->proto = proto;
  out->ctas_per_row = k;
  out->donor_ctas = m * k;
  out->quads_per_thread = qpt;
  out->slice_quads = slice;
  return true;
}

int64_t pz_ar_fill_ctas(const pz_device_desc *dev, int64_t donor_ctas, int64_t bytes) {
  if (bytes <= 0) return 0;
  int64_t min_b = dev->fill_min_bytes_per_cta > 0 ? dev->fill_min_bytes_per_cta : 16384;
  int64_t want = ceil_div(bytes, min_b);
  int64_t spare = (int64_t)dev->num_sms * (dev->ctas_per_sm > 0 ? dev->ctas_per_sm : 1) - donor_ctas;
  int64_t n = want < spare ? want : spare;
  return n < 1 ? 1 : n;
}

int64_t pz_ar_plan_fill_ctas(const pz_device_desc *dev, const pz_ar_plan *p, int64_t bytes) {
  int64_t n = pz_ar_fill_ctas(dev, p->donor_ctas, bytes);
  int64_t g = p->cluster > 1 ? p->cluster : 1;
  if (n <= 0 || g == 1) return n;
  return n / g >= 1 ? n / g * g : g;
}

double pz_ar_fill_us(const pz_device_desc *dev, int64_t donor_ctas, int64_t bytes) {
  int64_t n = pz_ar_fill_ctas(dev, donor_ctas, bytes);
  if (n <= 0) return 0.0;
  double rate = dev->fill_bytes_per_us_cta > 0 ? dev->fill_bytes_per_us_cta : 1.0;
  return (double)bytes / ((double)n * rate);
}

double pz_ar_donor_us(const pz_device_desc *dev, int64_t m, int64_t H) {
  double rate = dev->donor_bytes_per_us > 0 ? dev->donor_bytes_per_us : 1.0;
  return dev->donor_t0_us + (double)m * (double)H * 14.0 / rate;
}

bool pz_is_prezero_free(int64_t m, int64_t n_total, pz_dtype dt, int64_t H, int tp,
                        const pz_device_desc *dev) {
  if (m <= 0 || n_total <= 0 || !dev || dev->num_sms <= 0) return false;
  int64_t bytes = m * n_total * (int64_t)pz_dtype_size(dt);
  if (dev->ctas_per_sm <= 0) {
    /* Original gate (docs/ARCHITECTURE.md §8): one CTA per token; one fill CTA clears 8*roundup(H/8, 32)
     * elements. Kept for descriptions that carry no calibration. */
    int64_t per_cta = 8 * ceil_div(H / 8, 32) * 32 * (int64_t)pz_dtype_size(dt);
    if (per_cta <= 0) return false;
    return m + ceil_div(bytes, per_cta) < dev->num_sms;
  }
  pz_ar_plan p;
  if (!pz_ar_plan_for_dev(m, H, tp, dev, &p)) return false;
  int64_t slots = (int64_t)dev->num_sms * dev->ctas_per_sm;
  int64_t fill = pz_ar_plan_fill_ctas(dev, &p, bytes);
  if (p.donor_ctas + fill > slots) return false;
  if (dev->fill_penalty_bytes_per_us > 0 && (double)bytes / dev->fill_penalty_bytes_per_us > dev->max_added_us)
    return false;
  double rate = dev->fill_bytes_per_us_cta > 0 ? dev->fill_bytes_per_us_cta : 1.0;
  return (double)bytes / ((double)fill * rate) <= pz_ar_donor_us(dev, m, H);
}

bool pz_prezero_active(int64_t m, int64_t n_total, pz_dtype dt, int64_t H, int tp,
                       const pz_device_desc *dev) {
  if (dev && dev->force_gate == 1) return true;
  if (dev && dev->force_gate == 2) return false;
  return pz_is_prezero_free(m, n_total, dt, H, tp, dev);
}
