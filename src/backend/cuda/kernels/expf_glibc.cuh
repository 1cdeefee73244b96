/* expf_glibc: expf with the algorithm of glibc's expf, so that GPU values equal the CPU
 * reference's bit for bit (the router scores of moe_route.cu, SiLU of dense_ops.cu). Include
 * inside an anonymous namespace or a .cu file of its own: it defines a __constant__ table. */
#ifndef PZ_BACKEND_CUDA_EXPF_GLIBC_CUH
#define PZ_BACKEND_CUDA_EXPF_GLIBC_CUH
#include <cuda_runtime.h>
#include <math.h>

namespace {

// 2^(i/32) rounded to double, minus i << 47 (so that adding ki << 47 puts k/32's integer part
// into the exponent): the table of glibc's expf algorithm (sysdeps/ieee754/flt-32/e_expf.c,
// EXP2F_TABLE_BITS = 5). The values were computed here from exp2l and agree with glibc's.
__constant__ unsigned long long k_exp2_tab[32] = {
    0x3ff0000000000000ull, 0x3fefd9b0d3158574ull, 0x3fefb5586cf9890full, 0x3fef9301d0125b51ull,
    0x3fef72b83c7d517bull, 0x3fef54873168b9aaull, 0x3fef387a6e756238ull, 0x3fef1e9df51fdee1ull,
    0x3fef06fe0a31b715ull, 0x3feef1a7373aa9cbull, 0x3feedea64c123422ull, 0x3feece086061892dull,
    0x3feebfdad5362a27ull, 0x3feeb42b569d4f82ull, 0x3feeab07dd485429ull, 0x3feea47eb03a5585ull,
    0x3feea09e667f3bcdull, 0x3fee9f75e8ec5f74ull, 0x3feea11473eb0187ull, 0x3feea589994cce13ull,
    0x3feeace5422aa0dbull, 0x3feeb737b0cdc5e5ull, 0x3feec49182a3f090ull, 0x3feed503b23e255dull,
    0x3feee89f995ad3adull, 0x3feeff76f2fb5e47ull, 0x3fef199bdd85529cull, 0x3fef3720dcef9069ull,
    0x3fef5818dcfba487ull, 0x3fef7c97337b9b5full, 0x3fefa4afa2a490daull, 0x3fefd0765b6e4540ull};

// expf with the algorithm of glibc's expf, so that GPU values equal the CPU reference's bit for
// bit: x = k/32 + r (k integer, via the 1.5*2^52 rounding shift), exp(x) = 2^(k/32) * p(r) with
// p of degree 3 evaluated in double with fused multiply-adds, then one rounding to float.
// Special cases as glibc: NaN -> NaN, x > 0x1.62e42ep6 -> +inf, x < -0x1.9fe368p6 -> 0.
__device__ __forceinline__ float expf_glibc(float x) {
  if (isnan(x)) return x + x;
  if (x > 0x1.62e42ep6f) return INFINITY;
  if (x < -0x1.9fe368p6f) return 0.0f;
  const double inv_ln2_n = 0x1.71547652b82fep+0 * 32.0;  // N / ln 2
  const double shift = 0x1.8p+52;
  const double c0 = 0x1.c6af84b912394p-5 / (32.0 * 32.0 * 32.0);  // exp2 poly scaled by N^-i
  const double c1 = 0x1.ebfce50fac4f3p-3 / (32.0 * 32.0);
  const double c2 = 0x1.62e42ff0c52d6p-1 / 32.0;
  double z = __dmul_rn(inv_ln2_n, (double)x);
  double kd = __dadd_rn(z, shift);
  unsigned long long ki = (unsigned long long)__double_as_longlong(kd);
  kd = __dsub_rn(kd, shift);
  double r = __dsub_rn(z, kd);
  unsigned long long t = k_exp2_tab[ki & 31ull] + (ki << 47);
  double s = __longlong_as_double((long long)t);
  double p = __fma_rn(c0, r, c1);
  double r2 = __dmul_rn(r, r);
  double y = __fma_rn(c2, r, 1.0);
  y = __fma_rn(p, r2, y);
  y = __dmul_rn(y, s);
  return __double2float_rn(y);
}

}  // namespace
#endif
