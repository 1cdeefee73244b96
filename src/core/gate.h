/* The prezero gate: is_prezero_free() decides, per batch size m, whether the donor's
 * zero-fill CTAs fit beside its own CTAs in one wave of the device's SMs without lengthening
 * its critical path; prezero_active() adds the environment override. The donor's launch plan
 * (pz_ar_plan) lives here too, so the gate and the CUDA launcher share one arithmetic. */
#ifndef PZ_CORE_GATE_H
#define PZ_CORE_GATE_H
#include <stdbool.h>
#include <stdint.h>
#include "core/dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What the gate knows of the device and of the donor kernel.
 * The CUDA backend fills it by calibration (pz_gate_calibrate_cuda in
 * src/backend/cuda/gate_cuda.h: SM count from cudaGetDeviceProperties, occupancy from
 * cudaOccupancyMaxActiveBlocksPerMultiprocessor on the fused kernel, fill and donor rates
 * timed on the device); the CPU backend uses pz_device_desc_default() (H200 figures). */
typedef struct pz_device_desc {
  char name[64];
  int num_sms;                  /* multiprocessors */
  int ctas_per_sm;              /* resident CTAs of the fused donor kernel per SM (its fill CTAs
                                   are CTAs of the same kernel, so one occupancy covers both) */
  double fill_bytes_per_us_cta; /* bytes one fill CTA zeroes per µs (16-byte stores), measured */
  double donor_t0_us;           /* donor time model, TP=1, no fill: t(m,H) = donor_t0_us + */
  double donor_bytes_per_us;    /*   m*H*14 bytes / donor_bytes_per_us  (14 B per element:
                                     f32 partial + residual read, f32 residual + bf16 x_norm
                                     written). A lower bound of the donor's time at any TP. */
  int64_t fill_min_bytes_per_cta; /* fill CTAs get at least this many bytes each (fewer CTAs
                                     for small fills); 16 KiB by default */
  double fill_penalty_bytes_per_us; /* measured: fill bytes per µs the fill adds to the donor's
                                     time by sharing the memory system (TP=1 donor at m=128,
                                     H=7168 with and without an 8 MiB fill) */
  double max_added_us;          /* the most the fill may add to the donor, by the penalty
                                   estimate: 0.2 µs, two thirds of the 0.3 µs target, because
                                   the penalty calibration spread over 4.4e6..7.1e6 B/µs
                                   between runs and a 2 MB fill at TP=2, m=32 added 0.3-0.7 µs */
  /* Fields of the first description of the original gate; set by pz_device_desc_default (1, 1,
   * 1, 0) but read by no rule today (the original gate below needs only num_sms). */
  int donor_ctas_per_sm, fill_ctas_per_sm, donor_rows_per_cta;
  int64_t fill_bytes_per_cta;
  /* Overrides (0 = none; set from the run-time options by pz_device_desc_apply_opts, so a
   * zero-initialised description overrides nothing): */
  int force_gate;       /* 0 the gate decides, 1 on, 2 off (PREZERO_FORCE_GATE=on|off) */
  int ar_proto;         /* 0 by size, 1 LL, 2 flag (PREZERO_AR_PROTO=ll|flag) */
  int ar_cluster;       /* 0 the default rule, 1 never, 2 wherever K is 2..8 (PREZERO_AR_CLUSTER=0|1) */
  int ar_ctas_per_row;  /* 0 by the plan, else K (PREZERO_AR_CTAS_PER_ROW) */
} pz_device_desc;

struct pz_runtime_opts;
/* Copies the gate and donor-launch overrides of o (core/options.h) into d. Every rank must use
 * the same description (the launch depends on it). */
void pz_device_desc_apply_opts(pz_device_desc *d, const struct pz_runtime_opts *o);

/* H200 defaults, measured by pz_gate_calibrate_cuda on an H200 (bench/results/ar_h200_tp1.md):
 * 132 SMs x 2 CTAs, fill 18900 B/µs per CTA, donor 2.29 µs + m*H*14 B / 4.9e6 B/µs, fill
 * penalty 6.1e6 B/µs, at most 0.2 µs added by that estimate. Used by the CPU backend. */
void pz_device_desc_default(pz_device_desc *d);

/* ---------------------------------------------------------------- donor launch plan */

#define PZ_AR_THREADS 512   /* threads per donor / fill CTA */
#define PZ_AR_MAX_TP 8
#define PZ_AR_MAX_QPT 8     /* float4 quads per thread: H <= 4*512*8 = 16384 */

/* Exchange protocols of the fused kernel (tp >= 2). LL follows NCCL's low-latency (LL)
 * protocol, written from its description (data and flag in one 8-byte word pair, so the reader
 * needs no fence); see kernels/ar_fused.cu. */
enum {
  PZ_AR_PROTO_LL = 0,   /* every 16-byte store carries 8 data bytes + the sequence number twice */
  PZ_AR_PROTO_FLAG = 1  /* raw f32 rows, then a system fence and one flag per CTA slice */
};

