/* CPU test of the prezero gate arithmetic and the donor launch plan, against hand-computed
 * cases (the numbers in the comments are worked out by hand from gate.h's rule). */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "core/gate.h"
#include "prezero.h"
#include "core/options.h"
#include "pz_test.h"

static pz_device_desc desc(int sms, int per_sm, double fill_rate) {
  pz_device_desc d;
  pz_device_desc_default(&d);
  d.num_sms = sms;
  d.ctas_per_sm = per_sm;
  d.fill_bytes_per_us_cta = fill_rate;
  d.donor_t0_us = 2.0;
  d.donor_bytes_per_us = 2.0e6;
  d.fill_min_bytes_per_cta = 16384;
  d.fill_penalty_bytes_per_us = 0; /* penalty term off unless a case sets it */
  d.max_added_us = 0.3;
  return d;
}

int main(void) {
  unsetenv("PREZERO_AR_CTAS_PER_ROW");
  unsetenv("PREZERO_AR_CLUSTER");
  unsetenv("PREZERO_FORCE_GATE");
  const int64_t n_kimi_tp2 = 2112 + 32 * 192 + 7168; /* 15424 columns */

  /* Plan at tp >= 2 (row = 4H bytes): K = ceil(row/8 KiB) for m <= 4, ceil(row/16 KiB) for
   * m <= 16, else 2 when row >= 16 KiB; rounded up to a power of two; m*K <= 128; LL while m*H*4 <= 32*5120*4 bytes, flag
   * protocol above. tp = 1: K = 1. */
  unsetenv("PREZERO_AR_PROTO");
  pz_ar_plan p;
  CHECK(pz_ar_plan_for(1, 7168, 2, &p));   /* 28672 B -> ceil(3.5) = 4 */
  CHECK(p.ctas_per_row == 4 && p.donor_ctas == 4 && p.slice_quads == 448 && p.quads_per_thread == 1 &&
        p.proto == PZ_AR_PROTO_LL);
  CHECK(pz_ar_plan_for(4, 5120, 2, &p) && p.ctas_per_row == 4 && p.slice_quads == 320); /* ceil(2.5) -> 4 */
  CHECK(pz_ar_plan_for(4, 6144, 2, &p) && p.ctas_per_row == 4);                          /* exactly 3 -> 4 */
  CHECK(pz_ar_plan_for(64, 7168, 2, &p) && p.ctas_per_row == 2 && p.donor_ctas == 128);
  CHECK(pz_ar_plan_for(8, 7168, 2, &p));   /* ceil(28672/16384) = 2 */
  CHECK(p.ctas_per_row == 2 && p.donor_ctas == 16 && p.slice_quads == 896 && p.quads_per_thread == 2);
  CHECK(pz_ar_plan_for(16, 2048, 2, &p) && p.ctas_per_row == 1 && p.proto == PZ_AR_PROTO_LL);
  CHECK(pz_ar_plan_for(16, 7168, 2, &p) && p.ctas_per_row == 2 && p.donor_ctas == 32 && p.proto == PZ_AR_PROTO_LL);
  CHECK(pz_ar_plan_for(32, 5120, 2, &p) && p.proto == PZ_AR_PROTO_LL && p.ctas_per_row == 2);
  CHECK(pz_ar_plan_for(32, 7168, 2, &p) && p.proto == PZ_AR_PROTO_FLAG && p.donor_ctas == 64);
  CHECK(pz_ar_plan_for(64, 2048, 2, &p) && p.proto == PZ_AR_PROTO_LL && p.ctas_per_row == 1);
  CHECK(pz_ar_plan_for(128, 7168, 2, &p));  /* 128*2 > 128 -> K = 1 */
  CHECK(p.ctas_per_row == 1 && p.donor_ctas == 128 && p.slice_quads == 1792 && p.quads_per_thread == 4 &&
        p.proto == PZ_AR_PROTO_FLAG);
  /* Overrides travel in the device description (PREZERO_AR_* through the options reader). */
  pz_device_desc ov;
  memset(&ov, 0, sizeof ov);
  ov.ar_proto = 1; /* ll */
  CHECK(pz_ar_plan_for_dev(128, 7168, 2, &ov, &p) && p.proto == PZ_AR_PROTO_LL);
  ov.ar_proto = 2; /* flag */
  CHECK(pz_ar_plan_for_dev(1, 7168, 2, &ov, &p) && p.proto == PZ_AR_PROTO_FLAG);
  ov.ar_proto = 0;
  CHECK(pz_ar_plan_for(8, 5120, 1, &p));
  CHECK(p.ctas_per_row == 1 && p.donor_ctas == 8 && p.slice_quads == 1280 && p.quads_per_thread == 4);
  /* TP=1, H >= 6144: clusters of 8 (m <= 8) or 4 (m <= 16), else one CTA per row. */
  CHECK(pz_ar_plan_for(8, 7168, 1, &p) && p.ctas_per_row == 8 && p.cluster == 8 && p.donor_ctas == 64 &&
        p.slice_quads == 224 && p.quads_per_thread == 1);
  CHECK(pz_ar_plan_for(16, 7168, 1, &p) && p.ctas_per_row == 4 && p.cluster == 4 && p.donor_ctas == 64);
  CHECK(pz_ar_plan_for(17, 7168, 1, &p) && p.ctas_per_row == 1 && p.cluster == 1);
  ov.ar_cluster = 1; /* never (PREZERO_AR_CLUSTER=0) */
  CHECK(pz_ar_plan_for_dev(8, 7168, 1, &ov, &p) && p.ctas_per_row == 1 && p.cluster == 1);
  ov.ar_cluster = 0;
  ov.ar_ctas_per_row = 3; /* explicit K: no cluster unless asked */
  CHECK(pz_ar_plan_for_dev(8, 7168, 1, &ov, &p) && p.ctas_per_row == 3 && p.cluster == 1);
  ov.ar_ctas_per_row = 0;
  CHECK(pz_ar_plan_for(20, 16384, 1, &p) && p.quads_per_thread == 8 && p.cluster == 1);
  CHECK(!pz_ar_plan_for(1, 7004, 2, &p));   /* not a multiple of 8 */
  CHECK(!pz_ar_plan_for(1, 16392, 2, &p));  /* beyond 4*512*8 */
  CHECK(!pz_ar_plan_for(0, 7168, 2, &p));
  ov.ar_ctas_per_row = 3;
  CHECK(pz_ar_plan_for_dev(2, 2048, 2, &ov, &p) && p.ctas_per_row == 3 && p.donor_ctas == 6 && p.slice_quads == 171);
  ov.ar_ctas_per_row = 0;
  /* the plain plan ignores every override; a NULL description is the plain plan */
  CHECK(pz_ar_plan_for_dev(2, 2048, 2, NULL, &p) && p.ctas_per_row != 3);

  pz_device_desc d = desc(132, 2, 40000.0);
  /* m=1, tp=2: donor 4; bytes 61696 -> 4 fill CTAs; fill 61696/(4*40000) = 0.3856 µs;
   * donor >= 2 + 7168*14/2e6 = 2.050176 µs -> free. */
  CHECK(pz_ar_fill_ctas(&d, 4, 61696) == 4);
  CHECK_NEAR(pz_ar_fill_us(&d, 4, 61696), 0.3856, 1e-9);
  CHECK_NEAR(pz_ar_donor_us(&d, 1, 7168), 2.050176, 1e-9);
  CHECK(pz_is_prezero_free(1, n_kimi_tp2, PZ_F32, 7168, 2, &d));
  /* m=128, tp=2: donor 128; bytes 7897088 = 482*16384; spare 264-128 = 136 fill CTAs;
   * 264 <= 264 slots; fill 7897088/(136*40000) = 1.45167 µs <= 2 + 6.422528 µs -> free. */
  CHECK(pz_ar_fill_ctas(&d, 128, 7897088) == 136);
  CHECK_NEAR(pz_ar_fill_us(&d, 128, 7897088), 7897088.0 / (136 * 40000.0), 1e-9);
  CHECK(pz_is_prezero_free(128, n_kimi_tp2, PZ_F32, 7168, 2, &d));
  /* bf16 halves the bytes: m=128 -> 3948544 B = 241*16384 -> 136 CTAs still (spare). */
  CHECK(pz_ar_fill_ctas(&d, 128, 3948544) == 136);
  CHECK(pz_ar_fill_ctas(&d, 4, 0) == 0);
  /* Slow fill (1000 B/µs per CTA): m=1 fill takes 61696/4000 = 15.4 µs > 2.05 -> not free. */
  pz_device_desc slow = desc(132, 2, 1000.0);
  CHECK(!pz_is_prezero_free(1, n_kimi_tp2, PZ_F32, 7168, 2, &slow));
  /* One CTA per SM: m=128 leaves 4 fill CTAs: 7897088/(4*40000) = 49.4 µs > 8.42 -> not free. */
  pz_device_desc one = desc(132, 1, 40000.0);
  CHECK(!pz_is_prezero_free(128, n_kimi_tp2, PZ_F32, 7168, 2, &one));
  /* Wave limit: 100 SMs x 1, m=128 -> 128 donor CTAs alone exceed the wave. */
  pz_device_desc small = desc(100, 1, 1e9);
  CHECK(!pz_is_prezero_free(128, 64, PZ_F32, 7168, 2, &small));
  /* ... while m=64 at tp=1 (K=1: 64 donor + 1 fill CTA for 16 KiB) fits with a fast fill; at tp=2
   * the plan gives m=64, H=7168 two CTAs per row: 128 donor CTAs do not fit. */
  CHECK(pz_is_prezero_free(64, 64, PZ_F32, 7168, 1, &small));
  CHECK(!pz_is_prezero_free(64, 64, PZ_F32, 7168, 2, &small));
  /* The plan matters: at tp=2, m=4, H=7168 uses 16 donor CTAs (K=4); with 18 slots (18 SMs
   * x 1) a fill of 3*16384 B wants 3 CTAs but gets the 2 spare ones; 18 <= 18 fits the wave
   * and the fill takes 49152/(2*40000) = 0.6144 µs <= 2 + 4*7168*14/2e6 = 2.200704 µs -> free.
   * With 17 slots: 1 fill CTA (the minimum), 17 <= 17, 49152/40000 = 1.2288 µs -> free; with
   * 16 slots: 16 + 1 > 16 -> not free. Slow fill (132x2 slots, 3 CTAs): 16.4 µs -> not free. */
  pz_device_desc tight = desc(18, 1, 40000.0);
  CHECK(pz_ar_fill_ctas(&tight, 16, 49152) == 2);
  CHECK(pz_is_prezero_free(4, 49152 / 4 / 4, PZ_F32, 7168, 2, &tight));
  tight.num_sms = 17;
  CHECK(pz_ar_fill_ctas(&tight, 16, 49152) == 1);
  CHECK(pz_is_prezero_free(4, 49152 / 4 / 4, PZ_F32, 7168, 2, &tight));
  tight.num_sms = 16;
  CHECK(!pz_is_prezero_free(4, 49152 / 4 / 4, PZ_F32, 7168, 2, &tight));
  CHECK(!pz_is_prezero_free(4, 49152 / 4 / 4, PZ_F32, 7168, 2, &slow));
  /* At tp=1, H=5120 (no clusters) m=4 uses 4 donor CTAs: 16 slots leave room; at H=7168 the
   * TP=1 plan uses a cluster of 8 per row: 32 donor CTAs exceed the 16 slots. */
  CHECK(pz_ar_plan_for(4, 5120, 1, &p) && p.donor_ctas == 4);
  CHECK(pz_is_prezero_free(4, 49152 / 4 / 4, PZ_F32, 5120, 1, &tight));
  CHECK(!pz_is_prezero_free(4, 49152 / 4 / 4, PZ_F32, 7168, 1, &tight));

  /* Memory-system penalty: 6e6 B/µs and 0.3 µs allow 1.8 MB of fill. Kimi-K2 at tp=2 is
   * 61696 B per row: m=29 -> 1789184 B -> 0.298 µs free; m=30 -> 1850880 B -> 0.308 not free. */
  d.fill_penalty_bytes_per_us = 6.0e6;
  CHECK(pz_is_prezero_free(29, n_kimi_tp2, PZ_F32, 7168, 2, &d));
  CHECK(!pz_is_prezero_free(30, n_kimi_tp2, PZ_F32, 7168, 2, &d));
  /* bf16 halves the bytes: m=58 -> 1789184 B free, m=59 not. */
  CHECK(pz_is_prezero_free(58, n_kimi_tp2, PZ_BF16, 7168, 2, &d));
  CHECK(!pz_is_prezero_free(59, n_kimi_tp2, PZ_BF16, 7168, 2, &d));
  d.fill_penalty_bytes_per_us = 0;

  /* Legacy gate (ctas_per_sm = 0): m + ceil(m*n_total / (8*roundup(H/8, 32))) < SMs.
   * H = 7168: 8*896 = 7168 elements per fill CTA. m=1: 1 + 3 = 4 < 132; m=16: 16 + 35 = 51;
   * m=64: 64 + 138 = 202 >= 132. */
  pz_device_desc leg = desc(132, 0, 0);
  CHECK(pz_is_prezero_free(1, n_kimi_tp2, PZ_F32, 7168, 2, &leg));
  CHECK(pz_is_prezero_free(16, n_kimi_tp2, PZ_F32, 7168, 2, &leg));
  CHECK(!pz_is_prezero_free(64, n_kimi_tp2, PZ_F32, 7168, 2, &leg));

  /* Arguments out of range. */
  CHECK(!pz_is_prezero_free(0, n_kimi_tp2, PZ_F32, 7168, 2, &d));
  CHECK(!pz_is_prezero_free(1, 0, PZ_F32, 7168, 2, &d));
  CHECK(!pz_is_prezero_free(1, 64, PZ_F32, 7168, 2, NULL));

  /* Override. */
  d.force_gate = 2; /* PREZERO_FORCE_GATE=off */
  CHECK(!pz_prezero_active(1, n_kimi_tp2, PZ_F32, 7168, 2, &d));
  slow.force_gate = 1; /* on */
  CHECK(pz_prezero_active(1, 1 << 30, PZ_F32, 7168, 2, &slow));
  d.force_gate = slow.force_gate = 0;
  /* pure: the environment changes nothing once the description is fixed */
  setenv("PREZERO_FORCE_GATE", "on", 1);
  CHECK(pz_prezero_active(1, n_kimi_tp2, PZ_F32, 7168, 2, &d) == pz_is_prezero_free(1, n_kimi_tp2, PZ_F32, 7168, 2, &d));
  CHECK(pz_is_prezero_free(1, 1 << 30, PZ_F32, 7168, 2, &d) == 0);
  {
    /* ... and the options reader carries it into a description */
    pz_runtime_opts ro;
    CHECK(pz_runtime_opts_from_env(&ro, NULL, 0) == 0 && ro.force_gate == 1);
    pz_device_desc e2 = d;
    pz_device_desc_apply_opts(&e2, &ro);
    CHECK(e2.force_gate == 1 && pz_prezero_active(1, 1 << 30, PZ_F32, 7168, 2, &e2));
    setenv("PREZERO_FORCE_GATE", "maybe", 1);
    char bad[200];
    CHECK(pz_runtime_opts_from_env(&ro, bad, sizeof bad) == -1 && strstr(bad, "PREZERO_FORCE_GATE=maybe"));
  }
  unsetenv("PREZERO_FORCE_GATE");
  CHECK(pz_prezero_active(1, n_kimi_tp2, PZ_F32, 7168, 2, &d) ==
        pz_is_prezero_free(1, n_kimi_tp2, PZ_F32, 7168, 2, &d));

  /* Clusters: K CTAs of a row in one cluster; fill CTAs in multiples of K. */
  ov.ar_cluster = 2; /* PREZERO_AR_CLUSTER=1 */
  CHECK(pz_ar_plan_for_dev(1, 7168, 2, &ov, &p) && p.cluster == 4);
  CHECK(pz_ar_plan_fill_ctas(&d, &p, 61696) == 4);            /* 4 wanted -> 4 */
  CHECK(pz_ar_plan_fill_ctas(&d, &p, 5 * 16384) == 4);        /* 5 -> down to 4 */
  CHECK(pz_ar_plan_fill_ctas(&d, &p, 3 * 16384) == 4);        /* 3 -> up to one cluster */
  CHECK(pz_ar_plan_fill_ctas(&d, &p, 0) == 0);
  CHECK(pz_ar_plan_for_dev(2, 2048, 2, &ov, &p) && p.cluster == 1);    /* K = 1: no cluster */
  CHECK(pz_ar_plan_for_dev(2, 2048, 1, &ov, &p) && p.cluster == 1);
  ov.ar_cluster = 0;
  CHECK(pz_ar_plan_for(1, 7168, 2, &p) && p.cluster == 1);
  CHECK(pz_ar_plan_fill_ctas(&d, &p, 5 * 16384) == 5);

  /* Defaults are sane. */
  pz_device_desc def;
  pz_device_desc_default(&def);
  CHECK(def.num_sms == 132 && def.ctas_per_sm >= 1 && def.fill_bytes_per_us_cta > 0 && def.donor_bytes_per_us > 0);

  /* The public gate refuses a pz_gate_device outside gate.h's ranges (it answered OK with made-up
   * figures); the default passes. */
  pz_gate_device gd;
  CHECK_OK(pz_gate_device_default(&gd));
  int is_free = -1;
  pz_gate_estimate ge;
  CHECK_OK(pz_gate_is_free(&gd, 4, 2496, PZ_ELEM_F32, 7168, 2, &is_free));
  CHECK_OK(pz_gate_estimate_for(&gd, 4, 2496, PZ_ELEM_F32, 7168, 2, &ge));
  static const struct { const char *field; int which; double v; } badd[] = {
      {"fill_bytes_per_us_cta", 0, 0.0}, {"fill_bytes_per_us_cta", 0, -1.0}, {"fill_bytes_per_us_cta", 0, NAN},
      {"donor_bytes_per_us", 1, 0.0},    {"donor_bytes_per_us", 1, INFINITY}, {"donor_t0_us", 2, NAN},
      {"donor_t0_us", 2, -1.0},          {"max_added_us", 3, NAN},            {"max_added_us", 3, -0.5},
      {"fill_penalty_bytes_per_us", 4, NAN}, {"fill_min_bytes_per_cta", 5, -16384}, {"fill_min_bytes_per_cta", 5, 0}};
  for (size_t i = 0; i < sizeof badd / sizeof badd[0]; i++) {
    pz_gate_device b = gd;
    double *dv[] = {&b.fill_bytes_per_us_cta, &b.donor_bytes_per_us, &b.donor_t0_us, &b.max_added_us,
                    &b.fill_penalty_bytes_per_us};
    if (badd[i].which < 5) *dv[badd[i].which] = badd[i].v;
    else b.fill_min_bytes_per_cta = (int64_t)badd[i].v;
    pz_status s1 = pz_gate_is_free(&b, 4, 2496, PZ_ELEM_F32, 7168, 2, &is_free);
    int named = strstr(pz_last_error(), badd[i].field) != NULL;
    pz_status s2 = pz_gate_estimate_for(&b, 4, 2496, PZ_ELEM_F32, 7168, 2, &ge);
    if (s1 != PZ_ERR_INVALID_ARG || s2 != PZ_ERR_INVALID_ARG || !named || !strstr(pz_last_error(), badd[i].field)) {
      fprintf(stderr, "FAIL: gate device with %s = %g -> %s / %s (%s)\n", badd[i].field, badd[i].v,
              pz_status_string(s1), pz_status_string(s2), pz_last_error());
      pz_test_failures++;
    }
  }
  gd.fill_penalty_bytes_per_us = 0; /* <= 0: the penalty is not modelled (documented), not an error */
  CHECK_OK(pz_gate_is_free(&gd, 4, 2496, PZ_ELEM_F32, 7168, 2, &is_free));
  /* The largest fill_min_bytes_per_cta: one fill CTA, and no signed overflow on the way (UBSan reported one in
     the CTA count's rounding up) */
  gd.fill_min_bytes_per_cta = INT64_MAX;
  CHECK_OK(pz_gate_estimate_for(&gd, 4, 2496, PZ_ELEM_F32, 7168, 2, &ge));
  CHECK(ge.fill_ctas == 1);
  TEST_DONE();
}