/* How the fused AR + residual + RMSNorm kernel is launched for (m, H, tp). Depends on these
 * three numbers only (plus PREZERO_AR_CTAS_PER_ROW / PREZERO_AR_PROTO, which must then be
 * equal on all ranks), so every rank derives the same grid (docs/ARCHITECTURE.md §8).
 *   ctas_per_row: K CTAs share one token's row, each owns a contiguous slice of ceil(H/4/K)
 *                 float4 quads; they combine their sum of squares through a local handshake.
 *   donor_ctas = m * K; quads_per_thread = ceil(slice / PZ_AR_THREADS) rounded up to 1, 2, 4
 *   or 8 (the kernel's instantiations); K is capped at H/4.
 *   proto: PZ_AR_PROTO_LL for m*H*4 <= PZ_AR_LL_MAX_BYTES, else PZ_AR_PROTO_FLAG.
 * Table (tp >= 2, from bench/results/ar_h200x2_tp2.md): see pz_ar_plan_for in gate.c;
 * tp == 1: K = 8 for m <= 8 and K = 4 for m <= 16 as thread-block clusters when H >= 6144,
 * else K = 1.
 * Returns false (and *out zeroed) when m <= 0, tp outside 1..PZ_AR_MAX_TP, H <= 0, H not a
 * multiple of 8 or H > 4*PZ_AR_THREADS*PZ_AR_MAX_QPT. m in tokens, H in elements. */
typedef struct pz_ar_plan {
  int proto;          /* PZ_AR_PROTO_LL or PZ_AR_PROTO_FLAG (only meaningful for tp >= 2) */
  int cluster;        /* K when the K CTAs of a row form a thread-block cluster and combine
                         their sums of squares through distributed shared memory (default at
                         TP=1, see below; PREZERO_AR_CLUSTER=1 everywhere K is 2..8, =0
                         never), else 1; fill CTAs then come in multiples of K too */
  int ctas_per_row;   /* K */
  int64_t donor_ctas; /* m * K */
  int quads_per_thread; /* float4 quads each thread handles: 1, 2, 4 or 8 */
  int64_t slice_quads;  /* float4 quads of a row each of the K CTAs owns: ceil(H/4 / K) */
} pz_ar_plan;
bool pz_ar_plan_for(int64_t m, int64_t H, int tp, pz_ar_plan *out);
/* The same with dev's overrides (ar_proto, ar_cluster, ar_ctas_per_row) applied; dev may be NULL
 * (then = pz_ar_plan_for). The plan the launcher and the gate use. Pure. */
bool pz_ar_plan_for_dev(int64_t m, int64_t H, int tp, const pz_device_desc *dev, pz_ar_plan *out);

/* Fill CTAs the donor launches to zero `bytes` bytes beside donor_ctas donor CTAs: as many
 * as the wave has spare slots (num_sms*ctas_per_sm - donor_ctas), at most
 * ceil(bytes / fill_min_bytes_per_cta), at least 1 when bytes > 0 (then 0). */
int64_t pz_ar_fill_ctas(const pz_device_desc *dev, int64_t donor_ctas, int64_t bytes);

/* LL protocol up to this many partial bytes per rank (m=32 rows of H=5120 f32; the LL / flag
 * crossover of the 2xH200 sweep, bench/results/ar_h200x2_tp2.md); the flag protocol above. */
#define PZ_AR_LL_MAX_BYTES (32 * 5120 * 4)

/* Fill CTAs of the real launch: pz_ar_fill_ctas rounded to a multiple of p->cluster (down
 * when at least one cluster remains, else up to one cluster). */
int64_t pz_ar_plan_fill_ctas(const pz_device_desc *dev, const pz_ar_plan *p, int64_t bytes);

/* Estimated time of the fill (µs): bytes / (fill_ctas * fill_bytes_per_us_cta). */
double pz_ar_fill_us(const pz_device_desc *dev, int64_t donor_ctas, int64_t bytes);
/* Donor time lower bound (µs): donor_t0_us + m*H*14 / donor_bytes_per_us. */
double pz_ar_donor_us(const pz_device_desc *dev, int64_t m, int64_t H);

/* True when the fill of the whole [m, n_total] buffer is free beside the donor:
 *   slots = num_sms * ctas_per_sm                         (one wave of the fused kernel)
 *   donor = pz_ar_plan_for(m, H, tp).donor_ctas           (the launch the donor really uses)
 *   bytes = m*n_total*sizeof(dt)
 *   fill  = pz_ar_plan_fill_ctas(dev, plan, bytes)
 *   free  = donor + fill <= slots                                   (same wave)
 *       AND bytes / (fill * fill_bytes_per_us_cta) <= pz_ar_donor_us(dev, m, H)  (ends in time)
 *       AND bytes / fill_penalty_bytes_per_us <= max_added_us     (memory-system share)
 * i.e. the fill CTAs run in the same wave, finish within the donor's own (TP=1, lower
 * bound) time, and their traffic adds at most max_added_us to it. The last term comes from
 * measurement: the first H200 run showed fills of 2.8 MB adding 0.45 µs to a 4 µs donor
 * although they fit and ended in time (bench/results/ar_h200_tp1.md).
 * Units: m tokens, n_total columns, H elements. Pure function of its arguments.
 * When dev->ctas_per_sm <= 0 the original gate of the seed description (quoted in docs/ARCHITECTURE.md
 * §8: one donor CTA per token, each fill CTA clears one donor row's worth) is used instead:
 *   m + ceil(m*n_total / (8*roundup(H/8, 32))) < num_sms   (tp is not read). */
bool pz_is_prezero_free(int64_t m, int64_t n_total, pz_dtype dt, int64_t H, int tp,
                        const pz_device_desc *dev);

/* prezero_active(m): the gate's answer for this batch, unless dev->force_gate overrides it
 * (PREZERO_FORCE_GATE=on|off, for tests). Evaluated per step / per captured batch size. Pure. */
bool pz_prezero_active(int64_t m, int64_t n_total, pz_dtype dt, int64_t H, int tp,
                       const pz_device_desc *dev);

#ifdef __cplusplus
}
#endif
#endif
